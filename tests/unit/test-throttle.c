/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the throttle algorithm (util/throttle.c), on a fake clock. */
#include "qemu/osdep.h"
#include "qemu/throttle.h"

#define MS 1000000LL
#define SEC 1000000000LL

static ThrottleGroup *group(const char *spec)
{
    ThrottleLimits t = { 0 };
    g_auto(GStrv) kv = g_strsplit(spec, ",", -1);
    GError *err = NULL;
    ThrottleGroup *tg;

    for (char **p = kv; *p; p++) {
        g_auto(GStrv) a = g_strsplit(*p, "=", 2);
        bool known;

        g_assert_true(throttle_limits_set_key(&t, a[0],
                                              g_ascii_strtoll(a[1], NULL, 10),
                                              &known, &err));
        g_assert_true(known);
    }
    tg = throttle_group_new("tg", &t, &err);
    g_assert_no_error(err);
    return tg;
}

/* Requests admitted at @now, asking until one must wait. */
static int admit_all(ThrottleGroup *tg, bool wr, uint64_t bytes, int64_t now,
                     int64_t *wait)
{
    int n = 0;

    while ((*wait = throttle_group_try(tg, wr, bytes, now)) == 0) {
        n++;
    }
    return n;
}

/*
 * A client that sends its next request as soon as it is allowed, from
 * @from to @to: the number admitted.
 */
static int64_t run(ThrottleGroup *tg, bool wr, uint64_t bytes, int64_t from,
                   int64_t to)
{
    int64_t now = from, n = 0, w;

    while (now <= to) {
        w = throttle_group_try(tg, wr, bytes, now);
        if (w == 0) {
            n++;
        } else {
            now += w;
        }
    }
    return n;
}

static void test_iops_exact(void)
{
    ThrottleGroup *tg = group("iops-total=1000");
    int64_t w;

    /* 1 ms per request, 100 ms of slack: 101 go at once. */
    g_assert_cmpint(admit_all(tg, false, 4096, 10 * SEC, &w), ==, 101);
    g_assert_cmpint(w, ==, 1 * MS);
    /* Exactly when told, one more; then a wait of 1 ms again. */
    g_assert_cmpint(throttle_group_try(tg, true, 4096, 10 * SEC + MS), ==, 0);
    g_assert_cmpint(throttle_group_try(tg, true, 4096, 10 * SEC + MS), ==,
                    MS);
    /* Sustained: 1000/s, whatever the request size. */
    g_assert_cmpint(run(tg, false, 1 << 20, 20 * SEC, 30 * SEC), ==,
                    101 + 10000);
    throttle_group_unref(tg);
}

static void test_disabled(void)
{
    ThrottleGroup *tg = group("iops-total=0");

    g_assert_false(throttle_group_enabled(tg));
    for (int i = 0; i < 100000; i++) {
        g_assert_cmpint(throttle_group_try(tg, i & 1, 4096, SEC), ==, 0);
    }
    throttle_group_unref(tg);
}

static void test_bps(void)
{
    ThrottleGroup *tg = group("bps-read=1048576");
    int64_t w;

    /* 4 KiB = 3.90625 ms at 1 MiB/s; 100 ms slack: 26 at once. */
    g_assert_cmpint(admit_all(tg, false, 4096, SEC, &w), ==, 26);
    g_assert_cmpint(w, ==, 26 * 3906250LL - 100 * MS);
    /* Writes are not limited by a read limit. */
    for (int i = 0; i < 1000; i++) {
        g_assert_cmpint(throttle_group_try(tg, true, 1 << 20, SEC), ==, 0);
    }
    /* 10 s: 10 MiB, as 2560 requests of 4 KiB (plus the 26). */
    g_assert_cmpint(run(tg, false, 4096, 2 * SEC, 12 * SEC), ==,
                    26 + 2560);
    throttle_group_unref(tg);
}

static void test_iops_size(void)
{
    ThrottleGroup *tg = group("iops-total=100,iops-size=4096");
    int64_t w;

    /* 16 KiB counts as 4 operations: 40 ms each, 0/40/80 <= 100 ms. */
    g_assert_cmpint(admit_all(tg, true, 16384, SEC, &w), ==, 3);
    g_assert_cmpint(w, ==, 20 * MS);
    /* A small request is one operation. */
    g_assert_cmpint(throttle_group_try(tg, true, 512, SEC + 20 * MS), ==, 0);
    throttle_group_unref(tg);
}

/*
 * iops-size times the rate does not fit in 64 bits: 2^31 * 2^33 wrapped
 * to 0 and a guest's 3 GiB request divided by it (SIGFPE).  The cost is
 * bytes / iops-size operations at the rate, computed in 128 bits.
 */
static void test_iops_size_huge(void)
{
    ThrottleGroup *tg = group("iops-total=8589934592,"
                              "iops-size=2147483648");

    /* 1.5 operations at 2^33/s: 1 ns, rounded up; within the slack. */
    g_assert_cmpint(throttle_group_try(tg, false, 3ULL << 30, SEC), ==, 0);
    g_assert_cmpint(throttle_group_reserve(tg, true, 3ULL << 30, SEC), ==,
                    0);
    throttle_group_unref(tg);

    /* Also 2^64 exactly: 2^62 bytes are 2^28 operations at 2^30/s, 250 ms;
     * the next one waits for 250 - 100 ms of slack. */
    tg = group("iops-total=1073741824,iops-size=17179869184");
    g_assert_cmpint(throttle_group_try(tg, false, 1ULL << 62, SEC), ==, 0);
    g_assert_cmpint(throttle_group_try(tg, false, 1ULL << 62, SEC), ==,
                    150 * MS);
    g_assert_cmpint(throttle_group_reserve(tg, false, 1ULL << 62, SEC), ==,
                    150 * MS);
    throttle_group_unref(tg);
}

/* A request whose cost does not fit in the clock (the most bytes at one
 * byte per second) saturates the cell instead of wrapping it back to an
 * early time that would let everything through. */
static void test_cost_saturates(void)
{
    ThrottleGroup *tg = group("bps-total=1");

    g_assert_cmpint(throttle_group_try(tg, false, UINT64_MAX, SEC), ==, 0);
    g_assert_cmpint(throttle_group_try(tg, false, 1, SEC), >, 1000 * SEC);
    g_assert_cmpint(throttle_group_reserve(tg, false, UINT64_MAX, SEC), >,
                    1000 * SEC);
    g_assert_cmpint(throttle_group_reserve(tg, false, UINT64_MAX, SEC), >,
                    1000 * SEC);
    g_assert_cmpint(throttle_group_try(tg, false, 1, 2 * SEC), >, 1000 * SEC);
    throttle_group_unref(tg);
}

/*
 * The longest burst at the highest rates: max * max-length is up to
 * 2^66 and used to wrap, shrinking the bucket of the average cell from
 * 864000 s to about 126130 s.  A client at the burst rate (1e15 B/s)
 * with 2^63-byte requests charges the average cell (1e14 B/s) 92234 s
 * per 9223 s of time, 83010 s more than time gives back: the bucket of
 * 864000 s lets 11 go (the first and 10 more) before one waits on it, the
 * wrapped one only 2.
 */
static void test_burst_length_huge(void)
{
    ThrottleGroup *tg = group("bps-total=100000000000000,"
                              "bps-total-max=1000000000000000,"
                              "bps-total-max-length=86400");
    int64_t now = SEC, w;
    int n = 0;

    for (;;) {
        w = throttle_group_try(tg, false, 1ULL << 63, now);
        if (w == 0) {
            n++;
            continue;
        }
        /* Waits for the burst cell only: 9223 s less its 0.1 s slack. */
        if (w > 9224 * SEC) {
            break;
        }
        now += w;
    }
    g_assert_cmpint(n, ==, 11);
    throttle_group_unref(tg);
}

static void test_burst(void)
{
    ThrottleGroup *tg = group("iops-total=100,iops-total-max=1000,"
                              "iops-total-max-length=2");
    int64_t first, later;

    /* The burst cell (1000/s, 0.1 s) starts it: 101 at once, then
     * 1000/s while the average bucket (2000 operations) fills. */
    first = run(tg, false, 4096, SEC, 2 * SEC);
    g_assert_cmpint(first, ==, 101 + 1000);
    /* Once the bucket is full, the average rate: 100/s. */
    run(tg, false, 4096, 2 * SEC + 1, 10 * SEC);
    later = run(tg, false, 4096, 10 * SEC + 1, 20 * SEC);
    g_assert_cmpint(later, >=, 999);
    g_assert_cmpint(later, <=, 1001);
    /* A pause of the bucket's length gives the whole burst back. */
    first = run(tg, false, 4096, 50 * SEC, 51 * SEC);
    g_assert_cmpint(first, ==, 101 + 1000);
    throttle_group_unref(tg);
}

static void test_read_write_apart(void)
{
    ThrottleGroup *tg = group("iops-read=10,iops-write=1000");
    int64_t w;

    g_assert_cmpint(admit_all(tg, false, 4096, SEC, &w), ==, 2);
    g_assert_cmpint(w, ==, 100 * MS);
    g_assert_cmpint(admit_all(tg, true, 4096, SEC, &w), ==, 101);
    throttle_group_unref(tg);
}

/* Two users of one group share it: together they get the rate. */
static void test_group_shared(void)
{
    ThrottleGroup *tg = group("iops-total=2000");
    int64_t now = SEC, a = 0, b = 0;
    bool a_first = true;

    /* Each asks when it may; whoever's turn it is asks first. */
    while (now < 11 * SEC) {
        int64_t wa, wb;

        if (a_first) {
            wa = throttle_group_try(tg, false, 4096, now);
            wb = throttle_group_try(tg, true, 4096, now);
        } else {
            wb = throttle_group_try(tg, true, 4096, now);
            wa = throttle_group_try(tg, false, 4096, now);
        }
        a += wa == 0;
        b += wb == 0;
        if (wa && wb) {
            now += MIN(wa, wb);
            a_first = !a_first;
        }
    }
    g_assert_cmpint(a + b, <=, 2000 * 10 + 200 + 1);
    g_assert_cmpint(a + b, >=, 2000 * 10);
    /* Neither starves the other. */
    g_assert_cmpint(a, >=, 9000);
    g_assert_cmpint(b, >=, 9000);
    throttle_group_unref(tg);
}

static int notified;

static void count_notify(void *opaque)
{
    notified += GPOINTER_TO_INT(opaque);
}

static void test_change(void)
{
    ThrottleGroup *tg = group("iops-total=1000");
    ThrottleLimits t = { 0 }, got;
    GError *err = NULL;
    int64_t w;
    bool known;

    throttle_group_add_notifier(tg, count_notify, GINT_TO_POINTER(1));
    g_assert_cmpint(admit_all(tg, false, 4096, SEC, &w), ==, 101);
    /* Lower it: the debt is forgotten, the new rate holds at once. */
    g_assert_true(throttle_limits_set_key(&t, "iops-total", 10, &known,
                                          &err));
    g_assert_true(throttle_group_set_limits(tg, &t, &err));
    g_assert_no_error(err);
    g_assert_cmpint(notified, ==, 1);
    g_assert_cmpint(admit_all(tg, false, 4096, SEC, &w), ==, 2);
    g_assert_cmpint(w, ==, 100 * MS);
    g_assert_cmpint(run(tg, false, 4096, 2 * SEC, 12 * SEC), ==, 2 + 100);
    throttle_group_get_limits(tg, &got);
    g_assert_cmpuint(got.l[THROTTLE_OPS_TOTAL].avg, ==, 10);
    /* A bad change is refused and changes nothing. */
    t.l[THROTTLE_OPS_TOTAL].max = 5;
    g_assert_false(throttle_group_set_limits(tg, &t, &err));
    g_assert_nonnull(strstr(err->message, "iops-total-max=5 is below"));
    g_clear_error(&err);
    g_assert_cmpint(notified, ==, 1);
    throttle_group_get_limits(tg, &got);
    g_assert_cmpuint(got.l[THROTTLE_OPS_TOTAL].max, ==, 0);
    /* Off: everything goes. */
    memset(&t, 0, sizeof(t));
    g_assert_true(throttle_group_set_limits(tg, &t, &err));
    g_assert_false(throttle_group_enabled(tg));
    g_assert_cmpint(throttle_group_try(tg, false, 4096, SEC), ==, 0);
    throttle_group_remove_notifier(tg, count_notify, GINT_TO_POINTER(1));
    throttle_group_unref(tg);
}

static void expect_error(const char *key, int64_t v, const char *key2,
                         int64_t v2, const char *msg)
{
    ThrottleLimits t = { 0 };
    GError *err = NULL;
    bool known;

    if (!throttle_limits_set_key(&t, key, v, &known, &err)) {
        g_assert_true(known);
        g_assert_nonnull(err);
    } else if (key2 && !throttle_limits_set_key(&t, key2, v2, &known,
                                                &err)) {
        g_assert_nonnull(err);
    } else {
        g_assert_false(throttle_limits_check(&t, &err));
    }
    if (!strstr(err->message, msg)) {
        g_error("'%s' not in '%s'", msg, err->message);
    }
    g_error_free(err);
}

static void test_errors(void)
{
    ThrottleLimits t = { 0 };
    GError *err = NULL;
    bool known;

    expect_error("iops-total", -1, NULL, 0, "must not be negative");
    expect_error("bps-read-max", 100, NULL, 0, "needs bps-read");
    expect_error("iops-write", 100, "iops-write-max", 50,
                 "iops-write-max=50 is below iops-write=100");
    expect_error("iops-total", 100, "iops-read", 50, "cannot be combined");
    expect_error("bps-total", 100, "bps-total-max-length", 5,
                 "needs bps-total-max");
    expect_error("iops-total-max-length", 100000, NULL, 0, "too large");
    g_assert_false(throttle_limits_set_key(&t, "iops-totl", 1, &known,
                                           &err));
    g_assert_false(known);
    g_assert_no_error(err);
}

/* Many threads at one instant: exactly the slack goes, never more (the
 * compare-and-exchange admits only conforming charges). */
typedef struct Hammer {
    ThrottleGroup *tg;
    int admitted;
} Hammer;

static gpointer hammer(gpointer opaque)
{
    Hammer *h = opaque;

    for (int i = 0; i < 20000; i++) {
        h->admitted += throttle_group_try(h->tg, i & 1, 4096, 5 * SEC) == 0;
    }
    return NULL;
}

static void test_threads(void)
{
    ThrottleGroup *tg = group("iops-total=1000,bps-total=409600000");
    Hammer h[4];
    GThread *t[4];
    int total = 0;

    for (int i = 0; i < 4; i++) {
        h[i] = (Hammer) { .tg = tg };
        t[i] = g_thread_new("hammer", hammer, &h[i]);
    }
    for (int i = 0; i < 4; i++) {
        g_thread_join(t[i]);
        total += h[i].admitted;
    }
    /* The iops cell: 101 at one instant; the bps cell allows more. */
    g_assert_cmpint(total, ==, 101);
    throttle_group_unref(tg);
}

/* Reservations: every request learns its departure at once. */
static void test_reserve(void)
{
    ThrottleGroup *tg = group("iops-total=1000");

    for (int i = 0; i < 101; i++) {
        g_assert_cmpint(throttle_group_reserve(tg, false, 4096, SEC), ==, 0);
    }
    for (int i = 1; i <= 50; i++) {
        g_assert_cmpint(throttle_group_reserve(tg, i & 1, 4096, SEC), ==,
                        i * MS);
    }
    /* Later, the queue of reservations has moved on with the clock. */
    g_assert_cmpint(throttle_group_reserve(tg, false, 4096, SEC + 20 * MS),
                    ==, 31 * MS);
    throttle_group_unref(tg);

    /* Two limits: the later departure of the two, both charged. */
    tg = group("iops-read=1000,bps-read=4096000");
    for (int i = 0; i < 101; i++) {
        g_assert_cmpint(throttle_group_reserve(tg, false, 8192, SEC), ==,
                        MAX(0, (i * 2 - 100) * MS));
    }
    throttle_group_unref(tg);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

typedef struct Reserver {
    ThrottleGroup *tg;
    int64_t *out;
} Reserver;

static gpointer reserver(gpointer opaque)
{
    Reserver *r = opaque;

    for (int i = 0; i < 1000; i++) {
        r->out[i] = throttle_group_reserve(r->tg, i & 1, 4096, 5 * SEC);
    }
    return NULL;
}

/* Four threads reserving at one instant get exactly the slots a single
 * one would, each once: no lost and no doubled update. */
static void test_reserve_threads(void)
{
    ThrottleGroup *tg = group("iops-total=1000,bps-total=4096000000");
    int64_t *all = g_new0(int64_t, 4000);
    Reserver r[4];
    GThread *t[4];

    for (int i = 0; i < 4; i++) {
        r[i] = (Reserver) { .tg = tg, .out = all + i * 1000 };
        t[i] = g_thread_new("reserve", reserver, &r[i]);
    }
    for (int i = 0; i < 4; i++) {
        g_thread_join(t[i]);
    }
    qsort(all, 4000, sizeof(all[0]), cmp_i64);
    for (int i = 0; i < 4000; i++) {
        g_assert_cmpint(all[i], ==, MAX(0, i - 100) * MS);
    }
    g_free(all);
    throttle_group_unref(tg);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/throttle/iops-exact", test_iops_exact);
    g_test_add_func("/throttle/disabled", test_disabled);
    g_test_add_func("/throttle/bps", test_bps);
    g_test_add_func("/throttle/iops-size", test_iops_size);
    g_test_add_func("/throttle/iops-size-huge", test_iops_size_huge);
    g_test_add_func("/throttle/cost-saturates", test_cost_saturates);
    g_test_add_func("/throttle/burst-length-huge", test_burst_length_huge);
    g_test_add_func("/throttle/burst", test_burst);
    g_test_add_func("/throttle/read-write-apart", test_read_write_apart);
    g_test_add_func("/throttle/group-shared", test_group_shared);
    g_test_add_func("/throttle/change", test_change);
    g_test_add_func("/throttle/errors", test_errors);
    g_test_add_func("/throttle/threads", test_threads);
    g_test_add_func("/throttle/reserve", test_reserve);
    g_test_add_func("/throttle/reserve-threads", test_reserve_threads);
    return g_test_run();
}
