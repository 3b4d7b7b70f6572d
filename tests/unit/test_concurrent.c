/*
 * test_concurrent.c - the concurrent rule: at most LIMIT permits held at
 * once under leases that are released, renewed or expire after PERIOD.
 * Checked by hand on small cases, against a brute-force model of the
 * leases over random traces, all-or-nothing with rate rules, and under
 * threads on the memory store.
 */
#include "core_helpers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static int release_at(test_key_t *k, int64_t t_ms, uint32_t lease,
                      unsigned flags, int *held)
{
    ratel_decision_t d;
    return ratel_policy_release(&k->policy, k->buf, &k->len, sizeof k->buf,
                                t_ms * 1000, lease, flags, held, &d);
}

TEST(concurrent_leases_by_hand)
{
    test_key_t k;
    ratel_decision_t d;
    int held = -1;
    static const char *const rules[] = {"3/10s:concurrent", NULL};

    REQUIRE(test_key_init(&k, rules) == 0);
    for (uint32_t i = 1; i <= 3; i++) {
        CHECK_EQ(test_take(&k, 1000 * i, 1, &d), 1);
        CHECK_EQ(d.lease, i);
        CHECK_EQ(d.remaining, 3 - i);
    }
    /* Full: the first lease expires at 11,000. */
    CHECK_EQ(test_take(&k, 4000, 1, &d), 0);
    CHECK_EQ(d.lease, 0);
    CHECK_EQ(d.retry_after_ms, 7000);
    CHECK_EQ(d.reset_after_ms, 9000);
    /* A peek takes no lease. */
    CHECK_EQ(test_peek(&k, 4000, 1, &d), 0);
    CHECK_EQ(d.lease, 0);

    CHECK_EQ(release_at(&k, 5000, 2, 0, &held), 0);
    CHECK_EQ(held, 1);
    CHECK_EQ(release_at(&k, 5000, 2, 0, &held), 0);
    CHECK_EQ(held, 0); /* released twice: a result, nothing else changes */
    CHECK_EQ(release_at(&k, 5000, 99, 0, &held), 0);
    CHECK_EQ(held, 0);
    CHECK_EQ(test_take(&k, 5000, 1, &d), 1);
    CHECK_EQ(d.lease, 4);
    CHECK_EQ(test_take(&k, 5000, 1, &d), 0);
    /* Lease 1 expires at exactly 11,000: held at 10,999, gone at 11,000. */
    CHECK_EQ(test_peek(&k, 10999, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(test_take(&k, 11000, 1, &d), 1);
    CHECK_EQ(d.lease, 5);
    /* An expired lease is unknown. */
    CHECK_EQ(release_at(&k, 11000, 1, 0, &held), 0);
    CHECK_EQ(held, 0);
    /* Everything expires: the key carries no state. */
    CHECK_EQ(release_at(&k, 30000, 5, 0, &held), 0);
    CHECK_EQ(k.len, 0);
}

TEST(concurrent_renew_and_cost)
{
    test_key_t k;
    ratel_decision_t d;
    int held = -1;
    static const char *const rules[] = {"4/30s:concurrent", NULL};

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0, 3, &d), 1); /* one lease of three permits */
    CHECK_EQ(d.lease, 1);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(test_take(&k, 0, 2, &d), 0);
    CHECK_EQ(d.retry_after_ms, 30000);
    CHECK_EQ(release_at(&k, 20000, 1, RATEL_RENEW, &held), 0);
    CHECK_EQ(held, 1);
    /* Renewed at 20 s: held until 50 s, all three permits. */
    CHECK_EQ(test_take(&k, 49999, 2, &d), 0);
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(test_take(&k, 50000, 4, &d), 1);
    CHECK_EQ(d.lease, 2);
    CHECK_EQ(release_at(&k, 50001, 2, 0, &held), 0);
    CHECK_EQ(held, 1);
    CHECK_EQ(k.len, 0);
    /* Renewing an unknown lease changes nothing. */
    CHECK_EQ(release_at(&k, 50001, 2, RATEL_RENEW, &held), 0);
    CHECK_EQ(held, 0);
    /* A refund gives back the newest permits. */
    CHECK_EQ(test_take(&k, 60000, 1, &d), 1);
    CHECK_EQ(test_take(&k, 60001, 2, &d), 1);
    CHECK_EQ(test_refund(&k, 60002, 2, &d), 0);
    CHECK_EQ(d.remaining, 3);
    CHECK_EQ(d.reset_after_ms, 29998);
}

/* A rate rule that denies charges no lease, and a full concurrent rule
   charges no rate rule. */
TEST(concurrent_all_or_nothing)
{
    test_key_t k;
    ratel_decision_t d;
    ratel_rule_status_t st[2];
    size_t n = 0;
    int held;
    static const char *const rules[] = {"3/1m", "2/30s:concurrent", NULL};

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0, 1, &d), 1);
    CHECK_EQ(test_take(&k, 1, 1, &d), 1);
    CHECK_EQ(test_take(&k, 2, 1, &d), 0);
    CHECK_EQ(d.rule, 1);
    REQUIRE(ratel_state_inspect(k.buf, k.len, 2000, st, 2, &n) == 0);
    CHECK_EQ(st[0].used, 2); /* the sliding rule was not charged */
    CHECK_EQ(release_at(&k, 3, 1, 0, &held), 0);
    CHECK_EQ(held, 1);
    CHECK_EQ(test_take(&k, 4, 1, &d), 1);
    CHECK_EQ(d.lease, 3);
    CHECK_EQ(release_at(&k, 5, 3, 0, &held), 0);
    /* Now the sliding rule (3 a minute) is full: no lease is taken. */
    CHECK_EQ(test_take(&k, 6, 1, &d), 0);
    CHECK_EQ(d.rule, 0);
    CHECK_EQ(d.lease, 0);
    REQUIRE(ratel_state_inspect(k.buf, k.len, 6000, st, 2, &n) == 0);
    CHECK_EQ(st[1].used, 1);
    CHECK_EQ(st[1].last_lease, 3);
}

TEST(concurrent_rule_errors)
{
    ratel_rule_t r;
    ratel_policy_t p;
    char err[256];
    static const char *const two[] = {"2/1s:concurrent", "5/1m:concurrent"};
    ratel_request_t wait = {1, 100, 0, NULL};

    CHECK_EQ(ratel_rule_parse("256/1s:concurrent", 17, &r, err, sizeof err), 0);
    CHECK_EQ(ratel_rule_parse("257/1s:concurrent", 17, &r, err, sizeof err),
             RATEL_ERULE);
    CHECK(strstr(err, "at most 256 leases") != NULL);
    CHECK_EQ(ratel_rule_parse("1000000/1s:concurrent", 21, &r, err, sizeof err),
             RATEL_ERULE);
    CHECK_EQ(
        ratel_rule_parse("2/1s:concurrent,burst=3", 23, &r, err, sizeof err),
        RATEL_ERULE);
    CHECK(strstr(err, "burst applies to gcra") != NULL);
    CHECK_EQ(
        ratel_rule_parse("2/1d:concurrent,tz=+08:00", 25, &r, err, sizeof err),
        RATEL_ERULE);
    CHECK_EQ(ratel_rule_parse("2/1s:concurrency", 16, &r, err, sizeof err),
             RATEL_ERULE);
    CHECK(strstr(err, "use sliding, fixed, approx, gcra or concurrent") !=
          NULL);
    CHECK_EQ(ratel_policy_parse(&p, two, 2, err, sizeof err), RATEL_EINVAL);
    CHECK(strstr(err, "at most one") != NULL);
    REQUIRE(ratel_policy_parse(&p, two, 1, err, sizeof err) == 0);
    CHECK_EQ(ratel_policy_check_request(&p, &wait, NULL), RATEL_EINVAL);
    CHECK_EQ(ratel_rule_format(&p.rules[0], err, sizeof err), 15);
    CHECK(strcmp(err, "2/1s:concurrent") == 0);
    CHECK_EQ(ratel_rule_explain(&p.rules[0], err, sizeof err) > 0, 1);
    CHECK(strstr(err, "expiring after 1 second") != NULL);
}

TEST(concurrent_release_errors)
{
    test_key_t k, rate;
    int held = 7;
    static const char *const rules[] = {"2/1s:concurrent", NULL};
    static const char *const sliding[] = {"2/1s", NULL};

    REQUIRE(test_key_init(&k, rules) == 0);
    REQUIRE(test_key_init(&rate, sliding) == 0);
    CHECK_EQ(release_at(&k, 0, 0, 0, &held), RATEL_EINVAL);
    CHECK_EQ(release_at(&k, 0, 1, 8, &held), RATEL_EINVAL);
    CHECK_EQ(release_at(&rate, 0, 1, 0, &held), RATEL_EINVAL);
    /* A key never seen: nothing held, nothing stored. */
    CHECK_EQ(release_at(&k, 0, 1, 0, &held), 0);
    CHECK_EQ(held, 0);
    CHECK_EQ(k.len, 0);
}

/* A lease is its key's: releasing its id on another key frees nothing
   (that key's lease of the same number is another lease). */
TEST(concurrent_release_other_key)
{
    ratel_store_t *store = NULL;
    ratel_memory_options_t opt = {0};
    ratel_policy_t policy;
    ratel_decision_t d;
    static const char *const rules[] = {"1/1m:concurrent"};
    int held = -1;

    REQUIRE(ratel_policy_parse(&policy, rules, 1, NULL, 0) == 0);
    REQUIRE(ratel_store_memory_new(&store, &opt) == 0);
    ratel_request_t req = RATEL_REQUEST_INIT;
    REQUIRE(ratel_store_acquire(store, "a", 1, &policy, 1000, &req, &d) == 0);
    CHECK_EQ(d.lease, 1);
    CHECK_EQ(ratel_store_release(store, "b", 1, &policy, 2000, 1, 0, &held, &d),
             0);
    CHECK_EQ(held, 0);
    REQUIRE(ratel_store_acquire(store, "a", 1, &policy, 3000, &req, &d) == 0);
    CHECK_EQ(d.allowed, 0); /* a's lease is still held */
    CHECK_EQ(ratel_store_release(store, "a", 1, &policy, 4000, 1, 0, &held, &d),
             0);
    CHECK_EQ(held, 1);
    ratel_store_free(store);
}

/* Lease ids wrap past 2^32 - 1 to 1, skipping ids still held. */
TEST(concurrent_lease_ids_wrap)
{
    test_key_t k;
    ratel_decision_t d;
    static const char *const rules[] = {"3/1m:concurrent", NULL};
    uint8_t *last;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0, 1, &d), 1); /* lease 1, held */
    last = k.buf + 4 + 20;                /* the record's last id */
    last[0] = last[1] = last[2] = last[3] = 0xff;
    last[-2] = 0; /* and no entry: a blob the core could have written */
    last[-1] = 0;
    k.len = 4 + 24;
    CHECK_EQ(test_take(&k, 1, 1, &d), 1);
    CHECK_EQ(d.lease, 1);
    last[0] = last[1] = last[2] = last[3] = 0xff;
    CHECK_EQ(test_take(&k, 2, 1, &d), 1);
    CHECK_EQ(d.lease, 2); /* 1 is held: skipped */
}

TEST(concurrent_corrupt_records)
{
    test_key_t k;
    ratel_decision_t d;
    static const char *const rules[] = {"3/10s:concurrent", NULL};
    uint8_t good[64];
    size_t len;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0, 1, &d), 1);
    CHECK_EQ(test_take(&k, 5, 1, &d), 1);
    len = k.len;
    REQUIRE(len == 4 + 24 + 16);
    memcpy(good, k.buf, len);
    CHECK_EQ(ratel_state_validate(good, len), 0);
    k.buf[4 + 24 + 12] = 0; /* the second entry's id: 0 */
    k.buf[4 + 24 + 13] = 0;
    CHECK_EQ(ratel_state_validate(k.buf, len), RATEL_ECORRUPT);
    memcpy(k.buf, good, len);
    k.buf[4 + 24 + 2] = 0xff; /* the first entry past PERIOD, out of order */
    CHECK_EQ(ratel_state_validate(k.buf, len), RATEL_ECORRUPT);
    memcpy(k.buf, good, len);
    k.buf[4 + 18] = 3; /* three entries claimed, two present */
    CHECK_EQ(ratel_state_validate(k.buf, len), RATEL_ECORRUPT);
    memcpy(k.buf, good, len);
    k.buf[4 + 19] = 2; /* 515 entries */
    CHECK_EQ(ratel_state_validate(k.buf, len), RATEL_ECORRUPT);
}

/* ---------------------------------------------------- against a model */

#define MODEL_MAX 64

typedef struct lease_model_s {
    uint32_t id[MODEL_MAX];
    int64_t until[MODEL_MAX]; /* ms; held while now < until */
    uint32_t cost[MODEL_MAX];
    int n;
} lease_model_t;

static int64_t model_held(const lease_model_t *m, int64_t now)
{
    int64_t held = 0;
    for (int i = 0; i < m->n; i++)
        held += now < m->until[i] ? m->cost[i] : 0;
    return held;
}

/* The earliest instant at which `need` permits more would fit. */
static int64_t model_retry(const lease_model_t *m, int64_t now, int64_t limit,
                           int64_t cost)
{
    int64_t t = now;
    while (model_held(m, t) + cost > limit) {
        int64_t next = INT64_MAX;
        for (int i = 0; i < m->n; i++)
            if (m->until[i] > t && m->until[i] < next)
                next = m->until[i];
        t = next;
    }
    return t - now;
}

static int model_find(const lease_model_t *m, uint32_t id, int64_t now)
{
    for (int i = 0; i < m->n; i++)
        if (m->id[i] == id && now < m->until[i])
            return i;
    return -1;
}

/* One random step on the key and the model; checks they agree. */
static void model_step(test_key_t *k, lease_model_t *m, int64_t now,
                       int64_t limit, int64_t period)
{
    ratel_decision_t d;
    int op = (int)ratel_test_between(0, 9), held, i;

    if (op < 6 || m->n == 0) {
        int64_t cost = ratel_test_between(1, limit > 3 ? 3 : limit);
        int fits = model_held(m, now) + cost <= limit;
        REQUIRE(test_take(k, now, (uint64_t)cost, &d) == fits);
        CHECK_EQ(d.remaining,
                 limit - model_held(m, now) - (fits ? cost : 0) < 0
                     ? 0
                     : limit - model_held(m, now) - (fits ? cost : 0));
        if (!fits) {
            CHECK_EQ(d.retry_after_ms, model_retry(m, now, limit, cost));
            return;
        }
        CHECK(model_find(m, d.lease, now) < 0);
        if (m->n == MODEL_MAX) { /* forget the oldest expired one */
            for (i = 0; i < m->n && now < m->until[i]; i++)
                ;
            REQUIRE(i < m->n);
            m->id[i] = m->id[m->n - 1];
            m->until[i] = m->until[m->n - 1];
            m->cost[i] = m->cost[--m->n];
        }
        m->id[m->n] = d.lease;
        m->until[m->n] = now + period;
        m->cost[m->n++] = (uint32_t)cost;
        return;
    }
    {
        uint32_t id = m->id[ratel_test_between(0, m->n - 1)];
        unsigned flags = op == 9 ? RATEL_RENEW : 0;
        REQUIRE(release_at(k, now, id, flags, &held) == 0);
        i = model_find(m, id, now);
        CHECK_EQ(held, i >= 0);
        if (i >= 0)
            m->until[i] = flags ? now + period : now;
        REQUIRE(test_peek(k, now, 1, &d) >= 0);
        CHECK_EQ(limit - model_held(m, now) < 0 ? 0
                                                : limit - model_held(m, now),
                 d.remaining);
    }
}

TEST(concurrent_matches_model)
{
    long rounds = ratel_test_iterations(200);

    for (long r = 0; r < rounds; r++) {
        test_key_t k;
        lease_model_t m = {.n = 0};
        int64_t limit = ratel_test_between(1, 6);
        int64_t period = ratel_test_between(1, 4) * 250;
        int64_t now = ratel_test_between(0, 1000000);
        char text[40];
        const char *rules[] = {text, NULL};

        snprintf(text, sizeof text, "%lld/%lldms:concurrent", (long long)limit,
                 (long long)period);
        REQUIRE(test_key_init(&k, rules) == 0);
        for (int step = 0; step < 60; step++) {
            now += ratel_test_between(0, period / 2);
            model_step(&k, &m, now, limit, period);
            CHECK(model_held(&m, now) <= limit);
        }
    }
}

/* ------------------------------------------------------------- threads */

#define NTHREADS 4
#define LIMIT 5
#define ROUNDS 300

typedef struct worker_s {
    ratel_store_t *store;
    ratel_policy_t *policy;
    pthread_barrier_t *sync;
    atomic_int *admitted; /* in this round, by every thread */
    int bad;              /* rounds with another count than LIMIT, lost
                             leases */
} worker_t;

/*
 * Every round, each thread asks for three leases at once with the others
 * and keeps what it gets: together they must hold exactly LIMIT (never
 * more, and none lost). Then each releases its own, every one still held.
 */
static void *worker(void *arg)
{
    worker_t *w = arg;
    ratel_request_t req = RATEL_REQUEST_INIT;

    for (int round = 0; round < ROUNDS; round++) {
        uint32_t mine[3];
        int got = 0;
        pthread_barrier_wait(w->sync);
        for (int i = 0; i < 3; i++) {
            ratel_decision_t d;
            if (ratel_store_acquire(w->store, "k", 1, w->policy, 1000, &req,
                                    &d) == 0 &&
                d.allowed)
                mine[got++] = d.lease;
        }
        atomic_fetch_add(w->admitted, got);
        pthread_barrier_wait(w->sync);
        w->bad += atomic_load(w->admitted) != LIMIT;
        pthread_barrier_wait(w->sync);
        atomic_store(w->admitted, 0);
        for (int i = 0; i < got; i++) {
            ratel_decision_t d;
            int held = 0;
            ratel_store_release(w->store, "k", 1, w->policy, 1000, mine[i], 0,
                                &held, &d);
            w->bad += !held;
        }
    }
    return NULL;
}

TEST(concurrent_threads_memory_store)
{
    ratel_store_t *store = NULL;
    ratel_memory_options_t opt = {0};
    ratel_policy_t policy;
    static const char *const rules[] = {"5/1d:concurrent", "100000/1s:gcra"};
    atomic_int admitted = 0;
    pthread_barrier_t sync;
    pthread_t tid[NTHREADS];
    worker_t w[NTHREADS];
    ratel_rule_status_t st[2];
    size_t n = 0;

    REQUIRE(ratel_policy_parse(&policy, rules, 2, NULL, 0) == 0);
    REQUIRE(ratel_store_memory_new(&store, &opt) == 0);
    pthread_barrier_init(&sync, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){store, &policy, &sync, &admitted, 0};
        REQUIRE(pthread_create(&tid[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(tid[i], NULL);
        CHECK_EQ(w[i].bad, 0);
    }
    pthread_barrier_destroy(&sync);
    /* Every lease was released: nothing is held. */
    REQUIRE(ratel_store_inspect(store, "k", 1, 1000, st, 2, &n) == 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(st[0].used, 0);
    ratel_store_free(store);
}

RATEL_SUITE(concurrent) = {
    {"concurrent_leases_by_hand", test_concurrent_leases_by_hand},
    {"concurrent_renew_and_cost", test_concurrent_renew_and_cost},
    {"concurrent_all_or_nothing", test_concurrent_all_or_nothing},
    {"concurrent_rule_errors", test_concurrent_rule_errors},
    {"concurrent_release_errors", test_concurrent_release_errors},
    {"concurrent_release_other_key", test_concurrent_release_other_key},
    {"concurrent_lease_ids_wrap", test_concurrent_lease_ids_wrap},
    {"concurrent_corrupt_records", test_concurrent_corrupt_records},
    {"concurrent_matches_model", test_concurrent_matches_model},
    {"concurrent_threads_memory_store", test_concurrent_threads_memory_store},
    {0, 0},
};
