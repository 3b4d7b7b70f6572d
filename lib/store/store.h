/*
 * store.h - the generic store: what every backend (memory, Redis) provides.
 *
 * A store keeps one state blob per key and runs the pure core on it. The
 * public ratel_store_* functions in ratel.h check their arguments once, in
 * store.c, and then call the backend through a small table of operations, so
 * a backend may assume every pointer it receives is valid:
 *
 *   store, key, policy, decision, request   never NULL
 *   policy->nrules                          1..RATEL_MAX_RULES
 *   now_us                                  in [0, RATEL_TIME_MAX_US)
 *   out (inspect)                           NULL only when max is 0
 *   n (inspect), out (stats)                never NULL
 *
 * A backend embeds `ratel_store_t` as the first member of its own struct and
 * points `ops` at a static table; ratel_store_free() hands the whole object
 * back to the backend's `free`.
 */
#ifndef RATEL_STORE_H
#define RATEL_STORE_H

#include "ratel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ratel_store_ops_s {
    /* Backend name for messages and metrics, e.g. "memory". */
    const char *name;
    /* As ratel_store_acquire(); arguments already checked. */
    int (*acquire)(ratel_store_t *store, const char *key, size_t keylen,
                   const ratel_policy_t *policy, int64_t now_us,
                   const ratel_request_t *request, ratel_decision_t *decision);
    /* As ratel_store_refund(); arguments already checked. */
    int (*refund)(ratel_store_t *store, const char *key, size_t keylen,
                  const ratel_policy_t *policy, int64_t now_us, uint64_t cost,
                  ratel_decision_t *decision);
    /* As ratel_store_release(); arguments already checked (a lease of 1..,
       known flags, a policy with a concurrent rule) and *held set to 0;
       NULL: the backend keeps no leases (RATEL_EINVAL). */
    int (*release)(ratel_store_t *store, const char *key, size_t keylen,
                   const ratel_policy_t *policy, int64_t now_us, uint32_t lease,
                   unsigned flags, int *held, ratel_decision_t *decision);
    /* As ratel_store_reset(). */
    int (*reset)(ratel_store_t *store, const char *key, size_t keylen);
    /* As ratel_store_inspect(). */
    int (*inspect)(ratel_store_t *store, const char *key, size_t keylen,
                   int64_t now_us, ratel_rule_status_t *out, size_t max,
                   size_t *n);
    /* As ratel_store_acquire_batch(), items checked; NULL: one by one.
       Groups are then given back by store.c where a member was denied. */
    int (*acquire_batch)(ratel_store_t *store, ratel_batch_item_t *items,
                         size_t n, int64_t now_us);
    /* 1: acquire_batch gives back the groups with a denied member itself
       (store.c does not). */
    int batch_groups;
    /* Decides the n (2..RATEL_GROUP_MAX) items of one group atomically,
       charging none unless all are admitted; NULL: the batch path and
       refunds. */
    void (*acquire_group)(ratel_store_t *store, ratel_batch_item_t *items,
                          size_t n, int64_t now_us);
    /* As ratel_store_errstr(); NULL: never fails that way. */
    void (*errstr)(ratel_store_t *store, char *buf, size_t len);
    /* As ratel_store_ping(); NULL: always reachable. */
    int (*ping)(ratel_store_t *store, char *errbuf, size_t errlen);
    /* As ratel_store_health(), `out` zeroed; NULL: always up. */
    void (*health)(ratel_store_t *store, ratel_store_health_t *out);
    /* As ratel_store_watch_health(); NULL: health never changes. */
    void (*watch_health)(ratel_store_t *store, ratel_store_health_fn fn,
                         void *ud);
    /* Fills the fields of `out` it knows (the rest are zero). */
    void (*stats)(ratel_store_t *store, ratel_store_stats_t *out);
    /* Frees the store and everything it holds; `store` is not NULL. */
    void (*free)(ratel_store_t *store);
} ratel_store_ops_t;

/* The public calls' argument checks, shared with async.c: 0 or
   RATEL_EINVAL. */
int ratel__store_check(const ratel_store_t *store, const char *key,
                       const ratel_policy_t *policy, int64_t now_us);
int ratel__store_check_release(const ratel_store_t *store, const char *key,
                               const ratel_policy_t *policy, int64_t now_us,
                               uint32_t lease, unsigned flags);
/* Checks each item (rc RATEL_EINVAL for a bad one, and for every member of
   a bad group), clears decisions; returns how many items are left to
   decide, *grouped set when a group is there. */
size_t ratel__store_check_batch(ratel_batch_item_t *items, size_t n,
                                int *grouped);

/* The length of the batch's group starting at items[i] (1 for group
   0: an item on its own). */
size_t ratel__group_len(const ratel_batch_item_t *items, size_t n, size_t i);

/* The head of every backend's store object. */
struct ratel_store_s {
    const ratel_store_ops_t *ops;
};

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_H */
