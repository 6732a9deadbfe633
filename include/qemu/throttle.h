/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Throttling: I/O limits (IOPS and bytes per second, total/read/write,
 * with bursts) shared by every user of a throttle group, in any thread.
 *
 * The limits are qemu-storage-daemon's: for each of the six kinds an
 * average rate @avg, a burst rate @max and how long a burst at @max may
 * last, @max_length seconds; @iops_size makes a request of N x iops_size
 * bytes count as N operations.  Without @max a queue may still run
 * @avg / 10 operations (or bytes) ahead, as QEMU allows.
 *
 * The algorithm (util/throttle.c) takes the time as an argument, so the
 * tests drive it with a fake clock; the block filter (block/throttle.c)
 * passes CLOCK_MONOTONIC.
 *
 * Threads: throttle_group_new/unref/set_limits/get_limits and the change
 * notifiers: main thread.  throttle_group_try(), throttle_group_enabled()
 * and throttle_group_refund(): any thread, lock-free.
 */
#ifndef QEMU_THROTTLE_H
#define QEMU_THROTTLE_H

#include "qemu/osdep.h"

typedef enum ThrottleKind {
    THROTTLE_BPS_TOTAL,
    THROTTLE_BPS_READ,
    THROTTLE_BPS_WRITE,
    THROTTLE_OPS_TOTAL,
    THROTTLE_OPS_READ,
    THROTTLE_OPS_WRITE,
    THROTTLE__MAX,
} ThrottleKind;

/* Longest burst (max-length, seconds) and highest rate accepted. */
#define THROTTLE_MAX_LENGTH_LIMIT   86400
#define THROTTLE_VALUE_LIMIT        (1000ULL * 1000 * 1000 * 1000 * 1000)

typedef struct ThrottleLimit {
    uint64_t avg;               /* per second; 0 = no limit */
    uint64_t max;               /* burst rate; 0 = none (avg / 10 slack) */
    uint64_t max_length;        /* seconds a burst at @max may last;
                                 * 0 = 1 (QEMU's default) */
} ThrottleLimit;

typedef struct ThrottleLimits {
    ThrottleLimit l[THROTTLE__MAX];
    uint64_t iops_size;         /* 0 = every request is one operation */
} ThrottleLimits;

/* "bps-total", ..., "iops-write" (QEMU's names without the suffixes). */
const char *throttle_kind_name(ThrottleKind k);

/*
 * Set one limit by QEMU's key: "iops-total", "iops-total-max",
 * "iops-total-max-length", "bps-read", ... and "iops-size".  Returns
 * false (without @errp) if @key is not a throttle key; with @errp set if
 * the value is negative or too large.
 */
bool throttle_limits_set_key(ThrottleLimits *t, const char *key,
                             int64_t value, bool *known, GError **errp);

/* The whole set valid: each max >= avg, max-length only with max, the
 * total and read/write limits of a kind not both set.  False with @errp
 * naming the key and what to do. */
bool throttle_limits_check(const ThrottleLimits *t, GError **errp);

/* Whether any limit is set. */
bool throttle_limits_enabled(const ThrottleLimits *t);

/* Call @fn(@opaque, key, value) for every key of QEMU's ThrottleLimits
 * (all of them, unset ones as 0), for qom-get. */
void throttle_limits_foreach(const ThrottleLimits *t,
                             void (*fn)(void *opaque, const char *key,
                                        uint64_t value),
                             void *opaque);

typedef struct ThrottleGroup ThrottleGroup;

/* A group with @limits (checked: NULL with @errp set).  @name is for
 * messages and qom-get; one reference, the caller's. */
ThrottleGroup *throttle_group_new(const char *name,
                                  const ThrottleLimits *limits,
                                  GError **errp);
ThrottleGroup *throttle_group_ref(ThrottleGroup *tg);
void throttle_group_unref(ThrottleGroup *tg);
const char *throttle_group_name(ThrottleGroup *tg);
/* Number of references (the group's users + its owner). */
unsigned int throttle_group_refs(ThrottleGroup *tg);

/*
 * Replace the limits (checked first; false with @errp and nothing
 * changed).  Takes effect at once in every thread: the accumulated debt
 * is forgotten, as QEMU resets its buckets, and the change notifiers run
 * (in this thread) so that waiting requests are re-examined.
 */
bool throttle_group_set_limits(ThrottleGroup *tg,
                               const ThrottleLimits *limits, GError **errp);
void throttle_group_get_limits(ThrottleGroup *tg, ThrottleLimits *limits);

/* Main thread: @fn(@opaque) after each set_limits. */
void throttle_group_add_notifier(ThrottleGroup *tg, void (*fn)(void *),
                                 void *opaque);
void throttle_group_remove_notifier(ThrottleGroup *tg, void (*fn)(void *),
                                    void *opaque);

/* Any thread: a limit is set (the caller's one branch when none is). */
bool throttle_group_enabled(ThrottleGroup *tg);

/*
 * Any thread: may a request of @bytes (a write if @is_write) go at @now
 * (ns, any monotonic origin > 0)?  0: yes, and it is charged to every
 * limit it falls under.  Otherwise the ns to wait before asking again;
 * nothing is charged.
 */
int64_t throttle_group_try(ThrottleGroup *tg, bool is_write, uint64_t bytes,
                           int64_t now);

/*
 * Any thread: reserve the group's capacity for a request of @bytes at
 * @now, whether or not it may go now: returns in how many ns it may go
 * (0: at once) and charges every limit as of that departure.  Requests
 * that reserve in turn leave in that order, whichever thread or queue
 * they come from (first come, first served across the whole group).
 * The caller keeps the request until then; if the limits change before
 * (throttle_group_generation() moved on), it reserves again.
 */
int64_t throttle_group_reserve(ThrottleGroup *tg, bool is_write,
                               uint64_t bytes, int64_t now);
/* Any thread: incremented by each throttle_group_set_limits(). */
uint64_t throttle_group_generation(ThrottleGroup *tg);

#endif
