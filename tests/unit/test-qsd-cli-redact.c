/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Secrets on the command line never reach a message (tools/qsd-cli.c):
 * qsd_cli_redact() on both option syntaxes, and the errors of options
 * that quote the argument back.
 */
#include "qemu/osdep.h"
#include "tools/qsd-cli.h"

static void check_redact(const char *arg, const char *want)
{
    g_autofree char *got = qsd_cli_redact(arg);

    g_assert_cmpstr(got, ==, want);
}

static void test_keyval(void)
{
    check_redact("secret,id=sec0,data=KEY",
                 "secret,id=sec0,data=<redacted>");
    /* ",," is a comma inside the value: all of it is the secret. */
    check_redact("secret,id=sec0,data=K,,E,,Y,format=raw",
                 "secret,id=sec0,data=<redacted>,format=raw");
    check_redact("driver=rbd,pool=p,image=i,key-secret=sec0,key=KEY",
                 "driver=rbd,pool=p,image=i,key-secret=sec0,key=<redacted>");
    check_redact("x,server.password=PW,tls-key=TK,passphrase=PP,Data=D",
                 "x,server.password=<redacted>,tls-key=<redacted>,"
                 "passphrase=<redacted>,Data=<redacted>");
    /* Names of secrets and paths to them stay. */
    check_redact("id=e,keyid=k,ceph-keyfile=/etc/ceph/k,file=/f",
                 "id=e,keyid=k,ceph-keyfile=/etc/ceph/k,file=/f");
    /* Malformed input is still redacted, and unchanged otherwise. */
    check_redact("data=KEY,", "data=<redacted>,");
    check_redact("=,,data=KEY,bare,data", "=,,data=<redacted>,bare,data");
    check_redact("id=a,,key=K,,L,file=f", "id=a,,key=<redacted>,file=f");
    check_redact("data=", "data=<redacted>");
    check_redact("", "");
}

static void test_json(void)
{
    g_autofree char *a = qsd_cli_redact(
        "{\"qom-type\": \"secret\", \"id\": \"sec0\", \"data\": \"KEY\"}");
    g_autofree char *b = qsd_cli_redact(
        "{\"driver\": \"x\", \"server\": {\"password\": \"PW\"}, "
        "\"list\": [{\"key\": \"K2\"}]}");
    g_autofree char *c = qsd_cli_redact("{\"data\": \"KEY\"");

    g_assert_null(strstr(a, "KEY"));
    g_assert_nonnull(strstr(a, "\"sec0\""));
    g_assert_nonnull(strstr(a, "\"data\":\"<redacted>\""));
    g_assert_null(strstr(b, "PW"));
    g_assert_null(strstr(b, "K2"));
    g_assert_nonnull(strstr(b, "\"driver\":\"x\""));
    /* Not JSON: nothing of it is shown. */
    g_assert_null(strstr(c, "KEY"));
}

/* A parse error that quotes the argument quotes it redacted. */
static void test_add_error(void)
{
    static const char *const bad[] = {
        "secret,id=sec0,data=TOPSECRET,",
        "secret,id=sec0,,data=TOPSECRET,=x",
        "{\"qom-type\": \"secret\", \"data\": \"TOPSECRET\"",
        "{\"qom-type\": \"secret\", \"data\": \"TOPSECRET\"} x",
    };
    QsdCli cli;

    qsd_cli_init(&cli);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        GError *err = NULL;

        g_assert_false(qsd_cli_add(&cli, QSD_OPT_OBJECT, bad[i], &err));
        g_assert_nonnull(err);
        if (strstr(err->message, "TOPSECRET")) {
            g_error("the error for '%s' shows the secret: %s", bad[i],
                    err->message);
        }
        g_error_free(err);
    }
    qsd_cli_cleanup(&cli);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qsd-cli/redact/keyval", test_keyval);
    g_test_add_func("/qsd-cli/redact/json", test_json);
    g_test_add_func("/qsd-cli/redact/add-error", test_add_error);
    return g_test_run();
}
