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
    RATEL_CMD_INFO     /* [AT ms] */
} ratel_cmd_t;

typedef struct ratel_cmd_args_s {
    ratel_policy_t policy;   /* ACQUIRE, REFUND */
    ratel_request_t request; /* cost, max_wait_ms, RATEL_PEEK */
    int has_at;              /* AT given */
    int64_t at_ms;           /* its value */
} ratel_cmd_args_t;

/* Largest AT accepted: RATEL_TIME_MAX_US in milliseconds, exclusive. */
#define RATEL_CMD_AT_MAX ((RATEL_TIME_MAX_US - 1) / 1000)

/*
 * Parses the arguments that follow the key: `argc` strings, argv[i] of
 * lens[i] bytes (any bytes; not NUL-terminated). Returns 0 and fills `out`,
 * or a negative RATEL_E* code with a message for the client in err (without
 * the "ERR " prefix), as docs/commands.md lists them.
 */
int ratel__cmd_parse(ratel_cmd_t cmd, int argc, const char *const *argv,
                     const size_t *lens, ratel_cmd_args_t *out, char *err,
                     size_t errlen);

#endif /* RATEL_MODULE_ARGS_H */
