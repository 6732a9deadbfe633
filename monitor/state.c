/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The monitor's state (see include/monitor/state.h): its creation and
 * teardown, which go through every command file, and the QMP command
 * table they each add their commands to.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"

void vb_set_error(GError **errp, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_propagate_error(errp, g_error_new_valist(QMP_ERROR, QMP_ERROR_GENERIC,
                                               fmt, ap));
    va_end(ap);
}

JsonNode *vb_node_take_object(JsonObject *o)
{
    JsonNode *n = json_node_init(json_node_alloc(), JSON_NODE_OBJECT);

    json_node_take_object(n, o);
    return n;
}

JsonNode *vb_node_take_array(JsonArray *a)
{
    JsonNode *n = json_node_init(json_node_alloc(), JSON_NODE_ARRAY);

    json_node_take_array(n, a);
    return n;
}

JsonNode *vb_empty(void)
{
    return vb_node_take_object(json_object_new());
}

/* ---- state ------------------------------------------------------------ */

void vb_state_init(VbState *s, AioContext *main_ctx, IOThread **pool,
                   unsigned int n_pool, int64_t poll_max_ns)
{
    memset(s, 0, sizeof(*s));
    s->main_ctx = main_ctx;
    s->pool = pool;
    s->n_pool = n_pool;
    s->poll_max_ns = poll_max_ns;
    s->iothreads = g_ptr_array_new();
    s->secrets = g_ptr_array_new();
    s->throttle_groups = g_ptr_array_new_with_free_func(
        (GDestroyNotify)throttle_group_unref);
    s->nodes = g_ptr_array_new();
    s->pending_nodes = g_ptr_array_new();
    s->exports = g_ptr_array_new();
    s->named_fds = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                         NULL);
    s->reap_bh = aio_bh_new(main_ctx, vb_export_reap_bh, s, "vb-export-reap");
    vb_jobs_init(s);
}

void vb_state_cleanup(VbState *s)
{
    /* The exports first (they use nodes and iothreads), then the nodes
     * (a throttle node holds its group).  The jobs before them all:
     * they use nodes and send events. */
    vb_jobs_cleanup(s);
    vb_exports_cleanup(s);
    vb_nodes_cleanup(s);
    vb_objects_cleanup(s);
    vb_named_fds_cleanup(s);
    qemu_bh_delete(s->reap_bh);
    s->reap_bh = NULL;
}

/* ---- the command table ------------------------------------------------- */

const QmpCommand *vb_qmp_commands(void)
{
    static GArray *table;

    if (!table) {
        /* Zero-terminated: the { NULL } that ends QmpServerConfig's. */
        table = g_array_new(true, true, sizeof(QmpCommand));
        vb_blockdev_register(table);
        vb_objects_register(table);
        vb_export_register(table);
        vb_nbd_register(table);
        vb_query_register(table);
        vb_misc_register(table);
        vb_jobs_register(table);
    }
    return (const QmpCommand *)table->data;
}
