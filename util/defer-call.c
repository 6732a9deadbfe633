/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * defer_call: thread-local batching sections (plug/unplug).
 *
 * Each thread has a nesting counter and a list of (fn, opaque) pairs.  The
 * first DEFER_CALL_FIXED entries live in a fixed array; beyond that a GArray
 * takes the rest and is kept for later sections, so steady state never
 * allocates.  At the end of the outermost section the pairs run in
 * registration order.  The section stays open while they run: a pair
 * registered meanwhile is appended (once, if it is not already waiting) and
 * runs in the same flush, even a pair that already ran in it.
 */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"

#define DEFER_CALL_FIXED 64

typedef struct DeferredCall {
    void (*fn)(void *opaque);
    void *opaque;
} DeferredCall;

typedef struct DeferCallThreadState {
    unsigned nesting;
    unsigned count;         /* entries in fixed + extra */
    unsigned next_run;      /* first entry not yet run while flushing */
    DeferredCall fixed[DEFER_CALL_FIXED];
    GArray *extra;          /* entries count >= DEFER_CALL_FIXED */
} DeferCallThreadState;

static __thread DeferCallThreadState defer_call_state;

static void defer_call_free_extra(gpointer data)
{
    g_array_free(data, TRUE);
}

/* Frees the GArray when the thread exits. */
static GPrivate defer_call_extra_key = G_PRIVATE_INIT(defer_call_free_extra);

static DeferredCall *defer_call_entry(DeferCallThreadState *s, unsigned i)
{
    if (i < DEFER_CALL_FIXED) {
        return &s->fixed[i];
    }
    return &g_array_index(s->extra, DeferredCall, i - DEFER_CALL_FIXED);
}

/* Any thread; sections are per thread. */
void defer_call_begin(void)
{
    DeferCallThreadState *s = &defer_call_state;

    assert(s->nesting < UINT_MAX);
    s->nesting++;
}

/* Any thread, paired with defer_call_begin() in the same thread. */
void defer_call_end(void)
{
    DeferCallThreadState *s = &defer_call_state;

    assert(s->nesting > 0);
    if (s->nesting > 1) {
        s->nesting--;
        return;
    }

    /* Outermost section: run everything, including late registrations. */
    while (s->next_run < s->count) {
        DeferredCall call = *defer_call_entry(s, s->next_run);

        s->next_run++;
        call.fn(call.opaque);
    }
    s->count = 0;
    s->next_run = 0;
    if (s->extra) {
        g_array_set_size(s->extra, 0);
    }
    s->nesting = 0;
}

/* Any thread. */
void defer_call(void (*fn)(void *opaque), void *opaque)
{
    DeferCallThreadState *s = &defer_call_state;
    DeferredCall call = { .fn = fn, .opaque = opaque };
    unsigned i;

    if (s->nesting == 0) {
        fn(opaque);
        return;
    }

    /* Already waiting to run?  Then it runs once, later. */
    for (i = s->next_run; i < s->count; i++) {
        DeferredCall *c = defer_call_entry(s, i);

        if (c->fn == fn && c->opaque == opaque) {
            return;
        }
    }

    if (s->count < DEFER_CALL_FIXED) {
        s->fixed[s->count] = call;
    } else {
        if (!s->extra) {
            s->extra = g_array_sized_new(FALSE, FALSE, sizeof(DeferredCall),
                                         DEFER_CALL_FIXED);
            g_private_set(&defer_call_extra_key, s->extra);
        }
        g_array_append_val(s->extra, call);
    }
    s->count++;
}
