/*
 * ngx_http_ratel_module.c - ratel inside nginx: the module, the access
 * handler that decides a request's `ratel` lines (their items are made in
 * ngx_http_ratel_items.c; what an admitted request holds, its leases and
 * its reservation's wait, is ngx_http_ratel_hold.c's), the log phase that
 * charges charge_on= lines, the RateLimit fields and the $ratel_*
 * variables. The directives (read in ngx_http_ratel_conf.c):
 *
 *   ratel_zone   zone=NAME:SIZE [store=URL];        http
 *   ratel_policy NAME RULE... [lease=SETTINGS];     http
 *   ratel        zone=NAME policy=NAME key=SOURCES|$var [cost=NUMBER|$var]
 *                [exempt=VALUE,...] [on_missing=reject|shared|allow]
 *                [max_wait=MS] [charge_on=STATUS,...];
 *                                                   http, server, location
 *   ratel_status CODE;  ratel_dry_run on|off;  ratel_headers on|off;
 *   ratel_log_level info|notice|warn|error;         http, server, location
 *   ratel_metrics;                                  location
 *
 * limit_req is the model: a level with `ratel` lines of its own replaces
 * the lines it would inherit; an empty key is not counted; the request is
 * decided once (an internal redirect or a subrequest does not charge it
 * again). The lines of one zone are one all-or-nothing group; zones are
 * decided one after the other, and a refusal by a later zone gives back
 * what the earlier zones charged (docs/nginx.md).
 */
#include "ngx_http_ratel.h"
#include "ngx_http_ratel_request.h"

#include "app/log.h"
#include "app/ratelimit.h"

const char *const ngx_http_ratel_status_names[] = {
#define STATUS_NAME(name, status, metric) status,
    NGX_HTTP_RATEL_OUTCOMES(STATUS_NAME)
#undef STATUS_NAME
};

const char *const ngx_http_ratel_metric_outcomes[] = {
#define METRIC_NAME(name, status, metric) metric,
    NGX_HTTP_RATEL_OUTCOMES(METRIC_NAME)
#undef METRIC_NAME
};

static ngx_int_t preconfiguration(ngx_conf_t *cf);
static ngx_int_t postconfiguration(ngx_conf_t *cf);
static ngx_int_t init_worker(ngx_cycle_t *cycle);
static void exit_worker(ngx_cycle_t *cycle);

/* nginx's hooks, in ngx_http_module_t's order. */
static ngx_http_module_t module_ctx = {
    preconfiguration,
    postconfiguration,
    ngx_http_ratel_create_main_conf,
    NULL, /* init main configuration */
    NULL, /* create server configuration */
    NULL, /* merge server configuration */
    ngx_http_ratel_create_loc_conf,
    ngx_http_ratel_merge_loc_conf,
};

ngx_module_t ngx_http_ratel_module = {
    NGX_MODULE_V1,
    &module_ctx,
    ngx_http_ratel_commands,
    NGX_HTTP_MODULE,
    NULL, /* init master */
    NULL, /* init module */
    init_worker,
    NULL, /* init thread */
    NULL, /* exit thread */
    exit_worker,
    NULL, /* exit master */
    NGX_MODULE_V1_PADDING,
};

static ngx_http_output_header_filter_pt next_header_filter;

/* ------------------------------------------------------------ requests */

/*
 * The main request's pool goes (the request ended, however: answered,
 * its client gone, failed): its leases are released, and a request that
 * was still waiting for its reservation gives back all it was charged.
 * A pool's cleanups run once. The cleanup also marks the pool so that
 * ctx_of() finds the context again after an internal redirect emptied
 * r->ctx.
 */
static void ctx_cleanup(void *data)
{
    ngx_http_ratel_ctx_t *ctx = data;
    int64_t now_us;

    if (!ctx->holding && !ctx->delaying)
        return;
    now_us = ngx_http_ratel_now_us();
    for (size_t i = 0; i < ctx->ngroups; i++)
        ngx_http_ratel_give_back(ctx->groups[i].zone,
                                 ctx->items + ctx->groups[i].start,
                                 ctx->groups[i].n, now_us, ctx->delaying);
    ctx->holding = 0;
    ctx->delaying = 0;
}

/* The request's context, also after an internal redirect (realip's way). */
static ngx_http_ratel_ctx_t *ctx_of(ngx_http_request_t *r)
{
    ngx_http_ratel_ctx_t *ctx =
        ngx_http_get_module_ctx(r, ngx_http_ratel_module);
    ngx_pool_cleanup_t *cln;

    if (ctx || !(r->internal || r->filter_finalize))
        return ctx;
    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_ratel_module);
            return ctx;
        }
    }
    return NULL;
}

static void resume(void *data);

/* Hands group `g` to its zone's backend: NGX_OK decided, NGX_AGAIN later. */
static ngx_int_t ask(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                     ngx_http_ratel_group_t *g)
{
    ratel_batch_item_t *items = ctx->items + g->start;
    ngx_int_t rc;

    ctx->asked = 1;
    if (g->zone->store.len == 0)
        return ngx_http_ratel_shm_decide(g->zone, items, g->n, ctx->now_us,
                                         r->connection->log);
    rc = ngx_http_ratel_redis_decide(g->zone, r, items, g->n, ctx->now_us,
                                     resume, r);
    if (rc == NGX_ERROR)
        for (size_t i = 0; i < g->n; i++)
            items[i].rc = items[i].rc ? items[i].rc : RATEL_EIO;
    return rc == NGX_AGAIN ? NGX_AGAIN : NGX_OK;
}

static ngx_uint_t admitted(ngx_http_ratel_ctx_t *ctx, ngx_http_ratel_group_t *g)
{
    for (size_t i = g->start; i < g->start + g->n; i++)
        if (ctx->items[i].rc != 0 || !ctx->items[i].decision.allowed)
            return 0;
    return 1;
}

/*
 * A later zone refused: the earlier zones' groups give back what they
 * took, in shared memory or in Redis (a refund the request does not wait
 * for).
 */
static void give_back(ngx_http_ratel_ctx_t *ctx)
{
    for (size_t i = 0; i < ctx->group; i++) {
        ngx_http_ratel_group_t *g = &ctx->groups[i];
        ngx_http_ratel_give_back(g->zone, ctx->items + g->start, g->n,
                                 ctx->now_us, 1);
    }
}

/*
 * Group `g` admitted: the latest instant its reservations let the request
 * go on. A zone's waits count from the request's clock; Redis's from its
 * own clock as it decided, about when its answer came.
 */
static void note_wait(ngx_http_ratel_ctx_t *ctx, ngx_http_ratel_group_t *g)
{
    int64_t base_ms =
        (g->zone->store.len == 0 ? ctx->now_us : ngx_http_ratel_now_us()) /
        1000;

    for (size_t i = g->start; i < g->start + g->n; i++) {
        ratel_decision_t *d = &ctx->items[i].decision;
        if (d->wait_ms > 0 && base_ms + d->wait_ms > ctx->until_ms)
            ctx->until_ms = base_ms + d->wait_ms;
    }
}

/*
 * A refused request charged nothing: a refused group is not written (or
 * its members' charges are given back by the store), and a later zone's
 * refusal gave the earlier zones' back. So an admitted line of it is
 * reported as it stands without its cost: each of the policy's rules
 * took `cost` (remaining is their minimum), and the binding rule back at
 * its limit is full again.
 */
static void uncharge(ratel_batch_item_t *it)
{
    ratel_decision_t *d = &it->decision;
    uint64_t cost = it->request.cost;

    if (it->rc != 0 || !d->allowed || (it->request.flags & RATEL_PEEK))
        return;
    if (d->remaining < 0 || cost >= (uint64_t)(d->limit - d->remaining)) {
        d->remaining = d->limit;
        d->rule_reset_ms = 0;
    } else {
        d->remaining += (int64_t)cost;
    }
}

/* Items decided: those of the groups asked so far. */
static size_t decided_items(ngx_http_ratel_ctx_t *ctx)
{
    size_t g = ctx->group < ctx->ngroups ? ctx->group + 1 : ctx->ngroups;

    return g == 0 ? 0 : ctx->groups[g - 1].start + ctx->groups[g - 1].n;
}

/* Whether item i's policy came earlier among the first i items. */
static ngx_uint_t policy_seen(ngx_http_ratel_ctx_t *ctx, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (ctx->items[j].policy == ctx->items[i].policy)
            return 1;
    return 0;
}

/* The rule a decision names: one of the policy's (Redis answers it), else
   the first, as the RateLimit field says. */
static uint32_t rule_of(const ngx_http_ratel_policy_t *pol,
                        const ratel_batch_item_t *it)
{
    uint32_t rule = (uint32_t)it->decision.rule;

    return rule < pol->policy.nrules ? rule : 0;
}

/*
 * RateLimit-Policy (each policy of the decided lines once) and RateLimit
 * (one item per decided line), with server/app/ratelimit.c's words. The
 * policies' fields were formatted at configuration: one policy's is used
 * as it is; each RateLimit item is written once into room for the longest
 * its policy can give.
 */
static ngx_int_t make_fields(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                             size_t n)
{
    size_t plen = 0, llen = 0, npolicies = 0;
    ngx_http_ratel_policy_t *one = NULL;
    u_char *p = NULL, *q;

    for (size_t i = 0; i < n; i++) {
        ngx_http_ratel_policy_t *pol = ctx->lines[i]->policy;
        if (ctx->items[i].rc != 0)
            continue;
        if (!policy_seen(ctx, i)) {
            plen += pol->field.len + 2;
            npolicies++;
            one = pol;
        }
        llen += pol->limit_max + 2;
    }
    if (npolicies == 1) {
        ctx->policy_field = one->field;
    } else if (npolicies > 1 && !(p = ngx_pnalloc(r->pool, plen))) {
        return NGX_ERROR;
    }
    q = ngx_pnalloc(r->pool, llen + 1);
    if (q == NULL)
        return NGX_ERROR;
    if (p)
        ctx->policy_field.data = p;
    ctx->limit_field.data = q;
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &ctx->items[i];
        ngx_http_ratel_policy_t *pol = ctx->lines[i]->policy;
        if (it->rc != 0)
            continue;
        if (p && !policy_seen(ctx, i)) {
            if (p != ctx->policy_field.data)
                p = ngx_cpymem(p, ", ", 2);
            p = ngx_cpymem(p, pol->field.data, pol->field.len);
        }
        if (q != ctx->limit_field.data)
            q = ngx_cpymem(q, ", ", 2);
        q = ngx_cpymem(q, pol->items[rule_of(pol, it)].data,
                       pol->items[rule_of(pol, it)].len);
        q += ratel__header_ratelimit_params(&it->decision, (char *)q,
                                            RATEL__HEADER_PARAMS_MAX + 1);
    }
    if (p)
        ctx->policy_field.len = p - ctx->policy_field.data;
    ctx->limit_field.len = q - ctx->limit_field.data;
    return NGX_OK;
}

/* One log line per line that refused or could not decide. */
static void log_item(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx, size_t i)
{
    ratel_batch_item_t *it = &ctx->items[i];
    ngx_http_ratel_limit_t *l = ctx->lines[i];

    if (it->rc == NGX_HTTP_RATEL_UNDECIDED)
        return;
    if (it->rc != 0) {
        uint64_t not_logged = 0;
        if (ngx_http_ratel_log_take(NGX_HTTP_RATEL_LOG_STORE, &not_logged))
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "ratel: policy \"%V\" in zone \"%V\" could not "
                          "decide: %s (not_logged=%uL)",
                          &l->policy->name, &l->zone->name,
                          ratel_strerror(it->rc), not_logged);
        return;
    }
    if (it->decision.allowed)
        return;
    ngx_log_error(ctx->conf->log_level, r->connection->log, 0,
                  "ratel: %s by policy \"%V\" rule \"%V\" in zone \"%V\", "
                  "retry after %Ls",
                  ctx->conf->dry_run ? "dry run, would refuse" : "refused",
                  &l->policy->name,
                  &l->policy->rule_texts[rule_of(l->policy, it)],
                  &l->zone->name, ratel__retry_after_seconds(&it->decision));
}

/*
 * One count per decided line: the request's outcome when it passed or
 * failed; when refused, the lines whose own policy refused count it
 * (denied, or shadow_denied in a dry run) and the others nothing.
 */
static void count(ngx_http_ratel_ctx_t *ctx, size_t i)
{
    ratel_batch_item_t *it = &ctx->items[i];
    ngx_uint_t o = ctx->outcome;

    if (o == NGX_HTTP_RATEL_REJECTED || o == NGX_HTTP_RATEL_REJECTED_DRY_RUN) {
        if (it->rc != 0 || it->decision.allowed)
            return;
    }
    ngx_http_ratel_shm_count(ctx->lines[i]->zone, ctx->lines[i]->count, o);
}

/*
 * An admitted request holds its leases until it ends, and waits for its
 * reservations first (a dry run counts them and goes on at once).
 */
static ngx_int_t go_on(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx)
{
    int64_t ms = ctx->until_ms - ngx_http_ratel_now_us() / 1000;

    if (ctx->conf->dry_run || ctx->until_ms == 0 || ms <= 0)
        return NGX_DECLINED;
    ctx->delaying = 1;
    return ngx_http_ratel_delay(r, (ngx_msec_t)ms);
}

/* The request is decided: outcome, variables, fields, counts and log. */
static ngx_int_t finish(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx)
{
    size_t n = decided_items(ctx);
    ngx_uint_t error = 0;

    ctx->done = 1;
    ctx->remaining = -1;
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &ctx->items[i];
        long long s;
        error |= it->rc < 0;
        if (it->rc != 0 || it->decision.allowed)
            continue;
        s = ratel__retry_after_seconds(&it->decision);
        if (s > ctx->retry_s)
            ctx->retry_s = s;
    }
    ctx->refused = ctx->retry_s > 0;
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &ctx->items[i];
        if (ctx->refused)
            uncharge(it);
        if (it->rc == 0 &&
            (ctx->remaining < 0 || it->decision.remaining < ctx->remaining))
            ctx->remaining = it->decision.remaining;
        ctx->holding |=
            !error && !ctx->refused && it->rc == 0 && it->decision.lease != 0;
    }
    if (error)
        ctx->outcome = NGX_HTTP_RATEL_ERROR;
    else if (ctx->refused)
        ctx->outcome = ctx->conf->dry_run ? NGX_HTTP_RATEL_REJECTED_DRY_RUN
                                          : NGX_HTTP_RATEL_REJECTED;
    else if (ctx->until_ms > 0)
        ctx->outcome = ctx->conf->dry_run ? NGX_HTTP_RATEL_DELAYED_DRY_RUN
                                          : NGX_HTTP_RATEL_DELAYED;
    if (ctx->remaining < 0)
        ctx->remaining = 0;
    for (size_t i = 0; i < n; i++) {
        count(ctx, i);
        log_item(r, ctx, i);
    }
    /* The fields are written once, here; `ratel_headers off` spares it. */
    if (ctx->conf->headers && make_fields(r, ctx, n) != NGX_OK)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (!error && !ctx->refused)
        return go_on(r, ctx);
    if (ctx->conf->dry_run)
        return NGX_DECLINED;
    return error ? NGX_HTTP_INTERNAL_SERVER_ERROR
                 : (ngx_int_t)ctx->conf->status;
}

/* Decides the groups not decided yet, one zone after the other. */
static ngx_int_t run(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx)
{
    while (ctx->group < ctx->ngroups) {
        ngx_http_ratel_group_t *g = &ctx->groups[ctx->group];
        if (!ctx->asked && ask(r, ctx, g) == NGX_AGAIN) {
            /* The request waits for the backend's answer: resume(). */
            ctx->waiting = 1;
            r->main->count++;
            return NGX_AGAIN;
        }
        ctx->asked = 0;
        if (!admitted(ctx, g)) {
            give_back(ctx);
            break;
        }
        note_wait(ctx, g);
        ctx->group++;
    }
    return finish(r, ctx);
}

/* A backend answered later: the request's phases go on from here. */
static void resume(void *data)
{
    ngx_http_request_t *r = data;
    ngx_connection_t *c = r->connection;
    ngx_http_ratel_ctx_t *ctx = ctx_of(r);

    ctx->waiting = 0;
    r->main->count--;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

/* The request's context with room for its lines' items, in one piece. */
static ngx_http_ratel_ctx_t *new_ctx(ngx_http_request_t *r,
                                     ngx_http_ratel_loc_conf_t *conf)
{
    size_t n = conf->limits->nelts;
    ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(r->pool, 0);
    ngx_http_ratel_ctx_t *ctx = ngx_pcalloc(
        r->pool, sizeof *ctx + n * (sizeof(ratel_batch_item_t) +
                                    sizeof(ngx_http_ratel_group_t) +
                                    sizeof(ngx_http_ratel_limit_t *)));

    if (ctx == NULL || cln == NULL)
        return NULL;
    ctx->items = (ratel_batch_item_t *)(ctx + 1);
    ctx->groups = (ngx_http_ratel_group_t *)(ctx->items + n);
    ctx->lines = (ngx_http_ratel_limit_t **)(ctx->groups + n);
    cln->handler = ctx_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_ratel_module);
    ctx->conf = conf;
    ctx->outcome = NGX_HTTP_RATEL_PASSED;
    /* The clock is read once per request (nginx's cached time). */
    ctx->now_us = ngx_http_ratel_now_us();
    return ctx;
}

/* The body is read: the request's phases go on from the access handler. */
static void body_done(ngx_http_request_t *r)
{
    ngx_http_ratel_ctx_t *ctx = ctx_of(r);

    ctx->body_read = 1;
    r->preserve_body = 1; /* proxy_pass still sends it */
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

/* Whether the lines read the body (form:, json:) and the request has one
   they can read. */
static ngx_uint_t wants_body(ngx_http_request_t *r,
                             ngx_http_ratel_loc_conf_t *conf)
{
    int needs = ngx_http_ratel_lines_need(conf);

    if (r->headers_in.content_length_n <= 0 && !r->headers_in.chunked)
        return 0;
    return (needs & RATEL__KEY_NEEDS_JSON) ||
           ((needs & RATEL__KEY_NEEDS_FORM) &&
            ngx_http_ratel_type_is(r, "application/x-www-form-urlencoded"));
}

/* A request that cannot be decided: each line counts it; a refused or
   missing key and a refused cost are the client's (400, X-Ratel-Reason
   says which). */
static ngx_int_t undecided(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx)
{
    ngx_http_ratel_limit_t **l = ctx->conf->limits->elts;

    ctx->done = 1;
    ctx->outcome = ctx->reason ? NGX_HTTP_RATEL_INVALID : NGX_HTTP_RATEL_ERROR;
    for (ngx_uint_t i = 0; i < ctx->conf->limits->nelts; i++)
        ngx_http_ratel_shm_count(l[i]->zone, l[i]->count, ctx->outcome);
    if (ctx->conf->dry_run)
        return NGX_DECLINED;
    return ctx->reason ? NGX_HTTP_BAD_REQUEST : NGX_HTTP_INTERNAL_SERVER_ERROR;
}

static ngx_int_t access_handler(ngx_http_request_t *r)
{
    ngx_http_ratel_loc_conf_t *conf =
        ngx_http_get_module_loc_conf(r, ngx_http_ratel_module);
    ngx_http_ratel_ctx_t *ctx = ctx_of(r->main);
    ngx_int_t rc;

    if (ctx && ctx->waiting)
        return NGX_AGAIN;
    if (ctx && ctx->delaying) {
        /* Its reservation's instant came (delay_done runs the phases
           only then): the request goes on. */
        if (r->connection->write->delayed)
            return NGX_AGAIN;
        ctx->delaying = 0;
    }
    if (ctx && ctx->done)
        return NGX_DECLINED;
    if (ctx && ctx->built)
        return run(r, ctx);
    if (ctx == NULL) {
        if (r != r->main || conf->limits == NULL || conf->limits->nelts == 0)
            return NGX_DECLINED;
        ctx = new_ctx(r, conf);
        if (ctx == NULL)
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (!ctx->body && wants_body(r, conf)) {
        /* form: and json: read the body first (mirror's way): in one
           buffer of client_body_buffer_size, or it is not read whole. */
        ctx->body = 1;
        r->request_body_in_single_buf = 1;
        rc = ngx_http_read_client_request_body(r, body_done);
        if (rc >= NGX_HTTP_SPECIAL_RESPONSE)
            return rc;
        ngx_http_finalize_request(r, NGX_DONE);
        return NGX_DONE;
    }
    rc = ngx_http_ratel_build(r, ctx);
    if (rc == NGX_ERROR)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (rc == NGX_ABORT)
        return undecided(r, ctx);
    return run(r, ctx);
}

/* ------------------------------------------------------------ log phase */

static ngx_uint_t charged_on(const ngx_http_ratel_limit_t *l, ngx_uint_t status)
{
    return l->charge_on && ratel__status_has(l->charge_on, (long)status);
}

/*
 * The request ended: the lines with charge_on= (which only checked the
 * limit before it) charge it when its status is one of theirs, each on
 * its own (the request was decided already). A zone charges under its
 * lock; a Redis zone's charge is sent and not waited for. A request the
 * module refused, or could not decide, is not charged.
 */
static ngx_int_t log_handler(ngx_http_request_t *r)
{
    ngx_http_ratel_ctx_t *ctx = r == r->main ? ctx_of(r) : NULL;
    ngx_uint_t status;
    int64_t now_us;

    if (ctx == NULL || !ctx->done || ctx->charged ||
        ctx->outcome == NGX_HTTP_RATEL_REJECTED ||
        ctx->outcome == NGX_HTTP_RATEL_ERROR ||
        ctx->outcome == NGX_HTTP_RATEL_INVALID)
        return NGX_OK;
    ctx->charged = 1;
    status = r->err_status ? r->err_status : r->headers_out.status;
    now_us = ngx_http_ratel_now_us();
    for (size_t i = 0; i < ctx->nitems; i++) {
        ratel_batch_item_t it = ctx->items[i];
        ngx_http_ratel_zone_t *zone = ctx->lines[i]->zone;
        if (!charged_on(ctx->lines[i], status) || it.rc != 0)
            continue;
        it.request.flags &= ~RATEL_PEEK;
        it.group = 0;
        if (zone->store.len == 0)
            (void)ngx_http_ratel_shm_decide(zone, &it, 1, now_us,
                                            r->connection->log);
        else
            ngx_http_ratel_redis_charge(zone, &it, 1, now_us);
    }
    return NGX_OK;
}

/* ------------------------------------------------- fields and variables */

static ngx_str_t policy_name = ngx_string("RateLimit-Policy");
static ngx_str_t limit_name = ngx_string("RateLimit");
static ngx_str_t retry_name = ngx_string("Retry-After");
static ngx_str_t reason_name = ngx_string("X-Ratel-Reason");

static ngx_int_t add_header(ngx_http_request_t *r, ngx_str_t *key,
                            ngx_str_t *value)
{
    ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);

    if (h == NULL)
        return NGX_ERROR;
    h->hash = 1;
    h->key = *key;
    h->value = *value;
    return NGX_OK;
}

/* RateLimit-Policy and RateLimit on every answer; Retry-After on a
   refusal. */
static ngx_int_t header_filter(ngx_http_request_t *r)
{
    ngx_http_ratel_ctx_t *ctx = r == r->main ? ctx_of(r) : NULL;
    ngx_str_t retry, reason;

    if (ctx && ctx->done && ctx->reason && !ctx->conf->dry_run) {
        reason.data = (u_char *)ctx->reason;
        reason.len = ngx_strlen(ctx->reason);
        if (add_header(r, &reason_name, &reason) != NGX_OK)
            return NGX_ERROR;
    }
    if (ctx == NULL || !ctx->done || !ctx->conf->headers ||
        ctx->limit_field.len == 0)
        return next_header_filter(r);
    if (add_header(r, &policy_name, &ctx->policy_field) != NGX_OK ||
        add_header(r, &limit_name, &ctx->limit_field) != NGX_OK)
        return NGX_ERROR;
    if (ctx->refused && !ctx->conf->dry_run) {
        retry.data = ngx_pnalloc(r->pool, NGX_INT64_LEN);
        if (retry.data == NULL)
            return NGX_ERROR;
        retry.len = ngx_sprintf(retry.data, "%L", ctx->retry_s) - retry.data;
        if (add_header(r, &retry_name, &retry) != NGX_OK)
            return NGX_ERROR;
    }
    return next_header_filter(r);
}

static ngx_int_t set_number(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                            int64_t n)
{
    v->data = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (v->data == NULL)
        return NGX_ERROR;
    v->len = ngx_sprintf(v->data, "%L", n) - v->data;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    return NGX_OK;
}

/* $ratel_status, $ratel_remaining, $ratel_retry_after (by `data`). */
static ngx_int_t variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                          uintptr_t data)
{
    ngx_http_ratel_ctx_t *ctx = ctx_of(r->main);
    const char *s;

    /* Nothing decided (every key empty): empty, as $limit_req_status. */
    if (ctx == NULL || !ctx->done ||
        (ctx->nitems == 0 && ctx->outcome != NGX_HTTP_RATEL_ERROR &&
         ctx->outcome != NGX_HTTP_RATEL_INVALID)) {
        v->not_found = 1;
        return NGX_OK;
    }
    if (data == 1)
        return set_number(r, v, ctx->remaining);
    if (data == 2)
        return set_number(r, v, ctx->refused ? ctx->retry_s : 0);
    s = ngx_http_ratel_status_names[ctx->outcome];
    v->data = (u_char *)s;
    v->len = ngx_strlen(s);
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    return NGX_OK;
}

static ngx_http_variable_t variables[] = {
    {ngx_string("ratel_status"), NULL, variable, 0, NGX_HTTP_VAR_NOCACHEABLE,
     0},
    {ngx_string("ratel_remaining"), NULL, variable, 1, NGX_HTTP_VAR_NOCACHEABLE,
     0},
    {ngx_string("ratel_retry_after"), NULL, variable, 2,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_null_string, NULL, NULL, 0, 0, 0}};

static ngx_int_t preconfiguration(ngx_conf_t *cf)
{
    for (ngx_http_variable_t *v = variables; v->name.len; v++) {
        ngx_http_variable_t *var =
            ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL)
            return NGX_ERROR;
        var->get_handler = v->get_handler;
        var->data = v->data;
    }
    return NGX_OK;
}

static ngx_int_t postconfiguration(ngx_conf_t *cf)
{
    ngx_http_core_main_conf_t *cmcf =
        ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    ngx_http_ratel_main_conf_t *m =
        ngx_http_conf_get_module_main_conf(cf, ngx_http_ratel_module);
    ngx_http_handler_pt *h;

    if (ngx_http_ratel_resolve(cf, m) != NGX_OK)
        return NGX_ERROR;
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL)
        return NGX_ERROR;
    *h = access_handler;
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL)
        return NGX_ERROR;
    *h = log_handler;
    next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = header_filter;
    return NGX_OK;
}

/* ------------------------------------------------------------- log */

/* This worker's budgets (a worker runs one thread: no lock). */
static ratel__log_budget_t log_budgets[NGX_HTTP_RATEL_LOG_KINDS];

ngx_uint_t ngx_http_ratel_log_take(ngx_uint_t kind, uint64_t *not_logged)
{
    int64_t now_us = ngx_http_ratel_now_us();

    *not_logged = 0;
    return kind < NGX_HTTP_RATEL_LOG_KINDS &&
           ratel__log_budget_take(&log_budgets[kind], now_us, not_logged);
}

/* ------------------------------------------------------------- workers */

static ngx_http_ratel_main_conf_t *main_conf(ngx_cycle_t *cycle)
{
    if (ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module) ==
        NULL)
        return NULL;
    return ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratel_module);
}

static ngx_int_t init_worker(ngx_cycle_t *cycle)
{
    ngx_http_ratel_main_conf_t *m = main_conf(cycle);
    ngx_http_ratel_zone_t **z;

    if (m == NULL)
        return NGX_OK;
    z = m->zones.elts;
    for (ngx_uint_t i = 0; i < m->zones.nelts; i++)
        if (z[i]->store.len > 0 &&
            ngx_http_ratel_redis_init_worker(cycle, z[i]) != NGX_OK)
            return NGX_ERROR;
    return NGX_OK;
}

static void exit_worker(ngx_cycle_t *cycle)
{
    ngx_http_ratel_main_conf_t *m = main_conf(cycle);
    ngx_http_ratel_zone_t **z;

    if (m == NULL)
        return;
    z = m->zones.elts;
    for (ngx_uint_t i = 0; i < m->zones.nelts; i++)
        if (z[i]->store.len > 0)
            ngx_http_ratel_redis_exit_worker(z[i]);
}
