/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Throttle groups: lock-free rate limiting shared by every thread that
 * submits to the group (see include/qemu/throttle.h).
 *
 * Theory of operation: each limit is one or two GCRA cells (the generic
 * cell rate algorithm, i.e. a leaky bucket kept as a virtual time).  A
 * cell has a rate R (units per second: bytes or operations), a tolerance
 * tau (ns) and one word of state, TAT, the "theoretical arrival time": the
 * instant at which everything admitted so far would have drained at rate
 * R.  A request costing c units at time now conforms when
 *
 *     max(TAT, now) - now <= tau
 *
 * and is then charged by TAT := max(TAT, now) + c * 1e9 / R (rounded up,
 * so that rounding never lets more through than R).  If it does not
 * conform, it may ask again after max(TAT, now) - tau - now ns.  tau is
 * the bucket: a cell lets tau * R units go at once after a pause, and
 * afterwards exactly R per second.  The bound the tests rely on follows:
 * in any window of d seconds a cell admits at most R * d + tau * R + 1
 * requests' worth (every admission moves TAT by its cost, and the last
 * one still saw TAT - now <= tau).
 *
 * QEMU's limit {avg, max, max-length} maps to an average cell (R = avg,
 * tau = max * max-length / avg seconds, or 0.1 s without max: QEMU's
 * avg / 10 slack) and, with max, a burst cell (R = max, tau = 0.1 s) so
 * a burst runs no faster than max.
 *
 * Concurrency: the state of a cell is one 64-bit word, updated with one
 * compare-and-exchange per cell per request (retried only when another
 * thread charged the same cell in between); no lock is taken.  A request
 * is first checked against every cell it falls under without writing
 * (so a request that must wait charges nothing), then charged cell by
 * cell; if a racing request used up a cell in between, the cells already
 * charged are refunded (atomic subtract of what was added) and the
 * request waits.  Refunds make the accounting conservative, never
 * generous: a cell only ever admits conforming charges.
 *
 * throttle_group_reserve() is the same cell used as a scheduler: the
 * request's departure is the earliest time every cell conforms,
 * max(now, TAT - tau) over its cells, and each cell is charged as of
 * then, TAT := max(TAT, departure) + cost, whether that is now or later.
 * The request then waits until its departure (the block filter holds
 * it); reservations are granted in arrival order, so the users of a group
 * are served first come, first served, and since a request never leaves
 * before its departure the same bound holds for any window that starts
 * when the requests in it were submitted.  A racing reservation that
 * pushes a cell past the departure makes it refund and compute again.
 *
 * The limits themselves are an immutable ThrottleConfig published with a
 * release store of one pointer (NULL: no limit, the callers' fast path);
 * set_limits swaps it and resets the TATs.  Readers may still use the old
 * config for a request or two, so old configs are kept until the group
 * is freed (they are small and changed by an operator, not per request).
 */
#include "qemu/osdep.h"
#include "qemu/throttle.h"

#define NS_PER_SEC 1000000000ULL
/* Without max, QEMU lets a bucket run avg / 10 ahead: 0.1 s of rate. */
#define THROTTLE_SLACK_NS (NS_PER_SEC / 10)

typedef struct ThrottleCell {
    uint64_t rate;              /* units per second; 0 = unused */
    int64_t tau;                /* tolerance, ns */
    int64_t op_ns;              /* iops: the cost of one operation */
} ThrottleCell;

#define THROTTLE_CELLS (THROTTLE__MAX * 2)

typedef struct ThrottleConfig {
    ThrottleCell cell[THROTTLE__MAX][2];    /* [kind][0 avg, 1 burst] */
    uint64_t iops_size;
    /* The cells in use by a read [0] and by a write [1], as indices
     * kind * 2 + (0 avg, 1 burst), so a request visits only those. */
    uint8_t n_used[2];
    uint8_t used[2][THROTTLE_CELLS];
} ThrottleConfig;

struct ThrottleGroup {
    char *name;
    unsigned int refs;          /* main thread */
    ThrottleLimits limits;      /* main thread */
    _Atomic(ThrottleConfig *) cfg;
    _Atomic uint64_t generation;    /* set_limits calls */
    GPtrArray *retired;         /* old configs, main thread */
    GList *notifiers;           /* ThrottleNotifier, main thread */
    /* TAT of each cell, ns; written by every submitting thread. */
    _Atomic int64_t tat[THROTTLE__MAX][2] __attribute__((aligned(64)));
};

typedef struct ThrottleNotifier {
    void (*fn)(void *opaque);
    void *opaque;
} ThrottleNotifier;

static const char *const throttle_names[THROTTLE__MAX] = {
    [THROTTLE_BPS_TOTAL] = "bps-total",
    [THROTTLE_BPS_READ] = "bps-read",
    [THROTTLE_BPS_WRITE] = "bps-write",
    [THROTTLE_OPS_TOTAL] = "iops-total",
    [THROTTLE_OPS_READ] = "iops-read",
    [THROTTLE_OPS_WRITE] = "iops-write",
};

const char *throttle_kind_name(ThrottleKind k)
{
    return throttle_names[k];
}

bool throttle_limits_set_key(ThrottleLimits *t, const char *key,
                             int64_t value, bool *known, GError **errp)
{
    uint64_t *dst = NULL;
    bool length = false;

    *known = false;
    if (!strcmp(key, "iops-size")) {
        dst = &t->iops_size;
    }
    for (int k = 0; !dst && k < THROTTLE__MAX; k++) {
        size_t n = strlen(throttle_names[k]);

        if (strncmp(key, throttle_names[k], n)) {
            continue;
        }
        if (!key[n]) {
            dst = &t->l[k].avg;
        } else if (!strcmp(key + n, "-max")) {
            dst = &t->l[k].max;
        } else if (!strcmp(key + n, "-max-length")) {
            dst = &t->l[k].max_length;
            length = true;
        }
    }
    if (!dst) {
        return false;
    }
    *known = true;
    if (value < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s=%" PRId64 ": a limit must not be "
                    "negative; give 0 for no limit or a positive number",
                    key, value);
        return false;
    }
    if (length ? (uint64_t)value > THROTTLE_MAX_LENGTH_LIMIT
               : (uint64_t)value > THROTTLE_VALUE_LIMIT) {
        g_set_error(errp, VB_ERROR, 0, "%s=%" PRId64 " is too large: use at "
                    "most %" PRIu64 "%s", key, value,
                    length ? (uint64_t)THROTTLE_MAX_LENGTH_LIMIT :
                    (uint64_t)THROTTLE_VALUE_LIMIT,
                    length ? " (seconds)" : "");
        return false;
    }
    *dst = value;
    return true;
}

bool throttle_limits_check(const ThrottleLimits *t, GError **errp)
{
    for (int k = 0; k < THROTTLE__MAX; k++) {
        const ThrottleLimit *l = &t->l[k];
        const char *n = throttle_names[k];

        if (l->max && !l->avg) {
            g_set_error(errp, VB_ERROR, 0, "%s-max=%" PRIu64 " needs %s (the "
                        "average rate the burst returns to): set %s too",
                        n, l->max, n, n);
            return false;
        }
        if (l->max && l->max < l->avg) {
            g_set_error(errp, VB_ERROR, 0, "%s-max=%" PRIu64 " is below %s=%"
                        PRIu64 ": the burst rate must be at least the "
                        "average; raise %s-max or lower %s", n, l->max, n,
                        l->avg, n, n);
            return false;
        }
        if (l->max_length > 1 && !l->max) {
            g_set_error(errp, VB_ERROR, 0, "%s-max-length=%" PRIu64 " needs "
                        "%s-max (the burst rate): set it or drop the length",
                        n, l->max_length, n);
            return false;
        }
    }
    for (int k = 0; k < THROTTLE__MAX; k += 3) {
        if ((t->l[k].avg || t->l[k].max) &&
            (t->l[k + 1].avg || t->l[k + 1].max ||
             t->l[k + 2].avg || t->l[k + 2].max)) {
            g_set_error(errp, VB_ERROR, 0, "%s cannot be combined with %s or "
                        "%s (as in QEMU): limit the total or reads and "
                        "writes apart", throttle_names[k],
                        throttle_names[k + 1], throttle_names[k + 2]);
            return false;
        }
    }
    return true;
}

bool throttle_limits_enabled(const ThrottleLimits *t)
{
    for (int k = 0; k < THROTTLE__MAX; k++) {
        if (t->l[k].avg) {
            return true;
        }
    }
    return false;
}

void throttle_limits_foreach(const ThrottleLimits *t,
                             void (*fn)(void *opaque, const char *key,
                                        uint64_t value),
                             void *opaque)
{
    for (int k = 0; k < THROTTLE__MAX; k++) {
        g_autofree char *max = g_strdup_printf("%s-max", throttle_names[k]);
        g_autofree char *len = g_strdup_printf("%s-max-length",
                                               throttle_names[k]);

        fn(opaque, throttle_names[k], t->l[k].avg);
        fn(opaque, max, t->l[k].max);
        fn(opaque, len, t->l[k].max_length ? t->l[k].max_length : 1);
    }
    fn(opaque, "iops-size", t->iops_size);
}

/*
 * ceil(a * b / (c * d)), saturated at INT64_MAX; c, d > 0.  Every value
 * is at most 2^64, and the limits at most THROTTLE_VALUE_LIMIT (< 2^50),
 * so 128 bits hold both products: a 64-bit c * d (iops-size times a rate)
 * would wrap, to 0 for iops-size=2^31 with iops-total=2^33, and divide by
 * zero on a guest's request.
 */
static uint64_t throttle_muldiv2_up(uint64_t a, uint64_t b, uint64_t c,
                                    uint64_t d)
{
    unsigned __int128 p = (unsigned __int128)a * b;
    unsigned __int128 div = (unsigned __int128)c * d;
    unsigned __int128 q = p / div + (p % div != 0);

    return q > INT64_MAX ? INT64_MAX : (uint64_t)q;
}

/* ceil(a * b / c) without overflow; c > 0. */
static uint64_t throttle_muldiv_up(uint64_t a, uint64_t b, uint64_t c)
{
    return throttle_muldiv2_up(a, b, c, 1);
}

/* a + b for a TAT, b >= 0: saturated instead of wrapping past INT64_MAX
 * (a cost may be INT64_MAX, for a huge request at a tiny rate). */
static inline int64_t throttle_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* The limits a request falls under: kind k applies if @mask bit k. */
static unsigned int throttle_mask(bool is_write)
{
    return 1u << THROTTLE_BPS_TOTAL | 1u << THROTTLE_OPS_TOTAL |
           (is_write ? 1u << THROTTLE_BPS_WRITE | 1u << THROTTLE_OPS_WRITE
                     : 1u << THROTTLE_BPS_READ | 1u << THROTTLE_OPS_READ);
}

/* The cells of @t, or NULL if no limit is set. */
static ThrottleConfig *throttle_config_new(const ThrottleLimits *t)
{
    ThrottleConfig *c;

    if (!throttle_limits_enabled(t)) {
        return NULL;
    }
    c = g_new0(ThrottleConfig, 1);
    c->iops_size = t->iops_size;
    for (int k = 0; k < THROTTLE__MAX; k++) {
        const ThrottleLimit *l = &t->l[k];
        uint64_t len = l->max_length ? l->max_length : 1;

        if (!l->avg) {
            continue;
        }
        c->cell[k][0].rate = l->avg;
        /* max * len reaches 2^66: multiply in 128 bits, not before. */
        c->cell[k][0].tau = l->max ?
            (int64_t)throttle_muldiv2_up(l->max, len * NS_PER_SEC, l->avg,
                                         1) :
            (int64_t)THROTTLE_SLACK_NS;
        if (l->max) {
            c->cell[k][1].rate = l->max;
            c->cell[k][1].tau = THROTTLE_SLACK_NS;
        }
    }
    for (int k = 0; k < THROTTLE__MAX; k++) {
        for (int b = 0; b < 2; b++) {
            ThrottleCell *cell = &c->cell[k][b];

            if (!cell->rate) {
                continue;
            }
            cell->op_ns = throttle_muldiv_up(1, NS_PER_SEC, cell->rate);
            for (int w = 0; w < 2; w++) {
                if (throttle_mask(w) & (1u << k)) {
                    c->used[w][c->n_used[w]++] = k * 2 + b;
                }
            }
        }
    }
    return c;
}

ThrottleGroup *throttle_group_new(const char *name,
                                  const ThrottleLimits *limits,
                                  GError **errp)
{
    ThrottleGroup *tg;

    if (!throttle_limits_check(limits, errp)) {
        return NULL;
    }
    tg = g_new0(ThrottleGroup, 1);
    tg->name = g_strdup(name);
    tg->refs = 1;
    tg->limits = *limits;
    tg->retired = g_ptr_array_new_with_free_func(g_free);
    atomic_store_explicit(&tg->cfg, throttle_config_new(limits),
                          memory_order_release);
    return tg;
}

ThrottleGroup *throttle_group_ref(ThrottleGroup *tg)
{
    tg->refs++;
    return tg;
}

void throttle_group_unref(ThrottleGroup *tg)
{
    if (!tg || --tg->refs) {
        return;
    }
    g_free(atomic_load_explicit(&tg->cfg, memory_order_relaxed));
    g_ptr_array_free(tg->retired, true);
    g_list_free_full(tg->notifiers, g_free);
    g_free(tg->name);
    g_free(tg);
}

const char *throttle_group_name(ThrottleGroup *tg)
{
    return tg->name;
}

unsigned int throttle_group_refs(ThrottleGroup *tg)
{
    return tg->refs;
}

bool throttle_group_set_limits(ThrottleGroup *tg,
                               const ThrottleLimits *limits, GError **errp)
{
    ThrottleConfig *old;

    if (!throttle_limits_check(limits, errp)) {
        return false;
    }
    tg->limits = *limits;
    /* Pairs with the acquire load in throttle_group_try(). */
    old = atomic_exchange_explicit(&tg->cfg, throttle_config_new(limits),
                                   memory_order_acq_rel);
    if (old) {
        g_ptr_array_add(tg->retired, old);
    }
    for (int k = 0; k < THROTTLE__MAX; k++) {
        atomic_store_explicit(&tg->tat[k][0], 0, memory_order_relaxed);
        atomic_store_explicit(&tg->tat[k][1], 0, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&tg->generation, 1, memory_order_release);
    for (GList *l = tg->notifiers; l; l = l->next) {
        ThrottleNotifier *n = l->data;

        n->fn(n->opaque);
    }
    return true;
}

uint64_t throttle_group_generation(ThrottleGroup *tg)
{
    /* Pairs with the increment in throttle_group_set_limits(). */
    return atomic_load_explicit(&tg->generation, memory_order_acquire);
}

void throttle_group_get_limits(ThrottleGroup *tg, ThrottleLimits *limits)
{
    *limits = tg->limits;
}

void throttle_group_add_notifier(ThrottleGroup *tg, void (*fn)(void *),
                                 void *opaque)
{
    ThrottleNotifier *n = g_new0(ThrottleNotifier, 1);

    n->fn = fn;
    n->opaque = opaque;
    tg->notifiers = g_list_append(tg->notifiers, n);
}

void throttle_group_remove_notifier(ThrottleGroup *tg, void (*fn)(void *),
                                    void *opaque)
{
    for (GList *l = tg->notifiers; l; l = l->next) {
        ThrottleNotifier *n = l->data;

        if (n->fn == fn && n->opaque == opaque) {
            tg->notifiers = g_list_delete_link(tg->notifiers, l);
            g_free(n);
            return;
        }
    }
}

bool throttle_group_enabled(ThrottleGroup *tg)
{
    return atomic_load_explicit(&tg->cfg, memory_order_relaxed) != NULL;
}

/* What one request adds to the TAT of a cell of kind @k. */
static int64_t throttle_cost(const ThrottleConfig *c, int k,
                             const ThrottleCell *cell, uint64_t bytes)
{
    if (k <= THROTTLE_BPS_WRITE) {
        if (likely(bytes <= UINT64_MAX / NS_PER_SEC)) {
            return (bytes * NS_PER_SEC + cell->rate - 1) / cell->rate;
        }
        return throttle_muldiv_up(bytes, NS_PER_SEC, cell->rate);
    }
    if (c->iops_size && bytes > c->iops_size) {
        /* bytes / iops_size operations, fractions included (QEMU). */
        return throttle_muldiv2_up(bytes, NS_PER_SEC, c->iops_size,
                                   cell->rate);
    }
    return cell->op_ns;
}

int64_t throttle_group_try(ThrottleGroup *tg, bool is_write, uint64_t bytes,
                           int64_t now)
{
    /* Pairs with the exchange in throttle_group_set_limits(). */
    const ThrottleConfig *c = atomic_load_explicit(&tg->cfg,
                                                   memory_order_acquire);
    unsigned int mask = throttle_mask(is_write);
    int64_t wait = 0;
    int64_t charged[THROTTLE__MAX][2] = { { 0 } };

    if (!c) {
        return 0;
    }
    /* Pass 1, no writes: the longest wait of any cell. */
    for (int k = 0; k < THROTTLE__MAX; k++) {
        for (int b = 0; b < 2 && (mask & (1u << k)); b++) {
            const ThrottleCell *cell = &c->cell[k][b];
            int64_t tat, w;

            if (!cell->rate) {
                continue;
            }
            tat = atomic_load_explicit(&tg->tat[k][b], memory_order_relaxed);
            w = MAX(tat, now) - now - cell->tau;
            wait = MAX(wait, w);
        }
    }
    if (wait > 0) {
        return wait;
    }
    /* Pass 2: charge every cell, one compare-exchange each. */
    for (int k = 0; k < THROTTLE__MAX; k++) {
        for (int b = 0; b < 2 && (mask & (1u << k)); b++) {
            const ThrottleCell *cell = &c->cell[k][b];
            int64_t inc, tat, base;

            if (!cell->rate) {
                continue;
            }
            inc = throttle_cost(c, k, cell, bytes);
            tat = atomic_load_explicit(&tg->tat[k][b], memory_order_relaxed);
            do {
                base = MAX(tat, now);
                if (base - now > cell->tau) {
                    /* A racing request took it: give back, then wait. */
                    wait = base - now - cell->tau;
                    goto refund;
                }
            } while (!atomic_compare_exchange_weak_explicit(
                         &tg->tat[k][b], &tat, throttle_add(base, inc),
                         memory_order_relaxed, memory_order_relaxed));
            charged[k][b] = throttle_add(base, inc) - base;
        }
    }
    return 0;

refund:
    for (int k = 0; k < THROTTLE__MAX; k++) {
        for (int b = 0; b < 2; b++) {
            if (charged[k][b]) {
                atomic_fetch_sub_explicit(&tg->tat[k][b], charged[k][b],
                                          memory_order_relaxed);
            }
        }
    }
    return wait;
}

/* The state word of cell @i (kind * 2 + avg/burst). */
static inline _Atomic int64_t *throttle_tat(ThrottleGroup *tg, int i)
{
    return &tg->tat[i / 2][i % 2];
}

/* Give back what pass 2 of throttle_group_reserve() charged: the first
 * @n cells of @used. */
static void throttle_refund(ThrottleGroup *tg, const uint8_t *used, int n,
                            const int64_t *before, const int64_t *after)
{
    for (int j = 0; j < n; j++) {
        _Atomic int64_t *t = throttle_tat(tg, used[j]);
        int64_t expect = after[j];

        /* Undo exactly if nobody charged since, else take off ours. */
        if (!atomic_compare_exchange_strong_explicit(
                t, &expect, before[j], memory_order_relaxed,
                memory_order_relaxed)) {
            atomic_fetch_sub_explicit(t, after[j] - before[j],
                                      memory_order_relaxed);
        }
    }
}

int64_t throttle_group_reserve(ThrottleGroup *tg, bool is_write,
                               uint64_t bytes, int64_t now)
{
    /* Pairs with the exchange in throttle_group_set_limits(). */
    const ThrottleConfig *c = atomic_load_explicit(&tg->cfg,
                                                   memory_order_acquire);
    int64_t before[THROTTLE_CELLS], after[THROTTLE_CELLS];
    const uint8_t *used;
    int n;

    if (!c) {
        return 0;
    }
    used = c->used[is_write];
    n = c->n_used[is_write];
    for (;;) {
        int64_t dep = now;
        int j;

        /* Pass 1, no writes: the earliest time every cell conforms. */
        for (j = 0; j < n; j++) {
            const ThrottleCell *cell = &c->cell[used[j] / 2][used[j] % 2];
            int64_t tat = atomic_load_explicit(throttle_tat(tg, used[j]),
                                               memory_order_relaxed);

            dep = MAX(dep, tat - cell->tau);
        }
        /* Pass 2: charge each cell as of the departure @dep. */
        for (j = 0; j < n; j++) {
            const ThrottleCell *cell = &c->cell[used[j] / 2][used[j] % 2];
            _Atomic int64_t *t = throttle_tat(tg, used[j]);
            int64_t cost = throttle_cost(c, used[j] / 2, cell, bytes);
            int64_t tat = atomic_load_explicit(t, memory_order_relaxed);

            do {
                if (tat - cell->tau > dep) {
                    break;
                }
                before[j] = tat;
                after[j] = throttle_add(MAX(tat, dep), cost);
            } while (!atomic_compare_exchange_weak_explicit(
                         t, &tat, after[j], memory_order_relaxed,
                         memory_order_relaxed));
            if (tat - cell->tau > dep) {
                /* A racing reservation moved it: give back, start over. */
                throttle_refund(tg, used, j, before, after);
                break;
            }
        }
        if (j == n) {
            return dep - now;
        }
    }
}
