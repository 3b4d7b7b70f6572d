/*
 * test.h - the small test runner shared by every unit test file.
 *
 * Each file defines its tests with TEST(name) and ends with a table
 * RATEL_SUITE(file) { {"name", test_name}, ..., {0} }; tests/unit/main.c
 * lists the tables. CHECK records a failure and goes on; REQUIRE returns.
 * Time is always injected: no test reads a clock or sleeps.
 */
#ifndef RATEL_TEST_H
#define RATEL_TEST_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ratel_test_case_s {
    const char *name;
    void (*fn)(void);
} ratel_test_case_t;

void ratel_test_fail(const char *file, int line, const char *what);
/* Iterations for property tests, scaled by RATEL_TEST_SCALE (default 1). */
long ratel_test_iterations(long base);
/* A deterministic PRNG for property tests (seed from RATEL_TEST_SEED). */
uint64_t ratel_test_rand(void);
/* Uniform in [lo, hi]. */
int64_t ratel_test_between(int64_t lo, int64_t hi);

/* What call(arg) wrote to stderr (the log), into out (NUL-terminated,
   at most cap - 1 bytes; "" when it could not be captured). */
void ratel_test_capture_stderr(void (*call)(void *), void *arg, char *out,
                               size_t cap);

#define TEST(name) static void test_##name(void)
#define RATEL_SUITE(file) const ratel_test_case_t ratel_suite_##file[]

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            ratel_test_fail(__FILE__, __LINE__, #cond);                        \
    } while (0)

#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            ratel_test_fail(__FILE__, __LINE__, #cond);                        \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            char m_[256];                                                      \
            snprintf(m_, sizeof m_, "%s == %s (%lld != %lld)", #a, #b, a_,     \
                     b_);                                                      \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

#endif /* RATEL_TEST_H */
