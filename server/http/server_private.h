/*
 * server_private.h - the structures behind a server, shared by server.c
 * (set-up, accepting and the connection limits, run, stop, free) and
 * worker.c (a worker's event loop: its sockets' reads and writes, the
 * hooks from conn.c, the sweep, the drain at stop). Nothing else
 * includes it.
 */
#ifndef RATEL_HTTP_SERVER_PRIVATE_H
#define RATEL_HTTP_SERVER_PRIVATE_H

#include "http/conn.h"
#include "http/listen.h"
#include "http/peers.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct worker_s worker_t;

/* A worker's listening socket on one address (SO_REUSEPORT). */
typedef struct listener_s {
    worker_t *w;
    const address_t *addr;
    int fd;
    struct event ev;
} listener_t;

/* A connected socket (the connection's state machine is in conn). */
typedef struct sock_s {
    struct sock_s *prev, *next;   /* the worker's sockets */
    struct sock_s *dprev, *dnext; /* the worker's dirty list */
    worker_t *w;
    const ratel__http_proto_t *proto; /* how to drive conn */
    void *conn;                       /* NULL once lingering */
    int fd;
    unsigned char in_dirty, reading, write_wait, lingering;
    unsigned char later; /* used its rounds: serviced at the next pass */
    int64_t linger_deadline_ms;
    struct event rev, wev;
    ratel__http_peer_key_t peer; /* its count in server->peers */
} sock_t;

struct worker_s {
    ratel_http_server_t *server;
    unsigned index;
    struct event_base *base;
    listener_t listeners[MAX_ADDRESSES];
    int stop_fd;
    struct event stop_ev, flush_ev, output_ev, sweep_ev, later_ev;
    ratel__http_ctx_t ctx;
    sock_t *socks, *dirty, *free_socks;
    unsigned nfree_socks;
    int in_callback; /* the dirty list is written before returning */
    unsigned char flush_pending, output_pending, later_pending;
    unsigned char stopping, accept_paused;
    int64_t deadline_ms, accept_resume_ms;
    pthread_t tid;
    int started;
};

struct ratel_http_server_s {
    ratel_http_options_t options;
    address_t addresses[MAX_ADDRESSES];
    unsigned naddresses;
    unsigned nworkers;
    worker_t *workers;
    int running;
    atomic_uint nconns;
    atomic_uint drain_ms;
    atomic_llong trim_ms;  /* the last malloc_trim() */
    atomic_uint listening; /* listening sockets still open */
    /* Connections per client address; NULL without
       max_connections_per_client. */
    ratel__http_peers_t *peers;
};

/* The clock of timeouts and sweeps: coarse (a few ms) is enough. */
static inline int64_t ratel__http_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Lets another server have the addresses (safe from any thread;
   server.c). */
void ratel__http_release_claim(ratel_http_server_t *server);

/* A listening socket is readable: accepts until EAGAIN, admitting or
   refusing each connection (server.c). */
void ratel__http_on_accept(evutil_socket_t lfd, short what, void *arg);

/* Prepares worker `index`'s event loop on its listeners (already open);
   0, or -1 with the reason in err (worker.c). */
int ratel__http_worker_init(worker_t *w, ratel_http_server_t *server,
                            unsigned index, char *err, size_t errlen);

/* Frees what worker_init and the loop left: sockets, events, pools
   (worker.c). */
void ratel__http_worker_free(worker_t *w);

/* A socket for an accepted connection speaking `proto`, registered for
   reading; NULL without memory (worker.c). */
sock_t *ratel__http_sock_new(worker_t *w, const ratel__http_proto_t *proto,
                             int fd, const struct sockaddr *peer,
                             socklen_t peer_len, int64_t now);

#endif /* RATEL_HTTP_SERVER_PRIVATE_H */
