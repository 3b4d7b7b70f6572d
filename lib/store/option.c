/*
 * option.c - descriptor tables of settings (option.h): parsing a value's
 * text by its option's type and range, and the Redis store's table.
 */
#include "store/option.h"

#include "ratel.h"
#include "store/redis_url.h"
#include "store/snapshot.h"

#include <stdio.h>
#include <string.h>

const ratel__option_t *ratel__option_find(const ratel__option_t *table,
                                          size_t n, const char *name,
                                          size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(table[i].name) == len &&
            memcmp(table[i].name, name, len) == 0)
            return &table[i];
    return NULL;
}

void ratel__option_names(const ratel__option_t *table, size_t n, char *out,
                         size_t cap)
{
    size_t q = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < n && q < cap; i++) {
        int w =
            snprintf(out + q, cap - q, "%s%s", i ? ", " : "", table[i].name);
        if (w < 0)
            break;
        q += (size_t)w;
    }
}

/* `len` bytes of text in quotes for a message: printable ASCII as is, '"'
   and '\\' escaped, other bytes as \xNN, cut with "..." past 48 bytes. */
static void quote(const char *text, size_t len, char *out, size_t cap)
{
    size_t q = 0;

    if (cap < 8)
        return;
    out[q++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i == 48 || q + 8 >= cap) {
            memcpy(out + q, "...", 3);
            q += 3;
            break;
        }
        if (c == '"' || c == '\\')
            q += (size_t)snprintf(out + q, cap - q, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            q += (size_t)snprintf(out + q, cap - q, "\\x%02x", c);
        else
            out[q++] = (char)c;
    }
    out[q++] = '"';
    out[q] = '\0';
}

/* Digits at text[*i..] as a number; -1 when there are none or past
   2^64 - 1. */
static int digits(const char *text, size_t len, size_t *i, uint64_t *out)
{
    uint64_t v = 0;
    size_t start = *i;

    while (*i < len && text[*i] >= '0' && text[*i] <= '9') {
        unsigned d = (unsigned)(text[*i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        (*i)++;
    }
    if (*i == start)
        return -1;
    *out = v;
    return 0;
}

/* A size's text as bytes; -1 with why when it is not one. */
static int size_value(const char *text, size_t len, uint64_t *out, char *why,
                      size_t whylen)
{
    static const struct {
        const char *unit;
        unsigned shift;
    } units[] = {{"", 0},     {"B", 0},  {"k", 10},   {"K", 10},
                 {"KiB", 10}, {"M", 20}, {"MiB", 20}, {"G", 30},
                 {"GiB", 30}, {"T", 40}, {"TiB", 40}};
    char q[200];
    size_t i = 0, u = sizeof units / sizeof units[0];
    uint64_t v;

    quote(text, len, q, sizeof q);
    if (digits(text, len, &i, &v) == 0) {
        while (i < len && text[i] == ' ')
            i++;
        for (u = 0; u < sizeof units / sizeof units[0]; u++)
            if (strlen(units[u].unit) == len - i &&
                memcmp(units[u].unit, text + i, len - i) == 0)
                break;
    }
    if (u == sizeof units / sizeof units[0]) {
        snprintf(why, whylen,
                 "%s is not a size; write bytes (65536) or a number with "
                 "KiB, MiB, GiB or TiB (k, M, G, T are the same powers of "
                 "1024)",
                 q);
        return -1;
    }
    if (v > (UINT64_MAX >> units[u].shift)) {
        snprintf(why, whylen, "%s is too large", q);
        return -1;
    }
    *out = v << units[u].shift;
    return 0;
}

/* A number's text by its type, checked against the option's range. */
static int number_value(const ratel__option_t *opt, const char *text,
                        size_t len, uint64_t *out, char *why, size_t whylen)
{
    char q[200];
    size_t i = 0;
    uint64_t v;

    if (opt->type == RATEL__OPTION_SIZE) {
        if (size_value(text, len, &v, why, whylen))
            return -1;
    } else if (digits(text, len, &i, &v) != 0 || i != len) {
        quote(text, len, q, sizeof q);
        while (i < len && text[i] >= '0' && text[i] <= '9')
            i++;
        if (i == len && len > 0) { /* digits past 2^64 - 1 */
            snprintf(why, whylen, "%s is out of range; accepted: %s%llu..%llu",
                     q, opt->zero_default ? "0 (the default) or " : "",
                     (unsigned long long)opt->min,
                     (unsigned long long)opt->max);
            return -1;
        }
        snprintf(why, whylen, "expected a whole number%s, got %s",
                 opt->type == RATEL__OPTION_MSEC ? " of milliseconds" : "", q);
        return -1;
    }
    if ((v == 0 && opt->zero_default) || (v >= opt->min && v <= opt->max)) {
        *out = v;
        return 0;
    }
    snprintf(why, whylen, "%llu is out of range; accepted: %s%llu..%llu",
             (unsigned long long)v,
             opt->zero_default ? "0 (the default) or " : "",
             (unsigned long long)opt->min, (unsigned long long)opt->max);
    return -1;
}

/* v into a field of `size` bytes (every range fits its field). */
static void store_integer(void *field, size_t size, uint64_t v)
{
    if (size == 1) {
        uint8_t x = (uint8_t)v;
        memcpy(field, &x, 1);
    } else if (size == 2) {
        uint16_t x = (uint16_t)v;
        memcpy(field, &x, 2);
    } else if (size == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(field, &x, 4);
    } else {
        memcpy(field, &v, 8);
    }
}

void ratel__option_accepted(const ratel__option_t *opt, char *out, size_t cap)
{
    size_t q = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    if (opt->type == RATEL__OPTION_BOOL) {
        snprintf(out, cap, "true or false");
        return;
    }
    for (size_t i = 0; opt->words && opt->words[i] && q < cap; i++) {
        int w =
            snprintf(out + q, cap - q, "%s%s", i ? " | " : "", opt->words[i]);
        if (w < 0)
            break;
        q += (size_t)w;
    }
}

/* The index of the word text[0..len) among the option's words (true,
   True, TRUE, false, ... for a boolean); -1 with the accepted ones in
   why. */
static int word_index(const ratel__option_t *opt, const char *text, size_t len,
                      char *why, size_t whylen)
{
    static const char *const bools[] = {"true",  "True",  "TRUE", "false",
                                        "False", "FALSE", NULL};
    const char *const *words =
        opt->type == RATEL__OPTION_BOOL ? bools : opt->words;
    char q[200], accepted[200];

    for (size_t i = 0; words[i]; i++)
        if (strlen(words[i]) == len && memcmp(words[i], text, len) == 0)
            return (int)i;
    quote(text, len, q, sizeof q);
    ratel__option_accepted(opt, accepted, sizeof accepted);
    snprintf(why, whylen, "expected %s, got %s", accepted, q);
    return -1;
}

/* Longest string option (its capacity, NUL included). */
#define STRING_MAX 2048

/* A string: its length, its bytes and the option's own check. */
static int string_value(const ratel__option_t *opt, const char *text,
                        size_t len, char *field, char *why, size_t whylen)
{
    char copy[STRING_MAX];

    if (len >= opt->size || len >= sizeof copy) {
        snprintf(why, whylen, "%zu bytes long; at most %zu are accepted", len,
                 (opt->size < sizeof copy ? opt->size : sizeof copy) - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f) {
            snprintf(why, whylen, "contains the control character 0x%02x", c);
            return -1;
        }
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    if (opt->check && opt->check(copy, why, whylen) != 0)
        return -1;
    memcpy(field, copy, len + 1);
    return 0;
}

int ratel__option_set(const ratel__option_t *opt, const char *text, size_t len,
                      void *base, char *why, size_t whylen)
{
    char *field = (char *)base + opt->offset;
    uint64_t v;
    int i;

    switch (opt->type) {
    case RATEL__OPTION_STRING:
        return string_value(opt, text, len, field, why, whylen);
    case RATEL__OPTION_BOOL:
    case RATEL__OPTION_ENUM:
        i = word_index(opt, text, len, why, whylen);
        if (i < 0)
            return -1;
        i = opt->type == RATEL__OPTION_BOOL ? i < 3
            : opt->values                   ? opt->values[i]
                                            : i;
        memcpy(field, &i, sizeof i);
        return 0;
    default:
        if (number_value(opt, text, len, &v, why, whylen))
            return -1;
        store_integer(field, opt->size, v);
        return 0;
    }
}

/* The entry `name` of `table` when it is a number option, else NULL. */
static const ratel__option_t *number_option(const ratel__option_t *table,
                                            size_t n, const char *name)
{
    const ratel__option_t *opt =
        ratel__option_find(table, n, name, strlen(name));

    if (!opt ||
        (opt->type != RATEL__OPTION_UINT && opt->type != RATEL__OPTION_SIZE &&
         opt->type != RATEL__OPTION_MSEC))
        return NULL;
    return opt;
}

int ratel__option_range(const ratel__option_t *table, size_t n,
                        const char *name, uint64_t *min, uint64_t *max)
{
    const ratel__option_t *opt = number_option(table, n, name);

    if (!opt)
        return -1;
    *min = opt->min;
    *max = opt->max;
    return 0;
}

int ratel__option_check(const ratel__option_t *table, size_t n,
                        const char *name, int64_t v)
{
    const ratel__option_t *opt = number_option(table, n, name);

    if (!opt || v < 0)
        return RATEL_EINVAL;
    if ((v == 0 && opt->zero_default) ||
        ((uint64_t)v >= opt->min && (uint64_t)v <= opt->max))
        return 0;
    return RATEL_EINVAL;
}

int ratel__redis_option_check(const char *name, int64_t v)
{
    return ratel__option_check(ratel__redis_query_options,
                               ratel__redis_query_noptions, name, v);
}

/* ------------------------------------------------- the memory store's table */

static const char *const bad_snapshot_words[] = {"refuse", "empty", NULL};
static const int bad_snapshot_values[] = {RATEL_BAD_SNAPSHOT_REFUSE,
                                          RATEL_BAD_SNAPSHOT_EMPTY};

#define MEMORY(f)                                                              \
    offsetof(ratel__memory_settings_t, f),                                     \
        sizeof(((ratel__memory_settings_t *)0)->f)

/*
 * max_bytes 64 KiB..1 TiB: below 64 KiB the fixed bookkeeping leaves the
 * shards nothing to hold keys in; above 1 TiB is a typing mistake on any
 * machine this runs on. ratel_store_memory_new() checks the same range
 * (0 there means the default, 64 MiB).
 *
 * snapshot_interval_ms 10..3600000 (0: 1000): what a crash may lose;
 * under 10 ms the writes would be the machine's main work, over an hour
 * is no longer a snapshot anyone counts on. The path is checked as start
 * checks it (snapshot.h, ratel__snapshot_check_path) by the programs'
 * store: reading, which knows the store's type.
 */
const ratel__option_t ratel__memory_options[] = {
    {"max_bytes", RATEL__OPTION_SIZE, (uint64_t)64 << 10, (uint64_t)1 << 40, 0,
     MEMORY(max_bytes), NULL, NULL, NULL},
    {"snapshot", RATEL__OPTION_STRING, 0, 0, 0, MEMORY(snapshot), NULL, NULL,
     NULL},
    {"snapshot_interval_ms", RATEL__OPTION_MSEC, RATEL__SNAPSHOT_INTERVAL_MIN,
     RATEL__SNAPSHOT_INTERVAL_MAX, 1, MEMORY(snapshot_interval_ms), NULL, NULL,
     NULL},
    {"on_bad_snapshot", RATEL__OPTION_ENUM, 0, 0, 0, MEMORY(on_bad_snapshot),
     bad_snapshot_words, bad_snapshot_values, NULL},
};

const size_t ratel__memory_noptions =
    sizeof ratel__memory_options / sizeof ratel__memory_options[0];

void ratel__memory_settings_init(ratel__memory_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->max_bytes = (size_t)64 << 20;
}

void ratel__memory_settings_options(const ratel__memory_settings_t *s,
                                    ratel_memory_options_t *out,
                                    ratel_snapshot_options_t *snap)
{
    memset(out, 0, sizeof *out);
    out->max_bytes = s->max_bytes;
    snap->path = s->snapshot[0] ? s->snapshot : NULL;
    snap->interval_ms = s->snapshot_interval_ms;
    snap->on_bad = s->on_bad_snapshot;
}

int ratel__memory_settings_check(const ratel__memory_settings_t *s, char *why,
                                 size_t whylen)
{
    if (!s->snapshot[0])
        return 0;
    return ratel__snapshot_check_path(s->snapshot, why, whylen) ? -1 : 0;
}

/* ------------------------------------------------- the Redis store's table */

static const char *const failure_words[] = {"open", "closed", "local", NULL};
static const int failure_values[] = {RATEL_FAILURE_OPEN, RATEL_FAILURE_CLOSED,
                                     RATEL_FAILURE_LOCAL};
static const char *const mode_words[] = {"auto", "module", "function", "lua",
                                         NULL};
static const int mode_values[] = {RATEL_REDIS_AUTO, RATEL_REDIS_MODULE,
                                  RATEL_REDIS_FUNCTION, RATEL_REDIS_LUA};

#define FIELD(f)                                                               \
    offsetof(ratel_redis_url_t, f), sizeof(((ratel_redis_url_t *)0)->f)

/*
 * One range per option, whether written in a URL's query or in a
 * configuration's store: section (they disagreed before):
 *
 *   - pool 1..256 (rateld's YAML said 1..64): 256 is what the store itself
 *     accepts (ratel_redis_options_t.pool_size), and a setting must not
 *     be valid in a URL and refused in YAML. Every connection counts
 *     against Redis's maxclients: docs/deployment.md says so.
 *   - deny_cache 0..1,048,576 (the URL said up to 16,777,216): the table
 *     is allocated whole when the store starts and an attack with unique
 *     keys is what fills it, so its bound is memory the host really
 *     commits: 288 MiB at 1 Mi entries, 4.5 GiB at 16 Mi, which no
 *     cache of denials (it only saves round trips) is worth.
 */
const ratel__option_t ratel__redis_query_options[] = {
    {"connect_timeout_ms", RATEL__OPTION_MSEC, 1, 60000, 0,
     FIELD(connect_timeout_ms), NULL, NULL, NULL},
    {"timeout_ms", RATEL__OPTION_MSEC, 1, 60000, 0, FIELD(timeout_ms), NULL,
     NULL, NULL},
    {"pool", RATEL__OPTION_UINT, 1, 256, 0, FIELD(pool), NULL, NULL, NULL},
    {"on_failure", RATEL__OPTION_ENUM, 0, 0, 0, FIELD(on_failure),
     failure_words, failure_values, NULL},
    {"mode", RATEL__OPTION_ENUM, 0, 0, 0, FIELD(mode), mode_words, mode_values,
     NULL},
    {"deny_cache", RATEL__OPTION_UINT, 0, 1048576, 0, FIELD(deny_cache), NULL,
     NULL, NULL},
    {"wait_replicas", RATEL__OPTION_UINT, 0, 16, 0, FIELD(wait_replicas), NULL,
     NULL, NULL},
};

const size_t ratel__redis_query_noptions =
    sizeof ratel__redis_query_options / sizeof ratel__redis_query_options[0];

/* A server name: a DNS name or an IP address, as a certificate names it. */
static int check_server_name(const char *text, char *why, size_t whylen)
{
    for (const char *c = text; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
            (*c >= '0' && *c <= '9') || strchr(".-_:", *c))
            continue;
        snprintf(why, whylen,
                 "holds '%c'; expected a host name or an IP address as the "
                 "server's certificate names it, e.g. redis.example.com",
                 *c);
        return -1;
    }
    return 0;
}

static const char *const yes_no_words[] = {"yes", "no", NULL};
static const int yes_no_values[] = {1, 0};

/*
 * The URL's own settings: how to reach and trust the addresses it names.
 * They sit beside the addresses and credentials (a configuration writes
 * them in store.url's query), so a configuration's store: section does not
 * read this table; the strings live as long as the parsed URL.
 */
const ratel__option_t ratel__redis_url_options[] = {
    {"db", RATEL__OPTION_UINT, 0, 15, 0, FIELD(db), NULL, NULL, NULL},
    {"tls_ca_file", RATEL__OPTION_STRING, 0, 0, 0, FIELD(tls_ca_file), NULL,
     NULL, NULL},
    {"tls_cert_file", RATEL__OPTION_STRING, 0, 0, 0, FIELD(tls_cert_file), NULL,
     NULL, NULL},
    {"tls_key_file", RATEL__OPTION_STRING, 0, 0, 0, FIELD(tls_key_file), NULL,
     NULL, NULL},
    {"tls_server_name", RATEL__OPTION_STRING, 0, 0, 0, FIELD(tls_server_name),
     NULL, NULL, check_server_name},
    {"tls_insecure", RATEL__OPTION_ENUM, 0, 0, 0, FIELD(tls_insecure),
     yes_no_words, yes_no_values, NULL},
    {"sentinel_username", RATEL__OPTION_STRING, 0, 0, 0,
     FIELD(sentinel_username), NULL, NULL, NULL},
    {"sentinel_password", RATEL__OPTION_STRING, 0, 0, 0,
     FIELD(sentinel_password), NULL, NULL, NULL},
};

const size_t ratel__redis_url_noptions =
    sizeof ratel__redis_url_options / sizeof ratel__redis_url_options[0];

/* ------------------------------------------------------ leased keys */

#define LEASE(f) offsetof(ratel_lease_t, f), sizeof(((ratel_lease_t *)0)->f)

/*
 * A leased policy's settings (ratel_lease_t, docs/leases.md), 0 or absent
 * for the default. ttl_ms 1..3600000 (250): a longer lifetime is fewer
 * calls and a larger bound (gcra's burst + rate x ttl), and the permits
 * an idle host strands live longer; max_slice 1..1000000000 (50): the
 * calls a key makes at a rate r are at least r / max_slice a second,
 * the bound 2 x hosts x max_slice; hosts 1..100000 (1): how many hosts
 * share the key, for the printed bound only.
 */
const ratel__option_t ratel__lease_options[] = {
    {"ttl_ms", RATEL__OPTION_MSEC, 1, 3600000, 1, LEASE(ttl_ms), NULL, NULL,
     NULL},
    {"max_slice", RATEL__OPTION_UINT, 1, RATEL_LIMIT_MAX, 1, LEASE(max_slice),
     NULL, NULL, NULL},
    {"min_slice", RATEL__OPTION_UINT, 1, RATEL_LIMIT_MAX, 1, LEASE(min_slice),
     NULL, NULL, NULL},
    {"hosts", RATEL__OPTION_UINT, 1, 100000, 1, LEASE(hosts), NULL, NULL, NULL},
};

const size_t ratel__lease_noptions =
    sizeof ratel__lease_options / sizeof ratel__lease_options[0];
