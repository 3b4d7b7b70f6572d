/*
 * params.h - the parameters of rateld's keyed endpoints (/v1/acquire,
 * /v1/refund, /v1/release), read from a query or a strict JSON body.
 */
#ifndef RATELD_PARAMS_H
#define RATELD_PARAMS_H

#include "rateld/config.h"
#include "rateld/request.h"
#include "http/http.h"

#include <stddef.h>

/*
 * The request options an endpoint takes come from the one table of them
 * (RATEL_OPTION_MAP, include/ratel.h): their names, ranges and which
 * operation takes which, read by the core's one reader of them
 * (ratel_options_read) into `options`, then copied to the fields below for
 * the handlers. Values are kept as integers, flags as 0 or 1.
 */
typedef struct rateld_params_s {
    char policy[RATELD_NAME_MAX];
    char key[RATELD_KEY_MAX + 1];
    size_t keylen;
    int has_key;
    long long cost;          /* 1..10^9; 1 when not given */
    long long peek;          /* /v1/acquire: 1 to decide without charging */
    long long max_wait;      /* /v1/acquire: reserve (docs/rateld.md), in ms */
    long long lease;         /* /v1/release: 1..2^32-1; 0 when not given */
    long long renew;         /* /v1/release: 1 to extend instead of releasing */
    unsigned given;          /* policy and key read so far (params.c's bits) */
    ratel_options_t options; /* the options as read: ratel_options_check() */
} rateld_params_t;

/*
 * The decision API's parameters, from the query and, for a POST, a strict
 * JSON body too; `op` (RATEL_OP_ACQUIRE, _REFUND, _RELEASE; 0 for reset)
 * says which options the endpoint takes: a lease is required by release.
 * Each parameter at most once: one given twice, or in both the query and
 * the body, is refused by name (never one of the two silently preferred).
 * Returns 0, or -1 with a message for a 400 in err.
 */
int rateld_params_read(const ratel_http_request_t *req, rateld_params_t *p,
                       unsigned op, char *err, size_t errlen);

#endif /* RATELD_PARAMS_H */
