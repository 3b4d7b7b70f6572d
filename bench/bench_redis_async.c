/*
 * bench_redis_async.c - decisions per second from ONE calling thread
 * through the Redis store, one call per decision (no caller batching).
 *
 *   build/bench_redis_async URL async|sync [SECONDS] [WINDOW]
 *
 * async: one libevent event_base; ratel_async_acquire() once per decision,
 *        WINDOW decisions in flight (default 256): each callback issues the
 *        next, so the store's automatic pipelining is all that groups them.
 * sync:  ratel_store_acquire() in a loop: one round trip per decision.
 *
 * The URL says the server, TLS and mode (e.g. redis://127.0.0.1:PORT
 * ?mode=function, rediss://...?tls_ca_file=ca.crt&mode=function). Like the
 * peer (rate-limiter-flexible's Redis limiter: points 1e9 per 60 s, keys
 * "k0".."k999" round robin) the rule is 1000000000/1m:fixed, never
 * denying, on 1,000 keys round robin. After 0.3 s of warm-up (connections,
 * FUNCTION LOAD), it prints one number on stdout: the decisions per second
 * completed over SECONDS (default 3). bench/redis_engine.sh runs it in
 * interleaved rounds. Every answer is checked (allowed, from the store);
 * a wrong one stops it with an error and exit status 1.
 */
#include "ratel.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEYS 1000
#define MAX_WINDOW 65536

static char keys[KEYS][16];
static size_t keylens[KEYS];
static ratel_policy_t policy;
static const ratel_request_t request = RATEL_REQUEST_INIT;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_redis_async: %s: %s\n", what, ratel_strerror(rc));
    exit(1);
}

static void check(int rc, const ratel_decision_t *d)
{
    if (rc != 0)
        die("acquire", rc);
    if (!d->allowed || d->source != RATEL_SOURCE_STORE)
        die("a decision not allowed by the store", RATEL_EPROTO);
}

/* One measured phase of the asynchronous loop. */
typedef struct loop_s {
    struct event_base *base;
    ratel_async_t *async;
    size_t next;  /* the next key, round robin */
    int inflight; /* issued, not yet answered */
    double end;   /* issue nothing after this instant */
    double last;  /* when the last answer came */
    unsigned long done;
} loop_t;

static void issue(loop_t *l);

static void decided(void *ud, int rc, const ratel_decision_t *d)
{
    loop_t *l = ud;

    check(rc, d);
    l->inflight--;
    l->done++;
    l->last = now_s();
    if (l->last < l->end)
        issue(l);
    else if (l->inflight == 0)
        event_base_loopbreak(l->base);
}

static void issue(loop_t *l)
{
    size_t k = l->next++ % KEYS;
    int rc = ratel_async_acquire(l->async, keys[k], keylens[k], &policy,
                                 ratel_clock_now_us(), &request, decided, l);
    if (rc != 0)
        die("ratel_async_acquire", rc);
    l->inflight++;
}

/* Runs WINDOW decisions in flight for `seconds`: decisions per second. */
static double run_async(loop_t *l, int window, double seconds)
{
    double t0 = now_s();

    l->end = t0 + seconds;
    l->done = 0;
    l->last = t0;
    for (int i = 0; i < window; i++)
        issue(l);
    if (event_base_dispatch(l->base) < 0)
        die("event_base_dispatch", RATEL_EIO);
    return (double)l->done / (l->last - t0);
}

static double bench_async(ratel_store_t *store, int window, double seconds)
{
    loop_t l = {0};
    char err[256];
    double rate;
    int rc;

    l.base = event_base_new();
    if (!l.base)
        die("event_base_new", RATEL_ENOMEM);
    rc = ratel_async_new(&l.async, store, l.base, err, sizeof err);
    if (rc != 0)
        die(err, rc);
    run_async(&l, window, 0.3);
    rate = run_async(&l, window, seconds);
    ratel_async_free(l.async);
    event_base_free(l.base);
    return rate;
}

static double run_sync(ratel_store_t *store, double seconds)
{
    double t0 = now_s(), end = t0 + seconds, t = t0;
    unsigned long done = 0;
    size_t k = 0;

    while (t < end) {
        ratel_decision_t d;
        int rc = ratel_store_acquire(store, keys[k], keylens[k], &policy,
                                     ratel_clock_now_us(), &request, &d);
        check(rc, &d);
        k = (k + 1) % KEYS;
        done++;
        t = now_s();
    }
    return (double)done / (t - t0);
}

int main(int argc, char **argv)
{
    const char *rule = "1000000000/1m:fixed";
    double seconds = argc > 3 ? atof(argv[3]) : 3.0, rate;
    int window = argc > 4 ? atoi(argv[4]) : 256;
    ratel_redis_options_t o = {0};
    ratel_store_t *store;
    char err[400];
    int rc;

    if (argc < 3 || (strcmp(argv[2], "async") && strcmp(argv[2], "sync")) ||
        seconds <= 0 || window < 1 || window > MAX_WINDOW) {
        fprintf(stderr, "usage: bench_redis_async URL async|sync [SECONDS > "
                        "0] [WINDOW 1..65536]\n");
        return 2;
    }
    for (int i = 0; i < KEYS; i++)
        keylens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "ak%d", i);
    rc = ratel_policy_parse(&policy, &rule, 1, err, sizeof err);
    if (rc != 0)
        die(err, rc);
    o.url = argv[1];
    o.deny_cache_entries = -1;
    o.on_failure = RATEL_FAILURE_CLOSED;
    rc = ratel_store_redis_new(&store, &o, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bench_redis_async: %s\n", err);
        return 1;
    }
    if (strcmp(argv[2], "async") == 0) {
        rate = bench_async(store, window, seconds);
    } else {
        run_sync(store, 0.3);
        rate = run_sync(store, seconds);
    }
    ratel_store_free(store);
    printf("%.0f\n", rate);
    return 0;
}
