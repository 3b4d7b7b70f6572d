/*
 * ngx_http_ratel_redis.c - a zone's Redis mode (`ratel_zone zone=NAME:SIZE
 * store=redis://...;`): each worker has its own Redis store and its calls
 * on the worker's loop (libratel's asynchronous API on the nginx transport,
 * ngx_http_ratel_transport.c), so a request waits on an nginx event while
 * Redis decides and no worker ever blocks on Redis.
 *
 * What Redis decides is libratel's, the same as rateld's: the store key
 * "POLICY:value" the handler builds, the module or the Functions library
 * in Redis, pipelining (one write per connection per loop turn), Cluster
 * and Sentinel routing, TLS, the deadline (timeout_ms) and the failure
 * policy's `open` and `closed`. Settings come from the URL's query, as for
 * rateld's store.
 *
 * What every worker must share lives in the zone's memory instead of each
 * worker's store (ngx_http_ratel_shm.c): the deny cache (a denial Redis
 * gave answers the key in every worker without a round trip) and the
 * `local` failure policy, which decides a group in the zone exactly as a
 * zone without a store does, so a limit holds across workers while Redis
 * is away. The store itself runs with no deny cache and, for `local`, with
 * `closed`: a group it answers so is decided again in the zone.
 *
 * Graceful shutdown. A worker told to quit waits for its timers that are
 * not cancelable: while calls are in flight a guard timer of that kind is
 * armed, so the requests waiting on Redis are answered (by Redis or, at
 * their deadline, by the failure policy) before the worker exits. Then it
 * gives back the zone's slices of leased keys that no newer configuration
 * spends (ngx_http_ratel_lease.c), waiting for Redis's answers (at most
 * the URL's timeout_ms).
 *
 * Leased policies: each worker's store spends from the zone's table of
 * slices (ngx_http_ratel_shm.c), so that the workers of one nginx spend
 * the same slices and fetch them as one holder.
 */
#include "ngx_http_ratel.h"
#include "ngx_http_ratel_transport.h"

#include "ratel_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The guard's period: longer than any command's deadline is not needed,
   it is re-armed while calls are in flight. */
#define REDIS_GUARD_MS 1000
/* Longest a cached denial answers (the store's deny_cache_max_ms): a
   refund in another process is not seen meanwhile. */
#define REDIS_DENY_MAX_MS 10000

typedef struct {
    ngx_http_ratel_zone_t *zone;
    char *url;            /* NUL-terminated copy of store=URL */
    int local;            /* on_failure=local (the default): in the zone */
    int deny_cache;       /* deny_cache=0 turns the zone's cache off */
    ratel_store_t *store; /* this worker's */
    ratel_async_t *async; /* this worker's, on its loop */
    ngx_uint_t pending;   /* calls in flight */
    ngx_event_t guard;    /* armed while calls are in flight */
    ngx_log_t *log;
    uint64_t transitions;      /* the store's health changes logged so far */
    int exiting;               /* calls told by the exit are not resumed */
    struct redis_job_s *spare; /* jobs of ended calls, for the next */
    ngx_uint_t nspare;
} redis_zone_t;

/* One request's call. */
typedef struct redis_job_s redis_job_t;
struct redis_job_s {
    redis_zone_t *rz;
    int64_t now_us;
    void (*done)(void *data);
    void *data;
    redis_job_t *next; /* the zone's spare jobs */
};

/* Spare jobs a worker keeps for its next calls, at most. */
#define REDIS_SPARE_MAX 64

/*
 * A refund or a release sent on a request's behalf (not waited for): a
 * copy of its item, which owns a copy of its key, and the step it is at.
 */
typedef struct {
    redis_zone_t *rz;
    ratel_batch_item_t it;
    int64_t now_us;
    ngx_uint_t step; /* STEP_* */
    char key[1];
} redis_refund_t;

/*
 * The worker's store options: the URL's query, but for what the zone
 * keeps itself: no deny cache in the store, and `closed` for `local`.
 */
static ratel_redis_options_t redis_options(const redis_zone_t *rz)
{
    return (ratel_redis_options_t){
        .url = rz->url,
        .lazy_connect = 1,
        .deny_cache_entries = -1,
        .on_failure = rz->local ? RATEL_FAILURE_CLOSED : RATEL_FAILURE_DEFAULT,
    };
}

/* on_failure and deny_cache from the URL (already checked by the store). */
static void read_query(redis_zone_t *rz)
{
    ratel_redis_url_t *u = malloc(sizeof *u);

    rz->local = 1;
    rz->deny_cache = 1;
    if (u && ratel__redis_url_parse(rz->url, u, NULL, 0) == 0) {
        rz->local = u->on_failure == RATEL_FAILURE_DEFAULT ||
                    u->on_failure == RATEL_FAILURE_LOCAL;
        rz->deny_cache = u->deny_cache != 0;
    }
    free(u);
}

char *ngx_http_ratel_redis_conf(ngx_conf_t *cf, ngx_http_ratel_zone_t *zone,
                                ngx_str_t *url)
{
    ratel_redis_options_t o;
    redis_zone_t *rz;
    ratel_store_t *store = NULL;
    char err[512], masked[1024];

    rz = ngx_pcalloc(cf->pool, sizeof *rz);
    if (!rz || !(rz->url = ngx_pnalloc(cf->pool, url->len + 1)))
        return NGX_CONF_ERROR;
    ngx_memcpy(rz->url, url->data, url->len);
    rz->url[url->len] = '\0';
    rz->zone = zone;
    if (ngx_strlen(rz->url) != url->len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": store= holds a NUL byte",
                           &zone->name);
        return NGX_CONF_ERROR;
    }
    /* Made and freed at once: the URL, its query and the TLS files are
       checked as the worker will use them, with no connection. The
       message shows the URL with its secrets masked. */
    read_query(rz);
    o = redis_options(rz);
    if (ratel_store_redis_new(&store, &o, err, sizeof err) != 0) {
        (void)ratel__url_mask(rz->url, masked, sizeof masked);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": store=\"%s\": %s", &zone->name,
                           masked, err);
        return NGX_CONF_ERROR;
    }
    if (ratel__redis_tls_insecure(&o))
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "ratel_zone \"%V\": %s",
                           &zone->name, RATEL__TLS_INSECURE_WARNING);
    ratel_store_free(store);
    zone->redis = rz;
    return NGX_CONF_OK;
}

static void on_guard(ngx_event_t *ev)
{
    redis_zone_t *rz = ev->data;

    if (rz->pending > 0) {
        ngx_add_timer(&rz->guard, REDIS_GUARD_MS);
    }
}

/* A call is in flight (the guard keeps a quitting worker for it). */
static void call_started(redis_zone_t *rz)
{
    if (rz->pending++ == 0) {
        ngx_add_timer(&rz->guard, REDIS_GUARD_MS);
    }
}

static void call_ended(redis_zone_t *rz)
{
    rz->pending--;
    if (rz->pending == 0 && rz->guard.timer_set) {
        ngx_del_timer(&rz->guard);
    }
}

/*
 * The store's health changed (libratel does not log): Redis down is said
 * once with its cause, until it answers again. It runs inside a store
 * call on the worker's loop and only reads the store's health.
 */
static void on_health(void *ud)
{
    redis_zone_t *rz = ud;
    ratel_store_health_t h;

    if (ratel_store_health(rz->store, &h) != 0 ||
        h.transitions == rz->transitions)
        return;
    rz->transitions = h.transitions;
    /* Braces: ngx_log_error is an `if` of its own. */
    if (h.up) {
        ngx_log_error(NGX_LOG_NOTICE, rz->log, 0,
                      "ratel_zone \"%V\": Redis decides again (down for "
                      "%L ms)",
                      &rz->zone->name, h.last_outage_ms);
    } else {
        ngx_log_error(NGX_LOG_ERR, rz->log, 0,
                      "ratel_zone \"%V\": Redis is down (%s): the failure "
                      "policy decides until it answers again",
                      &rz->zone->name, h.cause);
    }
}

ngx_int_t ngx_http_ratel_redis_init_worker(ngx_cycle_t *cycle,
                                           ngx_http_ratel_zone_t *zone)
{
    redis_zone_t *rz = zone->redis;
    ratel_redis_options_t o;
    ratel__async_loop_t loop;
    char err[512];

    if (!rz)
        return NGX_OK;
    rz->log = cycle->log;
    rz->guard.handler = on_guard;
    rz->guard.data = rz;
    rz->guard.log = cycle->log;
    o = redis_options(rz);
    if (ratel_store_redis_new(&rz->store, &o, err, sizeof err) != 0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "ratel_zone \"%V\": %s",
                      &zone->name, err);
        return NGX_ERROR;
    }
    ratel_store_watch_health(rz->store, on_health, rz);
    /* Leased keys: the zone's slices, every worker's (one holder). */
    if (ngx_http_ratel_shm_leases(zone))
        (void)ratel__redis_store_set_leases(rz->store,
                                            ngx_http_ratel_shm_leases(zone));
    if (ngx_worker == 0)
        ngx_http_ratel_lease_notice(zone, cycle->log);
    ngx_http_ratel_transport_loop(&loop, cycle->log);
    if (ratel__async_new_on(&rz->async, rz->store, &loop, err, sizeof err) !=
        0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "ratel_zone \"%V\": %s",
                      &zone->name, err);
        ratel_store_free(rz->store);
        rz->store = NULL;
        return NGX_ERROR;
    }
    return NGX_OK;
}

void ngx_http_ratel_redis_exit_worker(ngx_http_ratel_zone_t *zone)
{
    redis_zone_t *rz = zone->redis;

    if (!rz)
        return;
    rz->exiting = 1;
    ratel_async_free(rz->async);
    rz->async = NULL;
    while (rz->spare) {
        redis_job_t *job = rz->spare;
        rz->spare = job->next;
        ngx_free(job);
    }
    rz->nspare = 0;
    ngx_http_ratel_lease_give_back(zone, rz->store);
    ratel_store_free(rz->store);
    rz->store = NULL;
    if (rz->guard.timer_set) {
        ngx_del_timer(&rz->guard);
    }
}

/*
 * Redis could not decide a member and the zone's policy is `local`: the
 * store answered the group `closed` (giving back what Redis had charged
 * of it), and the group is decided in the zone instead.
 */
static void decide_locally(redis_zone_t *rz, ratel_batch_item_t *items,
                           size_t n, int64_t now_us)
{
    int failed = 0;

    for (size_t i = 0; i < n; i++)
        failed |=
            items[i].rc == 0 && items[i].decision.source == RATEL_SOURCE_CLOSED;
    if (!failed || n > RATEL_GROUP_MAX)
        return;
    (void)ngx_http_ratel_shm_decide(rz->zone, items, n, now_us, rz->log);
    for (size_t i = 0; i < n; i++)
        if (items[i].rc == 0)
            items[i].decision.source = RATEL_SOURCE_LOCAL;
}

/* A job for a request's call: a spare one, or a new one. */
static redis_job_t *job_take(redis_zone_t *rz, ngx_log_t *log)
{
    redis_job_t *job = rz->spare;

    if (job == NULL)
        return ngx_alloc(sizeof *job, log);
    rz->spare = job->next;
    rz->nspare--;
    return job;
}

/* The call ended: its job is kept for the next one (not while the worker
   exits: the exit frees the spare ones first), or freed. */
static void job_give(redis_job_t *job)
{
    redis_zone_t *rz = job->rz;

    if (rz->exiting || rz->nspare >= REDIS_SPARE_MAX) {
        ngx_free(job);
        return;
    }
    job->next = rz->spare;
    rz->spare = job;
    rz->nspare++;
}

/*
 * Whether a group waits for reservations (max_wait=): the deny cache is
 * not used for it. A denial's retry time is when a request is admitted
 * without waiting; one that may wait is admitted up to max_wait earlier.
 */
static ngx_uint_t reserving(const ratel_batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].request.max_wait_ms > 0)
            return 1;
    return 0;
}

static void on_batch(void *ud, ratel_batch_item_t *items, size_t n)
{
    redis_job_t *job = ud;
    redis_zone_t *rz = job->rz;

    call_ended(rz);
    /* A worker's exit tells its calls: their requests go with it. */
    if (!rz->exiting) {
        if (rz->local)
            decide_locally(rz, items, n, job->now_us);
        if (rz->deny_cache && !reserving(items, n))
            ngx_http_ratel_shm_remember(rz->zone, items, n, job->now_us,
                                        REDIS_DENY_MAX_MS);
        ngx_http_ratel_shm_count_sources(rz->zone, items, n);
        job->done(job->data);
    }
    job_give(job);
}

ngx_int_t ngx_http_ratel_redis_decide(ngx_http_ratel_zone_t *zone,
                                      ngx_http_request_t *r,
                                      ratel_batch_item_t *items, size_t n,
                                      int64_t now_us, void (*done)(void *data),
                                      void *data)
{
    redis_zone_t *rz = zone->redis;
    redis_job_t *job;
    int rc;

    if (!rz || !rz->async)
        return NGX_ERROR;
    if (rz->deny_cache && !reserving(items, n) &&
        ngx_http_ratel_shm_cached(zone, items, n, now_us) == NGX_OK) {
        ngx_http_ratel_shm_count_sources(zone, items, n);
        return NGX_OK;
    }
    /* Not in the request's pool: the handler holds the request until
       done, and the callback gives the job back (to the next call). */
    job = job_take(rz, r->connection->log);
    if (!job)
        return NGX_ERROR;
    *job = (redis_job_t){rz, now_us, done, data, NULL};
    rc = ratel_async_acquire_batch(rz->async, items, n, now_us, on_batch, job);
    if (rc != 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ratel_zone \"%V\": %s", &zone->name, ratel_strerror(rc));
        job_give(job);
        return NGX_ERROR;
    }
    call_started(rz);
    return NGX_AGAIN;
}

/*
 * The steps of a give-back in Redis. A refund gives back a concurrent
 * rule's newest permits, which need not be the item's lease: an item
 * holding one has it renewed first (the newest then), is refunded only
 * when it was still held, and releases it after (should another
 * request's acquire have come between the two, the refund freed that
 * one's permits: this lease is freed too, never left held).
 */
#define STEP_RENEW 0
#define STEP_REFUND 1
#define STEP_RELEASE 2
#define STEP_DONE 3

static void give_step(redis_refund_t *job, ngx_uint_t step);

static void on_refund(void *ud, int rc, const ratel_decision_t *decision)
{
    redis_refund_t *job = ud;

    (void)decision;
    call_ended(job->rz);
    give_step(job, rc == 0 && job->it.decision.lease != 0 ? STEP_RELEASE
                                                          : STEP_DONE);
}

static void on_release(void *ud, int rc, int held,
                       const ratel_decision_t *decision)
{
    redis_refund_t *job = ud;

    (void)decision;
    call_ended(job->rz);
    give_step(job, job->step == STEP_RENEW && rc == 0 && held ? STEP_REFUND
                                                              : STEP_DONE);
}

/* Sends step `step` of `job` (the job is freed when none is left, or
   when the store does not take it: a worker exiting). */
static void give_step(redis_refund_t *job, ngx_uint_t step)
{
    redis_zone_t *rz = job->rz;
    ratel_batch_item_t *it = &job->it;
    int rc = -1;

    job->step = step;
    if (rz->async && !rz->exiting && step == STEP_REFUND)
        rc = ratel_async_refund(rz->async, it->key, it->keylen, it->policy,
                                job->now_us, it->request.cost, on_refund, job);
    else if (rz->async && !rz->exiting && step != STEP_DONE)
        rc = ratel_async_release(rz->async, it->key, it->keylen, it->policy,
                                 job->now_us, it->decision.lease,
                                 step == STEP_RENEW ? RATEL_RENEW : 0,
                                 on_release, job);
    if (rc != 0) {
        ngx_free(job);
        return;
    }
    call_started(rz);
}

/* Gives back in Redis what `it` took, from step `step` (its key copied:
   the request does not wait for the answer). */
static void give_in_redis(redis_zone_t *rz, const ratel_batch_item_t *it,
                          int64_t now_us, ngx_uint_t step)
{
    redis_refund_t *job;

    job = ngx_alloc(offsetof(redis_refund_t, key) + it->keylen, rz->log);
    if (!job)
        return;
    job->rz = rz;
    job->it = *it;
    job->it.key = job->key;
    job->now_us = now_us;
    ngx_memcpy(job->key, it->key, it->keylen);
    give_step(job, step);
}

void ngx_http_ratel_redis_refund(ngx_http_ratel_zone_t *zone,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us)
{
    redis_zone_t *rz = zone->redis;

    if (!rz || !rz->async)
        return;
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        if (it->rc != 0 || !it->decision.allowed)
            continue;
        if (it->decision.source == RATEL_SOURCE_STORE) {
            give_in_redis(rz, it, now_us,
                          it->decision.lease ? STEP_RENEW : STEP_REFUND);
            /* Another worker may have cached a denial the refund ends. */
            if (rz->deny_cache)
                ngx_http_ratel_shm_forget(zone, it);
        } else if (it->decision.source == RATEL_SOURCE_LOCAL) {
            ngx_http_ratel_shm_refund(zone, it, 1, now_us);
        }
    }
}

void ngx_http_ratel_redis_release(ngx_http_ratel_zone_t *zone,
                                  const ratel_batch_item_t *item,
                                  int64_t now_us)
{
    redis_zone_t *rz = zone->redis;

    if (item->decision.source == RATEL_SOURCE_LOCAL) {
        ngx_http_ratel_shm_release(zone, item, now_us);
        return;
    }
    if (!rz || !rz->async || item->decision.source != RATEL_SOURCE_STORE)
        return;
    give_in_redis(rz, item, now_us, STEP_RELEASE);
}

/* A charge sent for an ended request: its items and their keys. */
typedef struct {
    redis_zone_t *rz;
    size_t n;
    ratel_batch_item_t items[RATEL_GROUP_MAX];
    char keys[1];
} redis_charge_t;

static void on_charge(void *ud, ratel_batch_item_t *items, size_t n)
{
    redis_charge_t *job = ud;

    (void)items;
    (void)n;
    call_ended(job->rz);
    ngx_free(job);
}

void ngx_http_ratel_redis_charge(ngx_http_ratel_zone_t *zone,
                                 const ratel_batch_item_t *items, size_t n,
                                 int64_t now_us)
{
    redis_zone_t *rz = zone->redis;
    redis_charge_t *job;
    size_t keys = 0;
    char *k;

    if (!rz || !rz->async || n == 0 || n > RATEL_GROUP_MAX)
        return;
    for (size_t i = 0; i < n; i++)
        keys += items[i].keylen;
    job = ngx_alloc(offsetof(redis_charge_t, keys) + keys + 1, rz->log);
    if (!job)
        return;
    job->rz = rz;
    job->n = n;
    k = job->keys;
    for (size_t i = 0; i < n; i++) {
        job->items[i] = items[i];
        job->items[i].key = k;
        ngx_memcpy(k, items[i].key, items[i].keylen);
        k += items[i].keylen;
    }
    if (ratel_async_acquire_batch(rz->async, job->items, n, now_us, on_charge,
                                  job) != 0) {
        ngx_free(job);
        return;
    }
    call_started(rz);
}
