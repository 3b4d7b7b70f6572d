/*
 * rlqs.c - rateld as Envoy's Rate Limit Quota Service
 * (envoy.service.rate_limit_quota.v3.RateLimitQuotaService/
 * StreamRateLimitQuotas; docs/envoy.md): one bidirectional stream per
 * Envoy on the gRPC listener (h2.c's streaming calls).
 *
 * An Envoy reports the usage of its buckets; the first report of a
 * bucket_id subscribes its stream to it. The rlqs: section maps the
 * bucket_id to a policy and a key (config_rlqs.c): streams reporting the
 * same policy and key share one bucket, whose rate rlqs_share.c splits
 * among them. Each stream is answered at once for a new subscription
 * and whenever its share is due (a timer on its worker's loop every
 * TICK_MS re-decides the worker's streams): a token bucket with a TTL, a
 * blanket rule for an unmatched bucket_id (or an AbandonAction), an
 * AbandonAction for a bucket a reload dropped, and, as rateld stops,
 * every assignment again with a TTL of 0 (expired) before the stream is
 * finished.
 *
 * Threads. A stream lives on its worker's thread; the buckets are shared
 * by every worker and kept under one mutex. A bucket copies what it needs
 * of the configuration (its rate, its policy's name), so a reload frees
 * the old configuration without waiting for the streams.
 *
 * Messages are decoded by protobuf-c with an allocator that refuses to
 * hold more than DECODE_BYTES for one message.
 */
#include "app/log.h"
#include "rateld/rateld.h"
#include "rateld/rlqs.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb-c.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICK_MS 100
#define SLOTS 4096             /* the buckets' hash table */
#define STREAM_SUBS_MAX 4096   /* bucket_ids one stream may subscribe to */
#define DECODE_BYTES (4 << 20) /* one decoded message, at most */

typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports
    reports_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaUsageReports__BucketQuotaUsage
    usage_t;
typedef Envoy__Service__RateLimitQuota__V3__BucketId bucket_id_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse response_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction
    action_t;
typedef Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction__QuotaAssignmentAction
    assign_t;

typedef struct bucket_s bucket_t;
typedef struct stream_s stream_t;

/* One stream's subscription to one bucket, by one bucket_id. */
typedef struct sub_s {
    rateld_share_t share; /* under the lock */
    bucket_t *bucket;
    struct sub_s *next; /* the stream's subscriptions */
    bucket_id_t *id;    /* as reported (protobuf-c's, malloc'd) */
    char *canonical;    /* its pairs sorted, to find it again */
    int in_stream;      /* still the stream's (else only the bucket's) */
} sub_t;

/* A policy and key: the streams sharing its rate. */
struct bucket_s {
    bucket_t *next; /* the hash chain */
    char *key;
    rateld_share_rule_t rule;
    int metric; /* the policy's metrics index */
    sub_t **subs;
    rateld_share_t **shares; /* subs[i]->share */
    size_t n, cap;
};

struct stream_s {
    stream_t *prev, *next; /* the worker's streams */
    rateld_t *d;
    unsigned thread;
    ratel_grpc_call_t *call;
    char domain[128];
    uint64_t epoch; /* the configuration its subscriptions were matched by */
    int matched;    /* epoch is set */
    sub_t *subs;
    size_t nsubs;
};

/* Each worker's streams and timer (its thread only). */
typedef struct rlqs_worker_s {
    rateld_t *d;
    unsigned thread;
    stream_t *streams;
    struct event *tick;
    int64_t last_sweep_us;
} rlqs_worker_t;

struct rateld_rlqs_s {
    pthread_mutex_t lock;
    bucket_t *table[SLOTS];
    rlqs_worker_t *workers;
    unsigned threads;
};

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------- decoding */

/* protobuf-c's allocations for one message, counted. */
typedef struct budget_s {
    size_t used;
} budget_t;

static void *budget_alloc(void *data, size_t size)
{
    budget_t *b = data;

    if (size > DECODE_BYTES - b->used)
        return NULL;
    b->used += size;
    return malloc(size);
}

static void budget_free(void *data, void *p)
{
    (void)data;
    free(p);
}

/* Checks a usage; NULL, or why it is refused. */
static const char *usage_invalid(const usage_t *u)
{
    const bucket_id_t *id = u->bucket_id;

    if (!id || id->n_bucket == 0)
        return "a usage has no bucket_id (at least one pair)";
    if (id->n_bucket > 32)
        return "a bucket_id has more than 32 pairs";
    for (size_t i = 0; i < id->n_bucket; i++)
        if (!id->bucket[i]->key[0] || !id->bucket[i]->value[0] ||
            strlen(id->bucket[i]->key) >= RATELD_RLQS_NAME_MAX ||
            strlen(id->bucket[i]->value) >= RATELD_RLQS_VALUE_MAX)
            return "a bucket_id pair has an empty or too long name or value "
                   "(1..63 and 1..255 bytes)";
    if (!u->time_elapsed ||
        (u->time_elapsed->seconds <= 0 && u->time_elapsed->nanos <= 0) ||
        u->time_elapsed->seconds < 0 || u->time_elapsed->seconds > 86400 * 366)
        return "a usage's time_elapsed is missing, not positive or above a "
               "year";
    return NULL;
}

/* Checks a message of the stream; NULL, or why it is refused. */
static const char *reports_invalid(const stream_t *s, const reports_t *q)
{
    if (!s->domain[0] && !q->domain[0])
        return "the first report names no domain";
    if (s->domain[0] && q->domain[0] && strcmp(s->domain, q->domain))
        return "the domain changed within the stream (open another stream)";
    if (strlen(q->domain) >= sizeof s->domain)
        return "the domain is longer than 127 bytes";
    for (size_t i = 0; i < q->n_bucket_quota_usages; i++) {
        const usage_t *u = q->bucket_quota_usages[i]->value;
        const char *why = u ? usage_invalid(u) : "a usage is empty";
        if (why)
            return why;
    }
    return NULL;
}

/* ----------------------------------------------------------- buckets */

static size_t slot_of(const char *key)
{
    uint64_t h = 1469598103934665603ull;

    for (; *key; key++)
        h = (h ^ (unsigned char)*key) * 1099511628211ull;
    return (size_t)(h % SLOTS);
}

/* The bucket of `key`, made when missing (with `rule`); NULL out of
   memory. Under the lock. */
static bucket_t *bucket_get(struct rateld_rlqs_s *q, const char *key,
                            const rateld_share_rule_t *rule, int metric)
{
    bucket_t **slot = &q->table[slot_of(key)], *b;

    for (b = *slot; b; b = b->next)
        if (strcmp(b->key, key) == 0)
            break;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || !(b->key = strdup(key))) {
            free(b);
            return NULL;
        }
        b->next = *slot;
        *slot = b;
    }
    b->rule = *rule; /* a reload's new rate applies from now on */
    b->metric = metric;
    return b;
}

/* Adds sub to its bucket; -1 out of memory. Under the lock. */
static int bucket_add(bucket_t *b, sub_t *sub)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4;
        sub_t **s = realloc(b->subs, cap * sizeof *s);
        rateld_share_t **sh = s ? realloc(b->shares, cap * sizeof *sh) : NULL;
        if (s)
            b->subs = s;
        if (!sh)
            return -1;
        b->shares = sh;
        b->cap = cap;
    }
    b->subs[b->n] = sub;
    b->shares[b->n] = &sub->share;
    b->n++;
    sub->bucket = b;
    return 0;
}

static void sub_free(sub_t *sub)
{
    if (sub->id)
        protobuf_c_message_free_unpacked(&sub->id->base, NULL);
    free(sub->canonical);
    free(sub);
}

/* Drops the subscriptions whose stream has gone and whose assignments
   have ended, and the buckets left without any. Under the lock. */
static void sweep(struct rateld_rlqs_s *q, int64_t now)
{
    for (size_t i = 0; i < SLOTS; i++) {
        bucket_t **pb = &q->table[i];
        while (*pb) {
            bucket_t *b = *pb;
            size_t k = 0;
            for (size_t j = 0; j < b->n; j++) {
                if (!b->subs[j]->in_stream &&
                    rateld_share_done(&b->subs[j]->share, now)) {
                    sub_free(b->subs[j]);
                    continue;
                }
                b->subs[k] = b->subs[j];
                b->shares[k] = &b->subs[k]->share;
                k++;
            }
            b->n = k;
            if (b->n) {
                pb = &b->next;
                continue;
            }
            *pb = b->next;
            free(b->subs);
            free(b->shares);
            free(b->key);
            free(b);
        }
    }
}

/* -------------------------------------------------------- responses */

/* One action of a response, with what it points to. */
typedef struct slot_s {
    action_t action;
    assign_t assign;
    Google__Protobuf__Duration ttl, fill;
    Envoy__Type__V3__RateLimitStrategy strategy;
    Envoy__Type__V3__TokenBucket bucket;
    Google__Protobuf__UInt32Value per_fill;
    Envoy__Service__RateLimitQuota__V3__RateLimitQuotaResponse__BucketAction__AbandonAction
        abandon;
} slot_t;

/* A response being made for one stream: its actions and their metrics. */
typedef struct answer_s {
    slot_t *slots;
    action_t **actions;
    size_t n, cap;
} answer_t;

static void duration_us(Google__Protobuf__Duration *d, int64_t us)
{
    google__protobuf__duration__init(d);
    d->seconds = us / 1000000;
    d->nanos = (int32_t)(us % 1000000) * 1000;
}

/* The next action of the answer, for bucket_id `id`; NULL out of
   memory. The slots do not move until the answer is sent. */
static action_t *answer_add(answer_t *a, bucket_id_t *id)
{
    slot_t *slot;

    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        slot_t *s = realloc(a->slots, cap * sizeof *s);
        if (!s)
            return NULL;
        a->slots = s;
        a->cap = cap;
    }
    slot = &a->slots[a->n++];
    envoy__service__rate_limit_quota__v3__rate_limit_quota_response__bucket_action__init(
        &slot->action);
    slot->action.bucket_id = id;
    return &slot->action;
}

/* A token bucket of the grant (DENY_ALL for 0), or a blanket rule, for
   ttl_us. */
static void assign(action_t *act, const rateld_share_grant_t *g,
                   int64_t period_us, int blanket, int64_t ttl_us)
{
    slot_t *slot = (slot_t *)((char *)act - offsetof(slot_t, action));
    Envoy__Type__V3__RateLimitStrategy *st = &slot->strategy;

    envoy__service__rate_limit_quota__v3__rate_limit_quota_response__bucket_action__quota_assignment_action__init(
        &slot->assign);
    envoy__type__v3__rate_limit_strategy__init(st);
    duration_us(&slot->ttl, ttl_us);
    slot->assign.assignment_time_to_live = &slot->ttl;
    slot->assign.rate_limit_strategy = st;
    act->bucket_action_case =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__BUCKET_ACTION_QUOTA_ASSIGNMENT_ACTION;
    act->quota_assignment_action = &slot->assign;
    if (blanket >= 0 || g->rate == 0) {
        st->strategy_case =
            ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_BLANKET_RULE;
        st->blanket_rule =
            blanket >= 0
                ? (Envoy__Type__V3__RateLimitStrategy__BlanketRule)blanket
                : ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__DENY_ALL;
        return;
    }
    envoy__type__v3__token_bucket__init(&slot->bucket);
    google__protobuf__uint32_value__init(&slot->per_fill);
    duration_us(&slot->fill, period_us);
    slot->per_fill.value = g->rate;
    slot->bucket.max_tokens = g->burst;
    slot->bucket.tokens_per_fill = &slot->per_fill;
    slot->bucket.fill_interval = &slot->fill;
    st->strategy_case =
        ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__STRATEGY_TOKEN_BUCKET;
    st->token_bucket = &slot->bucket;
}

static void abandon(action_t *act)
{
    slot_t *slot = (slot_t *)((char *)act - offsetof(slot_t, action));

    envoy__service__rate_limit_quota__v3__rate_limit_quota_response__bucket_action__abandon_action__init(
        &slot->abandon);
    act->bucket_action_case =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__BUCKET_ACTION__BUCKET_ACTION_ABANDON_ACTION;
    act->abandon_action = &slot->abandon;
}

/* Sends the answer's actions as one RateLimitQuotaResponse (none: nothing
   is sent) and empties it. */
static void answer_send(stream_t *s, answer_t *a)
{
    response_t resp =
        ENVOY__SERVICE__RATE_LIMIT_QUOTA__V3__RATE_LIMIT_QUOTA_RESPONSE__INIT;
    action_t **list;
    uint8_t *buf;
    size_t len;

    if (a->n == 0)
        return;
    list = malloc(a->n * sizeof *list);
    for (size_t i = 0; list && i < a->n; i++)
        list[i] = &a->slots[i].action;
    resp.n_bucket_action = a->n;
    resp.bucket_action = list;
    len = list ? protobuf_c_message_get_packed_size(&resp.base) : 0;
    buf = list ? malloc(len ? len : 1) : NULL;
    if (buf) {
        protobuf_c_message_pack(&resp.base, buf);
        ratel_grpc_send(s->call, buf, len);
    }
    free(buf);
    free(list);
    a->n = 0;
}

/* ----------------------------------------------------- subscriptions */

static int cmp_pair(const void *a, const void *b)
{
    const rateld_rlqs_pair_t *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* A bucket_id's pairs, sorted by name, and its canonical text
   (LEN:NAME=LEN:VALUE, ...) into text (cap bytes); -1 when it does not
   fit or a name is given twice. */
static int id_pairs(const bucket_id_t *id, rateld_rlqs_pair_t *pairs,
                    char *text, size_t cap)
{
    size_t len = 0;

    for (size_t i = 0; i < id->n_bucket; i++) {
        pairs[i].name = id->bucket[i]->key;
        pairs[i].value = id->bucket[i]->value;
    }
    qsort(pairs, id->n_bucket, sizeof *pairs, cmp_pair);
    for (size_t i = 0; i < id->n_bucket; i++) {
        int m = snprintf(text + len, cap - len, "%zu:%s=%zu:%s,",
                         strlen(pairs[i].name), pairs[i].name,
                         strlen(pairs[i].value), pairs[i].value);
        if (m < 0 || (size_t)m >= cap - len ||
            (i && strcmp(pairs[i - 1].name, pairs[i].name) == 0))
            return -1;
        len += (size_t)m;
    }
    return 0;
}

/* The stream's subscription by canonical id, or NULL. */
static sub_t *stream_sub(stream_t *s, const char *canonical)
{
    for (sub_t *sub = s->subs; sub; sub = sub->next)
        if (strcmp(sub->canonical, canonical) == 0)
            return sub;
    return NULL;
}

/* A copy of a bucket_id that outlives the message (malloc'd). */
static bucket_id_t *id_copy(const bucket_id_t *id)
{
    size_t len = protobuf_c_message_get_packed_size(&id->base);
    uint8_t *buf = malloc(len ? len : 1);
    bucket_id_t *copy = NULL;

    if (buf) {
        protobuf_c_message_pack(&id->base, buf);
        copy = envoy__service__rate_limit_quota__v3__bucket_id__unpack(
            NULL, len, buf);
    }
    free(buf);
    return copy;
}

/* Subscribes stream s by `id` to the bucket of `key` (rule and metric its
   policy's); NULL out of memory. */
static sub_t *subscribe(stream_t *s, const bucket_id_t *id,
                        const char *canonical, const char *key,
                        const rateld_rlqs_bucket_t *cfg, int metric)
{
    struct rateld_rlqs_s *q = s->d->rlqs;
    sub_t *sub = calloc(1, sizeof *sub);
    bucket_t *b;

    if (!sub || !(sub->id = id_copy(id)) ||
        !(sub->canonical = strdup(canonical))) {
        if (sub)
            sub_free(sub);
        return NULL;
    }
    pthread_mutex_lock(&q->lock);
    b = bucket_get(q, key, &cfg->rule, metric);
    if (!b || bucket_add(b, sub) != 0) {
        pthread_mutex_unlock(&q->lock);
        sub_free(sub);
        return NULL;
    }
    pthread_mutex_unlock(&q->lock);
    sub->in_stream = 1;
    sub->next = s->subs;
    s->subs = sub;
    s->nsubs++;
    return sub;
}

/* The stream lets go of sub: its share closes (held until it ends) and
   the sweep frees it. */
static void unsubscribe(stream_t *s, sub_t *sub)
{
    struct rateld_rlqs_s *q = s->d->rlqs;

    for (sub_t **p = &s->subs; *p; p = &(*p)->next) {
        if (*p == sub) {
            *p = sub->next;
            s->nsubs--;
            break;
        }
    }
    pthread_mutex_lock(&q->lock);
    sub->share.closed = 1;
    sub->in_stream = 0;
    pthread_mutex_unlock(&q->lock);
}

/* Decides sub's share now (forced: even unchanged) and adds what is due
   to the answer. */
static void decide(stream_t *s, sub_t *sub, answer_t *a, int64_t now, int force)
{
    struct rateld_rlqs_s *q = s->d->rlqs;
    bucket_t *b = sub->bucket;
    rateld_share_grant_t g;
    rateld_share_rule_t rule;
    size_t i = 0;
    int due, metric;
    action_t *act;

    pthread_mutex_lock(&q->lock);
    while (i < b->n && b->subs[i] != sub)
        i++;
    rule = b->rule;
    metric = b->metric;
    due = rateld_share_decide(b->shares, b->n, i, &rule, now, force, &g);
    pthread_mutex_unlock(&q->lock);
    if (!due || !(act = answer_add(a, sub->id)))
        return;
    assign(act, &g, rule.period_us, -1, rule.ttl_us);
    rateld_metrics_rlqs_action(s->d->metrics, s->thread, metric,
                               RATELD_RLQS_ASSIGNED);
}

/* ----------------------------------------------------------- reports */

/* The configuration the worker holds for this callback, taken if it
   holds none (and then let go by gen_release: *took says so). */
static rateld_gen_t *gen_hold(stream_t *s, int *took)
{
    rateld_worker_t *w = &s->d->workers[s->thread];

    *took = w->gen == NULL;
    return rateld_take_gen(s->d, w);
}

static void gen_release(stream_t *s, int took)
{
    rateld_worker_t *w = &s->d->workers[s->thread];

    if (took) {
        w->gen = NULL;
        atomic_store(&w->active, 0);
    }
}

/* What an unmatched bucket_id gets: the configured blanket rule, or an
   AbandonAction. */
static void unmatched(stream_t *s, const rateld_config_t *c,
                      const bucket_id_t *id, answer_t *a)
{
    const rateld_rlqs_config_t *rc = c->rlqs;
    action_t *act = answer_add(a, (bucket_id_t *)id);
    static const rateld_share_grant_t none = {0, 0};

    rateld_metrics_rlqs_unmatched(s->d->metrics, s->thread);
    if (!act)
        return;
    if (rc->unmatched == RATELD_RLQS_UNMATCHED_ABANDON)
        abandon(act);
    else
        assign(
            act, &none, 0,
            rc->unmatched == RATELD_RLQS_UNMATCHED_ALLOW
                ? ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__ALLOW_ALL
                : ENVOY__TYPE__V3__RATE_LIMIT_STRATEGY__BLANKET_RULE__DENY_ALL,
            (int64_t)rc->ttl_ms * 1000);
}

/* One usage of a report: its subscription (made on the first), its
   demand, and what is due. -1 when the stream is over its subscriptions
   or out of memory. */
static int usage(stream_t *s, const rateld_gen_t *gen, const usage_t *u,
                 answer_t *a, int64_t now)
{
    rateld_rlqs_pair_t pairs[32];
    char canonical[12 * 1024], key[RATELD_RLQS_KEY_MAX];
    const rateld_rlqs_bucket_t *cfg;
    sub_t *sub;
    int fresh = 0;

    if (id_pairs(u->bucket_id, pairs, canonical, sizeof canonical) != 0)
        return -2;
    sub = stream_sub(s, canonical);
    if (!sub) {
        cfg = rateld_rlqs_match(gen->config, s->domain, pairs,
                                u->bucket_id->n_bucket, key, sizeof key);
        if (!cfg) {
            unmatched(s, gen->config, u->bucket_id, a);
            return 0;
        }
        if (s->nsubs >= STREAM_SUBS_MAX)
            return -1;
        sub = subscribe(s, u->bucket_id, canonical, key, cfg,
                        gen->metric[cfg->policy]);
        if (!sub)
            return -1;
        fresh = 1;
    }
    pthread_mutex_lock(&s->d->rlqs->lock);
    rateld_share_report(&sub->share, &sub->bucket->rule,
                        u->num_requests_allowed + u->num_requests_denied,
                        u->time_elapsed->seconds * 1000000 +
                            u->time_elapsed->nanos / 1000);
    pthread_mutex_unlock(&s->d->rlqs->lock);
    rateld_metrics_rlqs_report(s->d->metrics, s->thread, sub->bucket->metric);
    decide(s, sub, a, now, fresh);
    return 0;
}

/* A RateLimitQuotaUsageReports message of the stream. */
static void on_message(void *ud, void *state, const uint8_t *msg, size_t len)
{
    stream_t *s = state;
    budget_t budget = {0};
    ProtobufCAllocator alloc = {budget_alloc, budget_free, &budget};
    reports_t *q =
        envoy__service__rate_limit_quota__v3__rate_limit_quota_usage_reports__unpack(
            &alloc, len, msg);
    const char *why = q ? reports_invalid(s, q) : NULL;
    answer_t a = {0};
    int64_t now = now_us();
    int took, rc = 0;
    rateld_gen_t *gen;

    (void)ud;
    if (!q || why) {
        rateld_metrics_grpc(s->d->metrics, s->thread,
                            q ? RATEL_GRPC_INVALID_ARGUMENT
                              : RATEL_GRPC_INTERNAL);
        ratel_grpc_finish(s->call,
                          q ? RATEL_GRPC_INVALID_ARGUMENT : RATEL_GRPC_INTERNAL,
                          q ? why
                            : "cannot decode the RateLimitQuotaUsageReports "
                              "(not protobuf, or more than 4 MiB once "
                              "decoded)");
        if (q)
            protobuf_c_message_free_unpacked(&q->base, &alloc);
        return;
    }
    if (!s->domain[0])
        snprintf(s->domain, sizeof s->domain, "%s", q->domain);
    gen = gen_hold(s, &took);
    if (!s->matched) {
        s->epoch = gen->epoch;
        s->matched = 1;
    }
    for (size_t i = 0; i < q->n_bucket_quota_usages && rc == 0; i++)
        rc = usage(s, gen, q->bucket_quota_usages[i]->value, &a, now);
    gen_release(s, took);
    answer_send(s, &a);
    free(a.slots);
    protobuf_c_message_free_unpacked(&q->base, &alloc);
    if (rc)
        ratel_grpc_finish(s->call,
                          rc == -2 ? RATEL_GRPC_INVALID_ARGUMENT
                                   : RATEL_GRPC_RESOURCE_EXHAUSTED,
                          rc == -2 ? "a bucket_id names a pair twice or is "
                                     "too long"
                                   : "more than 4096 bucket_ids on one "
                                     "stream, or out of memory");
}

/* ------------------------------------------------------------- ticks */

/*
 * After a reload: each subscription is matched again; one whose bucket_id
 * no longer maps to the same policy and key gets an AbandonAction (the
 * Envoy subscribes again with its next report, to whatever the new
 * configuration says), the others take their policy's new rate.
 */
static void rematch(stream_t *s, const rateld_gen_t *gen, answer_t *a)
{
    sub_t *sub, *next;

    for (sub = s->subs; sub; sub = next) {
        rateld_rlqs_pair_t pairs[32];
        char canonical[12 * 1024], key[RATELD_RLQS_KEY_MAX];
        const rateld_rlqs_bucket_t *cfg = NULL;
        action_t *act;
        next = sub->next;
        if (id_pairs(sub->id, pairs, canonical, sizeof canonical) == 0)
            cfg = rateld_rlqs_match(gen->config, s->domain, pairs,
                                    sub->id->n_bucket, key, sizeof key);
        if (cfg && strcmp(key, sub->bucket->key) == 0) {
            pthread_mutex_lock(&s->d->rlqs->lock);
            sub->bucket->rule = cfg->rule;
            sub->bucket->metric = gen->metric[cfg->policy];
            pthread_mutex_unlock(&s->d->rlqs->lock);
            continue;
        }
        if ((act = answer_add(a, sub->id))) {
            abandon(act);
            rateld_metrics_rlqs_action(s->d->metrics, s->thread,
                                       sub->bucket->metric,
                                       RATELD_RLQS_ABANDONED);
        }
        answer_send(s, a); /* before sub->id goes with the sweep */
        unsubscribe(s, sub);
    }
}

/* Every TICK_MS on each worker: its streams' shares that are due, after
   a reload the subscriptions matched again; on worker 0, once a second,
   the sweep of what has ended. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rlqs_worker_t *rw = arg;
    rateld_t *d = rw->d;
    int64_t now = now_us();
    answer_t a = {0};

    (void)fd;
    (void)what;
    for (stream_t *s = rw->streams; s; s = s->next) {
        int took;
        rateld_gen_t *gen = gen_hold(s, &took);
        if (s->matched && s->epoch != gen->epoch) {
            rematch(s, gen, &a);
            s->epoch = gen->epoch;
        }
        gen_release(s, took);
        for (sub_t *sub = s->subs; sub; sub = sub->next)
            decide(s, sub, &a, now, 0);
        answer_send(s, &a);
    }
    free(a.slots);
    if (rw->thread == 0 && now - rw->last_sweep_us >= 1000000) {
        rw->last_sweep_us = now;
        pthread_mutex_lock(&d->rlqs->lock);
        sweep(d->rlqs, now);
        pthread_mutex_unlock(&d->rlqs->lock);
    }
}

/* ----------------------------------------------------------- streams */

int rateld_rlqs_on(rateld_t *d, unsigned thread)
{
    rateld_worker_t *w = &d->workers[thread];
    int took = w->gen == NULL;
    int on = d->rlqs && rateld_take_gen(d, w)->config->rlqs;

    if (took) {
        w->gen = NULL;
        atomic_store(&w->active, 0);
    }
    return on;
}

static void *on_open(void *ud, ratel_grpc_call_t *call,
                     const ratel_grpc_request_t *req)
{
    rateld_t *d = ud;
    rlqs_worker_t *rw;
    stream_t *s;

    if (!rateld_rlqs_on(d, req->thread)) {
        rateld_metrics_grpc(d->metrics, req->thread, RATEL_GRPC_UNIMPLEMENTED);
        ratel_grpc_finish(call, RATEL_GRPC_UNIMPLEMENTED,
                          "the rate limit quota service is not configured "
                          "(rlqs: in rateld's configuration)");
        return NULL;
    }
    if (!(s = calloc(1, sizeof *s)))
        return NULL;
    rw = &d->rlqs->workers[req->thread];
    s->d = d;
    s->thread = req->thread;
    s->call = call;
    s->next = rw->streams;
    if (rw->streams)
        rw->streams->prev = s;
    rw->streams = s;
    rateld_metrics_rlqs_stream(d->metrics, s->thread, 1);
    return s;
}

/* rateld stops: every assignment again, expired (TTL 0), then the end. */
static void on_drain(void *ud, void *state)
{
    stream_t *s = state;
    answer_t a = {0};

    (void)ud;
    for (sub_t *sub = s->subs; sub; sub = sub->next) {
        action_t *act = answer_add(&a, sub->id);
        rateld_share_grant_t g;
        int64_t period;
        pthread_mutex_lock(&s->d->rlqs->lock);
        g.rate = sub->share.rate;
        g.burst = sub->share.burst;
        period = sub->bucket->rule.period_us;
        pthread_mutex_unlock(&s->d->rlqs->lock);
        if (!act)
            break;
        assign(act, &g, period, -1, 0);
        rateld_metrics_rlqs_action(s->d->metrics, s->thread,
                                   sub->bucket->metric, RATELD_RLQS_EXPIRED);
    }
    answer_send(s, &a);
    free(a.slots);
    ratel_grpc_finish(s->call, RATEL_GRPC_OK, NULL);
}

static void on_closed(void *ud, void *state)
{
    stream_t *s = state;
    rlqs_worker_t *rw = &s->d->rlqs->workers[s->thread];

    (void)ud;
    while (s->subs)
        unsubscribe(s, s->subs);
    if (s->prev)
        s->prev->next = s->next;
    else
        rw->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    rateld_metrics_rlqs_stream(s->d->metrics, s->thread, 0);
    free(s);
}

const ratel_grpc_stream_method_t rateld_rlqs_method = {
    .path = "/" RATELD_RLQS_SERVICE "/StreamRateLimitQuotas",
    .open = on_open,
    .message = on_message,
    .drain = on_drain,
    .closed = on_closed,
};

int rateld_rlqs_start(rateld_t *d)
{
    struct rateld_rlqs_s *q = calloc(1, sizeof *q);
    struct timeval tick = {0, TICK_MS * 1000};

    if (!q || !(q->workers = calloc(d->threads, sizeof *q->workers))) {
        free(q);
        return -1;
    }
    pthread_mutex_init(&q->lock, NULL);
    q->threads = d->threads;
    d->rlqs = q;
    for (unsigned t = 0; t < d->threads; t++) {
        rlqs_worker_t *rw = &q->workers[t];
        rw->d = d;
        rw->thread = t;
        rw->tick = event_new(ratel_http_server_base(d->http, t), -1, EV_PERSIST,
                             on_tick, rw);
        if (!rw->tick || event_add(rw->tick, &tick) != 0)
            return -1;
    }
    return 0;
}

void rateld_rlqs_stop(rateld_t *d)
{
    for (unsigned t = 0; d->rlqs && t < d->rlqs->threads; t++) {
        if (d->rlqs->workers[t].tick)
            event_free(d->rlqs->workers[t].tick);
        d->rlqs->workers[t].tick = NULL;
    }
}

void rateld_rlqs_free(rateld_t *d)
{
    struct rateld_rlqs_s *q = d->rlqs;

    if (!q)
        return;
    rateld_rlqs_stop(d);
    /* Every stream has closed with its connection: what is left is held
       by the buckets alone. */
    for (size_t i = 0; i < SLOTS; i++) {
        bucket_t *b, *next;
        for (b = q->table[i]; b; b = next) {
            next = b->next;
            for (size_t j = 0; j < b->n; j++)
                sub_free(b->subs[j]);
            free(b->subs);
            free(b->shares);
            free(b->key);
            free(b);
        }
    }
    pthread_mutex_destroy(&q->lock);
    free(q->workers);
    free(q);
    d->rlqs = NULL;
}
