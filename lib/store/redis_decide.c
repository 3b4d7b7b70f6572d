/*
 * redis_decide.c - what the Redis store makes of Redis's answers, on any
 * engine (the synchronous calls' or an event loop's): the same decisions,
 * sources and failure policy whichever way a caller asked.
 *
 * - Answers. Seven integers become a decision (an eighth: the lease of an
 *   ACQUIRE under a concurrent rule, RELEASE's held); error replies become
 *   RATEL_E* codes.
 * - Failure policy. When Redis cannot decide (down, timeout, breaker open,
 *   LOADING, CLUSTERDOWN...), `open` allows, `closed` denies until the
 *   breaker lets the next attempt through, `local` decides with an
 *   embedded memory store. The decision's `source` says which.
 * - Deny cache. A denial until T answers this key locally until T
 *   (deny_cache.h); a refund, release or reset here forgets it.
 * - Leased keys. A request with `lease` set is answered from its key's
 *   slice when one is held (redis_lease.c), before the deny cache.
 * - Groups. A batch's group is all-or-nothing: when a member is denied or
 *   fails, the others' charges are given back (REFUND) before the batch
 *   is told; another client may see the charge in between
 *   (docs/deployment.md).
 */
#include "store/redis_private.h"

#include <stdlib.h>
#include <string.h>

static void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* What went wrong, as a RATEL_E* code, for an error reply. */
static int error_code(const redisReply *r)
{
    if (ratel__reply_starts(r, "WRONGTYPE"))
        return RATEL_ECORRUPT;
    if (ratel__reply_starts(r, "ERR ratel: key holds a value that is not"))
        return RATEL_ECORRUPT;
    if (ratel__reply_starts(r,
                            "ERR ratel: key holds ratel state of an unknown"))
        return RATEL_EVERSION;
    if (ratel__reply_starts(r, "ERR ratel: COST") &&
        strstr(r->str, "can ever admit"))
        return RATEL_ECOST;
    if (ratel__reply_starts(r, "ERR ratel: at most"))
        return RATEL_ETOOMANY;
    if (ratel__reply_starts(r, "ERR ratel:"))
        return RATEL_EINVAL;
    /* The server cannot decide now (or still lacks the library or the
       script, or still redirects, after every attempt): the failure
       policy will. */
    if (ratel__reply_unavailable(r) || ratel__reply_starts(r, "NOSCRIPT") ||
        ratel__reply_starts(r, "ERR Function not found") ||
        ratel__reply_starts(r, "MOVED") || ratel__reply_starts(r, "ASK "))
        return RATEL_EIO;
    return RATEL_EPROTO;
}

/*
 * The seven integers of ACQUIRE, REFUND and RELEASE, and with `extra` an
 * eighth into *extra: the lease of an ACQUIRE under a policy with a
 * concurrent rule, RELEASE's held.
 */
static int parse_decision(const redisReply *r, ratel_decision_t *d, int extra,
                          long long *value)
{
    long long v[8];
    size_t n = extra ? 8 : 7;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return RATEL_EPROTO;
    for (size_t i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return RATEL_EPROTO;
        v[i] = r->element[i]->integer;
    }
    if ((v[0] != 0 && v[0] != 1) || v[5] < 0 || v[5] >= RATEL_MAX_RULES)
        return RATEL_EPROTO;
    d->allowed = (int)v[0];
    d->limit = v[1];
    d->remaining = v[2];
    d->retry_after_ms = v[3];
    d->reset_after_ms = v[4];
    d->rule_reset_ms = v[4]; /* the reply has the key's reset only */
    d->rule = (int)v[5];
    d->wait_ms = v[6];
    d->source = RATEL_SOURCE_STORE;
    d->lease = 0;
    if (extra)
        *value = v[7];
    return 0;
}

/* ------------------------------------------------- failure policy */

static void decide_open(const ratel_policy_t *p, const ratel_request_t *req,
                        ratel_decision_t *d)
{
    int64_t remaining = INT64_MAX;

    for (uint32_t i = 0; i < p->nrules; i++) {
        int64_t cap = (int64_t)ratel_rule_capacity(&p->rules[i]);
        if (cap - (int64_t)req->cost < remaining)
            remaining = cap - (int64_t)req->cost;
    }
    memset(d, 0, sizeof *d);
    d->allowed = 1;
    d->limit = p->rules[0].limit;
    d->remaining = remaining < 0 ? 0 : remaining;
    d->source = RATEL_SOURCE_OPEN;
}

/*
 * Decides a request Redis could not decide, by the failure policy (`closed`
 * denies until the node's breaker, `until_us`, lets the next attempt
 * through). Returns 0 with the decision, or the local store's error.
 */
static int fail_decide(redis_store_t *s, const ratel__rop_t *rop,
                       ratel_decision_t *d)
{
    const ratel_policy_t *p = rop->policy;
    int64_t now = rop->now_us, until = rop->down_until_us;
    int rc;

    count(&s->errors);
    switch (s->on_failure) {
    case RATEL_FAILURE_OPEN:
        count(&s->fallback_open);
        decide_open(p, &rop->request, d);
        return 0;
    case RATEL_FAILURE_CLOSED:
        count(&s->fallback_closed);
        memset(d, 0, sizeof *d);
        d->allowed = 0;
        d->limit = p->rules[0].limit;
        d->retry_after_ms =
            until > now ? (until - now + 999) / 1000 : s->sh.breaker_us / 1000;
        if (d->retry_after_ms < 1)
            d->retry_after_ms = 1;
        d->reset_after_ms = d->rule_reset_ms = d->retry_after_ms;
        d->source = RATEL_SOURCE_CLOSED;
        return 0;
    default:
        count(&s->fallback_local);
        rc = ratel_store_acquire(s->local, rop->key, rop->keylen, p, now,
                                 &rop->request, d);
        if (rc == 0)
            d->source = RATEL_SOURCE_LOCAL;
        return rc;
    }
}

/* The error of a command that got no answer, for ratel_store_errstr(). */
static void note_failure(redis_store_t *s, const ratel__rop_t *rop)
{
    if (rop->node && ratel__engine_node_error(rop->node)[0])
        ratel__redis_set_error(s, ratel__engine_node_error(rop->node));
    else if (!rop->node && s->sh.url.cluster)
        ratel__redis_set_error(s, "no cluster node answered");
    /* Sentinel, no primary named: the Sentinels' answer said why. */
}

/*
 * An ACQUIRE's reply as its answer: the decision, or the RATEL_E* code of
 * an error reply or of anything else than the decision's integers. Frees
 * the reply.
 */
static int take_reply(redis_store_t *s, ratel__rop_t *rop, ratel_decision_t *d)
{
    int rc, leases = ratel_policy_has_leases(rop->policy);
    redisReply *r = rop->reply;

    if (r->type == REDIS_REPLY_ERROR) {
        rc = error_code(r);
        ratel__redis_set_error(s, r->str);
    } else {
        long long lease = 0;
        rc = parse_decision(r, d, leases, &lease);
        if (rc == 0 && (lease < 0 || lease > UINT32_MAX))
            rc = RATEL_EPROTO;
        if (rc != 0)
            ratel__redis_set_error(
                s, leases ? "Redis answered ACQUIRE with "
                            "something else than eight integers"
                          : "Redis answered ACQUIRE with "
                            "something else than seven integers");
        d->lease = (uint32_t)lease;
    }
    freeReplyObject(r);
    rop->reply = NULL;
    return rc;
}

/*
 * Turns a finished ACQUIRE of item `it` into the caller's answer: the
 * decision, a RATEL_E* error, or the failure policy's decision. Records
 * denials in the deny cache. The reply may have been taken as it was read
 * (batch_rop_reply): its answer waits in the item.
 */
static int finish_acquire(redis_store_t *s, ratel__rop_t *rop,
                          uint64_t fingerprint, ratel_batch_item_t *it)
{
    ratel_decision_t *d = &it->decision;
    int rc;

    if (rop->rc != 0) {
        note_failure(s, rop);
        rc = rop->rc;
    } else if (rop->reply) {
        rc = take_reply(s, rop, d);
    } else {
        rc = it->rc;
    }
    /* A denial under a concurrent rule ends when another caller releases
       a lease, which no clock predicts: it is not cached. */
    if (rc == 0) {
        if (!d->allowed && s->cache && !ratel_policy_has_leases(rop->policy))
            ratel__deny_cache_put(s->cache, rop->key, rop->keylen, fingerprint,
                                  &rop->request, d, rop->now_us);
        return 0;
    }
    if (rc == RATEL_EIO || rc == RATEL_EPROTO)
        return fail_decide(s, rop, d);
    return rc;
}

/* ---------------------------------------------------------- batches */

static void batch_rop_done(ratel__rop_t *rop);

/* Gives back what the admitted members of denied groups were charged:
   REFUND on Redis (and the local store's, which may have decided). Returns
   how many refunds went to Redis. */
static size_t give_back_groups(redis_batch_t *b)
{
    size_t sent = 0;

    for (size_t i = 0; i < b->n;) {
        size_t k = ratel__group_len(b->items, b->n, i);
        int denied = 0;
        for (size_t j = i; j < i + k && k > 1; j++)
            denied |= b->items[j].rc != 0 || !b->items[j].decision.allowed;
        for (size_t j = i; j < i + k && denied; j++) {
            ratel_batch_item_t *it = &b->items[j];
            ratel__rop_t *rop = &b->rops[j];
            if (it->rc != 0 || !it->decision.allowed ||
                (it->request.flags & RATEL_PEEK))
                continue;
            if (it->decision.source == RATEL_SOURCE_LEASE) {
                ratel__redis_lease_put_back(b->s, it, &b->more[j], b->now_us);
                continue;
            }
            if (b->s->cache)
                ratel__deny_cache_forget(b->s->cache, it->key, it->keylen);
            if (b->s->local) {
                ratel_decision_t back;
                ratel_store_refund(b->s->local, it->key, it->keylen, it->policy,
                                   b->now_us, it->request.cost, &back);
            }
            if (it->decision.source != RATEL_SOURCE_STORE)
                continue;
            memset(rop, 0, sizeof *rop);
            rop->kind = RATEL__ROP_REFUND;
            rop->key = it->key;
            rop->keylen = it->keylen;
            rop->policy = it->policy;
            rop->request.cost = it->request.cost;
            rop->at_ms = b->s->client_time ? b->now_us / 1000 : -1;
            rop->now_us = b->now_us;
            rop->done = batch_rop_done;
            rop->ud = b;
            b->pending++;
            sent++;
            ratel__engine_submit(b->e, rop);
        }
        i += k;
    }
    return sent;
}

/* Every acquire of the batch answered: decisions, then the groups. */
static int batch_decide(redis_batch_t *b)
{
    int grouped = 0;

    for (size_t i = 0; i < b->n; i++) {
        ratel__rop_t *rop = &b->rops[i];
        grouped |= b->items[i].group != 0;
        if (rop->key)
            b->items[i].rc =
                finish_acquire(b->s, rop, b->more[i].fp, &b->items[i]);
    }
    b->giving_back = 1;
    return grouped && give_back_groups(b) > 0;
}

/*
 * An ACQUIRE's reply, as soon as it is read: its answer goes into the
 * item (the batch's until told) and the reply is freed, so that a turn's
 * many answers do not hold their reply objects, nine each, until it ends
 * (the allocator then serves them from its per-thread cache).
 */
static void batch_rop_reply(ratel__rop_t *rop)
{
    redis_batch_t *b = rop->ud;
    ratel_batch_item_t *it = &b->items[rop - b->rops];

    it->rc = take_reply(b->s, rop, &it->decision);
}

static void batch_rop_done(ratel__rop_t *rop)
{
    redis_batch_t *b = rop->ud;

    if (b->giving_back) {
        /* A refund's answer changes no item: it was given back. */
        freeReplyObject(rop->reply);
        rop->reply = NULL;
        if (rop->rc != 0)
            count(&b->s->errors);
    }
    if (--b->pending > 0)
        return;
    if (!b->giving_back && batch_decide(b))
        return;
    b->fn(b->ud);
}

int ratel__redis_batch_start(redis_batch_t *b)
{
    redis_store_t *s = b->s;

    b->pending = 0;
    b->giving_back = 0;
    if (b->n == 1) {
        memset(&b->one_rop, 0, sizeof b->one_rop);
        memset(&b->one_more, 0, sizeof b->one_more);
        b->rops = &b->one_rop;
        b->more = &b->one_more;
    } else {
        b->rops = calloc(b->n ? b->n : 1, sizeof *b->rops);
        b->more = calloc(b->n ? b->n : 1, sizeof *b->more);
    }
    if (!b->rops || !b->more) {
        ratel__redis_batch_end(b);
        return RATEL_ENOMEM;
    }
    atomic_store_explicit(&s->last_now_us, b->now_us, memory_order_relaxed);
    for (size_t i = 0; i < b->n; i++) {
        ratel_batch_item_t *it = &b->items[i];
        ratel__rop_t *rop = &b->rops[i];
        if (it->rc != 0)
            continue;
        if (it->keylen > RATEL_REDIS_KEY_MAX) {
            it->rc = RATEL_ERANGE;
            continue;
        }
        it->rc = ratel_policy_check_request(it->policy, &it->request, NULL);
        if (it->rc != 0)
            continue;
        if (s->cache || it->request.lease)
            b->more[i].fp = ratel__policy_fingerprint(it->policy);
        if (it->request.lease &&
            ratel__redis_lease_take(s, b->e, it, &b->more[i], b->now_us))
            continue;
        if (s->cache &&
            ratel__deny_cache_get(s->cache, it->key, it->keylen, b->more[i].fp,
                                  &it->request, b->now_us, &it->decision)) {
            count(&s->cache_hits);
            continue;
        }
        rop->kind = RATEL__ROP_ACQUIRE;
        rop->key = it->key;
        rop->keylen = it->keylen;
        rop->policy = it->policy;
        rop->request = it->request;
        rop->at_ms = s->client_time ? b->now_us / 1000 : -1;
        rop->now_us = b->now_us;
        rop->done = batch_rop_done;
        rop->reply_fn = batch_rop_reply;
        rop->ud = b;
        b->pending++;
    }
    if (b->pending == 0) {
        batch_decide(b);
        return b->pending == 0 ? 1 : 0;
    }
    /* Submitted after counting: no answer can end the batch early. */
    for (size_t i = 0; i < b->n; i++)
        if (b->rops[i].key)
            ratel__engine_submit(b->e, &b->rops[i]);
    return 0;
}

void ratel__redis_batch_end(redis_batch_t *b)
{
    if (b->rops != &b->one_rop) {
        free(b->rops);
        free(b->more);
    }
    b->rops = NULL;
    b->more = NULL;
}

/* ---------------------------------------------------- other writes */

/* A REFUND, RELEASE, RESET or GET answered (or not). */
static int call_result(redis_call_t *call)
{
    ratel__rop_t *rop = &call->rop;
    redisReply *r = rop->reply;
    long long integer = 0;
    int rc = rop->rc;

    if (rc != 0) {
        note_failure(call->s, rop);
    } else if (r->type == REDIS_REPLY_ERROR) {
        rc = error_code(r);
        ratel__redis_set_error(call->s, r->str);
    } else if (rop->kind == RATEL__ROP_GET) {
        if (r->type == REDIS_REPLY_STRING)
            rc =
                ratel_state_inspect((const uint8_t *)r->str, r->len,
                                    rop->now_us, call->out, call->max, call->n);
        else if (r->type != REDIS_REPLY_NIL)
            rc = RATEL_EPROTO;
    } else if (call->decision) {
        rc = parse_decision(r, call->decision, rop->kind == RATEL__ROP_RELEASE,
                            &integer);
        if (call->held)
            *call->held = rc == 0 && integer == 1;
    } else if (r->type != REDIS_REPLY_INTEGER) {
        rc = RATEL_EPROTO;
    }
    freeReplyObject(r);
    rop->reply = NULL;
    if ((rc == RATEL_EIO || rc == RATEL_EPROTO) && rop->kind != RATEL__ROP_GET)
        count(&call->s->errors);
    /* What Redis did not take is RATEL_EIO, whatever the reason. */
    if (rc == RATEL_EPROTO && rop->rc != 0 && rop->kind != RATEL__ROP_GET)
        rc = RATEL_EIO;
    return rc;
}

static void call_done(ratel__rop_t *rop)
{
    redis_call_t *call = rop->ud;

    call->rc = call_result(call);
    call->fn(call->ud);
}

/*
 * REFUND and RELEASE with `local`: the fallback store gives back too, so
 * that what it decided while Redis was away is given back there; RESET
 * forgets the key there. The deny cache forgets it for all three.
 */
static void local_give_back(redis_call_t *call)
{
    redis_store_t *s = call->s;
    ratel__rop_t *rop = &call->rop;
    ratel_decision_t local;
    int held;

    if (s->cache && rop->kind != RATEL__ROP_GET)
        ratel__deny_cache_forget(s->cache, rop->key, rop->keylen);
    if (!s->local)
        return;
    if (rop->kind == RATEL__ROP_RELEASE)
        ratel_store_release(s->local, rop->key, rop->keylen, rop->policy,
                            rop->now_us, rop->lease, rop->lease_flags, &held,
                            &local);
    else if (rop->kind == RATEL__ROP_REFUND)
        ratel_store_refund(s->local, rop->key, rop->keylen, rop->policy,
                           rop->now_us, rop->request.cost, &local);
    else if (rop->kind == RATEL__ROP_RESET)
        ratel_store_reset(s->local, rop->key, rop->keylen);
}

int ratel__redis_call_start(ratel__engine_t *e, redis_call_t *call)
{
    ratel__rop_t *rop = &call->rop;

    if (rop->keylen > RATEL_REDIS_KEY_MAX) {
        call->rc = RATEL_ERANGE;
        return 1;
    }
    if (rop->kind == RATEL__ROP_REFUND &&
        (rop->request.cost < 1 || rop->request.cost > RATEL_LIMIT_MAX)) {
        call->rc = RATEL_EINVAL;
        return 1;
    }
    if (call->held)
        *call->held = 0;
    if (call->n)
        *call->n = 0;
    local_give_back(call);
    rop->at_ms = call->s->client_time && rop->kind != RATEL__ROP_RESET &&
                         rop->kind != RATEL__ROP_GET
                     ? rop->now_us / 1000
                     : -1;
    rop->done = call_done;
    rop->ud = call;
    ratel__engine_submit(e, rop);
    return 0;
}
