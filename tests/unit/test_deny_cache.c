/*
 * test_deny_cache.c - the Redis store's local cache of denials
 * (lib/store/deny_cache.c).
 *
 * A hit must only ever repeat a denial recorded for that exact key and
 * policy, counted down to the time asked, and only for requests the denial
 * covers (cost at least, max wait at most); everything else must miss. The
 * table stays within its slots whatever keys arrive. Time is injected.
 */
#include "test.h"

#include "ratel.h"
#include "store/deny_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define T0 ((int64_t)1700000000 * 1000000) /* a fixed start instant, us */
#define MS 1000                            /* one millisecond in us */
#define FP_A 0x1111111111111111ull
#define FP_B 0x2222222222222222ull

static ratel_deny_cache_t *new_cache(size_t entries, int64_t max_ms)
{
    ratel_deny_cache_t *c = NULL;
    CHECK_EQ(ratel__deny_cache_new(&c, entries, max_ms), 0);
    return c;
}

static ratel_deny_cache_stats_t stats_of(ratel_deny_cache_t *c)
{
    ratel_deny_cache_stats_t st;
    ratel__deny_cache_stats(c, &st);
    return st;
}

static ratel_decision_t denial(int64_t limit, int64_t remaining, int rule,
                               int64_t retry_ms, int64_t reset_ms)
{
    ratel_decision_t d;
    memset(&d, 0, sizeof d);
    d.allowed = 0;
    d.rule = rule;
    d.limit = limit;
    d.remaining = remaining;
    d.retry_after_ms = retry_ms;
    d.reset_after_ms = reset_ms;
    d.source = RATEL_SOURCE_STORE;
    return d;
}

static void put_req(ratel_deny_cache_t *c, const char *key, size_t keylen,
                    uint64_t fp, uint64_t cost, int64_t max_wait_ms,
                    const ratel_decision_t *d, int64_t now_us)
{
    ratel_request_t r = {cost, max_wait_ms, 0, NULL};
    ratel__deny_cache_put(c, key, keylen, fp, &r, d, now_us);
}

/* Records a denial of a cost-1, no-wait request for the string `key`. */
static void put(ratel_deny_cache_t *c, const char *key, uint64_t fp,
                int64_t retry_ms, int64_t reset_ms, int64_t now_us)
{
    ratel_decision_t d = denial(10, 0, 0, retry_ms, reset_ms);
    put_req(c, key, strlen(key), fp, 1, 0, &d, now_us);
}

static int get_req(ratel_deny_cache_t *c, const char *key, size_t keylen,
                   uint64_t fp, uint64_t cost, int64_t max_wait_ms,
                   int64_t now_us, ratel_decision_t *d)
{
    ratel_request_t r = {cost, max_wait_ms, 0, NULL};
    return ratel__deny_cache_get(c, key, keylen, fp, &r, now_us, d);
}

/* Whether a cost-1, no-wait request for the string `key` hits. */
static int get(ratel_deny_cache_t *c, const char *key, uint64_t fp,
               int64_t now_us, ratel_decision_t *d)
{
    ratel_decision_t unused;
    return get_req(c, key, strlen(key), fp, 1, 0, now_us, d ? d : &unused);
}

TEST(deny_cache_new_checks_and_rounds)
{
    ratel_deny_cache_t *c = NULL;
    static const struct {
        size_t want;
        uint64_t got;
    } sizes[] = {{1, 4}, {4, 4}, {5, 8}, {1000, 1024}, {1024, 1024}};

    CHECK_EQ(ratel__deny_cache_new(&c, 0, 1000), RATEL_EINVAL);
    CHECK(c == NULL);
    /* The deny_cache option's range (option.c), not a bound of its own. */
    CHECK_EQ(ratel__deny_cache_new(&c, 1048577, 1000), RATEL_EINVAL);
    CHECK(c == NULL);
    CHECK_EQ(ratel__deny_cache_new(&c, (size_t)1 << 24, 1000), RATEL_EINVAL);
    REQUIRE(ratel__deny_cache_new(&c, 1048576, 1) == 0);
    CHECK_EQ(stats_of(c).entries, 1048576);
    ratel__deny_cache_free(c);
    c = NULL;
    CHECK_EQ(ratel__deny_cache_new(&c, 16, 0), RATEL_EINVAL);
    CHECK_EQ(ratel__deny_cache_new(&c, 16, -5), RATEL_EINVAL);
    CHECK_EQ(ratel__deny_cache_new(NULL, 16, 1000), RATEL_EINVAL);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ratel_deny_cache_stats_t st;
        REQUIRE(ratel__deny_cache_new(&c, sizes[i].want, 1000) == 0);
        st = stats_of(c);
        CHECK_EQ(st.entries, sizes[i].got);
        CHECK_EQ(st.live + st.hits + st.inserts + st.replaced, 0);
        ratel__deny_cache_free(c);
    }
    ratel__deny_cache_free(NULL);
}

TEST(deny_cache_round_trip_counts_down)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t in = denial(7, 3, 2, 1500, 3000), d;
    ratel_deny_cache_stats_t st;

    REQUIRE(c);
    in.wait_ms = 99; /* not carried over: a cached answer never waits */
    put_req(c, "user:1", 6, FP_A, 1, 0, &in, T0);
    memset(&d, 0x5a, sizeof d);
    REQUIRE(get(c, "user:1", FP_A, T0, &d));
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.rule, 2);
    CHECK_EQ(d.limit, 7);
    CHECK_EQ(d.remaining, 3);
    CHECK_EQ(d.retry_after_ms, 1500);
    CHECK_EQ(d.reset_after_ms, 3000);
    CHECK_EQ(d.wait_ms, 0);
    CHECK_EQ(d.source, RATEL_SOURCE_CACHE);

    /* Rounded up: 1 us later 1499.999 ms are left. */
    REQUIRE(get(c, "user:1", FP_A, T0 + 1, &d));
    CHECK_EQ(d.retry_after_ms, 1500);
    CHECK_EQ(d.reset_after_ms, 3000);
    REQUIRE(get(c, "user:1", FP_A, T0 + 500 * MS, &d));
    CHECK_EQ(d.retry_after_ms, 1000);
    CHECK_EQ(d.reset_after_ms, 2500);
    REQUIRE(get(c, "user:1", FP_A, T0 + 1500 * MS - 999, &d));
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(d.reset_after_ms, 1501);
    REQUIRE(get(c, "user:1", FP_A, T0 + 1500 * MS - 1, &d));
    CHECK_EQ(d.retry_after_ms, 1);

    /* Exactly at the retry instant the key may succeed: a miss, and the
       decision is left untouched. */
    memset(&d, 0x5a, sizeof d);
    CHECK(!get(c, "user:1", FP_A, T0 + 1500 * MS, &d));
    CHECK_EQ(d.limit, (int64_t)0x5a5a5a5a5a5a5a5aull);
    CHECK(!get(c, "user:1", FP_A, T0 + 1600 * MS, NULL));
    CHECK(!get(c, "user:2", FP_A, T0, NULL));

    st = stats_of(c);
    CHECK_EQ(st.inserts, 1);
    CHECK_EQ(st.hits, 5);
    CHECK_EQ(st.live, 1);
    CHECK_EQ(st.replaced, 0);
    ratel__deny_cache_free(c);
}

TEST(deny_cache_reset_never_below_retry)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t d;

    REQUIRE(c);
    put(c, "a", FP_A, 2000, 0, T0); /* no reset recorded */
    put(c, "b", FP_A, 2000, 500, T0);
    REQUIRE(get(c, "a", FP_A, T0 + 250 * MS, &d));
    CHECK_EQ(d.retry_after_ms, 1750);
    CHECK_EQ(d.reset_after_ms, 1750);
    REQUIRE(get(c, "b", FP_A, T0 + 250 * MS, &d));
    CHECK_EQ(d.reset_after_ms, 1750);
    ratel__deny_cache_free(c);
}

TEST(deny_cache_cost_and_max_wait_rules)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t in = denial(5, 1, 0, 1000, 1000), d;
    const char *k = "sms:+33600000000";
    size_t n = strlen(k);

    REQUIRE(c);
    put_req(c, k, n, FP_A, 3, 200, &in, T0);
    CHECK(get_req(c, k, n, FP_A, 3, 200, T0, &d));
    CHECK(get_req(c, k, n, FP_A, 4, 200, T0, &d));   /* costlier */
    CHECK(get_req(c, k, n, FP_A, 1000, 0, T0, &d));  /* waits less */
    CHECK(!get_req(c, k, n, FP_A, 2, 200, T0, &d));  /* cheaper */
    CHECK(!get_req(c, k, n, FP_A, 1, 0, T0, &d));    /* cheaper */
    CHECK(!get_req(c, k, n, FP_A, 3, 201, T0, &d));  /* waits longer */
    CHECK(!get_req(c, k, n, FP_A, 10, 500, T0, &d)); /* waits longer */
    CHECK_EQ(stats_of(c).hits, 3);

    /* A newer denial of the same key and policy replaces the older one,
       even if it covers fewer requests. */
    put_req(c, k, n, FP_A, 5, 0, &in, T0 + 1);
    CHECK(!get_req(c, k, n, FP_A, 3, 0, T0 + 2, &d));
    CHECK(get_req(c, k, n, FP_A, 5, 0, T0 + 2, &d));
    CHECK_EQ(stats_of(c).live, 1);

    /* A peek is answered like any request. */
    {
        ratel_request_t peek = {5, 0, RATEL_PEEK, NULL};
        CHECK(ratel__deny_cache_get(c, k, n, FP_A, &peek, T0 + 2, &d));
    }
    ratel__deny_cache_free(c);
}

TEST(deny_cache_fingerprint_separates_policies)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t a = denial(1, 0, 0, 1000, 1000);
    ratel_decision_t b = denial(2, 0, 1, 5000, 5000), d;

    REQUIRE(c);
    put_req(c, "k", 1, FP_A, 1, 0, &a, T0);
    CHECK(!get(c, "k", FP_B, T0, NULL));
    put_req(c, "k", 1, FP_B, 1, 0, &b, T0);
    REQUIRE(get(c, "k", FP_A, T0, &d));
    CHECK_EQ(d.limit, 1);
    CHECK_EQ(d.retry_after_ms, 1000);
    REQUIRE(get(c, "k", FP_B, T0, &d));
    CHECK_EQ(d.limit, 2);
    CHECK_EQ(d.rule, 1);
    CHECK_EQ(d.retry_after_ms, 5000);
    CHECK_EQ(stats_of(c).live, 2);
    ratel__deny_cache_free(c);
}

TEST(deny_cache_forget_removes_every_policy_of_one_key)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_deny_cache_stats_t st;

    REQUIRE(c);
    put(c, "victim", FP_A, 1000, 1000, T0);
    put(c, "victim", FP_B, 1000, 1000, T0);
    put(c, "victim2", FP_A, 1000, 1000, T0);
    put(c, "victi", FP_A, 1000, 1000, T0);
    put(c, "other", FP_B, 1000, 1000, T0);
    CHECK_EQ(stats_of(c).live, 5);
    ratel__deny_cache_forget(c, "victim", 6);
    CHECK(!get(c, "victim", FP_A, T0, NULL));
    CHECK(!get(c, "victim", FP_B, T0, NULL));
    CHECK(get(c, "victim2", FP_A, T0, NULL));
    CHECK(get(c, "victi", FP_A, T0, NULL));
    CHECK(get(c, "other", FP_B, T0, NULL));
    st = stats_of(c);
    CHECK_EQ(st.live, 3);
    /* Forgetting again, or a key never seen, changes nothing. */
    ratel__deny_cache_forget(c, "victim", 6);
    ratel__deny_cache_forget(c, "nobody", 6);
    CHECK_EQ(stats_of(c).live, 3);
    /* The key can be cached again. */
    put(c, "victim", FP_A, 1000, 1000, T0);
    CHECK(get(c, "victim", FP_A, T0, NULL));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_max_ms_caps_lifetime_not_retry)
{
    ratel_deny_cache_t *c = new_cache(64, 1000);
    ratel_decision_t d;

    REQUIRE(c);
    put(c, "slow", FP_A, 5000, 60000, T0);
    REQUIRE(get(c, "slow", FP_A, T0, &d));
    CHECK_EQ(d.retry_after_ms, 5000);
    CHECK_EQ(d.reset_after_ms, 60000);
    /* The answer stays true while the entry lives ... */
    REQUIRE(get(c, "slow", FP_A, T0 + 1000 * MS - 1, &d));
    CHECK_EQ(d.retry_after_ms, 4001);
    CHECK_EQ(d.reset_after_ms, 59001);
    /* ... but the entry stops answering after max_ms. */
    CHECK(!get(c, "slow", FP_A, T0 + 1000 * MS, &d));
    /* Shorter denials end at their own retry. */
    put(c, "fast", FP_A, 300, 300, T0);
    CHECK(get(c, "fast", FP_A, T0 + 300 * MS - 1, NULL));
    CHECK(!get(c, "fast", FP_A, T0 + 300 * MS, NULL));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_hostile_times_saturate)
{
    ratel_deny_cache_t *c = new_cache(16, INT64_MAX);
    ratel_deny_cache_t *capped = new_cache(16, 10000);
    ratel_decision_t d;
    int64_t left = INT64_MAX - T0;
    int64_t want = left / 1000 + (left % 1000 != 0);

    REQUIRE(c && capped);
    put(c, "k", FP_A, INT64_MAX, INT64_MAX, T0);
    REQUIRE(get(c, "k", FP_A, T0, &d));
    CHECK_EQ(d.retry_after_ms, want);
    CHECK_EQ(d.reset_after_ms, want);
    CHECK(get(c, "k", FP_A, RATEL_TIME_MAX_US - 1, NULL));
    put(capped, "k", FP_A, INT64_MAX / 1000 + 1, INT64_MAX, T0);
    REQUIRE(get(capped, "k", FP_A, T0 + 9999 * MS, &d));
    CHECK_EQ(d.retry_after_ms, want - 9999);
    CHECK(!get(capped, "k", FP_A, T0 + 10000 * MS, NULL));
    /* A time before the epoch is not cached nor answered. */
    put(c, "neg", FP_A, 1000, 1000, -1);
    CHECK(!get(c, "neg", FP_A, 0, NULL));
    CHECK(!get(c, "k", FP_A, -1, NULL));
    ratel__deny_cache_free(c);
    ratel__deny_cache_free(capped);
}

TEST(deny_cache_ignores_what_is_not_a_denial)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t allowed = denial(5, 4, 0, 0, 1000);
    ratel_decision_t allowed_retry = denial(5, 4, 0, 1000, 1000);
    ratel_decision_t no_retry = denial(5, 0, 0, 0, 1000);
    ratel_decision_t neg_retry = denial(5, 0, 0, -3, 1000);

    REQUIRE(c);
    allowed.allowed = 1;
    allowed_retry.allowed = 1;
    put_req(c, "a", 1, FP_A, 1, 0, &allowed, T0);
    put_req(c, "b", 1, FP_A, 1, 0, &allowed_retry, T0);
    put_req(c, "c", 1, FP_A, 1, 0, &no_retry, T0);
    put_req(c, "d", 1, FP_A, 1, 0, &neg_retry, T0);
    CHECK(!get(c, "a", FP_A, T0, NULL));
    CHECK(!get(c, "b", FP_A, T0, NULL));
    CHECK(!get(c, "c", FP_A, T0, NULL));
    CHECK(!get(c, "d", FP_A, T0, NULL));
    CHECK_EQ(stats_of(c).inserts, 0);
    CHECK_EQ(stats_of(c).live, 0);

    /* A newer allowed decision does not erase the older denial either:
       the store forgets keys explicitly (refund, reset). */
    put(c, "e", FP_A, 1000, 1000, T0);
    put_req(c, "e", 1, FP_A, 1, 0, &allowed, T0 + 1);
    CHECK(get(c, "e", FP_A, T0 + 2, NULL));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_long_keys_are_not_cached)
{
    ratel_deny_cache_t *c = new_cache(64, 10000);
    ratel_decision_t in = denial(5, 0, 0, 1000, 1000);
    char key[RATEL_DENY_CACHE_KEY_MAX + 2];

    REQUIRE(c);
    memset(key, 'x', sizeof key);
    put_req(c, key, RATEL_DENY_CACHE_KEY_MAX + 1, FP_A, 1, 0, &in, T0);
    CHECK(!get_req(c, key, RATEL_DENY_CACHE_KEY_MAX + 1, FP_A, 1, 0, T0, &in));
    CHECK_EQ(stats_of(c).inserts, 0);
    ratel__deny_cache_forget(c, key, RATEL_DENY_CACHE_KEY_MAX + 1);

    /* The longest key kept, and the same bytes one shorter or longer. */
    put_req(c, key, RATEL_DENY_CACHE_KEY_MAX, FP_A, 1, 0, &in, T0);
    CHECK(get_req(c, key, RATEL_DENY_CACHE_KEY_MAX, FP_A, 1, 0, T0, &in));
    CHECK(!get_req(c, key, RATEL_DENY_CACHE_KEY_MAX - 1, FP_A, 1, 0, T0, &in));
    CHECK(!get_req(c, key, RATEL_DENY_CACHE_KEY_MAX + 1, FP_A, 1, 0, T0, &in));
    /* Long keys differing in one middle byte are different keys. */
    key[100] = 'y';
    CHECK(!get_req(c, key, RATEL_DENY_CACHE_KEY_MAX, FP_A, 1, 0, T0, &in));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_keys_are_bytes)
{
    ratel_deny_cache_t *c = new_cache(256, 10000);
    ratel_decision_t in, d;
    static const struct {
        const char *bytes;
        size_t len;
    } keys[] = {
        {"", 0},
        {"a", 1},
        {"a\0", 2},
        {"a\0b", 3},
        {"a\0c", 3},
        {"\0\0\0", 3},
        {"\0\0\0\0", 4},
        {"abcdefgh", 8},
        {"abcdefg\0", 8},
        {"0123456789abcdef\0", 17},
        {"0123456789abcdef\1", 17},
    };
    size_t n = sizeof keys / sizeof keys[0];

    REQUIRE(c);
    for (size_t i = 0; i < n; i++) {
        in = denial((int64_t)i, 0, 0, 1000, 1000);
        put_req(c, keys[i].bytes, keys[i].len, FP_A, 1, 0, &in, T0);
    }
    for (size_t i = 0; i < n; i++) {
        REQUIRE(get_req(c, keys[i].bytes, keys[i].len, FP_A, 1, 0, T0, &d));
        CHECK_EQ(d.limit, (int64_t)i);
    }
    CHECK_EQ(stats_of(c).live, n);
    /* The empty key is a key like any other; a NULL pointer may stand
       for it. */
    REQUIRE(get_req(c, NULL, 0, FP_A, 1, 0, T0, &d));
    CHECK_EQ(d.limit, 0);
    ratel__deny_cache_forget(c, "a\0b", 3);
    CHECK(!get_req(c, "a\0b", 3, FP_A, 1, 0, T0, &d));
    CHECK(get_req(c, "a\0c", 3, FP_A, 1, 0, T0, &d));
    CHECK(get_req(c, "a", 1, FP_A, 1, 0, T0, &d));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_full_set_replaces_first_to_end)
{
    /* Four slots: one set, so every key competes for the same ways. */
    ratel_deny_cache_t *c = new_cache(4, 100000);
    ratel_deny_cache_stats_t st;

    REQUIRE(c);
    put(c, "k5", FP_A, 5000, 5000, T0);
    put(c, "k2", FP_A, 2000, 2000, T0);
    put(c, "k9", FP_A, 9000, 9000, T0);
    put(c, "k7", FP_A, 7000, 7000, T0);
    st = stats_of(c);
    CHECK_EQ(st.live, 4);
    CHECK_EQ(st.replaced, 0);

    /* Re-recording a key present does not push anything out. */
    put(c, "k7", FP_A, 7000, 7000, T0 + 1);
    CHECK_EQ(stats_of(c).replaced, 0);

    /* A fifth key pushes out the one that ends first (k2). */
    put(c, "k8", FP_A, 8000, 8000, T0 + 100 * MS);
    CHECK(!get(c, "k2", FP_A, T0 + 100 * MS, NULL));
    CHECK(get(c, "k5", FP_A, T0 + 100 * MS, NULL));
    CHECK(get(c, "k9", FP_A, T0 + 100 * MS, NULL));
    CHECK(get(c, "k7", FP_A, T0 + 100 * MS, NULL));
    CHECK(get(c, "k8", FP_A, T0 + 100 * MS, NULL));
    st = stats_of(c);
    CHECK_EQ(st.live, 4);
    CHECK_EQ(st.replaced, 1);

    /* Once k5 has ended its slot is free: no live entry is pushed out. */
    put(c, "k6", FP_A, 6000, 6000, T0 + 5000 * MS);
    CHECK(get(c, "k9", FP_A, T0 + 5000 * MS, NULL));
    CHECK(get(c, "k7", FP_A, T0 + 5000 * MS, NULL));
    CHECK(get(c, "k8", FP_A, T0 + 5000 * MS, NULL));
    CHECK(get(c, "k6", FP_A, T0 + 5000 * MS, NULL));
    st = stats_of(c);
    CHECK_EQ(st.live, 4);
    CHECK_EQ(st.replaced, 1);
    CHECK_EQ(st.inserts, 7);

    /* A forgotten slot is reused before any live one. */
    ratel__deny_cache_forget(c, "k9", 2);
    CHECK_EQ(stats_of(c).live, 3);
    put(c, "k1", FP_A, 1000, 1000, T0 + 5000 * MS);
    st = stats_of(c);
    CHECK_EQ(st.live, 4);
    CHECK_EQ(st.replaced, 1);
    CHECK(get(c, "k7", FP_A, T0 + 5000 * MS, NULL));
    ratel__deny_cache_free(c);
}

TEST(deny_cache_flood_stays_bounded)
{
    ratel_deny_cache_t *c = new_cache(1024, 10000);
    ratel_deny_cache_stats_t st;
    ratel_decision_t in = denial(5, 0, 0, 60000, 60000), d;
    const long n = 1000000;
    char key[32];
    int len = 0;

    REQUIRE(c);
    for (long i = 0; i < n; i++) {
        len = snprintf(key, sizeof key, "flood:%ld", i);
        in.limit = i;
        put_req(c, key, (size_t)len, FP_A, 1, 0, &in, T0 + i);
    }
    st = stats_of(c);
    CHECK_EQ(st.entries, 1024);
    CHECK(st.live <= st.entries);
    CHECK_EQ(st.inserts, n);
    CHECK_EQ(st.replaced, n - (long)st.live);
    /* The last key recorded is still there, with its own decision. */
    REQUIRE(get_req(c, key, (size_t)len, FP_A, 1, 0, T0 + n, &d));
    CHECK_EQ(d.limit, n - 1);
    ratel__deny_cache_free(c);
}

/* ------------------------------------------------------------- threads */

#define MT_THREADS 4
#define MT_KEYS 200
#define MT_MAX_RETRY_MS 100

typedef struct mt_arg_s {
    ratel_deny_cache_t *cache;
    _Atomic int64_t *clock;
    uint64_t rng;
    long iterations;
    long wrong, hits, puts;
} mt_arg_t;

static uint64_t mt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Puts, gets and forgets on keys every thread uses. A denial records who it
 * belongs to: limit = key * 1000 + policy * 100 + cost * 3 + max wait
 * (cost 1..4, wait 0..2: the last term is 3..14), remaining = key, rule =
 * key % 8. A hit must carry its own key and policy and a request the hit
 * covers. Its countdown is bounded by the shared clock read after the hit:
 * the put it repeats took its time before that.
 */
static void *mt_worker(void *p)
{
    mt_arg_t *a = p;
    static const uint64_t fps[2] = {FP_A, FP_B};

    for (long i = 0; i < a->iterations; i++) {
        uint64_t r = mt_rand(&a->rng);
        int64_t now = atomic_fetch_add(a->clock, (int64_t)(r >> 58) + 1);
        int id = (int)((r >> 8) % MT_KEYS);
        int fpi = (int)((r >> 20) & 1);
        uint64_t cost = 1 + (r >> 24) % 4;
        int64_t wait = (int64_t)((r >> 28) % 3);
        unsigned op = (unsigned)(r % 10);
        char key[16];
        int len = snprintf(key, sizeof key, "key-%d", id);
        ratel_request_t req = {cost, wait, 0, NULL};
        ratel_decision_t d;

        if (op < 4) {
            int64_t retry = 1 + (int64_t)((r >> 32) % MT_MAX_RETRY_MS);
            d = denial(id * 1000 + fpi * 100 + (int64_t)cost * 3 + wait, id,
                       id % 8, retry, retry + (int64_t)((r >> 40) % 100));
            ratel__deny_cache_put(a->cache, key, (size_t)len, fps[fpi], &req,
                                  &d, now);
            a->puts++;
        } else if (op < 9) {
            int64_t code, rcost, rwait, latest, retry_max;
            if (!ratel__deny_cache_get(a->cache, key, (size_t)len, fps[fpi],
                                       &req, now, &d))
                continue;
            latest = atomic_load(a->clock);
            retry_max = (latest - now + 999) / 1000 + MT_MAX_RETRY_MS;
            a->hits++;
            code = d.limit - id * 1000 - fpi * 100;
            rcost = code / 3;
            rwait = code % 3;
            if (d.allowed != 0 || d.remaining != id || d.rule != id % 8 ||
                d.source != RATEL_SOURCE_CACHE || d.wait_ms != 0 || code < 3 ||
                code > 14 || (uint64_t)rcost > cost || rwait < wait ||
                d.retry_after_ms < 1 || d.retry_after_ms > retry_max ||
                d.reset_after_ms < d.retry_after_ms ||
                d.reset_after_ms > retry_max + MT_MAX_RETRY_MS)
                a->wrong++;
        } else {
            ratel__deny_cache_forget(a->cache, key, (size_t)len);
        }
    }
    return NULL;
}

TEST(deny_cache_threads_never_answer_wrong)
{
    /* 64 slots for 400 (key, policy) pairs: constant replacement. */
    ratel_deny_cache_t *c = new_cache(64, 50);
    _Atomic int64_t clock = T0;
    mt_arg_t args[MT_THREADS];
    pthread_t tid[MT_THREADS];
    ratel_deny_cache_stats_t st;
    long hits = 0, puts = 0, wrong = 0;

    REQUIRE(c);
    for (int t = 0; t < MT_THREADS; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].cache = c;
        args[t].clock = &clock;
        args[t].rng = ratel_test_rand();
        args[t].iterations = ratel_test_iterations(200000);
    }
    for (int t = 0; t < MT_THREADS; t++)
        REQUIRE(pthread_create(&tid[t], NULL, mt_worker, &args[t]) == 0);
    for (int t = 0; t < MT_THREADS; t++) {
        pthread_join(tid[t], NULL);
        hits += args[t].hits;
        puts += args[t].puts;
        wrong += args[t].wrong;
    }
    CHECK_EQ(wrong, 0);
    CHECK(hits > 0);
    st = stats_of(c);
    CHECK_EQ(st.hits, hits);
    CHECK_EQ(st.inserts, puts);
    CHECK(st.live <= st.entries);
    ratel__deny_cache_free(c);
}

/* --------------------------------------------------------- fingerprint */

TEST(deny_cache_policy_fingerprint)
{
    ratel_policy_t base, p;
    uint64_t f;

    memset(&base, 0, sizeof base);
    base.nrules = 2;
    base.rules[0] = (ratel_rule_t){
        .algo = RATEL_ALGO_GCRA, .limit = 10, .period_ms = 1000, .burst = 20};
    base.rules[1] = (ratel_rule_t){
        .algo = RATEL_ALGO_SLIDING, .limit = 100, .period_ms = 60000};
    f = ratel__policy_fingerprint(&base);

    /* Equal policies, and rules past nrules do not count. */
    p = base;
    CHECK(ratel__policy_fingerprint(&p) == f);
    p.rules[5] = (ratel_rule_t){
        .algo = RATEL_ALGO_FIXED, .limit = 7, .period_ms = 7, .burst = 7};
    CHECK(ratel__policy_fingerprint(&p) == f);

    /* Any one field changed gives another fingerprint. */
    for (int i = 0; i < 2; i++) {
        p = base;
        p.rules[i].algo = RATEL_ALGO_APPROX;
        CHECK(ratel__policy_fingerprint(&p) != f);
        p = base;
        p.rules[i].limit++;
        CHECK(ratel__policy_fingerprint(&p) != f);
        p = base;
        p.rules[i].period_ms++;
        CHECK(ratel__policy_fingerprint(&p) != f);
        p = base;
        p.rules[i].burst++;
        CHECK(ratel__policy_fingerprint(&p) != f);
        p = base;
        p.rules[i].calendar = RATEL_CALENDAR_TZ;
        CHECK(ratel__policy_fingerprint(&p) != f);
        p.rules[i].tz_offset_s = 3600;
        CHECK(ratel__policy_fingerprint(&p) != f);
    }
    p = base;
    p.nrules = 1;
    CHECK(ratel__policy_fingerprint(&p) != f);
    p = base;
    p.nrules = 3; /* a third, all-zero rule */
    CHECK(ratel__policy_fingerprint(&p) != f);
    /* Order matters: rule indexes in decisions refer to it. */
    p = base;
    p.rules[0] = base.rules[1];
    p.rules[1] = base.rules[0];
    CHECK(ratel__policy_fingerprint(&p) != f);
    /* Fields are not confused with their neighbours. */
    p = base;
    p.rules[0].limit = 1000;
    p.rules[0].period_ms = 10;
    CHECK(ratel__policy_fingerprint(&p) != f);

    /* Parsed policies: same texts, same fingerprint. */
    {
        const char *a[] = {"10/1s", "100/1m"};
        const char *b[] = {"10/1000ms", "100/60s"};
        const char *other[] = {"10/1s", "100/1m:fixed"};
        ratel_policy_t pa, pb, po;
        REQUIRE(ratel_policy_parse(&pa, a, 2, NULL, 0) == 0);
        REQUIRE(ratel_policy_parse(&pb, b, 2, NULL, 0) == 0);
        REQUIRE(ratel_policy_parse(&po, other, 2, NULL, 0) == 0);
        CHECK(ratel__policy_fingerprint(&pa) == ratel__policy_fingerprint(&pb));
        CHECK(ratel__policy_fingerprint(&pa) != ratel__policy_fingerprint(&po));
    }
}

RATEL_SUITE(deny_cache) = {
    {"deny_cache_new_checks_and_rounds", test_deny_cache_new_checks_and_rounds},
    {"deny_cache_round_trip_counts_down",
     test_deny_cache_round_trip_counts_down},
    {"deny_cache_reset_never_below_retry",
     test_deny_cache_reset_never_below_retry},
    {"deny_cache_cost_and_max_wait_rules",
     test_deny_cache_cost_and_max_wait_rules},
    {"deny_cache_fingerprint_separates_policies",
     test_deny_cache_fingerprint_separates_policies},
    {"deny_cache_forget_removes_every_policy_of_one_key",
     test_deny_cache_forget_removes_every_policy_of_one_key},
    {"deny_cache_max_ms_caps_lifetime_not_retry",
     test_deny_cache_max_ms_caps_lifetime_not_retry},
    {"deny_cache_hostile_times_saturate",
     test_deny_cache_hostile_times_saturate},
    {"deny_cache_ignores_what_is_not_a_denial",
     test_deny_cache_ignores_what_is_not_a_denial},
    {"deny_cache_long_keys_are_not_cached",
     test_deny_cache_long_keys_are_not_cached},
    {"deny_cache_keys_are_bytes", test_deny_cache_keys_are_bytes},
    {"deny_cache_full_set_replaces_first_to_end",
     test_deny_cache_full_set_replaces_first_to_end},
    {"deny_cache_flood_stays_bounded", test_deny_cache_flood_stays_bounded},
    {"deny_cache_threads_never_answer_wrong",
     test_deny_cache_threads_never_answer_wrong},
    {"deny_cache_policy_fingerprint", test_deny_cache_policy_fingerprint},
    {0, 0},
};
