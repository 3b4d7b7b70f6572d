/*
 * bench_snapshot.c - what the memory store's snapshot costs
 * (docs/memory-store.md, "Snapshots"): at 1,000,000 keys of the `sms`
 * policy (1/60s, 10/1d), the time to write the file, its bytes, the
 * longest a shard lock was held while the writer copied it, the time to
 * load it back, and what a thread deciding meanwhile saw: its slowest
 * decision during a write against its slowest with no write.
 *
 * Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines on stdout and nothing
 * else (bench/run.sh collects them); the machine and progress go to stderr.
 *
 *   build/bench_snapshot            1,000,000 keys
 *   build/bench_snapshot 100000     another count
 *
 * The file goes to a directory under $TMPDIR (/tmp), removed at the end:
 * the write's time includes its fsync, so it measures that disk.
 */
#include "ratel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void emit(const char *name, double value, const char *unit)
{
    printf("ratel\t%s\t%.*f\t%s\n", name, value < 100 ? 2 : 0, value, unit);
}

static void key_of(long i, char *key, size_t cap)
{
    snprintf(key, cap, "sms:+86139%08ld", i);
}

/* A thread deciding on the store's keys until told to stop; its slowest
   decision, in us. */
typedef struct decider_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    long keys;
    int64_t at;
    _Atomic int stop;
    double max_us;
    long decisions, allowed;
} decider_t;

static void *decide(void *arg)
{
    decider_t *d = arg;
    ratel_request_t req = {.cost = 1};
    ratel_decision_t dec;
    char key[32];
    unsigned long x = 88172645463325252ul;

    while (!atomic_load(&d->stop)) {
        double t0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        key_of((long)(x % (unsigned long)d->keys), key, sizeof key);
        t0 = now_s();
        if (ratel_store_acquire(d->store, key, strlen(key), d->policy, d->at,
                                &req, &dec) == 0 &&
            dec.allowed)
            d->allowed++;
        t0 = (now_s() - t0) * 1e6;
        if (t0 > d->max_us)
            d->max_us = t0;
        d->decisions++;
    }
    return NULL;
}

/* The slowest decision of a deciding thread while `work` runs (or for
   `quiet_s` seconds when work is NULL). */
static double decide_during(decider_t *d, ratel_store_t *store,
                            int (*work)(ratel_store_t *), double quiet_s)
{
    pthread_t t;

    d->max_us = 0;
    d->decisions = 0;
    atomic_store(&d->stop, 0);
    if (pthread_create(&t, NULL, decide, d) != 0)
        return -1;
    if (work) {
        if (work(store) != 0)
            fprintf(stderr, "bench_snapshot: the write failed\n");
    } else {
        struct timespec pause = {(time_t)quiet_s,
                                 (long)((quiet_s - (time_t)quiet_s) * 1e9)};
        nanosleep(&pause, NULL);
    }
    atomic_store(&d->stop, 1);
    pthread_join(t, NULL);
    return d->max_us;
}

/* A write of the whole store: one key charged first, so that the store
   has changed since its last write (an unchanged store is not written). */
static int write_now(ratel_store_t *store)
{
    const char *rules[] = {"1/60s", "10/1d"};
    ratel_request_t req = {.cost = 1};
    ratel_policy_t p;
    ratel_decision_t d;
    char why[600];
    int rc;

    ratel_policy_parse(&p, rules, 2, NULL, 0);
    ratel_store_acquire(store, "changed", 7, &p, ratel_clock_now_us(), &req,
                        &d);
    rc = ratel_store_memory_snapshot(store, why, sizeof why);
    if (rc != 0)
        fprintf(stderr, "bench_snapshot: %s\n", why);
    return rc;
}

static void describe_machine(int argc, char **argv)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    fprintf(stderr, "bench_snapshot:");
    for (int i = 0; i < argc; i++)
        fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, "\n  %ld CPUs online", sysconf(_SC_NPROCESSORS_ONLN));
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            fprintf(stderr, ",%s", colon ? colon + 1 : line);
            break;
        }
    }
    if (f)
        fclose(f);
    fprintf(stderr, "\n");
}

/* Fills `store` with `keys` keys, one SMS each at `at`; 0 or -1. */
static int fill(ratel_store_t *store, const ratel_policy_t *p, long keys,
                int64_t at)
{
    ratel_request_t req = {.cost = 1};
    ratel_decision_t d;
    char key[32];

    for (long i = 0; i < keys; i++) {
        key_of(i, key, sizeof key);
        if (ratel_store_acquire(store, key, strlen(key), p, at, &req, &d) !=
                0 ||
            !d.allowed)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *rules[] = {"1/60s", "10/1d"};
    long keys = argc > 1 ? atol(argv[1]) : 1000000;
    ratel_memory_options_t o = {(size_t)1 << 30, 0};
    ratel_snapshot_options_t snap = {NULL, 3600000, 0};
    ratel_store_t *store = NULL, *loaded = NULL;
    ratel_store_stats_t st, lst;
    ratel_policy_t policy;
    decider_t d = {0};
    char dir[] = "/tmp/ratel-bench-snapshot-XXXXXX", path[96], why[600];
    double t0, write_s, load_s, quiet_max, busy_max;

    describe_machine(argc, argv);
    if (keys <= 0 || !mkdtemp(dir) ||
        ratel_policy_parse(&policy, rules, 2, NULL, 0) != 0)
        return 1;
    snprintf(path, sizeof path, "%s/bench.state", dir);
    snap.path = path;
    if (ratel_store_memory_open(&store, &o, &snap, why, sizeof why) != 0) {
        fprintf(stderr, "bench_snapshot: %s\n", why);
        return 1;
    }
    d.store = store;
    d.policy = &policy;
    d.keys = keys;
    d.at = ratel_clock_now_us();
    if (fill(store, &policy, keys, d.at) != 0) {
        fprintf(stderr, "bench_snapshot: filling the store failed\n");
        return 1;
    }
    t0 = now_s();
    if (write_now(store) != 0)
        return 1;
    write_s = now_s() - t0;
    ratel_store_stats(store, &st);
    fprintf(stderr, "  first write: %.0f ms, longest shard lock %llu us\n",
            write_s * 1e3, (unsigned long long)st.snapshot_lock_max_us);
    ratel_store_stats(store, &st);
    fprintf(stderr, "  %llu keys, %llu bytes held\n",
            (unsigned long long)st.keys, (unsigned long long)st.bytes);
    /* A write with a thread deciding (every key denied: its minute is
       spent), then the same thread as long with no write. */
    busy_max = decide_during(&d, store, write_now, 0);
    ratel_store_stats(store, &st);
    quiet_max = decide_during(&d, store, NULL, st.snapshot_write_us / 1e6);
    fprintf(stderr, "  deciding thread: %ld decisions, %ld allowed\n",
            d.decisions, d.allowed);
    t0 = now_s();
    if (ratel_store_memory_open(&loaded, &o, &snap, why, sizeof why) != 0) {
        fprintf(stderr, "bench_snapshot: %s\n", why);
        return 1;
    }
    load_s = now_s() - t0;
    ratel_store_stats(loaded, &lst);
    if (lst.keys != st.keys)
        fprintf(stderr, "  WARNING: loaded %llu keys of %llu\n",
                (unsigned long long)lst.keys, (unsigned long long)st.keys);
    emit("snapshot_keys", (double)st.keys, "keys");
    emit("snapshot_write", write_s * 1e3, "ms");
    emit("snapshot_bytes", (double)st.snapshot_bytes, "bytes");
    emit("snapshot_bytes_per_key", (double)st.snapshot_bytes / (double)keys,
         "bytes/key");
    emit("snapshot_shard_lock_max", (double)st.snapshot_lock_max_us, "us");
    emit("snapshot_decision_max_during_write", busy_max, "us");
    emit("snapshot_decision_max_without_write", quiet_max, "us");
    emit("snapshot_load", load_s * 1e3, "ms");
    ratel_store_free(loaded);
    ratel_store_free(store);
    unlink(path);
    rmdir(dir);
    return 0;
}
