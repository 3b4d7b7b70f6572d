/*
 * captcha_config.c - captchad's YAML file (examples/captcha/captchad.yaml
 * documents every field), read with the tree and typed readers rateld
 * uses too (src/app/yaml.c) so that both programs report problems the
 * same way: "FILE:LINE: PATH: reason", unknown fields included.
 */
#include "examples/captcha/captcha.h"

#include "app/yaml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *const captcha_policy_names[CAPTCHA_POLICIES] = {
    "send_phone", "send_ip", "verify_phone", "verify_ip", "login_user"};

/* The rules each policy has when the file does not say. */
static const char *const default_rules[CAPTCHA_POLICIES][3] = {
    {"1/60s", "5/1h", "10/1d"}, {"20/1h"}, {"10/1h"}, {"50/1h"}, {"3/1m"}};

static void set_defaults(captcha_config_t *c)
{
    snprintf(c->listen, sizeof c->listen, "127.0.0.1:8090");
    c->threads = 2;
    c->limits.max_body_bytes = 16384;
    c->memory_max_bytes = (size_t)64 << 20;
    c->code_length = 6;
    c->code_ttl_ms = 300000;
    c->code_max_attempts = 5;
    c->code_max_entries = 100000;
    for (int i = 0; i < CAPTCHA_POLICIES; i++) {
        size_t n = 0;
        while (n < 3 && default_rules[i][n])
            n++;
        ratel_policy_parse(&c->policies[i], default_rules[i], n, NULL, 0);
    }
    c->sender = CAPTCHA_SENDER_LOG;
    snprintf(c->log_file, sizeof c->log_file, "captcha-sms.log");
    c->webhook_timeout_ms = 5000;
    c->queue_size = 1024;
    c->resend_max_age_ms = -1; /* code_ttl_ms unless the file says */
    snprintf(c->sqlite_path, sizeof c->sqlite_path, "captchad.db");
    c->redis.url = c->redis_url;
}

static int read_listen(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *v, captcha_config_t *c)
{
    char q[96];

    if (ratel__yaml_string(ctx, v, "listen", c->listen, sizeof c->listen))
        return -1;
    if (ratel__listen_valid(c->listen))
        return 0;
    ratel__yaml_quote(c->listen, strlen(c->listen), q, sizeof q);
    return ratel__yaml_fail(ctx, v->line,
                            "listen: \"%s\" is not HOST:PORT, [IPV6]:PORT or "
                            ":PORT (e.g. 127.0.0.1:8090); port 0..65535",
                            q);
}

static int read_token(const ratel__yaml_ctx_t *ctx, const ratel__yaml_node_t *v,
                      captcha_config_t *c)
{
    if (ratel__yaml_string(ctx, v, "admin_token", c->admin_token,
                           sizeof c->admin_token))
        return -1;
    if (strchr(c->admin_token, ' '))
        return ratel__yaml_fail(
            ctx, v->line,
            "admin_token: contains a space; a token is sent "
            "in a header and must be one word");
    return 0;
}

/*
 * Refuses a `limits:` section written with its old meaning (captchad's
 * rate-limit rules, now under `policies:`): no silent reinterpretation.
 */
static int refuse_old_limits(const ratel__yaml_ctx_t *ctx,
                             const ratel__yaml_node_t *node)
{
    if (node->type != RATEL__YAML_MAP)
        return 0;
    for (size_t k = 0; k + 1 < node->n; k += 2) {
        const ratel__yaml_node_t *key = node->items[k];
        for (int i = 0; i < CAPTCHA_POLICIES; i++)
            if (key->type == RATEL__YAML_SCALAR &&
                !strcmp(key->text, captcha_policy_names[i]))
                return ratel__yaml_fail(
                    ctx, key->line,
                    "limits.%s: rate-limit rules are now under policies: "
                    "(write policies: %s: [...]); limits: means HTTP sizes "
                    "and times, as in rateld",
                    key->text, key->text);
    }
    return 0;
}

/* `limits:`, HTTP sizes and times: rateld's section, names and ranges
   (daemon/config.c), 0 meaning src/http/http.h's default. */
static int read_limits(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, captcha_config_t *c)
{
    static const char *const names[] = {
        "max_header_bytes", "max_body_bytes",     "max_connections",
        "max_pipeline",     "request_timeout_ms", "idle_timeout_ms"};
    static const struct {
        uint64_t min, max;
        int size;
    } range[] = {{1024, 1048576, 1}, {1, 16777216, 1}, {1, 1000000, 0},
                 {1, 1024, 0},       {1, 3600000, 0},  {1, 86400000, 0}};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    ratel_http_limits_t *l = &c->limits;
    char path[64];
    uint64_t x;

    if (refuse_old_limits(ctx, node) ||
        ratel__yaml_fields(ctx, node, "limits", names, COUNT(names), v))
        return -1;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        int rc;
        snprintf(path, sizeof path, "limits.%s", names[i]);
        rc = range[i].size ? ratel__yaml_size(ctx, v[i], path, range[i].min,
                                              range[i].max, 1, &x)
                           : ratel__yaml_uint(ctx, v[i], path, range[i].min,
                                              range[i].max, 1, &x);
        if (rc)
            return -1;
        if (i == 0)
            l->max_header_bytes = (size_t)x;
        else if (i == 1)
            l->max_body_bytes = (size_t)x;
        else if (i == 2)
            l->max_connections = (unsigned)x;
        else if (i == 3)
            l->max_pipeline = (unsigned)x;
        else if (i == 4)
            l->request_timeout_ms = (unsigned)x;
        else
            l->idle_timeout_ms = (unsigned)x;
    }
    return 0;
}

static int read_store(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node, captcha_config_t *c)
{
    static const char *const names[] = {"type", "max_bytes", "url",
                                        "on_failure", "timeout_ms"};
    static const char *const types[] = {"memory", "redis"};
    static const char *const failures[] = {"open", "closed", "local"};
    static const ratel_failure_t failure_of[] = {
        RATEL_FAILURE_OPEN, RATEL_FAILURE_CLOSED, RATEL_FAILURE_LOCAL};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    int word = 0;
    uint64_t x;

    if (ratel__yaml_fields(ctx, node, "store", names, COUNT(names), v))
        return -1;
    if (v[0] &&
        ratel__yaml_word(ctx, v[0], "store.type", types, COUNT(types), &word))
        return -1;
    c->store_redis = word;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        if (i >= 2 && !c->store_redis)
            return ratel__yaml_fail(
                ctx, v[i]->line,
                "store.%s: applies to type: redis only (this "
                "store is memory)",
                names[i]);
        switch (i) {
        case 0:
            break;
        case 1:
            if (ratel__yaml_size(ctx, v[i], "store.max_bytes",
                                 (uint64_t)64 << 10, (uint64_t)1 << 40, 0, &x))
                return -1;
            c->memory_max_bytes = (size_t)x;
            break;
        case 2:
            if (ratel__yaml_string(ctx, v[i], "store.url", c->redis_url,
                                   sizeof c->redis_url))
                return -1;
            if (strncmp(c->redis_url, "redis://", 8) != 0)
                return ratel__yaml_fail(ctx, v[i]->line,
                                        "store.url: expected redis://HOST:PORT "
                                        "(one primary; the code store does not "
                                        "route Redis Cluster)");
            break;
        case 3:
            if (ratel__yaml_word(ctx, v[i], "store.on_failure", failures,
                                 COUNT(failures), &word))
                return -1;
            c->redis.on_failure = failure_of[word];
            break;
        default:
            if (ratel__yaml_uint(ctx, v[i], "store.timeout_ms", 1, 60000, 0,
                                 &x))
                return -1;
            c->redis.command_timeout_ms = (int)x;
            c->redis.connect_timeout_ms = (int)x;
        }
    }
    if (c->store_redis && !v[2])
        return ratel__yaml_fail(ctx, node->line,
                                "store.url: required with type: redis (e.g. "
                                "redis://127.0.0.1:6379)");
    c->redis.url = c->redis_url;
    c->redis.local.max_bytes = c->memory_max_bytes;
    return 0;
}

/* One limit: a rule ("1/60s") or a list of rules. */
static int read_rules(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node, const char *path,
                      ratel_policy_t *out)
{
    ratel_rule_t rules[RATEL_MAX_RULES];
    const ratel__yaml_node_t *const *items = &node;
    char item[96], why[400], what[96];
    size_t n = 1;

    if (node->type == RATEL__YAML_LIST) {
        if (ratel__yaml_list(ctx, node, path, RATEL_MAX_RULES, "rules"))
            return -1;
        if (node->n == 0)
            return ratel__yaml_fail(ctx, node->line,
                                    "%s: an empty list; give at least one rule "
                                    "(e.g. 1/60s)",
                                    path);
        items = (const ratel__yaml_node_t *const *)node->items;
        n = node->n;
    }
    for (size_t i = 0; i < n; i++) {
        const ratel__yaml_node_t *r = items[i];
        snprintf(item, sizeof item,
                 node->type == RATEL__YAML_LIST ? "%s[%zu]" : "%s", path, i);
        if (r->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(r))
            return ratel__yaml_fail(
                ctx, r->line, "%s: expected a rule like 1/60s, got %s", item,
                ratel__yaml_describe(r, what, sizeof what));
        if (ratel_rule_parse(r->text, r->len, &rules[i], why, sizeof why))
            return ratel__yaml_fail(ctx, r->line, "%s: %s", item, why);
    }
    if (ratel_policy_init(out, rules, n, why, sizeof why))
        return ratel__yaml_fail(ctx, node->line, "%s: %s", path, why);
    return 0;
}

/* `policies:`: the rules of each rate-limit policy. */
static int read_policies(const ratel__yaml_ctx_t *ctx,
                         const ratel__yaml_node_t *node, captcha_config_t *c)
{
    const ratel__yaml_node_t *v[CAPTCHA_POLICIES];
    size_t order[CAPTCHA_POLICIES], n;
    char path[64];

    if (ratel__yaml_fields(ctx, node, "policies", captcha_policy_names,
                           CAPTCHA_POLICIES, v))
        return -1;
    n = ratel__yaml_by_line(v, CAPTCHA_POLICIES, order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        snprintf(path, sizeof path, "policies.%s", captcha_policy_names[i]);
        if (read_rules(ctx, v[i], path, &c->policies[i]))
            return -1;
    }
    return 0;
}

static int read_sender(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, captcha_config_t *c)
{
    static const char *const names[] = {"type",       "log_file",
                                        "url",        "timeout_ms",
                                        "queue_size", "resend_max_age_ms"};
    static const char *const types[] = {"log", "webhook"};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    int word = 0;
    uint64_t x;

    if (ratel__yaml_fields(ctx, node, "sender", names, COUNT(names), v))
        return -1;
    if (v[0] &&
        ratel__yaml_word(ctx, v[0], "sender.type", types, COUNT(types), &word))
        return -1;
    c->sender = word ? CAPTCHA_SENDER_WEBHOOK : CAPTCHA_SENDER_LOG;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        if ((i == 1 && c->sender != CAPTCHA_SENDER_LOG) ||
            ((i == 2 || i == 3) && c->sender != CAPTCHA_SENDER_WEBHOOK))
            return ratel__yaml_fail(ctx, v[i]->line,
                                    "sender.%s: applies to type: %s only (this "
                                    "sender is %s)",
                                    names[i], i == 1 ? "log" : "webhook",
                                    types[word]);
        switch (i) {
        case 0:
            break;
        case 1:
            if (ratel__yaml_string(ctx, v[i], "sender.log_file", c->log_file,
                                   sizeof c->log_file))
                return -1;
            if (!c->log_file[0])
                return ratel__yaml_fail(ctx, v[i]->line,
                                        "sender.log_file: is empty");
            break;
        case 2:
            if (ratel__yaml_string(ctx, v[i], "sender.url", c->webhook_url,
                                   sizeof c->webhook_url))
                return -1;
            if (strncmp(c->webhook_url, "http://", 7) != 0 &&
                strncmp(c->webhook_url, "https://", 8) != 0)
                return ratel__yaml_fail(ctx, v[i]->line,
                                        "sender.url: expected an http:// or "
                                        "https:// URL");
            break;
        case 3:
            if (ratel__yaml_uint(ctx, v[i], "sender.timeout_ms", 1, 600000, 0,
                                 &x))
                return -1;
            c->webhook_timeout_ms = (unsigned)x;
            break;
        case 4:
            if (ratel__yaml_uint(ctx, v[i], "sender.queue_size", 1, 1000000, 0,
                                 &x))
                return -1;
            c->queue_size = (unsigned)x;
            break;
        default:
            if (ratel__yaml_uint(ctx, v[i], "sender.resend_max_age_ms", 0,
                                 86400000, 1, &x))
                return -1;
            c->resend_max_age_ms = (int64_t)x;
        }
    }
    if (c->sender == CAPTCHA_SENDER_WEBHOOK && !v[2])
        return ratel__yaml_fail(ctx, node->line,
                                "sender.url: required with type: webhook (e.g. "
                                "http://127.0.0.1:9000/sms)");
    return 0;
}

enum {
    F_LISTEN,
    F_THREADS,
    F_ADMIN_TOKEN,
    F_TRUSTED,
    F_LIMITS,
    F_STORE,
    F_CODE_LENGTH,
    F_CODE_TTL,
    F_CODE_ATTEMPTS,
    F_CODE_ENTRIES,
    F_POLICIES,
    F_SENDER,
    F_SQLITE,
    F_COUNT
};

static int read_field(const ratel__yaml_ctx_t *ctx, int f,
                      const ratel__yaml_node_t *v, captcha_config_t *c)
{
    uint64_t x;

    switch (f) {
    case F_LISTEN:
        return read_listen(ctx, v, c);
    case F_THREADS:
        if (ratel__yaml_uint(ctx, v, "threads", 1, 256, 0, &x))
            return -1;
        c->threads = (unsigned)x;
        return 0;
    case F_ADMIN_TOKEN:
        return read_token(ctx, v, c);
    case F_TRUSTED:
        return ratel__yaml_trusted(ctx, v, "trusted_proxies", &c->trusted);
    case F_LIMITS:
        return read_limits(ctx, v, c);
    case F_STORE:
        return read_store(ctx, v, c);
    case F_CODE_LENGTH:
        if (ratel__yaml_uint(ctx, v, "code_length", CAPTCHA_CODE_MIN_LEN,
                             CAPTCHA_CODE_MAX_LEN, 0, &x))
            return -1;
        c->code_length = (unsigned)x;
        return 0;
    case F_CODE_TTL:
        if (ratel__yaml_uint(ctx, v, "code_ttl_ms", 100, 86400000, 0, &x))
            return -1;
        c->code_ttl_ms = (int64_t)x;
        return 0;
    case F_CODE_ATTEMPTS:
        if (ratel__yaml_uint(ctx, v, "code_max_attempts", 1, 100, 0, &x))
            return -1;
        c->code_max_attempts = (unsigned)x;
        return 0;
    case F_CODE_ENTRIES:
        if (ratel__yaml_uint(ctx, v, "code_max_entries", 16, 100000000, 0, &x))
            return -1;
        c->code_max_entries = (size_t)x;
        return 0;
    case F_POLICIES:
        return read_policies(ctx, v, c);
    case F_SENDER:
        return read_sender(ctx, v, c);
    default:
        if (ratel__yaml_string(ctx, v, "sqlite_path", c->sqlite_path,
                               sizeof c->sqlite_path))
            return -1;
        if (!c->sqlite_path[0])
            return ratel__yaml_fail(ctx, v->line, "sqlite_path: is empty");
        return 0;
    }
}

/* The HTTP section was called `http:` before it took rateld's name. */
static int refuse_old_http(const ratel__yaml_ctx_t *ctx,
                           const ratel__yaml_node_t *root)
{
    if (root->type != RATEL__YAML_MAP)
        return 0;
    for (size_t k = 0; k + 1 < root->n; k += 2) {
        const ratel__yaml_node_t *key = root->items[k];
        if (key->type == RATEL__YAML_SCALAR && !strcmp(key->text, "http"))
            return ratel__yaml_fail(
                ctx, key->line,
                "http: is now called limits: (HTTP sizes and "
                "times, as in rateld); the rate-limit rules "
                "are under policies:");
    }
    return 0;
}

int captcha_config_parse(const char *text, size_t len, const char *name,
                         captcha_config_t **out, char *err, size_t errlen)
{
    static const char *const names[F_COUNT] = {
        "listen",           "threads",     "admin_token",
        "trusted_proxies",  "limits",      "store",
        "code_length",      "code_ttl_ms", "code_max_attempts",
        "code_max_entries", "policies",    "sender",
        "sqlite_path"};
    ratel__yaml_ctx_t ctx = {name ? name : "config", err, errlen};
    const ratel__yaml_node_t *v[F_COUNT];
    ratel__yaml_node_t *root = NULL;
    size_t order[F_COUNT], n;
    captcha_config_t *c;
    int rc = -1;

    *out = NULL;
    c = calloc(1, sizeof *c);
    if (!c)
        return ratel__yaml_fail(&ctx, 1, "out of memory");
    set_defaults(c);
    if (ratel__yaml_load(&ctx, text, len, &root))
        goto out;
    if (!root) {
        rc = 0; /* an empty file: every default */
        goto out;
    }
    if (refuse_old_http(&ctx, root) ||
        ratel__yaml_fields(&ctx, root, "configuration", names, F_COUNT, v))
        goto out;
    n = ratel__yaml_by_line(v, F_COUNT, order);
    for (size_t k = 0; k < n; k++)
        if (read_field(&ctx, (int)order[k], v[order[k]], c))
            goto out;
    rc = 0;
out:
    if (rc == 0 && c->resend_max_age_ms < 0)
        c->resend_max_age_ms = c->code_ttl_ms;
    ratel__yaml_free(root);
    if (rc == 0)
        *out = c;
    else
        captcha_config_free(c);
    return rc;
}

int captcha_config_load(const char *path, captcha_config_t **out, char *err,
                        size_t errlen)
{
    char *text;
    size_t len;
    int rc;

    *out = NULL;
    if (ratel__config_read_file(path, &text, &len, err, errlen) != 0)
        return -1;
    rc = captcha_config_parse(text, len, path, out, err, errlen);
    free(text);
    return rc;
}

void captcha_config_free(captcha_config_t *config)
{
    free(config);
}
