/*
 * test_redis_store.c - the Redis store against real redis-servers: the
 * module, the Functions library and the EVAL script deciding alike, the
 * library loaded, reloaded, replaced or refused (then the script), batches
 * and shared pipelines,
 * the deny cache, several processes on one key (and holding leases of
 * one concurrent rule), the failure policies with a
 * server killed and paused, a primary's failover, a 3-master cluster with a
 * slot migrated mid-run, and bad URLs and servers that are not Redis.
 *
 *   test_redis_store MODULE_PATH [TEST...]
 *
 * Prints "ok NAME" or "FAIL NAME: why" per test and "N passed, N failed".
 * Time is injected wherever the store takes it (client_time sends it to
 * Redis as AT); where Redis's own clock decides, the test never depends on
 * how much time passes. Servers are started and killed by servers.c.
 */
#include "ratel_internal.h"
#include "store_test.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int same_decision(const ratel_decision_t *a, const ratel_decision_t *b)
{
    return a->allowed == b->allowed && a->limit == b->limit &&
           a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms &&
           a->reset_after_ms == b->reset_after_ms && a->rule == b->rule &&
           a->wait_ms == b->wait_ms && a->lease == b->lease;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------ */

/* Bad URLs, unreachable addresses, servers that are not Redis. */
/* The C options have the option table's ranges (as a URL's query). */
static void test_option_ranges(void)
{
    ratel_store_t *s;
    char err[512];

    {
        static const struct {
            ratel_redis_options_t o;
            const char *words;
        } out_of_range[] = {
            {{.command_timeout_ms = 60001}, "timeout_ms 60001 is out of range"},
            {{.connect_timeout_ms = -1}, "connect_timeout_ms -1"},
            {{.pool_size = 257}, "accepted: 1..256"},
            {{.deny_cache_entries = 1048577}, "deny_cache 1048577"},
        };
        for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0];
             i++) {
            ratel_redis_options_t o = out_of_range[i].o;
            o.url = "redis://127.0.0.1:6379";
            o.lazy_connect = 1;
            CHECK_EQ(ratel_store_redis_new(&s, &o, err, sizeof err),
                     RATEL_EINVAL);
            if (!strstr(err, out_of_range[i].words))
                fail_at(__LINE__, "[%s] lacks [%s]", err,
                        out_of_range[i].words);
        }
    }
}

static void test_bad_targets(void)
{
    static const char *const bad_urls[] = {
        "",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:99999",
        "redis://127.0.0.1/99",
        "rediss://h?tls_cert_file=client.crt",
        "redis+sentinel://h",
        "redis://h?pool=0",
        "redis://h?on_failure=maybe",
    };
    char url[128], err[512];
    ratel_store_t *s;
    int rc, port;

    for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
        ratel_redis_options_t o = {.url = bad_urls[i]};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EINVAL);
        if (strstr(err, "redis URL") == NULL)
            fail_at(__LINE__, "%s: message [%s]", bad_urls[i], err);
    }
    {
        ratel_redis_options_t o = {.url = NULL};
        CHECK_EQ(ratel_store_redis_new(&s, &o, err, sizeof err), RATEL_EINVAL);
    }
    /* Nobody listening. */
    port = test_free_port();
    url_of(url, sizeof url, port);
    {
        ratel_redis_options_t o = {.url = url};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EIO);
        if (!strstr(err, "cannot connect"))
            fail_at(__LINE__, "message [%s]", err);
    }
    /* An HTTP server. */
    port = test_not_redis_start();
    REQUIRE(port > 0);
    url_of(url, sizeof url, port);
    {
        ratel_redis_options_t o = {.url = url};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EPROTO);
        if (!strstr(err, "not the Redis protocol") && !strstr(err, "PING"))
            fail_at(__LINE__, "message [%s]", err);
    }
    /* A server that never answers: EIO after the timeout. */
    port = test_silent_start();
    REQUIRE(port > 0);
    url_of(url, sizeof url, port);
    {
        ratel_redis_options_t o = {.url = url, .command_timeout_ms = 100};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EIO);
        if (!strstr(err, "no reply within 100 ms"))
            fail_at(__LINE__, "message [%s]", err);
    }
    test_fake_servers_stop();
    /* A Redis without the module, when the module is required. */
    {
        test_redis_t r;
        REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
        url_of(url, sizeof url, r.port);
        ratel_redis_options_t o = {.url = url, .mode = RATEL_REDIS_MODULE};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EPROTO);
        if (!strstr(err, "no ratel module"))
            fail_at(__LINE__, "message [%s]", err);
        /* A wrong password. */
        snprintf(url, sizeof url, "redis://:secret@127.0.0.1:%d", r.port);
        ratel_redis_options_t o2 = {.url = url};
        rc = ratel_store_redis_new(&s, &o2, err, sizeof err);
        CHECK_EQ(rc, RATEL_EPROTO);
        if (!strstr(err, "credentials") || strstr(err, "secret"))
            fail_at(__LINE__, "message [%s]", err);
        test_redis_free(&r);
    }
}

/* Store `s` with one mode, its own key prefix, decisions compared. */
typedef struct agree_store_s {
    ratel_store_t *s;
    const char *prefix;
    ratel_decision_t d;
    int rc, held;
} agree_store_t;

/*
 * One step of the agreement trace: op 0 refunds, 1 peeks, 2 and 3 release
 * (3: renew) `lease` under a policy with leases, else acquires.
 */
static void agree_step(agree_store_t *a, const char *key,
                       const ratel_policy_t *p, int64_t now, int op,
                       const ratel_request_t *req, uint32_t lease)
{
    char k[48];

    snprintf(k, sizeof k, "%s%s", a->prefix, key);
    a->held = -1;
    if (op == 0)
        a->rc =
            ratel_store_refund(a->s, k, strlen(k), p, now, req->cost, &a->d);
    else if ((op == 2 || op == 3) && ratel_policy_has_leases(p) && lease)
        a->rc = ratel_store_release(a->s, k, strlen(k), p, now, lease,
                                    op == 3 ? RATEL_RENEW : 0, &a->held, &a->d);
    else
        a->rc = ratel_store_acquire(a->s, k, strlen(k), p, now, req, &a->d);
}

/*
 * The same random trace through the memory store (the core), the module,
 * the Functions library and the EVAL script, with explicit times:
 * identical decisions.
 */
static void test_modes_agree(void)
{
    static const char *const policies[][2] = {{"5/1s", "20/1m"},
                                              {"3/500ms:gcra,burst=5", NULL},
                                              {"10/2s:fixed", NULL},
                                              {"4/1s:approx", "6/3s"},
                                              {"3/2s:concurrent", "8/1s"}};
    static const ratel_redis_mode_t modes[3] = {
        RATEL_REDIS_MODULE, RATEL_REDIS_FUNCTION, RATEL_REDIS_LUA};
    static const char *const names[4] = {"core", "module", "function", "lua"};
    ratel_policy_t p[5];
    agree_store_t st[4] = {{NULL, "", {0}, 0, 0},
                           {NULL, "", {0}, 0, 0},
                           {NULL, "fn", {0}, 0, 0},
                           {NULL, "lua", {0}, 0, 0}};
    test_redis_t r;
    char url[128];
    int64_t now = T0;
    uint32_t leases[3] = {0}; /* the last each key handed out */
    int released = 0, ref;

    for (int i = 0; i < 5; i++)
        p[i] = policy_of(policies[i][0], policies[i][1]);
    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    for (int m = 0; m < 3; m++) {
        st[m + 1].s =
            open_store((ratel_redis_options_t){.url = url,
                                               .mode = modes[m],
                                               .client_time = 1,
                                               .deny_cache_entries = -1});
        REQUIRE(st[m + 1].s);
    }
    REQUIRE(ratel_store_memory_new(&st[0].s, NULL) == 0);
    for (int step = 0; step < 3000 && failures == 0; step++) {
        int pi = (int)(rnd() % 5), op = (int)(rnd() % 10);
        ratel_request_t req = RATEL_REQUEST_INIT;
        int k = (int)(rnd() % 3);
        char key[32];

        now += (int64_t)(rnd() % 300) * 1000;
        snprintf(key, sizeof key, "agree:%d:%d", pi, k);
        req.cost = 1 + rnd() % 2;
        req.flags = op == 1 ? RATEL_PEEK : 0;
        /* Leases are compared among the three Redis modes: the memory
           store drops a key whose leases all expired (its ids start again
           at 1), where Redis keeps it until the server's own clock reaches
           the expiry - long after these simulated instants. conform
           compares leases with the core exactly, on keys that never
           expire. */
        ref = ratel_policy_has_leases(&p[pi]) ? 1 : 0;
        for (int i = 0; i < 4; i++)
            agree_step(&st[i], key, &p[pi], now, op, &req, leases[k]);
        if (st[ref].d.lease)
            leases[k] = st[ref].d.lease;
        released += st[ref].held == 1;
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(st[i].rc, 0);
            CHECK_EQ(st[i].d.source, RATEL_SOURCE_STORE);
            if (i <= ref)
                continue;
            CHECK_EQ(st[i].held, st[ref].held);
            if (!same_decision(&st[ref].d, &st[i].d))
                fail_at(__LINE__,
                        "step %d %s: %s %d/%lld/%lld/%lld/%u %s "
                        "%d/%lld/%lld/%lld/%u",
                        step, key, names[ref], st[ref].d.allowed,
                        (long long)st[ref].d.remaining,
                        (long long)st[ref].d.retry_after_ms,
                        (long long)st[ref].d.reset_after_ms, st[ref].d.lease,
                        names[i], st[i].d.allowed, (long long)st[i].d.remaining,
                        (long long)st[i].d.retry_after_ms,
                        (long long)st[i].d.reset_after_ms, st[i].d.lease);
        }
    }
    /* NOSCRIPT after SCRIPT FLUSH: the store loads the script again. */
    {
        char out[64];
        ratel_decision_t d;
        test_redis_cmd(r.port, out, sizeof out, "SCRIPT FLUSH");
        CHECK_EQ(acquire(st[3].s, "flushed", &p[0], now, 1, &d), 0);
        CHECK_EQ(d.allowed, 1);
        CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    }
    /* Leases were taken and released in every mode. */
    CHECK(released > 20);
    CHECK(calls_of(r.port, "ratel.release") > 50);
    /* Each mode ran as itself. */
    CHECK(calls_of(r.port, "ratel.acquire") > 1000);
    CHECK(calls_of(r.port, "fcall") > 1000);
    CHECK(calls_of(r.port, "evalsha") > 1000);
    for (int i = 0; i < 4; i++)
        ratel_store_free(st[i].s);
    test_redis_free(&r);
}

/* ------------------------------------------------- the Functions library */

/* A library named ratel of another version (another build's, or older). */
#define FOREIGN_LIBRARY                                                        \
    "#!lua name=ratel\n"                                                       \
    "redis.register_function{function_name='ratel_version', "                  \
    "callback=function() return '0.0.1-other' end, flags={'no-writes'}}"

/* Whether the server on `port` holds this build's library. */
static int has_our_library(int port)
{
    char out[128];

    test_redis_cmd(port, out, sizeof out, "FCALL_RO ratel_version 0");
    return strcmp(out, ratel__redis_library_version()) == 0;
}

/* Three acquisitions of 2/1s at one instant: allowed, allowed, denied. */
static void two_then_denied(ratel_store_t *s, const char *key, int64_t t)
{
    ratel_policy_t p = policy_of("2/1s", NULL);
    ratel_decision_t d;

    for (int i = 0; i < 3; i++) {
        CHECK_EQ(acquire(s, key, &p, t, 1, &d), 0);
        CHECK_EQ(d.source, RATEL_SOURCE_STORE);
        CHECK_EQ(d.allowed, i < 2);
    }
}

/* What ratel__redis_load_library() reported. */
typedef struct load_reports_s {
    int n, failed, refused;
    char what[8][96]; /* "node found" */
} load_reports_t;

static void record_load(void *ud, const ratel__library_report_t *r)
{
    load_reports_t *lr = ud;

    if (r->rc != 0)
        lr->failed++;
    lr->refused += r->refused;
    if (lr->n < 8)
        snprintf(lr->what[lr->n], sizeof lr->what[0], "%s %s", r->node,
                 r->found[0] ? r->found : "-");
    lr->n++;
}

/*
 * mode=auto on a server without the module: the store loads the library
 * and every operation is an FCALL (no EVALSHA); after FUNCTION FLUSH or
 * FUNCTION DELETE the next request loads it again and still decides.
 */
static void test_library(void)
{
    ratel_policy_t p = policy_of("2/1s", NULL);
    ratel_rule_status_t rs[1];
    ratel_decision_t d;
    ratel_store_t *s;
    test_redis_t r;
    /* FUNCTION LIST names the functions in hash order: room for all six. */
    char url[128], out[1024];
    static const char *const names[] = {"ratel_acquire", "ratel_refund",
                                        "ratel_reset",   "ratel_peek",
                                        "ratel_info",    "ratel_version"};
    size_t n = 0;

    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    CHECK(has_our_library(r.port));
    test_redis_cmd(r.port, out, sizeof out, "FUNCTION LIST LIBRARYNAME ratel");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(strstr(out, names[i]) != NULL);
    two_then_denied(s, "lib", T0);
    CHECK_EQ(ratel_store_refund(s, "lib", 3, &p, T0, 1, &d), 0);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(ratel_store_inspect(s, "lib", 3, T0, rs, 1, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(ratel_store_reset(s, "lib", 3), 0);
    CHECK(calls_of(r.port, "fcall") >= 5);
    CHECK_EQ(calls_of(r.port, "evalsha"), 0);
    CHECK_EQ(calls_of(r.port, "eval"), 0);
    /* Flushed, then deleted: "Function not found", loaded again. */
    test_redis_cmd(r.port, out, sizeof out, "FUNCTION FLUSH");
    CHECK(strcmp(out, "OK") == 0);
    two_then_denied(s, "flushed", T0);
    CHECK(has_our_library(r.port));
    test_redis_cmd(r.port, out, sizeof out, "FUNCTION DELETE ratel");
    CHECK(strcmp(out, "OK") == 0);
    CHECK_EQ(ratel_store_reset(s, "flushed", 7), 0);
    CHECK(has_our_library(r.port));
    CHECK_EQ(calls_of(r.port, "evalsha"), 0);
    ratel_store_free(s);
    test_redis_free(&r);
}

/*
 * A library named ratel of another version is replaced, at the store's
 * first connection and when another build replaces ours meanwhile.
 */
static void test_library_replaced(void)
{
    ratel_store_t *s;
    test_redis_t r;
    char url[128], out[256];

    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    url_of(url, sizeof url, r.port);
    test_redis_cmd(r.port, out, sizeof out, "FUNCTION LOAD %s",
                   FOREIGN_LIBRARY);
    CHECK(strcmp(out, "ratel") == 0);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    CHECK(has_our_library(r.port));
    two_then_denied(s, "old", T0);
    /* Another build's library, without ratel_acquire: ours again. */
    test_redis_cmd(r.port, out, sizeof out, "FUNCTION LOAD REPLACE %s",
                   FOREIGN_LIBRARY);
    CHECK(strcmp(out, "ratel") == 0);
    two_then_denied(s, "other", T0);
    CHECK(has_our_library(r.port));
    CHECK_EQ(calls_of(r.port, "evalsha"), 0);
    ratel_store_free(s);
    test_redis_free(&r);
}

/*
 * A user who may not run FUNCTION LOAD (ACL -function): mode=auto uses the
 * EVAL script, says so once in the store's error text, and decides;
 * mode=function refuses to start with a message naming the cause, and
 * works once someone else has loaded the library.
 */
static void test_library_refused(void)
{
    ratel_store_t *s;
    test_redis_t r;
    char url[160], out[256], err[512];
    int rc;

    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    test_redis_cmd(r.port, out, sizeof out,
                   "ACL SETUSER limited on >pw ~* &* +@all -function");
    CHECK(strcmp(out, "OK") == 0);
    snprintf(url, sizeof url, "redis://limited:pw@127.0.0.1:%d", r.port);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    ratel_store_errstr(s, err, sizeof err);
    if (!strstr(err, "FUNCTION LOAD") || !strstr(err, "NOPERM") ||
        !strstr(err, "EVAL script"))
        fail_at(__LINE__, "note [%s]", err);
    two_then_denied(s, "refused", T0);
    CHECK(calls_of(r.port, "evalsha") >= 3);
    CHECK_EQ(calls_of(r.port, "fcall"), 0);
    CHECK(!has_our_library(r.port));
    ratel_store_free(s);
    {
        ratel_redis_options_t o = {.url = url, .mode = RATEL_REDIS_FUNCTION};
        rc = ratel_store_redis_new(&s, &o, err, sizeof err);
        CHECK_EQ(rc, RATEL_EPROTO);
        if (!strstr(err, "refused") || !strstr(err, "mode=function"))
            fail_at(__LINE__, "message [%s]", err);
    }
    /* ratel__redis_load_library() (`ratel lua-load`) as that user:
       refused, and said so; as the default user: loaded. */
    for (int admin = 0; admin < 2; admin++) {
        load_reports_t lr = {0};
        char admin_url[128];
        url_of(admin_url, sizeof admin_url, r.port);
        s = open_store((ratel_redis_options_t){.url = admin ? admin_url : url,
                                               .lazy_connect = 1});
        REQUIRE(s);
        CHECK_EQ(
            ratel__redis_load_library(s, record_load, &lr, err, sizeof err),
            admin ? 0 : RATEL_EPROTO);
        CHECK_EQ(lr.n, 1);
        CHECK_EQ(lr.failed, !admin);
        CHECK_EQ(lr.refused, !admin);
        ratel_store_free(s);
    }
    /* Loaded by an administrator: mode=function only checks it. */
    CHECK(has_our_library(r.port));
    s = open_store((ratel_redis_options_t){
        .url = url, .mode = RATEL_REDIS_FUNCTION, .client_time = 1});
    REQUIRE(s);
    two_then_denied(s, "function", T0);
    CHECK(calls_of(r.port, "fcall") >= 3);
    ratel_store_free(s);
    test_redis_free(&r);
}

/*
 * A cluster without the module: the library put on every master by
 * ratel__redis_load_library() (what `ratel lua-load` runs), and by
 * the store itself on every master it sends requests to, again after a
 * flush or another version on any of them.
 */
static void test_library_cluster(void)
{
    ratel_policy_t p = policy_of("1000000/1h", NULL);
    load_reports_t lr = {0};
    test_redis_t nodes[3];
    ratel_store_t *s;
    char url[128], out[256], err[256] = "";

    REQUIRE(test_cluster_start(nodes, NULL) == 0);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", nodes[0].port);
    s = open_store((ratel_redis_options_t){.url = url, .lazy_connect = 1});
    REQUIRE(s);
    CHECK_EQ(ratel__redis_load_library(s, record_load, &lr, err, sizeof err),
             0);
    CHECK_EQ(lr.n, 3);
    CHECK_EQ(lr.failed, 0);
    for (int i = 0; i < 3; i++) {
        CHECK(has_our_library(nodes[i].port));
        CHECK(strstr(lr.what[i], " -") != NULL);
    }
    ratel_store_free(s);
    /* One master flushed, one with another version: the store fixes both. */
    test_redis_cmd(nodes[1].port, out, sizeof out, "FUNCTION FLUSH");
    test_redis_cmd(nodes[2].port, out, sizeof out, "FUNCTION LOAD REPLACE %s",
                   FOREIGN_LIBRARY);
    s = open_store((ratel_redis_options_t){.url = url});
    REQUIRE(s);
    for (int i = 0; i < 600; i++) {
        char key[32];
        ratel_decision_t d;
        if (i == 300)
            for (int j = 0; j < 3; j++)
                test_redis_cmd(nodes[j].port, out, sizeof out,
                               "FUNCTION FLUSH");
        snprintf(key, sizeof key, "lk:%d", i);
        CHECK_EQ(acquire(s, key, &p, ratel_clock_now_us(), 1, &d), 0);
        CHECK_EQ(d.source, RATEL_SOURCE_STORE);
        CHECK_EQ(d.allowed, 1);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(has_our_library(nodes[i].port));
        CHECK(calls_of(nodes[i].port, "fcall") > 50);
        CHECK_EQ(calls_of(nodes[i].port, "evalsha"), 0);
    }
    ratel_store_free(s);
    for (int i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
}

/* Denials answered locally until their retry time; refund forgets them. */
static void test_deny_cache(void)
{
    ratel_policy_t p = policy_of("2/1s", NULL);
    ratel_store_stats_t st0, st1;
    ratel_decision_t d;
    ratel_store_t *s;
    test_redis_t r;
    char url[128];
    int64_t t = T0;

    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    CHECK_EQ(acquire(s, "dc", &p, t, 1, &d), 0);
    CHECK_EQ(acquire(s, "dc", &p, t, 1, &d), 0);
    CHECK_EQ(acquire(s, "dc", &p, t + 100000, 1, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    CHECK_EQ(d.retry_after_ms, 900);
    ratel_store_stats(s, &st0);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(acquire(s, "dc", &p, t + 200000, 1, &d), 0);
        CHECK_EQ(d.allowed, 0);
        CHECK_EQ(d.source, RATEL_SOURCE_CACHE);
        CHECK_EQ(d.retry_after_ms, 800);
    }
    ratel_store_stats(s, &st1);
    CHECK_EQ(st1.round_trips, st0.round_trips);
    CHECK_EQ(st1.cache_hits, st0.cache_hits + 100);
    /* At the retry instant the request goes to Redis and succeeds. */
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    /* A denial for cost 2 does not answer cost 1. */
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 2, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    /* Denied and cached; a refund forgets the entry. */
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(ratel_store_refund(s, "dc", 2, &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    /* Reset too. */
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(ratel_store_reset(s, "dc", 2), 0);
    CHECK_EQ(acquire(s, "dc", &p, t + 1000000, 1, &d), 0);
    CHECK_EQ(d.allowed, 1);
    ratel_store_free(s);
    test_redis_free(&r);
}

/* 1,000 requests in one call: two round trips, the core's decisions. */
static void test_batch(void)
{
    ratel_policy_t p = policy_of("5/1m", NULL);
    ratel_batch_item_t items[1000];
    char keys[1000][16];
    ratel_store_stats_t st0, st1;
    ratel_store_t *s, *mem;
    test_redis_t r;
    char url[128];

    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    REQUIRE(ratel_store_memory_new(&mem, NULL) == 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(keys[i], sizeof keys[i], "b%d", i % 100);
        items[i] = (ratel_batch_item_t){.key = keys[i],
                                        .keylen = strlen(keys[i]),
                                        .policy = &p,
                                        .request = RATEL_REQUEST_INIT};
    }
    ratel_store_stats(s, &st0);
    CHECK_EQ(ratel_store_acquire_batch(s, items, 1000, T0), 0);
    ratel_store_stats(s, &st1);
    CHECK(st1.round_trips - st0.round_trips <= 2);
    for (int i = 0; i < 1000; i++) {
        ratel_decision_t d;
        CHECK_EQ(items[i].rc, 0);
        CHECK_EQ(ratel_store_acquire(mem, keys[i], strlen(keys[i]), &p, T0,
                                     &items[i].request, &d),
                 0);
        if (!same_decision(&d, &items[i].decision))
            fail_at(__LINE__, "item %d differs from the core", i);
    }
    /* A bad item is answered alone. */
    items[3].policy = NULL;
    CHECK_EQ(ratel_store_acquire_batch(s, items, 10, T0), 0);
    CHECK_EQ(items[3].rc, RATEL_EINVAL);
    CHECK_EQ(items[4].rc, 0);
    {
        /* A group: g1 (5/1m) and b0 (exhausted above) - denied, and g1,
           charged with the batch, is given back. */
        ratel_batch_item_t g[2] = {items[0], items[0]};
        ratel_decision_t d;
        g[0].key = "g1";
        g[0].keylen = 2;
        g[1].key = "b0";
        g[1].keylen = 2;
        g[0].group = g[1].group = 1;
        CHECK_EQ(ratel_store_acquire_batch(s, g, 2, T0), 0);
        CHECK(g[0].rc == 0 && g[0].decision.allowed);
        CHECK(g[1].rc == 0 && !g[1].decision.allowed);
        g[0].request.flags = RATEL_PEEK;
        CHECK_EQ(ratel_store_acquire(s, "g1", 2, &p, T0, &g[0].request, &d), 0);
        CHECK_EQ(d.remaining, 5);
    }
    ratel_store_free(s);
    ratel_store_free(mem);
    test_redis_free(&r);
}

/*
 * A batch on the library (or the EVAL script): its requests go in
 * ratel_acquire_many calls (a few, not one a request), decide as the core
 * does, in order on a repeated key, with another policy or COST between
 * them, and an item whose key holds something else fails alone. After
 * FUNCTION FLUSH (SCRIPT FLUSH) the next batch loads the code again and
 * still decides.
 */
static void batch_on(ratel_redis_mode_t mode, const char *command,
                     const char *flush)
{
    ratel_policy_t p = policy_of("5/1m", NULL), q = policy_of("3/1s", "7/1m");
    ratel_batch_item_t items[300];
    char keys[300][16], out[256];
    ratel_store_t *s, *mem;
    test_redis_t r;
    char url[128];

    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store(
        (ratel_redis_options_t){.url = url, .mode = mode, .client_time = 1});
    REQUIRE(s);
    REQUIRE(ratel_store_memory_new(&mem, NULL) == 0);
    test_redis_cmd(r.port, out, sizeof out, "SET b7 other");
    for (int i = 0; i < 300; i++) {
        snprintf(keys[i], sizeof keys[i], "b%d", i % 50);
        items[i] = (ratel_batch_item_t){.key = keys[i],
                                        .keylen = strlen(keys[i]),
                                        .policy = i % 7 < 4 ? &p : &q,
                                        .request = RATEL_REQUEST_INIT};
        if (i % 11 == 0)
            items[i].request.cost = 2;
    }
    test_redis_cmd(r.port, out, sizeof out, "CONFIG RESETSTAT");
    CHECK_EQ(ratel_store_acquire_batch(s, items, 300, T0), 0);
    CHECK(calls_of(r.port, command) <= 300 / 64 + 2);
    for (int i = 0; i < 300; i++) {
        ratel_decision_t d;
        if (i % 50 == 7) {
            CHECK_EQ(items[i].rc, RATEL_ECORRUPT);
            continue;
        }
        CHECK_EQ(items[i].rc, 0);
        CHECK_EQ(ratel_store_acquire(mem, keys[i], strlen(keys[i]),
                                     items[i].policy, T0, &items[i].request,
                                     &d),
                 0);
        if (!same_decision(&d, &items[i].decision))
            fail_at(__LINE__, "item %d differs from the core", i);
    }
    test_redis_cmd(r.port, out, sizeof out, "%s", flush);
    items[1].key = "fresh";
    items[1].keylen = 5;
    CHECK_EQ(ratel_store_acquire_batch(s, items, 3, T0), 0);
    CHECK(items[1].rc == 0 && items[1].decision.allowed &&
          items[1].decision.source == RATEL_SOURCE_STORE);
    ratel_store_free(s);
    ratel_store_free(mem);
    test_redis_free(&r);
}

static void test_batch_library(void)
{
    batch_on(RATEL_REDIS_FUNCTION, "fcall", "FUNCTION FLUSH");
    batch_on(RATEL_REDIS_LUA, "evalsha", "SCRIPT FLUSH");
}

typedef struct hammer_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    const char *key; /* NULL: a key per thread */
    int thread, calls, allowed, errors;
} hammer_t;

static void *hammer(void *arg)
{
    hammer_t *h = arg;
    char key[32];
    snprintf(key, sizeof key, "h%d", h->thread);
    for (int i = 0; i < h->calls; i++) {
        ratel_decision_t d;
        int rc = acquire(h->store, h->key ? h->key : key, h->policy,
                         ratel_clock_now_us(), 1, &d);
        if (rc != 0 || d.source == RATEL_SOURCE_LOCAL ||
            d.source == RATEL_SOURCE_OPEN || d.source == RATEL_SOURCE_CLOSED)
            h->errors++;
        else
            h->allowed += d.allowed;
    }
    return NULL;
}

/* Eight threads on one connection: their commands share round trips. */
static void test_shared_pipelines(void)
{
    ratel_policy_t p = policy_of("1000000/1h", NULL);
    ratel_store_stats_t st;
    pthread_t tid[8];
    hammer_t h[8];
    ratel_store_t *s;
    test_redis_t r;
    char url[128];

    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url, .pool_size = 1});
    REQUIRE(s);
    for (int i = 0; i < 8; i++) {
        h[i] = (hammer_t){s, &p, NULL, i, 500, 0, 0};
        pthread_create(&tid[i], NULL, hammer, &h[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(tid[i], NULL);
        CHECK_EQ(h[i].errors, 0);
        CHECK_EQ(h[i].allowed, 500);
    }
    ratel_store_stats(s, &st);
    CHECK(st.commands >= 4000);
    if (!(st.round_trips < st.commands))
        fail_at(__LINE__, "%llu round trips for %llu commands: none shared",
                (unsigned long long)st.round_trips,
                (unsigned long long)st.commands);
    ratel_store_free(s);
    test_redis_free(&r);
}

/* Three processes of four threads each on one key: exactly LIMIT pass. */
static void test_processes_share_a_key(void)
{
    ratel_policy_t p = policy_of("50/1h", NULL);
    pid_t pids[3];
    int fds[3][2], total = 0;
    test_redis_t r;
    char url[128];

    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    for (int c = 0; c < 3; c++) {
        REQUIRE(pipe(fds[c]) == 0);
        pids[c] = fork();
        REQUIRE(pids[c] >= 0);
        if (pids[c] == 0) {
            ratel_redis_options_t o = {.url = url};
            ratel_store_t *s;
            char err[256];
            pthread_t tid[4];
            hammer_t h[4];
            int allowed = 0, errors = 0;
            if (ratel_store_redis_new(&s, &o, err, sizeof err) != 0)
                _exit(1);
            for (int i = 0; i < 4; i++) {
                h[i] = (hammer_t){s, &p, "shared", i, 40, 0, 0};
                pthread_create(&tid[i], NULL, hammer, &h[i]);
            }
            for (int i = 0; i < 4; i++) {
                pthread_join(tid[i], NULL);
                allowed += h[i].allowed;
                errors += h[i].errors;
            }
            ratel_store_free(s);
            /* Answers through the pipe: the exit status may be a tool's
               (valgrind counts the parent's blocks as the child's leaks). */
            int report[2] = {allowed, errors};
            if (write(fds[c][1], report, sizeof report) < 0)
                _exit(1);
            _exit(0);
        }
        close(fds[c][1]);
    }
    for (int c = 0; c < 3; c++) {
        int report[2] = {0, -1}, status = 0;
        if (read(fds[c][0], report, sizeof report) != sizeof report)
            fail_at(__LINE__, "child %d reported nothing", c);
        close(fds[c][0]);
        waitpid(pids[c], &status, 0);
        CHECK_EQ(report[1], 0); /* errors */
        total += report[0];
    }
    CHECK_EQ(total, 50);
    test_redis_free(&r);
}

/*
 * Leases when Redis is down, under the `local` failure policy: a release
 * answers RATEL_EIO and is given to the fallback store too, whose leases
 * then free their slots; arguments are refused before any round trip.
 */
static void test_leases_local(void)
{
    ratel_policy_t p = policy_of("2/1h:concurrent", NULL),
                   rate = policy_of("2/1h", NULL);
    ratel_decision_t d;
    ratel_store_t *s;
    test_redis_t r;
    char url[128];
    uint32_t first, second;
    int held = -1;

    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url,
                                           .on_failure = RATEL_FAILURE_LOCAL,
                                           .command_timeout_ms = 200,
                                           .client_time = 1});
    REQUIRE(s);
    CHECK_EQ(acquire(s, "l", &p, T0, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    CHECK_EQ(d.lease, 1);
    CHECK_EQ(ratel_store_release(s, "l", 1, &p, T0, 1, RATEL_RENEW, &held, &d),
             0);
    CHECK_EQ(held, 1);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(ratel_store_release(s, "l", 1, &p, T0, 0, 0, &held, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_release(s, "l", 1, &rate, T0, 1, 0, &held, &d),
             RATEL_EINVAL);
    CHECK_EQ(ratel_store_release(s, "l", 1, &p, T0, 1, 0, &held, &d), 0);
    CHECK_EQ(held, 1);
    test_redis_kill(&r);
    CHECK_EQ(acquire(s, "l", &p, T0, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_LOCAL);
    first = d.lease;
    CHECK_EQ(acquire(s, "l", &p, T0, 1, &d), 0);
    second = d.lease;
    CHECK(first != 0 && second != 0 && first != second);
    CHECK_EQ(acquire(s, "l", &p, T0, 1, &d), 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(ratel_store_release(s, "l", 1, &p, T0, first, 0, &held, &d),
             RATEL_EIO);
    CHECK_EQ(held, 0);
    /* The fallback released it: its slot is free there. */
    CHECK_EQ(acquire(s, "l", &p, T0, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_LOCAL);
    CHECK_EQ(d.allowed, 1);
    ratel_store_free(s);
    test_redis_free(&r);
}

/* What the processes of test_processes_hold_leases share. */
#define LEASE_HOLDERS 8192
typedef struct lease_board_s {
    atomic_int held;                     /* leases held now, all processes */
    atomic_int over, dups, lost, errors; /* what went wrong */
    atomic_int admitted;                 /* leases taken in all */
    atomic_uchar holder[LEASE_HOLDERS];  /* 1: that id is held */
} lease_board_t;

/*
 * One process's rounds: take a lease, mark it held on the board (never
 * more than `limit` at once, never an id twice), unmark it, release it
 * (it must still be held: nothing expires within an hour).
 */
static void lease_rounds(ratel_store_t *s, const ratel_policy_t *p, int limit,
                         int rounds, lease_board_t *b)
{
    for (int i = 0; i < rounds; i++) {
        ratel_decision_t d;
        int held = 0;

        if (acquire(s, "leases", p, ratel_clock_now_us(), 1, &d) != 0 ||
            d.source != RATEL_SOURCE_STORE) {
            atomic_fetch_add(&b->errors, 1);
            continue;
        }
        if (!d.allowed)
            continue;
        if (d.lease == 0 || d.lease >= LEASE_HOLDERS ||
            atomic_exchange(&b->holder[d.lease], 1) != 0)
            atomic_fetch_add(&b->dups, 1);
        if (atomic_fetch_add(&b->held, 1) + 1 > limit)
            atomic_fetch_add(&b->over, 1);
        atomic_fetch_add(&b->admitted, 1);
        sched_yield();
        atomic_fetch_sub(&b->held, 1);
        if (d.lease < LEASE_HOLDERS)
            atomic_store(&b->holder[d.lease], 0);
        if (ratel_store_release(s, "leases", 6, p, ratel_clock_now_us(),
                                d.lease, 0, &held, &d) != 0 ||
            !held)
            atomic_fetch_add(&b->lost, 1);
    }
}

/*
 * Four processes, each with its own store (the module, the module, the
 * Functions library, the EVAL script), take and release leases of one key
 * under 3/1h:concurrent in rounds: never more than 3 held at once, no id
 * held twice, every lease released while held, the key empty at the end.
 */
static void test_processes_hold_leases(void)
{
    static const ratel_redis_mode_t modes[4] = {
        RATEL_REDIS_MODULE, RATEL_REDIS_MODULE, RATEL_REDIS_FUNCTION,
        RATEL_REDIS_LUA};
    ratel_policy_t p = policy_of("3/1h:concurrent", NULL);
    lease_board_t *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[4];
    test_redis_t r;
    char url[128], out[64];

    REQUIRE(b != MAP_FAILED);
    memset(b, 0, sizeof *b);
    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    for (int c = 0; c < 4; c++) {
        pids[c] = fork();
        REQUIRE(pids[c] >= 0);
        if (pids[c] == 0) {
            ratel_redis_options_t o = {.url = url, .mode = modes[c]};
            ratel_store_t *s;
            char err[256];
            if (ratel_store_redis_new(&s, &o, err, sizeof err) != 0) {
                atomic_fetch_add(&b->errors, 1000);
                _exit(1);
            }
            lease_rounds(s, &p, 3, 300, b);
            ratel_store_free(s);
            _exit(0);
        }
    }
    for (int c = 0; c < 4; c++)
        waitpid(pids[c], NULL, 0);
    CHECK_EQ(atomic_load(&b->errors), 0);
    CHECK_EQ(atomic_load(&b->over), 0);
    CHECK_EQ(atomic_load(&b->dups), 0);
    CHECK_EQ(atomic_load(&b->lost), 0);
    CHECK(atomic_load(&b->admitted) > 300);
    test_redis_cmd(r.port, out, sizeof out, "EXISTS leases");
    CHECK_EQ(atoi(out), 0);
    munmap(b, sizeof *b);
    test_redis_free(&r);
}

/* Redis killed, then paused: each failure policy as documented. */
static void failure_policy(ratel_failure_t policy, const char *name)
{
    ratel_policy_t p = policy_of("3/1h", NULL);
    ratel_store_stats_t st0, st1;
    ratel_decision_t d;
    ratel_store_t *s;
    test_redis_t r;
    char url[128];
    int64_t t = T0;
    int fds0 = open_fds();
    struct timespec a, b;
    double took;

    current = name;
    REQUIRE(test_redis_start(&r, module_path, NULL) == 0);
    url_of(url, sizeof url, r.port);
    s = open_store((ratel_redis_options_t){.url = url,
                                           .on_failure = policy,
                                           .command_timeout_ms = 200,
                                           .breaker_ms = 1000,
                                           .client_time = 1});
    REQUIRE(s);
    CHECK_EQ(acquire(s, "f", &p, t, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    test_redis_kill(&r);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(acquire(s, "f", &p, t, 1, &d), 0);
        if (policy == RATEL_FAILURE_OPEN) {
            CHECK_EQ(d.allowed, 1);
            CHECK_EQ(d.source, RATEL_SOURCE_OPEN);
        } else if (policy == RATEL_FAILURE_CLOSED) {
            CHECK_EQ(d.allowed, 0);
            CHECK_EQ(d.source, RATEL_SOURCE_CLOSED);
            CHECK(d.retry_after_ms >= 1 && d.retry_after_ms <= 1000);
        } else {
            /* The local store enforces the rule on its own. */
            CHECK_EQ(d.allowed, i < 3);
            CHECK_EQ(d.source, RATEL_SOURCE_LOCAL);
        }
    }
    /* The breaker: no more attempts until its time has passed. */
    ratel_store_stats(s, &st0);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(acquire(s, "f", &p, t + 500000, 1, &d), 0);
    ratel_store_stats(s, &st1);
    CHECK_EQ(st1.round_trips, st0.round_trips);
    CHECK_EQ(st1.errors, st0.errors + 50);
    CHECK_EQ(st1.breaker_open, 1);
    /* Redis back: the first request after the breaker's time finds it. */
    REQUIRE(test_redis_restart(&r) == 0);
    t += 2000000;
    CHECK_EQ(acquire(s, "f", &p, t, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    CHECK_EQ(d.allowed, 1);
    /* A server that stops answering costs one timeout, then the breaker. */
    test_redis_pause(&r);
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ(acquire(s, "g", &p, t, 1, &d), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    took =
        (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECK(d.source != RATEL_SOURCE_STORE);
    if (took > 5.0)
        fail_at(__LINE__, "a paused server held the caller %.1f s", took);
    ratel_store_stats(s, &st0);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(acquire(s, "g", &p, t, 1, &d), 0);
    ratel_store_stats(s, &st1);
    CHECK_EQ(st1.round_trips, st0.round_trips);
    test_redis_resume(&r);
    t += 2000000;
    CHECK_EQ(acquire(s, "g", &p, t, 1, &d), 0);
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    ratel_store_free(s);
    test_redis_free(&r);
    /* No connection left behind. */
    CHECK_EQ(open_fds(), fds0);
}

static void test_failure_open(void)
{
    failure_policy(RATEL_FAILURE_OPEN, "failure_open");
}
static void test_failure_closed(void)
{
    failure_policy(RATEL_FAILURE_CLOSED, "failure_closed");
}
static void test_failure_local(void)
{
    failure_policy(RATEL_FAILURE_LOCAL, "failure_local");
}

/* A primary and its replica in the URL: the store follows a promotion. */
static void test_failover(void)
{
    ratel_policy_t p = policy_of("5/1h", NULL);
    test_redis_t primary, replica;
    char url[256], arg[32], out[256];
    const char *extra[3] = {"--replicaof", arg, NULL};
    ratel_decision_t d;
    ratel_store_t *s;
    int64_t t = T0;

    REQUIRE(test_redis_start(&primary, module_path, NULL) == 0);
    snprintf(arg, sizeof arg, "127.0.0.1 %d", primary.port);
    REQUIRE(test_redis_start(&replica, module_path, extra) == 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d,127.0.0.1:%d", primary.port,
             replica.port);
    s = open_store((ratel_redis_options_t){
        .url = url, .on_failure = RATEL_FAILURE_CLOSED, .client_time = 1});
    REQUIRE(s);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(acquire(s, "fo", &p, t, 1, &d), 0);
        CHECK_EQ(d.allowed, 1);
    }
    /* Wait until the replica has it all (WAIT is not a sleep). */
    for (int i = 0; i < 50; i++) {
        test_redis_cmd(primary.port, out, sizeof out, "WAIT 1 100");
        if (strcmp(out, "1") == 0)
            break;
    }
    CHECK(strcmp(out, "1") == 0);
    test_redis_kill(&primary);
    test_redis_cmd(replica.port, out, sizeof out, "REPLICAOF NO ONE");
    CHECK(strcmp(out, "OK") == 0);
    /* The first request may find the dead primary and fail over at once. */
    CHECK_EQ(acquire(s, "fo", &p, t, 1, &d), 0);
    if (d.source != RATEL_SOURCE_STORE) {
        t += 2000000;
        CHECK_EQ(acquire(s, "fo", &p, t, 1, &d), 0);
    }
    CHECK_EQ(d.source, RATEL_SOURCE_STORE);
    CHECK_EQ(d.allowed, 1);
    CHECK_EQ(d.remaining, 1); /* the fourth of five: no fresh burst */
    CHECK_EQ(acquire(s, "fo", &p, t, 1, &d), 0);
    CHECK_EQ(acquire(s, "fo", &p, t, 1, &d), 0);
    CHECK_EQ(d.allowed, 0);
    ratel_store_free(s);
    test_redis_free(&primary);
    test_redis_free(&replica);
}

/* Node id of a cluster node. */
static void node_id(int port, char *id, size_t len)
{
    test_redis_cmd(port, id, len, "CLUSTER MYID");
}

typedef struct migrate_run_s {
    ratel_store_t *store;
    const ratel_policy_t *policy;
    volatile int stop;
    int counts[200];
    int errors, calls;
} migrate_run_t;

static void *migrate_load(void *arg)
{
    migrate_run_t *m = arg;
    int i = 0;
    while (!m->stop || m->calls < 2000) {
        char key[32];
        ratel_decision_t d;
        int k = i++ % 200, rc;
        snprintf(key, sizeof key, "{mig}:%d", k);
        rc = acquire(m->store, key, m->policy, ratel_clock_now_us(), 1, &d);
        m->calls++;
        if (rc != 0 || d.source != RATEL_SOURCE_STORE || !d.allowed)
            m->errors++;
        else
            m->counts[k]++;
    }
    return NULL;
}

/* MIGRATEs every key of `slot` from port `src` to port `dst`. */
static void migrate_keys(int src, int dst, int slot)
{
    char keys[4096], out[256];

    for (int round = 0; round < 1000; round++) {
        test_redis_cmd(src, keys, sizeof keys, "CLUSTER GETKEYSINSLOT %d 10",
                       slot);
        if (keys[0] == '\0')
            break;
        for (char *k = strtok(keys, "\n"); k; k = strtok(NULL, "\n")) {
            test_redis_cmd(src, out, sizeof out,
                           "MIGRATE 127.0.0.1 %d %s 0 5000", dst, k);
            if (strcmp(out, "OK") != 0 && strcmp(out, "NOKEY") != 0)
                fail_at(__LINE__, "MIGRATE %s: %s", k, out);
        }
    }
}

/* 3 masters: keys in every slot range; a slot migrated under load. */
static void test_cluster(void)
{
    ratel_policy_t p = policy_of("1000000/1h", NULL);
    test_redis_t nodes[3];
    char url[128], out[4096], src_id[64], dst_id[64];
    int total = 0, slot, src = -1, dst;
    ratel_store_stats_t st;
    ratel_store_t *s;
    migrate_run_t m;
    pthread_t tid;

    REQUIRE(test_cluster_start(nodes, module_path) == 0);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", nodes[0].port);
    s = open_store((ratel_redis_options_t){.url = url,
                                           .on_failure = RATEL_FAILURE_CLOSED});
    REQUIRE(s);
    for (int i = 0; i < 3000; i++) {
        char key[32];
        ratel_decision_t d;
        snprintf(key, sizeof key, "ck:%d", i);
        CHECK_EQ(acquire(s, key, &p, ratel_clock_now_us(), 1, &d), 0);
        CHECK_EQ(d.source, RATEL_SOURCE_STORE);
        CHECK_EQ(d.allowed, 1);
    }
    for (int i = 0; i < 3; i++) {
        test_redis_cmd(nodes[i].port, out, sizeof out, "DBSIZE");
        CHECK(atoi(out) > 500);
        total += atoi(out);
    }
    CHECK_EQ(total, 3000);

    /* Migrate the slot of {mig} from its owner to the next node. */
    test_redis_cmd(nodes[0].port, out, sizeof out, "CLUSTER KEYSLOT {mig}");
    slot = atoi(out);
    for (int i = 0; i < 3; i++) {
        test_redis_cmd(nodes[i].port, out, sizeof out,
                       "CLUSTER COUNTKEYSINSLOT %d", slot);
        char probe[128];
        test_redis_cmd(nodes[i].port, probe, sizeof probe, "GET {mig}:probe");
        if (strncmp(probe, "(error) MOVED", 13) != 0)
            src = i;
    }
    REQUIRE(src >= 0);
    dst = (src + 1) % 3;
    node_id(nodes[src].port, src_id, sizeof src_id);
    node_id(nodes[dst].port, dst_id, sizeof dst_id);
    memset(&m, 0, sizeof m);
    m.store = s;
    m.policy = &p;
    pthread_create(&tid, NULL, migrate_load, &m);
    while (m.calls < 500)
        sched_yield();
    test_redis_cmd(nodes[dst].port, out, sizeof out,
                   "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id);
    CHECK(strcmp(out, "OK") == 0);
    test_redis_cmd(nodes[src].port, out, sizeof out,
                   "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id);
    CHECK(strcmp(out, "OK") == 0);
    migrate_keys(nodes[src].port, nodes[dst].port, slot);
    for (int i = 0; i < 3; i++) {
        test_redis_cmd(nodes[i].port, out, sizeof out,
                       "CLUSTER SETSLOT %d NODE %s", slot, dst_id);
        CHECK(strcmp(out, "OK") == 0);
    }
    {
        int before = m.calls;
        while (m.calls < before + 1000)
            sched_yield();
    }
    m.stop = 1;
    pthread_join(tid, NULL);
    CHECK_EQ(m.errors, 0);
    /* Every admitted request is counted on the key where it now lives. */
    for (int k = 0; k < 200; k++) {
        char key[32];
        ratel_rule_status_t rs[1];
        size_t n = 0;
        snprintf(key, sizeof key, "{mig}:%d", k);
        CHECK_EQ(ratel_store_inspect(s, key, strlen(key), ratel_clock_now_us(),
                                     rs, 1, &n),
                 0);
        if (n != 1 || rs[0].used != m.counts[k])
            fail_at(__LINE__, "%s: counted %lld, admitted %d", key,
                    n ? (long long)rs[0].used : -1LL, m.counts[k]);
    }
    test_redis_cmd(nodes[dst].port, out, sizeof out,
                   "CLUSTER COUNTKEYSINSLOT %d", slot);
    CHECK_EQ(atoi(out), 200);
    ratel_store_stats(s, &st);
    CHECK(st.redirects > 0);
    CHECK_EQ(ratel_store_ping(s, out, sizeof out), 0);
    ratel_store_free(s);
    for (int i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
}

static const store_test_t tests[] = {
    {"bad_targets", test_bad_targets},
    {"option_ranges", test_option_ranges},
    {"modes_agree", test_modes_agree},
    {"library", test_library},
    {"library_replaced", test_library_replaced},
    {"library_refused", test_library_refused},
    {"library_cluster", test_library_cluster},
    {"deny_cache", test_deny_cache},
    {"batch", test_batch},
    {"batch_library", test_batch_library},
    {"shared_pipelines", test_shared_pipelines},
    {"processes_share_a_key", test_processes_share_a_key},
    {"processes_hold_leases", test_processes_hold_leases},
    {"leases_local", test_leases_local},
    {"failure_open", test_failure_open},
    {"failure_closed", test_failure_closed},
    {"failure_local", test_failure_local},
    {"failover", test_failover},
    {"cluster", test_cluster},
};

int main(int argc, char **argv)
{
    return run_store_tests("test_redis_store", tests,
                           sizeof tests / sizeof tests[0], argc, argv);
}
