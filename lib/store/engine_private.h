/*
 * engine_private.h - the Redis engine's parts, shared by its files:
 *
 *   engine.c        commands' lives: queues, dispatch, deadlines, the
 *                   breaker, the loop's hooks
 *   engine_conn.c   one connection: the transport's callbacks, the
 *                   reply reader, the setup (AUTH, SELECT) and the node's
 *                   preparation (the module, the library or the script)
 *   engine_route.c  where a command goes: the cluster's slot map, MOVED
 *                   and ASK, failovers (ROLE), and which answers are sent
 *                   again
 *   engine_encode.c a command's bytes (RESP), as the node's mode asks
 *   engine_reply.c  the reply objects the reader builds
 */
#ifndef RATEL_STORE_ENGINE_PRIVATE_H
#define RATEL_STORE_ENGINE_PRIVATE_H

#include "store/engine.h"

#define ENGINE_MAX_NODES 256
#define ENGINE_SLOTS 16384

/* Where a command is (rop->where). */
enum {
    WHERE_NONE,
    WHERE_QUEUE,  /* its node's queue */
    WHERE_PARKED, /* a failover's: sent again after it */
    WHERE_WAIT,   /* a discovery's: told when it ends */
    WHERE_FLIGHT, /* on a connection, waiting for its reply */
    WHERE_HELD,   /* answered, its reply held until the WAIT after it
                     (wait_replicas): its connection's await list */
    WHERE_DONE    /* the done list, told at the flush */
};

/* What a reply on a connection answers. */
typedef enum step_e {
    STEP_ROP = 0, /* a command's (the rop's) */
    STEP_ASKING,  /* ASKING before a command: ignored */
    STEP_AUTH,
    STEP_SELECT,
    STEP_PING,        /* preparation: the peer is Redis */
    STEP_MODE,        /* preparation: COMMAND INFO ratel.acquire */
    STEP_VERSION,     /* preparation: FCALL_RO ratel_version 0 */
    STEP_LOAD,        /* preparation: FUNCTION LOAD REPLACE */
    STEP_SCRIPT,      /* preparation: SCRIPT LOAD */
    STEP_LIB_VERSION, /* a LIBRARY rop's FCALL_RO ratel_version 0 */
    STEP_LIB_LOAD,    /* a LIBRARY rop's FUNCTION LOAD REPLACE */
    STEP_SUBSCRIBE,   /* a Sentinel's SUBSCRIBE +switch-master */
    STEP_WAIT,        /* WAIT after writes (wait_replicas) */
    STEP_MANY,        /* the first ACQUIRE of one ratel_acquire_many */
    STEP_MANY_ITEM    /* each other ACQUIRE of it: no reply of its own */
} step_t;

typedef struct pend_s {
    ratel__rop_t *rop; /* STEP_ROP, STEP_LIB_*, STEP_MANY*: the command */
    step_t step;
    unsigned count; /* STEP_MANY: the ACQUIREs its one reply answers */
} pend_t;

/* Most ACQUIREs one ratel_acquire_many decides (FCALL, or the EVAL
   script's ACQUIRE_MANY): a batch's requests to one node go in calls of
   this many, each holding the server about this many decisions' time. */
#define ENGINE_MANY_MAX 64

typedef enum conn_state_e {
    CONN_OPENING, /* the transport connects (and shakes hands) */
    CONN_SETUP,   /* AUTH and SELECT sent, not answered yet */
    CONN_READY
} conn_state_t;

typedef struct conn_s conn_t;
struct conn_s {
    ratel__link_t link; /* first: the transport's callbacks find us */
    ratel__engine_t *e;
    ratel__node_t *node;
    conn_t *next; /* the node's connections */
    void *handle; /* the transport's */
    conn_state_t state;
    int64_t open_deadline_us; /* OPENING, SETUP: connect_timeout_ms */
    int64_t probe_at_us;      /* TLS, a node never reached: when a TLS
                                 handshake still unanswered starts the
                                 node's plain-text probe (0: never) */
    redisReader *reader;
    /* Commands encoded this turn, sent at the flush. */
    char *out;
    size_t outlen, outcap, outcmds;
    conn_t *dnext; /* the engine's connections with output */
    int dirty;
    /* Replies expected, oldest first (a ring). */
    pend_t *pend;
    size_t phead, pcount, pcap;
    /* wait_replicas: writes sent since the last WAIT, and the commands
       answered that wait for the WAIT after them (their replies held). */
    unsigned unwaited;
    ratel__rop_t *await_head, *await_tail;
    int answered;   /* a reply arrived: the peer speaks Redis */
    int subscriber; /* a Sentinel's +switch-master subscription */
};

struct ratel__node_s {
    ratel__engine_t *e;
    int sentinel; /* a Sentinel (redis+sentinel://), not a data node */
    char host[256];
    int port;
    char name[300];
    conn_t *conns;
    unsigned nconns;
    ratel__rop_t *qhead, *qtail; /* waiting for a connection or preparation */
    ratel__node_t *dnext;        /* the engine's nodes with queued commands */
    int dirty;
    ratel__node_mode_t mode;
    int code_loaded;   /* the library (FUNCTION) or the script (LUA) is there */
    conn_t *preparing; /* the connection preparing the node, if any */
    int ever_connected;
    int64_t down_until_us; /* breaker: no attempts before (0: closed) */
    int probing;           /* the probe's connection is being made */
    int fail_streak;
    int breaker_counted; /* counted in shared->breaker_open */
    char errstr[256];
    ratel__health_source_t *source; /* the address's, shared by the
                                       store's engines */
    uint64_t ups_seen;              /* source->ups when its breaker opened */
    struct probe_s *probe; /* a TLS handshake unanswered: is it plain? */
    int probed;            /* the probe ran (once per node) */
    int plain;             /* it found plain Redis: handshakes that time
                              out say so (plain_why), RATEL_EPROTO */
    char plain_why[300];
};

/* The rule texts of the last policy encoded: a turn usually carries many
   commands of one policy. */
typedef struct rule_texts_s {
    const ratel_policy_t *policy;
    ratel_policy_t copy; /* what was formatted (the pointer may be reused) */
    char text[RATEL_MAX_RULES][64];
    size_t len[RATEL_MAX_RULES];
} rule_texts_t;

struct ratel__engine_s {
    const ratel__redis_shared_t *sh;
    const ratel__transport_t *t;
    void *tud;
    ratel__node_t *nodes[ENGINE_MAX_NODES];
    size_t nnodes;
    size_t primary;   /* standalone: index in nodes */
    int have_primary; /* Sentinel: a primary was named (others: 1) */
    uint16_t slots[ENGINE_SLOTS]; /* cluster: node index + 1, 0: unknown */
    int64_t last_map_us, last_failover_us, last_now_us;
    /* Live commands by deadline (submission order: one timeout for all). */
    ratel__rop_t *ahead, *atail;
    /* Commands done, told at the flush. */
    ratel__rop_t *fhead, *ftail;
    ratel__node_t *dirty_nodes;
    conn_t *dirty_conns;
    int deferred;
    int64_t timer_at;
    /* A failover in progress: the commands it will send again (a
       cluster: the commands waiting for its map to be read). */
    ratel__rop_t *parked_head, *parked_tail;
    ratel__rop_t role[RATEL_REDIS_MAX_ADDRS];
    size_t roles_pending, role_found;
    int failing_over;
    /* Sentinel: the question asked now, to whom, and the subscription. */
    size_t asks_pending; /* Sentinels asked (in role[]) not answered yet */
    int ask_decided;     /* this round named a primary, or failed */
    int ask_refused;     /* RATEL_EPROTO: a Sentinel said the
                            configuration is wrong (no such primary,
                            credentials refused) */
    char ask_why[400];   /* the last Sentinel's failure */
    conn_t *subscription;
    /* A slot map being read: the discover commands waiting for it. */
    ratel__rop_t map_rop;
    int mapping;
    size_t map_round; /* the nodes known when this read started */
    /* The order this read asks nodes in (MAP_ASKED: asked already). */
    unsigned char map_rank[ENGINE_MAX_NODES];
    int64_t map_backoff_us; /* a serving node failing: reads this far apart */
    ratel__rop_t *wait_head, *wait_tail;
    int flushing;
    int freeing;
    int64_t clock_us; /* the transport's clock read this turn (0: not
                         yet): deadlines of commands issued together */
    rule_texts_t rules;
};

/* engine.c */
void ratel__queue_append(ratel__rop_t **head, ratel__rop_t **tail,
                         ratel__rop_t *rop);
void ratel__queue_unlink(ratel__rop_t **head, ratel__rop_t **tail,
                         ratel__rop_t *rop);
void ratel__engine_live_add(ratel__engine_t *e, ratel__rop_t *rop);
void ratel__engine_defer(ratel__engine_t *e);
void ratel__engine_finish(ratel__engine_t *e, ratel__rop_t *rop, int rc,
                          redisReply *reply);
void ratel__engine_enqueue(ratel__engine_t *e, ratel__node_t *node,
                           ratel__rop_t *rop);
void ratel__engine_node_dirty(ratel__node_t *node);
void ratel__engine_conn_dirty(conn_t *c);
void ratel__engine_node_failed(ratel__node_t *node, int rc, const char *why,
                               int forced_only);
void ratel__engine_node_ok(ratel__node_t *node);
void ratel__engine_error(ratel__engine_t *e, const char *message);
void ratel__engine_rearm(ratel__engine_t *e);
ratel__node_t *ratel__engine_node_at(ratel__engine_t *e, const char *host,
                                     int port, size_t *index);

/* engine_conn.c */
conn_t *ratel__conn_open(ratel__node_t *node, char *why, size_t whylen);
/* A TLS connection to a node never reached, unanswered for half its
   connect_timeout_ms: asks the address in plain text whether it is a
   plain Redis port (the node then fails with RATEL_EPROTO, "not TLS").
   Closed with the node's connections, and by ratel__probe_free(). */
void ratel__probe_start(ratel__node_t *node);
void ratel__probe_free(ratel__node_t *node);
/* wait_replicas: a WAIT after the writes pushed on `c` since the last. */
int ratel__conn_push_wait(conn_t *c);
void conn_close(conn_t *c);
int ratel__conn_push(conn_t *c, ratel__rop_t *rop, step_t step);
/* Fails the connection: closes it, its pending commands fail. */
void ratel__conn_fail(conn_t *c, int rc, int closed_by_transport);
/* Starts the node's preparation on `c` (ready) when it needs one. */
void ratel__conn_prepare(conn_t *c);
int ratel__node_prepared(const ratel__node_t *node);

/* engine_reply.c: the reader builds its replies with these (the objects
   freeReplyObject() frees, made faster). */
void ratel__engine_reply_functions(redisReader *reader);

/* engine_encode.c */
typedef struct argv_s {
    const char *v[24 + RATEL_MAX_RULES];
    size_t len[24 + RATEL_MAX_RULES];
    int n;
} argv_t;
int ratel__encode_argv(conn_t *c, const argv_t *a);
int ratel__encode_rop(conn_t *c, const ratel__rop_t *rop);
int ratel__encode_many(conn_t *c, ratel__rop_t *const *rops, size_t n);
int ratel__conn_push_many(conn_t *c, ratel__rop_t *const *rops, size_t n);
int ratel__encode_words(conn_t *c, int argc, ...);

/* engine_sentinel.c */
/* Asks the Sentinels for the primary (unless asked within 100 ms, or
   `force`): 1 when a question is under way. */
int ratel__sentinel_ask(ratel__engine_t *e, int force);
/* A message on the subscription (+switch-master). */
void ratel__sentinel_message(conn_t *c, const redisReply *r);

/* engine_route.c */
/* The failover or the Sentinels' answer is in: `found` is the primary's
   index in nodes ((size_t)-1: none); parked commands go there or fail,
   with `rc` when not 0 (RATEL_EPROTO: the configuration is wrong), else
   RATEL_EIO. */
void ratel__route_primary_found(ratel__engine_t *e, size_t found, int rc);
/* The node a command goes to; NULL with the command parked when it waits
   for a cluster's map being read (it is sent where the map says then). */
ratel__node_t *ratel__route_rop(ratel__engine_t *e, ratel__rop_t *rop);
/* Whether one command may carry both keys: always but in a cluster, where
   only keys of one slot may. */
int ratel__route_same_slot(const ratel__engine_t *e, const ratel__rop_t *a,
                           const ratel__rop_t *b);
/* Looks at an answer: 1 when the command was sent again (or parked for
   a failover), 0 when it is final. */
int ratel__route_retry(ratel__engine_t *e, ratel__rop_t *rop, redisReply *r);
/* A transport failure of the primary's command: 1 when parked for a
   failover (sent again after it), 0 when final. */
int ratel__route_park(ratel__engine_t *e, ratel__rop_t *rop, int rc);

#endif /* RATEL_STORE_ENGINE_PRIVATE_H */
