/*
 * test_slice.c - slices of a policy's permits (ratel_policy_slice,
 * ratel_policy_slice_return, the fair share and the demand record), by
 * hand. The hosts that spend them, and the bound they keep, are
 * tests/unit/test_lease.c's simulator (the store's lease client).
 */
#include "core_helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int slice_at(test_key_t *k, int64_t t_ms, uint64_t want, int64_t ttl_ms,
                    uint64_t *granted, int64_t *expires_us, ratel_decision_t *d)
{
    return ratel_policy_slice(&k->policy, k->buf, &k->len, sizeof k->buf,
                              t_ms * 1000, want, ttl_ms * 1000, granted,
                              expires_us, d);
}

TEST(slice_by_hand)
{
    static const char *const rules[] = {"100/1s", "1000/1m", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g, back;
    int64_t end;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(slice_at(&k, 1000, 30, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 30);
    CHECK_EQ(end, 1250000);
    CHECK_EQ(d.remaining, 70);
    /* More than is left: what is left. */
    CHECK_EQ(slice_at(&k, 1010, 90, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 70);
    CHECK_EQ(test_peek(&k, 1010, 1, NULL), 0);
    /* Nothing left: 0 granted, nothing charged, when to retry. */
    CHECK_EQ(slice_at(&k, 1020, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.retry_after_ms, 980);
    /* Unspent permits come back while the slice lives, not after. */
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1200 * 1000, 20, end, &back, &d),
             0);
    CHECK_EQ(back, 0); /* the 0-permit slice: its end is 0 */
    CHECK_EQ(slice_at(&k, 1100, 1, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 0);
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1200 * 1000, 20, 1260 * 1000, &back, &d),
             0);
    CHECK_EQ(back, 20);
    CHECK_EQ(test_peek(&k, 1200, 20, NULL), 1);
    CHECK_EQ(test_peek(&k, 1200, 21, NULL), 0);
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1260 * 1000, 5, 1260 * 1000, &back, &d),
             0);
    CHECK_EQ(back, 0);
    CHECK_EQ(test_peek(&k, 1260, 21, NULL), 0);
}

TEST(slice_windows_and_refusals)
{
    static const char *const fixed[] = {"100/1s:fixed", NULL};
    static const char *const gcra[] = {"10/1s:gcra,burst=5", NULL};
    static const char *const conc[] = {"100/1s", "5/10s:concurrent", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g;
    int64_t end;

    /* A fixed window's slice ends with the window. */
    REQUIRE(test_key_init(&k, fixed) == 0);
    CHECK_EQ(slice_at(&k, 5900, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 10);
    CHECK_EQ(end, 6000000);
    CHECK_EQ(slice_at(&k, 6000, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(end, 6250000);
    /* gcra: never more than its burst at once. */
    REQUIRE(test_key_init(&k, gcra) == 0);
    CHECK_EQ(slice_at(&k, 1000, 50, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 5);
    CHECK_EQ(slice_at(&k, 1100, 50, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 1);
    /* Refused: a concurrent rule, want 0, a lifetime out of range. */
    REQUIRE(test_key_init(&k, conc) == 0);
    CHECK_EQ(slice_at(&k, 1000, 5, 250, &g, &end, &d), RATEL_EINVAL);
    REQUIRE(test_key_init(&k, fixed) == 0);
    CHECK_EQ(slice_at(&k, 1000, 0, 250, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(slice_at(&k, 1000, 5, 0, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(slice_at(&k, 1000, 5, 3600001, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(k.len, 0);
}

/* The fair share: what is left split by the holders' wants. */
TEST(slice_share_arithmetic)
{
    CHECK_EQ(ratel_slice_share(100, 400, 400), 100); /* all fit */
    CHECK_EQ(ratel_slice_share(100, 400, 1000), 100);
    CHECK_EQ(ratel_slice_share(100, 400, 40), 10); /* 1 : 3 */
    CHECK_EQ(ratel_slice_share(300, 400, 40), 30);
    CHECK_EQ(ratel_slice_share(1, 400, 40), 1); /* never 0 while one fits */
    CHECK_EQ(ratel_slice_share(100, 400, 0), 0);
    /* The largest product (10^18) stays exact. */
    CHECK_EQ(ratel_slice_share(1000000000, 16000000000ull, 999999999),
             62499999);
}

TEST(slice_shared_by_hand)
{
    static const char *const rules[] = {"1000/1h:fixed", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g;
    int64_t end, t = 3600000;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(slice_at(&k, t, 960, 1000, &g, &end, &d), 0);
    CHECK_EQ(g, 960);
    /* 40 left; holders want 100 and 300: 10 and (given back) 30. */
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 1) * 1000, 100, 400, 1000000, &g,
                                       &end, &d),
             0);
    CHECK_EQ(g, 10);
    CHECK_EQ(d.remaining, 30);
    CHECK_EQ(end, (t + 1001) * 1000);
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 2) * 1000, 300, 400, 1000000, &g,
                                       &end, &d),
             0);
    CHECK_EQ(g, 22); /* floor(30 x 300 / 400) */
    /* total below want: refused. */
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 2) * 1000, 300, 299, 1000000, &g,
                                       &end, &d),
             RATEL_EINVAL);
}

/* Reads entry i of a demand record: holder, time of ask, want. */
static void demand_entry(const uint8_t *rec, int i, uint64_t *holder,
                         int64_t *at_ms, uint32_t *want)
{
    const uint8_t *p = rec + 4 + 20 * i;
    *holder = *at_ms = *want = 0;
    for (int b = 7; b >= 0; b--) {
        *holder = *holder << 8 | p[b];
        *at_ms = (int64_t)((uint64_t)*at_ms << 8 | p[8 + b]);
    }
    for (int b = 3; b >= 0; b--)
        *want = *want << 8 | p[16 + b];
}

TEST(slice_demand_record)
{
    uint8_t rec[RATEL_DEMAND_MAX];
    size_t len = 0;
    uint64_t total, holder;
    int64_t at;
    uint32_t want;

    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1000, 250, 7, 100,
                                     &total),
             0);
    CHECK_EQ(len, 24);
    CHECK_EQ(memcmp(rec, "RD\x01\x01", 4), 0);
    CHECK_EQ(total, 100);
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1100, 250, 9, 300,
                                     &total),
             0);
    CHECK_EQ(total, 400);
    /* Holder 7 again: its entry moves last with its new want. */
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1200, 250, 7, 50,
                                     &total),
             0);
    CHECK_EQ(total, 350);
    CHECK_EQ(len, 44);
    demand_entry(rec, 0, &holder, &at, &want);
    CHECK_EQ(holder, 9);
    CHECK_EQ(at, 1100);
    CHECK_EQ(want, 300);
    demand_entry(rec, 1, &holder, &at, &want);
    CHECK_EQ(holder, 7);
    CHECK_EQ(at, 1200);
    /* 2 x TTL after its ask, holder 9 is gone. */
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1600, 250, 7, 50,
                                     &total),
             0);
    CHECK_EQ(total, 50);
    CHECK_EQ(len, 24);
    /* At most 16 holders: the longest asked goes first. */
    for (uint64_t h = 100; h < 120; h++)
        CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, h, 1,
                                         &total),
                 0);
    CHECK_EQ(len, RATEL_DEMAND_MAX);
    CHECK_EQ(total, 16);
    demand_entry(rec, 0, &holder, &at, &want);
    CHECK_EQ(holder, 104);
    /* Refused: no record's bytes, a newer version, arguments out of range. */
    rec[2] = 2;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 1, 1, &total),
        RATEL_EVERSION);
    rec[2] = 1;
    rec[3] = 15;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 1, 1, &total),
        RATEL_ECORRUPT);
    len = 0;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 0, 1, &total),
        RATEL_EINVAL);
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 0, 1, 1, &total),
        RATEL_EINVAL);
    CHECK_EQ(ratel_slice_demand_note(rec, &len, 10, 1700, 250, 1, 1, &total),
             RATEL_ENOBUFS);
}

RATEL_SUITE(slice) = {
    {"slice_by_hand", test_slice_by_hand},
    {"slice_windows_and_refusals", test_slice_windows_and_refusals},
    {"slice_share_arithmetic", test_slice_share_arithmetic},
    {"slice_shared_by_hand", test_slice_shared_by_hand},
    {"slice_demand_record", test_slice_demand_record},
    {0},
};
