/*
 * fuzz_path.c - the normal form of a path (rateld/path.h) on arbitrary
 * bytes, against a second, plainer model of the same rules.
 *
 * The input is a path as is, and the input after a '/'. Invariants (a
 * violation aborts, which the fuzzer reports):
 *
 *   - the model (split on '/', cut each segment at ';', decode every
 *     escape, resolve "." and ".." on a stack, write each octet plainly or
 *     as %XX) refuses exactly what rateld_path_normalize refuses and
 *     otherwise gives the same bytes;
 *   - a normal form starts with '/', holds no "//", no "." or ".."
 *     segment, no ';', '\', '?', '#', space or control byte, and each '%'
 *     starts an upper-case escape of an octet that is not plain; it is
 *     its own normal form;
 *   - a refusal's reason is a short fixed phrase; into a smaller buffer
 *     the result is the same normal form or a refusal for room (always
 *     the same when the buffer holds 3 bytes per input byte), never a cut
 *     one (ASan sees any byte written past the buffer).
 */
#include "rateld/path.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_path: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define IN_MAX 4096
#define OUT_MAX (3 * IN_MAX + 2)

static int plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c && strchr("-._~!$&'()*+,=:@", c));
}

static int hex(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One segment, decoded, up to its ';'. */
typedef struct seg_s {
    unsigned char b[IN_MAX];
    size_t n;
} seg_t;

/* Decodes in[0..n) (no '/') into *s; -1 when the model refuses it. */
static int model_segment(const uint8_t *in, size_t n, seg_t *s)
{
    int param = 0;

    s->n = 0;
    for (size_t i = 0; i < n; i++) {
        int c = in[i];
        if (c == '%') {
            if (i + 2 >= n || hex(in[i + 1]) < 0 || hex(in[i + 2]) < 0)
                return -1;
            c = hex(in[i + 1]) * 16 + hex(in[i + 2]);
            i += 2;
            if (c == 0 || c == '/' || c == '\\')
                return -1;
        } else if (c == '\\' || c == '#' || c == '?' || c <= ' ' || c == 0x7f) {
            return -1;
        } else if (c == ';') {
            param = 1;
        }
        if (!param)
            s->b[s->n++] = (unsigned char)c;
    }
    return 0;
}

static int is_dots(const seg_t *s, size_t k)
{
    return s->n == k && (k == 0 || memcmp(s->b, "..", k) == 0);
}

/* The model's normal form of in[0..n) into out; its length or -1. */
static long model(const uint8_t *in, size_t n, char *out)
{
    static seg_t stack[IN_MAX / 2 + 1];
    static seg_t s;
    size_t depth = 0, i = 1, o = 0;
    int trailing = 0;

    if (n == 0 || in[0] != '/')
        return -1;
    while (1) {
        const uint8_t *slash = memchr(in + i, '/', n - i);
        size_t end = slash ? (size_t)(slash - in) : n;
        if (model_segment(in + i, end - i, &s))
            return -1;
        trailing = 0;
        if (is_dots(&s, 2)) {
            if (depth == 0)
                return -1;
            depth--;
            trailing = 1;
        } else if (is_dots(&s, 0) || is_dots(&s, 1)) {
            trailing = 1;
        } else {
            stack[depth++] = s;
        }
        if (!slash)
            break;
        i = end + 1;
    }
    for (size_t k = 0; k < depth; k++) {
        out[o++] = '/';
        for (size_t j = 0; j < stack[k].n; j++) {
            unsigned char c = stack[k].b[j];
            if (plain(c))
                out[o++] = (char)c;
            else
                o += (size_t)sprintf(out + o, "%%%02X", c);
        }
    }
    if (depth == 0 || trailing)
        out[o++] = '/';
    out[o] = '\0';
    return (long)o;
}

/* What every normal form looks like. */
static void check_normal(const char *p, size_t n)
{
    char again[OUT_MAX];
    const char *why = NULL;

    ASSERT(n >= 1 && p[0] == '/' && strlen(p) == n);
    ASSERT(!strstr(p, "//") && !strstr(p, "/./") && !strstr(p, "/../"));
    ASSERT(!(n >= 2 && strcmp(p + n - 2, "/.") == 0));
    ASSERT(!(n >= 3 && strcmp(p + n - 3, "/..") == 0));
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        ASSERT(c > ' ' && c < 0x7f && !strchr(";\\?#", c));
        if (c == '%') {
            ASSERT(i + 2 < n && strchr("0123456789ABCDEF", p[i + 1]) &&
                   strchr("0123456789ABCDEF", p[i + 2]));
            ASSERT(!plain((unsigned char)(hex(p[i + 1]) * 16 + hex(p[i + 2]))));
        } else {
            ASSERT(c == '/' || plain(c));
        }
    }
    ASSERT(rateld_path_normalize(p, n, again, sizeof again, &why) == (long)n);
    ASSERT(memcmp(again, p, n + 1) == 0);
}

static void check_one(const uint8_t *in, size_t n)
{
    static char out[OUT_MAX], want[OUT_MAX];
    const char *why = NULL;
    ssize_t got =
        rateld_path_normalize((const char *)in, n, out, sizeof out, &why);
    long w = model(in, n, want);
    size_t caps[] = {1, 2, 5, (size_t)(got > 0 ? got : 0),
                     (size_t)(got > 0 ? got + 1 : 0)};

    ASSERT((got < 0) == (w < 0));
    if (got < 0) {
        ASSERT(why && why[0] && strlen(why) < 100);
        return;
    }
    ASSERT(got == w && memcmp(out, want, (size_t)w + 1) == 0);
    ASSERT((size_t)got <= 3 * n);
    check_normal(out, (size_t)got);
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        char *small;
        ssize_t r;
        if (caps[k] == 0)
            continue;
        small = malloc(caps[k]);
        ASSERT(small);
        r = rateld_path_normalize((const char *)in, n, small, caps[k], &why);
        /* Segments a later ".." removes take room on the way. */
        if (r >= 0)
            ASSERT((size_t)got < caps[k] && r == got &&
                   memcmp(small, out, (size_t)got + 1) == 0);
        else
            ASSERT(strstr(why, "8 KiB") && caps[k] <= 3 * n);
        free(small);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t slashed[IN_MAX + 1];

    if (size > IN_MAX)
        size = IN_MAX;
    check_one(data, size);
    slashed[0] = '/';
    memcpy(slashed + 1, data, size);
    check_one(slashed, size + 1);
    return 0;
}
