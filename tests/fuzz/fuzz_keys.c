/*
 * fuzz_keys.c - key sources (server/app/keys.h) on arbitrary bytes: the
 * grammar, and the reading of a request. The input is split at its first
 * two NUL bytes: a key source text, a query, and a body (urlencoded when
 * the first byte of the key text is even, else a JSON-less, multipart or
 * no body by its value).
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - a parsed key has 1..RATEL__KEY_PARTS_MAX parts, each of a known
 *     kind with a name exactly when the kind takes one, and formats to a
 *     text that parses again to the same parts;
 *   - a built key is "sms:" and at most RATEL__KEY_MAX bytes,
 *     NUL-terminated, its length strlen's; a refusal names a reason; a
 *     missing key under on_missing shared is never 0;
 *   - ratel_http_form_field never writes past its buffer and returns
 *     -3..-1 or a length below it.
 */
#include "app/keys.h"
#include "http/http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_keys: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The next NUL-separated piece of [*p, end). */
static ratel__key_str_t piece(const char **p, const char *end)
{
    const char *s = *p, *nul = memchr(s, '\0', (size_t)(end - s));
    ratel__key_str_t out = {s, (size_t)((nul ? nul : end) - s)};

    *p = nul ? nul + 1 : end;
    return out;
}

static size_t no_headers(const void *ctx, const char *name,
                         ratel__key_str_t *out, size_t max)
{
    (void)ctx;
    (void)name;
    (void)out;
    (void)max;
    return 0;
}

static void check_parts(const ratel__key_t *key)
{
    char text[RATEL__KEY_NAME_MAX + 64], err[512];

    ASSERT(key->n >= 1 && key->n <= RATEL__KEY_PARTS_MAX);
    for (size_t i = 0; i < key->n; i++) {
        const ratel__key_part_t *part = &key->parts[i];
        ratel__key_part_t again;
        size_t n;
        ASSERT((unsigned)part->kind < RATEL__KEY_SELF);
        ASSERT(memchr(part->name, '\0', sizeof part->name));
        ASSERT((part->kind >= RATEL__KEY_HEADER) == (part->name[0] != '\0'));
        n = ratel__key_part_format(part, text, sizeof text);
        ASSERT(n == strlen(text));
        ASSERT(ratel__key_part_parse(text, n, &again, err, sizeof err) == 0);
        ASSERT(memcmp(&again, part, sizeof again) == 0);
    }
}

static void check_build(const ratel__key_t *key, const ratel__key_view_t *v)
{
    char buf[RATEL__KEY_MAX + 1];
    const char *why = NULL;
    long n = ratel__key_build(key, "sms", v, buf, sizeof buf, &why);

    ASSERT(n >= -1 && n <= RATEL__KEY_MAX);
    if (n > 0) {
        ASSERT((size_t)n == strlen(buf));
        ASSERT(memcmp(buf, "sms:", 4) == 0);
    }
    if (n < 0)
        ASSERT(why != NULL);
    if (n == 0)
        ASSERT(key->on_missing != RATEL__KEY_MISSING_SHARED);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    ratel__key_str_t text = piece(&p, end), query = piece(&p, end);
    ratel__key_str_t body = {p, (size_t)(end - p)};
    ratel__key_view_t v;
    ratel__key_t key;
    char err[512], field[16];
    long got;

    memset(&key, 0, sizeof key);
    memset(&v, 0, sizeof v);
    v.headers = no_headers;
    v.query = query;
    v.client = "2001:db8::1";
    v.body = size == 0 || data[0] % 2 == 0 ? RATEL__KEY_BODY_URLENCODED
             : data[0] % 3 == 0            ? RATEL__KEY_BODY_MULTIPART
                                           : RATEL__KEY_BODY_NONE;
    v.form = body;
    got = ratel_http_form_field((ratel_http_str_t){query.p, query.n}, "phone",
                                RATEL_HTTP_FORM_SEMICOLON, field, sizeof field);
    ASSERT(got >= -3 && got < (long)sizeof field);
    if (ratel__key_parse(text.p, text.n, &key, err, sizeof err) != 0) {
        ASSERT(memchr(err, '\0', sizeof err) && err[0] != '\0');
        return 0;
    }
    check_parts(&key);
    for (int m = 0; m <= RATEL__KEY_MISSING_ALLOW; m++) {
        key.on_missing = (ratel__key_missing_t)m;
        key.fold_case = m == 1;
        check_build(&key, &v);
    }
    return 0;
}
