/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * --config FILE: command-line options kept in a file, one per line, for
 * service units (/etc/vhost-blk/NAME.conf).
 *
 *   # comment                      (also blank lines)
 *   export socket=/run/vhost-blk/vm1.sock,file=/srv/vm1.img
 *   iothreads 2
 *   seccomp on
 *   daemonize                      (an option that takes no value)
 *
 * A line is an option name (its leading "--" optional), then, after
 * spaces or tabs, its value: the rest of the line, taken verbatim except
 * trailing white space, so values may hold spaces and no quoting is
 * needed.  The lines become "--NAME" "VALUE" arguments in place of
 * "--config FILE", so everything the command line accepts works, and
 * options after --config on the command line come later (a later
 * --log-level wins, --export adds).
 *
 * Threads: main thread, before the command line is parsed.
 */
#ifndef TOOLS_CONFIG_FILE_H
#define TOOLS_CONFIG_FILE_H

#include "qemu/osdep.h"

/* Largest configuration file read (bytes). */
#define CONFIG_FILE_MAX_BYTES (1 << 20)

/*
 * Append the arguments that the text @text (of file @name, for messages)
 * stands for to @args (char *, owned).  False with @errp naming the file
 * and line on a malformed line.
 */
bool config_file_parse(const char *name, const char *text, GPtrArray *args,
                       GError **errp);

/*
 * Replace every "--config FILE" / "--config=FILE" in @argc/@argv with the
 * options FILE holds.  @argv is replaced by a new NULL-terminated vector
 * that lives until exit; untouched when no --config is given.  False with
 * @errp set when a file cannot be read or is malformed, or holds a config
 * option itself.
 */
bool config_file_expand_args(int *argc, char ***argv, GError **errp);

/*
 * Where argument @i of the argv that config_file_expand_args() made came
 * from: "FILE:LINE" if a configuration file held it, NULL if it was on the
 * command line (or nothing was expanded).  For error messages.
 */
const char *config_file_arg_origin(int i);

/* Whether argument @i came from a file line that named an option without
 * a value (e.g. a bare "export"). */
bool config_file_arg_lacks_value(int i);

#endif
