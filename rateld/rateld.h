/*
 * rateld.h - the daemon's shared state: the running configuration (swapped
 * on reload), the store, the metrics, and each worker thread's batch of
 * decisions waiting for the end of its loop pass.
 *
 * Threads. The HTTP server runs `threads` workers; each calls
 * rateld_handle() for its requests and rateld_flush() after each pass over
 * its ready connections. A decision is not taken in the handler: the
 * request joins its worker's batch, and the flush decides the whole batch
 * with one ratel_store_acquire_batch() (one Redis round trip for every
 * request of the pass) and answers each. A signal thread reloads the
 * configuration on SIGHUP and stops the server on SIGTERM / SIGINT.
 *
 * Reload. A configuration is immutable. A reload loads and checks the new
 * file completely, then publishes it; the old one is freed once no worker
 * can still be using it: a worker takes the current configuration when a
 * pass begins and lets go of it in the flush that ends the pass (an epoch
 * per worker says which one it holds).
 */
#ifndef RATELD_RATELD_H
#define RATELD_RATELD_H

#include "app/log.h"
#include "rateld/config.h"
#include "rateld/metrics.h"
#include "rateld/request.h"
#include "http/http.h"
#include "ratel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RATELD_VERSION RATEL_VERSION
/* Requests one worker batches in one pass; past it, it decides early. */
#define RATELD_BATCH_MAX 256

/* What answers a pending request (rateld_pending_t.kind). */
enum {
    RATELD_KIND_ACQUIRE, /* the decision API */
    RATELD_KIND_AUTH,    /* /v1/auth: a route's policies, first item */
    RATELD_KIND_PART,    /* a later item of an auth or RLS request */
    RATELD_KIND_RLS,     /* an RLS call (rls.c), first item */
    RATELD_KIND_REPORT,  /* /v1/report: charge_on policies, first item */
    RATELD_KINDS
};

typedef struct rateld_rls_s rateld_rls_t;
typedef struct rateld_flight_s rateld_flight_t;
typedef struct rateld_worker_s rateld_worker_t;
typedef struct rateld_s rateld_t;

/* Freed RLS call states a worker keeps for its next calls. */
typedef struct rateld_rls_pool_s {
    rateld_rls_t *spare;
    unsigned n;
} rateld_rls_pool_t;

/* A configuration and what is derived from it once, at load. */
typedef struct rateld_gen_s {
    rateld_config_t *config;
    int *metric;              /* metrics index per policy */
    ratel_lease_t **lease;    /* per policy: its lease (NULL: not leased) */
    int *erl_metric;          /* metrics index per Envoy limit (erl.h index) */
    char **policy_field;      /* RateLimit-Policy value per policy */
    uint64_t epoch;           /* when it was published */
    _Atomic unsigned flights; /* batches on their way that hold it */
    struct rateld_gen_s *next_retired;
} rateld_gen_t;

/* One request waiting for its worker's flush. */
typedef struct rateld_pending_s {
    ratel_http_exchange_t *ex;
    const rateld_policy_t *policy;
    size_t policy_index;
    const ratel_policy_t *rules; /* the policy's, or an override's */
    const char *field;           /* their RateLimit-Policy value */
    int kind;                    /* what answers it: RATELD_KIND_* */
    rateld_rls_t *rls;           /* an RLS call's items: the call */
    int first, count; /* auth: its items are batch[first .. first+count) */
    ratel_request_t request;
    int64_t start_us; /* for the latency histogram */
    size_t keylen;
    char key[RATELD_KEY_MAX + RATELD_NAME_MAX + 2];
} rateld_pending_t;

/*
 * Kinds of log lines paid from a budget (log_budget.c): the undecided
 * reasons first (rateld_undecided_t), then the others.
 */
typedef enum rateld_log_kind_e {
    RATELD_LOG_SHADOW_DENY = RATELD_UNDECIDED_REASONS,
    RATELD_LOG_UNKNOWN_DOMAIN, /* RLS: a domain no file defines */
    RATELD_LOG_REFUSED,        /* + ratel_http_refusal_t: a connection */
    RATELD_LOG_KINDS = RATELD_LOG_REFUSED + RATEL_HTTP_REFUSALS
} rateld_log_kind_t;

/*
 * A batch on its way: the requests of one pass, copied out of the worker
 * at its flush and decided by the store without the worker waiting
 * (ratel_async_acquire_batch: at once for the memory store, when Redis
 * answered or the deadline passed for Redis). It holds its configuration
 * (gen->flights) until every request is answered.
 */
struct rateld_flight_s {
    rateld_t *d;
    rateld_worker_t *w;
    unsigned thread;
    rateld_gen_t *gen;
    size_t n;
    rateld_pending_t *pending; /* n of each */
    ratel_batch_item_t *items;
    int on_heap; /* 0: the worker's own arrays (no memory for a flight) */
};

/* A worker's state; only its own thread touches it, but for `active` and
   `epoch` which the reloader reads. */
struct rateld_worker_s {
    _Atomic int active;        /* holds a configuration now */
    _Atomic uint64_t epoch;    /* the epoch of the one it holds */
    rateld_gen_t *gen;         /* the configuration of this pass */
    rateld_pending_t *pending; /* this pass's requests */
    size_t npending;
    ratel_batch_item_t *items; /* answering them without a flight */
    ratel_async_t *async;      /* the store's calls on this worker's loop */
    unsigned flights;          /* batches on their way */
    /* Lines about clients' requests: one per kind per 10 s. */
    ratel__log_budget_t log_budget[RATELD_LOG_KINDS];
    rateld_rls_pool_t rls_pool;
    char pad[64];
};

struct rateld_s {
    _Atomic(rateld_gen_t *) current;
    _Atomic uint64_t epoch;
    rateld_gen_t *retired; /* older configurations not yet freed */
    pthread_mutex_t reload_lock;

    ratel_store_t *store;
    const char *store_name; /* "memory" or "redis" */
    rateld_metrics_t *metrics;
    ratel_http_server_t *http;
    rateld_worker_t *workers;
    unsigned threads;

    _Atomic int stopping; /* the server has stopped: answer nothing more */
    struct rateld_rlqs_s *rlqs; /* Envoy's RLQS streams (rlqs.h) */
    _Atomic uint64_t reloads, reload_failures;
    const char *config_path;
};

/* The handler and flush hook given to the HTTP server (ud is rateld_t). */
void rateld_handle(void *ud, ratel_http_exchange_t *ex,
                   const ratel_http_request_t *req);
void rateld_flush(void *ud, unsigned thread);

/* The configuration of the worker's pass (taken at its first request;
   batch.c). */
rateld_gen_t *rateld_take_gen(rateld_t *d, rateld_worker_t *w);

/*
 * The slot of a request in the worker's batch: room for `need` items from
 * the one returned on (the batch is decided first when they would not
 * fit). The caller fills the items it keeps, in order, then queues them
 * with rateld_queue(); until then they are not in the batch, so a request
 * refused while its items are filled leaves nothing behind.
 */
rateld_pending_t *rateld_enqueue(rateld_t *d, rateld_worker_t *w,
                                 unsigned thread, size_t need);

/*
 * Queues the n items filled from `slot` (rateld_enqueue()'s) as one
 * request: the first is answered by `kind` on exchange `ex` (NULL for an
 * RLS call, which its item's rls names), the others with it
 * (RATELD_KIND_PART). The first `group` of them are one all-or-nothing
 * group (the store charges none unless all admit); each later one stands
 * alone (an Envoy shadow-mode limit).
 */
void rateld_queue(rateld_worker_t *w, rateld_pending_t *slot, size_t n,
                  size_t group, int kind, ratel_http_exchange_t *ex);

/* The gRPC handler (rls.c): Envoy's RateLimitService and gRPC health. */
void rateld_grpc_handle(void *ud, ratel_grpc_call_t *call,
                        const ratel_grpc_request_t *req);

/*
 * Decodes and checks a RateLimitRequest message (rls.c; the fuzz target
 * drives it too): the call's state, or NULL with the gRPC status and the
 * reason (a static string) in *status and *why. Free with
 * rateld_rls_free(): into `pool` (NULL: none), which keeps up to 64 for
 * reuse (a call's state holds its decoding arena) until drained.
 */
rateld_rls_t *rateld_rls_decode(rateld_rls_pool_t *pool, const uint8_t *msg,
                                size_t len, int *status, const char **why);
void rateld_rls_free(rateld_rls_pool_t *pool, rateld_rls_t *r);
void rateld_rls_pool_drain(rateld_rls_pool_t *pool);

/* Answers the request whose first item is f->pending[first], once its
   batch is decided (batch.c's table: one answer per RATELD_KIND_*). */
typedef void rateld_answer_fn(rateld_t *d, rateld_flight_t *f, unsigned thread,
                              const rateld_gen_t *gen, size_t first,
                              int64_t now);

/* The answer of an RLS call (rls.c). */
void rateld_rls_answer(rateld_t *d, rateld_flight_t *f, unsigned thread,
                       const rateld_gen_t *gen, size_t first, int64_t now);

/*
 * Before a batch goes to the store: if the client of the request whose
 * first item is `head` has gone (a gateway that gave up closed its
 * connection, Envoy reset its stream), answers it as not decided, frees
 * what it holds and returns 1, and the batch leaves it out: nothing is
 * charged for an answer no one waits for. Else 0 (batch.c's table: one
 * per RATELD_KIND_*).
 */
typedef int rateld_abandon_fn(rateld_t *d, rateld_worker_t *w, unsigned thread,
                              rateld_pending_t *head);

/* An RLS call's (rls.c): ratel_grpc_call_abandoned. */
int rateld_rls_abandon(rateld_t *d, rateld_worker_t *w, unsigned thread,
                       rateld_pending_t *head);

/*
 * Whether an event of `kind` at `now_us` may write its log line on this
 * worker (its thread only): 1 with *not_logged set to the events of that
 * kind not logged since the last line (the line says so), or 0 after
 * counting this one as not logged.
 */
int rateld_log_budget_take(rateld_worker_t *w, rateld_log_kind_t kind,
                           int64_t now_us, unsigned long long *not_logged);

/* The HTTP server's refused hook (ud is the rateld_t): counts the
   connection in the metrics and logs it within the budget. */
void rateld_refused(void *ud, unsigned thread, ratel_http_refusal_t why,
                    const char *client);

/* Writes, for each worker and kind, how many events were not logged since
   its last line (once the workers have stopped). */
void rateld_log_budgets_drain(rateld_t *d);

/* Builds a generation from a loaded config (registers its metrics);
   NULL when out of memory. Takes ownership of config. */
rateld_gen_t *rateld_gen_new(rateld_t *d, rateld_config_t *config);
void rateld_gen_free(rateld_gen_t *gen);

/*
 * Loads the configuration at d->config_path and, when it is valid and its
 * store settings are those of the running store, publishes it. Returns 0,
 * or -1 with the reason in err (the running configuration stays).
 */
int rateld_reload(rateld_t *d, char *err, size_t errlen);

#endif /* RATELD_RATELD_H */
