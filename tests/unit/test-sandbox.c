/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for the iothread seccomp sandbox (util/sandbox.c). */
#include "qemu/osdep.h"
#include "qemu/iothread.h"
#include "qemu/sandbox.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

typedef struct SandboxJob {
    int mode;
    int result;
} SandboxJob;

enum {
    SANDBOX_JOB_ALLOWED,        /* eventfd, read/write, mmap, thread */
    SANDBOX_JOB_OPEN,           /* openat: refused with EACCES */
    SANDBOX_JOB_FORBIDDEN,      /* socket(AF_INET): kills the process */
    SANDBOX_JOB_FORBIDDEN_HTTP, /* the HTTP thread's filter, ptrace */
};

static gpointer sandbox_thread_fn(gpointer p)
{
    return p;
}

static void sandbox_job_cb(void *opaque)
{
    SandboxJob *job = opaque;
    g_autoptr(GError) err = NULL;

    if (!(job->mode == SANDBOX_JOB_FORBIDDEN_HTTP ?
          sandbox_apply_http_filter(&err) :
          sandbox_apply_iothread_filter(&err))) {
        job->result = 100;
        return;
    }
    switch (job->mode) {
    case SANDBOX_JOB_ALLOWED: {
        int fd = eventfd(0, EFD_CLOEXEC);
        uint64_t v = 1;
        void *m;
        GThread *t;

        if (fd < 0 || write(fd, &v, 8) != 8 || read(fd, &v, 8) != 8 ||
            v != 1) {
            job->result = 1;
            return;
        }
        close(fd);
        m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            job->result = 2;
            return;
        }
        munmap(m, 1 << 20);
        /* A thread created here (as GLib's pool does) inherits the filter. */
        t = g_thread_new("sandbox-child", sandbox_thread_fn, job);
        job->result = g_thread_join(t) == job ? 0 : 3;
        break;
    }
    case SANDBOX_JOB_OPEN: {
        int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);

        job->result = fd < 0 && errno == EACCES ? 0 : 4;
        if (fd >= 0) {
            close(fd);
        }
        break;
    }
    case SANDBOX_JOB_FORBIDDEN: {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        /* Not reached when the sandbox works. */
        job->result = fd >= 0 ? 5 : 6;
        break;
    }
    case SANDBOX_JOB_FORBIDDEN_HTTP: {
        /* Harmless if it ran: no tracee; not reached either. */
        long r = syscall(SYS_ptrace, PTRACE_PEEKDATA, 1, NULL, NULL);

        job->result = r == 0 ? 7 : 8;
        break;
    }
    }
}

/*
 * Run one job in an iothread of a child process; return the wait status.
 * A job that must die has its stderr (the SIGSYS line) in @log.
 */
static int sandbox_run_child_log(int mode, const char *log)
{
    pid_t pid;
    int status;

    fflush(stdout);
    pid = fork();
    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) {
        SandboxJob job = { .mode = mode, .result = -1 };
        IOThread *t = iothread_create("sandbox-test", 0, NULL);

        if (!t) {
            _exit(99);
        }
        /* Keep the expected SIGSYS line out of the test log. */
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

            dup2(fd, STDERR_FILENO);
        }
        iothread_run_sync(t, sandbox_job_cb, &job);
        /* The main thread is not filtered: opening a file still works. */
        if (job.result == 0 && open("/etc/hostname", O_RDONLY) < 0) {
            _exit(98);
        }
        iothread_destroy(t);
        _exit(job.result);
    }
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    return status;
}

static int sandbox_run_child(int mode)
{
    return sandbox_run_child_log(mode, NULL);
}

/* A forbidden call kills with SIGSYS and the line names the thread. */
static void sandbox_check_kill(int mode, const char *role)
{
    g_autofree char *dir = g_dir_make_tmp("vb-sandbox-XXXXXX", NULL);
    g_autofree char *log = g_build_filename(dir, "stderr", NULL);
    g_autofree char *text = NULL;
    int status = sandbox_run_child_log(mode, log);

    g_assert_true(WIFSIGNALED(status));
    g_assert_cmpint(WTERMSIG(status), ==, SIGSYS);
    g_assert_true(g_file_get_contents(log, &text, NULL, NULL));
    g_assert_nonnull(strstr(text, role));
    g_assert_nonnull(strstr(text, " made system call "));
    unlink(log);
    rmdir(dir);
}

static void test_sandbox_allowed(void)
{
    int status = sandbox_run_child(SANDBOX_JOB_ALLOWED);

    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
}

static void test_sandbox_open_refused(void)
{
    int status = sandbox_run_child(SANDBOX_JOB_OPEN);

    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
}

static void test_sandbox_forbidden_kills(void)
{
    sandbox_check_kill(SANDBOX_JOB_FORBIDDEN, "seccomp: an I/O thread made");
}

static void test_sandbox_http_forbidden_kills(void)
{
    sandbox_check_kill(SANDBOX_JOB_FORBIDDEN_HTTP,
                       "seccomp: the metrics HTTP thread made");
}

static void test_sandbox_unavailable(void)
{
    g_autoptr(GError) err = NULL;

    g_assert_false(sandbox_apply_iothread_filter(&err));
    g_assert_nonnull(strstr(err->message, "libseccomp"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (sandbox_available()) {
        g_test_add_func("/sandbox/iothread/allowed", test_sandbox_allowed);
        g_test_add_func("/sandbox/iothread/open-refused",
                        test_sandbox_open_refused);
        g_test_add_func("/sandbox/iothread/forbidden-kills",
                        test_sandbox_forbidden_kills);
        g_test_add_func("/sandbox/http/forbidden-kills",
                        test_sandbox_http_forbidden_kills);
    } else {
        g_test_add_func("/sandbox/unavailable", test_sandbox_unavailable);
    }
    return g_test_run();
}
