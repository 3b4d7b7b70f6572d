/*
 * ratelimit.h - the RateLimit-Policy and RateLimit response fields of the
 * IETF httpapi draft (draft-ietf-httpapi-ratelimit-headers), and
 * Retry-After, for every program that answers 429 (rateld, captchad).
 *
 *   RateLimit-Policy: "sms-0";q=1;w=60, "sms-1";q=10;w=86400
 *   RateLimit: "sms-0";r=0;t=59
 *
 * Each rule of a policy is one quota policy item named NAME-INDEX (the
 * draft's structured-field list syntax: a string item with parameters q
 * (quota), w (window seconds)); RateLimit names the binding rule, the one
 * closest to exhaustion, and gives ITS r (remaining) and t (seconds until
 * that rule's quota resets, rounded up).
 */
#ifndef RATEL_APP_RATELIMIT_H
#define RATEL_APP_RATELIMIT_H

#include "ratel.h"

#include <stddef.h>

/*
 * RateLimit-Policy value for policy `name` with rules `p` into buf;
 * returns its length (snprintf semantics: the length it needs, the text
 * cut to fit; buf may be NULL when len is 0).
 */
size_t ratel__header_policy(const char *name, const ratel_policy_t *p,
                            char *buf, size_t len);

/* RateLimit value for the decision `d` of policy `name` (rules `p`). */
size_t ratel__header_ratelimit(const char *name, const ratel_policy_t *p,
                               const ratel_decision_t *d, char *buf,
                               size_t len);

/*
 * The two halves of ratel__header_ratelimit(), for a program that writes
 * the first once per rule: the item's name, "NAME-RULE" as an sf-string
 * (a rule out of range names the first), then the decision's parameters,
 * ";r=R;t=T", at most RATEL__HEADER_PARAMS_MAX bytes. Both as snprintf.
 */
#define RATEL__HEADER_PARAMS_MAX (3 + 15 + 3 + 15)
size_t ratel__header_ratelimit_name(const char *name, const ratel_policy_t *p,
                                    int rule, char *buf, size_t len);
size_t ratel__header_ratelimit_params(const ratel_decision_t *d, char *buf,
                                      size_t len);

/* Retry-After: whole seconds, rounded up, at least 1. */
long long ratel__retry_after_seconds(const ratel_decision_t *d);

#endif /* RATEL_APP_RATELIMIT_H */
