/*
 * bench_http.c - the HTTP server shaped like rateld, for wrk.
 *
 *   bench_http PORT [THREADS]     (PORT 0: any free port; printed)
 *
 * Every request is deferred to the flush hook, as rateld does to decide a
 * pass's requests in one batch, and answered there with 200, two
 * RateLimit headers and a ~60-byte JSON body. Runs until SIGINT or
 * SIGTERM. Compare with nginx limit_req in the same minute:
 *
 *   bench_http 8091 & wrk -t1 -c50 -d5s \
 *       'http://127.0.0.1:8091/v1/acquire?policy=ping&key=1.2.3.4'
 *   /work/shared/peers/run-peers.sh nginx 8092
 *
 * It also answers a gateway's /v1/auth at once, without deciding (the
 * trivial responder bench/gateway.sh puts behind nginx and Caddy).
 *
 * Links with the HTTP library:
 *   cc -Iinclude -Isrc -O2 bench/bench_http.c build/libratel_http.a \
 *      -levent -lhttp_parser -pthread
 */
#include "http/http.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
#define BATCH 4096

typedef struct pending_s {
    ratel_http_exchange_t *ex[BATCH];
    size_t n;
    unsigned long answered, bad;
} pending_t;

static pending_t *pending;
static ratel_http_server_t *server;

static void on_signal(int sig)
{
    (void)sig;
    ratel_http_server_stop(server, 1000);
}

static void answer(ratel_http_exchange_t *ex, int ok)
{
    static const char body[] = "{\"allowed\":true,\"limit\":1000000,"
                               "\"remaining\":999999,\"retry_after_ms\":0}";
#define S(text)                                                                \
    {                                                                          \
        text, sizeof text - 1                                                  \
    }
    static const ratel_http_header_t headers[] = {
        {S("RateLimit-Policy"), S("1000000;w=1")},
        {S("RateLimit"), S("limit=1000000, remaining=999999, reset=1")},
    };
#undef S
    if (ok)
        ratel_http_respond(ex, 200, headers, 2, body, sizeof body - 1);
    else
        ratel_http_respond(ex, 400, NULL, 0, "bad request\n", 12);
}

/*
 * A gateway's auth request (/v1/auth): the trivial responder of
 * bench/gateway.sh, the protocol's ceiling. No decision, no batching: an
 * answer at once with the same fields (and, refusing with 429, the same
 * size of JSON body) rateld sends for bench/gateway.sh's policies, so
 * that the gateway does the same work for both and the ratio measures
 * rateld. 200, or, when the original URI (X-Original-URI or
 * X-Forwarded-Uri) starts with /deny, DENY_STATUS (429 by default; 403
 * for nginx, without a body as rateld does).
 */
static void answer_auth(ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req)
{
#define S(text)                                                                \
    {                                                                          \
        text, sizeof text - 1                                                  \
    }
    static const ratel_http_header_t allow[] = {
        {S("RateLimit-Policy"), S("\"allow-0\";q=1000000000;w=60")},
        {S("RateLimit"), S("\"allow-0\";r=999999999;t=60")},
    };
    static const ratel_http_header_t deny[] = {
        {S("Content-Type"), S("application/json")},
        {S("RateLimit-Policy"), S("\"deny-0\";q=1;w=3600")},
        {S("RateLimit"), S("\"deny-0\";r=0;t=3600")},
        {S("Retry-After"), S("3600")},
        {S("X-Ratel-Reason"), S("rate-limited")},
    };
#undef S
    static const char body[] =
        "{\"allowed\":false,\"policy\":\"deny\",\"limit\":1,"
        "\"remaining\":0,\"retry_after_ms\":3599000,\"reset_after_ms\":"
        "3599000,\"rule\":0,\"wait_ms\":0,\"source\":\"store\"}\n";
    static int deny_status;
    const ratel_http_str_t *uri = ratel_http_header(req, "X-Original-URI");

    if (!deny_status) {
        const char *e = getenv("DENY_STATUS");
        deny_status = e && atoi(e) == 403 ? 403 : 429;
    }
    if (!uri)
        uri = ratel_http_header(req, "X-Forwarded-Uri");
    if (!uri || uri->n < 5 || memcmp(uri->p, "/deny", 5) != 0)
        ratel_http_respond(ex, 200, allow, 2, NULL, 0);
    else if (deny_status == 403)
        ratel_http_respond(ex, 403, deny + 1, 4, NULL, 0);
    else
        ratel_http_respond(ex, 429, deny, 5, body, sizeof body - 1);
}

/* Reads the parameters rateld would read, then waits for the flush. */
static void handler(void *ud, ratel_http_exchange_t *ex,
                    const ratel_http_request_t *req)
{
    pending_t *p = &((pending_t *)ud)[req->thread];
    char policy[64], key[256];
    int ok;

    if (req->path.n == 8 && memcmp(req->path.p, "/v1/auth", 8) == 0) {
        answer_auth(ex, req);
        return;
    }
    ok = ratel_http_query_param(req->query, "policy", policy, sizeof policy) >
             0 &&
         ratel_http_query_param(req->query, "key", key, sizeof key) > 0;

    if (!ok)
        p->bad++;
    if (p->n == BATCH || !ok) {
        answer(ex, ok);
        return;
    }
    p->ex[p->n++] = ex;
}

static void flush(void *ud, unsigned thread)
{
    pending_t *p = &((pending_t *)ud)[thread];

    for (size_t i = 0; i < p->n; i++)
        answer(p->ex[i], 1);
    p->answered += p->n;
    p->n = 0;
}

int main(int argc, char **argv)
{
    ratel_http_options_t o;
    char listen[64], err[256];
    unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    unsigned long answered = 0, bad = 0;
    struct sigaction sa;

    if (argc < 2 || threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "usage: bench_http PORT [THREADS]\n");
        return 2;
    }
    pending = calloc(threads, sizeof *pending);
    if (!pending)
        return 1;
    snprintf(listen, sizeof listen, "127.0.0.1:%s", argv[1]);
    memset(&o, 0, sizeof o);
    o.listen = listen;
    o.threads = threads;
    o.handler = handler;
    o.flush = flush;
    o.ud = pending;
    if (ratel_http_server_new(&server, &o, err, sizeof err) != 0) {
        fprintf(stderr, "bench_http: %s\n", err);
        return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("bench_http: listening on 127.0.0.1:%d, %u thread(s)\n",
           ratel_http_server_port(server), threads);
    fflush(stdout);
    ratel_http_server_run(server);
    for (unsigned i = 0; i < threads; i++) {
        answered += pending[i].answered;
        bad += pending[i].bad;
    }
    printf("bench_http: %lu requests answered at flush, %lu malformed\n",
           answered, bad);
    ratel_http_server_free(server);
    free(pending);
    return bad ? 1 : 0;
}
