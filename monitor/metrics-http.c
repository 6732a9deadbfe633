/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Prometheus endpoint (GET /metrics) served by libmicrohttpd; see
 * monitor/metrics-http.h.
 *
 * Theory of operation.  libmicrohttpd runs its own polling thread (the
 * "HTTP thread") on a listening socket bound by the main thread.  That
 * thread is created by a short-lived starter thread which first loads the
 * HTTP seccomp filter on itself, so the HTTP thread inherits it before it
 * accepts anything (a seccomp filter is per thread and inherited by the
 * threads created after it; the main thread stays unconfined).
 *
 * A scrape builds its text in the main thread: the HTTP thread queues a
 * MetricsJob as a one-shot bottom half in the main AioContext and waits on
 * metrics_lock/cond.  The main thread collects and renders, then marks
 * the job done.  Shutdown (metrics_http_free(), main thread) sets
 * m->closing first: a waiting HTTP thread then gives up on its job
 * (abandoned = true, answered 503) instead of waiting for a main thread
 * that is now stopping the HTTP thread itself, and the bottom half, when
 * it runs later, only frees an abandoned job.  Jobs live on the heap so
 * that either side can be the last one to look at it.
 *
 * Pages are cached (include/monitor/metrics.h, metrics_page_action()): a
 * page is one libmicrohttpd response, reference-counted by it, that the
 * HTTP thread queues on every connection asking within METRICS_CACHE_NS
 * of its render; the main thread renders at most one page a second
 * however many clients scrape.  A page counts as alive until its last
 * connection is done with it (the response's free callback); while
 * METRICS_PAGES_MAX are, scrapes get the cached one, so clients that never
 * read hold at most that many pages' memory, not one each.  The cache is
 * the HTTP thread's alone (libmicrohttpd runs every connection in that
 * one thread); the alive counts are atomic because the last references
 * go in metrics_http_free() too.
 */
#include "qemu/osdep.h"
#include "monitor/metrics-http.h"
#include "monitor/metrics.h"
#include "monitor/state.h"
#include "qemu/error-report.h"
#include "qemu/sandbox.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

struct MetricsHttp {
    VbState *state;
    AioContext *main_ctx;
    int listen_fd;
    char *address;              /* "HOST:PORT" as bound */
    struct MHD_Daemon *daemon;
    bool closing;               /* under metrics_lock */
    /* The page cache: HTTP thread only. */
    struct MHD_Response *page;  /* the cached page, or NULL */
    int64_t page_ns;            /* when it was rendered (monotonic) */
    uint64_t renders;
    uint64_t stale;
    _Atomic unsigned int pages_alive;   /* the cached one included */
    _Atomic uint64_t bytes_alive;
    /* metrics_http_start()'s starter thread: */
    bool seccomp;
    GError *start_err;
};

typedef struct MetricsJob {
    MetricsHttp *m;             /* not used once abandoned */
    GString *text;              /* done: the page */
    bool done;
    bool abandoned;
    MetricsSnapshot http;       /* the have_http counters for the page */
} MetricsJob;

/* A page alive: what its free callback gives back. */
typedef struct MetricsPage {
    MetricsHttp *m;
    char *text;
    size_t len;
} MetricsPage;

/* One endpoint per process; the lock and condition are shared by jobs. */
static pthread_mutex_t metrics_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t metrics_cond = PTHREAD_COND_INITIALIZER;

bool metrics_http_parse_addr(const char *str, char **host, char **port,
                             GError **errp)
{
    const char *colon;
    g_autofree char *h = NULL;
    char *end;
    unsigned long p;

    if (str[0] == '[') {
        const char *close = strchr(str, ']');

        if (!close || close[1] != ':') {
            goto bad;
        }
        h = g_strndup(str + 1, close - str - 1);
        colon = close + 1;
    } else {
        colon = strrchr(str, ':');
        if (!colon || strchr(str, ':') != colon) {
            goto bad;
        }
        h = g_strndup(str, colon - str);
    }
    if (!*h || !g_ascii_isdigit(colon[1])) {
        goto bad;
    }
    errno = 0;
    p = strtoul(colon + 1, &end, 10);
    if (*end || errno || p > 65535) {
        goto bad;
    }
    *host = g_steal_pointer(&h);
    *port = g_strdup(colon + 1);
    return true;

bad:
    g_set_error(errp, VB_ERROR, 0, "--metrics %s: give ADDR:PORT, e.g. "
                "127.0.0.1:9100 or [::1]:9100 (port 0 picks a free one)",
                str);
    return false;
}

MetricsHttp *metrics_http_new(VbState *s, AioContext *main_ctx,
                              const char *addr, GError **errp)
{
    g_autofree char *host = NULL, *port = NULL;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_PASSIVE | AI_ADDRCONFIG,
    }, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    char nhost[NI_MAXHOST], nport[NI_MAXSERV];
    int fd = -1, r, one = 1, err = 0;
    MetricsHttp *m;

    if (!metrics_http_parse_addr(addr, &host, &port, errp)) {
        return NULL;
    }
    r = getaddrinfo(host, port, &hints, &res);
    if (r) {
        g_set_error(errp, VB_ERROR, 0, "--metrics %s: cannot resolve '%s': "
                    "%s", addr, host, gai_strerror(r));
        return NULL;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, 16) == 0) {
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "--metrics %s: cannot listen: %s%s",
                    addr, g_strerror(err), err == EADDRINUSE ?
                    " (another program has that port: pick another, or 0 "
                    "for a free one)" : "");
        return NULL;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0 ||
        getnameinfo((struct sockaddr *)&ss, sslen, nhost, sizeof(nhost),
                    nport, sizeof(nport), NI_NUMERICHOST | NI_NUMERICSERV)) {
        g_strlcpy(nhost, host, sizeof(nhost));
        g_strlcpy(nport, port, sizeof(nport));
    }

    m = g_new0(MetricsHttp, 1);
    m->state = s;
    m->main_ctx = main_ctx;
    m->listen_fd = fd;
    m->address = ss.ss_family == AF_INET6 ?
                 g_strdup_printf("[%s]:%s", nhost, nport) :
                 g_strdup_printf("%s:%s", nhost, nport);
    return m;
}

const char *metrics_http_get_address(MetricsHttp *m)
{
    return m->address;
}

/* Main thread: build the page of @opaque's job. */
static void metrics_job_bh(void *opaque)
{
    MetricsJob *job = opaque;
    MetricsSnapshot *snap;
    GString *text;

    pthread_mutex_lock(&metrics_lock);
    if (job->abandoned) {
        pthread_mutex_unlock(&metrics_lock);
        g_free(job);
        return;
    }
    pthread_mutex_unlock(&metrics_lock);

    /* Not abandoned: m is alive, only this thread frees it. */
    snap = metrics_collect(job->m->state);
    snap->have_http = true;
    snap->http_renders = job->http.http_renders;
    snap->http_stale = job->http.http_stale;
    snap->http_pages_held = job->http.http_pages_held;
    snap->http_bytes_held = job->http.http_bytes_held;
    text = g_string_sized_new(16384);
    metrics_render(snap, text);
    metrics_snapshot_free(snap);

    pthread_mutex_lock(&metrics_lock);
    job->text = text;
    job->done = true;
    pthread_cond_broadcast(&metrics_cond);
    pthread_mutex_unlock(&metrics_lock);
}

/* HTTP thread: the page, or NULL when the daemon is shutting down. */
static GString *metrics_fetch(MetricsHttp *m)
{
    MetricsJob *job;
    GString *text = NULL;

    pthread_mutex_lock(&metrics_lock);
    if (m->closing) {
        pthread_mutex_unlock(&metrics_lock);
        return NULL;
    }
    job = g_new0(MetricsJob, 1);
    job->m = m;
    job->http.http_renders = ++m->renders;
    job->http.http_stale = m->stale;
    job->http.http_pages_held = atomic_load(&m->pages_alive);
    job->http.http_bytes_held = atomic_load(&m->bytes_alive);
    aio_bh_schedule_oneshot(m->main_ctx, metrics_job_bh, job, "metrics");
    while (!job->done && !m->closing) {
        pthread_cond_wait(&metrics_cond, &metrics_lock);
    }
    if (job->done) {
        text = job->text;
        g_free(job);
    } else {
        job->abandoned = true;  /* the bottom half frees it */
    }
    pthread_mutex_unlock(&metrics_lock);
    return text;
}

static enum MHD_Result metrics_reply(struct MHD_Connection *conn,
                                     unsigned int code, const char *type,
                                     GString *body)
{
    struct MHD_Response *resp;
    enum MHD_Result r;
    size_t len = body->len;

    resp = MHD_create_response_from_buffer_with_free_callback(
        len, g_string_free(body, false), g_free);
    if (!resp) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    r = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return r;
}

/* The last connection (or the cache) let go of a page. */
static void metrics_page_free(void *opaque)
{
    MetricsPage *p = opaque;

    atomic_fetch_sub(&p->m->bytes_alive, p->len);
    atomic_fetch_sub(&p->m->pages_alive, 1);
    g_free(p->text);
    g_free(p);
}

/* HTTP thread: the page to send, refreshed if it is due and allowed;
 * NULL when the daemon is shutting down (or out of memory). */
static struct MHD_Response *metrics_page_get(MetricsHttp *m)
{
    int64_t now = g_get_monotonic_time() * 1000;
    MetricsPage *p;
    GString *text;

    switch (metrics_page_action(m->page ? now - m->page_ns : -1,
                                atomic_load(&m->pages_alive))) {
    case METRICS_PAGE_REUSE:
        return m->page;
    case METRICS_PAGE_STALE:
        m->stale++;
        return m->page;
    case METRICS_PAGE_RENDER:
        break;
    }
    text = metrics_fetch(m);
    if (!text) {
        return NULL;
    }
    p = g_new0(MetricsPage, 1);
    p->m = m;
    p->len = text->len;
    p->text = g_string_free(text, false);
    atomic_fetch_add(&m->pages_alive, 1);
    atomic_fetch_add(&m->bytes_alive, p->len);
    if (m->page) {
        /* The cache's reference; connections sending it keep theirs. */
        MHD_destroy_response(m->page);
        m->page = NULL;
    }
    m->page = MHD_create_response_from_buffer_with_free_callback_cls(
        p->len, p->text, metrics_page_free, p);
    if (!m->page) {
        metrics_page_free(p);
        return NULL;
    }
    MHD_add_response_header(m->page, MHD_HTTP_HEADER_CONTENT_TYPE,
                            METRICS_CONTENT_TYPE);
    /* The window starts once the page exists: the main thread spends at
     * most one render per METRICS_CACHE_NS on scrapes. */
    m->page_ns = g_get_monotonic_time() * 1000;
    return m->page;
}

/* HTTP thread. */
static enum MHD_Result metrics_access(void *cls, struct MHD_Connection *conn,
                                      const char *url, const char *method,
                                      const char *version,
                                      const char *upload_data,
                                      size_t *upload_data_size,
                                      void **req_cls)
{
    MetricsHttp *m = cls;
    struct MHD_Response *page;

    /* Called once for the header, again for any body: answer the first
     * call and let libmicrohttpd discard a body. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) &&
        strcmp(method, MHD_HTTP_METHOD_HEAD)) {
        return metrics_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                             g_string_new("only GET /metrics is served\n"));
    }
    if (strcmp(url, "/metrics")) {
        return metrics_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                             g_string_new("not found: vhost-blkd serves "
                                          "/metrics only\n"));
    }
    page = metrics_page_get(m);
    if (!page) {
        return metrics_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                             g_string_new("vhost-blkd is shutting down\n"));
    }
    return MHD_queue_response(conn, MHD_HTTP_OK, page);
}

/* libmicrohttpd's errors, in the HTTP thread: rare, never per request. */
static void metrics_log(void *cls, const char *fmt, va_list ap)
{
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);

    g_strchomp(msg);
    warn_report("metrics: %s", msg);
}

/* Starter thread: confine itself, then create the HTTP thread, which
 * inherits the filter. */
static void *metrics_start_thread(void *opaque)
{
    MetricsHttp *m = opaque;

    if (m->seccomp && !sandbox_apply_http_filter(&m->start_err)) {
        return NULL;
    }
    m->daemon = MHD_start_daemon(MHD_USE_POLL_INTERNAL_THREAD |
                                 MHD_USE_ERROR_LOG,
                                 0, NULL, NULL, metrics_access, m,
                                 MHD_OPTION_EXTERNAL_LOGGER, metrics_log,
                                 NULL,
                                 MHD_OPTION_LISTEN_SOCKET, m->listen_fd,
                                 MHD_OPTION_CONNECTION_LIMIT, 16,
                                 MHD_OPTION_CONNECTION_TIMEOUT, 10,
                                 MHD_OPTION_END);
    if (!m->daemon) {
        g_set_error(&m->start_err, VB_ERROR, 0, "--metrics %s: "
                    "libmicrohttpd could not start its thread", m->address);
    }
    return NULL;
}

bool metrics_http_start(MetricsHttp *m, bool seccomp, GError **errp)
{
    pthread_t t;
    int r;

    m->seccomp = seccomp;
    r = pthread_create(&t, NULL, metrics_start_thread, m);
    if (r) {
        g_set_error(errp, VB_ERROR, 0, "--metrics: cannot create a thread: "
                    "%s", g_strerror(r));
        return false;
    }
    pthread_join(t, NULL);
    if (m->start_err) {
        g_propagate_error(errp, m->start_err);
        m->start_err = NULL;
        return false;
    }
    info_report("metrics: serving http://%s/metrics%s", m->address,
                seccomp ? " (HTTP thread confined by seccomp)" : "");
    return true;
}

void metrics_http_free(MetricsHttp *m)
{
    if (!m) {
        return;
    }
    pthread_mutex_lock(&metrics_lock);
    m->closing = true;
    pthread_cond_broadcast(&metrics_cond);
    pthread_mutex_unlock(&metrics_lock);
    if (m->daemon) {
        /* Joins the HTTP thread (a scrape in progress answers 503) and
         * closes the listening socket, which it took over. */
        MHD_stop_daemon(m->daemon);
        m->listen_fd = -1;
    }
    if (m->page) {
        MHD_destroy_response(m->page);
    }
    if (m->listen_fd >= 0) {
        close(m->listen_fd);
    }
    g_free(m->address);
    g_free(m);
}
