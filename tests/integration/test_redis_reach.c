/*
 * test_redis_reach.c - the Redis store reaching Redis the ways managed and
 * self-hosted deployments need, against real servers (servers.h):
 *
 * - TLS-only redis-servers (certificates made by tls_certs.sh): decisions
 *   through rediss:// with tls_ca_file; client certificates with
 *   tls-auth-clients yes; a wrong CA, a wrong name and a missing client
 *   certificate each refused at start with its own message; an ACL user
 *   over TLS; a plain
 *   redis:// URL to a TLS port said to be one; a cluster over TLS.
 * - Sentinel: decisions through redis+sentinel://; SENTINEL FAILOVER
 *   while a thread keeps deciding: no error reaches the caller, every
 *   decision says its source, and decisions land on the new primary;
 *   Sentinels and data nodes over TLS.
 *
 *   test_redis_reach MODULE_PATH [TEST...]
 */
#include "store_test.h"

#include <pthread.h>
#include <stdatomic.h>

static char certs[512];

static int have_certs(void)
{
    return certs[0] || test_tls_certs(certs, sizeof certs) == 0;
}

/* A store on `url` with TLS files of the test directory; its error. */
static int try_store(const char *url, const char *ca, const char *cert,
                     const char *server_name, ratel_store_t **s, char *err,
                     size_t errlen)
{
    char ca_path[700], cert_path[700], key_path[700];
    ratel_redis_options_t o = {.url = url, .client_time = 1};

    if (ca) {
        snprintf(ca_path, sizeof ca_path, "%s/%s", certs, ca);
        o.tls_ca_file = ca_path;
    }
    if (cert) {
        snprintf(cert_path, sizeof cert_path, "%s/%s.crt", certs, cert);
        snprintf(key_path, sizeof key_path, "%s/%s.key", certs, cert);
        o.tls_cert_file = cert_path;
        o.tls_key_file = key_path;
    }
    o.tls_server_name = server_name;
    return ratel_store_redis_new(s, &o, err, errlen);
}

/* Two of 2/1s allowed, the third denied, all from Redis. */
static void decides(ratel_store_t *s, const char *key)
{
    ratel_policy_t p = policy_of("2/1s", NULL);
    ratel_decision_t d;

    for (int i = 0; i < 3; i++) {
        CHECK_EQ(acquire(s, key, &p, T0, 1, &d), 0);
        CHECK_EQ(d.source, RATEL_SOURCE_STORE);
        CHECK_EQ(d.allowed, i < 2);
    }
}

/* A store that must not start, and the words its refusal must hold. */
static void refused(const char *url, const char *ca, const char *cert,
                    const char *name, const char *words)
{
    ratel_store_t *s = NULL;
    char err[600] = "";
    int rc = try_store(url, ca, cert, name, &s, err, sizeof err);

    CHECK(rc != 0);
    if (!strstr(err, words))
        fail_at(__LINE__, "[%s] lacks [%s]", err, words);
    ratel_store_free(s);
}

static void test_tls(void)
{
    test_redis_t r;
    ratel_store_t *s = NULL;
    char url[128], plain[128], err[600];

    REQUIRE(have_certs());
    REQUIRE(test_redis_start_tls(&r, certs, "server", 0, module_path, NULL) ==
            0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", r.port);
    CHECK_EQ(try_store(url, "ca.crt", NULL, NULL, &s, err, sizeof err), 0);
    if (s)
        decides(s, "tls");
    ratel_store_free(s);
    /* Its name, checked against the certificate's (localhost is in it). */
    snprintf(url, sizeof url, "rediss://localhost:%d", r.port);
    s = NULL;
    CHECK_EQ(try_store(url, "ca.crt", NULL, NULL, &s, err, sizeof err), 0);
    ratel_store_free(s);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", r.port);
    refused(url, "other-ca.crt", NULL, NULL, "tls_ca_file");
    refused(url, "ca.crt", NULL, "redis.example.com", "not redis.example.com");
    snprintf(plain, sizeof plain, "redis://127.0.0.1:%d", r.port);
    refused(plain, NULL, NULL, NULL, "rediss://");
    /* An ACL user over TLS: AUTH user password, then decisions. */
    test_redis_cmd_on(&r, plain, sizeof plain,
                      "ACL SETUSER limiter on >s3cret ~* &* +@all");
    CHECK(strcmp(plain, "OK") == 0);
    snprintf(url, sizeof url, "rediss://limiter:s3cret@127.0.0.1:%d", r.port);
    s = NULL;
    CHECK_EQ(try_store(url, "ca.crt", NULL, NULL, &s, err, sizeof err), 0);
    if (s)
        decides(s, "acl");
    ratel_store_free(s);
    snprintf(url, sizeof url, "rediss://limiter:wrong@127.0.0.1:%d", r.port);
    refused(url, "ca.crt", NULL, NULL, "refused the credentials");
    test_redis_free(&r);
}

static void test_tls_expired(void)
{
    test_redis_t r;
    char url[128];

    REQUIRE(have_certs());
    REQUIRE(test_redis_start_tls(&r, certs, "expired", 0, module_path, NULL) ==
            0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", r.port);
    refused(url, "ca.crt", NULL, NULL, "has expired");
    test_redis_free(&r);
}

static void test_tls_client_certificates(void)
{
    test_redis_t r;
    ratel_store_t *s = NULL;
    char url[128], err[600];

    REQUIRE(have_certs());
    REQUIRE(test_redis_start_tls(&r, certs, "server", 1, module_path, NULL) ==
            0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", r.port);
    CHECK_EQ(try_store(url, "ca.crt", "client", NULL, &s, err, sizeof err), 0);
    if (s)
        decides(s, "client");
    ratel_store_free(s);
    refused(url, "ca.crt", NULL, NULL, "client certificate");
    refused(url, "ca.crt", "other-client", NULL, "client certificate");
    test_redis_free(&r);
}

/* Keys in every slot range of a cluster of TLS-only nodes. */
static void test_tls_cluster(void)
{
    ratel_policy_t p = policy_of("3/1h", NULL);
    test_redis_t nodes[3];
    ratel_store_t *s = NULL;
    ratel_decision_t d;
    char url[128], err[600], key[32];

    REQUIRE(have_certs());
    REQUIRE(test_cluster_start_tls(nodes, certs, module_path) == 0);
    snprintf(url, sizeof url, "rediss+cluster://127.0.0.1:%d", nodes[0].port);
    CHECK_EQ(try_store(url, "ca.crt", NULL, NULL, &s, err, sizeof err), 0);
    for (int k = 0; s && k < 60; k++) {
        snprintf(key, sizeof key, "tls-cluster:%d", k);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(acquire(s, key, &p, T0, 1, &d), 0);
            CHECK_EQ(d.source, RATEL_SOURCE_STORE);
            CHECK_EQ(d.allowed, i < 3);
        }
    }
    ratel_store_free(s);
    for (int i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
}

/* ----------------------------------------------------------- Sentinel */

/* RATEL.ACQUIRE calls a server has run (INFO commandstats). */
static long acquires_on(const test_redis_t *r)
{
    char out[8192];
    const char *at;

    test_redis_cmd_on(r, out, sizeof out, "INFO commandstats");
    at = strstr(out, "cmdstat_ratel.acquire:calls=");
    return at ? strtol(at + 28, NULL, 10) : 0;
}

typedef struct sentinel_load_s {
    ratel_store_t *store;
    atomic_int stop;
    atomic_long calls, errors, store_decided, policy_decided, no_source;
} sentinel_load_t;

static void *sentinel_load(void *arg)
{
    sentinel_load_t *l = arg;
    ratel_policy_t p = policy_of("1000000/1h", NULL);
    char key[32];

    for (long i = 0; !atomic_load(&l->stop); i++) {
        ratel_decision_t d;
        snprintf(key, sizeof key, "sentinel:%ld", i % 50);
        if (acquire(l->store, key, &p, ratel_clock_now_us(), 1, &d) != 0)
            atomic_fetch_add(&l->errors, 1);
        else if (d.source == RATEL_SOURCE_STORE)
            atomic_fetch_add(&l->store_decided, 1);
        else if (d.source == RATEL_SOURCE_LOCAL)
            atomic_fetch_add(&l->policy_decided, 1);
        else
            atomic_fetch_add(&l->no_source, 1);
        atomic_fetch_add(&l->calls, 1);
    }
    return NULL;
}

static void test_sentinel(void)
{
    test_sentinel_t st;
    sentinel_load_t load = {0};
    ratel_store_t *s;
    pthread_t thread;
    char url[160];
    int new_port;
    long before;

    REQUIRE(test_sentinel_start(&st, 3, module_path, NULL) == 0);
    snprintf(url, sizeof url,
             "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             st.sentinels[0].port, st.sentinels[1].port, st.sentinels[2].port,
             TEST_SENTINEL_MASTER);
    s = open_store((ratel_redis_options_t){.url = url, .client_time = 1});
    REQUIRE(s);
    decides(s, "named");
    CHECK(acquires_on(test_sentinel_primary(&st)) >= 3);
    /* A failover while a thread keeps deciding (on the real clock). */
    load.store = s;
    REQUIRE(pthread_create(&thread, NULL, sentinel_load, &load) == 0);
    new_port = test_sentinel_failover(&st, 30000);
    CHECK(new_port > 0);
    atomic_store(&load.stop, 1);
    pthread_join(thread, NULL);
    CHECK_EQ(atomic_load(&load.errors), 0);
    CHECK_EQ(atomic_load(&load.no_source), 0);
    CHECK(atomic_load(&load.store_decided) > 0);
    /* The next decisions land on the new primary (the old may lag behind
       as a replica: within the timeout, the store follows). */
    if (new_port > 0) {
        test_redis_t *primary = test_sentinel_primary(&st);
        ratel_policy_t p = policy_of("1000/1h", NULL);
        ratel_decision_t d;
        int landed = 0;
        CHECK_EQ(primary->port, new_port);
        before = acquires_on(primary);
        for (int i = 0; i < 200 && !landed; i++) {
            CHECK_EQ(acquire(s, "after", &p, ratel_clock_now_us(), 1, &d), 0);
            landed =
                d.source == RATEL_SOURCE_STORE && acquires_on(primary) > before;
        }
        CHECK(landed);
    }
    printf("  sentinel: %ld decisions during the failover, %ld by Redis, "
           "%ld by the failure policy\n",
           atomic_load(&load.calls), atomic_load(&load.store_decided),
           atomic_load(&load.policy_decided));
    ratel_store_free(s);
    test_sentinel_free(&st);
}

/* TLS to the Sentinels and to the data nodes they name. */
static void test_sentinel_tls(void)
{
    test_sentinel_t st;
    ratel_store_t *s = NULL;
    char url[160], err[600];

    REQUIRE(have_certs());
    REQUIRE(test_sentinel_start(&st, 1, module_path, certs) == 0);
    snprintf(url, sizeof url, "rediss+sentinel://127.0.0.1:%d/%s",
             st.sentinels[0].port, TEST_SENTINEL_MASTER);
    CHECK_EQ(try_store(url, "ca.crt", NULL, NULL, &s, err, sizeof err), 0);
    if (!s)
        fail_at(__LINE__, "%s", err);
    if (s)
        decides(s, "sentinel-tls");
    CHECK(acquires_on(test_sentinel_primary(&st)) >= 3);
    ratel_store_free(s);
    test_sentinel_free(&st);
}

/* A Sentinel URL naming a master no Sentinel knows. */
static void test_sentinel_unknown(void)
{
    test_sentinel_t st;
    ratel_store_t *s = NULL;
    char url[160], err[600] = "";
    ratel_redis_options_t o = {.url = url};

    REQUIRE(test_sentinel_start(&st, 1, module_path, NULL) == 0);
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/nosuchmaster",
             st.sentinels[0].port);
    CHECK(ratel_store_redis_new(&s, &o, err, sizeof err) != 0);
    if (!strstr(err, "nosuchmaster"))
        fail_at(__LINE__, "[%s] does not name the master", err);
    ratel_store_free(s);
    test_sentinel_free(&st);
}

static const store_test_t tests[] = {
    {"tls", test_tls},
    {"tls_expired", test_tls_expired},
    {"tls_client_certificates", test_tls_client_certificates},
    {"tls_cluster", test_tls_cluster},
    {"sentinel", test_sentinel},
    {"sentinel_tls", test_sentinel_tls},
    {"sentinel_unknown", test_sentinel_unknown},
};

int main(int argc, char **argv)
{
    return run_store_tests("test_redis_reach", tests,
                           sizeof tests / sizeof tests[0], argc, argv);
}
