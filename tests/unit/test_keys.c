/*
 * test_keys.c - key sources (server/app/keys.c): the grammar, and the
 * spellings of one identity a client can send. Each spelling a backend
 * reads as the limited number must either reach the number's bucket or be
 * refused; none may make a bucket of its own.
 */
#include "test.h"

#include "app/keys.h"

#include <stdio.h>
#include <string.h>

/* A view of a request with one query, body and Content-Type. */
typedef struct {
    const char *query, *body;
    ratel__key_body_t kind;
} request_t;

static ratel__key_view_t view_of(const request_t *r)
{
    ratel__key_view_t v;

    memset(&v, 0, sizeof v);
    if (r->query)
        v.query = (ratel__key_str_t){r->query, strlen(r->query)};
    v.body = r->kind;
    if (r->body)
        v.form = (ratel__key_str_t){r->body, strlen(r->body)};
    v.client = "203.0.113.9";
    return v;
}

/* The key `text` builds for policy "sms" from request r, into buf. */
static long key_for(const char *text, const request_t *r, char *buf, size_t len)
{
    ratel__key_t key;
    ratel__key_view_t v = view_of(r);
    char err[256];

    memset(&key, 0, sizeof key);
    if (ratel__key_parse(text, strlen(text), &key, err, sizeof err)) {
        ratel_test_fail(__FILE__, __LINE__, err);
        return -9;
    }
    return ratel__key_build(&key, "sms", &v, buf, len, NULL);
}

TEST(keys_grammar_round_trip)
{
    static const char *const good[] = {
        "ip",
        "global",
        "query:telephone",
        "form:phone",
        "header:X-User-Id",
        "cookie:sid",
        "json:user",
        "query:telephone|phone",
        "query:telephone|phone:CN",
        "form:phone|phone:US|range:2",
        "json:phone|phone:CN|country",
    };
    char err[256], out[256];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ratel__key_part_t part;
        int rc = ratel__key_part_parse(good[i], strlen(good[i]), &part, err,
                                       sizeof err);
        CHECK_EQ(rc, 0);
        ratel__key_part_format(&part, out, sizeof out);
        if (strcmp(out, good[i]) != 0)
            ratel_test_fail(__FILE__, __LINE__, good[i]);
    }
}

TEST(keys_grammar_errors_say_what)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"query", "query: needs a name"},
        {"ip:x", "ip takes no name"},
        {"queri:phone", "unknown key source"},
        {"query:a&b", "not a valid query parameter name"},
        {"header:X User", "not a valid header name"},
        {"query:p|phone:XX", "not a region libphonenumber knows"},
        {"query:p|phone:cn", "two capital letters"},
        {"query:p|range:2", "follows |phone"},
        {"query:p|phone|range:9", "1 to 6 digits"},
        {"query:p|phone|country:1", "takes no argument"},
        {"query:p|lower", "unknown transform"},
        {"ip|phone", "is not a phone number"},
        {"query:p|phone|phone", "comes once"},
        {"ip,ip", "given twice"},
        {"global,ip", "cannot be combined"},
        {"", "an empty key"},
        {"ip,", "unknown key source"},
    };
    char err[256];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel__key_t key;
        int rc = ratel__key_parse(bad[i].text, strlen(bad[i].text), &key, err,
                                  sizeof err);
        CHECK_EQ(rc, -1);
        if (!strstr(err, bad[i].want)) {
            char what[400];
            snprintf(what, sizeof what, "%s: got \"%s\"", bad[i].text, err);
            ratel_test_fail(__FILE__, __LINE__, what);
        }
    }
}

/*
 * Every spelling of the number attackers send: each either reads as the
 * number's one key or is refused (-1) or missing (0); none is a key of
 * its own.
 */
TEST(keys_spellings_reach_the_number_or_are_refused)
{
    static const struct {
        request_t r;
        long want; /* 1: the number's key; 0 missing; -1 refused */
    } cases[] = {
        {{"phone=13900000001", NULL, 0}, 1},
        {{"a=1&phone=13900000001&b=2", NULL, 0}, 1},
        {{"phone=1390000000%31", NULL, 0}, 1},
        {{"phone=%2B86%20139%200000%200001", NULL, 0}, 1},
        {{"phone=+86+139+0000+0001", NULL, 0}, 1},
        {{"phone=%2B8613900000001", NULL, 0}, 1},
        {{"phone=008613900000001", NULL, 0}, 1},
        {{"phone=139-0000-0001", NULL, 0}, 1},
        {{"phone=%2B86013900000001", NULL, 0}, 1},
        {{"phone=+13900000001", NULL, 0}, 1}, /* '+' is a space */
        {{"%70hone=13900000001", NULL, 0}, 1},
        {{"phone=13900000001#1", NULL, 0}, -1},
        {{"phone=13900000001%231", NULL, 0}, -1},
        {{"phone=&phone=13900000001", NULL, 0}, -1},
        {{"phone=13900000001&phone=", NULL, 0}, -1},
        {{"phone=RANDOM&phone=13900000001", NULL, 0}, -1},
        /* Alone, another case or NAME[] names another parameter: the
           number is missing (refused too, 400 missing-key). */
        {{"Phone=13900000001", NULL, 0}, 0},
        {{"PHONE=13900000001&phone=13900000001", NULL, 0}, -1},
        {{"phone[]=13900000001", NULL, 0}, 0},
        {{"phone=1&phone[0]=13900000001", NULL, 0}, -1},
        {{"x=1;phone=13900000002&phone=13900000001", NULL, 0}, -1},
        {{"phone=1390000000%2531", NULL, 0}, -1}, /* decoded twice: 1 */
        {{"phone=1390000000%3", NULL, 0}, -1},
        {{"phone=13900000001%00", NULL, 0}, -1},
        {{"phone=13900000001%0a", NULL, 0}, -1},
        {{"phone=12345", NULL, 0}, -1},
        {{"phone=1900000000000000", NULL, 0}, -1},
        {{"phone=abc", NULL, 0}, -1},
        {{"phone=", NULL, 0}, 0},
        {{"phone=%20", NULL, 0}, 0},
        {{"x=1", NULL, 0}, 0},
        {{NULL, NULL, 0}, 0},
        /* A form body: the backend may read its phone instead. */
        {{NULL, "phone=13900000001", RATEL__KEY_BODY_URLENCODED}, -1},
        {{"phone=13900000001", "x=1", RATEL__KEY_BODY_URLENCODED}, -1},
        {{"phone=13900000001", NULL, RATEL__KEY_BODY_MULTIPART}, -1},
    };
    char want[RATEL__KEY_MAX + 1], got[RATEL__KEY_MAX + 1];
    request_t first = {"phone=13900000001", NULL, 0};

    CHECK(key_for("query:phone|phone:CN", &first, want, sizeof want) > 0);
    CHECK(strcmp(want, "sms:+8613900000001") == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long n = key_for("query:phone|phone:CN", &cases[i].r, got, sizeof got);
        long kind = n > 0 ? 1 : n;
        char what[RATEL__KEY_MAX + 400];
        snprintf(what, sizeof what, "case %zu (%s): %ld, key \"%s\"", i,
                 cases[i].r.query ? cases[i].r.query : cases[i].r.body, n, got);
        if (kind != cases[i].want || (n > 0 && strcmp(got, want) != 0))
            ratel_test_fail(__FILE__, __LINE__, what);
    }
}

/* form: reads an urlencoded body as query: reads a query, and refuses a
   field the query has too (backends merge them). */
TEST(keys_form_body)
{
    static const struct {
        request_t r;
        const char *want; /* NULL: refused; "" missing */
    } cases[] = {
        {{NULL, "phone=13900000001", RATEL__KEY_BODY_URLENCODED},
         "sms:13900000001"},
        {{"a=1", "b=2&phone=139%2000", RATEL__KEY_BODY_URLENCODED},
         "sms:139 00"},
        {{"phone=1", "phone=13900000001", RATEL__KEY_BODY_URLENCODED}, NULL},
        {{NULL, "phone=1&PHONE=2", RATEL__KEY_BODY_URLENCODED}, NULL},
        {{NULL, "phone=1", RATEL__KEY_BODY_MULTIPART}, NULL},
        {{NULL, "x=1", RATEL__KEY_BODY_URLENCODED}, ""},
        {{NULL, NULL, 0}, ""},
        {{NULL, "phone=a#b", RATEL__KEY_BODY_URLENCODED}, "sms:a#b"},
    };
    char got[RATEL__KEY_MAX + 1];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long n = key_for("form:phone", &cases[i].r, got, sizeof got);
        int ok = cases[i].want == NULL   ? n == -1
                 : cases[i].want[0] == 0 ? n == 0
                                         : n > 0 && !strcmp(got, cases[i].want);
        if (!ok) {
            char what[RATEL__KEY_MAX + 100];
            snprintf(what, sizeof what, "case %zu: %ld \"%s\"", i, n, got);
            ratel_test_fail(__FILE__, __LINE__, what);
        }
    }
}

/* The derived keys of SMS-pumping defence: a walk across a range of
   numbers shares the range's key and the country's. */
TEST(keys_range_and_country)
{
    char a[64], b[64];
    request_t one = {"phone=13500000012", NULL, 0};
    request_t two = {"phone=%2B86%20135%200000%200099", NULL, 0};
    request_t far = {"phone=13500000112", NULL, 0};
    request_t us = {"phone=%2B12015550123", NULL, 0};

    CHECK(key_for("query:phone|phone:CN|range:2", &one, a, sizeof a) > 0);
    CHECK(strcmp(a, "sms:+86135000000xx") == 0);
    CHECK(key_for("query:phone|phone:CN|range:2", &two, b, sizeof b) > 0);
    CHECK(strcmp(a, b) == 0);
    CHECK(key_for("query:phone|phone:CN|range:2", &far, b, sizeof b) > 0);
    CHECK(strcmp(b, "sms:+86135000001xx") == 0);
    CHECK(key_for("query:phone|phone:CN|country", &one, a, sizeof a) > 0);
    CHECK(strcmp(a, "sms:CN") == 0);
    CHECK(key_for("query:phone|phone:CN|country", &us, a, sizeof a) > 0);
    CHECK(strcmp(a, "sms:US") == 0);
    CHECK(key_for("query:phone|phone:CN,ip", &one, a, sizeof a) > 0);
    CHECK(strcmp(a, "sms:+8613500000012|203.0.113.9") == 0);
}

/* on_missing: reject (0), shared ("-"), allow (0: the host passes). */
TEST(keys_missing)
{
    ratel__key_t key;
    ratel__key_view_t v;
    request_t r = {"x=1", NULL, 0};
    char buf[64], err[128];

    memset(&key, 0, sizeof key); /* ratel__key_parse leaves on_missing */
    v = view_of(&r);
    CHECK_EQ(ratel__key_parse("query:phone,ip", 14, &key, err, sizeof err), 0);
    CHECK_EQ(ratel__key_build(&key, "p", &v, buf, sizeof buf, NULL), 0);
    key.on_missing = RATEL__KEY_MISSING_ALLOW;
    CHECK_EQ(ratel__key_build(&key, "p", &v, buf, sizeof buf, NULL), 0);
    key.on_missing = RATEL__KEY_MISSING_SHARED;
    CHECK(ratel__key_build(&key, "p", &v, buf, sizeof buf, NULL) > 0);
    CHECK(strcmp(buf, "p:-|203.0.113.9") == 0);
}

/* The limit is the value's: 1,024 bytes after "POLICY:", whatever the
   policy's name. */
TEST(keys_limit_counts_the_value_alone)
{
    static const char policy[] = "a-policy-name-of-forty-bytes-0123456789";
    ratel__key_t key;
    ratel__key_view_t v;
    request_t r = {NULL, NULL, 0};
    char query[RATEL__KEY_MAX + 16], buf[RATEL__KEY_MAX + 64], err[128];
    const char *why = NULL;

    memset(&key, 0, sizeof key);
    CHECK_EQ(ratel__key_parse("query:u", 7, &key, err, sizeof err), 0);
    memcpy(query, "u=", 2);
    memset(query + 2, 'x', RATEL__KEY_MAX + 1);
    query[2 + RATEL__KEY_MAX] = '\0';
    r.query = query;
    v = view_of(&r);
    CHECK_EQ(ratel__key_build(&key, policy, &v, buf, sizeof buf, &why),
             (long)(sizeof policy + RATEL__KEY_MAX));
    query[2 + RATEL__KEY_MAX] = 'x';
    query[3 + RATEL__KEY_MAX] = '\0';
    v = view_of(&r);
    CHECK_EQ(ratel__key_build(&key, policy, &v, buf, sizeof buf, &why), -1);
    CHECK(why != NULL);
}

RATEL_SUITE(keys) = {
    {"keys_limit_counts_the_value_alone",
     test_keys_limit_counts_the_value_alone},
    {"keys_grammar_round_trip", test_keys_grammar_round_trip},
    {"keys_grammar_errors_say_what", test_keys_grammar_errors_say_what},
    {"keys_spellings_reach_the_number_or_are_refused",
     test_keys_spellings_reach_the_number_or_are_refused},
    {"keys_form_body", test_keys_form_body},
    {"keys_range_and_country", test_keys_range_and_country},
    {"keys_missing", test_keys_missing},
    {0, 0},
};
