/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Seccomp allowlist for the iothreads (libseccomp), see qemu/sandbox.h. */
#include "qemu/osdep.h"
#include "qemu/sandbox.h"

#if CONFIG_SECCOMP
#include <seccomp.h>
#include <signal.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/fs.h>

/*
 * System calls an iothread makes, found with strace over every engine
 * (io_uring, native, threads) and every request type, plus what glibc and
 * GLib need underneath (malloc, thread-pool workers, logging):
 */
static const int sandbox_iothread_calls[] = {
    /* event loop and notifiers */
    SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_pwait2),
    SCMP_SYS(epoll_ctl), SCMP_SYS(poll), SCMP_SYS(ppoll),
    SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
    SCMP_SYS(eventfd2), SCMP_SYS(close),
    /* throttle filter: each iothread's retry timer (block/throttle.c) */
    SCMP_SYS(timerfd_create), SCMP_SYS(timerfd_settime),
    /* I/O engines (the thread pool issues the plain calls) */
    SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
    SCMP_SYS(io_uring_register),
    SCMP_SYS(io_setup), SCMP_SYS(io_destroy), SCMP_SYS(io_submit),
    SCMP_SYS(io_getevents), SCMP_SYS(io_pgetevents), SCMP_SYS(io_cancel),
    SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(preadv),
    SCMP_SYS(pwritev), SCMP_SYS(preadv2), SCMP_SYS(pwritev2),
    SCMP_SYS(fdatasync), SCMP_SYS(fsync), SCMP_SYS(fallocate),
    SCMP_SYS(lseek), SCMP_SYS(fstat), SCMP_SYS(newfstatat),
    /* memory (glibc malloc, GLib, io_uring rings) */
    SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(mprotect),
    SCMP_SYS(madvise), SCMP_SYS(brk),
    /* threads, locks, time, signals */
    SCMP_SYS(futex), SCMP_SYS(set_robust_list), SCMP_SYS(get_robust_list),
    SCMP_SYS(rseq), SCMP_SYS(sched_yield), SCMP_SYS(sched_getattr),
    SCMP_SYS(sched_setattr), SCMP_SYS(sched_getaffinity),
    SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres),
    SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(gettimeofday),
    SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getrandom),
    SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask),
    /* per-thread signal stacks (the sanitizers' runtimes set one up) */
    SCMP_SYS(sigaltstack),
    SCMP_SYS(restart_syscall), SCMP_SYS(exit), SCMP_SYS(exit_group),
    /* syslog (--daemonize): send on the socket openlog() made; glibc
     * reconnects to /dev/log (AF_UNIX only, below) if syslogd restarted */
    SCMP_SYS(sendto), SCMP_SYS(sendmsg), SCMP_SYS(connect),
    /* NBD connections (nbd/server.c) run in the export's iothread: they
     * read and answer on a socket the main thread accepted, and shut it
     * down; GnuTLS does the same with recv/send */
    SCMP_SYS(recvfrom), SCMP_SYS(recvmsg), SCMP_SYS(shutdown),
};

/*
 * What the metrics endpoint's HTTP thread (libmicrohttpd, poll mode) needs
 * on top of the list above, found with strace and the SIGSYS line: accept
 * and serve TCP connections on the socket the main thread bound.  It
 * creates no socket of its own (socket() stays AF_UNIX-only).
 */
static const int sandbox_http_calls[] = {
    SCMP_SYS(accept), SCMP_SYS(accept4), SCMP_SYS(recvfrom),
    SCMP_SYS(recvmsg), SCMP_SYS(shutdown), SCMP_SYS(setsockopt),
    SCMP_SYS(getsockopt), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
    SCMP_SYS(fcntl), SCMP_SYS(pipe2),
};

static const unsigned long sandbox_ioctls[] = {
    BLKDISCARD, BLKZEROOUT, BLKSECDISCARD, BLKGETSIZE64, BLKSSZGET,
    BLKPBSZGET,
};

static void sandbox_put_str(char *buf, size_t *pos, size_t size,
                            const char *s)
{
    while (*s && *pos + 1 < size) {
        buf[(*pos)++] = *s++;
    }
}

/*
 * Which kind of thread this filter confines, for the SIGSYS line: set by
 * the thread before it installs its filter, read by the handler on the
 * same thread (a thread-local pointer to a string literal: safe in a
 * signal handler).
 */
static __thread const char *sandbox_role;

/* Set by the thread once its filter is loaded (or inherited: see
 * sandbox_thread_set_confined()). */
static __thread bool sandbox_confined;

/* Async-signal-safe: format the number by hand, write(2), re-raise. */
static void sandbox_sigsys(int sig, siginfo_t *info, void *uctx)
{
    char num[16], buf[256];
    size_t pos = 0, n = 0;
    unsigned int nr = info->si_syscall;
    ssize_t r;

    do {
        num[n++] = '0' + nr % 10;
        nr /= 10;
    } while (nr && n < sizeof(num));
    sandbox_put_str(buf, &pos, sizeof(buf), "vhost-blk: seccomp: ");
    sandbox_put_str(buf, &pos, sizeof(buf),
                    sandbox_role ? sandbox_role : "a sandboxed thread");
    sandbox_put_str(buf, &pos, sizeof(buf), " made system call ");
    while (n && pos + 1 < sizeof(buf)) {
        buf[pos++] = num[--n];
    }
    sandbox_put_str(buf, &pos, sizeof(buf), ", which the sandbox does not "
                    "allow; terminating (name it with 'scmp_sys_resolver "
                    "NUMBER'; --seccomp=off disables the sandbox)\n");
    r = write(STDERR_FILENO, buf, pos);
    (void)r;
    /* SA_RESETHAND restored the default action: this kills the process
     * with SIGSYS once the handler returns. */
    raise(SIGSYS);
}

static bool sandbox_add(scmp_filter_ctx ctx, uint32_t action, int nr,
                        unsigned int argc, const struct scmp_arg_cmp *args,
                        GError **errp)
{
    int r = seccomp_rule_add_array(ctx, action, nr, argc, args);

    if (r < 0) {
        g_autofree char *name = seccomp_syscall_resolve_num_arch(
            SCMP_ARCH_NATIVE, nr);

        g_set_error(errp, VB_ERROR, 0, "seccomp: cannot add a rule for %s: "
                    "%s", name ? name : "?", g_strerror(-r));
        return false;
    }
    return true;
}

bool sandbox_available(void)
{
    return true;
}

static bool sandbox_apply(const int *extra, size_t n_extra, GError **errp)
{
    struct sigaction sa = {
        .sa_sigaction = sandbox_sigsys,
        .sa_flags = SA_SIGINFO | SA_RESETHAND,
    };
    scmp_filter_ctx ctx;
    bool ok = false;
    int r;

    /* Process-wide, idempotent; before the filter so that it may run. */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) < 0) {
        g_set_error(errp, VB_ERROR, 0, "seccomp: sigaction(SIGSYS): %s",
                    g_strerror(errno));
        return false;
    }

    ctx = seccomp_init(SCMP_ACT_TRAP);
    if (!ctx) {
        g_set_error(errp, VB_ERROR, 0, "seccomp: cannot create a filter");
        return false;
    }
    for (size_t i = 0; i < ARRAY_SIZE(sandbox_iothread_calls); i++) {
        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, sandbox_iothread_calls[i], 0,
                         NULL, errp)) {
            goto out;
        }
    }
    for (size_t i = 0; i < n_extra; i++) {
        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, extra[i], 0, NULL, errp)) {
            goto out;
        }
    }
    /* ioctl: block-device discard and zeroing (and size queries) only. */
    for (size_t i = 0; i < ARRAY_SIZE(sandbox_ioctls); i++) {
        struct scmp_arg_cmp a = SCMP_A1(SCMP_CMP_EQ, sandbox_ioctls[i]);

        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, &a, errp)) {
            goto out;
        }
    }
    /* Threads (GLib's thread-pool workers) but never processes: clone()
     * with CLONE_THREAD; clone3() hides its flags in memory that a filter
     * cannot read, so it fails with ENOSYS and glibc falls back to clone. */
    {
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD,
                                        CLONE_THREAD);

        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, &a, errp) ||
            !sandbox_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0,
                         NULL, errp)) {
            goto out;
        }
    }
    /* Thread names, and asking whether this thread is confined (the
     * tests of which threads run what, block/thread-pool.c). */
    {
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME);
        struct scmp_arg_cmp g = SCMP_A0(SCMP_CMP_EQ, PR_GET_SECCOMP);

        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, &a, errp) ||
            !sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, &g, errp)) {
            goto out;
        }
    }
    /* Signals to this process only (raise(), abort()). */
    {
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid());

        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, &a, errp)) {
            goto out;
        }
    }
    /* Unix sockets only (syslog's /dev/log). */
    {
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);

        if (!sandbox_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, &a, errp)) {
            goto out;
        }
    }
    /* Opening files is refused, not fatal: a new thread's first malloc()
     * reads /sys/devices/system/cpu/online and copes with a failure. */
    if (!sandbox_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat), 0, NULL,
                     errp) ||
        !sandbox_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(open), 0, NULL,
                     errp)) {
        goto out;
    }

    /* No TSYNC: the filter is for this thread (and its children) only. */
    r = seccomp_load(ctx);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "seccomp: the kernel refused the "
                    "filter: %s", g_strerror(-r));
        goto out;
    }
    ok = true;
    sandbox_confined = true;
out:
    seccomp_release(ctx);
    return ok;
}

bool sandbox_apply_iothread_filter(GError **errp)
{
    sandbox_role = "an I/O thread";
    return sandbox_apply(NULL, 0, errp);
}

bool sandbox_apply_http_filter(GError **errp)
{
    sandbox_role = "the metrics HTTP thread";
    return sandbox_apply(sandbox_http_calls, ARRAY_SIZE(sandbox_http_calls),
                         errp);
}

bool sandbox_thread_confined(void)
{
    return sandbox_confined;
}

void sandbox_thread_set_confined(void)
{
    sandbox_confined = true;
    if (!sandbox_role) {
        sandbox_role = "a worker of an I/O thread";
    }
}

#else /* !CONFIG_SECCOMP */

bool sandbox_thread_confined(void)
{
    return false;
}

void sandbox_thread_set_confined(void)
{
}

bool sandbox_available(void)
{
    return false;
}

bool sandbox_apply_iothread_filter(GError **errp)
{
    g_set_error(errp, VB_ERROR, 0, "seccomp: this build has no libseccomp "
                "support (install libseccomp-dev and rebuild)");
    return false;
}

bool sandbox_apply_http_filter(GError **errp)
{
    return sandbox_apply_iothread_filter(errp);
}

#endif
