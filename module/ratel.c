/*
 * ratel.c - the Redis module: thin glue from RATEL.* commands to the core.
 *
 * Every decision is made by the same core libratel runs (lib/core, linked
 * in); this file only reads the key, calls the core and writes back. The
 * contract is docs/commands.md:
 *
 * - Time is the server's wall clock, read once per command (or AT).
 * - A key is one Redis string holding the state blob (docs/state-format.md),
 *   shared with the lua/ scripts. It is written only when its bytes change,
 *   with its absolute expiry at the instant its state is empty again.
 * - What is written is replicated as its effect - SET key blob PXAT t, or
 *   DEL key - never as the command, so replicas and AOF replay hold exactly
 *   the primary's bytes whatever their own clocks say (module/effects.c).
 * - A key that holds anything but ratel state (another type, an empty or
 *   foreign string, a newer version) is refused by every command, RESET
 *   included. Nothing is written when a command fails.
 * - A policy's rules are parsed once and kept (module/args.c).
 * - What each command declares to Redis - flags, key spec, ACL categories,
 *   COMMAND DOCS - is module/commands.c's table; module/acl.c stands in
 *   for the categories on servers that cannot attach them (Redis 7.0).
 */
#include "redismodule.h"

#include "args.h"
#include "commands.h"
#include "effects.h"
#include "ratel.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MODULE_NAME "ratel"
#define MODULE_VERSION 1

static int64_t wall_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The command's instant: AT, or the server's clock, read once. */
static int64_t now_of(const ratel_cmd_args_t *a)
{
    return a->has_at ? a->at_ms * 1000 : wall_clock_us();
}

/* Parses argv[keys + 1..] (after the command's `keys` keys) for `cmd`,
   replying with the error when it fails. */
static int parse_or_reply(RedisModuleCtx *ctx, ratel_cmd_t cmd,
                          RedisModuleString **argv, int argc, int keys,
                          ratel_cmd_args_t *a)
{
    const char *args[2 * RATEL_MAX_RULES + 16];
    size_t lens[2 * RATEL_MAX_RULES + 16];
    char err[600], reply[620];
    int n = argc - 1 - keys;

    /* More arguments than any valid call has: let the parser see enough
       of them to name the problem. */
    if (n > (int)(sizeof args / sizeof args[0]))
        n = (int)(sizeof args / sizeof args[0]);
    for (int i = 0; i < n; i++)
        args[i] = RedisModule_StringPtrLen(argv[i + 1 + keys], &lens[i]);
    if (argc - 1 - keys > n) {
        RedisModule_ReplyWithError(ctx, "ERR ratel: at most 8 rules");
        return REDISMODULE_ERR;
    }
    if (ratel__cmd_parse(cmd, n, args, lens, a, err, sizeof err) != 0) {
        snprintf(reply, sizeof reply, "ERR %s", err);
        RedisModule_ReplyWithError(ctx, reply);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

/* Replies with the error for a failed core call. */
static int reply_core_error(RedisModuleCtx *ctx, int rc)
{
    switch (rc) {
    case RATEL_ECORRUPT:
        return RedisModule_ReplyWithError(
            ctx, "ERR ratel: key holds a value that is not ratel state");
    case RATEL_EVERSION:
        return RedisModule_ReplyWithError(
            ctx, "ERR ratel: key holds ratel state of an unknown version");
    default: {
        char msg[200];
        snprintf(msg, sizeof msg, "ERR ratel: %s (%s)", ratel_strerror(rc),
                 ratel_err_name(rc));
        return RedisModule_ReplyWithError(ctx, msg);
    }
    }
}

/* The seven integers of a decision, and an eighth (`extra`: the lease an
   ACQUIRE took, whether RELEASE found its lease held) when `with_extra`. */
static int reply_decision(RedisModuleCtx *ctx, const ratel_decision_t *d,
                          int with_extra, long long extra)
{
    RedisModule_ReplyWithArray(ctx, with_extra ? 8 : 7);
    RedisModule_ReplyWithLongLong(ctx, d->allowed);
    RedisModule_ReplyWithLongLong(ctx, d->limit);
    RedisModule_ReplyWithLongLong(ctx, d->remaining);
    RedisModule_ReplyWithLongLong(ctx, d->retry_after_ms);
    RedisModule_ReplyWithLongLong(ctx, d->reset_after_ms);
    RedisModule_ReplyWithLongLong(ctx, d->rule);
    RedisModule_ReplyWithLongLong(ctx, d->wait_ms);
    if (with_extra)
        RedisModule_ReplyWithLongLong(ctx, extra);
    return REDISMODULE_OK;
}

/* SLICE's and UNSLICE's replies: the first `lead` of (a, b, c) - granted,
   expires_at_ms, lifetime_ms; or returned - then limit, remaining,
   retry_after_ms, reset_after_ms and rule. */
static int reply_slice(RedisModuleCtx *ctx, int lead, long long a, long long b,
                       long long c, const ratel_decision_t *d)
{
    const long long v[] = {a,
                           b,
                           c,
                           d->limit,
                           d->remaining,
                           d->retry_after_ms,
                           d->reset_after_ms,
                           d->rule};

    RedisModule_ReplyWithArray(ctx, lead + 5);
    for (int i = 0; i < 8; i++)
        if (i < lead || i >= 3)
            RedisModule_ReplyWithLongLong(ctx, v[i]);
    return REDISMODULE_OK;
}

/*
 * Opens `name` in `mode` into *key (NULL for a missing key opened to read)
 * and copies its bytes to buf (*len of them); *value (if not NULL) points
 * at them in the key, valid until the key is written or closed. A key of
 * another type, or a string that is empty or longer than any blob, gets
 * its error reply and REDISMODULE_ERR.
 */
static int open_state(RedisModuleCtx *ctx, RedisModuleString *name, int mode,
                      RedisModuleKey **key, uint8_t *buf, size_t *len,
                      const char **value)
{
    int type;
    const char *p;

    *key = RedisModule_OpenKey(ctx, name, mode);
    type = RedisModule_KeyType(*key);
    *len = 0;
    if (value)
        *value = "";
    if (type == REDISMODULE_KEYTYPE_EMPTY)
        return REDISMODULE_OK;
    if (type != REDISMODULE_KEYTYPE_STRING) {
        RedisModule_CloseKey(*key);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return REDISMODULE_ERR;
    }
    p = RedisModule_StringDMA(*key, len, REDISMODULE_READ);
    /* An empty string is not a ratel key with no state (that key does not
       exist): something else wrote it. */
    if (*len == 0 || *len > RATEL_STATE_MAX) {
        RedisModule_CloseKey(*key);
        reply_core_error(ctx, RATEL_ECORRUPT);
        return REDISMODULE_ERR;
    }
    memcpy(buf, p, *len);
    if (value)
        *value = p;
    return REDISMODULE_OK;
}

/*
 * Whether the call rewrote the key's bytes. An admitted acquire always does
 * (every algorithm records the charge); a peek never does; otherwise (a
 * denial that converted a key written under other rules, a refund) compare.
 */
static int state_changed(const uint8_t *buf, size_t len, const char *value,
                         size_t value_len)
{
    return len != value_len || memcmp(buf, value, len) != 0;
}

/* The instant the state is empty again: never early. */
static int64_t expiry_ms(int64_t now_us, const ratel_decision_t *d)
{
    return (now_us + 999) / 1000 + d->reset_after_ms;
}

/* RATEL.ACQUIRE key [COST n] [PEEK] [MAXWAIT ms] [AT ms] rule [rule ...] */
static int acquire_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                           int argc)
{
    static uint8_t buf[RATEL_STATE_MAX];
    ratel_cmd_args_t a;
    ratel_decision_t d;
    RedisModuleKey *key;
    const char *value;
    size_t old_len, len;
    int64_t now;
    int rc, changed;

    if (argc < 3)
        return RedisModule_WrongArity(ctx);
    if (parse_or_reply(ctx, RATEL_CMD_ACQUIRE, argv, argc, 1, &a) !=
        REDISMODULE_OK)
        return REDISMODULE_OK;
    if (open_state(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key,
                   buf, &old_len, &value) != REDISMODULE_OK)
        return REDISMODULE_OK;
    now = now_of(&a);
    len = old_len;
    rc = ratel_policy_acquire(&a.policy, buf, &len, sizeof buf, now, &a.request,
                              &d);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        return reply_core_error(ctx, rc);
    }
    /* Written when the bytes changed: admitted, or converted on denial. */
    if (a.request.flags & RATEL_PEEK)
        changed = 0;
    else if (d.allowed)
        changed = 1;
    else
        changed = state_changed(buf, len, value, old_len);
    if (changed)
        ratel__effects_write(ctx, key, argv[1], buf, len, expiry_ms(now, &d));
    RedisModule_CloseKey(key);
    /* A policy with a concurrent rule answers the lease (0: none taken). */
    return reply_decision(ctx, &d, ratel_policy_has_leases(&a.policy), d.lease);
}

/*
 * RATEL.REFUND key [COST n] [AT ms] rule [rule ...]
 * RATEL.RELEASE key LEASE [RENEW] [AT ms] rule [rule ...]
 * RATEL.UNSLICE key UNSPENT UNTIL ms [AT ms] rule [rule ...]
 * All change the key and answer it as a peek sees it; RELEASE adds
 * whether the lease was held, UNSLICE leads with the permits returned
 * ([returned, limit, remaining, retry_after_ms, reset_after_ms, rule]).
 */
static int change_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                          int argc, ratel_cmd_t cmd)
{
    static uint8_t buf[RATEL_STATE_MAX];
    ratel_cmd_args_t a;
    ratel_decision_t d;
    RedisModuleKey *key;
    const char *value;
    size_t old_len, len;
    int64_t now;
    uint64_t returned = 0;
    int rc, held = 0;

    if (argc < (cmd == RATEL_CMD_UNSLICE ? 4 : 3))
        return RedisModule_WrongArity(ctx);
    if (parse_or_reply(ctx, cmd, argv, argc, 1, &a) != REDISMODULE_OK)
        return REDISMODULE_OK;
    if (open_state(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key,
                   buf, &old_len, &value) != REDISMODULE_OK)
        return REDISMODULE_OK;
    now = now_of(&a);
    len = old_len;
    rc = cmd == RATEL_CMD_RELEASE
             ? ratel_policy_release(&a.policy, buf, &len, sizeof buf, now,
                                    a.lease, a.lease_flags, &held, &d)
         : cmd == RATEL_CMD_UNSLICE
             ? ratel_policy_slice_return(&a.policy, buf, &len, sizeof buf, now,
                                         a.unspent, a.until_ms * 1000,
                                         &returned, &d)
             : ratel_policy_refund(&a.policy, buf, &len, sizeof buf, now,
                                   a.request.cost, &d);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        return reply_core_error(ctx, rc);
    }
    if (state_changed(buf, len, value, old_len))
        ratel__effects_write(ctx, key, argv[1], buf, len, expiry_ms(now, &d));
    RedisModule_CloseKey(key);
    if (cmd == RATEL_CMD_UNSLICE)
        return reply_slice(ctx, 1, (long long)returned, 0, 0, &d);
    return reply_decision(ctx, &d, cmd == RATEL_CMD_RELEASE, held);
}

/* A demand record as RATEL.SLICE rewrites it: the key open (NULL: no
   fair share in this call) and its new bytes. */
typedef struct demand_s {
    RedisModuleKey *key;
    uint8_t rec[RATEL_DEMAND_MAX];
    size_t len;
} demand_t;

/*
 * The holders' demand beside the key (argv[2]) for RATEL.SLICE with
 * HOLDER: the record with this holder's want noted, in *dm (written by
 * the caller once the slice is taken), and the sum of the live wants in
 * *total. Without HOLDER, or with the key itself as the demand key,
 * nothing is read (dm->key NULL) and *total is the want. REDISMODULE_ERR
 * after replying with the error.
 */
static int note_demand_or_reply(RedisModuleCtx *ctx, RedisModuleString **argv,
                                const ratel_cmd_args_t *a, int64_t now_us,
                                demand_t *dm, uint64_t *total)
{
    RedisModuleKey *key;
    uint8_t *rec = dm->rec;
    size_t len, klen, dlen;
    const char *k = RedisModule_StringPtrLen(argv[1], &klen),
               *dk = RedisModule_StringPtrLen(argv[2], &dlen);
    int rc;

    *total = a->want;
    dm->key = NULL;
    if (a->holder == 0 || (klen == dlen && memcmp(k, dk, klen) == 0))
        return REDISMODULE_OK;
    key =
        RedisModule_OpenKey(ctx, argv[2], REDISMODULE_READ | REDISMODULE_WRITE);
    len = 0;
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_STRING) {
        const char *p = RedisModule_StringDMA(key, &len, REDISMODULE_READ);
        /* No record is empty or longer: "RD" refused below. */
        if (len == 0 || len > RATEL_DEMAND_MAX)
            p = "", len = 1;
        memcpy(rec, p, len);
    } else if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_CloseKey(key);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return REDISMODULE_ERR;
    }
    rc = ratel_slice_demand_note(rec, &len, sizeof dm->rec, now_us / 1000,
                                 a->ttl_ms, a->holder, a->want, total);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        RedisModule_ReplyWithError(
            ctx, rc == RATEL_EVERSION
                     ? "ERR ratel: demand key holds a demand record of an "
                       "unknown version"
                     : "ERR ratel: demand key holds a value that is not a "
                       "ratel demand record");
        return REDISMODULE_ERR;
    }
    dm->key = key;
    dm->len = len;
    return REDISMODULE_OK;
}

/*
 * RATEL.SLICE key demand-key WANT TTL ms [HOLDER id] [AT ms] rule...
 * [granted, expires_at_ms, lifetime_ms, limit, remaining, retry_after_ms,
 * reset_after_ms, rule]; the key written only when something is granted.
 */
static int slice_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                         int argc)
{
    static uint8_t buf[RATEL_STATE_MAX];
    static demand_t dm;
    ratel_cmd_args_t a;
    ratel_decision_t d;
    RedisModuleKey *key;
    size_t len;
    uint64_t granted, total;
    int64_t now, expires_us, expires_ms;
    int rc;

    if (argc < 5)
        return RedisModule_WrongArity(ctx);
    if (parse_or_reply(ctx, RATEL_CMD_SLICE, argv, argc, 2, &a) !=
        REDISMODULE_OK)
        return REDISMODULE_OK;
    if (open_state(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key,
                   buf, &len, NULL) != REDISMODULE_OK)
        return REDISMODULE_OK;
    now = now_of(&a);
    if (note_demand_or_reply(ctx, argv, &a, now, &dm, &total) !=
        REDISMODULE_OK) {
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    rc = ratel_policy_slice_shared(&a.policy, buf, &len, sizeof buf, now,
                                   a.want, total, a.ttl_ms * 1000, &granted,
                                   &expires_us, &d);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        RedisModule_CloseKey(dm.key); /* NULL-safe */
        return reply_core_error(ctx, rc);
    }
    /* Both keys' bytes, each with its expiry: the demand noted even when
       nothing is granted (a starved holder still wants its share). */
    if (granted > 0)
        ratel__effects_write(ctx, key, argv[1], buf, len, expiry_ms(now, &d));
    RedisModule_CloseKey(key);
    if (dm.key) {
        ratel__effects_write(ctx, dm.key, argv[2], dm.rec, dm.len,
                             now / 1000 + 2 * a.ttl_ms);
        RedisModule_CloseKey(dm.key);
    }
    expires_ms = expires_us / 1000;
    return reply_slice(ctx, 3, (long long)granted, expires_ms,
                       granted > 0 ? expires_ms - now / 1000 : 0, &d);
}

static int refund_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                          int argc)
{
    return change_command(ctx, argv, argc, RATEL_CMD_REFUND);
}

static int release_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                           int argc)
{
    return change_command(ctx, argv, argc, RATEL_CMD_RELEASE);
}

static int unslice_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                           int argc)
{
    return change_command(ctx, argv, argc, RATEL_CMD_UNSLICE);
}

/* RATEL.RESET key: deletes ratel state, and refuses what ACQUIRE and INFO
   refuse (a key of another type, a string that is not ratel state). */
static int reset_command(RedisModuleCtx *ctx, RedisModuleString **argv,
                         int argc)
{
    static uint8_t buf[RATEL_STATE_MAX];
    RedisModuleKey *key;
    size_t len;
    int rc;

    if (argc != 2)
        return RedisModule_WrongArity(ctx);
    if (open_state(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key,
                   buf, &len, NULL) != REDISMODULE_OK)
        return REDISMODULE_OK;
    rc = ratel_state_validate(buf, len);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        return reply_core_error(ctx, rc);
    }
    if (len > 0)
        ratel__effects_write(ctx, key, argv[1], NULL, 0, 0);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, len > 0);
}

static void reply_field(RedisModuleCtx *ctx, const char *name, long long v)
{
    RedisModule_ReplyWithSimpleString(ctx, name);
    RedisModule_ReplyWithLongLong(ctx, v);
}

/* RATEL.INFO key [AT ms] */
static int info_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    static uint8_t buf[RATEL_STATE_MAX];
    ratel_rule_status_t st[RATEL_MAX_RULES];
    ratel_cmd_args_t a;
    RedisModuleKey *key;
    size_t len, n = 0;
    int rc;

    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    if (parse_or_reply(ctx, RATEL_CMD_INFO, argv, argc, 1, &a) !=
        REDISMODULE_OK)
        return REDISMODULE_OK;
    if (open_state(ctx, argv[1], REDISMODULE_READ, &key, buf, &len, NULL) !=
        REDISMODULE_OK)
        return REDISMODULE_OK;
    RedisModule_CloseKey(key); /* NULL-safe */
    rc = ratel_state_inspect(buf, len, now_of(&a), st, RATEL_MAX_RULES, &n);
    if (rc != 0)
        return reply_core_error(ctx, rc);
    RedisModule_ReplyWithArray(ctx, (long)n);
    for (size_t i = 0; i < n; i++) {
        char text[64];
        unsigned fields = ratel_algo_fields(st[i].rule.algo);
        ratel_rule_format(&st[i].rule, text, sizeof text);
        RedisModule_ReplyWithArray(ctx, 10 + 2 * __builtin_popcount(fields));
        RedisModule_ReplyWithSimpleString(ctx, "rule");
        RedisModule_ReplyWithSimpleString(ctx, text);
        RedisModule_ReplyWithSimpleString(ctx, "algo");
        RedisModule_ReplyWithSimpleString(ctx,
                                          ratel_algo_name(st[i].rule.algo));
        reply_field(ctx, "used", st[i].used);
        reply_field(ctx, "remaining", st[i].remaining);
        reply_field(ctx, "reset_after_ms", st[i].reset_after_ms);
        /* Then the algorithm's own fields, as the map names them. */
#define INFO_FIELD_(NAME, member, bit)                                         \
    if (fields & (bit))                                                        \
        reply_field(ctx, #member, (long long)st[i].member);
        RATEL_STATUS_FIELD_MAP(INFO_FIELD_)
#undef INFO_FIELD_
    }
    return REDISMODULE_OK;
}

/* INFO ratel (or INFO modules, INFO everything): the policy cache and the
   propagation of writes. */
static void info_section(RedisModuleInfoCtx *ctx, int for_crash_report)
{
    ratel_policy_cache_stats_t cache;
    ratel_effects_stats_t effects;

    (void)for_crash_report;
    ratel__policy_cache_stats(&cache);
    ratel__effects_stats(&effects);
    RedisModule_InfoAddSection(ctx, "");
    RedisModule_InfoAddFieldULongLong(ctx, "policy_cache_entries",
                                      cache.entries);
    RedisModule_InfoAddFieldULongLong(ctx, "policy_cache_hits", cache.hits);
    RedisModule_InfoAddFieldULongLong(ctx, "policy_cache_misses", cache.misses);
    RedisModule_InfoAddFieldULongLong(ctx, "writes_propagated",
                                      effects.propagated);
    RedisModule_InfoAddFieldULongLong(ctx, "writes_unobserved",
                                      effects.unobserved);
    RedisModule_InfoAddFieldLongLong(ctx, "nobody_listens",
                                     effects.nobody_listens);
}

/* The handlers; their flags, key specs, documentation and ACL categories
   are module/commands.c's table. */
static const ratel_handler_t handlers[] = {
    {"ratel.acquire", acquire_command}, {"ratel.refund", refund_command},
    {"ratel.release", release_command}, {"ratel.reset", reset_command},
    {"ratel.info", info_command},       {"ratel.slice", slice_command},
    {"ratel.unslice", unslice_command},
};

/* The module's only exported symbol. */
__attribute__((visibility("default"))) int
RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    if (RedisModule_Init(ctx, MODULE_NAME, MODULE_VERSION,
                         REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (argc != 0) {
        RedisModule_Log(ctx, "warning",
                        "ratel takes no module arguments (got %d)", argc);
        return REDISMODULE_ERR;
    }
    /* Keys are signalled modified only when their bytes change (a PEEK or
       a denial must not break other clients' WATCH). */
    RedisModule_SetModuleOptions(
        ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    if (ratel__effects_init(ctx) != REDISMODULE_OK ||
        RedisModule_RegisterInfoFunc(ctx, info_section) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return ratel__commands_register(ctx, handlers,
                                    sizeof handlers / sizeof handlers[0]);
}
