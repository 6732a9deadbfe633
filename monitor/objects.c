/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The user-created objects: --object and object-add of iothread, secret
 * and throttle-group objects, and the QOM commands of
 * qemu-storage-daemon 7.2 over them (object-del, qom-list, qom-get,
 * qom-set).
 *
 * Theory of operation.  vhost-blkd has no QOM tree; the objects live in
 * three arrays of VbState.  The paths QEMU's tools use are mapped onto
 * them: "/" holds the container "objects", "/objects" holds every
 * object as child<TYPE>, and "/objects/ID" (or the bare ID, as QEMU's
 * partial paths allow for a unique name) is the object itself.
 *
 * object-del follows QEMU's user_creatable_del(): an unknown id is
 * "object 'ID' not found", an object something still uses is "object
 * 'ID' is in use, can not be deleted", and the id is free again at once
 * after a successful delete.  "In use" is, per type:
 *  - throttle-group: any reference besides the object's own -- a
 *    driver=throttle node or a --export ...,throttle-group=ID node holds
 *    one (block/throttle.c) until blockdev-del closes it;
 *  - iothread: an export (also one still draining after
 *    block-export-del) with a queue in its AioContext;
 *  - tls-creds-x509/psk and authz-simple/list (nbd/nbd-monitor.c):
 *    while the NBD server runs with them (tls-creds=ID, tls-authz=ID),
 *    until nbd-server-stop;
 *  - secret: never.  A node opens with a copy of the key (librados keeps
 *    its own), so deleting the secret only stops later blockdev-adds from
 *    naming it.  Its bytes are zeroed before they are freed.
 *
 * Throttle groups take QEMU's limits.* and legacy x-* properties; qom-set
 * and qom-get of "limits" and of the x-* properties have QEMU's
 * semantics: a qom-set of limits changes the members it gives, keeps the
 * others, and takes effect at once in every iothread that uses the group.
 * The authz objects' properties (identity, policy, rules, filename,
 * refresh) are nbd/nbd-monitor.c's: qom-list, qom-get and qom-set hand
 * a path naming one of them over to it.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/error-report.h"
#include "qemu/sandbox.h"
#include "qemu/throttle.h"

#include <sys/mman.h>
#include <sys/stat.h>

/* ---- throttle groups --------------------------------------------------- */

/* Every key of QEMU's ThrottleLimits, in its order. */
static GPtrArray *vb_tg_keys(void)
{
    GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);

    for (int k = 0; k < THROTTLE__MAX; k++) {
        const char *n = throttle_kind_name(k);

        g_ptr_array_add(keys, g_strdup(n));
        g_ptr_array_add(keys, g_strdup_printf("%s-max", n));
        g_ptr_array_add(keys, g_strdup_printf("%s-max-length", n));
    }
    g_ptr_array_add(keys, g_strdup("iops-size"));
    return keys;
}

static bool vb_throttle_limits_parse(QmpArgs *a, const char *prefix,
                                     ThrottleLimits *t, bool *any,
                                     GError **errp)
{
    g_autoptr(GPtrArray) keys = vb_tg_keys();

    for (guint i = 0; i < keys->len; i++) {
        const char *key = g_ptr_array_index(keys, i);
        g_autofree char *name = g_strconcat(prefix, key, NULL);
        int64_t v = 0;
        bool present = false, known;
        GError *err = NULL;

        if (!qmp_args_int(a, name, false, &v, &present, errp)) {
            return false;
        }
        if (!present) {
            continue;
        }
        *any = true;
        if (!throttle_limits_set_key(t, key, v, &known, &err)) {
            vb_set_error(errp, "%s%s", a->prefix, err->message);
            g_error_free(err);
            return false;
        }
    }
    return true;
}

ThrottleGroup *vb_throttle_group_find(VbState *s, const char *id)
{
    for (guint i = 0; id && s->throttle_groups && i <
         s->throttle_groups->len; i++) {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        if (!strcmp(throttle_group_name(tg), id)) {
            return tg;
        }
    }
    return NULL;
}

/* --object throttle-group,id=ID,limits.KEY=N,... or x-KEY=N,... */
static bool vb_throttle_group_add(VbState *s, QmpArgs *a, GError **errp)
{
    g_auto(QmpArgs) lim = { 0 };
    ThrottleLimits t = { 0 };
    const char *id = NULL;
    bool has_limits = false, any_x = false, any = false;
    GError *err = NULL;
    ThrottleGroup *tg;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_object(a, "limits", false, &lim, &has_limits, errp) ||
        !vb_throttle_limits_parse(&lim, "", &t, &any, errp) ||
        !qmp_args_check_done(&lim, errp) ||
        !vb_throttle_limits_parse(a, "x-", &t, &any_x, errp) ||
        !qmp_args_check_done(a, errp)) {
        return false;
    }
    if (has_limits && any_x) {
        vb_set_error(errp, "throttle-group '%s': give the limits either as "
                     "limits.* or as the x-* properties, not both", id);
        return false;
    }
    if (vb_throttle_group_find(s, id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", id);
        return false;
    }
    tg = throttle_group_new(id, &t, &err);
    if (!tg) {
        vb_set_error(errp, "throttle-group '%s': %s", id, err->message);
        g_error_free(err);
        return false;
    }
    g_ptr_array_add(s->throttle_groups, tg);
    return true;
}

/* The group @path names: an object ("tg0" or "/objects/tg0"), or, as a
 * vhost-blkd extension, an export whose node is throttled (its own
 * limits from --export iops-total=...). */
static ThrottleGroup *vb_tg_resolve(VbState *s, const char *path,
                                    GError **errp)
{
    const char *id = g_str_has_prefix(path, "/objects/") ? path + 9 : path;
    ThrottleGroup *tg = vb_throttle_group_find(s, id);
    VbExport *e;

    if (tg) {
        return tg;
    }
    e = vb_export_find(s, id);
    if (e) {
        tg = blk_throttle_group(vu_blk_export_get_blk(vb_export_get_vu(e)));
        if (tg) {
            return tg;
        }
        vb_set_error(errp, "export '%s' is not throttled: start it with "
                     "iops-total=... (or throttle-group=NAME) on --export, or "
                     "export a driver=throttle node", id);
        return NULL;
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                "Device '%s' not found: no throttle group (--object "
                "throttle-group) or export of that name", path);
    return NULL;
}

static void vb_tg_put(void *opaque, const char *key, uint64_t value)
{
    json_object_set_int_member(opaque, key, value);
}

static JsonNode *vb_qmp_qom_get(void *opaque, JsonObject *args,
                               GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *path = NULL, *prop = NULL;
    ThrottleLimits t;
    ThrottleGroup *tg;
    JsonObject *o;
    JsonNode *v;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_str(&a, "property", true, &prop, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    tg = vb_tg_resolve(s, path, errp);
    if (!tg) {
        return NULL;
    }
    throttle_group_get_limits(tg, &t);
    o = json_object_new();
    throttle_limits_foreach(&t, vb_tg_put, o);
    if (!strcmp(prop, "limits")) {
        return vb_node_take_object(o);
    }
    if (g_str_has_prefix(prop, "x-") && json_object_has_member(o, prop + 2)) {
        v = json_node_copy(json_object_get_member(o, prop + 2));
        json_object_unref(o);
        return v;
    }
    json_object_unref(o);
    vb_set_error(errp, "Property 'throttle-group.%s' not found (use limits "
                 "or an x-* limit such as x-iops-total)", prop);
    return NULL;
}

static JsonNode *vb_qmp_qom_set(void *opaque, JsonObject *args,
                               GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) v = { 0 };
    const char *path = NULL, *prop = NULL;
    ThrottleLimits t;
    ThrottleGroup *tg;
    bool any = false;
    GError *err = NULL;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_str(&a, "property", true, &prop, errp)) {
        return NULL;
    }
    tg = vb_tg_resolve(s, path, errp);
    if (!tg) {
        return NULL;
    }
    throttle_group_get_limits(tg, &t);
    if (!strcmp(prop, "limits")) {
        if (!qmp_args_object(&a, "value", true, &v, NULL, errp) ||
            !qmp_args_check_done(&a, errp) ||
            !vb_throttle_limits_parse(&v, "", &t, &any, errp) ||
            !qmp_args_check_done(&v, errp)) {
            return NULL;
        }
    } else if (g_str_has_prefix(prop, "x-")) {
        g_autoptr(JsonObject) wrap = json_object_new();
        JsonNode *val = json_object_get_member(args, "value");
        g_auto(QmpArgs) w = { 0 };

        if (!val) {
            vb_set_error(errp, "Parameter 'value' is missing");
            return NULL;
        }
        json_object_set_member(wrap, prop, json_node_copy(val));
        qmp_args_int(&a, "value", false, &(int64_t){ 0 }, NULL, NULL);
        qmp_args_init(&w, wrap, false, NULL);
        if (!qmp_args_check_done(&a, errp) ||
            !vb_throttle_limits_parse(&w, "x-", &t, &any, errp)) {
            return NULL;
        }
        if (!any) {
            vb_set_error(errp, "Property 'throttle-group.%s' not found (use "
                         "limits or an x-* limit such as x-iops-total)", prop);
            return NULL;
        }
    } else {
        vb_set_error(errp, "Property 'throttle-group.%s' not found (use "
                     "limits or an x-* limit such as x-iops-total)", prop);
        return NULL;
    }
    if (!throttle_group_set_limits(tg, &t, &err)) {
        vb_set_error(errp, "throttle-group '%s': %s",
                     throttle_group_name(tg), err->message);
        g_error_free(err);
        return NULL;
    }
    return vb_empty();
}

/* ---- key bytes ---------------------------------------------------------- */

char *vb_key_alloc(size_t len, size_t *mapped)
{
    size_t page = sysconf(_SC_PAGESIZE);
    size_t size = QEMU_ALIGN_UP(len + 1, page);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        /* As g_malloc() when memory runs out. */
        g_error("cannot map %zu bytes for a key: %s", size,
                g_strerror(errno));
    }
    /* A core dump without it; one without that pass is no reason to
     * refuse the key, but say so. */
    if (madvise(p, size, MADV_DONTDUMP) < 0) {
        warn_report("a key's memory cannot be left out of core dumps "
                    "(madvise: %s); a core dump of this process would "
                    "hold it", g_strerror(errno));
    }
    /* Never written to swap, if RLIMIT_MEMLOCK allows (a page a key). */
    if (mlock(p, size) < 0) {
        static bool warned;

        if (!warned) {
            warned = true;
            info_report("a key's memory cannot be locked (mlock: %s): "
                        "it may be written to swap; raise "
                        "RLIMIT_MEMLOCK (LimitMEMLOCK=) to avoid that",
                        g_strerror(errno));
        }
    }
    *mapped = size;
    return p;
}

char *vb_key_dup(const char *key, size_t *mapped)
{
    size_t len = strlen(key);
    char *p = vb_key_alloc(len, mapped);

    memcpy(p, key, len + 1);
    return p;
}

void vb_key_free(char *key, size_t mapped)
{
    if (key) {
        explicit_bzero(key, mapped);
        munlock(key, mapped);
        munmap(key, mapped);
    }
}

/* The most a secret file may hold: a Ceph key is 40 bytes of base64. */
#define VB_SECRET_MAX (64 * 1024)

/*
 * The contents of @file, read straight into key pages (vb_key_alloc())
 * and NUL-terminated, so that no other copy is made; *@len bytes, of a
 * mapping of *@mapped bytes.  NULL with @errp set.
 */
static char *vb_secret_read(const char *id, const char *file, size_t *len,
                            size_t *mapped, GError **errp)
{
    struct stat st;
    size_t cap = VB_SECRET_MAX, n = 0;
    char *buf;
    int fd;

    fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        vb_set_error(errp, "secret '%s': cannot read %s: %s", id, file,
                     g_strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size < VB_SECRET_MAX) {
        cap = st.st_size;       /* one more byte tells it did not grow */
    }
    buf = vb_key_alloc(cap + 1, mapped);
    for (;;) {
        ssize_t r = read(fd, buf + n, cap + 1 - n);

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            vb_set_error(errp, "secret '%s': cannot read %s: %s", id, file,
                         g_strerror(errno));
            goto fail;
        }
        if (r == 0) {
            break;
        }
        n += r;
        if (n > cap) {
            if (cap < VB_SECRET_MAX) {
                /* The file grew under us: go on in the largest buffer. */
                size_t bigger = 0;
                char *more = vb_key_alloc(VB_SECRET_MAX + 1, &bigger);

                memcpy(more, buf, n);
                vb_key_free(buf, *mapped);
                buf = more;
                *mapped = bigger;
                cap = VB_SECRET_MAX;
                continue;
            }
            vb_set_error(errp, "secret '%s': %s is larger than %d KiB; "
                         "give the file that holds just the key", id, file,
                         VB_SECRET_MAX / 1024);
            goto fail;
        }
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;

fail:
    close(fd);
    vb_key_free(buf, *mapped);
    return NULL;
}

/* @str is base64 that decodes to at least one byte (a key as ceph auth
 * get-key prints it), without decoding it anywhere. */
static bool vb_base64_check(const char *str)
{
    size_t chars = 0, pad = 0;

    for (const char *c = str; *c; c++) {
        if (*c == '=') {
            pad++;
        } else if (!pad && (g_ascii_isalnum(*c) || *c == '+' || *c == '/')) {
            chars++;
        } else {
            return false;
        }
    }
    /* What g_base64_decode() would make of it: 6 bits a character. */
    return chars * 6 / 8 > 0;
}

/* base64 of the @len bytes at @raw, in key pages (*@mapped bytes). */
static char *vb_base64_encode(const char *raw, size_t len, size_t *mapped)
{
    gint state = 0, save = 0;
    char *out = vb_key_alloc((len / 3 + 1) * 4 + 4, mapped);
    size_t n;

    n = g_base64_encode_step((const guchar *)raw, len, false, out, &state,
                             &save);
    n += g_base64_encode_close(false, out + n, &state, &save);
    out[n] = '\0';
    explicit_bzero(&save, sizeof(save));
    return out;
}

/* ---- iothread and secret objects --------------------------------------- */

VbIOThreadObj *vb_iothread_find(VbState *s, const char *id)
{
    for (guint i = 0; id && i < s->iothreads->len; i++) {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

        if (!strcmp(t->id, id)) {
            return t;
        }
    }
    return NULL;
}

typedef struct VbConfineJob {
    bool ok;
    GError *err;
} VbConfineJob;

/* In the iothread: the filter applies to the calling thread only. */
static void vb_confine_fn(void *opaque)
{
    VbConfineJob *job = opaque;

    job->ok = sandbox_apply_iothread_filter(&job->err);
}

bool vb_iothread_confine(IOThread *t, GError **errp)
{
    VbConfineJob job = { .err = NULL };

    iothread_run_sync(t, vb_confine_fn, &job);
    if (!job.ok) {
        g_propagate_prefixed_error(errp, job.err, "--seccomp on: ");
    }
    return job.ok;
}

VbSecretObj *vb_secret_find(VbState *s, const char *id)
{
    for (guint i = 0; id && i < s->secrets->len; i++) {
        VbSecretObj *sec = g_ptr_array_index(s->secrets, i);

        if (!strcmp(sec->id, id)) {
            return sec;
        }
    }
    return NULL;
}

/*
 * --object secret,id=ID,file=PATH[,format=raw|base64]: read the secret
 * now, as QEMU does.  Only from a file: a key given inline (data=) would
 * show in ps and in the shell history.  Like QEMU's, a raw secret is
 * base64-encoded for librados and a base64 one (a Ceph key as `ceph auth
 * get-key` prints it) passed as it is, after checking that it decodes.
 */
static bool vb_secret_add(VbState *s, QmpArgs *a, GError **errp)
{
    static const struct {
        const char *name;
        bool base64;            /* the file holds the key in base64 */
    } formats[] = {
        { "raw", false },
        { "base64", true },
    };
    const char *id = NULL, *file = NULL, *data = NULL;
    int format = -1;
    size_t len = 0, mapped = 0;
    char *contents;
    VbSecretObj *sec;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_str(a, "file", false, &file, errp) ||
        !qmp_args_str(a, "data", false, &data, errp) ||
        !QMP_ARGS_ENUM_TABLE(a, "format", formats, name, false, &format,
                             errp) ||
        !qmp_args_check_done(a, errp)) {
        return false;
    }
    if (data) {
        vb_set_error(errp, "secret '%s': data= is not accepted (it shows in "
                     "the process list); put the key in a file and give "
                     "file=PATH", id);
        return false;
    }
    if (!file) {
        vb_set_error(errp, "secret '%s': give file=PATH", id);
        return false;
    }
    if (vb_secret_find(s, id) || vb_iothread_find(s, id) ||
        vb_throttle_group_find(s, id) || vb_nbd_object_exists(s, id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", id);
        return false;
    }
    contents = vb_secret_read(id, file, &len, &mapped, errp);
    if (!contents) {
        return false;
    }
    sec = g_new0(VbSecretObj, 1);
    if (format >= 0 && formats[format].base64) {
        /* Kept as it is (stripped): it already is what librados wants. */
        g_strstrip(contents);
        if (!vb_base64_check(contents)) {
            vb_set_error(errp, "secret '%s': %s is not base64 (format=base64 "
                         "wants the key as ceph auth get-key prints it)", id,
                         file);
            g_free(sec);
            vb_key_free(contents, mapped);
            return false;
        }
        sec->base64 = contents;
        sec->mapped = mapped;
    } else {
        sec->base64 = vb_base64_encode(contents, len, &sec->mapped);
        vb_key_free(contents, mapped);
    }
    sec->id = g_strdup(id);
    g_ptr_array_add(s->secrets, sec);
    return true;
}

/* --object iothread,id=ID[,poll-max-ns=NS]: an iothread of its own. */
static bool vb_iothread_add(VbState *s, QmpArgs *a, GError **errp)
{
    const char *id = NULL;
    int64_t poll_max_ns = s->poll_max_ns;
    VbIOThreadObj *t;
    IOThread *it;
    g_autofree char *name = NULL;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_int(a, "poll-max-ns", false, &poll_max_ns, NULL, errp)) {
        return false;
    }
    if (qmp_args_has(a, "poll-grow") || qmp_args_has(a, "poll-shrink") ||
        qmp_args_has(a, "aio-max-batch")) {
        vb_set_error(errp, "iothread '%s': poll-grow, poll-shrink and "
                     "aio-max-batch are not supported (the polling window "
                     "adapts by itself; batches are whole virtqueue turns)",
                     id);
        return false;
    }
    if (!qmp_args_check_done(a, errp)) {
        return false;
    }
    if (poll_max_ns < 0) {
        vb_set_error(errp, "iothread '%s': poll-max-ns must not be "
                     "negative", id);
        return false;
    }
    if (vb_iothread_find(s, id) || vb_secret_find(s, id) ||
        vb_throttle_group_find(s, id) || vb_nbd_object_exists(s, id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", id);
        return false;
    }
    name = g_strdup_printf("vb-%s", id);
    it = iothread_create(name, poll_max_ns, errp);
    if (!it) {
        return false;
    }
    /* Added at run time to a sandboxed daemon: confined like the others
     * before any export can use it. */
    if (s->seccomp && !vb_iothread_confine(it, errp)) {
        iothread_destroy(it);
        return false;
    }
    t = g_new0(VbIOThreadObj, 1);
    t->id = g_strdup(id);
    t->iothread = it;
    t->poll_max_ns = poll_max_ns;
    g_ptr_array_add(s->iothreads, t);
    return true;
}

/* --object throttle-group,...: its id is checked against the other
 * objects' first, as QEMU's one namespace of objects has it. */
static bool vb_tg_object_add(VbState *s, QmpArgs *a, GError **errp)
{
    JsonObject *args = a->obj;

    if (qmp_args_has(a, "id") &&
        JSON_NODE_HOLDS_VALUE(json_object_get_member(args, "id")) &&
        json_node_get_value_type(json_object_get_member(args, "id")) ==
        G_TYPE_STRING) {
        const char *tid = json_object_get_string_member(args, "id");

        if (vb_iothread_find(s, tid) || vb_secret_find(s, tid) ||
            vb_nbd_object_exists(s, tid)) {
            vb_set_error(errp, "attempt to add duplicate property '%s' "
                         "to object (type 'container')", tid);
            return false;
        }
    }
    return vb_throttle_group_add(s, a, errp);
}

/* The objects --object and object-add create, by qom-type; each reads
 * the object's arguments after qom-type. */
static const struct {
    const char *name;
    bool (*add)(VbState *s, QmpArgs *a, GError **errp);
} vb_object_types[] = {
    { "iothread", vb_iothread_add },
    { "secret", vb_secret_add },
    { "throttle-group", vb_tg_object_add },
    { "tls-creds-x509", vb_nbd_tls_x509_add },
    { "tls-creds-psk", vb_nbd_tls_psk_add },
    { "authz-simple", vb_nbd_authz_simple_add },
    { "authz-list", vb_nbd_authz_list_add },
    { "authz-list-file", vb_nbd_authz_list_file_add },
};

bool vb_object_add(VbState *s, JsonObject *args, bool keyval, GError **errp)
{
    g_auto(QmpArgs) a = { 0 };
    int type;

    qmp_args_init(&a, args, keyval, NULL);
    if (qmp_args_has(&a, "qom-type")) {
        JsonNode *n = json_object_get_member(args, "qom-type");
        bool known = false;

        for (size_t i = 0; i < G_N_ELEMENTS(vb_object_types); i++) {
            known |= JSON_NODE_HOLDS_VALUE(n) &&
                     json_node_get_value_type(n) == G_TYPE_STRING &&
                     !strcmp(json_node_get_string(n),
                             vb_object_types[i].name);
        }
        if (JSON_NODE_HOLDS_VALUE(n) &&
            json_node_get_value_type(n) == G_TYPE_STRING && !known) {
            vb_set_error(errp, "object type '%s' is not supported: "
                         "vhost-blkd has only iothread, secret, "
                         "throttle-group, tls-creds-x509, "
                         "tls-creds-psk, authz-simple, authz-list and "
                         "authz-list-file objects",
                         json_node_get_string(n));
            return false;
        }
    }
    if (!QMP_ARGS_ENUM_TABLE(&a, "qom-type", vb_object_types, name, true,
                             &type, errp)) {
        return false;
    }
    return vb_object_types[type].add(s, &a, errp);
}

/* object-add: iothread, secret and throttle-group objects at run time,
 * as on the command line. */
static JsonNode *vb_qmp_object_add(void *opaque, JsonObject *args,
                                   GError **errp)
{
    return vb_object_add(opaque, args, false, errp) ? vb_empty() : NULL;
}

/* ---- QOM -------------------------------------------------------------- */

typedef enum VbObjType {
    VB_OBJ_NONE,
    VB_OBJ_IOTHREAD,
    VB_OBJ_SECRET,
    VB_OBJ_THROTTLE_GROUP,
    VB_OBJ_NBD,                 /* TLS or authz: vb_nbd_object_type() */
} VbObjType;

static const char *const vb_obj_type_names[] = {
    [VB_OBJ_IOTHREAD] = "iothread",
    [VB_OBJ_SECRET] = "secret",
    [VB_OBJ_THROTTLE_GROUP] = "throttle-group",
};

/* The object @id and its index in its array. */
static VbObjType vb_obj_find(VbState *s, const char *id, guint *index)
{
    for (guint i = 0; i < s->iothreads->len; i++) {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

        if (!strcmp(t->id, id)) {
            *index = i;
            return VB_OBJ_IOTHREAD;
        }
    }
    for (guint i = 0; i < s->secrets->len; i++) {
        VbSecretObj *sec = g_ptr_array_index(s->secrets, i);

        if (!strcmp(sec->id, id)) {
            *index = i;
            return VB_OBJ_SECRET;
        }
    }
    for (guint i = 0; i < s->throttle_groups->len; i++) {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        if (!strcmp(throttle_group_name(tg), id)) {
            *index = i;
            return VB_OBJ_THROTTLE_GROUP;
        }
    }
    return VB_OBJ_NONE;
}

static bool vb_iothread_in_use(VbState *s, VbIOThreadObj *t)
{
    AioContext *ctx = iothread_get_aio_context(t->iothread);

    if (vb_nbd_uses_ctx(s, ctx)) {
        return true;
    }

    for (guint i = 0; i < s->exports->len; i++) {
        VuBlkExport *exp = vb_export_get_vu(g_ptr_array_index(s->exports, i));

        for (unsigned int q = 0; q < vu_blk_export_get_num_queues(exp); q++) {
            if (vu_blk_export_get_queue_ctx(exp, q) == ctx) {
                return true;
            }
        }
    }
    return false;
}

static void vb_secret_free(VbSecretObj *sec)
{
    g_free(sec->id);
    vb_key_free(sec->base64, sec->mapped);
    g_free(sec);
}

static JsonNode *vb_qmp_object_del(void *opaque, JsonObject *args,
                                   GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *id = NULL;
    guint i = 0;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "id", true, &id, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    switch (vb_obj_find(s, id, &i)) {
    case VB_OBJ_NONE:
    case VB_OBJ_NBD:            /* vb_obj_find() does not return it */
        if (vb_nbd_object_exists(s, id)) {
            /* tls-creds-x509/psk live with the NBD server */
            return vb_nbd_object_del(s, id, errp) ? vb_empty() : NULL;
        }
        vb_set_error(errp, "object '%s' not found", id);
        return NULL;
    case VB_OBJ_IOTHREAD: {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

        if (vb_iothread_in_use(s, t)) {
            vb_set_error(errp, "object '%s' is in use, can not be deleted",
                         id);
            return NULL;
        }
        g_ptr_array_remove_index(s->iothreads, i);
        /* Nothing is attached to it any more: the join returns once the
         * thread has run its stop bottom half. */
        iothread_destroy(t->iothread);
        g_free(t->id);
        g_free(t);
        break;
    }
    case VB_OBJ_SECRET:
        vb_secret_free(g_ptr_array_steal_index(s->secrets, i));
        break;
    case VB_OBJ_THROTTLE_GROUP: {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        /* One reference is the object's; any other is a filter's. */
        if (throttle_group_refs(tg) > 1) {
            vb_set_error(errp, "object '%s' is in use, can not be deleted",
                         id);
            return NULL;
        }
        g_ptr_array_remove_index(s->throttle_groups, i);  /* unrefs it */
        break;
    }
    }
    return vb_empty();
}

/* vb_state_cleanup(), after the exports and the nodes. */
void vb_objects_cleanup(VbState *s)
{
    while (s->iothreads->len) {
        VbIOThreadObj *t = g_ptr_array_steal_index(s->iothreads, 0);

        iothread_destroy(t->iothread);
        g_free(t->id);
        g_free(t);
    }
    while (s->secrets->len) {
        vb_secret_free(g_ptr_array_steal_index(s->secrets, 0));
    }
    g_ptr_array_free(s->secrets, true);
    /* After the nodes: each filter holds a reference of its own. */
    g_ptr_array_free(s->throttle_groups, true);
    g_ptr_array_free(s->iothreads, true);
}

/* ---- paths ------------------------------------------------------------- */

typedef enum VbPathKind {
    VB_PATH_NONE,
    VB_PATH_ROOT,
    VB_PATH_OBJECTS,
    VB_PATH_OBJECT,
} VbPathKind;

/* What @path names; for an object, its type in *@type and its qom-type
 * in *@qom_type. */
static VbPathKind vb_path_resolve(VbState *s, const char *path,
                                  VbObjType *type, const char **qom_type)
{
    const char *id = path;
    guint i;

    if (!strcmp(path, "/")) {
        return VB_PATH_ROOT;
    }
    if (!strcmp(path, "/objects") || !strcmp(path, "/objects/") ||
        !strcmp(path, "objects")) {
        return VB_PATH_OBJECTS;
    }
    if (g_str_has_prefix(path, "/objects/")) {
        id = path + strlen("/objects/");
    } else if (path[0] == '/') {
        return VB_PATH_NONE;
    }
    if (!*id || strchr(id, '/')) {
        return VB_PATH_NONE;
    }
    *type = vb_obj_find(s, id, &i);
    if (*type != VB_OBJ_NONE) {
        *qom_type = vb_obj_type_names[*type];
        return VB_PATH_OBJECT;
    }
    *qom_type = vb_nbd_object_type(s, id);
    if (*qom_type) {
        *type = VB_OBJ_NBD;
        return VB_PATH_OBJECT;
    }
    return VB_PATH_NONE;
}

/* The authz object (nbd/nbd-monitor.c) @path names, or NULL. */
static const char *vb_path_authz(VbState *s, const char *path)
{
    VbObjType type = VB_OBJ_NONE;
    const char *qom_type = NULL;
    const char *id = g_str_has_prefix(path, "/objects/") ?
                     path + strlen("/objects/") : path;

    if (vb_path_resolve(s, path, &type, &qom_type) != VB_PATH_OBJECT ||
        type != VB_OBJ_NBD || !vb_nbd_is_authz(s, id)) {
        return NULL;
    }
    return id;
}

static void vb_prop_add(JsonArray *arr, const char *name, const char *type)
{
    JsonObject *o = json_object_new();

    json_object_set_string_member(o, "name", name);
    json_object_set_string_member(o, "type", type);
    json_array_add_object_element(arr, o);
}

static void vb_prop_add_child(JsonArray *arr, const char *name,
                              VbObjType type)
{
    g_autofree char *t = g_strdup_printf("child<%s>",
                                         vb_obj_type_names[type]);

    vb_prop_add(arr, name, t);
}

/* A TLS or authz object (they live in nbd/nbd-monitor.c). */
static void vb_nbd_prop_add_child(void *opaque, const char *id,
                                  const char *type)
{
    g_autofree char *t = g_strdup_printf("child<%s>", type);

    vb_prop_add(opaque, id, t);
}

static void vb_authz_prop_add(void *opaque, const char *name,
                              const char *type)
{
    vb_prop_add(opaque, name, type);
}

static void vb_tg_prop_add(void *opaque, const char *key, uint64_t value)
{
    g_autofree char *name = g_strdup_printf("x-%s", key);

    vb_prop_add(opaque, name, "int");
}

/*
 * qom-list: the properties qom-get answers for, in QEMU's
 * ObjectPropertyInfo shape.  QEMU 7.2 lists more for a secret (loaded,
 * format, data, file, keyid, iv) and an iothread (poll-*, aio-max-batch);
 * vhost-blkd reads none of those back, so it lists only "type" for them.
 * An authz object has QEMU's (nbd/nbd-monitor.c).
 */
static JsonNode *vb_qmp_qom_list(void *opaque, JsonObject *args,
                                 GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *path = NULL;
    VbObjType type = VB_OBJ_NONE;
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    switch (vb_path_resolve(s, path, &type, &(const char *){ NULL })) {
    case VB_PATH_NONE:
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                    "Device '%s' not found", path);
        return NULL;
    case VB_PATH_ROOT:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        vb_prop_add(arr, "objects", "child<container>");
        break;
    case VB_PATH_OBJECTS:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        for (guint i = 0; i < s->iothreads->len; i++) {
            VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

            vb_prop_add_child(arr, t->id, VB_OBJ_IOTHREAD);
        }
        for (guint i = 0; i < s->secrets->len; i++) {
            VbSecretObj *sec = g_ptr_array_index(s->secrets, i);

            vb_prop_add_child(arr, sec->id, VB_OBJ_SECRET);
        }
        for (guint i = 0; i < s->throttle_groups->len; i++) {
            ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

            vb_prop_add_child(arr, throttle_group_name(tg),
                              VB_OBJ_THROTTLE_GROUP);
        }
        vb_nbd_objects_foreach(s, vb_nbd_prop_add_child, arr);
        break;
    case VB_PATH_OBJECT:
    default:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        if (type == VB_OBJ_THROTTLE_GROUP) {
            ThrottleLimits t = { 0 };

            vb_prop_add(arr, "limits", "ThrottleLimits");
            /* Every x-* key, as vb_throttle_limits_parse() reads them. */
            throttle_limits_foreach(&t, vb_tg_prop_add, arr);
        } else if (type == VB_OBJ_NBD) {
            /* Nothing for a TLS object: not an authz one. */
            vb_nbd_authz_props_foreach(s, vb_path_authz(s, path),
                                       vb_authz_prop_add, arr);
        }
        break;
    }
    return vb_node_take_array(arr);
}

/* The authz object a qom-get/qom-set's "path" names, or NULL. */
static const char *vb_args_authz(VbState *s, JsonObject *args)
{
    JsonNode *pn = args ? json_object_get_member(args, "path") : NULL;

    if (!pn || !JSON_NODE_HOLDS_VALUE(pn) ||
        json_node_get_value_type(pn) != G_TYPE_STRING) {
        return NULL;
    }
    return vb_path_authz(s, json_node_get_string(pn));
}

/* Read "path" and "property" of a qom-get/qom-set on an authz object;
 * @a keeps the rest ("value") for the caller. */
static bool vb_authz_args(QmpArgs *a, JsonObject *args,
                          const char **property, GError **errp)
{
    const char *path = NULL;

    *property = NULL;
    qmp_args_init(a, args, false, NULL);
    return qmp_args_str(a, "path", true, &path, errp) &&
           qmp_args_str(a, "property", true, property, errp);
}

/*
 * qom-get: "type" of "/", "/objects" and every object here; the rest
 * (a throttle group's limits) in vb_qmp_qom_get().
 */
static JsonNode *vb_qmp_qom_get_obj(void *opaque, JsonObject *args,
                                    GError **errp)
{
    VbState *s = opaque;
    /* No "arguments" at all: vb_qmp_qom_get() says what is missing. */
    JsonNode *pn = args ? json_object_get_member(args, "path") : NULL;
    JsonNode *prop = args ? json_object_get_member(args, "property") : NULL;
    VbObjType type = VB_OBJ_NONE;
    const char *name, *qom_type = NULL;

    if (pn && prop && json_object_get_size(args) == 2 &&
        JSON_NODE_HOLDS_VALUE(pn) && JSON_NODE_HOLDS_VALUE(prop) &&
        json_node_get_value_type(pn) == G_TYPE_STRING &&
        json_node_get_value_type(prop) == G_TYPE_STRING &&
        !strcmp(json_node_get_string(prop), "type")) {
        switch (vb_path_resolve(s, json_node_get_string(pn), &type,
                                &qom_type)) {
        case VB_PATH_ROOT:
        case VB_PATH_OBJECTS:
            name = "container";
            break;
        case VB_PATH_OBJECT:
            name = qom_type;
            break;
        default:
            name = NULL;
            break;
        }
        if (name) {
            JsonNode *v = json_node_alloc();

            json_node_init_string(v, name);
            return v;
        }
    }
    if (vb_args_authz(s, args)) {
        g_auto(QmpArgs) a = { 0 };
        const char *property;

        if (!vb_authz_args(&a, args, &property, errp) ||
            !qmp_args_check_done(&a, errp)) {
            return NULL;
        }
        return vb_nbd_authz_get(s, vb_args_authz(s, args), property, errp);
    }
    return vb_qmp_qom_get(opaque, args, errp);
}

/* qom-set: an authz object's properties here, a throttle group's in
 * vb_qmp_qom_set(). */
static JsonNode *vb_qmp_qom_set_obj(void *opaque, JsonObject *args,
                                    GError **errp)
{
    VbState *s = opaque;

    if (vb_args_authz(s, args)) {
        g_auto(QmpArgs) a = { 0 };
        const char *property;

        if (!vb_authz_args(&a, args, &property, errp)) {
            return NULL;
        }
        return vb_nbd_authz_set(s, vb_args_authz(s, args), property, &a,
                                errp) ? vb_empty() : NULL;
    }
    return vb_qmp_qom_set(opaque, args, errp);
}

static const QmpCommand vb_objects_commands[] = {
    { "object-add", vb_qmp_object_add },
    { "object-del", vb_qmp_object_del },
    { "qom-get", vb_qmp_qom_get_obj },
    { "qom-list", vb_qmp_qom_list },
    { "qom-set", vb_qmp_qom_set_obj },
};

void vb_objects_register(GArray *table)
{
    g_array_append_vals(table, vb_objects_commands,
                        G_N_ELEMENTS(vb_objects_commands));
}
