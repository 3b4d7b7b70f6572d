/*
 * json.c - strict JSON request bodies (json.h says what "strict" means
 * and why) and JSON error bodies.
 *
 * A body goes through three steps:
 *
 *   1. every byte: no NUL, valid UTF-8 (check_bytes);
 *   2. the grammar of RFC 8259, one value then only whitespace, with the
 *      escapes, numbers and nesting checked, recording the offset of
 *      every value and every key in document order (scan_*);
 *   3. cJSON builds the tree from the text step 2 accepted; a walk of the
 *      tree in document order meets the values and keys in the order
 *      step 2 recorded them, which gives each repeated key and each
 *      out-of-range number its offset (walk_*).
 *
 * The first problem in the text is the one reported, with its offset.
 */
#include "app/json.h"

#include "ratel.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cJSON copies a number into a 64-byte buffer before strtod, so it reads
   at most 63 characters of one: a longer number would be cut, and the
   tree would hold another value than the text. Longer ones are refused. */
#define NUMBER_MAX 63
/* The largest magnitude accepted. cJSON prints 15 significant digits
   when they read back within its tolerance, and the 15-digit form of a
   double nearer DBL_MAX (1.79769313486232e+308) reads back as infinity:
   a body we accept must print as a body we accept. */
#define NUMBER_MAGNITUDE_MAX 1e308

/* ----------------------------------------------------------- UTF-8 */

enum {
    U8_OK,
    U8_STRAY,
    U8_BAD_BYTE,
    U8_TRUNCATED,
    U8_OVERLONG,
    U8_SURROGATE,
    U8_TOO_BIG
};

static const char *const utf8_problems[] = {
    "",
    "a continuation byte without a lead byte",
    "a byte that never occurs in UTF-8",
    "a truncated sequence",
    "an overlong encoding",
    "an encoded UTF-16 surrogate",
    "a code point above U+10FFFF"};

/*
 * The length of the valid UTF-8 sequence at p (n > 0 bytes available)
 * with its code point in *cp; or 0 with the reason in *problem.
 */
static size_t utf8_next(const unsigned char *p, size_t n, uint32_t *cp,
                        int *problem)
{
    unsigned char b = p[0];
    uint32_t c, min;
    size_t need;

    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xc0) {
        *problem = U8_STRAY;
        return 0;
    }
    if (b < 0xe0) {
        need = 2, c = b & 0x1fu, min = 0x80;
    } else if (b < 0xf0) {
        need = 3, c = b & 0x0fu, min = 0x800;
    } else if (b < 0xf8) {
        need = 4, c = b & 0x07u, min = 0x10000;
    } else {
        *problem = U8_BAD_BYTE;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n || (p[i] & 0xc0) != 0x80) {
            *problem = U8_TRUNCATED;
            return 0;
        }
        c = c << 6 | (p[i] & 0x3fu);
    }
    /* 0xc0 and 0xc1 lead only overlong forms; 0xf5..0xf7 only values
       above U+10FFFF: both are caught here with their reason. */
    *problem = c < min                      ? U8_OVERLONG
               : c >= 0xd800 && c <= 0xdfff ? U8_SURROGATE
               : c > 0x10ffff               ? U8_TOO_BIG
                                            : U8_OK;
    *cp = c;
    return *problem == U8_OK ? need : 0;
}

void ratel__json_sanitize_utf8(char *message)
{
    unsigned char *p = (unsigned char *)message;
    size_t n = strlen(message), i = 0;

    while (i < n) {
        uint32_t cp;
        int problem;
        size_t k = utf8_next(p + i, n - i, &cp, &problem);
        if (k == 0) {
            p[i] = '?';
            k = 1;
        }
        i += k;
    }
}

/* ------------------------------------------------------- validator */

typedef struct scan_s {
    const unsigned char *p;
    size_t len, at;  /* the text; where the scan is */
    uint32_t *marks; /* offsets of every value and key, document order */
    size_t nmarks, cap;
    int nomem;
    size_t where; /* the offset of the problem */
    char *err;
    size_t errlen;
} scan_t;

static int __attribute__((format(printf, 3, 4)))
refuse(scan_t *s, size_t at, const char *fmt, ...)
{
    char what[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    s->where = at;
    if (s->errlen > 0)
        snprintf(s->err, s->errlen, "%s at offset %zu", what, at);
    return -1;
}

static int check_bytes(scan_t *s)
{
    size_t i = 0;

    while (i < s->len) {
        uint32_t cp;
        int problem;
        size_t k;

        if (s->p[i] == 0)
            return refuse(s, i, "a raw NUL byte");
        if (s->p[i] < 0x80) {
            i++;
            continue;
        }
        k = utf8_next(s->p + i, s->len - i, &cp, &problem);
        if (k == 0)
            return refuse(s, i, "invalid UTF-8 (%s, byte 0x%02x)",
                          utf8_problems[problem], s->p[i]);
        i += k;
    }
    return 0;
}

static void skip_ws(scan_t *s)
{
    while (s->at < s->len && (s->p[s->at] == ' ' || s->p[s->at] == '\t' ||
                              s->p[s->at] == '\n' || s->p[s->at] == '\r'))
        s->at++;
}

/* What stands at the scan position, for "unexpected X, expected Y". */
static int unexpected(scan_t *s, const char *expected)
{
    unsigned char c;
    uint32_t cp = 0;
    int problem;

    if (s->at >= s->len)
        return refuse(s, s->len, "the body ends early, expected %s", expected);
    c = s->p[s->at];
    if (c >= 0x80) {
        utf8_next(s->p + s->at, s->len - s->at, &cp, &problem);
        return refuse(s, s->at, "unexpected character U+%04X, expected %s",
                      (unsigned)cp, expected);
    }
    if (c < 0x20 || c == 0x7f)
        return refuse(s, s->at, "unexpected byte 0x%02x, expected %s", c,
                      expected);
    return refuse(s, s->at, "unexpected character '%c', expected %s", c,
                  expected);
}

/* Records the offset of the value or key that starts here. */
static int mark(scan_t *s)
{
    if (s->nmarks == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint32_t *m = realloc(s->marks, cap * sizeof *m);
        if (!m) {
            s->nomem = 1;
            return refuse(s, s->at, "out of memory");
        }
        s->marks = m;
        s->cap = cap;
    }
    s->marks[s->nmarks++] = (uint32_t)s->at;
    return 0;
}

static int hex4(const unsigned char *p, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        uint32_t d = c >= '0' && c <= '9'   ? (uint32_t)(c - '0')
                     : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10)
                                            : 16;
        if (d == 16)
            return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

/* The escape at the scan position (a backslash inside a string). */
static int scan_escape(scan_t *s)
{
    size_t at = s->at;
    uint32_t u, low;
    unsigned char c;

    if (at + 1 >= s->len)
        return refuse(s, at, "a string that never ends");
    c = s->p[at + 1];
    if (c && strchr("\"\\/bfnrt", c)) {
        s->at += 2;
        return 0;
    }
    if (c != 'u')
        return refuse(s, at,
                      c > 0x20 && c < 0x7f
                          ? "an invalid escape \\%c (accepted: \\\" \\\\ \\/ "
                            "\\b \\f \\n \\r \\t \\uXXXX)"
                          : "an invalid escape: \\ then byte 0x%02x",
                      c);
    if (at + 6 > s->len || !hex4(s->p + at + 2, &u))
        return refuse(s, at, "a \\u escape without four hex digits");
    if (u == 0)
        return refuse(s, at,
                      "a \\u0000 escape (a NUL would cut the string short)");
    if (u >= 0xdc00 && u <= 0xdfff)
        return refuse(s, at,
                      "an unpaired surrogate escape \\u%04x (a low "
                      "surrogate without a high one before it)",
                      (unsigned)u);
    if (u >= 0xd800 && u <= 0xdbff) {
        if (at + 12 > s->len || s->p[at + 6] != '\\' || s->p[at + 7] != 'u' ||
            !hex4(s->p + at + 8, &low) || low < 0xdc00 || low > 0xdfff)
            return refuse(s, at,
                          "an unpaired surrogate escape \\u%04x (no low "
                          "surrogate \\udc00..\\udfff follows)",
                          (unsigned)u);
        s->at += 12;
        return 0;
    }
    s->at += 6;
    return 0;
}

static int scan_string(scan_t *s)
{
    size_t start = s->at++;

    while (s->at < s->len) {
        unsigned char c = s->p[s->at];
        if (c == '"') {
            s->at++;
            return 0;
        }
        if (c < 0x20)
            return refuse(s, s->at,
                          "a raw control character 0x%02x in a string "
                          "(JSON needs it escaped)",
                          c);
        if (c == '\\') {
            if (scan_escape(s))
                return -1;
        } else {
            s->at++; /* UTF-8 was checked for the whole text */
        }
    }
    return refuse(s, start, "a string that never ends");
}

static int digits(scan_t *s)
{
    size_t from = s->at;

    while (s->at < s->len && s->p[s->at] >= '0' && s->p[s->at] <= '9')
        s->at++;
    return s->at > from;
}

/* RFC 8259: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int scan_number(scan_t *s)
{
    size_t start = s->at;

    if (s->p[s->at] == '-')
        s->at++;
    if (s->at < s->len && s->p[s->at] == '0') {
        s->at++;
        if (s->at < s->len && s->p[s->at] >= '0' && s->p[s->at] <= '9')
            return refuse(s, start, "a number with a leading zero");
    } else if (!digits(s)) {
        return unexpected(s, "a digit");
    }
    if (s->at < s->len && s->p[s->at] == '.') {
        s->at++;
        if (!digits(s))
            return unexpected(s, "a digit after the decimal point");
    }
    if (s->at < s->len && (s->p[s->at] == 'e' || s->p[s->at] == 'E')) {
        s->at++;
        if (s->at < s->len && (s->p[s->at] == '+' || s->p[s->at] == '-'))
            s->at++;
        if (!digits(s))
            return unexpected(s, "a digit in the exponent");
    }
    if (s->at - start > NUMBER_MAX)
        return refuse(s, start, "a number longer than %d characters",
                      NUMBER_MAX);
    return 0;
}

static int scan_literal(scan_t *s, const char *word)
{
    size_t n = strlen(word);

    for (size_t i = 0; i < n; i++, s->at++)
        if (s->at >= s->len || s->p[s->at] != (unsigned char)word[i])
            return unexpected(s, i == 0 ? "a value" : word);
    return 0;
}

static int scan_value(scan_t *s, int depth);

/* An object or an array (`close` is '}' or ']') one level deeper. */
static int scan_container(scan_t *s, int depth, unsigned char close)
{
    int object = close == '}';

    if (depth > RATEL__JSON_DEPTH_MAX)
        return refuse(s, s->at, "arrays and objects nested deeper than %d",
                      RATEL__JSON_DEPTH_MAX);
    s->at++;
    skip_ws(s);
    if (s->at < s->len && s->p[s->at] == close) {
        s->at++;
        return 0;
    }
    for (;;) {
        if (object) {
            if (s->at >= s->len || s->p[s->at] != '"')
                return unexpected(s, "a string key");
            if (mark(s) || scan_string(s))
                return -1;
            skip_ws(s);
            if (s->at >= s->len || s->p[s->at] != ':')
                return unexpected(s, "':' after the key");
            s->at++;
            skip_ws(s);
        }
        if (scan_value(s, depth))
            return -1;
        skip_ws(s);
        if (s->at < s->len && s->p[s->at] == ',') {
            s->at++;
            skip_ws(s);
            continue;
        }
        if (s->at < s->len && s->p[s->at] == close) {
            s->at++;
            return 0;
        }
        return unexpected(s, object ? "',' or '}'" : "',' or ']'");
    }
}

static int scan_value(scan_t *s, int depth)
{
    unsigned char c;

    if (s->at >= s->len)
        return unexpected(s, "a value");
    if (mark(s))
        return -1;
    c = s->p[s->at];
    switch (c) {
    case '{':
        return scan_container(s, depth + 1, '}');
    case '[':
        return scan_container(s, depth + 1, ']');
    case '"':
        return scan_string(s);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return scan_number(s);
        return unexpected(s, "a value");
    }
}

/* Steps 1 and 2; *end is where the value ends. */
static int validate(scan_t *s, size_t *end)
{
    if (check_bytes(s))
        return -1;
    skip_ws(s);
    if (s->at == s->len)
        return refuse(s, s->at, "an empty body, expected a JSON value");
    if (scan_value(s, 0))
        return -1;
    *end = s->at;
    skip_ws(s);
    if (s->at < s->len)
        return refuse(s, s->at, "trailing data after the JSON value");
    return 0;
}

/* ------------------------------------------------------------ tree */

typedef struct walk_s {
    const uint32_t *marks;
    size_t nmarks, next;
    size_t dup_at, dup_first; /* the earliest repeated key; SIZE_MAX none */
    const char *dup_key;
    size_t range_at; /* the earliest number out of range; SIZE_MAX none */
    int nomem, mismatch;
} walk_t;

typedef struct member_s {
    const char *key;
    size_t at;
} member_t;

static int by_key_then_offset(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);

    if (c != 0)
        return c;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The next recorded offset, or -1 when cJSON's tree has more nodes than
   the validator saw (it cannot, for text the validator accepted). */
static int next_mark(walk_t *w, size_t *at)
{
    if (w->next >= w->nmarks) {
        w->mismatch = 1;
        return -1;
    }
    *at = w->marks[w->next++];
    return 0;
}

static void walk_value(walk_t *w, const cJSON *node);

/* An object's members: each key's offset, its value, then the keys
   sorted so that a repeated one sits next to its first copy. */
static void walk_object(walk_t *w, const cJSON *node)
{
    const cJSON *child;
    member_t *m = NULL;
    size_t n = 0, i = 0;

    for (child = node->child; child; child = child->next)
        n++;
    if (n > 1 && !(m = malloc(n * sizeof *m))) {
        w->nomem = 1;
        return;
    }
    for (child = node->child; child; child = child->next) {
        size_t at;
        if (next_mark(w, &at))
            break;
        if (m)
            m[i++] = (member_t){child->string ? child->string : "", at};
        walk_value(w, child);
    }
    if (m && i == n) {
        qsort(m, n, sizeof *m, by_key_then_offset);
        for (i = 1; i < n; i++)
            if (!strcmp(m[i - 1].key, m[i].key) && m[i].at < w->dup_at) {
                w->dup_at = m[i].at;
                w->dup_first = m[i - 1].at;
                w->dup_key = m[i].key;
            }
    }
    free(m);
}

static void walk_value(walk_t *w, const cJSON *node)
{
    size_t at;

    if (w->mismatch || w->nomem || next_mark(w, &at))
        return;
    if (cJSON_IsNumber(node) &&
        !(fabs(node->valuedouble) <= NUMBER_MAGNITUDE_MAX) && at < w->range_at)
        w->range_at = at;
    if (cJSON_IsObject(node))
        walk_object(w, node);
    else if (cJSON_IsArray(node))
        for (const cJSON *c = node->child; c; c = c->next)
            walk_value(w, c);
}

/* A key for a message: at most 40 bytes, cut on a character boundary. */
static void key_for_message(const char *key, char *out, size_t cap)
{
    size_t n = strlen(key), cut = n;

    if (n > 40) {
        cut = 40;
        while (cut > 0 && ((unsigned char)key[cut] & 0xc0) == 0x80)
            cut--;
    }
    snprintf(out, cap, "%.*s%s", (int)cut, key, cut < n ? "..." : "");
}

/* Step 3 on the tree cJSON built: 0, or -1 with the problem in s. */
static int check_tree(scan_t *s, const cJSON *root)
{
    walk_t w = {s->marks, s->nmarks, 0, SIZE_MAX, 0, NULL, SIZE_MAX, 0, 0};
    char key[64];

    walk_value(&w, root);
    if (w.nomem) {
        s->nomem = 1;
        return refuse(s, 0, "out of memory");
    }
    if (w.mismatch || w.next != w.nmarks)
        return refuse(s, 0, "cJSON read the text differently (a bug)");
    if (w.dup_at == SIZE_MAX && w.range_at == SIZE_MAX)
        return 0;
    if (w.dup_at < w.range_at) {
        key_for_message(w.dup_key, key, sizeof key);
        return refuse(s, w.dup_at,
                      "the key \"%s\" given twice (first at offset %zu)", key,
                      w.dup_first);
    }
    return refuse(s, w.range_at, "a number out of range (beyond +-1e308)");
}

int ratel__json_parse_strict(const char *text, size_t len, cJSON **out,
                             size_t *offset, char *err, size_t errlen)
{
    scan_t s = {
        (const unsigned char *)text, len, 0, NULL, 0, 0, 0, 0, err, errlen};
    const char *parsed_end = NULL;
    cJSON *root = NULL;
    size_t end = 0;
    int rc = 0;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    if (len > UINT32_MAX)
        rc = refuse(&s, 0, "a body over 4 GiB");
    else if (validate(&s, &end) == 0) {
        root = cJSON_ParseWithLengthOpts(text, len, &parsed_end, 0);
        if (!root) {
            s.nomem = 1;
            rc = refuse(&s, 0, "out of memory");
        } else if (parsed_end != text + end) {
            rc = refuse(&s, 0, "cJSON read the text differently (a bug)");
        } else {
            rc = check_tree(&s, root);
        }
    } else {
        rc = -1;
    }
    free(s.marks);
    if (offset)
        *offset = rc == 0 ? 0 : s.where;
    if (rc == 0) {
        *out = root;
        return 0;
    }
    cJSON_Delete(root);
    return s.nomem ? RATEL_ENOMEM : RATEL_EINVAL;
}

/* ---------------------------------------------------------- bodies */

char *ratel__json_print(const cJSON *value, size_t *len)
{
    char *text = cJSON_PrintUnformatted(value), *out = NULL;
    size_t n;

    if (!text)
        return NULL;
    n = strlen(text);
    out = malloc(n + 2);
    if (out) {
        memcpy(out, text, n);
        out[n] = '\n';
        out[n + 1] = '\0';
        if (len)
            *len = n + 1;
    }
    cJSON_free(text);
    return out;
}

char *ratel__json_error_body(const char *message, size_t *len)
{
    char *copy = strdup(message ? message : ""), *body = NULL;
    cJSON *o = copy ? cJSON_CreateObject() : NULL;

    if (o) {
        ratel__json_sanitize_utf8(copy);
        if (cJSON_AddStringToObject(o, "error", copy))
            body = ratel__json_print(o, len);
    }
    cJSON_Delete(o);
    free(copy);
    return body;
}
