/*
 * config_envoy.c - the envoy: section of rateld's configuration (Envoy's
 * rate limit service, docs/envoy.md) and the loading of the
 * envoyproxy/ratelimit files it names (rateld/erl_dir.c and erl_load.c read
 * them).
 */
#include "rateld/config_private.h"
#include "rateld/erl.h"
#include "ratel_internal.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- envoy */

static int check_algorithm(const char *text, char *why, size_t whylen)
{
    char names[96];

    if (rateld_erl_algorithm_ok(text))
        return 0;
    ratel__algo_list(RATEL_ALGO_RATE, "", ", ", names, sizeof names);
    snprintf(why, whylen, "\"%.32s\"; accepted: %s", text, names);
    return -1;
}

static const char *const domain_words[] = {"error", "allow", NULL};
static const int domain_values[] = {0, 1};
#define ENVOY(f) RATEL__FIELD(rateld_envoy_t, f)
static const ratel__option_t envoy_options[] = {
    {"listen", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(listen), NULL, NULL,
     ratel__check_listen},
    {"config_dir", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(config_dir), NULL, NULL,
     NULL},
    {"algorithm", RATEL__OPTION_STRING, 0, 0, 0, ENVOY(algorithm), NULL, NULL,
     check_algorithm},
    {"unknown_domain", RATEL__OPTION_ENUM, 0, 0, 0, ENVOY(unknown_domain_allow),
     domain_words, domain_values, NULL},
    {"response_headers", RATEL__OPTION_BOOL, 0, 0, 0, ENVOY(response_headers),
     NULL, NULL, NULL},
    {"merge_domain_config", RATEL__OPTION_BOOL, 0, 0, 0,
     ENVOY(merge_domain_config), NULL, NULL, NULL},
    {"max_message_bytes", RATEL__OPTION_SIZE, 64, 16777216, 1,
     ENVOY(limits.max_message_bytes), NULL, NULL, NULL},
    {"max_streams", RATEL__OPTION_UINT, 1, 100000, 1, ENVOY(limits.max_streams),
     NULL, NULL, NULL},
    {"max_header_list_bytes", RATEL__OPTION_SIZE, 1024, 1048576, 1,
     ENVOY(limits.max_header_list_bytes), NULL, NULL, NULL},
    {"idle_timeout_ms", RATEL__OPTION_MSEC, 1, 86400000, 1,
     ENVOY(limits.idle_timeout_ms), NULL, NULL, NULL},
    {"max_resets_per_second", RATEL__OPTION_UINT, 1, 1000000, 1,
     ENVOY(limits.max_resets_per_second), NULL, NULL, NULL},
};

int rateld__read_envoy(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_envoy_t *e = &r->config->envoy;

    e->line = node->line;
    if (ratel__yaml_options(&r->ctx, node, "envoy", envoy_options,
                            COUNT(envoy_options), e, NULL))
        return -1;
    if (!e->listen[0] || !e->config_dir[0])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "envoy: needs listen (the gRPC address, e.g. "
                                "127.0.0.1:8081) and config_dir (the "
                                "directory of envoyproxy/ratelimit files)");
    return 0;
}

int rateld__load_erl(rateld_config_t *c, const char *path, char *err,
                     size_t errlen)
{
    const char *dir = c->envoy.config_dir, *slash = strrchr(path, '/');
    char full[1200];

    if (dir[0] != '/' && slash)
        snprintf(full, sizeof full, "%.*s/%s", (int)(slash - path), path, dir);
    else
        snprintf(full, sizeof full, "%s", dir);
    return rateld_erl_load_dir(full, c->envoy.algorithm,
                               c->envoy.merge_domain_config, &c->erl, err,
                               errlen);
}
