/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blkd's option parser: one --export KEY=VALUE,... string into an
 * ExportOpts, and the size, number, on/off, user and group values of the
 * other options.  No printing, no exit(): errors are GErrors the daemon
 * prints.  See include/tools/export-opts.h.
 */
#include "qemu/osdep.h"
#include "hw/block/virtio-blk.h"
#include "tools/export-opts.h"
#include "qemu/qmp-args.h"

#include <sys/stat.h>
#include <grp.h>
#include <pwd.h>

G_STATIC_ASSERT(EXPORT_OPTS_SERIAL_BYTES == VIRTIO_BLK_ID_BYTES);

/* Any thread. */
bool export_opts_parse_size(const char *s, uint64_t *out)
{
    return qemu_parse_size(s, out);
}

/* Any thread. */
bool export_opts_parse_uint(const char *s, unsigned int max,
                            unsigned int *out)
{
    uint64_t v;

    if (!export_opts_parse_size(s, &v) || v > max) {
        return false;
    }
    *out = v;
    return true;
}

/* Any thread. */
bool export_opts_parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "on") || !strcmp(s, "yes") || !strcmp(s, "true") ||
        !strcmp(s, "1")) {
        *out = true;
        return true;
    }
    if (!strcmp(s, "off") || !strcmp(s, "no") || !strcmp(s, "false") ||
        !strcmp(s, "0")) {
        *out = false;
        return true;
    }
    return false;
}

/*
 * User and group names.  A dynamically linked daemon asks NSS (getpwnam()
 * and friends), so LDAP or sssd users work.  A statically linked one must
 * not: glibc's NSS would load the system's shared libnss modules into a
 * static program, which crashes when their glibc is not the one linked
 * in (and did, for a name that no module knows).  It reads /etc/passwd and
 * /etc/group with fgetpwent()/fgetgrent(), plain file parsers.
 */
#if CONFIG_STATIC_TOOLS
static struct passwd *vb_getpw(const char *name, bool by_uid, uid_t uid)
{
    FILE *f = fopen("/etc/passwd", "re");
    struct passwd *pw = NULL;

    if (!f) {
        return NULL;
    }
    errno = 0;
    while ((pw = fgetpwent(f)) != NULL) {
        if (by_uid ? pw->pw_uid == uid : !strcmp(pw->pw_name, name)) {
            break;
        }
    }
    if (!pw && errno == ENOENT) {
        errno = 0;              /* end of file, not an error */
    }
    fclose(f);
    return pw;
}

static struct group *vb_getgr(const char *name)
{
    FILE *f = fopen("/etc/group", "re");
    struct group *gr = NULL;

    if (!f) {
        return NULL;
    }
    errno = 0;
    while ((gr = fgetgrent(f)) != NULL) {
        if (!strcmp(gr->gr_name, name)) {
            break;
        }
    }
    if (!gr && errno == ENOENT) {
        errno = 0;
    }
    fclose(f);
    return gr;
}
#define VB_PWNAM(n)   vb_getpw((n), false, 0)
#define VB_PWUID(u)   vb_getpw(NULL, true, (u))
#define VB_GRNAM(n)   vb_getgr(n)
#define VB_USER_DB    " (static build: /etc/passwd and /etc/group only)"
#else
#define VB_PWNAM(n)   getpwnam(n)
#define VB_PWUID(u)   getpwuid(u)
#define VB_GRNAM(n)   getgrnam(n)
#define VB_USER_DB    ""
#endif

/* USER as a name or a number; @gid receives its primary group.  Any
 * thread (getpwnam() is not reentrant: one caller at a time). */
bool export_opts_lookup_user(const char *name, uid_t *uid, gid_t *gid,
                             GError **errp)
{
    struct passwd *pw;
    unsigned int n;

    errno = 0;
    pw = VB_PWNAM(name);
    if (!pw && export_opts_parse_uint(name, UINT32_MAX - 1, &n)) {
        pw = VB_PWUID(n);
        if (!pw) {
            *uid = n;
            *gid = (gid_t)-1;
            return true;
        }
    }
    if (!pw) {
        g_set_error(errp, VB_ERROR, 0, "no user '%s' on this system%s%s%s",
                    name, errno ? ": " : " (see getent passwd)",
                    errno ? g_strerror(errno) : "", VB_USER_DB);
        return false;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return true;
}

/* Any thread, one caller at a time (getgrnam()). */
bool export_opts_lookup_group(const char *name, gid_t *gid, GError **errp)
{
    struct group *gr;
    unsigned int n;

    errno = 0;
    gr = VB_GRNAM(name);
    if (gr) {
        *gid = gr->gr_gid;
        return true;
    }
    if (export_opts_parse_uint(name, UINT32_MAX - 1, &n)) {
        *gid = n;
        return true;
    }
    g_set_error(errp, VB_ERROR, 0, "no group '%s' on this system%s%s%s", name,
                errno ? ": " : " (see getent group)",
                errno ? g_strerror(errno) : "", VB_USER_DB);
    return false;
}

/* Main thread: like initgroups(3) -- the supplementary groups of @user
 * (a name, or a uid with an entry) plus @gid. */
int export_opts_initgroups(const char *user, gid_t gid)
{
#if CONFIG_STATIC_TOOLS
    struct passwd *pw;
    struct group *gr;
    g_autofree char *name = NULL;
    g_autoptr(GArray) gids = g_array_new(false, false, sizeof(gid_t));
    unsigned int n;
    FILE *f;
    int r;

    pw = VB_PWNAM(user);
    if (!pw && export_opts_parse_uint(user, UINT32_MAX - 1, &n)) {
        pw = VB_PWUID(n);
    }
    name = g_strdup(pw ? pw->pw_name : user);
    g_array_append_val(gids, gid);
    f = fopen("/etc/group", "re");
    if (f) {
        while ((gr = fgetgrent(f)) != NULL) {
            for (char **m = gr->gr_mem; m && *m; m++) {
                if (!strcmp(*m, name) && gr->gr_gid != gid) {
                    g_array_append_val(gids, gr->gr_gid);
                    break;
                }
            }
        }
        fclose(f);
    }
    r = setgroups(gids->len, (gid_t *)gids->data);
    return r;
#else
    return initgroups(user, gid);
#endif
}

/* Any thread. */
void export_opts_free(ExportOpts *e)
{
    if (!e) {
        return;
    }
    if (e->block_args) {
        json_object_unref(e->block_args);
    }
    if (e->block_strings) {
        g_ptr_array_unref(e->block_strings);
    }
    if (e->format_strings) {
        g_ptr_array_unref(e->format_strings);
    }
    g_free(e->format);
    g_free(e->id);
    g_free(e->node_name);
    g_free(e->socket);
    g_free(e->file);
    g_free(e->driver);
    g_free(e->serial);
    g_free(e->throttle_group);
    g_free(e);
}

/* An export with every key at its default (socket= and file= unset). */
static ExportOpts *export_opts_new_default(void)
{
    ExportOpts *e = g_new0(ExportOpts, 1);

    e->block_args = json_object_new();
    e->num_queues = 1;
    e->queue_size = 128;
    e->aio = BLOCK_AIO_IO_URING;
    e->cache_direct = true;
    e->logical_block_size = 512;
    e->discard = true;
    e->write_zeroes = true;
    e->batch = true;
    e->first_batch = 4;
    e->iothread = -1;
    e->socket_mode = 0600;
    e->socket_uid = (uid_t)-1;
    e->socket_gid = (gid_t)-1;
    return e;
}

/* What a valid value of @key looks like, for "bad value" errors. */
static const char *export_opts_value_hint(const char *key)
{
    static const struct {
        const char *key, *hint;
    } hints[] = {
        { "id", "give a name" },
        { "node-name", "give a name" },
        { "socket", "give a path" },
        { "num-queues", "use 1 to 64" },
        { "queue-size", "use a power of 2 from 2 to 1024" },
        { "aio", "use io_uring, native or threads" },
        { "cache", "use none or writeback" },
        { "readonly", "use on or off" },
        { "serial", "use at most 20 bytes" },
        { "logical-block-size", "use 512 or 4096" },
        { "discard", "use on or off" },
        { "write-zeroes", "use on or off" },
        { "batch", "use on or off" },
        { "first-batch", "use 0 (off) to 1024" },
        { "iothread", "use an iothread number" },
        { "socket-mode", "use octal permissions from 1 to 0777, "
          "e.g. 0660" },
        { "throttle-group", "give the id of an --object throttle-group" },
    };
    const char *hint = "";

    for (size_t i = 0; i < ARRAY_SIZE(hints); i++) {
        if (!strcmp(hints[i].key, key)) {
            hint = hints[i].hint;
        }
    }
    return hint;
}

/*
 * Apply one KEY=VALUE item of --export to @e.  False with @errp set for
 * an unknown key or a value that is not valid for it.
 */
static bool export_opts_set(ExportOpts *e, const char *key, const char *val,
                            GError **errp)
{
    bool ok = true;

    if (!strcmp(key, "id")) {
        g_free(e->id);
        e->id = g_strdup(val);
        ok = *val;
    } else if (!strcmp(key, "node-name")) {
        g_free(e->node_name);
        e->node_name = g_strdup(val);
        ok = *val;
    } else if (!strcmp(key, "socket")) {
        g_free(e->socket);
        e->socket = g_strdup(val);
        ok = *val;
    } else if (!strcmp(key, "driver")) {
        if (blk_driver_is_format(val)) {
            /* A format over a file: this syntax says it with format=. */
            g_set_error(errp, VB_ERROR, 0, "driver=%s: give "
                        "file=PATH,format=%s (%s is the format of the "
                        "file)", val, val, val);
            return false;
        }
        ok = blk_driver_exists(val);
        g_free(e->driver);
        e->driver = g_strdup(val);
        if (!ok) {
            g_autofree char *names = blk_driver_export_names();

            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for driver: use "
                        "%s", val, names);
            return false;
        }
    } else if (!strcmp(key, "format")) {
        if (strcmp(val, "raw") && !blk_driver_is_format(val)) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for format: use "
                        "raw (the default) or qcow2", val);
            return false;
        }
        g_free(e->format);
        e->format = strcmp(val, "raw") ? g_strdup(val) : NULL;
    } else if (!strcmp(key, "num-queues")) {
        ok = export_opts_parse_uint(val, EXPORT_OPTS_MAX_QUEUES,
                                    &e->num_queues) &&
             e->num_queues > 0;
    } else if (!strcmp(key, "queue-size")) {
        ok = export_opts_parse_uint(val, 1024, &e->queue_size) &&
             e->queue_size >= 2 &&
             !(e->queue_size & (e->queue_size - 1));
    } else if (!strcmp(key, "aio")) {
        ok = blk_aio_mode_parse(val, &e->aio);
        /* A node option: the driver that has one (file) reads it. */
        json_object_set_string_member(e->block_args, key, val);
    } else if (!strcmp(key, "cache")) {
        if (!strcmp(val, "none")) {
            e->cache_direct = true;
        } else if (!strcmp(val, "writeback")) {
            e->cache_direct = false;
        } else {
            ok = false;
        }
    } else if (!strcmp(key, "readonly")) {
        ok = export_opts_parse_bool(val, &e->readonly);
    } else if (!strcmp(key, "serial")) {
        ok = strlen(val) <= VIRTIO_BLK_ID_BYTES;
        g_free(e->serial);
        e->serial = g_strdup(val);
        e->serial_set = true;
    } else if (!strcmp(key, "logical-block-size")) {
        ok = export_opts_parse_uint(val, 4096, &e->logical_block_size) &&
             (e->logical_block_size == 512 ||
              e->logical_block_size == 4096);
    } else if (!strcmp(key, "discard")) {
        ok = export_opts_parse_bool(val, &e->discard);
    } else if (!strcmp(key, "write-zeroes")) {
        ok = export_opts_parse_bool(val, &e->write_zeroes);
    } else if (!strcmp(key, "batch")) {
        ok = export_opts_parse_bool(val, &e->batch);
    } else if (!strcmp(key, "first-batch")) {
        ok = export_opts_parse_uint(val, EXPORT_OPTS_MAX_QUEUE_SIZE,
                                    &e->first_batch);
    } else if (!strcmp(key, "socket-mode")) {
        char *end;
        unsigned long m;

        errno = 0;
        m = strtoul(val, &end, 8);
        ok = *val && g_ascii_isdigit(*val) && !*end && !errno &&
             m > 0 && m <= 0777;
        e->socket_mode = m;
    } else if (!strcmp(key, "socket-owner")) {
        gid_t unused;

        if (!export_opts_lookup_user(val, &e->socket_uid, &unused, errp)) {
            g_prefix_error(errp, "socket-owner=%s: ", val);
            return false;
        }
        e->socket_chown = true;
    } else if (!strcmp(key, "socket-group")) {
        if (!export_opts_lookup_group(val, &e->socket_gid, errp)) {
            g_prefix_error(errp, "socket-group=%s: ", val);
            return false;
        }
        e->socket_chown = true;
    } else if (!strcmp(key, "iothread")) {
        unsigned int n = 0;

        ok = export_opts_parse_uint(val, EXPORT_OPTS_MAX_IOTHREADS - 1, &n);
        e->iothread = n;
    } else if (!strcmp(key, "throttle-group")) {
        g_free(e->throttle_group);
        e->throttle_group = g_strdup(val);
        ok = *val;
    } else if (g_str_has_prefix(key, "iops-") ||
               g_str_has_prefix(key, "bps-")) {
        uint64_t v;
        bool known = false;

        if (!export_opts_parse_size(val, &v) || v > INT64_MAX) {
            v = 0;
            throttle_limits_set_key(&e->throttle, key, 0, &known, NULL);
            if (!known) {
                goto unknown;
            }
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for %s: use a "
                        "number >= 0 (0: no limit), optionally with a k, M, "
                        "G or T suffix%s", val, key,
                        g_str_has_suffix(key, "-max-length") ?
                        " (max-length is in seconds)" : "");
            return false;
        }
        if (!throttle_limits_set_key(&e->throttle, key, v, &known, errp)) {
            if (!known) {
                goto unknown;
            }
            return false;
        }
        e->throttle_set = true;
    } else if (g_str_has_prefix(key, "inject-")) {
        if (!blk_inject_parse_option(&e->inject, key, val, errp)) {
            return false;
        }
    } else {
    unknown:
        /* The driver's, or unknown: blk_options_parse() tells. */
        json_object_set_string_member(e->block_args, key, val);
    }
    if (!ok) {
        g_set_error(errp, VB_ERROR, 0, "bad value '%s' for %s: %s", val,
                    key, export_opts_value_hint(key));
        return false;
    }
    return true;
}

/*
 * The driver: driver=NAME, or the one whose key names the image (file=
 * or another driver's, blk_driver_for_export_key()), else file.  NULL
 * with @errp set when they disagree.
 */
static const char *export_opts_driver(const ExportOpts *e, GError **errp)
{
    g_autoptr(GList) keys = json_object_get_members(e->block_args);
    const char *driver = e->driver, *by_key = NULL, *key = NULL;

    for (GList *l = keys; l; l = l->next) {
        const char *owner = blk_driver_for_export_key(l->data);
        const char *val = json_object_get_string_member(e->block_args,
                                                        l->data);

        if (!owner) {
            continue;
        }
        if (by_key && strcmp(owner, by_key)) {
            g_set_error(errp, VB_ERROR, 0, "give %s= or %s=, not both",
                        key, (const char *)l->data);
            return NULL;
        }
        if (driver && strcmp(owner, driver)) {
            g_set_error(errp, VB_ERROR, 0, "driver=%s reads no %s: drop "
                        "%s=%s, or drop driver=%s to serve it (%s=%s needs "
                        "driver=%s, not driver=%s)", driver,
                        (const char *)l->data, (const char *)l->data, val,
                        driver, (const char *)l->data, val, owner, driver);
            return NULL;
        }
        by_key = owner;
        key = l->data;
    }
    return driver ? driver : by_key ? by_key : "file";
}

/* What the export's readers want of the node's keys. */
static void export_opts_copy_block(ExportOpts *e)
{
    JsonNode *file = json_object_get_member(e->block_args, "file");

    g_free(e->file);
    e->file = file ? g_strdup(json_node_get_string(file)) : NULL;
    /* The driver may serve the image read-only (a snapshot). */
    e->readonly = e->block.readonly;
}

/*
 * The node's keys, read by its driver (again, for
 * export_opts_absolute_file()); *@image: the image as named.  False with
 * @errp set.
 */
static bool export_opts_parse_block(ExportOpts *e, const char *driver,
                                    const char **image, GError **errp)
{
    BlockOptsParse parse = { .export_syntax = true, .driver = driver };
    g_auto(QmpArgs) a = { 0 };
    g_autoptr(GList) keys = NULL;

    g_clear_pointer(&e->block_strings, g_ptr_array_unref);
    g_clear_pointer(&e->format_strings, g_ptr_array_unref);
    blk_options_init(&e->block);
    e->block.readonly = e->readonly;
    e->block.cache_direct = e->cache_direct;
    qmp_args_init(&a, e->block_args, true, NULL);
    if (!blk_options_parse(&e->block, &a, &parse, errp)) {
        blk_options_parse_cleanup(&parse);
        return false;
    }
    e->block_strings = g_steal_pointer(&parse.strings);
    *image = parse.image;
    if (e->format) {
        /* The format's own keys, from the same arguments. */
        BlockOptsParse fp = { .export_syntax = true, .driver = e->format };

        blk_options_init(&e->format_block);
        e->format_block.readonly = e->readonly;
        if (!blk_options_parse(&e->format_block, &a, &fp, errp)) {
            blk_options_parse_cleanup(&fp);
            return false;
        }
        e->format_strings = g_steal_pointer(&fp.strings);
    }
    keys = json_object_get_members(e->block_args);
    for (GList *l = keys; l; l = l->next) {
        /* aio= is an export key that every driver takes (one with no
         * aio mode ignores it). */
        if (!g_hash_table_contains(a.used, l->data) &&
            strcmp(l->data, "aio")) {
            g_set_error(errp, VB_ERROR, 0, "unknown key '%s'%s%s (see "
                        "vhost-blkd --help)", (const char *)l->data,
                        e->driver ? " for driver=" : "",
                        e->driver ? e->driver : "");
            return false;
        }
    }
    parse.strings = e->block_strings;
    return blk_options_check(&e->block, &parse, errp);
}

bool export_opts_absolute_file(ExportOpts *e, GError **errp)
{
    g_autofree char *abs = NULL;
    const char *image;

    if (!e->file || g_path_is_absolute(e->file)) {
        return true;
    }
    abs = g_canonicalize_filename(e->file, NULL);
    json_object_set_string_member(e->block_args, "file", abs);
    if (!export_opts_parse_block(e, e->driver, &image, errp)) {
        return false;
    }
    export_opts_copy_block(e);
    return true;
}

/*
 * Check what no single key can: the keys an export needs, the driver's
 * keys (read by the driver), and that its image is there.  False with
 * @errp set.
 */
static bool export_opts_check(ExportOpts *e, const char **image,
                              GError **errp)
{
    const char *driver;

    if (!e->socket) {
        g_set_error(errp, VB_ERROR, 0, "socket=PATH is missing");
        return false;
    }
    driver = export_opts_driver(e, errp);
    if (!driver || !export_opts_parse_block(e, driver, image, errp)) {
        return false;
    }
    g_free(e->driver);
    e->driver = g_strdup(e->block.driver);
    export_opts_copy_block(e);
    if (e->throttle_set && e->throttle_group) {
        g_set_error(errp, VB_ERROR, 0, "give throttle-group=%s or the "
                    "export's own iops-*/bps-* limits, not both (change the "
                    "group's limits with qom-set or vhost-blk-ctl throttle)",
                    e->throttle_group);
        return false;
    }
    if (e->throttle_set && !throttle_limits_check(&e->throttle, errp)) {
        return false;
    }
    return true;
}

/* Without serial=, the serial is the base name of the image as named
 * (a file's name, an RBD image's name), cut to fit. */
static void export_opts_default_serial(ExportOpts *e, const char *image)
{
    g_autofree char *base = image ? g_path_get_basename(image) :
                                    g_strdup("");

    if (strlen(base) > VIRTIO_BLK_ID_BYTES) {
        base[VIRTIO_BLK_ID_BYTES] = '\0';
    }
    e->serial = g_strdup(base);
}

/* Parse one --export argument; NULL with @errp set.  Any thread. */
ExportOpts *export_opts_parse(const char *arg, GError **errp)
{
    g_auto(GStrv) items = g_strsplit(arg, ",", -1);
    ExportOpts *e = export_opts_new_default();
    const char *image = NULL;

    for (char **it = items; *it; it++) {
        char *eq = strchr(*it, '=');

        if (!**it) {
            continue;
        }
        if (!eq) {
            g_set_error(errp, VB_ERROR, 0, "'%s' is not KEY=VALUE", *it);
            goto fail;
        }
        *eq = '\0';
        if (!export_opts_set(e, *it, eq + 1, errp)) {
            goto fail;
        }
    }
    if (!export_opts_check(e, &image, errp)) {
        goto fail;
    }
    if (!e->serial_set) {
        export_opts_default_serial(e, image);
    }
    return e;

fail:
    export_opts_free(e);
    return NULL;
}

/* Any thread (one caller at a time per @list). */
bool export_opts_list_add(GPtrArray *list, const char *arg, GError **errp)
{
    ExportOpts *e = export_opts_parse(arg, errp);

    if (!e) {
        return false;
    }
    for (guint i = 0; i < list->len; i++) {
        ExportOpts *o = g_ptr_array_index(list, i);

        if (e->id && o->id && !strcmp(o->id, e->id)) {
            g_set_error(errp, VB_ERROR, 0, "id=%s is already used by "
                        "another --export; give each export its own id",
                        e->id);
            export_opts_free(e);
            return false;
        }
        if (!strcmp(o->socket, e->socket)) {
            g_set_error(errp, VB_ERROR, 0, "socket %s is already used by "
                        "another --export; give each export its own socket",
                        e->socket);
            export_opts_free(e);
            return false;
        }
    }
    g_ptr_array_add(list, e);
    return true;
}
