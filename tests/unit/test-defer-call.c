/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for defer_call sections (batching until the outermost end). */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"

typedef struct Counter {
    int runs;
    int order;          /* value of next_order when it ran */
} Counter;

static int next_order;

static void count_cb(void *opaque)
{
    Counter *c = opaque;

    c->runs++;
    c->order = next_order++;
}

static void test_once_per_section(void)
{
    Counter a = { 0 }, b = { 0 };

    next_order = 0;
    defer_call_begin();
    defer_call(count_cb, &a);
    defer_call(count_cb, &b);
    defer_call(count_cb, &a);
    defer_call(count_cb, &a);
    g_assert_cmpint(a.runs, ==, 0);
    g_assert_cmpint(b.runs, ==, 0);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 1);
    g_assert_cmpint(b.runs, ==, 1);
    /* Registration order. */
    g_assert_cmpint(a.order, ==, 0);
    g_assert_cmpint(b.order, ==, 1);

    /* A new section starts empty. */
    defer_call_begin();
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 1);
    defer_call_begin();
    defer_call(count_cb, &a);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 2);
}

static void test_nested(void)
{
    Counter a = { 0 };

    defer_call_begin();
    defer_call_begin();
    defer_call(count_cb, &a);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 0);     /* inner end does not flush */
    defer_call_begin();
    defer_call(count_cb, &a);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 0);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 1);
}

static void test_outside_section(void)
{
    Counter a = { 0 };

    defer_call(count_cb, &a);
    g_assert_cmpint(a.runs, ==, 1);
    defer_call(count_cb, &a);
    g_assert_cmpint(a.runs, ==, 2);
}

typedef struct Chain {
    Counter self;
    Counter *other;     /* registered while this one runs */
    int again;          /* times to register itself again */
} Chain;

static void chain_cb(void *opaque)
{
    Chain *c = opaque;

    c->self.runs++;
    if (c->other) {
        defer_call(count_cb, c->other);
    }
    if (c->again > 0) {
        c->again--;
        defer_call(chain_cb, c);
    }
    /* A section opened inside a flushed call nests in the flush. */
    defer_call_begin();
    if (c->other) {
        defer_call(count_cb, c->other);
    }
    defer_call_end();
}

static void test_registered_during_flush(void)
{
    Counter b = { 0 };
    Chain a = { .other = &b, .again = 2 };

    defer_call_begin();
    defer_call(chain_cb, &a);
    defer_call_end();
    /* a ran 3 times (itself re-registered twice); b once per a run. */
    g_assert_cmpint(a.self.runs, ==, 3);
    g_assert_cmpint(b.runs, ==, 3);

    /* Nothing left over for the next section. */
    defer_call_begin();
    defer_call_end();
    g_assert_cmpint(a.self.runs, ==, 3);
    g_assert_cmpint(b.runs, ==, 3);
}

/* More distinct pairs than the fixed array holds: still each once. */
static void test_many(void)
{
    Counter c[200] = { 0 };
    int round, i;

    for (round = 0; round < 3; round++) {
        next_order = 0;
        defer_call_begin();
        for (i = 0; i < 200; i++) {
            defer_call(count_cb, &c[i]);
            defer_call(count_cb, &c[i / 2]);
        }
        defer_call_end();
        for (i = 0; i < 200; i++) {
            g_assert_cmpint(c[i].runs, ==, round + 1);
            g_assert_cmpint(c[i].order, ==, i);
        }
    }
}

static gpointer other_thread(gpointer opaque)
{
    Counter *c = opaque;

    /* Not inside the main thread's section: runs at once. */
    defer_call(count_cb, c);
    return GINT_TO_POINTER(c->runs);
}

static void test_thread_local(void)
{
    Counter a = { 0 };
    GThread *t;

    defer_call_begin();
    t = g_thread_new("defer", other_thread, &a);
    g_assert_cmpint(GPOINTER_TO_INT(g_thread_join(t)), ==, 1);
    defer_call(count_cb, &a);
    g_assert_cmpint(a.runs, ==, 1);
    defer_call_end();
    g_assert_cmpint(a.runs, ==, 2);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/defer-call/once-per-section", test_once_per_section);
    g_test_add_func("/defer-call/nested", test_nested);
    g_test_add_func("/defer-call/outside-section", test_outside_section);
    g_test_add_func("/defer-call/registered-during-flush",
                    test_registered_during_flush);
    g_test_add_func("/defer-call/many", test_many);
    g_test_add_func("/defer-call/thread-local", test_thread_local);
    return g_test_run();
}
