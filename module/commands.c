/*
 * commands.c - the RATEL.* commands as Redis sees them: one table holds each
 * command's flags, ACL categories, key spec and documentation, so that ACL
 * rules written with categories and %R~ / %W~ key patterns treat them as
 * they treat the built-in commands, and COMMAND DOCS describes them.
 *
 * - Key spec: one key, argv[1]. ACQUIRE, REFUND, RELEASE and UNSLICE read
 *   the key and answer what it holds (ACCESS) and rewrite it (RW, UPDATE):
 *   the caller needs read and write permission on it. SLICE has two keys,
 *   argv[1] and its demand key argv[2], both so (one key spec each); in a
 *   cluster both must hash to one slot, or Redis answers CROSSSLOT. RESET
 * deletes it (RM, DELETE): write permission, as for DEL. INFO only reads (RO,
 * ACCESS).
 * - Categories: ACQUIRE, REFUND, RELEASE, SLICE, UNSLICE @write; RESET @write
 * @dangerous (it forgets a client's history: an operator's act, as FLUSHDB is);
 *   INFO @read; all of them @fast. A server with
 *   RedisModule_SetCommandACLCategories (Redis 7.2 and later) attaches them
 *   itself. Redis 7.0 cannot: it leaves module commands out of every
 *   category rule (acl.c skips CMD_MODULE), and the flags give a module
 *   command no category either. There the module expands the category rules
 *   of ACL SETUSER itself (module/acl.c); docs/commands.md says what that
 *   covers.
 */
#include "commands.h"

#include <string.h>

/* The version that introduced the commands (COMMAND DOCS "since"). */
#define SINCE "0.1.0"

#define KEY_ARG                                                                \
    {                                                                          \
        .name = "key", .type = REDISMODULE_ARG_TYPE_KEY, .key_spec_index = 0   \
    }
#define RULES_ARG                                                              \
    {                                                                          \
        .name = "rule", .type = REDISMODULE_ARG_TYPE_STRING,                   \
        .key_spec_index = -1,                                                  \
        .summary = "LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE]: 1 to 8 rules, "   \
                   "applied all-or-nothing",                                   \
        .flags = REDISMODULE_CMD_ARG_MULTIPLE                                  \
    }
#define AT_ARG                                                                 \
    {                                                                          \
        .name = "unix-time-milliseconds",                                      \
        .type = REDISMODULE_ARG_TYPE_UNIX_TIME, .key_spec_index = -1,          \
        .token = "AT",                                                         \
        .summary = "decide at this instant instead of the server's clock",     \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                  \
    }
#define COST_ARG(what)                                                         \
    {                                                                          \
        .name = "cost", .type = REDISMODULE_ARG_TYPE_INTEGER,                  \
        .key_spec_index = -1, .token = "COST", .summary = what,                \
        .flags = REDISMODULE_CMD_ARG_OPTIONAL                                  \
    }

static RedisModuleCommandArg acquire_args[] = {
    KEY_ARG,
    COST_ARG("permits this request costs, 1 to 1000000000 (default 1)"),
    {.name = "peek",
     .type = REDISMODULE_ARG_TYPE_PURE_TOKEN,
     .key_spec_index = -1,
     .token = "PEEK",
     .summary = "decide without charging or writing anything",
     .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    {.name = "maxwait",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .token = "MAXWAIT",
     .summary = "gcra reservations: admit a request that conforms within "
                "this many milliseconds, with wait_ms to sleep",
     .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    AT_ARG,
    RULES_ARG,
    {0}};

static RedisModuleCommandArg refund_args[] = {
    KEY_ARG,
    COST_ARG("permits to give back (default 1)"),
    AT_ARG,
    RULES_ARG,
    {0}};

static RedisModuleCommandArg release_args[] = {
    KEY_ARG,
    {.name = "lease",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .summary = "the lease an ACQUIRE answered (1 to 4294967295)"},
    {.name = "renew",
     .type = REDISMODULE_ARG_TYPE_PURE_TOKEN,
     .key_spec_index = -1,
     .token = "RENEW",
     .summary = "keep the lease: move its expiry to now + PERIOD",
     .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    AT_ARG,
    RULES_ARG,
    {0}};

static RedisModuleCommandArg slice_args[] = {
    KEY_ARG,
    {.name = "demand-key",
     .type = REDISMODULE_ARG_TYPE_KEY,
     .key_spec_index = 1,
     .summary = "where the holders' recent wants are kept, in the key's "
                "slot; the key itself for no fair share"},
    {.name = "want",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .summary = "permits the slice asks for, 1 to 1000000000"},
    {.name = "ttl",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .token = "TTL",
     .summary = "the slice's lifetime in ms, 1 to 3600000 (required)"},
    {.name = "holder",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .token = "HOLDER",
     .summary = "the host asking, 1 to 9007199254740991: shares what is "
                "left fairly with the other holders",
     .flags = REDISMODULE_CMD_ARG_OPTIONAL},
    AT_ARG,
    RULES_ARG,
    {0}};

static RedisModuleCommandArg unslice_args[] = {
    KEY_ARG,
    {.name = "unspent",
     .type = REDISMODULE_ARG_TYPE_INTEGER,
     .key_spec_index = -1,
     .summary = "permits of the slice not spent, 1 to 1000000000"},
    {.name = "until",
     .type = REDISMODULE_ARG_TYPE_UNIX_TIME,
     .key_spec_index = -1,
     .token = "UNTIL",
     .summary = "the expires_at_ms SLICE answered: nothing is given back "
                "from then on (required)"},
    AT_ARG,
    RULES_ARG,
    {0}};

static RedisModuleCommandArg reset_args[] = {KEY_ARG, {0}};

static RedisModuleCommandArg info_args[] = {KEY_ARG, AT_ARG, {0}};

/* Read and rewritten, its state answered. */
#define KEY_CHANGED                                                            \
    (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS |                     \
     REDISMODULE_CMD_KEY_UPDATE)

typedef struct command_s {
    const char *name;
    const char *flags;      /* RedisModule_CreateCommand's */
    const char *categories; /* ACL categories */
    uint64_t key_flags;     /* REDISMODULE_CMD_KEY_* of argv[1] (and argv[2]) */
    const char *summary;
    const char *complexity;
    RedisModuleCommandArg *args;
    int keys; /* argv[1 .. keys]: 1, or 2 for SLICE */
} command_t;

static const command_t commands[] = {
    {"ratel.acquire", "write deny-oom fast", "write fast", KEY_CHANGED,
     "Decides one request under a policy's rules and charges it when "
     "admitted",
     "O(N) where N is the number of rules", acquire_args, 1},
    {"ratel.refund", "write deny-oom fast", "write fast", KEY_CHANGED,
     "Gives permits back to every rule of a policy",
     "O(N) where N is the number of rules", refund_args, 1},
    {"ratel.release", "write deny-oom fast", "write fast", KEY_CHANGED,
     "Gives back (or renews) a lease of a policy's concurrent rule",
     "O(N) where N is the number of rules", release_args, 1},
    {"ratel.reset", "write fast", "write fast dangerous",
     REDISMODULE_CMD_KEY_RM | REDISMODULE_CMD_KEY_DELETE,
     "Forgets a key's ratel state", "O(1)", reset_args, 1},
    {"ratel.info", "readonly fast", "read fast",
     REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS,
     "Shows a key's rules and state, read-only",
     "O(N) where N is the number of rules", info_args, 1},
    {"ratel.slice", "write deny-oom fast", "write fast", KEY_CHANGED,
     "Takes a slice of a policy's permits for a host to spend locally, "
     "shared fairly among the holders that asked recently",
     "O(N) where N is the number of rules", slice_args, 2},
    {"ratel.unslice", "write deny-oom fast", "write fast", KEY_CHANGED,
     "Gives back the unspent permits of a slice while it lives",
     "O(N) where N is the number of rules", unslice_args, 1},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

size_t ratel__commands_count(void)
{
    return NCOMMANDS;
}

const char *ratel__command_name(size_t i)
{
    return commands[i].name;
}

const char *ratel__command_categories(size_t i)
{
    return commands[i].categories;
}

/* Redis 7.2's RedisModule_SetCommandACLCategories; NULL on a server
   without it (7.0's header does not declare it: looked up at load). */
static int (*set_acl_categories)(RedisModuleCommand *cmd, const char *cats);

static RedisModuleCmdFunc handler_of(const char *name,
                                     const ratel_handler_t *handlers, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(handlers[i].name, name) == 0)
            return handlers[i].fn;
    return NULL;
}

/* Key spec and documentation. Redis copies both. */
static int set_info(RedisModuleCommand *cmd, const command_t *c)
{
    /* One spec per key, so that each key argument names its own. */
    RedisModuleCommandKeySpec specs[3] = {{0}};

    for (int k = 0; k < c->keys; k++)
        specs[k] = (RedisModuleCommandKeySpec){
            .flags = c->key_flags,
            .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
            .bs.index.pos = 1 + k,
            .find_keys_type = REDISMODULE_KSPEC_FK_RANGE,
            .fk.range = {.lastkey = 0, .keystep = 1, .limit = 0}};
    RedisModuleCommandInfo info = {
        .version = REDISMODULE_COMMAND_INFO_VERSION,
        .summary = c->summary,
        .complexity = c->complexity,
        .since = SINCE,
        .key_specs = specs,
        .args = c->args,
    };

    return RedisModule_SetCommandInfo(cmd, &info);
}

static int create(RedisModuleCtx *ctx, const command_t *c,
                  RedisModuleCmdFunc fn)
{
    RedisModuleCommand *cmd;

    /* The keys, from the first argument: cluster routing sees them at
       once; the key specs below say what the command does with them. */
    if (!fn || RedisModule_CreateCommand(ctx, c->name, fn, c->flags, 1, c->keys,
                                         1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    cmd = RedisModule_GetCommand(ctx, c->name);
    if (!cmd || set_info(cmd, c) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "ratel: cannot describe %s", c->name);
        return REDISMODULE_ERR;
    }
    if (set_acl_categories &&
        set_acl_categories(cmd, c->categories) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "ratel: cannot put %s in @%s", c->name,
                        c->categories);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

int ratel__commands_register(RedisModuleCtx *ctx,
                             const ratel_handler_t *handlers, size_t n)
{
    /* Redis 7.0 is the oldest server the module is built for. */
    if (!RedisModule_GetCommand || !RedisModule_SetCommandInfo) {
        RedisModule_Log(ctx, "warning", "ratel: needs Redis 7.0 or later");
        return REDISMODULE_ERR;
    }
    if (RedisModule_GetApi("RedisModule_SetCommandACLCategories",
                           (void *)&set_acl_categories) != REDISMODULE_OK)
        set_acl_categories = NULL;
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (create(ctx, &commands[i],
                   handler_of(commands[i].name, handlers, n)) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    if (set_acl_categories)
        return REDISMODULE_OK;
    RedisModule_Log(ctx, "notice",
                    "ratel: this server cannot put module commands in ACL "
                    "categories; ACL SETUSER's category rules are extended "
                    "to the RATEL.* commands by the module");
    return ratel__acl_filter_init(ctx);
}
