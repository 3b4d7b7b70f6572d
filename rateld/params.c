/*
 * params.c - the parameters of rateld's keyed endpoints (/v1/acquire,
 * /v1/refund, /v1/release): policy, key and the request options (cost,
 * peek, max_wait, lease, renew: RATEL_OPTION_MAP, include/ratel.h, with
 * its names, ranges and the operations that take each), from the query
 * and the strict JSON body of a POST. A parameter given twice
 * is refused by name, wherever its two copies are: two readers of one
 * request (a proxy that reads the query, rateld that reads the body)
 * must never see two different requests.
 */
#include "rateld/params.h"

#include "app/json.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The request options, from the one table of them. */
static const struct {
    const char *name;
    int kind; /* RATEL_ARG_* */
    long long min, max;
    unsigned ops; /* RATEL_OP_* */
} options[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note)                  \
    {#name, kind, min, max, ops},
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};

/*
 * Where each option rateld takes goes in rateld_params_t; 0 for AT, which
 * sets a decision's clock: rateld's clock is its own, never a caller's.
 */
static const size_t option_field[RATEL_OPTIONS] = {
    [RATEL_OPTION_COST] = offsetof(rateld_params_t, cost),
    [RATEL_OPTION_PEEK] = offsetof(rateld_params_t, peek),
    [RATEL_OPTION_MAXWAIT] = offsetof(rateld_params_t, max_wait),
    [RATEL_OPTION_RENEW] = offsetof(rateld_params_t, renew),
    [RATEL_OPTION_LEASE] = offsetof(rateld_params_t, lease),
};

/* The endpoint of each operation, for "lease belongs to /v1/release". */
static const struct {
    unsigned op;
    const char *path;
} endpoints[] = {{RATEL_OP_ACQUIRE, "/v1/acquire"},
                 {RATEL_OP_REFUND, "/v1/refund"},
                 {RATEL_OP_RELEASE, "/v1/release"}};

/* The bits of rateld_params_t.given: policy, key, then each option's. */
#define GIVEN_POLICY 1u
#define GIVEN_KEY 2u
#define GIVEN_OPTION(i) (4u << (i))

static long long *field(rateld_params_t *p, int i)
{
    return (long long *)(void *)((char *)p + option_field[i]);
}

/* The option rateld takes named `name`, or -1. */
static int option_named(const char *name)
{
    for (int i = 0; i < RATEL_OPTIONS; i++)
        if (option_field[i] && strcmp(name, options[i].name) == 0)
            return i;
    return -1;
}

/*
 * Marks parameter `name` (bit `bit`) given; -1 with a message for a 400
 * when it was already (the query named it, and now the body does).
 */
static int mark_given(rateld_params_t *p, unsigned bit, const char *name,
                      char *err, size_t errlen)
{
    if (p->given & bit) {
        snprintf(err, errlen,
                 "%s is given both in the query and in the body; give "
                 "it once",
                 name);
        return -1;
    }
    p->given |= bit;
    return 0;
}

/* An integer min..max in text; -1 when it is not one. */
static long long parse_count(const char *s, long long min, long long max)
{
    long long v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > max)
            return -1;
    }
    return v < min ? -1 : v;
}

static int parse_bool(const char *s, long long *out)
{
    if (!strcmp(s, "1") || !strcmp(s, "true")) {
        *out = 1;
        return 1;
    }
    if (!strcmp(s, "0") || !strcmp(s, "false") || !*s) {
        *out = 0;
        return 1;
    }
    return 0;
}

/* "cost: integer 1..1000000000, peek: boolean, ...": what the body may
   hold besides policy and key. */
static void option_types(char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < RATEL_OPTIONS && o < size; i++) {
        if (!option_field[i])
            continue;
        if (options[i].kind == RATEL_ARG_FLAG)
            o += (size_t)snprintf(buf + o, size - o, ", %s: boolean",
                                  options[i].name);
        else
            o += (size_t)snprintf(buf + o, size - o, ", %s: integer %lld..%lld",
                                  options[i].name, options[i].min,
                                  options[i].max);
    }
}

/* Option i's value from a JSON item; 0, or -1 when of the wrong type. */
static int read_json_option(const cJSON *item, int i, rateld_params_t *p)
{
    double v = item->valuedouble;

    if (options[i].kind == RATEL_ARG_FLAG) {
        if (!cJSON_IsBool(item))
            return -1;
        *field(p, i) = cJSON_IsTrue(item);
        return 0;
    }
    if (!cJSON_IsNumber(item) || v < (double)options[i].min ||
        v > (double)options[i].max || v != (double)(long long)v)
        return -1;
    *field(p, i) = (long long)v;
    return 0;
}

/* One field of a JSON body into p; -1 with a message for a 400. */
static int read_json_field(const cJSON *item, rateld_params_t *p, char *err,
                           size_t errlen)
{
    const char *name = item->string ? item->string : "";
    int i = option_named(name), bad = 0;

    if (!strcmp(name, "policy") && cJSON_IsString(item) &&
        strlen(item->valuestring) < sizeof p->policy) {
        if (mark_given(p, GIVEN_POLICY, name, err, errlen) != 0)
            return -1;
        strcpy(p->policy, item->valuestring);
    } else if (!strcmp(name, "key") && cJSON_IsString(item)) {
        size_t n = strlen(item->valuestring);
        if (mark_given(p, GIVEN_KEY, name, err, errlen) != 0)
            return -1;
        if (n > RATELD_KEY_MAX) {
            snprintf(err, errlen, "key is longer than %d bytes",
                     RATELD_KEY_MAX);
            return -1;
        }
        memcpy(p->key, item->valuestring, n + 1);
        p->keylen = n;
        p->has_key = 1;
    } else if (i >= 0) {
        if (mark_given(p, GIVEN_OPTION(i), name, err, errlen) != 0)
            return -1;
        bad = read_json_option(item, i, p) != 0;
    } else {
        bad = 1;
    }
    if (bad) {
        char types[300];
        option_types(types, sizeof types);
        snprintf(err, errlen,
                 "field \"%.60s\" is unknown or of the wrong type "
                 "(policy: string, key: string%s)",
                 name, types);
        return -1;
    }
    return 0;
}

/* The parameters from a strict JSON body (POST), after the query's. */
static int read_params_json(const ratel_http_request_t *req, rateld_params_t *p,
                            char *err, size_t errlen)
{
    cJSON *root, *item;
    char why[200];
    int rc;

    if (req->body.n == 0) {
        if (p->given) /* all in the query */
            return 0;
        snprintf(err, errlen,
                 "POST needs a JSON body {\"policy\": ..., "
                 "\"key\": ..., \"cost\": 1, \"peek\": false} (or the "
                 "parameters in the query)");
        return -1;
    }
    rc = ratel__json_parse_strict(req->body.p, req->body.n, &root, NULL, why,
                                  sizeof why);
    if (rc != 0 || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        snprintf(err, errlen, "the body is not one strict JSON object: %s",
                 rc == 0 ? "not an object" : why);
        return -1;
    }
    rc = 0;
    cJSON_ArrayForEach(item, root)
    {
        if ((rc = read_json_field(item, p, err, errlen)) != 0)
            break;
    }
    cJSON_Delete(root);
    return rc;
}

/* The options from the query; each at most once. */
static int read_options_query(const ratel_http_request_t *req,
                              rateld_params_t *p, char *err, size_t errlen)
{
    for (int i = 0; i < RATEL_OPTIONS; i++) {
        char buf[32];
        long n;
        long long v = 0;
        int flag = options[i].kind == RATEL_ARG_FLAG;

        if (!option_field[i])
            continue;
        n = ratel_http_query_param(req->query, options[i].name, buf,
                                   sizeof buf);
        if (n == -1)
            continue;
        if (n < -1 || (flag ? !parse_bool(buf, &v)
                            : (v = parse_count(buf, options[i].min,
                                               options[i].max)) < 0)) {
            if (flag)
                snprintf(err, errlen, "%s must be true, false, 1 or 0%s",
                         options[i].name, n == -3 ? ", given once" : "");
            else
                snprintf(err, errlen, "%s must be an integer %lld..%lld%s",
                         options[i].name, options[i].min, options[i].max,
                         n == -3 ? ", given once" : "");
            return -1;
        }
        *field(p, i) = v;
        p->given |= GIVEN_OPTION(i);
    }
    return 0;
}

/* The policy and the key from the query, then the options. */
static int read_params_query(const ratel_http_request_t *req,
                             rateld_params_t *p, char *err, size_t errlen)
{
    long n = ratel_http_query_param(req->query, "policy", p->policy,
                                    sizeof p->policy);
    if (n < -1) {
        snprintf(err, errlen, "policy is %s",
                 n == -3 ? "given twice" : "malformed or too long");
        return -1;
    }
    if (n >= 0)
        p->given |= GIVEN_POLICY;
    n = ratel_http_query_param(req->query, "key", p->key, sizeof p->key);
    if (n < -1) {
        snprintf(err, errlen,
                 n == -3 ? "key is given twice"
                         : "key is malformed (bad %%-escape) or "
                           "longer than %d bytes",
                 RATELD_KEY_MAX);
        return -1;
    }
    if (n >= 0) {
        p->keylen = (size_t)n;
        p->has_key = 1;
        p->given |= GIVEN_KEY;
    }
    return read_options_query(req, p, err, errlen);
}

/* An option given to an endpoint that does not take it: which do. */
static int misplaced(const rateld_params_t *p, unsigned op, char *err,
                     size_t errlen)
{
    for (int i = 0; i < RATEL_OPTIONS; i++) {
        size_t o = 0;
        char paths[80] = "";

        if (!(p->given & GIVEN_OPTION(i)) || (options[i].ops & op))
            continue;
        for (size_t e = 0; e < sizeof endpoints / sizeof endpoints[0]; e++)
            if (options[i].ops & endpoints[e].op)
                o += (size_t)snprintf(paths + o, sizeof paths - o, "%s%s",
                                      o ? " and " : "", endpoints[e].path);
        snprintf(err, errlen, "%s belongs to %s", options[i].name, paths);
        return -1;
    }
    return 0;
}

int rateld_params_read(const ratel_http_request_t *req, rateld_params_t *p,
                       unsigned op, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->cost = 1;
    if (read_params_query(req, p, err, errlen) != 0)
        return -1;
    if (req->method.n == 4 && memcmp(req->method.p, "POST", 4) == 0 &&
        read_params_json(req, p, err, errlen) != 0)
        return -1;
    if (!p->policy[0]) {
        snprintf(err, errlen, "policy is required");
        return -1;
    }
    if (!p->has_key || p->keylen == 0) {
        snprintf(err, errlen, "key is required (a non-empty string)");
        return -1;
    }
    if ((op & RATEL_OP_RELEASE) && !p->lease) {
        snprintf(err, errlen,
                 "lease is required: the id an acquire under a "
                 "concurrent rule returned");
        return -1;
    }
    return misplaced(p, op, err, errlen);
}
