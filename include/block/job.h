/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Jobs: long-running block operations (a mirror) that the monitor starts,
 * watches and steers with QEMU's job commands and events.
 *
 * State machine (QEMU's JobStatus, the same transitions):
 *
 *   created -> running <-> paused
 *              running -> ready <-> standby
 *              running/ready -> waiting -> pending -> concluded -> null
 *   any live state -> aborting -> concluded -> null
 *
 * A job starts running as soon as it is created.  Its driver does the work
 * with asynchronous requests and callbacks (no coroutines) and reports
 * back with job_transition_to_ready() and job_completed().  The job core
 * then walks the end of the state machine: a job that succeeded waits in
 * "pending" for job-finalize unless auto-finalize, runs the driver's
 * prepare/commit (or abort on failure or cancel), and waits in
 * "concluded" for job-dismiss unless auto-dismiss.
 *
 * Verbs a user may apply (QEMU's JobVerbTable) are checked here, with
 * QEMU's message "Job 'ID' in state 'S' cannot accept command verb 'V'".
 *
 * Events: every status change and the block-job events (READY, PENDING,
 * COMPLETED, CANCELLED, ERROR) go to the handler job_set_event_handler()
 * installed (the monitor turns them into QMP events).
 *
 * Threads: main thread only, for every function here and every driver
 * callback; a driver may submit its requests from any AioContext thread,
 * but reports to the job core from the main thread.
 */
#ifndef BLOCK_JOB_H
#define BLOCK_JOB_H

#include "qemu/osdep.h"
#include "qemu/queue.h"
#include "block/block.h"

typedef enum JobStatus {
    JOB_STATUS_UNDEFINED,
    JOB_STATUS_CREATED,
    JOB_STATUS_RUNNING,
    JOB_STATUS_PAUSED,
    JOB_STATUS_READY,
    JOB_STATUS_STANDBY,
    JOB_STATUS_WAITING,
    JOB_STATUS_PENDING,
    JOB_STATUS_ABORTING,
    JOB_STATUS_CONCLUDED,
    JOB_STATUS_NULL,
    JOB_STATUS__MAX,
} JobStatus;

typedef enum JobVerb {
    JOB_VERB_CANCEL,
    JOB_VERB_PAUSE,
    JOB_VERB_RESUME,
    JOB_VERB_SET_SPEED,
    JOB_VERB_COMPLETE,
    JOB_VERB_FINALIZE,
    JOB_VERB_DISMISS,
    JOB_VERB__MAX,
} JobVerb;

/* What an event handler is told (besides JOB_STATUS_CHANGE, which comes
 * with every status change). */
typedef enum JobEvent {
    JOB_EVENT_STATUS_CHANGE,
    JOB_EVENT_READY,            /* BLOCK_JOB_READY */
    JOB_EVENT_PENDING,          /* BLOCK_JOB_PENDING */
    JOB_EVENT_COMPLETED,        /* BLOCK_JOB_COMPLETED (job->err: error) */
    JOB_EVENT_CANCELLED,        /* BLOCK_JOB_CANCELLED */
    JOB_EVENT_ERROR,            /* BLOCK_JOB_ERROR: see job_report_error() */
} JobEvent;

/* What a job does on an I/O error (QEMU's BlockdevOnError subset). */
typedef enum JobErrorAction {
    JOB_ERROR_REPORT,           /* the job fails with the error */
    JOB_ERROR_IGNORE,           /* the job goes on (the range stays dirty
                                 * and is tried again) */
    JOB_ERROR_STOP,             /* the job pauses; job-resume retries */
} JobErrorAction;

typedef struct Job Job;

typedef struct JobDriver {
    const char *type;           /* QEMU's JobType: "mirror" */
    /* Begin the work (status is running). */
    void (*start)(Job *job);
    /* The job was paused or resumed by the user: stop issuing new
     * requests / go on (requests in flight complete either way). */
    void (*pause)(Job *job);
    void (*resume)(Job *job);
    /* job-complete in ready/standby: finish (optional: without, the verb
     * is refused).  False with @errp set to refuse. */
    bool (*complete)(Job *job, GError **errp);
    /* Cancel: stop, then call job_completed() once nothing is in flight.
     * @force false on a ready job: QEMU's soft cancel (a mirror finishes
     * without pivoting, as a success); job->cancelled says which. */
    void (*cancel)(Job *job, bool force);
    /* The speed changed (bytes per second, 0 = unlimited). */
    void (*set_speed)(Job *job, uint64_t speed);
    /* Finalization (optional): prepare may still fail the job (then
     * abort runs); commit after success, abort after failure or cancel;
     * clean in both cases.  Free releases the driver's state. */
    int (*prepare)(Job *job, GError **errp);
    void (*commit)(Job *job);
    void (*abort)(Job *job);
    void (*clean)(Job *job);
    void (*free)(Job *job);
} JobDriver;

struct Job {
    char *id;
    const JobDriver *driver;
    void *opaque;               /* the driver's */
    JobStatus status;
    char *device;               /* BLOCK_JOB_* "device": the node name */
    bool auto_finalize;
    bool auto_dismiss;
    unsigned int pause_count;   /* user pauses (and stops on error) */
    bool user_paused;
    bool cancelled;             /* force-cancelled: ends as cancelled */
    bool soft_cancelled;        /* block-job-cancel on a ready job */
    bool completed;             /* job_completed() was called */
    bool ready_seen;
    int ret;                    /* job_completed()'s */
    char *err;                  /* why it failed, for "error" members */
    uint64_t progress_current;  /* bytes done */
    uint64_t progress_total;    /* bytes to do (may grow) */
    uint64_t speed;             /* bytes per second; 0 = unlimited */
};

typedef void JobEventFunc(void *opaque, Job *job, JobEvent ev,
                          const char *operation, JobErrorAction action);
void job_set_event_handler(JobEventFunc *fn, void *opaque);

/* The job called @id (or NULL); the list in creation order. */
Job *job_get(const char *id);
Job *job_next(Job *job);        /* job_next(NULL): the first */

/*
 * A new job, created then running (driver->start called).  @id must be
 * unique among live jobs; QEMU's messages otherwise.  NULL with @errp set.
 */
Job *job_create(const char *id, const JobDriver *driver, void *opaque,
                const char *device, bool auto_finalize, bool auto_dismiss,
                uint64_t speed, GError **errp);
void job_start(Job *job);

const char *job_status_name(JobStatus s);
const char *job_verb_name(JobVerb v);
/* May @job take @verb now?  QEMU's message otherwise. */
bool job_apply_verb(Job *job, JobVerb verb, GError **errp);

/* The user's verbs. */
bool job_user_pause(Job *job, GError **errp);
bool job_user_resume(Job *job, GError **errp);
bool job_user_cancel(Job *job, bool force, GError **errp);
bool job_complete(Job *job, GError **errp);
bool job_finalize(Job *job, GError **errp);
bool job_dismiss(Job *job, GError **errp);
bool job_set_speed(Job *job, int64_t speed, GError **errp);

/* Whether the driver should issue no new request now (paused, or
 * cancelled, or finished). */
bool job_should_pause(Job *job);
bool job_is_ready(Job *job);
bool job_is_paused(Job *job);

/* The driver's reports. */
void job_progress_update(Job *job, uint64_t done);
void job_progress_set_remaining(Job *job, uint64_t remaining);
void job_transition_to_ready(Job *job);
/* An I/O error the driver met while its on-error action is @action:
 * emits BLOCK_JOB_ERROR; JOB_ERROR_STOP also pauses the job (like a user
 * pause: job-resume goes on).  @operation: "read" or "write". */
void job_report_error(Job *job, const char *operation, JobErrorAction action);
/* The work is over: 0, or -errno with @err (taken, may be NULL) saying
 * why.  Nothing of the driver's may be in flight any more. */
void job_completed(Job *job, int ret, char *err);

/* Shutdown: cancel every job whose driver can still stop (with nothing in
 * flight, as at daemon exit) and free them all. */
void job_cancel_all_sync(void);

/* ---- the mirror job (block/mirror.c) --------------------------------- */

typedef enum MirrorSyncMode {
    MIRROR_SYNC_FULL,           /* copy everything, then what is written */
    MIRROR_SYNC_TOP,            /* the same here: no node has a backing
                                 * chain to leave out */
    MIRROR_SYNC_NONE,           /* only what is written from now on */
} MirrorSyncMode;

#define MIRROR_DEFAULT_BUF_SIZE (16u << 20)
#define MIRROR_MAX_BUF_SIZE     (1u << 30)

typedef struct MirrorOptions {
    const char *job_id;
    const char *device;         /* the source's node name (events) */
    BlockBackend *source;       /* written by its users meanwhile */
    BlockBackend *target;       /* the same size; nobody else writes it */
    MirrorSyncMode sync;
    uint32_t granularity;       /* 0: mirror_default_granularity() */
    uint64_t buf_size;          /* bytes copied at a time; 0: default */
    uint64_t speed;             /* bytes per second; 0: unlimited */
    JobErrorAction on_source_error;
    JobErrorAction on_target_error;
    bool unmap;                 /* zero ranges may become holes */
    bool write_blocking;        /* copy-mode=write-blocking: the users'
                                 * writes complete once on the target too */
    /* block-commit of the active node (job type "commit"): the target is
     * a backing node of the source's chain, which its overlays go on
     * reading (shared consistent read). */
    bool commit;
    bool auto_finalize;
    bool auto_dismiss;
    /*
     * job-complete (QEMU's pivot: the source's users move to the target).
     * @quiesce(true) stops the users from submitting (their requests in
     * flight complete); once the copy has caught up with nothing in
     * flight and the target is flushed, @pivot moves them (false with
     * @errp set: the job fails, the users stay on the source), then
     * @quiesce(false) lets them go on.  NULL @pivot: job-complete is
     * refused; so is it when @pivot_check (optional) says no.  Main
     * thread.
     */
    void (*quiesce)(void *opaque, bool on);
    /* Optional, main thread: the job ended (once, at its clean), having
     * moved the users to the target (@pivoted) or not.  A commit puts
     * the base back to read-only there when it did not become the
     * users' node. */
    void (*ended)(void *opaque, bool pivoted);
    bool (*pivot_check)(void *opaque, GError **errp);
    bool (*pivot)(void *opaque, GError **errp);
    void *pivot_opaque;         /* g_free()d with the job */
} MirrorOptions;

/*
 * The dirty granularity of a mirror of @size bytes onto a target whose
 * cluster size is @cluster_size (0: none) when the user gives none: the
 * cluster size, else 4 KiB, doubled while the bitmap would exceed 8 MiB
 * (64 Mi granules) but not past 64 KiB (or the cluster size).
 */
uint32_t mirror_default_granularity(uint64_t size, uint32_t cluster_size);

/*
 * Start copying @o->source to @o->target.  The job becomes ready (the
 * target holds everything the source did, writes still being copied)
 * once the copy has caught up; block-job-cancel then ends it with the
 * target a consistent copy (every write completed by then is in it), and
 * job-complete moves the source's users to the target (see @pivot).
 * NULL with @errp set.  Main thread.
 */
Job *mirror_start(const MirrorOptions *o, GError **errp);

/* ---- the stream job (block/stream.c) --------------------------------- */

typedef struct StreamOptions {
    const char *job_id;
    const char *device;         /* the top's node name (events) */
    BlockBackend *top;          /* a writable qcow2 node, written by its
                                 * users meanwhile */
    BlockBackend *base;         /* a node of its chain, or NULL: all */
    /* block-commit below the active node: copy what @top and the nodes
     * below it above @base hold into @base (writable, written by nobody
     * else), plain writes; job type "commit". */
    bool commit;
    /* commit: the caller reopened @base read-write for the job
     * (blk_reopen()); it goes back to read-only when the job ends,
     * whichever way.  If stream_start() fails, that is the caller's. */
    bool base_reopened;
    uint64_t speed;             /* bytes per second; 0: unlimited */
    JobErrorAction on_error;
    bool auto_finalize;
    bool auto_dismiss;
    /* At the job's prepare, once everything above @base is in @top: make
     * @base the top's backing node (false with @errp set: the job
     * fails).  @opaque is g_free()d with the job. */
    bool (*finish)(void *opaque, GError **errp);
    /* Optional: the job ended, whichever way (once, at its clean, after
     * @base went back to read-only). */
    void (*ended)(void *opaque);
    void *opaque;
} StreamOptions;

/*
 * Start copying into @o->top what it reads from its chain above
 * @o->base (QEMU's block-stream).  A cancelled or failed job leaves the
 * chain as it was (with more clusters of the top allocated, which read
 * what the chain did).  NULL with @errp set.  Main thread.
 */
Job *stream_start(const StreamOptions *o, GError **errp);

#endif
