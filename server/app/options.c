/*
 * options.c - the `limits:` table rateld and captchad share, and the
 * checks of their string options.
 */
#include "app/options.h"

#include "app/address.h"
#include "app/log.h"
#include "ratel_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define LIMIT(f) RATEL__FIELD(ratel_http_limits_t, f)

/* The ranges bound what one connection or request may cost (http.h has
   the defaults and what each limit does). */
const ratel__option_t ratel__limits_options[] = {
    {"max_header_bytes", RATEL__OPTION_SIZE, 1024, 1048576, 1,
     LIMIT(max_header_bytes), NULL, NULL, NULL},
    {"max_body_bytes", RATEL__OPTION_SIZE, 1, 16777216, 1,
     LIMIT(max_body_bytes), NULL, NULL, NULL},
    {"max_connections", RATEL__OPTION_UINT, 1, 1000000, 1,
     LIMIT(max_connections), NULL, NULL, NULL},
    /* 0 (the default) is off: no cap per client address. */
    {"max_connections_per_client", RATEL__OPTION_UINT, 1, 1000000, 1,
     LIMIT(max_connections_per_client), NULL, NULL, NULL},
    {"max_pipeline", RATEL__OPTION_UINT, 1, 1024, 1, LIMIT(max_pipeline), NULL,
     NULL, NULL},
    {"request_timeout_ms", RATEL__OPTION_MSEC, 1, 3600000, 1,
     LIMIT(request_timeout_ms), NULL, NULL, NULL},
    {"idle_timeout_ms", RATEL__OPTION_MSEC, 1, 86400000, 1,
     LIMIT(idle_timeout_ms), NULL, NULL, NULL},
    {"max_output_bytes", RATEL__OPTION_SIZE, 65536, 1073741824, 1,
     LIMIT(max_output_bytes), NULL, NULL, NULL},
};

const size_t ratel__limits_noptions = RATEL__COUNT(ratel__limits_options);

int ratel__check_listen(const char *text, char *why, size_t whylen)
{
    char q[96], reason[200];
    ratel_http_listen_t a;

    /* The servers' own reading (server/http/listen.c): an address the
       configuration accepts is one the server can parse. */
    if (ratel_http_listen_parse(text, &a, reason, sizeof reason) == 0)
        return 0;
    ratel__yaml_quote(text, strlen(text), q, sizeof q);
    snprintf(why, whylen,
             "\"%s\" is not HOST:PORT, [IPV6]:PORT or :PORT (e.g. "
             "127.0.0.1:8080, [::1]:8080, :8080): %s",
             q, reason);
    return -1;
}

/*
 * Every token ratel's README, docs and examples print, in any of them: a
 * token copied from a page is known to everyone who read the page, so it
 * guards nothing. The one list; tests/integration/test_secrets.sh checks
 * that each token literal the pages show is refused (most are also too
 * short, but the message names the real reason).
 */
static const char *const printed_tokens[] = {
    "change-me-to-a-long-random-string",
    "change-me",
    "8f1c0e4b9a7d...",
    "TOKEN",
    "ADMIN_TOKEN",
    "API_TOKEN",
};

/* How to make a token that is neither printed anywhere nor guessable. */
#define TOKEN_HOW                                                              \
    "make one with `openssl rand -hex 32`, or leave the token empty (\"\") "   \
    "to turn off what it guards"

int ratel__check_token(const char *text, char *why, size_t whylen)
{
    size_t len = strlen(text);

    if (strchr(text, ' ')) {
        snprintf(why, whylen,
                 "contains a space; a token is sent in a header "
                 "and must be one word");
        return -1;
    }
    /* Empty: the endpoints the token guards are turned off. */
    if (len == 0)
        return 0;
    for (size_t i = 0; i < RATEL__COUNT(printed_tokens); i++)
        if (strcasecmp(text, printed_tokens[i]) == 0) {
            snprintf(why, whylen,
                     "\"%s\" is the example token printed in ratel's "
                     "documentation, known to everyone who read it; " TOKEN_HOW,
                     printed_tokens[i]);
            return -1;
        }
    /* The token itself is a secret: only its length is shown. */
    if (len < RATEL__TOKEN_MIN) {
        snprintf(why, whylen,
                 "%zu bytes long; a token needs at least %d, too many to "
                 "guess; " TOKEN_HOW,
                 len, RATEL__TOKEN_MIN);
        return -1;
    }
    return 0;
}

int ratel__check_nonempty(const char *text, char *why, size_t whylen)
{
    if (text[0])
        return 0;
    snprintf(why, whylen, "is empty");
    return -1;
}

/* The value of `field` of `config` as an int (an enum or a size_t). */
static uint64_t field_value(const void *config, const ratel__option_t *field)
{
    uint64_t v = 0;
    const char *at = (const char *)config + field->offset;

    if (field->size == sizeof(int)) {
        int i;
        memcpy(&i, at, sizeof i);
        v = (uint64_t)i;
    } else if (field->size == sizeof(size_t)) {
        size_t z;
        memcpy(&z, at, sizeof z);
        v = z;
    }
    return v;
}

/* The name of field i of a store: section's fields, laid out as
   ratel__yaml_store reads them: type, the memory store's table, the
   program's other fields, the Redis query's table. */
static const char *store_field_name(const ratel__option_t *own, size_t nown,
                                    size_t i)
{
    size_t nm = ratel__memory_noptions;

    if (i == 0)
        return own[0].name;
    if (i < 1 + nm)
        return ratel__memory_options[i - 1].name;
    if (i < nown + nm)
        return own[i - nm].name;
    return ratel__redis_query_options[i - nown - nm].name;
}

/*
 * The Redis store made as the program makes it at start (lazily: nothing
 * is connected) and freed at once: its URL's address, port, path, query
 * and TLS files are checked by libratel's one reading of them, so that a
 * configuration the loader takes (for --check-config, a start or a
 * reload) is one the program can start with, and a refusal names the
 * file and line of store.url with start's own reason.
 */
static int redis_as_started(const ratel__yaml_ctx_t *ctx,
                            const ratel__yaml_node_t *url,
                            const ratel_redis_options_t *redis)
{
    ratel_redis_options_t o = *redis;
    ratel_store_t *store = NULL;
    char why[800];

    o.lazy_connect = 1;
    if (ratel_store_redis_new(&store, &o, why, sizeof why) != 0)
        return ratel__yaml_fail(ctx, url->line, "store.url: %s", why);
    ratel_store_free(store);
    return 0;
}

/*
 * The memory store's snapshot settings: for type: memory, the path checked
 * as start checks it; a Redis store keeps its state in Redis and refuses
 * them (max_bytes alone applies to both: the `local` failure policy's
 * store).
 */
static int memory_snapshot(const ratel__yaml_ctx_t *ctx,
                           const ratel__yaml_node_t *node,
                           const ratel__yaml_node_t *const *v, int is_memory,
                           const ratel__memory_settings_t *memory)
{
    char why[800];

    for (size_t i = 1; i < ratel__memory_noptions; i++)
        if (!is_memory && v[1 + i])
            return ratel__yaml_fail(
                ctx, v[1 + i]->line,
                "store.%s: applies to type: memory only (a Redis store's "
                "counts live in Redis)",
                ratel__memory_options[i].name);
    if (!is_memory ||
        ratel__memory_settings_check(memory, why, sizeof why) == 0)
        return 0;
    /* v[2]: the snapshot field, which named the path. */
    return ratel__yaml_fail(ctx, v[2] ? v[2]->line : node->line,
                            "store.snapshot: %s", why);
}

int ratel__yaml_store(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node,
                      const ratel__option_t *own, size_t nown, void *config,
                      ratel__memory_settings_t *memory,
                      ratel_redis_options_t *redis)
{
    ratel_redis_url_t query;
    /* type, then the memory store's own table (libratel's: one range for
       max_bytes in YAML and in ratel_store_memory_new), then url and the
       program's others, then the Redis URL's query table. */
    const ratel__yaml_group_t groups[] = {
        {own, 1, config, NULL, NULL},
        {ratel__memory_options, ratel__memory_noptions, memory, NULL, NULL},
        {own + 1, nown - 1, config, NULL, NULL},
        {ratel__redis_query_options, ratel__redis_query_noptions, &query, NULL,
         NULL}};
    const ratel__yaml_node_t *v[RATEL__YAML_FIELDS_MAX];
    size_t order[RATEL__YAML_FIELDS_MAX],
        nm = ratel__memory_noptions,
        n = nown + nm + ratel__redis_query_noptions;

    if (nown < 2 || n > RATEL__YAML_FIELDS_MAX || own[0].size != sizeof(int))
        return ratel__yaml_fail(ctx, node->line, "store: bad option table");
    ratel__redis_query_init(&query);
    if (ratel__yaml_groups(ctx, node, "store", groups, RATEL__COUNT(groups), v))
        return -1;
    if (memory_snapshot(ctx, node, v, field_value(config, &own[0]) == 0,
                        memory) != 0)
        return -1;
    if (field_value(config, &own[0]) == 0) { /* memory */
        /* Everything after the memory store's fields is for Redis: the
           first one given. */
        if (ratel__yaml_by_line(v + 1 + nm, n - 1 - nm, order) > 0)
            return ratel__yaml_fail(
                ctx, v[1 + nm + order[0]]->line,
                "store.%s: applies to type: redis only (this store is "
                "memory)",
                store_field_name(own, nown, 1 + nm + order[0]));
        memset(redis, 0, sizeof *redis);
        return 0;
    }
    if (!v[1 + nm])
        return ratel__yaml_fail(ctx, node->line,
                                "store.url: required with type: redis (e.g. "
                                "redis://127.0.0.1:6379)");
    redis->url = (const char *)config + own[1].offset;
    ratel__redis_query_to_options(&query, redis);
    /* Redis: max_bytes bounds the `local` failure policy's store. */
    redis->local.max_bytes = memory->max_bytes;
    return redis_as_started(ctx, v[1 + nm], redis);
}

int ratel__memory_store_open(const ratel__memory_settings_t *settings,
                             ratel_store_t **out)
{
    ratel_memory_options_t o;
    ratel_snapshot_options_t snap;
    ratel_store_stats_t st;
    char why[800];
    int rc;

    ratel__memory_settings_options(settings, &o, &snap);
    rc = ratel_store_memory_open(out, &o, &snap, why, sizeof why);
    if (rc != 0) {
        ratel__log("error", "cannot create the memory store", "reason=\"%s\"",
                   why[0] ? why : ratel_strerror(rc));
        return -1;
    }
    if (why[0])
        ratel__log("warn", "memory store snapshot not loaded", "reason=\"%s\"",
                   why);
    if (snap.path) {
        ratel_store_stats(*out, &st);
        ratel__log("info", "memory store snapshot", "path=%s keys=%llu",
                   snap.path, (unsigned long long)st.keys);
    }
    return 0;
}

void ratel__store_close(ratel_store_t *store)
{
    char why[800];

    if (store &&
        ratel_store_memory_snapshot(store, why, sizeof why) == RATEL_EIO)
        ratel__log("error", "memory store snapshot not written",
                   "reason=\"%s\"", why);
    ratel_store_free(store);
}
