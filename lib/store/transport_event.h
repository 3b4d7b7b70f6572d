/*
 * transport_event.h - the libevent transport (transport.h): connections
 * are bufferevents on the host's event_base, TLS through libevent's
 * OpenSSL bufferevents. rateld, captchad and the asynchronous API on a
 * caller's loop run the engine on it.
 *
 * Everything happens in the event_base's thread: create, use and free the
 * transport there, and call the engine only from that thread.
 *
 * Connecting. A numeric address connects at once; a name is resolved by
 * an evdns_base of the transport's (made at the first name, from
 * /etc/resolv.conf and /etc/hosts) without blocking the loop, and each of
 * its addresses is tried in turn until one connects. The TCP connect is
 * the transport's own (a nonblocking connect() and a write event), so a
 * refused or unreachable address is told apart from a TLS failure; once
 * connected, the socket becomes a bufferevent (an OpenSSL one in the
 * connecting state for TLS, `up` coming when the handshake ends).
 * Sockets have TCP_NODELAY and keepalive.
 *
 * Ordering. Read callbacks are not deferred (BEV_OPT_DEFER_CALLBACKS
 * would hand some reads to a later pass when many connections are
 * ready); `defer` activates one event, which libevent appends to the
 * active queue behind the I/O events of the current pass, so the engine's
 * flush runs once after them (see http/worker.c).
 *
 * Signals. libevent writes with writev() and OpenSSL with write(): a
 * peer that hangs up raises SIGPIPE, so the host ignores SIGPIPE (rateld
 * and captchad do, in app/program.c).
 */
#ifndef RATEL_STORE_TRANSPORT_EVENT_H
#define RATEL_STORE_TRANSPORT_EVENT_H

#include "transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct ratel__event_s ratel__event_t;

/*
 * A transport on base whose events call hooks->timer and hooks->flush
 * (the struct is copied). base must outlive the transport. Returns 0 with
 * *out set, or RATEL_ENOMEM.
 */
int ratel__event_new(ratel__event_t **out, struct event_base *base,
                     const ratel__loop_hooks_t *hooks);

/* The functions of transport.h; their `tud` is the ratel__event_t *. */
extern const ratel__transport_t ratel__event_transport;

/*
 * Closes every handle still open, without callbacks, and frees e and its
 * events (and its evdns_base). NULL is a no-op. A bufferevent's memory is
 * released by the loop's next pass (libevent finalizes it there) or by
 * event_base_free(). A name lookup cancelled by a close answers in the
 * loop's next pass: freeing the event_base before that pass leaks the
 * lookup's small request (libevent's and ours).
 */
void ratel__event_free(ratel__event_t *e);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_TRANSPORT_EVENT_H */
