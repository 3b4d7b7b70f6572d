/*
 * transport.h - what the Redis engine (engine.h) asks of the I/O around it.
 *
 * The engine does no I/O of its own, the way http/h2.c drives nghttp2
 * without sockets: it encodes commands, parses replies, keeps pipelines,
 * routes, retries, times out and decides; a transport only connects,
 * sends, receives and arms one timer. Three transports exist:
 *
 *   poll       (transport_poll.c) the caller's thread drives nonblocking
 *              sockets with poll(2) and OpenSSL until what it waits for is
 *              done: the synchronous ratel_store_* calls, the CLI
 *   libevent   (transport_event.c) an event_base's bufferevents, TLS
 *              through libevent's OpenSSL bufferevents: rateld, captchad,
 *              the asynchronous API on a caller's loop
 *   nginx      the nginx module's, on nginx's own connections
 *
 * Every protocol decision lives in the engine once; a transport never
 * looks inside the bytes it carries.
 *
 * Threads. A transport and its engine belong to one thread at a time: the
 * libevent transport to its event_base's thread; the poll transport to
 * whichever caller holds its lock (transport_poll.h).
 */
#ifndef RATEL_STORE_TRANSPORT_H
#define RATEL_STORE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct ssl_ctx_st SSL_CTX;

/*
 * One connection as the engine sees it. The engine embeds a link in each
 * of its connections and hands it to `open`; the transport reports what
 * happens on the connection through these three functions, always from
 * its loop (never from inside `open`, `send` or `close`).
 */
typedef struct ratel__link_s ratel__link_t;
struct ratel__link_s {
    /* Connected (TLS: the handshake done and the certificate checked). */
    void (*up)(ratel__link_t *link);
    /* Bytes arrived, in order (decrypted). */
    void (*data)(ratel__link_t *link, const char *p, size_t n);
    /*
     * The connection failed or the peer closed it: `why` says so in words
     * a person can act on ("Connection refused", "connection closed by
     * the server", "certificate verify failed: ..."); `tls_error` is 1
     * when TLS itself refused (a certificate, a handshake: a configuration
     * error, not an outage). The transport has let go of its side: the
     * engine must not call `close` for it.
     */
    void (*down)(ratel__link_t *link, const char *why, int tls_error);
};

/* TLS for a connection: a context (tls.h) and the name to check. */
typedef struct ratel__tls_target_s {
    SSL_CTX *ctx;
    const char *server_name; /* SNI and the checked name (the host's when
                                no tls_server_name was given) */
    int insecure;            /* 1: no verification (tls_insecure=yes) */
} ratel__tls_target_t;

/* The engine's side of the loop: its timer and its end-of-turn flush. */
typedef struct ratel__loop_hooks_s {
    void (*timer)(void *ud); /* the timer armed by `timer` is due */
    void (*flush)(void *ud); /* the turn `defer` asked for is ending */
    void *ud;
} ratel__loop_hooks_t;

typedef struct ratel__transport_s {
    /*
     * Starts connecting to host:port (a name is resolved without blocking
     * the loop where the transport can), with TLS when `tls` is not NULL.
     * Returns a handle, or NULL when it failed at once (out of memory, a
     * bad address), with the reason in why.
     */
    void *(*open)(void *tud, ratel__link_t *link, const char *host, int port,
                  const ratel__tls_target_t *tls, char *why, size_t whylen);
    /* Queues bytes (copied) after those queued before; bytes queued before
       `up` leave once the connection is up. */
    void (*send)(void *tud, void *handle, const char *p, size_t n);
    /* Closes at once, dropping what was not sent; no callback follows. May
       be called from inside a callback of the same link. */
    void (*close)(void *tud, void *handle);
    /* Arms the engine's one timer for monotonic time at_us (replacing the
       one armed before); -1 disarms it. */
    void (*timer)(void *tud, int64_t at_us);
    /* Calls the hooks' flush once before the loop next waits: commands
       queued during one turn leave in one write per connection. */
    void (*defer)(void *tud);
    /* The monotonic clock deadlines are in (CLOCK_MONOTONIC, us). */
    int64_t (*now)(void *tud);
} ratel__transport_t;

#endif /* RATEL_STORE_TRANSPORT_H */
