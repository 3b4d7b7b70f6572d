/*
 * headers.h - the RateLimit-Policy and RateLimit response fields of the
 * IETF httpapi draft (draft-ietf-httpapi-ratelimit-headers), and
 * Retry-After.
 *
 *   RateLimit-Policy: "sms-0";q=1;w=60, "sms-1";q=10;w=86400
 *   RateLimit: "sms-0";r=0;t=59
 *
 * Each rule of a policy is one quota policy item named POLICY-INDEX (the
 * draft's structured-field list syntax: a string item with parameters q
 * (quota), w (window seconds)); RateLimit names the binding rule and gives
 * r (remaining) and t (seconds until the quota resets, rounded up).
 */
#ifndef RATELD_HEADERS_H
#define RATELD_HEADERS_H

#include "daemon/config.h"
#include "ratel.h"

#include <stddef.h>

/* RateLimit-Policy value for `p` into buf; returns its length (snprintf
   semantics: the length it needs, the text cut to fit). */
size_t rateld_header_policy(const rateld_policy_t *p, char *buf, size_t len);

/* RateLimit value for the decision `d` of `p`. */
size_t rateld_header_ratelimit(const rateld_policy_t *p,
                               const ratel_decision_t *d, char *buf,
                               size_t len);

/* Retry-After: whole seconds, rounded up, at least 1. */
long long rateld_retry_after_seconds(const ratel_decision_t *d);

#endif /* RATELD_HEADERS_H */
