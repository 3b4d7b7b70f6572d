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

#include "http/http.h"
#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#define RATELD_NAME_MAX 64       /* policy names: [A-Za-z0-9_.-]{1,63} */
#define RATELD_KEY_PARTS_MAX 8   /* parts of one key source list */
#define RATELD_FIELD_MAX 128     /* header / query parameter names */
#define RATELD_ROUTE_POLICIES_MAX 8
#define RATELD_TRUSTED_MAX 64

/* Where a policy's key comes from. */
typedef enum rateld_key_kind_e {
    RATELD_KEY_IP,     /* the client address (trusted proxies applied) */
    RATELD_KEY_HEADER, /* a request header's value */
    RATELD_KEY_QUERY,  /* a query parameter's decoded value */
    RATELD_KEY_PATH,   /* the request path (without the query) */
    RATELD_KEY_GLOBAL  /* one bucket for everyone */
} rateld_key_kind_t;

typedef struct rateld_key_part_s {
    rateld_key_kind_t kind;
    char name[RATELD_FIELD_MAX]; /* header or parameter name; "" else */
} rateld_key_part_t;

/* A request whose key source is absent (no such header, parameter). */
typedef enum rateld_missing_e {
    RATELD_MISSING_REJECT = 0, /* 400, the default */
    RATELD_MISSING_SHARED      /* share one bucket named "-" */
} rateld_missing_t;

typedef struct rateld_policy_s {
    char name[RATELD_NAME_MAX];
    ratel_policy_t policy;
    rateld_key_part_t key[RATELD_KEY_PARTS_MAX];
    size_t nkey;
    rateld_missing_t on_missing;
    int shadow; /* decide, log and count, but always allow */
    int line;   /* where it was defined, for messages */
} rateld_policy_t;

typedef struct rateld_route_s {
    char method[16];  /* "" matches any method */
    char prefix[256]; /* path prefix, starts with '/' */
    size_t policies[RATELD_ROUTE_POLICIES_MAX]; /* indices in policies */
    size_t npolicies;
} rateld_route_t;

/* An address block: `family` AF_INET or AF_INET6, `bits` prefix length. */
typedef struct rateld_cidr_s {
    int family;
    uint8_t addr[16];
    unsigned bits;
} rateld_cidr_t;

typedef enum rateld_store_kind_e {
    RATELD_STORE_MEMORY = 0,
    RATELD_STORE_REDIS
} rateld_store_kind_t;

typedef struct rateld_config_s {
    char path[512]; /* the file it came from */
    char listen[256];            /* default "127.0.0.1:8080" */
    unsigned threads;            /* default 1 */
    ratel_http_limits_t limits;  /* `limits:` section; 0 = http.h default */
    rateld_store_kind_t store;   /* default memory */
    size_t memory_max_bytes;     /* default 64 MiB; "64MiB", "1GiB", bytes */
    ratel_redis_options_t redis; /* url etc.; strings point into redis_url */
    char redis_url[1024];
    char admin_token[256];       /* "" : reset is refused (403) */
    rateld_cidr_t trusted[RATELD_TRUSTED_MAX];
    size_t ntrusted;
    rateld_policy_t *policies;
    size_t npolicies;
    rateld_route_t *routes;
    size_t nroutes;
} rateld_config_t;

/*
 * Reads and checks the YAML file at `path`. Returns 0 with *out (free with
 * rateld_config_free), or -1 with "PATH:LINE: reason" in err.
 */
int rateld_config_load(const char *path, rateld_config_t **out, char *err,
                       size_t errlen);

/* The same from `len` bytes of text; `name` stands for the file in
   messages. */
int rateld_config_parse(const char *text, size_t len, const char *name,
                        rateld_config_t **out, char *err, size_t errlen);

void rateld_config_free(rateld_config_t *config);

/* The policy named `name` (len bytes), or NULL. */
const rateld_policy_t *rateld_config_policy(const rateld_config_t *config,
                                            const char *name, size_t len);

/*
 * The route for `method` and `path` (len bytes each): the longest prefix
 * that matches, a route with a method preferred to one without; NULL when
 * none. A prefix matches at a segment boundary: "/api" matches "/api",
 * "/api/x" and "/api?x", not "/apix".
 */
const rateld_route_t *rateld_config_route(const rateld_config_t *config,
                                          const char *method, size_t mlen,
                                          const char *path, size_t plen);

/*
 * Parses "10.0.0.0/8", "2001:db8::/32" or a bare address (a /32 or /128).
 * Returns 0 or -1 with a message naming the text in err.
 */
int rateld_cidr_parse(const char *text, rateld_cidr_t *out, char *err,
                      size_t errlen);

#endif /* RATELD_CONFIG_H */
