/*
 * test_rule.c - the rule grammar: parse, format, explain, policy checks.
 */
#include "core/internal.h"
#include "core_helpers.h"

#include <stdio.h>
#include <string.h>

static int parse(const char *text, ratel_rule_t *r, char *err, size_t errlen)
{
    return ratel_rule_parse(text, strlen(text), r, err, errlen);
}

TEST(rule_parse_valid)
{
    static const struct {
        const char *text;
        ratel_algo_t algo;
        uint32_t limit, period_ms, burst;
        const char *canonical;
    } cases[] = {
        {"10/1h", RATEL_ALGO_SLIDING, 10, 3600000, 0, "10/1h"},
        {"20/m", RATEL_ALGO_SLIDING, 20, 60000, 0, "20/1m"},
        {"1/60s", RATEL_ALGO_SLIDING, 1, 60000, 0, "1/1m"},
        {"100/1s:gcra,burst=200", RATEL_ALGO_GCRA, 100, 1000, 200,
         "100/1s:gcra,burst=200"},
        {"3/s:gcra", RATEL_ALGO_GCRA, 3, 1000, 3, "3/1s:gcra"},
        {"1000/1d:fixed", RATEL_ALGO_FIXED, 1000, 86400000, 0, "1000/1d:fixed"},
        {"5/90s:approx", RATEL_ALGO_APPROX, 5, 90000, 0, "5/90s:approx"},
        {"7/1500ms", RATEL_ALGO_SLIDING, 7, 1500, 0, "7/1500ms"},
        {"1/1ms", RATEL_ALGO_SLIDING, 1, 1, 0, "1/1ms"},
        {"1000000000/30d", RATEL_ALGO_SLIDING, 1000000000, 2592000000u, 0,
         "1000000000/30d"},
        {"2/1s:sliding", RATEL_ALGO_SLIDING, 2, 1000, 0, "2/1s"},
        {"1/30d:gcra", RATEL_ALGO_GCRA, 1, 2592000000u, 1, "1/30d:gcra"},
        {"1000000000/1ms:gcra", RATEL_ALGO_GCRA, 1000000000, 1, 1000000000,
         "1000000000/1ms:gcra"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_rule_t r;
        char err[256] = "", text[64];
        int rc = parse(cases[i].text, &r, err, sizeof err);
        CHECK_EQ(rc, 0);
        if (rc) {
            ratel_test_fail(__FILE__, __LINE__, err);
            continue;
        }
        CHECK_EQ(r.algo, cases[i].algo);
        CHECK_EQ(r.limit, cases[i].limit);
        CHECK_EQ(r.period_ms, cases[i].period_ms);
        CHECK_EQ(r.burst, cases[i].burst);
        ratel_rule_format(&r, text, sizeof text);
        CHECK(strcmp(text, cases[i].canonical) == 0);
    }
}

TEST(rule_parse_spelt_out_unit_names_the_units)
{
    static const char *const words[][2] = {{"20/minute", "\"minute\""},
                                           {"1/sec", "\"sec\""},
                                           {"5/1hour", "\"hour\""},
                                           {"10/1msx", "\"msx\""}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        ratel_rule_t r;
        char err[512] = "";
        CHECK_EQ(parse(words[i][0], &r, err, sizeof err), RATEL_ERULE);
        CHECK(strstr(err, "unknown unit ") != NULL);
        CHECK(strstr(err, words[i][1]) != NULL);
        CHECK(strstr(err, "ms, s, m, h, d, w and mo") != NULL);
    }
}

TEST(rule_parse_malformed_names_rule_and_grammar)
{
    static const char *const bad[] = {
        "0/1s",
        "10/0s",
        "10/1x",
        "-1/1s",
        "99999999999999999999/1s",
        "10/1s:nope",
        "10/1s,burst=0",
        "",
        "10/1sx",
        "10/1s ",
        " 10/1s",
        "10",
        "10/",
        "/1s",
        "10/1s:",
        "10/1s,burst=5",
        "10/1s:gcra,burst=",
        "10/1s:gcra,burst=5,burst=6",
        "10/1s:gcra,rate=5",
        "10/31d",
        "1000000001/1s",
        "10/1s:gcra,burst=1000000001",
        "1/30d:gcra,burst=200",
        "10/1.5s",
        "10/1S",
        "10/1s:GCRA",
        "1e3/1s",
        "10/99999999999999999ms",
        "10/1s:gcra,burst=99999999999999999999",
        /* calendars: hostile zones and offsets, months and weeks misused */
        "10/1d:fixed,tz=",
        "10/1d:fixed,tz=+",
        "10/1d:fixed,tz=+8",
        "10/1d:fixed,tz=+08:0",
        "10/1d:fixed,tz=+08:60",
        "10/1d:fixed,tz=+14:01",
        "10/1d:fixed,tz=-15:00",
        "10/1d:fixed,tz=08:00",
        "10/1d:fixed,tz=utc",
        "10/1d:fixed,tz=Mars/Olympus_Mons",
        "10/1d:fixed,tz=../../../etc/passwd",
        "10/1d:fixed,tz=/etc/passwd",
        "10/1d:fixed,tz=Europe/../../etc/passwd",
        "10/1d:fixed,tz=Asia",
        "10/1d:fixed,tz=right/UTC",
        "10/1d:fixed,tz=+08:00,tz=+08:00",
        "10/1d,tz=+08:00",
        "10/1d:gcra,tz=+08:00",
        "10/1mo",
        "10/1mo:gcra",
        "10/0mo:fixed",
        "10/13mo:fixed",
        "10/5w:fixed",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel_rule_t r;
        char err[512] = "", quoted[128];
        int rc = parse(bad[i], &r, err, sizeof err);
        CHECK_EQ(rc, RATEL_ERULE);
        snprintf(quoted, sizeof quoted, "rule \"%s\"", bad[i]);
        if (strstr(err, quoted) == NULL || !strstr(err, "LIMIT/PERIOD")) {
            char m[700];
            snprintf(m, sizeof m, "message for \"%s\" is \"%s\"", bad[i], err);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

TEST(rule_parse_hostile_bytes_are_escaped)
{
    char text[300], err[512];
    ratel_rule_t r;
    memset(text, 'A', sizeof text);
    text[0] = '\n';
    text[1] = '\x01';
    CHECK_EQ(ratel_rule_parse(text, sizeof text, &r, err, sizeof err),
             RATEL_ERULE);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(strstr(err, "\\x0a\\x01") != NULL);
    CHECK(strlen(err) < 400);
    /* The parts a message quotes on their own are escaped too: an unknown
       algorithm, trailing junk (the module's fuzz target found these). */
    {
        static const char *const bad[] = {"10/1s:\r\ngcra", "10/1s\x07\n"};
        for (size_t i = 0; i < 2; i++) {
            CHECK_EQ(
                ratel_rule_parse(bad[i], strlen(bad[i]), &r, err, sizeof err),
                RATEL_ERULE);
            for (const char *p = err; *p; p++)
                CHECK((unsigned char)*p >= 0x20);
        }
    }
    /* No NUL terminator needed, and no crash with a NULL errbuf. */
    CHECK_EQ(ratel_rule_parse("10/1s", 4, &r, NULL, 0), RATEL_ERULE);
    CHECK_EQ(ratel_rule_parse("10/1s", 5, &r, NULL, 0), 0);
}

/* The same rule, field by field (padding is not compared). */
static int same_rule(const ratel_rule_t *a, const ratel_rule_t *b)
{
    return a->algo == b->algo && a->limit == b->limit &&
           a->period_ms == b->period_ms && a->burst == b->burst &&
           a->calendar == b->calendar && a->months == b->months &&
           a->tz_offset_s == b->tz_offset_s && a->zone == b->zone;
}

/* A random calendar for a fixed or approx rule: months, weeks or a
   duration, with or without an offset. */
static void random_calendar(ratel_rule_t *r)
{
    int64_t kind = ratel_test_between(0, 2);
    if (kind == 0) {
        r->calendar = RATEL_CALENDAR_MONTHS;
        r->months = (uint32_t)ratel_test_between(1, 12);
        r->period_ms = 0;
    } else if (kind == 1) {
        r->calendar = RATEL_CALENDAR_WEEKS;
        r->period_ms = (uint32_t)ratel_test_between(1, 4) * 604800000u;
    }
    if (ratel_test_rand() % 2) {
        r->calendar |= RATEL_CALENDAR_TZ;
        r->tz_offset_s = (int32_t)ratel_test_between(-14 * 60, 14 * 60) * 60;
    }
}

TEST(rule_format_round_trips_random_rules)
{
    long n = ratel_test_iterations(20000);
    for (long i = 0; i < n; i++) {
        ratel_rule_t r, back;
        char text[64], err[256];
        static const uint32_t unit[] = {1, 1000, 60000, 3600000, 86400000};
        memset(&r, 0, sizeof r);
        r.algo = (ratel_algo_t)ratel_test_between(0, 3);
        r.limit = (uint32_t)ratel_test_between(
            1, ratel_test_rand() % 2 ? 100 : RATEL_LIMIT_MAX);
        r.period_ms = (uint32_t)ratel_test_between(1, 30) *
                      unit[ratel_test_between(0, 4)];
        if (r.period_ms > RATEL_PERIOD_MAX_MS)
            r.period_ms = RATEL_PERIOD_MAX_MS;
        r.burst = r.algo == RATEL_ALGO_GCRA
                      ? (uint32_t)ratel_test_between(1, r.limit)
                      : 0;
        if ((r.algo == RATEL_ALGO_FIXED || r.algo == RATEL_ALGO_APPROX) &&
            ratel_test_rand() % 2)
            random_calendar(&r);
        ratel_rule_format(&r, text, sizeof text);
        REQUIRE(ratel_rule_parse(text, strlen(text), &back, err, sizeof err) ==
                0);
        if (!same_rule(&r, &back))
            ratel_test_fail(__FILE__, __LINE__, text);
    }
}

TEST(rule_explain_in_words)
{
    static const struct {
        const char *rule, *words;
    } cases[] = {
        {"10/1h", "at most 10 requests in any 1-hour window"},
        {"1/60s", "at most 1 request in any 1-minute window"},
        {"1000/1d:fixed", "at most 1000 requests per 1-day window, resetting "
                          "at midnight, 00:00 UTC (up to 2000 across a "
                          "window boundary)"},
        {"10/1d:fixed,tz=+08:00",
         "at most 10 requests per 1-day window, resetting at midnight, 00:00 "
         "UTC+08:00 (up to 20 across a window boundary)"},
        {"1000/1mo:fixed,tz=-03:30",
         "at most 1000 requests per 1-month window, resetting on the 1st of "
         "every month at 00:00 UTC-03:30 (up to 2000 across a window "
         "boundary)"},
        {"5/3mo:approx",
         "about 5 requests in any 3-month window, estimated from the counts "
         "of two fixed windows resetting on the 1st of January, April, July "
         "and October at 00:00 UTC"},
        {"7/1w:fixed,tz=Asia/Shanghai",
         "at most 7 requests per 1-week window, resetting on Mondays at 00:00 "
         "Asia/Shanghai time (up to 14 across a window boundary)"},
        {"5/1h:fixed,tz=+05:30",
         "at most 5 requests per 1-hour window, resetting at 00:00 UTC+05:30 "
         "and every hour after it (up to 10 across a window boundary)"},
        {"100/1s:gcra,burst=200",
         "100 requests per second at a steady rate (one every 10 "
         "milliseconds), bursts of up to 200"},
        {"1/1h:gcra", "1 request per hour at a steady rate (one every 1 "
                      "hour), bursts of up to 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_rule_t r;
        char words[256];
        REQUIRE(parse(cases[i].rule, &r, NULL, 0) == 0);
        ratel_rule_explain(&r, words, sizeof words);
        if (strcmp(words, cases[i].words) != 0)
            ratel_test_fail(__FILE__, __LINE__, words);
    }
}

TEST(rule_policy_checks)
{
    ratel_policy_t p;
    char err[256];
    const char *dup[] = {"10/1m", "1/1s", "10/60s"};
    const char *nine[] = {"1/1s", "2/1s", "3/1s", "4/1s", "5/1s",
                          "6/1s", "7/1s", "8/1s", "9/1s"};
    const char *bad[] = {"1/1m", "1/1q"};
    ratel_rule_t r = {
        .algo = RATEL_ALGO_FIXED, .limit = 10, .period_ms = 1000, .burst = 7};

    CHECK_EQ(ratel_policy_parse(&p, dup, 3, err, sizeof err), RATEL_EINVAL);
    CHECK(strstr(err, "rule 3") && strstr(err, "repeats rule 1"));
    CHECK_EQ(ratel_policy_parse(&p, nine, 9, err, sizeof err), RATEL_ETOOMANY);
    CHECK_EQ(ratel_policy_parse(&p, nine, 8, err, sizeof err), 0);
    CHECK_EQ(p.nrules, 8);
    CHECK_EQ(ratel_policy_parse(&p, bad, 2, err, sizeof err), RATEL_ERULE);
    CHECK(strstr(err, "\"1/1q\"") != NULL);
    CHECK_EQ(ratel_policy_parse(&p, bad, 0, err, sizeof err), RATEL_EINVAL);
    /* A hand-made rule with burst on a non-gcra algorithm is refused. */
    CHECK_EQ(ratel_policy_init(&p, &r, 1, err, sizeof err), RATEL_ERULE);
    CHECK(strstr(err, "burst applies to gcra") != NULL);
}

TEST(rule_error_names)
{
    CHECK(strcmp(ratel_err_name(RATEL_ERULE), "ERULE") == 0);
    CHECK(strcmp(ratel_strerror(RATEL_ECOST),
                 "cost is larger than a rule can ever admit") == 0);
    CHECK(strcmp(ratel_strerror(12345), "unknown error") == 0);
    CHECK(strcmp(ratel_err_name(0), "OK") == 0);
    CHECK(strcmp(ratel_algo_name(RATEL_ALGO_APPROX), "approx") == 0);
}

/*
 * The facts of RATEL_ALGO_MAP agree with each algorithm's own entry: the
 * lease operation exactly where RATEL_ALGO_LEASES is, a sentence for
 * `ratel explain` everywhere, one default, and messages that name the
 * algorithms from the facts.
 */
TEST(rule_algo_facts_agree_with_entries)
{
    int defaults = 0;
    char err[300];
    ratel_rule_t r;

    for (int a = 0; a < RATEL_ALGOS; a++) {
        const ratel__algo_t *e = ratel__algos[a];
        unsigned facts = ratel_algo_facts((ratel_algo_t)a);
        CHECK(((facts & RATEL_ALGO_LEASES) != 0) == (e->lease != NULL));
        CHECK(e->explain != NULL);
        CHECK(ratel_algo_fields((ratel_algo_t)a) != 0);
        defaults += (facts & RATEL_ALGO_DEFAULT) != 0;
    }
    CHECK(defaults == 1);
    CHECK(ratel_algo_facts((ratel_algo_t)RATEL_ALGOS) == 0);
    CHECK(ratel_algo_fields((ratel_algo_t)RATEL_ALGOS) == 0);
    CHECK(ratel_algo_facts(RATEL_ALGO_GCRA) & RATEL_ALGO_RESERVES);
    CHECK(!(ratel_algo_facts(RATEL_ALGO_SLIDING) & RATEL_ALGO_RESERVES));
    CHECK(ratel_algo_fields(RATEL_ALGO_SLIDING) ==
          (RATEL_STATUS_RUNS | RATEL_STATUS_GRANULARITY));
    CHECK(parse("1/1mo", &r, err, sizeof err) == RATEL_ERULE);
    CHECK(strstr(err, "use :fixed or :approx (e.g. 1000/1mo:fixed)") != NULL);
    CHECK(parse("1/1d,tz=+08:00", &r, err, sizeof err) == RATEL_ERULE);
    CHECK(strstr(err, "tz applies to the window algorithms, :fixed and "
                      ":approx") != NULL);
    CHECK(parse("1/1d,burst=2", &r, err, sizeof err) == RATEL_ERULE);
    CHECK(strstr(err, "burst applies to gcra rules only (add :gcra)") != NULL);
    CHECK(parse("300/1m:concurrent", &r, err, sizeof err) == RATEL_ERULE);
    CHECK(strstr(err, "a concurrent rule holds at most 256 leases at once "
                      "(its state keeps each one)") != NULL);
}

RATEL_SUITE(rule) = {
    {"rule_parse_valid", test_rule_parse_valid},
    {"rule_parse_spelt_out_unit_names_the_units",
     test_rule_parse_spelt_out_unit_names_the_units},
    {"rule_parse_malformed_names_rule_and_grammar",
     test_rule_parse_malformed_names_rule_and_grammar},
    {"rule_parse_hostile_bytes_are_escaped",
     test_rule_parse_hostile_bytes_are_escaped},
    {"rule_format_round_trips_random_rules",
     test_rule_format_round_trips_random_rules},
    {"rule_explain_in_words", test_rule_explain_in_words},
    {"rule_policy_checks", test_rule_policy_checks},
    {"rule_error_names", test_rule_error_names},
    {"rule_algo_facts_agree_with_entries",
     test_rule_algo_facts_agree_with_entries},
    {0, 0},
};
