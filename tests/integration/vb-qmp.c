/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The integration tests' QMP client (vb-qmp.h). */
#include "qemu/osdep.h"
#include "vb-qmp.h"

#include <sys/socket.h>
#include <sys/un.h>

char *vb_qmp_line(VbQmp *q)
{
    for (;;) {
        char *nl = strchr(q->in->str, '\n');
        char buf[4096];
        ssize_t n;

        if (nl) {
            char *line = g_strndup(q->in->str, nl - q->in->str);

            g_string_erase(q->in, 0, nl - q->in->str + 1);
            return line;
        }
        n = read(q->fd, buf, sizeof(buf));
        g_assert_cmpint(n, >, 0);
        g_string_append_len(q->in, buf, n);
    }
}

JsonNode *vb_qmp(VbQmp *q, const char *cmd, char **err)
{
    g_autofree char *msg = g_strdup_printf("%s\n", cmd);

    g_assert_cmpint(write(q->fd, msg, strlen(msg)), ==, strlen(msg));
    for (;;) {
        g_autofree char *line = vb_qmp_line(q);
        g_autoptr(JsonParser) p = json_parser_new();
        JsonObject *o;

        g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
        o = json_node_get_object(json_parser_get_root(p));
        if (json_object_has_member(o, "event")) {
            continue;
        }
        if (json_object_has_member(o, "return")) {
            return json_node_copy(json_object_get_member(o, "return"));
        }
        g_assert_true(json_object_has_member(o, "error"));
        if (!err) {
            g_error("QMP %s failed: %s", cmd, line);
        }
        *err = g_strdup(json_object_get_string_member(
            json_object_get_object_member(o, "error"), "desc"));
        return NULL;
    }
}

void vb_qmp_ok(VbQmp *q, const char *cmd)
{
    json_node_unref(vb_qmp(q, cmd, NULL));
}

void vb_qmp_fails(VbQmp *q, const char *cmd, const char *desc)
{
    g_autofree char *err = NULL;

    g_assert_null(vb_qmp(q, cmd, &err));
    g_assert_cmpstr(err, ==, desc);
}

char *vb_qmp_error(VbQmp *q, const char *cmd)
{
    char *err = NULL;
    JsonNode *r = vb_qmp(q, cmd, &err);

    if (r) {
        json_node_unref(r);
    }
    return err;
}

void vb_qmp_connect(VbQmp *q, const char *path, VbDaemon *d)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autofree char *greeting = NULL;

    q->fd = -1;
    q->in = g_string_new(NULL);
    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    for (int i = 0; i < 600; i++) {
        q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(q->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            break;
        }
        close(q->fd);
        q->fd = -1;
        g_assert_true(vb_daemon_alive(d));
        g_usleep(50 * 1000);
    }
    g_assert_cmpint(q->fd, >=, 0);
    greeting = vb_qmp_line(q);
    g_assert_nonnull(strstr(greeting, "QMP"));
    vb_qmp_ok(q, "{\"execute\":\"qmp_capabilities\"}");
}

void vb_qmp_close(VbQmp *q)
{
    if (q->fd >= 0) {
        close(q->fd);
        q->fd = -1;
    }
    if (q->in) {
        g_string_free(q->in, true);
        q->in = NULL;
    }
}
