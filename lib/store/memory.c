/*
 * memory.c - the embedded store: key states in this process's memory.
 *
 * Keys are spread over N shards (a power of two) by a seeded 64-bit hash.
 * Each shard is one lock around its own chained hash table, an eviction
 * list (least recently used first, approximated by CLOCK: a hit sets a flag,
 * eviction gives flagged entries a second chance) and its counters, so
 * threads working on different keys rarely meet. A key's
 * entry is ONE allocation holding the bookkeeping, the key bytes and the
 * key's state blob; the blob is opaque here and is only ever changed by
 * ratel_policy_acquire() / ratel_policy_refund() working on it in place.
 *
 * Expiry: after a call that rewrites a key's state the entry's expiry is
 * set to the key's reset time (now + decision.reset_after_ms, rounded up
 * to the ms); other calls can only move it later. An entry found at or
 * past its expiry is treated as absent: its state is dropped and the
 * request is decided as for a new key (reusing the allocation when the new
 * state fits).
 *
 * Memory: every byte the store holds is counted - each allocation as
 * malloc_usable_size() plus the allocator's per-chunk header - and the bound
 * `max_bytes` is split evenly over the shards. Before a shard allocates it
 * evicts from its list's tail (expired entries count as expirations, live
 * ones as evictions) until the allocation fits, so the sum never passes the
 * bound, whatever keys arrive. docs/memory-store.md has the whole story.
 */
#include "core/owned.h"
#include "store/keyhash.h"
#include "store/memory_private.h"
#include "store/option.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MEMORY_DEFAULT_MAX_BYTES ((size_t)64 << 20)
/* The smallest share of the store one shard may get: room for six sliding
   keys at their 256-run cap (~2.5 KiB each). The store's own range is
   max_bytes's in the option table (option.c: 64 KiB..1 TiB). */
#define MEMORY_MIN_SHARD_BYTES ((size_t)16 << 10)
#define MEMORY_DEFAULT_SHARDS 4096u
#define MEMORY_MAX_SHARDS 65536u
/* Longest key the memory store keeps, in bytes (RATEL_ERANGE past it). */
#define MEMORY_KEY_MAX RATEL_MEMORY_KEY_MAX
#define MEMORY_INITIAL_BUCKETS 16u
/* A new key's first decision runs in a stack buffer this large. */
#define MEMORY_STACK_STATE 20480u
/* Bytes glibc keeps in front of every chunk, beyond malloc_usable_size(). */
#define MEMORY_CHUNK_HEADER sizeof(size_t)
/* Growing a blob leaves this much slack (at most), so that a sliding rule
 * adding one run per request does not reallocate on every request. */
#define MEMORY_GROW_SLACK 512u

/* Largest state blob an entry holds (the core's largest is ~16.5 KiB). */
#define MEMORY_STATE_MAX UINT16_MAX

/*
 * What to run on a key's blob: an acquire (request != NULL), a release of
 * `lease` (held != NULL) or a refund of `cost`. Each leaves the answer in
 * `decision`.
 */
typedef struct memory_call_s {
    const ratel_policy_t *policy;
    const ratel_request_t *request;
    uint64_t cost;
    int64_t now_us;
    ratel_decision_t *decision;
    uint32_t lease;
    unsigned lease_flags;
    int *held;
} memory_call_t;

/* ------------------------------------------------------------- hashing */

/* Keys are hashed by store/keyhash.h. Whether the `len` bytes at a and b are
 * equal; short keys inline. */
static inline int key_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
    if (len > 16)
        return memcmp(a, b, len) == 0;
    if (len > 8)
        return ((load64(a) ^ load64(b)) |
                (load64(a + len - 8) ^ load64(b + len - 8))) == 0;
    return load_upto8(a, len) == load_upto8(b, len);
}

static inline shard_t *shard_of(memory_store_t *m, uint64_t h)
{
    return &m->shards[(h >> 48) & m->shard_mask];
}

/* ---------------------------------------------------- memory accounting */

/* Bytes the allocator holds for `p`: usable size plus its chunk header. */
static size_t alloc_charge(void *p)
{
    return malloc_usable_size(p) + MEMORY_CHUNK_HEADER;
}

/*
 * An upper bound of alloc_charge() for a malloc(n) not yet made: glibc
 * rounds a chunk (n plus its header) up to 16 bytes, and serves large
 * requests with whole pages. Used to make room BEFORE allocating; the true
 * charge is taken from the allocation itself.
 */
static size_t charge_estimate(size_t n)
{
    size_t est = (n + MEMORY_CHUNK_HEADER + 15) & ~(size_t)15;
    if (est < 32)
        est = 32;
    if (n >= 65536)
        est = (n + 2 * MEMORY_CHUNK_HEADER + 4095) & ~(size_t)4095;
    return est;
}

/* ------------------------------------------------------- eviction list */

static void lru_unlink(shard_t *s, entry_t *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        s->head = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        s->tail = e->newer;
}

static void lru_push_head(shard_t *s, entry_t *e)
{
    e->newer = NULL;
    e->older = s->head;
    if (s->head)
        s->head->newer = e;
    else
        s->tail = e;
    s->head = e;
}

/*
 * Marks `e` used: a flag in the entry, which the core is writing anyway. A
 * hit never relinks the list - relinking writes two neighbouring entries
 * and the list ends, which under threads are often another core's cache
 * lines. Eviction reads the flags instead (make_room: second chance).
 */
static inline void lru_touch(entry_t *e)
{
    e->used = 1;
}

/* Puts `e` at the head of the list. */
static void lru_move_to_head(shard_t *s, entry_t *e)
{
    if (s->head != e) {
        lru_unlink(s, e);
        lru_push_head(s, e);
    }
}

/* ------------------------------------------------------- table and entries */

/*
 * The link (bucket slot or a predecessor's `next`) that points at the entry
 * holding `key`, or NULL when the shard has no such key.
 */
static entry_t **find_link(shard_t *s, uint64_t h, const char *key,
                           size_t keylen)
{
    entry_t **link = &s->buckets[h & s->mask];

    for (entry_t *e; (e = *link) != NULL; link = &e->next)
        if (e->keylen == keylen &&
            key_equal(e->data, (const uint8_t *)key, keylen))
            return link;
    return NULL;
}

/* The link pointing at `e`, which must be in the shard. */
static entry_t **link_of(memory_store_t *m, shard_t *s, const entry_t *e)
{
    uint64_t h = key_hash(m->seed, e->data, e->keylen);
    entry_t **link = &s->buckets[h & s->mask];

    while (*link != e)
        link = &(*link)->next;
    return link;
}

/* Unlinks `e` from the table and the eviction list and frees it. */
static void entry_remove(memory_store_t *m, shard_t *s, entry_t *e,
                         entry_t **link)
{
    if (!link)
        link = link_of(m, s, e);
    *link = e->next;
    lru_unlink(s, e);
    s->bytes -= alloc_charge(e);
    s->count--;
    free(e);
}

/*
 * Evicts from the tail of the list until `need` more bytes fit in the
 * shard's budget: least recently used first, approximated by CLOCK. An
 * expired entry at the tail goes at once (an expiration: its state is
 * empty, nothing is lost). A live one used since it was inserted or last
 * passed over is moved to the head with its flag cleared (its second
 * chance); one not used since goes (an eviction). So a key is evicted only
 * after a whole turn of the list without a single use. `protect` (the
 * entry the caller is growing) is passed over, never evicted. Returns 1
 * when the bytes fit, 0 when even a shard holding nothing else cannot.
 */
static int make_room(memory_store_t *m, shard_t *s, size_t need, int64_t now_us,
                     entry_t *protect)
{
    while (s->bytes + need > s->budget) {
        entry_t *victim = s->tail;
        if (!victim || (victim == protect && s->count == 1))
            return 0;
        if (victim == protect ||
            (victim->used && victim->expire_at_us > now_us)) {
            victim->used = 0;
            lru_move_to_head(s, victim);
            continue;
        }
        if (victim->expire_at_us <= now_us)
            s->expirations++;
        else
            s->evictions++;
        entry_remove(m, s, victim, NULL);
    }
    return 1;
}

/*
 * Doubles the bucket array once the table holds as many entries as buckets.
 * When the bigger array does not fit in the budget the table first runs up
 * to two entries per bucket and only then evicts to make room: a slightly
 * longer chain is cheaper than dropping live keys. Failing to grow is not an
 * error; chains just get longer.
 */
static void table_maybe_grow(memory_store_t *m, shard_t *s, int64_t now_us)
{
    size_t nb = s->mask + 1;
    size_t size, est;
    entry_t **fresh, **old = s->buckets;

    if (s->count < nb || nb > UINT32_MAX / 2)
        return;
    size = 2 * nb * sizeof *fresh;
    est = charge_estimate(size);
    if (s->bytes + est > s->budget &&
        (s->count < 2 * nb || !make_room(m, s, est, now_us, NULL)))
        return;
    fresh = calloc(2 * nb, sizeof *fresh);
    if (!fresh)
        return;
    s->bytes += alloc_charge(fresh);
    s->mask = (uint32_t)(2 * nb - 1);
    for (size_t i = 0; i < nb; i++) {
        entry_t *e = old[i];
        while (e) {
            entry_t *next = e->next;
            uint64_t h = key_hash(m->seed, e->data, e->keylen);
            e->next = fresh[h & s->mask];
            fresh[h & s->mask] = e;
            e = next;
        }
    }
    s->buckets = fresh;
    s->bytes -= alloc_charge(old);
    free(old);
    /* The estimate is an upper bound for glibc; other allocators may differ. */
    make_room(m, s, 0, now_us, NULL);
}

/*
 * Adds `key` with its first state (`len` bytes at `state`, expiring at
 * `expire_at_us`) as the most recently used entry. Makes room first.
 * Returns 0, or RATEL_ENOMEM with the shard as it was apart from evictions.
 */
static int entry_insert(memory_store_t *m, shard_t *s, uint64_t h,
                        const char *key, size_t keylen, const uint8_t *state,
                        size_t len, int64_t expire_at_us, int64_t now_us)
{
    size_t size = ENTRY_HEADER + keylen + len;
    size_t usable;
    entry_t *e;

    if (len > MEMORY_STATE_MAX)
        return RATEL_ENOMEM;
    if (s->count + 1 > s->mask + 1)
        table_maybe_grow(m, s, now_us);
    if (!make_room(m, s, charge_estimate(size), now_us, NULL))
        return RATEL_ENOMEM;
    e = malloc(size);
    if (!e)
        return RATEL_ENOMEM;
    s->bytes += alloc_charge(e);
    if (s->bytes > s->budget && !make_room(m, s, 0, now_us, NULL)) {
        s->bytes -= alloc_charge(e);
        free(e);
        return RATEL_ENOMEM;
    }
    usable = malloc_usable_size(e) - ENTRY_HEADER - keylen;
    e->expire_at_us = expire_at_us;
    e->used = 0;
    e->state_len = (uint16_t)len;
    e->state_cap =
        (uint16_t)(usable < MEMORY_STATE_MAX ? usable : MEMORY_STATE_MAX);
    e->keylen = (uint16_t)keylen;
    memcpy(e->data, key, keylen);
    memcpy(e->data + keylen, state, len);
    e->next = s->buckets[h & s->mask];
    s->buckets[h & s->mask] = e;
    lru_push_head(s, e);
    s->count++;
    return 0;
}

int ratel__memory_insert(memory_store_t *m, shard_t *s, const char *key,
                         size_t keylen, const uint8_t *state, size_t len,
                         int64_t expire_at_us, int64_t now_us)
{
    uint64_t h = key_hash(m->seed, key, keylen);
    entry_t **link = find_link(s, h, key, keylen);

    if (link) /* a key given twice: the last one holds */
        entry_remove(m, s, *link, link);
    return entry_insert(m, s, h, key, keylen, state, len, expire_at_us, now_us);
}

shard_t *ratel__memory_shard(memory_store_t *m, const char *key, size_t keylen)
{
    return shard_of(m, key_hash(m->seed, key, keylen));
}

/*
 * Makes `*pe` able to hold a blob of `need` bytes, keeping its contents.
 * Others may be evicted to pay for the growth, never the entry itself. Returns
 * 0 (with *pe updated) or RATEL_ENOMEM (entry unchanged).
 */
static int entry_grow(memory_store_t *m, shard_t *s, entry_t **pe, size_t need,
                      int64_t now_us)
{
    entry_t *e = *pe, *grown, **link;
    size_t slack = need / 4 < MEMORY_GROW_SLACK ? need / 4 : MEMORY_GROW_SLACK;
    size_t old_charge = alloc_charge(e), size, usable;

    if (need > MEMORY_STATE_MAX)
        return RATEL_ENOMEM;
    if (need + slack > MEMORY_STATE_MAX)
        slack = MEMORY_STATE_MAX - need;
    size = ENTRY_HEADER + e->keylen + need + slack;
    lru_touch(e);
    if (!make_room(m, s, charge_estimate(size), now_us, e))
        return RATEL_ENOMEM;
    link = link_of(m, s, e);
    grown = realloc(e, size);
    if (!grown)
        return RATEL_ENOMEM;
    if (grown != e) {
        *link = grown;
        if (grown->newer)
            grown->newer->older = grown;
        else
            s->head = grown;
        if (grown->older)
            grown->older->newer = grown;
        else
            s->tail = grown;
    }
    s->bytes = s->bytes - old_charge + alloc_charge(grown);
    usable = malloc_usable_size(grown) - ENTRY_HEADER - grown->keylen;
    grown->state_cap =
        (uint16_t)(usable < MEMORY_STATE_MAX ? usable : MEMORY_STATE_MAX);
    *pe = grown;
    if (s->bytes > s->budget && !make_room(m, s, 0, now_us, grown)) {
        /* Only an allocator rounding far beyond glibc's gets here. */
        entry_remove(m, s, grown, NULL);
        return RATEL_ENOMEM;
    }
    return 0;
}

/* ------------------------------------------------------------ decisions */

static inline int call_core(const memory_call_t *c, uint8_t *state, size_t *len,
                            size_t cap)
{
    /* Blobs here are written by the core alone: the owned entry applies. */
    if (c->request)
        return ratel__policy_acquire_owned(c->policy, state, len, cap,
                                           c->now_us, c->request, c->decision);
    if (c->held)
        return ratel_policy_release(c->policy, state, len, cap, c->now_us,
                                    c->lease, c->lease_flags, c->held,
                                    c->decision);
    return ratel_policy_refund(c->policy, state, len, cap, c->now_us, c->cost,
                               c->decision);
}

/*
 * Whether the call just made rewrote the blob in the policy's own format:
 * a refund or a release, or an acquire admitted and not a peek. Then the
 * decision's reset time is the blob's. After a peek or a denial the blob may
 * still be the one written under other rules (a config edit), whose reset the
 * decision does not describe - or it may have been converted (a denied key
 * keeps its converted state).
 */
static inline int call_rewrote(const memory_call_t *c)
{
    return !c->request ||
           (c->decision->allowed && !(c->request->flags & RATEL_PEEK));
}

/*
 * The instant the key just decided by `c` is back to full (state empty):
 * reset_after_ms is rounded up by the core, so this is never early and at
 * most 1 ms late.
 */
static inline int64_t expiry_of(const memory_call_t *c)
{
    int64_t ms = c->decision->reset_after_ms;

    /* now_us < 2^53 (the core checked it), so this cannot overflow. */
    if (ms <= 0)
        return c->now_us;
    if (ms > RATEL_TIME_MAX_US / 1000)
        ms = RATEL_TIME_MAX_US / 1000;
    return c->now_us + ms * 1000;
}

/*
 * Runs `c` on a live entry in place, growing it when the core asks for more
 * room. Deletes the entry if its state became empty.
 */
static int decide_live(memory_store_t *m, shard_t *s, entry_t **link,
                       const memory_call_t *c)
{
    entry_t *e = *link;
    size_t len = e->state_len;
    int rc;

    s->hits++;
    rc = call_core(c, e->data + e->keylen, &len, e->state_cap);
    if (rc == RATEL_ENOBUFS) {
        rc = entry_grow(m, s, &e, len, c->now_us);
        if (rc != 0)
            return rc;
        link = NULL;
        len = e->state_len;
        rc = call_core(c, e->data + e->keylen, &len, e->state_cap);
    }
    if (rc != 0)
        return rc;
    if (len == 0) {
        entry_remove(m, s, e, link);
        return 0;
    }
    e->state_len = (uint16_t)len;
    /*
     * A rewritten blob expires at its reset time. Otherwise the expiry only
     * moves later: the blob is either unchanged (its old expiry holds) or
     * converted (the decision's reset is its reset); the later of the two is
     * never early for either, and dropping a key early would admit too much.
     */
    if (call_rewrote(c)) {
        e->expire_at_us = expiry_of(c);
    } else {
        int64_t at = expiry_of(c);
        if (at > e->expire_at_us)
            e->expire_at_us = at;
    }
    lru_touch(e);
    return 0;
}

/*
 * Decides `c` for a key the shard does not hold, in a stack buffer, and
 * stores the result only if it is not empty: a denied request or a peek for
 * an unknown key costs no memory. Kept out of line so that the hot path
 * does not carry the 20 KiB frame.
 */
static __attribute__((noinline)) int decide_new(memory_store_t *m, shard_t *s,
                                                uint64_t h, const char *key,
                                                size_t keylen,
                                                const memory_call_t *c)
{
    uint8_t stack[MEMORY_STACK_STATE];
    uint8_t *buf = stack;
    size_t len = 0;
    int rc;

    rc = call_core(c, buf, &len, sizeof stack);
    if (rc == RATEL_ENOBUFS) {
        /* Only if a policy's state could outgrow the stack buffer. */
        buf = malloc(len);
        if (!buf)
            return RATEL_ENOMEM;
        rc = call_core(c, buf, &len, len);
    }
    if (rc == 0 && len > 0) {
        rc = entry_insert(m, s, h, key, keylen, buf, len, expiry_of(c),
                          c->now_us);
        if (rc == 0)
            s->misses++;
    }
    if (buf != stack)
        free(buf);
    return rc;
}

/*
 * Decides `c` for the key whose expired entry `*link` points at: the key is
 * treated as new, but when the new state fits the old allocation it is
 * reused in place (no free + malloc for a key that keeps coming back).
 */
static int decide_expired(memory_store_t *m, shard_t *s, entry_t **link,
                          uint64_t h, const char *key, size_t keylen,
                          const memory_call_t *c)
{
    entry_t *e = *link;
    size_t len = 0;
    int rc;

    s->expirations++;
    rc = call_core(c, e->data + e->keylen, &len, e->state_cap);
    if (rc == 0 && len > 0) {
        e->state_len = (uint16_t)len;
        e->expire_at_us = expiry_of(c);
        lru_touch(e);
        s->misses++;
        return 0;
    }
    entry_remove(m, s, e, link);
    if (rc == RATEL_ENOBUFS)
        return decide_new(m, s, h, key, keylen, c);
    return rc;
}

/* Decides `c` for the key of hash `h` in shard `s`, which is locked. */
static int decide_locked(memory_store_t *m, shard_t *s, uint64_t h,
                         const char *key, size_t keylen, const memory_call_t *c)
{
    entry_t **link = find_link(s, h, key, keylen);

    if (!link)
        return decide_new(m, s, h, key, keylen, c);
    if ((*link)->expire_at_us > c->now_us)
        return decide_live(m, s, link, c);
    return decide_expired(m, s, link, h, key, keylen, c);
}

/* acquire and refund: find the key's shard and entry, then decide. */
static int memory_decide(memory_store_t *m, const char *key, size_t keylen,
                         const memory_call_t *c)
{
    uint64_t h;
    shard_t *s;
    int rc;

    if (keylen > MEMORY_KEY_MAX)
        return RATEL_ERANGE;
    h = key_hash(m->seed, key, keylen);
    s = shard_of(m, h);
    shard_lock(&s->lock);
    rc = decide_locked(m, s, h, key, keylen, c);
    shard_unlock(&s->lock);
    if (m->snap)
        ratel__snapshotter_changed(m->snap);
    return rc;
}

static int compare_shard(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (shard_t *const *)a,
              y = (uintptr_t) * (shard_t *const *)b;
    return x < y ? -1 : x > y;
}

/*
 * Runs the group's items as peeks (phase 0) or as themselves (phase 1),
 * their shards already locked; returns whether every one was decided and
 * admitted. In phase 1 a member denied after all (the same key twice in
 * the group) has the members charged before it given back.
 */
static int group_pass(memory_store_t *m, ratel_batch_item_t *items, size_t n,
                      const uint64_t *h, shard_t *const *of, int phase,
                      int64_t now_us)
{
    int all = 1;

    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        ratel_request_t peek = it->request;
        memory_call_t c = {.policy = it->policy,
                           .request = phase ? &it->request : &peek,
                           .now_us = now_us,
                           .decision = &it->decision};
        peek.flags |= RATEL_PEEK;
        it->rc = decide_locked(m, of[i], h[i], it->key, it->keylen, &c);
        if (it->rc == 0 && it->decision.allowed)
            continue;
        all = 0;
        if (!phase)
            continue; /* every member gets its own decision */
        for (size_t j = 0; j < i; j++) {
            ratel_decision_t back;
            memory_call_t r = {.policy = items[j].policy,
                               .cost = items[j].request.cost,
                               .now_us = now_us,
                               .decision = &back};
            if (!(items[j].request.flags & RATEL_PEEK))
                decide_locked(m, of[j], h[j], items[j].key, items[j].keylen,
                              &r);
        }
        return 0;
    }
    return all;
}

/*
 * One all-or-nothing group: every member's shard is locked (in address
 * order, so that two groups never wait for each other), all are decided
 * as peeks, and only when all are admitted are they decided for real -
 * at the same instant, under the same locks, so the peeks hold. Nothing
 * else can see a member charged and another not.
 */
static void memory_acquire_group(ratel_store_t *store,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us)
{
    memory_store_t *m = (memory_store_t *)store;
    uint64_t h[RATEL_GROUP_MAX] = {0};
    shard_t *of[RATEL_GROUP_MAX] = {0}, *lock[RATEL_GROUP_MAX];
    size_t nlock = 0;

    if (n > RATEL_GROUP_MAX) /* store.c refuses such groups */
        return;

    for (size_t i = 0; i < n; i++) {
        if (items[i].keylen > MEMORY_KEY_MAX) {
            items[i].rc = RATEL_ERANGE;
            return;
        }
        h[i] = key_hash(m->seed, items[i].key, items[i].keylen);
        of[i] = lock[nlock++] = shard_of(m, h[i]);
    }
    qsort(lock, nlock, sizeof *lock, compare_shard);
    for (size_t i = 0; i < nlock; i++)
        if (i == 0 || lock[i] != lock[i - 1])
            shard_lock(&lock[i]->lock);
    if (group_pass(m, items, n, h, of, 0, now_us))
        group_pass(m, items, n, h, of, 1, now_us);
    for (size_t i = nlock; i-- > 0;)
        if (i == 0 || lock[i] != lock[i - 1])
            shard_unlock(&lock[i]->lock);
    if (m->snap)
        ratel__snapshotter_changed(m->snap);
}

static int memory_acquire(ratel_store_t *store, const char *key, size_t keylen,
                          const ratel_policy_t *policy, int64_t now_us,
                          const ratel_request_t *request,
                          ratel_decision_t *decision)
{
    memory_call_t c = {.policy = policy,
                       .request = request,
                       .now_us = now_us,
                       .decision = decision};
    return memory_decide((memory_store_t *)store, key, keylen, &c);
}

static int memory_refund(ratel_store_t *store, const char *key, size_t keylen,
                         const ratel_policy_t *policy, int64_t now_us,
                         uint64_t cost, ratel_decision_t *decision)
{
    memory_call_t c = {
        .policy = policy, .cost = cost, .now_us = now_us, .decision = decision};
    return memory_decide((memory_store_t *)store, key, keylen, &c);
}

static int memory_release(ratel_store_t *store, const char *key, size_t keylen,
                          const ratel_policy_t *policy, int64_t now_us,
                          uint32_t lease, unsigned flags, int *held,
                          ratel_decision_t *decision)
{
    memory_call_t c = {.policy = policy,
                       .now_us = now_us,
                       .decision = decision,
                       .lease = lease,
                       .lease_flags = flags,
                       .held = held};
    *held = 0;
    return memory_decide((memory_store_t *)store, key, keylen, &c);
}

/* Forgets `key`. Not an error if the key is unknown. */
static int memory_reset(ratel_store_t *store, const char *key, size_t keylen)
{
    memory_store_t *m = (memory_store_t *)store;
    uint64_t h;
    shard_t *s;
    entry_t **link;

    if (keylen > MEMORY_KEY_MAX)
        return 0; /* such a key is never stored */
    h = key_hash(m->seed, key, keylen);
    s = shard_of(m, h);
    shard_lock(&s->lock);
    link = find_link(s, h, key, keylen);
    if (link)
        entry_remove(m, s, *link, link);
    shard_unlock(&s->lock);
    if (m->snap)
        ratel__snapshotter_changed(m->snap);
    return 0;
}

/*
 * Copies the key's blob out under the lock, then describes it unlocked. An
 * expired entry is removed and reads as no state. Inspecting does not count
 * as use: the entry is not marked used.
 */
static int memory_inspect(ratel_store_t *store, const char *key, size_t keylen,
                          int64_t now_us, ratel_rule_status_t *out, size_t max,
                          size_t *n)
{
    memory_store_t *m = (memory_store_t *)store;
    uint8_t stack[MEMORY_STACK_STATE];
    uint8_t *buf = stack;
    size_t len = 0;
    uint64_t h;
    shard_t *s;
    entry_t **link;
    int rc = 0;

    if (keylen > MEMORY_KEY_MAX)
        return 0;
    h = key_hash(m->seed, key, keylen);
    s = shard_of(m, h);
    shard_lock(&s->lock);
    link = find_link(s, h, key, keylen);
    if (link && (*link)->expire_at_us <= now_us) {
        s->expirations++;
        entry_remove(m, s, *link, link);
    } else if (link) {
        entry_t *e = *link;
        len = e->state_len;
        if (len > sizeof stack && !(buf = malloc(len)))
            rc = RATEL_ENOMEM;
        else
            memcpy(buf, e->data + e->keylen, len);
    }
    shard_unlock(&s->lock);
    if (rc == 0 && len > 0)
        rc = ratel_state_inspect(buf, len, now_us, out, max, n);
    if (buf && buf != stack)
        free(buf);
    return rc;
}

/* Sums the shards' counters, taking each shard's lock in turn. */
static void memory_stats(ratel_store_t *store, ratel_store_stats_t *out)
{
    memory_store_t *m = (memory_store_t *)store;

    memset(out, 0, sizeof *out);
    out->max_bytes = m->max_bytes;
    out->bytes = m->fixed_bytes;
    for (uint32_t i = 0; i <= m->shard_mask; i++) {
        shard_t *s = &m->shards[i];
        shard_lock(&s->lock);
        out->keys += s->count;
        out->bytes += s->bytes;
        out->hits += s->hits;
        out->misses += s->misses;
        out->expirations += s->expirations;
        out->evictions += s->evictions;
        shard_unlock(&s->lock);
    }
    if (m->snap) {
        ratel__snapshot_stats_t st;
        ratel__snapshotter_stats(m->snap, &st);
        out->snapshot_writes = st.writes;
        out->snapshot_errors = st.errors;
        out->snapshot_bytes = st.bytes;
        out->snapshot_write_us = st.write_us;
        out->snapshot_lock_max_us = st.lock_max_us;
    }
}

/* The last snapshot write's failure, "" when it succeeded or there is no
   snapshot. */
static void memory_errstr(ratel_store_t *store, char *buf, size_t len)
{
    memory_store_t *m = (memory_store_t *)store;

    if (m->snap)
        ratel__snapshotter_errstr(m->snap, buf, len);
    else if (len > 0)
        buf[0] = '\0';
}

/* Up, always; with a snapshot, a warning while its writes fail. */
static void memory_health(ratel_store_t *store, ratel_store_health_t *out)
{
    memory_store_t *m = (memory_store_t *)store;

    if (m->snap)
        ratel__snapshotter_health(m->snap, out);
    out->up = 1;
}

static void memory_watch_health(ratel_store_t *store, ratel_store_health_fn fn,
                                void *ud)
{
    memory_store_t *m = (memory_store_t *)store;

    if (m->snap)
        ratel__snapshotter_watch(m->snap, fn, ud);
}

/* Frees the first `nshards` shards' contents, then the store itself. */
static void memory_destroy(memory_store_t *m, uint32_t nshards)
{
    for (uint32_t i = 0; i < nshards; i++) {
        shard_t *s = &m->shards[i];
        for (entry_t *e = s->head, *older; e; e = older) {
            older = e->older;
            free(e);
        }
        free(s->buckets);
    }
    free(m->shards);
    free(m);
}

/* A last snapshot (when keys changed since the last one), then the rest. */
static void memory_free(ratel_store_t *store)
{
    memory_store_t *m = (memory_store_t *)store;

    ratel__snapshotter_stop(m->snap);
    memory_destroy(m, m->shard_mask + 1);
}

static const ratel_store_ops_t memory_ops = {
    .name = "memory",
    .acquire = memory_acquire,
    .refund = memory_refund,
    .release = memory_release,
    .reset = memory_reset,
    .inspect = memory_inspect,
    .acquire_group = memory_acquire_group,
    .stats = memory_stats,
    .errstr = memory_errstr,
    .health = memory_health,
    .watch_health = memory_watch_health,
    .free = memory_free,
};

/*
 * Fills the hash secrets from the kernel's random pool, falling back to the
 * clock and an address when it is not available: either way they differ
 * from store to store and from run to run.
 */
static void seed_init(memory_store_t *m)
{
    ratel__keyhash_seed(m->seed, m);
}

/* Shards to use: the request rounded up to a power of two, then halved until
 * each shard gets at least MEMORY_MIN_SHARD_BYTES. */
static uint32_t shard_count(unsigned want, size_t max_bytes)
{
    uint32_t n = 1;

    if (want == 0)
        want = MEMORY_DEFAULT_SHARDS;
    if (want > MEMORY_MAX_SHARDS)
        want = MEMORY_MAX_SHARDS;
    while (n < want)
        n <<= 1;
    while (n > 1 && max_bytes / n < MEMORY_MIN_SHARD_BYTES)
        n >>= 1;
    return n;
}

int ratel_store_memory_new(ratel_store_t **out,
                           const ratel_memory_options_t *options)
{
    return ratel_store_memory_open(out, options, NULL, NULL, 0);
}

int ratel_store_memory_snapshot(ratel_store_t *store, char *why, size_t whylen)
{
    memory_store_t *m = (memory_store_t *)store;

    if (why && whylen > 0)
        why[0] = '\0';
    if (!store || store->ops != &memory_ops)
        return RATEL_EINVAL;
    if (!m->snap)
        return 0;
    return ratel__snapshotter_write(m->snap, 0, why, whylen);
}

int ratel_store_memory_open(ratel_store_t **out,
                            const ratel_memory_options_t *options,
                            const ratel_snapshot_options_t *snapshot, char *why,
                            size_t whylen)
{
    char ignored[8];
    size_t max_bytes = MEMORY_DEFAULT_MAX_BYTES;
    unsigned want = 0;
    memory_store_t *m;
    uint32_t n;

    if (!why || whylen == 0)
        why = ignored, whylen = sizeof ignored;
    why[0] = '\0';
    if (!out)
        return RATEL_EINVAL;
    *out = NULL;
    if (options) {
        if (options->max_bytes)
            max_bytes = options->max_bytes;
        want = options->shards;
    }
    /* One range for max_bytes, the option table's, as YAML reads it. */
    if (ratel__option_check(ratel__memory_options, ratel__memory_noptions,
                            "max_bytes", (int64_t)max_bytes) != 0)
        return RATEL_EINVAL;
    n = shard_count(want, max_bytes);

    m = calloc(1, sizeof *m);
    if (!m)
        return RATEL_ENOMEM;
    m->shards = aligned_alloc(_Alignof(shard_t), n * sizeof(shard_t));
    if (!m->shards) {
        free(m);
        return RATEL_ENOMEM;
    }
    memset(m->shards, 0, n * sizeof(shard_t));
    m->base.ops = &memory_ops;
    m->shard_mask = n - 1;
    m->max_bytes = max_bytes;
    m->fixed_bytes = alloc_charge(m) + alloc_charge(m->shards);
    seed_init(m);

    for (uint32_t i = 0; i < n; i++) {
        shard_t *s = &m->shards[i];
        s->buckets = calloc(MEMORY_INITIAL_BUCKETS, sizeof *s->buckets);
        if (!s->buckets) {
            memory_destroy(m, i);
            return RATEL_ENOMEM;
        }
        atomic_init(&s->lock.held, 0);
        s->mask = MEMORY_INITIAL_BUCKETS - 1;
        s->bytes = alloc_charge(s->buckets);
        s->budget = (max_bytes - m->fixed_bytes) / n;
    }
    if (snapshot && snapshot->path && snapshot->path[0]) {
        int rc = ratel__memory_snapshot_open(m, snapshot, why, whylen);
        if (rc != 0) {
            memory_destroy(m, n);
            return rc;
        }
    }
    *out = &m->base;
    return 0;
}
