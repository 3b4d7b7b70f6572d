/*
 * rule.c - the rule grammar: parse, format back, explain in words.
 *
 *   rule   = limit "/" period [ ":" algo ] [ "," "burst=" number ]
 *   limit  = 1..1000000000
 *   period = [ number ] unit        unit = "ms" | "s" | "m" | "h" | "d"
 *   algo   = "sliding" | "fixed" | "approx" | "gcra"
 *
 * One parser serves the CLI, the daemon's config, the module's arguments and
 * the docs. Errors quote the rule and say what would be accepted.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static const char grammar_hint[] =
    "expected LIMIT/PERIOD[:ALGO][,burst=N], e.g. 10/1m, 1000/1d:fixed or "
    "100/1s:gcra,burst=200";

static const struct {
    const char *name;
    uint32_t ms;
    const char *word; /* singular, for explain */
} units[] = {
    /* Longest first where one unit is a prefix of another ("ms", "m"). */
    {"ms", 1, "millisecond"}, {"s", 1000, "second"},  {"m", 60000, "minute"},
    {"h", 3600000, "hour"},   {"d", 86400000, "day"},
};
#define NUNITS (sizeof units / sizeof units[0])

static const char *const algo_names[] = {
#define ALGO_NAME_(NAME, name, number) [number] = #name,
    RATEL_ALGO_MAP(ALGO_NAME_)
#undef ALGO_NAME_
};

const char *ratel_algo_name(ratel_algo_t algo)
{
    if ((unsigned)algo < sizeof algo_names / sizeof algo_names[0])
        return algo_names[algo];
    return "unknown";
}

uint64_t ratel_rule_capacity(const ratel_rule_t *rule)
{
    return rule->algo == RATEL_ALGO_GCRA ? rule->burst : rule->limit;
}

/*
 * Writes `rule "TEXT": REASON; HINT` into errbuf. The rule text is quoted
 * with non-printable bytes escaped and cut at 64 bytes, so hostile input
 * cannot flood a log line.
 */
/*
 * Writes up to `max` bytes of text into out (at least 4 * max + 4 bytes),
 * escaping quotes, backslashes and every byte that is not printable ASCII,
 * "..." marking a cut: messages quote user input safely (an error reply
 * holding a CR or LF would break a protocol such as Redis's).
 */
static void quote_into(char *out, size_t size, const char *text, size_t len,
                       size_t max)
{
    size_t q = 0;

    for (size_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\')
            q += (size_t)snprintf(out + q, size - q, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            q += (size_t)snprintf(out + q, size - q, "\\x%02x", c);
        else
            out[q++] = (char)c;
    }
    if (len > max)
        q += (size_t)snprintf(out + q, size - q, "...");
    out[q] = '\0';
}

static int rule_error(char *errbuf, size_t errlen, const char *text, size_t len,
                      const char *fmt, ...)
{
    char quoted[64 * 4 + 8];
    char reason[200];
    va_list ap;

    if (!errbuf || errlen == 0)
        return RATEL_ERULE;
    quote_into(quoted, sizeof quoted, text, len, 64);
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(errbuf, errlen, "rule \"%s\": %s; %s", quoted, reason,
             grammar_hint);
    return RATEL_ERULE;
}

/*
 * Reads decimal digits at text[*pos] into *out, stopping at the first
 * non-digit. Returns the number of digits read; sets *overflow when the
 * value exceeds `max` (reading goes on, so the caller's position is right).
 */
static size_t read_number(const char *text, size_t len, size_t *pos,
                          uint64_t max, uint64_t *out, int *overflow)
{
    size_t start = *pos;
    uint64_t v = 0;

    *overflow = 0;
    while (*pos < len && text[*pos] >= '0' && text[*pos] <= '9') {
        if (!*overflow) {
            v = v * 10 + (uint64_t)(text[*pos] - '0');
            if (v > max)
                *overflow = 1;
        }
        (*pos)++;
    }
    *out = v;
    return *pos - start;
}

/*
 * Range checks shared by the parser (which quotes the user's text) and
 * ratel__rule_check (which quotes the rule's canonical form).
 */
static int check_rule(const ratel_rule_t *rule, const char *text, size_t len,
                      char *errbuf, size_t errlen)
{
    if ((unsigned)rule->algo >= RATEL__ALGOS)
        return rule_error(errbuf, errlen, text, len, "unknown algorithm %d",
                          (int)rule->algo);
    if (rule->limit < 1 || rule->limit > RATEL_LIMIT_MAX)
        return rule_error(errbuf, errlen, text, len,
                          "limit must be from 1 to %u", RATEL_LIMIT_MAX);
    if (rule->period_ms < RATEL_PERIOD_MIN_MS ||
        rule->period_ms > RATEL_PERIOD_MAX_MS)
        return rule_error(errbuf, errlen, text, len,
                          "period must be from 1ms to 30d");
    if (rule->algo == RATEL_ALGO_GCRA) {
        if (rule->burst < 1 || rule->burst > RATEL_LIMIT_MAX)
            return rule_error(errbuf, errlen, text, len,
                              "burst must be from 1 to %u", RATEL_LIMIT_MAX);
        /* burst * period / limit > depth, without a division: this check
           runs on every decision. */
        if ((unsigned __int128)rule->burst * rule->period_ms >
            (unsigned __int128)RATEL__DEPTH_MAX_MS * rule->limit)
            return rule_error(errbuf, errlen, text, len,
                              "burst x period / limit must be at most 10 "
                              "years (the bucket would never drain)");
    } else if (rule->burst != 0) {
        return rule_error(errbuf, errlen, text, len,
                          "burst applies to gcra rules only");
    }
    return 0;
}

int ratel__rule_check(const ratel_rule_t *rule, char *errbuf, size_t errlen)
{
    char text[64];
    if (!errbuf || errlen == 0) /* validation only: no message to format */
        return check_rule(rule, "", 0, NULL, 0);
    int n = ratel_rule_format(rule, text, sizeof text);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : 63;
    return check_rule(rule, text, len, errbuf, errlen);
}

static int is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * PERIOD at text[*pos]: an optional count and a unit (a bare unit means
 * one of it). Returns 0 with the period in *period_ms and *pos past it,
 * or RATEL_ERULE with the message.
 */
static int read_period(const char *text, size_t len, size_t *at,
                       uint32_t *period_ms, char *errbuf, size_t errlen)
{
    size_t pos = *at, digits, ustart;
    uint64_t count = 1;
    uint32_t unit_ms = 0;
    int overflow;

    digits =
        read_number(text, len, &pos, RATEL_PERIOD_MAX_MS, &count, &overflow);
    if (digits == 0)
        count = 1; /* a bare unit means one of it */
    if (overflow)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD must be from 1ms to 30d");
    ustart = pos;
    for (size_t u = 0; u < NUNITS; u++) {
        size_t ulen = strlen(units[u].name);
        if (len - pos >= ulen && memcmp(text + pos, units[u].name, ulen) == 0) {
            unit_ms = units[u].ms;
            pos += ulen;
            break;
        }
    }
    if (unit_ms == 0)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD needs a unit: ms, s, m, h or d");
    if (pos < len && is_letter(text[pos])) {
        /* "20/minute", "1/sec": a word, not one of the units. */
        char word[16 * 4 + 8];
        size_t end = pos;
        while (end < len && is_letter(text[end]))
            end++;
        quote_into(word, sizeof word, text + ustart, end - ustart, 16);
        return rule_error(errbuf, errlen, text, len,
                          "unknown unit \"%s\"; the units are ms, s, m, h "
                          "and d (e.g. 20/1m, 20/60s)",
                          word);
    }
    if (count == 0)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD must be at least 1ms");
    if (count * unit_ms > RATEL_PERIOD_MAX_MS)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD must be at most 30d");

    *period_ms = (uint32_t)(count * unit_ms);
    *at = pos;
    return 0;
}


int ratel_rule_parse(const char *text, size_t len, ratel_rule_t *out,
                     char *errbuf, size_t errlen)
{
    size_t pos = 0, digits;
    uint64_t limit, burst = 0;
    uint32_t period_ms = 0;
    int overflow, have_burst = 0;
    ratel_rule_t rule;

    if (!text || !out)
        return rule_error(errbuf, errlen, "", 0, "no rule given");
    if (len == 0)
        return rule_error(errbuf, errlen, text, len, "empty rule");

    digits = read_number(text, len, &pos, RATEL_LIMIT_MAX, &limit, &overflow);
    if (digits == 0)
        return rule_error(errbuf, errlen, text, len,
                          "LIMIT must be a whole number from 1 to %u",
                          RATEL_LIMIT_MAX);
    if (overflow || limit == 0)
        return rule_error(errbuf, errlen, text, len,
                          "LIMIT must be from 1 to %u", RATEL_LIMIT_MAX);
    if (pos >= len || text[pos] != '/')
        return rule_error(errbuf, errlen, text, len,
                          "expected '/' after the limit");
    pos++;

    if (read_period(text, len, &pos, &period_ms, errbuf, errlen) != 0)
        return RATEL_ERULE;

    rule.algo = RATEL_ALGO_SLIDING;
    if (pos < len && text[pos] == ':') {
        size_t start = ++pos;
        int found = 0;
        while (pos < len && text[pos] != ',')
            pos++;
        for (size_t a = 0; a < sizeof algo_names / sizeof algo_names[0]; a++) {
            if (strlen(algo_names[a]) == pos - start &&
                memcmp(text + start, algo_names[a], pos - start) == 0) {
                rule.algo = (ratel_algo_t)a;
                found = 1;
            }
        }
        if (!found) {
            char name[32 * 4 + 8];
            quote_into(name, sizeof name, text + start, pos - start, 32);
            return rule_error(errbuf, errlen, text, len,
                              "unknown algorithm \"%s\" (use sliding, "
                              "fixed, approx or gcra)",
                              name);
        }
    }
    while (pos < len && text[pos] == ',') {
        static const char opt[] = "burst=";
        pos++;
        if (len - pos < sizeof opt - 1 ||
            memcmp(text + pos, opt, sizeof opt - 1) != 0)
            return rule_error(errbuf, errlen, text, len,
                              "unknown option at byte %zu (the only option "
                              "is burst=N, for gcra)",
                              pos + 1);
        if (have_burst)
            return rule_error(errbuf, errlen, text, len,
                              "burst is given twice");
        pos += sizeof opt - 1;
        digits =
            read_number(text, len, &pos, RATEL_LIMIT_MAX, &burst, &overflow);
        if (digits == 0 || overflow || burst == 0)
            return rule_error(errbuf, errlen, text, len,
                              "burst must be a whole number from 1 to %u",
                              RATEL_LIMIT_MAX);
        have_burst = 1;
    }
    if (pos < len) {
        char rest[16 * 4 + 8];
        quote_into(rest, sizeof rest, text + pos, len - pos, 16);
        return rule_error(errbuf, errlen, text, len,
                          "unexpected \"%s\" at byte %zu", rest, pos + 1);
    }
    if (have_burst && rule.algo != RATEL_ALGO_GCRA)
        return rule_error(errbuf, errlen, text, len,
                          "burst applies to gcra rules only (add :gcra)");

    rule.limit = (uint32_t)limit;
    rule.period_ms = period_ms;
    rule.burst = rule.algo == RATEL_ALGO_GCRA
                     ? (have_burst ? (uint32_t)burst : rule.limit)
                     : 0;
    if (check_rule(&rule, text, len, errbuf, errlen) != 0)
        return RATEL_ERULE;
    *out = rule;
    return 0;
}

/* The largest unit that divides `period_ms` exactly, as an index. */
static size_t best_unit(uint32_t period_ms)
{
    size_t best = 0;
    for (size_t u = 0; u < NUNITS; u++)
        if (period_ms % units[u].ms == 0)
            best = u;
    return best;
}

int ratel_rule_format(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    size_t u = best_unit(rule->period_ms ? rule->period_ms : 1);
    char algo[24] = "", burst[24] = "";

    if (rule->algo != RATEL_ALGO_SLIDING)
        snprintf(algo, sizeof algo, ":%s", ratel_algo_name(rule->algo));
    if (rule->algo == RATEL_ALGO_GCRA && rule->burst != rule->limit)
        snprintf(burst, sizeof burst, ",burst=%u", rule->burst);
    return snprintf(buf, buflen, "%u/%u%s%s%s", rule->limit,
                    rule->period_ms / units[u].ms, units[u].name, algo, burst);
}

/* "1-hour", "90-second", "500-millisecond": the period as an adjective. */
static void period_words(uint32_t period_ms, char *buf, size_t buflen)
{
    size_t u = best_unit(period_ms ? period_ms : 1);
    snprintf(buf, buflen, "%u-%s", period_ms / units[u].ms, units[u].word);
}

/* "hour", "90 seconds": the period as a noun, for "N requests per ...". */
static void period_noun(uint32_t period_ms, char *buf, size_t buflen)
{
    size_t u = best_unit(period_ms ? period_ms : 1);
    uint32_t n = period_ms / units[u].ms;
    if (n == 1)
        snprintf(buf, buflen, "%s", units[u].word);
    else
        snprintf(buf, buflen, "%u %ss", n, units[u].word);
}

/* A duration in microseconds as "6 minutes", "1.5 seconds", "250 us". */
static void duration_words(double us, char *buf, size_t buflen)
{
    static const struct {
        double us;
        const char *one, *many;
    } scale[] = {{86400e6, "day", "days"},
                 {3600e6, "hour", "hours"},
                 {60e6, "minute", "minutes"},
                 {1e6, "second", "seconds"},
                 {1e3, "millisecond", "milliseconds"},
                 {1, "microsecond", "microseconds"}};
    for (size_t i = 0; i < sizeof scale / sizeof scale[0]; i++) {
        if (us >= scale[i].us || i == sizeof scale / sizeof scale[0] - 1) {
            double v = us / scale[i].us;
            snprintf(buf, buflen, "%.3g %s", v,
                     v == 1 ? scale[i].one : scale[i].many);
            return;
        }
    }
}

int ratel_rule_explain(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    char period[48], interval[48];
    const char *req = rule->limit == 1 ? "request" : "requests";

    period_words(rule->period_ms, period, sizeof period);
    switch (rule->algo) {
    case RATEL_ALGO_SLIDING:
        return snprintf(buf, buflen, "at most %u %s in any %s window",
                        rule->limit, req, period);
    case RATEL_ALGO_FIXED:
        return snprintf(buf, buflen,
                        "at most %u %s per %s window aligned to the clock "
                        "(up to %llu across a window boundary)",
                        rule->limit, req, period,
                        2ull * (unsigned long long)rule->limit);
    case RATEL_ALGO_APPROX:
        return snprintf(buf, buflen,
                        "about %u %s in any %s window, estimated from the "
                        "counts of two fixed windows",
                        rule->limit, req, period);
    case RATEL_ALGO_GCRA:
        period_noun(rule->period_ms, period, sizeof period);
        duration_words((double)rule->period_ms * 1000.0 / rule->limit, interval,
                       sizeof interval);
        return snprintf(buf, buflen,
                        "%u %s per %s at a steady rate (one every %s), "
                        "bursts of up to %u",
                        rule->limit, req, period, interval, rule->burst);
    }
    return snprintf(buf, buflen, "unknown algorithm");
}
