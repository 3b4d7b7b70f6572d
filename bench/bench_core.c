/*
 * bench_core.c - nanoseconds per decision in the pure core, and bytes of
 * state per key and per event. Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT"
 * lines on stdout (bench/run.sh collects them); progress goes to stderr.
 *
 * Every loop counts what it admitted and prints the count, so the compiler
 * cannot drop the work. Time is injected: now advances 1 us per decision.
 * Figures are the median of 5 runs.
 */
#include "ratel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5

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

static void parse_or_die(ratel_policy_t *p, const char *const *rules, size_t n)
{
    char err[256];
    if (ratel_policy_parse(p, rules, n, err, sizeof err) != 0) {
        fprintf(stderr, "bench_core: %s\n", err);
        exit(1);
    }
}

/*
 * Median ns per decision of `policy` on one key, `n` decisions per run,
 * `step_us` between decisions.
 */
static double ns_per_decision(const ratel_policy_t *policy, long n,
                              int64_t step_us)
{
    static uint8_t buf[32768];
    double ns[RUNS];
    long admitted = 0;
    ratel_request_t req = RATEL_REQUEST_INIT;

    for (int r = 0; r < RUNS; r++) {
        size_t len = 0;
        int64_t now = 1700000000000000LL;
        ratel_decision_t d;
        double t0;
        /* Warm the state up to its steady shape first. */
        for (long i = 0; i < n / 10; i++, now += step_us)
            ratel_policy_acquire(policy, buf, &len, sizeof buf, now, &req, &d);
        t0 = seconds();
        for (long i = 0; i < n; i++, now += step_us) {
            if (ratel_policy_acquire(policy, buf, &len, sizeof buf, now, &req,
                                     &d) != 0)
                abort();
            admitted += d.allowed;
        }
        ns[r] = (seconds() - t0) * 1e9 / (double)n;
    }
    fprintf(stderr, "  (admitted %ld)\n", admitted);
    qsort(ns, RUNS, sizeof ns[0], cmp_double);
    return ns[RUNS / 2];
}

/* Blob bytes of a key after `events` requests `gap_ms` apart. */
static size_t state_bytes(const ratel_policy_t *policy, long events,
                          int64_t gap_ms)
{
    static uint8_t buf[32768];
    size_t len = 0;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    int64_t now = 1700000000000000LL;
    for (long i = 0; i < events; i++, now += gap_ms * 1000)
        if (ratel_policy_acquire(policy, buf, &len, sizeof buf, now, &req,
                                 &d) != 0 ||
            !d.allowed)
            abort();
    return len;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        const char *rules[3];
        size_t n;
    } cases[] = {
        {"sliding", {"1000000000/1m"}, 1},
        {"fixed", {"1000000000/1m:fixed"}, 1},
        {"approx", {"1000000000/1m:approx"}, 1},
        {"gcra", {"1000000000/1m:gcra"}, 1},
        {"two-sliding-rules", {"100000000/1m", "1000000000/1h"}, 2},
    };
    long n = argc > 1 ? atol(argv[1]) : 2000000;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_policy_t p;
        parse_or_die(&p, cases[i].rules, cases[i].n);
        fprintf(stderr, "core %s...\n", cases[i].name);
        /* 1 us apart: sliding keys hold a full window of distinct
           milliseconds, coarsened to the cap: the worst steady case. */
        printf("ratel\tcore-ns-per-decision-%s\t%.1f\tns\n", cases[i].name,
               ns_per_decision(&p, n, 1));
        if (cases[i].n == 1)
            printf("ratel\tcore-state-bytes-%s\t%zu\tbytes\n", cases[i].name,
                   state_bytes(&p, 1, 1));
    }
    {
        /* 1,000 events at distinct milliseconds, all in one window. */
        static const char *const rules[] = {"1000/1h"};
        ratel_policy_t p;
        size_t bytes;
        parse_or_die(&p, rules, 1);
        bytes = state_bytes(&p, 1000, 1);
        printf("ratel\tcore-sliding-bytes-1000-events\t%zu\tbytes\n", bytes);
        printf("ratel\tcore-sliding-bytes-per-event-at-1000\t%.2f\tbytes\n",
               (double)bytes / 1000.0);
    }
    return 0;
}
