/*
 * internal.h - what the files of the pure core share and nothing else sees.
 *
 * The state blob (docs/state-format.md) is the working representation: the
 * algorithms read and update their records in place, so a decision costs no
 * decode/encode pass and no allocation. Every multi-byte field is
 * little-endian and unaligned; the ld/st helpers below are the only way the
 * core touches them.
 */
#ifndef RATEL_CORE_INTERNAL_H
#define RATEL_CORE_INTERNAL_H

#include "algo_list.h"
#include "ratel.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ blob layout */

#define RATEL__MAGIC0 0x52 /* 'R' */
#define RATEL__MAGIC1 0x54 /* 'T' */
#define RATEL__VERSION 1
#define RATEL__HEADER_SIZE 4

/* Every record starts with algo(1) flags(1) limit(4) period_ms(4). */
#define RATEL__RULE_SIZE 10
#define RATEL__GCRA_RULE_SIZE 14 /* ... burst(4) */
/*
 * A rule with a calendar (fixed, approx) sets this bit of the flags byte and
 * ends its record with the calendar: u8 calendar bits, u8 months, i32 the
 * offset east of UTC in seconds or, with RATEL__CAL_ZONE, the zone's id.
 */
#define RATEL__FLAG_CALENDAR 0x80
#define RATEL__CAL_SIZE 6
#define RATEL__CAL_ZONE 0x80 /* with the rule's RATEL_CALENDAR_* bits */
/* Zones a process can load, and the longest zone name. */
#define RATEL__ZONES_MAX 1024
#define RATEL__ZONE_NAME_MAX 64

#define RATEL__SLIDING_BASE 10  /* i64 base_ms */
#define RATEL__SLIDING_NRUNS 18 /* u16 number of runs */
#define RATEL__SLIDING_TOTAL 20 /* u32 sum of the runs' counts */
#define RATEL__SLIDING_RUNS 24  /* runs: u32 offset_ms, u32 count */
#define RATEL__RUN_SIZE 8
#define RATEL__FIXED_START 10 /* i64 window start, ms */
#define RATEL__FIXED_COUNT 18 /* u32 */
#define RATEL__FIXED_SIZE 22
#define RATEL__APPROX_START 10 /* i64 current window start, ms */
#define RATEL__APPROX_CUR 18   /* u32 */
#define RATEL__APPROX_PREV 22  /* u32 */
#define RATEL__APPROX_SIZE 26
#define RATEL__GCRA_TAT 14 /* i64 TAT, whole microseconds */
#define RATEL__GCRA_REM 22 /* u32 TAT remainder, in 1/limit microseconds */
#define RATEL__GCRA_SIZE 26
#define RATEL__CONC_BASE 10    /* i64 base_ms */
#define RATEL__CONC_N 18       /* u16 entries (permits held) */
#define RATEL__CONC_LAST 20    /* u32 the last lease id handed out */
#define RATEL__CONC_ENTRIES 24 /* entries: u32 expiry offset_ms, u32 id */
#define RATEL__CONC_ENTRY_SIZE 8
#define RATEL__CONC_MAX_SIZE                                                   \
    (RATEL__CONC_ENTRIES + RATEL__CONC_ENTRY_SIZE * RATEL_CONCURRENT_MAX)

#define RATEL__SLIDING_MAX_SIZE                                                \
    (RATEL__SLIDING_RUNS + RATEL__RUN_SIZE * RATEL_SLIDING_CAP)
#define RATEL__STATE_MAX                                                       \
    (RATEL__HEADER_SIZE + RATEL_MAX_RULES * RATEL__SLIDING_MAX_SIZE)
_Static_assert(RATEL__STATE_MAX == RATEL_STATE_MAX,
               "ratel.h's RATEL_STATE_MAX must match the blob layout");
_Static_assert(RATEL__CONC_MAX_SIZE <= RATEL__SLIDING_MAX_SIZE,
               "a concurrent record must fit the largest record's room");

/*
 * Stored instants may lie a little past RATEL_TIME_MAX_US: sliding runs are
 * rounded up to their granularity, a gcra TAT runs ahead of now by at most
 * the bucket depth (RATEL__DEPTH_MAX_MS) plus a reservation.
 */
#define RATEL__STORED_MS_MAX ((int64_t)1 << 44)
#define RATEL__STORED_US_MAX ((int64_t)1 << 54)
/* Longest gcra bucket depth (burst x period / limit) and reservation. */
#define RATEL__DEPTH_MAX_MS ((int64_t)3650 * 86400000)
#define RATEL__MAX_WAIT_MS ((int64_t)RATEL_PERIOD_MAX_MS)

/* Fixed-point scale of the approx algorithm's window weight. */
#define RATEL__APPROX_SCALE 65536
/* Times in ms must stay below this (RATEL_TIME_MAX_US in ms). */
#define RATEL__TIME_MAX_MS (RATEL_TIME_MAX_US / 1000)

static inline uint16_t ratel__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ratel__ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline int64_t ratel__ld64(const uint8_t *p)
{
    return (int64_t)((uint64_t)ratel__ld32(p) |
                     ((uint64_t)ratel__ld32(p + 4) << 32));
}

static inline void ratel__st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void ratel__st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void ratel__st64(uint8_t *p, int64_t v)
{
    ratel__st32(p, (uint32_t)(uint64_t)v);
    ratel__st32(p + 4, (uint32_t)((uint64_t)v >> 32));
}

/*
 * Arrays of 8-byte pairs (u32 first, u32 second) after a record's fields:
 * sliding's runs (offset, count) and concurrent's entries (offset, id).
 */
static inline uint32_t ratel__pair_first(const uint8_t *a, uint32_t i)
{
    return ratel__ld32(a + (size_t)i * 8);
}

static inline uint32_t ratel__pair_second(const uint8_t *a, uint32_t i)
{
    return ratel__ld32(a + (size_t)i * 8 + 4);
}

static inline void ratel__pair_set(uint8_t *a, uint32_t i, uint32_t first,
                                   uint32_t second)
{
    ratel__st32(a + (size_t)i * 8, first);
    ratel__st32(a + (size_t)i * 8 + 4, second);
}

/* Ceiling division for non-negative numerators and positive divisors. */
static inline int64_t ratel__ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* ----------------------------------------------------------- rule helpers */

/* Two rules count the same windows: same algorithm, period and calendar
   (zones are registered once, so one zone is one pointer). */
static inline int ratel__rule_same_period(const ratel_rule_t *a,
                                          const ratel_rule_t *b)
{
    return a->algo == b->algo && a->period_ms == b->period_ms &&
           a->calendar == b->calendar && a->months == b->months &&
           a->tz_offset_s == b->tz_offset_s && a->zone == b->zone;
}

/* Two rules are the same rule: the same period, limit and burst. */
static inline int ratel__rule_equal(const ratel_rule_t *a,
                                    const ratel_rule_t *b)
{
    return ratel__rule_same_period(a, b) && a->limit == b->limit &&
           a->burst == b->burst;
}

/* Checks ranges of a rule; 0 or RATEL_ERULE with a message in errbuf. */
int ratel__rule_check(const ratel_rule_t *rule, char *errbuf, size_t errlen);

/* -------------------------------------------------------------- calendar */

/*
 * A zone of the tz database, as lib/tz builds it: the instants its offset
 * changes and the offsets between them, through the core's time range (the
 * zone's rule for future years already unrolled), so that the core only
 * searches an array.
 */
struct ratel_zone_s {
    char name[RATEL__ZONE_NAME_MAX + 1];
    uint32_t id;        /* ratel__zone_id(name): how a record names it */
    uint32_t n;         /* changes */
    const int64_t *at;  /* n instants (ms), ascending */
    const int32_t *off; /* n + 1 offsets east of UTC (s): off[i] holds
                           before at[i], off[n] after the last change */
};

/* Registers a zone for the life of the process: 0, or RATEL_ERANGE when
   the registry is full or another zone has its id. */
int ratel__zone_register(const ratel_zone_t *zone);
/* The registered zone of that id, or NULL. */
const ratel_zone_t *ratel__zone_by_id(uint32_t id);
/* A zone name's id (32-bit FNV-1a). */
uint32_t ratel__zone_id(const char *name, size_t len);
/* The zone's offset east of UTC at instant t (ms), in ms. */
int64_t ratel__zone_offset_ms(const ratel_zone_t *zone, int64_t t);

/* Days from 1970-01-01 to the 1st of month `mi` (year * 12 + month - 1),
   proleptic Gregorian; mi may lie before 1970. */
int64_t ratel__days_before_month(int64_t mi);

/* The window [*start, *end) (ms) of a fixed or approx rule holding t. */
void ratel__window(const ratel_rule_t *rule, int64_t t, int64_t *start,
                   int64_t *end);

#ifndef RATEL_NO_TZDB
/*
 * Loads (once per process) the zone `name` from the system's tz database,
 * lib/tz/tzdb.c. NULL with a reason in `why` if it cannot.
 */
const ratel_zone_t *ratel__tzdb_load(const char *name, size_t len, char *why,
                                     size_t whylen);
#endif

/* --------------------------------------------------------------- records */

/* One rule's record inside a blob, located by ratel__state_parse. */
typedef struct ratel__record_s {
    uint8_t *p;  /* first byte of the record */
    size_t size; /* bytes */
    ratel_rule_t rule;
    int64_t sum; /* sliding: permits in all runs, expired or not */
} ratel__record_t;

/*
 * Validates `len` bytes at `state` (len > 0) and fills `rec` with its
 * records (at most RATEL_MAX_RULES), `*n` with their number.
 * Returns 0, RATEL_ECORRUPT or RATEL_EVERSION.
 */
int ratel__state_parse(const uint8_t *state, size_t len, ratel__record_t *rec,
                       uint32_t *n);

/*
 * The common case of a decision: whether the blob holds exactly the
 * policy's rules, in order, each record valid. Then `rec` is filled and 1
 * returned, having checked only the record fields (the policy's rules are
 * valid already). With `owned` (a blob the core wrote itself and nobody
 * else touched, see owned.h) the records' fields are trusted: only each
 * record's extent and calendar are read. 0 means "not matched": the caller
 * parses the blob in full.
 */
int ratel__state_match(const ratel_policy_t *policy, const uint8_t *state,
                       size_t len, ratel__record_t *rec, int owned);

/* Writes an empty record for `rule` at p (ratel__algos[algo]->empty_size
   bytes). */
void ratel__record_write_empty(uint8_t *p, const ratel_rule_t *rule);

/* Writes the blob header for `nrules` rules at p. */
void ratel__header_write(uint8_t *p, uint32_t nrules);

/* What a rule looks like at an instant. Times are microseconds. */
typedef struct ratel__status_s {
    int64_t used;      /* permits counted now */
    int64_t remaining; /* permits available now, >= 0 */
    int64_t reset_us;  /* until the record carries no state, >= 0 */
} ratel__status_t;

/*
 * A rule's answer to one request, before anything is written. The
 * algorithm-specific fields carry the plan the commit then follows, so
 * deciding and committing cannot disagree.
 */
typedef struct ratel__verdict_s {
    int allowed;         /* admitted at now */
    int64_t retry_us;    /* denied: until it would be admitted */
    int64_t allow_at_us; /* gcra: earliest conforming instant (ceil) */
    size_t grow;         /* bytes the commit adds to the record */
    /* sliding plan (the event's run and granularity follow from these) */
    uint32_t drop; /* expired runs at the head */
    int64_t total; /* permits counted in the window (unexpired) */
    /* fixed / approx plan */
    int64_t window_ms;     /* current window start */
    int64_t window_end_ms; /* and its end */
    int64_t cur, prev;     /* counts after moving to that window */
    int64_t weight;        /* approx: weight of prev, in 1/65536 */
    uint32_t lease; /* concurrent, admitted: the id the commit hands out */
} ratel__verdict_t;

/* The words ratel_rule_explain() gives an algorithm's sentence. */
typedef struct ratel__rule_words_s {
    const char *requests; /* "request" or "requests", after the limit */
    char period[48];      /* "1-hour": the period as an adjective */
    char noun[48];        /* "hour", "90 seconds": as a noun */
    char reset[320];      /* "resetting at midnight, 00:00 UTC" (windows) */
    char interval[48];    /* PERIOD / LIMIT: "6 minutes" */
    char lifetime[48];    /* PERIOD as a duration: "30 seconds" */
} ratel__rule_words_t;

/*
 * One algorithm: its record's sizes and its operations. Each algorithm's
 * file defines its entry, ratel__algo_<name>; ratel__algos[] (state.c)
 * holds them by number, made from RATEL_ALGO_MAP, and every dispatch of
 * the core goes through it; what callers outside the core need to know of
 * an algorithm (ratel_algo_facts()) is the map's. An algorithm with
 * RATEL_ALGO_RESERVES decides allow_at_us; one with RATEL_ALGO_CALENDAR has
 * fixed-size records, then the calendar. Times are microseconds.
 */
typedef struct ratel__algo_s {
    size_t rule_size;  /* the rule's bytes at the record's start */
    size_t empty_size; /* an empty record */
    size_t max_size;   /* the largest record */
    uint8_t max_flags; /* the largest valid flags byte */
    /* A limit past which its state would not fit (0: RATEL_LIMIT_MAX) and
       what it counts, for the message: "a concurrent rule holds at most
       256 leases at once (its state keeps each one)". */
    uint32_t limit_max;
    const char *limit_words;
    /* Validates the fields after the rule of a record for `rule` at p
       (`avail` bytes left in the blob) and locates it in rec (size, sum).
       Returns 0 or RATEL_ECORRUPT. */
    int (*check)(const uint8_t *p, size_t avail, const ratel_rule_t *rule,
                 ratel__record_t *rec);
    /* Sets r->size (and r->sum) of a valid record at r->p. */
    void (*locate)(ratel__record_t *r);
    void (*status)(const ratel__record_t *r, int64_t now_us,
                   ratel__status_t *st);
    void (*decide)(const ratel__record_t *r, int64_t now_us, uint64_t cost,
                   ratel__verdict_t *v);
    /* Charges `cost`, following the verdict's plan, from at_us (now, or
       the instant a reservation is admitted at); reports the status after
       it. Returns the record's new size. */
    size_t (*commit)(ratel__record_t *r, int64_t now_us, int64_t at_us,
                     uint64_t cost, const ratel__verdict_t *v,
                     ratel__status_t *after);
    /* Gives `cost` permits back; returns the record's new size. */
    size_t (*refund)(ratel__record_t *r, int64_t now_us, uint64_t cost);
    /* Writes at `to` the record for `rule` made from `from`, a record of
       the same algorithm and period; returns its size. */
    size_t (*convert)(const ratel__record_t *from, uint8_t *to,
                      const ratel_rule_t *rule, int64_t now_us);
    /* Fills the algorithm's own fields of an inspection. */
    void (*inspect)(const ratel__record_t *r, ratel_rule_status_t *out);
    /* RATEL_ALGO_LEASES only (NULL otherwise): releases the lease `id`, or
       with `renew` moves its expiry to now + PERIOD; *held is 1 if the
       lease was held, 0 if unknown or expired. Returns the record's new
       size (it never grows). */
    size_t (*lease)(ratel__record_t *r, int64_t now_us, uint32_t id, int renew,
                    int *held);
    /* ratel_rule_explain(): the rule as an English sentence, from `w`;
       returns the full length, as snprintf does. */
    int (*explain)(const ratel_rule_t *rule, const ratel__rule_words_t *w,
                   char *buf, size_t buflen);
} ratel__algo_t;

#define RATEL__ALGO_DECLARE_(NAME, name, number, facts, fields)                \
    extern const ratel__algo_t ratel__algo_##name;
RATEL_ALGO_MAP(RATEL__ALGO_DECLARE_)
#undef RATEL__ALGO_DECLARE_

enum { RATEL__ALGOS = RATEL_ALGOS };

/* The RATEL_ALGO_* facts of a valid algorithm, from the map. */
static inline unsigned ratel__facts(ratel_algo_t algo)
{
    static const uint8_t facts[RATEL__ALGOS] = {
#define RATEL__FACTS_(NAME, name, number, facts, fields) [number] = facts,
        RATEL_ALGO_MAP(RATEL__FACTS_)
#undef RATEL__FACTS_
    };
    return facts[algo];
}

/* Every algorithm by its number (the stored byte). */
extern const ratel__algo_t *const ratel__algos[RATEL__ALGOS];

/* The algorithm of `rule` (a valid one). */
static inline const ratel__algo_t *ratel__algo(const ratel_rule_t *rule)
{
    return ratel__algos[rule->algo];
}

/*
 * The operations of every decision (reading a record, deciding,
 * committing, reporting), as direct calls: a switch made from
 * RATEL_ALGO_MAP on the const entries, which the compiler resolves and
 * inlines into the hot path (an indirect call through ratel__algos[]
 * cost the embedded store 13% of its gcra decisions).
 */
static inline void ratel__decide(const ratel__record_t *r, int64_t now_us,
                                 uint64_t cost, ratel__verdict_t *v)
{
    switch (r->rule.algo) {
#define RATEL__DECIDE_(NAME, name, number, facts, fields)                      \
    case RATEL_ALGO_##NAME:                                                    \
        ratel__algo_##name.decide(r, now_us, cost, v);                         \
        return;
        RATEL_ALGO_MAP(RATEL__DECIDE_)
#undef RATEL__DECIDE_
    default: /* the policy's rules are valid */
        __builtin_unreachable();
    }
}

static inline void ratel__status(const ratel__record_t *r, int64_t now_us,
                                 ratel__status_t *st)
{
    switch (r->rule.algo) {
#define RATEL__STATUS_(NAME, name, number, facts, fields)                      \
    case RATEL_ALGO_##NAME:                                                    \
        ratel__algo_##name.status(r, now_us, st);                              \
        return;
        RATEL_ALGO_MAP(RATEL__STATUS_)
#undef RATEL__STATUS_
    default: /* the policy's rules are valid */
        __builtin_unreachable();
    }
}

static inline size_t ratel__commit(ratel__record_t *r, int64_t now_us,
                                   int64_t at_us, uint64_t cost,
                                   const ratel__verdict_t *v,
                                   ratel__status_t *after)
{
    switch (r->rule.algo) {
#define RATEL__COMMIT_(NAME, name, number, facts, fields)                      \
    case RATEL_ALGO_##NAME:                                                    \
        return ratel__algo_##name.commit(r, now_us, at_us, cost, v, after);
        RATEL_ALGO_MAP(RATEL__COMMIT_)
#undef RATEL__COMMIT_
    default: /* the policy's rules are valid */
        __builtin_unreachable();
    }
}

static inline void ratel__locate(ratel__record_t *r)
{
    switch (r->rule.algo) {
#define RATEL__LOCATE_(NAME, name, number, facts, fields)                      \
    case RATEL_ALGO_##NAME:                                                    \
        ratel__algo_##name.locate(r);                                          \
        return;
        RATEL_ALGO_MAP(RATEL__LOCATE_)
#undef RATEL__LOCATE_
    default: /* the policy's rules are valid */
        __builtin_unreachable();
    }
}

static inline int ratel__check(const uint8_t *p, size_t avail,
                               const ratel_rule_t *rule, ratel__record_t *rec)
{
    switch (rule->algo) {
#define RATEL__CHECK_(NAME, name, number, facts, fields)                       \
    case RATEL_ALGO_##NAME:                                                    \
        return (p[1] & ~RATEL__FLAG_CALENDAR) > ratel__algo_##name.max_flags   \
                   ? RATEL_ECORRUPT                                            \
                   : ratel__algo_##name.check(p, avail, rule, rec);
        RATEL_ALGO_MAP(RATEL__CHECK_)
#undef RATEL__CHECK_
    }
    return RATEL_ECORRUPT;
}

/* convert for the algorithms whose state counts past requests: the counts
   stay true under the new limit, so the record is copied with it. */
size_t ratel__convert_keep(const ratel__record_t *from, uint8_t *to,
                           const ratel_rule_t *rule, int64_t now_us);

/* locate for the algorithms whose records have one size. */
static inline void ratel__locate_fixed_size(ratel__record_t *r)
{
    r->size = ratel__algo(&r->rule)->empty_size +
              (r->rule.calendar ? RATEL__CAL_SIZE : 0);
    r->sum = 0;
}

/* The bytes of an empty record for `rule`, and of its largest. */
static inline size_t ratel__record_empty_size(const ratel_rule_t *rule)
{
    return ratel__algo(rule)->empty_size +
           (rule->calendar ? RATEL__CAL_SIZE : 0);
}

static inline size_t ratel__record_max_size(const ratel_rule_t *rule)
{
    return ratel__algo(rule)->max_size + (rule->calendar ? RATEL__CAL_SIZE : 0);
}

/* The ranges every stored instant in ms must lie in. */
static inline int ratel__time_ms_ok(int64_t t)
{
    return t >= 0 && t < RATEL__STORED_MS_MAX;
}

#endif /* RATEL_CORE_INTERNAL_H */
