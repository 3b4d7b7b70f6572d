/*
 * effects.h - what a RATEL.* command writes to its key, and the effect it
 * propagates to replicas and the AOF (module/effects.c).
 */
#ifndef RATEL_MODULE_EFFECTS_H
#define RATEL_MODULE_EFFECTS_H

#include "redismodule.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Subscribes to what tells the module whether anyone receives effects
 * (server cron, role changes, SYNC and PSYNC). Call once, from OnLoad.
 */
int ratel__effects_init(RedisModuleCtx *ctx);

/*
 * Stores `len` bytes of state in `key` (open for writing, named `name`),
 * expiring at `expire_ms` (Unix ms), or deletes the key when len is 0; then
 * propagates the effect - SET name blob PXAT expire_ms, or DEL name - and
 * signals the key modified.
 */
void ratel__effects_write(RedisModuleCtx *ctx, RedisModuleKey *key,
                          RedisModuleString *name, const uint8_t *buf,
                          size_t len, int64_t expire_ms);

typedef struct ratel_effects_stats_s {
    uint64_t propagated; /* writes handed to Redis as SET ... PXAT / DEL */
    uint64_t unobserved; /* writes with no AOF, replica or backlog to take
                            them: nothing built */
    int nobody_listens;  /* the current view: 1 = no replica, no backlog */
} ratel_effects_stats_t;

void ratel__effects_stats(ratel_effects_stats_t *out);

#endif /* RATEL_MODULE_EFFECTS_H */
