/*
 * async.h - the asynchronous API (ratel_async_* in ratel.h) on any
 * transport (transport.h), for a host whose loop is not libevent's: the
 * nginx module runs it on nginx's own connections and events.
 * ratel_async_new() is this on the libevent transport.
 *
 * The host gives a transport and how to make one of its instances for
 * the async: the instance's loop calls the hooks it is given (the async's,
 * which the async hands on to its Redis engine). Answers decided at once
 * (a memory store, the deny cache, a breaker open) are told when the turn
 * ends, through the transport's `defer`: never inside the call.
 */
#ifndef RATEL_STORE_ASYNC_H
#define RATEL_STORE_ASYNC_H

#include "ratel.h"
#include "transport.h"

#include <stddef.h>

typedef struct ratel__async_loop_s {
    const ratel__transport_t *transport;
    /* Makes the transport's instance (*tud) whose loop calls `hooks`
       (copied): 0, or nonzero when out of memory. */
    int (*open)(void *ctx, const ratel__loop_hooks_t *hooks, void **tud);
    /* Frees the instance, after the async's engine closed its
       connections; NULL when the host frees it itself. */
    void (*close)(void *tud);
    void *ctx;
} ratel__async_loop_t;

/*
 * A ratel_async_t for `store` on the loop's transport (see
 * ratel_async_new() for what its calls promise), freed by
 * ratel_async_free(). Returns 0, RATEL_EINVAL or RATEL_ENOMEM (with a
 * message in errbuf).
 */
int ratel__async_new_on(ratel_async_t **out, ratel_store_t *store,
                        const ratel__async_loop_t *loop, char *errbuf,
                        size_t errlen);

#endif /* RATEL_STORE_ASYNC_H */
