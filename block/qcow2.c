/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The qcow2 format driver: a node over a "file" child (and a read-only
 * "backing" child when the image has a backing file), written from the
 * format's specification (QEMU's docs/interop/qcow2.txt) on top of the
 * pure format layer (block/qcow2-format.c: header, entries, refcounts,
 * decompression).
 *
 * Threads.  Every request is handed to the node's metadata thread (one
 * per open image, with an AioContext of its own), which does it with
 * synchronous child I/O: it submits a child request from its context and
 * runs that context's loop until the request completes (the thread's own
 * loop, so never a nested one).  The submitting iothread only queues the
 * request (a mutex held for a list insertion) and gets its completion
 * back through a bottom half of its own context.  So every piece of
 * metadata (L1 table, L2 cache, refcount cache, the allocator) has one
 * user and needs no lock, two queues allocating the same cluster are
 * serialised (the second sees the first's L2 entry), and a read of a
 * cluster being allocated sees the old data or the new.  The price is
 * that the requests the metadata thread does do not run in parallel,
 * but for the data writes of allocating writes: a write made only of
 * new clusters has its data writes in flight while the thread takes the
 * next request, and its L2 entries are set when they complete; a
 * request touching one of its clusters, or a request other than a read,
 * a write or a flush, waits for them first (qcow2_async_ok()).  Reads
 * and writes of allocated clusters whose L2 entries are cached take a
 * lock-free fast path in the iothread instead (qcow2_submit()).
 *
 * Metadata is written back, as QEMU's qcow2 does: an allocating write
 * writes its data and changes the L2 entry and the refcounts in the
 * caches; a dirty L2 slice or refcount block reaches the file at a
 * flush, or when the cache evicts it.  The only order enforced is the
 * one that keeps the image consistent after a crash at any point (a
 * crash may leak clusters, never corrupt; writes not followed by a
 * completed flush may be lost):
 *   1. refcount increments before any entry naming the clusters: an L2
 *      slice is written only after every dirty refcount block, and a
 *      flush (new refcount blocks go first, then the refcount table
 *      entry naming them, flushed in between, when they are made);
 *   2. a new L2 table (or the copy of a shared one) is written and
 *      flushed before the L1 entry pointing at it, when it is made
 *      (L1 entries are written through: one per L2 table);
 *   3. refcount decrements of clusters no longer referenced are queued
 *      and applied only after a flush made the entries that dropped
 *      them durable (and the fast path let go of them: below).
 * A guest flush (and a clean close): dirty refcount blocks, flush,
 * dirty L2 slices, flush; then the queued decrements go to the cache.
 * A FUA write is a write and such a flush.  A failed write or flush
 * leaves what was dirty dirty, for the next flush to write again.
 *
 * Freed clusters (discard, copy-on-write away from a shared cluster) are
 * reused: a single-cluster allocation takes the lowest free cluster
 * from where the last free happened on.  By rule 3 a cluster's refcount
 * drops only once no durable entry names it, and by rule 1 its new
 * refcount is on the file before its new entry: no two durable entries
 * ever name it.  The fast path may still use an entry it looked up just
 * before the entry changed, so a freed range also waits for a grace
 * period of the fast path's requests (reuse_poll()) before its refcount
 * drops.  Every fast request is counted, also while nothing waits to be
 * freed: a request that skipped the count while none was pending could
 * have looked up an entry just before a discard changed it, and its I/O
 * may last any time; nothing but a count dropped at its completion
 * tells when it is over (the block layer keeps no in-flight count and
 * has no drain to wait on), so the free would have no grace period to
 * wait for.
 *
 * A new cluster handed out for the first time past the file's end at
 * open is a hole of the grown file, so it reads as zeroes: when the
 * guest cluster reads as zeroes too, a partial write writes only its
 * data there, not the rest of the cluster.
 */
#include "qemu/osdep.h"
#include "qemu/iov.h"
#include "qemu/qmp-args.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/qcow2.h"
#include "block/qcow2-options.h"
#include "block/file.h"

#include <sys/mman.h>

#define QCOW2_OFLAG_COPIED      (1ull << 63)
#define QCOW2_OFLAG_COMPRESSED  (1ull << 62)
#define QCOW2_OFLAG_ZERO        1ull

/* Header field offsets. */
#define HDR_SIZE                24
#define HDR_L1_SIZE             36
#define HDR_L1_OFFSET           40
#define HDR_RT_OFFSET           48
#define HDR_RT_CLUSTERS         56
#define HDR_AUTOCLEAR           88

/*
 * One slot of the L2 cache.  Written by the metadata thread only; read
 * without a lock by the fast path of the iothreads: @seq is odd while
 * the slot changes (another slice loads into it, or it empties), so a
 * reader that saw the same even @seq before and after reading @key and
 * an entry has a consistent pair.  A single entry changing in place is
 * one aligned 64-bit store: readers see the old or the new one.  @data
 * is allocated at open and freed at close, never in between.
 */
typedef struct Qcow2L2Slot {
    uint32_t seq;
    bool dirty;                 /* changed since written (metadata thread) */
    uint64_t key;               /* host offset of the slice, 0: empty */
    uint64_t used;              /* LRU stamp (metadata thread) */
    uint8_t *data;
} Qcow2L2Slot;                  /* 32 bytes: L2_SET_BYTES */

#define L2_WAYS 8

/* The active L1 table as the fast path sees it: replaced (not changed
 * in size) when it grows, the old one kept until close.  A copy of the
 * metadata thread's, checked: an entry is the table's own when
 * qcow2_l1_decode() takes it (no reserved bit, the L2 table aligned
 * and inside the file: l1_fast_entry()), L1_FAST_BAD when it does not:
 * no offset (the shortcut of qcow2_submit() needs only the offset's
 * test for zero) and a reserved bit (which qcow2_fast_runs() checks:
 * not "no L2 table"), so that the slow path reports the entry.  Every
 * entry is checked when it is stored. */
typedef struct Qcow2L1Pub {
    uint32_t size;
    uint64_t *e;                /* host byte order, atomic per entry */
} Qcow2L1Pub;

typedef struct Qcow2RcBlock {
    uint64_t offset;
    uint64_t used;
    bool dirty;
    uint8_t *data;              /* one cluster */
} Qcow2RcBlock;

/* A host range whose references are dropped at the next flush. */
typedef struct Qcow2Free {
    uint64_t off;
    uint64_t len;
} Qcow2Free;

/*
 * An allocating write whose data is in flight: the metadata thread
 * planned it (clusters reserved, nothing pointing at them yet) and
 * submitted the cluster writes; when they are all done it sets the L2
 * entries (qcow2_async_finish()) and completes the guest's request.
 */
typedef struct Qcow2Async {
    struct BDRVQcow2State *s;
    BlockAIOCB *acb;                    /* the guest's */
    struct WritePlan *plan;
    uint64_t n;
    uint64_t first, last;               /* guest clusters */
    uint8_t *buf;                       /* n clusters (abuf_get()) */
    size_t buf_cap;
    struct iovec *iov;
    BlockAIOCB *cacb;                   /* the file's requests */
    int pending;
    int ret;
    QLIST_ENTRY(Qcow2Async) link;
    QSIMPLEQ_ENTRY(Qcow2Async) done;
} Qcow2Async;

/* L2 slices loaded at once for the queued requests (l2_prefetch()). */
#define L2_PREFETCH_MAX 32

typedef struct Qcow2Prefetch {
    BlockAIOCB acb;
    struct iovec iov;
    Qcow2L2Slot *slot;
    int ret;
    bool done;
} Qcow2Prefetch;

/* Data writes in flight at most (each holds its clusters' buffer). */
#define MAX_ASYNC 32

/* Work for the metadata thread from the main thread. */
typedef struct Qcow2Job {
    void (*fn)(void *opaque);
    void *opaque;
    bool done;
    QSIMPLEQ_ENTRY(Qcow2Job) next;
} Qcow2Job;

/* Fast path reference counters of one group of threads (see
 * BDRVQcow2State.fast). */
#define FAST_SLOTS 8

typedef struct Qcow2FastSlot {
    uint64_t refs[2];           /* atomic */
    uint8_t pad[48];
} Qcow2FastSlot;

/* The thread's slot, as its byte offset in BDRVQcow2State.fast plus 1
 * (0: none yet).  initial-exec: this file is built -fPIC, and the default
 * model for that is a call to __tls_get_addr, which the linker rewrites
 * into a plain load but too late: the fast path's registers were already
 * allocated around a call, and it paid a stack frame for it. */
static __thread uint32_t qcow2_thread_slot
    __attribute__((tls_model("initial-exec")));
static uint32_t qcow2_next_slot;                /* atomic */

typedef struct BDRVQcow2State {
    BlockBackend *bs;
    BlockBackend *file;
    /* The file node's driver's functions (its driver is set when it is
     * made, like @file at open): qcow2_direct_go() calls them with no
     * load of the driver. */
    BlockDriverSubmitFunc *file_preadv;
    BlockDriverSubmitFunc *file_pwritev;
    BlockBackend *backing;      /* NULL: none */
    BlockBackend *backing_file; /* the file node of a backing we opened */
    bool own_backing;
    char *filename;
    char *full_backing;         /* the backing file's resolved name */
    char *format_specific;      /* for bdrv_get_info() */
    Qcow2Info info;
    bool writable;
    bool file_reopened;         /* qcow2_reopen() made the file writable */
    uint32_t cluster_size;
    uint32_t cluster_bits;
    uint32_t align;             /* metadata write granularity */

    /* Header (the bytes we rewrite), L1 and refcount table. */
    uint8_t *hdr;
    uint8_t *hdr_disk;          /* what the file has */
    uint32_t hdr_len;
    uint64_t *l1;               /* host byte order */
    uint32_t l1_size;
    uint64_t l1_offset;
    uint64_t *rt;               /* host byte order */
    uint64_t rt_entries;
    uint64_t rt_offset;

    /* L2 cache: slices of L2 tables. */
    uint32_t slice_size;
    uint32_t slice_entries;
    uint32_t nb_slots;
    uint32_t nb_sets;           /* slots are L2_WAYS-way sets */
    uint64_t set_scale;         /* nb_sets * L2_SET_BYTES: l2_set_off() */
    Qcow2L2Slot *slots;
    uint8_t *slot_mem;          /* the slots' data, one mapping */
    size_t slot_mem_len;
    uint64_t clock;
    /* l2_prefetch(): the slices being loaded together (metadata thread) */
    Qcow2Prefetch pf[L2_PREFETCH_MAX];
    Qcow2L1Pub *l1pub;          /* atomic: published to the fast path */
    GPtrArray *retired;         /* old L1 tables, freed at close */
    bool fast_ok;               /* clusters are whole direct I/O blocks */
    /* The one-cluster shortcut of qcow2_submit(), computed at open so
     * that a request does not: a guest offset's L1 index is
     * off >> fast_l1_shift; with b = off >> fast_tbl_shift, its L2
     * entry's byte in the table is b & fast_tbl_mask, where the slice
     * of it starts b & fast_key_mask, and the entry's byte in that slice
     * b & fast_slice_mask (8-byte entries: the masks clear the low 3
     * bits, the offset's within the cluster); an L2 entry with any
     * fast_l2_bad bit set (reserved, compressed, zero, or an offset not
     * aligned to the cluster; every entry without fast_ok) is left to
     * qcow2_submit_runs(). */
    uint64_t fast_cmask;        /* cluster_size - 1 */
    uint32_t fast_l1_shift;
    uint32_t fast_tbl_shift;
    uint64_t fast_tbl_mask;
    uint64_t fast_slice_mask;
    uint64_t fast_key_mask;     /* fast_tbl_mask & ~fast_slice_mask */
    uint64_t fast_l2_bad;
    uint64_t slow_requests;     /* atomic: qcow2_slow_requests() */
    uint64_t l2_prefetched;     /* atomic: qcow2_l2_prefetched() */
    bool autoclear_pending;     /* atomic: autoclear bits to clear at
                                 * the first write (no fast writes) */

    /* Refcount block cache. */
    GHashTable *rc_cache;       /* offset -> Qcow2RcBlock */
    uint32_t rc_max;

    /* Allocator: clusters below @free_hint are not looked at again;
     * @end is the first cluster past everything in use. */
    uint64_t free_hint;
    uint64_t end;
    /* Clusters whose refcount is 1 on disk, not used yet. */
    int64_t *reserve;
    uint32_t res_head, res_len, res_max;
    bool rc_dirty;              /* a refcount block is dirty */
    bool rc_unflushed;          /* refcounts written since the last
                                 * successful flush */
    /* Host ranges to free once no entry on disk names them: after the
     * next successful metadata flush (Qcow2Free). */
    GArray *pending_frees;
    /* Freed ranges no entry on disk names any more, waiting for the
     * fast path to let go of them (see reuse_poll()): @quarantine for
     * the next grace period, @grace for the one under way, which ends
     * when every slot's refs[@grace_idx] drains. */
    GArray *quarantine;
    GArray *grace;
    uint32_t grace_idx;
    /* The file reads as zeroes from here, in clusters the allocator
     * hands out for the first time (the file's end at open). */
    uint64_t zero_from;

    /*
     * Fast path requests in flight (qcow2_submit()), counted by epoch:
     * each takes a reference in refs[0] or refs[1] (the epoch's:
     * @fast_cur) of its thread's
     * slot before it looks at an L1 or L2 entry, and drops it when its
     * I/O is done.  A slot per thread (threads spread over FAST_SLOTS
     * round-robin, a cache line each) keeps the iothreads from bouncing
     * one line between them.
     */
    Qcow2FastSlot *fast;        /* FAST_SLOTS, cache line aligned */
    /* The epoch, as the address of its counter in the first slot
     * (&fast[0].refs[0] or [1]): the fast path adds its slot's offset
     * to it, and nothing else. */
    uint64_t *fast_cur;         /* atomic */

    Qcow2Decompressor *dec;
    uint8_t *cbuf;
    uint64_t cache_clean_interval;

    /* The metadata thread. */
    GThread *thread;
    AioContext *ctx;
    GMutex lock;
    GCond cond;
    QSIMPLEQ_HEAD(, BlockAIOCB) reqs;   /* protected by @lock */
    QSIMPLEQ_HEAD(, Qcow2Job) jobs;     /* protected by @lock */
    bool quit;                          /* protected by @lock */
    bool polling;       /* protected by @lock: the thread waits in its
                         * loop for async writes: aio_notify() it */

    /* Allocating writes whose data writes are in flight (metadata
     * thread; see qcow2_async_ok()), and those done, to finish. */
    QLIST_HEAD(, Qcow2Async) async;
    QSIMPLEQ_HEAD(, Qcow2Async) async_done;
    uint32_t nr_async;
    /* Buffers of async writes done, kept for the next ones: fresh
     * memory for every write costs page faults (abuf_get()). */
    void *abuf[MAX_ASYNC];
    size_t abuf_cap[MAX_ASYNC];
    uint32_t nr_abuf;
    /* The guest's data of the write being planned (grows, kept). */
    uint8_t *wbuf;
    size_t wbuf_cap;

    /* Open (metadata thread): the result. */
    GError *open_err;
    const BlockQcow2Options *open_opts;
} BDRVQcow2State;

/* ---- synchronous child I/O (metadata thread) -------------------------- */

typedef struct SyncIO {
    int ret;
    bool done;
} SyncIO;

static void sync_cb(void *opaque, int ret)
{
    SyncIO *s = opaque;

    s->ret = ret;
    s->done = true;
}

static int sio_wait(BDRVQcow2State *s, SyncIO *sio)
{
    while (!sio->done) {
        aio_poll(s->ctx, true);
    }
    return sio->ret;
}

static int sio_read_aligned(BDRVQcow2State *s, BlockBackend *blk,
                            uint64_t off, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    BlockAIOCB acb;
    SyncIO sio = { 0 };

    if (!len) {
        return 0;
    }
    blk_aio_preadv(blk, &acb, off, &iov, 1, sync_cb, &sio);
    return sio_wait(s, &sio);
}

/*
 * The enclosing blocks of [off, off + len) for a child whose requests
 * must be aligned (direct I/O), clamped to its end; false if aligned.
 */
static bool sio_widen(BlockBackend *blk, uint64_t off, size_t len,
                      uint64_t *a, uint64_t *e)
{
    uint32_t ra = MAX(blk->bl.request_alignment, 1);

    if (!((off | len) % ra)) {
        return false;
    }
    *a = QEMU_ALIGN_DOWN(off, ra);
    *e = MIN(QEMU_ALIGN_UP(off + len, ra),
             MAX(blk_getlength(blk), off + len));
    return true;
}

static int sio_read(BDRVQcow2State *s, BlockBackend *blk, uint64_t off,
                    void *buf, size_t len)
{
    g_autofree uint8_t *bounce = NULL;
    uint64_t a, e;
    int ret;

    if (!sio_widen(blk, off, len, &a, &e)) {
        return sio_read_aligned(s, blk, off, buf, len);
    }
    bounce = g_malloc(e - a);
    ret = sio_read_aligned(s, blk, a, bounce, e - a);
    if (ret == 0) {
        memcpy(buf, bounce + (off - a), len);
    }
    return ret;
}

/* The file child grows in steps of this much. */
#define FILE_GROW_STEP (1ull << 20)

static int sio_write_aligned(BDRVQcow2State *s, uint64_t off,
                             const void *buf, size_t len);

/* A write of any alignment: read-modify-write of the enclosing blocks
 * (only this thread writes the file, so nothing changes in between). */
static int sio_write(BDRVQcow2State *s, uint64_t off, const void *buf,
                     size_t len)
{
    g_autofree uint8_t *bounce = NULL;
    uint32_t ra = MAX(s->file->bl.request_alignment, 1);
    uint64_t a, e, fsize = blk_getlength(s->file);
    int ret;

    if (!((off | len) % ra)) {
        return sio_write_aligned(s, off, buf, len);
    }
    a = QEMU_ALIGN_DOWN(off, ra);
    e = QEMU_ALIGN_UP(off + len, ra);
    bounce = g_malloc0(e - a);
    if (a < fsize) {
        ret = sio_read_aligned(s, s->file, a, bounce,
                               MIN(e, QEMU_ALIGN_DOWN(fsize, ra)) - a);
        if (ret < 0) {
            return ret;
        }
    }
    memcpy(bounce + (off - a), buf, len);
    return sio_write_aligned(s, a, bounce, e - a);
}

/* Make the file at least @end bytes long (before writing up to it). */
static int file_grow(BDRVQcow2State *s, uint64_t end)
{
    if (end > blk_getlength(s->file)) {
        uint64_t size = QEMU_ALIGN_UP(end, FILE_GROW_STEP);

        /* blk_truncate() on a file only extends it (ftruncate) and
         * publishes the size atomically: safe in this thread. */
        /* A block device only "grows" to its own size: then exactly. */
        if (!blk_truncate(s->file, size, NULL)) {
            size = end;
            if (!blk_truncate(s->file, size, NULL)) {
                return -ENOSPC;
            }
        }
        /* What the entry checks measure against. */
        s->info.file_size = size;
    }
    return 0;
}

static int sio_write_aligned(BDRVQcow2State *s, uint64_t off,
                             const void *buf, size_t len)
{
    struct iovec iov = { (void *)buf, len };
    BlockAIOCB acb;
    SyncIO sio = { 0 };
    int ret = file_grow(s, off + len);

    if (ret < 0) {
        return ret;
    }
    blk_aio_pwritev(s->file, &acb, off, &iov, 1, 0, sync_cb, &sio);
    return sio_wait(s, &sio);
}

static int sio_flush(BDRVQcow2State *s)
{
    BlockAIOCB acb;
    SyncIO sio = { 0 };
    bool unflushed = s->rc_unflushed;
    int ret;

    blk_aio_flush(s->file, &acb, sync_cb, &sio);
    ret = sio_wait(s, &sio);
    if (ret == 0 && unflushed) {
        /* What was written before the flush started is durable. */
        s->rc_unflushed = false;
    }
    return ret;
}

/* Write the @align-sized piece of a table in memory (@table, at @base in
 * the file, @table_len bytes) that holds byte @pos. */
static int write_piece(BDRVQcow2State *s, const uint8_t *table,
                       uint64_t base, uint64_t table_len, uint64_t pos)
{
    uint64_t start = pos & ~(uint64_t)(s->align - 1);
    uint64_t len = MIN(s->align, table_len - start);

    return sio_write(s, base + start, table + start, len);
}

/* ---- header ----------------------------------------------------------- */

/*
 * Write the header as changed in s->hdr.  If the write fails the changes
 * are dropped (s->hdr is again what the file has), so that a later
 * header write cannot carry a change whose preconditions failed.
 */
static int write_header(BDRVQcow2State *s)
{
    int ret = sio_write(s, 0, s->hdr, s->hdr_len);

    if (ret < 0) {
        memcpy(s->hdr, s->hdr_disk, s->hdr_len);
    } else {
        memcpy(s->hdr_disk, s->hdr, s->hdr_len);
    }
    return ret;
}

/* ---- refcounts -------------------------------------------------------- */

static int rc_write_dirty(BDRVQcow2State *s);

static Qcow2RcBlock *rc_block_load(BDRVQcow2State *s, uint64_t offset,
                                   bool fresh, int *ret)
{
    Qcow2RcBlock *b = g_hash_table_lookup(s->rc_cache, &offset);

    *ret = 0;
    if (b) {
        b->used = ++s->clock;
        return b;
    }
    if (g_hash_table_size(s->rc_cache) >= s->rc_max) {
        /* Drop the least recently used clean block. */
        GHashTableIter it;
        gpointer k, v;
        Qcow2RcBlock *victim = NULL;

        g_hash_table_iter_init(&it, s->rc_cache);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            Qcow2RcBlock *c = v;

            if (!c->dirty && (!victim || c->used < victim->used)) {
                victim = c;
            }
        }
        /*
         * All dirty: write them (refcounts may reach the file at any
         * time, increments before the entries that use them, decrements
         * only once queued past a flush) and drop the oldest.  If the
         * write fails the cache grows beyond its size for now.
         */
        if (!victim && rc_write_dirty(s) == 0) {
            g_hash_table_iter_init(&it, s->rc_cache);
            while (g_hash_table_iter_next(&it, &k, &v)) {
                Qcow2RcBlock *c = v;

                if (!victim || c->used < victim->used) {
                    victim = c;
                }
            }
        }
        if (victim) {
            g_hash_table_remove(s->rc_cache, &victim->offset);
        }
    }
    b = g_new0(Qcow2RcBlock, 1);
    b->offset = offset;
    b->data = g_malloc0(s->cluster_size);
    b->used = ++s->clock;
    if (!fresh) {
        *ret = sio_read(s, s->file, offset, b->data, s->cluster_size);
        if (*ret < 0) {
            g_free(b->data);
            g_free(b);
            return NULL;
        }
    }
    g_hash_table_insert(s->rc_cache, &b->offset, b);
    return b;
}

static void rc_block_free(gpointer p)
{
    Qcow2RcBlock *b = p;

    g_free(b->data);
    g_free(b);
}

/* Refcount of @cluster (an index); 0 where no block covers it. */
static int rc_get(BDRVQcow2State *s, uint64_t cluster, uint64_t *val)
{
    uint64_t ti = cluster / s->info.refblock_entries;
    Qcow2RcBlock *b;
    int ret;

    *val = 0;
    if (ti >= s->rt_entries || !s->rt[ti]) {
        return 0;
    }
    b = rc_block_load(s, s->rt[ti], false, &ret);
    if (!b) {
        return ret;
    }
    return qcow2_refcount_get(&s->info, b->data,
                              cluster % s->info.refblock_entries, val);
}

/* Write every dirty refcount block. */
static int rc_write_dirty(BDRVQcow2State *s)
{
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, s->rc_cache);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        Qcow2RcBlock *b = v;

        if (b->dirty) {
            int ret = sio_write(s, b->offset, b->data, s->cluster_size);

            if (ret < 0) {
                return ret;
            }
            b->dirty = false;
            s->rc_unflushed = true;
        }
    }
    s->rc_dirty = false;
    return 0;
}

static int rc_extend(BDRVQcow2State *s, uint64_t need_ti);
static int end_skip_used(BDRVQcow2State *s, uint64_t n);

/* Add @delta to the refcount of @cluster in the cache (the block is
 * marked dirty; rc_write_dirty() writes it). */
static int rc_update(BDRVQcow2State *s, uint64_t cluster, int delta)
{
    uint64_t ti = cluster / s->info.refblock_entries;
    uint32_t bi = cluster % s->info.refblock_entries;
    uint64_t val;
    Qcow2RcBlock *b;
    int ret;

    if (ti >= s->rt_entries || !s->rt[ti]) {
        if (delta < 0) {
            return -EUCLEAN;
        }
        ret = rc_extend(s, ti);
        if (ret < 0) {
            return ret;
        }
    }
    b = rc_block_load(s, s->rt[ti], false, &ret);
    if (!b) {
        return ret;
    }
    ret = qcow2_refcount_get(&s->info, b->data, bi, &val);
    if (ret < 0) {
        return ret;
    }
    if ((delta < 0 && val < (uint64_t)-delta) ||
        (delta > 0 && val + delta > s->info.refcount_max)) {
        return -EUCLEAN;
    }
    ret = qcow2_refcount_set(&s->info, b->data, bi, val + delta);
    if (ret < 0) {
        return ret;
    }
    b->dirty = true;
    s->rc_dirty = true;
    return 0;
}

/*
 * Make the refcount table cover range @need_ti with a block.  New
 * refcount blocks (and a new, larger refcount table if the index is past
 * the table's end) go at the end of the image, at @s->end; each new block
 * describes itself and the other new clusters where they fall in its
 * range.  Order: blocks (and a new table) written and flushed, then the
 * table entry (or the header naming the new table) written and flushed,
 * then the old table's clusters freed.
 */
static int rc_extend(BDRVQcow2State *s, uint64_t need_ti)
{
    uint64_t rbe = s->info.refblock_entries;
    uint64_t per_cl = s->cluster_size / 8;
    uint64_t L;
    uint64_t nb = 0, nt = 0, new_entries = s->rt_entries;
    g_autofree uint64_t *tis = NULL;
    uint64_t *new_rt = NULL;
    bool changed;
    int ret;

restart:
    ret = end_skip_used(s, MAX(nb + nt, 1));
    if (ret < 0) {
        return ret;
    }
    L = s->end;
    /* Fixpoint: blocks at [L, L + nb), a new table at [L + nb, + nt). */
    do {
        uint64_t total = nb + nt;
        uint64_t first = L / rbe, last = (L + total) / rbe;
        uint64_t cnt = 0, max_ti = need_ti;

        g_free(tis);
        tis = g_new(uint64_t, last - first + 2);
        tis[cnt++] = need_ti;
        for (uint64_t t = first; t <= last; t++) {
            if (t != need_ti && (t >= s->rt_entries || !s->rt[t])) {
                tis[cnt++] = t;
                max_ti = MAX(max_ti, t);
            }
        }
        changed = cnt != nb;
        nb = cnt;
        if (max_ti >= s->rt_entries) {
            uint64_t want = MAX(max_ti + 1, s->rt_entries * 2);
            uint64_t t = (((want) + (per_cl) - 1) / (per_cl));

            if (t * s->cluster_size > QCOW2_MAX_REFTABLE_BYTES) {
                return -EFBIG;
            }
            if (t != nt) {
                changed = true;
            }
            nt = t;
            new_entries = nt * per_cl;
        }
    } while (changed);

    {
        uint64_t before = s->end;

        ret = end_skip_used(s, nb + nt);
        if (ret < 0) {
            return ret;
        }
        if (s->end != before) {
            goto restart;       /* a cluster in use inside the range */
        }
    }
    s->end = L + nb + nt;
    /* The new blocks, in memory, then the new clusters' refcounts. */
    if (nt) {
        new_rt = g_new0(uint64_t, new_entries);
        memcpy(new_rt, s->rt, s->rt_entries * 8);
    }
    for (uint64_t i = 0; i < nb; i++) {
        Qcow2RcBlock *b = rc_block_load(s, (L + i) << s->cluster_bits, true,
                                        &ret);
        if (!b) {
            g_free(new_rt);
            return ret;
        }
        b->dirty = true;
        s->rc_dirty = true;
        if (new_rt) {
            new_rt[tis[i]] = (L + i) << s->cluster_bits;
        }
    }
    for (uint64_t c = L; c < L + nb + nt; c++) {
        uint64_t ti = c / rbe;
        uint64_t boff = 0;
        Qcow2RcBlock *b;

        for (uint64_t i = 0; i < nb; i++) {
            if (tis[i] == ti) {
                boff = (L + i) << s->cluster_bits;
            }
        }
        if (!boff) {
            boff = s->rt[ti];   /* an existing block */
        }
        b = rc_block_load(s, boff, false, &ret);
        if (!b) {
            g_free(new_rt);
            return ret;
        }
        ret = qcow2_refcount_set(&s->info, b->data, c % rbe, 1);
        if (ret < 0) {
            g_free(new_rt);
            return ret;
        }
        b->dirty = true;
        s->rc_dirty = true;
    }
    ret = rc_write_dirty(s);
    if (ret < 0) {
        g_free(new_rt);
        return ret;
    }
    if (!nt) {
        /* New entries in the existing table: one per new block (the
         * range asked for, and those the new blocks themselves fall
         * in). */
        g_autofree uint8_t *be = g_malloc(s->rt_entries * 8);

        ret = sio_flush(s);
        if (ret < 0) {
            return ret;
        }
        for (uint64_t i = 0; i < s->rt_entries; i++) {
            qcow2_st_be64(be + i * 8, qcow2_reftable_encode(s->rt[i]));
        }
        for (uint64_t i = 0; i < nb; i++) {
            qcow2_st_be64(be + tis[i] * 8,
                          qcow2_reftable_encode((L + i) << s->cluster_bits));
        }
        for (uint64_t i = 0; i < nb && ret == 0; i++) {
            ret = write_piece(s, be, s->rt_offset, s->rt_entries * 8,
                              tis[i] * 8);
        }
        if (ret == 0) {
            ret = sio_flush(s);
        }
        if (ret < 0) {
            /* Refcounts must not go into a block the file's table may
             * not name: the next allocation makes another. */
            return ret;
        }
        for (uint64_t i = 0; i < nb; i++) {
            s->rt[tis[i]] = (L + i) << s->cluster_bits;
        }
        return 0;
    }
    {
        uint64_t t_off = (L + nb) << s->cluster_bits;
        uint64_t old_off = s->rt_offset;
        uint64_t old_cl = s->rt_entries / per_cl;
        g_autofree uint8_t *be = g_malloc0(nt * s->cluster_size);

        for (uint64_t i = 0; i < new_entries; i++) {
            qcow2_st_be64(be + i * 8, qcow2_reftable_encode(new_rt[i]));
        }
        ret = sio_write(s, t_off, be, nt * s->cluster_size);
        if (ret == 0) {
            ret = sio_flush(s);
        }
        if (ret < 0) {
            g_free(new_rt);
            return ret;
        }
        qcow2_st_be64(s->hdr + HDR_RT_OFFSET, t_off);
        {
            uint32_t v = GUINT32_TO_BE((uint32_t)nt);

            memcpy(s->hdr + HDR_RT_CLUSTERS, &v, 4);
        }
        ret = write_header(s);
        if (ret < 0) {
            g_free(new_rt);
            return ret;
        }
        /* The file names the new table now (or will): use it. */
        ret = sio_flush(s);
        g_free(s->rt);
        s->rt = new_rt;
        s->rt_entries = new_entries;
        s->rt_offset = t_off;
        s->info.h.refcount_table_offset = t_off;
        s->info.h.refcount_table_clusters = nt;
        if (ret < 0) {
            return ret;
        }
        /* The old table is garbage now: a crash before this only leaks. */
        for (uint64_t i = 0; i < old_cl; i++) {
            ret = rc_update(s, (old_off >> s->cluster_bits) + i, -1);
            if (ret < 0) {
                return ret;
            }
        }
        return rc_write_dirty(s);
    }
}

/*
 * Allocate @n contiguous clusters: their refcounts become 1 in the cache
 * (the caller writes them with rc_write_dirty() and flushes before
 * anything points at them).  Returns the host offset or -errno.
 */
/*
 * Move s->end past clusters in use, so that [s->end, s->end + @n) is
 * free.  Clusters past the end of the file can be in use: a batch of
 * reserved data clusters is counted before the file grows over it, and
 * a crash leaves what was not written yet counted (leaked) beyond the
 * file's end, where the image's end starts at the next open.
 */
static int end_skip_used(BDRVQcow2State *s, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v;
        int ret = rc_get(s, s->end + i, &v);

        if (ret < 0) {
            return ret;
        }
        if (v) {
            s->end += i + 1;
            i = (uint64_t)-1;   /* again from the new end */
        }
    }
    return 0;
}

static void reuse_poll(BDRVQcow2State *s);

/*
 * @zero (may be NULL): set when the clusters are handed out for the
 * first time past the file's end at open, so that they read as zeroes
 * (holes of the grown file) until written.
 */
static int64_t alloc_clusters_z(BDRVQcow2State *s, uint64_t n, bool *zero)
{
    uint64_t start;
    int ret;

    if (zero) {
        *zero = false;
    }
    reuse_poll(s);
    ret = end_skip_used(s, n);
    if (ret < 0) {
        return ret;
    }
    start = s->end;

    if (n == 1) {
        /* A free cluster in the covered space, if any. */
        while (s->free_hint < s->end) {
            uint64_t v;

            ret = rc_get(s, s->free_hint, &v);
            if (ret < 0) {
                return ret;
            }
            if (v == 0 && s->free_hint > 0) {
                start = s->free_hint++;
                goto found;
            }
            s->free_hint++;
        }
    }
    s->end += n;
    /* The hint may be lower (clusters freed since: reuse_poll()). */
    if (s->free_hint >= start) {
        s->free_hint = s->end;
    }
    if (zero) {
        /* Never handed out before: s->end only moves forward. */
        *zero = (start << s->cluster_bits) >= s->zero_from;
    }
found:
    if (((start + n) << s->cluster_bits) > QCOW2_MAX_HOST_OFFSET) {
        return -ENOSPC;
    }
    for (uint64_t i = 0; i < n; i++) {
        ret = rc_update(s, start + i, 1);
        if (ret < 0) {
            return ret;
        }
    }
    return start << s->cluster_bits;
}

static int64_t alloc_clusters(BDRVQcow2State *s, uint64_t n)
{
    return alloc_clusters_z(s, n, NULL);
}

/*
 * A cluster for guest data.  Clusters are reserved a batch at a time:
 * their refcounts are set together in the cache (written, and flushed,
 * before the first L2 slice naming one of them is), so a batch dirties
 * its refcount block once; later calls take from it without any
 * refcount work.  A crash leaks what is left of the batch once its
 * refcounts are on the file; a clean close gives it back.  @zero: the
 * cluster reads as zeroes (see alloc_clusters_z()), so that a partial
 * write need not fill the rest of it.
 */
#define RES_ZERO 1      /* in s->reserve[]: offsets are cluster aligned */

static int64_t alloc_data_cluster(BDRVQcow2State *s, bool *zero)
{
    int64_t off;

    if (s->res_head == s->res_len) {
        s->res_head = s->res_len = 0;
        for (uint32_t i = 0; i < s->res_max; i++) {
            bool z;

            off = alloc_clusters_z(s, 1, &z);
            if (off < 0) {
                if (!s->res_len) {
                    return off;
                }
                break;
            }
            s->reserve[s->res_len++] = off | (z ? RES_ZERO : 0);
        }
    }
    off = s->reserve[s->res_head++];
    *zero = off & RES_ZERO;
    return off & ~(int64_t)RES_ZERO;
}

/* Give the unused reserved clusters back (before a clean close). */
static int release_reserve(BDRVQcow2State *s)
{
    while (s->res_head < s->res_len) {
        int ret = rc_update(s, (s->reserve[s->res_head++] & ~RES_ZERO) >>
                               s->cluster_bits, -1);

        if (ret < 0) {
            return ret;
        }
    }
    return 0;
}

/* Decrement the refcounts of the host clusters [off, off + len). */
static int free_range(BDRVQcow2State *s, uint64_t off, uint64_t len)
{
    uint64_t first = off >> s->cluster_bits;
    uint64_t last = (off + len - 1) >> s->cluster_bits;

    for (uint64_t c = first; c <= last; c++) {
        int ret = rc_update(s, c, -1);

        if (ret < 0) {
            return ret;
        }
    }
    /* Free again: the next single-cluster allocation looks here (the
     * caller made sure no fast path request still uses the range: see
     * reuse_poll()). */
    s->free_hint = MIN(s->free_hint, first);
    return 0;
}

/*
 * The fast path: order its count (a seq_cst read-modify-write) before
 * its loads of the entries, against fast_drained()'s fence.  On x86 a
 * locked instruction is a full barrier already: the fence would only be
 * a second one (a locked "or" to the stack).  The thread sanitizer
 * models fences, not that, so it keeps the fence.
 */
static inline void fast_fence_after_rmw(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && \
    !defined(__SANITIZE_THREAD__)
    __asm__ volatile("" ::: "memory");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Metadata thread: has every fast path request counted in epoch
 * @idx completed? */
static bool fast_drained(BDRVQcow2State *s, uint32_t idx)
{
    /* Pairs with the fence in qcow2_submit(): either that request is
     * counted here, or it sees the entries as changed before this. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < FAST_SLOTS; i++) {
        if (__atomic_load_n(&s->fast[i].refs[idx], __ATOMIC_SEQ_CST)) {
            return false;
        }
    }
    return true;
}

/*
 * A range freed on disk (its entries durable) is quarantined before its
 * refcount drops: a fast path request may have looked up an entry naming
 * it before the entry changed, and still be reading or writing it.  A
 * grace period makes sure none is left: the epoch flips (new requests
 * count in the other counter, and see the changed entries), and once the
 * old epoch's counter is back to zero the ranges are freed for reuse.
 * Called whenever the allocator looks for clusters, and after a flush.
 */
static void reuse_poll(BDRVQcow2State *s)
{
    for (;;) {
        if (s->grace->len) {
            if (!fast_drained(s, s->grace_idx)) {
                return;
            }
            for (guint i = 0; i < s->grace->len; i++) {
                Qcow2Free *f = &g_array_index(s->grace, Qcow2Free, i);

                /* On an error the rest leaks: applying it twice would
                 * not be safe, and a leak is. */
                if (free_range(s, f->off, f->len) < 0) {
                    break;
                }
            }
            g_array_set_size(s->grace, 0);
        }
        if (!s->quarantine->len) {
            return;
        }
        {
            GArray *t = s->grace;

            s->grace = s->quarantine;
            s->quarantine = t;
        }
        s->grace_idx = s->fast_cur - s->fast[0].refs;
        __atomic_store_n(&s->fast_cur, &s->fast[0].refs[!s->grace_idx],
                         __ATOMIC_SEQ_CST);
    }
}

/* ---- L2 cache --------------------------------------------------------- */

/* Where the slice of entry @idx of the L2 table at @l2_off starts (the
 * slice's byte offset in the table is @idx rounded down to the slice's
 * entries, a power of two, times 8). */
static inline uint64_t l2_slice_key(BDRVQcow2State *s, uint64_t l2_off,
                                    uint32_t idx)
{
    return l2_off + ((uint64_t)(idx & ~(s->slice_entries - 1)) << 3);
}

/* Bytes of one set of the L2 cache (Qcow2L2Slot is 32 bytes). */
#define L2_SET_BYTES (L2_WAYS * 32)
G_STATIC_ASSERT(sizeof(Qcow2L2Slot) * L2_WAYS == L2_SET_BYTES);

/*
 * The set of slice @key: a Fibonacci hash of it scaled into [0, nb_sets)
 * by a multiplication (no division on the fast path), as the byte offset
 * of the set in @slots.  The key is a multiple of 512, so the low 9 bits
 * of the product are zero and bits 32..63 still mix every bit of the
 * key below 2^55 (host offsets are below 2^56): no shift before the
 * multiplication.  set_scale is nb_sets * L2_SET_BYTES, so the second
 * product is the set number times L2_SET_BYTES plus a fraction of a set
 * (floor(256 x) = 256 floor(x) + something below 256), which the mask
 * drops: the set is (h * nb_sets) >> 32, without a shift to scale it.
 */
static inline uint64_t l2_set_off(BDRVQcow2State *s, uint64_t key)
{
    uint64_t h = (key * 0x9e3779b97f4a7c15ull) >> 32;

    return ((h * s->set_scale) >> 32) & ~(uint64_t)(L2_SET_BYTES - 1);
}

static inline Qcow2L2Slot *l2_set_of(BDRVQcow2State *s, uint64_t key)
{
    return (Qcow2L2Slot *)((uint8_t *)s->slots + l2_set_off(s, key));
}

/* Metadata thread: start and end a change of @slot's key or contents
 * (see Qcow2L2Slot). */
static void slot_begin(Qcow2L2Slot *slot)
{
    __atomic_store_n(&slot->seq, slot->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void slot_end(Qcow2L2Slot *slot)
{
    __atomic_store_n(&slot->seq, slot->seq + 1, __ATOMIC_RELEASE);
}

/*
 * Write @slot's slice if it is dirty.  Its entries may name clusters
 * whose refcount increments are only in the cache (or written, not
 * flushed): those go first, and a flush, so that no entry on the file
 * names a cluster the file's refcounts do not count.
 */
static int l2_slot_writeback(BDRVQcow2State *s, Qcow2L2Slot *slot)
{
    int ret;

    if (!slot->dirty) {
        return 0;
    }
    if (s->rc_dirty || s->rc_unflushed) {
        ret = rc_write_dirty(s);
        if (ret == 0) {
            ret = sio_flush(s);
        }
        if (ret < 0) {
            return ret;
        }
    }
    ret = sio_write(s, slot->key, slot->data, s->slice_size);
    if (ret == 0) {
        slot->dirty = false;
    }
    return ret;
}

/*
 * The cached slice at @key (loading it, or zeroing it when @fresh).  A
 * dirty slice is evicted only once written: the slot is the current
 * truth until then, for this thread and the fast path.
 */
static Qcow2L2Slot *l2_slice_get(BDRVQcow2State *s, uint64_t key, bool fresh,
                                 int *ret)
{
    Qcow2L2Slot *set = l2_set_of(s, key);
    Qcow2L2Slot *slot = &set[0];

    *ret = 0;
    for (int w = 0; w < L2_WAYS; w++) {
        if (set[w].key == key) {
            set[w].used = ++s->clock;
            return &set[w];
        }
    }
    for (int w = 0; w < L2_WAYS; w++) {
        if (!set[w].key) {
            slot = &set[w];
            break;
        }
        if (set[w].used < slot->used) {
            slot = &set[w];
        }
    }
    *ret = l2_slot_writeback(s, slot);
    if (*ret < 0) {
        return NULL;
    }
    slot_begin(slot);
    __atomic_store_n(&slot->key, 0, __ATOMIC_RELAXED);
    if (fresh) {
        memset(slot->data, 0, s->slice_size);
    } else {
        *ret = sio_read(s, s->file, key, slot->data, s->slice_size);
        if (*ret < 0) {
            slot_end(slot);
            return NULL;
        }
    }
    __atomic_store_n(&slot->key, key, __ATOMIC_RELAXED);
    slot_end(slot);
    slot->used = ++s->clock;
    return slot;
}

/* The slice of guest cluster @vc (0: it has no L2 table, or its L1
 * entry is not valid: the request's own lookup will say so). */
static uint64_t l2_key_of(BDRVQcow2State *s, uint64_t vc)
{
    uint64_t l1_index = vc >> s->info.l2_bits;
    const char *why;
    Qcow2L1Entry l1e;

    if (l1_index >= s->l1_size ||
        qcow2_l1_decode(&s->info, s->l1[l1_index], &l1e, &why) < 0 ||
        !l1e.l2_offset) {
        return 0;
    }
    return l2_slice_key(s, l1e.l2_offset, vc & (s->info.l2_entries - 1));
}

/* Is slice @key cached (or loading)?  Then it counts as just used: a
 * prefetch does not evict what an earlier request of its batch needs. */
static bool l2_cached(BDRVQcow2State *s, uint64_t key)
{
    Qcow2L2Slot *set = l2_set_of(s, key);

    for (int w = 0; w < L2_WAYS; w++) {
        if (set[w].key == key) {
            set[w].used = ++s->clock;
            return true;
        }
    }
    return false;
}

static void prefetch_cb(void *opaque, int ret)
{
    Qcow2Prefetch *pf = opaque;

    pf->ret = ret;
    pf->done = true;
}

/*
 * Load the uncached slices of @keys (@n of them, 0 and duplicates
 * skipped) into the cache together, all reads in flight at once, and
 * return once they are all done.  A request whose lookup misses waits
 * for one slice read; the requests queued behind it would each wait for
 * theirs in turn, so a sparse image read at random at depth 32 went at
 * one slice read at a time.  This only fills the cache with what the
 * file holds for slices the cache does not have (for those the file is
 * the truth: a slice changed in the cache stays there until written),
 * the way l2_slice_get() does, so it changes no request's result.  A
 * slice is skipped rather than loaded where loading it would need a
 * write first (its set's victim is dirty), a bounce buffer (a child
 * with a coarser alignment than the slice), or a slot another slice of
 * this batch is using; its request loads it on its own as before.  A
 * failed read leaves its slot empty: the request's own load reports it.
 */
static void l2_prefetch(BDRVQcow2State *s, const uint64_t *keys, uint32_t n)
{
    uint32_t m = 0;

    for (uint32_t i = 0; i < n && m < L2_PREFETCH_MAX; i++) {
        uint64_t key = keys[i], a, e;
        Qcow2L2Slot *set, *victim = NULL;

        if (!key || l2_cached(s, key) ||
            sio_widen(s->file, key, s->slice_size, &a, &e)) {
            continue;
        }
        set = l2_set_of(s, key);
        for (int w = 0; w < L2_WAYS; w++) {
            Qcow2L2Slot *c = &set[w];

            if (c->seq & 1) {
                continue;       /* loading for this batch */
            }
            if (!c->key) {
                victim = c;
                break;
            }
            if (!victim || c->used < victim->used) {
                victim = c;
            }
        }
        if (!victim || victim->dirty) {
            continue;
        }
        /* Odd until loaded: the fast path does not use it meanwhile,
         * and this loop does not pick it again. */
        slot_begin(victim);
        __atomic_store_n(&victim->key, key, __ATOMIC_RELAXED);
        s->pf[m].slot = victim;
        s->pf[m].done = false;
        s->pf[m].iov = (struct iovec){ victim->data, s->slice_size };
        m++;
    }
    for (uint32_t i = 0; i < m; i++) {
        blk_aio_preadv(s->file, &s->pf[i].acb, s->pf[i].slot->key,
                       &s->pf[i].iov, 1, prefetch_cb, &s->pf[i]);
    }
    for (uint32_t i = 0; i < m; i++) {
        Qcow2Prefetch *pf = &s->pf[i];

        while (!pf->done) {
            aio_poll(s->ctx, true);
        }
        if (pf->ret < 0) {
            __atomic_store_n(&pf->slot->key, 0, __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&s->l2_prefetched, 1, __ATOMIC_RELAXED);
        }
        pf->slot->used = ++s->clock;
        slot_end(pf->slot);
    }
}

static void slot_drop(Qcow2L2Slot *slot)
{
    slot_begin(slot);
    __atomic_store_n(&slot->key, 0, __ATOMIC_RELAXED);
    slot_end(slot);
}

/* Write the dirty cached slices of the L2 table at @l2_off. */
static int l2_writeback_table(BDRVQcow2State *s, uint64_t l2_off)
{
    for (uint32_t i = 0; i < s->nb_slots; i++) {
        if (s->slots[i].key >= l2_off &&
            s->slots[i].key < l2_off + s->cluster_size) {
            int ret = l2_slot_writeback(s, &s->slots[i]);

            if (ret < 0) {
                return ret;
            }
        }
    }
    return 0;
}

/* Drop every cached slice of the L2 table at @l2_off (written first:
 * see l2_writeback_table()). */
static void l2_forget(BDRVQcow2State *s, uint64_t l2_off)
{
    for (uint32_t i = 0; i < s->nb_slots; i++) {
        if (s->slots[i].key >= l2_off &&
            s->slots[i].key < l2_off + s->cluster_size) {
            assert(!s->slots[i].dirty);
            slot_drop(&s->slots[i]);
        }
    }
}

static gboolean rc_block_clean(gpointer k, gpointer v, gpointer opaque)
{
    return !((Qcow2RcBlock *)v)->dirty;
}

/* Idle: give back the memory of what the file already has (dirty
 * tables wait for the next flush). */
static void l2_cache_clean(BDRVQcow2State *s)
{
    /* Slots per page (or one slot of a page or more). */
    size_t unit = MAX((size_t)s->slice_size, (size_t)sysconf(_SC_PAGESIZE));
    uint32_t per = unit / s->slice_size;

    for (uint32_t i = 0; i < s->nb_slots; i++) {
        if (s->slots[i].key && !s->slots[i].dirty) {
            slot_drop(&s->slots[i]);
        }
    }
    /* The memory of the empty ones back to the system: a lock-free
     * reader still reading one sees zeroes, and its sequence check
     * (the slot changed) discards what it read. */
    for (uint32_t i = 0; i + per <= s->nb_slots; i += per) {
        bool empty = true;

        for (uint32_t j = i; j < i + per; j++) {
            empty &= !s->slots[j].key;
        }
        if (empty) {
            madvise(s->slots[i].data, unit, MADV_DONTNEED);
        }
    }
    g_hash_table_foreach_remove(s->rc_cache, rc_block_clean, NULL);
}

/*
 * Any thread, no lock: the L2 entry (host byte order) at byte @byte (a
 * multiple of 8 below the slice's size) of the slice @key if it is
 * cached, else false.
 */
static inline bool l2_fast_entry(BDRVQcow2State *s, uint64_t key,
                                 uint64_t byte, uint64_t *raw)
{
    Qcow2L2Slot *set = l2_set_of(s, key);

    for (int w = 0; w < L2_WAYS; w++) {
        Qcow2L2Slot *slot = &set[w];
        uint32_t s1 = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
        uint64_t v;

        if ((s1 & 1) ||
            __atomic_load_n(&slot->key, __ATOMIC_RELAXED) != key) {
            continue;
        }
        v = __atomic_load_n((uint64_t *)(slot->data + byte),
                            __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&slot->seq, __ATOMIC_RELAXED) != s1) {
            return false;
        }
        *raw = GUINT64_FROM_BE(v);
        return true;
    }
    return false;
}

/* Where guest cluster @vc is mapped. */
typedef struct Qcow2Loc {
    uint64_t l1_index;
    uint64_t l2_offset;         /* 0: no L2 table */
    bool l2_copied;
    uint32_t l2_index;
    uint64_t raw;               /* the L2 entry as stored */
    Qcow2L2Entry e;
} Qcow2Loc;

static int lookup(BDRVQcow2State *s, uint64_t vc, Qcow2Loc *loc)
{
    const char *why = NULL;
    Qcow2L1Entry l1e;
    Qcow2L2Slot *slot;
    int ret;

    memset(loc, 0, sizeof(*loc));
    loc->l1_index = vc >> s->info.l2_bits;
    loc->l2_index = vc & (s->info.l2_entries - 1);
    loc->e.type = QCOW2_CLUSTER_UNALLOCATED;
    if (loc->l1_index >= s->l1_size) {
        return 0;
    }
    ret = qcow2_l1_decode(&s->info, s->l1[loc->l1_index], &l1e, &why);
    if (ret < 0) {
        goto corrupt;
    }
    loc->l2_offset = l1e.l2_offset;
    loc->l2_copied = l1e.copied;
    if (!l1e.l2_offset) {
        return 0;
    }
    slot = l2_slice_get(s, l2_slice_key(s, l1e.l2_offset, loc->l2_index),
                        false, &ret);
    if (!slot) {
        return ret;
    }
    loc->raw = qcow2_ld_be64(slot->data +
                             (loc->l2_index % s->slice_entries) * 8);
    ret = qcow2_l2_decode(&s->info, loc->raw, &loc->e, &why);
    if (ret < 0) {
        goto corrupt;
    }
    return 0;

corrupt:
    g_printerr("qcow2 %s: corrupt metadata for guest offset %#" PRIx64
               ": %s\n", s->filename, vc << s->cluster_bits, why);
    return -EIO;
}

/*
 * Set the L2 entry of @loc (whose table is writable) in the cache: the
 * slice is dirty until a flush (or its eviction) writes it.  A write
 * acknowledged through it is durable only after the next guest flush,
 * which is the guarantee a guest gets without FUA.
 */
static int l2_set(BDRVQcow2State *s, const Qcow2Loc *loc, uint64_t entry)
{
    uint64_t key = l2_slice_key(s, loc->l2_offset, loc->l2_index);
    uint32_t in = (loc->l2_index % s->slice_entries) * 8;
    Qcow2L2Slot *slot;
    int ret;

    slot = l2_slice_get(s, key, false, &ret);
    if (!slot) {
        return ret;
    }
    slot->dirty = true;
    /* One aligned store: a lock-free reader sees the old or the new. */
    __atomic_store_n((uint64_t *)(slot->data + in), GUINT64_TO_BE(entry),
                     __ATOMIC_RELEASE);
    return 0;
}

/*
 * Drop the references of the host range [off, off + len) once no entry
 * on the file names it any more: after the next successful flush
 * (metadata_flush()).  Until then its refcount keeps it from being
 * handed out again.
 */
static void free_later(BDRVQcow2State *s, uint64_t off, uint64_t len)
{
    Qcow2Free f = { .off = off, .len = len };

    g_array_append_val(s->pending_frees, f);
}

/*
 * Make every change so far durable, in the order that keeps the file
 * consistent at each step: dirty refcount blocks, a flush, dirty L2
 * slices (L1 entries and new tables are written when made), a flush.
 * Then the clusters queued by free_later() lose their references once
 * the fast path let go of them (reuse_poll(); in the cache: written by
 * the next flush, or earlier; a crash before only leaks them), and can
 * be handed out again.  On failure what is dirty stays dirty for the
 * next try.
 */
static int metadata_flush(BDRVQcow2State *s)
{
    int ret;

    ret = rc_write_dirty(s);
    for (uint32_t i = 0; ret == 0 && i < s->nb_slots; i++) {
        ret = l2_slot_writeback(s, &s->slots[i]);
    }
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret < 0) {
        return ret;
    }
    g_array_append_vals(s->quarantine, s->pending_frees->data,
                        s->pending_frees->len);
    g_array_set_size(s->pending_frees, 0);
    reuse_poll(s);
    return 0;
}

/* Queued frees are memory: past this many, flush to apply them. */
#define MAX_PENDING_FREES 4096

static void pending_frees_bound(BDRVQcow2State *s)
{
    if (s->pending_frees->len >= MAX_PENDING_FREES) {
        /* An error leaves them queued for the guest's next flush. */
        metadata_flush(s);
    }
}

#define L1_FAST_BAD 1ull

/* Metadata thread: L1 entry @entry (host byte order) as the fast path's
 * table has it (Qcow2L1Pub): itself if valid, else L1_FAST_BAD. */
static uint64_t l1_fast_entry(BDRVQcow2State *s, uint64_t entry)
{
    const char *why;
    Qcow2L1Entry e;

    if (qcow2_l1_decode(&s->info, entry, &e, &why) < 0) {
        return L1_FAST_BAD;
    }
    return qcow2_l1_encode(e.l2_offset, e.copied);
}

/*
 * Set L1 entry @idx to @entry: on the file first, then in memory, so
 * that a failed write leaves memory as the file is (tables written after
 * it must not depend on an entry the file does not have).
 */
static int l1_set(BDRVQcow2State *s, uint64_t idx, uint64_t entry)
{
    uint64_t pos = idx * 8;
    uint64_t start = pos & ~(uint64_t)(s->align - 1);
    uint64_t len = MIN(s->align, (uint64_t)s->l1_size * 8 - start);
    g_autofree uint8_t *buf = g_malloc(len);
    int ret;

    for (uint64_t i = 0; i < len / 8; i++) {
        qcow2_st_be64(buf + i * 8, start / 8 + i == idx ? entry :
                                   s->l1[start / 8 + i]);
    }
    ret = sio_write(s, s->l1_offset + start, buf, len);
    if (ret == 0) {
        s->l1[idx] = entry;
        __atomic_store_n(&s->l1pub->e[idx], l1_fast_entry(s, entry),
                         __ATOMIC_RELEASE);
    }
    return ret;
}

/*
 * Make the L2 table of @loc's L1 entry exist and be ours alone
 * (COPIED): allocate a zeroed one, or copy a shared one.  Order: the
 * refcount, the new table, flush, the L1 entry, flush; then the shared
 * table's reference is dropped.
 */
static int l2_prepare(BDRVQcow2State *s, uint64_t vc, Qcow2Loc *loc)
{
    g_autofree uint8_t *table = NULL;
    uint64_t old = loc->l2_offset;
    int64_t off;
    int ret;

    if (old && loc->l2_copied) {
        return 0;
    }
    if (loc->l1_index >= s->l1_size) {
        return -EIO;    /* the L1 table covers the virtual size */
    }
    table = g_malloc0(s->cluster_size);
    if (old) {
        /* A shared table is never changed in place; should a slice of
         * it be dirty all the same, the copy must have it. */
        ret = l2_writeback_table(s, old);
        if (ret < 0) {
            return ret;
        }
        ret = sio_read(s, s->file, old, table, s->cluster_size);
        if (ret < 0) {
            return ret;
        }
    }
    off = alloc_clusters(s, 1);
    if (off < 0) {
        return off;
    }
    ret = rc_write_dirty(s);
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret == 0) {
        ret = sio_write(s, off, table, s->cluster_size);
    }
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret < 0) {
        return ret;
    }
    ret = l1_set(s, loc->l1_index, qcow2_l1_encode(off, true));
    if (ret < 0) {
        return ret;
    }
    if (old) {
        Qcow2Free f = { .off = old, .len = s->cluster_size };

        l2_forget(s, old);
        ret = sio_flush(s);
        if (ret < 0) {
            return ret;
        }
        /* The fast path may still read entries of the old table: it
         * is reused only after a grace period. */
        g_array_append_val(s->quarantine, f);
    }
    return lookup(s, vc, loc);
}

/* ---- reading clusters ------------------------------------------------- */

/* Read [off, off + len) of the backing chain (zeroes past its end). */
static int read_backing(BDRVQcow2State *s, uint64_t off, uint8_t *buf,
                        uint64_t len)
{
    uint64_t bsize = s->backing ? blk_getlength(s->backing) : 0;
    uint64_t n = off < bsize ? MIN(len, bsize - off) : 0;

    memset(buf + n, 0, len - n);
    return n ? sio_read(s, s->backing, off, buf, n) : 0;
}

static int read_compressed(BDRVQcow2State *s, const Qcow2L2Entry *e,
                           uint8_t *out)
{
    uint64_t fsize = blk_getlength(s->file);
    uint64_t start = e->host_offset & ~511ull;
    uint64_t end = MIN(e->host_offset + e->compressed_size, fsize);
    uint64_t rend = MIN(QEMU_ALIGN_UP(end, s->file->bl.request_alignment),
                        fsize);
    const char *why = NULL;
    int ret;

    if (end <= e->host_offset) {
        return -EIO;
    }
    ret = sio_read(s, s->file, start, s->cbuf, rend - start);
    if (ret < 0) {
        return ret;
    }
    ret = qcow2_decompress(s->dec, s->cbuf + (e->host_offset - start),
                           end - e->host_offset, out, s->cluster_size, &why);
    if (ret < 0) {
        g_printerr("qcow2 %s: compressed cluster at %#" PRIx64 ": %s\n",
                   s->filename, e->host_offset, why);
    }
    return ret;
}

/* What guest cluster @vc reads as, [in, in + len) of it, into @buf. */
static int read_cluster_part(BDRVQcow2State *s, uint64_t vc,
                             const Qcow2Loc *loc, uint32_t in, uint32_t len,
                             uint8_t *buf)
{
    uint64_t voff = (vc << s->cluster_bits) + in;
    int ret;

    switch (loc->e.type) {
    case QCOW2_CLUSTER_NORMAL:
        return sio_read(s, s->file, loc->e.host_offset + in, buf, len);
    case QCOW2_CLUSTER_ZERO_PLAIN:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        memset(buf, 0, len);
        return 0;
    case QCOW2_CLUSTER_COMPRESSED: {
        g_autofree uint8_t *d = g_malloc(s->cluster_size);

        ret = read_compressed(s, &loc->e, d);
        if (ret == 0) {
            memcpy(buf, d + in, len);
        }
        return ret;
    }
    default:
        return read_backing(s, voff, buf, len);
    }
}

/* ---- requests (metadata thread) --------------------------------------- */

static int do_read(BDRVQcow2State *s, BlockAIOCB *acb)
{
    g_autofree uint8_t *buf = g_malloc(acb->bytes);
    uint64_t pos = 0;
    int ret;

    while (pos < acb->bytes) {
        uint64_t off = acb->offset + pos;
        uint64_t vc = off >> s->cluster_bits;
        uint32_t in = off & (s->cluster_size - 1);
        uint32_t len = MIN(s->cluster_size - in, acb->bytes - pos);
        Qcow2Loc loc;

        ret = lookup(s, vc, &loc);
        if (ret < 0) {
            return ret;
        }
        /* Contiguous data clusters: one read. */
        if (loc.e.type == QCOW2_CLUSTER_NORMAL) {
            uint64_t host = loc.e.host_offset + in;
            uint64_t n = len;

            while (pos + n < acb->bytes) {
                Qcow2Loc next;
                uint64_t nvc = (off + n) >> s->cluster_bits;

                ret = lookup(s, nvc, &next);
                if (ret < 0) {
                    return ret;
                }
                if (next.e.type != QCOW2_CLUSTER_NORMAL ||
                    next.e.host_offset != host + n) {
                    break;
                }
                n += MIN(s->cluster_size, acb->bytes - pos - n);
            }
            ret = sio_read(s, s->file, host, buf + pos, n);
            if (ret < 0) {
                return ret;
            }
            pos += n;
            continue;
        }
        ret = read_cluster_part(s, vc, &loc, in, len, buf + pos);
        if (ret < 0) {
            return ret;
        }
        pos += len;
    }
    iov_from_buf(acb->iov, acb->niov, 0, buf, acb->bytes);
    return 0;
}

/* Where the data of one guest cluster of a write goes. */
typedef struct WritePlan {
    uint64_t vc;
    uint32_t in, len;
    Qcow2Loc loc;
    int64_t new_off;            /* 0: in place */
    bool reuse;                 /* new_off is the zeroed cluster's own */
    bool zero_rest;             /* new_off reads as zeroes, and so does
                                 * the guest cluster: only the data (to
                                 * the file's alignment) is written */
    uint32_t w_off, w_len;      /* async: what of new_off is written */
} WritePlan;

/*
 * Does guest cluster @vc (mapped as @loc) read as zeroes?  Then a new
 * cluster that reads as zeroes needs nothing copied into it.
 */
static bool reads_as_zero(BDRVQcow2State *s, uint64_t vc,
                          const Qcow2Loc *loc)
{
    switch (loc->e.type) {
    case QCOW2_CLUSTER_ZERO_PLAIN:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        return true;
    case QCOW2_CLUSTER_UNALLOCATED:
        return !s->backing ||
               (vc << s->cluster_bits) >= blk_getlength(s->backing);
    default:
        return false;
    }
}

/*
 * An aligned buffer of at least @size bytes for an async write (its
 * capacity in @cap): one kept from an earlier write if one is large
 * enough.  NULL if out of memory.
 */
static uint8_t *abuf_get(BDRVQcow2State *s, size_t size, size_t *cap)
{
    uint32_t fa = MAX(s->file->bl.request_alignment, 1);
    void *p;

    for (uint32_t i = 0; i < s->nr_abuf; i++) {
        if (s->abuf_cap[i] >= size) {
            p = s->abuf[i];
            *cap = s->abuf_cap[i];
            s->nr_abuf--;
            s->abuf[i] = s->abuf[s->nr_abuf];
            s->abuf_cap[i] = s->abuf_cap[s->nr_abuf];
            return p;
        }
    }
    if (posix_memalign(&p, MAX(fa, 4096), size)) {
        return NULL;
    }
    *cap = size;
    return p;
}

/* Largest async write buffer kept: MAX_ASYNC of them at most. */
#define ABUF_KEEP_MAX (256u * 1024)

/* Keep @p for the next async write (freed if enough are kept, or if it
 * is large: page faults matter less against a large write). */
static void abuf_put(BDRVQcow2State *s, uint8_t *p, size_t cap)
{
    if (!p) {
        return;
    }
    if (s->nr_abuf < MAX_ASYNC && cap <= ABUF_KEEP_MAX) {
        s->abuf[s->nr_abuf] = p;
        s->abuf_cap[s->nr_abuf++] = cap;
        return;
    }
    free(p);
}

/* Clear the autoclear bits we do not maintain, before the first change:
 * a reader that knows them must not trust what they describe. */
static int first_write(BDRVQcow2State *s)
{
    int ret;

    if (!s->info.h.autoclear_features) {
        return 0;
    }
    qcow2_st_be64(s->hdr + HDR_AUTOCLEAR, 0);
    ret = write_header(s);
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret < 0) {
        return ret;
    }
    s->info.h.autoclear_features = 0;
    /* Until now every write came here (see qcow2_submit()). */
    __atomic_store_n(&s->autoclear_pending, false, __ATOMIC_RELEASE);
    return 0;
}

/*
 * Once the data of @p's new cluster is written: point the L2 entry at
 * it (the L2 table may have been evicted meanwhile: l2_set() looks
 * again), and drop what it pointed at after the next flush.
 */
static int plan_link(BDRVQcow2State *s, const WritePlan *p)
{
    int ret = l2_set(s, &p->loc, qcow2_l2_encode_standard(p->new_off, true,
                                                          false));

    if (ret < 0 || p->reuse) {
        return ret;
    }
    if (p->loc.e.type == QCOW2_CLUSTER_COMPRESSED) {
        free_later(s, p->loc.e.host_offset & ~511ull,
                   p->loc.e.compressed_size + (p->loc.e.host_offset & 511));
    } else if (p->loc.e.type == QCOW2_CLUSTER_NORMAL ||
               p->loc.e.type == QCOW2_CLUSTER_ZERO_ALLOC) {
        free_later(s, p->loc.e.host_offset, s->cluster_size);
    }
    return 0;
}

static void async_cb(void *opaque, int ret)
{
    Qcow2Async *aw = opaque;

    /* Inside aio_poll(): only note it; the loop finishes it. */
    if (ret < 0 && !aw->ret) {
        aw->ret = ret;
    }
    if (--aw->pending == 0) {
        QSIMPLEQ_INSERT_TAIL(&aw->s->async_done, aw, done);
    }
}

/*
 * Submit the new clusters of @plan (every one a new allocation, their
 * contents built in @aw->buf) as writes of the file, one per run of
 * contiguous clusters (of the part of each that is written: w_off,
 * w_len), and return: the thread goes on with the next request
 * meanwhile.
 */
static int submit_async(BDRVQcow2State *s, Qcow2Async *aw)
{
    uint64_t cs = s->cluster_size;
    uint64_t i = 0;
    int ret;

    aw->iov = g_new0(struct iovec, aw->n);
    aw->cacb = g_new0(BlockAIOCB, aw->n);
    for (uint64_t j = 0; j < aw->n; j++) {
        ret = file_grow(s, aw->plan[j].new_off + cs);
        if (ret < 0) {
            return ret;
        }
    }
    aw->pending = 1;            /* until every run is submitted */
    QLIST_INSERT_HEAD(&s->async, aw, link);
    s->nr_async++;
    while (i < aw->n) {
        uint64_t j = i + 1;

        const WritePlan *p = &aw->plan[i];
        uint64_t len = p->w_len;

        while (j < aw->n &&
               aw->plan[j - 1].w_off + aw->plan[j - 1].w_len == cs &&
               aw->plan[j].w_off == 0 &&
               aw->plan[j].new_off == aw->plan[j - 1].new_off + (int64_t)cs) {
            len += aw->plan[j].w_len;
            j++;
        }
        aw->iov[i].iov_base = aw->buf + i * cs + p->w_off;
        aw->iov[i].iov_len = len;
        aw->pending++;
        blk_aio_pwritev(s->file, &aw->cacb[i], p->new_off + p->w_off,
                        &aw->iov[i], 1, 0, async_cb, aw);
        i = j;
    }
    async_cb(aw, 0);
    return 1;
}

/*
 * Write @data (NULL: zeroes) at guest [offset, offset + bytes).  Two
 * passes: allocate (L2 tables and clusters: refcounts in the cache),
 * then the data and the L2 entries (in the cache); the references of
 * clusters copied away from are dropped after the next flush.  Only the
 * data is written here (and a new L2 table's L1 entry): the rest waits
 * for a flush, which writes it in dependency order.
 */
static int do_write(BDRVQcow2State *s, uint64_t offset, uint64_t bytes,
                    const uint8_t *data, bool fua, Qcow2Async *aw)
{
    uint64_t first = offset >> s->cluster_bits;
    uint64_t last = (offset + bytes - 1) >> s->cluster_bits;
    uint64_t n = last - first + 1;
    g_autofree WritePlan *plan = g_new0(WritePlan, n);
    g_autofree uint8_t *cl = NULL;
    g_autofree uint8_t *zero = NULL;
    int ret;

    ret = first_write(s);
    if (ret < 0) {
        return ret;
    }
    for (uint64_t i = 0; i < n; i++) {
        WritePlan *p = &plan[i];
        uint64_t cstart = (first + i) << s->cluster_bits;
        uint64_t a = MAX(offset, cstart);
        uint64_t b = MIN(offset + bytes, cstart + s->cluster_size);

        p->vc = first + i;
        p->in = a - cstart;
        p->len = b - a;
        ret = lookup(s, p->vc, &p->loc);
        if (ret == 0) {
            ret = l2_prepare(s, p->vc, &p->loc);
        }
        if (ret < 0) {
            return ret;
        }
        if (p->loc.e.type == QCOW2_CLUSTER_NORMAL && p->loc.e.copied) {
            continue;
        }
        if (p->loc.e.type == QCOW2_CLUSTER_ZERO_ALLOC && p->loc.e.copied) {
            /* Ours, preallocated: written whole (zeroes around the data)
             * before the entry loses its zero flag. */
            p->new_off = p->loc.e.host_offset;
            p->reuse = true;
            continue;
        }
        p->new_off = alloc_data_cluster(s, &p->zero_rest);
        if (p->new_off < 0) {
            return p->new_off;
        }
        p->zero_rest &= p->len < s->cluster_size &&
                        reads_as_zero(s, p->vc, &p->loc);
    }
    if (aw) {
        bool all_new = true;

        for (uint64_t i = 0; i < n; i++) {
            all_new &= plan[i].new_off && !plan[i].reuse;
        }
        if (all_new) {
            /* Built whole (copy-on-write of partial clusters now), the
             * writes in flight while the next request is done.  Aligned
             * for direct I/O, which would bounce it otherwise. */
            uint32_t fa = MAX(s->file->bl.request_alignment, 1);

            aw->buf = abuf_get(s, n * s->cluster_size, &aw->buf_cap);
            if (!aw->buf) {
                return -ENOMEM;
            }
            for (uint64_t i = 0; i < n; i++) {
                WritePlan *p = &plan[i];
                uint8_t *c = aw->buf + i * s->cluster_size;

                p->w_off = 0;
                p->w_len = s->cluster_size;
                if (p->zero_rest) {
                    /* The file has zeroes around the data already. */
                    p->w_off = QEMU_ALIGN_DOWN(p->in, fa);
                    p->w_len = MIN(QEMU_ALIGN_UP(p->in + p->len, fa),
                                   s->cluster_size) - p->w_off;
                    memset(c + p->w_off, 0, p->w_len);
                } else if (p->len < s->cluster_size) {
                    ret = read_cluster_part(s, p->vc, &p->loc, 0,
                                            s->cluster_size, c);
                    if (ret < 0) {
                        return ret;
                    }
                }
                memcpy(c + p->in, data + ((p->vc << s->cluster_bits) +
                                          p->in - offset), p->len);
            }
            aw->plan = g_steal_pointer(&plan);
            aw->n = n;
            aw->first = first;
            aw->last = last;
            return submit_async(s, aw);
        }
    }
    if (!data) {
        zero = g_malloc0(s->cluster_size);
    }
    cl = g_malloc(s->cluster_size);
    for (uint64_t i = 0; i < n; i++) {
        WritePlan *p = &plan[i];
        const uint8_t *src = data ? data + ((p->vc << s->cluster_bits) +
                                            p->in - offset) : zero;

        if (!p->new_off) {
            ret = sio_write(s, p->loc.e.host_offset + p->in, src, p->len);
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        if (p->zero_rest) {
            /* The rest of the cluster is zeroes on the file already. */
            ret = sio_write(s, p->new_off + p->in, src, p->len);
            if (ret == 0) {
                ret = plan_link(s, p);
            }
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        /* Copy on write of the rest of the cluster. */
        if (p->len < s->cluster_size) {
            ret = read_cluster_part(s, p->vc, &p->loc, 0, s->cluster_size,
                                    cl);
            if (ret < 0) {
                return ret;
            }
        }
        memcpy(cl + p->in, src, p->len);
        ret = sio_write(s, p->new_off, cl, s->cluster_size);
        if (ret < 0) {
            return ret;
        }
        ret = plan_link(s, p);
        if (ret < 0) {
            return ret;
        }
    }
    pending_frees_bound(s);
    return fua ? metadata_flush(s) : 0;
}

/* The host clusters an entry references, to drop after a flush. */
static void drop_entry_ref(BDRVQcow2State *s, const Qcow2L2Entry *e)
{
    switch (e->type) {
    case QCOW2_CLUSTER_NORMAL:
    case QCOW2_CLUSTER_ZERO_ALLOC:
        free_later(s, e->host_offset, s->cluster_size);
        break;
    case QCOW2_CLUSTER_COMPRESSED:
        free_later(s, e->host_offset & ~511ull,
                   e->compressed_size + (e->host_offset & 511));
        break;
    default:
        break;
    }
}

/*
 * Discard (@zeroes false) or write zeroes over whole clusters: the
 * entries change (unallocated, or the zero flag) in the cache, and the
 * clusters they referenced are dropped after the next flush.  Parts of
 * clusters: write-zeroes writes zeroes, discard leaves them.
 * @no_fallback (BDRV_REQ_NO_FALLBACK, NBD's FAST_ZERO): only the entries
 * may change; where zeroes would be written as data (part of a cluster,
 * or version 2 over a backing file) fail with -ENOTSUP before anything
 * changes, so that the caller writes its zeroes its own way.
 */
static int do_zero(BDRVQcow2State *s, uint64_t offset, uint64_t bytes,
                   bool zeroes, bool unmap, bool no_fallback)
{
    uint64_t cs = s->cluster_size;
    uint64_t a = QEMU_ALIGN_UP(offset, cs);
    uint64_t b = (offset + bytes) & ~(cs - 1);
    bool v3 = s->info.h.version >= 3;
    int ret;

    if (zeroes && no_fallback &&
        ((!v3 && s->backing) || offset < a || a >= b || offset + bytes > b)) {
        return -ENOTSUP;
    }
    if (zeroes && !v3 && s->backing) {
        /* No zero flag in version 2: only data hides the backing file. */
        return do_write(s, offset, bytes, NULL, false, NULL);
    }
    if (zeroes && a >= b) {
        return do_write(s, offset, bytes, NULL, false, NULL);
    }
    if (zeroes && offset < a) {
        ret = do_write(s, offset, a - offset, NULL, false, NULL);
        if (ret < 0) {
            return ret;
        }
    }
    if (zeroes && b > a && offset + bytes > b) {
        ret = do_write(s, b, offset + bytes - b, NULL, false, NULL);
        if (ret < 0) {
            return ret;
        }
    }
    ret = first_write(s);
    if (ret < 0) {
        return ret;
    }
    for (uint64_t off = a; off < b; off += cs) {
        uint64_t vc = off >> s->cluster_bits;
        bool use_zero = v3 && (zeroes || s->backing);
        uint64_t entry;
        Qcow2Loc loc;

        ret = lookup(s, vc, &loc);
        if (ret < 0) {
            return ret;
        }
        if (!use_zero && loc.e.type == QCOW2_CLUSTER_UNALLOCATED) {
            continue;
        }
        if (use_zero && loc.e.type == QCOW2_CLUSTER_ZERO_PLAIN) {
            continue;
        }
        if (!loc.l2_offset && !use_zero) {
            continue;
        }
        ret = l2_prepare(s, vc, &loc);
        if (ret < 0) {
            return ret;
        }
        if (use_zero && !unmap && loc.e.type == QCOW2_CLUSTER_NORMAL &&
            loc.e.copied) {
            /* Keep the allocation (write-zeroes without unmap). */
            entry = qcow2_l2_encode_standard(loc.e.host_offset, true, true);
            ret = l2_set(s, &loc, entry);
            if (ret < 0) {
                return ret;
            }
            continue;
        }
        if (use_zero && !unmap && loc.e.type == QCOW2_CLUSTER_ZERO_ALLOC) {
            continue;
        }
        entry = use_zero ? QCOW2_OFLAG_ZERO : 0;
        ret = l2_set(s, &loc, entry);
        if (ret < 0) {
            return ret;
        }
        drop_entry_ref(s, &loc.e);
    }
    pending_frees_bound(s);
    return 0;
}

/*
 * A copy of block-stream: write each cluster of the range only if this
 * image still leaves it to its backing chain.  The metadata thread is
 * where every allocation happens, one after the other, and an allocating
 * write in flight (Qcow2Async) makes us wait (qcow2_async_ok()), so a
 * guest write that reached a cluster after the job read the chain's data
 * has allocated it by now and wins: its cluster is skipped.
 */
static int write_if_unallocated(BDRVQcow2State *s, uint64_t offset,
                                uint64_t bytes, const uint8_t *data)
{
    uint64_t pos = 0;
    int ret;

    while (pos < bytes) {
        uint64_t off = offset + pos;
        uint64_t vc = off >> s->cluster_bits;
        uint32_t in = off & (s->cluster_size - 1);
        uint64_t len = MIN(s->cluster_size - in, bytes - pos);
        Qcow2Loc loc;

        ret = lookup(s, vc, &loc);
        if (ret < 0) {
            return ret;
        }
        if (loc.e.type == QCOW2_CLUSTER_UNALLOCATED) {
            ret = do_write(s, off, len, data + pos, false, NULL);
            if (ret < 0) {
                return ret;
            }
        }
        pos += len;
    }
    return 0;
}

/* Largest write whose data buffer is kept (BDRVQcow2State.wbuf). */
#define WBUF_MAX (1u << 20)

static void complete_bh(void *opaque)
{
    BlockAIOCB *acb = opaque;

    /* Through the engines' common ending: a write a mirror's dirty bitmap
     * tracks is counted down (and its range marked again) there. */
    blk_acb_complete(acb, acb->ret);
}

static void process_req(BDRVQcow2State *s, BlockAIOCB *acb)
{
    AioContext *ctx = (AioContext *)(uintptr_t)acb->engine_priv[0];
    int ret;

    switch (acb->type) {
    case BLK_REQ_READ:
        ret = do_read(s, acb);
        break;
    case BLK_REQ_WRITE: {
        g_autofree uint8_t *big = NULL;
        uint8_t *buf;
        bool fua = acb->flags & BDRV_REQ_FUA;
        Qcow2Async *aw = NULL;

        /* The data is copied out of it (into the cluster buffers) or
         * written before the next request: one buffer is enough. */
        if (acb->bytes <= WBUF_MAX) {
            if (acb->bytes > s->wbuf_cap) {
                g_free(s->wbuf);
                s->wbuf = g_malloc(acb->bytes);
                s->wbuf_cap = acb->bytes;
            }
            buf = s->wbuf;
        } else {
            buf = big = g_malloc(acb->bytes);
        }

        if (acb->flags & BDRV_REQ_IF_UNALLOCATED) {
            iov_to_buf(acb->iov, acb->niov, 0, buf, acb->bytes);
            ret = write_if_unallocated(s, acb->offset, acb->bytes, buf);
            break;
        }
        if (!fua && s->fast_ok) {
            aw = g_new0(Qcow2Async, 1);
            aw->s = s;
            aw->acb = acb;
        }
        iov_to_buf(acb->iov, acb->niov, 0, buf, acb->bytes);
        ret = do_write(s, acb->offset, acb->bytes, buf, fua, aw);
        if (ret == 1) {
            return;     /* in flight: qcow2_async_finish() completes it */
        }
        if (aw) {
            /* Not submitted (or the file could not grow for it). */
            g_free(aw->plan);
            abuf_put(s, aw->buf, aw->buf_cap);
            g_free(aw->iov);
            g_free(aw->cacb);
            g_free(aw);
        }
        break;
    }
    case BLK_REQ_FLUSH:
        ret = metadata_flush(s);
        break;
    case BLK_REQ_DISCARD:
        ret = do_zero(s, acb->offset, acb->bytes, false, true, false);
        break;
    case BLK_REQ_WRITE_ZEROES:
        ret = do_zero(s, acb->offset, acb->bytes, true,
                      acb->flags & BDRV_REQ_MAY_UNMAP,
                      acb->flags & BDRV_REQ_NO_FALLBACK);
        break;
    default:
        ret = -ENOTSUP;
        break;
    }
    acb->ret = ret;
    aio_bh_schedule_oneshot(ctx, complete_bh, acb, "qcow2-complete");
}
/* Block status of the first cluster of the range, extended over the
 * following clusters of the same kind. */
static int do_block_status(BDRVQcow2State *s, BlockAIOCB *acb)
{
    uint64_t bsize = s->backing ? blk_getlength(s->backing) : 0;
    uint64_t pos = 0;
    unsigned int flags = 0;
    int ret;

    while (pos < acb->bytes) {
        uint64_t off = acb->offset + pos;
        uint64_t vc = off >> s->cluster_bits;
        uint32_t in = off & (s->cluster_size - 1);
        uint64_t len = MIN(s->cluster_size - in, acb->bytes - pos);
        unsigned int f;
        Qcow2Loc loc;

        ret = lookup(s, vc, &loc);
        if (ret < 0) {
            return ret;
        }
        switch (loc.e.type) {
        case QCOW2_CLUSTER_NORMAL:
        case QCOW2_CLUSTER_COMPRESSED:
            f = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED;
            break;
        case QCOW2_CLUSTER_ZERO_PLAIN:
        case QCOW2_CLUSTER_ZERO_ALLOC:
            f = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED;
            break;
        default:
            /* Unallocated: the backing file's, or zeroes. */
            if (off >= bsize) {
                f = BDRV_BLOCK_ZERO;
            } else {
                f = 0;
                len = MIN(len, bsize - off);
            }
            break;
        }
        if (pos && f != flags) {
            break;
        }
        flags = f;
        pos += len;
    }
    acb->status->pnum = pos;
    acb->status->flags = flags;
    return 0;
}

/* ---- the metadata thread ---------------------------------------------- */

/*
 * An async write's data is written (or failed): set its L2 entries and
 * complete the guest's request.  Metadata thread, outside aio_poll().
 */
static void qcow2_async_finish(BDRVQcow2State *s, Qcow2Async *aw)
{
    AioContext *ctx = (AioContext *)(uintptr_t)aw->acb->engine_priv[0];
    int ret = aw->ret;

    QLIST_REMOVE(aw, link);
    s->nr_async--;
    /* On a failed write the clusters stay reserved, unreferenced: a
     * leak, as in the synchronous path. */
    for (uint64_t i = 0; ret == 0 && i < aw->n; i++) {
        ret = plan_link(s, &aw->plan[i]);
    }
    if (ret == 0) {
        pending_frees_bound(s);
    }
    aw->acb->ret = ret;
    aio_bh_schedule_oneshot(ctx, complete_bh, aw->acb, "qcow2-complete");
    g_free(aw->plan);
    abuf_put(s, aw->buf, aw->buf_cap);
    g_free(aw->iov);
    g_free(aw->cacb);
    g_free(aw);
}

static void qcow2_async_finish_done(BDRVQcow2State *s)
{
    Qcow2Async *aw;

    while ((aw = QSIMPLEQ_FIRST(&s->async_done))) {
        QSIMPLEQ_REMOVE_HEAD(&s->async_done, done);
        qcow2_async_finish(s, aw);
    }
}

/* Wait until at most @max async writes are in flight, finishing them. */
static void qcow2_async_wait(BDRVQcow2State *s, uint32_t max)
{
    for (;;) {
        qcow2_async_finish_done(s);
        if (s->nr_async <= max) {
            return;
        }
        aio_poll(s->ctx, true);
    }
}

/*
 * May @acb start while async writes are in flight?  A read or a write
 * (not FUA) none of whose guest clusters is one of theirs: it cannot
 * depend on what they have not linked yet.  A flush: it must cover what
 * was acknowledged, and they are not yet (their entries are set, and
 * the guest told, only when their data is written).  Everything else
 * (discards, write-zeroes, FUA writes, ...) waits for them all.
 */
static bool qcow2_async_ok(BDRVQcow2State *s, BlockAIOCB *acb)
{
    uint64_t first, last;
    Qcow2Async *aw;

    if (acb->type == BLK_REQ_FLUSH) {
        return true;
    }
    if ((acb->type != BLK_REQ_WRITE && acb->type != BLK_REQ_READ) ||
        (acb->flags & BDRV_REQ_FUA) || !acb->bytes) {
        return false;
    }
    first = acb->offset >> s->cluster_bits;
    last = (acb->offset + acb->bytes - 1) >> s->cluster_bits;
    QLIST_FOREACH(aw, &s->async, link) {
        if (first <= aw->last && aw->first <= last) {
            return false;
        }
    }
    return true;
}

/*
 * Wait until @acb may start: until no async write it depends on is in
 * flight (only those touching its clusters, for a read or a write; all,
 * for the kinds that depend on every one), and there is room for one
 * more.
 */
static void qcow2_async_wait_for(BDRVQcow2State *s, BlockAIOCB *acb)
{
    for (;;) {
        qcow2_async_finish_done(s);
        if (!s->nr_async ||
            (s->nr_async < MAX_ASYNC && qcow2_async_ok(s, acb))) {
            return;
        }
        aio_poll(s->ctx, true);
    }
}

static gpointer qcow2_thread(gpointer opaque)
{
    BDRVQcow2State *s = opaque;
    int64_t last_clean = g_get_monotonic_time();

    aio_context_acquire_thread(s->ctx);
    g_mutex_lock(&s->lock);
    for (;;) {
        BlockAIOCB *acb = QSIMPLEQ_FIRST(&s->reqs);
        Qcow2Job *job = QSIMPLEQ_FIRST(&s->jobs);

        if (!QSIMPLEQ_EMPTY(&s->async_done)) {
            g_mutex_unlock(&s->lock);
            qcow2_async_finish_done(s);
            g_mutex_lock(&s->lock);
            continue;
        }
        if (job) {
            QSIMPLEQ_REMOVE_HEAD(&s->jobs, next);
            g_mutex_unlock(&s->lock);
            qcow2_async_wait(s, 0);
            job->fn(job->opaque);
            g_mutex_lock(&s->lock);
            job->done = true;
            g_cond_broadcast(&s->cond);
            continue;
        }
        if (acb) {
            uint64_t keys[L2_PREFETCH_MAX * 2];
            uint32_t nk = 0;

            uint64_t key0 = acb->bytes ?
                l2_key_of(s, acb->offset >> s->cluster_bits) : 0;

            QSIMPLEQ_REMOVE_HEAD(&s->reqs, next);
            if (key0 && !l2_cached(s, key0)) {
                /* A miss: load the slices of the queued requests with
                 * it (the queue is only appended to meanwhile). */
                BlockAIOCB *q = acb;

                while (q && nk + 2 <= ARRAY_SIZE(keys)) {
                    if (q->bytes) {
                        uint64_t first = q->offset >> s->cluster_bits;
                        uint64_t last = (q->offset + q->bytes - 1) >>
                                        s->cluster_bits;

                        keys[nk++] = l2_key_of(s, first);
                        if (last != first) {
                            keys[nk++] = l2_key_of(s, last);
                        }
                    }
                    q = q == acb ? QSIMPLEQ_FIRST(&s->reqs)
                                 : QSIMPLEQ_NEXT(q, next);
                }
            }
            g_mutex_unlock(&s->lock);
            if (nk) {
                l2_prefetch(s, keys, nk);
            }
            qcow2_async_wait_for(s, acb);
            if (acb->type == BLK_REQ_BLOCK_STATUS) {
                AioContext *ctx = (AioContext *)(uintptr_t)acb->engine_priv[0];

                acb->ret = do_block_status(s, acb);
                aio_bh_schedule_oneshot(ctx, complete_bh, acb,
                                        "qcow2-complete");
            } else {
                process_req(s, acb);
            }
            g_mutex_lock(&s->lock);
            continue;
        }
        if (s->nr_async) {
            /* Wait for a write or a request (qcow2_submit() notifies). */
            s->polling = true;
            g_mutex_unlock(&s->lock);
            aio_poll(s->ctx, true);
            g_mutex_lock(&s->lock);
            s->polling = false;
            continue;
        }
        if (s->quit) {
            break;
        }
        if (s->cache_clean_interval) {
            int64_t deadline = last_clean +
                               s->cache_clean_interval * G_USEC_PER_SEC;

            if (!g_cond_wait_until(&s->cond, &s->lock, deadline)) {
                /* Idle for the interval: give the caches' memory back. */
                l2_cache_clean(s);
                last_clean = g_get_monotonic_time();
            }
        } else {
            g_cond_wait(&s->cond, &s->lock);
        }
    }
    g_mutex_unlock(&s->lock);
    /* Nothing in flight: let the children's engines go with the loop. */
    while (aio_poll(s->ctx, false)) {
    }
    aio_context_free(s->ctx);
    s->ctx = NULL;
    return NULL;
}

/* Main thread: run @fn in the metadata thread and wait for it. */
static void run_job(BDRVQcow2State *s, void (*fn)(void *), void *opaque)
{
    Qcow2Job job = { .fn = fn, .opaque = opaque };

    g_mutex_lock(&s->lock);
    QSIMPLEQ_INSERT_TAIL(&s->jobs, &job, next);
    g_cond_broadcast(&s->cond);
    if (s->polling) {
        aio_notify(s->ctx);
    }
    while (!job.done) {
        g_cond_wait(&s->cond, &s->lock);
    }
    g_mutex_unlock(&s->lock);
}

/* ---- the fast path (iothreads, no lock) ------------------------------ */

#define FAST_IOV  16            /* iovecs per child request of a split */
#define FAST_RUNS 8             /* child requests per guest request */

typedef struct Qcow2IovBlock {
    struct iovec iov[FAST_IOV];
    struct Qcow2IovBlock *next;
} Qcow2IovBlock;

/* Per AioContext: iovec arrays for the child requests of a split
 * request, grown by a chunk when empty (so after the first requests none
 * allocates), freed with the context. */
typedef struct Qcow2CtxPool {
    Qcow2IovBlock *free;
    GPtrArray *chunks;
} Qcow2CtxPool;

static AioLocalKey qcow2_pool_key;

static void qcow2_pool_free(void *opaque)
{
    Qcow2CtxPool *p = opaque;

    g_ptr_array_free(p->chunks, true);
    g_free(p);
}

static Qcow2IovBlock *iovb_get(AioContext *ctx)
{
    Qcow2CtxPool *p = aio_local_get(ctx, &qcow2_pool_key);
    Qcow2IovBlock *b;

    if (!p) {
        p = g_new0(Qcow2CtxPool, 1);
        p->chunks = g_ptr_array_new_with_free_func(g_free);
        aio_local_set(ctx, &qcow2_pool_key, p, qcow2_pool_free);
    }
    if (!p->free) {
        Qcow2IovBlock *chunk = g_new0(Qcow2IovBlock, 32);

        g_ptr_array_add(p->chunks, chunk);
        for (int i = 0; i < 32; i++) {
            chunk[i].next = p->free;
            p->free = &chunk[i];
        }
    }
    b = p->free;
    p->free = b->next;
    return b;
}

static void iovb_put(AioContext *ctx, Qcow2IovBlock *b)
{
    Qcow2CtxPool *p = aio_local_get(ctx, &qcow2_pool_key);

    b->next = p->free;
    p->free = b;
}

/* The parent's state in its control block (which no engine uses while
 * the request is ours): engine_priv [0] the submitting context (slow
 * path), [1] child requests pending, [2] the first error; filter_priv
 * the counter it holds a reference in (fast path: see reuse_poll()),
 * where it stays when the control block itself goes down to the file
 * (qcow2_fast_direct()). */
static void fast_put(BlockAIOCB *acb)
{
    __atomic_fetch_sub((uint64_t *)acb->filter_priv, 1, __ATOMIC_RELEASE);
}

static void fast_cb(void *opaque, int ret)
{
    BlockChildReq *cr = opaque;
    BlockAIOCB *parent = cr->parent;
    AioContext *ctx = qemu_get_current_aio_context();

    if (cr->priv[0]) {
        iovb_put(ctx, (Qcow2IovBlock *)(uintptr_t)cr->priv[0]);
    }
    blk_child_req_put(ctx, cr);
    if (ret < 0 && !parent->engine_priv[2]) {
        parent->engine_priv[2] = (uint64_t)(int64_t)ret;
    }
    if (--parent->engine_priv[1] == 0) {
        /* The host clusters are no longer used: they may be reused. */
        fast_put(parent);
        blk_acb_complete(parent, (int)(int64_t)parent->engine_priv[2]);
    }
}

/*
 * A fast request of one run of the file (qcow2_fast_direct()) is done:
 * the guest's own control block, passed down to the file node, comes
 * back here.  Its bounce buffer (if any) is gone already.
 */
static void fast_direct_cb(void *opaque, int ret)
{
    BlockAIOCB *acb = opaque;
    BlockCompletionFunc *cb = acb->filter_cb;

    /* The host cluster is no longer used: it may be reused. */
    __atomic_fetch_sub((uint64_t *)acb->filter_priv, 1, __ATOMIC_RELEASE);
    /* No flag (so no dirty tracking) and no bounce buffer of ours:
     * blk_acb_complete() would only call the callback.  acb->cb and
     * acb->opaque are not put back: the control block is the caller's
     * again once its callback runs, and every submission sets them
     * (blk_submit()), as it sets the node and the offset we changed. */
    cb(acb->filter_opaque, ret);
}

/*
 * The whole of @acb is the file's [at, at + acb->bytes): give @acb itself
 * to the file node's driver, as a filter does, instead of a child
 * request of its own through the block layer (a second blk_submit(), a
 * control block from the pool and back, a second completion).  So this
 * does here what blk_submit() would check for the file node: the range
 * within the file (a write past its end would grow it) and aligned to
 * its requests, writes only when it is writable and has no dirty bitmap
 * to mark.  False (nothing done) when one of them does not hold: the
 * caller takes the child request then, which reports what is wrong.
 * Two of them the request has passed already, and are not made again:
 * a read has no flag (blk_submit() gives reads none), and with @aligned
 * the caller knows @at aligned: the guest offset and length are
 * multiples of this node's request alignment (blk_submit() checked
 * them; the filters that pass requests on unchecked, throttle and
 * blkdebug, have their child's), which qcow2_open() made a multiple of
 * the file's, and @at is a data cluster's offset (aligned to the
 * cluster, fast_l2_bad) plus the guest offset's within its cluster,
 * with a cluster a multiple of the file's alignment (fast_ok).
 */
static inline __attribute__((always_inline))
bool qcow2_direct_ok(BDRVQcow2State *s, const BlockAIOCB *acb, uint64_t at,
                     bool write, bool aligned)
{
    BlockBackend *file = s->file;
    /* blk_getlength() without the call (blk_truncate() stores it). */
    uint64_t flen = __atomic_load_n(&file->size, __ATOMIC_RELAXED);

    /* request_alignment is a power of two, at least 1 (blk_submit()).
     * @at is below 2^57 (a cluster under QCOW2_OFFSET_MASK plus less
     * than a cluster) and acb->bytes below 2^63
     * (the virtual size's limit): the sum does not wrap. */
    if ((write && acb->flags) ||
        at + acb->bytes > flen ||
        (!aligned &&
         ((at | acb->bytes) & (file->bl.request_alignment - 1)))) {
        return false;
    }
    return !write ||
           (!file->readonly &&
            !__atomic_load_n(&file->dirty_bitmaps, __ATOMIC_ACQUIRE));
}

G_STATIC_ASSERT(offsetof(BlockAIOCB, opaque) ==
                offsetof(BlockAIOCB, cb) + sizeof(void *));
G_STATIC_ASSERT(offsetof(BlockAIOCB, filter_opaque) ==
                offsetof(BlockAIOCB, filter_cb) + sizeof(void *));

/* qcow2_direct_ok() held: submit.  Last in its callers, so that the
 * driver's submission is a tail call. */
static inline __attribute__((always_inline))
void qcow2_direct_go(BDRVQcow2State *s, AioContext *ctx, BlockAIOCB *acb,
                     uint64_t at, bool write)
{
    BlockBackend *file = s->file;

    /* The callback and its opaque saved as one 16-byte copy: a load and
     * a store, not two of each (the pairs are adjacent: the assertions
     * above). */
    memcpy(&acb->filter_cb, &acb->cb, 2 * sizeof(void *));
    acb->cb = fast_direct_cb;
    acb->opaque = acb;
    /* Two plain stores: without this, GCC packs this one and the one
     * before into an SSE register first (four instructions for two). */
    __asm__ volatile("" ::: "memory");
    acb->blk = file;
    acb->offset = at;
    if (write) {
        s->file_pwritev(file, ctx, acb);
    } else {
        s->file_preadv(file, ctx, acb);
    }
}

#define L1_RESERVED (~(QCOW2_OFFSET_MASK | QCOW2_OFLAG_COPIED))
#define L2_RESERVED (~(QCOW2_OFFSET_MASK | QCOW2_OFLAG_COPIED | \
                       QCOW2_OFLAG_COMPRESSED | QCOW2_OFLAG_ZERO))

/* What one run of a fast request is. */
enum {
    RUN_FILE,                   /* data clusters: the file at run_at */
    RUN_BACKING,                /* unallocated: the backing node, same offset */
    RUN_ZERO,                   /* zero clusters, or past the backing's end */
};

/* The slice [pos, pos + len) of @acb's buffers into @b; false if it
 * needs more than FAST_IOV iovecs. */
static int iov_slice(const BlockAIOCB *acb, uint64_t pos, uint64_t len,
                     struct iovec *out)
{
    int n = 0;

    for (int i = 0; i < acb->niov && len; i++) {
        size_t l = acb->iov[i].iov_len;

        if (pos >= l) {
            pos -= l;
            continue;
        }
        if (n == FAST_IOV) {
            return -1;
        }
        out[n].iov_base = (uint8_t *)acb->iov[i].iov_base + pos;
        out[n].iov_len = MIN(l - pos, len);
        len -= out[n].iov_len;
        pos = 0;
        n++;
    }
    return n;
}

/*
 * Owner thread of @ctx: a read (of data, zero and unallocated clusters),
 * or a write over clusters that are ours alone (COPIED in L1 and L2),
 * whose L2 entries are cached, mapped onto at most FAST_RUNS runs: child
 * requests of the file or the backing node, and zeroes filled here; no
 * lock, no allocation.  False (nothing submitted) when anything else is
 * needed: the metadata thread does the request then.  Anything unusual
 * in an entry goes there too, which reports it.  qcow2_submit_runs() checked
 * the request's flags; @l1 is the L1 table it loaded.
 */
static bool __attribute__((noinline))
qcow2_fast_runs(BDRVQcow2State *s, AioContext *ctx, BlockAIOCB *acb,
                const Qcow2L1Pub *l1)
{
    bool write = acb->type == BLK_REQ_WRITE;
    uint64_t run_at[FAST_RUNS], run_len[FAST_RUNS], run_pos[FAST_RUNS];
    int run_kind[FAST_RUNS];
    uint32_t fa = MAX(s->file->bl.request_alignment, 1);
    uint64_t bsize = s->backing ? blk_getlength(s->backing) : 0;
    uint64_t pos = 0;
    int nruns = 0, nio = 0;

    while (pos < acb->bytes) {
        uint64_t off = acb->offset + pos;
        uint64_t vc = off >> s->cluster_bits;
        uint32_t in = off & (s->cluster_size - 1);
        uint64_t len = MIN(s->cluster_size - in, acb->bytes - pos);
        uint64_t l1i = vc >> s->info.l2_bits;
        uint32_t idx = vc & (s->info.l2_entries - 1);
        uint64_t l1e, raw = 0, at = off;
        int kind;

        if (l1i >= l1->size) {
            return false;
        }
        l1e = __atomic_load_n(&l1->e[l1i], __ATOMIC_ACQUIRE);
        /* (L1_FAST_BAD is a reserved bit) */
        if ((l1e & L1_RESERVED) ||
            (write && !(l1e & QCOW2_OFLAG_COPIED))) {
            return false;
        }
        if ((l1e & QCOW2_OFFSET_MASK) &&
            !l2_fast_entry(s, l2_slice_key(s, l1e & QCOW2_OFFSET_MASK, idx),
                           (idx & (s->slice_entries - 1)) * 8, &raw)) {
            return false;
        }
        if (raw & (L2_RESERVED | QCOW2_OFLAG_COMPRESSED)) {
            return false;
        }
        if (raw & QCOW2_OFLAG_ZERO) {
            kind = RUN_ZERO;
        } else if (raw & QCOW2_OFFSET_MASK) {
            at = raw & QCOW2_OFFSET_MASK;
            if (at & (s->cluster_size - 1)) {
                return false;
            }
            at += in;
            kind = RUN_FILE;
        } else if (raw & QCOW2_OFLAG_COPIED) {
            return false;       /* offset 0 with COPIED: corrupt */
        } else {
            kind = off < bsize ? RUN_BACKING : RUN_ZERO;
            if (kind == RUN_BACKING && len > bsize - off) {
                len = bsize - off;      /* the rest: past its end */
            }
        }
        if (write && (kind != RUN_FILE || !(raw & QCOW2_OFLAG_COPIED))) {
            return false;
        }
        if (nruns && run_kind[nruns - 1] == kind &&
            (kind == RUN_ZERO ||
             run_at[nruns - 1] + run_len[nruns - 1] == at)) {
            run_len[nruns - 1] += len;
        } else {
            if (nruns == FAST_RUNS) {
                return false;
            }
            run_kind[nruns] = kind;
            run_at[nruns] = at;
            run_len[nruns] = len;
            run_pos[nruns] = pos;
            nruns++;
        }
        pos += len;
    }
    for (int i = 0; i < nruns; i++) {
        if (run_kind[i] == RUN_FILE && ((run_at[i] | run_len[i]) & (fa - 1))) {
            return false;
        }
        nio += run_kind[i] != RUN_ZERO;
    }
    if (nruns > 1 && acb->niov > FAST_IOV) {
        return false;
    }
    /* Committed: nothing below fails back to the slow path. */
    for (int i = 0; i < nruns; i++) {
        if (run_kind[i] == RUN_ZERO) {
            iov_memset(acb->iov, acb->niov, run_pos[i], 0, run_len[i]);
        }
    }
    if (!nio) {
        fast_put(acb);
        blk_complete_later(ctx, acb, 0);
        return true;
    }
    if (nruns == 1 && run_kind[0] == RUN_FILE &&
        qcow2_direct_ok(s, acb, run_at[0], write, false)) {
        qcow2_direct_go(s, ctx, acb, run_at[0], write);
        return true;
    }
    acb->engine_priv[1] = nio;
    acb->engine_priv[2] = 0;
    for (int i = 0; i < nruns; i++) {
        BlockChildReq *cr;
        struct iovec *iov = acb->iov;
        int niov = acb->niov;
        BlockBackend *child = run_kind[i] == RUN_FILE ? s->file : s->backing;

        if (run_kind[i] == RUN_ZERO) {
            continue;
        }
        cr = blk_child_req_get(ctx);
        cr->parent = acb;
        cr->priv[0] = 0;
        if (nruns > 1) {
            /* This run's slice of the guest's buffers. */
            Qcow2IovBlock *b = iovb_get(ctx);

            niov = iov_slice(acb, run_pos[i], run_len[i], b->iov);
            assert(niov > 0);   /* niov <= FAST_IOV was checked */
            cr->priv[0] = (uintptr_t)b;
            iov = b->iov;
        }
        if (write) {
            blk_aio_pwritev_sized(child, &cr->acb, run_at[i], run_len[i],
                                  iov, niov, acb->flags & BDRV_REQ_FUA,
                                  fast_cb, cr);
        } else {
            blk_aio_preadv_sized(child, &cr->acb, run_at[i], run_len[i],
                                 iov, niov, fast_cb, cr);
        }
    }
    return true;
}

/* Any thread: the metadata thread does @acb. */
static void __attribute__((noinline))
qcow2_submit_slow(BDRVQcow2State *s, AioContext *ctx, BlockAIOCB *acb)
{
    acb->engine_priv[0] = (uintptr_t)ctx;
    __atomic_add_fetch(&s->slow_requests, 1, __ATOMIC_RELAXED);
    g_mutex_lock(&s->lock);
    QSIMPLEQ_INSERT_TAIL(&s->reqs, acb, next);
    g_cond_broadcast(&s->cond);
    if (s->polling) {
        aio_notify(s->ctx);
    }
    g_mutex_unlock(&s->lock);
}

/* Owner thread of @ctx: a counted fast request the shortcut of
 * qcow2_submit() did not take: qcow2_fast_runs(), or (not counted any
 * more) the metadata thread. */
static void __attribute__((noinline))
qcow2_submit_runs(BDRVQcow2State *s, AioContext *ctx, BlockAIOCB *acb)
{
    /*
     * FUA promises the write durable with its mapping, which may still
     * be a dirty L2 slice: the metadata thread writes it (and flushes).
     */
    if (s->fast_ok &&
        !(acb->type == BLK_REQ_WRITE &&
          ((acb->flags & BDRV_REQ_FUA) ||
           __atomic_load_n(&s->autoclear_pending, __ATOMIC_ACQUIRE))) &&
        qcow2_fast_runs(s, ctx, acb,
                        __atomic_load_n(&s->l1pub, __ATOMIC_ACQUIRE))) {
        return;
    }
    fast_put(acb);
    qcow2_submit_slow(s, ctx, acb);
}

/*
 * Owner thread of @ctx: a read (@write false), or a write that is not
 * conditional (which decides on the L2 entries where allocations are
 * serialised): counted (see reuse_poll()), then the common case here, a
 * request within one cluster mapped to a data cluster of the file (for
 * a write, one of ours alone), handed to the file node's driver;
 * anything else goes to qcow2_submit_runs(), which looks at the entries
 * again.  Inlined once for reads and once for writes (a read has none of
 * the write's checks), and written to need no frame of its own: the
 * driver's submission is a tail call.
 */
static inline __attribute__((always_inline))
void qcow2_submit_fast(BDRVQcow2State *s, AioContext *ctx, BlockAIOCB *acb,
                       const bool write)
{
    uint64_t *cur = __atomic_load_n(&s->fast_cur, __ATOMIC_ACQUIRE);
    uint32_t slot = qcow2_thread_slot;
    uint64_t *refs;
    const Qcow2L1Pub *l1;
    uint64_t off, in, l1i, tb, l1e, at, raw, byte;

    if (unlikely(!slot)) {
        slot = __atomic_fetch_add(&qcow2_next_slot, 1, __ATOMIC_RELAXED) %
               FAST_SLOTS * sizeof(Qcow2FastSlot) + 1;
        qcow2_thread_slot = slot;
    }
    /* (64-bit: the - 1 folds into the address computation) */
    refs = (uint64_t *)((uint8_t *)cur + ((uintptr_t)slot - 1));
    /* Counted before any entry is looked at (see reuse_poll()). */
    acb->filter_priv = refs;
    __atomic_fetch_add(refs, 1, __ATOMIC_SEQ_CST);
    fast_fence_after_rmw();

    l1 = __atomic_load_n(&s->l1pub, __ATOMIC_ACQUIRE);
    off = acb->offset;
    in = off & s->fast_cmask;
    l1i = off >> s->fast_l1_shift;
    /* 1 <= bytes <= cluster_size - in (0 - 1 wraps: no shortcut). */
    if (acb->bytes - 1 > s->fast_cmask - in ||
        l1i >= l1->size ||
        (write && ((acb->flags & BDRV_REQ_FUA) ||
                   __atomic_load_n(&s->autoclear_pending,
                                   __ATOMIC_ACQUIRE)))) {
        goto other;
    }
    /* (A checked entry: Qcow2L1Pub) */
    l1e = __atomic_load_n(&l1->e[l1i], __ATOMIC_ACQUIRE);
    at = l1e & QCOW2_OFFSET_MASK;
    if (!at || (write && !(l1e & QCOW2_OFLAG_COPIED))) {
        goto other;
    }
    tb = off >> s->fast_tbl_shift;
    byte = tb & s->fast_slice_mask;
    /* The entry's byte in its slice now: then tb and the mask are not
     * both live over the set's search, which needs no stack frame. */
    __asm__("" : "+r"(byte));
    if (!l2_fast_entry(s, at + (tb & s->fast_key_mask), byte, &raw) ||
        (raw & s->fast_l2_bad) || (write && !(raw & QCOW2_OFLAG_COPIED))) {
        goto other;
    }
    at = raw & QCOW2_OFFSET_MASK;
    if (!at) {
        goto other;
    }
    /* The offset in the cluster again, not kept from above: one register
     * fewer over the L2 probe, which then needs no stack frame. */
    at += acb->offset & s->fast_cmask;
    if (!qcow2_direct_ok(s, acb, at, write, true)) {
        goto other;
    }
    qcow2_direct_go(s, ctx, acb, at, write);
    return;

other:
    qcow2_submit_runs(s, ctx, acb);
}

/* Owner thread of @ctx: every request type. */
static void qcow2_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BDRVQcow2State *s = bs->opaque;

    if (acb->type == BLK_REQ_READ) {
        qcow2_submit_fast(s, ctx, acb, false);
    } else if (acb->type == BLK_REQ_WRITE &&
               !(acb->flags & BDRV_REQ_IF_UNALLOCATED)) {
        qcow2_submit_fast(s, ctx, acb, true);
    } else {
        qcow2_submit_slow(s, ctx, acb);
    }
}

/* ---- open ------------------------------------------------------------- */

static void open_fail(BDRVQcow2State *s, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);

static void open_fail(BDRVQcow2State *s, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    qcow2_set_error(&s->open_err, "%s", msg);
}

static bool read_table(BDRVQcow2State *s, uint64_t off, uint64_t bytes,
                       uint64_t *out, const char *what)
{
    uint64_t fsize = blk_getlength(s->file);
    uint64_t len = MIN(QEMU_ALIGN_UP(bytes, s->file->bl.request_alignment),
                       fsize - off);
    g_autofree uint8_t *buf = g_malloc0(MAX(len, bytes));
    int ret = sio_read(s, s->file, off, buf, len);

    if (ret < 0) {
        open_fail(s, "%s: cannot read the %s: %s", s->filename, what,
                  g_strerror(-ret));
        return false;
    }
    for (uint64_t i = 0; i < bytes / 8; i++) {
        out[i] = qcow2_ld_be64(buf + i * 8);
    }
    return true;
}

/* Metadata thread: read and check the header, L1 and refcount tables. */
static void open_job(void *opaque)
{
    BDRVQcow2State *s = opaque;
    const BlockQcow2Options *o = s->open_opts;
    uint64_t fsize = blk_getlength(s->file);
    uint32_t ra = MAX(s->file->bl.request_alignment, 1);
    size_t hlen = qcow2_header_bytes(fsize);
    size_t rlen = hlen & ~(size_t)(ra - 1);
    g_autofree uint8_t *buf = NULL;
    const char *unsup;
    int ret;

    /*
     * Direct I/O reads whole blocks, and a request may not pass the end
     * of the file: a file whose size is not a multiple of the block
     * (qemu-img leaves the L1 table's 8 bytes last) has a tail we could
     * not read.  Extend it to the next block; qcow2 ignores what follows
     * the last cluster in use.
     */
    if (fsize % ra) {
        if (!s->writable) {
            open_fail(s, "%s: the file's size (%" PRIu64 " bytes) is not a "
                      "multiple of the direct I/O block size (%u bytes), so "
                      "its end cannot be read read-only with direct I/O: "
                      "open it with cache.direct=off (--export cache="
                      "writeback), or writable once", s->filename, fsize,
                      ra);
            return;
        }
        if (!blk_truncate(s->file, QEMU_ALIGN_UP(fsize, ra), &s->open_err)) {
            return;
        }
        fsize = blk_getlength(s->file);
        hlen = qcow2_header_bytes(fsize);
        rlen = hlen & ~(size_t)(ra - 1);
    }
    buf = g_malloc0(MAX(hlen, 512));
    ret = sio_read(s, s->file, 0, buf, rlen ? rlen : hlen);
    if (ret < 0) {
        open_fail(s, "%s: cannot read the qcow2 header: %s", s->filename,
                  g_strerror(-ret));
        return;
    }
    if (!qcow2_parse_header(buf, hlen, fsize, 0, &s->info, &s->open_err)) {
        g_prefix_error(&s->open_err, "%s: ", s->filename);
        return;
    }
    unsup = qcow2_unsupported_feature(&s->info);
    if (unsup) {
        open_fail(s, "%s: %s", s->filename, unsup);
        return;
    }
    if (s->info.corrupt) {
        open_fail(s, "%s: the image is marked corrupt (a program found its "
                  "metadata inconsistent): run 'qemu-img check -r all %s' "
                  "and open it again", s->filename, s->filename);
        return;
    }
    if (s->info.dirty) {
        open_fail(s, "%s: the image was not closed cleanly and uses lazy "
                  "refcounts, whose refcounts must be rebuilt first: run "
                  "'qemu-img check -r all %s' and open it again",
                  s->filename, s->filename);
        return;
    }
    s->cluster_bits = s->info.h.cluster_bits;
    s->cluster_size = s->info.cluster_size;
    s->align = MIN(MAX(ra, 512u), s->cluster_size);
    s->hdr_len = MIN(QEMU_ALIGN_UP(MAX(s->info.h.header_length, 104u),
                                   s->align), s->cluster_size);
    s->hdr = g_malloc0(s->hdr_len);
    memcpy(s->hdr, buf, MIN(s->hdr_len, hlen));
    s->hdr_disk = g_memdup2(s->hdr, s->hdr_len);
    if (s->info.h.l1_size < s->info.l1_needed) {
        open_fail(s, "%s: the L1 table (%u entries) is too small for the "
                  "virtual size: the image is corrupt", s->filename,
                  s->info.h.l1_size);
        return;
    }
    if (!qcow2_check_l1_table(&s->info, s->info.h.l1_table_offset,
                              s->info.h.l1_size, "L1 table",
                              &s->open_err)) {
        g_prefix_error(&s->open_err, "%s: ", s->filename);
        return;
    }
    s->l1_size = s->info.h.l1_size;
    s->l1_offset = s->info.h.l1_table_offset;
    s->l1 = g_new0(uint64_t, MAX(s->l1_size, 1));
    if (s->l1_size &&
        !read_table(s, s->l1_offset, (uint64_t)s->l1_size * 8, s->l1,
                    "L1 table")) {
        return;
    }
    s->rt_offset = s->info.h.refcount_table_offset;
    s->rt_entries = (uint64_t)s->info.h.refcount_table_clusters *
                    s->cluster_size / 8;
    s->rt = g_new0(uint64_t, MAX(s->rt_entries, 1));
    if (!read_table(s, s->rt_offset, s->rt_entries * 8, s->rt,
                    "refcount table")) {
        return;
    }
    for (uint64_t i = 0; i < s->rt_entries; i++) {
        const char *why;
        uint64_t b;

        if (qcow2_reftable_decode(&s->info, s->rt[i], &b, &why) < 0) {
            open_fail(s, "%s: refcount table entry %" PRIu64 ": %s: run "
                      "'qemu-img check -r all %s'", s->filename, i, why,
                      s->filename);
            return;
        }
        s->rt[i] = b;
    }
    s->end = (((fsize) + (s->cluster_size) - 1) / (s->cluster_size));
    s->zero_from = fsize;
    s->dec = qcow2_decompressor_new(s->info.h.compression_type,
                                    &s->open_err);
    if (!s->dec) {
        return;
    }
    s->cbuf = g_malloc(s->cluster_size + 2 * 4096);

    /* The L2 cache. */
    s->slice_size = o && o->l2_cache_entry_size ?
                    o->l2_cache_entry_size : MIN(s->cluster_size, 4096u);
    if (s->slice_size > s->cluster_size) {
        s->slice_size = s->cluster_size;
    }
    s->slice_size = MAX(s->slice_size, s->align);
    s->slice_entries = s->slice_size / 8;
    /* l2_slice_key() masks: the option, the cluster size and the
     * file's alignment are powers of two. */
    if (s->slice_entries & (s->slice_entries - 1)) {
        open_fail(s, "%s: L2 cache entry size %" PRIu32 " is not a power "
                  "of two (the file's request alignment is %" PRIu32 "): "
                  "set l2-cache-entry-size", s->filename, s->slice_size, ra);
        return;
    }
    {
        uint64_t size = o && o->l2_cache_size ? o->l2_cache_size :
                        QCOW2_DEFAULT_L2_CACHE_SIZE;

        s->nb_sets = MAX(size / s->slice_size / L2_WAYS, 1);
        s->nb_sets = MIN(s->nb_sets, (1u << 20) / L2_WAYS);
        s->nb_slots = s->nb_sets * L2_WAYS;
        s->set_scale = (uint64_t)s->nb_sets * L2_SET_BYTES;
    }
    s->l1pub = g_new0(Qcow2L1Pub, 1);
    s->l1pub->size = s->l1_size;
    s->l1pub->e = g_new0(uint64_t, MAX(s->l1_size, 1));
    for (uint32_t i = 0; i < s->l1_size; i++) {
        s->l1pub->e[i] = l1_fast_entry(s, s->l1[i]);
    }
    s->fast_ok = s->cluster_size >= ra;
    s->fast_cmask = s->cluster_size - 1;
    s->fast_l1_shift = s->cluster_bits + s->info.l2_bits;
    s->fast_tbl_shift = s->cluster_bits - 3;    /* 8-byte entries */
    s->fast_tbl_mask = (uint64_t)(s->info.l2_entries - 1) << 3;
    s->fast_slice_mask = (uint64_t)(s->slice_entries - 1) << 3;
    s->fast_key_mask = s->fast_tbl_mask & ~s->fast_slice_mask;
    /* Without fast_ok every entry is: qcow2_submit_runs() checks it. */
    s->fast_l2_bad = !s->fast_ok ? ~(uint64_t)0 :
                     L2_RESERVED | QCOW2_OFLAG_COMPRESSED | QCOW2_OFLAG_ZERO |
                     (s->fast_cmask & QCOW2_OFFSET_MASK);
    /* A batch of data clusters: 4 MiB, 1 to 512 clusters. */
    s->res_max = MIN(MAX((4u << 20) / s->cluster_size, 1u), 512u);
    s->reserve = g_new0(int64_t, s->res_max);
    /* Version 2 has no autoclear field (the parser leaves it 0). */
    s->autoclear_pending = s->info.h.autoclear_features != 0;
    /* One mapping for every slot's data: each slice aligned to its size
     * (so a direct-I/O load needs no bounce buffer), and the pages of
     * emptied slots can be given back (l2_cache_clean()).  Untouched
     * pages cost no memory. */
    s->slot_mem_len = (size_t)s->nb_slots * s->slice_size;
    s->slot_mem = mmap(NULL, s->slot_mem_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->slot_mem == MAP_FAILED) {
        s->slot_mem = NULL;
        open_fail(s, "%s: cannot allocate the L2 cache (%zu bytes): %s; "
                  "set a smaller l2-cache-size", s->filename,
                  s->slot_mem_len, strerror(errno));
        return;
    }
    s->slots = g_new0(Qcow2L2Slot, s->nb_slots);
    for (uint32_t i = 0; i < s->nb_slots; i++) {
        s->slots[i].data = s->slot_mem + (size_t)i * s->slice_size;
    }
    {
        uint64_t size = o && o->refcount_cache_size ?
                        o->refcount_cache_size : QCOW2_DEFAULT_RC_CACHE_SIZE;

        s->rc_max = MAX(size / s->cluster_size, 4);
        s->rc_max = MIN(s->rc_max, 65536u);
    }
}

/* Metadata thread: tables the close must not see half-used. */
static void close_job(void *opaque)
{
    BDRVQcow2State *s = opaque;

    if (s->writable && s->file) {
        /* As a guest flush; then the clusters freed by it and the
         * unused reserve go back (a failure only leaks them). */
        metadata_flush(s);
        release_reserve(s);
        rc_write_dirty(s);
        sio_flush(s);
    }
}

static void qcow2_close(BlockBackend *bs)
{
    BDRVQcow2State *s = bs->opaque;

    if (!s) {
        return;
    }
    if (s->thread) {
        if (s->info.cluster_size) {
            run_job(s, close_job, s);
        }
        g_mutex_lock(&s->lock);
        s->quit = true;
        g_cond_broadcast(&s->cond);
        g_mutex_unlock(&s->lock);
        g_thread_join(s->thread);
    } else if (s->ctx) {
        aio_context_free(s->ctx);
    }
    {
        BdrvChild *c = bdrv_find_child(bs, "backing");

        if (c) {
            bdrv_detach_child(c);
        }
    }
    if (s->own_backing) {
        blk_close(s->backing);
        blk_close(s->backing_file);
    }
    if (s->retired) {
        g_ptr_array_free(s->retired, true);
    }
    if (s->l1pub) {
        g_free(s->l1pub->e);
    }
    g_free(s->l1pub);
    if (s->slot_mem) {
        munmap(s->slot_mem, s->slot_mem_len);
    }
    g_free(s->slots);
    if (s->rc_cache) {
        g_hash_table_destroy(s->rc_cache);
    }
    if (s->pending_frees) {
        g_array_free(s->pending_frees, true);
    }
    if (s->quarantine) {
        g_array_free(s->quarantine, true);
    }
    for (uint32_t i = 0; i < s->nr_abuf; i++) {
        free(s->abuf[i]);
    }
    g_free(s->wbuf);
    if (s->grace) {
        g_array_free(s->grace, true);
    }
    free(s->fast);
    qcow2_decompressor_free(s->dec);
    qcow2_info_free(&s->info);
    g_free(s->cbuf);
    g_free(s->hdr);
    g_free(s->hdr_disk);
    g_free(s->l1);
    g_free(s->rt);
    g_free(s->filename);
    g_free(s->full_backing);
    g_free(s->format_specific);
    g_free(s->reserve);
    g_mutex_clear(&s->lock);
    g_cond_clear(&s->cond);
    g_clear_error(&s->open_err);
    g_free(s);
    bs->opaque = NULL;
}

/* Main thread: the header's backing file, opened read-only. */
static bool open_backing(BlockBackend *bs, BDRVQcow2State *s,
                         const BlockOptions *opts,
                         const BlockQcow2Options *o, GError **errp)
{
    const char *fmt = opts->backing_driver ? opts->backing_driver :
                      s->info.backing_format;
    unsigned int depth = o ? o->depth : 0;
    g_autofree char *path = NULL;
    BlockOptions fo, qo;
    BlockFileOptions ffo;
    BlockQcow2Options bo = { 0 };

    if (opts->no_backing) {
        return true;
    }
    if (opts->backing) {
        s->backing = opts->backing;
    } else if (s->info.backing_file) {
        if (!fmt) {
            qcow2_set_error(errp, "%s has the backing file '%s' but does not "
                            "say its format, and vhost-blkd does not guess "
                            "it: give backing.driver=qcow2 or raw, or record "
                            "the format with 'qemu-img rebase -u -F FMT -b "
                            "%s %s'", s->filename, s->info.backing_file,
                            s->info.backing_file, s->filename);
            return false;
        }
        if (strcmp(fmt, "qcow2") && strcmp(fmt, "raw")) {
            qcow2_set_error(errp, "%s: backing file '%s' has the format "
                            "'%s': only qcow2 and raw backing files are "
                            "supported", s->filename, s->info.backing_file,
                            fmt);
            return false;
        }
        if (depth + 1 >= QCOW2_MAX_BACKING_DEPTH) {
            qcow2_set_error(errp, "%s: the backing chain is deeper than %u "
                            "images (or loops back on itself)", s->filename,
                            QCOW2_MAX_BACKING_DEPTH);
            return false;
        }
        if (g_path_is_absolute(s->info.backing_file)) {
            path = g_strdup(s->info.backing_file);
        } else {
            g_autofree char *dir = g_path_get_dirname(s->filename);

            path = g_build_filename(dir, s->info.backing_file, NULL);
        }
        s->full_backing = g_strdup(path);
        blk_options_init(&fo);
        blk_file_options(&fo, &ffo, path);
        fo.readonly = true;
        fo.cache_direct = false;
        s->backing_file = blk_open(&fo, errp);
        if (!s->backing_file) {
            g_prefix_error(errp, "%s: backing file: ", s->filename);
            return false;
        }
        s->own_backing = true;
        if (!strcmp(fmt, "raw")) {
            s->backing = s->backing_file;
            s->backing_file = NULL;
        } else {
            blk_options_init(&qo);
            qo.driver = "qcow2";
            qo.readonly = true;
            qo.file = s->backing_file;
            bo.depth = depth + 1;
            qo.driver_opts = &bo;
            s->backing = blk_open(&qo, errp);
            if (!s->backing) {
                return false;
            }
        }
    }
    if (s->backing &&
        !bdrv_attach_child(bs, s->backing, "backing",
                           BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL, errp)) {
        return false;
    }
    return true;
}

/* Main thread. */
static bool qcow2_open(BlockBackend *bs, const BlockOptions *opts,
                       GError **errp)
{
    const BlockQcow2Options *o = opts->driver_opts;
    BDRVQcow2State *s;
    uint64_t perm;

    if (!opts->file) {
        g_set_error(errp, VB_ERROR, 0, "driver=qcow2 needs a file child: "
                    "file=NODE-NAME (a driver=file node of the image)");
        return false;
    }
    s = g_new0(BDRVQcow2State, 1);
    bs->opaque = s;
    s->bs = bs;
    s->file = opts->file;
    s->file_preadv = s->file->drv->bdrv_aio_preadv;
    s->file_pwritev = s->file->drv->bdrv_aio_pwritev;
    s->writable = !opts->readonly;
    s->filename = g_strdup(opts->file->filename);
    s->cache_clean_interval = o ? o->cache_clean_interval : 0;
    g_mutex_init(&s->lock);
    g_cond_init(&s->cond);
    QSIMPLEQ_INIT(&s->reqs);
    QSIMPLEQ_INIT(&s->jobs);
    QLIST_INIT(&s->async);
    QSIMPLEQ_INIT(&s->async_done);
    s->retired = g_ptr_array_new_with_free_func(g_free);
    s->rc_cache = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
                                        rc_block_free);
    s->pending_frees = g_array_new(false, false, sizeof(Qcow2Free));
    s->quarantine = g_array_new(false, false, sizeof(Qcow2Free));
    s->grace = g_array_new(false, false, sizeof(Qcow2Free));
    {
        void *p;

        if (posix_memalign(&p, 64, FAST_SLOTS * sizeof(Qcow2FastSlot))) {
            abort();
        }
        s->fast = memset(p, 0, FAST_SLOTS * sizeof(Qcow2FastSlot));
        s->fast_cur = s->fast[0].refs;
    }
    if (s->writable && opts->file->readonly) {
        g_set_error(errp, VB_ERROR, 0, "Block node is read-only: the file "
                    "node of %s is read-only; add the qcow2 node with "
                    "read-only=on too", s->filename);
        return false;
    }
    perm = BLK_PERM_CONSISTENT_READ |
           (s->writable ? BLK_PERM_WRITE | BLK_PERM_RESIZE : 0);
    if (!bdrv_attach_child(bs, opts->file, "file", perm,
                           BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED,
                           errp)) {
        return false;
    }
    s->ctx = aio_context_new(errp);
    if (!s->ctx) {
        return false;
    }
    s->thread = g_thread_try_new("qcow2-meta", qcow2_thread, s, errp);
    if (!s->thread) {
        return false;
    }
    s->open_opts = o;
    run_job(s, open_job, s);
    s->open_opts = NULL;
    if (s->open_err) {
        g_propagate_error(errp, g_steal_pointer(&s->open_err));
        return false;
    }
    if (!open_backing(bs, s, opts, o, errp)) {
        return false;
    }
    bs->size = s->info.h.size;
    /* The file's block sizes: a guest request then never needs a
     * read-modify-write of the file (clusters are whole blocks). */
    bs->bl.logical_block_size = s->file->bl.logical_block_size;
    bs->bl.physical_block_size = s->file->bl.physical_block_size;
    bs->bl.request_alignment = MAX(s->file->bl.request_alignment, 512u);
    bs->bl.can_discard = s->writable;
    bs->bl.can_write_zeroes = s->writable;
    bs->bl.opt_io_size = s->cluster_size;
    bs->filename = g_strdup(s->filename);
    /* lazy-refcounts, corrupt and extended-l2 are version 3 header
     * fields: QEMU gives none of them for a version 2 image (compat
     * 0.10), nor do we. */
    if (s->info.h.version >= 3) {
        s->format_specific = g_strdup_printf(
            "{\"type\": \"qcow2\", \"data\": {\"compat\": \"1.1\", "
            "\"lazy-refcounts\": %s, \"refcount-bits\": %u, "
            "\"corrupt\": false, \"extended-l2\": false, "
            "\"compression-type\": \"%s\"}}",
            s->info.lazy_refcounts ? "true" : "false", s->info.refcount_bits,
            s->info.h.compression_type == QCOW2_COMPRESSION_ZSTD ? "zstd" :
                                                                   "zlib");
    } else {
        s->format_specific = g_strdup_printf(
            "{\"type\": \"qcow2\", \"data\": {\"compat\": \"0.10\", "
            "\"refcount-bits\": %u, \"compression-type\": \"zlib\"}}",
            s->info.refcount_bits);
    }
    return true;
}

/* ---- resize ----------------------------------------------------------- */

typedef struct TruncateJob {
    BDRVQcow2State *s;
    uint64_t size;
    int ret;
} TruncateJob;

static void truncate_job(void *opaque)
{
    TruncateJob *j = opaque;
    BDRVQcow2State *s = j->s;
    uint64_t per_l2 = (uint64_t)s->info.l2_entries << s->cluster_bits;
    uint64_t need = (((j->size) + (per_l2) - 1) / (per_l2));
    int ret;

    if (need > s->l1_size) {
        uint64_t bytes = QEMU_ALIGN_UP(need * 8, s->cluster_size);
        uint64_t entries = bytes / 8;
        g_autofree uint8_t *buf = NULL;
        uint64_t old_off = s->l1_offset;
        uint64_t old_bytes = QEMU_ALIGN_UP((uint64_t)s->l1_size * 8,
                                      s->cluster_size);
        uint64_t *l1;
        int64_t off;

        if (entries > QCOW2_MAX_L1_ENTRIES) {
            j->ret = -EFBIG;
            return;
        }
        off = alloc_clusters(s, bytes / s->cluster_size);
        if (off < 0) {
            j->ret = off;
            return;
        }
        buf = g_malloc0(bytes);
        for (uint64_t i = 0; i < s->l1_size; i++) {
            qcow2_st_be64(buf + i * 8, s->l1[i]);
        }
        ret = rc_write_dirty(s);
        if (ret == 0) {
            ret = sio_write(s, off, buf, bytes);
        }
        if (ret == 0) {
            ret = sio_flush(s);
        }
        if (ret < 0) {
            j->ret = ret;
            return;
        }
        qcow2_st_be64(s->hdr + HDR_L1_OFFSET, off);
        {
            uint32_t v = GUINT32_TO_BE((uint32_t)entries);

            memcpy(s->hdr + HDR_L1_SIZE, &v, 4);
        }
        qcow2_st_be64(s->hdr + HDR_SIZE, j->size);
        ret = write_header(s);
        if (ret < 0) {
            j->ret = ret;
            return;
        }
        /* The file names the new table now (or will): use it, and keep
         * the old one's clusters unless the flush made that durable. */
        ret = sio_flush(s);
        l1 = g_new0(uint64_t, entries);
        memcpy(l1, s->l1, (uint64_t)s->l1_size * 8);
        /* Lock-free readers may still hold the old table. */
        g_free(s->l1);
        g_ptr_array_add(s->retired, s->l1pub->e);
        g_ptr_array_add(s->retired, s->l1pub);
        {
            Qcow2L1Pub *pub = g_new0(Qcow2L1Pub, 1);

            pub->size = entries;
            pub->e = g_new0(uint64_t, entries);
            memcpy(pub->e, s->l1pub->e, (uint64_t)s->l1_size * 8);
            __atomic_store_n(&s->l1pub, pub, __ATOMIC_RELEASE);
        }
        s->l1 = l1;
        s->l1_size = entries;
        s->l1_offset = off;
        s->info.h.l1_size = entries;
        s->info.h.l1_table_offset = off;
        s->info.h.size = j->size;
        if (ret == 0 && old_off && old_bytes) {
            ret = free_range(s, old_off, old_bytes);
            if (ret == 0) {
                ret = rc_write_dirty(s);
            }
        }
        j->ret = ret;
        return;
    }
    qcow2_st_be64(s->hdr + HDR_SIZE, j->size);
    ret = write_header(s);
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret == 0) {
        s->info.h.size = j->size;
    }
    j->ret = ret;
}

static bool qcow2_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    BDRVQcow2State *s = bs->opaque;
    TruncateJob j = { .s = s, .size = size };

    if (size % 512 || size > QCOW2_MAX_VIRTUAL_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "qcow2 %s: the new size must be a "
                    "multiple of 512 bytes, at most %" PRIu64, s->filename,
                    (uint64_t)QCOW2_MAX_VIRTUAL_SIZE);
        return false;
    }
    if (size == s->info.h.size) {
        return true;
    }
    run_job(s, truncate_job, &j);
    if (j.ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "qcow2 %s: resize failed: %s",
                    s->filename, g_strerror(-j.ret));
        return false;
    }
    return true;
}

static const BlockDriver bdrv_qcow2;

/* ---- a backing node given later (blockdev-snapshot) ------------------ */

typedef struct SetBackingJob {
    BDRVQcow2State *s;
    BlockBackend *backing;
} SetBackingJob;

/* The metadata thread reads s->backing for every unallocated cluster:
 * it changes there, between two requests. */
static void set_backing_job(void *opaque)
{
    SetBackingJob *j = opaque;

    j->s->backing = j->backing;
}

/* A node that becomes a backing node gets no more writes: its reserved
 * clusters go back now (at its close they would change an image that
 * should not change any more).  A failure only leaks them. */
static void give_back_job(void *opaque)
{
    BDRVQcow2State *s = opaque;

    if (s->writable && release_reserve(s) == 0) {
        rc_write_dirty(s);
    }
}

bool qcow2_set_backing(BlockBackend *bs, BlockBackend *backing,
                       GError **errp)
{
    BDRVQcow2State *s = bs->opaque;
    SetBackingJob j = { .s = s, .backing = backing };

    if (!backing && bs->drv == &bdrv_qcow2 && !s->own_backing) {
        BdrvChild *c = bdrv_find_child(bs, "backing");

        /* The undo of a snapshot that failed after it gave the node. */
        if (c) {
            run_job(s, set_backing_job, &j);
            bdrv_detach_child(c);
        }
        return true;
    }
    if (bs->drv != &bdrv_qcow2) {
        g_set_error(errp, VB_ERROR, 0, "The overlay does not support "
                    "backing images: only a qcow2 node can be one");
        return false;
    }
    if (s->backing) {
        g_set_error(errp, VB_ERROR, 0, "The overlay already has a backing "
                    "image: add it with backing=null");
        return false;
    }
    if (!s->writable) {
        g_set_error(errp, VB_ERROR, 0, "The overlay %s is read-only: add "
                    "it without read-only=on", s->filename);
        return false;
    }
    if (!bdrv_attach_child(bs, backing, "backing", BLK_PERM_CONSISTENT_READ,
                           BLK_PERM_ALL, errp)) {
        return false;
    }
    run_job(s, set_backing_job, &j);
    if (backing->drv == &bdrv_qcow2) {
        run_job(backing->opaque, give_back_job, backing->opaque);
    }
    return true;
}

/* ---- a new backing file (block-stream, block-commit) ----------------- */

typedef struct ChangeBackingJob {
    BDRVQcow2State *s;
    BlockBackend *backing;
    const char *name;           /* NULL: none */
    const char *fmt;            /* NULL: unsaid */
    char *full;                 /* @name resolved */
    int ret;
    char *err;
} ChangeBackingJob;

static void be32_store(uint8_t *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

static uint32_t be32_load(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return GUINT32_FROM_BE(v);
}

/*
 * Metadata thread: rebuild the first cluster with the header, every
 * extension but the backing format one (kept in their order), the new
 * backing format extension, the end marker and the new name, and write
 * it whole (the cluster is the header's alone), flushed.  Between two
 * requests, so the new backing node is used from the next one on.
 */
static void change_backing_job(void *opaque)
{
    ChangeBackingJob *j = opaque;
    BDRVQcow2State *s = j->s;
    uint32_t cs = s->cluster_size;
    uint32_t start = s->info.h.header_length;
    uint32_t end = s->info.h.backing_file_offset ?
                   s->info.h.backing_file_offset : cs;
    size_t nlen = j->name ? strlen(j->name) : 0;
    size_t flen = j->fmt ? strlen(j->fmt) : 0;
    g_autofree uint8_t *old = g_malloc0(cs);
    g_autofree uint8_t *buf = g_malloc0(cs);
    uint64_t have = MIN((uint64_t)cs, s->info.file_size);
    uint32_t off = start, pos = start;
    int ret;

    ret = sio_read(s, s->file, 0, old, have);
    if (ret < 0) {
        j->ret = ret;
        j->err = g_strdup_printf("cannot read the header of %s: %s",
                                 s->filename, g_strerror(-ret));
        return;
    }
    memcpy(buf, old, start);
    /* The parser validated this area at open: lengths stay inside it. */
    while (end - off >= 8) {
        uint32_t type = be32_load(old + off);
        uint32_t len = be32_load(old + off + 4);
        uint32_t padded = QEMU_ALIGN_UP(len, 8);

        if (type == QCOW2_EXT_END || padded > end - off - 8) {
            break;
        }
        if (type != QCOW2_EXT_BACKING_FORMAT) {
            if (pos + 8 + padded > cs) {
                goto too_big;
            }
            memcpy(buf + pos, old + off, 8 + padded);
            pos += 8 + padded;
        }
        off += 8 + padded;
    }
    if (pos + 8 + QEMU_ALIGN_UP(flen, 8) + 8 + nlen > cs) {
        goto too_big;
    }
    if (j->fmt) {
        be32_store(buf + pos, QCOW2_EXT_BACKING_FORMAT);
        be32_store(buf + pos + 4, flen);
        memcpy(buf + pos + 8, j->fmt, flen);
        pos += 8 + QEMU_ALIGN_UP(flen, 8);
    }
    pos += 8;                   /* the end marker: zeroes */
    qcow2_st_be64(buf + 8, nlen ? pos : 0);
    be32_store(buf + 16, nlen);
    if (nlen) {                 /* no backing file: j->name is NULL */
        memcpy(buf + pos, j->name, nlen);
    }
    ret = sio_write(s, 0, buf, cs);
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret < 0) {
        j->ret = ret;
        j->err = g_strdup_printf("cannot write the header of %s: %s",
                                 s->filename, g_strerror(-ret));
        return;
    }
    memcpy(s->hdr, buf, s->hdr_len);
    memcpy(s->hdr_disk, buf, s->hdr_len);
    s->info.h.backing_file_offset = nlen ? pos : 0;
    s->info.h.backing_file_size = nlen;
    g_free(s->info.backing_file);
    s->info.backing_file = g_strdup(j->name);
    g_free(s->info.backing_format);
    s->info.backing_format = g_strdup(j->fmt);
    g_free(s->full_backing);
    s->full_backing = g_steal_pointer(&j->full);
    s->backing = j->backing;
    return;

too_big:
    j->ret = -ENOSPC;
    j->err = g_strdup_printf("the backing file name and format do not fit "
                             "in the first cluster of %s (%u bytes): give a "
                             "shorter backing-file", s->filename, cs);
}

bool qcow2_owns_backing(BlockBackend *bs)
{
    BDRVQcow2State *s = bs->opaque;

    return bs->drv == &bdrv_qcow2 && s->own_backing;
}

bool qcow2_release_backing(BlockBackend *bs, BlockBackend *backing,
                           BlockBackend **file, GError **errp)
{
    /* Down the chain @bs opened, to the image that opened @backing. */
    for (BlockBackend *b = bs; b && b->drv == &bdrv_qcow2;) {
        BDRVQcow2State *bst = b->opaque;

        if (!bst->own_backing) {
            break;
        }
        if (bst->backing == backing) {
            /* It keeps its edge and reads from @backing as before. */
            *file = bst->backing_file;
            bst->backing_file = NULL;
            bst->own_backing = false;
            return true;
        }
        b = bst->backing;
    }
    g_set_error(errp, VB_ERROR, 0, "%s is not an image that the backing "
                "chain of %s opened itself", backing->filename,
                bs->filename);
    return false;
}

/* Back to the old backing edge after a failed change: it was there a
 * moment ago, so the permissions allow it. */
static void qcow2_reattach(BlockBackend *bs, BlockBackend *old)
{
    if (old) {
        bdrv_attach_child(bs, old, "backing", BLK_PERM_CONSISTENT_READ,
                          BLK_PERM_ALL, NULL);
    }
}

bool qcow2_change_backing(BlockBackend *bs, BlockBackend *backing,
                          const char *name, const char *fmt,
                          GError **errp)
{
    BDRVQcow2State *s = bs->opaque;
    ChangeBackingJob j = { .s = s, .backing = backing, .name = name,
                           .fmt = fmt };
    BlockBackend *old = s->backing, *old_file = s->backing_file;
    BDRVQcow2State *owner = NULL;

    if (bs->drv != &bdrv_qcow2 || !s->writable) {
        g_set_error(errp, VB_ERROR, 0, "%s is not a writable qcow2 image: "
                    "its backing file cannot change", bs->filename);
        return false;
    }
    if (name && strlen(name) > QCOW2_MAX_BACKING_NAME) {
        g_set_error(errp, VB_ERROR, 0, "backing file name '%s' is longer "
                    "than %u bytes", name, QCOW2_MAX_BACKING_NAME);
        return false;
    }
    if (s->own_backing && backing && backing != old) {
        /* The qcow2 node of our chain that opened @backing. */
        for (BlockBackend *b = old; b && b->drv == &bdrv_qcow2;) {
            BDRVQcow2State *bst = b->opaque;

            if (!bst->own_backing) {
                break;
            }
            if (bst->backing == backing) {
                owner = bst;
                break;
            }
            b = bst->backing;
        }
        if (!owner) {
            g_set_error(errp, VB_ERROR, 0, "the new backing node of %s is "
                        "not one of the images of its chain",
                        bs->filename);
            return false;
        }
    }
    if (name) {
        g_autofree char *dir = g_path_get_dirname(s->filename);

        j.full = g_path_is_absolute(name) ? g_strdup(name) :
                 g_build_filename(dir, name, NULL);
    }
    /* One backing edge at a time: the old one goes first (nothing is
     * in flight through it, the caller made sure). */
    if (old != backing) {
        bdrv_detach_child(bdrv_find_child(bs, "backing"));
        if (backing &&
            !bdrv_attach_child(bs, backing, "backing",
                               BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL,
                               errp)) {
            g_free(j.full);
            qcow2_reattach(bs, old);
            return false;
        }
    }
    run_job(s, change_backing_job, &j);
    if (j.ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s", j.err);
        g_free(j.err);
        g_free(j.full);
        if (old != backing) {
            if (backing) {
                bdrv_detach_child(bdrv_find_child(bs, "backing"));
            }
            qcow2_reattach(bs, old);
        }
        return false;
    }
    if (s->own_backing && old != backing) {
        /* Take @backing (and its file node) from its opener, then close
         * what is left of the old chain above it. */
        if (owner) {
            s->backing_file = owner->backing_file;
            owner->backing_file = NULL;
            owner->own_backing = false;
        } else {
            s->backing_file = NULL;
            s->own_backing = false;
        }
        blk_close(old);
        blk_close(old_file);
    }
    return true;
}

uint64_t qcow2_slow_requests(BlockBackend *blk)
{
    BDRVQcow2State *s = blk->opaque;

    return __atomic_load_n(&s->slow_requests, __ATOMIC_RELAXED);
}

uint64_t qcow2_l2_prefetched(BlockBackend *blk)
{
    BDRVQcow2State *s = blk->opaque;

    return __atomic_load_n(&s->l2_prefetched, __ATOMIC_RELAXED);
}

static void qcow2_get_info(BlockBackend *bs, BlockDriverInfo *bdi)
{
    BDRVQcow2State *s = bs->opaque;

    bdi->cluster_size = s->cluster_size;
    bdi->backing_file = s->info.backing_file;
    bdi->full_backing_file = s->full_backing;
    bdi->backing_format = s->info.backing_format;
    bdi->backing = s->backing;
    bdi->format_specific = s->format_specific;
    bdi->dirty = s->info.dirty;
}

/* ---- options ---------------------------------------------------------- */

static bool parse_size_key(QmpArgs *a, BlockOptsParse *p, const char *key,
                           uint64_t *out, GError **errp)
{
    if (p->export_syntax) {
        const char *str = NULL;

        if (!qmp_args_str(a, key, false, &str, errp)) {
            return false;
        }
        if (str && !qemu_parse_size(str, out)) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for %s: use a "
                        "number with an optional k, M or G suffix", str, key);
            return false;
        }
        return true;
    }
    return qmp_args_size(a, key, false, out, NULL, errp);
}

/*
 * QSD's keys: l2-cache-size, l2-cache-entry-size, refcount-cache-size,
 * cache-clean-interval (the file and backing children are the monitor's:
 * monitor/blockdev.c).  --export's syntax: format=qcow2 with the same
 * cache keys.  Main thread.
 */
static bool qcow2_parse_options(BlockOptions *opts, QmpArgs *a,
                                BlockOptsParse *p, GError **errp)
{
    BlockQcow2Options *o = blk_options_parse_keep(p,
                                                  g_new0(BlockQcow2Options, 1));
    uint64_t es = 0;

    if (!parse_size_key(a, p, "l2-cache-size", &o->l2_cache_size, errp) ||
        !parse_size_key(a, p, "l2-cache-entry-size", &es, errp) ||
        !parse_size_key(a, p, "refcount-cache-size",
                        &o->refcount_cache_size, errp) ||
        !parse_size_key(a, p, "cache-clean-interval",
                        &o->cache_clean_interval, errp)) {
        return false;
    }
    if (es && (es < 512 || es > QCOW2_MAX_CLUSTER_SIZE || (es & (es - 1)))) {
        g_set_error(errp, VB_ERROR, 0, "L2 cache entry size must be a power "
                    "of two between 512 and the cluster size (%" PRIu64
                    " given)", es);
        return false;
    }
    o->l2_cache_entry_size = es;
    if (o->cache_clean_interval > UINT32_MAX) {
        g_set_error(errp, VB_ERROR, 0, "cache-clean-interval is too big "
                    "(at most %u seconds)", UINT32_MAX);
        return false;
    }
    opts->driver_opts = o;
    return true;
}

static void qcow2_node_names(BlockBackend *blk, const BlockOptions *opts,
                             const char *given, BlockNodeNames *out)
{
    out->driver = g_strdup("qcow2");
    out->filename = g_strdup(opts->file ? opts->file->filename :
                             blk ? blk->filename : "qcow2");
}

/* ---- reopen (block-commit's base) ---------------------------------- */

typedef struct ReopenJob {
    BDRVQcow2State *s;
    bool writable;
    int ret;
} ReopenJob;

/*
 * Metadata thread: read-write from the next request on; or, before
 * read-only, what a close writes (QEMU's reopen does it too): dirty
 * tables, the unused reserve back, all flushed.  A failure stays
 * writable: what is dirty is written by the next try, or the close.
 */
static void reopen_job(void *opaque)
{
    ReopenJob *j = opaque;
    BDRVQcow2State *s = j->s;
    int ret;

    if (j->writable) {
        s->writable = true;
        return;
    }
    ret = metadata_flush(s);
    if (ret == 0) {
        ret = release_reserve(s);
    }
    if (ret == 0) {
        ret = rc_write_dirty(s);
    }
    if (ret == 0) {
        ret = sio_flush(s);
    }
    if (ret == 0) {
        s->writable = false;
    }
    j->ret = ret;
}

/* Main thread (bdrv_reopen): the file node first when going read-write,
 * last when going read-only; the edge to it takes or drops the write
 * and resize rights, which takes or drops the image's write lock. */
static bool qcow2_reopen(BlockBackend *bs, bool writable, GError **errp)
{
    BDRVQcow2State *s = bs->opaque;
    BdrvChild *c = bdrv_find_child(bs, "file");
    uint64_t rw = BLK_PERM_WRITE | BLK_PERM_RESIZE;
    ReopenJob j = { .s = s, .writable = writable };

    if (!c) {
        g_set_error(errp, VB_ERROR, 0, "%s has no file node", s->filename);
        return false;
    }
    if (writable) {
        bool was_ro = blk_is_read_only(s->file);

        if (!blk_reopen(s->file, true, errp)) {
            return false;
        }
        if (!bdrv_child_set_perm(c, c->perm | rw, c->shared, errp)) {
            if (was_ro) {
                blk_reopen(s->file, false, NULL);
            }
            return false;
        }
        s->file_reopened = was_ro;
        run_job(s, reopen_job, &j);
        bs->bl.can_discard = true;
        bs->bl.can_write_zeroes = true;
        return true;
    }
    run_job(s, reopen_job, &j);
    if (j.ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot write the metadata of %s "
                    "before it goes back to read-only: %s; it stays "
                    "read-write", s->filename, g_strerror(-j.ret));
        return false;
    }
    bs->bl.can_discard = false;
    bs->bl.can_write_zeroes = false;
    bdrv_child_set_perm(c, c->perm & ~rw, c->shared, NULL);
    if (s->file_reopened) {
        s->file_reopened = false;
        /* Nothing left to undo: the file stays writable, unused. */
        return blk_reopen(s->file, false, errp);
    }
    return true;
}

static const BlockDriver bdrv_qcow2 = {
    .format_name = "qcow2",
    .is_format = true,
    .bdrv_parse_options = qcow2_parse_options,
    .bdrv_node_names = qcow2_node_names,
    .bdrv_open = qcow2_open,
    .bdrv_close = qcow2_close,
    .bdrv_truncate = qcow2_truncate,
    .bdrv_reopen = qcow2_reopen,
    .bdrv_get_info = qcow2_get_info,
    .bdrv_change_backing = qcow2_change_backing,
    .bdrv_set_backing = qcow2_set_backing,
    .bdrv_owns_backing = qcow2_owns_backing,
    .bdrv_release_backing = qcow2_release_backing,
    .bdrv_create_parse = qcow2_create_parse,
    .bdrv_create = qcow2_create,
    .default_overlay = true,
    .bdrv_aio_preadv = qcow2_submit,
    .bdrv_aio_pwritev = qcow2_submit,
    .bdrv_aio_flush = qcow2_submit,
    .bdrv_aio_pdiscard = qcow2_submit,
    .bdrv_aio_pwrite_zeroes = qcow2_submit,
    .bdrv_aio_block_status = qcow2_submit,
};

BLOCK_DRIVER_REGISTER(bdrv_qcow2)
