/*
 * ngx_http_ratel_transport.c - the Redis engine's transport on an nginx
 * worker's loop (ngx_http_ratel_transport.h; transport.h says what a
 * transport owes the engine).
 *
 * Connecting. The address is looked up with getaddrinfo(): a numeric one
 * at once; a name blocks the worker for the lookup (nginx's resolver
 * needs a `resolver` of the configuration, which a store does not have),
 * so the documentation asks for addresses or /etc/hosts names. Its
 * addresses are tried in turn by ngx_event_connect_peer() until one takes
 * the connection; the engine times the whole connect out itself
 * (connect_timeout_ms) and retries.
 *
 * TLS. ngx_ssl_create_connection() makes the SSL from the store's own
 * SSL_CTX (tls.c: CAs, client certificate, verification), then
 * ratel__tls_setup() gives it the name to send and check, as libratel's
 * other transports do; ngx_ssl_handshake() runs it on nginx's events.
 *
 * Lifetimes. The engine may close a connection from inside one of its
 * callbacks: the nginx connection goes at once, the small record (conn_t)
 * when the outermost callback holding it returns. Every timer is
 * cancelable, so a worker shutting down gracefully does not wait for the
 * engine's.
 *
 * nginx's event macros (ngx_delete_posted_event, ngx_post_event) are
 * several statements: every `if` around one has braces.
 */
#include "ngx_http_ratel_transport.h"

#include <ngx_event.h>
#include <ngx_event_connect.h>

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct trans_s trans_t;
typedef struct conn_s conn_t;

struct trans_s {
    ratel__loop_hooks_t hooks;
    ngx_event_t timer; /* the engine's one timer */
    ngx_event_t flush; /* posted by `defer` */
    ngx_log_t *log;
    conn_t *conns; /* open or held */
};

typedef enum { CONN_CONNECTING, CONN_HANDSHAKE, CONN_UP } conn_state_e;

struct conn_s {
    trans_t *t;
    conn_t *prev, *next;
    ratel__link_t *link; /* NULL once closed or down */
    ngx_connection_t *c; /* NULL once let go */
    ngx_pool_t *pool;    /* the connection's (nginx's SSL allocates there) */
    conn_state_e state;
    SSL_CTX *tls; /* NULL: plain */
    int insecure;
    ngx_log_t quiet; /* the handshake's log: see conn_log() */
    char server_name[256];
    char name[300];                /* host:port, for messages */
    struct addrinfo *addrs, *addr; /* connecting: the name's, the one tried */
    u_char *out; /* bytes queued, out[off..len) not yet written */
    size_t off, len, cap;
    int holds;        /* callbacks running on it */
    int failed;       /* a write failed: told `down` from the loop */
    char why[256];    /* what failed */
    ngx_event_t fail; /* posted to tell a failure seen inside `send` */
};

/* ------------------------------------------------------------- helpers */

static void conn_release(conn_t *k)
{
    ngx_connection_t *c = k->c;

    if (!c)
        return;
    k->c = NULL;
    if (c->ssl) {
        /* Quiet: no close_notify to wait for; ngx_ssl_shutdown frees the
           SSL. */
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;
        (void)ngx_ssl_shutdown(c);
    }
    ngx_close_connection(c);
    if (k->pool) {
        ngx_destroy_pool(k->pool);
        k->pool = NULL;
    }
    if (k->fail.posted) {
        ngx_delete_posted_event(&k->fail);
    }
}

/* Frees the record once nothing holds it and the engine let go of it. */
static void conn_maybe_free(conn_t *k)
{
    if (k->holds > 0 || k->link || k->c)
        return;
    if (k->prev)
        k->prev->next = k->next;
    else
        k->t->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    if (k->addrs)
        freeaddrinfo(k->addrs);
    ngx_free(k->out);
    ngx_free(k);
}

/* Tells the engine the connection is gone (from the loop only). */
static void conn_down(conn_t *k, const char *why, int tls_error)
{
    ratel__link_t *link = k->link;

    conn_release(k);
    k->link = NULL;
    if (link) {
        k->holds++;
        link->down(link, why, tls_error);
        k->holds--;
    }
    conn_maybe_free(k);
}

static void conn_why_errno(conn_t *k, ngx_err_t err, const char *what)
{
    if (err)
        snprintf(k->why, sizeof k->why, "%s: %s", what, strerror(err));
    else
        snprintf(k->why, sizeof k->why, "%s", what);
}

/* Writes what is queued; NGX_OK (all or what the socket took), NGX_ERROR
   with k->why set. */
static ngx_int_t conn_write(conn_t *k)
{
    ngx_connection_t *c = k->c;

    while (k->off < k->len) {
        ssize_t n = c->send(c, k->out + k->off, k->len - k->off);

        if (n == NGX_AGAIN)
            return ngx_handle_write_event(c->write, 0);
        if (n == NGX_ERROR || n <= 0) {
            conn_why_errno(k, ngx_socket_errno, "write failed");
            return NGX_ERROR;
        }
        k->off += (size_t)n;
    }
    k->off = k->len = 0;
    return NGX_OK;
}

/* ------------------------------------------------------------- events */

/*
 * The connection's log. During the TLS handshake it is the cycle's with
 * only alerts let through: nginx's SSL code logs a refused certificate at
 * crit in its own words, while the engine is told the reason (`down`,
 * ratel__tls_describe's words, naming the name checked) and the Redis
 * mode logs it once as the store's failure.
 */
static void conn_log(conn_t *k, int handshake)
{
    ngx_log_t *log = k->t->log;

    if (handshake) {
        k->quiet = *log;
        k->quiet.log_level = NGX_LOG_ALERT;
        k->quiet.next = NULL;
        log = &k->quiet;
    }
    k->c->log = log;
    k->c->read->log = log;
    k->c->write->log = log;
    k->c->pool->log = log;
}

static void conn_up(conn_t *k)
{
    k->state = CONN_UP;
    k->holds++;
    k->link->up(k->link);
    k->holds--;
    if (k->link && k->c && conn_write(k) != NGX_OK) {
        conn_down(k, k->why, 0);
        return;
    }
    conn_maybe_free(k);
}

static void on_read(ngx_event_t *ev);
static void on_write(ngx_event_t *ev);
static int conn_try(conn_t *k);

/*
 * The handshake ended. nginx's handshake left its own handlers on the
 * connection's events (as every caller of ngx_ssl_handshake, the
 * transport puts its own back): else a reply would wake the handshake
 * again instead of being read.
 */
static void on_handshake(ngx_connection_t *c)
{
    conn_t *k = c->data;
    char why[512];

    c->read->handler = on_read;
    c->write->handler = on_write;
    conn_log(k, 0);
    if (!c->ssl->handshaked) {
        ratel__tls_describe(c->ssl->connection, SSL_ERROR_SSL, why, sizeof why);
        conn_down(k, why, 1);
        return;
    }
    conn_up(k);
}

/* The TCP connect finished (or failed): TLS next, or up. */
static void conn_connected(conn_t *k)
{
    ngx_connection_t *c = k->c;
    ngx_ssl_t ssl = {0};
    char err[256];
    int e = 0;
    socklen_t len = sizeof e;

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *)&e, &len) == -1)
        e = ngx_socket_errno;
    if (e) {
        conn_why_errno(k, e, "connect failed");
        /* The next address of the name, if any, on a new connection. */
        ngx_close_connection(c);
        k->c = NULL;
        k->addr = k->addr->ai_next;
        if (conn_try(k) != 0)
            conn_down(k, k->why, 0);
        return;
    }
    freeaddrinfo(k->addrs);
    k->addrs = k->addr = NULL;
    if (!k->tls) {
        conn_up(k);
        return;
    }
    k->state = CONN_HANDSHAKE;
    conn_log(k, 1);
    ssl.ctx = k->tls;
    ssl.log = k->t->log;
    ssl.buffer_size = NGX_SSL_BUFSIZE;
    if (ngx_ssl_create_connection(&ssl, c, NGX_SSL_CLIENT) != NGX_OK) {
        conn_down(k, "TLS: out of memory", 0);
        return;
    }
    if (ratel__tls_setup(c->ssl->connection,
                         k->server_name[0] ? k->server_name : NULL, k->insecure,
                         err, sizeof err) != 0) {
        conn_down(k, err, 1);
        return;
    }
    switch (ngx_ssl_handshake(c)) {
    case NGX_AGAIN:
        c->ssl->handler = on_handshake;
        return;
    default:
        on_handshake(c);
    }
}

static void on_write(ngx_event_t *ev)
{
    ngx_connection_t *c = ev->data;
    conn_t *k = c->data;

    if (k->state == CONN_CONNECTING) {
        conn_connected(k);
        return;
    }
    if (k->state == CONN_UP && conn_write(k) != NGX_OK)
        conn_down(k, k->why, 0);
}

/* Reads until the socket has nothing more, telling the engine each part. */
static void on_read(ngx_event_t *ev)
{
    ngx_connection_t *c = ev->data;
    conn_t *k = c->data;
    u_char buf[16384];

    if (k->state == CONN_CONNECTING) {
        conn_connected(k);
        return;
    }
    if (k->state != CONN_UP)
        return;
    k->holds++;
    while (k->link && k->c) {
        ssize_t n = k->c->recv(k->c, buf, sizeof buf);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(k->c->read, 0) != NGX_OK)
                conn_why_errno(k, 0, "cannot wait for reads");
            else
                break;
        } else if (n > 0) {
            k->link->data(k->link, (const char *)buf, (size_t)n);
            continue;
        } else if (n == 0) {
            snprintf(k->why, sizeof k->why, "connection closed by the server");
        } else {
            conn_why_errno(k, ngx_socket_errno, "read failed");
        }
        k->holds--;
        conn_down(k, k->why, 0);
        return;
    }
    k->holds--;
    conn_maybe_free(k);
}

/* A failure seen inside `send`, told from the loop. */
static void on_fail(ngx_event_t *ev)
{
    conn_t *k = ev->data;

    conn_down(k, k->why, 0);
}

/* ---------------------------------------------------------- transport */

/*
 * Connects to k->addr, or to the addresses after it when connect() fails
 * at once: 0 with a connection on its way, -1 with k->why set when none
 * is left.
 */
static int conn_try(conn_t *k)
{
    ngx_peer_connection_t pc;
    ngx_str_t name;
    ngx_int_t rc;

    name.data = (u_char *)k->name;
    name.len = strlen(k->name);
    for (; k->addr; k->addr = k->addr->ai_next) {
        ngx_memzero(&pc, sizeof pc);
        pc.sockaddr = k->addr->ai_addr;
        pc.socklen = k->addr->ai_addrlen;
        pc.name = &name;
        pc.get = ngx_event_get_peer;
        pc.log = k->t->log;
        pc.log_error = NGX_ERROR_INFO;
        errno = 0;
        rc = ngx_event_connect_peer(&pc);
        if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED ||
            !pc.connection) {
            /* nginx closed what it had made. */
            conn_why_errno(k, ngx_socket_errno, "connect failed");
            continue;
        }
        k->c = pc.connection;
        k->c->data = k;
        k->c->pool = k->pool;
        k->c->read->handler = on_read;
        k->c->write->handler = on_write;
        conn_log(k, 0);
        if (rc == NGX_OK) { /* connected at once: told from the loop */
            ngx_post_event(k->c->write, &ngx_posted_events);
        }
        return 0;
    }
    return -1;
}

/*
 * Looks host up and connects to its first address that takes the
 * connection (a name may give ::1 and 127.0.0.1 while the server listens
 * on one). getaddrinfo() blocks the worker for a name (docs/nginx.md);
 * an address is taken as it is.
 */
static int conn_connect(conn_t *k, const char *host, int port, char *why,
                        size_t whylen)
{
    struct addrinfo hints = {0};
    char portstr[16];
    int gai;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof portstr, "%d", port);
    gai = getaddrinfo(host, portstr, &hints, &k->addrs);
    if (gai != 0 || !k->addrs) {
        snprintf(why, whylen, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    k->addr = k->addrs;
    if (conn_try(k) == 0)
        return 0;
    snprintf(why, whylen, "%s", k->why);
    return -1;
}

static void *t_open(void *tud, ratel__link_t *link, const char *host, int port,
                    const ratel__tls_target_t *tls, char *why, size_t whylen)
{
    trans_t *t = tud;
    conn_t *k = ngx_calloc(sizeof *k, t->log);

    if (!k || !(k->pool = ngx_create_pool(1024, t->log))) {
        ngx_free(k);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    k->t = t;
    k->link = link;
    k->state = CONN_CONNECTING;
    snprintf(k->name, sizeof k->name, "%s:%d", host, port);
    if (tls) {
        k->tls = tls->ctx;
        k->insecure = tls->insecure;
        if (tls->server_name)
            snprintf(k->server_name, sizeof k->server_name, "%s",
                     tls->server_name);
    }
    k->fail.handler = on_fail;
    k->fail.data = k;
    k->fail.log = t->log;
    if (conn_connect(k, host, port, why, whylen) != 0) {
        if (k->addrs)
            freeaddrinfo(k->addrs);
        ngx_destroy_pool(k->pool);
        ngx_free(k);
        return NULL;
    }
    k->next = t->conns;
    if (t->conns)
        t->conns->prev = k;
    t->conns = k;
    return k;
}

static void t_send(void *tud, void *handle, const char *p, size_t n)
{
    conn_t *k = handle;

    (void)tud;
    if (!k->c || k->failed)
        return;
    if (k->len + n > k->cap) {
        size_t cap = k->cap ? k->cap : 4096;
        u_char *out;

        while (cap < k->len + n)
            cap *= 2;
        out = ngx_alloc(cap, k->t->log);
        if (!out) {
            snprintf(k->why, sizeof k->why, "out of memory");
            goto fail;
        }
        if (k->len > k->off)
            ngx_memcpy(out, k->out + k->off, k->len - k->off);
        ngx_free(k->out);
        k->out = out;
        k->len -= k->off;
        k->off = 0;
        k->cap = cap;
    }
    ngx_memcpy(k->out + k->len, p, n);
    k->len += n;
    /* Written at once when up and nothing waits before it. */
    if (k->state == CONN_UP && k->off == 0 && k->len == n &&
        conn_write(k) != NGX_OK)
        goto fail;
    return;
fail:
    k->failed = 1;
    if (!k->fail.posted) {
        ngx_post_event(&k->fail, &ngx_posted_events);
    }
}

static void t_close(void *tud, void *handle)
{
    conn_t *k = handle;

    (void)tud;
    k->link = NULL;
    conn_release(k);
    conn_maybe_free(k);
}

static void t_timer(void *tud, int64_t at_us)
{
    trans_t *t = tud;
    int64_t d;

    /* Deleted first: nginx keeps an armed timer that moves by less than
       NGX_TIMER_LAZY_DELAY, and an earlier deadline must not wait. */
    if (t->timer.timer_set) {
        ngx_del_timer(&t->timer);
    }
    if (at_us < 0)
        return;
    d = at_us - ngx_http_ratel_transport.now(tud);
    ngx_add_timer(&t->timer, d <= 0 ? 0 : (ngx_msec_t)((d + 999) / 1000));
}

static void t_defer(void *tud)
{
    trans_t *t = tud;

    if (!t->flush.posted) {
        ngx_post_event(&t->flush, &ngx_posted_events);
    }
}

static int64_t t_now(void *tud)
{
    struct timespec ts;

    (void)tud;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const ratel__transport_t ngx_http_ratel_transport = {
    .open = t_open,
    .send = t_send,
    .close = t_close,
    .timer = t_timer,
    .defer = t_defer,
    .now = t_now,
};

/* --------------------------------------------------------------- loop */

static void on_timer(ngx_event_t *ev)
{
    trans_t *t = ev->data;

    t->hooks.timer(t->hooks.ud);
}

static void on_flush(ngx_event_t *ev)
{
    trans_t *t = ev->data;

    t->hooks.flush(t->hooks.ud);
}

static int loop_open(void *ctx, const ratel__loop_hooks_t *hooks, void **tud)
{
    ngx_log_t *log = ctx;
    trans_t *t = ngx_calloc(sizeof *t, log);

    *tud = t;
    if (!t)
        return -1;
    t->hooks = *hooks;
    t->log = log;
    t->timer.handler = on_timer;
    t->timer.data = t;
    t->timer.log = log;
    t->timer.cancelable = 1;
    t->flush.handler = on_flush;
    t->flush.data = t;
    t->flush.log = log;
    return 0;
}

/* Lets go of every connection left (the engine closed its own already). */
static void loop_close(void *tud)
{
    trans_t *t = tud;

    while (t->conns) {
        conn_t *k = t->conns;

        k->link = NULL;
        k->holds = 0;
        conn_release(k);
        conn_maybe_free(k);
    }
    if (t->timer.timer_set) {
        ngx_del_timer(&t->timer);
    }
    if (t->flush.posted) {
        ngx_delete_posted_event(&t->flush);
    }
    ngx_free(t);
}

void ngx_http_ratel_transport_loop(ratel__async_loop_t *loop, ngx_log_t *log)
{
    *loop = (ratel__async_loop_t){.transport = &ngx_http_ratel_transport,
                                  .open = loop_open,
                                  .close = loop_close,
                                  .ctx = log};
}
