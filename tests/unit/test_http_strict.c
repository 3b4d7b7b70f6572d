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
#include "http/listen.h"
#include "http/peers.h"
#include "http/strict.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
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

/* ------------------------------------------------ per-client cap */

static void addr4(struct sockaddr_in *a, uint32_t ip)
{
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(ip);
}

/* The table against a plain array of counts, through random churn. */
TEST(http_strict_peers_table)
{
    enum { ADDRS = 300, MAXC = 200, PER = 3 };
    static unsigned ref[ADDRS];
    static ratel__http_peer_key_t held[MAXC];
    ratel__http_peers_t *p = ratel__http_peers_new(MAXC, PER);
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    ratel__http_peer_key_t k1, k2;
    unsigned nheld = 0;

    REQUIRE(p != NULL);
    /* 10.0.0.1 over IPv4 and as ::ffff:10.0.0.1 over IPv6: one client. */
    addr4(&a4, 0x0a000001);
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr.s6_addr[10] = a6.sin6_addr.s6_addr[11] = 0xff;
    a6.sin6_addr.s6_addr[12] = 10;
    a6.sin6_addr.s6_addr[15] = 1;
    CHECK(ratel__http_peers_acquire(p, (struct sockaddr *)&a4, sizeof a4, &k1));
    CHECK(ratel__http_peers_acquire(p, (struct sockaddr *)&a6, sizeof a6, &k2));
    CHECK_EQ(ratel__http_peers_count(p, &k1), 2);
    ratel__http_peers_release(p, &k1);
    ratel__http_peers_release(p, &k1); /* twice: counted once */
    ratel__http_peers_release(p, &k2);
    CHECK_EQ(ratel__http_peers_count(p, &k2), 0);
    /* Not IP: let through, not counted. */
    a4.sin_family = AF_UNIX;
    CHECK(ratel__http_peers_acquire(p, (struct sockaddr *)&a4, sizeof a4, &k1));
    CHECK(!k1.counted);

    for (int step = 0; step < 20000; step++) {
        uint64_t r = ratel_test_rand();
        if (nheld && (nheld == MAXC || r % 2)) {
            unsigned i = (unsigned)((r >> 8) % nheld);
            uint32_t be;
            unsigned idx;
            memcpy(&be, held[i].addr + 12, sizeof be); /* may be unaligned */
            idx = ntohl(be) - 1;
            ratel__http_peers_release(p, &held[i]);
            ref[idx]--;
            held[i] = held[--nheld];
        } else {
            unsigned idx = (unsigned)((r >> 8) % ADDRS);
            ratel__http_peer_key_t k;
            int ok;
            addr4(&a4, idx + 1);
            ok = ratel__http_peers_acquire(p, (struct sockaddr *)&a4, sizeof a4,
                                           &k);
            CHECK_EQ(ok, ref[idx] < PER);
            if (ok) {
                ref[idx]++;
                held[nheld++] = k;
            }
        }
        if (step % 1000 == 0)
            for (unsigned i = 0; i < ADDRS; i++) {
                ratel__http_peer_key_t k;
                addr4(&a4, i + 1);
                memset(&k, 0, sizeof k);
                k.addr[10] = k.addr[11] = 0xff;
                memcpy(k.addr + 12, &a4.sin_addr, 4);
                CHECK_EQ(ratel__http_peers_count(p, &k), ref[i]);
            }
    }
    while (nheld)
        ratel__http_peers_release(p, &held[--nheld]);
    ratel__http_peers_free(p);
    ratel__http_peers_free(NULL);
}

typedef struct cap_server_s {
    ratel_http_server_t *http;
    pthread_t tid;
    int port;
} cap_server_t;

static void *cap_main(void *arg)
{
    ratel_http_server_run(arg);
    return NULL;
}

/* A connected socket from `from` (host order) to 127.0.0.1:port with a
   1 s receive timeout, or -1. */
static int connect_from(uint32_t from, int port)
{
    struct sockaddr_in src, dst;
    struct timeval tv = {1, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    addr4(&src, from);
    addr4(&dst, 0x7f000001);
    dst.sin_port = htons((uint16_t)port);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends a GET on fd and reads what comes within a second into buf. */
static size_t get_on(int fd, char *buf, size_t cap)
{
    static const char req[] = "GET /cap HTTP/1.1\r\nHost: t\r\n\r\n";
    size_t n = 0;

    (void)!send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    while (n < cap - 1) {
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
        if (strstr(buf, "path=/cap") || strstr(buf, "\"}\n"))
            break;
    }
    buf[n] = '\0';
    return n;
}

/* One client holding its share of idle connections is refused more
   (503, JSON), while another address is still served, and the share
   comes back when a connection closes. */
TEST(http_strict_connections_per_client)
{
    ratel_http_options_t o;
    cap_server_t s;
    char err[256], buf[1024];
    int a[3], b;

    memset(&o, 0, sizeof o);
    o.listen = "127.0.0.1:0";
    o.limits.max_connections = 5;
    o.limits.max_connections_per_client = 3;
    o.handler = answer;
    REQUIRE(ratel_http_server_new(&s.http, &o, err, sizeof err) == 0);
    s.port = ratel_http_server_port(s.http);
    REQUIRE(pthread_create(&s.tid, NULL, cap_main, s.http) == 0);
    for (int i = 0; i < 3; i++) {
        a[i] = connect_from(0x7f000001, s.port);
        CHECK(a[i] >= 0);
    }
    /* Served on the held connections: they count. */
    get_on(a[0], buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 200 ") != NULL);
    b = connect_from(0x7f000001, s.port);
    get_on(b, buf, sizeof buf);
    CHECK(is_json_error(buf, 503, "max_connections_per_client"));
    close(b);
    b = connect_from(0x7f000002, s.port);
    get_on(b, buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 200 ") != NULL);
    close(b);
    /* A closed connection gives its place back (once the server has
       seen the close: retried for up to 2 s). */
    close(a[2]);
    for (int i = 0; i < 40; i++) {
        struct timespec ts = {0, 50000000};
        b = connect_from(0x7f000001, s.port);
        get_on(b, buf, sizeof buf);
        close(b);
        if (strstr(buf, "HTTP/1.1 200 "))
            break;
        nanosleep(&ts, NULL);
    }
    CHECK(strstr(buf, "HTTP/1.1 200 ") != NULL);
    close(a[0]);
    close(a[1]);
    ratel_http_server_stop(s.http, 0);
    pthread_join(s.tid, NULL);
    ratel_http_server_free(s.http);
}

/* The client address a refused connection is logged with: one spelling
   per client (an IPv4-mapped IPv6 peer as IPv4, as the peers table
   counts it), a bounded buffer. */
TEST(http_strict_refused_client_text)
{
    static const struct {
        int family;
        const char *addr; /* inet_pton's input, NULL: none */
        const char *want;
    } hosts[] = {
        {AF_INET, "10.0.0.1", "10.0.0.1"},
        {AF_INET6, "::1", "::1"},
        {AF_INET6, "2001:db8::5", "2001:db8::5"},
        {AF_INET6, "::ffff:10.0.0.1", "10.0.0.1"},
        {AF_INET6, "::fffe:a00:1", "::fffe:a00:1"},
        {AF_UNIX, NULL, "-"},
    };
    char buf[RATEL_HTTP_ADDR_MAX], tiny[4];

    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_family = (sa_family_t)hosts[i].family;
        if (hosts[i].family == AF_INET)
            inet_pton(AF_INET, hosts[i].addr,
                      &((struct sockaddr_in *)&ss)->sin_addr);
        else if (hosts[i].family == AF_INET6)
            inet_pton(AF_INET6, hosts[i].addr,
                      &((struct sockaddr_in6 *)&ss)->sin6_addr);
        ratel__address_host(&ss, buf, sizeof buf);
        if (strcmp(buf, hosts[i].want) != 0)
            ratel_test_fail(__FILE__, __LINE__, hosts[i].want);
        /* Too small a buffer: cut or empty, always terminated. */
        memset(tiny, 'x', sizeof tiny);
        ratel__address_host(&ss, tiny, sizeof tiny);
        CHECK(memchr(tiny, '\0', sizeof tiny) != NULL);
    }
}

RATEL_SUITE(http_strict) = {
    {"http_strict_requests", test_http_strict_requests},
    {"http_strict_bare_lf_desync", test_http_strict_bare_lf_desync},
    {"http_strict_helpers", test_http_strict_helpers},
    {"http_strict_error_bodies", test_http_strict_error_bodies},
    {"http_strict_peers_table", test_http_strict_peers_table},
    {"http_strict_connections_per_client",
     test_http_strict_connections_per_client},
    {"http_strict_refused_client_text", test_http_strict_refused_client_text},
    {0, 0},
};
