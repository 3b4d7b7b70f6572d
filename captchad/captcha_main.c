/*
 * captcha_main.c - captchad: arguments, the stores, the notice database,
 * the sender thread and signals around the HTTP server (server/http).
 *
 *   captchad --config FILE           run
 *   captchad --check-config FILE     check FILE, print a summary
 *   captchad --version | --help
 *
 * SIGTERM and SIGINT stop taking connections, answer what was received
 * (up to 5 s), deliver the messages already queued, and exit 0. SIGHUP is
 * logged and ignored: captchad does not reload its configuration.
 */
#include "captchad/captcha.h"

#include "app/options.h"
#include "app/program.h"
#include "ratel_internal.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRAIN_MS 5000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: captchad --config FILE\n"
            "       captchad --check-config FILE\n"
            "       captchad --version | --help\n"
            "\n"
            "The SMS verification-code service on libratel: send and verify "
            "codes with\n"
            "per-phone and per-IP limits, notices in SQLite, a log or "
            "webhook sender.\n"
            "FILE is YAML (captchad/captchad.yaml documents every "
            "field).\n"
            "\n"
            "  -c, --config FILE        run with FILE\n"
            "  -t, --check-config FILE  check FILE, print a summary, exit 0 "
            "(valid) or 1\n"
            "  -V, --version            print the version\n"
            "  -h, --help               print this help\n"
            "\n"
            "Endpoints: POST /captcha/send /captcha/verify /login/fail, GET "
            "/login/needs-captcha\n"
            "/notices (admin token) /metrics /healthz. TERM and INT drain "
            "and exit 0.\n");
}

/*
 * Whether the configuration holds a secret (the admin token, a password
 * in the store's URL, credentials in the webhook's): the file should then
 * be readable by captchad alone.
 */
static int holds_secret(const captcha_config_t *c)
{
    return c->admin_token[0] ||
           (c->store_redis && ratel__url_mask(c->redis_url, NULL, 0)) ||
           (c->sender == CAPTCHA_SENDER_WEBHOOK &&
            ratel__url_mask(c->webhook_url, NULL, 0));
}

/*
 * --check-config: what start checks before it serves, but binding and
 * opening files. The loader checks every section (the store made as start
 * makes it: app/options.h); the address is resolved by
 * ratel_http_server_check, which ratel_http_server_new runs too.
 */
static int check_config(const char *path)
{
    captcha_config_t *c;
    char err[800], store[1200] = "memory", sender[1200] = "log";

    if (captcha_config_load(path, &c, err, sizeof err) != 0) {
        fprintf(stderr, "captchad: %s\n", err);
        return 1;
    }
    if (ratel_http_server_check(c->listen, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "captchad: %s: %s\n", path, err);
        captcha_config_free(c);
        return 1;
    }
    /* The summary goes to the journal when a unit runs it: no secret. */
    if (c->store_redis)
        ratel__url_mask(c->redis_url, store, sizeof store);
    if (c->sender == CAPTCHA_SENDER_WEBHOOK)
        ratel__url_mask(c->webhook_url, sender, sizeof sender);
    printf("%s: ok: listen %s, %u thread%s, store %s, sender %s, sqlite %s, "
           "code %u digits for %lld ms\n",
           path, c->listen, c->threads, c->threads == 1 ? "" : "s", store,
           sender, c->sqlite_path, c->code_length, (long long)c->code_ttl_ms);
    captcha_config_free(c);
    return 0;
}

/* The ratel store and the code store the config asks for. */
static int open_stores(captcha_t *app)
{
    const captcha_config_t *c = app->config;
    char err[600];
    int rc;

    if (!c->store_redis) {
        if (ratel__memory_store_open(&c->memory, &app->store) != 0)
            return -1;
        rc = captcha_codes_memory_new(&app->codes, c->code_max_entries,
                                      c->code_max_attempts);
        if (rc != 0)
            ratel__log("error", "cannot create the memory code store",
                       "reason=\"%s\"", ratel_strerror(rc));
        return rc ? -1 : 0;
    }
    {
        ratel_redis_options_t o = c->redis;
        o.lazy_connect = 1; /* start; the failure policy decides meanwhile */
        if (ratel__redis_tls_insecure(&o))
            ratel__log("warn", "redis store TLS is not verified",
                       "reason=\"%s\"", RATEL__TLS_INSECURE_WARNING);
        rc = ratel_store_redis_new(&app->store, &o, err, sizeof err);
    }
    if (rc == 0)
        rc = captcha_codes_redis_new(&app->codes, c->redis_url,
                                     c->redis.command_timeout_ms,
                                     c->code_max_attempts, err, sizeof err);
    if (rc != 0) {
        ratel__log("error", "cannot create the redis stores", "reason=\"%s\"",
                   err);
        return -1;
    }
    if (ratel_store_ping(app->store, err, sizeof err) != 0)
        ratel__log("warn", "redis does not answer yet", "reason=\"%s\"", err);
    return 0;
}

static int run(captcha_t *app, const char *path)
{
    const captcha_config_t *c = app->config;
    ratel_http_options_t o = {.listen = c->listen,
                              .threads = c->threads,
                              .limits = c->limits,
                              .handler = captcha_handle,
                              .refused = captcha_refused,
                              .ud = app};
    ratel__signals_t signals = {
        .name = "captchad", .drain_ms = DRAIN_MS, .ud = app};
    char err[800];
    int rc;

    app->log_budgets = calloc(c->threads, sizeof *app->log_budgets);
    if (!app->log_budgets || open_stores(app) != 0)
        return 1;
    /* Redis outages, and a memory store's snapshot that cannot be
       written, are logged once when they begin and once when they end. */
    app->watch =
        ratel__watch_start(app->store, c->store_redis ? "redis" : "memory");
    if (captcha_notices_open(&app->notices, c->sqlite_path, err, sizeof err) !=
        0) {
        ratel__log("error", "cannot open the notice database", "reason=\"%s\"",
                   err);
        return 1;
    }
    if (captcha_sender_start(&app->sender, app, err, sizeof err) != 0) {
        ratel__log("error", "cannot start the sender", "reason=\"%s\"", err);
        return 1;
    }
    /* Before any request: notices a crash left unsent are re-sent or
       failed and refunded, none left INIT. */
    if (captcha_sender_recover(app) != 0) {
        ratel__log("error", "cannot read the notice database", "path=%s",
                   c->sqlite_path);
        return 1;
    }
    if (ratel_http_server_new(&app->http, &o, err, sizeof err) != 0) {
        ratel__log("error", "cannot listen", "reason=\"%s\"", err);
        return 1;
    }
    /* Each worker calls the store on its own loop, never waiting. */
    app->asyncs = calloc(c->threads, sizeof *app->asyncs);
    if (!app->asyncs) {
        ratel__log("error", "cannot start", "reason=\"out of memory\"");
        return 1;
    }
    for (unsigned t = 0; t < c->threads; t++)
        if (ratel_async_new(&app->asyncs[t], app->store,
                            ratel_http_server_base(app->http, t), err,
                            sizeof err) != 0) {
            ratel__log("error", "cannot start", "reason=\"%s\"", err);
            return 1;
        }
    for (unsigned t = 0; t < c->threads; t++)
        if (captcha_codes_attach(app->codes, t,
                                 ratel_http_server_base(app->http, t)) != 0) {
            ratel__log("error", "cannot start", "reason=\"out of memory\"");
            return 1;
        }
    signals.http = app->http;
    if (ratel__signals_start(&signals) != 0) {
        ratel__log("error", "cannot start the signal thread", "%s", "");
        return 1;
    }
    ratel__log("info", "captchad started",
               "version=%s listen=%s port=%d threads=%u store=%s sender=%s "
               "sqlite=%s config=%s",
               CAPTCHA_VERSION, c->listen, ratel_http_server_port(app->http),
               c->threads, c->store_redis ? "redis" : "memory",
               c->sender == CAPTCHA_SENDER_LOG ? "log" : "webhook",
               c->sqlite_path, path);
    rc = ratel_http_server_run(app->http) == 0 ? 0 : 1;
    /* Joined, the signal thread is gone before the program frees what it
       uses. */
    ratel__signals_stop(&signals);
    return rc;
}

int main(int argc, char **argv)
{
    static const ratel__program_t program = {"captchad", CAPTCHA_VERSION, usage,
                                             check_config};
    const char *path;
    captcha_t app;
    char err[800];
    int rc = ratel__program_args(&program, argc, argv, &path);

    if (rc >= 0)
        return rc;
    memset(&app, 0, sizeof app);
    if (captcha_config_load(path, &app.config, err, sizeof err) != 0) {
        fprintf(stderr, "captchad: %s\n", err);
        return 1;
    }
    ratel__warn_deployment("captchad", path, holds_secret(app.config));
    /* Signals go to the signal thread only: block them before any thread
       starts (the sender, libcurl, the HTTP workers). */
    ratel__signals_block();
    curl_global_init(CURL_GLOBAL_DEFAULT);

    rc = run(&app, path);

    /* The server has stopped: store calls still pending are told (nothing
       is answered any more) before their exchanges go; then what is
       queued is delivered, and everything closed. */
    atomic_store(&app.stopping, 1);
    for (unsigned t = 0; app.asyncs && t < app.config->threads; t++)
        ratel_async_free(app.asyncs[t]);
    free(app.asyncs);
    if (app.codes)
        captcha_codes_detach(app.codes);
    captcha_sender_stop(app.sender);
    ratel_http_server_free(app.http);
    captcha_notices_close(app.notices);
    captcha_codes_free(app.codes);
    /* Nothing else uses the store: stop watching it before it goes. */
    ratel__watch_stop(app.watch);
    ratel__store_close(app.store);
    ratel__log("info", "captchad stopped", "status=%d", rc);
    captcha_config_free(app.config);
    free(app.log_budgets);
    curl_global_cleanup();
    return rc;
}
