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
 */
#ifndef RATEL_INTERNAL_H
#define RATEL_INTERNAL_H

#include "ratel.h"

/* Relative to this file: lib/ itself is not on the programs' path. */
#include "../store/option.h"
#include "../store/redis.h"
#include "../store/redis_url.h"

#endif /* RATEL_INTERNAL_H */
