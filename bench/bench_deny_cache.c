/*
 * bench_deny_cache.c - hits per second of the Redis store's local deny
 * cache (lib/store/deny_cache.c) on a hot set of 1,000 denied keys, on one
 * thread and on two. Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines on
 * stdout like bench_core; progress goes to stderr.
 *
 *   build/bench_deny_cache [lookups per thread per run]
 *
 * Every lookup must hit and return the key's own recorded limit; the loop
 * counts and checks them (and aborts otherwise), so the compiler cannot
 * drop the work. Time is injected: now advances 1 us per lookup, far
 * inside the denials' hour. Figures are the median of 5 runs.
 */
#include "ratel.h"
#include "store/deny_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5
#define HOT_KEYS 1000
#define T0 ((int64_t)1700000000 * 1000000)

typedef struct hot_key_s {
    char bytes[24];
    size_t len;
} hot_key_t;

static hot_key_t keys[HOT_KEYS];
static uint64_t fingerprint;

typedef struct worker_s {
    ratel_deny_cache_t *cache;
    pthread_barrier_t *start;
    long lookups;
    unsigned first; /* key to start at: threads walk the keys out of step */
    long hits;
} worker_t;

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Looks the hot keys up round robin; counts hits carrying the right key. */
static void *lookup_loop(void *p)
{
    worker_t *w = p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    int64_t now = T0;
    unsigned k = w->first;
    long hits = 0;

    if (w->start)
        pthread_barrier_wait(w->start);
    for (long i = 0; i < w->lookups; i++, now++) {
        ratel_decision_t d;
        if (ratel__deny_cache_get(w->cache, keys[k].bytes, keys[k].len,
                                  fingerprint, &req, now, &d) &&
            d.limit == (int64_t)k)
            hits++;
        if (++k == HOT_KEYS)
            k = 0;
    }
    w->hits = hits;
    return NULL;
}

/* Median hits per second of `threads` threads doing `n` lookups each. */
static double hits_per_second(ratel_deny_cache_t *cache, int threads, long n)
{
    double rate[RUNS];

    for (int r = 0; r < RUNS; r++) {
        pthread_barrier_t start;
        pthread_t tid[2];
        worker_t w[2];
        double t0, elapsed;
        long hits = 0;

        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        for (int t = 0; t < threads; t++) {
            w[t] = (worker_t){cache, &start, n, (unsigned)t * HOT_KEYS / 2, 0};
            if (pthread_create(&tid[t], NULL, lookup_loop, &w[t]) != 0)
                abort();
        }
        pthread_barrier_wait(&start);
        t0 = seconds();
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            hits += w[t].hits;
        }
        elapsed = seconds() - t0;
        pthread_barrier_destroy(&start);
        if (hits != (long)threads * n) {
            fprintf(stderr, "bench_deny_cache: %ld hits of %ld lookups\n", hits,
                    (long)threads * n);
            abort();
        }
        rate[r] = (double)hits / elapsed;
    }
    qsort(rate, RUNS, sizeof rate[0], cmp_double);
    return rate[RUNS / 2];
}

int main(int argc, char **argv)
{
    static const char *const rules[] = {"10/1h"};
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    ratel_deny_cache_t *cache;
    ratel_policy_t policy;
    ratel_request_t req = RATEL_REQUEST_INIT;
    char err[256];
    double one, two;

    if (n < 1 || ratel_policy_parse(&policy, rules, 1, err, sizeof err) != 0 ||
        ratel__deny_cache_new(&cache, 65536, 3600000) != 0) {
        fprintf(stderr, "bench_deny_cache: setup failed\n");
        return 1;
    }
    fingerprint = ratel__policy_fingerprint(&policy);
    for (unsigned k = 0; k < HOT_KEYS; k++) {
        ratel_decision_t d = {.limit = (int64_t)k,
                              .retry_after_ms = 3600000,
                              .reset_after_ms = 3600000};
        int len = snprintf(keys[k].bytes, sizeof keys[k].bytes,
                           "login:10.0.%u.%u", k / 256, k % 256);
        keys[k].len = (size_t)len;
        ratel__deny_cache_put(cache, keys[k].bytes, keys[k].len, fingerprint,
                              &req, &d, T0);
    }

    fprintf(stderr, "deny cache, 1 thread...\n");
    one = hits_per_second(cache, 1, n);
    printf("ratel\tdeny-cache-hits-per-s-1-thread\t%.0f\thits/s\n", one);
    printf("ratel\tdeny-cache-ns-per-hit-1-thread\t%.1f\tns\n", 1e9 / one);
    fprintf(stderr, "deny cache, 2 threads...\n");
    two = hits_per_second(cache, 2, n);
    printf("ratel\tdeny-cache-hits-per-s-2-threads\t%.0f\thits/s\n", two);
    printf("ratel\tdeny-cache-2-threads-vs-1\t%.2f\tx\n", two / one);
    ratel__deny_cache_free(cache);
    return 0;
}
