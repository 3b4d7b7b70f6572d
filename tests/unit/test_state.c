/*
 * test_state.c - the state blob: layout, sizes, and rejection of truncated,
 * corrupted and foreign blobs (they are rejected or decode to a valid state;
 * nothing crashes and a rejected blob is left as it was).
 */
#include "core_helpers.h"

/* A key with some history under a policy that uses every algorithm. */
static void build(test_key_t *k)
{
    static const char *const rules[] = {"50/1m", "5/1s:fixed", "8/1s:gcra",
                                        "9/2s:approx", NULL};
    REQUIRE(test_key_init(k, rules) == 0);
    for (int i = 0; i < 40; i++)
        test_take(k, 1700000000000LL + i * 37, 1, NULL);
}

TEST(state_gcra_key_fits_32_bytes)
{
    static const char *const rules[] = {"100/1s:gcra,burst=200", NULL};
    test_key_t k;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 1700000000000LL, 1, NULL), 1);
    CHECK_EQ(k.len, 30);
    CHECK(k.len <= 32);
}

TEST(state_documented_layout)
{
    /* docs/state-format.md, byte by byte, for "2/1s" after one request at
       t = 0x0102030405 ms. */
    static const char *const rules[] = {"2/1s", NULL};
    static const uint8_t want[] = {
        'R',  'T',  1,    1, /* header */
        0,    0,    2,    0,    0,    0, 0xe8, 0x03,
        0,    0,                                  /* sliding 2/1000ms */
        0x05, 0x04, 0x03, 0x02, 0x01, 0, 0,    0, /* base_ms */
        1,    0,                                  /* one run */
        1,    0,    0,    0,                      /* total 1 */
        0,    0,    0,    0,    1,    0, 0,    0, /* +0 ms, count 1 */
    };
    test_key_t k;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 0x0102030405LL, 1, NULL), 1);
    CHECK_EQ(k.len, sizeof want);
    CHECK(memcmp(k.buf, want, sizeof want) == 0);
}

TEST(state_sliding_bytes_per_event)
{
    /* 1,000 events at distinct milliseconds in one window. */
    static const char *const rules[] = {"1000/1h", NULL};
    test_key_t k;
    REQUIRE(test_key_init(&k, rules) == 0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(test_take(&k, 1700000000000LL + i * 1000, 1, NULL), 1);
    CHECK(k.len * 1000 <= 4 * 1000 * 1000); /* <= 4 bytes per event */
    CHECK(k.len <= ratel_policy_state_max(&k.policy));
    CHECK_EQ(ratel_state_validate(k.buf, k.len), 0);
}

TEST(state_every_truncation_is_rejected)
{
    test_key_t k;
    build(&k);
    for (size_t len = 1; len < k.len; len++) {
        uint8_t copy[TEST_STATE_CAP];
        size_t l = len;
        ratel_decision_t d;
        ratel_request_t q = RATEL_REQUEST_INIT;
        memcpy(copy, k.buf, len);
        CHECK(ratel_state_validate(copy, len) == RATEL_ECORRUPT);
        CHECK_EQ(ratel_policy_acquire(&k.policy, copy, &l, sizeof copy,
                                      1700000001000000LL, &q, &d),
                 RATEL_ECORRUPT);
        CHECK_EQ(l, len);
        CHECK(memcmp(copy, k.buf, len) == 0);
    }
}

TEST(state_every_bit_flip_is_rejected_or_valid)
{
    test_key_t k;
    long accepted = 0, rejected = 0;
    build(&k);
    for (size_t byte = 0; byte < k.len; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            uint8_t copy[TEST_STATE_CAP], saved[TEST_STATE_CAP];
            size_t l = k.len;
            ratel_decision_t d;
            ratel_request_t q = RATEL_REQUEST_INIT;
            int rc;
            memcpy(copy, k.buf, k.len);
            copy[byte] ^= (uint8_t)(1u << bit);
            memcpy(saved, copy, k.len);
            rc = ratel_policy_acquire(&k.policy, copy, &l, sizeof copy,
                                      1700000001000000LL, &q, &d);
            if (rc == 0) {
                accepted++;
                CHECK_EQ(ratel_state_validate(copy, l), 0);
                CHECK(d.allowed == 0 || d.allowed == 1);
                CHECK(d.remaining >= 0);
                CHECK((d.retry_after_ms > 0) == !d.allowed);
            } else {
                rejected++;
                CHECK(rc == RATEL_ECORRUPT || rc == RATEL_EVERSION);
                CHECK(memcmp(copy, saved, k.len) == 0);
            }
        }
    }
    CHECK(accepted > 0);
    CHECK(rejected > 0);
}

TEST(state_foreign_blobs_are_rejected)
{
    static const struct {
        const char *bytes;
        size_t len;
        int err;
    } cases[] = {
        {"hello", 5, RATEL_ECORRUPT},
        {"{\"count\":3}", 11, RATEL_ECORRUPT},
        {"RT\x02\x01", 4, RATEL_EVERSION},
        {"RT\x01\x00", 4, RATEL_ECORRUPT},
        {"RT\x01\x09", 4, RATEL_ECORRUPT},
        {"RT\x01\x01", 4, RATEL_ECORRUPT},
        {"R", 1, RATEL_ECORRUPT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_EQ(
            ratel_state_validate((const uint8_t *)cases[i].bytes, cases[i].len),
            cases[i].err);
    /* Trailing junk after a valid blob. */
    {
        test_key_t k;
        build(&k);
        k.buf[k.len] = 0;
        CHECK_EQ(ratel_state_validate(k.buf, k.len + 1), RATEL_ECORRUPT);
    }
}

TEST(state_random_bytes_never_crash)
{
    long n = ratel_test_iterations(20000);
    test_key_t k;
    build(&k);
    for (long i = 0; i < n; i++) {
        uint8_t blob[256];
        size_t len = (size_t)ratel_test_between(0, sizeof blob);
        ratel_rule_status_t st[RATEL_MAX_RULES];
        size_t nst, l = len;
        ratel_decision_t d;
        ratel_request_t q = RATEL_REQUEST_INIT;
        for (size_t b = 0; b < len; b++)
            blob[b] = (uint8_t)ratel_test_rand();
        if (len >= 4 && i % 2) { /* often a plausible header */
            blob[0] = 'R';
            blob[1] = 'T';
            blob[2] = 1;
            blob[3] = (uint8_t)ratel_test_between(1, 4);
        }
        (void)ratel_state_validate(blob, len);
        (void)ratel_state_inspect(blob, len, 0, st, RATEL_MAX_RULES, &nst);
        if (ratel_policy_acquire(&k.policy, blob, &l, sizeof blob, 1000, &q,
                                 &d) == 0)
            CHECK_EQ(ratel_state_validate(blob, l), 0);
    }
}

RATEL_SUITE(state) = {
    {"state_gcra_key_fits_32_bytes", test_state_gcra_key_fits_32_bytes},
    {"state_documented_layout", test_state_documented_layout},
    {"state_sliding_bytes_per_event", test_state_sliding_bytes_per_event},
    {"state_every_truncation_is_rejected",
     test_state_every_truncation_is_rejected},
    {"state_every_bit_flip_is_rejected_or_valid",
     test_state_every_bit_flip_is_rejected_or_valid},
    {"state_foreign_blobs_are_rejected", test_state_foreign_blobs_are_rejected},
    {"state_random_bytes_never_crash", test_state_random_bytes_never_crash},
    {0, 0},
};
