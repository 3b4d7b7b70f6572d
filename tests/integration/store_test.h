/*
 * store_test.h - what the Redis store's integration drivers share
 * (test_redis_store.c, test_redis_reach.c): checks that name the line,
 * a test table and its runner, policies, stores and acquisitions.
 * Included once per driver (its functions are static).
 */
#ifndef RATEL_STORE_TEST_H
#define RATEL_STORE_TEST_H

#include "ratel.h"
#include "servers.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *module_path;
static int failures; /* of the current test */
static const char *current;

static inline void fail_at(int line, const char *fmt, ...)
{
    va_list ap;
    if (failures++ < 8) {
        fprintf(stdout, "  %s:%d: ", current, line);
        va_start(ap, fmt);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
    }
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            fail_at(__LINE__, "%s", #cond);                                    \
    } while (0)
#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            fail_at(__LINE__, "%s == %s (%lld != %lld)", #a, #b, a_, b_);      \
    } while (0)
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fail_at(__LINE__, "%s", #cond);                                    \
            return;                                                            \
        }                                                                      \
    } while (0)

/* A fixed instant in whole milliseconds (AT carries milliseconds). */
#define T0 ((int64_t)1800000000000 * 1000)

static uint64_t rng = 20261122;
static inline uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline ratel_policy_t policy_of(const char *a, const char *b)
{
    const char *texts[2] = {a, b};
    ratel_policy_t p;
    char err[256];
    if (ratel_policy_parse(&p, texts, b ? 2 : 1, err, sizeof err) != 0) {
        fprintf(stderr, "bad test policy: %s\n", err);
        exit(2);
    }
    return p;
}

static inline void url_of(char *buf, size_t len, int port)
{
    snprintf(buf, len, "redis://127.0.0.1:%d", port);
}

static inline ratel_store_t *open_store(ratel_redis_options_t o)
{
    ratel_store_t *s = NULL;
    char err[512];
    int rc = ratel_store_redis_new(&s, &o, err, sizeof err);
    if (rc != 0) {
        fprintf(stdout, "  %s: ratel_store_redis_new(%s): %s\n", current, o.url,
                err);
        return NULL;
    }
    return s;
}

static inline int acquire(ratel_store_t *s, const char *key,
                          const ratel_policy_t *p, int64_t now, uint64_t cost,
                          ratel_decision_t *d)
{
    ratel_request_t req = RATEL_REQUEST_INIT;
    req.cost = cost;
    return ratel_store_acquire(s, key, strlen(key), p, now, &req, d);
}

/* How many times the server on `port` ran COMMAND (INFO commandstats). */
static inline long long calls_of(int port, const char *command)
{
    char out[16384], field[64];
    const char *at;

    test_redis_cmd(port, out, sizeof out, "INFO commandstats");
    snprintf(field, sizeof field, "cmdstat_%s:calls=", command);
    at = strstr(out, field);
    return at ? atoll(at + strlen(field)) : 0;
}

typedef struct store_test_s {
    const char *name;
    void (*fn)(void);
} store_test_t;

/* Runs the tests named on the command line (all without names). */
static int run_store_tests(const char *prog, const store_test_t *tests,
                           size_t ntests, int argc, char **argv)
{
    int passed = 0, failed = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE_PATH [TEST...]\n", prog);
        return 2;
    }
    module_path = argv[1];
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < ntests; i++) {
        int selected = argc < 3;
        for (int a = 2; a < argc; a++)
            selected |= strcmp(argv[a], tests[i].name) == 0;
        if (!selected)
            continue;
        current = tests[i].name;
        failures = 0;
        tests[i].fn();
        if (failures) {
            printf("FAIL %s (%d checks failed)\n", tests[i].name, failures);
            failed++;
        } else {
            printf("ok %s\n", tests[i].name);
            passed++;
        }
        fflush(stdout);
    }
    test_servers_cleanup();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif /* RATEL_STORE_TEST_H */
