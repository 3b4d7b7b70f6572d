/*
 * args.c - RATEL.* arguments: options first (any order, case-insensitive,
 * each at most once), then the rules. A rule always starts with a digit and
 * an option never does, so the first argument starting with a digit ends the
 * options. Every message names the bad input and says what is accepted.
 *
 * Parsed rule lists are kept in a small cache keyed by their exact bytes
 * (args.h): a policy's rules are parsed and checked once, not per call.
 */
#include "args.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Bit of each option in the `seen` mask. */
enum {
    OPT_COST = 1,
    OPT_PEEK = 2,
    OPT_MAXWAIT = 4,
    OPT_AT = 8,
    OPT_RENEW = 16
};

static int word_is(const char *arg, size_t len, const char *word)
{
    return len == strlen(word) && strncasecmp(arg, word, len) == 0;
}

/*
 * A decimal integer of 1..18 digits, nothing else (no sign, no spaces), in
 * [min, max]. Returns 1 and sets *out, or 0.
 */
static int parse_int(const char *arg, size_t len, int64_t min, int64_t max,
                     int64_t *out)
{
    int64_t v = 0;

    if (len == 0 || len > 18)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (arg[i] < '0' || arg[i] > '9')
            return 0;
        v = v * 10 + (arg[i] - '0');
    }
    if (v < min || v > max)
        return 0;
    *out = v;
    return 1;
}

/* The argument quoted for a message: at most 40 bytes, printable only. */
static void quote(const char *arg, size_t len, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < len && i < 40 && o + 5 < size; i++) {
        unsigned char c = (unsigned char)arg[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    if (len > 40 && o + 4 < size) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/* Puts "ratel: <what>" (what may be NULL) in err; returns code. */
static int fail(char *err, size_t errlen, int code, const char *what)
{
    if (err && errlen)
        snprintf(err, errlen, "ratel: %s", what ? what : "");
    return code;
}

/* Which options a command takes. */
static unsigned options_of(ratel_cmd_t cmd)
{
    switch (cmd) {
    case RATEL_CMD_ACQUIRE:
        return OPT_COST | OPT_PEEK | OPT_MAXWAIT | OPT_AT;
    case RATEL_CMD_REFUND:
        return OPT_COST | OPT_AT;
    case RATEL_CMD_RELEASE:
        return OPT_RENEW | OPT_AT;
    default:
        return OPT_AT;
    }
}

static const char *const option_list[] = {
    "COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules",
    "COST n, AT unix_ms, then the rules",
    "AT unix_ms",
    "RENEW, AT unix_ms, then the rules",
};

static int unknown_option(const char *arg, size_t len, ratel_cmd_t cmd,
                          char *err, size_t errlen)
{
    char q[200];
    quote(arg, len, q, sizeof q);
    if (err && errlen)
        snprintf(err, errlen,
                 "ratel: unknown or repeated option \"%s\"; options are %s", q,
                 option_list[cmd]);
    return RATEL_EINVAL;
}

/* Parses and checks the rules argv[0..argc). */
static int parse_rules(int argc, const char *const *argv, const size_t *lens,
                       ratel_policy_t *policy, char *err, size_t errlen)
{
    ratel_rule_t rules[RATEL_MAX_RULES];
    char msg[400];
    int rc;

    if (argc == 0)
        return fail(err, errlen, RATEL_EINVAL, "at least one rule is needed");
    if (argc > RATEL_MAX_RULES)
        return fail(err, errlen, RATEL_ETOOMANY, "at most 8 rules");
    for (int i = 0; i < argc; i++) {
        rc = ratel_rule_parse(argv[i], lens[i], &rules[i], msg, sizeof msg);
        if (rc != 0)
            return fail(err, errlen, rc, msg);
    }
    rc = ratel_policy_init(policy, rules, (size_t)argc, msg, sizeof msg);
    return rc != 0 ? fail(err, errlen, rc, msg) : 0;
}

/*
 * The policy cache (args.h). A set's entries are compared in full (hash,
 * length and bytes), so a collision costs a parse, never a wrong policy.
 */
#define CACHE_WAYS 4
#define CACHE_SETS (RATEL_POLICY_CACHE_SIZE / CACHE_WAYS)

typedef struct cache_entry_s {
    uint64_t hash;
    uint64_t used;   /* tick of the last use; 0: a free entry */
    uint32_t keylen; /* bytes of key */
    uint8_t key[RATEL_POLICY_CACHE_KEY_MAX];
    ratel_policy_t policy;
} cache_entry_t;

static cache_entry_t cache[RATEL_POLICY_CACHE_SIZE];
static uint64_t cache_tick;
static ratel_policy_cache_stats_t cache_stats;

void ratel__policy_cache_stats(ratel_policy_cache_stats_t *out)
{
    *out = cache_stats;
}

/*
 * A rule list's cache key, written to key: each rule's length (one byte)
 * and bytes, so that ("1/1s", "2/1m") and ("1/1s2/1m") differ. Returns its
 * length, or 0 for a list that is not cached (no rule, too many, too long).
 */
static size_t cache_key(int argc, const char *const *argv, const size_t *lens,
                        uint8_t *key)
{
    size_t n = 0;

    if (argc < 1 || argc > RATEL_MAX_RULES)
        return 0;
    for (int i = 0; i < argc; i++) {
        if (lens[i] > 255 || n + 1 + lens[i] > RATEL_POLICY_CACHE_KEY_MAX)
            return 0;
        key[n++] = (uint8_t)lens[i];
        memcpy(key + n, argv[i], lens[i]);
        n += lens[i];
    }
    return n;
}

/* A 64-bit hash of len bytes, eight at a time (not for untrusted tables:
   here a collision only costs a parse). */
static uint64_t hash_bytes(const uint8_t *p, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len, w;

    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (len > 0) {
        w = 0;
        memcpy(&w, p, len);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    }
    return h ^ (h >> 32);
}

/* The entry holding key, or NULL with the entry to replace in *victim. */
static cache_entry_t *cache_find(const uint8_t *key, size_t len, uint64_t hash,
                                 cache_entry_t **victim)
{
    cache_entry_t *set = &cache[(hash % CACHE_SETS) * CACHE_WAYS];

    *victim = set;
    for (int w = 0; w < CACHE_WAYS; w++) {
        cache_entry_t *e = &set[w];
        if (e->used && e->hash == hash && e->keylen == len &&
            memcmp(e->key, key, len) == 0)
            return e;
        if (e->used < (*victim)->used)
            *victim = e;
    }
    return NULL;
}

/* parse_rules through the cache: a hit skips parsing and checking. */
static int parse_rules_cached(int argc, const char *const *argv,
                              const size_t *lens, ratel_policy_t *policy,
                              char *err, size_t errlen)
{
    uint8_t key[RATEL_POLICY_CACHE_KEY_MAX];
    size_t len = cache_key(argc, argv, lens, key);
    uint64_t hash = len > 0 ? hash_bytes(key, len) : 0;
    cache_entry_t *e = NULL, *victim = NULL;
    int rc;

    if (len > 0 && (e = cache_find(key, len, hash, &victim)) != NULL) {
        e->used = ++cache_tick;
        cache_stats.hits++;
        *policy = e->policy;
        return 0;
    }
    cache_stats.misses++;
    rc = parse_rules(argc, argv, lens, policy, err, errlen);
    if (rc == 0 && len > 0) {
        if (!victim->used)
            cache_stats.entries++;
        victim->hash = hash;
        victim->used = ++cache_tick;
        victim->keylen = (uint32_t)len;
        memcpy(victim->key, key, len);
        victim->policy = *policy;
    }
    return rc;
}

/* Acquire's checks that need the rules: cost within every rule's reach,
   MAXWAIT on gcra rules only. */
static int check_request(const ratel_cmd_args_t *a, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < a->policy.nrules; i++) {
        const ratel_rule_t *r = &a->policy.rules[i];
        uint64_t cap = ratel_rule_capacity(r);
        if (a->request.cost > cap) {
            char text[64];
            ratel_rule_format(r, text, sizeof text);
            if (err && errlen)
                snprintf(err, errlen,
                         "ratel: COST %llu is more than rule %u (\"%s\") can "
                         "ever admit (%llu)",
                         (unsigned long long)a->request.cost, i + 1, text,
                         (unsigned long long)cap);
            return RATEL_ECOST;
        }
        if (a->request.max_wait_ms > 0 && r->algo != RATEL_ALGO_GCRA)
            return fail(err, errlen, RATEL_EINVAL,
                        "MAXWAIT needs every rule to be gcra");
    }
    return 0;
}

/* RELEASE's first argument, the lease id an ACQUIRE returned. */
static int read_lease(int argc, const char *const *argv, const size_t *lens,
                      ratel_cmd_args_t *out, char *err, size_t errlen)
{
    int64_t v;

    if (argc < 1 || !parse_int(argv[0], lens[0], 1, UINT32_MAX, &v))
        return fail(err, errlen, RATEL_EINVAL,
                    "LEASE must be an integer from 1 to 4294967295 (the "
                    "lease an ACQUIRE returned)");
    out->lease = (uint32_t)v;
    return 0;
}

int ratel__cmd_parse(ratel_cmd_t cmd, int argc, const char *const *argv,
                     const size_t *lens, ratel_cmd_args_t *out, char *err,
                     size_t errlen)
{
    unsigned allowed = options_of(cmd), seen = 0;
    int i = 0, rc;

    memset(out, 0, sizeof *out);
    out->request.cost = 1;
    if (cmd == RATEL_CMD_RELEASE &&
        (rc = read_lease(argc, argv, lens, out, err, errlen)) != 0)
        return rc;
    i = cmd == RATEL_CMD_RELEASE;
    for (; i < argc && lens[i] > 0 && (argv[i][0] < '0' || argv[i][0] > '9');
         i++) {
        const char *a = argv[i];
        size_t n = lens[i];
        unsigned opt = word_is(a, n, "COST")      ? OPT_COST
                       : word_is(a, n, "PEEK")    ? OPT_PEEK
                       : word_is(a, n, "MAXWAIT") ? OPT_MAXWAIT
                       : word_is(a, n, "AT")      ? OPT_AT
                       : word_is(a, n, "RENEW")   ? OPT_RENEW
                                                  : 0;
        int64_t v = 0;
        if (!(opt & allowed) || (opt & seen))
            return unknown_option(a, n, cmd, err, errlen);
        seen |= opt;
        if (opt == OPT_PEEK || opt == OPT_RENEW) {
            if (opt == OPT_PEEK)
                out->request.flags |= RATEL_PEEK;
            else
                out->lease_flags |= RATEL_RENEW;
            continue;
        }
        /* The other options take a value. */
        if (++i >= argc)
            v = -1;
        if (opt == OPT_COST) {
            if (v < 0 || !parse_int(argv[i], lens[i], 1, RATEL_LIMIT_MAX, &v))
                return fail(err, errlen, RATEL_EINVAL,
                            "COST must be an integer from 1 to 1000000000");
            out->request.cost = (uint64_t)v;
        } else if (opt == OPT_MAXWAIT) {
            if (v < 0 ||
                !parse_int(argv[i], lens[i], 0, RATEL_PERIOD_MAX_MS, &v))
                return fail(err, errlen, RATEL_EINVAL,
                            "MAXWAIT must be an integer from 0 to 2592000000");
            out->request.max_wait_ms = v;
        } else {
            if (v < 0 || !parse_int(argv[i], lens[i], 0, RATEL_CMD_AT_MAX, &v))
                return fail(err, errlen, RATEL_EINVAL,
                            "AT must be an integer from 0 to 9007199254740");
            out->has_at = 1;
            out->at_ms = v;
        }
    }
    if (cmd == RATEL_CMD_INFO) {
        return i < argc ? unknown_option(argv[i], lens[i], cmd, err, errlen)
                        : 0;
    }
    rc = parse_rules_cached(argc - i, argv + i, lens + i, &out->policy, err,
                            errlen);
    if (rc != 0)
        return rc;
    if (cmd == RATEL_CMD_RELEASE && !ratel_policy_has_leases(&out->policy))
        return fail(err, errlen, RATEL_EINVAL,
                    "RELEASE needs a policy with a concurrent rule (e.g. "
                    "10/30s:concurrent)");
    return cmd == RATEL_CMD_ACQUIRE ? check_request(out, err, errlen) : 0;
}
