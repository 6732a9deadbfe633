/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzz the QMP monitor's input side: the stream framing and dispatch of
 * monitor/qmp.c (its lexer frames each message and rewrites it into the
 * plain JSON json-glib parses) with a command that reads its arguments
 * through every QmpArgs getter and one whose reply is deferred ("later":
 * the session waits for it while the rest of the input stays queued), and
 * keyval_parse() (qemu-storage-daemon's command-line syntax) followed by
 * the same getters in keyval mode.
 *
 * and qemu-storage-daemon's option checks (tools/qsd-cli.c: --chardev and
 * --monitor fully, the others' syntax).
 *
 * Input: byte 0 picks the mode (bit 0: keyval; bits 1-2: the implied key
 * and flag syntax for keyval, or the feed chunk size for QMP; bit 4 with
 * bit 0: a qemu-storage-daemon option instead, bits 5-7 which).  The rest
 * is the stream or the option string.
 */
#include "qemu/osdep.h"
#include "monitor/qmp.h"
#include "qemu/error-report.h"
#include "tools/qsd-cli.h"

static AioContext *fuzz_ctx;
static QmpServer *fuzz_server;

/* Read every kind of argument; return them so the generator runs too. */
static bool fuzz_read_args(JsonObject *args, bool keyval, JsonObject *ret,
                           GError **errp)
{
    static const char *const values[] = { "off", "on", "unmap", NULL };
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) o = { 0 };
    const char *s = NULL, *p = NULL;
    int64_t i = 0;
    uint64_t z = 0;
    bool b = false;
    int e = 0;

    qmp_args_init(&a, args, keyval, NULL);
    if (!qmp_args_str(&a, "s", false, &s, errp) ||
        !qmp_args_int(&a, "i", false, &i, NULL, errp) ||
        !qmp_args_size(&a, "z", false, &z, NULL, errp) ||
        !qmp_args_bool(&a, "b", &b, errp) ||
        !qmp_args_enum(&a, "e", values, false, &e, errp) ||
        !qmp_args_object(&a, "o", false, &o, NULL, errp) ||
        !qmp_args_str(&o, "p", false, &p, errp) ||
        !qmp_args_check_done(&o, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return false;
    }
    json_object_set_string_member(ret, "s", s ? s : "");
    json_object_set_int_member(ret, "i", i);
    json_object_set_int_member(ret, "z", (int64_t)z);
    json_object_set_boolean_member(ret, "b", b);
    json_object_set_string_member(ret, "e", values[e]);
    return true;
}

static JsonNode *fuzz_cmd(void *opaque, JsonObject *args, GError **errp)
{
    g_autoptr(JsonObject) ret = json_object_new();

    if (!fuzz_read_args(args, false, ret, errp)) {
        return NULL;
    }
    return json_node_init_object(json_node_alloc(), ret);
}

static void fuzz_later_bh(void *opaque)
{
    qmp_pending_complete(opaque, json_node_init_int(json_node_alloc(), 0),
                         NULL);
}

/* A deferred reply (as blockdev-add of an rbd node): from a bottom half. */
static void fuzz_later_cmd(void *opaque, JsonObject *args, QmpPending *p)
{
    aio_bh_schedule_oneshot(fuzz_ctx, fuzz_later_bh, p, "fuzz-later");
}

static const QmpCommand fuzz_cmds[] = {
    { "fuzz", fuzz_cmd },
    { "later", NULL, fuzz_later_cmd },
    { NULL, NULL },
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    QmpServerConfig cfg = { .commands = fuzz_cmds, .package = "fuzz" };

    log_set_level(LOG_LEVEL_ERROR);
    fuzz_ctx = aio_context_new(NULL);
    g_assert(fuzz_ctx);
    cfg.ctx = fuzz_ctx;
    fuzz_server = qmp_server_new(&cfg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const implied[] = { NULL, "driver", "type", "backend" };
    uint8_t mode;

    if (size < 1) {
        return 0;
    }
    mode = data[0];
    data++;
    size--;

    if ((mode & 0x11) == 0x11) {
        g_autofree char *str = g_strndup((const char *)data, size);
        QsdCli cli;

        qsd_cli_init(&cli);
        /* Twice: the second may collide with the first (duplicates). */
        for (int i = 0; i < 2; i++) {
            if (qsd_cli_add(&cli, (QsdOptKind)((mode >> 5) % 5), str,
                            NULL)) {
                qsd_cli_check(&cli, NULL);
            }
        }
        qsd_cli_cleanup(&cli);
    } else if (mode & 1) {
        g_autofree char *str = g_strndup((const char *)data, size);
        g_autoptr(JsonObject) obj = NULL;
        g_autoptr(JsonObject) ret = json_object_new();

        obj = keyval_parse(str, implied[(mode >> 1) & 3], mode & 8, NULL);
        if (obj) {
            fuzz_read_args(obj, true, ret, NULL);
        }
    } else {
        g_autoptr(GString) out = g_string_new(NULL);
        QmpSession *ss = qmp_session_new(fuzz_server, out);
        size_t chunk = 1 + ((mode >> 1) & 7) * 37;

        /* The same stream in chunks: framing across reads. */
        for (size_t off = 0; off < size; off += chunk) {
            if (!qmp_session_feed(ss, (const char *)data + off,
                                  MIN(chunk, size - off), out)) {
                break;
            }
            /* Every reply is one line of JSON json-glib can read back. */
            if (out->len > (1u << 22)) {
                g_string_truncate(out, 0);
            }
        }
        qmp_session_free(ss);
    }
    return 0;
}
