/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The QMP monitor without sockets (monitor/qmp.c, monitor/qmp-args.c) and
 * qemu-storage-daemon's command-line parser (tools/qsd-cli.c): keyval,
 * argument checks and their QEMU error texts, framing across reads,
 * negotiation, id echoing, oversized messages; deferred replies with
 * socket clients (socketpair).
 */
#include "qemu/osdep.h"
#include "monitor/qmp.h"
#include "tools/qsd-cli.h"

#include <sys/socket.h>

static AioContext *ctx;

static JsonNode *echo_cmd(void *opaque, JsonObject *args, GError **errp)
{
    static const char *const modes[] = { "safe", "hard", NULL };
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) o = { 0 };
    const char *s = "", *p = "";
    int64_t n = 0;
    uint64_t z = 0;
    bool b = false, has_addr = false;
    int m = 0;
    JsonObject *ret;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "s", true, &s, errp) ||
        !qmp_args_int(&a, "n", false, &n, NULL, errp) ||
        !qmp_args_size(&a, "z", false, &z, NULL, errp) ||
        !qmp_args_bool(&a, "b", &b, errp) ||
        !qmp_args_enum(&a, "mode", modes, false, &m, errp) ||
        !qmp_args_object(&a, "addr", false, &o, &has_addr, errp) ||
        !qmp_args_str(&o, "path", has_addr, &p, errp) ||
        !qmp_args_check_done(&o, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    ret = json_object_new();
    json_object_set_string_member(ret, "s", s);
    json_object_set_int_member(ret, "n", n);
    return json_node_init_object(json_node_alloc(), ret);
}

/* Deferred replies: "later" parks its QmpPending here. */
static QmpPending *parked;

static void later_cmd(void *opaque, JsonObject *args, QmpPending *p)
{
    g_assert_null(parked);
    parked = p;
}

/* "now": an async handler that answers before it returns. */
static void now_cmd(void *opaque, JsonObject *args, QmpPending *p)
{
    qmp_pending_complete(p, json_node_init_string(json_node_alloc(), "now"),
                         NULL);
}

static void soon_bh(void *opaque)
{
    qmp_pending_complete(opaque, NULL,
                         g_error_new(QMP_ERROR, QMP_ERROR_GENERIC, "soon"));
}

/* "soon": answers (an error) from a bottom half. */
static void soon_cmd(void *opaque, JsonObject *args, QmpPending *p)
{
    aio_bh_schedule_oneshot(ctx, soon_bh, p, "soon");
}

static const QmpCommand cmds[] = {
    { "echo", echo_cmd },
    { "later", NULL, later_cmd },
    { "now", NULL, now_cmd },
    { "soon", NULL, soon_cmd },
    { NULL, NULL },
};

static QmpServer *new_server(void)
{
    QmpServerConfig cfg = {
        .ctx = ctx,
        .commands = cmds,
        .version_major = 1, .version_minor = 2, .version_micro = 3,
        .package = "test",
    };

    return qmp_server_new(&cfg);
}

/* Feed @in to a negotiated session; the replies after negotiation. */
static char *talk(const char *in)
{
    QmpServer *s = new_server();
    g_autoptr(GString) out = g_string_new(NULL);
    QmpSession *ss = qmp_session_new(s, NULL);
    static const char caps[] = "{\"execute\": \"qmp_capabilities\"}\n";

    g_assert_true(qmp_session_feed(ss, caps, strlen(caps), out));
    g_assert_cmpstr(out->str, ==, "{\"return\":{}}\n");
    g_string_truncate(out, 0);
    g_assert_true(qmp_session_feed(ss, in, strlen(in), out));
    qmp_session_free(ss);
    qmp_server_free(s);
    return g_string_free(g_steal_pointer(&out), false);
}

static void test_greeting(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) out = g_string_new(NULL);
    QmpSession *ss = qmp_session_new(s, out);
    static const char q[] = "{\"execute\":\"query-version\"}\n";

    g_assert_cmpstr(out->str, ==, "{\"QMP\":{\"version\":{\"qemu\":{\"micro\":3,"
                    "\"minor\":2,\"major\":1},\"package\":\"test\"},"
                    "\"capabilities\":[]}}\n");
    g_string_truncate(out, 0);
    g_assert_true(qmp_session_feed(ss, q, strlen(q), out));
    g_assert_cmpstr(out->str, ==, "{\"error\":{\"class\":\"CommandNotFound\","
                    "\"desc\":\"Expecting capabilities negotiation with "
                    "'qmp_capabilities'\"}}\n");
    qmp_session_free(ss);
    qmp_server_free(s);
}

static void test_dispatch(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"x\",\"n\":-4,"
          "\"addr\":{\"path\":\"p\"}},\"id\":[1,\"a\"]}",
          "{\"return\":{\"s\":\"x\",\"n\":-4},\"id\":[1,\"a\"]}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":1}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Invalid "
          "parameter type for 's', expected: string\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Parameter 's' "
          "is missing\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\",\"x\":1}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Parameter 'x' "
          "is unexpected\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\",\"addr\":{}}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Parameter "
          "'addr.path' is missing\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\",\"mode\":\"x\"}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Parameter "
          "'mode' does not accept value 'x'\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\",\"z\":-1}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Invalid "
          "parameter type for 'z', expected: size\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\",\"b\":\"on\"}}",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"Invalid "
          "parameter type for 'b', expected: boolean\"}}\n" },
        { "{\"execute\":\"nope\",\"id\":7}",
          "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"The command "
          "nope has not been found\"},\"id\":7}\n" },
        { "{\"execute\":\"qmp_capabilities\"}",
          "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"Capabilities "
          "negotiation is already complete, command ignored\"}}\n" },
        { "[1]", "{\"error\":{\"class\":\"GenericError\",\"desc\":\"QMP "
          "input must be a JSON object\"}}\n" },
        { "{\"execute\":1}", "{\"error\":{\"class\":\"GenericError\","
          "\"desc\":\"QMP input member 'execute' must be a string\"}}\n" },
        { "{\"arguments\":{}}", "{\"error\":{\"class\":\"GenericError\","
          "\"desc\":\"QMP input lacks member 'execute'\"}}\n" },
        { "{\"execute\":\"echo\",\"foo\":0}", "{\"error\":{\"class\":"
          "\"GenericError\",\"desc\":\"QMP input member 'foo' is "
          "unexpected\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":5}", "{\"error\":{\"class\":"
          "\"GenericError\",\"desc\":\"QMP input member 'arguments' must be "
          "an object\"}}\n" },
        /* Strings hide brackets from the framing. */
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"}{\\\"]\","
          "\"addr\":{\"path\":\"[\"}}}",
          "{\"return\":{\"s\":\"}{\\\"]\",\"n\":0}}\n" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *out = talk(cases[i].in);

        g_assert_cmpstr(out, ==, cases[i].out);
    }
}

static void test_framing(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) out = g_string_new(NULL);
    QmpSession *ss = qmp_session_new(s, NULL);
    static const char in[] = "  {\"execute\": \"qmp_capabilities\"}"
                             "{\"execute\":\"query-version\",\"id\":\"}\"}"
                             "\r\n junk\n{\"execute\": }";
    g_auto(GStrv) lines = NULL;

    /* One byte at a time: the same replies as one read. */
    for (size_t i = 0; i < strlen(in); i++) {
        g_assert_true(qmp_session_feed(ss, in + i, 1, out));
    }
    lines = g_strsplit(out->str, "\n", -1);
    g_assert_cmpuint(g_strv_length(lines), ==, 5);
    g_assert_cmpstr(lines[0], ==, "{\"return\":{}}");
    g_assert_true(g_str_has_prefix(lines[1], "{\"return\":{\"qemu\""));
    g_assert_true(g_str_has_suffix(lines[1], "\"id\":\"}\"}"));
    g_assert_true(g_str_has_prefix(lines[2], "{\"error\":{\"class\":"
                                   "\"GenericError\",\"desc\":\"JSON parse "
                                   "error, "));
    g_assert_true(g_str_has_prefix(lines[3], "{\"error\":{\"class\":"
                                   "\"GenericError\",\"desc\":\"JSON parse "
                                   "error, "));
    g_assert_cmpstr(lines[4], ==, "");
    qmp_session_free(ss);
    qmp_server_free(s);
}

static void test_oversized(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) out = g_string_new(NULL);
    QmpSession *ss = qmp_session_new(s, NULL);
    g_autofree char *big = g_malloc(QMP_MAX_INPUT + 2);

    memset(big, ' ', QMP_MAX_INPUT + 2);
    big[0] = '{';
    g_assert_false(qmp_session_feed(ss, big, QMP_MAX_INPUT + 2, out));
    g_assert_nonnull(strstr(out->str, "QMP message too large"));
    qmp_session_free(ss);
    qmp_server_free(s);
}

/* Feed @in to a negotiated session in 4 KiB pieces; the replies. */
static char *talk_chunked(QmpSession *ss, const char *in, size_t len)
{
    g_autoptr(GString) out = g_string_new(NULL);

    for (size_t off = 0; off < len; off += 4096) {
        g_assert_true(qmp_session_feed(ss, in + off, MIN(4096, len - off),
                                       out));
    }
    return g_string_free(g_steal_pointer(&out), false);
}

static unsigned int count_str(const char *hay, const char *needle)
{
    unsigned int n = 0;

    for (const char *p = hay; (p = strstr(p, needle)); p++) {
        n++;
    }
    return n;
}

/*
 * A hostile client sending 200 KB of brackets: json-glib's parser
 * recurses once per level, and the whole balanced text used to reach it,
 * overflowing the main thread's stack.  Now: one error per text nested
 * deeper than QMP_MAX_NESTING, the rest of its line dropped, and the
 * session answers the next command.  Stray closers are one error too.
 */
static void test_nesting(void)
{
    static const char caps[] = "{\"execute\": \"qmp_capabilities\"}\n";
    static const char ver[] = "{\"execute\": \"query-version\"}\n";
    static const char *const openers[] = { "[", "{\"a\":", "[{\"b\":" };
    const size_t n = 200 * 1024;
    QmpServer *s = new_server();
    QmpSession *ss = qmp_session_new(s, NULL);
    g_autofree char *first = talk_chunked(ss, caps, strlen(caps));

    g_assert_cmpstr(first, ==, "{\"return\":{}}\n");
    for (size_t k = 0; k < G_N_ELEMENTS(openers); k++) {
        g_autoptr(GString) in = g_string_new(NULL);
        g_autofree char *out = NULL;
        const char *closer = k == 0 ? "]" : k == 1 ? "}" : "}]";

        /* 200 KB deep, balanced, a newline, then a command */
        while (in->len < n) {
            g_string_append(in, openers[k]);
        }
        g_string_append(in, "0");
        for (size_t d = 0; d < n / strlen(openers[k]); d++) {
            g_string_append(in, closer);
        }
        g_string_append(in, "\n");
        g_string_append(in, ver);
        out = talk_chunked(ss, in->str, in->len);
        g_assert_cmpuint(count_str(out, "JSON nesting depth limit exceeded"),
                         ==, 1);
        g_assert_cmpuint(count_str(out, "\"error\""), ==, 1);
        g_assert_nonnull(strstr(out, "\"return\":{\"qemu\""));
    }
    /* 200 KB of openers and no newline yet: one error, nothing kept */
    {
        g_autofree char *deep = g_malloc(n);
        g_autofree char *out = NULL;
        g_autofree char *out2 = NULL;

        memset(deep, '{', n);
        out = talk_chunked(ss, deep, n);
        g_assert_cmpuint(count_str(out, "nesting depth limit"), ==, 1);
        out2 = talk_chunked(ss, deep, n);
        g_assert_cmpstr(out2, ==, "");
        g_free(out2);
        out2 = talk_chunked(ss, "\n", 1);
        g_assert_cmpstr(out2, ==, "");
        g_free(out2);
        out2 = talk_chunked(ss, ver, strlen(ver));
        g_assert_true(g_str_has_prefix(out2, "{\"return\":{\"qemu\""));
    }
    /* 200 KB of stray closers, then a command on the same line and one
     * on the next: one error for the junk, the rest of its line (the
     * first command) dropped, the next line's command answered */
    {
        g_autoptr(GString) in = g_string_new(NULL);
        g_autofree char *out = NULL;

        while (in->len < n) {
            g_string_append(in, "]}");
        }
        g_string_append(in, "{\"execute\": \"query-version\", \"id\": 1}");
        g_string_append(in, "\n");
        g_string_append(in, ver);
        out = talk_chunked(ss, in->str, in->len);
        g_assert_cmpuint(count_str(out, "\"error\""), ==, 1);
        g_assert_nonnull(strstr(out, "JSON parse error, stray ']'"));
        g_assert_cmpuint(count_str(out, "\"return\":{\"qemu\""), ==, 1);
        g_assert_null(strstr(out, "\"id\":1"));
    }
    qmp_session_free(ss);
    qmp_server_free(s);

    /* exactly QMP_MAX_NESTING levels still reach the parser */
    {
        g_autoptr(GString) in = g_string_new(NULL);
        g_autofree char *out = NULL;

        for (int d = 0; d < QMP_MAX_NESTING; d++) {
            g_string_append_c(in, '[');
        }
        for (int d = 0; d < QMP_MAX_NESTING; d++) {
            g_string_append_c(in, ']');
        }
        out = talk(in->str);
        g_assert_nonnull(strstr(out, "must be a JSON object"));
        g_string_prepend_c(in, '[');
        g_string_append_c(in, ']');
        g_free(out);
        out = talk(in->str);
        g_assert_nonnull(strstr(out, "nesting depth limit"));
    }
}

/* @n brackets @open, then @n of @close. */
static void append_deep(GString *s, char open, char close, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        g_string_append_c(s, open);
    }
    for (size_t i = 0; i < n; i++) {
        g_string_append_c(s, close);
    }
}

/*
 * json-glib takes more than JSON: comments, '...' strings without escapes,
 * octal numbers, and a \u escape that swallows the byte after an unpaired
 * surrogate or a short escape.  A '"' in any of those used to hide the
 * brackets after it from the framing, so a 120000-deep array reached
 * json-glib and overflowed the stack (the test crashed).  Now the framing
 * lexes all of it: each such line gets exactly one error naming what is
 * wrong, the text never reaches the parser, and the next line's command
 * is answered.
 */
static void test_not_json(void)
{
    static const struct {
        const char *head, *tail;    /* around 120000 levels of [] */
        const char *error;
    } cases[] = {
        /* QEMU's single-quoted strings are lexed: the depth counts */
        { "{'\"': ", ", '\"': 1}", "nesting depth limit exceeded" },
        { "{\"execute\": /*\"*/ ", " /*\"*/ }",
          "'/' is not JSON: comments are not accepted" },
        { "// \"", "", "'/' is not JSON: comments are not accepted" },
        { "/*\"*/ ", "", "'/' is not JSON: comments are not accepted" },
        /* json-glib takes the closing quote as part of the \u escape */
        { "[\"\\uD800\",\", ", " \"]",
          "the high surrogate \\\\ud800 must be followed by a \\\\u escape" },
        { "[\"\\u12\",\", ", " \"]",
          "\\\\u in a string must be followed by four hex digits, not '\\\"'" },
        { "[\"\\uDC00\", ", "]", "\\\\udc00 is a low surrogate" },
        { "[\"\\uD800\\u0041\", ", "]",
          "\\\\u0041 after the high surrogate \\\\ud800 is not a low" },
    };
    static const char ver[] = "{\"execute\": \"query-version\"}\n";

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GString) in = g_string_new(cases[i].head);
        g_autofree char *out = NULL;

        append_deep(in, '[', ']', 120000);
        g_string_append(in, cases[i].tail);
        /* a command after it on the same line is dropped with it */
        g_string_append(in, "{\"execute\": \"echo\", \"arguments\": "
                        "{\"s\": \"same line\"}}\n");
        g_string_append(in, ver);
        out = talk(in->str);
        if (g_test_verbose()) {
            g_test_message("case %zu: %s", i, out);
        }
        g_assert_cmpuint(count_str(out, "\"error\""), ==, 1);
        g_assert_nonnull(strstr(out, cases[i].error));
        g_assert_true(g_str_has_prefix(out, "{\"error\":{\"class\":"
                                       "\"GenericError\",\"desc\":\"JSON "));
        g_assert_null(strstr(out, "same line"));
        g_assert_cmpuint(count_str(out, "\"return\":{\"qemu\""), ==, 1);
    }
}

/*
 * What the lexer accepts reaches the command as QEMU would give it, and
 * what json-glib would read differently from JSON is refused.
 */
static void test_lexer(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        /* QEMU's single-quoted strings, with \' and a raw " */
        { "{'execute':'echo','arguments':{'s':'a\"b\\'c\\u00e9\\n'},"
          "'id':'\"'}",
          "{\"return\":{\"s\":\"a\\\"b'c\xc3\xa9\\n\",\"n\":0},"
          "\"id\":\"\\\"\"}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"\\ud83d\\ude00\","
          "\"n\":-0}}",
          "{\"return\":{\"s\":\"\xf0\x9f\x98\x80\",\"n\":0}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"x\",\"n\":12},"
          "\"id\":[true,false,null,-1.5e+3,0.25,1E2]}",
          "{\"return\":{\"s\":\"x\",\"n\":12},\"id\":[true,false,null,"
          "-1500.0,0.25,100.0]}\n" },
        /* json-glib's '...' strings have no escapes; QEMU's (and these)
         * do: the brackets are in strings */
        { "['\\'', \"]]]\"]\n[\"\\'\", ']]]', '\\\\']\n",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"QMP input "
          "must be a JSON object\"}}\n"
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"QMP input "
          "must be a JSON object\"}}\n" },
        /* json-glib reads 010 as 8 and 0x10 as 16 */
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"x\",\"n\":010}}\n",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"JSON parse "
          "error, malformed number: '1' after a leading 0; input discarded "
          "up to the next newline\"}}\n" },
        { "{\"execute\":\"echo\",\"arguments\":{\"s\":\"x\",\"n\":0x10}}\n",
          "{\"error\":{\"class\":\"GenericError\",\"desc\":\"JSON parse "
          "error, malformed number: 'x' after a leading 0; input discarded "
          "up to the next newline\"}}\n" },
        { "[1.]\n[-]\n[1e]\n[1..2]\n", NULL },
        { "[nul]\n[truex]\n[True]\n[$10]\n[\"\\x\"]\n[\"\t\"]\n", NULL },
        { "[\"\\u0000\"]\n[#]\n[\"a\" /]\n[1 // x\n]\n", NULL },
        /* text outside a message: an error, never a command */
        { "\"{}\"\n1\ntrue\n'x'\n}\n/\n", NULL },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *out = talk(cases[i].in);

        if (cases[i].out) {
            g_assert_cmpstr(out, ==, cases[i].out);
        } else {
            /* one error per line, each from the lexer */
            g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
            unsigned int n = count_str(cases[i].in, "\n");

            g_assert_cmpuint(g_strv_length(lines), ==, n + 1);
            for (unsigned int l = 0; l < n; l++) {
                g_assert_true(g_str_has_prefix(lines[l], "{\"error\":"));
                g_assert_true(g_str_has_suffix(lines[l], "input discarded "
                                               "up to the next newline\"}}"));
            }
        }
    }
}

static void test_keyval(void)
{
    static const struct {
        const char *in, *implied;
        bool flags;
        const char *json;       /* NULL: error */
    } cases[] = {
        { "a=1,b.c=x,b.d=y", NULL, false,
          "{\"a\":\"1\",\"b\":{\"c\":\"x\",\"d\":\"y\"}}" },
        { "vhost-user-blk,id=e", "type", false,
          "{\"type\":\"vhost-user-blk\",\"id\":\"e\"}" },
        { "path=a,,b,id=c", NULL, false, "{\"path\":\"a,b\",\"id\":\"c\"}" },
        { "socket,server,nowait", "backend", true,
          "{\"backend\":\"socket\",\"server\":\"on\",\"wait\":\"off\"}" },
        { "a=", NULL, false, "{\"a\":\"\"}" },
        { "a=1,a=2", NULL, false, NULL },
        { "a=1,a.b=2", NULL, false, NULL },
        { "a.b=1,a=2", NULL, false, NULL },
        { "=1", NULL, false, NULL },
        { "a..b=1", NULL, false, NULL },
        { "a=1,", NULL, false, NULL },
        { "a=1,b", NULL, false, NULL },
        { "", NULL, false, "{}" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;
        g_autoptr(JsonObject) o = keyval_parse(cases[i].in, cases[i].implied,
                                               cases[i].flags, &err);

        if (!cases[i].json) {
            g_assert_null(o);
            g_assert_nonnull(err);
            continue;
        }
        g_assert_no_error(err);
        {
            g_autoptr(JsonNode) n = json_node_init_object(json_node_alloc(),
                                                          o);
            g_autofree char *s = json_to_string(n, false);

            g_assert_cmpstr(s, ==, cases[i].json);
        }
    }
}

static void test_keyval_args(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(JsonObject) o = keyval_parse("b=on,n=-3,z=4k,s=x", NULL, false,
                                           &err);
    g_auto(QmpArgs) a = { 0 };
    bool b = false;
    int64_t n = 0;
    uint64_t z = 0;
    const char *s = NULL;

    qmp_args_init(&a, o, true, NULL);
    g_assert_true(qmp_args_bool(&a, "b", &b, &err));
    g_assert_true(qmp_args_int(&a, "n", false, &n, NULL, &err));
    g_assert_true(qmp_args_size(&a, "z", false, &z, NULL, &err));
    g_assert_true(qmp_args_str(&a, "s", false, &s, &err));
    g_assert_true(qmp_args_check_done(&a, &err));
    g_assert_true(b);
    g_assert_cmpint(n, ==, -3);
    g_assert_cmpuint(z, ==, 4096);
    g_assert_cmpstr(s, ==, "x");

    {
        g_autoptr(JsonObject) o2 = keyval_parse("b=maybe", NULL, false, &err);
        g_auto(QmpArgs) a2 = { 0 };

        qmp_args_init(&a2, o2, true, NULL);
        g_assert_false(qmp_args_bool(&a2, "b", &b, &err));
        g_assert_cmpstr(err->message, ==, "Parameter 'b' expects 'on' or "
                        "'off'");
    }
}

/* QMP_ARGS_ENUM_TABLE(): an enum read into a table of structs, whose
 * name member need not come first. */
static void test_enum_table(void)
{
    static const struct {
        int value;
        const char *name;
    } table[] = {
        { 10, "ten" },
        { 20, "twenty" },
        { 30, "thirty" },
    };
    static const char *const cases[][2] = {
        { "e=thirty", NULL },
        { "e=eleven", "Parameter 'e' does not accept value 'eleven'" },
        { "f=1", NULL },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;
        g_autoptr(JsonObject) o = keyval_parse(cases[i][0], NULL, false,
                                               &err);
        g_auto(QmpArgs) a = { 0 };
        int idx = -1;
        bool ok;

        g_assert_nonnull(o);
        qmp_args_init(&a, o, true, NULL);
        ok = QMP_ARGS_ENUM_TABLE(&a, "e", table, name, false, &idx, &err);
        if (cases[i][1]) {
            g_assert_false(ok);
            g_assert_cmpstr(err->message, ==, cases[i][1]);
        } else if (g_str_has_prefix(cases[i][0], "e=")) {
            g_assert_true(ok);
            g_assert_cmpint(table[idx].value, ==, 30);
        } else {
            /* Absent and not required: true, *out untouched. */
            g_assert_true(ok);
            g_assert_cmpint(idx, ==, -1);
        }
    }
    {
        g_autoptr(GError) err = NULL;
        g_autoptr(JsonObject) o = json_object_new();
        g_auto(QmpArgs) a = { 0 };
        int idx = -1;

        json_object_set_int_member(o, "e", 2);
        qmp_args_init(&a, o, false, NULL);
        g_assert_false(QMP_ARGS_ENUM_TABLE(&a, "e", table, name, true, &idx,
                                           &err));
        g_assert_cmpstr(err->message, ==, "Invalid parameter type for 'e', "
                        "expected: string");
    }
}

static void test_qsd_cli(void)
{
    static const struct {
        QsdOptKind kind;
        const char *arg;
        const char *error;      /* substring; NULL: accepted */
    } cases[] = {
        { QSD_OPT_CHARDEV, "socket,id=m,path=/tmp/x,server=on,wait=off", NULL },
        { QSD_OPT_CHARDEV, "socket,id=m2,path=/tmp/y,server,nowait", NULL },
        { QSD_OPT_CHARDEV, "socket,id=m,path=/tmp/z,server=on", "duplicate" },
        { QSD_OPT_CHARDEV, "stdio,id=s", "backend 'stdio'" },
        { QSD_OPT_CHARDEV, "socket,id=c,path=/x", "server=on" },
        { QSD_OPT_CHARDEV, "socket,id=c,host=h,port=1,server=on",
          "Parameter 'path' is missing" },
        { QSD_OPT_CHARDEV, "socket,id=c,path=/x,server=on,telnet=on",
          "'telnet' is unexpected" },
        { QSD_OPT_MONITOR, "chardev=m", NULL },
        { QSD_OPT_MONITOR, "m2,mode=control,pretty=on", NULL },
        { QSD_OPT_MONITOR, "m,mode=readline", "readline" },
        { QSD_OPT_MONITOR, "m,nope=1", "'nope' is unexpected" },
        { QSD_OPT_BLOCKDEV, "driver=file,node-name=a,filename=/x", NULL },
        { QSD_OPT_BLOCKDEV, "file,node-name=a,,b=1", NULL },
        { QSD_OPT_BLOCKDEV, "driver=file,driver=file", "more than once" },
        { QSD_OPT_EXPORT, "type=vhost-user-blk,id=e,node-name=a", NULL },
        { QSD_OPT_OBJECT, "iothread,id=i", NULL },
    };
    QsdCli cli;
    g_autoptr(GError) err = NULL;

    qsd_cli_init(&cli);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) e = NULL;
        bool r = qsd_cli_add(&cli, cases[i].kind, cases[i].arg, &e);

        if (!cases[i].error) {
            g_assert_no_error(e);
            g_assert_true(r);
        } else {
            g_assert_false(r);
            g_assert_nonnull(e);
            if (!strstr(e->message, cases[i].error)) {
                g_error("%s %s: '%s' lacks '%s'", qsd_opt_name(cases[i].kind),
                        cases[i].arg, e->message, cases[i].error);
            }
        }
    }
    g_assert_true(qsd_cli_check(&cli, &err));
    g_assert_cmpstr(qsd_cli_monitor_path(&cli, 0), ==, "/tmp/x");
    g_assert_cmpstr(qsd_cli_monitor_path(&cli, 1), ==, "/tmp/y");
    g_assert_cmpuint(cli.n_exports, ==, 1);
    qsd_cli_add(&cli, QSD_OPT_MONITOR, "chardev=none", &err);
    g_assert_no_error(err);
    g_assert_false(qsd_cli_check(&cli, &err));
    g_assert_nonnull(strstr(err->message, "chardev=none"));
    qsd_cli_cleanup(&cli);

    g_assert_true(qsd_cli_export_is_qsd("type=vhost-user-blk,id=e"));
    g_assert_true(qsd_cli_export_is_qsd("vhost-user-blk,id=e"));
    g_assert_true(qsd_cli_export_is_qsd("id=e,type=vhost-user-blk"));
    g_assert_false(qsd_cli_export_is_qsd("socket=/s,file=/f"));
    g_assert_false(qsd_cli_export_is_qsd("file=/f,socket=/x,typo=1"));
}

/* The next line the server sent on @fd, running the loop until it has. */
static char *client_line(int fd, GString *buf)
{
    for (;;) {
        char *nl = strchr(buf->str, '\n');
        char tmp[4096];
        ssize_t n;

        if (nl) {
            char *line = g_strndup(buf->str, nl - buf->str);

            g_string_erase(buf, 0, nl - buf->str + 1);
            return line;
        }
        n = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (n > 0) {
            g_string_append_len(buf, tmp, n);
            continue;
        }
        g_assert_true(n < 0 && errno == EAGAIN);
        aio_poll(ctx, true);
    }
}

/* Nothing more from the server on @fd now. */
static bool client_quiet(int fd, GString *buf)
{
    char c;

    return !buf->len && recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) < 0 &&
           errno == EAGAIN;
}

static void client_send(int fd, const char *text)
{
    g_assert_cmpint(send(fd, text, strlen(text), 0), ==, strlen(text));
}

/* A socket client of @s past negotiation: our end of the socket. */
static int client_new(QmpServer *s, GString *buf)
{
    int sv[2];
    g_autofree char *greeting = NULL, *caps = NULL;

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                    ==, 0);
    qmp_server_add_client(s, sv[1], false);
    greeting = client_line(sv[0], buf);
    g_assert_nonnull(strstr(greeting, "\"QMP\""));
    client_send(sv[0], "{\"execute\": \"qmp_capabilities\"}\n");
    caps = client_line(sv[0], buf);
    g_assert_cmpstr(caps, ==, "{\"return\":{}}");
    return sv[0];
}

/*
 * A deferred reply holds back the next commands of its connection only:
 * another connection is answered meanwhile; then the reply comes, then
 * the commands sent after it, in order.
 */
static void test_deferred(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) abuf = g_string_new(NULL);
    g_autoptr(GString) bbuf = g_string_new(NULL);
    int a = client_new(s, abuf), b = client_new(s, bbuf);
    char *line;

    client_send(a, "{\"execute\": \"later\", \"id\": 1}\n"
                "{\"execute\": \"echo\", \"arguments\": {\"s\": \"a\"}, "
                "\"id\": 2}\n");
    client_send(b, "{\"execute\": \"echo\", \"arguments\": {\"s\": \"b\"}}\n");
    line = client_line(b, bbuf);
    g_assert_cmpstr(line, ==, "{\"return\":{\"s\":\"b\",\"n\":0}}");
    g_free(line);
    g_assert_nonnull(parked);
    g_assert_true(client_quiet(a, abuf));

    /* Commands that answer at once or from a BH, on the other one. */
    client_send(b, "{\"execute\": \"now\"}\n{\"execute\": \"soon\"}\n"
                "{\"execute\": \"query-version\", \"id\": \"v\"}\n");
    line = client_line(b, bbuf);
    g_assert_cmpstr(line, ==, "{\"return\":\"now\"}");
    g_free(line);
    line = client_line(b, bbuf);
    g_assert_cmpstr(line, ==, "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"soon\"}}");
    g_free(line);
    line = client_line(b, bbuf);
    g_assert_nonnull(strstr(line, "\"id\":\"v\""));
    g_free(line);
    g_assert_true(client_quiet(a, abuf));

    qmp_pending_complete(g_steal_pointer(&parked),
                         json_node_init_int(json_node_alloc(), 7), NULL);
    line = client_line(a, abuf);
    g_assert_cmpstr(line, ==, "{\"return\":7,\"id\":1}");
    g_free(line);
    line = client_line(a, abuf);
    g_assert_cmpstr(line, ==, "{\"return\":{\"s\":\"a\",\"n\":0},\"id\":2}");
    g_free(line);

    /* A client (here: its session) that goes while its reply is
     * deferred: the reply is dropped, nothing else happens. */
    client_send(a, "{\"execute\": \"later\"}\n");
    while (!parked) {
        aio_poll(ctx, true);
    }
    close(a);
    /* (Not reading while its reply is deferred, the server notices the
     * end of file only after it: free the server, and the session, now.) */
    qmp_server_free(s);
    qmp_pending_complete(g_steal_pointer(&parked), NULL,
                         g_error_new(QMP_ERROR, QMP_ERROR_GENERIC, "gone"));
    close(b);
}

/*
 * The server goes (the daemon quits) while a command's reply is deferred:
 * the client gets an error for it, with its id, before the end of file;
 * the other client gets nothing; the late completion is a no-op.
 */
static void test_deferred_shutdown(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) abuf = g_string_new(NULL);
    g_autoptr(GString) bbuf = g_string_new(NULL);
    int a = client_new(s, abuf), b = client_new(s, bbuf);
    char tmp[4096];
    ssize_t n;

    client_send(a, "{\"execute\": \"later\", \"id\": \"r\"}\n"
                "{\"execute\": \"echo\", \"arguments\": {\"s\": \"x\"}}\n");
    while (!parked) {
        aio_poll(ctx, true);
    }
    g_assert_true(client_quiet(a, abuf));
    qmp_server_free(s);
    /* Everything a got, up to the end of file: exactly the error. */
    while ((n = recv(a, tmp, sizeof(tmp), 0)) > 0) {
        g_string_append_len(abuf, tmp, n);
    }
    g_assert_cmpint(n, ==, 0);
    g_assert_cmpstr(abuf->str, ==, "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"the daemon is shutting down: 'later' had not "
                    "finished and was abandoned (what it started outside "
                    "this process, such as a resize on a cluster, may or may "
                    "not have happened; check there)\"},\"id\":\"r\"}\n");
    g_assert_cmpint(recv(b, tmp, sizeof(tmp), 0), ==, 0);
    qmp_pending_complete(g_steal_pointer(&parked),
                         json_node_init_int(json_node_alloc(), 1), NULL);
    close(a);
    close(b);
}

/* A stand-alone session waits for a deferred reply in the loop. */
static void test_deferred_session(void)
{
    g_autofree char *out = talk("{\"execute\": \"soon\", \"id\": 3}\n"
                                "{\"execute\": \"now\"}\n");

    g_assert_cmpstr(out, ==, "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"soon\"},\"id\":3}\n{\"return\":\"now\"}\n");
}

/*
 * Text outside a message used to be handed to the parser as a message of
 * its own: with a comment hiding a command in it, that command ran while
 * another one's reply was pending and overwrote it (an assertion in
 * qmp_pending_complete(), a use-after-free without).  Now such a line is
 * one error and runs nothing; commands on one line still run one after
 * the other, each after the previous one's reply, in order.
 */
static void test_pending_junk(void)
{
    QmpServer *s = new_server();
    g_autoptr(GString) buf = g_string_new(NULL);
    int a = client_new(s, buf);
    char *line;

    client_send(a, "/*\"*/{\"execute\": \"later\", \"id\": 1}/*\"*/"
                "{\"execute\": \"later\", \"id\": 2}\n"
                "{\"execute\": \"echo\", \"arguments\": {\"s\": \"e\"}, "
                "\"id\": 3}\n");
    line = client_line(a, buf);
    g_assert_cmpstr(line, ==, "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"JSON parse error, '/' is not JSON: comments "
                    "are not accepted; input discarded up to the next "
                    "newline\"}}");
    g_free(line);
    line = client_line(a, buf);
    g_assert_cmpstr(line, ==, "{\"return\":{\"s\":\"e\",\"n\":0},\"id\":3}");
    g_free(line);
    g_assert_null(parked);

    /* Commands and junk on one line: held back behind the pending one */
    client_send(a, "{\"execute\": \"later\", \"id\": 4}"
                "{\"execute\": \"later\", \"id\": 5} x "
                "{\"execute\": \"later\", \"id\": 6}\n"
                "{\"execute\": \"echo\", \"arguments\": {\"s\": \"f\"}, "
                "\"id\": 7}\n");
    while (!parked) {
        aio_poll(ctx, true);
    }
    g_assert_true(client_quiet(a, buf));
    qmp_pending_complete(g_steal_pointer(&parked),
                         json_node_init_int(json_node_alloc(), 4), NULL);
    line = client_line(a, buf);
    g_assert_cmpstr(line, ==, "{\"return\":4,\"id\":4}");
    g_free(line);
    while (!parked) {
        aio_poll(ctx, true);
    }
    g_assert_true(client_quiet(a, buf));
    qmp_pending_complete(g_steal_pointer(&parked),
                         json_node_init_int(json_node_alloc(), 5), NULL);
    line = client_line(a, buf);
    g_assert_cmpstr(line, ==, "{\"return\":5,\"id\":5}");
    g_free(line);
    line = client_line(a, buf);
    g_assert_true(g_str_has_prefix(line, "{\"error\":{\"class\":"
                                   "\"GenericError\",\"desc\":\"JSON parse "
                                   "error, QMP input must be a JSON object, "
                                   "found 'x' outside of one"));
    g_free(line);
    line = client_line(a, buf);
    g_assert_cmpstr(line, ==, "{\"return\":{\"s\":\"f\",\"n\":0},\"id\":7}");
    g_free(line);
    g_assert_null(parked);
    qmp_server_free(s);
    close(a);
}

/* The same with a stand-alone session and replies from a bottom half. */
static void test_pending_junk_session(void)
{
    g_autofree char *out = talk("/*\"*/{\"execute\": \"soon\", \"id\": 1}"
                                "/*\"*/{\"execute\": \"soon\", \"id\": 2}\n"
                                "{\"execute\": \"soon\", \"id\": 3}"
                                "{\"execute\": \"now\", \"id\": 4}\n");

    g_assert_cmpstr(out, ==, "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"JSON parse error, '/' is not JSON: comments "
                    "are not accepted; input discarded up to the next "
                    "newline\"}}\n"
                    "{\"error\":{\"class\":\"GenericError\","
                    "\"desc\":\"soon\"},\"id\":3}\n"
                    "{\"return\":\"now\",\"id\":4}\n");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(NULL);
    g_test_add_func("/qmp/greeting", test_greeting);
    g_test_add_func("/qmp/dispatch", test_dispatch);
    g_test_add_func("/qmp/framing", test_framing);
    g_test_add_func("/qmp/oversized", test_oversized);
    g_test_add_func("/qmp/nesting", test_nesting);
    g_test_add_func("/qmp/not-json", test_not_json);
    g_test_add_func("/qmp/lexer", test_lexer);
    g_test_add_func("/qmp/keyval", test_keyval);
    g_test_add_func("/qmp/keyval-args", test_keyval_args);
    g_test_add_func("/qmp/enum-table", test_enum_table);
    g_test_add_func("/qmp/qsd-cli", test_qsd_cli);
    g_test_add_func("/qmp/deferred", test_deferred);
    g_test_add_func("/qmp/deferred-session", test_deferred_session);
    g_test_add_func("/qmp/deferred-shutdown", test_deferred_shutdown);
    g_test_add_func("/qmp/pending-junk", test_pending_junk);
    g_test_add_func("/qmp/pending-junk-session", test_pending_junk_session);
    return g_test_run();
}
