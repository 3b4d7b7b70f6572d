/*
 * test_json.c - server/app/json.c: strict JSON bodies (every refusal with
 * its offset and message, a table of bodies that pass) and error bodies
 * that are always valid JSON.
 */
#include "test.h"

#include "app/json.h"
#include "ratel.h"

#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A body and its length (sizeof - 1, so that NULs inside count). */
#define BODY(s) s, sizeof(s) - 1

typedef struct refusal_s {
    const char *text;
    size_t len;
    size_t offset;      /* where the problem is */
    const char *reason; /* a substring of the message */
} refusal_t;

static const refusal_t refusals[] = {
    /* Trailing data; whitespace after the value is fine, anything else
       is not. */
    {BODY("{\"policy\":\"big\",\"key\":\"ab\"}xyz"), 27,
     "trailing data after the JSON value"},
    {BODY("{\"a\":1} \n {\"b\":2}"), 10, "trailing data"},
    {BODY("1 2"), 2, "trailing data"},
    {BODY("{}]"), 2, "trailing data"},
    /* Raw NUL bytes, wherever they are. */
    {BODY("{\"telephone\":\"13811110001\0evil\"}"), 25, "a raw NUL byte"},
    {BODY("{\"a\":1}\0"), 7, "a raw NUL byte"},
    {BODY("\0{}"), 0, "a raw NUL byte"},
    /* Invalid UTF-8. */
    {BODY("{\"a\":\"\xc0\xaf\"}"), 6, "overlong"},
    {BODY("{\"a\":\"\xe0\x80\xaf\"}"), 6, "overlong"},
    {BODY("{\"a\":\"\xf0\x80\x80\xaf\"}"), 6, "overlong"},
    {BODY("{\"a\":\"\xed\xa0\x80\"}"), 6, "surrogate"},
    {BODY("{\"a\":\"\xed\xbf\xbf\"}"), 6, "surrogate"},
    {BODY("{\"a\":\"\xf4\x90\x80\x80\"}"), 6, "above U+10FFFF"},
    {BODY("{\"a\":\"\xf5\x80\x80\x80\"}"), 6, "above U+10FFFF"},
    {BODY("{\"a\":\"\xe4\xb8\"}"), 6, "truncated"},
    {BODY("{\"a\":\"x\xc3"), 7, "truncated"},
    {BODY("{\"a\":\"\x80\"}"), 6, "continuation byte"},
    {BODY("{\"a\":\"\xff\"}"), 6, "never occurs"},
    {BODY("{\"a\":1}\xff"), 7, "invalid UTF-8"},
    /* Escapes. */
    {BODY("{\"telephone\":\"13811110001\\u0000evil\"}"), 25, "\\u0000 escape"},
    {BODY("[\"\\ud800\"]"), 2, "unpaired surrogate escape \\ud800"},
    {BODY("[\"\\ud800\\u0041\"]"), 2, "no low surrogate"},
    {BODY("[\"\\udc00\\ud800\"]"), 2, "a low surrogate without"},
    {BODY("[\"\\uDBFF\"]"), 2, "unpaired surrogate"},
    {BODY("[\"\\x41\"]"), 2, "an invalid escape \\x"},
    {BODY("[\"\\u12\"]"), 2, "four hex digits"},
    {BODY("[\"a\tb\"]"), 3, "raw control character 0x09"},
    {BODY("[\"abc"), 1, "never ends"},
    /* A key given twice, at any depth; the offset is the second copy. */
    {BODY("{\"telephone\":\"1\",\"telephone\":\"2\"}"), 17,
     "the key \"telephone\" given twice (first at offset 1)"},
    {BODY("{\"a\":{\"b\":1,\"c\":2,\"b\":3}}"), 18, "\"b\" given twice"},
    {BODY("[{\"x\":[{\"k\":1,\"k\":1}]}]"), 14, "\"k\" given twice"},
    /* The same key spelt with an escape is the same key. */
    {BODY("{\"ab\":1,\"\\u0061b\":2}"), 8, "\"ab\" given twice"},
    /* The earliest repeat wins over one nested in an earlier member. */
    {BODY("{\"o\":{\"z\":1,\"z\":2},\"a\":1,\"a\":2}"), 12,
     "\"z\" given twice"},
    /* Numbers: RFC 8259 only, and within a double's range. */
    {BODY("[01]"), 1, "leading zero"},
    {BODY("[1.]"), 3, "a digit after the decimal point"},
    {BODY("[.5]"), 1, "unexpected character '.'"},
    {BODY("[+1]"), 1, "unexpected character '+'"},
    {BODY("[1e]"), 3, "a digit in the exponent"},
    {BODY("[-]"), 2, "a digit"},
    {BODY("[1e999]"), 1, "out of range"},
    {BODY("[0,-1.7976931348623157e308]"), 3, "out of range"},
    {BODY("{\"a\":1.00000000000001e308}"), 5, "out of range"},
    {BODY("[1111111111111111111111111111111111111111111111111111111111111111"
          "1]"),
     1, "longer than 63"},
    /* Grammar. */
    {BODY(""), 0, "an empty body"},
    {BODY("  \n"), 3, "an empty body"},
    {BODY("{\"telephone\":"), 13, "the body ends early, expected a value"},
    {BODY("{\"a\" 1}"), 5, "':' after the key"},
    {BODY("{\"a\":1,}"), 7, "a string key"},
    {BODY("{a:1}"), 1, "a string key"},
    {BODY("[1,]"), 3, "a value"},
    {BODY("[1 2]"), 3, "',' or ']'"},
    {BODY("nope"), 1, "null"},
    {BODY("\xef\xbb\xbf{}"), 0, "U+FEFF"},
    {BODY("{'a':1}"), 1, "a string key"},
};

TEST(json_refusals_name_the_problem_and_offset)
{
    for (size_t i = 0; i < COUNT(refusals); i++) {
        const refusal_t *r = &refusals[i];
        cJSON *out = (cJSON *)1;
        char err[256];
        size_t offset = 12345;
        int rc = ratel__json_parse_strict(r->text, r->len, &out, &offset, err,
                                          sizeof err);
        char want_at[40];

        CHECK_EQ(rc, RATEL_EINVAL);
        CHECK(out == NULL);
        if (offset != r->offset || !strstr(err, r->reason)) {
            char m[512];
            snprintf(m, sizeof m, "case %zu: offset %zu (want %zu): %s", i,
                     offset, r->offset, err);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
        /* The message ends with the same offset. */
        snprintf(want_at, sizeof want_at, "at offset %zu", r->offset);
        CHECK(strstr(err, want_at) != NULL);
        cJSON_Delete(out == (cJSON *)1 ? NULL : out);
    }
}

typedef struct valid_s {
    const char *text;
    size_t len;
    const char *printed; /* cJSON's unformatted text of the tree */
} valid_t;

static const valid_t valid[] = {
    {BODY("{\"telephone\":\"13800138000\"}"),
     "{\"telephone\":\"13800138000\"}"},
    {BODY(" \t\r\n{\"a\":1}\n\n  "), "{\"a\":1}"},
    {BODY("{}"), "{}"},
    {BODY("[]"), "[]"},
    {BODY("0"), "0"},
    {BODY("-0.5e+2"), "-50"},
    {BODY("1E3"), "1000"},
    {BODY("true"), "true"},
    {BODY("null"), "null"},
    {BODY("\"\""), "\"\""},
    {BODY("{\"a\":{\"a\":1},\"b\":[{\"a\":2},{\"a\":3}]}"),
     "{\"a\":{\"a\":1},\"b\":[{\"a\":2},{\"a\":3}]}"},
    /* Keys that differ only in case are different keys. */
    {BODY("{\"Key\":1,\"key\":2}"), "{\"Key\":1,\"key\":2}"},
    /* UTF-8 at every length, and the same characters as escapes. */
    {BODY("[\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"]"),
     "[\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"]"},
    {BODY("[\"\\u00e9\\u4e2d\\ud83d\\ude00\\udbff\\udfff\"]"),
     "[\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"]"},
    {BODY("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\"]"),
     "[\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\"]"},
    {BODY("[1e308,-1e308,4.9e-324,1e-400]"),
     "[1e+308,-1e+308,4.94065645841247e-324,0]"},
    {BODY("[111111111111111111111111111111111111111111111111111111111111111]"),
     "[1.1111111111111112e+62]"},
    {BODY("[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]"),
     "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]"},
};

TEST(json_valid_bodies_parse)
{
    for (size_t i = 0; i < COUNT(valid); i++) {
        cJSON *out = NULL;
        char err[256] = "";
        size_t offset = 7;
        int rc = ratel__json_parse_strict(valid[i].text, valid[i].len, &out,
                                          &offset, err, sizeof err);
        char *text;

        if (rc != 0) {
            char m[400];
            snprintf(m, sizeof m, "case %zu refused: %s", i, err);
            ratel_test_fail(__FILE__, __LINE__, m);
            continue;
        }
        CHECK_EQ(offset, 0);
        CHECK_EQ(err[0], '\0');
        text = cJSON_PrintUnformatted(out);
        if (!text || strcmp(text, valid[i].printed) != 0) {
            char m[400];
            snprintf(m, sizeof m, "case %zu printed %s", i,
                     text ? text : "(null)");
            ratel_test_fail(__FILE__, __LINE__, m);
        }
        cJSON_free(text);
        cJSON_Delete(out);
    }
}

/* One level more than the bound is refused where it opens. */
TEST(json_depth_bound)
{
    char text[2 * (RATEL__JSON_DEPTH_MAX + 1) + 1];
    int n = RATEL__JSON_DEPTH_MAX + 1;
    cJSON *out = NULL;
    size_t offset = 0;
    char err[200];

    for (int i = 0; i < n; i++) {
        text[i] = '[';
        text[2 * n - 1 - i] = ']';
    }
    text[2 * n] = '\0';
    CHECK_EQ(ratel__json_parse_strict(text, (size_t)(2 * n), &out, &offset, err,
                                      sizeof err),
             RATEL_EINVAL);
    CHECK_EQ(offset, RATEL__JSON_DEPTH_MAX);
    CHECK(strstr(err, "nested deeper than 16") != NULL);
    /* Objects count too. */
    CHECK_EQ(ratel__json_parse_strict(
                 BODY("{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
                      "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
                      "{\"a\":1}}}}}}}}}}}}}}}}}"),
                 &out, &offset, err, sizeof err),
             RATEL_EINVAL);
    CHECK_EQ(offset, 80);
    CHECK(out == NULL);
}

/* err and offset are optional; a short err buffer is cut, not overrun. */
TEST(json_optional_outputs)
{
    cJSON *out = NULL;
    char small[8];

    CHECK_EQ(ratel__json_parse_strict(BODY("{}x"), &out, NULL, NULL, 0),
             RATEL_EINVAL);
    CHECK_EQ(
        ratel__json_parse_strict(BODY("{}x"), &out, NULL, small, sizeof small),
        RATEL_EINVAL);
    CHECK_EQ(strlen(small), sizeof small - 1);
    /* Not NUL-terminated: only len bytes are read. */
    CHECK_EQ(
        ratel__json_parse_strict("{\"a\":1}garbage", 7, &out, NULL, NULL, 0),
        0);
    CHECK(cJSON_IsObject(out));
    cJSON_Delete(out);
}

/* Error bodies parse strictly and give back the message. */
TEST(json_error_body_is_valid_json)
{
    static const struct {
        const char *message, *want;
    } cases[] = {
        {"expected {\"telephone\": \"13800138000\"}",
         "expected {\"telephone\": \"13800138000\"}"},
        {"back\\slash and \"quotes\"", "back\\slash and \"quotes\""},
        {"tab\there, newline\nthere, bell\a",
         "tab\there, newline\nthere, bell\a"},
        {"bad \xff\xc0\xaf utf-8 \xe4\xb8", "bad ??? utf-8 ??"},
        {"\xe4\xb8\xad\xe6\x96\x87", "\xe4\xb8\xad\xe6\x96\x87"},
        {"", ""},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        size_t len = 0;
        char *body = ratel__json_error_body(cases[i].message, &len);
        cJSON *out = NULL, *e;
        char err[200];

        REQUIRE(body != NULL);
        CHECK_EQ(len, strlen(body));
        CHECK_EQ(body[len - 1], '\n');
        CHECK(!strncmp(body, "{\"error\":\"", 10));
        CHECK_EQ(
            ratel__json_parse_strict(body, len, &out, NULL, err, sizeof err),
            0);
        e = cJSON_GetObjectItemCaseSensitive(out, "error");
        CHECK(cJSON_IsString(e) && !strcmp(e->valuestring, cases[i].want));
        CHECK_EQ(cJSON_GetArraySize(out), 1);
        cJSON_Delete(out);
        free(body);
    }
}

TEST(json_print_adds_newline)
{
    cJSON *o = cJSON_CreateObject();
    size_t len = 0;
    char *text;

    REQUIRE(o != NULL);
    cJSON_AddNumberToObject(o, "retry_after_s", 60);
    text = ratel__json_print(o, &len);
    REQUIRE(text != NULL);
    CHECK(!strcmp(text, "{\"retry_after_s\":60}\n"));
    CHECK_EQ(len, 21);
    free(text);
    cJSON_Delete(o);
}

TEST(json_sanitize_utf8)
{
    char s[] = "ok \xc3\xa9 \xed\xa0\x80 \xf4\x90\x80\x80 \xe4\xb8";

    ratel__json_sanitize_utf8(s);
    CHECK(!strcmp(s, "ok \xc3\xa9 ??? ???? ??"));
}

RATEL_SUITE(json) = {
    {"json_refusals_name_the_problem_and_offset",
     test_json_refusals_name_the_problem_and_offset},
    {"json_valid_bodies_parse", test_json_valid_bodies_parse},
    {"json_depth_bound", test_json_depth_bound},
    {"json_optional_outputs", test_json_optional_outputs},
    {"json_error_body_is_valid_json", test_json_error_body_is_valid_json},
    {"json_print_adds_newline", test_json_print_adds_newline},
    {"json_sanitize_utf8", test_json_sanitize_utf8},
    {0, 0},
};
