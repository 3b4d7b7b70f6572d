/*
 * redis.c - the Redis store: every key's state lives in Redis, decided
 * there by the ratel module, the Functions library or the EVAL script
 * (same core, same bytes).
 *
 * What is said to Redis and made of its answers lives in the engine
 * (engine.h: routing, pipelines, preparation, deadlines, the breaker) and
 * redis_decide.c (decisions, the failure policy, the deny cache, groups);
 * both run on any loop. This file is the store object:
 *
 * - The synchronous calls (ratel_store_* in ratel.h). The store has an
 *   engine of its own on the poll transport (transport_poll.h); a call
 *   starts the same asynchronous call an event loop would, then drives
 *   the transport until it is done. Threads calling at once share that
 *   engine: the one driving writes the others' commands with its own, so
 *   concurrent callers' requests leave in one pipeline.
 * - Health (ratel_store_health()). Each node of each engine is a source;
 *   the store's own check is one more: ratel_store_ping() finding no
 *   cluster map, or a PING answered with an error (LOADING), is a failure
 *   no node's transport saw. A node that stops serving (an old primary
 *   after a failover, a node left without slots) stops counting.
 * - The library on demand: ratel__redis_load_library() (redis.h) loads it
 *   on every primary for `ratel lua-load`.
 */
#include "store/command.h"
#include "store/redis.h"
#include "store/redis_private.h"
#include "store/redis_url.h"

#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDIS_MAX_SERVING 256

void ratel__redis_set_error(redis_store_t *s, const char *message)
{
    pthread_mutex_lock(&s->err_lock);
    ratel__msg(s->errstr, sizeof s->errstr, "%s", message);
    pthread_mutex_unlock(&s->err_lock);
}

/* ------------------------------------------------- synchronous calls */

static void sync_done(void *ud)
{
    *(int *)ud = 1;
}

/* Runs the store's engine until *done (the poll transport's lock held). */
static void sync_wait(redis_store_t *s, int *done)
{
    ratel__poll_wait(s->poll, done);
}

static int run_call(redis_store_t *s, redis_call_t *call)
{
    int done = 0;

    call->s = s;
    call->fn = sync_done;
    call->ud = &done;
    ratel__poll_lock(s->poll);
    if (ratel__redis_call_start(s->engine, call) == 0)
        sync_wait(s, &done);
    ratel__poll_unlock(s->poll);
    return call->rc;
}

static int redis_acquire_batch(ratel_store_t *store, ratel_batch_item_t *items,
                               size_t n, int64_t now_us)
{
    redis_store_t *s = (redis_store_t *)store;
    int done = 0, rc;
    redis_batch_t b = {.s = s,
                       .e = s->engine,
                       .items = items,
                       .n = n,
                       .now_us = now_us,
                       .fn = sync_done,
                       .ud = &done};

    ratel__poll_lock(s->poll);
    rc = ratel__redis_batch_start(&b);
    if (rc == 0)
        sync_wait(s, &done);
    else if (rc == 1 &&
             atomic_load_explicit(&s->lease_calls, memory_order_relaxed))
        /* Answered from slices: the next slice's call still leaves, and
           its answer is read, though nobody waits for Redis. */
        ratel__poll_pump(s->poll);
    ratel__poll_unlock(s->poll);
    ratel__redis_batch_end(&b);
    return rc < 0 ? rc : 0;
}

static int redis_acquire(ratel_store_t *store, const char *key, size_t keylen,
                         const ratel_policy_t *policy, int64_t now_us,
                         const ratel_request_t *request,
                         ratel_decision_t *decision)
{
    ratel_batch_item_t item = {
        .key = key, .keylen = keylen, .policy = policy, .request = *request};
    int rc = redis_acquire_batch(store, &item, 1, now_us);

    *decision = item.decision;
    return rc != 0 ? rc : item.rc;
}

static int redis_refund(ratel_store_t *store, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        uint64_t cost, ratel_decision_t *decision)
{
    redis_call_t call = {.rop = {.kind = RATEL__ROP_REFUND,
                                 .key = key,
                                 .keylen = keylen,
                                 .policy = policy,
                                 .request.cost = cost,
                                 .now_us = now_us},
                         .decision = decision};

    return run_call((redis_store_t *)store, &call);
}

static int redis_release(ratel_store_t *store, const char *key, size_t keylen,
                         const ratel_policy_t *policy, int64_t now_us,
                         uint32_t lease, unsigned flags, int *held,
                         ratel_decision_t *decision)
{
    redis_call_t call = {.rop = {.kind = RATEL__ROP_RELEASE,
                                 .key = key,
                                 .keylen = keylen,
                                 .policy = policy,
                                 .lease = lease,
                                 .lease_flags = flags,
                                 .now_us = now_us},
                         .decision = decision,
                         .held = held};

    return run_call((redis_store_t *)store, &call);
}

/* The callers' latest time (for calls that are given none). */
static int64_t latest(redis_store_t *s)
{
    int64_t t = atomic_load_explicit(&s->last_now_us, memory_order_relaxed);
    return t > 0 ? t : ratel_clock_now_us();
}

static int redis_reset(ratel_store_t *store, const char *key, size_t keylen)
{
    redis_store_t *s = (redis_store_t *)store;
    redis_call_t call = {.rop = {.kind = RATEL__ROP_RESET,
                                 .key = key,
                                 .keylen = keylen,
                                 .now_us = latest(s)}};

    return run_call(s, &call);
}

static int redis_inspect(ratel_store_t *store, const char *key, size_t keylen,
                         int64_t now_us, ratel_rule_status_t *out, size_t max,
                         size_t *n)
{
    redis_call_t call = {.rop = {.kind = RATEL__ROP_GET,
                                 .key = key,
                                 .keylen = keylen,
                                 .now_us = now_us},
                         .out = out,
                         .max = max,
                         .n = n};

    return run_call((redis_store_t *)store, &call);
}

/* ------------------------------------------------ a program's commands */

static void command_done(ratel__rop_t *rop)
{
    *(int *)rop->ud = 1;
}

int ratel__redis_command(ratel_store_t *store, const char *key, size_t keylen,
                         int argc, const char *const *argv,
                         const size_t *argvlen, redisReply **reply, char *err,
                         size_t errlen)
{
    redis_store_t *s = (redis_store_t *)store;
    ratel__rop_t rop = {.kind = RATEL__ROP_COMMAND,
                        .key = key ? key : "",
                        .keylen = key ? keylen : 0,
                        .argc = argc,
                        .argv = argv,
                        .argvlen = argvlen};
    int done = 0;

    *reply = NULL;
    if (!store || store->ops != &ratel__redis_ops || argc < 1 ||
        argc > RATEL__COMMAND_MAX || !argv || !argvlen) {
        ratel__msg(err, errlen, "not a Redis store, or a bad command");
        return RATEL_EINVAL;
    }
    rop.now_us = latest(s);
    rop.done = command_done;
    rop.ud = &done;
    ratel__poll_lock(s->poll);
    ratel__engine_submit(s->engine, &rop);
    sync_wait(s, &done);
    ratel__poll_unlock(s->poll);
    if (rop.rc != 0) {
        ratel__msg(err, errlen, "%s",
                   rop.node && ratel__engine_node_error(rop.node)[0]
                       ? ratel__engine_node_error(rop.node)
                       : "no Redis server answered");
        return rop.rc;
    }
    *reply = rop.reply;
    return 0;
}

/* --------------------------------------------------------------- ping */

typedef struct wait_all_s {
    size_t pending;
    int done;
} wait_all_t;

static void one_done(ratel__rop_t *rop)
{
    wait_all_t *w = rop->ud;

    if (--w->pending == 0)
        w->done = 1;
}

/* Submits rops[0..n) and waits for all (the poll lock held). */
static void run_rops(redis_store_t *s, ratel__rop_t *rops, size_t n)
{
    wait_all_t w = {n, n == 0};

    for (size_t i = 0; i < n; i++) {
        rops[i].done = one_done;
        rops[i].ud = &w;
        ratel__engine_submit(s->engine, &rops[i]);
    }
    sync_wait(s, &w.done);
}

/* Learns which nodes serve now (a cluster's map, a failover's primary)
   into serving[]; 0 or RATEL_EIO with err (the poll lock held). */
static int discover(redis_store_t *s, ratel__node_t **serving, size_t *n,
                    char *err, size_t errlen)
{
    ratel__rop_t rop = {.now_us = latest(s), .force = 1};
    wait_all_t w = {1, 0};

    rop.done = one_done;
    rop.ud = &w;
    ratel__engine_discover(s->engine, &rop);
    sync_wait(s, &w.done);
    if (rop.rc != 0 && (s->sh.url.cluster || s->sh.url.sentinel)) {
        pthread_mutex_lock(&s->err_lock);
        ratel__msg(err, errlen, "%s",
                   s->errstr[0]         ? s->errstr
                   : s->sh.url.sentinel ? "no Sentinel named a primary"
                                        : "no cluster node answered");
        pthread_mutex_unlock(&s->err_lock);
        /* RATEL_EPROTO: a Sentinel knew no such primary or refused the
           credentials, a node is no cluster node: no outage. */
        return rop.rc == RATEL_EPROTO ? RATEL_EPROTO : RATEL_EIO;
    }
    *n = ratel__engine_serving(s->engine, serving, REDIS_MAX_SERVING);
    return 0;
}

/* What one forced PING found: 0, or RATEL_E* with err; *transport when
   the round trip itself failed (the node recorded it as its own). */
static int ping_result(const ratel__rop_t *rop, char *err, size_t errlen,
                       int *transport)
{
    const redisReply *r = rop->reply;

    if (rop->rc != 0) {
        *transport = 1;
        ratel__msg(err, errlen, "%s", ratel__engine_node_error(rop->node));
        return rop->rc;
    }
    if (r->type != REDIS_REPLY_STATUS) {
        ratel__msg(err, errlen, "%s: PING answered %.*s",
                   ratel__engine_node_name(rop->node), (int)r->len,
                   r->str ? r->str : "");
        return RATEL_EPROTO;
    }
    return 0;
}

/*
 * Asks every serving node for PING (a cluster: its map first). Feeds the
 * store's health: a failure no node's transport saw (no map, an error
 * reply) is the store's own check's; a success clears it, and nodes that
 * no longer serve stop counting.
 */
static int redis_ping(ratel_store_t *store, char *errbuf, size_t errlen)
{
    redis_store_t *s = (redis_store_t *)store;
    ratel__node_t *serving[REDIS_MAX_SERVING];
    ratel__rop_t rops[REDIS_MAX_SERVING];
    size_t n = 0;
    char err[400] = "";
    int rc, transport = 0, changed = 0;

    ratel__poll_lock(s->poll);
    rc = discover(s, serving, &n, err, sizeof err);
    if (rc == 0) {
        memset(rops, 0, n * sizeof *rops);
        for (size_t i = 0; i < n; i++) {
            rops[i].kind = RATEL__ROP_PING;
            rops[i].target = serving[i];
            rops[i].force = 1;
            rops[i].now_us = ratel_clock_now_us();
        }
        run_rops(s, rops, n);
        for (size_t i = 0; i < n; i++) {
            if (rc == 0)
                rc = ping_result(&rops[i], err, sizeof err, &transport);
            freeReplyObject(rops[i].reply);
        }
        changed = ratel__engine_health_prune(s->engine);
    }
    ratel__poll_unlock(s->poll);
    changed |=
        ratel__health_set(&s->health, &s->check_down, rc != 0 && !transport,
                          err, ratel_clock_now_us());
    if (changed)
        ratel__health_notify(&s->health);
    if (rc != 0 && errbuf && errlen)
        ratel__msg(errbuf, errlen, "%s", err);
    return rc;
}

static void redis_health(ratel_store_t *store, ratel_store_health_t *out)
{
    ratel__health_get(&((redis_store_t *)store)->health, out);
}

static void redis_watch_health(ratel_store_t *store, ratel_store_health_fn fn,
                               void *ud)
{
    ratel__health_watch(&((redis_store_t *)store)->health, fn, ud);
}

static void redis_errstr(ratel_store_t *store, char *buf, size_t len)
{
    redis_store_t *s = (redis_store_t *)store;

    pthread_mutex_lock(&s->err_lock);
    snprintf(buf, len, "%s", s->errstr);
    pthread_mutex_unlock(&s->err_lock);
}

static void redis_stats(ratel_store_t *store, ratel_store_stats_t *out)
{
    redis_store_t *s = (redis_store_t *)store;

#define LOAD(f, from) out->f = atomic_load_explicit(&from, memory_order_relaxed)
    LOAD(round_trips, s->sh.round_trips);
    LOAD(commands, s->sh.commands);
    LOAD(reconnects, s->sh.reconnects);
    LOAD(redirects, s->sh.redirects);
    LOAD(cache_hits, s->cache_hits);
    LOAD(errors, s->errors);
    LOAD(fallback_open, s->fallback_open);
    LOAD(fallback_closed, s->fallback_closed);
    LOAD(fallback_local, s->fallback_local);
#undef LOAD
    out->breaker_open =
        atomic_load_explicit(&s->sh.breaker_open, memory_order_relaxed) > 0;
}

void ratel__redis_free(ratel_store_t *store)
{
    redis_store_t *s = (redis_store_t *)store;

    if (s->poll)
        ratel__poll_lock(s->poll);
    ratel__redis_lease_close(s);
    ratel__engine_free(s->engine);
    if (s->poll) {
        ratel__poll_unlock(s->poll);
        ratel__poll_free(s->poll);
    }
    ratel__deny_cache_free(s->cache);
    ratel__lease_table_free(s->leases);
    ratel_store_free(s->local);
    if (s->sh.tls)
        SSL_CTX_free(s->sh.tls);
    pthread_mutex_destroy(&s->err_lock);
    ratel__redis_health_sources_free(&s->sh);
    pthread_mutex_destroy(&s->sh.sources_lock);
    ratel__health_destroy(&s->health);
    free(s);
}

const ratel_store_ops_t ratel__redis_ops = {
    .name = "redis",
    .acquire = redis_acquire,
    .refund = redis_refund,
    .release = redis_release,
    .reset = redis_reset,
    .inspect = redis_inspect,
    .acquire_batch = redis_acquire_batch,
    .batch_groups = 1,
    .ping = redis_ping,
    .health = redis_health,
    .watch_health = redis_watch_health,
    .errstr = redis_errstr,
    .stats = redis_stats,
    .free = ratel__redis_free,
};

/* ------------------------------------------------------ the library */

const char *ratel__redis_library_version(void)
{
    return ratel__lua_library_version;
}

/* What LIBRARY on one node found, told to `fn`. */
static int library_report(const ratel__rop_t *rop, ratel__library_fn fn,
                          void *ud)
{
    ratel__library_report_t report = {ratel__engine_node_name(rop->node),
                                      rop->found,
                                      NULL,
                                      rop->rc,
                                      rop->refused,
                                      ""};
    char why[400] = "";

    if (rop->rc == 0) {
        report.loaded = ratel__lua_library_version;
    } else if (rop->reply) {
        ratel__msg(why, sizeof why, "%s: %s %s: %.*s", report.node,
                   rop->refused ? "FUNCTION LOAD of the ratel library"
                                : "FCALL_RO ratel_version",
                   rop->refused ? "refused" : "failed", (int)rop->reply->len,
                   rop->reply->str ? rop->reply->str : "");
    } else {
        ratel__msg(why, sizeof why, "%s", ratel__engine_node_error(rop->node));
    }
    report.error = why;
    if (fn)
        fn(ud, &report);
    return report.rc;
}

int ratel__redis_load_library(ratel_store_t *store, ratel__library_fn fn,
                              void *ud, char *errbuf, size_t errlen)
{
    redis_store_t *s = (redis_store_t *)store;
    ratel__node_t *serving[REDIS_MAX_SERVING];
    ratel__rop_t rops[REDIS_MAX_SERVING];
    size_t n = 0;
    int rc;

    if (!store || store->ops != &ratel__redis_ops) {
        ratel__msg(errbuf, errlen, "not a Redis store");
        return RATEL_EINVAL;
    }
    ratel__poll_lock(s->poll);
    rc = discover(s, serving, &n, errbuf, errlen);
    if (rc == 0) {
        memset(rops, 0, n * sizeof *rops);
        for (size_t i = 0; i < n; i++) {
            rops[i].kind = RATEL__ROP_LIBRARY;
            rops[i].target = serving[i];
            rops[i].force = 1;
            rops[i].now_us = latest(s);
        }
        run_rops(s, rops, n);
    }
    ratel__poll_unlock(s->poll);
    for (size_t i = 0; i < n; i++) {
        int one = library_report(&rops[i], fn, ud);
        if (rc == 0)
            rc = one;
    }
    for (size_t i = 0; i < n; i++)
        freeReplyObject(rops[i].reply);
    return rc;
}
