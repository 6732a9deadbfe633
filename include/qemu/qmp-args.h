/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * QMP arguments: the QMP error classes, and typed access to a command's
 * "arguments" object with QEMU's QAPI error messages.  The same handlers
 * serve the command line: keyval_parse() turns "a=1,b.c=x" into a JSON
 * object of strings (nested at the dots), and QmpArgs in keyval mode
 * accepts "on"/"off" and decimal strings where QMP wants booleans and
 * integers, as QEMU's keyval input visitor does.
 *
 * Threads: main thread only (plain data, no shared state).
 */
#ifndef QEMU_QMP_ARGS_H
#define QEMU_QMP_ARGS_H

#include "qemu/osdep.h"
#include <json-glib/json-glib.h>

/* GError codes of QMP_ERROR: QEMU's ErrorClass, in its order. */
typedef enum QmpErrorClass {
    QMP_ERROR_GENERIC,
    QMP_ERROR_COMMAND_NOT_FOUND,
    QMP_ERROR_DEVICE_NOT_ACTIVE,
    QMP_ERROR_DEVICE_NOT_FOUND,
    QMP_ERROR_KVM_MISSING_CAP,
} QmpErrorClass;

#define QMP_ERROR qmp_error_quark()
GQuark qmp_error_quark(void);
/* "GenericError", ...; any other GError domain is a GenericError. */
const char *qmp_error_class_name(const GError *err);

/*
 * Parse QEMU's keyval syntax: KEY=VALUE pairs separated by ',' (",," is a
 * literal comma in a value), dotted keys build nested objects.  The first
 * element may omit "KEY=" when @implied_key is given (e.g. "driver" for
 * --blockdev).  With @flags_ok (QemuOpts, --chardev), a bare "KEY" means
 * KEY=on and "noKEY" KEY=off.  NULL with @errp set on malformed input
 * (empty key, duplicate key, a key both a value and an object).
 */
JsonObject *keyval_parse(const char *str, const char *implied_key,
                         bool flags_ok, GError **errp);

/* One command's (or one nested object's) arguments being read. */
typedef struct QmpArgs {
    JsonObject *obj;            /* NULL: no arguments */
    bool keyval;                /* values came from the command line */
    char *prefix;               /* "addr." for nested objects, or "" */
    GHashTable *used;           /* member names consumed */
} QmpArgs;

void qmp_args_init(QmpArgs *a, JsonObject *obj, bool keyval,
                   const char *prefix);
void qmp_args_cleanup(QmpArgs *a);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(QmpArgs, qmp_args_cleanup)

/*
 * Getters.  Return false with @errp set on a type error, or if @required
 * and the member is missing ("Parameter 'x' is missing"); *present says
 * whether it was given (may be NULL).  Untouched outputs keep their
 * defaults when absent.
 */
bool qmp_args_str(QmpArgs *a, const char *name, bool required,
                  const char **out, GError **errp);
bool qmp_args_bool(QmpArgs *a, const char *name, bool *out, GError **errp);
bool qmp_args_int(QmpArgs *a, const char *name, bool required,
                  int64_t *out, bool *present, GError **errp);
/* QAPI "size": with keyval, k/M/G/T suffixes are accepted too. */
bool qmp_args_size(QmpArgs *a, const char *name, bool required,
                   uint64_t *out, bool *present, GError **errp);
/* An enum: the value must be one of @values (NULL-terminated); *out is
 * its index. */
bool qmp_args_enum(QmpArgs *a, const char *name, const char *const *values,
                   bool required, int *out, GError **errp);
/*
 * An enum whose values are the names in a table of structs: @n names,
 * the first at @first, each @stride bytes after the one before; *out is
 * the index of the entry given.  Use QMP_ARGS_ENUM_TABLE().
 */
bool qmp_args_enum_names(QmpArgs *a, const char *name,
                         const char *const *first, size_t n, size_t stride,
                         bool required, int *out, GError **errp);
/* qmp_args_enum_names() of @key over the array @table, whose entries
 * name themselves in their member @field (a const char *). */
#define QMP_ARGS_ENUM_TABLE(a, key, table, field, required, out, errp)    \
    qmp_args_enum_names((a), (key), &(table)[0].field,                     \
                        G_N_ELEMENTS(table), sizeof((table)[0]),           \
                        (required), (out), (errp))
/* A nested object: fills @sub (prefix "NAME."); false if it is not an
 * object, or if @required and missing.  *present = whether given. */
bool qmp_args_object(QmpArgs *a, const char *name, bool required,
                     QmpArgs *sub, bool *present, GError **errp);
/* A list of unsigned integers (QAPI ['uint64']), at most @max: *out is
 * g_new'd (the caller frees it), *n_out its length; both zero if absent. */
bool qmp_args_uint_list(QmpArgs *a, const char *name, unsigned int max,
                        uint64_t **out, unsigned int *n_out, bool *present,
                        GError **errp);
/*
 * A list given as a JSON array (QMP, JSON) or, in keyval, as an object
 * with the keys "0", "1", ... (server.0.host=...): *@out gets its
 * elements in order (a GPtrArray of JsonNode the caller frees, without
 * freeing the nodes), NULL if absent.  False with @errp set if it is
 * neither.
 */
bool qmp_args_list(QmpArgs *a, const char *name, GPtrArray **out,
                   GError **errp);
/* The string @n holds (keyval gives every value as one), or NULL. */
const char *qmp_node_str(JsonNode *n);
/* Whether @name was given (does not consume it). */
bool qmp_args_has(QmpArgs *a, const char *name);
/* Every member consumed?  Otherwise "Parameter 'x' is unexpected". */
bool qmp_args_check_done(QmpArgs *a, GError **errp);

/*
 * A size as the project's own syntax writes it: a number (decimal, 0x hex
 * or 0 octal) with an optional k, M, G or T suffix (binary multiples),
 * which may be followed by "iB" or "B" (1G, 1GiB, 1GB: the same).  False
 * if @s is not one or overflows.  Any thread.
 */
bool qemu_parse_size(const char *s, uint64_t *out);

#endif
