/*
 * core_helpers.h - a key's state in a test: one policy, one blob buffer,
 * and shorthands that drive the pure core with injected times in ms.
 */
#ifndef RATEL_TEST_CORE_HELPERS_H
#define RATEL_TEST_CORE_HELPERS_H

#include "ratel.h"
#include "test.h"

#include <string.h>

#define TEST_STATE_CAP 20000

typedef struct test_key_s {
    ratel_policy_t policy;
    uint8_t buf[TEST_STATE_CAP];
    size_t len;
} test_key_t;

/* Sets up `k` with the given rules (NULL-terminated); fails the test on a
   parse error. Returns 0 on success. */
static inline int test_key_init(test_key_t *k, const char *const *rules)
{
    char err[256];
    size_t n = 0;
    while (rules[n])
        n++;
    memset(k, 0, sizeof *k);
    if (ratel_policy_parse(&k->policy, rules, n, err, sizeof err) != 0) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return -1;
    }
    return 0;
}

static inline int test_acquire_us(test_key_t *k, int64_t now_us, uint64_t cost,
                                  int64_t max_wait_ms, unsigned flags,
                                  ratel_decision_t *d)
{
    ratel_request_t req = {cost, max_wait_ms, flags, NULL};
    return ratel_policy_acquire(&k->policy, k->buf, &k->len, sizeof k->buf,
                                now_us, &req, d);
}

/* Acquires `cost` at t_ms; returns d.allowed, or -1 on an error. */
static inline int test_take(test_key_t *k, int64_t t_ms, uint64_t cost,
                            ratel_decision_t *d)
{
    ratel_decision_t local;
    int err = test_acquire_us(k, t_ms * 1000, cost, 0, 0, d ? d : &local);
    return err ? -1 : (d ? d : &local)->allowed;
}

static inline int test_peek(test_key_t *k, int64_t t_ms, uint64_t cost,
                            ratel_decision_t *d)
{
    ratel_decision_t local;
    int err =
        test_acquire_us(k, t_ms * 1000, cost, 0, RATEL_PEEK, d ? d : &local);
    return err ? -1 : (d ? d : &local)->allowed;
}

static inline int test_refund(test_key_t *k, int64_t t_ms, uint64_t cost,
                              ratel_decision_t *d)
{
    ratel_decision_t local;
    return ratel_policy_refund(&k->policy, k->buf, &k->len, sizeof k->buf,
                               t_ms * 1000, cost, d ? d : &local);
}

#endif /* RATEL_TEST_CORE_HELPERS_H */
