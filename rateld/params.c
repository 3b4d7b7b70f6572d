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

/*
 * The request options' names in the query and the body, from the one
 * table of them; ratel_options_read() (lib/core/options.c) reads their
 * values, as it does the module's and the CLI's.
 */
static const char *const option_name[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note) #name,
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};

/* AT sets a decision's clock: rateld's clock is its own, never a
   caller's, so no endpoint takes it; nor the slice commands' options
   (WANT, TTL, ...: no endpoint of rateld takes a slice), which are then
   names like any other a request may carry. */
#define SLICE_ONLY_(NAME, name, kind, min, max, ops, value, note)              \
    | (((ops) & ~RATEL_OP_SLICES) ? 0u : 1u << RATEL_OPTION_##NAME)
#define REFUSED ((1u << RATEL_OPTION_AT) RATEL_OPTION_MAP(SLICE_ONLY_))

/* The endpoint of each operation, for "lease belongs to /v1/release". */
static const struct {
    unsigned op;
    const char *path;
} endpoints[] = {{RATEL_OP_ACQUIRE, "/v1/acquire"},
                 {RATEL_OP_REFUND, "/v1/refund"},
                 {RATEL_OP_RELEASE, "/v1/release"}};

/* The bits of rateld_params_t.given (policy and key; the options' are
   options.given). */
#define GIVEN_POLICY 1u
#define GIVEN_KEY 2u

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

/*
 * An option given to an endpoint that does not take it: which do. Options
 * are refused so by name before their values are read.
 */
static int misplaced(int i, char *err, size_t errlen)
{
    size_t o = 0;
    char paths[80] = "";
    ratel_options_t all;

    for (size_t e = 0; e < sizeof endpoints / sizeof endpoints[0]; e++) {
        ratel_options_init(&all, endpoints[e].op, RATEL_SPELL_FIELD, REFUSED);
        if (all.takes & (1u << i))
            o += (size_t)snprintf(paths + o, sizeof paths - o, "%s%s",
                                  o ? " and " : "", endpoints[e].path);
    }
    snprintf(err, errlen, "%s belongs to %s", option_name[i], paths);
    return -1;
}

/*
 * Option i with its value's text (NULL: none) into p: refused by name when
 * the endpoint does not take it or the query gave it already, else by the
 * one reader of options.
 */
static int read_option(rateld_params_t *p, int i, const char *value, size_t len,
                       char *err, size_t errlen)
{
    if (!(p->options.takes & (1u << i)))
        return misplaced(i, err, errlen);
    if (p->options.given & (1u << i)) {
        snprintf(err, errlen,
                 "%s is given both in the query and in the body; give it once",
                 option_name[i]);
        return -1;
    }
    return ratel_options_read(&p->options, option_name[i],
                              strlen(option_name[i]), value, len, err,
                              errlen) != 0
               ? -1
               : 0;
}

/*
 * A JSON value as an option's text, which the reader parses as it does
 * the query's (and quotes when it refuses it): true and false, a number
 * (a whole one in digits), a string's text; null, [...] or {...}.
 */
static const char *json_text(const cJSON *item, char *buf, size_t size)
{
    double v = item->valuedouble;

    if (cJSON_IsBool(item))
        return cJSON_IsTrue(item) ? "true" : "false";
    if (cJSON_IsString(item))
        return item->valuestring;
    if (!cJSON_IsNumber(item))
        return cJSON_IsArray(item)    ? "[...]"
               : cJSON_IsObject(item) ? "{...}"
                                      : "null";
    if (v >= 0 && v < 1e18 && v == (double)(long long)v)
        snprintf(buf, size, "%lld", (long long)v);
    else
        snprintf(buf, size, "%.17g", v);
    return buf;
}

/* One field of a JSON body into p; -1 with a message for a 400. */
static int read_json_field(const cJSON *item, rateld_params_t *p, char *err,
                           size_t errlen)
{
    const char *name = item->string ? item->string : "";
    int i = ratel_option_find(RATEL_SPELL_FIELD, name, strlen(name), NULL);
    char buf[32];

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
    } else if (i >= 0 && !(REFUSED & (1u << i))) {
        const char *text = json_text(item, buf, sizeof buf);
        return read_option(p, i, text, strlen(text), err, errlen);
    } else {
        char list[200];
        ratel_options_t all;
        ratel_options_init(&all, RATEL_OP_RULES, RATEL_SPELL_FIELD, REFUSED);
        ratel_options_list(&all, list, sizeof list);
        snprintf(err, errlen,
                 "field \"%.60s\" is unknown or of the wrong type "
                 "(policy: string, key: string; options: %s)",
                 name, list);
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
        if (p->given || p->options.given) /* all in the query */
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

        if (REFUSED & (1u << i))
            continue;
        n = ratel_http_query_param(req->query, option_name[i], buf, sizeof buf);
        if (n == -1)
            continue;
        if (n < -1) {
            snprintf(err, errlen,
                     n == -3 ? "%s is given twice; give it once"
                             : "%s is malformed (a bad %%-escape) or too long",
                     option_name[i]);
            return -1;
        }
        if (read_option(p, i, buf, (size_t)n, err, errlen) != 0)
            return -1;
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

int rateld_params_read(const ratel_http_request_t *req, rateld_params_t *p,
                       unsigned op, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    ratel_options_init(&p->options, op, RATEL_SPELL_FIELD, REFUSED);
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
    if ((op & RATEL_OP_RELEASE) &&
        !(p->options.given & (1u << RATEL_OPTION_LEASE))) {
        snprintf(err, errlen,
                 "lease is required: the id an acquire under a "
                 "concurrent rule returned");
        return -1;
    }
    p->cost = p->options.value[RATEL_OPTION_COST];
    p->peek = p->options.value[RATEL_OPTION_PEEK];
    p->max_wait = p->options.value[RATEL_OPTION_MAXWAIT];
    p->lease = p->options.value[RATEL_OPTION_LEASE];
    p->renew = p->options.value[RATEL_OPTION_RENEW];
    return 0;
}
