/*
 * ngx_http_ratel_noredis.c - the Redis mode's interface when the module
 * is built without it (nginx/config uses this file when
 * ngx_http_ratel_redis.c is absent): store=URL is refused here, in one
 * place, and nothing else of the Redis mode is ever called.
 */
#include "ngx_http_ratel.h"

char *ngx_http_ratel_redis_conf(ngx_conf_t *cf, ngx_http_ratel_zone_t *zone,
                                ngx_str_t *url)
{
    (void)url;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "ratel_zone \"%V\": store=URL: the Redis mode is "
                       "not built into this module; leave store= out for a "
                       "zone in shared memory",
                       &zone->name);
    return NGX_CONF_ERROR;
}

ngx_int_t ngx_http_ratel_redis_init_worker(ngx_cycle_t *cycle,
                                           ngx_http_ratel_zone_t *zone)
{
    (void)cycle;
    (void)zone;
    return NGX_OK;
}

void ngx_http_ratel_redis_exit_worker(ngx_http_ratel_zone_t *zone)
{
    (void)zone;
}

ngx_int_t ngx_http_ratel_redis_decide(ngx_http_ratel_zone_t *zone,
                                      ngx_http_request_t *r,
                                      ratel_batch_item_t *items, size_t n,
                                      void (*done)(void *data), void *data)
{
    (void)zone;
    (void)r;
    (void)items;
    (void)n;
    (void)done;
    (void)data;
    return NGX_ERROR;
}
