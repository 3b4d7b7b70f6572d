/*
 * config_private.h - what the files of rateld's configuration reader
 * share: config.c (the file, policies, overrides, store, auth),
 * config_routes.c (routes and their look-up) and config_envoy.c (the
 * envoy: section and envoyproxy/ratelimit's files). Nothing else includes
 * it.
 */
#ifndef RATELD_CONFIG_PRIVATE_H
#define RATELD_CONFIG_PRIVATE_H

#include "app/options.h"
#include "app/yaml.h"
#include "rateld/config.h"

#define COUNT(a) RATEL__COUNT(a)
/* A field of the configuration, for a table entry. */
#define CONFIG(f) RATEL__FIELD(rateld_config_t, f)
/* Bounds on what one file may define (real ones define a few dozen). */
#define ROUTES_MAX 4096

/* A policy name and its place in the file. */
typedef struct name_ref_s {
    const char *text;
    size_t len;
    size_t index;
} name_ref_t;

/* Messages, and the configuration being filled. */
typedef struct reader_s {
    ratel__yaml_ctx_t ctx;
    rateld_config_t *config;
    name_ref_t *names; /* policy names sorted (read_policies), for routes */
    size_t nnames;
} reader_t;

/* By name (bytes, then length): the order of look-ups (name_ref_t). */
int rateld__compare_name(const void *a, const void *b);

/* An HTTP token character (RFC 9110): what a header name is made of. */
int rateld__tchar(unsigned char ch);

/* routes: (config_routes.c), after the policies they name. */
int rateld__read_routes(reader_t *r, const ratel__yaml_node_t *node);

/* envoy: (config_envoy.c). */
int rateld__read_envoy(reader_t *r, const ratel__yaml_node_t *node);

/* Loads envoy.config_dir (relative to the directory of the file at `path`
   unless absolute) into c->erl; 0, or -1 with the reason in err. */
int rateld__load_erl(rateld_config_t *c, const char *path, char *err,
                     size_t errlen);

#endif /* RATELD_CONFIG_PRIVATE_H */
