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
#include "app/ratelimit.h"
#include "daemon/health.h"
#include "daemon/rateld.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
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
        ratel_memory_options_t o = {.max_bytes = c->memory_max_bytes};
        d->store_name = "memory";
        rc = ratel_store_memory_new(&d->store, &o);
        if (rc != 0) {
            rateld_log("error", "cannot create the memory store",
                       "reason=\"%s\"", ratel_strerror(rc));
            return -1;
        }
        return 0;
    }
    d->store_name = "redis";
    {
        ratel_redis_options_t o = c->redis;
        o.url = c->redis_url;
        /* Start even when Redis is down: /readyz says so, and the failure
           policy decides until it answers. */
        o.lazy_connect = 1;
        rc = ratel_store_redis_new(&d->store, &o, err, sizeof err);
        if (rc != 0) {
            rateld_log("error", "cannot create the redis store",
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

static void *signal_thread(void *arg)
{
    rateld_t *d = arg;
    sigset_t set;
    int sig;

    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    for (;;) {
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            char err[800];
            if (rateld_reload(d, err, sizeof err) == 0) {
                rateld_gen_t *g = atomic_load(&d->current);
                rateld_log("info", "configuration reloaded",
                           "path=%s policies=%zu routes=%zu", d->config_path,
                           g->config->npolicies, g->config->nroutes);
            } else {
                rateld_log("error", "reload refused, running configuration kept",
                           "reason=\"%s\"", err);
            }
            continue;
        }
        rateld_log("info", "stopping", "signal=%s drain_ms=%d",
                   sig == SIGTERM ? "TERM" : "INT", DRAIN_MS);
        ratel_http_server_stop(d->http, DRAIN_MS);
        return NULL;
    }
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
            "Endpoints: /v1/acquire /v1/auth /v1/refund /v1/reset /metrics "
            "/healthz /readyz\n"
            "(docs/rateld.md).\n");
}

static int check_config(const char *path)
{
    rateld_config_t *c;
    char err[800];

    if (rateld_config_load(path, &c, err, sizeof err) != 0) {
        fprintf(stderr, "rateld: %s\n", err);
        return 1;
    }
    printf("%s: ok: %zu policies, %zu routes, store %s, listen %s, %u "
           "thread%s\n",
           path, c->npolicies, c->nroutes,
           c->store == RATELD_STORE_MEMORY ? "memory" : c->redis_url,
           c->listen, c->threads, c->threads == 1 ? "" : "s");
    rateld_config_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 't'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *path = NULL;
    rateld_config_t *config;
    rateld_t d;
    char err[800];
    pthread_t sig_tid;
    rateld_health_t *watch = NULL;
    sigset_t set;
    int opt, rc = 1;

    while ((opt = getopt_long(argc, argv, "c:t:Vh", longs, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 't':
            return check_config(optarg);
        case 'V':
            printf("rateld %s\n", RATELD_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rateld: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!path) {
        fprintf(stderr, "rateld: --config FILE is required\n");
        usage(stderr);
        return 2;
    }
    if (rateld_config_load(path, &config, err, sizeof err) != 0) {
        fprintf(stderr, "rateld: %s\n", err);
        return 1;
    }

    /* Signals go to the signal thread only: block them everywhere first. */
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    memset(&d, 0, sizeof d);
    pthread_mutex_init(&d.reload_lock, NULL);
    d.config_path = path;
    d.threads = config->threads ? config->threads : 1;
    d.metrics = rateld_metrics_new(d.threads);
    d.workers = calloc(d.threads, sizeof *d.workers);
    if (!d.metrics || !d.workers) {
        fprintf(stderr, "rateld: out of memory\n");
        return 1;
    }
    for (unsigned t = 0; t < d.threads; t++) {
        d.workers[t].pending =
            calloc(RATELD_BATCH_MAX, sizeof *d.workers[t].pending);
        d.workers[t].items =
            calloc(RATELD_BATCH_MAX, sizeof *d.workers[t].items);
        if (!d.workers[t].pending || !d.workers[t].items) {
            fprintf(stderr, "rateld: out of memory\n");
            return 1;
        }
    }
    if (open_store(&d, config) != 0)
        goto out;
    {
        rateld_gen_t *g = rateld_gen_new(&d, config);
        ratel_http_options_t o = {.threads = d.threads,
                                  .handler = rateld_handle,
                                  .flush = rateld_flush,
                                  .ud = &d};
        config = NULL; /* the generation owns it now (or freed it) */
        if (!g) {
            fprintf(stderr, "rateld: out of memory\n");
            goto out;
        }
        atomic_store(&d.current, g);
        o.listen = g->config->listen;
        o.limits = g->config->limits;
        if (ratel_http_server_new(&d.http, &o, err, sizeof err) != 0) {
            rateld_log("error", "cannot listen", "reason=\"%s\"", err);
            goto out;
        }
        rateld_log("info", "rateld started",
                   "version=%s listen=%s port=%d threads=%u store=%s "
                   "policies=%zu routes=%zu config=%s",
                   RATELD_VERSION, g->config->listen,
                   ratel_http_server_port(d.http), d.threads, d.store_name,
                   g->config->npolicies, g->config->nroutes, path);
    }
    /* Only a Redis store changes health (a memory store is always up). */
    if (strcmp(d.store_name, "memory") != 0)
        watch = rateld_health_start(d.store, d.store_name);
    if (pthread_create(&sig_tid, NULL, signal_thread, &d) != 0) {
        fprintf(stderr, "rateld: cannot start the signal thread\n");
        goto out;
    }
    rc = ratel_http_server_run(d.http) == 0 ? 0 : 1;
    /* The signal thread ends after a stop; if the server ended otherwise,
       wake it so that it does. Joined, it is gone before everything is
       freed (a thread still running at exit leaks its stack). */
    pthread_kill(sig_tid, SIGTERM);
    pthread_join(sig_tid, NULL);
    rateld_log("info", "rateld stopped", "status=%d", rc);
out:
    ratel_http_server_free(d.http);
    /* No worker uses the store any more: stop watching it before it goes. */
    rateld_health_stop(watch);
    {
        rateld_gen_t *g = atomic_load(&d.current), *r;
        rateld_gen_free(g);
        while ((r = d.retired)) {
            d.retired = r->next_retired;
            rateld_gen_free(r);
        }
        rateld_config_free(config); /* when no generation took it */
    }
    ratel_store_free(d.store);
    for (unsigned t = 0; t < d.threads; t++) {
        free(d.workers[t].pending);
        free(d.workers[t].items);
    }
    free(d.workers);
    rateld_metrics_free(d.metrics);
    pthread_mutex_destroy(&d.reload_lock);
    return rc;
}
