/*
 * peers.h - connections counted per client address, for the per-client
 * cap (limits.max_connections_per_client): one client holding idle
 * connections must not fill max_connections for everyone.
 *
 * One table per server, shared by its workers under a mutex (taken once
 * per accepted and per closed connection, never per request). An entry
 * exists only while its address holds a connection, and the server never
 * holds more than max_connections of them, so the table is sized once
 * for that (two slots per connection) and never grows: its memory is
 * bounded by the configuration, not by what clients send.
 */
#ifndef RATEL_HTTP_PEERS_H
#define RATEL_HTTP_PEERS_H

#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ratel__http_peers_s ratel__http_peers_t;

/* A client address as the table counts it: IPv6, with IPv4 as
   ::ffff:a.b.c.d (so a dual-stack socket counts one client once). */
typedef struct ratel__http_peer_key_s {
    uint8_t addr[16];
    uint8_t counted; /* 1 while it holds a count in the table */
} ratel__http_peer_key_t;

/* A table for `per_client` connections per address among at most
   `max_connections`; NULL without memory. */
ratel__http_peers_t *ratel__http_peers_new(unsigned max_connections,
                                           unsigned per_client);

/* Frees it; NULL is a no-op. */
void ratel__http_peers_free(ratel__http_peers_t *peers);

/*
 * A connection from `peer` arrives: returns 1 and counts it (key filled
 * in, key->counted set) if its address holds fewer than per_client
 * connections, 0 if it holds that many already (refuse it). A peer that
 * is not IPv4 or IPv6 is let through uncounted (key->counted 0).
 */
int ratel__http_peers_acquire(ratel__http_peers_t *peers,
                              const struct sockaddr *peer, socklen_t len,
                              ratel__http_peer_key_t *key);

/* The connection counted in `key` is gone (no-op if it was not
   counted); clears key->counted. */
void ratel__http_peers_release(ratel__http_peers_t *peers,
                               ratel__http_peer_key_t *key);

/* Connections counted for the address of `key` (tests). */
unsigned ratel__http_peers_count(ratel__http_peers_t *peers,
                                 const ratel__http_peer_key_t *key);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_HTTP_PEERS_H */
