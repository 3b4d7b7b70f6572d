/*
 * path.c - the normal form of a request's path (path.h).
 */
#include "rateld/path.h"

#include <string.h>

/* Characters besides letters and digits that mean the same written
   plainly or as %XX in a path segment: unreserved (RFC 3986 2.3),
   sub-delimiters but ';' (2.2), ':' and '@' (3.3). */
static const char plain_punct[] = "-._~!$&'()*+,=:@";

static int plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c != '\0' && strchr(plain_punct, c));
}

/* An octet that refuses the whole path, written plainly or escaped. */
typedef struct refusal_s {
    unsigned char c;
    const char *why;
} refusal_t;

static const refusal_t escaped_refused[] = {
    {'/', "an encoded '/' (%2F): backends disagree on whether it "
          "separates segments"},
    {'\\', "an encoded '\\' (%5C): some backends read it as '/'"},
    {'\0', "an encoded NUL (%00)"},
};

static const refusal_t plain_refused[] = {
    {'\\', "a '\\': some backends read it as '/'"},
    {'#', "a '#': a fragment is never part of the path"},
    {'?', "a '?' in the path (the query is split off before)"},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *refused(const refusal_t *table, size_t n, unsigned char c)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].c == c)
            return table[i].why;
    return NULL;
}

static int hex(unsigned char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The output so far and what it may hold (cap - 1 bytes and a NUL). */
typedef struct out_s {
    char *p;
    size_t n, cap;
} out_t;

static int put(out_t *o, const char *s, size_t n)
{
    if (n >= o->cap - o->n)
        return -1;
    memcpy(o->p + o->n, s, n);
    o->n += n;
    return 0;
}

/* Octet c in its normal form: itself when plain, %XX otherwise. */
static int put_octet(out_t *o, unsigned char c)
{
    static const char digits[] = "0123456789ABCDEF";
    char esc[3] = {'%', digits[c >> 4], digits[c & 15]};

    return plain(c) ? put(o, (const char *)&c, 1) : put(o, esc, 3);
}

static const char too_long[] = "more than 8 KiB once normalised";

/*
 * Copies the segment at in[*i..) up to the next '/' (or the end) into o
 * in normal form, leaving out a ';' parameter; *i ends on that '/' or n.
 * Returns 0, or -1 with *why.
 */
static int segment(const char *in, size_t n, size_t *i, out_t *o,
                   const char **why)
{
    int param = 0;

    for (; *i < n && in[*i] != '/'; (*i)++) {
        unsigned char c = (unsigned char)in[*i];
        if (c == '%') {
            int hi = *i + 2 < n ? hex((unsigned char)in[*i + 1]) : -1;
            int lo = hi >= 0 ? hex((unsigned char)in[*i + 2]) : -1;
            if (lo < 0) {
                *why = "a '%' not followed by two hex digits";
                return -1;
            }
            c = (unsigned char)(hi * 16 + lo);
            *i += 2;
            if ((*why = refused(escaped_refused, COUNT_OF(escaped_refused), c)))
                return -1;
        } else if ((*why =
                        refused(plain_refused, COUNT_OF(plain_refused), c))) {
            return -1;
        } else if (c <= ' ' || c == 0x7f) {
            *why = "a space or control byte";
            return -1;
        } else if (c == ';') {
            param = 1;
        }
        if (!param && put_octet(o, c)) {
            *why = too_long;
            return -1;
        }
    }
    return 0;
}

ssize_t rateld_path_normalize(const char *in, size_t n, char *out, size_t cap,
                              const char **why)
{
    out_t o = {out, 0, cap};
    size_t i = 0;

    if (n == 0 || in[0] != '/') {
        *why = "no '/' at the start";
        return -1;
    }
    if (cap < 2) {
        *why = too_long;
        return -1;
    }
    while (i < n) { /* in[i] is a '/' */
        size_t start = o.n, len;
        const char *seg;
        i++;
        if (put(&o, "/", 1)) {
            *why = too_long;
            return -1;
        }
        if (segment(in, n, &i, &o, why))
            return -1;
        seg = out + start + 1;
        len = o.n - start - 1;
        if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            if (start == 0) {
                *why = "a '..' above the root";
                return -1;
            }
            /* Drop the segment before, and its '/'. */
            o.n = start;
            while (out[o.n - 1] != '/')
                o.n--;
            o.n--;
        } else if (!(len == 0 || (len == 1 && seg[0] == '.'))) {
            continue; /* a segment that stays */
        } else {
            o.n = start; /* "", "." */
        }
        if (i >= n) /* the path ends in a directory: keep its '/' */
            o.n++;
    }
    out[o.n] = '\0';
    return (ssize_t)o.n;
}
