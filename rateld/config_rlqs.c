/*
 * config_rlqs.c - the rlqs: section of rateld's configuration (Envoy's
 * Rate Limit Quota Service, docs/envoy.md): the assignments' lifetime,
 * what an unknown bucket gets, and the buckets:
 *
 *   rlqs:
 *     ttl_ms: 10000
 *     buckets:
 *       - match: {name: api}   # bucket_id entries that must be so
 *         key: [tenant]        # bucket_id entries that make the key
 *         policy: api          # whose tightest rate is split
 *
 * A bucket's rate is its policy's tightest rate rule (the smallest
 * LIMIT/PERIOD); a policy of concurrent rules only has none and is
 * refused.
 */
#include "rateld/config_private.h"
#include "rateld/rlqs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const unmatched_words[] = {"deny", "allow", "abandon", NULL};
static const int unmatched_values[] = {RATELD_RLQS_UNMATCHED_DENY,
                                       RATELD_RLQS_UNMATCHED_ALLOW,
                                       RATELD_RLQS_UNMATCHED_ABANDON};
#define RLQS(f) RATEL__FIELD(rateld_rlqs_config_t, f)
static const ratel__option_t rlqs_options[] = {
    {"ttl_ms", RATEL__OPTION_MSEC, 100, 3600000, 0, RLQS(ttl_ms), NULL, NULL,
     NULL},
    {"grace_ms", RATEL__OPTION_MSEC, 0, 60000, 0, RLQS(grace_ms), NULL, NULL,
     NULL},
    {"floor_percent", RATEL__OPTION_UINT, 0, 100, 0, RLQS(floor_percent), NULL,
     NULL, NULL},
    {"unmatched", RATEL__OPTION_ENUM, 0, 0, 0, RLQS(unmatched), unmatched_words,
     unmatched_values, NULL},
};
static const ratel__option_t rlqs_sections[] = {{.name = "buckets"}};

/* A bucket entry's own options. */
#define BUCKET(f) RATEL__FIELD(rateld_rlqs_bucket_t, f)
static const ratel__option_t bucket_options[] = {
    {"domain", RATEL__OPTION_STRING, 0, 0, 0, BUCKET(domain), NULL, NULL,
     ratel__check_nonempty},
};
enum { B_POLICY, B_MATCH, B_KEY, B_SECTIONS };
static const ratel__option_t bucket_sections[B_SECTIONS] = {
    {.name = "policy"}, {.name = "match"}, {.name = "key"}};

/* What a bucket entry's sections are read into. */
typedef struct bucket_reader_s {
    reader_t *r;
    rateld_rlqs_bucket_t *b;
    char path[64];
} bucket_reader_t;

/* The rate rule of a policy: its tightest rule that limits a rate (the
   smallest limit / period; a calendar month counts 31 days). */
static const ratel_rule_t *tightest_rate(const ratel_policy_t *p,
                                         int64_t *period_us)
{
    const ratel_rule_t *best = NULL;
    int64_t best_us = 0;

    for (uint32_t i = 0; i < p->nrules; i++) {
        const ratel_rule_t *rule = &p->rules[i];
        int64_t us = rule->period_ms
                         ? (int64_t)rule->period_ms * 1000
                         : (int64_t)rule->months * 31 * 86400 * 1000000;
        if (!(ratel_algo_facts(rule->algo) & RATEL_ALGO_RATE))
            continue;
        /* limit / us < best->limit / best_us, without division */
        if (!best ||
            (__int128)rule->limit * best_us < (__int128)best->limit * us) {
            best = rule;
            best_us = us;
        }
    }
    *period_us = best_us;
    return best;
}

static int read_policy_name(bucket_reader_t *br, const ratel__yaml_node_t *node)
{
    reader_t *r = br->r;
    const rateld_config_t *c = r->config;
    char field[96], name[RATELD_NAME_MAX], names[512];
    const rateld_policy_t *p;
    const ratel_rule_t *rule;
    int64_t period_us;

    snprintf(field, sizeof field, "%s.policy", br->path);
    if (ratel__yaml_string(&r->ctx, node, field, name, sizeof name))
        return -1;
    p = rateld_config_policy(c, name, strlen(name));
    if (!p) {
        rateld_config_policy_names(c, names, sizeof names);
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: no policy \"%s\"; defined: %s", field,
                                name, names[0] ? names : "none");
    }
    rule = tightest_rate(&p->policy, &period_us);
    if (!rule)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: policy \"%s\" has only concurrent rules; "
                                "RLQS splits a rate (give it a rule such as "
                                "100/1s)",
                                field, name);
    br->b->policy = (size_t)(p - c->policies);
    br->b->rule.limit = rule->limit;
    br->b->rule.period_us = period_us;
    br->b->rule.burst = rule->burst ? rule->burst : rule->limit;
    return 0;
}

/* match: a mapping of bucket_id names to the values they must have. */
static int read_match(bucket_reader_t *br, const ratel__yaml_node_t *node)
{
    reader_t *r = br->r;
    rateld_rlqs_bucket_t *b = br->b;
    char field[160], what[96];

    snprintf(field, sizeof field, "%s.match", br->path);
    if (node->type != RATEL__YAML_MAP || node->n == 0 ||
        node->n / 2 > RATELD_RLQS_PAIRS_MAX)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: expected a mapping of 1 to %d bucket_id "
                                "names and values ({name: api}), got %s",
                                field, RATELD_RLQS_PAIRS_MAX,
                                ratel__yaml_describe(node, what, sizeof what));
    for (size_t i = 0; i < node->n / 2; i++) {
        const ratel__yaml_node_t *k = node->items[2 * i];
        char item[200];
        ratel__yaml_join(item, sizeof item, field, k);
        if (ratel__yaml_string(&r->ctx, k, field, b->match_name[i],
                               sizeof b->match_name[i]) ||
            ratel__yaml_string(&r->ctx, node->items[2 * i + 1], item,
                               b->match_value[i], sizeof b->match_value[i]))
            return -1;
        b->nmatch++;
    }
    return 0;
}

/* key: the bucket_id names whose values make the key, in order. */
static int read_key(bucket_reader_t *br, const ratel__yaml_node_t *node)
{
    reader_t *r = br->r;
    rateld_rlqs_bucket_t *b = br->b;
    char field[160];

    snprintf(field, sizeof field, "%s.key", br->path);
    if (ratel__yaml_list(&r->ctx, node, field, RATELD_RLQS_PAIRS_MAX,
                         "bucket_id names"))
        return -1;
    for (size_t i = 0; i < node->n; i++) {
        char item[200];
        snprintf(item, sizeof item, "%s[%zu]", field, i);
        if (ratel__yaml_string(&r->ctx, node->items[i], item, b->key[i],
                               sizeof b->key[i]))
            return -1;
        if (!b->key[i][0])
            return ratel__yaml_fail(&r->ctx, node->items[i]->line,
                                    "%s: empty; a bucket_id name", item);
        b->nkey++;
    }
    return 0;
}

static int (*const bucket_readers[B_SECTIONS])(bucket_reader_t *,
                                               const ratel__yaml_node_t *) = {
    [B_POLICY] = read_policy_name,
    [B_MATCH] = read_match,
    [B_KEY] = read_key,
};

static int read_bucket_section(void *ud, size_t i,
                               const ratel__yaml_node_t *node)
{
    return bucket_readers[i](ud, node);
}

static int read_bucket(reader_t *r, const ratel__yaml_node_t *node, size_t i,
                       rateld_rlqs_bucket_t *b)
{
    bucket_reader_t br = {.r = r, .b = b};
    const ratel__yaml_group_t groups[] = {
        {bucket_options, COUNT(bucket_options), b, NULL, NULL},
        {bucket_sections, B_SECTIONS, NULL, read_bucket_section, &br}};
    const ratel__yaml_node_t *v[COUNT(bucket_options) + B_SECTIONS];

    snprintf(br.path, sizeof br.path, "rlqs.buckets[%zu]", i);
    b->line = node->line;
    if (ratel__yaml_groups(&r->ctx, node, br.path, groups, COUNT(groups), v))
        return -1;
    if (!v[COUNT(bucket_options) + B_POLICY])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.policy: required (the policy whose rate "
                                "the bucket's Envoys share)",
                                br.path);
    if (!b->nmatch && !b->nkey)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: needs match: or key: (which bucket_ids it "
                                "takes)",
                                br.path);
    return 0;
}

static int read_buckets(void *ud, size_t i, const ratel__yaml_node_t *node)
{
    reader_t *r = ud;
    rateld_rlqs_config_t *rc = r->config->rlqs;

    (void)i; /* the one section: buckets */
    if (ratel__yaml_list(&r->ctx, node, "rlqs.buckets", RATELD_RLQS_BUCKETS_MAX,
                         "buckets"))
        return -1;
    rc->buckets = calloc(node->n ? node->n : 1, sizeof *rc->buckets);
    if (!rc->buckets)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t k = 0; k < node->n; k++) {
        if (read_bucket(r, node->items[k], k, &rc->buckets[k]))
            return -1;
        rc->nbuckets++;
    }
    return 0;
}

int rateld__read_rlqs(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_rlqs_config_t *rc = calloc(1, sizeof *rc);
    const ratel__yaml_group_t groups[] = {
        {rlqs_options, COUNT(rlqs_options), rc, NULL, NULL},
        {rlqs_sections, COUNT(rlqs_sections), NULL, read_buckets, r}};

    if (!rc)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    r->config->rlqs = rc;
    rc->line = node->line;
    rc->ttl_ms = 10000;
    rc->grace_ms = 1000;
    rc->floor_percent = 25;
    if (ratel__yaml_groups(&r->ctx, node, "rlqs", groups, COUNT(groups), NULL))
        return -1;
    if (!r->config->envoy.listen[0])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "rlqs: needs envoy.listen (the gRPC address "
                                "Envoy's rate_limit_quota filter calls)");
    for (size_t i = 0; i < rc->nbuckets; i++) {
        rateld_share_rule_t *rule = &rc->buckets[i].rule;
        rule->ttl_us = (int64_t)rc->ttl_ms * 1000;
        rule->grace_us = (int64_t)rc->grace_ms * 1000;
        rule->floor_percent = rc->floor_percent;
    }
    return 0;
}

void rateld_rlqs_config_free(rateld_rlqs_config_t *rc)
{
    if (!rc)
        return;
    free(rc->buckets);
    free(rc);
}

/* The value of bucket_id entry `name`, or NULL. */
static const char *pair_value(const rateld_rlqs_pair_t *pairs, size_t n,
                              const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(pairs[i].name, name) == 0)
            return pairs[i].value;
    return NULL;
}

/* Whether entry b takes the bucket_id. */
static int bucket_takes(const rateld_rlqs_bucket_t *b, const char *domain,
                        const rateld_rlqs_pair_t *pairs, size_t n)
{
    if (b->domain[0] && strcmp(b->domain, domain) != 0)
        return 0;
    for (size_t i = 0; i < b->nmatch; i++) {
        const char *v = pair_value(pairs, n, b->match_name[i]);
        if (!v || strcmp(v, b->match_value[i]) != 0)
            return 0;
    }
    for (size_t i = 0; i < b->nkey; i++)
        if (!pair_value(pairs, n, b->key[i]))
            return 0;
    return 1;
}

const rateld_rlqs_bucket_t *rateld_rlqs_match(const rateld_config_t *c,
                                              const char *domain,
                                              const rateld_rlqs_pair_t *pairs,
                                              size_t n, char *key, size_t cap)
{
    const rateld_rlqs_config_t *rc = c->rlqs;

    for (size_t i = 0; rc && i < rc->nbuckets; i++) {
        const rateld_rlqs_bucket_t *b = &rc->buckets[i];
        const char *name = c->policies[b->policy].name;
        size_t len;
        int m;
        if (!bucket_takes(b, domain, pairs, n))
            continue;
        m = snprintf(key, cap, "%zu:%s", strlen(name), name);
        if (m < 0 || (size_t)m >= cap)
            return NULL;
        len = (size_t)m;
        for (size_t k = 0; k < b->nkey; k++) {
            const char *v = pair_value(pairs, n, b->key[k]);
            m = snprintf(key + len, cap - len, "/%zu:%s", strlen(v), v);
            if (m < 0 || (size_t)m >= cap - len)
                return NULL;
            len += (size_t)m;
        }
        return b;
    }
    return NULL;
}
