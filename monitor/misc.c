/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The monitor's other commands: query-iothreads, quit,
 * x-vhost-blk-log-level, and getfd / closefd (the fds a client passes for
 * block-export-add addr.type=fd).
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/error-report.h"

/* In the iothread: its kernel thread id. */
static void vb_iothread_tid_cb(void *opaque)
{
    *(int64_t *)opaque = gettid();
}

/* query-iothreads: the iothread objects (--object iothread), in QEMU's
 * IOThreadInfo shape.  The pool of --iothreads has no ids to give
 * block-export-add, so it is not listed. */
static JsonNode *vb_qmp_query_iothreads(void *opaque, JsonObject *args,
                                        GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (guint i = 0; i < s->iothreads->len; i++) {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);
        JsonObject *o = json_object_new();
        int64_t tid = 0;

        iothread_run_sync(t->iothread, vb_iothread_tid_cb, &tid);
        json_object_set_string_member(o, "id", t->id);
        json_object_set_int_member(o, "thread-id", tid);
        json_object_set_int_member(o, "poll-max-ns", t->poll_max_ns);
        json_object_set_int_member(o, "poll-grow", 0);
        json_object_set_int_member(o, "poll-shrink", 0);
        json_object_set_int_member(o, "aio-max-batch", 0);
        json_array_add_object_element(arr, o);
    }
    return vb_node_take_array(arr);
}

static JsonNode *vb_qmp_quit(void *opaque, JsonObject *args, GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    s->quit = true;
    return vb_empty();
}

/* x-vhost-blk-log-level [level=error|warn|info|debug]: set (if given) and
 * return the log level. */
static JsonNode *vb_qmp_x_log_level(void *opaque, JsonObject *args,
                                    GError **errp)
{
    static const char *const levels[] = {
        [LOG_LEVEL_ERROR] = "error",
        [LOG_LEVEL_WARN] = "warn",
        [LOG_LEVEL_INFO] = "info",
        [LOG_LEVEL_DEBUG] = "debug",
        NULL,
    };
    g_auto(QmpArgs) a = { 0 };
    int level = -1;
    JsonObject *ret;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_enum(&a, "level", levels, false, &level, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (level >= 0) {
        log_set_level(level);
        info_report("log level set to %s over QMP", levels[level]);
    }
    ret = json_object_new();
    json_object_set_string_member(ret, "level", levels[log_get_level()]);
    return vb_node_take_object(ret);
}

static void vb_named_fd_close(gpointer key, gpointer value, gpointer opaque)
{
    close(GPOINTER_TO_INT(value));
}

/* vb_state_cleanup(): close the fds getfd kept and no export took. */
void vb_named_fds_cleanup(VbState *s)
{
    g_hash_table_foreach(s->named_fds, vb_named_fd_close, NULL);
    g_hash_table_destroy(s->named_fds);
}

/* getfd: keep the fd the client passed with this command under a name
 * (replacing, and closing, one of that name). */
static JsonNode *vb_qmp_getfd(void *opaque, JsonObject *args, GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *name = NULL;
    gpointer old;
    int fd;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "fdname", true, &name, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    /* The fd first: it goes with this command, also when it fails. */
    fd = s->qmp ? qmp_server_take_fd(s->qmp) : -1;
    if (fd < 0) {
        vb_set_error(errp, "No file descriptor supplied via SCM_RIGHTS");
        return NULL;
    }
    if (g_ascii_isdigit(name[0])) {
        vb_set_error(errp, "Parameter 'fdname' expects a name not starting "
                     "with a digit");
        close(fd);
        return NULL;
    }
    if (g_hash_table_lookup_extended(s->named_fds, name, NULL, &old)) {
        close(GPOINTER_TO_INT(old));
    }
    g_hash_table_insert(s->named_fds, g_strdup(name), GINT_TO_POINTER(fd));
    return vb_empty();
}

static JsonNode *vb_qmp_closefd(void *opaque, JsonObject *args,
                                GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *name = NULL;
    gpointer fd;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "fdname", true, &name, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (!g_hash_table_lookup_extended(s->named_fds, name, NULL, &fd)) {
        vb_set_error(errp, "File descriptor named '%s' not found", name);
        return NULL;
    }
    close(GPOINTER_TO_INT(fd));
    g_hash_table_remove(s->named_fds, name);
    return vb_empty();
}


static const QmpCommand vb_misc_commands[] = {
    { "query-iothreads", vb_qmp_query_iothreads },
    { "x-vhost-blk-log-level", vb_qmp_x_log_level },
    { "getfd", vb_qmp_getfd },
    { "closefd", vb_qmp_closefd },
    { "quit", vb_qmp_quit },
};

void vb_misc_register(GArray *table)
{
    g_array_append_vals(table, vb_misc_commands,
                        G_N_ELEMENTS(vb_misc_commands));
}
