/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * soak-reconnect: kill -9 / restart cycles of a vhost-user-blk back-end
 * with writes in flight, reconnecting as QEMU does, and proof that no
 * acknowledged write is lost (scripts/soak.sh runs it).
 *
 * It starts the back-end itself (the command after "--"), so that it can
 * SIGKILL and restart it at a moment of its choosing.  Each cycle: submit
 * a batch of tagged 4 KiB writes on every queue (distinct blocks), kick,
 * wait a random 0-3 ms, SIGKILL the back-end, restart it, reconnect, reap
 * every request (each must succeed once the restarted back-end replays
 * the inflight region), then read back every block written so far and
 * check its tag (block number and the sequence number of its last write).
 * Single-threaded: it drives all queues from the main thread.
 */
#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-frontend.h"

#include <getopt.h>
#include <signal.h>
#include <sys/wait.h>

#define SOAK_BLOCK 4096
#define SOAK_MAGIC 0x766273616b2d7277ULL

typedef struct SoakReq {
    uint64_t block;
    uint64_t seq;
    uint8_t *buf;
} SoakReq;

typedef struct Soak {
    const char *socket;
    char **daemon_argv;
    pid_t pid;
    unsigned int cycles;
    unsigned int queues;
    unsigned int iodepth;
    uint64_t nblocks;
    uint64_t *expect;           /* per block: last acknowledged seq, 0 none */
    uint64_t seq;
    VhostUserFrontend *fe;
    SoakReq *reqs;              /* queues * iodepth */
    uint8_t *rbuf;
    uint64_t writes;
    uint64_t inflight_at_kill;
    uint64_t verify_errors;
    uint64_t io_errors;
} Soak;

static void soak_fill(uint8_t *buf, uint64_t block, uint64_t seq)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15ULL ^ block;
    uint64_t *w = (uint64_t *)buf;

    w[0] = SOAK_MAGIC;
    w[1] = block;
    w[2] = seq;
    for (size_t i = 3; i < SOAK_BLOCK / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x;
    }
}

static bool soak_check(const uint8_t *buf, uint64_t block, uint64_t seq)
{
    g_autofree uint8_t *want = g_malloc(SOAK_BLOCK);

    soak_fill(want, block, seq);
    return !memcmp(buf, want, SOAK_BLOCK);
}

static bool soak_spawn(Soak *s)
{
    s->pid = fork();
    if (s->pid < 0) {
        fprintf(stderr, "soak-reconnect: fork: %s\n", g_strerror(errno));
        return false;
    }
    if (s->pid == 0) {
        execvp(s->daemon_argv[0], s->daemon_argv);
        fprintf(stderr, "soak-reconnect: cannot run %s: %s\n",
                s->daemon_argv[0], g_strerror(errno));
        _exit(127);
    }
    return true;
}

static void soak_kill(Soak *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

/* One request, waiting for it: the status byte, or -errno. */
static int soak_sync_req(Soak *s, unsigned int q, uint32_t type,
                         uint64_t block, uint8_t *buf, bool in)
{
    struct iovec iov = { buf, SOAK_BLOCK };
    VhostUserFrontendCompletion c;
    int r;

    r = vhost_user_frontend_blk_submit(s->fe, q, type,
                                       block * (SOAK_BLOCK / 512), &iov, 1,
                                       in, NULL);
    if (r < 0) {
        return r;
    }
    r = vhost_user_frontend_kick(s->fe, q);
    if (r < 0) {
        return r;
    }
    for (;;) {
        r = vhost_user_frontend_reap(s->fe, q, &c, 1);
        if (r < 0) {
            return r;
        }
        if (r == 1) {
            return c.status;
        }
        r = vhost_user_frontend_wait(s->fe, q, 10000);
        if (r <= 0) {
            return r < 0 ? r : -ETIMEDOUT;
        }
    }
}

/* Reap everything outstanding on every queue; true if all succeeded. */
static bool soak_reap_all(Soak *s)
{
    VhostUserFrontendCompletion c[64];

    for (unsigned int q = 0; q < s->queues; q++) {
        while (vhost_user_frontend_outstanding(s->fe, q)) {
            int n = vhost_user_frontend_reap(s->fe, q, c, G_N_ELEMENTS(c));

            if (n < 0) {
                fprintf(stderr, "soak-reconnect: queue %u: reap: %s\n", q,
                        g_strerror(-n));
                return false;
            }
            for (int i = 0; i < n; i++) {
                SoakReq *r = c[i].opaque;

                if (c[i].status != VIRTIO_BLK_S_OK) {
                    fprintf(stderr, "soak-reconnect: write of block %" PRIu64
                            " failed with status %u\n", r->block,
                            c[i].status);
                    s->io_errors++;
                    continue;
                }
                s->expect[r->block] = r->seq;
            }
            if (n == 0 && vhost_user_frontend_wait(s->fe, q, 10000) <= 0) {
                fprintf(stderr, "soak-reconnect: queue %u: %u writes never "
                        "completed after the restart\n", q,
                        vhost_user_frontend_outstanding(s->fe, q));
                return false;
            }
        }
    }
    return true;
}

static bool soak_verify(Soak *s)
{
    for (uint64_t b = 0; b < s->nblocks; b++) {
        unsigned int q = b % s->queues;
        int r;

        if (!s->expect[b]) {
            continue;
        }
        r = soak_sync_req(s, q, VIRTIO_BLK_T_IN, b, s->rbuf, true);
        if (r != VIRTIO_BLK_S_OK) {
            fprintf(stderr, "soak-reconnect: read of block %" PRIu64
                    " failed: %d\n", b, r);
            s->io_errors++;
            return false;
        }
        if (!soak_check(s->rbuf, b, s->expect[b])) {
            const uint64_t *w = (const uint64_t *)s->rbuf;

            fprintf(stderr, "soak-reconnect: block %" PRIu64 ": expected "
                    "write #%" PRIu64 ", found magic %#" PRIx64 " block %"
                    PRIu64 " write #%" PRIu64 " (lost write)\n", b,
                    s->expect[b], w[0], w[1], w[2]);
            s->verify_errors++;
        }
    }
    return s->verify_errors == 0;
}

static bool soak_cycle(Soak *s, unsigned int cycle, GRand *rng)
{
    g_autoptr(GError) err = NULL;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;

    for (unsigned int q = 0; q < s->queues; q++) {
        for (unsigned int i = 0; i < s->iodepth; i++) {
            SoakReq *r = &s->reqs[q * s->iodepth + i];
            struct iovec iov = { r->buf, SOAK_BLOCK };
            uint64_t slots = s->nblocks / s->queues;
            int ret;

            /* Distinct blocks within a batch, all of queue q's residue. */
            r->block = ((g_rand_int(rng) % (slots / s->iodepth)) *
                        s->iodepth + i) * s->queues + q;
            r->seq = ++s->seq;
            soak_fill(r->buf, r->block, r->seq);
            ret = vhost_user_frontend_blk_submit(
                s->fe, q, VIRTIO_BLK_T_OUT, r->block * (SOAK_BLOCK / 512),
                &iov, 1, false, r);
            if (ret < 0) {
                fprintf(stderr, "soak-reconnect: submit: %s\n",
                        g_strerror(-ret));
                return false;
            }
            s->writes++;
        }
        if (vhost_user_frontend_kick(s->fe, q) < 0) {
            fprintf(stderr, "soak-reconnect: kick failed\n");
            return false;
        }
    }
    g_usleep(g_rand_int_range(rng, 0, 3000));
    soak_kill(s);
    for (unsigned int q = 0; q < s->queues; q++) {
        vhost_user_frontend_rings(s->fe, q, &desc, &avail, &used);
        s->inflight_at_kill += (uint16_t)(avail->idx - used->idx);
    }
    if (!soak_spawn(s)) {
        return false;
    }
    if (!vhost_user_frontend_reconnect(s->fe, 15000, &err)) {
        fprintf(stderr, "soak-reconnect: cycle %u: reconnect: %s\n", cycle,
                err->message);
        return false;
    }
    return soak_reap_all(s) && s->io_errors == 0 && soak_verify(s);
}

static void soak_usage(FILE *f)
{
    fprintf(f,
"Usage: soak-reconnect --socket PATH [options] -- BACKEND [ARGS...]\n"
"\n"
"Start BACKEND, then N times: submit writes, SIGKILL it with writes in\n"
"flight, restart it, reconnect, and check every acknowledged write.\n"
"\n"
"  --socket PATH     the back-end's vhost-user socket\n"
"  --cycles N        kill/restart cycles (default 20)\n"
"  --queues N        queues (the back-end must offer them; default 1)\n"
"  --iodepth N       writes per queue per cycle (default 32)\n"
"  --size N[k|M|G]   bytes of the disk to use (default 16M)\n"
"  --seed N          random seed (default 1)\n"
"\n"
"Exit status 0 if every write completed and read back intact.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "socket", required_argument, NULL, 's' },
        { "cycles", required_argument, NULL, 'c' },
        { "queues", required_argument, NULL, 'q' },
        { "iodepth", required_argument, NULL, 'd' },
        { "size", required_argument, NULL, 'z' },
        { "seed", required_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    Soak s = { .cycles = 20, .queues = 1, .iodepth = 32 };
    VhostUserFrontendOptions fo = { 0 };
    g_autoptr(GError) err = NULL;
    g_autoptr(GRand) rng = NULL;
    uint64_t size = 16 << 20;
    guint32 seed = 1;
    uint8_t *mem;
    bool ok = true;
    int opt;

    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            s.socket = optarg;
            break;
        case 'c':
            s.cycles = atoi(optarg);
            break;
        case 'q':
            s.queues = atoi(optarg);
            break;
        case 'd':
            s.iodepth = atoi(optarg);
            break;
        case 'z': {
            char *end;

            size = g_ascii_strtoull(optarg, &end, 0);
            if (*end == 'k' || *end == 'K') {
                size <<= 10;
            } else if (*end == 'M') {
                size <<= 20;
            } else if (*end == 'G') {
                size <<= 30;
            }
            break;
        }
        case 'r':
            seed = atoi(optarg);
            break;
        case 'h':
            soak_usage(stdout);
            return 0;
        default:
            soak_usage(stderr);
            return 2;
        }
    }
    s.nblocks = size / SOAK_BLOCK;
    if (!s.socket || optind >= argc || s.queues < 1 ||
        s.queues > VHOST_USER_FRONTEND_MAX_QUEUES || s.iodepth < 1 ||
        s.iodepth > 64 || s.nblocks < (uint64_t)s.queues * s.iodepth * 2) {
        soak_usage(stderr);
        return 2;
    }
    s.daemon_argv = argv + optind;
    signal(SIGPIPE, SIG_IGN);
    rng = g_rand_new_with_seed(seed);
    s.expect = g_new0(uint64_t, s.nblocks);
    s.reqs = g_new0(SoakReq, s.queues * s.iodepth);

    if (!soak_spawn(&s)) {
        return 1;
    }
    fo.socket_path = s.socket;
    fo.connect_timeout_ms = 15000;
    fo.num_queues = s.queues;
    fo.queue_size = 256;
    fo.mem_size = 64 << 20;
    s.fe = vhost_user_frontend_new(&fo, &err);
    if (!s.fe || !vhost_user_frontend_start(s.fe, &err)) {
        fprintf(stderr, "soak-reconnect: %s\n", err->message);
        soak_kill(&s);
        return 1;
    }
    mem = vhost_user_frontend_mem_alloc(s.fe, (size_t)(s.queues * s.iodepth +
                                        1) * SOAK_BLOCK, 4096, &err);
    if (!mem) {
        fprintf(stderr, "soak-reconnect: %s\n", err->message);
        soak_kill(&s);
        return 1;
    }
    for (unsigned int i = 0; i < s.queues * s.iodepth; i++) {
        s.reqs[i].buf = mem + (size_t)i * SOAK_BLOCK;
    }
    s.rbuf = mem + (size_t)s.queues * s.iodepth * SOAK_BLOCK;

    for (unsigned int c = 0; c < s.cycles && ok; c++) {
        ok = soak_cycle(&s, c + 1, rng);
    }
    printf("kill cycles %u, writes %" PRIu64 ", in flight at the kills %"
           PRIu64 ", I/O errors %" PRIu64 ", lost or wrong writes %" PRIu64
           "\n", s.cycles, s.writes, s.inflight_at_kill, s.io_errors,
           s.verify_errors);
    vhost_user_frontend_free(s.fe);
    soak_kill(&s);
    g_free(s.expect);
    g_free(s.reqs);
    return ok ? 0 : 1;
}
