/*
 * ngx_http_ratel_lease.c - leased policies in a Redis zone (docs/nginx.md,
 * "Leased policies"; docs/leases.md): `ratel_policy NAME RULE...
 * lease=ttl_ms=250,max_slice=50,hosts=4;` read through libratel's option
 * table of lease settings (the words and ranges rateld's `lease:` reads),
 * the checks rateld makes of a leased policy, the bound each worker 0
 * states at start, and the slices a worker gives back as it exits.
 *
 * The slices live in the zone (ngx_http_ratel_shm.c: a table every
 * worker's store spends from), so one nginx is one host of the bound
 * however many workers it runs. When a worker exits, the slices go back to
 * Redis (RATEL.UNSLICE) unless a newer configuration took the zone and
 * leases the same policy, whose workers then spend them: `nginx -s quit`
 * and a reload that drops the zone or changes the policy give them back,
 * a reload that keeps both does not.
 */
#include "ngx_http_ratel.h"

#include "ratel_internal.h"

/* Where to write lease settings, for messages. */
#define LEASE_EXAMPLE "lease=ttl_ms=250,max_slice=50,hosts=4"

/* One NAME=VALUE of lease= into p->lease. */
static char *lease_setting(ngx_conf_t *cf, ngx_http_ratel_policy_t *p,
                           u_char *s, u_char *end)
{
    u_char *eq = ngx_strlchr(s, end, '=');
    const ratel__option_t *opt;
    char why[256], names[128];

    if (eq == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\": lease: \"%*s\" has no value; "
                           "write NAME=VALUE separated by commas, e.g. %s",
                           &p->name, end - s, s, LEASE_EXAMPLE);
        return NGX_CONF_ERROR;
    }
    opt = ratel__option_find(ratel__lease_options, ratel__lease_noptions,
                             (const char *)s, eq - s);
    if (opt == NULL) {
        ratel__option_names(ratel__lease_options, ratel__lease_noptions, names,
                            sizeof names);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\": lease.%*s: unknown setting; "
                           "accepted: %s",
                           &p->name, eq - s, s, names);
        return NGX_CONF_ERROR;
    }
    if (ratel__option_set(opt, (const char *)eq + 1, end - eq - 1, &p->lease,
                          why, sizeof why) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\": lease.%s: %s", &p->name,
                           opt->name, why);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

char *ngx_http_ratel_lease_conf(ngx_conf_t *cf, ngx_http_ratel_policy_t *p,
                                ngx_str_t *value)
{
    u_char *s = value->data, *end = value->data + value->len;
    char why[300];

    ngx_memzero(&p->lease, sizeof p->lease);
    p->leased = 1;
    while (s < end) {
        u_char *comma = ngx_strlchr(s, end, ',');
        if (comma == NULL)
            comma = end;
        if (lease_setting(cf, p, s, comma) != NGX_CONF_OK)
            return NGX_CONF_ERROR;
        s = comma + 1;
    }
    if (p->lease.min_slice && p->lease.max_slice &&
        p->lease.min_slice > p->lease.max_slice) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\": lease.min_slice: %uL is more "
                           "than max_slice (%uL)",
                           &p->name, p->lease.min_slice, p->lease.max_slice);
        return NGX_CONF_ERROR;
    }
    if (ratel_lease_bound(&p->policy, &p->lease, NULL, why, sizeof why) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\": lease: %s (its permits are "
                           "leases a request holds and gives back, not a rate "
                           "to slice)",
                           &p->name, why);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

ngx_int_t ngx_http_ratel_lease_line(ngx_conf_t *cf, ngx_http_ratel_limit_t *l)
{
    if (!l->policy->leased || l->max_wait_ms == 0)
        return NGX_OK;
    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                  "ratel: policy \"%V\": lease: a policy that reserves "
                  "(max_wait) is decided by the store, request by request; "
                  "remove lease or max_wait, in %s:%ui",
                  &l->policy->name, l->file, l->line);
    return NGX_ERROR;
}

void ngx_http_ratel_lease_notice(ngx_http_ratel_zone_t *zone, ngx_log_t *log)
{
    ngx_http_ratel_policy_t **p = zone->count_policies.elts;
    int table = ngx_http_ratel_shm_leases(zone) != NULL;
    char bound[512];

    for (ngx_uint_t i = 0; i < zone->count_policies.nelts; i++) {
        if (!p[i]->leased)
            continue;
        if (!table) {
            /* A reload kept the memory of a zone made without store=. */
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "ratel_zone \"%V\": policy \"%V\" is not leased: "
                          "the zone was made without store= and has no room "
                          "for slices, so Redis decides its requests one by "
                          "one until the zone is made again (another name or "
                          "size, or a restart of nginx)",
                          &zone->name, &p[i]->name);
        } else if (ratel_lease_bound(&p[i]->policy, &p[i]->lease, NULL, bound,
                                     sizeof bound) == 0)
            ngx_log_error(NGX_LOG_NOTICE, log, 0,
                          "ratel_zone \"%V\": policy \"%V\" is leased: %s",
                          &zone->name, &p[i]->name, bound);
    }
}

void ngx_http_ratel_lease_give_back(ngx_http_ratel_zone_t *zone,
                                    ratel_store_t *store)
{
    ngx_http_ratel_kept_t kept;

    if (store == NULL || ngx_http_ratel_shm_leases(zone) == NULL)
        return;
    ngx_http_ratel_shm_kept(zone, &kept);
    ratel__redis_store_give_back(store, ngx_http_ratel_shm_keeps, &kept);
}
