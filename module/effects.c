/*
 * effects.c - writing a key's state, and propagating the write.
 *
 * A write reaches replicas and the AOF as its effect, `SET key blob PXAT t`
 * or `DEL key`, never as the command (docs/commands.md): a replica must not
 * decide again with its own clock. Building those arguments costs about as
 * much as the decision itself, so it is skipped where Redis would drop them
 * anyway - Redis 7.0's own test (shouldPropagate, server.c): no AOF, and a
 * master with no replica and no replication backlog.
 *
 * Redis tells a module about the AOF (the context flags) but not about
 * replicas, so this file keeps its own view, `nobody_listens`:
 *
 * - it starts false (at load time the RDB may not be read yet, and reading
 *   it can create a backlog);
 * - the server cron (`hz` times a second) sets it when the context flags
 *   say no AOF and INFO replication says role master, connected_slaves 0,
 *   repl_backlog_active 0;
 * - it turns false before the command runs when any client sends SYNC or
 *   PSYNC (a command filter: those commands create the backlog, and a
 *   replica attaching must receive every write from then on, during its
 *   full sync included), when the server's role changes (a promoted
 *   replica keeps its backlog for its own replicas) and on CONFIG SET
 *   (appendonly yes).
 *
 * A skipped write still counts as a change for the RDB save points, and
 * only RedisModule_Replicate and RedisModule_ReplicateVerbatim add to the
 * server's dirty counter. A skipped write calls ReplicateVerbatim for that
 * alone: with no AOF, no replica and no backlog, Redis propagates nothing
 * (alsoPropagate returns at once) - the same test that made the write skip
 * its effect - and the call costs ~50 instructions, where Replicate with
 * the "A" and "R" flags (propagate nowhere) costs ~2,000 (it looks the
 * command up by name: an sds, a split on '|', a hash; then an argv).
 */
#include "effects.h"

#include <string.h>
#include <strings.h>

static int nobody_listens;
static RedisModuleString *pxat; /* "PXAT", made once */
static ratel_effects_stats_t stats;

void ratel__effects_stats(ratel_effects_stats_t *out)
{
    *out = stats;
    out->nobody_listens = nobody_listens;
}

/* Whether INFO replication says no replica and no backlog can take a
   write: a master with neither. */
static int no_listeners(RedisModuleCtx *ctx)
{
    RedisModuleServerInfoData *info;
    unsigned long long replicas, backlog;
    const char *role;
    int err1 = 1, err2 = 1, none;

    info = RedisModule_GetServerInfo(ctx, "replication");
    if (!info)
        return 0;
    role = RedisModule_ServerInfoGetFieldC(info, "role");
    replicas =
        RedisModule_ServerInfoGetFieldUnsigned(info, "connected_slaves", &err1);
    backlog = RedisModule_ServerInfoGetFieldUnsigned(
        info, "repl_backlog_active", &err2);
    none = role && strcmp(role, "master") == 0 && !err1 && !err2 &&
           replicas == 0 && backlog == 0;
    RedisModule_FreeServerInfo(ctx, info);
    return none;
}

static void on_cron(RedisModuleCtx *ctx, RedisModuleEvent event,
                    uint64_t subevent, void *data)
{
    (void)event, (void)subevent, (void)data;
    if (!nobody_listens)
        nobody_listens =
            !(RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_AOF) &&
            no_listeners(ctx);
}

/* A role change or a CONFIG SET: someone may listen now. */
static void on_change(RedisModuleCtx *ctx, RedisModuleEvent event,
                      uint64_t subevent, void *data)
{
    (void)ctx, (void)event, (void)subevent, (void)data;
    nobody_listens = 0;
}

/* Runs before every command any client sends: SYNC and PSYNC end the
   silence before they create the backlog. */
static void on_command(RedisModuleCommandFilterCtx *filter)
{
    const char *name;
    size_t len;

    if (!nobody_listens || RedisModule_CommandFilterArgsCount(filter) < 1)
        return;
    name = RedisModule_StringPtrLen(RedisModule_CommandFilterArgGet(filter, 0),
                                    &len);
    if ((len == 4 && strncasecmp(name, "sync", 4) == 0) ||
        (len == 5 && strncasecmp(name, "psync", 5) == 0))
        nobody_listens = 0;
}

int ratel__effects_init(RedisModuleCtx *ctx)
{
    pxat = RedisModule_CreateString(NULL, "PXAT", 4);
    if (!pxat ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_CronLoop,
                                           on_cron) != REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(
            ctx, RedisModuleEvent_ReplicationRoleChanged, on_change) !=
            REDISMODULE_OK ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Config,
                                           on_change) != REDISMODULE_OK ||
        !RedisModule_RegisterCommandFilter(ctx, on_command,
                                           REDISMODULE_CMDFILTER_NOSELF))
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}

/*
 * Puts len bytes in the key's value. A value of another size is replaced
 * by a new one of exactly len bytes held as a plain string: StringTruncate
 * of an empty key allocates just that (a gcra key: MEMORY USAGE 80), where
 * StringSet of a created string would store an embedded one (96) and
 * growing in place over-allocates (an 828-byte blob held 1,328 bytes).
 */
static void store(RedisModuleKey *key, const uint8_t *buf, size_t len)
{
    size_t have;
    char *p;

    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY ||
        RedisModule_ValueLength(key) != len) {
        RedisModule_DeleteKey(key);
        RedisModule_StringTruncate(key, len);
    }
    p = RedisModule_StringDMA(key, &have, REDISMODULE_WRITE);
    if (p && have == len)
        memcpy(p, buf, len);
}

void ratel__effects_write(RedisModuleCtx *ctx, RedisModuleKey *key,
                          RedisModuleString *name, const uint8_t *buf,
                          size_t len, int64_t expire_ms)
{
    int observed = !nobody_listens;

    if (len == 0) {
        RedisModule_DeleteKey(key);
        if (observed)
            RedisModule_Replicate(ctx, "DEL", "s", name);
    } else {
        store(key, buf, len);
        RedisModule_SetAbsExpire(key, expire_ms);
        if (observed)
            RedisModule_Replicate(ctx, "SET", "sbsl", name, (const char *)buf,
                                  len, pxat, (long long)expire_ms);
    }
    if (observed) {
        stats.propagated++;
    } else {
        RedisModule_ReplicateVerbatim(ctx); /* the dirty count only */
        stats.unobserved++;
    }
    RedisModule_SignalModifiedKey(ctx, name);
}
