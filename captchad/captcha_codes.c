/*
 * captcha_codes.c - where verification codes wait for their verify: the
 * ratel store holds rate-limit state only, so codes have a store of their
 * own with two backends.
 *
 * memory: a hash table of at most max_entries codes, under one lock (a
 * code is touched twice in its life; the lock is never the bottleneck).
 * Every code lives for the same TTL, so the order codes were stored in is
 * also the order they expire in: one list, oldest first, gives both "drop
 * the expired" (from the head, while expired) and "else drop the oldest"
 * in O(1). An attacker storing codes for 10,000 phones cannot grow it past
 * the bound (and the per-IP limit stops him long before).
 *
 * redis: a hash per phone `captcha:code:{PHONE}` {code, attempts} with
 * PEXPIRE = TTL, so that every captchad sharing the Redis sees one code,
 * through a Redis store of libratel (its commands, lib/store/command.h:
 * the same engine as the rate limits', so TLS, Sentinel, Redis Cluster
 * and deadlines alike; an HTTP worker's on its loop, never waiting).
 * A verify runs two scripts: the first counts the attempt and returns the
 * stored code (deleting it past max_attempts), C compares in constant
 * time, and only a match runs the second, a compare-and-delete: of two
 * concurrent correct verifies on any instances, exactly one deletes it.
 */
#include "captchad/captcha.h"

#include "app/log.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct code_entry_s {
    struct code_entry_s *hnext;       /* hash chain */
    struct code_entry_s *prev, *next; /* age list, oldest first */
    int64_t expires_ms;
    unsigned wrong; /* wrong guesses so far */
    uint64_t hash;
    char phone[CAPTCHA_PHONE_MAX];
    char code[CAPTCHA_CODE_MAX];
} code_entry_t;

struct captcha_codes_s {
    int redis;
    unsigned max_attempts;
    pthread_mutex_t lock;
    uint64_t expirations, evictions;
    _Atomic uint64_t errors;
    /* memory */
    code_entry_t **buckets;
    size_t nbuckets; /* a power of two */
    size_t count, max_entries;
    code_entry_t *oldest, *newest;
    /* redis: a Redis store (its engine: TLS, Sentinel, Cluster, deadlines)
       whose waiting calls serve the threads that may wait (the sender,
       start-up), and its calls on each HTTP worker's loop */
    ratel_store_t *store;
    ratel_async_t **workers;
    unsigned nworkers;
};

int captcha_code_equal(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    unsigned char diff = (unsigned char)(n != m);

    /* Every byte of the longer is read whatever the others hold. */
    for (size_t i = 0; i < (n > m ? n : m); i++) {
        unsigned char x = i < n ? (unsigned char)a[i] : 0;
        unsigned char y = i < m ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(x ^ y);
    }
    return diff == 0;
}

/* ---------------------------------------------------------------- memory */

static uint64_t hash_phone(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int captcha_codes_memory_new(captcha_codes_t **out, size_t max_entries,
                             unsigned max_attempts)
{
    captcha_codes_t *c = calloc(1, sizeof *c);

    *out = NULL;
    if (!c)
        return RATEL_ENOMEM;
    c->max_entries = max_entries ? max_entries : 100000;
    c->max_attempts = max_attempts ? max_attempts : 5;
    c->nbuckets = 16;
    while (c->nbuckets < c->max_entries)
        c->nbuckets <<= 1;
    c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        return RATEL_ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

static code_entry_t **find_link(captcha_codes_t *c, const char *phone,
                                uint64_t h)
{
    code_entry_t **link = &c->buckets[h & (c->nbuckets - 1)];
    while (*link && !((*link)->hash == h && !strcmp((*link)->phone, phone)))
        link = &(*link)->hnext;
    return link;
}

/* Unlinks `e` from its chain and the age list and frees it. */
static void entry_drop(captcha_codes_t *c, code_entry_t *e)
{
    code_entry_t **link = find_link(c, e->phone, e->hash);

    *link = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->oldest = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->newest = e->prev;
    c->count--;
    free(e);
}

/* Drops expired codes from the head of the age list. */
static void expire(captcha_codes_t *c, int64_t now_ms)
{
    while (c->oldest && c->oldest->expires_ms <= now_ms) {
        entry_drop(c, c->oldest);
        c->expirations++;
    }
}

static int memory_put(captcha_codes_t *c, const char *phone, const char *code,
                      int64_t now_ms, int64_t ttl_ms)
{
    uint64_t h = hash_phone(phone);
    code_entry_t *e;

    pthread_mutex_lock(&c->lock);
    expire(c, now_ms);
    e = *find_link(c, phone, h);
    if (e)
        entry_drop(c, e); /* a new code replaces the old and its attempts */
    if (c->count >= c->max_entries) {
        entry_drop(c, c->oldest);
        c->evictions++;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        return RATEL_ENOMEM;
    }
    e->hash = h;
    e->expires_ms = now_ms + ttl_ms;
    snprintf(e->phone, sizeof e->phone, "%s", phone);
    snprintf(e->code, sizeof e->code, "%s", code);
    e->hnext = c->buckets[h & (c->nbuckets - 1)];
    c->buckets[h & (c->nbuckets - 1)] = e;
    e->prev = c->newest;
    if (c->newest)
        c->newest->next = e;
    else
        c->oldest = e;
    c->newest = e;
    c->count++;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static int memory_verify(captcha_codes_t *c, const char *phone,
                         const char *code, int64_t now_ms)
{
    code_entry_t *e;
    int rc = CAPTCHA_CODE_INVALID;

    pthread_mutex_lock(&c->lock);
    expire(c, now_ms);
    e = *find_link(c, phone, hash_phone(phone));
    if (e) {
        if (captcha_code_equal(e->code, code)) {
            entry_drop(c, e); /* used once */
            rc = CAPTCHA_CODE_OK;
        } else if (++e->wrong >= c->max_attempts) {
            entry_drop(c, e);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int memory_discard(captcha_codes_t *c, const char *phone,
                          const char *code)
{
    code_entry_t *e;

    pthread_mutex_lock(&c->lock);
    e = *find_link(c, phone, hash_phone(phone));
    if (e && !strcmp(e->code, code))
        entry_drop(c, e);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ----------------------------------------------------------------- redis */

/* KEYS[1] the hash; ARGV code, ttl_ms. */
static const char put_script[] =
    "redis.call('DEL', KEYS[1]) "
    "redis.call('HSET', KEYS[1], 'code', ARGV[1], 'attempts', 0) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1";

/* Counts the attempt; returns the code, or nil when there is none or it
   has had max_attempts (ARGV[1]) wrong guesses already. */
static const char check_script[] =
    "local c = redis.call('HGET', KEYS[1], 'code') "
    "if not c then return false end "
    "local a = redis.call('HINCRBY', KEYS[1], 'attempts', 1) "
    "if a > tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) return false end "
    "return {c, a}";

/* Deletes the hash only if it still holds ARGV[1]: 1 deleted, 0 not. */
static const char consume_script[] =
    "if redis.call('HGET', KEYS[1], 'code') == ARGV[1] then "
    "return redis.call('DEL', KEYS[1]) end return 0";

int captcha_codes_redis_new(captcha_codes_t **out, const char *url,
                            int timeout_ms, unsigned max_attempts, char *err,
                            size_t errlen)
{
    captcha_codes_t *c = calloc(1, sizeof *c);
    /* No deny cache and no failure policy: these are no decisions. A code
       store that cannot answer is an error (the send is given back). */
    ratel_redis_options_t o = {.url = url,
                               .command_timeout_ms =
                                   timeout_ms > 0 ? timeout_ms : 500,
                               .deny_cache_entries = -1,
                               .on_failure = RATEL_FAILURE_OPEN,
                               .lazy_connect = 1};
    int rc;

    *out = NULL;
    if (!c)
        return RATEL_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->redis = 1;
    c->max_attempts = max_attempts ? max_attempts : 5;
    rc = ratel_store_redis_new(&c->store, &o, err, errlen);
    if (rc != 0) {
        captcha_codes_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int captcha_codes_attach(captcha_codes_t *c, unsigned thread,
                         struct event_base *base)
{
    ratel_async_t **more;
    char err[200];

    if (!c->redis)
        return 0;
    if (thread >= c->nworkers) {
        more = realloc(c->workers, (thread + 1) * sizeof *more);
        if (!more)
            return RATEL_ENOMEM;
        memset(more + c->nworkers, 0,
               (thread + 1 - c->nworkers) * sizeof *more);
        c->workers = more;
        c->nworkers = thread + 1;
    }
    return ratel_async_new(&c->workers[thread], c->store, base, err,
                           sizeof err);
}

void captcha_codes_detach(captcha_codes_t *c)
{
    for (unsigned t = 0; t < c->nworkers; t++)
        ratel_async_free(c->workers[t]);
    free(c->workers);
    c->workers = NULL;
    c->nworkers = 0;
}

/* One code store call on Redis: its keys and strings live here until its
   callback. */
typedef struct code_op_s {
    captcha_codes_t *c;
    ratel_async_t *r; /* the worker's loop, or NULL: wait here */
    char key[64];
    char code[CAPTCHA_CODE_MAX];
    char stored[CAPTCHA_CODE_MAX];
    captcha_codes_fn *fn;
    void *ud;
    void (*then)(void *ud, struct redisReply *reply); /* eval's */
} code_op_t;

static code_op_t *op_new(captcha_codes_t *c, ratel_async_t *r,
                         const char *phone, const char *code,
                         captcha_codes_fn *fn, void *ud)
{
    code_op_t *op = calloc(1, sizeof *op);

    if (!op)
        return NULL;
    *op = (code_op_t){.c = c, .r = r, .fn = fn, .ud = ud};
    snprintf(op->key, sizeof op->key, "captcha:code:{%s}", phone);
    snprintf(op->code, sizeof op->code, "%s", code);
    return op;
}

static void op_done(code_op_t *op, int rc)
{
    if (op->fn)
        op->fn(op->ud, rc);
    memset(op, 0, sizeof *op); /* the codes */
    free(op);
}

/* A reply, the callee's to free, or NULL: no answer (down, hung). */
typedef void reply_fn(void *ud, redisReply *reply);

static void eval_told(void *ud, int rc, redisReply *reply)
{
    code_op_t *op = ud;
    reply_fn *fn = op->then;

    (void)rc;
    fn(op, reply);
}

/* EVAL `script` on op's key with one or two arguments: on the worker's
   loop, or waited for here; `fn` gets the reply either way. */
static void eval(code_op_t *op, const char *script, const char *a1,
                 const char *a2, reply_fn *fn)
{
    const char *argv[] = {"EVAL", script, "1", op->key, a1, a2};
    size_t lens[6];
    int argc = a2 ? 6 : 5;
    redisReply *reply = NULL;
    char err[300];

    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    op->then = fn;
    if (op->r) {
        if (ratel__async_command(op->r, op->key, strlen(op->key), argc, argv,
                                 lens, eval_told, op) != 0)
            fn(op, NULL);
        return;
    }
    if (ratel__redis_command(op->c->store, op->key, strlen(op->key), argc, argv,
                             lens, &reply, err, sizeof err) != 0)
        reply = NULL;
    fn(op, reply);
}

/* Whether Redis answered (not an error, counted and logged). */
static int answered(code_op_t *op, redisReply *reply)
{
    if (reply && reply->type != REDIS_REPLY_ERROR)
        return 1;
    if (reply)
        ratel__log("error", "redis code store", "reason=\"%s\"", reply->str);
    atomic_fetch_add(&op->c->errors, 1);
    return 0;
}

static void put_replied(void *ud, redisReply *reply)
{
    code_op_t *op = ud;

    op_done(op, answered(op, reply) ? 0 : RATEL_EIO);
    freeReplyObject(reply);
}

static void consumed(void *ud, redisReply *reply)
{
    code_op_t *op = ud;
    int ok = answered(op, reply);

    op_done(op, !ok ? RATEL_EIO
                : reply->type == REDIS_REPLY_INTEGER && reply->integer == 1
                    ? CAPTCHA_CODE_OK
                    : CAPTCHA_CODE_INVALID);
    freeReplyObject(reply);
}

/* The stored code and its attempts: a match consumes it (exactly one of
   concurrent verifiers deletes it); the max_attempts-th wrong guess ends
   it now. */
static void checked(void *ud, redisReply *reply)
{
    code_op_t *op = ud;
    long long attempts;

    if (!answered(op, reply) || reply->type != REDIS_REPLY_ARRAY ||
        reply->elements != 2 || reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[0]->len >= sizeof op->stored) {
        /* nil: no code (or used up) */
        op_done(op, reply ? CAPTCHA_CODE_INVALID : RATEL_EIO);
        freeReplyObject(reply);
        return;
    }
    memcpy(op->stored, reply->element[0]->str, reply->element[0]->len);
    attempts = reply->element[1]->integer;
    freeReplyObject(reply);
    if (captcha_code_equal(op->stored, op->code)) {
        eval(op, consume_script, op->stored, NULL, consumed);
        return;
    }
    if (attempts >= (long long)op->c->max_attempts) {
        op->fn(op->ud, CAPTCHA_CODE_INVALID);
        op->fn = NULL;
        eval(op, consume_script, op->stored, NULL, consumed);
        return;
    }
    op_done(op, CAPTCHA_CODE_INVALID);
}

static void redis_put_on(captcha_codes_t *c, ratel_async_t *r,
                         const char *phone, const char *code, int64_t ttl_ms,
                         captcha_codes_fn *fn, void *ud)
{
    code_op_t *op = op_new(c, r, phone, code, fn, ud);
    char ttl[24];

    if (!op) {
        fn(ud, RATEL_ENOMEM);
        return;
    }
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    eval(op, put_script, code, ttl, put_replied);
}

static void redis_verify_on(captcha_codes_t *c, ratel_async_t *r,
                            const char *phone, const char *code,
                            captcha_codes_fn *fn, void *ud)
{
    code_op_t *op = op_new(c, r, phone, code, fn, ud);
    char max[16];

    if (!op) {
        fn(ud, RATEL_ENOMEM);
        return;
    }
    snprintf(max, sizeof max, "%u", c->max_attempts);
    eval(op, check_script, max, NULL, checked);
}

static void redis_discard_on(captcha_codes_t *c, ratel_async_t *r,
                             const char *phone, const char *code,
                             captcha_codes_fn *fn, void *ud)
{
    code_op_t *op = op_new(c, r, phone, code, fn, ud);

    if (!op) {
        if (fn)
            fn(ud, RATEL_ENOMEM);
        return;
    }
    eval(op, consume_script, op->code, NULL, consumed);
}

/* A call on the shared connection, waited for on this thread. */
typedef struct waiter_s {
    int done, rc;
} waiter_t;

static void waited(void *ud, int rc)
{
    waiter_t *w = ud;

    w->rc = rc;
    w->done = 1;
}

/* A call waited for on this thread (its steps run here, in turn). */
static int redis_wait(code_op_t *op, const char *script, const char *a1,
                      const char *a2, reply_fn *fn, waiter_t *w)
{
    if (!op)
        return RATEL_ENOMEM;
    eval(op, script, a1, a2, fn);
    return w->rc;
}

static int redis_put(captcha_codes_t *c, const char *phone, const char *code,
                     int64_t ttl_ms)
{
    waiter_t w = {0, 0};
    char ttl[24];

    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    return redis_wait(op_new(c, NULL, phone, code, waited, &w), put_script,
                      code, ttl, put_replied, &w);
}

static int redis_verify(captcha_codes_t *c, const char *phone, const char *code)
{
    waiter_t w = {0, 0};
    char max[16];

    snprintf(max, sizeof max, "%u", c->max_attempts);
    return redis_wait(op_new(c, NULL, phone, code, waited, &w), check_script,
                      max, NULL, checked, &w);
}

static int redis_discard(captcha_codes_t *c, const char *phone,
                         const char *code)
{
    waiter_t w = {0, 0};

    return redis_wait(op_new(c, NULL, phone, code, waited, &w), consume_script,
                      code, NULL, consumed, &w);
}

/* ---------------------------------------------------------------- common */

int captcha_codes_put(captcha_codes_t *c, const char *phone, const char *code,
                      int64_t now_ms, int64_t ttl_ms)
{
    return c->redis ? redis_put(c, phone, code, ttl_ms)
                    : memory_put(c, phone, code, now_ms, ttl_ms);
}

int captcha_codes_verify(captcha_codes_t *c, const char *phone,
                         const char *code, int64_t now_ms)
{
    return c->redis ? redis_verify(c, phone, code)
                    : memory_verify(c, phone, code, now_ms);
}

int captcha_codes_discard(captcha_codes_t *c, const char *phone,
                          const char *code)
{
    return c->redis ? redis_discard(c, phone, code)
                    : memory_discard(c, phone, code);
}

/* The worker's loop (captcha_codes_attach), or NULL: memory. */
static ratel_async_t *worker(captcha_codes_t *c, unsigned thread)
{
    return c->redis && thread < c->nworkers ? c->workers[thread] : NULL;
}

void captcha_codes_put_async(captcha_codes_t *c, unsigned thread,
                             const char *phone, const char *code,
                             int64_t now_ms, int64_t ttl_ms,
                             captcha_codes_fn *fn, void *ud)
{
    ratel_async_t *r = worker(c, thread);

    if (r)
        redis_put_on(c, r, phone, code, ttl_ms, fn, ud);
    else
        fn(ud, captcha_codes_put(c, phone, code, now_ms, ttl_ms));
}

void captcha_codes_verify_async(captcha_codes_t *c, unsigned thread,
                                const char *phone, const char *code,
                                int64_t now_ms, captcha_codes_fn *fn, void *ud)
{
    ratel_async_t *r = worker(c, thread);

    if (r)
        redis_verify_on(c, r, phone, code, fn, ud);
    else
        fn(ud, captcha_codes_verify(c, phone, code, now_ms));
}

void captcha_codes_discard_async(captcha_codes_t *c, unsigned thread,
                                 const char *phone, const char *code)
{
    ratel_async_t *r = worker(c, thread);

    if (r)
        redis_discard_on(c, r, phone, code, NULL, NULL);
    else
        captcha_codes_discard(c, phone, code);
}

void captcha_codes_stats(captcha_codes_t *c, captcha_codes_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    out->entries = c->count;
    out->max_entries = c->max_entries;
    out->expirations = c->expirations;
    out->evictions = c->evictions;
    pthread_mutex_unlock(&c->lock);
    out->errors = atomic_load(&c->errors);
}

void captcha_codes_free(captcha_codes_t *c)
{
    if (!c)
        return;
    while (c->oldest)
        entry_drop(c, c->oldest);
    free(c->buckets);
    captcha_codes_detach(c);
    ratel_store_free(c->store);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
