/*
 * request.h - what rateld reads from a request: the key a policy limits
 * (key sources: app/keys.h) and the overrides that apply (who the client
 * is: app/address.h).
 */
#ifndef RATELD_REQUEST_H
#define RATELD_REQUEST_H

#include "app/address.h"
#include "app/keys.h"
#include "rateld/config.h"
#include "http/http.h"

#include <stddef.h>

/* Longest key rateld builds (longer key sources are refused with 400). */
#define RATELD_KEY_MAX RATEL__KEY_MAX

/* What a policy's key sources read: for /v1/auth, the forwarded request's
   path, query and host (X-Original-URI, ...), not rateld's own. */
typedef ratel__key_view_t rateld_view_t;

/*
 * Starts a view of `req`: its headers (and cookies) for key sources, the
 * Content-Type's kind of body, and its form body when it is one (rateld
 * has the whole body). The caller sets path, query, host, client and the
 * JSON body.
 */
void rateld_view_init(rateld_view_t *v, const ratel_http_request_t *req);

/* A ratel_http_str_t as key sources take it. */
static inline ratel__key_str_t rateld_str(ratel_http_str_t s)
{
    return (ratel__key_str_t){s.p, s.n};
}

/*
 * The store key for policy `p` and the request seen through `v`
 * (ratel__key_build with the policy's name): its length; 0 when a part is
 * missing and on_missing is reject or allow; -1 when a part is refused or
 * the key is too long, with the reason in *why.
 */
long rateld_policy_key(const rateld_policy_t *p, const rateld_view_t *v,
                       char *buf, size_t len, const char **why);

/*
 * A key the decision API was given (`key=`), as the policy's key source
 * reads a request: through its transform when the key is one source with
 * one (`query:telephone|phone:CN`: "+86 139 0000 0001" and "13900000001"
 * are the key "+8613900000001"), so the API and /v1/auth count one
 * bucket. key[0..*keylen) is rewritten in place (cap bytes with the NUL).
 * 0, or -1 with the reason in *why when the transform refuses it.
 */
int rateld_policy_key_value(const rateld_policy_t *p, char *key, size_t *keylen,
                            size_t cap, const char **why);

/*
 * The first of the policy's overrides that applies to the request seen
 * through `v` whose key value (without the "POLICY:" prefix) is
 * key[0..keylen); NULL when none does. An override whose key source is
 * missing or refused does not apply.
 */
const rateld_override_t *rateld_policy_override(const rateld_policy_t *p,
                                                const rateld_view_t *v,
                                                const char *key, size_t keylen);

#endif /* RATELD_REQUEST_H */
