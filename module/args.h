/*
 * args.h - the Redis module's argument parsing, kept apart from the Redis
 * API so that it can be unit-tested and fuzzed as a pure function
 * (tests/fuzz/fuzz_module_args.c).
 */
#ifndef RATEL_MODULE_ARGS_H
#define RATEL_MODULE_ARGS_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ratel_cmd_e {
    RATEL_CMD_ACQUIRE, /* [COST n] [PEEK] [MAXWAIT ms] [AT ms] rule... */
    RATEL_CMD_REFUND,  /* [COST n] [AT ms] rule... */
    RATEL_CMD_INFO,    /* [AT ms] */
    RATEL_CMD_RELEASE, /* LEASE [RENEW] [AT ms] rule... */
    RATEL_CMD_SLICE,   /* WANT TTL ms [HOLDER id] [AT ms] rule... */
    RATEL_CMD_UNSLICE  /* UNSPENT UNTIL ms [AT ms] rule... */
} ratel_cmd_t;

typedef struct ratel_cmd_args_s {
    ratel_policy_t policy;   /* ACQUIRE, REFUND, RELEASE */
    ratel_request_t request; /* cost, max_wait_ms, RATEL_PEEK */
    uint32_t lease;          /* RELEASE: the lease id, 1..2^32-1 */
    unsigned lease_flags;    /* RELEASE: RATEL_RENEW */
    int has_at;              /* AT given */
    int64_t at_ms;           /* its value */
    uint64_t want;           /* SLICE: permits asked, 1..RATEL_LIMIT_MAX */
    int64_t ttl_ms;          /* SLICE: the slice's lifetime */
    uint64_t holder;         /* SLICE: HOLDER, 0 when not given */
    uint64_t unspent;        /* UNSLICE: permits to give back */
    int64_t until_ms;        /* UNSLICE: the slice's expires_at_ms */
} ratel_cmd_args_t;

/* Largest AT accepted: RATEL_TIME_MAX_US in milliseconds, exclusive. */
#define RATEL_CMD_AT_MAX RATEL_AT_MAX_MS
_Static_assert(RATEL_AT_MAX_MS == (RATEL_TIME_MAX_US - 1) / 1000,
               "AT runs to the last millisecond before RATEL_TIME_MAX_US");

/*
 * Parsed rule lists kept across calls: a call whose rule arguments are
 * byte for byte those of an earlier successful call takes its policy from
 * here instead of parsing and checking the rules again. At most this many
 * lists (4-way set-associative, the least recently used of a set replaced);
 * a list longer than RATEL_POLICY_CACHE_KEY_MAX bytes (rules plus one
 * length byte each) is parsed every time. Errors are never kept.
 */
#define RATEL_POLICY_CACHE_SIZE 256
#define RATEL_POLICY_CACHE_KEY_MAX 160

/*
 * Parses the arguments that follow the key: `argc` strings, argv[i] of
 * lens[i] bytes (any bytes; not NUL-terminated). Returns 0 and fills `out`,
 * or a negative RATEL_E* code with a message for the client in err (without
 * the "ERR " prefix), as docs/commands.md lists them.
 *
 * The result is the same whether the rules come from the cache above or
 * not. The cache is process-wide and unlocked: call from one thread (the
 * module: Redis's main thread).
 */
int ratel__cmd_parse(ratel_cmd_t cmd, int argc, const char *const *argv,
                     const size_t *lens, ratel_cmd_args_t *out, char *err,
                     size_t errlen);

typedef struct ratel_policy_cache_stats_s {
    uint64_t hits;    /* calls whose rules were found */
    uint64_t misses;  /* calls that parsed their rules (errors included) */
    uint32_t entries; /* rule lists held, at most RATEL_POLICY_CACHE_SIZE */
} ratel_policy_cache_stats_t;

/* The cache's counters since the process started. */
void ratel__policy_cache_stats(ratel_policy_cache_stats_t *out);

#endif /* RATEL_MODULE_ARGS_H */
