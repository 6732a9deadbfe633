/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Is the host short of CPU?  Busy polling only pays when the CPU it burns
 * was idle anyway; on a host whose CPUs are all wanted (a VM's vCPU
 * threads, other daemons) it takes time from them.  The main thread samples
 * the kernel's view a few times a second (host_load_read()) and feeds the
 * readings to a small policy (host_load_update()), which says whether the
 * iothreads may busy-poll (aio_set_host_busy()).
 *
 * Signals, per sampling interval:
 *   - CPU pressure (/proc/pressure/cpu, "some" total): the share of the
 *     interval in which at least one runnable task waited for a CPU.  It
 *     counts the waits our polling causes to others, and theirs to us.
 *   - Without PSI (kernel without CONFIG_PSI, or psi=0): runnable tasks
 *     (/proc/stat procs_running, which counts the sampling thread itself)
 *     beyond the online CPUs, as a 0/1 reading smoothed over samples.
 *   - Idle CPUs (/proc/stat idle + iowait ticks) plus the CPU time of this
 *     process (getrusage): what would be idle if we did not run.  A host
 *     where that is most of a CPU (HOST_LOAD_IDLE_CPUS) is never called
 *     busy: our own polling must not talk us out of polling (it eats the
 *     idle time it measures).
 * The policy has hysteresis: busy after one interval at or above
 * HOST_LOAD_BUSY_PRESSURE, calm again only after HOST_LOAD_CALM_SAMPLES
 * intervals in a row below HOST_LOAD_CALM_PRESSURE, so it does not flap
 * with its own effect (polling off lowers the pressure it caused).
 *
 * The policy is pure (no I/O, no clock): tests feed it readings.
 */
#ifndef QEMU_HOST_LOAD_H
#define QEMU_HOST_LOAD_H

#define HOST_LOAD_BUSY_PRESSURE 0.10    /* enter busy at >= 10% */
#define HOST_LOAD_CALM_PRESSURE 0.03    /* leave busy below 3% ... */
#define HOST_LOAD_CALM_SAMPLES 3        /* ... for this many samples */
/* Most of a CPU idle (counting ours): never busy.  Not a whole one: a
 * client spinning on its own CPU beside our polling iothread measured
 * 0.90-0.95 (scheduler noise, the sampling thread), which 1.0 called busy;
 * three runnable threads on two CPUs give about 0.67. */
#define HOST_LOAD_IDLE_CPUS 0.8
#define HOST_LOAD_INTERVAL_MS 500       /* vhost-blkd's sampling period */

typedef struct HostLoadSample {
    uint64_t now_us;            /* monotonic clock */
    bool have_psi;
    uint64_t psi_some_us;       /* /proc/pressure/cpu "some total=" */
    uint64_t total_ticks;       /* /proc/stat "cpu" line, every field */
    uint64_t idle_ticks;        /* idle + iowait */
    unsigned int procs_running; /* /proc/stat, includes the reader */
    unsigned int online_cpus;
    uint64_t self_cpu_us;       /* this process, user + sys */
} HostLoadSample;

typedef struct HostLoadPolicy {
    HostLoadSample prev;
    bool have_prev;
    bool busy;
    unsigned int calm_run;      /* calm samples in a row while busy */
    /* last interval, for logs and the probe tool */
    double pressure;            /* 0..1, share of time something waited */
    double idle_cpus;           /* CPUs' worth of idle time */
    double self_cpus;           /* CPUs' worth used by this process */
    uint64_t samples;
    uint64_t transitions;       /* busy <-> calm changes */
} HostLoadPolicy;

void host_load_policy_init(HostLoadPolicy *p);

/*
 * Feed one reading; returns true if the host is busy (iothreads should
 * not busy-poll).  The first reading only primes the deltas.  Readings
 * whose counters went backwards or whose clock did not advance are
 * ignored.
 */
bool host_load_update(HostLoadPolicy *p, const HostLoadSample *s);

/*
 * Read the kernel's counters now.  @psi_fd / @stat_fd: open descriptors of
 * /proc/pressure/cpu (or -1: no PSI) and /proc/stat, re-read from offset 0.
 * Returns false if /proc/stat could not be read or parsed.
 */
bool host_load_read(int psi_fd, int stat_fd, HostLoadSample *s);

/* Parsers, exposed for tests: false on text they do not understand. */
bool host_load_parse_psi(const char *text, uint64_t *some_us);
bool host_load_parse_stat(const char *text, uint64_t *total_ticks,
                          uint64_t *idle_ticks, unsigned int *procs_running);

/*
 * The sampler: a timerfd on @ctx (the main loop) that reads the counters
 * every HOST_LOAD_INTERVAL_MS, runs the policy and sets
 * aio_set_host_busy().  State changes are logged (info the first time the
 * host is found busy, debug afterwards).  NULL with @errp set if /proc/stat
 * or the timer is unavailable.
 */
typedef struct AioContext AioContext;
typedef struct HostLoadMonitor HostLoadMonitor;
HostLoadMonitor *host_load_monitor_new(AioContext *ctx, GError **errp);
void host_load_monitor_free(HostLoadMonitor *m);
/* Main thread: the policy's state (counters, last readings). */
const HostLoadPolicy *host_load_monitor_policy(HostLoadMonitor *m);
uint64_t host_load_monitor_busy_ms(HostLoadMonitor *m);

#endif
