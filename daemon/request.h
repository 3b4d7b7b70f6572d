/*
 * request.h - what rateld reads from a request: who the client is and the
 * key a policy limits.
 */
#ifndef RATELD_REQUEST_H
#define RATELD_REQUEST_H

#include "daemon/config.h"
#include "http/http.h"

#include <stddef.h>

/* Longest client address text ("ffff:...:255.255.255.255") + NUL. */
#define RATELD_ADDR_MAX 64
/* Longest key rateld builds (longer key sources are refused with 400). */
#define RATELD_KEY_MAX 1024

/*
 * Whether the address `family` (AF_INET / AF_INET6) `addr` (4 or 16 bytes)
 * lies in one of the n blocks. An IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) is matched as the IPv4 address.
 */
int rateld_cidr_match(const rateld_cidr_t *blocks, size_t n, int family,
                      const void *addr);

/* Whether the TCP peer of `req` is one of the config's trusted proxies:
   only then are its forwarded-request headers believed. */
int rateld_peer_trusted(const rateld_config_t *config,
                        const ratel_http_request_t *req);

/*
 * The client's address as text into buf (at least RATELD_ADDR_MAX bytes):
 * the TCP peer, unless the peer is in the config's trusted proxies; then
 * the X-Forwarded-For entries are read from the right, and the first one
 * that is not a trusted proxy is the client (if all are trusted, the
 * leftmost). An entry that is not an address ends the walk: the last
 * trusted hop before it is taken. Several X-Forwarded-For headers count as
 * one list, in order. IPv4-mapped IPv6 peers are written as IPv4. Returns
 * the text's length.
 */
size_t rateld_client_address(const rateld_config_t *config,
                             const ratel_http_request_t *req, char *buf,
                             size_t len);

/* What a policy's key sources read: for /v1/auth, the forwarded request's
   path, query and host (X-Original-URI, ...), not rateld's own. */
typedef struct rateld_view_s {
    const ratel_http_request_t *req; /* headers (cookies too) */
    ratel_http_str_t path;           /* not decoded */
    ratel_http_str_t query;          /* not decoded */
    ratel_http_str_t host;           /* lower case, without the port */
    const char *client;              /* rateld_client_address() */
    const struct cJSON *json;        /* the body, when it is a JSON object
                                        and a policy reads json: */
    int json_error;                  /* ... the body is not one */
} rateld_view_t;

/*
 * The value key source `part` reads from the view: into *value / *n
 * (pointing into the request, or into buf, len bytes, for decoded query
 * values and numbers). Returns 0 when present, 1 when absent or empty,
 * -1 when malformed (a bad %-escape, a parameter or cookie given twice, a
 * JSON body that is not an object, a value longer than RATELD_KEY_MAX).
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
                                                const char *key,
                                                size_t keylen);

#endif /* RATELD_REQUEST_H */
