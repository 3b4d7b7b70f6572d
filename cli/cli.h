/*
 * cli.h - what the files of the `ratel` command share.
 *
 *   main.c     dispatch, global --help/--version, `ratel explain`
 *   replay.c   `ratel replay`: options, the decision loop, the outputs
 *   store.c    `ratel acquire|refund|reset|inspect|ping`: one request
 *              against a real store (Redis, or the memory store);
 *              `ratel lua-load`: the Functions library on every
 *              primary of a Redis URL
 *   trace.c    reading trace lines `t_ms key [cost [hold_ms]]`, with exact
 *              errors
 *   keys.c     per-key records (summary counters, chart windows)
 *   chart.c    what each algorithm would have done: per-bucket counters,
 *              distinct keys per displayable bucket width
 *   svg.c      drawing those counters as a self-contained SVG
 *
 * Exit status everywhere: 0 success, 1 an I/O or internal failure (a
 * store that failed), 2 bad usage or bad input (unknown option, malformed
 * rule, URL or trace line); `ratel acquire` exits 3 when denied.
 */
#ifndef RATEL_CLI_H
#define RATEL_CLI_H

#include "ratel.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2
#define CLI_EXIT_DENIED 3

/* ----------------------------------------------------------------- main */

/* Prints "ratel CMD: MESSAGE" to stderr (cmd may be NULL). */
void cli_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Reports what getopt_long() rejected for command `cmd` (an unknown or
 * ambiguous option, a missing or unwanted argument), naming the option as
 * the user typed it, and points at `ratel CMD --help`. `longopts` is the
 * table getopt_long() was given. Returns CLI_EXIT_USAGE.
 */
int cli_bad_option(const char *cmd, int opt, char *const argv[],
                   const struct option *longopts);

/* Exits with status 1 and a message when `p` is NULL (out of memory). */
void *cli_check_alloc(void *p);

/* `ratel replay`: argv[0] is "replay". Returns the exit status. */
int cli_replay(int argc, char **argv);
/* Writes `ratel replay --help` to `out`. */
void cli_replay_usage(FILE *out);

/* Whether `name` is a store command: acquire, refund, reset, inspect, ping,
   lua-load. */
int cli_is_store_command(const char *name);
/* A store command; argv[0] is its name. Returns the exit status. */
int cli_store_command(int argc, char **argv);
/*
 * Writes `ratel NAME --help` to `out` and returns 0 when NAME is a store
 * command; -1 otherwise.
 */
int cli_store_usage(const char *name, FILE *out);

/* ---------------------------------------------------------------- trace */

/* Longest trace line, in bytes, without its newline. */
#define TRACE_LINE_MAX 4096

typedef struct trace_s {
    FILE *fp;
    const char *name;        /* for messages: the path, or "<stdin>" */
    unsigned long long line; /* number of the line read last, from 1 */
    char buf[TRACE_LINE_MAX + 2];
} trace_t;

typedef struct trace_item_s {
    int64_t t_ms;
    const char *key; /* points into the trace's buffer until the next read */
    size_t keylen;
    uint64_t cost;
    int64_t hold_ms; /* the 4th column: how long a lease is held; -1 none */
} trace_item_t;

/*
 * Reads the next request from `tr`, skipping blank lines and lines whose
 * first non-blank character is '#'. Returns 1 with `*item` filled, 0 at
 * the end of input, or -1 with a message naming the file, the line and
 * what was expected in `err` (malformed line: exit 2), or -2 on a read
 * error (exit 1).
 */
int trace_next(trace_t *tr, trace_item_t *item, char *err, size_t errlen);

/* ----------------------------------------------------------------- keys */

typedef struct window_s window_t;

/* One key seen in the trace. */
typedef struct key_record_s {
    char *key;
    size_t keylen;
    uint64_t requests, allowed, denied, permits;
    window_t *windows; /* chart only: one per algorithm and rule, else NULL */
    uint32_t nwindows;
    int64_t last_ms; /* chart only: the latest t_ms seen for the key */
} key_record_t;

typedef struct key_table_s {
    key_record_t **records; /* in first-seen order */
    size_t nrecords, cap_records;
    uint32_t *slots; /* open addressing: record index + 1, 0 empty */
    size_t nslots;
} key_table_t;

/* Finds `key`, adding a zeroed record if it is new. Never NULL. */
key_record_t *keys_get(key_table_t *table, const char *key, size_t keylen);
/* Frees every record (and its windows) and the table's arrays. */
void keys_free(key_table_t *table);
/*
 * Fills `out` with at most `max` records of keys that were denied at least
 * once, most denied first (ties: the key seen first). Returns how many.
 */
size_t keys_most_denied(const key_table_t *table, const key_record_t **out,
                        size_t max);

/* ---------------------------------------------------------------- chart */

/* The algorithms a chart compares: those that limit a rate
   (RATEL_ALGO_RATE), one panel each, in the map's order. */
#define CHART_RATE_(NAME, name, number, facts, fields)                         \
    +!!((facts)&RATEL_ALGO_RATE)
enum { CHART_NALGOS = 0 RATEL_ALGO_MAP(CHART_RATE_) };
#undef CHART_RATE_
/* Keys listed in the panel (and --summary section) of keys denied most. */
#define CHART_TOP_DENIED 10
/* Displayed time buckets, at most. */
#define CHART_DISPLAY_MAX 200
/* Bucket widths a reader can name, in ms: the displayed width is one. */
#define CHART_NWIDTHS 33
extern const int64_t chart_display_widths[CHART_NWIDTHS];

/* Per-bucket counters of one algorithm. */
typedef struct chart_bucket_s {
    uint64_t admitted, rejected; /* requests */
    /* Per rule: most permits one key held in the rule's trailing window,
       at its admissions in this bucket; 0: none admitted. */
    uint64_t peak[RATEL_MAX_RULES];
} chart_bucket_t;

typedef struct chart_s {
    ratel_policy_t policy;            /* the rules as given */
    ratel_algo_t algos[CHART_NALGOS]; /* each panel's algorithm */
    ratel_policy_t variants[CHART_NALGOS];
    ratel_store_t *stores[CHART_NALGOS];
    int started;
    int64_t origin_ms; /* time of the first request */
    int64_t end_ms;    /* latest time seen */
    int64_t width_ms;  /* of one internal bucket */
    int64_t base;      /* bucket 0 covers [base, base + 1) x width_ms */
    size_t nbuckets;   /* internal buckets in use */
    chart_bucket_t *buckets[CHART_NALGOS];
    uint64_t admitted[CHART_NALGOS], rejected[CHART_NALGOS];
    uint64_t peak[CHART_NALGOS][RATEL_MAX_RULES];
    uint64_t requests, keys;
    /* Distinct keys per bucket of chart_display_widths[i], buckets aligned
       to multiples of the width from the first request's; NULL once the
       trace spans more than CHART_DISPLAY_MAX of them. */
    uint64_t *distinct[CHART_NWIDTHS];
    /* Filled by the caller before svg_write: the keys the policy denied
       most (the records stay the key table's). */
    const key_record_t *most_denied[CHART_TOP_DENIED];
    size_t nmost_denied;
} chart_t;

/*
 * Prepares a chart for `policy`: one variant policy per algorithm (same
 * limits and periods, algorithm swapped, gcra keeping its burst), each on
 * its own memory store bounded by `memory_bytes`. Returns 0, or
 * CLI_EXIT_USAGE / CLI_EXIT_FAIL after printing why.
 */
int chart_init(chart_t *chart, const ratel_policy_t *policy,
               size_t memory_bytes);

/*
 * Runs one request through every variant and counts the outcome in its
 * time bucket. `rec` is the key's record (its windows are created here).
 * Returns 0 or CLI_EXIT_FAIL after printing why.
 */
int chart_add(chart_t *chart, key_record_t *rec, const trace_item_t *item);

/* Frees the chart's stores and buckets (not the key records' windows). */
void chart_free(chart_t *chart);

/* Frees the windows a chart hung on a key record. */
void chart_free_windows(key_record_t *rec);

/*
 * Draws `chart` as an SVG document into `out`. `source` names the trace in
 * the subtitle. Returns 0 or -1 on a write error.
 */
int svg_write(const chart_t *chart, const char *source, FILE *out);

#endif /* RATEL_CLI_H */
