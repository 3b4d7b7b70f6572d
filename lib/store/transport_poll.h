/*
 * transport_poll.h - the synchronous transport (transport.h): the
 * caller's own thread drives nonblocking sockets with poll(2), and
 * OpenSSL for TLS, until what it waits for is done. The ratel_store_*
 * synchronous calls and the CLI run the engine on it.
 *
 * Threads. Several threads share one transport and its engine under the
 * transport's lock:
 *
 *   ratel__poll_lock(p);
 *   ... hand the engine a command (it calls `send` / `defer` / `open`) ...
 *   ratel__poll_wait(p, &my_done);       (the link callbacks and hooks
 *   ... read the answer ...               set my_done, lock held)
 *   ratel__poll_unlock(p);
 *
 * One thread at a time drives the loop (the driver); the others wait,
 * each on a condition variable of its own, woken by the turn that set
 * its flag, so each returns as soon as its own flag is set. When the
 * driver's flag is set it leaves and wakes one waiter to take over. The lock is
 * released only while the driver sits in poll(): a command another thread
 * queues then (its `defer` or `send`) wakes the driver through an eventfd, so
 * commands of concurrent callers leave together in the driver's next write
 * (automatic pipelining across threads).
 *
 * Sockets and signals. Addresses are resolved with getaddrinfo() inside
 * `open` (IPv4, IPv6 and names; a name blocks the caller, with the lock
 * held, for as long as the resolver takes), each address is tried in turn
 * until one connects. Sockets have TCP_NODELAY and keepalive. Every write
 * is send(MSG_NOSIGNAL), TLS included (OpenSSL works on memory BIOs and
 * this file moves the bytes), so a peer that hangs up never raises
 * SIGPIPE in the host.
 */
#ifndef RATEL_STORE_TRANSPORT_POLL_H
#define RATEL_STORE_TRANSPORT_POLL_H

#include "transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ratel__poll_s ratel__poll_t;

/*
 * A transport whose loop calls hooks->timer and hooks->flush (the struct
 * is copied). Returns 0 with *out set, or RATEL_ENOMEM (also when the
 * eventfd cannot be made).
 */
int ratel__poll_new(ratel__poll_t **out, const ratel__loop_hooks_t *hooks);

/* The functions of transport.h; their `tud` is the ratel__poll_t *. Call
   them with the lock held. */
extern const ratel__transport_t ratel__poll_transport;

/*
 * Closes every handle still open, without callbacks, and frees p. No
 * thread may hold the lock or wait in it. NULL is a no-op.
 */
void ratel__poll_free(ratel__poll_t *p);

/* The lock every call on p and its engine is made under. */
void ratel__poll_lock(ratel__poll_t *p);
void ratel__poll_unlock(ratel__poll_t *p);

/*
 * With the lock held, runs the loop until *done != 0: sockets, poll(2),
 * the engine's one timer, the deferred flush. When another thread is
 * driving already, waits (condition variable) and takes over if the
 * driver leaves before *done is set. Link callbacks and hooks run in the
 * driving thread with the lock held; the lock is released only around
 * poll(). Returns with the lock held. The engine must arm its timer for
 * every deadline it keeps: a wait with no timer, no connection and no
 * flush pending never returns. Never call it from a callback or hook
 * (the driver would wait for itself). What is queued while no thread
 * waits leaves at the next wait of any thread, or at once when a driver
 * sits in poll().
 */
void ratel__poll_wait(ratel__poll_t *p, const int *done);

/*
 * With the lock held, one turn of the loop that does not wait: what is
 * queued is written, what has arrived is read and told. Returns at once
 * when another thread drives (it serves both). For the commands no caller
 * waits for (a leased key's next slice), so that a call answered without
 * Redis still moves them.
 */
void ratel__poll_pump(ratel__poll_t *p);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_TRANSPORT_POLL_H */
