/*
 * request.c - the store key a policy limits and the overrides that apply
 * to a request (who the client is: server/app/address.c).
 */
#include "rateld/request.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* The key being written: never past cap bytes (NUL excluded). */
typedef struct key_writer_s {
    char *buf;
    size_t n, cap;
    int overflow;
} key_writer_t;

static void put(key_writer_t *w, const char *p, size_t n)
{
    if (w->overflow || n > w->cap - w->n) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->n, p, n);
    w->n += n;
}

/* A part's value with '|' and '\\' escaped by a '\\'. */
static void put_escaped(key_writer_t *w, const char *p, size_t n)
{
    size_t run = 0;

    for (size_t i = 0; i < n; i++) {
        if (p[i] != '|' && p[i] != '\\')
            continue;
        put(w, p + run, i - run);
        put(w, "\\", 1);
        run = i;
    }
    put(w, p + run, n - run);
}

/* Trims spaces and tabs at both ends of [*p, *p + *n). */
static void trim(const char **p, size_t *n)
{
    while (*n > 0 && is_space((*p)[0])) {
        (*p)++;
        (*n)--;
    }
    while (*n > 0 && is_space((*p)[*n - 1]))
        (*n)--;
}

/*
 * Cookie NAME in the Cookie headers (RFC 6265: "a=1; b=2", several
 * headers joined), quotes around the value dropped. 0 present, 1 absent,
 * -1 when the cookie is given twice (which one would the application
 * read?).
 */
static int cookie_value(const ratel_http_request_t *req, const char *name,
                        const char **value, size_t *n)
{
    size_t want = strlen(name);
    int found = 0;

    for (size_t h = 0; req && h < req->nheaders; h++) {
        const ratel_http_header_t *hd = &req->headers[h];
        const char *p = hd->value.p, *end = p + hd->value.n;
        if (hd->name.n != 6 || strncasecmp(hd->name.p, "Cookie", 6) != 0)
            continue;
        while (p < end) {
            const char *semi = memchr(p, ';', (size_t)(end - p));
            const char *pend = semi ? semi : end, *eq;
            size_t k;
            while (p < pend && is_space(*p))
                p++;
            eq = memchr(p, '=', (size_t)(pend - p));
            k = eq ? (size_t)(eq - p) : 0;
            while (k > 0 && is_space(p[k - 1]))
                k--;
            if (eq && k == want && memcmp(p, name, k) == 0) {
                if (found++)
                    return -1;
                *value = eq + 1;
                *n = (size_t)(pend - *value);
                trim(value, n);
                if (*n >= 2 && (*value)[0] == '"' && (*value)[*n - 1] == '"') {
                    (*value)++;
                    *n -= 2;
                }
            }
            p = semi ? semi + 1 : end;
        }
    }
    return found ? 0 : 1;
}

/* Top-level field NAME of the view's JSON body: a string's bytes, or a
   number, true or false as written. 0 present, 1 absent (no body, no
   such field, null), -1 when the body is not a JSON object or the field
   is an object or an array. */
static int json_value(const rateld_view_t *v, const char *name, char *buf,
                      size_t len, const char **value, size_t *n)
{
    const cJSON *item;

    if (v->json_error)
        return -1;
    if (!v->json)
        return 1;
    item = cJSON_GetObjectItemCaseSensitive(v->json, name);
    if (!item || cJSON_IsNull(item))
        return 1;
    if (cJSON_IsString(item)) {
        *value = item->valuestring;
        *n = strlen(item->valuestring);
        return 0;
    }
    if (cJSON_IsBool(item)) {
        *value = cJSON_IsTrue(item) ? "true" : "false";
        *n = strlen(*value);
        return 0;
    }
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        int m = d == (double)(long long)d && d > -9e15 && d < 9e15
                    ? snprintf(buf, len, "%lld", (long long)d)
                    : snprintf(buf, len, "%.17g", d);
        *value = buf;
        *n = m > 0 && (size_t)m < len ? (size_t)m : 0;
        return 0;
    }
    return -1;
}

/* Header NAME's one value: 0 present, 1 absent, -1 given more than once
   (the client sent two: which one a backend reads, first, last or both
   joined, differs, so no bucket would be the backend's). */
static int header_value(const ratel_http_request_t *req, const char *name,
                        const char **value, size_t *n)
{
    const ratel_http_str_t *h;
    size_t count = ratel_http_header_count(req, name, &h);

    if (count > 1)
        return -1;
    if (count == 0)
        return 1;
    *value = h->p;
    *n = h->n;
    trim(value, n); /* HTTP's optional white space */
    return 0;
}

/* Whether p[0..n) holds a control byte (a NUL, a line break, DEL, ...):
   no identity has one, and a backend that strips it would serve the
   value without it from another bucket. */
static int has_control(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
            return 1;
    return 0;
}

int rateld_part_value(const rateld_key_part_t *part, const rateld_view_t *v,
                      char *buf, size_t len, const char **value, size_t *n)
{
    long got;

    *value = NULL;
    *n = 0;
    switch (part->kind) {
    case RATELD_KEY_IP: /* an IPv6 client's /64 (app/address.h) */
        *n = ratel__address_bucket(v->client ? v->client : "", buf, len);
        *value = buf;
        break;
    case RATELD_KEY_HEADER:
        if (header_value(v->req, part->name, value, n) < 0)
            return -1;
        break;
    case RATELD_KEY_QUERY:
        if (v->body_params)
            return -1; /* the backend may read the body's instead */
        got = ratel_http_query_param(v->query, part->name, buf, len);
        if (got < -1 || got > RATELD_KEY_MAX)
            return -1; /* malformed, given twice or too long */
        if (got > 0) {
            *value = buf;
            *n = (size_t)got;
        }
        break;
    case RATELD_KEY_COOKIE:
        if (cookie_value(v->req, part->name, value, n) < 0)
            return -1;
        break;
    case RATELD_KEY_JSON:
        if (json_value(v, part->name, buf, len, value, n) < 0)
            return -1;
        break;
    case RATELD_KEY_HOST:
        *value = v->host.p;
        *n = v->host.n;
        break;
    case RATELD_KEY_PATH:
        *value = v->path.p;
        *n = v->path.n;
        break;
    case RATELD_KEY_GLOBAL:
        *value = "*";
        *n = 1;
        break;
    case RATELD_KEY_SELF: /* not a key source: overrides read it */
        break;
    }
    /* Spaces around a value are not part of it (a backend trims them,
       as HTTP does a header's), so " 139" and "139" are one bucket; a tab
       is a control byte, refused. */
    while (*n > 0 && (*value)[0] == ' ') {
        (*value)++;
        (*n)--;
    }
    while (*n > 0 && (*value)[*n - 1] == ' ')
        (*n)--;
    if (*n > RATELD_KEY_MAX || has_control(*value, *n))
        return -1;
    return *value && *n > 0 ? 0 : 1;
}

long rateld_policy_key(const rateld_policy_t *p, const rateld_view_t *v,
                       char *buf, size_t len)
{
    /* Decoded values (query, numbers) land here: as long as a whole key,
       plus one byte so that a longer value is seen to be too long. */
    char decoded[RATELD_KEY_MAX + 2];
    key_writer_t w;

    if (len == 0)
        return -1;
    w.buf = buf;
    w.n = 0;
    w.cap = len - 1 < RATELD_KEY_MAX ? len - 1 : RATELD_KEY_MAX;
    w.overflow = 0;
    buf[0] = '\0';

    put(&w, p->name, strlen(p->name));
    put(&w, ":", 1);
    for (size_t i = 0; i < p->nkey; i++) {
        const char *value;
        size_t n;
        int rc = rateld_part_value(&p->key[i], v, decoded, sizeof decoded,
                                   &value, &n);
        if (rc < 0) {
            buf[0] = '\0';
            return -1;
        }
        if (rc > 0) {
            if (p->on_missing == RATELD_MISSING_REJECT) {
                buf[0] = '\0';
                return 0;
            }
            value = "-";
            n = 1;
        }
        if (i > 0)
            put(&w, "|", 1);
        put_escaped(&w, value, n);
        if (w.overflow) {
            buf[0] = '\0';
            return -1;
        }
    }
    /* A backend that reads user names or e-mail addresses in any case
       would let "Alice", "ALICE", ... each guess in a bucket of its own. */
    for (size_t i = strlen(p->name) + 1; p->fold_case && i < w.n; i++)
        if (buf[i] >= 'A' && buf[i] <= 'Z')
            buf[i] = (char)(buf[i] + 32);
    buf[w.n] = '\0';
    return (long)w.n;
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
        if (o->when.kind != RATELD_KEY_SELF &&
            rateld_part_value(&o->when, v, decoded, sizeof decoded, &value,
                              &n) != 0)
            continue;
        if (in_values(o, value, n))
            return o;
    }
    return NULL;
}
