/*
 * parse.c - reading requests out of a connection's buffer (see conn.h):
 * http-parser's callbacks, the strict checks on the head and on chunked
 * framing (strict.c says what is refused), and the dispatch of each
 * complete request to the handler as an exchange. conn.c owns the
 * buffers and the connection's life; respond.c writes the answers.
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
    ratel_http_exchange_t *ex = ratel__http_exchange_get(ctx);
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

void ratel__http_parse(ratel__http_conn_t *c, int all)
{
    const ratel_http_limits_t *lim = &c->ctx->limits;

    while (!c->dead && !c->no_more && !c->abort && c->parsed < c->len &&
           (all || ratel__http_may_dispatch(c))) {
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
