/*
 * params.c - the parameters of rateld's keyed endpoints (/v1/acquire,
 * /v1/refund, /v1/release): policy, key, cost, peek, lease and renew, from
 * the query and the strict JSON body of a POST. A parameter given twice
 * is refused by name, wherever its two copies are: two readers of one
 * request (a proxy that reads the query, rateld that reads the body)
 * must never see two different requests.
 */
#include "rateld/params.h"

#include "app/json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* The parameters, as bits of rateld_params_t.given. */
static const char *const param_names[] = {"policy", "key",   "cost",
                                          "peek",   "lease", "renew"};

/*
 * Marks parameter `name` given; -1 with a message for a 400 when it was
 * already (the query named it, and now the body does).
 */
static int mark_given(rateld_params_t *p, const char *name, char *err,
                      size_t errlen)
{
    for (unsigned i = 0; i < sizeof param_names / sizeof param_names[0]; i++) {
        if (strcmp(name, param_names[i]) != 0)
            continue;
        if (p->given & (1u << i)) {
            snprintf(err, errlen,
                     "%s is given both in the query and in the body; give "
                     "it once",
                     name);
            return -1;
        }
        p->given |= 1u << i;
    }
    return 0;
}

/* A positive integer 1..max in text; 0 when it is not one. */
static long long parse_count(const char *s, long long max)
{
    long long v = 0;
    if (!*s)
        return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        v = v * 10 + (*s - '0');
        if (v > max)
            return 0;
    }
    return v;
}

static int parse_bool(const char *s, int *out)
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

/* One field of a JSON body into p; -1 with a message for a 400. */
static int read_json_field(const cJSON *item, rateld_params_t *p, char *err,
                           size_t errlen)
{
    const char *name = item->string ? item->string : "";

    if (mark_given(p, name, err, errlen) != 0)
        return -1;
    if (!strcmp(name, "policy") && cJSON_IsString(item) &&
        strlen(item->valuestring) < sizeof p->policy) {
        strcpy(p->policy, item->valuestring);
    } else if (!strcmp(name, "key") && cJSON_IsString(item)) {
        size_t n = strlen(item->valuestring);
        if (n > RATELD_KEY_MAX) {
            snprintf(err, errlen, "key is longer than %d bytes",
                     RATELD_KEY_MAX);
            return -1;
        }
        memcpy(p->key, item->valuestring, n + 1);
        p->keylen = n;
        p->has_key = 1;
    } else if (!strcmp(name, "cost") && cJSON_IsNumber(item) &&
               item->valuedouble >= 1 && item->valuedouble <= 1e9 &&
               item->valuedouble == (double)(long long)item->valuedouble) {
        p->cost = (long long)item->valuedouble;
    } else if (!strcmp(name, "peek") && cJSON_IsBool(item)) {
        p->peek = cJSON_IsTrue(item);
    } else if (!strcmp(name, "lease") && cJSON_IsNumber(item) &&
               item->valuedouble >= 1 && item->valuedouble <= 4294967295.0 &&
               item->valuedouble == (double)(long long)item->valuedouble) {
        p->lease = (long long)item->valuedouble;
    } else if (!strcmp(name, "renew") && cJSON_IsBool(item)) {
        p->renew = cJSON_IsTrue(item);
    } else {
        snprintf(err, errlen,
                 "field \"%.60s\" is unknown or of the wrong type "
                 "(policy: string, key: string, cost: integer "
                 "1..1000000000, peek: boolean, lease: integer "
                 "1..4294967295, renew: boolean)",
                 name);
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

/* The parameters from the query; each at most once. */
static int read_params_query(const ratel_http_request_t *req,
                             rateld_params_t *p, char *err, size_t errlen)
{
    char buf[32];
    long n = ratel_http_query_param(req->query, "policy", p->policy,
                                    sizeof p->policy);
    if (n < -1) {
        snprintf(err, errlen, "policy is %s",
                 n == -3 ? "given twice" : "malformed or too long");
        return -1;
    }
    if (n >= 0)
        mark_given(p, "policy", err, errlen);
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
        mark_given(p, "key", err, errlen);
    }
    n = ratel_http_query_param(req->query, "cost", buf, sizeof buf);
    if (n < -1 || (n >= 0 && !(p->cost = parse_count(buf, 1000000000)))) {
        snprintf(err, errlen, "cost must be an integer 1..1000000000%s",
                 n == -3 ? ", given once" : "");
        return -1;
    }
    if (n >= 0)
        mark_given(p, "cost", err, errlen);
    n = ratel_http_query_param(req->query, "peek", buf, sizeof buf);
    if (n < -1 || (n >= 0 && !parse_bool(buf, &p->peek))) {
        snprintf(err, errlen, "peek must be true, false, 1 or 0%s",
                 n == -3 ? ", given once" : "");
        return -1;
    }
    if (n >= 0)
        mark_given(p, "peek", err, errlen);
    n = ratel_http_query_param(req->query, "lease", buf, sizeof buf);
    if (n < -1 || (n >= 0 && !(p->lease = parse_count(buf, 4294967295LL)))) {
        snprintf(err, errlen, "lease must be an integer 1..4294967295%s",
                 n == -3 ? ", given once" : "");
        return -1;
    }
    if (n >= 0)
        mark_given(p, "lease", err, errlen);
    n = ratel_http_query_param(req->query, "renew", buf, sizeof buf);
    if (n < -1 || (n >= 0 && !parse_bool(buf, &p->renew))) {
        snprintf(err, errlen, "renew must be true, false, 1 or 0%s",
                 n == -3 ? ", given once" : "");
        return -1;
    }
    if (n >= 0)
        mark_given(p, "renew", err, errlen);
    return 0;
}

int rateld_params_read(const ratel_http_request_t *req, rateld_params_t *p,
                       int release, char *err, size_t errlen)
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
    if (release && !p->lease) {
        snprintf(err, errlen,
                 "lease is required: the id an acquire under a "
                 "concurrent rule returned");
        return -1;
    }
    if (!release && (p->lease || p->renew)) {
        snprintf(err, errlen, "lease and renew belong to /v1/release");
        return -1;
    }
    return 0;
}
