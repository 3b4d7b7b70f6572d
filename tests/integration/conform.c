/*
 * conform.c - the conformance driver: the core, the Lua Functions library,
 * the Lua EVAL script and the Redis module must answer every request alike
 * (docs/commands.md).
 *
 *   build/conform -p PORT [-h HOST] [-n TRACES] [-s SEED] [-t TRACE]
 *                 [--backends core,eval,lib,module] [--lua DIR] [-v]
 *
 * --lua names the directory of ratel.eval.lua and ratel.lib.lua
 * (default build/lua).
 *
 * It generates random traces, one key each: explicit AT times that mostly
 * move forward (sometimes back), policies of 1-3 rules of all algorithms
 * (small limits and periods so requests are denied, sliding rules past the
 * run cap with hundreds of runs, some with many requests a millisecond, gcra
 * with bursts and limits up to 1e9 per 30 days so the script's big-integer path
 * runs, fixed and approx on calendars: offsets east and west, weeks and months,
 * in traces that cross month ends, leap days and year ends; concurrent rules,
 * at most one per policy, alone or with rate rules), costs, PEEK, MAXWAIT on
 * all-gcra policies, REFUND, RELEASE and RENEW of the leases handed out (and of
 * unknown ids, and of ids the arguments refuse), RESET, INFO, SLICE (with and
 * without HOLDER, the key's own demand key or one beside it in its slot,
 * "{key}:d") and UNSLICE of the slices granted (before and after their
 * UNTIL, and of made-up ones), rule changes on a live key (conversion),
 * malformed rules and options, and corrupted blobs.
 * Every operation runs through each backend:
 *
 *   core    ratel_policy_acquire/refund/ratel_state_inspect in this process
 *           on a blob of its own, with the reply, the write and the expiry
 *           docs/commands.md prescribes: the reference;
 *   eval    EVALSHA of ratel.eval.lua on key "eval:..." of the server;
 *   lib     FCALL of the library ratel.lib.lua on key "lib:...";
 *   module  RATEL.* on key "mod:..." (when the server has the module).
 *
 * After each operation the replies (types included), the stored bytes (GET)
 * and the expiries (PEXPIRETIME), of the key and of its demand key, must be
 * equal. A last key, "mix:...",
 * takes each operation from a randomly chosen backend - the core working on
 * the bytes it GETs and SETting its result back - so every backend keeps
 * reading what another one wrote.
 *
 * Traces are anchored a year past the server's clock, so no key expires
 * while a trace runs and expiry needs no simulation. The first mismatch of
 * a trace prints the trace up to it (seed and number to rerun it with -s
 * and -t); a line "# N operations, ..." counts what ran (SLICE and
 * UNSLICE apart), the last line is "N passed, N failed" counting traces,
 * and the exit status is non-zero when any failed.
 */
#include "ratel.h"

#include <hiredis/hiredis.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 40
#define DEPTH_MAX_MS ((uint64_t)3650 * 86400000)

/* ------------------------------------------------------------ utilities */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64*: small, fast and good enough for test traces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* Uniform in [lo, hi]. */
static int64_t between(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* True with probability pct percent. */
static int chance(int pct)
{
    return (int)(rnd() % 100) < pct;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "conform: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* A growing string: replies in canonical text, trace logs. */
typedef struct buf_s {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_add(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            die("out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_printf(buf_t *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Bytes as text a person can read and paste: printable as is, else \xNN. */
static void buf_bytes(buf_t *b, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' && p[i] != '"')
            buf_add(b, (const char *)&p[i], 1);
        else
            buf_printf(b, "\\x%02x", p[i]);
    }
}

static void buf_reset(buf_t *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

/* A reply in canonical text: types and values, nothing else. */
static void reply_text(buf_t *b, const redisReply *r)
{
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        buf_printf(b, "%lld", r->integer);
        break;
    case REDIS_REPLY_STATUS:
        buf_printf(b, "+%s", r->str);
        break;
    case REDIS_REPLY_ERROR:
        buf_printf(b, "-%s", r->str);
        break;
    case REDIS_REPLY_STRING:
        buf_add(b, "\"", 1);
        buf_bytes(b, (const uint8_t *)r->str, r->len);
        buf_add(b, "\"", 1);
        break;
    case REDIS_REPLY_NIL:
        buf_add(b, "nil", 3);
        break;
    case REDIS_REPLY_ARRAY:
        buf_add(b, "[", 1);
        for (size_t i = 0; i < r->elements; i++) {
            if (i)
                buf_add(b, " ", 1);
            reply_text(b, r->element[i]);
        }
        buf_add(b, "]", 1);
        break;
    default:
        buf_printf(b, "?type%d", r->type);
    }
}

/* -------------------------------------------------------------- redis */

static redisContext *redis;
static char lua_sha[41];
static const char *lua_dir = "build/lua";

static void read_file(const char *name, buf_t *out)
{
    char path[4096], chunk[4096];
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "%s/%s", lua_dir, name);
    f = fopen(path, "rb");
    if (!f)
        die("cannot open %s (make lua, or give --lua DIR)", path);
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_add(out, chunk, n);
    fclose(f);
}

static redisReply *command(int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(redis, argc, argv, lens);
    if (!r)
        die("redis: %s", redis->errstr);
    return r;
}

static redisReply *command1(const char *a, const char *b)
{
    const char *argv[2] = {a, b};
    size_t lens[2] = {strlen(a), b ? strlen(b) : 0};
    return command(b ? 2 : 1, argv, lens);
}

/* SCRIPT LOAD of the EVAL script (again after NOSCRIPT). */
static void load_script(void)
{
    buf_t src = {0};
    redisReply *r;
    const char *argv[3] = {"SCRIPT", "LOAD", NULL};
    size_t lens[3] = {6, 4, 0};

    read_file("ratel.eval.lua", &src);
    argv[2] = src.p;
    lens[2] = src.len;
    r = command(3, argv, lens);
    if (r->type != REDIS_REPLY_STRING || r->len != 40)
        die("SCRIPT LOAD failed: %s", r->str ? r->str : "?");
    memcpy(lua_sha, r->str, 40);
    freeReplyObject(r);
    free(src.p);
}

/* FUNCTION LOAD REPLACE of the library. */
static void load_library(void)
{
    buf_t src = {0};
    redisReply *r;
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", NULL};
    size_t lens[4] = {8, 4, 7, 0};

    read_file("ratel.lib.lua", &src);
    argv[3] = src.p;
    lens[3] = src.len;
    r = command(4, argv, lens);
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, "ratel") != 0)
        die("FUNCTION LOAD failed: %s", r->str ? r->str : "?");
    freeReplyObject(r);
    free(src.p);
}

/* The server's clock in ms (TIME), to anchor traces in its future. */
static int64_t server_ms(void)
{
    redisReply *r = command1("TIME", NULL);
    int64_t ms;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        die("TIME failed");
    ms = strtoll(r->element[0]->str, NULL, 10) * 1000 +
         strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

/* ------------------------------------------------------------ the ops */

enum {
    OP_ACQUIRE,
    OP_REFUND,
    OP_INFO,
    OP_RESET,
    OP_RELEASE,
    OP_SLICE,
    OP_UNSLICE
};
static const char *const op_names[] = {"ACQUIRE", "REFUND", "INFO",   "RESET",
                                       "RELEASE", "SLICE",  "UNSLICE"};

/*
 * One operation: the words after the key, as the script and the module
 * take them, and what the core needs of them. `error` is set when the
 * generator made the arguments wrong on purpose and knows the reply.
 */
typedef struct op_s {
    int kind;
    int argc;
    char argv[MAX_ARGS][96];
    size_t lens[MAX_ARGS];
    int64_t at_ms;
    uint64_t cost;
    int peek;
    int64_t max_wait_ms;
    uint32_t lease; /* RELEASE */
    unsigned lease_flags;
    uint64_t want;          /* SLICE's WANT, UNSLICE's UNSPENT */
    int64_t ttl_ms;         /* SLICE */
    uint64_t holder;        /* SLICE: 0 for none */
    int64_t until_ms;       /* UNSLICE */
    int demand_self;        /* SLICE: the key is its own demand key */
    int first_rule, nrules; /* rules are argv[first_rule ..] */
    char error[300];
} op_t;

static void op_word(op_t *op, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(op->argv[op->argc], sizeof op->argv[0], fmt, ap);
    va_end(ap);
    op->lens[op->argc] = (size_t)n;
    op->argc++;
}

/* A rule as generated, with the text the call carries. */
typedef struct gen_rule_s {
    ratel_rule_t rule;
    char text[80];
} gen_rule_t;

typedef struct gen_policy_s {
    int n;
    gen_rule_t rules[RATEL_MAX_RULES];
} gen_policy_t;

static const uint32_t periods[] = {
    1,     2,     3,       5,        10,        50,         100,
    250,   1000,  1000,    1500,     2000,      10000,      60000,
    60000, 90000, 3600000, 86400000, 604800000, 2592000000u};

static uint32_t gen_limit(void)
{
    int p = (int)between(0, 99);
    if (p < 35)
        return (uint32_t)between(1, 5);
    if (p < 60)
        return (uint32_t)between(6, 50);
    if (p < 70)
        return (uint32_t)between(51, 256);
    if (p < 85)
        return (uint32_t)between(257, 1500);
    if (p < 95)
        return (uint32_t)between(1000, 1000000);
    return chance(50) ? 1000000000u : (uint32_t)between(1, 1000000000);
}

/* The period written in one of the ways the grammar accepts. */
static void period_text(uint32_t ms, char *out, size_t size)
{
    static const struct {
        const char *name;
        uint32_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
    for (size_t u = 0; u < 4; u++) {
        if (ms % units[u].ms == 0 && chance(70)) {
            uint32_t n = ms / units[u].ms;
            if (n == 1 && chance(40))
                snprintf(out, size, "%s", units[u].name);
            else
                snprintf(out, size, "%u%s", n, units[u].name);
            return;
        }
    }
    snprintf(out, size, "%ums", ms);
}

static const char *const algo_names[] = {"sliding", "fixed", "approx", "gcra",
                                         "concurrent"};

static void gen_rule(gen_rule_t *g, int algo, uint32_t limit, uint32_t period,
                     int want_burst)
{
    char ptext[32], atext[16] = "", btext[24] = "";
    ratel_rule_t *r = &g->rule;

    memset(r, 0, sizeof *r);
    r->algo = (ratel_algo_t)algo;
    r->limit = limit;
    r->period_ms = period;
    r->burst = algo == RATEL_ALGO_GCRA ? limit : 0;
    if (algo == RATEL_ALGO_GCRA && want_burst) {
        uint64_t b = (uint64_t)between(1, 3 * (int64_t)limit);
        if (b > 1000000000)
            b = 1000000000;
        /* burst x period / limit within ten years, or no explicit burst */
        if (b * period <= DEPTH_MAX_MS * limit)
            r->burst = (uint32_t)b;
    }
    period_text(period, ptext, sizeof ptext);
    if (algo != RATEL_ALGO_SLIDING || chance(10))
        snprintf(atext, sizeof atext, ":%s", algo_names[algo]);
    if (algo == RATEL_ALGO_GCRA && (r->burst != limit || chance(10)))
        snprintf(btext, sizeof btext, ",burst=%u", r->burst);
    snprintf(g->text, sizeof g->text, "%u/%s%s%s", limit, ptext, atext, btext);
}

/* A random calendar for a fixed or approx rule: durations under an offset
   (tz= is what makes them a calendar), weeks from Monday or months, with
   or without one. Offsets east and west, with 30 and 45 minutes. */
static void random_calendar(ratel_rule_t *r)
{
    static const int32_t offsets[] = {28800,  -12600, 20700, 0,     -36000,
                                      50400,  -50400, 19800, 3600,  -18000,
                                      -34200, 45900,  34200, -3600, 32400};
    static const uint32_t durations[] = {86400000,  86400000,  3600000,
                                         1800000,   900000,    43200000,
                                         172800000, 604800000, 90000};
    static const uint32_t months[] = {1, 1, 2, 3, 3, 4, 6, 12, 12};
    int kind = (int)between(0, 2);

    r->calendar = 0;
    r->months = 0;
    if (kind == 0) {
        r->period_ms = durations[between(0, 8)];
    } else if (kind == 1) {
        r->calendar = RATEL_CALENDAR_WEEKS;
        r->period_ms = 604800000u * (uint32_t)(chance(60) ? 1 : between(2, 4));
    } else {
        r->calendar = RATEL_CALENDAR_MONTHS;
        r->period_ms = 0;
        r->months =
            chance(85) ? months[between(0, 8)] : (uint32_t)between(1, 12);
    }
    r->tz_offset_s = 0;
    if (kind == 0 || chance(50)) {
        r->calendar |= RATEL_CALENDAR_TZ;
        r->tz_offset_s = chance(80) ? offsets[between(0, 14)]
                                    : (int32_t)between(-840, 840) * 60;
    }
}

/* tz=: UTC, +HH, or +HH:MM (-00:00 too), as the grammar takes them. */
static void tz_text(int32_t s, char *out, size_t size)
{
    int32_t a = s < 0 ? -s : s;
    char sign = s < 0 || (s == 0 && chance(20)) ? '-' : '+';

    if (s == 0 && chance(40))
        snprintf(out, size, ",tz=UTC");
    else if (a % 3600 == 0 && chance(30))
        snprintf(out, size, ",tz=%c%02d", sign, a / 3600);
    else
        snprintf(out, size, ",tz=%c%02d:%02d", sign, a / 3600, a / 60 % 60);
}

/*
 * Makes g, a fixed or approx rule, a calendar rule: the calendar of `like`
 * (a rule edited in place keeps its windows), or a random one. A bare unit
 * ("mo", "w") means one of it.
 */
static void gen_calendar(gen_rule_t *g, const ratel_rule_t *like)
{
    ratel_rule_t *r = &g->rule;
    char ptext[32], tz[24] = "";

    if (like) {
        r->calendar = like->calendar;
        r->months = like->months;
        r->tz_offset_s = like->tz_offset_s;
        r->period_ms = like->period_ms;
    } else {
        random_calendar(r);
    }
    if ((r->calendar & RATEL_CALENDAR_MONTHS) && r->months == 1 && chance(30))
        snprintf(ptext, sizeof ptext, "mo");
    else if (r->calendar & RATEL_CALENDAR_MONTHS)
        snprintf(ptext, sizeof ptext, "%umo", r->months);
    else if ((r->calendar & RATEL_CALENDAR_WEEKS) &&
             r->period_ms == 604800000u && chance(30))
        snprintf(ptext, sizeof ptext, "w");
    else if (r->calendar & RATEL_CALENDAR_WEEKS)
        snprintf(ptext, sizeof ptext, "%uw", r->period_ms / 604800000u);
    else
        period_text(r->period_ms, ptext, sizeof ptext);
    if (r->calendar & RATEL_CALENDAR_TZ)
        tz_text(r->tz_offset_s, tz, sizeof tz);
    snprintf(g->text, sizeof g->text, "%u/%s:%s%s", r->limit, ptext,
             algo_names[r->algo], tz);
}

/* A concurrent rule's limit: mostly 1..8, often near 256 (past it, now
   and then, for the error). */
static uint32_t concurrent_limit(void)
{
    int p = (int)between(0, 99);
    if (p < 65)
        return (uint32_t)between(1, 8);
    if (p < 85)
        return (uint32_t)between(248, 256);
    return p < 98 ? (uint32_t)between(9, 247) : (uint32_t)between(257, 300);
}

/* A concurrent rule's period: 1 ms to minutes. */
static uint32_t concurrent_period(void)
{
    static const uint32_t some[] = {1,    2,    5,     10,    100,
                                    1000, 5000, 30000, 60000, 300000};
    return chance(75) ? some[between(0, 9)] : (uint32_t)between(1, 600000);
}

/* Whether rules[0..n) has a concurrent rule. */
static int has_concurrent(const gen_rule_t *rules, int n)
{
    for (int i = 0; i < n; i++)
        if (rules[i].rule.algo == RATEL_ALGO_CONCURRENT)
            return 1;
    return 0;
}

static void gen_policy(gen_policy_t *p, int all_gcra)
{
    p->n = (int)between(1, 3);
    for (int i = 0; i < p->n; i++) {
        int algo = all_gcra ? RATEL_ALGO_GCRA : (int)between(0, 4);
        uint32_t limit = gen_limit();
        uint32_t period = chance(85) ? periods[between(0, 19)]
                                     : (uint32_t)between(1, 1000000);
        /* At most one concurrent rule, but for the error now and then. */
        if (algo == RATEL_ALGO_CONCURRENT && has_concurrent(p->rules, i) &&
            !chance(3))
            algo = RATEL_ALGO_SLIDING;
        if (algo == RATEL_ALGO_CONCURRENT) {
            limit = concurrent_limit();
            period = concurrent_period();
        }
        gen_rule(&p->rules[i], algo, limit, period, chance(40));
        if ((algo == RATEL_ALGO_FIXED || algo == RATEL_ALGO_APPROX) &&
            chance(40))
            gen_calendar(&p->rules[i], NULL);
        for (int j = 0; j < i; j++)
            if (memcmp(&p->rules[j].rule, &p->rules[i].rule,
                       sizeof(ratel_rule_t)) == 0 &&
                !chance(3)) {
                i--; /* a duplicate, most of the time not on purpose */
                break;
            }
    }
}

/* The policy after a config edit: limits or bursts changed (state kept or
   converted), rules reordered, added or dropped. */
static void edit_policy(gen_policy_t *p, int all_gcra)
{
    gen_policy_t q = *p;
    for (int i = 0; i < q.n; i++) {
        ratel_rule_t r = q.rules[i].rule;
        if (chance(50)) {
            uint32_t limit =
                chance(50) || r.limit == 1000000000 ? gen_limit() : r.limit + 1;
            if (r.algo == RATEL_ALGO_CONCURRENT)
                limit = chance(50) ? concurrent_limit() : r.limit + 1;
            gen_rule(&q.rules[i], r.algo, limit, r.period_ms, chance(50));
            if (r.calendar)
                gen_calendar(&q.rules[i], &r);
        }
    }
    if (q.n > 1 && chance(40)) {
        gen_rule_t t = q.rules[0];
        q.rules[0] = q.rules[q.n - 1];
        q.rules[q.n - 1] = t;
    }
    if (q.n < 3 && chance(30)) {
        gen_policy_t extra;
        gen_policy(&extra, all_gcra);
        if (extra.rules[0].rule.algo != RATEL_ALGO_CONCURRENT ||
            !has_concurrent(q.rules, q.n) || chance(3))
            q.rules[q.n++] = extra.rules[0];
    } else if (q.n > 1 && chance(20)) {
        q.n--;
    }
    *p = q;
}

static const char *const bad_rules[] = {
    "10/1x", "0/1s", "10/0s", "10/31d", "1/1s,burst=3", "5/1s:gcra,burst=0",
    "10/1s:foo", "10/1s:gcra,burst=2,burst=3", "10/1s:gcra,bust=3",
    "1/1s:gcra,burst=1000000000", "10/1sx", "", "1\x01/\"s\\", "1000000001/1s",
    "10/2592000001ms", "10", "10/", "10/1s:", "5/1s,burst=2",
    /* Calendars. Zone names are not here: the core reads the tz database,
       the module and the scripts refuse them (test_lua.sh compares those). */
    "1/1mo:gcra", "1/1d,tz=+08:00", "1/13mo:fixed", "1/0mo:approx",
    "1/1d:fixed,tz=+14:01", "1/1d:fixed,tz=+8", "1/1w:fixed,tz=UTC,tz=UTC",
    "1/1mo:fixed,burst=2", "1/1d:approx,tz=", "1/5w:fixed"};

/* ------------------------------------------------------------ backends */

/* The reference: the core on a blob of its own. pxat -2 means no key. */
typedef struct core_key_s {
    uint8_t blob[RATEL_STATE_MAX];
    size_t len;
    long long pxat;
    uint8_t demand[RATEL_DEMAND_MAX]; /* the demand key beside it */
    size_t demand_len;
    long long demand_pxat;
} core_key_t;

/* What a backend answered, and what its key holds afterwards. */
typedef struct outcome_s {
    buf_t reply;
    uint8_t bytes[RATEL_STATE_MAX + 64];
    size_t len;
    int exists;
    long long pxat;
    uint8_t demand[RATEL_DEMAND_MAX + 64]; /* the demand key's */
    size_t demand_len;
    long long demand_pxat;
} outcome_t;

static void core_error(buf_t *reply, int rc)
{
    if (rc == RATEL_ECORRUPT)
        buf_printf(reply, "-ERR ratel: key holds a value that is not ratel "
                          "state");
    else if (rc == RATEL_EVERSION)
        buf_printf(reply, "-ERR ratel: key holds ratel state of an unknown "
                          "version");
    else
        buf_printf(reply, "-ERR ratel: %s (%s)", ratel_strerror(rc),
                   ratel_err_name(rc));
}

/*
 * SLICE's and UNSLICE's options read as every front end reads them (the
 * one reader, ratel_options_read): the first by place, then words up to
 * the first argument that starts with a digit. 1 with the error replied.
 */
static int slice_options(const op_t *op, ratel_options_t *o, buf_t *reply)
{
    char msg[400];
    int i = 1, kind;

    ratel_options_init(o,
                       op->kind == OP_SLICE ? RATEL_OP_SLICE : RATEL_OP_UNSLICE,
                       RATEL_SPELL_WORD, 0);
    if (ratel_options_read(o, NULL, 0, op->argv[0], op->lens[0], msg,
                           sizeof msg) != 0) {
        buf_printf(reply, "-ERR ratel: %s", msg);
        return 1;
    }
    for (; i < op->argc && op->lens[i] > 0 &&
           (op->argv[i][0] < '0' || op->argv[i][0] > '9');
         i++) {
        int valued = ratel_option_find(RATEL_SPELL_WORD, op->argv[i],
                                       op->lens[i], &kind) >= 0 &&
                     (kind == RATEL_ARG_VALUE || kind == RATEL_ARG_NEEDED) &&
                     i + 1 < op->argc;
        if (ratel_options_read(
                o, op->argv[i], op->lens[i], valued ? op->argv[i + 1] : NULL,
                valued ? op->lens[i + 1] : 0, msg, sizeof msg) != 0) {
            buf_printf(reply, "-ERR ratel: %s", msg);
            return 1;
        }
        i += valued;
    }
    return 0;
}

/* The arguments' errors, as docs/commands.md words them. 0 if none. */
static int args_error(const op_t *op, ratel_policy_t *policy, buf_t *reply)
{
    const char *texts[MAX_ARGS];
    char msg[400];
    ratel_options_t o;
    int slicing = op->kind == OP_SLICE || op->kind == OP_UNSLICE;

    if (slicing && slice_options(op, &o, reply))
        return 1;
    if (!slicing && op->error[0]) {
        buf_printf(reply, "-%s", op->error);
        return 1;
    }
    if (op->nrules == 0) {
        buf_printf(reply, "-ERR ratel: at least one rule is needed");
        return 1;
    }
    if (op->nrules > RATEL_MAX_RULES) {
        buf_printf(reply, "-ERR ratel: at most 8 rules");
        return 1;
    }
    for (int i = 0; i < op->nrules; i++)
        texts[i] = op->argv[op->first_rule + i];
    if (ratel_policy_parse(policy, texts, (size_t)op->nrules, msg,
                           sizeof msg) != 0) {
        buf_printf(reply, "-ERR ratel: %s", msg);
        return 1;
    }
    if (op->kind == OP_RELEASE && !ratel_policy_has_leases(policy)) {
        buf_printf(reply, "-ERR ratel: RELEASE needs a policy with a "
                          "concurrent rule (e.g. 10/30s:concurrent)");
        return 1;
    }
    if (slicing && ratel_options_check(&o, policy, msg, sizeof msg) != 0) {
        buf_printf(reply, "-ERR ratel: %s", msg);
        return 1;
    }
    if (op->kind != OP_ACQUIRE)
        return 0;
    /* The request against the rules: the core's one check and message. */
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_WORD, 0);
    o.value[RATEL_OPTION_COST] = (int64_t)op->cost;
    o.value[RATEL_OPTION_MAXWAIT] = op->max_wait_ms;
    if (ratel_options_check(&o, policy, msg, sizeof msg) != 0) {
        buf_printf(reply, "-ERR ratel: %s", msg);
        return 1;
    }
    return 0;
}

/* The seven integers, and an eighth when `with_extra` (the lease of an
   ACQUIRE under a concurrent rule, RELEASE's held). */
static void decision_text(buf_t *reply, const ratel_decision_t *d,
                          int with_extra, long long extra)
{
    buf_printf(reply, "[%d %lld %lld %lld %lld %d %lld", d->allowed,
               (long long)d->limit, (long long)d->remaining,
               (long long)d->retry_after_ms, (long long)d->reset_after_ms,
               d->rule, (long long)d->wait_ms);
    if (with_extra)
        buf_printf(reply, " %lld", extra);
    buf_add(reply, "]", 1);
}

static void info_text(buf_t *reply, const core_key_t *k, int64_t now_us)
{
    ratel_rule_status_t st[RATEL_MAX_RULES];
    size_t n;
    int rc =
        ratel_state_inspect(k->blob, k->len, now_us, st, RATEL_MAX_RULES, &n);
    if (rc != 0) {
        core_error(reply, rc);
        return;
    }
    buf_add(reply, "[", 1);
    for (size_t i = 0; i < n; i++) {
        char text[64];
        ratel_rule_format(&st[i].rule, text, sizeof text);
        buf_printf(reply,
                   "%s[+rule +%s +algo +%s +used %lld +remaining %lld "
                   "+reset_after_ms %lld",
                   i ? " " : "", text, ratel_algo_name(st[i].rule.algo),
                   (long long)st[i].used, (long long)st[i].remaining,
                   (long long)st[i].reset_after_ms);
        if (st[i].rule.algo == RATEL_ALGO_SLIDING)
            buf_printf(reply, " +runs %u +granularity_ms %u]", st[i].runs,
                       st[i].granularity_ms);
        else if (st[i].rule.algo == RATEL_ALGO_GCRA)
            buf_printf(reply, " +tat_us %lld]", (long long)st[i].tat_us);
        else if (st[i].rule.algo == RATEL_ALGO_CONCURRENT)
            buf_printf(reply, " +last_lease %u]", st[i].last_lease);
        else
            buf_printf(reply, " +window_start_ms %lld]",
                       (long long)st[i].window_start_ms);
    }
    buf_add(reply, "]", 1);
}

/* The slice the last core_run() granted (0: none), and its end. */
static uint64_t core_granted;
static int64_t core_expires_ms;

/*
 * SLICE on the core's key and its demand record, as docs/commands.md
 * prescribes: with HOLDER and a demand key of its own, the want noted in
 * the record and the grant shared by it; the key written when something
 * is granted (expiring as after an ACQUIRE), the record whenever it was
 * noted (expiring 2 x TTL after now).
 */
static void core_slice(const op_t *op, const ratel_policy_t *policy,
                       core_key_t *k, buf_t *reply)
{
    static uint8_t buf[RATEL_STATE_MAX];
    uint8_t rec[RATEL_DEMAND_MAX];
    size_t len = k->len, rlen = k->demand_len;
    uint64_t total = op->want, granted;
    int64_t now_us = op->at_ms * 1000, expires_us, expires_ms;
    int noted = op->holder != 0 && !op->demand_self, rc;
    ratel_decision_t d;

    memcpy(buf, k->blob, len);
    memcpy(rec, k->demand, rlen);
    if (noted && (rc = ratel_slice_demand_note(
                      rec, &rlen, sizeof rec, op->at_ms, op->ttl_ms, op->holder,
                      op->want, &total)) != 0) {
        buf_printf(reply, "-ERR ratel: demand key holds %s",
                   rc == RATEL_EVERSION
                       ? "a demand record of an unknown version"
                       : "a value that is not a ratel demand record");
        return;
    }
    rc = ratel_policy_slice_shared(policy, buf, &len, sizeof buf, now_us,
                                   op->want, total, op->ttl_ms * 1000, &granted,
                                   &expires_us, &d);
    if (rc != 0) {
        core_error(reply, rc);
        return;
    }
    if (granted > 0) {
        memcpy(k->blob, buf, len);
        k->len = len;
        k->pxat = (now_us + 999) / 1000 + d.reset_after_ms;
    }
    if (noted) {
        memcpy(k->demand, rec, rlen);
        k->demand_len = rlen;
        k->demand_pxat = op->at_ms + 2 * op->ttl_ms;
    }
    expires_ms = expires_us / 1000;
    core_granted = granted;
    core_expires_ms = expires_ms;
    buf_printf(reply, "[%llu %lld %lld %lld %lld %lld %lld %d]",
               (unsigned long long)granted, (long long)expires_ms,
               (long long)(granted ? expires_ms - op->at_ms : 0),
               (long long)d.limit, (long long)d.remaining,
               (long long)d.retry_after_ms, (long long)d.reset_after_ms,
               d.rule);
}

/* The lease the last core_run() took (0: none). */
static uint32_t core_lease;

/*
 * Runs `op` on the core's key as the module would: the reply, and the key
 * written only when its bytes change, expiring at ceil(now_ms) + reset.
 */
static void core_run(const op_t *op, core_key_t *k, buf_t *reply)
{
    static uint8_t buf[RATEL_STATE_MAX];
    ratel_policy_t policy;
    ratel_decision_t d;
    ratel_request_t req = RATEL_REQUEST_INIT;
    int64_t now_us = op->at_ms * 1000;
    size_t len;
    uint64_t returned = 0;
    int rc, held = 0;

    if (op->kind == OP_RESET) {
        /* What ACQUIRE refuses, RESET refuses too, and keeps. */
        if (k->len > 0 && (rc = ratel_state_validate(k->blob, k->len)) != 0) {
            core_error(reply, rc);
            return;
        }
        buf_printf(reply, "%d", k->len > 0);
        k->len = 0;
        k->pxat = -2;
        return;
    }
    if (op->kind == OP_INFO) {
        if (op->error[0])
            buf_printf(reply, "-%s", op->error);
        else
            info_text(reply, k, now_us);
        return;
    }
    if (args_error(op, &policy, reply))
        return;
    if (op->kind == OP_SLICE) {
        core_slice(op, &policy, k, reply);
        return;
    }
    memcpy(buf, k->blob, k->len);
    len = k->len;
    if (op->kind == OP_ACQUIRE) {
        req.cost = op->cost;
        req.max_wait_ms = op->max_wait_ms;
        req.flags = op->peek ? RATEL_PEEK : 0;
        rc = ratel_policy_acquire(&policy, buf, &len, sizeof buf, now_us, &req,
                                  &d);
    } else if (op->kind == OP_RELEASE) {
        rc = ratel_policy_release(&policy, buf, &len, sizeof buf, now_us,
                                  op->lease, op->lease_flags, &held, &d);
    } else if (op->kind == OP_UNSLICE) {
        rc = ratel_policy_slice_return(&policy, buf, &len, sizeof buf, now_us,
                                       op->want, op->until_ms * 1000, &returned,
                                       &d);
    } else {
        rc = ratel_policy_refund(&policy, buf, &len, sizeof buf, now_us,
                                 op->cost, &d);
    }
    if (rc != 0) {
        core_error(reply, rc);
        return;
    }
    core_lease = op->kind == OP_ACQUIRE ? d.lease : 0;
    if (op->kind == OP_UNSLICE)
        buf_printf(reply, "[%llu %lld %lld %lld %lld %d]",
                   (unsigned long long)returned, (long long)d.limit,
                   (long long)d.remaining, (long long)d.retry_after_ms,
                   (long long)d.reset_after_ms, d.rule);
    else if (op->kind == OP_RELEASE)
        decision_text(reply, &d, 1, held);
    else
        decision_text(reply, &d,
                      op->kind == OP_ACQUIRE &&
                          ratel_policy_has_leases(&policy),
                      d.lease);
    if (len != k->len || memcmp(buf, k->blob, len) != 0) {
        memcpy(k->blob, buf, len);
        k->len = len;
        k->pxat = len ? (now_us + 999) / 1000 + d.reset_after_ms : -2;
    }
}

/* A key's bytes (at most cap), *len and *pxat from the replies of GET
   and PEXPIRETIME; whether it exists (-1: another type, never expected). */
static int take_back(redisReply *get, redisReply *ttl, uint8_t *bytes,
                     size_t cap, size_t *len, long long *pxat)
{
    int exists = get->type == REDIS_REPLY_STRING;

    *len = 0;
    if (get->type == REDIS_REPLY_STRING) {
        *len = get->len < cap ? get->len : cap;
        memcpy(bytes, get->str, *len);
    } else if (get->type != REDIS_REPLY_NIL) {
        exists = -1;
    }
    *pxat = ttl->type == REDIS_REPLY_INTEGER ? ttl->integer : -99;
    freeReplyObject(get);
    freeReplyObject(ttl);
    return exists;
}

/* The demand key beside `key` (its name in braces: the same cluster
   slot), into name. */
static const char *demand_of(const char *key, char *name, size_t size)
{
    snprintf(name, size, "%s:d", key);
    return name;
}

static redisReply *next_reply(void)
{
    void *r = NULL;
    if (redisGetReply(redis, &r) != REDIS_OK || !r)
        die("redis: %s", redis->errstr);
    return r;
}

/*
 * Sends a command (argc > 0) and then GET and PEXPIRETIME of `key` and of
 * its demand key, in one round trip; the command's reply goes to `reply`
 * as text, the keys' state to `out`. Returns the command's reply unless
 * `reply` is given.
 */
static redisReply *with_read_back(int argc, const char **argv,
                                  const size_t *lens, const char *key,
                                  buf_t *reply, outcome_t *out)
{
    char demand[128];
    const char *names[2] = {key, demand_of(key, demand, sizeof demand)};
    redisReply *r = NULL, *g, *t;

    if (argc > 0)
        redisAppendCommandArgv(redis, argc, argv, lens);
    for (int i = 0; i < 2; i++) {
        const char *get[2] = {"GET", names[i]},
                   *ttl[2] = {"PEXPIRETIME", names[i]};
        size_t klens[2] = {3, strlen(names[i])},
               tlens[2] = {11, strlen(names[i])};
        redisAppendCommandArgv(redis, 2, get, klens);
        redisAppendCommandArgv(redis, 2, ttl, tlens);
    }
    if (argc > 0)
        r = next_reply();
    g = next_reply();
    t = next_reply();
    out->exists =
        take_back(g, t, out->bytes, sizeof out->bytes, &out->len, &out->pxat);
    g = next_reply();
    t = next_reply();
    take_back(g, t, out->demand, sizeof out->demand, &out->demand_len,
              &out->demand_pxat);
    if (r && reply) {
        reply_text(reply, r);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

static void read_back(const char *key, outcome_t *out)
{
    with_read_back(0, NULL, NULL, key, NULL, out);
}

/* Sets `key` to the bytes (len 0: deletes it) expiring at pxat. */
static void write_raw(const char *key, const uint8_t *p, size_t len,
                      long long pxat)
{
    char at[32];
    const char *argv[5] = {"SET", key, (const char *)p, "PXAT", at};
    size_t lens[5] = {3, strlen(key), len, 4, 0};
    redisReply *r;

    if (len == 0) {
        r = command1("DEL", key);
    } else {
        lens[4] = (size_t)snprintf(at, sizeof at, "%lld", pxat);
        r = command(5, argv, lens);
    }
    freeReplyObject(r);
}

/* The keys of a call from argv[argc] on: how many (when `counted`: the
   scripts), then the key and, for SLICE, its demand key (the key itself
   for no fair share). Returns the new argc. */
static int keys_words(const op_t *op, int counted, const char *key,
                      char *demand, size_t size, const char **argv,
                      size_t *lens, int argc)
{
    int two = op->kind == OP_SLICE;

    if (counted)
        argv[argc] = two ? "2" : "1", lens[argc++] = 1;
    argv[argc] = key, lens[argc++] = strlen(key);
    if (two) {
        argv[argc] = op->demand_self ? key : demand_of(key, demand, size);
        lens[argc] = strlen(argv[argc]);
        argc++;
    }
    return argc;
}

/* The op through the script (EVALSHA sha 1 key OP args), and the key's
   state after it. */
static void eval_run(const op_t *op, const char *key, buf_t *reply,
                     outcome_t *out)
{
    const char *argv[MAX_ARGS + 6];
    size_t lens[MAX_ARGS + 6];
    redisReply *r;
    int argc = 0;

    char demand[128];

    argv[argc] = "EVALSHA", lens[argc++] = 7;
    argv[argc] = lua_sha, lens[argc++] = 40;
    argc = keys_words(op, 1, key, demand, sizeof demand, argv, lens, argc);
    argv[argc] = op_names[op->kind], lens[argc] = strlen(argv[argc]), argc++;
    for (int i = 0; i < op->argc; i++)
        argv[argc] = op->argv[i], lens[argc++] = op->lens[i];
    r = with_read_back(argc, argv, lens, key, NULL, out);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        load_script();
        r = with_read_back(argc, argv, lens, key, NULL, out);
    }
    reply_text(reply, r);
    freeReplyObject(r);
}

/* The op as `lead` (nlead words) and its keys (`counted`: how many, first)
   and arguments, and the key after it. */
static void words_run(const char *const *lead, int nlead, int counted,
                      const op_t *op, const char *key, buf_t *reply,
                      outcome_t *out)
{
    const char *argv[MAX_ARGS + 6];
    size_t lens[MAX_ARGS + 6];
    char demand[128];
    int argc = 0;

    for (; argc < nlead; argc++)
        argv[argc] = lead[argc], lens[argc] = strlen(lead[argc]);
    argc =
        keys_words(op, counted, key, demand, sizeof demand, argv, lens, argc);
    for (int i = 0; i < op->argc; i++)
        argv[argc] = op->argv[i], lens[argc++] = op->lens[i];
    with_read_back(argc, argv, lens, key, reply, out);
}

/* The op through the library (FCALL ratel_op 1 key args). */
static void lib_run(const op_t *op, const char *key, buf_t *reply,
                    outcome_t *out)
{
    static const char *const names[] = {
        "ratel_acquire", "ratel_refund", "ratel_info",   "ratel_reset",
        "ratel_release", "ratel_slice",  "ratel_unslice"};
    const char *lead[2] = {"FCALL", names[op->kind]};

    words_run(lead, 2, 1, op, key, reply, out);
}

/* The op through the module (RATEL.OP key args), and the key after it. */
static void module_run(const op_t *op, const char *key, buf_t *reply,
                       outcome_t *out)
{
    static const char *const names[] = {
        "RATEL.ACQUIRE", "RATEL.REFUND", "RATEL.INFO",   "RATEL.RESET",
        "RATEL.RELEASE", "RATEL.SLICE",  "RATEL.UNSLICE"};

    words_run(&names[op->kind], 1, 0, op, key, reply, out);
}

/* The core on the bytes a server key holds, its result written back. */
static void core_on_key_run(const op_t *op, const char *key, buf_t *reply)
{
    static core_key_t k;
    static outcome_t cur;
    size_t old_len;
    long long old_pxat;

    char demand[128];

    read_back(key, &cur);
    memcpy(k.blob, cur.bytes, cur.len);
    k.len = old_len = cur.len;
    k.pxat = old_pxat = cur.pxat;
    memcpy(k.demand, cur.demand, cur.demand_len);
    k.demand_len = cur.demand_len;
    k.demand_pxat = cur.demand_pxat;
    core_run(op, &k, reply);
    if (k.demand_pxat != cur.demand_pxat || k.demand_len != cur.demand_len ||
        memcmp(k.demand, cur.demand, k.demand_len) != 0)
        write_raw(demand_of(key, demand, sizeof demand), k.demand, k.demand_len,
                  k.demand_pxat);
    if (op->kind == OP_RESET) {
        if (cur.exists && k.len == 0) /* refused state is kept */
            write_raw(key, NULL, 0, 0);
        return;
    }
    if (k.len != old_len || k.pxat != old_pxat ||
        memcmp(k.blob, cur.bytes, k.len) != 0)
        write_raw(key, k.blob, k.len, k.pxat);
}

/* ------------------------------------------------------------- traces */

enum { B_CORE, B_EVAL, B_LIB, B_MODULE, B_MIX, NBACKENDS };
static const char *const backend_names[] = {"core", "eval", "lib", "module",
                                            "mixed"};
static const char *key_prefix[] = {"", "eval:", "lib:", "mod:", "mix:"};
/* Which backends run (the core and the mixed key always do). */
static int use[NBACKENDS] = {1, 1, 1, 0, 1};
static int verbose = 0;

typedef void backend_run_t(const op_t *, const char *, buf_t *, outcome_t *);
static backend_run_t *const runners[NBACKENDS] = {
    [B_EVAL] = eval_run, [B_LIB] = lib_run, [B_MODULE] = module_run};

/* A slice the core granted: UNSLICE gives (some of) it back. */
typedef struct slice_s {
    uint64_t granted;
    int64_t expires_ms;
} slice_t;

/* Operations run, and how many were slices given and taken back. */
static long ops_run, ops_slice, ops_unslice, ops_unslice_late;

typedef struct trace_s {
    uint64_t seed;
    long number;
    char key[NBACKENDS][96];
    core_key_t core;
    gen_policy_t policies[3];
    int npolicies, current, all_gcra;
    int64_t t_ms, anchor_ms, min_period, max_period;
    int small_steps, dense, busy;
    uint32_t leases[8]; /* the last leases the core handed out */
    int nleases;
    slice_t slices[8];    /* the last slices the core granted */
    int nslices, slicing; /* slicing: percent of ops that slice */
    buf_t log;
    outcome_t out[NBACKENDS];
} trace_t;

static void op_text(buf_t *b, const op_t *op)
{
    buf_printf(b, "%s", op_names[op->kind]);
    for (int i = 0; i < op->argc; i++) {
        buf_add(b, " \"", 2);
        buf_bytes(b, (const uint8_t *)op->argv[i], op->lens[i]);
        buf_add(b, "\"", 1);
    }
}

/* The earliest instant a trace may use: a year past the server's clock,
   so that no key it writes expires while it runs. */
static int64_t floor_ms;
#define AT_MAX_MS 9007199254740LL

static void next_time(trace_t *tr)
{
    int p = (int)between(0, 99);
    int64_t step;
    if (!tr->dense && rnd() % 400 == 0) {
        /* A clock stepped back by decades (gcra's slow path in Lua). */
        tr->t_ms = floor_ms + between(0, 86400000);
        return;
    }
    if (tr->dense)
        step = rnd() % 500 == 0 ? between(0, tr->max_period)
               : tr->busy       ? between(0, 2)
                                : between(1, 3);
    else if (tr->small_steps && p < 80)
        step = between(0, 3);
    else if (p < 40)
        step = between(0, 3);
    else if (p < 70)
        step = between(0, tr->min_period);
    else if (p < 90)
        step = between(0, tr->max_period);
    else if (p < 94)
        step = between(0, 3 * tr->max_period);
    else
        step = -between(0, tr->max_period);
    tr->t_ms += step;
    if (tr->t_ms < floor_ms)
        tr->t_ms = floor_ms;
    if (tr->t_ms > AT_MAX_MS)
        tr->t_ms = AT_MAX_MS;
}

static uint64_t capacity_of(const gen_policy_t *p)
{
    uint64_t cap = UINT64_MAX;
    for (int i = 0; i < p->n; i++) {
        const ratel_rule_t *r = &p->rules[i].rule;
        uint64_t c = ratel_rule_capacity(r);
        if (c < cap)
            cap = c;
    }
    return cap;
}

static void add_rules(op_t *op, const gen_policy_t *p)
{
    op->first_rule = op->argc;
    for (int i = 0; i < p->n; i++)
        op_word(op, "%s", p->rules[i].text);
    op->nrules = p->n;
    if (chance(1)) {
        /* A malformed rule, never first when it does not start with a
           digit (it would be read as an option). */
        const char *bad =
            bad_rules[between(0, sizeof bad_rules / sizeof bad_rules[0] - 1)];
        op_word(op, "%s", bad);
        op->nrules++;
        if (p->n >= 1 && chance(50)) {
            char tmp[96];
            memcpy(tmp, op->argv[op->first_rule], sizeof tmp);
            memcpy(op->argv[op->first_rule], op->argv[op->argc - 1],
                   sizeof tmp);
            memcpy(op->argv[op->argc - 1], tmp, sizeof tmp);
            size_t l = op->lens[op->first_rule];
            op->lens[op->first_rule] = op->lens[op->argc - 1];
            op->lens[op->argc - 1] = l;
            if (op->lens[op->first_rule] > 0 &&
                (op->argv[op->first_rule][0] < '0' ||
                 op->argv[op->first_rule][0] > '9'))
                snprintf(op->error, sizeof op->error,
                         "ERR ratel: unknown or repeated option \"%s\"; "
                         "options are %s",
                         op->argv[op->first_rule],
                         op->kind == OP_ACQUIRE
                             ? "COST n, PEEK, MAXWAIT ms, AT unix_ms, then "
                               "the rules"
                         : op->kind == OP_RELEASE
                             ? "RENEW, AT unix_ms, then the rules"
                             : "COST n, AT unix_ms, then the rules");
        }
    }
}

/*
 * RELEASE's words: a lease the trace was given (most often), a small or
 * any unknown id, or one the arguments refuse (0, 2^32, -1), then RENEW
 * now and then, AT and the rules.
 */
static void gen_release(trace_t *tr, op_t *op, const gen_policy_t *p)
{
    int w = (int)between(0, 99);
    int nleases = tr->nleases < 8 ? tr->nleases : 8;
    const char *bad = NULL;

    if (w < 65 && nleases > 0)
        op->lease = tr->leases[between(0, nleases - 1)];
    else if (w < 80)
        op->lease = (uint32_t)between(1, 20);
    else if (w < 94)
        op->lease = (uint32_t)between(1, 4294967295LL);
    else
        bad = w < 97 ? "0" : w < 99 ? "4294967296" : "-1";
    if (bad)
        op_word(op, "%s", bad);
    else
        op_word(op, "%u", op->lease);
    if (chance(35)) {
        op->lease_flags = RATEL_RENEW;
        op_word(op, chance(50) ? "RENEW" : "renew");
    }
    op_word(op, "AT");
    op_word(op, "%lld", (long long)op->at_ms);
    add_rules(op, p);
    if (bad)
        snprintf(op->error, sizeof op->error,
                 "ERR ratel: LEASE must be an integer from 1 to 4294967295 "
                 "(the lease an ACQUIRE returned), not \"%s\"",
                 bad);
}

/* The options of a SLICE or UNSLICE, each as words[i] and its value (NULL:
   left out, for the error), given in a random order. */
static void shuffled_options(op_t *op, const char *const *words,
                             const char *const *values, int n)
{
    int start = (int)between(0, n - 1);

    for (int i = 0; i < n; i++) {
        int j = (start + i) % n;
        if (!values[j])
            continue;
        op_word(op, "%s", words[j]);
        if (chance(20)) /* the words' case does not matter */
            for (char *c = op->argv[op->argc - 1]; *c; c++)
                *c = (char)(*c - 'A' + 'a');
        op_word(op, "%s", values[j]);
    }
}

/*
 * SLICE's words: WANT (mostly a few, up to what a rule can ever admit,
 * now and then 1e9, 0 for the error), then TTL, HOLDER and AT in any
 * order (TTL left out or out of range, HOLDER 0 or 2^53 for the errors),
 * then the rules. A quarter of them name the key as its own demand key;
 * a quarter give no HOLDER (no fair share either way).
 */
static void gen_slice(trace_t *tr, op_t *op, const gen_policy_t *p)
{
    static const int64_t ttls[] = {1, 5, 100, 250, 1000, 60000, 3600000};
    const char *words[3] = {"TTL", "HOLDER", "AT"};
    char ttl[24], holder[24], at[24];
    const char *values[3] = {ttl, holder, at};
    uint64_t cap = capacity_of(p);
    int w = (int)between(0, 99);

    op->want = w < 55   ? (uint64_t)between(1, 20)
               : w < 85 ? (uint64_t)between(1, (int64_t)cap)
               : w < 98 ? (uint64_t)between(1, 1000000000)
                        : 0;
    op_word(op, "%llu", (unsigned long long)op->want);
    op->ttl_ms = chance(60) ? ttls[between(0, 6)] : between(1, 3600000);
    if (chance(1))
        op->ttl_ms = chance(50) ? 0 : 3600001;
    snprintf(ttl, sizeof ttl, "%lld", (long long)op->ttl_ms);
    if (chance(1))
        values[0] = NULL;
    op->demand_self = chance(25);
    w = (int)between(0, 99);
    op->holder = w < 25   ? 0
                 : w < 88 ? (uint64_t)between(1, 4)
                 : w < 98 ? (uint64_t)between(1, 9007199254740991LL)
                 : w < 99 ? 0
                          : 9007199254740992ull;
    snprintf(holder, sizeof holder, "%llu", (unsigned long long)op->holder);
    if (w < 25)
        values[1] = NULL;
    snprintf(at, sizeof at, "%lld", (long long)op->at_ms);
    shuffled_options(op, words, values, 3);
    add_rules(op, p);
    (void)tr;
}

/*
 * UNSLICE's words: the unspent permits of a slice the core granted (or a
 * made-up one; 0 for the error), UNTIL its end (mostly; sometimes any
 * instant near now, or left out for the error) and AT, then the rules.
 * The trace's clock moves on, so some come before their slice's end and
 * some after.
 */
static void gen_unslice(trace_t *tr, op_t *op, const gen_policy_t *p)
{
    const char *words[2] = {"UNTIL", "AT"};
    char until[24], at[24];
    const char *values[2] = {until, at};
    int n = tr->nslices < 8 ? tr->nslices : 8;
    slice_t sl = {(uint64_t)between(1, 20), tr->t_ms + between(0, 1000)};

    if (n > 0 && chance(85))
        sl = tr->slices[between(0, n - 1)];
    op->want = chance(80) ? (uint64_t)between(1, (int64_t)sl.granted)
                          : (uint64_t)between(1, 1000);
    if (chance(1))
        op->want = 0;
    op_word(op, "%llu", (unsigned long long)op->want);
    op->until_ms = chance(85) ? sl.expires_ms : tr->t_ms + between(-1000, 1000);
    if (op->until_ms < 1)
        op->until_ms = 1;
    snprintf(until, sizeof until, "%lld", (long long)op->until_ms);
    if (chance(1))
        values[0] = NULL;
    snprintf(at, sizeof at, "%lld", (long long)op->at_ms);
    shuffled_options(op, words, values, 2);
    add_rules(op, p);
}

/* The next operation of the trace. */
static void gen_op(trace_t *tr, op_t *op)
{
    const gen_policy_t *p;
    int k = (int)between(0, 99);

    memset(op, 0, sizeof *op);
    op->cost = 1;
    if (chance(4) && tr->npolicies > 1)
        tr->current = (int)between(0, tr->npolicies - 1);
    p = &tr->policies[tr->current];
    next_time(tr);
    op->at_ms = tr->t_ms;
    op->kind = k < 78   ? OP_ACQUIRE
               : k < 88 ? OP_REFUND
               : k < 97 ? OP_INFO
                        : OP_RESET;
    /* Dense traces keep their key: a reset would empty the window. */
    if (tr->dense && op->kind == OP_RESET)
        op->kind = OP_ACQUIRE;
    /* Leases are released under a concurrent rule, and (for the error)
       now and then under a policy without one. */
    if ((has_concurrent(p->rules, p->n) && chance(30)) || chance(1))
        op->kind = OP_RELEASE;
    if (op->kind == OP_RELEASE) {
        gen_release(tr, op, p);
        return;
    }
    /* Slices of the key and give-backs, interleaved with the rest (under
       a concurrent rule now and then, for the error). */
    if (chance(has_concurrent(p->rules, p->n) ? 2 : tr->slicing))
        op->kind = tr->nslices > 0 && chance(40) ? OP_UNSLICE : OP_SLICE;
    if (op->kind == OP_SLICE) {
        gen_slice(tr, op, p);
        return;
    }
    if (op->kind == OP_UNSLICE) {
        gen_unslice(tr, op, p);
        return;
    }
    if (op->kind == OP_RESET)
        return;
    if (op->kind == OP_INFO) {
        op_word(op, chance(50) ? "AT" : "at");
        op_word(op, "%lld", (long long)op->at_ms);
        return;
    }
    if (op->kind == OP_ACQUIRE) {
        uint64_t cap = capacity_of(p);
        int c = (int)between(0, 99);
        if (c < 70 || (tr->dense && c < 97))
            op->cost = 1;
        else if (c < 90)
            op->cost = (uint64_t)between(1, cap < 10 ? (int64_t)cap : 10);
        else if (c < 98)
            op->cost = (uint64_t)between(1, (int64_t)cap);
        else
            op->cost = cap + 1;
        if (op->cost != 1 || chance(10)) {
            op_word(op, "COST");
            op_word(op, "%llu", (unsigned long long)op->cost);
            if (op->cost > 1000000000)
                snprintf(op->error, sizeof op->error,
                         "ERR ratel: COST must be an integer from 1 to "
                         "1000000000, not \"%llu\"",
                         (unsigned long long)op->cost);
        }
        if (chance(10)) {
            op->peek = 1;
            op_word(op, chance(50) ? "PEEK" : "peek");
        }
        if ((tr->all_gcra && chance(40)) || chance(1)) {
            int w = (int)between(0, 9);
            op->max_wait_ms = w < 2   ? 0
                              : w < 7 ? between(1, tr->min_period * 3)
                                      : between(1, 2592000000);
            if (op->max_wait_ms > 2592000000)
                op->max_wait_ms = 2592000000;
            op_word(op, "MAXWAIT");
            op_word(op, "%lld", (long long)op->max_wait_ms);
        }
    } else if (chance(40)) {
        op->cost =
            chance(10) && !tr->dense ? 1000000000u : (uint64_t)between(1, 20);
        op_word(op, "COST");
        op_word(op, "%llu", (unsigned long long)op->cost);
    }
    op_word(op, "AT");
    op_word(op, "%lld", (long long)op->at_ms);
    add_rules(op, p);
}

/*
 * Replies are equal as text - except integers of 2^53 and more, which a
 * Lua script can only send as the nearest double: INFO's "used" of a gcra
 * rule whose TAT lies very far ahead (docs/lua.md). Those match within the
 * spacing of doubles there.
 */
static int same_reply(const char *a, const char *b)
{
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            char *ea, *eb;
            unsigned long long x = strtoull(a, &ea, 10);
            unsigned long long y = strtoull(b, &eb, 10);
            if (x != y) {
                unsigned long long big = x > y ? x : y,
                                   d = x > y ? x - y : y - x;
                if (big < (1ull << 53) || d > big >> 51)
                    return 0;
            }
            a = ea;
            b = eb;
            continue;
        }
        if (*a++ != *b++)
            return 0;
    }
    return *a == *b;
}

/* Compares every backend's outcome with the core's; 0 if all agree. */
static int compare(trace_t *tr, buf_t *why)
{
    const outcome_t *ref = &tr->out[B_CORE];
    int ok = 1;
    for (int b = B_EVAL; b < NBACKENDS; b++) {
        const outcome_t *o = &tr->out[b];
        if (!use[b])
            continue;
        if (!same_reply(o->reply.p, ref->reply.p)) {
            buf_printf(why, "  reply differs: %s: %s\n                 core: ",
                       backend_names[b], o->reply.p);
            buf_add(why, ref->reply.p, ref->reply.len);
            buf_add(why, "\n", 1);
            ok = 0;
        }
        if (o->len != ref->len || memcmp(o->bytes, ref->bytes, o->len) != 0 ||
            o->exists != (ref->len > 0)) {
            buf_printf(why, "  bytes differ: %s: \"", backend_names[b]);
            buf_bytes(why, o->bytes, o->len);
            buf_printf(why, "\"%s\n                core: \"",
                       o->exists ? "" : " (no key)");
            buf_bytes(why, ref->bytes, ref->len);
            buf_add(why, "\"\n", 2);
            ok = 0;
        }
        if (o->pxat != ref->pxat) {
            buf_printf(why, "  PEXPIRETIME differs: %s: %lld, core: %lld\n",
                       backend_names[b], o->pxat, ref->pxat);
            ok = 0;
        }
        if (o->demand_len != ref->demand_len ||
            memcmp(o->demand, ref->demand, o->demand_len) != 0 ||
            o->demand_pxat != ref->demand_pxat) {
            buf_printf(why, "  demand key differs: %s: \"", backend_names[b]);
            buf_bytes(why, o->demand, o->demand_len);
            buf_printf(why, "\" PXAT %lld\n                      core: \"",
                       o->demand_pxat);
            buf_bytes(why, ref->demand, ref->demand_len);
            buf_printf(why, "\" PXAT %lld\n", ref->demand_pxat);
            ok = 0;
        }
    }
    return ok;
}

/* Runs one op everywhere and compares. Returns 0 on a mismatch. */
static int run_op(trace_t *tr, const op_t *op)
{
    buf_t why = {0};
    int ok;

    for (int b = 0; b < NBACKENDS; b++)
        buf_reset(&tr->out[b].reply);
    core_lease = 0;
    core_granted = 0;
    core_run(op, &tr->core, &tr->out[B_CORE].reply);
    if (core_lease)
        tr->leases[tr->nleases++ % 8] = core_lease;
    if (core_granted)
        tr->slices[tr->nslices++ % 8] =
            (slice_t){core_granted, core_expires_ms};
    memcpy(tr->out[B_CORE].bytes, tr->core.blob, tr->core.len);
    tr->out[B_CORE].len = tr->core.len;
    tr->out[B_CORE].exists = tr->core.len > 0;
    tr->out[B_CORE].pxat = tr->core.pxat;
    memcpy(tr->out[B_CORE].demand, tr->core.demand, tr->core.demand_len);
    tr->out[B_CORE].demand_len = tr->core.demand_len;
    tr->out[B_CORE].demand_pxat =
        tr->core.demand_len ? tr->core.demand_pxat : -2;
    ops_run++;
    ops_slice += op->kind == OP_SLICE;
    ops_unslice += op->kind == OP_UNSLICE;
    ops_unslice_late += op->kind == OP_UNSLICE && op->at_ms >= op->until_ms;
    for (int b = B_EVAL; b < B_MIX; b++)
        if (use[b])
            runners[b](op, tr->key[b], &tr->out[b].reply, &tr->out[b]);
    {
        /* The mixed key: whichever backend, on whatever the last wrote. */
        int choices[NBACKENDS], n = 0, b;
        for (b = B_CORE; b < B_MIX; b++)
            if (use[b])
                choices[n++] = b;
        b = choices[between(0, n - 1)];
        if (b == B_CORE) {
            core_on_key_run(op, tr->key[B_MIX], &tr->out[B_MIX].reply);
            read_back(tr->key[B_MIX], &tr->out[B_MIX]);
        } else {
            runners[b](op, tr->key[B_MIX], &tr->out[B_MIX].reply,
                       &tr->out[B_MIX]);
        }
    }
    {
        size_t start = tr->log.len;
        op_text(&tr->log, op);
        buf_printf(&tr->log, "\n    -> %s\n", tr->out[B_CORE].reply.p);
        if (verbose)
            printf("trace %ld: %s", tr->number, tr->log.p + start);
    }
    ok = compare(tr, &why);
    if (!ok) {
        printf("MISMATCH in trace %ld (rerun: -s %llu -t %ld), its operations "
               "on key \"%s\" so far:\n%s%s",
               tr->number, (unsigned long long)tr->seed, tr->number,
               tr->key[B_CORE], tr->log.p, why.p);
    }
    free(why.p);
    return ok;
}

/* Puts the same bytes under every backend's key (and the core's). */
static void set_everywhere(trace_t *tr, const uint8_t *p, size_t len,
                           long long pxat)
{
    memcpy(tr->core.blob, p, len);
    tr->core.len = len;
    tr->core.pxat = len ? pxat : -2;
    for (int b = B_EVAL; b < NBACKENDS; b++)
        if (use[b])
            write_raw(tr->key[b], p, len, pxat);
    buf_add(&tr->log, "SETRAW \"", 8);
    buf_bytes(&tr->log, p, len);
    buf_printf(&tr->log, "\" PXAT %lld\n", pxat);
}

/*
 * A corrupted (or merely altered) blob: one bit flipped, cut short or one
 * byte longer. Every backend must reject it alike, or accept it alike;
 * after a rejection the original bytes come back.
 */
static int run_mutation(trace_t *tr)
{
    static uint8_t saved[RATEL_STATE_MAX], bad[RATEL_STATE_MAX + 1];
    size_t len = tr->core.len, bad_len = len;
    long long pxat = tr->core.pxat;
    op_t op;
    int m = (int)between(0, 9), ok;

    memcpy(saved, tr->core.blob, len);
    memcpy(bad, saved, len);
    if (m < 7) {
        bad[between(0, (int64_t)len - 1)] ^= (uint8_t)(1u << between(0, 7));
    } else if (m < 9) {
        bad_len = (size_t)between(0, (int64_t)len - 1);
        if (bad_len == 0)
            bad_len = 1;
    } else {
        bad[len] = (uint8_t)between(0, 255);
        bad_len = len + 1;
    }
    set_everywhere(tr, bad, bad_len, pxat);
    gen_op(tr, &op);
    ok = run_op(tr, &op);
    if (tr->out[B_CORE].reply.p[0] == '-')
        set_everywhere(tr, saved, len, pxat);
    return ok;
}

/* A rule's period for the trace's steps: a month counts as 31 days. */
static int64_t span_ms(const ratel_rule_t *r)
{
    if (r->calendar & RATEL_CALENDAR_MONTHS)
        return (int64_t)r->months * 31 * 86400000;
    return r->period_ms;
}

/* Where calendars turn (UTC): year ends, the leap days of 2028 and 2096,
   the 28-day February of 2100, the ends of months of 30 and 31 days. */
static const int64_t calendar_turns[] = {
    1830297600000LL, /* 2028-01-01 */
    1835395200000LL, /* 2028-02-29 */
    1835481600000LL, /* 2028-03-01 */
    1909094400000LL, /* 2030-07-01 */
    1927670400000LL, /* 2031-02-01 */
    3981312000000LL, /* 2096-02-29 */
    3981398400000LL, /* 2096-03-01 */
    4102444800000LL, /* 2100-01-01 */
    4107542400000LL, /* 2100-03-01 */
};
#define NTURNS (sizeof calendar_turns / sizeof calendar_turns[0])

/* A start from three days before one of them to a day after (an offset
   moves local midnight by up to 14 hours either way), or `otherwise` when
   the turn drawn lies before the earliest instant a trace may use. */
static int64_t calendar_anchor(int64_t otherwise)
{
    int64_t t = calendar_turns[between(0, NTURNS - 1)] +
                between(-3 * 86400000LL, 86400000LL);
    return t >= floor_ms ? t : otherwise;
}

/*
 * Under a concurrent rule, now and then a key whose last lease id is about
 * to wrap (2^32 - 1 to 1): that rule's record alone, holding nothing.
 */
static void set_near_wrap(trace_t *tr)
{
    const gen_policy_t *p = &tr->policies[tr->current];
    uint8_t b[4 + 24] = {0x52, 0x54, 1, 1, RATEL_ALGO_CONCURRENT, 0};
    uint32_t last = 4294967295u - (uint32_t)between(0, 2);
    int i = 0;

    while (i < p->n && p->rules[i].rule.algo != RATEL_ALGO_CONCURRENT)
        i++;
    if (i == p->n || p->rules[i].rule.limit > RATEL_CONCURRENT_MAX ||
        !chance(15))
        return;
    for (int k = 0; k < 4; k++) {
        b[6 + k] = (uint8_t)(p->rules[i].rule.limit >> (8 * k));
        b[10 + k] = (uint8_t)(p->rules[i].rule.period_ms >> (8 * k));
        b[24 + k] = (uint8_t)(last >> (8 * k));
    }
    for (int k = 0; k < 8; k++)
        b[14 + k] = (uint8_t)((uint64_t)tr->t_ms >> (8 * k));
    set_everywhere(tr, b, sizeof b, tr->t_ms + 86400000);
}

static int run_trace(uint64_t seed, long number, int64_t anchor_ms)
{
    static trace_t tr;
    int nops, ok = 1, calendars = 0;

    rng_state = (seed * 0x9e3779b97f4a7c15ull) ^
                ((uint64_t)number + 1) * 0xbf58476d1ce4e5b9ull;
    if (rng_state == 0)
        rng_state = 1;
    for (int i = 0; i < 4; i++)
        rnd();
    for (int b = 0; b < NBACKENDS; b++)
        buf_reset(&tr.out[b].reply);
    buf_reset(&tr.log);
    tr.nleases = 0;
    tr.seed = seed;
    tr.number = number;
    for (int b = 0; b < NBACKENDS; b++) {
        char demand[128];
        snprintf(tr.key[b], sizeof tr.key[b], "{%sconform:%llu:%ld}",
                 key_prefix[b], (unsigned long long)seed, number);
        if (b > 0) {
            freeReplyObject(command1("DEL", tr.key[b]));
            freeReplyObject(
                command1("DEL", demand_of(tr.key[b], demand, sizeof demand)));
        }
    }
    tr.core.len = 0;
    tr.core.pxat = -2;
    tr.core.demand_len = 0;
    tr.core.demand_pxat = -2;
    tr.nslices = 0;
    tr.slicing = chance(50) ? 25 : 4;
    tr.all_gcra = chance(25);
    tr.npolicies = (int)between(1, 3);
    gen_policy(&tr.policies[0], tr.all_gcra);
    for (int i = 1; i < tr.npolicies; i++) {
        tr.policies[i] = tr.policies[i - 1];
        if (chance(70))
            edit_policy(&tr.policies[i], tr.all_gcra);
        else
            gen_policy(&tr.policies[i], tr.all_gcra);
    }
    tr.dense = chance(12);
    /* Busy dense traces send several requests in the same millisecond,
       as a busy key does: most join the newest run, some start one, and
       the oldest expire at the head while the window is full. */
    tr.busy = tr.dense && chance(50);
    if (tr.dense) {
        /* Sliding rules above the run cap, one request per 1-3 ms: the
           window holds more distinct instants than 256 and coarsens. */
        static const uint32_t dense_periods[] = {1000, 2000, 10000, 60000,
                                                 3600000};
        gen_policy_t *p = &tr.policies[0];
        uint32_t period = dense_periods[between(0, 4)];
        p->n = chance(60) ? 1 : 2;
        gen_rule(&p->rules[0], RATEL_ALGO_SLIDING, (uint32_t)between(257, 3000),
                 period, 0);
        if (p->n == 2)
            gen_rule(&p->rules[1], chance(50) ? 0 : (int)between(0, 3),
                     (uint32_t)between(3000, 100000), period * 10, 0);
        tr.npolicies = 1;
        tr.all_gcra = 0;
    }
    tr.current = 0;
    tr.min_period = INT64_MAX;
    tr.max_period = 1;
    for (int i = 0; i < tr.npolicies; i++)
        for (int j = 0; j < tr.policies[i].n; j++) {
            int64_t per = span_ms(&tr.policies[i].rules[j].rule);
            calendars |= tr.policies[i].rules[j].rule.calendar != 0;
            if (per < tr.min_period)
                tr.min_period = per;
            if (per > tr.max_period)
                tr.max_period = per;
        }
    /* Dense traces fill sliding windows past their run cap. */
    tr.small_steps = chance(30);
    nops = tr.dense                       ? (int)between(500, 1000)
           : tr.small_steps && chance(50) ? (int)between(300, 700)
                                          : (int)between(20, 120);
    /* Some traces run past 2^52 us (the year 2112), where Lua's gcra
       takes its slow path, up to the largest AT. */
    tr.anchor_ms = chance(10) ? between(4503599627371LL, AT_MAX_MS - 86400000)
                              : anchor_ms + between(0, 86400000);
    if (calendars && chance(75))
        tr.anchor_ms = calendar_anchor(tr.anchor_ms);
    tr.t_ms = tr.anchor_ms;
    set_near_wrap(&tr);
    for (int i = 0; i < nops && ok; i++) {
        if (tr.core.len > 0 && chance(2)) {
            ok = run_mutation(&tr);
        } else {
            op_t op;
            gen_op(&tr, &op);
            ok = run_op(&tr, &op);
        }
    }
    for (int b = 1; b < NBACKENDS; b++) {
        char demand[128];
        freeReplyObject(command1("DEL", tr.key[b]));
        freeReplyObject(
            command1("DEL", demand_of(tr.key[b], demand, sizeof demand)));
    }
    return ok;
}

/* --backends: a comma-separated list of core, eval, lib and module. */
static void backends(const char *list)
{
    char copy[256], *save = NULL;

    snprintf(copy, sizeof copy, "%s", list);
    for (int b = B_EVAL; b < B_MIX; b++)
        use[b] = 0;
    for (char *w = strtok_r(copy, ",", &save); w;
         w = strtok_r(NULL, ",", &save)) {
        int b = B_CORE;
        while (b < B_MIX && strcmp(w, backend_names[b]) != 0)
            b++;
        if (b == B_MIX)
            die("unknown backend \"%s\" (core, eval, lib or module)", w);
        use[b] = 1;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: conform -p PORT [-h HOST] [-n TRACES] [-s SEED] "
            "[-t TRACE]\n"
            "               [--backends core,eval,lib,module] [--lua DIR] "
            "[-v]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0;
    long ntraces = 100, only = -1, passed = 0, failed = 0;
    uint64_t seed = 1;
    int64_t anchor;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-v")) {
            verbose = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "-p"))
            port = atoi(v);
        else if (!strcmp(a, "-h"))
            host = v;
        else if (!strcmp(a, "-n"))
            ntraces = atol(v);
        else if (!strcmp(a, "-s"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-t"))
            only = atol(v);
        else if (!strcmp(a, "--lua"))
            lua_dir = v;
        else if (!strcmp(a, "--backends"))
            backends(v);
        else
            usage();
    }
    if (port <= 0)
        usage();
    redis = redisConnect(host, port);
    if (!redis || redis->err)
        die("cannot connect to %s:%d: %s", host, port,
            redis ? redis->errstr : "?");
    if (use[B_EVAL])
        load_script();
    if (use[B_LIB])
        load_library();
    /*
     * Traces start in 2100 (plus up to a day), far ahead of the server's
     * clock: no key expires while a trace runs, and a trace rerun with the
     * same seed sees the same instants.
     */
    anchor = 4102444800000LL;
    floor_ms = server_ms() + 365 * 86400000LL;
    if (floor_ms >= anchor)
        die("the server's clock is past 2099");
    for (long t = only >= 0 ? only : 0; t < (only >= 0 ? only + 1 : ntraces);
         t++) {
        if (run_trace(seed, t, anchor))
            passed++;
        else
            failed++;
    }
    redisFree(redis);
    printf("# %ld operations, %ld of them SLICE and %ld UNSLICE (%ld at or "
           "after UNTIL)\n",
           ops_run, ops_slice, ops_unslice, ops_unslice_late);
    printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
