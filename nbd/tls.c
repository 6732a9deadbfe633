/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * TLS for the NBD server on GnuTLS: see include/nbd/tls.h.
 */
#include "qemu/osdep.h"
#include "nbd/tls.h"
#include "nbd/authz.h"
#include "qemu/error-report.h"

#include <sys/socket.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

struct NbdTlsCreds {
    bool psk;
    bool verify_peer;
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk_creds;
    char *psk_file;
    char **allow;               /* NULL: anyone authenticated */
};

/*
 * After the handshake the session reads the socket through @rbuf: GnuTLS
 * asks its transport for each record's 5-byte header and then its body,
 * two recv() calls per 16 KiB record, which with a client writing 1 MiB
 * requests made recv() 55 times as frequent as without TLS and the
 * system calls the largest share of the server's time.  One recv() now
 * fills up to NBD_TLS_RBUF bytes, several records' worth.
 */
#define NBD_TLS_RBUF (256u << 10)

struct NbdTls {
    NbdTlsCreds *creds;
    const NbdAuthz *authz;      /* tls-authz=ID, or NULL */
    gnutls_session_t s;
    bool done;
    int fd;
    uint8_t *rbuf;              /* NBD_TLS_RBUF bytes once @done */
    size_t rpos, rlen;          /* unread: rbuf[rpos, rlen) */
};

static bool nbd_tls_global_init(GError **errp)
{
    static int ret = 1;

    if (ret == 1) {
        ret = gnutls_global_init();
    }
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot initialise GnuTLS: %s",
                    gnutls_strerror(ret));
        return false;
    }
    return true;
}

static char *nbd_tls_file(const char *dir, const char *name, bool required,
                          GError **errp)
{
    char *p = g_build_filename(dir, name, NULL);

    if (access(p, R_OK) < 0) {
        if (required) {
            g_set_error(errp, VB_ERROR, 0, "cannot read %s: %s (dir= must "
                        "hold ca-cert.pem, server-cert.pem and "
                        "server-key.pem)", p, g_strerror(errno));
        }
        g_free(p);
        return NULL;
    }
    return p;
}

NbdTlsCreds *nbd_tls_creds_new_x509(const char *dir, bool verify_peer,
                                    GError **errp)
{
    g_autofree char *ca = NULL, *cert = NULL, *key = NULL, *crl = NULL;
    NbdTlsCreds *c;
    int r;

    if (!nbd_tls_global_init(errp)) {
        return NULL;
    }
    ca = nbd_tls_file(dir, "ca-cert.pem", true, errp);
    if (!ca) {
        return NULL;
    }
    cert = nbd_tls_file(dir, "server-cert.pem", true, errp);
    if (!cert) {
        return NULL;
    }
    key = nbd_tls_file(dir, "server-key.pem", true, errp);
    if (!key) {
        return NULL;
    }
    crl = nbd_tls_file(dir, "ca-crl.pem", false, NULL);
    c = g_new0(NbdTlsCreds, 1);
    c->verify_peer = verify_peer;
    gnutls_certificate_allocate_credentials(&c->x509);
    r = gnutls_certificate_set_x509_trust_file(c->x509, ca,
                                               GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s", ca, gnutls_strerror(r));
        goto fail;
    }
    if (crl) {
        r = gnutls_certificate_set_x509_crl_file(c->x509, crl,
                                                 GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            g_set_error(errp, VB_ERROR, 0, "%s: %s", crl,
                        gnutls_strerror(r));
            goto fail;
        }
    }
    r = gnutls_certificate_set_x509_key_file(c->x509, cert, key,
                                             GNUTLS_X509_FMT_PEM);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s / %s: %s", cert, key,
                    gnutls_strerror(r));
        goto fail;
    }
    return c;

fail:
    nbd_tls_creds_free(c);
    return NULL;
}

/* keys.psk: "username:hexkey" lines.  Read at each handshake, so a key
 * file can be replaced without a restart (as QEMU). */
static int nbd_tls_psk_lookup(gnutls_session_t s, const char *user,
                              gnutls_datum_t *key)
{
    NbdTlsCreds *c = gnutls_session_get_ptr(s);
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    size_t ulen = strlen(user);
    int ret = -1;

    if (!g_file_get_contents(c->psk_file, &text, NULL, NULL)) {
        return -1;
    }
    lines = g_strsplit(text, "\n", -1);
    for (guint i = 0; lines[i]; i++) {
        const char *l = lines[i];
        gnutls_datum_t hex;

        if (strncmp(l, user, ulen) || l[ulen] != ':') {
            continue;
        }
        hex.data = (unsigned char *)l + ulen + 1;
        hex.size = strcspn(l + ulen + 1, "\r");
        if (gnutls_hex_decode2(&hex, key) == 0) {
            ret = 0;
        }
        break;
    }
    explicit_bzero(text, strlen(text));
    for (guint i = 0; lines[i]; i++) {
        explicit_bzero(lines[i], strlen(lines[i]));
    }
    return ret;
}

NbdTlsCreds *nbd_tls_creds_new_psk(const char *dir, GError **errp)
{
    NbdTlsCreds *c;
    char *file;

    if (!nbd_tls_global_init(errp)) {
        return NULL;
    }
    file = g_build_filename(dir, "keys.psk", NULL);
    if (access(file, R_OK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot read %s: %s (dir= must "
                    "hold keys.psk, lines of username:hexkey)", file,
                    g_strerror(errno));
        g_free(file);
        return NULL;
    }
    c = g_new0(NbdTlsCreds, 1);
    c->psk = true;
    c->psk_file = file;
    gnutls_psk_allocate_server_credentials(&c->psk_creds);
    gnutls_psk_set_server_credentials_function(c->psk_creds,
                                               nbd_tls_psk_lookup);
    return c;
}

void nbd_tls_creds_set_allow(NbdTlsCreds *c, const char *const *names)
{
    g_strfreev(c->allow);
    c->allow = names && names[0] ? g_strdupv((char **)names) : NULL;
}

void nbd_tls_creds_free(NbdTlsCreds *c)
{
    if (!c) {
        return;
    }
    if (c->x509) {
        gnutls_certificate_free_credentials(c->x509);
    }
    if (c->psk_creds) {
        gnutls_psk_free_server_credentials(c->psk_creds);
    }
    g_free(c->psk_file);
    g_strfreev(c->allow);
    g_free(c);
}

NbdTls *nbd_tls_new_server(NbdTlsCreds *creds, int fd, GError **errp)
{
    NbdTls *t = g_new0(NbdTls, 1);
    const char *prio = creds->psk ?
        "NORMAL:-VERS-SSL3.0:+ECDHE-PSK:+DHE-PSK:+PSK" :
        "NORMAL:-VERS-SSL3.0";
    int r;

    t->creds = creds;
    r = gnutls_init(&t->s, GNUTLS_SERVER | GNUTLS_NONBLOCK);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "TLS session: %s",
                    gnutls_strerror(r));
        g_free(t);
        return NULL;
    }
    gnutls_session_set_ptr(t->s, creds);
    r = gnutls_priority_set_direct(t->s, prio, NULL);
    if (r >= 0) {
        r = creds->psk ?
            gnutls_credentials_set(t->s, GNUTLS_CRD_PSK, creds->psk_creds) :
            gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE,
                                   creds->x509);
    }
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "TLS session: %s",
                    gnutls_strerror(r));
        nbd_tls_free(t);
        return NULL;
    }
    if (!creds->psk && creds->verify_peer) {
        gnutls_certificate_server_set_request(t->s, GNUTLS_CERT_REQUIRE);
    }
    gnutls_transport_set_int(t->s, fd);
    t->fd = fd;
    return t;
}

/* GnuTLS's transport once the handshake is done: reads through @rbuf. */
static ssize_t nbd_tls_pull(gnutls_transport_ptr_t opaque, void *data,
                            size_t len)
{
    NbdTls *t = opaque;
    size_t n;

    if (t->rpos == t->rlen) {
        ssize_t r;

        do {
            r = recv(t->fd, t->rbuf, NBD_TLS_RBUF, MSG_DONTWAIT);
        } while (r < 0 && errno == EINTR);
        if (r < 0) {
            gnutls_transport_set_errno(t->s, errno);
            return -1;
        }
        if (r == 0) {
            return 0;
        }
        t->rpos = 0;
        t->rlen = r;
    }
    n = MIN(len, t->rlen - t->rpos);
    memcpy(data, t->rbuf + t->rpos, n);
    t->rpos += n;
    return n;
}

/* Data to read now?  Never waits: the session is non-blocking. */
static int nbd_tls_pull_timeout(gnutls_transport_ptr_t opaque,
                                unsigned int ms)
{
    NbdTls *t = opaque;
    uint8_t b;
    ssize_t r;

    if (t->rpos < t->rlen) {
        return 1;
    }
    r = recv(t->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        gnutls_transport_set_errno(t->s, errno);
        return -1;
    }
    return r >= 0;
}

static ssize_t nbd_tls_push(gnutls_transport_ptr_t opaque,
                            const giovec_t *iov, int n)
{
    NbdTls *t = opaque;
    struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = n };
    ssize_t r;

    do {
        r = sendmsg(t->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        gnutls_transport_set_errno(t->s, errno);
    }
    return r;
}

void nbd_tls_set_authz(NbdTls *t, const NbdAuthz *authz)
{
    t->authz = authz;
}

void nbd_tls_free(NbdTls *t)
{
    if (!t) {
        return;
    }
    gnutls_deinit(t->s);
    g_free(t->rbuf);
    g_free(t);
}

static bool nbd_tls_name_allowed(NbdTls *t, const char *name)
{
    if (!t->creds->allow) {
        return true;
    }
    for (guint i = 0; t->creds->allow[i]; i++) {
        if (!strcmp(t->creds->allow[i], name)) {
            return true;
        }
    }
    return false;
}

/* The longest identity a log line shows: a client chooses it. */
#define NBD_TLS_ID_LOG_MAX 256

/* @id made safe for one log line: escaped, and cut short if long. */
static char *nbd_tls_id_for_log(const char *id)
{
    g_autofree char *cut = g_strndup(id, NBD_TLS_ID_LOG_MAX);
    g_autofree char *esc = g_strescape(cut, NULL);

    return g_strdup_printf("%s%s", esc,
                           strlen(id) > NBD_TLS_ID_LOG_MAX ? "..." : "");
}

/* tls-authz=ID: is the identity TLS authenticated allowed? */
static bool nbd_tls_authz_check(NbdTls *t, const char *what,
                                const char *identity)
{
    g_autofree char *shown = NULL;

    if (!t->authz || nbd_authz_is_allowed(t->authz, identity)) {
        return true;
    }
    shown = nbd_tls_id_for_log(identity);
    warn_report("NBD client refused: %s '%s' is not allowed by "
                "tls-authz '%s'", what, shown, nbd_authz_id(t->authz));
    return false;
}

/* A DN longer than this is refused (a certificate holds at most 64 KiB
 * in a TLS record anyway). */
#define NBD_TLS_DN_MAX (64 * 1024)

/* The subject DN of @crt as GnuTLS prints it (as QEMU's authz sees it),
 * or NULL. */
static char *nbd_tls_crt_dn(gnutls_x509_crt_t crt)
{
    size_t len = 0;
    char *dn;

    if (gnutls_x509_crt_get_dn(crt, NULL, &len) !=
        GNUTLS_E_SHORT_MEMORY_BUFFER || !len || len > NBD_TLS_DN_MAX) {
        return NULL;
    }
    dn = g_malloc(len);
    if (gnutls_x509_crt_get_dn(crt, dn, &len) < 0) {
        g_free(dn);
        return NULL;
    }
    return dn;
}

/* After the handshake: is this peer one we let in? */
static bool nbd_tls_check_peer(NbdTls *t)
{
    const gnutls_datum_t *certs;
    unsigned int status = 0, n = 0;
    gnutls_x509_crt_t crt;
    g_autofree char *dn = NULL;

    if (t->creds->psk) {
        const char *user = gnutls_psk_server_get_username(t->s);

        if (!user || !nbd_tls_name_allowed(t, user)) {
            g_autofree char *shown = nbd_tls_id_for_log(user ? user : "");

            warn_report("NBD client refused: PSK username '%s' is not "
                        "allowed", shown);
            return false;
        }
        return nbd_tls_authz_check(t, "PSK username", user);
    }
    if (!t->creds->verify_peer) {
        return true;
    }
    if (gnutls_certificate_verify_peers2(t->s, &status) < 0 || status) {
        warn_report("NBD client refused: its certificate does not verify "
                    "against the CA (status 0x%x)", status);
        return false;
    }
    certs = gnutls_certificate_get_peers(t->s, &n);
    if (!certs || !n) {
        warn_report("NBD client refused: no client certificate");
        return false;
    }
    gnutls_x509_crt_init(&crt);
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) >= 0) {
        dn = nbd_tls_crt_dn(crt);
    }
    gnutls_x509_crt_deinit(crt);
    if (!dn) {
        warn_report("NBD client refused: unreadable client certificate "
                    "(or a subject DN over %d KiB)", NBD_TLS_DN_MAX / 1024);
        return false;
    }
    if (!nbd_tls_name_allowed(t, dn)) {
        g_autofree char *shown = nbd_tls_id_for_log(dn);

        warn_report("NBD client refused: certificate '%s' is not on the "
                    "allow-list", shown);
        return false;
    }
    return nbd_tls_authz_check(t, "certificate DN", dn);
}

int nbd_tls_handshake(NbdTls *t)
{
    int r;

    if (t->done) {
        return 1;
    }
    do {
        r = gnutls_handshake(t->s);
    } while (r == GNUTLS_E_INTERRUPTED);
    if (r == GNUTLS_E_AGAIN) {
        return 0;
    }
    if (r < 0) {
        warn_report("NBD client: TLS handshake failed: %s",
                    gnutls_strerror(r));
        return -1;
    }
    if (!nbd_tls_check_peer(t)) {
        return -1;
    }
    /* GnuTLS keeps what it read past the handshake in its own buffer;
     * from here on it reads through ours. */
    t->rbuf = g_malloc(NBD_TLS_RBUF);
    gnutls_transport_set_ptr(t->s, t);
    gnutls_transport_set_pull_function(t->s, nbd_tls_pull);
    gnutls_transport_set_pull_timeout_function(t->s, nbd_tls_pull_timeout);
    gnutls_transport_set_vec_push_function(t->s, nbd_tls_push);
    t->done = true;
    return 1;
}

bool nbd_tls_handshake_done(NbdTls *t)
{
    return t->done;
}

bool nbd_tls_wants_write(NbdTls *t)
{
    return gnutls_record_get_direction(t->s) == 1;
}

ssize_t nbd_tls_recv(NbdTls *t, void *buf, size_t len)
{
    ssize_t r;

    do {
        r = gnutls_record_recv(t->s, buf, len);
    } while (r == GNUTLS_E_INTERRUPTED);
    if (r == GNUTLS_E_AGAIN) {
        return -EAGAIN;
    }
    return r < 0 ? -EIO : r;
}

ssize_t nbd_tls_sendv(NbdTls *t, const struct iovec *iov, int n)
{
    ssize_t total = 0;

    for (int i = 0; i < n; i++) {
        size_t off = 0;

        while (off < iov[i].iov_len) {
            ssize_t r = gnutls_record_send(t->s,
                                           (uint8_t *)iov[i].iov_base + off,
                                           iov[i].iov_len - off);

            if (r == GNUTLS_E_INTERRUPTED) {
                continue;
            }
            if (r == GNUTLS_E_AGAIN) {
                return total ? total : -EAGAIN;
            }
            if (r < 0) {
                return -EIO;
            }
            off += r;
            total += r;
        }
    }
    return total;
}

bool nbd_tls_pending(NbdTls *t)
{
    /* Bytes in @rbuf wake no poll of the socket either. */
    return gnutls_record_check_pending(t->s) > 0 || t->rpos < t->rlen;
}
