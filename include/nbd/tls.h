/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * TLS for the NBD server (nbd/tls.c, GnuTLS): credentials as QEMU's
 * tls-creds-x509 and tls-creds-psk objects read them from a directory,
 * and a non-blocking server session over a connected socket.
 *
 * x509 directory (endpoint=server): ca-cert.pem, server-cert.pem,
 * server-key.pem (and ca-crl.pem if present); with verify-peer=on the
 * client must present a certificate signed by the CA, and with an
 * allow-list its subject's distinguished name must be on it.
 * PSK directory: keys.psk, lines of "username:hexkey".
 *
 * Threads: credentials are created and freed in the main thread; a
 * session is used by one thread at a time (the connection's).
 */
#ifndef NBD_TLS_H
#define NBD_TLS_H

#include "qemu/osdep.h"
#include <sys/uio.h>

typedef struct NbdTlsCreds NbdTlsCreds;
typedef struct NbdTls NbdTls;
typedef struct NbdAuthz NbdAuthz;

NbdTlsCreds *nbd_tls_creds_new_x509(const char *dir, bool verify_peer,
                                    GError **errp);
NbdTlsCreds *nbd_tls_creds_new_psk(const char *dir, GError **errp);
/* Client certificate DNs (x509, verify-peer=on) or PSK usernames that
 * may connect; NULL or empty: any the CA signed / any in keys.psk. */
void nbd_tls_creds_set_allow(NbdTlsCreds *creds, const char *const *names);
void nbd_tls_creds_free(NbdTlsCreds *creds);

NbdTls *nbd_tls_new_server(NbdTlsCreds *creds, int fd, GError **errp);
/* tls-authz: after the handshake, the peer's identity (certificate DN
 * with verify-peer=on, PSK username) must be allowed by @authz (the
 * caller's, alive as long as the session) or the handshake fails. */
void nbd_tls_set_authz(NbdTls *tls, const NbdAuthz *authz);
void nbd_tls_free(NbdTls *tls);
/* Advance the handshake: 1 done, 0 call again when the socket is ready
 * (nbd_tls_wants_write() says for what), -1 failed (logged once). */
int nbd_tls_handshake(NbdTls *tls);
bool nbd_tls_handshake_done(NbdTls *tls);
bool nbd_tls_wants_write(NbdTls *tls);
/* As recv()/sendmsg() on a non-blocking socket: bytes, 0 at EOF (recv),
 * -EAGAIN, or -EIO. */
ssize_t nbd_tls_recv(NbdTls *tls, void *buf, size_t len);
ssize_t nbd_tls_sendv(NbdTls *tls, const struct iovec *iov, int n);
/* Bytes are waiting, decrypted or read ahead from the socket (which
 * may not become readable again). */
bool nbd_tls_pending(NbdTls *tls);

#endif
