/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Small intrusive lists: QLIST (doubly linked, O(1) removal) and QSLIST
 * (singly linked, push/pop at the head).  The element embeds the link
 * (QLIST_ENTRY / QSLIST_ENTRY), so insertion never allocates.  Not
 * thread-safe: the owner of the list serialises access.
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

#endif
