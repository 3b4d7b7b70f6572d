/*
 * engine.h - the Redis engine: everything the Redis store says to Redis and
 * makes of its answers, with no I/O of its own (transport.h does that).
 *
 * Commands (rop: "Redis operation") are submitted with a completion
 * function and come back exactly once, with a reply or a failure, from the
 * engine's loop (never from inside ratel__engine_submit()). In between the
 * engine:
 *
 * - Routes. Standalone: the URL's addresses are a primary and its possible
 *   successors; the engine follows the one that says it is primary (ROLE,
 *   asked after a failure or a READONLY answer). Sentinel: the Sentinels
 *   name the primary (and say when it changes). Cluster: the slot map from
 *   CLUSTER SLOTS, asked of any known node (replicas included); MOVED
 *   updates it, ASK is followed once with ASKING, and a command for a
 *   slot whose owner failed reads it again first (a dead master's replica
 *   promoted: no MOVED says so), with a back-off (engine_route.c).
 * - Pipelines. Commands submitted during one turn of the loop leave in one
 *   write per connection (the transport's `defer`); replies are matched in
 *   order by hiredis's reader (redisReader).
 * - Prepares. A node's first connection learns how the core runs there:
 *   the module (COMMAND INFO ratel.acquire), else the Functions library
 *   (FCALL_RO ratel_version 0; FUNCTION LOAD REPLACE when absent or of
 *   another version), else, where FUNCTION LOAD is refused, the EVAL script
 *   (SCRIPT LOAD; EVALSHA). It is learnt again when an answer says it is
 *   gone (NOSCRIPT, "Function not found", an unknown command).
 * - Times out. Each command has its own deadline (its submission plus
 *   timeout_ms); one not answered by then fails, and so does its
 *   connection, which a hung server has stopped serving.
 * - Breaks. A node whose connection failed is down until `breaker_us`
 *   later in the callers' time (doubled for each failed probe, up to 8x);
 *   meanwhile its commands fail at once instead of each waiting for a
 *   timeout, and the first command after that instant probes it.
 * - Retries MOVED, ASK, NOSCRIPT, "Function not found", unknown commands,
 *   READONLY and transport failures after a failover, up to
 *   RATEL__ENGINE_ATTEMPTS sends per command, within its deadline.
 *
 * One engine belongs to one loop (one thread at a time). Several engines
 * may serve one store (the synchronous calls' and each event loop's): they
 * share its configuration, counters and health (ratel__redis_shared_t),
 * each with its own connections.
 */
#ifndef RATEL_STORE_ENGINE_H
#define RATEL_STORE_ENGINE_H

#include "ratel.h"
#include "store/health.h"
#include "store/redis_url.h"
#include "store/transport.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RATEL__ENGINE_ATTEMPTS 5

/* How a node runs the core, as found at its first connection. */
typedef enum ratel__node_mode_e {
    RATEL__MODE_UNKNOWN = 0,
    RATEL__MODE_MODULE,   /* RATEL.* commands */
    RATEL__MODE_FUNCTION, /* FCALL ratel_* of the library */
    RATEL__MODE_LUA       /* EVALSHA of the EVAL script */
} ratel__node_mode_t;

typedef enum ratel__rop_kind_e {
    RATEL__ROP_ACQUIRE,
    RATEL__ROP_REFUND,
    RATEL__ROP_RESET,
    RATEL__ROP_RELEASE,
    RATEL__ROP_SLICE,   /* RATEL.SLICE: a slice of a hot key (lease.h) */
    RATEL__ROP_UNSLICE, /* RATEL.UNSLICE: its unspent permits back */
    RATEL__ROP_GET,
    RATEL__ROP_PING,
    RATEL__ROP_LIBRARY, /* the library on one node, loaded if needed */
    /* The engine's own (ratel__engine_discover and failovers): */
    RATEL__ROP_SLOTS,  /* CLUSTER SLOTS */
    RATEL__ROP_ROLE,   /* ROLE */
    RATEL__ROP_MASTER, /* SENTINEL GET-MASTER-ADDR-BY-NAME */
    /* A program's own command (command.h): argv as given, routed by key */
    RATEL__ROP_COMMAND
} ratel__rop_kind_t;

/* What every engine of a store shares: settings, counters, health. */
typedef struct ratel__redis_shared_s {
    ratel_redis_url_t url;
    int connect_timeout_ms;
    int command_timeout_ms;
    unsigned pool_size;
    ratel_redis_mode_t mode;
    int64_t breaker_us;
    const char *username;          /* "" or NULL: none */
    const char *password;          /* NULL: no AUTH */
    const char *sentinel_username; /* the Sentinels': "" or NULL none */
    const char *sentinel_password; /* NULL: no AUTH to Sentinels */
    int db;                        /* SELECT when not 0 */
    unsigned wait_replicas;        /* WAIT for this many after writes (0: no) */
    const char *library; /* the Functions library, `#!lua name=ratel` */
    size_t library_len;
    const char *library_version; /* what its ratel_version answers */
    const char *script;          /* the EVAL script */
    size_t script_len;
    char script_sha[41];         /* its SHA1, computed once */
    SSL_CTX *tls;                /* NULL: plain TCP */
    const char *tls_server_name; /* NULL: each node's host */
    int tls_insecure;            /* no verification (tls_insecure=yes) */
    /* Told, once per node and change, what a user should know that is no
       failure: FUNCTION LOAD refused, the EVAL script used instead. */
    void (*note)(void *note_ud, const char *message);
    /* Told every failure, for ratel_store_errstr(). */
    void (*error)(void *note_ud, const char *message);
    void *note_ud;
    _Atomic uint64_t round_trips, commands, reconnects, redirects;
    _Atomic int breaker_open; /* nodes whose breaker is open, all engines */
    ratel_health_t *health;
    /* Each address's health source, one for all the store's engines:
       what one engine saw last of an address is the store's view of it,
       so a success on any engine ends an outage another engine saw, and
       closes the others' breakers for it (ratel__redis_health_source). */
    pthread_mutex_t sources_lock;
    struct ratel__health_source_s *sources;
} ratel__redis_shared_t;

/* One address ("host:port") as a source of the store's health. */
typedef struct ratel__health_source_s {
    struct ratel__health_source_s *next;
    int down; /* its flag in the store's health (ratel__health_set) */
    int warn; /* a Sentinel's: its warning flag (ratel__health_warn) */
    /* Successes seen on it by any engine after a failure: an engine whose
       breaker for the address is open closes it when this moved (the
       address answered another engine, e.g. the health check's PING). */
    _Atomic uint64_t ups;
    char name[300];
} ratel__health_source_t;

/* The health source of address `name`, made on first use; NULL when out
   of memory. Freed by ratel__redis_health_sources_free(). */
ratel__health_source_t *ratel__redis_health_source(ratel__redis_shared_t *sh,
                                                   const char *name);
void ratel__redis_health_sources_free(ratel__redis_shared_t *sh);

typedef struct ratel__engine_s ratel__engine_t;
typedef struct ratel__node_s ratel__node_t;
typedef struct ratel__rop_s ratel__rop_t;
typedef void (*ratel__rop_fn)(ratel__rop_t *rop);

/* One command, owned by its submitter until `done` has been called. */
struct ratel__rop_s {
    /* In: */
    ratel__rop_kind_t kind;
    const char *key;
    size_t keylen;
    const ratel_policy_t *policy; /* ACQUIRE, REFUND, RELEASE */
    ratel_request_t request;      /* ACQUIRE; REFUND uses its cost */
    uint32_t lease;               /* RELEASE */
    unsigned lease_flags;         /* RELEASE: RATEL_RENEW */
    const char *demand;           /* SLICE: the holders' demand key */
    size_t demandlen;
    uint64_t want;         /* SLICE: WANT; UNSLICE: UNSPENT */
    int64_t ttl_ms;        /* SLICE */
    uint64_t holder;       /* SLICE: HOLDER (0: none) */
    int64_t until_ms;      /* UNSLICE */
    int64_t at_ms;         /* >= 0: sent as AT */
    int64_t now_us;        /* the caller's time (the breaker's) */
    ratel__node_t *target; /* PING, LIBRARY: this node; else routed */
    int argc;              /* COMMAND: its words, the caller's */
    const char *const *argv;
    const size_t *argvlen;
    int force; /* try even when the node's breaker is open
                  (its failure then leaves the breaker) */
    ratel__rop_fn done;
    void *ud;
    /* Optional: told the final reply as soon as it is read, before `done`
       (which still follows at the end of the turn). It may take what it
       needs of `reply` and free it (setting `reply` to NULL, `rc` staying
       0), so that a turn's many replies are not all held until it ends;
       it must call nothing of the engine. */
    ratel__rop_fn reply_fn;
    /* Out, when `done` is called: */
    int rc;                /* 0: `reply` is set (unless reply_fn took it);
                              RATEL_EIO, RATEL_EPROTO */
    redisReply *reply;     /* the submitter frees it (freeReplyObject) */
    ratel__node_t *node;   /* the node it ran on last */
    int64_t down_until_us; /* rc != 0: the node's breaker (0: closed) */
    char found[80];        /* LIBRARY: the version there before ("" none) */
    int refused;           /* LIBRARY: the server refused FUNCTION LOAD */
    /* The engine's: */
    ratel__rop_t *qprev, *qnext; /* a node's queue or the failover's */
    ratel__rop_t *aprev, *anext; /* the engine's live commands, by deadline */
    void *conn;                  /* in flight on this connection */
    int64_t deadline_us;
    int attempts, asking, where;
};

/* The Redis Cluster slot of a key (of its first non-empty {hash tag}). */
unsigned ratel__key_slot(const char *key, size_t len);

/*
 * A new engine on `transport` (tud its instance) for the store's `shared`
 * settings. *hooks receives what the transport must call (its timer and
 * flush): create the transport with it, then set the transport's tud with
 * ratel__engine_set_transport(). NULL when out of memory.
 */
ratel__engine_t *ratel__engine_new(const ratel__redis_shared_t *shared,
                                   ratel__loop_hooks_t *hooks);
void ratel__engine_set_transport(ratel__engine_t *e,
                                 const ratel__transport_t *transport,
                                 void *tud);

/* Fails every live command (RATEL_EIO, "the store is closing"), closes
   every connection and frees the engine. */
void ratel__engine_free(ratel__engine_t *e);

/* Takes `rop` (its In fields set); `done` follows from the loop. */
void ratel__engine_submit(ratel__engine_t *e, ratel__rop_t *rop);

/*
 * The nodes requests go to now (the primary, or every node owning a
 * cluster slot) into serving[0..max), returning how many, as last
 * learnt: ratel__engine_discover() asks again first.
 */
size_t ratel__engine_serving(ratel__engine_t *e, ratel__node_t **serving,
                             size_t max);

/*
 * Asks for a cluster's slot map now (or, standalone with several
 * addresses or Sentinels, which node is primary): `done` gets rc 0 when
 * it was learnt, else RATEL_EIO with `why`. Runs like a command.
 */
void ratel__engine_discover(ratel__engine_t *e, ratel__rop_t *rop);

/* Whether the node's breaker is open at `now_us` (*until_us: until when). */
int ratel__engine_node_down(ratel__node_t *node, int64_t now_us,
                            int64_t *until_us);
/* "host:port" of a node, and its last failure ("" none). */
const char *ratel__engine_node_name(const ratel__node_t *node);
const char *ratel__engine_node_error(const ratel__node_t *node);
/* Stops counting the nodes that do not serve now (an old primary, a node
   without slots) as down health sources; 1 when the store's health
   changed (then ratel__health_notify()). */
int ratel__engine_health_prune(ratel__engine_t *e);
/* Stops counting a node that no longer serves as a down health source;
   1 when the store's health changed (then ratel__health_notify()). */
int ratel__engine_node_health_clear(ratel__node_t *node);

/* Whether error reply r's text starts with `prefix`. */
int ratel__reply_starts(const redisReply *r, const char *prefix);
/* Whether error reply r says the server cannot do it NOW (LOADING, BUSY,
   MASTERDOWN, CLUSTERDOWN, TRYAGAIN, OOM, READONLY). */
int ratel__reply_unavailable(const redisReply *r);

/* snprintf into a message buffer, where cutting the text is the intent. */
void ratel__msg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* RATEL_STORE_ENGINE_H */
