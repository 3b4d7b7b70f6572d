/*
 * test_erl.c - envoyproxy/ratelimit configuration files (rateld/erl.h):
 * the README's examples loaded and matched, wildcards, replaces, every
 * validation error with its line and message, ratel's extension fields,
 * the bounds, and a configuration directory on disk.
 */
#include "erl_helpers.h"
#include "rateld/erl.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* One file loaded and finished with `algorithm`; NULL (and a failure). */
static rateld_erl_t *load_with(const char *algorithm, const char *text)
{
    rateld_erl_t *erl = rateld_erl_new(algorithm);
    char err[512] = "";

    if (!erl) {
        ratel_test_fail(__FILE__, __LINE__, "rateld_erl_new");
        return NULL;
    }
    if (rateld_erl_parse(erl, text, strlen(text), "t.yaml", err, sizeof err) ||
        rateld_erl_finish(erl, err, sizeof err)) {
        ratel_test_fail(__FILE__, __LINE__, err);
        rateld_erl_free(erl);
        return NULL;
    }
    return erl;
}

static rateld_erl_t *load(const char *text)
{
    return load_with("sliding", text);
}

/* The message for a file that must be refused ("" when it loads). */
static const char *refuse_with(const char *algorithm, const char *text,
                               char *err, size_t errlen)
{
    rateld_erl_t *erl = rateld_erl_new(algorithm);
    size_t before;

    err[0] = '\0';
    if (!erl)
        return err;
    before = rateld_erl_count(erl);
    if (rateld_erl_parse(erl, text, strlen(text), "t.yaml", err, errlen) == 0)
        err[0] = '\0';
    else if (rateld_erl_count(erl) != before ||
             rateld_erl_domain_count(erl) != 0)
        ratel_test_fail(__FILE__, __LINE__, "a refused file left limits");
    rateld_erl_free(erl);
    return err;
}

static const char *refuse(const char *text, char *err, size_t errlen)
{
    return refuse_with("sliding", text, err, errlen);
}

/* A rule's limit, period and algorithm. */
static int rule_is(const ratel_rule_t *r, uint32_t limit, uint32_t period_ms,
                   ratel_algo_t algo)
{
    return r->limit == limit && r->period_ms == period_ms && r->algo == algo;
}

/* README example 1: two values of one key. */
TEST(erl_readme_values)
{
    const rateld_erl_limit_t *users, *dflt;
    rateld_erl_t *erl = load("domain: mongo_cps\n"
                             "descriptors:\n"
                             "  - key: database\n"
                             "    value: users\n"
                             "    rate_limit:\n"
                             "      unit: second\n"
                             "      requests_per_unit: 500\n"
                             "\n"
                             "  - key: database\n"
                             "    value: default\n"
                             "    rate_limit:\n"
                             "      unit: second\n"
                             "      requests_per_unit: 500\n");
    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_count(erl), 2);
    CHECK_EQ(rateld_erl_domain_count(erl), 1);
    CHECK(rateld_erl_has_domain(erl, "mongo_cps", 9));
    CHECK(!rateld_erl_has_domain(erl, "mongo", 5));
    users = match(erl, "mongo_cps", D("database", "users"));
    dflt = match(erl, "mongo_cps", D("database", "default"));
    REQUIRE(users != NULL && dflt != NULL);
    CHECK(users != dflt);
    CHECK(strcmp(users->key_path, "database_users") == 0);
    CHECK(strcmp(dflt->key_path, "database_default") == 0);
    CHECK(strcmp(users->domain, "mongo_cps") == 0);
    CHECK(strcmp(users->file, "t.yaml") == 0);
    CHECK_EQ(users->line, 5);
    CHECK_EQ(users->unit, 1);
    CHECK_EQ(users->requests_per_unit, 500);
    REQUIRE(users->policy.nrules == 1);
    CHECK(rule_is(&users->policy.rules[0], 500, 1000, RATEL_ALGO_SLIDING));
    CHECK(!users->unlimited && !users->shadow && !users->deny_all);
    CHECK_EQ(users->depth, 1);
    CHECK(users->levels[0].shared == NULL);
    CHECK(users->index != dflt->index && users->index < 2 && dflt->index < 2);
    CHECK(rateld_erl_limit(erl, users->index) == users);
    CHECK(rateld_erl_limit(erl, 2) == NULL);
    CHECK(match(erl, "mongo_cps", D("database", "other")) == NULL);
    CHECK(match(erl, "other", D("database", "users")) == NULL);
    CHECK(match(erl, "mongo_cps", D("Database", "users")) == NULL);
    rateld_erl_free(erl);
}

/* README example 2: nested descriptors and a key without value. */
TEST(erl_readme_nested)
{
    const rateld_erl_limit_t *five, *hundred;
    rateld_erl_t *erl = load("domain: messaging\n"
                             "descriptors:\n"
                             "  # Only allow 5 marketing messages a day\n"
                             "  - key: message_type\n"
                             "    value: marketing\n"
                             "    descriptors:\n"
                             "      - key: to_number\n"
                             "        rate_limit:\n"
                             "          unit: day\n"
                             "          requests_per_unit: 5\n"
                             "  - key: to_number\n"
                             "    rate_limit:\n"
                             "      unit: day\n"
                             "      requests_per_unit: 100\n");
    REQUIRE(erl != NULL);
    five = match(erl, "messaging",
                 D("message_type", "marketing", "to_number", "2061111111"));
    REQUIRE(five != NULL);
    CHECK_EQ(five->requests_per_unit, 5);
    CHECK_EQ(five->unit, 4);
    CHECK(rule_is(&five->policy.rules[0], 5, 86400000, RATEL_ALGO_SLIDING));
    CHECK(strcmp(five->key_path, "message_type_marketing.to_number") == 0);
    CHECK_EQ(five->depth, 2);
    /* Any value of to_number lands on the same limit; the caller keys its
       counter by the request's values, so each number counts alone. */
    CHECK(match(erl, "messaging",
                D("message_type", "marketing", "to_number", "2062222222")) ==
          five);
    hundred = match(erl, "messaging", D("to_number", "2061111111"));
    REQUIRE(hundred != NULL);
    CHECK_EQ(hundred->requests_per_unit, 100);
    CHECK(strcmp(hundred->key_path, "to_number") == 0);
    /* The placeholder level has no limit of its own. */
    CHECK(match(erl, "messaging", D("message_type", "marketing")) == NULL);
    CHECK(match(erl, "messaging",
                D("message_type", "transactional", "to_number", "1")) == NULL);
    rateld_erl_free(erl);
}

/* README examples 3 and 4: key and value before key; depth must match. */
TEST(erl_readme_order_and_depth)
{
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl = load("domain: edge_proxy_per_ip\n"
                             "descriptors:\n"
                             "  - key: remote_address\n"
                             "    rate_limit:\n"
                             "      unit: second\n"
                             "      requests_per_unit: 10\n"
                             "  # Black list IP\n"
                             "  - key: remote_address\n"
                             "    value: 50.0.0.5\n"
                             "    rate_limit:\n"
                             "      unit: second\n"
                             "      requests_per_unit: 0\n");
    REQUIRE(erl != NULL);
    l = match(erl, "edge_proxy_per_ip", D("remote_address", "50.0.0.5"));
    REQUIRE(l != NULL);
    CHECK(l->deny_all);
    CHECK_EQ(l->requests_per_unit, 0);
    CHECK_EQ(l->policy.nrules, 0);
    l = match(erl, "edge_proxy_per_ip", D("remote_address", "50.0.0.1"));
    REQUIRE(l != NULL);
    CHECK(!l->deny_all);
    CHECK_EQ(l->requests_per_unit, 10);
    rateld_erl_free(erl);

    erl = load("domain: example4\n"
               "descriptors:\n"
               "  - key: key\n"
               "    value: value\n"
               "    rate_limit: {requests_per_unit: 300, unit: second}\n");
    REQUIRE(erl != NULL);
    CHECK(match(erl, "example4", D("key", "value", "subkey", "subvalue")) ==
          NULL);
    CHECK(match(erl, "example4", D("key", "value")) != NULL);
    rateld_erl_free(erl);
    erl = load("domain: example4\n"
               "descriptors:\n"
               "  - key: key\n"
               "    value: value\n"
               "    descriptors:\n"
               "      - key: subkey\n"
               "        rate_limit: {requests_per_unit: 300, unit: second}\n");
    REQUIRE(erl != NULL);
    l = match(erl, "example4", D("key", "value", "subkey", "subvalue"));
    REQUIRE(l != NULL);
    CHECK_EQ(l->requests_per_unit, 300);
    CHECK(match(erl, "example4", D("key", "value")) == NULL);
    CHECK(match(erl, "example4",
                D("key", "value", "subkey", "s", "more", "x")) == NULL);
    rateld_erl_free(erl);
}

/* README examples 5, 6 and 8, and quota_mode. */
TEST(erl_readme_flags)
{
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl = load("domain: internal\n"
                             "descriptors:\n"
                             "  - key: ldap\n"
                             "    rate_limit:\n"
                             "      unlimited: true\n"
                             "  - key: azure\n"
                             "    quota_mode: true\n"
                             "    rate_limit:\n"
                             "      unit: minute\n"
                             "      requests_per_unit: 100\n"
                             "  - key: service\n"
                             "    descriptors:\n"
                             "      - key: user\n"
                             "        value: user-a\n"
                             "        rate_limit:\n"
                             "          requests_per_unit: 10\n"
                             "          unit: second\n"
                             "        shadow_mode: true\n"
                             "      - key: user\n"
                             "        value: user-b\n"
                             "        rate_limit:\n"
                             "          requests_per_unit: 20\n"
                             "          unit: second\n"
                             "  - key: key1\n"
                             "    detailed_metric: yes\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 10}\n");
    REQUIRE(erl != NULL);
    l = match(erl, "internal", D("ldap", "x"));
    REQUIRE(l != NULL);
    CHECK(l->unlimited);
    CHECK_EQ(l->unit, 0);
    l = match(erl, "internal", D("azure", "x"));
    REQUIRE(l != NULL);
    CHECK(!l->unlimited && l->quota && !l->shadow);
    CHECK_EQ(l->unit, 2);
    l = match(erl, "internal", D("service", "auth", "user", "user-a"));
    REQUIRE(l != NULL);
    CHECK(l->shadow && !l->quota);
    l = match(erl, "internal", D("service", "auth", "user", "user-b"));
    REQUIRE(l != NULL);
    CHECK(!l->shadow);
    CHECK(match(erl, "internal", D("service", "auth", "user", "user-c")) ==
          NULL);
    l = match(erl, "internal", D("key1", "unspecified_value"));
    REQUIRE(l != NULL);
    CHECK(l->detailed_metric);
    CHECK(strcmp(l->key_path, "key1") == 0);
    rateld_erl_free(erl);
}

/* README example 7, and ERL's rules for what replaces drops. */
TEST(erl_readme_replaces)
{
    const rateld_erl_limit_t *specific, *wider, *list[4];
    rateld_erl_t *erl = load("domain: example7\n"
                             "descriptors:\n"
                             "  - key: key_1\n"
                             "    value: value_1\n"
                             "    descriptors:\n"
                             "      - key: user\n"
                             "        value: bkthomps\n"
                             "        rate_limit:\n"
                             "          name: specific_limit\n"
                             "          requests_per_unit: 5\n"
                             "          unit: second\n"
                             "  - key: key_2\n"
                             "    value: value_2\n"
                             "    descriptors:\n"
                             "      - key: user\n"
                             "        value: bkthomps\n"
                             "        rate_limit:\n"
                             "          replaces:\n"
                             "            - name: specific_limit\n"
                             "          requests_per_unit: 10\n"
                             "          unit: second\n");
    REQUIRE(erl != NULL);
    specific =
        match(erl, "example7", D("key_1", "value_1", "user", "bkthomps"));
    wider = match(erl, "example7", D("key_2", "value_2", "user", "bkthomps"));
    REQUIRE(specific != NULL && wider != NULL);
    CHECK(strcmp(specific->name, "specific_limit") == 0);
    CHECK_EQ(specific->nreplaces, 0);
    CHECK(wider->name[0] == '\0');
    REQUIRE(wider->nreplaces == 1);
    CHECK(strcmp(wider->replaces[0], "specific_limit") == 0);
    /* Both matched: the named one is dropped. */
    list[0] = specific;
    list[1] = wider;
    list[2] = NULL;
    rateld_erl_apply_replaces(list, 3);
    CHECK(list[0] == NULL && list[1] == wider && list[2] == NULL);
    /* Alone, it stays. */
    list[0] = specific;
    rateld_erl_apply_replaces(list, 1);
    CHECK(list[0] == specific);
    rateld_erl_free(erl);
}

/* Replaces: a dropped limit's own replaces still count; unlimited stays. */
TEST(erl_replaces_rules)
{
    const rateld_erl_limit_t *a, *b, *c, *u, *list[4];
    rateld_erl_t *erl = load("domain: d\n"
                             "descriptors:\n"
                             "  - key: a\n"
                             "    rate_limit: {name: A, unit: second, "
                             "requests_per_unit: 1, replaces: [{name: B}]}\n"
                             "  - key: b\n"
                             "    rate_limit: {name: B, unit: second, "
                             "requests_per_unit: 1, replaces: [{name: C}]}\n"
                             "  - key: c\n"
                             "    rate_limit: {name: C, unit: second, "
                             "requests_per_unit: 1}\n"
                             "  - key: u\n"
                             "    rate_limit: {name: C, unlimited: true}\n");
    REQUIRE(erl != NULL);
    a = match(erl, "d", D("a", "1"));
    b = match(erl, "d", D("b", "1"));
    c = match(erl, "d", D("c", "1"));
    u = match(erl, "d", D("u", "1"));
    REQUIRE(a && b && c && u);
    list[0] = b;
    list[1] = c;
    list[2] = a;
    list[3] = u;
    rateld_erl_apply_replaces(list, 4);
    /* B is dropped by A, C by B although B itself is dropped (before C is
       judged), and the unlimited limit named C is still unlimited. */
    CHECK(list[0] == NULL);
    CHECK(list[1] == NULL);
    CHECK(list[2] == a);
    CHECK(list[3] == u);
    rateld_erl_free(erl);
}

/* README example 9 and the order ERL tries: exact, wildcard, key only. */
TEST(erl_wildcards)
{
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl = load("domain: example9\n"
                             "descriptors:\n"
                             "  - key: key1\n"
                             "    value: value*\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 20}\n"
                             "  - key: path\n"
                             "    value: /api/*/action\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 21}\n"
                             "  - key: route\n"
                             "    value: /api/*/resource/*/action\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 22}\n"
                             "  - key: k\n"
                             "    value: ab*\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 1}\n"
                             "  - key: k\n"
                             "    value: a*\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 2}\n"
                             "  - key: k\n"
                             "    value: abc\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 3}\n"
                             "  - key: k\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 4}\n"
                             "  - key: any\n"
                             "    value: '*'\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 5}\n"
                             "  - key: ends\n"
                             "    value: '*.pdf'\n"
                             "    rate_limit: {unit: minute, "
                             "requests_per_unit: 6}\n");
    REQUIRE(erl != NULL);
#define RPU(...)                                                               \
    ((l = match(erl, "example9", D(__VA_ARGS__))) ? (long)l->requests_per_unit \
                                                  : -1L)
    CHECK_EQ(RPU("key1", "value1"), 20);
    CHECK_EQ(RPU("key1", "valueXYZ"), 20);
    CHECK_EQ(RPU("key1", "value"), 20);
    CHECK_EQ(RPU("key1", "valu"), -1);
    CHECK_EQ(RPU("path", "/api/123/action"), 21);
    CHECK_EQ(RPU("path", "/api//action"), 21);
    CHECK_EQ(RPU("path", "/api/123/other"), -1);
    CHECK_EQ(RPU("path", "/api/action"), -1);
    CHECK_EQ(RPU("route", "/api/v1/resource/123/action"), 22);
    CHECK_EQ(RPU("route", "/api/v1/resource/action"), -1);
    CHECK_EQ(RPU("route", "/api/resource/x/resource/1/action"), 22);
    /* Exact first, then the wildcards in file order, then the key. */
    CHECK_EQ(RPU("k", "abc"), 3);
    CHECK_EQ(RPU("k", "abd"), 1);
    CHECK_EQ(RPU("k", "axe"), 2);
    CHECK_EQ(RPU("k", "xyz"), 4);
    CHECK_EQ(RPU("k", ""), 4);
    /* A value written with '*' is also matched as it is. */
    CHECK_EQ(RPU("k", "a*"), 2);
    CHECK_EQ(RPU("any", ""), 5);
    CHECK_EQ(RPU("any", "anything"), 5);
    CHECK_EQ(RPU("ends", "a.pdf"), 6);
    CHECK_EQ(RPU("ends", ".pdf"), 6);
    CHECK_EQ(RPU("ends", "a.pdf.exe"), -1);
    /* Keys are plain: no wildcard in a key, no "key_value" joining. */
    CHECK_EQ(RPU("key1*", "value1"), -1);
#undef RPU
    rateld_erl_free(erl);
}

/* share_threshold and value_to_metric reach the limit's levels. */
TEST(erl_share_threshold)
{
    const rateld_erl_limit_t *l;
    char err[512];
    rateld_erl_t *erl = load("domain: example11\n"
                             "descriptors:\n"
                             "  - key: files\n"
                             "    value: files/*\n"
                             "    share_threshold: true\n"
                             "    rate_limit: {unit: hour, "
                             "requests_per_unit: 10}\n"
                             "  - key: route\n"
                             "    value: api/*\n"
                             "    share_threshold: true\n"
                             "    value_to_metric: true\n"
                             "    descriptors:\n"
                             "      - key: method\n"
                             "        value_to_metric: true\n"
                             "        rate_limit: {unit: minute, "
                             "requests_per_unit: 60}\n");
    REQUIRE(erl != NULL);
    l = match(erl, "example11", D("files", "files/a.pdf"));
    REQUIRE(l != NULL);
    CHECK(l == match(erl, "example11", D("files", "files/b.csv")));
    REQUIRE(l->depth == 1 && l->levels[0].shared != NULL);
    CHECK(strcmp(l->levels[0].shared, "files/*") == 0);
    CHECK(!l->levels[0].value_to_metric);
    l = match(erl, "example11", D("route", "api/v1", "method", "GET"));
    REQUIRE(l != NULL && l->depth == 2);
    CHECK(l->levels[0].shared && strcmp(l->levels[0].shared, "api/*") == 0);
    CHECK(l->levels[0].value_to_metric);
    CHECK(l->levels[1].shared == NULL && l->levels[1].value_to_metric);
    CHECK(strcmp(l->key_path, "route_api/*.method") == 0);
    rateld_erl_free(erl);

    CHECK(strstr(refuse("domain: d\n"
                        "descriptors:\n"
                        "  - key: files\n"
                        "    value: files\n"
                        "    share_threshold: true\n",
                        err, sizeof err),
                 "t.yaml:5: descriptors[0].share_threshold: share_threshold "
                 "is for a wildcard value") == err);
}

/* ERL's units, per algorithm, as rules of the core's grammar. */
TEST(erl_units)
{
    static const struct {
        const char *unit, *algorithm;
        int number;
        uint32_t period_ms, months;
    } cases[] = {
        {"second", "sliding", 1, 1000, 0},
        {"Minute", "sliding", 2, 60000, 0},
        {"HOUR", "gcra", 3, 3600000, 0},
        {"day", "fixed", 4, 86400000, 0},
        {"week", "sliding", 7, 604800000, 0},
        {"week", "fixed", 7, 604800000, 0},
        {"month", "sliding", 5, 2592000000u, 0},
        {"month", "gcra", 5, 2592000000u, 0},
        {"month", "fixed", 5, 0, 1},
        {"month", "approx", 5, 0, 1},
        {"year", "fixed", 6, 0, 12},
        {"year", "approx", 6, 0, 12},
    };
    char text[256], err[512];

    for (size_t i = 0; i < COUNT(cases); i++) {
        const rateld_erl_limit_t *l;
        rateld_erl_t *erl;
        snprintf(text, sizeof text,
                 "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "
                 "{unit: %s, requests_per_unit: 7}\n",
                 cases[i].unit);
        erl = load_with(cases[i].algorithm, text);
        REQUIRE(erl != NULL);
        l = match(erl, "d", D("k", "v"));
        REQUIRE(l != NULL && l->policy.nrules == 1);
        CHECK_EQ(l->unit, cases[i].number);
        CHECK_EQ(l->policy.rules[0].period_ms, cases[i].period_ms);
        CHECK_EQ(l->policy.rules[0].months, cases[i].months);
        CHECK_EQ(l->policy.rules[0].limit, 7);
        CHECK(strcmp(ratel_algo_name(l->policy.rules[0].algo),
                     cases[i].algorithm) == 0);
        CHECK_EQ(rateld_erl_rule_unit(&l->policy.rules[0]), cases[i].number);
        rateld_erl_free(erl);
    }
    /* A fixed week is a calendar week (Monday), not ERL's epoch weeks. */
    CHECK(strstr(refuse("domain: d\ndescriptors:\n  - key: k\n"
                        "    rate_limit:\n      unit: year\n"
                        "      requests_per_unit: 1\n",
                        err, sizeof err),
                 "t.yaml:5: descriptors[0].rate_limit.unit: a year is longer "
                 "than the 30 days a sliding period may last; write "
                 "algorithm: fixed") == err);
    CHECK(strstr(refuse_with("gcra",
                             "domain: d\ndescriptors:\n  - key: k\n"
                             "    rate_limit: {unit: year, "
                             "requests_per_unit: 1}\n",
                             err, sizeof err),
                 "a gcra period") != NULL);
    /* The same file loads when the limit says fixed. */
    CHECK(strcmp(refuse("domain: d\ndescriptors:\n  - key: k\n"
                        "    rate_limit: {unit: year, requests_per_unit: 1, "
                        "algorithm: fixed}\n",
                        err, sizeof err),
                 "") == 0);
}

/* ratel's fields inside rate_limit: algorithm, burst, rules. */
TEST(erl_extensions)
{
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl =
        load_with("fixed", "domain: d\n"
                           "descriptors:\n"
                           "  - key: plain\n"
                           "    rate_limit: {unit: minute, "
                           "requests_per_unit: 20}\n"
                           "  - key: bucket\n"
                           "    rate_limit: {unit: second, "
                           "requests_per_unit: 100, algorithm: gcra, "
                           "burst: 200}\n"
                           "  - key: several\n"
                           "    rate_limit:\n"
                           "      rules: ['20/m', '1000/d:fixed']\n"
                           "  - key: odd\n"
                           "    rate_limit: {rules: ['7/10s']}\n");
    REQUIRE(erl != NULL);
    l = match(erl, "d", D("plain", "x"));
    REQUIRE(l != NULL);
    CHECK(rule_is(&l->policy.rules[0], 20, 60000, RATEL_ALGO_FIXED));
    l = match(erl, "d", D("bucket", "x"));
    REQUIRE(l != NULL);
    CHECK(rule_is(&l->policy.rules[0], 100, 1000, RATEL_ALGO_GCRA));
    CHECK_EQ(l->policy.rules[0].burst, 200);
    l = match(erl, "d", D("several", "x"));
    REQUIRE(l != NULL && l->policy.nrules == 2);
    /* A rule without :ALGO is sliding, as everywhere in ratel. */
    CHECK(rule_is(&l->policy.rules[0], 20, 60000, RATEL_ALGO_SLIDING));
    CHECK(rule_is(&l->policy.rules[1], 1000, 86400000, RATEL_ALGO_FIXED));
    CHECK_EQ(l->requests_per_unit, 20);
    CHECK_EQ(l->unit, 2);
    l = match(erl, "d", D("odd", "x"));
    REQUIRE(l != NULL);
    CHECK_EQ(l->requests_per_unit, 7);
    CHECK_EQ(l->unit, 0);
    rateld_erl_free(erl);
    CHECK(rateld_erl_new("concurrent") == NULL);
    CHECK(!rateld_erl_algorithm_ok("lru"));
    CHECK(rateld_erl_algorithm_ok(NULL) && rateld_erl_algorithm_ok("approx"));
}

/* A bad file: its text, the line and the start of the message after it. */
typedef struct bad_s {
    const char *text;
    const char *message; /* "t.yaml:LINE: ..." prefix */
} bad_t;

#define TOP "domain: d\ndescriptors:\n"
#define RL(x) TOP "  - key: k\n    rate_limit: {" x "}\n"

static const bad_t bad_files[] = {
    {"", "t.yaml:1: domain: missing; every file names its domain"},
    {"# only a comment\n", "t.yaml:1: domain: missing"},
    {"descriptors:\n", "t.yaml:1: domain: missing or empty"},
    {"domain: ''\n", "t.yaml:1: domain: missing or empty; every file names "
                     "its domain (envoyproxy/ratelimit: config file cannot "
                     "have empty domain)"},
    {"domain: [a]\n", "t.yaml:1: domain: expected a string"},
    {"- a\n", "t.yaml:1: expected a mapping of fields (domain, descriptors) "
              "at the top of the file, got a list"},
    {"domain: d\nratelimit: x\n",
     "t.yaml:2: ratelimit: unknown field; accepted: domain, descriptors"},
    {"0.25: test-domain\n", "t.yaml:1: 0.25: unknown field"},
    {"domain: d\nkey: k\n",
     "t.yaml:2: key: not read here; envoyproxy/ratelimit reads key only in "
     "a descriptor and ignores it elsewhere"},
    {TOP "  - a\n  - b\n",
     "t.yaml:3: descriptors[0]: expected a mapping of fields (key, value"},
    {"domain: d\ndescriptors: x\n",
     "t.yaml:2: descriptors: expected a list of descriptors"},
    {TOP "  - value: value1\n",
     "t.yaml:3: descriptors[0].key: missing or empty; every descriptor has a "
     "key (envoyproxy/ratelimit: descriptor has empty key)"},
    {TOP "  - key: ''\n", "t.yaml:3: descriptors[0].key: missing or empty"},
    {TOP "  - key: key1\n    value: value1\n\n  - key: key1\n"
         "    value: value1\n",
     "t.yaml:6: descriptors[1]: key \"key1\" value \"value1\" is already in "
     "this list at line 3 (envoyproxy/ratelimit: duplicate descriptor "
     "composite key)"},
    {TOP "  - key: a\n  - key: b\n  - key: a\n    value: ''\n",
     "t.yaml:5: descriptors[2]: key \"a\" without value is already in this "
     "list at line 3"},
    {TOP "  - key: key1\n    ratelimit:\n      unit: day\n",
     "t.yaml:4: descriptors[0].ratelimit: unknown field; accepted: key, "
     "value, rate_limit"},
    {TOP "  - key: k\n    rate_limit:\n      unit: day\n"
         "      requestsperunit: 5\n",
     "t.yaml:6: descriptors[0].rate_limit.requestsperunit: unknown field"},
    {TOP "  - key: k\n    rate_limit:\n      shadow_mode: true\n",
     "t.yaml:5: descriptors[0].rate_limit.shadow_mode: not read here; "
     "envoyproxy/ratelimit reads shadow_mode only in a descriptor, beside "
     "rate_limit"},
    {TOP "  - key: k\n    name: n\n",
     "t.yaml:4: descriptors[0].name: not read here; envoyproxy/ratelimit "
     "reads name only inside rate_limit or in an entry of its replaces"},
    {RL("unit: foo, requests_per_unit: 5"),
     "t.yaml:4: descriptors[0].rate_limit.unit: expected second, minute, "
     "hour, day, week, month or year, got \"foo\" (envoyproxy/ratelimit: "
     "invalid rate limit unit)"},
    {RL("unit: unknown, requests_per_unit: 5"), "t.yaml:4: descriptors[0]."
                                                "rate_limit.unit: expected"},
    {RL("requests_per_unit: 5"),
     "t.yaml:4: descriptors[0].rate_limit.unit: missing"},
    {RL("unit: second"),
     "t.yaml:4: descriptors[0].rate_limit.requests_per_unit: missing; "
     "envoyproxy/ratelimit reads a missing one as 0, which denies every "
     "request: write requests_per_unit: 0"},
    {RL("unit: second, requests_per_unit: -1"),
     "t.yaml:4: descriptors[0].rate_limit.requests_per_unit: expected a "
     "whole number from 0 to 4294967295, got \"-1\""},
    {RL("unit: second, requests_per_unit: 4294967296"),
     "t.yaml:4: descriptors[0].rate_limit.requests_per_unit: expected a "
     "whole number"},
    {RL("unit: second, requests_per_unit: '5'"),
     "t.yaml:4: descriptors[0].rate_limit.requests_per_unit: expected a "
     "number, got the string \"5\" (write it without quotes)"},
    {RL("unit: second, requests_per_unit: 2000000000"),
     "t.yaml:4: descriptors[0].rate_limit.requests_per_unit: 2000000000 is "
     "more than the 1000000000 a ratel rule allows in one period"},
    {RL("unlimited: true, unit: day, requests_per_unit: 25"),
     "t.yaml:4: descriptors[0].rate_limit.unit: unlimited: true takes no "
     "unit (envoyproxy/ratelimit: should not specify rate limit unit when "
     "unlimited)"},
    {RL("unlimited: 'true'"),
     "t.yaml:4: descriptors[0].rate_limit.unlimited: expected true or "
     "false, got \"true\" (in quotes, a string)"},
    {RL("unlimited: maybe"), "t.yaml:4: descriptors[0].rate_limit.unlimited:"
                             " expected true or false, got \"maybe\""},
    {TOP "  - key: k\n    rate_limit:\n      name: self\n      replaces:\n"
         "        - name:\n      unit: second\n      requests_per_unit: 5\n",
     "t.yaml:7: descriptors[0].rate_limit.replaces[0].name: empty; an entry "
     "of replaces names the rate_limit it drops (envoyproxy/ratelimit: "
     "should not have an empty replaces entry)"},
    {TOP "  - key: k\n    rate_limit:\n      name: self\n      replaces:\n"
         "        - name: self\n      unit: second\n"
         "      requests_per_unit: 5\n",
     "t.yaml:7: descriptors[0].rate_limit.replaces[0].name: \"self\" is this "
     "rate_limit's own name (envoyproxy/ratelimit: replaces should not "
     "contain name of same descriptor)"},
    {RL("replaces: x, unit: second, requests_per_unit: 1"),
     "t.yaml:4: descriptors[0].rate_limit.replaces: expected a list"},
    {RL("replaces: [x], unit: second, requests_per_unit: 1"),
     "t.yaml:4: descriptors[0].rate_limit.replaces[0]: expected a mapping"},
    {RL("burst: 5, unit: second, requests_per_unit: 1"),
     "t.yaml:4: descriptors[0].rate_limit.burst: burst is the depth of a "
     "gcra bucket, and this limit's algorithm is sliding"},
    {RL("algorithm: lru, unit: second, requests_per_unit: 1"),
     "t.yaml:4: descriptors[0].rate_limit.algorithm: expected sliding, "
     "fixed, approx or gcra, got \"lru\""},
    {RL("algorithm: concurrent, unit: second, requests_per_unit: 1"),
     "t.yaml:4: descriptors[0].rate_limit.algorithm: expected sliding"},
    {RL("rules: ['1/s'], unit: second"),
     "t.yaml:4: descriptors[0].rate_limit.unit: rules replace unit, "
     "requests_per_unit, algorithm and burst"},
    {RL("rules: []"), "t.yaml:4: descriptors[0].rate_limit.rules: empty"},
    {RL("rules: ['1/1x']"),
     "t.yaml:4: descriptors[0].rate_limit.rules[0]: rule \"1/1x\": PERIOD "
     "needs a unit"},
    {RL("rules: ['5/30s:concurrent']"),
     "t.yaml:4: descriptors[0].rate_limit.rules[0]: a concurrent rule holds "
     "a lease"},
    {RL("rules: ['1/s', '1/s']"), "t.yaml:4: descriptors[0].rate_limit.rules:"},
    {RL("unlimited: true, rules: ['1/s']"),
     "t.yaml:4: descriptors[0].rate_limit.rules: unlimited: true takes no "
     "rules"},
    {TOP "  - key: k\n    metadata: x\n",
     "t.yaml:4: descriptors[0].metadata: expected a mapping, got \"x\""},
    {TOP "  - key: k\n    shadow_mode: 1\n",
     "t.yaml:4: descriptors[0].shadow_mode: expected true or false"},
    {TOP "  - key: &a k\n", "t.yaml:3: anchor &a: anchors and aliases are "
                            "not supported"},
    {TOP "  - key: \"a\\tb\"\n",
     "t.yaml:3: descriptors[0].key: contains the control character 0x09"},
    {"domain: d\n'''\n", "t.yaml:"},
};

/* Every ERL validation error, with its line and message. */
TEST(erl_validation_errors)
{
    char err[768];

    for (size_t i = 0; i < COUNT(bad_files); i++) {
        const char *got = refuse(bad_files[i].text, err, sizeof err);
        if (strncmp(got, bad_files[i].message, strlen(bad_files[i].message)) !=
            0) {
            char m[1400];
            snprintf(m, sizeof m, "bad file %zu: got \"%s\", want \"%s...\"", i,
                     got, bad_files[i].message);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

/* What ERL accepts that the strict reader might not: null, YAML 1.1
   booleans, numbers as strings, a file without descriptors. */
TEST(erl_lenient_like_erl)
{
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl = load("domain: d\n"
                             "descriptors:\n"
                             "  - key: 123\n"
                             "    value: 4.5\n"
                             "    shadow_mode: On\n"
                             "    detailed_metric:\n"
                             "    descriptors:\n"
                             "    rate_limit:\n"
                             "      unit: Day\n"
                             "      requests_per_unit: 3\n"
                             "      name: ~\n"
                             "      replaces: []\n"
                             "  - key: empty_value\n"
                             "    value: ''\n"
                             "    rate_limit: {unlimited: true, "
                             "requests_per_unit: 9}\n"
                             "  - key: nothing\n"
                             "    rate_limit:\n");
    REQUIRE(erl != NULL);
    l = match(erl, "d", D("123", "4.5"));
    REQUIRE(l != NULL);
    CHECK(l->shadow && !l->detailed_metric);
    CHECK(l->name[0] == '\0' && l->nreplaces == 0);
    l = match(erl, "d", D("empty_value", "anything"));
    REQUIRE(l != NULL);
    CHECK(l->unlimited);
    CHECK_EQ(l->requests_per_unit, 9);
    CHECK(match(erl, "d", D("nothing", "x")) == NULL);
    CHECK_EQ(rateld_erl_count(erl), 2);
    rateld_erl_free(erl);

    erl = load("domain: alone\n");
    REQUIRE(erl != NULL);
    CHECK(rateld_erl_has_domain(erl, "alone", 5));
    CHECK_EQ(rateld_erl_count(erl), 0);
    CHECK(match(erl, "alone", D("k", "v")) == NULL);
    rateld_erl_free(erl);
}

/* Several files: domains apart, a second domain refused, a failed file
   leaves the set as it was, indices run over all files. */
TEST(erl_several_files)
{
    const char *a = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: "
                    "{unit: second, requests_per_unit: 1}\n";
    const char *b = "domain: b\ndescriptors:\n  - key: k\n    rate_limit: "
                    "{unit: second, requests_per_unit: 2}\n";
    const char *bad = "domain: c\ndescriptors:\n  - key: k\n    rate_limit: "
                      "{unit: second, requests_per_unit: 3}\n  - key: j\n"
                      "    rate_limit: {unit: aeon, requests_per_unit: 1}\n";
    rateld_erl_t *erl = rateld_erl_new(NULL);
    char err[512];

    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_parse(erl, a, strlen(a), "a.yaml", err, sizeof err), 0);
    CHECK_EQ(rateld_erl_parse(erl, bad, strlen(bad), "c.yaml", err, sizeof err),
             -1);
    CHECK(strncmp(err, "c.yaml:6: descriptors[1].rate_limit.unit:", 41) == 0);
    CHECK_EQ(rateld_erl_count(erl), 1);
    CHECK(!rateld_erl_has_domain(erl, "c", 1));
    CHECK_EQ(rateld_erl_parse(erl, b, strlen(b), "b.yaml", err, sizeof err), 0);
    CHECK_EQ(rateld_erl_parse(erl, a, strlen(a), "a2.yaml", err, sizeof err),
             -1);
    CHECK(strcmp(err, "a2.yaml:1: domain: \"a\" is also the domain of a.yaml "
                      "(line 1); envoyproxy/ratelimit refuses a domain in two "
                      "files unless MERGE_DOMAIN_CONFIG is set: put its "
                      "descriptors in one file, or merge the files with "
                      "envoy: {merge_domain_config: true} in rateld's "
                      "configuration") == 0);
    CHECK_EQ(rateld_erl_finish(erl, err, sizeof err), 0);
    CHECK_EQ(rateld_erl_parse(erl, b, strlen(b), "b2.yaml", err, sizeof err),
             -1);
    CHECK(strstr(err, "finished") != NULL);
    CHECK_EQ(rateld_erl_count(erl), 2);
    CHECK_EQ(rateld_erl_domain_count(erl), 2);
    REQUIRE(match(erl, "a", D("k", "x")) && match(erl, "b", D("k", "x")));
    CHECK_EQ(match(erl, "a", D("k", "x"))->index, 0);
    CHECK_EQ(match(erl, "b", D("k", "x"))->index, 1);
    CHECK(strcmp(match(erl, "b", D("k", "x"))->file, "b.yaml") == 0);
    CHECK_EQ(match(erl, "b", D("k", "x"))->requests_per_unit, 2);
    rateld_erl_free(erl);
}

/* Appends descriptor levels nested `depth` deep with a limit at the end. */
static void nested(char *buf, size_t cap, int depth, size_t keylen)
{
    size_t q = (size_t)snprintf(buf, cap, "domain: d\ndescriptors:\n");

    for (int i = 0; i < depth && q < cap; i++) {
        q += (size_t)snprintf(buf + q, cap - q, "%*s- key: %0*d\n", 2 * i + 2,
                              "", (int)keylen, i);
        if (i + 1 < depth)
            q += (size_t)snprintf(buf + q, cap - q, "%*sdescriptors:\n",
                                  2 * i + 4, "");
    }
    snprintf(buf + q, cap - q,
             "%*srate_limit: {unit: second, requests_per_unit: 1}\n",
             2 * depth + 2, "");
}

/* Nesting, lengths and the number of limits are bounded. */
TEST(erl_bounds)
{
    static char text[1 << 16];
    char err[768], key[300], *big;
    rateld_erl_t *erl;
    size_t q = 0;

    nested(text, sizeof text, RATELD_ERL_DEPTH_MAX, 1);
    erl = load(text);
    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_count(erl), 1);
    CHECK_EQ(erl ? rateld_erl_limit(erl, 0)->depth : 0, RATELD_ERL_DEPTH_MAX);
    rateld_erl_free(erl);
    nested(text, sizeof text, RATELD_ERL_DEPTH_MAX + 1, 1);
    CHECK(strstr(refuse(text, err, sizeof err),
                 "descriptors: descriptors nested deeper than 12 levels") !=
          NULL);
    /* Keys of 45 bytes: twelve levels make a path over 511 bytes. */
    nested(text, sizeof text, RATELD_ERL_DEPTH_MAX, 45);
    CHECK(strstr(refuse(text, err, sizeof err),
                 "make a path longer than 511 bytes") != NULL);
    memset(key, 'k', 256);
    key[256] = '\0';
    snprintf(text, sizeof text, "domain: d\ndescriptors:\n  - key: %s\n", key);
    CHECK(strstr(refuse(text, err, sizeof err),
                 "t.yaml:3: descriptors[0].key: 256 bytes long; at most 255") ==
          err);
    /* More limits than the bound: files of 20,000 each (a file may hold
       200,000 YAML values), one domain each. */
    big = malloc(20000 * 64 + 64);
    REQUIRE(big != NULL);
    erl = rateld_erl_new(NULL);
    REQUIRE(erl != NULL);
    for (int f = 0; f < 6; f++) {
        int rc;
        q = (size_t)sprintf(big, "domain: d%d\ndescriptors:\n", f);
        for (int i = 0; i < 20000; i++)
            q += (size_t)sprintf(
                big + q, "- {key: %d, rate_limit: {unlimited: y}}\n", i);
        rc = rateld_erl_parse(erl, big, q, "big.yaml", err, sizeof err);
        CHECK_EQ(rc, f < 5 ? 0 : -1);
    }
    CHECK(strstr(err, "big.yaml:3: more than 100000 rate_limit blocks in the "
                      "configuration") == err);
    CHECK_EQ(rateld_erl_count(erl), RATELD_ERL_LIMITS_MAX);
    CHECK_EQ(rateld_erl_domain_count(erl), 5);
    rateld_erl_free(erl);
    free(big);
}

/* Removes the test's directory (the files it made, then the folders). */
static void remove_tree(const char *dir)
{
    static const char *const names[] = {
        "b.yaml",        "c.yaml", "sub/a.yml", "README.md", ".hidden.yaml",
        "..data/b.yaml", "sub",    "..data",    ""};
    char path[600];

    for (size_t i = 0; i < COUNT(names); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (remove(path) != 0)
            ratel_test_fail(__FILE__, __LINE__, path);
    }
}

/* A configuration directory: which files are read, in which order. */
TEST(erl_load_dir)
{
    char dir[] = "/tmp/test_erl_XXXXXX", path[600], err[768];
    const rateld_erl_limit_t *l;
    rateld_erl_t *erl = (rateld_erl_t *)1;

    REQUIRE(mkdtemp(dir) != NULL);
    /* Empty: loads, with no domain (ERL starts too). */
    CHECK_EQ(rateld_erl_load_dir(dir, "sliding", 0, &erl, err, sizeof err), 0);
    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_domain_count(erl), 0);
    rateld_erl_free(erl);
    snprintf(path, sizeof path, "%s/sub", dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/..data", dir);
    mkdir(path, 0700);
    CHECK_EQ(put_file(dir, "b.yaml",
                      "domain: b\ndescriptors:\n  - key: k\n    rate_limit: "
                      "{unit: minute, requests_per_unit: 2}\n"),
             0);
    CHECK_EQ(put_file(dir, "sub/a.yml",
                      "domain: a\ndescriptors:\n  - key: k\n    rate_limit: "
                      "{unit: minute, requests_per_unit: 1}\n"),
             0);
    CHECK_EQ(put_file(dir, "README.md", "not yaml: [\n"), 0);
    CHECK_EQ(put_file(dir, ".hidden.yaml", "not: [valid\n"), 0);
    CHECK_EQ(put_file(dir, "..data/b.yaml", "domain: b\n"), 0);
    CHECK_EQ(rateld_erl_load_dir(dir, "fixed", 0, &erl, err, sizeof err), 0);
    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_domain_count(erl), 2);
    l = match(erl, "a", D("k", "v"));
    REQUIRE(l != NULL);
    snprintf(path, sizeof path, "%s/sub/a.yml", dir);
    CHECK(strcmp(l->file, path) == 0);
    CHECK(rule_is(&l->policy.rules[0], 1, 60000, RATEL_ALGO_FIXED));
    /* "b.yaml" sorts before "sub/a.yml": b's limit comes first. */
    CHECK_EQ(l->index, 1);
    rateld_erl_free(erl);
    /* A second file of domain b, named in the message. */
    CHECK_EQ(put_file(dir, "c.yaml", "domain: b\n"), 0);
    CHECK_EQ(rateld_erl_load_dir(dir, NULL, 0, &erl, err, sizeof err), -1);
    CHECK(erl == NULL);
    snprintf(path, sizeof path,
             "%s/c.yaml:1: domain: \"b\" is also the "
             "domain of %s/b.yaml (line 1)",
             dir, dir);
    CHECK(strncmp(err, path, strlen(path)) == 0);
    CHECK_EQ(rateld_erl_load_dir(dir, "lru", 0, &erl, err, sizeof err), -1);
    CHECK(strcmp(err, "algorithm: \"lru\" is not one of sliding, fixed, "
                      "approx, gcra") == 0);
    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK_EQ(rateld_erl_load_dir(path, NULL, 0, &erl, err, sizeof err), -1);
    CHECK(strstr(err, "missing: No such file or directory") != NULL);
    remove_tree(dir);
}

RATEL_SUITE(erl) = {
    {"erl_readme_values", test_erl_readme_values},
    {"erl_readme_nested", test_erl_readme_nested},
    {"erl_readme_order_and_depth", test_erl_readme_order_and_depth},
    {"erl_readme_flags", test_erl_readme_flags},
    {"erl_readme_replaces", test_erl_readme_replaces},
    {"erl_replaces_rules", test_erl_replaces_rules},
    {"erl_wildcards", test_erl_wildcards},
    {"erl_share_threshold", test_erl_share_threshold},
    {"erl_units", test_erl_units},
    {"erl_extensions", test_erl_extensions},
    {"erl_validation_errors", test_erl_validation_errors},
    {"erl_lenient_like_erl", test_erl_lenient_like_erl},
    {"erl_several_files", test_erl_several_files},
    {"erl_bounds", test_erl_bounds},
    {"erl_load_dir", test_erl_load_dir},
    {0},
};
