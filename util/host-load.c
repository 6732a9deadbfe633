/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Host CPU load detection for the busy-poll policy: see host-load.h for
 * the signals and the policy.  Main thread only (vhost-blkd samples every
 * HOST_LOAD_INTERVAL_MS); nothing here runs per request.
 */
#include "qemu/osdep.h"
#include <sys/resource.h>
#include <sys/timerfd.h>
#include "qemu/aio.h"
#include "qemu/error-report.h"
#include "qemu/host-load.h"

void host_load_policy_init(HostLoadPolicy *p)
{
    memset(p, 0, sizeof(*p));
}

/* One interval's reading of "someone waited for a CPU", 0..1. */
static double host_load_interval_pressure(HostLoadPolicy *p,
                                          const HostLoadSample *s,
                                          uint64_t dt_us)
{
    if (s->have_psi && p->prev.have_psi) {
        double v = (double)(s->psi_some_us - p->prev.psi_some_us) / dt_us;

        return v > 1 ? 1 : v;
    }
    /*
     * No PSI: one instant per interval, so smooth it.  procs_running
     * counts the thread reading it; more runnable tasks than CPUs besides
     * it means some wait.
     */
    return 0.5 * p->pressure +
           0.5 * (s->procs_running > s->online_cpus + 1 ? 1.0 : 0.0);
}

bool host_load_update(HostLoadPolicy *p, const HostLoadSample *s)
{
    uint64_t dt_us, dticks;
    double pressure, spare;

    if (!p->have_prev) {
        p->prev = *s;
        p->have_prev = true;
        return p->busy;
    }
    if (s->now_us <= p->prev.now_us || s->total_ticks < p->prev.total_ticks ||
        s->idle_ticks < p->prev.idle_ticks ||
        (s->have_psi && p->prev.have_psi &&
         s->psi_some_us < p->prev.psi_some_us)) {
        /* Clock or counters went backwards (cannot happen, but /proc is
         * input): start over from this reading. */
        p->prev = *s;
        return p->busy;
    }
    dt_us = s->now_us - p->prev.now_us;
    dticks = s->total_ticks - p->prev.total_ticks;
    pressure = host_load_interval_pressure(p, s, dt_us);
    p->idle_cpus = dticks ? (double)(s->idle_ticks - p->prev.idle_ticks) /
                            dticks * s->online_cpus : 0;
    p->self_cpus = s->self_cpu_us >= p->prev.self_cpu_us ?
                   (double)(s->self_cpu_us - p->prev.self_cpu_us) / dt_us : 0;
    spare = p->idle_cpus + p->self_cpus;
    p->pressure = pressure;
    p->prev = *s;
    p->samples++;

    if (!p->busy) {
        if (pressure >= HOST_LOAD_BUSY_PRESSURE &&
            spare < HOST_LOAD_IDLE_CPUS) {
            p->busy = true;
            p->calm_run = 0;
            p->transitions++;
        }
    } else if (pressure < HOST_LOAD_CALM_PRESSURE ||
               spare >= HOST_LOAD_IDLE_CPUS) {
        if (++p->calm_run >= HOST_LOAD_CALM_SAMPLES) {
            p->busy = false;
            p->calm_run = 0;
            p->transitions++;
        }
    } else {
        p->calm_run = 0;
    }
    return p->busy;
}

bool host_load_parse_psi(const char *text, uint64_t *some_us)
{
    const char *t;
    char *end;

    if (strncmp(text, "some ", 5) != 0) {
        return false;
    }
    t = strstr(text, " total=");
    if (!t || (strchr(text, '\n') && t > strchr(text, '\n'))) {
        return false;
    }
    t += strlen(" total=");
    errno = 0;
    *some_us = g_ascii_strtoull(t, &end, 10);
    return end != t && errno == 0;
}

bool host_load_parse_stat(const char *text, uint64_t *total_ticks,
                          uint64_t *idle_ticks, unsigned int *procs_running)
{
    const char *p = text, *r;
    uint64_t v[10] = { 0 };
    int i;

    if (strncmp(p, "cpu ", 4) != 0) {
        return false;
    }
    p += 4;
    /* user nice system idle iowait irq softirq steal guest guest_nice;
     * older kernels print fewer fields. */
    for (i = 0; i < 10; i++) {
        char *end;

        while (*p == ' ') {
            p++;
        }
        if (*p < '0' || *p > '9') {
            break;
        }
        errno = 0;
        v[i] = g_ascii_strtoull(p, &end, 10);
        if (errno) {
            return false;
        }
        p = end;
    }
    if (i < 4) {
        return false;
    }
    /* guest time is already counted in user (and guest_nice in nice). */
    *total_ticks = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    *idle_ticks = v[3] + v[4];
    /* Past the interrupt counts: a huge /proc/stat may have been cut
     * before it.  Only the fallback without PSI needs it; 0 = unknown. */
    r = strstr(text, "\nprocs_running ");
    *procs_running = r ? strtoul(r + strlen("\nprocs_running "), NULL, 10)
                       : 0;
    return true;
}

static ssize_t host_load_pread_all(int fd, char *buf, size_t size)
{
    size_t got = 0;

    while (got < size - 1) {
        ssize_t n = pread(fd, buf + got, size - 1 - got, got);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            break;
        }
        got += n;
    }
    buf[got] = '\0';
    return got;
}

bool host_load_read(int psi_fd, int stat_fd, HostLoadSample *s)
{
    /* /proc/stat grows with the CPU count: the aggregate line and
     * procs_running are what we need, so read enough for 256 CPUs. */
    static char buf[64 * 1024];
    struct timespec ts;
    struct rusage ru;
    long n;

    memset(s, 0, sizeof(*s));
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->now_us = ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
    n = sysconf(_SC_NPROCESSORS_ONLN);
    s->online_cpus = n > 0 ? n : 1;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        s->self_cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
                         1000000ULL + ru.ru_utime.tv_usec +
                         ru.ru_stime.tv_usec;
    }
    if (psi_fd >= 0 && host_load_pread_all(psi_fd, buf, 256) > 0) {
        s->have_psi = host_load_parse_psi(buf, &s->psi_some_us);
    }
    if (host_load_pread_all(stat_fd, buf, sizeof(buf)) <= 0) {
        return false;
    }
    return host_load_parse_stat(buf, &s->total_ticks, &s->idle_ticks,
                                &s->procs_running);
}

/* ---- the sampler (main thread) ----------------------------------------- */

struct HostLoadMonitor {
    AioContext *ctx;
    int timer_fd;
    int psi_fd;
    int stat_fd;
    bool logged_busy;
    uint64_t busy_ms;           /* time spent busy, whole intervals */
    HostLoadPolicy policy;
};

static void host_load_monitor_cb(void *opaque)
{
    HostLoadMonitor *m = opaque;
    HostLoadSample s;
    uint64_t expirations;
    bool was_busy = m->policy.busy, busy;

    if (read(m->timer_fd, &expirations, sizeof(expirations)) < 0) {
        return;
    }
    if (!host_load_read(m->psi_fd, m->stat_fd, &s)) {
        return;
    }
    busy = host_load_update(&m->policy, &s);
    if (was_busy) {
        m->busy_ms += HOST_LOAD_INTERVAL_MS * expirations;
    }
    if (busy == was_busy) {
        return;
    }
    aio_set_host_busy(busy);
    if (busy && !m->logged_busy) {
        m->logged_busy = true;
        info_report("the host has no idle CPU (CPU pressure %.0f%%, %.2f "
                    "CPUs idle, %.2f used by vhost-blkd): busy polling "
                    "paused while it lasts (--poll-host-check off keeps "
                    "polling)", 100 * m->policy.pressure,
                    m->policy.idle_cpus, m->policy.self_cpus);
    } else {
        debug_report("host load: %s (CPU pressure %.0f%%, %.2f CPUs idle, "
                     "%.2f used by vhost-blkd)",
                     busy ? "busy, polling paused" : "idle CPU, polling on",
                     100 * m->policy.pressure, m->policy.idle_cpus,
                     m->policy.self_cpus);
    }
}

HostLoadMonitor *host_load_monitor_new(AioContext *ctx, GError **errp)
{
    HostLoadMonitor *m = g_new0(HostLoadMonitor, 1);
    struct itimerspec its = {
        .it_interval.tv_nsec = HOST_LOAD_INTERVAL_MS * 1000000L,
        .it_value.tv_nsec = HOST_LOAD_INTERVAL_MS * 1000000L,
    };
    HostLoadSample s;

    m->ctx = ctx;
    m->timer_fd = m->psi_fd = m->stat_fd = -1;
    host_load_policy_init(&m->policy);
    m->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (m->stat_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot open /proc/stat: %s",
                    g_strerror(errno));
        goto fail;
    }
    /* Optional: kernels without CONFIG_PSI, or booted with psi=0. */
    m->psi_fd = open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC);
    if (!host_load_read(m->psi_fd, m->stat_fd, &s)) {
        g_set_error(errp, VB_ERROR, 0, "cannot parse /proc/stat");
        goto fail;
    }
    host_load_update(&m->policy, &s);
    m->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (m->timer_fd < 0 || timerfd_settime(m->timer_fd, 0, &its, NULL) < 0) {
        g_set_error(errp, VB_ERROR, 0, "timerfd: %s", g_strerror(errno));
        goto fail;
    }
    aio_set_fd_handler(ctx, m->timer_fd, host_load_monitor_cb, NULL, NULL,
                       NULL, m);
    return m;

fail:
    host_load_monitor_free(m);
    return NULL;
}

void host_load_monitor_free(HostLoadMonitor *m)
{
    if (!m) {
        return;
    }
    if (m->timer_fd >= 0) {
        aio_set_fd_handler(m->ctx, m->timer_fd, NULL, NULL, NULL, NULL, NULL);
        close(m->timer_fd);
    }
    if (m->psi_fd >= 0) {
        close(m->psi_fd);
    }
    if (m->stat_fd >= 0) {
        close(m->stat_fd);
    }
    aio_set_host_busy(false);
    g_free(m);
}

const HostLoadPolicy *host_load_monitor_policy(HostLoadMonitor *m)
{
    return &m->policy;
}

uint64_t host_load_monitor_busy_ms(HostLoadMonitor *m)
{
    return m->busy_ms;
}
