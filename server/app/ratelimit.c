/*
 * ratelimit.c - RateLimit-Policy, RateLimit and Retry-After.
 *
 * Syntax of draft-ietf-httpapi-ratelimit-headers-11 (2026; the field
 * syntax is unchanged since -08), sections 3 and 4. Both fields are
 * Structured Field Lists (RFC 9651) of Items whose bare item is a String,
 * serialised with ", " between members:
 *
 *   RateLimit-Policy: "api-0";q=10;w=1, "api-1";q=1000;w=3600
 *   RateLimit: "api-1";r=0;t=42
 *
 * One quota policy item per rule of a policy, named "POLICY-INDEX" (INDEX
 * the rule's position in the policy, as ratel_decision_t.rule):
 *
 *   q  the rule's limit: the quota per window. A gcra rule "100/1s:gcra,
 *      burst=200" admits 100 per second sustained and bursts of up to 200;
 *      q=100;w=1 states the sustained rate, and the bucket depth goes in
 *      the vendor parameter ratel-burst=200 (section 3.1 allows "acme-"
 *      prefixed parameters), written only when it differs from the limit.
 *   w  the rule's period in seconds, rounded up, at least 1 (the draft
 *      has no sub-second windows).
 *   qu is left out: the default unit, "requests", is what rateld counts
 *      (a request's cost is a number of requests).
 *   pk is left out: rateld's keys hold client addresses and header values
 *      (API keys), which section 6.1 asks servers not to disclose.
 *
 * RateLimit names the decision's binding rule (d->rule): denied, the rule
 * whose retry is furthest; allowed, the rule closest to exhaustion (least
 * remaining), so that a client reading one item learns the limit it will
 * meet first. Its parameters are that rule's own:
 *
 *   r  the permits still available (d->remaining, the least over the
 *      rules: the binding rule's, at least 0);
 *   t  whole seconds, rounded up. -11 defines t as the effective window:
 *      the time within which the client can use no more than r. Denied,
 *      r is 0 and that time is d->retry_after_ms, when a retry succeeds;
 *      it equals Retry-After, which section 6 requires not to end before
 *      the effective window. Allowed, it is d->rule_reset_ms, when the
 *      binding rule is back to full: for "1/60s, 10/1d" just after the
 *      day's first send, "sms-0";r=0;t=60, not the day's reset. (A
 *      client keeping to r within t is never throttled by that rule.)
 */
#include "app/ratelimit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Structured-field Integers have at most 15 digits. */
#define SF_INTEGER_MAX 999999999999999LL

/*
 * The text goes into buf at *n, cut to fit, while *n counts the length it
 * needs (snprintf's contract); terminate() ends it with a NUL. The
 * decision path (RateLimit, per answer) appends bytes and digits without
 * printf.
 */
typedef struct field_s {
    char *buf;
    size_t len, n;
} field_t;

static void add(field_t *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(field_t *f, const char *fmt, ...)
{
    va_list ap;
    int m;
    char *at = f->n < f->len ? f->buf + f->n : NULL;
    size_t room = f->n < f->len ? f->len - f->n : 0;

    va_start(ap, fmt);
    m = vsnprintf(at, room, fmt, ap);
    va_end(ap);
    if (m > 0)
        f->n += (size_t)m;
}

static void add_bytes(field_t *f, const char *p, size_t n)
{
    if (f->n < f->len) {
        size_t room = f->len - f->n;
        memcpy(f->buf + f->n, p, n < room ? n : room);
    }
    f->n += n;
}

static void add_char(field_t *f, char c)
{
    if (f->n < f->len)
        f->buf[f->n] = c;
    f->n++;
}

/* A non-negative integer in decimal, two digits at a time. */
static void add_integer(field_t *f, long long v)
{
    static const char pairs[] = "00010203040506070809"
                                "10111213141516171819"
                                "20212223242526272829"
                                "30313233343536373839"
                                "40414243444546474849"
                                "50515253545556575859"
                                "60616263646566676869"
                                "70717273747576777879"
                                "80818283848586878889"
                                "90919293949596979899";
    char digits[24];
    size_t n = sizeof digits;
    unsigned long long u = v < 0 ? 0 : (unsigned long long)v;

    while (u >= 100) {
        unsigned i = (unsigned)(u % 100) * 2;
        u /= 100;
        digits[--n] = pairs[i + 1];
        digits[--n] = pairs[i];
    }
    if (u >= 10) {
        digits[--n] = pairs[u * 2 + 1];
        digits[--n] = pairs[u * 2];
    } else {
        digits[--n] = (char)('0' + u);
    }
    add_bytes(f, digits + n, sizeof digits - n);
}

/*
 * The item "NAME-INDEX" as an sf-string: '"' and '\\' escaped; bytes an
 * sf-string cannot hold (controls, non-ASCII) are left out. Policy names
 * are [A-Za-z0-9_.-] (config.h), so neither happens with a loaded config.
 */
static void add_item_name(field_t *f, const char *name, int index)
{
    add_char(f, '"');
    for (const char *c = name; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u < 0x20 || u > 0x7e)
            continue;
        if (u == '"' || u == '\\')
            add_char(f, '\\');
        add_char(f, (char)u);
    }
    add_char(f, '-');
    add_integer(f, index);
    add_char(f, '"');
}

static long long clamp_integer(int64_t v)
{
    if (v < 0)
        return 0;
    return v > SF_INTEGER_MAX ? SF_INTEGER_MAX : (long long)v;
}

/* Milliseconds to whole seconds, rounded up; negative counts as 0. */
static long long ceil_seconds(int64_t ms)
{
    if (ms <= 0)
        return 0;
    return clamp_integer(ms / 1000 + (ms % 1000 != 0));
}

static void terminate(field_t *f)
{
    if (f->len > 0 && f->n < f->len)
        f->buf[f->n] = '\0';
    else if (f->len > 0)
        f->buf[f->len - 1] = '\0';
}

size_t ratel__header_policy(const char *name, const ratel_policy_t *p,
                            char *buf, size_t len)
{
    field_t f = {buf, len, 0};

    for (uint32_t i = 0; i < p->nrules; i++) {
        const ratel_rule_t *r = &p->rules[i];
        long long w = ceil_seconds(r->period_ms);
        if (i > 0)
            add(&f, ", ");
        add_item_name(&f, name, (int)i);
        add(&f, ";q=%lu;w=%lld", (unsigned long)r->limit, w < 1 ? 1 : w);
        if ((ratel_algo_facts(r->algo) & RATEL_ALGO_BURST) && r->burst != 0 &&
            r->burst != r->limit)
            add(&f, ";ratel-burst=%lu", (unsigned long)r->burst);
    }
    terminate(&f);
    return f.n;
}

size_t ratel__header_ratelimit_name(const char *name, const ratel_policy_t *p,
                                    int rule, char *buf, size_t len)
{
    field_t f = {buf, len, 0};

    add_item_name(&f, name, rule < 0 || (uint32_t)rule >= p->nrules ? 0 : rule);
    terminate(&f);
    return f.n;
}

size_t ratel__header_ratelimit_params(const ratel_decision_t *d, char *buf,
                                      size_t len)
{
    field_t f = {buf, len, 0};
    long long t = d->allowed ? ceil_seconds(d->rule_reset_ms)
                             : ceil_seconds(d->retry_after_ms);

    add_bytes(&f, ";r=", 3);
    add_integer(&f, clamp_integer(d->remaining));
    add_bytes(&f, ";t=", 3);
    add_integer(&f, t);
    terminate(&f);
    return f.n;
}

size_t ratel__header_ratelimit(const char *name, const ratel_policy_t *p,
                               const ratel_decision_t *d, char *buf, size_t len)
{
    size_t n = ratel__header_ratelimit_name(name, p, d->rule, buf, len);

    return n + ratel__header_ratelimit_params(d, n < len ? buf + n : NULL,
                                              n < len ? len - n : 0);
}

long long ratel__retry_after_seconds(const ratel_decision_t *d)
{
    long long s = ceil_seconds(d->retry_after_ms);
    return s < 1 ? 1 : s;
}
