/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk-ctl: manage a running vhost-blkd (or qemu-storage-daemon)
 * through its QMP monitor socket.
 *
 * A QMP client, nothing more: connect, read the greeting, negotiate
 * capabilities, then one request per command, each with an "id" so the
 * reply is told apart from the events the server may send in between.
 * Every message is one JSON object per line (QEMU ends them with CRLF),
 * parsed with json-glib.  Human commands print tables; "qmp" passes a
 * command through and prints the raw "return" for scripts.
 */
#include "qemu/osdep.h"
#include "qemu/latency-hist.h"

#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <json-glib/json-glib.h>

#define CTL_DEFAULT_DIR "/run/vhost-blk"
#define CTL_MAX_LINE (64 << 20)     /* larger replies are refused */

typedef struct Ctl {
    const char *path;
    int fd;
    unsigned int timeout_ms;
    GString *in;                /* bytes read, not yet a full line */
    unsigned int next_id;
    bool json;                  /* --json: raw output */
    GPtrArray *events;          /* JsonNode: events seen while waiting */
} Ctl;

static const char *prog = "vhost-blk-ctl";

static void G_GNUC_PRINTF(1, 2) G_GNUC_NORETURN ctl_die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void ctl_usage(FILE *f)
{
    fprintf(f,
"Usage: vhost-blk-ctl [options] COMMAND [ARGS...]\n"
"\n"
"Manage a running vhost-blkd (or qemu-storage-daemon) through its QMP\n"
"monitor socket.\n"
"\n"
"Commands:\n"
"  exports                    list the exports: id, node, size, read-only\n"
"                             (the export's), state, format (raw, qcow2),\n"
"                             backing chain depth, file\n"
"  nodes                      each export's image and backing chain, one\n"
"                             line per image: depth (0: the image served),\n"
"                             format, virtual size, file\n"
"  iothreads                  list the iothread objects (names for\n"
"                             add --iothread)\n"
"  jobs                       list the block jobs (blockdev-mirror): id,\n"
"                             type, status, progress, speed, error\n"
"  stats [--watch [SECS]]     I/O counters per export; --watch refreshes\n"
"                             every SECS seconds (default 1) with rates,\n"
"                             latency and p50/p99/p99.9 percentiles, like\n"
"                             top (q or Ctrl-C to quit)\n"
"  add ID FILE [--socket PATH] [--num-queues N] [--readonly]\n"
"      [--iothread ID] [--cache writeback|none] [--aio io_uring|native|threads]\n"
"                             open FILE as node ID and export it on PATH\n"
"                             (default " CTL_DEFAULT_DIR "/ID.sock)\n"
"  del ID [--force]           remove export ID and its node; --force\n"
"                             disconnects a connected front-end first\n"
"  resize ID SIZE             set the size of export (or node) ID's image\n"
"                             (k, M, G, T suffixes); the guest is told\n"
"                             through a config change\n"
"  throttle NAME [--iops-total N] [--bps-read N] ...\n"
"                             show or change the limits of throttle group\n"
"                             NAME, or of export NAME's own (--export\n"
"                             iops-total=...): --iops-total, --iops-read,\n"
"                             --iops-write, --bps-total, --bps-read,\n"
"                             --bps-write, each also with -max (burst) and\n"
"                             -max-length (seconds), --iops-size; 0 lifts a\n"
"                             limit, the others keep their values\n"
"  log-level [LEVEL]          show or set the log level: error, warn, info\n"
"                             or debug (vhost-blkd only)\n"
"  qmp COMMAND [ARGS-JSON]    run any QMP command, print its \"return\" as\n"
"                             JSON (for scripts)\n"
"\n"
"Options:\n"
"  -s, --socket PATH          the monitor socket (--chardev socket,path=...\n"
"                             of the daemon)\n"
"  -i, --instance NAME        the socket of vhost-blkd@NAME:\n"
"                             " CTL_DEFAULT_DIR "/NAME.qmp\n"
"                             (default: $VHOST_BLK_CTL_SOCKET, else\n"
"                             " CTL_DEFAULT_DIR "/vhost-blkd.qmp)\n"
"  -t, --timeout SECS         wait at most SECS for each reply (default 30)\n"
"  -j, --json                 print the daemon's answers as JSON\n"
"  -h, --help                 this text\n"
"  -V, --version              print the version\n"
"\n"
"Exit status: 0 on success, 1 on an error (the daemon's QMP error is\n"
"printed), 2 on bad usage.\n");
}

static void G_GNUC_PRINTF(1, 2) G_GNUC_NORETURN ctl_usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'vhost-blk-ctl --help' for more information.\n");
    exit(2);
}

/* ---- QMP transport --------------------------------------------------- */

static void ctl_connect(Ctl *c)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int err;

    if (strlen(c->path) >= sizeof(sa.sun_path)) {
        ctl_die("monitor socket path '%s' is too long", c->path);
    }
    strcpy(sa.sun_path, c->path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        ctl_die("socket: %s", g_strerror(errno));
    }
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        return;
    }
    err = errno;
    switch (err) {
    case ENOENT:
        ctl_die("no monitor socket at %s: is the daemon running, with a "
                "monitor there (--chardev socket,path=%s,server=on,wait=off "
                "--monitor chardev=...)? Use -s PATH or -i NAME for another "
                "one", c->path, c->path);
    case ECONNREFUSED:
        ctl_die("%s refused the connection: the daemon that made it is "
                "gone (a stale socket file), or another client holds its "
                "monitor", c->path);
    case EACCES:
    case EPERM:
        ctl_die("no permission to connect to %s: run as its owner or root",
                c->path);
    default:
        ctl_die("cannot connect to %s: %s", c->path, g_strerror(err));
    }
}

/* The next line from the server as a JSON object; dies on EOF or bad
 * JSON, and on a timeout unless @soft (then returns NULL). */
static JsonNode *ctl_read_msg_soft(Ctl *c, bool soft)
{
    for (;;) {
        char *nl = memchr(c->in->str, '\n', c->in->len);

        if (nl) {
            g_autoptr(JsonParser) p = json_parser_new();
            g_autofree char *line = g_strndup(c->in->str, nl - c->in->str);
            GError *err = NULL;
            JsonNode *root;

            g_string_erase(c->in, 0, nl - c->in->str + 1);
            g_strstrip(line);
            if (!*line) {
                continue;
            }
            if (!json_parser_load_from_data(p, line, -1, &err)) {
                ctl_die("the daemon sent something that is not JSON (%s): "
                        "%.80s", err->message, line);
            }
            root = json_parser_get_root(p);
            if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
                ctl_die("the daemon sent a JSON value that is not an "
                        "object: %.80s", line);
            }
            return json_node_copy(root);
        }

        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        char buf[65536];
        ssize_t n;
        int r;

        if (c->in->len > CTL_MAX_LINE) {
            ctl_die("the daemon sent a line longer than %d bytes",
                    CTL_MAX_LINE);
        }
        r = poll(&pfd, 1, c->timeout_ms);
        if (r == 0 && soft) {
            return NULL;
        }
        if (r == 0) {
            ctl_die("no answer from %s within %u s (the daemon is stuck, or "
                    "the socket is not a QMP monitor); raise --timeout to "
                    "wait longer", c->path, c->timeout_ms / 1000);
        }
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            ctl_die("poll: %s", g_strerror(errno));
        }
        n = read(c->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            ctl_die("the daemon closed the monitor connection%s%s",
                    n < 0 ? ": " : "", n < 0 ? g_strerror(errno) : "");
        }
        g_string_append_len(c->in, buf, n);
    }
}

static JsonNode *ctl_read_msg(Ctl *c)
{
    return ctl_read_msg_soft(c, false);
}

static void ctl_send(Ctl *c, JsonNode *msg)
{
    g_autofree char *text = json_to_string(msg, false);
    g_autofree char *line = g_strconcat(text, "\n", NULL);
    size_t len = strlen(line), off = 0;

    while (off < len) {
        ssize_t n = send(c->fd, line + off, len - off, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            ctl_die("cannot send to the daemon: %s", g_strerror(errno));
        }
        off += n;
    }
}

/*
 * Run @cmd with @args (an object node, or NULL; taken).  Returns the
 * "return" member (owned by the caller) or NULL with *@err_class and
 * *@err_desc set from the "error" member.
 */
static JsonNode *ctl_execute(Ctl *c, const char *cmd, JsonNode *args,
                             char **err_class, char **err_desc)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    g_autoptr(JsonNode) req = NULL;
    unsigned int id = ++c->next_id;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "execute");
    json_builder_add_string_value(b, cmd);
    if (args) {
        json_builder_set_member_name(b, "arguments");
        json_builder_add_value(b, args);
    }
    json_builder_set_member_name(b, "id");
    json_builder_add_int_value(b, id);
    json_builder_end_object(b);
    req = json_builder_get_root(b);
    ctl_send(c, req);

    for (;;) {
        g_autoptr(JsonNode) msg = ctl_read_msg(c);
        JsonObject *o = json_node_get_object(msg);

        if (json_object_has_member(o, "event")) {
            g_ptr_array_add(c->events, json_node_copy(msg));
            continue;
        }
        if (!json_object_has_member(o, "id") ||
            json_object_get_int_member(o, "id") != id) {
            /* An answer to something else (another client's id): skip. */
            continue;
        }
        if (json_object_has_member(o, "return")) {
            return json_node_copy(json_object_get_member(o, "return"));
        }
        if (json_object_has_member(o, "error") &&
            JSON_NODE_HOLDS_OBJECT(json_object_get_member(o, "error"))) {
            JsonObject *e = json_object_get_object_member(o, "error");

            *err_class = g_strdup(json_object_get_string_member_with_default(
                                  e, "class", "GenericError"));
            *err_desc = g_strdup(json_object_get_string_member_with_default(
                                 e, "desc", "(no description)"));
            return NULL;
        }
        ctl_die("the daemon answered '%s' with neither return nor error",
                cmd);
    }
}

/* ctl_execute(), dying with the daemon's error. */
static JsonNode *ctl_run(Ctl *c, const char *what, const char *cmd,
                         JsonNode *args)
{
    g_autofree char *cls = NULL, *desc = NULL;
    JsonNode *ret = ctl_execute(c, cmd, args, &cls, &desc);

    if (!ret) {
        if (!strcmp(cls, "CommandNotFound")) {
            ctl_die("%s: the daemon does not know '%s' (%s)", what, cmd,
                    desc);
        }
        ctl_die("%s: %s", what, desc);
    }
    return ret;
}

static void ctl_open(Ctl *c)
{
    g_autoptr(JsonNode) greeting = NULL;
    g_autoptr(JsonNode) ret = NULL;

    ctl_connect(c);
    greeting = ctl_read_msg(c);
    if (!json_object_has_member(json_node_get_object(greeting), "QMP")) {
        ctl_die("%s is not a QMP monitor (no greeting)", c->path);
    }
    ret = ctl_run(c, "capabilities negotiation", "qmp_capabilities", NULL);
}

/* ---- helpers --------------------------------------------------------- */

static JsonObject *ctl_obj(JsonNode *n)
{
    return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

static JsonArray *ctl_array(JsonNode *n, const char *what)
{
    if (!n || !JSON_NODE_HOLDS_ARRAY(n)) {
        ctl_die("%s: the daemon's answer is not a list", what);
    }
    return json_node_get_array(n);
}

static const char *ctl_str(JsonObject *o, const char *m)
{
    JsonNode *n = o ? json_object_get_member(o, m) : NULL;

    if (!n || json_node_get_value_type(n) != G_TYPE_STRING) {
        return NULL;
    }
    return json_node_get_string(n);
}

static gint64 ctl_int(JsonObject *o, const char *m)
{
    JsonNode *n = o ? json_object_get_member(o, m) : NULL;

    if (!n || !JSON_NODE_HOLDS_VALUE(n)) {
        return 0;
    }
    return json_node_get_value_type(n) == G_TYPE_INT64 ?
           json_node_get_int(n) : (gint64)json_node_get_double(n);
}

static void ctl_print_json(JsonNode *n)
{
    g_autoptr(JsonGenerator) g = json_generator_new();
    g_autofree char *text = NULL;

    json_generator_set_pretty(g, true);
    json_generator_set_root(g, n);
    text = json_generator_to_data(g, NULL);
    printf("%s\n", text);
}

static char *ctl_human_size(uint64_t v)
{
    static const char units[] = "KMGTPE";
    double d = v;
    int u = -1;

    if (v < 1024) {
        return g_strdup_printf("%" PRIu64, v);
    }
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    return g_strdup_printf(d < 10 ? "%.1f%c" : "%.0f%c", d, units[u]);
}

/* A size with an optional k/M/G/T/P suffix (powers of 1024). */
static bool ctl_parse_size(const char *s, uint64_t *out)
{
    char *end;
    uint64_t v, mul = 1;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno) {
        return false;
    }
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    case 't': case 'T': mul = 1ULL << 40; end++; break;
    case 'p': case 'P': mul = 1ULL << 50; end++; break;
    default: return false;
    }
    if (*end == 'i' && mul > 1) {
        end++;
    }
    if ((*end == 'B' || *end == 'b') && mul > 1) {
        end++;
    }
    if (*end || v > UINT64_MAX / mul) {
        return false;
    }
    *out = v * mul;
    return true;
}

/* ---- exports ---------------------------------------------------------- */

static JsonNode *ctl_args_flat(void)
{
    JsonNode *n = json_node_new(JSON_NODE_OBJECT);
    JsonObject *o = json_object_new();

    json_object_set_boolean_member(o, "flat", true);
    json_node_take_object(n, o);
    return n;
}

/* The node called @name in query-named-block-nodes' answer, or NULL. */
static JsonObject *ctl_find_node(JsonArray *na, const char *name)
{
    for (guint j = 0; name && j < json_array_get_length(na); j++) {
        JsonObject *n = ctl_obj(json_array_get_element(na, j));

        if (g_strcmp0(ctl_str(n, "node-name"), name) == 0) {
            return n;
        }
    }
    return NULL;
}

/*
 * The node whose image an export serves: @bn itself, or below a throttle
 * filter the node it filters (vhost-blkd names it in x-file-node-name;
 * qemu-storage-daemon does not say, and the filter is what is shown).
 */
static JsonObject *ctl_image_node(JsonArray *na, JsonObject *bn)
{
    for (int hops = 0; bn && hops < 8; hops++) {
        JsonObject *below;

        if (g_strcmp0(ctl_str(bn, "drv"), "throttle") ||
            !(below = ctl_find_node(na, ctl_str(bn, "x-file-node-name")))) {
            return bn;
        }
        bn = below;
    }
    return bn;
}

/* An image's format as a user names it.  A format node's image lists
 * the file below it (children), and a backing chain's images name their
 * format already ("raw" for a protocol node); a protocol node's own
 * image names its driver (file, host_device, rbd, ...), which serves
 * the bytes as they are: raw.  @backing: @img is a backing image. */
static const char *ctl_image_format(JsonObject *img, bool backing)
{
    const char *f = ctl_str(img, "format");

    if (!f) {
        return "?";
    }
    return backing || json_object_has_member(img, "children") ? f : "raw";
}

static int ctl_cmd_exports(Ctl *c)
{
    g_autoptr(JsonNode) exps = ctl_run(c, "exports", "query-block-exports",
                                       NULL);
    g_autoptr(JsonNode) nodes = ctl_run(c, "exports",
                                        "query-named-block-nodes",
                                        ctl_args_flat());
    JsonArray *ea = ctl_array(exps, "query-block-exports");
    JsonArray *na = ctl_array(nodes, "query-named-block-nodes");

    if (c->json) {
        ctl_print_json(exps);
        return 0;
    }
    if (json_array_get_length(ea) == 0) {
        printf("no exports\n");
        return 0;
    }
    printf("%-16s %-16s %-16s %8s %-3s %-8s %-6s %5s %s\n", "ID", "TYPE",
           "NODE", "SIZE", "RO", "STATE", "FORMAT", "DEPTH", "FILE");
    for (guint i = 0; i < json_array_get_length(ea); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(ea, i));
        const char *node = ctl_str(e, "node-name");
        JsonObject *bn = NULL, *fmt;
        g_autofree char *size = NULL, *depth = NULL;
        const char *ro;
        bool shutting = e && json_object_get_boolean_member_with_default(
                                 e, "shutting-down", false);

        bn = ctl_find_node(na, node);
        size = bn ? ctl_human_size(ctl_int(ctl_obj(json_object_get_member(
                       bn, "image")), "virtual-size")) : g_strdup("-");
        /*
         * What a guest can do is the export's writable state (QSD's
         * writable=on, default off), not the node's read-only flag.
         * vhost-blkd reports it; qemu-storage-daemon does not, and there
         * a read-only node at least means a read-only export.
         */
        if (e && json_object_has_member(e, "writable")) {
            ro = json_object_get_boolean_member(e, "writable") ? "no" : "yes";
        } else if (bn && json_object_get_boolean_member_with_default(
                       bn, "ro", false)) {
            ro = "yes";
        } else {
            ro = bn ? "?" : "-";
        }
        fmt = ctl_image_node(na, bn);
        if (fmt && json_object_has_member(fmt, "backing_file_depth")) {
            depth = g_strdup_printf("%" G_GINT64_FORMAT,
                                    ctl_int(fmt, "backing_file_depth"));
        } else {
            depth = g_strdup("-");
        }
        printf("%-16s %-16s %-16s %8s %-3s %-8s %-6s %5s %s\n",
               ctl_str(e, "id") ?: "?", ctl_str(e, "type") ?: "?",
               node ?: "?", size, ro,
               shutting ? "deleting" : "active",
               fmt ? ctl_image_format(ctl_obj(json_object_get_member(
                         fmt, "image")), false) : "-",
               depth,
               bn && ctl_str(bn, "file") ? ctl_str(bn, "file") : "-");
    }
    return 0;
}

/*
 * The node of a backing image @img (an image.backing-image): the format
 * node over its file.  NULL when the daemon does not list it (QEMU lists
 * every node; the nested form alone says no node-name).
 */
static JsonObject *ctl_backing_node(JsonArray *na, JsonObject *img)
{
    const char *file = ctl_str(img, "filename");
    const char *fmt = ctl_str(img, "format");

    for (guint j = 0; file && fmt && j < json_array_get_length(na); j++) {
        JsonObject *n = ctl_obj(json_array_get_element(na, j));

        if (!g_strcmp0(ctl_str(n, "file"), file) &&
            !g_strcmp0(ctl_str(n, "drv"), fmt)) {
            return n;
        }
    }
    return NULL;
}

/* One line per image of each export's chain, from the image served down
 * (the nested backing-image of QEMU's ImageInfo). */
static int ctl_cmd_nodes(Ctl *c)
{
    g_autoptr(JsonNode) exps = ctl_run(c, "nodes", "query-block-exports",
                                       NULL);
    g_autoptr(JsonNode) nodes = ctl_run(c, "nodes",
                                        "query-named-block-nodes",
                                        ctl_args_flat());
    JsonArray *ea = ctl_array(exps, "query-block-exports");
    JsonArray *na = ctl_array(nodes, "query-named-block-nodes");
    g_autoptr(JsonNode) out = json_node_new(JSON_NODE_ARRAY);
    JsonArray *oa = json_array_new();

    json_node_take_array(out, oa);
    for (guint i = 0; i < json_array_get_length(ea); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(ea, i));
        JsonObject *bn = ctl_image_node(na, ctl_find_node(na,
                                            ctl_str(e, "node-name")));
        JsonObject *img = bn ? ctl_obj(json_object_get_member(bn, "image"))
                             : NULL;

        /* The daemon's chain is bounded (qcow2 refuses deeper ones);
         * the bound here only keeps a broken answer from looping. */
        for (int depth = 0; img && depth < 256; depth++) {
            JsonObject *o = json_object_new();

            if (depth > 0) {
                bn = ctl_backing_node(na, img);
            }

            json_object_set_string_member(o, "export",
                                          ctl_str(e, "id") ?: "?");
            json_object_set_string_member(o, "node-name",
                                          ctl_str(bn, "node-name") ?: "-");
            json_object_set_int_member(o, "depth", depth);
            json_object_set_string_member(o, "format",
                                          ctl_image_format(img,
                                                           depth > 0));
            json_object_set_int_member(o, "virtual-size",
                                       ctl_int(img, "virtual-size"));
            json_object_set_string_member(o, "filename",
                                          ctl_str(img, "filename") ?: "-");
            json_array_add_object_element(oa, o);
            img = ctl_obj(json_object_get_member(img, "backing-image"));
        }
    }
    if (c->json) {
        ctl_print_json(out);
        return 0;
    }
    if (json_array_get_length(oa) == 0) {
        printf("no exports\n");
        return 0;
    }
    printf("%-16s %-16s %5s %-6s %8s %s\n", "EXPORT", "NODE", "DEPTH",
           "FORMAT", "SIZE", "FILE");
    for (guint i = 0; i < json_array_get_length(oa); i++) {
        JsonObject *o = json_array_get_object_element(oa, i);
        g_autofree char *size = ctl_human_size(ctl_int(o, "virtual-size"));

        printf("%-16s %-16s %5" G_GINT64_FORMAT " %-6s %8s %s\n",
               ctl_str(o, "export"), ctl_str(o, "node-name"),
               ctl_int(o, "depth"), ctl_str(o, "format"), size,
               ctl_str(o, "filename"));
    }
    return 0;
}

/* ---- iothreads -------------------------------------------------------- */

static int ctl_cmd_iothreads(Ctl *c)
{
    g_autoptr(JsonNode) r = ctl_run(c, "iothreads", "query-iothreads", NULL);
    JsonArray *a = ctl_array(r, "query-iothreads");

    if (c->json) {
        ctl_print_json(r);
        return 0;
    }
    if (json_array_get_length(a) == 0) {
        printf("no iothread objects (add them with --object iothread,id=ID "
               "on the daemon's command line)\n");
        return 0;
    }
    printf("%-16s %10s %12s\n", "ID", "THREAD-ID", "POLL-MAX-NS");
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *t = ctl_obj(json_array_get_element(a, i));

        printf("%-16s %10" PRId64 " %12" PRId64 "\n",
               ctl_str(t, "id") ?: "?", ctl_int(t, "thread-id"),
               ctl_int(t, "poll-max-ns"));
    }
    return 0;
}

/* ---- jobs ------------------------------------------------------------ */

static int ctl_cmd_jobs(Ctl *c)
{
    g_autoptr(JsonNode) r = ctl_run(c, "jobs", "query-block-jobs", NULL);
    JsonArray *a = ctl_array(r, "query-block-jobs");

    if (c->json) {
        ctl_print_json(r);
        return 0;
    }
    if (json_array_get_length(a) == 0) {
        printf("no block jobs\n");
        return 0;
    }
    printf("%-16s %-8s %-10s %7s %21s %12s  %s\n", "ID", "TYPE", "STATUS",
           "DONE", "BYTES", "SPEED", "ERROR");
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *j = ctl_obj(json_array_get_element(a, i));
        int64_t off = ctl_int(j, "offset"), len = ctl_int(j, "len");
        g_autofree char *bytes = g_strdup_printf("%" PRId64 "/%" PRId64,
                                                 off, len);

        printf("%-16s %-8s %-10s %6.1f%% %21s %12" PRId64 "  %s\n",
               ctl_str(j, "device") ?: "?", ctl_str(j, "type") ?: "?",
               ctl_str(j, "status") ?: "?",
               len > 0 ? 100.0 * off / len : 0.0, bytes,
               ctl_int(j, "speed"), ctl_str(j, "error") ?: "-");
    }
    return 0;
}

/* ---- stats ----------------------------------------------------------- */

typedef struct CtlStat {
    char *name;
    uint64_t rd_ops, wr_ops, fl_ops, un_ops;
    uint64_t rd_bytes, wr_bytes, un_bytes;
    uint64_t errors;
    uint64_t rd_ns, wr_ns;
    bool has_lat;               /* vhost-blkd's latency buckets, all ops */
    uint64_t lat[LAT_HIST_FIXED_BINS];
} CtlStat;

static void ctl_stat_free(gpointer p)
{
    CtlStat *s = p;

    g_free(s->name);
    g_free(s);
}

static JsonNode *ctl_query_stats(Ctl *c)
{
    JsonNode *ret = ctl_run(c, "stats", "query-blockstats", NULL);
    JsonNode *args;
    JsonObject *o;

    if (json_array_get_length(ctl_array(ret, "query-blockstats")) > 0) {
        return ret;
    }
    /* qemu-storage-daemon's exports have no named block backend: ask for
     * the nodes instead. */
    json_node_unref(ret);
    args = json_node_new(JSON_NODE_OBJECT);
    o = json_object_new();
    json_object_set_boolean_member(o, "query-nodes", true);
    json_node_take_object(args, o);
    return ctl_run(c, "stats", "query-blockstats", args);
}

static GPtrArray *ctl_collect_stats(JsonNode *ret)
{
    JsonArray *a = ctl_array(ret, "query-blockstats");
    GPtrArray *out = g_ptr_array_new_with_free_func(ctl_stat_free);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(a, i));
        JsonObject *st = e ? ctl_obj(json_object_get_member(e, "stats")) :
                         NULL;
        const char *name = ctl_str(e, "id");
        CtlStat *s;

        if (!st) {
            continue;
        }
        if (!name || !*name) {
            name = ctl_str(e, "device");
        }
        /* vhost-blkd's qdev is the export id, the name del takes; QSD's
         * per-node entries have only the node name. */
        if (!name || !*name) {
            name = ctl_str(e, "qdev");
        }
        if (!name || !*name) {
            name = ctl_str(e, "node-name");
        }
        s = g_new0(CtlStat, 1);
        s->name = g_strdup(name && *name ? name : "?");
        s->rd_ops = ctl_int(st, "rd_operations");
        s->wr_ops = ctl_int(st, "wr_operations");
        s->fl_ops = ctl_int(st, "flush_operations");
        s->un_ops = ctl_int(st, "unmap_operations");
        s->rd_bytes = ctl_int(st, "rd_bytes");
        s->wr_bytes = ctl_int(st, "wr_bytes");
        s->un_bytes = ctl_int(st, "unmap_bytes");
        s->errors = ctl_int(st, "failed_rd_operations") +
                    ctl_int(st, "failed_wr_operations") +
                    ctl_int(st, "failed_flush_operations") +
                    ctl_int(st, "failed_unmap_operations");
        s->rd_ns = ctl_int(st, "rd_total_time_ns");
        s->wr_ns = ctl_int(st, "wr_total_time_ns");
        g_ptr_array_add(out, s);
    }
    return out;
}

/*
 * vhost-blkd's fixed latency buckets (x-query-vhost-blk-stats), summed
 * over request types, into the entries of @st named by export id.  Not
 * an error when the daemon has no such command (qemu-storage-daemon):
 * the percentile columns then show "-".
 */
static void ctl_collect_latency(Ctl *c, GPtrArray *st)
{
    g_autofree char *cls = NULL, *desc = NULL;
    g_autoptr(JsonNode) ret = ctl_execute(c, "x-query-vhost-blk-stats", NULL,
                                          &cls, &desc);
    JsonArray *exps;

    if (!ret || !ctl_obj(ret) ||
        !json_object_has_member(ctl_obj(ret), "exports")) {
        return;
    }
    exps = json_object_get_array_member(ctl_obj(ret), "exports");
    for (guint i = 0; exps && i < json_array_get_length(exps); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(exps, i));
        JsonObject *ops = e ? ctl_obj(json_object_get_member(e, "operations"))
                            : NULL;
        const char *id = ctl_str(e, "id");
        CtlStat *s = NULL;
        g_autoptr(GList) names = NULL;

        for (guint k = 0; id && k < st->len; k++) {
            CtlStat *x = g_ptr_array_index(st, k);

            if (!strcmp(x->name, id)) {
                s = x;
            }
        }
        if (!s || !ops) {
            continue;
        }
        names = json_object_get_members(ops);
        for (GList *l = names; l; l = l->next) {
            JsonObject *op = ctl_obj(json_object_get_member(ops, l->data));
            JsonObject *lat = op ? ctl_obj(json_object_get_member(op,
                                                                  "latency"))
                                 : NULL;
            JsonNode *bn = lat ? json_object_get_member(lat, "bins") : NULL;
            JsonArray *bins = bn && JSON_NODE_HOLDS_ARRAY(bn) ?
                              json_node_get_array(bn) : NULL;

            if (!bins || json_array_get_length(bins) != LAT_HIST_FIXED_BINS) {
                continue;       /* another daemon's layout: not ours */
            }
            for (guint b = 0; b < LAT_HIST_FIXED_BINS; b++) {
                s->lat[b] += json_array_get_int_element(bins, b);
            }
            s->has_lat = true;
        }
    }
}

/* One percentile column: the upper bound in us of the bucket holding the
 * quantile of the requests done between two samples. */
static void ctl_format_quantile(char *buf, size_t size, const CtlStat *s,
                                const CtlStat *p, unsigned int per_mille)
{
    uint64_t d[LAT_HIST_FIXED_BINS], total = 0, q;

    if (!s->has_lat || !p->has_lat) {
        g_strlcpy(buf, "-", size);
        return;
    }
    for (unsigned int b = 0; b < LAT_HIST_FIXED_BINS; b++) {
        d[b] = s->lat[b] >= p->lat[b] ? s->lat[b] - p->lat[b] : 0;
        total += d[b];
    }
    q = lat_hist_fixed_quantile(d, per_mille);
    if (!total) {
        g_strlcpy(buf, "-", size);
    } else if (q == UINT64_MAX) {
        snprintf(buf, size, ">%" PRIu64,
                 lat_hist_fixed_le_ns(LAT_HIST_FIXED_FINITE - 1) / 1000);
    } else {
        snprintf(buf, size, "%" PRIu64, q / 1000);
    }
}

static void ctl_print_totals(GPtrArray *st)
{
    printf("%-16s %12s %12s %10s %10s %10s %10s %8s\n", "EXPORT", "READS",
           "WRITES", "READ", "WRITTEN", "FLUSHES", "DISCARDS", "ERRORS");
    for (guint i = 0; i < st->len; i++) {
        CtlStat *s = g_ptr_array_index(st, i);
        g_autofree char *rb = ctl_human_size(s->rd_bytes);
        g_autofree char *wb = ctl_human_size(s->wr_bytes);

        printf("%-16s %12" PRIu64 " %12" PRIu64 " %10s %10s %10" PRIu64
               " %10" PRIu64 " %8" PRIu64 "\n", s->name, s->rd_ops,
               s->wr_ops, rb, wb, s->fl_ops, s->un_ops, s->errors);
    }
}

static CtlStat *ctl_find_stat(GPtrArray *st, const char *name)
{
    for (guint i = 0; st && i < st->len; i++) {
        CtlStat *s = g_ptr_array_index(st, i);

        if (!strcmp(s->name, name)) {
            return s;
        }
    }
    return NULL;
}

static double ctl_rate(uint64_t now, uint64_t then, double secs)
{
    return now >= then ? (double)(now - then) / secs : 0;
}

/* Average latency in microseconds of the ops done between two samples. */
static double ctl_lat_us(uint64_t ns, uint64_t ns0, uint64_t ops,
                         uint64_t ops0)
{
    return ops > ops0 && ns >= ns0 ? (double)(ns - ns0) / (ops - ops0) /
                                     1000.0 : 0;
}

static volatile sig_atomic_t ctl_stop;

static void ctl_sigint(int sig)
{
    ctl_stop = 1;
}

static int ctl_cmd_stats(Ctl *c, int argc, char **argv)
{
    double interval = 0;
    g_autoptr(GPtrArray) prev = NULL;
    gint64 prev_t = 0;
    bool tty = isatty(STDOUT_FILENO);

    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--watch") || !strcmp(argv[i], "-w")) {
            interval = 1;
            if (i + 1 < argc && g_ascii_isdigit(argv[i + 1][0])) {
                char *end;

                interval = g_ascii_strtod(argv[++i], &end);
                if (*end || !(interval >= 0.1 && interval <= 3600)) {
                    ctl_usage_error("stats --watch %s: give seconds, 0.1 to "
                                    "3600", argv[i]);
                }
            }
        } else {
            ctl_usage_error("stats: unknown argument '%s'", argv[i]);
        }
    }
    if (interval == 0) {
        g_autoptr(JsonNode) ret = ctl_query_stats(c);
        g_autoptr(GPtrArray) st = NULL;

        if (c->json) {
            ctl_print_json(ret);
            return 0;
        }
        st = ctl_collect_stats(ret);
        ctl_print_totals(st);
        return 0;
    }

    signal(SIGINT, ctl_sigint);
    signal(SIGTERM, ctl_sigint);
    while (!ctl_stop) {
        g_autoptr(JsonNode) ret = ctl_query_stats(c);
        GPtrArray *st = ctl_collect_stats(ret);
        gint64 t;

        ctl_collect_latency(c, st);
        t = g_get_monotonic_time();
        double secs = prev ? (t - prev_t) / 1e6 : 0;
        g_autoptr(GDateTime) dt = g_date_time_new_now_local();
        g_autofree char *now = g_date_time_format(dt, "%H:%M:%S");

        if (tty) {
            printf("\033[H\033[2J");
        }
        printf("vhost-blk-ctl stats: %s, every %.1f s, %s\n\n", c->path,
               interval, now);
        printf("%-16s %9s %9s %9s %9s %8s %8s %9s %9s %7s %8s %8s %8s\n",
               "EXPORT", "r/s", "w/s", "rMB/s", "wMB/s", "flush/s", "disc/s",
               "r_lat_us", "w_lat_us", "errors", "p50_us", "p99_us",
               "p99.9_us");
        for (guint i = 0; i < st->len; i++) {
            CtlStat *s = g_ptr_array_index(st, i);
            CtlStat *p = ctl_find_stat(prev, s->name);

            char p50[24], p99[24], p999[24];

            if (!p || secs <= 0) {
                printf("%-16s %9s %9s %9s %9s %8s %8s %9s %9s %7" PRIu64
                       " %8s %8s %8s\n", s->name, "-", "-", "-", "-", "-",
                       "-", "-", "-", s->errors, "-", "-", "-");
                continue;
            }
            ctl_format_quantile(p50, sizeof(p50), s, p, 500);
            ctl_format_quantile(p99, sizeof(p99), s, p, 990);
            ctl_format_quantile(p999, sizeof(p999), s, p, 999);
            printf("%-16s %9.0f %9.0f %9.1f %9.1f %8.0f %8.0f %9.0f %9.0f "
                   "%7" PRIu64 " %8s %8s %8s\n", s->name,
                   ctl_rate(s->rd_ops, p->rd_ops, secs),
                   ctl_rate(s->wr_ops, p->wr_ops, secs),
                   ctl_rate(s->rd_bytes, p->rd_bytes, secs) / 1e6,
                   ctl_rate(s->wr_bytes, p->wr_bytes, secs) / 1e6,
                   ctl_rate(s->fl_ops, p->fl_ops, secs),
                   ctl_rate(s->un_ops, p->un_ops, secs),
                   ctl_lat_us(s->rd_ns, p->rd_ns, s->rd_ops, p->rd_ops),
                   ctl_lat_us(s->wr_ns, p->wr_ns, s->wr_ops, p->wr_ops),
                   s->errors, p50, p99, p999);
        }
        if (st->len == 0) {
            printf("no exports\n");
        }
        fflush(stdout);
        if (prev) {
            g_ptr_array_unref(prev);
        }
        prev = st;
        prev_t = t;
        /* Sleep, waking early on Ctrl-C or q + Enter. */
        struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
        gint64 until = t + (gint64)(interval * 1e6);

        while (!ctl_stop) {
            gint64 left = until - g_get_monotonic_time();
            char ch;

            if (left <= 0) {
                break;
            }
            if (poll(&pfd, tty ? 1 : 0, (int)((left + 999) / 1000)) > 0) {
                if (read(STDIN_FILENO, &ch, 1) <= 0 || ch == 'q') {
                    ctl_stop = 1;
                }
            }
        }
    }
    return 0;
}

/* ---- add / del / resize / log-level ---------------------------------- */

static int ctl_cmd_add(Ctl *c, int argc, char **argv)
{
    const char *id, *file, *sock = NULL, *iothread = NULL;
    const char *cache = "none", *aio = NULL;
    g_autofree char *def_sock = NULL;
    gint64 nq = 0;
    bool ro = false;
    g_autoptr(JsonBuilder) b = json_builder_new();
    g_autoptr(JsonNode) r1 = NULL;
    g_autofree char *cls = NULL, *desc = NULL;
    JsonNode *r2;

    if (argc < 2) {
        ctl_usage_error("add: give ID FILE");
    }
    id = argv[0];
    file = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];

        if (!strcmp(a, "--readonly")) {
            ro = true;
            continue;
        }
        if (i + 1 >= argc) {
            ctl_usage_error("add: %s needs a value", a);
        }
        if (!strcmp(a, "--socket")) {
            sock = argv[++i];
        } else if (!strcmp(a, "--num-queues")) {
            char *end;

            nq = g_ascii_strtoll(argv[++i], &end, 10);
            if (*end || nq < 1 || nq > 64) {
                ctl_usage_error("add: --num-queues %s: use 1 to 64",
                                argv[i]);
            }
        } else if (!strcmp(a, "--iothread")) {
            iothread = argv[++i];
        } else if (!strcmp(a, "--cache")) {
            cache = argv[++i];
            if (strcmp(cache, "none") && strcmp(cache, "writeback")) {
                ctl_usage_error("add: --cache %s: use none or writeback",
                                cache);
            }
        } else if (!strcmp(a, "--aio")) {
            aio = argv[++i];
        } else {
            ctl_usage_error("add: unknown option '%s'", a);
        }
    }
    if (!sock) {
        def_sock = g_strdup_printf(CTL_DEFAULT_DIR "/%s.sock", id);
        sock = def_sock;
    }

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "driver");
    json_builder_add_string_value(b, g_str_has_prefix(file, "/dev/") ?
                                  "host_device" : "file");
    json_builder_set_member_name(b, "node-name");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "filename");
    json_builder_add_string_value(b, file);
    json_builder_set_member_name(b, "cache");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "direct");
    json_builder_add_boolean_value(b, !strcmp(cache, "none"));
    json_builder_end_object(b);
    if (aio) {
        json_builder_set_member_name(b, "aio");
        json_builder_add_string_value(b, aio);
    }
    if (ro) {
        json_builder_set_member_name(b, "read-only");
        json_builder_add_boolean_value(b, true);
    }
    json_builder_end_object(b);
    r1 = ctl_run(c, "add: blockdev-add", "blockdev-add",
                 json_builder_get_root(b));

    json_builder_reset(b);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, "vhost-user-blk");
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "node-name");
    json_builder_add_string_value(b, id);
    json_builder_set_member_name(b, "writable");
    json_builder_add_boolean_value(b, !ro);
    json_builder_set_member_name(b, "addr");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, "unix");
    json_builder_set_member_name(b, "path");
    json_builder_add_string_value(b, sock);
    json_builder_end_object(b);
    if (nq) {
        json_builder_set_member_name(b, "num-queues");
        json_builder_add_int_value(b, nq);
    }
    if (iothread) {
        json_builder_set_member_name(b, "iothread");
        json_builder_add_string_value(b, iothread);
    }
    json_builder_end_object(b);
    r2 = ctl_execute(c, "block-export-add", json_builder_get_root(b), &cls,
                     &desc);
    if (!r2) {
        /* Do not leave the node behind: the user retries with the same
         * id. */
        g_autofree char *c2 = NULL, *d2 = NULL;
        JsonNode *args = json_node_new(JSON_NODE_OBJECT);
        JsonObject *o = json_object_new();
        JsonNode *r3;

        json_object_set_string_member(o, "node-name", id);
        json_node_take_object(args, o);
        r3 = ctl_execute(c, "blockdev-del", args, &c2, &d2);
        if (r3) {
            json_node_unref(r3);
        }
        ctl_die("add: block-export-add: %s%s%s", desc,
                r3 ? "" : "; the node is left behind too: ",
                r3 ? "" : d2);
    }
    json_node_unref(r2);
    printf("exported %s on %s\n", file, sock);
    return 0;
}

static JsonNode *ctl_args_str(const char *k, const char *v)
{
    JsonNode *n = json_node_new(JSON_NODE_OBJECT);
    JsonObject *o = json_object_new();

    json_object_set_string_member(o, k, v);
    json_node_take_object(n, o);
    return n;
}

static bool ctl_saw_deleted(Ctl *c, const char *id)
{
    for (guint i = 0; i < c->events->len; i++) {
        JsonObject *o = json_node_get_object(g_ptr_array_index(c->events,
                                                               i));
        JsonObject *data = ctl_obj(json_object_get_member(o, "data"));

        if (!g_strcmp0(ctl_str(o, "event"), "BLOCK_EXPORT_DELETED") &&
            !g_strcmp0(ctl_str(data, "id"), id)) {
            return true;
        }
    }
    return false;
}

/* The node-name of export @id (newly allocated), or NULL if there is no
 * such export.  An @id that is no export's but names an export's node
 * (what qemu-storage-daemon's stats show) is replaced by that export's id
 * in *@id_out. */
static char *ctl_export_node(Ctl *c, const char *id, const char **id_out)
{
    g_autoptr(JsonNode) exps = ctl_run(c, "query-block-exports",
                                       "query-block-exports", NULL);
    JsonArray *ea = ctl_array(exps, "query-block-exports");

    for (guint i = 0; i < json_array_get_length(ea); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(ea, i));

        if (!g_strcmp0(ctl_str(e, "id"), id) && ctl_str(e, "node-name")) {
            *id_out = id;
            return g_strdup(ctl_str(e, "node-name"));
        }
    }
    for (guint i = 0; i < json_array_get_length(ea); i++) {
        JsonObject *e = ctl_obj(json_array_get_element(ea, i));

        if (!g_strcmp0(ctl_str(e, "node-name"), id) && ctl_str(e, "id")) {
            *id_out = g_intern_string(ctl_str(e, "id"));
            return g_strdup(id);
        }
    }
    return NULL;
}

static int ctl_cmd_del(Ctl *c, int argc, char **argv)
{
    const char *id;
    bool force = false;
    JsonNode *args;
    g_autofree char *node = NULL;
    g_autofree char *cls = NULL, *desc = NULL;
    g_autoptr(JsonNode) r = NULL;
    g_autoptr(JsonNode) r2 = NULL;

    if (argc < 1) {
        ctl_usage_error("del: give the export ID");
    }
    id = argv[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--force")) {
            force = true;
        } else {
            ctl_usage_error("del: unknown argument '%s'", argv[i]);
        }
    }
    node = ctl_export_node(c, argv[0], &id);
    if (!node) {
        ctl_die("del: there is no export '%s' (see vhost-blk-ctl exports)",
                id);
    }
    args = ctl_args_str("id", id);
    if (force) {
        json_object_set_string_member(json_node_get_object(args), "mode",
                                      "hard");
    }
    r = ctl_execute(c, "block-export-del", args, &cls, &desc);
    if (!r) {
        ctl_die("del: %s%s%s%s", desc, force ? "" : "; here: vhost-blk-ctl del ",
                force ? "" : id, force ? "" : " --force");
    }
    /* The export is gone once its front-end is: wait for the event. */
    while (!ctl_saw_deleted(c, id)) {
        JsonNode *msg = ctl_read_msg_soft(c, true);

        if (!msg) {
            ctl_die("del: export %s is being deleted, but a front-end is "
                    "still connected: it goes when the VM lets go of the "
                    "disk (then remove the node: vhost-blk-ctl qmp "
                    "blockdev-del '{\"node-name\": \"%s\"}'), or use "
                    "--force to disconnect it", id, node);
        }
        if (json_object_has_member(json_node_get_object(msg), "event")) {
            g_ptr_array_add(c->events, msg);
        } else {
            json_node_unref(msg);
        }
    }
    r2 = ctl_run(c, "del: blockdev-del", "blockdev-del",
                 ctl_args_str("node-name", node));
    printf("deleted export %s and node %s\n", id, node);
    return 0;
}

static int ctl_cmd_resize(Ctl *c, int argc, char **argv)
{
    g_autofree char *node = NULL;
    uint64_t size;
    JsonNode *args;
    g_autoptr(JsonNode) r = NULL;

    if (argc != 2) {
        ctl_usage_error("resize: give ID SIZE");
    }
    if (!ctl_parse_size(argv[1], &size) || size > INT64_MAX) {
        ctl_usage_error("resize: '%s' is not a size (bytes, or with a k, M, "
                        "G or T suffix)", argv[1]);
    }
    /* An export's id stands for its node. */
    {
        const char *unused;

        node = ctl_export_node(c, argv[0], &unused);
    }
    args = ctl_args_str("node-name", node ? node : argv[0]);
    json_object_set_int_member(json_node_get_object(args), "size", size);
    r = ctl_run(c, "resize", "block_resize", args);
    printf("%s is now %" PRIu64 " bytes\n", argv[0], size);
    return 0;
}

static int ctl_cmd_log_level(Ctl *c, int argc, char **argv)
{
    g_autoptr(JsonNode) r = NULL;
    const char *now;

    if (argc > 1) {
        ctl_usage_error("log-level: give error, warn, info or debug, or "
                        "nothing to see the current level");
    }
    if (argc == 1 && strcmp(argv[0], "error") && strcmp(argv[0], "warn") &&
        strcmp(argv[0], "info") && strcmp(argv[0], "debug")) {
        ctl_usage_error("log-level %s: use error, warn, info or debug",
                        argv[0]);
    }
    r = ctl_run(c, "log-level", "x-vhost-blk-log-level",
                argc ? ctl_args_str("level", argv[0]) : NULL);
    now = ctl_str(ctl_obj(r), "level");
    if (c->json) {
        ctl_print_json(r);
    } else {
        printf("log level: %s\n", now ? now : "?");
    }
    return 0;
}

/* ---- throttle ---------------------------------------------------------- */

/* A key of QEMU's ThrottleLimits: bps|iops-total|read|write[-max[-length]]
 * or iops-size. */
static bool ctl_throttle_key(const char *k)
{
    static const char *const kinds[] = {
        "bps-total", "bps-read", "bps-write",
        "iops-total", "iops-read", "iops-write",
    };

    if (!strcmp(k, "iops-size")) {
        return true;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
        size_t n = strlen(kinds[i]);

        if (!strncmp(k, kinds[i], n) &&
            (!k[n] || !strcmp(k + n, "-max") ||
             !strcmp(k + n, "-max-length"))) {
            return true;
        }
    }
    return false;
}

/*
 * throttle NAME [--KEY VALUE]...: show (no KEY) or change the limits of
 * throttle group NAME, or of export NAME's own limits, with qom-set of
 * "limits" (the keys not given keep their values).
 */
static int ctl_cmd_throttle(Ctl *c, int argc, char **argv)
{
    JsonObject *lim = json_object_new();
    g_autoptr(JsonNode) r = NULL;
    JsonObject *cur;
    GList *members;
    bool any = false;

    if (argc < 1 || argv[0][0] == '-') {
        json_object_unref(lim);
        ctl_usage_error("throttle: give the NAME of a throttle group or of "
                        "a throttled export");
    }
    for (int i = 1; i < argc; i++) {
        g_autofree char *key = NULL;
        const char *val, *eq;
        uint64_t v;

        if (!g_str_has_prefix(argv[i], "--")) {
            ctl_usage_error("throttle: '%s' is not an option; use e.g. "
                            "--iops-total 500", argv[i]);
        }
        eq = strchr(argv[i], '=');
        key = eq ? g_strndup(argv[i] + 2, eq - argv[i] - 2)
                 : g_strdup(argv[i] + 2);
        if (!ctl_throttle_key(key)) {
            ctl_usage_error("throttle: unknown limit --%s (use --iops-total, "
                            "--iops-read, --iops-write, --bps-total, "
                            "--bps-read, --bps-write, each also with -max "
                            "and -max-length, or --iops-size)", key);
        }
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            ctl_usage_error("throttle: --%s needs a value", key);
        }
        if (!ctl_parse_size(val, &v) || v > INT64_MAX) {
            ctl_usage_error("throttle: --%s %s: give a number >= 0 (0: no "
                            "limit), with an optional k, M, G or T suffix",
                            key, val);
        }
        json_object_set_int_member(lim, key, v);
        any = true;
    }
    if (any) {
        JsonNode *args = ctl_args_str("path", argv[0]);
        JsonObject *ao = json_node_get_object(args);
        g_autoptr(JsonNode) set = NULL;

        json_object_set_string_member(ao, "property", "limits");
        json_object_set_object_member(ao, "value", lim);
        set = ctl_run(c, "throttle", "qom-set", args);
    } else {
        json_object_unref(lim);
    }
    {
        JsonNode *args = ctl_args_str("path", argv[0]);

        json_object_set_string_member(json_node_get_object(args), "property",
                                      "limits");
        r = ctl_run(c, "throttle", "qom-get", args);
    }
    if (c->json) {
        ctl_print_json(r);
        return 0;
    }
    cur = ctl_obj(r);
    printf("%s:", argv[0]);
    any = false;
    members = json_object_get_members(cur);
    for (GList *l = members; l; l = l->next) {
        const char *k = l->data;
        gint64 v = ctl_int(cur, k);

        /* The set limits; max-length only with its max. */
        if (!v || (g_str_has_suffix(k, "-max-length") && v == 1)) {
            continue;
        }
        printf(" %s=%" G_GINT64_FORMAT, k, v);
        any = true;
    }
    g_list_free(members);
    printf("%s\n", any ? "" : " no limit");
    return 0;
}

/* qmp's arguments, checked before connecting: NULL when none given. */
static JsonNode *ctl_qmp_args(int argc, char **argv)
{
    g_autoptr(JsonParser) p = json_parser_new();
    GError *err = NULL;

    if (argc < 1 || argc > 2) {
        ctl_usage_error("qmp: give COMMAND and optionally its arguments as "
                        "a JSON object");
    }
    if (argc == 1) {
        return NULL;
    }
    if (!json_parser_load_from_data(p, argv[1], -1, &err)) {
        ctl_usage_error("qmp %s: the arguments are not JSON: %s", argv[0],
                        err->message);
    }
    if (!JSON_NODE_HOLDS_OBJECT(json_parser_get_root(p))) {
        ctl_usage_error("qmp %s: the arguments must be a JSON object, e.g. "
                        "'{\"id\": \"vm1\"}'", argv[0]);
    }
    return json_node_copy(json_parser_get_root(p));
}

static int ctl_cmd_qmp(Ctl *c, const char *cmd, JsonNode *args)
{
    g_autofree char *cls = NULL, *desc = NULL;
    g_autoptr(JsonNode) r = ctl_execute(c, cmd, args, &cls, &desc);

    if (!r) {
        fprintf(stderr, "%s: %s: %s: %s\n", prog, cmd, cls, desc);
        return 1;
    }
    ctl_print_json(r);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "socket", required_argument, NULL, 's' },
        { "instance", required_argument, NULL, 'i' },
        { "timeout", required_argument, NULL, 't' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    Ctl c = { .fd = -1, .timeout_ms = 30000 };
    g_autofree char *inst_path = NULL;
    JsonNode *qmp_args = NULL;
    const char *cmd;
    int opt, ret;

    /* "+": stop at the command; its options are its own. */
    while ((opt = getopt_long(argc, argv, "+s:i:t:jhV", longopts,
                              NULL)) != -1) {
        switch (opt) {
        case 's':
            c.path = optarg;
            break;
        case 'i':
            if (!*optarg || strchr(optarg, '/')) {
                ctl_usage_error("--instance %s: give the NAME of "
                                "vhost-blkd@NAME", optarg);
            }
            g_free(inst_path);
            inst_path = g_strdup_printf(CTL_DEFAULT_DIR "/%s.qmp", optarg);
            c.path = inst_path;
            break;
        case 't': {
            char *end;
            double t = g_ascii_strtod(optarg, &end);

            if (*end || !(t >= 1 && t <= 86400)) {
                ctl_usage_error("--timeout %s: give seconds, 1 to 86400",
                                optarg);
            }
            c.timeout_ms = (unsigned int)(t * 1000);
            break;
        }
        case 'j':
            c.json = true;
            break;
        case 'h':
            ctl_usage(stdout);
            return 0;
        case 'V':
            printf("vhost-blk-ctl %s\n", VHOST_BLK_VERSION);
            return 0;
        default:
            fprintf(stderr, "Try 'vhost-blk-ctl --help' for more "
                    "information.\n");
            return 2;
        }
    }
    if (optind >= argc) {
        ctl_usage_error("give a command: exports, nodes, iothreads, jobs, "
                        "stats, add, del, resize, throttle, log-level or qmp");
    }
    cmd = argv[optind];
    argc -= optind + 1;
    argv += optind + 1;
    if (!c.path) {
        c.path = g_getenv("VHOST_BLK_CTL_SOCKET");
    }
    if (!c.path) {
        c.path = CTL_DEFAULT_DIR "/vhost-blkd.qmp";
    }
    if (strcmp(cmd, "exports") && strcmp(cmd, "nodes") &&
        strcmp(cmd, "iothreads") &&
        strcmp(cmd, "jobs") && strcmp(cmd, "stats") &&
        strcmp(cmd, "add") && strcmp(cmd, "del") && strcmp(cmd, "resize") &&
        strcmp(cmd, "throttle") && strcmp(cmd, "log-level") &&
        strcmp(cmd, "qmp")) {
        ctl_usage_error("unknown command '%s'", cmd);
    }
    if ((!strcmp(cmd, "exports") || !strcmp(cmd, "nodes") ||
         !strcmp(cmd, "iothreads") ||
         !strcmp(cmd, "jobs")) && argc > 0) {
        ctl_usage_error("%s takes no arguments", cmd);
    }
    if (!strcmp(cmd, "qmp")) {
        qmp_args = ctl_qmp_args(argc, argv);
    }

    signal(SIGPIPE, SIG_IGN);
    c.in = g_string_new(NULL);
    c.events = g_ptr_array_new_with_free_func(
        (GDestroyNotify)json_node_unref);
    ctl_open(&c);

    if (!strcmp(cmd, "exports")) {
        ret = ctl_cmd_exports(&c);
    } else if (!strcmp(cmd, "nodes")) {
        ret = ctl_cmd_nodes(&c);
    } else if (!strcmp(cmd, "iothreads")) {
        ret = ctl_cmd_iothreads(&c);
    } else if (!strcmp(cmd, "jobs")) {
        ret = ctl_cmd_jobs(&c);
    } else if (!strcmp(cmd, "stats")) {
        ret = ctl_cmd_stats(&c, argc, argv);
    } else if (!strcmp(cmd, "add")) {
        ret = ctl_cmd_add(&c, argc, argv);
    } else if (!strcmp(cmd, "del")) {
        ret = ctl_cmd_del(&c, argc, argv);
    } else if (!strcmp(cmd, "resize")) {
        ret = ctl_cmd_resize(&c, argc, argv);
    } else if (!strcmp(cmd, "throttle")) {
        ret = ctl_cmd_throttle(&c, argc, argv);
    } else if (!strcmp(cmd, "log-level")) {
        ret = ctl_cmd_log_level(&c, argc, argv);
    } else {
        ret = ctl_cmd_qmp(&c, argv[0], qmp_args);
    }
    close(c.fd);
    g_string_free(c.in, true);
    g_ptr_array_free(c.events, true);
    return ret;
}
