/*
 * test_memory_store.c - the embedded store (lib/store/memory.c).
 *
 * The store must give exactly the decisions the core gives on a private
 * buffer, keep them atomic per key under threads, forget idle keys at their
 * reset time and never hold more than max_bytes, whatever keys arrive. Time
 * is injected everywhere; nothing sleeps.
 */
#include "test.h"

#include "ratel.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define T0_US ((int64_t)1700000000 * 1000000) /* a fixed start instant */
#define MODEL_CAP 20480

/* A key's state kept by the test itself: the reference for the store. */
typedef struct model_s {
    uint8_t buf[MODEL_CAP];
    size_t len;
} model_t;

static void parse_policy(ratel_policy_t *p, const char *a, const char *b)
{
    const char *texts[2] = {a, b};
    char err[256] = "";
    int rc = ratel_policy_parse(p, texts, b ? 2 : 1, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "  policy %s: %s\n", a, err);
    CHECK_EQ(rc, 0);
}

static ratel_store_t *new_store(size_t max_bytes, unsigned shards)
{
    ratel_memory_options_t o = {max_bytes, shards};
    ratel_store_t *s = NULL;
    CHECK_EQ(ratel_store_memory_new(&s, &o), 0);
    return s;
}

static ratel_store_stats_t stats_of(ratel_store_t *s)
{
    ratel_store_stats_t st;
    ratel_store_stats(s, &st);
    return st;
}

static void check_same_decision(const ratel_decision_t *a,
                                const ratel_decision_t *b)
{
    CHECK_EQ(a->allowed, b->allowed);
    CHECK_EQ(a->rule, b->rule);
    CHECK_EQ(a->limit, b->limit);
    CHECK_EQ(a->remaining, b->remaining);
    CHECK_EQ(a->retry_after_ms, b->retry_after_ms);
    CHECK_EQ(a->reset_after_ms, b->reset_after_ms);
    CHECK_EQ(a->wait_ms, b->wait_ms);
}

/* Store acquire vs core acquire on the model; both must agree exactly. */
static int acquire_both(ratel_store_t *s, const char *key, model_t *m,
                        const ratel_policy_t *p, int64_t now,
                        const ratel_request_t *req)
{
    ratel_decision_t ds, dm;
    int rs, rm;

    memset(&ds, 0, sizeof ds);
    memset(&dm, 0, sizeof dm);
    rs = ratel_store_acquire(s, key, strlen(key), p, now, req, &ds);
    rm = ratel_policy_acquire(p, m->buf, &m->len, sizeof m->buf, now, req, &dm);
    CHECK_EQ(rs, rm);
    if (rs == 0 && rm == 0)
        check_same_decision(&ds, &dm);
    return rs == 0 && ds.allowed;
}

static void refund_both(ratel_store_t *s, const char *key, model_t *m,
                        const ratel_policy_t *p, int64_t now, uint64_t cost)
{
    ratel_decision_t ds, dm;
    int rs, rm;

    rs = ratel_store_refund(s, key, strlen(key), p, now, cost, &ds);
    rm = ratel_policy_refund(p, m->buf, &m->len, sizeof m->buf, now, cost, &dm);
    CHECK_EQ(rs, rm);
    if (rs == 0 && rm == 0)
        check_same_decision(&ds, &dm);
}

/*
 * Inspect through the store vs the core on the model. A key the store has
 * dropped at its reset time reads as no rules; the model then still holds a
 * blob, but one with nothing counted.
 */
static void inspect_both(ratel_store_t *s, const char *key, model_t *m,
                         int64_t now)
{
    ratel_rule_status_t a[RATEL_MAX_RULES], b[RATEL_MAX_RULES];
    size_t na = 99, nb = 0;

    CHECK_EQ(
        ratel_store_inspect(s, key, strlen(key), now, a, RATEL_MAX_RULES, &na),
        0);
    CHECK_EQ(ratel_state_inspect(m->buf, m->len, now, b, RATEL_MAX_RULES, &nb),
             0);
    if (na == 0) {
        for (size_t i = 0; i < nb; i++) {
            CHECK_EQ(b[i].used, 0);
            CHECK_EQ(b[i].reset_after_ms, 0);
        }
        return;
    }
    CHECK_EQ(na, nb);
    for (size_t i = 0; i < na && i < nb; i++) {
        CHECK_EQ(a[i].used, b[i].used);
        CHECK_EQ(a[i].remaining, b[i].remaining);
        CHECK_EQ(a[i].reset_after_ms, b[i].reset_after_ms);
    }
}

/*
 * Random traffic on three keys through a fresh store and through the core
 * on private buffers, compared step by step: acquires, peeks, refunds,
 * resets and inspects, with time jumping over reset times now and then.
 * Each step uses one of the `npolicies` policies at random, so a key may
 * be converted from one policy's rules to another's.
 */
static void random_traffic(const ratel_policy_t *policies, int npolicies)
{
    static const char *const keys[] = {"a", "b", "user:42"};
    static model_t models[3];
    long steps =
        ratel_test_iterations(4000) < 1000 ? 1000 : ratel_test_iterations(4000);
    ratel_store_t *s = new_store(0, 0);
    int64_t now = T0_US;

    REQUIRE(s);
    for (int k = 0; k < 3; k++)
        models[k].len = 0;
    for (long i = 0; i < steps; i++) {
        const ratel_policy_t *p =
            &policies[ratel_test_between(0, npolicies - 1)];
        int k = (int)ratel_test_between(0, 2);
        int op = (int)ratel_test_between(0, 99);
        ratel_request_t req = RATEL_REQUEST_INIT;
        int64_t jump = ratel_test_between(0, 99);
        now += jump < 45   ? ratel_test_between(0, 3000)
               : jump < 95 ? ratel_test_between(0, 300000)
                           : ratel_test_between(0, 90000000);
        req.cost = (uint64_t)ratel_test_between(1, 2);
        if (op < 60) {
            acquire_both(s, keys[k], &models[k], p, now, &req);
        } else if (op < 75) {
            req.flags = RATEL_PEEK;
            acquire_both(s, keys[k], &models[k], p, now, &req);
        } else if (op < 85) {
            refund_both(s, keys[k], &models[k], p, now, req.cost);
        } else if (op < 90) {
            CHECK_EQ(ratel_store_reset(s, keys[k], strlen(keys[k])), 0);
            models[k].len = 0;
        } else {
            inspect_both(s, keys[k], &models[k], now);
        }
    }
    /* The traffic must have crossed reset times for this to mean much. */
    CHECK(stats_of(s).expirations > 0);
    CHECK(stats_of(s).hits > 0);
    ratel_store_free(s);
}

/*
 * Every algorithm and two two-rule policies: the store decides exactly as
 * the core does, including across its expiry of idle keys.
 */
TEST(memory_store_matches_core)
{
    static const char *const policies[][2] = {
        {"5/1s", NULL},         {"3/2s:fixed", NULL},
        {"4/1s:approx", NULL},  {"5/1s:gcra,burst=3", NULL},
        {"2/1s", "10/1m:gcra"}, {"20/500ms", "50/3s:fixed"},
    };

    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
        ratel_policy_t p;
        parse_policy(&p, policies[i][0], policies[i][1]);
        random_traffic(&p, 1);
    }
}

/*
 * Keys switching between two policies (a config edit): the core converts
 * the state, possibly on a denied request, and the store's expiry follows
 * the converted state, so decisions still match the core's.
 */
TEST(memory_store_policy_change_matches_core)
{
    static const char *const pairs[][2] = {
        {"5/1s:gcra", "3/1s:gcra,burst=6"},
        {"5/1s", "8/1s"},
        {"4/2s:fixed", "6/2s:fixed"},
        {"4/1s:approx", "2/1s:approx"},
        {"10/1s:gcra", "10/1s"},
    };

    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        ratel_policy_t p[2];
        parse_policy(&p[0], pairs[i][0], NULL);
        parse_policy(&p[1], pairs[i][1], NULL);
        random_traffic(p, 2);
    }
}

/* Peeks and refunds for keys never seen store nothing. */
TEST(memory_store_unknown_keys_cost_nothing)
{
    ratel_policy_t p;
    ratel_store_t *s = new_store(0, 0);
    ratel_request_t peek = {1, 0, RATEL_PEEK, NULL};
    ratel_decision_t d;
    ratel_store_stats_t st;
    size_t n = 7;

    parse_policy(&p, "10/1m", NULL);
    REQUIRE(s);
    CHECK_EQ(ratel_store_acquire(s, "x", 1, &p, T0_US, &peek, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(d.remaining, 10);
    CHECK_EQ(ratel_store_refund(s, "y", 1, &p, T0_US, 3, &d), 0);
    CHECK_EQ(ratel_store_inspect(s, "z", 1, T0_US, NULL, 0, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(ratel_store_reset(s, "w", 1), 0);
    st = stats_of(s);
    CHECK_EQ(st.keys, 0);
    CHECK_EQ(st.hits, 0);
    CHECK_EQ(st.misses, 0);
    ratel_store_free(s);
}

/*
 * Keys vanish at their reset time: just before it they are still limited,
 * at it they start afresh, and an access removes the idle entry (the key
 * count drops and `expirations` counts it).
 */
TEST(memory_store_expiry_at_reset_time)
{
    ratel_policy_t p;
    ratel_store_t *s = new_store(0, 1);
    ratel_request_t acq = RATEL_REQUEST_INIT, peek = {1, 0, RATEL_PEEK, NULL};
    ratel_decision_t d;
    ratel_store_stats_t st;
    char key[16];

    parse_policy(&p, "1/1s", NULL);
    REQUIRE(s);
    /* Key ki takes its permit at T0 + i ms and is full until T0 + 1 s + i ms.
     */
    for (int i = 0; i < 10; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        CHECK_EQ(ratel_store_acquire(s, key, (size_t)len, &p, T0_US + i * 1000,
                                     &acq, &d),
                 0);
        CHECK_EQ(d.allowed, 1);
        CHECK_EQ(d.reset_after_ms, 1000);
    }
    st = stats_of(s);
    CHECK_EQ(st.keys, 10);
    CHECK_EQ(st.misses, 10);

    /* At k0's reset time it is free again: expired, decided as new. */
    CHECK_EQ(ratel_store_acquire(s, "k0", 2, &p, T0_US + 1000000, &acq, &d), 0);
    CHECK_EQ(d.allowed, 1);
    st = stats_of(s);
    CHECK_EQ(st.expirations, 1);
    CHECK_EQ(st.keys, 10);
    CHECK_EQ(st.hits, 0);
    CHECK_EQ(st.misses, 11);

    /* 1 us before k1's reset time it is still full. */
    CHECK_EQ(ratel_store_acquire(s, "k1", 2, &p, T0_US + 1000999, &peek, &d),
             0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(stats_of(s).hits, 1);

    /* Peeking at the others at their reset time drops them. k1's expiry
     * was just taken again from a rounded-up 1 ms: it goes 1 ms later. */
    for (int i = 2; i < 10; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        CHECK_EQ(ratel_store_acquire(s, key, (size_t)len, &p,
                                     T0_US + 1000000 + i * 1000, &peek, &d),
                 0);
        CHECK_EQ(d.remaining, 1);
    }
    CHECK_EQ(ratel_store_acquire(s, "k1", 2, &p, T0_US + 1002000, &peek, &d),
             0);
    CHECK_EQ(d.remaining, 1);
    st = stats_of(s);
    CHECK_EQ(st.keys, 1);
    CHECK_EQ(st.expirations, 10);

    /* Inspecting an expired key also drops it. */
    {
        size_t n = 9;
        ratel_rule_status_t rs[1];
        CHECK_EQ(ratel_store_inspect(s, "k0", 2, T0_US + 2000000, rs, 1, &n),
                 0);
        CHECK_EQ(n, 0);
        st = stats_of(s);
        CHECK_EQ(st.keys, 0);
        CHECK_EQ(st.expirations, 11);
    }
    ratel_store_free(s);
}

/* ------------------------------------------------------------- threads */

typedef struct hammer_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    pthread_barrier_t *start;
    int id;
    long attempts;
    long allowed;
    int errors;
    /* distinct keys: the decisions seen, for the single-threaded replay */
    int64_t *times;
    ratel_decision_t *seen;
} hammer_t;

static void *hammer_one_key(void *arg)
{
    hammer_t *h = arg;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;

    pthread_barrier_wait(h->start);
    for (long i = 0; i < h->attempts; i++) {
        if (ratel_store_acquire(h->store, "hot", 3, h->policy, T0_US, &req,
                                &d) != 0)
            h->errors++;
        else
            h->allowed += d.allowed;
    }
    return NULL;
}

/*
 * Four threads at the same instant on ONE key admit exactly the limit under
 * every algorithm: the shard lock makes decide-and-charge atomic.
 */
TEST(memory_store_threads_one_key_exact)
{
    static const char *const rules[] = {"1000/1h", "1000/1h:gcra",
                                        "1000/1h:fixed", "1000/1h:approx"};
    enum { NTHREADS = 4 };

    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        ratel_policy_t p;
        ratel_store_t *s = new_store(0, 0);
        pthread_barrier_t start;
        pthread_t tid[NTHREADS];
        hammer_t h[NTHREADS];
        long total = 0;

        parse_policy(&p, rules[r], NULL);
        REQUIRE(s);
        pthread_barrier_init(&start, NULL, NTHREADS);
        for (int t = 0; t < NTHREADS; t++) {
            memset(&h[t], 0, sizeof h[t]);
            h[t].store = s;
            h[t].policy = &p;
            h[t].start = &start;
            h[t].attempts = 1000;
            REQUIRE(pthread_create(&tid[t], NULL, hammer_one_key, &h[t]) == 0);
        }
        for (int t = 0; t < NTHREADS; t++) {
            pthread_join(tid[t], NULL);
            total += h[t].allowed;
            CHECK_EQ(h[t].errors, 0);
        }
        if (total != 1000)
            fprintf(stderr, "  %s admitted %ld\n", rules[r], total);
        CHECK_EQ(total, 1000);
        CHECK_EQ(stats_of(s).keys, 1);
        pthread_barrier_destroy(&start);
        ratel_store_free(s);
    }
}

/* A batch item of group `group` for key `key` under `p`. */
static ratel_batch_item_t item(const char *key, const ratel_policy_t *p,
                               uint32_t group)
{
    ratel_batch_item_t it;
    memset(&it, 0, sizeof it);
    it.key = key;
    it.keylen = strlen(key);
    it.policy = p;
    it.request = (ratel_request_t)RATEL_REQUEST_INIT;
    it.group = group;
    return it;
}

/* remaining of `key` under `p` as a peek at T0_US (full: the limit). */
static int64_t remaining_of(ratel_store_t *s, const char *key,
                            const ratel_policy_t *p)
{
    ratel_request_t peek = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    peek.flags = RATEL_PEEK;
    CHECK_EQ(ratel_store_acquire(s, key, strlen(key), p, T0_US, &peek, &d), 0);
    return d.remaining;
}

/* A group of a batch is all-or-nothing; every member reports its own
   decision; a group with the same key twice, or too long, is handled. */
TEST(memory_store_group_all_or_nothing)
{
    ratel_policy_t two, one;
    ratel_store_t *s = new_store(0, 0);
    ratel_batch_item_t it[RATEL_GROUP_MAX + 1];

    REQUIRE(s);
    parse_policy(&two, "2/1m", NULL);
    parse_policy(&one, "1/1m", NULL);
    memset(it, 0, sizeof it);
    it[0] = item("a", &two, 7);
    it[1] = item("b", &one, 7);
    it[2] = item("c", &one, 0);
    CHECK_EQ(ratel_store_acquire_batch(s, it, 3, T0_US), 0);
    CHECK(it[0].decision.allowed && it[1].decision.allowed);
    CHECK_EQ(remaining_of(s, "a", &two), 1);
    CHECK_EQ(remaining_of(s, "b", &one), 0);
    /* b is exhausted: the group is denied and a is not charged; a alone
       would have been admitted and says so. */
    CHECK_EQ(ratel_store_acquire_batch(s, it, 2, T0_US), 0);
    CHECK(it[0].rc == 0 && it[0].decision.allowed);
    CHECK(it[1].rc == 0 && !it[1].decision.allowed);
    CHECK(it[1].decision.retry_after_ms > 0);
    CHECK_EQ(remaining_of(s, "a", &two), 1);
    /* The same key twice: the second member is denied after the first
       was charged; the first is given back. */
    it[0] = item("d", &one, 9);
    it[1] = item("d", &one, 9);
    CHECK_EQ(ratel_store_acquire_batch(s, it, 2, T0_US), 0);
    CHECK_EQ(remaining_of(s, "d", &one), 1);
    /* Too long a group: refused whole. */
    for (int i = 0; i <= RATEL_GROUP_MAX; i++)
        it[i] = item("e", &two, 3);
    CHECK_EQ(ratel_store_acquire_batch(s, it, RATEL_GROUP_MAX + 1, T0_US), 0);
    for (int i = 0; i <= RATEL_GROUP_MAX; i++)
        CHECK_EQ(it[i].rc, RATEL_EINVAL);
    CHECK_EQ(remaining_of(s, "e", &two), 2);
    ratel_store_free(s);
}

typedef struct grouper_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    pthread_barrier_t *start;
    int reverse; /* the other order of the same two keys */
    long groups_allowed;
} grouper_t;

static void *group_hammer(void *arg)
{
    grouper_t *g = arg;
    pthread_barrier_wait(g->start);
    for (int i = 0; i < 3000; i++) {
        ratel_batch_item_t it[2] = {item(g->reverse ? "y" : "x", g->policy, 1),
                                    item(g->reverse ? "x" : "y", g->policy, 1)};
        ratel_store_acquire_batch(g->store, it, 2, T0_US);
        g->groups_allowed += it[0].decision.allowed && it[1].decision.allowed;
    }
    return NULL;
}

/*
 * Threads deciding groups of the same two keys, in both orders, in a
 * store of a few shards: no deadlock, and every admitted group charged
 * both keys, every refused one neither - x and y end equal, at the limit,
 * with exactly `limit` groups admitted.
 */
TEST(memory_store_group_atomic_under_threads)
{
    enum { NTHREADS = 4 };
    ratel_policy_t p;
    ratel_store_t *s = new_store(0, 2);
    pthread_barrier_t start;
    pthread_t tid[NTHREADS];
    grouper_t g[NTHREADS];
    long total = 0;

    REQUIRE(s);
    parse_policy(&p, "5000/1h", NULL);
    pthread_barrier_init(&start, NULL, NTHREADS);
    for (int t = 0; t < NTHREADS; t++) {
        g[t] = (grouper_t){s, &p, &start, t % 2, 0};
        REQUIRE(pthread_create(&tid[t], NULL, group_hammer, &g[t]) == 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(tid[t], NULL);
        total += g[t].groups_allowed;
    }
    CHECK_EQ(total, 5000);
    CHECK_EQ(remaining_of(s, "x", &p), 0);
    CHECK_EQ(remaining_of(s, "y", &p), 0);
    pthread_barrier_destroy(&start);
    ratel_store_free(s);
}

#define DISTINCT_KEYS 8
#define DISTINCT_STEPS 3000

static void distinct_key(char *buf, size_t size, int thread, long i)
{
    snprintf(buf, size, "t%d:key%ld", thread, i % DISTINCT_KEYS);
}

static void *hammer_distinct(void *arg)
{
    hammer_t *h = arg;
    ratel_request_t req = RATEL_REQUEST_INIT;
    char key[32];

    pthread_barrier_wait(h->start);
    for (long i = 0; i < h->attempts; i++) {
        distinct_key(key, sizeof key, h->id, i);
        req.flags = i % 7 == 3 ? RATEL_PEEK : 0;
        if (ratel_store_acquire(h->store, key, strlen(key), h->policy,
                                h->times[i], &req, &h->seen[i]) != 0)
            h->errors++;
    }
    return NULL;
}

/*
 * Threads on disjoint keys, in a small store shared by all of them, see
 * exactly the decisions a single thread sees replaying each one's traffic
 * alone.
 */
TEST(memory_store_threads_distinct_keys_agree)
{
    enum { NTHREADS = 4 };
    ratel_policy_t p;
    ratel_store_t *s = new_store(0, 0), *alone;
    pthread_barrier_t start;
    pthread_t tid[NTHREADS];
    hammer_t h[NTHREADS];
    long steps = ratel_test_iterations(DISTINCT_STEPS) < 500
                     ? 500
                     : ratel_test_iterations(DISTINCT_STEPS);

    parse_policy(&p, "20/1s", "100/1m:gcra");
    REQUIRE(s);
    pthread_barrier_init(&start, NULL, NTHREADS);
    for (int t = 0; t < NTHREADS; t++) {
        int64_t now = T0_US;
        memset(&h[t], 0, sizeof h[t]);
        h[t].store = s;
        h[t].policy = &p;
        h[t].start = &start;
        h[t].id = t;
        h[t].attempts = steps;
        h[t].times = calloc((size_t)steps, sizeof *h[t].times);
        h[t].seen = calloc((size_t)steps, sizeof *h[t].seen);
        REQUIRE(h[t].times && h[t].seen);
        for (long i = 0; i < steps; i++)
            h[t].times[i] = now += ratel_test_between(0, 2000);
    }
    for (int t = 0; t < NTHREADS; t++)
        REQUIRE(pthread_create(&tid[t], NULL, hammer_distinct, &h[t]) == 0);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(tid[t], NULL);

    for (int t = 0; t < NTHREADS; t++) {
        ratel_request_t req = RATEL_REQUEST_INIT;
        ratel_decision_t d;
        char key[32];
        long admitted = 0;
        CHECK_EQ(h[t].errors, 0);
        alone = new_store(0, 0);
        REQUIRE(alone);
        for (long i = 0; i < steps; i++) {
            distinct_key(key, sizeof key, t, i);
            req.flags = i % 7 == 3 ? RATEL_PEEK : 0;
            CHECK_EQ(ratel_store_acquire(alone, key, strlen(key), &p,
                                         h[t].times[i], &req, &d),
                     0);
            check_same_decision(&h[t].seen[i], &d);
            admitted += d.allowed;
        }
        CHECK(admitted > 0 && admitted < steps);
        ratel_store_free(alone);
        free(h[t].times);
        free(h[t].seen);
    }
    pthread_barrier_destroy(&start);
    ratel_store_free(s);
}

/* ---------------------------------------------------------------- bound */

/* Bytes the process's heap holds now (arena in use plus mmapped chunks). */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/*
 * A flood of unique keys (1,000,000 at scale 1) into an 8 MiB store: the
 * store's count of its bytes never passes the bound, the heap really grows
 * only about that much, and the oldest keys are evicted to make room.
 */
TEST(memory_store_unique_key_flood_is_bounded)
{
    long nkeys = ratel_test_iterations(1000000);
    size_t max_bytes = (size_t)nkeys * 8;
    size_t before, peak = 0;
    ratel_policy_t p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    ratel_store_stats_t st;
    ratel_store_t *s;
    char key[32];
    int64_t now = T0_US;

    if (max_bytes > (size_t)8 << 20)
        max_bytes = (size_t)8 << 20;
    if (max_bytes < (size_t)256 << 10)
        max_bytes = (size_t)256 << 10;
    parse_policy(&p, "10/1h", NULL);
    before = heap_in_use();
    s = new_store(max_bytes, 0);
    REQUIRE(s);
    for (long i = 0; i < nkeys; i++) {
        int len = snprintf(key, sizeof key, "flood:%ld", i);
        CHECK_EQ(
            ratel_store_acquire(s, key, (size_t)len, &p, now += 7, &req, &d),
            0);
        if (i % 4096 == 0 || i == nkeys - 1) {
            size_t heap = heap_in_use();
            st = stats_of(s);
            CHECK(st.bytes <= max_bytes);
            if (heap > before && heap - before > peak)
                peak = heap - before;
        }
    }
    st = stats_of(s);
    CHECK(st.bytes <= max_bytes);
    CHECK_EQ(st.max_bytes, max_bytes);
    CHECK((long)st.keys < nkeys);
    CHECK(st.keys > 0);
    CHECK(st.evictions > 0);
    CHECK_EQ(st.expirations, 0);
    CHECK_EQ(st.misses, nkeys);
    CHECK_EQ(st.keys + st.evictions, nkeys);
    /* The newest key is still there; the first one went long ago. */
    {
        size_t n = 0;
        ratel_rule_status_t rs[1];
        int len = snprintf(key, sizeof key, "flood:%ld", nkeys - 1);
        CHECK_EQ(ratel_store_inspect(s, key, (size_t)len, now, rs, 1, &n), 0);
        CHECK_EQ(n, 1);
        CHECK_EQ(ratel_store_inspect(s, "flood:0", 7, now, rs, 1, &n), 0);
        CHECK_EQ(n, 0);
    }
    /* mallinfo2 reads zero under ASan and valgrind: then this is vacuous. */
    if (peak >= max_bytes + max_bytes / 4)
        fprintf(stderr, "  heap grew %zu bytes for a %zu-byte store\n", peak,
                max_bytes);
    CHECK(peak < max_bytes + max_bytes / 4);
    ratel_store_free(s);
}

/*
 * In a one-shard store at its minimum size, the key used most recently
 * survives a flood and the least recently used ones go first.
 */
TEST(memory_store_evicts_least_recently_used)
{
    ratel_policy_t p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    ratel_rule_status_t rs[1];
    ratel_store_t *s = new_store(64 << 10, 64);
    ratel_store_stats_t st;
    char key[32];
    size_t n;

    parse_policy(&p, "1000/1h", NULL);
    REQUIRE(s);
    for (int i = 0; i < 5000; i++) {
        int len = snprintf(key, sizeof key, "key:%d", i);
        CHECK_EQ(
            ratel_store_acquire(s, key, (size_t)len, &p, T0_US + i, &req, &d),
            0);
        /* keep "key:0" warm */
        CHECK_EQ(ratel_store_acquire(s, "key:0", 5, &p, T0_US + i, &req, &d),
                 0);
        CHECK(stats_of(s).bytes <= 64 << 10);
    }
    st = stats_of(s);
    CHECK(st.evictions > 0);
    CHECK(st.keys > 100);
    CHECK_EQ(ratel_store_inspect(s, "key:0", 5, T0_US + 5000, rs, 1, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(rs[0].used, 1000);
    CHECK_EQ(ratel_store_inspect(s, "key:1", 5, T0_US + 5000, rs, 1, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(ratel_store_inspect(s, "key:4999", 8, T0_US + 5000, rs, 1, &n), 0);
    CHECK_EQ(n, 1);
    ratel_store_free(s);
}

/* ---------------------------------------------------------------- growth */

/*
 * A sliding rule with a limit in the thousands, driven at many distinct
 * milliseconds, makes the core ask for more room (RATEL_ENOBUFS) again and
 * again: the store grows the entry in place of the old one and the
 * decisions stay those of the core. Several keys grow interleaved so that
 * entries move while linked into the table and the LRU list.
 */
TEST(memory_store_entry_growth)
{
    static model_t models[4];
    static const char *const keys[] = {"g0", "g1", "g2", "g3"};
    ratel_policy_t p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_store_t *s = new_store(0, 1);
    ratel_rule_status_t rs[2];
    ratel_store_stats_t st;
    int64_t now = T0_US;
    long steps = ratel_test_iterations(3000), admitted = 0;
    size_t n;

    parse_policy(&p, "5000/1h", "100000/1d:fixed");
    REQUIRE(s);
    for (int k = 0; k < 4; k++)
        models[k].len = 0;
    for (long i = 0; i < steps; i++) {
        int k = (int)(i % 4);
        now += 1000 + ratel_test_between(0, 999);
        admitted += acquire_both(s, keys[k], &models[k], &p, now, &req);
    }
    CHECK_EQ(admitted, steps);
    st = stats_of(s);
    CHECK_EQ(st.keys, 4);
    CHECK_EQ(st.misses, 4);
    CHECK_EQ(st.hits, steps - 4);
    for (int k = 0; k < 4; k++) {
        inspect_both(s, keys[k], &models[k], now);
        CHECK_EQ(ratel_store_inspect(s, keys[k], 2, now, rs, 2, &n), 0);
        CHECK_EQ(n, 2);
        CHECK(rs[0].runs > 1);
        CHECK(rs[0].runs <= RATEL_SLIDING_CAP);
    }
    /* Four blobs of up to ~2 KiB each, plus a 64-bucket-ish table. */
    CHECK(st.bytes > 4 * models[0].len);
    ratel_store_free(s);
}

/*
 * Growing entries in a store too small for all of them: growth evicts other
 * keys, never the one growing, and the bound holds throughout.
 */
TEST(memory_store_growth_under_pressure)
{
    ratel_policy_t p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    ratel_store_t *s = new_store(64 << 10, 1);
    ratel_store_stats_t st;
    int64_t now = T0_US;
    char key[16];
    long steps = 20000; /* not scaled: fewer would not fill the store */

    parse_policy(&p, "3000/1h", NULL);
    REQUIRE(s);
    for (long i = 0; i < steps; i++) {
        int len = snprintf(key, sizeof key, "p%ld", i % 61);
        now += 1000;
        CHECK_EQ(ratel_store_acquire(s, key, (size_t)len, &p, now, &req, &d),
                 0);
        if (i % 64 == 0)
            CHECK(stats_of(s).bytes <= 64 << 10);
    }
    st = stats_of(s);
    CHECK(st.bytes <= 64 << 10);
    CHECK(st.evictions > 0);
    CHECK(st.keys > 0);
    ratel_store_free(s);
}

/* ----------------------------------------------------------- arguments */

/*
 * Bad arguments are RATEL_EINVAL, never a crash. The empty key is a key
 * like any other; keys longer than 4,096 bytes are RATEL_ERANGE.
 */
TEST(memory_store_bad_arguments)
{
    ratel_policy_t p, empty;
    ratel_request_t req = RATEL_REQUEST_INIT, zero = {0, 0, 0, NULL};
    ratel_decision_t d;
    ratel_rule_status_t rs[1];
    ratel_store_stats_t st;
    ratel_memory_options_t tiny = {1000, 0}, odd = {100 << 10, 3},
                           huge = {((size_t)1 << 40) + 1, 0},
                           least = {(size_t)64 << 10, 0};
    ratel_store_t *s = NULL;
    static char longkey[5000];
    size_t n;

    parse_policy(&p, "2/1s", NULL);
    memset(&empty, 0, sizeof empty);

    CHECK_EQ(ratel_store_memory_new(NULL, NULL), RATEL_EINVAL);
    CHECK_EQ(ratel_store_memory_new(&s, &tiny), RATEL_EINVAL);
    CHECK(s == NULL);
    /* max_bytes's range is the option table's, as YAML reads it. */
    CHECK_EQ(ratel_store_memory_new(&s, &huge), RATEL_EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(ratel_store_memory_new(&s, &least), 0);
    REQUIRE(s);
    ratel_store_free(s);
    s = NULL;
    CHECK_EQ(ratel_store_memory_new(&s, &odd), 0);
    REQUIRE(s);
    CHECK(stats_of(s).bytes <= 100 << 10);
    ratel_store_free(s);
    s = NULL;
    REQUIRE(ratel_store_memory_new(&s, NULL) == 0);
    CHECK_EQ(stats_of(s).max_bytes, 64 << 20);

    CHECK_EQ(ratel_store_acquire(NULL, "k", 1, &p, T0_US, &req, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, NULL, 1, &p, T0_US, &req, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, NULL, T0_US, &req, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, T0_US, NULL, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, T0_US, &req, NULL),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &empty, T0_US, &req, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, T0_US, &zero, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, -1, &req, &d), RATEL_EINVAL);
    req.cost = 3;
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, T0_US, &req, &d), RATEL_ECOST);
    req.cost = 1;
    CHECK_EQ(ratel_store_refund(NULL, "k", 1, &p, T0_US, 1, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_store_refund(s, NULL, 1, &p, T0_US, 1, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_store_refund(s, "k", 1, NULL, T0_US, 1, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_store_refund(s, "k", 1, &p, T0_US, 1, NULL), RATEL_EINVAL);
    CHECK_EQ(ratel_store_refund(s, "k", 1, &p, T0_US, 0, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_store_reset(NULL, "k", 1), RATEL_EINVAL);
    CHECK_EQ(ratel_store_reset(s, NULL, 1), RATEL_EINVAL);
    CHECK_EQ(ratel_store_inspect(NULL, "k", 1, T0_US, rs, 1, &n), RATEL_EINVAL);
    CHECK_EQ(ratel_store_inspect(s, NULL, 1, T0_US, rs, 1, &n), RATEL_EINVAL);
    CHECK_EQ(ratel_store_inspect(s, "k", 1, T0_US, rs, 1, NULL), RATEL_EINVAL);
    CHECK_EQ(ratel_store_inspect(s, "k", 1, T0_US, NULL, 1, &n), RATEL_EINVAL);
    CHECK_EQ(stats_of(s).keys, 0);

    /* A bad time is refused before the key is looked up: a live key is not
     * found "expired" by an instant far in the future. */
    CHECK_EQ(ratel_store_acquire(s, "t", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(ratel_store_acquire(s, "t", 1, &p, RATEL_TIME_MAX_US, &req, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_refund(s, "t", 1, &p, RATEL_TIME_MAX_US, 1, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_inspect(s, "t", 1, INT64_MAX, rs, 1, &n),
             RATEL_EINVAL);
    CHECK_EQ(stats_of(s).keys, 1);
    CHECK_EQ(stats_of(s).expirations, 0);
    CHECK_EQ(ratel_store_reset(s, "t", 1), 0);

    /* The empty key works and is distinct from every other key. */
    CHECK_EQ(ratel_store_acquire(s, "", 0, &p, T0_US, &req, &d), 0);
    CHECK_EQ(ratel_store_acquire(s, "", 0, &p, T0_US, &req, &d), 0);
    CHECK_EQ(ratel_store_acquire(s, "", 0, &p, T0_US, &req, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(ratel_store_acquire(s, "k", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(ratel_store_inspect(s, "", 0, T0_US, rs, 1, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(rs[0].used, 2);

    /* Keys up to 4,096 bytes are kept; longer ones are refused. */
    memset(longkey, 'x', sizeof longkey);
    CHECK_EQ(ratel_store_acquire(s, longkey, 4096, &p, T0_US, &req, &d), 0);
    CHECK_EQ(ratel_store_acquire(s, longkey, 4097, &p, T0_US, &req, &d),
             RATEL_ERANGE);
    CHECK_EQ(ratel_store_reset(s, longkey, 4096), 0);
    CHECK_EQ(ratel_store_reset(s, longkey, 4097), 0);

    ratel_store_stats(NULL, &st);
    CHECK_EQ(st.keys, 0);
    CHECK_EQ(st.max_bytes, 0);
    ratel_store_stats(s, NULL);
    ratel_store_free(s);
    ratel_store_free(NULL);
}

/* Reset forgets a key at once; refund gives permits back through the store. */
TEST(memory_store_reset_and_refund)
{
    ratel_policy_t p;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    ratel_store_t *s = new_store(0, 0);

    parse_policy(&p, "2/1m", NULL);
    REQUIRE(s);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ratel_store_acquire(s, "r", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(ratel_store_refund(s, "r", 1, &p, T0_US, 1, &d), 0);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(ratel_store_acquire(s, "r", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(d.allowed, 1);
    /* Refunding everything leaves no state: the entry goes. */
    CHECK_EQ(ratel_store_refund(s, "r", 1, &p, T0_US, 5, &d), 0);
    CHECK_EQ(d.remaining, 2);
    CHECK_EQ(stats_of(s).keys, 0);
    CHECK_EQ(ratel_store_acquire(s, "r", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(stats_of(s).keys, 1);
    CHECK_EQ(ratel_store_reset(s, "r", 1), 0);
    CHECK_EQ(stats_of(s).keys, 0);
    CHECK_EQ(ratel_store_acquire(s, "r", 1, &p, T0_US, &req, &d), 0);
    CHECK_EQ(d.remaining, 1);
    ratel_store_free(s);
}

RATEL_SUITE(memory_store) = {
    {"memory_store_matches_core", test_memory_store_matches_core},
    {"memory_store_policy_change_matches_core",
     test_memory_store_policy_change_matches_core},
    {"memory_store_unknown_keys_cost_nothing",
     test_memory_store_unknown_keys_cost_nothing},
    {"memory_store_expiry_at_reset_time",
     test_memory_store_expiry_at_reset_time},
    {"memory_store_threads_one_key_exact",
     test_memory_store_threads_one_key_exact},
    {"memory_store_group_all_or_nothing",
     test_memory_store_group_all_or_nothing},
    {"memory_store_group_atomic_under_threads",
     test_memory_store_group_atomic_under_threads},
    {"memory_store_threads_distinct_keys_agree",
     test_memory_store_threads_distinct_keys_agree},
    {"memory_store_unique_key_flood_is_bounded",
     test_memory_store_unique_key_flood_is_bounded},
    {"memory_store_evicts_least_recently_used",
     test_memory_store_evicts_least_recently_used},
    {"memory_store_entry_growth", test_memory_store_entry_growth},
    {"memory_store_growth_under_pressure",
     test_memory_store_growth_under_pressure},
    {"memory_store_bad_arguments", test_memory_store_bad_arguments},
    {"memory_store_reset_and_refund", test_memory_store_reset_and_refund},
    {0},
};
