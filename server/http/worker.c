/*
 * worker.c - a worker's event loop around the connection state machines
 * of conn.c (HTTP/1.1) and h2.c (gRPC). A worker's callbacks:
 *
 *   accept   (server.c) accept4() until EAGAIN; 503 and close past
 *            max_connections, or past max_connections_per_client
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
#include "http/server_private.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SWEEP_MS 100
#define LINGER_MS 2000 /* read and discard after our close, at most */
#define POOL_SOCKS 256
/* Parse-and-send rounds one connection gets per pass of the loop (each up
   to max_pipeline answers or 16 KiB of output); then the others go. */
#define SERVICE_ROUNDS 4
/* malloc_trim() once this much was freed outside the pools, at most once
   per TRIM_INTERVAL_MS for the whole server. glibc keeps freed memory in
   its per-thread arenas; without a trim, the memory of clients that left
   stays in the process. */
#define TRIM_BYTES (1 << 20)
#define TRIM_INTERVAL_MS 1000

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
    now = ratel__http_now_ms();
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
    now = ratel__http_now_ms();
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

/*
 * Whether the peer of socket `user` has closed its side (POLLRDHUP: its
 * FIN arrived, even behind bytes not read yet) or the connection failed:
 * one poll() of the descriptor, no wait. Asked of a request before it is
 * decided (ratel_http_exchange_abandoned, ratel_grpc_call_abandoned).
 */
static int on_peer_closed(ratel__http_ctx_t *ctx, void *user)
{
    sock_t *s = user;
    struct pollfd p = {.fd = s->fd, .events = POLLRDHUP};

    (void)ctx;
    return poll(&p, 1, 0) == 1 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
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

sock_t *ratel__http_sock_new(worker_t *w, const ratel__http_proto_t *proto,
                             int fd, const struct sockaddr *peer,
                             socklen_t peer_len, int64_t now)
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
    int64_t now = ratel__http_now_ms();
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
    int64_t now = ratel__http_now_ms();
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
            ratel__http_release_claim(w->server);
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

int ratel__http_worker_init(worker_t *w, ratel_http_server_t *server,
                            unsigned index, char *err, size_t errlen)
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
    w->ctx.grpc_streams = o->grpc_streams;
    w->ctx.ngrpc_streams = o->ngrpc_streams;
    ratel__grpc_limits_fill(&w->ctx.grpc_limits, &o->grpc_limits);
    w->ctx.dispatched = on_dispatched;
    w->ctx.wake = on_wake;
    w->ctx.peer_closed = on_peer_closed;
    w->ctx.driver = w;
    for (unsigned i = 0; i < server->naddresses; i++) {
        listener_t *l = &w->listeners[i];
        event_assign(&l->ev, w->base, l->fd, EV_READ | EV_PERSIST,
                     ratel__http_on_accept, l);
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

void ratel__http_worker_free(worker_t *w)
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
