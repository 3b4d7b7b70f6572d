/*
 * redis_new.c - making a Redis store: its options (a value given to the C
 * API, else the URL's, else the default), the EVAL script's SHA1, the
 * deny cache, the `local` fallback store, the engine of the synchronous
 * calls, and the first contact (unless lazy_connect), which reports a
 * wrong address, password, a server that is not Redis or a missing module
 * at once.
 */
#include "store/keyhash.h"
#include "store/option.h"
#include "store/redis_private.h"
#include "store/redis_url.h"
#include "store/tls.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDIS_DEFAULT_TIMEOUT_MS 250
#define REDIS_DEFAULT_POOL 4
#define REDIS_DEFAULT_DENY_CACHE 16384 /* x 288 bytes: 4.5 MiB */
#define REDIS_DEFAULT_LEASE_KEYS 4096  /* x 704 bytes, touched when used */
#define REDIS_DEFAULT_DENY_MAX_MS 10000
#define REDIS_DEFAULT_BREAKER_MS 1000

static void note(void *ud, const char *message)
{
    ratel__redis_set_error(ud, message);
}

static int pick(int option, int from_url, int dflt)
{
    return option > 0 ? option : from_url > 0 ? from_url : dflt;
}

/* The EVAL script's SHA1 in hex, as SCRIPT LOAD answers it. */
static int script_sha(char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;

    if (!EVP_Digest(ratel__lua_script, ratel__lua_script_len, md, &len,
                    EVP_sha1(), NULL) ||
        len != 20)
        return RATEL_ENOMEM;
    for (unsigned i = 0; i < len; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* One C option against the option table's range ("timeout_ms" ...);
   0 (the URL's, else the default) is always accepted. */
static int in_range(const char *name, int64_t v, char *errbuf, size_t errlen)
{
    uint64_t min = 0, max = 0;

    if (v == 0 || ratel__redis_option_check(name, v) == 0)
        return 0;
    ratel__option_range(ratel__redis_query_options, ratel__redis_query_noptions,
                        name, &min, &max);
    ratel__msg(errbuf, errlen,
               "redis store: %s %lld is out of range; accepted: %llu..%llu "
               "(0: the URL's, else the default)",
               name, (long long)v, (unsigned long long)min,
               (unsigned long long)max);
    return RATEL_EINVAL;
}

/* The C options' ranges: those of the option table (option.h) that a
   URL's query and a configuration's store: section are held to. */
static int check_options(const ratel_redis_options_t *o, char *errbuf,
                         size_t errlen)
{
    if (in_range("connect_timeout_ms", o->connect_timeout_ms, errbuf, errlen) ||
        in_range("timeout_ms", o->command_timeout_ms, errbuf, errlen) ||
        in_range("pool", o->pool_size, errbuf, errlen) ||
        in_range("deny_cache",
                 o->deny_cache_entries > 0 ? o->deny_cache_entries : 0, errbuf,
                 errlen) ||
        in_range("wait_replicas", o->wait_replicas, errbuf, errlen))
        return RATEL_EINVAL;
    if (o->breaker_ms < 0 || o->deny_cache_max_ms < 0 ||
        o->on_failure < RATEL_FAILURE_DEFAULT ||
        o->on_failure > RATEL_FAILURE_LOCAL || o->mode < RATEL_REDIS_AUTO ||
        o->mode > RATEL_REDIS_FUNCTION) {
        ratel__msg(errbuf, errlen,
                   "redis store: an option is out of range (breaker_ms and "
                   "deny_cache_max_ms >= 0, on_failure and mode one of "
                   "theirs)");
        return RATEL_EINVAL;
    }
    return 0;
}

/* Settings every engine of the store shares. */
static void configure_shared(redis_store_t *s, const ratel_redis_options_t *o)
{
    ratel__redis_shared_t *sh = &s->sh;
    const ratel_redis_url_t *u = &sh->url;
    int64_t breaker_ms;

    sh->connect_timeout_ms = pick(o->connect_timeout_ms, u->connect_timeout_ms,
                                  REDIS_DEFAULT_TIMEOUT_MS);
    sh->command_timeout_ms =
        pick(o->command_timeout_ms, u->timeout_ms, REDIS_DEFAULT_TIMEOUT_MS);
    sh->pool_size =
        (unsigned)pick((int)o->pool_size, (int)u->pool, REDIS_DEFAULT_POOL);
    sh->mode = o->mode != RATEL_REDIS_AUTO ? o->mode : u->mode;
    sh->wait_replicas = o->wait_replicas ? o->wait_replicas : u->wait_replicas;
    breaker_ms = o->breaker_ms > 0 ? o->breaker_ms : REDIS_DEFAULT_BREAKER_MS;
    sh->breaker_us = breaker_ms * 1000;
    sh->username = u->username;
    sh->password = u->has_password ? u->password : NULL;
    sh->db = u->db;
    sh->library = ratel__lua_library;
    sh->library_len = ratel__lua_library_len;
    sh->library_version = ratel__lua_library_version;
    sh->script = ratel__lua_script;
    sh->script_len = ratel__lua_script_len;
    sh->note = note;
    sh->error = note;
    sh->note_ud = s;
    sh->health = &s->health;
    s->on_failure = o->on_failure != RATEL_FAILURE_DEFAULT ? o->on_failure
                    : u->on_failure != RATEL_FAILURE_DEFAULT
                        ? u->on_failure
                        : RATEL_FAILURE_LOCAL;
    s->client_time = o->client_time != 0;
}

/* The caller's string when given, else the URL's ("" or NULL: none). */
static const char *pick_text(const char *option, const char *from_url)
{
    return option && option[0]       ? option
           : from_url && from_url[0] ? from_url
                                     : NULL;
}

static void keep(char *buf, size_t len, const char *text)
{
    snprintf(buf, len, "%s", text ? text : "");
}

/*
 * TLS (a rediss scheme, tls.h picks the settings): one OpenSSL context
 * for every connection of the store, verifying the server's certificate
 * against tls_ca_file or the system's CAs and its name against
 * tls_server_name or each host; and the Sentinels' own credentials. The
 * caller's strings are copied.
 */
static int configure_tls(redis_store_t *s, const ratel_redis_options_t *o,
                         char *errbuf, size_t errlen)
{
    ratel__redis_shared_t *sh = &s->sh;
    const ratel_redis_url_t *u = &sh->url;
    ratel__tls_options_t t;
    char err[600];
    int rc = ratel__tls_options_pick(u, o, &t, errbuf, errlen);

    if (rc != 0)
        return rc;
    keep(s->sentinel_username, sizeof s->sentinel_username,
         pick_text(o->sentinel_username, u->sentinel_username));
    keep(s->sentinel_password, sizeof s->sentinel_password,
         pick_text(o->sentinel_password, u->sentinel_password));
    sh->sentinel_username = s->sentinel_username;
    sh->sentinel_password =
        s->sentinel_password[0] ? s->sentinel_password : NULL;
    if (!u->tls)
        return 0;
    rc = ratel__tls_ctx_new(&t, &sh->tls, err, sizeof err);
    if (rc != 0) {
        ratel__msg(errbuf, errlen, "redis store: %s", err);
        return rc;
    }
    keep(s->tls_server_name, sizeof s->tls_server_name, t.server_name);
    sh->tls_server_name = s->tls_server_name[0] ? s->tls_server_name : NULL;
    sh->tls_insecure = t.insecure;
    return 0;
}

/* The deny cache, the leased keys and the `local` fallback store. */
static int configure_local(redis_store_t *s, const ratel_redis_options_t *o,
                           char *errbuf, size_t errlen)
{
    const ratel_redis_url_t *u = &s->sh.url;
    long entries = o->deny_cache_entries != 0 ? o->deny_cache_entries
                   : u->deny_cache >= 0       ? u->deny_cache
                                              : REDIS_DEFAULT_DENY_CACHE;
    int64_t deny_ms = o->deny_cache_max_ms > 0 ? o->deny_cache_max_ms
                                               : REDIS_DEFAULT_DENY_MAX_MS;
    uint64_t seed[3];
    int rc;

    if (entries > 0) {
        rc = ratel__deny_cache_new(&s->cache, (size_t)entries, deny_ms);
        if (rc != 0) {
            ratel__msg(errbuf, errlen,
                       "redis store: deny cache of %ld entries: %s", entries,
                       ratel_strerror(rc));
            return rc;
        }
    }
    /* Leased keys: a table that costs nothing until a request is leased
       (calloc's pages are touched as keys arrive). */
    rc = ratel__lease_table_new(&s->leases, REDIS_DEFAULT_LEASE_KEYS);
    if (rc != 0) {
        ratel__msg(errbuf, errlen, "redis store: leased keys: %s",
                   ratel_strerror(rc));
        return rc;
    }
    ratel__keyhash_seed(seed, s);
    s->holder = (seed[0] & RATEL_HOLDER_MAX) | 1;
    if (s->on_failure == RATEL_FAILURE_LOCAL) {
        rc = ratel_store_memory_new(&s->local, &o->local);
        if (rc != 0) {
            ratel__msg(errbuf, errlen,
                       "redis store: the local fallback store: %s",
                       ratel_strerror(rc));
            return rc;
        }
    }
    return 0;
}

int ratel__redis_sync_engine(redis_store_t *s)
{
    ratel__loop_hooks_t hooks;

    s->engine = ratel__engine_new(&s->sh, &hooks);
    if (!s->engine || ratel__poll_new(&s->poll, &hooks) != 0)
        return RATEL_ENOMEM;
    ratel__engine_set_transport(s->engine, &ratel__poll_transport, s->poll);
    return 0;
}

/* The first contact: every node reached (the cluster's map first, a
   failover's primary), each one's mode learnt. */
static int first_contact(redis_store_t *s, char *errbuf, size_t errlen)
{
    char err[400] = "";
    int rc = ratel__redis_ops.ping(&s->base, err, sizeof err);

    if (rc != 0)
        ratel__msg(errbuf, errlen, "redis store: %s", err);
    return rc;
}

int ratel_store_redis_new(ratel_store_t **out,
                          const ratel_redis_options_t *options, char *errbuf,
                          size_t errlen)
{
    redis_store_t *s;
    int rc;

    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!out)
        return RATEL_EINVAL;
    *out = NULL;
    if (!options || !options->url) {
        ratel__msg(errbuf, errlen,
                   "redis store: a URL is needed, e.g. "
                   "redis://127.0.0.1:6379");
        return RATEL_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        return RATEL_ENOMEM;
    s->base.ops = &ratel__redis_ops;
    pthread_mutex_init(&s->err_lock, NULL);
    pthread_mutex_init(&s->sh.sources_lock, NULL);
    ratel__health_init(&s->health);
    rc = check_options(options, errbuf, errlen);
    if (rc == 0)
        rc = ratel__redis_url_parse(options->url, &s->sh.url, errbuf, errlen);
    if (rc == 0) {
        configure_shared(s, options);
        rc = script_sha(s->sh.script_sha);
    }
    if (rc == 0)
        rc = configure_tls(s, options, errbuf, errlen);
    if (rc == 0)
        rc = configure_local(s, options, errbuf, errlen);
    if (rc == 0)
        rc = ratel__redis_sync_engine(s);
    if (rc == 0 && !options->lazy_connect)
        rc = first_contact(s, errbuf, errlen);
    if (rc != 0) {
        ratel__redis_free(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
