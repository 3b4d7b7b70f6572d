/*
 * lease.h - the slices of hot keys a host holds (docs/leases.md): per
 * (key, policy) a local balance spent without a round trip, the next slice
 * asked for ahead of need, unspent permits given back when a slice ends.
 *
 * The table does no I/O: ratel__lease_take() answers a request from the
 * balance or says it cannot, and says what the caller should send (a
 * RATEL.SLICE to fetch, RATEL.UNSLICE to give back); the caller reports
 * the answers with ratel__lease_fill() / ratel__lease_unfetched(). Time is
 * the caller's `now_us` (a host's own clock; the store's clock never
 * reaches here: a slice's end is the send time plus the lifetime the store
 * answered, less the margin).
 *
 * Bounded: `entries` keys (sets of 8 ways; a key that finds its set full
 * of keys still holding permits is decided by the store, exactly). Keys
 * longer than RATEL__LEASE_KEY_MAX are not leased. Thread-safe (a lock per
 * group of sets).
 */
#ifndef RATEL_STORE_LEASE_H
#define RATEL_STORE_LEASE_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#define RATEL__LEASE_KEY_MAX 240

typedef struct ratel__lease_table_s ratel__lease_table_t;

/* What a take asks its caller to send, besides its answer. */
typedef struct ratel__lease_todo_s {
    uint64_t fetch;   /* > 0: RATEL.SLICE for this many permits now, then
                         ratel__lease_fill() or ratel__lease_unfetched() */
    uint64_t unspent; /* > 0: RATEL.UNSLICE these ... */
    int64_t until_ms; /* ... of the slice the store said ends then */
    int64_t ttl_ms;   /* the fetch's TTL */
} ratel__lease_todo_t;

/* 0, RATEL_ENOMEM. */
int ratel__lease_table_new(ratel__lease_table_t **out, size_t entries);
void ratel__lease_table_free(ratel__lease_table_t *t);

/*
 * Answers a request of `cost` for `key` under `policy` (fingerprint `fp`)
 * from the slices held, when it can: 1 with *d set (admitted), 0 when the
 * store must decide. *todo says what to send in either case.
 */
int ratel__lease_take(ratel__lease_table_t *t, const char *key, size_t keylen,
                      const ratel_policy_t *policy, uint64_t fp,
                      ratel_lease_t *lease, int64_t now_us, uint64_t cost,
                      ratel_decision_t *d, ratel__lease_todo_t *todo);

/*
 * A fetch sent at sent_us was answered at now_us: `granted` permits for
 * `lifetime_ms`, ending on the store's clock at until_ms; `reply` the
 * store's decision (limit, remaining, retry and reset times). Returns the
 * permits the table could not keep (to give back with until_ms): a slice
 * that arrived already ended, or a key no longer held.
 */
uint64_t ratel__lease_fill(ratel__lease_table_t *t, const char *key,
                           size_t keylen, uint64_t fp, ratel_lease_t *lease,
                           int64_t sent_us, int64_t now_us, uint64_t granted,
                           int64_t lifetime_ms, int64_t until_ms,
                           const ratel_decision_t *reply);

/* A fetch got no answer (the store is down): the key is not fetched again
   before retry_us, and its requests go to the store (its failure policy). */
void ratel__lease_unfetched(ratel__lease_table_t *t, const char *key,
                            size_t keylen, uint64_t fp, int64_t retry_us);

/* One slice still held, given to ratel__lease_drain()'s visitor. */
typedef void (*ratel__lease_visit_fn)(void *ud, const char *key, size_t keylen,
                                      const ratel_policy_t *policy,
                                      ratel_lease_t *lease, uint64_t unspent,
                                      int64_t until_ms);

/* Empties the table, visiting every slice still holding permits (to give
   them back): when the store is freed. */
void ratel__lease_drain(ratel__lease_table_t *t, ratel__lease_visit_fn fn,
                        void *ud);

/*
 * The key that keeps `key`'s holders' demand (RATEL.SLICE's second key):
 * key + "\lease" when that is in key's cluster slot, else "{key}\lease"
 * when that is, else key itself (no fair share). Returns its length, 0
 * when buf (len bytes) is too small.
 */
size_t ratel__lease_demand_key(const char *key, size_t keylen, char *buf,
                               size_t len);

/* The atomic counters of a ratel_lease_t. */
static inline void ratel__lease_count(uint64_t *counter, uint64_t n)
{
    if (n)
        __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

#endif /* RATEL_STORE_LEASE_H */
