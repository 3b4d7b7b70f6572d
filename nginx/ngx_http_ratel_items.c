/*
 * ngx_http_ratel_items.c - a request's items from its location's `ratel`
 * lines: each line's store key ("POLICY:value", read by the key sources
 * of server/app/keys.c from the view of the request made here: headers,
 * query, path, host, client address and the body read for form: and
 * json:, or a key=$var), its exemptions and its cost, grouped by zone.
 */
#include "ngx_http_ratel_request.h"

#include "app/json.h"

#include <cjson/cJSON.h>

/* Every value of header `name` in nginx's request, for key sources. */
static size_t request_headers(const void *ctx, const char *name,
                              ratel__key_str_t *out, size_t max)
{
    const ngx_http_request_t *r = ctx;
    const ngx_list_part_t *part = &r->headers_in.headers.part;
    size_t n = ngx_strlen(name), count = 0;

    for (; part; part = part->next) {
        const ngx_table_elt_t *h = part->elts;
        for (ngx_uint_t i = 0; i < part->nelts; i++) {
            if (h[i].key.len != n ||
                ngx_strncasecmp(h[i].key.data, (u_char *)name, n) != 0)
                continue;
            if (count < max)
                out[count] = (ratel__key_str_t){(const char *)h[i].value.data,
                                                h[i].value.len};
            count++;
        }
    }
    return count;
}

/* Whether the request's Content-Type is `type`, parameters aside. */
ngx_uint_t ngx_http_ratel_type_is(ngx_http_request_t *r, const char *type)
{
    ngx_table_elt_t *t = r->headers_in.content_type;
    size_t n = ngx_strlen(type);

    return t && t->value.len >= n &&
           ngx_strncasecmp(t->value.data, (u_char *)type, n) == 0 &&
           (t->value.len == n || t->value.data[n] == ';' ||
            t->value.data[n] == ' ');
}

/* The request body as read (in one buffer of memory), or empty with
 *whole 0 when it went to a file. */
static ngx_str_t body_of(ngx_http_request_t *r, ngx_uint_t *whole)
{
    ngx_str_t b = ngx_null_string;
    ngx_chain_t *cl = r->request_body ? r->request_body->bufs : NULL;

    *whole = 1;
    if (cl == NULL)
        return b;
    if (cl->next || cl->buf->in_file || !ngx_buf_in_memory(cl->buf)) {
        *whole = cl->next == NULL && ngx_buf_size(cl->buf) == 0;
        return b;
    }
    b.data = cl->buf->pos;
    b.len = cl->buf->last - cl->buf->pos;
    return b;
}

/* What the location's lines read of the body (RATEL__KEY_NEEDS_*). */
int ngx_http_ratel_lines_need(ngx_http_ratel_loc_conf_t *conf)
{
    ngx_http_ratel_limit_t **l = conf->limits->elts;
    int needs = 0;

    for (ngx_uint_t i = 0; i < conf->limits->nelts; i++)
        needs |= l[i]->needs;
    return needs;
}

/*
 * The view key sources read of request `r`: its headers, query (r->args),
 * path (r->uri, as locations match it), host, client address (after
 * realip), and the body the handler read for form: and json: sources.
 * view->json is the caller's to delete.
 */
static ngx_int_t make_view(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                           ratel__key_view_t *v)
{
    ngx_connection_t *c = r->connection;
    ngx_uint_t whole = 1;
    ngx_str_t body = ngx_null_string;
    u_char *client = ngx_pnalloc(r->pool, c->addr_text.len + 1);

    if (client == NULL)
        return NGX_ERROR;
    ngx_memcpy(client, c->addr_text.data, c->addr_text.len);
    client[c->addr_text.len] = '\0';
    ngx_memzero(v, sizeof *v);
    v->headers = request_headers;
    v->ctx = r;
    if (r->args.len > 0 || r->args_start)
        v->query = (ratel__key_str_t){(const char *)r->args.data, r->args.len};
    v->path = (ratel__key_str_t){(const char *)r->uri.data, r->uri.len};
    v->host = (ratel__key_str_t){(const char *)r->headers_in.server.data,
                                 r->headers_in.server.len};
    v->client = (const char *)client;
    if (ctx->body_read)
        body = body_of(r, &whole);
    if (ngx_http_ratel_type_is(r, "application/x-www-form-urlencoded")) {
        v->body = RATEL__KEY_BODY_URLENCODED;
        v->form = (ratel__key_str_t){(const char *)body.data, body.len};
        v->form_unread = !whole;
    } else if (ngx_http_ratel_type_is(r, "multipart/form-data")) {
        v->body = RATEL__KEY_BODY_MULTIPART;
    }
    if (ctx->body_read &&
        (ngx_http_ratel_lines_need(ctx->conf) & RATEL__KEY_NEEDS_JSON) &&
        (!whole || body.len > 0)) {
        cJSON *root = NULL;
        if (!whole ||
            ratel__json_parse_strict((const char *)body.data, body.len, &root,
                                     NULL, NULL, 0) != 0 ||
            !cJSON_IsObject(root))
            v->json_error = 1;
        else
            v->json = root;
        if (v->json == NULL)
            cJSON_Delete(root);
    }
    return NGX_OK;
}

/* Whether `value` is one of the line's exempt values. */
static ngx_uint_t exempt(ngx_http_ratel_limit_t *l, const u_char *value,
                         size_t n)
{
    ngx_str_t *v = l->exempt ? l->exempt->elts : NULL;

    for (ngx_uint_t i = 0; v && i < l->exempt->nelts; i++)
        if (v[i].len == n && ngx_memcmp(v[i].data, value, n) == 0)
            return 1;
    return 0;
}

/* A line whose key was refused or missing: logged through the budget. */
static void key_refused(ngx_http_request_t *r, ngx_http_ratel_limit_t *l,
                        const char *reason, const char *why)
{
    uint64_t not_logged = 0;

    if (ngx_http_ratel_log_take(NGX_HTTP_RATEL_LOG_KEY, &not_logged))
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "ratel: %s: key=%V of the line in %s:%ui: %s "
                      "(not_logged=%uL)",
                      reason, &l->key_text, l->file, l->line,
                      why ? why : "absent or empty", not_logged);
}

/*
 * The store key of a key=$var line into buf (room for "POLICY:" and
 * RATEL__KEY_MAX bytes): the variable's value escaped as key sources
 * escape theirs, "-" for an empty one under on_missing=shared. Its length;
 * 0 when the value is empty (missing); -1 when too long; -2 when the
 * variable cannot be read.
 */
static long var_key(ngx_http_request_t *r, ngx_http_ratel_limit_t *l,
                    u_char *buf)
{
    ngx_str_t *p = &l->policy->name, value;
    long n;

    if (ngx_http_complex_value(r, l->key_cv, &value) != NGX_OK)
        return -2;
    if (value.len == 0 && l->sources.on_missing != RATEL__KEY_MISSING_SHARED)
        return 0;
    if (value.len == 0) {
        value.data = (u_char *)"-";
        value.len = 1;
    }
    ngx_memcpy(buf, p->data, p->len);
    buf[p->len] = ':';
    n = ratel__key_escape((const char *)value.data, value.len,
                          (char *)buf + p->len + 1, RATEL__KEY_MAX + 1);
    return n < 0 ? -1 : n + (long)p->len + 1;
}

/*
 * The store key of line `l` into *key (in r's pool): NGX_OK; NGX_DECLINED
 * when the line does not limit this request (an exempt value, a missing
 * key under on_missing=allow); NGX_ABORT when the key is refused or
 * missing (ctx->reason set: the request is answered 400); NGX_ERROR.
 */
static ngx_int_t line_key(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                          ngx_http_ratel_limit_t *l, const ratel__key_view_t *v,
                          ngx_str_t *key)
{
    ngx_str_t *p = &l->policy->name;
    const char *why = NULL;
    size_t cap = p->len + 2 + RATEL__KEY_MAX;
    long n;

    key->data = ngx_pnalloc(r->pool, cap);
    if (key->data == NULL)
        return NGX_ERROR;
    if (l->key_cv == NULL)
        n = ratel__key_build(&l->sources, (const char *)p->data, v,
                             (char *)key->data, cap, &why);
    else if ((n = var_key(r, l, key->data)) == -2)
        return NGX_ERROR;
    else if (n < 0)
        why = "longer than its limit";
    if (n > 0) {
        key->len = (size_t)n;
        return exempt(l, key->data + p->len + 1, key->len - p->len - 1)
                   ? NGX_DECLINED
                   : NGX_OK;
    }
    if (n == 0 && l->sources.on_missing == RATEL__KEY_MISSING_ALLOW)
        return NGX_DECLINED;
    ctx->reason = n == 0 ? "missing-key" : "bad-key";
    key_refused(r, l, ctx->reason, why);
    return NGX_ABORT;
}

/*
 * The line's cost for this request: its number, or its variable's, read
 * as every front end reads a cost (ratel_options_read: a whole number
 * from 1 to RATEL_LIMIT_MAX) and checked against the policy
 * (ratel_options_check: a cost above a rule's capacity is never
 * admitted). NGX_OK; NGX_ABORT for a cost refused (ctx->reason
 * "bad-cost": the request is answered 400, its line logged through the
 * budget); NGX_ERROR.
 */
static ngx_int_t line_cost_of(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                              ngx_http_ratel_limit_t *l, uint64_t *cost)
{
    uint64_t not_logged = 0;
    ratel_options_t o;
    ratel_request_t req;
    char err[256];
    ngx_str_t v;

    *cost = l->cost;
    if (l->cost_cv == NULL)
        return NGX_OK;
    if (ngx_http_complex_value(r, l->cost_cv, &v) != NGX_OK)
        return NGX_ERROR;
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD,
                       ~(1u << RATEL_OPTION_COST));
    if (ratel_options_read(&o, "cost", 4, (const char *)v.data, v.len, err,
                           sizeof err) == 0 &&
        ratel_options_check(&o, &l->policy->policy, err, sizeof err) == 0) {
        ratel_options_request(&o, &req);
        *cost = req.cost;
        return NGX_OK;
    }
    ctx->reason = "bad-cost";
    if (ngx_http_ratel_log_take(NGX_HTTP_RATEL_LOG_COST, &not_logged))
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "ratel: bad-cost: cost=%V of the line in %s:%ui: %s "
                      "(not_logged=%uL)",
                      &l->cost_cv->value, l->file, l->line, err, not_logged);
    return NGX_ABORT;
}

/*
 * Item `ctx->nitems` from line `l`: NGX_OK, NGX_DECLINED when the line
 * does not limit the request, NGX_ABORT for a request that cannot be
 * decided (a key refused or missing, a cost refused: ctx->reason),
 * NGX_ERROR.
 */
static ngx_int_t add_item(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                          ngx_http_ratel_limit_t *l, const ratel__key_view_t *v)
{
    ratel_batch_item_t *item = &ctx->items[ctx->nitems];
    ngx_str_t key;
    ngx_int_t rc = line_key(r, ctx, l, v, &key);

    if (rc != NGX_OK)
        return rc;
    item->policy = &l->policy->policy;
    item->request.cost = 1;
    item->request.max_wait_ms = l->max_wait_ms;
    /* charge_on=: the limit is checked now, charged in the log phase. */
    item->request.flags = l->charge_on ? RATEL_PEEK : 0;
    /* A leased policy in a Redis zone: from the zone's slices when it can
       (the store ignores it for a PEEK and a group). */
    item->request.lease = l->zone->store.len > 0
                              ? ngx_http_ratel_shm_lease(l->zone, l->count)
                              : NULL;
    rc = line_cost_of(r, ctx, l, &item->request.cost);
    if (rc != NGX_OK)
        return rc;
    item->key = (const char *)key.data;
    item->keylen = key.len;
    ctx->lines[ctx->nitems++] = l;
    return NGX_OK;
}

/* The lines of zone `zone` as one group; NGX_ABORT as add_item's. */
static ngx_int_t add_group(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx,
                           ngx_http_ratel_zone_t *zone,
                           const ratel__key_view_t *v)
{
    ngx_http_ratel_limit_t **l = ctx->conf->limits->elts;
    ngx_http_ratel_group_t *g = &ctx->groups[ctx->ngroups];

    g->zone = zone;
    g->start = ctx->nitems;
    for (ngx_uint_t i = 0; i < ctx->conf->limits->nelts; i++) {
        ngx_int_t rc =
            l[i]->zone == zone ? add_item(r, ctx, l[i], v) : NGX_DECLINED;
        if (rc == NGX_ERROR || rc == NGX_ABORT)
            return rc;
    }
    g->n = ctx->nitems - g->start;
    /* One member is a group of its own (a batch's group 0). */
    for (size_t i = g->start; i < ctx->nitems; i++)
        ctx->items[i].group = g->n > 1 ? 1 : 0;
    if (g->n > 0)
        ctx->ngroups++;
    return NGX_OK;
}

/* The request's items, zone by zone in the order the zones first appear. */
ngx_int_t ngx_http_ratel_build(ngx_http_request_t *r, ngx_http_ratel_ctx_t *ctx)
{
    ngx_http_ratel_limit_t **l = ctx->conf->limits->elts;
    size_t n = ctx->conf->limits->nelts;
    ratel__key_view_t v;
    ngx_int_t rc = make_view(r, ctx, &v);

    ctx->built = 1;
    for (size_t i = 0; rc == NGX_OK && i < n; i++) {
        size_t j = 0;
        while (j < i && l[j]->zone != l[i]->zone)
            j++;
        if (j < i)
            continue;
        rc = add_group(r, ctx, l[i]->zone, &v);
    }
    cJSON_Delete((cJSON *)v.json);
    return rc;
}
