/*
 * answer.c - rateld's HTTP answers: errors as JSON, and decisions (the
 * decision API's and the gateways') with the RateLimit fields, once the
 * worker's batch is decided (batch.c calls rateld_answer_acquire and
 * rateld_answer_auth through its table of answers).
 */
#include "rateld/answer.h"

#include "app/json.h"
#include "app/ratelimit.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rateld_respond(rateld_t *d, ratel_http_exchange_t *ex, unsigned thread,
                    int status, const ratel_http_header_t *headers, size_t n,
                    const char *body, size_t len)
{
    rateld_metrics_http(d->metrics, thread, status);
    ratel_http_respond(ex, status, headers, n, body, len);
}

/*
 * {"error": "...", "reason": REASON} (reason left out when NULL) with
 * `status` and the `n` headers, built by cJSON: the message may quote
 * request bytes, which become '?' where they are not UTF-8, so the body
 * is always valid JSON.
 */
void rateld_respond_json_error(rateld_t *d, ratel_http_exchange_t *ex,
                               unsigned thread, int status,
                               const ratel_http_header_t *headers, size_t n,
                               const char *reason, char *msg)
{
    static const char oom[] = "{\"error\":\"out of memory\"}\n";
    cJSON *o = cJSON_CreateObject();
    char *body = NULL;
    size_t len = 0;

    ratel__json_sanitize_utf8(msg);
    if (o && cJSON_AddStringToObject(o, "error", msg) &&
        (!reason || cJSON_AddStringToObject(o, "reason", reason)))
        body = ratel__json_print(o, &len);
    cJSON_Delete(o);
    if (body)
        rateld_respond(d, ex, thread, status, headers, n, body, len);
    else
        rateld_respond(d, ex, thread, 500, headers, 1, oom, sizeof oom - 1);
    free(body);
}

/* {"error": "..."} with `status` and, unless NULL, one more header. */
static void respond_error_v(rateld_t *d, ratel_http_exchange_t *ex,
                            unsigned thread, int status,
                            const ratel_http_header_t *extra, const char *fmt,
                            va_list ap)
{
    ratel_http_header_t h[2] = {RATEL_HTTP_JSON_HEADER};
    char msg[600];

    vsnprintf(msg, sizeof msg, fmt, ap);
    if (extra)
        h[1] = *extra;
    rateld_respond_json_error(d, ex, thread, status, h, extra ? 2 : 1, NULL,
                              msg);
}

/* {"error": "..."} with `status`. */
void rateld_respond_error(rateld_t *d, ratel_http_exchange_t *ex,
                          unsigned thread, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    respond_error_v(d, ex, thread, status, NULL, fmt, ap);
    va_end(ap);
}

/* {"error": "..."} with `status` and the header `extra`. */
void rateld_respond_error_with(rateld_t *d, ratel_http_exchange_t *ex,
                               unsigned thread, int status,
                               ratel_http_header_t extra, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    respond_error_v(d, ex, thread, status, &extra, fmt, ap);
    va_end(ap);
}

/* ----------------------------------------------------------- decisions */

void rateld_decision_headers(rateld_answer_t *a, const rateld_pending_t *p,
                             const ratel_decision_t *dec, int denied)
{
    const char *pf = p->field;
    size_t n = ratel__header_ratelimit(p->policy->name, p->rules, dec, a->limit,
                                       sizeof a->limit);
    a->n = 0;
    a->h[a->n++] =
        (ratel_http_header_t){{"Content-Type", 12}, {"application/json", 16}};
    a->h[a->n++] =
        (ratel_http_header_t){{"RateLimit-Policy", 16}, {pf, strlen(pf)}};
    a->h[a->n++] = (ratel_http_header_t){
        {"RateLimit", 9},
        {a->limit, n < sizeof a->limit ? n : sizeof a->limit - 1}};
    if (denied) {
        int m = snprintf(a->retry, sizeof a->retry, "%lld",
                         ratel__retry_after_seconds(dec));
        a->h[a->n++] =
            (ratel_http_header_t){{"Retry-After", 11}, {a->retry, (size_t)m}};
    }
}

/* The decision as JSON; `extra` ends the object (",\"held\":true"). */
size_t rateld_decision_body(char *body, size_t len, const rateld_policy_t *pol,
                            const ratel_decision_t *dec, int shadow_denied,
                            const char *extra)
{
    char lease[24] = "";
    int n;

    if (dec->lease)
        snprintf(lease, sizeof lease, ",\"lease\":%u", (unsigned)dec->lease);
    n = snprintf(
        body, len,
        "{\"allowed\":%s,\"policy\":\"%s\",\"limit\":%lld,\"remaining\":%lld,"
        "\"retry_after_ms\":%lld,\"reset_after_ms\":%lld,\"rule\":%d,"
        "\"wait_ms\":%lld,\"source\":\"%s\"%s%s%s}\n",
        dec->allowed || shadow_denied ? "true" : "false", pol->name,
        (long long)dec->limit, (long long)dec->remaining,
        (long long)dec->retry_after_ms, (long long)dec->reset_after_ms,
        dec->rule, (long long)dec->wait_ms, ratel_source_name(dec->source),
        lease, shadow_denied ? ",\"shadow_denied\":true" : "", extra);
    return (size_t)(n < (int)len ? n : (int)len - 1);
}

void rateld_answer_acquire(rateld_t *d, rateld_flight_t *f, unsigned thread,
                           const rateld_gen_t *gen, size_t first, int64_t now)
{
    rateld_pending_t *p = &f->pending[first];
    ratel_batch_item_t *it = &f->items[first];
    const ratel_decision_t *dec = &it->decision;
    unsigned long long not_logged;
    int shadow_denied = !dec->allowed && p->policy->shadow;
    int denied = !dec->allowed && !p->policy->shadow;
    char body[512];
    rateld_answer_t a;

    if (it->rc != 0) {
        rateld_metrics_count(d->metrics, thread, gen->metric[p->policy_index],
                             RATELD_OUTCOME_ERROR, RATEL_SOURCE_STORE,
                             now - p->start_us);
        rateld_respond_error(d, p->ex, thread, 500, "the store failed: %s",
                             ratel_strerror(it->rc));
        return;
    }
    rateld_metrics_count(d->metrics, thread, gen->metric[p->policy_index],
                         denied          ? RATELD_OUTCOME_DENIED
                         : shadow_denied ? RATELD_OUTCOME_SHADOW_DENIED
                                         : RATELD_OUTCOME_ALLOWED,
                         dec->source, now - p->start_us);
    if (shadow_denied &&
        rateld_log_budget_take(f->w, RATELD_LOG_SHADOW_DENY, now, &not_logged))
        ratel__log("info", "shadow deny",
                   "policy=%s retry_after_ms=%lld not_logged=%llu",
                   p->policy->name, (long long)dec->retry_after_ms, not_logged);
    rateld_decision_headers(&a, p, dec, denied);
    rateld_respond(d, p->ex, thread, denied ? 429 : 200, a.h, a.n, body,
                   rateld_decision_body(body, sizeof body, p->policy, dec,
                                        shadow_denied, ""));
}

int rateld_abandon_http(rateld_t *d, rateld_worker_t *w, unsigned thread,
                        rateld_pending_t *head)
{
    static const ratel_http_header_t h[] = {RATEL_HTTP_JSON_HEADER};
    static const char body[] = "{\"error\":\"not decided: the client closed "
                               "its connection first; nothing was "
                               "charged\"}\n";

    (void)d;
    (void)w;
    (void)thread;
    if (!ratel_http_exchange_abandoned(head->ex))
        return 0;
    /* Dropped, or read by a client that only closed its sending side;
       either way the exchange is given back. Not counted as a response:
       ratel_abandoned_total counts it. */
    ratel_http_respond(head->ex, 503, h, 1, body, sizeof body - 1);
    return 1;
}

/* Counts one auth item's outcome; returns 1 when it denies. */
static int count_auth_item(rateld_t *d, unsigned thread,
                           const rateld_gen_t *gen, const rateld_pending_t *p,
                           const ratel_batch_item_t *it, int64_t latency)
{
    int shadow_denied =
        it->rc == 0 && !it->decision.allowed && p->policy->shadow;
    int no = it->rc == 0 && !it->decision.allowed && !p->policy->shadow;

    rateld_metrics_count(d->metrics, thread, gen->metric[p->policy_index],
                         it->rc != 0     ? RATELD_OUTCOME_ERROR
                         : no            ? RATELD_OUTCOME_DENIED
                         : shadow_denied ? RATELD_OUTCOME_SHADOW_DENIED
                                         : RATELD_OUTCOME_ALLOWED,
                         it->rc == 0 ? it->decision.source : RATEL_SOURCE_STORE,
                         latency);
    return no;
}

/*
 * RateLimit-Policy for a route: every rule of each of its policies, in
 * the route's order (the items are named POLICY-INDEX, so they never
 * clash): the one policy's own field, or the fields joined in buf (cut to
 * fit).
 */
static ratel_http_str_t route_policy_field(const rateld_pending_t *items,
                                           size_t count, char *buf, size_t len)
{
    size_t n = 0;

    if (count == 1) /* the usual route: its policy's field as it is */
        return (ratel_http_str_t){items[0].field, strlen(items[0].field)};

    buf[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        int m =
            snprintf(buf + n, len - n, "%s%s", i ? ", " : "", items[i].field);
        if (m < 0 || (size_t)m >= len - n)
            break;
        n += (size_t)m;
    }
    return (ratel_http_str_t){buf, n};
}

/*
 * X-Ratel-Charge-On: the statuses for which the gateway reports the
 * answer (/v1/report), every charge_on of the request's policies; empty
 * when none has one.
 */
static ratel_http_str_t charge_on(const rateld_pending_t *items, size_t count,
                                  char *buf, size_t len)
{
    ratel__status_set_t all = {{0}};
    int any = 0;

    for (size_t i = 0; i < count; i++)
        if (items[i].policy->charges_on) {
            ratel__status_join(&all, &items[i].policy->charge_on);
            any = 1;
        }
    /* The usual route has none: nothing to write, no list walked. */
    return (ratel_http_str_t){buf,
                              any ? ratel__status_format(&all, buf, len) : 0};
}

/*
 * An admitted auth request: 200 with the fields, X-Ratel-Charge-On (a
 * charge_on policy) and X-Ratel-Wait-Ms (a max_wait policy reserved: the
 * gateway holds the request that long); no body, the gateway reads only
 * the status and the fields.
 */
static void auth_allowed(rateld_t *d, rateld_flight_t *f, unsigned thread,
                         size_t first, rateld_answer_t *a)
{
    const rateld_pending_t *head = &f->pending[first];
    size_t count = (size_t)head->count;
    char on[RATEL__STATUS_LIST_MAX], wait[24];
    ratel_http_str_t v = charge_on(head, count, on, sizeof on);
    int64_t wait_ms = 0;

    if (v.n)
        a->h[a->n++] = (ratel_http_header_t){{"X-Ratel-Charge-On", 17}, v};
    for (size_t i = first; i < first + count; i++)
        if (f->items[i].decision.wait_ms > wait_ms)
            wait_ms = f->items[i].decision.wait_ms;
    if (wait_ms > 0)
        a->h[a->n++] = (ratel_http_header_t){
            {"X-Ratel-Wait-Ms", 15},
            {wait,
             (size_t)snprintf(wait, sizeof wait, "%lld", (long long)wait_ms)}};
    rateld_respond(d, head->ex, thread, 200, a->h + 1, a->n - 1, NULL, 0);
}

/*
 * auth: all of the route's policies admit, or none is charged (the store
 * decided them as one group, ratel_store_acquire_batch). Allowed:
 * 200 (with X-Ratel-Charge-On when a policy is charged only after the
 * answer, charge_on; X-Ratel-Wait-Ms when a policy with max_wait reserved:
 * the gateway holds the request that long). Denied: auth.deny_status (429, or
 * 403 for nginx) with Retry-After, X-Ratel-Reason: rate-limited and the
 * decision as JSON. The RateLimit field names the binding rule over all the
 * policies: denied, the one whose retry is furthest; allowed, the one closest
 * to exhaustion.
 */
void rateld_answer_auth(rateld_t *d, rateld_flight_t *f, unsigned thread,
                        const rateld_gen_t *gen, size_t first, int64_t now)
{
    static const ratel_http_header_t store_error[] = {
        RATEL_HTTP_JSON_HEADER, {{"X-Ratel-Reason", 14}, {"store-error", 11}}};
    rateld_pending_t *head = &f->pending[first];
    size_t count = (size_t)head->count, binding = first;
    int denied = 0, failed = 0, status;
    char policies[4096], body[512];
    rateld_answer_t a;

    for (size_t i = first; i < first + count; i++) {
        ratel_batch_item_t *it = &f->items[i];
        int no = count_auth_item(d, thread, gen, &f->pending[i], it,
                                 now - head->start_us);
        failed |= it->rc != 0;
        if (no && (!denied || it->decision.retry_after_ms >
                                  f->items[binding].decision.retry_after_ms))
            binding = i;
        if (!no && !denied && it->rc == 0 &&
            it->decision.remaining < f->items[binding].decision.remaining)
            binding = i;
        denied |= no;
    }
    if (failed) {
        static const char msg[] = "{\"error\":\"the store failed\"}\n";
        rateld_respond(d, head->ex, thread, 500, store_error, 2, msg,
                       sizeof msg - 1);
        return;
    }
    rateld_decision_headers(&a, &f->pending[binding],
                            &f->items[binding].decision, denied);
    a.h[1].value = route_policy_field(head, count, policies, sizeof policies);
    if (denied)
        a.h[a.n++] =
            (ratel_http_header_t){{"X-Ratel-Reason", 14}, {"rate-limited", 12}};
    if (!denied) {
        auth_allowed(d, f, thread, first, &a);
        return;
    }
    status = gen->config->auth.deny_status;
    if (status == 403) /* nginx: no body (handlers.c, nginx_mode) */
        rateld_respond(d, head->ex, thread, status, a.h + 1, a.n - 1, NULL, 0);
    else
        rateld_respond(
            d, head->ex, thread, status, a.h, a.n, body,
            rateld_decision_body(body, sizeof body, f->pending[binding].policy,
                                 &f->items[binding].decision, 0, ""));
}

/* {"charged":N,"limited":M}: the report's policies charged, and those
   already at their limit (nothing charged). */
static void report_body(rateld_t *d, ratel_http_exchange_t *ex, unsigned thread,
                        size_t charged, size_t limited)
{
    static const ratel_http_header_t json[] = {RATEL_HTTP_JSON_HEADER};
    char body[64];
    int n = snprintf(body, sizeof body, "{\"charged\":%zu,\"limited\":%zu}\n",
                     charged, limited);

    rateld_respond(d, ex, thread, 200, json, 1, body, (size_t)n);
}

void rateld_answer_report_none(rateld_t *d, ratel_http_exchange_t *ex,
                               unsigned thread)
{
    report_body(d, ex, thread, 0, 0);
}

/*
 * /v1/report: each policy is charged on its own (a failure counts in every
 * policy that lists its status, whether or not another is at its limit).
 * Counted as decisions of their policies: allowed when charged, denied
 * when the limit was reached already.
 */
void rateld_answer_report(rateld_t *d, rateld_flight_t *f, unsigned thread,
                          const rateld_gen_t *gen, size_t first, int64_t now)
{
    static const ratel_http_header_t store_error[] = {
        RATEL_HTTP_JSON_HEADER, {{"X-Ratel-Reason", 14}, {"store-error", 11}}};
    rateld_pending_t *head = &f->pending[first];
    size_t charged = 0, limited = 0, failed = 0, i = first;

    do {
        ratel_batch_item_t *it = &f->items[i];
        count_auth_item(d, thread, gen, &f->pending[i], it,
                        now - head->start_us);
        failed += it->rc != 0;
        charged += it->rc == 0 && it->decision.allowed;
        limited += it->rc == 0 && !it->decision.allowed;
    } while (++i < f->n && f->pending[i].kind == RATELD_KIND_PART);
    if (failed) {
        static const char msg[] = "{\"error\":\"the store failed\"}\n";
        rateld_respond(d, head->ex, thread, 500, store_error, 2, msg,
                       sizeof msg - 1);
        return;
    }
    report_body(d, head->ex, thread, charged, limited);
}
