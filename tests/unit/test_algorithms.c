/*
 * test_algorithms.c - each algorithm with injected time, including the
 * boundary cases the seeds' scripts get wrong.
 */
#include "core_helpers.h"

/* The acceptance trace: 0 a, 0 a, 1 a, 999 a, 1000 a under 2/1s. */
TEST(sliding_acceptance_trace)
{
    static const char *const rules[] = {"2/1s", NULL};
    static const int64_t t[] = {0, 0, 1, 999, 1000};
    static const int want[] = {1, 1, 0, 0, 1};
    test_key_t k;
    REQUIRE(test_key_init(&k, rules) == 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(test_take(&k, t[i], 1, NULL), want[i]);
}

TEST(sliding_same_millisecond_both_count)
{
    static const char *const rules[] = {"2/1m", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 5000, 1, &d), 1);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(test_take(&k, 5000, 1, &d), 1);
    CHECK_EQ(d.remaining, 0);
    CHECK_EQ(test_take(&k, 5000, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 60000);
    CHECK_EQ(d.reset_after_ms, 60000);
}

TEST(sliding_retry_exactly_at_retry_after)
{
    static const char *const rules[] = {"3/10s", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 1000, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 2000, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 3000, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 4000, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 7000); /* the event at 1000 leaves at 11000 */
    CHECK_EQ(test_peek(&k, 4000 + d.retry_after_ms - 1, 1, NULL), 0);
    CHECK_EQ(test_take(&k, 4000 + d.retry_after_ms, 1, NULL), 1);
    /* A cost of 2 needs the two oldest gone: 2000 + 10000. */
    CHECK_EQ(test_take(&k, 11000, 2, &d), 0);
    CHECK_EQ(d.retry_after_ms, 2000);
    CHECK_EQ(test_take(&k, 13000, 2, NULL), 1);
}

TEST(sliding_never_admits_boundary_burst)
{
    /* 5 at the end of a minute and 5 at the start of the next: a fixed
       window admits all 10, the sliding window only the first 5. */
    static const char *const sliding[] = {"5/1m", NULL};
    static const char *const fixed[] = {"5/1m:fixed", NULL};
    test_key_t s, f;
    int admitted_s = 0, admitted_f = 0;
    REQUIRE(test_key_init(&s, sliding) == 0);
    REQUIRE(test_key_init(&f, fixed) == 0);
    for (int i = 0; i < 5; i++) {
        admitted_s += test_take(&s, 59990 + i, 1, NULL);
        admitted_f += test_take(&f, 59990 + i, 1, NULL);
    }
    for (int i = 0; i < 5; i++) {
        admitted_s += test_take(&s, 60000 + i, 1, NULL);
        admitted_f += test_take(&f, 60000 + i, 1, NULL);
    }
    CHECK_EQ(admitted_s, 5);
    CHECK_EQ(admitted_f, 10);
}

TEST(fixed_window_is_epoch_aligned)
{
    static const char *const rules[] = {"3/1s:fixed", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 1700000000250LL, 3, &d), 1);
    CHECK_EQ(d.reset_after_ms, 750);
    CHECK_EQ(test_take(&k, 1700000000999LL, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(test_take(&k, 1700000001000LL, 3, &d), 1);
    CHECK_EQ(d.remaining, 0);
}

TEST(approx_weights_previous_window)
{
    static const char *const rules[] = {"10/1s:approx", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, 500, 10, NULL), 1);
    /* At 1000 the previous window weighs fully: nothing fits. */
    CHECK_EQ(test_take(&k, 1000, 1, &d), 0);
    /* prev * floor((1000 - e) * 65536 / 1000) + 65536 <= 10 * 65536 first
       holds at e = 100 (see window.c). */
    CHECK_EQ(d.retry_after_ms, 100);
    CHECK_EQ(test_peek(&k, 1099, 1, NULL), 0);
    CHECK_EQ(test_take(&k, 1100, 1, &d), 1);
    /* Half way, half the previous window still counts. */
    CHECK_EQ(test_peek(&k, 1500, 1, &d), 1);
    CHECK_EQ(d.remaining, 10 - 1 - 5);
    /* Two windows later the key is empty. */
    CHECK_EQ(test_peek(&k, 3000, 10, &d), 1);
    CHECK_EQ(d.reset_after_ms, 0);
}

TEST(gcra_rate_and_burst)
{
    static const char *const rules[] = {"10/1s:gcra", NULL};
    test_key_t k;
    ratel_decision_t d;
    REQUIRE(test_key_init(&k, rules) == 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(test_take(&k, 0, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 0, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 100);
    CHECK_EQ(d.reset_after_ms, 1000);
    CHECK_EQ(test_take(&k, 99, 1, NULL), 0);
    CHECK_EQ(test_take(&k, 100, 1, &d), 1);
    CHECK_EQ(d.remaining, 0);
    CHECK_EQ(test_take(&k, 350, 1, &d), 1); /* 2.5 permits back, 1 taken */
    CHECK_EQ(d.remaining, 1);
}

TEST(gcra_extreme_rates)
{
    test_key_t k;
    ratel_decision_t d;
    static const char *const slow[] = {"1/30d:gcra", NULL};
    static const char *const fast[] = {"1000000000/1ms:gcra", NULL};
    static const char *const third[] = {"3/1s:gcra,burst=2", NULL};

    /* Below one per second: one per 30 days. */
    REQUIRE(test_key_init(&k, slow) == 0);
    CHECK_EQ(test_take(&k, 1700000000000LL, 1, NULL), 1);
    CHECK_EQ(test_take(&k, 1700000000001LL, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 2592000000LL - 1);
    CHECK_EQ(test_take(&k, 1700000000000LL + 2592000000LL, 1, NULL), 1);

    /* 10^9 per millisecond: a permit every 10^-6 us, exactly. */
    REQUIRE(test_key_init(&k, fast) == 0);
    CHECK_EQ(test_take(&k, 1000, 1000000000, &d), 1);
    CHECK_EQ(d.remaining, 0);
    CHECK_EQ(test_take(&k, 1000, 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 1); /* 1e-6 us, rounded up to a ms */
    CHECK_EQ(test_take(&k, 1001, 1000000000, NULL), 1);

    /* 3 per second: T = 333333.33 us is not a whole number, yet under
       continuous demand (requests every ms until denied) exactly B +
       floor(3t/1000) permits are admitted by t ms: no drift after 300 s. */
    REQUIRE(test_key_init(&k, third) == 0);
    {
        int64_t admitted = 0, wrong = 0;
        for (int64_t t = 0; t <= 300000; t++) {
            while (test_take(&k, t, 1, NULL) == 1)
                admitted++;
            wrong += admitted != 3 * t / 1000 + 2;
        }
        CHECK_EQ(wrong, 0);
        CHECK_EQ(admitted, 902);
    }
}

TEST(gcra_reservations_fifo_and_never_faster_than_rate)
{
    static const char *const rules[] = {"10/1s:gcra,burst=1", NULL};
    test_key_t k;
    ratel_decision_t d;
    int64_t last_start = -1;
    REQUIRE(test_key_init(&k, rules) == 0);
    /* Eight callers arrive at once willing to wait 500 ms: the first goes
       now, the next five queue 100 ms apart, the rest are refused. */
    for (int i = 0; i < 8; i++) {
        REQUIRE(test_acquire_us(&k, 0, 1, 500, 0, &d) == 0);
        if (i <= 5) {
            CHECK_EQ(d.allowed, 1);
            CHECK_EQ(d.wait_ms, 100 * i);
            CHECK(d.wait_ms * 1000 >= last_start + 100000 || i == 0);
            last_start = d.wait_ms * 1000;
        } else {
            CHECK_EQ(d.allowed, 0);
            CHECK_EQ(d.retry_after_ms, 600);
        }
    }
    /* A caller not willing to wait is refused until the queue drains. */
    REQUIRE(test_acquire_us(&k, 100000, 1, 0, 0, &d) == 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.retry_after_ms, 500);
}

TEST(algorithms_clock_going_backwards_is_clamped)
{
    static const char *const algos[][2] = {{"2/1s", NULL},
                                           {"2/1s:fixed", NULL},
                                           {"2/1s:approx", NULL},
                                           {"2/1s:gcra", NULL}};
    for (int a = 0; a < 4; a++) {
        test_key_t k;
        ratel_decision_t d;
        REQUIRE(test_key_init(&k, algos[a]) == 0);
        CHECK_EQ(test_take(&k, 5000, 1, NULL), 1);
        CHECK_EQ(test_take(&k, 5000, 1, NULL), 1);
        /* The clock jumps back 3 s: the two permits still count. */
        CHECK_EQ(test_take(&k, 2000, 1, &d), 0);
        CHECK(d.retry_after_ms > 0);
        CHECK_EQ(ratel_state_validate(k.buf, k.len), 0);
    }
}

TEST(algorithms_argument_errors)
{
    static const char *const sliding[] = {"5/1s", NULL};
    static const char *const gcra[] = {"5/1s:gcra,burst=7", NULL};
    test_key_t k;
    ratel_decision_t d;
    ratel_request_t q = {1, 0, 0, NULL};
    REQUIRE(test_key_init(&k, sliding) == 0);
    CHECK_EQ(test_acquire_us(&k, 0, 6, 0, 0, &d), RATEL_ECOST);
    CHECK_EQ(test_acquire_us(&k, 0, 0, 0, 0, &d), RATEL_EINVAL);
    CHECK_EQ(test_acquire_us(&k, -1, 1, 0, 0, &d), RATEL_EINVAL);
    CHECK_EQ(test_acquire_us(&k, RATEL_TIME_MAX_US, 1, 0, 0, &d), RATEL_EINVAL);
    CHECK_EQ(test_acquire_us(&k, 0, 1, 100, 0, &d), RATEL_EINVAL);
    CHECK_EQ(test_acquire_us(&k, 0, 1, -5, 0, &d), RATEL_EINVAL);
    CHECK_EQ(ratel_policy_acquire(NULL, k.buf, &k.len, sizeof k.buf, 0, &q, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_policy_acquire(&k.policy, k.buf, &k.len, sizeof k.buf, 0,
                                  NULL, &d),
             RATEL_EINVAL);
    CHECK_EQ(k.len, 0);
    REQUIRE(test_key_init(&k, gcra) == 0);
    CHECK_EQ(test_acquire_us(&k, 0, 7, 0, 0, &d), 0); /* burst, not limit */
    CHECK_EQ(test_acquire_us(&k, 0, 8, 0, 0, &d), RATEL_ECOST);
}

RATEL_SUITE(algorithms) = {
    {"sliding_acceptance_trace", test_sliding_acceptance_trace},
    {"sliding_same_millisecond_both_count",
     test_sliding_same_millisecond_both_count},
    {"sliding_retry_exactly_at_retry_after",
     test_sliding_retry_exactly_at_retry_after},
    {"sliding_never_admits_boundary_burst",
     test_sliding_never_admits_boundary_burst},
    {"fixed_window_is_epoch_aligned", test_fixed_window_is_epoch_aligned},
    {"approx_weights_previous_window", test_approx_weights_previous_window},
    {"gcra_rate_and_burst", test_gcra_rate_and_burst},
    {"gcra_extreme_rates", test_gcra_extreme_rates},
    {"gcra_reservations_fifo_and_never_faster_than_rate",
     test_gcra_reservations_fifo_and_never_faster_than_rate},
    {"algorithms_clock_going_backwards_is_clamped",
     test_algorithms_clock_going_backwards_is_clamped},
    {"algorithms_argument_errors", test_algorithms_argument_errors},
    {0, 0},
};
