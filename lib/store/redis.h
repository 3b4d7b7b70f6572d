/*
 * redis.h - what the programs of this repository may ask of a Redis store
 * beyond ratel.h: loading the Functions library on every primary
 * (`ratel lua-load`). Internal: not part of libratel's public API.
 */
#ifndef RATEL_STORE_REDIS_H
#define RATEL_STORE_REDIS_H

#include "ratel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What ratel__redis_load_library() found and did on one primary. */
typedef struct ratel__library_report_s {
    const char *node;   /* "host:port" */
    const char *found;  /* the library's version there before; "" none
                           (or not known: rc != 0 before it was asked) */
    const char *loaded; /* this build's version, now there (rc 0) */
    int rc;             /* 0, RATEL_EIO (unreachable, no answer, cannot
                           now: READONLY, LOADING...) or RATEL_EPROTO
                           (not Redis, refused) */
    int refused;        /* the server refused FUNCTION LOAD itself */
    const char *error;  /* why, when rc != 0 */
} ratel__library_report_t;

typedef void (*ratel__library_fn)(void *ud,
                                  const ratel__library_report_t *report);

/*
 * Makes sure every primary of a Redis store (`store` from
 * ratel_store_redis_new(), best with lazy_connect) holds this build's
 * Functions library, as mode=auto would on its first request: the
 * current primary of a redis:// URL (asked for its ROLE when the URL
 * lists several addresses), every node that owns slots of a cluster
 * (CLUSTER SLOTS read now). Each primary gets a connection of its own;
 * `fn` is called once per primary with what happened there. Returns 0
 * when every primary has the library; else the first failure's code
 * (RATEL_EIO, RATEL_EPROTO), with errbuf saying why when no primary was
 * found at all; RATEL_EINVAL when `store` is not a Redis store.
 */
int ratel__redis_load_library(ratel_store_t *store, ratel__library_fn fn,
                              void *ud, char *errbuf, size_t errlen);

/* The version of this build's library ("0.1.0+941025487"). */
const char *ratel__redis_library_version(void);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_REDIS_H */
