/*
 * handlers.c - rateld's endpoints (docs/rateld.md):
 *
 *   GET|POST /v1/acquire   decide for {policy, key, cost, peek}: 200 / 429
 *   POST     /v1/refund    give permits back (api or admin token)
 *   POST     /v1/release   release or renew a concurrent rule's lease
 *                          (api or admin token)
 *   POST     /v1/reset     forget a key (admin token)
 *   any      /v1/auth      gateways (docs/gateways.md): the forwarded
 *            /v1/auth/PATH request's route and identity: 200 / 429 (+
 *                          Retry-After) / 400 / 403, never a silent allow
 *   POST     /v1/report    a gateway: what a request it let through was
 *                          answered; charges charge_on policies (api or
 *                          admin token; docs/login.md)
 *   GET      /metrics      Prometheus text
 *   GET      /healthz      the process answers
 *   GET      /readyz       the store answers
 *
 * Each endpoint is one entry of the table at the end. Decisions are
 * batched per worker (batch.c): the handler checks the request and queues
 * it, rateld_flush() decides the batch and answer.c answers.
 */
#include "app/json.h"
#include "app/watch.h"
#include "rateld/answer.h"
#include "rateld/params.h"
#include "rateld/rateld.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int str_is(ratel_http_str_t s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

/* Copies s into buf as a C string; 0 when it does not fit. */
static int str_copy(ratel_http_str_t s, char *buf, size_t len)
{
    if (s.n >= len)
        return 0;
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    return 1;
}

/*
 * The parameters of a keyed endpoint and their policy; NULL after
 * answering 400 (bad parameters) or 404 (no such policy).
 */
static const rateld_policy_t *params_policy(rateld_t *d, rateld_gen_t *gen,
                                            ratel_http_exchange_t *ex,
                                            const ratel_http_request_t *req,
                                            rateld_params_t *prm, unsigned op)
{
    const rateld_policy_t *pol;
    const char *why = "refused";
    char err[400];

    if (rateld_params_read(req, prm, op, err, sizeof err) != 0) {
        rateld_respond_error(d, ex, req->thread, 400, "%s", err);
        return NULL;
    }
    pol = rateld_config_policy(gen->config, prm->policy, strlen(prm->policy));
    if (!pol) {
        char names[300];
        rateld_config_policy_names(gen->config, names, sizeof names);
        rateld_respond_error(d, ex, req->thread, 404,
                             "no policy named \"%s\"; defined: %s", prm->policy,
                             names);
        return NULL;
    }
    if (prm->has_key && rateld_policy_key_value(pol, prm->key, &prm->keylen,
                                                sizeof prm->key, &why) != 0) {
        rateld_respond_error(d, ex, req->thread, 400,
                             "policy %s: key \"%.64s\" is %s", pol->name,
                             prm->key, why);
        return NULL;
    }
    return pol;
}

/* "POLICY:" + key as the store key. */
static void set_key(rateld_pending_t *p, const char *policy, const char *key,
                    size_t keylen)
{
    size_t n = strlen(policy);
    memcpy(p->key, policy, n);
    p->key[n] = ':';
    memcpy(p->key + n + 1, key, keylen);
    p->keylen = n + 1 + keylen;
}

static int set_rules(const rateld_gen_t *gen, rateld_pending_t *p,
                     const rateld_policy_t *pol, size_t index,
                     const rateld_view_t *view);
static void api_view(const rateld_config_t *c, const ratel_http_request_t *req,
                     rateld_view_t *view, char *client, char *host,
                     size_t hostlen);

/* The decision API: check, then queue for the flush. Overrides read the
   API request itself (its headers, its client address; `key` is the
   key given). */
static void acquire_api(rateld_t *d, rateld_worker_t *w,
                        ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, int64_t start)
{
    rateld_gen_t *gen = rateld_take_gen(d, w);
    const rateld_policy_t *pol;
    rateld_pending_t *p;
    char err[400], client[RATEL__ADDR_MAX], host[256];
    rateld_view_t view;
    rateld_params_t prm;

    if (!(pol = params_policy(d, gen, ex, req, &prm, RATEL_OP_ACQUIRE)))
        return;
    p = rateld_enqueue(d, w, req->thread, 1);
    set_key(p, pol->name, prm.key, prm.keylen);
    api_view(gen->config, req, &view, client, host, sizeof host);
    if (set_rules(gen, p, pol, (size_t)(pol - gen->config->policies), &view)) {
        static const ratel_http_header_t json[] = {RATEL_HTTP_JSON_HEADER};
        char body[160];
        int m =
            snprintf(body, sizeof body,
                     "{\"allowed\":true,\"policy\":\"%s\",\"exempt\":true}\n",
                     pol->name);
        rateld_respond(d, ex, req->thread, 200, json, 1, body, (size_t)m);
        return;
    }
    /* What the store would refuse with a bare code, worded once by the
       core: a cost a rule can never admit, a max_wait a rule cannot. */
    ratel_options_request(&prm.options, &p->request);
    if (ratel_options_check(&prm.options, p->rules, err, sizeof err) != 0) {
        rateld_respond_error(d, ex, req->thread, 400, "policy %s: %s",
                             pol->name, err);
        return;
    }
    p->start_us = start;
    rateld_queue(w, p, 1, 1, RATELD_KIND_ACQUIRE, ex);
}

/* ---------------------------------------------------------------- auth */

/*
 * Whether refusals go to nginx's auth_request (auth.deny_status 403). They
 * carry no body then: nginx shows the client its own answer, never ours,
 * and it closes its keep-alive connection to rateld after an auth answer
 * with a body it did not read, so every refused request would cost a new
 * connection (measured: half the throughput on a denied path).
 */
static int nginx_mode(const rateld_worker_t *w)
{
    return w->gen && w->gen->config->auth.deny_status == 403;
}

/*
 * Answers an auth request rateld will not decide by policies: counted,
 * logged (one line per reason per 10 s on each worker, with how many were
 * not logged since), and answered 200 (auth.unmatched: allow) or with
 * `status`, X-Ratel-Reason and a JSON error.
 */
static void __attribute__((format(printf, 7, 8)))
undecided(rateld_t *d, rateld_worker_t *w, ratel_http_exchange_t *ex,
          const ratel_http_request_t *req, rateld_undecided_t reason,
          int status, const char *fmt, ...)
{
    const char *name = rateld_undecided_name(reason);
    ratel_http_header_t h[2] = {
        {{"Content-Type", 12}, {"application/json", 16}},
        {{"X-Ratel-Reason", 14}, {name, strlen(name)}}};
    int64_t now = ratel_clock_now_us();
    unsigned long long not_logged;
    char msg[600];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rateld_metrics_undecided(d->metrics, req->thread, reason);
    if (rateld_log_budget_take(w, (rateld_log_kind_t)reason, now, &not_logged))
        ratel__log(status == 200 ? "info" : "warn", "auth request undecided",
                   "reason=%s answer=%d detail=\"%s\" not_logged=%llu", name,
                   status, msg, not_logged);
    if (status == 200 || nginx_mode(w))
        rateld_respond(d, ex, req->thread, status, h + 1, 1, NULL, 0);
    else
        rateld_respond_json_error(d, ex, req->thread, status, h, 2, name, msg);
}

/*
 * Fills pending item `p` for policy `pol` (index `index`) and its key
 * (already in p->key): the rules of the first override that applies, or
 * the policy's own. Returns 1 when an override exempts the request.
 */
static int set_rules(const rateld_gen_t *gen, rateld_pending_t *p,
                     const rateld_policy_t *pol, size_t index,
                     const rateld_view_t *view)
{
    size_t prefix = strlen(pol->name) + 1;
    const rateld_override_t *ov =
        pol->noverrides ? rateld_policy_override(pol, view, p->key + prefix,
                                                 p->keylen - prefix)
                        : NULL;

    p->policy = pol;
    p->policy_index = index;
    p->rules = ov ? &ov->policy : &pol->policy;
    p->field = ov ? ov->field : gen->policy_field[index];
    return ov && ov->exempt;
}

/*
 * Whether policy `pol` takes part in this request of the route: every one
 * in a check (/v1/auth, `report` 0); in a report, those whose charge_on
 * holds the answer's status.
 */
static int takes_part(const rateld_policy_t *pol, long report)
{
    return report == 0 ||
           (pol->charges_on && ratel__status_has(&pol->charge_on, report));
}

/* Queues the route's policies for the flush (those an override exempts
   left out; 200 at once when that is all of them): for /v1/auth one
   all-or-nothing group, a charge_on policy only checked (a peek); for
   /v1/report (`report`: the answer's status) each charge_on policy that
   lists the status, charged on its own. 0, or -1 after answering a request
   whose key cannot be built. */
static int queue_route(rateld_t *d, rateld_worker_t *w,
                       ratel_http_exchange_t *ex,
                       const ratel_http_request_t *req,
                       const rateld_route_t *route, const rateld_view_t *view,
                       int64_t start, long report)
{
    rateld_gen_t *gen = w->gen;
    int client_error = gen->config->auth.deny_status == 403 ? 403 : 400;
    size_t k = 0;
    rateld_pending_t *slot =
        rateld_enqueue(d, w, req->thread, route->npolicies);

    for (size_t i = 0; i < route->npolicies; i++) {
        size_t index = route->policies[i];
        const rateld_policy_t *pol = &gen->config->policies[index];
        rateld_pending_t *p = &slot[k];
        const char *why = NULL;
        long n;
        if (!takes_part(pol, report))
            continue;
        n = rateld_policy_key(pol, view, p->key, sizeof p->key, &why);
        if (n == 0 && pol->key.on_missing == RATEL__KEY_MISSING_ALLOW) {
            /* on_missing: allow (docs/keys.md warns): not limited. */
            rateld_metrics_count(d->metrics, req->thread, gen->metric[index],
                                 RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                                 ratel_clock_now_us() - start);
            continue;
        }
        if (n <= 0) {
            rateld_metrics_count(d->metrics, req->thread, gen->metric[index],
                                 RATELD_OUTCOME_REJECTED, RATEL_SOURCE_STORE,
                                 ratel_clock_now_us() - start);
            undecided(d, w, ex, req,
                      n == 0 ? RATELD_UNDECIDED_MISSING_KEY
                             : RATELD_UNDECIDED_BAD_KEY,
                      client_error, "policy %s: its key source is %s",
                      pol->name,
                      n == 0 ? "missing"
                      : why  ? why
                             : "refused");
            return -1;
        }
        p->keylen = (size_t)n;
        if (set_rules(gen, p, pol, index, view)) {
            rateld_metrics_count(d->metrics, req->thread, gen->metric[index],
                                 RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                                 ratel_clock_now_us() - start);
            continue;
        }
        p->request = (ratel_request_t)RATEL_REQUEST_INIT;
        if (pol->charges_on && !report)
            p->request.flags |= RATEL_PEEK;
        if (!report && p->rules == &pol->policy) /* an override's may not
                                                    reserve */
            p->request.max_wait_ms = pol->max_wait_ms;
        p->start_us = start;
        k++;
    }
    if (k == 0 && report)
        rateld_answer_report_none(d, ex, req->thread);
    else if (k == 0)
        rateld_respond(d, ex, req->thread, 200, NULL, 0, NULL, 0);
    else
        rateld_queue(w, slot, k, report ? 0 : k,
                     report ? RATELD_KIND_REPORT : RATELD_KIND_AUTH, ex);
    return 0;
}

/* The host part of a Host value, lower case, without ":PORT" or a final
   dot ("[::1]:80" keeps its brackets), into buf. */
static ratel_http_str_t host_of(ratel_http_str_t in, char *buf, size_t len)
{
    size_t n = in.n;

    if (n > 0 && in.p[0] != '[') {
        const char *colon = memchr(in.p, ':', n);
        if (colon)
            n = (size_t)(colon - in.p);
    } else if (n > 0) {
        const char *end = memchr(in.p, ']', n);
        n = end ? (size_t)(end - in.p) + 1 : n;
    }
    if (n > 0 && in.p[n - 1] == '.')
        n--;
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++)
        buf[i] =
            (char)(in.p[i] >= 'A' && in.p[i] <= 'Z' ? in.p[i] + 32 : in.p[i]);
    buf[n] = '\0';
    return (ratel_http_str_t){buf, n};
}

/* What overrides of the decision API read: the API request itself. */
static void api_view(const rateld_config_t *c, const ratel_http_request_t *req,
                     rateld_view_t *view, char *client, char *host,
                     size_t hostlen)
{
    const ratel_http_str_t *h = ratel_http_header(req, "Host");

    rateld_view_init(view, req);
    /* The API's own request: its body carries the API's parameters. */
    view->body = RATEL__KEY_BODY_NONE;
    view->form = (ratel__key_str_t){NULL, 0};
    view->path = rateld_str(req->path);
    view->query = rateld_str(req->query);
    view->host =
        rateld_str(host_of(h ? *h : (ratel_http_str_t){"", 0}, host, hostlen));
    ratel__client_address(&c->trusted, req, client, RATEL__ADDR_MAX);
    view->client = client;
}

/* Parses the body for json: key sources when a policy of the route reads
   them (the caller deletes view->json). */
static void view_json(const rateld_config_t *c, const rateld_route_t *route,
                      const ratel_http_request_t *req, rateld_view_t *view)
{
    cJSON *root = NULL;
    int wanted = 0;

    for (size_t i = 0; i < route->npolicies; i++)
        wanted |= c->policies[route->policies[i]].uses_json;
    if (!wanted || req->body.n == 0)
        return;
    if (ratel__json_parse_strict(req->body.p, req->body.n, &root, NULL, NULL,
                                 0) != 0 ||
        !cJSON_IsObject(root))
        view->json_error = 1;
    else
        view->json = root;
    if (!view->json)
        cJSON_Delete(root);
}

/* What a gateway's request is read into: the view points into it, so it
   lives as long as the view (the caller's). */
typedef struct gateway_read_s {
    rateld_origin_t origin; /* may hold the path's normal form */
    char client[RATEL__ADDR_MAX], host[256];
} gateway_read_t;

/*
 * The route of a gateway's request and the view its key sources read
 * (the original request's path, query, host, client, read into `g`; its
 * JSON body parsed when a policy of the route reads it: the caller
 * deletes view->json). NULL after answering a request rateld will not
 * decide.
 */
static const rateld_route_t *gateway_route(rateld_t *d, rateld_worker_t *w,
                                           ratel_http_exchange_t *ex,
                                           const ratel_http_request_t *req,
                                           rateld_view_t *view,
                                           gateway_read_t *g)
{
    const rateld_config_t *c = w->gen->config;
    const rateld_route_t *route;
    rateld_origin_t *o = &g->origin;
    char why[160];
    const char *twice;
    rateld_route_query_t q;
    rateld_origin_result_t read = rateld_origin_read(
        &c->auth.gateway, &c->trusted, req, o, why, sizeof why);

    if (read != RATELD_ORIGIN_OK) {
        /* Ambiguity, a bad path, method or host are the client's doing:
           400. */
        static const rateld_undecided_t reason[] = {
            [RATELD_ORIGIN_UNIDENTIFIED] = RATELD_UNDECIDED_UNIDENTIFIED,
            [RATELD_ORIGIN_AMBIGUOUS] = RATELD_UNDECIDED_AMBIGUOUS,
            [RATELD_ORIGIN_BAD_URI] = RATELD_UNDECIDED_BAD_URI,
            [RATELD_ORIGIN_BAD_FIELD] = RATELD_UNDECIDED_BAD_REQUEST};
        int theirs = read != RATELD_ORIGIN_UNIDENTIFIED;
        undecided(
            d, w, ex, req, reason[read], theirs && !nginx_mode(w) ? 400 : 403,
            "cannot tell which request to decide: %s (docs/gateways.md)", why);
        return NULL;
    }
    if (rateld_config_route_header_twice(c, req, &twice)) {
        undecided(d, w, ex, req, RATELD_UNDECIDED_AMBIGUOUS,
                  nginx_mode(w) ? 403 : 400,
                  "cannot tell which request to decide: %s, which routes "
                  "match on, given more than once (docs/gateways.md)",
                  twice);
        return NULL;
    }
    q = (rateld_route_query_t){o->method, o->path, o->host, req};
    if (!(route = rateld_config_route(c, &q))) {
        undecided(d, w, ex, req, RATELD_UNDECIDED_UNMATCHED,
                  c->auth.unmatched == RATELD_UNMATCHED_ALLOW ? 200 : 403,
                  "no route matches %.*s %.*s",
                  (int)(o->method.n > 16 ? 16 : o->method.n), o->method.p,
                  (int)(o->path.n > 200 ? 200 : o->path.n), o->path.p);
        return NULL;
    }
    ratel__client_address(&c->trusted, req, g->client, sizeof g->client);
    rateld_view_init(view, req);
    view->path = rateld_str(o->path);
    view->query = rateld_str(o->query);
    view->host = rateld_str(host_of(o->host, g->host, sizeof g->host));
    view->client = g->client;
    view_json(c, route, req, view);
    return route;
}

/* Gateway auth: the forwarded request's route and identity. */
static void auth_api(rateld_t *d, rateld_worker_t *w, ratel_http_exchange_t *ex,
                     const ratel_http_request_t *req, int64_t start)
{
    const rateld_route_t *route;
    rateld_view_t view;
    gateway_read_t g;

    rateld_take_gen(d, w);
    route = gateway_route(d, w, ex, req, &view, &g);
    if (!route)
        return;
    queue_route(d, w, ex, req, route, &view, start, 0);
    cJSON_Delete((cJSON *)view.json);
}

/* ------------------------------------------------------------- tokens */

/*
 * Whether `len` bytes at `tok` are the secret: in a time that depends on
 * the secret's length only (no early exit at the first byte that differs,
 * which would let a client find a token byte by byte). An empty secret
 * matches nothing.
 */
static int same_secret(const char *tok, size_t len, const char *secret)
{
    size_t n = strlen(secret);
    unsigned char diff = len != n;

    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(secret[i] ^ (i < len ? tok[i] : 0));
    return n > 0 && diff == 0;
}

/*
 * The one token check of rateld's guarded endpoints: the request's
 * "Authorization: Bearer TOKEN" (or "X-Admin-Token: TOKEN") against each
 * of the `n` tokens (empty ones match nothing; every one is compared, so
 * the time does not say which matched). 0 when it carries one of them,
 * 401 when it carries no token, 403 when it carries another.
 */
static int token_status(const ratel_http_request_t *req,
                        const char *const *tokens, size_t n)
{
    const ratel_http_str_t *h = ratel_http_header(req, "Authorization");
    ratel_http_str_t tok;
    int match = 0;

    if (h && h->n > 7 && strncasecmp(h->p, "Bearer ", 7) == 0)
        tok = (ratel_http_str_t){h->p + 7, h->n - 7};
    else if ((h = ratel_http_header(req, "X-Admin-Token")))
        tok = *h;
    else
        return 401;
    for (size_t i = 0; i < n; i++)
        match |= same_secret(tok.p, tok.n, tokens[i]);
    return match ? 0 : 403;
}

/*
 * Answers 401 (with WWW-Authenticate: Bearer) or 403 unless the request
 * carries one of the `n` tokens; returns 0 when it does. `what` names
 * the endpoint and `which` the tokens, for the message.
 */
static int require_token(rateld_t *d, ratel_http_exchange_t *ex,
                         const ratel_http_request_t *req,
                         const char *const *tokens, size_t n, const char *what,
                         const char *which)
{
    static const ratel_http_header_t challenge = {
        {"WWW-Authenticate", 16}, {"Bearer realm=\"rateld\"", 21}};
    int status = token_status(req, tokens, n);

    if (status == 401)
        rateld_respond_error_with(
            d, ex, req->thread, 401, challenge,
            "%s needs a token: Authorization: Bearer TOKEN "
            "(%s)",
            what, which);
    else if (status == 403)
        rateld_respond_error(d, ex, req->thread, 403,
                             "%s: the token given is not %s", what, which);
    return status ? -1 : 0;
}

/* ------------------------------------------- the synchronous endpoints */

/*
 * Refund, release and reset change state: their parameters come from the
 * JSON body alone, so that no URL (a link, a form's action, an image)
 * names a change by itself. 0, or -1 after answering 400.
 */
static int body_only(rateld_t *d, ratel_http_exchange_t *ex,
                     const ratel_http_request_t *req, const char *what)
{
    if (req->query.n == 0)
        return 0;
    rateld_respond_error(d, ex, req->thread, 400,
                         "%s takes its parameters in a JSON body, not in the "
                         "query",
                         what);
    return -1;
}

/* A refund or a release on its way to the store: what its answer needs.
   It holds its configuration (the policy, the rules) until answered. */
typedef struct change_s {
    rateld_t *d;
    ratel_http_exchange_t *ex;
    unsigned thread;
    rateld_gen_t *gen;
    const rateld_policy_t *pol;
    int release, renew;
    rateld_pending_t p;
} change_t;

/* The store's answer to a change: the key as a peek sees it after. */
static void change_answer(change_t *c, int rc, int held,
                          const ratel_decision_t *dec)
{
    char body[512], extra[40] = "";
    rateld_answer_t a;

    if (atomic_load(&c->d->stopping)) {
        /* rateld stops: the exchange may be gone. */
    } else if (rc != 0) {
        rateld_respond_error(c->d, c->ex, c->thread,
                             rc == RATEL_EIO ? 503 : 500,
                             "the store failed: %s", ratel_strerror(rc));
    } else {
        if (c->release)
            snprintf(extra, sizeof extra, ",\"held\":%s,\"renewed\":%s",
                     held ? "true" : "false",
                     held && c->renew ? "true" : "false");
        rateld_decision_headers(&a, &c->p, dec, 0);
        rateld_respond(
            c->d, c->ex, c->thread, 200, a.h, a.n, body,
            rateld_decision_body(body, sizeof body, c->pol, dec, 0, extra));
    }
    atomic_fetch_sub(&c->gen->flights, 1);
    free(c);
}

static void refunded(void *ud, int rc, const ratel_decision_t *dec)
{
    change_answer(ud, rc, 0, dec);
}

static void released(void *ud, int rc, int held, const ratel_decision_t *dec)
{
    change_answer(ud, rc, held, dec);
}

/* Checks a change's request into *c; 0, or -1 when it was answered. */
static int change_check(rateld_t *d, rateld_gen_t *gen,
                        ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, change_t *c,
                        rateld_params_t *prm)
{
    const char *tokens[2] = {gen->config->api_token, gen->config->admin_token};
    const char *what = c->release ? "release" : "refund";
    char client[RATEL__ADDR_MAX], host[256];
    rateld_view_t view;

    if ((tokens[0][0] || tokens[1][0]) &&
        require_token(d, ex, req, tokens, 2, what,
                      "the api_token or the admin_token"))
        return -1;
    if (body_only(d, ex, req, what) ||
        !(c->pol =
              params_policy(d, gen, ex, req, prm,
                            c->release ? RATEL_OP_RELEASE : RATEL_OP_REFUND)))
        return -1;
    set_key(&c->p, c->pol->name, prm->key, prm->keylen);
    api_view(gen->config, req, &view, client, host, sizeof host);
    if (set_rules(gen, &c->p, c->pol, (size_t)(c->pol - gen->config->policies),
                  &view)) {
        rateld_respond_error(d, ex, req->thread, 400,
                             "policy %s: this key is exempt; nothing to %s",
                             c->pol->name, what);
        return -1;
    }
    if (c->release && !ratel_policy_has_leases(c->p.rules)) {
        rateld_respond_error(
            d, ex, req->thread, 400,
            "policy %s has no concurrent rule: it takes no leases",
            c->pol->name);
        return -1;
    }
    return 0;
}

/*
 * /v1/refund and /v1/release: a change to one key under a policy's rules,
 * answered when the store has taken it (the worker does not wait), with
 * the key as a peek sees it after.
 */
static void change_api(rateld_t *d, rateld_worker_t *w,
                       ratel_http_exchange_t *ex,
                       const ratel_http_request_t *req, int release)
{
    rateld_gen_t *gen = rateld_take_gen(d, w);
    change_t *c = calloc(1, sizeof *c);
    rateld_params_t prm;
    int rc;

    if (!c) {
        rateld_respond_error(d, ex, req->thread, 500, "out of memory");
        return;
    }
    *c = (change_t){.d = d,
                    .ex = ex,
                    .thread = req->thread,
                    .gen = gen,
                    .release = release};
    if (change_check(d, gen, ex, req, c, &prm) != 0) {
        free(c);
        return;
    }
    c->renew = prm.renew;
    atomic_fetch_add(&gen->flights, 1);
    rc = release
             ? ratel_async_release(w->async, c->p.key, c->p.keylen, c->p.rules,
                                   ratel_clock_now_us(), (uint32_t)prm.lease,
                                   prm.renew ? RATEL_RENEW : 0, released, c)
             : ratel_async_refund(w->async, c->p.key, c->p.keylen, c->p.rules,
                                  ratel_clock_now_us(), (uint64_t)prm.cost,
                                  refunded, c);
    if (rc != 0)
        change_answer(c, rc, 0, NULL);
}

/*
 * The status a reported request was answered with: its one
 * X-Ratel-Response-Status header (100..599); -1 with why.
 */
static long report_status(const ratel_http_request_t *req, char *why,
                          size_t whylen)
{
    static const char name[] = "X-Ratel-Response-Status";
    const ratel_http_str_t *h = NULL;
    char msg[120];
    long status;

    if (ratel_http_header_count(req, name, &h) != 1) {
        snprintf(why, whylen,
                 "/v1/report needs one %s header: the status the reported "
                 "request was answered with (docs/login.md)",
                 name);
        return -1;
    }
    if ((status = ratel__status_read(h->p, h->n, msg, sizeof msg)) < 0)
        snprintf(why, whylen, "%s: %s", name, msg);
    return status;
}

/*
 * /v1/report: a gateway says what a request it let through was answered,
 * with the original-request headers of its /v1/auth and the status in
 * X-Ratel-Response-Status; each charge_on policy of the route that lists
 * the status is charged (docs/login.md). It takes the token refund takes:
 * a forged report would spend someone else's failures.
 */
static void report_api(rateld_t *d, rateld_worker_t *w,
                       ratel_http_exchange_t *ex,
                       const ratel_http_request_t *req, int64_t start)
{
    rateld_gen_t *gen = rateld_take_gen(d, w);
    const char *tokens[2] = {gen->config->api_token, gen->config->admin_token};
    char why[200];
    const rateld_route_t *route;
    rateld_view_t view;
    gateway_read_t g;
    long status;

    if ((tokens[0][0] || tokens[1][0]) &&
        require_token(d, ex, req, tokens, 2, "report",
                      "the api_token or the admin_token"))
        return;
    if ((status = report_status(req, why, sizeof why)) < 0) {
        rateld_respond_error(d, ex, req->thread, 400, "%s", why);
        return;
    }
    route = gateway_route(d, w, ex, req, &view, &g);
    if (!route)
        return;
    queue_route(d, w, ex, req, route, &view, start, status);
    cJSON_Delete((cJSON *)view.json);
}

/* A reset on its way to the store: what its answer needs. */
typedef struct reset_s {
    rateld_t *d;
    ratel_http_exchange_t *ex;
    unsigned thread;
    char policy[RATELD_NAME_MAX + 1];
    rateld_pending_t p;
} reset_t;

static void reset_done(void *ud, int rc)
{
    static const ratel_http_header_t json[] = {RATEL_HTTP_JSON_HEADER};
    reset_t *r = ud;

    if (atomic_load(&r->d->stopping)) {
        /* rateld stops: the exchange may be gone. */
    } else if (rc != 0) {
        rateld_respond_error(r->d, r->ex, r->thread,
                             rc == RATEL_EIO ? 503 : 500,
                             "the store failed: %s", ratel_strerror(rc));
    } else {
        ratel__log("info", "reset", "policy=%s", r->policy);
        rateld_respond(r->d, r->ex, r->thread, 200, json, 1,
                       "{\"reset\":true}\n", 15);
    }
    free(r);
}

static void reset_api(rateld_t *d, rateld_worker_t *w,
                      ratel_http_exchange_t *ex,
                      const ratel_http_request_t *req, int64_t start)
{
    rateld_gen_t *gen = rateld_take_gen(d, w);
    const char *admin = gen->config->admin_token;
    const rateld_policy_t *pol;
    rateld_params_t prm;
    reset_t *r;
    int rc;

    (void)start;
    if (!gen->config->admin_token[0]) {
        rateld_respond_error(d, ex, req->thread, 403,
                             "reset is disabled: no admin_token in the "
                             "configuration");
        return;
    }
    if (require_token(d, ex, req, &admin, 1, "reset", "the admin_token"))
        return;
    if (body_only(d, ex, req, "reset") ||
        !(pol = params_policy(d, gen, ex, req, &prm, 0))) /* reset */
        return;
    r = calloc(1, sizeof *r);
    if (!r) {
        rateld_respond_error(d, ex, req->thread, 500, "out of memory");
        return;
    }
    *r = (reset_t){.d = d, .ex = ex, .thread = req->thread};
    snprintf(r->policy, sizeof r->policy, "%s", pol->name);
    set_key(&r->p, pol->name, prm.key, prm.keylen);
    /* The worker does not wait: the answer follows from the store. */
    rc = ratel_async_reset(w->async, r->p.key, r->p.keylen, reset_done, r);
    if (rc != 0)
        reset_done(r, rc);
}

static void metrics_api(rateld_t *d, rateld_worker_t *w,
                        ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, int64_t start)
{
    unsigned thread = req->thread;
    static const ratel_http_header_t text[] = {
        {{"Content-Type", 12}, {"text/plain; version=0.0.4", 25}}};
    ratel_store_stats_t st;
    ratel_store_health_t health;
    size_t len = 0;
    char *body;

    (void)w;
    (void)start;
    ratel_store_stats(d->store, &st);
    ratel_store_health(d->store, &health);
    body = rateld_metrics_render(d->metrics, &st, &health,
                                 atomic_load(&d->reloads),
                                 atomic_load(&d->reload_failures), &len);
    if (!body) {
        rateld_respond_error(d, ex, thread, 500, "out of memory");
        return;
    }
    rateld_respond(d, ex, thread, 200, text, 1, body, len);
    free(body);
}

/* /readyz: 200 while the store is up, else 503 with the cause
   (ratel__ready_body: the store's health as last seen, never waiting; the
   watch thread keeps it right while no request comes). */
static void ready_api(rateld_t *d, rateld_worker_t *w,
                      ratel_http_exchange_t *ex,
                      const ratel_http_request_t *req, int64_t start)
{
    static const ratel_http_header_t json_type[] = {
        {{"Content-Type", 12}, {"application/json", 16}}};
    int ready = 0;
    char *body = ratel__ready_body(d->store, d->store_name, &ready);

    (void)w;
    (void)start;
    if (!body) {
        rateld_respond(d, ex, req->thread, 500, NULL, 0, "out of memory\n", 14);
        return;
    }
    rateld_respond(d, ex, req->thread, ready ? 200 : 503, json_type, 1, body,
                   strlen(body));
    free(body);
}

/* ----------------------------------------------------------- endpoints */

static void refund_api(rateld_t *d, rateld_worker_t *w,
                       ratel_http_exchange_t *ex,
                       const ratel_http_request_t *req, int64_t start)
{
    (void)start;
    change_api(d, w, ex, req, 0);
}

static void release_api(rateld_t *d, rateld_worker_t *w,
                        ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, int64_t start)
{
    (void)start;
    change_api(d, w, ex, req, 1);
}

static void healthz_api(rateld_t *d, rateld_worker_t *w,
                        ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, int64_t start)
{
    (void)w;
    (void)start;
    rateld_respond(d, ex, req->thread, 200, NULL, 0, "ok\n", 3);
}

/* Methods an endpoint takes (endpoint_t.methods); 0: any. */
enum { METHOD_GET = 1, METHOD_POST = 2 };
static const struct {
    const char *name;
    unsigned bit;
} method_names[] = {{"GET", METHOD_GET}, {"POST", METHOD_POST}};

typedef void endpoint_fn(rateld_t *d, rateld_worker_t *w,
                         ratel_http_exchange_t *ex,
                         const ratel_http_request_t *req, int64_t start);

/*
 * rateld's endpoints (docs/rateld.md says who should reach each): the
 * path (and, with `subpaths`, every path under it), the methods, the
 * handler. The 405's Allow header and the 404's list come from here.
 * State changes take POST only: a GET can be sent by any web page a
 * browser shows (an <img>), and proxies may repeat it. Nor does a
 * browser send them (`browsers` 0): any web page may POST a text/plain
 * body to an address its visitor's browser reaches (fetch's no-cors
 * mode), rateld's own loopback address included, and would spend or
 * give back a key's permits; a browser marks its requests with Origin
 * or Sec-Fetch-Site, which no application's HTTP client sends.
 */
typedef struct endpoint_s {
    const char *path;
    int subpaths;
    unsigned methods;
    int browsers;
    endpoint_fn *handler;
} endpoint_t;

static const endpoint_t endpoints[] = {
    {"/v1/acquire", 0, METHOD_GET | METHOD_POST, 0, acquire_api},
    /* Any method: a gateway's auth request keeps the client's; Envoy
       appends the original path. Its headers are a browser's by design. */
    {"/v1/auth", 1, 0, 1, auth_api},
    {"/v1/report", 0, METHOD_POST, 0, report_api},
    {"/v1/refund", 0, METHOD_POST, 0, refund_api},
    {"/v1/release", 0, METHOD_POST, 0, release_api},
    {"/v1/reset", 0, METHOD_POST, 0, reset_api},
    {"/metrics", 0, METHOD_GET, 1, metrics_api},
    {"/healthz", 0, METHOD_GET, 1, healthz_api},
    {"/readyz", 0, METHOD_GET, 1, ready_api},
};

/* Whether a browser sent `req` on behalf of a web page: it carries Origin
   (every cross-origin POST and fetch does), or Sec-Fetch-Site other than
   "none" (a page's request, not an address the user typed). */
static int from_a_page(const ratel_http_request_t *req)
{
    const ratel_http_str_t *site = ratel_http_header(req, "Sec-Fetch-Site");

    return ratel_http_header(req, "Origin") != NULL ||
           (site && !str_is(*site, "none"));
}

/* The endpoint at `path`, or NULL. */
static const endpoint_t *endpoint_at(ratel_http_str_t path)
{
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
        const endpoint_t *e = &endpoints[i];
        size_t n = strlen(e->path);
        if (str_is(path, e->path) ||
            (e->subpaths && path.n > n && memcmp(path.p, e->path, n) == 0 &&
             path.p[n] == '/'))
            return e;
    }
    return NULL;
}

/* The method's bit (METHOD_*), 0 for any other method. */
static unsigned method_bit(ratel_http_str_t method)
{
    for (size_t i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (str_is(method, method_names[i].name))
            return method_names[i].bit;
    return 0;
}

/* 405 with Allow: the endpoint's methods. */
static void not_allowed(rateld_t *d, ratel_http_exchange_t *ex,
                        const ratel_http_request_t *req, const endpoint_t *e)
{
    char allow[64] = "";
    size_t n = 0;

    for (size_t i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (e->methods & method_names[i].bit)
            n += (size_t)snprintf(allow + n, sizeof allow - n, "%s%s",
                                  n ? ", " : "", method_names[i].name);
    rateld_respond_error_with(d, ex, req->thread, 405,
                              (ratel_http_header_t){{"Allow", 5}, {allow, n}},
                              "method %.*s not allowed on %s; allowed: %s",
                              (int)(req->method.n > 16 ? 16 : req->method.n),
                              req->method.p, e->path, allow);
}

/* 404 naming the endpoints there are. */
static void not_found(rateld_t *d, ratel_http_exchange_t *ex,
                      const ratel_http_request_t *req)
{
    char p[128], list[200] = "";
    size_t n = 0;

    if (!str_copy(req->path, p, sizeof p))
        strcpy(p, "(long path)");
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              endpoints[i].path);
    rateld_respond_error(d, ex, req->thread, 404, "no endpoint %s; see %s", p,
                         list);
}

void rateld_handle(void *ud, ratel_http_exchange_t *ex,
                   const ratel_http_request_t *req)
{
    rateld_t *d = ud;
    const endpoint_t *e = endpoint_at(req->path);

    if (!e)
        not_found(d, ex, req);
    else if (e->methods && !(e->methods & method_bit(req->method)))
        not_allowed(d, ex, req, e);
    else if (!e->browsers && from_a_page(req))
        rateld_respond_error(d, ex, req->thread, 403,
                             "%s is not for browsers: this request came from "
                             "a web page (Origin or Sec-Fetch-Site); call it "
                             "from the application (docs/rateld.md)",
                             e->path);
    else
        e->handler(d, &d->workers[req->thread], ex, req, ratel_clock_now_us());
}
