/*
 * test_rlqs_share.c - the split of a bucket's rate among RLQS streams
 * (rateld/rlqs_share.h): the arithmetic by hand, a share moving from a
 * quiet Envoy to a busy one only after the quiet one's assignment has
 * expired, and a simulator of Envoys that come, go and change their
 * demand at random, checking at every step that the rates they may be
 * using sum to at most the policy's rate.
 */
#include "rateld/rlqs_share.h"
#include "test.h"

#include <string.h>

#define MS 1000
#define S (1000 * MS)

static const rateld_share_rule_t rule_100 = {
    .limit = 100,
    .period_us = S,
    .burst = 100,
    .ttl_us = 2 * S,
    .grace_us = 200 * MS,
    .floor_percent = 25,
};

static uint64_t held_sum(rateld_share_t *const *all, size_t n, int64_t now)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i++)
        sum += rateld_share_held(all[i], now);
    return sum;
}

TEST(rlqs_share_rule)
{
    rateld_share_rule_t r = rule_100;

    CHECK(rateld_share_rule_invalid(&r) == NULL);
    r.limit = 0;
    CHECK(rateld_share_rule_invalid(&r) != NULL);
    r = rule_100;
    r.floor_percent = 101;
    CHECK(rateld_share_rule_invalid(&r) != NULL);
    r = rule_100;
    r.ttl_us = 0;
    CHECK(rateld_share_rule_invalid(&r) != NULL);
}

TEST(rlqs_share_report)
{
    rateld_share_t s;

    memset(&s, 0, sizeof s);
    /* 50 requests in 500 ms: 100 a second, in thousandths. */
    rateld_share_report(&s, &rule_100, 50, 500 * MS);
    CHECK_EQ(s.demand, 100000);
    CHECK(s.reported);
    /* Halved into the previous value. */
    rateld_share_report(&s, &rule_100, 0, S);
    CHECK_EQ(s.demand, 50000);
    /* No time elapsed: ignored. */
    rateld_share_report(&s, &rule_100, 1000, 0);
    CHECK_EQ(s.demand, 50000);
    /* Huge counts are capped, not wrapped. */
    rateld_share_report(&s, &rule_100, UINT64_MAX, 1);
    CHECK(s.demand > 50000);
}

TEST(rlqs_share_by_hand)
{
    rateld_share_t a, b, c, *all[3] = {&a, &b, &c};
    rateld_share_grant_t g;

    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    /* Nobody reported: an even split, 33 each, 99 <= 100. */
    for (size_t i = 0; i < 3; i++) {
        REQUIRE(rateld_share_decide(all, 3, i, &rule_100, 0, 1, &g) == 1);
        CHECK_EQ(g.rate, 33);
        CHECK_EQ(g.burst, 33);
    }
    CHECK_EQ(held_sum(all, 3, 0), 99);
    /* Nothing new: nothing to send. */
    CHECK_EQ(rateld_share_decide(all, 3, 0, &rule_100, 10 * MS, 0, &g), 0);
    /* Demands 60, 30, 10: floor 25/3 = 8 each, the other 76 by demand. */
    rateld_share_report(&a, &rule_100, 60, S);
    rateld_share_report(&b, &rule_100, 30, S);
    rateld_share_report(&c, &rule_100, 10, S);
    CHECK_EQ(rateld_share_target(all, 3, 0, &rule_100), 8 + 45);
    CHECK_EQ(rateld_share_target(all, 3, 1, &rule_100), 8 + 22);
    CHECK_EQ(rateld_share_target(all, 3, 2, &rule_100), 8 + 7);
    /* c goes down at once (15); a's 34 of what is free (100 - 33 - 33)
       is within a tenth of its 33: not worth a new bucket yet. */
    REQUIRE(rateld_share_decide(all, 3, 2, &rule_100, S, 0, &g) == 1);
    CHECK_EQ(g.rate, 15);
    CHECK_EQ(rateld_share_decide(all, 3, 0, &rule_100, S, 0, &g), 0);
    CHECK(held_sum(all, 3, S) <= 100);
    /* Past half its TTL, a is extended with what is free: c's old 33 is
       held until 0 + ttl + grace = 2.2 s. */
    REQUIRE(rateld_share_decide(all, 3, 0, &rule_100, 1100 * MS, 0, &g) == 1);
    CHECK_EQ(g.rate, 34);
    CHECK_EQ(rateld_share_held(&c, 1100 * MS), 33);
    REQUIRE(rateld_share_decide(all, 3, 1, &rule_100, 1100 * MS, 0, &g) == 1);
    CHECK_EQ(g.rate, 30);
    CHECK(held_sum(all, 3, 1100 * MS) <= 100);
    /* Once c's and b's old assignments have ended, a gets its target. */
    REQUIRE(rateld_share_decide(all, 3, 0, &rule_100, 2300 * MS, 0, &g) == 1);
    CHECK_EQ(g.rate, 53);
    CHECK_EQ(held_sum(all, 3, 2300 * MS), 53 + 30 + 15);
    /* A closed stream keeps its hold until it ends, then is done. */
    c.closed = 1;
    CHECK(!rateld_share_done(&c, 2300 * MS));
    CHECK(rateld_share_done(&c, 4 * S));
    CHECK_EQ(rateld_share_target(all, 3, 2, &rule_100), 0);
}

TEST(rlqs_share_burst)
{
    rateld_share_rule_t r = rule_100;

    r.burst = 200; /* a gcra rule with burst=200 */
    CHECK_EQ(rateld_share_burst(&r, 50), 100);
    CHECK_EQ(rateld_share_burst(&r, 0), 0);
    r.burst = 10;
    CHECK_EQ(rateld_share_burst(&r, 3), 1); /* at least one token */
}

/* Envoys that subscribe, report, go quiet and leave at random; every
   step checks the sum of what they may be using. */
TEST(rlqs_share_simulated)
{
    enum { N = 6 };
    rateld_share_t s[N], *all[N];
    rateld_share_grant_t g;
    long steps = ratel_test_iterations(20000);
    uint64_t worst = 0, sent = 0;
    int64_t now = 0;

    memset(s, 0, sizeof s);
    for (size_t i = 0; i < N; i++)
        all[i] = &s[i];
    for (long k = 0; k < steps; k++) {
        size_t i = (size_t)ratel_test_between(0, N - 1);
        uint64_t sum;
        now += ratel_test_between(0, 150 * MS);
        switch (ratel_test_between(0, 9)) {
        case 0: /* leaves; a new stream takes its place later */
            if (s[i].closed && rateld_share_done(&s[i], now))
                memset(&s[i], 0, sizeof s[i]);
            else
                s[i].closed = 1;
            break;
        case 1: /* quiet */
            rateld_share_report(&s[i], &rule_100, 0, S);
            break;
        default: /* busy, at up to three times the whole rate */
            rateld_share_report(&s[i], &rule_100,
                                (uint64_t)ratel_test_between(0, 300), S);
            break;
        }
        for (size_t j = 0; j < N; j++)
            sent += (uint64_t)rateld_share_decide(all, N, j, &rule_100, now,
                                                  j == i, &g);
        sum = held_sum(all, N, now);
        if (sum > worst)
            worst = sum;
        REQUIRE(sum <= rule_100.limit);
    }
    CHECK(worst <= rule_100.limit);
    CHECK(worst >= rule_100.limit / 2); /* the rate is actually handed out */
    CHECK(sent > 0);
    printf("# rlqs_share: %ld steps, %llu assignments, worst sum %llu of "
           "%u\n",
           steps, (unsigned long long)sent, (unsigned long long)worst,
           rule_100.limit);
}

RATEL_SUITE(rlqs_share) = {
    {"rlqs_share_rule", test_rlqs_share_rule},
    {"rlqs_share_report", test_rlqs_share_report},
    {"rlqs_share_by_hand", test_rlqs_share_by_hand},
    {"rlqs_share_burst", test_rlqs_share_burst},
    {"rlqs_share_simulated", test_rlqs_share_simulated},
    {0},
};
