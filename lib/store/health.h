/*
 * health.h - a store's health (ratel_store_health() in ratel.h): up or
 * down, since when, why, and who to tell when it changes.
 *
 * Sources. The store is down while at least one of its sources is. A
 * source is anything that can fail on its own: for the Redis store, each
 * node (its breaker and its pings) and the store's own check (a cluster map
 * nobody answered, a PING answered with an error). Each source keeps one
 * flag, `int down`, that only ratel__health_set() touches, under the
 * health's lock; so the count of sources down, and with it the state, can
 * never disagree with the flags, whatever order threads report in.
 *
 * Telling. ratel__health_set() runs where the failure is seen, often under
 * other locks (a node's), so it never calls out: it returns 1 when the
 * state changed, and the caller calls ratel__health_notify() once it holds
 * no lock. The callback then reads the state; it is told "something
 * changed", never "this changed", which is why a late call is harmless.
 *
 * The health's lock is a leaf: nothing else is locked while it is held.
 * Time is the caller's `now_us` (the wall clock for the Redis store: it
 * dates what a person reads); nothing here reads a clock.
 */
#ifndef RATEL_STORE_HEALTH_H
#define RATEL_STORE_HEALTH_H

#include "ratel.h"

#include <pthread.h>

typedef struct ratel_health_s {
    pthread_mutex_t lock;
    unsigned down;             /* sources down now */
    unsigned warning;          /* sources warning now */
    ratel_store_health_t view; /* what ratel_store_health() copies */
    ratel_store_health_fn fn;  /* told of changes; NULL: nobody */
    void *ud;
} ratel_health_t;

/* Starts up, with no source down and no history. */
void ratel__health_init(ratel_health_t *h);
void ratel__health_destroy(ratel_health_t *h);

/*
 * Records that the source whose flag is `*flag` is down (down = 1, with
 * `cause`, copied) or up (down = 0) at `now_us`. A source already in that
 * state changes nothing, but a down source's newer cause replaces the
 * older one while the store is down (a reader sees the latest reason).
 * Returns 1 when the store's state changed: the caller then calls
 * ratel__health_notify() after letting go of its own locks.
 */
int ratel__health_set(ratel_health_t *h, int *flag, int down, const char *cause,
                      int64_t now_us);

/*
 * Records that the source whose warning flag is `*flag` fails without
 * stopping decisions (on = 1, with `text`, copied: a Sentinel that does
 * not answer) or no longer does (on = 0). Returns 1 when a warning began
 * or the last one ended: then ratel__health_notify(), as above.
 */
int ratel__health_warn(ratel_health_t *h, int *flag, int on, const char *text);

/* Copies the current state into *out. */
void ratel__health_get(ratel_health_t *h, ratel_store_health_t *out);

/* Sets who is told of changes (fn NULL: nobody). */
void ratel__health_watch(ratel_health_t *h, ratel_store_health_fn fn, void *ud);

/* Calls the registered function, if any, outside the lock. */
void ratel__health_notify(ratel_health_t *h);

#endif /* RATEL_STORE_HEALTH_H */
