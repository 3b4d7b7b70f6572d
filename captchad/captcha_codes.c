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
 * PEXPIRE = TTL, so that every captchad sharing the Redis sees one code.
 * A verify runs two scripts: the first counts the attempt and returns the
 * stored code (deleting it past max_attempts), C compares in constant
 * time, and only a match runs the second, a compare-and-delete: of two
 * concurrent correct verifies on any instances, exactly one deletes it.
 */
#include "captchad/captcha.h"

#include "ratel_internal.h"

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
    uint64_t expirations, evictions, errors;
    /* memory */
    code_entry_t **buckets;
    size_t nbuckets; /* a power of two */
    size_t count, max_entries;
    code_entry_t *oldest, *newest;
    /* redis */
    redisContext *ctx;
    ratel_redis_url_t url;
    int timeout_ms;
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

    *out = NULL;
    if (!c)
        return RATEL_ENOMEM;
    if (ratel__redis_url_parse(url, &c->url, err, errlen) != 0) {
        free(c);
        return RATEL_EINVAL;
    }
    if (c->url.cluster) {
        snprintf(err, errlen,
                 "the code store needs one Redis primary, not "
                 "redis+cluster://");
        free(c);
        return RATEL_EINVAL;
    }
    c->redis = 1;
    c->max_attempts = max_attempts ? max_attempts : 5;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 500;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

/* A connected context (made if needed), AUTH and SELECT done; NULL when
   Redis cannot be reached. Under c->lock. */
static redisContext *connection(captcha_codes_t *c)
{
    struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
    const ratel_redis_addr_t *a = &c->url.addrs[0];
    redisReply *r;

    if (c->ctx && !c->ctx->err)
        return c->ctx;
    if (c->ctx)
        redisFree(c->ctx);
    c->ctx = redisConnectWithTimeout(a->host, a->port, tv);
    if (!c->ctx || c->ctx->err)
        goto fail;
    redisSetTimeout(c->ctx, tv);
    if (c->url.has_password) {
        r = c->url.username[0]
                ? redisCommand(c->ctx, "AUTH %s %s", c->url.username,
                               c->url.password)
                : redisCommand(c->ctx, "AUTH %s", c->url.password);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            freeReplyObject(r);
            goto fail;
        }
        freeReplyObject(r);
    }
    if (c->url.db) {
        r = redisCommand(c->ctx, "SELECT %d", c->url.db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            freeReplyObject(r);
            goto fail;
        }
        freeReplyObject(r);
    }
    return c->ctx;
fail:
    if (c->ctx)
        redisFree(c->ctx);
    c->ctx = NULL;
    return NULL;
}

/* EVAL `script` on the phone's key with two arguments; the reply, or NULL
   (counted as an error) when Redis failed. Under c->lock. */
static redisReply *eval(captcha_codes_t *c, const char *script,
                        const char *phone, const char *a1, const char *a2)
{
    char key[64];
    redisContext *ctx = connection(c);
    redisReply *r;

    snprintf(key, sizeof key, "captcha:code:{%s}", phone);
    if (!ctx) {
        c->errors++;
        return NULL;
    }
    r = a2 ? redisCommand(ctx, "EVAL %s 1 %s %s %s", script, key, a1, a2)
           : redisCommand(ctx, "EVAL %s 1 %s %s", script, key, a1);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r)
            ratel__log("error", "redis code store", "reason=\"%s\"", r->str);
        freeReplyObject(r);
        c->errors++;
        return NULL;
    }
    return r;
}

static int redis_put(captcha_codes_t *c, const char *phone, const char *code,
                     int64_t ttl_ms)
{
    char ttl[24];
    redisReply *r;

    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    pthread_mutex_lock(&c->lock);
    r = eval(c, put_script, phone, code, ttl);
    pthread_mutex_unlock(&c->lock);
    if (!r)
        return RATEL_EIO;
    freeReplyObject(r);
    return 0;
}

static int redis_discard(captcha_codes_t *c, const char *phone,
                         const char *code, int *deleted)
{
    redisReply *r;

    pthread_mutex_lock(&c->lock);
    r = eval(c, consume_script, phone, code, NULL);
    pthread_mutex_unlock(&c->lock);
    if (!r)
        return RATEL_EIO;
    if (deleted)
        *deleted = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return 0;
}

static int redis_verify(captcha_codes_t *c, const char *phone, const char *code)
{
    char max[16], stored[CAPTCHA_CODE_MAX];
    long long attempts;
    int deleted = 0, rc;
    redisReply *r;

    snprintf(max, sizeof max, "%u", c->max_attempts);
    pthread_mutex_lock(&c->lock);
    r = eval(c, check_script, phone, max, NULL);
    pthread_mutex_unlock(&c->lock);
    if (!r)
        return RATEL_EIO;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= sizeof stored) {
        freeReplyObject(r); /* nil: no code (or used up) */
        return CAPTCHA_CODE_INVALID;
    }
    memcpy(stored, r->element[0]->str, r->element[0]->len);
    stored[r->element[0]->len] = '\0';
    attempts = r->element[1]->integer;
    freeReplyObject(r);
    if (captcha_code_equal(stored, code)) {
        rc = redis_discard(c, phone, stored, &deleted);
        if (rc)
            return rc;
        return deleted ? CAPTCHA_CODE_OK : CAPTCHA_CODE_INVALID;
    }
    /* The max_attempts-th wrong guess ends the code now. */
    if (attempts >= (long long)c->max_attempts)
        redis_discard(c, phone, stored, NULL);
    return CAPTCHA_CODE_INVALID;
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
    return c->redis ? redis_discard(c, phone, code, NULL)
                    : memory_discard(c, phone, code);
}

void captcha_codes_stats(captcha_codes_t *c, captcha_codes_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    out->entries = c->count;
    out->max_entries = c->max_entries;
    out->expirations = c->expirations;
    out->evictions = c->evictions;
    out->errors = c->errors;
    pthread_mutex_unlock(&c->lock);
}

void captcha_codes_free(captcha_codes_t *c)
{
    if (!c)
        return;
    while (c->oldest)
        entry_drop(c, c->oldest);
    free(c->buckets);
    if (c->ctx)
        redisFree(c->ctx);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
