/*
 * erl.h - envoyproxy/ratelimit's configuration files, read unchanged, and
 * its descriptor matching, for rateld's Envoy rate limit service (RLS v3).
 *
 * envoyproxy/ratelimit ("ERL") reads a directory of YAML files, one domain
 * each:
 *
 *   domain: messaging
 *   descriptors:
 *     - key: message_type
 *       value: marketing
 *       descriptors:
 *         - key: to_number
 *           rate_limit: {unit: day, requests_per_unit: 5}
 *     - key: to_number
 *       shadow_mode: true
 *       rate_limit:
 *         name: per_number
 *         replaces: [{name: other}]
 *         unit: day
 *         requests_per_unit: 100
 *
 * A descriptor has `key`, an optional `value` (with `*` a pattern, ERL's
 * wildcard), an optional `rate_limit`, nested `descriptors` and the flags
 * shadow_mode, quota_mode, detailed_metric, value_to_metric and
 * share_threshold, plus `metadata` (accepted, not used). `rate_limit` holds
 * unit, requests_per_unit, unlimited, name and replaces. What ERL accepts,
 * rateld accepts, with these exceptions, each refused with a message saying
 * what to write:
 *
 *   - requests_per_unit missing (ERL reads 0 and denies everything):
 *     write `requests_per_unit: 0` to mean that;
 *   - an ERL key in the wrong place (shadow_mode inside rate_limit, name
 *     beside key, ...), which ERL silently ignores;
 *   - unit: year with algorithm sliding or gcra (no period that long);
 *   - a domain in two files, unless merging is on (below);
 *   - requests_per_unit above ratel's 1,000,000,000, control characters
 *     in strings (the shared YAML reader's rule), and the bounds below.
 *
 * A domain in several files is ERL's MERGE_DOMAIN_CONFIG (off by default
 * there and here; rateld_erl_merge_domains, rateld's `envoy:
 * {merge_domain_config: true}`): the files' top-level descriptor lists are
 * joined, in load order, and nothing deeper is merged: a top-level key and
 * value in two files is refused (ERL's "duplicate descriptor composite
 * key"), the message naming both files, even when their nested
 * descriptors differ. Each descriptor keeps its own rate_limit and flags
 * (shadow_mode and the others); `replaces` works across the files, as
 * ERL's names are the domain's.
 *
 * Key and value are matched as a pair; ERL joins them into one "key_value"
 * string, so that its key "a_b" collides with key "a" value "b" - rateld
 * keeps them apart, and a `*` in a key is a plain byte (erl_match.c).
 *
 * ratel's own fields, inside rate_limit, which ERL files simply lack:
 *
 *   algorithm: sliding | fixed | approx | gcra   (default: the loader's)
 *   burst: N                                     (gcra's bucket depth)
 *   rules: ["20/m", "1000/d:fixed"]              (ratel rules, instead of
 *                                                 unit/requests_per_unit)
 *
 * `rules` are read as everywhere in ratel (a rule without :ALGO is
 * sliding) and exclude unit, requests_per_unit, algorithm and burst.
 *
 * Units become rule periods (the rule grammar of include/ratel.h, parsed
 * by ratel_rule_parse, never by a second grammar): second 1s, minute 1m,
 * hour 1h, day 1d, week 1w (for fixed and approx the calendar week from
 * Monday 00:00 UTC; ERL's weeks run from the epoch, a Thursday); month is
 * 30d for sliding and gcra (ERL's own month is 30 days) and the calendar
 * month 1mo for fixed and approx; year is the calendar year 12mo for fixed
 * and approx, and refused for sliding and gcra (ratel's periods end at
 * 30 days).
 */
#ifndef RATELD_ERL_H
#define RATELD_ERL_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds on what a configuration directory may hold. */
#define RATELD_ERL_FILES_MAX 1000    /* files read from one directory */
#define RATELD_ERL_DIRS_DEPTH_MAX 8  /* subdirectories below it */
#define RATELD_ERL_LIMITS_MAX 100000 /* rate_limit blocks, all files */
#define RATELD_ERL_NODES_MAX 1000000 /* descriptors, all files */
#define RATELD_ERL_DEPTH_MAX 12      /* nested descriptor levels */
#define RATELD_ERL_KEY_MAX 255       /* bytes of a key, domain or name */
#define RATELD_ERL_VALUE_MAX 1024    /* bytes of a value */
#define RATELD_ERL_REPLACES_MAX 64   /* entries of one replaces list */
#define RATELD_ERL_NAME_LEN 256      /* rateld_erl_limit_t.name */
#define RATELD_ERL_KEY_PATH_LEN 512  /* rateld_erl_limit_t.key_path */

/* A loaded set of files: opaque, immutable once rateld_erl_finish ran. */
typedef struct rateld_erl_s rateld_erl_t;

/* One entry of a request's descriptor (bytes, not NUL-terminated). */
typedef struct rateld_erl_entry_s {
    const char *key;
    size_t keylen;
    const char *value;
    size_t valuelen;
} rateld_erl_entry_t;

/*
 * What the descriptor matched at one level of a limit's path, for the
 * caller's counter key and metrics.
 */
typedef struct rateld_erl_level_s {
    /*
     * share_threshold: the config's pattern (e.g. "files/" and a star), which
     * stands for the request's value in the counter key so that every value it
     * matches shares one counter; NULL otherwise (each value counts on
     * its own, as ERL keys its counters by the request's values).
     */
    const char *shared;
    int value_to_metric; /* the request's value goes in the metric key */
} rateld_erl_level_t;

typedef struct rateld_erl_limit_s {
    char name[RATELD_ERL_NAME_LEN]; /* rate_limit.name, "" when none */
    /*
     * Bounded metrics label: the path of the config's keys, each with its
     * config value as ERL's stat names have them ("key1_value1.subkey1",
     * "remote_address"), without the domain. Only config text, never a
     * request's value; with detailed_metric the caller may add values.
     */
    char key_path[RATELD_ERL_KEY_PATH_LEN];
    ratel_policy_t policy; /* the rules; unused when unlimited or deny_all */
    /*
     * What the response's current_limit says. From unit/requests_per_unit
     * as written; with `rules`, rules[0]'s limit and the unit its period
     * equals (rateld_erl_rule_unit; 0, UNKNOWN, when none does).
     */
    uint32_t requests_per_unit;
    /* Envoy's RateLimitResponse.RateLimit.Unit (rls.proto): SECOND=1
       MINUTE=2 HOUR=3 DAY=4 MONTH=5 YEAR=6 WEEK=7; 0 when unlimited. */
    int unit;
    int unlimited;       /* unlimited: true (OK, remaining UINT32_MAX) */
    int shadow;          /* shadow_mode: decided and counted, never denied */
    int detailed_metric; /* detailed_metric on the limit's descriptor */
    int deny_all;        /* requests_per_unit: 0 */
    int quota;           /* quota_mode (ERL: over the limit denies only
                            when every quota descriptor is over) */
    char **replaces;     /* rate_limit.replaces[].name */
    size_t nreplaces;
    unsigned index;     /* 0..n-1 over the whole loaded set (metrics slots) */
    const char *file;   /* where it was defined: the file, as named when */
    int line;           /* loaded, and the line of its rate_limit */
    const char *domain; /* the file's domain */
    size_t depth;       /* entries of a descriptor it matches */
    const rateld_erl_level_t *levels; /* depth entries, outermost first */
} rateld_erl_limit_t;

/*
 * An empty set whose limits without `algorithm` or `rules` use
 * `algorithm` ("sliding", "fixed", "approx" or "gcra"; NULL: "sliding").
 * NULL when out of memory or for another algorithm name
 * (rateld_erl_algorithm_ok tells which).
 */
rateld_erl_t *rateld_erl_new(const char *algorithm);

/* Whether rateld_erl_new accepts `algorithm` (NULL included). */
int rateld_erl_algorithm_ok(const char *algorithm);

/*
 * Whether a file whose domain an earlier file named is merged into it
 * (`merge` nonzero: ERL's MERGE_DOMAIN_CONFIG, see above) or refused (0,
 * the default). Applies to the files added after the call.
 */
void rateld_erl_merge_domains(rateld_erl_t *erl, int merge);

/*
 * Adds one file's `len` bytes of YAML, named `name` in messages and in
 * the limits' `file` (copied; NULL: "config"). Returns 0, or -1 with
 * "NAME:LINE: field: reason" in err (NUL-terminated, cut to errlen); on
 * -1 the set is as before the call. Refused after rateld_erl_finish.
 */
int rateld_erl_parse(rateld_erl_t *erl, const char *text, size_t len,
                     const char *name, char *err, size_t errlen);

/*
 * Ends loading: the checks across files (each is made as a file is added,
 * so none is left) and the freeze: no file can be added after it.
 * Returns 0 (or -1 with a message when called twice).
 */
int rateld_erl_finish(rateld_erl_t *erl, char *err, size_t errlen);

/*
 * Loads the configuration directory `dir` as ERL's server does: every
 * *.yaml and *.yml file under it, subdirectories included (ERL walks its
 * runtime directory), names starting with '.' skipped (ERL's
 * RUNTIME_IGNOREDOTFILES, which a Kubernetes ConfigMap mount needs: its
 * "..data" directories hold a second copy of each file), symbolic links
 * to files followed and to directories not. Files are read in byte order
 * of their paths. An empty directory loads no domain (ERL starts too;
 * every request is then for an unknown domain). `algorithm` as for
 * rateld_erl_new, `merge` as for rateld_erl_merge_domains. Returns 0 with
 * a finished set in *out, or -1 with *out NULL and "FILE:LINE: field:
 * reason" (or "DIR: reason") in err.
 */
int rateld_erl_load_dir(const char *dir, const char *algorithm, int merge,
                        rateld_erl_t **out, char *err, size_t errlen);

void rateld_erl_free(rateld_erl_t *erl);

/* Whether some file has domain `domain` (`len` bytes). */
int rateld_erl_has_domain(const rateld_erl_t *erl, const char *domain,
                          size_t len);

/*
 * The limit for one request descriptor (its `n` ordered entries) in
 * `domain`, or NULL when none applies. ERL's walk: at each level the
 * entry's exact key and value first, then the level's wildcard values in
 * file order (`*` matches any run of bytes, anywhere in the value), then
 * the key alone (a descriptor without value: any value, each value
 * counting on its own); a limit applies when the last entry lands on a
 * descriptor with a rate_limit, and the walk stops where a level does not
 * match or has no nested descriptors. Allocates nothing; the limit lives
 * as long as the set.
 */
const rateld_erl_limit_t *rateld_erl_match(const rateld_erl_t *erl,
                                           const char *domain, size_t dlen,
                                           const rateld_erl_entry_t *entries,
                                           size_t n);

/*
 * ERL's `replaces` across the limits matched for one request's
 * descriptors (limits[i] may be NULL): every name in any matched limit's
 * replaces (a replaced or unlimited one's too) drops each limit of that
 * name, setting limits[i] to NULL; unlimited limits are kept, as ERL
 * still answers them as unlimited. Allocates only for more than 256
 * limits, and when that fails keeps them all (stricter, never looser).
 */
void rateld_erl_apply_replaces(const rateld_erl_limit_t **limits, size_t n);

/* Limits loaded (rateld_erl_limit_t.index is below it). */
size_t rateld_erl_count(const rateld_erl_t *erl);

/* Domains loaded (0 for an empty directory). */
size_t rateld_erl_domain_count(const rateld_erl_t *erl);

/* The limit of index `index` (< rateld_erl_count), for metrics. */
const rateld_erl_limit_t *rateld_erl_limit(const rateld_erl_t *erl,
                                           size_t index);

/*
 * The Envoy unit whose length `rule`'s period is (1s SECOND=1, 1m
 * MINUTE=2, 1h HOUR=3, 1d DAY=4, 1w or 7d WEEK=7, 1mo or 30d MONTH=5,
 * 12mo YEAR=6), or 0 (UNKNOWN) - for reporting the binding rule.
 */
int rateld_erl_rule_unit(const ratel_rule_t *rule);

#ifdef __cplusplus
}
#endif

#endif /* RATELD_ERL_H */
