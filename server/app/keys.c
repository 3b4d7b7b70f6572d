/*
 * keys.c - key sources (keys.h): the grammar, the reading of each source
 * from a request and the store key they make. Pure functions over the
 * view a host fills; no allocation.
 */
#include "app/keys.h"

#include "app/phone.h"
#include "http/http.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    const char *word;
    int named;
} kinds[] = {
#define RATEL__KEY_KIND_ROW(name, word, named) {word, named},
    RATEL__KEY_KINDS(RATEL__KEY_KIND_ROW)
#undef RATEL__KEY_KIND_ROW
};

static const char accepted[] =
    "accepted: ip, global, path, host, header:NAME, query:NAME, form:NAME, "
    "cookie:NAME, json:FIELD, each optionally followed by |phone[:REGION] "
    "and then |range:DIGITS or |country";

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------- grammar */

/* An HTTP token character (RFC 9110): what a header name is made of. */
static int tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || (ch && strchr("!#$%&'*+-.^_`~", ch));
}

/* A parameter, cookie or JSON field name: visible ASCII but the query's
   delimiters, quotes, backslashes and the grammar's own ',' and '|'. */
static int nchar(unsigned char ch)
{
    return ch > 0x20 && ch < 0x7f && !strchr("&=#;,|\"\\", ch);
}

static int name_valid(ratel__key_kind_t kind, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (kind == RATEL__KEY_HEADER ? !tchar(ch) || ch == '|' : !nchar(ch))
            return 0;
    }
    return n > 0;
}

/* One "|TRANSFORM" of a part (text without the '|', n bytes). */
static int parse_transform(const char *t, size_t n, ratel__key_part_t *part,
                           const char *whole, char *err, size_t errlen)
{
    const char *colon = memchr(t, ':', n);
    size_t w = colon ? (size_t)(colon - t) : n, an = colon ? n - w - 1 : 0;
    const char *arg = colon ? colon + 1 : NULL;

    if (w == 5 && memcmp(t, "phone", 5) == 0) {
        if (part->transform != RATEL__KEY_AS_IS)
            return fail(err, errlen, "\"%s\": |phone comes once, first", whole);
        part->transform = RATEL__KEY_PHONE;
        if (!colon)
            return 0;
        if (an != 2 || !(arg[0] >= 'A' && arg[0] <= 'Z') ||
            !(arg[1] >= 'A' && arg[1] <= 'Z'))
            return fail(err, errlen,
                        "\"%s\": |phone:REGION takes a region of two capital "
                        "letters, e.g. |phone:CN",
                        whole);
        memcpy(part->region, arg, 2);
        part->region[2] = '\0';
        if (!ratel__phone_region_known(part->region))
            return fail(err, errlen,
                        "\"%s\": %s is not a region libphonenumber knows "
                        "(ISO 3166 codes: CN, US, GB, ...)",
                        whole, part->region);
        return 0;
    }
    if ((w == 5 && memcmp(t, "range", 5) == 0) ||
        (w == 7 && memcmp(t, "country", 7) == 0)) {
        int range = w == 5;
        if (part->transform != RATEL__KEY_PHONE)
            return fail(err, errlen,
                        "\"%s\": |%.*s follows |phone (it reads the number "
                        "|phone made), once",
                        whole, (int)w, t);
        part->transform =
            range ? RATEL__KEY_PHONE_RANGE : RATEL__KEY_PHONE_COUNTRY;
        if (!range)
            return colon ? fail(err, errlen,
                                "\"%s\": |country takes no argument", whole)
                         : 0;
        if (an != 1 || arg[0] < '1' || arg[0] > '6')
            return fail(err, errlen,
                        "\"%s\": |range:DIGITS takes 1 to 6 digits to leave "
                        "out, e.g. |range:2 for blocks of 100 numbers",
                        whole);
        part->digits = arg[0] - '0';
        return 0;
    }
    return fail(err, errlen,
                "\"%s\": unknown transform \"%.*s\"; accepted: "
                "|phone[:REGION], then |range:DIGITS or |country",
                whole, (int)(n > 40 ? 40 : n), t);
}

int ratel__key_part_parse(const char *text, size_t len, ratel__key_part_t *part,
                          char *err, size_t errlen)
{
    char whole[RATEL__KEY_NAME_MAX + 64];
    const char *end = text + len, *bar = memchr(text, '|', len);
    const char *head_end = bar ? bar : end;
    const char *colon = memchr(text, ':', (size_t)(head_end - text));
    size_t klen = (size_t)((colon ? colon : head_end) - text), i;

    memset(part, 0, sizeof *part);
    snprintf(whole, sizeof whole, "%.*s%s", (int)(len > 160 ? 160 : len), text,
             len > 160 ? "..." : "");
    if (memchr(text, '\0', len))
        return fail(err, errlen, "a key source holds a NUL byte; %s", accepted);
    for (i = 0; i < COUNT(kinds); i++)
        if (strlen(kinds[i].word) == klen &&
            memcmp(kinds[i].word, text, klen) == 0)
            break;
    if (i == COUNT(kinds))
        return fail(err, errlen, "unknown key source \"%s\"; %s", whole,
                    accepted);
    part->kind = (ratel__key_kind_t)i;
    if (!kinds[i].named && colon)
        return fail(err, errlen, "\"%s\": %s takes no name", whole,
                    kinds[i].word);
    if (kinds[i].named) {
        size_t n = colon ? (size_t)(head_end - colon - 1) : 0;
        if (n == 0)
            return fail(err, errlen, "%s: needs a name, e.g. %s:%s",
                        kinds[i].word, kinds[i].word,
                        part->kind == RATEL__KEY_HEADER   ? "X-User-Id"
                        : part->kind == RATEL__KEY_COOKIE ? "session"
                                                          : "telephone");
        if (n >= RATEL__KEY_NAME_MAX)
            return fail(err, errlen,
                        "\"%s\": the %s name is longer than %d "
                        "bytes",
                        whole, kinds[i].word, RATEL__KEY_NAME_MAX - 1);
        if (!name_valid(part->kind, colon + 1, n))
            return fail(err, errlen, "\"%s\": not a valid %s name", whole,
                        part->kind == RATEL__KEY_QUERY  ? "query parameter"
                        : part->kind == RATEL__KEY_FORM ? "form field"
                        : part->kind == RATEL__KEY_JSON ? "JSON field"
                                                        : kinds[i].word);
        memcpy(part->name, colon + 1, n);
    }
    while (bar) {
        const char *t = bar + 1, *next = memchr(t, '|', (size_t)(end - t));
        if (parse_transform(t, (size_t)((next ? next : end) - t), part, whole,
                            err, errlen))
            return -1;
        bar = next;
    }
    if (part->transform != RATEL__KEY_AS_IS &&
        (part->kind == RATEL__KEY_IP || part->kind == RATEL__KEY_GLOBAL ||
         part->kind == RATEL__KEY_PATH || part->kind == RATEL__KEY_HOST))
        return fail(err, errlen, "\"%s\": %s is not a phone number", whole,
                    kinds[i].word);
    return 0;
}

int ratel__key_check(const ratel__key_t *key, char *err, size_t errlen)
{
    char a[RATEL__KEY_NAME_MAX + 64];

    if (key->n == 0)
        return fail(err, errlen, "no key source; %s", accepted);
    for (size_t i = 0; i < key->n; i++) {
        const ratel__key_part_t *p = &key->parts[i];
        ratel__key_part_format(p, a, sizeof a);
        if (p->kind == RATEL__KEY_GLOBAL && key->n > 1)
            return fail(err, errlen,
                        "global is one bucket for everyone; it cannot be "
                        "combined with other key sources");
        for (size_t j = 0; j < i; j++)
            if (memcmp(&key->parts[j], p, sizeof *p) == 0)
                return fail(err, errlen, "%s is given twice", a);
    }
    return 0;
}

int ratel__key_parse(const char *text, size_t len, ratel__key_t *key, char *err,
                     size_t errlen)
{
    const char *p = text, *end = text + len;

    key->n = 0;
    memset(key->parts, 0, sizeof key->parts);
    if (len == 0)
        return fail(err, errlen, "an empty key; %s", accepted);
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *pend = comma ? comma : end;
        if (key->n == RATEL__KEY_PARTS_MAX)
            return fail(err, errlen, "more than %d key sources",
                        RATEL__KEY_PARTS_MAX);
        if (ratel__key_part_parse(p, (size_t)(pend - p), &key->parts[key->n],
                                  err, errlen))
            return -1;
        key->n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return ratel__key_check(key, err, errlen);
}

size_t ratel__key_part_format(const ratel__key_part_t *part, char *buf,
                              size_t len)
{
    int n = 0;

    if (part->kind < COUNT(kinds))
        n = snprintf(buf, len, "%s%s%s%s%s%s", kinds[part->kind].word,
                     part->name[0] ? ":" : "", part->name,
                     part->transform != RATEL__KEY_AS_IS ? "|phone" : "",
                     part->region[0] ? ":" : "", part->region);
    else
        n = snprintf(buf, len, "the key");
    if (n >= 0 && (size_t)n < len && part->transform == RATEL__KEY_PHONE_RANGE)
        n += snprintf(buf + n, len - (size_t)n, "|range:%d", part->digits);
    if (n >= 0 && (size_t)n < len &&
        part->transform == RATEL__KEY_PHONE_COUNTRY)
        n += snprintf(buf + n, len - (size_t)n, "|country");
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
}

int ratel__key_needs(const ratel__key_t *key)
{
    int needs = 0;

    for (size_t i = 0; i < key->n; i++) {
        if (key->parts[i].kind == RATEL__KEY_FORM)
            needs |= RATEL__KEY_NEEDS_FORM;
        if (key->parts[i].kind == RATEL__KEY_JSON)
            needs |= RATEL__KEY_NEEDS_JSON;
    }
    return needs;
}

/* ------------------------------------------------- urlencoded fields */

/* Field `name` of urlencoded `text` (http/http.h's one reader, a ';'
   separating parameters too: some backend reads it so). */
static long field(ratel__key_str_t text, const char *name, char *buf,
                  size_t len)
{
    ratel_http_str_t t = {text.p, text.n};

    return ratel_http_form_field(t, name, RATEL_HTTP_FORM_SEMICOLON, buf, len);
}

/* ------------------------------------------------------------ sources */

static int is_space(char c)
{
    return c == ' ' || c == '\t';
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

/* The headers of `name`, at most 16 of them, through the host. */
static size_t headers_of(const ratel__key_view_t *v, const char *name,
                         ratel__key_str_t *out, size_t max)
{
    return v->headers ? v->headers(v->ctx, name, out, max) : 0;
}

/*
 * Cookie NAME in the Cookie headers (RFC 6265: "a=1; b=2", several
 * headers joined), quotes around the value dropped. 0 present, 1 absent,
 * -1 when the cookie is given twice (which one would the application
 * read?).
 */
static int cookie_value(const ratel__key_view_t *v, const char *name,
                        const char **value, size_t *n)
{
    ratel__key_str_t h[16];
    size_t want = strlen(name), nh = headers_of(v, "Cookie", h, COUNT(h));
    int found = 0;

    if (nh > COUNT(h))
        return -1;
    for (size_t i = 0; i < nh; i++) {
        const char *p = h[i].p, *end = p + h[i].n;
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
static int json_value(const ratel__key_view_t *v, const char *name, char *buf,
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

/* A decoded urlencoded field's result as a part value (0, 1, -1). */
static int field_result(long got, char *buf, const char **value, size_t *n,
                        const char **why)
{
    if (got == -1)
        return 1;
    if (got == -3) {
        *why = "a parameter given more than once (in any case, or as "
               "NAME[...])";
        return -1;
    }
    if (got < 0 || got > RATEL__KEY_MAX) {
        *why = "a malformed or too long value";
        return -1;
    }
    *value = buf;
    *n = (size_t)got;
    return 0;
}

/* The raw value of a part, before trimming and transforms. */
static int raw_value(const ratel__key_part_t *part, const ratel__key_view_t *v,
                     char *buf, size_t len, const char **value, size_t *n,
                     const char **why)
{
    ratel__key_str_t h[2];
    size_t count;

    switch (part->kind) {
    case RATEL__KEY_IP:
        *n = ratel__address_bucket(v->client ? v->client : "", buf, len);
        *value = buf;
        return 0;
    case RATEL__KEY_HEADER:
        count = headers_of(v, part->name, h, COUNT(h));
        if (count > 1) {
            *why = "a header given more than once";
            return -1;
        }
        if (count == 1) {
            *value = h[0].p;
            *n = h[0].n;
            trim(value, n); /* HTTP's optional white space */
        }
        return 0;
    case RATEL__KEY_QUERY:
        if (v->body != RATEL__KEY_BODY_NONE) {
            *why = "a query parameter on a request with a form body (whose "
                   "fields backends merge with the query's)";
            return -1;
        }
        if (v->query.p && memchr(v->query.p, '#', v->query.n)) {
            *why = "a '#' in the query";
            return -1;
        }
        return field_result(field(v->query, part->name, buf, len), buf, value,
                            n, why);
    case RATEL__KEY_FORM:
        if (v->body == RATEL__KEY_BODY_MULTIPART || v->form_unread) {
            *why = "a form body that is not read (multipart, or larger "
                   "than the host reads)";
            return -1;
        }
        if (field(v->query, part->name, NULL, 0) != -1) {
            *why = "a form field also in the query (backends merge them)";
            return -1;
        }
        if (v->body != RATEL__KEY_BODY_URLENCODED)
            return 1;
        return field_result(field(v->form, part->name, buf, len), buf, value, n,
                            why);
    case RATEL__KEY_COOKIE:
        if (cookie_value(v, part->name, value, n) < 0) {
            *why = "a cookie given more than once";
            return -1;
        }
        return 0;
    case RATEL__KEY_JSON:
        if (json_value(v, part->name, buf, len, value, n) < 0) {
            *why = "a body that is not a JSON object, or a field that is "
                   "an object or an array";
            return -1;
        }
        return 0;
    case RATEL__KEY_HOST:
        *value = v->host.p;
        *n = v->host.n;
        return 0;
    case RATEL__KEY_PATH:
        *value = v->path.p;
        *n = v->path.n;
        return 0;
    case RATEL__KEY_GLOBAL:
        *value = "*";
        *n = 1;
        return 0;
    case RATEL__KEY_SELF:
        return 0;
    }
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

/* Whether p[0..n) still holds a %XX escape: a backend that decodes twice
   would read another value. */
static int has_escape(const char *p, size_t n)
{
    for (size_t i = 0; i + 2 < n; i++)
        if (p[i] == '%' && ratel_http_hex_value(p[i + 1]) >= 0 &&
            ratel_http_hex_value(p[i + 2]) >= 0)
            return 1;
    return 0;
}

int ratel__key_transform(const ratel__key_part_t *part, char *buf, size_t len,
                         const char **value, size_t *n, const char **why)
{
    const char *ignored;
    ratel__phone_t ph;
    size_t m;

    if (!why)
        why = &ignored;
    if (part->transform == RATEL__KEY_AS_IS)
        return 0;
    if (ratel__phone_parse(*value, *n, part->region, &ph) != 0) {
        *why = "not a valid phone number";
        return -1;
    }
    if (ratel__phone_type_premium(ph.type)) {
        *why = "a premium-rate or shared-cost number";
        return -1;
    }
    if (part->transform == RATEL__KEY_PHONE_COUNTRY)
        m = (size_t)snprintf(buf, len, "%s", ph.region);
    else
        m = (size_t)snprintf(buf, len, "%s", ph.e164);
    if (m >= len)
        return -1;
    if (part->transform == RATEL__KEY_PHONE_RANGE) {
        size_t d = (size_t)part->digits;
        if (d + 2 > m) {
            *why = "a phone number too short for its range";
            return -1;
        }
        memset(buf + m - d, 'x', d);
    }
    *value = buf;
    *n = m;
    return 0;
}

int ratel__key_part_value(const ratel__key_part_t *part,
                          const ratel__key_view_t *v, char *buf, size_t len,
                          const char **value, size_t *n, const char **why)
{
    const char *ignored;
    int rc;

    if (!why)
        why = &ignored;
    *why = NULL;
    *value = NULL;
    *n = 0;
    rc = raw_value(part, v, buf, len, value, n, why);
    if (rc != 0)
        return rc;
    if (!*value)
        return 1;
    /* Spaces around a value are not part of it (a backend trims them, as
       HTTP does a header's), so " 139" and "139" are one bucket; a tab is
       a control byte, refused. */
    while (*n > 0 && (*value)[0] == ' ') {
        (*value)++;
        (*n)--;
    }
    while (*n > 0 && (*value)[*n - 1] == ' ')
        (*n)--;
    if (*n > RATEL__KEY_MAX || has_control(*value, *n)) {
        *why = "a control byte or a value too long";
        return -1;
    }
    if ((part->kind == RATEL__KEY_QUERY || part->kind == RATEL__KEY_FORM) &&
        has_escape(*value, *n)) {
        *why = "a value that still holds a %-escape once decoded";
        return -1;
    }
    if (*n == 0)
        return 1;
    return ratel__key_transform(part, buf, len, value, n, why);
}

/* ------------------------------------------------------------ the key */

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

long ratel__key_escape(const char *value, size_t n, char *buf, size_t len)
{
    key_writer_t w = {buf, 0, len ? len - 1 : 0, len == 0};

    put_escaped(&w, value, n);
    if (w.overflow)
        return -1;
    buf[w.n] = '\0';
    return (long)w.n;
}

long ratel__key_build(const ratel__key_t *key, const char *policy,
                      const ratel__key_view_t *v, char *buf, size_t len,
                      const char **why)
{
    /* Decoded values land here: as long as a whole key, plus one byte so
       that a longer value is seen to be too long. */
    char decoded[RATEL__KEY_MAX + 2];
    const char *ignored;
    size_t prefix = strlen(policy) + 1;
    key_writer_t w;

    if (!why)
        why = &ignored;
    *why = NULL;
    if (len == 0)
        return -1;
    w.buf = buf;
    w.n = 0;
    /* The limit is the value's: "POLICY:" comes on top. */
    w.cap =
        len - 1 < prefix + RATEL__KEY_MAX ? len - 1 : prefix + RATEL__KEY_MAX;
    w.overflow = 0;
    buf[0] = '\0';
    put(&w, policy, prefix - 1);
    put(&w, ":", 1);
    for (size_t i = 0; i < key->n; i++) {
        const char *value;
        size_t n;
        int rc = ratel__key_part_value(&key->parts[i], v, decoded,
                                       sizeof decoded, &value, &n, why);
        if (rc < 0) {
            buf[0] = '\0';
            return -1;
        }
        if (rc > 0) {
            if (key->on_missing != RATEL__KEY_MISSING_SHARED) {
                buf[0] = '\0';
                return 0;
            }
            value = "-";
            n = 1;
        }
        if (i > 0)
            put(&w, "|", 1);
        put_escaped(&w, value, n);
    }
    if (w.overflow) {
        *why = "a key longer than its limit";
        buf[0] = '\0';
        return -1;
    }
    for (size_t i = prefix; key->fold_case && i < w.n; i++)
        if (buf[i] >= 'A' && buf[i] <= 'Z')
            buf[i] = (char)(buf[i] + 32);
    buf[w.n] = '\0';
    return (long)w.n;
}

/* ---------------------------------------------------------- addresses */

size_t ratel__address_bucket(const char *addr, char *buf, size_t len)
{
    struct in6_addr a;
    char text[INET6_ADDRSTRLEN];
    int n = -1;

    if (len == 0)
        return 0;
    if (strchr(addr, ':') && inet_pton(AF_INET6, addr, &a) == 1) {
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            /* An IPv4-mapped address is its IPv4 client, not ::/64. */
            if (inet_ntop(AF_INET, a.s6_addr + 12, text, sizeof text))
                n = snprintf(buf, len, "%s", text);
        } else {
            memset(a.s6_addr + 8, 0, 8);
            if (inet_ntop(AF_INET6, &a, text, sizeof text))
                n = snprintf(buf, len, "%s/64", text);
        }
    }
    if (n < 0)
        n = snprintf(buf, len, "%s", addr);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}
