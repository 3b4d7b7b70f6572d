/*
 * window.c - the two window counters: `fixed` and `approx`.
 *
 * Windows are aligned to the Unix epoch: the window holding `now` starts at
 * now - now % PERIOD (milliseconds); with a calendar (tz=, weeks, months)
 * they follow a wall clock instead, and may differ in length (calendar.c).
 * A clock that goes back into an earlier window is clamped to the stored
 * window, so a counter is never lost.
 *
 * fixed:  one counter per window. Cheap and exact per window, but a client
 *         can spend LIMIT at the end of one window and LIMIT again at the
 *         start of the next: up to 2 x LIMIT in PERIOD across a boundary.
 * approx: the current window's count plus the previous window's weighted by
 *         the share of it still inside the trailing PERIOD, in 1/65536 steps:
 *         estimate = prev * w / 65536 + cur, w = floor((L - e) * 65536 / L),
 *         e = now - window start, L the window's length (P, or a calendar
 *         day or month). O(1) memory, close to sliding.
 * Products stay below 2^53 so the Lua scripts compute the same in doubles.
 */
#include "internal.h"

#define SCALE RATEL__APPROX_SCALE

/*
 * The window [*ws, *we) holding now_ms, clamped to the stored window (a
 * clock gone back stays in it). Epoch-aligned windows find the usual
 * answers (the stored window or the next) without a division.
 */
static void window_at(const ratel_rule_t *rule, int64_t now_ms, int64_t stored,
                      int64_t *ws, int64_t *we)
{
    int64_t period = rule->period_ms, unused;

    if (rule->calendar) {
        ratel__window(rule, now_ms, ws, we);
        if (*ws < stored) {
            ratel__window(rule, stored, &unused, we);
            *ws = stored;
        }
        return;
    }
    if (now_ms < stored + period)
        *ws = stored; /* in the stored window, or before it: clamped */
    else if (now_ms < stored + 2 * period)
        *ws = stored + period;
    else
        *ws = now_ms - now_ms % period > stored ? now_ms - now_ms % period
                                                : stored;
    *we = *ws + period;
}

/* The end of the window that starts at `start` (the end of another). */
static int64_t window_end(const ratel_rule_t *rule, int64_t start)
{
    int64_t unused, end;

    if (!rule->calendar)
        return start + rule->period_ms;
    ratel__window(rule, start, &unused, &end);
    return end;
}

/* Whether `stored` is the start of the window before the one at ws. */
static int window_precedes(const ratel_rule_t *rule, int64_t stored, int64_t ws)
{
    int64_t start, unused;

    if (!rule->calendar)
        return stored + rule->period_ms == ws;
    if (stored >= ws)
        return 0;
    ratel__window(rule, ws - 1, &start, &unused);
    return start == stored;
}

static int64_t until_us(int64_t at_ms, int64_t now_us)
{
    int64_t d = at_ms * 1000 - now_us;
    return d > 0 ? d : 0;
}

/* ----------------------------------------------------------------- fixed */

/* The count of the window [*ws, *we) holding now (0 if the stored one has
   passed). */
static int64_t fixed_count(const ratel__record_t *r, int64_t now_ms,
                           int64_t *ws, int64_t *we)
{
    int64_t start = ratel__ld64(r->p + RATEL__FIXED_START);
    window_at(&r->rule, now_ms, start, ws, we);
    return start == *ws ? ratel__ld32(r->p + RATEL__FIXED_COUNT) : 0;
}

static void fixed_status(const ratel__record_t *r, int64_t now_us,
                         ratel__status_t *st)
{
    int64_t ws, we, count = fixed_count(r, now_us / 1000, &ws, &we);
    st->used = count;
    st->remaining = count < r->rule.limit ? r->rule.limit - count : 0;
    st->reset_us = count > 0 ? until_us(we, now_us) : 0;
}

static void fixed_decide(const ratel__record_t *r, int64_t now_us,
                         uint64_t cost, ratel__verdict_t *v)
{
    int64_t ws, we, count = fixed_count(r, now_us / 1000, &ws, &we);

    v->window_ms = ws;
    v->window_end_ms = we;
    v->cur = count;
    v->grow = 0;
    v->allowed = count + (int64_t)cost <= r->rule.limit;
    /* The next window starts empty and cost <= limit: it fits there. */
    v->retry_us = v->allowed ? 0 : until_us(we, now_us);
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
    after->reset_us = until_us(v->window_end_ms, now_us);
    return r->size;
}

static size_t fixed_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    int64_t ws, we, count = fixed_count(r, now_us / 1000, &ws, &we);
    count -= (int64_t)cost < count ? (int64_t)cost : count;
    ratel__st64(r->p + RATEL__FIXED_START, ws);
    ratel__st32(r->p + RATEL__FIXED_COUNT, (uint32_t)count);
    return r->size;
}

static int fixed_check(const uint8_t *p, size_t avail, const ratel_rule_t *rule,
                       ratel__record_t *rec)
{
    (void)rule;
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

/* ratel_rule_explain()'s sentence. */
static int fixed_explain(const ratel_rule_t *rule, const ratel__rule_words_t *w,
                         char *buf, size_t buflen)
{
    return snprintf(buf, buflen,
                    "at most %u %s per %s window, %s (up to %llu across "
                    "a window boundary)",
                    rule->limit, w->requests, w->period, w->reset,
                    2ull * (unsigned long long)rule->limit);
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
    .explain = fixed_explain,
};

/* ---------------------------------------------------------------- approx */

typedef struct approx_view_s {
    int64_t ws, we;    /* current window [ws, we), ms */
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

    window_at(&r->rule, now_ms, start, &a->ws, &a->we);
    a->e = now_ms > a->ws ? now_ms - a->ws : 0;
    if (start == a->ws) {
        a->cur = cur;
        a->prev = prev;
    } else if (window_precedes(&r->rule, start, a->ws)) {
        a->cur = 0;
        a->prev = cur;
    } else {
        a->cur = a->prev = 0;
    }
    a->w = (a->we - a->ws - a->e) * SCALE / (a->we - a->ws);
}

/* Permits counted now: cur + ceil(prev * w / SCALE). */
static int64_t approx_used(const approx_view_t *a)
{
    return a->cur + ratel__ceil_div(a->prev * a->w, SCALE);
}

static int64_t approx_reset_us(const ratel_rule_t *rule, const approx_view_t *a,
                               int64_t now_us)
{
    if (a->cur > 0)
        return until_us(window_end(rule, a->we), now_us);
    if (a->prev > 0)
        return until_us(a->we, now_us);
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
    st->reset_us = approx_reset_us(&r->rule, &a, now_us);
}

/*
 * The first elapsed time e in a window of `len` ms at which
 * prev * w(e) + need * SCALE <= limit * SCALE, where `need` counts the
 * current window plus the cost; len if there is none.
 * w(e) <= X  <=>  (L - e) * SCALE < (X + 1) * L
 *            <=>  e >= L - ceil((X + 1) * L / SCALE) + 1.
 */
static int64_t approx_first_fit(int64_t prev, int64_t need, int64_t limit,
                                int64_t len)
{
    int64_t x, e;

    if (need > limit)
        return len;
    if (prev == 0)
        return 0;
    x = (limit - need) * SCALE / prev;
    if (x >= SCALE)
        return 0;
    e = len - ratel__ceil_div((x + 1) * len, SCALE) + 1;
    return e < 0 ? 0 : e;
}

/* When a request denied in view `a` fits: in this window, else in the next
   (whose previous count is this one's), else when the one after begins. */
static int64_t approx_retry_ms(const ratel_rule_t *rule, const approx_view_t *a,
                               int64_t cost)
{
    int64_t limit = rule->limit, next_end;
    int64_t e = approx_first_fit(a->prev, a->cur + cost, limit, a->we - a->ws);

    if (e < a->we - a->ws)
        return a->ws + e;
    next_end = window_end(rule, a->we);
    e = approx_first_fit(a->cur, cost, limit, next_end - a->we);
    return e < next_end - a->we ? a->we + e : next_end;
}

static void approx_decide(const ratel__record_t *r, int64_t now_us,
                          uint64_t cost, ratel__verdict_t *v)
{
    approx_view_t a;
    int64_t limit = r->rule.limit;

    approx_view(r, now_us / 1000, &a);
    v->window_ms = a.ws;
    v->window_end_ms = a.we;
    v->cur = a.cur;
    v->prev = a.prev;
    v->weight = a.w;
    v->grow = 0;
    v->allowed =
        a.prev * a.w + (a.cur + (int64_t)cost) * SCALE <= limit * SCALE;
    v->retry_us =
        v->allowed
            ? 0
            : until_us(approx_retry_ms(&r->rule, &a, (int64_t)cost), now_us);
}

static size_t approx_commit(ratel__record_t *r, int64_t now_us, int64_t at_us,
                            uint64_t cost, const ratel__verdict_t *v,
                            ratel__status_t *after)
{
    approx_view_t a = {v->window_ms,           v->window_end_ms, 0,
                       v->cur + (int64_t)cost, v->prev,          v->weight};

    (void)at_us;
    ratel__st64(r->p + RATEL__APPROX_START, v->window_ms);
    ratel__st32(r->p + RATEL__APPROX_CUR, (uint32_t)a.cur);
    ratel__st32(r->p + RATEL__APPROX_PREV, (uint32_t)v->prev);
    after->used = approx_used(&a);
    after->remaining =
        after->used < r->rule.limit ? r->rule.limit - after->used : 0;
    after->reset_us = approx_reset_us(&r->rule, &a, now_us);
    return r->size;
}

static size_t approx_refund(ratel__record_t *r, int64_t now_us, uint64_t cost)
{
    approx_view_t a;

    approx_view(r, now_us / 1000, &a);
    a.cur -= (int64_t)cost < a.cur ? (int64_t)cost : a.cur;
    ratel__st64(r->p + RATEL__APPROX_START, a.ws);
    ratel__st32(r->p + RATEL__APPROX_CUR, (uint32_t)a.cur);
    ratel__st32(r->p + RATEL__APPROX_PREV, (uint32_t)a.prev);
    return r->size;
}

static int approx_check(const uint8_t *p, size_t avail,
                        const ratel_rule_t *rule, ratel__record_t *rec)
{
    (void)rule;
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

/* ratel_rule_explain()'s sentence. */
static int approx_explain(const ratel_rule_t *rule,
                          const ratel__rule_words_t *w, char *buf,
                          size_t buflen)
{
    return snprintf(buf, buflen,
                    "about %u %s in any %s window, estimated from the "
                    "counts of two fixed windows %s",
                    rule->limit, w->requests, w->period, w->reset);
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
    .explain = approx_explain,
};
