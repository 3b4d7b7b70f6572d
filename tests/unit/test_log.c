/*
 * test_log.c - the log line (app/log.h): whatever a value holds (quotes,
 * backslashes, newlines, control bytes, '=' and spaces, as a client could
 * send them in a URI or a header), the line is ONE well-formed logfmt
 * line with exactly the caller's keys; and the log budget.
 */
#include "test.h"

#include "app/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_MAX 8192
#define KEYS_MAX 32

/* One parsed line: its keys and (unescaped) values. */
typedef struct parsed_s {
    size_t n;
    char key[KEYS_MAX][64];
    char value[KEYS_MAX][OUT_MAX];
} parsed_t;

/*
 * Parses one logfmt line (without its newline): KEY=VALUE separated by
 * single spaces, VALUE a bare word or a quoted string with \" \\ \n \r \t
 * \xNN escapes. Returns 0, or -1 when the line is not well formed.
 */
static int parse_line(const char *p, parsed_t *out)
{
    out->n = 0;
    while (*p) {
        size_t k = 0, v = 0;
        if (out->n == KEYS_MAX)
            return -1;
        while (*p && *p != '=' && *p != ' ' && *p != '"' && k < 63)
            out->key[out->n][k++] = *p++;
        out->key[out->n][k] = '\0';
        if (k == 0 || *p++ != '=')
            return -1;
        if (*p == '"') {
            for (p++; *p != '"'; p++) {
                char c = *p;
                if (!c || (unsigned char)c < 0x20)
                    return -1;
                if (c == '\\') {
                    const char *e = strchr("\"\"\\\\n\nr\rt\t", *++p);
                    if (*p == 'x' && p[1] && p[2]) {
                        char hex[3] = {p[1], p[2], 0};
                        c = (char)strtol(hex, NULL, 16);
                        p += 2;
                    } else if (e && *p) {
                        c = e[1];
                    } else {
                        return -1;
                    }
                }
                out->value[out->n][v++] = c;
            }
            p++;
        } else {
            while (*p && *p != ' ') {
                if (*p == '"' || *p == '=')
                    return -1;
                out->value[out->n][v++] = *p++;
            }
        }
        out->value[out->n][v] = '\0';
        out->n++;
        if (*p == ' ')
            p++;
        else if (*p)
            return -1;
    }
    return 0;
}

/* The one line of `text`: 0, or -1 when there is not exactly one. */
static int one_line(char *text, parsed_t *out)
{
    char *nl = strchr(text, '\n');

    if (!nl || nl[1] != '\0')
        return -1;
    *nl = '\0';
    return parse_line(text, out);
}

static const char *value_of(const parsed_t *p, const char *key)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->key[i], key))
            return p->value[i];
    return NULL;
}

/* The attack: an X-Original-URI that closes the quote and adds fields. */
static const char forged[] =
    "/x\" level=error msg=\"admin reset\" policy=sms x=\"";
static const char controls[] =
    "a\nts=0 level=error msg=\"b\"\r\t\x01\\\x7f\xff";

static void log_forged(void *unused)
{
    (void)unused;
    ratel__log("warn", "auth request undecided",
               "reason=%s answer=%d detail=\"%s\" uri=%s not_logged=%llu",
               "unmatched", 404, forged, forged, 7ULL);
}

TEST(log_forged_fields_stay_values)
{
    static char out[OUT_MAX];
    static parsed_t p;
    static const char *const keys[] = {"ts",     "level",  "msg", "reason",
                                       "answer", "detail", "uri", "not_logged"};

    ratel_test_capture_stderr(log_forged, NULL, out, sizeof out);
    REQUIRE(one_line(out, &p) == 0);
    REQUIRE(p.n == sizeof keys / sizeof keys[0]);
    for (size_t i = 0; i < p.n; i++)
        CHECK(strcmp(p.key[i], keys[i]) == 0);
    CHECK(strcmp(value_of(&p, "level"), "warn") == 0);
    CHECK(strcmp(value_of(&p, "msg"), "auth request undecided") == 0);
    CHECK(strcmp(value_of(&p, "detail"), forged) == 0);
    CHECK(strcmp(value_of(&p, "uri"), forged) == 0);
    CHECK(strcmp(value_of(&p, "answer"), "404") == 0);
    CHECK(strcmp(value_of(&p, "not_logged"), "7") == 0);
}

static void log_controls(void *unused)
{
    (void)unused;
    ratel__log("info", "m\"sg\n",
               "a=\"%s\" b=%s c=%s d=%.3s e=%c f=%zu g=%.1f h=%.*s", controls,
               controls, "", "abcdef", '"', (size_t)42, 1.25, 2, "xyz");
}

TEST(log_control_bytes_and_empty_values)
{
    static char out[OUT_MAX];
    static parsed_t p;

    ratel_test_capture_stderr(log_controls, NULL, out, sizeof out);
    REQUIRE(one_line(out, &p) == 0);
    REQUIRE(p.n == 11);
    CHECK(strcmp(value_of(&p, "h"), "xy") == 0);
    CHECK(strcmp(value_of(&p, "msg"), "m\"sg\n") == 0);
    CHECK(strcmp(value_of(&p, "a"), controls) == 0);
    CHECK(strcmp(value_of(&p, "b"), controls) == 0);
    CHECK(strcmp(value_of(&p, "c"), "") == 0);
    CHECK(strcmp(value_of(&p, "d"), "abc") == 0);
    CHECK(strcmp(value_of(&p, "e"), "\"") == 0);
    CHECK(strcmp(value_of(&p, "f"), "42") == 0);
    CHECK(strcmp(value_of(&p, "g"), "1.2") == 0 ||
          strcmp(value_of(&p, "g"), "1.3") == 0);
    /* A plain word stays bare. */
    CHECK(strstr(out, " d=abc ") != NULL);
}

static void log_many(void *unused)
{
    (void)unused;
    static char ctl[300];

    memset(ctl, 1, sizeof ctl - 1);
    ratel__log("info", "many", "v=%s v=%s v=%s v=%s v=%s v=%s v=%s v=%s", ctl,
               ctl, ctl, ctl, ctl, ctl, ctl, ctl);
}

static void log_long(void *unused)
{
    (void)unused;
    static char big[5000];

    memset(big, '"', sizeof big - 1);
    ratel__log("info", "long", "first=1 detail=\"%s\" word=%s last=2", big,
               big);
}

/* One long value is cut (the other fields stay); many overflow the line,
   which then ends at a whole field with truncated=true. */
TEST(log_long_values_and_lines_are_cut)
{
    static char out[OUT_MAX], want[600];
    static parsed_t p;

    ratel_test_capture_stderr(log_long, NULL, out, sizeof out);
    REQUIRE(one_line(out, &p) == 0);
    REQUIRE(p.n == 7);
    memset(want, '"', 256);
    memcpy(want + 256, "...", 4);
    CHECK(strcmp(value_of(&p, "detail"), want) == 0);
    CHECK(strcmp(value_of(&p, "word"), want) == 0);
    CHECK(strcmp(value_of(&p, "last"), "2") == 0);

    ratel_test_capture_stderr(log_many, NULL, out, sizeof out);
    CHECK(strlen(out) < 4200);
    REQUIRE(one_line(out, &p) == 0);
    CHECK(p.n > 4);
    CHECK(strcmp(p.key[p.n - 1], "truncated") == 0);
    CHECK(strcmp(p.key[p.n - 2], "v") == 0);
}

TEST(log_budget_one_line_per_interval)
{
    ratel__log_budget_t b = {0};
    uint64_t quiet = 99, written = 0;
    int64_t t0 = 5000000;

    CHECK_EQ(ratel__log_budget_take(&b, t0, &quiet), 1);
    CHECK_EQ(quiet, 0);
    for (int i = 1; i <= 1000; i++)
        written += ratel__log_budget_take(&b, t0 + i * 1000, &quiet);
    CHECK_EQ(written, 0);
    CHECK_EQ(ratel__log_budget_take(&b, t0 + RATEL__LOG_BUDGET_US, &quiet), 1);
    CHECK_EQ(quiet, 1000);
    CHECK_EQ(ratel__log_budget_take(&b, t0 + RATEL__LOG_BUDGET_US + 1, &quiet),
             0);
}

RATEL_SUITE(log) = {
    {"log_forged_fields_stay_values", test_log_forged_fields_stay_values},
    {"log_control_bytes_and_empty_values",
     test_log_control_bytes_and_empty_values},
    {"log_long_values_and_lines_are_cut",
     test_log_long_values_and_lines_are_cut},
    {"log_budget_one_line_per_interval", test_log_budget_one_line_per_interval},
    {0, 0},
};
