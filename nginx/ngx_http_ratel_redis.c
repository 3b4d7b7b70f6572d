/*
 * ngx_http_ratel_redis.c - a zone's Redis mode (`ratel_zone zone=NAME:SIZE
 * store=redis://...;`): each worker has its own Redis store and its calls
 * on the worker's loop (libratel's asynchronous API on the nginx transport,
 * ngx_http_ratel_transport.c), so a request waits on an nginx event while
 * Redis decides and no worker ever blocks on Redis.
 *
 * Everything the store does is libratel's, the same as rateld's: the
 * store key "POLICY:value" the handler builds, the module or the Functions
 * library in Redis, pipelining (one write per connection per loop turn),
 * Cluster and Sentinel routing, TLS, the deny cache and the failure policy
 * (the URL's on_failure=open|closed|local, answered at the command's
 * deadline, timeout_ms). Settings come from the URL's query, as for
 * rateld's store.
 *
 * Graceful shutdown. A worker told to quit waits for its timers that are
 * not cancelable: while calls are in flight a guard timer of that kind is
 * armed, so the requests waiting on Redis are answered (by Redis or, at
 * their deadline, by the failure policy) before the worker exits.
 */
#include "ngx_http_ratel.h"
#include "ngx_http_ratel_transport.h"

#include "ratel_internal.h"

#include <stdio.h>

/* The guard's period: longer than any command's deadline is not needed,
   it is re-armed while calls are in flight. */
#define REDIS_GUARD_MS 1000

typedef struct {
    char *url;            /* NUL-terminated copy of store=URL */
    ratel_store_t *store; /* this worker's */
    ratel_async_t *async; /* this worker's, on its loop */
    ngx_uint_t pending;   /* calls in flight */
    ngx_event_t guard;    /* armed while calls are in flight */
    ngx_log_t *log;
    ngx_str_t name;       /* the zone's, for messages */
    uint64_t transitions; /* the store's health changes logged so far */
    int exiting;          /* calls told by the exit are not resumed */
} redis_zone_t;

/* One request's call. */
typedef struct {
    redis_zone_t *rz;
    void (*done)(void *data);
    void *data;
} redis_job_t;

/* The store's options from its URL: every setting is the URL's query. */
static ratel_redis_options_t redis_options(const char *url)
{
    return (ratel_redis_options_t){.url = url, .lazy_connect = 1};
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
    if (ngx_strlen(rz->url) != url->len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": store= holds a NUL byte",
                           &zone->name);
        return NGX_CONF_ERROR;
    }
    /* Made and freed at once: the URL, its query and the TLS files are
       checked as the worker will use them, with no connection. */
    o = redis_options(rz->url);
    if (ratel_store_redis_new(&store, &o, err, sizeof err) != 0) {
        if (ratel__url_mask(rz->url, masked, sizeof masked) != 0)
            snprintf(masked, sizeof masked, "(the URL)");
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": store=\"%s\": %s", &zone->name,
                           masked, err);
        return NGX_CONF_ERROR;
    }
    if (ratel__redis_tls_insecure(&o))
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "ratel_zone \"%V\": %s",
                           &zone->name, RATEL__TLS_INSECURE_WARNING);
    ratel_store_free(store);
    rz->name = zone->name;
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
                      &rz->name, h.last_outage_ms);
    } else {
        ngx_log_error(NGX_LOG_ERR, rz->log, 0,
                      "ratel_zone \"%V\": Redis is down (%s): the failure "
                      "policy decides until it answers again",
                      &rz->name, h.cause);
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
    o = redis_options(rz->url);
    if (ratel_store_redis_new(&rz->store, &o, err, sizeof err) != 0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "ratel_zone \"%V\": %s",
                      &zone->name, err);
        return NGX_ERROR;
    }
    ratel_store_watch_health(rz->store, on_health, rz);
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
    ratel_store_free(rz->store);
    rz->store = NULL;
    if (rz->guard.timer_set) {
        ngx_del_timer(&rz->guard);
    }
}

static void on_batch(void *ud, ratel_batch_item_t *items, size_t n)
{
    redis_job_t *job = ud;
    redis_zone_t *rz = job->rz;

    (void)items;
    (void)n;
    rz->pending--;
    if (rz->pending == 0 && rz->guard.timer_set) {
        ngx_del_timer(&rz->guard);
    }
    /* A worker's exit tells its calls: their requests go with it. */
    if (!rz->exiting)
        job->done(job->data);
    ngx_free(job);
}

ngx_int_t ngx_http_ratel_redis_decide(ngx_http_ratel_zone_t *zone,
                                      ngx_http_request_t *r,
                                      ratel_batch_item_t *items, size_t n,
                                      void (*done)(void *data), void *data)
{
    redis_zone_t *rz = zone->redis;
    redis_job_t *job;
    int rc;

    if (!rz || !rz->async)
        return NGX_ERROR;
    /* Not in the request's pool: the job outlives nothing of the request
       (the handler holds it until done), but is freed by the callback. */
    job = ngx_alloc(sizeof *job, r->connection->log);
    if (!job)
        return NGX_ERROR;
    job->rz = rz;
    job->done = done;
    job->data = data;
    rc = ratel_async_acquire_batch(rz->async, items, n, ratel_clock_now_us(),
                                   on_batch, job);
    if (rc != 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "ratel_zone \"%V\": %s", &zone->name, ratel_strerror(rc));
        ngx_free(job);
        return NGX_ERROR;
    }
    if (rz->pending++ == 0) {
        ngx_add_timer(&rz->guard, REDIS_GUARD_MS);
    }
    return NGX_AGAIN;
}
