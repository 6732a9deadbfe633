/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of reading a node's options through the driver registry
 * (blk_options_parse(), include/block/block.h): QEMU's names and aliases
 * (host_device, null-co, null-aio), keyval strings where numbers and
 * booleans are expected, the keys a driver leaves for the caller, the
 * messages for an unknown driver and a QEMU-only format, the --export
 * syntax (the key that names the driver, its own messages), and rbd's
 * options, which are read without loading its module.
 */
#include "qemu/osdep.h"
#include "block/block.h"
#include "qemu/qmp-args.h"
#include "block/file.h"
#include "block/null.h"
#include "block/rbd.h"

/* What a driver's parser read, in that driver's own struct. */
#define FILE_OPTS(o) ((const BlockFileOptions *)(o).driver_opts)
#define NULL_OPTS(o) ((const BlockNullOptions *)(o).driver_opts)
#define RBD_OPTS(o) ((const BlockRbdOptions *)(o).driver_opts)

/* A parse of @kv (keyval, "driver" implied first); the arguments live in
 * *@obj and the parse's strings in @p until the caller frees them. */
static bool parse_kv(const char *kv, bool export_syntax, BlockOptions *o,
                     BlockOptsParse *p, QmpArgs *a, GError **errp)
{
    g_autoptr(GError) err = NULL;
    JsonObject *obj = keyval_parse(kv, export_syntax ? NULL : "driver",
                                   false, &err);
    const char *driver = NULL;

    g_assert_no_error(err);
    qmp_args_init(a, obj, true, NULL);
    json_object_unref(obj);     /* the QmpArgs holds it */
    blk_options_init(o);
    p->export_syntax = export_syntax;
    if (!export_syntax) {
        g_assert_true(qmp_args_str(a, "driver", true, &driver, NULL));
        p->driver = driver;
    }
    return blk_options_parse(o, a, p, errp);
}

static void test_file_aliases(void)
{
    g_autofree char *path = g_strdup_printf("%s/opts-%d.img",
                                            g_get_tmp_dir(), (int)getpid());
    g_autofree char *kv = NULL;
    BlockOptsParse p = { 0 };
    g_auto(QmpArgs) a = { 0 };
    GError *err = NULL;
    BlockOptions o;

    g_assert_true(g_file_set_contents(path, "", 0, NULL));
    kv = g_strdup_printf("host_device,filename=%s,aio=native", path);
    g_assert_true(parse_kv(kv, false, &o, &p, &a, &err));
    g_assert_no_error(err);
    g_assert_cmpstr(o.driver, ==, "file");
    g_assert_cmpstr(FILE_OPTS(o)->filename, ==, path);
    g_assert_cmpint(FILE_OPTS(o)->aio, ==, BLOCK_AIO_NATIVE);
    g_assert_true(qmp_args_check_done(&a, NULL));
    /* A regular file is not a host_device: QEMU's check, our advice. */
    g_assert_false(blk_options_check(&o, &p, &err));
    g_assert_nonnull(strstr(err->message, "is not a block device: use "
                                          "driver=file"));
    g_clear_error(&err);
    blk_options_parse_cleanup(&p);
    qmp_args_cleanup(&a);

    /* driver=file takes it; an unknown key is left for the caller. */
    g_free(kv);
    kv = g_strdup_printf("file,filename=%s,bogus=1", path);
    g_assert_true(parse_kv(kv, false, &o, &p, &a, &err));
    g_assert_true(blk_options_check(&o, &p, &err));
    g_assert_no_error(err);
    g_assert_false(qmp_args_check_done(&a, &err));
    g_assert_cmpstr(err->message, ==, "Parameter 'bogus' is unexpected");
    g_clear_error(&err);
    blk_options_parse_cleanup(&p);
    unlink(path);
}

static void test_null_names(void)
{
    static const struct {
        const char *kv, *driver, *filename;
    } cases[] = {
        { "null-co", "null-co", "null-co://" },
        { "null-aio", "null-aio", "null-aio://" },
        { "null-co,size=1M,read-zeroes=on", "null-co",
          "json:{\"driver\": \"null-co\", \"size\": 1048576}" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        BlockOptsParse p = { 0 };
        g_auto(QmpArgs) a = { 0 };
        g_autoptr(GError) err = NULL;
        BlockNodeNames names;
        BlockBackend *blk;
        BlockOptions o;

        g_assert_true(parse_kv(cases[i].kv, false, &o, &p, &a, &err));
        g_assert_cmpstr(o.driver, ==, "null");
        g_assert_true(qmp_args_check_done(&a, NULL));
        g_assert_true(blk_options_check(&o, &p, &err));
        blk = blk_open(&o, &err);
        g_assert_no_error(err);
        blk_node_names(blk, &o, p.driver, &names);
        g_assert_cmpstr(names.driver, ==, cases[i].driver);
        g_assert_cmpstr(names.filename, ==, cases[i].filename);
        g_assert_false(names.cache_direct);
        g_assert_cmpint(NULL_OPTS(o)->read_zeroes, ==, i == 2);
        blk_node_names_free(&names);
        blk_close(blk);
        blk_options_parse_cleanup(&p);
    }
}

static void test_unknown_driver(void)
{
    static const struct {
        const char *kv, *msg;
    } cases[] = {
        { "nope", "Parameter 'driver' does not accept value 'nope'" },
        /* A filter goes over a node: the monitor builds it, not this. */
        { "throttle", "Parameter 'driver' does not accept value " },
        { "vmdk", "convert the image with qemu-img convert -O qcow2" },
        { "blkdebug", "Driver 'blkdebug' is not supported by vhost-blkd" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        BlockOptsParse p = { 0 };
        g_auto(QmpArgs) a = { 0 };
        GError *err = NULL;
        BlockOptions o;

        g_assert_false(parse_kv(cases[i].kv, false, &o, &p, &a, &err));
        g_assert_nonnull(strstr(err->message, cases[i].msg));
        g_error_free(err);
        blk_options_parse_cleanup(&p);
    }
    g_assert_false(blk_driver_exists("null-co"));   /* an alias */
    g_assert_true(blk_driver_exists("null"));
    g_assert_false(blk_driver_exists("throttle"));
}

static void test_export_syntax(void)
{
    static const struct {
        const char *kv, *msg;
    } bad[] = {
        { "size=0", "bad value '0' for size: use a positive number" },
        { "size=12Q", "bad value '12Q' for size" },
        { "", "driver=null needs size=N" },
    };
    BlockOptsParse p = { .driver = "null" };
    g_auto(QmpArgs) a = { 0 };
    GError *err = NULL;
    BlockOptions o;

    g_assert_cmpstr(blk_driver_for_export_key("file"), ==, "file");
    g_assert_null(blk_driver_for_export_key("size"));
    g_assert_true(parse_kv("size=16M", true, &o, &p, &a, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(NULL_OPTS(o)->size, ==, 16 << 20);
    /* Reads of an --export null node are not zeroed: as before. */
    g_assert_false(NULL_OPTS(o)->read_zeroes);
    blk_options_parse_cleanup(&p);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BlockOptsParse q = { .driver = "null" };
        g_auto(QmpArgs) b = { 0 };

        g_assert_false(parse_kv(bad[i].kv, true, &o, &q, &b, &err));
        g_assert_nonnull(strstr(err->message, bad[i].msg));
        g_clear_error(&err);
        blk_options_parse_cleanup(&q);
    }
}

static unsigned int test_secrets_out;

static char *test_secret(void *opaque, const char *id, size_t *size,
                         GError **errp)
{
    if (strcmp(id, "sec0")) {
        g_set_error(errp, VB_ERROR, 0, "No secret with id '%s'", id);
        return NULL;
    }
    test_secrets_out++;
    *size = 9;
    return g_strdup("QVFBQQ==");
}

static void test_secret_free(char *key, size_t size)
{
    g_assert_cmpuint(size, ==, 9);
    g_assert_cmpuint(strlen(key) + 1, ==, size);
    test_secrets_out--;
    g_free(key);
}

/* rbd's options are read in the program, its module not loaded. */
static void test_rbd(void)
{
    g_autofree char *names = blk_driver_export_names();
    BlockOptsParse p = {
        .secret = test_secret,
        .secret_free = test_secret_free,
    };
    g_auto(QmpArgs) a = { 0 };
    GError *err = NULL;
    BlockOptions o;

    if (!strstr(names, "rbd")) {
        g_test_skip("no rbd in this build");
        return;
    }
    g_assert_true(blk_driver_opens_in_worker("rbd"));
    g_assert_false(blk_driver_opens_in_worker("file"));
    g_assert_true(parse_kv("rbd,pool=p,image=i,snapshot=s,key-secret=sec0,"
                           "server.0.host=::1,server.0.port=6789,"
                           "server.1.host=h2,auth-client-required.0=cephx,"
                           "x-connect-timeout=30,x-completion=poll",
                           false, &o, &p, &a, &err));
    g_assert_no_error(err);
    g_assert_true(qmp_args_check_done(&a, NULL));
    g_assert_cmpstr(o.driver, ==, "rbd");
    g_assert_cmpstr(RBD_OPTS(o)->pool, ==, "p");
    g_assert_cmpstr(RBD_OPTS(o)->image, ==, "i");
    g_assert_cmpstr(RBD_OPTS(o)->mon_host, ==, "[::1]:6789,h2");
    g_assert_cmpstr(RBD_OPTS(o)->auth_client_required, ==, "cephx");
    g_assert_cmpstr(RBD_OPTS(o)->key, ==, "QVFBQQ==");
    g_assert_cmpuint(RBD_OPTS(o)->connect_timeout, ==, 30);
    g_assert_cmpint(RBD_OPTS(o)->completion, ==, BLOCK_RBD_COMPLETION_POLL);
    g_assert_true(o.readonly);          /* a snapshot */
    blk_options_parse_cleanup(&p);
    g_assert_cmpuint(test_secrets_out, ==, 0);
    qmp_args_cleanup(&a);

    g_assert_false(parse_kv("rbd,pool=p,image=i,key-secret=nope", false,
                            &o, &p, &a, &err));
    g_assert_cmpstr(err->message, ==, "No secret with id 'nope'");
    g_clear_error(&err);
    blk_options_parse_cleanup(&p);
    qmp_args_cleanup(&a);

    /* --export: rbd=POOL/NAMESPACE/IMAGE@SNAP names the driver. */
    g_assert_cmpstr(blk_driver_for_export_key("rbd"), ==, "rbd");
    p = (BlockOptsParse) { .driver = "rbd" };
    g_assert_true(parse_kv("rbd=p/ns/img@s1,ceph-id=admin", true, &o, &p,
                           &a, &err));
    g_assert_no_error(err);
    g_assert_cmpstr(RBD_OPTS(o)->pool, ==, "p");
    g_assert_cmpstr(RBD_OPTS(o)->namespace_, ==, "ns");
    g_assert_cmpstr(RBD_OPTS(o)->image, ==, "img");
    g_assert_cmpstr(RBD_OPTS(o)->snapshot, ==, "s1");
    g_assert_cmpstr(RBD_OPTS(o)->user, ==, "admin");
    g_assert_cmpstr(p.image, ==, "img");
    g_assert_true(o.readonly);
    blk_options_parse_cleanup(&p);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/block-options/file-aliases", test_file_aliases);
    g_test_add_func("/block-options/null-names", test_null_names);
    g_test_add_func("/block-options/unknown-driver", test_unknown_driver);
    g_test_add_func("/block-options/export-syntax", test_export_syntax);
    g_test_add_func("/block-options/rbd", test_rbd);
    return g_test_run();
}
