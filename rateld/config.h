/*
 * config.h - rateld's configuration: one YAML file (docs/config.md).
 *
 * Parsed with libyaml (Debian's libyaml-dev) into plain structs, checked
 * as a whole, and refused with "FILE:LINE: reason" on the first problem:
 * unknown fields, wrong types, bad rules, duplicate names, bad CIDRs,
 * routes naming unknown policies. A config is immutable once loaded; a
 * reload builds a new one and swaps it in.
 */
#ifndef RATELD_CONFIG_H
#define RATELD_CONFIG_H

#include "app/address.h"
#include "app/keys.h"
#include "app/status.h"
#include "rateld/origin.h"
#include "http/http.h"
#include "ratel.h"
#include "ratel_internal.h"

#include <stddef.h>
#include <stdint.h>

#define RATELD_NAME_MAX 64   /* policy names: [A-Za-z0-9_.-]{1,63} */
#define RATELD_FIELD_MAX 128 /* header names routes match on */
#define RATELD_ROUTE_POLICIES_MAX 8

#define RATELD_OVERRIDES_MAX 16
#define RATELD_OVERRIDE_VALUES_MAX 4096

/*
 * An override: when key source `when` (or the policy's own key, kind
 * RATEL__KEY_SELF) reads one of `values`, the request is exempt or
 * limited by `policy` instead of the policy's rules. The store key stays
 * the policy's: a key that moves between rule sets keeps the counts of
 * the rules both have (the core converts the state).
 */
typedef struct rateld_override_s {
    ratel__key_part_t when;
    char **values; /* sorted (strcmp), malloc'd with the config; read
                      as requests are (a |phone value in E.164) */
    size_t nvalues;
    int exempt;            /* allowed without a decision */
    ratel_policy_t policy; /* unless exempt */
    char field[512];       /* its RateLimit-Policy value */
    int line;
} rateld_override_t;

typedef struct rateld_policy_s {
    char name[RATELD_NAME_MAX];
    ratel_policy_t policy;
    ratel__key_t key; /* its sources, on_missing, fold_case (app/keys.h) */
    int shadow;       /* decide, log and count, but always allow */
    int line;         /* where it was defined, for messages */
    int uses_json;    /* a key part or an override reads json: */
    rateld_override_t *overrides; /* first match wins */
    size_t noverrides;
    int64_t max_wait_ms;           /* /v1/auth reserves: the gateway waits */
    int charges_on;                /* charge_on: given */
    ratel__status_set_t charge_on; /* /v1/auth checks, /v1/report charges */
    int leased;                    /* lease: given (a Redis store) */
    ratel_lease_t lease;           /* its settings (counters unused here) */
} rateld_policy_t;

#define RATELD_ROUTE_HEADERS_MAX 8

/* A header a route requires: NAME with exactly VALUE (after trimming). */
typedef struct rateld_match_header_s {
    char name[RATELD_FIELD_MAX];
    char value[256];
} rateld_match_header_t;

typedef struct rateld_route_s {
    char method[16];  /* "" matches any method */
    char prefix[256]; /* path prefix, starts with '/' */
    char host[256];   /* "" any; "api.example.com" exactly (no port, any
                         case); "*.example.com" any name under it */
    rateld_match_header_t headers[RATELD_ROUTE_HEADERS_MAX];
    size_t nheaders; /* all must be present with their values */
    size_t policies[RATELD_ROUTE_POLICIES_MAX]; /* indices in policies */
    size_t npolicies;
} rateld_route_t;

/* What /v1/auth answers a request it will not decide. */
typedef enum rateld_unmatched_e {
    RATELD_UNMATCHED_DENY = 0, /* the default: refused (403), logged */
    RATELD_UNMATCHED_ALLOW     /* allowed (200), logged and counted */
} rateld_unmatched_t;

/* The `auth:` section: how /v1/auth answers gateways. */
typedef struct rateld_auth_s {
    /* Status of a rate-limited request: 429 for gateways that pass the
       auth answer through (Caddy, Traefik, HAProxy, Envoy), 403 for nginx
       auth_request (which passes only 2xx, 401 and 403; every refusal is
       then 403 and X-Ratel-Reason tells them apart). Default 429. */
    int deny_status;
    rateld_unmatched_t unmatched; /* a request no route matches */
    /* Which headers carry the original request (rateld/origin.h); zeroed:
       not set, any known one, ambiguity refused. */
    rateld_gateway_t gateway;
} rateld_auth_t;

/* The `envoy:` section: Envoy's rate limit service on a gRPC listener
   (docs/envoy.md). */
typedef struct rateld_envoy_s {
    char listen[256];           /* "": no gRPC listener */
    char config_dir[512];       /* envoyproxy/ratelimit's files; a relative
                                   path is relative to the config file */
    char algorithm[16];         /* for limits that do not say; "sliding" */
    int unknown_domain_allow;   /* unknown_domain: allow (else error) */
    int response_headers;       /* RateLimit fields in the answers; default 1 */
    int merge_domain_config;    /* a domain's files merged (ERL's
                                   MERGE_DOMAIN_CONFIG); default 0: refused */
    ratel_grpc_limits_t limits; /* 0 = grpc.h default */
    int line;
} rateld_envoy_t;

struct rateld_erl_s;
struct rateld_rlqs_config_s;

typedef enum rateld_store_kind_e {
    RATELD_STORE_MEMORY = 0,
    RATELD_STORE_REDIS
} rateld_store_kind_t;

typedef struct rateld_config_s {
    char path[512];             /* the file it came from */
    char listen[256];           /* default "127.0.0.1:8080" */
    unsigned threads;           /* default 1 */
    ratel_http_limits_t limits; /* `limits:` section; 0 = http.h default */
    rateld_store_kind_t store;  /* default memory */
    /* store.max_bytes (default 64 MiB) and the snapshot settings */
    ratel__memory_settings_t memory;
    ratel_redis_options_t redis; /* url etc.; strings point into redis_url */
    char redis_url[1024];
    char admin_token[256]; /* "" : reset is refused (403) */
    /* "" : refund and release need no token (unless admin_token is set:
       then either token) */
    char api_token[256];
    ratel__trusted_t trusted; /* trusted_proxies */
    rateld_policy_t *policies;
    size_t npolicies;
    rateld_route_t *routes;
    size_t nroutes;
    rateld_auth_t auth;
    rateld_envoy_t envoy;
    /* envoy.config_dir's files, loaded by rateld_config_load (NULL when
       there is no envoy section, or from rateld_config_parse). */
    struct rateld_erl_s *erl;
    /* The rlqs: section (rlqs.h); NULL when there is none. */
    struct rateld_rlqs_config_s *rlqs;
} rateld_config_t;

/*
 * Reads and checks the YAML file at `path`, and envoy.config_dir's files
 * when it names one. Returns 0 with *out (free with rateld_config_free),
 * or -1 with "PATH:LINE: reason" in err.
 */
int rateld_config_load(const char *path, rateld_config_t **out, char *err,
                       size_t errlen);

/* The same from `len` bytes of text; `name` stands for the file in
   messages. */
int rateld_config_parse(const char *text, size_t len, const char *name,
                        rateld_config_t **out, char *err, size_t errlen);

void rateld_config_free(rateld_config_t *config);

/* The names of the config's policies, ", " between them, into buf (cut
   with "..." when they do not fit): for messages naming what exists. */
void rateld_config_policy_names(const rateld_config_t *config, char *buf,
                                size_t len);

/* The policy named `name` (len bytes), or NULL. */
const rateld_policy_t *rateld_config_policy(const rateld_config_t *config,
                                            const char *name, size_t len);

/* What a route is matched against (strings not NUL-terminated). */
typedef struct rateld_route_query_s {
    ratel_http_str_t method;
    ratel_http_str_t path; /* without the query */
    ratel_http_str_t host; /* the original Host, port included or not */
    const ratel_http_request_t *req; /* headers; may be NULL */
} rateld_route_query_t;

/*
 * The route for a request: among the routes whose method, host, headers
 * and path prefix all match, the longest prefix; for the same prefix, the
 * more specific (a host, then a method, then more headers); NULL when
 * none. A GET route matches HEAD too (after a HEAD route), as backends
 * run a GET handler for HEAD. A prefix matches at a segment boundary:
 * "/api" matches "/api", "/api/x", "/api?x" and "/api.json" (a format
 * suffix), not "/apix".
 */
const rateld_route_t *rateld_config_route(const rateld_config_t *config,
                                          const rateld_route_query_t *q);

/*
 * Whether `req` carries a header some route matches on (`headers:`) more
 * than once: 1 with its name in *name (the config's spelling), else 0.
 * Which of two a backend reads (first, last, both joined) is its own
 * choice, so such a request is refused rather than matched by one.
 */
int rateld_config_route_header_twice(const rateld_config_t *config,
                                     const ratel_http_request_t *req,
                                     const char **name);

#endif /* RATELD_CONFIG_H */
