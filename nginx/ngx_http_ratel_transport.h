/*
 * ngx_http_ratel_transport.h - the nginx transport of the Redis engine
 * (lib/store/transport.h) on a worker's own event loop: connections are
 * nginx's (ngx_event_connect_peer, counted in worker_connections), TLS is
 * nginx's (ngx_ssl_create_connection over the store's SSL_CTX, checked as
 * libratel checks it), the engine's timer is an ngx_event_t and `defer` a
 * posted event, so the commands of one loop turn leave in one write.
 *
 * Only the Redis mode (ngx_http_ratel_redis.c) uses it, through the
 * asynchronous API (ratel__async_new_on with the loop below).
 */
#ifndef NGX_HTTP_RATEL_TRANSPORT_H
#define NGX_HTTP_RATEL_TRANSPORT_H

#include <ngx_config.h>
#include <ngx_core.h>

#include "ratel_internal.h"

/* The transport's functions; their `tud` is an instance that
   ngx_http_ratel_transport_loop's open makes. */
extern const ratel__transport_t ngx_http_ratel_transport;

/* The loop for ratel__async_new_on(): instances log to `log` (the
   cycle's); the async frees its instance. */
void ngx_http_ratel_transport_loop(ratel__async_loop_t *loop, ngx_log_t *log);

#endif /* NGX_HTTP_RATEL_TRANSPORT_H */
