/*
 * calendar.c - where the windows of fixed and approx lie in time.
 *
 * A rule without a calendar has windows aligned to the Unix epoch in UTC:
 * [k * P, (k + 1) * P) milliseconds. A rule with one (tz=, weeks, months)
 * has windows aligned to a wall clock instead: the local times
 *
 *   durations  k * P from 1970-01-01 00:00 local (1d: every midnight)
 *   weeks      k * P from Monday 1970-01-05 00:00 local
 *   months     the 1st at 00:00 of every n-th month from January 1970
 *
 * and a window starts at the first instant whose local time reaches its
 * local start. Under a fixed offset (tz=+08:00) that is local - offset. In
 * a zone with daylight saving (tz=Europe/Dublin) the offset changes: a day
 * may last 23 or 25 hours, a start that falls in a skipped hour moves to the
 * end of the gap, and a start that falls in a repeated hour is its first
 * occurrence. Dates are proleptic Gregorian, computed in integers.
 *
 * Zones are read from the system's database by lib/tz (not the core: it is
 * I/O) and registered here, so that a record naming a zone by its id can
 * find it again. The registry only grows; a zone lives as long as the
 * process.
 */
#include "internal.h"

#include <stdatomic.h>

#define DAY_MS 86400000LL
/* 1970-01-05, the first Monday of the epoch, in days. */
#define FIRST_MONDAY_DAYS 4
/* Every offset of the tz database lies within a day and a bit. */
#define OFFSET_SPAN_MS (26LL * 3600000)

/* Floor division and modulo for any sign of a, positive b. */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 1970-01-01 to January 1st of year y. */
static int64_t days_before_year(int64_t y)
{
    int64_t before = y - 1; /* whole years since year 1 */
    /* 477 leap days lie in the years 1 .. 1969. */
    return 365 * (y - 1970) + floor_div(before, 4) - floor_div(before, 100) +
           floor_div(before, 400) - 477;
}

/* Days from 1970-01-01 to the 1st of month `mi` (year * 12 + month - 1). */
int64_t ratel__days_before_month(int64_t mi)
{
    static const int cumulative[12] = {0,   31,  59,  90,  120, 151,
                                       181, 212, 243, 273, 304, 334};
    int64_t y = floor_div(mi, 12);
    int m = (int)(mi - y * 12);
    return days_before_year(y) + cumulative[m] + (m >= 2 && is_leap(y));
}

/* The month index (year * 12 + month - 1) holding day `days`. */
static int64_t month_of_day(int64_t days)
{
    /* An estimate from the mean Gregorian year, then exact steps. */
    int64_t y = 1970 + floor_div(days * 400, 146097);
    int64_t mi;

    while (days_before_year(y) > days)
        y--;
    while (days_before_year(y + 1) <= days)
        y++;
    mi = y * 12 + 11;
    while (ratel__days_before_month(mi) > days)
        mi--;
    return mi;
}

/* ------------------------------------------------------------------ zones */

static const ratel_zone_t *_Atomic registry[RATEL__ZONES_MAX];
static atomic_uint registered;
static atomic_flag registering = ATOMIC_FLAG_INIT;

int ratel__zone_register(const ratel_zone_t *zone)
{
    unsigned n;
    int rc = 0;

    while (
        atomic_flag_test_and_set_explicit(&registering, memory_order_acquire))
        ;
    n = atomic_load_explicit(&registered, memory_order_relaxed);
    for (unsigned i = 0; i < n && rc == 0; i++)
        if (atomic_load_explicit(&registry[i], memory_order_relaxed)->id ==
            zone->id)
            rc = RATEL_ERANGE; /* a collision of two names */
    if (rc == 0 && n == RATEL__ZONES_MAX)
        rc = RATEL_ENOMEM;
    if (rc == 0) {
        atomic_store_explicit(&registry[n], zone, memory_order_relaxed);
        atomic_store_explicit(&registered, n + 1, memory_order_release);
    }
    atomic_flag_clear_explicit(&registering, memory_order_release);
    return rc;
}

const ratel_zone_t *ratel__zone_by_id(uint32_t id)
{
    unsigned n = atomic_load_explicit(&registered, memory_order_acquire);

    for (unsigned i = 0; i < n; i++) {
        const ratel_zone_t *z =
            atomic_load_explicit(&registry[i], memory_order_relaxed);
        if (z->id == id)
            return z;
    }
    return NULL;
}

uint32_t ratel__zone_id(const char *name, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 16777619u;
    return h;
}

const char *ratel_zone_name(const ratel_zone_t *zone)
{
    return zone ? zone->name : "";
}

/* The offset of `zone` at instant t, in ms: the last change at or before
   t decides (off[i] holds before at[i]). */
int64_t ratel__zone_offset_ms(const ratel_zone_t *zone, int64_t t)
{
    uint32_t lo = 0, hi = zone->n; /* the first at[] > t is in [lo, hi] */

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (zone->at[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)zone->off[lo] * 1000;
}

/*
 * The first instant whose local time in `zone` is at least `local`. In
 * each span of one offset o the local time t + o grows with t, so the
 * earliest span holding such a t gives it: max(span start, local - o).
 */
static int64_t zone_first_reaching(const ratel_zone_t *zone, int64_t local)
{
    int64_t from = local - OFFSET_SPAN_MS;
    uint32_t i = 0, lo = 0, hi = zone->n;

    while (lo < hi) { /* the first change after `from` */
        uint32_t mid = lo + (hi - lo) / 2;
        if (zone->at[mid] <= from)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (i = lo; i <= zone->n; i++) {
        int64_t start = i > 0 ? zone->at[i - 1] : INT64_MIN;
        int64_t t = local - (int64_t)zone->off[i] * 1000;
        if (t < start)
            t = start;
        if (i == zone->n || t < zone->at[i])
            return t;
    }
    return local; /* not reached: the last span is unbounded */
}

/* ---------------------------------------------------------------- windows */

/* Seconds east of UTC of a fixed-offset rule; the zone's offset at t. */
static int64_t offset_at(const ratel_rule_t *rule, int64_t t)
{
    if (!(rule->calendar & RATEL_CALENDAR_TZ))
        return 0;
    if (rule->zone)
        return ratel__zone_offset_ms(rule->zone, t);
    return (int64_t)rule->tz_offset_s * 1000;
}

/* The instant local time `local` begins under the rule's clock. */
static int64_t utc_of(const ratel_rule_t *rule, int64_t local)
{
    if (rule->zone && (rule->calendar & RATEL_CALENDAR_TZ))
        return zone_first_reaching(rule->zone, local);
    return local - offset_at(rule, 0);
}

/* The local window [*ls, *le) holding local time `local`. */
static void local_window(const ratel_rule_t *rule, int64_t local, int64_t *ls,
                         int64_t *le)
{
    if (rule->calendar & RATEL_CALENDAR_MONTHS) {
        int64_t first = 1970 * 12, n = rule->months;
        int64_t mi = month_of_day(floor_div(local, DAY_MS));
        int64_t start = first + floor_div(mi - first, n) * n;
        *ls = ratel__days_before_month(start) * DAY_MS;
        *le = ratel__days_before_month(start + n) * DAY_MS;
    } else {
        int64_t anchor = rule->calendar & RATEL_CALENDAR_WEEKS
                             ? FIRST_MONDAY_DAYS * DAY_MS
                             : 0;
        int64_t p = rule->period_ms;
        *ls = anchor + floor_div(local - anchor, p) * p;
        *le = *ls + p;
    }
}

void ratel__window(const ratel_rule_t *rule, int64_t t, int64_t *start,
                   int64_t *end)
{
    int64_t ls, le;

    if (rule->calendar == 0) {
        *start = t - t % rule->period_ms;
        *end = *start + rule->period_ms;
        return;
    }
    local_window(rule, t + offset_at(rule, t), &ls, &le);
    *start = utc_of(rule, ls);
    *end = utc_of(rule, le);
    /* A repeated hour: t's local time fell back below the end it passed. */
    while (*end <= t) {
        *start = *end;
        local_window(rule, le, &ls, &le);
        *end = utc_of(rule, le);
    }
}
