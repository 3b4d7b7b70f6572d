/*
 * ratel_internal.h - what the programs of this tree may use of libratel
 * beyond the public ratel.h: the ratel CLI, rateld, captchad, the server
 * kit they share (server/) and the integration drivers.
 *
 * It is not installed and promises no ABI: the programs are built from
 * the same tree as the library and link it statically, so these change
 * with it. Programs are compiled with -Iinclude -Ilib/internal (and the
 * server kit's -Iserver), never -Ilib: this folder is their only window
 * into lib/, so a program that needs more of libratel adds it here, with
 * its contract, first (docs/layout.md, "Source layout").
 *
 *   lib/store/option.h     the option tables: every setting declared once
 *                          with its name, type and range, read by the YAML
 *                          front ends and the store URL's query alike
 *   lib/store/redis_url.h  the Redis store's URL: parsing, the query's
 *                          options, and the masking of credentials for
 *                          anything a program prints
 *   lib/store/redis.h      loading the Functions library on every primary
 *                          (`ratel lua-load`)
 *   lib/store/tls.h        the store's TLS settings as it reads them, and
 *                          the words a program warns with when
 *                          tls_insecure turns verification off
 *   lib/store/command.h    a program's own commands on a Redis store's
 *                          connections, waited for or on a loop:
 *                          captchad's code store
 *   lib/store/async.h      the asynchronous API on a host's own
 *                          transport (transport.h): the nginx module's
 *   lib/store/deny_cache.h ratel__policy_fingerprint, which tells a
 *                          denial of one policy's rules from another's:
 *                          the nginx module's deny cache in its zone
 *   lib/store/lease.h      the table of leased keys' slices in the
 *                          caller's memory, a Redis store spending from
 *                          it, and its slices given back: the nginx
 *                          module's zone, shared by its workers
 *   lib/core/algo_list.h   the algorithms named from the facts of the map,
 *                          for messages and defaults: rateld's Envoy
 *                          settings
 *   lib/core/owned.h       the core's entry for blobs only the core wrote:
 *                          the nginx module's shared-memory zone, whose
 *                          blobs no one but its workers' core writes
 */
#ifndef RATEL_INTERNAL_H
#define RATEL_INTERNAL_H

#include "ratel.h"

/* Relative to this file: lib/ itself is not on the programs' path. */
#include "../core/algo_list.h"
#include "../core/owned.h"
#include "../store/async.h"
#include "../store/command.h"
#include "../store/deny_cache.h"
#include "../store/lease.h"
#include "../store/option.h"
#include "../store/redis.h"
#include "../store/redis_url.h"
#include "../store/tls.h"

#include <stdlib.h>

/*
 * Whether a Redis store made with `o` would verify nothing of its servers'
 * certificates: tls_insecure=yes in `o` or in its URL's query, on a TLS
 * URL (the setting is refused on others). libratel does not log, so each
 * program that opens a store says so once at start, in
 * RATEL__TLS_INSECURE_WARNING's words. 0 also when the URL or the settings
 * are refused: opening the store says why.
 */
static inline int ratel__redis_tls_insecure(const ratel_redis_options_t *o)
{
    ratel_redis_url_t *u = malloc(sizeof *u);
    ratel__tls_options_t tls;
    int insecure = 0;

    if (u && o->url && ratel__redis_url_parse(o->url, u, NULL, 0) == 0 &&
        ratel__tls_options_pick(u, o, &tls, NULL, 0) == 0)
        insecure = tls.insecure;
    free(u);
    return insecure;
}

#endif /* RATEL_INTERNAL_H */
