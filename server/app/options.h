/*
 * options.h - descriptor tables (store/option.h) of the sections rateld
 * and captchad share, and the checks their string options use: one name,
 * one type and one range per option in both programs.
 */
#ifndef RATEL_APP_OPTIONS_H
#define RATEL_APP_OPTIONS_H

#include "app/yaml.h"
#include "http/http.h"
#include "ratel.h"
#include "ratel_internal.h"

#include <stddef.h>

/* `limits:`: every field of ratel_http_limits_t; 0 (or absent) means
   server/http/http.h's default. */
extern const ratel__option_t ratel__limits_options[];
extern const size_t ratel__limits_noptions;

/* Checks of string options (ratel__option_t.check): 0, or -1 with why. */

/* A listen address: HOST:PORT, [IPV6]:PORT or :PORT, as the servers read
   it (ratel_http_listen_parse, server/http/listen.c). */
int ratel__check_listen(const char *text, char *why, size_t whylen);
/* The shortest token accepted: 32 bytes (`openssl rand -hex 32` makes 64). */
#define RATEL__TOKEN_MIN 32

/*
 * A token (admin_token and every other token field): "" (what it guards
 * is turned off), or one word (it is sent in a header) of at least
 * RATEL__TOKEN_MIN bytes that is none of the tokens ratel's docs and
 * examples print. The reason says how to make one.
 */
int ratel__check_token(const char *text, char *why, size_t whylen);
/* Anything but "". */
int ratel__check_nonempty(const char *text, char *why, size_t whylen);

/*
 * The options every server program's top level has, for a config struct
 * `type` with fields listen, threads and admin_token: one name, type and
 * range in rateld and captchad alike (threads: 1..64, one event loop per
 * thread; a 2-core machine wants 1 or 2).
 */
#define RATEL__SERVER_OPTIONS(type)                                            \
    {                                                                          \
        "listen",                                                              \
        RATEL__OPTION_STRING,                                                  \
        0,                                                                     \
        0,                                                                     \
        0,                                                                     \
        RATEL__FIELD(type, listen),                                            \
        NULL,                                                                  \
        NULL,                                                                  \
        ratel__check_listen},                                                  \
        {"threads", RATEL__OPTION_UINT,          1,    64,                     \
         0,         RATEL__FIELD(type, threads), NULL, NULL,                   \
         NULL},                                                                \
    {                                                                          \
        "admin_token", RATEL__OPTION_STRING, 0, 0, 0,                          \
            RATEL__FIELD(type, admin_token), NULL, NULL, ratel__check_token    \
    }

/*
 * A `store:` section, the same in both programs: the program's own table
 * `own` (its first two entries type - words memory, redis - and url,
 * fields of `config`), libratel's memory store table (max_bytes and the
 * snapshot settings, into *memory, which holds the defaults on entry: a
 * snapshot path is checked as the store's start checks it, and refused
 * with type: redis) and the Redis URL's query
 * options (pool, timeouts, mode, ...) in one mapping: every range is the
 * one libratel's C API checks too. For a Redis store, url is required and
 * *redis gets the query options, its url pointing at the url field and
 * the `local` failure policy's store bounded by max_bytes; a memory store
 * refuses the Redis fields, naming the first one given, and zeroes
 * *redis. A Redis store is then made as the program makes it at start
 * (lazily, connecting nowhere) and freed, so that the URL, its query and
 * its TLS files are checked by the one reading that start uses:
 * --check-config, a start and a reload refuse the same URLs with the same
 * message. Returns 0, or -1 with "FILE:LINE: store.FIELD: reason".
 */
int ratel__yaml_store(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node,
                      const ratel__option_t *own, size_t nown, void *config,
                      ratel__memory_settings_t *memory,
                      ratel_redis_options_t *redis);

/*
 * The memory store a configuration's store: section describes, its
 * snapshot (if any) loaded: a snapshot skipped as on_bad_snapshot: empty
 * says is logged as a warning, the keys loaded as info; a failure is
 * logged with its reason ("snapshot PATH: problem"). 0 or -1.
 */
int ratel__memory_store_open(const ratel__memory_settings_t *settings,
                             ratel_store_t **out);

/*
 * Frees a store the program is done with; a memory store writes its last
 * snapshot first, and a failure to is logged (a graceful stop otherwise
 * loses nothing). NULL is a no-op.
 */
void ratel__store_close(ratel_store_t *store);

/* An option table's entry count. */
#define RATEL__COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* offsetof and sizeof a field of `type`, for a table entry. */
#define RATEL__FIELD(type, f) offsetof(type, f), sizeof(((type *)0)->f)

#endif /* RATEL_APP_OPTIONS_H */
