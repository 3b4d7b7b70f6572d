/*
 * servers_sentinel.c - a Sentinel setup for tests (servers.h): a primary,
 * its replica and one to three `redis-server CONF --sentinel` processes
 * monitoring them, with a failover on demand. Built only from the public
 * functions of servers.c, plain or TLS alike (test_redis_cmd_on).
 *
 * Sentinel's timings are made small so that a test waits seconds, not
 * minutes: down-after-milliseconds 1000 and failover-timeout 5000. Nothing
 * sleeps a fixed time: every step polls for the state it needs.
 */
#include "servers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define START_WAIT_MS 20000
#define POLL_MS 50

static long long clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The value after the line `name` in a flattened NAME\nVALUE\n... reply
   (SENTINEL MASTER), as a number; -1 when absent. */
static long field(const char *text, const char *name)
{
    size_t n = strlen(name);
    const char *p = text;
    int key = 1; /* lines alternate: name, value */

    while (*p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (key && len == n && memcmp(p, name, n) == 0 && end)
            return strtol(end + 1, NULL, 10);
        key = !key;
        if (!end)
            break;
        p = end + 1;
    }
    return -1;
}

test_redis_t *test_sentinel_primary(test_sentinel_t *s)
{
    for (int i = 0; i < 2; i++)
        if (s->data[i].port == s->primary_port)
            return &s->data[i];
    return NULL;
}

/* Whether sentinel `i` agrees that primary_port is the primary, and
   knows the replica and the other Sentinels; what it said in out. */
static int sentinel_agrees(test_sentinel_t *s, int i, int primary_port,
                           char *out, size_t cap)
{
    char want[64];

    snprintf(want, sizeof(want), "127.0.0.1\n%d", primary_port);
    if (test_redis_cmd_on(&s->sentinels[i], out, cap,
                          "SENTINEL GET-MASTER-ADDR-BY-NAME %s",
                          TEST_SENTINEL_MASTER) != 0 ||
        strcmp(out, want) != 0)
        return 0;
    if (test_redis_cmd_on(&s->sentinels[i], out, cap, "SENTINEL MASTER %s",
                          TEST_SENTINEL_MASTER) != 0)
        return 0;
    return field(out, "num-slaves") >= 1 &&
           field(out, "num-other-sentinels") == s->nsentinels - 1;
}

int test_sentinel_wait(test_sentinel_t *s, int primary_port, int timeout_ms)
{
    long long deadline = clock_ms() + timeout_ms;
    char out[4096] = "";
    int i = 0;

    for (;;) {
        test_redis_t *primary;
        for (i = 0; i < s->nsentinels; i++)
            if (!sentinel_agrees(s, i, primary_port, out, sizeof(out)))
                break;
        s->primary_port = primary_port;
        primary = test_sentinel_primary(s);
        if (i == s->nsentinels && primary != NULL &&
            test_redis_cmd_on(primary, out, sizeof(out), "ROLE") == 0 &&
            strncmp(out, "master\n", 7) == 0)
            return 0;
        if (clock_ms() >= deadline)
            break;
        sleep_ms(POLL_MS);
    }
    fprintf(stderr,
            "test_sentinel_wait: after %d ms, Sentinel %d (port %d) or the "
            "primary on port %d disagrees; it said:\n%s\n",
            timeout_ms, i, i < s->nsentinels ? s->sentinels[i].port : 0,
            primary_port, out);
    return -1;
}

int test_sentinel_failover(test_sentinel_t *s, int timeout_ms)
{
    long long deadline = clock_ms() + timeout_ms;
    int next =
        s->data[0].port == s->primary_port ? s->data[1].port : s->data[0].port;
    char out[512];

    /* A replica the Sentinel has not seen lately is not promoted yet
       (NOGOODSLAVE): ask again until it is. */
    for (;;) {
        if (test_redis_cmd_on(&s->sentinels[0], out, sizeof(out),
                              "SENTINEL FAILOVER %s",
                              TEST_SENTINEL_MASTER) == 0 &&
            strcmp(out, "OK") == 0)
            break;
        if (clock_ms() >= deadline) {
            fprintf(stderr, "test_sentinel_failover: SENTINEL FAILOVER: %s\n",
                    out);
            return -1;
        }
        sleep_ms(POLL_MS);
    }
    if (test_sentinel_wait(s, next, (int)(deadline - clock_ms())) != 0)
        return -1;
    return next;
}

/* Waits until the replica's link to the primary is up. */
static int replica_linked(const test_redis_t *replica)
{
    long long deadline = clock_ms() + START_WAIT_MS;
    char out[512] = "";

    while (clock_ms() < deadline) {
        if (test_redis_cmd_on(replica, out, sizeof(out), "ROLE") == 0 &&
            strstr(out, "\nconnected\n") != NULL)
            return 0;
        sleep_ms(POLL_MS);
    }
    fprintf(stderr,
            "test_sentinel_start: the replica on port %d is not "
            "linked; ROLE says:\n%s\n",
            replica->port, out);
    return -1;
}

/* Starts one data node: plain, or TLS-only with certs. */
static int start_data(test_redis_t *r, const char *module_path,
                      const char *certs, const char *const *extra)
{
    if (certs != NULL)
        return test_redis_start_tls(r, certs, "server", 0, module_path, extra);
    return test_redis_start(r, module_path, extra);
}

int test_sentinel_start(test_sentinel_t *s, int nsentinels,
                        const char *module_path, const char *certs)
{
    static const char *const sentinel[] = {"--sentinel", NULL};
    char port[16], conf[512];
    const char *replicaof[] = {"--replicaof", "127.0.0.1", port, NULL};

    memset(s, 0, sizeof(*s));
    if (nsentinels < 1 || nsentinels > TEST_SENTINEL_MAX) {
        fprintf(stderr, "test_sentinel_start: %d Sentinels; 1 to %d\n",
                nsentinels, TEST_SENTINEL_MAX);
        return -1;
    }
    if (start_data(&s->data[0], module_path, certs, NULL) != 0)
        return -1;
    snprintf(port, sizeof(port), "%d", s->data[0].port);
    if (start_data(&s->data[1], module_path, certs, replicaof) != 0 ||
        replica_linked(&s->data[1]) != 0)
        goto fail;
    snprintf(conf, sizeof(conf),
             "sentinel monitor %s 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds %s 1000\n"
             "sentinel failover-timeout %s 5000\n"
             "sentinel parallel-syncs %s 1\n",
             TEST_SENTINEL_MASTER, s->data[0].port, TEST_SENTINEL_MASTER,
             TEST_SENTINEL_MASTER, TEST_SENTINEL_MASTER);
    for (int i = 0; i < nsentinels; i++) {
        if (test_redis_start_conf(&s->sentinels[i], conf, certs, sentinel) != 0)
            goto fail;
        s->nsentinels = i + 1;
    }
    if (test_sentinel_wait(s, s->data[0].port, START_WAIT_MS) == 0)
        return 0;
fail:
    test_sentinel_free(s);
    return -1;
}

void test_sentinel_free(test_sentinel_t *s)
{
    for (int i = 0; i < TEST_SENTINEL_MAX; i++)
        test_redis_free(&s->sentinels[i]);
    test_redis_free(&s->data[0]);
    test_redis_free(&s->data[1]);
    s->nsentinels = 0;
}
