/*
 * request.h - what rateld reads from a request: the key a policy limits
 * and the overrides that apply (who the client is: app/address.h).
 */
#ifndef RATELD_REQUEST_H
#define RATELD_REQUEST_H

#include "app/address.h"
#include "rateld/config.h"
#include "http/http.h"

#include <stddef.h>

/* Longest key rateld builds (longer key sources are refused with 400). */
#define RATELD_KEY_MAX 1024

/* What a policy's key sources read: for /v1/auth, the forwarded request's
   path, query and host (X-Original-URI, ...), not rateld's own. */
typedef struct rateld_view_s {
    const ratel_http_request_t *req; /* headers (cookies too) */
    ratel_http_str_t path;           /* not decoded */
    ratel_http_str_t query;          /* not decoded */
    ratel_http_str_t host;           /* lower case, without the port */
    const char *client;              /* ratel__client_address() */
    const struct cJSON *json;        /* the body, when it is a JSON object
                                        and a policy reads json: */
    int json_error;                  /* ... the body is not one */
    int body_params;                 /* the original request has a form
                                        body, whose fields backends merge
                                        with the query's */
} rateld_view_t;

/*
 * The value key source `part` reads from the view: into *value / *n
 * (pointing into the request, or into buf, len bytes, for decoded query
 * values and numbers). Returns 0 when present, 1 when absent or empty,
 * -1 when malformed (a bad %-escape, a parameter, header or cookie given
 * twice, a JSON body that is not an object, a value longer than
 * RATELD_KEY_MAX or holding a control byte, a query parameter when the
 * view has body_params). Spaces and tabs around a
 * value are dropped.
 */
int rateld_part_value(const rateld_key_part_t *part, const rateld_view_t *v,
                      char *buf, size_t len, const char **value, size_t *n);

/*
 * The store key for policy `p` and the request seen through `v`:
 * "POLICY:" then each key part's value (ip: the client address; header:
 * the header's value, trimmed; query: the decoded parameter; cookie: the
 * cookie's value; json: the body's top-level field; host: the host; path:
 * the path; global: "*"), parts joined by '|', and '|' and '\\' inside a value
 * escaped with '\\' so that different parts never give the same key.
 * Returns the key's length; 0 when a part is absent or empty and the
 * policy's on_missing is reject; -1 when the key would be longer than len
 * - 1 or RATELD_KEY_MAX (the request gets 400). With on_missing shared,
 * an absent part reads "-".
 */
long rateld_policy_key(const rateld_policy_t *p, const rateld_view_t *v,
                       char *buf, size_t len);

/*
 * The first of the policy's overrides that applies to the request seen
 * through `v` whose key value (without the "POLICY:" prefix) is
 * key[0..keylen); NULL when none does. An override whose key source is
 * absent or malformed does not apply.
 */
const rateld_override_t *rateld_policy_override(const rateld_policy_t *p,
                                                const rateld_view_t *v,
                                                const char *key, size_t keylen);

#endif /* RATELD_REQUEST_H */
