/*
 * server.c - sockets, threads and libevent around the connection state
 * machine of conn.c.
 *
 * Each worker owns an event_base, a listening socket bound with
 * SO_REUSEPORT, an eventfd for stop() and its connections; nothing is
 * shared between workers but the connection count. A worker's callbacks:
 *
 *   accept   accept4() until EAGAIN; 503 and close past max_connections,
 *            or past max_connections_per_client from one address
 *   read     recv() into the connection's buffer, parse, dispatch
 *   flush    after a pass that dispatched requests: the user's flush hook
 *   output   answers given outside the above (rare), written in one go
 *   later    connections that used their share of a pass (see service)
 *   write    a socket that would block became writable
 *   sweep    every 100 ms: timeouts, lingering closes, the drain deadline,
 *            malloc_trim() after big buffers were freed
 *   stop     the eventfd: stop accepting, drain, close, leave the loop
 *
 * Responses are not written inside ratel_http_respond(): answering marks
 * the connection dirty, and the dirty list is written at the end of the
 * callback that caused it, so one pass answers each connection with one
 * send() however many of its pipelined requests were answered.
 *
 * The flush event is activated (event_active) by the first dispatch of a
 * pass. libevent appends it to the active queue behind the I/O events
 * epoll has just reported, so it runs once after all of them: "after each
 * pass over ready connections". (With a lower priority it would only run
 * once no I/O is ready at all, which under load can be much later.)
 */
#include "http/conn.h"
#include "http/listen.h"
#include "http/peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netdb.h>
#include <netinet/in.h>
#include <malloc.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SWEEP_MS 100
#define LINGER_MS 2000      /* read and discard after our close, at most */
#define ACCEPT_PAUSE_MS 100 /* out of descriptors: retry after */
#define POOL_SOCKS 256
/* Parse-and-send rounds one connection gets per pass of the loop (each up
   to max_pipeline answers or 16 KiB of output); then the others go. */
#define SERVICE_ROUNDS 4
/* The kernel keeps at most this much unsent per socket (TCP_NOTSENT_LOWAT:
   send() says EAGAIN past it). Without it a client that does not read
   lets the send buffer grow to megabytes, all answers generated for
   nobody. */
#define NOTSENT_LOWAT (16 << 10)
/* malloc_trim() once this much was freed outside the pools, at most once
   per TRIM_INTERVAL_MS for the whole server. glibc keeps freed memory in
   its per-thread arenas; without a trim, the memory of clients that left
   stays in the process. */
#define TRIM_BYTES (1 << 20)
#define TRIM_INTERVAL_MS 1000

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

static void release_claim(ratel_http_server_t *server);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ sockets */

static void check_done(worker_t *w)
{
    if (w->stopping && !w->socks)
        event_base_loopbreak(w->base);
}

static void dirty_unlink(worker_t *w, sock_t *s)
{
    if (!s->in_dirty)
        return;
    if (s->dprev)
        s->dprev->dnext = s->dnext;
    else
        w->dirty = s->dnext;
    if (s->dnext)
        s->dnext->dprev = s->dprev;
    s->dprev = s->dnext = NULL;
    s->in_dirty = 0;
}

static void mark_dirty(sock_t *s)
{
    worker_t *w = s->w;

    if (s->in_dirty)
        return;
    s->dprev = NULL;
    s->dnext = w->dirty;
    if (w->dirty)
        w->dirty->dprev = s;
    w->dirty = s;
    s->in_dirty = 1;
}

/* Closes the descriptor and forgets the socket. */
static void sock_free(sock_t *s)
{
    worker_t *w = s->w;

    event_del(&s->rev);
    event_del(&s->wev);
    close(s->fd);
    dirty_unlink(w, s);
    if (s->prev)
        s->prev->next = s->next;
    else
        w->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    atomic_fetch_sub(&w->server->nconns, 1);
    ratel__http_peers_release(w->server->peers, &s->peer);
    if (w->nfree_socks < POOL_SOCKS) {
        s->next = w->free_socks;
        w->free_socks = s;
        w->nfree_socks++;
    } else {
        free(s);
    }
    check_done(w);
}

/* The peer is gone, or we give up on it: close at once. */
static void sock_teardown(sock_t *s)
{
    if (s->conn) {
        s->proto->close(s->conn);
        s->conn = NULL;
    }
    sock_free(s);
}

/*
 * The last response is written: shut our side and read until the client
 * closes (or LINGER_MS), so that bytes it sent meanwhile do not make the
 * kernel answer with a reset that could destroy the response in flight.
 */
static void sock_finish(sock_t *s, int64_t now)
{
    worker_t *w = s->w;

    s->proto->close(s->conn);
    s->conn = NULL;
    shutdown(s->fd, SHUT_WR);
    if (s->write_wait) {
        event_del(&s->wev);
        s->write_wait = 0;
    }
    s->lingering = 1;
    s->linger_deadline_ms = now + LINGER_MS;
    if (w->stopping && s->linger_deadline_ms > w->deadline_ms)
        s->linger_deadline_ms = w->deadline_ms;
    if (!s->reading) {
        event_add(&s->rev, NULL);
        s->reading = 1;
    }
}

static void linger_read(sock_t *s)
{
    char tmp[4096];

    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(s->fd, tmp, sizeof tmp, 0);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        sock_free(s);
        return;
    }
}

/* Sends the connection's output (one send() in the common case; EV_WRITE
   for the rest). Returns -1 if the socket failed and is gone. */
static int send_output(sock_t *s, int64_t now)
{
    void *c = s->conn;
    size_t n;
    const char *out = s->proto->output(c, &n);

    while (n && !s->write_wait) {
        ssize_t k = send(s->fd, out, n, MSG_NOSIGNAL);
        if (k > 0) {
            s->proto->written(c, (size_t)k, now);
            if ((size_t)k < n) {
                event_add(&s->wev, NULL);
                s->write_wait = 1;
            }
            break;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(&s->wev, NULL);
            s->write_wait = 1;
            break;
        }
        sock_teardown(s);
        return -1;
    }
    return 0;
}

/*
 * Brings a socket up to date with its connection: parses requests held
 * back (pipeline limit, unsent output), sends the output, closes a
 * finished connection and turns reading on or off.
 *
 * Requests held back only because answers waited unsent may go once the
 * socket took them, so parse and send alternate until nothing buffered
 * may go (the socket full, the limits reached, or nothing left). While
 * pending() holds, each round dispatches a request, meets the end of the
 * buffered bytes or an error, so the loop ends; it never reads from the
 * socket, so it handles at most one read buffer of requests. After
 * SERVICE_ROUNDS the connection waits for the next pass (on_later), so
 * that a client filling its socket buffers with answers it never reads
 * does not delay everyone else's.
 */
static void service(sock_t *s, int64_t now)
{
    const ratel__http_proto_t *proto = s->proto;
    void *c = s->conn;
    worker_t *w = s->w;
    int want, rounds = 0;

    do {
        if (++rounds > SERVICE_ROUNDS) {
            s->later = 1;
            if (!w->later_pending) {
                w->later_pending = 1;
                event_active(&w->later_ev, 0, 0);
            }
            break;
        }
        proto->process(c, now);
        if (!s->write_wait && send_output(s, now) != 0)
            return;
    } while (proto->pending(c));
    if (proto->aborted(c)) {
        /* Out of memory, or a client that does not read past
           max_output_bytes: nothing is owed to it. */
        sock_teardown(s);
        return;
    }
    if (proto->finished(c)) {
        sock_finish(s, now);
        return;
    }
    want = proto->wants_read(c);
    if (want && !s->reading) {
        event_add(&s->rev, NULL);
        s->reading = 1;
    } else if (!want && s->reading) {
        event_del(&s->rev);
        s->reading = 0;
    }
    proto->trim(c);
}

static void process_dirty(worker_t *w)
{
    int64_t now;
    sock_t *s;

    if (!w->dirty)
        return;
    now = now_ms();
    while ((s = w->dirty)) {
        dirty_unlink(w, s);
        if (s->conn)
            service(s, now);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    sock_t *s = arg;
    worker_t *w = s->w;
    int64_t now;

    (void)what;
    if (s->lingering) {
        linger_read(s);
        return;
    }
    now = now_ms();
    w->in_callback++;
    for (;;) {
        size_t room;
        char *p = s->proto->read_space(s->conn, &room);
        ssize_t n;
        if (!p)
            break;
        n = recv(fd, p, room, 0);
        if (n > 0) {
            s->proto->received(s->conn, (size_t)n, now);
            if ((size_t)n < room)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        sock_teardown(s); /* EOF or reset */
        s = NULL;
        break;
    }
    if (s)
        mark_dirty(s);
    process_dirty(w);
    w->in_callback--;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    sock_t *s = arg;
    worker_t *w = s->w;

    (void)fd;
    (void)what;
    event_del(&s->wev);
    s->write_wait = 0;
    if (!s->conn)
        return;
    w->in_callback++;
    mark_dirty(s);
    process_dirty(w);
    w->in_callback--;
}

/* ------------------------------------------------- hooks from conn.c */

static void on_dispatched(ratel__http_ctx_t *ctx)
{
    worker_t *w = ctx->driver;

    if (!w->flush_pending) {
        w->flush_pending = 1;
        event_active(&w->flush_ev, 0, 0);
    }
}

static void on_wake(ratel__http_ctx_t *ctx, void *user)
{
    worker_t *w = ctx->driver;
    sock_t *s = user;

    mark_dirty(s);
    if (!w->in_callback && !w->output_pending) {
        w->output_pending = 1;
        event_active(&w->output_ev, 0, 0);
    }
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    const ratel_http_options_t *o = &w->server->options;

    (void)fd;
    (void)what;
    w->flush_pending = 0;
    w->in_callback++;
    if (o->flush)
        o->flush(o->ud, w->index);
    process_dirty(w);
    w->in_callback--;
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;

    (void)fd;
    (void)what;
    w->output_pending = 0;
    w->in_callback++;
    process_dirty(w);
    w->in_callback--;
}

/* Services the connections that used their rounds in the last pass. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;

    (void)fd;
    (void)what;
    w->later_pending = 0;
    w->in_callback++;
    for (sock_t *s = w->socks; s; s = s->next) {
        if (s->later) {
            s->later = 0;
            if (s->conn)
                mark_dirty(s);
        }
    }
    process_dirty(w);
    w->in_callback--;
}

/* ------------------------------------------------------------- accept */

/* Past max_connections (or the client's share): a 503 and close, without
   a state machine. */
static void refuse(int fd, const char *why)
{
    char buf[512], sink[1024];
    size_t n = ratel__http_error_response(503, why, buf, sizeof buf);

    /* Read what already came, so that close() sends FIN, not RST. */
    for (int i = 0; i < 4 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    (void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static sock_t *sock_new(worker_t *w, const ratel__http_proto_t *proto, int fd,
                        const struct sockaddr *peer, socklen_t peer_len,
                        int64_t now)
{
    sock_t *s = w->free_socks;

    if (s) {
        w->free_socks = s->next;
        w->nfree_socks--;
    } else {
        s = malloc(sizeof *s);
        if (!s)
            return NULL;
    }
    memset(s, 0, sizeof *s);
    s->proto = proto;
    s->conn = proto->conn_new(&w->ctx, peer, peer_len, now);
    if (!s->conn) {
        free(s);
        return NULL;
    }
    proto->set_user(s->conn, s);
    s->w = w;
    s->fd = fd;
    event_assign(&s->rev, w->base, fd, EV_READ | EV_PERSIST, on_read, s);
    event_assign(&s->wev, w->base, fd, EV_WRITE | EV_PERSIST, on_write, s);
    event_add(&s->rev, NULL);
    s->reading = 1;
    s->next = w->socks;
    if (w->socks)
        w->socks->prev = s;
    w->socks = s;
    return s;
}

/*
 * Counts an accepted connection against max_connections and its
 * client's share. Returns 1, or 0 after refusing it (503 and close).
 */
static int admit(ratel_http_server_t *server, int fd,
                 const struct sockaddr_storage *ss, socklen_t len,
                 ratel__http_peer_key_t *key)
{
    key->counted = 0;
    if (atomic_fetch_add(&server->nconns, 1) >=
        server->options.limits.max_connections) {
        atomic_fetch_sub(&server->nconns, 1);
        refuse(fd, NULL);
        return 0;
    }
    if (server->peers &&
        !ratel__http_peers_acquire(server->peers, (const struct sockaddr *)ss,
                                   len, key)) {
        atomic_fetch_sub(&server->nconns, 1);
        refuse(fd, "too many connections from this client address "
                   "(limits.max_connections_per_client)");
        return 0;
    }
    return 1;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    listener_t *l = arg;
    worker_t *w = l->w;
    ratel_http_server_t *server = w->server;
    int64_t now = now_ms();

    (void)what;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int one = 1, lowat = NOTSENT_LOWAT;
        ratel__http_peer_key_t key;
        sock_t *s;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Level-triggered: stop asking until the sweep. */
                for (unsigned i = 0; i < server->naddresses; i++)
                    if (w->listeners[i].fd >= 0)
                        event_del(&w->listeners[i].ev);
                w->accept_paused = 1;
                w->accept_resume_ms = now + ACCEPT_PAUSE_MS;
            }
            return;
        }
        if (!admit(server, fd, &ss, len, &key))
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
        s = sock_new(w, l->addr->proto, fd, (struct sockaddr *)&ss, len, now);
        if (s) {
            s->peer = key;
        } else {
            atomic_fetch_sub(&server->nconns, 1);
            ratel__http_peers_release(server->peers, &key);
            close(fd);
        }
    }
}

/* ------------------------------------------------------ sweep, stop */

/*
 * Gives freed memory back to the system: glibc keeps what a thread frees
 * in that thread's arena, so after clients that made us hold megabytes
 * leave, the process would stay that big. Rate-limited across the
 * workers: malloc_trim() walks every arena under its lock.
 */
static void maybe_trim(worker_t *w, int64_t now)
{
    long long last;

    if (w->ctx.released_bytes < TRIM_BYTES)
        return;
    last = atomic_load(&w->server->trim_ms);
    if (now - last < TRIM_INTERVAL_MS ||
        !atomic_compare_exchange_strong(&w->server->trim_ms, &last, now))
        return;
    w->ctx.released_bytes = 0;
    malloc_trim(0);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    int64_t now = now_ms();
    int expired = w->stopping && now >= w->deadline_ms;
    sock_t *s, *next;

    (void)fd;
    (void)what;
    if (w->accept_paused && !w->stopping && now >= w->accept_resume_ms) {
        w->accept_paused = 0;
        for (unsigned i = 0; i < w->server->naddresses; i++)
            if (w->listeners[i].fd >= 0)
                event_add(&w->listeners[i].ev, NULL);
    }
    w->in_callback++;
    for (s = w->socks; s; s = next) {
        next = s->next;
        if (s->lingering) {
            if (now >= s->linger_deadline_ms || expired)
                sock_free(s);
        } else if (expired || s->proto->tick(s->conn, now)) {
            sock_teardown(s);
        }
    }
    process_dirty(w);
    w->in_callback--;
    maybe_trim(w, now);
    check_done(w);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    uint64_t v;
    int64_t now = now_ms();
    sock_t *s, *next;

    (void)what;
    (void)!read(fd, &v, sizeof v);
    if (w->stopping)
        return;
    w->stopping = 1;
    w->deadline_ms = now + atomic_load(&w->server->drain_ms);
    for (unsigned i = 0; i < w->server->naddresses; i++) {
        listener_t *l = &w->listeners[i];
        if (l->fd < 0)
            continue;
        event_del(&l->ev);
        close(l->fd);
        l->fd = -1;
        /* No longer served by us: a new server may start while we
           drain. */
        if (atomic_fetch_sub(&w->server->listening, 1) == 1)
            release_claim(w->server);
    }
    w->in_callback++;
    for (s = w->socks; s; s = next) {
        next = s->next;
        if (s->lingering) {
            if (s->linger_deadline_ms > w->deadline_ms)
                s->linger_deadline_ms = w->deadline_ms;
        } else if (s->proto->drain(s->conn, now)) {
            sock_teardown(s); /* idle */
        } else {
            mark_dirty(s);
        }
    }
    process_dirty(w);
    w->in_callback--;
    if (now >= w->deadline_ms) {
        for (s = w->socks; s; s = next) {
            next = s->next;
            sock_teardown(s);
        }
    }
    check_done(w);
}

/* ------------------------------------------------------------ set-up */

/* Lets another server have the addresses (safe from any thread). */
static void release_claim(ratel_http_server_t *server)
{
    for (unsigned i = 0; i < server->naddresses; i++) {
        int fd = atomic_exchange(&server->addresses[i].claim_fd, -1);
        if (fd >= 0)
            close(fd);
    }
}

static int worker_init(worker_t *w, ratel_http_server_t *server, unsigned index,
                       char *err, size_t errlen)
{
    const ratel_http_options_t *o = &server->options;
    struct event_config *cfg = event_config_new();
    struct timeval sweep = {0, SWEEP_MS * 1000};
    int failed = 0;

    w->server = server;
    w->index = index;
    if (cfg) {
        /* One thread per base: no locks needed. */
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        w->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!w->base) {
        snprintf(err, errlen, "listen %s: cannot create an event loop",
                 o->listen);
        return -1;
    }
    w->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->stop_fd < 0) {
        snprintf(err, errlen, "listen %s: eventfd: %s", o->listen,
                 strerror(errno));
        return -1;
    }
    ratel__http_ctx_init(&w->ctx, &o->limits, o->handler, o->ud, index);
    w->ctx.grpc_handler = o->grpc_handler;
    ratel__grpc_limits_fill(&w->ctx.grpc_limits, &o->grpc_limits);
    w->ctx.dispatched = on_dispatched;
    w->ctx.wake = on_wake;
    w->ctx.driver = w;
    for (unsigned i = 0; i < server->naddresses; i++) {
        listener_t *l = &w->listeners[i];
        event_assign(&l->ev, w->base, l->fd, EV_READ | EV_PERSIST, on_accept,
                     l);
        failed |= event_add(&l->ev, NULL);
    }
    event_assign(&w->stop_ev, w->base, w->stop_fd, EV_READ | EV_PERSIST,
                 on_stop, w);
    event_assign(&w->flush_ev, w->base, -1, 0, on_flush, w);
    event_assign(&w->output_ev, w->base, -1, 0, on_output, w);
    event_assign(&w->later_ev, w->base, -1, 0, on_later, w);
    event_assign(&w->sweep_ev, w->base, -1, EV_PERSIST, on_sweep, w);
    if (failed || event_add(&w->stop_ev, NULL) != 0 ||
        event_add(&w->sweep_ev, &sweep) != 0) {
        snprintf(err, errlen, "listen %s: cannot register events", o->listen);
        return -1;
    }
    return 0;
}

/* Adds an address to serve with `proto`: parsed and claimed. */
static int address_add(ratel_http_server_t *server, const char *text,
                       const ratel__http_proto_t *proto, char *err,
                       size_t errlen)
{
    address_t *a = &server->addresses[server->naddresses];

    atomic_store(&a->claim_fd, -1);
    if (ratel__parse_listen(text, &a->ss, &a->len, err, errlen) != 0)
        return -1;
    a->text = strdup(text);
    if (!a->text) {
        snprintf(err, errlen, "http server: out of memory");
        return -1;
    }
    a->proto = proto;
    server->naddresses++;
    if (ratel__port_of(&a->ss) != 0 &&
        ratel__claim_address(a, err, errlen) != 0)
        return -1;
    return 0;
}

/* Opens worker w's socket on address a; the first one learns the port
   the kernel chose for port 0, which the other workers then bind. */
static int listener_open(worker_t *w, listener_t *l, address_t *a, char *err,
                         size_t errlen)
{
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;

    l->w = w;
    l->addr = a;
    l->fd = ratel__open_listener(a->text, &a->ss, a->len, err, errlen);
    if (l->fd < 0)
        return -1;
    atomic_fetch_add(&w->server->listening, 1);
    if (a->port)
        return 0;
    getsockname(l->fd, (struct sockaddr *)&bound, &blen);
    if (bound.ss_family == AF_INET6) {
        uint16_t port = ((struct sockaddr_in6 *)&bound)->sin6_port;
        ((struct sockaddr_in6 *)&a->ss)->sin6_port = port;
        a->port = ntohs(port);
    } else {
        uint16_t port = ((struct sockaddr_in *)&bound)->sin_port;
        ((struct sockaddr_in *)&a->ss)->sin_port = port;
        a->port = ntohs(port);
    }
    return 0;
}

static int server_setup(ratel_http_server_t *server,
                        const ratel_http_options_t *options, char *err,
                        size_t errlen)
{
    if (address_add(server, options->listen, &ratel__http1_proto, err,
                    errlen) != 0)
        return -1;
    if (options->grpc_listen && address_add(server, options->grpc_listen,
                                            &ratel__h2_proto, err, errlen) != 0)
        return -1;
    for (unsigned i = 0; i < server->nworkers; i++) {
        worker_t *w = &server->workers[i];
        w->server = server;
        for (unsigned j = 0; j < server->naddresses; j++)
            if (listener_open(w, &w->listeners[j], &server->addresses[j], err,
                              errlen) != 0)
                return -1;
        if (worker_init(w, server, i, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int ratel_http_server_new(ratel_http_server_t **out,
                          const ratel_http_options_t *options, char *err,
                          size_t errlen)
{
    ratel_http_server_t *server;
    char dummy[8];

    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    *out = NULL;
    if (!options || !options->handler ||
        (options->grpc_listen && !options->grpc_handler)) {
        snprintf(err, errlen, "http server: a handler is required");
        return -1;
    }
    server = calloc(1, sizeof *server);
    if (!server) {
        snprintf(err, errlen, "http server: out of memory");
        return -1;
    }
    server->options = *options;
    ratel__http_limits_fill(&server->options.limits, &options->limits);
    server->nworkers = options->threads ? options->threads : 1;
    if (server->options.limits.max_connections_per_client) {
        server->peers = ratel__http_peers_new(
            server->options.limits.max_connections,
            server->options.limits.max_connections_per_client);
        if (!server->peers) {
            snprintf(err, errlen, "http server: out of memory");
            ratel_http_server_free(server);
            return -1;
        }
    }
    server->workers = calloc(server->nworkers, sizeof *server->workers);
    if (!server->workers) {
        snprintf(err, errlen, "http server: out of memory");
        ratel_http_server_free(server);
        return -1;
    }
    for (unsigned i = 0; i < server->nworkers; i++) {
        server->workers[i].stop_fd = -1;
        for (unsigned j = 0; j < MAX_ADDRESSES; j++)
            server->workers[i].listeners[j].fd = -1;
    }
    if (server_setup(server, options, err, errlen) != 0) {
        ratel_http_server_free(server);
        return -1;
    }
    server->options.listen = server->addresses[0].text;
    server->options.grpc_listen =
        server->naddresses > 1 ? server->addresses[1].text : NULL;
    *out = server;
    return 0;
}

int ratel_http_server_port(const ratel_http_server_t *server)
{
    return server->addresses[0].port;
}

int ratel_http_server_grpc_port(const ratel_http_server_t *server)
{
    return server->naddresses > 1 ? server->addresses[1].port : 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;

    event_base_dispatch(w->base);
    return NULL;
}

int ratel_http_server_run(ratel_http_server_t *server)
{
    sigset_t all, old;
    int rc = 0;

    if (server->running)
        return -1;
    server->running = 1;
    /* Signals go to the caller's thread, not to the workers. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 1; i < server->nworkers; i++) {
        worker_t *w = &server->workers[i];
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            rc = -1;
            break;
        }
        w->started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        ratel_http_server_stop(server, 0);
    worker_main(&server->workers[0]);
    for (unsigned i = 1; i < server->nworkers; i++) {
        if (server->workers[i].started)
            pthread_join(server->workers[i].tid, NULL);
        server->workers[i].started = 0;
    }
    return rc;
}

void ratel_http_server_stop(ratel_http_server_t *server, unsigned drain_ms)
{
    uint64_t one = 1;

    atomic_store(&server->drain_ms, drain_ms);
    for (unsigned i = 0; i < server->nworkers; i++)
        if (server->workers[i].stop_fd >= 0)
            (void)!write(server->workers[i].stop_fd, &one, sizeof one);
}

static void worker_free(worker_t *w)
{
    sock_t *s, *next;

    if (w->base) {
        for (s = w->socks; s; s = next) {
            next = s->next;
            event_del(&s->rev);
            event_del(&s->wev);
            if (s->conn)
                s->proto->close(s->conn);
            close(s->fd);
            free(s);
        }
        w->socks = NULL;
        for (unsigned i = 0; i < w->server->naddresses; i++)
            if (w->listeners[i].fd >= 0)
                event_del(&w->listeners[i].ev);
        event_del(&w->stop_ev);
        event_del(&w->flush_ev);
        event_del(&w->output_ev);
        event_del(&w->later_ev);
        event_del(&w->sweep_ev);
        ratel__http_ctx_destroy(&w->ctx);
        ratel__h2_ctx_destroy(&w->ctx);
        event_base_free(w->base);
    }
    for (s = w->free_socks; s; s = next) {
        next = s->next;
        free(s);
    }
    for (unsigned i = 0; i < MAX_ADDRESSES; i++)
        if (w->listeners[i].fd >= 0)
            close(w->listeners[i].fd);
    if (w->stop_fd >= 0)
        close(w->stop_fd);
}

void ratel_http_server_free(ratel_http_server_t *server)
{
    if (!server)
        return;
    for (unsigned i = 0; server->workers && i < server->nworkers; i++)
        worker_free(&server->workers[i]);
    free(server->workers);
    ratel__http_peers_free(server->peers);
    release_claim(server);
    for (unsigned i = 0; i < server->naddresses; i++)
        free(server->addresses[i].text);
    free(server);
}
