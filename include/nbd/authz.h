/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Who may use the NBD server once TLS authenticated them (nbd/authz.c):
 * QEMU's authz-simple and authz-list objects, for nbd-server-start's
 * tls-authz=ID.  The identity checked is the client certificate's
 * distinguished name as GnuTLS prints it (x509, verify-peer=on), or the
 * PSK username (tls-creds-psk).
 *
 * authz-simple allows one identity, compared exactly.  authz-list has
 * rules, tried in order: the first whose match= matches the identity
 * (format=exact: the same string; format=glob: '*' and '?' wildcards)
 * decides with its policy=; if none matches, the list's own policy=
 * (default deny) does.
 *
 * authz-list-file is an authz-list whose policy and rules come from a
 * JSON file; nbd-monitor.c sets a refresh hook that re-reads it when it
 * changed, called before each check.
 *
 * Threads: main thread only (the NBD handshake, where the check is made,
 * runs in the main context).
 */
#ifndef NBD_AUTHZ_H
#define NBD_AUTHZ_H

#include "qemu/osdep.h"

typedef struct NbdAuthz NbdAuthz;

NbdAuthz *nbd_authz_new_simple(const char *id, const char *identity);
NbdAuthz *nbd_authz_new_list(const char *id, bool default_allow);
void nbd_authz_list_add_rule(NbdAuthz *az, const char *match, bool allow,
                             bool glob);
/* Drop every rule and set the default; @deny_all: refuse everyone (a
 * list file that failed to load) until the next call. */
void nbd_authz_set_rules(NbdAuthz *az, bool default_allow, bool deny_all);
/* @fn(@opaque) runs before each nbd_authz_is_allowed() and may change
 * the rules. */
void nbd_authz_set_refresh(NbdAuthz *az, void (*fn)(void *opaque),
                           void *opaque);
bool nbd_authz_is_allowed(const NbdAuthz *az, const char *identity);
/* What qom-get reads and qom-set changes.  A change applies from the next
 * check on: the NBD server checks each new connection. */
bool nbd_authz_get_default_allow(const NbdAuthz *az);
void nbd_authz_set_default_allow(NbdAuthz *az, bool allow);
unsigned int nbd_authz_num_rules(const NbdAuthz *az);
/* Rule @i (< nbd_authz_num_rules()): its match, policy and format. */
const char *nbd_authz_get_rule(const NbdAuthz *az, unsigned int i,
                               bool *allow, bool *glob);
/* @az gets @from's rules and policies, @from @az's old rules (to be
 * freed with it): a list parsed aside replaces the rules in one step. */
void nbd_authz_take_rules(NbdAuthz *az, NbdAuthz *from);
const char *nbd_authz_id(const NbdAuthz *az);
void nbd_authz_free(NbdAuthz *az);

#endif
