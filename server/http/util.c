/*
 * util.c - the helpers of http.h handlers use: header lookup and reason
 * phrases (query parameters: form.c). Pure functions; no allocation.
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
