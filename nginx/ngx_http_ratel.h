/*
 * ngx_http_ratel.h - what the files of ngx_http_ratel_module share: the
 * configuration (zones, policies, `ratel` lines), the shared-memory zone's
 * calls, the metrics' counters and the Redis mode's interface.
 *
 * A request's `ratel` lines are decided zone by zone: the lines of one
 * zone make one all-or-nothing group of ratel_batch_item_t (key
 * "POLICY:value", rateld's store key, so that nginx, rateld and the
 * Functions library share one limit for the same policy and key), asked
 * of the zone's backend: its shared memory, or Redis (store=URL), which
 * may answer later on the worker's loop.
 */
#ifndef NGX_HTTP_RATEL_H
#define NGX_HTTP_RATEL_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "app/keys.h"
#include "app/status.h"
#include "ratel.h"

/* Longest policy and zone names ([A-Za-z0-9_.-], as rateld's). */
#define NGX_HTTP_RATEL_NAME_MAX 64
/* Policies one zone counts decisions for (its metrics' table). */
#define NGX_HTTP_RATEL_COUNTERS_MAX 64
/* Smallest zone: its table of counters, the tree and a few keys. */
#define NGX_HTTP_RATEL_ZONE_MIN (64 * 1024)
/*
 * An item's rc when its backend did not decide it: another member of its
 * group was refused at once (a Redis zone's cached denial), so the group
 * is refused without asking. RATEL_E* codes are negative. Such a line is
 * neither counted, logged nor reported in the RateLimit fields.
 */
#define NGX_HTTP_RATEL_UNDECIDED 1

/*
 * A request's outcome, as $ratel_status names it (limit_req's words) and
 * as the metrics count it (rateld's words: allowed, denied,
 * shadow_denied, error; invalid: a key or cost refused, answered 400
 * with X-Ratel-Reason; delayed: admitted after waiting for its
 * reservation, max_wait=; shadow_delayed: a dry run's, not delayed).
 */
#define NGX_HTTP_RATEL_OUTCOMES(X)                                             \
    X(PASSED, "PASSED", "allowed")                                             \
    X(DELAYED, "DELAYED", "delayed")                                           \
    X(REJECTED, "REJECTED", "denied")                                          \
    X(REJECTED_DRY_RUN, "REJECTED_DRY_RUN", "shadow_denied")                   \
    X(DELAYED_DRY_RUN, "DELAYED_DRY_RUN", "shadow_delayed")                    \
    X(ERROR, "ERROR", "error")                                                 \
    X(INVALID, "INVALID", "invalid")

typedef enum {
#define NGX_HTTP_RATEL_OUTCOME_ENUM(name, status, metric) NGX_HTTP_RATEL_##name,
    NGX_HTTP_RATEL_OUTCOMES(NGX_HTTP_RATEL_OUTCOME_ENUM)
#undef NGX_HTTP_RATEL_OUTCOME_ENUM
        NGX_HTTP_RATEL_NOUTCOMES
} ngx_http_ratel_outcome_e;

extern const char *const ngx_http_ratel_status_names[];
extern const char *const ngx_http_ratel_metric_outcomes[];

/* The shared part of a zone (in its shared memory; ngx_http_ratel_shm.c). */
typedef struct ngx_http_ratel_shm_s ngx_http_ratel_shm_t;

/* `ratel_policy NAME RULE...;`: what a request needs of it is formatted
   once, here. */
typedef struct {
    ngx_str_t name;
    ratel_policy_t policy;
    ngx_str_t field;       /* its RateLimit-Policy value */
    ngx_str_t *items;      /* each rule's RateLimit item name */
    size_t limit_max;      /* its longest RateLimit item */
    ngx_str_t *rule_texts; /* each rule as the log names it */
    uint64_t fingerprint;  /* ratel__policy_fingerprint: the deny cache's */
    ngx_uint_t leased;     /* lease=: its settings in `lease` */
    ratel_lease_t lease;   /* settings only (a zone keeps the counters) */
} ngx_http_ratel_policy_t;

/* The `ratel_policy` of an item's policy (every item's is one). */
#define ngx_http_ratel_policy_of(p)                                            \
    ((const ngx_http_ratel_policy_t *)((const u_char *)(p)-offsetof(           \
        ngx_http_ratel_policy_t, policy)))

/* `ratel_zone zone=NAME:SIZE [store=URL];` */
typedef struct ngx_http_ratel_zone_s {
    ngx_str_t name;
    size_t size;
    ngx_shm_zone_t *shm_zone;
    ngx_http_ratel_shm_t *sh; /* set when the zone's memory is ready */
    ngx_slab_pool_t *shpool;
    ngx_str_t store;            /* store=URL; empty: shared memory only */
    void *redis;                /* the Redis mode's own data for this zone */
    ngx_array_t counts;         /* ngx_str_t: the policies its lines use */
    ngx_array_t count_policies; /* ngx_http_ratel_policy_t *: the same */
    ngx_uint_t *slots;          /* counts[i]'s slot in the shared table */
    ngx_uint_t generation;      /* the configuration that made or took the
                                   zone last, when this one did (leases) */
    u_char *file;               /* where it was declared (messages) */
    ngx_uint_t line;
} ngx_http_ratel_zone_t;

/* `ratel zone=NAME policy=NAME key=SOURCES|$var [cost=NUMBER|$var]
   [exempt=VALUE,...] [on_missing=reject|shared|allow] [max_wait=MS]
   [charge_on=STATUS,...];` */
typedef struct {
    ngx_str_t zone_name, policy_name;
    ngx_http_ratel_zone_t *zone;      /* resolved after the http block */
    ngx_http_ratel_policy_t *policy;  /* resolved after the http block */
    ratel__key_t sources;             /* key=SOURCES (app/keys.h); its
                                         on_missing for $var keys too */
    ngx_http_complex_value_t *key_cv; /* key=$var; NULL: sources */
    ngx_str_t key_text;               /* key=... as written (messages) */
    ngx_array_t *exempt; /* ngx_str_t: values not limited, as the key reads
                            them (a |phone value in E.164); NULL: none */
    int needs;           /* RATEL__KEY_NEEDS_*: the body is read first */
    ngx_http_complex_value_t *cost_cv; /* NULL: a fixed cost */
    uint64_t cost;
    int64_t max_wait_ms; /* max_wait=: a reservation waited for; 0 none */
    ratel__status_set_t *charge_on; /* charge_on= statuses; NULL: the
                                       line charges when it admits */
    ngx_uint_t count;               /* the policy's index in zone->counts */
    u_char *file;
    ngx_uint_t line;
} ngx_http_ratel_limit_t;

typedef struct {
    ngx_array_t zones;    /* ngx_http_ratel_zone_t */
    ngx_array_t policies; /* ngx_http_ratel_policy_t */
    ngx_array_t limits;   /* ngx_http_ratel_limit_t *: every `ratel` line */
} ngx_http_ratel_main_conf_t;

typedef struct {
    ngx_array_t *limits; /* ngx_http_ratel_limit_t *; inherited whole */
    ngx_uint_t status;
    ngx_flag_t dry_run;
    ngx_flag_t headers;
    ngx_uint_t log_level;
    ngx_flag_t metrics;
} ngx_http_ratel_loc_conf_t;

extern ngx_module_t ngx_http_ratel_module;

/* ------------------------------------------------------- configuration */

/* The directives (ngx_http_ratel_conf.c). */
extern ngx_command_t ngx_http_ratel_commands[];

void *ngx_http_ratel_create_main_conf(ngx_conf_t *cf);
void *ngx_http_ratel_create_loc_conf(ngx_conf_t *cf);
char *ngx_http_ratel_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);

/*
 * Once the http block is read: each `ratel` line's zone and policy (they
 * may be declared after it), its fixed cost checked against the policy,
 * and each zone's list of counted policies. NGX_ERROR after logging the
 * line's file:line and the reason.
 */
ngx_int_t ngx_http_ratel_resolve(ngx_conf_t *cf, ngx_http_ratel_main_conf_t *m);

/* ------------------------------------------------ the module's log lines */

/*
 * The kinds of line a client can cause at will (a refused or missing key,
 * a bad cost, a store error per request): each goes through a budget of
 * one line per kind per 10 s in each worker (app/log.h), the line saying
 * how many were not written (not_logged=N). Refusals by a limit are
 * logged as limit_req logs them, at ratel_log_level.
 */
#define NGX_HTTP_RATEL_LOG_KEY 0
#define NGX_HTTP_RATEL_LOG_COST 1
#define NGX_HTTP_RATEL_LOG_STORE 2
#define NGX_HTTP_RATEL_LOG_KINDS 3

/* Whether a line of `kind` may be written now; *not_logged as
   ratel__log_budget_take's. */
ngx_uint_t ngx_http_ratel_log_take(ngx_uint_t kind, uint64_t *not_logged);

/* ------------------------------------------------ the shared-memory zone */

/* The shm_zone's init (old data on reload: the zone and its counts kept). */
ngx_int_t ngx_http_ratel_shm_init(ngx_shm_zone_t *shm_zone, void *data);

/*
 * Decides `items` (one all-or-nothing group) at `now_us` under the zone's
 * lock: each member on a copy of its state, written back only when every
 * member is admitted. Always NGX_OK: each item's rc and decision are set
 * (RATEL_ENOMEM for every member when the zone has no room for the
 * group's new state even after evicting; nothing is then charged).
 */
ngx_int_t ngx_http_ratel_shm_decide(ngx_http_ratel_zone_t *zone,
                                    ratel_batch_item_t *items, size_t n,
                                    int64_t now_us, ngx_log_t *log);

/*
 * Gives back what an admitted group took (a later zone refused). An item
 * holding a lease frees that lease, not the key's newest (a refund gives
 * back a concurrent rule's newest permits: the lease is renewed first,
 * under the same lock, to be the newest); one that expired meanwhile is
 * given nothing back.
 */
void ngx_http_ratel_shm_refund(ngx_http_ratel_zone_t *zone,
                               ratel_batch_item_t *items, size_t n,
                               int64_t now_us);

/*
 * Releases the lease `item`'s decision carried (decision.lease): the
 * request that took it ended.
 */
void ngx_http_ratel_shm_release(ngx_http_ratel_zone_t *zone,
                                const ratel_batch_item_t *item, int64_t now_us);

/*
 * A Redis zone's deny cache, in the zone's memory so that every worker
 * answers from it: a denial Redis gave until T answers its key's next
 * requests (of at least its cost) until T, or at most `max_ms`, without a
 * round trip. ngx_http_ratel_shm_cached() answers a group: NGX_OK when a
 * member was denied from the cache (its decision set, source
 * RATEL_SOURCE_CACHE; the other members NGX_HTTP_RATEL_UNDECIDED),
 * NGX_DECLINED when Redis must decide. ngx_http_ratel_shm_remember()
 * records the group's denials Redis made (not those under a concurrent
 * rule, whose end no clock predicts); ngx_http_ratel_shm_forget() drops a
 * key's entry (a refund may let it through earlier).
 */
ngx_int_t ngx_http_ratel_shm_cached(ngx_http_ratel_zone_t *zone,
                                    ratel_batch_item_t *items, size_t n,
                                    int64_t now_us);
void ngx_http_ratel_shm_remember(ngx_http_ratel_zone_t *zone,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us, int64_t max_ms);
void ngx_http_ratel_shm_forget(ngx_http_ratel_zone_t *zone,
                               ratel_batch_item_t *item);

/*
 * A Redis zone's leased keys (docs/nginx.md, "Leased policies"): their
 * slices live in the zone, in a table every worker's store spends from
 * (NULL: a zone without store=). ngx_http_ratel_shm_lease() is the
 * ratel_lease_t (settings and counters, in the zone) a request of the
 * zone's counted policy `count` takes: NULL when the policy is not leased.
 */
void *ngx_http_ratel_shm_leases(ngx_http_ratel_zone_t *zone);
ratel_lease_t *ngx_http_ratel_shm_lease(ngx_http_ratel_zone_t *zone,
                                        ngx_uint_t count);
/*
 * A worker exits: whether the slices of `key` (under the policy of
 * fingerprint fp) stay in the zone for the workers of a newer
 * configuration (which took the zone and leases that policy) or go back
 * to Redis. Read once, before the worker gives back: *keep_all when no
 * newer configuration took the zone.
 */
typedef struct {
    ngx_uint_t n, gone;
    uint64_t fps[NGX_HTTP_RATEL_COUNTERS_MAX];
    u_char names[NGX_HTTP_RATEL_COUNTERS_MAX][NGX_HTTP_RATEL_NAME_MAX + 2];
} ngx_http_ratel_kept_t;
void ngx_http_ratel_shm_kept(ngx_http_ratel_zone_t *zone,
                             ngx_http_ratel_kept_t *kept);
int ngx_http_ratel_shm_keeps(void *kept, const char *key, size_t keylen,
                             uint64_t fp);

/* Counts the lines of a Redis zone's group that Redis did not decide
   (the deny cache, or the failure policy: their decision's source). */
void ngx_http_ratel_shm_count_sources(ngx_http_ratel_zone_t *zone,
                                      const ratel_batch_item_t *items,
                                      size_t n);

/* Adds one decision per line to the zone's counters. */
void ngx_http_ratel_shm_count(ngx_http_ratel_zone_t *zone, ngx_uint_t count,
                              ngx_uint_t outcome);

/* ------------------------------------------------------------- metrics */

/* Writes the zones' counters and memory as Prometheus text. */
ngx_int_t ngx_http_ratel_metrics_handler(ngx_http_request_t *r);

/* The zone's counters and memory, under its lock (metrics.c reads). */
typedef struct {
    uint64_t keys, bytes, max_bytes, evictions, expirations;
    /* A Redis zone's lines Redis did not decide: errors (the failure
       policy decided), by policy, and the deny cache's answers. */
    uint64_t errors, fallback_open, fallback_closed, fallback_local;
    uint64_t cache_hits;
} ngx_http_ratel_shm_stats_t;

typedef void (*ngx_http_ratel_count_fn)(void *data, const u_char *policy,
                                        const uint64_t *outcomes);
/* A leased policy's counters (a copy), for the metrics. */
typedef void (*ngx_http_ratel_lease_fn)(void *data, const u_char *policy,
                                        const ratel_lease_t *lease);

void ngx_http_ratel_shm_read(ngx_http_ratel_zone_t *zone,
                             ngx_http_ratel_shm_stats_t *stats,
                             ngx_http_ratel_count_fn fn, void *data);
/* The zone's leased policies' counters (those of the latest
   configuration). */
void ngx_http_ratel_shm_read_leases(ngx_http_ratel_zone_t *zone,
                                    ngx_http_ratel_lease_fn fn, void *data);

/* ----------------------------------------------------------- Redis mode */

/* At configuration: checks store=URL (nginx -t refuses a bad one, naming
   it). */
char *ngx_http_ratel_redis_conf(ngx_conf_t *cf, ngx_http_ratel_zone_t *zone,
                                ngx_str_t *url);
/* Per worker: init_process / exit_process. */
ngx_int_t ngx_http_ratel_redis_init_worker(ngx_cycle_t *cycle,
                                           ngx_http_ratel_zone_t *zone);
void ngx_http_ratel_redis_exit_worker(ngx_http_ratel_zone_t *zone);
/*
 * Decides `items` (one group) at `now_us` on the worker's loop: NGX_OK
 * decided now (items filled: the zone's deny cache answered), NGX_AGAIN
 * then done(data) runs later on this worker (the handler resumed the
 * request's phases), NGX_ERROR. When Redis cannot decide, the URL's
 * failure policy does; `local` decides the group in the zone's memory
 * (ngx_http_ratel_shm_decide, source RATEL_SOURCE_LOCAL).
 */
ngx_int_t ngx_http_ratel_redis_decide(ngx_http_ratel_zone_t *zone,
                                      ngx_http_request_t *r,
                                      ratel_batch_item_t *items, size_t n,
                                      int64_t now_us, void (*done)(void *data),
                                      void *data);
/*
 * Gives back what an admitted group took (a later zone refused): Redis's
 * charges by a refund sent on the loop (not waited for; an item holding a
 * lease by its renewal, the refund, then its release, so that the refund
 * frees that lease and not the key's newest), the `local` decisions' in
 * the zone's memory; what `open` let through was charged nowhere.
 */
void ngx_http_ratel_redis_refund(ngx_http_ratel_zone_t *zone,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us);
/*
 * Charges `items` (the lines of an ended request whose status their
 * charge_on= names; not a group) in Redis by an acquire sent on the loop
 * and not waited for (the items and keys copied); a Redis that cannot
 * take it charges nothing, as the failure policy `open`.
 */
void ngx_http_ratel_redis_charge(ngx_http_ratel_zone_t *zone,
                                 const ratel_batch_item_t *items, size_t n,
                                 int64_t now_us);
/*
 * Releases the lease an admitted item took (its request ended): in Redis
 * by a release sent on the loop (not waited for), a `local` decision's in
 * the zone's memory; what `open` let through holds nothing.
 */
void ngx_http_ratel_redis_release(ngx_http_ratel_zone_t *zone,
                                  const ratel_batch_item_t *item,
                                  int64_t now_us);

/* ------------------------------------------------------ leased policies */

/* `lease=SETTINGS` of a `ratel_policy` (ngx_http_ratel_lease.c): read with
   libratel's lease options, checked as rateld checks `lease:`. */
char *ngx_http_ratel_lease_conf(ngx_conf_t *cf, ngx_http_ratel_policy_t *p,
                                ngx_str_t *value);
/* A `ratel` line of a leased policy: no max_wait=. */
ngx_int_t ngx_http_ratel_lease_line(ngx_conf_t *cf, ngx_http_ratel_limit_t *l);
/* The bound of each leased policy of a Redis zone, logged (notice). */
void ngx_http_ratel_lease_notice(ngx_http_ratel_zone_t *zone, ngx_log_t *log);
/* A worker exits: the zone's slices that no newer configuration spends
   go back to Redis on `store`, waited for. */
void ngx_http_ratel_lease_give_back(ngx_http_ratel_zone_t *zone,
                                    ratel_store_t *store);

/* ------------------------------------- what an admitted request holds */

/*
 * Gives back what the admitted members of a group took, in its zone's
 * store: with `all` 0 (the request ended) each lease is released; with
 * `all` 1 (the request never ran: a later zone refused it, its client
 * left while it waited) every charge is given back too, a lease by its
 * release when it is the policy's whole charge, else by a refund that
 * frees this lease with the other rules' charge (the stores' refunds).
 */
void ngx_http_ratel_give_back(ngx_http_ratel_zone_t *zone,
                              ratel_batch_item_t *items, size_t n,
                              int64_t now_us, ngx_uint_t all);

/*
 * Makes request `r` wait `ms` on a timer of its write event (limit_req's
 * delay: the worker goes on meanwhile), its client's leaving noticed;
 * then its phases run again from the current handler. NGX_AGAIN, or an
 * HTTP status.
 */
ngx_int_t ngx_http_ratel_delay(ngx_http_request_t *r, ngx_msec_t ms);

/* The current time (nginx's cached clock) in microseconds. */
int64_t ngx_http_ratel_now_us(void);

#endif /* NGX_HTTP_RATEL_H */
