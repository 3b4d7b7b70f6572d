/*
 * store.c - the public ratel_store_* functions: argument checks, then a call
 * through the backend's table of operations (store.h).
 *
 * Checking here, once, keeps every backend free of NULL tests and makes the
 * answer to a bad argument the same whichever backend is behind the store:
 * RATEL_EINVAL, never a crash. Keys are any bytes; the empty key (keylen 0)
 * is a valid key like any other, but `key` itself must not be NULL. As in
 * the core, `request` and `decision` must not be NULL either, a policy has
 * 1..RATEL_MAX_RULES rules and `now_us` lies in [0, RATEL_TIME_MAX_US).
 * Checking those here, before a backend looks the key up, means a bad
 * request never changes what the store holds (a time far in the future
 * would otherwise find every key expired).
 */
#include "store/store.h"

#include <string.h>

static int bad_time(int64_t now_us)
{
    return now_us < 0 || now_us >= RATEL_TIME_MAX_US;
}

static int bad_policy(const ratel_policy_t *policy)
{
    return !policy || policy->nrules < 1 || policy->nrules > RATEL_MAX_RULES;
}

int ratel_store_acquire(ratel_store_t *store, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        const ratel_request_t *request,
                        ratel_decision_t *decision)
{
    if (!store || !key || bad_policy(policy) || !request || !decision ||
        bad_time(now_us))
        return RATEL_EINVAL;
    return store->ops->acquire(store, key, keylen, policy, now_us, request,
                               decision);
}

int ratel_store_refund(ratel_store_t *store, const char *key, size_t keylen,
                       const ratel_policy_t *policy, int64_t now_us,
                       uint64_t cost, ratel_decision_t *decision)
{
    if (!store || !key || bad_policy(policy) || !decision || bad_time(now_us))
        return RATEL_EINVAL;
    return store->ops->refund(store, key, keylen, policy, now_us, cost,
                              decision);
}

int ratel_store_reset(ratel_store_t *store, const char *key, size_t keylen)
{
    if (!store || !key)
        return RATEL_EINVAL;
    return store->ops->reset(store, key, keylen);
}

int ratel_store_inspect(ratel_store_t *store, const char *key, size_t keylen,
                        int64_t now_us, ratel_rule_status_t *out, size_t max,
                        size_t *n)
{
    if (n)
        *n = 0;
    if (!store || !key || !n || (!out && max > 0) || bad_time(now_us))
        return RATEL_EINVAL;
    return store->ops->inspect(store, key, keylen, now_us, out, max, n);
}

/*
 * Fills `out` with the store's counters; a NULL store reads as all zeros so
 * a metrics endpoint can call this before the store exists.
 */
void ratel_store_stats(ratel_store_t *store, ratel_store_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (store)
        store->ops->stats(store, out);
}

int ratel_store_acquire_batch(ratel_store_t *store, ratel_batch_item_t *items,
                              size_t n, int64_t now_us)
{
    size_t todo = 0;

    if (!store || (!items && n > 0) || bad_time(now_us))
        return RATEL_EINVAL;
    /* A bad item is answered on its own; the others still go. */
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        memset(&it->decision, 0, sizeof it->decision);
        it->rc = (!it->key || bad_policy(it->policy)) ? RATEL_EINVAL : 0;
        todo += it->rc == 0;
    }
    if (todo == 0)
        return 0;
    if (store->ops->acquire_batch)
        return store->ops->acquire_batch(store, items, n, now_us);
    for (size_t i = 0; i < n; i++)
        if (items[i].rc == 0)
            items[i].rc = store->ops->acquire(
                store, items[i].key, items[i].keylen, items[i].policy, now_us,
                &items[i].request, &items[i].decision);
    return 0;
}

void ratel_store_errstr(ratel_store_t *store, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    buf[0] = '\0';
    if (store && store->ops->errstr)
        store->ops->errstr(store, buf, len);
}

int ratel_store_ping(ratel_store_t *store, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!store)
        return RATEL_EINVAL;
    return store->ops->ping ? store->ops->ping(store, errbuf, errlen) : 0;
}

/* A store without a `health` operation (memory) is always up. */
int ratel_store_health(ratel_store_t *store, ratel_store_health_t *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!store || !out)
        return RATEL_EINVAL;
    if (store->ops->health)
        store->ops->health(store, out);
    else
        out->up = 1;
    return 0;
}

int ratel_store_watch_health(ratel_store_t *store, ratel_store_health_fn fn,
                             void *ud)
{
    if (!store)
        return RATEL_EINVAL;
    if (store->ops->watch_health)
        store->ops->watch_health(store, fn, ud);
    return 0;
}

void ratel_store_free(ratel_store_t *store)
{
    if (store)
        store->ops->free(store);
}
