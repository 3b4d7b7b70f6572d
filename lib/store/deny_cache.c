/*
 * deny_cache.c - the Redis store's local cache of denials (deny_cache.h).
 *
 * One table, allocated in new and never again: sets of 4 ways, the set
 * chosen by the low bits of a seeded 64-bit hash of the key bytes, so that
 * every entry of one key (one per policy) lies in the same set and forget
 * looks at one set only. A set starts with one cache line of tags - each
 * way's key hash and end time - so a lookup reads that line, and then only
 * the way whose tag matches (its fingerprint, request limits and key bytes,
 * compared in full: equal hashes are not equal keys).
 *
 * Locks: 256 stripes (fewer for a small table), stripe = set index modulo
 * the stripe count, each one word on its own pair of cache lines: a
 * sequence lock. Writers (put, forget) take it by making the sequence odd
 * and release it by making it even again, spinning and then yielding while
 * another writer holds it. Readers (get) take nothing: they read the set,
 * then check that the sequence is the same even value as before, and read
 * again otherwise. A hit therefore writes no shared memory - a hot abuser
 * hit from every thread at once costs no cache line transfers - and is
 * counted in a per-thread counter line. Everything a reader may see while a
 * writer changes it is read and written with relaxed atomic accesses, so a
 * torn read is discarded by the sequence check, never undefined.
 *
 * Times are the caller's microseconds. Ends are computed with saturation
 * (a hostile retry_after_ms cannot wrap around into the past), and a slot
 * whose end is at or before `now_us` is empty for every purpose but the
 * `live` count: put reuses it before pushing out a live entry.
 */
#include "store/deny_cache.h"
#include "store/keyhash.h"
#include "store/option.h"
#include "store/spin.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define DENY_CACHE_WAYS 4
#define DENY_CACHE_STRIPES 256u
#define DENY_CACHE_HIT_COUNTERS 64u
#define DENY_CACHE_MIN_ENTRIES 4u
#define DENY_CACHE_KEY_WORDS ((RATEL_DENY_CACHE_KEY_MAX + 7) / 8)

/* Fields a reader may see change: relaxed atomic accesses. */
#define LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define STORE(field, value)                                                    \
    __atomic_store_n(&(field), (value), __ATOMIC_RELAXED)

/*
 * One way's payload: what the denial said, with its times turned into
 * absolute instants so that get can count them down. The key follows
 * inline as words (key_word).
 */
typedef struct slot_s {
    uint64_t fingerprint; /* policy the denial was made under */
    uint64_t cost;        /* request cost that was denied */
    int64_t max_wait_ms;  /* request max wait that was denied */
    int64_t retry_end_us; /* now + retry_after_ms at put, saturated */
    int64_t reset_end_us; /* now + reset_after_ms at put, saturated */
    int64_t limit;        /* decision fields as recorded */
    int64_t remaining;
    int32_t rule;
    uint32_t keylen;
    uint64_t key[DENY_CACHE_KEY_WORDS];
} slot_t;

/*
 * One set: the tag line (hash and end of each way; end 0 = never used or
 * forgotten), then the ways. end_us is min(retry end, put time + max_ms):
 * the instant the entry stops answering.
 */
typedef struct __attribute__((aligned(64))) set_s {
    uint64_t hash[DENY_CACHE_WAYS];
    int64_t end_us[DENY_CACHE_WAYS];
    slot_t slot[DENY_CACHE_WAYS];
} set_t;

/* A stripe's sequence lock and the counters its writers keep, alone on two
   cache lines (the adjacent-line prefetcher moves lines in pairs). */
typedef struct __attribute__((aligned(128))) stripe_s {
    _Atomic uint64_t seq; /* odd while a writer holds the stripe */
    uint64_t live;        /* slots of this stripe with end != 0 */
    uint64_t inserts;     /* denials recorded */
    uint64_t replaced;    /* live entries pushed out by a full set */
} stripe_t;

/* Hits, one line per thread (threads beyond the count share lines). */
typedef struct __attribute__((aligned(128))) hit_counter_s {
    _Atomic uint64_t n;
} hit_counter_t;

struct ratel_deny_cache_s {
    stripe_t stripes[DENY_CACHE_STRIPES]; /* first: keeps their alignment */
    hit_counter_t hits[DENY_CACHE_HIT_COUNTERS];
    set_t *sets;          /* 64-byte aligned view into `raw` */
    void *raw;            /* the table's allocation */
    uint64_t set_mask;    /* sets - 1 */
    uint64_t stripe_mask; /* stripes in use - 1 (<= sets - 1) */
    uint64_t entries;     /* sets * DENY_CACHE_WAYS */
    int64_t max_ms;       /* longest an entry answers */
    uint64_t seed[3];     /* hash secrets, random per cache */
};

/* -------------------------------------------------------------- locking */

/* Spin briefly, then yield: a preempted writer gets the CPU back. */
static inline void backoff(unsigned spins)
{
    ratel__spin_backoff(spins);
}

/*
 * Takes the stripe for writing: the sequence goes from even to odd. The
 * release fence keeps the writes that follow from being seen before the
 * odd sequence (a reader that sees one of them then sees the stripe
 * changed). Returns the odd value, for stripe_write_end.
 */
static inline uint64_t stripe_write_begin(stripe_t *s)
{
    for (unsigned spins = 0;; spins++) {
        uint64_t v = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (!(v & 1) && atomic_compare_exchange_weak_explicit(
                            &s->seq, &v, v + 1, memory_order_acquire,
                            memory_order_relaxed)) {
            atomic_thread_fence(memory_order_release);
            return v + 1;
        }
        backoff(spins);
    }
}

static inline void stripe_write_end(stripe_t *s, uint64_t odd)
{
    atomic_store_explicit(&s->seq, odd + 1, memory_order_release);
}

/* The hit counter of the calling thread: one per thread, handed out in
   turn on a thread's first hit in any cache. */
static _Atomic unsigned next_hit_counter;
static _Thread_local unsigned thread_hit_counter; /* index + 1; 0: none */

static inline _Atomic uint64_t *hit_counter(ratel_deny_cache_t *c)
{
    unsigned i = thread_hit_counter;
    if (!i) {
        i = atomic_fetch_add_explicit(&next_hit_counter, 1,
                                      memory_order_relaxed) %
                DENY_CACHE_HIT_COUNTERS +
            1;
        thread_hit_counter = i;
    }
    return &c->hits[i - 1].n;
}

/* -------------------------------------------------------------- hashing */

/*
 * Word `i` of a key as a slot stores it: whole words, then for the last
 * the 8 bytes that end the key (overlapping the word before; keys under 8
 * bytes as load_upto8 reads them). Keys of one length map to words one to
 * one, with no padding to write and no variable-length copy to read.
 */
static inline uint64_t key_word(const uint8_t *key, size_t len, size_t i)
{
    if (8 * i + 8 < len)
        return load64(key + 8 * i);
    return len >= 8 ? load64(key + len - 8) : load_upto8(key, len);
}

/* Whether a slot holds exactly these `len` key bytes (the caller has
   compared the lengths). */
static inline int key_equal(const slot_t *s, const uint8_t *key, size_t len)
{
    for (size_t i = 0; i < (len + 7) / 8; i++)
        if (LOAD(s->key[i]) != key_word(key, len, i))
            return 0;
    return 1;
}

/* Seeds from the kernel; if getrandom is unavailable, from the clock and
   addresses (weaker, but still not known in advance to a remote client). */
static void seed_init(ratel_deny_cache_t *c)
{
    ratel__keyhash_seed(c->seed, c);
}

/* splitmix64's finaliser: a bijection on 64 bits. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Absorbs nrules, then each rule's (algo, limit) and (period, burst) as two
 * words, each step h = mix64(h + constant ^ word). Every step is a
 * bijection of h for a fixed word, so two policies differing in exactly
 * one field always get different fingerprints; other differences collide
 * with probability ~2^-64. Rules past nrules are not looked at.
 */
uint64_t ratel__policy_fingerprint(const ratel_policy_t *policy)
{
    uint32_t n;
    uint64_t h;

    if (!policy)
        return 0;
    n = policy->nrules < RATEL_MAX_RULES ? policy->nrules : RATEL_MAX_RULES;
    h = mix64(0x6a09e667f3bcc909ull ^ policy->nrules);
    for (uint32_t i = 0; i < n; i++) {
        const ratel_rule_t *r = &policy->rules[i];
        h = mix64((h + 0x9e3779b97f4a7c15ull) ^
                  ((uint64_t)(uint32_t)r->algo << 32 | r->limit));
        h = mix64((h + 0x9e3779b97f4a7c15ull) ^
                  ((uint64_t)r->period_ms << 32 | r->burst));
        h = mix64((h + 0x9e3779b97f4a7c15ull) ^
                  ((uint64_t)r->calendar << 48 ^ (uint64_t)r->months << 32 ^
                   (uint32_t)r->tz_offset_s ^ (uint64_t)(uintptr_t)r->zone));
    }
    return h;
}

/* ----------------------------------------------------------------- time */

/* now_us + ms milliseconds, saturated at INT64_MAX (ms > 0). */
static inline int64_t end_after(int64_t now_us, int64_t ms)
{
    int64_t us, end;

    if (__builtin_mul_overflow(ms, (int64_t)1000, &us) ||
        __builtin_add_overflow(now_us, us, &end))
        return INT64_MAX;
    return end;
}

/* Milliseconds from now_us (>= 0) to end_us, rounded up; 0 once it is
   past. Written so that an end near INT64_MAX cannot overflow. */
static inline int64_t ms_until(int64_t end_us, int64_t now_us)
{
    int64_t left;

    if (end_us <= now_us)
        return 0;
    left = end_us - now_us;
    return left / 1000 + (left % 1000 != 0);
}

/* ------------------------------------------------------------ the table */

int ratel__deny_cache_new(ratel_deny_cache_t **out, size_t entries,
                          int64_t max_ms)
{
    ratel_deny_cache_t *c;
    size_t n = DENY_CACHE_MIN_ENTRIES, sets, stripes, bytes;

    if (!out)
        return RATEL_EINVAL;
    *out = NULL;
    /* The upper bound is deny_cache's in the Redis store's option table
       (option.c), the one range a URL, YAML and the C API share. */
    if (entries < 1 ||
        ratel__redis_option_check("deny_cache", (int64_t)entries) != 0 ||
        max_ms < 1)
        return RATEL_EINVAL;
    while (n < entries)
        n <<= 1;
    sets = n / DENY_CACHE_WAYS;
    stripes = sets < DENY_CACHE_STRIPES ? sets : DENY_CACHE_STRIPES;
    if (sets > (SIZE_MAX - 64) / sizeof(set_t))
        return RATEL_ENOMEM;
    bytes = sets * sizeof(set_t) + 64;

    c = aligned_alloc(_Alignof(ratel_deny_cache_t), sizeof *c);
    if (!c)
        return RATEL_ENOMEM;
    memset(c, 0, sizeof *c);
    /* calloc, not aligned_alloc + memset: a large table's pages stay
       untouched (and unbacked) until a denial lands in them. */
    c->raw = calloc(1, bytes);
    if (!c->raw) {
        free(c);
        return RATEL_ENOMEM;
    }
    c->sets = (set_t *)(((uintptr_t)c->raw + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < DENY_CACHE_STRIPES; i++)
        atomic_init(&c->stripes[i].seq, 0);
    for (size_t i = 0; i < DENY_CACHE_HIT_COUNTERS; i++)
        atomic_init(&c->hits[i].n, 0);
    c->set_mask = sets - 1;
    c->stripe_mask = stripes - 1;
    c->entries = n;
    c->max_ms = max_ms;
    seed_init(c);
    *out = c;
    return 0;
}

void ratel__deny_cache_free(ratel_deny_cache_t *cache)
{
    if (!cache)
        return;
    free(cache->raw);
    free(cache);
}

/* The set of hash `h` and the stripe that guards it. */
static inline set_t *set_of(ratel_deny_cache_t *c, uint64_t h,
                            stripe_t **stripe)
{
    uint64_t i = h & c->set_mask;
    *stripe = &c->stripes[i & c->stripe_mask];
    return &c->sets[i];
}

/* Whether way `w` holds these key bytes (any policy). */
static inline int way_has_key(const set_t *set, int w, uint64_t h,
                              const uint8_t *key, size_t keylen)
{
    const slot_t *s = &set->slot[w];
    return LOAD(set->hash[w]) == h && LOAD(s->keylen) == keylen &&
           key_equal(s, key, keylen);
}

/*
 * The way put writes to: the entry of the same key and policy if there is
 * one (a newer denial replaces an older one), else an empty or ended way,
 * else the live way that ends first (*evicts set). Runs under the lock.
 */
static int pick_way(const set_t *set, uint64_t h, const uint8_t *key,
                    size_t keylen, uint64_t fingerprint, int64_t now_us,
                    int *evicts)
{
    int free_way = -1, first_end = 0;

    for (int w = 0; w < DENY_CACHE_WAYS; w++) {
        int64_t end = set->end_us[w];
        if (end != 0 && set->slot[w].fingerprint == fingerprint &&
            way_has_key(set, w, h, key, keylen)) {
            *evicts = 0;
            return w;
        }
        if (free_way < 0 && end <= now_us)
            free_way = w;
        if (end < set->end_us[first_end])
            first_end = w;
    }
    *evicts = free_way < 0;
    return free_way < 0 ? first_end : free_way;
}

void ratel__deny_cache_put(ratel_deny_cache_t *cache, const char *key,
                           size_t keylen, uint64_t fingerprint,
                           const ratel_request_t *request,
                           const ratel_decision_t *decision, int64_t now_us)
{
    const uint8_t *k = (const uint8_t *)key;
    int64_t retry_end, reset_end, cap_end, end;
    uint64_t h, seq;
    stripe_t *stripe;
    set_t *set;
    slot_t *s;
    int w, evicts;

    if (!cache || !request || !decision || (!key && keylen) ||
        decision->allowed != 0 || decision->retry_after_ms <= 0 ||
        keylen > RATEL_DENY_CACHE_KEY_MAX || now_us < 0)
        return;
    retry_end = end_after(now_us, decision->retry_after_ms);
    reset_end = decision->reset_after_ms > 0
                    ? end_after(now_us, decision->reset_after_ms)
                    : now_us;
    cap_end = end_after(now_us, cache->max_ms);
    end = retry_end < cap_end ? retry_end : cap_end;

    h = key_hash(cache->seed, k, keylen);
    set = set_of(cache, h, &stripe);
    seq = stripe_write_begin(stripe);
    w = pick_way(set, h, k, keylen, fingerprint, now_us, &evicts);
    if (set->end_us[w] == 0)
        stripe->live++;
    stripe->replaced += (uint64_t)evicts;
    stripe->inserts++;
    STORE(set->hash[w], h);
    STORE(set->end_us[w], end);
    s = &set->slot[w];
    STORE(s->fingerprint, fingerprint);
    STORE(s->cost, request->cost);
    STORE(s->max_wait_ms, request->max_wait_ms);
    STORE(s->retry_end_us, retry_end);
    STORE(s->reset_end_us, reset_end);
    STORE(s->limit, decision->limit);
    STORE(s->remaining, decision->remaining);
    STORE(s->rule, (int32_t)decision->rule);
    STORE(s->keylen, (uint32_t)keylen);
    for (size_t i = 0; i < (keylen + 7) / 8; i++)
        STORE(s->key[i], key_word(k, keylen, i));
    stripe_write_end(stripe, seq);
}

/*
 * Looks the key and policy up in `set` without a lock, writing a hit's
 * answer to *out. What it returns is only true if the stripe's sequence
 * did not move meanwhile (the caller checks); until then the values read
 * may mix two writes, so nothing read is trusted as an index or a length
 * (the key length is compared with the caller's, which is in range).
 */
static int read_set(const set_t *set, uint64_t h, const uint8_t *key,
                    size_t keylen, uint64_t fingerprint,
                    const ratel_request_t *request, int64_t now_us,
                    ratel_decision_t *out)
{
    for (int w = 0; w < DENY_CACHE_WAYS; w++) {
        const slot_t *s = &set->slot[w];
        int64_t retry, reset;

        /* Empty ways have end 0 <= now_us: the end test covers them. */
        if (LOAD(set->hash[w]) != h || LOAD(set->end_us[w]) <= now_us ||
            LOAD(s->fingerprint) != fingerprint ||
            !way_has_key(set, w, h, key, keylen))
            continue;
        /* At most one way holds this key and policy. */
        if (request->cost < LOAD(s->cost) ||
            request->max_wait_ms > LOAD(s->max_wait_ms))
            return 0;
        retry = ms_until(LOAD(s->retry_end_us), now_us);
        reset = ms_until(LOAD(s->reset_end_us), now_us);
        out->allowed = 0;
        out->rule = LOAD(s->rule);
        out->limit = LOAD(s->limit);
        out->remaining = LOAD(s->remaining);
        /* end <= retry end, so retry >= 1 here; the max keeps it so. */
        out->retry_after_ms = retry > 1 ? retry : 1;
        out->reset_after_ms =
            reset > out->retry_after_ms ? reset : out->retry_after_ms;
        out->rule_reset_ms = out->reset_after_ms;
        out->wait_ms = 0;
        out->source = RATEL_SOURCE_CACHE;
        return 1;
    }
    return 0;
}

int ratel__deny_cache_get(ratel_deny_cache_t *cache, const char *key,
                          size_t keylen, uint64_t fingerprint,
                          const ratel_request_t *request, int64_t now_us,
                          ratel_decision_t *decision)
{
    const uint8_t *k = (const uint8_t *)key;
    ratel_decision_t found;
    uint64_t h;
    stripe_t *stripe;
    set_t *set;
    int hit = 0;

    if (!cache || !request || !decision || (!key && keylen) ||
        keylen > RATEL_DENY_CACHE_KEY_MAX || now_us < 0)
        return 0;
    h = key_hash(cache->seed, k, keylen);
    set = set_of(cache, h, &stripe);
    for (unsigned spins = 0;; spins++) {
        uint64_t seq = atomic_load_explicit(&stripe->seq, memory_order_acquire);
        if (!(seq & 1)) {
            hit = read_set(set, h, k, keylen, fingerprint, request, now_us,
                           &found);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&stripe->seq, memory_order_relaxed) == seq)
                break;
        }
        backoff(spins);
    }
    if (!hit)
        return 0;
    *decision = found;
    atomic_fetch_add_explicit(hit_counter(cache), 1, memory_order_relaxed);
    return 1;
}

void ratel__deny_cache_forget(ratel_deny_cache_t *cache, const char *key,
                              size_t keylen)
{
    const uint8_t *k = (const uint8_t *)key;
    uint64_t h, seq;
    stripe_t *stripe;
    set_t *set;

    if (!cache || (!key && keylen) || keylen > RATEL_DENY_CACHE_KEY_MAX)
        return;
    h = key_hash(cache->seed, k, keylen);
    set = set_of(cache, h, &stripe);
    seq = stripe_write_begin(stripe);
    for (int w = 0; w < DENY_CACHE_WAYS; w++) {
        if (set->end_us[w] == 0 || !way_has_key(set, w, h, k, keylen))
            continue;
        STORE(set->end_us[w], 0);
        STORE(set->hash[w], 0);
        stripe->live--;
    }
    stripe_write_end(stripe, seq);
}

void ratel__deny_cache_stats(ratel_deny_cache_t *cache,
                             ratel_deny_cache_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!cache)
        return;
    out->entries = cache->entries;
    for (uint64_t i = 0; i <= cache->stripe_mask; i++) {
        stripe_t *s = &cache->stripes[i];
        uint64_t seq = stripe_write_begin(s);
        out->live += s->live;
        out->inserts += s->inserts;
        out->replaced += s->replaced;
        stripe_write_end(s, seq);
    }
    for (size_t i = 0; i < DENY_CACHE_HIT_COUNTERS; i++)
        out->hits +=
            atomic_load_explicit(&cache->hits[i].n, memory_order_relaxed);
}
