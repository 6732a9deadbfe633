/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD server in the daemon's QMP model: see include/nbd/nbd-monitor.h.
 * Arguments, replies and error texts follow qemu-storage-daemon's
 * (nbd-server-start, block-export-add type=nbd), plus allow-insecure:
 * without TLS, a listener on anything but a loopback address or a unix
 * socket must be asked for explicitly.
 *
 * The daemon has one NBD server at a time; nbd-server-stop closes it with
 * every NBD export (BLOCK_EXPORT_DELETED for each).
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "nbd/nbd-monitor.h"
#include "nbd/server.h"
#include "nbd/tls.h"
#include "nbd/authz.h"
#include "block/nbd.h"
#include "monitor/monitor-internal.h"
#include "qemu/error-report.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

typedef struct VbNbdExport {
    char *id;
    VbNode *node;
    NbdExport *exp;
    AioContext **ctx;
    unsigned int n_ctx;
    bool writable;
    bool deleting;
} VbNbdExport;

typedef struct VbTlsObj {
    char *id;
    NbdTlsCreds *creds;         /* endpoint=server */
    unsigned int users;         /* servers using it */
    /* endpoint=client: what driver=nbd's tls-creds=ID hands libnbd,
     * which reads the files itself at each connection. */
    bool client;
    bool psk;
    bool verify_peer;
    char *dir;
    char *username;
} VbTlsObj;

/* authz-simple / authz-list: who may connect (tls-authz=ID). */
typedef struct VbAuthzObj {
    char *id;
    const char *type;           /* "authz-simple", "authz-list" or
                                 * "authz-list-file" */
    NbdAuthz *authz;
    unsigned int users;         /* servers using it */
    /* authz-list-file: the file, and what it was when last read */
    char *filename;
    bool refresh;
    bool missing;               /* the last stat() failed */
    struct stat st;
} VbAuthzObj;

/* What a stopped server held until its last connection is gone. */
typedef struct VbNbdHeld {
    VbTlsObj *tls;
    VbAuthzObj *authz;
} VbNbdHeld;

typedef struct VbNbd {
    VbState *state;
    NbdServer *srv;
    VbTlsObj *tls;              /* the running server's */
    VbAuthzObj *authz;          /* the running server's tls-authz */
    GPtrArray *exports;         /* VbNbdExport */
    GPtrArray *tls_objs;        /* VbTlsObj */
    GPtrArray *authz_objs;      /* VbAuthzObj */
    unsigned int closing;       /* stopped servers whose connections
                                 * still have requests in flight */
    /* The running server's address as bound (port=0: the port the
     * kernel chose), for x-query-nbd-server. */
    char *bound_host;
    char *bound_port;
    char *bound_path;
} VbNbd;

/* One daemon, one VbState: the NBD part of it. */
static VbNbd vb_nbd;

static VbNbd *vb_nbd_get(VbState *s)
{
    if (!vb_nbd.exports) {
        vb_nbd.exports = g_ptr_array_new();
        vb_nbd.tls_objs = g_ptr_array_new();
        vb_nbd.authz_objs = g_ptr_array_new();
    }
    vb_nbd.state = s;
    return &vb_nbd;
}

static VbTlsObj *vb_tls_find(VbNbd *n, const char *id)
{
    for (guint i = 0; i < n->tls_objs->len; i++) {
        VbTlsObj *t = g_ptr_array_index(n->tls_objs, i);

        if (!strcmp(t->id, id)) {
            return t;
        }
    }
    return NULL;
}

static VbAuthzObj *vb_authz_find(VbNbd *n, const char *id)
{
    for (guint i = 0; i < n->authz_objs->len; i++) {
        VbAuthzObj *az = g_ptr_array_index(n->authz_objs, i);

        if (!strcmp(az->id, id)) {
            return az;
        }
    }
    return NULL;
}

bool vb_nbd_object_exists(VbState *s, const char *id)
{
    return vb_nbd_object_type(s, id) != NULL;
}

const char *vb_nbd_object_type(VbState *s, const char *id)
{
    VbNbd *n = vb_nbd_get(s);
    VbTlsObj *t = vb_tls_find(n, id);
    VbAuthzObj *az = vb_authz_find(n, id);

    if (t) {
        return t->psk ? "tls-creds-psk" : "tls-creds-x509";
    }
    return az ? az->type : NULL;
}

void vb_nbd_objects_foreach(VbState *s,
                            void (*fn)(void *opaque, const char *id,
                                       const char *type),
                            void *opaque)
{
    VbNbd *n = vb_nbd_get(s);

    for (guint i = 0; i < n->tls_objs->len; i++) {
        VbTlsObj *t = g_ptr_array_index(n->tls_objs, i);

        fn(opaque, t->id, t->psk ? "tls-creds-psk" : "tls-creds-x509");
    }
    for (guint i = 0; i < n->authz_objs->len; i++) {
        VbAuthzObj *az = g_ptr_array_index(n->authz_objs, i);

        fn(opaque, az->id, az->type);
    }
}

static void vb_authz_obj_free(VbAuthzObj *az)
{
    g_free(az->filename);
    nbd_authz_free(az->authz);
    g_free(az->id);
    g_free(az);
}

static bool vb_authz_del(VbNbd *n, VbAuthzObj *az, GError **errp)
{
    if (az->users && n->authz != az) {
        vb_set_error(errp, "object '%s' is in use, can not be deleted: a "
                     "stopped NBD server's connections still have requests "
                     "in flight; try again once their exports' "
                     "BLOCK_EXPORT_DELETED came", az->id);
        return false;
    }
    if (az->users) {
        vb_set_error(errp, "object '%s' is in use, can not be deleted: the "
                     "NBD server uses it (tls-authz=%s); stop it first "
                     "with nbd-server-stop", az->id, az->id);
        return false;
    }
    g_ptr_array_remove(n->authz_objs, az);
    vb_authz_obj_free(az);
    return true;
}

bool vb_nbd_object_del(VbState *s, const char *id, GError **errp)
{
    VbNbd *n = vb_nbd_get(s);
    VbTlsObj *t = vb_tls_find(n, id);
    VbAuthzObj *az = vb_authz_find(n, id);

    if (az) {
        return vb_authz_del(n, az, errp);
    }
    if (!t) {
        vb_set_error(errp, "object '%s' not found", id);
        return false;
    }
    if (t->users && n->tls != t) {
        vb_set_error(errp, "object '%s' is in use, can not be deleted: a "
                     "stopped NBD server's connections still have requests "
                     "in flight; try again once their exports' "
                     "BLOCK_EXPORT_DELETED came", id);
        return false;
    }
    if (t->users) {
        /* QEMU's text, then who holds it and what to do */
        vb_set_error(errp, "object '%s' is in use, can not be deleted: the "
                     "NBD server uses it (tls-creds=%s); stop it first "
                     "with nbd-server-stop", id, id);
        return false;
    }
    g_ptr_array_remove(n->tls_objs, t);
    nbd_tls_creds_free(t->creds);
    g_free(t->id);
    g_free(t);
    return true;
}

/* ---- TLS credentials objects --------------------------------------------- */

static bool vb_tls_common(VbState *s, QmpArgs *a, const char **id,
                          const char **dir, bool *client, GError **errp)
{
    static const char *const endpoints[] = { "server", "client", NULL };
    int endpoint = 0;

    if (!qmp_args_str(a, "id", true, id, errp) ||
        !qmp_args_str(a, "dir", true, dir, errp) ||
        !qmp_args_enum(a, "endpoint", endpoints, false, &endpoint, errp)) {
        return false;
    }
    *client = endpoint == 1;
    if (vb_nbd_object_exists(s, *id) || vb_iothread_find(s, *id) ||
        vb_secret_find(s, *id) || vb_throttle_group_find(s, *id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", *id);
        return false;
    }
    return true;
}

#if CONFIG_NBD
static bool vb_tls_client_lookup(const char *id, BlockNbdTlsCreds *out,
                                 GError **errp);
#endif

static bool vb_tls_add(VbState *s, const char *id, NbdTlsCreds *creds,
                       bool psk, bool verify_peer)
{
    VbTlsObj *t = g_new0(VbTlsObj, 1);

    t->id = g_strdup(id);
    t->creds = creds;
    t->psk = psk;
    t->verify_peer = verify_peer;
    g_ptr_array_add(vb_nbd_get(s)->tls_objs, t);
    return true;
}

/* endpoint=client: the file libnbd will need must be there now, so that
 * a wrong dir= is said at object-add rather than at each connection. */
static bool vb_tls_client_add(VbState *s, const char *type, const char *id,
                              const char *dir, const char *need,
                              bool psk, bool verify, const char *user,
                              GError **errp)
{
    g_autofree char *file = need ? g_build_filename(dir, need, NULL) : NULL;
    VbTlsObj *t;

    if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
        vb_set_error(errp, "%s '%s': dir: '%s' is not a directory", type,
                     id, dir);
        return false;
    }
    if (file && access(file, R_OK) < 0) {
        vb_set_error(errp, "%s '%s': cannot read %s: %s", type, id, file,
                     g_strerror(errno));
        return false;
    }
    t = g_new0(VbTlsObj, 1);
    t->id = g_strdup(id);
    t->client = true;
    t->psk = psk;
    t->verify_peer = verify;
    t->dir = g_strdup(dir);
    t->username = g_strdup(user);
    g_ptr_array_add(vb_nbd_get(s)->tls_objs, t);
#if CONFIG_NBD
    /* Until a client object exists, driver=nbd finds no tls-creds. */
    blk_nbd_set_tls_lookup(vb_tls_client_lookup);
#endif
    return true;
}

#if CONFIG_NBD
/* driver=nbd's tls-creds=ID (main thread, the parser). */
static bool vb_tls_client_lookup(const char *id, BlockNbdTlsCreds *out,
                                 GError **errp)
{
    VbTlsObj *t = vb_nbd.tls_objs ? vb_tls_find(&vb_nbd, id) : NULL;

    if (!t) {
        vb_set_error(errp, "No TLS credentials with id '%s'", id);
        return false;
    }
    if (!t->client) {
        vb_set_error(errp, "tls-creds '%s' has endpoint=server: an NBD "
                     "client needs an object with endpoint=client", id);
        return false;
    }
    out->psk = t->psk;
    out->verify_peer = t->verify_peer;
    out->dir = g_strdup(t->dir);
    out->username = g_strdup(t->username);
    return true;
}
#endif

/* --object tls-creds-x509,id=ID,dir=DIR,endpoint=server[,verify-peer=on]
 * [,allow=DN]: allow= (ours, repeatable as allow.0=, allow.1=) limits the
 * client certificates to those subject DNs. */
bool vb_nbd_tls_x509_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL, *dir = NULL, *allow = NULL, *prio = NULL;
    bool verify = true;
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GPtrArray) names = g_ptr_array_new();
    NbdTlsCreds *creds;
    bool client;

    if (!vb_tls_common(s, a, &id, &dir, &client, errp) ||
        !qmp_args_bool(a, "verify-peer", &verify, errp) ||
        !qmp_args_str(a, "priority", false, &prio, errp)) {
        return false;
    }
    if (qmp_args_has(a, "allow")) {
        JsonNode *v = json_object_get_member(a->obj, "allow");

        if (JSON_NODE_HOLDS_VALUE(v)) {
            if (!qmp_args_str(a, "allow", true, &allow, errp)) {
                return false;
            }
            g_ptr_array_add(names, (char *)allow);
        } else {
            if (!qmp_args_list(a, "allow", &list, errp)) {
                return false;
            }
            for (guint i = 0; i < list->len; i++) {
                const char *str = qmp_node_str(g_ptr_array_index(list, i));

                if (!str) {
                    vb_set_error(errp, "tls-creds-x509 '%s': allow: a list "
                                 "of certificate DNs (strings)", id);
                    return false;
                }
                g_ptr_array_add(names, (char *)str);
            }
        }
    }
    if (qmp_args_has(a, "sanity-check")) {
        bool sc;

        if (!qmp_args_bool(a, "sanity-check", &sc, errp)) {
            return false;
        }
    }
    if (!qmp_args_check_done(a, errp)) {
        return false;
    }
    if (prio) {
        vb_set_error(errp, "tls-creds-x509 '%s': priority= is not "
                     "supported", id);
        return false;
    }
    if (client) {
        if (names->len) {
            vb_set_error(errp, "tls-creds-x509 '%s': allow= limits the "
                         "clients of a server: not with endpoint=client",
                         id);
            return false;
        }
        /* As QEMU's client: the CA to check the server with (with
         * verify-peer=on); client-cert.pem and client-key.pem if the
         * server asks for them. */
        return vb_tls_client_add(s, "tls-creds-x509", id, dir,
                                 verify ? "ca-cert.pem" : NULL, false,
                                 verify, NULL, errp);
    }
    if (names->len && !verify) {
        vb_set_error(errp, "tls-creds-x509 '%s': allow= needs "
                     "verify-peer=on (client certificates)", id);
        return false;
    }
    creds = nbd_tls_creds_new_x509(dir, verify, errp);
    if (!creds) {
        g_prefix_error(errp, "tls-creds-x509 '%s': ", id);
        return false;
    }
    g_ptr_array_add(names, NULL);
    nbd_tls_creds_set_allow(creds, (const char *const *)names->pdata);
    return vb_tls_add(s, id, creds, false, verify);
}

/* --object tls-creds-psk,id=ID,dir=DIR,endpoint=server[,username=U]:
 * keys are read from DIR/keys.psk, never the command line. */
bool vb_nbd_tls_psk_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL, *dir = NULL, *user = NULL;
    NbdTlsCreds *creds;
    const char *names[2] = { NULL, NULL };
    bool client;

    if (!vb_tls_common(s, a, &id, &dir, &client, errp) ||
        !qmp_args_str(a, "username", false, &user, errp) ||
        !qmp_args_check_done(a, errp)) {
        return false;
    }
    if (client) {
        /* QEMU's client default user name. */
        return vb_tls_client_add(s, "tls-creds-psk", id, dir, "keys.psk",
                                 true, false, user ? user : "qemu", errp);
    }
    creds = nbd_tls_creds_new_psk(dir, errp);
    if (!creds) {
        g_prefix_error(errp, "tls-creds-psk '%s': ", id);
        return false;
    }
    names[0] = user;
    nbd_tls_creds_set_allow(creds, names);
    return vb_tls_add(s, id, creds, true, false);
}

/* ---- authz objects ------------------------------------------------------ */

static const char *const vb_authz_policies[] = { "deny", "allow", NULL };

/*
 * The longest identity or match= an authz object takes: the longest
 * subject DN the NBD server reads from a client certificate (nbd/tls.c),
 * so a longer one could never match anything.
 */
#define VB_AUTHZ_MATCH_MAX (64 * 1024)

static bool vb_authz_match_check(const char *what, const char *name,
                                 const char *match, GError **errp)
{
    size_t len = strlen(match);

    if (len > VB_AUTHZ_MATCH_MAX) {
        vb_set_error(errp, "%s: %s of %zu bytes is too long: at most %d "
                     "(the longest subject DN a client certificate may "
                     "have)", what, name, len, VB_AUTHZ_MATCH_MAX);
        return false;
    }
    return true;
}

/* The id of a new object: not one any object has already. */
static bool vb_authz_id_free(VbState *s, const char *id, GError **errp)
{
    if (vb_nbd_object_exists(s, id) || vb_iothread_find(s, id) ||
        vb_secret_find(s, id) || vb_throttle_group_find(s, id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", id);
        return false;
    }
    return true;
}

static void vb_authz_obj_add(VbState *s, const char *id, const char *type,
                             NbdAuthz *authz)
{
    VbAuthzObj *az = g_new0(VbAuthzObj, 1);

    az->id = g_strdup(id);
    az->type = type;
    az->authz = authz;
    g_ptr_array_add(vb_nbd_get(s)->authz_objs, az);
}

/* --object authz-simple,id=ID,identity=NAME: NAME alone may connect. */
bool vb_nbd_authz_simple_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL, *identity = NULL;
    g_autofree char *what = NULL;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_str(a, "identity", true, &identity, errp) ||
        !qmp_args_check_done(a, errp) ||
        !vb_authz_id_free(s, id, errp)) {
        return false;
    }
    what = g_strdup_printf("authz-simple '%s'", id);
    if (!vb_authz_match_check(what, "identity", identity, errp)) {
        return false;
    }
    vb_authz_obj_add(s, id, "authz-simple",
                     nbd_authz_new_simple(id, identity));
    return true;
}

/* policy= and rules= of authz-list (or of an authz-list-file's file)
 * from @a into @authz; @what names the object in errors. */
static bool vb_authz_rules_parse(QmpArgs *a, const char *what,
                                 NbdAuthz *authz, GError **errp)
{
    static const char *const formats[] = { "exact", "glob", NULL };
    g_autoptr(GPtrArray) rules = NULL;
    int policy = 0;

    if (!qmp_args_enum(a, "policy", vb_authz_policies, false, &policy,
                       errp) ||
        !qmp_args_list(a, "rules", &rules, errp) ||
        !qmp_args_check_done(a, errp)) {
        g_prefix_error(errp, "%s: ", what);
        return false;
    }
    nbd_authz_set_rules(authz, policy == 1, false);
    for (guint i = 0; rules && i < rules->len; i++) {
        JsonNode *rn = g_ptr_array_index(rules, i);
        g_autofree char *prefix = g_strdup_printf("rules.%u.", i);
        g_auto(QmpArgs) r = { 0 };
        const char *match = NULL;
        int rpolicy = 0, format = 0;

        if (!JSON_NODE_HOLDS_OBJECT(rn)) {
            vb_set_error(errp, "%s: rules.%u: a rule is an object with "
                         "match, policy and format", what, i);
            return false;
        }
        qmp_args_init(&r, json_node_get_object(rn), a->keyval, prefix);
        if (!qmp_args_str(&r, "match", true, &match, errp) ||
            !qmp_args_enum(&r, "policy", vb_authz_policies, true, &rpolicy,
                           errp) ||
            !qmp_args_enum(&r, "format", formats, false, &format, errp) ||
            !qmp_args_check_done(&r, errp)) {
            g_prefix_error(errp, "%s: ", what);
            return false;
        }
        if (strlen(match) > VB_AUTHZ_MATCH_MAX) {
            g_autofree char *name = g_strdup_printf("%smatch", prefix);

            return vb_authz_match_check(what, name, match, errp);
        }
        nbd_authz_list_add_rule(authz, match, rpolicy == 1, format == 1);
    }
    return true;
}

/* --object authz-list,id=ID[,policy=deny|allow][,rules.N.match=PATTERN,
 * rules.N.policy=allow|deny[,rules.N.format=exact|glob]]... (QMP: rules
 * is a list of {match, policy, format}). */
bool vb_nbd_authz_list_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL;
    g_autofree char *what = NULL;
    NbdAuthz *authz;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !vb_authz_id_free(s, id, errp)) {
        return false;
    }
    what = g_strdup_printf("authz-list '%s'", id);
    authz = nbd_authz_new_list(id, false);
    if (!vb_authz_rules_parse(a, what, authz, errp)) {
        nbd_authz_free(authz);
        return false;
    }
    vb_authz_obj_add(s, id, "authz-list", authz);
    return true;
}

/* The most an authz-list-file may hold. */
#define VB_AUTHZ_FILE_MAX (1024 * 1024)

/* (Re)load @az's file into its rules; *@st gets what was read. */
static bool vb_authz_file_load(VbAuthzObj *az, struct stat *st,
                               GError **errp)
{
    g_autofree char *what = g_strdup_printf("authz-list-file '%s': %s",
                                            az->id, az->filename);
    g_autofree char *text = NULL;
    g_autoptr(JsonParser) parser = NULL;
    g_auto(QmpArgs) a = { 0 };
    GError *err = NULL;
    JsonNode *root;
    gsize len = 0;

    if (stat(az->filename, st) < 0) {
        vb_set_error(errp, "%s: %s", what, g_strerror(errno));
        return false;
    }
    if (!S_ISREG(st->st_mode) || st->st_size > VB_AUTHZ_FILE_MAX) {
        vb_set_error(errp, "%s: not a regular file of at most %d KiB",
                     what, VB_AUTHZ_FILE_MAX / 1024);
        return false;
    }
    if (!g_file_get_contents(az->filename, &text, &len, &err)) {
        vb_set_error(errp, "%s: %s", what, err->message);
        g_error_free(err);
        return false;
    }
    parser = json_parser_new_immutable();
    if (len > VB_AUTHZ_FILE_MAX ||
        !json_parser_load_from_data(parser, text, len, &err) ||
        !(root = json_parser_get_root(parser)) ||
        !JSON_NODE_HOLDS_OBJECT(root)) {
        vb_set_error(errp, "%s: not a JSON object {\"policy\": ..., "
                     "\"rules\": [...]}%s%s", what, err ? ": " : "",
                     err ? err->message : "");
        g_clear_error(&err);
        return false;
    }
    qmp_args_init(&a, json_node_get_object(root), false, NULL);
    return vb_authz_rules_parse(&a, what, az->authz, errp);
}

/* refresh=on: before each check, re-read the file if it is not the one
 * read last (another inode, size, or modification time).  A file that
 * fails to load refuses every client until it is fixed, as QEMU's. */
static void vb_authz_file_refresh(void *opaque)
{
    VbAuthzObj *az = opaque;
    struct stat st = { 0 };
    GError *err = NULL;
    int r = stat(az->filename, &st);

    if (r < 0 && az->missing) {
        return;                 /* still gone: said already */
    }
    if (r == 0 && !az->missing && st.st_dev == az->st.st_dev &&
        st.st_ino == az->st.st_ino && st.st_size == az->st.st_size &&
        st.st_mtim.tv_sec == az->st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == az->st.st_mtim.tv_nsec &&
        st.st_ctim.tv_sec == az->st.st_ctim.tv_sec &&
        st.st_ctim.tv_nsec == az->st.st_ctim.tv_nsec) {
        return;
    }
    az->missing = r < 0;
    if (!vb_authz_file_load(az, &st, &err)) {
        /* Said once: tried again when the file changes. */
        error_report("%s; refusing every NBD client until it loads",
                     err->message);
        g_error_free(err);
        nbd_authz_set_rules(az->authz, false, true);
    } else {
        info_report("authz-list-file '%s': %s reloaded", az->id,
                    az->filename);
    }
    az->st = st;
}

/* --object authz-list-file,id=ID,filename=PATH[,refresh=on|off]: the
 * policy and rules of authz-list from a JSON file; refresh=on (the
 * default) re-reads it when it changed. */
bool vb_nbd_authz_list_file_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL, *filename = NULL;
    bool refresh = true;
    VbAuthzObj *az;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_str(a, "filename", true, &filename, errp) ||
        !qmp_args_bool(a, "refresh", &refresh, errp) ||
        !qmp_args_check_done(a, errp) ||
        !vb_authz_id_free(s, id, errp)) {
        return false;
    }
    az = g_new0(VbAuthzObj, 1);
    az->id = g_strdup(id);
    az->type = "authz-list-file";
    az->filename = g_strdup(filename);
    az->refresh = refresh;
    az->authz = nbd_authz_new_list(id, false);
    if (!vb_authz_file_load(az, &az->st, errp)) {
        vb_authz_obj_free(az);
        return false;
    }
    if (refresh) {
        nbd_authz_set_refresh(az->authz, vb_authz_file_refresh, az);
    }
    g_ptr_array_add(vb_nbd_get(s)->authz_objs, az);
    return true;
}

/* ---- authz objects: qom-list, qom-get, qom-set ------------------------- */

/*
 * QEMU 7.2's properties: authz-simple identity (read-write), authz-list
 * policy and rules (read-write), authz-list-file filename and refresh
 * (read here: changing them would not re-read the file).  The NBD server
 * holds the NbdAuthz itself and checks each new connection against it,
 * so a qom-set applies from the next connection on.
 */
static const struct {
    const char *type;
    const char *name;
    const char *qom_type;       /* as QEMU's qom-list says it */
    bool settable;
} vb_authz_props[] = {
    { "authz-simple", "identity", "string", true },
    { "authz-list", "policy", "QAuthZListPolicy", true },
    { "authz-list", "rules", "QAuthZListRule", true },
    { "authz-list-file", "filename", "string", false },
    { "authz-list-file", "refresh", "bool", false },
};

/* A qom-get reply must fit the monitor's output queue (QMP_MAX_OUTPUT);
 * a bound on the rules' JSON, escapes included. */
#define VB_AUTHZ_REPLY_MAX (512 * 1024)

static VbAuthzObj *vb_authz_lookup(VbState *s, const char *id,
                                   const char *prop, bool set,
                                   GError **errp)
{
    VbAuthzObj *az = vb_authz_find(vb_nbd_get(s), id);
    g_autoptr(GString) names = g_string_new("");

    g_assert(az);
    if (set && !strcmp(prop, "type")) {
        vb_set_error(errp, "Property '%s.type' is read-only", az->type);
        return NULL;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(vb_authz_props); i++) {
        if (strcmp(vb_authz_props[i].type, az->type)) {
            continue;
        }
        if (!strcmp(vb_authz_props[i].name, prop)) {
            if (set && !vb_authz_props[i].settable) {
                vb_set_error(errp, "Property '%s.%s' cannot be changed: "
                             "object-del '%s' and object-add it again with "
                             "the new value", az->type, prop, id);
                return NULL;
            }
            return az;
        }
        g_string_append_printf(names, "%s%s", names->len ? ", " : "",
                               vb_authz_props[i].name);
    }
    vb_set_error(errp, "Property '%s.%s' not found (it has %s%s)", az->type,
                 prop, set ? "" : "type, ", names->str);
    return NULL;
}

void vb_nbd_authz_props_foreach(VbState *s, const char *id,
                                void (*fn)(void *opaque, const char *name,
                                           const char *type),
                                void *opaque)
{
    VbAuthzObj *az = id ? vb_authz_find(vb_nbd_get(s), id) : NULL;

    for (size_t i = 0; az && i < G_N_ELEMENTS(vb_authz_props); i++) {
        if (!strcmp(vb_authz_props[i].type, az->type)) {
            fn(opaque, vb_authz_props[i].name, vb_authz_props[i].qom_type);
        }
    }
}

bool vb_nbd_is_authz(VbState *s, const char *id)
{
    return vb_authz_find(vb_nbd_get(s), id) != NULL;
}

static JsonNode *vb_authz_rules_get(VbAuthzObj *az, GError **errp)
{
    unsigned int n = nbd_authz_num_rules(az->authz);
    size_t size = 2;
    JsonArray *arr;

    for (unsigned int i = 0; i < n; i++) {
        bool allow, glob;
        const char *m = nbd_authz_get_rule(az->authz, i, &allow, &glob);

        /* Each byte at worst a \uXXXX escape, and the keys around. */
        size += strlen(m) * 6 + 64;
    }
    if (size > VB_AUTHZ_REPLY_MAX) {
        vb_set_error(errp, "%s '%s': its %u rules are too large to send in "
                     "one reply; keep them in a file (authz-list-file)",
                     az->type, az->id, n);
        return NULL;
    }
    arr = json_array_new();
    for (unsigned int i = 0; i < n; i++) {
        JsonObject *o = json_object_new();
        bool allow, glob;
        const char *m = nbd_authz_get_rule(az->authz, i, &allow, &glob);

        json_object_set_string_member(o, "match", m);
        json_object_set_string_member(o, "policy",
                                      vb_authz_policies[allow]);
        json_object_set_string_member(o, "format", glob ? "glob" : "exact");
        json_array_add_object_element(arr, o);
    }
    return vb_node_take_array(arr);
}

JsonNode *vb_nbd_authz_get(VbState *s, const char *id, const char *prop,
                           GError **errp)
{
    VbAuthzObj *az = vb_authz_lookup(s, id, prop, false, errp);
    JsonNode *v;

    if (!az) {
        return NULL;
    }
    if (!strcmp(prop, "rules")) {
        return vb_authz_rules_get(az, errp);
    }
    v = json_node_alloc();
    if (!strcmp(prop, "identity")) {
        bool allow, glob;

        /* An authz-simple is its one rule (nbd_authz_new_simple()). */
        json_node_init_string(v, nbd_authz_get_rule(az->authz, 0, &allow,
                                                    &glob));
    } else if (!strcmp(prop, "policy")) {
        json_node_init_string(v, vb_authz_policies[
                              nbd_authz_get_default_allow(az->authz)]);
    } else if (!strcmp(prop, "filename")) {
        json_node_init_string(v, az->filename);
    } else {
        json_node_init_boolean(v, az->refresh);
    }
    return v;
}

bool vb_nbd_authz_set(VbState *s, const char *id, const char *prop,
                      QmpArgs *a, GError **errp)
{
    VbAuthzObj *az = vb_authz_lookup(s, id, prop, true, errp);
    g_autofree char *what = NULL;

    if (!az) {
        return false;
    }
    what = g_strdup_printf("%s '%s'", az->type, id);
    if (!strcmp(prop, "identity")) {
        const char *identity = NULL;

        if (!qmp_args_str(a, "value", true, &identity, errp) ||
            !qmp_args_check_done(a, errp) ||
            !vb_authz_match_check(what, "identity", identity, errp)) {
            return false;
        }
        nbd_authz_set_rules(az->authz, false, false);
        nbd_authz_list_add_rule(az->authz, identity, true, false);
    } else if (!strcmp(prop, "policy")) {
        int policy = 0;

        if (!qmp_args_enum(a, "value", vb_authz_policies, true, &policy,
                           errp) ||
            !qmp_args_check_done(a, errp)) {
            return false;
        }
        nbd_authz_set_default_allow(az->authz, policy == 1);
    } else {
        /* Parsed aside, so that a bad rule leaves the old ones. */
        g_autoptr(JsonObject) wrap = json_object_new();
        g_autoptr(GPtrArray) list = NULL;
        g_auto(QmpArgs) w = { 0 };
        NbdAuthz *tmp;

        if (!qmp_args_has(a, "value")) {
            vb_set_error(errp, "Parameter 'value' is missing");
            return false;
        }
        json_object_set_member(wrap, "rules", json_node_copy(
                               json_object_get_member(a->obj, "value")));
        if (!qmp_args_list(a, "value", &list, errp) ||
            !qmp_args_check_done(a, errp)) {
            return false;
        }
        qmp_args_init(&w, wrap, false, NULL);
        tmp = nbd_authz_new_list(id, false);
        if (!vb_authz_rules_parse(&w, what, tmp, errp)) {
            nbd_authz_free(tmp);
            return false;
        }
        nbd_authz_set_default_allow(tmp,
                                    nbd_authz_get_default_allow(az->authz));
        nbd_authz_take_rules(az->authz, tmp);
        nbd_authz_free(tmp);
    }
    info_report("%s: %s changed by qom-set; the NBD server checks its next "
                "connections against it", what, prop);
    return true;
}

/* ---- the server ---------------------------------------------------------- */

static bool vb_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

static int vb_nbd_listen_inet(const char *host, const char *port,
                              bool tls, bool insecure, GError **errp)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_PASSIVE,
    };
    struct addrinfo *res = NULL;
    int fd = -1, r, one = 1;
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    char hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];

    r = getaddrinfo(host && *host ? host : NULL, port, &hints, &res);
    if (r) {
        vb_set_error(errp, "address resolution failed for %s:%s: %s",
                     host ? host : "", port, gai_strerror(r));
        return -1;
    }
    if (!tls && !vb_addr_is_loopback(res->ai_addr) && !insecure) {
        vb_set_error(errp, "NBD server on %s:%s without TLS: anyone who can "
                     "reach that address could read%s the exported disks; "
                     "give tls-creds=ID (an --object tls-creds-x509 or "
                     "tls-creds-psk), listen on a loopback address or a "
                     "unix socket, or add allow-insecure=on", host ? host :
                     "*", port, "" );
        freeaddrinfo(res);
        return -1;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        vb_set_error(errp, "Failed to bind socket to %s:%s: %s",
                     host ? host : "", port, g_strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        freeaddrinfo(res);
        return -1;
    }
    if (!tls && !vb_addr_is_loopback(res->ai_addr)) {
        warn_report("NBD server listens on %s:%s without TLS "
                    "(allow-insecure=on): anyone who reaches it can use "
                    "the exports", host ? host : "*", port);
    }
    freeaddrinfo(res);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
        getnameinfo((struct sockaddr *)&sa, len, hbuf, sizeof(hbuf), pbuf,
                    sizeof(pbuf), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        info_report("NBD server listening on %s port %s", hbuf, pbuf);
    }
    return fd;
}

static int vb_nbd_listen_unix(const char *path, GError **errp)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    int fd;

    if (strlen(path) >= sizeof(sun.sun_path)) {
        vb_set_error(errp, "UNIX socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sun.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
        listen(fd, 64) < 0) {
        vb_set_error(errp, "Failed to bind socket to %s: %s", path,
                     g_strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    info_report("NBD server listening on unix socket %s", path);
    return fd;
}

bool vb_nbd_server_start(VbState *s, JsonObject *args, bool keyval,
                         GError **errp)
{
    static const char *const addr_types[] = { "inet", "unix", NULL };
    VbNbd *n = vb_nbd_get(s);
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) addr = { 0 };
    const char *creds_id = NULL, *authz = NULL, *host = NULL;
    const char *port = NULL, *path = NULL;
    bool insecure = false;
    int64_t maxc = 0, hs_max = 10;
    int atype, fd;
    VbTlsObj *tls = NULL;
    VbAuthzObj *az = NULL;
    NbdServerOptions o = { .main_ctx = s->main_ctx };

    qmp_args_init(&a, args, keyval, NULL);
    if (!qmp_args_object(&a, "addr", true, &addr, NULL, errp) ||
        !qmp_args_enum(&addr, "type", addr_types, true, &atype, errp) ||
        !qmp_args_str(&a, "tls-creds", false, &creds_id, errp) ||
        !qmp_args_str(&a, "tls-authz", false, &authz, errp) ||
        !qmp_args_int(&a, "max-connections", false, &maxc, NULL, errp) ||
        !qmp_args_int(&a, "handshake-max-seconds", false, &hs_max, NULL,
                      errp) ||
        !qmp_args_bool(&a, "allow-insecure", &insecure, errp)) {
        return false;
    }
    if (atype == 0) {
        bool b;

        if (!qmp_args_str(&addr, "host", true, &host, errp) ||
            !qmp_args_str(&addr, "port", true, &port, errp) ||
            !qmp_args_bool(&addr, "ipv4", &b, errp) ||
            !qmp_args_bool(&addr, "ipv6", &b, errp) ||
            !qmp_args_bool(&addr, "numeric", &b, errp)) {
            return false;
        }
    } else if (!qmp_args_str(&addr, "path", true, &path, errp)) {
        return false;
    }
    if (!qmp_args_check_done(&addr, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return false;
    }
    if (n->srv) {
        vb_set_error(errp, "NBD server already running");
        return false;
    }
    if (maxc < 0 || maxc > UINT32_MAX) {
        vb_set_error(errp, "max-connections must be between 0 (no limit) "
                     "and %u", UINT32_MAX);
        return false;
    }
    if (hs_max < 0 || hs_max > 86400) {
        vb_set_error(errp, "handshake-max-seconds must be between 0 (no "
                     "limit) and 86400");
        return false;
    }
    if (creds_id) {
        tls = vb_tls_find(n, creds_id);
        if (!tls) {
            vb_set_error(errp, "No TLS credentials with id '%s'", creds_id);
            return false;
        }
        if (tls->client) {
            vb_set_error(errp, "tls-creds '%s' has endpoint=client: the NBD "
                         "server needs an object with endpoint=server",
                         creds_id);
            return false;
        }
    }
    if (authz) {
        az = vb_authz_find(n, authz);
        if (!tls) {
            vb_set_error(errp, "tls-authz '%s' needs tls-creds=ID: only a "
                         "TLS client has an identity to check", authz);
            return false;
        }
        if (!az) {
            vb_set_error(errp, "No authorization object with id '%s' "
                         "(create it with --object authz-simple or "
                         "authz-list)", authz);
            return false;
        }
        if (!tls->psk && !tls->verify_peer) {
            vb_set_error(errp, "tls-authz '%s' needs client certificates: "
                         "create tls-creds-x509 '%s' with verify-peer=on",
                         authz, creds_id);
            return false;
        }
    }
    fd = atype == 0 ? vb_nbd_listen_inet(host, port, tls, insecure, errp) :
                      vb_nbd_listen_unix(path, errp);
    if (fd < 0) {
        return false;
    }
    if (atype == 0) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        char hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];

        if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
            getnameinfo((struct sockaddr *)&sa, len, hbuf, sizeof(hbuf),
                        pbuf, sizeof(pbuf),
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
            n->bound_host = g_strdup(hbuf);
            n->bound_port = g_strdup(pbuf);
        }
    } else {
        n->bound_path = g_strdup(path);
    }
    o.listen_fd = fd;
    o.unix_path = path;
    o.max_connections = maxc;
    o.handshake_max_seconds = hs_max;
    o.tls = tls ? tls->creds : NULL;
    o.tls_authz = az ? az->authz : NULL;
    n->srv = nbd_server_new(&o, errp);
    if (!n->srv) {
        close(fd);
        g_clear_pointer(&n->bound_host, g_free);
        g_clear_pointer(&n->bound_port, g_free);
        g_clear_pointer(&n->bound_path, g_free);
        return false;
    }
    n->tls = tls;
    if (tls) {
        tls->users++;
    }
    n->authz = az;
    if (az) {
        az->users++;
    }
    return true;
}

/* ---- exports ------------------------------------------------------------- */

static VbNbdExport *vb_nbd_find(VbNbd *n, const char *id)
{
    for (guint i = 0; id && i < n->exports->len; i++) {
        VbNbdExport *x = g_ptr_array_index(n->exports, i);

        if (!strcmp(x->id, id)) {
            return x;
        }
    }
    return NULL;
}

bool vb_nbd_has_export(VbState *s, const char *id)
{
    return vb_nbd_find(vb_nbd_get(s), id) != NULL;
}

bool vb_nbd_uses_ctx(VbState *s, AioContext *ctx)
{
    VbNbd *n = vb_nbd_get(s);

    for (guint i = 0; i < n->exports->len; i++) {
        VbNbdExport *x = g_ptr_array_index(n->exports, i);

        for (unsigned int j = 0; j < x->n_ctx; j++) {
            if (x->ctx[j] == ctx) {
                return true;
            }
        }
    }
    return false;
}

bool vb_nbd_export_add(VbState *s, QmpArgs *a, bool keyval, GError **errp)
{
    static const char *const mc_values[] = { "auto", "on", "off", NULL };
    VbNbd *n = vb_nbd_get(s);
    const char *id = NULL, *node_name = NULL, *iothread = NULL;
    const char *name = NULL, *desc = NULL;
    bool writable = false, writethrough = false, fixed = false;
    bool depth = false;
    int mc = 0;
    VbNode *node;
    VbNbdExport *x;
    NbdExportOptions o = { 0 };
    g_autofree AioContext **ctx = NULL;
    unsigned int nctx;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_str(a, "node-name", true, &node_name, errp) ||
        !qmp_args_bool(a, "writable", &writable, errp) ||
        !qmp_args_bool(a, "writethrough", &writethrough, errp) ||
        !qmp_args_str(a, "iothread", false, &iothread, errp) ||
        !qmp_args_bool(a, "fixed-iothread", &fixed, errp) ||
        !qmp_args_str(a, "name", false, &name, errp) ||
        !qmp_args_str(a, "description", false, &desc, errp) ||
        !qmp_args_bool(a, "allocation-depth", &depth, errp) ||
        !qmp_args_enum(a, "multi-conn", mc_values, false, &mc, errp)) {
        return false;
    }
    if (qmp_args_has(a, "bitmaps")) {
        vb_set_error(errp, "bitmaps are not supported: vhost-blkd has no "
                     "dirty bitmaps");
        return false;
    }
    if (!qmp_args_check_done(a, errp)) {
        return false;
    }
    if (!n->srv) {
        vb_set_error(errp, "NBD server not running");
        return false;
    }
    if (depth) {
        vb_set_error(errp, "allocation-depth is not supported: only "
                     "base:allocation is offered");
        return false;
    }
    if (vb_export_id_in_use(s, id)) {
        vb_set_error(errp, "Block export id '%s' is already in use", id);
        return false;
    }
    node = vb_node_find(s, node_name);
    if (!node) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     node_name, node_name);
        return false;
    }
    if (node->user) {
        vb_set_error(errp, "node '%s' is exported already (by '%s'); "
                     "vhost-blkd serves a node through one export",
                     node->name, node->user->id);
        return false;
    }
    if (writable && (node->readonly || blk_is_read_only(node->blk))) {
        vb_set_error(errp, "Block node is read-only");
        return false;
    }
    if (!name) {
        name = node_name;
    }
    if (nbd_export_find(n->srv, name)) {
        vb_set_error(errp, "NBD server already has export named '%s'",
                     name);
        return false;
    }
    if (iothread) {
        VbIOThreadObj *t = vb_iothread_find(s, iothread);

        if (!t) {
            vb_set_error(errp, "iothread \"%s\" not found", iothread);
            return false;
        }
        nctx = 1;
        ctx = g_new(AioContext *, 1);
        ctx[0] = iothread_get_aio_context(t->iothread);
    } else {
        /* Connections spread over the pool */
        nctx = s->n_pool;
        ctx = g_new(AioContext *, nctx);
        for (unsigned int i = 0; i < nctx; i++) {
            ctx[i] = iothread_get_aio_context(s->pool[i]);
        }
    }
    o.name = name;
    o.description = desc;
    o.blk = node->blk;
    o.writable = writable;
    o.multi_conn = mc == 1;
    o.discard = node->discard;
    o.ctx = ctx;
    o.n_ctx = nctx;
    x = g_new0(VbNbdExport, 1);
    x->exp = nbd_export_new(n->srv, &o, errp);
    if (!x->exp) {
        g_free(x);
        return false;
    }
    x->id = g_strdup(id);
    x->node = node;
    x->writable = writable;
    x->ctx = g_steal_pointer(&ctx);
    x->n_ctx = nctx;
    node->nbd_exports++;
    g_ptr_array_add(n->exports, x);
    return true;
}

static void vb_nbd_export_free(VbNbdExport *x)
{
    VbNbd *n = &vb_nbd;
    VbState *s = n->state;
    g_autoptr(JsonObject) data = json_object_new();

    g_ptr_array_remove(n->exports, x);
    x->node->nbd_exports--;
    json_object_set_string_member(data, "id", x->id);
    if (s->qmp) {
        qmp_server_emit_event(s->qmp, "BLOCK_EXPORT_DELETED", data);
    }
    g_free(x->id);
    g_free(x->ctx);
    g_free(x);
}

/* The last connection of a deleted export is gone (main thread). */
static void vb_nbd_export_done(void *opaque)
{
    VbNbdExport *x = opaque;

    x->exp = NULL;
    vb_nbd_export_free(x);
}

bool vb_nbd_export_del(VbState *s, const char *id, bool hard,
                       GError **errp, bool *found)
{
    VbNbd *n = vb_nbd_get(s);
    VbNbdExport *x = vb_nbd_find(n, id);

    *found = x != NULL;
    if (!x) {
        return false;
    }
    if (x->deleting) {
        vb_set_error(errp, "Export '%s' is already shutting down", id);
        return false;
    }
    if (!hard && nbd_export_num_clients(x->exp)) {
        vb_set_error(errp, "export '%s' still in use (use mode='hard' to "
                     "disconnect its clients)", id);
        return false;
    }
    x->deleting = true;
    nbd_export_remove(x->exp, vb_nbd_export_done, x);
    return true;
}

const VbExportType vb_export_type_nbd = {
    .name = "nbd",
    .add = vb_nbd_export_add,
    .del = vb_nbd_export_del,
    .query = vb_nbd_query_exports,
    .has = vb_nbd_has_export,
};

void vb_nbd_query_exports(VbState *s, JsonArray *arr)
{
    VbNbd *n = vb_nbd_get(s);

    for (guint i = 0; i < n->exports->len; i++) {
        VbNbdExport *x = g_ptr_array_index(n->exports, i);

        vb_export_info_add(arr, "nbd", x->id, x->node->name, x->deleting,
                           x->writable);
    }
}

unsigned int vb_nbd_num_exports(VbState *s)
{
    return vb_nbd_get(s)->exports->len;
}

void vb_nbd_export_stats(VbState *s, unsigned int i, const char **id,
                         VbNode **node, NbdExportStats *st)
{
    VbNbdExport *x = g_ptr_array_index(vb_nbd_get(s)->exports, i);

    *id = x->id;
    *node = x->node;
    /* Deleted ones are off the list once their exp is gone. */
    nbd_export_get_stats(x->exp, st);
}

/* A stopped server is gone: its connections' requests completed. */
static void vb_nbd_server_closed(void *opaque)
{
    VbNbdHeld *held = opaque;

    /* Its TLS sessions are freed: the credentials and the authz object
     * may go now. */
    if (held->tls) {
        held->tls->users--;
    }
    if (held->authz) {
        held->authz->users--;
    }
    g_free(held);
    vb_nbd.closing--;
}

/*
 * Stop the server without waiting: the socket goes and every export is
 * deleted at once; their connections are closed, and each export (and
 * then the server) is freed, BLOCK_EXPORT_DELETED sent, once the
 * requests it has in flight completed.  Until then the exports are
 * listed as shutting down and their nodes stay in use; a new server may
 * start meanwhile.
 */
static void vb_nbd_server_stop(VbNbd *n)
{
    VbNbdHeld *held = g_new0(VbNbdHeld, 1);

    for (guint i = 0; i < n->exports->len;) {
        VbNbdExport *x = g_ptr_array_index(n->exports, i);

        if (x->deleting || x->exp == NULL) {
            i++;
            continue;
        }
        x->deleting = true;
        /* True: freed already (x too), so the same index again */
        if (!nbd_export_remove(x->exp, vb_nbd_export_done, x)) {
            i++;
        }
    }
    held->tls = n->tls;
    held->authz = n->authz;
    n->closing++;
    nbd_server_close(n->srv, vb_nbd_server_closed, held);
    n->srv = NULL;
    n->tls = NULL;
    n->authz = NULL;
    g_clear_pointer(&n->bound_host, g_free);
    g_clear_pointer(&n->bound_port, g_free);
    g_clear_pointer(&n->bound_path, g_free);
}

void vb_nbd_cleanup(VbState *s)
{
    VbNbd *n = vb_nbd_get(s);

    if (n->srv) {
        vb_nbd_server_stop(n);
    }
    /* Shutdown: the nodes close after this, so their requests must be
     * done; the bottom halves that finish the servers run here. */
    while (n->closing) {
        aio_poll(s->main_ctx, true);
    }
    for (guint i = 0; i < n->tls_objs->len; i++) {
        VbTlsObj *t = g_ptr_array_index(n->tls_objs, i);

        if (t->creds) {
            nbd_tls_creds_free(t->creds);
        }
        g_free(t->dir);
        g_free(t->username);
        g_free(t->id);
        g_free(t);
    }
    g_ptr_array_set_size(n->tls_objs, 0);
    while (n->authz_objs->len) {
        vb_authz_obj_free(g_ptr_array_steal_index(n->authz_objs, 0));
    }
}

/* ---- QMP ----------------------------------------------------------------- */

static JsonNode *vb_qmp_nbd_server_start(void *opaque, JsonObject *args,
                                         GError **errp)
{
    return vb_nbd_server_start(opaque, args, false, errp) ? vb_empty() :
           NULL;
}

static JsonNode *vb_qmp_nbd_server_stop(void *opaque, JsonObject *args,
                                        GError **errp)
{
    VbNbd *n = vb_nbd_get(opaque);
    g_auto(QmpArgs) a = { 0 };

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (!n->srv) {
        vb_set_error(errp, "NBD server not running");
        return NULL;
    }
    vb_nbd_server_stop(n);
    return vb_empty();
}

/* The legacy nbd-server-add device=,name=,writable=,description=: an
 * export whose id is its name, as QEMU's. */
static JsonNode *vb_qmp_nbd_server_add(void *opaque, JsonObject *args,
                                       GError **errp)
{
    g_autoptr(JsonObject) o = json_object_new();
    g_auto(QmpArgs) a = { 0 };
    const char *dev = NULL, *name = NULL, *desc = NULL;
    bool writable = false;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "device", true, &dev, errp) ||
        !qmp_args_str(&a, "name", false, &name, errp) ||
        !qmp_args_str(&a, "description", false, &desc, errp) ||
        !qmp_args_bool(&a, "writable", &writable, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    json_object_set_string_member(o, "id", name ? name : dev);
    json_object_set_string_member(o, "node-name", dev);
    json_object_set_string_member(o, "name", name ? name : dev);
    if (desc) {
        json_object_set_string_member(o, "description", desc);
    }
    json_object_set_boolean_member(o, "writable", writable);
    {
        g_auto(QmpArgs) b = { 0 };

        qmp_args_init(&b, o, false, NULL);
        if (!vb_nbd_export_add(opaque, &b, false, errp)) {
            return NULL;
        }
    }
    return vb_empty();
}

static JsonNode *vb_qmp_nbd_server_remove(void *opaque, JsonObject *args,
                                          GError **errp)
{
    static const char *const modes[] = { "safe", "hard", NULL };
    g_auto(QmpArgs) a = { 0 };
    const char *name = NULL;
    int mode = 0;
    bool found;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "name", true, &name, errp) ||
        !qmp_args_enum(&a, "mode", modes, false, &mode, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (!vb_nbd_export_del(opaque, name, mode == 1, errp, &found)) {
        if (!found) {
            vb_set_error(errp, "Export '%s' is not found", name);
        }
        return NULL;
    }
    return vb_empty();
}

/*
 * Whether the NBD server runs and its address as bound: with port "0"
 * in nbd-server-start the kernel picks a free port, read back here
 * (QEMU has no such query; scripts use it to avoid racing for a port).
 */
static JsonNode *vb_qmp_x_query_nbd_server(void *opaque, JsonObject *args,
                                           GError **errp)
{
    VbNbd *n = vb_nbd_get(opaque);
    g_auto(QmpArgs) a = { 0 };
    JsonObject *o, *addr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    o = json_object_new();
    json_object_set_boolean_member(o, "running", n->srv != NULL);
    if (n->srv && (n->bound_port || n->bound_path)) {
        addr = json_object_new();
        if (n->bound_path) {
            json_object_set_string_member(addr, "type", "unix");
            json_object_set_string_member(addr, "path", n->bound_path);
        } else {
            json_object_set_string_member(addr, "type", "inet");
            json_object_set_string_member(addr, "host", n->bound_host);
            json_object_set_string_member(addr, "port", n->bound_port);
        }
        json_object_set_object_member(o, "addr", addr);
    }
    return vb_node_take_object(o);
}

static const QmpCommand vb_nbd_commands[] = {
    { "nbd-server-start", vb_qmp_nbd_server_start },
    { "nbd-server-stop", vb_qmp_nbd_server_stop },
    { "nbd-server-add", vb_qmp_nbd_server_add },
    { "nbd-server-remove", vb_qmp_nbd_server_remove },
    { "x-query-nbd-server", vb_qmp_x_query_nbd_server },
};

void vb_nbd_register(GArray *table)
{
    g_array_append_vals(table, vb_nbd_commands,
                        G_N_ELEMENTS(vb_nbd_commands));
}
