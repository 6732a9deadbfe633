/* SPDX-License-Identifier: GPL-2.0-or-later */
/* --config FILE: options kept one per line in a file (see the header). */
#include "qemu/osdep.h"
#include "tools/config-file.h"

static bool config_name_ok(const char *name, size_t len)
{
    if (len == 0 || !g_ascii_isalpha(name[0])) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!g_ascii_isalnum(name[i]) && name[i] != '-' && name[i] != '_') {
            return false;
        }
    }
    return true;
}

/*
 * Where each argument of the expanded argv came from: "FILE:LINE" for
 * those read from a file, NULL for the command line's own (index = argv
 * index).  Lives as long as the expanded argv, i.e. until exit.
 */
static GPtrArray *config_origins;
/* Per argv index: the line was an option name without a value. */
static GArray *config_no_value;

/* Append the args of @text to @args and, if @origins, one "FILE:LINE"
 * (and a has-no-value flag in @no_value) per arg. */
static bool config_file_parse_lines(const char *name, const char *text,
                                    GPtrArray *args, GPtrArray *origins,
                                    GArray *no_value, GError **errp)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);

    for (guint i = 0; lines[i]; i++) {
        char *line = lines[i];
        size_t len = strlen(line);
        const char *opt, *value;
        size_t nlen;

        /* Trailing white space (and a CR from a file edited elsewhere). */
        while (len && g_ascii_isspace(line[len - 1])) {
            line[--len] = '\0';
        }
        while (*line == ' ' || *line == '\t') {
            line++;
        }
        if (!*line || *line == '#') {
            continue;
        }
        opt = line;
        if (g_str_has_prefix(opt, "--")) {
            opt += 2;
        }
        nlen = strcspn(opt, " \t=");
        if (!config_name_ok(opt, nlen)) {
            g_set_error(errp, VB_ERROR, 0, "%s:%u: '%s' does not start with "
                        "an option name (write 'NAME VALUE', e.g. 'iothreads "
                        "2', or '# ...' for a comment)", name, i + 1, line);
            return false;
        }
        value = opt + nlen;
        if (*value == '=') {
            g_set_error(errp, VB_ERROR, 0, "%s:%u: write '%.*s %s' (a space, "
                        "not '=', after the option name)", name, i + 1,
                        (int)nlen, opt, value + 1);
            return false;
        }
        while (*value == ' ' || *value == '\t') {
            value++;
        }
        if (nlen == strlen("config") && !strncmp(opt, "config", nlen)) {
            g_set_error(errp, VB_ERROR, 0, "%s:%u: a configuration file "
                        "cannot include another (--config)", name, i + 1);
            return false;
        }
        g_ptr_array_add(args, g_strdup_printf("--%.*s", (int)nlen, opt));
        if (origins) {
            bool none = !*value;

            g_ptr_array_add(origins, g_strdup_printf("%s:%u", name, i + 1));
            g_array_append_val(no_value, none);
        }
        if (*value) {
            g_ptr_array_add(args, g_strdup(value));
            if (origins) {
                bool none = false;

                g_ptr_array_add(origins, g_strdup_printf("%s:%u", name,
                                                         i + 1));
                g_array_append_val(no_value, none);
            }
        }
    }
    return true;
}

bool config_file_parse(const char *name, const char *text, GPtrArray *args,
                       GError **errp)
{
    return config_file_parse_lines(name, text, args, NULL, NULL, errp);
}

const char *config_file_arg_origin(int i)
{
    if (!config_origins || i < 0 || (guint)i >= config_origins->len) {
        return NULL;
    }
    return g_ptr_array_index(config_origins, i);
}

bool config_file_arg_lacks_value(int i)
{
    if (!config_no_value || i < 0 || (guint)i >= config_no_value->len) {
        return false;
    }
    return g_array_index(config_no_value, bool, i);
}

static bool config_file_read(const char *path, GPtrArray *args,
                             GPtrArray *origins, GArray *no_value,
                             GError **errp)
{
    g_autofree char *text = NULL;
    gsize len;

    if (!g_file_get_contents(path, &text, &len, errp)) {
        g_prefix_error(errp, "--config: ");
        return false;
    }
    if (len > CONFIG_FILE_MAX_BYTES) {
        g_set_error(errp, VB_ERROR, 0, "--config %s: larger than %d bytes; "
                    "is this the right file?", path, CONFIG_FILE_MAX_BYTES);
        return false;
    }
    if (strlen(text) != len) {
        g_set_error(errp, VB_ERROR, 0, "--config %s: contains a NUL byte; "
                    "it must be a text file", path);
        return false;
    }
    return config_file_parse_lines(path, text, args, origins, no_value, errp);
}

bool config_file_expand_args(int *argc, char ***argv, GError **errp)
{
    GPtrArray *args, *origins;
    GArray *no_value;
    bool found = false, none = false;
    int i;

    for (i = 1; i < *argc; i++) {
        if (!strcmp((*argv)[i], "--config") ||
            g_str_has_prefix((*argv)[i], "--config=")) {
            found = true;
            break;
        }
    }
    if (!found) {
        return true;
    }

    args = g_ptr_array_new();
    origins = g_ptr_array_new_with_free_func(g_free);
    no_value = g_array_new(false, false, sizeof(bool));
    g_ptr_array_add(args, g_strdup((*argv)[0]));
    g_ptr_array_add(origins, NULL);
    g_array_append_val(no_value, none);
    for (i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        const char *path = NULL;

        if (!strcmp(a, "--config")) {
            if (i + 1 >= *argc) {
                g_set_error(errp, VB_ERROR, 0, "--config needs a file name");
                goto fail;
            }
            path = (*argv)[++i];
        } else if (g_str_has_prefix(a, "--config=")) {
            path = a + strlen("--config=");
        }
        if (!path) {
            g_ptr_array_add(args, g_strdup(a));
            g_ptr_array_add(origins, NULL);
            g_array_append_val(no_value, none);
        } else if (!config_file_read(path, args, origins, no_value, errp)) {
            goto fail;
        }
    }
    if (config_origins) {
        g_ptr_array_unref(config_origins);
        g_array_unref(config_no_value);
    }
    config_origins = origins;
    config_no_value = no_value;
    *argc = args->len;
    g_ptr_array_add(args, NULL);
    /* Lives as long as the process, like the original argv. */
    *argv = (char **)g_ptr_array_free(args, false);
    return true;

fail:
    g_ptr_array_unref(origins);
    g_array_unref(no_value);
    g_ptr_array_set_free_func(args, g_free);
    g_ptr_array_free(args, true);
    return false;
}
