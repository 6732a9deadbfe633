/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of the rbd driver as a module (block-rbd.so, see
 * include/block/module.h), with no Ceph cluster:
 *
 * - a null export maps none of Ceph's libraries (/proc/PID/maps) and its
 *   file-backed resident memory stays under a bound that Ceph's mapping
 *   alone exceeds; a QMP blockdev-add driver=rbd then loads the module
 *   (the error it gets is the module's own: no such ceph.conf), and the
 *   export keeps serving;
 * - with VHOST_BLK_MODULE_DIR naming an empty directory, blockdev-add,
 *   --export rbd= and --blockdev driver=rbd fail with an error naming the
 *   image, the path tried and what to do, while a file export of the same
 *   process serves;
 * - a file there that is not a module is refused with dlerror()'s reason;
 * - a copy of vhost-blkd outside the build tree, next to a planted
 *   build.ninja and block/block-rbd.so, does not look there;
 * - a module directory or file writable by group or others, or owned by
 *   another user, is refused with a message, before dlopen().
 *
 * Run again with VB_SECCOMP=on (meson: test-blkd-module-seccomp): the
 * blockdev-add comes after the iothreads' filter is installed.
 * Deterministic: every check is structural (what is mapped, what an error
 * says); the memory bound, on the libraries mapped (not the executable
 * or sanitizer runtimes, which an instrumented build makes bigger), has
 * a margin of more than 5 MiB both ways.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <json-glib/json-glib.h>
#include <linux/virtio_blk.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

/*
 * File-backed resident memory of the libraries of a vhost-blkd with one
 * null export: about 6 MiB (docs/user-guide.md, "The driver module");
 * librbd, librados, libceph-common and the C++ libraries they bring add
 * about 15 MiB (21 MiB in all before the driver became a module).
 */
#define RSS_FILE_BOUND_KB (12 * 1024)

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    VbQmp q;
    char *moddir;               /* VHOST_BLK_MODULE_DIR of the daemon */
} Fixture;

/* ---- QMP ---------------------------------------------------------------- */

/* A blockdev-add driver=rbd of image rbd/@image with ceph.conf @conf. */
static char *rbd_blockdev_add(Fixture *f, const char *node,
                              const char *image, const char *conf)
{
    g_autofree char *cmd = g_strdup_printf(
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"rbd\","
        "\"node-name\":\"%s\",\"pool\":\"rbd\",\"image\":\"%s\","
        "\"conf\":\"%s\"}}", node, image, conf);

    return vb_qmp_error(&f->q, cmd);
}

/* ---- the daemon's memory ------------------------------------------------ */

static char *proc_file(Fixture *f, const char *name)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/%s", (int)f->d.pid,
                                            name);
    char *text = NULL;

    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    return text;
}

/* The lines of /proc/PID/maps naming a Ceph library or the module. */
static unsigned int ceph_mappings(Fixture *f)
{
    g_autofree char *maps = proc_file(f, "maps");
    g_auto(GStrv) lines = g_strsplit(maps, "\n", -1);
    unsigned int n = 0;

    for (char **l = lines; *l; l++) {
        if (strstr(*l, "/librbd.so") || strstr(*l, "/librados.so") ||
            strstr(*l, "/libceph-common.so") || strstr(*l, "/block-rbd.so")) {
            n++;
        }
    }
    return n;
}

/* Resident kB of the mappings that are not libraries the daemon loads:
 * its own executable (bigger in an instrumented build) and the sanitizer
 * runtimes (libasan, libubsan, libtsan).  Left out of the bound below. */
static long own_rss_kb(Fixture *f)
{
    g_autofree char *link = g_strdup_printf("/proc/%d/exe", (int)f->d.pid);
    g_autofree char *exe = g_file_read_link(link, NULL);
    g_autofree char *smaps = proc_file(f, "smaps");
    g_auto(GStrv) lines = g_strsplit(smaps, "\n", -1);
    bool own = false;
    long kb = 0;

    g_assert_nonnull(exe);
    for (char **l = lines; *l; l++) {
        if (g_ascii_isxdigit(**l) && strchr(*l, '-')) {
            /* a mapping's header line: "start-end perms ... path" */
            own = g_str_has_suffix(*l, exe) || strstr(*l, "/libasan.so") ||
                  strstr(*l, "/libubsan.so") || strstr(*l, "/libtsan.so");
        } else if (own && g_str_has_prefix(*l, "Rss:")) {
            kb += strtol(*l + strlen("Rss:"), NULL, 10);
        }
    }
    return kb;
}

static long status_kb(Fixture *f, const char *key)
{
    g_autofree char *status = proc_file(f, "status");
    g_autofree char *needle = g_strdup_printf("\n%s:", key);
    const char *p = strstr(status, needle);

    g_assert_nonnull(p);
    return strtol(p + strlen(needle), NULL, 10);
}

/* ---- fixtures ----------------------------------------------------------- */

/* One export (@null_driver or a file) and a QMP monitor; @moddir, if not
 * NULL, becomes the daemon's VHOST_BLK_MODULE_DIR. */
static void daemon_start(Fixture *f, bool null_driver, const char *moddir)
{
    VbExportSpec spec = { .null_driver = null_driver };
    g_autofree char *chardev = NULL;
    const char *args[5];

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              f->qmp_path);
    args[0] = "--chardev";
    args[1] = chardev;
    args[2] = "--monitor";
    args[3] = "chardev=mon";
    args[4] = NULL;
    f->d.args = args;
    /* The daemon inherits our environment. */
    if (moddir) {
        g_setenv("VHOST_BLK_MODULE_DIR", moddir, TRUE);
    } else {
        g_unsetenv("VHOST_BLK_MODULE_DIR");
    }
    vb_daemon_start(&f->d);
    g_unsetenv("VHOST_BLK_MODULE_DIR");
    f->d.args = NULL;
    vb_qmp_connect(&f->q, f->qmp_path, &f->d);
}

static void daemon_stop(Fixture *f)
{
    vb_qmp_close(&f->q);
    g_free(f->qmp_path);
    vb_daemon_cleanup(&f->d);
}

/* A scratch directory for VHOST_BLK_MODULE_DIR: empty, or holding a
 * block-rbd.so that is not a shared object. */
static char *moddir_new(bool junk)
{
    g_autofree char *tmpl = g_strdup_printf("/var/tmp/vb-itest-%d-mod-XXXXXX",
                                            (int)getpid());
    char *dir = g_strdup(mkdtemp(tmpl));

    g_assert_nonnull(dir);
    if (junk) {
        g_autofree char *so = g_build_filename(dir, "block-rbd.so", NULL);

        g_assert_true(g_file_set_contents(so, "not a module\n", -1, NULL));
    }
    return dir;
}

static void moddir_free(char *dir)
{
    g_autofree char *so = g_build_filename(dir, "block-rbd.so", NULL);

    unlink(so);
    rmdir(dir);
    g_free(dir);
}

/* A null export answers a write and a read (it stores nothing). */
static void check_null_export_works(Fixture *f)
{
    VhostUserFrontend *fe = vb_connect_started(&f->d, 0, 0);
    g_autoptr(GError) err = NULL;
    uint8_t *buf = vhost_user_frontend_mem_alloc(fe, 4096, 4096, &err);

    g_assert_no_error(err);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_OUT, 8, buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_IN, 8, buf, 4096, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vhost_user_frontend_free(fe);
}

/* ---- tests -------------------------------------------------------------- */

/* A null export carries no Ceph; the first driver=rbd node loads it. */
static void test_null_no_ceph(void)
{
    Fixture f;
    g_autofree char *conf = NULL;
    g_autofree char *err = NULL;
    long rss, rss_file, own;

    daemon_start(&f, true, NULL);
    check_null_export_works(&f);
    rss = status_kb(&f, "VmRSS");
    rss_file = status_kb(&f, "RssFile");
    own = own_rss_kb(&f);
    g_test_message("null export: VmRSS %ld kB, RssFile %ld kB (of which "
                   "the executable and sanitizer runtimes %ld kB)", rss,
                   rss_file, own);
    g_assert_cmpuint(ceph_mappings(&f), ==, 0);
    g_assert_cmpint(rss_file - own, <, RSS_FILE_BOUND_KB);

    /* The module loads (RTLD_NOW: every symbol it needs from the daemon
     * is there) and runs: the error is librados's, about the conf. */
    conf = g_strdup_printf("%s/no-such-ceph.conf", f.d.dir);
    err = rbd_blockdev_add(&f, "r0", "img0", conf);
    g_assert_nonnull(err);
    g_test_message("blockdev-add: %s", err);
    g_assert_nonnull(strstr(err, "rbd:rbd/img0"));
    g_assert_nonnull(strstr(err, "cannot read the Ceph configuration"));
    g_assert_nonnull(strstr(err, conf));
    g_assert_null(strstr(err, "module"));
    g_assert_cmpuint(ceph_mappings(&f), >, 0);
    g_test_message("after loading the module: VmRSS %ld kB, RssFile %ld kB",
                   status_kb(&f, "VmRSS"), status_kb(&f, "RssFile"));
    check_null_export_works(&f);
    g_assert_true(vb_daemon_alive(&f.d));
    daemon_stop(&f);
}

/* What the error of a missing module must say. */
static void check_missing_error(const char *err, const char *moddir)
{
    g_autofree char *path = g_build_filename(moddir, "block-rbd.so", NULL);

    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "rbd:rbd/img0"));           /* the node */
    g_assert_nonnull(strstr(err, "needs the module block-rbd.so"));
    g_assert_nonnull(strstr(err, path));                     /* tried */
    g_assert_nonnull(strstr(err, "VHOST_BLK_MODULE_DIR"));
    g_assert_nonnull(strstr(err, "No such file or directory"));
    g_assert_nonnull(strstr(err, "-Drbd=enabled"));          /* what to do */
    g_assert_nonnull(strstr(err, CONFIG_MODULE_DIR));
}

/* Start the vhost-blkd at @blkd with @args (one export must fail) and
 * VHOST_BLK_MODULE_DIR=@moddir, or unset if NULL: its stderr. */
static char *blkd_at_fails(const char *blkd, const char *moddir,
                           const char *const *args)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    g_auto(GStrv) env = moddir ?
        g_environ_setenv(g_get_environ(), "VHOST_BLK_MODULE_DIR", moddir,
                         TRUE) :
        g_environ_unsetenv(g_get_environ(), "VHOST_BLK_MODULE_DIR");
    g_autoptr(GError) gerr = NULL;
    char *out = NULL;
    int status;

    g_ptr_array_add(argv, (char *)blkd);
    for (const char *const *a = args; *a; a++) {
        g_ptr_array_add(argv, (char *)*a);
    }
    g_ptr_array_add(argv, NULL);
    g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, env,
                               G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
                               &out, &status, &gerr));
    g_assert_no_error(gerr);
    g_test_message("vhost-blkd said: %s", out);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), !=, 0);
    return out;
}

static char *blkd_fails(const char *moddir, const char *const *args)
{
    return blkd_at_fails(g_getenv("VHOST_BLKD"), moddir, args);
}

/* No module: a clear error for every syntax; the file export serves. */
static void test_missing_module(void)
{
    char *moddir = moddir_new(false);
    g_autofree char *conf = NULL;
    g_autofree char *err = NULL;
    g_autofree char *out1 = NULL, *out2 = NULL;
    g_autofree char *sock = NULL, *exp_rbd = NULL, *exp_file = NULL;
    Fixture f;

    daemon_start(&f, false, moddir);
    conf = g_strdup_printf("%s/no-such-ceph.conf", f.d.dir);
    err = rbd_blockdev_add(&f, "r0", "img0", conf);
    g_test_message("blockdev-add: %s", err);
    check_missing_error(err, moddir);
    /* Nothing of Ceph came in; the file export and QMP carry on. */
    g_assert_cmpuint(ceph_mappings(&f), ==, 0);
    vb_check_export_works(&f.d, 0);
    g_free(err);
    err = rbd_blockdev_add(&f, "r0", "img0", conf);     /* tried again */
    check_missing_error(err, moddir);
    g_assert_null(vb_qmp_error(&f.q,
        "{\"execute\":\"query-named-block-nodes\"}"));
    vb_check_export_works(&f.d, 0);

    /* The command line's two syntaxes, at start-up. */
    sock = g_strdup_printf("%s/rbd.sock", f.d.dir);
    exp_rbd = g_strdup_printf("socket=%s,rbd=rbd/img0,ceph-conf=%s", sock,
                              conf);
    exp_file = g_strdup_printf("socket=%s/file.sock,file=%s", f.d.dir,
                               f.d.image[0]);
    {
        const char *args[] = { "--export", exp_file, "--export", exp_rbd,
                               NULL };

        out1 = blkd_fails(moddir, args);
        check_missing_error(out1, moddir);
        g_assert_nonnull(strstr(out1, "--export socket="));
        g_assert_nonnull(strstr(out1, sock));
    }
    {
        const char *args[] = {
            "--export", exp_file,
            "--blockdev", "driver=rbd,node-name=n0,pool=rbd,image=img0",
            NULL,
        };

        out2 = blkd_fails(moddir, args);
        check_missing_error(out2, moddir);
        g_assert_nonnull(strstr(out2, "--blockdev driver=rbd,node-name=n0"));
    }
    daemon_stop(&f);
    moddir_free(moddir);
}

/* A module file that does not load: dlerror()'s reason, nothing else. */
static void test_broken_module(void)
{
    char *moddir = moddir_new(true);
    g_autofree char *path = g_build_filename(moddir, "block-rbd.so", NULL);
    g_autofree char *conf = NULL;
    g_autofree char *err = NULL;
    Fixture f;

    daemon_start(&f, false, moddir);
    conf = g_strdup_printf("%s/no-such-ceph.conf", f.d.dir);
    err = rbd_blockdev_add(&f, "r0", "img0", conf);
    g_test_message("blockdev-add: %s", err);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "rbd:rbd/img0"));
    g_assert_nonnull(strstr(err, "cannot load the rbd driver module"));
    g_assert_nonnull(strstr(err, path));
    /* dlerror(): "invalid ELF header" or "file too short" */
    g_assert_true(strstr(err, "ELF") || strstr(err, "too short"));
    g_assert_cmpuint(ceph_mappings(&f), ==, 0);
    vb_check_export_works(&f.d, 0);
    daemon_stop(&f);
    moddir_free(moddir);
}

/*
 * An installed program (here a copy of vhost-blkd outside the build tree)
 * never loads from a build tree: not from one planted next to it, as
 * root.  The old loader climbed from the executable to the nearest
 * build.ninja and dlopen()ed its block/block-rbd.so.
 */
static void test_planted_build_tree(void)
{
    g_autofree char *tmpl = g_strdup_printf(
        "/var/tmp/vb-itest-%d-plant-XXXXXX", (int)getpid());
    const char *root = mkdtemp(tmpl);
    g_autofree char *tools = NULL, *block = NULL, *copy = NULL;
    g_autofree char *ninja = NULL, *so = NULL, *img = NULL;
    g_autofree char *exp_file = NULL, *bdev = NULL, *out = NULL;
    g_autofree char *bin = NULL;
    gsize len = 0;

    g_assert_nonnull(root);
    tools = g_build_filename(root, "tools", NULL);
    block = g_build_filename(root, "block", NULL);
    copy = g_build_filename(tools, "vhost-blkd", NULL);
    ninja = g_build_filename(root, "build.ninja", NULL);
    so = g_build_filename(block, "block-rbd.so", NULL);
    img = g_build_filename(root, "disk.img", NULL);
    g_assert_cmpint(mkdir(tools, 0755), ==, 0);
    g_assert_cmpint(mkdir(block, 0755), ==, 0);
    g_assert_true(g_file_get_contents(g_getenv("VHOST_BLKD"), &bin, &len,
                                      NULL));
    g_assert_true(g_file_set_contents(copy, bin, len, NULL));
    g_assert_cmpint(chmod(copy, 0755), ==, 0);
    g_assert_true(g_file_set_contents(ninja, "# planted\n", -1, NULL));
    g_assert_true(g_file_set_contents(so, "not a module\n", -1, NULL));
    g_assert_true(g_file_set_contents(img, "", 0, NULL));
    g_assert_cmpint(truncate(img, 1 << 20), ==, 0);

    exp_file = g_strdup_printf("socket=%s/file.sock,file=%s", root, img);
    bdev = g_strdup_printf("driver=rbd,node-name=n0,pool=rbd,image=img0,"
                           "conf=%s/no-such-ceph.conf", root);
    {
        const char *args[] = { "--export", exp_file, "--blockdev", bdev,
                               NULL };

        out = blkd_at_fails(copy, NULL, args);
    }
    /* The installed directory only (and, if a module is installed there,
     * its own error about the missing ceph.conf). */
    g_assert_nonnull(strstr(out, "rbd:rbd/img0"));
    if (strstr(out, so) || strstr(out, "ELF") || strstr(out, "too short") ||
        strstr(out, "(the build tree)")) {
        g_error("a copy of vhost-blkd outside the build tree looked in the "
                "planted one: %s", out);
    }

    unlink(img);
    unlink(so);
    unlink(ninja);
    unlink(copy);
    rmdir(block);
    rmdir(tools);
    rmdir(root);
}

/* A blockdev-add driver=rbd refused before dlopen(): the error names
 * @bad and says @why; nothing of the file was loaded. */
static void check_refused(Fixture *f, const char *bad, const char *why)
{
    g_autofree char *err = rbd_blockdev_add(f, "r0", "img0", "/nonexistent");

    g_test_message("blockdev-add: %s", err);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "rbd:rbd/img0"));
    g_assert_nonnull(strstr(err, "is not loaded"));
    g_assert_nonnull(strstr(err, bad));
    g_assert_nonnull(strstr(err, why));
    g_assert_null(strstr(err, "ELF"));
    g_assert_null(strstr(err, "too short"));
    g_assert_cmpuint(ceph_mappings(f), ==, 0);
}

/*
 * A module directory (or file) that others may write is refused with a
 * message saying what to fix, before anything is loaded; once fixed the
 * same daemon loads it (here: dlopen()'s reason for the junk file).
 */
static void test_untrusted_moddir(void)
{
    char *moddir = moddir_new(true);
    g_autofree char *so = g_build_filename(moddir, "block-rbd.so", NULL);
    g_autofree char *err = NULL;
    Fixture f;

    daemon_start(&f, false, moddir);
    g_assert_cmpint(chmod(moddir, 0777), ==, 0);
    check_refused(&f, moddir, "writable by every user (mode 0777)");
    g_assert_cmpint(chmod(moddir, 0770), ==, 0);
    check_refused(&f, moddir, "writable by its group (mode 0770)");
    g_assert_cmpint(chmod(moddir, 01777), ==, 0);  /* sticky: still not */
    check_refused(&f, moddir, "chmod go-w");
    g_assert_cmpint(chmod(moddir, 0700), ==, 0);
    g_assert_cmpint(chmod(so, 0646), ==, 0);
    check_refused(&f, so, "writable by every user (mode 0646)");
    g_assert_cmpint(chmod(so, 0644), ==, 0);
    if (geteuid() == 0) {
        g_assert_cmpint(chown(moddir, 65534, 65534), ==, 0);
        check_refused(&f, moddir, "belongs to uid 65534");
        g_assert_cmpint(chown(moddir, 0, 0), ==, 0);
    } else {
        g_test_message("not root: the foreign-owner case needs chown");
    }
    /* Trusted again: loaded, and refused by the loader this time. */
    err = rbd_blockdev_add(&f, "r0", "img0", "/nonexistent");
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "cannot load the rbd driver module"));
    vb_check_export_works(&f.d, 0);
    daemon_stop(&f);
    moddir_free(moddir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/module/null-export-maps-no-ceph", test_null_no_ceph);
    g_test_add_func("/module/missing", test_missing_module);
    g_test_add_func("/module/broken", test_broken_module);
    g_test_add_func("/module/planted-build-tree", test_planted_build_tree);
    g_test_add_func("/module/untrusted-dir", test_untrusted_moddir);
    return g_test_run();
}
