/*
 * test_config.c - rateld's configuration: the example file, every field's
 * valid forms, a table of bad files (line and message), route matching and
 * CIDR parsing.
 */
#include "rateld/config.h"
#include "rateld/erl.h"
#include "test.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/socket.h>
#include <unistd.h>

/* The route for a method and a path (no host, no headers). */
static const rateld_route_t *route_of(const rateld_config_t *c,
                                      const char *method, size_t mlen,
                                      const char *path, size_t plen)
{
    rateld_route_query_t q = {{method, mlen}, {path, plen}, {"", 0}, NULL};
    return rateld_config_route(c, &q);
}

/* One valid policy, for files about something else. */
#define P "policies:\n  p:\n    rules: 1/1s\n"

static rateld_config_t *parse_ok(const char *text)
{
    rateld_config_t *c = NULL;
    char err[512] = "";

    if (rateld_config_parse(text, strlen(text), "t.yaml", &c, err,
                            sizeof err) != 0) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return NULL;
    }
    return c;
}

/* Parses text expecting failure; returns the message in err. */
static int parse_bad(const char *text, char *err, size_t errlen)
{
    rateld_config_t *c = (rateld_config_t *)1;
    int rc = rateld_config_parse(text, strlen(text), "t.yaml", &c, err, errlen);
    if (rc == 0)
        rateld_config_free(c);
    else if (c != NULL)
        ratel_test_fail(__FILE__, __LINE__, "*out not NULL on error");
    return rc;
}

static int rule_is(const ratel_rule_t *r, uint32_t limit, uint32_t period_ms)
{
    return r->algo == RATEL_ALGO_SLIDING && r->limit == limit &&
           r->period_ms == period_ms;
}

TEST(config_example_file)
{
    rateld_config_t *c = NULL;
    char err[512] = "";
    const rateld_policy_t *p;
    const rateld_route_t *route;
    static const uint8_t v6_loopback[16] = {[15] = 1};

    if (rateld_config_load("examples/rateld.yaml", &c, err, sizeof err)) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return;
    }
    CHECK(strcmp(c->path, "examples/rateld.yaml") == 0);
    CHECK(strcmp(c->listen, "127.0.0.1:8080") == 0);
    CHECK_EQ(c->threads, 1);
    /* Shipped empty: reset is off until the administrator sets one. */
    CHECK(c->admin_token[0] == '\0');
    CHECK_EQ(c->store, RATELD_STORE_MEMORY);
    CHECK_EQ(c->memory.max_bytes, 64 << 20);
    REQUIRE(c->trusted.n == 2);
    CHECK_EQ(c->trusted.blocks[0].family, AF_INET);
    CHECK_EQ(c->trusted.blocks[0].bits, 32);
    CHECK(memcmp(c->trusted.blocks[0].addr, "\x7f\0\0\x01", 4) == 0);
    CHECK_EQ(c->trusted.blocks[1].family, AF_INET6);
    CHECK_EQ(c->trusted.blocks[1].bits, 128);
    CHECK(memcmp(c->trusted.blocks[1].addr, v6_loopback, 16) == 0);
    CHECK_EQ(c->limits.max_header_bytes, 0);

    REQUIRE(c->npolicies == 5);
    p = rateld_config_policy(c, "ping", 4);
    REQUIRE(p != NULL);
    CHECK_EQ(p->policy.nrules, 1);
    CHECK(rule_is(&p->policy.rules[0], 20, 60000));
    CHECK_EQ(p->key.n, 1);
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_IP);
    CHECK_EQ(p->shadow, 0);

    p = rateld_config_policy(c, "sms", 3);
    REQUIRE(p != NULL);
    CHECK_EQ(p->policy.nrules, 2);
    CHECK(rule_is(&p->policy.rules[0], 1, 60000));
    CHECK(rule_is(&p->policy.rules[1], 10, 86400000));
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_QUERY);
    CHECK(strcmp(p->key.parts[0].name, "telephone") == 0);
    CHECK_EQ(p->key.on_missing, RATEL__KEY_MISSING_REJECT);

    p = rateld_config_policy(c, "form", 4);
    REQUIRE(p != NULL);
    CHECK_EQ(p->policy.nrules, 2);
    CHECK(rule_is(&p->policy.rules[0], 10, 60000));
    CHECK(rule_is(&p->policy.rules[1], 20, 120000));
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_HEADER);
    CHECK(strcmp(p->key.parts[0].name, "X-User-Id") == 0);

    p = rateld_config_policy(c, "form-dup", 8);
    REQUIRE(p != NULL);
    CHECK_EQ(p->policy.nrules, 1);
    CHECK(rule_is(&p->policy.rules[0], 1, 5000));
    REQUIRE(p->key.n == 2);
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_HEADER);
    CHECK(strcmp(p->key.parts[0].name, "X-User-Id") == 0);
    CHECK_EQ(p->key.parts[1].kind, RATEL__KEY_PATH);
    CHECK(p->line > 0);

    /* The leases example of docs/rateld.md. */
    p = rateld_config_policy(c, "sms-provider", 12);
    REQUIRE(p != NULL);
    CHECK_EQ(p->policy.nrules, 2);
    CHECK(rule_is(&p->policy.rules[0], 600, 60000));
    CHECK_EQ(p->policy.rules[1].algo, RATEL_ALGO_CONCURRENT);
    CHECK_EQ(p->policy.rules[1].limit, 50);
    CHECK_EQ(p->policy.rules[1].period_ms, 30000);
    CHECK(ratel_policy_has_leases(&p->policy));
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_GLOBAL);

    REQUIRE(c->nroutes == 3);
    route = route_of(c, "GET", 3, "/api/ping", 9);
    REQUIRE(route != NULL);
    CHECK_EQ(route->npolicies, 1);
    CHECK(strcmp(c->policies[route->policies[0]].name, "ping") == 0);
    route = route_of(c, "GET", 3, "/sendCaptcha?telephone=1", 24);
    REQUIRE(route != NULL);
    CHECK(strcmp(c->policies[route->policies[0]].name, "sms") == 0);
    route = route_of(c, "POST", 4, "/form", 5);
    REQUIRE(route != NULL);
    REQUIRE(route->npolicies == 2);
    CHECK(strcmp(c->policies[route->policies[0]].name, "form") == 0);
    CHECK(strcmp(c->policies[route->policies[1]].name, "form-dup") == 0);
    CHECK(route_of(c, "GET", 3, "/form", 5) == NULL);
    rateld_config_free(c);
}

TEST(config_defaults)
{
    rateld_config_t *c = parse_ok(P);
    REQUIRE(c);
    CHECK(strcmp(c->path, "t.yaml") == 0);
    CHECK(strcmp(c->listen, "127.0.0.1:8080") == 0);
    CHECK_EQ(c->threads, 1);
    CHECK(c->admin_token[0] == '\0');
    CHECK_EQ(c->trusted.n, 0);
    CHECK_EQ(c->store, RATELD_STORE_MEMORY);
    CHECK_EQ(c->memory.max_bytes, 64 << 20);
    CHECK_EQ(c->limits.max_header_bytes, 0);
    CHECK_EQ(c->limits.idle_timeout_ms, 0);
    CHECK_EQ(c->nroutes, 0);
    CHECK(c->routes == NULL);
    REQUIRE(c->npolicies == 1);
    CHECK(strcmp(c->policies[0].name, "p") == 0);
    CHECK_EQ(c->policies[0].line, 2);
    CHECK_EQ(c->policies[0].key.n, 1);
    CHECK_EQ(c->policies[0].key.parts[0].kind, RATEL__KEY_IP);
    CHECK_EQ(c->policies[0].key.on_missing, RATEL__KEY_MISSING_REJECT);
    CHECK_EQ(c->policies[0].shadow, 0);
    CHECK(rateld_config_policy(c, "q", 1) == NULL);
    CHECK(rateld_config_policy(c, "pp", 1) != NULL); /* len counts */
    rateld_config_free(c);
}

TEST(config_server_fields)
{
    static const char *const listens[] = {"127.0.0.1:80", "\"[::1]:8080\"",
                                          "\":8080\"", "localhost:0",
                                          "0.0.0.0:65535"};
    static const char *const want[] = {"127.0.0.1:80", "[::1]:8080", ":8080",
                                       "localhost:0", "0.0.0.0:65535"};
    char text[512];
    rateld_config_t *c;

    for (size_t i = 0; i < sizeof listens / sizeof listens[0]; i++) {
        snprintf(text, sizeof text, "listen: %s\n" P, listens[i]);
        c = parse_ok(text);
        if (!c)
            continue;
        CHECK(strcmp(c->listen, want[i]) == 0);
        rateld_config_free(c);
    }
    c = parse_ok(
        "threads: 64\nadmin_token: 'x1-Y2_z3-x1-Y2_z3-x1-Y2_z3-x1-Y2_z3'\n"
        "limits:\n  max_header_bytes: 16KiB\n"
        "  max_body_bytes: 1048576\n  max_connections: 5\n"
        "  max_pipeline: 8\n  request_timeout_ms: 1500\n"
        "  idle_timeout_ms: 0\n" P);
    REQUIRE(c);
    CHECK_EQ(c->threads, 64);
    CHECK(strcmp(c->admin_token, "x1-Y2_z3-x1-Y2_z3-x1-Y2_z3-x1-Y2_z3") == 0);
    CHECK_EQ(c->limits.max_header_bytes, 16384);
    CHECK_EQ(c->limits.max_body_bytes, 1048576);
    CHECK_EQ(c->limits.max_connections, 5);
    CHECK_EQ(c->limits.max_pipeline, 8);
    CHECK_EQ(c->limits.request_timeout_ms, 1500);
    CHECK_EQ(c->limits.idle_timeout_ms, 0);
    rateld_config_free(c);
    c = parse_ok("limits:\n  max_connections_per_client: 20\n" P);
    REQUIRE(c);
    CHECK_EQ(c->limits.max_connections_per_client, 20);
    rateld_config_free(c);

    c = parse_ok("api_token: 9e41d7c2b06a58f31d9c4e7a02b5f8d63c1e90a7\n" P);
    REQUIRE(c);
    CHECK(strcmp(c->api_token, "9e41d7c2b06a58f31d9c4e7a02b5f8d63c1e90a7") ==
          0);
    CHECK(c->admin_token[0] == '\0');
    rateld_config_free(c);

    c = parse_ok("admin_token: \"\"\ntrusted_proxies: []\n" P);
    REQUIRE(c);
    CHECK(c->admin_token[0] == '\0');
    CHECK(c->api_token[0] == '\0');
    CHECK_EQ(c->trusted.n, 0);
    rateld_config_free(c);

    c = parse_ok("trusted_proxies: [10.0.0.0/8, 192.168.1.7, '::1', "
                 "2001:db8::/32, 0.0.0.0/0]\n" P);
    REQUIRE(c);
    REQUIRE(c->trusted.n == 5);
    CHECK_EQ(c->trusted.blocks[0].bits, 8);
    CHECK_EQ(c->trusted.blocks[1].bits, 32);
    CHECK_EQ(c->trusted.blocks[3].family, AF_INET6);
    CHECK_EQ(c->trusted.blocks[3].bits, 32);
    CHECK_EQ(c->trusted.blocks[4].bits, 0);
    rateld_config_free(c);
}

TEST(config_store_fields)
{
    static const struct {
        const char *text;
        size_t bytes;
    } sizes[] = {{"67108864", 64u << 20},
                 {"64MiB", 64u << 20},
                 {"'64 MiB'", 64u << 20},
                 {"64M", 64u << 20},
                 {"1G", 1u << 30},
                 {"64KiB", 65536},
                 {"64k", 65536},
                 {"65536B", 65536},
                 {"1TiB", (size_t)1 << 40},
                 {"2GiB", (size_t)2 << 30}};
    char text[512];
    rateld_config_t *c;

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        snprintf(text, sizeof text, "store:\n  max_bytes: %s\n" P,
                 sizes[i].text);
        c = parse_ok(text);
        if (!c)
            continue;
        CHECK_EQ(c->memory.max_bytes, sizes[i].bytes);
        CHECK_EQ(c->store, RATELD_STORE_MEMORY);
        rateld_config_free(c);
    }

    c = parse_ok("store:\n  type: redis\n  url: redis://10.0.0.1:6379/2\n"
                 "  on_failure: closed\n  timeout_ms: 100\n"
                 "  connect_timeout_ms: 300\n  pool: 8\n  mode: lua\n"
                 "  deny_cache: 0\n  max_bytes: 1MiB\n" P);
    REQUIRE(c);
    CHECK_EQ(c->store, RATELD_STORE_REDIS);
    CHECK(strcmp(c->redis_url, "redis://10.0.0.1:6379/2") == 0);
    CHECK(c->redis.url == c->redis_url);
    CHECK_EQ(c->redis.on_failure, RATEL_FAILURE_CLOSED);
    CHECK_EQ(c->redis.command_timeout_ms, 100);
    CHECK_EQ(c->redis.connect_timeout_ms, 300);
    CHECK_EQ(c->redis.pool_size, 8);
    CHECK_EQ(c->redis.mode, RATEL_REDIS_LUA);
    CHECK(c->redis.deny_cache_entries < 0); /* 0 in the file: off */
    CHECK_EQ(c->redis.local.max_bytes, 1 << 20);
    rateld_config_free(c);

    /* Absent options stay 0: the URL's query or the store's default. */
    c = parse_ok("store: {type: redis, url: 'redis+cluster://a:1,b:2', "
                 "on_failure: open, mode: module, deny_cache: 500}\n" P);
    REQUIRE(c);
    CHECK_EQ(c->redis.on_failure, RATEL_FAILURE_OPEN);
    CHECK_EQ(c->redis.mode, RATEL_REDIS_MODULE);
    CHECK_EQ(c->redis.deny_cache_entries, 500);
    CHECK_EQ(c->redis.command_timeout_ms, 0);
    CHECK_EQ(c->redis.pool_size, 0);
    rateld_config_free(c);

    c = parse_ok("store: {type: redis, url: redis://h, on_failure: local, "
                 "mode: auto}\n" P);
    REQUIRE(c);
    CHECK_EQ(c->redis.on_failure, RATEL_FAILURE_LOCAL);
    CHECK_EQ(c->redis.mode, RATEL_REDIS_AUTO);
    CHECK_EQ(c->redis.deny_cache_entries, 0);
    rateld_config_free(c);
}

TEST(config_policy_fields)
{
    rateld_config_t *c =
        parse_ok("policies:\n"
                 "  a.b_c-1:\n"
                 "    rules: ['100/1s:gcra,burst=200', 5/1m:fixed]\n"
                 "    key: global\n"
                 "    shadow: true\n"
                 "  b:\n"
                 "    rules: [1/1s, 2/1s, 3/1s, 4/1s, 5/1s, 6/1s, 7/1s, "
                 "8/1s]\n"
                 "    key: [ip, header:Authorization, query:q, path]\n"
                 "    on_missing: shared\n"
                 "    shadow: False\n"
                 "  c: {rules: 1/1d, key: 'query:a.b[]'}\n");
    const rateld_policy_t *p;

    REQUIRE(c);
    REQUIRE(c->npolicies == 3);
    p = &c->policies[0];
    CHECK(strcmp(p->name, "a.b_c-1") == 0);
    CHECK_EQ(p->line, 2);
    CHECK_EQ(p->policy.nrules, 2);
    CHECK_EQ(p->policy.rules[0].algo, RATEL_ALGO_GCRA);
    CHECK_EQ(p->policy.rules[0].burst, 200);
    CHECK_EQ(p->policy.rules[1].algo, RATEL_ALGO_FIXED);
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_GLOBAL);
    CHECK_EQ(p->shadow, 1);
    p = &c->policies[1];
    CHECK_EQ(p->line, 6);
    CHECK_EQ(p->policy.nrules, 8);
    REQUIRE(p->key.n == 4);
    CHECK_EQ(p->key.parts[0].kind, RATEL__KEY_IP);
    CHECK_EQ(p->key.parts[1].kind, RATEL__KEY_HEADER);
    CHECK(strcmp(p->key.parts[1].name, "Authorization") == 0);
    CHECK_EQ(p->key.parts[2].kind, RATEL__KEY_QUERY);
    CHECK(strcmp(p->key.parts[2].name, "q") == 0);
    CHECK_EQ(p->key.parts[3].kind, RATEL__KEY_PATH);
    CHECK(p->key.parts[3].name[0] == '\0');
    CHECK_EQ(p->key.on_missing, RATEL__KEY_MISSING_SHARED);
    CHECK_EQ(p->shadow, 0);
    p = &c->policies[2];
    CHECK(strcmp(p->key.parts[0].name, "a.b[]") == 0);
    rateld_config_free(c);
}

/* A bad file: the line it names and a phrase of its message. */
typedef struct bad_case_s {
    const char *text;
    int line;
    const char *phrase;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    /* The file as a whole. */
    {"", 1, "empty"},
    {"# only a comment\n\n", 1, "empty"},
    {"---\n...\n", 1, "empty"},
    {"[1, 2]\n", 1, "top level must be a mapping"},
    {"just text\n", 1, "top level must be a mapping"},
    {"listen: :80\n", 1, "policies: required"},
    {P "---\n" P, 4, "second YAML document"},
    {"a: [1, 2\n", 2, "not YAML"},
    {P "  q:\n rules: 1/1s\n", 5, "not YAML"},
    {"listen: \"abc\n" P, 5, "not YAML"},
    {P "\t\n", 4, "not YAML"},
    {"x: \x01\n", 1, "control characters"},
    {P "y: \xff\n", 4, "UTF-8"},
    {"listen: &l 127.0.0.1:1\n" P, 1, "anchors and aliases"},
    {P "routes:\n  - path: /a\n    policies: *x\n", 6, "alias *x"},
    {"threads: !!int 4\n" P, 1, "tag !!int: tags are not used"},
    {"[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]\n", 1, "nested deeper"},
    {"? [a]\n: 1\n" P, 1, "key must be a plain name"},
    {"polices:\n  p:\n    rules: 1/1s\n", 1, "polices: unknown field"},
    {"listen: :80\nlisten: :81\n" P, 2,
     "listen: given twice (first at line 1)"},
    {"\"a\\0b\": 1\n" P, 1, "\"a\\x00b\": unknown field"},
    /* The first problem from the top, routes after policies. */
    {"threads: 65\nlisten: 1\n" P, 1, "threads: 65"},
    {"listen: 1\nthreads: 65\n" P, 1, "listen: \"1\""},
    {"routes: [{path: /a, policies: [q]}]\n" P, 1,
     "routes[0].policies[0]: no policy named"},
    {"routes: [{path: /a, policies: [q]}]\npolicies: {p: {rules: 1/1x}}\n", 2,
     "policies.p.rules: rule \"1/1x\""},
    {"policies:\n  p:\n    shadow: 1\n    rules: 1/1x\n", 3,
     "policies.p.shadow"},
    /* Server fields. */
    {"listen: 127.0.0.1\n" P, 1, "not HOST:PORT"},
    {"listen: 127.0.0.1:70000\n" P, 1, "not HOST:PORT"},
    {"listen: ::1:80\n" P, 1, "not HOST:PORT"},
    {"listen: '[::g]:80'\n" P, 1, "not HOST:PORT"},
    {"listen: 'a b:80'\n" P, 1, "not HOST:PORT"},
    {"listen: [a]\n" P, 1, "listen: expected a string, got a list"},
    {"listen:\n" P, 1, "listen: has no value"},
    {"threads: 0\n" P, 1, "threads: 0 is out of range; accepted: 1..64"},
    {"threads: 65\n" P, 1, "out of range"},
    {"threads: -1\n" P, 1, "expected a whole number"},
    {"threads: 1.5\n" P, 1, "expected a whole number"},
    {"threads: \"4\"\n" P, 1, "without quotes"},
    {"threads: 99999999999999999999999\n" P, 1,
     "threads: \"99999999999999999999999\" is out of range; accepted: 1..64"},
    {"threads: [1]\n" P, 1, "threads: expected a whole number, got a list"},
    {"admin_token: a b\n" P, 1, "admin_token: contains a space"},
    {"admin_token:\n" P, 1, "admin_token: has no value"},
    {"admin_token: \"a\\tb\"\n" P, 1, "control character"},
    /* No default secret works: too short, or printed in the docs. */
    {"admin_token: x1-Y2_z3\n" P, 1,
     "admin_token: 8 bytes long; a token needs at least 32"},
    {"admin_token: \"change-me-to-a-long-random-string\"\n" P, 1,
     "is the example token printed in ratel's documentation"},
    {"admin_token: change-me\n" P, 1, "openssl rand -hex 32"},
    {"admin_token: TOKEN\n" P, 1, "example token printed"},
    {"admin_token: CHANGE-ME-TO-A-LONG-RANDOM-STRING\n" P, 1,
     "\"change-me-to-a-long-random-string\" is the example token"},
    {"api_token: '9e41d7c2b06a58f31d9c4e7a02b5f8d6 3c1e90a7'\n" P, 1,
     "api_token: contains a space"},
    {"trusted_proxies: 10.0.0.0/8\n" P, 1, "expected a list"},
    {"trusted_proxies: [10.0.0.1/8]\n" P, 1,
     "trusted_proxies[0]: \"10.0.0.1/8\" has host bits set; write 10.0.0.0/8"},
    {"trusted_proxies:\n  - ::1\n  - 10.0.0.0/33\n" P, 3,
     "trusted_proxies[1]: \"10.0.0.0/33\": prefix length 33 is more than 32"},
    {"trusted_proxies: [nope]\n" P, 1, "not an IPv4 or IPv6 address"},
    {"trusted_proxies: [1.2.3.4, 1.2.3.4/32]\n" P, 1,
     "trusted_proxies[1]: repeats trusted_proxies[0]"},
    {"trusted_proxies: [{a: 1}]\n" P, 1, "expected a string, got a mapping"},
    {"limits: 5\n" P, 1, "limits: expected a mapping of fields"},
    {"limits:\n  max_header_bytes: 100\n" P, 2,
     "limits.max_header_bytes: 100 is out of range; accepted: 0 (the "
     "default) or 1024..1048576"},
    {"limits:\n  max_body_bytes: 32MiB\n" P, 2, "limits.max_body_bytes"},
    {"limits:\n  max_conections: 1\n" P, 2,
     "limits.max_conections: unknown field; accepted: max_header_bytes, "
     "max_body_bytes, max_connections"},
    {"limits:\n  idle_timeout_ms: 86400001\n" P, 2, "out of range"},
    {"limits:\n  max_connections_per_client: 1000001\n" P, 2,
     "limits.max_connections_per_client: 1000001 is out of range; accepted: "
     "0 (the default) or 1..1000000"},
    {"limits:\n  max_pipeline: 1k\n" P, 2, "expected a whole number"},
    /* The store. */
    {"store: memory\n" P, 1, "store: expected a mapping"},
    {"store:\n  type: disk\n" P, 2,
     "store.type: expected memory | redis, got \"disk\""},
    {"store:\n  max_bytes: 1KiB\n" P, 2, "out of range; accepted: 65536.."},
    {"store:\n  max_bytes: 2TiB\n" P, 2, "out of range"},
    {"store:\n  max_bytes: 64MB\n" P, 2, "\"64MB\" is not a size"},
    {"store:\n  max_bytes: 64 mib\n" P, 2, "is not a size"},
    {"store:\n  max_bytes: 99999999999999999T\n" P, 2, "too large"},
    {"store:\n  max_bytes: MiB\n" P, 2, "is not a size"},
    {"store:\n  url: redis://x\n" P, 2,
     "store.url: applies to type: redis only"},
    {"store:\n  pool: 4\n  type: memory\n" P, 2, "store.pool: applies"},
    {"store:\n  type: redis\n" P, 2, "store.url: required"},
    {"store:\n  type: redis\n  url: ''\n" P, 3, "store.url: is empty"},
    {"store:\n  type: redis\n  url: redis://x\n  on_failure: fail\n" P, 4,
     "store.on_failure: expected open | closed | local"},
    {"store:\n  type: redis\n  url: redis://x\n  mode: fast\n" P, 4,
     "store.mode: expected auto | module | function | lua"},
    {"store:\n  type: redis\n  url: redis://x\n  pool: 0\n" P, 4,
     "store.pool: 0 is out of range"},
    {"store:\n  type: redis\n  url: redis://x\n  timeout_ms: 0\n" P, 4,
     "store.timeout_ms"},
    {"store:\n  type: redis\n  url: redis://x\n  connect_timeout_ms: "
     "60001\n" P,
     4, "store.connect_timeout_ms"},
    {"store:\n  type: redis\n  url: redis://x\n  deny_cache: -1\n" P, 4,
     "store.deny_cache: expected a whole number"},
    {"store:\n  type: redis\n  url: redis://x\n  type: memory\n" P, 4,
     "store.type: given twice (first at line 2)"},
    /* Policies. */
    {"policies: []\n", 1, "policies: expected a mapping of policy names"},
    {"policies: {}\n", 1, "policies: none defined"},
    {"policies:\n", 1, "policies: expected a mapping"},
    {P "  p:\n    rules: 2/1s\n", 4,
     "policies.p: defined twice (first at "
     "line 2)"},
    {"policies:\n  'a b':\n    rules: 1/1s\n", 2,
     "policies.\"a b\": a policy name is 1..63 characters"},
    {"policies:\n  "
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:\n"
     "    rules: 1/1s\n",
     2, "a policy name is 1..63"},
    {"policies:\n  p: 1/1s\n", 2,
     "policies.p: expected a mapping of fields "
     "(rules, key, on_missing, shadow, "
     "overrides, fold_case, charge_on, max_wait, lease)"},
    {"policies:\n  p:\n    key: ip\n", 3, "policies.p.rules: required"},
    {"policies:\n  p:\n    rules: 10/1s\n    lease: {ttl_ms: 3600001}\n", 4,
     "policies.p.lease.ttl_ms: 3600001 is out of range"},
    {"policies:\n  p:\n    rules: 10/1s\n    lease: {size: 5}\n", 4,
     "policies.p.lease.size: unknown field; accepted: ttl_ms, max_slice, "
     "min_slice, hosts"},
    {"policies:\n  p:\n    rules: 10/1s\n"
     "    lease: {min_slice: 9, max_slice: 3}\n",
     4, "policies.p.lease.min_slice: 9 is more than max_slice (3)"},
    {"policies:\n  p:\n    rules: [10/1s, 5/30s:concurrent]\n"
     "    lease: {}\n",
     4, "policies.p.lease: a policy with a concurrent rule cannot be leased"},
    {"policies:\n  p:\n    rules: 10/1s:gcra\n    max_wait: 100\n"
     "    lease: {}\n",
     5, "policies.p.lease: a policy that reserves (max_wait)"},
    {"policies:\n  sms:\n    rules: [1/60s, 10/1x]\n", 3,
     "policies.sms.rules[1]: rule \"10/1x\": "},
    {"policies:\n  p:\n    rules: 10/1x\n", 3,
     "policies.p.rules: rule "
     "\"10/1x\""},
    {"policies:\n  p:\n    rules:\n      - 1/1m\n      - 2/1m\n      - "
     "1/60s\n",
     6, "policies.p.rules: policy: rule 3 (\"1/1m\") repeats rule 1"},
    {"policies:\n  p:\n    rules: []\n", 3, "at least one rule"},
    {"policies:\n  p:\n    rules:\n", 3, "expected a rule"},
    {"policies:\n  p:\n    rules: [1/1s, 2/1s, 3/1s, 4/1s, 5/1s, 6/1s, "
     "7/1s, 8/1s,\n            9/1s]\n",
     4, "policies.p.rules: more than 8 rules"},
    {"policies:\n  p:\n    rules: [[1/1s]]\n", 3,
     "policies.p.rules[0]: expected a rule"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: biscuit\n", 4,
     "policies.p.key: unknown key source \"biscuit\"; accepted: ip, global"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: 'header:'\n", 4,
     "policies.p.key: header: needs a name, e.g. header:X-User-Id"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: [ip, 'query:']\n", 4,
     "policies.p.key[1]: query: needs a name"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: ip:x\n", 4,
     "ip takes no name"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: [header: X]\n", 4,
     "got a mapping (write header:NAME with no space after ':')"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: 'header:X Y'\n", 4,
     "not a valid header name"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: 'query:a&b'\n", 4,
     "not a valid query parameter name"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: [ip, path, ip]\n", 4,
     "policies.p.key: ip is given twice"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: [ip, global]\n", 4,
     "cannot be combined"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: []\n", 4, "an empty list"},
    {"policies:\n  p:\n    rules: 1/1s\n    key: [ip, path, 'header:a', "
     "'header:b', 'header:c',\n      'header:d', 'header:e', 'header:f', "
     "'header:g']\n",
     5, "policies.p.key: more than 8 key sources"},
    {"policies:\n  p:\n    rules: 1/1s\n    on_missing: never\n", 4,
     "policies.p.on_missing: expected reject | shared | allow"},
    {"policies:\n  p:\n    rules: 1/1s\n    shadow: yes\n", 4,
     "policies.p.shadow: expected true or false, got \"yes\""},
    {"policies:\n  p:\n    rules: 1/1s\n    shadow: 'true'\n", 4,
     "got \"true\" (in quotes, a string)"},
    {"policies:\n  p:\n    rules: 1/1s\n    rule: 1/1s\n", 4,
     "policies.p.rule: unknown field; accepted: rules, key, on_missing, "
     "shadow"},
    {"policies:\n  p:\n    rules: 1/1s\n    rules: 2/1s\n", 4,
     "policies.p.rules: given twice"},
    /* Routes. */
    {P "routes:\n  path: /a\n", 5, "routes: expected a list of routes"},
    {P "routes:\n  - /a\n", 5, "routes[0]: expected a mapping of fields"},
    {P "routes:\n  - policies: [p]\n", 5, "routes[0].path: required"},
    {P "routes:\n  - path: a\n    policies: [p]\n", 5,
     "routes[0].path: \"a\" must start with '/'"},
    {P "routes:\n  - path: /a?b\n    policies: [p]\n", 5,
     "no spaces, query or fragment"},
    {P "routes:\n  - path: //a/./b;x\n    policies: [p]\n", 5,
     "routes[0].path: \"//a/./b;x\" is not a normalised path: requests are "
     "matched as \"/a/b\" (write that)"},
    {P "routes:\n  - path: /caf%c3%a9\n    policies: [p]\n", 5,
     "matched as \"/caf%C3%A9\""},
    {P "routes:\n  - path: /a%2Fb\n    policies: [p]\n", 5,
     "routes[0].path: \"/a%2Fb\" has an encoded '/' (%2F)"},
    {P "routes:\n  - path: /..\n    policies: [p]\n", 5,
     "has a '..' above the root"},
    {P "routes:\n  - path: /a\n", 5, "routes[0].policies: required"},
    {P "routes:\n  - path: /a\n    policies: p\n", 6,
     "routes[0].policies: expected a list of policy names"},
    {P "routes:\n  - path: /a\n    policies: []\n", 6, "an empty list"},
    {P "routes:\n  - path: /a\n    policies: [p, q]\n", 6,
     "routes[0].policies[1]: no policy named \"q\"; defined: p"},
    {P "routes:\n  - path: /a\n    policies: [p, p]\n", 6,
     "routes[0].policies[1]: repeats routes[0].policies[0]"},
    {P "routes:\n  - path: /a\n    policies: [p, p, p, p, p, p, p, p, p]\n", 6,
     "more than 8 policy names"},
    {P "routes:\n  - path: /a\n    method: get\n    policies: [p]\n", 6,
     "routes[0].method: \"get\" is not an upper-case method"},
    {P "routes:\n  - path: /a\n    method: ''\n    policies: [p]\n", 6,
     "routes[0].method: is empty"},
    {P "routes:\n  - path: /a\n    method: VERYLONGMETHODNAME\n"
       "    policies: [p]\n",
     6, "at most 15 are accepted"},
    {P "routes:\n  - {path: /a, policies: [p]}\n  - {path: /b, policies: "
       "[p]}\n  - {path: /a, policies: [p]}\n",
     7, "routes[2]: same path, method, host and headers as routes[0]"},
    {P "routes:\n  - path: /a\n    policies: [p]\n    weight: 2\n", 7,
     "routes[0].weight: unknown field; accepted: path, method, policies"},
    /* envoy: */
    {"envoy:\n  listen: 127.0.0.1:8081\n", 2, "envoy: needs listen"},
    {"envoy:\n  config_dir: d\n", 2, "envoy: needs listen"},
    {"envoy:\n  listen: nowhere\n  config_dir: d\n", 2,
     "envoy.listen: \"nowhere\" is not HOST:PORT"},
    {"envoy:\n  listen: :1\n  config_dir: d\n  algorithm: leaky\n", 4,
     "envoy.algorithm: \"leaky\"; accepted: sliding, fixed, approx, gcra"},
    {"envoy:\n  listen: :1\n  config_dir: d\n  unknown_domain: deny\n", 4,
     "envoy.unknown_domain"},
    {"envoy:\n  listen: :1\n  config_dir: d\n  max_streams: 100001\n", 4,
     "envoy.max_streams"},
    {"envoy:\n  listen: :1\n  config_dir: d\n  domain: x\n", 4,
     "envoy.domain: unknown field"},
    /* auth.gateway: a known gateway or three header names. */
    {P "auth:\n  gateway: nginxx\n", 5,
     "auth.gateway: \"nginxx\" is not a gateway; accepted: nginx | haproxy "
     "| caddy | traefik | envoy, or {method: HEADER, uri: HEADER, host: "
     "HEADER}"},
    {P "auth:\n  gateway: [nginx]\n", 5, "a list is not a gateway"},
    {P "auth:\n  gateway:\n", 5, "nothing (null) is not a gateway"},
    {P "auth:\n  gateway: {method: X-M, uri: X-U}\n", 5,
     "auth.gateway: needs method, uri and host"},
    {P "auth:\n  gateway:\n    method: X M\n    uri: U\n    host: H\n", 6,
     "auth.gateway.method: \"X M\" is not a header name"},
    {P "auth:\n  gateway: {method: A, uri: \"\", host: H}\n", 5,
     "auth.gateway.uri: \"\" is not a header name"},
    {P "auth:\n  gateway: {method: A, uri: a, host: H}\n", 5,
     "auth.gateway.uri: a already carries the method"},
    {P "auth:\n  gateway: {method: A, uri: B, host: C, port: D}\n", 5,
     "auth.gateway.port: unknown field"},
    {P "auth:\n  gateway: nginx\n  gateway: caddy\n", 6, "gateway"},
    {P "auth:\n  gatway: nginx\n", 5, "auth.gatway: unknown field"},
};

TEST(config_bad_files_name_line_and_field)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case_t *b = &bad_cases[i];
        char err[1024] = "", prefix[32];
        int rc = parse_bad(b->text, err, sizeof err);
        snprintf(prefix, sizeof prefix, "t.yaml:%d: ", b->line);
        if (getenv("RATEL_TEST_VERBOSE"))
            printf("    %s\n", err);
        if (rc != -1 || strncmp(err, prefix, strlen(prefix)) != 0 ||
            !strstr(err, b->phrase)) {
            char m[1400];
            snprintf(m, sizeof m,
                     "case %zu: rc %d, want line %d and \"%s\"; "
                     "got \"%s\"",
                     i, rc, b->line, b->phrase, err);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

TEST(config_size_and_file_limits)
{
    size_t big = 1024 * 1024 + 1;
    char *text = malloc(big + 1);
    char err[512] = "", path[] = "/tmp/ratel-config-XXXXXX";
    rateld_config_t *c = NULL;
    FILE *f;
    int fd;

    REQUIRE(text);
    /* A valid file padded with comments to just over 1 MiB. */
    memset(text, '#', big);
    memcpy(text, P, strlen(P));
    text[strlen(P)] = '#';
    text[big] = '\0';
    CHECK_EQ(rateld_config_parse(text, big, "big.yaml", &c, err, sizeof err),
             -1);
    CHECK(strstr(err, "big.yaml:1: ") == err && strstr(err, "1 MiB"));
    /* At exactly 1 MiB it loads. */
    CHECK_EQ(
        rateld_config_parse(text, big - 1, "big.yaml", &c, err, sizeof err), 0);
    rateld_config_free(c);

    fd = mkstemp(path);
    REQUIRE(fd >= 0);
    f = fdopen(fd, "wb");
    REQUIRE(f);
    fwrite(text, 1, big, f);
    fclose(f);
    CHECK_EQ(rateld_config_load(path, &c, err, sizeof err), -1);
    CHECK(c == NULL);
    CHECK(strncmp(err, path, strlen(path)) == 0 && strstr(err, "1 MiB"));
    unlink(path);
    free(text);

    /* Under 1 MiB but too many values: refused before using memory. */
    {
        size_t n = 200001, len = 0;
        char *many = malloc(2 * n + 16);
        REQUIRE(many);
        len += (size_t)sprintf(many, "routes: [");
        for (size_t i = 0; i < n; i++) {
            many[len++] = '1';
            many[len++] = ',';
        }
        memcpy(many + len - 1, "]\n", 3);
        CHECK_EQ(rateld_config_parse(many, strlen(many), "many.yaml", &c, err,
                                     sizeof err),
                 -1);
        CHECK(strstr(err, "many.yaml:1: more than 200000 values") == err);
        free(many);
    }

    CHECK_EQ(
        rateld_config_load("/nonexistent/rateld.yaml", &c, err, sizeof err),
        -1);
    CHECK(strstr(err, "/nonexistent/rateld.yaml: ") == err);
    CHECK(strstr(err, "No such file") != NULL);

    /* A message is cut to any buffer and stays NUL-terminated. */
    for (size_t cap = 1; cap < 40; cap++) {
        char small[40];
        memset(small, 'X', sizeof small);
        CHECK_EQ(
            rateld_config_parse("threads: 0\n", 11, "t.yaml", &c, small, cap),
            -1);
        CHECK(strlen(small) == cap - 1);
    }
    CHECK_EQ(rateld_config_parse("threads: 0\n", 11, "t.yaml", &c, NULL, 0),
             -1);
    CHECK_EQ(rateld_config_parse(NULL, 0, NULL, &c, err, sizeof err), -1);
    CHECK(strstr(err, "config:1: ") == err);
}

TEST(config_route_matching)
{
    rateld_config_t *c =
        parse_ok(P "  q:\n    rules: 2/1s\n  r:\n    rules: 3/1s\n"
                   "routes:\n"
                   "  - {path: /api, policies: [p]}\n"                   /* 0 */
                   "  - {path: /api/v1, policies: [q]}\n"                /* 1 */
                   "  - {path: /api, method: POST, policies: [r]}\n"     /* 2 */
                   "  - {path: /, policies: [q, r]}\n"                   /* 3 */
                   "  - {path: /static/, policies: [r]}\n"               /* 4 */
                   "  - {path: /api/v1/x, method: GET, policies: [p]}\n" /* 5 */
                   "  - {path: /h, method: GET, policies: [p]}\n"        /* 6 */
                   "  - {path: /h, method: HEAD, policies: [q]}\n" /* 7 */);
    static const struct {
        const char *method, *path;
        int route; /* index, -1 for none */
    } cases[] = {
        {"GET", "/api", 0},
        {"GET", "/api/", 0},
        {"GET", "/api/x", 0},
        {"GET", "/api?x=1", 0},
        {"GET", "/apix", 3},
        {"GET", "/api.json", 0},
        {"GET", "/api.", 0},
        {"GET", "/static.css", 3},
        {"POST", "/api", 2},
        {"POST", "/api/x", 2},
        {"POST", "/api/v1", 1},
        {"GET", "/api/v1/y", 1},
        {"GET", "/api/v10", 0},
        {"GET", "/api/v1/x", 5},
        {"GET", "/api/v1/x/z", 5},
        {"PUT", "/api/v1/x", 1},
        /* HEAD is GET without the body: a GET route takes it, after a
           HEAD route of the same prefix. */
        {"HEAD", "/api/v1/x", 5},
        {"HEAD", "/h", 7},
        {"GET", "/h", 6},
        {"HEAD", "/api", 0},
        {"GET", "/api/v1/xy", 1},
        {"GET", "/", 3},
        {"GET", "/other", 3},
        {"GET", "/static/a.css", 4},
        {"GET", "/static", 3},
        {"GET", "/staticx", 3},
        {"get", "/api", 0},
        {"POS", "/api", 0},
        {"GET", "", -1},
        {"GET", "api", -1},
    };

    REQUIRE(c);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rateld_route_t *r =
            route_of(c, cases[i].method, strlen(cases[i].method), cases[i].path,
                     strlen(cases[i].path));
        long got = r ? (long)(r - c->routes) : -1;
        if (got != cases[i].route) {
            char m[160];
            snprintf(m, sizeof m, "%s %s: route %ld, want %d", cases[i].method,
                     cases[i].path, got, cases[i].route);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
    /* Lengths are honoured: the path ends where plen says. */
    CHECK(route_of(c, "GET", 3, "/apixyz", 4) == &c->routes[0]);
    CHECK(route_of(c, "POSTX", 4, "/api", 4) == &c->routes[2]);
    CHECK_EQ(c->routes[3].npolicies, 2);
    CHECK_EQ(c->routes[3].policies[0], 1);
    CHECK_EQ(c->routes[3].policies[1], 2);
    CHECK(route_of(NULL, "GET", 3, "/", 1) == NULL);
    rateld_config_free(c);

    /* Without a catch-all, unmatched paths have no route. */
    c = parse_ok(P "routes: [{path: /a, method: GET, policies: [p]}]\n");
    REQUIRE(c);
    CHECK(route_of(c, "GET", 3, "/b", 2) == NULL);
    CHECK(route_of(c, "POST", 4, "/a", 2) == NULL);
    CHECK(route_of(c, "GET", 3, "/a/b", 4) == &c->routes[0]);
    rateld_config_free(c);
}

TEST(config_cidr_parse)
{
    static const struct {
        const char *text;
        int family;
        unsigned bits;
        const char *addr; /* as inet_pton reads it */
    } good[] = {
        {"10.0.0.0/8", AF_INET, 8, "10.0.0.0"},
        {"192.168.1.10", AF_INET, 32, "192.168.1.10"},
        {"0.0.0.0/0", AF_INET, 0, "0.0.0.0"},
        {"172.16.0.0/12", AF_INET, 12, "172.16.0.0"},
        {"255.255.255.255/32", AF_INET, 32, "255.255.255.255"},
        {"::1", AF_INET6, 128, "::1"},
        {"::/0", AF_INET6, 0, "::"},
        {"2001:db8::/32", AF_INET6, 32, "2001:db8::"},
        {"fe80::/10", AF_INET6, 10, "fe80::"},
        {"::ffff:10.0.0.0/104", AF_INET6, 104, "::ffff:10.0.0.0"},
        {"2001:db8::1/128", AF_INET6, 128, "2001:db8::1"},
    };
    static const struct {
        const char *text, *phrase;
    } bad[] = {
        {"10.0.0.1/8", "\"10.0.0.1/8\" has host bits set; write 10.0.0.0/8"},
        {"2001:db8::1/32", "host bits set; write 2001:db8::/32"},
        {"192.168.1.1/24", "write 192.168.1.0/24"},
        {"10.0.0.0/33", "prefix length 33 is more than 32"},
        {"::/129", "prefix length 129 is more than 128"},
        {"10.0.0.0/", "must be a number"},
        {"10.0.0.0/x", "must be a number"},
        {"10.0.0.0/-1", "must be a number"},
        {"10.0.0.0/0008", "must be a number"},
        {"10.0.0.0/8/8", "must be a number"},
        {"", "is not an address"},
        {"/8", "is not an address"},
        {"10.0.0", "not an IPv4 or IPv6 address"},
        {"10.0.0.256", "not an IPv4 or IPv6 address"},
        {"010.0.0.1", "not an IPv4 or IPv6 address"},
        {"localhost", "\"localhost\" is not an IPv4"},
        {"fe80::1%eth0", "not an IPv4 or IPv6 address"},
        {" 10.0.0.1", "not an IPv4 or IPv6 address"},
        {"1:2:3:4:5:6:7:8:9", "not an IPv4 or IPv6 address"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "is not an address"},
    };
    ratel__cidr_t c;
    char err[256];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint8_t want[16] = {0};
        memset(&c, 0xa5, sizeof c);
        err[0] = '\0';
        CHECK_EQ(ratel__cidr_parse(good[i].text, &c, err, sizeof err), 0);
        CHECK_EQ(c.family, good[i].family);
        CHECK_EQ(c.bits, good[i].bits);
        inet_pton(good[i].family, good[i].addr, want);
        CHECK(memcmp(c.addr, want, 16) == 0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK_EQ(ratel__cidr_parse(bad[i].text, &c, err, sizeof err), -1);
        if (!strstr(err, bad[i].phrase)) {
            char m[400];
            snprintf(m, sizeof m, "%s: got \"%s\"", bad[i].text, err);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
    CHECK_EQ(ratel__cidr_parse(NULL, &c, err, sizeof err), -1);
    CHECK_EQ(ratel__cidr_parse("10.0.0.0/8", &c, NULL, 0), 0);
    CHECK_EQ(ratel__cidr_parse("10.0.0.1/8", &c, NULL, 0), -1);
}

/* The envoy: section: its defaults and fields; only it, no policies. */
TEST(config_envoy_section)
{
    rateld_config_t *c = parse_ok("envoy:\n  listen: 127.0.0.1:8081\n"
                                  "  config_dir: erl\n");
    REQUIRE(c);
    CHECK(strcmp(c->envoy.listen, "127.0.0.1:8081") == 0);
    CHECK(strcmp(c->envoy.config_dir, "erl") == 0);
    CHECK(strcmp(c->envoy.algorithm, "sliding") == 0);
    CHECK_EQ(c->envoy.unknown_domain_allow, 0);
    CHECK_EQ(c->envoy.response_headers, 1);
    CHECK_EQ(c->envoy.merge_domain_config, 0); /* off, as in ERL */
    CHECK_EQ(c->envoy.limits.max_streams, 0);  /* grpc.h's default */
    CHECK_EQ(c->npolicies, 0);
    CHECK(c->erl == NULL); /* parse only: the directory is not read */
    rateld_config_free(c);
    c = parse_ok(P "envoy:\n  listen: :9\n  config_dir: /x\n"
                   "  algorithm: fixed\n  unknown_domain: allow\n"
                   "  response_headers: false\n  max_message_bytes: 4KiB\n"
                   "  max_streams: 7\n  max_header_list_bytes: 2KiB\n"
                   "  idle_timeout_ms: 1000\n  max_resets_per_second: 5\n"
                   "  merge_domain_config: true\n");
    REQUIRE(c);
    CHECK(strcmp(c->envoy.algorithm, "fixed") == 0);
    CHECK_EQ(c->envoy.merge_domain_config, 1);
    CHECK_EQ(c->envoy.unknown_domain_allow, 1);
    CHECK_EQ(c->envoy.response_headers, 0);
    CHECK_EQ(c->envoy.limits.max_message_bytes, 4096);
    CHECK_EQ(c->envoy.limits.max_streams, 7);
    CHECK_EQ(c->envoy.limits.max_header_list_bytes, 2048);
    CHECK_EQ(c->envoy.limits.idle_timeout_ms, 1000);
    CHECK_EQ(c->envoy.limits.max_resets_per_second, 5);
    rateld_config_free(c);
}

/* auth.gateway: unset by default, a named gateway, or header names. */
TEST(config_auth_gateway)
{
    static const char *const named[] = {"nginx", "haproxy", "caddy", "traefik",
                                        "envoy"};
    rateld_config_t *c = parse_ok(P);
    char text[256];

    REQUIRE(c);
    CHECK_EQ(c->auth.gateway.kind, RATELD_GATEWAY_ANY);
    CHECK(c->auth.gateway.name[0] == '\0');
    rateld_config_free(c);
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        snprintf(text, sizeof text,
                 P "auth:\n  deny_status: 403\n  gateway: %s\n", named[i]);
        c = parse_ok(text);
        REQUIRE(c);
        CHECK(strcmp(c->auth.gateway.name, named[i]) == 0);
        CHECK_EQ(c->auth.deny_status, 403);
        CHECK_EQ(c->auth.gateway.kind,
                 i == 4 ? RATELD_GATEWAY_PATH : RATELD_GATEWAY_HEADERS);
        rateld_config_free(c);
    }
    c = parse_ok(P "auth:\n  gateway: caddy\n");
    REQUIRE(c);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_METHOD],
                 "X-Forwarded-Method") == 0);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_URI],
                 "X-Forwarded-Uri") == 0);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_HOST],
                 "X-Forwarded-Host") == 0);
    rateld_config_free(c);
    c = parse_ok(P "auth:\n  gateway:\n    host: X-Site\n"
                   "    method: X-Verb\n    uri: X-Path\n");
    REQUIRE(c);
    CHECK_EQ(c->auth.gateway.kind, RATELD_GATEWAY_HEADERS);
    CHECK(strcmp(c->auth.gateway.name, "headers") == 0);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_METHOD], "X-Verb") == 0);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_URI], "X-Path") == 0);
    CHECK(strcmp(c->auth.gateway.header[RATELD_ORIGIN_HOST], "X-Site") == 0);
    rateld_config_free(c);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        ratel_test_fail(__FILE__, __LINE__, path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* rateld_config_load reads envoy.config_dir relative to the file, and a
   mistake in an envoyproxy/ratelimit file names that file and line. */
TEST(config_envoy_loads_the_directory)
{
    char dir[] = "/tmp/ratel-config-XXXXXX", path[256], erl[256], err[600];
    rateld_config_t *c = NULL;

    REQUIRE(mkdtemp(dir));
    snprintf(erl, sizeof erl, "%s/erl", dir);
    REQUIRE(mkdir(erl, 0700) == 0);
    snprintf(path, sizeof path, "%s/erl/a.yaml", dir);
    write_file(path, "domain: a\ndescriptors:\n  - key: k\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 3}\n");
    snprintf(path, sizeof path, "%s/rateld.yaml", dir);
    write_file(path, "envoy:\n  listen: :1\n  config_dir: erl\n");
    CHECK_EQ(rateld_config_load(path, &c, err, sizeof err), 0);
    REQUIRE(c && c->erl);
    CHECK(rateld_erl_count(c->erl) == 1);
    CHECK(rateld_erl_has_domain(c->erl, "a", 1));
    rateld_config_free(c);
    snprintf(path, sizeof path, "%s/erl/a.yaml", dir);
    write_file(path, "domain: a\ndescriptors:\n  - key: k\n"
                     "    rate_limit: {unit: fortnight, requests_per_unit: 3}"
                     "\n");
    snprintf(path, sizeof path, "%s/rateld.yaml", dir);
    CHECK_EQ(rateld_config_load(path, &c, err, sizeof err), -1);
    CHECK(c == NULL);
    CHECK(strstr(err, "erl/a.yaml:4") != NULL);
    CHECK(strstr(err, "fortnight") != NULL);
    snprintf(path, sizeof path, "%s/erl/a.yaml", dir);
    unlink(path);
    rmdir(erl);
    snprintf(path, sizeof path, "%s/rateld.yaml", dir);
    CHECK_EQ(rateld_config_load(path, &c, err, sizeof err), -1);
    CHECK(strstr(err, "erl") != NULL);
    unlink(path);
    rmdir(dir);
}

RATEL_SUITE(config) = {
    {"config_envoy_section", test_config_envoy_section},
    {"config_envoy_loads_the_directory", test_config_envoy_loads_the_directory},
    {"config_example_file", test_config_example_file},
    {"config_defaults", test_config_defaults},
    {"config_server_fields", test_config_server_fields},
    {"config_store_fields", test_config_store_fields},
    {"config_policy_fields", test_config_policy_fields},
    {"config_bad_files_name_line_and_field",
     test_config_bad_files_name_line_and_field},
    {"config_size_and_file_limits", test_config_size_and_file_limits},
    {"config_route_matching", test_config_route_matching},
    {"config_cidr_parse", test_config_cidr_parse},
    {"config_auth_gateway", test_config_auth_gateway},
    {0, 0},
};
