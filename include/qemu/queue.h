/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Small intrusive lists: QLIST (doubly linked, O(1) removal), QSLIST
 * (singly linked, push/pop at the head) and QSIMPLEQ (singly linked with a
 * tail pointer: FIFO queues, O(1) append and removal at the head).  The
 * element embeds the link (QLIST_ENTRY / QSLIST_ENTRY / QSIMPLEQ_ENTRY),
 * so insertion never allocates.  Not thread-safe: the owner of the list
 * serialises access.
 */
#ifndef QEMU_QUEUE_H
#define QEMU_QUEUE_H

/* Doubly linked list. */
#define QLIST_HEAD(name, type)                                          \
    struct name {                                                       \
        struct type *lh_first;                                          \
    }

#define QLIST_HEAD_INITIALIZER(head) { NULL }

#define QLIST_ENTRY(type)                                               \
    struct {                                                            \
        struct type *le_next;                                           \
        struct type **le_prev;  /* address of the previous le_next */   \
    }

#define QLIST_INIT(head) ((head)->lh_first = NULL)
#define QLIST_EMPTY(head) ((head)->lh_first == NULL)
#define QLIST_FIRST(head) ((head)->lh_first)
#define QLIST_NEXT(elm, field) ((elm)->field.le_next)
#define QLIST_IS_INSERTED(elm, field) ((elm)->field.le_prev != NULL)

#define QLIST_INSERT_HEAD(head, elm, field) do {                        \
        if (((elm)->field.le_next = (head)->lh_first) != NULL) {        \
            (head)->lh_first->field.le_prev = &(elm)->field.le_next;    \
        }                                                               \
        (head)->lh_first = (elm);                                       \
        (elm)->field.le_prev = &(head)->lh_first;                       \
    } while (0)

#define QLIST_REMOVE(elm, field) do {                                   \
        if ((elm)->field.le_next != NULL) {                             \
            (elm)->field.le_next->field.le_prev = (elm)->field.le_prev; \
        }                                                               \
        *(elm)->field.le_prev = (elm)->field.le_next;                   \
        (elm)->field.le_next = NULL;                                    \
        (elm)->field.le_prev = NULL;                                    \
    } while (0)

#define QLIST_FOREACH(var, head, field)                                 \
    for ((var) = (head)->lh_first; (var); (var) = (var)->field.le_next)

/* Safe against removal of @var inside the loop body. */
#define QLIST_FOREACH_SAFE(var, head, field, next_var)                  \
    for ((var) = (head)->lh_first;                                      \
         (var) && ((next_var) = (var)->field.le_next, 1);               \
         (var) = (next_var))

/* Singly linked list. */
#define QSLIST_HEAD(name, type)                                         \
    struct name {                                                       \
        struct type *slh_first;                                         \
    }

#define QSLIST_HEAD_INITIALIZER(head) { NULL }

#define QSLIST_ENTRY(type)                                              \
    struct {                                                            \
        struct type *sle_next;                                          \
    }

#define QSLIST_INIT(head) ((head)->slh_first = NULL)
#define QSLIST_EMPTY(head) ((head)->slh_first == NULL)
#define QSLIST_FIRST(head) ((head)->slh_first)
#define QSLIST_NEXT(elm, field) ((elm)->field.sle_next)

#define QSLIST_INSERT_HEAD(head, elm, field) do {                       \
        (elm)->field.sle_next = (head)->slh_first;                      \
        (head)->slh_first = (elm);                                      \
    } while (0)

#define QSLIST_REMOVE_HEAD(head, field) do {                            \
        (head)->slh_first = (head)->slh_first->field.sle_next;          \
    } while (0)

#define QSLIST_FOREACH(var, head, field)                                \
    for ((var) = (head)->slh_first; (var); (var) = (var)->field.sle_next)

#define QSLIST_FOREACH_SAFE(var, head, field, next_var)                 \
    for ((var) = (head)->slh_first;                                     \
         (var) && ((next_var) = (var)->field.sle_next, 1);              \
         (var) = (next_var))

/*
 * Simple queue: FIFO.  sqh_last points at the link to fill on the next
 * append (&sqh_first when empty), so appending needs no branch.
 */
#define QSIMPLEQ_HEAD(name, type)                                       \
    struct name {                                                       \
        struct type *sqh_first;                                         \
        struct type **sqh_last;                                         \
    }

#define QSIMPLEQ_HEAD_INITIALIZER(head) { NULL, &(head).sqh_first }

#define QSIMPLEQ_ENTRY(type)                                            \
    struct {                                                            \
        struct type *sqe_next;                                          \
    }

#define QSIMPLEQ_INIT(head) do {                                        \
        (head)->sqh_first = NULL;                                       \
        (head)->sqh_last = &(head)->sqh_first;                          \
    } while (0)

#define QSIMPLEQ_EMPTY(head) ((head)->sqh_first == NULL)
#define QSIMPLEQ_FIRST(head) ((head)->sqh_first)
#define QSIMPLEQ_NEXT(elm, field) ((elm)->field.sqe_next)

#define QSIMPLEQ_INSERT_TAIL(head, elm, field) do {                     \
        (elm)->field.sqe_next = NULL;                                   \
        *(head)->sqh_last = (elm);                                      \
        (head)->sqh_last = &(elm)->field.sqe_next;                      \
    } while (0)

/* Unlink the first element (the queue must not be empty). */
#define QSIMPLEQ_REMOVE_HEAD(head, field) do {                          \
        (head)->sqh_first = (head)->sqh_first->field.sqe_next;          \
        if ((head)->sqh_first == NULL) {                                \
            (head)->sqh_last = &(head)->sqh_first;                      \
        }                                                               \
    } while (0)

/* Append every element of @head2 to @head1 and leave @head2 empty. */
#define QSIMPLEQ_CONCAT(head1, head2) do {                              \
        if (!QSIMPLEQ_EMPTY(head2)) {                                   \
            *(head1)->sqh_last = (head2)->sqh_first;                    \
            (head1)->sqh_last = (head2)->sqh_last;                      \
            QSIMPLEQ_INIT(head2);                                       \
        }                                                               \
    } while (0)

#define QSIMPLEQ_FOREACH(var, head, field)                              \
    for ((var) = (head)->sqh_first; (var); (var) = (var)->field.sqe_next)

/* Safe against the removal or reuse of @var by the loop body. */
#define QSIMPLEQ_FOREACH_SAFE(var, head, field, next_var)               \
    for ((var) = (head)->sqh_first;                                     \
         (var) && ((next_var) = (var)->field.sqe_next, 1);              \
         (var) = (next_var))

#endif
