/*
 * config.c - rateld's configuration: the schema of docs/config.md checked
 * over the tree server/app/yaml.c builds, loading, and the policy and route
 * look-ups.
 *
 * Every field is checked where it stands and the first problem is
 * reported as "FILE:LINE: PATH: reason", PATH naming the field the way a
 * reader finds it (policies.sms.rules[1]; list indices count from 0).
 * Fields are checked in the order the file gives them, except that routes
 * come after policies, which they name.
 */
#include "app/options.h"
#include "app/ratelimit.h"
#include "app/yaml.h"
#include "rateld/config.h"
#include "rateld/config_private.h"
#include "rateld/erl.h"
#include "rateld/rlqs.h"
#include "rateld/request.h"
#include "ratel_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Bounds on what one file may define (real ones define a few dozen). */
#define POLICIES_MAX 4096

/* -------------------------------------------------------------- reading */

/* By name (bytes, then length): the order of look-ups. */
int rateld__compare_name(const void *a, const void *b)
{
    const name_ref_t *x = a, *y = b;
    int d = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    if (d)
        return d;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* By name, then by place: repeats of a name sort in file order. */
static int compare_name_index(const void *a, const void *b)
{
    const name_ref_t *x = a, *y = b;
    int d = rateld__compare_name(a, b);
    if (d)
        return d;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* `store:` fields other than the Redis store's settings (which are in
   ratel__redis_query_options, the table a store URL's query reads too). */
static const char *const store_types[] = {"memory", "redis", NULL};
static const int store_kinds[] = {RATELD_STORE_MEMORY, RATELD_STORE_REDIS};
static const ratel__option_t store_options[] = {
    {"type", RATEL__OPTION_ENUM, 0, 0, 0, CONFIG(store), store_types,
     store_kinds, NULL},
    {"url", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(redis_url), NULL, NULL,
     ratel__check_nonempty},
};

static int read_store(reader_t *r, const ratel__yaml_node_t *node)
{
    return ratel__yaml_store(&r->ctx, node, store_options, COUNT(store_options),
                             r->config, &r->config->memory, &r->config->redis);
}

/* ------------------------------------------------------------- policies */

static int name_valid(const ratel__yaml_node_t *key)
{
    if (key->len == 0 || key->len >= RATELD_NAME_MAX)
        return 0;
    for (size_t i = 0; i < key->len; i++) {
        unsigned char ch = (unsigned char)key->text[i];
        if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') &&
            !(ch >= '0' && ch <= '9') && ch != '_' && ch != '.' && ch != '-')
            return 0;
    }
    return 1;
}

/* An HTTP token character (RFC 9110): what a header name is made of. */
int rateld__tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* One key source of `node` (a scalar such as query:telephone|phone:CN),
   for `path` in messages. */
static int read_key_part(reader_t *r, const ratel__yaml_node_t *node,
                         const char *path, ratel__key_part_t *part)
{
    char what[96], why[400];

    if (node->type == RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: expected a key source, got a mapping "
                                "(write header:NAME with no space after ':')",
                                path);
    if (node->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(node))
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: expected a key source such as ip or "
                                "query:telephone, got %s",
                                path,
                                ratel__yaml_describe(node, what, sizeof what));
    if (ratel__key_part_parse(node->text, node->len, part, why, sizeof why))
        return ratel__yaml_fail(&r->ctx, node->line, "%s: %s", path, why);
    return 0;
}

/* key: a source, a comma-separated list of them, or a YAML list. */
static int read_key(reader_t *r, const ratel__yaml_node_t *node,
                    const char *path, rateld_policy_t *p)
{
    char item[320], why[400];
    ratel__key_t *key = &p->key;

    if (node->type == RATEL__YAML_SCALAR && !ratel__yaml_is_null(node) &&
        memchr(node->text, ',', node->len)) {
        if (ratel__key_parse(node->text, node->len, key, why, sizeof why))
            return ratel__yaml_fail(&r->ctx, node->line, "%s: %s", path, why);
        return 0;
    }
    if (node->type != RATEL__YAML_LIST) {
        key->n = 1;
        return read_key_part(r, node, path, &key->parts[0]);
    }
    if (ratel__yaml_list(&r->ctx, node, path, RATEL__KEY_PARTS_MAX,
                         "key sources"))
        return -1;
    if (node->n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: an empty list; give at least one key "
                                "source (ip, global, path, host, header:NAME, "
                                "query:NAME, form:NAME, cookie:NAME, "
                                "json:FIELD)",
                                path);
    key->n = node->n;
    for (size_t i = 0; i < node->n; i++) {
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        if (read_key_part(r, node->items[i], item, &key->parts[i]))
            return -1;
    }
    if (ratel__key_check(key, why, sizeof why))
        return ratel__yaml_fail(&r->ctx, node->line, "%s: %s", path, why);
    return 0;
}

static int read_rules(reader_t *r, const ratel__yaml_node_t *node,
                      const char *path, ratel_policy_t *out)
{
    ratel_rule_t rules[RATEL_MAX_RULES];
    char item[320], why[400], what[96];
    const ratel__yaml_node_t *const *items = &node;
    size_t n = 1;

    if (node->type == RATEL__YAML_LIST) {
        if (ratel__yaml_list(&r->ctx, node, path, RATEL_MAX_RULES, "rules"))
            return -1;
        if (node->n == 0)
            return ratel__yaml_fail(
                &r->ctx, node->line,
                "%s: an empty list; a policy needs at least "
                "one rule, e.g. 10/1m",
                path);
        items = (const ratel__yaml_node_t *const *)node->items;
        n = node->n;
    }
    for (size_t i = 0; i < n; i++) {
        const ratel__yaml_node_t *it = items[i];
        if (node->type == RATEL__YAML_LIST)
            snprintf(item, sizeof item, "%s[%zu]", path, i);
        else
            snprintf(item, sizeof item, "%s", path);
        if (it->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(it))
            return ratel__yaml_fail(
                &r->ctx, it->line,
                "%s: expected a rule such as 10/1m or "
                "100/1s:gcra,burst=200, got %s",
                item, ratel__yaml_describe(it, what, sizeof what));
        if (ratel_rule_parse(it->text, it->len, &rules[i], why, sizeof why)) {
            /* [100/1s:gcra,burst=200] is two items in a YAML flow list. */
            if (it->len >= 6 && memcmp(it->text, "burst=", 6) == 0)
                return ratel__yaml_fail(
                    &r->ctx, it->line,
                    "%s: \"%.*s\" is not a rule: YAML split "
                    "a rule at its comma; quote it: "
                    "[\"100/1s:gcra,burst=200\"]",
                    item, (int)(it->len > 40 ? 40 : it->len), it->text);
            return ratel__yaml_fail(&r->ctx, it->line, "%s: %s", item, why);
        }
    }
    if (ratel_policy_init(out, rules, n, why, sizeof why) != 0) {
        /* The one error left is a rule given twice: point at it. */
        int line = node->line;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (line == node->line && rules[i].algo == rules[j].algo &&
                    rules[i].limit == rules[j].limit &&
                    rules[i].period_ms == rules[j].period_ms &&
                    rules[i].burst == rules[j].burst)
                    line = items[i]->line;
        return ratel__yaml_fail(&r->ctx, line, "%s: %s", path, why);
    }
    return 0;
}

/* ------------------------------------------------------------ overrides */

static int compare_string(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* is: [VALUE, ...]: 1..RATELD_OVERRIDE_VALUES_MAX strings, none twice,
   kept sorted for a binary search. */
static int read_override_values(reader_t *r, const ratel__yaml_node_t *node,
                                const char *path, rateld_override_t *o)
{
    char item[440], value[RATELD_KEY_MAX + 1];

    if (ratel__yaml_list(&r->ctx, node, path, RATELD_OVERRIDE_VALUES_MAX,
                         "values"))
        return -1;
    if (node->n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: an empty list; give the values this "
                                "override applies to",
                                path);
    o->values = calloc(node->n, sizeof *o->values);
    if (!o->values)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t i = 0; i < node->n; i++) {
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        if (ratel__yaml_string(&r->ctx, node->items[i], item, value,
                               sizeof value))
            return -1;
        if (!value[0])
            return ratel__yaml_fail(&r->ctx, node->items[i]->line,
                                    "%s: empty (an absent key source matches "
                                    "no override)",
                                    item);
        if (!(o->values[o->nvalues++] = strdup(value)))
            return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    }
    qsort(o->values, o->nvalues, sizeof *o->values, compare_string);
    for (size_t i = 1; i < o->nvalues; i++)
        if (!strcmp(o->values[i - 1], o->values[i]))
            return ratel__yaml_fail(&r->ctx, node->line,
                                    "%s: \"%.60s\" given twice", path,
                                    o->values[i]);
    return 0;
}

/* {when: SOURCE|key, is: [...], rules: [...] | exempt: true} */
static int read_override(reader_t *r, const ratel__yaml_node_t *node,
                         const char *path, const char *policy,
                         rateld_override_t *o)
{
    static const char *const names[] = {"when", "is", "rules", "exempt"};
    const ratel__yaml_node_t *v[COUNT(names)];
    char field[400];

    o->line = node->line;
    if (ratel__yaml_fields(&r->ctx, node, path, names, COUNT(names), v))
        return -1;
    if (!v[0] || !v[1] || (!v[2] == !v[3]))
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: needs when: (a key source, or key for the "
                                "policy's own key), is: [values], and either "
                                "rules: [...] or exempt: true",
                                path);
    snprintf(field, sizeof field, "%s.when", path);
    if (v[0]->type == RATEL__YAML_SCALAR && !strcmp(v[0]->text, "key"))
        o->when.kind = RATEL__KEY_SELF;
    else if (read_key_part(r, v[0], field, &o->when))
        return -1;
    snprintf(field, sizeof field, "%s.is", path);
    if (read_override_values(r, v[1], field, o))
        return -1;
    snprintf(field, sizeof field, "%s.%s", path, v[2] ? "rules" : "exempt");
    if (v[2]) {
        if (read_rules(r, v[2], field, &o->policy))
            return -1;
        ratel__header_policy(policy, &o->policy, o->field, sizeof o->field);
        return 0;
    }
    if (ratel__yaml_bool(&r->ctx, v[3], field, &o->exempt))
        return -1;
    if (!o->exempt)
        return ratel__yaml_fail(&r->ctx, v[3]->line,
                                "%s: false; leave the override out, or give "
                                "rules",
                                field);
    return 0;
}

static int read_overrides(reader_t *r, const ratel__yaml_node_t *node,
                          const char *path, rateld_policy_t *p)
{
    char item[320];

    if (ratel__yaml_list(&r->ctx, node, path, RATELD_OVERRIDES_MAX,
                         "overrides"))
        return -1;
    p->overrides = calloc(node->n ? node->n : 1, sizeof *p->overrides);
    if (!p->overrides)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t i = 0; i < node->n; i++) {
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        p->noverrides++;
        if (read_override(r, node->items[i], item, p->name, &p->overrides[i]))
            return -1;
    }
    return 0;
}

/*
 * An override's values as requests read them: when its key source (or the
 * policy's own key of one source) has a transform, each value is written
 * as the transform writes it (a |phone value in E.164), so that
 * "13800000000" matches a request's "+86 138 0000 0000".
 */
static int normalise_values(reader_t *r, const rateld_policy_t *p,
                            rateld_override_t *o, size_t index)
{
    const ratel__key_part_t *part = o->when.kind != RATEL__KEY_SELF ? &o->when
                                    : p->key.n == 1 ? &p->key.parts[0]
                                                    : NULL;
    char buf[RATELD_KEY_MAX + 2];

    if (!part || part->transform == RATEL__KEY_AS_IS)
        return 0;
    for (size_t i = 0; i < o->nvalues; i++) {
        const char *value = o->values[i], *why = NULL;
        size_t n = strlen(value);
        char *copy;
        if (ratel__key_transform(part, buf, sizeof buf, &value, &n, &why))
            return ratel__yaml_fail(&r->ctx, o->line,
                                    "policies.%s.overrides[%zu].is: \"%.60s\" "
                                    "is %s",
                                    p->name, index, o->values[i], why);
        if (!(copy = strndup(value, n)))
            return ratel__yaml_fail(&r->ctx, o->line, "out of memory");
        free(o->values[i]);
        o->values[i] = copy;
    }
    qsort(o->values, o->nvalues, sizeof *o->values, compare_string);
    for (size_t i = 1; i < o->nvalues; i++)
        if (!strcmp(o->values[i - 1], o->values[i]))
            return ratel__yaml_fail(&r->ctx, o->line,
                                    "policies.%s.overrides[%zu].is: \"%.60s\" "
                                    "given twice (in two spellings)",
                                    p->name, index, o->values[i]);
    return 0;
}

static void free_overrides(rateld_policy_t *p)
{
    for (size_t i = 0; i < p->noverrides; i++) {
        for (size_t k = 0; k < p->overrides[i].nvalues; k++)
            free(p->overrides[i].values[k]);
        free(p->overrides[i].values);
    }
    free(p->overrides);
}

/* Whether the policy reads the JSON body (a key part or an override). */
static int reads_json(const rateld_policy_t *p)
{
    if (ratel__key_needs(&p->key) & RATEL__KEY_NEEDS_JSON)
        return 1;
    for (size_t i = 0; i < p->noverrides; i++)
        if (p->overrides[i].when.kind == RATEL__KEY_JSON)
            return 1;
    return 0;
}

/*
 * charge_on: a status or a list of them (100..599): /v1/auth only checks
 * the policy's limit, and /v1/report charges it when the answer's status
 * is one of these (docs/login.md).
 */
static int read_charge_on(reader_t *r, const ratel__yaml_node_t *node,
                          const char *path, rateld_policy_t *p)
{
    const ratel__yaml_node_t *const *items = &node;
    size_t n = 1;
    char why[160], what[96];

    if (node->type == RATEL__YAML_LIST) {
        if (ratel__yaml_list(&r->ctx, node, path, 64, "statuses"))
            return -1;
        items = (const ratel__yaml_node_t *const *)node->items;
        n = node->n;
    }
    if (n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: an empty list; name the statuses to "
                                "charge, e.g. [401, 403]",
                                path);
    for (size_t i = 0; i < n; i++) {
        const ratel__yaml_node_t *it = items[i];
        if (it->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(it))
            return ratel__yaml_fail(
                &r->ctx, it->line, "%s: expected a status such as 401, got %s",
                path, ratel__yaml_describe(it, what, sizeof what));
        if (ratel__status_add(&p->charge_on, it->text, it->len, why,
                              sizeof why))
            return ratel__yaml_fail(&r->ctx, it->line, "%s: %s", path, why);
    }
    p->charges_on = 1;
    return 0;
}

/* max_wait: the option every ratel front end reads (RATEL_OPTION_MAP's
   max_wait: its range and its message). */
static int read_max_wait(reader_t *r, const ratel__yaml_node_t *node,
                         const char *path, rateld_policy_t *p)
{
    ratel_options_t o;
    char err[256], what[96];

    if (node->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(node))
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: expected milliseconds such as 500, got %s",
                                path,
                                ratel__yaml_describe(node, what, sizeof what));
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD, 0);
    if (ratel_options_read(&o, "max_wait", 8, node->text, node->len, err,
                           sizeof err) != 0)
        return ratel__yaml_fail(&r->ctx, node->line, "%s: %s", path, err);
    p->max_wait_ms = o.value[RATEL_OPTION_MAXWAIT];
    return 0;
}

/* A max_wait needs rules that reserve (gcra), and is not for a policy
   charged after the answer (nothing to wait for). */
static int check_max_wait(reader_t *r, const ratel__yaml_node_t *node,
                          const char *path, const rateld_policy_t *p)
{
    ratel_options_t o;
    char err[256];

    if (p->max_wait_ms == 0)
        return 0;
    if (p->charges_on)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.max_wait: a policy charged after the "
                                "answer (charge_on) has nothing to wait for",
                                path);
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD, 0);
    o.value[RATEL_OPTION_MAXWAIT] = p->max_wait_ms;
    if (ratel_options_check(&o, &p->policy, err, sizeof err) != 0)
        return ratel__yaml_fail(&r->ctx, node->line, "%s.max_wait: %s", path,
                                err);
    return 0;
}

/* lease: a mapping of libratel's lease settings (ratel__lease_options:
   ttl_ms, max_slice, min_slice, hosts), all optional. */
static int read_lease(reader_t *r, const ratel__yaml_node_t *node,
                      const char *field, rateld_policy_t *p)
{
    memset(&p->lease, 0, sizeof p->lease);
    if (ratel__yaml_options(&r->ctx, node, field, ratel__lease_options,
                            ratel__lease_noptions, &p->lease, NULL))
        return -1;
    p->leased = 1;
    return 0;
}

/* A leased policy: rules a slice can be taken of, settings that agree,
   and requests the store decides one by one otherwise refused. */
static int check_lease(reader_t *r, const ratel__yaml_node_t *node,
                       const char *path, rateld_policy_t *p)
{
    char why[300];

    if (p->max_wait_ms > 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.lease: a policy that reserves (max_wait) "
                                "is decided by the store, request by request; "
                                "remove lease or max_wait",
                                path);
    if (p->lease.min_slice && p->lease.max_slice &&
        p->lease.min_slice > p->lease.max_slice)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.lease.min_slice: %llu is more than "
                                "max_slice (%llu)",
                                path, (unsigned long long)p->lease.min_slice,
                                (unsigned long long)p->lease.max_slice);
    if (ratel_lease_bound(&p->policy, &p->lease, NULL, why, sizeof why) != 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.lease: %s (its permits are leases a "
                                "request holds and gives back, not a rate "
                                "to slice)",
                                path, why);
    return 0;
}

static int read_policy(reader_t *r, const ratel__yaml_node_t *key,
                       const ratel__yaml_node_t *node, rateld_policy_t *p)
{
    static const char *const names[] = {"rules",     "key",       "on_missing",
                                        "shadow",    "overrides", "fold_case",
                                        "charge_on", "max_wait",  "lease"};
    static const char *const missing[] = {"reject", "shared", "allow"};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    char path[128], field[160];

    ratel__yaml_join(path, sizeof path, "policies", key);
    if (!name_valid(key))
        return ratel__yaml_fail(&r->ctx, key->line,
                                "%s: a policy name is 1..%d characters of "
                                "A-Z a-z 0-9 _ . -",
                                path, RATELD_NAME_MAX - 1);
    memcpy(p->name, key->text, key->len + 1);
    p->line = key->line;
    if (ratel__yaml_fields(&r->ctx, node, path, names, COUNT(names), v))
        return -1;
    p->key.n = 1;
    p->key.parts[0].kind = RATEL__KEY_IP;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        int rc = 0, word = 0;
        snprintf(field, sizeof field, "%s.%s", path, names[i]);
        if (i == 0)
            rc = read_rules(r, v[i], field, &p->policy);
        else if (i == 1)
            rc = read_key(r, v[i], field, p);
        else if (i == 2)
            rc = ratel__yaml_word(&r->ctx, v[i], field, missing, COUNT(missing),
                                  &word);
        else if (i == 3)
            rc = ratel__yaml_bool(&r->ctx, v[i], field, &p->shadow);
        else if (i == 4)
            rc = read_overrides(r, v[i], field, p);
        else if (i == 5)
            rc = ratel__yaml_bool(&r->ctx, v[i], field, &p->key.fold_case);
        else if (i == 6)
            rc = read_charge_on(r, v[i], field, p);
        else if (i == 7)
            rc = read_max_wait(r, v[i], field, p);
        else
            rc = read_lease(r, v[i], field, p);
        if (rc)
            return -1;
        if (i == 2)
            p->key.on_missing = (ratel__key_missing_t)word;
    }
    if (!v[0])
        return ratel__yaml_fail(
            &r->ctx, node->line,
            "%s.rules: required (a rule such as 10/1m, or a "
            "list of up to %d)",
            path, RATEL_MAX_RULES);
    for (size_t i = 0; i < p->noverrides; i++)
        if (normalise_values(r, p, &p->overrides[i], i))
            return -1;
    if (p->charges_on && ratel_policy_has_leases(&p->policy))
        return ratel__yaml_fail(&r->ctx, v[6]->line,
                                "%s.charge_on: a policy charged after the "
                                "request takes no concurrent rule (there "
                                "would be no lease to give back)",
                                path);
    if (v[7] && check_max_wait(r, v[7], path, p))
        return -1;
    if (v[8] && check_lease(r, v[8], path, p))
        return -1;
    p->uses_json = reads_json(p);
    return 0;
}

static int read_policies(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_config_t *c = r->config;
    size_t n, *first;
    char what[96];
    int rc = 0;

    if (node->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "policies: expected a mapping of policy names "
                                "to policies, got %s",
                                ratel__yaml_describe(node, what, sizeof what));
    n = node->n / 2;
    if (n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "policies: none defined; define at least one");
    if (n > POLICIES_MAX)
        return ratel__yaml_fail(&r->ctx, node->items[2 * POLICIES_MAX]->line,
                                "policies: more than %d", POLICIES_MAX);
    c->policies = calloc(n, sizeof *c->policies);
    r->names = calloc(n, sizeof *r->names);
    first = calloc(n, sizeof *first);
    if (!c->policies || !r->names || !first) {
        free(first);
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    }
    /* Names sorted once: repeats are neighbours, and routes find their
       policies by binary search (a file may define thousands). */
    for (size_t i = 0; i < n; i++) {
        r->names[i].text = node->items[2 * i]->text;
        r->names[i].len = node->items[2 * i]->len;
        r->names[i].index = i;
        first[i] = i;
    }
    qsort(r->names, n, sizeof *r->names, compare_name_index);
    for (size_t i = 1; i < n; i++)
        if (rateld__compare_name(&r->names[i - 1], &r->names[i]) == 0)
            first[r->names[i].index] = first[r->names[i - 1].index];
    r->nnames = n;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const ratel__yaml_node_t *key = node->items[2 * i];
        if (first[i] != i) {
            char path[128];
            ratel__yaml_join(path, sizeof path, "policies", key);
            rc = ratel__yaml_fail(&r->ctx, key->line,
                                  "%s: defined twice (first at line %d)", path,
                                  node->items[2 * first[i]]->line);
        } else if (read_policy(r, key, node->items[2 * i + 1],
                               &c->policies[i]) == 0) {
            c->npolicies++;
        } else {
            free_overrides(&c->policies[i]); /* what it read before failing */
            rc = -1;
        }
    }
    free(first);
    return rc;
}

/* ----------------------------------------------------------------- auth */

static const char *const unmatched_words[] = {"deny", "allow", NULL};
static const int unmatched_values[] = {RATELD_UNMATCHED_DENY,
                                       RATELD_UNMATCHED_ALLOW};
/* deny_status is 429 or 403 (checked after: see read_auth). */
static const ratel__option_t auth_options[] = {
    {"deny_status", RATEL__OPTION_UINT, 403, 429, 0,
     RATEL__FIELD(rateld_auth_t, deny_status), NULL, NULL, NULL},
    {"unmatched", RATEL__OPTION_ENUM, 0, 0, 0,
     RATEL__FIELD(rateld_auth_t, unmatched), unmatched_words, unmatched_values,
     NULL},
};

/* auth's sections, read by read_auth_section. */
static const ratel__option_t auth_sections[] = {{.name = "gateway"}};

static int read_auth_section(void *ud, size_t i, const ratel__yaml_node_t *node)
{
    reader_t *r = ud;
    (void)i; /* the one section: gateway */
    return rateld_gateway_read(&r->ctx, node, "auth.gateway",
                               &r->config->auth.gateway);
}

static int read_auth(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_auth_t *a = &r->config->auth;
    const ratel__yaml_group_t groups[] = {
        {auth_options, COUNT(auth_options), a, NULL, NULL},
        {auth_sections, COUNT(auth_sections), NULL, read_auth_section, r}};
    const ratel__yaml_node_t *v[COUNT(auth_options) + COUNT(auth_sections)];

    if (ratel__yaml_groups(&r->ctx, node, "auth", groups, COUNT(groups), v))
        return -1;
    if (a->deny_status != 403 && a->deny_status != 429)
        return ratel__yaml_fail(&r->ctx, v[0]->line,
                                "auth.deny_status: %d; accepted: 429 (Caddy, "
                                "Traefik, HAProxy, Envoy pass it on) or 403 "
                                "(nginx auth_request)",
                                a->deny_status);
    return 0;
}

/* ------------------------------------------------------------ the file */

/* The top level's own options. */
static const ratel__option_t top_options[] = {
    RATEL__SERVER_OPTIONS(rateld_config_t),
    /* The application's token for /v1/refund and /v1/release: checked as
       the admin token is, by the one token check. */
    {"api_token", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(api_token), NULL, NULL,
     ratel__check_token},
};

/* The top level's sections, read by read_section. */
enum {
    T_TRUSTED,
    T_LIMITS,
    T_STORE,
    T_POLICIES,
    T_ROUTES,
    T_AUTH,
    T_ENVOY,
    T_RLQS,
    T_COUNT
};
static const ratel__option_t top_sections[T_COUNT] = {
    {.name = "trusted_proxies"}, {.name = "limits"}, {.name = "store"},
    {.name = "policies"},        {.name = "routes"}, {.name = "auth"},
    {.name = "envoy"},           {.name = "rlqs"}};

static int read_section(void *ud, size_t i, const ratel__yaml_node_t *node)
{
    reader_t *r = ud;
    rateld_config_t *c = r->config;

    switch (i) {
    case T_TRUSTED:
        return ratel__yaml_trusted(&r->ctx, node, "trusted_proxies",
                                   &c->trusted);
    case T_LIMITS:
        return ratel__yaml_options(&r->ctx, node, "limits",
                                   ratel__limits_options,
                                   ratel__limits_noptions, &c->limits, NULL);
    case T_STORE:
        return read_store(r, node);
    case T_POLICIES:
        return read_policies(r, node);
    case T_AUTH:
        return read_auth(r, node);
    case T_ENVOY:
        return rateld__read_envoy(r, node);
    default: /* T_ROUTES, T_RLQS: after the policies they name (read_top) */
        return 0;
    }
}

static int read_top(reader_t *r, const ratel__yaml_node_t *root)
{
    const ratel__yaml_group_t groups[] = {
        {top_options, COUNT(top_options), r->config, NULL, NULL},
        {top_sections, T_COUNT, NULL, read_section, r}};
    const ratel__yaml_node_t *v[COUNT(top_options) + T_COUNT];
    const ratel__yaml_node_t *const *sections = v + COUNT(top_options);

    if (root->type != RATEL__YAML_MAP) {
        char what[96];
        return ratel__yaml_fail(&r->ctx, root->line,
                                "the top level must be a mapping of fields "
                                "(listen:, store:, policies:, routes:, ...), "
                                "got %s",
                                ratel__yaml_describe(root, what, sizeof what));
    }
    if (ratel__yaml_groups(&r->ctx, root, "", groups, COUNT(groups), v))
        return -1;
    if (!sections[T_POLICIES] && !sections[T_ENVOY])
        return ratel__yaml_fail(&r->ctx, root->line,
                                "policies: required (or an envoy: section); "
                                "define at least one policy (docs/config.md)");
    if (sections[T_ROUTES] && rateld__read_routes(r, sections[T_ROUTES]))
        return -1;
    if (sections[T_RLQS] && rateld__read_rlqs(r, sections[T_RLQS]))
        return -1;
    return 0;
}

int rateld_config_parse(const char *text, size_t len, const char *name,
                        rateld_config_t **out, char *err, size_t errlen)
{
    reader_t r;
    ratel__yaml_node_t *root = NULL;
    rateld_config_t *c;
    int rc;

    memset(&r, 0, sizeof r);
    r.ctx.name = name ? name : "config";
    r.ctx.err = err;
    r.ctx.errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return ratel__yaml_fail(&r.ctx, 1, "no place for the result");
    *out = NULL;
    if (!text && len)
        return ratel__yaml_fail(&r.ctx, 1, "no text");
    if (len > RATEL__CONFIG_MAX_BYTES)
        return ratel__yaml_fail(&r.ctx, 1,
                                "the file is %zu bytes; a configuration may be "
                                "at most 1 MiB",
                                len);
    if (ratel__yaml_load(&r.ctx, text ? text : "", len, &root))
        return -1;
    if (!root || ratel__yaml_is_null(root)) {
        ratel__yaml_free(root);
        return ratel__yaml_fail(&r.ctx, 1,
                                "the file is empty; it needs at least a "
                                "policies: mapping (docs/config.md)");
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        ratel__yaml_free(root);
        return ratel__yaml_fail(&r.ctx, 1, "out of memory");
    }
    snprintf(c->path, sizeof c->path, "%s", r.ctx.name);
    snprintf(c->listen, sizeof c->listen, "127.0.0.1:8080");
    c->threads = 1;
    c->store = RATELD_STORE_MEMORY;
    ratel__memory_settings_init(&c->memory);
    c->auth.deny_status = 429;
    snprintf(c->envoy.algorithm, sizeof c->envoy.algorithm, "%s",
             ratel_algo_name(ratel__algo_with(RATEL_ALGO_DEFAULT)));
    c->envoy.response_headers = 1;
    r.config = c;
    rc = read_top(&r, root);
    ratel__yaml_free(root);
    free(r.names);
    if (rc) {
        rateld_config_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int rateld_config_load(const char *path, rateld_config_t **out, char *err,
                       size_t errlen)
{
    char *text;
    size_t len;
    int rc;

    if (out)
        *out = NULL;
    if (!path) {
        if (err && errlen)
            snprintf(err, errlen, "config: no file given");
        return -1;
    }
    if (ratel__config_read_file(path, &text, &len, err, errlen) != 0)
        return -1;
    rc = rateld_config_parse(text, len, path, out, err, errlen);
    free(text);
    if (rc == 0 && (*out)->envoy.config_dir[0] &&
        rateld__load_erl(*out, path, err, errlen) != 0) {
        rateld_config_free(*out);
        *out = NULL;
        return -1;
    }
    return rc;
}

void rateld_config_free(rateld_config_t *config)
{
    if (!config)
        return;
    for (size_t i = 0; config->policies && i < config->npolicies; i++)
        free_overrides(&config->policies[i]);
    free(config->policies);
    free(config->routes);
    rateld_erl_free(config->erl);
    rateld_rlqs_config_free(config->rlqs);
    free(config);
}
