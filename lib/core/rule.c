/*
 * rule.c - the rule grammar: parse, check, format back.
 *
 *   rule   = limit "/" period [ ":" algo ] { "," option }
 *   limit  = 1..1000000000
 *   period = [ number ] unit
 *   unit   = "ms" | "s" | "m" | "h" | "d" | "w" | "mo"
 *   algo   = "sliding" | "fixed" | "approx" | "gcra" | "concurrent"
 *   option = "burst=" number                      (gcra)
 *          | "tz=" ( "UTC" | ("+"|"-") HH [":" MM] | Area/City )
 *                                                 (fixed, approx)
 *
 * Weeks and months are calendar periods for fixed and approx (weeks from
 * Monday 00:00, months from the 1st); for sliding and gcra a week is 7 days
 * and months are refused. One parser serves the CLI, the daemon's config,
 * the module's arguments and the docs; lua/rule.lua mirrors it with the same
 * messages. Errors quote the rule and say what would be accepted.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static const char grammar_hint[] =
    "expected LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE], e.g. 10/1m, "
    "1000/1d:fixed,tz=+08:00 or 100/1s:gcra,burst=200";

#define WEEK_MS 604800000u
#define MONTHS 0 /* the `ms` of the month unit: months have no fixed length */

static const struct {
    const char *name;
    uint32_t ms;
    const char *word; /* singular, for explain */
} units[] = {
    /* Longest first where one unit is a prefix of another ("ms", "m"). */
    {"ms", 1, "millisecond"}, {"mo", MONTHS, "month"}, {"s", 1000, "second"},
    {"m", 60000, "minute"},   {"h", 3600000, "hour"},  {"d", 86400000, "day"},
    {"w", WEEK_MS, "week"},
};
#define NUNITS (sizeof units / sizeof units[0])
#define UNIT_MONTH 1
#define UNIT_WEEK 6

static const char *const algo_names[] = {
#define ALGO_NAME_(NAME, name, number, facts, fields) [number] = #name,
    RATEL_ALGO_MAP(ALGO_NAME_)
#undef ALGO_NAME_
};

static const uint8_t algo_fields[] = {
#define ALGO_FIELDS_(NAME, name, number, facts, fields) [number] = fields,
    RATEL_ALGO_MAP(ALGO_FIELDS_)
#undef ALGO_FIELDS_
};

void ratel__algo_list(unsigned facts, const char *prefix, const char *last,
                      char *buf, size_t buflen)
{
    size_t q = 0, n = 0, total = 0;

    for (unsigned a = 0; a < RATEL__ALGOS; a++)
        total += (ratel__facts((ratel_algo_t)a) & facts) == facts;
    buf[0] = '\0';
    for (unsigned a = 0; a < RATEL__ALGOS && q < buflen; a++) {
        if ((ratel__facts((ratel_algo_t)a) & facts) != facts)
            continue;
        n++;
        q += (size_t)snprintf(buf + q, buflen - q, "%s%s%s",
                              n == 1      ? ""
                              : n < total ? ", "
                                          : last,
                              prefix, algo_names[a]);
    }
}

ratel_algo_t ratel__algo_with(unsigned facts)
{
    unsigned a = 0;

    while (a + 1 < RATEL__ALGOS &&
           (ratel__facts((ratel_algo_t)a) & facts) != facts)
        a++;
    return (ratel_algo_t)a;
}

const char *ratel_algo_name(ratel_algo_t algo)
{
    if ((unsigned)algo < sizeof algo_names / sizeof algo_names[0])
        return algo_names[algo];
    return "unknown";
}

unsigned ratel_algo_facts(ratel_algo_t algo)
{
    return (unsigned)algo < RATEL__ALGOS ? ratel__facts(algo) : 0;
}

unsigned ratel_algo_fields(ratel_algo_t algo)
{
    return (unsigned)algo < RATEL__ALGOS ? algo_fields[algo] : 0;
}

uint64_t ratel_rule_capacity(const ratel_rule_t *rule)
{
    return (ratel__facts(rule->algo) & RATEL_ALGO_BURST) ? rule->burst
                                                         : rule->limit;
}

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

/*
 * Writes `rule "TEXT": REASON; HINT` into errbuf. The rule text is quoted
 * with non-printable bytes escaped and cut at 64 bytes, so hostile input
 * cannot flood a log line.
 */
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

/* The calendar checks of check_rule: the reason, or NULL if valid. */
static const char *calendar_fault(const ratel_rule_t *rule)
{
    uint32_t cal = rule->calendar;

    if (cal &
        ~(RATEL_CALENDAR_TZ | RATEL_CALENDAR_WEEKS | RATEL_CALENDAR_MONTHS))
        return "unknown calendar bits";
    if (cal & RATEL_CALENDAR_MONTHS) {
        if (rule->months < 1 || rule->months > RATEL_MONTHS_MAX ||
            rule->period_ms != 0 || (cal & RATEL_CALENDAR_WEEKS))
            return "a period of months must be from 1mo to 12mo";
    } else if (rule->months != 0 || rule->period_ms < RATEL_PERIOD_MIN_MS ||
               rule->period_ms > RATEL_PERIOD_MAX_MS) {
        return "period must be from 1ms to 30d";
    }
    if ((cal & RATEL_CALENDAR_WEEKS) && rule->period_ms % WEEK_MS != 0)
        return "a period of weeks must be whole weeks";
    if (!(cal & RATEL_CALENDAR_TZ) && (rule->zone || rule->tz_offset_s))
        return "a zone without tz";
    if (rule->zone ? rule->tz_offset_s != 0
                   : rule->tz_offset_s % 60 != 0 ||
                         rule->tz_offset_s < -RATEL_TZ_OFFSET_MAX_S ||
                         rule->tz_offset_s > RATEL_TZ_OFFSET_MAX_S)
        return "tz offsets run from -14:00 to +14:00 in whole minutes";
    return NULL;
}

/* burst= under an algorithm without RATEL_ALGO_BURST: "burst applies to
   gcra rules only" and `hint`. */
static int burst_error(const char *text, size_t len, char *errbuf,
                       size_t errlen, const char *hint)
{
    char names[96];

    ratel__algo_list(RATEL_ALGO_BURST, "", " or ", names, sizeof names);
    return rule_error(errbuf, errlen, text, len,
                      "burst applies to %s rules only%s", names, hint);
}

/* A calendar under an algorithm without RATEL_ALGO_CALENDAR: the message
   names those with it. */
static int calendar_algo_error(const ratel_rule_t *rule, const char *text,
                               size_t len, char *errbuf, size_t errlen)
{
    char names[96];

    if (rule->calendar & RATEL_CALENDAR_MONTHS) {
        ratel__algo_list(RATEL_ALGO_CALENDAR, ":", " or ", names, sizeof names);
        return rule_error(errbuf, errlen, text, len,
                          "months are calendar periods: use %s (e.g. "
                          "1000/1mo:%s)",
                          names,
                          algo_names[ratel__algo_with(RATEL_ALGO_CALENDAR)]);
    }
    ratel__algo_list(RATEL_ALGO_CALENDAR, ":", " and ", names, sizeof names);
    return rule_error(errbuf, errlen, text, len,
                      "tz applies to the window algorithms, %s", names);
}

/*
 * Range checks shared by the parser (which quotes the user's text) and
 * ratel__rule_check (which quotes the rule's canonical form).
 */
static int check_rule(const ratel_rule_t *rule, const char *text, size_t len,
                      char *errbuf, size_t errlen)
{
    const char *fault;
    const ratel__algo_t *a;
    unsigned facts;

    if ((unsigned)rule->algo >= RATEL__ALGOS)
        return rule_error(errbuf, errlen, text, len, "unknown algorithm %d",
                          (int)rule->algo);
    a = ratel__algo(rule);
    facts = ratel__facts(rule->algo);
    if (rule->limit < 1 || rule->limit > RATEL_LIMIT_MAX)
        return rule_error(errbuf, errlen, text, len,
                          "limit must be from 1 to %u", RATEL_LIMIT_MAX);
    if (rule->calendar && !(facts & RATEL_ALGO_CALENDAR))
        return calendar_algo_error(rule, text, len, errbuf, errlen);
    if ((fault = calendar_fault(rule)) != NULL)
        return rule_error(errbuf, errlen, text, len, "%s", fault);
    if (a->limit_max && rule->limit > a->limit_max)
        return rule_error(errbuf, errlen, text, len,
                          "a %s rule holds at most %u %s",
                          algo_names[rule->algo], a->limit_max, a->limit_words);
    if (facts & RATEL_ALGO_BURST) {
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
        return burst_error(text, len, errbuf, errlen, "");
    }
    return 0;
}

int ratel__rule_check(const ratel_rule_t *rule, char *errbuf, size_t errlen)
{
    char text[128];
    if (!errbuf || errlen == 0) /* validation only: no message to format */
        return check_rule(rule, "", 0, NULL, 0);
    int n = ratel_rule_format(rule, text, sizeof text);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : 127;
    return check_rule(rule, text, len, errbuf, errlen);
}

static int is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* What the parser has read of a rule before it builds it. */
typedef struct parsed_s {
    uint64_t limit;
    uint64_t count; /* of the period's unit */
    size_t unit;    /* index in units[] */
    ratel_algo_t algo;
    uint64_t burst; /* 0: not given */
    int have_tz;
    int32_t tz_offset_s;
    const ratel_zone_t *zone;
} parsed_t;

/*
 * PERIOD at text[*at]: an optional count and a unit (a bare unit means one
 * of it). Returns 0 with *at past it, or RATEL_ERULE with the message.
 */
static int read_period(const char *text, size_t len, size_t *at, parsed_t *pr,
                       char *errbuf, size_t errlen)
{
    size_t pos = *at, digits, ustart;
    int overflow;

    digits = read_number(text, len, &pos, RATEL_PERIOD_MAX_MS, &pr->count,
                         &overflow);
    if (digits == 0)
        pr->count = 1; /* a bare unit means one of it */
    if (overflow)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD must be from 1ms to 30d");
    ustart = pos;
    pr->unit = NUNITS;
    for (size_t u = 0; u < NUNITS && pr->unit == NUNITS; u++) {
        size_t ulen = strlen(units[u].name);
        if (len - pos >= ulen && memcmp(text + pos, units[u].name, ulen) == 0) {
            pr->unit = u;
            pos += ulen;
        }
    }
    if (pr->unit == NUNITS)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD needs a unit: ms, s, m, h, d, w or mo");
    if (pos < len && is_letter(text[pos])) {
        /* "20/minute", "1/sec": a word, not one of the units. */
        char word[16 * 4 + 8];
        size_t end = pos;
        while (end < len && is_letter(text[end]))
            end++;
        quote_into(word, sizeof word, text + ustart, end - ustart, 16);
        return rule_error(errbuf, errlen, text, len,
                          "unknown unit \"%s\"; the units are ms, s, m, h, "
                          "d, w and mo (e.g. 20/1m, 20/60s)",
                          word);
    }
    if (pr->count == 0)
        return rule_error(errbuf, errlen, text, len,
                          "PERIOD must be at least 1ms");
    if (pr->unit == UNIT_MONTH
            ? pr->count > RATEL_MONTHS_MAX
            : pr->count * units[pr->unit].ms > RATEL_PERIOD_MAX_MS)
        return rule_error(errbuf, errlen, text, len,
                          pr->unit == UNIT_MONTH
                              ? "a period of months must be from 1mo to 12mo"
                              : "PERIOD must be at most 30d");
    *at = pos;
    return 0;
}

/* ":ALGO" at text[*at], if there. */
static int read_algo(const char *text, size_t len, size_t *at, parsed_t *pr,
                     char *errbuf, size_t errlen)
{
    size_t start = *at + 1, pos = start, a;
    char name[32 * 4 + 8], choices[80];

    pr->algo = ratel__algo_with(RATEL_ALGO_DEFAULT);
    if (*at >= len || text[*at] != ':')
        return 0;
    while (pos < len && text[pos] != ',')
        pos++;
    *at = pos;
    for (a = 0; a < RATEL__ALGOS; a++)
        if (strlen(algo_names[a]) == pos - start &&
            memcmp(text + start, algo_names[a], pos - start) == 0) {
            pr->algo = (ratel_algo_t)a;
            return 0;
        }
    quote_into(name, sizeof name, text + start, pos - start, 32);
    ratel__algo_list(0, "", " or ", choices, sizeof choices);
    return rule_error(errbuf, errlen, text, len,
                      "unknown algorithm \"%s\" (use %s)", name, choices);
}

/* burst=N: the value at text[*at]. */
static int read_burst(const char *text, size_t len, size_t *at, parsed_t *pr,
                      char *errbuf, size_t errlen)
{
    size_t digits;
    int overflow;

    if (pr->burst)
        return rule_error(errbuf, errlen, text, len, "burst is given twice");
    digits = read_number(text, len, at, RATEL_LIMIT_MAX, &pr->burst, &overflow);
    if (digits == 0 || overflow || pr->burst == 0)
        return rule_error(errbuf, errlen, text, len,
                          "burst must be a whole number from 1 to %u",
                          RATEL_LIMIT_MAX);
    return 0;
}

/* ±HH[:MM] in v (n bytes) as seconds east of UTC; -1 if it is not one. */
static int32_t tz_offset_of(const char *v, size_t n)
{
    int32_t h, m = 0, s;

    if ((n != 3 && n != 6) || (v[0] != '+' && v[0] != '-') || !is_digit(v[1]) ||
        !is_digit(v[2]) ||
        (n == 6 && (v[3] != ':' || !is_digit(v[4]) || !is_digit(v[5]))))
        return -1;
    h = (v[1] - '0') * 10 + (v[2] - '0');
    if (n == 6)
        m = (v[4] - '0') * 10 + (v[5] - '0');
    s = h * 3600 + m * 60;
    if (m > 59 || s > RATEL_TZ_OFFSET_MAX_S)
        return -1;
    return v[0] == '-' ? -s : s;
}

/* Whether v (n bytes) can be a zone name: Area/City letters, digits, _+-. */
static int zone_name_ok(const char *v, size_t n)
{
    if (n < 1 || n > RATEL__ZONE_NAME_MAX || !is_letter(v[0]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_letter(v[i]) && !is_digit(v[i]) && !strchr("/_+-.", v[i]))
            return 0;
        else if (v[i] == '.' && i + 1 < n && v[i + 1] == '.')
            return 0; /* never a path out of the database */
    return 1;
}

/* tz=ZONE: the value at text[*at], up to the next ',' or the end. */
static int read_tz(const char *text, size_t len, size_t *at, parsed_t *pr,
                   char *errbuf, size_t errlen)
{
    const char *v = text + *at;
    size_t n = 0;
    char why[160];

    while (*at + n < len && v[n] != ',')
        n++;
    *at += n;
    if (pr->have_tz)
        return rule_error(errbuf, errlen, text, len, "tz is given twice");
    pr->have_tz = 1;
    if (n == 3 && memcmp(v, "UTC", 3) == 0)
        return 0;
    if (n > 0 && (v[0] == '+' || v[0] == '-')) {
        if ((pr->tz_offset_s = tz_offset_of(v, n)) != -1)
            return 0;
        return rule_error(errbuf, errlen, text, len,
                          "tz offsets are +HH:MM or -HH:MM, from -14:00 to "
                          "+14:00 (e.g. tz=+08:00)");
    }
    if (!zone_name_ok(v, n))
        return rule_error(errbuf, errlen, text, len,
                          "tz must be UTC, an offset (tz=+08:00) or a zone "
                          "name (tz=Asia/Shanghai)");
#ifdef RATEL_NO_TZDB
    (void)why;
    return rule_error(errbuf, errlen, text, len,
                      "zone names need the system's time-zone database, "
                      "which the Redis module and the Lua script do not "
                      "read: give the offset (e.g. tz=+08:00)");
#else
    if ((pr->zone = ratel__tzdb_load(v, n, why, sizeof why)) == NULL)
        return rule_error(errbuf, errlen, text, len, "%s", why);
    return 0;
#endif
}

/* The options after the algorithm: name, reader. */
static const struct {
    const char *name;
    int (*read)(const char *text, size_t len, size_t *at, parsed_t *pr,
                char *errbuf, size_t errlen);
} options[] = {
    {"burst=", read_burst},
    {"tz=", read_tz},
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* { "," option } at text[*at]. */
static int read_options(const char *text, size_t len, size_t *at, parsed_t *pr,
                        char *errbuf, size_t errlen)
{
    while (*at < len && text[*at] == ',') {
        size_t o, pos = *at + 1;
        for (o = 0; o < NOPTIONS; o++) {
            size_t n = strlen(options[o].name);
            if (len - pos >= n && memcmp(text + pos, options[o].name, n) == 0)
                break;
        }
        if (o == NOPTIONS)
            return rule_error(errbuf, errlen, text, len,
                              "unknown option at byte %zu (the options are "
                              "burst=N, for gcra, and tz=ZONE, for fixed and "
                              "approx)",
                              pos + 1);
        *at = pos + strlen(options[o].name);
        if (options[o].read(text, len, at, pr, errbuf, errlen) != 0)
            return RATEL_ERULE;
    }
    return 0;
}

/* The rule `pr` describes, checked; the messages quote `text`. */
static int build_rule(const parsed_t *pr, const char *text, size_t len,
                      ratel_rule_t *rule, char *errbuf, size_t errlen)
{
    unsigned facts = ratel__facts(pr->algo);
    int windows = (facts & RATEL_ALGO_CALENDAR) != 0;

    memset(rule, 0, sizeof *rule);
    rule->algo = pr->algo;
    rule->limit = (uint32_t)pr->limit;
    if (pr->burst && !(facts & RATEL_ALGO_BURST)) {
        char hint[48];
        snprintf(hint, sizeof hint, " (add :%s)",
                 algo_names[ratel__algo_with(RATEL_ALGO_BURST)]);
        return burst_error(text, len, errbuf, errlen, hint);
    }
    if (pr->unit == UNIT_MONTH) {
        rule->calendar = RATEL_CALENDAR_MONTHS;
        rule->months = (uint32_t)pr->count;
    } else {
        rule->period_ms = (uint32_t)(pr->count * units[pr->unit].ms);
        if (pr->unit == UNIT_WEEK && windows)
            rule->calendar = RATEL_CALENDAR_WEEKS;
    }
    if (pr->have_tz) {
        rule->calendar |= RATEL_CALENDAR_TZ;
        rule->tz_offset_s = pr->zone ? 0 : pr->tz_offset_s;
        rule->zone = pr->zone;
    }
    if (facts & RATEL_ALGO_BURST)
        rule->burst = pr->burst ? (uint32_t)pr->burst : rule->limit;
    if (check_rule(rule, text, len, errbuf, errlen) != 0)
        return RATEL_ERULE;
    /* Without the tz database (RATEL_NO_TZDB: the module) read_tz refuses
       zone names, with lua/rule.lua's words; offsets, weeks and months are
       computed alike by the module and lua/calendar.lua. */
    return 0;
}

int ratel_rule_parse(const char *text, size_t len, ratel_rule_t *out,
                     char *errbuf, size_t errlen)
{
    size_t pos = 0, digits;
    int overflow;
    parsed_t pr;
    ratel_rule_t rule;

    if (!text || !out)
        return rule_error(errbuf, errlen, "", 0, "no rule given");
    if (len == 0)
        return rule_error(errbuf, errlen, text, len, "empty rule");
    memset(&pr, 0, sizeof pr);
    digits =
        read_number(text, len, &pos, RATEL_LIMIT_MAX, &pr.limit, &overflow);
    if (digits == 0)
        return rule_error(errbuf, errlen, text, len,
                          "LIMIT must be a whole number from 1 to %u",
                          RATEL_LIMIT_MAX);
    if (overflow || pr.limit == 0)
        return rule_error(errbuf, errlen, text, len,
                          "LIMIT must be from 1 to %u", RATEL_LIMIT_MAX);
    if (pos >= len || text[pos] != '/')
        return rule_error(errbuf, errlen, text, len,
                          "expected '/' after the limit");
    pos++;
    if (read_period(text, len, &pos, &pr, errbuf, errlen) != 0 ||
        read_algo(text, len, &pos, &pr, errbuf, errlen) != 0 ||
        read_options(text, len, &pos, &pr, errbuf, errlen) != 0)
        return RATEL_ERULE;
    if (pos < len) {
        char rest[16 * 4 + 8];
        quote_into(rest, sizeof rest, text + pos, len - pos, 16);
        return rule_error(errbuf, errlen, text, len,
                          "unexpected \"%s\" at byte %zu", rest, pos + 1);
    }
    if (build_rule(&pr, text, len, &rule, errbuf, errlen) != 0)
        return RATEL_ERULE;
    *out = rule;
    return 0;
}

/* The largest unit that divides `period_ms` exactly, as an index; weeks
   only for a calendar of weeks (7d:fixed is aligned to the epoch). */
static size_t best_unit(const ratel_rule_t *rule)
{
    uint32_t period_ms = rule->period_ms ? rule->period_ms : 1;
    size_t best = 0;

    if (rule->calendar & RATEL_CALENDAR_MONTHS)
        return UNIT_MONTH;
    for (size_t u = 0; u < NUNITS; u++)
        if (units[u].ms != MONTHS && period_ms % units[u].ms == 0 &&
            (u != UNIT_WEEK || (rule->calendar & RATEL_CALENDAR_WEEKS)))
            best = u;
    return best;
}

/* The count of the rule's period in its best unit. */
static uint32_t period_count(const ratel_rule_t *rule, size_t u)
{
    return u == UNIT_MONTH ? rule->months : rule->period_ms / units[u].ms;
}

/* "+08:00", "-03:30", or the zone's name: the value of tz=. */
static void tz_text(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    int32_t s = rule->tz_offset_s, a = s < 0 ? -s : s;

    if (rule->zone)
        snprintf(buf, buflen, "%s", rule->zone->name);
    else
        snprintf(buf, buflen, "%c%02d:%02d", s < 0 ? '-' : '+', a / 3600,
                 a / 60 % 60);
}

int ratel_rule_format(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    size_t u = best_unit(rule);
    char algo[24] = "", burst[24] = "", tz[8 + RATEL__ZONE_NAME_MAX] = "";

    if (!(ratel_algo_facts(rule->algo) & RATEL_ALGO_DEFAULT))
        snprintf(algo, sizeof algo, ":%s", ratel_algo_name(rule->algo));
    if ((ratel_algo_facts(rule->algo) & RATEL_ALGO_BURST) &&
        rule->burst != rule->limit)
        snprintf(burst, sizeof burst, ",burst=%u", rule->burst);
    if (rule->calendar & RATEL_CALENDAR_TZ) {
        memcpy(tz, ",tz=", 4);
        tz_text(rule, tz + 4, sizeof tz - 4);
    }
    return snprintf(buf, buflen, "%u/%u%s%s%s%s", rule->limit,
                    period_count(rule, u), units[u].name, algo, burst, tz);
}

/* "1-hour", "90-second", "3-month": the period as an adjective. */
static void period_words(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    size_t u = best_unit(rule);
    snprintf(buf, buflen, "%u-%s", period_count(rule, u), units[u].word);
}

/* "hour", "90 seconds": the period as a noun, for "N requests per ...". */
static void period_noun(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    size_t u = best_unit(rule);
    uint32_t n = period_count(rule, u);
    if (n == 1)
        snprintf(buf, buflen, "%s", units[u].word);
    else
        snprintf(buf, buflen, "%u %ss", n, units[u].word);
}

/* "January, April, July and October": the months a window of n months
   (n divides 12) starts in. */
static void month_list(uint32_t n, char *buf, size_t buflen)
{
    static const char *const names[12] = {
        "January", "February", "March",     "April",   "May",      "June",
        "July",    "August",   "September", "October", "November", "December"};
    size_t q = 0;

    buf[0] = '\0';
    for (uint32_t m = 0; m < 12 && q < buflen; m += n)
        q += (size_t)snprintf(buf + q, buflen - q, "%s%s",
                              m == 0        ? ""
                              : m + n >= 12 ? " and "
                                            : ", ",
                              names[m]);
}

/* Where the windows of a fixed or approx rule start, in its clock:
   "resetting at 00:00 UTC+08:00", "resetting on Mondays at 00:00 UTC". */
static void reset_words(const ratel_rule_t *rule, char *buf, size_t buflen)
{
    const uint32_t day = 86400000u, p = rule->period_ms;
    char clock[16 + RATEL__ZONE_NAME_MAX] = "UTC", list[96], every[48];

    if (rule->zone)
        snprintf(clock, sizeof clock, "%s time", rule->zone->name);
    else if (rule->tz_offset_s != 0)
        tz_text(rule, clock + 3, sizeof clock - 3);
    period_noun(rule, every, sizeof every);
    if ((rule->calendar & RATEL_CALENDAR_MONTHS) && 12 % rule->months == 0) {
        month_list(rule->months, list, sizeof list);
        snprintf(buf, buflen, "resetting on the 1st of %s at 00:00 %s",
                 rule->months == 1 ? "every month" : list, clock);
    } else if (rule->calendar & RATEL_CALENDAR_MONTHS) {
        snprintf(buf, buflen,
                 "resetting on the 1st at 00:00 %s every %s, counted from "
                 "January 1970",
                 clock, every);
    } else if (rule->calendar & RATEL_CALENDAR_WEEKS) {
        snprintf(buf, buflen, "resetting on %s at 00:00 %s%s",
                 p == 604800000u ? "Mondays" : "a Monday", clock,
                 p == 604800000u ? "" : ", counted from 1970-01-05");
    } else if (p == day) {
        snprintf(buf, buflen, "resetting at midnight, 00:00 %s", clock);
    } else if (day % p == 0) {
        snprintf(buf, buflen, "resetting at 00:00 %s and every %s after it",
                 clock, every);
    } else {
        snprintf(buf, buflen,
                 "resetting every %s, counted from 1970-01-01 "
                 "00:00 %s",
                 every, clock);
    }
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
    ratel__rule_words_t w;

    if ((unsigned)rule->algo >= RATEL__ALGOS)
        return snprintf(buf, buflen, "unknown algorithm");
    w.requests = rule->limit == 1 ? "request" : "requests";
    period_words(rule, w.period, sizeof w.period);
    period_noun(rule, w.noun, sizeof w.noun);
    reset_words(rule, w.reset, sizeof w.reset);
    duration_words((double)rule->period_ms * 1000.0 / rule->limit, w.interval,
                   sizeof w.interval);
    duration_words((double)rule->period_ms * 1000.0, w.lifetime,
                   sizeof w.lifetime);
    return ratel__algo(rule)->explain(rule, &w, buf, buflen);
}
