/*
 * erl_load.c - an envoyproxy/ratelimit ("ERL") configuration file read
 * unchanged into the loaded set (erl.h; erl_dir.c reads a directory of
 * them, erl_match.c matches descriptors against the set).
 *
 * A file is read by the shared YAML reader (server/app/yaml.h) into a tree
 * with lines, then checked field by field against ERL's schema as ERL's
 * src/config/config_impl.go reads it:
 *
 *   - `domain` required and not empty; `descriptors` a list of mappings;
 *     a file without descriptors is a domain without limits;
 *   - each descriptor: `key` required, `value` optional ("" is none);
 *     two descriptors of one list with the same key and value refused;
 *   - `rate_limit`: `unit` one of ERL's units (any case: ERL upper-cases
 *     it), `requests_per_unit` a uint32, `unlimited: true` without a unit,
 *     `name`, `replaces` entries neither empty nor the limit's own name;
 *   - booleans as ERL's YAML 1.1 reader takes them (true, yes, on, y and
 *     their capitalised and negative forms), not in quotes; null is the
 *     same as absent, as it is for ERL.
 *
 * Descriptors are matched by key and value as two strings. ERL joins them
 * into one "key_value" string before looking it up, so its key "a_b"
 * without value collides with key "a" value "b", and its wildcard "a_b*"
 * also matches key "a_bc"; rateld keeps the pair apart (a file ERL
 * refuses for such a collision loads here, and matching differs only for
 * keys that such a collision would confuse). A `*` in a key is a plain
 * byte here; ERL's README gives wildcards to values only.
 */
#include "app/yaml.h"
#include "rateld/erl_private.h"
#include "ratel_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Room for a field's path in messages ("descriptors[0].rate_limit.unit"). */
#define PATH_LEN 512

/* ------------------------------------------------------------- tables */

/*
 * The algorithms a limit may name: those that limit a rate
 * (RATEL_ALGO_RATE; the service has no call to release a lease). One that
 * follows a calendar (RATEL_ALGO_CALENDAR) takes the calendar periods Nmo
 * (and aligns 1w to Monday), so month and year are calendar months and
 * years for it. Returns the algorithm named by the `len` bytes at `name`,
 * or -1.
 */
static int erl_algorithm(const char *name, size_t len)
{
    for (int a = 0; a < RATEL_ALGOS; a++) {
        const char *n = ratel_algo_name((ratel_algo_t)a);
        if ((ratel_algo_facts((ratel_algo_t)a) & RATEL_ALGO_RATE) &&
            strlen(n) == len && memcmp(n, name, len) == 0)
            return a;
    }
    return -1;
}

/*
 * ERL's units (envoy's rls.proto numbers) and the rule periods they become:
 * `rate` for sliding and gcra, `calendar` for fixed and approx. ERL's own
 * windows are fixed ones of 1, 60, 3600, 86400, 7*86400, 30*86400 and
 * 365*86400 seconds from the Unix epoch. A month is those 30 days for a
 * sliding window or a bucket (ratel's longest period, 30d), and the
 * calendar month for a fixed or approx window, which is what "100 a month"
 * means to people; a year only exists as the calendar year (12mo).
 */
static const struct erl_unit_s {
    const char *word;
    int number;
    const char *rate;     /* NULL: no period for sliding and gcra */
    const char *calendar; /* fixed and approx */
} erl_units[] = {
    {"second", 1, "1s", "1s"}, {"minute", 2, "1m", "1m"},
    {"hour", 3, "1h", "1h"},   {"day", 4, "1d", "1d"},
    {"week", 7, "1w", "1w"},   {"month", 5, "30d", "1mo"},
    {"year", 6, NULL, "12mo"},
};

/*
 * Every key ERL knows and where it reads it: a key of this list found
 * elsewhere is ignored by ERL (it checks names against one flat list), so
 * rateld refuses it with the place it belongs instead of ignoring it.
 */
static const struct erl_known_s {
    const char *name;
    const char *where;
} erl_known[] = {
    {"domain", "at the top of a file"},
    {"descriptors", "at the top of a file or in a descriptor"},
    {"key", "in a descriptor"},
    {"value", "in a descriptor"},
    {"rate_limit", "in a descriptor"},
    {"shadow_mode", "in a descriptor, beside rate_limit"},
    {"quota_mode", "in a descriptor, beside rate_limit"},
    {"detailed_metric", "in a descriptor, beside rate_limit"},
    {"value_to_metric", "in a descriptor, beside rate_limit"},
    {"share_threshold", "in a descriptor, beside rate_limit"},
    {"metadata", "in a descriptor, beside rate_limit"},
    {"unit", "inside rate_limit"},
    {"requests_per_unit", "inside rate_limit"},
    {"unlimited", "inside rate_limit"},
    {"replaces", "inside rate_limit"},
    {"name", "inside rate_limit or in an entry of its replaces"},
    {"algorithm", "inside rate_limit"},
    {"burst", "inside rate_limit"},
    {"rules", "inside rate_limit"},
};

static const char *const top_fields[] = {"domain", "descriptors"};

static const char *const descriptor_fields[] = {"key",
                                                "value",
                                                "rate_limit",
                                                "descriptors",
                                                "shadow_mode",
                                                "quota_mode",
                                                "detailed_metric",
                                                "value_to_metric",
                                                "share_threshold",
                                                "metadata"};
enum {
    D_KEY,
    D_VALUE,
    D_RATE_LIMIT,
    D_DESCRIPTORS,
    D_SHADOW,
    D_QUOTA,
    D_DETAILED,
    D_VALUE_TO_METRIC,
    D_SHARE,
    D_METADATA
};

static const char *const limit_fields[] = {
    "unit",     "requests_per_unit", "unlimited", "name",
    "replaces", "algorithm",         "burst",     "rules"};
enum {
    L_UNIT,
    L_RPU,
    L_UNLIMITED,
    L_NAME,
    L_REPLACES,
    L_ALGO,
    L_BURST,
    L_RULES
};

static const char *const replace_fields[] = {"name"};

/* YAML 1.1's booleans, which ERL's reader (go-yaml v2) takes. */
static const char *const yes_words[] = {
    "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"};
static const char *const no_words[] = {
    "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"};

/* ------------------------------------------------------------ reading */

/* One file being read. */
typedef struct reader_s {
    rateld_erl_t *erl;
    ratel__yaml_ctx_t ctx;
    const char *file;   /* the name, owned by the set once it is added */
    const char *domain; /* owned by the domain being built */
    erl_domain_t *into; /* the domain this file merges into, or NULL */
    size_t depth;       /* descriptor levels open */
    rateld_erl_level_t levels[RATELD_ERL_DEPTH_MAX];
    size_t pathlen[RATELD_ERL_DEPTH_MAX + 1]; /* key_path at each depth */
    char key_path[RATELD_ERL_KEY_PATH_LEN];
} reader_t;

/* A value given and not null (null is absent for ERL). */
static const ratel__yaml_node_t *given(const ratel__yaml_node_t *v)
{
    return v && !ratel__yaml_is_null(v) ? v : NULL;
}

static int key_is(const ratel__yaml_node_t *key, const char *name)
{
    return key->len == strlen(name) && memcmp(key->text, name, key->len) == 0;
}

/* The line of `name`'s key in mapping `node` (which has it). */
static int key_line(const ratel__yaml_node_t *node, const char *name)
{
    for (size_t e = 0; e + 1 < node->n; e += 2)
        if (key_is(node->items[e], name))
            return node->items[e]->line;
    return node->line;
}

/*
 * ratel__yaml_fields, after a look for the first key the mapping may not
 * have: one that ERL knows from another place is refused with that place
 * (ERL ignores it, which hides the mistake); any other is left to
 * ratel__yaml_fields' "unknown field; accepted: ...".
 */
static int read_fields(reader_t *r, const ratel__yaml_node_t *node,
                       const char *path, const char *const *names, size_t n,
                       const ratel__yaml_node_t **values)
{
    char field[320];

    for (size_t e = 0; node->type == RATEL__YAML_MAP && e + 1 < node->n;
         e += 2) {
        const ratel__yaml_node_t *key = node->items[e];
        size_t i = 0, k = 0;
        while (i < n && !key_is(key, names[i]))
            i++;
        if (i < n)
            continue;
        while (k < COUNT(erl_known) && !key_is(key, erl_known[k].name))
            k++;
        if (k == COUNT(erl_known))
            break;
        ratel__yaml_join(field, sizeof field, path, key);
        return ratel__yaml_fail(&r->ctx, key->line,
                                "%s: not read here; envoyproxy/ratelimit "
                                "reads %s only %s and ignores it elsewhere: "
                                "move it there or remove it",
                                field, erl_known[k].name, erl_known[k].where);
    }
    if (ratel__yaml_fields(&r->ctx, node, path, names, n, values))
        return -1;
    for (size_t i = 0; i < n; i++)
        values[i] = given(values[i]);
    return 0;
}

/* A string of at most `max` bytes into out (max + 1 bytes). */
static int read_text(reader_t *r, const ratel__yaml_node_t *v, const char *path,
                     char *out, size_t max)
{
    return ratel__yaml_string(&r->ctx, v, path, out, max + 1);
}

/* A boolean as ERL reads it; absent is false. */
static int read_flag(reader_t *r, const ratel__yaml_node_t *v, const char *path,
                     int *out)
{
    char what[96];

    *out = 0;
    if (!v)
        return 0;
    for (size_t i = 0;
         v->type == RATEL__YAML_SCALAR && !v->quoted && i < COUNT(yes_words);
         i++) {
        *out = key_is(v, yes_words[i]);
        if (*out || key_is(v, no_words[i]))
            return 0;
    }
    return ratel__yaml_fail(&r->ctx, v->line,
                            "%s: expected true or false, got %s%s", path,
                            ratel__yaml_describe(v, what, sizeof what),
                            v->quoted ? " (in quotes, a string)" : "");
}

/* A whole number 0..max written without quotes. */
static int read_count(reader_t *r, const ratel__yaml_node_t *v,
                      const char *path, uint64_t max, uint32_t *out)
{
    char what[96];
    uint64_t n = 0;
    size_t i = 0;

    if (v->type == RATEL__YAML_SCALAR)
        while (i < v->len && v->text[i] >= '0' && v->text[i] <= '9' && n <= max)
            n = n * 10 + (uint64_t)(v->text[i++] - '0');
    if (v->type == RATEL__YAML_SCALAR && i == v->len && i > 0 && n <= max) {
        if (!v->quoted) {
            *out = (uint32_t)n;
            return 0;
        }
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: expected a number, got the string %s "
                                "(write it without quotes)",
                                path,
                                ratel__yaml_describe(v, what, sizeof what));
    }
    return ratel__yaml_fail(&r->ctx, v->line,
                            "%s: expected a whole number from 0 to %llu, "
                            "got %s",
                            path, (unsigned long long)max,
                            ratel__yaml_describe(v, what, sizeof what));
}

/* Ends a path cut short by its buffer with "...". */
static const char *path_fit(char *buf, size_t cap, int n)
{
    if (n < 0 || (size_t)n >= cap)
        memcpy(buf + cap - 4, "...", 4);
    return buf;
}

/* "path.field" for messages. */
static const char *field_of(char *buf, size_t cap, const char *path,
                            const char *field)
{
    return path_fit(
        buf, cap,
        snprintf(buf, cap, "%s%s%s", path, path[0] ? "." : "", field));
}

/* "path[i]" for messages. */
static const char *item_of(char *buf, size_t cap, const char *path, size_t i)
{
    return path_fit(buf, cap, snprintf(buf, cap, "%s[%zu]", path, i));
}

/* Frees what a limit owns (its replaces and levels). */
static void limit_clear(rateld_erl_limit_t *lim)
{
    for (size_t i = 0; i < lim->nreplaces; i++)
        free(lim->replaces[i]);
    free(lim->replaces);
    free((void *)lim->levels);
    lim->replaces = NULL;
    lim->nreplaces = 0;
    lim->levels = NULL;
}

/* rate_limit.replaces: entries {name: NAME}, checked as ERL does. */
static int read_replaces(reader_t *r, const ratel__yaml_node_t *node,
                         const char *path, rateld_erl_limit_t *lim)
{
    char item[PATH_LEN], field[PATH_LEN + 8], name[RATELD_ERL_KEY_MAX + 1];
    const ratel__yaml_node_t *v[1];

    if (ratel__yaml_list(&r->ctx, node, path, RATELD_ERL_REPLACES_MAX,
                         "replaces entries ({name: NAME})"))
        return -1;
    lim->replaces = calloc(node->n + 1, sizeof *lim->replaces);
    if (!lim->replaces)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t i = 0; i < node->n; i++) {
        const ratel__yaml_node_t *it = node->items[i];
        item_of(item, sizeof item, path, i);
        if (read_fields(r, it, item, replace_fields, 1, v))
            return -1;
        field_of(field, sizeof field, item, "name");
        if (v[0] && read_text(r, v[0], field, name, RATELD_ERL_KEY_MAX))
            return -1;
        if (!v[0] || name[0] == '\0')
            return ratel__yaml_fail(&r->ctx, v[0] ? v[0]->line : it->line,
                                    "%s: empty; an entry of replaces names "
                                    "the rate_limit it drops "
                                    "(envoyproxy/ratelimit: should not have "
                                    "an empty replaces entry)",
                                    field);
        if (strcmp(name, lim->name) == 0)
            return ratel__yaml_fail(&r->ctx, v[0]->line,
                                    "%s: \"%s\" is this rate_limit's own "
                                    "name (envoyproxy/ratelimit: replaces "
                                    "should not contain name of same "
                                    "descriptor)",
                                    field, name);
        lim->replaces[i] = strdup(name);
        if (!lim->replaces[i])
            return ratel__yaml_fail(&r->ctx, it->line, "out of memory");
        lim->nreplaces = i + 1;
    }
    return 0;
}

/* rate_limit.rules: ratel rules, read as everywhere else in ratel. */
static int read_rules(reader_t *r, const ratel__yaml_node_t *node,
                      const char *path, rateld_erl_limit_t *lim)
{
    ratel_rule_t rules[RATEL_MAX_RULES];
    char item[PATH_LEN], why[512], what[96];

    if (ratel__yaml_list(&r->ctx, node, path, RATEL_MAX_RULES, "rules"))
        return -1;
    if (node->n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: empty; give at least one rule, e.g. "
                                "[\"20/m\", \"1000/d:fixed\"]",
                                path);
    for (size_t i = 0; i < node->n; i++) {
        const ratel__yaml_node_t *it = node->items[i];
        item_of(item, sizeof item, path, i);
        if (it->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(it))
            return ratel__yaml_fail(
                &r->ctx, it->line,
                "%s: expected a rule such as \"20/m\", "
                "got %s",
                item, ratel__yaml_describe(it, what, sizeof what));
        if (ratel_rule_parse(it->text, it->len, &rules[i], why, sizeof why))
            return ratel__yaml_fail(&r->ctx, it->line, "%s: %s", item, why);
        if (!(ratel_algo_facts(rules[i].algo) & RATEL_ALGO_RATE)) {
            char rate[96];
            ratel__algo_list(RATEL_ALGO_RATE, "", " or ", rate, sizeof rate);
            return ratel__yaml_fail(&r->ctx, it->line,
                                    "%s: a %s rule holds a lease "
                                    "until it is released, and the rate "
                                    "limit service has no release call; use "
                                    "%s",
                                    item, ratel_algo_name(rules[i].algo), rate);
        }
    }
    if (ratel_policy_init(&lim->policy, rules, node->n, why, sizeof why))
        return ratel__yaml_fail(&r->ctx, node->line, "%s: %s", path, why);
    lim->requests_per_unit = rules[0].limit;
    lim->unit = rateld_erl_rule_unit(&rules[0]);
    return 0;
}

/* unlimited: true - ERL refuses a unit with it and ignores the rest. */
static int check_unlimited(reader_t *r, const ratel__yaml_node_t *const *v,
                           const char *path, rateld_erl_limit_t *lim)
{
    static const size_t refused[] = {L_UNIT, L_ALGO, L_BURST, L_RULES};
    char field[PATH_LEN];

    for (size_t k = 0; k < COUNT(refused); k++)
        if (v[refused[k]])
            return ratel__yaml_fail(
                &r->ctx, v[refused[k]]->line,
                "%s: unlimited: true takes no %s%s; remove one of them",
                field_of(field, sizeof field, path, limit_fields[refused[k]]),
                limit_fields[refused[k]],
                refused[k] == L_UNIT ? " (envoyproxy/ratelimit: should not "
                                       "specify rate limit unit when "
                                       "unlimited)"
                                     : "");
    if (v[L_RPU] &&
        read_count(r, v[L_RPU],
                   field_of(field, sizeof field, path, "requests_per_unit"),
                   UINT32_MAX, &lim->requests_per_unit))
        return -1;
    lim->unit = 0;
    return 0;
}

/* The unit's index in erl_units, or -1 with a message. */
static int read_unit(reader_t *r, const ratel__yaml_node_t *v, const char *path)
{
    char what[96];

    for (size_t i = 0; v->type == RATEL__YAML_SCALAR && i < COUNT(erl_units);
         i++)
        if (v->len == strlen(erl_units[i].word) &&
            strcasecmp(v->text, erl_units[i].word) == 0)
            return (int)i;
    ratel__yaml_fail(&r->ctx, v->line,
                     "%s: expected second, minute, hour, day, week, month "
                     "or year, got %s (envoyproxy/ratelimit: invalid rate "
                     "limit unit)",
                     path, ratel__yaml_describe(v, what, sizeof what));
    return -1;
}

/* The algorithm `v` names, else the set's default; -1 after saying why. */
static int read_algorithm(reader_t *r, const ratel__yaml_node_t *v,
                          const char *path)
{
    char what[96], rate[96];
    int a;

    if (!v)
        return (int)r->erl->algo;
    if (v->type == RATEL__YAML_SCALAR &&
        (a = erl_algorithm(v->text, v->len)) >= 0)
        return a;
    ratel__algo_list(RATEL_ALGO_RATE, "", " or ", rate, sizeof rate);
    ratel__yaml_fail(&r->ctx, v->line, "%s: expected %s, got %s", path, rate,
                     ratel__yaml_describe(v, what, sizeof what));
    return -1;
}

/*
 * unit and requests_per_unit (with ratel's algorithm and burst) as one
 * rule of the core's grammar, e.g. "20/1m:sliding", parsed by the core.
 * requests_per_unit 0 is ERL's way to refuse everything: no rule.
 */
static int unit_policy(reader_t *r, const ratel__yaml_node_t *node,
                       const ratel__yaml_node_t *const *v, const char *path,
                       rateld_erl_limit_t *lim)
{
    char field[PATH_LEN], text[96], why[512];
    const char *period, *algo;
    uint32_t burst = 0;
    ratel_rule_t rule;
    int u, a;

    field_of(field, sizeof field, path, "unit");
    if (!v[L_UNIT])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: missing; write second, minute, hour, "
                                "day, week, month or year (or ratel's "
                                "rules: [\"20/m\"])",
                                field);
    if ((u = read_unit(r, v[L_UNIT], field)) < 0)
        return -1;
    field_of(field, sizeof field, path, "requests_per_unit");
    if (!v[L_RPU])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: missing; envoyproxy/ratelimit reads a "
                                "missing one as 0, which denies every "
                                "request: write requests_per_unit: 0 if that "
                                "is meant",
                                field);
    if (read_count(r, v[L_RPU], field, UINT32_MAX, &lim->requests_per_unit))
        return -1;
    if (lim->requests_per_unit > RATEL_LIMIT_MAX)
        return ratel__yaml_fail(&r->ctx, v[L_RPU]->line,
                                "%s: %lu is more than the %lu a ratel rule "
                                "allows in one period",
                                field, (unsigned long)lim->requests_per_unit,
                                (unsigned long)RATEL_LIMIT_MAX);
    field_of(field, sizeof field, path, "algorithm");
    if ((a = read_algorithm(r, v[L_ALGO], field)) < 0)
        return -1;
    algo = ratel_algo_name((ratel_algo_t)a);
    field_of(field, sizeof field, path, "burst");
    if (v[L_BURST] && !(ratel_algo_facts((ratel_algo_t)a) & RATEL_ALGO_BURST)) {
        const char *bucket =
            ratel_algo_name(ratel__algo_with(RATEL_ALGO_BURST));
        return ratel__yaml_fail(&r->ctx, v[L_BURST]->line,
                                "%s: burst is the depth of a %s bucket, and "
                                "this limit's algorithm is %s: add algorithm: "
                                "%s or remove burst",
                                field, bucket, algo, bucket);
    }
    if (v[L_BURST] && read_count(r, v[L_BURST], field, RATEL_LIMIT_MAX, &burst))
        return -1;
    lim->unit = erl_units[u].number;
    if (lim->requests_per_unit == 0) {
        lim->deny_all = 1;
        return 0;
    }
    period = ratel_algo_facts((ratel_algo_t)a) & RATEL_ALGO_CALENDAR
                 ? erl_units[u].calendar
                 : erl_units[u].rate;
    if (!period)
        return ratel__yaml_fail(
            &r->ctx, v[L_UNIT]->line,
            "%s.unit: a year is longer than the 30 days a %s period may "
            "last; write algorithm: fixed (calendar years, from January 1st "
            "00:00 UTC) or ratel's rules: [\"N/30d\"]",
            path, algo);
    if (v[L_BURST])
        snprintf(text, sizeof text, "%lu/%s:%s,burst=%lu",
                 (unsigned long)lim->requests_per_unit, period, algo,
                 (unsigned long)burst);
    else
        snprintf(text, sizeof text, "%lu/%s:%s",
                 (unsigned long)lim->requests_per_unit, period, algo);
    if (ratel_rule_parse(text, strlen(text), &rule, why, sizeof why) ||
        ratel_policy_init(&lim->policy, &rule, 1, why, sizeof why))
        return ratel__yaml_fail(&r->ctx, v[L_RPU]->line, "%s: %s", path, why);
    return 0;
}

/* A descriptor's rate_limit mapping into `lim`. */
static int read_limit(reader_t *r, const ratel__yaml_node_t *node,
                      const char *path, rateld_erl_limit_t *lim)
{
    static const size_t not_with_rules[] = {L_UNIT, L_RPU, L_ALGO, L_BURST};
    const ratel__yaml_node_t *v[COUNT(limit_fields)];
    char field[PATH_LEN];

    if (read_fields(r, node, path, limit_fields, COUNT(limit_fields), v) ||
        read_flag(r, v[L_UNLIMITED],
                  field_of(field, sizeof field, path, "unlimited"),
                  &lim->unlimited))
        return -1;
    if (v[L_NAME] &&
        read_text(r, v[L_NAME], field_of(field, sizeof field, path, "name"),
                  lim->name, RATELD_ERL_KEY_MAX))
        return -1;
    if (v[L_REPLACES] &&
        read_replaces(r, v[L_REPLACES],
                      field_of(field, sizeof field, path, "replaces"), lim))
        return -1;
    if (lim->unlimited)
        return check_unlimited(r, v, path, lim);
    if (!v[L_RULES])
        return unit_policy(r, node, v, path, lim);
    for (size_t k = 0; k < COUNT(not_with_rules); k++)
        if (v[not_with_rules[k]])
            return ratel__yaml_fail(
                &r->ctx, v[not_with_rules[k]]->line,
                "%s: rules replace unit, requests_per_unit, algorithm and "
                "burst; write each rule whole instead, e.g. rules: "
                "[\"20/m:gcra,burst=5\"]",
                field_of(field, sizeof field, path,
                         limit_fields[not_with_rules[k]]));
    return read_rules(r, v[L_RULES],
                      field_of(field, sizeof field, path, "rules"), lim);
}

/*
 * Takes `lim` into the set (its index into *index), with the reader's
 * path: key_path, depth and levels. On -1 `lim` is still the caller's.
 */
static int add_limit(reader_t *r, rateld_erl_limit_t *lim, int line,
                     long *index)
{
    rateld_erl_t *erl = r->erl;
    rateld_erl_level_t *levels;

    if (erl->nlimits == RATELD_ERL_LIMITS_MAX)
        return ratel__yaml_fail(&r->ctx, line,
                                "more than %d rate_limit blocks in the "
                                "configuration",
                                RATELD_ERL_LIMITS_MAX);
    if (erl->nlimits == erl->caplimits) {
        size_t cap = erl->caplimits ? erl->caplimits * 2 : 64;
        rateld_erl_limit_t *grown = realloc(
            erl->limits,
            (cap < RATELD_ERL_LIMITS_MAX ? cap : RATELD_ERL_LIMITS_MAX) *
                sizeof *grown);
        if (!grown)
            return ratel__yaml_fail(&r->ctx, line, "out of memory");
        erl->limits = grown;
        erl->caplimits =
            cap < RATELD_ERL_LIMITS_MAX ? cap : RATELD_ERL_LIMITS_MAX;
    }
    levels = malloc(r->depth * sizeof *levels);
    if (!levels)
        return ratel__yaml_fail(&r->ctx, line, "out of memory");
    memcpy(levels, r->levels, r->depth * sizeof *levels);
    lim->levels = levels;
    lim->depth = r->depth;
    memcpy(lim->key_path, r->key_path, r->pathlen[r->depth] + 1);
    lim->index = (unsigned)erl->nlimits;
    lim->file = r->file;
    lim->line = line;
    lim->domain = r->domain;
    *index = (long)erl->nlimits;
    erl->limits[erl->nlimits++] = *lim;
    return 0;
}

/*
 * Opens a descriptor level: ERL's stat name of the descriptor ("key" or
 * "key_value") after a '.' on the key path, and its share_threshold and
 * value_to_metric for the limits below it.
 */
static int push_level(reader_t *r, const erl_node_t *node, const char *path,
                      int share, int to_metric)
{
    size_t at = r->pathlen[r->depth];
    int n = snprintf(r->key_path + at, sizeof r->key_path - at, "%s%s%s%s",
                     at ? "." : "", node->key, node->value ? "_" : "",
                     node->value ? node->value : "");

    if (n < 0 || (size_t)n >= sizeof r->key_path - at) {
        r->key_path[at] = '\0';
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: the keys and values down to this "
                                "descriptor make a path longer than %d bytes, "
                                "the most rateld keeps for a limit's metrics "
                                "label",
                                path, RATELD_ERL_KEY_PATH_LEN - 1);
    }
    r->levels[r->depth].shared = share ? node->value : NULL;
    r->levels[r->depth].value_to_metric = to_metric;
    r->depth++;
    r->pathlen[r->depth] = at + (size_t)n;
    return 0;
}

static void pop_level(reader_t *r)
{
    r->depth--;
    r->key_path[r->pathlen[r->depth]] = '\0';
}

/* The flags of a descriptor, in this order. */
static const size_t flag_fields[] = {D_SHADOW, D_QUOTA, D_DETAILED,
                                     D_VALUE_TO_METRIC, D_SHARE};
enum { F_SHADOW, F_QUOTA, F_DETAILED, F_VALUE_TO_METRIC, F_SHARE };

/* A descriptor's key, value, flags and metadata into node and flags. */
static int read_head(reader_t *r, const ratel__yaml_node_t *const *v,
                     const ratel__yaml_node_t *item, const char *path,
                     erl_node_t *node, int *flags)
{
    char field[PATH_LEN], key[RATELD_ERL_KEY_MAX + 1],
        value[RATELD_ERL_VALUE_MAX + 1], what[96];

    field_of(field, sizeof field, path, "key");
    if (v[D_KEY] && read_text(r, v[D_KEY], field, key, RATELD_ERL_KEY_MAX))
        return -1;
    if (!v[D_KEY] || key[0] == '\0')
        return ratel__yaml_fail(&r->ctx, v[D_KEY] ? v[D_KEY]->line : item->line,
                                "%s: missing or empty; every descriptor has "
                                "a key (envoyproxy/ratelimit: descriptor has "
                                "empty key)",
                                field);
    value[0] = '\0';
    if (v[D_VALUE] &&
        read_text(r, v[D_VALUE], field_of(field, sizeof field, path, "value"),
                  value, RATELD_ERL_VALUE_MAX))
        return -1;
    for (size_t k = 0; k < COUNT(flag_fields); k++)
        if (read_flag(r, v[flag_fields[k]],
                      field_of(field, sizeof field, path,
                               descriptor_fields[flag_fields[k]]),
                      &flags[k]))
            return -1;
    if (flags[F_SHARE] && !strchr(value, '*'))
        return ratel__yaml_fail(&r->ctx, v[D_SHARE]->line,
                                "%s: share_threshold is for a wildcard value "
                                "(one with '*'), and this descriptor's value "
                                "has none (envoyproxy/ratelimit refuses it "
                                "too)",
                                field);
    if (v[D_METADATA] && v[D_METADATA]->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(
            &r->ctx, v[D_METADATA]->line, "%s: expected a mapping, got %s",
            field_of(field, sizeof field, path, "metadata"),
            ratel__yaml_describe(v[D_METADATA], what, sizeof what));
    node->key = strdup(key);
    node->keylen = strlen(key);
    node->value = value[0] ? strdup(value) : NULL;
    node->valuelen = strlen(value);
    node->line = item->line;
    if (!node->key || (value[0] && !node->value))
        return ratel__yaml_fail(&r->ctx, item->line, "out of memory");
    return 0;
}

static int read_list(reader_t *r, const ratel__yaml_node_t *list,
                     const char *path, erl_node_t *parent);

/* One descriptor (and what is nested in it) into `node`. */
static int read_descriptor(reader_t *r, const ratel__yaml_node_t *item,
                           const char *path, erl_node_t *node)
{
    const ratel__yaml_node_t *v[COUNT(descriptor_fields)];
    int flags[COUNT(flag_fields)];
    char field[PATH_LEN];
    rateld_erl_limit_t lim;
    int rc = 0;

    if (read_fields(r, item, path, descriptor_fields, COUNT(descriptor_fields),
                    v) ||
        read_head(r, v, item, path, node, flags) ||
        push_level(r, node, path, flags[F_SHARE], flags[F_VALUE_TO_METRIC]))
        return -1;
    if (v[D_RATE_LIMIT]) {
        memset(&lim, 0, sizeof lim);
        lim.shadow = flags[F_SHADOW];
        lim.quota = flags[F_QUOTA];
        lim.detailed_metric = flags[F_DETAILED];
        rc =
            read_limit(r, v[D_RATE_LIMIT],
                       field_of(field, sizeof field, path, "rate_limit"), &lim);
        if (rc == 0)
            rc = add_limit(r, &lim, key_line(item, "rate_limit"), &node->limit);
        if (rc)
            limit_clear(&lim);
    }
    if (rc == 0 && v[D_DESCRIPTORS])
        rc =
            read_list(r, v[D_DESCRIPTORS],
                      field_of(field, sizeof field, path, "descriptors"), node);
    pop_level(r);
    return rc;
}

/* A list of descriptors into parent's children. */
static int read_list(reader_t *r, const ratel__yaml_node_t *list,
                     const char *path, erl_node_t *parent)
{
    rateld_erl_t *erl = r->erl;
    char item[PATH_LEN];

    if (ratel__yaml_list(&r->ctx, list, path, RATELD_ERL_NODES_MAX,
                         "descriptors"))
        return -1;
    if (r->depth == RATELD_ERL_DEPTH_MAX)
        return ratel__yaml_fail(&r->ctx, list->line,
                                "%s: descriptors nested deeper than %d levels",
                                path, RATELD_ERL_DEPTH_MAX);
    if (list->n == 0)
        return 0;
    parent->children = calloc(list->n, sizeof *parent->children);
    if (!parent->children)
        return ratel__yaml_fail(&r->ctx, list->line, "out of memory");
    for (size_t i = 0; i < list->n; i++) {
        erl_node_t *child = &parent->children[i];
        if (erl->nnodes == RATELD_ERL_NODES_MAX)
            return ratel__yaml_fail(&r->ctx, list->items[i]->line,
                                    "more than %d descriptors in the "
                                    "configuration",
                                    RATELD_ERL_NODES_MAX);
        erl->nnodes++;
        child->limit = -1;
        child->order = i;
        parent->nchildren = i + 1;
        item_of(item, sizeof item, path, i);
        if (read_descriptor(r, list->items[i], item, child))
            return -1;
    }
    return rateld_erl__index_level(&r->ctx, parent, path);
}

static void node_free(erl_node_t *node)
{
    for (size_t i = 0; i < node->nchildren; i++)
        node_free(&node->children[i]);
    free(node->children);
    free(node->wild);
    free(node->key);
    free(node->value);
}

/* ------------------------------------------------------------- files */

/* A file's top level: its domain and descriptors into `dom`. */
static int read_file(reader_t *r, const ratel__yaml_node_t *root,
                     erl_domain_t *dom)
{
    const ratel__yaml_node_t *v[COUNT(top_fields)];
    erl_domain_t *other;
    char name[RATELD_ERL_KEY_MAX + 1], q[96];

    if (!root || ratel__yaml_is_null(root))
        return ratel__yaml_fail(&r->ctx, 1,
                                "domain: missing; every file names its domain "
                                "(domain: NAME), and this one is empty "
                                "(envoyproxy/ratelimit: config file cannot "
                                "have empty domain)");
    if (root->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, root->line,
                                "expected a mapping of fields (domain, "
                                "descriptors) at the top of the file, got %s",
                                ratel__yaml_describe(root, q, sizeof q));
    if (read_fields(r, root, "", top_fields, COUNT(top_fields), v))
        return -1;
    if (v[0] && read_text(r, v[0], "domain", name, RATELD_ERL_KEY_MAX))
        return -1;
    if (!v[0] || name[0] == '\0')
        return ratel__yaml_fail(&r->ctx, v[0] ? v[0]->line : root->line,
                                "domain: missing or empty; every file names "
                                "its domain (envoyproxy/ratelimit: config "
                                "file cannot have empty domain)");
    other = rateld_erl__find_domain(r->erl, name, strlen(name), NULL);
    if (other && !r->erl->merge) {
        ratel__yaml_quote(name, strlen(name), q, sizeof q);
        return ratel__yaml_fail(
            &r->ctx, v[0]->line,
            "domain: \"%s\" is also the domain of %s (line %d); "
            "envoyproxy/ratelimit refuses a domain in two files unless "
            "MERGE_DOMAIN_CONFIG is set: put its descriptors in one file, or "
            "merge the files with envoy: {merge_domain_config: true} in "
            "rateld's configuration",
            q, other->file, other->line);
    }
    dom->name = strdup(name);
    if (!dom->name)
        return ratel__yaml_fail(&r->ctx, v[0]->line, "out of memory");
    dom->len = strlen(name);
    dom->line = v[0]->line;
    dom->root.limit = -1;
    dom->root.line = root->line;
    r->into = other;
    r->domain = other ? other->name : dom->name;
    return v[1] ? read_list(r, v[1], "descriptors", &dom->root) : 0;
}

/* Room for one more file and domain, so that adding them cannot fail. */
static int reserve(rateld_erl_t *erl)
{
    if (erl->nfiles == erl->capfiles) {
        size_t cap = erl->capfiles ? erl->capfiles * 2 : 16;
        char **files = realloc(erl->files, cap * sizeof *files);
        if (!files)
            return -1;
        erl->files = files;
        erl->capfiles = cap;
    }
    if (erl->ndomains == erl->capdomains) {
        size_t cap = erl->capdomains ? erl->capdomains * 2 : 16;
        erl_domain_t *domains = realloc(erl->domains, cap * sizeof *domains);
        if (!domains)
            return -1;
        erl->domains = domains;
        erl->capdomains = cap;
    }
    return 0;
}

/* Undoes a file refused: its limits, descriptors, domain and name. */
static void rollback(rateld_erl_t *erl, size_t nlimits, size_t nnodes,
                     erl_domain_t *dom, const char *file)
{
    for (size_t i = nlimits; i < erl->nlimits; i++)
        limit_clear(&erl->limits[i]);
    erl->nlimits = nlimits;
    erl->nnodes = nnodes;
    node_free(&dom->root);
    free(dom->name);
    free((char *)file);
}

int rateld_erl_parse(rateld_erl_t *erl, const char *text, size_t len,
                     const char *name, char *err, size_t errlen)
{
    size_t nlimits = erl->nlimits, nnodes = erl->nnodes, at = 0;
    ratel__yaml_node_t *root = NULL;
    erl_domain_t dom;
    reader_t r;
    int rc;

    memset(&r, 0, sizeof r);
    memset(&dom, 0, sizeof dom);
    name = name ? name : "config";
    r.erl = erl;
    r.ctx.name = name;
    r.ctx.err = err;
    r.ctx.errlen = errlen;
    if (erl->finished)
        return ratel__yaml_fail(&r.ctx, 1,
                                "the configuration is finished; no file can "
                                "be added");
    if (reserve(erl) || !(r.file = strdup(name)))
        return ratel__yaml_fail(&r.ctx, 1, "out of memory");
    /* Two levels per descriptor, a rate_limit's replaces three more. */
    rc = ratel__yaml_load_nested(&r.ctx, text, len,
                                 2 * RATELD_ERL_DEPTH_MAX + 5, &root);
    if (rc == 0)
        rc = read_file(&r, root, &dom);
    ratel__yaml_free(root);
    if (rc) {
        rollback(erl, nlimits, nnodes, &dom, r.file);
        return -1;
    }
    if (r.into && rateld_erl__merge_domain(&r.ctx, r.file, r.into, &dom)) {
        rollback(erl, nlimits, nnodes, &dom, r.file);
        return -1;
    }
    erl->files[erl->nfiles++] = (char *)r.file;
    if (r.into)
        return 0;
    dom.file = r.file;
    rateld_erl__find_domain(erl, dom.name, dom.len, &at);
    memmove(&erl->domains[at + 1], &erl->domains[at],
            (erl->ndomains - at) * sizeof dom);
    erl->domains[at] = dom;
    erl->ndomains++;
    return 0;
}

int rateld_erl_algorithm_ok(const char *algorithm)
{
    return !algorithm || erl_algorithm(algorithm, strlen(algorithm)) >= 0;
}

rateld_erl_t *rateld_erl_new(const char *algorithm)
{
    rateld_erl_t *erl;

    if (!rateld_erl_algorithm_ok(algorithm))
        return NULL;
    erl = calloc(1, sizeof *erl);
    if (erl)
        erl->algo = algorithm ? (ratel_algo_t)erl_algorithm(algorithm,
                                                            strlen(algorithm))
                              : ratel__algo_with(RATEL_ALGO_DEFAULT);
    return erl;
}

void rateld_erl_merge_domains(rateld_erl_t *erl, int merge)
{
    erl->merge = merge != 0;
}

int rateld_erl_finish(rateld_erl_t *erl, char *err, size_t errlen)
{
    if (erl->finished) {
        if (err && errlen)
            snprintf(err, errlen, "the configuration is already finished");
        return -1;
    }
    erl->finished = 1;
    return 0;
}

void rateld_erl_free(rateld_erl_t *erl)
{
    if (!erl)
        return;
    for (size_t i = 0; i < erl->ndomains; i++) {
        node_free(&erl->domains[i].root);
        free(erl->domains[i].name);
        free(erl->domains[i].parts);
    }
    for (size_t i = 0; i < erl->nlimits; i++)
        limit_clear(&erl->limits[i]);
    for (size_t i = 0; i < erl->nfiles; i++)
        free(erl->files[i]);
    free(erl->domains);
    free(erl->limits);
    free(erl->files);
    free(erl);
}
