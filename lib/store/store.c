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

int ratel__store_check(const ratel_store_t *store, const char *key,
                       const ratel_policy_t *policy, int64_t now_us)
{
    return !store || !key || bad_policy(policy) || bad_time(now_us)
               ? RATEL_EINVAL
               : 0;
}

int ratel__store_check_release(const ratel_store_t *store, const char *key,
                               const ratel_policy_t *policy, int64_t now_us,
                               uint32_t lease, unsigned flags)
{
    return ratel__store_check(store, key, policy, now_us) != 0 ||
                   !store->ops->release || lease == 0 ||
                   (flags & ~RATEL_RENEW) || !ratel_policy_has_leases(policy)
               ? RATEL_EINVAL
               : 0;
}

int ratel_store_acquire(ratel_store_t *store, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        const ratel_request_t *request,
                        ratel_decision_t *decision)
{
    if (ratel__store_check(store, key, policy, now_us) != 0 || !request ||
        !decision)
        return RATEL_EINVAL;
    return store->ops->acquire(store, key, keylen, policy, now_us, request,
                               decision);
}

int ratel_store_refund(ratel_store_t *store, const char *key, size_t keylen,
                       const ratel_policy_t *policy, int64_t now_us,
                       uint64_t cost, ratel_decision_t *decision)
{
    if (ratel__store_check(store, key, policy, now_us) != 0 || !decision)
        return RATEL_EINVAL;
    return store->ops->refund(store, key, keylen, policy, now_us, cost,
                              decision);
}

int ratel_store_release(ratel_store_t *store, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        uint32_t lease, unsigned flags, int *held,
                        ratel_decision_t *decision)
{
    if (held)
        *held = 0;
    if (ratel__store_check_release(store, key, policy, now_us, lease, flags) !=
            0 ||
        !decision || !held)
        return RATEL_EINVAL;
    return store->ops->release(store, key, keylen, policy, now_us, lease, flags,
                               held, decision);
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

size_t ratel__group_len(const ratel_batch_item_t *items, size_t n, size_t i)
{
    size_t k = 1;

    if (items[i].group == 0)
        return 1;
    while (i + k < n && items[i + k].group == items[i].group)
        k++;
    return k;
}

/*
 * Marks RATEL_EINVAL the items of groups that are too long or hold a bad
 * member: nothing of such a group is decided.
 */
static void check_groups(ratel_batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = ratel__group_len(items, n, i), bad = k > RATEL_GROUP_MAX;
        for (size_t j = i; j < i + k; j++)
            bad |= items[j].rc != 0;
        for (size_t j = i; j < i + k && bad && k > 1; j++)
            items[j].rc = RATEL_EINVAL;
        i += k;
    }
}

/* A group a member of which was denied or failed: give back what the
   others were charged (the backend decided them one by one). */
static void refund_denied_groups(ratel_store_t *store,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us)
{
    for (size_t i = 0; i < n;) {
        size_t k = ratel__group_len(items, n, i);
        int denied = 0;
        for (size_t j = i; j < i + k && k > 1; j++)
            denied |= items[j].rc != 0 || !items[j].decision.allowed;
        for (size_t j = i; j < i + k && denied; j++) {
            ratel_batch_item_t *it = &items[j];
            ratel_decision_t back;
            if (it->rc == 0 && it->decision.allowed &&
                !(it->request.flags & RATEL_PEEK))
                store->ops->refund(store, it->key, it->keylen, it->policy,
                                   now_us, it->request.cost, &back);
        }
        i += k;
    }
}

size_t ratel__store_check_batch(ratel_batch_item_t *items, size_t n,
                                int *grouped)
{
    size_t todo = 0;

    *grouped = 0;
    /* A bad item is answered on its own; the others still go. */
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        memset(&it->decision, 0, sizeof it->decision);
        it->rc = (!it->key || bad_policy(it->policy)) ? RATEL_EINVAL : 0;
        *grouped |= it->group != 0;
    }
    if (*grouped)
        check_groups(items, n);
    for (size_t i = 0; i < n; i++)
        todo += items[i].rc == 0;
    return todo;
}

int ratel_store_acquire_batch(ratel_store_t *store, ratel_batch_item_t *items,
                              size_t n, int64_t now_us)
{
    int grouped = 0;

    if (!store || (!items && n > 0) || bad_time(now_us))
        return RATEL_EINVAL;
    if (ratel__store_check_batch(items, n, &grouped) == 0)
        return 0;
    if (grouped && store->ops->acquire_group) {
        for (size_t i = 0; i < n;) {
            size_t k = ratel__group_len(items, n, i);
            if (k > 1 && items[i].rc == 0)
                store->ops->acquire_group(store, items + i, k, now_us);
            else if (items[i].rc == 0)
                items[i].rc = store->ops->acquire(
                    store, items[i].key, items[i].keylen, items[i].policy,
                    now_us, &items[i].request, &items[i].decision);
            i += k;
        }
        return 0;
    }
    if (store->ops->acquire_batch) {
        int rc = store->ops->acquire_batch(store, items, n, now_us);
        if (rc == 0 && grouped && !store->ops->batch_groups)
            refund_denied_groups(store, items, n, now_us);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (items[i].rc == 0)
            items[i].rc = store->ops->acquire(
                store, items[i].key, items[i].keylen, items[i].policy, now_us,
                &items[i].request, &items[i].decision);
    if (grouped)
        refund_denied_groups(store, items, n, now_us);
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
