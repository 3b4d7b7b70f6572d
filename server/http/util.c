/*
 * util.c - the helpers of http.h handlers use: header lookup, query
 * parameters, reason phrases. Pure functions; no allocation.
 */
#include "http/http.h"

#include <http_parser.h>

#include <string.h>

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* Whether header name k is `name` (n bytes), in any case. */
static int name_is(const ratel_http_str_t *k, const char *name, size_t n)
{
    size_t j = 0;

    if (k->n != n)
        return 0;
    while (j < n &&
           lower((unsigned char)k->p[j]) == lower((unsigned char)name[j]))
        j++;
    return j == n;
}

const ratel_http_str_t *ratel_http_header(const ratel_http_request_t *req,
                                          const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < req->nheaders; i++)
        if (name_is(&req->headers[i].name, name, n))
            return &req->headers[i].value;
    return NULL;
}

size_t ratel_http_header_count(const ratel_http_request_t *req,
                               const char *name, const ratel_http_str_t **first)
{
    size_t n = strlen(name), count = 0;

    if (first)
        *first = NULL;
    for (size_t i = 0; req && i < req->nheaders; i++) {
        if (!name_is(&req->headers[i].name, name, n))
            continue;
        if (count++ == 0 && first)
            *first = &req->headers[i].value;
    }
    return count;
}

static int hex_value(char c)
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
        hi = hex_value(p[*i + 1]);
        lo = hex_value(p[*i + 2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -1;
        *i += 3;
        return hi * 16 + lo;
    }
    (*i)++;
    return (unsigned char)c;
}

/* 1 if the encoded key p[0..n) decodes to `name`: exactly, or with
   `fold`, ignoring ASCII case. */
static int key_matches(const char *p, size_t n, const char *name, int fold)
{
    size_t i = 0, j = 0;

    while (i < n) {
        int c = decode_at(p, n, &i);
        unsigned char want = (unsigned char)name[j];
        if (c < 0 || want == '\0')
            return 0;
        if (fold ? lower((unsigned char)c) != lower(want) : c != want)
            return 0;
        j++;
    }
    return name[j] == '\0';
}

/* Whether a parameter of [p, end) other than the one at `self` is `name`
   in any case: "k=1&k=2" and "k=1&K=2" alike, for frameworks that read
   names without case (ASP.NET) would join or pick either. */
static int given_again(const char *p, const char *end, const char *self,
                       const char *name)
{
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pend = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(pend - p));
        if (p != self &&
            key_matches(p, (size_t)((eq ? eq : pend) - p), name, 1))
            return 1;
        p = amp ? amp + 1 : end;
    }
    return 0;
}

long ratel_http_query_param(ratel_http_str_t query, const char *name, char *buf,
                            size_t len)
{
    const char *p = query.p, *end = query.p + query.n;

    if (!p)
        return -1;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pend = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(pend - p));
        const char *kend = eq ? eq : pend;

        if (key_matches(p, (size_t)(kend - p), name, 0)) {
            const char *v = eq ? eq + 1 : pend;
            size_t vn = (size_t)(pend - v), i = 0, out = 0;
            if (given_again(query.p, end, p, name))
                return -3;
            if (!buf || len == 0)
                return -2;
            while (i < vn) {
                int c = decode_at(v, vn, &i);
                if (c < 0 || out + 1 >= len)
                    return -2;
                buf[out++] = (char)c;
            }
            buf[out] = '\0';
            return (long)out;
        }
        p = amp ? amp + 1 : end;
    }
    return -1;
}

const char *ratel_http_reason(int status)
{
    /* http-parser's table of registered statuses; a status it does not
       name gets its class's name (RFC 9110 allows any reason phrase). */
    const char *name = status >= 100 && status <= 599
                           ? http_status_str((enum http_status)status)
                           : "<unknown>";

    if (name[0] != '<')
        return name;
    switch (status / 100) {
    case 1:
        return "Informational";
    case 2:
        return "Success";
    case 3:
        return "Redirection";
    case 4:
        return "Client Error";
    default:
        return "Server Error";
    }
}
