/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * tools/config-file.c: what lines become which arguments, which lines are
 * refused (with file and line in the message), and --config expansion in
 * place within an argument vector.
 */
#include "qemu/osdep.h"
#include "tools/config-file.h"

/* Parse @text and join the arguments with '|'; NULL on error. */
static char *parse_joined(const char *text, GError **errp)
{
    g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);

    if (!config_file_parse("t.conf", text, args, errp)) {
        return NULL;
    }
    g_ptr_array_add(args, NULL);
    return g_strjoinv("|", (char **)args->pdata);
}

static void test_parse_ok(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        { "", "" },
        { "# only a comment\n\n   \n", "" },
        { "iothreads 2\n", "--iothreads|2" },
        { "--iothreads 2", "--iothreads|2" },
        { "  seccomp\ton  \r\n", "--seccomp|on" },
        { "daemonize\n", "--daemonize" },
        { "export socket=/run/a b.sock,file=/srv/x.img\n",
          "--export|socket=/run/a b.sock,file=/srv/x.img" },
        { "export  socket=/s,file=/f # not a comment",
          "--export|socket=/s,file=/f # not a comment" },
        { "blockdev driver=file,node-name=d,filename=/f\n"
          "export type=vhost-user-blk,id=e,node-name=d,addr.type=fd,addr.str=3",
          "--blockdev|driver=file,node-name=d,filename=/f|--export|"
          "type=vhost-user-blk,id=e,node-name=d,addr.type=fd,addr.str=3" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        g_autofree char *got = parse_joined(cases[i].text, &err);

        g_assert_no_error(err);
        g_assert_cmpstr(got, ==, cases[i].want);
    }
}

static void test_parse_bad(void)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        { "iothreads 2\n=3\n", "t.conf:2: '=3' does not start with an option" },
        { "iothreads=2\n", "t.conf:1: write 'iothreads 2'" },
        { "\n\n-x\n", "t.conf:3:" },
        { "config /etc/other.conf", "cannot include another" },
        { "--config=/x", "write 'config /x'" },
        { "9lives on", "does not start with an option name" },
        { "ex/port x", "does not start with an option name" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        g_autofree char *got = parse_joined(cases[i].text, &err);

        g_assert_null(got);
        g_assert_nonnull(err);
        if (!strstr(err->message, cases[i].msg)) {
            g_error("case %zu: '%s' lacks '%s'", i, err->message,
                    cases[i].msg);
        }
        g_clear_error(&err);
    }
}

static void test_expand(void)
{
    g_autofree char *dir = g_dir_make_tmp("vb-conf-XXXXXX", NULL);
    g_autofree char *conf = g_build_filename(dir, "vm.conf", NULL);
    g_autofree char *eq = NULL;
    g_autofree char *joined = NULL;
    char *argv0[] = { "vhost-blkd", "--log-level", "debug", NULL, NULL,
                      "--iothreads", "4", NULL };
    char **argv = argv0;
    int argc = 7;
    GError *err = NULL;

    g_assert_true(g_file_set_contents(conf, "iothreads 2\n"
                                      "export socket=/s,file=/f\n", -1,
                                      NULL));
    eq = g_strdup_printf("--config=%s", conf);
    argv0[3] = "--config";
    argv0[4] = conf;
    g_assert_true(config_file_expand_args(&argc, &argv, &err));
    g_assert_no_error(err);
    g_assert_cmpint(argc, ==, 9);
    g_assert_null(argv[argc]);
    joined = g_strjoinv("|", argv);
    g_assert_cmpstr(joined, ==, "vhost-blkd|--log-level|debug|--iothreads|2|"
                    "--export|socket=/s,file=/f|--iothreads|4");
    g_strfreev(argv);

    /* --config=FILE, and no --config at all leaves argv alone */
    {
        char *v[] = { "vhost-blkd", eq, NULL };
        char **vp = v;
        int c = 2;

        g_assert_true(config_file_expand_args(&c, &vp, &err));
        g_assert_cmpint(c, ==, 5);
        g_assert_cmpstr(vp[1], ==, "--iothreads");
        g_strfreev(vp);
        vp = v;
        c = 1;
        g_assert_true(config_file_expand_args(&c, &vp, &err));
        g_assert_true(vp == v);
    }

    /* errors: missing file, missing argument, NUL byte */
    {
        char *v[] = { "vhost-blkd", "--config", "/nonexistent/x.conf", NULL };
        char **vp = v;
        int c = 3;

        g_assert_false(config_file_expand_args(&c, &vp, &err));
        g_assert_nonnull(strstr(err->message, "/nonexistent/x.conf"));
        g_clear_error(&err);
        c = 2;
        v[2] = NULL;
        g_assert_false(config_file_expand_args(&c, &vp, &err));
        g_assert_nonnull(strstr(err->message, "needs a file name"));
        g_clear_error(&err);
        g_assert_true(g_file_set_contents(conf, "iothreads 2\n\0x", 14,
                                          NULL));
        v[2] = conf;
        c = 3;
        g_assert_false(config_file_expand_args(&c, &vp, &err));
        g_assert_nonnull(strstr(err->message, "NUL byte"));
        g_clear_error(&err);
    }
    unlink(conf);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/config-file/parse/ok", test_parse_ok);
    g_test_add_func("/config-file/parse/bad", test_parse_bad);
    g_test_add_func("/config-file/expand", test_expand);
    return g_test_run();
}
