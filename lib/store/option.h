/*
 * option.h - descriptor tables of settings (nginx's ngx_command_t model):
 * each option of a section is declared once, with its name, its type, its
 * range and where it goes (offsetof a field), and every front end reads it
 * through the same table: rateld's and captchad's YAML (server/app/yaml.c,
 * ratel__yaml_options) and the Redis store URL's query (redis_url.c). So an
 * option has one name, one grammar, one range and one error message
 * wherever it is written.
 *
 * Values are text here: a front end finds the text (a YAML scalar, a
 * query's NAME=VALUE) and ratel__option_set parses, checks and stores it.
 */
#ifndef RATEL_STORE_OPTION_H
#define RATEL_STORE_OPTION_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ratel__option_type_e {
    RATEL__OPTION_UINT,  /* a whole number in min..max */
    RATEL__OPTION_SIZE,  /* bytes: a number, or with B, KiB, MiB, GiB, TiB
                            (k, K, M, G, T: the same powers of 1024) */
    RATEL__OPTION_MSEC,  /* milliseconds: a whole number in min..max */
    RATEL__OPTION_BOOL,  /* true or false (True, TRUE, False, FALSE) */
    RATEL__OPTION_ENUM,  /* one of `words`; the field (an int) gets the
                            matching one of `values` */
    RATEL__OPTION_STRING /* at most size - 1 bytes, no control characters;
                            `check` may refuse more */
} ratel__option_type_t;

/* One option. Numbers go to an unsigned or signed integer field of size
   1, 2, 4 or 8 (every range fits the field's type); booleans to an int. */
typedef struct ratel__option_s {
    const char *name;
    ratel__option_type_t type;
    uint64_t min, max; /* numbers: the accepted range */
    int zero_default;  /* numbers: 0 is also accepted, meaning the default */
    size_t offset;     /* offsetof the field in the section's struct */
    size_t size;       /* sizeof the field (strings: their capacity) */
    const char *const *words; /* enum: NULL-terminated */
    const int *values;        /* enum: the field's value for each word */
    /* Strings: 0, or -1 with why the text is refused (e.g. a listen
       address that is not HOST:PORT). NULL accepts every string. */
    int (*check)(const char *text, char *why, size_t whylen);
} ratel__option_t;

/* The entry of `table` (n entries) named name[0..len), or NULL. */
const ratel__option_t *ratel__option_find(const ratel__option_t *table,
                                          size_t n, const char *name,
                                          size_t len);

/* "a, b, c": the names of the n entries, for "accepted: ..." lists. */
void ratel__option_names(const ratel__option_t *table, size_t n, char *out,
                         size_t cap);

/*
 * Parses len bytes of `text` as option `opt`, checks its range and stores
 * it in the struct at `base`. Returns 0, or -1 with the reason, not
 * naming the option, in why: "0 is out of range; accepted: 1..1024",
 * "\"x\" is not a whole number", "expected auto | module | lua, got
 * \"x\"". The caller puts the option's place in front (a YAML path, a
 * query parameter). *base is left alone on failure.
 */
int ratel__option_set(const ratel__option_t *opt, const char *text, size_t len,
                      void *base, char *why, size_t whylen);

/* What an enum or a boolean accepts, for messages: "auto | module | lua",
   "true or false". */
void ratel__option_accepted(const ratel__option_t *opt, char *out, size_t cap);

/* The Redis store's settings, in the query fields of ratel_redis_url_t
   (redis_url.h); a configuration's store: section reads them too. */
extern const ratel__option_t ratel__redis_query_options[];
extern const size_t ratel__redis_query_noptions;

/* The URL's own query settings (db with Sentinel, tls_*, sentinel_*), in
   ratel_redis_url_t too; only a URL's query reads them (redis_url.h). */
extern const ratel__option_t ratel__redis_url_options[];
extern const size_t ratel__redis_url_noptions;

/* Longest snapshot path a configuration takes (NUL included). */
#define RATEL__SNAPSHOT_PATH_MAX 1024

/* The memory store's settings as a configuration writes them (the table
   below fills it; ratel__memory_settings_options makes the C API's
   options of it). */
typedef struct ratel__memory_settings_s {
    size_t max_bytes;
    uint32_t snapshot_interval_ms;
    int on_bad_snapshot;                     /* a ratel_bad_snapshot_t */
    char snapshot[RATEL__SNAPSHOT_PATH_MAX]; /* "": none */
} ratel__memory_settings_t;

/* The memory store's settings, in the fields of ratel__memory_settings_t
   (max_bytes, snapshot, snapshot_interval_ms, on_bad_snapshot); a
   configuration's store: section reads them, and ratel_store_memory_new
   checks its options' numbers against the same ranges. */
extern const ratel__option_t ratel__memory_options[];
extern const size_t ratel__memory_noptions;

/* A leased policy's settings, in the fields of ratel_lease_t (ttl_ms,
   max_slice, min_slice, hosts): rateld's and the nginx module's lease. */
extern const ratel__option_t ratel__lease_options[];
extern const size_t ratel__lease_noptions;

/* The defaults: max_bytes 64 MiB, no snapshot. */
void ratel__memory_settings_init(ratel__memory_settings_t *s);

/* The options ratel_store_memory_open takes for `s`; snap->path points
   into *s (NULL when it is ""). */
void ratel__memory_settings_options(const ratel__memory_settings_t *s,
                                    ratel_memory_options_t *out,
                                    ratel_snapshot_options_t *snap);

/*
 * The check of a snapshot path that a store's start makes too: its
 * directory exists and takes a new file, and an existing snapshot is a
 * readable regular file (its contents are read at start). 0 ("" is no
 * snapshot), or -1 with why ("snapshot PATH: its directory ... does not
 * exist"). The one check --check-config, a start and a reload run.
 */
int ratel__memory_settings_check(const ratel__memory_settings_t *s, char *why,
                                 size_t whylen);

/*
 * The range of the number option `name` of `table` (n entries) in *min
 * and *max. Returns 0, or -1 when the table has no number option of that
 * name. For messages that state what is accepted.
 */
int ratel__option_range(const ratel__option_t *table, size_t n,
                        const char *name, uint64_t *min, uint64_t *max);

/*
 * Whether `v` is in the range of the number option `name` of `table`:
 * 0, or RATEL_EINVAL when v is negative, out of range, or the table has
 * no number option of that name (0 is in range when the option has
 * zero_default). The C API checks a value given in a struct with it, so
 * that a setting has one range whether it comes from YAML, a store URL's
 * query or a C caller; where the C API gives 0 its own meaning ("the
 * default"), the caller checks only values other than 0.
 */
int ratel__option_check(const ratel__option_t *table, size_t n,
                        const char *name, int64_t v);

/* ratel__option_check on the Redis store's table
   (ratel__redis_query_options): "timeout_ms", "deny_cache", ... */
int ratel__redis_option_check(const char *name, int64_t v);

#endif /* RATEL_STORE_OPTION_H */
