/*
 * deny_cache.h - the Redis store's local cache of denials.
 *
 * When Redis denies a key until T (now + retry_after_ms), nothing but a
 * refund or a reset can make that key succeed earlier, so this process can
 * answer the key's next requests itself until T without a round trip: a hot
 * abuser costs no Redis traffic. Refund and reset in this process forget the
 * key (ratel__deny_cache_forget); another process's refund is not seen,
 * which is why an entry lives at most `max_ms`.
 *
 * A denial for cost c with max wait w also answers requests of cost >= c and
 * max wait <= w (a cheaper request or a longer wait may succeed: those go to
 * Redis). Entries are per (key, policy): the same key under another policy
 * is another entry.
 *
 * Fixed size, allocated once: `entries` slots (rounded up to a power of two,
 * in sets of 4 ways chosen by the key's hash; a full set replaces the entry
 * that expires first). Keys longer than RATEL_DENY_CACHE_KEY_MAX are not
 * cached. Thread-safe: writers take a short lock per group of sets;
 * lookups take none (a sequence number per group tells a lookup that raced
 * a writer to read again), so hits on many threads write no shared memory.
 * An entry is 288 bytes (the key inline); no allocation after new.
 * Time is the caller's `now_us`, as everywhere in libratel.
 */
#ifndef RATEL_DENY_CACHE_H
#define RATEL_DENY_CACHE_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#define RATEL_DENY_CACHE_KEY_MAX 200

typedef struct ratel_deny_cache_s ratel_deny_cache_t;

typedef struct ratel_deny_cache_stats_s {
    uint64_t entries;  /* capacity in slots */
    uint64_t live;     /* slots holding an entry (expired or not) */
    uint64_t hits;     /* lookups answered */
    uint64_t inserts;  /* denials recorded */
    uint64_t replaced; /* live entries pushed out by a full set */
} ratel_deny_cache_stats_t;

/*
 * Creates a cache of `entries` slots (1..1,048,576, the deny_cache option's
 * range in option.c; rounded up to a power of two, at least 4) answering a
 * denial for at most `max_ms` (>= 1). Returns 0, RATEL_EINVAL or RATEL_ENOMEM.
 */
int ratel__deny_cache_new(ratel_deny_cache_t **out, size_t entries,
                          int64_t max_ms);

/* Frees the cache; NULL is a no-op. */
void ratel__deny_cache_free(ratel_deny_cache_t *cache);

/*
 * A 64-bit fingerprint of a policy's rules (algorithm, limit, period, burst
 * of each, in order): equal policies give equal fingerprints.
 */
uint64_t ratel__policy_fingerprint(const ratel_policy_t *policy);

/*
 * Records that `decision` (denied: decision->allowed == 0 and
 * retry_after_ms > 0; anything else is ignored) was made for `key` under
 * the policy `fingerprint` for `request` at `now_us`. The entry answers
 * until min(now_us + retry_after_ms * 1000, now_us + max_ms * 1000).
 */
void ratel__deny_cache_put(ratel_deny_cache_t *cache, const char *key,
                           size_t keylen, uint64_t fingerprint,
                           const ratel_request_t *request,
                           const ratel_decision_t *decision, int64_t now_us);

/*
 * Answers `request` for `key` under `fingerprint` at `now_us` from the
 * cache: returns 1 and fills *decision (the recorded denial with
 * retry_after_ms and reset_after_ms counted down to now_us, rounded up,
 * never below 1 for retry_after_ms; source RATEL_SOURCE_CACHE) when an
 * entry is live (now_us < its end), request->cost >= its cost and
 * request->max_wait_ms <= its max wait. Otherwise 0 and *decision is
 * untouched. A RATEL_PEEK request may be answered too.
 */
int ratel__deny_cache_get(ratel_deny_cache_t *cache, const char *key,
                          size_t keylen, uint64_t fingerprint,
                          const ratel_request_t *request, int64_t now_us,
                          ratel_decision_t *decision);

/* Forgets every entry of `key` (all policies): after a refund or reset. */
void ratel__deny_cache_forget(ratel_deny_cache_t *cache, const char *key,
                              size_t keylen);

void ratel__deny_cache_stats(ratel_deny_cache_t *cache,
                             ratel_deny_cache_stats_t *out);

#endif /* RATEL_DENY_CACHE_H */
