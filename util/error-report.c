/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Levelled logging to stderr or syslog, and the GError domain. */
#include "qemu/osdep.h"
#include <pthread.h>
#include <syslog.h>
#include "qemu/error-report.h"

static atomic_int log_level = LOG_LEVEL_INFO;
static atomic_bool log_syslog;
static pthread_mutex_t log_name_lock = PTHREAD_MUTEX_INITIALIZER;
static char *log_program_name;

G_DEFINE_QUARK(vb-error-quark, vb_error)

/* Any thread. */
void log_set_level(LogLevel level)
{
    atomic_store(&log_level, level);
}

/* Any thread. */
LogLevel log_get_level(void)
{
    return atomic_load(&log_level);
}

/* Any thread. */
bool log_enabled(LogLevel level)
{
    return level <= (LogLevel)atomic_load(&log_level);
}

/* Any thread. */
bool log_level_parse(const char *s, LogLevel *level)
{
    static const char *const names[] = {
        [LOG_LEVEL_ERROR] = "error",
        [LOG_LEVEL_WARN] = "warn",
        [LOG_LEVEL_INFO] = "info",
        [LOG_LEVEL_DEBUG] = "debug",
    };
    unsigned i;

    if (!s) {
        return false;
    }
    for (i = 0; i < ARRAY_SIZE(names); i++) {
        if (!g_ascii_strcasecmp(s, names[i])) {
            *level = i;
            return true;
        }
    }
    if (!g_ascii_strcasecmp(s, "warning")) {
        *level = LOG_LEVEL_WARN;
        return true;
    }
    return false;
}

/* Main thread, at startup (the syslog ident keeps pointing at it). */
void log_set_program_name(const char *name)
{
    pthread_mutex_lock(&log_name_lock);
    g_free(log_program_name);
    log_program_name = g_strdup(name);
    pthread_mutex_unlock(&log_name_lock);
}

/* Main thread. */
void log_use_syslog(bool on)
{
    if (on && !atomic_load(&log_syslog)) {
        pthread_mutex_lock(&log_name_lock);
        openlog(log_program_name ? log_program_name : g_get_prgname(),
                LOG_PID | LOG_NDELAY, LOG_DAEMON);
        pthread_mutex_unlock(&log_name_lock);
    }
    atomic_store(&log_syslog, on);
}

static const char *log_level_label(LogLevel level)
{
    switch (level) {
    case LOG_LEVEL_ERROR:
        return "error";
    case LOG_LEVEL_WARN:
        return "warning";
    case LOG_LEVEL_INFO:
        return "info";
    default:
        return "debug";
    }
}

static int log_level_priority(LogLevel level)
{
    switch (level) {
    case LOG_LEVEL_ERROR:
        return LOG_ERR;
    case LOG_LEVEL_WARN:
        return LOG_WARNING;
    case LOG_LEVEL_INFO:
        return LOG_INFO;
    default:
        return LOG_DEBUG;
    }
}

/* Any thread.  One write per message, so lines never interleave. */
void log_msg(LogLevel level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (!log_enabled(level)) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (atomic_load(&log_syslog)) {
        syslog(log_level_priority(level), "%s: %s", log_level_label(level),
               msg);
        return;
    }

    pthread_mutex_lock(&log_name_lock);
    fprintf(stderr, "%s: %s: %s\n",
            log_program_name ? log_program_name
                             : (g_get_prgname() ? g_get_prgname() : "vhost-blk"),
            log_level_label(level), msg);
    pthread_mutex_unlock(&log_name_lock);
}

/* Any thread. */
void error_report_gerror(GError *err, const char *prefix)
{
    if (!err) {
        return;
    }
    if (prefix) {
        error_report("%s: %s", prefix, err->message);
    } else {
        error_report("%s", err->message);
    }
    g_error_free(err);
}
