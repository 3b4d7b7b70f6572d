/*
 * transport_event.c - the libevent transport (transport_event.h).
 *
 * A connection goes through
 *
 *   resolving    a name, asked of evdns (numeric addresses skip this)
 *   connecting   our nonblocking connect() and a one-shot write event;
 *                a refused address gives way to the next one
 *   handshake    TLS only: an OpenSSL bufferevent in the connecting state
 *   up           a bufferevent (plain or OpenSSL) reading into `data`
 *
 * Bytes sent before the bufferevent exists wait in `pending` and move
 * into its output when it is made.
 *
 * Callbacks and freeing. A link's callbacks may close the link itself or
 * any other (transport.h), so every libevent callback holds its
 * connection (`hold`/`drop`): a close inside it releases the bufferevent
 * at once (libevent keeps the bufferevent's memory until its own callback
 * has returned and finalizes it in the loop) and marks the connection
 * closed; the connection's memory goes when the outermost callback holding
 * it returns. A name lookup cancelled by a close answers later with
 * EVUTIL_EAI_CANCEL: the request then points at nothing and frees itself.
 */
#include "store/transport_event.h"

#include "ratel.h"
#include "store/async.h"
#include "store/engine.h"
#include "store/tls.h"
#include "store/transport_sock.h"

#include <errno.h>
#include <netdb.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum conn_state_e {
    CONN_RESOLVING,
    CONN_CONNECTING,
    CONN_HANDSHAKE,
    CONN_UP
} conn_state_t;

typedef struct conn_s conn_t;

/* A name lookup in flight; conn is NULL once its connection let go. */
typedef struct lookup_s {
    conn_t *conn;
    struct evdns_getaddrinfo_request *req;
} lookup_t;

struct conn_s {
    ratel__event_t *owner;
    ratel__link_t *link;
    conn_state_t state;
    char *host;
    int port;
    lookup_t *lookup;              /* CONN_RESOLVING */
    int opening;                   /* inside `open`: a lookup answered at
                                      once leaves its result here */
    int lookup_error;              /* ... an EVUTIL_EAI_* code */
    struct evutil_addrinfo *addrs; /* from the lookup, tried in turn */
    struct evutil_addrinfo *next_addr;
    int fd;                   /* CONN_CONNECTING */
    struct event *connect_ev; /* its write event (or an error to report) */
    int fail_errno;           /* every address failed at once */
    SSL *ssl;                 /* until the OpenSSL bufferevent owns it */
    struct bufferevent *bev;  /* CONN_HANDSHAKE, CONN_UP */
    struct evbuffer *pending; /* sent before the bufferevent existed */
    int got_data;             /* application data arrived */
    int holds;                /* callbacks of ours on the stack */
    int closed;
    conn_t *prev, *next;
};

struct ratel__event_s {
    struct event_base *base;
    ratel__loop_hooks_t hooks;
    struct event *timer_ev;
    int64_t timer_at; /* monotonic us, -1 when disarmed */
    struct event *flush_ev;
    int deferred;
    struct evdns_base *dns; /* made at the first name */
    conn_t *conns;
};

/* ------------------------------------------------------------ lifetime */

static void unlink_conn(conn_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->owner->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* Lets go of everything but the struct itself; no callback follows. */
static void detach(conn_t *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    if (c->lookup) {
        c->lookup->conn = NULL;
        if (c->lookup->req)
            evdns_getaddrinfo_cancel(c->lookup->req);
        c->lookup = NULL;
    }
    if (c->connect_ev)
        event_free(c->connect_ev);
    c->connect_ev = NULL;
    if (c->bev)
        bufferevent_free(c->bev); /* closes the socket, frees the SSL */
    c->bev = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->addrs)
        evutil_freeaddrinfo(c->addrs);
    c->addrs = c->next_addr = NULL;
    if (c->pending)
        evbuffer_free(c->pending);
    c->pending = NULL;
    free(c->host);
    c->host = NULL;
    unlink_conn(c);
}

static void hold(conn_t *c)
{
    c->holds++;
}

static void drop(conn_t *c)
{
    if (--c->holds == 0 && c->closed)
        free(c);
}

/* Reports `down` (from a callback holding c): the transport lets go
   first, so the engine may open a new connection from `down`. */
static void report_down(conn_t *c, const char *why, int tls_error)
{
    ratel__link_t *link = c->link;

    detach(c);
    link->down(link, why, tls_error);
}

static void report_errno(conn_t *c, int err)
{
    char why[128];

    snprintf(why, sizeof why, "%s", strerror(err));
    report_down(c, why, 0);
}

/* ------------------------------------------------------------ TLS errors */

/*
 * What a bufferevent's error says; 1 when TLS refused. The OpenSSL
 * bufferevent keeps up to three codes, popped last first: the failed
 * call's SSL_get_error() code (SSL_ERROR_*, small numbers), then what it
 * emptied from OpenSSL's error queue. The queue is put back, in its
 * order, for ratel__tls_describe. A failed system call with nothing in
 * the queue is the socket's failure, not TLS's.
 */
static int bev_error(conn_t *c, char *why, size_t len)
{
    SSL *ssl = c->bev ? bufferevent_openssl_get_ssl(c->bev) : NULL;
    unsigned long popped[8], e;
    size_t n = 0;
    int code = 0;

    while (ssl && n < 8 && (e = bufferevent_get_openssl_error(c->bev)) != 0)
        popped[n++] = e;
    if (n > 0 && popped[n - 1] <= SSL_ERROR_WANT_CLIENT_HELLO_CB)
        code = (int)popped[--n];
    if (!ssl || (n == 0 && code != SSL_ERROR_SSL)) {
        snprintf(why, len, "%s", strerror(EVUTIL_SOCKET_ERROR()));
        return 0;
    }
    ERR_clear_error();
    while (n > 0) {
        e = popped[--n];
        ERR_raise(ERR_GET_LIB(e), ERR_GET_REASON(e));
    }
    ratel__tls_describe(ssl, code ? code : SSL_ERROR_SSL, why, len);
    ERR_clear_error();
    return 1;
}

/* ------------------------------------------------------------ bufferevents */

static void read_cb(struct bufferevent *bev, void *arg)
{
    conn_t *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    hold(c);
    while (!c->closed && evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v;

        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        c->got_data = 1;
        c->link->data(c->link, v.iov_base, v.iov_len);
        if (!c->closed)
            evbuffer_drain(in, v.iov_len);
    }
    drop(c);
}

/*
 * A TLS connection that ended without TLS saying why: a failed write may
 * have hidden what the server sent before it went, such as the alert by
 * which TLS 1.3 refuses a missing client certificate after the handshake.
 * Reads what is left on the socket through the SSL: replies go to `data`,
 * an alert becomes the reason (returns 1). Returns -1 when `data` closed
 * the connection, 0 when TLS has nothing to add.
 */
static int tls_last_words(conn_t *c, char *why, size_t len)
{
    SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
    char buf[4096];
    int r, err;

    if (!ssl)
        return 0;
    ERR_clear_error();
    while ((r = SSL_read(ssl, buf, sizeof buf)) > 0) {
        c->got_data = 1;
        c->link->data(c->link, buf, (size_t)r);
        if (c->closed)
            return -1;
        ERR_clear_error();
    }
    err = SSL_get_error(ssl, r);
    if (err != SSL_ERROR_SSL) {
        /* Cut after asking for a client certificate, before anything
           else arrived: refused by TLS (transport_sock.h). */
        if (c->state != CONN_UP || c->got_data ||
            !ratel__transport_tls_asked(ssl)) {
            ERR_clear_error();
            return 0;
        }
        err = SSL_ERROR_SYSCALL;
    }
    ratel__tls_describe(ssl, err, why, len);
    ERR_clear_error();
    return 1;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    conn_t *c = arg;
    char why[256];
    int tls_error = 0;

    (void)bev;
    hold(c);
    if (what & BEV_EVENT_CONNECTED) {
        c->state = CONN_UP;
        c->link->up(c->link);
        drop(c);
        return;
    }
    if (what & BEV_EVENT_EOF)
        snprintf(why, sizeof why, "%s",
                 c->state == CONN_HANDSHAKE
                     ? "connection closed by the server during the TLS "
                       "handshake"
                     : "connection closed by the server");
    else
        tls_error = bev_error(c, why, sizeof why);
    if (!tls_error)
        tls_error = tls_last_words(c, why, sizeof why);
    if (tls_error >= 0)
        report_down(c, why, tls_error);
    drop(c);
}

/* The socket is connected: it becomes a bufferevent (TLS: the handshake
   starts, `up` follows it; plain: `up` now). */
static void make_bev(conn_t *c)
{
    ratel__event_t *e = c->owner;
    struct bufferevent *bev;
    int tls = c->ssl != NULL;

    if (tls) {
        bev = bufferevent_openssl_socket_new(e->base, c->fd, c->ssl,
                                             BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        c->ssl = NULL; /* the bufferevent's, or freed when it failed */
        if (bev)
            bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(e->base, c->fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!bev) {
        report_down(c, "out of memory", 0);
        return;
    }
    c->fd = -1;
    c->bev = bev;
    c->state = tls ? CONN_HANDSHAKE : CONN_UP;
    bufferevent_setcb(bev, read_cb, NULL, event_cb, c);
    if (bufferevent_write_buffer(bev, c->pending) != 0 ||
        bufferevent_enable(bev, EV_READ | EV_WRITE) != 0) {
        report_down(c, "out of memory", 0);
        return;
    }
    if (c->state == CONN_UP)
        c->link->up(c->link);
}

/* ------------------------------------------------------------ connecting */

static void connect_cb(evutil_socket_t fd, short what, void *arg);

/*
 * Starts a connect to the next address and waits for it to finish.
 * Returns 0, or -1 with fail_errno when no address is left (the caller
 * reports it; from `open`, through connect_ev on the loop).
 */
static int connect_next(conn_t *c)
{
    if (c->connect_ev)
        event_free(c->connect_ev);
    c->connect_ev = NULL;
    while (c->next_addr) {
        struct evutil_addrinfo *ai = c->next_addr;
        int fd;

        c->next_addr = ai->ai_next;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    IPPROTO_TCP);
        if (fd < 0) {
            c->fail_errno = errno;
            continue;
        }
        ratel__transport_socket_options(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
            errno != EINPROGRESS) {
            c->fail_errno = errno;
            close(fd);
            continue;
        }
        c->connect_ev = event_new(c->owner->base, fd, EV_WRITE, connect_cb, c);
        if (!c->connect_ev || event_add(c->connect_ev, NULL) != 0) {
            c->fail_errno = ENOMEM;
            close(fd);
            return -1;
        }
        c->fd = fd;
        c->fail_errno = 0;
        c->state = CONN_CONNECTING;
        return 0;
    }
    if (!c->fail_errno)
        c->fail_errno = EHOSTUNREACH;
    return -1;
}

/* Every address failed inside `open`: report it from the loop. */
static int fail_later(conn_t *c)
{
    c->connect_ev = event_new(c->owner->base, -1, 0, connect_cb, c);
    if (!c->connect_ev)
        return -1;
    event_active(c->connect_ev, EV_WRITE, 0);
    return 0;
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;
    int err = 0;
    socklen_t len = sizeof err;

    (void)what;
    hold(c);
    if (c->fail_errno) {
        report_errno(c, c->fail_errno);
    } else {
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err) {
            close(c->fd);
            c->fd = -1;
            if (connect_next(c) != 0)
                report_errno(c, err);
        } else {
            event_free(c->connect_ev);
            c->connect_ev = NULL;
            evutil_freeaddrinfo(c->addrs);
            c->addrs = c->next_addr = NULL;
            make_bev(c);
        }
    }
    drop(c);
}

/* A failed lookup in the C library's words where it has them, so both
   transports say "Name or service not known" of an unknown name. */
static void lookup_failed(conn_t *c, int code, char *why, size_t len)
{
    snprintf(why, len, "cannot resolve %s: %s", c->host,
             code == EVUTIL_EAI_NONAME ? gai_strerror(EAI_NONAME)
                                       : evutil_gai_strerror(code));
}

static void resolved(int result, struct evutil_addrinfo *ai, void *arg)
{
    lookup_t *l = arg;
    conn_t *c = l->conn;
    char why[256];

    free(l);
    if (!c) {
        if (ai)
            evutil_freeaddrinfo(ai);
        return;
    }
    c->lookup = NULL;
    c->addrs = c->next_addr = ai;
    if (c->opening) {
        c->lookup_error = result;
        return;
    }
    hold(c);
    if (result != 0) {
        lookup_failed(c, result, why, sizeof why);
        report_down(c, why, 0);
    } else if (connect_next(c) != 0) {
        report_errno(c, c->fail_errno);
    }
    drop(c);
}

static struct evdns_base *dns_base(ratel__event_t *e)
{
    if (e->dns)
        return e->dns;
    e->dns = evdns_base_new(e->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                         EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (!e->dns) {
        /* No usable resolv.conf: names from /etc/hosts still work. */
        e->dns = evdns_base_new(e->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (e->dns)
            evdns_base_load_hosts(e->dns, NULL);
    }
    return e->dns;
}

/*
 * Finds host's addresses: at once when numeric, else by evdns, which may
 * answer at once too (/etc/hosts). Returns 0 with *waiting set when the
 * answer comes later, or -1 with why.
 */
static int start_lookup(conn_t *c, int *waiting, char *why, size_t whylen)
{
    struct evutil_addrinfo hints = {0};
    struct evdns_getaddrinfo_request *req;
    char service[16];
    struct evdns_base *dns;
    lookup_t *l;

    *waiting = 0;
    snprintf(service, sizeof service, "%d", c->port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = EVUTIL_AI_NUMERICHOST | EVUTIL_AI_NUMERICSERV;
    if (evutil_getaddrinfo(c->host, service, &hints, &c->addrs) == 0) {
        c->next_addr = c->addrs;
        return 0;
    }
    c->addrs = NULL;
    hints.ai_flags = EVUTIL_AI_NUMERICSERV;
    dns = dns_base(c->owner);
    l = dns ? calloc(1, sizeof *l) : NULL;
    if (!l) {
        snprintf(why, whylen, "cannot resolve %s: out of memory", c->host);
        return -1;
    }
    l->conn = c;
    c->lookup = l;
    c->state = CONN_RESOLVING;
    c->opening = 1;
    req = evdns_getaddrinfo(dns, c->host, service, &hints, resolved, l);
    c->opening = 0;
    if (c->lookup) { /* not answered yet (l is alive) */
        if (!req) {
            c->lookup = NULL;
            free(l);
            snprintf(why, whylen, "cannot resolve %s", c->host);
            return -1;
        }
        l->req = req;
        *waiting = 1;
        return 0;
    }
    if (c->lookup_error) {
        lookup_failed(c, c->lookup_error, why, whylen);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ transport */

static void *event_open(void *tud, ratel__link_t *link, const char *host,
                        int port, const ratel__tls_target_t *tls, char *why,
                        size_t whylen)
{
    ratel__event_t *e = tud;
    conn_t *c;
    int waiting;

    if (port < 1 || port > 65535) {
        snprintf(why, whylen, "port %d of %s is not in 1..65535", port, host);
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    c->owner = e;
    c->link = link;
    c->port = port;
    c->fd = -1;
    c->next = e->conns;
    if (e->conns)
        e->conns->prev = c;
    e->conns = c;
    c->host = strdup(host);
    c->pending = evbuffer_new();
    if (!c->host || !c->pending) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    if (tls && ratel__tls_new(tls->ctx, tls->server_name, tls->insecure,
                              &c->ssl, why, whylen) != 0)
        goto fail;
    if (c->ssl)
        ratel__transport_tls_watch(c->ssl);
    if (start_lookup(c, &waiting, why, whylen) != 0)
        goto fail;
    if (!waiting && connect_next(c) != 0 && fail_later(c) != 0) {
        snprintf(why, whylen, "%s", strerror(c->fail_errno));
        goto fail;
    }
    return c;
fail:
    detach(c);
    free(c);
    return NULL;
}

/*
 * A plain connection's bytes go out at once when nothing waits before
 * them: writing now saves the loop turn and the two epoll changes a
 * bufferevent's write event costs for each pipeline (rateld on Redis
 * writes one each pass). Returns how many bytes the socket took; the rest
 * waits in the bufferevent as before (an error is left for it to find).
 */
static size_t write_now(conn_t *c, const char *p, size_t n)
{
    ssize_t w;

    if (c->state != CONN_UP || bufferevent_openssl_get_ssl(c->bev) ||
        evbuffer_get_length(bufferevent_get_output(c->bev)) != 0)
        return 0;
    w = send(bufferevent_getfd(c->bev), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    return w > 0 ? (size_t)w : 0;
}

static void event_send(void *tud, void *handle, const char *p, size_t n)
{
    conn_t *c = handle;
    size_t done;

    (void)tud;
    if (c->bev) {
        done = write_now(c, p, n);
        if (done < n)
            bufferevent_write(c->bev, p + done, n - done);
    } else if (c->pending) {
        evbuffer_add(c->pending, p, n);
    }
}

static void event_close(void *tud, void *handle)
{
    conn_t *c = handle;

    (void)tud;
    detach(c);
    if (c->holds == 0)
        free(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    ratel__event_t *e = arg;
    int64_t left = e->timer_at - ratel__transport_now_us();

    (void)fd;
    (void)what;
    if (e->timer_at < 0)
        return;
    /* libevent measures from its cached time of the pass: a timer armed
       late in a pass may come a little early. */
    if (left > 0) {
        struct timeval tv = {left / 1000000, left % 1000000};
        evtimer_add(e->timer_ev, &tv);
        return;
    }
    e->timer_at = -1;
    e->hooks.timer(e->hooks.ud);
}

static void event_timer(void *tud, int64_t at_us)
{
    ratel__event_t *e = tud;
    int64_t left;
    struct timeval tv;

    if (at_us < 0) {
        e->timer_at = -1;
        evtimer_del(e->timer_ev);
        return;
    }
    e->timer_at = at_us;
    left = at_us - ratel__transport_now_us();
    if (left < 0)
        left = 0;
    tv.tv_sec = left / 1000000;
    tv.tv_usec = left % 1000000;
    evtimer_add(e->timer_ev, &tv);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    ratel__event_t *e = arg;

    (void)fd;
    (void)what;
    e->deferred = 0;
    e->hooks.flush(e->hooks.ud);
}

static void event_defer(void *tud)
{
    ratel__event_t *e = tud;

    if (e->deferred)
        return;
    e->deferred = 1;
    event_active(e->flush_ev, EV_TIMEOUT, 0);
}

static int64_t event_now(void *tud)
{
    (void)tud;
    return ratel__transport_now_us();
}

const ratel__transport_t ratel__event_transport = {
    .open = event_open,
    .send = event_send,
    .close = event_close,
    .timer = event_timer,
    .defer = event_defer,
    .now = event_now,
};

int ratel__event_new(ratel__event_t **out, struct event_base *base,
                     const ratel__loop_hooks_t *hooks)
{
    ratel__event_t *e = calloc(1, sizeof *e);

    *out = NULL;
    if (!e)
        return RATEL_ENOMEM;
    e->base = base;
    e->hooks = *hooks;
    e->timer_at = -1;
    e->timer_ev = evtimer_new(base, timer_cb, e);
    e->flush_ev = event_new(base, -1, 0, flush_cb, e);
    if (!e->timer_ev || !e->flush_ev) {
        ratel__event_free(e);
        return RATEL_ENOMEM;
    }
    *out = e;
    return 0;
}

void ratel__event_free(ratel__event_t *e)
{
    if (!e)
        return;
    while (e->conns) {
        conn_t *c = e->conns;

        detach(c);
        if (c->holds == 0)
            free(c);
    }
    if (e->dns)
        evdns_base_free(e->dns, 1);
    if (e->timer_ev)
        event_free(e->timer_ev);
    if (e->flush_ev)
        event_free(e->flush_ev);
    free(e);
}

/* ------------------------------------------- the asynchronous API on it */

static int async_open(void *ctx, const ratel__loop_hooks_t *hooks, void **tud)
{
    ratel__event_t *e;
    int rc = ratel__event_new(&e, ctx, hooks);

    *tud = e;
    return rc;
}

static void async_close(void *tud)
{
    ratel__event_free(tud);
}

/* ratel.h's asynchronous API on a libevent loop: async.c's calls on this
   transport, which the ratel_async_t owns. */
int ratel_async_new(ratel_async_t **out, ratel_store_t *store,
                    struct event_base *base, char *errbuf, size_t errlen)
{
    ratel__async_loop_t loop = {.transport = &ratel__event_transport,
                                .open = async_open,
                                .close = async_close,
                                .ctx = base};

    if (!base) {
        if (out)
            *out = NULL;
        ratel__msg(errbuf, errlen, "a store and an event_base are needed");
        return RATEL_EINVAL;
    }
    return ratel__async_new_on(out, store, &loop, errbuf, errlen);
}
