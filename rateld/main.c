/*
 * main.c - rateld: arguments, logging, the store, configuration reloads and
 * signals around the HTTP server (handlers.c has the endpoints).
 *
 *   rateld --config FILE           run
 *   rateld --check-config FILE     load and check FILE, print a summary
 *   rateld --version | --help
 *
 * SIGHUP reloads FILE (an invalid file is refused and the running
 * configuration kept, with the reason logged); SIGTERM and SIGINT stop
 * taking connections, answer what was received (up to 5 s) and exit 0.
 */
#include "app/options.h"
#include "app/program.h"
#include "app/ratelimit.h"
#include "app/watch.h"
#include "rateld/erl.h"
#include "rateld/rateld.h"
#include "rateld/rlqs.h"
#include "ratel_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DRAIN_MS 5000

/* -------------------------------------------------------------- store */

static int open_store(rateld_t *d, const rateld_config_t *c)
{
    char err[600];
    int rc;

    if (c->store == RATELD_STORE_MEMORY) {
        d->store_name = "memory";
        return ratel__memory_store_open(&c->memory, &d->store);
    }
    d->store_name = "redis";
    {
        ratel_redis_options_t o = c->redis;
        o.url = c->redis_url;
        /* Start even when Redis is down: /readyz says so, and the failure
           policy decides until it answers. */
        o.lazy_connect = 1;
        if (ratel__redis_tls_insecure(&o))
            ratel__log("warn", "redis store TLS is not verified",
                       "reason=\"%s\"", RATEL__TLS_INSECURE_WARNING);
        rc = ratel_store_redis_new(&d->store, &o, err, sizeof err);
        if (rc != 0) {
            ratel__log("error", "cannot create the redis store",
                       "reason=\"%s\"", err);
            return -1;
        }
        /* One PING now, so that /readyz is right from the first request;
           a failure is logged as "store down" by the health thread. */
        ratel_store_ping(d->store, NULL, 0);
    }
    return 0;
}

/* ------------------------------------------------------------ signals */

/* SIGHUP, on the signal thread: the configuration file again. */
static int reload(void *ud)
{
    rateld_t *d = ud;
    char err[800];

    if (rateld_reload(d, err, sizeof err) == 0) {
        rateld_gen_t *g = atomic_load(&d->current);
        ratel__log("info", "configuration reloaded",
                   "path=%s policies=%zu routes=%zu", d->config_path,
                   g->config->npolicies, g->config->nroutes);
        return 0;
    }
    ratel__log("error", "reload refused, running configuration kept",
               "reason=\"%s\"", err);
    return -1;
}

/* --------------------------------------------------------------- main */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rateld --config FILE\n"
            "       rateld --check-config FILE\n"
            "       rateld --version | --help\n"
            "\n"
            "The ratel rate-limit daemon: a decision API, an nginx "
            "auth_request endpoint,\n"
            "429 with RateLimit headers, Prometheus metrics. FILE is YAML "
            "(docs/config.md;\n"
            "examples/rateld.yaml is a start).\n"
            "\n"
            "  -c, --config FILE        run with FILE\n"
            "  -t, --check-config FILE  check FILE, print a summary, exit 0 "
            "(valid) or 1\n"
            "  -V, --version            print the version\n"
            "  -h, --help               print this help\n"
            "\n"
            "Signals: HUP reloads FILE (an invalid one is refused and the "
            "running one kept),\n"
            "TERM and INT stop accepting, answer what was received, and "
            "exit.\n"
            "Endpoints: /v1/acquire /v1/auth /v1/refund /v1/release "
            "/v1/reset /metrics /healthz /readyz\n"
            "(docs/rateld.md).\n");
}

/*
 * Whether the configuration holds a secret (a token, a password in the
 * store's URL): the file should then be readable by rateld alone.
 */
static int holds_secret(const rateld_config_t *c)
{
    return c->admin_token[0] || c->api_token[0] ||
           (c->store != RATELD_STORE_MEMORY &&
            ratel__url_mask(c->redis_url, NULL, 0));
}

/* Each leased policy on a line of its own: its overshoot bound in words
   and numbers (docs/leases.md), or why the lease does nothing. */
static void print_leases(const rateld_config_t *c)
{
    char text[600];

    for (size_t i = 0; i < c->npolicies; i++) {
        const rateld_policy_t *p = &c->policies[i];
        if (!p->leased)
            continue;
        if (c->store == RATELD_STORE_MEMORY)
            printf("%s: lease does nothing: the memory store decides every "
                   "request itself (no overshoot)\n",
                   p->name);
        else if (ratel_lease_bound(&p->policy, &p->lease, NULL, text,
                                   sizeof text) == 0)
            printf("%s: %s\n", p->name, text);
    }
}

/*
 * --check-config: what start checks before it serves, but binding. The
 * loader checks every section (the store made as start makes it:
 * app/options.h); the addresses are resolved and told apart by
 * ratel_http_server_check, which ratel_http_server_new runs too.
 */
static int check_config(const char *path)
{
    rateld_config_t *c;
    char err[800], store[1200] = "memory";

    if (rateld_config_load(path, &c, err, sizeof err) != 0) {
        fprintf(stderr, "rateld: %s\n", err);
        return 1;
    }
    if (ratel_http_server_check(c->listen,
                                c->envoy.listen[0] ? c->envoy.listen : NULL,
                                err, sizeof err) != 0) {
        fprintf(stderr, "rateld: %s: %s\n", path, err);
        rateld_config_free(c);
        return 1;
    }
    /* The summary goes to the journal when a unit runs it: no secret. */
    if (c->store != RATELD_STORE_MEMORY)
        ratel__url_mask(c->redis_url, store, sizeof store);
    printf("%s: ok: %zu policies, %zu routes, store %s, listen %s, %u "
           "thread%s\n",
           path, c->npolicies, c->nroutes, store, c->listen, c->threads,
           c->threads == 1 ? "" : "s");
    print_leases(c);
    rateld_config_free(c);
    return 0;
}

/* The daemon's threads' shared parts: metrics and each worker's batch. */
static int daemon_init(rateld_t *d, const char *path, unsigned threads)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->reload_lock, NULL);
    d->config_path = path;
    d->threads = threads ? threads : 1;
    d->metrics = rateld_metrics_new(d->threads);
    d->workers = calloc(d->threads, sizeof *d->workers);
    if (!d->metrics || !d->workers)
        return -1;
    for (unsigned t = 0; t < d->threads; t++) {
        d->workers[t].pending =
            calloc(RATELD_BATCH_MAX, sizeof *d->workers[t].pending);
        d->workers[t].items =
            calloc(RATELD_BATCH_MAX, sizeof *d->workers[t].items);
        if (!d->workers[t].pending || !d->workers[t].items)
            return -1;
    }
    return 0;
}

/*
 * The first generation of the configuration (which takes `config`, or
 * frees it) and the listening server. 0, or -1 with the reason logged.
 */
static int daemon_listen(rateld_t *d, rateld_config_t *config, const char *path)
{
    char err[800];
    rateld_gen_t *g = rateld_gen_new(d, config);
    ratel_http_options_t o = {.threads = d->threads,
                              .handler = rateld_handle,
                              .flush = rateld_flush,
                              .refused = rateld_refused,
                              .ud = d};

    if (!g) {
        fprintf(stderr, "rateld: out of memory\n");
        return -1;
    }
    atomic_store(&d->current, g);
    o.listen = g->config->listen;
    o.limits = g->config->limits;
    if (g->config->envoy.listen[0]) {
        o.grpc_listen = g->config->envoy.listen;
        o.grpc_handler = rateld_grpc_handle;
        o.grpc_limits = g->config->envoy.limits;
        o.grpc_streams = &rateld_rlqs_method;
        o.ngrpc_streams = 1;
    }
    if (ratel_http_server_new(&d->http, &o, err, sizeof err) != 0) {
        ratel__log("error", "cannot listen", "reason=\"%s\"", err);
        return -1;
    }
    if (rateld_rlqs_start(d) != 0) {
        ratel__log("error", "cannot start", "reason=\"out of memory\"");
        return -1;
    }
    /* Each worker calls the store on its own loop, never waiting. */
    for (unsigned t = 0; t < d->threads; t++) {
        if (ratel_async_new(&d->workers[t].async, d->store,
                            ratel_http_server_base(d->http, t), err,
                            sizeof err) != 0) {
            ratel__log("error", "cannot start", "reason=\"%s\"", err);
            return -1;
        }
    }
    ratel__log("info", "rateld started",
               "version=%s listen=%s port=%d threads=%u store=%s "
               "policies=%zu routes=%zu grpc_port=%d envoy_limits=%zu "
               "config=%s",
               RATELD_VERSION, g->config->listen,
               ratel_http_server_port(d->http), d->threads, d->store_name,
               g->config->npolicies, g->config->nroutes,
               ratel_http_server_grpc_port(d->http),
               g->config->erl ? rateld_erl_count(g->config->erl) : 0, path);
    return 0;
}

/* Everything daemon_init, open_store and daemon_listen made. */
static void daemon_free(rateld_t *d)
{
    rateld_gen_t *g = atomic_load(&d->current), *r;

    /* Flights still on their way are told (nothing is answered any more)
       before their exchanges and configurations go. */
    atomic_store(&d->stopping, 1);
    for (unsigned t = 0; d->workers && t < d->threads; t++)
        ratel_async_free(d->workers[t].async);
    rateld_rlqs_stop(d);
    ratel_http_server_free(d->http);
    rateld_rlqs_free(d);
    rateld_gen_free(g);
    while ((r = d->retired)) {
        d->retired = r->next_retired;
        rateld_gen_free(r);
    }
    ratel__store_close(d->store);
    for (unsigned t = 0; d->workers && t < d->threads; t++) {
        free(d->workers[t].pending);
        free(d->workers[t].items);
        rateld_rls_pool_drain(&d->workers[t].rls_pool);
    }
    free(d->workers);
    rateld_metrics_free(d->metrics);
    pthread_mutex_destroy(&d->reload_lock);
}

int main(int argc, char **argv)
{
    static const ratel__program_t program = {"rateld", RATELD_VERSION, usage,
                                             check_config};
    const char *path;
    rateld_config_t *config;
    rateld_t d;
    char err[800];
    ratel__signals_t signals = {.name = "rateld", .drain_ms = DRAIN_MS};
    ratel__watch_t *watch = NULL;
    int rc = ratel__program_args(&program, argc, argv, &path);

    if (rc >= 0)
        return rc;
    rc = 1;
    if (rateld_config_load(path, &config, err, sizeof err) != 0) {
        fprintf(stderr, "rateld: %s\n", err);
        return 1;
    }
    ratel__warn_deployment("rateld", path, holds_secret(config));
    /* Signals go to the signal thread only: block them everywhere first. */
    ratel__signals_block();
    if (daemon_init(&d, path, config->threads) != 0) {
        fprintf(stderr, "rateld: out of memory\n");
        rateld_config_free(config);
        goto out;
    }
    if (open_store(&d, config) != 0) {
        rateld_config_free(config);
        goto out;
    }
    if (daemon_listen(&d, config, path) != 0)
        goto out;
    /* A Redis store changes health; a memory store warns while its
       snapshot cannot be written. */
    watch = ratel__watch_start(d.store, d.store_name);
    signals.http = d.http;
    signals.reload = reload;
    signals.ud = &d;
    if (ratel__signals_start(&signals) != 0) {
        fprintf(stderr, "rateld: cannot start the signal thread\n");
        goto out;
    }
    rc = ratel_http_server_run(d.http) == 0 ? 0 : 1;
    /* Joined, the signal thread is gone before everything is freed (a
       thread still running at exit leaks its stack). */
    ratel__signals_stop(&signals);
    rateld_log_budgets_drain(&d);
    ratel__log("info", "rateld stopped", "status=%d", rc);
out:
    /* No worker uses the store any more: stop watching it before it goes. */
    ratel__watch_stop(watch);
    daemon_free(&d);
    return rc;
}
