/*
 * metrics.h - rateld's counters and their Prometheus text exposition.
 *
 * Labels are policy names (from the config) and fixed words, never keys:
 * a flood of unique keys cannot grow the metrics. Counters are per worker
 * thread (no shared cache line on the hot path) and summed when /metrics
 * is read. Policies are registered by name, up to RATELD_METRICS_POLICIES;
 * a name keeps its counters across reloads.
 */
#ifndef RATELD_METRICS_H
#define RATELD_METRICS_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#define RATELD_METRICS_POLICIES 1024

typedef enum rateld_outcome_e {
    RATELD_OUTCOME_ALLOWED = 0,
    RATELD_OUTCOME_DENIED,        /* answered 429 / 403 */
    RATELD_OUTCOME_SHADOW_DENIED, /* would have been denied; allowed */
    RATELD_OUTCOME_REJECTED,      /* 400: key source missing, bad input */
    RATELD_OUTCOME_ERROR,         /* the store failed (500) */
    RATELD_OUTCOMES
} rateld_outcome_t;

/* Why /v1/auth did not decide a request by a route's policies. */
typedef enum rateld_undecided_e {
    RATELD_UNDECIDED_UNIDENTIFIED = 0, /* no original request headers */
    RATELD_UNDECIDED_UNMATCHED,        /* no route matches it */
    RATELD_UNDECIDED_MISSING_KEY,      /* a policy's key source is absent */
    RATELD_UNDECIDED_BAD_KEY,          /* ... malformed or too long */
    RATELD_UNDECIDED_AMBIGUOUS,        /* two candidates for a field of the
                                          original request (origin.h) */
    RATELD_UNDECIDED_BAD_URI,          /* an original path with no safe
                                          normal form (path.h) */
    RATELD_UNDECIDED_BAD_REQUEST,      /* an original method or host that
                                          is not one (origin.h) */
    RATELD_UNDECIDED_REASONS
} rateld_undecided_t;

/* The endpoints whose requests wait in a batch for their decision, as
   ratel_abandoned_total's `endpoint` label spells them. */
typedef enum rateld_endpoint_e {
    RATELD_ENDPOINT_ACQUIRE = 0, /* /v1/acquire */
    RATELD_ENDPOINT_AUTH,        /* /v1/auth */
    RATELD_ENDPOINT_RLS,         /* Envoy's rate limit service (gRPC) */
    RATELD_ENDPOINT_REPORT,      /* /v1/report */
    RATELD_ENDPOINTS
} rateld_endpoint_t;

/* The reason as X-Ratel-Reason and the metric label spell it. */
const char *rateld_undecided_name(rateld_undecided_t reason);

typedef struct rateld_metrics_s rateld_metrics_t;

/* Counters for `threads` worker threads. NULL when out of memory. */
rateld_metrics_t *rateld_metrics_new(unsigned threads);
void rateld_metrics_free(rateld_metrics_t *m);

/* The index of policy `name`'s counters (registered on first use); -1 when
   the table is full. Thread-safe; call it when a config is loaded. */
int rateld_metrics_policy(rateld_metrics_t *m, const char *name);

/*
 * The ratel_lease_t of registered policy `policy` with `settings`' settings
 * (its counters go on across reloads): what a leased policy's requests
 * point at. It lives until the metrics are freed, after the store. NULL
 * for a bad index.
 */
ratel_lease_t *rateld_metrics_lease(rateld_metrics_t *m, int policy,
                                    const ratel_lease_t *settings);

/*
 * Counts one decision of policy index `policy` on worker `thread`: its
 * outcome, the path that decided it (ratel_source_t) and how long the
 * request took in microseconds (a histogram with buckets from 50 us to
 * 1 s). Only ever called from worker `thread`.
 */
void rateld_metrics_count(rateld_metrics_t *m, unsigned thread, int policy,
                          rateld_outcome_t outcome, int source,
                          int64_t latency_us);

/* Counts an auth request not decided by policies, on worker `thread`. */
void rateld_metrics_undecided(rateld_metrics_t *m, unsigned thread,
                              rateld_undecided_t reason);

/* Counts a request of `endpoint` on worker `thread` that was not decided
   because its client had gone before the decision (nothing charged). */
void rateld_metrics_abandoned(rateld_metrics_t *m, unsigned thread,
                              rateld_endpoint_t endpoint);

/* Counts a gRPC call's answer by status code (0..16) on worker
   `thread`. */
void rateld_metrics_grpc(rateld_metrics_t *m, unsigned thread, int code);

/* What an RLQS stream was sent for a bucket (rlqs.c). */
typedef enum rateld_rlqs_action_e {
    RATELD_RLQS_ASSIGNED = 0, /* a token bucket (or DENY_ALL) with a TTL */
    RATELD_RLQS_ABANDONED,    /* AbandonAction: a reload dropped it */
    RATELD_RLQS_EXPIRED,      /* TTL 0: rateld stops */
    RATELD_RLQS_ACTIONS
} rateld_rlqs_action_t;

/* An RLQS stream opened (opened 1) or closed (0) on worker `thread`. */
void rateld_metrics_rlqs_stream(rateld_metrics_t *m, unsigned thread,
                                int opened);

/* A usage report of a bucket of policy index `policy`. */
void rateld_metrics_rlqs_report(rateld_metrics_t *m, unsigned thread,
                                int policy);

/* An action sent for a bucket of policy index `policy`. */
void rateld_metrics_rlqs_action(rateld_metrics_t *m, unsigned thread,
                                int policy, rateld_rlqs_action_t action);

/* A bucket_id no rlqs bucket matched (answered per rlqs.unmatched). */
void rateld_metrics_rlqs_unmatched(rateld_metrics_t *m, unsigned thread);

/* Counts an HTTP response by status class on worker `thread`. */
void rateld_metrics_http(rateld_metrics_t *m, unsigned thread, int status);

/* Counts a connection the HTTP server refused at accept on worker
   `thread`, by the limit that refused it (ratel_http_refusal_t). */
void rateld_metrics_refused(rateld_metrics_t *m, unsigned thread, int limit);

/*
 * The Prometheus text exposition (version 0.0.4) of every counter, plus
 * the store's stats (keys, bytes, evictions, expirations, errors,
 * fallbacks, cache hits, breaker state; a memory store's snapshots), its
 * health (up, state changes, warning; left out when NULL) and `reloads` /
 * `reload_failures`,
 * into a malloc'd string (*len its length). NULL when out of memory.
 */
char *rateld_metrics_render(rateld_metrics_t *m, const ratel_store_stats_t *st,
                            const ratel_store_health_t *health,
                            uint64_t reloads, uint64_t reload_failures,
                            size_t *len);

#endif /* RATELD_METRICS_H */
