/*
 * redis_lease.c - the Redis store's leased keys (lease.h, docs/leases.md):
 * a leased request is answered from the slice its key holds when it can;
 * the table says when to fetch the next slice (RATEL.SLICE, or the
 * library's ratel_slice) and when to give unspent permits back
 * (RATEL.UNSLICE). Those calls leave with the batch that asked for them,
 * on its engine, but no answer waits for them: each is a call of its own,
 * told to the table when Redis answers (or its deadline passes).
 *
 * Time: a fetch is stamped with the caller's now_us of the batch that sent
 * it (the clock read before the call); its answer is placed at the
 * store's latest now_us, the same clock, so the round trip is measured
 * without reading one here.
 */
#include "store/lease.h"
#include "store/redis_private.h"

#include <stdlib.h>
#include <string.h>

/* The give-backs of a closing store, waited for; the keys its caller
   keeps (ratel__redis_store_give_back). */
typedef struct closing_s {
    redis_store_t *s;
    size_t pending;
    int done;
    ratel__lease_keep_fn keep;
    void *keep_ud;
} closing_t;

/* A slice asked for or given back, alive until Redis answered. */
typedef struct lease_call_s {
    redis_store_t *s;
    ratel__engine_t *e;
    ratel__rop_t rop;
    ratel_policy_t policy;
    ratel_lease_t *lease;
    uint64_t fp;
    int64_t sent_us;
    closing_t *closing; /* a give-back at close: counted when answered */
    char key[RATEL__LEASE_KEY_MAX];
    char demand[RATEL__LEASE_KEY_MAX + 8];
} lease_call_t;

/* The integers of a reply of n, into v; 0 or RATEL_EPROTO. */
static int integers(const redisReply *r, size_t n, long long *v)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return RATEL_EPROTO;
    for (size_t i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return RATEL_EPROTO;
        v[i] = r->element[i]->integer;
    }
    return 0;
}

/* The decision of a SLICE's reply (after granted, expires_at, lifetime). */
static void slice_decision(const long long *v, ratel_decision_t *d)
{
    memset(d, 0, sizeof *d);
    d->allowed = v[0] > 0;
    d->limit = v[3];
    d->remaining = v[4];
    d->retry_after_ms = v[5];
    d->reset_after_ms = d->rule_reset_ms = v[6];
    d->rule = v[7] >= 0 && v[7] < RATEL_MAX_RULES ? (int)v[7] : 0;
    d->source = RATEL_SOURCE_STORE;
}

static int64_t latest(redis_store_t *s, int64_t floor_us)
{
    int64_t now = atomic_load_explicit(&s->last_now_us, memory_order_relaxed);

    return now < floor_us ? floor_us : now;
}

static void answered(ratel__rop_t *rop);

/* A call for `key` under `policy`, its rop's common fields set. */
static lease_call_t *call_new(redis_store_t *s, ratel__engine_t *e,
                              ratel__rop_kind_t kind, const char *key,
                              size_t keylen, const ratel_policy_t *policy,
                              ratel_lease_t *lease, int64_t now_us)
{
    lease_call_t *call;

    if (keylen > RATEL__LEASE_KEY_MAX || !(call = calloc(1, sizeof *call)))
        return NULL;
    call->s = s;
    call->e = e;
    call->policy = *policy;
    call->lease = lease;
    call->sent_us = now_us;
    memcpy(call->key, key, keylen);
    call->rop.kind = kind;
    call->rop.key = call->key;
    call->rop.keylen = keylen;
    call->rop.policy = &call->policy;
    call->rop.at_ms = s->client_time ? now_us / 1000 : -1;
    call->rop.now_us = now_us;
    call->rop.done = answered;
    call->rop.ud = call;
    return call;
}

/* Gives `unspent` permits of the slice ending at until_ms back. */
static void give_back(redis_store_t *s, ratel__engine_t *e, const char *key,
                      size_t keylen, const ratel_policy_t *policy,
                      ratel_lease_t *lease, uint64_t unspent, int64_t until_ms,
                      int64_t now_us, closing_t *closing)
{
    lease_call_t *call =
        call_new(s, e, RATEL__ROP_UNSLICE, key, keylen, policy, lease, now_us);

    if (!call) {
        ratel__lease_count(&lease->stranded, unspent);
        return;
    }
    call->rop.want = unspent;
    call->rop.until_ms = until_ms;
    call->closing = closing;
    if (closing)
        closing->pending++;
    atomic_fetch_add_explicit(&s->lease_calls, 1, memory_order_relaxed);
    ratel__engine_submit(e, &call->rop);
}

/* A SLICE's answer: the slice for the table, or why there is none. */
static void fetched(lease_call_t *call)
{
    redis_store_t *s = call->s;
    ratel__rop_t *rop = &call->rop;
    int64_t now = latest(s, call->sent_us);
    long long v[8];
    ratel_decision_t d;
    uint64_t left;

    if (rop->rc != 0 || integers(rop->reply, 8, v) != 0 || v[0] < 0 ||
        v[2] < 0) {
        /* Down, or an answer the next decision will meet as an error: the
           key's requests go to the store (its failure policy) a while. */
        ratel__lease_unfetched(s->leases, call->key, rop->keylen, call->fp,
                               now + s->sh.breaker_us);
        return;
    }
    slice_decision(v, &d);
    left = ratel__lease_fill(s->leases, call->key, rop->keylen, call->fp,
                             call->lease, call->sent_us, now, (uint64_t)v[0],
                             v[2], v[1], &d);
    if (left > 0)
        give_back(s, call->e, call->key, rop->keylen, &call->policy,
                  call->lease, left, v[1], now, NULL);
}

/* An UNSLICE's answer: what came back, and what is stranded. */
static void returned(lease_call_t *call)
{
    ratel__rop_t *rop = &call->rop;
    long long v[6];
    uint64_t back = 0;

    if (rop->rc == 0 && integers(rop->reply, 6, v) == 0 && v[0] > 0)
        back = (uint64_t)v[0] < rop->want ? (uint64_t)v[0] : rop->want;
    ratel__lease_count(&call->lease->returned, back);
    ratel__lease_count(&call->lease->stranded, rop->want - back);
    if (call->closing && --call->closing->pending == 0)
        call->closing->done = 1;
}

static void answered(ratel__rop_t *rop)
{
    lease_call_t *call = rop->ud;

    atomic_fetch_sub_explicit(&call->s->lease_calls, 1, memory_order_relaxed);
    if (rop->kind == RATEL__ROP_SLICE)
        fetched(call);
    else
        returned(call);
    if (rop->reply)
        freeReplyObject(rop->reply);
    free(call);
}

int ratel__redis_lease_take(redis_store_t *s, ratel__engine_t *e,
                            ratel_batch_item_t *it, redis_item_t *more,
                            int64_t now_us)
{
    uint64_t fp = more->fp;
    ratel__lease_todo_t todo;
    lease_call_t *call;
    int local;

    if (!s->leases || it->request.max_wait_ms > 0 ||
        (it->request.flags & RATEL_PEEK) || ratel_policy_has_leases(it->policy))
        return 0;
    local = ratel__lease_take(s->leases, it->key, it->keylen, it->policy, fp,
                              it->request.lease, now_us, it->request.cost,
                              &it->decision, &todo);
    more->lease_end_us = todo.taken_end_us;
    more->lease_until_ms = todo.taken_until_ms;
    if (todo.unspent > 0)
        give_back(s, e, it->key, it->keylen, it->policy, it->request.lease,
                  todo.unspent, todo.until_ms, now_us, NULL);
    if (todo.fetch == 0)
        return local;
    call = call_new(s, e, RATEL__ROP_SLICE, it->key, it->keylen, it->policy,
                    it->request.lease, now_us);
    if (!call) {
        ratel__lease_unfetched(s->leases, it->key, it->keylen, fp, now_us);
        return local;
    }
    call->fp = fp;
    call->rop.want = todo.fetch;
    call->rop.ttl_ms = todo.ttl_ms;
    call->rop.holder = s->holder;
    call->rop.demand = call->demand;
    call->rop.demandlen = ratel__lease_demand_key(
        it->key, it->keylen, call->demand, sizeof call->demand);
    atomic_fetch_add_explicit(&s->lease_calls, 1, memory_order_relaxed);
    ratel__engine_submit(e, &call->rop);
    return local;
}

void ratel__redis_lease_put_back(redis_store_t *s, const ratel_batch_item_t *it,
                                 const redis_item_t *more, int64_t now_us)
{
    ratel__lease_put_back(s->leases, it->key, it->keylen, more->fp,
                          it->request.lease, it->request.cost,
                          more->lease_end_us, more->lease_until_ms, now_us);
}

/* ratel__lease_drain()'s visitor at close: each slice given back. */
static void close_one(void *ud, const char *key, size_t keylen,
                      const ratel_policy_t *policy, ratel_lease_t *lease,
                      uint64_t unspent, int64_t until_ms)
{
    closing_t *c = ud;

    give_back(c->s, c->s->engine, key, keylen, policy, lease, unspent, until_ms,
              latest(c->s, 0), c);
}

static int close_keeps(void *ud, const char *key, size_t keylen, uint64_t fp)
{
    closing_t *c = ud;

    return c->keep(c->keep_ud, key, keylen, fp);
}

/* Gives back the slices `keep` does not keep, and waits (the poll lock
   held). */
static void give_all_back(redis_store_t *s, ratel__lease_keep_fn keep, void *ud)
{
    closing_t c = {s, 0, 0, keep, ud};

    if (!s->leases || !s->engine)
        return;
    ratel__lease_drain(s->leases, keep ? close_keeps : NULL, close_one, &c);
    /* Each answer (or its deadline) counts one down. */
    if (c.pending > 0)
        ratel__poll_wait(s->poll, &c.done);
}

void ratel__redis_lease_close(redis_store_t *s)
{
    if (!s->leases_external)
        give_all_back(s, NULL, NULL);
}

int ratel__redis_store_set_leases(ratel_store_t *store, ratel__lease_table_t *t)
{
    redis_store_t *s = (redis_store_t *)store;

    if (!store || store->ops != &ratel__redis_ops || !t)
        return RATEL_EINVAL;
    if (!s->leases_external)
        ratel__lease_table_free(s->leases);
    s->leases = t;
    s->leases_external = 1;
    s->holder = ratel__lease_holder(t);
    return 0;
}

void ratel__redis_store_give_back(ratel_store_t *store,
                                  ratel__lease_keep_fn keep, void *ud)
{
    redis_store_t *s = (redis_store_t *)store;

    if (!store || store->ops != &ratel__redis_ops || !s->poll)
        return;
    ratel__poll_lock(s->poll);
    give_all_back(s, keep, ud);
    ratel__poll_unlock(s->poll);
}
