/*
 * captcha_redis.h - the code store's Redis connection (captcha_redis.c):
 * one primary, TLS as the rate limits' store has it, commands pipelined
 * in order with a deadline each, on a worker's loop or on the caller's
 * thread.
 */
#ifndef CAPTCHA_REDIS_H
#define CAPTCHA_REDIS_H

#include "ratel_internal.h"

struct event_base;
struct redisReply;

/* Where and how to connect; shared by every connection, read only. */
typedef struct captcha_redis_conf_s {
    ratel_redis_url_t url;   /* addrs[0] is the primary */
    SSL_CTX *tls_ctx;        /* NULL: plain TCP */
    const char *server_name; /* tls_server_name, or NULL: the host's */
    int insecure;            /* tls_insecure=yes */
    int timeout_ms;          /* each command's deadline */
} captcha_redis_conf_t;

typedef struct captcha_redis_s captcha_redis_t;

/* A command's reply, the callee's to free (freeReplyObject), or NULL:
   the connection failed or the deadline passed. */
typedef void captcha_reply_fn(void *ud, struct redisReply *reply);

/* A connection on `base` (callbacks on its loop), or, base NULL, one for
   captcha_redis_call. conf must outlive it. 0 or RATEL_ENOMEM. */
int captcha_redis_new(captcha_redis_t **out, const captcha_redis_conf_t *conf,
                      struct event_base *base);

/* Sends argv (argc NUL-terminated strings); fn follows, on the loop, or
   at once (NULL) when the connection cannot be made. */
void captcha_redis_command(captcha_redis_t *r, int argc, const char **argv,
                           captcha_reply_fn *fn, void *ud);

/* A connection made with base NULL serves any thread, one at a time:
   lock, send (captcha_redis_command, its callbacks may send more), wait
   until *done (the callbacks run in this thread meanwhile), unlock. */
void captcha_redis_lock(captcha_redis_t *r);
void captcha_redis_wait(captcha_redis_t *r, const int *done);
void captcha_redis_unlock(captcha_redis_t *r);

/* Tells every command still pending (NULL replies) and frees r, on its
   loop's thread. NULL is a no-op. */
void captcha_redis_free(captcha_redis_t *r);

#endif /* CAPTCHA_REDIS_H */
