/*
 * config.c - rateld's configuration: the schema of docs/config.md checked
 * over the tree src/app/yaml.c builds, loading, and the policy and route
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
#include "daemon/config.h"
#include "daemon/erl.h"
#include "daemon/request.h"
#include "store/redis_url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Bounds on what one file may define (real ones define a few dozen). */
#define POLICIES_MAX 4096
#define ROUTES_MAX 4096

#define COUNT(a) RATEL__COUNT(a)
/* A field of the configuration, for a table entry. */
#define CONFIG(f) RATEL__FIELD(rateld_config_t, f)

/* -------------------------------------------------------------- reading */

/* A policy name and its place in the file. */
typedef struct name_ref_s {
    const char *text;
    size_t len;
    size_t index;
} name_ref_t;

/* Messages, and the configuration being filled. */
typedef struct reader_s {
    ratel__yaml_ctx_t ctx;
    rateld_config_t *config;
    name_ref_t *names; /* policy names sorted (read_policies), for routes */
    size_t nnames;
} reader_t;

/* By name (bytes, then length): the order of look-ups. */
static int compare_name(const void *a, const void *b)
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
    int d = compare_name(a, b);
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
    {"max_bytes", RATEL__OPTION_SIZE, (uint64_t)64 << 10, (uint64_t)1 << 40, 0,
     CONFIG(memory_max_bytes), NULL, NULL, NULL},
    {"url", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(redis_url), NULL, NULL,
     ratel__check_nonempty},
};

static int read_store(reader_t *r, const ratel__yaml_node_t *node)
{
    return ratel__yaml_store(&r->ctx, node, store_options, COUNT(store_options),
                             r->config, &r->config->redis);
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
static int tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* A query parameter name: visible ASCII but the query's own delimiters. */
static int qchar(unsigned char ch)
{
    return ch > 0x20 && ch < 0x7f && !strchr("&=#", ch);
}

/* A JSON field name of a key source: visible ASCII but quotes and
   backslashes (which would need escapes). */
static int jchar(unsigned char ch)
{
    return ch > 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
}

static int read_key_part(reader_t *r, const ratel__yaml_node_t *node,
                         const char *path, rateld_key_part_t *part)
{
    static const struct {
        const char *word;
        rateld_key_kind_t kind;
        int named;
    } kinds[] = {
        {"ip", RATELD_KEY_IP, 0},         {"global", RATELD_KEY_GLOBAL, 0},
        {"path", RATELD_KEY_PATH, 0},     {"host", RATELD_KEY_HOST, 0},
        {"header", RATELD_KEY_HEADER, 1}, {"query", RATELD_KEY_QUERY, 1},
        {"cookie", RATELD_KEY_COOKIE, 1}, {"json", RATELD_KEY_JSON, 1}};
    static const char accepted[] =
        "accepted: ip, global, path, host, header:NAME, query:NAME, "
        "cookie:NAME, json:FIELD";
    char what[96];
    const char *text = node->text, *colon;
    size_t klen, i;

    if (node->type == RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: expected a key source, got a mapping "
                                "(write header:NAME with no space after ':'); "
                                "%s",
                                path, accepted);
    if (node->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(node) ||
        memchr(text, '\0', node->len))
        return ratel__yaml_fail(
            &r->ctx, node->line, "%s: expected a key source, got %s; %s", path,
            ratel__yaml_describe(node, what, sizeof what), accepted);
    colon = strchr(text, ':');
    klen = colon ? (size_t)(colon - text) : node->len;
    for (i = 0; i < COUNT(kinds); i++)
        if (strlen(kinds[i].word) == klen &&
            memcmp(kinds[i].word, text, klen) == 0)
            break;
    if (i == COUNT(kinds))
        return ratel__yaml_fail(
            &r->ctx, node->line, "%s: unknown key source %s; %s", path,
            ratel__yaml_describe(node, what, sizeof what), accepted);
    memset(part, 0, sizeof *part);
    part->kind = kinds[i].kind;
    if (!kinds[i].named) {
        if (colon)
            return ratel__yaml_fail(
                &r->ctx, node->line, "%s: %s takes no name (got %s)", path,
                kinds[i].word, ratel__yaml_describe(node, what, sizeof what));
        return 0;
    }
    if (!colon || !colon[1])
        return ratel__yaml_fail(
            &r->ctx, node->line, "%s: %s: needs a name, e.g. %s:%s", path,
            kinds[i].word, kinds[i].word,
            part->kind == RATELD_KEY_HEADER   ? "X-User-Id"
            : part->kind == RATELD_KEY_COOKIE ? "session"
                                              : "telephone");
    if (strlen(colon + 1) >= RATELD_FIELD_MAX)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: the %s name is longer than %d bytes", path,
                                kinds[i].word, RATELD_FIELD_MAX - 1);
    for (const char *p = colon + 1; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        int query = part->kind == RATELD_KEY_QUERY,
            json = part->kind == RATELD_KEY_JSON;
        if (query ? !qchar(ch) : json ? !jchar(ch) : !tchar(ch))
            return ratel__yaml_fail(
                &r->ctx, node->line, "%s: %s is not a valid %s name", path,
                ratel__yaml_describe(node, what, sizeof what),
                query  ? "query parameter"
                : json ? "JSON field"
                       : kinds[i].word);
    }
    memcpy(part->name, colon + 1, strlen(colon + 1) + 1);
    return 0;
}

static int read_key(reader_t *r, const ratel__yaml_node_t *node,
                    const char *path, rateld_policy_t *p)
{
    char item[320];
    const ratel__yaml_node_t *const *items = &node;
    size_t n = 1;

    if (node->type == RATEL__YAML_LIST) {
        if (ratel__yaml_list(&r->ctx, node, path, RATELD_KEY_PARTS_MAX,
                             "key sources"))
            return -1;
        if (node->n == 0)
            return ratel__yaml_fail(&r->ctx, node->line,
                                    "%s: an empty list; give at least one key "
                                    "source (ip, global, path, host, "
                                    "header:NAME, query:NAME, cookie:NAME, "
                                    "json:FIELD)",
                                    path);
        items = (const ratel__yaml_node_t *const *)node->items;
        n = node->n;
    }
    for (size_t i = 0; i < n; i++) {
        rateld_key_part_t *part = &p->key[i];
        if (node->type == RATEL__YAML_LIST)
            snprintf(item, sizeof item, "%s[%zu]", path, i);
        else
            snprintf(item, sizeof item, "%s", path);
        if (read_key_part(r, items[i], item, part))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (p->key[j].kind == part->kind &&
                strcmp(p->key[j].name, part->name) == 0)
                return ratel__yaml_fail(&r->ctx, items[i]->line,
                                        "%s: repeats %s[%zu]", item, path, j);
        if (part->kind == RATELD_KEY_GLOBAL && n > 1)
            return ratel__yaml_fail(&r->ctx, items[i]->line,
                                    "%s: global is one bucket for everyone; it "
                                    "cannot be combined with other key sources",
                                    item);
    }
    p->nkey = n;
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
        o->when.kind = RATELD_KEY_SELF;
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
    for (size_t i = 0; i < p->nkey; i++)
        if (p->key[i].kind == RATELD_KEY_JSON)
            return 1;
    for (size_t i = 0; i < p->noverrides; i++)
        if (p->overrides[i].when.kind == RATELD_KEY_JSON)
            return 1;
    return 0;
}

static int read_policy(reader_t *r, const ratel__yaml_node_t *key,
                       const ratel__yaml_node_t *node, rateld_policy_t *p)
{
    static const char *const names[] = {"rules", "key", "on_missing", "shadow",
                                        "overrides"};
    static const char *const missing[] = {"reject", "shared"};
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
    p->nkey = 1;
    p->key[0].kind = RATELD_KEY_IP;
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
        else
            rc = read_overrides(r, v[i], field, p);
        if (rc)
            return -1;
        if (i == 2)
            p->on_missing =
                word ? RATELD_MISSING_SHARED : RATELD_MISSING_REJECT;
    }
    if (!v[0])
        return ratel__yaml_fail(
            &r->ctx, node->line,
            "%s.rules: required (a rule such as 10/1m, or a "
            "list of up to %d)",
            path, RATEL_MAX_RULES);
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
        if (compare_name(&r->names[i - 1], &r->names[i]) == 0)
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

/* --------------------------------------------------------------- routes */

static int read_route_policies(reader_t *r, const ratel__yaml_node_t *node,
                               const char *path, rateld_route_t *route)
{
    const rateld_config_t *c = r->config;
    char item[160], what[96];

    if (ratel__yaml_list(&r->ctx, node, path, RATELD_ROUTE_POLICIES_MAX,
                         "policy names"))
        return -1;
    if (node->n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: an empty list; name at least one policy",
                                path);
    for (size_t i = 0; i < node->n; i++) {
        const ratel__yaml_node_t *it = node->items[i];
        const rateld_policy_t *p = NULL;
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        if (it->type == RATEL__YAML_SCALAR) {
            name_ref_t want = {it->text, it->len, 0};
            const name_ref_t *found =
                bsearch(&want, r->names, r->nnames, sizeof want, compare_name);
            p = found ? &c->policies[found->index] : NULL;
        }
        if (!p) {
            char names[200];
            rateld_config_policy_names(c, names, sizeof names);
            return ratel__yaml_fail(
                &r->ctx, it->line, "%s: no policy named %s; defined: %s", item,
                ratel__yaml_describe(it, what, sizeof what), names);
        }
        route->policies[i] = (size_t)(p - c->policies);
        for (size_t j = 0; j < i; j++)
            if (route->policies[j] == route->policies[i])
                return ratel__yaml_fail(&r->ctx, it->line,
                                        "%s: repeats %s[%zu]", item, path, j);
    }
    route->npolicies = node->n;
    return 0;
}

static int read_route_path(reader_t *r, const ratel__yaml_node_t *v,
                           const char *field, rateld_route_t *route)
{
    char q[96];

    if (ratel__yaml_string(&r->ctx, v, field, route->prefix,
                           sizeof route->prefix))
        return -1;
    ratel__yaml_quote(route->prefix, strlen(route->prefix), q, sizeof q);
    if (route->prefix[0] != '/')
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: \"%s\" must start with '/'", field, q);
    if (strpbrk(route->prefix, " ?#"))
        return ratel__yaml_fail(
            &r->ctx, v->line,
            "%s: \"%s\": a path prefix has no spaces, query "
            "or fragment",
            field, q);
    return 0;
}

static int read_route_method(reader_t *r, const ratel__yaml_node_t *v,
                             const char *field, rateld_route_t *route)
{
    char q[96];

    if (ratel__yaml_string(&r->ctx, v, field, route->method,
                           sizeof route->method))
        return -1;
    ratel__yaml_quote(route->method, strlen(route->method), q, sizeof q);
    if (!route->method[0])
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: is empty (leave it out to match any "
                                "method)",
                                field);
    for (const char *m = route->method; *m; m++)
        if (!(*m >= 'A' && *m <= 'Z') && !(*m >= '0' && *m <= '9') &&
            *m != '-' && *m != '_')
            return ratel__yaml_fail(&r->ctx, v->line,
                                    "%s: \"%s\" is not an upper-case method "
                                    "such as GET or POST",
                                    field, q);
    return 0;
}

/* A host name to match: "api.example.com" or "*.example.com", stored in
   lower case; no port, no spaces. */
static int read_route_host(reader_t *r, const ratel__yaml_node_t *v,
                           const char *field, rateld_route_t *route)
{
    char q[96];
    char *h = route->host;

    if (ratel__yaml_string(&r->ctx, v, field, route->host, sizeof route->host))
        return -1;
    ratel__yaml_quote(h, strlen(h), q, sizeof q);
    if (!h[0] || !strcmp(h, "*") || !strcmp(h, "*."))
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: \"%s\": give a host name such as "
                                "api.example.com or *.example.com (leave host "
                                "out to match any)",
                                field, q);
    for (char *c = h; *c; c++) {
        unsigned char ch = (unsigned char)*c;
        if (ch >= 'A' && ch <= 'Z')
            *c = (char)(ch + 32);
        else if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                   ch == '.' || ch == '-' || ch == '_' ||
                   (ch == '*' && c == h && c[1] == '.')))
            return ratel__yaml_fail(&r->ctx, v->line,
                                    "%s: \"%s\" is not a host name: letters, "
                                    "digits, '.', '-', and '*.' only at the "
                                    "start; no port",
                                    field, q);
    }
    return 0;
}

/* headers: {NAME: VALUE, ...}: each must be sent with exactly VALUE. */
static int read_route_headers(reader_t *r, const ratel__yaml_node_t *v,
                              const char *field, rateld_route_t *route)
{
    char item[320], what[96];

    if (v->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: expected a mapping of header names to "
                                "values (e.g. {X-Tenant: gold}), got %s",
                                field,
                                ratel__yaml_describe(v, what, sizeof what));
    if (v->n / 2 > RATELD_ROUTE_HEADERS_MAX)
        return ratel__yaml_fail(&r->ctx, v->line, "%s: more than %d headers",
                                field, RATELD_ROUTE_HEADERS_MAX);
    for (size_t i = 0; i < v->n / 2; i++) {
        const ratel__yaml_node_t *k = v->items[2 * i],
                                 *val = v->items[2 * i + 1];
        rateld_match_header_t *h = &route->headers[i];
        ratel__yaml_join(item, sizeof item, field, k);
        if (k->len == 0 || k->len >= sizeof h->name)
            return ratel__yaml_fail(&r->ctx, k->line,
                                    "%s: a header name is 1..%zu characters",
                                    item, sizeof h->name - 1);
        for (size_t j = 0; j < k->len; j++)
            if (!tchar((unsigned char)k->text[j]))
                return ratel__yaml_fail(&r->ctx, k->line,
                                        "%s: not a valid header name", item);
        memcpy(h->name, k->text, k->len + 1);
        if (ratel__yaml_string(&r->ctx, val, item, h->value, sizeof h->value))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcasecmp(route->headers[j].name, h->name) == 0)
                return ratel__yaml_fail(&r->ctx, k->line,
                                        "%s: header named twice (any case)",
                                        item);
    }
    route->nheaders = v->n / 2;
    return 0;
}

static int read_route(reader_t *r, const ratel__yaml_node_t *node, size_t index,
                      rateld_route_t *route)
{
    static const char *const names[] = {"path", "method", "policies", "host",
                                        "headers"};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    char path[64], field[96];

    snprintf(path, sizeof path, "routes[%zu]", index);
    if (ratel__yaml_fields(&r->ctx, node, path, names, COUNT(names), v))
        return -1;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        int rc;
        snprintf(field, sizeof field, "%s.%s", path, names[i]);
        rc = i == 0   ? read_route_path(r, v[i], field, route)
             : i == 1 ? read_route_method(r, v[i], field, route)
             : i == 2 ? read_route_policies(r, v[i], field, route)
             : i == 3 ? read_route_host(r, v[i], field, route)
                      : read_route_headers(r, v[i], field, route);
        if (rc)
            return -1;
    }
    if (!v[0])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.path: required (a path prefix such as "
                                "/api/ping)",
                                path);
    if (!v[2])
        return ratel__yaml_fail(
            &r->ctx, node->line,
            "%s.policies: required (a list of policy names)", path);
    return 0;
}

/* Whether two routes match exactly the same requests (headers compared
   in order: a reordered list is a different route, which is harmless). */
static int same_match(const rateld_route_t *a, const rateld_route_t *b)
{
    if (strcmp(a->prefix, b->prefix) || strcmp(a->method, b->method) ||
        strcmp(a->host, b->host) || a->nheaders != b->nheaders)
        return 0;
    for (size_t i = 0; i < a->nheaders; i++)
        if (strcasecmp(a->headers[i].name, b->headers[i].name) ||
            strcmp(a->headers[i].value, b->headers[i].value))
            return 0;
    return 1;
}

static int read_routes(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_config_t *c = r->config;

    if (ratel__yaml_list(&r->ctx, node, "routes", ROUTES_MAX, "routes"))
        return -1;
    if (node->n == 0)
        return 0;
    c->routes = calloc(node->n, sizeof *c->routes);
    if (!c->routes)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t i = 0; i < node->n; i++) {
        rateld_route_t *route = &c->routes[i];
        if (read_route(r, node->items[i], i, route))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (same_match(&c->routes[j], route))
                return ratel__yaml_fail(&r->ctx, node->items[i]->line,
                                        "routes[%zu]: same path, method, host "
                                        "and headers as routes[%zu]",
                                        i, j);
        c->nroutes++;
    }
    return 0;
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

static int read_auth(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_auth_t *a = &r->config->auth;
    const ratel__yaml_node_t *v[COUNT(auth_options)];

    if (ratel__yaml_options(&r->ctx, node, "auth", auth_options,
                            COUNT(auth_options), a, v))
        return -1;
    if (a->deny_status != 403 && a->deny_status != 429)
        return ratel__yaml_fail(&r->ctx, v[0]->line,
                                "auth.deny_status: %d; accepted: 429 (Caddy, "
                                "Traefik, HAProxy, Envoy pass it on) or 403 "
                                "(nginx auth_request)",
                                a->deny_status);
    return 0;
}

/* ---------------------------------------------------------------- envoy */

static int check_algorithm(const char *text, char *why, size_t whylen)
{
    if (rateld_erl_algorithm_ok(text))
        return 0;
    snprintf(why, whylen, "\"%.32s\"; accepted: sliding, fixed, approx, gcra",
             text);
    return -1;
}

static const char *const domain_words[] = {"error", "allow", NULL};
static const int domain_values[] = {0, 1};
#define ENVOY(f) RATEL__FIELD(rateld_envoy_t, f)
static const ratel__option_t envoy_options[] = {
    {"listen", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(listen), NULL, NULL,
     ratel__check_listen},
    {"config_dir", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(config_dir), NULL, NULL,
     NULL},
    {"algorithm", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(algorithm), NULL, NULL,
     check_algorithm},
    {"unknown_domain", RATEL__OPTION_ENUM, 0, 0, 0, ENVOY(unknown_domain_allow),
     domain_words, domain_values, NULL},
    {"response_headers", RATEL__OPTION_BOOL, 0, 0, 0, ENVOY(response_headers),
     NULL, NULL, NULL},
    {"max_message_bytes", RATEL__OPTION_SIZE, 64, 16777216, 1,
     ENVOY(limits.max_message_bytes), NULL, NULL, NULL},
    {"max_streams", RATEL__OPTION_UINT, 1, 100000, 1, ENVOY(limits.max_streams),
     NULL, NULL, NULL},
    {"max_header_list_bytes", RATEL__OPTION_SIZE, 1024, 1048576, 1,
     ENVOY(limits.max_header_list_bytes), NULL, NULL, NULL},
    {"idle_timeout_ms", RATEL__OPTION_MSEC, 1, 86400000, 1,
     ENVOY(limits.idle_timeout_ms), NULL, NULL, NULL},
    {"max_resets_per_second", RATEL__OPTION_UINT, 1, 1000000, 1,
     ENVOY(limits.max_resets_per_second), NULL, NULL, NULL},
};

static int read_envoy(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_envoy_t *e = &r->config->envoy;

    e->line = node->line;
    if (ratel__yaml_options(&r->ctx, node, "envoy", envoy_options,
                            COUNT(envoy_options), e, NULL))
        return -1;
    if (!e->listen[0] || !e->config_dir[0])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "envoy: needs listen (the gRPC address, e.g. "
                                "127.0.0.1:8081) and config_dir (the "
                                "directory of envoyproxy/ratelimit files)");
    return 0;
}

/*
 * Loads envoy.config_dir (relative to the config file's directory unless
 * absolute) into config->erl.
 */
static int load_erl(rateld_config_t *c, const char *path, char *err,
                    size_t errlen)
{
    const char *dir = c->envoy.config_dir, *slash = strrchr(path, '/');
    char full[1200];

    if (dir[0] != '/' && slash)
        snprintf(full, sizeof full, "%.*s/%s", (int)(slash - path), path, dir);
    else
        snprintf(full, sizeof full, "%s", dir);
    return rateld_erl_load_dir(full, c->envoy.algorithm, &c->erl, err, errlen);
}

/* ------------------------------------------------------------ the file */

/* The top level's own options. */
static const ratel__option_t top_options[] = {
    RATEL__SERVER_OPTIONS(rateld_config_t),
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
    T_COUNT
};
static const ratel__option_t top_sections[T_COUNT] = {
    {.name = "trusted_proxies"},
    {.name = "limits"},
    {.name = "store"},
    {.name = "policies"},
    {.name = "routes"},
    {.name = "auth"},
    {.name = "envoy"}};

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
        return read_envoy(r, node);
    default: /* T_ROUTES: after the policies they name (read_top) */
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
    if (sections[T_ROUTES] && read_routes(r, sections[T_ROUTES]))
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
    c->memory_max_bytes = (size_t)64 << 20;
    c->auth.deny_status = 429;
    snprintf(c->envoy.algorithm, sizeof c->envoy.algorithm, "sliding");
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
        load_erl(*out, path, err, errlen) != 0) {
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
    free(config);
}

/* ------------------------------------------------------------- look-ups */

void rateld_config_policy_names(const rateld_config_t *config, char *buf,
                                size_t len)
{
    size_t n = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; config && i < config->npolicies; i++) {
        int m = snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
                         config->policies[i].name);
        if (m < 0 || (size_t)m >= len - n) {
            /* Cut: end with "..." where it fits. */
            if (len >= 4)
                memcpy(buf + len - 4, "...", 4);
            return;
        }
        n += (size_t)m;
    }
}

const rateld_policy_t *rateld_config_policy(const rateld_config_t *config,
                                            const char *name, size_t len)
{
    if (!config || !name)
        return NULL;
    for (size_t i = 0; i < config->npolicies; i++) {
        const rateld_policy_t *p = &config->policies[i];
        if (strlen(p->name) == len && memcmp(p->name, name, len) == 0)
            return p;
    }
    return NULL;
}

/* Whether the original Host (`host`, maybe with ":PORT") is `want` (lower
   case; "*.example.com" is any name under example.com). */
static int host_matches(const char *want, ratel_http_str_t host)
{
    size_t n = host.n, w;

    if (n > 0 && host.p[0] != '[') /* drop ":PORT" (not in IPv6 "[...]") */
        for (size_t i = n; i-- > 0;)
            if (host.p[i] == ':') {
                n = i;
                break;
            }
    if (n > 0 && host.p[n - 1] == '.') /* a fully qualified "name." */
        n--;
    if (want[0] == '*') {
        w = strlen(want + 1); /* ".example.com" */
        return n > w && strncasecmp(host.p + n - w, want + 1, w) == 0;
    }
    w = strlen(want);
    return n == w && strncasecmp(host.p, want, w) == 0;
}

static int headers_match(const rateld_route_t *r,
                         const ratel_http_request_t *req)
{
    for (size_t i = 0; i < r->nheaders; i++) {
        const ratel_http_str_t *h =
            req ? ratel_http_header(req, r->headers[i].name) : NULL;
        size_t n = strlen(r->headers[i].value), a = 0, b;
        if (!h)
            return 0;
        b = h->n;
        while (a < b && (h->p[a] == ' ' || h->p[a] == '\t'))
            a++;
        if (b - a != n || memcmp(h->p + a, r->headers[i].value, n) != 0)
            return 0;
    }
    return 1;
}

/* Whether `path` starts with the route's prefix at a segment boundary:
   "/api" is a prefix of "/api", "/api/x" and "/api?x", not of "/apix". */
static int prefix_matches(const char *prefix, size_t n, ratel_http_str_t path)
{
    if (n == 0 || n > path.n || memcmp(path.p, prefix, n) != 0)
        return 0;
    return n == path.n || prefix[n - 1] == '/' || path.p[n] == '/' ||
           path.p[n] == '?';
}

/* How specific a route is beyond its prefix: host, method, headers. */
static size_t specificity(const rateld_route_t *r)
{
    return (r->host[0] ? 1000 : 0) + (r->method[0] ? 100 : 0) + r->nheaders;
}

const rateld_route_t *rateld_config_route(const rateld_config_t *config,
                                          const rateld_route_query_t *q)
{
    const rateld_route_t *best = NULL;
    size_t best_len = 0;

    if (!config || !q || !q->path.p)
        return NULL;
    for (size_t i = 0; i < config->nroutes; i++) {
        const rateld_route_t *r = &config->routes[i];
        size_t n = strlen(r->prefix);
        if (!prefix_matches(r->prefix, n, q->path))
            continue;
        if (r->method[0] && (!q->method.p || strlen(r->method) != q->method.n ||
                             memcmp(r->method, q->method.p, q->method.n) != 0))
            continue;
        if (r->host[0] && !host_matches(r->host, q->host))
            continue;
        if (!headers_match(r, q->req))
            continue;
        if (!best || n > best_len ||
            (n == best_len && specificity(r) > specificity(best))) {
            best = r;
            best_len = n;
        }
    }
    return best;
}
