/*
 * listen.h - the addresses an HTTP server listens on (server.c): parsing
 * "HOST:PORT", claiming an address so that no second server shares it,
 * and opening the SO_REUSEPORT sockets the workers accept on.
 */
#ifndef RATEL_HTTP_LISTEN_H
#define RATEL_HTTP_LISTEN_H

#include "http/conn.h"

#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

/* HTTP/1.1 and, when asked for, h2c gRPC. */
#define MAX_ADDRESSES 2

/* An address the server listens on and the protocol spoken there. */
typedef struct address_s {
    char *text;
    const ratel__http_proto_t *proto;
    struct sockaddr_storage ss;
    socklen_t len;
    int port;
    /* The claim on the address (an abstract AF_UNIX socket, see
       claim_address), held until the last worker stops listening. */
    atomic_int claim_fd;
} address_t;

/* Parses `text` into *ss / *len; 0, or -1 with "listen \"x\": ..." */
int ratel__parse_listen(const char *text, struct sockaddr_storage *ss,
                        socklen_t *len, char *err, size_t errlen);

/* "1.2.3.4:80" or "[::1]:80" into buf. */
void ratel__address_text(const struct sockaddr_storage *ss, char *buf,
                         size_t len);

/* The host part alone ("1.2.3.4", "::1"; IPv4-mapped IPv6 as IPv4, "-"
   for another family) into buf (RATEL_HTTP_ADDR_MAX bytes suffice). */
void ratel__address_host(const struct sockaddr_storage *ss, char *buf,
                         size_t len);

/* Claims a's address for this process (see listen.c); 0, or -1 with
   "listen X: already served by another process" and the like. The
   claim is held in a->claim_fd until closed. */
int ratel__claim_address(address_t *a, char *err, size_t errlen);

unsigned ratel__port_of(const struct sockaddr_storage *ss);

/* A listening socket (SO_REUSEPORT, non-blocking) bound to ss; -1 with
   the reason in err. */
int ratel__open_listener(const char *text, struct sockaddr_storage *ss,
                         socklen_t len, char *err, size_t errlen);

#endif /* RATEL_HTTP_LISTEN_H */
