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
   path and query (X-Original-URI), not rateld's own. */
typedef struct rateld_view_s {
    const ratel_http_request_t *req; /* headers */
    ratel_http_str_t path;           /* not decoded */
    ratel_http_str_t query;          /* not decoded */
    const char *client;              /* rateld_client_address() */
} rateld_view_t;

/*
 * The store key for policy `p` and the request seen through `v`:
 * "POLICY:" then each key part's value (ip: the client address; header:
 * the header's value, trimmed; query: the decoded parameter; path: the
 * path; global: "*"), parts joined by '|', and '|' and '\\' inside a value
 * escaped with '\\' so that different parts never give the same key.
 * Returns the key's length; 0 when a part is absent or empty and the
 * policy's on_missing is reject; -1 when the key would be longer than len
 * - 1 or RATELD_KEY_MAX (the request gets 400). With on_missing shared,
 * an absent part reads "-".
 */
long rateld_policy_key(const rateld_policy_t *p, const rateld_view_t *v,
                       char *buf, size_t len);

#endif /* RATELD_REQUEST_H */
