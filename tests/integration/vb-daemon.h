/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration-test helpers: start a vhost-user-blk back-end (vhost-blkd, or
 * qemu-storage-daemon with VB_BACKEND=qsd) on temporary images under
 * /var/tmp, connect the front-end library to it, do synchronous requests,
 * and make sure the daemon dies with the test (fixture teardown plus
 * PR_SET_PDEATHSIG).  All functions run in the test's main thread unless
 * said otherwise.
 */
#ifndef TESTS_INTEGRATION_VB_DAEMON_H
#define TESTS_INTEGRATION_VB_DAEMON_H

#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-frontend.h"

#define VB_MAX_EXPORTS 4
#define VB_IO_TIMEOUT_MS 10000

typedef enum VbBackend {
    VB_BACKEND_VHOST_BLKD,
    VB_BACKEND_QSD,
} VbBackend;

typedef struct VbExportSpec {
    uint64_t size;              /* image bytes; 0 = 16 MiB */
    unsigned int num_queues;    /* 0 = 1 */
    bool readonly;
    bool null_driver;
    unsigned int logical_block_size;   /* 0 = default */
    const char *serial;
    const char *discard;        /* "on" / "off" / NULL = default */
    const char *write_zeroes;
    const char *extra;          /* vhost-blkd only: ",KEY=VALUE..." appended */
    const char *rbd;            /* vhost-blkd only: "rbd=...,ceph-conf=..."
                                 * instead of file= (the image file is
                                 * still made, unused) */
} VbExportSpec;

typedef struct VbDaemon {
    VbBackend backend;
    char *dir;                  /* /var/tmp/vb-itest-XXXXXX */
    unsigned int nexports;
    VbExportSpec spec[VB_MAX_EXPORTS];
    char *sock[VB_MAX_EXPORTS];
    char *image[VB_MAX_EXPORTS];
    unsigned int iothreads;     /* 0 = daemon default */
    bool seccomp;               /* vhost-blkd --seccomp on (also for every
                                 * daemon when VB_SECCOMP=on is set) */
    const char *const *args;    /* vhost-blkd only: more arguments
                                 * (NULL-terminated), before the exports */
    bool stderr_to_log;         /* log lines to log_path too (tests that
                                 * read them), not to the test's stderr */
    GPid pid;                   /* 0 when not running */
    char *log_path;
} VbDaemon;

VbBackend vb_backend(void);
/* VB_SECCOMP=on: every vhost-blkd the tests start runs --seccomp on. */
bool vb_seccomp_env(void);
const char *vb_backend_name(void);

/* Create images and the directory; does not start the daemon. */
void vb_daemon_init(VbDaemon *d, unsigned int nexports,
                    const VbExportSpec *specs);
/* Spawn the daemon (again, on the same sockets and images). */
void vb_daemon_start(VbDaemon *d);
/* SIGKILL and reap; no-op if not running. */
void vb_daemon_kill(VbDaemon *d);
/* Kill, remove files and directory. */
void vb_daemon_cleanup(VbDaemon *d);
/* True if the daemon process is still running. */
bool vb_daemon_alive(VbDaemon *d);

/* Connect to export @i with @opts (socket filled in); fatal on failure. */
VhostUserFrontend *vb_connect(VbDaemon *d, unsigned int i,
                              VhostUserFrontendOptions *opts);
/* vhost_user_frontend_start; fatal (g_error) on failure. */
void vb_start(VhostUserFrontend *fe);
/* vb_connect + vb_start. */
VhostUserFrontend *vb_connect_started(VbDaemon *d, unsigned int i,
                                      unsigned int num_queues);

/*
 * One request, synchronously: returns the status byte (>= 0) or -errno
 * (-ETIMEDOUT if no completion within VB_IO_TIMEOUT_MS).  @used_len may be
 * NULL.  Any thread that owns queue @q.
 */
int vb_req(VhostUserFrontend *fe, unsigned int q, uint32_t type,
           uint64_t sector, void *buf, size_t len, bool data_in,
           uint32_t *used_len);
/* Like vb_req with an iovec array. */
int vb_reqv(VhostUserFrontend *fe, unsigned int q, uint32_t type,
            uint64_t sector, const struct iovec *iov, unsigned int niov,
            bool data_in, uint32_t *used_len);
/* Wait for @n completions on @q into @out (deadline VB_IO_TIMEOUT_MS each
 * wait).  Returns how many were collected. */
int vb_reap_n(VhostUserFrontend *fe, unsigned int q,
              VhostUserFrontendCompletion *out, int n);

/* Deterministic pattern for (@seed, byte offset). */
void vb_fill_pattern(void *buf, size_t len, uint32_t seed);
bool vb_check_pattern(const void *buf, size_t len, uint32_t seed);
/* pread the image of export @i directly. */
void vb_read_image(VbDaemon *d, unsigned int i, uint64_t offset, void *buf,
                   size_t len);
/* pwrite the image of export @i directly (before the daemon starts). */
void vb_write_image(VbDaemon *d, unsigned int i, uint64_t offset,
                    const void *buf, size_t len);
/* Assert that a fresh connection to export @i serves a write + read. */
void vb_check_export_works(VbDaemon *d, unsigned int i);

/*
 * Run a shell command line (qemu-img, qemu-io, ...); its exit status,
 * with its stdout in *@out unless @out is NULL; its stderr goes to the
 * test log when it fails.  A command killed by a signal fails the test.
 */
int vb_sh_status(char **out, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* The same, and the command must succeed. */
#define vb_sh(...) g_assert_cmpint(vb_sh_status(NULL, __VA_ARGS__), ==, 0)

#endif
