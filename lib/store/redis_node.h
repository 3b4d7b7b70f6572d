/*
 * redis_node.h - one Redis server as the Redis store sees it: a pool of
 * connections and a queue of commands that concurrent callers share.
 *
 * Shared pipelines. A caller puts its commands (ops) on the node's queue.
 * Whoever finds an idle connection becomes the leader for one round trip:
 * it takes every op queued at that moment (its own and other callers'),
 * writes them in one pipeline, reads the replies, hands each op its reply
 * and wakes the callers. While all connections are busy, new ops wait in
 * the queue and leave together in the next round trip. So at low load a
 * request costs one round trip and no added delay, and at high load the
 * number of round trips per second stays near pool size / RTT while the
 * commands per round trip grow: throughput does not collapse to one round
 * trip per request.
 *
 * Breaker. A transport failure (refused, reset, timeout, not Redis) marks
 * the node down until `breaker_us` later in the callers' time; until then
 * its ops fail at once with RATEL_EIO instead of each paying a timeout,
 * and the failure policy decides them. The first op after that instant is
 * the probe: its round trip reconnects, and success brings the node back;
 * each probe that fails doubles the interval, up to 8 x breaker_us.
 *
 * Preparation. A node's first round trip on a connection learns how to run
 * the core there (prepare() in redis_node.c): the module when it is loaded;
 * else the Functions library (FCALL ratel_*), checked with FCALL_RO
 * ratel_version 0 and loaded (FUNCTION LOAD REPLACE) when absent or of
 * another version; else, when the server refuses FUNCTION LOAD (Redis 6,
 * an ACL without it, a managed service), the EVAL script by EVALSHA, which
 * the store's note says once. What it learnt stays until an answer says it
 * is gone (NOSCRIPT, "Function not found", an unknown command).
 *
 * Health. Each node is one source of its store's health (health.h): down
 * from a failed round trip (the breaker opening, or a failed PING, which
 * leaves the breaker alone) until a round trip on it succeeds. The change
 * is recorded under the node's lock, and the store's watcher is told once
 * ratel__node_run() has let go of it.
 */
#ifndef RATEL_REDIS_NODE_H
#define RATEL_REDIS_NODE_H

#include "ratel.h"
#include "store/health.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* How the node runs the core, as found at its first connection. */
typedef enum node_mode_e {
    NODE_MODE_UNKNOWN = 0,
    NODE_MODE_MODULE,   /* RATEL.* commands */
    NODE_MODE_FUNCTION, /* FCALL ratel_* of the library (FUNCTION LOAD) */
    NODE_MODE_LUA       /* EVALSHA of the EVAL script (SCRIPT LOAD) */
} node_mode_t;

typedef enum op_kind_e {
    OP_ACQUIRE,
    OP_REFUND,
    OP_RESET,
    OP_RELEASE,
    OP_GET,
    OP_PING
} op_kind_t;

/* One command of one caller, on the caller's stack until it is done. */
typedef struct op_s {
    struct op_s *next; /* queue link */
    op_kind_t kind;
    const char *key;
    size_t keylen;
    const ratel_policy_t *policy; /* ACQUIRE, REFUND, RELEASE */
    ratel_request_t request;      /* ACQUIRE; REFUND uses its cost */
    uint32_t lease;               /* RELEASE: the lease id */
    unsigned lease_flags;         /* RELEASE: RATEL_RENEW */
    int64_t at_ms;                /* >= 0: sent as AT */
    int asking;                   /* send ASKING first (cluster ASK) */
    int force;                    /* PING: try even if the breaker is open */
    /* Filled by the leader; `done` last, under the node's lock. */
    int rc;              /* 0: `reply` is set; RATEL_EIO / RATEL_EPROTO */
    redisReply *reply;   /* the caller frees it */
    node_mode_t mode;    /* how the node was asked */
    struct node_s *node; /* the node it ran on */
    int done;
} op_t;

/* Settings every node of a store shares. */
typedef struct node_config_s {
    int connect_timeout_ms;
    int command_timeout_ms;
    unsigned pool_size;
    ratel_redis_mode_t mode;
    int64_t breaker_us;
    const char *username; /* "" or NULL: none */
    const char *password; /* NULL: no AUTH */
    int db;               /* SELECT when not 0 */
    const char *library;  /* the Functions library, `#!lua name=ratel` */
    size_t library_len;
    const char *library_version; /* what its ratel_version answers */
    const char *script;          /* the EVAL script */
    size_t script_len;
    char *script_sha; /* 41 bytes, store-wide, set by SCRIPT LOAD */
    pthread_mutex_t *sha_lock;
    /* Told, once per node and change, what a user should know that is no
       failure: FUNCTION LOAD refused, the EVAL script used instead. */
    void (*note)(void *note_ud, const char *message);
    void *note_ud;
    _Atomic uint64_t *round_trips; /* store counters */
    _Atomic uint64_t *commands;
    _Atomic uint64_t *reconnects;
    ratel_health_t *health; /* the store's */
} node_config_t;

typedef struct node_s {
    char host[256];
    int port;
    char name[300]; /* "host:port" for messages */
    const node_config_t *cfg;

    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    op_t *head, *tail;   /* queued ops, oldest first */
    redisContext **idle; /* connected and idle, a stack */
    unsigned nidle;
    unsigned nbusy;      /* slots held by leaders */
    unsigned generation; /* bumped on failure: older connections close */
    node_mode_t mode;
    int code_loaded; /* the library (FUNCTION) or the script (LUA) is known
                        to be on the server */
    int ever_connected;
    int64_t down_until_us; /* breaker: no attempts before this (0: up) */
    int probing;           /* a probe's round trip is in flight */
    int fail_streak;       /* failed round trips in a row (1..3) */
    char errstr[256];      /* why it is down */
    int health_down;       /* its flag as a health source: written under
                              `lock` and the health's lock, read under
                              either */
} node_t;

/* Allocates a node for host:port; NULL when out of memory. */
node_t *ratel__node_new(const char *host, int port, const node_config_t *cfg);
void ratel__node_free(node_t *node);

/*
 * Runs `n` ops on the node and returns when every one is done (each with its
 * rc and reply). `now_us` is the callers' time for the breaker.
 */
void ratel__node_run(node_t *node, op_t **ops, size_t n, int64_t now_us);

/*
 * Forgets what was learnt at connect time (the mode, the loaded library or
 * script) so that the next round trip finds it again: `mode` after an
 * unknown command (a restart without the module, a failover to an older
 * server), `code` after NOSCRIPT or "Function not found" (a restart, a
 * failover, SCRIPT FLUSH, FUNCTION FLUSH).
 */
void ratel__node_forget(node_t *node, int mode, int code);

/*
 * Stops counting the node as a down source of its store's health (it no
 * longer serves: a failover chose another primary, or it owns no cluster
 * slot). Returns 1 when the store's health changed (then call
 * ratel__health_notify()).
 */
int ratel__node_health_clear(node_t *node);

/* Copies the node's last failure into buf ("" when none). */
void ratel__node_error(node_t *node, char *buf, size_t len);

/* Whether the node's breaker is open at `now_us`; *retry_us until when. */
int ratel__node_down(node_t *node, int64_t now_us, int64_t *until_us);

/*
 * Opens a connection of its own to host:port with the config's timeouts,
 * AUTH and SELECT (not from the pool; for cluster maps and failover
 * probes). NULL with a message in err on failure.
 */
redisContext *ratel__node_connect(const node_config_t *cfg, const char *host,
                                  int port, char *err, size_t errlen,
                                  int *proto);

/*
 * Makes sure that the server on `c` (`name` in messages) has this build's
 * Functions library: asks FCALL_RO ratel_version 0 and, unless it answers
 * cfg->library_version, sends FUNCTION LOAD REPLACE (a library of another
 * version is replaced, never kept: two builds sharing a server each
 * replace the other's). Returns 0 with the version found before in `found`
 * ("" none; equal to ours: nothing was loaded). Else RATEL_EIO / RATEL_EPROTO
 * with the reason in err, and *refused set when the server refused the
 * load itself (an unknown command, NOPERM, an error of the library) rather
 * than failing to answer or being unable to now (LOADING, READONLY, OOM...).
 */
int ratel__node_library(redisContext *c, const node_config_t *cfg,
                        const char *name, char *found, size_t foundlen,
                        int *refused, char *err, size_t errlen);

/* Whether reply r's text starts with `prefix`. */
int ratel__reply_starts(const redisReply *r, const char *prefix);

/*
 * Whether error reply r says the server cannot do it NOW (LOADING, BUSY,
 * MASTERDOWN, CLUSTERDOWN, TRYAGAIN, OOM, READONLY): a failure to retry
 * later, which the failure policy decides meanwhile, not a refusal.
 */
int ratel__reply_unavailable(const redisReply *r);

/* snprintf into a message buffer, where cutting the text is the intent
   (and gcc's truncation warnings would only be noise). */
void ratel__msg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* RATEL_REDIS_NODE_H */
