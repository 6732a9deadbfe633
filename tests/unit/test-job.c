/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The job core's state machine (block/job.c) with a driver of the test's
 * own that finishes when the test says: QEMU's transitions and events,
 * its verb errors, pause/resume around ready, soft and forced cancel,
 * manual finalize and dismiss.  Also the dirty bitmap's marks and scan,
 * and a mirror onto a failing target (null nodes, error injection); a
 * mirror whose first copy lands late (file nodes, a delay injected);
 * the mirror's default granularity and its coalescing of dirty runs.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/dirty-bitmap.h"
#include "block/null.h"
#include "block/file.h"
#include "block/job.h"

typedef struct TestJob {
    bool started, cancelled, force, committed, aborted, cleaned, freed;
    unsigned int pauses, resumes;
    bool complete_ok;
} TestJob;

static AioContext *ctx;
static GString *events;

static void tj_start(Job *job)
{
    ((TestJob *)job->opaque)->started = true;
}

static void tj_pause(Job *job)
{
    ((TestJob *)job->opaque)->pauses++;
}

static void tj_resume(Job *job)
{
    ((TestJob *)job->opaque)->resumes++;
}

static void tj_cancel(Job *job, bool force)
{
    TestJob *t = job->opaque;

    t->cancelled = true;
    t->force = force;
}

static bool tj_complete(Job *job, GError **errp)
{
    TestJob *t = job->opaque;

    if (!t->complete_ok) {
        g_set_error(errp, VB_ERROR, 0, "no");
        return false;
    }
    job_completed(job, 0, NULL);
    return true;
}

static void tj_commit(Job *job)
{
    ((TestJob *)job->opaque)->committed = true;
}

static void tj_abort(Job *job)
{
    ((TestJob *)job->opaque)->aborted = true;
}

static void tj_clean(Job *job)
{
    ((TestJob *)job->opaque)->cleaned = true;
}

static void tj_free(Job *job)
{
    ((TestJob *)job->opaque)->freed = true;
}

static const JobDriver test_driver = {
    .type = "test",
    .start = tj_start,
    .pause = tj_pause,
    .resume = tj_resume,
    .cancel = tj_cancel,
    .complete = tj_complete,
    .commit = tj_commit,
    .abort = tj_abort,
    .clean = tj_clean,
    .free = tj_free,
};

static void on_event(void *opaque, Job *job, JobEvent ev,
                     const char *op, JobErrorAction action)
{
    static const char *const names[] = {
        [JOB_EVENT_READY] = "READY", [JOB_EVENT_PENDING] = "PENDING",
        [JOB_EVENT_COMPLETED] = "COMPLETED",
        [JOB_EVENT_CANCELLED] = "CANCELLED", [JOB_EVENT_ERROR] = "ERROR",
    };

    if (events->len) {
        g_string_append_c(events, ' ');
    }
    if (ev == JOB_EVENT_STATUS_CHANGE) {
        g_string_append(events, job_status_name(job->status));
    } else {
        g_string_append(events, names[ev]);
    }
}

static Job *new_job(TestJob *t, const char *id, bool af, bool ad)
{
    g_autoptr(GError) err = NULL;
    Job *job;

    memset(t, 0, sizeof(*t));
    g_string_truncate(events, 0);
    job = job_create(id, &test_driver, t, id, af, ad, 0, &err);
    g_assert_no_error(err);
    job_start(job);
    g_assert_true(t->started);
    return job;
}

/* Let the job's free run. */
static void drain(void)
{
    while (aio_poll(ctx, false)) {
    }
}

/* @ok: what the verb returned; *@err: its error, checked and freed. */
static void expect_verb_error(bool ok, GError **err, const char *msg)
{
    g_assert_false(ok);
    g_assert_nonnull(*err);
    g_assert_cmpstr((*err)->message, ==, msg);
    g_clear_error(err);
}

static void test_success_auto(void)
{
    TestJob t;
    Job *job = new_job(&t, "j0", true, true);
    GError *err = NULL;

    expect_verb_error(job_complete(job, &err), &err,
                      "Job 'j0' in state 'running' cannot accept command "
                      "verb 'complete'");
    expect_verb_error(job_dismiss(job, &err), &err,
                      "Job 'j0' in state 'running' cannot accept command "
                      "verb 'dismiss'");
    job_progress_set_remaining(job, 100);
    job_progress_update(job, 100);
    job_transition_to_ready(job);
    g_assert_true(job_is_ready(job));
    t.complete_ok = true;
    g_assert_true(job_complete(job, NULL));
    g_assert_true(t.committed && t.cleaned && !t.aborted);
    g_assert_cmpstr(events->str, ==, "created running ready READY waiting "
                    "pending PENDING COMPLETED concluded null");
    g_assert_false(t.freed);
    drain();
    g_assert_true(t.freed);
    g_assert_null(job_get("j0"));
}

static void test_pause_ready(void)
{
    TestJob t;
    Job *job = new_job(&t, "j1", true, true);
    GError *err = NULL;

    g_assert_true(job_user_pause(job, NULL));
    g_assert_true(job_should_pause(job));
    expect_verb_error(job_user_pause(job, &err), &err,
                      "Job is already paused");
    /* Ready while paused: it shows when the job resumes. */
    job_transition_to_ready(job);
    g_assert_cmpint(job->status, ==, JOB_STATUS_PAUSED);
    g_assert_true(job_user_resume(job, NULL));
    g_assert_cmpint(job->status, ==, JOB_STATUS_READY);
    g_assert_true(job_user_pause(job, NULL));
    g_assert_cmpint(job->status, ==, JOB_STATUS_STANDBY);
    expect_verb_error(job_finalize(job, &err), &err,
                      "Job 'j1' in state 'standby' cannot accept command "
                      "verb 'finalize'");
    g_assert_true(job_user_resume(job, NULL));
    g_assert_cmpuint(t.pauses, ==, 2);
    g_assert_cmpuint(t.resumes, ==, 2);
    /* Soft cancel of a ready job: the driver finishes as a success. */
    g_assert_true(job_user_cancel(job, false, NULL));
    g_assert_true(t.cancelled && !t.force && job->soft_cancelled);
    job_completed(job, 0, NULL);
    g_assert_cmpstr(events->str, ==, "created running paused running ready "
                    "READY standby ready waiting pending PENDING COMPLETED "
                    "concluded null");
    drain();
}

static void test_force_cancel_manual(void)
{
    TestJob t;
    Job *job = new_job(&t, "j2", false, false);
    GError *err = NULL;

    g_assert_true(job_user_pause(job, NULL));
    g_assert_true(job_user_cancel(job, true, NULL));
    g_assert_true(t.cancelled && t.force);
    /* Paused: it runs again to end, as in QEMU. */
    job_completed(job, 0, NULL);
    g_assert_true(t.aborted && !t.committed);
    g_assert_cmpint(job->status, ==, JOB_STATUS_CONCLUDED);
    expect_verb_error(job_user_cancel(job, true, &err), &err,
                      "Job 'j2' in state 'concluded' cannot accept command "
                      "verb 'cancel'");
    g_assert_true(job_dismiss(job, NULL));
    g_assert_cmpstr(events->str, ==, "created running paused running "
                    "aborting CANCELLED concluded null");
    drain();
    g_assert_true(t.freed);
}

static void test_manual_finalize_and_error(void)
{
    TestJob t;
    Job *job = new_job(&t, "j3", false, false);
    GError *err = NULL;

    job_completed(job, 0, NULL);
    g_assert_cmpint(job->status, ==, JOB_STATUS_PENDING);
    g_assert_true(job_finalize(job, NULL));
    g_assert_cmpint(job->status, ==, JOB_STATUS_CONCLUDED);
    g_assert_true(job_dismiss(job, NULL));
    drain();

    job = new_job(&t, "j4", true, false);
    job_report_error(job, "write", JOB_ERROR_STOP);
    g_assert_cmpint(job->status, ==, JOB_STATUS_PAUSED);
    g_assert_true(job_user_resume(job, NULL));
    job_completed(job, -EIO, g_strdup("Input/output error"));
    g_assert_cmpint(job->status, ==, JOB_STATUS_CONCLUDED);
    g_assert_cmpstr(job->err, ==, "Input/output error");
    g_assert_cmpstr(events->str, ==, "created running ERROR paused running "
                    "aborting COMPLETED concluded");
    expect_verb_error(job_set_speed(job, 1, &err), &err,
                      "Job 'j4' in state 'concluded' cannot accept command "
                      "verb 'set-speed'");
    g_assert_true(job_dismiss(job, NULL));
    drain();
}

static void test_ids(void)
{
    TestJob t;
    GError *err = NULL;
    Job *job = new_job(&t, "j5", true, true);

    g_assert_null(job_create("j5", &test_driver, &t, NULL, true, true, 0,
                             &err));
    g_assert_cmpstr(err->message, ==, "Job ID 'j5' already in use");
    g_clear_error(&err);
    g_assert_null(job_create("5x", &test_driver, &t, NULL, true, true, 0,
                             &err));
    g_assert_cmpstr(err->message, ==, "Invalid job ID '5x'");
    g_clear_error(&err);
    g_assert_true(job_user_cancel(job, true, NULL));
    job_completed(job, 0, NULL);
    drain();
}

static void test_dirty_bitmap(void)
{
    BlockOptions o;
    BlockNullOptions no;
    g_autoptr(GError) err = NULL;
    BlockBackend *blk;
    BdrvDirtyBitmap *bm;

    blk_options_init(&o);
    blk_null_options(&o, &no, 1 << 20, false);
    blk = blk_open(&o, &err);
    g_assert_no_error(err);
    g_assert_null(bdrv_dirty_bitmap_create(blk, 1000, &err));
    g_assert_cmpstr(err->message, ==, "Granularity must be power of 2 "
                    "between 512 and 64M");
    g_clear_error(&err);
    bm = bdrv_dirty_bitmap_create(blk, 4096, &err);
    g_assert_no_error(err);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 0), ==, -1);
    /* [4095, 4097) touches bits 0 and 1; a range over a word boundary. */
    bdrv_dirty_bitmap_set(bm, 4095, 2);
    bdrv_dirty_bitmap_set(bm, 60 * 4096, 10 * 4096);
    g_assert_cmpuint(bdrv_dirty_bitmap_count(bm), ==, 12);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 0), ==, 0);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 2), ==, 60);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 70), ==, -1);
    g_assert_true(bdrv_dirty_bitmap_test_and_clear(bm, 64));
    g_assert_false(bdrv_dirty_bitmap_test_and_clear(bm, 64));
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 64), ==, 65);
    /* Past the end: clamped, no write out of the bitmap. */
    bdrv_dirty_bitmap_set(bm, (1 << 20) - 512, 1 << 20);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 70), ==, 255);
    g_assert_cmpuint(bdrv_dirty_bitmap_dirty_bytes(bm), ==, 12 * 4096);
    bdrv_dirty_bitmap_release(blk, bm);
    blk_close(blk);
}

/*
 * The copy's taking of a dirty run (bdrv_dirty_bitmap_take_run(), a
 * word at a time): it crosses words, stops at @max, at a clean bit and
 * at a busy one, and leaves everything past its end as it was.
 */
static void test_dirty_bitmap_take_run(void)
{
    BlockOptions o;
    BlockNullOptions no;
    g_autoptr(GError) err = NULL;
    BlockBackend *blk;
    BdrvDirtyBitmap *bm;

    blk_options_init(&o);
    blk_null_options(&o, &no, 1 << 20, false);      /* 256 bits */
    blk = blk_open(&o, &err);
    g_assert_no_error(err);
    bm = bdrv_dirty_bitmap_create(blk, 4096, &err);
    g_assert_no_error(err);

    /* Bits 10..199 dirty: three words. */
    bdrv_dirty_bitmap_set(bm, 10 * 4096, 190 * 4096);
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 9, 1000), ==, 0);
    /* @max ends the run inside a word. */
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 10, 100), ==, 100);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 0), ==, 110);
    /* Taken bits are busy: a second copy of them cannot start. */
    g_assert_cmpuint(bdrv_dirty_bitmap_take_busy(bm, 50, 1), ==, 0);
    /* A busy bit (an active write's copy) ends the next run. */
    g_assert_cmpuint(bdrv_dirty_bitmap_take_busy(bm, 150, 1), ==, 1);
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 110, 1000), ==, 40);
    g_assert_cmpuint(bdrv_dirty_bitmap_count(bm), ==, 50);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 0), ==, 150);
    /* Nothing past the busy bit was marked busy by the run. */
    g_assert_cmpuint(bdrv_dirty_bitmap_take_busy(bm, 151, 49), ==, 49);
    bdrv_dirty_bitmap_release_busy(bm, 151 * 4096, 49 * 4096);
    bdrv_dirty_bitmap_release_busy(bm, 150 * 4096, 4096);
    /* To the first clean bit, across a word boundary; the end of the
     * bitmap ends it too. */
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 150, 1000), ==, 50);
    g_assert_cmpint(bdrv_dirty_bitmap_next(bm, 0), ==, -1);
    bdrv_dirty_bitmap_set(bm, 250 * 4096, 1 << 20);
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 250, 1000), ==, 6);
    bdrv_dirty_bitmap_release_busy(bm, 0, 1 << 20);
    /* Whole words. */
    bdrv_dirty_bitmap_set(bm, 0, 1 << 20);
    g_assert_cmpuint(bdrv_dirty_bitmap_take_run(bm, 0, 1000), ==, 256);
    g_assert_cmpuint(bdrv_dirty_bitmap_count(bm), ==, 0);
    g_assert_cmpuint(bdrv_dirty_bitmap_take_busy(bm, 0, 256), ==, 0);
    bdrv_dirty_bitmap_release(blk, bm);
    blk_close(blk);
}

/* A null node of 1 MiB; with @fail_writes every write fails (EIO). */
static BlockBackend *null_node(bool fail_writes)
{
    g_autoptr(GError) err = NULL;
    BlockOptions o;
    BlockNullOptions no;
    BlockBackend *blk;

    blk_options_init(&o);
    blk_null_options(&o, &no, 1 << 20, true);
    if (fail_writes) {
        o.inject.ops = BLOCK_INJECT_WRITE;
    }
    blk = blk_open(&o, &err);
    g_assert_no_error(err);
    return blk;
}

/* Run the loop until @job is in @status. */
static void run_until(Job *job, JobStatus status)
{
    while (job->status != status) {
        aio_poll(ctx, true);
    }
}

/*
 * A target whose writes fail: on-target-error=report ends the job with
 * the error (BLOCK_JOB_ERROR, then COMPLETED with it); stop pauses it
 * until it is cancelled.
 */
static void test_mirror_target_error(void)
{
    BlockBackend *src = null_node(false);
    BlockBackend *tgt = null_node(true);
    g_autoptr(GError) err = NULL;
    MirrorOptions mo = {
        .job_id = "mt", .source = src, .target = tgt,
        .sync = MIRROR_SYNC_FULL, .on_target_error = JOB_ERROR_REPORT,
        .auto_finalize = true, .auto_dismiss = false,
    };
    Job *job;

    g_string_truncate(events, 0);
    job = mirror_start(&mo, &err);
    g_assert_no_error(err);
    run_until(job, JOB_STATUS_CONCLUDED);
    g_assert_cmpstr(events->str, ==, "created running ERROR aborting "
                    "COMPLETED concluded");
    g_assert_cmpstr(job->err, ==, "Input/output error");
    g_assert_true(job_dismiss(job, NULL));
    drain();

    mo.job_id = "ms";
    mo.on_target_error = JOB_ERROR_STOP;
    g_string_truncate(events, 0);
    job = mirror_start(&mo, &err);
    g_assert_no_error(err);
    run_until(job, JOB_STATUS_PAUSED);
    g_assert_true(job_user_cancel(job, true, NULL));
    run_until(job, JOB_STATUS_CONCLUDED);
    /* 1 MiB in one copy: one failure. */
    g_assert_cmpstr(events->str, ==, "created running ERROR paused running "
                    "aborting CANCELLED concluded");
    g_assert_true(job_dismiss(job, NULL));
    drain();
    blk_close(src);
    blk_close(tgt);
}

/*
 * A file node over a new file of @size bytes at @path; @delay_ms (0:
 * none) holds back every request to it, or with @first_only only the
 * first request to [0, 64 KiB).
 */
static BlockBackend *file_node_sized(const char *path, uint64_t size,
                                     uint32_t delay_ms, bool first_only)
{
    g_autoptr(GError) err = NULL;
    BlockOptions o;
    BlockFileOptions fo;
    BlockBackend *blk;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    blk_options_init(&o);
    blk_file_options(&o, &fo, path);
    o.cache_direct = false;     /* tmpfs has no O_DIRECT */
    o.inject.delay_ms = delay_ms;
    if (delay_ms && first_only) {
        o.inject.has_range = true;
        o.inject.sector_start = 0;
        o.inject.sector_end = 65536 / 512 - 1;
        o.inject.count = 1;
    }
    blk = blk_open(&o, &err);
    g_assert_no_error(err);
    return blk;
}

/*
 * A mirror from one new 8 MiB file node to another, in a directory of
 * their own, requests to each held back by the delays given (0: none),
 * started and READY; mirror_pair_close() dismisses the job once it has
 * concluded and removes both.
 */
typedef struct MirrorPair {
    char *dir, *spath, *tpath;
    BlockBackend *src, *tgt;
    Job *job;
} MirrorPair;

enum { MIRROR_PAIR_SIZE = 8 << 20 };

static void mirror_pair_open(MirrorPair *p, MirrorOptions *mo,
                             uint32_t src_delay_ms, uint32_t tgt_delay_ms)
{
    g_autoptr(GError) err = NULL;

    p->dir = g_dir_make_tmp("test-job-XXXXXX", NULL);
    g_assert_nonnull(p->dir);
    p->spath = g_strdup_printf("%s/src", p->dir);
    p->tpath = g_strdup_printf("%s/tgt", p->dir);
    p->src = file_node_sized(p->spath, MIRROR_PAIR_SIZE, src_delay_ms,
                             false);
    p->tgt = file_node_sized(p->tpath, MIRROR_PAIR_SIZE, tgt_delay_ms,
                             false);
    mo->source = p->src;
    mo->target = p->tgt;
    mo->auto_finalize = true;
    mo->auto_dismiss = false;
    p->job = mirror_start(mo, &err);
    g_assert_no_error(err);
}

/* Cancel (@force: at once; else the soft cancel that copies the rest),
 * and wait for the job to conclude. */
static void mirror_pair_cancel(MirrorPair *p, bool force)
{
    g_assert_true(job_user_cancel(p->job, force, NULL));
    run_until(p->job, JOB_STATUS_CONCLUDED);
}

static void mirror_pair_close(MirrorPair *p)
{
    g_assert_true(job_dismiss(p->job, NULL));
    drain();
    blk_close(p->src);
    blk_close(p->tgt);
    unlink(p->spath);
    unlink(p->tpath);
    rmdir(p->dir);
    g_free(p->spath);
    g_free(p->tpath);
    g_free(p->dir);
}

static void write_done(void *opaque, int ret)
{
    g_assert_cmpint(ret, ==, 0);
    *(bool *)opaque = true;
}

/* Write 64 KiB of @byte at 0 of @blk, and wait for it. */
static void write_and_wait(BlockBackend *blk, void *buf, uint8_t byte)
{
    BlockAIOCB acb;
    struct iovec iov = { .iov_base = buf, .iov_len = 65536 };
    bool done = false;

    memset(buf, byte, 65536);
    blk_aio_pwritev(blk, &acb, 0, &iov, 1, 0, write_done, &done);
    while (!done) {
        aio_poll(ctx, true);
    }
}

/*
 * A range written twice while the mirror's copy of the first write is
 * in flight (its write to the target held back 2 s): the second copy
 * waits for the first, so the target ends with the second write.  With
 * two copies of a range in flight at once the old one landed last.
 */
static void test_mirror_inflight_order(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-job-XXXXXX", NULL);
    g_autofree char *spath = g_strdup_printf("%s/src", dir);
    g_autofree char *tpath = g_strdup_printf("%s/tgt", dir);
    g_autofree uint8_t *want = g_malloc(65536);
    g_autofree uint8_t *got = g_malloc(65536);
    void *buf = NULL;
    BlockBackend *src, *tgt;
    g_autoptr(GError) err = NULL;
    MirrorOptions mo = {
        .job_id = "mo", .sync = MIRROR_SYNC_NONE, .granularity = 65536,
        .auto_finalize = true, .auto_dismiss = false,
    };
    Job *job;
    int fd;

    g_assert_nonnull(dir);
    g_assert_cmpint(posix_memalign(&buf, 4096, 65536), ==, 0);
    src = file_node_sized(spath, 1 << 20, 0, false);
    tgt = file_node_sized(tpath, 1 << 20, 2000, true);
    mo.source = src;
    mo.target = tgt;
    job = mirror_start(&mo, &err);
    g_assert_no_error(err);
    run_until(job, JOB_STATUS_READY);
    write_and_wait(src, buf, 0xaa);
    /* The mirror read the first write and its copy is held back. */
    while (blk_inject_get_hits(tgt) == 0) {
        aio_poll(ctx, true);
    }
    write_and_wait(src, buf, 0xbb);
    /* A soft cancel ends once everything written is on the target. */
    g_assert_true(job_user_cancel(job, false, NULL));
    run_until(job, JOB_STATUS_CONCLUDED);
    g_assert_null(job->err);
    g_assert_true(job_dismiss(job, NULL));
    drain();
    blk_close(src);
    blk_close(tgt);
    fd = open(tpath, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, got, 65536, 0), ==, 65536);
    close(fd);
    memset(want, 0xbb, 65536);
    g_assert_true(memcmp(got, want, 65536) == 0);
    unlink(spath);
    unlink(tpath);
    rmdir(dir);
    free(buf);
}

/*
 * The copy reads at most 2 MiB of the source at a time, whatever
 * buf-size allows in flight (16 MiB by default): the source's users
 * queue beside its reads.  Every request to the source is held back
 * 500 ms; once ready, 8 MiB of the source are marked dirty and the job's
 * next pass issues what it may at once, every one of them counted
 * (held) as it is submitted: two 1 MiB reads, where there were eight.
 */
static void test_mirror_read_bound(void)
{
    MirrorOptions mo = {
        .job_id = "mr", .sync = MIRROR_SYNC_NONE, .granularity = 65536,
    };
    MirrorPair p;

    mirror_pair_open(&p, &mo, 500, 0);
    run_until(p.job, JOB_STATUS_READY);
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 0);
    /* What a guest's writes all over the disk would leave; the job
     * looks at its bitmap every 10 ms once ready. */
    bdrv_dirty_bitmap_set(p.src->dirty_bitmaps, 0, MIRROR_PAIR_SIZE);
    while (blk_inject_get_hits(p.src) == 0) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 2);
    mirror_pair_cancel(&p, true);
    mirror_pair_close(&p);
}

static void read_done(void *opaque, int ret)
{
    g_assert_cmpint(ret, ==, 0);
    *(bool *)opaque = true;
}

/*
 * Guest first: while the source's users are busy the copy keeps one
 * operation in flight (1 MiB), and takes its full share again once they
 * have been idle for 100 ms (the cap's floor does not apply: the job had
 * nothing in flight before).  As in
 * /mirror/read-bound every request to the source is held back 500 ms and
 * counted as it is submitted.  A user's read goes in first, then 8 MiB
 * become dirty: the job's next pass reads 1 MiB (two reads were issued
 * before, beside the user's).  That read comes back 500 ms later, the
 * users idle since: the job reads two at once again.
 */
static void test_mirror_guest_first(void)
{
    MirrorOptions mo = {
        .job_id = "mp", .sync = MIRROR_SYNC_NONE, .granularity = 65536,
    };
    MirrorPair p;
    void *buf = NULL;
    struct iovec iov;
    BlockAIOCB acb;
    bool done = false;

    g_assert_cmpint(posix_memalign(&buf, 4096, 4096), ==, 0);
    iov.iov_base = buf;
    iov.iov_len = 4096;
    mirror_pair_open(&p, &mo, 500, 0);
    run_until(p.job, JOB_STATUS_READY);
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 0);
    /* A user of the source: its read is in flight for 500 ms. */
    blk_aio_preadv(p.src, &acb, MIRROR_PAIR_SIZE - 4096, &iov, 1,
                   read_done, &done);
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 1);
    bdrv_dirty_bitmap_set(p.src->dirty_bitmaps, 0, MIRROR_PAIR_SIZE);
    while (blk_inject_get_hits(p.src) == 1) {
        aio_poll(ctx, true);
    }
    /* Busy users: one 1 MiB read of ours beside theirs. */
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 2);
    /* Its completion, users idle for 500 ms: the full share again. */
    while (blk_inject_get_hits(p.src) == 2) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 4);
    while (!done) {
        aio_poll(ctx, true);
    }
    mirror_pair_cancel(&p, true);
    mirror_pair_close(&p);
    free(buf);
}

/*
 * The granularity a mirror takes when the user gives none: 4 KiB, the
 * target's cluster size if it has one, larger only to keep the bitmap
 * at 8 MiB (64 Mi granules) at most, and 64 KiB at most unless the
 * cluster is larger.
 */
static void test_mirror_default_granularity(void)
{
    const uint64_t gib = 1ull << 30;
    BlockOptions o;
    BlockNullOptions no;
    g_autoptr(GError) err = NULL;
    BlockBackend *src, *tgt;
    MirrorOptions mo = {
        .job_id = "mg", .sync = MIRROR_SYNC_NONE,
        .auto_finalize = true, .auto_dismiss = false,
    };
    Job *job;

    g_assert_cmpuint(mirror_default_granularity(4 * gib, 0), ==, 4096);
    g_assert_cmpuint(mirror_default_granularity(1 << 20, 0), ==, 4096);
    g_assert_cmpuint(mirror_default_granularity(4 * gib, 65536), ==, 65536);
    g_assert_cmpuint(mirror_default_granularity(4 * gib, 2 << 20), ==,
                     2 << 20);
    g_assert_cmpuint(mirror_default_granularity(4 * gib, 512), ==, 512);
    /* Not a power of two, or out of range: no cluster size. */
    g_assert_cmpuint(mirror_default_granularity(4 * gib, 65535), ==, 4096);
    g_assert_cmpuint(mirror_default_granularity(4 * gib, 1u << 31), ==,
                     4096);
    /* 4 KiB up to 256 GiB; then as large as the 8 MiB bound needs. */
    g_assert_cmpuint(mirror_default_granularity(256 * gib, 0), ==, 4096);
    g_assert_cmpuint(mirror_default_granularity(256 * gib + 1, 0), ==, 8192);
    g_assert_cmpuint(mirror_default_granularity(1024 * gib, 0), ==, 16384);
    g_assert_cmpuint(mirror_default_granularity(4096 * gib, 0), ==, 65536);
    /* Never past 64 KiB without a larger cluster: the bitmap grows. */
    g_assert_cmpuint(mirror_default_granularity(16384 * gib, 0), ==, 65536);
    g_assert_cmpuint(mirror_default_granularity(16384 * gib, 1 << 20), ==,
                     1 << 20);
    g_assert_cmpuint(mirror_default_granularity(UINT64_MAX, 0), ==, 65536);

    /* A job without a granularity takes it: a null target (no cluster
     * size) of 1 TiB, whose bitmap stays within 8 MiB. */
    blk_options_init(&o);
    blk_null_options(&o, &no, 1024 * gib, true);
    src = blk_open(&o, &err);
    g_assert_no_error(err);
    blk_options_init(&o);
    blk_null_options(&o, &no, 1024 * gib, true);
    tgt = blk_open(&o, &err);
    g_assert_no_error(err);
    mo.source = src;
    mo.target = tgt;
    job = mirror_start(&mo, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(bdrv_dirty_bitmap_granularity(src->dirty_bitmaps), ==,
                     16384);
    g_assert_cmpuint((src->dirty_bitmaps->nbits + 7) / 8, <=, 8 << 20);
    run_until(job, JOB_STATUS_READY);
    g_assert_true(job_user_cancel(job, true, NULL));
    run_until(job, JOB_STATUS_CONCLUDED);
    g_assert_true(job_dismiss(job, NULL));
    drain();
    blk_close(src);
    blk_close(tgt);
}

/*
 * At the default 4 KiB granules, a dirty run goes to the target in
 * operations of MIRROR_MAX_OP (1 MiB), not one per granule: 1 MiB +
 * 64 KiB dirty, and 8 KiB further on, are three writes of the target
 * (counted there: a 1 ms delay injected into every request it gets,
 * the flushes at ready and at the end among them), and only the dirty
 * bytes are copied (with 64 KiB granules the 8 KiB would have been
 * 64 KiB).
 */
static void test_mirror_coalesce(void)
{
    MirrorOptions mo = { .job_id = "mc", .sync = MIRROR_SYNC_NONE };
    MirrorPair p;
    BdrvDirtyBitmap *bm;

    mirror_pair_open(&p, &mo, 0, 1);
    bm = p.src->dirty_bitmaps;
    g_assert_cmpuint(bdrv_dirty_bitmap_granularity(bm), ==, 4096);
    run_until(p.job, JOB_STATUS_READY);
    g_assert_cmpuint(blk_inject_get_hits(p.tgt), ==, 1);    /* the flush */
    /* What a guest's writes would leave; a soft cancel copies it all
     * and ends. */
    bdrv_dirty_bitmap_set(bm, 0, (1 << 20) + (64 << 10));
    bdrv_dirty_bitmap_set(bm, (3 << 20) + 4096, 8192);
    mirror_pair_cancel(&p, false);
    g_assert_null(p.job->err);
    g_assert_cmpuint(blk_inject_get_hits(p.tgt), ==, 1 + 3 + 1);
    g_assert_cmpuint(p.job->progress_current, ==,
                     (1 << 20) + (64 << 10) + 8192);
    mirror_pair_close(&p);
}

/*
 * Single dirty granules (a guest writing 4 KiB at random, once the bulk
 * copy is done) are each one operation, so how many go out at once
 * bounds how fast the copy catches up: the default 16 MiB of buf-size
 * gives 64 small operations and 12 of 1 MiB, 76, where it gave 16.
 * Every request to the source is held back 500 ms, and 100 granules
 * apart from each other are marked dirty once ready: the next pass
 * reads 76 of them at once (counted, held, as they are submitted).
 */
static void test_mirror_small_ops(void)
{
    MirrorOptions mo = { .job_id = "mm", .sync = MIRROR_SYNC_NONE };
    MirrorPair p;

    mirror_pair_open(&p, &mo, 500, 0);
    g_assert_cmpuint(bdrv_dirty_bitmap_granularity(p.src->dirty_bitmaps),
                     ==, 4096);
    run_until(p.job, JOB_STATUS_READY);
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 0);
    for (unsigned int i = 0; i < 100; i++) {
        bdrv_dirty_bitmap_set(p.src->dirty_bitmaps, i * 3 * 4096, 4096);
    }
    while (blk_inject_get_hits(p.src) == 0) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(blk_inject_get_hits(p.src), ==, 64 + 12);
    mirror_pair_cancel(&p, true);
    mirror_pair_close(&p);
}

int main(int argc, char **argv)
{
    g_autoptr(GError) err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    events = g_string_new(NULL);
    job_set_event_handler(on_event, NULL);
    g_test_add_func("/job/success-auto", test_success_auto);
    g_test_add_func("/job/pause-ready-soft-cancel", test_pause_ready);
    g_test_add_func("/job/force-cancel-manual", test_force_cancel_manual);
    g_test_add_func("/job/finalize-and-error", test_manual_finalize_and_error);
    g_test_add_func("/job/ids", test_ids);
    g_test_add_func("/dirty-bitmap/marks", test_dirty_bitmap);
    g_test_add_func("/mirror/target-error", test_mirror_target_error);
    g_test_add_func("/mirror/inflight-order", test_mirror_inflight_order);
    g_test_add_func("/mirror/read-bound", test_mirror_read_bound);
    g_test_add_func("/mirror/guest-first", test_mirror_guest_first);
    g_test_add_func("/dirty-bitmap/take-run", test_dirty_bitmap_take_run);
    g_test_add_func("/mirror/default-granularity",
                    test_mirror_default_granularity);
    g_test_add_func("/mirror/coalesce", test_mirror_coalesce);
    g_test_add_func("/mirror/small-ops", test_mirror_small_ops);
    ret = g_test_run();
    g_string_free(events, true);
    aio_context_free(ctx);
    return ret;
}
