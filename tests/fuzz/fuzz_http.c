/*
 * fuzz_http.c - the HTTP connection state machine (server/http/conn.h) on
 * arbitrary bytes, without sockets.
 *
 * Input: byte 0 chooses the set-up, byte 1 seeds the piece sizes, the rest
 * is what a client sends.
 *
 *   byte 0  bits 0-1  limits: defaults / tiny (headers 256 B, body 128 B,
 *                     pipeline 2, request timeout 50 ms) / small / one
 *                     request in flight
 *           bit 2     the peer goes away midway (held requests answered
 *                     after it)
 *           bit 3     the socket takes part of the output at a time,
 *                     sometimes none of it (a client that stops reading),
 *                     and answers carry up to 4 KiB of padding (the
 *                     high-water mark and max_output_bytes, 64 KiB here)
 *           bits 4-5  answers: by request number / all at once / all at
 *                     the flush / alternating
 *           bit 6     the flush answers its requests newest first
 *           bit 7     time moves (timeouts fire)
 *   byte 1  bit 7     the server drains (stops) midway
 *           bits 5-6  read buffer: 8 KiB / 64 B / 256 B / 1 KiB (small
 *                     buffers fill up while requests are unanswered)
 *           bits 0-4  seed of the piece sizes
 *
 * The bytes are fed in pieces of 1..64 (sometimes up to 4 KiB) bytes; after
 * each piece the "flush" answers the deferred requests and the output is
 * taken. Invariants (a violation aborts):
 *
 *   - the output is a sequence of well-formed HTTP/1.1 responses: status
 *     line, header lines without stray CR or LF (a CR LF inside a header
 *     value given to ratel_http_respond is neutralised), Content-Length
 *     matching the body (none for HEAD, 1xx, 204), 100 Continue only as an
 *     interim response;
 *   - every answer carries X-Seq: answers leave in request order, each
 *     once, never more than the requests dispatched, and when the peer
 *     stays, every dispatched request is answered in the end (unless its
 *     unsent output passed max_output_bytes: then the connection aborts,
 *     sends nothing more and dispatches nothing more);
 *   - a request is dispatched only while fewer than max_pipeline earlier
 *     ones are unanswered or answered but not completely taken by the
 *     socket (except when draining, which answers what was received);
 *   - a response without X-Seq is an error the server made (400, 408, 413,
 *     414, 431, 503, 505), says Connection: close and carries a JSON body
 *     {"error":"..."} (Content-Type application/json); after a response
 *     saying Connection: close nothing more is sent and no request
 *     dispatched;
 *   - a dispatched request is well-formed as http-parser alone does not
 *     ensure: header names are tokens (RFC 9110 tchar), values hold no
 *     control byte but HTAB, the target no space or control byte, and an
 *     HTTP/1.1 request has exactly one Host (an HTTP/1.0 one at most one);
 *   - a request's strings are intact when it is answered (a digest taken
 *     at dispatch is recomputed at answer time; AddressSanitizer watches
 *     the reads).
 */
#include "http/conn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_http: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HELD_MAX 4096
#define SEQ_MAX 8192

typedef struct held_s {
    ratel_http_exchange_t *ex;
    const ratel_http_request_t *req;
    unsigned seq;
} held_t;

static struct {
    unsigned mode;
    held_t held[HELD_MAX];
    size_t nheld;
    unsigned dispatched;
    uint64_t digest[SEQ_MAX];
    unsigned char head[SEQ_MAX];
    /* The output and what the checker has read of it. */
    char *out;
    size_t out_len, out_cap, checked;
    unsigned next_seq; /* the X-Seq the next answer must carry */
    int closed_by_response;
    unsigned max_pipeline;
    int draining;
    ratel__http_conn_t *conn;
} fz;

static uint64_t rng;

static uint64_t next_rand(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t mix(uint64_t h, ratel_http_str_t s)
{
    ASSERT(s.p != NULL || s.n == 0);
    for (size_t i = 0; i < s.n; i++)
        h = (h ^ (unsigned char)s.p[i]) * 0x100000001b3ull;
    return (h ^ s.n) * 0x100000001b3ull;
}

static uint64_t digest(const ratel_http_request_t *req)
{
    uint64_t h = 0xcbf29ce484222325ull;

    h = mix(h, req->method);
    h = mix(h, req->target);
    h = mix(h, req->path);
    h = mix(h, req->query);
    for (size_t i = 0; i < req->nheaders; i++) {
        h = mix(h, req->headers[i].name);
        h = mix(h, req->headers[i].value);
    }
    return mix(h, req->body);
}

static void answer(const held_t *h)
{
    static const char pad[4096] = {0};
    char seq[16], body[64 + sizeof pad];
    ratel_http_header_t headers[2] = {
        {{"X-Seq", 5}, {seq, 0}},
        {{"X-Inject", 8}, {"a\r\nb", 4}},
    };
    int status = h->seq % 7 == 3 ? 204 : h->seq % 5 == 4 ? 429 : 200;
    int n;

    ASSERT(digest(h->req) == fz.digest[h->seq % SEQ_MAX]);
    headers[0].value.n = (size_t)snprintf(seq, sizeof seq, "%u", h->seq);
    n = snprintf(body, 64, "seq=%u path=%zu body=%zu", h->seq, h->req->path.n,
                 h->req->body.n);
    if (fz.mode & 0x08) {
        size_t k = (h->req->path.n * 97 + h->seq * 31) % sizeof pad;
        memcpy(body + n, pad, k);
        n += (int)k;
    }
    ratel_http_respond(h->ex, status, headers, 2, body, (size_t)n);
}

static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* What the connection guarantees of every request it dispatches. */
static void check_request(const ratel_http_request_t *req)
{
    unsigned hosts = 0;

    for (size_t i = 0; i < req->target.n; i++)
        ASSERT((unsigned char)req->target.p[i] > ' ' &&
               req->target.p[i] != 0x7f);
    for (size_t i = 0; i < req->nheaders; i++) {
        const ratel_http_header_t *h = &req->headers[i];
        ASSERT(h->name.n > 0);
        for (size_t j = 0; j < h->name.n; j++)
            ASSERT(is_tchar((unsigned char)h->name.p[j]));
        for (size_t j = 0; j < h->value.n; j++) {
            unsigned char c = (unsigned char)h->value.p[j];
            ASSERT(c == '\t' || (c >= ' ' && c != 0x7f));
        }
        hosts += h->name.n == 4 && strncasecmp(h->name.p, "host", 4) == 0;
    }
    ASSERT(hosts <= 1);
    ASSERT(hosts == 1 || req->http_minor == 0);
}

static void handler(void *ud, ratel_http_exchange_t *ex,
                    const ratel_http_request_t *req)
{
    held_t h = {ex, req, fz.dispatched++};
    unsigned policy = (fz.mode >> 4) & 3;
    int defer;

    (void)ud;
    ASSERT(!fz.closed_by_response);
    ASSERT(!ratel__http_conn_aborted(fz.conn));
    /* The answers not completely taken yet, this one's earlier ones. */
    ASSERT(fz.draining || h.seq - fz.next_seq < fz.max_pipeline);
    ASSERT(req->nheaders <= RATEL_HTTP_MAX_HEADERS);
    ASSERT(req->http_minor == 0 || req->http_minor == 1);
    ASSERT(req->path.n > 0 && req->method.n > 0);
    check_request(req);
    fz.digest[h.seq % SEQ_MAX] = digest(req);
    fz.head[h.seq % SEQ_MAX] =
        req->method.n == 4 && memcmp(req->method.p, "HEAD", 4) == 0;
    defer = policy == 0   ? (req->path.n + h.seq) % 2
            : policy == 1 ? 0
            : policy == 2 ? 1
                          : h.seq % 2;
    if (defer && fz.nheld < HELD_MAX) {
        fz.held[fz.nheld++] = h;
        return;
    }
    answer(&h);
}

/* The flush hook: answers the held requests. */
static void flush(void)
{
    size_t n = fz.nheld;

    fz.nheld = 0;
    for (size_t i = 0; i < n; i++)
        answer(&fz.held[fz.mode & 0x40 ? n - 1 - i : i]);
}

/* Finds "name: " in the header block [p, end) and returns its value. */
static const char *header_value(const char *p, const char *end,
                                const char *name)
{
    size_t n = strlen(name);

    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol)
            return NULL;
        if ((size_t)(eol - p) > n + 1 && memcmp(p, name, n) == 0 &&
            p[n] == ':' && p[n + 1] == ' ')
            return p + n + 2;
        p = eol + 2;
    }
    return NULL;
}

/* Checks the complete responses in the output not checked yet. */
static void check_output(void)
{
    for (;;) {
        const char *p = fz.out + fz.checked, *end = fz.out + fz.out_len;
        const char *hend, *line, *v;
        size_t head_len, clen = 0;
        int status, has_seq;
        unsigned seq = 0;

        if (p == end)
            return;
        ASSERT(!fz.closed_by_response);
        hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend) {
            ASSERT(end - p < 65536);
            return;
        }
        head_len = (size_t)(hend - p) + 4;
        ASSERT(head_len >= 17 && memcmp(p, "HTTP/1.1 ", 9) == 0);
        ASSERT(p[9] >= '1' && p[9] <= '5' && p[10] >= '0' && p[10] <= '9' &&
               p[11] >= '0' && p[11] <= '9' && p[12] == ' ');
        status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
        /* Every line ends in CR LF; no CR or LF anywhere else. */
        for (line = p; line < hend + 2;) {
            const char *eol = memchr(line, '\r', (size_t)(hend + 2 - line));
            ASSERT(eol && eol[1] == '\n');
            ASSERT(memchr(line, '\n', (size_t)(eol - line)) == NULL);
            if (line != p)
                ASSERT(memchr(line, ':', (size_t)(eol - line)) != NULL);
            line = eol + 2;
        }
        if (status == 100) {
            ASSERT(head_len == 25 &&
                   memcmp(p, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
            fz.checked += head_len;
            continue;
        }
        v = header_value(p, hend + 2, "Content-Length");
        if (status == 204 || status == 304) {
            ASSERT(v == NULL);
        } else {
            ASSERT(v != NULL);
            clen = strtoul(v, NULL, 10);
        }
        v = header_value(p, hend + 2, "X-Seq");
        has_seq = v != NULL;
        if (has_seq) {
            seq = (unsigned)strtoul(v, NULL, 10);
            ASSERT(seq == fz.next_seq); /* in order, each once */
            ASSERT(seq < fz.dispatched);
            ASSERT(header_value(p, hend + 2, "X-Inject") != NULL &&
                   memcmp(header_value(p, hend + 2, "X-Inject"), "a  b\r\n",
                          6) == 0);
            if (fz.head[seq % SEQ_MAX])
                clen = 0; /* HEAD: the length of a body not sent */
        } else {
            ASSERT(status == 400 || status == 408 || status == 413 ||
                   status == 414 || status == 431 || status == 503 ||
                   status == 505);
            ASSERT(header_value(p, hend + 2, "Connection") != NULL);
            v = header_value(p, hend + 2, "Content-Type");
            ASSERT(v && memcmp(v, "application/json\r\n", 18) == 0);
        }
        if ((size_t)(end - p) < head_len + clen)
            return; /* the body is still coming */
        if (!has_seq)
            ASSERT(clen > 13 &&
                   memcmp(p + head_len, "{\"error\":\"", 10) == 0 &&
                   memcmp(p + head_len + clen - 3, "\"}\n", 3) == 0);
        if (has_seq)
            fz.next_seq++;
        v = header_value(p, hend + 2, "Connection");
        if (v && memcmp(v, "close\r\n", 7) == 0)
            fz.closed_by_response = 1;
        fz.checked += head_len + clen;
    }
}

/* Takes output from the connection, all or part of it. */
static void take_output(ratel__http_conn_t *c, int64_t now)
{
    size_t n;
    const char *p = ratel__http_conn_output(c, &n);

    if (n && (fz.mode & 0x08))
        n = next_rand() % 4 == 0 ? 0 : (size_t)(next_rand() % (n + 1));
    if (!n)
        return;
    if (fz.out_len + n > fz.out_cap) {
        size_t cap = fz.out_cap ? fz.out_cap : 4096;
        while (cap < fz.out_len + n)
            cap *= 2;
        fz.out = realloc(fz.out, cap);
        ASSERT(fz.out != NULL);
        fz.out_cap = cap;
    }
    memcpy(fz.out + fz.out_len, p, n);
    fz.out_len += n;
    ratel__http_conn_written(c, n, now);
    check_output();
}

/* What worker.c's service() does: parse what was held back and send,
   again while the socket's taking the output lets more requests go. */
static void service(ratel__http_conn_t *c, int64_t now)
{
    do {
        ratel__http_conn_process(c, now);
        take_output(c, now);
    } while (ratel__http_conn_pending(c));
}

/* The peer stays to the end: everything dispatched is answered, in
   order, exactly once (unless the output limit closed the connection),
   then the connection closes. */
static void answer_the_rest(ratel__http_conn_t *c, ratel__http_ctx_t *ctx,
                            int64_t now)
{
    for (int i = 0; i < 1000; i++) {
        size_t n;
        flush();
        service(c, now);
        ratel__http_conn_output(c, &n);
        if (!n && !fz.nheld && ratel__http_conn_inflight(c) == 0 &&
            !ratel__http_conn_pending(c))
            break;
    }
    if (!ratel__http_conn_aborted(c)) {
        ASSERT(fz.checked == fz.out_len);
        ASSERT(fz.next_seq == fz.dispatched);
    }
    ratel__http_conn_close(c);
    /* Answers to a closed connection are dropped; then nothing is held. */
    flush();
    ASSERT(ctx->conns == NULL);
}

static void limits_for(unsigned mode, ratel_http_limits_t *lim)
{
    memset(lim, 0, sizeof *lim);
    switch (mode & 3) {
    case 1:
        lim->max_header_bytes = 256;
        lim->max_body_bytes = 128;
        lim->max_pipeline = 2;
        lim->request_timeout_ms = 50;
        lim->idle_timeout_ms = 200;
        break;
    case 2:
        lim->max_header_bytes = 1024;
        lim->max_body_bytes = 512;
        lim->max_pipeline = 4;
        break;
    case 3:
        lim->max_pipeline = 1;
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ratel_http_limits_t lim;
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t pos = 2;
    int64_t now = 1000;
    int gone = 0, drain = 0, stalls = 0;
    uint64_t gone_at, drain_at;

    if (size < 2)
        return 0;
    memset(&fz, 0, sizeof fz);
    fz.mode = data[0];
    rng = data[1] & 0x1f;
    limits_for(fz.mode, &lim);
    if (fz.mode & 0x08)
        lim.max_output_bytes = 64 << 10;
    ratel__http_ctx_init(&ctx, &lim, handler, NULL, 0);
    fz.max_pipeline = ctx.limits.max_pipeline;
    if (data[1] & 0x60)
        ctx.buf_size = (size_t)16 << (2 * ((data[1] >> 5) & 3));
    c = fz.conn = ratel__http_conn_new(&ctx, NULL, 0, now);
    ASSERT(c != NULL);
    gone_at = (fz.mode & 0x04) ? 2 + next_rand() % size : UINT64_MAX;
    drain_at = (data[1] & 0x80) ? 2 + next_rand() % size : UINT64_MAX;

    while (pos < size && !gone) {
        size_t piece = 1 + (size_t)(next_rand() % 64), took;
        if (next_rand() % 16 == 0)
            piece = 1 + (size_t)(next_rand() % 4096);
        if (piece > size - pos)
            piece = size - pos;
        took = ratel__http_conn_feed(c, (const char *)data + pos, piece, now);
        pos += took;
        if (pos >= gone_at) {
            gone = 1; /* the peer leaves, maybe with requests held */
            break;
        }
        if (fz.mode & 0x80) {
            now += (int64_t)(next_rand() % 40);
            if (ratel__http_conn_tick(c, now)) {
                gone = 1; /* idle: the driver closes it */
                break;
            }
        }
        flush();
        service(c, now);
        ratel__http_conn_trim(c);
        if (ratel__http_conn_aborted(c)) {
            gone = 1; /* the driver closes it at once */
            break;
        }
        if (!drain && pos >= drain_at) {
            drain = fz.draining = 1;
            ratel__http_conn_drain(c, now);
            flush();
            take_output(c, now);
        }
        if (ratel__http_conn_finished(c) && !fz.nheld) {
            take_output(c, now);
            break;
        }
        if (took)
            stalls = 0;
        else if (++stalls > 64)
            break; /* the connection takes nothing more (closing) */
    }
    if (gone) {
        /* The peer left: held answers are dropped, never sent. */
        ratel__http_conn_close(c);
        if (next_rand() % 2) {
            flush();
            ASSERT(ctx.conns == NULL); /* all answered: nothing held */
        }
    } else {
        answer_the_rest(c, &ctx, now);
    }
    ratel__http_ctx_destroy(&ctx); /* frees anything still held */
    free(fz.out);
    fz.out = NULL;
    return 0;
}
