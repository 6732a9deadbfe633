/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blkd serving qcow2 images (block/qcow2.c), checked against
 * qemu-img: images made by qemu-img create / qemu-io / convert -c /
 * snapshot read through the daemon exactly as 'qemu-img convert -O raw'
 * reads them; what the daemon writes leaves an image that 'qemu-img
 * check' finds clean and that converts to what was written; backing
 * files stay unchanged; refused images say why; two queues allocating
 * the same clusters at once do not allocate them twice; a daemon killed
 * mid-write leaves no corruption and keeps what a flush acknowledged;
 * and so does a file failing from any of its writes and flushes on, in
 * a sequence that reuses freed clusters, which never show through a
 * stale entry.
 *
 * Needs qemu-img and qemu-io (scripts/install-deps.sh: qemu-utils).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/virtio_blk.h>

#define BUF_SIZE (4u << 20)
#define CHUNK (256u * 1024)

typedef struct Q2 {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* guest memory, BUF_SIZE bytes */
    char *img;                  /* the image the export serves */
    uint64_t size;
} Q2;


static uint8_t *read_whole(const char *path, size_t *len)
{
    g_autoptr(GError) err = NULL;
    char *data;
    gsize n;

    if (!g_file_get_contents(path, &data, &n, &err)) {
        g_error("%s", err->message);
    }
    *len = n;
    return (uint8_t *)data;
}

static char *checksum(const char *path)
{
    size_t n;
    g_autofree uint8_t *data = read_whole(path, &n);

    return g_compute_checksum_for_data(G_CHECKSUM_SHA256, data, n);
}

/* What 'qemu-img convert -O raw' makes of @img (@size bytes). */
static uint8_t *convert_raw(Q2 *q, const char *img, const char *extra)
{
    g_autofree char *raw = g_strdup_printf("%s/conv.raw", q->d.dir);
    uint8_t *data;
    size_t n;

    vb_sh("qemu-img convert %s -O raw '%s' '%s'", extra ? extra : "", img, raw);
    data = read_whole(raw, &n);
    g_assert_cmpuint(n, ==, q->size);
    unlink(raw);
    return data;
}

/* The test directory and an image path in it, before the daemon runs. */
static void q2_init(Q2 *q, uint64_t size)
{
    VbExportSpec spec = {
        .size = size, .discard = "on", .write_zeroes = "on",
        .extra = "format=qcow2",
    };

    memset(q, 0, sizeof(*q));
    q->size = size;
    vb_daemon_init(&q->d, 1, &spec);
    q->img = g_strdup(q->d.image[0]);
    unlink(q->img);
}

static char *q2_path(Q2 *q, const char *name)
{
    return g_strdup_printf("%s/%s", q->d.dir, name);
}

static void q2_start(Q2 *q, unsigned int queues)
{
    g_autoptr(GError) err = NULL;

    q->d.spec[0].num_queues = queues;
    vb_daemon_start(&q->d);
    q->fe = vb_connect_started(&q->d, 0, queues ? queues : 1);
    q->buf = vhost_user_frontend_mem_alloc(q->fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
}

/* A clean stop: SIGTERM, and the daemon closes the image. */
/*
 * Wait until no process holds QEMU's lock bytes on @img.  A daemon that
 * was reaped can still hold them for a moment: its io_uring ring lets go
 * of the file (and its OFD locks) from a kernel worker after the exit,
 * once the requests in flight are done.  qemu-img, run in between, would
 * find the image locked.
 */
static void wait_unlocked(const char *img)
{
    gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
    int fd = open(img, O_RDONLY);

    g_assert_cmpint(fd, >=, 0);
    for (;;) {
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET,
            .l_start = 100, .l_len = 200,
        };

        g_assert_cmpint(fcntl(fd, F_OFD_GETLK, &fl), ==, 0);
        if (fl.l_type == F_UNLCK) {
            break;
        }
        if (g_get_monotonic_time() > deadline) {
            g_error("%s: still locked 30 s after the daemon exited", img);
        }
        g_usleep(10 * 1000);
    }
    close(fd);
}

static void q2_stop(Q2 *q)
{
    int status;

    vhost_user_frontend_free(q->fe);
    q->fe = NULL;
    g_assert_cmpint(kill(q->d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(q->d.pid, &status, 0), ==, q->d.pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    q->d.pid = 0;
    wait_unlocked(q->img);
}

static void q2_cleanup(Q2 *q)
{
    if (q->fe) {
        vhost_user_frontend_free(q->fe);
    }
    vb_sh("rm -f '%s'/*.qcow2 '%s'/*.raw '%s'/*.data", q->d.dir, q->d.dir,
       q->d.dir);
    vb_daemon_cleanup(&q->d);
    g_free(q->img);
}

static void q2_rw(Q2 *q, bool write, uint64_t off, uint8_t *data,
                  size_t len)
{
    for (size_t done = 0; done < len; done += CHUNK) {
        size_t n = MIN(CHUNK, len - done);

        if (write) {
            memcpy(q->buf, data + done, n);
        }
        g_assert_cmpint(vb_req(q->fe, 0, write ? VIRTIO_BLK_T_OUT :
                               VIRTIO_BLK_T_IN, (off + done) / 512, q->buf,
                               n, !write, NULL), ==, VIRTIO_BLK_S_OK);
        if (!write) {
            memcpy(data + done, q->buf, n);
        }
    }
}

/* Every byte the daemon reads equals @expect. */
static void q2_check_reads(Q2 *q, const uint8_t *expect)
{
    g_autofree uint8_t *got = g_malloc(q->size);

    q2_rw(q, false, 0, got, q->size);
    for (uint64_t i = 0; i < q->size; i += 512) {
        if (memcmp(got + i, expect + i, 512)) {
            g_error("%s: sector %" PRIu64 " differs", q->img, i / 512);
        }
    }
}

static void q2_flush(Q2 *q)
{
    g_assert_cmpint(vb_req(q->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

/* 'qemu-img check' reports no error and no leak. */
static void check_clean(const char *img)
{
    g_autofree char *out = NULL;
    int st = vb_sh_status(&out, "qemu-img check '%s'", img);

    if (st) {
        g_error("qemu-img check %s: exit %d\n%s", img, st, out);
    }
}

/* Guest writes of a pattern at @off (sector multiples). */
static void write_pattern(Q2 *q, uint8_t *expect, uint64_t off, size_t len,
                          uint32_t seed)
{
    g_autofree uint8_t *data = g_malloc(len);

    vb_fill_pattern(data, len, seed);
    q2_rw(q, true, off, data, len);
    memcpy(expect + off, data, len);
}

/*
 * Read the image through the daemon (equal to qemu-img's conversion),
 * write @nw partial-cluster ranges of @w, read again, stop, check, and
 * compare qemu-img's conversion with what was written.
 */
static void read_write_check(Q2 *q, const uint64_t (*w)[2], int nw)
{
    g_autofree uint8_t *expect = convert_raw(q, q->img, NULL);
    g_autofree uint8_t *after = NULL;

    q2_start(q, 1);
    q2_check_reads(q, expect);
    for (int i = 0; i < nw; i++) {
        write_pattern(q, expect, w[i][0], w[i][1], 100 + i);
    }
    q2_flush(q);
    q2_check_reads(q, expect);
    q2_stop(q);
    check_clean(q->img);
    after = convert_raw(q, q->img, NULL);
    g_assert_true(memcmp(after, expect, q->size) == 0);
}

/* ---- the cluster-size and version matrix ------------------------------ */

typedef struct MatrixCase {
    uint32_t cluster;
    const char *compat;
} MatrixCase;

static void test_matrix(gconstpointer data)
{
    const MatrixCase *c = data;
    uint64_t size = 5 * 1024 * 1024 + 3 * 512;
    Q2 q;
    const uint64_t w[][2] = {
        { 512, 1024 },                      /* over data */
        { 2 * 1024 * 1024 + 512, 1536 },    /* over zeroes */
        { 3 * 1024 * 1024 - 1024, 8192 },   /* unallocated, spanning */
        { 100 * 1024, 300 * 1024 },         /* many clusters */
        { size - 1024, 1024 },              /* the last, partial cluster */
    };

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 -o cluster_size=%u,compat=%s '%s' %"
       PRIu64, c->cluster, c->compat, q.img, size);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x11 512 7000' "
       "-c 'write -P 0x22 1M 300k' -c 'write -z 2M 128k' "
       "-c 'write -P 0x33 4M 4096' '%s' >/dev/null", q.img);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    q2_cleanup(&q);
}

/*
 * Small clusters and refcount widths: 512-byte clusters with 64-bit
 * refcounts (a block covers 32 KiB, the first table 2 MiB) written over
 * 4 MiB need new blocks and a bigger table; with 2-bit ones, blocks only.
 */
static void test_refcount_growth(gconstpointer data)
{
    const char *bits = data;
    uint64_t size = 4 * 1024 * 1024;
    Q2 q;
    const uint64_t w[][2] = {
        { 0, 4 * 1024 * 1024 },
        { 4096 + 512, 1024 },
    };

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 -o cluster_size=512,refcount_bits=%s "
       "'%s' 4M", bits, q.img);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    q2_cleanup(&q);
}

/*
 * Scattered writes of many sizes into 512-byte clusters over 16 MiB, in
 * two sessions: the second allocates below the file's end in ranges no
 * refcount block covers, and the new block goes at the end, in another
 * such range, so one extension adds two blocks (both must be named by
 * the refcount table).  A fixed sequence: the same allocations on every
 * run.
 */
static void test_scattered(void)
{
    uint64_t size = 16 * 1024 * 1024;
    g_autofree uint8_t *expect = NULL, *after = NULL;
    GRand *r = g_rand_new_with_seed(1234);
    Q2 q;

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 -o cluster_size=512 '%s' 16M", q.img);
    expect = g_malloc0(size);
    /* Two sessions: the second starts with the file grown past what the
     * first allocated, ranges without a block below its end. */
    for (int session = 0; session < 2; session++) {
        q2_start(&q, 1);
        for (int i = 0; i < 100; i++) {
            uint64_t len = (uint64_t)g_rand_int_range(r, 1, 17) * 4096;
            uint64_t off = (uint64_t)g_rand_int_range(
                r, 0, (size - len) / 4096) * 4096;

            write_pattern(&q, expect, off, len, 2000 + session * 100 + i);
        }
        q2_flush(&q);
        q2_stop(&q);
    }
    g_rand_free(r);
    check_clean(q.img);
    after = convert_raw(&q, q.img, NULL);
    g_assert_true(memcmp(after, expect, size) == 0);
    q2_cleanup(&q);
}

/*
 * The file node under the format delayed (inject-delay wraps it in the
 * blkdebug filter): reads and overwrites of allocated clusters, which
 * qcow2 hands to its file node's driver with the guest's own control
 * block, must come back through the filter's delay.  They hung when the
 * filter saved its callback where qcow2 had saved the guest's.
 */
static void test_delayed_file(void)
{
    uint64_t size = 4 * 1024 * 1024;
    g_autofree uint8_t *data = g_malloc(4096);
    Q2 q;

    q2_init(&q, size);
    q.d.spec[0].extra = "format=qcow2,inject-delay=2";
    vb_sh("qemu-img create -q -f qcow2 '%s' 4M", q.img);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x5a 0 1M' '%s' >/dev/null", q.img);
    q2_start(&q, 1);
    for (int i = 0; i < 16; i++) {
        uint64_t off = (uint64_t)i * 65536 + 8192;

        g_assert_cmpint(vb_req(q.fe, 0, VIRTIO_BLK_T_IN, off / 512, q.buf,
                               4096, true, NULL), ==, VIRTIO_BLK_S_OK);
        for (int j = 0; j < 4096; j++) {
            g_assert_cmpint(((uint8_t *)q.buf)[j], ==, 0x5a);
        }
    }
    vb_fill_pattern(data, 4096, 77);
    memcpy(q.buf, data, 4096);
    g_assert_cmpint(vb_req(q.fe, 0, VIRTIO_BLK_T_OUT, 131072 / 512, q.buf,
                           4096, false, NULL), ==, VIRTIO_BLK_S_OK);
    memset(q.buf, 0, 4096);
    g_assert_cmpint(vb_req(q.fe, 0, VIRTIO_BLK_T_IN, 131072 / 512, q.buf,
                           4096, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(memcmp(q.buf, data, 4096) == 0);
    q2_flush(&q);
    q2_stop(&q);
    check_clean(q.img);
    q2_cleanup(&q);
}

/* ---- compressed clusters ---------------------------------------------- */

static void test_compressed(gconstpointer data)
{
    const char *type = data;
    uint64_t size = 4 * 1024 * 1024;
    g_autofree char *src = NULL;
    g_autofree uint8_t *raw = g_malloc0(size);
    Q2 q;
    const uint64_t w[][2] = {
        { 4096, 4096 },                     /* inside a compressed cluster */
        { 64 * 1024 - 512, 1024 },          /* across two */
        { 3 * 1024 * 1024, 64 * 1024 },     /* a whole one */
    };

    q2_init(&q, size);
    src = q2_path(&q, "src.raw");
    /* Compressible halves, incompressible quarters, zero runs. */
    for (uint64_t i = 0; i < size; i += 64 * 1024) {
        if ((i / 65536) % 3 == 0) {
            memset(raw + i, (int)(i >> 16), 32 * 1024);
        } else if ((i / 65536) % 3 == 1) {
            vb_fill_pattern(raw + i, 64 * 1024, (uint32_t)i);
        }
    }
    g_assert_true(g_file_set_contents(src, (char *)raw, size, NULL));
    vb_sh("qemu-img convert -c -O qcow2 -o compression_type=%s '%s' '%s'",
       type, src, q.img);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    q2_cleanup(&q);
}

/* ---- a backing chain of depth 3 --------------------------------------- */

static void test_chain(void)
{
    uint64_t size = 4 * 1024 * 1024;
    g_autofree char *base = NULL, *mid = NULL;
    g_autofree char *sum_base = NULL, *sum_mid = NULL;
    g_autofree char *sum_base2 = NULL, *sum_mid2 = NULL;
    Q2 q;
    const uint64_t w[][2] = {
        { 512, 512 },                       /* over base data */
        { 1024 * 1024 + 4096, 8192 },       /* over mid data */
        { 2 * 1024 * 1024 + 512, 70000 - 70000 % 512 }, /* past base's end */
        { 3 * 1024 * 1024 + 1024, 2048 },   /* past mid's end */
    };

    q2_init(&q, size);
    base = q2_path(&q, "base.qcow2");
    mid = q2_path(&q, "mid.qcow2");
    /* Sizes grow up the chain: what lies past a backing file's end reads
     * as zeroes. */
    vb_sh("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 2M", base);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x41 0 2M' '%s' >/dev/null", base);
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -o cluster_size=65536 "
       "-b base.qcow2 -F qcow2 mid.qcow2 3M", q.d.dir);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x42 1M 100k' "
       "-c 'write -z 1536k 64k' '%s' >/dev/null", mid);
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -o cluster_size=16384 "
       "-b mid.qcow2 -F qcow2 '%s' 4M", q.d.dir, q.img);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x43 8k 4k' '%s' >/dev/null", q.img);
    sum_base = checksum(base);
    sum_mid = checksum(mid);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    sum_base2 = checksum(base);
    sum_mid2 = checksum(mid);
    g_assert_cmpstr(sum_base, ==, sum_base2);
    g_assert_cmpstr(sum_mid, ==, sum_mid2);
    q2_cleanup(&q);
}

/* A raw backing file (its size not a multiple of the cluster size). */
static void test_raw_backing(void)
{
    uint64_t size = 2 * 1024 * 1024;
    g_autofree char *base = NULL, *sum = NULL, *sum2 = NULL;
    g_autofree uint8_t *raw = g_malloc(1536 * 1024 + 512);
    Q2 q;
    const uint64_t w[][2] = {
        { 512, 512 },                       /* over raw data */
        { 1536 * 1024 - 512, 2048 },        /* across its end */
    };

    q2_init(&q, size);
    base = q2_path(&q, "base.raw");
    vb_fill_pattern(raw, 1536 * 1024 + 512, 42);
    g_assert_true(g_file_set_contents(base, (char *)raw, 1536 * 1024 + 512,
                                      NULL));
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base.raw -F raw '%s' 2M",
       q.d.dir, q.img);
    sum = checksum(base);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    sum2 = checksum(base);
    g_assert_cmpstr(sum, ==, sum2);
    q2_cleanup(&q);
}

/* ---- internal snapshots ----------------------------------------------- */

static void test_snapshot(void)
{
    uint64_t size = 2 * 1024 * 1024;
    g_autofree uint8_t *snap = NULL;
    g_autofree uint8_t *snap2 = NULL;
    Q2 q;
    const uint64_t w[][2] = {
        { 512, 512 },                       /* shared with the snapshot */
        { 64 * 1024 - 512, 4096 },          /* two shared clusters */
        { 1024 * 1024, 64 * 1024 },         /* shared L2 table, whole */
    };

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 '%s' 2M", q.img);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x51 0 1100k' '%s' >/dev/null", q.img);
    snap = convert_raw(&q, q.img, NULL);
    vb_sh("qemu-img snapshot -c s1 '%s'", q.img);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x52 512k 64k' '%s' >/dev/null",
          q.img);
    read_write_check(&q, w, G_N_ELEMENTS(w));
    /* The snapshot still reads as it was taken. */
    snap2 = convert_raw(&q, q.img, "-l snapshot.name=s1");
    g_assert_true(memcmp(snap, snap2, size) == 0);
    q2_cleanup(&q);
}

/* ---- discard and write-zeroes ----------------------------------------- */

static void zero_req(Q2 *q, uint32_t type, uint64_t off, uint64_t len,
                     bool unmap)
{
    struct virtio_blk_discard_write_zeroes *seg = (void *)q->buf;

    seg->sector = off / 512;
    seg->num_sectors = len / 512;
    seg->flags = unmap ? VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP : 0;
    g_assert_cmpint(vb_req(q->fe, 0, type, 0, seg, sizeof(*seg), false,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

/* qemu-img map says [off, off + len) reads as zeroes from @depth. */
static void check_map_zero(const char *img, uint64_t off, uint64_t len)
{
    g_autofree char *out = NULL;
    g_autoptr(JsonParser) p = json_parser_new();
    JsonArray *a;
    uint64_t covered = 0;

    g_assert_cmpint(vb_sh_status(&out, "qemu-img map --output=json '%s'", img),
                    ==, 0);
    g_assert_true(json_parser_load_from_data(p, out, -1, NULL));
    a = json_node_get_array(json_parser_get_root(p));
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *e = json_array_get_object_element(a, i);
        uint64_t s = json_object_get_int_member(e, "start");
        uint64_t l = json_object_get_int_member(e, "length");
        uint64_t a0 = MAX(s, off), b0 = MIN(s + l, off + len);

        if (a0 >= b0) {
            continue;
        }
        g_assert_true(json_object_get_boolean_member(e, "zero"));
        g_assert_false(json_object_get_boolean_member(e, "data"));
        covered += b0 - a0;
    }
    g_assert_cmpuint(covered, ==, len);
}

static void test_discard_zeroes(gconstpointer data)
{
    bool with_backing = GPOINTER_TO_INT(data);
    uint64_t size = 2 * 1024 * 1024;
    g_autofree uint8_t *expect = NULL;
    g_autofree uint8_t *after = NULL;
    Q2 q;

    q2_init(&q, size);
    if (with_backing) {
        g_autofree char *base = q2_path(&q, "base.qcow2");

        vb_sh("qemu-img create -q -f qcow2 '%s' 2M", base);
        vb_sh("qemu-io -f qcow2 -c 'write -P 0x61 0 2M' '%s' >/dev/null", base);
        vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "
           "'%s' 2M", q.d.dir, q.img);
    } else {
        vb_sh("qemu-img create -q -f qcow2 '%s' 2M", q.img);
    }
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x62 0 1M' '%s' >/dev/null", q.img);
    expect = convert_raw(&q, q.img, NULL);
    q2_start(&q, 1);
    /* discard: whole clusters, allocated and (with a backing file) not */
    zero_req(&q, VIRTIO_BLK_T_DISCARD, 64 * 1024, 128 * 1024, false);
    zero_req(&q, VIRTIO_BLK_T_DISCARD, 1536 * 1024, 64 * 1024, false);
    /* write-zeroes with and without unmap, and a partial cluster */
    zero_req(&q, VIRTIO_BLK_T_WRITE_ZEROES, 256 * 1024, 128 * 1024, true);
    zero_req(&q, VIRTIO_BLK_T_WRITE_ZEROES, 448 * 1024, 64 * 1024, false);
    zero_req(&q, VIRTIO_BLK_T_WRITE_ZEROES, 600 * 1024, 4096, true);
    memset(expect + 64 * 1024, 0, 128 * 1024);
    memset(expect + 256 * 1024, 0, 128 * 1024);
    memset(expect + 448 * 1024, 0, 64 * 1024);
    memset(expect + 600 * 1024, 0, 4096);
    if (!with_backing) {
        /* without a backing file discarded clusters read as zeroes */
        memset(expect + 1536 * 1024, 0, 64 * 1024);
    } else {
        memset(expect + 1536 * 1024, 0, 64 * 1024);
    }
    q2_flush(&q);
    q2_check_reads(&q, expect);
    /* data again into a zeroed cluster kept allocated, and a freed one */
    write_pattern(&q, expect, 448 * 1024 + 4096, 4096, 9);
    write_pattern(&q, expect, 320 * 1024 + 4096, 4096, 10);
    q2_check_reads(&q, expect);
    q2_stop(&q);
    check_clean(q.img);
    after = convert_raw(&q, q.img, NULL);
    g_assert_true(memcmp(after, expect, size) == 0);
    check_map_zero(q.img, 64 * 1024, 128 * 1024);
    check_map_zero(q.img, 256 * 1024, 64 * 1024);
    check_map_zero(q.img, 1536 * 1024, 64 * 1024);
    q2_cleanup(&q);
}

/* ---- refusals --------------------------------------------------------- */

/* Patch @len bytes at @off of @path. */
static void patch(const char *path, uint64_t off, const void *p, size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, p, len, off), ==, len);
    close(fd);
}

/* The daemon refuses to start on the image, saying @msg. */
static void expect_refusal(Q2 *q, const char *msg)
{
    g_autofree char *log = NULL;
    int status;

    q->d.stderr_to_log = true;
    vb_daemon_start(&q->d);
    g_assert_cmpint(waitpid(q->d.pid, &status, 0), ==, q->d.pid);
    q->d.pid = 0;
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    g_assert_true(g_file_get_contents(q->d.log_path, &log, NULL, NULL));
    if (!strstr(log, msg)) {
        g_error("expected '%s' in:\n%s", msg, log);
    }
}

static void test_refusals(void)
{
    Q2 q;

    q2_init(&q, 1024 * 1024);
    {
        /* crypt_method 1 (AES) in a plain image: qemu-img's own LUKS
         * creation times its key derivation and fails now and then on
         * a loaded machine ("Unable to get accurate CPU usage"). */
        uint8_t aes[4] = { 0, 0, 0, 1 };

        vb_sh("qemu-img create -q -f qcow2 '%s' 1M", q.img);
        patch(q.img, 32, aes, sizeof(aes));
        expect_refusal(&q, "image is encrypted");
    }

    vb_sh("cd '%s' && rm -f '%s' && qemu-img create -q -f qcow2 "
       "-o data_file=x.data '%s' 1M", q.d.dir, q.img, q.img);
    expect_refusal(&q, "external data file");

    {
        /* incompatible feature bit 10: unknown */
        uint8_t b = 0x04;

        vb_sh("rm -f '%s' && qemu-img create -q -f qcow2 '%s' 1M", q.img,
           q.img);
        patch(q.img, 72 + 6, &b, 1);
        expect_refusal(&q, "bit 10");
    }
    {
        /* dirty with lazy refcounts: repair first */
        uint8_t b = 0x01;

        vb_sh("rm -f '%s' && qemu-img create -q -f qcow2 -o lazy_refcounts=on "
           "'%s' 1M", q.img, q.img);
        patch(q.img, 72 + 7, &b, 1);
        expect_refusal(&q, "qemu-img check -r all");
    }
    {
        /* a backing file without a format: the extension's type made
         * unknown (an ignored extension) */
        g_autofree char *base = q2_path(&q, "base.qcow2");
        size_t n;
        g_autofree uint8_t *h = NULL;
        static const uint8_t bf[4] = { 0xe2, 0x79, 0x2a, 0xca };
        static const uint8_t other[4] = { 0x12, 0x34, 0x56, 0x78 };
        uint8_t *at;

        vb_sh("qemu-img create -q -f qcow2 '%s' 1M", base);
        vb_sh("cd '%s' && rm -f '%s' && qemu-img create -q -f qcow2 "
           "-b base.qcow2 -F qcow2 '%s' 1M", q.d.dir, q.img, q.img);
        h = read_whole(q.img, &n);
        at = memmem(h, MIN(n, 4096), bf, 4);
        g_assert_nonnull(at);
        patch(q.img, at - h, other, 4);
        expect_refusal(&q, "does not say its format");
    }
    q2_cleanup(&q);
}

/* Unknown autoclear bits (and the bitmaps bit) go at the first write,
 * even one that overwrites an allocated cluster in place. */
static void test_autoclear(void)
{
    uint8_t bits = 0x45, field[8];
    g_autofree uint8_t *data = g_malloc(4096);
    Q2 q;
    int fd;

    q2_init(&q, 1024 * 1024);
    vb_sh("qemu-img create -q -f qcow2 '%s' 1M", q.img);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x11 0 64k' '%s' >/dev/null", q.img);
    patch(q.img, 88 + 7, &bits, 1);
    q2_start(&q, 1);
    q2_rw(&q, false, 0, data, 4096);
    fd = open(q.img, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(pread(fd, field, 8, 88), ==, 8);
    g_assert_cmpuint(field[7], ==, bits);    /* reads change nothing */
    vb_fill_pattern(data, 4096, 3);
    q2_rw(&q, true, 0, data, 4096);
    g_assert_cmpint(pread(fd, field, 8, 88), ==, 8);
    close(fd);
    for (int i = 0; i < 8; i++) {
        g_assert_cmpuint(field[i], ==, 0);
    }
    q2_stop(&q);
    check_clean(q.img);
    q2_cleanup(&q);
}

/* ---- the --blockdev syntax and QMP ------------------------------------ */

static void test_blockdev_qmp(void)
{
    uint64_t size = 1024 * 1024;
    g_autofree char *qmp_path = NULL, *chardev = NULL, *fdef = NULL;
    g_autofree char *exp = NULL, *sock2 = NULL, *img2 = NULL;
    g_autofree char *cmd = NULL, *base2 = NULL, *ov = NULL;
    g_autofree char *out = NULL;
    g_autoptr(JsonNode) r = NULL;
    g_autoptr(JsonNode) r2 = NULL;
    int status;
    g_autofree uint8_t *expect = NULL;
    g_autoptr(GError) err = NULL;
    VhostUserFrontendOptions o = { .num_queues = 1,
                                   .connect_timeout_ms = 10000 };
    VhostUserFrontend *fe;
    uint8_t *buf;
    VbQmp m;
    Q2 q;

    q2_init(&q, size);
    /* The export of vb-daemon.c serves a plain file here. */
    q.d.spec[0].extra = NULL;
    g_assert_true(g_file_set_contents(q.img, "", 0, NULL));
    g_assert_cmpint(truncate(q.img, size), ==, 0);
    img2 = q2_path(&q, "vm1.qcow2");
    base2 = q2_path(&q, "base2.qcow2");
    ov = q2_path(&q, "ov.qcow2");
    vb_sh("qemu-img create -q -f qcow2 '%s' 1M", base2);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x72 0 1M' '%s' >/dev/null", base2);
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base2.qcow2 -F qcow2 "
       "vm1.qcow2 1M && qemu-img create -q -f qcow2 -b base2.qcow2 "
       "-F qcow2 ov.qcow2 1M", q.d.dir);
    vb_sh("qemu-io -f qcow2 -c 'write -P 0x71 4k 60k' '%s' >/dev/null", img2);
    expect = convert_raw(&q, img2, NULL);
    qmp_path = q2_path(&q, "qmp.sock");
    sock2 = q2_path(&q, "vm1.sock");
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              qmp_path);
    fdef = g_strdup_printf("driver=file,node-name=f0,filename=%s", img2);
    exp = g_strdup_printf("type=vhost-user-blk,id=e1,node-name=q0,"
                          "addr.type=unix,addr.path=%s,writable=on", sock2);
    {
        const char *args[] = {
            "--blockdev", fdef,
            "--blockdev", "driver=qcow2,node-name=q0,file=f0,"
                          "l2-cache-size=1M",
            "--export", exp,
            "--chardev", chardev, "--monitor", "chardev=mon", NULL,
        };

        q.d.args = args;
        vb_daemon_start(&q.d);
        q.d.args = NULL;
    }
    vb_qmp_connect(&m, qmp_path, &q.d);
    o.socket_path = sock2;
    fe = vhost_user_frontend_new(&o, &err);
    g_assert_no_error(err);
    vb_start(fe);
    buf = vhost_user_frontend_mem_alloc(fe, size, 4096, &err);
    g_assert_no_error(err);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_IN, 0, buf, size, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(memcmp(buf, expect, size) == 0);
    vhost_user_frontend_free(fe);

    /* QMP: the same keys as QSD; the node shows its driver and file.
     * (vm1.qcow2 is q0's: the image lock keeps a second node off it.) */
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"file\", \"node-name\": \"f1\", "
                          "\"filename\": \"%s\", \"read-only\": true}}",
                          base2);
    vb_qmp_ok(&m, cmd);
    vb_qmp_ok(&m, "{\"execute\": \"blockdev-add\", \"arguments\": "
              "{\"driver\": \"qcow2\", \"node-name\": \"q1\", "
              "\"file\": \"f1\", \"read-only\": true, "
              "\"backing\": null}}");
    vb_qmp_fails(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
                 "{\"node-name\": \"f1\"}}",
                 "Block device f1 is in use: the qcow2 node 'q1' uses it as "
                 "its file or backing child; delete that one first");
    r = vb_qmp(&m, "{\"execute\": \"query-named-block-nodes\"}", NULL);
    {
        JsonArray *a = json_node_get_array(r);
        bool found = false;

        for (guint i = 0; i < json_array_get_length(a); i++) {
            JsonObject *n = json_array_get_object_element(a, i);

            if (!strcmp(json_object_get_string_member(n, "node-name"),
                        "q1")) {
                g_assert_cmpstr(json_object_get_string_member(n, "drv"), ==,
                                "qcow2");
                found = true;
            }
        }
        g_assert_true(found);
    }
    vb_qmp_ok(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"q1\"}}");
    vb_qmp_ok(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"f1\"}}");

    /* A backing node by name (backing=NODE) under a new overlay. */
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"qcow2\", \"node-name\": \"qb\", "
                          "\"read-only\": true, \"file\": {\"driver\": "
                          "\"file\", \"filename\": \"%s\"}}}", base2);
    vb_qmp_ok(&m, cmd);
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"qcow2\", \"node-name\": \"qo\", "
                          "\"backing\": \"qb\", \"file\": {\"driver\": "
                          "\"file\", \"filename\": \"%s\"}}}", ov);
    vb_qmp_ok(&m, cmd);
    vb_qmp_fails(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
                 "{\"node-name\": \"qb\"}}",
                 "Block device qb is in use: the qcow2 node 'qo' uses it as "
                 "its file or backing child; delete that one first");

    /* The chain as QEMU shows it. */
    r2 = vb_qmp(&m, "{\"execute\": \"query-named-block-nodes\"}", NULL);
    {
        JsonArray *a = json_node_get_array(r2);
        int seen = 0;

        for (guint i = 0; i < json_array_get_length(a); i++) {
            JsonObject *n = json_array_get_object_element(a, i);
            const char *name = json_object_get_string_member(n, "node-name");
            JsonObject *img = json_object_get_object_member(n, "image");

            if (!strcmp(name, "q0") || !strcmp(name, "qo")) {
                JsonObject *bi = json_object_get_object_member(
                    img, "backing-image");

                g_assert_cmpint(json_object_get_int_member(
                                    n, "backing_file_depth"), ==, 1);
                /* QEMU's: the backing node's file name, resolved. */
                g_assert_cmpstr(json_object_get_string_member(
                                    n, "backing_file"), ==, base2);
                g_assert_cmpint(json_object_get_int_member(
                                    img, "cluster-size"), ==, 65536);
                g_assert_nonnull(bi);
                g_assert_cmpstr(json_object_get_string_member(bi, "format"),
                                ==, "qcow2");
                g_assert_cmpstr(json_object_get_string_member(
                    json_object_get_object_member(
                        json_object_get_object_member(img,
                                                      "format-specific"),
                        "data"), "compat"), ==, "1.1");
                seen++;
            }
        }
        g_assert_cmpint(seen, ==, 2);
    }
    vb_qmp_ok(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"qo\"}}");
    vb_qmp_ok(&m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"qb\"}}");

    /* Growing past what the L1 table covers (512 MiB here). */
    vb_qmp_ok(&m, "{\"execute\": \"block_resize\", \"arguments\": "
              "{\"node-name\": \"q0\", \"size\": 3221225472}}");
    vb_qmp_close(&m);
    g_assert_cmpint(kill(q.d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(q.d.pid, &status, 0), ==, q.d.pid);
    q.d.pid = 0;
    check_clean(img2);
    g_assert_cmpint(vb_sh_status(&out, "qemu-img info '%s'", img2), ==, 0);
    g_assert_nonnull(strstr(out, "virtual size: 3 GiB"));
    q2_cleanup(&q);
}

/* ---- two queues allocating the same clusters -------------------------- */

typedef struct Racer {
    Q2 *q;
    unsigned int queue;
    uint32_t seed;
    pthread_barrier_t *barrier;
} Racer;

#define RACE_RANGES 16
#define RACE_LEN (3 * 64 * 1024 + 1024)

static uint64_t race_off(int i)
{
    return (uint64_t)i * 512 * 1024 + 1024;
}

static gpointer racer(gpointer opaque)
{
    Racer *r = opaque;
    uint8_t *b = r->q->buf + (r->queue + 1) * RACE_LEN * 2;

    for (int i = 0; i < RACE_RANGES; i++) {
        vb_fill_pattern(b, RACE_LEN, r->seed + i);
        pthread_barrier_wait(r->barrier);
        g_assert_cmpint(vb_req(r->q->fe, r->queue, VIRTIO_BLK_T_OUT,
                               race_off(i) / 512, b, RACE_LEN, false, NULL),
                        ==, VIRTIO_BLK_S_OK);
    }
    return NULL;
}

static void test_concurrent_alloc(void)
{
    pthread_barrier_t barrier;
    Racer r[2];
    GThread *t[2];
    Q2 q;
    g_autofree uint8_t *a = g_malloc(RACE_LEN), *b = g_malloc(RACE_LEN);

    q2_init(&q, 16 * 1024 * 1024);
    vb_sh("qemu-img create -q -f qcow2 '%s' 16M", q.img);
    q2_start(&q, 2);
    pthread_barrier_init(&barrier, NULL, 2);
    for (int i = 0; i < 2; i++) {
        r[i] = (Racer){ &q, i, 1000 * (i + 1), &barrier };
        t[i] = g_thread_new("racer", racer, &r[i]);
    }
    for (int i = 0; i < 2; i++) {
        g_thread_join(t[i]);
    }
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < RACE_RANGES; i++) {
        g_assert_cmpint(vb_req(q.fe, 0, VIRTIO_BLK_T_IN, race_off(i) / 512,
                               q.buf, RACE_LEN, true, NULL), ==,
                        VIRTIO_BLK_S_OK);
        vb_fill_pattern(a, RACE_LEN, 1000 + i);
        vb_fill_pattern(b, RACE_LEN, 2000 + i);
        g_assert_true(!memcmp(q.buf, a, RACE_LEN) ||
                      !memcmp(q.buf, b, RACE_LEN));
    }
    q2_stop(&q);
    check_clean(q.img);
    q2_cleanup(&q);
}

/* ---- allocating writes in flight together ---------------------------- */

/*
 * 32 allocating writes in one batch, four into each of 8 clusters (the
 * metadata thread overlaps the data writes of independent ones, and
 * must make a write into a cluster whose allocation is in flight wait
 * for it, or the second allocation would hide the first's data), then
 * partial overwrites and reads in a second batch: everything reads
 * back, before and after a restart, and the image is clean.
 */
static void test_deep_alloc(void)
{
    uint64_t size = 16 * 1024 * 1024;
    g_autofree uint8_t *expect = g_malloc0(size);
    g_autofree uint8_t *after = NULL;
    VhostUserFrontendCompletion c[32];
    Q2 q;

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 '%s' 16M", q.img);
    q2_start(&q, 1);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 32; i++) {
            /* cluster i % 8 (every third 64 KiB), piece i / 8 */
            uint64_t off = (uint64_t)(i % 8) * 3 * 65536 +
                           (uint64_t)(i / 8) * 16384 + round * 4096;
            struct iovec iov = { q.buf + i * 4096, 4096 };

            vb_fill_pattern(q.buf + i * 4096, 4096, 4000 + round * 100 + i);
            memcpy(expect + off, q.buf + i * 4096, 4096);
            g_assert_cmpint(vhost_user_frontend_blk_submit(
                                q.fe, 0, VIRTIO_BLK_T_OUT, off / 512, &iov,
                                1, false, NULL), >=, 0);
        }
        g_assert_cmpint(vhost_user_frontend_kick(q.fe, 0), >=, 0);
        g_assert_cmpint(vb_reap_n(q.fe, 0, c, 32), ==, 32);
        for (int i = 0; i < 32; i++) {
            g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
        }
    }
    q2_check_reads(&q, expect);
    q2_flush(&q);
    q2_stop(&q);
    check_clean(q.img);
    after = convert_raw(&q, q.img, NULL);
    g_assert_true(memcmp(after, expect, size) == 0);
    q2_cleanup(&q);
}

/* ---- a crash mid-write ------------------------------------------------ */

static void test_crash(void)
{
    uint64_t size = 32 * 1024 * 1024;
    g_autofree uint8_t *acked = g_malloc0(size);
    g_autofree uint8_t *after = NULL;
    g_autofree char *out = NULL;
    struct iovec iov;
    int st;
    Q2 q;

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 -o cluster_size=4096 '%s' 32M", q.img);
    q2_start(&q, 1);
    /* Acknowledged and flushed: must survive. */
    for (int i = 0; i < 16; i++) {
        write_pattern(&q, acked, (uint64_t)i * 1024 * 1024 + 512, 9216,
                      500 + i);
    }
    q2_flush(&q);
    /* A burst of allocating writes, and the daemon dies among them. */
    vb_fill_pattern(q.buf, 64 * 1024, 77);
    iov.iov_base = q.buf;
    iov.iov_len = 64 * 1024;
    for (int i = 0; i < 32; i++) {
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            q.fe, 0, VIRTIO_BLK_T_OUT,
                            (16 * 1024 * 1024 + (uint64_t)i * 200 * 1024) /
                            512, &iov, 1, false, NULL), >=, 0);
        if (i % 8 == 7) {
            vhost_user_frontend_kick(q.fe, 0);
        }
    }
    vb_daemon_kill(&q.d);
    wait_unlocked(q.img);
    vhost_user_frontend_free(q.fe);
    q.fe = NULL;
    /* Leaks (exit 3) are allowed, corruption (2) is not. */
    st = vb_sh_status(&out, "qemu-img check '%s'", q.img);
    if (st != 0 && st != 3) {
        g_error("qemu-img check after a crash: exit %d\n%s", st, out);
    }
    after = convert_raw(&q, q.img, NULL);
    for (int i = 0; i < 16; i++) {
        uint64_t off = (uint64_t)i * 1024 * 1024 + 512;

        g_assert_true(memcmp(after + off, acked + off, 9216) == 0);
    }
    /* And the daemon serves it again, allocating past what the crash
     * left counted beyond the end of the file (the rest of a batch of
     * reserved clusters): those must not be handed out again. */
    q2_start(&q, 1);
    {
        g_autofree uint8_t *got = g_malloc(9216);

        q2_rw(&q, false, 512, got, 9216);
        g_assert_true(memcmp(got, acked + 512, 9216) == 0);
    }
    /* A few allocations (a new batch, the file grown over part of it),
     * then a crash while idle: the rest of the batch stays counted past
     * the end of the file. */
    for (int i = 0; i < 4; i++) {
        write_pattern(&q, acked, 20 * 1024 * 1024 + (uint64_t)i * 65536,
                      8192, 800 + i);
    }
    q2_flush(&q);
    vb_daemon_kill(&q.d);
    wait_unlocked(q.img);
    vhost_user_frontend_free(q.fe);
    q.fe = NULL;
    /* The next session allocates from the file's end on. */
    q2_start(&q, 1);
    for (int i = 0; i < 16; i++) {
        write_pattern(&q, acked, 24 * 1024 * 1024 + (uint64_t)i * 65536,
                      8192, 900 + i);
    }
    q2_flush(&q);
    q2_stop(&q);
    g_free(out);
    out = NULL;
    st = vb_sh_status(&out, "qemu-img check '%s'", q.img);
    if (st != 0 && st != 3) {
        g_error("qemu-img check after a restart: exit %d\n%s", st, out);
    }
    g_free(after);
    after = convert_raw(&q, q.img, NULL);
    g_assert_true(memcmp(after + 20 * 1024 * 1024,
                         acked + 20 * 1024 * 1024, 12 * 1024 * 1024) == 0);
    q2_cleanup(&q);
}

/* A guest flush, tried up to three times (two injected failures). */
static bool flush_retry(Q2 *q)
{
    for (int i = 0; i < 3; i++) {
        if (vb_req(q->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                   NULL) == VIRTIO_BLK_S_OK) {
            return true;
        }
    }
    return false;
}

/*
 * The file node fails two writes or flushes somewhere in the metadata
 * sequence (after K good ones, for each K): the guest sees errors, never
 * corruption.  The first 16 of the file's requests cover the first
 * write's allocation (refcounts, flush, new L2 table, flush, L1 entry),
 * the data writes, and the guest flush that writes the metadata back
 * (refcounts, flush, L2 slices, flush); a second round discards the
 * first cluster (its refcount is dropped only after a flush) and
 * flushes again.  Then either a clean stop or a kill -9 (@data: FAULTS_*):
 * after either, qemu-img check finds no corruption (leaks allowed), and
 * every write the guest saw succeed reads back if a completed flush
 * covered it (a clean stop is one).  FAULTS_CUT fails every request
 * after the K-th, then kills: the file as a crash right after its K-th
 * write or flush would leave it (a kill alone leaves everything written
 * in the page cache, so only this shows a wrong order between writes).
 */
enum { FAULTS_STOP, FAULTS_KILL, FAULTS_CUT };

static void test_faults(gconstpointer data)
{
    int mode = GPOINTER_TO_INT(data);
    bool crash = mode != FAULTS_STOP;
    uint64_t size = 8 * 1024 * 1024;

    for (int k = 0; k < 20; k++) {
        g_autofree uint8_t *expect = NULL, *after = NULL, *zeroes = NULL;
        g_autofree char *extra = g_strdup_printf(
            "format=qcow2,inject-error=write+flush,inject-after=%d%s", k,
            mode == FAULTS_CUT ? "" : ",inject-count=2");
        g_autofree char *out = NULL;
        g_autofree uint8_t *buf = g_malloc(8192);
        struct virtio_blk_discard_write_zeroes *seg;
        bool ok[6], flushed, discarded, flushed2;
        int st;
        Q2 q;

        q2_init(&q, size);
        q.d.spec[0].extra = extra;
        vb_sh("qemu-img create -q -f qcow2 '%s' 8M", q.img);
        expect = convert_raw(&q, q.img, NULL);
        zeroes = g_malloc0(65536);
        q2_start(&q, 1);
        for (int i = 0; i < 6; i++) {
            uint64_t off = (uint64_t)i * 1024 * 1024 + 4096;

            vb_fill_pattern(buf, 8192, 300 + i);
            memcpy(q.buf, buf, 8192);
            ok[i] = vb_req(q.fe, 0, VIRTIO_BLK_T_OUT, off / 512, q.buf, 8192,
                           false, NULL) == VIRTIO_BLK_S_OK;
        }
        flushed = flush_retry(&q);
        /* Round two: the first cluster (64 KiB) discarded, a flush. */
        seg = (void *)q.buf;
        seg->sector = 0;
        seg->num_sectors = 65536 / 512;
        seg->flags = 0;
        discarded = vb_req(q.fe, 0, VIRTIO_BLK_T_DISCARD, 0, seg,
                           sizeof(*seg), false, NULL) == VIRTIO_BLK_S_OK;
        flushed2 = flush_retry(&q);
        for (int i = 0; i < 6; i++) {
            if (ok[i]) {
                vb_fill_pattern(expect + i * 1024 * 1024 + 4096, 8192,
                                300 + i);
            }
        }
        if (crash) {
            vb_daemon_kill(&q.d);
            wait_unlocked(q.img);
            vhost_user_frontend_free(q.fe);
            q.fe = NULL;
        } else {
            q2_stop(&q);
            flushed = flushed2 = true;
        }
        st = vb_sh_status(&out, "qemu-img check '%s'", q.img);
        if (st != 0 && st != 3) {
            g_error("qemu-img check after faults (after=%d%s): exit %d\n%s",
                    k, crash ? ", killed" : "", st, out);
        }
        after = convert_raw(&q, q.img, NULL);
        for (int i = 0; i < 6; i++) {
            uint64_t off = (uint64_t)i * 1024 * 1024 + 4096;

            if (!ok[i] || !flushed) {
                continue;
            }
            if (i == 0 && discarded) {
                /* Discarded: zeroes once flushed, else either. */
                if (flushed2) {
                    g_assert_true(memcmp(after, zeroes, 65536) == 0);
                } else {
                    g_assert_true(memcmp(after + off, expect + off,
                                         8192) == 0 ||
                                  memcmp(after, zeroes, 65536) == 0);
                }
                continue;
            }
            g_assert_true(memcmp(after + off, expect + off, 8192) == 0);
        }
        q2_cleanup(&q);
    }
}

/* ---- reuse of freed clusters ------------------------------------------ */

static uint64_t file_size(const char *path)
{
    struct stat st;

    g_assert_cmpint(stat(path, &st), ==, 0);
    return st.st_size;
}

/*
 * Clusters freed by a discard are handed out again in the same session:
 * a guest that trims and rewrites does not grow the file.  A crash
 * after the reuse leaves no cluster named twice (qemu-img check finds
 * no corruption), and what was flushed reads back.
 */
static void test_reuse(void)
{
    const uint64_t size = 64 * 1024 * 1024, n = 8 * 1024 * 1024;
    g_autofree uint8_t *expect = g_malloc0(size);
    g_autofree uint8_t *after = NULL;
    g_autofree char *out = NULL;
    uint64_t before;
    struct iovec iov;
    int st;
    Q2 q;

    q2_init(&q, size);
    vb_sh("qemu-img create -q -f qcow2 '%s' 64M", q.img);
    q2_start(&q, 1);
    write_pattern(&q, expect, 0, n, 1);
    /* Partial clusters into new ones (the rest is left a hole). */
    for (int i = 0; i < 16; i++) {
        write_pattern(&q, expect, 16 * 1024 * 1024 + i * 131072 + 4096,
                      4096, 50 + i);
    }
    q2_flush(&q);
    before = file_size(q.img);
    zero_req(&q, VIRTIO_BLK_T_DISCARD, 0, n, false);
    memset(expect, 0, n);
    /* The flush makes the discard durable: the clusters are free. */
    q2_flush(&q);
    write_pattern(&q, expect, 32 * 1024 * 1024, n, 2);
    /* Partial clusters into reused ones: the rest must not show what
     * the cluster held before. */
    for (int i = 0; i < 16; i++) {
        write_pattern(&q, expect, 48 * 1024 * 1024 + i * 65536 + 8192,
                      4096, 70 + i);
    }
    q2_flush(&q);
    /* Reused: the file grew by far less than the rewrite's size (by
     * what was left of the batch of clusters reserved before). */
    if (file_size(q.img) >= before + n / 2) {
        g_error("%s grew from %" PRIu64 " to %" PRIu64 " bytes: freed "
                "clusters were not reused", q.img, before,
                file_size(q.img));
    }
    q2_check_reads(&q, expect);

    /* Free some again, reuse them, and die among unflushed writes. */
    zero_req(&q, VIRTIO_BLK_T_DISCARD, 32 * 1024 * 1024, 2 * 1024 * 1024,
             false);
    memset(expect + 32 * 1024 * 1024, 0, 2 * 1024 * 1024);
    q2_flush(&q);
    vb_fill_pattern(q.buf, 64 * 1024, 99);
    iov.iov_base = q.buf;
    iov.iov_len = 64 * 1024;
    for (int i = 0; i < 32; i++) {
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            q.fe, 0, VIRTIO_BLK_T_OUT,
                            (56 * 1024 * 1024 + (uint64_t)i * 128 * 1024) /
                            512, &iov, 1, false, NULL), >=, 0);
        if (i % 8 == 7) {
            vhost_user_frontend_kick(q.fe, 0);
        }
    }
    vb_daemon_kill(&q.d);
    wait_unlocked(q.img);
    vhost_user_frontend_free(q.fe);
    q.fe = NULL;
    /* Leaks (exit 3) are allowed, corruption (2) is not. */
    st = vb_sh_status(&out, "qemu-img check '%s'", q.img);
    if (st != 0 && st != 3) {
        g_error("qemu-img check after a crash: exit %d\n%s", st, out);
    }
    after = convert_raw(&q, q.img, NULL);
    g_assert_true(memcmp(after, expect, 56 * 1024 * 1024) == 0);
    q2_cleanup(&q);
}

/*
 * ---- crash points in a reuse sequence ----------------------------------
 *
 * A sequence whose later allocations reuse clusters an earlier discard
 * freed, run with the file failing its writes and flushes (after the
 * K-th, for every K the sequence has; FAULTS_* as in test_faults()):
 * stage 1 writes 4 MiB (64 clusters: the whole batch of data clusters
 * reserved at once, see alloc_data_cluster() in block/qcow2.c), flush;
 * stage 2 discards its second MiB (16 clusters), flush; stage 3
 * discards its first 512 KiB (8 clusters, lower on the file) without a
 * flush, then writes 12 whole clusters and 2 partial ones elsewhere: a
 * new batch, whose first 14 clusters must be stage 2's; flush.  Were a
 * cluster handed out while an entry on the file still named it (stage
 * 3's discard not yet durable), a crash would leave the discarded range
 * reading another range's data; were a reused cluster taken for a
 * hole, a partial write would leave the rest showing stage 1's data.
 * Without faults the file must not grow from stage 1's flush to stage
 * 3's: the freed clusters were reused.  Checked against the code broken
 * both ways: free_later() queueing for reuse without waiting for the
 * flush fails at inject-after=13 (cut), every data cluster taken for a
 * hole at inject-after=18.
 */
#define FR_SIZE (8u << 20)
#define FR_CLUSTER 65536u
#define FR_NCL (FR_SIZE / FR_CLUSTER)
#define FR_STAGES 4             /* 0: the image as created, 1..3 */

typedef struct FrRun {
    /* What each stage means the disk to read: 0 all of it, the others
     * only in the clusters they touched (see fr_img()). */
    uint8_t *img[FR_STAGES];
    bool touched[FR_STAGES][FR_NCL];
    bool acked[FR_STAGES][FR_NCL];
    bool flushed[FR_STAGES];    /* the flush after stage s completed */
    bool failed;                /* some request or flush try failed */
    uint64_t size_before, size_after;   /* after the flushes of 1 and 3 */
} FrRun;

/*
 * Disk-sized buffers kept from run to run: fresh ones cost each run
 * more in page faults than the rest of its checks.
 */
static uint8_t *fr_buf(int i)
{
    /* stages 1.., what was read, stage 0 without and with backing */
    static uint8_t *bufs[FR_STAGES + 3];

    if (!bufs[i]) {
        bufs[i] = g_malloc0(FR_SIZE);
    }
    return bufs[i];
}

/* Cluster @c as stage @st meant it: as the last stage up to it that
 * touched it left it. */
static const uint8_t *fr_img(const FrRun *r, int st, uint64_t c)
{
    while (st > 0 && !r->touched[st][c]) {
        st--;
    }
    return r->img[st] + c * FR_CLUSTER;
}

/* One guest request of stage @st over [off, off + len). */
static void fr_req(Q2 *q, FrRun *r, int st, uint32_t type, uint64_t off,
                   uint32_t len, uint32_t seed)
{
    uint64_t first = off / FR_CLUSTER, last = (off + len - 1) / FR_CLUSTER;
    bool ok;

    /* The rest of a partly written cluster: as it was. */
    for (uint64_t c = first; c <= last; c++) {
        if (!r->touched[st][c]) {
            memcpy(r->img[st] + c * FR_CLUSTER, fr_img(r, st - 1, c),
                   FR_CLUSTER);
        }
    }
    if (type == VIRTIO_BLK_T_OUT) {
        vb_fill_pattern(r->img[st] + off, len, seed);
        memcpy(q->buf, r->img[st] + off, len);
        ok = vb_req(q->fe, 0, type, off / 512, q->buf, len, false,
                    NULL) == VIRTIO_BLK_S_OK;
    } else {
        struct virtio_blk_discard_write_zeroes *seg = (void *)q->buf;

        /* A discard reads as zeroes, backing file or not (zero flag). */
        memset(r->img[st] + off, 0, len);
        seg->sector = off / 512;
        seg->num_sectors = len / 512;
        seg->flags = 0;
        ok = vb_req(q->fe, 0, type, 0, seg, sizeof(*seg), false,
                    NULL) == VIRTIO_BLK_S_OK;
    }
    for (uint64_t c = first; c <= last; c++) {
        r->touched[st][c] = true;
        r->acked[st][c] = ok;
    }
    r->failed |= !ok;
}

/* The guest flush closing stage @st, tried up to three times. */
static void fr_flush(Q2 *q, FrRun *r, int st)
{
    for (int i = 0; i < 3 && !r->flushed[st]; i++) {
        r->flushed[st] = vb_req(q->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0,
                                false, NULL) == VIRTIO_BLK_S_OK;
        r->failed |= !r->flushed[st];
    }
}

/*
 * The image (and its backing file) in @q's directory: made by qemu-img
 * once, copied for the other runs (a process less per run).
 */
static void fr_images(Q2 *q, bool backing)
{
    static struct {
        char *img, *base;
        size_t img_len, base_len;
    } made[2];
    g_autofree char *base = q2_path(q, "base.qcow2");

    if (!made[backing].img) {
        if (backing) {
            vb_sh("qemu-img create -q -f qcow2 '%s' 8M", base);
            vb_sh("qemu-io -f qcow2 -c 'write -P 0x61 0 8M' '%s' >/dev/null",
                  base);
            vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base.qcow2 "
                  "-F qcow2 '%s' 8M", q->d.dir, q->img);
            made[1].base = (char *)read_whole(base, &made[1].base_len);
        } else {
            vb_sh("qemu-img create -q -f qcow2 '%s' 8M", q->img);
        }
        made[backing].img = (char *)read_whole(q->img,
                                               &made[backing].img_len);
        return;
    }
    if (backing) {
        g_assert_true(g_file_set_contents(base, made[1].base,
                                          made[1].base_len, NULL));
    }
    g_assert_true(g_file_set_contents(q->img, made[backing].img,
                                      made[backing].img_len, NULL));
}

/*
 * Run the sequence, the file failing writes and flushes after its @k-th
 * (@mode: FAULTS_*, see test_faults()), and check the image.  Returns
 * whether the guest saw any failure.
 */
static bool fr_run(bool backing, int mode, int k)
{
    g_autofree char *extra = g_strdup_printf(
        "format=qcow2,inject-error=write+flush,inject-after=%d%s", k,
        mode == FAULTS_CUT ? "" : ",inject-count=2");
    g_autofree char *out = NULL;
    g_autofree char *raw = NULL;
    FrRun *r = g_new0(FrRun, 1);
    uint8_t *after = fr_buf(FR_STAGES);
    bool failed;
    int st, fd;
    Q2 q;

    q2_init(&q, FR_SIZE);
    q.d.spec[0].extra = extra;
    fr_images(&q, backing);
    for (int s = 1; s < FR_STAGES; s++) {
        r->img[s] = fr_buf(s);
    }
    r->img[0] = fr_buf(FR_STAGES + 1 + backing);
    if (backing && r->img[0][0] != 0x61) {
        memset(r->img[0], 0x61, FR_SIZE);
    }
    q2_start(&q, 1);

    /* Stage 1: 64 new clusters, the first batch used up. */
    fr_req(&q, r, 1, VIRTIO_BLK_T_OUT, 0, 4 * 1024 * 1024, 600);
    fr_flush(&q, r, 1);
    r->size_before = file_size(q.img);

    /* Stage 2: 16 of them dropped, for good. */
    fr_req(&q, r, 2, VIRTIO_BLK_T_DISCARD, 1024 * 1024, 1024 * 1024, 0);
    fr_flush(&q, r, 2);

    /*
     * Stage 3: 8 more dropped, lower on the file, and no flush: their
     * entries still name them on the file, so they must not be handed
     * out yet.  Then 14 clusters written, 12 whole and 2 partial: on the
     * 16 freed in stage 2.
     */
    fr_req(&q, r, 3, VIRTIO_BLK_T_DISCARD, 0, 512 * 1024, 0);
    fr_req(&q, r, 3, VIRTIO_BLK_T_OUT, 5 * 1024 * 1024, 3 * CHUNK, 700);
    fr_req(&q, r, 3, VIRTIO_BLK_T_OUT, 6 * 1024 * 1024 + 8192, 4096, 710);
    fr_req(&q, r, 3, VIRTIO_BLK_T_OUT, 6 * 1024 * 1024 + FR_CLUSTER + 512,
           1024, 711);
    fr_flush(&q, r, 3);
    r->size_after = file_size(q.img);

    if (mode == FAULTS_STOP) {
        /* A clean close makes every acknowledged write durable. */
        q2_stop(&q);
        for (int s = 1; s < FR_STAGES; s++) {
            r->flushed[s] = true;
        }
    } else {
        vb_daemon_kill(&q.d);
        wait_unlocked(q.img);
        vhost_user_frontend_free(q.fe);
        q.fe = NULL;
    }
    st = vb_sh_status(&out, "qemu-img check '%s'", q.img);
    if (st != 0 && st != 3) {
        g_error("qemu-img check after faults (inject-after=%d, mode %d%s): "
                "exit %d\n%s", k, mode, backing ? ", backing file" : "", st,
                out);
    }
    raw = q2_path(&q, "conv.raw");
    vb_sh("qemu-img convert -O raw '%s' '%s'", q.img, raw);
    fd = open(raw, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(file_size(raw), ==, FR_SIZE);
    for (size_t done = 0; done < FR_SIZE;) {
        ssize_t n = read(fd, after + done, FR_SIZE - done);

        g_assert_cmpint(n, >, 0);
        done += n;
    }
    close(fd);

    /*
     * Cluster by cluster: what the last stage that touched it, was
     * acknowledged and was followed by a completed flush wrote, or what
     * a later stage meant it to read (that stage's writes may or may not
     * have reached the file).  Nothing else: not an older stage's data,
     * and never data the guest wrote elsewhere.
     */
    for (uint64_t c = 0; c < FR_NCL; c++) {
        uint64_t off = c * FR_CLUSTER;
        int from = 0;
        bool match = false;

        for (int s = 1; s < FR_STAGES; s++) {
            bool durable = false;

            for (int f = s; f < FR_STAGES; f++) {
                durable |= r->flushed[f];
            }
            if (r->touched[s][c] && r->acked[s][c] && durable) {
                from = s;
            }
        }
        for (int s = from; s < FR_STAGES && !match; s++) {
            match = !memcmp(after + off, fr_img(r, s, c), FR_CLUSTER);
        }
        if (!match) {
            g_error("inject-after=%d, mode %d%s: guest cluster %" PRIu64
                    " reads as no stage from %d on left it (%s)", k, mode,
                    backing ? ", backing file" : "", c, from,
                    r->failed ? "after failures" : "no failure");
        }
    }
    failed = r->failed;
    if (!failed) {
        /* Stage 3 took the freed clusters: the file did not grow. */
        for (uint64_t c = 0; c < FR_NCL; c++) {
            g_assert_true(memcmp(after + c * FR_CLUSTER,
                                 fr_img(r, FR_STAGES - 1, c),
                                 FR_CLUSTER) == 0);
        }
        if (r->size_after != r->size_before) {
            g_error("%s grew from %" PRIu64 " to %" PRIu64 " bytes: the "
                    "discarded clusters were not reused", q.img,
                    r->size_before, r->size_after);
        }
    }
    g_free(r);
    q2_cleanup(&q);
    return failed;
}

typedef struct FrCase {
    int mode;
    bool backing;
} FrCase;

static void test_faults_reuse(gconstpointer data)
{
    /* The sequence's count of file writes and flushes, once known. */
    static int count[2];
    const FrCase *c = data;
    int k = 0;

    /*
     * K from 0 on, until a run in which no fault was injected: the
     * first K at or past the count of the file's writes and flushes up
     * to the completion of the last guest flush.  With FAULTS_CUT that
     * run is exactly K = count: below it, the file's K+1-th request
     * fails and every later one, the flush that ends the last guest
     * flush among them (and its retries), so the guest sees a failure.
     * The other modes fail two requests only: they must end at the same
     * K (else a failure went unreported), checked when the cut run came
     * first, as it does in a whole run of this program.
     */
    while (fr_run(c->backing, c->mode, k)) {
        k++;
        g_assert_cmpint(k, <, 1000);
    }
    g_test_message("reuse sequence%s: %d file writes and flushes",
                   c->backing ? " over a backing file" : "", k);
    if (c->mode == FAULTS_CUT) {
        count[c->backing] = k;
    } else if (count[c->backing]) {
        g_assert_cmpint(k, ==, count[c->backing]);
    }
}

int main(int argc, char **argv)
{
    g_autofree char *qemu_img = NULL;
    g_autofree char *qemu_io = NULL;
    static const MatrixCase matrix[] = {
        { 512, "0.10" }, { 512, "1.1" },
        { 4096, "0.10" }, { 4096, "1.1" },
        { 65536, "0.10" }, { 65536, "1.1" },
        { 2 * 1024 * 1024, "0.10" }, { 2 * 1024 * 1024, "1.1" },
    };
    /* Cut first: the others check their end against its count. */
    static const FrCase fr_cases[] = {
        { FAULTS_CUT, false }, { FAULTS_KILL, false }, { FAULTS_STOP, false },
        { FAULTS_CUT, true },
    };

    g_test_init(&argc, &argv, NULL);
    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_message("vhost-blkd's own --export format= is tested here");
    }
    qemu_img = g_find_program_in_path("qemu-img");
    qemu_io = g_find_program_in_path("qemu-io");
    if (!qemu_img || !qemu_io) {
        g_test_skip("qemu-img and qemu-io are needed (qemu-utils)");
        return g_test_run();
    }
    for (size_t i = 0; i < G_N_ELEMENTS(matrix); i++) {
        g_autofree char *name = g_strdup_printf("/qcow2/read-write/%u-%s",
                                                matrix[i].cluster,
                                                matrix[i].compat);

        g_test_add_data_func(name, &matrix[i], test_matrix);
    }
    g_test_add_data_func("/qcow2/refcount-growth/2", "2",
                         test_refcount_growth);
    g_test_add_data_func("/qcow2/refcount-growth/64", "64",
                         test_refcount_growth);
    g_test_add_func("/qcow2/scattered", test_scattered);
    g_test_add_func("/qcow2/delayed-file", test_delayed_file);
    g_test_add_data_func("/qcow2/compressed/zlib", "zlib", test_compressed);
    g_test_add_data_func("/qcow2/compressed/zstd", "zstd", test_compressed);
    g_test_add_func("/qcow2/chain", test_chain);
    g_test_add_func("/qcow2/raw-backing", test_raw_backing);
    g_test_add_func("/qcow2/snapshot", test_snapshot);
    g_test_add_data_func("/qcow2/discard-zeroes/plain", GINT_TO_POINTER(0),
                         test_discard_zeroes);
    g_test_add_data_func("/qcow2/discard-zeroes/backing", GINT_TO_POINTER(1),
                         test_discard_zeroes);
    g_test_add_func("/qcow2/refusals", test_refusals);
    g_test_add_func("/qcow2/autoclear", test_autoclear);
    g_test_add_func("/qcow2/blockdev-qmp", test_blockdev_qmp);
    g_test_add_func("/qcow2/concurrent-alloc", test_concurrent_alloc);
    g_test_add_func("/qcow2/deep-alloc", test_deep_alloc);
    g_test_add_func("/qcow2/crash", test_crash);
    g_test_add_func("/qcow2/reuse", test_reuse);
    g_test_add_data_func("/qcow2/faults/stop", GINT_TO_POINTER(FAULTS_STOP),
                         test_faults);
    g_test_add_data_func("/qcow2/faults/kill", GINT_TO_POINTER(FAULTS_KILL),
                         test_faults);
    g_test_add_data_func("/qcow2/faults/cut", GINT_TO_POINTER(FAULTS_CUT),
                         test_faults);
    for (size_t i = 0; i < G_N_ELEMENTS(fr_cases); i++) {
        g_autofree char *name = g_strdup_printf(
            "/qcow2/faults-reuse/%s%s", fr_cases[i].mode == FAULTS_STOP ?
            "stop" : fr_cases[i].mode == FAULTS_KILL ? "kill" : "cut",
            fr_cases[i].backing ? "-backing" : "");

        g_test_add_data_func(name, &fr_cases[i], test_faults_reuse);
    }
    return g_test_run();
}
