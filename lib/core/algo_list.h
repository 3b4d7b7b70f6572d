/*
 * algo_list.h - the algorithms named from the facts of RATEL_ALGO_MAP
 * (include/ratel.h), for messages and defaults: the core's rule parser,
 * and the programs through lib/internal/ratel_internal.h (rateld's
 * Envoy settings). A message that lists the algorithms which would do is
 * made here, so a new algorithm joins it without an edit.
 */
#ifndef RATEL_CORE_ALGO_LIST_H
#define RATEL_CORE_ALGO_LIST_H

#include "ratel.h"

#include <stddef.h>

/*
 * The names of the algorithms with every bit of `facts` (0: all), in the
 * map's order, each after `prefix`, the last after `last`, into buf
 * (always terminated; cut at buflen): "sliding, fixed, approx, gcra or
 * concurrent", ":fixed and :approx".
 */
void ratel__algo_list(unsigned facts, const char *prefix, const char *last,
                      char *buf, size_t buflen);

/* The first algorithm of the map with every bit of `facts`. */
ratel_algo_t ratel__algo_with(unsigned facts);

#endif /* RATEL_CORE_ALGO_LIST_H */
