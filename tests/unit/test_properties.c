/*
 * test_properties.c - thousands of random traces against references
 * written here, independently of the core's code:
 *
 *   sliding  == a brute-force log of every admitted event (under the cap),
 *               and never more than LIMIT in any PERIOD (past the cap too);
 *   gcra     == the continuous-state leaky bucket (ITU-T I.371), the other
 *               classic form of the same algorithm, in exact rationals;
 *   policies == all-or-nothing over single-rule keys;
 *   retry_after is exact, peek changes nothing, refund undoes acquire.
 */
#include "core/internal.h"
#include "core_helpers.h"

#include <stdlib.h>

#define MAX_EVENTS 4096

/* A brute-force sliding log: every admitted (time, cost). */
typedef struct ref_log_s {
    int64_t t[MAX_EVENTS], c[MAX_EVENTS];
    int n;
} ref_log_t;

static int64_t ref_count(const ref_log_t *log, int64_t from_excl,
                         int64_t to_incl)
{
    int64_t sum = 0;
    for (int i = 0; i < log->n; i++)
        if (log->t[i] > from_excl && log->t[i] <= to_incl)
            sum += log->c[i];
    return sum;
}

static int ref_allows(const ref_log_t *log, int64_t now, int64_t period,
                      int64_t limit, int64_t cost)
{
    /* Events at any time up to now count (the log never holds later ones),
       so the window is (now - period, +inf). */
    return ref_count(log, now - period, INT64_MAX) + cost <= limit;
}

/* The next random instant of a trace: bursts, same-ms repeats, pauses. */
static int64_t next_time(int64_t t, int64_t period)
{
    switch (ratel_test_between(0, 5)) {
    case 0:
        return t; /* same millisecond */
    case 1:
        return t + ratel_test_between(1, 3);
    case 2:
        return t + ratel_test_between(0, period / 4 + 1);
    case 3:
        return t + ratel_test_between(period / 2, period + 2);
    default:
        return t + ratel_test_between(0, period / 20 + 1);
    }
}

TEST(property_sliding_equals_brute_force_under_cap)
{
    long traces = ratel_test_iterations(3000);
    for (long tr = 0; tr < traces; tr++) {
        static ref_log_t log;
        char text[64];
        const char *rules[] = {text, NULL};
        test_key_t k;
        int64_t limit = ratel_test_between(1, tr % 3 ? 10 : RATEL_SLIDING_CAP);
        int64_t period = ratel_test_between(1, tr % 2 ? 50 : 5000);
        int64_t t = ratel_test_between(0, 1000000);
        int steps = (int)ratel_test_between(1, 300);

        snprintf(text, sizeof text, "%lld/%lldms", (long long)limit,
                 (long long)period);
        REQUIRE(test_key_init(&k, rules) == 0);
        log.n = 0;
        for (int s = 0; s < steps && log.n < MAX_EVENTS; s++) {
            ratel_decision_t d;
            int64_t cost = ratel_test_between(1, limit < 3 ? limit : 3);
            int want;
            t = next_time(t, period);
            want = ref_allows(&log, t, period, limit, cost);
            REQUIRE(test_take(&k, t, (uint64_t)cost, &d) == want);
            if (want) {
                log.t[log.n] = t;
                log.c[log.n++] = cost;
                CHECK_EQ(d.remaining,
                         limit - ref_count(&log, t - period, INT64_MAX));
                CHECK_EQ(d.reset_after_ms, period);
            } else {
                /* The first instant it fits is when some event leaves the
                   window: try each leaving instant in order. */
                int64_t r = -1;
                for (int i = 0; i < log.n && r < 0; i++)
                    if (log.t[i] + period > t &&
                        ref_allows(&log, log.t[i] + period, period, limit,
                                   cost))
                        r = log.t[i] + period;
                CHECK_EQ(d.retry_after_ms, r - t);
            }
        }
        CHECK(k.len <= ratel_policy_state_max(&k.policy));
    }
}

TEST(property_sliding_never_exceeds_limit_past_cap)
{
    long traces = ratel_test_iterations(60);
    for (long tr = 0; tr < traces; tr++) {
        static ref_log_t log;
        char text[64];
        const char *rules[] = {text, NULL};
        test_key_t k;
        int64_t limit = ratel_test_between(2 * RATEL_SLIDING_CAP, 1500);
        int64_t period = ratel_test_between(1000, 100000);
        /* Held at most g - 1 ms late, g < 4 * period / (CAP - 6). */
        int64_t slack = 4 * period / (RATEL_SLIDING_CAP - 6);
        int64_t t = ratel_test_between(0, 1000000), denied = 0;
        int coarse = 0; /* the cap was reached and runs were coarsened */
        /* Sums over (t - period, t] and (t - period - slack, t], kept with
           two pointers since t never decreases. */
        int64_t in_window = 0, in_wide = 0;
        int head = 0, wide_head = 0;

        snprintf(text, sizeof text, "%lld/%lldms", (long long)limit,
                 (long long)period);
        REQUIRE(test_key_init(&k, rules) == 0);
        log.n = 0;
        while (log.n < MAX_EVENTS && t < 4 * period + 1000000) {
            int64_t cost = ratel_test_between(1, 2);
            int ok;
            t += ratel_test_between(0, 2 * period / limit) +
                 (ratel_test_between(0, 3) == 0);
            while (head < log.n && log.t[head] <= t - period)
                in_window -= log.c[head++];
            while (wide_head < log.n && log.t[wide_head] <= t - period - slack)
                in_wide -= log.c[wide_head++];
            ok = test_take(&k, t, (uint64_t)cost, NULL);
            REQUIRE(ok >= 0);
            if (ok) {
                log.t[log.n] = t;
                log.c[log.n++] = cost;
                in_window += cost;
                in_wide += cost;
                /* Never more than LIMIT in the PERIOD ending now. */
                CHECK(in_window <= limit);
                {
                    ratel_rule_status_t st;
                    size_t one;
                    REQUIRE(ratel_state_inspect(k.buf, k.len, t * 1000, &st, 1,
                                                &one) == 0);
                    coarse |= st.granularity_ms > 1;
                }
            } else {
                /* Never denied unless the exact log, widened by the
                   documented slack, is full. */
                denied++;
                CHECK(in_wide + cost > limit);
            }
        }
        CHECK(denied > 0);
        CHECK(coarse);
        /* The blob's header and one sliding record at its cap, from the
           layout's own constants (state-format.md): never larger. */
        CHECK(k.len <= RATEL__HEADER_SIZE + RATEL__SLIDING_MAX_SIZE);
    }
}

/*
 * The continuous-state leaky bucket, in units of 1/limit us: level X (the
 * bucket's content) drains one unit per unit of time; a request of cost c
 * conforms if max(0, X - elapsed) + c*T <= tau, in which case X takes it.
 */
typedef struct ref_bucket_s {
    __int128 x, last; /* content and last conformance time, scaled */
} ref_bucket_t;

TEST(property_gcra_equals_leaky_bucket)
{
    long traces = ratel_test_iterations(3000);
    for (long tr = 0; tr < traces; tr++) {
        char text[64];
        const char *rules[] = {text, NULL};
        test_key_t k;
        ref_bucket_t b = {0, 0};
        int64_t limit = ratel_test_between(1, tr % 2 ? 20 : 100000);
        int64_t period = ratel_test_between(1, tr % 3 ? 2000 : 100000);
        int64_t burst = ratel_test_between(1, limit * 2);
        int64_t t_us = ratel_test_between(0, 1000000000);
        __int128 T = (__int128)period * 1000, tau = T * burst;
        int steps = (int)ratel_test_between(1, 200);

        snprintf(text, sizeof text, "%lld/%lldms:gcra,burst=%lld",
                 (long long)limit, (long long)period, (long long)burst);
        if (burst * period / limit > 3650LL * 86400000)
            continue;
        REQUIRE(test_key_init(&k, rules) == 0);
        b.last = (__int128)t_us * limit;
        for (int s = 0; s < steps; s++) {
            ratel_decision_t d;
            int64_t cost = ratel_test_between(1, burst < 4 ? burst : 4);
            __int128 now, x;
            int want;
            t_us +=
                ratel_test_between(0, (int64_t)period * 1000 / limit * 2 + 1);
            now = (__int128)t_us * limit;
            x = b.x - (now - b.last);
            if (x < 0)
                x = 0;
            want = x + cost * T <= tau;
            REQUIRE(test_acquire_us(&k, t_us, (uint64_t)cost, 0, 0, &d) == 0);
            CHECK_EQ(d.allowed, want);
            if (want) {
                b.x = x + cost * T;
                b.last = now;
                CHECK_EQ(d.remaining, (int64_t)((tau - b.x) / T));
            } else {
                /* Fits once the bucket has drained enough. */
                __int128 wait = x + cost * T - tau;
                int64_t us = (int64_t)((wait + limit - 1) / limit);
                CHECK_EQ(d.retry_after_ms, (us + 999) / 1000);
            }
        }
    }
}

static const char *const algo_suffix[] = {"", ":fixed", ":approx", ":gcra"};

/* A random rule "L/Pms[:algo]" written into text. */
static void random_rule(char *text, size_t len, int algo)
{
    snprintf(text, len, "%lld/%lldms%s", (long long)ratel_test_between(2, 8),
             (long long)ratel_test_between(5, 400), algo_suffix[algo]);
}

TEST(property_policy_is_all_or_nothing_and_retry_exact)
{
    long traces = ratel_test_iterations(1500);
    for (long tr = 0; tr < traces; tr++) {
        char text[3][64];
        const char *rules[4] = {text[0], text[1], text[2], NULL};
        const char *single[3][2];
        test_key_t k, one[3];
        int n = (int)ratel_test_between(1, 3);
        int64_t t = ratel_test_between(0, 100000);
        ratel_decision_t d, ds;

        for (int i = 0; i < n; i++) {
            int again = 1;
            while (again) { /* draw until it differs from the others */
                random_rule(text[i], sizeof text[i],
                            (int)ratel_test_between(0, 3));
                again = 0;
                for (int j = 0; j < i; j++)
                    again |= strcmp(text[i], text[j]) == 0;
            }
            single[i][0] = text[i];
            single[i][1] = NULL;
        }
        rules[n] = NULL;
        REQUIRE(test_key_init(&k, rules) == 0);
        for (int i = 0; i < n; i++)
            REQUIRE(test_key_init(&one[i], single[i]) == 0);
        for (int s = 0; s < 100; s++) {
            int all = 1;
            int64_t retry = 0, remaining = INT64_MAX, reset = 0;
            t = next_time(t, 200);
            /* One-rule keys take the core's one-rule path, several rules
               the general one: they must agree field by field. */
            for (int i = 0; i < n; i++) {
                REQUIRE(test_peek(&one[i], t, 1, &ds) >= 0);
                all &= ds.allowed;
                if (ds.retry_after_ms > retry)
                    retry = ds.retry_after_ms;
                if (ds.reset_after_ms > reset)
                    reset = ds.reset_after_ms;
            }
            REQUIRE(test_take(&k, t, 1, &d) >= 0);
            CHECK_EQ(d.allowed, all);
            CHECK_EQ(d.retry_after_ms, retry);
            if (all) {
                reset = 0;
                for (int i = 0; i < n; i++) {
                    REQUIRE(test_take(&one[i], t, 1, &ds) == 1);
                    if (ds.remaining < remaining)
                        remaining = ds.remaining;
                    if (ds.reset_after_ms > reset)
                        reset = ds.reset_after_ms;
                }
                CHECK_EQ(d.remaining, remaining);
                CHECK_EQ(d.reset_after_ms, reset);
            } else {
                CHECK_EQ(d.reset_after_ms, reset);
                /* Exact: one ms early is still denied, then it fits. */
                CHECK_EQ(test_peek(&k, t + d.retry_after_ms - 1, 1, NULL), 0);
                CHECK_EQ(test_peek(&k, t + d.retry_after_ms, 1, NULL), 1);
            }
        }
    }
}

TEST(property_refund_undoes_acquire)
{
    long traces = ratel_test_iterations(1500);
    for (long tr = 0; tr < traces; tr++) {
        char text[64];
        const char *rules[] = {text, NULL};
        test_key_t k;
        int64_t t = ratel_test_between(0, 100000);
        random_rule(text, sizeof text, (int)(tr % 4));
        REQUIRE(test_key_init(&k, rules) == 0);
        for (int s = 0; s < 60; s++) {
            ratel_decision_t before, after;
            int64_t cost = ratel_test_between(1, 2);
            t = next_time(t, 200);
            if (ratel_test_between(0, 2) == 0) {
                REQUIRE(test_take(&k, t, 1, NULL) >= 0);
                continue;
            }
            REQUIRE(test_peek(&k, t, (uint64_t)cost, &before) >= 0);
            if (test_take(&k, t, (uint64_t)cost, NULL) != 1)
                continue;
            REQUIRE(test_refund(&k, t, (uint64_t)cost, NULL) == 0);
            REQUIRE(test_peek(&k, t, (uint64_t)cost, &after) >= 0);
            CHECK_EQ(after.allowed, before.allowed);
            CHECK_EQ(after.remaining, before.remaining);
            CHECK_EQ(after.retry_after_ms, before.retry_after_ms);
            CHECK_EQ(ratel_state_validate(k.buf, k.len), 0);
        }
    }
}

RATEL_SUITE(properties) = {
    {"property_sliding_equals_brute_force_under_cap",
     test_property_sliding_equals_brute_force_under_cap},
    {"property_sliding_never_exceeds_limit_past_cap",
     test_property_sliding_never_exceeds_limit_past_cap},
    {"property_gcra_equals_leaky_bucket",
     test_property_gcra_equals_leaky_bucket},
    {"property_policy_is_all_or_nothing_and_retry_exact",
     test_property_policy_is_all_or_nothing_and_retry_exact},
    {"property_refund_undoes_acquire", test_property_refund_undoes_acquire},
    {0, 0},
};
