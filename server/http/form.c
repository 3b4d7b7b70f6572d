/*
 * form.c - the one reader of urlencoded text (a query, a form body): a
 * parameter's value decoded once. rateld's API parameters, the original
 * request's query and form fields that key sources read (app/keys.c),
 * and captchad read parameters here. Pure; no allocation.
 */
#include "http/http.h"

#include <string.h>

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

int ratel_http_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Decodes one form-encoded byte at p[*i] (of n): '+' is a space, "%XX" a
 * byte. Returns the byte, or -1 for a '%' not followed by two hex digits
 * or for "%00" (a NUL would cut the value short for every C string user).
 */
static int decode_at(const char *p, size_t n, size_t *i)
{
    char c = p[*i];

    if (c == '+') {
        (*i)++;
        return ' ';
    }
    if (c == '%') {
        int hi, lo;
        if (n - *i < 3)
            return -1;
        hi = ratel_http_hex_value(p[*i + 1]);
        lo = ratel_http_hex_value(p[*i + 2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -1;
        *i += 3;
        return hi * 16 + lo;
    }
    (*i)++;
    return (unsigned char)c;
}

/*
 * Whether the encoded name p[0..n) decodes to `name`: 2 exactly; 1 in
 * another case or as "NAME[...]" (ASP.NET reads names in any case, PHP
 * and Rails read "phone[]=1" as the parameter phone); 0 not; -1 when the
 * name is malformed.
 */
static int name_matches(const char *p, size_t n, const char *name)
{
    size_t i = 0, j = 0;
    int exact = 1;

    while (i < n) {
        int c = decode_at(p, n, &i);
        unsigned char want = (unsigned char)name[j];
        if (c < 0)
            return -1;
        if (want == '\0')
            return c == '[' ? 1 : 0;
        if (lower((unsigned char)c) != lower(want))
            return 0;
        exact &= c == want;
        j++;
    }
    return name[j] != '\0' ? 0 : exact ? 2 : 1;
}

/* The next parameter of [*p, end): its name and value; *p moves past
   it. '&' ends a parameter, and ';' too with `semicolon`. */
static void next_param(const char **p, const char *end, int semicolon,
                       ratel_http_str_t *k, ratel_http_str_t *v)
{
    const char *s = *p, *q = s, *eq = NULL;

    while (q < end && *q != '&' && !(semicolon && *q == ';')) {
        if (*q == '=' && !eq)
            eq = q;
        q++;
    }
    k->p = s;
    k->n = (size_t)((eq ? eq : q) - s);
    v->p = eq ? eq + 1 : q;
    v->n = (size_t)(q - v->p);
    *p = q < end ? q + 1 : end;
}

long ratel_http_form_field(ratel_http_str_t text, const char *name, int flags,
                           char *buf, size_t len)
{
    const char *p = text.p, *end = text.p + text.n;
    ratel_http_str_t k, v, found = {NULL, 0};
    int exact = 0, other = 0;
    size_t i = 0, out = 0;

    if (!p)
        return -1;
    while (p < end) {
        int m;
        next_param(&p, end, flags & RATEL_HTTP_FORM_SEMICOLON, &k, &v);
        m = name_matches(k.p, k.n, name);
        other += m == 1;
        if (m == 2 && exact++ == 0)
            found = v;
    }
    if (exact == 0)
        return -1; /* another case or NAME[] alone names another one */
    if (exact > 1 || other > 0)
        return -3;
    if (!buf || len == 0)
        return -2;
    while (i < found.n) {
        int c = decode_at(found.p, found.n, &i);
        if (c < 0 || out + 1 >= len)
            return -2;
        buf[out++] = (char)c;
    }
    buf[out] = '\0';
    return (long)out;
}

long ratel_http_query_param(ratel_http_str_t query, const char *name, char *buf,
                            size_t len)
{
    return ratel_http_form_field(query, name, 0, buf, len);
}
