/*
 * respond.c - the output side of a connection: answers formatted into
 * bytes, kept in request order (an answer given before the answers to
 * earlier requests waits in its exchange), error responses owed after the
 * answers already promised, and the bytes handed to the driver.
 */
#include "http/conn_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ratel__http_out_append(ratel__http_conn_t *c, const char *p, size_t n)
{
    if (c->abort)
        return;
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 1024;
        char *q;
        while (cap < c->out_len + n)
            cap *= 2;
        q = realloc(c->out, cap);
        if (!q) {
            c->abort = 1;
            return;
        }
        c->out = q;
        c->out_cap = cap;
    }
    if (c->out_off == c->out_len)
        c->out_progress_ms = c->now_ms;
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

/* What an error the server answers by itself says when its cause gives
   no more precise text; the limits are named as in the config. */
static const struct {
    int status;
    const char *text;
} error_texts[] = {
    {400, "malformed HTTP request"},
    {408, "request not complete within limits.request_timeout_ms"},
    {413, "request body larger than limits.max_body_bytes"},
    {414, "request target longer than limits.max_header_bytes"},
    {431, "request line and headers larger than limits.max_header_bytes"},
    {503, "server busy: too many connections (limits.max_connections)"},
    {505, "HTTP version not supported: send HTTP/1.1 or HTTP/1.0"},
};

static const char *error_text(int status)
{
    for (size_t i = 0; i < sizeof error_texts / sizeof error_texts[0]; i++)
        if (error_texts[i].status == status)
            return error_texts[i].text;
    return ratel_http_reason(status);
}

/* Copies `text` into out (cap bytes, cap >= 8) as the inside of a JSON
   string, cut short rather than overflowing; returns the length. */
static size_t json_escape(const char *text, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    for (; *text && n + 6 < cap; text++) {
        unsigned char ch = (unsigned char)*text;
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[ch >> 4];
            out[n + 5] = hex[ch & 15];
            n += 6;
        } else {
            out[n++] = (char)ch;
        }
    }
    return n;
}

size_t ratel__http_error_response(int status, const char *text, char *buf,
                                  size_t len)
{
    char esc[256];
    size_t elen =
        json_escape(text ? text : error_text(status), esc, sizeof esc);
    int n =
        snprintf(buf, len,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n"
                 "{\"error\":\"%.*s\"}\n",
                 status, ratel_http_reason(status), elen + 13, (int)elen, esc);
    if (n < 0)
        return 0;
    return (size_t)n < len ? (size_t)n : len;
}

/* Writes the owed error response (the queue is empty). */
static void emit_error(ratel__http_conn_t *c)
{
    char tmp[512];
    size_t n =
        ratel__http_error_response(c->err_status, c->err_msg, tmp, sizeof tmp);

    c->err_status = 0;
    c->err_msg = NULL;
    c->closing = 1;
    if (c->close_out)
        return; /* the client was already told the connection closes */
    ratel__http_out_append(c, tmp, n);
    c->close_out = 1;
}

void ratel__http_conn_error(ratel__http_conn_t *c, int status, const char *text)
{
    if (c->dead || c->err_status || c->close_out)
        return;
    c->no_more = 1;
    c->in_request = 0;
    c->err_status = status;
    c->err_msg = text;
    if (!c->head)
        emit_error(c);
    ratel__http_wake(c);
}

/* -------------------------------------------------------- formatting */

static char *put_uint(char *p, size_t v)
{
    char tmp[24];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Copies a header name or value, turning CR and LF into spaces so that a
   value taken from a request cannot split the response. */
static char *put_field(char *p, const ratel_http_str_t *s)
{
    if (!s->n)
        return p;
    memcpy(p, s->p, s->n);
    for (size_t i = 0; i < s->n; i++)
        if (p[i] == '\r' || p[i] == '\n')
            p[i] = ' ';
    return p + s->n;
}

/*
 * Appends a whole response to *buf (length *len, capacity *cap). Returns
 * 0, or -1 without memory. 1xx, 204 and 304 carry no body and no
 * Content-Length; a HEAD request gets the length but not the body.
 */
static int format_response(char **buf, size_t *len, size_t *cap, int status,
                           const ratel_http_header_t *headers, size_t n,
                           const char *body, size_t body_len, int head,
                           int conn_header)
{
    const char *reason;
    size_t rlen, size, send;
    int no_body;
    char *p;

    if (status < 100 || status > 999)
        status = 500;
    reason = ratel_http_reason(status);
    rlen = strlen(reason);
    no_body = status < 200 || status == 204 || status == 304;
    send = no_body || head ? 0 : body_len;
    size = 13 + rlen + 2 + 2 + send;
    for (size_t i = 0; i < n; i++)
        size += headers[i].name.n + headers[i].value.n + 4;
    if (!no_body)
        size += 16 + 20 + 2;
    if (conn_header == CONN_HEADER_CLOSE)
        size += 19;
    else if (conn_header == CONN_HEADER_KEEP_ALIVE)
        size += 24;
    if (*len + size > *cap) {
        size_t c = *cap ? *cap : 256;
        char *q;
        while (c < *len + size)
            c *= 2;
        q = realloc(*buf, c);
        if (!q)
            return -1;
        *buf = q;
        *cap = c;
    }
    p = *buf + *len;
    memcpy(p, "HTTP/1.1 ", 9);
    p[9] = (char)('0' + status / 100);
    p[10] = (char)('0' + status / 10 % 10);
    p[11] = (char)('0' + status % 10);
    p[12] = ' ';
    memcpy(p + 13, reason, rlen);
    p += 13 + rlen;
    *p++ = '\r';
    *p++ = '\n';
    for (size_t i = 0; i < n; i++) {
        p = put_field(p, &headers[i].name);
        *p++ = ':';
        *p++ = ' ';
        p = put_field(p, &headers[i].value);
        *p++ = '\r';
        *p++ = '\n';
    }
    if (!no_body) {
        memcpy(p, "Content-Length: ", 16);
        p = put_uint(p + 16, body_len);
        *p++ = '\r';
        *p++ = '\n';
    }
    if (conn_header == CONN_HEADER_CLOSE) {
        memcpy(p, "Connection: close\r\n", 19);
        p += 19;
    } else if (conn_header == CONN_HEADER_KEEP_ALIVE) {
        memcpy(p, "Connection: keep-alive\r\n", 24);
        p += 24;
    }
    *p++ = '\r';
    *p++ = '\n';
    if (send) {
        memcpy(p, body, send);
        p += send;
    }
    *len = (size_t)(p - *buf);
    return 0;
}

/*
 * An answer was added to the output, which held `before` unsent bytes:
 * it counts against max_pipeline until the socket takes it, and if the
 * output was not empty and is now past max_output_bytes, the client is
 * not reading: close at once (abort) and let its memory go. An answer
 * into empty output always goes, however big.
 */
static void answer_added(ratel__http_conn_t *c, size_t before)
{
    c->out_answers++;
    if (before && c->out_len - c->out_off > c->ctx->limits.max_output_bytes)
        c->abort = 1;
}

/* Moves the answers that waited for the head into the output. */
static void flush_answered(ratel__http_conn_t *c)
{
    ratel_http_exchange_t *ex;

    while ((ex = c->head) && ex->answered) {
        size_t before = c->out_len - c->out_off;
        ratel__http_out_append(c, ex->resp, ex->resp_len);
        answer_added(c, before);
        if (ex->close) {
            c->closing = 1;
            c->close_out = 1;
        }
        ratel__http_unlink_exchange(c, ex);
        ratel__http_exchange_release(ex);
    }
    if (!c->head && c->err_status)
        emit_error(c);
}

void ratel_http_respond(ratel_http_exchange_t *ex, int status,
                        const ratel_http_header_t *headers, size_t n,
                        const char *body, size_t len)
{
    ratel__http_conn_t *c;
    int close, mode;
    size_t before;

    if (!ex)
        return;
    c = ex->conn;
    if (c->dead || c->abort) {
        ratel__http_unlink_exchange(c, ex);
        ratel__http_exchange_release(ex);
        return;
    }
    close = ex->close || (c->draining && !ex->next);
    mode = close                    ? CONN_HEADER_CLOSE
           : ex->req.http_minor < 1 ? CONN_HEADER_KEEP_ALIVE
                                    : CONN_HEADER_NONE;
    if (ex != c->head) {
        /* Earlier requests are unanswered: keep the bytes for later. */
        ex->resp_len = 0;
        if (format_response(&ex->resp, &ex->resp_len, &ex->resp_cap, status,
                            headers, n, body, len, ex->head, mode) != 0) {
            c->abort = 1;
            ratel__http_wake(c);
        }
        ex->answered = 1;
        ex->close = (unsigned char)close;
        return;
    }
    before = c->out_len - c->out_off;
    if (!before)
        c->out_progress_ms = c->now_ms;
    if (format_response(&c->out, &c->out_len, &c->out_cap, status, headers, n,
                        body, len, ex->head, mode) != 0)
        c->abort = 1;
    answer_added(c, before);
    if (close) {
        c->closing = 1;
        c->close_out = 1;
    }
    ratel__http_unlink_exchange(c, ex);
    ratel__http_exchange_release(ex);
    flush_answered(c);
    ratel__http_wake(c);
}

const char *ratel__http_conn_output(const ratel__http_conn_t *c, size_t *n)
{
    if (c->dead || c->abort || !c->out) {
        *n = 0;
        return "";
    }
    *n = c->out_len - c->out_off;
    return c->out + c->out_off;
}

void ratel__http_conn_written(ratel__http_conn_t *c, size_t n, int64_t now_ms)
{
    if (n > c->out_len - c->out_off)
        n = c->out_len - c->out_off;
    c->out_off += n;
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        c->out_answers = 0; /* all taken: they no longer hold requests */
    }
    if (n)
        c->out_progress_ms = c->active_ms = now_ms;
    c->now_ms = now_ms;
}

int ratel__http_conn_finished(const ratel__http_conn_t *c)
{
    return c->abort || (c->closing && !c->head && !c->err_status &&
                        c->out_off == c->out_len);
}

int ratel__http_conn_aborted(const ratel__http_conn_t *c)
{
    return c->abort;
}
