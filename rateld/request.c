/*
 * request.c - the store key a policy limits and the overrides that apply
 * to a request, read through key sources (server/app/keys.c; who the
 * client is: server/app/address.c).
 */
#include "rateld/request.h"

#include <string.h>
#include <strings.h>

/* Every value of header `name`, for key sources. */
static size_t request_headers(const void *ctx, const char *name,
                              ratel__key_str_t *out, size_t max)
{
    const ratel_http_request_t *req = ctx;
    size_t n = strlen(name), count = 0;

    for (size_t i = 0; req && i < req->nheaders; i++) {
        const ratel_http_header_t *h = &req->headers[i];
        if (h->name.n != n || strncasecmp(h->name.p, name, n) != 0)
            continue;
        if (count < max)
            out[count] = rateld_str(h->value);
        count++;
    }
    return count;
}

/* Whether Content-Type `t` is `type`, parameters aside. */
static int type_is(const ratel_http_str_t *t, const char *type)
{
    size_t n = strlen(type);

    return t && t->n >= n && strncasecmp(t->p, type, n) == 0 &&
           (t->n == n || t->p[n] == ';' || t->p[n] == ' ');
}

void rateld_view_init(rateld_view_t *v, const ratel_http_request_t *req)
{
    const ratel_http_str_t *t = ratel_http_header(req, "Content-Type");

    memset(v, 0, sizeof *v);
    v->headers = request_headers;
    v->ctx = req;
    /* A form body, whose fields nearly every backend reads as parameters
       beside, or instead of, the query's: a servlet's getParameter
       (Spring's @RequestParam) and ASP.NET read both, PHP's $_REQUEST and
       Rails' params let the body's win. (A JSON body is merged by Rails
       and Laravel only: docs/keys.md says so, rather than refusing every
       JSON API keyed on its query.) */
    if (type_is(t, "application/x-www-form-urlencoded")) {
        v->body = RATEL__KEY_BODY_URLENCODED;
        v->form = rateld_str(req->body);
    } else if (type_is(t, "multipart/form-data")) {
        v->body = RATEL__KEY_BODY_MULTIPART;
    }
}

long rateld_policy_key(const rateld_policy_t *p, const rateld_view_t *v,
                       char *buf, size_t len, const char **why)
{
    return ratel__key_build(&p->key, p->name, v, buf, len, why);
}

int rateld_policy_key_value(const rateld_policy_t *p, char *key, size_t *keylen,
                            size_t cap, const char **why)
{
    char buf[RATELD_KEY_MAX + 2];
    const char *value = key;
    size_t n = *keylen;

    if (p->key.n != 1 || p->key.parts[0].transform == RATEL__KEY_AS_IS)
        return 0;
    if (ratel__key_transform(&p->key.parts[0], buf, sizeof buf, &value, &n,
                             why) != 0)
        return -1;
    if (n >= cap) {
        *why = "too long";
        return -1;
    }
    memcpy(key, value, n);
    key[n] = '\0';
    *keylen = n;
    return 0;
}

/* strcmp between a C string and n bytes. */
static int compare_value(const char *s, const char *p, size_t n)
{
    size_t m = strlen(s);
    int d = memcmp(s, p, m < n ? m : n);
    return d ? d : (m < n ? -1 : m > n);
}

static int in_values(const rateld_override_t *o, const char *p, size_t n)
{
    size_t lo = 0, hi = o->nvalues;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = compare_value(o->values[mid], p, n);
        if (d == 0)
            return 1;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

const rateld_override_t *rateld_policy_override(const rateld_policy_t *p,
                                                const rateld_view_t *v,
                                                const char *key, size_t keylen)
{
    char decoded[RATELD_KEY_MAX + 2];

    for (size_t i = 0; i < p->noverrides; i++) {
        const rateld_override_t *o = &p->overrides[i];
        const char *value = key;
        size_t n = keylen;
        if (o->when.kind != RATEL__KEY_SELF &&
            ratel__key_part_value(&o->when, v, decoded, sizeof decoded, &value,
                                  &n, NULL) != 0)
            continue;
        if (in_values(o, value, n))
            return o;
    }
    return NULL;
}
