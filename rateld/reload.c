/*
 * reload.c - configuration generations: what is derived from a loaded
 * configuration once (metrics indices, RateLimit-Policy values), the
 * reload that publishes a new one, and the freeing of old ones when no
 * worker can hold them any more (rateld.h explains the epochs).
 */
#include "app/ratelimit.h"
#include "rateld/erl.h"
#include "rateld/rateld.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rateld_gen_t *rateld_gen_new(rateld_t *d, rateld_config_t *config)
{
    rateld_gen_t *g = calloc(1, sizeof *g);
    size_t nerl = config->erl ? rateld_erl_count(config->erl) : 0;

    if (!g) {
        rateld_config_free(config);
        return NULL;
    }
    g->config = config;
    g->metric = calloc(config->npolicies + 1, sizeof *g->metric);
    g->erl_metric = calloc(nerl + 1, sizeof *g->erl_metric);
    g->policy_field = calloc(config->npolicies + 1, sizeof *g->policy_field);
    g->lease = calloc(config->npolicies + 1, sizeof *g->lease);
    if (!g->metric || !g->policy_field || !g->erl_metric || !g->lease) {
        rateld_gen_free(g);
        return NULL;
    }
    for (size_t i = 0; i < config->npolicies; i++) {
        const rateld_policy_t *p = &config->policies[i];
        size_t n = ratel__header_policy(p->name, &p->policy, NULL, 0);
        g->metric[i] = rateld_metrics_policy(d->metrics, p->name);
        if (p->leased)
            g->lease[i] =
                rateld_metrics_lease(d->metrics, g->metric[i], &p->lease);
        g->policy_field[i] = malloc(n + 1);
        if (!g->policy_field[i]) {
            rateld_gen_free(g);
            return NULL;
        }
        ratel__header_policy(p->name, &p->policy, g->policy_field[i], n + 1);
    }
    for (size_t i = 0; i < nerl; i++) {
        const rateld_erl_limit_t *l = rateld_erl_limit(config->erl, i);
        char name[RATELD_ERL_KEY_PATH_LEN + RATELD_ERL_KEY_MAX + 8];
        snprintf(name, sizeof name, "envoy:%s:%s", l->domain, l->key_path);
        g->erl_metric[i] = rateld_metrics_policy(d->metrics, name);
    }
    return g;
}

void rateld_gen_free(rateld_gen_t *g)
{
    if (!g)
        return;
    if (g->policy_field && g->config)
        for (size_t i = 0; i < g->config->npolicies; i++)
            free(g->policy_field[i]);
    free(g->policy_field);
    free(g->metric);
    free(g->lease);
    free(g->erl_metric);
    rateld_config_free(g->config);
    free(g);
}

/* Frees the retired configurations no worker can hold any more. */
static void reclaim(rateld_t *d)
{
    rateld_gen_t **link = &d->retired, *g;

    while ((g = *link)) {
        int used = atomic_load(&g->flights) != 0;
        for (unsigned t = 0; t < d->threads; t++)
            if (atomic_load(&d->workers[t].active) &&
                atomic_load(&d->workers[t].epoch) <= g->epoch)
                used = 1;
        if (used) {
            link = &g->next_retired;
        } else {
            *link = g->next_retired;
            rateld_gen_free(g);
        }
    }
}

/* Whether two configurations want the same store (a store is not rebuilt
   on reload: that needs a restart). */
static int same_store(const rateld_config_t *a, const rateld_config_t *b)
{
    if (a->store != b->store)
        return 0;
    if (a->store == RATELD_STORE_MEMORY)
        return a->memory.max_bytes == b->memory.max_bytes &&
               strcmp(a->memory.snapshot, b->memory.snapshot) == 0 &&
               a->memory.snapshot_interval_ms ==
                   b->memory.snapshot_interval_ms &&
               a->memory.on_bad_snapshot == b->memory.on_bad_snapshot;
    return strcmp(a->redis_url, b->redis_url) == 0 &&
           a->redis.on_failure == b->redis.on_failure &&
           a->redis.mode == b->redis.mode;
}

static int same_server(const rateld_config_t *a, const rateld_config_t *b)
{
    return strcmp(a->listen, b->listen) == 0 && a->threads == b->threads &&
           memcmp(&a->limits, &b->limits, sizeof a->limits) == 0 &&
           strcmp(a->envoy.listen, b->envoy.listen) == 0 &&
           memcmp(&a->envoy.limits, &b->envoy.limits, sizeof a->envoy.limits) ==
               0;
}

int rateld_reload(rateld_t *d, char *err, size_t errlen)
{
    rateld_config_t *c;
    rateld_gen_t *g, *old;

    pthread_mutex_lock(&d->reload_lock);
    if (rateld_config_load(d->config_path, &c, err, errlen) != 0)
        goto fail;
    old = atomic_load(&d->current);
    if (!same_store(old->config, c)) {
        snprintf(err, errlen,
                 "%s: the store settings changed; they take effect on "
                 "restart only (the running configuration is kept)",
                 d->config_path);
        rateld_config_free(c);
        goto fail;
    }
    if (!same_server(old->config, c))
        ratel__log("warn",
                   "listen, threads, limits and envoy.listen and its limits "
                   "take effect on restart",
                   "path=%s", d->config_path);
    g = rateld_gen_new(d, c);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    g->epoch = atomic_fetch_add(&d->epoch, 1) + 1;
    atomic_store(&d->current, g);
    old->next_retired = d->retired;
    d->retired = old;
    reclaim(d);
    atomic_fetch_add(&d->reloads, 1);
    pthread_mutex_unlock(&d->reload_lock);
    return 0;
fail:
    atomic_fetch_add(&d->reload_failures, 1);
    pthread_mutex_unlock(&d->reload_lock);
    return -1;
}
