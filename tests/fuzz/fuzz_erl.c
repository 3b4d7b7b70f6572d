/*
 * fuzz_erl.c - envoyproxy/ratelimit configuration files (rateld/erl.h) on
 * arbitrary bytes.
 *
 * Two views of one input:
 *
 *   1. the whole input as one file (rateld_erl_parse with its length, so
 *      NULs and invalid UTF-8 reach libyaml);
 *   2. the input's bytes as choices among fragments (domains, keys,
 *      values with and without '*', rate limits valid and near misses,
 *      flags, nesting) assembled into a file, so that loaded sets, which
 *      byte mutations of YAML rarely produce, are checked often.
 *
 * Each loaded set is then asked descriptors made of the same keys and
 * values (and of the input's bytes), and replaces applied to the limits.
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - the parse returns 0 or -1, and the same again on the same bytes;
 *   - on -1 the message is "fuzz.yaml:LINE: ..." with LINE >= 1,
 *     NUL-terminated, identical on a second parse, cut cleanly into a
 *     small buffer, and the set holds nothing (a failed file adds nothing);
 *   - on 0, every limit keeps erl.h's promises: index i at place i, its
 *     file and domain, name and key_path NUL-terminated, depth 1..12 with
 *     levels, a unit of rls.proto (0 only when unlimited or for rules of
 *     no ERL unit), deny_all exactly when requests_per_unit is 0 without
 *     rules, a policy ratel_policy_init accepts again otherwise, replaces
 *     not empty and not its own name;
 *   - a match is NULL or a limit of the set whose depth is the number of
 *     entries; apply_replaces only turns limits into NULL, never an
 *     unlimited one, and only those some matched limit names.
 */
#include "rateld/erl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.yaml"
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_erl: %s:%d: invariant broken: %s\n",         \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

/* The input's bytes read one at a time as choices (0 when used up). */
typedef struct choices_s {
    const uint8_t *p;
    size_t n;
} choices_t;

static unsigned pick(choices_t *c, unsigned n)
{
    unsigned v = 0;

    if (c->n) {
        v = *c->p++;
        c->n--;
    }
    return v % n;
}

#define PICK(c, table) (table)[pick((c), COUNT(table))]

static const char *const keys[] = {"k", "remote_address", "user", "path",
                                   "k_v"};
static const char *const values[] = {"v", "a*",  "*",    "/api/*/x", "ab",
                                     "a", "v_x", "*b*c", "50.0.0.5", "files/*"};

static void check_limit(const rateld_erl_t *erl, size_t i)
{
    const rateld_erl_limit_t *l = rateld_erl_limit(erl, i);
    ratel_policy_t again;
    char err[512];

    ASSERT(l != NULL && l->index == i);
    ASSERT(strcmp(l->file, NAME) == 0 && l->line >= 1);
    ASSERT(l->domain &&
           rateld_erl_has_domain(erl, l->domain, strlen(l->domain)));
    ASSERT(TERMINATED(l->name) && TERMINATED(l->key_path));
    ASSERT(l->key_path[0] != '\0');
    ASSERT(l->depth >= 1 && l->depth <= RATELD_ERL_DEPTH_MAX && l->levels);
    ASSERT(l->unit >= 0 && l->unit <= 7);
    ASSERT(!l->unlimited || (l->unit == 0 && !l->deny_all));
    if (l->deny_all)
        ASSERT(l->requests_per_unit == 0 && l->policy.nrules == 0);
    if (!l->unlimited && !l->deny_all) {
        ASSERT(l->policy.nrules >= 1 && l->policy.nrules <= RATEL_MAX_RULES);
        ASSERT(ratel_policy_init(&again, l->policy.rules, l->policy.nrules, err,
                                 sizeof err) == 0);
        ASSERT(l->requests_per_unit == l->policy.rules[0].limit);
    }
    for (size_t k = 0; k < l->nreplaces; k++)
        ASSERT(l->replaces[k][0] && strcmp(l->replaces[k], l->name) != 0);
    for (size_t k = 0; k < l->depth; k++)
        ASSERT(!l->levels[k].shared || strchr(l->levels[k].shared, '*'));
}

/* Descriptors of the fragments' words (and raw bytes), asked of the set. */
static void check_matches(const rateld_erl_t *erl, choices_t *c,
                          const char *domain)
{
    const rateld_erl_limit_t *found[6], *before[6];
    rateld_erl_entry_t e[4];
    size_t nd = 1 + pick(c, COUNT(found));

    for (size_t d = 0; d < nd; d++) {
        size_t n = 1 + pick(c, COUNT(e));
        for (size_t i = 0; i < n; i++) {
            e[i].key = PICK(c, keys);
            e[i].keylen = strlen(e[i].key);
            if (pick(c, 4) == 0 && c->n > 0) {
                size_t len = pick(c, 8);
                len = len < c->n ? len : c->n;
                e[i].value = (const char *)c->p;
                e[i].valuelen = len;
            } else {
                e[i].value = PICK(c, values);
                e[i].valuelen = pick(c, 3) ? strlen(e[i].value) : 0;
            }
        }
        found[d] = rateld_erl_match(erl, domain, strlen(domain), e, n);
        if (found[d]) {
            ASSERT(rateld_erl_limit(erl, found[d]->index) == found[d]);
            ASSERT(found[d]->depth == n);
        }
        before[d] = found[d];
    }
    rateld_erl_apply_replaces(found, nd);
    for (size_t d = 0; d < nd; d++) {
        int named = 0;
        if (found[d] == before[d])
            continue;
        ASSERT(found[d] == NULL && !before[d]->unlimited);
        for (size_t j = 0; j < nd; j++)
            for (size_t k = 0; before[j] && k < before[j]->nreplaces; k++)
                named |= strcmp(before[j]->replaces[k], before[d]->name) == 0;
        ASSERT(named);
    }
}

/* "fuzz.yaml:LINE: reason" with LINE >= 1. */
static void check_message(const char *err, size_t cap)
{
    const char *p = err + strlen(NAME ":");
    long line = 0;

    ASSERT(memchr(err, '\0', cap) != NULL);
    ASSERT(strncmp(err, NAME ":", strlen(NAME ":")) == 0);
    while (*p >= '0' && *p <= '9')
        line = line * 10 + (*p++ - '0');
    ASSERT(line >= 1 && p[0] == ':' && p[1] == ' ' && p[2] != '\0');
}

/*
 * A file that loads, added twice to a set that merges domains: the second
 * copy is refused for its first top-level descriptor (a conflict, the set
 * unchanged), or, with none, merges and adds nothing.
 */
static void check_merge_twice(const uint8_t *data, size_t size, size_t count)
{
    rateld_erl_t *erl = rateld_erl_new(NULL);
    char err[1024];
    int rc;

    ASSERT(erl != NULL);
    rateld_erl_merge_domains(erl, 1);
    ASSERT(rateld_erl_parse(erl, (const char *)data, size, NAME, err,
                            sizeof err) == 0);
    rc = rateld_erl_parse(erl, (const char *)data, size, NAME, err, sizeof err);
    ASSERT(rc == 0 || rc == -1);
    if (rc == -1) {
        check_message(err, sizeof err);
        ASSERT(strstr(err, "is also a top-level descriptor of domain") != NULL);
    }
    ASSERT(rateld_erl_count(erl) == count);
    ASSERT(rateld_erl_domain_count(erl) == 1);
    rateld_erl_free(erl);
}

static void check_file(const uint8_t *data, size_t size, choices_t *c)
{
    rateld_erl_t *erl = rateld_erl_new(NULL), *erl2 = rateld_erl_new("fixed");
    char err[1024], err2[1024], small[24];
    int rc, rc2;

    ASSERT(erl && erl2);
    memset(err, 'X', sizeof err);
    rc = rateld_erl_parse(erl, (const char *)data, size, NAME, err, sizeof err);
    rc2 = rateld_erl_parse(erl2, (const char *)data, size, NAME, err2,
                           sizeof err2);
    ASSERT(rc == 0 || rc == -1);
    if (rc == 0) {
        /* The default algorithm is the only difference: a year refused
           for sliding loads for fixed, never the other way round. */
        ASSERT(rc2 == 0);
        ASSERT(rateld_erl_finish(erl, err, sizeof err) == 0);
        ASSERT(rateld_erl_domain_count(erl) == 1);
        ASSERT(rateld_erl_count(erl) == rateld_erl_count(erl2));
        for (size_t i = 0; i < rateld_erl_count(erl); i++)
            check_limit(erl, i);
        if (rateld_erl_count(erl) > 0)
            check_matches(erl, c, rateld_erl_limit(erl, 0)->domain);
        check_merge_twice(data, size, rateld_erl_count(erl));
        rateld_erl_free(erl);
        rateld_erl_free(erl2);
        return;
    }
    check_message(err, sizeof err);
    ASSERT(rateld_erl_count(erl) == 0 && rateld_erl_domain_count(erl) == 0);
    rateld_erl_free(erl2);
    erl2 = rateld_erl_new(NULL);
    ASSERT(erl2 != NULL);
    ASSERT(rateld_erl_parse(erl2, (const char *)data, size, NAME, err2,
                            sizeof err2) == -1);
    ASSERT(strcmp(err, err2) == 0);
    memset(small, 'X', sizeof small);
    ASSERT(rateld_erl_parse(erl, (const char *)data, size, NAME, small,
                            1 + size % sizeof small) == -1);
    ASSERT(strlen(small) == (size % sizeof small < strlen(err)
                                 ? size % sizeof small
                                 : strlen(err)));
    ASSERT(memcmp(small, err, strlen(small)) == 0);
    rateld_erl_free(erl);
    rateld_erl_free(erl2);
}

/* ------------------------------------------------ view 2: built files */

static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s);

    if (*len + n < cap) {
        memcpy(buf + *len, s, n + 1);
        *len += n;
    }
}

/*
 * One descriptor at `indent`, and maybe a nested list below it: a
 * top-level one is an item of a block list ("- {...}"), nested ones are
 * items of a flow list ("[{...}, ...]").
 */
static void build_descriptor(choices_t *c, char *buf, size_t cap, size_t *len,
                             int indent, int depth)
{
    /* Mostly valid; the near misses apart, picked one time in eight. An
       input used up picks 0: a valid limit, no nesting, no flag. */
    static const char *const limits[] = {
        "{unit: second, requests_per_unit: 10}",
        "{unit: Minute, requests_per_unit: 0}",
        "{unit: day, requests_per_unit: 5, name: A}",
        "{unit: hour, requests_per_unit: 1, name: B, replaces: [{name: A}]}",
        "{unlimited: true, name: A, replaces: [{name: B}]}",
        "{unit: month, requests_per_unit: 3, algorithm: gcra, burst: 9}",
        "{rules: ['20/m', '1000/d:fixed'], name: C, replaces: [{name: B}]}",
        "{rules: ['7/10s']}",
        "{unit: week, requests_per_unit: 1000000000}",
        "{unit: year, requests_per_unit: 3, algorithm: approx}"};
    static const char *const bad_limits[] = {
        "{unit: year, requests_per_unit: 3}",
        "{unit: second}",
        "{unit: fortnight, requests_per_unit: 1}",
        "{unlimited: yes, unit: day}",
        "{name: A, replaces: [{name: A}], unit: second, "
        "requests_per_unit: 1}",
        "{burst: 3, unit: second, requests_per_unit: 1}"};
    static const char *const flags[] = {
        "",
        "",
        "shadow_mode: true, ",
        "quota_mode: on, ",
        "detailed_metric: true, value_to_metric: true, ",
        "share_threshold: true, ",
        "shadow_mode: 'true', "};
    char line[256];
    unsigned kind = pick(c, 4);

    snprintf(line, sizeof line, "%*s%s{key: %s, %s%s%s%s%s", indent, "",
             depth == 1 ? "- " : "", PICK(c, keys), kind ? "value: '" : "",
             kind ? PICK(c, values) : "", kind ? "', " : "",
             pick(c, 2) ? "" : PICK(c, flags),
             pick(c, 3) < 2 ? "rate_limit: " : "");
    put(buf, cap, len, line);
    if (line[strlen(line) - 2] == ':')
        put(buf, cap, len,
            pick(c, 8) < 7 ? PICK(c, limits) : PICK(c, bad_limits));
    else
        put(buf, cap, len, "metadata: {a: 1}");
    if (depth < RATELD_ERL_DEPTH_MAX + 1 && pick(c, 3) == 2) {
        unsigned n = 1 + pick(c, 3);
        put(buf, cap, len, ", descriptors: [\n");
        for (unsigned i = 0; i < n; i++) {
            build_descriptor(c, buf, cap, len, indent + 2, depth + 1);
            put(buf, cap, len, i + 1 < n ? ",\n" : "\n");
        }
        snprintf(line, sizeof line, "%*s]", indent, "");
        put(buf, cap, len, line);
    }
    put(buf, cap, len, "}");
}

static size_t build_file(choices_t *c, char *buf, size_t cap)
{
    static const char *const domains[] = {
        "domain: d\n", "domain: rl\n", "domain: d\n", "domain: x\n",
        "domain: d\n", "domain: y\n",  "domain: z\n", "domain: d\n"};
    size_t len = 0;
    unsigned n = pick(c, 6);

    buf[0] = '\0';
    put(buf, cap, &len, PICK(c, domains));
    if (n == 0)
        return len;
    put(buf, cap, &len, "descriptors:\n");
    for (unsigned i = 0; i < n; i++) {
        build_descriptor(c, buf, cap, &len, 2, 1);
        put(buf, cap, &len, "\n");
    }
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char built[1 << 16];
    choices_t c = {data, size}, again = {data, size};
    size_t n;

    check_file(data, size, &again);
    n = build_file(&c, built, sizeof built);
    check_file((const uint8_t *)built, n, &c);
    return 0;
}
