/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: vhost-blkd's --export parser (export_opts_list_add()
 * and the size, number and on/off helpers) on arbitrary strings.
 *
 * Input: text.  It is split on '\n' into several --export arguments, added
 * in turn to one list, so the duplicate-socket check runs too; a NUL byte
 * ends the argument it is in (as it would on a command line).  The parser
 * runs with a private temporary directory as its working directory, which
 * holds the image files the seeds name (disk0.img, d.img, base.img), so
 * file= checks can succeed; the harness returns to the original directory
 * around each call, so relative corpus and artifact paths keep working
 * (except for a crash inside the parser itself: give libFuzzer an absolute
 * -artifact_prefix, as scripts/fuzz.sh does).
 *
 * Checks, besides the sanitizers: a failure leaves the list as it was and
 * carries a non-empty message; a success appends exactly one export whose
 * every field is in its documented range (include/tools/export-opts.h) and
 * whose socket no earlier export uses; the helpers agree with each other
 * (parse_uint succeeds only within its limit and with parse_size's value).
 *
 * Threads: single-threaded.
 */
#include "qemu/osdep.h"
#include "block/file.h"
#include "block/null.h"
#include "block/rbd.h"
#include "tools/export-opts.h"
#include "fuzz-common.h"

#include <sys/stat.h>

#define FEO_MAX_EXPORTS 16

static const char *const feo_images[] = { "disk0.img", "d.img", "base.img" };
static char *feo_dir;
static int feo_dir_fd = -1;     /* the image directory */
static int feo_cwd_fd = -1;     /* the directory we were started in */
static bool feo_verbose;        /* FUZZ_VERBOSE=1: print each result */

static void feo_cleanup(void)
{
    if (!feo_dir) {
        return;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(feo_images); i++) {
        g_autofree char *p = g_build_filename(feo_dir, feo_images[i], NULL);

        unlink(p);
    }
    rmdir(feo_dir);
    g_clear_pointer(&feo_dir, g_free);
}

/* Called once, from the fuzzer's thread, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    GError *err = NULL;

    feo_dir = g_dir_make_tmp("fuzz-export-opts-XXXXXX", &err);
    g_assert_no_error(err);
    for (size_t i = 0; i < G_N_ELEMENTS(feo_images); i++) {
        g_autofree char *p = g_build_filename(feo_dir, feo_images[i], NULL);

        g_file_set_contents(p, "", 0, &err);
        g_assert_no_error(err);
    }
    feo_dir_fd = open(feo_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    feo_cwd_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    g_assert(feo_dir_fd >= 0 && feo_cwd_fd >= 0);
    atexit(feo_cleanup);
    feo_verbose = g_strcmp0(g_getenv("FUZZ_VERBOSE"), "1") == 0;
    return 0;
}

static bool feo_is_pow2(unsigned int v)
{
    return v && !(v & (v - 1));
}

/* A name part of rbd=POOL[/NAMESPACE]/IMAGE[@SNAP]: non-empty, and
 * without the separators that would have split it. */
static void feo_check_rbd_part(const char *what, const char *part,
                               const char *forbidden)
{
    fuzz_check(part && *part, "rbd %s empty", what);
    fuzz_check(!strpbrk(part, forbidden), "rbd %s '%s' holds one of '%s'",
               what, part, forbidden);
}

static void feo_check_rbd(const ExportOpts *e)
{
    const BlockRbdOptions *o = e->block.driver_opts;

    fuzz_check(!e->file, "driver=rbd with file=%s", e->file);
    fuzz_check(o, "driver=rbd without its options");
    feo_check_rbd_part("pool", o->pool, "/@");
    if (o->namespace_) {
        feo_check_rbd_part("namespace", o->namespace_, "/@");
    }
    feo_check_rbd_part("image", o->image, "/@");
    if (o->snapshot) {
        feo_check_rbd_part("snapshot", o->snapshot, "/");
    }
    fuzz_check(o->connect_timeout <= 3600, "ceph-connect-timeout %u",
               o->connect_timeout);
    fuzz_check(o->completion == BLOCK_RBD_COMPLETION_DEFAULT ||
               o->completion == BLOCK_RBD_COMPLETION_CALLBACK ||
               o->completion == BLOCK_RBD_COMPLETION_POLL,
               "rbd-completion %d", (int)o->completion);
}

static void feo_check_export(const ExportOpts *e)
{
    fuzz_check(e->socket && *e->socket, "socket missing");
    fuzz_check(e->driver, "driver missing");
    /* Each driver's options are its own struct (block.driver_opts): one
     * driver's image or ceph-* keys cannot end up in another's. */
    if (!strcmp(e->driver, "file")) {
        const BlockFileOptions *fo = e->block.driver_opts;
        struct stat st;

        fuzz_check(e->file && *e->file, "driver=file without file=");
        fuzz_check(fo && !g_strcmp0(fo->filename, e->file),
                   "driver=file: the driver read another file= than %s",
                   e->file);
        fuzz_check(fstatat(feo_dir_fd, e->file, &st, 0) == 0,
                   "file=%s does not exist", e->file);
        fuzz_check(fo->aio == e->aio, "driver=file: aio %d, export's %d",
                   (int)fo->aio, (int)e->aio);
    } else if (!strcmp(e->driver, "rbd")) {
        feo_check_rbd(e);
    } else {
        const BlockNullOptions *no = e->block.driver_opts;

        fuzz_check(!strcmp(e->driver, "null"), "driver '%s'", e->driver);
        fuzz_check(no && no->size > 0, "driver=null with size 0");
        fuzz_check(!e->file, "driver=null with file=%s", e->file);
    }
    fuzz_check(e->num_queues >= 1 &&
               e->num_queues <= EXPORT_OPTS_MAX_QUEUES,
               "num-queues %u", e->num_queues);
    fuzz_check(feo_is_pow2(e->queue_size) && e->queue_size >= 2 &&
               e->queue_size <= EXPORT_OPTS_MAX_QUEUE_SIZE,
               "queue-size %u", e->queue_size);
    fuzz_check(e->logical_block_size == 512 ||
               e->logical_block_size == 4096,
               "logical-block-size %u", e->logical_block_size);
    fuzz_check(e->aio == BLOCK_AIO_IO_URING || e->aio == BLOCK_AIO_NATIVE ||
               e->aio == BLOCK_AIO_THREADS, "aio %d", (int)e->aio);
    fuzz_check(e->serial && strlen(e->serial) <= EXPORT_OPTS_SERIAL_BYTES,
               "serial '%s'", e->serial ? e->serial : "(null)");
    fuzz_check(e->iothread >= -1 &&
               e->iothread < EXPORT_OPTS_MAX_IOTHREADS,
               "iothread %d", e->iothread);
    fuzz_check(e->socket_mode >= 1 && e->socket_mode <= 0777,
               "socket-mode %o", (unsigned int)e->socket_mode);
    fuzz_check(e->socket_chown ||
               (e->socket_uid == (uid_t)-1 && e->socket_gid == (gid_t)-1),
               "socket owner set without socket_chown");
}

/* The helpers on one argument: consistent with each other. */
static void feo_check_helpers(const char *s)
{
    uint64_t size = 0;
    unsigned int n = 0, n64 = 0;
    bool size_ok = export_opts_parse_size(s, &size);
    bool b;

    if (export_opts_parse_uint(s, EXPORT_OPTS_MAX_QUEUE_SIZE, &n)) {
        fuzz_check(size_ok && size == n && n <= EXPORT_OPTS_MAX_QUEUE_SIZE,
                   "parse_uint('%s') = %u, parse_size %d/%" PRIu64, s, n,
                   size_ok, size);
    } else {
        fuzz_check(!size_ok || size > EXPORT_OPTS_MAX_QUEUE_SIZE,
                   "parse_uint('%s') failed but parse_size gave %" PRIu64,
                   s, size);
    }
    if (export_opts_parse_uint(s, UINT32_MAX, &n64)) {
        fuzz_check(size_ok && size == n64, "parse_uint('%s', UINT32_MAX)",
                   s);
    }
    if (size_ok) {
        fuzz_check(g_ascii_isdigit(*s), "parse_size('%s') accepted a "
                   "string without a leading digit", s);
    }
    if (export_opts_parse_bool(s, &b)) {
        fuzz_check(strlen(s) <= 5, "parse_bool('%s')", s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GPtrArray) list =
        g_ptr_array_new_with_free_func((GDestroyNotify)export_opts_free);
    g_autofree char *text = g_strndup((const char *)data, size);
    g_auto(GStrv) args = g_strsplit(text, "\n", FEO_MAX_EXPORTS);

    for (char **a = args; *a; a++) {
        guint before = list->len;
        GError *err = NULL;

        bool ok;

        feo_check_helpers(*a);
        /* Relative file= paths name the images in feo_dir. */
        g_assert(fchdir(feo_dir_fd) == 0);
        ok = export_opts_list_add(list, *a, &err);
        g_assert(fchdir(feo_cwd_fd) == 0);
        if (!ok) {
            fuzz_check(err && err->message && *err->message,
                       "--export %s: failed without a message", *a);
            fuzz_check(list->len == before, "failed add changed the list");
            if (feo_verbose) {
                printf("  --export %s: %s\n", *a, err->message);
            }
            g_error_free(err);
            continue;
        }
        fuzz_check(!err, "success with an error set: %s", err->message);
        fuzz_check(list->len == before + 1, "add did not append one");
        if (feo_verbose) {
            printf("  --export %s: ok\n", *a);
        }
        feo_check_export(g_ptr_array_index(list, before));
        for (guint i = 0; i < before; i++) {
            const ExportOpts *o = g_ptr_array_index(list, i);
            const ExportOpts *e = g_ptr_array_index(list, before);

            fuzz_check(strcmp(o->socket, e->socket) != 0,
                       "socket %s accepted twice", e->socket);
        }
    }
    return 0;
}
