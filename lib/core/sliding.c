/*
 * sliding.c - the sliding window log: at most LIMIT permits in ANY trailing
 * PERIOD, never more.
 *
 * The record keeps the admitted events as (time, count) runs, oldest first,
 * times in milliseconds as offsets from a base, and the sum of their counts,
 * so a decision reads only the runs that expire (amortised O(1)). An event at
 * time t counts at instant `now` while t > now - PERIOD. Requests in the same
 * millisecond share a run, so a window holding few distinct instants is exact
 * and tiny.
 *
 * Memory is bounded by RATEL_SLIDING_CAP runs. A new event's time is rounded
 * UP to the record's granularity g = 2^shift ms (1 ms, i.e. exact, until the
 * cap is met). When an event would need a run past the cap, the shift grows
 * until rounding every run up to the new granularity leaves at most CAP/2
 * runs, and equal times merge. Moving a time later can only keep an event in
 * the window longer: the limiter gets stricter, never looser. An event is
 * held at most g - 1 ms too long, and g stays below 4 x PERIOD / (CAP - 6)
 * (docs/algorithms.md). The shift falls back one step whenever the window
 * holds at most CAP/8 runs, and to 0 when it empties.
 */
#include "internal.h"

#define RUNS(p) ((p) + RATEL__SLIDING_RUNS)

static inline uint32_t run_off(const uint8_t *p, uint32_t i)
{
    return ratel__pair_first(RUNS(p), i);
}

static inline uint32_t run_count(const uint8_t *p, uint32_t i)
{
    return ratel__pair_second(RUNS(p), i);
}

static inline void run_set(uint8_t *p, uint32_t i, uint32_t off, uint32_t count)
{
    ratel__pair_set(RUNS(p), i, off, count);
}

/* t rounded up to a multiple of 2^shift. */
static inline int64_t round_up(int64_t t, uint32_t shift)
{
    int64_t g = (int64_t)1 << shift;
    return (t + g - 1) & ~(g - 1);
}

/*
 * How many runs at the head have expired at now, and the permits the others
 * count: the record's sum less the expired runs, so only those are read.
 */
static void scan(const ratel__record_t *r, int64_t now_ms, uint32_t *drop,
                 int64_t *total)
{
    const uint8_t *p = r->p;
    uint32_t n = ratel__ld16(p + RATEL__SLIDING_NRUNS), i = 0;
    int64_t base = ratel__ld64(p + RATEL__SLIDING_BASE);
    int64_t cutoff = now_ms - r->rule.period_ms; /* expired: time <= cutoff */
    int64_t gone = 0;

    while (i < n && base + run_off(p, i) <= cutoff)
        gone += run_count(p, i++);
    *drop = i;
    *total = r->sum - gone;
}

static int64_t reset_us(const uint8_t *p, uint32_t period_ms, int64_t now_us)
{
    uint32_t n = ratel__ld16(p + RATEL__SLIDING_NRUNS);
    int64_t last;

    if (n == 0)
        return 0;
    last = ratel__ld64(p + RATEL__SLIDING_BASE) + run_off(p, n - 1);
    return (last + period_ms) * 1000 - now_us > 0
               ? (last + period_ms) * 1000 - now_us
               : 0;
}

static void sliding_status(const ratel__record_t *r, int64_t now_us,
                           ratel__status_t *st)
{
    uint32_t drop;
    int64_t total;

    scan(r, now_us / 1000, &drop, &total);
    st->used = total;
    st->remaining = total < r->rule.limit ? r->rule.limit - total : 0;
    st->reset_us = reset_us(r->p, r->rule.period_ms, now_us);
}

/*
 * The granularity a new event at now_ms would get after `drop` runs expire,
 * and whether it needs a run of its own (1), joins the last run (0), or
 * forces a coarsening because the record is full (2).
 */
static int plan_event(const uint8_t *p, int64_t now_ms, uint32_t drop,
                      uint32_t *shift_out)
{
    uint32_t n = ratel__ld16(p + RATEL__SLIDING_NRUNS) - drop;
    uint32_t shift = p[1];
    int64_t last;

    if (n == 0)
        shift = 0;
    else if (n <= RATEL_SLIDING_CAP / 8 && shift > 0)
        shift--;
    *shift_out = shift;
    if (n == 0)
        return 1;
    last = ratel__ld64(p + RATEL__SLIDING_BASE) + run_off(p, drop + n - 1);
    if (round_up(now_ms, shift) <= last)
        return 0;
    return n == RATEL_SLIDING_CAP ? 2 : 1;
}

static void sliding_decide(const ratel__record_t *r, int64_t now_us,
                           uint64_t cost, ratel__verdict_t *v)
{
    const uint8_t *p = r->p;
    int64_t now_ms = now_us / 1000, limit = r->rule.limit;
    uint32_t period = r->rule.period_ms;

    scan(r, now_ms, &v->drop, &v->total);
    v->grow = 0;
    v->retry_us = 0;
    if (v->total + (int64_t)cost <= limit) {
        uint32_t shift; /* the commit plans the same again */
        v->allowed = 1;
        v->grow =
            plan_event(p, now_ms, v->drop, &shift) == 1 ? RATEL__RUN_SIZE : 0;
        return;
    }
    /*
     * Denied: the request fits once the oldest runs holding at least
     * `need` permits have left the window, i.e. at that run's time +
     * PERIOD. cost <= limit <= ... guarantees such a run exists.
     */
    v->allowed = 0;
    {
        uint32_t n = ratel__ld16(p + RATEL__SLIDING_NRUNS);
        int64_t base = ratel__ld64(p + RATEL__SLIDING_BASE);
        int64_t need = v->total + (int64_t)cost - limit, acc = 0;
        for (uint32_t i = v->drop; i < n; i++) {
            acc += run_count(p, i);
            if (acc >= need) {
                v->retry_us = (base + run_off(p, i) + period) * 1000 - now_us;
                break;
            }
        }
    }
}

/* Drops the first `drop` runs; returns the new number of runs. */
static uint32_t drop_head(uint8_t *p, uint32_t drop)
{
    uint32_t n = ratel__ld16(p + RATEL__SLIDING_NRUNS);
    if (drop > 0) {
        memmove(RUNS(p), RUNS(p) + (size_t)drop * RATEL__RUN_SIZE,
                (size_t)(n - drop) * RATEL__RUN_SIZE);
        n -= drop;
    }
    return n;
}

/*
 * Rounds every run up to the smallest granularity above `shift` that leaves
 * at most CAP/2 runs, merging equal times, and rebases offsets on the first
 * run. Returns the new shift (at most 30: 2^30 ms leaves at most 5 runs in a
 * 30-day window); *n is updated.
 */
static uint32_t coarsen(uint8_t *p, uint32_t *n, uint32_t shift)
{
    int64_t base = ratel__ld64(p + RATEL__SLIDING_BASE);
    int64_t first = base + run_off(p, 0);
    uint32_t out = 0;

    for (shift = shift + 1; shift < 30; shift++) {
        uint32_t distinct = 1;
        int64_t prev = round_up(base + run_off(p, 0), shift);
        for (uint32_t i = 1; i < *n; i++) {
            int64_t t = round_up(base + run_off(p, i), shift);
            distinct += t != prev;
            prev = t;
        }
        if (distinct <= RATEL_SLIDING_CAP / 2)
            break;
    }
    for (uint32_t i = 0; i < *n; i++) {
        int64_t t = round_up(base + run_off(p, i), shift);
        uint32_t c = run_count(p, i);
        if (out > 0 && first + run_off(p, out - 1) == t)
            run_set(p, out - 1, run_off(p, out - 1), run_count(p, out - 1) + c);
        else
            run_set(p, out++, (uint32_t)(t - first), c);
    }
    ratel__st64(p + RATEL__SLIDING_BASE, first);
    *n = out;
    return shift;
}

static size_t sliding_commit(ratel__record_t *r, int64_t now_us, int64_t at_us,
                             uint64_t cost, const ratel__verdict_t *v,
                             ratel__status_t *after)
{
    uint8_t *p = r->p;
    int64_t now_ms = now_us / 1000, base, t;
    uint32_t shift, n;
    int kind = plan_event(p, now_ms, v->drop, &shift);

    (void)at_us;

    n = drop_head(p, v->drop);
    if (kind == 2) {
        shift = coarsen(p, &n, shift);
        t = round_up(now_ms, shift);
        kind = t <= ratel__ld64(p + RATEL__SLIDING_BASE) + run_off(p, n - 1)
                   ? 0
                   : 1;
    }
    t = round_up(now_ms, shift);
    if (kind == 0) {
        run_set(p, n - 1, run_off(p, n - 1),
                run_count(p, n - 1) + (uint32_t)cost);
    } else {
        base = ratel__ld64(p + RATEL__SLIDING_BASE);
        if (n == 0) {
            base = t;
        } else if (t - base > (int64_t)UINT32_MAX) {
            /* Rebase on the first run; the window spans < 2^32 ms. */
            uint32_t first = run_off(p, 0);
            for (uint32_t i = 0; i < n; i++)
                run_set(p, i, run_off(p, i) - first, run_count(p, i));
            base += first;
        }
        ratel__st64(p + RATEL__SLIDING_BASE, base);
        run_set(p, n++, (uint32_t)(t - base), (uint32_t)cost);
    }
    p[1] = (uint8_t)shift;
    ratel__st16(p + RATEL__SLIDING_NRUNS, (uint16_t)n);
    r->sum = v->total + (int64_t)cost;
    ratel__st32(p + RATEL__SLIDING_TOTAL, (uint32_t)r->sum);
    r->size = RATEL__SLIDING_RUNS + (size_t)n * RATEL__RUN_SIZE;
    after->used = r->sum;
    after->remaining = r->sum < r->rule.limit ? r->rule.limit - r->sum : 0;
    after->reset_us = reset_us(p, r->rule.period_ms, now_us);
    return r->size;
}

static size_t sliding_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    uint8_t *p = r->p;
    uint32_t drop, n;
    int64_t total;

    scan(r, now_us / 1000, &drop, &total);
    n = drop_head(p, drop);
    /* Give back the newest permits first: they would have expired last. */
    r->sum = total;
    while (cost > 0 && n > 0) {
        uint32_t c = run_count(p, n - 1);
        if (c <= cost) {
            cost -= c;
            r->sum -= c;
            n--;
        } else {
            r->sum -= (int64_t)cost;
            run_set(p, n - 1, run_off(p, n - 1), c - (uint32_t)cost);
            cost = 0;
        }
    }
    if (n == 0)
        p[1] = 0;
    ratel__st16(p + RATEL__SLIDING_NRUNS, (uint16_t)n);
    ratel__st32(p + RATEL__SLIDING_TOTAL, (uint32_t)r->sum);
    r->size = RATEL__SLIDING_RUNS + (size_t)n * RATEL__RUN_SIZE;
    return r->size;
}

/*
 * The runs' offsets strictly increase, no count is zero, the counts sum to
 * the total, and the last run's time is a valid instant.
 */
static int sliding_check(const uint8_t *p, size_t avail,
                         const ratel_rule_t *rule, ratel__record_t *rec)
{
    int64_t base;
    uint32_t nruns;
    uint64_t total;
    size_t size;

    (void)rule;
    if (avail < RATEL__SLIDING_RUNS)
        return RATEL_ECORRUPT;
    base = ratel__ld64(p + RATEL__SLIDING_BASE);
    nruns = ratel__ld16(p + RATEL__SLIDING_NRUNS);
    total = ratel__ld32(p + RATEL__SLIDING_TOTAL);
    size = RATEL__SLIDING_RUNS + (size_t)nruns * RATEL__RUN_SIZE;
    if (nruns > RATEL_SLIDING_CAP || avail < size || !ratel__time_ms_ok(base) ||
        total > RATEL_LIMIT_MAX || (nruns == 0) != (total == 0))
        return RATEL_ECORRUPT;
    if (nruns > 0) {
        /* Branch-free over the runs. */
        uint32_t prev = run_off(p, 0), bad = run_count(p, 0) == 0;
        uint64_t sum = run_count(p, 0);
        for (uint32_t i = 1; i < nruns; i++) {
            uint32_t off = run_off(p, i), count = run_count(p, i);
            bad |= (off <= prev) | (count == 0);
            sum += count;
            prev = off;
        }
        if (bad || sum != total)
            return RATEL_ECORRUPT;
    }
    if (nruns > 0 && !ratel__time_ms_ok(base + run_off(p, nruns - 1)))
        return RATEL_ECORRUPT;
    rec->size = size;
    rec->sum = (int64_t)total;
    return 0;
}

static void sliding_locate(ratel__record_t *r)
{
    r->size =
        RATEL__SLIDING_RUNS +
        (size_t)ratel__ld16(r->p + RATEL__SLIDING_NRUNS) * RATEL__RUN_SIZE;
    r->sum = ratel__ld32(r->p + RATEL__SLIDING_TOTAL);
}

static void sliding_inspect(const ratel__record_t *r, ratel_rule_status_t *out)
{
    out->runs = ratel__ld16(r->p + RATEL__SLIDING_NRUNS);
    out->granularity_ms = 1u << r->p[1];
}

/* ratel_rule_explain()'s sentence. */
static int sliding_explain(const ratel_rule_t *rule,
                           const ratel__rule_words_t *w, char *buf,
                           size_t buflen)
{
    return snprintf(buf, buflen, "at most %u %s in any %s window", rule->limit,
                    w->requests, w->period);
}

const ratel__algo_t ratel__algo_sliding = {
    .rule_size = RATEL__RULE_SIZE,
    .empty_size = RATEL__SLIDING_RUNS,
    .max_size = RATEL__SLIDING_MAX_SIZE,
    .max_flags = 30, /* granularity exponent: a window spans < 2^32 ms */
    .check = sliding_check,
    .locate = sliding_locate,
    .status = sliding_status,
    .decide = sliding_decide,
    .commit = sliding_commit,
    .refund = sliding_refund,
    .convert = ratel__convert_keep,
    .inspect = sliding_inspect,
    .explain = sliding_explain,
};
