/*
 * test_http.c - the HTTP server (server/http): helpers, the connection state
 * machine fed directly, and a real server on 127.0.0.1 port 0 in a thread
 * driven by raw-socket clients.
 *
 * The test handler echoes what it parsed as text ("method=GET\npath=...").
 * Paths decide when it answers:
 *   /defer...    at the flush hook, the pass's deferred ones in reverse
 *                order (the server must still send them in request order)
 *   /slow...     held until a /release arrives on the same thread
 *   /release     deferred; its flush answers the held /slow ones first
 *   /status/NNN  at once, with status NNN
 *   /q?v=...     at once, the decoded parameter v
 *   anything else at once
 * Deferred answers are built at answer time, so every request string is
 * read long after it was parsed (AddressSanitizer and valgrind watch).
 *
 * Timeout tests (408, idle) wait on real time with small limits: they
 * test network timeouts, bounded to about half a second each.
 */
#include "test.h"

#include "http/conn.h"
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define THREADS_MAX 4
#define HELD_MAX 512

typedef struct held_s {
    ratel_http_exchange_t *ex;
    const ratel_http_request_t *req;
} held_t;

static struct {
    held_t defer[THREADS_MAX][HELD_MAX];
    size_t ndefer[THREADS_MAX];
    held_t slow[THREADS_MAX][HELD_MAX];
    size_t nslow[THREADS_MAX];
    int release[THREADS_MAX];
    atomic_int slow_held, requests, flushes, flush_without_request;
    atomic_int seen_thread[THREADS_MAX];
    atomic_int refused[RATEL_HTTP_REFUSALS]; /* the refused hook's calls */
    char refused_client[RATEL_HTTP_ADDR_MAX];
} st;

static int starts_with(ratel_http_str_t s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.n >= n && memcmp(s.p, prefix, n) == 0;
}

/* Answers with the request as text. */
static void echo(ratel_http_exchange_t *ex, const ratel_http_request_t *req,
                 int status)
{
    static const ratel_http_header_t extra[] = {
        {{"X-Test", 6}, {"yes", 3}},
        {{"Content-Type", 12}, {"text/plain", 10}},
    };
    size_t cap = 512 + req->target.n + req->body.n, n = 0;
    char *b;

    for (size_t i = 0; i < req->nheaders; i++)
        cap += req->headers[i].name.n + req->headers[i].value.n + 4;
    b = malloc(cap);
    if (!b)
        abort();
    n += (size_t)snprintf(
        b + n, cap - n,
        "method=%.*s\npath=%.*s\nquery=%.*s\nminor=%d\nka=%d\nthread=%u\n",
        (int)req->method.n, req->method.p, (int)req->path.n, req->path.p,
        (int)req->query.n, req->query.p, req->http_minor, req->keep_alive,
        req->thread);
    for (size_t i = 0; i < req->nheaders; i++)
        n += (size_t)snprintf(
            b + n, cap - n, "h:%.*s=%.*s\n", (int)req->headers[i].name.n,
            req->headers[i].name.p, (int)req->headers[i].value.n,
            req->headers[i].value.p);
    memcpy(b + n, "body=", 5);
    n += 5;
    memcpy(b + n, req->body.p, req->body.n);
    n += req->body.n;
    ratel_http_respond(ex, status, extra, 2, b, n);
    free(b);
}

static void handler(void *ud, ratel_http_exchange_t *ex,
                    const ratel_http_request_t *req)
{
    unsigned t = req->thread;
    held_t h = {ex, req};

    (void)ud;
    atomic_fetch_add(&st.requests, 1);
    if (t < THREADS_MAX)
        atomic_store(&st.seen_thread[t], 1);
    if (starts_with(req->path, "/defer") ||
        starts_with(req->path, "/release")) {
        if (starts_with(req->path, "/release"))
            st.release[t] = 1;
        if (st.ndefer[t] < HELD_MAX) {
            st.defer[t][st.ndefer[t]++] = h;
            return;
        }
    } else if (starts_with(req->path, "/slow")) {
        if (st.nslow[t] < HELD_MAX) {
            st.slow[t][st.nslow[t]++] = h;
            atomic_fetch_add(&st.slow_held, 1);
            return;
        }
    } else if (starts_with(req->path, "/status/")) {
        echo(ex, req, atoi(req->path.p + 8));
        return;
    } else if (starts_with(req->path, "/q")) {
        char v[16];
        long n = ratel_http_query_param(req->query, "v", v, sizeof v);
        if (n == -1)
            ratel_http_respond(ex, 200, NULL, 0, "ABSENT", 6);
        else if (n < 0)
            ratel_http_respond(ex, 400, NULL, 0, "MALFORMED", 9);
        else
            ratel_http_respond(ex, 200, NULL, 0, v, (size_t)n);
        return;
    }
    echo(ex, req, 200);
}

static void flush(void *ud, unsigned t)
{
    (void)ud;
    atomic_fetch_add(&st.flushes, 1);
    if (st.ndefer[t] == 0 && !st.release[t])
        atomic_fetch_add(&st.flush_without_request, 1);
    if (st.release[t]) {
        for (size_t i = 0; i < st.nslow[t]; i++)
            echo(st.slow[t][i].ex, st.slow[t][i].req, 200);
        st.nslow[t] = 0;
        st.release[t] = 0;
    }
    while (st.ndefer[t]) {
        held_t h = st.defer[t][--st.ndefer[t]];
        echo(h.ex, h.req, 200);
    }
}

/* -------------------------------------------------- server in a thread */

typedef struct server_s {
    ratel_http_server_t *http;
    pthread_t tid;
    int port;
} server_t;

static void *server_main(void *arg)
{
    ratel_http_server_run(arg);
    return NULL;
}

/* The refused hook: counts, and keeps the client's address text. */
static void refused(void *ud, unsigned thread, ratel_http_refusal_t why,
                    const char *client)
{
    (void)ud;
    (void)thread;
    snprintf(st.refused_client, sizeof st.refused_client, "%s", client);
    atomic_fetch_add(&st.refused[why], 1);
}

static int start_on(server_t *s, const char *listen,
                    const ratel_http_limits_t *limits, unsigned threads)
{
    ratel_http_options_t o;
    char err[256];

    memset(&st, 0, sizeof st);
    memset(s, 0, sizeof *s);
    memset(&o, 0, sizeof o);
    o.listen = listen;
    o.threads = threads;
    if (limits)
        o.limits = *limits;
    o.handler = handler;
    o.flush = flush;
    o.refused = refused;
    if (ratel_http_server_new(&s->http, &o, err, sizeof err) != 0) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return -1;
    }
    s->port = ratel_http_server_port(s->http);
    if (pthread_create(&s->tid, NULL, server_main, s->http) != 0) {
        ratel_http_server_free(s->http);
        return -1;
    }
    return 0;
}

static int start(server_t *s, const ratel_http_limits_t *limits)
{
    return start_on(s, "127.0.0.1:0", limits, 1);
}

static void stop(server_t *s)
{
    ratel_http_server_stop(s->http, 0);
    pthread_join(s->tid, NULL);
    ratel_http_server_free(s->http);
}

/* ------------------------------------------------------ raw clients */

#define CLIENT_BUF (512 << 10)
#define client(port) client_on(AF_INET, port)

typedef struct client_s {
    int fd;
    size_t len;
    char buf[CLIENT_BUF];
} client_t;

typedef struct response_s {
    int status, close;
    char head[4096];
    char body[32768]; /* NUL-terminated */
    size_t body_len;
} response_t;

static client_t *client_on(int family, int port)
{
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    struct sockaddr_in a4 = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int v6 = family == AF_INET6, one = 1;
    struct timeval tv = {5, 0};
    client_t *c = malloc(sizeof *c);

    if (!c)
        return NULL;
    c->len = 0;
    c->fd = socket(family, SOCK_STREAM, 0);
    if (c->fd < 0 ||
        connect(c->fd, v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4,
                v6 ? sizeof a6 : sizeof a4) != 0) {
        if (c->fd >= 0)
            close(c->fd);
        free(c);
        return NULL;
    }
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static void client_free(client_t *c)
{
    if (!c)
        return;
    close(c->fd);
    free(c);
}

static int client_send(client_t *c, const char *data, size_t n)
{
    while (n) {
        ssize_t k = send(c->fd, data, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        data += k;
        n -= (size_t)k;
    }
    return 0;
}

static int client_sends(client_t *c, const char *s)
{
    return client_send(c, s, strlen(s));
}

/* Reads more bytes; 0 on EOF, -1 on error or timeout. */
static ssize_t client_fill(client_t *c)
{
    ssize_t n;

    if (c->len == CLIENT_BUF)
        return -1;
    n = recv(c->fd, c->buf + c->len, CLIENT_BUF - c->len, 0);
    if (n > 0)
        c->len += (size_t)n;
    return n;
}

/* Reads one final response (skipping 100 Continue). 0, or -1. */
static int client_read(client_t *c, response_t *r)
{
    memset(r, 0, sizeof *r);
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        size_t head, clen = 0, total;
        const char *p;
        if (!end) {
            if (client_fill(c) <= 0)
                return -1;
            continue;
        }
        head = (size_t)(end - c->buf) + 4;
        if (head >= sizeof r->head || c->len < 12 ||
            memcmp(c->buf, "HTTP/1.1 ", 9) != 0)
            return -1;
        memcpy(r->head, c->buf, head);
        r->head[head] = '\0';
        r->status = atoi(r->head + 9);
        p = strcasestr(r->head, "\r\nContent-Length: ");
        if (p)
            clen = strtoul(p + 18, NULL, 10);
        r->close = strcasestr(r->head, "\r\nConnection: close\r\n") != NULL;
        total = head + clen;
        while (c->len < total)
            if (client_fill(c) <= 0)
                return -1;
        if (r->status == 100) {
            memmove(c->buf, c->buf + head, c->len - head);
            c->len -= head;
            continue;
        }
        if (clen >= sizeof r->body)
            return -1;
        memcpy(r->body, c->buf + head, clen);
        r->body[clen] = '\0';
        r->body_len = clen;
        memmove(c->buf, c->buf + total, c->len - total);
        c->len -= total;
        return 0;
    }
}

/* 1 if the server closed the connection (EOF or reset) with nothing
   more to read. */
static int client_closed(client_t *c)
{
    char b[64];
    ssize_t n = recv(c->fd, b, sizeof b, 0);
    return c->len == 0 && (n == 0 || (n < 0 && errno == ECONNRESET));
}

/* GET path on a new connection; the response's status, or -1. */
static int get_status(int port, const char *path, char *body, size_t len)
{
    client_t *c = client(port);
    response_t r;
    char req[512];
    int status = -1;

    if (!c)
        return -1;
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    if (client_sends(c, req) == 0 && client_read(c, &r) == 0) {
        status = r.status;
        if (body && len) {
            size_t n = r.body_len < len - 1 ? r.body_len : len - 1;
            memcpy(body, r.body, n);
            body[n] = '\0';
        }
    }
    client_free(c);
    return status;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits (at most 5 s) until *counter reaches n. */
static int wait_for(atomic_int *counter, int n)
{
    int64_t end = mono_ms() + 5000;
    while (atomic_load(counter) < n) {
        struct timespec ts = {0, 2000000};
        if (mono_ms() > end)
            return -1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

/* One request on `c`, its response in *r; fails the test if none. */
static int roundtrip(client_t *c, const char *req, response_t *r)
{
    if (c && client_sends(c, req) == 0 && client_read(c, r) == 0)
        return 0;
    ratel_test_fail(__FILE__, __LINE__, req);
    memset(r, 0, sizeof *r);
    return -1;
}

static int body_has(const response_t *r, const char *s)
{
    return strstr(r->body, s) != NULL;
}

/* --------------------------------------------------------- helpers */

#define REASON_IS(code, text) CHECK(strcmp(ratel_http_reason(code), text) == 0)

TEST(http_reason_phrases)
{
    REASON_IS(200, "OK");
    REASON_IS(429, "Too Many Requests");
    REASON_IS(408, "Request Timeout");
    REASON_IS(431, "Request Header Fields Too Large");
    REASON_IS(503, "Service Unavailable");
    REASON_IS(299, "Success");
    REASON_IS(499, "Client Error");
    REASON_IS(-1, "Server Error");
}

TEST(http_header_lookup)
{
    static const ratel_http_request_t req = {
        .headers = {{{"Host", 4}, {"a", 1}},
                    {{"X-Forwarded-For", 15}, {"1.2.3.4", 7}},
                    {{"x-forwarded-for", 15}, {"5.6.7.8", 7}}},
        .nheaders = 3,
    };
    const ratel_http_str_t *v = ratel_http_header(&req, "x-FORWARDED-for");

    CHECK(v && v->n == 7 && memcmp(v->p, "1.2.3.4", 7) == 0);
    v = ratel_http_header(&req, "HOST");
    CHECK(v && v->n == 1 && v->p[0] == 'a');
    CHECK(ratel_http_header(&req, "X-Forwarded") == NULL);
    CHECK(ratel_http_header(&req, "Hosts") == NULL);
    CHECK(ratel_http_header(&req, "") == NULL);
}

TEST(http_query_param)
{
    static const struct {
        const char *query, *name;
        size_t len;
        long rc;
        const char *value;
    } cases[] = {
        {"a=1&b=2", "b", 16, 1, "2"},
        {"a=1&b=2", "c", 16, -1, NULL},
        {"", "a", 16, -1, NULL},
        {"policy=ping&key=1.2.3.4", "key", 16, 7, "1.2.3.4"},
        {"k=a+b%20c", "k", 16, 5, "a b c"},
        {"k=%41%62%2b", "k", 16, 3, "Ab+"},
        {"k=%4", "k", 16, -2, NULL},
        {"k=%", "k", 16, -2, NULL},
        {"k=%zz", "k", 16, -2, NULL},
        {"k=%00", "k", 16, -2, NULL},
        {"k=", "k", 16, 0, ""},
        {"k", "k", 16, 0, ""},
        {"x&k", "k", 16, 0, ""},
        {"k=12345", "k", 6, 5, "12345"},
        {"k=123456", "k", 6, -2, NULL},
        {"kk=1&k=2", "k", 16, 1, "2"},
        {"k=1&k=2", "k", 16, -3, NULL},
        {"k=1&k", "k", 16, -3, NULL},
        {"k=1&%6b=2", "k", 16, -3, NULL},
        {"k=%zz&k=1", "k", 16, -3, NULL},
        /* Another case of the name: a second one to ASP.NET. */
        {"k=1&K=2", "k", 16, -3, NULL},
        {"K=1&k=2", "k", 16, -3, NULL},
        {"Tel=1&tel=2", "tel", 16, -3, NULL},
        {"K=1", "k", 16, -1, NULL},
        {"kK=1&k=2", "k", 16, 1, "2"},
        {"a%20b=x", "a b", 16, 1, "x"},
        {"a+b=y", "a b", 16, 1, "y"},
        {"a=1&&b=2", "b", 16, 1, "2"},
        {"bad=%zz&k=v", "k", 16, 1, "v"},
        {"k=a=b", "k", 16, 3, "a=b"},
        {"=v", "", 16, 1, "v"},
    };
    char buf[16];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_http_str_t q = {cases[i].query, strlen(cases[i].query)};
        long rc;
        memset(buf, 'X', sizeof buf);
        rc = ratel_http_query_param(q, cases[i].name, buf, cases[i].len);
        CHECK_EQ(rc, cases[i].rc);
        if (cases[i].value && rc >= 0)
            CHECK(strcmp(buf, cases[i].value) == 0);
    }
    {
        ratel_http_str_t q = {"k=1", 3}, none = {NULL, 0};
        CHECK_EQ(ratel_http_query_param(q, "k", NULL, 0), -2);
        CHECK_EQ(ratel_http_query_param(q, "j", NULL, 0), -1);
        CHECK_EQ(ratel_http_query_param(none, "k", buf, sizeof buf), -1);
    }
}

/* The one reading of a listen address (servers and configurations): what
   it accepts, what it refuses and the reason it gives. */
TEST(http_listen_parse)
{
    static const struct {
        const char *text, *host;
        int ipv6;
        unsigned port;
    } good[] = {
        {"127.0.0.1:8080", "127.0.0.1", 0, 8080},
        {"localhost:80", "localhost", 0, 80},
        {"rate-limit.example.org:65535", "rate-limit.example.org", 0, 65535},
        {":8080", "", 0, 8080},
        {":0", "", 0, 0},
        {"[::1]:8080", "::1", 1, 8080},
        {"[::]:1", "::", 1, 1},
        {"[::ffff:10.0.0.1]:9", "::ffff:10.0.0.1", 1, 9},
        {"10.0.0.1:00080", "10.0.0.1", 0, 80},
    };
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "no ':'"},
        {"127.0.0.1", "no ':'"},
        {"127.0.0.1:", "the port is missing"},
        {":", "the port is missing"},
        {"127.0.0.1:65536",
         "the port 65536 is out of range; accepted: 0..65535"},
        {"127.0.0.1:99999", "out of range"},
        {"127.0.0.1:123456", "is not a number 0..65535"},
        {"127.0.0.1:8x", "the port \"8x\" is not a number"},
        {"127.0.0.1:+80", "is not a number"},
        {"127.0.0.1:80 ", "is not a number"},
        {"::1:80", "an IPv6 address goes in brackets"},
        {"[::1]80", "expected ':' and the port after ']'"},
        {"[::1]", "expected ':' and the port after ']'"},
        {"[::1:80", "'[' without its ']'"},
        {"[]:80", "\"\" in brackets is not an IPv6 address"},
        {"[::g]:80", "\"::g\" in brackets is not an IPv6 address"},
        {"[127.0.0.1]:80", "is not an IPv6 address"},
        {"[fe80::1%eth0]:80", "is not an IPv6 address"},
        {"a b:80", "the host holds ' '"},
        {"host_name:80", "the host holds '_'"},
        {"h\x01:80", "the host holds the byte 0x01"},
        {"h\xc3\xa9:80", "the byte 0xc3"},
        {"a/b:80", "the host holds '/'"},
    };
    ratel_http_listen_t a;
    char why[256], longhost[300];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        why[0] = '\0';
        CHECK_EQ(ratel_http_listen_parse(good[i].text, &a, why, sizeof why), 0);
        CHECK(strcmp(a.host, good[i].host) == 0);
        CHECK_EQ(a.ipv6, good[i].ipv6);
        CHECK_EQ(a.port, good[i].port);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        CHECK_EQ(ratel_http_listen_parse(bad[i].text, &a, why, sizeof why), -1);
        if (!strstr(why, bad[i].why)) {
            char m[400];
            snprintf(m, sizeof m, "%s: got \"%s\", want \"%s\"", bad[i].text,
                     why, bad[i].why);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
    CHECK_EQ(ratel_http_listen_parse(NULL, &a, why, sizeof why), -1);
    memset(longhost, 'a', 256);
    memcpy(longhost + 256, ":80", 4);
    CHECK_EQ(ratel_http_listen_parse(longhost, &a, why, sizeof why), -1);
    CHECK(strstr(why, "longer than 255 bytes") != NULL);
    memcpy(longhost + 255, ":80", 4);
    CHECK_EQ(ratel_http_listen_parse(longhost, &a, why, sizeof why), 0);
    CHECK_EQ(a.port, 80);
}

TEST(http_listen_errors)
{
    static const char *const bad[] = {"x",      "127.0.0.1", "127.0.0.1:99999",
                                      "::1:80", "[::1]80",   ":",
                                      ":8x",    ""};
    ratel_http_options_t o;
    ratel_http_server_t *s = NULL;
    char err[256];

    memset(&o, 0, sizeof o);
    o.handler = handler;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.listen = bad[i];
        err[0] = '\0';
        CHECK_EQ(ratel_http_server_new(&s, &o, err, sizeof err), -1);
        CHECK(s == NULL);
        CHECK(strstr(err, "expected HOST:PORT") != NULL);
    }
    o.listen = "127.0.0.1:0";
    o.handler = NULL;
    CHECK_EQ(ratel_http_server_new(&s, &o, err, sizeof err), -1);
    CHECK(strstr(err, "handler") != NULL);
    ratel_http_server_free(NULL);
}

/* ------------------------------------------- the machine, no sockets */

/* Takes everything the connection has to send, appended to out. */
static void drain_output(ratel__http_conn_t *c, char *out, size_t *len,
                         size_t cap)
{
    size_t n;
    const char *p = ratel__http_conn_output(c, &n);
    if (n > cap - *len)
        n = cap - *len;
    memcpy(out + *len, p, n);
    *len += n;
    ratel__http_conn_written(c, n, 0);
}

/* Every "path=/defer/NNN" in out, in order, must count 0, 1, 2, ... */
static int paths_in_order(const char *out, size_t len, int expected)
{
    const char *p = out, *end = out + len;
    int i = 0;
    while ((p = memmem(p, (size_t)(end - p), "path=/defer/", 12))) {
        if (atoi(p + 12) != i++)
            return -1;
        p += 12;
    }
    return i == expected ? 0 : -1;
}

/* A state machine on its own, fed by the test; the shared handler. */
static ratel__http_conn_t *machine(ratel__http_ctx_t *ctx,
                                   const ratel_http_limits_t *lim)
{
    memset(&st, 0, sizeof st);
    ratel__http_ctx_init(ctx, lim, handler, NULL, 0);
    return ratel__http_conn_new(ctx, NULL, 0, 0);
}

TEST(http_conn_pipeline_limit)
{
    static char out[1 << 20];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    char in[4096];
    size_t n = 0, olen = 0;

    lim.max_pipeline = 4;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    for (int i = 0; i < 10; i++)
        n += (size_t)snprintf(in + n, sizeof in - n,
                              "GET /defer/%03d HTTP/1.1\r\nHost: t\r\n\r\n", i);
    CHECK_EQ(ratel__http_conn_feed(c, in, n, 0), n);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(ratel__http_conn_inflight(c), round < 2 ? 4 : 2);
        CHECK(!ratel__http_conn_wants_read(c) || round == 2);
        flush(NULL, 0);
        drain_output(c, out, &olen, sizeof out);
        ratel__http_conn_process(c, 0);
    }
    CHECK_EQ(ratel__http_conn_inflight(c), 0);
    CHECK(ratel__http_conn_wants_read(c));
    CHECK_EQ(paths_in_order(out, olen, 10), 0);
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

/* The driver's answer to "has the peer closed its side?" (worker.c
   polls the socket): what `peer_says_closed` holds. */
static int peer_says_closed;
static int peer_closed(ratel__http_ctx_t *ctx, void *user)
{
    (void)ctx;
    (void)user;
    return peer_says_closed;
}

/* An exchange held by the handler is abandoned once its connection is
   closed, or once the driver says the peer closed its side (and stays
   so); not before. */
TEST(http_conn_exchange_abandoned)
{
    static const char two[] = "GET /defer/000 HTTP/1.1\r\nHost: t\r\n\r\n"
                              "GET /defer/001 HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char one[] = "GET /defer/002 HTTP/1.1\r\nHost: t\r\n\r\n";
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c, *d;
    int user = 1;

    REQUIRE((c = machine(&ctx, NULL)) != NULL);
    ratel__http_conn_set_user(c, &user);
    CHECK_EQ(ratel__http_conn_feed(c, two, sizeof two - 1, 0), sizeof two - 1);
    REQUIRE(st.ndefer[0] == 2);
    CHECK(!ratel_http_exchange_abandoned(st.defer[0][0].ex));
    ctx.peer_closed = peer_closed;
    peer_says_closed = 0;
    CHECK(!ratel_http_exchange_abandoned(st.defer[0][1].ex));
    peer_says_closed = 1; /* its FIN came: both pipelined ones are gone */
    CHECK(ratel_http_exchange_abandoned(st.defer[0][0].ex));
    CHECK(ratel_http_exchange_abandoned(st.defer[0][1].ex));
    peer_says_closed = 0; /* once gone, always gone */
    CHECK(ratel_http_exchange_abandoned(st.defer[0][0].ex));
    flush(NULL, 0); /* answered all the same: the exchanges go back */
    CHECK_EQ(ratel__http_conn_inflight(c), 0);

    /* A closed connection's held exchange, without asking the driver. */
    REQUIRE((d = ratel__http_conn_new(&ctx, NULL, 0, 0)) != NULL);
    CHECK_EQ(ratel__http_conn_feed(d, one, sizeof one - 1, 0), sizeof one - 1);
    REQUIRE(st.ndefer[0] == 1);
    CHECK(!ratel_http_exchange_abandoned(st.defer[0][0].ex));
    ratel__http_conn_close(d);
    CHECK(ratel_http_exchange_abandoned(st.defer[0][0].ex));
    flush(NULL, 0); /* the answer is dropped, the exchange freed */
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

TEST(http_conn_buffer_moves)
{
    static char out[1 << 20], in[64 << 10];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t n = 0, olen = 0, fed = 0;
    const int count = 400;

    lim.max_pipeline = 1000;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    /* 400 requests of ~100 bytes, fed in 777-byte pieces: the 8 KiB
       buffer fills many times while every request is still unanswered. */
    for (int i = 0; i < count; i++)
        n += (size_t)snprintf(in + n, sizeof in - n,
                              "POST /defer/%03d HTTP/1.1\r\nHost: t\r\n"
                              "Content-Length: 5\r\nX-N: %03d\r\n\r\nb%03d!",
                              i, i, i);
    while (fed < n) {
        size_t k = n - fed < 777 ? n - fed : 777;
        size_t took = ratel__http_conn_feed(c, in + fed, k, 0);
        CHECK_EQ(took, k);
        if (took == 0)
            break;
        fed += took;
    }
    CHECK_EQ(ratel__http_conn_inflight(c), count);
    flush(NULL, 0);
    drain_output(c, out, &olen, sizeof out);
    CHECK_EQ(paths_in_order(out, olen, count), 0);
    CHECK(memmem(out, olen, "h:X-N=399\nbody=b399!", 20) != NULL);
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

/* How many responses ("HTTP/1.1 ") out holds. */
static int count_responses(const char *out, size_t len)
{
    const char *p = out, *end = out + len;
    int n = 0;
    while ((p = memmem(p, (size_t)(end - p), "HTTP/1.1 ", 9))) {
        n++;
        p += 9;
    }
    return n;
}

/* Every "path=/now/NNN" in out, in order, must count from 0 up to
   expected - 1. */
static int now_paths_in_order(const char *out, size_t len, int expected)
{
    const char *p = out, *end = out + len;
    int i = 0;
    while ((p = memmem(p, (size_t)(end - p), "path=/now/", 10))) {
        if (atoi(p + 10) != i++)
            return -1;
        p += 10;
    }
    return i == expected ? 0 : -1;
}

/*
 * A client pipelining 1,000 requests answered at once and reading none of
 * the answers: answers the socket has not taken count against
 * max_pipeline, so only max_pipeline are generated; then the connection
 * takes no bytes, parses nothing and its output stops growing, whatever
 * it is offered. Once the output is written, the next ones go.
 */
TEST(http_conn_unread_answers_bounded)
{
    static char in[64 << 10], out[1 << 20];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t n = 0, fed = 0, olen = 0, pending;
    const int count = 1000;
    int rounds = 0;

    lim.max_pipeline = 8;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    for (int i = 0; i < count; i++)
        n += (size_t)snprintf(in + n, sizeof in - n,
                              "GET /now/%03d HTTP/1.1\r\nHost: t\r\n\r\n", i);
    fed = ratel__http_conn_feed(c, in, n, 0);
    CHECK(fed < n);
    CHECK_EQ(atomic_load(&st.requests), 8);
    CHECK_EQ(ratel__http_conn_inflight(c), 0); /* answered, not sent */
    ratel__http_conn_output(c, &pending);
    CHECK(pending > 0);
    /* Offered more, processed again: nothing moves. */
    for (int i = 0; i < 5; i++) {
        size_t again;
        CHECK_EQ(ratel__http_conn_feed(c, in + fed, n - fed, 0), 0);
        ratel__http_conn_process(c, 0);
        CHECK(!ratel__http_conn_wants_read(c));
        CHECK(!ratel__http_conn_pending(c));
        ratel__http_conn_output(c, &again);
        CHECK_EQ(again, pending);
    }
    CHECK_EQ(atomic_load(&st.requests), 8);
    /* The client reads: 8 more answers at a time, then it reads on. */
    while (olen < sizeof out && rounds++ < 2 * count) {
        int before = atomic_load(&st.requests);
        drain_output(c, out, &olen, sizeof out);
        CHECK(ratel__http_conn_pending(c) || ratel__http_conn_wants_read(c));
        ratel__http_conn_process(c, 0);
        fed += ratel__http_conn_feed(c, in + fed, n - fed, 0);
        CHECK(atomic_load(&st.requests) - before <= 8);
        if (atomic_load(&st.requests) == count && fed == n) {
            drain_output(c, out, &olen, sizeof out);
            break;
        }
    }
    CHECK_EQ(fed, n);
    CHECK_EQ(count_responses(out, olen), count);
    CHECK_EQ(now_paths_in_order(out, olen, count), 0);
    CHECK(ratel__http_conn_wants_read(c));
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

/* Requests in flight and unsent answers share max_pipeline: with 4 of 8
   answered and unsent, only 4 more are dispatched. */
TEST(http_conn_inflight_and_unsent_share_pipeline)
{
    static char out[1 << 16];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    char in[4096];
    size_t n = 0, olen = 0;

    lim.max_pipeline = 8;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(in + n, sizeof in - n,
                              "GET /defer/%03d HTTP/1.1\r\nHost: t\r\n\r\n", i);
    ratel__http_conn_feed(c, in, n, 0);
    CHECK_EQ(ratel__http_conn_inflight(c), 8);
    flush(NULL, 0); /* 8 answers, none sent */
    ratel__http_conn_process(c, 0);
    CHECK_EQ(ratel__http_conn_inflight(c), 0);
    CHECK_EQ(atomic_load(&st.requests), 8);
    drain_output(c, out, &olen, sizeof out);
    ratel__http_conn_process(c, 0);
    CHECK_EQ(ratel__http_conn_inflight(c), 8);
    flush(NULL, 0);
    drain_output(c, out, &olen, sizeof out);
    ratel__http_conn_process(c, 0);
    CHECK_EQ(ratel__http_conn_inflight(c), 4);
    flush(NULL, 0);
    drain_output(c, out, &olen, sizeof out);
    CHECK_EQ(paths_in_order(out, olen, 20), 0);
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

/* A pipelined request with a `size`-byte body, answered with the echo
   (a little more than `size` bytes). */
static size_t post_of(char *buf, size_t cap, const char *path, size_t size)
{
    int n = snprintf(buf, cap,
                     "POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %zu"
                     "\r\n\r\n",
                     path, size);
    memset(buf + n, 'b', size);
    return (size_t)n + size;
}

/* Big answers: parsing stops while more than the high-water mark (16 KiB)
   waits unsent, far below max_pipeline answers. */
TEST(http_conn_output_high_water)
{
    static char in[1 << 20], out[1 << 20];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t n = 0, fed, olen = 0, pending, again;

    lim.max_pipeline = 1000;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    for (int i = 0; i < 50; i++)
        n += post_of(in + n, sizeof in - n, "/big", 6000);
    fed = ratel__http_conn_feed(c, in, n, 0);
    CHECK(fed < n);
    ratel__http_conn_output(c, &pending);
    /* The third 6 KB answer passes 16 KiB: no fourth. */
    CHECK_EQ(atomic_load(&st.requests), 3);
    CHECK(pending > 16384 && pending < 16384 + 7000);
    CHECK_EQ(ratel__http_conn_feed(c, in + fed, n - fed, 0), 0);
    ratel__http_conn_process(c, 0);
    ratel__http_conn_output(c, &again);
    CHECK_EQ(again, pending);
    for (int i = 0; i < 200 && fed < n; i++) {
        drain_output(c, out, &olen, sizeof out);
        ratel__http_conn_process(c, 0);
        fed += ratel__http_conn_feed(c, in + fed, n - fed, 0);
    }
    for (int i = 0; i < 50 && atomic_load(&st.requests) < 50; i++) {
        drain_output(c, out, &olen, sizeof out);
        ratel__http_conn_process(c, 0);
    }
    drain_output(c, out, &olen, sizeof out);
    CHECK_EQ(atomic_load(&st.requests), 50);
    CHECK_EQ(count_responses(out, olen), 50);
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
}

/* Answers to requests already in flight that pile up unsent past
   max_output_bytes close the connection; one answer alone bigger than the
   limit still goes. */
TEST(http_conn_output_cap)
{
    static char in[1 << 20];
    ratel_http_limits_t lim = {0};
    ratel__http_ctx_t ctx;
    ratel__http_conn_t *c;
    size_t n = 0, pending;
    char path[32];

    lim.max_output_bytes = 64 << 10;
    lim.max_body_bytes = 100000;
    REQUIRE((c = machine(&ctx, &lim)) != NULL);
    n = post_of(in, sizeof in, "/alone", 70000);
    CHECK_EQ(ratel__http_conn_feed(c, in, n, 0), n);
    ratel__http_conn_output(c, &pending);
    CHECK(pending > 70000);
    CHECK(!ratel__http_conn_aborted(c));
    ratel__http_conn_written(c, pending, 0);
    /* 20 deferred answers of 5 KB: 100 KB at the flush, none taken. */
    n = 0;
    for (int i = 0; i < 20; i++) {
        snprintf(path, sizeof path, "/defer/%03d", i);
        n += post_of(in + n, sizeof in - n, path, 5000);
    }
    CHECK_EQ(ratel__http_conn_feed(c, in, n, 0), n);
    CHECK_EQ(ratel__http_conn_inflight(c), 20);
    CHECK(!ratel__http_conn_aborted(c));
    flush(NULL, 0);
    CHECK(ratel__http_conn_aborted(c));
    CHECK(ratel__http_conn_finished(c));
    ratel__http_conn_output(c, &pending);
    CHECK_EQ(pending, 0);
    CHECK(!ratel__http_conn_wants_read(c));
    ratel__http_conn_close(c);
    CHECK(ctx.conns == NULL);
    CHECK(ctx.released_bytes > 64 << 10); /* the output went back */
    ratel__http_ctx_destroy(&ctx);
}

/* ---------------------------------------------------- a real server */

TEST(http_get_keep_alive)
{
    server_t s;
    client_t *c;
    response_t r;

    REQUIRE(start(&s, NULL) == 0);
    CHECK(s.port > 0);
    c = client(s.port);
    if (roundtrip(c, GET("/a/b?x=1&y=%20"), &r) == 0) {
        CHECK_EQ(r.status, 200);
        CHECK(!r.close);
        CHECK(strstr(r.head, "\r\nX-Test: yes\r\n") != NULL);
        CHECK(body_has(&r, "method=GET\npath=/a/b\nquery=x=1&y=%20\nminor=1\n"
                           "ka=1\nthread=0\nh:Host=t\nbody="));
    }
    /* The same connection, answered at once, then at the flush. */
    if (roundtrip(c, GET("/b"), &r) == 0)
        CHECK(body_has(&r, "path=/b\n"));
    if (roundtrip(c, GET("/defer/x"), &r) == 0)
        CHECK(r.status == 200 && body_has(&r, "path=/defer/x\n"));
    client_free(c);
    stop(&s);
    CHECK(atomic_load(&st.flushes) <= atomic_load(&st.requests));
}

TEST(http_version_rules)
{
    server_t s;
    client_t *c;
    response_t r;

    REQUIRE(start(&s, NULL) == 0);
    c = client(s.port);
    if (roundtrip(c, "GET /a HTTP/1.0\r\n\r\n", &r) == 0) {
        CHECK(r.close && body_has(&r, "minor=0\nka=0\n"));
        CHECK(client_closed(c));
    }
    client_free(c);
    c = client(s.port);
    if (roundtrip(c, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r) ==
        0)
        CHECK(!r.close &&
              strstr(r.head, "\r\nConnection: keep-alive\r\n") != NULL);
    if (roundtrip(c, "GET /b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                  &r) == 0) {
        CHECK(r.close && body_has(&r, "ka=0"));
        CHECK(client_closed(c));
    }
    client_free(c);
    stop(&s);
}

/*
 * 300 requests in one send, deferred ones (answered at the flush, newest
 * first) before and after immediate ones: more than the 8 KiB buffer and
 * the pipeline limit (64) hold; the answers come back in request order.
 */
TEST(http_pipelined_in_order)
{
    server_t s;
    client_t *c;
    response_t r;
    static char in[64 << 10];
    size_t n = 0;
    int ok = 0;

    REQUIRE(start(&s, NULL) == 0);
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(in + n, sizeof in - n,
                              "GET /%s/%03d HTTP/1.1\r\nHost: t\r\n\r\n",
                              i % 3 ? "defer" : "now", i);
    c = client(s.port);
    CHECK(c && client_send(c, in, n) == 0);
    for (int i = 0; c && i < 300; i++) {
        char want[32];
        snprintf(want, sizeof want, "/%03d\n", i);
        if (client_read(c, &r) == 0 && body_has(&r, want))
            ok++;
    }
    CHECK_EQ(ok, 300);
    client_free(c);
    stop(&s);
}

TEST(http_bodies)
{
    server_t s;
    client_t *c;
    response_t r;

    REQUIRE(start(&s, NULL) == 0);
    c = client(s.port);
    if (roundtrip(c,
                  "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: "
                  "11\r\n\r\nhello=world",
                  &r) == 0)
        CHECK(body_has(&r, "method=POST\n") &&
              body_has(&r, "body=hello=world"));
    if (roundtrip(c,
                  "POST /defer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n"
                  "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n",
                  &r) == 0)
        CHECK(body_has(&r, "body=hello world") && !body_has(&r, "h:T="));
    /* Expect: 100-continue: the interim answer, then the body. */
    CHECK(client_sends(c,
                       "PUT /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                       "Content-Length: 3\r\n\r\n") == 0);
    while (c->len < 25 && client_fill(c) > 0)
        ;
    CHECK(c->len >= 25 &&
          memcmp(c->buf, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0);
    if (roundtrip(c, "abc", &r) == 0)
        CHECK(body_has(&r, "method=PUT") && body_has(&r, "body=abc"));
    /* HEAD: the length, no body; the next response follows at once. */
    CHECK(client_sends(c, "HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n" GET("/g")) ==
          0);
    while (!memmem(c->buf, c->len, "path=/g", 7) && client_fill(c) > 0)
        ;
    {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        CHECK(end && strncmp(end + 4, "HTTP/1.1 200", 12) == 0);
        CHECK(memmem(c->buf, c->len, "path=/h", 7) == NULL);
    }
    client_free(c);
    stop(&s);
}

TEST(http_query_over_wire)
{
    server_t s;
    char body[64];

    REQUIRE(start(&s, NULL) == 0);
    CHECK_EQ(get_status(s.port, "/q?a=1&v=a+b%21", body, sizeof body), 200);
    CHECK(strcmp(body, "a b!") == 0);
    CHECK_EQ(get_status(s.port, "/q?x=1", body, sizeof body), 200);
    CHECK(strcmp(body, "ABSENT") == 0);
    CHECK_EQ(get_status(s.port, "/q?v=%zz", body, sizeof body), 400);
    CHECK_EQ(get_status(s.port, "/q?v=0123456789abcdefg", NULL, 0), 400);
    CHECK_EQ(get_status(s.port, "/status/429", NULL, 0), 429);
    stop(&s);
}

/* Sends `req` on a new connection: the error status, which must close. */
static int error_status(int port, const char *req, size_t len)
{
    client_t *c = client(port);
    response_t r;
    int status = -1;

    if (c && client_send(c, req, len) == 0 && client_read(c, &r) == 0) {
        status = r.status;
        if (!r.close || !client_closed(c))
            status = -2;
    }
    client_free(c);
    return status;
}

TEST(http_limits_errors)
{
    ratel_http_limits_t lim = {0};
    server_t s;
    static char big[8192];
    size_t n;
    client_t *c;
    response_t r;

    lim.max_header_bytes = 1024;
    lim.max_body_bytes = 1024;
    REQUIRE(start(&s, &lim) == 0);
    n = (size_t)snprintf(big, sizeof big,
                         "GET / HTTP/1.1\r\nHost: t\r\nX-Big: %02000d\r\n\r\n",
                         0);
    CHECK_EQ(error_status(s.port, big, n), 431);
    n = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < RATEL_HTTP_MAX_HEADERS + 1; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "H%d: v\r\n", i);
    n += (size_t)snprintf(big + n, sizeof big - n, "\r\n");
    CHECK_EQ(error_status(s.port, big, n), 431);
    n = (size_t)snprintf(
        big, sizeof big,
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
    CHECK_EQ(error_status(s.port, big, n), 413);
    n = (size_t)snprintf(
        big, sizeof big,
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "64\r\n%0100d\r\n", i);
    CHECK_EQ(error_status(s.port, big, n), 413);
    CHECK_EQ(error_status(s.port, "HELLO WORLD\r\n\r\n", 15), 400);
    CHECK_EQ(error_status(s.port, "GET / HTTP/2.0\r\n\r\n", 18), 505);
    /* A good request, then garbage: 200, then 400 and close. */
    c = client(s.port);
    CHECK(c && client_sends(c, GET("/defer/ok") "BAD\r\n\r\n" GET("/x")) == 0);
    CHECK(c && client_read(c, &r) == 0 && r.status == 200 && !r.close);
    CHECK(c && client_read(c, &r) == 0 && r.status == 400 && r.close);
    CHECK(c && client_closed(c));
    client_free(c);
    stop(&s);
}

TEST(http_byte_by_byte)
{
    static const char req[] = "POST /defer/b?q=1 HTTP/1.1\r\nHost: t\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    server_t s;
    client_t *c;
    response_t r;

    REQUIRE(start(&s, NULL) == 0);
    c = client(s.port);
    for (size_t i = 0; c && i < sizeof req - 1; i++)
        CHECK(client_send(c, req + i, 1) == 0);
    if (c && client_read(c, &r) == 0)
        CHECK(body_has(&r, "path=/defer/b\nquery=q=1\n") &&
              body_has(&r, "body=abcde"));
    else
        CHECK(!"no response");
    client_free(c);
    stop(&s);
}

TEST(http_timeouts_408_and_idle)
{
    ratel_http_limits_t lim = {0};
    server_t s;
    client_t *slow, *idle;
    response_t r;
    int64_t t0;

    lim.request_timeout_ms = 300;
    lim.idle_timeout_ms = 300;
    REQUIRE(start(&s, &lim) == 0);
    slow = client(s.port);
    idle = client(s.port);
    if (roundtrip(idle, GET("/a"), &r) == 0)
        CHECK(r.status == 200 && !r.close);
    /* Slowloris: a request never finished gets 408, then the close. */
    t0 = mono_ms();
    CHECK(slow &&
          client_sends(slow, "GET /x HTTP/1.1\r\nHost: t\r\nX-A: 1") == 0);
    CHECK(slow && client_read(slow, &r) == 0 && r.status == 408 && r.close);
    CHECK(mono_ms() - t0 >= 250 && mono_ms() - t0 < 3000);
    CHECK(slow && client_closed(slow));
    /* A keep-alive connection idle that long is closed. */
    CHECK(idle && client_closed(idle));
    CHECK(mono_ms() - t0 < 3000);
    client_free(slow);
    client_free(idle);
    stop(&s);
}

TEST(http_max_connections_503)
{
    ratel_http_limits_t lim = {0};
    server_t s;
    client_t *a, *b, *c;
    response_t r;

    lim.max_connections = 2;
    REQUIRE(start(&s, &lim) == 0);
    a = client(s.port);
    b = client(s.port);
    if (roundtrip(a, GET("/a"), &r) == 0)
        CHECK_EQ(r.status, 200);
    if (roundtrip(b, GET("/b"), &r) == 0)
        CHECK_EQ(r.status, 200);
    c = client(s.port);
    CHECK(c && client_read(c, &r) == 0 && r.status == 503 && r.close);
    client_free(c);
    client_free(a);
    client_free(b);
    stop(&s);
    /* The hook heard of the refusal once, after its 503, with the client's
       address; nothing else was refused. */
    CHECK_EQ(atomic_load(&st.refused[RATEL_HTTP_REFUSED_MAX_CONNECTIONS]), 1);
    CHECK_EQ(atomic_load(&st.refused[RATEL_HTTP_REFUSED_PER_CLIENT]), 0);
    CHECK(strcmp(st.refused_client, "127.0.0.1") == 0);
    CHECK(strcmp(ratel_http_refusal_name(RATEL_HTTP_REFUSED_PER_CLIENT),
                 "max_connections_per_client") == 0);
    CHECK(strcmp(ratel_http_refusal_name(RATEL_HTTP_REFUSALS), "unknown") == 0);
}

TEST(http_client_gone)
{
    server_t s;
    client_t *a, *b;
    response_t r;
    struct timespec ts = {0, 100000000};

    REQUIRE(start(&s, NULL) == 0);
    a = client(s.port);
    CHECK(a && client_sends(a, GET("/slow/a") GET("/slow/b")) == 0);
    CHECK(wait_for(&st.slow_held, 2) == 0);
    client_free(a);       /* gone while both are held */
    nanosleep(&ts, NULL); /* let the server see it */
    b = client(s.port);
    if (roundtrip(b, GET("/release"), &r) == 0) /* answers the dead ones */
        CHECK(r.status == 200 && body_has(&r, "path=/release"));
    if (roundtrip(b, GET("/after"), &r) == 0)
        CHECK_EQ(r.status, 200);
    client_free(b);
    stop(&s);
}

TEST(http_stop_drains)
{
    ratel_http_limits_t lim = {0};
    server_t s;
    client_t *a, *b;
    response_t r;
    int64_t t0;

    lim.max_pipeline = 1; /* b's /release waits behind its /slow */
    REQUIRE(start(&s, &lim) == 0);
    a = client(s.port);
    b = client(s.port);
    CHECK(a && client_sends(a, GET("/slow/a")) == 0);
    CHECK(b && client_sends(b, GET("/slow/b") GET("/release")) == 0);
    CHECK(wait_for(&st.slow_held, 2) == 0);
    t0 = mono_ms();
    ratel_http_server_stop(s.http, 4000);
    /* Draining dispatches the buffered /release, whose flush answers
       everything; each connection's last answer closes it. */
    CHECK(a && client_read(a, &r) == 0 && body_has(&r, "path=/slow/a") &&
          r.close);
    CHECK(b && client_read(b, &r) == 0 && body_has(&r, "path=/slow/b") &&
          !r.close);
    CHECK(b && client_read(b, &r) == 0 && body_has(&r, "path=/release") &&
          r.close);
    client_free(a);
    client_free(b);
    pthread_join(s.tid, NULL);
    CHECK(mono_ms() - t0 < 3000);
    CHECK(client(s.port) == NULL); /* no longer listening */
    ratel_http_server_free(s.http);
}

TEST(http_threads_and_ipv6)
{
    server_t s;
    int tries = 0;
    char body[512];

    REQUIRE(start_on(&s, "127.0.0.1:0", NULL, 2) == 0);
    while (tries++ < 200 && !(atomic_load(&st.seen_thread[0]) &&
                              atomic_load(&st.seen_thread[1])))
        CHECK_EQ(get_status(s.port, "/t", body, sizeof body), 200);
    CHECK(atomic_load(&st.seen_thread[0]) && atomic_load(&st.seen_thread[1]));
    stop(&s);
    REQUIRE(start_on(&s, ":0", NULL, 1) == 0);
    CHECK_EQ(get_status(s.port, "/any", NULL, 0), 200);
    stop(&s);
    if (start_on(&s, "[::1]:0", NULL, 2) == 0) {
        client_t *c = client_on(AF_INET6, s.port);
        response_t r;
        if (roundtrip(c, GET("/six"), &r) == 0)
            CHECK(body_has(&r, "path=/six"));
        client_free(c);
        stop(&s);
    }
}

/* A loopback port nobody listens on now (the kernel's choice). */
static int unused_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* One server per address: the threads of one share it (SO_REUSEPORT),
   a second server on it is refused with the address in the message,
   and once the first stops the address is free again. */
TEST(http_listen_once)
{
    ratel_http_options_t o;
    ratel_http_server_t *other = NULL;
    server_t s;
    char listen[64], want[128], err[256];
    int port = unused_port();

    REQUIRE(port > 0);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    REQUIRE(start_on(&s, listen, NULL, 2) == 0);
    CHECK_EQ(s.port, port);
    memset(&o, 0, sizeof o);
    o.handler = handler;
    o.listen = listen;
    err[0] = '\0';
    CHECK_EQ(ratel_http_server_new(&other, &o, err, sizeof err), -1);
    CHECK(other == NULL);
    snprintf(want, sizeof want, "listen %s: already served by another process",
             listen);
    CHECK(strcmp(err, want) == 0);
    /* The same address spelled otherwise, and all addresses. */
    snprintf(listen, sizeof listen, ":%d", port);
    CHECK_EQ(ratel_http_server_new(&other, &o, err, sizeof err), -1);
    CHECK(strstr(err, "already served by another process") != NULL);
    CHECK_EQ(get_status(s.port, "/still", NULL, 0), 200);
    stop(&s);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    CHECK_EQ(ratel_http_server_new(&other, &o, err, sizeof err), 0);
    ratel_http_server_free(other);
}

RATEL_SUITE(http) = {
    {"http_reason_phrases", test_http_reason_phrases},
    {"http_header_lookup", test_http_header_lookup},
    {"http_query_param", test_http_query_param},
    {"http_listen_parse", test_http_listen_parse},
    {"http_listen_errors", test_http_listen_errors},
    {"http_conn_pipeline_limit", test_http_conn_pipeline_limit},
    {"http_conn_exchange_abandoned", test_http_conn_exchange_abandoned},
    {"http_conn_buffer_moves", test_http_conn_buffer_moves},
    {"http_conn_unread_answers_bounded", test_http_conn_unread_answers_bounded},
    {"http_conn_inflight_and_unsent_share_pipeline",
     test_http_conn_inflight_and_unsent_share_pipeline},
    {"http_conn_output_high_water", test_http_conn_output_high_water},
    {"http_conn_output_cap", test_http_conn_output_cap},
    {"http_get_keep_alive", test_http_get_keep_alive},
    {"http_version_rules", test_http_version_rules},
    {"http_pipelined_in_order", test_http_pipelined_in_order},
    {"http_bodies", test_http_bodies},
    {"http_query_over_wire", test_http_query_over_wire},
    {"http_limits_errors", test_http_limits_errors},
    {"http_byte_by_byte", test_http_byte_by_byte},
    {"http_timeouts_408_and_idle", test_http_timeouts_408_and_idle},
    {"http_max_connections_503", test_http_max_connections_503},
    {"http_client_gone", test_http_client_gone},
    {"http_stop_drains", test_http_stop_drains},
    {"http_threads_and_ipv6", test_http_threads_and_ipv6},
    {"http_listen_once", test_http_listen_once},
    {0, 0},
};
