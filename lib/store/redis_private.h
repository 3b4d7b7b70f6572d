/*
 * redis_private.h - the Redis store's parts:
 *
 *   redis_new.c     the store's creation: options, URL, TLS context
 *   redis.c         the store object, the synchronous calls
 *                   (each an asynchronous call on the store's own engine,
 *                   driven by the poll transport until it is done), ping,
 *                   health, stats, `ratel lua-load`
 *   redis_decide.c  what a call makes of Redis's answers, on any engine:
 *                   decisions, the failure policy, the deny cache, groups
 *   async.c         the asynchronous API on any transport's loop (ratel.h,
 *                   async.h)
 */
#ifndef RATEL_STORE_REDIS_PRIVATE_H
#define RATEL_STORE_REDIS_PRIVATE_H

#include "store/deny_cache.h"
#include "store/engine.h"
#include "store/health.h"
#include "store/lease.h"
#include "store/store.h"
#include "store/transport_poll.h"

#include <openssl/ssl.h>

typedef struct redis_store_s {
    ratel_store_t base;
    ratel__redis_shared_t sh;
    ratel_failure_t on_failure;
    int client_time;
    ratel_deny_cache_t *cache;
    ratel__lease_table_t *leases; /* the slices of leased keys (lease.h) */
    _Atomic size_t lease_calls;   /* slice calls in flight (redis_lease.c) */
    int leases_external; /* the caller's (ratel__redis_store_set_leases):
                            not given back when the store is freed */
    uint64_t holder;     /* this store's HOLDER in RATEL.SLICE: random */
    ratel_store_t *local;
    pthread_mutex_t err_lock;
    char errstr[300];
    ratel_health_t health;
    int check_down; /* the store's own check, as a health source */
    _Atomic int64_t last_now_us;
    _Atomic uint64_t cache_hits, errors, fallback_open, fallback_closed,
        fallback_local;
    /* Copies of the caller's TLS and Sentinel strings (sh points here). */
    char tls_server_name[256];
    char sentinel_username[256];
    char sentinel_password[512];
    /* The synchronous calls' engine, on the poll transport. */
    ratel__poll_t *poll;
    ratel__engine_t *engine;
} redis_store_t;

typedef void (*redis_cb)(void *ud);

/* One REFUND, RELEASE, RESET or GET (inspect) and where its answer goes. */
typedef struct redis_call_s {
    redis_store_t *s;
    ratel__rop_t rop; /* kind, key, keylen, policy, request.cost, lease,
                         lease_flags, now_us set by the caller */
    ratel_decision_t *decision; /* REFUND, RELEASE */
    int *held;                  /* RELEASE */
    ratel_rule_status_t *out;   /* GET */
    size_t max, *n;             /* GET */
    int rc;                     /* out */
    redis_cb fn;
    void *ud;
} redis_call_t;

/* What a batch keeps of each item besides its rop. */
typedef struct redis_item_s {
    uint64_t fp;            /* the policy's fingerprint (cache, leases) */
    int64_t lease_end_us;   /* answered from a slice: the slice (to put */
    int64_t lease_until_ms; /* the permits back if its group is refused) */
} redis_item_t;

/* A batch of acquires and where it stands. */
typedef struct redis_batch_s {
    redis_store_t *s;
    ratel__engine_t *e;
    ratel_batch_item_t *items;
    size_t n;
    int64_t now_us;
    ratel__rop_t *rops;
    redis_item_t *more;
    ratel__rop_t one_rop; /* a batch of one needs no allocation */
    redis_item_t one_more;
    size_t pending;
    int giving_back;
    redis_cb fn;
    void *ud;
} redis_batch_t;

/*
 * Starts a call on engine `e`. Returns 1 when it was answered at once
 * (call->rc set, `fn` not called), 0 when `fn` follows from the loop.
 */
int ratel__redis_call_start(ratel__engine_t *e, redis_call_t *call);

/*
 * Starts a batch (its s, e, items, n, now_us, fn, ud set; items checked
 * by store.c). Returns 1 when every item was answered at once, 0 when
 * `fn` follows, RATEL_ENOMEM. Groups are all-or-nothing: a group with a
 * member denied or failed gets the others' charges given back before `fn`.
 * ratel__redis_batch_end() frees what it held.
 */
int ratel__redis_batch_start(redis_batch_t *b);
void ratel__redis_batch_end(redis_batch_t *b);

/*
 * A leased request (`request.lease` set): answered from its key's slice,
 * 1 (its decision set), or left to the batch, 0. Either way it may send
 * the table's fetch or give-back on `e` (redis_lease.c).
 */
int ratel__redis_lease_take(redis_store_t *s, ratel__engine_t *e,
                            ratel_batch_item_t *it, redis_item_t *more,
                            int64_t now_us);
/* A member of a refused group answered from a slice: its permits back. */
void ratel__redis_lease_put_back(redis_store_t *s, const ratel_batch_item_t *it,
                                 const redis_item_t *more, int64_t now_us);
/* Gives every slice held back and waits for the answers (the poll lock
   held): when the store is freed. */
void ratel__redis_lease_close(redis_store_t *s);

/* The Functions library and the EVAL script (build/gen/lua_script.c). */
extern const char ratel__lua_library[];
extern const size_t ratel__lua_library_len;
extern const char ratel__lua_library_version[];
extern const char ratel__lua_script[];
extern const size_t ratel__lua_script_len;

extern const ratel_store_ops_t ratel__redis_ops;
/* Frees a store (redis.c), also one that was not fully made. */
void ratel__redis_free(ratel_store_t *store);
/* The store's engine for the synchronous calls, on its poll transport
   (redis_new.c); 0 or RATEL_ENOMEM. */
int ratel__redis_sync_engine(redis_store_t *s);

/* Records the store's latest failure (ratel_store_errstr()). */
void ratel__redis_set_error(redis_store_t *s, const char *message);

#endif /* RATEL_STORE_REDIS_PRIVATE_H */
