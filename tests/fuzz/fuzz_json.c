/*
 * fuzz_json.c - the strict JSON body parser (server/app/json.c) on arbitrary
 * bytes.
 *
 * Two views of one input:
 *
 *   1. the input as a body, with its length (NULs, invalid UTF-8 and
 *      trailing bytes reach the parser as a client would send them);
 *   2. its bytes as choices among JSON fragments (keys, escapes, numbers,
 *      brackets, near misses) joined into a body, so that accepted bodies,
 *      which byte mutations rarely produce, are checked often.
 *
 * Invariants (a violation aborts):
 *
 *   - the result is 0, RATEL_EINVAL or RATEL_ENOMEM, the same on a second
 *     parse, with the same message and offset;
 *   - refused: no tree; the offset is within the body; the message ends
 *     with "at offset N" for that offset; its error body parses strictly;
 *   - accepted: the tree re-serialises (cJSON, unformatted); that text is
 *     accepted again, gives an equal tree (cJSON_Compare) and prints to
 *     the same text; no string in the tree holds a NUL before its end or
 *     invalid UTF-8 (checked by sanitising a copy).
 */
#include "app/json.h"
#include "ratel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_json: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Every string (keys too) is valid UTF-8: sanitising changes nothing. */
static void check_strings(const cJSON *node)
{
    for (; node; node = node->next) {
        const char *texts[2] = {
            node->string, cJSON_IsString(node) ? node->valuestring : NULL};
        for (int i = 0; i < 2; i++) {
            char *copy;
            if (!texts[i])
                continue;
            copy = strdup(texts[i]);
            ASSERT(copy);
            ratel__json_sanitize_utf8(copy);
            ASSERT(!strcmp(copy, texts[i]));
            free(copy);
        }
        check_strings(node->child);
    }
}

static void check_accepted(const cJSON *tree)
{
    char *text = cJSON_PrintUnformatted(tree), *again_text;
    cJSON *again = NULL;
    char err[300];
    int rc;

    ASSERT(text);
    check_strings(tree);
    rc = ratel__json_parse_strict(text, strlen(text), &again, NULL, err,
                                  sizeof err);
    if (rc != 0)
        fprintf(stderr, "fuzz_json: printed %s, refused: %s\n", text, err);
    ASSERT(rc == 0);
    ASSERT(cJSON_Compare(tree, again, 1));
    again_text = cJSON_PrintUnformatted(again);
    ASSERT(again_text && !strcmp(text, again_text));
    cJSON_free(again_text);
    cJSON_free(text);
    cJSON_Delete(again);
}

static void check_refused(const char *err, size_t offset, size_t size)
{
    char want[48];
    size_t n = strlen(err), w, len = 0;
    char *body;
    cJSON *tree = NULL;

    ASSERT(offset <= size);
    w = (size_t)snprintf(want, sizeof want, "at offset %zu", offset);
    ASSERT(n > w && !strcmp(err + n - w, want));
    body = ratel__json_error_body(err, &len);
    ASSERT(body);
    ASSERT(ratel__json_parse_strict(body, len, &tree, NULL, NULL, 0) == 0);
    ASSERT(cJSON_IsObject(tree));
    cJSON_Delete(tree);
    free(body);
}

static void parse_twice(const char *text, size_t size)
{
    cJSON *a = NULL, *b = NULL;
    char e1[300], e2[300];
    size_t o1 = 0, o2 = 0;
    int r1, r2;

    r1 = ratel__json_parse_strict(text, size, &a, &o1, e1, sizeof e1);
    r2 = ratel__json_parse_strict(text, size, &b, &o2, e2, sizeof e2);
    ASSERT(r1 == 0 || r1 == RATEL_EINVAL || r1 == RATEL_ENOMEM);
    ASSERT(r1 == r2);
    if (r1 == 0) {
        ASSERT(a && b && o1 == 0 && !e1[0]);
        ASSERT(cJSON_Compare(a, b, 1));
        check_accepted(a);
    } else {
        ASSERT(!a && !b);
        ASSERT(o1 == o2 && !strcmp(e1, e2));
        if (r1 == RATEL_EINVAL)
            check_refused(e1, o1, size);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* Pieces a body is assembled from: structure, keys (some repeated),
   strings with every kind of escape, numbers at the edges, and near
   misses. */
static const char *const fragments[] = {
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\"telephone\"",
    "\"telephone\":",
    "\"code\":",
    "\"a\":",
    "\"\\u0061\":",
    "\"13800138000\"",
    "\"\\u00e9\\u4e2d\"",
    "\"\\ud83d\\ude00\"",
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"\\u0000\"",
    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
    "\"\xc3\xa9\xf0\x9f\x98\x80\"",
    "\"\xc0\xaf\"",
    "\"\xed\xa0\x80\"",
    "\"\t\"",
    "\"",
    "0",
    "-0.5e-3",
    "1e308",
    "1.7976931348623157e308",
    "1e999",
    "01",
    "123456789012345678901234567890",
    "true",
    "false",
    "null",
    "nul",
    "\n",
    "xyz",
    "\0",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t nf = sizeof fragments / sizeof fragments[0], len = 0;
    char *text;

    parse_twice((const char *)data, size);
    text = malloc(size * 40 + 1);
    if (!text)
        return 0;
    for (size_t i = 0; i < size && i < 200; i++) {
        const char *f = fragments[data[i] % nf];
        size_t n = f[0] ? strlen(f) : 1; /* "\0" is one NUL byte */
        memcpy(text + len, f, n);
        len += n;
    }
    parse_twice(text, len);
    free(text);
    return 0;
}
