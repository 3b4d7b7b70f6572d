/*
 * rlqs.h - rateld as Envoy's Rate Limit Quota Service (RLQS,
 * envoy.service.rate_limit_quota.v3; docs/envoy.md): the rlqs: section
 * of the configuration (config_rlqs.c), which maps a bucket_id to a
 * policy and a key, and the streaming server on the gRPC listener
 * (rlqs.c), which splits each bucket's rate among the Envoys subscribed
 * to it (rlqs_share.h).
 */
#ifndef RATELD_RLQS_H
#define RATELD_RLQS_H

#include "rateld/rlqs_share.h"
#include "http/grpc.h"

#include <stddef.h>
#include <stdint.h>

struct ratel__yaml_node_s;
struct reader_s;
struct rateld_config_s;
struct rateld_s;

#define RATELD_RLQS_PAIRS_MAX 8 /* match: and key: entries of a bucket */
#define RATELD_RLQS_BUCKETS_MAX 1024
#define RATELD_RLQS_NAME_MAX 64   /* a bucket_id key */
#define RATELD_RLQS_VALUE_MAX 256 /* a bucket_id value */
#define RATELD_RLQS_KEY_MAX 1024  /* a bucket's identity: policy and key */

/* What a bucket_id no bucket: entry matches gets. */
typedef enum rateld_rlqs_unmatched_e {
    RATELD_RLQS_UNMATCHED_DENY = 0, /* DENY_ALL for the ttl (default) */
    RATELD_RLQS_UNMATCHED_ALLOW,    /* ALLOW_ALL for the ttl */
    RATELD_RLQS_UNMATCHED_ABANDON   /* AbandonAction */
} rateld_rlqs_unmatched_t;

/* One entry of rlqs.buckets: which bucket_ids it takes, and how. */
typedef struct rateld_rlqs_bucket_s {
    char domain[128]; /* "": any */
    size_t nmatch;    /* bucket_id entries that must be present ... */
    char match_name[RATELD_RLQS_PAIRS_MAX][RATELD_RLQS_NAME_MAX];
    char match_value[RATELD_RLQS_PAIRS_MAX][RATELD_RLQS_VALUE_MAX]; /* ... so */
    size_t nkey; /* bucket_id entries whose values make the key */
    char key[RATELD_RLQS_PAIRS_MAX][RATELD_RLQS_NAME_MAX];
    size_t policy;            /* its index in the configuration */
    rateld_share_rule_t rule; /* the policy's rate, and the ttl's */
    int line;
} rateld_rlqs_bucket_t;

/* The rlqs: section. */
typedef struct rateld_rlqs_config_s {
    uint32_t ttl_ms;        /* assignment_time_to_live; default 10,000 */
    uint32_t grace_ms;      /* held past the ttl; default 1,000 */
    uint32_t floor_percent; /* split evenly; default 25 */
    int unmatched;          /* rateld_rlqs_unmatched_t */
    rateld_rlqs_bucket_t *buckets;
    size_t nbuckets;
    int line;
} rateld_rlqs_config_t;

/* A bucket_id's pairs as the stream read them (NUL-terminated). */
typedef struct rateld_rlqs_pair_s {
    const char *name, *value;
} rateld_rlqs_pair_t;

/* Reads the rlqs: section (after the policies it names); 0 or -1 with
   "FILE:LINE: rlqs...: reason" (config_rlqs.c). */
int rateld__read_rlqs(struct reader_s *r,
                      const struct ratel__yaml_node_s *node);

void rateld_rlqs_config_free(rateld_rlqs_config_t *rc);

/*
 * The bucket entry for a bucket_id of `n` pairs reported in `domain`:
 * the first entry whose domain (if it names one) is `domain`, whose
 * match: pairs are all in the bucket_id with their values, and whose
 * key: names are all in it; its identity (the policy's name and the key
 * values, each as LEN:BYTES) goes into key (cap bytes). NULL when none
 * matches or the identity does not fit.
 */
const rateld_rlqs_bucket_t *rateld_rlqs_match(const struct rateld_config_s *c,
                                              const char *domain,
                                              const rateld_rlqs_pair_t *pairs,
                                              size_t n, char *key, size_t cap);

/* The streaming method for the gRPC listener's table (rlqs.c). */
extern const ratel_grpc_stream_method_t rateld_rlqs_method;

/* The service's name, as gRPC health checks ask for it. */
#define RATELD_RLQS_SERVICE                                                    \
    "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

/* Whether the configuration worker `thread` runs with has an rlqs:
   section (the service is served), from a gRPC call's handler. */
int rateld_rlqs_on(struct rateld_s *d, unsigned thread);

/*
 * The server's state (rlqs.c): every bucket, and a timer on each worker's
 * loop that re-assigns its streams' buckets (and abandons the buckets a
 * reload dropped). 0, or -1 out of memory. Call once the HTTP server is
 * made. Stop (the timers) before the server is freed, free after: the
 * server's connections close their streams as it goes.
 */
int rateld_rlqs_start(struct rateld_s *d);
void rateld_rlqs_stop(struct rateld_s *d);
void rateld_rlqs_free(struct rateld_s *d);

#endif /* RATELD_RLQS_H */
