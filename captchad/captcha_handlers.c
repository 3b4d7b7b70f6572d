/*
 * captcha_handlers.c - captchad's endpoints (captchad/README.md):
 *
 *   POST /captcha/send          {telephone}: limits, a code, a queued SMS
 *   POST /captcha/verify        {telephone, code}: 200 once, else 400
 *   POST /login/fail            {user}: counts a failed login
 *   GET  /login/needs-captcha   ?user=: whether a captcha is required
 *   GET  /notices               ?telephone= (admin token): notice rows
 *   GET  /metrics               Prometheus text
 *   GET  /healthz               the process answers
 *   GET  /readyz                the store decides (rateld's /readyz)
 *
 * A worker never waits for the ratel store: a request that needs it is a
 * flow (below) answered from the store's callback on the worker's loop,
 * so /healthz and /metrics answer at once while Redis hangs, and each
 * pending request gets the failure policy's answer at its own deadline.
 * A send's slow part (the gateway) runs on the sender thread.
 */
#include "captchad/captcha.h"

#include "app/json.h"
#include "app/keys.h"
#include "app/ratelimit.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

/* The one answer for every verify that fails on the code. */
#define INVALID_CODE "invalid or expired code"

static int str_is(ratel_http_str_t s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

static void respond_json(ratel_http_exchange_t *ex, int status,
                         const char *body, size_t len)
{
    static const ratel_http_header_t json[] = {RATEL_HTTP_JSON_HEADER};
    ratel_http_respond(ex, status, json, 1, body, len);
}

/* Answers `status` with {"error":"MESSAGE"}, the body built by cJSON
   (server/app/json.h) so that any message is valid JSON. */
static void __attribute__((format(printf, 3, 4)))
respond_error(ratel_http_exchange_t *ex, int status, const char *fmt, ...)
{
    /* Building a body needs memory; without it, this constant (valid
       JSON, no input in it) says so. */
    static const char fallback[] = "{\"error\":\"out of memory\"}\n";
    char msg[600], *body;
    size_t len = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    body = ratel__json_error_body(msg, &len);
    if (body)
        respond_json(ex, status, body, len);
    else
        respond_json(ex, status, fallback, sizeof fallback - 1);
    free(body);
}

/*
 * 429 for a request denied by `limit` (decision d): the RateLimit-Policy
 * and RateLimit fields of that policy (server/app/ratelimit.h: its binding
 * rule, named "POLICY-INDEX"), Retry-After in whole seconds rounded up,
 * and a body with the same figures.
 */
static void respond_limited(captcha_t *app, ratel_http_exchange_t *ex,
                            captcha_policy_t limit, const ratel_decision_t *d)
{
    const char *name = captcha_policy_names[limit];
    const ratel_policy_t *p = &app->config->policies[limit];
    long long secs = ratel__retry_after_seconds(d);
    char policy[1024], field[256], retry[24], *body = NULL;
    size_t np, nf, nr, len = 0;
    cJSON *o = cJSON_CreateObject();

    np = ratel__header_policy(name, p, policy, sizeof policy);
    nf = ratel__header_ratelimit(name, p, d, field, sizeof field);
    nr = (size_t)snprintf(retry, sizeof retry, "%lld", secs);
    if (o && cJSON_AddStringToObject(o, "error", "too many requests") &&
        cJSON_AddStringToObject(o, "policy", name) &&
        cJSON_AddNumberToObject(o, "rule", d->rule) &&
        cJSON_AddNumberToObject(o, "retry_after_s", (double)secs))
        body = ratel__json_print(o, &len);
    cJSON_Delete(o);
    if (!body || np >= sizeof policy || nf >= sizeof field) {
        free(body);
        respond_error(ex, 500, "cannot build the 429 answer");
        return;
    }
    ratel_http_header_t h[] = {RATEL_HTTP_JSON_HEADER,
                               {{"RateLimit-Policy", 16}, {policy, np}},
                               {{"RateLimit", 9}, {field, nf}},
                               {{"Retry-After", 11}, {retry, nr}}};
    ratel_http_respond(ex, 429, h, 4, body, len);
    free(body);
}

/* ------------------------------------------------------------- inputs */

/*
 * The telephone number `s` as captchad keys, stores and sends it: its
 * E.164 form (app/phone.h: libphonenumber), a number without a country
 * code read as phone_region's, into out. So every spelling an SMS
 * provider delivers to one phone ("13800138000", "+86 138 0013 8000",
 * "008613800138000", ...) is one code, one notice list and one budget.
 * Refuses (counted by reason) what is not a valid number, and premium-rate
 * and shared-cost numbers: no one needs a code there, and SMS-pumping
 * rings earn from traffic to them. 0, or -1 with the reason in why.
 */
static int phone_e164(captcha_t *app, const char *s,
                      char out[CAPTCHA_PHONE_MAX], char *why, size_t whylen)
{
    const char *region = app->config->phone_region;
    ratel__phone_t p;
    int rc = ratel__phone_parse(s, strlen(s), region, &p);

    if (rc == 0 && !ratel__phone_type_premium(p.type)) {
        memcpy(out, p.e164, CAPTCHA_PHONE_MAX);
        return 0;
    }
    if (rc == 0) {
        atomic_fetch_add(&app->phone_refused[PHONE_PREMIUM], 1);
        snprintf(why, whylen,
                 "telephone: a %s number; codes are not sent to premium-rate "
                 "or shared-cost numbers",
                 ratel__phone_type_name(p.type));
        return -1;
    }
    atomic_fetch_add(
        &app->phone_refused[rc == RATEL__PHONE_INVALID ? PHONE_INVALID
                                                       : PHONE_UNPARSABLE],
        1);
    if (region[0])
        snprintf(why, whylen,
                 "telephone: %s; expected a number such as 13800138000 (read "
                 "in phone_region %s) or +8613800138000",
                 ratel__phone_strerror(rc), region);
    else
        snprintf(why, whylen,
                 "telephone: %s; expected a number with its country code "
                 "such as +8613800138000",
                 ratel__phone_strerror(rc));
    return -1;
}

/* Whether `s` is exactly `len` decimal digits. */
static int code_well_formed(const char *s, unsigned len)
{
    size_t n = strlen(s);
    if (n != len)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/*
 * A code of `len` digits from getrandom(). Each digit takes a random byte
 * below 250 (a multiple of 10) and keeps its remainder: bytes 250..255 are
 * thrown away, so every digit is equally likely (no modulo bias).
 */
int captcha_code_new(unsigned len, char *out)
{
    unsigned char pool[64];
    size_t have = 0, used = 0;
    unsigned i = 0;

    while (i < len) {
        if (used == have) {
            ssize_t got = getrandom(pool, sizeof pool, 0);
            if (got <= 0)
                return -1;
            have = (size_t)got;
            used = 0;
        }
        if (pool[used] < 250)
            out[i++] = (char)('0' + pool[used] % 10);
        used++;
    }
    out[len] = '\0';
    memset(pool, 0, sizeof pool);
    return 0;
}

/*
 * Reads the string fields `names` (n of them) of a JSON object body into
 * out[i] (each cap bytes). Absent fields read "". The body must be strict
 * JSON (server/app/json.h: no trailing data, NUL, invalid UTF-8, \u0000 or
 * key given twice). Returns 0, or -1 with the reason in why: the body is
 * not strict JSON, not an object, or a named field is not a string that
 * fits (other fields are ignored).
 */
static int read_body(const ratel_http_request_t *req, const char *const *names,
                     size_t n, char (*out)[CAPTCHA_USER_MAX + 1], char *why,
                     size_t whylen)
{
    char err[300];
    cJSON *root = NULL;
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        out[i][0] = '\0';
    rc = ratel__json_parse_strict(req->body.p, req->body.n, &root, NULL, err,
                                  sizeof err);
    if (rc != 0) {
        snprintf(why, whylen, "invalid JSON body: %s", err);
        return -1;
    }
    if (!cJSON_IsObject(root)) {
        snprintf(why, whylen, "the body must be a JSON object");
        rc = -1;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        cJSON *item = cJSON_GetObjectItemCaseSensitive(root, names[i]);
        if (!item)
            continue;
        if (!cJSON_IsString(item) ||
            strlen(item->valuestring) > CAPTCHA_USER_MAX) {
            snprintf(why, whylen, "%s: expected a string of at most %d bytes",
                     names[i], CAPTCHA_USER_MAX);
            rc = -1;
        } else {
            strcpy(out[i], item->valuestring);
        }
    }
    cJSON_Delete(root);
    return rc;
}

/*
 * Query parameter `name` into buf (ratel_http_query_param's decoding),
 * refusing it when it is given twice: a proxy and captchad could each
 * take a different copy. Returns its length, or -1 with the reason in
 * why (absent, given twice, malformed or too long).
 */
static long query_once(ratel_http_str_t query, const char *name, char *buf,
                       size_t len, char *why, size_t whylen)
{
    const char *p = query.p, *end = query.p + query.n;
    unsigned copies = 0;
    long got;

    /* Each '&'-separated piece on its own: the parameter's copies. */
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        ratel_http_str_t one = {p, (size_t)((amp ? amp : end) - p)};
        char scratch[8];
        if (ratel_http_query_param(one, name, scratch, sizeof scratch) != -1)
            copies++;
        p = amp ? amp + 1 : end;
    }
    if (copies > 1) {
        snprintf(why, whylen,
                 "the query parameter %s is given %u times; "
                 "give it once",
                 name, copies);
        return -1;
    }
    got = ratel_http_query_param(query, name, buf, len);
    if (got == -1)
        snprintf(why, whylen, "the query parameter %s is missing", name);
    else if (got < 0)
        snprintf(why, whylen,
                 "the query parameter %s is malformed (a bad %%-escape or "
                 "%%00) or longer than %zu bytes",
                 name, len - 1);
    return got < 0 ? -1 : got;
}

/* "captcha:POLICY:VALUE": the ratel store's key. */
static size_t policy_key(char *buf, size_t len, captcha_policy_t policy,
                         const char *value)
{
    char addr[RATEL__ADDR_MAX];
    int n;

    /* An address is limited by what its holder holds: an IPv6 client
       by its /64, where it could take a fresh address per request. */
    if (policy == CAPTCHA_SEND_IP || policy == CAPTCHA_VERIFY_IP) {
        ratel__address_bucket(value, addr, sizeof addr);
        value = addr;
    }
    n = snprintf(buf, len, "captcha:%s:%s", captcha_policy_names[policy],
                 value);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

int captcha_refund_send(captcha_t *app, const char *phone, const char *ip)
{
    const ratel_policy_t *pol = app->config->policies;
    int64_t now = ratel_clock_now_us();
    ratel_decision_t d;
    char key[96];
    size_t n;
    int rc;

    n = policy_key(key, sizeof key, CAPTCHA_SEND_PHONE, phone);
    rc = ratel_store_refund(app->store, key, n, &pol[CAPTCHA_SEND_PHONE], now,
                            1, &d);
    /* Notices written before the client address was recorded have none:
       only the phone's permit can be given back. */
    if (ip[0]) {
        n = policy_key(key, sizeof key, CAPTCHA_SEND_IP, ip);
        rc |= ratel_store_refund(app->store, key, n, &pol[CAPTCHA_SEND_IP], now,
                                 1, &d);
    }
    atomic_fetch_add(rc ? &app->refund_errors : &app->refunds, 1);
    if (rc)
        ratel__log("error", "refund failed", "reason=\"%s\"",
                   ratel_strerror(rc));
    return rc ? -1 : 0;
}

/* -------------------------------------------------------------- flows */

/*
 * A request that needs the ratel store is a flow: one context per request
 * carries it through the store's callbacks on its worker's loop, so the
 * worker never waits for Redis (a hung server delays only the requests
 * that need it, each answered at its own deadline by the failure policy).
 * The kinds share one shape: charge the `first` policy, then the `second`
 * (a pair: both admit or neither is charged), then answer.
 */
typedef struct flow_s flow_t;

/* Answers a flow once the store decided: rc 1 admitted, 0 denied (the
   denying policy in f->which, its decision in f->decision; a single
   key's decision either way), or a RATEL_E* code. */
typedef void flow_decided_fn(flow_t *f, int rc);

typedef struct flow_kind_s {
    captcha_policy_t first;
    captcha_policy_t second; /* CAPTCHA_POLICIES: one key only */
    int peek;                /* decide without charging */
    flow_decided_fn *decided;
} flow_kind_t;

struct flow_s {
    captcha_t *app;
    const flow_kind_t *kind;
    ratel_http_exchange_t *ex;
    unsigned thread;
    int64_t now_us;
    /* The store's keys of `first` and `second`: the store reads them
       until its callback, so they live here, not on a handler's stack. */
    char key[2][CAPTCHA_USER_MAX + 64];
    size_t keylen[2];
    captcha_policy_t which;
    ratel_decision_t decision;
    int second_rc;           /* the second call's rc ... */
    ratel_decision_t second; /* ... and decision, while the first is
                                given back */
    unsigned holds;          /* the answer and each give-back pending */
    int gave_back, give_back_rc;
    char ip[RATEL__ADDR_MAX];
    char phone[CAPTCHA_PHONE_MAX];
    char code[CAPTCHA_USER_MAX + 1]; /* a verify's guess */
};

static void send_decided(flow_t *f, int rc);
static void verify_decided(flow_t *f, int rc);
static void login_decided(flow_t *f, int rc);

/* The first key of a pair is the broader (the client IP): when it denies,
   the narrower key is never created, so a flood of unique phones from one
   address adds no state. */
enum { FLOW_SEND, FLOW_VERIFY, FLOW_LOGIN_FAIL, FLOW_LOGIN_PEEK };
static const flow_kind_t flow_kinds[] = {
    [FLOW_SEND] = {CAPTCHA_SEND_IP, CAPTCHA_SEND_PHONE, 0, send_decided},
    [FLOW_VERIFY] = {CAPTCHA_VERIFY_IP, CAPTCHA_VERIFY_PHONE, 0,
                     verify_decided},
    [FLOW_LOGIN_FAIL] = {CAPTCHA_LOGIN_USER, CAPTCHA_POLICIES, 0,
                         login_decided},
    [FLOW_LOGIN_PEEK] = {CAPTCHA_LOGIN_USER, CAPTCHA_POLICIES, 1,
                         login_decided},
};

static const ratel_policy_t *flow_policy(const flow_t *f, int i)
{
    return &f->app->config->policies[i ? f->kind->second : f->kind->first];
}

/* Drops one hold on f; the last frees it (a code guess is wiped first).
   A give-back that failed is counted and logged once. */
static void flow_release(flow_t *f)
{
    captcha_t *app = f->app;

    if (--f->holds)
        return;
    if (f->gave_back) {
        atomic_fetch_add(f->give_back_rc ? &app->refund_errors : &app->refunds,
                         1);
        if (f->give_back_rc)
            ratel__log("error", "refund failed", "reason=\"%s\"",
                       ratel_strerror(f->give_back_rc));
    }
    memset(f->code, 0, sizeof f->code);
    free(f);
}

static void given_back(void *ud, int rc, const ratel_decision_t *d)
{
    flow_t *f = ud;

    (void)d;
    if (rc)
        f->give_back_rc = rc;
    flow_release(f);
}

/*
 * Gives back the send permits the flow charged (the code could not be
 * stored, the message not queued), so that our failure does not lock a
 * user out. Answered already: f lives on until the store took both.
 */
static void flow_give_back(flow_t *f)
{
    f->gave_back = 1;
    for (int i = 0; i < 2; i++) {
        int rc;
        f->holds++;
        rc = ratel_async_refund(f->app->asyncs[f->thread], f->key[i],
                                f->keylen[i], flow_policy(f, i), f->now_us, 1,
                                given_back, f);
        if (rc)
            given_back(f, rc, NULL);
    }
}

/* The store decided: the kind answers, unless the program is stopping
   (the exchange is gone with the server: nothing is answered). */
static void flow_finish(flow_t *f, int rc)
{
    if (!atomic_load(&f->app->stopping))
        f->kind->decided(f, rc);
    flow_release(f);
}

static void flow_refunded(void *ud, int rc, const ratel_decision_t *d)
{
    flow_t *f = ud;

    (void)d;
    if (rc)
        atomic_fetch_add(&f->app->refund_errors, 1);
    if (f->second_rc) {
        flow_finish(f, f->second_rc);
        return;
    }
    f->which = f->kind->second;
    f->decision = f->second;
    flow_finish(f, 0);
}

/* The second key of a pair: a denial (or a failure) gives back the
   first's permit before the answer. */
static void flow_second(void *ud, int rc, const ratel_decision_t *d)
{
    flow_t *f = ud;

    if (rc == 0 && d->allowed) {
        flow_finish(f, 1);
        return;
    }
    if (atomic_load(&f->app->stopping)) {
        flow_release(f);
        return;
    }
    f->second_rc = rc;
    if (d)
        f->second = *d;
    rc = ratel_async_refund(f->app->asyncs[f->thread], f->key[0], f->keylen[0],
                            flow_policy(f, 0), f->now_us, 1, flow_refunded, f);
    if (rc)
        flow_refunded(f, rc, NULL);
}

static void flow_first(void *ud, int rc, const ratel_decision_t *d)
{
    flow_t *f = ud;
    ratel_request_t one = RATEL_REQUEST_INIT;

    if (rc != 0) {
        flow_finish(f, rc);
        return;
    }
    f->which = f->kind->first;
    f->decision = *d;
    if (!d->allowed || f->kind->second == CAPTCHA_POLICIES) {
        flow_finish(f, d->allowed ? 1 : 0);
        return;
    }
    if (atomic_load(&f->app->stopping)) {
        flow_release(f);
        return;
    }
    rc =
        ratel_async_acquire(f->app->asyncs[f->thread], f->key[1], f->keylen[1],
                            flow_policy(f, 1), f->now_us, &one, flow_second, f);
    if (rc)
        flow_second(f, rc, NULL);
}

/* A flow of `kind` for the exchange; NULL (answered 500) without memory. */
static flow_t *flow_new(captcha_t *app, int kind, ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req)
{
    flow_t *f = calloc(1, sizeof *f);

    if (!f) {
        respond_error(ex, 500, "out of memory");
        return NULL;
    }
    f->app = app;
    f->kind = &flow_kinds[kind];
    f->ex = ex;
    f->thread = req->thread;
    f->holds = 1;
    return f;
}

/* Charges the flow's first key on value a (and its second on b). */
static void flow_start(flow_t *f, const char *a, const char *b)
{
    ratel_request_t one = RATEL_REQUEST_INIT;
    ratel_async_t *async = f->app->asyncs[f->thread];
    int rc;

    f->keylen[0] = policy_key(f->key[0], sizeof f->key[0], f->kind->first, a);
    if (b)
        f->keylen[1] =
            policy_key(f->key[1], sizeof f->key[1], f->kind->second, b);
    f->now_us = ratel_clock_now_us();
    rc = f->kind->peek ? ratel_async_peek(async, f->key[0], f->keylen[0],
                                          flow_policy(f, 0), f->now_us, &one,
                                          flow_first, f)
                       : ratel_async_acquire(async, f->key[0], f->keylen[0],
                                             flow_policy(f, 0), f->now_us, &one,
                                             flow_first, f);
    if (rc)
        flow_first(f, rc, NULL);
}

/* ---------------------------------------------------------- endpoints */

/*
 * A send whose code is stored: its notice, the queue, the answer (202).
 * 0, or -1 answered 503 with the code dropped: the permits are the
 * caller's to give back.
 */
static int send_queue(flow_t *f)
{
    captcha_t *app = f->app;
    const captcha_config_t *c = app->config;
    char content[160], body[160];
    int64_t id = 0, now_ms = ratel_clock_now_us() / 1000;
    captcha_job_t job;
    int n, rc = -1;

    memset(&job, 0, sizeof job);
    memcpy(job.phone, f->phone, sizeof job.phone);
    memcpy(job.ip, f->ip, sizeof job.ip);
    memcpy(job.code, f->code, sizeof job.code - 1); /* a code: 4..10 digits */
    captcha_message(c, NULL, content, sizeof content);
    if (captcha_notices_add(app->notices, job.phone, job.ip, content, now_ms,
                            &id)) {
        atomic_fetch_add(&app->sends[SEND_ERROR], 1);
        respond_error(f->ex, 503, "cannot store the code; try again");
        goto out;
    }
    job.notice_id = id;
    /* Logged first: the sender may have delivered it before we return. */
    ratel__log("info", "send accepted", "notice=%lld ip=%s", (long long)id,
               job.ip);
    if (captcha_sender_enqueue(app->sender, &job) != 0) {
        captcha_notices_finish(app->notices, id, 0, "not sent: queue full",
                               now_ms);
        atomic_fetch_add(&app->sends[SEND_QUEUE_FULL], 1);
        ratel__log("warn", "send queue full", "notice=%lld", (long long)id);
        respond_error(f->ex, 503, "too busy to send now; try again");
        goto out;
    }
    atomic_fetch_add(&app->sends[SEND_ACCEPTED], 1);
    n = snprintf(body, sizeof body,
                 "{\"sent\":true,\"notice_id\":%lld,\"expires_in_s\":%lld}\n",
                 (long long)id, (long long)((c->code_ttl_ms + 999) / 1000));
    respond_json(f->ex, 202, body, (size_t)n);
    rc = 0;
out:
    if (rc != 0)
        captcha_codes_discard_async(app->codes, f->thread, job.phone, job.code);
    memset(&job, 0, sizeof job);
    return rc;
}

/* The code store took the send's code (rc 0) or did not. */
static void code_stored(void *ud, int rc)
{
    flow_t *f = ud;

    if (atomic_load(&f->app->stopping)) {
        flow_release(f);
        return;
    }
    if (rc != 0) {
        captcha_codes_discard_async(f->app->codes, f->thread, f->phone,
                                    f->code);
        atomic_fetch_add(&f->app->sends[SEND_ERROR], 1);
        respond_error(f->ex, 503, "cannot store the code; try again");
    }
    if (rc != 0 || send_queue(f) != 0)
        flow_give_back(f);
    flow_release(f);
}

/* A send once its permits are charged: a new code into the code store
   (on the worker's loop), then the notice and the queue. */
static void send_admitted(flow_t *f)
{
    const captcha_config_t *c = f->app->config;

    f->holds++;
    if (captcha_code_new(c->code_length, f->code) != 0) {
        code_stored(f, -1);
        return;
    }
    captcha_codes_put_async(f->app->codes, f->thread, f->phone, f->code,
                            ratel_clock_now_us() / 1000, c->code_ttl_ms,
                            code_stored, f);
}

/*
 * Whether a line of `kind` (QUIET_*) may be written now on HTTP thread
 * `thread`: the log budget of that thread and kind (app/log.h). *quiet
 * gets how many such lines were not written since the last one.
 */
static int log_allowed(captcha_t *app, unsigned thread, int kind,
                       uint64_t *quiet)
{
    *quiet = 0;
    if (!app->log_budgets || thread >= app->config->threads)
        return 1;
    return ratel__log_budget_take(&app->log_budgets[thread][kind],
                                  ratel_clock_now_us(), quiet);
}

void captcha_refused(void *ud, unsigned thread, ratel_http_refusal_t why,
                     const char *client)
{
    captcha_t *app = ud;
    uint64_t quiet;

    atomic_fetch_add(&app->refused[why], 1);
    if (log_allowed(app, thread, QUIET_REFUSED + (int)why, &quiet))
        ratel__log(
            "warn", "connection refused", "limit=%s client=%s not_logged=%llu",
            ratel_http_refusal_name(why), client, (unsigned long long)quiet);
}

static void send_decided(flow_t *f, int rc)
{
    captcha_t *app = f->app;
    uint64_t quiet = 0;

    if (rc < 0) {
        atomic_fetch_add(&app->sends[SEND_ERROR], 1);
        if (log_allowed(app, f->thread, QUIET_SEND_FAILED, &quiet))
            ratel__log("error", "store failed",
                       "op=send reason=\"%s\" not_logged=%llu",
                       ratel_strerror(rc), (unsigned long long)quiet);
        respond_error(f->ex, 503, "the rate-limit store is unavailable");
        return;
    }
    if (rc == 0) {
        atomic_fetch_add(&app->sends[SEND_LIMITED], 1);
        if (log_allowed(app, f->thread, QUIET_SEND_LIMITED + (int)f->which,
                        &quiet))
            ratel__log("info", "send limited",
                       "ip=%s policy=%s retry_after_ms=%lld not_logged=%llu",
                       f->ip, captcha_policy_names[f->which],
                       (long long)f->decision.retry_after_ms,
                       (unsigned long long)quiet);
        respond_limited(app, f->ex, f->which, &f->decision);
        return;
    }
    send_admitted(f);
}

static void handle_send(captcha_t *app, ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, const char *ip)
{
    static const char *const names[] = {"telephone"};
    char in[1][CAPTCHA_USER_MAX + 1], phone[CAPTCHA_PHONE_MAX], why[400];
    flow_t *f;

    if (read_body(req, names, 1, in, why, sizeof why) != 0) {
        atomic_fetch_add(&app->sends[SEND_INVALID], 1);
        respond_error(ex, 400, "%s; expected {\"telephone\": \"13800138000\"}",
                      why);
        return;
    }
    if (phone_e164(app, in[0], phone, why, sizeof why) != 0) {
        atomic_fetch_add(&app->sends[SEND_INVALID], 1);
        respond_error(ex, 400, "%s", why);
        return;
    }
    if (!(f = flow_new(app, FLOW_SEND, ex, req)))
        return;
    snprintf(f->ip, sizeof f->ip, "%s", ip);
    memcpy(f->phone, phone, sizeof f->phone);
    flow_start(f, ip, phone);
}

/* A verify's answer: CAPTCHA_CODE_OK, CAPTCHA_CODE_INVALID or a
   RATEL_E* code (the code store failed). */
static void verify_answer(flow_t *f, int rc)
{
    captcha_t *app = f->app;
    uint64_t quiet = 0;

    memset(f->code, 0, sizeof f->code);
    if (rc < 0) {
        atomic_fetch_add(&app->verifies[VERIFY_ERROR], 1);
        if (log_allowed(app, f->thread, QUIET_VERIFY_FAILED, &quiet))
            ratel__log("error", "verify failed",
                       "reason=\"%s\" not_logged=%llu", ratel_strerror(rc),
                       (unsigned long long)quiet);
        respond_error(f->ex, 503, "the store is unavailable; try again");
        return;
    }
    atomic_fetch_add(
        &app->verifies[rc == CAPTCHA_CODE_OK ? VERIFY_SUCCESS : VERIFY_INVALID],
        1);
    if (rc == CAPTCHA_CODE_OK)
        ratel__log("info", "verified", "ip=%s", f->ip);
    else if (log_allowed(app, f->thread, QUIET_VERIFY_REFUSED, &quiet))
        ratel__log("info", "verify refused", "ip=%s not_logged=%llu", f->ip,
                   (unsigned long long)quiet);
    if (rc == CAPTCHA_CODE_OK)
        respond_json(f->ex, 200, "{\"verified\":true}\n", 18);
    else
        respond_error(f->ex, 400, INVALID_CODE);
}

/* The code store's verdict on the guess. */
static void code_verified(void *ud, int rc)
{
    flow_t *f = ud;

    if (!atomic_load(&f->app->stopping))
        verify_answer(f, rc);
    flow_release(f);
}

/* Limited, failed, or admitted: then the guess goes to the code store
   (on the worker's loop) unless it cannot be a code at all. */
static void verify_decided(flow_t *f, int rc)
{
    if (rc == 0) {
        atomic_fetch_add(&f->app->verifies[VERIFY_LIMITED], 1);
        respond_limited(f->app, f->ex, f->which, &f->decision);
        return;
    }
    if (rc == 1 && code_well_formed(f->code, f->app->config->code_length)) {
        f->holds++;
        captcha_codes_verify_async(f->app->codes, f->thread, f->phone, f->code,
                                   ratel_clock_now_us() / 1000, code_verified,
                                   f);
        return;
    }
    verify_answer(f, rc == 1 ? CAPTCHA_CODE_INVALID : rc);
}

static void handle_verify(captcha_t *app, ratel_http_exchange_t *ex,
                          const ratel_http_request_t *req, const char *ip)
{
    static const char *const names[] = {"telephone", "code"};
    char in[2][CAPTCHA_USER_MAX + 1], phone[CAPTCHA_PHONE_MAX], why[400];
    flow_t *f;
    int rc;

    rc = read_body(req, names, 2, in, why, sizeof why);
    if (rc != 0 || !in[0][0] || !in[1][0]) {
        atomic_fetch_add(&app->verifies[VERIFY_BAD_REQUEST], 1);
        respond_error(ex, 400,
                      "%s%sexpected {\"telephone\": \"...\", \"code\": "
                      "\"...\"}",
                      rc ? why : "", rc ? "; " : "");
        return;
    }
    if (phone_e164(app, in[0], phone, why, sizeof why) != 0) {
        atomic_fetch_add(&app->verifies[VERIFY_BAD_REQUEST], 1);
        respond_error(ex, 400, "%s", why);
    } else if ((f = flow_new(app, FLOW_VERIFY, ex, req))) {
        snprintf(f->ip, sizeof f->ip, "%s", ip);
        memcpy(f->phone, phone, sizeof f->phone);
        memcpy(f->code, in[1], sizeof f->code);
        flow_start(f, ip, phone);
    }
    memset(in, 0, sizeof in);
}

/* /login/fail (acquire) and /login/needs-captcha (peek), decided. */
static void login_decided(flow_t *f, int rc)
{
    const ratel_decision_t *d = &f->decision;
    int peek = f->kind->peek, needs;
    char body[200];
    size_t n;

    if (rc < 0) {
        respond_error(f->ex, 503, "the rate-limit store is unavailable");
        return;
    }
    /* After the policy's allowance of failures, the next attempt needs a
       captcha: a peek would be denied. */
    needs = !d->allowed || (!peek && d->remaining == 0);
    if (!peek) {
        atomic_fetch_add(&f->app->login_failures, 1);
        if (needs)
            atomic_fetch_add(&f->app->login_limited, 1);
    }
    if (peek)
        n = (size_t)snprintf(body, sizeof body,
                             "{\"needs_captcha\":%s,\"retry_after_s\":%lld}"
                             "\n",
                             needs ? "true" : "false",
                             (long long)((d->retry_after_ms + 999) / 1000));
    else
        n = (size_t)snprintf(
            body, sizeof body, "{\"recorded\":%s,\"needs_captcha\":%s}\n",
            d->allowed ? "true" : "false", needs ? "true" : "false");
    respond_json(f->ex, 200, body, n);
}

static void handle_login(captcha_t *app, ratel_http_exchange_t *ex,
                         const ratel_http_request_t *req, int peek)
{
    static const char *const names[] = {"user"};
    char in[1][CAPTCHA_USER_MAX + 1], why[400] = "";
    long got = -1;
    flow_t *f;

    in[0][0] = '\0';
    if (peek)
        got = query_once(req->query, "user", in[0], sizeof in[0], why,
                         sizeof why);
    else if (read_body(req, names, 1, in, why, sizeof why) == 0)
        got = (long)strlen(in[0]);
    if (got <= 0) {
        respond_error(ex, 400, "%s%s%s", why, why[0] ? "; " : "",
                      peek ? "expected ?user=NAME (1..128 bytes)"
                           : "expected {\"user\": \"NAME\"} (1..128 bytes)");
        return;
    }
    f = flow_new(app, peek ? FLOW_LOGIN_PEEK : FLOW_LOGIN_FAIL, ex, req);
    if (f)
        flow_start(f, in[0], NULL);
}

/* The admin token, compared in constant time. */
static int admin_ok(const captcha_t *app, const ratel_http_request_t *req)
{
    const char *tok = app->config->admin_token;
    const ratel_http_str_t *h = ratel_http_header(req, "Authorization");
    size_t n = strlen(tok);
    unsigned char diff = 0;

    if (!n || !h || h->n != 7 + n || strncasecmp(h->p, "Bearer ", 7) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(h->p[7 + i] ^ tok[i]);
    return diff == 0;
}

/* /readyz: 200 while the rate-limit store is up, else 503 with the
   cause, as rateld's (the store's health as last seen, never waiting). */
static void handle_ready(captcha_t *app, ratel_http_exchange_t *ex)
{
    int ready = 0;
    char *body = ratel__ready_body(
        app->store, app->config->store_redis ? "redis" : "memory", &ready);

    if (!body) {
        respond_error(ex, 500, "out of memory");
        return;
    }
    respond_json(ex, ready ? 200 : 503, body, strlen(body));
    free(body);
}

static void handle_notices(captcha_t *app, ratel_http_exchange_t *ex,
                           const ratel_http_request_t *req)
{
    char raw[RATEL__PHONE_TEXT_MAX + 1], *list, *body, why[300] = "";
    ratel__phone_t phone;
    long got;
    int n = 0;

    if (!admin_ok(app, req)) {
        respond_error(ex, 403,
                      "needs the admin token: Authorization: Bearer "
                      "TOKEN");
        return;
    }
    got = query_once(req->query, "telephone", raw, sizeof raw, why, sizeof why);
    /* The notices of the number however it is written (as sends key
       them: E.164). */
    if (got > 0 && (n = ratel__phone_parse(raw, (size_t)got,
                                           app->config->phone_region, &phone)))
        snprintf(why, sizeof why, "telephone: %s", ratel__phone_strerror(n));
    if (got <= 0 || n != 0) {
        respond_error(ex, 400, "%s%sexpected ?telephone=NUMBER", why,
                      why[0] ? "; " : "");
        return;
    }
    list = captcha_notices_json(app->notices, phone.e164, 100);
    body = list ? malloc(strlen(list) + 64) : NULL;
    if (!body) {
        free(list);
        respond_error(ex, 500, "cannot read the notices");
        return;
    }
    n = sprintf(body, "{\"telephone\":\"%s\",\"notices\":%s}\n", phone.e164,
                list);
    respond_json(ex, 200, body, (size_t)n);
    free(body);
    free(list);
}

/* ------------------------------------------------------------ routing */

void captcha_handle(void *ud, ratel_http_exchange_t *ex,
                    const ratel_http_request_t *req)
{
    captcha_t *app = ud;
    char ip[RATEL__ADDR_MAX];
    int post = str_is(req->method, "POST");
    int get = str_is(req->method, "GET") || str_is(req->method, "HEAD");

    ratel__client_address(&app->config->trusted, req, ip, sizeof ip);
    if (str_is(req->path, "/captcha/send") && post)
        handle_send(app, ex, req, ip);
    else if (str_is(req->path, "/captcha/verify") && post)
        handle_verify(app, ex, req, ip);
    else if (str_is(req->path, "/login/fail") && post)
        handle_login(app, ex, req, 0);
    else if (str_is(req->path, "/login/needs-captcha") && get)
        handle_login(app, ex, req, 1);
    else if (str_is(req->path, "/notices") && get)
        handle_notices(app, ex, req);
    else if (str_is(req->path, "/metrics") && get)
        captcha_metrics(app, ex);
    else if (str_is(req->path, "/healthz") && get)
        respond_json(ex, 200, "{\"ok\":true}\n", 12);
    else if (str_is(req->path, "/readyz") && get)
        handle_ready(app, ex);
    else if (str_is(req->path, "/captcha/send") ||
             str_is(req->path, "/captcha/verify") ||
             str_is(req->path, "/login/fail") ||
             str_is(req->path, "/login/needs-captcha") ||
             str_is(req->path, "/notices") || str_is(req->path, "/metrics") ||
             str_is(req->path, "/healthz") || str_is(req->path, "/readyz"))
        respond_error(ex, 405, "method not allowed");
    else
        respond_error(ex, 404, "not found");
}
