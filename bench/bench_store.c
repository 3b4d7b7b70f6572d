/*
 * bench_store.c - decisions per second of the embedded memory store, and
 * the bytes it holds per key and per event.
 *
 * Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines on stdout and nothing
 * else (bench/run.sh collects them); the machine, progress and the checks
 * that keep the compiler honest go to stderr.
 *
 * Throughput follows the peer (rate-limiter-flexible's memory bench: points
 * 1e9 per 60 s, keys "k0".."k999" round robin): every algorithm with a
 * 1000000000/1m rule that never denies, on a hot set of 1,000 keys and on
 * 1,000,000 keys, with 1 and 2 threads. Threads take disjoint, interleaved
 * keys (thread t: keys t, t+T, t+2T, ...), as the peer's concurrent workers
 * sharing one counter would. Time is injected: each thread's clock starts at
 * a fixed instant and advances 1 us per decision. Each figure is the median
 * of 5 runs of at least 0.3 s, after one untimed pass that creates the keys.
 *
 *   build/bench_store            everything
 *   build/bench_store hot        only the lines whose name contains "hot"
 *
 * The hot set is measured twice: with the default 4096 shards, and with 64
 * shards ("hot1k_64shards"), which shows what two threads lose when they
 * often meet on a shard lock (docs/memory-store.md, "Threads").
 */
#include "ratel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef RUNS
#define RUNS 5
#endif
#define RUN_SECONDS 0.3
#define START_US ((int64_t)1700000000 * 1000000)
#define KEY_SLOT 16

/*
 * What is measured: every algorithm with a rule that never denies, the
 * peer's 10^9 a minute; fixed on a calendar (tz=+08:00, the windows'
 * calendar path); and concurrent, whose limit is at most 256, as pairs of
 * an acquire and the release of its lease (a "decision" is one pair).
 */
typedef struct variant_s {
    const char *name;
    const char *rule;
    int release;
} variant_t;

static const variant_t algos[] = {
    {"sliding", "1000000000/1m:sliding", 0},
    {"fixed", "1000000000/1m:fixed", 0},
    {"approx", "1000000000/1m:approx", 0},
    {"gcra", "1000000000/1m:gcra", 0},
    {"fixed_tz", "1000000000/1m:fixed,tz=+08:00", 0},
    {"concurrent", "256/1m:concurrent", 1},
};

static const char *filter; /* argv[1]: only names containing it */

static double seconds_of(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double seconds(void)
{
    return seconds_of(CLOCK_MONOTONIC);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int wanted(const char *name)
{
    return !filter || strstr(name, filter) != NULL;
}

static void emit(const char *name, double value, const char *unit)
{
    printf("ratel\t%s\t%.*f\t%s\n", name, value < 100 ? 2 : 0, value, unit);
    fflush(stdout);
}

static void parse_or_die(ratel_policy_t *p, const char *rule)
{
    char err[256];
    const char *texts[1] = {rule};
    if (ratel_policy_parse(p, texts, 1, err, sizeof err) != 0) {
        fprintf(stderr, "bench_store: %s\n", err);
        exit(1);
    }
}

/* Shards of the stores made next: 0 for the store's default (4096). */
static unsigned bench_shards;

static ratel_store_t *store_or_die(size_t max_bytes)
{
    ratel_memory_options_t o = {max_bytes, bench_shards};
    ratel_store_t *s;
    if (ratel_store_memory_new(&s, &o) != 0) {
        fprintf(stderr, "bench_store: cannot create the store\n");
        exit(1);
    }
    return s;
}

/* Keys "k0".."k<n-1>", preformatted so the loop measures the store only. */
typedef struct keyset_s {
    char (*key)[KEY_SLOT];
    unsigned char *len;
    long n;
} keyset_t;

static void keyset_init(keyset_t *ks, long n)
{
    ks->key = malloc((size_t)n * KEY_SLOT);
    ks->len = malloc((size_t)n);
    ks->n = n;
    if (!ks->key || !ks->len) {
        fprintf(stderr, "bench_store: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n; i++)
        ks->len[i] = (unsigned char)snprintf(ks->key[i], KEY_SLOT, "k%ld", i);
}

static void keyset_free(keyset_t *ks)
{
    free(ks->key);
    free(ks->len);
}

/* ------------------------------------------------------------ throughput */

static atomic_int stop;

typedef struct worker_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    const keyset_t *ks;
    pthread_barrier_t *start;
    int nthreads;
    int release; /* release each admitted request's lease */
    long quota;  /* decisions to make; 0: until `stop` */
    long next;   /* index of the next key (persists across runs) */
    int64_t now; /* this thread's injected clock (persists) */
    long done;   /* decisions made in the last run */
    long total_done, total_allowed, total_errors; /* over the timed runs */
} worker_t;

static void *work(void *arg)
{
    worker_t *w = arg;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    const keyset_t *ks = w->ks;
    long i = w->next, done = 0, allowed = 0, errors = 0;
    int64_t now = w->now;

    pthread_barrier_wait(w->start);
    while (w->quota ? done < w->quota
                    : !atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int b = 0; b < 256; b++) {
            int held = 1;
            if (ratel_store_acquire(w->store, ks->key[i], ks->len[i], w->policy,
                                    now, &req, &d) != 0)
                errors++;
            else
                allowed += d.allowed;
            if (w->release &&
                ratel_store_release(w->store, ks->key[i], ks->len[i], w->policy,
                                    now, d.lease, 0, &held, &d) != 0)
                errors++;
            errors += !held;
            now++;
            i += w->nthreads;
            if (i >= ks->n)
                i -= ks->n;
        }
        done += 256;
    }
    w->next = i;
    w->now = now;
    w->done = done;
    w->total_errors += errors;
    if (!w->quota) {
        w->total_done += done;
        w->total_allowed += allowed;
    }
    return NULL;
}

/*
 * One run: starts the workers together, stops them after RUN_SECONDS (or
 * when each has made its quota) and returns decisions per second. When
 * `cpus` is not NULL it receives the CPUs the process used meanwhile (CPU
 * time over wall time): less than the thread count means the machine was
 * busy with something else.
 */
static double run_once(worker_t *w, int nthreads, long quota, double *cpus)
{
    pthread_barrier_t start;
    pthread_t tid[2];
    struct timespec pause = {0, (long)(RUN_SECONDS * 1e9)};
    double t0, cpu0, elapsed;
    long total = 0;

    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    atomic_store(&stop, 0);
    for (int t = 0; t < nthreads; t++) {
        w[t].start = &start;
        w[t].quota = quota;
        if (pthread_create(&tid[t], NULL, work, &w[t]) != 0) {
            fprintf(stderr, "bench_store: pthread_create failed\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    t0 = seconds();
    cpu0 = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
    if (!quota) {
        nanosleep(&pause, NULL);
        atomic_store(&stop, 1);
    }
    for (int t = 0; t < nthreads; t++) {
        pthread_join(tid[t], NULL);
        total += w[t].done;
    }
    elapsed = seconds() - t0;
    if (cpus)
        *cpus = (seconds_of(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / elapsed;
    pthread_barrier_destroy(&start);
    return (double)total / elapsed;
}

static double median(const double *v)
{
    double sorted[RUNS];
    memcpy(sorted, v, sizeof sorted);
    qsort(sorted, RUNS, sizeof sorted[0], cmp_double);
    return sorted[RUNS / 2];
}

/* One store driven by `nthreads` workers; the workers' state persists. */
typedef struct setup_s {
    ratel_store_t *store;
    worker_t w[2];
    int nthreads;
    double rate[RUNS];
    double cpus[RUNS];
} setup_t;

static void setup_init(setup_t *su, const ratel_policy_t *policy,
                       const keyset_t *ks, int nthreads, size_t max_bytes,
                       int release)
{
    memset(su, 0, sizeof *su);
    su->store = store_or_die(max_bytes);
    su->nthreads = nthreads;
    for (int t = 0; t < nthreads; t++) {
        su->w[t].store = su->store;
        su->w[t].policy = policy;
        su->w[t].ks = ks;
        su->w[t].nthreads = nthreads;
        su->w[t].release = release;
        su->w[t].next = t;
        su->w[t].now = START_US;
    }
    /* One untimed pass creates every key. */
    run_once(su->w, nthreads, (ks->n / nthreads + 255) / 256 * 256, NULL);
}

/* Reports what the runs did on stderr, frees the store. */
static void setup_finish(setup_t *su, const char *algo, long nkeys,
                         long decisions, long allowed, long errors)
{
    ratel_store_stats_t st;

    ratel_store_stats(su->store, &st);
    fprintf(stderr,
            "  %s, %ld keys, %d thread(s) on %.2f CPUs: %ld decisions, %ld "
            "admitted, %ld errors; keys %llu hits %llu misses %llu "
            "expirations %llu evictions %llu\n",
            algo, nkeys, su->nthreads, median(su->cpus), decisions, allowed,
            errors, (unsigned long long)st.keys, (unsigned long long)st.hits,
            (unsigned long long)st.misses, (unsigned long long)st.expirations,
            (unsigned long long)st.evictions);
    if (allowed != decisions || errors)
        fprintf(stderr, "  WARNING: the bench rule denied or failed\n");
    if (median(su->cpus) < 0.9 * su->nthreads)
        fprintf(stderr,
                "  WARNING: %d threads got %.2f CPUs: the machine is "
                "busy, figures are low\n",
                su->nthreads, median(su->cpus));
    ratel_store_free(su->store);
}

/*
 * `algo` over `ks` with 1 and with 2 threads, each on its own fresh store.
 * The runs alternate (1 thread, 2 threads, 1 thread, ...) so that both see
 * the same machine: on a shared machine, load that comes and goes would
 * otherwise land on one side of the ratio. The ratio is the median of the
 * five paired ratios.
 */
static void throughput_pair(const variant_t *v, const keyset_t *ks,
                            size_t max_bytes, double *one, double *two,
                            double *ratio)
{
    ratel_policy_t policy;
    setup_t su[2];
    double ratios[RUNS];

    parse_or_die(&policy, v->rule);
    setup_init(&su[0], &policy, ks, 1, max_bytes, v->release);
    setup_init(&su[1], &policy, ks, 2, max_bytes, v->release);
    for (int r = 0; r < RUNS; r++) {
        su[0].rate[r] = run_once(su[0].w, 1, 0, &su[0].cpus[r]);
        su[1].rate[r] = run_once(su[1].w, 2, 0, &su[1].cpus[r]);
        ratios[r] = su[1].rate[r] / su[0].rate[r];
    }
    for (int i = 0; i < 2; i++) {
        long decisions = 0, allowed = 0, errors = 0;
        for (int t = 0; t < su[i].nthreads; t++) {
            decisions += su[i].w[t].total_done;
            allowed += su[i].w[t].total_allowed;
            errors += su[i].w[t].total_errors;
        }
        setup_finish(&su[i], v->name, ks->n, decisions, allowed, errors);
    }
    *one = median(su[0].rate);
    *two = median(su[1].rate);
    *ratio = median(ratios);
}

static void bench_throughput(const char *set, const keyset_t *ks,
                             size_t max_bytes)
{
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        char name[3][80];
        double one, two, ratio;
        snprintf(name[0], sizeof name[0], "store_%s_%s_1t", set, algos[a].name);
        snprintf(name[1], sizeof name[1], "store_%s_%s_2t", set, algos[a].name);
        snprintf(name[2], sizeof name[2], "store_%s_%s_2t_over_1t", set,
                 algos[a].name);
        if (!wanted(name[0]) && !wanted(name[1]) && !wanted(name[2]))
            continue;
        throughput_pair(&algos[a], ks, max_bytes, &one, &two, &ratio);
        emit(name[0], one, "decisions/s");
        emit(name[1], two, "decisions/s");
        emit(name[2], ratio, "x");
    }
}

/* ---------------------------------------------------------------- memory */

/* stats.bytes / keys after one admitted request on each of 100,000 keys. */
static void bench_bytes_per_key(void)
{
    enum { NKEYS = 100000 };
    keyset_t ks;

    keyset_init(&ks, NKEYS);
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        char name[64];
        ratel_policy_t policy;
        ratel_request_t req = RATEL_REQUEST_INIT;
        ratel_decision_t d;
        ratel_store_stats_t st;
        ratel_store_t *store;
        long allowed = 0;

        snprintf(name, sizeof name, "store_bytes_per_key_%s", algos[a].name);
        if (!wanted(name))
            continue;
        parse_or_die(&policy, algos[a].rule);
        store = store_or_die(0);
        for (long i = 0; i < NKEYS; i++) {
            ratel_store_acquire(store, ks.key[i], ks.len[i], &policy,
                                START_US + i, &req, &d);
            allowed += d.allowed;
        }
        ratel_store_stats(store, &st);
        fprintf(stderr, "  %s: %ld admitted, %llu keys, %llu bytes\n",
                algos[a].name, allowed, (unsigned long long)st.keys,
                (unsigned long long)st.bytes);
        emit(name, (double)st.bytes / (double)st.keys, "bytes/key");
        ratel_store_free(store);
    }
    keyset_free(&ks);
}

/*
 * One sliding key holding 1,000 events at distinct milliseconds (a limit
 * in the millions, so none is denied): the blob's size as the core writes
 * it, and what the store holds for that key (its bytes minus an empty
 * store's).
 */
static void bench_bytes_per_event(void)
{
    enum { EVENTS = 1000 };
    static uint8_t blob[32768];
    size_t len = 0;
    ratel_policy_t policy;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    ratel_store_stats_t empty, full;
    ratel_rule_status_t rs[1];
    ratel_store_t *store;
    size_t n = 0;
    long allowed = 0;
    double key_bytes;

    if (!wanted("store_sliding_1000_events"))
        return;
    parse_or_die(&policy, "1000000/1h");
    store = store_or_die(0);
    ratel_store_stats(store, &empty);
    for (long i = 0; i < EVENTS; i++) {
        int64_t now = START_US + i * 1000;
        ratel_store_acquire(store, "events", 6, &policy, now, &req, &d);
        allowed += d.allowed;
        ratel_policy_acquire(&policy, blob, &len, sizeof blob, now, &req, &d);
        allowed += d.allowed;
    }
    ratel_store_stats(store, &full);
    ratel_store_inspect(store, "events", 6, START_US + EVENTS * 1000, rs, 1,
                        &n);
    fprintf(stderr,
            "  sliding, %d events: %ld admitted, %u runs, %ums "
            "granularity\n",
            EVENTS, allowed, n ? rs[0].runs : 0, n ? rs[0].granularity_ms : 0);
    key_bytes = (double)(full.bytes - empty.bytes);
    emit("store_sliding_1000_events_blob", (double)len, "bytes");
    emit("store_sliding_1000_events_key", key_bytes, "bytes");
    emit("store_sliding_1000_events_per_event", key_bytes / EVENTS,
         "bytes/event");
    ratel_store_free(store);
}

/* The machine and the command, for whoever reads the figures later. */
static void describe_machine(int argc, char **argv)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    fprintf(stderr, "bench_store:");
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

int main(int argc, char **argv)
{
    keyset_t hot, big;

    filter = argc > 1 ? argv[1] : NULL;
    describe_machine(argc, argv);

    keyset_init(&hot, 1000);
    bench_throughput("hot1k", &hot, 0);
    bench_shards = 64;
    bench_throughput("hot1k_64shards", &hot, 0);
    bench_shards = 0;
    keyset_free(&hot);

    /* Large enough that the million keys stay: this measures lookups in a
     * big table, not eviction. */
    keyset_init(&big, 1000000);
    bench_throughput("keys1m", &big, (size_t)1 << 30);
    keyset_free(&big);

    bench_bytes_per_key();
    bench_bytes_per_event();
    return 0;
}
