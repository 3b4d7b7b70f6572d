/*
 * captcha_config.c - captchad's YAML file (captchad/captchad.yaml
 * documents every field), read with the tree and typed readers rateld
 * uses too (server/app/yaml.c) so that both programs report problems the
 * same way: "FILE:LINE: PATH: reason", unknown fields included.
 */
#include "captchad/captcha.h"

#include "app/options.h"
#include "app/yaml.h"
#include "ratel_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) RATEL__COUNT(a)
/* A field of the configuration, for a table entry. */
#define CONFIG(f) RATEL__FIELD(captcha_config_t, f)

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
    ratel__memory_settings_init(&c->memory);
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
    snprintf(c->phone_region, sizeof c->phone_region, "CN");
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

/* `store:` fields other than the Redis store's settings (which are in
   ratel__redis_query_options, as in rateld and a store URL's query). */
static const char *const store_types[] = {"memory", "redis", NULL};
static const ratel__option_t store_options[] = {
    {"type", RATEL__OPTION_ENUM, 0, 0, 0, CONFIG(store_redis), store_types,
     NULL, NULL},
    /* Read as start reads it: ratel__yaml_store makes the store (every
       form the rate limits take, Sentinel and Cluster included, holds the
       codes too). */
    {"url", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(redis_url), NULL, NULL, NULL},
};

static int read_store(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node, captcha_config_t *c)
{
    return ratel__yaml_store(ctx, node, store_options, COUNT(store_options), c,
                             &c->memory, &c->redis);
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

/* A webhook's URL. */
static int check_webhook_url(const char *text, char *why, size_t whylen)
{
    if (strncmp(text, "http://", 7) == 0 || strncmp(text, "https://", 8) == 0)
        return 0;
    snprintf(why, whylen, "expected an http:// or https:// URL");
    return -1;
}

static const char *const sender_types[] = {"log", "webhook", NULL};
static const int sender_kinds[] = {CAPTCHA_SENDER_LOG, CAPTCHA_SENDER_WEBHOOK};
static const ratel__option_t sender_options[] = {
    {"type", RATEL__OPTION_ENUM, 0, 0, 0, CONFIG(sender), sender_types,
     sender_kinds, NULL},
    {"log_file", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(log_file), NULL, NULL,
     ratel__check_nonempty},
    {"url", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(webhook_url), NULL, NULL,
     check_webhook_url},
    {"timeout_ms", RATEL__OPTION_MSEC, 1, 600000, 0, CONFIG(webhook_timeout_ms),
     NULL, NULL, NULL},
    {"queue_size", RATEL__OPTION_UINT, 1, 1000000, 0, CONFIG(queue_size), NULL,
     NULL, NULL},
    {"resend_max_age_ms", RATEL__OPTION_MSEC, 0, 86400000, 0,
     CONFIG(resend_max_age_ms), NULL, NULL, NULL},
};

static int read_sender(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, captcha_config_t *c)
{
    const ratel__yaml_node_t *v[COUNT(sender_options)];
    int webhook;

    if (ratel__yaml_options(ctx, node, "sender", sender_options,
                            COUNT(sender_options), c, v))
        return -1;
    webhook = c->sender == CAPTCHA_SENDER_WEBHOOK;
    /* log_file is the log sender's, url and timeout_ms the webhook's. */
    for (size_t i = 1; i <= 3; i++)
        if (v[i] && (i == 1) == webhook)
            return ratel__yaml_fail(ctx, v[i]->line,
                                    "sender.%s: applies to type: %s only "
                                    "(this sender is %s)",
                                    sender_options[i].name,
                                    i == 1 ? "log" : "webhook",
                                    sender_types[webhook]);
    if (webhook && !v[2])
        return ratel__yaml_fail(ctx, node->line,
                                "sender.url: required with type: webhook (e.g. "
                                "http://127.0.0.1:9000/sms)");
    return 0;
}

/* The top level's own options. */
static const ratel__option_t top_options[] = {
    RATEL__SERVER_OPTIONS(captcha_config_t),
    {"code_length", RATEL__OPTION_UINT, CAPTCHA_CODE_MIN_LEN,
     CAPTCHA_CODE_MAX_LEN, 0, CONFIG(code_length), NULL, NULL, NULL},
    {"code_ttl_ms", RATEL__OPTION_MSEC, 100, 86400000, 0, CONFIG(code_ttl_ms),
     NULL, NULL, NULL},
    {"code_max_attempts", RATEL__OPTION_UINT, 1, 100, 0,
     CONFIG(code_max_attempts), NULL, NULL, NULL},
    {"code_max_entries", RATEL__OPTION_UINT, 16, 100000000, 0,
     CONFIG(code_max_entries), NULL, NULL, NULL},
    {"sqlite_path", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(sqlite_path), NULL,
     NULL, ratel__check_nonempty},
    /* A region libphonenumber knows (app/phone.h), or "". */
    {"phone_region", RATEL__OPTION_STRING, 0, 0, 0, CONFIG(phone_region), NULL,
     NULL, ratel__phone_check_region},
};

/* The top level's sections, read by read_section. */
enum { F_TRUSTED, F_LIMITS, F_STORE, F_POLICIES, F_SENDER, F_COUNT };
static const ratel__option_t top_sections[F_COUNT] = {
    {.name = "trusted_proxies"},
    {.name = "limits"},
    {.name = "store"},
    {.name = "policies"},
    {.name = "sender"}};

/* Where read_section works. */
typedef struct section_reader_s {
    const ratel__yaml_ctx_t *ctx;
    captcha_config_t *c;
} section_reader_t;

static int read_section(void *ud, size_t i, const ratel__yaml_node_t *v)
{
    const section_reader_t *r = ud;
    captcha_config_t *c = r->c;

    switch (i) {
    case F_TRUSTED:
        return ratel__yaml_trusted(r->ctx, v, "trusted_proxies", &c->trusted);
    case F_LIMITS:
        return refuse_old_limits(r->ctx, v) ||
               ratel__yaml_options(r->ctx, v, "limits", ratel__limits_options,
                                   ratel__limits_noptions, &c->limits, NULL);
    case F_STORE:
        return read_store(r->ctx, v, c);
    case F_POLICIES:
        return read_policies(r->ctx, v, c);
    default:
        return read_sender(r->ctx, v, c);
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
    ratel__yaml_ctx_t ctx = {name ? name : "config", err, errlen};
    ratel__yaml_node_t *root = NULL;
    section_reader_t sections = {&ctx, NULL};
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
    sections.c = c;
    {
        const ratel__yaml_group_t groups[] = {
            {top_options, COUNT(top_options), c, NULL, NULL},
            {top_sections, F_COUNT, NULL, read_section, &sections}};
        if (refuse_old_http(&ctx, root) ||
            ratel__yaml_groups(&ctx, root, "", groups, COUNT(groups), NULL))
            goto out;
    }
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
