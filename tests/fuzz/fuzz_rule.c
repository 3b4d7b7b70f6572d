/*
 * fuzz_rule.c - the rule grammar and ratel_policy_parse on arbitrary bytes.
 *
 * Three views of one input:
 *
 *   1. the whole input as one rule text (ratel_rule_parse with its length,
 *      so NUL and any other byte reach the parser);
 *   2. the input split on '\n' into rule texts, each parsed on its own and
 *      all together with ratel_policy_parse (NUL-terminated copies);
 *   3. the first 13 bytes as a raw ratel_rule_t given to ratel_policy_init,
 *      which reaches rules no text spells in an unusual way.
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - a parse either fails with RATEL_ERULE and a non-empty, NUL-terminated
 *     message containing `rule "` (truncated safely to any errlen), or gives
 *     a rule that passes the range checks of ratel.h;
 *   - ratel_rule_format of such a rule parses back to the identical rule and
 *     ratel_rule_explain returns a positive length; both truncate like
 *     snprintf into buffers of exactly the size given;
 *   - ratel_policy_parse agrees with the rules parsed one by one: the first
 *     bad rule's error and message, RATEL_ETOOMANY past RATEL_MAX_RULES,
 *     RATEL_EINVAL for a repeated rule, otherwise exactly those rules;
 *   - ratel_policy_init accepts a raw rule exactly when it passes the range
 *     checks, and otherwise names it with `rule "`.
 */
#include "ratel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIECES 16
/* Bucket depth bound of the grammar: burst x period / limit, 10 years. */
#define DEPTH_MAX_MS ((uint64_t)3650 * 86400000)

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_rule: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

static int rule_equal(const ratel_rule_t *a, const ratel_rule_t *b)
{
    return a->algo == b->algo && a->limit == b->limit &&
           a->period_ms == b->period_ms && a->burst == b->burst;
}

/*
 * The range checks ratel.h states for a rule; for gcra also the bucket
 * depth, burst x period / limit at most 10 years (exactly, no rounding).
 */
static int rule_in_range(const ratel_rule_t *r)
{
    if ((unsigned)r->algo > RATEL_ALGO_CONCURRENT)
        return 0;
    if (r->limit < 1 || r->limit > RATEL_LIMIT_MAX ||
        (r->algo == RATEL_ALGO_CONCURRENT && r->limit > RATEL_CONCURRENT_MAX))
        return 0;
    if (r->period_ms < RATEL_PERIOD_MIN_MS ||
        r->period_ms > RATEL_PERIOD_MAX_MS)
        return 0;
    if (r->algo != RATEL_ALGO_GCRA)
        return r->burst == 0;
    return r->burst >= 1 && r->burst <= RATEL_LIMIT_MAX &&
           (unsigned __int128)r->burst * r->period_ms <=
               (unsigned __int128)DEPTH_MAX_MS * r->limit;
}

/* A message written into errbuf is NUL-terminated, non-empty, names a rule. */
static void check_message(const char *msg, size_t cap)
{
    ASSERT(memchr(msg, '\0', cap) != NULL);
    ASSERT(msg[0] != '\0');
    ASSERT(strstr(msg, "rule \"") != NULL);
}

/* Format and explain of a valid rule: round trip and truncation. */
static void check_valid_rule(const ratel_rule_t *rule)
{
    char text[128], words[512], err[512];
    ratel_rule_t back;
    ratel_policy_t policy;
    int n, m;

    ASSERT(rule_in_range(rule));

    n = ratel_rule_format(rule, text, sizeof text);
    ASSERT(n > 0 && (size_t)n < sizeof text && strlen(text) == (size_t)n);
    memset(&back, 0xa5, sizeof back);
    ASSERT(ratel_rule_parse(text, (size_t)n, &back, err, sizeof err) == 0);
    ASSERT(rule_equal(&back, rule));

    m = ratel_rule_explain(rule, words, sizeof words);
    ASSERT(m > 0 && (size_t)m < sizeof words && strlen(words) == (size_t)m);

    /* snprintf-style truncation into buffers of exactly the given size. */
    for (size_t cap = 0; cap <= (size_t)n + 1; cap += 1 + cap / 3) {
        char *b = malloc(cap ? cap : 1);
        ASSERT(b);
        ASSERT(ratel_rule_format(rule, b, cap) == n);
        if (cap > 0) {
            ASSERT(strlen(b) == (cap - 1 < (size_t)n ? cap - 1 : (size_t)n));
            ASSERT(memcmp(b, text, strlen(b)) == 0);
        }
        free(b);
    }
    {
        size_t cap = 1 + (size_t)m / 2;
        char *b = malloc(cap);
        ASSERT(b);
        ASSERT(ratel_rule_explain(rule, b, cap) == m);
        ASSERT(strlen(b) == cap - 1 && memcmp(b, words, cap - 1) == 0);
        free(b);
    }

    /* A valid rule makes a valid one-rule policy. */
    ASSERT(ratel_policy_init(&policy, rule, 1, err, sizeof err) == 0);
    ASSERT(policy.nrules == 1 && rule_equal(&policy.rules[0], rule));
    ASSERT(ratel_policy_state_max(&policy) > 4);
}

/*
 * Parses text[0..len) and checks the outcome. Returns the result code and
 * fills *rule (on success) and msg (on error, NUL-terminated).
 */
static int check_text(const char *text, size_t len, ratel_rule_t *rule,
                      char *msg, size_t msgcap)
{
    char err[512];
    ratel_rule_t r1, r2;
    int rc, rc2;

    memset(err, 'X', sizeof err);
    rc = ratel_rule_parse(text, len, &r1, err, sizeof err);
    ASSERT(rc == 0 || rc == RATEL_ERULE);
    rc2 = ratel_rule_parse(text, len, &r2, NULL, 0);
    ASSERT(rc2 == rc);
    if (rc == 0) {
        ASSERT(rule_equal(&r1, &r2));
        check_valid_rule(&r1);
        if (rule)
            *rule = r1;
        return 0;
    }
    check_message(err, sizeof err);
    if (msg)
        snprintf(msg, msgcap, "%s", err);
    /* The same message truncated into an exact heap buffer. */
    {
        size_t full = strlen(err), cap = 1 + len % (full + 1);
        char *b = malloc(cap);
        ASSERT(b);
        ASSERT(ratel_rule_parse(text, len, &r2, b, cap) == RATEL_ERULE);
        ASSERT(strlen(b) == (cap - 1 < full ? cap - 1 : full));
        ASSERT(memcmp(b, err, strlen(b)) == 0);
        free(b);
    }
    return rc;
}

/* View 2: one rule per line, then all of them as one policy. */
static void check_policy(const uint8_t *data, size_t size)
{
    char *texts[MAX_PIECES];
    const char *ctexts[MAX_PIECES];
    ratel_rule_t rules[MAX_PIECES];
    int rc[MAX_PIECES];
    char msgs[MAX_PIECES][512];
    char err[512];
    ratel_policy_t policy;
    size_t n = 0, start = 0;
    int first_bad = -1, dup = 0, got;

    for (size_t i = 0; i <= size && n < MAX_PIECES; i++) {
        if (i < size && data[i] != '\n')
            continue;
        texts[n] = malloc(i - start + 1);
        ASSERT(texts[n]);
        memcpy(texts[n], data + start, i - start);
        texts[n][i - start] = '\0';
        /* The full piece (NULs included), then what strlen sees. */
        check_text((const char *)data + start, i - start, NULL, NULL, 0);
        rc[n] = check_text(texts[n], strlen(texts[n]), &rules[n], msgs[n],
                           sizeof msgs[n]);
        if (rc[n] != 0 && first_bad < 0)
            first_bad = (int)n;
        ctexts[n] = texts[n];
        n++;
        start = i + 1;
    }
    for (size_t i = 0; i < n && first_bad < 0; i++)
        for (size_t j = 0; j < i; j++)
            dup |= rule_equal(&rules[i], &rules[j]);

    memset(err, 0, sizeof err);
    memset(&policy, 0, sizeof policy);
    got = ratel_policy_parse(&policy, ctexts, n, err, sizeof err);
    ASSERT(ratel_policy_parse(&policy, ctexts, n, NULL, 0) == got);
    if (n > RATEL_MAX_RULES) {
        /* Too many rules; a bad rule may be reported first instead. */
        ASSERT(got == RATEL_ETOOMANY || (first_bad >= 0 && got == RATEL_ERULE));
        ASSERT(err[0] != '\0');
    } else if (first_bad >= 0) {
        ASSERT(got == RATEL_ERULE);
        ASSERT(strcmp(err, msgs[first_bad]) == 0);
    } else if (dup) {
        ASSERT(got == RATEL_EINVAL);
        ASSERT(err[0] != '\0' && strstr(err, "repeats") != NULL);
    } else {
        ASSERT(got == 0);
        ASSERT(policy.nrules == n);
        for (size_t i = 0; i < n; i++)
            ASSERT(rule_equal(&policy.rules[i], &rules[i]));
        ASSERT(ratel_policy_state_max(&policy) > 4 * n);
    }
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
}

static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* View 3: a raw rule struct, mapped so that valid rules are common. */
static void check_raw(const uint8_t *data, size_t size)
{
    uint8_t b[13] = {0};
    ratel_rule_t rule;
    ratel_policy_t policy;
    char err[512], text[128];
    int rc;

    memcpy(b, data, size < sizeof b ? size : sizeof b);
    memset(&rule, 0, sizeof rule); /* no calendar: tested by the text view */
    rule.algo = (ratel_algo_t)(b[0] % (RATEL_ALGO_CONCURRENT + 2));
    rule.limit = ld32(b + 1) % (RATEL_LIMIT_MAX + 2);
    if (rule.algo == RATEL_ALGO_CONCURRENT && (b[0] & 0x20))
        rule.limit %= RATEL_CONCURRENT_MAX + 2; /* near its bound too */
    rule.period_ms = ld32(b + 5) % (RATEL_PERIOD_MAX_MS + 2);
    rule.burst = ld32(b + 9) % (RATEL_LIMIT_MAX + 2);
    /* Mostly keep the burst the algorithm expects. */
    if (!(b[0] & 0x80)) {
        if (rule.algo != RATEL_ALGO_GCRA)
            rule.burst = 0;
        else if (b[0] & 0x40)
            rule.burst = rule.limit;
    }

    /* Formatting never fails, whatever the rule. */
    ASSERT(ratel_rule_format(&rule, text, sizeof text) > 0);

    memset(err, 0, sizeof err);
    rc = ratel_policy_init(&policy, &rule, 1, err, sizeof err);
    if (rule_in_range(&rule)) {
        ASSERT(rc == 0);
        check_valid_rule(&rule);
    } else {
        ASSERT(rc == RATEL_ERULE);
        check_message(err, sizeof err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_text((const char *)data, size, NULL, NULL, 0);
    check_policy(data, size);
    check_raw(data, size);
    return 0;
}
