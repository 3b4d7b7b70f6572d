/*
 * ngx_http_ratel_request.h - a request's context, shared by the access
 * handler (ngx_http_ratel_module.c) and the making of its items from its
 * `ratel` lines (ngx_http_ratel_items.c).
 */
#ifndef NGX_HTTP_RATEL_REQUEST_H
#define NGX_HTTP_RATEL_REQUEST_H

#include "ngx_http_ratel.h"

/* One zone's lines of this request: items[start .. start + n). */
typedef struct {
    ngx_http_ratel_zone_t *zone;
    size_t start, n;
} ngx_http_ratel_group_t;

/* What the module knows of a request (its main request's). */
typedef struct {
    ratel_batch_item_t *items;
    ngx_http_ratel_limit_t **lines; /* items[i]'s line */
    ngx_http_ratel_group_t *groups;
    size_t nitems, ngroups, group; /* group: the next one to decide */
    int64_t now_us;
    ngx_http_ratel_loc_conf_t *conf;
    ngx_uint_t outcome;
    unsigned asked : 1;   /* the current group was handed to its backend */
    unsigned waiting : 1; /* ... which answers later */
    unsigned done : 1;    /* decided: the request is not decided again */
    unsigned refused : 1;
    unsigned built : 1;     /* items made from the lines */
    unsigned body : 1;      /* the body was asked for (form:, json:) */
    unsigned body_read : 1; /* ... and is read */
    unsigned holding : 1;   /* admitted with leases, released at its end */
    unsigned delaying : 1;  /* admitted, waiting for its reservation */
    unsigned charged : 1;   /* charge_on= lines looked at (log phase) */
    int64_t until_ms;       /* reservations: when the request may go on */
    const char *reason;     /* refused: bad-key, missing-key, bad-cost */
    int64_t remaining;      /* -1: no line decided */
    long long retry_s;      /* refused: Retry-After */
    ngx_str_t policy_field, limit_field;
} ngx_http_ratel_ctx_t;

/*
 * The request's items from its location's lines, zone by zone in the
 * order the zones first appear: NGX_OK; NGX_ABORT for a request that
 * cannot be decided (a key refused or missing, a cost refused:
 * ctx->reason); NGX_ERROR.
 */
ngx_int_t ngx_http_ratel_build(ngx_http_request_t *r,
                               ngx_http_ratel_ctx_t *ctx);

/* What the location's lines read of the body (RATEL__KEY_NEEDS_*). */
int ngx_http_ratel_lines_need(ngx_http_ratel_loc_conf_t *conf);

/* Whether the request's Content-Type is `type`, parameters aside. */
ngx_uint_t ngx_http_ratel_type_is(ngx_http_request_t *r, const char *type);

#endif /* NGX_HTTP_RATEL_REQUEST_H */
