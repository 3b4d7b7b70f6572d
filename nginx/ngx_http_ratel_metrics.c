/*
 * ngx_http_ratel_metrics.c - `ratel_metrics;`: the zones' counts as
 * Prometheus text, read from shared memory, so that any worker answers
 * the totals of all. The names are rateld's (rateld/metrics.c) where they
 * mean the same, with a zone label:
 *
 *   ratel_decisions_total{zone,policy,outcome}  one per `ratel` line decided
 *                                               (allowed, denied,
 *                                               shadow_denied, error)
 *   ratel_store_keys{zone}                      keys the zone holds
 *   ratel_store_bytes{zone}                     its memory in use
 *   ratel_store_max_bytes{zone}                 its SIZE
 *   ratel_store_evictions_total{zone}           live keys dropped for room
 *   ratel_store_expirations_total{zone}         idle keys removed
 *   ratel_store_errors_total{zone}              a Redis zone's lines Redis
 *                                               did not decide
 *   ratel_store_fallbacks_total{zone,policy}    ... by the failure policy
 *                                               that did (open, closed,
 *                                               local)
 *   ratel_store_cache_hits_total{zone}          denials the zone's deny
 *                                               cache answered
 *   ratel_lease_calls_total{zone,policy}        a leased policy's slices
 *                                               asked of Redis
 *   ratel_lease_permits_total{zone,policy,what} its permits: leased,
 *                                               spent, returned, stranded
 */
#include "ngx_http_ratel.h"

/* Longest line: a metric, two names and a number. */
#define METRIC_LINE_MAX (128 + 2 * NGX_HTTP_RATEL_NAME_MAX)

typedef struct {
    u_char *p, *end;
    ngx_str_t *zone;
} text_t;

static void decisions(void *data, const u_char *policy,
                      const uint64_t *outcomes)
{
    text_t *t = data;

    for (int o = 0; o < NGX_HTTP_RATEL_NOUTCOMES; o++)
        t->p = ngx_slprintf(t->p, t->end,
                            "ratel_decisions_total{zone=\"%V\",policy=\"%s\","
                            "outcome=\"%s\"} %uL\n",
                            t->zone, policy, ngx_http_ratel_metric_outcomes[o],
                            outcomes[o]);
}

/* One line per zone each; an entry without help goes on the metric of
   the entry before (another label). */
static const struct {
    const char *name, *type, *help, *label;
    size_t offset;
} store_metrics[] = {
    {"ratel_store_keys", "gauge", "Keys the zone holds.", "",
     offsetof(ngx_http_ratel_shm_stats_t, keys)},
    {"ratel_store_bytes", "gauge", "Memory of the zone in use.", "",
     offsetof(ngx_http_ratel_shm_stats_t, bytes)},
    {"ratel_store_max_bytes", "gauge", "The zone's size.", "",
     offsetof(ngx_http_ratel_shm_stats_t, max_bytes)},
    {"ratel_store_evictions_total", "counter",
     "Live keys dropped to stay within the zone's size.", "",
     offsetof(ngx_http_ratel_shm_stats_t, evictions)},
    {"ratel_store_expirations_total", "counter",
     "Idle keys removed at their reset time.", "",
     offsetof(ngx_http_ratel_shm_stats_t, expirations)},
    {"ratel_store_errors_total", "counter",
     "Requests Redis did not decide; the failure policy did.", "",
     offsetof(ngx_http_ratel_shm_stats_t, errors)},
    {"ratel_store_fallbacks_total", "counter",
     "Requests Redis did not decide, by the failure policy that did "
     "(open, closed, local).",
     ",policy=\"open\"", offsetof(ngx_http_ratel_shm_stats_t, fallback_open)},
    {"ratel_store_fallbacks_total", "counter", NULL, ",policy=\"closed\"",
     offsetof(ngx_http_ratel_shm_stats_t, fallback_closed)},
    {"ratel_store_fallbacks_total", "counter", NULL, ",policy=\"local\"",
     offsetof(ngx_http_ratel_shm_stats_t, fallback_local)},
    {"ratel_store_cache_hits_total", "counter",
     "Denials answered by the zone's deny cache.", "",
     offsetof(ngx_http_ratel_shm_stats_t, cache_hits)},
};

/* The permits of a leased policy, by what became of them (rateld's). */
static const struct {
    const char *what;
    size_t offset;
} lease_permits[] = {{"leased", offsetof(ratel_lease_t, leased)},
                     {"spent", offsetof(ratel_lease_t, spent)},
                     {"returned", offsetof(ratel_lease_t, returned)},
                     {"stranded", offsetof(ratel_lease_t, stranded)}};

static void lease_calls(void *data, const u_char *policy,
                        const ratel_lease_t *lease)
{
    text_t *t = data;

    t->p = ngx_slprintf(t->p, t->end,
                        "ratel_lease_calls_total{zone=\"%V\",policy=\"%s\"} "
                        "%uL\n",
                        t->zone, policy,
                        __atomic_load_n(&lease->calls, __ATOMIC_RELAXED));
}

static void lease_permits_of(void *data, const u_char *policy,
                             const ratel_lease_t *lease)
{
    text_t *t = data;

    for (size_t k = 0; k < sizeof lease_permits / sizeof lease_permits[0];
         k++) {
        const uint64_t *c =
            (const uint64_t *)((const u_char *)lease + lease_permits[k].offset);
        t->p = ngx_slprintf(t->p, t->end,
                            "ratel_lease_permits_total{zone=\"%V\",policy="
                            "\"%s\",what=\"%s\"} %uL\n",
                            t->zone, policy, lease_permits[k].what,
                            __atomic_load_n(c, __ATOMIC_RELAXED));
    }
}

static void lease_count(void *data, const u_char *policy,
                        const ratel_lease_t *lease)
{
    (void)policy;
    (void)lease;
    (*(ngx_uint_t *)data)++;
}

/* The leased policies' series (none until a policy is leased, as
   rateld's). */
static void render_leases(ngx_http_ratel_main_conf_t *m, text_t *t)
{
    static const struct {
        const char *help;
        ngx_http_ratel_lease_fn fn;
    } series[] = {
        {"# HELP ratel_lease_calls_total Slices a leased policy's keys asked "
         "Redis for.\n# TYPE ratel_lease_calls_total counter\n",
         lease_calls},
        {"# HELP ratel_lease_permits_total A leased policy's permits: leased "
         "(granted by Redis), spent (admitted here), returned, stranded "
         "(ended unspent).\n# TYPE ratel_lease_permits_total counter\n",
         lease_permits_of},
    };
    ngx_http_ratel_zone_t **z = m->zones.elts;
    ngx_uint_t leased = 0;

    for (ngx_uint_t i = 0; i < m->zones.nelts; i++)
        ngx_http_ratel_shm_read_leases(z[i], lease_count, &leased);
    for (size_t k = 0; leased && k < sizeof series / sizeof series[0]; k++) {
        t->p = ngx_slprintf(t->p, t->end, "%s", series[k].help);
        for (ngx_uint_t i = 0; i < m->zones.nelts; i++) {
            t->zone = &z[i]->name;
            ngx_http_ratel_shm_read_leases(z[i], series[k].fn, t);
        }
    }
}

static u_char *render(ngx_http_ratel_main_conf_t *m, u_char *p, u_char *end,
                      ngx_http_ratel_shm_stats_t *stats)
{
    ngx_http_ratel_zone_t **z = m->zones.elts;
    text_t t = {p, end, NULL};

    t.p = ngx_slprintf(t.p, end,
                       "# HELP ratel_decisions_total Decisions by zone, "
                       "policy and outcome.\n"
                       "# TYPE ratel_decisions_total counter\n");
    for (ngx_uint_t i = 0; i < m->zones.nelts; i++) {
        t.zone = &z[i]->name;
        ngx_http_ratel_shm_read(z[i], &stats[i], decisions, &t);
    }
    for (size_t k = 0; k < sizeof store_metrics / sizeof store_metrics[0];
         k++) {
        if (store_metrics[k].help)
            t.p = ngx_slprintf(t.p, end, "# HELP %s %s\n# TYPE %s %s\n",
                               store_metrics[k].name, store_metrics[k].help,
                               store_metrics[k].name, store_metrics[k].type);
        for (ngx_uint_t i = 0; i < m->zones.nelts; i++) {
            uint64_t v =
                *(uint64_t *)((u_char *)&stats[i] + store_metrics[k].offset);
            t.p = ngx_slprintf(t.p, end, "%s{zone=\"%V\"%s} %uL\n",
                               store_metrics[k].name, &z[i]->name,
                               store_metrics[k].label, v);
        }
    }
    render_leases(m, &t);
    return t.p;
}

ngx_int_t ngx_http_ratel_metrics_handler(ngx_http_request_t *r)
{
    ngx_http_ratel_main_conf_t *m =
        ngx_http_get_module_main_conf(r, ngx_http_ratel_module);
    ngx_http_ratel_shm_stats_t *stats;
    ngx_buf_t *b;
    ngx_chain_t out;
    ngx_int_t rc;
    size_t size;

    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD)))
        return NGX_HTTP_NOT_ALLOWED;
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK)
        return rc;
    size = 4096 + m->zones.nelts *
                      (METRIC_LINE_MAX * (NGX_HTTP_RATEL_COUNTERS_MAX *
                                              (NGX_HTTP_RATEL_NOUTCOMES + 5) +
                                          16));
    stats = ngx_pcalloc(r->pool, (m->zones.nelts + 1) * sizeof *stats);
    b = ngx_create_temp_buf(r->pool, size);
    if (stats == NULL || b == NULL)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b->last = render(m, b->pos, b->end, stats);
    b->last_buf = r == r->main;
    b->last_in_chain = 1;
    ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only)
        return rc;
    out.buf = b;
    out.next = NULL;
    return ngx_http_output_filter(r, &out);
}
