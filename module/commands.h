/*
 * commands.h - how the RATEL.* commands present themselves to Redis: flags,
 * key specs, COMMAND DOCS and ACL categories (module/commands.c).
 */
#ifndef RATEL_MODULE_COMMANDS_H
#define RATEL_MODULE_COMMANDS_H

#include "redismodule.h"

#include <stddef.h>

/* A command's handler, as module/ratel.c names it. */
typedef struct ratel_handler_s {
    const char *name; /* "ratel.acquire" */
    RedisModuleCmdFunc fn;
} ratel_handler_t;

/*
 * Creates every RATEL.* command with its flags, key spec and documentation,
 * and puts it in its ACL categories: through the server's own call where it
 * has one (Redis 7.2 and later), or else through the module's rewriting of
 * ACL SETUSER (module/acl.c). `handlers` names a function for each command.
 * Call once, from OnLoad.
 */
int ratel__commands_register(RedisModuleCtx *ctx,
                             const ratel_handler_t *handlers, size_t n);

/* The number of commands, and command i's name and ACL categories
   ("write fast"): what module/acl.c expands category rules with. */
size_t ratel__commands_count(void);
const char *ratel__command_name(size_t i);
const char *ratel__command_categories(size_t i);

/*
 * Installs the ACL SETUSER rewriting for servers that cannot put a
 * module's command in a category (Redis 7.0): each `+@cat` or `-@cat`
 * rule is followed by the same rule for every RATEL.* command in `cat`
 * (module/acl.c).
 */
int ratel__acl_filter_init(RedisModuleCtx *ctx);

#endif /* RATEL_MODULE_COMMANDS_H */
