/*
 * conn.c - the input side of a connection (see conn.h): buffers, parsing,
 * dispatch, timeouts, draining. respond.c is the output side.
 *
 * http-parser is paused at the end of every message, so each call to
 * http_parser_execute() stops on a request boundary: the request is then
 * dispatched outside of the parser's callbacks (a handler answering at
 * once never re-enters the parser), and the boundary is known exactly.
 * While a request is being parsed its strings are kept as offsets from
 * the request's first byte (`start`), so that its bytes can move (compact
 * or relocate to a bigger buffer) until it is dispatched; the exchange
 * then gets real pointers and a reference on the buffer.
 */
#include "http/conn_private.h"
#include "http/strict.h"

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

static ratel_http_exchange_t *exchange_get(ratel__http_ctx_t *ctx)
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

/* ----------------------------------------------------------- parsing */

/* Stops the parser: the request gets `status`, with `why` (a static
   string, NULL for the status's usual text) as its error. */
static int fail(ratel__http_conn_t *c, int status, const char *why)
{
    c->fail_status = status;
    c->fail_msg = why;
    return -1;
}

static size_t offset_of(const ratel__http_conn_t *c, const char *at)
{
    return (size_t)(at - (c->buf->data + c->start));
}

/* Adds a piece to a span: a new span, or the continuation of the last one
   (which must follow it: http-parser reports one string in pieces only
   across calls, and our calls are contiguous). */
static int span_add(span_t *s, int cont, size_t off, size_t n)
{
    if (!cont) {
        s->off = (uint32_t)off;
        s->n = (uint32_t)n;
        return 0;
    }
    if ((size_t)s->off + s->n != off)
        return -1;
    s->n += (uint32_t)n;
    return 0;
}

static int on_message_begin(http_parser *p)
{
    ratel__http_conn_t *c = p->data;

    c->in_request = 1;
    c->headers_done = 0;
    c->body_started = 0;
    c->nheaders = 0;
    c->last_cb = CB_NONE;
    c->url.off = c->url.n = 0;
    c->body.off = c->body.n = 0;
    c->chunked = 0;
    c->request_started_ms = c->now_ms;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    ratel__http_conn_t *c = p->data;
    size_t off = offset_of(c, at);

    if (off + n > c->ctx->limits.max_header_bytes)
        return fail(c, 414, NULL);
    if (!ratel__http_target_ok(at, n))
        return fail(c, 400, "control byte in the request target");
    if (span_add(&c->url, c->last_cb == CB_URL, off, n) != 0)
        return fail(c, 400, NULL);
    c->last_cb = CB_URL;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    ratel__http_conn_t *c = p->data;
    size_t off = offset_of(c, at);

    if (c->headers_done)
        return 0; /* a trailer: ignored */
    if (off + n > c->ctx->limits.max_header_bytes)
        return fail(c, 431, NULL);
    /* The parser takes a space in a name; a proxy may drop or keep the
       space, and then reads another header than we do. */
    if (!ratel__http_is_token(at, n))
        return fail(c, 400,
                    "invalid header name: only token characters (RFC 9110 "
                    "tchar) are accepted, no space or control byte");
    if (c->last_cb == CB_FIELD) {
        if (span_add(&c->names[c->nheaders - 1], 1, off, n) != 0)
            return fail(c, 400, NULL);
    } else {
        if (c->nheaders == RATEL_HTTP_MAX_HEADERS)
            return fail(c, 431, "more than 64 header fields");
        span_add(&c->names[c->nheaders], 0, off, n);
        span_add(&c->values[c->nheaders], 0, off + n, 0);
        c->nheaders++;
    }
    c->last_cb = CB_FIELD;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    ratel__http_conn_t *c = p->data;
    size_t off = offset_of(c, at);

    if (c->headers_done)
        return 0;
    if (off + n > c->ctx->limits.max_header_bytes)
        return fail(c, 431, NULL);
    /* A value in two pieces that do not touch is a folded line
       (obs-fold), which RFC 7230 lets a server refuse with 400. */
    if (c->nheaders == 0 || span_add(&c->values[c->nheaders - 1],
                                     c->last_cb == CB_VALUE, off, n) != 0)
        return fail(c, 400, "folded header line (obs-fold) not accepted");
    if (!ratel__http_value_ok(at, n))
        return fail(c, 400,
                    "control byte in a header value (only HTAB is accepted)");
    c->last_cb = CB_VALUE;
    return 0;
}

static int lower_equal(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x + 32);
        if (x != y)
            return 0;
    }
    return 1;
}

/* How many header fields are named `name` (lower case, n bytes). */
static unsigned count_headers(const ratel__http_conn_t *c, const char *name,
                              size_t n)
{
    const char *base = c->buf->data + c->start;
    unsigned count = 0;

    for (unsigned i = 0; i < c->nheaders; i++)
        count +=
            c->names[i].n == n && lower_equal(base + c->names[i].off, name, n);
    return count;
}

/*
 * The checks of a complete head the parser does not make: every line
 * ends in CR LF, and an HTTP/1.1 request has exactly one Host (RFC 9112
 * 3.2: 400 without it or with two; HTTP/1.0 may leave it out). Sets
 * where a chunked body's framing starts. Returns 0, or fail()'s -1.
 */
static int check_head(ratel__http_conn_t *c, const http_parser *p)
{
    long head =
        ratel__http_head_length(c->buf->data + c->start, c->len - c->start);
    unsigned hosts = count_headers(c, "host", 4);

    if (head <= 0)
        return fail(c, 400,
                    "a line ends in a bare LF; lines must end in CR LF");
    if (hosts > 1)
        return fail(c, 400, "more than one Host header");
    if (hosts == 0 && p->http_minor >= 1)
        return fail(c, 400, "an HTTP/1.1 request needs a Host header");
    c->raw_end = (uint32_t)head;
    c->frame = RATEL__FRAME_LINE;
    c->chunked = (p->flags & F_CHUNKED) != 0;
    return 0;
}

/* Checks a chunked body's framing up to `off` (from `start`): what the
   parser consumed between the last data it reported and there. */
static int check_framing(ratel__http_conn_t *c, size_t off)
{
    const char *base = c->buf->data + c->start;

    if (!c->chunked || off <= c->raw_end)
        return 0;
    if (ratel__http_framing(&c->frame, base + c->raw_end, off - c->raw_end))
        return fail(c, 400,
                    "malformed chunked body: a line ends in a bare LF, or "
                    "a chunk's data is not followed by CR LF");
    c->raw_end = (uint32_t)off;
    return 0;
}

/* 1 if the request says "Expect: 100-continue". */
static int expects_continue(const ratel__http_conn_t *c)
{
    const char *base = c->buf->data + c->start;

    for (unsigned i = 0; i < c->nheaders; i++) {
        const span_t *k = &c->names[i], *v = &c->values[i];
        size_t n = v->n;
        if (k->n != 6 || !lower_equal(base + k->off, "expect", 6))
            continue;
        while (n &&
               (base[v->off + n - 1] == ' ' || base[v->off + n - 1] == '\t'))
            n--;
        return n == 12 && lower_equal(base + v->off, "100-continue", 12);
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    ratel__http_conn_t *c = p->data;
    int has_body;

    c->headers_done = 1;
    if (p->http_major != 1)
        return fail(c, 505, NULL);
    if (check_head(c, p) != 0)
        return -1;
    if ((p->flags & F_CONTENTLENGTH) &&
        p->content_length > c->ctx->limits.max_body_bytes)
        return fail(c, 413, NULL);
    has_body = (p->flags & F_CHUNKED) ||
               ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
    /* Tell a client waiting for it to send the body, unless earlier
       answers are still owed (the interim response must not pass them). */
    if (has_body && p->http_minor >= 1 && !c->head && !c->close_out &&
        expects_continue(c)) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        ratel__http_out_append(c, cont, sizeof cont - 1);
        ratel__http_wake(c);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    ratel__http_conn_t *c = p->data;
    size_t off = offset_of(c, at);

    if ((size_t)c->body.n + n > c->ctx->limits.max_body_bytes)
        return fail(c, 413, NULL);
    if (check_framing(c, off) != 0)
        return -1;
    if (c->chunked) {
        c->raw_end = (uint32_t)(off + n);
        c->frame = RATEL__FRAME_DATA_CR;
    }
    if (!c->body_started) {
        span_add(&c->body, 0, off, n);
        c->body_started = 1;
        return 0;
    }
    /* Chunked: join this chunk to the previous one, over the chunk
       framing the parser has already consumed. */
    if ((size_t)c->body.off + c->body.n != off)
        memmove(c->buf->data + c->start + c->body.off + c->body.n, at, n);
    c->body.n += (uint32_t)n;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    ratel__http_conn_t *c = p->data;

    c->in_request = 0;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static ratel_http_str_t str_at(const char *base, span_t s)
{
    ratel_http_str_t r = {base + s.off, s.n};
    return r;
}

/* Splits the target into path and query ("#fragment" dropped); an
   absolute-form target ("http://host/p?q") yields its path. */
static void split_target(ratel_http_request_t *req)
{
    const char *t = req->target.p, *end = t + req->target.n, *q, *h;

    if (t < end && *t != '/' && *t != '*') {
        const char *s = memchr(t, ':', (size_t)(end - t));
        if (s && end - s >= 3 && s[1] == '/' && s[2] == '/') {
            const char *path = s + 3;
            while (path < end && *path != '/' && *path != '?')
                path++;
            t = path;
        }
    }
    h = memchr(t, '#', (size_t)(end - t));
    if (h)
        end = h;
    q = memchr(t, '?', (size_t)(end - t));
    req->path.p = t;
    req->path.n = (size_t)((q ? q : end) - t);
    if (req->path.n == 0) { /* "http://host" or "http://host?q" */
        req->path.p = "/";
        req->path.n = 1;
    }
    req->query.p = q ? q + 1 : end;
    req->query.n = q ? (size_t)(end - q - 1) : 0;
}

/* The request just parsed becomes an exchange and goes to the handler. */
static void dispatch(ratel__http_conn_t *c)
{
    ratel__http_ctx_t *ctx = c->ctx;
    const char *base = c->buf->data + c->start;
    ratel_http_exchange_t *ex = exchange_get(ctx);
    ratel_http_request_t *req;
    const char *method;

    if (!ex) {
        ratel__http_conn_error(c, 503, "server out of memory");
        return;
    }
    req = &ex->req;
    method = http_method_str((enum http_method)c->parser.method);
    req->method.p = method;
    req->method.n = strlen(method);
    req->target = str_at(base, c->url);
    split_target(req);
    req->nheaders = c->nheaders;
    for (unsigned i = 0; i < c->nheaders; i++) {
        ratel_http_str_t v = str_at(base, c->values[i]);
        while (v.n && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
            v.n--;
        req->headers[i].name = str_at(base, c->names[i]);
        req->headers[i].value = v;
    }
    if (c->body_started) {
        req->body = str_at(base, c->body);
    } else {
        req->body.p = "";
        req->body.n = 0;
    }
    req->http_minor = c->parser.http_minor >= 1 ? 1 : 0;
    req->keep_alive = http_should_keep_alive(&c->parser) && !c->parser.upgrade;
    memcpy(&req->peer, &c->peer, c->peer_len);
    req->peer_len = c->peer_len;
    req->thread = ctx->thread;
    ex->head = c->parser.method == HTTP_HEAD;
    ex->close = (unsigned char)!req->keep_alive;
    ex->conn = c;
    c->refs++;
    ex->buf = c->buf;
    c->buf->refs++;
    ex->prev = c->tail;
    if (c->tail)
        c->tail->next = ex;
    else
        c->head = ex;
    c->tail = ex;
    c->inflight++;
    if (!req->keep_alive)
        c->no_more = 1; /* the answer closes: parse nothing after it */
    c->start = c->parsed;
    c->active_ms = c->now_ms;
    if (ctx->dispatched)
        ctx->dispatched(ctx);
    ctx->handler(ctx->ud, ex, req);
}

/*
 * 1 if another request may be dispatched: the requests in flight and the
 * answers the socket has not taken stay below max_pipeline, and the
 * unsent output below the high-water mark. Answers given at once leave
 * inflight at 0, so without counting the unsent ones a client that never
 * reads would have every request in its buffer answered into memory.
 */
static int may_dispatch(const ratel__http_conn_t *c)
{
    return c->inflight + c->out_answers < c->ctx->limits.max_pipeline &&
           c->out_len - c->out_off < OUT_HIGH;
}

/* The parser stopped on an error: the status and text a callback set,
   or the parser's own description of what it met. */
static void parse_error(ratel__http_conn_t *c, enum http_errno e)
{
    if (c->fail_status)
        ratel__http_conn_error(c, c->fail_status, c->fail_msg);
    else if (e == HPE_HEADER_OVERFLOW)
        ratel__http_conn_error(c, 431, NULL);
    else
        ratel__http_conn_error(c, 400, http_errno_description(e));
}

/* Parses what is buffered, dispatching each complete request, while
   may_dispatch() allows unless `all`. */
static void parse(ratel__http_conn_t *c, int all)
{
    const ratel_http_limits_t *lim = &c->ctx->limits;

    while (!c->dead && !c->no_more && !c->abort && c->parsed < c->len &&
           (all || may_dispatch(c))) {
        size_t k =
            http_parser_execute(&c->parser, &settings, c->buf->data + c->parsed,
                                c->len - c->parsed);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        c->parsed += k;
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            if (check_framing(c, c->parsed - c->start) == 0) {
                dispatch(c);
                continue;
            }
            e = HPE_CB_message_complete;
        }
        if (e != HPE_OK) {
            parse_error(c, e);
            return;
        }
        break;
    }
    if (c->dead || c->no_more || c->abort || c->parsed < c->len)
        return;
    if (!c->in_request) {
        c->start = c->parsed; /* blank lines between requests */
    } else if (!c->headers_done) {
        if (c->len - c->start > lim->max_header_bytes)
            ratel__http_conn_error(c, 431, NULL);
    } else if (check_framing(c, c->parsed - c->start) != 0) {
        parse_error(c, HPE_CB_body);
    } else if (c->body_started) {
        /* Everything after the body so far is chunk framing the parser
           has consumed (and checked above): the next bytes go right
           after the body. */
        c->len = c->parsed = c->start + c->body.off + c->body.n;
        c->raw_end = c->body.off + c->body.n;
    }
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
    parse(c, 0);
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
    parse(c, 0);
}

int ratel__http_conn_wants_read(const ratel__http_conn_t *c)
{
    return !c->dead && !c->no_more && !c->abort && c->parsed == c->len &&
           may_dispatch(c);
}

int ratel__http_conn_pending(const ratel__http_conn_t *c)
{
    return !c->dead && !c->no_more && !c->abort && c->parsed < c->len &&
           may_dispatch(c);
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
        parse(c, 1);
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

/* ---------------------------------------- HTTP/1.1 as server.c's protocol */

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
