/*
 * gcra.c - token bucket as GCRA (generic cell rate algorithm).
 *
 * Rate LIMIT per PERIOD: one permit every T = PERIOD / LIMIT. The record
 * keeps one instant, the theoretical arrival time TAT: when the bucket will
 * be full again. A request of cost c at `now` conforms when
 *
 *     max(TAT, now) + c*T - now <= tau,     tau = burst * T,
 *
 * and then TAT becomes max(TAT, now) + c*T.
 *
 * T is rarely a whole number of microseconds (1e9 per ms is 1e-6 us), so the
 * arithmetic runs in "scaled" units of 1/LIMIT microsecond, where T is
 * exactly PERIOD_us: scaled(t) = t_us * LIMIT. The record stores TAT as
 * whole microseconds plus a remainder in [0, LIMIT). Everything is exact
 * integer arithmetic in 128 bits: no drift, no float rounding, identical
 * results everywhere.
 *
 * Reservations: an over-limit request whose conforming instant lies within
 * the caller's max wait is admitted at that instant (TAT advances from it),
 * so later requests queue behind it in arrival order and the rate holds.
 */
#include "internal.h"

typedef __int128 i128;

typedef struct gcra_view_s {
    i128 tat; /* scaled */
    i128 now; /* scaled */
    i128 t;   /* emission interval, scaled: period in us */
    i128 tau; /* bucket depth, scaled: burst x t */
    int64_t limit, burst;
} gcra_view_t;

static void gcra_view(const ratel__record_t *r, int64_t now_us, gcra_view_t *g)
{
    g->limit = r->rule.limit;
    g->tat = (i128)ratel__ld64(r->p + RATEL__GCRA_TAT) * g->limit +
             ratel__ld32(r->p + RATEL__GCRA_REM);
    g->now = (i128)now_us * g->limit;
    g->t = (i128)r->rule.period_ms * 1000;
    g->burst = r->rule.burst;
    g->tau = g->t * g->burst;
}

/*
 * a / b for a >= 0, b > 0. Durations relative to now nearly always fit in
 * 64 bits, where a division costs a fraction of a 128-bit one.
 */
static inline i128 div_pos(i128 a, i128 b)
{
    if (a <= INT64_MAX && b <= INT64_MAX)
        return (int64_t)a / (int64_t)b;
    return a / b;
}

static inline i128 div_pos_ceil(i128 a, i128 b)
{
    i128 q = div_pos(a, b);
    return q + (q * b != a);
}

/* Scaled duration to whole microseconds, rounded up. */
static int64_t to_us_ceil(i128 d, int64_t limit)
{
    return d <= 0 ? 0 : (int64_t)div_pos_ceil(d, limit);
}

/*
 * Stores TAT >= now as now + whole us, and the remainder (now is whole).
 * Returns TAT - now in microseconds rounded up: the reset time.
 */
static int64_t store_tat(uint8_t *p, const gcra_view_t *g, int64_t now_us)
{
    i128 ahead = g->tat - g->now, q = div_pos(ahead, g->limit);
    uint32_t rem = (uint32_t)(ahead - q * g->limit);
    ratel__st64(p + RATEL__GCRA_TAT, now_us + (int64_t)q);
    ratel__st32(p + RATEL__GCRA_REM, rem);
    return (int64_t)q + (rem != 0);
}

/*
 * With x = max(TAT, now) - now >= 0, the permits in use are ceil(x / T) and
 * those left floor((tau - x) / T) = burst - ceil(x / T), tau being exactly
 * burst x T: one division for both.
 */
static void gcra_counts(const gcra_view_t *g, ratel__status_t *st)
{
    i128 x = g->tat > g->now ? g->tat - g->now : 0;
    i128 owed = x > 0 ? div_pos_ceil(x, g->t) : 0;

    st->remaining = owed < g->burst ? (int64_t)(g->burst - owed) : 0;
    /* After a clock step back TAT may lie far ahead: owed can pass 2^63. */
    st->used = owed > INT64_MAX ? INT64_MAX : (int64_t)owed;
}

static void gcra_status_of(const gcra_view_t *g, ratel__status_t *st)
{
    gcra_counts(g, st);
    st->reset_us = to_us_ceil(g->tat - g->now, g->limit);
}

static void gcra_status(const ratel__record_t *r, int64_t now_us,
                        ratel__status_t *st)
{
    gcra_view_t g;
    gcra_view(r, now_us, &g);
    gcra_status_of(&g, st);
}

static void gcra_decide(const ratel__record_t *r, int64_t now_us, uint64_t cost,
                        ratel__verdict_t *v)
{
    gcra_view_t g;
    i128 base, allow_at;

    gcra_view(r, now_us, &g);
    base = g.tat > g.now ? g.tat : g.now;
    allow_at = base + (i128)cost * g.t - g.tau;
    v->grow = 0;
    v->allowed = allow_at <= g.now;
    v->retry_us = v->allowed ? 0 : to_us_ceil(allow_at - g.now, g.limit);
    v->allow_at_us = now_us + v->retry_us;
}

static size_t gcra_commit(ratel__record_t *r, int64_t now_us, int64_t at_us,
                          uint64_t cost, const ratel__verdict_t *v,
                          ratel__status_t *after)
{
    gcra_view_t g;
    i128 at;

    (void)v;

    gcra_view(r, now_us, &g);
    at = (i128)at_us * g.limit;
    g.tat = (g.tat > at ? g.tat : at) + (i128)cost * g.t;
    after->reset_us = store_tat(r->p, &g, now_us);
    gcra_counts(&g, after);
    return RATEL__GCRA_SIZE;
}

static size_t gcra_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    gcra_view_t g;
    i128 tat;

    gcra_view(r, now_us, &g);
    tat = g.tat - (i128)cost * g.t;
    g.tat = tat > g.now ? tat : g.now;
    store_tat(r->p, &g, now_us);
    return RATEL__GCRA_SIZE;
}

/* The permits owed under the old rule (same period), capped at the new
   burst, owed again under the new one. */
static size_t gcra_convert(const ratel__record_t *from, uint8_t *to,
                           const ratel_rule_t *rule, int64_t now_us)
{
    gcra_view_t g;
    i128 owed, used;

    /* Permits owed under the old rule, capped at the new burst. */
    gcra_view(from, now_us, &g);
    owed = g.tat - g.now;
    used = owed > 0 ? div_pos_ceil(owed, g.t) : 0;
    if (used > rule->burst)
        used = rule->burst;
    ratel__record_write_empty(to, rule);
    if (used > 0) {
        g.limit = rule->limit;
        g.now = (i128)now_us * rule->limit;
        g.tat = g.now + used * g.t;
        store_tat(to, &g, now_us);
    }
    return RATEL__GCRA_SIZE;
}

/* 0 <= TAT < 2^54 us, and the remainder is below the limit it counts in. */
static int gcra_check(const uint8_t *p, size_t avail, const ratel_rule_t *rule,
                      ratel__record_t *rec)
{
    int64_t tat;

    if (avail < RATEL__GCRA_SIZE)
        return RATEL_ECORRUPT;
    tat = ratel__ld64(p + RATEL__GCRA_TAT);
    if (tat < 0 || tat >= RATEL__STORED_US_MAX ||
        ratel__ld32(p + RATEL__GCRA_REM) >= rule->limit)
        return RATEL_ECORRUPT;
    rec->size = RATEL__GCRA_SIZE;
    return 0;
}

static void gcra_inspect(const ratel__record_t *r, ratel_rule_status_t *out)
{
    out->tat_us = ratel__ld64(r->p + RATEL__GCRA_TAT);
}

/* ratel_rule_explain()'s sentence. */
static int gcra_explain(const ratel_rule_t *rule, const ratel__rule_words_t *w,
                        char *buf, size_t buflen)
{
    return snprintf(buf, buflen,
                    "%u %s per %s at a steady rate (one every %s), "
                    "bursts of up to %u",
                    rule->limit, w->requests, w->noun, w->interval,
                    rule->burst);
}

const ratel__algo_t ratel__algo_gcra = {
    .rule_size = RATEL__GCRA_RULE_SIZE,
    .empty_size = RATEL__GCRA_SIZE,
    .max_size = RATEL__GCRA_SIZE,
    .max_flags = 0,
    .check = gcra_check,
    .locate = ratel__locate_fixed_size,
    .status = gcra_status,
    .decide = gcra_decide,
    .commit = gcra_commit,
    .refund = gcra_refund,
    .convert = gcra_convert,
    .inspect = gcra_inspect,
    .explain = gcra_explain,
};
