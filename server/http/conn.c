/*
 * conn.c - a connection's life (see conn.h): the thread's pools of
 * buffers, exchanges and connections, the read buffer (growing, compacting
 * or moving the request being read), timeouts, draining, and HTTP/1.1 as
 * worker.c's protocol table. parse.c reads requests out of the buffer and
 * dispatches them; respond.c is the output side.
 */
#include "http/conn_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- pools */

void ratel__http_release(ratel__http_ctx_t *ctx, void *p, size_t bytes)
{
    free(p);
    ctx->released_bytes += bytes;
}

static ratel__http_rbuf_t *rbuf_get(ratel__http_ctx_t *ctx, size_t cap)
{
    ratel__http_rbuf_t *b = ctx->free_bufs;

    if (cap <= ctx->buf_size && b) {
        ctx->free_bufs = b->next;
        ctx->nfree_bufs--;
    } else {
        if (cap < ctx->buf_size)
            cap = ctx->buf_size;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
    }
    b->next = NULL;
    b->refs = 1;
    return b;
}

static void rbuf_unref(ratel__http_ctx_t *ctx, ratel__http_rbuf_t *b)
{
    if (--b->refs)
        return;
    if (b->cap == ctx->buf_size && ctx->nfree_bufs < POOL_BUFS) {
        b->next = ctx->free_bufs;
        ctx->free_bufs = b;
        ctx->nfree_bufs++;
    } else {
        ratel__http_release(ctx, b, sizeof *b + b->cap);
    }
}

ratel_http_exchange_t *ratel__http_exchange_get(ratel__http_ctx_t *ctx)
{
    ratel_http_exchange_t *ex = ctx->free_exchanges;

    if (ex) {
        ctx->free_exchanges = ex->next;
        ctx->nfree_exchanges--;
    } else {
        ex = malloc(sizeof *ex);
        if (!ex)
            return NULL;
        ex->resp = NULL;
        ex->resp_cap = 0;
    }
    ex->prev = ex->next = NULL;
    ex->resp_len = 0;
    ex->answered = ex->close = ex->head = 0;
    return ex;
}

static void exchange_free(ratel_http_exchange_t *ex)
{
    free(ex->resp);
    free(ex);
}

static void conn_unref(ratel__http_conn_t *c);

void ratel__http_exchange_release(ratel_http_exchange_t *ex)
{
    ratel__http_conn_t *c = ex->conn;
    ratel__http_ctx_t *ctx = c->ctx;

    rbuf_unref(ctx, ex->buf);
    if (ex->resp_cap > KEEP_RESP) {
        ratel__http_release(ctx, ex->resp, ex->resp_cap);
        ex->resp = NULL;
        ex->resp_cap = 0;
    }
    if (ctx->nfree_exchanges < POOL_EXCHANGES) {
        ex->next = ctx->free_exchanges;
        ctx->free_exchanges = ex;
        ctx->nfree_exchanges++;
    } else {
        ctx->released_bytes += sizeof *ex + ex->resp_cap;
        exchange_free(ex);
    }
    conn_unref(c);
}

/* ----------------------------------------------------------- context */

void ratel__http_limits_fill(ratel_http_limits_t *out,
                             const ratel_http_limits_t *in)
{
    static const ratel_http_limits_t zero;

    *out = in ? *in : zero;
    if (!out->max_header_bytes)
        out->max_header_bytes = 8 << 10;
    if (!out->max_body_bytes)
        out->max_body_bytes = 64 << 10;
    if (out->max_body_bytes > MAX_BODY_LIMIT)
        out->max_body_bytes = MAX_BODY_LIMIT;
    if (out->max_header_bytes > MAX_BODY_LIMIT)
        out->max_header_bytes = MAX_BODY_LIMIT;
    if (!out->max_connections)
        out->max_connections = 10000;
    if (!out->max_pipeline)
        out->max_pipeline = 64;
    if (!out->request_timeout_ms)
        out->request_timeout_ms = 10000;
    if (!out->idle_timeout_ms)
        out->idle_timeout_ms = 60000;
    if (!out->max_output_bytes)
        out->max_output_bytes = 1 << 20;
    if (out->max_output_bytes < MIN_OUTPUT_LIMIT)
        out->max_output_bytes = MIN_OUTPUT_LIMIT;
}

void ratel__http_ctx_init(ratel__http_ctx_t *ctx,
                          const ratel_http_limits_t *limits,
                          ratel_http_handler_fn handler, void *ud,
                          unsigned thread)
{
    memset(ctx, 0, sizeof *ctx);
    ratel__http_limits_fill(&ctx->limits, limits);
    ctx->handler = handler;
    ctx->ud = ud;
    ctx->thread = thread;
    ctx->buf_size = 8192;
}

void ratel__http_ctx_destroy(ratel__http_ctx_t *ctx)
{
    ratel__http_conn_t *c, *cn;
    ratel_http_exchange_t *ex, *exn;
    ratel__http_rbuf_t *b, *bn;

    for (c = ctx->conns; c; c = cn) {
        cn = c->next;
        for (ex = c->head; ex; ex = exn) {
            exn = ex->next;
            rbuf_unref(ctx, ex->buf);
            exchange_free(ex);
        }
        if (c->buf)
            rbuf_unref(ctx, c->buf);
        free(c->out);
        free(c);
    }
    ctx->conns = NULL;
    for (c = ctx->free_conns; c; c = cn) {
        cn = c->next;
        free(c->out);
        free(c);
    }
    ctx->free_conns = NULL;
    for (ex = ctx->free_exchanges; ex; ex = exn) {
        exn = ex->next;
        exchange_free(ex);
    }
    ctx->free_exchanges = NULL;
    for (b = ctx->free_bufs; b; b = bn) {
        bn = b->next;
        free(b);
    }
    ctx->free_bufs = NULL;
    ctx->nfree_conns = ctx->nfree_exchanges = ctx->nfree_bufs = 0;
}

/* -------------------------------------------------------- connection */

ratel__http_conn_t *ratel__http_conn_new(ratel__http_ctx_t *ctx,
                                         const struct sockaddr *peer,
                                         socklen_t peer_len, int64_t now_ms)
{
    ratel__http_conn_t *c = ctx->free_conns;
    char *out = NULL;
    size_t out_cap = 0;

    if (c) {
        ctx->free_conns = c->next;
        ctx->nfree_conns--;
        out = c->out;
        out_cap = c->out_cap;
    } else {
        c = malloc(sizeof *c);
        if (!c)
            return NULL;
    }
    memset(c, 0, sizeof *c);
    c->out = out;
    c->out_cap = out_cap;
    c->ctx = ctx;
    c->refs = 1;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->now_ms = c->active_ms = c->out_progress_ms = now_ms;
    if (peer && peer_len && peer_len <= sizeof c->peer) {
        memcpy(&c->peer, peer, peer_len);
        c->peer_len = peer_len;
    }
    c->next = ctx->conns;
    if (ctx->conns)
        ctx->conns->prev = c;
    ctx->conns = c;
    return c;
}

static void conn_unref(ratel__http_conn_t *c)
{
    ratel__http_ctx_t *ctx = c->ctx;

    if (--c->refs)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        ctx->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->out_cap > KEEP_OUT || ctx->nfree_conns >= POOL_CONNS) {
        ratel__http_release(ctx, c->out, c->out_cap);
        c->out = NULL;
        c->out_cap = 0;
    }
    if (ctx->nfree_conns >= POOL_CONNS) {
        ratel__http_release(ctx, c, sizeof *c);
        return;
    }
    c->next = ctx->free_conns;
    ctx->free_conns = c;
    ctx->nfree_conns++;
}

void *ratel__http_conn_user(const ratel__http_conn_t *c)
{
    return c->user;
}

void ratel__http_conn_set_user(ratel__http_conn_t *c, void *user)
{
    c->user = user;
}

int ratel_http_exchange_abandoned(ratel_http_exchange_t *ex)
{
    ratel__http_conn_t *c = ex->conn;
    ratel__http_ctx_t *ctx = c->ctx;

    if (!c->dead && !c->peer_gone && ctx->peer_closed && c->user &&
        ctx->peer_closed(ctx, c->user))
        c->peer_gone = 1;
    return c->dead || c->peer_gone;
}

unsigned ratel__http_conn_inflight(const ratel__http_conn_t *c)
{
    return c->inflight;
}

void ratel__http_conn_close(ratel__http_conn_t *c)
{
    ratel_http_exchange_t *ex, *next;

    if (c->dead)
        return;
    /* Answers waiting for an earlier one will never be sent: free them
       now. Unanswered exchanges stay until the handler answers them. */
    for (ex = c->head; ex; ex = next) {
        next = ex->next;
        if (ex->answered) {
            ratel__http_unlink_exchange(c, ex);
            ratel__http_exchange_release(ex);
        }
    }
    c->dead = 1;
    c->user = NULL;
    c->no_more = 1;
    if (c->buf) {
        rbuf_unref(c->ctx, c->buf);
        c->buf = NULL;
    }
    c->start = c->parsed = c->len = 0;
    c->out_off = c->out_len = 0;
    c->out_answers = 0;
    if (c->out_cap > KEEP_OUT) {
        /* Output a client left unread: give it back now, not when the
           handler answers the exchanges it still holds. */
        ratel__http_release(c->ctx, c->out, c->out_cap);
        c->out = NULL;
        c->out_cap = 0;
    }
    conn_unref(c);
}

char *ratel__http_conn_read_space(ratel__http_conn_t *c, size_t *room)
{
    ratel__http_ctx_t *ctx = c->ctx;
    ratel__http_rbuf_t *b;
    size_t keep, need, max, min_room = ctx->buf_size / 8;

    if (!ratel__http_conn_wants_read(c))
        return NULL;
    if (!c->buf) {
        c->buf = rbuf_get(ctx, ctx->buf_size);
        if (!c->buf) {
            c->abort = 1;
            return NULL;
        }
        c->start = c->parsed = c->len = 0;
    }
    b = c->buf;
    if (b->refs == 1 && c->start == c->len)
        c->start = c->parsed = c->len = 0;
    if (b->cap - c->len >= min_room) {
        *room = b->cap - c->len;
        return b->data + c->len;
    }
    /* Full: keep only the request being read, in this buffer if nothing
       else points into it, else in a new one. */
    keep = c->len - c->start;
    need = keep + min_room;
    max = (size_t)ctx->limits.max_header_bytes + ctx->limits.max_body_bytes +
          4 * min_room;
    if (need > max) {
        ratel__http_conn_error(c, c->headers_done ? 413 : 431, NULL);
        return NULL;
    }
    if (b->refs == 1) {
        if (c->start) {
            memmove(b->data, b->data + c->start, keep);
            c->parsed -= c->start;
            c->len = keep;
            c->start = 0;
        }
        if (b->cap - c->len < min_room) {
            size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
            ratel__http_rbuf_t *nb;
            if (cap > max)
                cap = max;
            nb = realloc(b, sizeof *b + cap);
            if (!nb) {
                c->abort = 1;
                return NULL;
            }
            nb->cap = cap;
            c->buf = b = nb;
        }
    } else {
        size_t cap = ctx->buf_size;
        ratel__http_rbuf_t *nb;
        while (cap < need)
            cap *= 2;
        if (cap > max)
            cap = max;
        nb = rbuf_get(ctx, cap);
        if (!nb) {
            c->abort = 1;
            return NULL;
        }
        memcpy(nb->data, b->data + c->start, keep);
        rbuf_unref(ctx, b);
        c->buf = b = nb;
        c->parsed -= c->start;
        c->len = keep;
        c->start = 0;
    }
    *room = b->cap - c->len;
    return b->data + c->len;
}

void ratel__http_conn_received(ratel__http_conn_t *c, size_t n, int64_t now_ms)
{
    if (c->dead || !c->buf)
        return;
    c->len += n;
    c->now_ms = c->active_ms = now_ms;
    ratel__http_parse(c, 0);
}

size_t ratel__http_conn_feed(ratel__http_conn_t *c, const char *data, size_t n,
                             int64_t now_ms)
{
    size_t done = 0;

    while (done < n) {
        size_t room, k;
        char *space = ratel__http_conn_read_space(c, &room);
        if (!space)
            break;
        k = n - done < room ? n - done : room;
        memcpy(space, data + done, k);
        ratel__http_conn_received(c, k, now_ms);
        done += k;
    }
    return done;
}

void ratel__http_conn_process(ratel__http_conn_t *c, int64_t now_ms)
{
    if (c->dead || c->parsed == c->len)
        return;
    c->now_ms = now_ms;
    ratel__http_parse(c, 0);
}

int ratel__http_conn_wants_read(const ratel__http_conn_t *c)
{
    return !c->dead && !c->no_more && !c->abort && c->parsed == c->len &&
           ratel__http_may_dispatch(c);
}

int ratel__http_conn_pending(const ratel__http_conn_t *c)
{
    return !c->dead && !c->no_more && !c->abort && c->parsed < c->len &&
           ratel__http_may_dispatch(c);
}

int ratel__http_conn_tick(ratel__http_conn_t *c, int64_t now_ms)
{
    const ratel_http_limits_t *lim = &c->ctx->limits;

    if (c->dead)
        return 0;
    if (c->in_request && !c->no_more &&
        now_ms - c->request_started_ms >= (int64_t)lim->request_timeout_ms) {
        c->now_ms = now_ms;
        ratel__http_conn_error(c, 408, NULL);
        return 0;
    }
    if (c->out_off != c->out_len)
        return now_ms - c->out_progress_ms >= (int64_t)lim->idle_timeout_ms;
    return !c->head && !c->in_request && !c->closing &&
           now_ms - c->active_ms >= (int64_t)lim->idle_timeout_ms;
}

int ratel__http_conn_drain(ratel__http_conn_t *c, int64_t now_ms)
{
    if (c->dead)
        return 1;
    c->now_ms = now_ms;
    /* Requests complete in the buffer were received: they are answered.
       Only then is the last one known (the one to say Connection: close;
       an answer given during this parse is not the last). */
    if (!c->no_more && c->buf)
        ratel__http_parse(c, 1);
    c->draining = 1;
    c->no_more = 1;
    c->in_request = 0;
    c->closing = 1;
    return !c->head && !c->err_status && c->out_off == c->out_len;
}

void ratel__http_conn_trim(ratel__http_conn_t *c)
{
    if (c->buf && c->buf->refs == 1 && !c->in_request && c->start == c->len) {
        rbuf_unref(c->ctx, c->buf);
        c->buf = NULL;
        c->start = c->parsed = c->len = 0;
    }
    if (c->out_cap > KEEP_OUT && c->out_off == c->out_len) {
        ratel__http_release(c->ctx, c->out, c->out_cap);
        c->out = NULL;
        c->out_cap = 0;
        c->out_off = c->out_len = 0;
    }
}

/* ---------------------------------------- HTTP/1.1 as worker.c's protocol */

static void *h1_new(ratel__http_ctx_t *ctx, const struct sockaddr *peer,
                    socklen_t peer_len, int64_t now_ms)
{
    return ratel__http_conn_new(ctx, peer, peer_len, now_ms);
}

static void h1_set_user(void *c, void *user)
{
    ratel__http_conn_set_user(c, user);
}

static char *h1_read_space(void *c, size_t *room)
{
    return ratel__http_conn_read_space(c, room);
}

static void h1_received(void *c, size_t n, int64_t now_ms)
{
    ratel__http_conn_received(c, n, now_ms);
}

static void h1_process(void *c, int64_t now_ms)
{
    ratel__http_conn_process(c, now_ms);
}

static int h1_pending(void *c)
{
    return ratel__http_conn_pending(c);
}

static const char *h1_output(void *c, size_t *n)
{
    return ratel__http_conn_output(c, n);
}

static void h1_written(void *c, size_t n, int64_t now_ms)
{
    ratel__http_conn_written(c, n, now_ms);
}

static int h1_wants_read(void *c)
{
    return ratel__http_conn_wants_read(c);
}

static int h1_finished(void *c)
{
    return ratel__http_conn_finished(c);
}

static int h1_aborted(void *c)
{
    return ratel__http_conn_aborted(c);
}

static int h1_tick(void *c, int64_t now_ms)
{
    return ratel__http_conn_tick(c, now_ms);
}

static int h1_drain(void *c, int64_t now_ms)
{
    return ratel__http_conn_drain(c, now_ms);
}

static void h1_close(void *c)
{
    ratel__http_conn_close(c);
}

static void h1_trim(void *c)
{
    ratel__http_conn_trim(c);
}

const ratel__http_proto_t ratel__http1_proto = {
    .name = "http/1.1",
    .conn_new = h1_new,
    .set_user = h1_set_user,
    .read_space = h1_read_space,
    .received = h1_received,
    .process = h1_process,
    .pending = h1_pending,
    .output = h1_output,
    .written = h1_written,
    .wants_read = h1_wants_read,
    .finished = h1_finished,
    .aborted = h1_aborted,
    .tick = h1_tick,
    .drain = h1_drain,
    .close = h1_close,
    .trim = h1_trim,
};
