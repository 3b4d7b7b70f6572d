/*
 * bench_redis_store.c - decisions per second through the Redis store, from
 * one process, against a redis-server with the ratel module loaded.
 *
 *   build/bench_redis_store PORT [SECONDS [PATTERN...]]
 *
 * With PATTERNs (fnmatch(3) globs, e.g. 'redis_store_function_*_batch100'),
 * only the figures whose names match one are measured. Prints
 * "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines on stdout (bench/run.sh collects
 * them); progress and checks go to stderr. Each figure is the median of 3 runs
 * of SECONDS (default 1) each.
 *
 * Like the peer (rate-limiter-flexible's Redis bench: points 1e9 per 60 s,
 * keys "k0".."k999" round robin), every rule is 1000000000/1m, never
 * denying: `fixed` (the peer's own algorithm) and `sliding`. Cases:
 *
 *   one          one thread, one request per call: a round trip each
 *   batch100     one thread, ratel_store_acquire_batch of 100 requests
 *   batch100_2t  two threads doing that: one batch is written while the
 *                other's replies are read
 *   threads8     8 threads calling ratel_store_acquire concurrently: their
 *                requests share pipelines (pool of 4 connections)
 *
 * each with the module (RATEL.ACQUIRE), the Lua Functions library
 * (mode=function, FCALL) and the Lua EVAL script (mode=lua, EVALSHA),
 * and the deny cache: 1,000 keys denied by `1/1h`, answered locally, on 1
 * and 2 threads. Every loop checks its answers (allowed, or denied from the
 * cache) and stops with an error if one is wrong.
 */
#include "ratel.h"

#include <fnmatch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 3
#define KEYS 1000

static double run_seconds = 1.0;
static char **patterns;
static int npatterns;

/* Whether figure `name` is wanted: every one without patterns. */
static int wanted(const char *name)
{
    for (int i = 0; i < npatterns; i++)
        if (fnmatch(patterns[i], name, 0) == 0)
            return 1;
    return npatterns == 0;
}

static double now_s(void)
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

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_redis_store: %s: %s\n", what, ratel_strerror(rc));
    exit(1);
}

typedef struct job_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    int thread, threads, batch;
    int want_allowed; /* 1: every answer allowed; 0: every answer cached */
    double seconds;
    uint64_t done;
} job_t;

static char keys[KEYS][16];
static size_t keylens[KEYS];

static void *worker(void *arg)
{
    job_t *j = arg;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_batch_item_t items[100];
    double end = now_s() + j->seconds;
    size_t k = (size_t)j->thread;
    uint64_t done = 0;

    while (now_s() < end) {
        for (int rep = 0; rep < 64; rep++) {
            int64_t now = ratel_clock_now_us();
            if (j->batch > 1) {
                for (int i = 0; i < j->batch; i++) {
                    items[i].key = keys[k % KEYS];
                    items[i].keylen = keylens[k % KEYS];
                    items[i].policy = j->policy;
                    items[i].request = req;
                    k += (size_t)j->threads;
                }
                int rc = ratel_store_acquire_batch(j->store, items,
                                                   (size_t)j->batch, now);
                if (rc != 0)
                    die("batch", rc);
                for (int i = 0; i < j->batch; i++) {
                    if (items[i].rc != 0)
                        die("batch item", items[i].rc);
                    if (items[i].decision.allowed != j->want_allowed ||
                        items[i].decision.source != RATEL_SOURCE_STORE) {
                        /* Not the store's (its source says whose: a
                           timeout on a busy machine makes it the
                           failure policy's). */
                        fprintf(stderr, "item %d: allowed %d, source %d\n", i,
                                items[i].decision.allowed,
                                (int)items[i].decision.source);
                        die("unexpected batch decision", RATEL_EPROTO);
                    }
                }
                done += (uint64_t)j->batch;
            } else {
                ratel_decision_t d;
                int rc = ratel_store_acquire(j->store, keys[k % KEYS],
                                             keylens[k % KEYS], j->policy, now,
                                             &req, &d);
                k += (size_t)j->threads;
                if (rc != 0)
                    die("acquire", rc);
                if (d.allowed != j->want_allowed ||
                    d.source != (j->want_allowed ? RATEL_SOURCE_STORE
                                                 : RATEL_SOURCE_CACHE))
                    die("unexpected decision", RATEL_EPROTO);
                done++;
            }
        }
    }
    j->done = done;
    return NULL;
}

/* Decisions per second of `threads` workers, median of RUNS. */
static double measure(ratel_store_t *store, const ratel_policy_t *policy,
                      int threads, int batch, int want_allowed)
{
    double rates[RUNS];

    for (int r = 0; r < RUNS; r++) {
        pthread_t tid[8];
        job_t jobs[8];
        uint64_t total = 0;
        double t0 = now_s(), dt;
        for (int t = 0; t < threads; t++) {
            jobs[t] = (job_t){store, policy,       t,           threads,
                              batch, want_allowed, run_seconds, 0};
            pthread_create(&tid[t], NULL, worker, &jobs[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            total += jobs[t].done;
        }
        dt = now_s() - t0;
        rates[r] = (double)total / dt;
        /* On stderr, for a server's time per decision (INFO
           commandstats' usec over this count). */
        fprintf(stderr, "decisions\t%llu\n", (unsigned long long)total);
    }
    qsort(rates, RUNS, sizeof rates[0], cmp_double);
    return rates[RUNS / 2];
}

static ratel_store_t *open_store(const char *url, ratel_redis_mode_t mode,
                                 long deny_cache)
{
    /* Timeouts of 5 s, not 250 ms: on a busy shared machine a pipeline
       can wait that long for a core, and the check of every answer would
       stop the run on the failure policy's. */
    ratel_redis_options_t o = {.url = url,
                               .mode = mode,
                               .deny_cache_entries = deny_cache,
                               .connect_timeout_ms = 5000,
                               .command_timeout_ms = 5000,
                               .on_failure = RATEL_FAILURE_CLOSED};
    ratel_store_t *s;
    char err[400];
    int rc = ratel_store_redis_new(&s, &o, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "bench_redis_store: %s\n", err);
        exit(1);
    }
    return s;
}

static void print_rate(const char *name, double rate)
{
    printf("ratel\t%s\t%.0f\tdecisions/s\n", name, rate);
    fflush(stdout);
}

static const char *const algos[] = {"fixed", "sliding"};
static const struct {
    const char *name;
    int threads, batch;
} cases[] = {{"one", 1, 1},
             {"batch100", 1, 100},
             {"batch100_2t", 2, 100},
             {"threads8", 8, 1}};
#define NCASES (sizeof cases / sizeof cases[0])

static void case_name(char *buf, size_t len, const char *mode, size_t a,
                      size_t c)
{
    snprintf(buf, len, "redis_store_%s_%s_%s", mode, algos[a], cases[c].name);
}

/* Whether any case of `mode` is wanted (its store is opened only then). */
static int mode_wanted(const char *mode)
{
    char name[96];

    for (size_t a = 0; a < 2; a++)
        for (size_t c = 0; c < NCASES; c++) {
            case_name(name, sizeof name, mode, a, c);
            if (wanted(name))
                return 1;
        }
    return 0;
}

/* The wanted cases of one mode: both algorithms, every case. */
static void bench_mode(const char *url, ratel_redis_mode_t mode,
                       const char *mode_name)
{
    ratel_store_t *store;

    if (!mode_wanted(mode_name))
        return;
    store = open_store(url, mode, -1);
    for (size_t a = 0; a < 2; a++) {
        char rule[64], name[96];
        const char *text = rule;
        ratel_policy_t policy;
        char err[256];
        int rc;
        snprintf(rule, sizeof rule, "1000000000/1m:%s", algos[a]);
        rc = ratel_policy_parse(&policy, &text, 1, err, sizeof err);
        if (rc != 0)
            die(err, rc);
        for (size_t c = 0; c < NCASES; c++) {
            case_name(name, sizeof name, mode_name, a, c);
            if (!wanted(name))
                continue;
            fprintf(stderr, "%s...\n", name);
            print_rate(name, measure(store, &policy, cases[c].threads,
                                     cases[c].batch, 1));
        }
    }
    ratel_store_free(store);
}

/* The deny cache: every key denied once by Redis, then answered here. */
static void bench_deny_cache(const char *url)
{
    ratel_store_t *store;
    const char *text = "1/1h";
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_policy_t policy;
    char err[256];
    int rc;

    if (!wanted("redis_store_deny_cache_hits_1t") &&
        !wanted("redis_store_deny_cache_hits_2t"))
        return;
    store = open_store(url, RATEL_REDIS_MODULE, 65536);
    rc = ratel_policy_parse(&policy, &text, 1, err, sizeof err);
    if (rc != 0)
        die(err, rc);
    for (int i = 0; i < KEYS; i++)
        keylens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "dk%d", i);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < KEYS; i++) {
            ratel_decision_t d;
            rc = ratel_store_acquire(store, keys[i], keylens[i], &policy,
                                     ratel_clock_now_us(), &req, &d);
            if (rc != 0)
                die("deny cache setup", rc);
        }
    }
    if (wanted("redis_store_deny_cache_hits_1t"))
        print_rate("redis_store_deny_cache_hits_1t",
                   measure(store, &policy, 1, 1, 0));
    if (wanted("redis_store_deny_cache_hits_2t"))
        print_rate("redis_store_deny_cache_hits_2t",
                   measure(store, &policy, 2, 1, 0));
    for (int i = 0; i < KEYS; i++)
        ratel_store_reset(store, keys[i], keylens[i]);
    ratel_store_free(store);
}

int main(int argc, char **argv)
{
    static const struct {
        ratel_redis_mode_t mode;
        const char *name;
    } modes[] = {{RATEL_REDIS_MODULE, "module"},
                 {RATEL_REDIS_FUNCTION, "function"},
                 {RATEL_REDIS_LUA, "lua"}};
    char url[64];

    if (argc < 2) {
        fprintf(stderr,
                "usage: bench_redis_store PORT [SECONDS [PATTERN...]]\n");
        return 2;
    }
    if (argc > 2)
        run_seconds = atof(argv[2]);
    patterns = argv + 3;
    npatterns = argc > 3 ? argc - 3 : 0;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", atoi(argv[1]));
    for (int i = 0; i < KEYS; i++)
        keylens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "bk%d", i);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        bench_mode(url, modes[m].mode, modes[m].name);
    bench_deny_cache(url);
    return 0;
}
