/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blkd: serve raw images and block devices to VMs as vhost-user-blk
 * devices.
 *
 * The main thread parses the command line, creates the iothreads and the
 * exports, then runs the main AioContext (vhost-user control sockets and a
 * signalfd) until SIGTERM, SIGINT or SIGHUP.  Queues run in the iothreads.
 *
 * SIGHUP stops the daemon as SIGTERM does, as qemu-storage-daemon does: a
 * foreground daemon whose terminal closes drains and cleans up instead of
 * dying with its socket and pidfile left behind.  There is no reload: the
 * configuration is read once, and the unit has no ExecReload.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/error-report.h"
#include "qemu/iothread.h"
#include "block/engine.h"
#include "hw/block/vhost-user-blk-export.h"
#include "tools/export-opts.h"
#include "tools/qsd-cli.h"
#include "monitor/state.h"
#include "monitor/objects.h"
#include "monitor/blockdev.h"
#include "monitor/export.h"
#include "monitor/qmp.h"
#include "nbd/nbd-monitor.h"
#include "tools/config-file.h"

#include <getopt.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <grp.h>
#include "qemu/sandbox.h"
#include "qemu/systemd.h"
#include "qemu/host-load.h"
#include "monitor/metrics-http.h"

#define VBD_MAX_IOTHREADS EXPORT_OPTS_MAX_IOTHREADS

typedef struct Vbd {
    GPtrArray *specs;           /* ExportOpts */
    unsigned int n_iothreads;
    int64_t poll_max_ns;
    char *pidfile;
    int pidfile_fd;             /* open and locked while we run, or -1 */
    bool daemonize;
    int ready_fd;               /* daemonize: pipe to the waiting parent */
    char *runas_user;           /* --user USER[:GROUP]; NULL: stay */
    uid_t runas_uid;
    gid_t runas_gid;
    bool runas_group_set;       /* GROUP given: no supplementary groups */
    bool seccomp;               /* --seccomp=on */
    bool allow_core_dumps;      /* --allow-core-dumps: stay dumpable */
    SystemdSockets sd;          /* sockets passed by the service manager */
    int notify_fd;              /* $NOTIFY_SOCKET, or -1 */
    bool poll_host_check;       /* --poll-host-check on (default) */
    HostLoadMonitor *host_load; /* pauses polling when no CPU is idle */
    char *metrics_addr;         /* --metrics ADDR:PORT; NULL: none */
    MetricsHttp *metrics;

    QsdCli qsd;                 /* --blockdev, --export type=..., ... */

    AioContext *main_ctx;
    IOThread **iothreads;
    VbState state;              /* nodes and exports (QMP's view) */
    bool state_ready;
    QmpServer *qmp;
    int sig_fd;
    bool quit;
} Vbd;

static void vbd_usage(FILE *f)
{
    fprintf(f,
"Usage: vhost-blkd [options] --export socket=PATH,file=PATH[,...] ...\n"
"\n"
"Serve images (files, block devices, Ceph RBD) to VMs as vhost-user-blk\n"
"devices (QEMU: -device vhost-user-blk-pci,chardev=...).  One front-end at\n"
"a time per socket.\n"
"\n"
"  --export KEY=VALUE,...  add an export (repeatable); keys:\n"
"      id=ID               its export id on the monitor (default exportN,\n"
"                          N counting --export options from 0)\n"
"      node-name=NAME      its block node's name (default: the id if given,\n"
"                          else nodeN)\n"
"      socket=PATH         vhost-user socket to create (never through a\n"
"                          symlink)\n"
"      socket-mode=MODE    its permissions, octal (default 0600)\n"
"      socket-owner=USER   its owner (name or uid; needs root)\n"
"      socket-group=GROUP  its group (name or gid), e.g. with 0660 for a\n"
"                          VMM running as another user of that group\n"
"      file=PATH           image file or block device (driver=file)\n"
"      format=raw|qcow2    what the file holds (default raw); qcow2 also\n"
"                          takes l2-cache-size=, l2-cache-entry-size=,\n"
"                          refcount-cache-size=, cache-clean-interval=\n"
"      rbd=POOL[/NAMESPACE]/IMAGE[@SNAP]  a Ceph RBD image (driver=rbd; a\n"
"                          snapshot is served read-only), with:\n"
"      ceph-conf=FILE      the cluster's ceph.conf (default: librados's)\n"
"      ceph-id=ID          the client id, client.ID (default admin)\n"
"      ceph-keyfile=PATH   a file holding the client's key (else the keyring\n"
"                          the conf names); never a key on the command line\n"
"      ceph-connect-timeout=S  give up connecting after S seconds (default\n"
"                          10; client_mount_timeout, rados_mon_op_timeout)\n"
"      ceph-share=NAME     share one cluster connection between the exports\n"
"                          naming it (default: one connection per export)\n"
"      rbd-completion=callback|poll  how librbd's completions come back\n"
"                          (default callback; poll: librbd's event fd)\n"
"      driver=file|null|rbd  null: no I/O, for overhead measurements\n"
"      size=N              null driver: size in bytes (k, M, G, T suffixes)\n"
"      num-queues=N        virtqueues, 1..64 (default 1)\n"
"      queue-size=N        ring size, power of 2 up to 1024 (default 128, as\n"
"                          QEMU's vhost-user-blk-pci); the device offers\n"
"                          seg_max = min(N, 256) - 2, so keep N at most the\n"
"                          VMM's queue-size\n"
"      aio=io_uring|native|threads   I/O engine (default io_uring)\n"
"      cache=none|writeback          none: O_DIRECT (default)\n"
"      locking=auto|on|off QEMU's image locks on file= (on: no other writer;\n"
"                          auto, the default, and off: none on a raw export)\n"
"      readonly=on|off     reject writes (default off)\n"
"      serial=STR          GET_ID string, up to 20 bytes (default: file name)\n"
"      logical-block-size=512|4096\n"
"      discard=on|off      offer DISCARD (default on, if the file supports it)\n"
"      write-zeroes=on|off offer WRITE_ZEROES (default on)\n"
"      batch=on|off        one submit syscall per batch (default on)\n"
"      first-batch=N       a queue with nothing in flight starts with at most\n"
"                          N requests, so the driver's interrupt goes out\n"
"                          while the rest are processed (default 4, 0 off)\n"
"      iothread=N          run every queue of this export in iothread N\n"
"                          (default: queue q in iothread q mod --iothreads)\n"
"      iops-total=N, iops-read=N, iops-write=N, bps-total=N, bps-read=N,\n"
"      bps-write=N         QoS: this export's own limits in requests or bytes\n"
"                          per second (k, M, G suffixes; 0 no limit); each\n"
"                          with KEY-max=N (burst rate) and KEY-max-length=S\n"
"                          (seconds a burst lasts, default 1), and\n"
"                          iops-size=BYTES (a request counts as its size\n"
"                          over this many operations); change them at run\n"
"                          time with vhost-blk-ctl throttle ID\n"
"      throttle-group=NAME share the limits of --object throttle-group,id=NAME\n"
"                          with the other exports naming it\n"
"      inject-error=read|write|flush|discard|any  testing only: fail these\n"
"                          requests (join several with +); with\n"
"      inject-sector=START[-END]  only those overlapping these 512-byte\n"
"                          sectors, inject-after=N after N matching ones,\n"
"                          inject-count=N at most N times, with\n"
"      inject-errno=EIO|ENOSPC|...  (default EIO)\n"
"      inject-delay=MS     testing only: hold the matching requests back MS\n"
"                          milliseconds (0..600000), then do them (or, with\n"
"                          inject-error, fail them); alone it matches every\n"
"                          request type, narrowed by inject-sector/after/count\n"
"\n"
"qemu-storage-daemon's syntax works too (docs/user-guide.md, \"Migrating\n"
"from qemu-storage-daemon\"):\n"
"  --blockdev driver=file|host_device|null-co,node-name=N,filename=PATH\n"
"             [,cache.direct=on|off][,aio=io_uring|native|threads]\n"
"             [,locking=auto|on|off]\n"
"             [,read-only=on|off][,discard=ignore|unmap][,detect-zeroes=off]\n"
"             (null-co: [,size=N][,read-zeroes=on|off])\n"
"  --blockdev driver=rbd,node-name=N,pool=P,image=I[,namespace=NS]\n"
"             [,snapshot=S][,conf=FILE][,user=ID][,key-secret=SECRET_ID]\n"
"             [,x-connect-timeout=S][,x-shared-connection=NAME][,read-only=on]\n"
"  --blockdev driver=throttle,node-name=N,throttle-group=GROUP,file=NODE\n"
"             a throttle filter over node NODE; export N to limit it\n"
"  --blockdev driver=raw,node-name=N,file=NODE  (or file.driver=...,\n"
"             file.filename=... inline) QSD's raw format node: the same\n"
"             image as NODE; offset and size are not supported\n"
"  --object iothread,id=ID[,poll-max-ns=N]\n"
"  --object throttle-group,id=ID,limits.iops-total=N[,limits.bps-read=N,...]\n"
"             (or x-iops-total=N, ...): limits shared by its users; QMP\n"
"             qom-set path=ID,property=limits changes them at run time\n"
"  --object secret,id=ID,file=PATH[,format=raw|base64]  e.g. a Ceph key for\n"
"             key-secret= (format=base64 for the key as ceph auth prints it)\n"
"  --export type=vhost-user-blk,id=ID,node-name=N,addr.type=unix,\n"
"           addr.path=PATH (or addr.type=fd,addr.str=FD)[,writable=on]\n"
"           [,num-queues=N][,logical-block-size=512|4096][,iothread=ID]\n"
"  --nbd-server addr.type=unix,addr.path=PATH (or addr.type=inet,\n"
"           addr.host=H,addr.port=P)[,tls-creds=ID][,max-connections=N]\n"
"           [,handshake-max-seconds=N][,allow-insecure=on][,tls-authz=ID]\n"
"           the NBD server; TCP off loopback needs tls-creds= (or\n"
"           allow-insecure=on)\n"
"  --export type=nbd,id=ID,node-name=N[,name=NAME][,writable=on]\n"
"           [,description=TEXT][,multi-conn=on|off|auto][,iothread=ID]\n"
"  --object tls-creds-x509,id=ID,dir=DIR,endpoint=server[,verify-peer=on]\n"
"           [,allow.0=DN,...]   or tls-creds-psk,id=ID,dir=DIR,endpoint=server\n"
"           [,username=U]  (keys from DIR/keys.psk)\n"
"  --object authz-simple,id=ID,identity=NAME   or authz-list,id=ID\n"
"           [,policy=deny|allow][,rules.0.match=PATTERN,rules.0.policy=\n"
"           allow|deny[,rules.0.format=exact|glob],...]  who tls-authz=ID\n"
"           lets in (client certificate DN or PSK username);\n"
"           authz-list-file,id=ID,filename=PATH[,refresh=on]: rules from JSON\n"
"  --chardev socket,id=ID,path=PATH,server=on,wait=off\n"
"  --monitor [chardev=]ID[,pretty=on]   QMP monitor on that socket\n"
"\n"
"  --iothreads N           I/O threads (default 1)\n"
"  --poll-max-ns N         adaptive busy-poll limit, 0 disables (default 32768)\n"
"  --poll-host-check on|off  pause busy polling while the host has no idle\n"
"                          CPU (CPU pressure, /proc/pressure/cpu; default on)\n"
"  --pidfile PATH          write the process id to PATH, locked while the\n"
"                          daemon runs (a second daemon with the same PATH\n"
"                          refuses to start) and removed at exit\n"
"  --user USER[:GROUP]     once every image and socket is open, switch to\n"
"                          USER (its groups, or only GROUP); needs root.\n"
"                          --runas is the same\n"
"  --seccomp on|off        confine the I/O threads (and the --metrics HTTP\n"
"                          thread) to an allowlist of system calls; any other\n"
"                          call ends the process with a log line (default off)\n"
"  --metrics ADDR:PORT     serve Prometheus metrics at http://ADDR:PORT/metrics\n"
"                          (e.g. 127.0.0.1:9100; port 0 picks a free one, which\n"
"                          the log names); nothing listens without it\n"
"  --allow-core-dumps      let a crash dump core (and other processes of the\n"
"                          same user read its memory): off by default, as\n"
"                          a dump holds Ceph and other keys\n"
"  --daemonize             run in the background once every socket listens\n"
"                          (relative socket and --pidfile paths are made\n"
"                          absolute first: the daemon then moves to /)\n"
"  --log-level LEVEL       error|warn|info|debug (default info)\n"
"  --config FILE           read options from FILE, one per line: the option\n"
"                          name without --, a space, its value (vhost-blkd(8))\n"
"  -h, --help              this text\n"
"  -V, --version           print the version\n"
"\n"
"Signals: SIGTERM, SIGINT and SIGHUP stop (in-flight I/O drains, sockets\n"
"and the pidfile are removed); SIGUSR1 logs per-export and per-engine\n"
"counters.\n");
}

/* ---- main loop ------------------------------------------------------- */

typedef struct VbdEngineStatsJob {
    AioContext *ctx;
    unsigned int iothread;
} VbdEngineStatsJob;

/* In an iothread: one engine's counters, to the log. */
static void vbd_engine_stats_log(void *opaque, const char *name,
                                 const BlockEngineStats *st)
{
    VbdEngineStatsJob *job = opaque;

    log_msg(LOG_LEVEL_INFO, "iothread %u: %s: requests %" PRIu64
            ", submit syscalls %" PRIu64 ", completions %" PRIu64
            " (direct %" PRIu64 ", bh %" PRIu64 "), bh scheduled %" PRIu64
            ", retries %" PRIu64 ", bounced %" PRIu64, job->iothread,
            name, st->requests, st->submit_syscalls,
            st->completions, st->completions_direct, st->completions_bh,
            st->bh_scheduled, st->retries, st->bounced);
}

/* In each iothread: the counters of the engines it has created. */
static void vbd_engine_stats_cb(void *opaque)
{
    VbdEngineStatsJob *job = opaque;

    blk_engine_foreach_stats(job->ctx, vbd_engine_stats_log, job);
}

static void vbd_dump_stats(Vbd *d)
{
    for (unsigned int i = 0; i < d->n_iothreads; i++) {
        VbdEngineStatsJob job = {
            .ctx = iothread_get_aio_context(d->iothreads[i]),
            .iothread = i,
        };

        iothread_run_sync(d->iothreads[i], vbd_engine_stats_cb, &job);
    }

    if (d->host_load) {
        const HostLoadPolicy *p = host_load_monitor_policy(d->host_load);

        log_msg(LOG_LEVEL_INFO, "host load: %s, CPU pressure %.0f%%, %.2f "
                "CPUs idle (last %d ms); %" PRIu64 " changes, %" PRIu64
                " ms with polling paused", p->busy ? "busy" : "idle CPU",
                100 * p->pressure, p->idle_cpus, HOST_LOAD_INTERVAL_MS,
                p->transitions, host_load_monitor_busy_ms(d->host_load));
    }
    for (guint i = 0; i < d->state.exports->len; i++) {
        VuBlkExport *exp = vb_export_get_vu(g_ptr_array_index(
                                                d->state.exports, i));
        VuBlkExportStats st;

        vu_blk_export_get_stats(exp, &st);
        log_msg(LOG_LEVEL_INFO, "%s: %s, sessions %" PRIu64 ", requests %"
                PRIu64 ", completed %" PRIu64 ", batches %" PRIu64
                ", kicks %" PRIu64 ", poll hits %" PRIu64 ", budget yields %"
                PRIu64 ", notifies %" PRIu64 " (suppressed %" PRIu64
                "), resubmitted %" PRIu64 ", polling drivers %u",
                vu_blk_export_get_socket_path(exp),
                vu_blk_export_is_connected(exp) ? "connected" : "idle",
                st.sessions, st.requests, st.completed, st.batches, st.kicks,
                st.poll_hits, st.budget_yields, st.notifies,
                st.notifies_suppressed, st.resubmitted, st.driver_polls);
    }
    for (unsigned int i = 0; i < vb_nbd_num_exports(&d->state); i++) {
        NbdExportStats st;
        const char *id;
        VbNode *node;

        vb_nbd_export_stats(&d->state, i, &id, &node, &st);
        log_msg(LOG_LEVEL_INFO, "NBD export %s: %" PRIu64 " client(s) "
                "(%" PRIu64 " connections), requests %" PRIu64
                ", completed %" PRIu64 ", in flight %" PRIu64
                ", read %" PRIu64 " (%" PRIu64 " bytes), written %" PRIu64
                " (%" PRIu64 " bytes), flushes %" PRIu64, id, st.clients,
                st.connections, st.requests, st.completed, st.inflight,
                st.ops[VU_BLK_OP_READ].ops, st.ops[VU_BLK_OP_READ].bytes,
                st.ops[VU_BLK_OP_WRITE].ops, st.ops[VU_BLK_OP_WRITE].bytes,
                st.ops[VU_BLK_OP_FLUSH].ops);
    }
}

static void vbd_signal_cb(void *opaque)
{
    Vbd *d = opaque;
    struct signalfd_siginfo si;

    while (read(d->sig_fd, &si, sizeof(si)) == sizeof(si)) {
        switch (si.ssi_signo) {
        case SIGTERM:
        case SIGINT:
        case SIGHUP:
            info_report("signal %u (SIG%s): shutting down", si.ssi_signo,
                        sigabbrev_np(si.ssi_signo));
            d->quit = true;
            break;
        case SIGUSR1:
            vbd_dump_stats(d);
            break;
        default:
            break;
        }
    }
}

/*
 * Write our pid to --pidfile and keep it locked (an fcntl write lock on
 * the whole file, as qemu-storage-daemon does) until exit.  A second
 * daemon given the same file finds the lock taken and refuses to start
 * instead of overwriting the pid of the first; the file is opened without
 * O_TRUNC so that the loser does not erase the winner's pid either.
 */
static bool vbd_write_pidfile(Vbd *d, GError **errp)
{
    g_autofree char *text = g_strdup_printf("%d\n", (int)getpid());
    struct flock fl = {
        .l_type = F_WRLCK,
        .l_whence = SEEK_SET,
    };
    struct stat st_fd, st_path;
    int fd;

    for (;;) {
        fd = open(d->pidfile, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                  0644);
        if (fd < 0) {
            g_set_error(errp, VB_ERROR, 0, "--pidfile %s: %s", d->pidfile,
                        g_strerror(errno));
            return false;
        }
        if (fcntl(fd, F_SETLK, &fl) < 0) {
            int err = errno;
            char buf[32] = "";
            ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

            close(fd);
            if (err == EAGAIN || err == EACCES) {
                g_strstrip(buf);
                g_set_error(errp, VB_ERROR, 0, "--pidfile %s is locked by "
                            "another running daemon%s%s%s: give each daemon "
                            "its own pidfile (or stop that one first)",
                            d->pidfile, n > 0 ? " (pid " : "",
                            n > 0 ? buf : "", n > 0 ? ")" : "");
            } else {
                g_set_error(errp, VB_ERROR, 0, "--pidfile %s: cannot lock "
                            "it: %s", d->pidfile, g_strerror(err));
            }
            return false;
        }
        /* The previous owner may have unlinked it between our open and
         * our lock: then we would hold a lock on a file nobody sees. */
        if (fstat(fd, &st_fd) == 0 && stat(d->pidfile, &st_path) == 0 &&
            st_fd.st_dev == st_path.st_dev && st_fd.st_ino == st_path.st_ino) {
            break;
        }
        close(fd);
    }
    if (ftruncate(fd, 0) < 0 ||
        pwrite(fd, text, strlen(text), 0) != (ssize_t)strlen(text)) {
        g_set_error(errp, VB_ERROR, 0, "--pidfile %s: %s", d->pidfile,
                    g_strerror(errno));
        unlink(d->pidfile);
        close(fd);
        return false;
    }
    d->pidfile_fd = fd;
    return true;
}

/* One "Uid:" or "Gid:" line of /proc/self/status: real, effective, saved
 * and filesystem ids must all be @id. */
static bool vbd_check_status_ids(const char *status, const char *tag,
                                 unsigned long id, GError **errp)
{
    const char *line = strstr(status, tag);
    unsigned long v[4];

    if (!line || sscanf(line + strlen(tag), "%lu %lu %lu %lu", &v[0], &v[1],
                        &v[2], &v[3]) != 4) {
        g_set_error(errp, VB_ERROR, 0, "--user: no '%s' line in "
                    "/proc/self/status", tag);
        return false;
    }
    for (int i = 0; i < 4; i++) {
        if (v[i] != id) {
            g_set_error(errp, VB_ERROR, 0, "--user: /proc/self/status still "
                        "shows %s %lu %lu %lu %lu, expected %lu", tag, v[0],
                        v[1], v[2], v[3], id);
            return false;
        }
    }
    return true;
}

/*
 * Not dumpable unless --allow-core-dumps: a crash writes no core (which
 * would hold the Ceph keys, secrets and guest data of a daemon that often
 * runs as root), and no other process of the same user may ptrace it or
 * read its /proc/PID/mem.  Set before any secret is read, and again after
 * --user, since setuid() resets the flag to fs.suid_dumpable.
 */
static bool vbd_set_dumpable(Vbd *d, GError **errp)
{
    int want = d->allow_core_dumps ? 1 : 0;

    if (prctl(PR_SET_DUMPABLE, want, 0, 0, 0) < 0 ||
        prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != want) {
        g_set_error(errp, VB_ERROR, 0, "cannot %s core dumps "
                    "(prctl PR_SET_DUMPABLE %d): %s", want ? "allow" :
                    "turn off", want, g_strerror(errno));
        return false;
    }
    return true;
}

/* Main thread, after every image and socket is open: setgroups (or
 * initgroups), setgid, setuid, in that order; then prove it. */
static bool vbd_drop_privileges(Vbd *d, GError **errp)
{
    g_autofree char *status = NULL;
    int r;

    if (d->runas_group_set || d->runas_uid == (uid_t)-1) {
        r = setgroups(1, &d->runas_gid);
    } else {
        r = export_opts_initgroups(d->runas_user, d->runas_gid);
    }
    if (r < 0 || setgid(d->runas_gid) < 0 || setuid(d->runas_uid) < 0) {
        g_set_error(errp, VB_ERROR, 0, "--user %s: cannot switch to uid %u "
                    "gid %u: %s%s", d->runas_user, (unsigned int)d->runas_uid,
                    (unsigned int)d->runas_gid, g_strerror(errno),
                    errno == EPERM ? " (start vhost-blkd as root to use "
                    "--user)" : "");
        return false;
    }
    /* A process that can become root again has not dropped anything. */
    if (d->runas_uid != 0 && setuid(0) == 0) {
        g_set_error(errp, VB_ERROR, 0, "--user %s: could regain root after "
                    "setuid; refusing to run", d->runas_user);
        return false;
    }
    if (!g_file_get_contents("/proc/self/status", &status, NULL, errp)) {
        g_prefix_error(errp, "--user: ");
        return false;
    }
    if (!vbd_check_status_ids(status, "\nUid:", d->runas_uid, errp) ||
        !vbd_check_status_ids(status, "\nGid:", d->runas_gid, errp)) {
        return false;
    }
    info_report("running as uid %u gid %u (%s)", (unsigned int)d->runas_uid,
                (unsigned int)d->runas_gid, d->runas_user);
    return true;
}

/* --export socket=...,file=...: node node-name= (else id=, else
 * "node<i>") and export id= (else "export<i>") in the QMP model. */
static bool vbd_add_legacy_export(Vbd *d, unsigned int i, ExportOpts *e,
                                  GError **errp)
{
    g_autofree char *node_name = e->node_name ? g_strdup(e->node_name) :
                                 e->id ? g_strdup(e->id) :
                                 g_strdup_printf("node%u", i);
    g_autofree char *id = e->id ? g_strdup(e->id) :
                          g_strdup_printf("export%u", i);
    BlockOptions bo;
    int fd;
    VbExportParams p = {
        .id = id,
        .socket_path = e->socket,
        .socket_mode = e->socket_mode,
        .socket_chown = e->socket_chown,
        .socket_uid = e->socket_uid,
        .socket_gid = e->socket_gid,
        .pool_index = e->iothread,
        .first_batch = e->first_batch ? e->first_batch
                                      : VU_BLK_FIRST_BATCH_OFF,
    };

    /* The node as its driver read it (export_opts_parse()). */
    bo = e->block;
    bo.batch = e->batch;
    bo.inject = e->inject;
    if (e->throttle_group) {
        bo.throttle_group = vb_throttle_group_find(&d->state,
                                                   e->throttle_group);
        if (!bo.throttle_group) {
            g_set_error(errp, VB_ERROR, 0, "--export socket=%s: "
                        "throttle-group=%s: no such group; add --object "
                        "throttle-group,id=%s,limits.iops-total=N", e->socket,
                        e->throttle_group, e->throttle_group);
            return false;
        }
        throttle_group_ref(bo.throttle_group);
    } else if (e->throttle_set) {
        /* The export's own group, named after it (qom-set path=ID). */
        bo.throttle_group = throttle_group_new(id, &e->throttle, errp);
        if (!bo.throttle_group) {
            g_prefix_error(errp, "--export socket=%s: ", e->socket);
            return false;
        }
    }
    if (e->format) {
        /* format=qcow2: the file node below (error injection applies to
         * the file), the format node on top (and its throttle). */
        g_autofree char *file_name = g_strdup_printf("%s-file", node_name);
        BlockOptions fo = bo;
        VbNode *file;

        fo.throttle_group = NULL;
        file = vb_node_open(&d->state, file_name, &fo,
                            e->discard ? BLOCK_DISCARD_UNMAP :
                                         BLOCK_DISCARD_OFF, errp);
        p.node = NULL;
        if (file) {
            BlockOptions qo = e->format_block;

            qo.throttle_group = bo.throttle_group;
            qo.readonly = bo.readonly;
            qo.batch = bo.batch;
            p.node = vb_node_open_format(&d->state, node_name, file, &qo,
                                         e->discard ? BLOCK_DISCARD_UNMAP :
                                                      BLOCK_DISCARD_OFF,
                                         errp);
        }
    } else {
        p.node = vb_node_open(&d->state, node_name, &bo,
                              e->discard ? BLOCK_DISCARD_UNMAP :
                                           BLOCK_DISCARD_OFF, errp);
    }
    /* The filter took its own reference. */
    throttle_group_unref(bo.throttle_group);
    if (!p.node) {
        g_prefix_error(errp, "--export socket=%s: ", e->socket);
        return false;
    }
    /* Socket activation: the manager's socket bound to this path. */
    fd = systemd_sockets_take_path(&d->sd, e->socket, errp);
    if (*errp) {
        return false;
    }
    p.listen_fd = fd > 0 ? fd : 0;
    p.conf.logical_block_size = e->logical_block_size;
    p.conf.num_queues = e->num_queues;
    p.conf.queue_size = e->queue_size;
    p.conf.readonly = bo.readonly;
    p.conf.discard = e->discard;
    p.conf.write_zeroes = e->write_zeroes;
    g_strlcpy(p.conf.serial, e->serial, sizeof(p.conf.serial));
    if (!vb_export_create(&d->state, &p, errp)) {
        g_prefix_error(errp, "--export socket=%s: ", e->socket);
        return false;
    }
    return true;
}

static bool vbd_setup(Vbd *d, GError **errp)
{
    sigset_t mask;

    /* Block the signals before any thread exists: they all inherit it. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (d->sig_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "signalfd: %s", g_strerror(errno));
        return false;
    }
    /* Before any socket: a second daemon with our pidfile stops here,
     * without touching what the first one serves. */
    if (d->pidfile && !vbd_write_pidfile(d, errp)) {
        return false;
    }

    d->main_ctx = aio_context_new(errp);
    if (!d->main_ctx) {
        return false;
    }
    aio_context_acquire_thread(d->main_ctx);
    aio_set_fd_handler(d->main_ctx, d->sig_fd, vbd_signal_cb, NULL, NULL,
                       NULL, d);

    d->iothreads = g_new0(IOThread *, d->n_iothreads);
    for (unsigned int i = 0; i < d->n_iothreads; i++) {
        g_autofree char *name = g_strdup_printf("vb-iothread%u", i);

        d->iothreads[i] = iothread_create(name, d->poll_max_ns, errp);
        if (!d->iothreads[i]) {
            return false;
        }
    }

    {
        GError *nerr = NULL;

        /* Not being able to say "ready" is no reason not to serve. */
        if (!systemd_notify_open(&d->notify_fd, &nerr)) {
            warn_report("%s", nerr->message);
            g_clear_error(&nerr);
        }
    }
    if (!systemd_sockets_init(&d->sd, errp)) {
        return false;
    }
    /* Also with --poll-max-ns 0: iothreads of --object / object-add may
     * poll with their own poll-max-ns. */
    if (d->poll_host_check) {
        GError *lerr = NULL;

        d->host_load = host_load_monitor_new(d->main_ctx, &lerr);
        if (!d->host_load) {
            warn_report("--poll-host-check: %s; polling will not pause on "
                        "a busy host", lerr->message);
            g_clear_error(&lerr);
        }
    }

    vb_state_init(&d->state, d->main_ctx, d->iothreads, d->n_iothreads,
                  d->poll_max_ns);
    d->state.sd = &d->sd;       /* addr.type=fd claims passed sockets */
    d->state_ready = true;
    /* Objects first: --export throttle-group=NAME names one. */
    if (!qsd_cli_apply_objects(&d->qsd, &d->state, errp)) {
        return false;
    }
    for (guint i = 0; i < d->specs->len; i++) {
        if (!vbd_add_legacy_export(d, i, g_ptr_array_index(d->specs, i),
                                   errp)) {
            return false;
        }
    }
    if (!qsd_cli_apply(&d->qsd, &d->state, errp)) {
        return false;
    }
    if (d->qsd.monitors->len) {
        QmpServerConfig qcfg = {
            .ctx = d->main_ctx,
            .commands = vb_qmp_commands(),
            .opaque = &d->state,
            .package = "vhost-blkd " VHOST_BLK_VERSION,
        };

        sscanf(VHOST_BLK_VERSION, "%d.%d.%d", &qcfg.version_major,
               &qcfg.version_minor, &qcfg.version_micro);
        d->qmp = qmp_server_new(&qcfg);
        d->state.qmp = d->qmp;
        for (guint i = 0; i < d->qsd.monitors->len; i++) {
            QsdMonitorOpts *m = g_ptr_array_index(d->qsd.monitors, i);

            if (!qmp_server_listen(d->qmp, qsd_cli_monitor_path(&d->qsd, i),
                                   -1, m->pretty, errp)) {
                g_prefix_error(errp, "--monitor chardev=%s: ", m->chardev);
                return false;
            }
        }
    }

    for (unsigned int i = 0; i < d->sd.n; i++) {
        if (!d->sd.taken[i]) {
            info_report("socket %s (fd %u) from the service manager is not "
                        "bound to any --export socket= path; it is left for "
                        "addr.type=fd,addr.str=%u", d->sd.names[i],
                        SYSTEMD_LISTEN_FDS_START + i,
                        SYSTEMD_LISTEN_FDS_START + i);
        }
    }

    /* Bound now (a port below 1024 needs root), served once credentials
     * and the sandbox are set up. */
    if (d->metrics_addr) {
        d->metrics = metrics_http_new(&d->state, d->main_ctx,
                                      d->metrics_addr, errp);
        if (!d->metrics) {
            return false;
        }
    }

    /* Credentials first: glibc's setuid() runs in every thread, which the
     * sandbox would not allow. */
    if (d->runas_user && (!vbd_drop_privileges(d, errp) ||
                          !vbd_set_dumpable(d, errp))) {
        return false;
    }
    if (d->seccomp) {
        for (unsigned int i = 0; i < d->n_iothreads; i++) {
            if (!vb_iothread_confine(d->iothreads[i], errp)) {
                return false;
            }
        }
        for (guint i = 0; i < d->state.iothreads->len; i++) {
            VbIOThreadObj *t = g_ptr_array_index(d->state.iothreads, i);

            if (!vb_iothread_confine(t->iothread, errp)) {
                return false;
            }
        }
        /* object-add from now on confines its thread itself. */
        d->state.seccomp = true;
        info_report("seccomp: %u iothread(s) confined to the allowlist",
                    d->n_iothreads + d->state.iothreads->len);
    }
    if (d->metrics && !metrics_http_start(d->metrics, d->seccomp, errp)) {
        return false;
    }
    return true;
}

static void vbd_cleanup(Vbd *d)
{
    /* First: a scrape may be waiting for this thread. */
    metrics_http_free(d->metrics);
    d->metrics = NULL;
    if (d->qmp) {
        d->state.qmp = NULL;
        qmp_server_free(d->qmp);
        d->qmp = NULL;
    }
    if (d->state_ready) {
        /* Stops accepting everywhere first, then drains each export. */
        vb_state_cleanup(&d->state);
        d->state_ready = false;
    }
    if (d->iothreads) {
        for (unsigned int i = 0; i < d->n_iothreads; i++) {
            if (d->iothreads[i]) {
                iothread_destroy(d->iothreads[i]);
            }
        }
        g_free(d->iothreads);
        d->iothreads = NULL;
    }
    host_load_monitor_free(d->host_load);
    d->host_load = NULL;
    if (d->main_ctx) {
        if (d->sig_fd >= 0) {
            aio_set_fd_handler(d->main_ctx, d->sig_fd, NULL, NULL, NULL,
                               NULL, NULL);
        }
        /* Run what the shutdown left scheduled. */
        while (aio_poll(d->main_ctx, false)) {
        }
        aio_context_free(d->main_ctx);
        d->main_ctx = NULL;
    }
    if (d->sig_fd >= 0) {
        close(d->sig_fd);
        d->sig_fd = -1;
    }
    if (d->pidfile_fd >= 0) {
        /* Unlink while still holding the lock, then drop it. */
        unlink(d->pidfile);
        close(d->pidfile_fd);
        d->pidfile_fd = -1;
    }
    systemd_sockets_clear(&d->sd);
    systemd_notify_close(&d->notify_fd);
}

/* Fork; the parent waits until the child reports that setup is done. */
static void vbd_daemonize_start(Vbd *d)
{
    int fds[2];
    pid_t pid;
    char c;

    if (pipe2(fds, O_CLOEXEC) < 0) {
        fprintf(stderr, "vhost-blkd: pipe: %s\n", g_strerror(errno));
        exit(1);
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "vhost-blkd: fork: %s\n", g_strerror(errno));
        exit(1);
    }
    if (pid > 0) {
        ssize_t n;

        close(fds[1]);
        do {
            n = read(fds[0], &c, 1);
        } while (n < 0 && errno == EINTR);
        /* The child printed its own error message. */
        _exit(n == 1 && c == 0 ? 0 : 1);
    }
    close(fds[0]);
    setsid();
    d->ready_fd = fds[1];
}

static void vbd_daemonize_finish(Vbd *d)
{
    int null = open("/dev/null", O_RDWR);
    char c = 0;

    if (chdir("/") < 0) {
        /* Not fatal: every path was made absolute (vbd_check_config). */
    }
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        if (null > STDERR_FILENO) {
            close(null);
        }
    }
    log_use_syslog(true);
    if (write(d->ready_fd, &c, 1) != 1) {
        /* The parent is gone; keep serving. */
    }
    close(d->ready_fd);
    d->ready_fd = -1;
}

/* ---- command line ---------------------------------------------------- */

/* What the command line asks for, once parsed. */
typedef enum VbdArgs {
    VBD_ARGS_RUN,               /* valid: serve the exports */
    VBD_ARGS_DONE,              /* --help or --version printed: exit 0 */
    VBD_ARGS_BAD,               /* an error was printed: exit 1 */
} VbdArgs;

enum {
    OPT_EXPORT = 256, OPT_IOTHREADS, OPT_POLL_MAX_NS, OPT_PIDFILE,
    OPT_DAEMONIZE, OPT_LOG_LEVEL, OPT_USER, OPT_SECCOMP, OPT_POLL_HOST_CHECK,
    OPT_BLOCKDEV, OPT_OBJECT, OPT_CHARDEV, OPT_MONITOR, OPT_QSD_UNSUPPORTED,
    OPT_METRICS, OPT_ALLOW_CORE_DUMPS, OPT_NBD_SERVER,
};

/* "FILE:LINE" of the option being applied when a --config file gave it,
 * else NULL: errors then say where to look, not just what. */
static const char *vbd_arg_where;

/* Print "vhost-blkd: [FILE:LINE: ]MESSAGE" for a bad option. */
static void G_GNUC_PRINTF(1, 2) vbd_arg_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "vhost-blkd: ");
    if (vbd_arg_where) {
        fprintf(stderr, "%s: ", vbd_arg_where);
    }
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* --user USER[:GROUP]; false after printing why it is not usable. */
static bool vbd_parse_user(Vbd *d, const char *arg)
{
    g_auto(GStrv) parts = g_strsplit(arg, ":", 2);
    GError *err = NULL;
    gid_t gid;

    if (!parts[0] || !*parts[0] ||
        !export_opts_lookup_user(parts[0], &d->runas_uid, &d->runas_gid,
                                 &err) ||
        (parts[1] && !export_opts_lookup_group(parts[1], &gid, &err))) {
        vbd_arg_error("--user %s: %s\n", arg,
                err ? err->message : "give USER or USER:GROUP");
        return false;
    }
    if (parts[1]) {
        d->runas_gid = gid;
        d->runas_group_set = true;
    } else if (d->runas_gid == (gid_t)-1) {
        vbd_arg_error("--user %s: uid %s has no "
                "passwd entry, so give its group too: --user "
                "UID:GROUP\n", arg, parts[0]);
        return false;
    }
    g_free(d->runas_user);
    d->runas_user = g_strdup(parts[0]);
    return true;
}

/*
 * Apply one option that takes effect when the daemon runs (every OPT_*);
 * false after printing why @arg is not valid for it.
 */
static bool vbd_set_option(Vbd *d, int opt, const char *arg)
{
    GError *err = NULL;

    switch (opt) {
    case OPT_NBD_SERVER:
        if (!qsd_cli_add(&d->qsd, QSD_OPT_NBD_SERVER, arg, &err)) {
            vbd_arg_error("--nbd-server %s: %s\n", arg, err->message);
            g_error_free(err);
            return false;
        }
        break;
    case OPT_BLOCKDEV:
    case OPT_OBJECT:
    case OPT_CHARDEV:
    case OPT_MONITOR: {
        static const QsdOptKind kinds[] = {
            [OPT_BLOCKDEV - OPT_BLOCKDEV] = QSD_OPT_BLOCKDEV,
            [OPT_OBJECT - OPT_BLOCKDEV] = QSD_OPT_OBJECT,
            [OPT_CHARDEV - OPT_BLOCKDEV] = QSD_OPT_CHARDEV,
            [OPT_MONITOR - OPT_BLOCKDEV] = QSD_OPT_MONITOR,
        };
        QsdOptKind kind = kinds[opt - OPT_BLOCKDEV];

        if (!qsd_cli_add(&d->qsd, kind, arg, &err)) {
            g_autofree char *shown = qsd_cli_redact(arg);

            vbd_arg_error("%s %s: %s\n", qsd_opt_name(kind),
                    shown, err->message);
            g_error_free(err);
            return false;
        }
        break;
    }
    case OPT_EXPORT:
        if (qsd_cli_export_is_qsd(arg)) {
            if (!qsd_cli_add(&d->qsd, QSD_OPT_EXPORT, arg, &err)) {
                g_autofree char *shown = qsd_cli_redact(arg);

                vbd_arg_error("--export %s: %s\n", shown,
                        err->message);
                g_error_free(err);
                return false;
            }
        } else if (!export_opts_list_add(d->specs, arg, &err)) {
            vbd_arg_error("--export %s: %s\n", arg,
                    err->message);
            return false;
        }
        break;
    case OPT_IOTHREADS: {
        unsigned int n;

        if (!export_opts_parse_uint(arg, VBD_MAX_IOTHREADS, &n) || n == 0) {
            vbd_arg_error("--iothreads %s: use 1 to %d\n",
                    arg, VBD_MAX_IOTHREADS);
            return false;
        }
        d->n_iothreads = n;
        break;
    }
    case OPT_POLL_MAX_NS: {
        uint64_t v;

        if (!export_opts_parse_size(arg, &v) || v > INT64_MAX) {
            vbd_arg_error("--poll-max-ns %s: use a number "
                    "of nanoseconds (0 disables polling)\n", arg);
            return false;
        }
        d->poll_max_ns = v;
        break;
    }
    case OPT_PIDFILE:
        g_free(d->pidfile);
        d->pidfile = g_strdup(arg);
        break;
    case OPT_DAEMONIZE:
        d->daemonize = true;
        break;
    case OPT_ALLOW_CORE_DUMPS:
        d->allow_core_dumps = true;
        break;
    case OPT_LOG_LEVEL: {
        LogLevel level;

        if (!log_level_parse(arg, &level)) {
            vbd_arg_error("--log-level %s: use error, warn, "
                    "info or debug\n", arg);
            return false;
        }
        log_set_level(level);
        break;
    }
    case OPT_USER:
        return vbd_parse_user(d, arg);
    case OPT_POLL_HOST_CHECK:
        if (!export_opts_parse_bool(arg, &d->poll_host_check)) {
            vbd_arg_error("--poll-host-check %s: use on or "
                    "off\n", arg);
            return false;
        }
        break;
    case OPT_METRICS: {
        g_autofree char *host = NULL, *port = NULL;

        if (!metrics_http_parse_addr(arg, &host, &port, &err)) {
            vbd_arg_error("%s\n", err->message);
            g_error_free(err);
            return false;
        }
        g_free(d->metrics_addr);
        d->metrics_addr = g_strdup(arg);
        break;
    }
    case OPT_SECCOMP:
        if (!export_opts_parse_bool(arg, &d->seccomp)) {
            vbd_arg_error("--seccomp %s: use on or off\n",
                    arg);
            return false;
        }
        if (d->seccomp && !sandbox_available()) {
            vbd_arg_error("--seccomp on: this build has "
                    "no libseccomp support (install libseccomp-dev and "
                    "rebuild)\n");
            return false;
        }
        break;
    default:
        g_assert_not_reached();
    }
    return true;
}

/* What only the whole command line can tell; false after printing why. */
static bool vbd_check_config(Vbd *d)
{
    GError *err = NULL;

    if (d->specs->len == 0 && d->qsd.n_exports == 0 &&
        d->qsd.monitors->len == 0) {
        fprintf(stderr, "vhost-blkd: no --export given; add at least one "
                "--export socket=PATH,file=PATH, or a --monitor to add "
                "exports at run time (see vhost-blkd --help)\n");
        return false;
    }
    if (!qsd_cli_check(&d->qsd, &err)) {
        fprintf(stderr, "vhost-blkd: %s\n", err->message);
        g_error_free(err);
        return false;
    }
    if (d->daemonize) {
        /*
         * The daemon moves to "/" once set up: a relative socket or
         * pidfile would be created here but unlinked (at exit) relative
         * to "/".  Resolve them now, against the directory we run in.
         */
        if (d->pidfile && !g_path_is_absolute(d->pidfile)) {
            char *abs = g_canonicalize_filename(d->pidfile, NULL);

            g_free(d->pidfile);
            d->pidfile = abs;
        }
        for (guint i = 0; i < d->specs->len; i++) {
            ExportOpts *e = g_ptr_array_index(d->specs, i);

            if (!g_path_is_absolute(e->socket)) {
                char *abs = g_canonicalize_filename(e->socket, NULL);

                g_free(e->socket);
                e->socket = abs;
            }
            if (!export_opts_absolute_file(e, &err)) {
                fprintf(stderr, "vhost-blkd: --export socket=%s: %s\n",
                        e->socket, err->message);
                g_error_free(err);
                return false;
            }
        }
        qsd_cli_absolute_paths(&d->qsd);
    }
    for (guint i = 0; i < d->specs->len; i++) {
        ExportOpts *e = g_ptr_array_index(d->specs, i);

        if (e->iothread >= (int)d->n_iothreads) {
            fprintf(stderr, "vhost-blkd: --export socket=%s: iothread=%d, but "
                    "there are only %u iothreads; raise --iothreads\n",
                    e->socket, e->iothread, d->n_iothreads);
            return false;
        }
    }
    return true;
}

/* Parse the command line into @d, printing any error or --help text. */
static VbdArgs vbd_parse_args(Vbd *d, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "export", required_argument, NULL, OPT_EXPORT },
        { "iothreads", required_argument, NULL, OPT_IOTHREADS },
        { "poll-max-ns", required_argument, NULL, OPT_POLL_MAX_NS },
        { "pidfile", required_argument, NULL, OPT_PIDFILE },
        { "daemonize", no_argument, NULL, OPT_DAEMONIZE },
        { "allow-core-dumps", no_argument, NULL, OPT_ALLOW_CORE_DUMPS },
        { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
        { "user", required_argument, NULL, OPT_USER },
        { "runas", required_argument, NULL, OPT_USER },
        { "seccomp", required_argument, NULL, OPT_SECCOMP },
        { "metrics", required_argument, NULL, OPT_METRICS },
        { "poll-host-check", required_argument, NULL, OPT_POLL_HOST_CHECK },
        { "blockdev", required_argument, NULL, OPT_BLOCKDEV },
        { "object", required_argument, NULL, OPT_OBJECT },
        { "chardev", required_argument, NULL, OPT_CHARDEV },
        { "monitor", required_argument, NULL, OPT_MONITOR },
        { "nbd-server", required_argument, NULL, OPT_NBD_SERVER },
        { "trace", required_argument, NULL, OPT_QSD_UNSUPPORTED },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int opt, idx = 0, cur;

    /*
     * "+": no permutation, so argv[cur] is the option just returned
     * (config_file_arg_origin() is by argv index); ":": a missing value
     * returns ':' rather than a message naming argv[0].  getopt prints
     * nothing itself: every message says which file line, if any.
     */
    opterr = 0;
    for (;;) {
        cur = optind;
        opt = getopt_long(argc, argv, "+:hVT:", longopts, &idx);
        if (opt == -1) {
            break;
        }
        vbd_arg_where = config_file_arg_origin(cur);
        if (vbd_arg_where && optarg && optarg != argv[cur] &&
            optarg == argv[cur + 1] && config_file_arg_lacks_value(cur)) {
            /* A bare "export" line took the next line as its value. */
            opt = ':';
        }
        switch (opt) {
        case ':':
            if (vbd_arg_where) {
                vbd_arg_error("'%s' needs a value (write '%s VALUE' on one "
                              "line)\n", argv[cur] + 2, argv[cur] + 2);
            } else {
                vbd_arg_error("%s needs a value (see vhost-blkd --help)\n",
                              argv[cur]);
            }
            return VBD_ARGS_BAD;
        case 'T':
        case OPT_QSD_UNSUPPORTED:
            vbd_arg_error("%s%s: this qemu-storage-daemon "
                    "option is not supported (vhost-blkd serves "
                    "vhost-user-blk exports only; it logs with "
                    "--log-level)\n", opt == 'T' ? "-T" : "--",
                    opt == 'T' ? "" : longopts[idx].name);
            return VBD_ARGS_BAD;
        case 'h':
            vbd_usage(stdout);
            return VBD_ARGS_DONE;
        case 'V':
            printf("vhost-blkd %s\n", VHOST_BLK_VERSION);
            return VBD_ARGS_DONE;
        case '?':
            if (vbd_arg_where) {
                /* Not the binary's path and "--bogus": the line's name. */
                vbd_arg_error("unknown option '%.*s' (each line starts with "
                              "a vhost-blkd option name without --; see "
                              "vhost-blkd --help)\n",
                              (int)strcspn(argv[cur] + 2, "="),
                              argv[cur] + 2);
            } else if (optopt) {
                vbd_arg_error("unknown option '-%c'\n", optopt);
                fprintf(stderr, "Try 'vhost-blkd --help' for more "
                        "information.\n");
            } else {
                /* The name only: "--objct=secret,data=KEY" has a key. */
                vbd_arg_error("unknown option '%.*s'\n",
                              (int)strcspn(argv[cur], "="), argv[cur]);
                fprintf(stderr, "Try 'vhost-blkd --help' for more "
                        "information.\n");
            }
            return VBD_ARGS_BAD;
        default:
            if (!vbd_set_option(d, opt, optarg)) {
                return VBD_ARGS_BAD;
            }
            break;
        }
    }
    vbd_arg_where = config_file_arg_origin(optind);
    if (optind < argc) {
        /* It may be a stray "data=KEY" of a split --object. */
        g_autofree char *shown = qsd_cli_redact(argv[optind]);

        vbd_arg_error("unexpected argument '%s' (options "
                "start with --; see vhost-blkd --help)\n", shown);
        return VBD_ARGS_BAD;
    }
    vbd_arg_where = NULL;
    return vbd_check_config(d) ? VBD_ARGS_RUN : VBD_ARGS_BAD;
}

/* Serve the exports of @d until SIGTERM/SIGINT; the exit status. */
/* Tell the service manager (Type=notify); a failure is only logged. */
static void G_GNUC_PRINTF(2, 3) vbd_notify(Vbd *d, const char *fmt, ...)
{
    g_autofree char *state = NULL;
    GError *err = NULL;
    va_list ap;

    va_start(ap, fmt);
    state = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (!systemd_notify_send(d->notify_fd, state, &err)) {
        warn_report("%s", err->message);
        g_clear_error(&err);
    }
}

static int vbd_run(Vbd *d)
{
    GError *err = NULL;

    /* Before the fork (the child inherits it) and before any key is read. */
    if (!vbd_set_dumpable(d, &err)) {
        error_report("%s", err->message);
        g_clear_error(&err);
        return 1;
    }
    if (d->allow_core_dumps) {
        info_report("core dumps allowed (--allow-core-dumps): a dump holds "
                    "this daemon's keys and secrets");
    }
    if (d->daemonize) {
        vbd_daemonize_start(d);
    }
    if (!vbd_setup(d, &err)) {
        error_report("%s", err->message);
        g_clear_error(&err);
        vbd_cleanup(d);
        return 1;
    }
    /* The pool (--iothreads, 1 by default) serves exports and QMP
     * block-export-add without iothread=; --object iothread adds named
     * ones.  Counted apart: two --object iothread are two, not three. */
    if (d->state.iothreads->len) {
        info_report("ready: %u export(s), %u iothread object(s) and %u pool "
                    "iothread(s) for exports without iothread=%s",
                    d->state.exports->len + vb_nbd_num_exports(&d->state),
                    d->state.iothreads->len,
                    d->n_iothreads, d->qmp ? ", QMP monitor" : "");
    } else {
        info_report("ready: %u export(s), %u iothread(s)%s",
                    d->state.exports->len + vb_nbd_num_exports(&d->state),
                    d->n_iothreads,
                    d->qmp ? ", QMP monitor" : "");
    }
    if (d->daemonize) {
        vbd_daemonize_finish(d);
    }
    vbd_notify(d, "READY=1\nSTATUS=serving %u export(s)",
               d->state.exports->len);

    while (!d->quit && !d->state.quit) {
        aio_poll(d->main_ctx, true);
    }
    vbd_notify(d, "STOPPING=1\nSTATUS=draining in-flight I/O");
    if (d->state.quit) {
        info_report("quit requested on the monitor: shutting down");
    }

    vbd_cleanup(d);
    return 0;
}

int main(int argc, char **argv)
{
    Vbd d = {
        .n_iothreads = 1,
        .poll_max_ns = 32768,
        .poll_host_check = true,
        .sig_fd = -1,
        .pidfile_fd = -1,
        .ready_fd = -1,
        .notify_fd = -1,
    };
    GError *err = NULL;
    char **argv_orig = argv;
    int ret;

    log_set_program_name("vhost-blkd");
    if (!config_file_expand_args(&argc, &argv, &err)) {
        fprintf(stderr, "vhost-blkd: %s\n", err->message);
        g_error_free(err);
        return 1;
    }
    d.specs = g_ptr_array_new_with_free_func((GDestroyNotify)export_opts_free);
    qsd_cli_init(&d.qsd);

    switch (vbd_parse_args(&d, argc, argv)) {
    case VBD_ARGS_DONE:
        ret = 0;
        break;
    case VBD_ARGS_BAD:
        ret = 1;
        break;
    case VBD_ARGS_RUN:
    default:
        ret = vbd_run(&d);
        break;
    }
    if (argv != argv_orig) {
        g_strfreev(argv);       /* the --config expansion */
    }
    g_ptr_array_free(d.specs, true);
    qsd_cli_cleanup(&d.qsd);
    g_free(d.pidfile);
    g_free(d.runas_user);
    g_free(d.metrics_addr);
    if (blk_async_workers()) {
        /*
         * A blockdev-add or block_resize still waits for a cluster in a
         * worker (its QMP command was answered with an error): exit()
         * would tear librados' globals down under that thread (seen to
         * crash).  Leave without running the destructors.
         */
        warn_report("%u open(s) or resize(s) of an image were still "
                    "waiting for a cluster; exiting without them",
                    blk_async_workers());
        fflush(stdout);
        fflush(stderr);
        _exit(ret);
    }
    return ret;
}
