/*
 * cluster_sync URL RATE SECONDS KEY... - the library's synchronous API
 * under a steady load: one Redis store (ratel_store_redis_new, URL with
 * on_failure=local) and ratel_store_acquire() RATE times a second,
 * cycling over the KEYs, for SECONDS. Each decision is printed as one
 * line, `UNIX_MS KEY SOURCE` (store, local, ...; `error` for a call that
 * returned an error), flushed at once. test_fault_cluster.sh runs it while
 * a cluster master is killed.
 */
#include <ratel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ms(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    const char *rules[] = {"1000000/1m"};
    ratel_redis_options_t o = {0};
    ratel_policy_t policy;
    ratel_store_t *store;
    char err[512];
    long long end, period_ms;

    if (argc < 5) {
        fprintf(stderr, "usage: cluster_sync URL RATE SECONDS KEY...\n");
        return 2;
    }
    o.url = argv[1];
    o.on_failure = RATEL_FAILURE_LOCAL;
    period_ms = 1000 / (atoi(argv[2]) > 0 ? atoi(argv[2]) : 1);
    end = now_ms(CLOCK_MONOTONIC) + atoll(argv[3]) * 1000;
    if (ratel_policy_parse(&policy, rules, 1, err, sizeof err) != 0 ||
        ratel_store_redis_new(&store, &o, err, sizeof err) != 0) {
        fprintf(stderr, "cluster_sync: %s\n", err);
        return 1;
    }
    for (int i = 0; now_ms(CLOCK_MONOTONIC) < end; i++) {
        const char *key = argv[4 + i % (argc - 4)];
        ratel_request_t req = RATEL_REQUEST_INIT;
        ratel_decision_t d;
        struct timespec pause = {0, period_ms * 1000000};
        int rc = ratel_store_acquire(store, key, strlen(key), &policy,
                                     ratel_clock_now_us(), &req, &d);

        printf("%lld %s %s\n", now_ms(CLOCK_REALTIME), key,
               rc != 0 ? "error" : ratel_source_name(d.source));
        fflush(stdout);
        nanosleep(&pause, NULL);
    }
    ratel_store_free(store);
    return 0;
}
