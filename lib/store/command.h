/*
 * command.h - a program's own Redis commands on a Redis store's
 * connections (internal: lib/internal/ratel_internal.h). captchad keeps
 * its verification codes this way: with the store's engine, its commands
 * get what the limits get (TLS, Sentinel, Redis Cluster routing by key,
 * failovers, deadlines) without a second Redis client.
 *
 * `key` routes the command in a cluster (the slot of its key or {hash
 * tag}); give the command's key. At most RATEL__COMMAND_MAX words.
 */
#ifndef RATEL_STORE_COMMAND_H
#define RATEL_STORE_COMMAND_H

#include "ratel.h"

#include <hiredis/hiredis.h>
#include <stddef.h>

#define RATEL__COMMAND_MAX 24

/*
 * Runs the command and waits for its reply (at most timeout_ms): 0 with
 * *reply (the caller frees it with freeReplyObject; an error reply is a
 * reply), or RATEL_EIO (no answer: down, hung, no primary) / RATEL_EPROTO
 * with the reason in err; RATEL_EINVAL when `store` is not a Redis store
 * or the command is empty or too long.
 */
int ratel__redis_command(ratel_store_t *store, const char *key, size_t keylen,
                         int argc, const char *const *argv,
                         const size_t *argvlen, redisReply **reply, char *err,
                         size_t errlen);

/* A command's answer on a loop: `reply` is the callee's to free, NULL
   when rc != 0. */
typedef void (*ratel__reply_fn)(void *ud, int rc, redisReply *reply);

/*
 * The same on an event loop (ratel_async_t of a Redis store): the words
 * are copied; `fn` follows from the loop, never inside this call. 0, or
 * RATEL_EINVAL / RATEL_ENOMEM without calling `fn`.
 */
int ratel__async_command(ratel_async_t *async, const char *key, size_t keylen,
                         int argc, const char *const *argv,
                         const size_t *argvlen, ratel__reply_fn fn, void *ud);

#endif /* RATEL_STORE_COMMAND_H */
