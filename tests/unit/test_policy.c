/*
 * test_policy.c - several rules on one key: all-or-nothing, peek, refund,
 * the binding rule, rule changes, and the ENOBUFS contract.
 */
#include "core_helpers.h"
#include "core/owned.h"

static int64_t used_of(test_key_t *k, int64_t t_ms, size_t rule)
{
    ratel_rule_status_t st[RATEL_MAX_RULES];
    size_t n = 0;
    if (ratel_state_inspect(k->buf, k->len, t_ms * 1000, st, RATEL_MAX_RULES,
                            &n) != 0 ||
        rule >= n)
        return -1;
    return st[rule].used;
}

TEST(policy_rejected_request_charges_no_rule)
{
    /* The seeds' SMS rule: 1 per minute AND 10 per hour. */
    static const char *const rules[] = {"1/60s", "10/1h", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0, 1, &d), 1);
    CHECK_EQ(d.rule, 0);
    CHECK_EQ(d.remaining, 0);
    for (int i = 1; i <= 50; i++) {
        CHECK_EQ(test_take(&k, i * 1000, 1, &d), 0);
        CHECK_EQ(d.rule, 0);
        CHECK_EQ(d.limit, 1);
        CHECK_EQ(d.retry_after_ms, 60000 - i * 1000);
    }
    /* The hour rule counted only the admitted request. */
    CHECK_EQ(used_of(&k, 50000, 1), 1);
    /* Nine more, one a minute, then the hour rule binds. */
    for (int i = 1; i <= 9; i++)
        CHECK_EQ(test_take(&k, i * 60000, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 10 * 60000, 1, &d), 0);
    CHECK_EQ(d.rule, 1);
    CHECK_EQ(d.limit, 10);
    CHECK_EQ(d.retry_after_ms, 3600000 - 600000);
    CHECK_EQ(d.reset_after_ms, 3600000 + 9 * 60000 - 600000);
}

TEST(policy_peek_changes_nothing)
{
    static const char *const rules[] = {"3/1s", "5/1m:fixed", "4/1s:gcra",
                                        "6/10s:approx", NULL};
    test_key_t k;
    uint8_t before[TEST_STATE_CAP];
    ratel_decision_t dp, da;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_peek(&k, 0, 1, &dp), 1);
    CHECK_EQ(k.len, 0); /* a peek on a new key creates nothing */
    for (int t = 0; t < 3000; t += 50) {
        size_t len = k.len;
        memcpy(before, k.buf, k.len);
        REQUIRE(test_peek(&k, t, 1, &dp) >= 0);
        CHECK_EQ(k.len, len);
        CHECK(memcmp(before, k.buf, len) == 0);
        REQUIRE(test_take(&k, t, 1, &da) >= 0);
        CHECK_EQ(dp.allowed, da.allowed);
        CHECK_EQ(dp.retry_after_ms, da.retry_after_ms);
        if (da.allowed)
            CHECK_EQ(dp.remaining - 1, da.remaining);
    }
}

TEST(policy_refund_gives_permits_back_capped)
{
    static const char *const rules[] = {"1/60s", "10/1d:fixed", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 1000, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 2000, 1, NULL), 0);
    /* The SMS provider failed: give the permit back. */
    CHECK_EQ(test_refund(&k, 3000, 1, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(k.len, 0); /* nothing left counted: the key can go */
    CHECK_EQ(test_take(&k, 4000, 1, NULL), 1);
    /* Refunding more than was counted stops at zero. */
    CHECK_EQ(test_refund(&k, 5000, 100, &d), 0);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(used_of(&k, 5000, 1), -1);
    CHECK_EQ(test_refund(&k, 5000, 0, &d), RATEL_EINVAL);
    /* Refund on a key never seen: nothing to do, nothing stored. */
    k.len = 0;
    CHECK_EQ(test_refund(&k, 5000, 1, &d), 0);
    CHECK_EQ(k.len, 0);
    CHECK_EQ(d.remaining, 1);
}

TEST(policy_rule_change_keeps_unchanged_rules)
{
    static const char *const old_rules[] = {"1/60s", "10/1h", "5/1s:gcra",
                                            "100/1d:fixed", NULL};
    static const char *const new_rules[] = {"10/1h", "20/60s", "10/1s:gcra",
                                            "100/1d:approx", NULL};
    test_key_t k, n;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, old_rules) == 0);
    REQUIRE(test_key_init(&n, new_rules) == 0);
    CHECK_EQ(test_take(&k, 0, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 60000, 1, NULL), 1);
    /* Same key, edited config. */
    memcpy(n.buf, k.buf, k.len);
    n.len = k.len;
    CHECK_EQ(test_peek(&n, 60000, 1, &d), 1);
    CHECK_EQ(n.len, k.len); /* a peek does not rewrite */
    CHECK_EQ(test_take(&n, 60000, 1, &d), 1);
    /* 10/1h kept both events; 20/60s (was 1/60s: same period) kept the
       count of its window; 10/1s:gcra kept the permit owed at 5/1s... */
    CHECK_EQ(used_of(&n, 60000, 0), 3);
    CHECK_EQ(used_of(&n, 60000, 1), 2);
    /* ...and 100/1d:approx changed algorithm, so it started empty. */
    CHECK_EQ(used_of(&n, 60000, 3), 1);
    CHECK_EQ(ratel_state_validate(n.buf, n.len), 0);
}

TEST(policy_gcra_conversion_keeps_debt_capped_at_new_burst)
{
    static const char *const before[] = {"10/1s:gcra", NULL};
    static const char *const after[] = {"2/1s:gcra", NULL};
    test_key_t k, n;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, before) == 0);
    REQUIRE(test_key_init(&n, after) == 0);
    CHECK_EQ(test_take(&k, 0, 10, NULL), 1);
    memcpy(n.buf, k.buf, k.len);
    n.len = k.len;
    /* 10 permits owed, capped at the new burst of 2: empty bucket, and the
       next permit comes after one new interval of 500 ms. */
    CHECK_EQ(test_take(&n, 0, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 500);
    /* The denial stored the converted state, so the retry holds. */
    CHECK_EQ(test_take(&n, 499, 1, &d), 0);
    CHECK_EQ(test_take(&n, 500, 1, &d), 1);
}

TEST(policy_enobufs_contract)
{
    static const char *const rules[] = {"100/1m", "10/1s:gcra", NULL};
    ratel_policy_t p;
    uint8_t buf[128], copy[128];
    size_t len = 0, need;
    ratel_decision_t d;
    ratel_request_t q = RATEL_REQUEST_INIT;
    char err[256];

    REQUIRE(ratel_policy_parse(&p, rules, 2, err, sizeof err) == 0);
    CHECK_EQ(ratel_policy_state_max(&p), 4 + 24 + 8 * 256 + 26);
    /* A new key needs header + records + one run. */
    CHECK_EQ(ratel_policy_acquire(&p, buf, &len, 8, 0, &q, &d), RATEL_ENOBUFS);
    need = len;
    CHECK_EQ(need, 4 + 32 + 26);
    len = 0;
    CHECK_EQ(ratel_policy_acquire(&p, buf, &len, need, 0, &q, &d), 0);
    CHECK_EQ(len, need);
    /* A second instant needs a second run: 8 more bytes, state untouched
       until there is room. */
    memcpy(copy, buf, len);
    CHECK_EQ(ratel_policy_acquire(&p, buf, &len, need, 5000, &q, &d),
             RATEL_ENOBUFS);
    CHECK_EQ(len, need + 8);
    CHECK(memcmp(copy, buf, need) == 0);
    len = need;
    CHECK_EQ(ratel_policy_acquire(&p, buf, &len, sizeof buf, 5000, &q, &d), 0);
    CHECK_EQ(len, need + 8);
    CHECK_EQ(ratel_state_validate(buf, len), 0);
    /* Same instant: no growth, so a full buffer is enough. */
    CHECK_EQ(ratel_policy_acquire(&p, buf, &len, len, 5000, &q, &d), 0);
}

TEST(policy_in_place_contract)
{
    static const char *const rules[] = {"1/60s", "10/1h"};
    static const char *const other[] = {"2/60s", "10/1h"};
    ratel_policy_t p, q;
    uint8_t buf[256], mirror[256], before[256];
    size_t len = 0, mlen, blen;
    ratel_decision_t d, md;
    ratel_request_t r = RATEL_REQUEST_INIT;
    char err[256];

    REQUIRE(ratel_policy_parse(&p, rules, 2, err, sizeof err) == 0);
    REQUIRE(ratel_policy_parse(&q, other, 2, err, sizeof err) == 0);
    /* A new key is charged in place. */
    CHECK_EQ(
        ratel__policy_acquire_in_place(&p, buf, &len, sizeof buf, 0, &r, &d),
        0);
    CHECK_EQ(d.allowed, 1);
    CHECK(len > 0);
    /* Decided as the owned entry decides on a copy; a denial writes
       nothing. */
    for (int64_t t = 1000; t <= 181000; t += 30000) {
        memcpy(mirror, buf, len);
        mlen = len;
        memcpy(before, buf, len);
        blen = len;
        CHECK_EQ(ratel__policy_acquire_in_place(&p, buf, &len, sizeof buf,
                                                t * 1000, &r, &d),
                 0);
        CHECK_EQ(ratel__policy_acquire_owned(&p, mirror, &mlen, sizeof mirror,
                                             t * 1000, &r, &md),
                 0);
        CHECK_EQ(d.allowed, md.allowed);
        CHECK_EQ(d.retry_after_ms, md.retry_after_ms);
        CHECK_EQ(len, mlen);
        CHECK(memcmp(buf, mirror, len) == 0);
        if (!d.allowed)
            CHECK(len == blen && memcmp(buf, before, len) == 0);
    }
    /* No room to charge: RATEL_ENOBUFS, the blob as it was. */
    memcpy(before, buf, len);
    blen = len;
    CHECK_EQ(
        ratel__policy_acquire_in_place(&p, buf, &len, len, 400000000, &r, &d),
        RATEL_ENOBUFS);
    CHECK(memcmp(buf, before, blen) == 0);
    len = blen;
    /* Another policy's blob (the owned entry would convert it, and store
       the conversion even when denying) and a corrupt one: 1, untouched. */
    CHECK_EQ(ratel__policy_acquire_in_place(&q, buf, &len, sizeof buf,
                                            181000000, &r, &d),
             1);
    CHECK(len == blen && memcmp(buf, before, len) == 0);
    buf[0] ^= 0xff;
    CHECK_EQ(ratel__policy_acquire_in_place(&p, buf, &len, sizeof buf,
                                            181000000, &r, &d),
             1);
    CHECK_EQ(len, blen);
}

TEST(policy_inspect_describes_each_rule)
{
    static const char *const rules[] = {"5/1m", "3/1s:fixed", "4/1s:gcra",
                                        "9/1s:approx", NULL};
    test_key_t k;
    ratel_rule_status_t st[4];
    size_t n;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 1500, 2, NULL), 1);
    CHECK_EQ(ratel_state_inspect(k.buf, k.len, 1500000, st, 4, &n), 0);
    REQUIRE(n == 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(st[i].used, 2);
        CHECK(st[i].rule.algo == k.policy.rules[i].algo);
    }
    CHECK_EQ(st[0].remaining, 3);
    CHECK_EQ(st[0].runs, 1);
    CHECK_EQ(st[0].granularity_ms, 1);
    CHECK_EQ(st[0].reset_after_ms, 60000);
    CHECK_EQ(st[1].window_start_ms, 1000);
    CHECK_EQ(st[1].reset_after_ms, 500);
    CHECK_EQ(st[2].tat_us, 2000000);
    CHECK_EQ(st[2].remaining, 2);
    CHECK_EQ(st[3].reset_after_ms, 1500);
    /* An empty state has no rules. */
    CHECK_EQ(ratel_state_inspect(k.buf, 0, 0, st, 4, &n), 0);
    CHECK_EQ(n, 0);
}

TEST(policy_check_request_names_the_rule)
{
    const char *texts[] = {"10/1m", "5/1s:gcra,burst=3", "100/1h"};
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_policy_t p;
    size_t rule = 99;

    REQUIRE(ratel_policy_parse(&p, texts, 3, NULL, 0) == 0);
    CHECK_EQ(ratel_policy_check_request(&p, &req, &rule), 0);
    CHECK_EQ(rule, 99);
    req.cost = 3;
    CHECK_EQ(ratel_policy_check_request(&p, &req, &rule), 0);
    req.cost = 4; /* above the gcra rule's burst, not its limit */
    CHECK_EQ(ratel_policy_check_request(&p, &req, &rule), RATEL_ECOST);
    CHECK_EQ(rule, 1);
    req.cost = 0;
    CHECK_EQ(ratel_policy_check_request(&p, &req, NULL), RATEL_EINVAL);
    req.cost = 1;
    req.max_wait_ms = 10; /* reservations need every rule to be gcra */
    CHECK_EQ(ratel_policy_check_request(&p, &req, NULL), RATEL_EINVAL);
    CHECK_EQ(ratel_policy_check_request(&p, &req, &rule), RATEL_EINVAL);
    CHECK_EQ(rule, 0); /* the first rule that cannot reserve */
    req.max_wait_ms = -1;
    CHECK_EQ(ratel_policy_check_request(&p, &req, NULL), RATEL_EINVAL);
}

RATEL_SUITE(policy) = {
    {"policy_check_request_names_the_rule",
     test_policy_check_request_names_the_rule},
    {"policy_rejected_request_charges_no_rule",
     test_policy_rejected_request_charges_no_rule},
    {"policy_peek_changes_nothing", test_policy_peek_changes_nothing},
    {"policy_refund_gives_permits_back_capped",
     test_policy_refund_gives_permits_back_capped},
    {"policy_rule_change_keeps_unchanged_rules",
     test_policy_rule_change_keeps_unchanged_rules},
    {"policy_gcra_conversion_keeps_debt_capped_at_new_burst",
     test_policy_gcra_conversion_keeps_debt_capped_at_new_burst},
    {"policy_enobufs_contract", test_policy_enobufs_contract},
    {"policy_in_place_contract", test_policy_in_place_contract},
    {"policy_inspect_describes_each_rule",
     test_policy_inspect_describes_each_rule},
    {0, 0},
};
