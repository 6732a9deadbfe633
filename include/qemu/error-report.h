/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Logging with levels.  Messages go to stderr (or syslog once daemonized),
 * prefixed with the program name and level.  Not for the I/O hot path.
 * Thread-safe.
 */
#ifndef QEMU_ERROR_REPORT_H
#define QEMU_ERROR_REPORT_H

#include "qemu/osdep.h"

typedef enum LogLevel {
    LOG_LEVEL_ERROR,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
} LogLevel;

void log_set_level(LogLevel level);
LogLevel log_get_level(void);
/* Parse "error" | "warn" | "info" | "debug"; false if unknown. */
bool log_level_parse(const char *s, LogLevel *level);
void log_set_program_name(const char *name);
void log_use_syslog(bool on);
bool log_enabled(LogLevel level);

void log_msg(LogLevel level, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

#define error_report(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define warn_report(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define info_report(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define debug_report(...) \
    do { if (log_enabled(LOG_LEVEL_DEBUG)) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)

/* Report a GError at error level ("prefix: message") and free it. */
void error_report_gerror(GError *err, const char *prefix);

#endif
