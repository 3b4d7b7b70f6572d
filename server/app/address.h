/*
 * address.h - addresses as rateld and captchad read them: CIDR blocks, the
 * trusted proxies a configuration lists, the client address of a request
 * seen through them (listen addresses are server/http's:
 * ratel_http_listen_parse).
 *
 * Addresses are always written in one canonical spelling (inet_ntop: IPv4
 * dotted quad, IPv6 compressed lower case, IPv4-mapped IPv6 as IPv4) so a
 * client gets the same key however a proxy spelled its address.
 */
#ifndef RATEL_APP_ADDRESS_H
#define RATEL_APP_ADDRESS_H

#include "app/yaml.h"
#include "http/http.h"

#include <stddef.h>
#include <stdint.h>

/* Longest client address text ("ffff:...:255.255.255.255") + NUL. */
#define RATEL__ADDR_MAX 64
/* Most blocks a trusted_proxies list may hold. */
#define RATEL__TRUSTED_MAX 64

/* An address block: `family` AF_INET or AF_INET6, `bits` prefix length. */
typedef struct ratel__cidr_s {
    int family;
    uint8_t addr[16];
    unsigned bits;
} ratel__cidr_t;

/* A configuration's trusted proxies (`trusted_proxies:`): only their
   forwarded-request headers are believed. Zeroed: none. */
typedef struct ratel__trusted_s {
    ratel__cidr_t blocks[RATEL__TRUSTED_MAX];
    size_t n;
} ratel__trusted_t;

/*
 * Parses "10.0.0.0/8", "2001:db8::/32" or a bare address (a /32 or /128).
 * Returns 0 or -1 with a message naming the text in err.
 */
int ratel__cidr_parse(const char *text, ratel__cidr_t *out, char *err,
                      size_t errlen);

/*
 * Whether the address `family` (AF_INET / AF_INET6) `addr` (4 or 16 bytes)
 * lies in one of the n blocks. An IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) is matched as the IPv4 address.
 */
int ratel__cidr_match(const ratel__cidr_t *blocks, size_t n, int family,
                      const void *addr);

/*
 * Reads `node` (at `path`, e.g. "trusted_proxies") as a list of addresses
 * and CIDR blocks into *out, refusing a block given twice. Returns 0, or
 * -1 with "FILE:LINE: PATH[i]: reason" in the context's message.
 */
int ratel__yaml_trusted(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        ratel__trusted_t *out);

/* Whether the TCP peer of `req` is one of the trusted proxies (NULL:
   none): only then are its forwarded-request headers believed. */
int ratel__peer_trusted(const ratel__trusted_t *trusted,
                        const ratel_http_request_t *req);

/*
 * The client's address as text into buf (at least RATEL__ADDR_MAX bytes):
 * the TCP peer, unless the peer is a trusted proxy (`trusted` NULL: none
 * is); then the X-Forwarded-For entries are read from the right, and the
 * first one that is not a trusted proxy is the client (if all are trusted,
 * the leftmost). An entry that is not an address ends the walk: the last
 * trusted hop before it is taken. Several X-Forwarded-For headers count as
 * one list, in order. IPv4-mapped IPv6 peers are written as IPv4. Returns
 * the text's length.
 */
size_t ratel__client_address(const ratel__trusted_t *trusted,
                             const ratel_http_request_t *req, char *buf,
                             size_t len);

/* The bucket of a client address (an IPv6 client's /64):
   ratel__address_bucket, app/keys.h. */

#endif /* RATEL_APP_ADDRESS_H */
