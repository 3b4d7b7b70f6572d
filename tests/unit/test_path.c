/*
 * test_path.c - the normal form of a request's path (rateld/path.h): every
 * spelling of a path a backend serves as the same one normalises to it,
 * and what cannot be normalised safely is refused.
 */
#include "test.h"

#include "rateld/path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One input: its normal form, or NULL and a word of the refusal. */
typedef struct path_case_s {
    const char *in, *want, *why;
} path_case_t;

static const path_case_t cases[] = {
    /* Already normal. */
    {"/", "/", NULL},
    {"/sendCaptcha", "/sendCaptcha", NULL},
    {"/api/ping/", "/api/ping/", NULL},
    {"/v1/users:search", "/v1/users:search", NULL},
    {"/a-b._~!$&'()*+,=:@", "/a-b._~!$&'()*+,=:@", NULL},

    /* Repeated slashes. */
    {"//sendCaptcha", "/sendCaptcha", NULL},
    {"/api//ping", "/api/ping", NULL},
    {"/api/ping//", "/api/ping/", NULL},
    {"///", "/", NULL},

    /* Dot segments (RFC 3986 5.2.4). */
    {"/./sendCaptcha", "/sendCaptcha", NULL},
    {"/api/../sendCaptcha", "/sendCaptcha", NULL},
    {"/a/./b/../c", "/a/c", NULL},
    {"/a/b/..", "/a/", NULL},
    {"/a/b/.", "/a/b/", NULL},
    {"/a/..", "/", NULL},
    {"/.", "/", NULL},
    {"/a/.../b", "/a/.../b", NULL}, /* "..." is a name */
    {"/a/..b/.c", "/a/..b/.c", NULL},
    {"/a//../b", "/b", NULL}, /* the empty segment is merged first */

    /* Escapes of plain characters are decoded, hex digits in any case. */
    {"/%73endCaptcha", "/sendCaptcha", NULL},
    {"/%73%65%6E%64%43%61%70%74%63%68%61", "/sendCaptcha", NULL},
    {"/v1/users%3asearch", "/v1/users:search", NULL},
    {"/%2e/sendCaptcha", "/sendCaptcha", NULL},
    {"/api/%2e%2e/sendCaptcha", "/sendCaptcha", NULL},
    {"/api/%2E%2e/sendCaptcha", "/sendCaptcha", NULL},
    {"/api/.%2e/sendCaptcha", "/sendCaptcha", NULL},
    {"/%7e%2D%5f", "/~-_", NULL},

    /* Other escapes stay, upper case; they are never decoded twice. */
    {"/%252F", "/%252F", NULL},
    {"/%25", "/%25", NULL},
    {"/a%3fb", "/a%3Fb", NULL},
    {"/a%23b", "/a%23b", NULL},
    {"/sendCaptcha%3Bx=1", "/sendCaptcha%3Bx=1", NULL},
    {"/caf%c3%a9", "/caf%C3%A9", NULL},
    {"/%20%0a%7f", "/%20%0A%7F", NULL},
    /* Overlong UTF-8 for '.' and '/' is not decoded. */
    {"/api/%c0%ae%c0%ae/sendCaptcha", "/api/%C0%AE%C0%AE/sendCaptcha", NULL},
    {"/%c0%af", "/%C0%AF", NULL},
    {"/%e0%80%af", "/%E0%80%AF", NULL},

    /* Bytes a URI never holds plainly are escaped, as a backend reads
       them. */
    {"/caf\xc3\xa9", "/caf%C3%A9", NULL},
    {"/a{b}|c^\"<>[]`", "/a%7Bb%7D%7Cc%5E%22%3C%3E%5B%5D%60", NULL},

    /* A ';' parameter ends its segment. */
    {"/sendCaptcha;jsessionid=1", "/sendCaptcha", NULL},
    {"/api;v=1/ping", "/api/ping", NULL},
    {"/api/..;/sendCaptcha", "/sendCaptcha", NULL},
    {"/api/.;x/ping", "/api/ping", NULL},
    {"/;x/sendCaptcha", "/sendCaptcha", NULL},
    {"/a;", "/a", NULL},
    {"/a;b;c/", "/a/", NULL},
    {"/a;x=%2e%2e", "/a", NULL},

    /* Case is kept: backends match paths case-sensitively. */
    {"/SendCaptcha", "/SendCaptcha", NULL},

    /* Refused. */
    {"", NULL, "at the start"},
    {"sendCaptcha", NULL, "at the start"},
    {"/..", NULL, "above the root"},
    {"/../sendCaptcha", NULL, "above the root"},
    {"/a/../..", NULL, "above the root"},
    {"//..", NULL, "above the root"},
    {"/%2e%2e/x", NULL, "above the root"},
    {"/..;x/x", NULL, "above the root"},
    {"/a%2Fb", NULL, "%2F"},
    {"/a%2fb", NULL, "%2F"},
    {"/..%2fsendCaptcha", NULL, "%2F"},
    {"/a%5cb", NULL, "%5C"},
    {"/a%00", NULL, "NUL"},
    {"/a;x=%2F", NULL, "%2F"},
    {"/a%", NULL, "hex"},
    {"/a%2", NULL, "hex"},
    {"/a%zz", NULL, "hex"},
    {"/a%%32%46", NULL, "hex"},
    {"/a%g0", NULL, "hex"},
    {"/a\\b", NULL, "'\\'"},
    {"/..\\sendCaptcha", NULL, "'\\'"},
    {"/a#b", NULL, "'#'"},
    {"/a?b", NULL, "'?'"},
    {"/a b", NULL, "space"},
    {"/a\tb", NULL, "control"},
    {"/a\x7f", NULL, "control"},
};

static void check_case(size_t i, const path_case_t *c)
{
    char out[RATELD_PATH_MAX], m[300];
    const char *why = NULL;
    ssize_t n =
        rateld_path_normalize(c->in, strlen(c->in), out, sizeof out, &why);

    if (c->want &&
        (n < 0 || (size_t)n != strlen(c->want) || strcmp(out, c->want) != 0)) {
        snprintf(m, sizeof m, "case %zu %.60s: got %.100s, want %.60s", i,
                 c->in, n < 0 ? why : out, c->want);
        ratel_test_fail(__FILE__, __LINE__, m);
    } else if (!c->want && (n >= 0 || !why || !strstr(why, c->why))) {
        snprintf(m, sizeof m, "case %zu %.60s: got %.100s, want a refusal (%s)",
                 i, c->in, n >= 0 ? out : why, c->why);
        ratel_test_fail(__FILE__, __LINE__, m);
    }
}

TEST(path_table)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(i, &cases[i]);
}

/* The normal form is a fixed point, and a refusal never repeats the
   input. */
TEST(path_normal_form_is_stable)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[RATELD_PATH_MAX], again[RATELD_PATH_MAX];
        const char *why = NULL;
        ssize_t n = rateld_path_normalize(cases[i].in, strlen(cases[i].in), out,
                                          sizeof out, &why);
        if (n < 0) {
            CHECK(strstr(why, "sendCaptcha") == NULL);
            continue;
        }
        CHECK_EQ(
            rateld_path_normalize(out, (size_t)n, again, sizeof again, &why),
            n);
        CHECK(strcmp(out, again) == 0);
    }
}

/* A NUL byte in the input is refused like any control byte. */
TEST(path_plain_nul)
{
    static const char in[] = {'/', 'a', '\0', 'b'};
    char out[16];
    const char *why = NULL;

    CHECK_EQ(rateld_path_normalize(in, sizeof in, out, sizeof out, &why), -1);
    CHECK(why && strstr(why, "control"));
}

/* A 4 KiB path normalises; past the output's room it is refused, never
   cut. */
TEST(path_long)
{
    static char in[4097], out[RATELD_PATH_MAX], small[64];
    const char *why = NULL;

    in[0] = '/';
    memset(in + 1, 'a', sizeof in - 2);
    in[sizeof in - 1] = '\0';
    CHECK_EQ(rateld_path_normalize(in, 4096, out, sizeof out, &why), 4096);
    CHECK(memcmp(in, out, 4096) == 0 && out[4096] == '\0');
    /* Each raw byte above 0x7F takes three: 4095 of them do not fit. */
    memset(in + 1, 0xe9, sizeof in - 2);
    CHECK_EQ(rateld_path_normalize(in, 4096, out, sizeof out, &why), -1);
    CHECK(strstr(why, "8 KiB") != NULL);
    /* A cap of exactly the length and its NUL fits; one less does not. */
    CHECK_EQ(rateld_path_normalize("/abc", 4, small, 5, &why), 4);
    CHECK(strcmp(small, "/abc") == 0);
    CHECK_EQ(rateld_path_normalize("/abc", 4, small, 4, &why), -1);
    CHECK_EQ(rateld_path_normalize("/a%41", 5, small, 4, &why), 3);
    CHECK_EQ(rateld_path_normalize("/a%41", 5, small, 3, &why), -1);
    CHECK_EQ(rateld_path_normalize("/", 1, small, 1, &why), -1);
    /* 800 "/a/.." climb back to the root each time; one more ".." is
       above it. */
    for (size_t i = 0; i < 800; i++)
        memcpy(in + 5 * i, "/a/..", 5);
    CHECK_EQ(rateld_path_normalize(in, 4000, out, sizeof out, &why), 1);
    CHECK(strcmp(out, "/") == 0);
    memcpy(in + 4000, "/..", 3);
    CHECK_EQ(rateld_path_normalize(in, 4003, out, sizeof out, &why), -1);
    CHECK(strstr(why, "above the root") != NULL);
}

RATEL_SUITE(path) = {
    {"path_table", test_path_table},
    {"path_normal_form_is_stable", test_path_normal_form_is_stable},
    {"path_plain_nul", test_path_plain_nul},
    {"path_long", test_path_long},
    {0, 0},
};
