/*
 * test_calendar.c - calendar windows (tz=, weeks, months) against brute
 * force references written here: glibc's localtime_r and timegm give local
 * times (an implementation independent of calendar.c and lib/tz), and a
 * scan finds where each window starts. Then fixed and approx decisions on
 * random traces against counters kept per reference window.
 */
#include "core/internal.h"
#include "core_helpers.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DAY_MS 86400000LL
#define QUARTER_S                                                              \
    900 /* every offset change since 1970 is on a quarter hour                 \
         */

/* The zones of the property tests: DST north and south, half and quarter
   hours, a change at midnight, a skipped day (Apia, 2011-12-30). */
static const char *const zones[] = {
    "America/New_York",  "Europe/Dublin",       "Australia/Lord_Howe",
    "America/Sao_Paulo", "Asia/Shanghai",       "Pacific/Chatham",
    "America/St_Johns",  "Africa/Casablanca",   "Pacific/Apia",
    "Asia/Kolkata",      "America/Los_Angeles",
};
#define NZONES (sizeof zones / sizeof zones[0])

/* glibc's offset of the zone set in TZ at instant s (seconds), in s. */
static int64_t ref_offset_s(int64_t s)
{
    time_t t = (time_t)s;
    struct tm tm;
    localtime_r(&t, &tm);
    return tm.tm_gmtoff;
}

static int64_t ref_local_ms(int64_t t_ms)
{
    int64_t s = t_ms >= 0 ? t_ms / 1000 : -((-t_ms + 999) / 1000);
    return t_ms + ref_offset_s(s) * 1000;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

/* The local label (start of a local window) holding local time `local`,
   and the next one: by timegm for months, by division otherwise. */
static void ref_labels(const ratel_rule_t *r, int64_t local, int64_t *from,
                       int64_t *to)
{
    if (r->calendar & RATEL_CALENDAR_MONTHS) {
        time_t secs = (time_t)floor_div(local, 1000);
        struct tm tm, start;
        gmtime_r(&secs, &tm);
        long mi = (tm.tm_year + 1900L) * 12 + tm.tm_mon, first = 1970L * 12;
        long m0 = first + floor_div(mi - first, r->months) * r->months;
        memset(&start, 0, sizeof start);
        start.tm_year = (int)(m0 / 12 - 1900);
        start.tm_mon = (int)(m0 % 12);
        start.tm_mday = 1;
        *from = (int64_t)timegm(&start) * 1000;
        start.tm_mon += (int)r->months;
        *to = (int64_t)timegm(&start) * 1000;
        return;
    }
    int64_t anchor = r->calendar & RATEL_CALENDAR_WEEKS ? 4 * DAY_MS : 0;
    *from = anchor + floor_div(local - anchor, r->period_ms) * r->period_ms;
    *to = *from + r->period_ms;
}

/* The first instant (ms) whose local time is at least `label`: a scan in
   quarter hours from 15 hours before (the largest offset east is 14),
   then halving inside the last quarter. */
static int64_t ref_first_reaching(int64_t label)
{
    int64_t s = floor_div(label, 1000) - 15 * 3600;
    s -= ((s % QUARTER_S) + QUARTER_S) % QUARTER_S;
    int64_t lo, hi;

    while (ref_local_ms(s * 1000) < label)
        s += QUARTER_S;
    /* Within the quarter before, the offset holds: halve down to the ms. */
    lo = (s - QUARTER_S) * 1000;
    hi = s * 1000;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ref_local_ms(mid) >= label)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* The reference window [*ws, *we) of rule r holding t (ms). */
static void ref_window(const ratel_rule_t *r, int64_t t, int64_t *ws,
                       int64_t *we)
{
    int64_t from, to;
    ref_labels(r, ref_local_ms(t), &from, &to);
    *ws = ref_first_reaching(from);
    *we = ref_first_reaching(to);
    while (*we <= t) { /* a repeated hour: t's local time fell back */
        ref_labels(r, to, &from, &to);
        *ws = *we;
        *we = ref_first_reaching(to);
    }
}

/* A random instant, half of them in the months clocks change. */
static int64_t random_instant(void)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = (int)ratel_test_between(1971, 2099) - 1900;
    if (ratel_test_rand() % 2) {
        static const int months[] = {2, 3, 8, 9, 10, 11};
        tm.tm_mon = months[ratel_test_between(0, 5)];
    } else {
        tm.tm_mon = (int)ratel_test_between(0, 11);
    }
    tm.tm_mday = (int)ratel_test_between(1, 28);
    tm.tm_hour = (int)ratel_test_between(0, 23);
    tm.tm_min = (int)ratel_test_between(0, 59);
    return (int64_t)timegm(&tm) * 1000 + ratel_test_between(0, 59999);
}

/* An instant within two days of one of the zone's offset changes between
   1970 and 2100, or within an hour of it: where the edge cases are. */
static int64_t near_change(const ratel_zone_t *z)
{
    uint32_t lo = 0, hi = z->n;
    while (lo < hi && z->at[lo] < 0)
        lo++;
    while (hi > lo && z->at[hi - 1] > 4102444800000LL)
        hi--;
    if (lo == hi)
        return random_instant();
    int64_t at = z->at[ratel_test_between(lo, hi - 1)];
    int64_t span = ratel_test_rand() % 2 ? 3600000 : 2 * DAY_MS;
    return at + ratel_test_between(-span, span);
}

static void set_tz(const char *zone)
{
    setenv("TZ", zone, 1);
    tzset();
}

static int parse_rule(const char *text, ratel_rule_t *r)
{
    char err[512];
    if (ratel_rule_parse(text, strlen(text), r, err, sizeof err) != 0) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return -1;
    }
    return 0;
}

TEST(calendar_windows_match_glibc_in_zones)
{
    /* 30m and 15m: a fall back crosses their starts (01:30 is passed, then
       the clock shows 01:00 again). */
    static const char *const periods[] = {"1d", "1w", "1mo", "3mo", "1h",
                                          "2d", "2w", "30m", "15m"};
    long n = ratel_test_iterations(60);
    char text[128];
    ratel_rule_t r;

    for (size_t z = 0; z < NZONES; z++) {
        set_tz(zones[z]);
        for (size_t p = 0; p < sizeof periods / sizeof periods[0]; p++) {
            snprintf(text, sizeof text, "5/%s:fixed,tz=%s", periods[p],
                     zones[z]);
            REQUIRE(parse_rule(text, &r) == 0);
            for (long i = 0; i < n; i++) {
                int64_t t = i % 2 ? random_instant() : near_change(r.zone), ws,
                        we, rs, re;
                ratel__window(&r, t, &ws, &we);
                ref_window(&r, t, &rs, &re);
                if (ws != rs || we != re) {
                    char m[300];
                    snprintf(m, sizeof m,
                             "%s at %lld: [%lld, %lld) against glibc's "
                             "[%lld, %lld)",
                             text, (long long)t, (long long)ws, (long long)we,
                             (long long)rs, (long long)re);
                    ratel_test_fail(__FILE__, __LINE__, m);
                    break;
                }
            }
        }
    }
    unsetenv("TZ");
    tzset();
}

TEST(calendar_offsets_east_and_west_match_glibc)
{
    /* POSIX TZ strings name offsets west of UTC: "<+0545>-05:45". */
    static const struct {
        const char *tz, *posix;
    } offs[] = {{"+08:00", "<+08>-08"},      {"-03:30", "<-0330>03:30"},
                {"+05:45", "<+0545>-05:45"}, {"+14:00", "<+14>-14"},
                {"-12:00", "<-12>12"},       {"+00:00", "UTC0"},
                {"-09:30", "<-0930>09:30"}};
    static const char *const periods[] = {"1d",   "1w", "1mo",
                                          "12mo", "6h", "90s"};
    long n = ratel_test_iterations(100);
    char text[128];
    ratel_rule_t r;

    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
        set_tz(offs[o].posix);
        for (size_t p = 0; p < sizeof periods / sizeof periods[0]; p++) {
            snprintf(text, sizeof text, "5/%s:approx,tz=%s", periods[p],
                     offs[o].tz);
            REQUIRE(parse_rule(text, &r) == 0);
            for (long i = 0; i < n; i++) {
                int64_t t = random_instant(), ws, we, rs, re;
                ratel__window(&r, t, &ws, &we);
                ref_window(&r, t, &rs, &re);
                CHECK_EQ(ws, rs);
                CHECK_EQ(we, re);
            }
        }
    }
    unsetenv("TZ");
    tzset();
}

/* ---------------------------------------------------------- decisions */

/* A trace through `text` against counters per reference window: fixed
   admits while the window's count fits; approx weighs the window before. */
static void check_trace(const char *text, const char *tz_env)
{
    test_key_t k;
    const char *rules[] = {text, NULL};
    int64_t t = random_instant(), cur_ws = -1, cur = 0, prev = 0;
    long n = ratel_test_iterations(300);

    set_tz(tz_env);
    REQUIRE(test_key_init(&k, rules) == 0);
    const ratel_rule_t *r = &k.policy.rules[0];
    int approx = r->algo == RATEL_ALGO_APPROX;
    for (long i = 0; i < n; i++) {
        ratel_decision_t d;
        int64_t ws, we, pws, pwe, cost = ratel_test_between(1, 2), used;
        int allowed;

        /* Steps from seconds to weeks: many requests in one window, and
           windows skipped. */
        t += ratel_test_between(0, 1) ? ratel_test_between(0, 3600000)
                                      : ratel_test_between(0, 8 * DAY_MS);
        ref_window(r, t, &ws, &we);
        if (ws != cur_ws) {
            ref_window(r, ws - 1, &pws, &pwe);
            prev = pws == cur_ws ? cur : 0;
            cur = 0;
            cur_ws = ws;
        }
        used = cur * 65536;
        if (approx)
            used += prev * ((we - ws - (t - ws)) * 65536 / (we - ws));
        allowed = used + cost * 65536 <= (int64_t)r->limit * 65536;
        REQUIRE(test_acquire_us(&k, t * 1000, (uint64_t)cost, 0, 0, &d) == 0);
        if (d.allowed != allowed) {
            char m[200];
            snprintf(m, sizeof m, "%s at %lld: allowed %d, expected %d", text,
                     (long long)t, d.allowed, allowed);
            ratel_test_fail(__FILE__, __LINE__, m);
            break;
        }
        if (allowed)
            cur += cost;
        if (!approx && !allowed)
            CHECK_EQ(d.retry_after_ms, we - t);
        if (!approx && allowed)
            CHECK_EQ(d.reset_after_ms, we - t);
    }
    unsetenv("TZ");
    tzset();
}

TEST(calendar_decisions_match_reference_counters)
{
    static const char *const cases[][2] = {
        {"3/1d:fixed,tz=Europe/Dublin", "Europe/Dublin"},
        {"3/1d:approx,tz=America/New_York", "America/New_York"},
        {"4/1mo:fixed,tz=Australia/Lord_Howe", "Australia/Lord_Howe"},
        {"4/1mo:approx,tz=-03:30", "<-0330>03:30"},
        {"2/1w:fixed,tz=+05:45", "<+0545>-05:45"},
        {"5/1w:approx,tz=Pacific/Apia", "Pacific/Apia"},
        {"3/2mo:fixed", "UTC0"},
        {"3/1d:fixed,tz=America/Sao_Paulo", "America/Sao_Paulo"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_trace(cases[i][0], cases[i][1]);
}

/* ------------------------------------------------------------ examples */

static int64_t utc_ms(int y, int mo, int d, int h, int mi)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    return (int64_t)timegm(&tm) * 1000;
}

TEST(calendar_shanghai_2359_and_0001_are_two_days)
{
    /* 23:59 and 00:01 in Shanghai: 15:59 and 16:01 UTC. */
    static const char *const rules[][2] = {
        {"1/1d:fixed,tz=+08:00", NULL}, {"1/1d:fixed,tz=Asia/Shanghai", NULL}};
    for (size_t i = 0; i < 2; i++) {
        test_key_t k;
        ratel_decision_t d;
        REQUIRE(test_key_init(&k, rules[i]) == 0);
        CHECK_EQ(test_take(&k, utc_ms(2026, 11, 23, 15, 59), 1, &d), 1);
        CHECK_EQ(d.reset_after_ms, 60000);
        CHECK_EQ(test_take(&k, utc_ms(2026, 11, 23, 16, 1), 1, &d), 1);
        CHECK_EQ(test_take(&k, utc_ms(2026, 11, 24, 15, 59), 1, &d), 0);
        CHECK_EQ(d.retry_after_ms, 60000);
    }
    /* Without tz the day is UTC's: the second is denied until 00:00 UTC. */
    test_key_t k;
    ratel_decision_t d;
    const char *utc[] = {"1/1d:fixed", NULL};
    REQUIRE(test_key_init(&k, utc) == 0);
    CHECK_EQ(test_take(&k, utc_ms(2026, 11, 23, 15, 59), 1, &d), 1);
    CHECK_EQ(test_take(&k, utc_ms(2026, 11, 23, 16, 1), 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 28740000);
}

TEST(calendar_days_of_23_and_25_hours)
{
    const char *rules[] = {"1/1d:fixed,tz=Europe/Dublin", NULL};
    test_key_t k;
    ratel_decision_t d;

    /* 2026-03-29: clocks go from 01:00 GMT to 02:00 IST; 2026-10-25 back. */
    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, utc_ms(2026, 3, 29, 0, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 23 * 3600000LL);
    CHECK_EQ(test_take(&k, utc_ms(2026, 10, 24, 23, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 25 * 3600000LL);
}

TEST(calendar_months_leap_days_and_month_ends)
{
    const char *rules[] = {"1/1mo:fixed", NULL};
    const char *quarters[] = {"1/3mo:fixed,tz=-05:00", NULL};
    test_key_t k;
    ratel_decision_t d;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, utc_ms(2024, 2, 1, 0, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 29 * DAY_MS); /* 2024 is a leap year */
    CHECK_EQ(test_take(&k, utc_ms(2024, 2, 29, 23, 59), 1, &d), 0);
    CHECK_EQ(d.retry_after_ms, 60000);
    CHECK_EQ(test_take(&k, utc_ms(2024, 3, 1, 0, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 31 * DAY_MS);
    CHECK_EQ(test_take(&k, utc_ms(2100, 2, 1, 0, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 28 * DAY_MS); /* 2100 is not */
    /* A clock gone back stays in the stored window: denied, not lost. */
    CHECK_EQ(test_take(&k, utc_ms(2000, 2, 1, 0, 0), 1, &d), 0);

    REQUIRE(test_key_init(&k, quarters) == 0);
    /* 2026-03-31 23:00 at -05:00 is April 1st 04:00 UTC: Q1 ends at 05:00. */
    CHECK_EQ(test_take(&k, utc_ms(2026, 4, 1, 4, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, 3600000);
    CHECK_EQ(test_take(&k, utc_ms(2026, 4, 1, 5, 0), 1, &d), 1);
    CHECK_EQ(d.reset_after_ms, (30 + 31 + 30) * DAY_MS);
}

TEST(calendar_rules_keep_state_only_under_the_same_calendar)
{
    const char *a[] = {"2/1d:fixed,tz=+08:00", NULL};
    const char *b[] = {"3/1d:fixed,tz=+08:00", NULL};
    const char *c[] = {"3/1d:fixed,tz=+09:00", NULL};
    test_key_t k;
    ratel_decision_t d;
    int64_t t = utc_ms(2026, 5, 1, 1, 0);
    uint8_t saved[TEST_STATE_CAP];
    size_t saved_len;

    REQUIRE(test_key_init(&k, a) == 0);
    CHECK_EQ(test_take(&k, t, 2, &d), 1);
    CHECK_EQ(k.len, 4 + 22 + 6); /* header, fixed record, calendar */
    memcpy(saved, k.buf, k.len);
    saved_len = k.len;
    /* Another limit, same calendar: the count of 2 is kept. */
    REQUIRE(test_key_init(&k, b) == 0);
    memcpy(k.buf, saved, saved_len);
    k.len = saved_len;
    CHECK_EQ(test_take(&k, t, 1, &d), 1);
    CHECK_EQ(test_take(&k, t, 1, &d), 0);
    /* Another zone: another window grid, a new count. */
    REQUIRE(test_key_init(&k, c) == 0);
    memcpy(k.buf, saved, saved_len);
    k.len = saved_len;
    CHECK_EQ(test_take(&k, t, 3, &d), 1);
}

TEST(calendar_hostile_records_are_corrupt)
{
    const char *rules[] = {"2/1d:fixed,tz=+08:00", NULL};
    const char *zone[] = {"2/1d:fixed,tz=Asia/Tokyo", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint8_t blob[TEST_STATE_CAP];
    size_t len;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(test_take(&k, utc_ms(2026, 5, 1, 1, 0), 1, &d), 1);
    REQUIRE(k.len == 4 + 22 + RATEL__CAL_SIZE);
    memcpy(blob, k.buf, k.len);
    len = k.len;
    uint8_t *cal = blob + 4 + 22;
    CHECK_EQ(ratel_state_validate(blob, len), 0);
    /* An offset past 14 hours, not whole minutes, unknown calendar bits, a
       zone id nobody loaded, the calendar flag on a sliding record. */
    ratel__st32(cal + 2, 15 * 3600);
    CHECK_EQ(ratel_state_validate(blob, len), RATEL_ECORRUPT);
    ratel__st32(cal + 2, 8 * 3600 + 1);
    CHECK_EQ(ratel_state_validate(blob, len), RATEL_ECORRUPT);
    ratel__st32(cal + 2, 8 * 3600);
    cal[0] |= 0x40;
    CHECK_EQ(ratel_state_validate(blob, len), RATEL_ECORRUPT);
    cal[0] = RATEL_CALENDAR_TZ | RATEL__CAL_ZONE;
    ratel__st32(cal + 2, 0x12345678);
    CHECK_EQ(ratel_state_validate(blob, len), RATEL_ECORRUPT);
    CHECK_EQ(ratel_state_validate(blob, len - 6), RATEL_ECORRUPT);
    /* A loaded zone's id is found again. */
    REQUIRE(test_key_init(&k, zone) == 0);
    CHECK_EQ(test_take(&k, utc_ms(2026, 5, 1, 1, 0), 1, &d), 1);
    CHECK_EQ(ratel_state_validate(k.buf, k.len), 0);
    ratel_rule_status_t st;
    size_t n;
    CHECK_EQ(ratel_state_inspect(k.buf, k.len, utc_ms(2026, 5, 1, 1, 0) * 1000,
                                 &st, 1, &n),
             0);
    CHECK(st.rule.zone == k.policy.rules[0].zone);
}

TEST(calendar_tzdir_and_bad_zone_files)
{
    char dir[] = "/tmp/ratel-tzdir-XXXXXX", path[256], err[512];
    ratel_rule_t r;
    FILE *fp;
    static const char *const files[][2] = {
        {"Bad/Empty", ""},
        {"Bad/Text", "Europe/Dublin\n"},
        {"Bad/Short", "TZif2\0\0\0"},
    };

    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/Bad", dir);
    REQUIRE(mkdir(path, 0700) == 0);
    setenv("TZDIR", dir, 1);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char text[128];
        snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
        REQUIRE((fp = fopen(path, "wb")) != NULL);
        fwrite(files[i][1], 1, strlen(files[i][1]) + (i == 2 ? 3 : 0), fp);
        fclose(fp);
        snprintf(text, sizeof text, "1/1d:fixed,tz=%s", files[i][0]);
        CHECK_EQ(ratel_rule_parse(text, strlen(text), &r, err, sizeof err),
                 RATEL_ERULE);
        CHECK(strstr(err, files[i][0]) != NULL);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/Bad", dir);
    rmdir(path);
    rmdir(dir);
    unsetenv("TZDIR");
}

RATEL_SUITE(calendar) = {
    {"calendar_windows_match_glibc_in_zones",
     test_calendar_windows_match_glibc_in_zones},
    {"calendar_offsets_east_and_west_match_glibc",
     test_calendar_offsets_east_and_west_match_glibc},
    {"calendar_decisions_match_reference_counters",
     test_calendar_decisions_match_reference_counters},
    {"calendar_shanghai_2359_and_0001_are_two_days",
     test_calendar_shanghai_2359_and_0001_are_two_days},
    {"calendar_days_of_23_and_25_hours", test_calendar_days_of_23_and_25_hours},
    {"calendar_months_leap_days_and_month_ends",
     test_calendar_months_leap_days_and_month_ends},
    {"calendar_rules_keep_state_only_under_the_same_calendar",
     test_calendar_rules_keep_state_only_under_the_same_calendar},
    {"calendar_hostile_records_are_corrupt",
     test_calendar_hostile_records_are_corrupt},
    {"calendar_tzdir_and_bad_zone_files",
     test_calendar_tzdir_and_bad_zone_files},
    {0, 0},
};
