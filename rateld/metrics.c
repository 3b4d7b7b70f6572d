/*
 * metrics.c - per-thread counters and their Prometheus text exposition.
 *
 * Each worker thread owns one block of counters, allocated on its own and
 * aligned to a cache line, so the hot path writes only memory no other
 * thread writes. A counter has one writer: it is bumped with a relaxed load
 * and store (no locked instruction) and read with relaxed loads by the
 * thread rendering /metrics, which sums the blocks.
 *
 * A block holds counters for every possible policy index (about 330 KiB).
 * It is calloc'd, which at that size normally maps fresh zero pages: memory
 * is committed only for the policies that count something.
 *
 * Registration (rare: at config load) takes a mutex; the hot path uses the
 * index it returned and never looks a name up.
 */
#include "rateld/metrics.h"
#include "http/http.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SOURCES 6        /* RATEL_SOURCE_STORE .. RATEL_SOURCE_LEASE */
#define STATUS_CLASSES 5 /* 1xx .. 5xx */
#define GRPC_CODES 17    /* gRPC status codes 0 .. 16 */
#define CACHE_LINE 64

/* Upper bounds of the latency buckets, in microseconds, and as written in
   `le` (seconds); the last bucket is +Inf. */
static const int64_t bucket_us[] = {50,     100,    250,    500,    1000,
                                    2500,   5000,   10000,  25000,  50000,
                                    100000, 250000, 500000, 1000000};
static const char *const bucket_le[] = {
    "0.00005", "0.0001", "0.00025", "0.0005", "0.001",
    "0.0025",  "0.005",  "0.01",    "0.025",  "0.05",
    "0.1",     "0.25",   "0.5",     "1",      "+Inf"};
#define BUCKETS (sizeof bucket_le / sizeof bucket_le[0])

static const char *const outcome_name[RATELD_OUTCOMES] = {
    "allowed", "denied", "shadow_denied", "rejected", "error"};

typedef _Atomic uint64_t counter_t;

typedef struct policy_counters_s {
    counter_t decisions[RATELD_OUTCOMES][SOURCES];
    counter_t buckets[BUCKETS]; /* not cumulative: one bucket per request */
    counter_t latency_us;       /* sum */
    counter_t rlqs_reports, rlqs_actions[RATELD_RLQS_ACTIONS];
} policy_counters_t;

static const char *const undecided_name[RATELD_UNDECIDED_REASONS] = {
    "unidentified", "unmatched", "missing-key", "bad-key",
    "ambiguous",    "bad-uri",   "bad-request"};

const char *rateld_undecided_name(rateld_undecided_t reason)
{
    return (unsigned)reason < RATELD_UNDECIDED_REASONS ? undecided_name[reason]
                                                       : "unknown";
}

static const char *const endpoint_name[RATELD_ENDPOINTS] = {"acquire", "auth",
                                                            "rls", "report"};

typedef struct thread_counters_s {
    counter_t http[STATUS_CLASSES];
    counter_t abandoned[RATELD_ENDPOINTS];
    counter_t refused[RATEL_HTTP_REFUSALS];
    counter_t grpc[GRPC_CODES];
    counter_t undecided[RATELD_UNDECIDED_REASONS];
    counter_t rlqs_opened, rlqs_closed, rlqs_unmatched;
    policy_counters_t policies[RATELD_METRICS_POLICIES];
} thread_counters_t;

struct rateld_metrics_s {
    unsigned threads;
    thread_counters_t **counters; /* one block per thread, aligned */
    void **blocks;                /* what calloc returned, for free() */
    pthread_mutex_t lock;         /* registration */
    _Atomic size_t npolicies;
    char *names[RATELD_METRICS_POLICIES];
    /* A leased policy's settings and the store's counters of it: they
       outlive reloads (and the store's slices in flight). */
    ratel_lease_t leases[RATELD_METRICS_POLICIES];
    _Atomic int leased[RATELD_METRICS_POLICIES];
};

/* Only thread `thread` writes the counter: no read-modify-write needed. */
static void bump(counter_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static uint64_t get(counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

rateld_metrics_t *rateld_metrics_new(unsigned threads)
{
    rateld_metrics_t *m;

    if (threads == 0)
        threads = 1;
    m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->threads = threads;
    m->counters = calloc(threads, sizeof *m->counters);
    m->blocks = calloc(threads, sizeof *m->blocks);
    if (!m->counters || !m->blocks || pthread_mutex_init(&m->lock, NULL)) {
        free(m->counters);
        free(m->blocks);
        free(m);
        return NULL;
    }
    for (unsigned t = 0; t < threads; t++) {
        /* A separate allocation per thread, started on a cache line and
           padded to one: no two threads share a line. */
        void *raw = calloc(1, sizeof(thread_counters_t) + 2 * CACHE_LINE);
        if (!raw) {
            rateld_metrics_free(m);
            return NULL;
        }
        m->blocks[t] = raw;
        m->counters[t] =
            (thread_counters_t *)(((uintptr_t)raw + CACHE_LINE - 1) &
                                  ~(uintptr_t)(CACHE_LINE - 1));
    }
    return m;
}

void rateld_metrics_free(rateld_metrics_t *m)
{
    if (!m)
        return;
    for (unsigned t = 0; t < m->threads; t++)
        free(m->blocks[t]);
    for (size_t i = 0; i < RATELD_METRICS_POLICIES; i++)
        free(m->names[i]);
    pthread_mutex_destroy(&m->lock);
    free(m->counters);
    free(m->blocks);
    free(m);
}

int rateld_metrics_policy(rateld_metrics_t *m, const char *name)
{
    int index = -1;
    size_t n;

    if (!m || !name)
        return -1;
    pthread_mutex_lock(&m->lock);
    n = atomic_load_explicit(&m->npolicies, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m->names[i], name) == 0) {
            index = (int)i;
            break;
        }
    }
    if (index < 0 && n < RATELD_METRICS_POLICIES) {
        m->names[n] = strdup(name);
        if (m->names[n]) {
            index = (int)n;
            /* Release: a renderer that sees the count sees the name. */
            atomic_store_explicit(&m->npolicies, n + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return index;
}

ratel_lease_t *rateld_metrics_lease(rateld_metrics_t *m, int policy,
                                    const ratel_lease_t *settings)
{
    ratel_lease_t *l;

    if (!m || policy < 0 || policy >= RATELD_METRICS_POLICIES)
        return NULL;
    l = &m->leases[policy];
    /* Settings only: the counters go on. Word-sized stores, read by the
       store as they come. */
    __atomic_store_n(&l->ttl_ms, settings->ttl_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&l->max_slice, settings->max_slice, __ATOMIC_RELAXED);
    __atomic_store_n(&l->min_slice, settings->min_slice, __ATOMIC_RELAXED);
    __atomic_store_n(&l->margin_ms, settings->margin_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&l->hosts, settings->hosts, __ATOMIC_RELAXED);
    atomic_store_explicit(&m->leased[policy], 1, memory_order_release);
    return l;
}

/* The bucket of a latency: the first whose bound is >= it (`le`). */
static size_t bucket_of(int64_t latency_us)
{
    size_t i = 0;
    while (i < BUCKETS - 1 && latency_us > bucket_us[i])
        i++;
    return i;
}

void rateld_metrics_count(rateld_metrics_t *m, unsigned thread, int policy,
                          rateld_outcome_t outcome, int source,
                          int64_t latency_us)
{
    policy_counters_t *c;

    /* An index from a full table (-1) or a bad argument counts nothing. */
    if (!m || thread >= m->threads || policy < 0 ||
        policy >= RATELD_METRICS_POLICIES || (int)outcome < 0 ||
        (int)outcome >= RATELD_OUTCOMES)
        return;
    if (source < 0 || source >= SOURCES)
        source = RATEL_SOURCE_STORE;
    if (latency_us < 0)
        latency_us = 0; /* a clock that went backwards */
    c = &m->counters[thread]->policies[policy];
    bump(&c->decisions[outcome][source], 1);
    bump(&c->buckets[bucket_of(latency_us)], 1);
    bump(&c->latency_us, (uint64_t)latency_us);
}

void rateld_metrics_undecided(rateld_metrics_t *m, unsigned thread,
                              rateld_undecided_t reason)
{
    if (!m || thread >= m->threads ||
        (unsigned)reason >= RATELD_UNDECIDED_REASONS)
        return;
    bump(&m->counters[thread]->undecided[reason], 1);
}

void rateld_metrics_abandoned(rateld_metrics_t *m, unsigned thread,
                              rateld_endpoint_t endpoint)
{
    if (!m || thread >= m->threads || (unsigned)endpoint >= RATELD_ENDPOINTS)
        return;
    bump(&m->counters[thread]->abandoned[endpoint], 1);
}

void rateld_metrics_http(rateld_metrics_t *m, unsigned thread, int status)
{
    /* Statuses outside 100..599 are not HTTP statuses: not counted. */
    if (!m || thread >= m->threads || status < 100 || status > 599)
        return;
    bump(&m->counters[thread]->http[status / 100 - 1], 1);
}

void rateld_metrics_refused(rateld_metrics_t *m, unsigned thread, int limit)
{
    if (!m || thread >= m->threads || limit < 0 || limit >= RATEL_HTTP_REFUSALS)
        return;
    bump(&m->counters[thread]->refused[limit], 1);
}

void rateld_metrics_rlqs_stream(rateld_metrics_t *m, unsigned thread,
                                int opened)
{
    if (!m || thread >= m->threads)
        return;
    bump(opened ? &m->counters[thread]->rlqs_opened
                : &m->counters[thread]->rlqs_closed,
         1);
}

void rateld_metrics_rlqs_report(rateld_metrics_t *m, unsigned thread,
                                int policy)
{
    if (!m || thread >= m->threads || policy < 0 ||
        policy >= RATELD_METRICS_POLICIES)
        return;
    bump(&m->counters[thread]->policies[policy].rlqs_reports, 1);
}

void rateld_metrics_rlqs_action(rateld_metrics_t *m, unsigned thread,
                                int policy, rateld_rlqs_action_t action)
{
    if (!m || thread >= m->threads || policy < 0 ||
        policy >= RATELD_METRICS_POLICIES ||
        (unsigned)action >= RATELD_RLQS_ACTIONS)
        return;
    bump(&m->counters[thread]->policies[policy].rlqs_actions[action], 1);
}

void rateld_metrics_rlqs_unmatched(rateld_metrics_t *m, unsigned thread)
{
    if (!m || thread >= m->threads)
        return;
    bump(&m->counters[thread]->rlqs_unmatched, 1);
}

void rateld_metrics_grpc(rateld_metrics_t *m, unsigned thread, int code)
{
    if (!m || thread >= m->threads || code < 0 || code >= GRPC_CODES)
        return;
    bump(&m->counters[thread]->grpc[code], 1);
}

/* ------------------------------------------------------------ rendering */

typedef struct text_s {
    char *p;
    size_t n, cap;
    int failed;
} text_t;

static int reserve(text_t *t, size_t more)
{
    if (t->failed)
        return 0;
    if (t->n + more + 1 <= t->cap)
        return 1;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + more + 1)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
        t->failed = 1;
        return 0;
    }
    t->p = p;
    t->cap = cap;
    return 1;
}

static void emit(text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void emit(text_t *t, const char *fmt, ...)
{
    va_list ap;
    int m;

    va_start(ap, fmt);
    m = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (m < 0) {
        t->failed = 1;
        return;
    }
    if (!reserve(t, (size_t)m))
        return;
    va_start(ap, fmt);
    vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)m;
}

/* A label value as the text format wants it: \\, \" and \n escaped. */
static void emit_label_value(text_t *t, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            emit(t, "\\\\");
        else if (*s == '"')
            emit(t, "\\\"");
        else if (*s == '\n')
            emit(t, "\\n");
        else if (reserve(t, 1))
            t->p[t->n++] = *s;
    }
}

static void emit_header(text_t *t, const char *name, const char *type,
                        const char *help)
{
    emit(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Sums of one policy's counters over the threads. */
typedef struct policy_sums_s {
    uint64_t decisions[RATELD_OUTCOMES][SOURCES];
    uint64_t buckets[BUCKETS];
    uint64_t latency_us;
} policy_sums_t;

static void sum_policy(rateld_metrics_t *m, size_t i, policy_sums_t *s)
{
    memset(s, 0, sizeof *s);
    for (unsigned th = 0; th < m->threads; th++) {
        policy_counters_t *c = &m->counters[th]->policies[i];
        for (int o = 0; o < RATELD_OUTCOMES; o++)
            for (int src = 0; src < SOURCES; src++)
                s->decisions[o][src] += get(&c->decisions[o][src]);
        for (size_t b = 0; b < BUCKETS; b++)
            s->buckets[b] += get(&c->buckets[b]);
        s->latency_us += get(&c->latency_us);
    }
}

/*
 * ratel_decisions_total: every outcome with source "store" is always
 * written for every registered policy (so a rate() sees a series' first
 * increment); the failure paths (cache, open, closed, local) appear once
 * they have counted something.
 */
static void render_decisions(text_t *t, rateld_metrics_t *m, size_t n,
                             policy_sums_t *sums)
{
    emit_header(t, "ratel_decisions_total", "counter",
                "Decisions by policy, outcome and the path that decided.");
    for (size_t i = 0; i < n; i++) {
        for (int o = 0; o < RATELD_OUTCOMES; o++) {
            for (int src = 0; src < SOURCES; src++) {
                uint64_t v = sums[i].decisions[o][src];
                if (v == 0 && src != RATEL_SOURCE_STORE)
                    continue;
                emit(t, "ratel_decisions_total{policy=\"");
                emit_label_value(t, m->names[i]);
                emit(t, "\",outcome=\"%s\",source=\"%s\"} %llu\n",
                     outcome_name[o], ratel_source_name(src),
                     (unsigned long long)v);
            }
        }
    }
}

static void render_latency(text_t *t, rateld_metrics_t *m, size_t n,
                           policy_sums_t *sums)
{
    emit_header(t, "ratel_request_duration_seconds", "histogram",
                "Time from a request's arrival to its answer, by policy.");
    for (size_t i = 0; i < n; i++) {
        uint64_t cumulative = 0;
        for (size_t b = 0; b < BUCKETS; b++) {
            cumulative += sums[i].buckets[b];
            emit(t, "ratel_request_duration_seconds_bucket{policy=\"");
            emit_label_value(t, m->names[i]);
            emit(t, "\",le=\"%s\"} %llu\n", bucket_le[b],
                 (unsigned long long)cumulative);
        }
        emit(t, "ratel_request_duration_seconds_sum{policy=\"");
        emit_label_value(t, m->names[i]);
        emit(t, "\"} %llu.%06llu\n",
             (unsigned long long)(sums[i].latency_us / 1000000),
             (unsigned long long)(sums[i].latency_us % 1000000));
        /* The count is the +Inf bucket, so the two always agree. */
        emit(t, "ratel_request_duration_seconds_count{policy=\"");
        emit_label_value(t, m->names[i]);
        emit(t, "\"} %llu\n", (unsigned long long)cumulative);
    }
}

static void render_http(text_t *t, rateld_metrics_t *m)
{
    emit_header(t, "ratel_http_responses_total", "counter",
                "HTTP responses by status class.");
    for (int c = 0; c < STATUS_CLASSES; c++) {
        uint64_t v = 0;
        for (unsigned th = 0; th < m->threads; th++)
            v += get(&m->counters[th]->http[c]);
        emit(t, "ratel_http_responses_total{code=\"%dxx\"} %llu\n", c + 1,
             (unsigned long long)v);
    }
    emit_header(t, "ratel_http_connections_refused_total", "counter",
                "Connections refused with 503 as they were accepted, by the "
                "limit that refused them.");
    for (int l = 0; l < RATEL_HTTP_REFUSALS; l++) {
        uint64_t v = 0;
        for (unsigned th = 0; th < m->threads; th++)
            v += get(&m->counters[th]->refused[l]);
        emit(t, "ratel_http_connections_refused_total{limit=\"%s\"} %llu\n",
             ratel_http_refusal_name((ratel_http_refusal_t)l),
             (unsigned long long)v);
    }
}

static void render_grpc(text_t *t, rateld_metrics_t *m)
{
    static const char *const names[GRPC_CODES] = {"OK",
                                                  "CANCELLED",
                                                  "UNKNOWN",
                                                  "INVALID_ARGUMENT",
                                                  "DEADLINE_EXCEEDED",
                                                  "NOT_FOUND",
                                                  "ALREADY_EXISTS",
                                                  "PERMISSION_DENIED",
                                                  "RESOURCE_EXHAUSTED",
                                                  "FAILED_PRECONDITION",
                                                  "ABORTED",
                                                  "OUT_OF_RANGE",
                                                  "UNIMPLEMENTED",
                                                  "INTERNAL",
                                                  "UNAVAILABLE",
                                                  "DATA_LOSS",
                                                  "UNAUTHENTICATED"};

    emit_header(t, "ratel_grpc_responses_total", "counter",
                "gRPC calls answered by rateld (Envoy's rate limit service, "
                "health checks), by status.");
    for (int c = 0; c < GRPC_CODES; c++) {
        uint64_t v = 0;
        for (unsigned th = 0; th < m->threads; th++)
            v += get(&m->counters[th]->grpc[c]);
        emit(t, "ratel_grpc_responses_total{code=\"%s\"} %llu\n", names[c],
             (unsigned long long)v);
    }
}

static void render_undecided(text_t *t, rateld_metrics_t *m)
{
    emit_header(t, "ratel_auth_undecided_total", "counter",
                "Gateway auth requests not decided by a route's policies, "
                "by reason (answered as auth.unmatched or 4xx).");
    for (int r = 0; r < RATELD_UNDECIDED_REASONS; r++) {
        uint64_t v = 0;
        for (unsigned th = 0; th < m->threads; th++)
            v += get(&m->counters[th]->undecided[r]);
        emit(t, "ratel_auth_undecided_total{reason=\"%s\"} %llu\n",
             undecided_name[r], (unsigned long long)v);
    }
}

static void render_abandoned(text_t *t, rateld_metrics_t *m)
{
    emit_header(t, "ratel_abandoned_total", "counter",
                "Requests not decided because their client had gone before "
                "the decision (a gateway that gave up closed its connection, "
                "Envoy reset its stream); nothing was charged. By endpoint.");
    for (int e = 0; e < RATELD_ENDPOINTS; e++) {
        uint64_t v = 0;
        for (unsigned th = 0; th < m->threads; th++)
            v += get(&m->counters[th]->abandoned[e]);
        emit(t, "ratel_abandoned_total{endpoint=\"%s\"} %llu\n",
             endpoint_name[e], (unsigned long long)v);
    }
}

/* The leased policies' counters (ratel_lease_t): none until a policy is
   leased. */
static void render_leases(text_t *t, rateld_metrics_t *m, size_t n)
{
    static const struct {
        const char *what;
        size_t offset;
    } permits[] = {{"leased", offsetof(ratel_lease_t, leased)},
                   {"spent", offsetof(ratel_lease_t, spent)},
                   {"returned", offsetof(ratel_lease_t, returned)},
                   {"stranded", offsetof(ratel_lease_t, stranded)}};

    size_t leased = 0;

    for (size_t i = 0; i < n; i++)
        leased += atomic_load_explicit(&m->leased[i], memory_order_acquire);
    if (leased == 0)
        return;
    emit_header(t, "ratel_lease_calls_total", "counter",
                "Slices a leased policy's keys asked the store for.");
    for (size_t i = 0; i < n; i++)
        if (atomic_load_explicit(&m->leased[i], memory_order_acquire)) {
            emit(t, "ratel_lease_calls_total{policy=\"");
            emit_label_value(t, m->names[i]);
            emit(t, "\"} %llu\n",
                 (unsigned long long)__atomic_load_n(&m->leases[i].calls,
                                                     __ATOMIC_RELAXED));
        }
    emit_header(t, "ratel_lease_permits_total", "counter",
                "A leased policy's permits: leased (granted by the store), "
                "spent (admitted here), returned, stranded (ended unspent).");
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0;
             k < sizeof permits / sizeof permits[0] &&
             atomic_load_explicit(&m->leased[i], memory_order_acquire);
             k++) {
            const uint64_t *c = (const uint64_t *)((const char *)&m->leases[i] +
                                                   permits[k].offset);
            emit(t, "ratel_lease_permits_total{policy=\"");
            emit_label_value(t, m->names[i]);
            emit(t, "\",what=\"%s\"} %llu\n", permits[k].what,
                 (unsigned long long)__atomic_load_n(c, __ATOMIC_RELAXED));
        }
}

static void render_one(text_t *t, const char *name, const char *type,
                       const char *help, uint64_t v)
{
    emit_header(t, name, type, help);
    emit(t, "%s %llu\n", name, (unsigned long long)v);
}

static void render_store(text_t *t, const ratel_store_stats_t *st)
{
    render_one(t, "ratel_store_keys", "gauge", "Keys the store holds.",
               st->keys);
    render_one(t, "ratel_store_bytes", "gauge",
               "Memory the store holds, bookkeeping included.", st->bytes);
    render_one(t, "ratel_store_max_bytes", "gauge",
               "The store's configured memory bound.", st->max_bytes);
    render_one(t, "ratel_store_evictions_total", "counter",
               "Live keys dropped to stay within the memory bound.",
               st->evictions);
    render_one(t, "ratel_store_expirations_total", "counter",
               "Idle keys removed at their reset time.", st->expirations);
    render_one(t, "ratel_store_errors_total", "counter",
               "Requests Redis did not decide; the failure policy did.",
               st->errors);
    emit_header(t, "ratel_store_fallbacks_total", "counter",
                "Requests Redis did not decide, by the failure policy that "
                "did (open, closed, local).");
    emit(t, "ratel_store_fallbacks_total{policy=\"open\"} %llu\n",
         (unsigned long long)st->fallback_open);
    emit(t, "ratel_store_fallbacks_total{policy=\"closed\"} %llu\n",
         (unsigned long long)st->fallback_closed);
    emit(t, "ratel_store_fallbacks_total{policy=\"local\"} %llu\n",
         (unsigned long long)st->fallback_local);
    render_one(t, "ratel_store_cache_hits_total", "counter",
               "Denials answered by the local deny cache.", st->cache_hits);
    render_one(t, "ratel_store_round_trips_total", "counter",
               "Pipelines written to Redis and read back.", st->round_trips);
    render_one(t, "ratel_store_breaker_open", "gauge",
               "1 while Redis is considered down.", st->breaker_open);
    if (st->max_bytes == 0)
        return; /* a Redis store: no snapshot */
    render_one(t, "ratel_store_snapshot_writes_total", "counter",
               "Snapshots of the memory store written (store.snapshot).",
               st->snapshot_writes);
    render_one(t, "ratel_store_snapshot_errors_total", "counter",
               "Snapshot writes that failed (the previous file kept).",
               st->snapshot_errors);
    render_one(t, "ratel_store_snapshot_bytes", "gauge",
               "Size of the last snapshot written.", st->snapshot_bytes);
    emit_header(t, "ratel_store_snapshot_write_seconds", "gauge",
                "How long writing the last snapshot took.");
    emit(t, "ratel_store_snapshot_write_seconds %.6f\n",
         (double)st->snapshot_write_us / 1e6);
}

/* A counter of every thread's block, summed. */
static uint64_t sum_threads(rateld_metrics_t *m, size_t offset)
{
    uint64_t v = 0;

    for (unsigned th = 0; th < m->threads; th++)
        v += get((counter_t *)((char *)m->counters[th] + offset));
    return v;
}

/* Envoy's RLQS streams: open now, and per policy the reports received
   and the actions sent (the policies that have any). */
static void render_rlqs(text_t *t, rateld_metrics_t *m, size_t n)
{
    static const char *const action_name[RATELD_RLQS_ACTIONS] = {
        "assigned", "abandoned", "expired"};
    uint64_t opened = sum_threads(m, offsetof(thread_counters_t, rlqs_opened));
    uint64_t closed = sum_threads(m, offsetof(thread_counters_t, rlqs_closed));

    render_one(t, "ratel_rlqs_streams", "gauge",
               "Envoy rate limit quota (RLQS) streams open.", opened - closed);
    render_one(t, "ratel_rlqs_unmatched_total", "counter",
               "RLQS bucket_ids no rlqs bucket matched.",
               sum_threads(m, offsetof(thread_counters_t, rlqs_unmatched)));
    emit_header(t, "ratel_rlqs_reports_total", "counter",
                "RLQS usage reports received, by policy.");
    for (size_t i = 0; i < n; i++) {
        size_t off = offsetof(thread_counters_t, policies) +
                     i * sizeof(policy_counters_t);
        uint64_t v =
            sum_threads(m, off + offsetof(policy_counters_t, rlqs_reports));
        if (!v)
            continue;
        emit(t, "ratel_rlqs_reports_total{policy=\"");
        emit_label_value(t, m->names[i]);
        emit(t, "\"} %llu\n", (unsigned long long)v);
    }
    emit_header(t, "ratel_rlqs_actions_total", "counter",
                "RLQS bucket actions sent, by policy and action.");
    for (size_t i = 0; i < n; i++) {
        for (int a = 0; a < RATELD_RLQS_ACTIONS; a++) {
            size_t off = offsetof(thread_counters_t, policies) +
                         i * sizeof(policy_counters_t) +
                         offsetof(policy_counters_t, rlqs_actions) +
                         (size_t)a * sizeof(counter_t);
            uint64_t v = sum_threads(m, off);
            if (!v)
                continue;
            emit(t, "ratel_rlqs_actions_total{policy=\"");
            emit_label_value(t, m->names[i]);
            emit(t, "\",action=\"%s\"} %llu\n", action_name[a],
                 (unsigned long long)v);
        }
    }
}

char *rateld_metrics_render(rateld_metrics_t *m, const ratel_store_stats_t *st,
                            const ratel_store_health_t *health,
                            uint64_t reloads, uint64_t reload_failures,
                            size_t *len)
{
    text_t t = {NULL, 0, 0, 0};
    policy_sums_t *sums = NULL;
    size_t n;

    /* Names below n are set and never change (acquire pairs with the
       registration's release). */
    n = atomic_load_explicit(&m->npolicies, memory_order_acquire);
    if (n > 0) {
        sums = calloc(n, sizeof *sums);
        if (!sums)
            return NULL;
        for (size_t i = 0; i < n; i++)
            sum_policy(m, i, &sums[i]);
    }
    render_decisions(&t, m, n, sums);
    render_latency(&t, m, n, sums);
    free(sums);
    render_leases(&t, m, n);
    render_http(&t, m);
    render_grpc(&t, m);
    render_rlqs(&t, m, n);
    render_undecided(&t, m);
    render_abandoned(&t, m);
    if (st)
        render_store(&t, st);
    if (health) {
        render_one(&t, "ratel_store_up", "gauge",
                   "1 while the store answers (from its health, as /readyz).",
                   (uint64_t)(health->up != 0));
        render_one(&t, "ratel_store_health_changes_total", "counter",
                   "Times the store went down or came back up.",
                   health->transitions);
        render_one(&t, "ratel_store_warning", "gauge",
                   "1 while something fails without stopping decisions "
                   "(a Sentinel, a snapshot write).",
                   (uint64_t)(health->warning[0] != '\0'));
    }
    render_one(&t, "ratel_config_reloads_total", "counter",
               "Configuration reloads that took effect.", reloads);
    render_one(&t, "ratel_config_reload_failures_total", "counter",
               "Configuration reloads refused (the old one stayed).",
               reload_failures);
    if (t.failed || !reserve(&t, 0)) {
        free(t.p);
        return NULL;
    }
    t.p[t.n] = '\0';
    if (len)
        *len = t.n;
    return t.p;
}
