/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk-bench: a userspace virtio-blk driver that benchmarks a
 * vhost-user-blk back-end (vhost-blkd, qemu-storage-daemon, ...) without a VM.
 *
 * Theory of operation
 * -------------------
 * The main thread connects with the vhost-user front-end library (which
 * creates the shared "guest" memory and the rings), reads the capacity,
 * starts the queues, and runs one worker thread per virtqueue.  Each worker
 * owns its queue, a slice of the disk (queue q gets blocks
 * [q * n, (q + 1) * n)), a preallocated array of request contexts (one per
 * in-flight request, each with its buffer in guest memory) and a latency
 * histogram.  Its loop: fill the queue up to --iodepth, publish the batch
 * with one kick (suppressed when the device polls), reap the used ring, and
 * when nothing completed wait as the client model says: sleep on the call
 * eventfd (default), spin (--poll), or spin up to a halt-poll window and
 * then sleep (--halt-poll-ns, a VM's halt-polling vCPU, optionally with
 * KVM's grow/shrink of the window).  --rate replaces "fill up to
 * --iodepth" with a fixed issue schedule (open loop); latency then counts
 * from each request's scheduled time.  Nothing is allocated and nothing
 * is logged per request; a clock_gettime() per loop turn timestamps the
 * requests (and times the poll window), and latencies go into a
 * preallocated log-linear histogram (bench-hist.h).
 *
 * --verify writes blocks that carry a header (magic, byte offset, write
 * sequence number, crc32 of the payload) and a payload derived from offset
 * and sequence number, remembers the last sequence number written to each
 * block, never has a read and a write of the same block in flight at once,
 * and checks every read against that table.  When the job reads, a
 * sequential fill pass writes the whole slice first.
 *
 * Kernel mode (--vhost-dev /dev/vhost-blk --file IMAGE) drives the
 * vhost_blk module instead: the same library lays out the same rings in
 * this process's memory, which the module sees as the guest memory
 * (VHOST_SET_MEM_TABLE maps it 1:1 to our addresses), and the image is
 * attached to every queue with VHOST_BLK_SET_BACKEND.  Everything else
 * (workers, --verify, the figures) is the same code as for vhost-user.
 *
 * The client's own CPU time (getrusage RUSAGE_THREAD per worker) is
 * reported next to the I/O figures so that its cost is not mistaken for
 * the server's, and so is the back-end's (utime + stime of its process
 * from /proc/PID/stat over the timed phase; the pid from --backend-pid or
 * the socket's SO_PEERCRED).
 */
#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-frontend.h"
#include "bench-halt-poll.h"
#include "bench-reconnect.h"
#include "bench-hist.h"

#include <endian.h>
#include <getopt.h>
#include <math.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define BENCH_SECTOR 512
#define BENCH_WAIT_TIMEOUT_MS 10000
#define BENCH_CPU_WARN 0.70     /* a worker above this share of a CPU */
#define BENCH_VERIFY_MAGIC 0x76626c6b62656e63ULL   /* "vblkbenc" */

typedef enum BenchRw {
    BENCH_RW_READ,
    BENCH_RW_WRITE,
    BENCH_RW_RANDREAD,
    BENCH_RW_RANDWRITE,
    BENCH_RW_RANDRW,
} BenchRw;

static const char *const bench_rw_names[] = {
    [BENCH_RW_READ] = "read",
    [BENCH_RW_WRITE] = "write",
    [BENCH_RW_RANDREAD] = "randread",
    [BENCH_RW_RANDWRITE] = "randwrite",
    [BENCH_RW_RANDRW] = "randrw",
};

typedef struct BenchOptions {
    const char *socket;
    const char *vhost_dev;      /* kernel mode */
    const char *file;
    bool read_only;
    bool buffered;
    int file_fd;
    BenchRw rw;
    unsigned int rwmixread;     /* percent of reads for randrw */
    uint64_t bs;
    uint64_t bs_max;            /* mixed sizes: bs .. bs_max, in bs steps */
    unsigned int iodepth;
    unsigned int queues;
    unsigned int queue_size;    /* 0 = derived from iodepth */
    double runtime;             /* seconds, when ios == 0 */
    uint64_t ios;               /* total requests, 0 = time based */
    uint64_t size;              /* bytes used, 0 = capacity */
    bool verify;
    bool json;
    bool poll;
    bool packed;                /* VIRTIO_F_RING_PACKED */
    bool no_inflight;           /* skip GET/SET_INFLIGHT_FD */
    bool publish_each;          /* avail->idx per request, as Linux */
    bool poll_interrupts;       /* --poll but still ask for interrupts */
    uint64_t halt_poll_ns;      /* halt-polling client: poll window max */
    bool halt_poll_grow;        /* ... adapted as KVM does */
    bool halt_poll_greedy;      /* ... and polled even when others wait */
    double rate;                /* open loop: IOPS in total, 0 = closed */
    int backend_pid;            /* 0 = from the socket's peer credentials */
    bool dirty_log;
    unsigned int reconnect_ms;  /* --reconnect: 0 = a hang-up fails */
    uint64_t seed;
} BenchOptions;

/* Verify header at the start of each block. */
typedef struct BenchVerifyHdr {
    uint64_t magic;
    uint64_t offset;
    uint32_t seq;
    uint32_t crc;
} BenchVerifyHdr;

typedef struct BenchReq {
    uint8_t *buf;
    uint64_t block;             /* block index in the disk */
    uint32_t nblk;              /* blocks of --bs it covers (--bs-max) */
    uint64_t start_ns;
    uint32_t seq;               /* verify: write sequence number */
    bool is_write;
} BenchReq;

typedef struct BenchWorker {
    VhostUserFrontend *fe;
    const BenchOptions *opts;
    unsigned int q;
    GThread *thread;
    /* --dirty-log: the log each completed read must be marked in */
    const uint8_t *dirty_log;
    uint64_t dirty_log_size;

    /* slice of the disk owned by this queue */
    uint64_t first_block;
    uint64_t nblocks;
    uint64_t seq_next;          /* sequential position in the slice */

    BenchReq *reqs;             /* iodepth contexts */
    BenchReq **free_reqs;       /* stack */
    unsigned int nfree;
    VhostUserFrontendCompletion *comps;

    uint32_t *last_seq;         /* verify: per block, 0 = never written */
    uint8_t *busy;              /* verify: per block, request in flight */
    uint32_t write_seq;

    uint64_t rng;

    /* results */
    uint64_t ios_done;
    uint64_t bytes_done;
    uint64_t reads;
    uint64_t writes;
    uint64_t errors;            /* status != OK */
    uint64_t verify_errors;
    uint64_t waits;             /* call-eventfd waits that returned */
    uint64_t sleeps;            /* times the client blocked */
    uint64_t polls_ok;          /* --halt-poll-ns: idle ends caught polling */
    uint64_t hp_window_ns;      /* --halt-poll-ns: current poll window */
    uint64_t hp_grows, hp_shrinks;
    uint64_t hp_yields;         /* windows ended: another task took the CPU */
    uint64_t hp_check_ns;       /* last yield of the current window */
    long hp_nivcsw;             /* involuntary switches at the last check */
    bool hp_counted;            /* hp_nivcsw was read in this window */
    uint64_t sched_t0_ns;       /* --rate: when request 0 was due */
    double sched_interval_ns;   /* --rate: between two of this queue's */
    uint64_t depth_exhausted;   /* --rate: due requests with no context */
    uint64_t max_issue_lag_ns;  /* --rate: latest issue behind schedule */
    uint64_t kicks;
    uint64_t kicks_suppressed;
    uint64_t lat_sum_ns;
    uint64_t lat_max_ns;
    uint64_t *hist;
    uint64_t t_start_ns;
    uint64_t t_end_ns;
    double cpu_user;
    double cpu_sys;
    int fatal;                  /* negative errno of a fatal path error */
    char first_failure[256];
} BenchWorker;

static atomic_bool bench_stop;
/* workers done with their fill pass; set by main when the timed phase
 * starts */
static atomic_uint bench_ready;
static atomic_bool bench_go;
/* --reconnect: where the workers meet when the back-end restarts */
static BenchReconnect bench_rc;

/* SIGINT/SIGTERM end a timed run early, as its deadline would: what is
 * in flight completes (and is verified), the figures cover the time run.
 * A lock-free atomic store is async-signal-safe. */
static void bench_on_signal(int sig)
{
    atomic_store(&bench_stop, true);
}

/* ---------------------------------------------------------------- helpers */

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* xorshift64*: fast, good enough for offsets and payloads. */
static inline uint64_t bench_rand(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static uint32_t bench_crc_table[256];

static void bench_crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        }
        bench_crc_table[i] = c;
    }
}

static uint32_t bench_crc32(const uint8_t *p, size_t len)
{
    uint32_t c = 0xffffffffu;

    for (size_t i = 0; i < len; i++) {
        c = bench_crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    }
    return c ^ 0xffffffffu;
}

/* Parse 4k, 1M, 512 (bytes, binary suffixes). */
static bool bench_parse_size(const char *s, uint64_t *out)
{
    char *end;
    uint64_t v, mult = 1;

    errno = 0;
    v = g_ascii_strtoull(s, &end, 10);
    if (errno || end == s) {
        return false;
    }
    switch (g_ascii_tolower(*end)) {
    case '\0':
        break;
    case 'k':
        mult = 1ull << 10;
        break;
    case 'm':
        mult = 1ull << 20;
        break;
    case 'g':
        mult = 1ull << 30;
        break;
    case 't':
        mult = 1ull << 40;
        break;
    default:
        return false;
    }
    if (*end && end[1] && !(g_ascii_tolower(end[1]) == 'b' && !end[2]) &&
        !(g_ascii_tolower(end[1]) == 'i' && g_ascii_tolower(end[2]) == 'b' &&
          !end[3])) {
        return false;
    }
    if (v > UINT64_MAX / mult) {
        return false;
    }
    *out = v * mult;
    return true;
}

static bool bench_parse_uint(const char *s, unsigned int min, unsigned int max,
                             unsigned int *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        return false;
    }
    *out = v;
    return true;
}

/* ---------------------------------------------------------------- verify */

/* Each block of --bs carries its own header: a request of several blocks
 * (--bs-max) is checked block by block. */
static void bench_verify_fill_block(BenchWorker *w, uint8_t *buf,
                                    uint64_t block, uint32_t seq)
{
    BenchVerifyHdr *h = (BenchVerifyHdr *)buf;
    uint64_t s = (block * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)seq << 1) ^
                 0x5bd1e995ull;
    uint64_t *p = (uint64_t *)(buf + sizeof(*h));
    size_t n = (w->opts->bs - sizeof(*h)) / 8;

    s |= 1;
    for (size_t i = 0; i < n; i++) {
        p[i] = bench_rand(&s);
    }
    h->magic = BENCH_VERIFY_MAGIC;
    h->offset = block * w->opts->bs;
    h->seq = seq;
    h->crc = bench_crc32(buf + sizeof(*h), w->opts->bs - sizeof(*h));
}

static void bench_verify_fill(BenchWorker *w, BenchReq *r)
{
    for (uint32_t i = 0; i < r->nblk; i++) {
        bench_verify_fill_block(w, r->buf + i * w->opts->bs, r->block + i,
                                r->seq);
    }
}

/* Check one block of a completed read; false (and a message) on a
 * mismatch. */
static bool bench_verify_check_block(BenchWorker *w, const uint8_t *buf,
                                     uint64_t block)
{
    const BenchVerifyHdr *h = (const BenchVerifyHdr *)buf;
    uint64_t offset = block * w->opts->bs;
    uint32_t want_seq = w->last_seq[block - w->first_block];
    const char *what = NULL;

    if (h->magic != BENCH_VERIFY_MAGIC) {
        what = "bad magic (block never written or overwritten by someone else)";
    } else if (h->offset != offset) {
        what = "block carries another offset (misplaced write or read)";
    } else if (h->seq != want_seq) {
        what = "stale or future data (sequence number mismatch)";
    } else if (h->crc != bench_crc32(buf + sizeof(*h),
                                     w->opts->bs - sizeof(*h))) {
        what = "payload crc32 mismatch (corrupted data)";
    }
    if (!what) {
        return true;
    }
    if (!w->first_failure[0]) {
        snprintf(w->first_failure, sizeof(w->first_failure),
                 "queue %u: verify failed at byte offset %" PRIu64
                 ": %s (header: offset %" PRIu64 ", seq %u; expected seq %u)",
                 w->q, offset, what, h->magic == BENCH_VERIFY_MAGIC ?
                 h->offset : 0, h->magic == BENCH_VERIFY_MAGIC ? h->seq : 0,
                 want_seq);
    }
    return false;
}

static bool bench_verify_check(BenchWorker *w, BenchReq *r)
{
    for (uint32_t i = 0; i < r->nblk; i++) {
        if (!bench_verify_check_block(w, r->buf + i * w->opts->bs,
                                      r->block + i)) {
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- worker */

/* Choose the next request's block and direction.  False when verify finds
 * no idle block (try again after a completion). */
static bool bench_pick(BenchWorker *w, BenchRw rw, BenchReq *r)
{
    uint64_t b;
    uint32_t k = 1;

    switch (rw) {
    case BENCH_RW_READ:
    case BENCH_RW_WRITE:
        b = w->seq_next++;
        if (w->seq_next == w->nblocks) {
            w->seq_next = 0;
        }
        r->is_write = rw == BENCH_RW_WRITE;
        break;
    case BENCH_RW_RANDRW:
        r->is_write = bench_rand(&w->rng) % 100 >= w->opts->rwmixread;
        b = bench_rand(&w->rng) % w->nblocks;
        break;
    default:
        r->is_write = rw == BENCH_RW_RANDWRITE;
        b = bench_rand(&w->rng) % w->nblocks;
        break;
    }
    if (w->opts->bs_max > w->opts->bs && rw != BENCH_RW_READ &&
        rw != BENCH_RW_WRITE) {
        /* mixed sizes: 1 .. bs_max / bs blocks, inside the slice */
        k = 1 + bench_rand(&w->rng) % (w->opts->bs_max / w->opts->bs);
        if (k > w->nblocks - b) {
            k = w->nblocks - b;
        }
    }
    if (w->busy) {
        /* never two requests on one block at once: probe forward */
        unsigned int tries = 0;

        for (;;) {
            uint32_t i = 0;

            if (b + k > w->nblocks) {
                b = 0;
            }
            while (i < k && !w->busy[b + i]) {
                i++;
            }
            if (i == k) {
                break;
            }
            if (++tries > w->opts->iodepth) {
                return false;
            }
            b = b + i + 1 >= w->nblocks ? 0 : b + i + 1;
        }
        memset(&w->busy[b], 1, k);
    }
    r->block = w->first_block + b;
    r->nblk = k;
    return true;
}

/* Fail the worker with a message (the first failure wins). */
static bool bench_fail(BenchWorker *w, int err, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
static bool bench_fail(BenchWorker *w, int err, const char *fmt, ...)
{
    va_list ap;

    w->fatal = err;
    va_start(ap, fmt);
    vsnprintf(w->first_failure, sizeof(w->first_failure), fmt, ap);
    va_end(ap);
    return false;
}

/* --rate: when request @k of this queue is due. */
static inline uint64_t bench_sched_ns(const BenchWorker *w, uint64_t k)
{
    return w->sched_t0_ns + (uint64_t)(k * w->sched_interval_ns);
}

/* --halt-poll-grow: adapt the window after an idle period that ended in a
 * sleep (bench-halt-poll.h); @idle_ns is the whole period. */
static void bench_halt_poll_adapt(BenchWorker *w, uint64_t idle_ns)
{
    switch (bench_halt_poll_next(&w->hp_window_ns, idle_ns,
                                 w->opts->halt_poll_ns)) {
    case BENCH_HALT_POLL_GROW:
        w->hp_grows++;
        break;
    case BENCH_HALT_POLL_SHRINK:
        w->hp_shrinks++;
        break;
    default:
        break;
    }
}

/*
 * --halt-poll-ns without --halt-poll-greedy: may the poll window go on?
 * KVM polls a halted vCPU only while single_task_running() (and no
 * need_resched()): as soon as another task is runnable on that CPU the
 * window ends and the vCPU blocks, so a halt-polling vCPU never keeps a
 * woken back-end thread off its CPU.  A thread cannot see its run queue;
 * every BENCH_HALT_POLL_YIELD_NS of polling it yields instead, and if the
 * yield let another task run (the thread's involuntary context switches
 * went up: a yield that switches counts as one, as a preemption does) the
 * window ends as KVM's would.  The count is read afresh at a window's
 * first check, so a preemption while the client was issuing is not taken
 * for one.  Windows shorter than the period (a fast back-end) never make
 * these system calls.
 */
#define BENCH_HALT_POLL_YIELD_NS 2000

static bool bench_halt_poll_solo(BenchWorker *w, uint64_t now)
{
    struct rusage ru;

    if (now - w->hp_check_ns < BENCH_HALT_POLL_YIELD_NS) {
        return true;
    }
    w->hp_check_ns = now;
    if (!w->hp_counted) {
        /* the count before this window's first yield: a preemption
         * between windows must not end this one */
        if (getrusage(RUSAGE_THREAD, &ru) < 0) {
            return true;
        }
        w->hp_nivcsw = ru.ru_nivcsw;
        w->hp_counted = true;
    }
    sched_yield();
    if (getrusage(RUSAGE_THREAD, &ru) < 0 || ru.ru_nivcsw == w->hp_nivcsw) {
        return true;
    }
    w->hp_nivcsw = ru.ru_nivcsw;
    return false;
}

/*
 * --dirty-log: a read's data reached guest memory before its completion
 * was published, so every guest page of its buffer must be marked in the
 * log by now (the back-end marks after writing, before the used ring;
 * nothing here clears the log).
 */
static bool bench_dirty_check(BenchWorker *w, const BenchReq *req)
{
    uint64_t len = (uint64_t)req->nblk * w->opts->bs, gpa, pg;

    if (!vhost_user_frontend_host_to_gpa(w->fe, req->buf, len, &gpa)) {
        return true;
    }
    for (pg = gpa / 4096; pg <= (gpa + len - 1) / 4096; pg++) {
        if (pg / 8 >= w->dirty_log_size ||
            !(__atomic_load_n(&w->dirty_log[pg / 8], __ATOMIC_RELAXED) &
              (1u << (pg % 8)))) {
            if (!w->first_failure[0]) {
                snprintf(w->first_failure, sizeof(w->first_failure),
                         "queue %u: the read at byte offset %" PRIu64
                         " completed, but guest page 0x%" PRIx64 " of its "
                         "buffer is not marked in the dirty log", w->q,
                         req->block * w->opts->bs, pg);
            }
            return false;
        }
    }
    return true;
}

/*
 * Run one phase: @total requests (0 = until bench_stop) of kind @rw.
 * @record: count into the results (the timed phase; it also follows
 * --rate, the verify fill pass is always closed-loop).  Returns false on
 * a fatal error (w->fatal / w->first_failure say which).
 *
 * Each turn: issue (closed loop: until --iodepth are in flight; --rate:
 * every request whose scheduled time has come, while contexts are free),
 * kick once, reap.  When nothing completed, the client model decides how
 * to wait: spin (--poll), spin up to the halt-poll window counted from
 * when the queue went idle then sleep (--halt-poll-ns), or sleep at once
 * (default).  Sleeping re-enables interrupts and re-checks the ring before
 * blocking (vhost_user_frontend_wait_ns()), so a completion that lands
 * while interrupts were off is never lost; with --rate the sleep also ends
 * at the next scheduled issue.
 */
static bool bench_run_phase(BenchWorker *w, BenchRw rw, uint64_t total,
                            bool record)
{
    const BenchOptions *o = w->opts;
    const uint32_t sectors_per_block = o->bs / BENCH_SECTOR;
    const bool rate = record && o->rate > 0;
    const bool spin = o->poll;
    const bool halt_poll = !o->poll && o->halt_poll_ns;
    uint64_t issued = 0, completed = 0, idle_start = 0;
    uint64_t stalled_at = UINT64_MAX;   /* --rate: request found no context */
    unsigned int idle_polls = 0;        /* --poll: empty reaps */
    const char *why = NULL;

    if (rate) {
        w->sched_t0_ns = bench_now_ns();
    }
resume:
    for (;;) {
        bool more = total ? issued < total : !atomic_load_explicit(
                            &bench_stop, memory_order_relaxed);
        uint64_t now = bench_now_ns(), next_issue = UINT64_MAX;
        unsigned int nsub = 0;
        int n, r;

        while (more && (total == 0 || issued < total)) {
            BenchReq *req;
            struct iovec iov;
            uint64_t due = rate ? bench_sched_ns(w, issued) : now;

            if (due > now) {
                next_issue = due;
                break;
            }
            if (!w->nfree) {
                if (rate && stalled_at != issued) {
                    /* due, but --iodepth requests are in flight: it goes
                     * out late and its latency counts from @due */
                    w->depth_exhausted++;
                    stalled_at = issued;
                }
                break;
            }
            req = w->free_reqs[w->nfree - 1];
            if (!bench_pick(w, rw, req)) {
                break;
            }
            iov = (struct iovec) { req->buf, req->nblk * o->bs };
            if (w->last_seq && req->is_write) {
                req->seq = ++w->write_seq ? w->write_seq : ++w->write_seq;
                bench_verify_fill(w, req);
            }
            req->start_ns = due;
            if (rate && now - due > w->max_issue_lag_ns) {
                w->max_issue_lag_ns = now - due;
            }
            r = vhost_user_frontend_blk_submit(
                    w->fe, w->q,
                    req->is_write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
                    req->block * sectors_per_block, &iov, 1,
                    !req->is_write, req);
            if (unlikely(r < 0)) {
                if (w->busy) {
                    memset(&w->busy[req->block - w->first_block], 0,
                           req->nblk);
                }
                if (r == -ENOSPC) {
                    break;      /* ring full: reap first */
                }
                return bench_fail(w, r, "queue %u: submit failed: %s", w->q,
                                  g_strerror(-r));
            }
            w->nfree--;
            issued++;
            nsub++;
        }
        if (nsub) {
            r = vhost_user_frontend_kick(w->fe, w->q);
            if (unlikely(r < 0)) {
                return bench_fail(w, r, "queue %u: kick failed: %s", w->q,
                                  g_strerror(-r));
            }
        }
        if (completed == issued && !(total ? issued < total : more)) {
            return true;
        }

        n = vhost_user_frontend_reap(w->fe, w->q, w->comps, o->iodepth);
        if (unlikely(n < 0)) {
            return bench_fail(w, n, "queue %u: bad used ring from the "
                              "device: %s", w->q, g_strerror(-n));
        }
        if (n == 0) {
            uint64_t outstanding = issued - completed;
            int64_t timeout;

            if (spin) {
                /* A back-end that hung up completes nothing: look now
                 * and then (one poll() per 64k empty reaps). */
                if (unlikely(++idle_polls == 0x10000)) {
                    idle_polls = 0;
                    if (vhost_user_frontend_backend_gone(w->fe)) {
                        goto hung_up;
                    }
                }
                continue;
            }
            if (halt_poll) {
                if (!idle_start) {
                    idle_start = now;
                    w->hp_check_ns = now;
                    w->hp_counted = false;
                }
                if (now - idle_start < w->hp_window_ns) {
                    if (o->halt_poll_greedy || bench_halt_poll_solo(w, now)) {
                        continue;   /* still inside the poll window */
                    }
                    if (record) {
                        w->hp_yields++;
                    }
                }
            }
            /* sleep: until a completion or the next scheduled issue */
            if (next_issue != UINT64_MAX) {
                timeout = next_issue > now ? next_issue - now : 0;
            } else {
                timeout = (int64_t)BENCH_WAIT_TIMEOUT_MS * 1000000;
            }
            if (outstanding) {
                r = vhost_user_frontend_wait_connected_ns(w->fe, w->q,
                                                          timeout);
                if (unlikely(r == -ENOTCONN)) {
                    goto hung_up;
                }
            } else {
                struct timespec ts = {
                    .tv_sec = next_issue / 1000000000,
                    .tv_nsec = next_issue % 1000000000,
                };

                /* --rate, nothing in flight: sleep to the next issue */
                assert(next_issue != UINT64_MAX);
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts,
                                       NULL) == EINTR) {
                }
                r = 0;
            }
            if (unlikely(r < 0 || (r == 0 && next_issue == UINT64_MAX))) {
                return bench_fail(w, r ? r : -ETIMEDOUT,
                                  "queue %u: %s while waiting for "
                                  "completions (%" PRIu64 " outstanding)",
                                  w->q, r ? g_strerror(-r) :
                                  "no completion within 10 s", outstanding);
            }
            if (record) {
                w->waits += r > 0;
                w->sleeps++;
            }
            if (halt_poll) {
                if (o->halt_poll_grow) {
                    bench_halt_poll_adapt(w, bench_now_ns() - idle_start);
                }
                idle_start = 0;
            }
            continue;
        }
        if (halt_poll && idle_start) {
            /* the poll window caught it: no sleep */
            if (record) {
                w->polls_ok++;
            }
            idle_start = 0;
        }
        now = bench_now_ns();
        for (int i = 0; i < n; i++) {
            BenchReq *req = w->comps[i].opaque;
            uint64_t lat = now - req->start_ns;
            uint64_t idx = req->block - w->first_block;

            if (unlikely(w->comps[i].status != VIRTIO_BLK_S_OK)) {
                w->errors++;
                if (!w->first_failure[0]) {
                    snprintf(w->first_failure, sizeof(w->first_failure),
                             "queue %u: %s at byte offset %" PRIu64
                             " completed with status %u", w->q,
                             req->is_write ? "write" : "read",
                             req->block * o->bs, w->comps[i].status);
                }
            } else if (w->last_seq) {
                if (req->is_write) {
                    for (uint32_t b = 0; b < req->nblk; b++) {
                        w->last_seq[idx + b] = req->seq;
                    }
                } else if (!bench_verify_check(w, req)) {
                    w->verify_errors++;
                }
            }
            if (unlikely(w->dirty_log) && !req->is_write &&
                w->comps[i].status == VIRTIO_BLK_S_OK &&
                !bench_dirty_check(w, req)) {
                w->verify_errors++;
            }
            if (w->busy) {
                memset(&w->busy[idx], 0, req->nblk);
            }
            if (record) {
                w->hist[bench_hist_index(lat)]++;
                w->lat_sum_ns += lat;
                if (lat > w->lat_max_ns) {
                    w->lat_max_ns = lat;
                }
                if (req->is_write) {
                    w->writes++;
                } else {
                    w->reads++;
                }
                w->ios_done++;
                w->bytes_done += req->nblk * o->bs;
            }
            w->free_reqs[w->nfree++] = req;
        }
        completed += n;
        if (unlikely(w->verify_errors || w->errors)) {
            /* stop at the first bad request; drain what is in flight */
            atomic_store(&bench_stop, true);
            total = 0;
        }
    }

hung_up:
    /* --reconnect: wait for the new session; what was in flight stays
     * outstanding and the new back-end completes it */
    if (bench_reconnect_park(&bench_rc, &why)) {
        goto resume;
    }
    w->fatal = -ENOTCONN;
    if (why) {
        snprintf(w->first_failure, sizeof(w->first_failure),
                 "queue %u: the back-end closed the connection and "
                 "--reconnect failed: %s", w->q, why);
        return false;
    }
    snprintf(w->first_failure, sizeof(w->first_failure),
             "queue %u: the back-end closed the connection (%" PRIu64
             " request(s) outstanding): it exited or dropped this session; "
             "see its log", w->q, issued - completed);
    return false;
}

static double bench_tv_s(const struct timeval *tv)
{
    return tv->tv_sec + tv->tv_usec / 1e6;
}

static gpointer bench_worker_run(gpointer opaque)
{
    BenchWorker *w = opaque;
    const BenchOptions *o = w->opts;
    struct rusage ru0, ru1;
    uint64_t total = 0;

    if (o->verify && o->rw != BENCH_RW_WRITE && o->rw != BENCH_RW_RANDWRITE) {
        /* reads must find known data: write the whole slice first */
        bench_reconnect_enter(&bench_rc);
        if (!bench_run_phase(w, BENCH_RW_WRITE, w->nblocks, false)) {
            bench_reconnect_leave(&bench_rc);
            atomic_store(&bench_stop, true);
            return NULL;
        }
        bench_reconnect_leave(&bench_rc);
        w->seq_next = 0;
    }
    atomic_fetch_add(&bench_ready, 1);
    while (!atomic_load(&bench_go)) {
        g_usleep(100);
    }
    if (o->ios) {
        total = o->ios / o->queues + (w->q < o->ios % o->queues ? 1 : 0);
        if (total == 0) {
            return NULL;
        }
    }
    if (o->rate > 0) {
        w->sched_interval_ns = 1e9 * o->queues / o->rate;
    }
    vhost_user_frontend_kick_stats(w->fe, w->q, &w->kicks,
                                   &w->kicks_suppressed);
    getrusage(RUSAGE_THREAD, &ru0);
    w->t_start_ns = bench_now_ns();
    bench_reconnect_enter(&bench_rc);
    if (!bench_run_phase(w, o->rw, total, true)) {
        atomic_store(&bench_stop, true);
    }
    bench_reconnect_leave(&bench_rc);
    w->t_end_ns = bench_now_ns();
    getrusage(RUSAGE_THREAD, &ru1);
    w->cpu_user = bench_tv_s(&ru1.ru_utime) - bench_tv_s(&ru0.ru_utime);
    w->cpu_sys = bench_tv_s(&ru1.ru_stime) - bench_tv_s(&ru0.ru_stime);
    {
        uint64_t k, s;

        vhost_user_frontend_kick_stats(w->fe, w->q, &k, &s);
        w->kicks = k - w->kicks;
        w->kicks_suppressed = s - w->kicks_suppressed;
    }
    return NULL;
}

/* Allocate a worker's contexts and buffers (setup, main thread). */
static bool bench_worker_init(BenchWorker *w, VhostUserFrontend *fe,
                              const BenchOptions *o, unsigned int q,
                              uint64_t blocks_per_queue, GError **errp)
{
    uint8_t *bufs;

    memset(w, 0, sizeof(*w));
    w->fe = fe;
    w->opts = o;
    w->q = q;
    w->first_block = (uint64_t)q * blocks_per_queue;
    w->nblocks = blocks_per_queue;
    w->rng = (o->seed + 1) * 0x9e3779b97f4a7c15ull + q * 0xbf58476d1ce4e5b9ull;
    w->rng |= 1;
    w->hp_window_ns = o->halt_poll_grow ? MIN(BENCH_HALT_POLL_START,
                                              o->halt_poll_ns)
                                        : o->halt_poll_ns;
    bufs = vhost_user_frontend_mem_alloc(fe, (size_t)o->iodepth * o->bs_max,
                                         4096, errp);
    if (!bufs) {
        g_prefix_error(errp, "buffers for queue %u: ", q);
        return false;
    }
    w->reqs = g_new0(BenchReq, o->iodepth);
    w->free_reqs = g_new(BenchReq *, o->iodepth);
    w->comps = g_new(VhostUserFrontendCompletion, o->iodepth);
    w->hist = g_new0(uint64_t, BENCH_HIST_BUCKETS);
    for (unsigned int i = 0; i < o->iodepth; i++) {
        w->reqs[i].buf = bufs + (size_t)i * o->bs_max;
        w->free_reqs[i] = &w->reqs[o->iodepth - 1 - i];
    }
    w->nfree = o->iodepth;
    if (o->verify) {
        w->last_seq = g_new0(uint32_t, blocks_per_queue);
        w->busy = g_new0(uint8_t, blocks_per_queue);
    }
    return true;
}

static void bench_worker_destroy(BenchWorker *w)
{
    g_free(w->reqs);
    g_free(w->free_reqs);
    g_free(w->comps);
    g_free(w->hist);
    g_free(w->last_seq);
    g_free(w->busy);
}

/* ---------------------------------------------------------------- report */

typedef struct BenchResult {
    double max_thread_util;     /* busiest worker: CPU time / wall time */
    double seconds;
    uint64_t ios, reads, writes, errors, verify_errors;
    uint64_t kicks, kicks_suppressed, waits;
    double iops, mib_s;
    double lat_mean_us, p50_us, p99_us, p999_us, lat_max_us;
    double cpu_user, cpu_sys, proc_cpu;
    uint64_t sleeps, polls_ok, hp_grows, hp_shrinks, hp_window_max_ns;
    uint64_t hp_yields;
    uint64_t depth_exhausted, max_issue_lag_ns;
    int backend_pid;            /* 0: unknown */
    double backend_cpu_s;       /* utime + stime over the timed phase */
} BenchResult;

static void bench_summarize(BenchWorker *w, unsigned int nw, double proc_cpu,
                            BenchResult *res)
{
    g_autofree uint64_t *hist = g_new0(uint64_t, BENCH_HIST_BUCKETS);
    uint64_t t0 = UINT64_MAX, t1 = 0, lat_sum = 0, lat_max = 0, bytes = 0;

    memset(res, 0, sizeof(*res));
    for (unsigned int i = 0; i < nw; i++) {
        if (w[i].t_start_ns && w[i].t_start_ns < t0) {
            t0 = w[i].t_start_ns;
        }
        if (w[i].t_end_ns > t1) {
            t1 = w[i].t_end_ns;
        }
        res->ios += w[i].ios_done;
        bytes += w[i].bytes_done;
        res->reads += w[i].reads;
        res->writes += w[i].writes;
        res->errors += w[i].errors;
        res->verify_errors += w[i].verify_errors;
        res->kicks += w[i].kicks;
        res->kicks_suppressed += w[i].kicks_suppressed;
        res->waits += w[i].waits;
        res->sleeps += w[i].sleeps;
        res->polls_ok += w[i].polls_ok;
        res->hp_grows += w[i].hp_grows;
        res->hp_shrinks += w[i].hp_shrinks;
        res->hp_yields += w[i].hp_yields;
        res->hp_window_max_ns = MAX(res->hp_window_max_ns,
                                    w[i].hp_window_ns);
        res->depth_exhausted += w[i].depth_exhausted;
        res->max_issue_lag_ns = MAX(res->max_issue_lag_ns,
                                    w[i].max_issue_lag_ns);
        res->cpu_user += w[i].cpu_user;
        res->cpu_sys += w[i].cpu_sys;
        lat_sum += w[i].lat_sum_ns;
        lat_max = MAX(lat_max, w[i].lat_max_ns);
        for (unsigned int b = 0; b < BENCH_HIST_BUCKETS; b++) {
            hist[b] += w[i].hist[b];
        }
    }
    res->seconds = t1 > t0 ? (t1 - t0) / 1e9 : 0;
    if (res->seconds > 0) {
        res->iops = res->ios / res->seconds;
        res->mib_s = bytes / res->seconds / (1024.0 * 1024.0);
    }
    if (res->ios) {
        res->lat_mean_us = lat_sum / 1e3 / res->ios;
    }
    res->p50_us = bench_hist_percentile(hist, res->ios, 50) / 1e3;
    res->p99_us = bench_hist_percentile(hist, res->ios, 99) / 1e3;
    res->p999_us = bench_hist_percentile(hist, res->ios, 99.9) / 1e3;
    res->lat_max_us = lat_max / 1e3;
    res->proc_cpu = proc_cpu;
}

/*
 * The client's own CPU: a worker thread that is busy most of the time
 * measures itself, not the back-end.  Returns the busiest worker's share
 * of one CPU and warns (stderr) above BENCH_CPU_WARN.
 */
static double bench_check_client_cpu(const BenchWorker *w, unsigned int nw)
{
    double max = 0;
    unsigned int max_q = 0;

    for (unsigned int i = 0; i < nw; i++) {
        double wall = w[i].t_end_ns > w[i].t_start_ns ?
                      (w[i].t_end_ns - w[i].t_start_ns) / 1e9 : 0;
        double util = wall > 0 ? (w[i].cpu_user + w[i].cpu_sys) / wall : 0;

        if (util > max) {
            max = util;
            max_q = i;
        }
    }
    if (max > BENCH_CPU_WARN) {
        fprintf(stderr, "vhost-blk-bench: warning: queue %u's thread used "
                "%.0f%% of a CPU (above %.0f%%): the client, not the "
                "back-end, may be the limit of this run%s\n", max_q,
                100 * max, 100 * BENCH_CPU_WARN,
                w[0].opts->poll ? " (--poll spins by design: compare "
                "back-ends by IOPS, not by this)" : "");
    }
    return max;
}

static double bench_per_io(uint64_t v, uint64_t ios)
{
    return ios ? (double)v / ios : 0;
}

static const char *bench_client_name(const BenchOptions *o)
{
    return o->poll ? "poll" : o->halt_poll_ns ? "halt-poll" : "sleep";
}

static void bench_print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            printf("\\%c", *s);
        } else if ((unsigned char)*s < 0x20) {
            printf("\\u%04x", *s);
        } else {
            putchar(*s);
        }
    }
    putchar('"');
}

static void bench_print_json(const BenchOptions *o, const BenchResult *r,
                             const char *error)
{
    double cpu = r->cpu_user + r->cpu_sys;

    printf("{\"socket\": ");
    bench_print_json_string(o->socket ? o->socket : o->file);
    printf(", \"rw\": \"%s\", \"rwmixread\": %u, \"bs\": %" PRIu64
           ", \"bs_max\": %" PRIu64
           ", \"iodepth\": %u, \"queues\": %u, \"queue_size\": %u"
           ", \"size\": %" PRIu64 ", \"verify\": %s, \"poll\": %s"
           ", \"poll_interrupts\": %s, \"ring\": \"%s\"",
           bench_rw_names[o->rw], o->rwmixread, o->bs, o->bs_max, o->iodepth,
           o->queues,
           o->queue_size, o->size, o->verify ? "true" : "false",
           o->poll ? "true" : "false",
           o->poll_interrupts ? "true" : "false",
           o->packed ? "packed" : "split");
    printf(", \"seconds\": %.6f, \"ios\": %" PRIu64 ", \"reads\": %" PRIu64
           ", \"writes\": %" PRIu64 ", \"errors\": %" PRIu64
           ", \"verify_errors\": %" PRIu64,
           r->seconds, r->ios, r->reads, r->writes, r->errors,
           r->verify_errors);
    printf(", \"iops\": %.1f, \"mib_s\": %.2f", r->iops, r->mib_s);
    printf(", \"lat_us\": {\"mean\": %.2f, \"p50\": %.2f, \"p99\": %.2f"
           ", \"p99_9\": %.2f, \"max\": %.2f}",
           r->lat_mean_us, r->p50_us, r->p99_us, r->p999_us, r->lat_max_us);
    printf(", \"kicks\": %" PRIu64 ", \"kicks_suppressed\": %" PRIu64
           ", \"interrupts\": %" PRIu64 ", \"kicks_per_io\": %.4f"
           ", \"interrupts_per_io\": %.4f",
           r->kicks, r->kicks_suppressed, r->waits,
           bench_per_io(r->kicks, r->ios), bench_per_io(r->waits, r->ios));
    printf(", \"client_cpu\": {\"user_s\": %.3f, \"sys_s\": %.3f"
           ", \"util\": %.3f, \"us_per_io\": %.3f, \"process_s\": %.3f}",
           r->cpu_user, r->cpu_sys, r->seconds > 0 ? cpu / r->seconds : 0,
           r->ios ? cpu * 1e6 / r->ios : 0, r->proc_cpu);
    printf(", \"client_thread_util_max\": %.3f, \"client_cpu_bound\": %s",
           r->max_thread_util,
           r->max_thread_util > BENCH_CPU_WARN ? "true" : "false");
    printf(", \"client\": \"%s\", \"halt_poll_ns\": %" PRIu64
           ", \"halt_poll_grow\": %s, \"sleeps\": %" PRIu64
           ", \"sleeps_per_io\": %.4f",
           bench_client_name(o), o->poll ? 0 : o->halt_poll_ns,
           o->halt_poll_grow ? "true" : "false", r->sleeps,
           bench_per_io(r->sleeps, r->ios));
    if (o->halt_poll_ns && !o->poll) {
        printf(", \"halt_poll\": {\"polls_ok\": %" PRIu64 ", \"grows\": %"
               PRIu64 ", \"shrinks\": %" PRIu64 ", \"window_ns_end\": %"
               PRIu64 ", \"greedy\": %s, \"yielded\": %" PRIu64 "}",
               r->polls_ok, r->hp_grows, r->hp_shrinks, r->hp_window_max_ns,
               o->halt_poll_greedy ? "true" : "false", r->hp_yields);
    } else {
        printf(", \"halt_poll\": null");
    }
    if (o->rate > 0) {
        printf(", \"rate\": {\"target_iops\": %.1f, \"depth_exhausted\": %"
               PRIu64 ", \"max_issue_lag_us\": %.2f}", o->rate,
               r->depth_exhausted, r->max_issue_lag_ns / 1e3);
    } else {
        printf(", \"rate\": null");
    }
    if (r->backend_pid > 0) {
        printf(", \"backend_cpu\": {\"pid\": %d, \"cpu_s\": %.3f"
               ", \"util\": %.3f, \"us_per_io\": %.3f}", r->backend_pid,
               r->backend_cpu_s,
               r->seconds > 0 ? r->backend_cpu_s / r->seconds : 0,
               r->ios ? r->backend_cpu_s * 1e6 / r->ios : 0);
    } else {
        printf(", \"backend_cpu\": null");
    }
    printf(", \"error\": ");
    if (error) {
        bench_print_json_string(error);
    } else {
        printf("null");
    }
    printf("}\n");
}

static void bench_print_text(const BenchOptions *o, const BenchResult *r)
{
    double cpu = r->cpu_user + r->cpu_sys;

    printf("%s bs=%" PRIu64 "%s%.0" PRIu64 " iodepth=%u queues=%u%s%s%s: %"
           PRIu64 " I/Os in %.2f s\n", bench_rw_names[o->rw], o->bs,
           o->bs_max > o->bs ? "-" : "", o->bs_max > o->bs ? o->bs_max : 0,
           o->iodepth, o->queues, o->packed ? " packed" : "",
           o->verify ? " verify" : "", o->poll ? " poll" : "",
           r->ios, r->seconds);
    printf("  client: %s", bench_client_name(o));
    if (o->halt_poll_ns && !o->poll) {
        printf(" (window %" PRIu64 " ns%s%s: %" PRIu64 " idle ends caught "
               "polling, %" PRIu64 " ended for another task, %" PRIu64
               " grows, %" PRIu64 " shrinks)",
               o->halt_poll_ns, o->halt_poll_grow ? " max, KVM-style grow" :
               "", o->halt_poll_greedy ? ", greedy" : "", r->polls_ok,
               r->hp_yields, r->hp_grows, r->hp_shrinks);
    }
    if (o->rate > 0) {
        printf(", open loop at %.0f IOPS (%" PRIu64 " requests found the "
               "queue depth exhausted; latest issue %.1f us behind "
               "schedule)", o->rate, r->depth_exhausted,
               r->max_issue_lag_ns / 1e3);
    }
    printf("; %.3f sleeps per I/O\n", bench_per_io(r->sleeps, r->ios));
    printf("  IOPS %.0f, %.1f MiB/s (reads %" PRIu64 ", writes %" PRIu64
           ", errors %" PRIu64 ", verify errors %" PRIu64 ")\n",
           r->iops, r->mib_s, r->reads, r->writes, r->errors,
           r->verify_errors);
    printf("  latency us: mean %.1f, p50 %.1f, p99 %.1f, p99.9 %.1f, "
           "max %.1f\n", r->lat_mean_us, r->p50_us, r->p99_us, r->p999_us,
           r->lat_max_us);
    printf("  per I/O: %.3f kicks (%" PRIu64 " suppressed), %.3f interrupt "
           "waits\n", bench_per_io(r->kicks, r->ios), r->kicks_suppressed,
           bench_per_io(r->waits, r->ios));
    printf("  client CPU (this program, not the server): %.2f s user + "
           "%.2f s sys = %.0f%% of one CPU, %.2f us per I/O\n",
           r->cpu_user, r->cpu_sys,
           r->seconds > 0 ? 100 * cpu / r->seconds : 0,
           r->ios ? cpu * 1e6 / r->ios : 0);
    printf("  busiest client thread: %.0f%% of a CPU%s\n",
           100 * r->max_thread_util, r->max_thread_util > BENCH_CPU_WARN ?
           " (client-bound: see the warning)" : "");
    if (r->backend_pid > 0) {
        printf("  back-end CPU (pid %d, /proc/PID/stat): %.2f s = %.0f%% of "
               "one CPU, %.2f us per I/O\n", r->backend_pid, r->backend_cpu_s,
               r->seconds > 0 ? 100 * r->backend_cpu_s / r->seconds : 0,
               r->ios ? r->backend_cpu_s * 1e6 / r->ios : 0);
    } else {
        printf("  back-end CPU: unknown (no --backend-pid, no peer pid)\n");
    }
}

/* ---------------------------------------------------------------- main */

static void bench_usage(FILE *f)
{
    fprintf(f,
"Usage: vhost-blk-bench --socket PATH [options]\n"
"       vhost-blk-bench --vhost-dev /dev/vhost-blk --file IMAGE [options]\n"
"\n"
"Drive a vhost-user-blk back-end (vhost-blkd, qemu-storage-daemon) or the\n"
"vhost_blk kernel module as a VM's virtio-blk driver would, and measure it.\n"
"One thread per queue.\n"
"\n"
"  --socket PATH        vhost-user-blk socket of the back-end\n"
"  --vhost-dev PATH     kernel mode: the vhost_blk device (/dev/vhost-blk);\n"
"                       this process's memory is the guest memory\n"
"  --file IMAGE         kernel mode: raw image file or block device the\n"
"                       module serves (opened O_DIRECT unless --buffered)\n"
"  --read-only          kernel mode: open IMAGE read-only\n"
"  --buffered           kernel mode: open IMAGE without O_DIRECT\n"
"  --rw MODE            read|write|randread|randwrite|randrw (default randread)\n"
"  --rwmixread N        randrw: percent of reads (default 50)\n"
"  --bs N               block size, multiple of 512 (default 4k)\n"
"  --bs-max N           mixed sizes: random requests cover 1 to N / bs\n"
"                       consecutive blocks of --bs (a multiple of it)\n"
"  --iodepth N          requests in flight per queue (default 32)\n"
"  --queues N           virtqueues and worker threads (default 1)\n"
"  --queue-size N       ring size (default: smallest power of two >= 128\n"
"                       and >= 3 * iodepth; the back-end must accept it)\n"
"  --runtime S          run for S seconds (default 5); SIGINT or SIGTERM\n"
"                       ends it early (in-flight requests still complete\n"
"                       and are verified)\n"
"  --ios N              run exactly N requests in total instead\n"
"  --size N             bytes of the disk to use (default: its capacity);\n"
"                       queue q uses the q-th 1/queues slice\n"
"  --verify             tag written blocks (offset, sequence, crc32) and\n"
"                       check every read; reads start with a fill pass\n"
"  --poll               busy-poll the used ring instead of waiting on the\n"
"                       call eventfd, with interrupts off (as Linux's poll\n"
"                       queues and SPDK's virtio driver)\n"
"  --poll-interrupts    with --poll, still ask for an interrupt after each\n"
"                       reap and never read it (the back-end still writes\n"
"                       the call eventfd: measures that cost)\n"
"  --halt-poll-ns N     the client a VM's vCPU is: when the queue goes idle\n"
"                       (nothing to issue, nothing completed) poll the used\n"
"                       ring with interrupts off for up to N ns, then re-arm\n"
"                       interrupts, re-check the ring and sleep on the call\n"
"                       eventfd (KVM's halt_poll_ns is 200000 by default);\n"
"                       as KVM's, the window ends early when another task\n"
"                       wants this CPU (it yields every 2 us to find out)\n"
"  --halt-poll-greedy   with --halt-poll-ns, poll the whole window even when\n"
"                       other tasks wait for the CPU (the model before)\n"
"  --halt-poll-grow     with --halt-poll-ns MAX, adapt the window as KVM\n"
"                       does: start at 10 us, double it after a sleep that\n"
"                       ended within MAX, reset it to 0 after one longer\n"
"                       than MAX (halt_poll_ns_shrink = 0); never above MAX\n"
"  --rate IOPS          open loop: issue requests at IOPS in total (IOPS /\n"
"                       queues per queue) on a fixed schedule whatever the\n"
"                       completions do; latency counts from each request's\n"
"                       scheduled time (no coordinated omission); a due\n"
"                       request that finds --iodepth in flight waits and is\n"
"                       counted (depth_exhausted)\n"
"  --backend-pid PID    the back-end's process, for its CPU time per I/O\n"
"                       (/proc/PID/stat); default: the socket's peer\n"
"                       (SO_PEERCRED)\n"
"  --reconnect MS       when the back-end hangs up, connect again (trying for\n"
"                       up to MS ms) and go on, as QEMU's reconnect= does:\n"
"                       requests in flight complete on the new back-end\n"
"                       (e.g. across systemctl restart with a .socket unit)\n"
"  --packed             use packed virtqueues (VIRTIO_F_RING_PACKED); an\n"
"                       error if the back-end does not offer them\n"
"  --publish-each       split rings: store avail->idx after every request,\n"
"                       as Linux's virtio driver does (default: once per\n"
"                       batch, at the kick)\n"
"  --no-inflight        do not set up the inflight region (QEMU does when\n"
"                       the back-end offers it): measures its cost\n"
"  --dirty-log          run with a dirty log set and VHOST_F_LOG_ALL on, as\n"
"                       a VMM does while it migrates the VM (vhost-user\n"
"                       and kernel mode); every page of a completed read's\n"
"                       buffer must be marked in it (else a verify error)\n"
"  --seed N             random seed (default 1)\n"
"  --json               print one JSON object instead of text\n"
"  -h, --help           this text\n"
"  -V, --version        print the version\n"
"\n"
"Exit status: 0 on success, 1 on an I/O error, verify failure, setup\n"
"error or a back-end that hung up (no figures are printed then), 2 on bad\n"
"usage.\n");
}

static int bench_parse_args(int argc, char **argv, BenchOptions *o)
{
    enum { OPT_SOCKET = 256, OPT_VHOST_DEV, OPT_FILE, OPT_READ_ONLY,
           OPT_BUFFERED, OPT_RW, OPT_MIX, OPT_BS, OPT_DEPTH, OPT_QUEUES,
           OPT_QSIZE, OPT_RUNTIME, OPT_IOS, OPT_SIZE, OPT_VERIFY, OPT_JSON,
           OPT_POLL, OPT_SEED, OPT_BS_MAX, OPT_PACKED, OPT_NO_INFLIGHT,
           OPT_DIRTY_LOG, OPT_PUBLISH_EACH, OPT_POLL_INTERRUPTS,
           OPT_HALT_POLL_NS, OPT_HALT_POLL_GROW, OPT_HALT_POLL_GREEDY,
           OPT_RATE, OPT_BACKEND_PID,
           OPT_RECONNECT };
    static const struct option longopts[] = {
        { "socket", required_argument, NULL, OPT_SOCKET },
        { "vhost-dev", required_argument, NULL, OPT_VHOST_DEV },
        { "file", required_argument, NULL, OPT_FILE },
        { "read-only", no_argument, NULL, OPT_READ_ONLY },
        { "buffered", no_argument, NULL, OPT_BUFFERED },
        { "rw", required_argument, NULL, OPT_RW },
        { "rwmixread", required_argument, NULL, OPT_MIX },
        { "bs", required_argument, NULL, OPT_BS },
        { "bs-max", required_argument, NULL, OPT_BS_MAX },
        { "iodepth", required_argument, NULL, OPT_DEPTH },
        { "queues", required_argument, NULL, OPT_QUEUES },
        { "queue-size", required_argument, NULL, OPT_QSIZE },
        { "runtime", required_argument, NULL, OPT_RUNTIME },
        { "ios", required_argument, NULL, OPT_IOS },
        { "size", required_argument, NULL, OPT_SIZE },
        { "verify", no_argument, NULL, OPT_VERIFY },
        { "json", no_argument, NULL, OPT_JSON },
        { "poll", no_argument, NULL, OPT_POLL },
        { "packed", no_argument, NULL, OPT_PACKED },
        { "no-inflight", no_argument, NULL, OPT_NO_INFLIGHT },
        { "publish-each", no_argument, NULL, OPT_PUBLISH_EACH },
        { "poll-interrupts", no_argument, NULL, OPT_POLL_INTERRUPTS },
        { "dirty-log", no_argument, NULL, OPT_DIRTY_LOG },
        { "halt-poll-ns", required_argument, NULL, OPT_HALT_POLL_NS },
        { "halt-poll-grow", no_argument, NULL, OPT_HALT_POLL_GROW },
        { "halt-poll-greedy", no_argument, NULL, OPT_HALT_POLL_GREEDY },
        { "rate", required_argument, NULL, OPT_RATE },
        { "backend-pid", required_argument, NULL, OPT_BACKEND_PID },
        { "reconnect", required_argument, NULL, OPT_RECONNECT },
        { "seed", required_argument, NULL, OPT_SEED },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    *o = (BenchOptions) {
        .rw = BENCH_RW_RANDREAD, .rwmixread = 50, .bs = 4096, .iodepth = 32,
        .queues = 1, .runtime = 5, .seed = 1, .file_fd = -1,
    };
    while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        char *end;
        unsigned int i;

        switch (c) {
        case OPT_SOCKET:
            o->socket = optarg;
            break;
        case OPT_VHOST_DEV:
            o->vhost_dev = optarg;
            break;
        case OPT_FILE:
            o->file = optarg;
            break;
        case OPT_READ_ONLY:
            o->read_only = true;
            break;
        case OPT_BUFFERED:
            o->buffered = true;
            break;
        case OPT_RW:
            for (i = 0; i < ARRAY_SIZE(bench_rw_names); i++) {
                if (!strcmp(optarg, bench_rw_names[i])) {
                    break;
                }
            }
            if (i == ARRAY_SIZE(bench_rw_names)) {
                fprintf(stderr, "vhost-blk-bench: --rw %s: expected read, "
                        "write, randread, randwrite or randrw\n", optarg);
                return 2;
            }
            o->rw = i;
            break;
        case OPT_MIX:
            if (!bench_parse_uint(optarg, 0, 100, &o->rwmixread)) {
                fprintf(stderr, "vhost-blk-bench: --rwmixread %s: expected "
                        "0..100\n", optarg);
                return 2;
            }
            break;
        case OPT_BS:
            if (!bench_parse_size(optarg, &o->bs) || o->bs < BENCH_SECTOR ||
                o->bs % BENCH_SECTOR || o->bs > (16u << 20)) {
                fprintf(stderr, "vhost-blk-bench: --bs %s: expected a "
                        "multiple of 512 up to 16M (e.g. 4k)\n", optarg);
                return 2;
            }
            break;
        case OPT_BS_MAX:
            if (!bench_parse_size(optarg, &o->bs_max) || o->bs_max == 0 ||
                o->bs_max % BENCH_SECTOR || o->bs_max > (16u << 20)) {
                fprintf(stderr, "vhost-blk-bench: --bs-max %s: expected a "
                        "multiple of 512 up to 16M\n", optarg);
                return 2;
            }
            break;
        case OPT_DEPTH:
            if (!bench_parse_uint(optarg, 1, 1024, &o->iodepth)) {
                fprintf(stderr, "vhost-blk-bench: --iodepth %s: expected "
                        "1..1024\n", optarg);
                return 2;
            }
            break;
        case OPT_QUEUES:
            if (!bench_parse_uint(optarg, 1, VHOST_USER_FRONTEND_MAX_QUEUES,
                                  &o->queues)) {
                fprintf(stderr, "vhost-blk-bench: --queues %s: expected "
                        "1..%d\n", optarg, VHOST_USER_FRONTEND_MAX_QUEUES);
                return 2;
            }
            break;
        case OPT_QSIZE:
            if (!bench_parse_uint(optarg, 4, 32768, &o->queue_size) ||
                (o->queue_size & (o->queue_size - 1))) {
                fprintf(stderr, "vhost-blk-bench: --queue-size %s: expected "
                        "a power of two\n", optarg);
                return 2;
            }
            break;
        case OPT_RUNTIME:
            o->runtime = g_ascii_strtod(optarg, &end);
            if (end == optarg || *end || !(o->runtime > 0)) {
                fprintf(stderr, "vhost-blk-bench: --runtime %s: expected "
                        "seconds > 0\n", optarg);
                return 2;
            }
            break;
        case OPT_IOS:
            if (!bench_parse_size(optarg, &o->ios) || o->ios == 0) {
                fprintf(stderr, "vhost-blk-bench: --ios %s: expected a "
                        "count > 0\n", optarg);
                return 2;
            }
            break;
        case OPT_SIZE:
            if (!bench_parse_size(optarg, &o->size) || o->size == 0) {
                fprintf(stderr, "vhost-blk-bench: --size %s: expected bytes "
                        "> 0 (e.g. 1G)\n", optarg);
                return 2;
            }
            break;
        case OPT_VERIFY:
            o->verify = true;
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_DIRTY_LOG:
            o->dirty_log = true;
            break;
        case OPT_POLL:
            o->poll = true;
            break;
        case OPT_PACKED:
            o->packed = true;
            break;
        case OPT_NO_INFLIGHT:
            o->no_inflight = true;
            break;
        case OPT_PUBLISH_EACH:
            o->publish_each = true;
            break;
        case OPT_POLL_INTERRUPTS:
            o->poll = true;
            o->poll_interrupts = true;
            break;
        case OPT_HALT_POLL_NS:
            errno = 0;
            o->halt_poll_ns = g_ascii_strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || o->halt_poll_ns == 0 ||
                o->halt_poll_ns > 1000000000) {
                fprintf(stderr, "vhost-blk-bench: --halt-poll-ns %s: expected "
                        "nanoseconds, 1..1000000000 (KVM's default is "
                        "200000)\n", optarg);
                return 2;
            }
            break;
        case OPT_HALT_POLL_GROW:
            o->halt_poll_grow = true;
            break;
        case OPT_HALT_POLL_GREEDY:
            o->halt_poll_greedy = true;
            break;
        case OPT_RATE:
            o->rate = g_ascii_strtod(optarg, &end);
            if (end == optarg || *end || !(o->rate >= 1) || o->rate > 1e8) {
                fprintf(stderr, "vhost-blk-bench: --rate %s: expected IOPS, "
                        "1..100000000\n", optarg);
                return 2;
            }
            break;
        case OPT_BACKEND_PID:
            if (!bench_parse_uint(optarg, 1, INT_MAX, &i)) {
                fprintf(stderr, "vhost-blk-bench: --backend-pid %s: expected "
                        "a process id\n", optarg);
                return 2;
            }
            o->backend_pid = i;
            break;
        case OPT_RECONNECT:
            if (!bench_parse_uint(optarg, 1, 600000, &o->reconnect_ms)) {
                fprintf(stderr, "vhost-blk-bench: --reconnect %s: expected "
                        "milliseconds from 1 to 600000\n", optarg);
                return 2;
            }
            break;
        case OPT_SEED:
            o->seed = g_ascii_strtoull(optarg, NULL, 10);
            break;
        case 'h':
            bench_usage(stdout);
            exit(0);
        case 'V':
            printf("vhost-blk-bench %s\n", VHOST_BLK_VERSION);
            exit(0);
        default:
            bench_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vhost-blk-bench: unexpected argument '%s'\n",
                argv[optind]);
        return 2;
    }
    if (!o->socket == !o->vhost_dev) {
        fprintf(stderr, "vhost-blk-bench: give either --socket PATH or "
                "--vhost-dev PATH --file IMAGE (see --help)\n");
        return 2;
    }
    if (!o->vhost_dev != !o->file ||
        (!o->vhost_dev && (o->read_only || o->buffered))) {
        fprintf(stderr, "vhost-blk-bench: --file, --read-only and --buffered "
                "go with --vhost-dev, which needs --file\n");
        return 2;
    }
    if (o->reconnect_ms && (o->vhost_dev || o->dirty_log)) {
        fprintf(stderr, "vhost-blk-bench: --reconnect is for a vhost-user "
                "back-end (--socket) without --dirty-log\n");
        return 2;
    }
    if (o->poll && o->halt_poll_ns) {
        fprintf(stderr, "vhost-blk-bench: --poll and --halt-poll-ns are two "
                "client models: give one\n");
        return 2;
    }
    if (o->halt_poll_grow && !o->halt_poll_ns) {
        fprintf(stderr, "vhost-blk-bench: --halt-poll-grow needs "
                "--halt-poll-ns MAX (e.g. 200000, KVM's default)\n");
        return 2;
    }
    if (o->rate > 0 && o->rate < o->queues) {
        fprintf(stderr, "vhost-blk-bench: --rate %.0f is below one I/O per "
                "second per queue (--queues %u)\n", o->rate, o->queues);
        return 2;
    }
    if (!o->bs_max) {
        o->bs_max = o->bs;
    }
    if (o->bs_max < o->bs || o->bs_max % o->bs) {
        fprintf(stderr, "vhost-blk-bench: --bs-max %" PRIu64 " must be a "
                "multiple of --bs %" PRIu64 "\n", o->bs_max, o->bs);
        return 2;
    }
    if (o->verify && o->bs < sizeof(BenchVerifyHdr) + 8) {
        fprintf(stderr, "vhost-blk-bench: --verify needs --bs >= 512\n");
        return 2;
    }
    if (!o->queue_size) {
        o->queue_size = 128;
        while (o->queue_size < 3 * o->iodepth && o->queue_size < 1024) {
            o->queue_size *= 2;
        }
    }
    if (3 * o->iodepth > o->queue_size) {
        fprintf(stderr, "vhost-blk-bench: --iodepth %u needs a ring of at "
                "least %u descriptors (3 per request); --queue-size is %u\n",
                o->iodepth, 3 * o->iodepth, o->queue_size);
        return 2;
    }
    return 0;
}

/* Kernel mode: open the image, learn its size. */
static bool bench_open_file(BenchOptions *o, uint64_t *capacity, GError **errp)
{
    int flags = (o->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC |
                (o->buffered ? 0 : O_DIRECT);
    struct stat st;

    o->file_fd = open(o->file, flags);
    if (o->file_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s%s", o->file, g_strerror(errno),
                    errno == EINVAL && !o->buffered ?
                    " (no O_DIRECT on this file system? try --buffered)" : "");
        return false;
    }
    if (fstat(o->file_fd, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s", o->file, g_strerror(errno));
        return false;
    }
    if (S_ISBLK(st.st_mode)) {
        if (ioctl(o->file_fd, BLKGETSIZE64, capacity) < 0) {
            g_set_error(errp, VB_ERROR, 0, "%s: BLKGETSIZE64: %s", o->file,
                        g_strerror(errno));
            return false;
        }
    } else if (S_ISREG(st.st_mode)) {
        *capacity = st.st_size;
    } else {
        g_set_error(errp, VB_ERROR, 0, "%s: not a regular file or block "
                    "device", o->file);
        return false;
    }
    *capacity -= *capacity % BENCH_SECTOR;
    return true;
}

/*
 * CPU time (utime + stime, every thread) of process @pid from
 * /proc/PID/stat, in seconds (clock-tick resolution, 10 ms on most
 * kernels: runs of a second or more keep that under a few percent).
 */
static bool bench_proc_cpu_s(int pid, double *out)
{
    char path[64], buf[1024];
    unsigned long long ut, st;
    const char *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return false;
    }
    buf[n] = '\0';
    /* comm may hold spaces and parentheses: fields restart after the
     * last ')' (state is field 3, utime 14, stime 15) */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%llu %llu", &ut, &st) != 2) {
        return false;
    }
    *out = (double)(ut + st) / sysconf(_SC_CLK_TCK);
    return true;
}

/* The back-end's pid: --backend-pid, else the peer of the vhost-user
 * socket (SO_PEERCRED); 0 when neither tells (kernel mode, another pid
 * namespace). */
static int bench_backend_pid(const BenchOptions *o, VhostUserFrontend *fe)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    int fd;

    if (o->backend_pid) {
        return o->backend_pid;
    }
    if (!o->socket) {
        return 0;
    }
    fd = vhost_user_frontend_socket_fd(fe);
    if (fd < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        cred.pid <= 0) {
        return 0;
    }
    return cred.pid;
}

static VhostUserFrontend *bench_connect(BenchOptions *o, GError **errp)
{
    VhostUserFrontendOptions fo = {
        .socket_path = o->socket,
        .vhost_dev = o->vhost_dev,
        .connect_timeout_ms = 5000,
        .num_queues = o->queues,
        .queue_size = o->queue_size,
        .packed = o->packed,
        .no_inflight = o->no_inflight,
    };
    struct virtio_blk_config cfg;
    VhostUserFrontend *fe;
    uint64_t bufs = (uint64_t)o->queues * o->iodepth * o->bs_max;
    uint64_t capacity;

    /* rings and request slots live in region 0 too: keep ample room */
    fo.mem_size = QEMU_ALIGN_UP(bufs + (16ull << 20) +
                                (uint64_t)o->queues * o->queue_size * 64,
                                2ull << 20);
    fo.mem_size = MAX(fo.mem_size, 64ull << 20);
    if (o->vhost_dev) {
        if (!bench_open_file(o, &capacity, errp)) {
            return NULL;
        }
        fo.kernel_backend_fd = o->file_fd;
    }
    fe = vhost_user_frontend_new(&fo, errp);
    if (!fe) {
        if (o->socket) {
            g_prefix_error(errp, "%s: ", o->socket);
        }
        return NULL;
    }
    vhost_user_frontend_set_publish_each(fe, o->publish_each);
    /* --halt-poll-ns: off while polling; each sleep re-arms them */
    vhost_user_frontend_set_interrupts(fe, (!o->poll && !o->halt_poll_ns) ||
                                       o->poll_interrupts);
    if (o->vhost_dev) {
        /* No config space: the image is ours. */
        if (!o->size) {
            o->size = capacity;
        } else if (o->size > capacity) {
            g_set_error(errp, VB_ERROR, 0, "--size %" PRIu64 " is larger than "
                        "%s (%" PRIu64 " bytes)", o->size, o->file, capacity);
            goto fail;
        }
        goto sized;
    }
    if (vhost_user_frontend_num_queues(fe) < o->queues) {
        g_set_error(errp, VB_ERROR, 0, "%s: the back-end offers %u queue(s), "
                    "--queues asks for %u", o->socket,
                    vhost_user_frontend_num_queues(fe), o->queues);
        goto fail;
    }
    if (!vhost_user_frontend_get_blk_config(fe, &cfg, errp)) {
        if (!o->size) {
            g_prefix_error(errp, "reading the capacity (give --size): ");
            goto fail;
        }
        g_clear_error(errp);
    } else {
        capacity = le64toh(cfg.capacity) * BENCH_SECTOR;
        if (!o->size) {
            o->size = capacity;
        } else if (o->size > capacity) {
            g_set_error(errp, VB_ERROR, 0, "--size %" PRIu64 " is larger than "
                        "the disk (%" PRIu64 " bytes)", o->size, capacity);
            goto fail;
        }
    }
sized:
    if (o->size / o->bs / o->queues == 0) {
        g_set_error(errp, VB_ERROR, 0, "the disk (%" PRIu64 " bytes) has "
                    "fewer blocks of %" PRIu64 " bytes than queues", o->size,
                    o->bs);
        goto fail;
    }
    return fe;

fail:
    vhost_user_frontend_free(fe);
    return NULL;
}

int main(int argc, char **argv)
{
    g_autoptr(GError) err = NULL;
    g_autofree BenchWorker *w = NULL;
    BenchOptions o;
    BenchResult res;
    VhostUserFrontend *fe;
    struct rusage ru;
    const char *failure = NULL;
    uint64_t blocks_per_queue;
    double backend_cpu0 = 0, backend_cpu1 = 0;
    int backend_pid, ret;

    ret = bench_parse_args(argc, argv, &o);
    if (ret) {
        return ret;
    }
    bench_crc32_init();

    fe = bench_connect(&o, &err);
    if (!fe) {
        fprintf(stderr, "vhost-blk-bench: %s\n", err->message);
        return 1;
    }
    blocks_per_queue = o.size / o.bs / o.queues;
    g_mutex_init(&bench_rc.lock);
    g_cond_init(&bench_rc.cond);
    bench_rc.fe = fe;
    bench_rc.timeout_ms = o.reconnect_ms;
    w = g_new0(BenchWorker, o.queues);
    for (unsigned int q = 0; q < o.queues; q++) {
        if (!bench_worker_init(&w[q], fe, &o, q, blocks_per_queue, &err)) {
            fprintf(stderr, "vhost-blk-bench: %s\n", err->message);
            return 1;
        }
    }
    if (!vhost_user_frontend_start(fe, &err)) {
        fprintf(stderr, "vhost-blk-bench: starting the queues: %s\n",
                err->message);
        return 1;
    }
    if (o.dirty_log) {
        uint64_t log_size;
        const uint8_t *log;

        if (!vhost_user_frontend_log_start(fe, 0, &err)) {
            fprintf(stderr, "vhost-blk-bench: --dirty-log: %s\n",
                    err->message);
            return 1;
        }
        log = vhost_user_frontend_log(fe, &log_size);
        for (unsigned int q = 0; q < o.queues; q++) {
            w[q].dirty_log = log;
            w[q].dirty_log_size = log_size;
        }
    }

    if (o.rate > 0) {
        /* the schedule's sleeps end on time, not up to 50 us late (the
         * default slack); the workers inherit it */
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    }
    if (!o.ios) {
        struct sigaction sa = { .sa_handler = bench_on_signal };

        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    for (unsigned int q = 0; q < o.queues; q++) {
        w[q].thread = g_thread_new("bench-queue", bench_worker_run, &w[q]);
    }
    /* the timed phase starts once every fill pass is over */
    while (atomic_load(&bench_ready) < o.queues && !atomic_load(&bench_stop)) {
        g_usleep(1000);
    }
    backend_pid = bench_backend_pid(&o, fe);
    if (backend_pid > 0 && !bench_proc_cpu_s(backend_pid, &backend_cpu0)) {
        backend_pid = 0;
    }
    atomic_store(&bench_go, true);
    if (!o.ios && !atomic_load(&bench_stop)) {
        uint64_t deadline = bench_now_ns() + (uint64_t)(o.runtime * 1e9);

        /* the workers stop early on an error: wake up now and then */
        while (!atomic_load(&bench_stop) && bench_now_ns() < deadline) {
            uint64_t left = deadline - bench_now_ns();

            g_usleep(MIN(left / 1000 + 1, 50000));
        }
        atomic_store(&bench_stop, true);
    }
    for (unsigned int q = 0; q < o.queues; q++) {
        g_thread_join(w[q].thread);
    }
    if (backend_pid > 0 && !bench_proc_cpu_s(backend_pid, &backend_cpu1)) {
        backend_pid = 0;        /* it exited: no figure */
    }
    getrusage(RUSAGE_SELF, &ru);

    bench_summarize(w, o.queues, bench_tv_s(&ru.ru_utime) +
                    bench_tv_s(&ru.ru_stime), &res);
    res.max_thread_util = bench_check_client_cpu(w, o.queues);
    res.backend_pid = backend_pid;
    res.backend_cpu_s = backend_pid > 0 ? backend_cpu1 - backend_cpu0 : 0;
    for (unsigned int q = 0; q < o.queues && !failure; q++) {
        if (w[q].first_failure[0]) {
            failure = w[q].first_failure;
        }
    }
    if (o.json) {
        bench_print_json(&o, &res, failure);
    } else if (!failure) {
        /* A run cut short has no figures worth a headline. */
        bench_print_text(&o, &res);
    }
    fflush(stdout);
    ret = 0;
    if (failure) {
        fprintf(stderr, "vhost-blk-bench: FAILED: %s\n", failure);
        ret = 1;
    }
    if (res.errors || res.verify_errors) {
        fprintf(stderr, "vhost-blk-bench: FAILED: %" PRIu64 " I/O error(s), "
                "%" PRIu64 " verify failure(s)\n", res.errors,
                res.verify_errors);
        ret = 1;
    } else if (!failure && res.ios == 0) {
        fprintf(stderr, "vhost-blk-bench: FAILED: no request completed\n");
        ret = 1;
    }
    for (unsigned int q = 0; q < o.queues; q++) {
        bench_worker_destroy(&w[q]);
    }
    vhost_user_frontend_free(fe);
    if (o.file_fd >= 0) {
        close(o.file_fd);
    }
    return ret;
}
