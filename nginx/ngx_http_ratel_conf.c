/*
 * ngx_http_ratel_conf.c - the module's directives (ngx_http_ratel_module.c
 * lists what each does): their table, the configurations they fill, and
 * the check, once the http block is read, that every `ratel` line names a
 * declared zone and policy with a cost the policy can admit.
 */
#include "ngx_http_ratel.h"

#include "app/ratelimit.h"
#include "ratel_internal.h"

static char *zone_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *policy_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ratel_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *metrics_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

static ngx_conf_num_bounds_t status_bounds = {ngx_conf_check_num_bounds, 400,
                                              599};

static ngx_conf_enum_t log_levels[] = {{ngx_string("info"), NGX_LOG_INFO},
                                       {ngx_string("notice"), NGX_LOG_NOTICE},
                                       {ngx_string("warn"), NGX_LOG_WARN},
                                       {ngx_string("error"), NGX_LOG_ERR},
                                       {ngx_null_string, 0}};

#define LOC_CONF (NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF)
#define LOC_OFFSET(field) offsetof(ngx_http_ratel_loc_conf_t, field)

ngx_command_t ngx_http_ratel_commands[] = {
    {ngx_string("ratel_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE12,
     zone_directive, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("ratel_policy"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE,
     policy_directive, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("ratel"), LOC_CONF | NGX_CONF_2MORE, ratel_directive,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("ratel_status"), LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, LOC_OFFSET(status),
     &status_bounds},
    {ngx_string("ratel_dry_run"), LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, LOC_OFFSET(dry_run),
     NULL},
    {ngx_string("ratel_headers"), LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, LOC_OFFSET(headers),
     NULL},
    {ngx_string("ratel_log_level"), LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, LOC_OFFSET(log_level),
     &log_levels},
    {ngx_string("ratel_metrics"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
     metrics_directive, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    ngx_null_command};

void *ngx_http_ratel_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_ratel_main_conf_t *m = ngx_pcalloc(cf->pool, sizeof *m);

    if (m == NULL ||
        ngx_array_init(&m->zones, cf->pool, 4,
                       sizeof(ngx_http_ratel_zone_t *)) != NGX_OK ||
        ngx_array_init(&m->policies, cf->pool, 4,
                       sizeof(ngx_http_ratel_policy_t)) != NGX_OK ||
        ngx_array_init(&m->limits, cf->pool, 4,
                       sizeof(ngx_http_ratel_limit_t *)) != NGX_OK)
        return NULL;
    return m;
}

void *ngx_http_ratel_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_ratel_loc_conf_t *c = ngx_pcalloc(cf->pool, sizeof *c);

    if (c == NULL)
        return NULL;
    c->limits = NGX_CONF_UNSET_PTR;
    c->status = NGX_CONF_UNSET_UINT;
    c->dry_run = NGX_CONF_UNSET;
    c->headers = NGX_CONF_UNSET;
    c->log_level = NGX_CONF_UNSET_UINT;
    return c;
}

char *ngx_http_ratel_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_ratel_loc_conf_t *prev = parent, *conf = child;

    (void)cf;
    /* limit_req's rule: lines of its own replace the inherited ones. */
    ngx_conf_merge_ptr_value(conf->limits, prev->limits, NULL);
    ngx_conf_merge_uint_value(conf->status, prev->status,
                              NGX_HTTP_TOO_MANY_REQUESTS);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_value(conf->headers, prev->headers, 1);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    return NGX_CONF_OK;
}

/* Zone and policy names: [A-Za-z0-9_.-], 1..NGX_HTTP_RATEL_NAME_MAX. */
static ngx_int_t check_name(ngx_conf_t *cf, const char *what, ngx_str_t *name)
{
    ngx_uint_t ok = name->len > 0 && name->len <= NGX_HTTP_RATEL_NAME_MAX;

    for (size_t i = 0; ok && i < name->len; i++) {
        u_char c = name->data[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    }
    if (ok)
        return NGX_OK;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "%s name \"%V\": use 1 to %d of A-Z a-z 0-9 _ . -", what,
                       name, NGX_HTTP_RATEL_NAME_MAX);
    return NGX_ERROR;
}

/* The value of `arg` after "prefix=", or NULL when it does not start so. */
static ngx_int_t arg_value(ngx_str_t *arg, const char *prefix, ngx_str_t *value)
{
    size_t n = ngx_strlen(prefix);

    if (arg->len < n || ngx_strncmp(arg->data, prefix, n) != 0)
        return NGX_DECLINED;
    value->data = arg->data + n;
    value->len = arg->len - n;
    return NGX_OK;
}

static ngx_http_ratel_zone_t *find_zone(ngx_http_ratel_main_conf_t *m,
                                        ngx_str_t *name)
{
    ngx_http_ratel_zone_t **z = m->zones.elts;

    for (ngx_uint_t i = 0; i < m->zones.nelts; i++)
        if (z[i]->name.len == name->len &&
            ngx_strncmp(z[i]->name.data, name->data, name->len) == 0)
            return z[i];
    return NULL;
}

static ngx_http_ratel_policy_t *find_policy(ngx_http_ratel_main_conf_t *m,
                                            ngx_str_t *name)
{
    ngx_http_ratel_policy_t *p = m->policies.elts;

    for (ngx_uint_t i = 0; i < m->policies.nelts; i++)
        if (p[i].name.len == name->len &&
            ngx_strncmp(p[i].name.data, name->data, name->len) == 0)
            return &p[i];
    return NULL;
}

/* zone=NAME:SIZE into zone->name and zone->size. */
static char *zone_name_size(ngx_conf_t *cf, ngx_str_t *v,
                            ngx_http_ratel_zone_t *zone)
{
    u_char *colon = ngx_strlchr(v->data, v->data + v->len, ':');
    ngx_str_t size;
    ssize_t n;

    if (colon == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone: \"zone=%V\" has no size: write "
                           "zone=NAME:SIZE, e.g. zone=api:10m",
                           v);
        return NGX_CONF_ERROR;
    }
    zone->name.data = v->data;
    zone->name.len = colon - v->data;
    if (check_name(cf, "ratel_zone", &zone->name) != NGX_OK)
        return NGX_CONF_ERROR;
    size.data = colon + 1;
    size.len = v->data + v->len - size.data;
    n = ngx_parse_size(&size);
    if (n == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": size \"%V\" is not a size: "
                           "write a number with k or m, e.g. 10m",
                           &zone->name, &size);
        return NGX_CONF_ERROR;
    }
    if (n < NGX_HTTP_RATEL_ZONE_MIN) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\" of %V is too small: give it at "
                           "least %dk",
                           &zone->name, &size, NGX_HTTP_RATEL_ZONE_MIN / 1024);
        return NGX_CONF_ERROR;
    }
    zone->size = n;
    return NGX_CONF_OK;
}

static char *zone_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratel_main_conf_t *m = conf;
    ngx_str_t *args = cf->args->elts, v, store = ngx_null_string;
    ngx_http_ratel_zone_t *zone, **slot;

    (void)cmd;
    zone = ngx_pcalloc(cf->pool, sizeof *zone);
    if (zone == NULL)
        return NGX_CONF_ERROR;
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        if (arg_value(&args[i], "zone=", &v) == NGX_OK) {
            if (zone_name_size(cf, &v, zone) != NGX_CONF_OK)
                return NGX_CONF_ERROR;
        } else if (arg_value(&args[i], "store=", &v) == NGX_OK) {
            store = v;
        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel_zone: unknown parameter \"%V\": "
                               "expected zone=NAME:SIZE [store=URL]",
                               &args[i]);
            return NGX_CONF_ERROR;
        }
    }
    if (zone->name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone needs zone=NAME:SIZE");
        return NGX_CONF_ERROR;
    }
    if (find_zone(m, &zone->name)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\" is declared twice", &zone->name);
        return NGX_CONF_ERROR;
    }
    zone->shm_zone = ngx_shared_memory_add(cf, &zone->name, zone->size,
                                           &ngx_http_ratel_module);
    if (zone->shm_zone == NULL)
        return NGX_CONF_ERROR;
    if (zone->shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_zone \"%V\": another module's shared zone "
                           "has this name",
                           &zone->name);
        return NGX_CONF_ERROR;
    }
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;
    zone->shm_zone->init = ngx_http_ratel_shm_init;
    zone->shm_zone->data = zone;
    if (ngx_array_init(&zone->counts, cf->pool, 4, sizeof(ngx_str_t)) !=
            NGX_OK ||
        ngx_array_init(&zone->count_policies, cf->pool, 4,
                       sizeof(ngx_http_ratel_policy_t *)) != NGX_OK)
        return NGX_CONF_ERROR;
    if (store.len > 0) {
        zone->store = store;
        if (ngx_http_ratel_redis_conf(cf, zone, &store) != NGX_CONF_OK)
            return NGX_CONF_ERROR;
    }
    slot = ngx_array_push(&m->zones);
    if (slot == NULL)
        return NGX_CONF_ERROR;
    *slot = zone;
    return NGX_CONF_OK;
}

/* A copy of `len` bytes of `text` in the configuration's pool. */
static ngx_int_t conf_text(ngx_conf_t *cf, ngx_str_t *out, const char *text,
                           size_t len)
{
    out->data = ngx_pnalloc(cf->pool, len + 1);
    if (out->data == NULL)
        return NGX_ERROR;
    ngx_memcpy(out->data, text, len);
    out->data[len] = '\0';
    out->len = len;
    return NGX_OK;
}

/*
 * The policy's texts a request uses: its RateLimit-Policy field, each
 * rule's RateLimit item name and the room an item needs, each rule as a
 * refusal logs it.
 */
static char *policy_texts(ngx_conf_t *cf, ngx_http_ratel_policy_t *p)
{
    const char *name = (const char *)p->name.data;
    uint32_t n = p->policy.nrules;
    char text[512];
    size_t len;

    p->items = ngx_pcalloc(cf->pool, n * sizeof(ngx_str_t));
    p->rule_texts = ngx_pcalloc(cf->pool, n * sizeof(ngx_str_t));
    if (p->items == NULL || p->rule_texts == NULL)
        return NGX_CONF_ERROR;
    len = ratel__header_policy(name, &p->policy, NULL, 0);
    p->field.data = ngx_pnalloc(cf->pool, len + 1);
    if (p->field.data == NULL)
        return NGX_CONF_ERROR;
    p->field.len =
        ratel__header_policy(name, &p->policy, (char *)p->field.data, len + 1);
    p->fingerprint = ratel__policy_fingerprint(&p->policy);
    p->limit_max = 0;
    for (uint32_t i = 0; i < n; i++) {
        /* Names are at most NGX_HTTP_RATEL_NAME_MAX bytes: both fit. */
        len = ratel__header_ratelimit_name(name, &p->policy, (int)i, text,
                                           sizeof text);
        if (conf_text(cf, &p->items[i], text, ngx_min(len, sizeof text - 1)) !=
            NGX_OK)
            return NGX_CONF_ERROR;
        p->limit_max =
            ngx_max(p->limit_max, p->items[i].len + RATEL__HEADER_PARAMS_MAX);
        len = (size_t)ratel_rule_format(&p->policy.rules[i], text, sizeof text);
        if (conf_text(cf, &p->rule_texts[i], text,
                      ngx_min(len, sizeof text - 1)) != NGX_OK)
            return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

static char *policy_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratel_main_conf_t *m = conf;
    ngx_str_t *args = cf->args->elts, lease = ngx_null_string;
    const char *texts[RATEL_MAX_RULES + 1];
    char err[512];
    ngx_http_ratel_policy_t *p;
    ngx_uint_t n = 0;

    (void)cmd;
    if (check_name(cf, "ratel_policy", &args[1]) != NGX_OK)
        return NGX_CONF_ERROR;
    if (find_policy(m, &args[1])) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel_policy \"%V\" is declared twice", &args[1]);
        return NGX_CONF_ERROR;
    }
    /* The rules, and lease=SETTINGS anywhere among them. nginx ends every
       argument with a NUL. */
    for (ngx_uint_t i = 2; i < cf->args->nelts; i++) {
        if (arg_value(&args[i], "lease=", &lease) == NGX_OK)
            continue;
        if (n == RATEL_MAX_RULES) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel_policy \"%V\" has more than %d rules",
                               &args[1], RATEL_MAX_RULES);
            return NGX_CONF_ERROR;
        }
        texts[n++] = (const char *)args[i].data;
    }
    p = ngx_array_push(&m->policies);
    if (p == NULL)
        return NGX_CONF_ERROR;
    ngx_memzero(p, sizeof *p);
    p->name = args[1];
    if (ratel_policy_parse(&p->policy, texts, n, err, sizeof err) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratel_policy \"%V\": %s",
                           &args[1], err);
        return NGX_CONF_ERROR;
    }
    if (lease.data && ngx_http_ratel_lease_conf(cf, p, &lease) != NGX_CONF_OK)
        return NGX_CONF_ERROR;
    return policy_texts(cf, p);
}

/* cost=NUMBER or cost=$var (a complex value read per request). */
static char *line_cost(ngx_conf_t *cf, ngx_str_t *v, ngx_http_ratel_limit_t *l)
{
    ngx_http_compile_complex_value_t ccv;
    off_t n;

    if (ngx_http_script_variables_count(v) == 0) {
        n = ngx_atoof(v->data, v->len);
        if (n < 1) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel: cost \"%V\" is not a whole number of "
                               "at least 1, nor a variable",
                               v);
            return NGX_CONF_ERROR;
        }
        l->cost = (uint64_t)n;
        return NGX_CONF_OK;
    }
    l->cost_cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (l->cost_cv == NULL)
        return NGX_CONF_ERROR;
    ngx_memzero(&ccv, sizeof ccv);
    ccv.cf = cf;
    ccv.value = v;
    ccv.complex_value = l->cost_cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? NGX_CONF_OK
                                                          : NGX_CONF_ERROR;
}

/* key=SOURCES (app/keys.h's grammar) or key=STRING with $variables. */
static char *line_key(ngx_conf_t *cf, ngx_str_t *v, ngx_http_ratel_limit_t *l)
{
    ngx_http_compile_complex_value_t ccv;
    char err[512];

    l->key_text = *v;
    if (ngx_http_script_variables_count(v) == 0) {
        if (ratel__key_parse((const char *)v->data, v->len, &l->sources, err,
                             sizeof err) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratel: key=%V: %s", v,
                               err);
            return NGX_CONF_ERROR;
        }
        l->needs = ratel__key_needs(&l->sources);
        return NGX_CONF_OK;
    }
    l->key_cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (l->key_cv == NULL)
        return NGX_CONF_ERROR;
    ngx_memzero(&ccv, sizeof ccv);
    ccv.cf = cf;
    ccv.value = v;
    ccv.complex_value = l->key_cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? NGX_CONF_OK
                                                          : NGX_CONF_ERROR;
}

/* on_missing=reject|shared|allow (rateld's words). */
static char *line_missing(ngx_conf_t *cf, ngx_str_t *v,
                          ngx_http_ratel_limit_t *l)
{
    static const char *const words[] = {"reject", "shared", "allow"};

    for (ngx_uint_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (v->len == ngx_strlen(words[i]) &&
            ngx_strncmp(v->data, words[i], v->len) == 0) {
            l->sources.on_missing = (ratel__key_missing_t)i;
            return NGX_CONF_OK;
        }
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "ratel: on_missing \"%V\": expected reject (the "
                       "default: 400), shared or allow",
                       v);
    return NGX_CONF_ERROR;
}

/* exempt=VALUE[,VALUE...]: kept as written until the key is known. */
static char *line_exempt(ngx_conf_t *cf, ngx_str_t *v,
                         ngx_http_ratel_limit_t *l)
{
    u_char *p = v->data, *end = v->data + v->len;

    if (l->exempt == NULL) {
        l->exempt = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (l->exempt == NULL)
            return NGX_CONF_ERROR;
    }
    while (p <= end) {
        u_char *comma = ngx_strlchr(p, end, ',');
        ngx_str_t *value;
        if (comma == NULL)
            comma = end;
        if (comma == p) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel: exempt=%V has an empty value (a "
                               "missing key is on_missing's)",
                               v);
            return NGX_CONF_ERROR;
        }
        value = ngx_array_push(l->exempt);
        if (value == NULL)
            return NGX_CONF_ERROR;
        value->data = p;
        value->len = comma - p;
        p = comma + 1;
    }
    return NGX_CONF_OK;
}

/*
 * The exempt values as the key reads requests: through its one source's
 * transform (13800000000 with |phone:CN is +8613800000000), so that any
 * spelling of an exempt number is exempt, and no other.
 */
static char *exempt_as_read(ngx_conf_t *cf, ngx_http_ratel_limit_t *l)
{
    const ratel__key_part_t *part = &l->sources.parts[0];
    ngx_str_t *v = l->exempt ? l->exempt->elts : NULL;
    char buf[RATEL__KEY_MAX + 2];

    if (v == NULL || l->key_cv || l->sources.n != 1 ||
        part->transform == RATEL__KEY_AS_IS)
        return NGX_CONF_OK;
    for (ngx_uint_t i = 0; i < l->exempt->nelts; i++) {
        const char *value = (const char *)v[i].data, *why = NULL;
        size_t n = v[i].len;
        if (ratel__key_transform(part, buf, sizeof buf, &value, &n, &why)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel: exempt value \"%V\" is %s", &v[i], why);
            return NGX_CONF_ERROR;
        }
        v[i].data = ngx_pnalloc(cf->pool, n);
        if (v[i].data == NULL)
            return NGX_CONF_ERROR;
        ngx_memcpy(v[i].data, value, n);
        v[i].len = n;
    }
    return NGX_CONF_OK;
}

/*
 * max_wait=MS: the option every ratel front end reads
 * (RATEL_OPTION_MAP's max_wait: its range and its message).
 */
static char *line_max_wait(ngx_conf_t *cf, ngx_str_t *v,
                           ngx_http_ratel_limit_t *l)
{
    ratel_options_t o;
    char err[256];

    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD, 0);
    if (ratel_options_read(&o, "max_wait", 8, (const char *)v->data, v->len,
                           err, sizeof err) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "ratel: %s", err);
        return NGX_CONF_ERROR;
    }
    l->max_wait_ms = o.value[RATEL_OPTION_MAXWAIT];
    return NGX_CONF_OK;
}

/* charge_on=STATUS[,STATUS...]: the statuses whose answers are charged,
   read as rateld reads its policies' charge_on (server/app/status.h). */
static char *line_charge_on(ngx_conf_t *cf, ngx_str_t *v,
                            ngx_http_ratel_limit_t *l)
{
    char why[160];

    l->charge_on = ngx_pcalloc(cf->pool, sizeof *l->charge_on);
    if (l->charge_on == NULL)
        return NGX_CONF_ERROR;
    if (ratel__status_add_list(l->charge_on, (const char *)v->data, v->len, why,
                               sizeof why) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel: charge_on=%V: %s; separate statuses by "
                           "commas, e.g. charge_on=401,403",
                           v, why);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

/* One argument of a `ratel` line. */
static char *line_arg(ngx_conf_t *cf, ngx_str_t *arg, ngx_http_ratel_limit_t *l)
{
    ngx_str_t v;

    if (arg_value(arg, "zone=", &l->zone_name) == NGX_OK)
        return NGX_CONF_OK;
    if (arg_value(arg, "policy=", &l->policy_name) == NGX_OK)
        return NGX_CONF_OK;
    if (arg_value(arg, "cost=", &v) == NGX_OK)
        return line_cost(cf, &v, l);
    if (arg_value(arg, "key=", &v) == NGX_OK)
        return line_key(cf, &v, l);
    if (arg_value(arg, "exempt=", &v) == NGX_OK)
        return line_exempt(cf, &v, l);
    if (arg_value(arg, "on_missing=", &v) == NGX_OK)
        return line_missing(cf, &v, l);
    if (arg_value(arg, "max_wait=", &v) == NGX_OK)
        return line_max_wait(cf, &v, l);
    if (arg_value(arg, "charge_on=", &v) == NGX_OK)
        return line_charge_on(cf, &v, l);
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "ratel: unknown parameter \"%V\": expected "
                       "zone=NAME policy=NAME key=SOURCES|$var "
                       "[cost=NUMBER|$var] [exempt=VALUE,...] "
                       "[on_missing=reject|shared|allow] [max_wait=MS] "
                       "[charge_on=STATUS,...]",
                       arg);
    return NGX_CONF_ERROR;
}

/* At most RATEL_GROUP_MAX lines of one level in one zone. */
static ngx_uint_t same_str(const ngx_str_t *a, const ngx_str_t *b)
{
    return a->len == b->len && ngx_strncmp(a->data, b->data, a->len) == 0;
}

/*
 * A line at one level beside the others: not the same zone, policy and
 * key as another (it would charge each request twice: limit_req refuses
 * a repeated zone too), and at most RATEL_GROUP_MAX lines in one zone.
 */
static char *check_group(ngx_conf_t *cf, ngx_array_t *limits,
                         ngx_http_ratel_limit_t *l)
{
    ngx_http_ratel_limit_t **all = limits->elts;
    ngx_uint_t same = 0;

    for (ngx_uint_t i = 0; i < limits->nelts; i++) {
        if (!same_str(&all[i]->zone_name, &l->zone_name))
            continue;
        same++;
        if (same_str(&all[i]->policy_name, &l->policy_name) &&
            same_str(&all[i]->key_text, &l->key_text)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "ratel: this line repeats the one in %s:%ui "
                               "(zone \"%V\", policy \"%V\", key \"%V\"): "
                               "each request would be charged twice",
                               all[i]->file, all[i]->line, &l->zone_name,
                               &l->policy_name, &l->key_text);
            return NGX_CONF_ERROR;
        }
    }
    if (same < RATEL_GROUP_MAX)
        return NGX_CONF_OK;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "ratel: more than %d lines in zone \"%V\" at one level",
                       RATEL_GROUP_MAX, &l->zone_name);
    return NGX_CONF_ERROR;
}

static char *ratel_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ratel_loc_conf_t *c = conf;
    ngx_http_ratel_main_conf_t *m =
        ngx_http_conf_get_module_main_conf(cf, ngx_http_ratel_module);
    ngx_str_t *args = cf->args->elts;
    ngx_http_ratel_limit_t *l, **slot;

    (void)cmd;
    l = ngx_pcalloc(cf->pool, sizeof *l);
    if (l == NULL)
        return NGX_CONF_ERROR;
    l->cost = 1;
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++)
        if (line_arg(cf, &args[i], l) != NGX_CONF_OK)
            return NGX_CONF_ERROR;
    if (l->zone_name.len == 0 || l->policy_name.len == 0 ||
        l->key_text.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ratel needs zone=NAME policy=NAME key=SOURCES, "
                           "e.g. key=query:phone or key=ip");
        return NGX_CONF_ERROR;
    }
    if (exempt_as_read(cf, l) != NGX_CONF_OK)
        return NGX_CONF_ERROR;
    l->file = cf->conf_file->file.name.data;
    l->line = cf->conf_file->line;
    if (c->limits == NGX_CONF_UNSET_PTR) {
        c->limits = ngx_array_create(cf->pool, 2, sizeof(*slot));
        if (c->limits == NULL)
            return NGX_CONF_ERROR;
    }
    if (check_group(cf, c->limits, l) != NGX_CONF_OK)
        return NGX_CONF_ERROR;
    slot = ngx_array_push(c->limits);
    if (slot == NULL)
        return NGX_CONF_ERROR;
    *slot = l;
    slot = ngx_array_push(&m->limits);
    if (slot == NULL)
        return NGX_CONF_ERROR;
    *slot = l;
    return NGX_CONF_OK;
}

static char *metrics_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t *clcf =
        ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    (void)cmd;
    (void)conf;
    clcf->handler = ngx_http_ratel_metrics_handler;
    return NGX_CONF_OK;
}

/* The line's policy in its zone's list of counted policies. */
static ngx_int_t count_index(ngx_http_ratel_zone_t *zone,
                             ngx_http_ratel_limit_t *l)
{
    ngx_str_t *names = zone->counts.elts, *name;
    ngx_http_ratel_policy_t **policy;

    for (ngx_uint_t i = 0; i < zone->counts.nelts; i++)
        if (names[i].data == l->policy->name.data) {
            l->count = i;
            return NGX_OK;
        }
    name = ngx_array_push(&zone->counts);
    policy = ngx_array_push(&zone->count_policies);
    if (name == NULL || policy == NULL)
        return NGX_ERROR;
    *name = l->policy->name;
    *policy = l->policy;
    l->count = zone->counts.nelts - 1;
    return NGX_OK;
}

/*
 * max_wait= needs a policy whose every rule reserves (gcra). charge_on=
 * checks before and charges after the request: it takes no lease to
 * release nor a reservation to wait for.
 */
static ngx_int_t check_max_wait(ngx_conf_t *cf, ngx_http_ratel_limit_t *l)
{
    ratel_options_t o;
    char err[256];

    if (l->charge_on &&
        (l->max_wait_ms > 0 || ratel_policy_has_leases(&l->policy->policy))) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "ratel: charge_on= charges after the request, so it "
                      "takes %s, in %s:%ui",
                      l->max_wait_ms ? "no max_wait=" : "no concurrent rule",
                      l->file, l->line);
        return NGX_ERROR;
    }
    if (l->max_wait_ms == 0)
        return NGX_OK;
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD, 0);
    o.value[RATEL_OPTION_MAXWAIT] = l->max_wait_ms;
    if (ratel_options_check(&o, &l->policy->policy, err, sizeof err) == 0)
        return NGX_OK;
    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                  "ratel: policy \"%V\": %s, in %s:%ui", &l->policy->name, err,
                  l->file, l->line);
    return NGX_ERROR;
}

/*
 * A line's zone and policy, found once the whole http block is read (they
 * may be declared after it), and its fixed cost checked against the
 * policy: a cost no rule could ever admit is refused here, not at each
 * request.
 */
static ngx_int_t resolve(ngx_conf_t *cf, ngx_http_ratel_main_conf_t *m,
                         ngx_http_ratel_limit_t *l)
{
    ratel_request_t req = RATEL_REQUEST_INIT;
    size_t rule = 0;
    char text[128];

    l->zone = find_zone(m, &l->zone_name);
    l->policy = find_policy(m, &l->policy_name);
    if (l->zone == NULL || l->policy == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "ratel: unknown %s \"%V\": declare it with %s in the "
                      "http block, in %s:%ui",
                      l->zone ? "policy" : "zone",
                      l->zone ? &l->policy_name : &l->zone_name,
                      l->zone ? "ratel_policy NAME RULE..."
                              : "ratel_zone zone=NAME:SIZE",
                      l->file, l->line);
        return NGX_ERROR;
    }
    req.cost = l->cost;
    if (l->cost_cv == NULL &&
        ratel_policy_check_request(&l->policy->policy, &req, &rule) != 0) {
        ratel_rule_format(&l->policy->policy.rules[rule], text, sizeof text);
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "ratel: cost %uL is more than rule \"%s\" of policy "
                      "\"%V\" ever admits, in %s:%ui",
                      l->cost, text, &l->policy->name, l->file, l->line);
        return NGX_ERROR;
    }
    if (check_max_wait(cf, l) != NGX_OK ||
        ngx_http_ratel_lease_line(cf, l) != NGX_OK)
        return NGX_ERROR;
    return count_index(l->zone, l);
}

ngx_int_t ngx_http_ratel_resolve(ngx_conf_t *cf, ngx_http_ratel_main_conf_t *m)
{
    ngx_http_ratel_limit_t **l = m->limits.elts;
    ngx_http_ratel_zone_t **z = m->zones.elts;

    for (ngx_uint_t i = 0; i < m->limits.nelts; i++)
        if (resolve(cf, m, l[i]) != NGX_OK)
            return NGX_ERROR;
    for (ngx_uint_t i = 0; i < m->zones.nelts; i++) {
        if (z[i]->counts.nelts > NGX_HTTP_RATEL_COUNTERS_MAX) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "ratel_zone \"%V\" is used with more than %d "
                          "policies, in %s:%ui",
                          &z[i]->name, NGX_HTTP_RATEL_COUNTERS_MAX, z[i]->file,
                          z[i]->line);
            return NGX_ERROR;
        }
        z[i]->slots = ngx_pcalloc(cf->pool, sizeof(ngx_uint_t) *
                                                (z[i]->counts.nelts + 1));
        if (z[i]->slots == NULL)
            return NGX_ERROR;
    }
    return NGX_OK;
}
