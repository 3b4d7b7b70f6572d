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
    /* Answered here: the slice the permits came from (end_us 0: from two;
       they cannot be put back), for ratel__lease_put_back(). */
    int64_t taken_end_us, taken_until_ms;
} ratel__lease_todo_t;

/* 0, RATEL_ENOMEM. */
int ratel__lease_table_new(ratel__lease_table_t **out, size_t entries);
/* Frees a table ratel__lease_table_new() made; one in the caller's
   memory (ratel__lease_table_init) is left as it is, the caller's. */
void ratel__lease_table_free(ratel__lease_table_t *t);

/* Flags of ratel__lease_table_init(): SHARED, locks shared by processes
   (robust: a process that dies holding one does not stop the others);
   ZEROED, `mem` is zeroed already. */
#define RATEL__LEASE_SHARED 1u
#define RATEL__LEASE_ZEROED 2u

/* The bytes a table of at least `entries` keys takes. */
size_t ratel__lease_table_size(size_t entries);

/*
 * Makes a table in `size` bytes of the caller's memory at `mem` (aligned
 * for 8-byte integers; e.g. a shared-memory zone that several processes
 * map at the same address, with RATEL__LEASE_SHARED): as many keys as fit,
 * in sets of 8. The memory stays the caller's; the table refers to
 * nothing outside it but the ratel_lease_t of each key's requests. 0, or
 * RATEL_EINVAL when not one set fits (ratel__lease_table_size(8)).
 */
int ratel__lease_table_init(ratel__lease_table_t **out, void *mem, size_t size,
                            unsigned flags);

/* The table's holder: the HOLDER its fetches name in RATEL.SLICE (random,
   1..RATEL_HOLDER_MAX), one per table, however many processes fetch. */
uint64_t ratel__lease_holder(const ratel__lease_table_t *t);

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

/*
 * Puts `cost` permits a take answered back into the slice they came from
 * (todo's taken_end_us and taken_until_ms), while it lives: a request of a
 * group that another member's denial refused charges nothing. Permits of
 * a slice that ended, or that came from two, are stranded instead.
 */
void ratel__lease_put_back(ratel__lease_table_t *t, const char *key,
                           size_t keylen, uint64_t fp, ratel_lease_t *lease,
                           uint64_t cost, int64_t end_us, int64_t until_ms,
                           int64_t now_us);

/* A fetch got no answer (the store is down): the key is not fetched again
   before retry_us, and its requests go to the store (its failure policy). */
void ratel__lease_unfetched(ratel__lease_table_t *t, const char *key,
                            size_t keylen, uint64_t fp, int64_t retry_us);

/* One slice still held, given to ratel__lease_drain()'s visitor. */
typedef void (*ratel__lease_visit_fn)(void *ud, const char *key, size_t keylen,
                                      const ratel_policy_t *policy,
                                      ratel_lease_t *lease, uint64_t unspent,
                                      int64_t until_ms);

/* Whether ratel__lease_drain() leaves a key's entry where it is (1), for
   a key under the policy of fingerprint fp. */
typedef int (*ratel__lease_keep_fn)(void *ud, const char *key, size_t keylen,
                                    uint64_t fp);

/* Empties the table, visiting every slice still holding permits (to give
   them back): when the store is freed. With `keep` (not NULL), the
   entries it keeps stay as they are. */
void ratel__lease_drain(ratel__lease_table_t *t, ratel__lease_keep_fn keep,
                        ratel__lease_visit_fn fn, void *ud);

/*
 * The key that keeps `key`'s holders' demand (RATEL.SLICE's second key):
 * key + "\lease" when that is in key's cluster slot, else "{key}\lease"
 * when that is, else key itself (no fair share). Returns its length, 0
 * when buf (len bytes) is too small.
 */
size_t ratel__lease_demand_key(const char *key, size_t keylen, char *buf,
                               size_t len);

/*
 * A Redis store's leased keys in `t` (made by ratel__lease_table_init, in
 * memory that outlives the store) instead of its own table, so that the
 * processes that share `t` spend the same slices and fetch as one holder:
 * the nginx module's zone, whose workers each have a store. Call it before
 * the store's first request. Freeing the store then gives nothing back:
 * ratel__redis_store_give_back() does, for the keys the caller says.
 * 0, or RATEL_EINVAL when `store` is not a Redis store.
 */
int ratel__redis_store_set_leases(ratel_store_t *store,
                                  ratel__lease_table_t *t);

/*
 * Gives back the slices of the store's table that `keep` (NULL: none)
 * does not keep (RATEL.UNSLICE on the store's own connection), and waits
 * for Redis's answers or their deadlines: a process about to exit.
 */
void ratel__redis_store_give_back(ratel_store_t *store,
                                  ratel__lease_keep_fn keep, void *ud);

/* The atomic counters of a ratel_lease_t. */
static inline void ratel__lease_count(uint64_t *counter, uint64_t n)
{
    if (n)
        __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

#endif /* RATEL_STORE_LEASE_H */
