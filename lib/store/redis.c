/*
 * redis.c - the Redis store: every key's state lives in Redis, decided
 * there by the ratel module, the Functions library or the EVAL script
 * (same core, same bytes; redis_node.h says how a node's way is chosen).
 *
 * This file routes requests and interprets answers; redis_node.c talks to
 * one server (pool, shared pipeline, breaker). Here:
 *
 * - Routing. Standalone: the URL's addresses are one primary and its
 *   possible successors; requests go to the current primary, and when it
 *   fails (or answers READONLY: it became a replica) the addresses are
 *   asked for their ROLE and the store follows the one that is primary.
 *   Cluster: the slot map from CLUSTER SLOTS; a key's slot is CRC16 of the
 *   key (or of its {hash tag}) mod 16384; MOVED updates the map and is
 *   followed, ASK is followed once with ASKING. A policy's key is one Redis
 *   key, so every decision is one command on one slot.
 * - Answers. Seven integers become a decision (an eighth: the lease of an
 *   ACQUIRE under a concurrent rule, RELEASE's held); error replies become
 *   RATEL_E* codes; NOSCRIPT reloads the script and "Function not found"
 *   the library; a module or library that disappeared (a restart without
 *   it, a failover to an older server) is detected again.
 * - The library on demand: ratel__redis_load_library() (redis.h) loads it
 *   on every primary for `ratel lua-load`.
 * - Failure policy. When Redis cannot decide (down, timeout, breaker open,
 *   LOADING, CLUSTERDOWN...), `open` allows, `closed` denies until the
 *   breaker lets the next attempt through, `local` decides with an embedded
 *   memory store. The decision's `source` says which.
 * - Deny cache. A denial until T answers this key locally until T
 *   (deny_cache.h).
 * - Health (ratel_store_health()). Each node is a source (redis_node.h);
 *   the store's own check is one more: ratel_store_ping() finding no
 *   cluster map, or a PING answered with an error (LOADING), is a failure
 *   no node's transport saw. A node that stops serving (an old primary
 *   after a failover, a node left without slots) stops counting.
 */
#include "store/deny_cache.h"
#include "store/health.h"
#include "store/redis.h"
#include "store/redis_node.h"
#include "store/redis_url.h"
#include "store/store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REDIS_DEFAULT_TIMEOUT_MS 250
#define REDIS_DEFAULT_POOL 4
#define REDIS_DEFAULT_DENY_CACHE 16384 /* x 288 bytes: 4.5 MiB */
#define REDIS_DEFAULT_DENY_MAX_MS 10000
#define REDIS_DEFAULT_BREAKER_MS 1000
#define REDIS_MAX_NODES 256
#define REDIS_SLOTS 16384
/* Keys longer than this are refused (RATEL_ERANGE). */
#define REDIS_KEY_MAX RATEL_REDIS_KEY_MAX
/* Redirections, reloads and failovers followed for one request. */
#define REDIS_MAX_ATTEMPTS 5

/* The Functions library and the EVAL script (build/gen/lua_script.c). */
extern const char ratel__lua_library[];
extern const size_t ratel__lua_library_len;
extern const char ratel__lua_library_version[];
extern const char ratel__lua_script[];
extern const size_t ratel__lua_script_len;

typedef struct redis_store_s {
    ratel_store_t base;
    ratel_redis_url_t url;
    node_config_t cfg;
    char script_sha[41];
    pthread_mutex_t sha_lock;
    ratel_failure_t on_failure;
    int client_time;

    pthread_mutex_t lock; /* nodes, primary, refresh and failover times */
    node_t *nodes[REDIS_MAX_NODES];
    size_t nnodes;
    size_t primary;                      /* standalone: index in nodes */
    _Atomic uint16_t slots[REDIS_SLOTS]; /* cluster: node index + 1, 0 none */
    int64_t last_map_us, last_failover_us;

    ratel_deny_cache_t *cache;
    ratel_store_t *local;

    pthread_mutex_t err_lock;
    char errstr[300];

    ratel_health_t health;
    int check_down; /* the store's own check, as a health source */

    _Atomic int64_t last_now_us; /* the callers' latest time */
    _Atomic uint64_t round_trips, commands, reconnects, cache_hits, errors,
        fallback_open, fallback_closed, fallback_local, redirects;
} redis_store_t;

static uint16_t crc16_table[256];
static pthread_once_t crc16_once = PTHREAD_ONCE_INIT;

/* CRC16-CCITT (XModem), the polynomial Redis Cluster hashes keys with. */
static void crc16_init(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t crc = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
        crc16_table[i] = crc;
    }
}

/* The cluster slot of a key: of its first non-empty {hash tag}, if any. */
static unsigned key_slot(const char *key, size_t len)
{
    uint16_t crc = 0;
    size_t start = 0, end = len;

    for (size_t i = 0; i < len; i++) {
        if (key[i] == '{') {
            for (size_t j = i + 1; j < len; j++) {
                if (key[j] == '}') {
                    if (j > i + 1) {
                        start = i + 1;
                        end = j;
                    }
                    break;
                }
            }
            break;
        }
    }
    for (size_t i = start; i < end; i++)
        crc = (uint16_t)((crc << 8) ^
                         crc16_table[((crc >> 8) ^ (uint8_t)key[i]) & 0xff]);
    return crc & (REDIS_SLOTS - 1);
}

static void set_error(redis_store_t *s, const char *fmt, const char *what)
{
    pthread_mutex_lock(&s->err_lock);
    ratel__msg(s->errstr, sizeof s->errstr, fmt, what);
    pthread_mutex_unlock(&s->err_lock);
}

/* A node's note (node_config_t.note): the store's error text says it. */
static void note(void *ud, const char *message)
{
    set_error(ud, "%s", message);
}

static void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The node for host:port, created when new (store locked). */
static node_t *node_at_locked(redis_store_t *s, const char *host, int port,
                              size_t *index)
{
    for (size_t i = 0; i < s->nnodes; i++) {
        if (s->nodes[i]->port == port && strcmp(s->nodes[i]->host, host) == 0) {
            if (index)
                *index = i;
            return s->nodes[i];
        }
    }
    if (s->nnodes == REDIS_MAX_NODES)
        return NULL;
    s->nodes[s->nnodes] = ratel__node_new(host, port, &s->cfg);
    if (!s->nodes[s->nnodes])
        return NULL;
    if (index)
        *index = s->nnodes;
    return s->nodes[s->nnodes++];
}

/* ------------------------------------------------------------- cluster */

/* Reads CLUSTER SLOTS from `c` (asked at host:port) into the map. */
static int apply_slots(redis_store_t *s, redisContext *c, const char *host)
{
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    int ok = 0;

    if (!r || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i], *m;
        size_t idx;
        node_t *nd;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        nd = node_at_locked(s, m->element[0]->len ? m->element[0]->str : host,
                            (int)m->element[1]->integer, &idx);
        if (!nd)
            continue;
        for (long long slot = e->element[0]->integer;
             slot <= e->element[1]->integer && slot < REDIS_SLOTS; slot++)
            if (slot >= 0)
                atomic_store_explicit(&s->slots[slot], (uint16_t)(idx + 1),
                                      memory_order_relaxed);
        ok = 1;
    }
    pthread_mutex_unlock(&s->lock);
    freeReplyObject(r);
    return ok;
}

/*
 * Refreshes the slot map from the first node that answers (known nodes,
 * then the URL's seeds), at most once per 100 ms of callers' time unless
 * `force`. Returns 1 when a map was read.
 */
static int refresh_slots(redis_store_t *s, int64_t now_us, int force, char *err,
                         size_t errlen)
{
    char hosts[REDIS_MAX_NODES + RATEL_REDIS_MAX_ADDRS][256];
    int ports[REDIS_MAX_NODES + RATEL_REDIS_MAX_ADDRS];
    size_t n = 0;

    pthread_mutex_lock(&s->lock);
    if (!force && now_us >= s->last_map_us &&
        now_us - s->last_map_us < 100000) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->last_map_us = now_us;
    for (size_t i = 0; i < s->nnodes; i++, n++) {
        snprintf(hosts[n], sizeof hosts[n], "%s", s->nodes[i]->host);
        ports[n] = s->nodes[i]->port;
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < s->url.naddrs; i++, n++) {
        snprintf(hosts[n], sizeof hosts[n], "%s", s->url.addrs[i].host);
        ports[n] = s->url.addrs[i].port;
    }
    if (err && errlen)
        ratel__msg(err, errlen, "no cluster node answered");
    for (size_t i = 0; i < n; i++) {
        int proto;
        redisContext *c = ratel__node_connect(&s->cfg, hosts[i], ports[i], err,
                                              errlen, &proto);
        int ok;
        if (!c)
            continue;
        ok = apply_slots(s, c, hosts[i]);
        if (!ok && err && errlen)
            ratel__msg(err, errlen,
                       "%s:%d does not answer CLUSTER SLOTS (is it a cluster "
                       "node? use redis:// for a standalone server)",
                       hosts[i], ports[i]);
        redisFree(c);
        if (ok)
            return 1;
    }
    return 0;
}

/* The node that serves `key` now (NULL: no map and none could be read). */
static node_t *route(redis_store_t *s, const char *key, size_t keylen,
                     int64_t now_us)
{
    node_t *nd;

    if (!s->url.cluster) {
        pthread_mutex_lock(&s->lock);
        nd = s->nodes[s->primary];
        pthread_mutex_unlock(&s->lock);
        return nd;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        unsigned idx = atomic_load_explicit(&s->slots[key_slot(key, keylen)],
                                            memory_order_relaxed);
        if (idx) {
            pthread_mutex_lock(&s->lock);
            nd = s->nodes[idx - 1];
            pthread_mutex_unlock(&s->lock);
            return nd;
        }
        if (!refresh_slots(s, now_us, attempt == 0 ? 0 : 1, NULL, 0) &&
            attempt == 1)
            break;
    }
    /* No map: any node will answer with MOVED. */
    pthread_mutex_lock(&s->lock);
    nd = s->nnodes ? s->nodes[0] : NULL;
    pthread_mutex_unlock(&s->lock);
    return nd;
}

/* Parses "MOVED 3999 host:port" / "ASK ..." into slot, host and port. */
static int parse_redirect(const char *msg, size_t len, unsigned *slot,
                          char *host, size_t hostlen, int *port)
{
    char buf[400];
    const char *sp, *colon;
    char *end;
    long v;

    if (len >= sizeof buf)
        return 0;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    sp = strchr(buf, ' ');
    if (!sp)
        return 0;
    v = strtol(sp + 1, &end, 10);
    if (end == sp + 1 || *end != ' ' || v < 0 || v >= REDIS_SLOTS)
        return 0;
    *slot = (unsigned)v;
    colon = strrchr(end + 1, ':');
    if (!colon || colon == end + 1 || (size_t)(colon - end - 1) >= hostlen)
        return 0;
    memcpy(host, end + 1, (size_t)(colon - end - 1));
    host[colon - end - 1] = '\0';
    v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || v < 1 || v > 65535)
        return 0;
    *port = (int)v;
    return 1;
}

/* ----------------------------------------------------------- failover */

/*
 * Standalone with several addresses: asks each for its ROLE and makes the
 * primary the current node. At most once per breaker interval of callers'
 * time. Returns 1 when the current node changed.
 */
static int failover(redis_store_t *s, int64_t now_us)
{
    size_t old, found = (size_t)-1;
    node_t *nd;

    if (s->url.cluster || s->url.naddrs < 2)
        return 0;
    pthread_mutex_lock(&s->lock);
    if (now_us >= s->last_failover_us &&
        now_us - s->last_failover_us < s->cfg.breaker_us &&
        s->last_failover_us != 0) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->last_failover_us = now_us;
    old = s->primary;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < s->url.naddrs && found == (size_t)-1; i++) {
        char err[300];
        int proto;
        redisContext *c =
            ratel__node_connect(&s->cfg, s->url.addrs[i].host,
                                s->url.addrs[i].port, err, sizeof err, &proto);
        redisReply *r;
        if (!c)
            continue;
        r = redisCommand(c, "ROLE");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0)
            found = i;
        freeReplyObject(r);
        redisFree(c);
    }
    if (found == (size_t)-1 || found == old)
        return 0;
    pthread_mutex_lock(&s->lock);
    s->primary = found; /* the URL's addresses are nodes 0..naddrs-1 */
    nd = s->nodes[old];
    pthread_mutex_unlock(&s->lock);
    /* The old primary no longer serves: its failure is not the store's. */
    if (ratel__node_health_clear(nd))
        ratel__health_notify(&s->health);
    return 1;
}

/* ------------------------------------------------------------ answers */

/* What went wrong, as a RATEL_E* code, for an error reply. */
static int error_code(const redisReply *r)
{
    if (ratel__reply_starts(r, "WRONGTYPE"))
        return RATEL_ECORRUPT;
    if (ratel__reply_starts(r, "ERR ratel: key holds a value that is not"))
        return RATEL_ECORRUPT;
    if (ratel__reply_starts(r,
                            "ERR ratel: key holds ratel state of an unknown"))
        return RATEL_EVERSION;
    if (ratel__reply_starts(r, "ERR ratel: COST") &&
        strstr(r->str, "can ever admit"))
        return RATEL_ECOST;
    if (ratel__reply_starts(r, "ERR ratel: at most"))
        return RATEL_ETOOMANY;
    if (ratel__reply_starts(r, "ERR ratel:"))
        return RATEL_EINVAL;
    /* The server cannot decide now (or still lacks the library or the
       script, or still redirects, after every attempt): the failure
       policy will. */
    if (ratel__reply_unavailable(r) || ratel__reply_starts(r, "NOSCRIPT") ||
        ratel__reply_starts(r, "ERR Function not found") ||
        ratel__reply_starts(r, "MOVED") || ratel__reply_starts(r, "ASK "))
        return RATEL_EIO;
    return RATEL_EPROTO;
}

/*
 * The seven integers of ACQUIRE, REFUND and RELEASE, and with `extra` an
 * eighth into *extra: the lease of an ACQUIRE under a policy with a
 * concurrent rule, RELEASE's held.
 */
static int parse_decision(const redisReply *r, ratel_decision_t *d, int extra,
                          long long *value)
{
    long long v[8];
    size_t n = extra ? 8 : 7;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return RATEL_EPROTO;
    for (size_t i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return RATEL_EPROTO;
        v[i] = r->element[i]->integer;
    }
    if ((v[0] != 0 && v[0] != 1) || v[5] < 0 || v[5] >= RATEL_MAX_RULES)
        return RATEL_EPROTO;
    d->allowed = (int)v[0];
    d->limit = v[1];
    d->remaining = v[2];
    d->retry_after_ms = v[3];
    d->reset_after_ms = v[4];
    d->rule_reset_ms = v[4]; /* the reply has the key's reset only */
    d->rule = (int)v[5];
    d->wait_ms = v[6];
    d->source = RATEL_SOURCE_STORE;
    d->lease = 0;
    if (extra)
        *value = v[7];
    return 0;
}

/*
 * Routes pending[0..n) (target[i]: a node a redirection named, else NULL)
 * and runs each node's share in one ratel__node_run() call. Returns 1 when
 * an op failed with RATEL_EIO (a failover may help).
 */
static int run_shares(redis_store_t *s, op_t **pending, node_t **target,
                      op_t **share, size_t n, int64_t now_us)
{
    int eio = 0;

    for (size_t i = 0; i < n; i++) {
        op_t *op = pending[i];
        if (!target[i])
            target[i] = route(s, op->key, op->keylen, now_us);
        if (!target[i]) {
            op->rc = RATEL_EIO;
            op->reply = NULL;
            set_error(s, "%s", "no cluster node answered");
        }
    }
    for (size_t i = 0; i < n; i++) {
        node_t *nd = target[i];
        size_t k = 0;
        if (!nd)
            continue;
        for (size_t j = i; j < n; j++) {
            if (target[j] == nd) {
                share[k++] = pending[j];
                if (j != i)
                    target[j] = NULL;
            }
        }
        target[i] = NULL;
        ratel__node_run(nd, share, k, now_us);
        for (size_t j = 0; j < k; j++) {
            if (share[j]->rc != 0) {
                char why[256];
                ratel__node_error(nd, why, sizeof why);
                set_error(s, "%s", why[0] ? why : "redis unreachable");
                eio |= share[j]->rc == RATEL_EIO;
            }
        }
    }
    return eio;
}

/*
 * Whether a finished op should be sent again: a transport failure after
 * the store followed a failover; MOVED / ASK (*again: the node named, *ask
 * for ASK); NOSCRIPT or "Function not found" (the server lost the script
 * or the library: a restart, a failover, a flush; the node loads it
 * again); an unknown command where the module or the library was used
 * (the node finds its mode again); READONLY (the primary changed).
 */
static int needs_retry(redis_store_t *s, op_t *op, int failed_over,
                       int64_t now_us, node_t **again, int *ask)
{
    redisReply *r = op->reply;
    char host[256];
    unsigned slot;
    size_t idx;
    int port;

    if (op->rc != 0)
        return failed_over;
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    if ((ratel__reply_starts(r, "MOVED ") || ratel__reply_starts(r, "ASK ")) &&
        parse_redirect(r->str, r->len, &slot, host, sizeof host, &port)) {
        count(&s->redirects);
        pthread_mutex_lock(&s->lock);
        *again = node_at_locked(s, host, port, &idx);
        if (*again && r->str[0] == 'M')
            atomic_store_explicit(&s->slots[slot], (uint16_t)(idx + 1),
                                  memory_order_relaxed);
        pthread_mutex_unlock(&s->lock);
        *ask = r->str[0] == 'A';
        if (r->str[0] == 'M')
            refresh_slots(s, now_us, 0, NULL, 0);
        return *again != NULL;
    }
    if (ratel__reply_starts(r, "NOSCRIPT") ||
        ratel__reply_starts(r, "ERR Function not found")) {
        ratel__node_forget(op->node, 0, 1);
        return 1;
    }
    if (ratel__reply_starts(r, "ERR unknown command") &&
        op->mode != NODE_MODE_LUA) {
        ratel__node_forget(op->node, 1, 1);
        return 1;
    }
    if (ratel__reply_starts(r, "READONLY"))
        return failover(s, now_us);
    return 0;
}

/*
 * Runs ops[0..n) to completion: routes each to its node, runs every node's
 * share, then sends again what needs_retry() says, up to
 * REDIS_MAX_ATTEMPTS times per op. On return every op has rc 0 with a
 * reply that is not one of those, or a transport error.
 */
static void execute(redis_store_t *s, op_t **ops, size_t n, int64_t now_us)
{
    node_t *stack_targets[8], **target = stack_targets;
    op_t *stack_pending[8], **pending = stack_pending, *stack_share[8],
                            **share = stack_share;
    size_t npending = n;

    if (n > 8) {
        target = malloc(n * sizeof *target);
        pending = malloc(n * sizeof *pending);
        share = malloc(n * sizeof *share);
        if (!target || !pending || !share) {
            for (size_t i = 0; i < n; i++) {
                ops[i]->rc = RATEL_ENOMEM;
                ops[i]->reply = NULL;
            }
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        pending[i] = ops[i];
        target[i] = NULL;
        ops[i]->asking = 0;
    }
    for (int attempt = 0; attempt < REDIS_MAX_ATTEMPTS && npending > 0;
         attempt++) {
        size_t next = 0;
        int failed_over = 0;

        if (run_shares(s, pending, target, share, npending, now_us) &&
            !s->url.cluster)
            failed_over = failover(s, now_us);
        /* Keep what needs another attempt. */
        for (size_t i = 0; i < npending; i++) {
            op_t *op = pending[i];
            node_t *again = NULL;
            int ask = 0;

            if (needs_retry(s, op, failed_over, now_us, &again, &ask) &&
                attempt + 1 < REDIS_MAX_ATTEMPTS) {
                freeReplyObject(op->reply);
                op->reply = NULL;
                op->asking = ask;
                pending[next] = op;
                target[next] = again;
                next++;
            }
        }
        npending = next;
    }
out:
    if (target != stack_targets) {
        free(target);
        free(pending);
        free(share);
    }
}

/* --------------------------------------------------- failure policy */

/*
 * Decides a request Redis could not decide, by the failure policy. Returns
 * 0 with the decision, or the local store's error.
 */
static int fail_decide(redis_store_t *s, node_t *nd, const char *key,
                       size_t keylen, const ratel_policy_t *p,
                       const ratel_request_t *req, int64_t now_us,
                       ratel_decision_t *d)
{
    int64_t until = 0, remaining = INT64_MAX;
    int rc;

    count(&s->errors);
    switch (s->on_failure) {
    case RATEL_FAILURE_OPEN:
        count(&s->fallback_open);
        for (uint32_t i = 0; i < p->nrules; i++) {
            const ratel_rule_t *r = &p->rules[i];
            int64_t cap = (int64_t)ratel_rule_capacity(r);
            if (cap - (int64_t)req->cost < remaining)
                remaining = cap - (int64_t)req->cost;
        }
        memset(d, 0, sizeof *d);
        d->allowed = 1;
        d->limit = p->rules[0].limit;
        d->remaining = remaining < 0 ? 0 : remaining;
        d->source = RATEL_SOURCE_OPEN;
        return 0;
    case RATEL_FAILURE_CLOSED:
        count(&s->fallback_closed);
        if (nd)
            ratel__node_down(nd, now_us, &until);
        memset(d, 0, sizeof *d);
        d->allowed = 0;
        d->limit = p->rules[0].limit;
        d->retry_after_ms = until > now_us ? (until - now_us + 999) / 1000
                                           : s->cfg.breaker_us / 1000;
        if (d->retry_after_ms < 1)
            d->retry_after_ms = 1;
        d->reset_after_ms = d->rule_reset_ms = d->retry_after_ms;
        d->source = RATEL_SOURCE_CLOSED;
        return 0;
    default:
        count(&s->fallback_local);
        rc = ratel_store_acquire(s->local, key, keylen, p, now_us, req, d);
        if (rc == 0)
            d->source = RATEL_SOURCE_LOCAL;
        return rc;
    }
}

/* The callers' latest time (for calls that are given none). */
static int64_t latest(redis_store_t *s)
{
    int64_t t = atomic_load_explicit(&s->last_now_us, memory_order_relaxed);
    return t > 0 ? t : ratel_clock_now_us();
}

static void op_init(redis_store_t *s, op_t *op, op_kind_t kind, const char *key,
                    size_t keylen, int64_t now_us)
{
    if (kind != OP_PING)
        atomic_store_explicit(&s->last_now_us, now_us, memory_order_relaxed);
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->key = key;
    op->keylen = keylen;
    op->at_ms = s->client_time ? now_us / 1000 : -1;
}

/*
 * Turns a finished ACQUIRE op into the caller's answer: the decision, a
 * RATEL_E* error, or the failure policy's decision. Records denials in the
 * deny cache.
 */
static int finish_acquire(redis_store_t *s, op_t *op, uint64_t fingerprint,
                          int64_t now_us, ratel_decision_t *d)
{
    int rc = op->rc;

    if (rc == 0) {
        redisReply *r = op->reply;
        if (r->type == REDIS_REPLY_ERROR) {
            rc = error_code(r);
            set_error(s, "%s", r->str);
        } else {
            int leases = ratel_policy_has_leases(op->policy);
            long long lease = 0;
            rc = parse_decision(r, d, leases, &lease);
            if (rc == 0 && (lease < 0 || lease > UINT32_MAX))
                rc = RATEL_EPROTO;
            if (rc != 0)
                set_error(s, "%s",
                          leases ? "Redis answered ACQUIRE with something "
                                   "else than eight integers"
                                 : "Redis answered ACQUIRE with something "
                                   "else than seven integers");
            d->lease = (uint32_t)lease;
        }
        freeReplyObject(r);
        op->reply = NULL;
    }
    /* A denial under a concurrent rule ends when another caller releases
       a lease, which no clock predicts: it is not cached. */
    if (rc == 0) {
        if (!d->allowed && s->cache && !ratel_policy_has_leases(op->policy))
            ratel__deny_cache_put(s->cache, op->key, op->keylen, fingerprint,
                                  &op->request, d, now_us);
        return 0;
    }
    if (rc == RATEL_EIO || rc == RATEL_EPROTO)
        return fail_decide(s, op->node, op->key, op->keylen, op->policy,
                           &op->request, now_us, d);
    return rc;
}

static int redis_acquire(ratel_store_t *store, const char *key, size_t keylen,
                         const ratel_policy_t *policy, int64_t now_us,
                         const ratel_request_t *request,
                         ratel_decision_t *decision)
{
    redis_store_t *s = (redis_store_t *)store;
    uint64_t fp = 0;
    op_t op, *ops[1] = {&op};
    int rc;

    if (keylen > REDIS_KEY_MAX)
        return RATEL_ERANGE;
    rc = ratel_policy_check_request(policy, request, NULL);
    if (rc != 0)
        return rc;
    if (s->cache) {
        fp = ratel__policy_fingerprint(policy);
        if (ratel__deny_cache_get(s->cache, key, keylen, fp, request, now_us,
                                  decision)) {
            count(&s->cache_hits);
            return 0;
        }
    }
    op_init(s, &op, OP_ACQUIRE, key, keylen, now_us);
    op.policy = policy;
    op.request = *request;
    execute(s, ops, 1, now_us);
    return finish_acquire(s, &op, fp, now_us, decision);
}

static int redis_acquire_batch(ratel_store_t *store, ratel_batch_item_t *items,
                               size_t n, int64_t now_us)
{
    redis_store_t *s = (redis_store_t *)store;
    op_t *ops = calloc(n, sizeof *ops), **run = calloc(n, sizeof *run);
    uint64_t *fps = calloc(n, sizeof *fps);
    size_t k = 0;

    if (!ops || !run || !fps) {
        free(ops);
        free(run);
        free(fps);
        return RATEL_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        if (it->rc != 0)
            continue;
        if (it->keylen > REDIS_KEY_MAX) {
            it->rc = RATEL_ERANGE;
            continue;
        }
        it->rc = ratel_policy_check_request(it->policy, &it->request, NULL);
        if (it->rc != 0)
            continue;
        if (s->cache) {
            fps[i] = ratel__policy_fingerprint(it->policy);
            if (ratel__deny_cache_get(s->cache, it->key, it->keylen, fps[i],
                                      &it->request, now_us, &it->decision)) {
                count(&s->cache_hits);
                continue;
            }
        }
        op_init(s, &ops[i], OP_ACQUIRE, it->key, it->keylen, now_us);
        ops[i].policy = it->policy;
        ops[i].request = it->request;
        run[k++] = &ops[i];
    }
    if (k > 0)
        execute(s, run, k, now_us);
    for (size_t i = 0; i < n; i++)
        if (ops[i].key)
            items[i].rc =
                finish_acquire(s, &ops[i], fps[i], now_us, &items[i].decision);
    free(ops);
    free(run);
    free(fps);
    return 0;
}

/*
 * A write other than ACQUIRE (REFUND, RELEASE, RESET) on Redis. Returns
 * what Redis said (the decision, and RELEASE's held or RESET's integer in
 * *integer), or the failure's code.
 */
static int simple_write(redis_store_t *s, op_t *op, int64_t now_us,
                        ratel_decision_t *d, long long *integer)
{
    int rc;

    if (s->cache)
        ratel__deny_cache_forget(s->cache, op->key, op->keylen);
    execute(s, (op_t *[]){op}, 1, now_us);
    rc = op->rc;
    if (rc == 0) {
        redisReply *r = op->reply;
        if (r->type == REDIS_REPLY_ERROR) {
            rc = error_code(r);
            set_error(s, "%s", r->str);
        } else if (d) {
            rc = parse_decision(r, d, op->kind == OP_RELEASE, integer);
        } else if (r->type == REDIS_REPLY_INTEGER) {
            *integer = r->integer;
        } else {
            rc = RATEL_EPROTO;
        }
        freeReplyObject(r);
    }
    if (rc == RATEL_EIO || rc == RATEL_EPROTO)
        count(&s->errors);
    return rc;
}

/*
 * REFUND or RELEASE: simple_write(), and with `local` the same on the
 * fallback store, so that what it decided while Redis was away is given
 * back there too; the caller still learns that Redis did not take it
 * (RATEL_EIO).
 */
static int give_back(redis_store_t *s, op_t *op, int64_t now_us,
                     ratel_decision_t *d, long long *integer)
{
    int rc = simple_write(s, op, now_us, d, integer);

    if (s->local) {
        ratel_decision_t local;
        int held;
        if (op->kind == OP_RELEASE)
            ratel_store_release(s->local, op->key, op->keylen, op->policy,
                                now_us, op->lease, op->lease_flags, &held,
                                &local);
        else
            ratel_store_refund(s->local, op->key, op->keylen, op->policy,
                               now_us, op->request.cost, &local);
    }
    return rc == RATEL_EPROTO && op->rc != 0 ? RATEL_EIO : rc;
}

static int redis_refund(ratel_store_t *store, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        uint64_t cost, ratel_decision_t *decision)
{
    redis_store_t *s = (redis_store_t *)store;
    op_t op;

    if (keylen > REDIS_KEY_MAX)
        return RATEL_ERANGE;
    if (cost < 1 || cost > RATEL_LIMIT_MAX)
        return RATEL_EINVAL;
    op_init(s, &op, OP_REFUND, key, keylen, now_us);
    op.policy = policy;
    op.request.cost = cost;
    return give_back(s, &op, now_us, decision, NULL);
}

static int redis_release(ratel_store_t *store, const char *key, size_t keylen,
                         const ratel_policy_t *policy, int64_t now_us,
                         uint32_t lease, unsigned flags, int *held,
                         ratel_decision_t *decision)
{
    redis_store_t *s = (redis_store_t *)store;
    long long was_held = 0;
    op_t op;
    int rc;

    if (keylen > REDIS_KEY_MAX)
        return RATEL_ERANGE;
    op_init(s, &op, OP_RELEASE, key, keylen, now_us);
    op.policy = policy;
    op.lease = lease;
    op.lease_flags = flags;
    rc = give_back(s, &op, now_us, decision, &was_held);
    *held = rc == 0 && was_held == 1;
    return rc;
}

static int redis_reset(ratel_store_t *store, const char *key, size_t keylen)
{
    redis_store_t *s = (redis_store_t *)store;
    long long existed = 0;
    op_t op;
    int rc;

    if (keylen > REDIS_KEY_MAX)
        return RATEL_ERANGE;
    if (s->local)
        ratel_store_reset(s->local, key, keylen);
    op_init(s, &op, OP_RESET, key, keylen, latest(s));
    rc = simple_write(s, &op, latest(s), NULL, &existed);
    return rc;
}

static int redis_inspect(ratel_store_t *store, const char *key, size_t keylen,
                         int64_t now_us, ratel_rule_status_t *out, size_t max,
                         size_t *n)
{
    redis_store_t *s = (redis_store_t *)store;
    op_t op;
    int rc;

    if (keylen > REDIS_KEY_MAX)
        return RATEL_ERANGE;
    op_init(s, &op, OP_GET, key, keylen, now_us);
    execute(s, (op_t *[]){&op}, 1, now_us);
    rc = op.rc;
    if (rc == 0) {
        redisReply *r = op.reply;
        if (r->type == REDIS_REPLY_NIL)
            rc = 0;
        else if (r->type == REDIS_REPLY_STRING)
            rc = ratel_state_inspect((const uint8_t *)r->str, r->len, now_us,
                                     out, max, n);
        else
            rc = r->type == REDIS_REPLY_ERROR ? error_code(r) : RATEL_EPROTO;
        freeReplyObject(r);
    }
    return rc;
}

/*
 * The nodes requests go to now into serving[] (the primary, or every node
 * that owns a cluster slot), the others into idle[]. Returns how many
 * serve; *nidle is set to how many do not.
 */
static size_t serving_nodes(redis_store_t *s, node_t **serving, node_t **idle,
                            size_t *nidle)
{
    unsigned char owns[REDIS_MAX_NODES] = {0};
    size_t n = 0;

    *nidle = 0;
    if (s->url.cluster)
        for (size_t slot = 0; slot < REDIS_SLOTS; slot++) {
            unsigned idx =
                atomic_load_explicit(&s->slots[slot], memory_order_relaxed);
            if (idx > 0 && idx <= REDIS_MAX_NODES)
                owns[idx - 1] = 1;
        }
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nnodes; i++) {
        int serves = s->url.cluster ? owns[i] : i == s->primary;
        if (serves)
            serving[n++] = s->nodes[i];
        else
            idle[(*nidle)++] = s->nodes[i];
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/*
 * PINGs one node, even when its breaker is open. Returns 0, or a
 * RATEL_E* code with the reason in err; *transport is set when the
 * round trip itself failed (the node records that failure as its own).
 */
static int ping_node(redis_store_t *s, node_t *nd, char *err, size_t errlen,
                     int *transport)
{
    op_t op;
    int rc;

    op_init(s, &op, OP_PING, "", 0, 0);
    op.force = 1;
    ratel__node_run(nd, (op_t *[]){&op}, 1, ratel_clock_now_us());
    rc = op.rc;
    if (rc != 0) {
        *transport = 1;
        ratel__node_error(nd, err, errlen);
        return rc;
    }
    if (op.reply->type != REDIS_REPLY_STATUS) {
        rc = RATEL_EPROTO;
        ratel__msg(err, errlen, "%s: PING answered %.*s", nd->name,
                   (int)op.reply->len, op.reply->str ? op.reply->str : "");
    }
    freeReplyObject(op.reply);
    return rc;
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
    node_t *serving[REDIS_MAX_NODES], *idle[REDIS_MAX_NODES];
    size_t n, nidle = 0;
    char err[300] = "";
    int rc = 0, changed = 0, transport = 0;

    /* Ask the cluster which nodes own slots now, then ping those. */
    if (s->url.cluster &&
        !refresh_slots(s, ratel_clock_now_us(), 1, err, sizeof err)) {
        rc = RATEL_EIO;
    } else {
        n = serving_nodes(s, serving, idle, &nidle);
        for (size_t i = 0; i < nidle; i++)
            changed |= ratel__node_health_clear(idle[i]);
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = ping_node(s, serving[i], err, sizeof err, &transport);
    }
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
    int64_t now = ratel_clock_now_us();

#define LOAD(f) out->f = atomic_load_explicit(&s->f, memory_order_relaxed)
    LOAD(round_trips);
    LOAD(commands);
    LOAD(reconnects);
    LOAD(cache_hits);
    LOAD(errors);
    LOAD(fallback_open);
    LOAD(fallback_closed);
    LOAD(fallback_local);
    LOAD(redirects);
#undef LOAD
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nnodes; i++) {
        int64_t until;
        ratel__node_down(s->nodes[i], now, &until);
        out->breaker_open |= until != 0;
    }
    pthread_mutex_unlock(&s->lock);
}

static void redis_free(ratel_store_t *store)
{
    redis_store_t *s = (redis_store_t *)store;

    for (size_t i = 0; i < s->nnodes; i++)
        ratel__node_free(s->nodes[i]);
    ratel__deny_cache_free(s->cache);
    ratel_store_free(s->local);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->sha_lock);
    pthread_mutex_destroy(&s->err_lock);
    ratel__health_destroy(&s->health);
    free(s);
}

static const ratel_store_ops_t redis_ops = {
    .name = "redis",
    .acquire = redis_acquire,
    .refund = redis_refund,
    .release = redis_release,
    .reset = redis_reset,
    .inspect = redis_inspect,
    .acquire_batch = redis_acquire_batch,
    .ping = redis_ping,
    .health = redis_health,
    .watch_health = redis_watch_health,
    .errstr = redis_errstr,
    .stats = redis_stats,
    .free = redis_free,
};

/* ------------------------------------------------------ the library */

const char *ratel__redis_library_version(void)
{
    return ratel__lua_library_version;
}

/* The library on one primary, on a connection of its own; tells `fn`. */
static int load_library_on(redis_store_t *s, node_t *nd, ratel__library_fn fn,
                           void *ud)
{
    ratel__library_report_t report = {nd->name, "", NULL, 0, 0, ""};
    char found[80] = "", why[300] = "";
    int proto = 0;
    redisContext *c = ratel__node_connect(&s->cfg, nd->host, nd->port, why,
                                          sizeof why, &proto);

    if (c)
        report.rc =
            ratel__node_library(c, &s->cfg, nd->name, found, sizeof found,
                                &report.refused, why, sizeof why);
    else
        report.rc = proto ? RATEL_EPROTO : RATEL_EIO;
    redisFree(c);
    report.found = found;
    report.error = why;
    if (report.rc == 0) {
        report.loaded = s->cfg.library_version;
        /* A node that fell back to the script uses the library now. */
        ratel__node_forget(nd, 1, 1);
    }
    if (fn)
        fn(ud, &report);
    return report.rc;
}

int ratel__redis_load_library(ratel_store_t *store, ratel__library_fn fn,
                              void *ud, char *errbuf, size_t errlen)
{
    redis_store_t *s = (redis_store_t *)store;
    node_t *serving[REDIS_MAX_NODES], *idle[REDIS_MAX_NODES];
    size_t n, nidle;
    char err[300] = "";
    int rc = 0;

    if (!store || store->ops != &redis_ops) {
        ratel__msg(errbuf, errlen, "not a Redis store");
        return RATEL_EINVAL;
    }
    /* Which nodes are primaries now. */
    if (s->url.cluster &&
        !refresh_slots(s, ratel_clock_now_us(), 1, err, sizeof err)) {
        ratel__msg(errbuf, errlen, "%s", err);
        return RATEL_EIO;
    }
    if (!s->url.cluster)
        failover(s, ratel_clock_now_us());
    n = serving_nodes(s, serving, idle, &nidle);
    for (size_t i = 0; i < n; i++) {
        int one = load_library_on(s, serving[i], fn, ud);
        if (rc == 0)
            rc = one;
    }
    return rc;
}

/* ------------------------------------------------------------- create */

static int pick(int option, int from_url, int dflt)
{
    return option > 0 ? option : from_url > 0 ? from_url : dflt;
}

/* Options (and the URL's query) into s; 0 or RATEL_EINVAL with errbuf. */
static int configure(redis_store_t *s, const ratel_redis_options_t *o,
                     char *errbuf, size_t errlen)
{
    const ratel_redis_url_t *u = &s->url;
    long entries;
    int64_t deny_ms, breaker_ms;
    int rc;

    if (o->connect_timeout_ms < 0 || o->command_timeout_ms < 0 ||
        o->breaker_ms < 0 || o->deny_cache_max_ms < 0 ||
        o->on_failure < RATEL_FAILURE_DEFAULT ||
        o->on_failure > RATEL_FAILURE_LOCAL || o->mode < RATEL_REDIS_AUTO ||
        o->mode > RATEL_REDIS_FUNCTION || o->pool_size > 256) {
        if (errbuf && errlen)
            ratel__msg(errbuf, errlen,
                       "redis store: an option is out of range (timeouts, "
                       "breaker_ms and deny_cache_max_ms >= 0, pool_size "
                       "<= 256, on_failure and mode one of theirs)");
        return RATEL_EINVAL;
    }
    s->cfg.connect_timeout_ms = pick(
        o->connect_timeout_ms, u->connect_timeout_ms, REDIS_DEFAULT_TIMEOUT_MS);
    s->cfg.command_timeout_ms =
        pick(o->command_timeout_ms, u->timeout_ms, REDIS_DEFAULT_TIMEOUT_MS);
    s->cfg.pool_size =
        (unsigned)pick((int)o->pool_size, (int)u->pool, REDIS_DEFAULT_POOL);
    s->cfg.mode = o->mode != RATEL_REDIS_AUTO ? o->mode : u->mode;
    s->on_failure = o->on_failure != RATEL_FAILURE_DEFAULT ? o->on_failure
                    : u->on_failure != RATEL_FAILURE_DEFAULT
                        ? u->on_failure
                        : RATEL_FAILURE_LOCAL;
    breaker_ms = o->breaker_ms > 0 ? o->breaker_ms : REDIS_DEFAULT_BREAKER_MS;
    s->cfg.breaker_us = breaker_ms * 1000;
    s->client_time = o->client_time != 0;
    s->cfg.username = u->username;
    s->cfg.password = u->has_password ? u->password : NULL;
    s->cfg.db = u->db;
    s->cfg.library = ratel__lua_library;
    s->cfg.library_len = ratel__lua_library_len;
    s->cfg.library_version = ratel__lua_library_version;
    s->cfg.script = ratel__lua_script;
    s->cfg.script_len = ratel__lua_script_len;
    s->cfg.note = note;
    s->cfg.note_ud = s;
    s->cfg.script_sha = s->script_sha;
    s->cfg.sha_lock = &s->sha_lock;
    s->cfg.round_trips = &s->round_trips;
    s->cfg.commands = &s->commands;
    s->cfg.reconnects = &s->reconnects;

    entries = o->deny_cache_entries != 0 ? o->deny_cache_entries
              : u->deny_cache >= 0       ? u->deny_cache
                                         : REDIS_DEFAULT_DENY_CACHE;
    deny_ms = o->deny_cache_max_ms > 0 ? o->deny_cache_max_ms
                                       : REDIS_DEFAULT_DENY_MAX_MS;
    if (entries > 0) {
        rc = ratel__deny_cache_new(&s->cache, (size_t)entries, deny_ms);
        if (rc != 0) {
            if (errbuf && errlen)
                ratel__msg(errbuf, errlen,
                           "redis store: deny cache of %ld entries: %s",
                           entries, ratel_strerror(rc));
            return rc;
        }
    }
    if (s->on_failure == RATEL_FAILURE_LOCAL) {
        rc = ratel_store_memory_new(&s->local, &o->local);
        if (rc != 0) {
            if (errbuf && errlen)
                ratel__msg(errbuf, errlen,
                           "redis store: the local fallback store: %s",
                           ratel_strerror(rc));
            return rc;
        }
    }
    return 0;
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
        if (errbuf && errlen)
            ratel__msg(errbuf, errlen,
                       "redis store: a URL is needed, e.g. "
                       "redis://127.0.0.1:6379");
        return RATEL_EINVAL;
    }
    pthread_once(&crc16_once, crc16_init);
    s = calloc(1, sizeof *s);
    if (!s)
        return RATEL_ENOMEM;
    s->base.ops = &redis_ops;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->sha_lock, NULL);
    pthread_mutex_init(&s->err_lock, NULL);
    ratel__health_init(&s->health);
    s->cfg.health = &s->health;
    rc = ratel__redis_url_parse(options->url, &s->url, errbuf, errlen);
    if (rc == 0)
        rc = configure(s, options, errbuf, errlen);
    for (size_t i = 0; rc == 0 && i < s->url.naddrs; i++)
        if (!node_at_locked(s, s->url.addrs[i].host, s->url.addrs[i].port,
                            NULL))
            rc = RATEL_ENOMEM;
    if (rc == 0 && !options->lazy_connect) {
        char err[300] = "";
        /* Reaches every node (the cluster's map first) and learns each
           one's mode: a wrong address, password, a server that is not
           Redis or a missing module is reported here. */
        if (s->url.naddrs > 1)
            failover(s, 0);
        rc = redis_ping(&s->base, err, sizeof err);
        if (rc != 0 && errbuf && errlen)
            ratel__msg(errbuf, errlen, "redis store: %s", err);
    }
    if (rc != 0) {
        redis_free(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
