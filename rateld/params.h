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

typedef struct rateld_params_s {
    char policy[RATELD_NAME_MAX];
    char key[RATELD_KEY_MAX + 1];
    size_t keylen;
    long long cost; /* 1..10^9; 1 when not given */
    int peek;
    int has_key;
    long long lease; /* /v1/release: 1..2^32-1; 0 when not given */
    int renew;       /* /v1/release: extend instead of releasing */
    unsigned given;  /* the parameters read so far (params.c's bits) */
} rateld_params_t;

/*
 * The decision API's parameters, from the query and, for a POST, a strict
 * JSON body too; `release`: for /v1/release, which alone takes a lease
 * (and requires one). Each parameter at most once: one given twice, or
 * in both the query and the body, is refused by name (never one of the
 * two silently preferred). Returns 0, or -1 with a message for a 400 in
 * err.
 */
int rateld_params_read(const ratel_http_request_t *req, rateld_params_t *p,
                       int release, char *err, size_t errlen);

#endif /* RATELD_PARAMS_H */
