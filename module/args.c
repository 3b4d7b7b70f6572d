/*
 * args.c - RATEL.* arguments: options first (any order, case-insensitive,
 * each at most once), then the rules. A rule always starts with a digit and
 * an option never does, so the first argument starting with a digit ends the
 * options. The options are read by the core's one reader of them
 * (ratel_options_read, lib/core/options.c), which rateld and the CLI use
 * too, and checked against the rules by ratel_options_check; every
 * message names the bad input and says what is accepted.
 *
 * Parsed rule lists are kept in a small cache keyed by their exact bytes
 * (args.h): a policy's rules are parsed and checked once, not per call.
 */
#include "args.h"

#include <stdio.h>
#include <string.h>

/* Puts "ratel: <what>" (what may be NULL) in err; returns code. */
static int fail(char *err, size_t errlen, int code, const char *what)
{
    if (err && errlen)
        snprintf(err, errlen, "ratel: %s", what ? what : "");
    return code;
}

/* Each command's RATEL_OP_* bit. */
static const unsigned op_of[] = {
    [RATEL_CMD_ACQUIRE] = RATEL_OP_ACQUIRE,
    [RATEL_CMD_REFUND] = RATEL_OP_REFUND,
    [RATEL_CMD_INFO] = RATEL_OP_INFO,
    [RATEL_CMD_RELEASE] = RATEL_OP_RELEASE,
    [RATEL_CMD_SLICE] = RATEL_OP_SLICE,
    [RATEL_CMD_UNSLICE] = RATEL_OP_UNSLICE,
};

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

/*
 * The options, by the one reader of them (ratel_options_read): the leading
 * one (RELEASE's lease, SLICE's want, UNSLICE's unspent), then words until the
 * first argument that starts with a digit, a word with a value taking the next
 * argument. Returns the index of the first argument after them, or an error
 * with its message
 * ("ratel: " and the reader's sentence).
 */
static int read_options(ratel_options_t *o, int argc, const char *const *argv,
                        const size_t *lens, char *err, size_t errlen)
{
    char msg[400];
    int i = 0, kind;

    if (o->first >= 0 &&
        ratel_options_read(o, NULL, 0, argc > 0 ? argv[0] : NULL,
                           argc > 0 ? lens[0] : 0, msg, sizeof msg) != 0)
        return fail(err, errlen, RATEL_EINVAL, msg);
    i = o->first >= 0;
    for (; i < argc && lens[i] > 0 && (argv[i][0] < '0' || argv[i][0] > '9');
         i++) {
        const char *value = NULL;
        size_t len = 0;
        if (ratel_option_find(RATEL_SPELL_WORD, argv[i], lens[i], &kind) >= 0 &&
            (kind == RATEL_ARG_VALUE || kind == RATEL_ARG_NEEDED) &&
            i + 1 < argc) {
            value = argv[i + 1];
            len = lens[i + 1];
        }
        if (ratel_options_read(o, argv[i], lens[i], value, len, msg,
                               sizeof msg) != 0)
            return fail(err, errlen, RATEL_EINVAL, msg);
        i += value != NULL;
    }
    return i;
}

int ratel__cmd_parse(ratel_cmd_t cmd, int argc, const char *const *argv,
                     const size_t *lens, ratel_cmd_args_t *out, char *err,
                     size_t errlen)
{
    ratel_options_t o;
    char msg[400];
    int i, rc;

    memset(out, 0, sizeof *out);
    ratel_options_init(&o, op_of[cmd], RATEL_SPELL_WORD, 0);
    if ((i = read_options(&o, argc, argv, lens, err, errlen)) < 0)
        return i;
    ratel_options_request(&o, &out->request);
    out->lease = (uint32_t)o.value[RATEL_OPTION_LEASE];
    out->lease_flags = o.value[RATEL_OPTION_RENEW] ? RATEL_RENEW : 0;
    out->has_at = (o.given >> RATEL_OPTION_AT) & 1u;
    out->at_ms = o.value[RATEL_OPTION_AT];
    out->want = (uint64_t)o.value[RATEL_OPTION_WANT];
    out->ttl_ms = o.value[RATEL_OPTION_TTL];
    out->holder = (o.given >> RATEL_OPTION_HOLDER) & 1u
                      ? (uint64_t)o.value[RATEL_OPTION_HOLDER]
                      : 0;
    out->unspent = (uint64_t)o.value[RATEL_OPTION_UNSPENT];
    out->until_ms = o.value[RATEL_OPTION_UNTIL];
    if (cmd == RATEL_CMD_INFO) {
        if (i == argc)
            return 0;
        /* What follows INFO's options is no option of it: the reader
           refuses it with its message. */
        ratel_options_read(&o, argv[i], lens[i], NULL, 0, msg, sizeof msg);
        return fail(err, errlen, RATEL_EINVAL, msg);
    }
    rc = parse_rules_cached(argc - i, argv + i, lens + i, &out->policy, err,
                            errlen);
    if (rc != 0)
        return rc;
    if (cmd == RATEL_CMD_RELEASE && !ratel_policy_has_leases(&out->policy))
        return fail(err, errlen, RATEL_EINVAL,
                    "RELEASE needs a policy with a concurrent rule (e.g. "
                    "10/30s:concurrent)");
    rc = ratel_options_check(&o, &out->policy, msg, sizeof msg);
    return rc != 0 ? fail(err, errlen, rc, msg) : 0;
}
