/*
 * address.c - CIDR blocks, trusted proxies, who the client is (the peer,
 * or X-Forwarded-For behind trusted proxies).
 */
#include "app/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* An IP address in the form compared and printed. */
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
static int block_contains(const ratel__cidr_t *block, const address_t *a)
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

int ratel__cidr_match(const ratel__cidr_t *blocks, size_t n, int family,
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

static int trusted(const ratel__trusted_t *t, const address_t *a)
{
    return t && ratel__cidr_match(t->blocks, t->n, a->family, a->addr);
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
static int walk_value(const ratel__trusted_t *t, ratel_http_str_t value,
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
            if (!trusted(t, &entry))
                return 1; /* the first untrusted from the right */
        }
        if (start == 0)
            return 0;
        end = start - 1; /* before the comma */
    }
}

static size_t format_address(const address_t *a, char *buf, size_t len)
{
    char text[RATEL__ADDR_MAX];
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

int ratel__peer_trusted(const ratel__trusted_t *t,
                        const ratel_http_request_t *req)
{
    address_t peer;

    return t && t->n > 0 && peer_address(req, &peer) && trusted(t, &peer);
}

size_t ratel__client_address(const ratel__trusted_t *t,
                             const ratel_http_request_t *req, char *buf,
                             size_t len)
{
    address_t hop;

    if (!peer_address(req, &hop))
        return format_address(&hop, buf, len); /* "": not an IP peer */
    if (!t || t->n == 0 || !trusted(t, &hop))
        return format_address(&hop, buf, len);

    /* Several X-Forwarded-For fields are one list in field order: walk the
       last field first. */
    for (size_t i = req->nheaders; i-- > 0;) {
        const ratel_http_header_t *h = &req->headers[i];
        if (h->name.n != 15 ||
            strncasecmp(h->name.p, "X-Forwarded-For", 15) != 0)
            continue;
        if (walk_value(t, h->value, &hop))
            break;
    }
    /* Every entry trusted: hop is the leftmost (the peer when none). */
    return format_address(&hop, buf, len);
}

/* ------------------------------------------------------- CIDR blocks */

static int cidr_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cidr_error(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ratel__cidr_parse(const char *text, ratel__cidr_t *out, char *err,
                      size_t errlen)
{
    char addr[INET6_ADDRSTRLEN + 8], q[96];
    const char *slash;
    size_t len, alen;
    unsigned max, bits;
    ratel__cidr_t c;

    if (!text || !out)
        return cidr_error(err, errlen, "no address given");
    len = strlen(text);
    ratel__yaml_quote(text, len, q, sizeof q);
    slash = strchr(text, '/');
    alen = slash ? (size_t)(slash - text) : len;
    if (alen == 0 || alen >= sizeof addr)
        return cidr_error(err, errlen,
                          "\"%s\" is not an address or CIDR block (write "
                          "10.0.0.0/8, 192.168.1.10, ::1 or 2001:db8::/32)",
                          q);
    memcpy(addr, text, alen);
    addr[alen] = '\0';
    memset(&c, 0, sizeof c);
    c.family = strchr(addr, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(c.family, addr, c.addr) != 1)
        return cidr_error(err, errlen,
                          "\"%s\" is not an IPv4 or IPv6 address (write "
                          "10.0.0.0/8, 192.168.1.10, ::1 or 2001:db8::/32)",
                          q);
    max = c.family == AF_INET ? 32 : 128;
    bits = max;
    if (slash) {
        const char *p = slash + 1;
        size_t n = strlen(p);
        bits = 0;
        for (size_t i = 0; i < n && n <= 3; i++) {
            if (p[i] < '0' || p[i] > '9') {
                n = 0;
                break;
            }
            bits = bits * 10 + (unsigned)(p[i] - '0');
        }
        if (n == 0 || n > 3)
            return cidr_error(err, errlen,
                              "\"%s\": the prefix length after '/' must be "
                              "a number 0..%u",
                              q, max);
        if (bits > max)
            return cidr_error(err, errlen,
                              "\"%s\": prefix length %u is more than %u", q,
                              bits, max);
    }
    c.bits = bits;
    {
        ratel__cidr_t net = c;
        char fixed[INET6_ADDRSTRLEN];
        for (unsigned i = 0; i < 16; i++) {
            unsigned keep = bits > i * 8 ? bits - i * 8 : 0;
            if (keep < 8)
                net.addr[i] &= (uint8_t)(0xff00u >> keep);
        }
        if (memcmp(net.addr, c.addr, sizeof c.addr) != 0) {
            inet_ntop(c.family, net.addr, fixed, sizeof fixed);
            return cidr_error(err, errlen,
                              "\"%s\" has host bits set; write %s/%u", q, fixed,
                              bits);
        }
    }
    *out = c;
    return 0;
}

int ratel__yaml_trusted(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        ratel__trusted_t *out)
{
    char item[96], text[80], why[256];

    if (ratel__yaml_list(ctx, node, path, RATEL__TRUSTED_MAX,
                         "addresses or CIDR blocks"))
        return -1;
    out->n = 0;
    for (size_t i = 0; i < node->n; i++) {
        const ratel__yaml_node_t *v = node->items[i];
        ratel__cidr_t *block = &out->blocks[out->n];
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        if (ratel__yaml_string(ctx, v, item, text, sizeof text))
            return -1;
        if (ratel__cidr_parse(text, block, why, sizeof why) != 0)
            return ratel__yaml_fail(ctx, v->line, "%s: %s", item, why);
        for (size_t j = 0; j < out->n; j++)
            if (memcmp(&out->blocks[j], block, sizeof *block) == 0)
                return ratel__yaml_fail(ctx, v->line, "%s: repeats %s[%zu]",
                                        item, path, j);
        out->n++;
    }
    return 0;
}
