/*
 * window.c - the two window counters: `fixed` and `approx`.
 *
 * Windows are aligned to the Unix epoch: the window holding `now` starts at
 * now - now % PERIOD (milliseconds). A clock that goes back into an earlier
 * window is clamped to the stored window, so a counter is never lost.
 *
 * fixed:  one counter per window. Cheap and exact per window, but a client
 *         can spend LIMIT at the end of one window and LIMIT again at the
 *         start of the next: up to 2 x LIMIT in PERIOD across a boundary.
 * approx: the current window's count plus the previous window's weighted by
 *         the share of it still inside the trailing PERIOD, in 1/65536 steps:
 *         estimate = prev * w / 65536 + cur, w = floor((P - e) * 65536 / P),
 *         e = now - window start. O(1) memory, close to sliding.
 * Products stay below 2^53 so the Lua scripts compute the same in doubles.
 */
#include "internal.h"

#define SCALE RATEL__APPROX_SCALE

/*
 * The current window's start at now_ms, clamped to the stored window. The
 * usual answers (the stored window or the next) cost no division.
 */
static int64_t window_of(int64_t now_ms, uint32_t period, int64_t stored)
{
    int64_t ws;
    if (now_ms < stored + period)
        return stored; /* in the stored window, or before it: clamped */
    if (now_ms < stored + 2 * (int64_t)period)
        return stored + period;
    ws = now_ms - now_ms % period;
    return stored > ws ? stored : ws;
}

static int64_t until_us(int64_t at_ms, int64_t now_us)
{
    int64_t d = at_ms * 1000 - now_us;
    return d > 0 ? d : 0;
}

/* ----------------------------------------------------------------- fixed */

/* The count of the window holding now (0 if the stored one has passed). */
static int64_t fixed_count(const ratel__record_t *r, int64_t now_ms,
                           int64_t *ws)
{
    int64_t start = ratel__ld64(r->p + RATEL__FIXED_START);
    *ws = window_of(now_ms, r->rule.period_ms, start);
    return start == *ws ? ratel__ld32(r->p + RATEL__FIXED_COUNT) : 0;
}

static void fixed_status(const ratel__record_t *r, int64_t now_us,
                         ratel__status_t *st)
{
    int64_t ws, count = fixed_count(r, now_us / 1000, &ws);
    st->used = count;
    st->remaining = count < r->rule.limit ? r->rule.limit - count : 0;
    st->reset_us = count > 0 ? until_us(ws + r->rule.period_ms, now_us) : 0;
}

static void fixed_decide(const ratel__record_t *r, int64_t now_us,
                         uint64_t cost, ratel__verdict_t *v)
{
    int64_t ws, count = fixed_count(r, now_us / 1000, &ws);

    v->window_ms = ws;
    v->cur = count;
    v->grow = 0;
    v->allowed = count + (int64_t)cost <= r->rule.limit;
    /* The next window starts empty and cost <= limit: it fits there. */
    v->retry_us = v->allowed ? 0 : until_us(ws + r->rule.period_ms, now_us);
}

static size_t fixed_commit(ratel__record_t *r, int64_t now_us, int64_t at_us,
                           uint64_t cost, const ratel__verdict_t *v,
                           ratel__status_t *after)
{
    int64_t count = v->cur + (int64_t)cost;

    (void)at_us;
    ratel__st64(r->p + RATEL__FIXED_START, v->window_ms);
    ratel__st32(r->p + RATEL__FIXED_COUNT, (uint32_t)count);
    after->used = count;
    after->remaining = count < r->rule.limit ? r->rule.limit - count : 0;
    after->reset_us = until_us(v->window_ms + r->rule.period_ms, now_us);
    return RATEL__FIXED_SIZE;
}

static size_t fixed_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    int64_t ws, count = fixed_count(r, now_us / 1000, &ws);
    count -= (int64_t)cost < count ? (int64_t)cost : count;
    ratel__st64(r->p + RATEL__FIXED_START, ws);
    ratel__st32(r->p + RATEL__FIXED_COUNT, (uint32_t)count);
    return RATEL__FIXED_SIZE;
}

static int fixed_check(const uint8_t *p, size_t avail, const ratel_rule_t *rule,
                       ratel__record_t *rec, int owned)
{
    (void)rule;
    (void)owned;
    if (avail < RATEL__FIXED_SIZE ||
        !ratel__time_ms_ok(ratel__ld64(p + RATEL__FIXED_START)) ||
        ratel__ld32(p + RATEL__FIXED_COUNT) > RATEL_LIMIT_MAX)
        return RATEL_ECORRUPT;
    rec->size = RATEL__FIXED_SIZE;
    return 0;
}

static void fixed_inspect(const ratel__record_t *r, ratel_rule_status_t *out)
{
    out->window_start_ms = ratel__ld64(r->p + RATEL__FIXED_START);
}

const ratel__algo_t ratel__algo_fixed = {
    .rule_size = RATEL__RULE_SIZE,
    .empty_size = RATEL__FIXED_SIZE,
    .max_size = RATEL__FIXED_SIZE,
    .max_flags = 0,
    .check = fixed_check,
    .locate = ratel__locate_fixed_size,
    .status = fixed_status,
    .decide = fixed_decide,
    .commit = fixed_commit,
    .refund = fixed_refund,
    .convert = ratel__convert_keep,
    .inspect = fixed_inspect,
};

/* ---------------------------------------------------------------- approx */

typedef struct approx_view_s {
    int64_t ws;        /* current window start, ms */
    int64_t e;         /* ms elapsed in it */
    int64_t cur, prev; /* counts of the current and the previous window */
    int64_t w;         /* weight of prev, in 1/SCALE */
} approx_view_t;

/* Moves the stored counters to the window holding now_ms. */
static void approx_view(const ratel__record_t *r, int64_t now_ms,
                        approx_view_t *a)
{
    int64_t start = ratel__ld64(r->p + RATEL__APPROX_START);
    int64_t cur = ratel__ld32(r->p + RATEL__APPROX_CUR);
    int64_t prev = ratel__ld32(r->p + RATEL__APPROX_PREV);
    int64_t period = r->rule.period_ms;

    a->ws = window_of(now_ms, r->rule.period_ms, start);
    a->e = now_ms > a->ws ? now_ms - a->ws : 0;
    if (start == a->ws) {
        a->cur = cur;
        a->prev = prev;
    } else if (start + period == a->ws) {
        a->cur = 0;
        a->prev = cur;
    } else {
        a->cur = a->prev = 0;
    }
    a->w = (period - a->e) * SCALE / period;
}

/* Permits counted now: cur + ceil(prev * w / SCALE). */
static int64_t approx_used(const approx_view_t *a)
{
    return a->cur + ratel__ceil_div(a->prev * a->w, SCALE);
}

static int64_t approx_reset_us(const approx_view_t *a, int64_t period,
                               int64_t now_us)
{
    if (a->cur > 0)
        return until_us(a->ws + 2 * period, now_us);
    if (a->prev > 0)
        return until_us(a->ws + period, now_us);
    return 0;
}

static void approx_status(const ratel__record_t *r, int64_t now_us,
                          ratel__status_t *st)
{
    approx_view_t a;
    int64_t used;

    approx_view(r, now_us / 1000, &a);
    used = approx_used(&a);
    st->used = used;
    st->remaining = used < r->rule.limit ? r->rule.limit - used : 0;
    st->reset_us = approx_reset_us(&a, r->rule.period_ms, now_us);
}

/*
 * The first elapsed time e in a window at which prev * w(e) + need * SCALE
 * <= limit * SCALE, where `need` counts the current window plus the cost; P
 * if there is none. w(e) <= X  <=>  (P - e) * SCALE < (X + 1) * P
 *                              <=>  e >= P - ceil((X + 1) * P / SCALE) + 1.
 */
static int64_t approx_first_fit(int64_t prev, int64_t need, int64_t limit,
                                int64_t period)
{
    int64_t x, e;

    if (need > limit)
        return period;
    if (prev == 0)
        return 0;
    x = (limit - need) * SCALE / prev;
    if (x >= SCALE)
        return 0;
    e = period - ratel__ceil_div((x + 1) * period, SCALE) + 1;
    return e < 0 ? 0 : e;
}

static void approx_decide(const ratel__record_t *r, int64_t now_us,
                          uint64_t cost, ratel__verdict_t *v)
{
    approx_view_t a;
    int64_t limit = r->rule.limit, period = r->rule.period_ms;

    approx_view(r, now_us / 1000, &a);
    v->window_ms = a.ws;
    v->cur = a.cur;
    v->prev = a.prev;
    v->weight = a.w;
    v->grow = 0;
    v->retry_us = 0;
    v->allowed =
        a.prev * a.w + (a.cur + (int64_t)cost) * SCALE <= limit * SCALE;
    if (!v->allowed) {
        /* This window, else the next (prev = cur), else the one after. */
        int64_t e =
            approx_first_fit(a.prev, a.cur + (int64_t)cost, limit, period);
        int64_t at = a.ws + e;
        if (e >= period) {
            e = approx_first_fit(a.cur, (int64_t)cost, limit, period);
            at = e < period ? a.ws + period + e : a.ws + 2 * period;
        }
        v->retry_us = until_us(at, now_us);
    }
}

static size_t approx_commit(ratel__record_t *r, int64_t now_us, int64_t at_us,
                            uint64_t cost, const ratel__verdict_t *v,
                            ratel__status_t *after)
{
    approx_view_t a = {v->window_ms, 0, v->cur + (int64_t)cost, v->prev,
                       v->weight};

    (void)at_us;
    ratel__st64(r->p + RATEL__APPROX_START, v->window_ms);
    ratel__st32(r->p + RATEL__APPROX_CUR, (uint32_t)a.cur);
    ratel__st32(r->p + RATEL__APPROX_PREV, (uint32_t)v->prev);
    after->used = approx_used(&a);
    after->remaining =
        after->used < r->rule.limit ? r->rule.limit - after->used : 0;
    after->reset_us = approx_reset_us(&a, r->rule.period_ms, now_us);
    return RATEL__APPROX_SIZE;
}

static size_t approx_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    approx_view_t a;

    approx_view(r, now_us / 1000, &a);
    a.cur -= (int64_t)cost < a.cur ? (int64_t)cost : a.cur;
    ratel__st64(r->p + RATEL__APPROX_START, a.ws);
    ratel__st32(r->p + RATEL__APPROX_CUR, (uint32_t)a.cur);
    ratel__st32(r->p + RATEL__APPROX_PREV, (uint32_t)a.prev);
    return RATEL__APPROX_SIZE;
}

static int approx_check(const uint8_t *p, size_t avail,
                        const ratel_rule_t *rule, ratel__record_t *rec,
                        int owned)
{
    (void)rule;
    (void)owned;
    if (avail < RATEL__APPROX_SIZE ||
        !ratel__time_ms_ok(ratel__ld64(p + RATEL__APPROX_START)) ||
        ratel__ld32(p + RATEL__APPROX_CUR) > RATEL_LIMIT_MAX ||
        ratel__ld32(p + RATEL__APPROX_PREV) > RATEL_LIMIT_MAX)
        return RATEL_ECORRUPT;
    rec->size = RATEL__APPROX_SIZE;
    return 0;
}

static void approx_inspect(const ratel__record_t *r, ratel_rule_status_t *out)
{
    out->window_start_ms = ratel__ld64(r->p + RATEL__APPROX_START);
}

const ratel__algo_t ratel__algo_approx = {
    .rule_size = RATEL__RULE_SIZE,
    .empty_size = RATEL__APPROX_SIZE,
    .max_size = RATEL__APPROX_SIZE,
    .max_flags = 0,
    .check = approx_check,
    .locate = ratel__locate_fixed_size,
    .status = approx_status,
    .decide = approx_decide,
    .commit = approx_commit,
    .refund = approx_refund,
    .convert = ratel__convert_keep,
    .inspect = approx_inspect,
};
