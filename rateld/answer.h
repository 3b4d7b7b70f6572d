/*
 * answer.h - rateld's HTTP answers (answer.c): errors as JSON, and the
 * decisions of the decision API and of the gateways' auth requests.
 */
#ifndef RATELD_ANSWER_H
#define RATELD_ANSWER_H

#include "rateld/rateld.h"

#include <stddef.h>

/* Answers `status` with the `n` headers and the body, counted in the
   metrics. */
void rateld_respond(rateld_t *d, ratel_http_exchange_t *ex, unsigned thread,
                    int status, const ratel_http_header_t *headers, size_t n,
                    const char *body, size_t len);

/*
 * {"error": MSG, "reason": REASON} (reason left out when NULL) with
 * `status` and the `n` headers, built by cJSON: MSG may quote request
 * bytes, which become '?' where they are not UTF-8 (in place), so the
 * body is always valid JSON.
 */
void rateld_respond_json_error(rateld_t *d, ratel_http_exchange_t *ex,
                               unsigned thread, int status,
                               const ratel_http_header_t *headers, size_t n,
                               const char *reason, char *msg);

/* {"error": "..."} with `status`. */
void __attribute__((format(printf, 5, 6)))
rateld_respond_error(rateld_t *d, ratel_http_exchange_t *ex, unsigned thread,
                     int status, const char *fmt, ...);

/* {"error": "..."} with `status` and the header `extra`. */
void __attribute__((format(printf, 6, 7)))
rateld_respond_error_with(rateld_t *d, ratel_http_exchange_t *ex,
                          unsigned thread, int status,
                          ratel_http_header_t extra, const char *fmt, ...);

/* Headers of a decision: Content-Type, RateLimit-Policy, RateLimit and,
   denied, Retry-After (h[0] is the Content-Type). */
typedef struct rateld_answer_s {
    ratel_http_header_t h[6];
    size_t n;
    char limit[256], retry[24];
} rateld_answer_t;

void rateld_decision_headers(rateld_answer_t *a, const rateld_pending_t *p,
                             const ratel_decision_t *dec, int denied);

/* The decision as JSON into body (at most len bytes, cut to fit); `extra`
   ends the object (",\"held\":true"). Returns its length. */
size_t rateld_decision_body(char *body, size_t len, const rateld_policy_t *pol,
                            const ratel_decision_t *dec, int shadow_denied,
                            const char *extra);

/* The answers of a decided batch (rateld_answer_fn): the decision API's
   item f->pending[first], and an auth request's items from `first`. */
void rateld_answer_acquire(rateld_t *d, rateld_flight_t *f, unsigned thread,
                           const rateld_gen_t *gen, size_t first, int64_t now);
void rateld_answer_auth(rateld_t *d, rateld_flight_t *f, unsigned thread,
                        const rateld_gen_t *gen, size_t first, int64_t now);

/* /v1/report's answer once decided, and its answer when none of the
   route's policies charges the status. */
void rateld_answer_report(rateld_t *d, rateld_flight_t *f, unsigned thread,
                          const rateld_gen_t *gen, size_t first, int64_t now);
void rateld_answer_report_none(rateld_t *d, ratel_http_exchange_t *ex,
                               unsigned thread);

/* The decision API's and the gateways' rateld_abandon_fn: the client of
   head->ex has gone (ratel_http_exchange_abandoned). */
int rateld_abandon_http(rateld_t *d, rateld_worker_t *w, unsigned thread,
                        rateld_pending_t *head);

#endif /* RATELD_ANSWER_H */
