/*
 * test_erl_merge.c - a domain in several envoyproxy/ratelimit files
 * (rateld/erl.h; ERL's MERGE_DOMAIN_CONFIG, rateld's envoy:
 * {merge_domain_config: true}): refused by default, joined at the top
 * level when on, a top-level descriptor in two files refused naming both,
 * nested descriptors and each side's flags and limits kept as written,
 * wildcards tried in file order, and a directory on disk.
 */
#include "erl_helpers.h"
#include "rateld/erl.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ERL's own test/config/merge_domain_key1.yaml and _key2.yaml, as data. */
static const char key1[] = "domain: test-domain\n"
                           "descriptors:\n"
                           "  - key: key1\n"
                           "    value: value1\n"
                           "    rate_limit:\n"
                           "      unit: minute\n"
                           "      requests_per_unit: 10\n";
static const char key2[] = "domain: test-domain\n"
                           "descriptors:\n"
                           "  - key: key2\n"
                           "    value: value2\n"
                           "    rate_limit:\n"
                           "      unit: minute\n"
                           "      requests_per_unit: 20\n";

/* Whether `text` starts with `prefix`. */
static int starts(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* One named file added to `erl`; its message in err. */
static int add(rateld_erl_t *erl, const char *name, const char *text, char *err,
               size_t errlen)
{
    return rateld_erl_parse(erl, text, strlen(text), name, err, errlen);
}

/* A set that merges, with the files added in order (NULL-terminated
   name, text pairs); NULL and a failure when one is refused. */
static rateld_erl_t *merged(const char *const *files)
{
    rateld_erl_t *erl = rateld_erl_new(NULL);
    char err[768];

    if (!erl)
        return NULL;
    rateld_erl_merge_domains(erl, 1);
    for (size_t i = 0; files[i]; i += 2)
        if (add(erl, files[i], files[i + 1], err, sizeof err)) {
            ratel_test_fail(__FILE__, __LINE__, err);
            rateld_erl_free(erl);
            return NULL;
        }
    if (rateld_erl_finish(erl, err, sizeof err)) {
        rateld_erl_free(erl);
        return NULL;
    }
    return erl;
}

/* Off by default: the second file of a domain is refused, naming both. */
TEST(erl_merge_off_by_default)
{
    rateld_erl_t *erl = rateld_erl_new(NULL);
    char err[768];

    REQUIRE(erl != NULL);
    CHECK_EQ(add(erl, "key1.yaml", key1, err, sizeof err), 0);
    CHECK_EQ(add(erl, "key2.yaml", key2, err, sizeof err), -1);
    CHECK(starts(err, "key2.yaml:1: domain: \"test-domain\" is also the "
                      "domain of key1.yaml (line 1); envoyproxy/ratelimit "
                      "refuses"));
    CHECK(strstr(err, "envoy: {merge_domain_config: true}") != NULL);
    CHECK_EQ(rateld_erl_count(erl), 1);
    CHECK(match(erl, "test-domain", D("key2", "value2")) == NULL);
    /* Turned on, the same file merges; turned off again, a third is
       refused. */
    rateld_erl_merge_domains(erl, 1);
    CHECK_EQ(add(erl, "key2.yaml", key2, err, sizeof err), 0);
    rateld_erl_merge_domains(erl, 0);
    CHECK_EQ(add(erl, "key3.yaml", "domain: test-domain\n", err, sizeof err),
             -1);
    CHECK_EQ(rateld_erl_domain_count(erl), 1);
    CHECK_EQ(rateld_erl_count(erl), 2);
    rateld_erl_free(erl);
}

/* ERL's TestDomainMerge: each file's descriptors, one domain. */
TEST(erl_merge_joins_top_level)
{
    rateld_erl_t *erl =
        merged(D("key1.yaml", key1, "key2.yaml", key2, "none.yaml",
                 "domain: test-domain\n", "other.yaml",
                 "domain: other\ndescriptors:\n  - key: key1\n    value: "
                 "value1\n    rate_limit: {unit: hour, requests_per_unit: 3}"
                 "\n"));
    const rateld_erl_limit_t *a, *b;

    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_domain_count(erl), 2);
    CHECK_EQ(rateld_erl_count(erl), 3);
    a = match(erl, "test-domain", D("key1", "value1"));
    b = match(erl, "test-domain", D("key2", "value2"));
    REQUIRE(a != NULL && b != NULL);
    CHECK_EQ(a->requests_per_unit, 10);
    CHECK_EQ(b->requests_per_unit, 20);
    CHECK(strcmp(a->file, "key1.yaml") == 0);
    CHECK(strcmp(b->file, "key2.yaml") == 0);
    CHECK_EQ(b->line, 5);
    CHECK(strcmp(b->domain, "test-domain") == 0);
    CHECK(strcmp(b->key_path, "key2_value2") == 0);
    CHECK_EQ(a->index, 0);
    CHECK_EQ(b->index, 1);
    CHECK(match(erl, "test-domain", D("key1", "value2")) == NULL);
    CHECK(match(erl, "foo_domain", D("key1", "value1")) == NULL);
    REQUIRE(match(erl, "other", D("key1", "value1")) != NULL);
    CHECK_EQ(match(erl, "other", D("key1", "value1"))->requests_per_unit, 3);
    rateld_erl_free(erl);
}

/* The file after a refused one merges as if the refused one never came. */
static void check_unchanged(rateld_erl_t *erl)
{
    char err[768];

    CHECK_EQ(rateld_erl_count(erl), 1);
    CHECK(match(erl, "test-domain", D("key1", "value1")) != NULL);
    CHECK(match(erl, "test-domain", D("key3", "x")) == NULL);
    CHECK_EQ(add(erl, "key2.yaml", key2, err, sizeof err), 0);
    CHECK(match(erl, "test-domain", D("key2", "value2")) != NULL);
    CHECK_EQ(rateld_erl_count(erl), 2);
}

/*
 * ERL's TestDuplicateKeyDomainMerge and its neighbours: a top-level key
 * and value in two files is refused whatever lies below it; the set is as
 * before the refused file.
 */
TEST(erl_merge_conflicts)
{
    static const char *const refused[] = {
        /* The same file twice (ERL's test). */
        key1,
        /* Other nested descriptors, another limit: still the same key. */
        "domain: test-domain\ndescriptors:\n  - key: key3\n    rate_limit: "
        "{unit: second, requests_per_unit: 1}\n  - key: key1\n    value: "
        "value1\n    descriptors:\n      - key: sub\n        rate_limit: "
        "{unit: second, requests_per_unit: 1}\n",
        /* Shadow mode on one side only. */
        "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
        "    shadow_mode: true\n    rate_limit: {unlimited: true}\n",
    };
    char err[768];

    for (size_t i = 0; i < COUNT(refused); i++) {
        rateld_erl_t *erl = rateld_erl_new(NULL);
        REQUIRE(erl != NULL);
        rateld_erl_merge_domains(erl, 1);
        CHECK_EQ(add(erl, "key1.yaml", key1, err, sizeof err), 0);
        CHECK_EQ(add(erl, "again.yaml", refused[i], err, sizeof err), -1);
        CHECK(strstr(err, ": key \"key1\" value \"value1\" is also a "
                          "top-level descriptor of domain \"test-domain\" in "
                          "key1.yaml (line 3); ") != NULL);
        CHECK(strstr(err, "duplicate descriptor composite key") != NULL);
        CHECK(starts(err, i == 1 ? "again.yaml:5: descriptors[1]: "
                                 : "again.yaml:3: descriptors[0]: "));
        check_unchanged(erl);
        rateld_erl_free(erl);
    }
}

/* Which file a conflict names, with three files and keys without value. */
TEST(erl_merge_conflict_names_its_file)
{
    static const char a[] = "domain: d\n";
    static const char b[] = "domain: d\ndescriptors:\n  - key: k\n"
                            "    rate_limit: {unit: second, "
                            "requests_per_unit: 1}\n  - key: k\n    value: v\n"
                            "    rate_limit: {unit: second, "
                            "requests_per_unit: 2}\n";
    static const char c[] = "domain: d\ndescriptors:\n  - key: j\n"
                            "    rate_limit: {unit: second, "
                            "requests_per_unit: 3}\n";
    static const char d[] = "domain: d\ndescriptors:\n  - key: i\n"
                            "    rate_limit: {unit: second, "
                            "requests_per_unit: 4}\n  - key: k\n"
                            "    rate_limit: {unit: second, "
                            "requests_per_unit: 5}\n";
    rateld_erl_t *erl = rateld_erl_new(NULL);
    char err[768];

    REQUIRE(erl != NULL);
    rateld_erl_merge_domains(erl, 1);
    CHECK_EQ(add(erl, "a.yaml", a, err, sizeof err), 0);
    CHECK_EQ(add(erl, "b.yaml", b, err, sizeof err), 0);
    CHECK_EQ(add(erl, "c.yaml", c, err, sizeof err), 0);
    CHECK_EQ(add(erl, "d.yaml", d, err, sizeof err), -1);
    CHECK(starts(err, "d.yaml:5: descriptors[1]: key \"k\" without value is "
                      "also a top-level descriptor of domain \"d\" in b.yaml "
                      "(line 3); "));
    CHECK(match(erl, "d", D("i", "x")) == NULL);
    REQUIRE(match(erl, "d", D("k", "x")) != NULL);
    CHECK_EQ(match(erl, "d", D("k", "x"))->requests_per_unit, 1);
    CHECK_EQ(match(erl, "d", D("k", "v"))->requests_per_unit, 2);
    CHECK_EQ(match(erl, "d", D("j", "x"))->requests_per_unit, 3);
    rateld_erl_free(erl);
}

/* Nested descriptors stay under their own top-level descriptor. */
TEST(erl_merge_nested)
{
    static const char a[] = "domain: m\ndescriptors:\n  - key: tenant\n"
                            "    value: acme\n    descriptors:\n"
                            "      - key: user\n        rate_limit: {unit: "
                            "second, requests_per_unit: 1}\n";
    static const char b[] = "domain: m\ndescriptors:\n  - key: tenant\n"
                            "    descriptors:\n      - key: user\n"
                            "        descriptors:\n          - key: path\n"
                            "            rate_limit: {unit: second, "
                            "requests_per_unit: 2}\n";
    rateld_erl_t *erl = merged(D("a.yaml", a, "b.yaml", b));
    const rateld_erl_limit_t *l;

    REQUIRE(erl != NULL);
    l = match(erl, "m", D("tenant", "acme", "user", "u"));
    REQUIRE(l != NULL);
    CHECK_EQ(l->requests_per_unit, 1);
    CHECK(strcmp(l->key_path, "tenant_acme.user") == 0);
    /* acme's exact descriptor wins, and it has no `path` below user:
       ERL does not fall back to b's tenant without value. */
    CHECK(match(erl, "m", D("tenant", "acme", "user", "u", "path", "/")) ==
          NULL);
    l = match(erl, "m", D("tenant", "other", "user", "u", "path", "/"));
    REQUIRE(l != NULL);
    CHECK_EQ(l->requests_per_unit, 2);
    CHECK(strcmp(l->file, "b.yaml") == 0);
    CHECK_EQ(l->depth, 3);
    CHECK(match(erl, "m", D("tenant", "other", "user", "u")) == NULL);
    rateld_erl_free(erl);
}

/* Each side keeps its limits and flags; replaces reach across files. */
TEST(erl_merge_flags_and_replaces)
{
    static const char a[] =
        "domain: f\ndescriptors:\n  - key: k\n"
        "    value: shadowed\n    shadow_mode: true\n"
        "    rate_limit:\n      name: narrow\n"
        "      unit: second\n      requests_per_unit: 1\n"
        "  - key: open\n    rate_limit: {unlimited: true}\n";
    static const char b[] =
        "domain: f\ndescriptors:\n  - key: k\n"
        "    value: strict\n    quota_mode: true\n"
        "    rate_limit:\n      replaces: [{name: narrow}]\n"
        "      unit: second\n      requests_per_unit: 0\n";
    rateld_erl_t *erl = merged(D("a.yaml", a, "b.yaml", b));
    const rateld_erl_limit_t *shadowed, *strict, *open, *list[2];

    REQUIRE(erl != NULL);
    shadowed = match(erl, "f", D("k", "shadowed"));
    strict = match(erl, "f", D("k", "strict"));
    open = match(erl, "f", D("open", "x"));
    REQUIRE(shadowed != NULL && strict != NULL && open != NULL);
    CHECK(shadowed->shadow && !shadowed->quota && !shadowed->deny_all);
    CHECK(!strict->shadow && strict->quota && strict->deny_all);
    CHECK(open->unlimited && !open->shadow);
    list[0] = shadowed;
    list[1] = strict;
    rateld_erl_apply_replaces(list, 2);
    CHECK(list[0] == NULL && list[1] == strict);
    rateld_erl_free(erl);
}

/* Wildcard values are tried in file order across the merged files. */
TEST(erl_merge_wildcards_in_file_order)
{
    static const char a[] = "domain: w\ndescriptors:\n  - key: path\n"
                            "    value: /api/*\n    rate_limit: {unit: "
                            "second, requests_per_unit: 1}\n";
    static const char b[] = "domain: w\ndescriptors:\n  - key: path\n"
                            "    value: /*\n    rate_limit: {unit: second, "
                            "requests_per_unit: 2}\n  - key: path\n"
                            "    value: /api/x\n    rate_limit: {unit: "
                            "second, requests_per_unit: 3}\n";
    rateld_erl_t *ab = merged(D("a.yaml", a, "b.yaml", b));
    rateld_erl_t *ba = merged(D("b.yaml", b, "a.yaml", a));

    REQUIRE(ab != NULL && ba != NULL);
    CHECK_EQ(match(ab, "w", D("path", "/api/y"))->requests_per_unit, 1);
    CHECK_EQ(match(ba, "w", D("path", "/api/y"))->requests_per_unit, 2);
    CHECK_EQ(match(ab, "w", D("path", "/web"))->requests_per_unit, 2);
    /* An exact value comes before any wildcard, whichever file has it. */
    CHECK_EQ(match(ab, "w", D("path", "/api/x"))->requests_per_unit, 3);
    CHECK_EQ(match(ba, "w", D("path", "/api/x"))->requests_per_unit, 3);
    rateld_erl_free(ab);
    rateld_erl_free(ba);
}

/* A directory on disk: refused without merging, loaded with it. */
TEST(erl_merge_load_dir)
{
    char dir[] = "/tmp/test_erl_merge_XXXXXX", path[600], err[768];
    rateld_erl_t *erl = NULL;

    REQUIRE(mkdtemp(dir) != NULL);
    CHECK_EQ(put_file(dir, "key1.yaml", key1), 0);
    CHECK_EQ(put_file(dir, "key2.yaml", key2), 0);
    CHECK_EQ(rateld_erl_load_dir(dir, NULL, 0, &erl, err, sizeof err), -1);
    CHECK(erl == NULL);
    snprintf(path, sizeof path, "%s/key2.yaml:1: domain: \"test-domain\"", dir);
    CHECK(starts(err, path));
    CHECK_EQ(rateld_erl_load_dir(dir, "fixed", 1, &erl, err, sizeof err), 0);
    REQUIRE(erl != NULL);
    CHECK_EQ(rateld_erl_domain_count(erl), 1);
    REQUIRE(match(erl, "test-domain", D("key2", "value2")) != NULL);
    CHECK_EQ(
        match(erl, "test-domain", D("key2", "value2"))->policy.rules[0].algo,
        RATEL_ALGO_FIXED);
    rateld_erl_free(erl);
    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof path, "%s/key%d.yaml", dir, i);
        CHECK_EQ(unlink(path), 0);
    }
    CHECK_EQ(rmdir(dir), 0);
}

RATEL_SUITE(erl_merge) = {
    {"erl_merge_off_by_default", test_erl_merge_off_by_default},
    {"erl_merge_joins_top_level", test_erl_merge_joins_top_level},
    {"erl_merge_conflicts", test_erl_merge_conflicts},
    {"erl_merge_conflict_names_its_file",
     test_erl_merge_conflict_names_its_file},
    {"erl_merge_nested", test_erl_merge_nested},
    {"erl_merge_flags_and_replaces", test_erl_merge_flags_and_replaces},
    {"erl_merge_wildcards_in_file_order",
     test_erl_merge_wildcards_in_file_order},
    {"erl_merge_load_dir", test_erl_merge_load_dir},
    {0},
};
