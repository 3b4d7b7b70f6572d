/*
 * test_http_strict.c - what the HTTP layer refuses that http-parser (as
 * Debian builds it) lets through, the JSON body of every error the layer
 * answers by itself, and the per-client connection cap.
 *
 * Each hostile request is followed by a good pipelined one: a refused
 * request must close the connection with nothing after it answered (a
 * request smuggled behind a bare LF must never run). Each is fed whole,
 * byte by byte and into a 64-byte read buffer, so that the checks are
 * met with the request cut at every place.
 */
#include "test.h"

#include "http/conn.h"
#include "http/http.h"
#include "http/strict.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define NEXT "GET /next HTTP/1.1\r\nHost: t\r\n\r\n"

/* Answers at once: 200 with the path and the body. */
static void answer(void *ud, ratel_http_exchange_t *ex,
                   const ratel_http_request_t *req)
{
    char b[256];
    int n = snprintf(b, sizeof b, "path=%.*s body=%.*s", (int)req->path.n,
                     req->path.p, (int)req->body.n, req->body.p);

    (void)ud;
    ratel_http_respond(ex, 200, NULL, 0, b, (size_t)n);
}

/* What the machine answers to `in`, fed in pieces of `piece` bytes into
   a read buffer of buf_size (0: the default), in out (NUL-terminated). */
static size_t run(const char *in, size_t n, size_t piece, size_t buf_size,
                  char *out, size_t cap)
{
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t olen = 0;

    ratel__http_ctx_init(&ctx, NULL, answer, NULL, 0);
    if (buf_size)
        ctx.buf_size = buf_size;
    c = ratel__http_conn_new(&ctx, NULL, 0, 0);
    if (!c)
        abort();
    for (size_t at = 0; at < n;) {
        size_t k = n - at < piece ? n - at : piece, took;
        const char *p;
        took = ratel__http_conn_feed(c, in + at, k, 0);
        p = ratel__http_conn_output(c, &k);
        if (k > cap - 1 - olen)
            k = cap - 1 - olen;
        memcpy(out + olen, p, k);
        olen += k;
        ratel__http_conn_written(c, k, 0);
        if (!took)
            break;
        at += took;
    }
    out[olen] = '\0';
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
    return olen;
}

static int count(const char *s, const char *what)
{
    int k = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        k++;
    return k;
}

/* A request and what must happen to it: answered (200) and the next
   pipelined one too, or `status` with `why` in its error and nothing
   answered after it. */
static const struct {
    const char *in;
    int status;
    const char *why;
} cases[] = {
    {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 200, NULL},
    /* HTTP/1.0 may leave Host out. */
    {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 200, NULL},
    {"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 200, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\tb\x80\r\n\r\n", 200, NULL},
    {"GET / HTTP/1.1\r\nHost:\r\n\r\n", 200, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX!#$%&'*+-.^_`|~09az: v\r\n\r\n", 200, NULL},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\n",
     200, NULL},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "0\r\n\r\n",
     200, NULL},
    /* Host: none in HTTP/1.1, two in any version. */
    {"GET / HTTP/1.1\r\n\r\n", 400, "needs a Host header"},
    {"GET / HTTP/1.1\r\nX: y\r\n\r\n", 400, "needs a Host header"},
    {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one"},
    {"GET / HTTP/1.1\r\nHost: a\r\nhOST: a\r\n\r\n", 400, "more than one"},
    {"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one"},
    /* Header names: tokens only. */
    {"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", 400, "header name"},
    {"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", 400, "header name"},
    {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "header name"},
    {"GET / HTTP/1.1\r\nHost: a\r\nX(A: b\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX@A: b\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX\x7f"
     "A: b\r\n\r\n",
     400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX\xc3\xa9: b\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400, NULL},
    /* Values: no control byte but HTAB. */
    {"GET / HTTP/1.1\r\nHost: a\x01z\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost:\x7f"
     "f\r\n\r\n",
     400, "control byte"},
    {"GET / HTTP/1.1\r\nHost: a\r\nX:\x01\r\n\r\n", 400, "control byte"},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fz\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x1bz\r\n\r\n", 400, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nX: a\rz\r\n\r\n", 400, NULL},
    /* Bare LF, anywhere in the head. */
    {"GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "bare LF"},
    {"GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400, "bare LF"},
    {"GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "bare LF"},
    {"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\nContent-Length: 34\r\n\r\n", 400,
     "bare LF"},
    /* The request target. */
    {"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request target"},
    {"GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, NULL},
    /* Chunk framing: bare LF, data not followed by CR LF. */
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabc\n0\r\n\r\n",
     400, NULL},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3;x=y\nabc\r\n0\r\n\r\n",
     400, "chunked"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabcXX0\r\n\r\n",
     400, "chunked"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabc\rX0\r\n\r\n",
     400, "chunked"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabc\r\n0\r\n\n",
     400, "chunked"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "0\r\nT: v\nU: w\r\n\r\n",
     400, "chunked"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabc\r\n0;e\n\r\n",
     400, NULL},
    /* Framing the parser refuses itself. */
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: "
     "2\r\n\r\nab",
     400, NULL},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: "
     "chunked\r\n\r\n0\r\n\r\n",
     400, NULL},
};

/* 1 if out is exactly one JSON error (its Content-Length reaching the
   end of out) with `status` and Connection: close, whose text contains
   `why` (if not NULL). */
static int is_json_error(const char *out, int status, const char *why)
{
    char line[32];
    const char *body = strstr(out, "\r\n\r\n"), *len;

    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    if (!body || strncmp(out, line, strlen(line)) != 0)
        return 0;
    body += 4;
    len = strstr(out, "\r\nContent-Length: ");
    return len && strtoul(len + 18, NULL, 10) == strlen(body) &&
           strstr(out, "\r\nContent-Type: application/json\r\n") &&
           strstr(out, "\r\nConnection: close\r\n") &&
           strncmp(body, "{\"error\":\"", 10) == 0 &&
           strcmp(body + strlen(body) - 3, "\"}\n") == 0 &&
           (!why || strstr(body, why));
}

/* CHECK that names the case and the piece size when it fails. */
#define CASE_CHECK(cond, i, piece)                                             \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char m_[512];                                                      \
            snprintf(m_, sizeof m_, "case %zu (%s) piece %zu: %s", i,          \
                     cases[i].in, piece, #cond);                               \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

TEST(http_strict_requests)
{
    static char in[1024], out[8192];
    static const size_t pieces[] = {1 << 20, 1, 7};

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = (size_t)snprintf(in, sizeof in, "%s" NEXT, cases[i].in);
        for (size_t j = 0; j < 4; j++) {
            size_t piece = j < 3 ? pieces[j] : 3;
            run(in, n, piece, j == 3 ? 64 : 0, out, sizeof out);
            if (cases[i].status == 200) {
                CASE_CHECK(count(out, "HTTP/1.1 200 ") == 2, i, piece);
                CASE_CHECK(strstr(out, "path=/next") != NULL, i, piece);
            } else {
                CASE_CHECK(is_json_error(out, cases[i].status, cases[i].why), i,
                           piece);
                CASE_CHECK(strstr(out, "path=/next") == NULL, i, piece);
            }
        }
    }
}

/* The request smuggled behind a bare LF in the example: the body
   the parser would read is the next request. */
TEST(http_strict_bare_lf_desync)
{
    static char out[4096];
    static const char in[] =
        "POST /a HTTP/1.1\r\nHost: a\r\nX-A: a\nContent-Length: 34\r\n\r\n"
        "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";

    run(in, sizeof in - 1, 1 << 20, 0, out, sizeof out);
    CHECK(is_json_error(out, 400, "bare LF"));
    CHECK(strstr(out, "smuggled") == NULL);
}

TEST(http_strict_helpers)
{
    unsigned char st = RATEL__FRAME_LINE;

    CHECK(ratel__http_is_token("X-Forwarded-For", 15));
    CHECK(!ratel__http_is_token("X A", 3));
    CHECK(!ratel__http_is_token("X:", 2));
    CHECK(!ratel__http_is_token("a\0b", 3));
    CHECK(ratel__http_target_ok("/a?b=%20#c", 10));
    CHECK(!ratel__http_target_ok("/a b", 4));
    CHECK_EQ(ratel__http_head_length("GET / HTTP/1.1\r\n\r\nX", 19), 18);
    CHECK_EQ(ratel__http_head_length("\r\n\nGET / HTTP/1.1\r\n\r\n", 21), 21);
    CHECK_EQ(ratel__http_head_length("GET / HTTP/1.1\r\nA: b\r\n", 23), 0);
    CHECK_EQ(ratel__http_head_length("GET / HTTP/1.1\r\nA: b\n\r\n", 24), -1);
    CHECK_EQ(ratel__http_framing(&st, "3;x\r", 4), 0);
    CHECK_EQ(st, RATEL__FRAME_LINE_LF);
    CHECK_EQ(ratel__http_framing(&st, "\n", 1), 0);
    st = RATEL__FRAME_DATA_CR;
    CHECK_EQ(ratel__http_framing(&st, "\r\n0\r\n\r\n", 7), 0);
    st = RATEL__FRAME_DATA_CR;
    CHECK_EQ(ratel__http_framing(&st, "\n0\r\n", 4), -1);
}

/* Every error the layer answers by itself is JSON naming its cause. */
TEST(http_strict_error_bodies)
{
    static const int statuses[] = {400, 408, 413, 414, 431, 503, 505};
    char buf[512];

    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
        size_t n =
            ratel__http_error_response(statuses[i], NULL, buf, sizeof buf - 1);
        buf[n] = '\0';
        CHECK(is_json_error(buf, statuses[i], NULL));
    }
    ratel__http_error_response(408, NULL, buf, sizeof buf);
    CHECK(strstr(buf, "limits.request_timeout_ms") != NULL);
    /* A text with quotes and control bytes stays one JSON string. */
    ratel__http_error_response(400, "a \"b\"\\\n", buf, sizeof buf);
    CHECK(strstr(buf, "{\"error\":\"a \\\"b\\\"\\\\\\u000a\"}\n") != NULL);
}

RATEL_SUITE(http_strict) = {
    {"http_strict_requests", test_http_strict_requests},
    {"http_strict_bare_lf_desync", test_http_strict_bare_lf_desync},
    {"http_strict_helpers", test_http_strict_helpers},
    {"http_strict_error_bodies", test_http_strict_error_bodies},
    {0, 0},
};
