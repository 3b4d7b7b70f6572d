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
 *
 * Handlers answer at once on their worker thread: a send's slow part (the
 * gateway) runs on the sender thread, everything else is a store call.
 */
#include "captchad/captcha.h"

#include "app/json.h"
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
 * Checks a telephone number and writes its canonical form into out:
 * mainland China mobile numbers (1[3-9] and 9 digits, also written
 * +86...) as the 11 digits, other numbers as E.164 (+ and 8..15 digits,
 * the first not 0). 1 when valid.
 */
static int phone_canonical(const char *s, char out[CAPTCHA_PHONE_MAX])
{
    size_t n = strlen(s);

    for (size_t i = s[0] == '+' ? 1 : 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    if (n == 14 && !strncmp(s, "+86", 3)) {
        s += 3;
        n = 11;
    }
    if (s[0] != '+') {
        if (n != 11 || s[0] != '1' || s[1] < '3')
            return 0;
    } else if (n < 9 || n > 16 || s[1] == '0') {
        return 0;
    }
    memcpy(out, s, n + 1);
    return 1;
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

/*
 * Charges the `first` policy on key a, then the `second` on key b: both
 * admit or neither is charged (a denial of the second refunds the first).
 * The first is the broader key (the client IP): when it denies, the
 * narrower key is never created, so a flood of unique phones from one
 * address adds no state. Returns 1 admitted, 0 denied (the denying
 * policy in *which, its decision in *denied), or a RATEL_E* code.
 */
static int acquire_pair(captcha_t *app, captcha_policy_t first, const char *a,
                        captcha_policy_t second, const char *b,
                        captcha_policy_t *which, ratel_decision_t *denied)
{
    const ratel_policy_t *pol = app->config->policies;
    ratel_request_t one = RATEL_REQUEST_INIT;
    ratel_decision_t d2, back;
    char k1[96], k2[96];
    size_t n1 = policy_key(k1, sizeof k1, first, a);
    size_t n2 = policy_key(k2, sizeof k2, second, b);
    int64_t now = ratel_clock_now_us();
    int rc;

    rc =
        ratel_store_acquire(app->store, k1, n1, &pol[first], now, &one, denied);
    if (rc != 0)
        return rc;
    if (!denied->allowed) {
        *which = first;
        return 0;
    }
    rc = ratel_store_acquire(app->store, k2, n2, &pol[second], now, &one, &d2);
    if (rc == 0 && d2.allowed)
        return 1;
    if (ratel_store_refund(app->store, k1, n1, &pol[first], now, 1, &back))
        atomic_fetch_add(&app->refund_errors, 1);
    if (rc != 0)
        return rc;
    *which = second;
    *denied = d2;
    return 0;
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

/* ---------------------------------------------------------- endpoints */

/* A send once its permits are charged: a code, the notice, the queue. */
static void send_admitted(captcha_t *app, ratel_http_exchange_t *ex,
                          captcha_job_t *job)
{
    const captcha_config_t *c = app->config;
    char content[160], body[160];
    int64_t id = 0, now_ms = ratel_clock_now_us() / 1000;
    int n;

    captcha_message(c, NULL, content, sizeof content);
    if (captcha_code_new(c->code_length, job->code) != 0 ||
        captcha_codes_put(app->codes, job->phone, job->code, now_ms,
                          c->code_ttl_ms) != 0 ||
        captcha_notices_add(app->notices, job->phone, job->ip, content, now_ms,
                            &id)) {
        captcha_codes_discard(app->codes, job->phone, job->code);
        captcha_refund_send(app, job->phone, job->ip);
        atomic_fetch_add(&app->sends[SEND_ERROR], 1);
        respond_error(ex, 503, "cannot store the code; try again");
        return;
    }
    job->notice_id = id;
    /* Logged first: the sender may have delivered it before we return. */
    ratel__log("info", "send accepted", "notice=%lld ip=%s", (long long)id,
               job->ip);
    if (captcha_sender_enqueue(app->sender, job) != 0) {
        captcha_codes_discard(app->codes, job->phone, job->code);
        captcha_notices_finish(app->notices, id, 0, "not sent: queue full",
                               now_ms);
        captcha_refund_send(app, job->phone, job->ip);
        atomic_fetch_add(&app->sends[SEND_QUEUE_FULL], 1);
        ratel__log("warn", "send queue full", "notice=%lld", (long long)id);
        respond_error(ex, 503, "too busy to send now; try again");
        return;
    }
    atomic_fetch_add(&app->sends[SEND_ACCEPTED], 1);
    n = snprintf(body, sizeof body,
                 "{\"sent\":true,\"notice_id\":%lld,\"expires_in_s\":%lld}\n",
                 (long long)id, (long long)((c->code_ttl_ms + 999) / 1000));
    respond_json(ex, 202, body, (size_t)n);
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

static void handle_send(captcha_t *app, ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, const char *ip)
{
    static const char *const names[] = {"telephone"};
    char in[1][CAPTCHA_USER_MAX + 1], why[400];
    captcha_policy_t which = CAPTCHA_SEND_IP;
    ratel_decision_t denied;
    captcha_job_t job;
    uint64_t quiet = 0;
    int rc;

    memset(&job, 0, sizeof job);
    if (read_body(req, names, 1, in, why, sizeof why) != 0) {
        atomic_fetch_add(&app->sends[SEND_INVALID], 1);
        respond_error(ex, 400, "%s; expected {\"telephone\": \"13800138000\"}",
                      why);
        return;
    }
    if (!phone_canonical(in[0], job.phone)) {
        atomic_fetch_add(&app->sends[SEND_INVALID], 1);
        respond_error(ex, 400,
                      "expected {\"telephone\": \"13800138000\"}: a mainland "
                      "China mobile number or +E.164 (+ and 8..15 digits)");
        return;
    }
    snprintf(job.ip, sizeof job.ip, "%s", ip);
    rc = acquire_pair(app, CAPTCHA_SEND_IP, ip, CAPTCHA_SEND_PHONE, job.phone,
                      &which, &denied);
    if (rc < 0) {
        atomic_fetch_add(&app->sends[SEND_ERROR], 1);
        if (log_allowed(app, req->thread, QUIET_SEND_FAILED, &quiet))
            ratel__log("error", "store failed",
                       "op=send reason=\"%s\" not_logged=%llu",
                       ratel_strerror(rc), (unsigned long long)quiet);
        respond_error(ex, 503, "the rate-limit store is unavailable");
        return;
    }
    if (rc == 0) {
        atomic_fetch_add(&app->sends[SEND_LIMITED], 1);
        if (log_allowed(app, req->thread, QUIET_SEND_LIMITED + (int)which,
                        &quiet))
            ratel__log("info", "send limited",
                       "ip=%s policy=%s retry_after_ms=%lld not_logged=%llu",
                       ip, captcha_policy_names[which],
                       (long long)denied.retry_after_ms,
                       (unsigned long long)quiet);
        respond_limited(app, ex, which, &denied);
        return;
    }
    send_admitted(app, ex, &job);
    memset(&job, 0, sizeof job);
}

static void handle_verify(captcha_t *app, ratel_http_exchange_t *ex,
                          const ratel_http_request_t *req, const char *ip)
{
    static const char *const names[] = {"telephone", "code"};
    char in[2][CAPTCHA_USER_MAX + 1], phone[CAPTCHA_PHONE_MAX], why[400];
    captcha_policy_t which = CAPTCHA_VERIFY_IP;
    ratel_decision_t denied;
    uint64_t quiet = 0;
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
    if (!phone_canonical(in[0], phone)) {
        atomic_fetch_add(&app->verifies[VERIFY_INVALID], 1);
        respond_error(ex, 400, INVALID_CODE);
        return;
    }
    rc = acquire_pair(app, CAPTCHA_VERIFY_IP, ip, CAPTCHA_VERIFY_PHONE, phone,
                      &which, &denied);
    if (rc == 0) {
        atomic_fetch_add(&app->verifies[VERIFY_LIMITED], 1);
        respond_limited(app, ex, which, &denied);
        return;
    }
    if (rc == 1)
        rc = code_well_formed(in[1], app->config->code_length)
                 ? captcha_codes_verify(app->codes, phone, in[1],
                                        ratel_clock_now_us() / 1000)
                 : CAPTCHA_CODE_INVALID;
    memset(in, 0, sizeof in);
    if (rc < 0) {
        atomic_fetch_add(&app->verifies[VERIFY_ERROR], 1);
        if (log_allowed(app, req->thread, QUIET_VERIFY_FAILED, &quiet))
            ratel__log("error", "verify failed",
                       "reason=\"%s\" not_logged=%llu", ratel_strerror(rc),
                       (unsigned long long)quiet);
        respond_error(ex, 503, "the store is unavailable; try again");
        return;
    }
    atomic_fetch_add(
        &app->verifies[rc == CAPTCHA_CODE_OK ? VERIFY_SUCCESS : VERIFY_INVALID],
        1);
    if (rc == CAPTCHA_CODE_OK)
        ratel__log("info", "verified", "ip=%s", ip);
    else if (log_allowed(app, req->thread, QUIET_VERIFY_REFUSED, &quiet))
        ratel__log("info", "verify refused", "ip=%s not_logged=%llu", ip,
                   (unsigned long long)quiet);
    if (rc == CAPTCHA_CODE_OK)
        respond_json(ex, 200, "{\"verified\":true}\n", 18);
    else
        respond_error(ex, 400, INVALID_CODE);
}

/* /login/fail (acquire) and /login/needs-captcha (peek). */
static void handle_login(captcha_t *app, ratel_http_exchange_t *ex,
                         const ratel_http_request_t *req, int peek)
{
    static const char *const names[] = {"user"};
    char in[1][CAPTCHA_USER_MAX + 1], key[CAPTCHA_USER_MAX + 64], body[200];
    char why[400] = "";
    ratel_request_t r = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    size_t n;
    long got = -1;
    int rc, needs;

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
    r.flags = peek ? RATEL_PEEK : 0;
    n = policy_key(key, sizeof key, CAPTCHA_LOGIN_USER, in[0]);
    rc = ratel_store_acquire(app->store, key, n,
                             &app->config->policies[CAPTCHA_LOGIN_USER],
                             ratel_clock_now_us(), &r, &d);
    if (rc != 0) {
        respond_error(ex, 503, "the rate-limit store is unavailable");
        return;
    }
    /* After the policy's allowance of failures, the next attempt needs a
       captcha: a peek would be denied. */
    needs = !d.allowed || (!peek && d.remaining == 0);
    if (!peek) {
        atomic_fetch_add(&app->login_failures, 1);
        if (needs)
            atomic_fetch_add(&app->login_limited, 1);
    }
    if (peek)
        n = (size_t)snprintf(body, sizeof body,
                             "{\"needs_captcha\":%s,\"retry_after_s\":%lld}"
                             "\n",
                             needs ? "true" : "false",
                             (long long)((d.retry_after_ms + 999) / 1000));
    else
        n = (size_t)snprintf(
            body, sizeof body, "{\"recorded\":%s,\"needs_captcha\":%s}\n",
            d.allowed ? "true" : "false", needs ? "true" : "false");
    respond_json(ex, 200, body, n);
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

static void handle_notices(captcha_t *app, ratel_http_exchange_t *ex,
                           const ratel_http_request_t *req)
{
    char raw[64], phone[CAPTCHA_PHONE_MAX], *list, *body, why[300] = "";
    long got;
    int n;

    if (!admin_ok(app, req)) {
        respond_error(ex, 403,
                      "needs the admin token: Authorization: Bearer "
                      "TOKEN");
        return;
    }
    got = query_once(req->query, "telephone", raw, sizeof raw, why, sizeof why);
    if (got <= 0 || !phone_canonical(raw, phone)) {
        respond_error(ex, 400, "%s%sexpected ?telephone=NUMBER", why,
                      why[0] ? "; " : "");
        return;
    }
    list = captcha_notices_json(app->notices, phone, 100);
    body = list ? malloc(strlen(list) + 64) : NULL;
    if (!body) {
        free(list);
        respond_error(ex, 500, "cannot read the notices");
        return;
    }
    n = sprintf(body, "{\"telephone\":\"%s\",\"notices\":%s}\n", phone, list);
    respond_json(ex, 200, body, (size_t)n);
    free(body);
    free(list);
}

/* ------------------------------------------------------------ metrics */

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

static void handle_metrics(captcha_t *app, ratel_http_exchange_t *ex)
{
    static const char *const sends[] = {"accepted", "limited", "invalid",
                                        "queue_full", "error"};
    static const char *const verifies[] = {"success", "invalid", "limited",
                                           "bad_request", "error"};
    static const char *const results[] = {"success", "failure"};
    static const char *const recovered[] = {"resent", "failed"};
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
        respond_error(ex, 500, "out of memory");
        return;
    }
    ratel_http_respond(ex, 200, text, 1, t.p, t.n);
    free(t.p);
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
        handle_metrics(app, ex);
    else if (str_is(req->path, "/healthz") && get)
        respond_json(ex, 200, "{\"ok\":true}\n", 12);
    else if (str_is(req->path, "/captcha/send") ||
             str_is(req->path, "/captcha/verify") ||
             str_is(req->path, "/login/fail") ||
             str_is(req->path, "/login/needs-captcha") ||
             str_is(req->path, "/notices") || str_is(req->path, "/metrics") ||
             str_is(req->path, "/healthz"))
        respond_error(ex, 405, "method not allowed");
    else
        respond_error(ex, 404, "not found");
}
