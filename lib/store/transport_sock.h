/*
 * transport_sock.h - what the transports (transport_poll.c,
 * transport_event.c) do alike to their sockets and TLS sessions.
 */
#ifndef RATEL_STORE_TRANSPORT_SOCK_H
#define RATEL_STORE_TRANSPORT_SOCK_H

#include <openssl/ssl.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in microseconds: the clock of transport.h's `now`. */
int64_t ratel__transport_now_us(void);

/*
 * No Nagle delay (commands are small and pipelined by the engine), and
 * keepalive as hiredis's redisEnableKeepAlive sets it, so a server that
 * vanished without a word is noticed after about 30 s of silence.
 */
void ratel__transport_socket_options(int fd);

/*
 * Watches ssl's handshake for the server's request of a client
 * certificate (an info callback of ssl's own); tls_asked() then says
 * whether it came. A TLS 1.3 server refuses a missing or unknown client
 * certificate only after the client's handshake has ended, with an alert
 * that the reset of its close may discard: a connection that the server
 * cuts after asking, before anything else arrived, was refused by TLS.
 */
void ratel__transport_tls_watch(SSL *ssl);
int ratel__transport_tls_asked(const SSL *ssl);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_TRANSPORT_SOCK_H */
