/*
 * request.c - who the client is (trusted proxies, X-Forwarded-For) and the
 * store key a policy limits.
 *
 * Addresses are always written in one canonical spelling (inet_ntop: IPv4
 * dotted quad, IPv6 compressed lower case, IPv4-mapped IPv6 as IPv4) so a
 * client gets the same key however a proxy spelled its address.
 */
#include "daemon/request.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* An IP address in the form rateld compares and prints. */
typedef struct address_s {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* 4 or 16 bytes used */
} address_t;

static const uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0,    0,
                                             0, 0, 0, 0, 0xff, 0xff};

/* Rewrites ::ffff:a.b.c.d as the IPv4 address a.b.c.d. */
static void unmap(address_t *a)
{
    if (a->family == AF_INET6 &&
        memcmp(a->addr, v4_mapped_prefix, sizeof v4_mapped_prefix) == 0) {
        memmove(a->addr, a->addr + 12, 4);
        memset(a->addr + 4, 0, 12);
        a->family = AF_INET;
    }
}

/* Whether the first `bits` bits of a and b are equal. */
static int prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;

    if (memcmp(a, b, whole) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

/*
 * Whether `a` (already unmapped) lies in `block`. A block written as
 * IPv4-mapped IPv6 (::ffff:10.0.0.0/104) is the IPv4 block it maps; other
 * IPv6 blocks hold IPv6 addresses only (::/0 does not trust every IPv4
 * proxy).
 */
static int block_contains(const rateld_cidr_t *block, const address_t *a)
{
    int family = block->family;
    const uint8_t *net = block->addr;
    unsigned bits = block->bits;

    if (family == AF_INET6 && bits >= 96 &&
        memcmp(net, v4_mapped_prefix, sizeof v4_mapped_prefix) == 0) {
        family = AF_INET;
        net += 12;
        bits -= 96;
    }
    if (family != a->family)
        return 0;
    if (family == AF_INET)
        return prefix_equal(net, a->addr, bits > 32 ? 32 : bits);
    return prefix_equal(net, a->addr, bits > 128 ? 128 : bits);
}

int rateld_cidr_match(const rateld_cidr_t *blocks, size_t n, int family,
                      const void *addr)
{
    address_t a;

    if (!addr || (family != AF_INET && family != AF_INET6))
        return 0;
    memset(&a, 0, sizeof a);
    a.family = family;
    memcpy(a.addr, addr, family == AF_INET ? 4 : 16);
    unmap(&a);
    for (size_t i = 0; i < n; i++)
        if (block_contains(&blocks[i], &a))
            return 1;
    return 0;
}

static int trusted(const rateld_config_t *config, const address_t *a)
{
    return rateld_cidr_match(config->trusted, config->ntrusted, a->family,
                             a->addr);
}

/* The TCP peer; 0 when it is not an IP address (family AF_UNSPEC). */
static int peer_address(const ratel_http_request_t *req, address_t *out)
{
    memset(out, 0, sizeof *out);
    if (req->peer.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&req->peer;
        out->family = AF_INET;
        memcpy(out->addr, &in->sin_addr, 4);
    } else if (req->peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 =
            (const struct sockaddr_in6 *)&req->peer;
        out->family = AF_INET6;
        memcpy(out->addr, &in6->sin6_addr, 16);
        unmap(out);
    } else {
        return 0;
    }
    return 1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

/*
 * Parses one X-Forwarded-For entry (`n` bytes, spaces already trimmed): an
 * IPv4 or IPv6 address, or an IPv6 address in brackets ("[2001:db8::1]").
 * A port ("1.2.3.4:80", "[::1]:80"), a zone ("fe80::1%eth0") or anything
 * else is not an address. Returns 1 with *out set, else 0.
 */
static int parse_entry(const char *p, size_t n, address_t *out)
{
    char text[INET6_ADDRSTRLEN + 1];

    if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
        p++;
        n -= 2;
        if (n == 0 || n >= sizeof text)
            return 0;
        memcpy(text, p, n);
        text[n] = '\0';
        memset(out, 0, sizeof *out);
        out->family = AF_INET6;
        if (inet_pton(AF_INET6, text, out->addr) != 1)
            return 0;
        unmap(out);
        return 1;
    }
    if (n == 0 || n >= sizeof text)
        return 0;
    memcpy(text, p, n);
    text[n] = '\0';
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, text, out->addr) == 1) {
        out->family = AF_INET;
        return 1;
    }
    if (inet_pton(AF_INET6, text, out->addr) == 1) {
        out->family = AF_INET6;
        unmap(out);
        return 1;
    }
    return 0;
}

/*
 * Walks one X-Forwarded-For value from its right end. *hop is the last
 * trusted hop so far; returns 1 when the walk is over (*hop is then the
 * client), 0 to go on with the header to the left. Empty list elements
 * ("a,,b", a trailing comma) are skipped, as HTTP lists allow.
 */
static int walk_value(const rateld_config_t *config, ratel_http_str_t value,
                      address_t *hop)
{
    size_t end = value.n;

    for (;;) {
        size_t start = end;
        while (start > 0 && value.p[start - 1] != ',')
            start--;
        size_t a = start, b = end;
        while (a < b && is_space(value.p[a]))
            a++;
        while (b > a && is_space(value.p[b - 1]))
            b--;
        if (b > a) {
            address_t entry;
            if (!parse_entry(value.p + a, b - a, &entry))
                return 1; /* not an address: the last trusted hop */
            *hop = entry;
            if (!trusted(config, &entry))
                return 1; /* the first untrusted from the right */
        }
        if (start == 0)
            return 0;
        end = start - 1; /* before the comma */
    }
}

static size_t format_address(const address_t *a, char *buf, size_t len)
{
    char text[RATELD_ADDR_MAX];
    size_t n;

    if (len == 0)
        return 0;
    if (a->family == 0 || !inet_ntop(a->family, a->addr, text, sizeof text))
        text[0] = '\0';
    n = strlen(text);
    if (n >= len)
        n = len - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return n;
}

int rateld_peer_trusted(const rateld_config_t *config,
                        const ratel_http_request_t *req)
{
    address_t peer;

    return config && config->ntrusted > 0 && peer_address(req, &peer) &&
           trusted(config, &peer);
}

size_t rateld_client_address(const rateld_config_t *config,
                             const ratel_http_request_t *req, char *buf,
                             size_t len)
{
    address_t hop;

    if (!peer_address(req, &hop))
        return format_address(&hop, buf, len); /* "": not an IP peer */
    if (!config || config->ntrusted == 0 || !trusted(config, &hop))
        return format_address(&hop, buf, len);

    /* Several X-Forwarded-For fields are one list in field order: walk the
       last field first. */
    for (size_t i = req->nheaders; i-- > 0;) {
        const ratel_http_header_t *h = &req->headers[i];
        if (h->name.n != 15 ||
            strncasecmp(h->name.p, "X-Forwarded-For", 15) != 0)
            continue;
        if (walk_value(config, h->value, &hop))
            break;
    }
    /* Every entry trusted: hop is the leftmost (the peer when none). */
    return format_address(&hop, buf, len);
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

int rateld_part_value(const rateld_key_part_t *part, const rateld_view_t *v,
                      char *buf, size_t len, const char **value, size_t *n)
{
    const ratel_http_str_t *h;
    long got;

    *value = NULL;
    *n = 0;
    switch (part->kind) {
    case RATELD_KEY_IP:
        *value = v->client ? v->client : "";
        *n = strlen(*value);
        break;
    case RATELD_KEY_HEADER:
        if ((h = v->req ? ratel_http_header(v->req, part->name) : NULL)) {
            *value = h->p;
            *n = h->n;
            trim(value, n);
        }
        break;
    case RATELD_KEY_QUERY:
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
    if (*n > RATELD_KEY_MAX)
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
