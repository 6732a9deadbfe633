/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * authz-simple and authz-list for the NBD server: see include/nbd/authz.h.
 */
#include "qemu/osdep.h"
#include "nbd/authz.h"

typedef struct NbdAuthzRule {
    char *match;
    bool allow;
    bool glob;
} NbdAuthzRule;

struct NbdAuthz {
    char *id;
    bool default_allow;
    bool deny_all;              /* authz-list-file that failed to load */
    GArray *rules;              /* NbdAuthzRule */
    void (*refresh)(void *opaque);
    void *refresh_opaque;
};

static void nbd_authz_rule_clear(gpointer p)
{
    NbdAuthzRule *r = p;

    g_free(r->match);
}

NbdAuthz *nbd_authz_new_list(const char *id, bool default_allow)
{
    NbdAuthz *az = g_new0(NbdAuthz, 1);

    az->id = g_strdup(id);
    az->default_allow = default_allow;
    az->rules = g_array_new(false, true, sizeof(NbdAuthzRule));
    g_array_set_clear_func(az->rules, nbd_authz_rule_clear);
    return az;
}

/* authz-simple is a list of one exact rule that denies everyone else. */
NbdAuthz *nbd_authz_new_simple(const char *id, const char *identity)
{
    NbdAuthz *az = nbd_authz_new_list(id, false);

    nbd_authz_list_add_rule(az, identity, true, false);
    return az;
}

void nbd_authz_list_add_rule(NbdAuthz *az, const char *match, bool allow,
                             bool glob)
{
    NbdAuthzRule r = {
        .match = g_strdup(match),
        .allow = allow,
        .glob = glob,
    };

    g_array_append_val(az->rules, r);
}

void nbd_authz_set_rules(NbdAuthz *az, bool default_allow, bool deny_all)
{
    g_array_set_size(az->rules, 0);
    az->default_allow = default_allow;
    az->deny_all = deny_all;
}

void nbd_authz_set_refresh(NbdAuthz *az, void (*fn)(void *opaque),
                           void *opaque)
{
    az->refresh = fn;
    az->refresh_opaque = opaque;
}

bool nbd_authz_is_allowed(const NbdAuthz *az, const char *identity)
{
    if (az->refresh) {
        az->refresh(az->refresh_opaque);
    }
    if (az->deny_all) {
        return false;
    }
    for (guint i = 0; i < az->rules->len; i++) {
        const NbdAuthzRule *r = &g_array_index(az->rules, NbdAuthzRule, i);
        bool hit = r->glob ? g_pattern_match_simple(r->match, identity) :
                             !strcmp(r->match, identity);

        if (hit) {
            return r->allow;
        }
    }
    return az->default_allow;
}

bool nbd_authz_get_default_allow(const NbdAuthz *az)
{
    return az->default_allow;
}

void nbd_authz_set_default_allow(NbdAuthz *az, bool allow)
{
    az->default_allow = allow;
}

unsigned int nbd_authz_num_rules(const NbdAuthz *az)
{
    return az->rules->len;
}

const char *nbd_authz_get_rule(const NbdAuthz *az, unsigned int i,
                               bool *allow, bool *glob)
{
    const NbdAuthzRule *r;

    g_assert(i < az->rules->len);
    r = &g_array_index(az->rules, NbdAuthzRule, i);
    *allow = r->allow;
    *glob = r->glob;
    return r->match;
}

void nbd_authz_take_rules(NbdAuthz *az, NbdAuthz *from)
{
    GArray *old = az->rules;

    az->rules = from->rules;
    az->default_allow = from->default_allow;
    az->deny_all = from->deny_all;
    from->rules = old;
}

const char *nbd_authz_id(const NbdAuthz *az)
{
    return az->id;
}

void nbd_authz_free(NbdAuthz *az)
{
    if (!az) {
        return;
    }
    g_array_free(az->rules, true);
    g_free(az->id);
    g_free(az);
}
