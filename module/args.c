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

/* The request options, from the one table of them (include/ratel.h). */
typedef struct option_s {
    const char *word;
    int kind; /* RATEL_ARG_* */
    int64_t min, max;
    unsigned ops;      /* RATEL_OP_* */
    const char *value; /* its value in the list of options */
    const char *note;  /* after its range in a message */
} option_t;

static const option_t options[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note)                  \
    {#NAME, kind, min, max, ops, value, note},
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};

/* Each command's RATEL_OP_* bit. */
static const unsigned op_of[] = {
    [RATEL_CMD_ACQUIRE] = RATEL_OP_ACQUIRE,
    [RATEL_CMD_REFUND] = RATEL_OP_REFUND,
    [RATEL_CMD_INFO] = RATEL_OP_INFO,
    [RATEL_CMD_RELEASE] = RATEL_OP_RELEASE,
};

/* The option whose word is arg (case-insensitive), or -1. */
static int option_by_word(const char *arg, size_t len)
{
    for (int i = 0; i < RATEL_OPTIONS; i++)
        if (options[i].kind != RATEL_ARG_FIRST &&
            word_is(arg, len, options[i].word))
            return i;
    return -1;
}

/* "COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules": what `cmd`
   takes, in the table's order. */
static void option_list(ratel_cmd_t cmd, char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < RATEL_OPTIONS && o < size; i++)
        if ((options[i].ops & op_of[cmd]) && options[i].kind != RATEL_ARG_FIRST)
            o += (size_t)snprintf(
                buf + o, size - o, "%s%s%s%s", o ? ", " : "", options[i].word,
                options[i].value[0] ? " " : "", options[i].value);
    if ((op_of[cmd] & RATEL_OP_RULES) && o < size)
        snprintf(buf + o, size - o, ", then the rules");
}

static int unknown_option(const char *arg, size_t len, ratel_cmd_t cmd,
                          char *err, size_t errlen)
{
    char q[200], list[160];
    quote(arg, len, q, sizeof q);
    option_list(cmd, list, sizeof list);
    if (err && errlen)
        snprintf(err, errlen,
                 "ratel: unknown or repeated option \"%s\"; options are %s", q,
                 list);
    return RATEL_EINVAL;
}

/* "ratel: COST must be an integer from 1 to 1000000000". */
static int range_error(int opt, char *err, size_t errlen)
{
    const option_t *o = &options[opt];
    if (err && errlen)
        snprintf(err, errlen,
                 "ratel: %s must be an integer from %lld to %lld%s", o->word,
                 (long long)o->min, (long long)o->max, o->note);
    return RATEL_EINVAL;
}

/* Sets option `opt` to v (a flag: 1) in out. */
static void set_option(int opt, int64_t v, ratel_cmd_args_t *out)
{
    switch (opt) {
    case RATEL_OPTION_COST:
        out->request.cost = (uint64_t)v;
        break;
    case RATEL_OPTION_PEEK:
        out->request.flags |= RATEL_PEEK;
        break;
    case RATEL_OPTION_MAXWAIT:
        out->request.max_wait_ms = v;
        break;
    case RATEL_OPTION_RENEW:
        out->lease_flags |= RATEL_RENEW;
        break;
    case RATEL_OPTION_AT:
        out->has_at = 1;
        out->at_ms = v;
        break;
    case RATEL_OPTION_LEASE:
        out->lease = (uint32_t)v;
        break;
    }
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

/* "MAXWAIT needs every rule to be gcra": the algorithms that reserve. */
static int reserve_error(char *err, size_t errlen)
{
    char names[96];
    size_t o = 0;

    names[0] = '\0';
    for (int a = 0; a < RATEL_ALGOS && o < sizeof names; a++)
        if (ratel_algo_facts((ratel_algo_t)a) & RATEL_ALGO_RESERVES)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s",
                                  o ? " or " : "",
                                  ratel_algo_name((ratel_algo_t)a));
    if (err && errlen)
        snprintf(err, errlen, "ratel: MAXWAIT needs every rule to be %s",
                 names);
    return RATEL_EINVAL;
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
        if (a->request.max_wait_ms > 0 &&
            !(ratel_algo_facts(r->algo) & RATEL_ALGO_RESERVES))
            return reserve_error(err, errlen);
    }
    return 0;
}

/* The leading options of `cmd` (RATEL_ARG_FIRST: RELEASE's lease) from
   argv; returns how many it read, or an error. */
static int read_leading(ratel_cmd_t cmd, int argc, const char *const *argv,
                        const size_t *lens, ratel_cmd_args_t *out, char *err,
                        size_t errlen)
{
    int n = 0;

    for (int i = 0; i < RATEL_OPTIONS; i++) {
        int64_t v;
        if (options[i].kind != RATEL_ARG_FIRST ||
            !(options[i].ops & op_of[cmd]))
            continue;
        if (n >= argc ||
            !parse_int(argv[n], lens[n], options[i].min, options[i].max, &v))
            return range_error(i, err, errlen);
        set_option(i, v, out);
        n++;
    }
    return n;
}

int ratel__cmd_parse(ratel_cmd_t cmd, int argc, const char *const *argv,
                     const size_t *lens, ratel_cmd_args_t *out, char *err,
                     size_t errlen)
{
    unsigned seen = 0;
    int i, rc;

    memset(out, 0, sizeof *out);
    out->request.cost = 1;
    if ((i = read_leading(cmd, argc, argv, lens, out, err, errlen)) < 0)
        return i;
    for (; i < argc && lens[i] > 0 && (argv[i][0] < '0' || argv[i][0] > '9');
         i++) {
        int opt = option_by_word(argv[i], lens[i]);
        int64_t v = 1;
        if (opt < 0 || !(options[opt].ops & op_of[cmd]) || (seen & (1u << opt)))
            return unknown_option(argv[i], lens[i], cmd, err, errlen);
        seen |= 1u << opt;
        /* An option with a value takes the next argument. */
        if (options[opt].kind == RATEL_ARG_VALUE &&
            (++i >= argc || !parse_int(argv[i], lens[i], options[opt].min,
                                       options[opt].max, &v)))
            return range_error(opt, err, errlen);
        set_option(opt, v, out);
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
