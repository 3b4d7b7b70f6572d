/*
 * captcha_metrics.c - captchad's /metrics: Prometheus text of its
 * counters, the sender's queue, the code store and the ratel store.
 * Every figure is read from memory: nothing here waits for Redis.
 */
#include "captchad/captcha.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text_s {
    char *p;
    size_t n, cap;
} text_t;

static void __attribute__((format(printf, 2, 3)))
put(text_t *t, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (!t->p)
        return;
    for (;;) {
        va_start(ap, fmt);
        w = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (w >= 0 && (size_t)w < t->cap - t->n) {
            t->n += (size_t)w;
            return;
        }
        char *bigger = w < 0 ? NULL : realloc(t->p, t->cap * 2 + (size_t)w);
        if (!bigger) {
            free(t->p);
            t->p = NULL;
            return;
        }
        t->p = bigger;
        t->cap = t->cap * 2 + (size_t)w;
    }
}

static void counter(text_t *t, const char *name, const char *help,
                    const char *label, const char *const *values,
                    _Atomic uint64_t *counts, size_t n)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++)
        put(t, "%s{%s=\"%s\"} %llu\n", name, label, values[i],
            (unsigned long long)atomic_load(&counts[i]));
}

/* One value; a name ending in _total is a counter, others gauges. */
static void gauge(text_t *t, const char *name, const char *help,
                  unsigned long long v)
{
    size_t n = strlen(name);
    int total = n > 6 && !strcmp(name + n - 6, "_total");

    put(t, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name,
        total ? "counter" : "gauge", name, v);
}

void captcha_metrics(captcha_t *app, ratel_http_exchange_t *ex)
{
    static const char *const sends[] = {"accepted", "limited", "invalid",
                                        "queue_full", "error"};
    static const char *const verifies[] = {"success", "invalid", "limited",
                                           "bad_request", "error"};
    static const char *const results[] = {"success", "failure"};
    static const char *const recovered[] = {"resent", "failed"};
    static const char *const phones[] = {"unparsable", "invalid", "premium"};
    static const ratel_http_header_t text[] = {
        {{"Content-Type", 12}, {"text/plain; version=0.0.4", 25}}};
    const char *limits[RATEL_HTTP_REFUSALS];
    text_t t = {malloc(4096), 0, 4096};
    ratel_store_stats_t st;
    captcha_codes_stats_t cs;

    ratel_store_stats(app->store, &st);
    captcha_codes_stats(app->codes, &cs);
    counter(&t, "captcha_sends_total", "Send requests by outcome.", "outcome",
            sends, app->sends, SEND_OUTCOMES);
    counter(&t, "captcha_verifies_total", "Verify requests by outcome.",
            "outcome", verifies, app->verifies, VERIFY_OUTCOMES);
    counter(&t, "captcha_sender_results_total",
            "Messages the sender delivered or failed to.", "result", results,
            app->sender_results, SENDER_RESULTS);
    counter(&t, "captcha_phone_refused_total",
            "Sends and verifies refused for their telephone number: not a "
            "number, not a valid one (libphonenumber), or premium-rate or "
            "shared-cost.",
            "reason", phones, app->phone_refused, PHONE_REFUSALS);
    counter(&t, "captcha_recovered_notices_total",
            "Notices a crash left unsent, re-sent or failed at start-up.",
            "action", recovered, app->recovered, RECOVER_ACTIONS);
    for (int l = 0; l < RATEL_HTTP_REFUSALS; l++)
        limits[l] = ratel_http_refusal_name((ratel_http_refusal_t)l);
    counter(&t, "captcha_connections_refused_total",
            "Connections refused with 503 as they were accepted, by the "
            "limit that refused them.",
            "limit", limits, app->refused, RATEL_HTTP_REFUSALS);
    gauge(&t, "captcha_refunds_total", "Send permits given back.",
          atomic_load(&app->refunds));
    gauge(&t, "captcha_refund_errors_total", "Refunds the store did not take.",
          atomic_load(&app->refund_errors));
    gauge(&t, "captcha_login_failures_total", "Failed logins counted.",
          atomic_load(&app->login_failures));
    gauge(&t, "captcha_queue_depth", "Messages waiting for the sender.",
          captcha_sender_depth(app->sender));
    gauge(&t, "captcha_queue_capacity", "The send queue's size.",
          app->config->queue_size);
    gauge(&t, "captcha_code_store_entries", "Codes held (memory store).",
          cs.entries);
    gauge(&t, "captcha_code_store_max_entries", "The code store's bound.",
          cs.max_entries);
    gauge(&t, "captcha_code_store_expirations_total", "Codes expired.",
          cs.expirations);
    gauge(&t, "captcha_code_store_evictions_total",
          "Live codes dropped to stay within the bound.", cs.evictions);
    gauge(&t, "captcha_code_store_errors_total", "Code store Redis failures.",
          cs.errors);
    gauge(&t, "captcha_store_keys", "Rate-limit keys held.", st.keys);
    gauge(&t, "captcha_store_bytes", "Rate-limit store memory.", st.bytes);
    gauge(&t, "captcha_store_max_bytes", "Its bound.", st.max_bytes);
    gauge(&t, "captcha_store_evictions_total", "Rate-limit keys evicted.",
          st.evictions);
    gauge(&t, "captcha_store_errors_total",
          "Requests Redis did not decide (the failure policy did).", st.errors);
    if (!t.p) {
        /* A constant (valid JSON) needs no memory to send. */
        static const ratel_http_header_t json[] = {RATEL_HTTP_JSON_HEADER};
        static const char oom[] = "{\"error\":\"out of memory\"}\n";
        ratel_http_respond(ex, 500, json, 1, oom, sizeof oom - 1);
        return;
    }
    ratel_http_respond(ex, 200, text, 1, t.p, t.n);
    free(t.p);
}
