/*
 * rls.c - Envoy's rate limit service (envoy.service.ratelimit.v3, "RLS")
 * and gRPC health checks, on rateld's gRPC listener (docs/envoy.md).
 *
 * A ShouldRateLimit call names a domain and descriptors. Each descriptor
 * finds its limit in the envoyproxy/ratelimit configuration (erl.h); the
 * limited ones join the worker's batch as one all-or-nothing group, so a
 * request one descriptor denies charges none of the others (envoyproxy/
 * ratelimit charges them all). Shadow limits are decided on their own:
 * they count, and always answer OK. The flush (batch.c's run_batch)
 * decides the batch and calls rateld_rls_answer() for each call.
 *
 * Messages are decoded by protobuf-c with an allocator that refuses to
 * hold more than RLS_DECODE_BYTES for one call, so a small message that
 * declares huge repeated fields cannot make us allocate much.
 */
#include "app/ratelimit.h"
#include "rateld/erl.h"
#include "rateld/rateld.h"
#include "rateld/rlqs.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RLS_DESCRIPTORS_MAX 64
#define RLS_ENTRIES_MAX 32
#define RLS_DECODE_BYTES (1 << 20)
#define RLS_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define HEALTH_WATCH "/grpc.health.v1.Health/Watch"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_request_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus
    rls_status_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor
    rls_descriptor_t;

/* Bytes of a call's own arena: a usual request decodes into it without
   touching malloc. */
#define RLS_ARENA 2048
/* Call states each thread keeps for reuse. */
#define RLS_SPARE_MAX 64

/*
 * protobuf-c's allocations for one call: from the call's arena while it
 * lasts, then malloc, all counted against RLS_DECODE_BYTES.
 */
typedef struct budget_s {
    size_t used, arena_used;
    _Alignas(16) unsigned char arena[RLS_ARENA];
} budget_t;

static void *budget_alloc(void *data, size_t size)
{
    budget_t *b = data;
    size_t rounded = (size + 15) & ~(size_t)15;

    if (size > RLS_DECODE_BYTES - b->used)
        return NULL;
    b->used += size;
    if (rounded >= size && rounded <= RLS_ARENA - b->arena_used) {
        void *p = b->arena + b->arena_used;
        b->arena_used += rounded;
        return p;
    }
    return malloc(size);
}

static void budget_free(void *data, void *p)
{
    budget_t *b = data;

    if ((unsigned char *)p >= b->arena &&
        (unsigned char *)p < b->arena + RLS_ARENA)
        return; /* the arena goes with the call */
    free(p);
}

/* One ShouldRateLimit call from decoding to its answer. */
struct rateld_rls_s {
    rateld_rls_t *next_spare;
    ratel_grpc_call_t *call;
    rls_request_t *req;
    budget_t budget;
    ProtobufCAllocator alloc;
    int64_t start_us;
    size_t n;       /* descriptors */
    size_t base;    /* the first of its items in the worker's batch */
    int over_limit; /* a deny_all limit matched */
    const rateld_erl_limit_t *limit[RLS_DESCRIPTORS_MAX];
    int item[RLS_DESCRIPTORS_MAX]; /* offset from base, -1: none */
};

void rateld_rls_free(rateld_rls_pool_t *pool, rateld_rls_t *r)
{
    if (!r)
        return;
    if (r->req)
        protobuf_c_message_free_unpacked(&r->req->base, &r->alloc);
    if (pool && pool->n < RLS_SPARE_MAX) {
        r->next_spare = pool->spare;
        pool->spare = r;
        pool->n++;
        return;
    }
    free(r);
}

void rateld_rls_pool_drain(rateld_rls_pool_t *pool)
{
    while (pool->spare) {
        rateld_rls_t *r = pool->spare;
        pool->spare = r->next_spare;
        free(r);
    }
    pool->n = 0;
}

static const char *request_invalid(const rls_request_t *q);

rateld_rls_t *rateld_rls_decode(rateld_rls_pool_t *pool, const uint8_t *msg,
                                size_t len, int *status, const char **why)
{
    rateld_rls_t *r = pool ? pool->spare : NULL;

    if (r) {
        pool->spare = r->next_spare;
        pool->n--;
    } else if (!(r = malloc(sizeof *r))) {
        *status = RATEL_GRPC_RESOURCE_EXHAUSTED;
        *why = "out of memory";
        return NULL;
    }
    r->budget.used = r->budget.arena_used = 0;
    r->call = NULL;
    r->over_limit = 0;
    r->base = 0;
    r->alloc = (ProtobufCAllocator){budget_alloc, budget_free, &r->budget};
    r->req = envoy__service__ratelimit__v3__rate_limit_request__unpack(
        &r->alloc, len, msg);
    if (!r->req) {
        *status = RATEL_GRPC_INTERNAL;
        *why = "cannot decode the RateLimitRequest (not protobuf, or more "
               "than 1 MiB once decoded)";
    } else if ((*why = request_invalid(r->req))) {
        *status = RATEL_GRPC_INVALID_ARGUMENT;
    } else {
        r->n = r->req->n_descriptors;
        return r;
    }
    rateld_rls_free(pool, r);
    return NULL;
}

/* ----------------------------------------------------------- answers */

static void answer_packed(ratel_grpc_call_t *call, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t small[1024], *buf = len <= sizeof small ? small : malloc(len);

    if (!buf) {
        ratel_grpc_respond(call, RATEL_GRPC_RESOURCE_EXHAUSTED, NULL, 0,
                           "out of memory");
        return;
    }
    protobuf_c_message_pack(m, buf);
    ratel_grpc_respond(call, RATEL_GRPC_OK, buf, len, NULL);
    if (buf != small)
        free(buf);
}

static void answer_status(rateld_t *d, unsigned thread, ratel_grpc_call_t *call,
                          int status, const char *text)
{
    rateld_metrics_grpc(d->metrics, thread, status);
    ratel_grpc_respond(call, status, NULL, 0, text);
}

/* ERL's units as Envoy numbers them (erl.h keeps Envoy's numbering). */
static void fill_limit(rls_limit_t *out, const rateld_erl_limit_t *l)
{
    envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(out);
    out->name = (char *)l->name;
    out->requests_per_unit = l->requests_per_unit;
    out->unit = l->unit;
}

static void fill_duration(Google__Protobuf__Duration *d, int64_t ms)
{
    google__protobuf__duration__init(d);
    if (ms < 0)
        ms = 0;
    d->seconds = ms / 1000;
    d->nanos = (int32_t)(ms % 1000) * 1000000;
}

/* The response's RateLimit-Policy / RateLimit / Retry-After fields. */
typedef struct fields_s {
    Envoy__Config__Core__V3__HeaderValue h[3], *hp[3];
    char policy[512], limit[256], retry[24];
    size_t n;
} fields_t;

/* The limit's name in the fields: its rate_limit name, else its key path
   (both config text), when made of characters a quoted field value
   keeps as they are; else "envoy". */
static const char *field_name(const rateld_erl_limit_t *l)
{
    const char *name = l->name[0] ? l->name : l->key_path;

    if (!name[0] || strlen(name) > 64)
        return "envoy";
    for (const char *p = name; *p; p++)
        if (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\')
            return "envoy";
    return name;
}

static void fill_fields(fields_t *f, const rateld_erl_limit_t *l,
                        const ratel_decision_t *dec, int over)
{
    const char *name = field_name(l);
    static const char *const names[] = {"RateLimit-Policy", "RateLimit",
                                        "Retry-After"};

    ratel__header_policy(name, &l->policy, f->policy, sizeof f->policy);
    ratel__header_ratelimit(name, &l->policy, dec, f->limit, sizeof f->limit);
    snprintf(f->retry, sizeof f->retry, "%lld",
             ratel__retry_after_seconds(dec));
    f->n = over ? 3 : 2;
    for (size_t i = 0; i < f->n; i++) {
        envoy__config__core__v3__header_value__init(&f->h[i]);
        f->h[i].key = (char *)names[i];
        f->hp[i] = &f->h[i];
    }
    f->h[0].value = f->policy;
    f->h[1].value = f->limit;
    f->h[2].value = f->retry;
}

/* Counts descriptor i's decision; returns 1 when it is over the limit. */
static int count_descriptor(rateld_t *d, unsigned thread,
                            const rateld_gen_t *gen, const rateld_rls_t *r,
                            size_t i, const ratel_batch_item_t *it, int64_t now)
{
    const rateld_erl_limit_t *l = r->limit[i];
    int over =
        l->deny_all ? !l->shadow : it && !it->decision.allowed && !l->shadow;
    int shadow_over =
        l->shadow && (l->deny_all || (it && !it->decision.allowed));

    rateld_metrics_count(d->metrics, thread, gen->erl_metric[l->index],
                         over          ? RATELD_OUTCOME_DENIED
                         : shadow_over ? RATELD_OUTCOME_SHADOW_DENIED
                                       : RATELD_OUTCOME_ALLOWED,
                         it ? it->decision.source : RATEL_SOURCE_STORE,
                         now - r->start_us);
    return over;
}

/*
 * The answer of a call whose items were decided (`items`, from r->base;
 * NULL when it had none): a status per descriptor in the request's order,
 * the overall code and the RateLimit fields of the binding descriptor
 * (denied: the one whose retry is furthest; allowed: the one closest to
 * exhaustion).
 */
static void answer_call(rateld_t *d, unsigned thread, const rateld_gen_t *gen,
                        rateld_rls_t *r, const ratel_batch_item_t *items,
                        int64_t now)
{
    rls_status_t st[RLS_DESCRIPTORS_MAX], *stp[RLS_DESCRIPTORS_MAX];
    rls_limit_t lim[RLS_DESCRIPTORS_MAX];
    Google__Protobuf__Duration dur[RLS_DESCRIPTORS_MAX];
    rls_response_t resp =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    const ratel_batch_item_t *binding = NULL;
    size_t bi = 0;
    int over = 0;
    fields_t f;

    for (size_t i = 0; i < r->n; i++) {
        const rateld_erl_limit_t *l = r->limit[i];
        const ratel_batch_item_t *it =
            l && r->item[i] >= 0 ? &items[r->item[i]] : NULL;
        int no;
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(
            &st[i]);
        stp[i] = &st[i];
        st[i].code =
            ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        if (l && l->unlimited) /* as ERL: no current_limit, all remains */
            st[i].limit_remaining = 0xffffffffu;
        if (!l || l->unlimited)
            continue;
        if (it && it->rc != 0) {
            char why[256];
            ratel_store_errstr(d->store, why, sizeof why);
            rateld_metrics_count(d->metrics, thread, gen->erl_metric[l->index],
                                 RATELD_OUTCOME_ERROR, RATEL_SOURCE_STORE,
                                 now - r->start_us);
            answer_status(d, thread, r->call, RATEL_GRPC_UNAVAILABLE,
                          why[0] ? why : "the store failed");
            return;
        }
        fill_limit(&lim[i], l);
        st[i].current_limit = &lim[i];
        no = count_descriptor(d, thread, gen, r, i, it, now);
        if (no)
            st[i].code =
                ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        if (!it)
            continue;
        st[i].limit_remaining =
            it->decision.remaining > 0xffffffffLL ? 0xffffffffu
            : it->decision.remaining > 0 ? (uint32_t)it->decision.remaining
                                         : 0;
        fill_duration(&dur[i], no ? it->decision.retry_after_ms
                                  : it->decision.rule_reset_ms);
        st[i].duration_until_reset = &dur[i];
        if (!binding ||
            (no && (!over || it->decision.retry_after_ms >
                                 binding->decision.retry_after_ms)) ||
            (!no && !over &&
             it->decision.remaining < binding->decision.remaining)) {
            binding = it;
            bi = i;
        }
        over |= no;
    }
    over |= r->over_limit;
    resp.overall_code =
        over
            ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
            : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    resp.n_statuses = r->n;
    resp.statuses = stp;
    if (binding && gen->config->envoy.response_headers) {
        fill_fields(&f, r->limit[bi], &binding->decision,
                    !binding->decision.allowed);
        resp.n_response_headers_to_add = f.n;
        resp.response_headers_to_add = f.hp;
    }
    rateld_metrics_grpc(d->metrics, thread, RATEL_GRPC_OK);
    answer_packed(r->call, &resp.base);
}

void rateld_rls_answer(rateld_t *d, rateld_flight_t *f, unsigned thread,
                       const rateld_gen_t *gen, size_t first, int64_t now)
{
    rateld_rls_t *r = f->pending[first].rls;

    /* Its items from `first`: where the batch put them, which is r->base
       unless abandoned requests before it left the batch (batch.c). */
    answer_call(d, thread, gen, r, &f->items[first], now);
    rateld_rls_free(&f->w->rls_pool, r);
}

int rateld_rls_abandon(rateld_t *d, rateld_worker_t *w, unsigned thread,
                       rateld_pending_t *head)
{
    rateld_rls_t *r = head->rls;

    if (!ratel_grpc_call_abandoned(r->call))
        return 0;
    /* Dropped (the stream is gone); answering frees the call. */
    answer_status(d, thread, r->call, RATEL_GRPC_CANCELLED,
                  "the call was cancelled before it was decided; nothing was "
                  "charged");
    rateld_rls_free(&w->rls_pool, r);
    return 1;
}

/* ---------------------------------------------------------- requests */

/* The store key: "envoy/" and the domain and each entry's key and value
   as LEN:BYTES (unambiguous whatever the bytes; a share_threshold level
   puts its pattern for the value). -1 when too long. */
static long descriptor_key(const char *domain, const rls_descriptor_t *desc,
                           const rateld_erl_limit_t *l, char *buf, size_t len)
{
    size_t n = 0;
    int m = snprintf(buf, len, "envoy/%zu:%s", strlen(domain), domain);

    if (m < 0 || (size_t)m >= len)
        return -1;
    n = (size_t)m;
    for (size_t i = 0; i < desc->n_entries; i++) {
        const char *k = desc->entries[i]->key, *v = desc->entries[i]->value;
        if (i < l->depth && l->levels[i].shared)
            v = l->levels[i].shared; /* share_threshold: one counter */
        m = snprintf(buf + n, len - n, "/%zu:%s=%zu:%s", strlen(k), k,
                     strlen(v), v);
        if (m < 0 || (size_t)m >= len - n)
            return -1;
        n += (size_t)m;
    }
    return (long)n;
}

/* Checks the request's shape; NULL, or why it is refused. */
static const char *request_invalid(const rls_request_t *q)
{
    if (!q->domain[0])
        return "domain is empty; it names the configuration to apply";
    if (q->n_descriptors == 0)
        return "no descriptors; a request needs at least one";
    if (q->n_descriptors > RLS_DESCRIPTORS_MAX)
        return "more than 64 descriptors";
    for (size_t i = 0; i < q->n_descriptors; i++) {
        const rls_descriptor_t *desc = q->descriptors[i];
        if (desc->n_entries == 0)
            return "a descriptor has no entries";
        if (desc->n_entries > RLS_ENTRIES_MAX)
            return "a descriptor has more than 32 entries";
        for (size_t j = 0; j < desc->n_entries; j++)
            if (!desc->entries[j]->key[0])
                return "a descriptor entry has an empty key";
    }
    return NULL;
}

/* Finds each descriptor's limit, then drops those others replace. */
static void match_limits(const rateld_erl_t *erl, rateld_rls_t *r)
{
    const rls_request_t *q = r->req;
    size_t dlen = strlen(q->domain);

    for (size_t i = 0; i < r->n; i++) {
        const rls_descriptor_t *desc = q->descriptors[i];
        rateld_erl_entry_t e[RLS_ENTRIES_MAX];
        for (size_t j = 0; j < desc->n_entries; j++) {
            e[j].key = desc->entries[j]->key;
            e[j].keylen = strlen(e[j].key);
            e[j].value = desc->entries[j]->value;
            e[j].valuelen = strlen(e[j].value);
        }
        r->limit[i] =
            rateld_erl_match(erl, q->domain, dlen, e, desc->n_entries);
        r->item[i] = -1;
    }
    rateld_erl_apply_replaces(r->limit, r->n);
}

/* Whether descriptor i needs the store: limited, shadow or not. */
static int decided_by_store(const rateld_rls_t *r, size_t i)
{
    const rateld_erl_limit_t *l = r->limit[i];

    return l && !l->unlimited && !l->deny_all;
}

static int decided_by_store_any(const rateld_rls_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (decided_by_store(r, i))
            return 1;
    return 0;
}

/* The permits descriptor i asks for: its own hits_addend, else the
   request's, else 1. 0 decides without charging (a peek). */
static ratel_request_t descriptor_request(const rateld_rls_t *r, size_t i)
{
    const rls_descriptor_t *desc = r->req->descriptors[i];
    ratel_request_t q = RATEL_REQUEST_INIT;
    uint64_t cost = desc->hits_addend     ? desc->hits_addend->value
                    : r->req->hits_addend ? r->req->hits_addend
                                          : 1;

    if (cost == 0 || r->over_limit)
        q.flags |= RATEL_PEEK; /* nothing charged when denied anyway */
    else
        q.cost = cost;
    return q;
}

/*
 * Queues the call's decided descriptors: first the limiting ones (one
 * all-or-nothing group), then the shadow ones (each alone: a shadow
 * limit never makes the others uncharged). Returns NULL, or why the
 * request is refused.
 */
static const char *queue_items(rateld_t *d, rateld_worker_t *w, unsigned thread,
                               rateld_rls_t *r)
{
    size_t k = 0, group = 0;
    rateld_pending_t *slot;

    for (size_t i = 0; i < r->n; i++) {
        if (!decided_by_store(r, i))
            continue;
        k++;
        group += !r->limit[i]->shadow;
    }
    for (size_t i = 0; i < r->n; i++)
        if (r->limit[i] && r->limit[i]->deny_all && !r->limit[i]->shadow)
            r->over_limit = 1;
    if (group > RATEL_GROUP_MAX)
        return "more than 16 descriptors with a limit in one request";
    if (k == 0)
        return NULL;
    slot = rateld_enqueue(d, w, thread, k);
    r->base = (size_t)(slot - w->pending);
    for (int pass = 0, j = 0; pass < 2; pass++) {
        for (size_t i = 0; i < r->n; i++) {
            const rateld_erl_limit_t *l = r->limit[i];
            rateld_pending_t *p = &slot[j];
            long n;
            if (!decided_by_store(r, i) || l->shadow != pass)
                continue;
            n = descriptor_key(r->req->domain, r->req->descriptors[i], l,
                               p->key, sizeof p->key);
            if (n < 0)
                return "a descriptor is longer than 1 KiB";
            memset(p, 0, offsetof(rateld_pending_t, key));
            p->keylen = (size_t)n;
            p->rules = &l->policy;
            p->request = descriptor_request(r, i);
            p->rls = r;
            p->start_us = r->start_us;
            r->item[i] = j++;
        }
    }
    rateld_queue(w, slot, k, group, RATELD_KIND_RLS, NULL);
    return NULL;
}

/* A domain no configuration file defines: an error Envoy counts (its
   failure_mode_deny decides), or OK like envoyproxy/ratelimit when
   envoy.unknown_domain is allow. Logged within the budget (log_budget.c). */
static void unknown_domain(rateld_t *d, rateld_worker_t *w, unsigned thread,
                           const rateld_gen_t *gen, rateld_rls_t *r)
{
    char text[160];
    int64_t now = ratel_clock_now_us();
    unsigned long long not_logged;

    if (rateld_log_budget_take(w, RATELD_LOG_UNKNOWN_DOMAIN, now, &not_logged))
        ratel__log("warn", "envoy: unknown domain",
                   "domain=\"%.64s\" not_logged=%llu", r->req->domain,
                   not_logged);
    if (gen->config->envoy.unknown_domain_allow) {
        for (size_t i = 0; i < r->n; i++)
            r->limit[i] = NULL;
        answer_call(d, thread, gen, r, NULL, now);
        return;
    }
    snprintf(text, sizeof text,
             "unknown domain \"%.64s\": no file in envoy.config_dir "
             "defines it",
             r->req->domain);
    answer_status(d, thread, r->call, RATEL_GRPC_FAILED_PRECONDITION, text);
}

static void should_rate_limit(rateld_t *d, ratel_grpc_call_t *call,
                              const ratel_grpc_request_t *req)
{
    rateld_worker_t *w = &d->workers[req->thread];
    rateld_gen_t *gen = rateld_take_gen(d, w);
    const rateld_erl_t *erl = gen->config->erl;
    int status;
    const char *why;
    rateld_rls_t *r = rateld_rls_decode(&w->rls_pool, req->message,
                                        req->message_len, &status, &why);

    if (!r) {
        answer_status(d, req->thread, call, status, why);
        return;
    }
    r->call = call;
    r->start_us = ratel_clock_now_us();
    if (!erl ||
        !rateld_erl_has_domain(erl, r->req->domain, strlen(r->req->domain))) {
        unknown_domain(d, w, req->thread, gen, r);
        rateld_rls_free(&w->rls_pool, r);
        return;
    }
    match_limits(erl, r);
    if ((why = queue_items(d, w, req->thread, r))) {
        answer_status(d, req->thread, call, RATEL_GRPC_INVALID_ARGUMENT, why);
        rateld_rls_free(&w->rls_pool, r);
        return;
    }
    if (!decided_by_store_any(r)) {
        answer_call(d, req->thread, gen, r, NULL, r->start_us);
        rateld_rls_free(&w->rls_pool, r);
    }
}

/* grpc.health.v1.Health/Check: SERVING while the store is ready (as
   /readyz), for "" and the rate limit service; for the rate limit quota
   service (which assigns without the store) SERVING while an rlqs:
   section configures it; NOT_FOUND for others. */
static void health_check(rateld_t *d, ratel_grpc_call_t *call,
                         const ratel_grpc_request_t *req)
{
    Grpc__Health__V1__HealthCheckRequest *q =
        grpc__health__v1__health_check_request__unpack(NULL, req->message_len,
                                                       req->message);
    Grpc__Health__V1__HealthCheckResponse resp =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    ratel_store_health_t h;
    int rlqs, known;

    if (!q) {
        answer_status(d, req->thread, call, RATEL_GRPC_INTERNAL,
                      "cannot decode the HealthCheckRequest");
        return;
    }
    rlqs = strcmp(q->service, RATELD_RLQS_SERVICE) == 0;
    known = !q->service[0] || rlqs ||
            !strcmp(q->service, "envoy.service.ratelimit.v3.RateLimitService");
    grpc__health__v1__health_check_request__free_unpacked(q, NULL);
    if (!known || (rlqs && !rateld_rlqs_on(d, req->thread))) {
        answer_status(d, req->thread, call, RATEL_GRPC_NOT_FOUND,
                      rlqs ? "the rate limit quota service is not configured "
                             "(rlqs: in rateld's configuration)"
                           : "unknown service; served: \"\", "
                             "envoy.service.ratelimit.v3.RateLimitService "
                             "and, with rlqs:, " RATELD_RLQS_SERVICE);
        return;
    }
    resp.status =
        rlqs || (ratel_store_health(d->store, &h) == 0 && h.up)
            ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    rateld_metrics_grpc(d->metrics, req->thread, RATEL_GRPC_OK);
    answer_packed(call, &resp.base);
}

void rateld_grpc_handle(void *ud, ratel_grpc_call_t *call,
                        const ratel_grpc_request_t *req)
{
    rateld_t *d = ud;

    if (strcmp(req->path, RLS_PATH) == 0)
        should_rate_limit(d, call, req);
    else if (strcmp(req->path, HEALTH_CHECK) == 0)
        health_check(d, call, req);
    else if (strcmp(req->path, HEALTH_WATCH) == 0)
        answer_status(d, req->thread, call, RATEL_GRPC_UNIMPLEMENTED,
                      "Health/Watch is not served; use Health/Check");
    else
        answer_status(d, req->thread, call, RATEL_GRPC_UNIMPLEMENTED,
                      "unknown method; served: " RLS_PATH ", " HEALTH_CHECK);
}
