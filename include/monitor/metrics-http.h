/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Prometheus endpoint: GET /metrics over HTTP (libmicrohttpd), in a
 * thread of its own.
 *
 * Threads: the HTTP thread parses requests; a scrape asks the main thread
 * for a snapshot (a one-shot bottom half in @main_ctx that runs
 * metrics_collect() and metrics_render()) and waits for the text, so it
 * reads the queues exactly as query-blockstats does and never touches an
 * iothread.  With --seccomp on the HTTP thread runs under its own
 * allowlist (sandbox_apply_http_filter()), loaded before it reads any byte
 * from the network.
 */
#ifndef MONITOR_METRICS_HTTP_H
#define MONITOR_METRICS_HTTP_H

#include "qemu/osdep.h"
#include "qemu/aio.h"

typedef struct VbState VbState;
typedef struct MetricsHttp MetricsHttp;

/*
 * Check "ADDR:PORT" ("127.0.0.1:9100", "[::1]:9100", "localhost:9100";
 * port 0 picks a free one) without binding.  False with @errp set.
 */
bool metrics_http_parse_addr(const char *str, char **host, char **port,
                             GError **errp);

/* Main thread.  Bind and listen on @addr (as for metrics_http_parse_addr);
 * nothing is served until metrics_http_start(). */
MetricsHttp *metrics_http_new(VbState *s, AioContext *main_ctx,
                              const char *addr, GError **errp);
/* Main thread, after privileges were dropped.  Start the HTTP thread,
 * confined by seccomp if @seccomp. */
bool metrics_http_start(MetricsHttp *m, bool seccomp, GError **errp);
/* "127.0.0.1:9100": where it listens (the port picked for port 0). */
const char *metrics_http_get_address(MetricsHttp *m);
/* Main thread.  Stop serving (a scrape waiting for the main thread gets
 * 503) and close the socket. */
void metrics_http_free(MetricsHttp *m);

#endif
