/*
 * redis_url.c - parses the Redis store's URL (the grammar is in redis_url.h).
 *
 * One pass from left to right: scheme, userinfo, addresses, db, query. Pure:
 * no allocation, no I/O, *out written only on success.
 *
 * No credential ever reaches a message. Before anything else is checked
 * the parser marks the secret part of the URL: the whole userinfo, from
 * the start of the authority (after "scheme://", or the start of the URL
 * when there is no scheme) to the LAST '@' (a user name can be half of a
 * credential, and "redis://secret@host" is a common slip). Messages show
 * the URL with that part replaced by "***", as well as the value of every
 * query parameter whose name says it is a secret (api_key=***), and quote
 * only pieces that lie after it. The rule is deliberately generous on
 * malformed URLs: a password holding a raw '/', '?' or '#' is still hidden
 * when the URL is refused. ratel__url_mask() is the same masking for any
 * URL a program prints (a configuration summary, a log line).
 */
#include "store/redis_url.h"

#include "store/option.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Quoted pieces are cut at this many bytes, then "..." follows. */
#define URL_QUOTE_MAX 120
#define PIECE_QUOTE_MAX 64
/* Room for `max` bytes quoted: 4 per byte (\xNN), "***" overshoot, "...". */
#define QUOTED_SIZE(max) (4 * ((max) + 3) + 8)

#define DEFAULT_PORT 6379
#define SENTINEL_PORT 26379
#define DB_MAX 15

static const char url_hint[] =
    "expected redis://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB]"
    "[?NAME=VALUE&...], redis+cluster://[[USER]:PASSWORD@]HOST[:PORT]"
    "[,HOST[:PORT]...][?NAME=VALUE&...] or redis+sentinel://[[USER]:"
    "PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[?NAME=VALUE&...] "
    "(rediss: the same over TLS)";

/* The schemes: one row each, what it turns on. */
static const struct scheme_s {
    const char *name;
    int cluster, tls, sentinel;
} schemes[] = {
    {"redis", 0, 0, 0},          {"redis+cluster", 1, 0, 0},
    {"redis+sentinel", 0, 0, 1}, {"rediss", 0, 1, 0},
    {"rediss+cluster", 1, 1, 0}, {"rediss+sentinel", 0, 1, 1},
};

#define SCHEME_NAMES                                                           \
    "redis://, redis+cluster://, redis+sentinel://, rediss://, "               \
    "rediss+cluster:// and rediss+sentinel://"

static const char host_hint[] =
    "a host is a name or an IPv4 address (letters, digits, '.', '-' and "
    "'_') or "
    "an IPv6 address in brackets, e.g. localhost, 10.0.0.1:6380 or "
    "[::1]:6379";

typedef struct parser_s {
    const char *url;
    size_t len;
    size_t secret_start, secret_end; /* shown as "***" when not empty */
    int default_port;                /* 6379, or 26379 for Sentinels */
    char *errbuf;
    size_t errlen;
} parser_t;

/*
 * Writes byte c at out, escaped when it is a quote, a backslash or not
 * printable ASCII (a message holding a CR or LF could break a protocol or a
 * log line). Returns the bytes written, at most 4.
 */
static size_t put_byte(char *out, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";

    if (c == '"' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c < 0x20 || c >= 0x7f) {
        out[0] = '\\';
        out[1] = 'x';
        out[2] = hex[c >> 4];
        out[3] = hex[c & 15];
        return 4;
    }
    out[0] = (char)c;
    return 1;
}

/*
 * Quotes up to `max` bytes of text into out (QUOTED_SIZE(max) bytes),
 * "..." marking a cut. Only for pieces that lie outside the secret part.
 */
static void quote_bytes(char *out, const char *text, size_t len, size_t max)
{
    size_t q = 0;

    for (size_t i = 0; i < len && i < max; i++)
        q += put_byte(out + q, (unsigned char)text[i]);
    if (len > max) {
        memcpy(out + q, "...", 3);
        q += 3;
    }
    out[q] = '\0';
}

/*
 * Query parameter names that say their value is a secret: a name holding
 * one of these words in any case (api_key, access_token, client_secret,
 * password, auth, signature, credentials) has its value masked.
 */
static const char *const secret_words[] = {"key", "token", "secret", "pass",
                                           "pwd", "auth",  "sig",    "cred"};

/* Whether the query parameter name[0..len) names a secret. */
static int secret_name(const char *name, size_t len)
{
    for (size_t w = 0; w < sizeof secret_words / sizeof secret_words[0]; w++) {
        size_t n = strlen(secret_words[w]);
        for (size_t i = 0; i + n <= len; i++)
            if (strncasecmp(name + i, secret_words[w], n) == 0)
                return 1;
    }
    return 0;
}

/*
 * Where the query of p->url starts (its '?'), or 0 when it has none: the
 * first '?' after the userinfo.
 */
static size_t query_start(const parser_t *p)
{
    const char *q = memchr(p->url + p->secret_end, '?', p->len - p->secret_end);

    return q ? (size_t)(q - p->url) : 0;
}

/*
 * The whole URL quoted into out (QUOTED_SIZE(max) bytes), at most `max`
 * bytes of it shown: the secret part as "***", and so is the value of
 * each query parameter secret_name() picks. Returns how many parts were
 * masked.
 */
static int quote_url(const parser_t *p, char *out, size_t max)
{
    size_t q = 0, shown = 0, i = 0, query = query_start(p), name = 0;
    int masked = 0;

    while (i < p->len) {
        int hide = 0;
        if (shown >= max) {
            memcpy(out + q, "...", 3);
            q += 3;
            break;
        }
        if (i == p->secret_start && p->secret_end > p->secret_start) {
            hide = 1;
            i = p->secret_end;
        } else if (query && i > query && p->url[i - 1] != '=') {
            if (p->url[i - 1] == '?' || p->url[i - 1] == '&')
                name = i;
        } else if (query && i > query && name) {
            /* A value: hidden up to the next parameter or a fragment. */
            hide = secret_name(p->url + name, i - 1 - name);
            name = 0;
            while (hide && i < p->len && p->url[i] != '&' && p->url[i] != '#')
                i++;
        }
        if (hide) {
            memcpy(out + q, "***", 3);
            q += 3;
            shown += 3;
            masked++;
            continue;
        }
        q += put_byte(out + q, (unsigned char)p->url[i++]);
        shown++;
    }
    out[q] = '\0';
    return masked;
}

/*
 * Writes `redis URL "URL": REASON` into errbuf (when there is one),
 * truncated as snprintf does, and returns RATEL_EINVAL.
 */
static int fail(const parser_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(const parser_t *p, const char *fmt, ...)
{
    char quoted[QUOTED_SIZE(URL_QUOTE_MAX)];
    char reason[768];
    va_list ap;

    if (!p->errbuf || p->errlen == 0)
        return RATEL_EINVAL;
    quote_url(p, quoted, URL_QUOTE_MAX);
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(p->errbuf, p->errlen, "redis URL \"%s\": %s", quoted, reason);
    return RATEL_EINVAL;
}

/* Zeroes a copy of a secret in a way the compiler cannot drop. */
static void wipe(void *buf, size_t n)
{
    volatile unsigned char *b = buf;
    while (n--)
        *b++ = 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int hex_value(char c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The %XX escape at src[*i] ('%') into *c, *i moved to its last byte.
   Returns 0, -1 when two hex digits do not follow, 1 for %00 (a NUL). */
static int percent(const char *src, size_t len, size_t *i, unsigned char *c)
{
    int hi = *i + 2 < len ? hex_value(src[*i + 1]) : -1;
    int lo = hi >= 0 ? hex_value(src[*i + 2]) : -1;

    if (hi < 0 || lo < 0)
        return -1;
    *c = (unsigned char)(hi * 16 + lo);
    *i += 2;
    return *c == 0 ? 1 : 0;
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* text[0..len) equals the lowercase `word`, ignoring case. */
static int equal_nocase(const char *text, size_t len, const char *word)
{
    if (strlen(word) != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (lower(text[i]) != word[i])
            return 0;
    return 1;
}

/*
 * Reads text[0..len) as a decimal number without sign into *out. Returns 0,
 * -1 when it is empty or holds a non-digit, or 1 when it exceeds `max`
 * (never overflows: reading stops growing past max).
 */
static int read_number(const char *text, size_t len, long max, long *out)
{
    long v = 0;
    int over = 0;

    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(text[i]))
            return -1;
        if (!over) {
            v = v * 10 + (text[i] - '0');
            if (v > max)
                over = 1;
        }
    }
    *out = v;
    return over;
}

/*
 * Percent-decodes the user name or the password (`what`) from
 * src[0..len) into dst (cap bytes, NUL-terminated). Raw bytes must be
 * printable ASCII other than '/', '?' and '#' (which would end the
 * authority of a URL); %00 is refused (the fields are C strings). Messages
 * about the password never show any of its bytes.
 */
static int decode_userinfo(const parser_t *p, const char *src, size_t len,
                           char *dst, size_t cap, const char *what, int secret)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            int bad = percent(src, len, &i, &c);
            if (bad < 0)
                return fail(p,
                            "bad percent escape in the %s: '%%' must be "
                            "followed by two hex digits (write '%%' itself "
                            "as %%25)",
                            what);
            if (bad > 0)
                return fail(p, "the %s holds %%00: a NUL byte is not accepted",
                            what);
        } else if (c <= 0x20 || c >= 0x7f || c == '/' || c == '?' || c == '#') {
            char b[8];
            if (secret)
                return fail(p,
                            "the %s holds a byte that must be "
                            "percent-encoded (a space, a control or "
                            "non-ASCII byte, '/', '?' or '#'): write it as "
                            "%%XX, e.g. %%20 for a space or %%2F for '/'",
                            what);
            b[put_byte(b, c)] = '\0';
            return fail(p, "the %s holds '%s': percent-encode it as %%%02X",
                        what, b, (unsigned)c);
        }
        if (n + 1 >= cap)
            return fail(p, "the %s is longer than %zu bytes", what, cap - 1);
        dst[n++] = (char)c;
    }
    dst[n] = '\0';
    return 0;
}

/* A host name or IPv4 address byte. */
static int is_host_byte(char c)
{
    /* '_' too: container and service names (Docker Compose) use it. */
    return is_alpha(c) || is_digit(c) || c == '.' || c == '-' || c == '_';
}

/* A byte inside the brackets of an IPv6 address. */
static int is_ipv6_byte(char c)
{
    return hex_value(c) >= 0 || c == ':' || c == '.';
}

/* An unbracketed address that is probably IPv6: two ':' or more, and only
   bytes an IPv6 address holds ("::1", "fe80::1:6379"). */
static int looks_like_ipv6(const char *s, size_t n)
{
    size_t colons = 0;

    for (size_t i = 0; i < n; i++) {
        if (!is_ipv6_byte(s[i]))
            return 0;
        colons += s[i] == ':';
    }
    return colons >= 2;
}

/*
 * Parses address number `index` (1-based), s[0..n): HOST[:PORT] or
 * [IPV6][:PORT], into *addr. The address lies after the userinfo, so it
 * may be quoted.
 */
/* The PORT of an address (`q`: the address, quoted for messages). */
static int parse_port(const parser_t *p, const char *port, size_t plen,
                      const char *q, int *out)
{
    long value;
    int rc;

    if (plen == 0)
        return fail(p,
                    "address \"%s\" has an empty port; expected a port "
                    "from 1 to 65535 after ':' (or no ':' for %d)",
                    q, p->default_port);
    rc = read_number(port, plen, 65535, &value);
    if (rc < 0)
        return fail(p,
                    "the port of \"%s\" is not a number; expected a port "
                    "from 1 to 65535",
                    q);
    if (rc > 0 || value == 0)
        return fail(p,
                    "the port of \"%s\" is out of range; expected a port "
                    "from 1 to 65535",
                    q);
    *out = (int)value;
    return 0;
}

static int parse_address(const parser_t *p, const char *s, size_t n,
                         size_t index, ratel_redis_addr_t *addr)
{
    char q[QUOTED_SIZE(PIECE_QUOTE_MAX)];
    const char *host, *port = NULL;
    size_t hlen, plen = 0;
    int rc;

    quote_bytes(q, s, n, PIECE_QUOTE_MAX);
    if (n == 0)
        return fail(p,
                    "address %zu is empty (two commas, or a comma at an "
                    "end); expected HOST[:PORT] between commas",
                    index);
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        size_t colons = 0;

        if (!close)
            return fail(p, "IPv6 address \"%s\" has no closing ']'", q);
        host = s + 1;
        hlen = (size_t)(close - host);
        for (size_t i = 0; i < hlen; i++) {
            if (!is_ipv6_byte(host[i])) {
                char b[8];
                b[put_byte(b, (unsigned char)host[i])] = '\0';
                return fail(p,
                            "IPv6 address \"%s\" holds '%s': inside brackets "
                            "only hex digits, ':' and '.' are accepted, e.g. "
                            "[::1] or [fe80::1]:6379",
                            q, b);
            }
            colons += host[i] == ':';
        }
        if (colons < 2)
            return fail(p,
                        "\"%s\" is not an IPv6 address (brackets hold an "
                        "IPv6 address, e.g. [::1]:6379); %s",
                        q, host_hint);
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return fail(p,
                            "unexpected bytes after ']' in \"%s\"; expected "
                            "[IPV6] or [IPV6]:PORT",
                            q);
            port = close + 2;
            plen = n - (size_t)(port - s);
        }
    } else {
        const char *colon = memchr(s, ':', n);

        if (looks_like_ipv6(s, n))
            return fail(p,
                        "\"%s\" looks like an IPv6 address: write it in "
                        "brackets, e.g. [::1]:6379",
                        q);
        host = s;
        hlen = colon ? (size_t)(colon - s) : n;
        if (hlen == 0)
            return fail(p, "address \"%s\" has no host; %s", q, host_hint);
        for (size_t i = 0; i < hlen; i++) {
            if (!is_host_byte(host[i])) {
                char b[8];
                b[put_byte(b, (unsigned char)host[i])] = '\0';
                return fail(p, "host in \"%s\" holds '%s'; %s", q, b,
                            host_hint);
            }
        }
        if (colon) {
            port = colon + 1;
            plen = n - hlen - 1;
        }
    }
    if (hlen > RATEL_REDIS_HOST_MAX)
        return fail(p, "host in \"%s\" is longer than %d bytes", q,
                    RATEL_REDIS_HOST_MAX);

    addr->port = p->default_port;
    if (port && (rc = parse_port(p, port, plen, q, &addr->port)) != 0)
        return rc;
    memcpy(addr->host, host, hlen);
    addr->host[hlen] = '\0';
    return 0;
}

/* Two hosts are the same when equal ignoring case (DNS names are
   case-insensitive). IPv6 text is compared as written: the store resolves
   hosts, the parser does not canonicalise them. */
static int same_host(const char *a, const char *b)
{
    while (*a && lower(*a) == lower(*b)) {
        a++;
        b++;
    }
    return *a == *b;
}

/* Parses the comma-separated addresses in url[start..end). */
static int parse_addresses(const parser_t *p, size_t start, size_t end,
                           ratel_redis_url_t *u)
{
    size_t s = start;

    if (start == end)
        return fail(p,
                    "no host; expected HOST[:PORT] after \"//\" (or "
                    "after '@'); %s",
                    host_hint);
    for (;;) {
        size_t e = s;
        ratel_redis_addr_t *addr;
        int rc;

        while (e < end && p->url[e] != ',')
            e++;
        if (u->naddrs == RATEL_REDIS_MAX_ADDRS)
            return fail(p, "more than %d addresses; at most %d are accepted",
                        RATEL_REDIS_MAX_ADDRS, RATEL_REDIS_MAX_ADDRS);
        addr = &u->addrs[u->naddrs];
        rc = parse_address(p, p->url + s, e - s, u->naddrs + 1, addr);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < u->naddrs; i++) {
            if (u->addrs[i].port == addr->port &&
                same_host(u->addrs[i].host, addr->host)) {
                char q[QUOTED_SIZE(PIECE_QUOTE_MAX)];
                quote_bytes(q, p->url + s, e - s, PIECE_QUOTE_MAX);
                return fail(p,
                            "address \"%s\" is given twice (addresses %zu "
                            "and %zu are the same); list each address once",
                            q, i + 1, u->naddrs + 1);
            }
        }
        u->naddrs++;
        if (e == end)
            return 0;
        s = e + 1;
    }
}

/*
 * The master name of a Sentinel URL, s[0..n): the name the Sentinels
 * monitor (sentinel monitor NAME ...). Sentinel accepts any name without
 * spaces; the URL's bytes are already printable ASCII without spaces, so
 * only '/' (which no path segment holds) and the length are checked here.
 */
static int parse_master_name(const parser_t *p, const char *s, size_t n,
                             ratel_redis_url_t *u)
{
    char q[QUOTED_SIZE(PIECE_QUOTE_MAX)];

    quote_bytes(q, s, n, PIECE_QUOTE_MAX);
    if (n == 0)
        return fail(p, "no master name after '/'; a Sentinel URL names the "
                       "master the Sentinels monitor, e.g. "
                       "redis+sentinel://10.0.0.1:26379/mymaster");
    if (memchr(s, '/', n))
        return fail(p,
                    "the master name \"%s\" holds '/'; expected one name "
                    "(printable, no spaces) after the addresses, e.g. "
                    "/mymaster (the db is the query's db=N with Sentinel)",
                    q);
    if (n >= sizeof u->master_name)
        return fail(p, "the master name \"%s\" is longer than %zu bytes", q,
                    sizeof u->master_name - 1);
    memcpy(u->master_name, s, n);
    u->master_name[n] = '\0';
    return 0;
}

/* Parses the path url[start..end), after its '/': the db (the master name
   with Sentinel). */
static int parse_db(const parser_t *p, size_t start, size_t end,
                    ratel_redis_url_t *u)
{
    char q[QUOTED_SIZE(PIECE_QUOTE_MAX)];
    const char *s = p->url + start;
    size_t n = end - start;
    long db = 0;
    int rc;

    quote_bytes(q, s, n, PIECE_QUOTE_MAX);
    if (u->sentinel)
        return parse_master_name(p, s, n, u);
    if (u->cluster) {
        if (n == 0 || (n == 1 && s[0] == '0'))
            return 0;
        return fail(p,
                    "Redis Cluster has only db 0, the path is \"/%s\"; leave "
                    "out the path or write /0",
                    q);
    }
    if (n == 0)
        return 0;
    rc = read_number(s, n, DB_MAX, &db);
    if (rc < 0)
        return fail(p,
                    "the db \"/%s\" is not a number; expected /0 to /%d "
                    "(db 0 when left out)",
                    q, DB_MAX);
    if (rc > 0)
        return fail(p, "the db \"/%s\" is out of range; expected /0 to /%d", q,
                    DB_MAX);
    u->db = (int)db;
    return 0;
}

/* The names of both query tables, for "the parameters are ..." lists. */
static void query_names(char *out, size_t cap)
{
    size_t n;

    ratel__option_names(ratel__redis_query_options, ratel__redis_query_noptions,
                        out, cap);
    n = strlen(out);
    if (n + 2 < cap) {
        memcpy(out + n, ", ", 3);
        ratel__option_names(ratel__redis_url_options, ratel__redis_url_noptions,
                            out + n + 2, cap - n - 2);
    }
}

/*
 * The query parameter name[0..len) in the store's table (option.c: the
 * names, types and ranges a configuration's store: section has too) or the
 * URL's own; *index numbers both tables' entries for the `seen` bits.
 */
static const ratel__option_t *query_option(const char *name, size_t len,
                                           size_t *index)
{
    const ratel__option_t *opt = ratel__option_find(
        ratel__redis_query_options, ratel__redis_query_noptions, name, len);

    if (opt) {
        *index = (size_t)(opt - ratel__redis_query_options);
        return opt;
    }
    opt = ratel__option_find(ratel__redis_url_options,
                             ratel__redis_url_noptions, name, len);
    if (opt)
        *index = ratel__redis_query_noptions +
                 (size_t)(opt - ratel__redis_url_options);
    return opt;
}

/*
 * Percent-decodes a string value, src[0..len), into dst (cap bytes) for
 * option `name`; *dlen is its length. The value may be a password, so no
 * message shows its bytes.
 */
static int decode_value(const parser_t *p, const char *name, const char *src,
                        size_t len, char *dst, size_t cap, size_t *dlen)
{
    size_t n = 0;

    for (size_t i = 0; i < len && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '%') {
            int bad = percent(src, len, &i, &c);
            if (bad < 0)
                return fail(p,
                            "query parameter %s: bad percent escape: '%%' "
                            "must be followed by two hex digits (write '%%' "
                            "itself as %%25)",
                            name);
            if (bad > 0)
                return fail(p,
                            "query parameter %s holds %%00: a NUL byte is "
                            "not accepted",
                            name);
        }
        dst[n++] = (char)c;
    }
    dst[n] = '\0';
    *dlen = n;
    return 0;
}

/*
 * Parses one NAME=VALUE pair, s[0..n), into u by the query tables; `seen`
 * marks names given. String values are percent-decoded first.
 */
static int parse_param(const parser_t *p, const char *s, size_t n,
                       ratel_redis_url_t *u, unsigned *seen)
{
    char qname[QUOTED_SIZE(PIECE_QUOTE_MAX)], names[400], why[300];
    char decoded[RATEL_REDIS_PATH_MAX + 1];
    const char *eq = memchr(s, '=', n);
    size_t nlen = eq ? (size_t)(eq - s) : n;
    const char *value = eq ? eq + 1 : s + n;
    size_t vlen = n - nlen - (eq != NULL), k = 0;
    const ratel__option_t *opt;
    int rc;

    quote_bytes(qname, s, nlen, PIECE_QUOTE_MAX);
    if (n == 0)
        return fail(p, "empty query parameter (\"&&\", or '&' at an end); "
                       "expected NAME=VALUE pairs joined by '&'");
    opt = query_option(s, nlen, &k);
    if (!opt) {
        query_names(names, sizeof names);
        return fail(p, "unknown query parameter \"%s\"; the parameters are %s",
                    qname, names);
    }
    if (*seen & (1u << k))
        return fail(p, "query parameter %s is given twice; give it once",
                    opt->name);
    *seen |= 1u << k;
    if (vlen == 0)
        return fail(p, "query parameter %s has no value", opt->name);
    if (opt->type == RATEL__OPTION_STRING) {
        rc = decode_value(p, opt->name, value, vlen, decoded, sizeof decoded,
                          &vlen);
        if (rc != 0)
            return rc;
        value = decoded;
    }
    rc = ratel__option_set(opt, value, vlen, u, why, sizeof why);
    wipe(decoded, sizeof decoded);
    if (rc != 0)
        return fail(p, "query parameter %s: %s", opt->name, why);
    return 0;
}

/* Parses the query url[start..len), after its '?'. */
static int parse_query(const parser_t *p, size_t start, unsigned *seen,
                       ratel_redis_url_t *u)
{
    size_t s = start;
    char names[400];

    if (start == p->len) {
        query_names(names, sizeof names);
        return fail(p,
                    "empty query after '?'; expected NAME=VALUE pairs "
                    "joined by '&' (the names are %s), or no '?'",
                    names);
    }
    for (;;) {
        size_t e = s;
        int rc;

        while (e < p->len && p->url[e] != '&')
            e++;
        rc = parse_param(p, p->url + s, e - s, u, seen);
        if (rc != 0)
            return rc;
        if (e == p->len)
            return 0;
        s = e + 1;
    }
}

/* A byte of a URL scheme (RFC 3986): letters, digits, '+', '-', '.'. */
static int is_scheme_byte(char c)
{
    return is_alpha(c) || is_digit(c) || c == '+' || c == '-' || c == '.';
}

/*
 * Marks the secret part of the URL (see the top of this file) and returns
 * where the authority starts (after "scheme://", else 0); *at is the last
 * '@' after that, or p->len when there is none.
 */
static size_t mark_secret(parser_t *p, size_t *at)
{
    size_t tok = 0, auth = 0;

    while (tok < p->len && is_scheme_byte(p->url[tok]))
        tok++;
    if (tok > 0 && p->len - tok >= 3 && memcmp(p->url + tok, "://", 3) == 0)
        auth = tok + 3;
    *at = p->len;
    for (size_t i = p->len; i > auth; i--) {
        if (p->url[i - 1] == '@') {
            *at = i - 1;
            break;
        }
    }
    p->secret_start = p->secret_end = 0;
    if (*at == p->len)
        return auth;
    p->secret_start = auth;
    p->secret_end = *at;
    return auth;
}

/* The row of schemes[] named url[0..len) in any case, or NULL. */
static const struct scheme_s *find_scheme(const char *url, size_t len)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (equal_nocase(url, len, schemes[i].name))
            return &schemes[i];
    return NULL;
}

/* Whether the query gave the URL option `name` (its `seen` bit). */
static int given(unsigned seen, const char *name)
{
    size_t k = 0;

    return query_option(name, strlen(name), &k) && (seen & (1u << k));
}

/*
 * The query parameters that only some schemes take, and those that go in
 * pairs: what the table of one option cannot say.
 */
static int check_combination(const parser_t *p, const ratel_redis_url_t *u,
                             unsigned seen)
{
    static const char *const tls_names[] = {"tls_ca_file", "tls_cert_file",
                                            "tls_key_file", "tls_server_name",
                                            "tls_insecure"};

    for (size_t i = 0; !u->tls && i < sizeof tls_names / sizeof *tls_names; i++)
        if (given(seen, tls_names[i]))
            return fail(p,
                        "query parameter %s is a TLS setting and this URL "
                        "is plain TCP: use rediss:// (rediss+cluster://, "
                        "rediss+sentinel://) for TLS",
                        tls_names[i]);
    if (!u->tls_cert_file[0] != !u->tls_key_file[0])
        return fail(p,
                    "query parameter %s is given without %s: a client "
                    "certificate needs its key; give tls_cert_file and "
                    "tls_key_file together, or neither",
                    u->tls_cert_file[0] ? "tls_cert_file" : "tls_key_file",
                    u->tls_cert_file[0] ? "tls_key_file" : "tls_cert_file");
    if (!u->sentinel && given(seen, "db"))
        return fail(p,
                    "query parameter db is for redis+sentinel:// and "
                    "rediss+sentinel:// (whose path is the master name); "
                    "here write the db as the path: %s://HOST/%d",
                    u->tls ? "rediss" : "redis", u->db);
    if (!u->sentinel &&
        (given(seen, "sentinel_username") || given(seen, "sentinel_password")))
        return fail(p,
                    "query parameter %s is for redis+sentinel:// and "
                    "rediss+sentinel:// only (the Sentinels' own "
                    "credentials)",
                    given(seen, "sentinel_username") ? "sentinel_username"
                                                     : "sentinel_password");
    if (u->sentinel_username[0] && !given(seen, "sentinel_password"))
        return fail(p, "query parameter sentinel_username is given without "
                       "sentinel_password; AUTH needs both (or give only "
                       "sentinel_password for the default user)");
    return 0;
}

/*
 * Parses p->url into *u (zeroed, defaults set by the caller): the secret
 * part first, then the bytes outside the userinfo, the scheme, the
 * userinfo, the addresses, the db and the query. The first problem found
 * is the one reported.
 */
/* Outside the userinfo [auth, at] (checked on its own, without quoting
   it), a URL is printable ASCII without spaces and ends before any '#'. */
static int check_bytes(parser_t *p, size_t auth, size_t at)
{
    for (size_t i = 0; i < p->len; i++) {
        unsigned char c = (unsigned char)p->url[i];
        if (at < p->len && i >= auth && i <= at)
            continue;
        if (c == '#')
            return fail(p, "a fragment ('#') is not accepted; the URL ends "
                           "with the address, the db or the query");
        if (c == ' ')
            return fail(p, "a space is not accepted in a URL (in the "
                           "password, write it as %%20)");
        if (c < 0x20 || c >= 0x7f)
            return fail(p,
                        "byte \\x%02x is not accepted: a URL is printable "
                        "ASCII (percent-encode other bytes in the password)",
                        (unsigned)c);
    }
    return 0;
}

/* The userinfo [auth, at): USER:PASSWORD or :PASSWORD, before the last
   '@'. */
static int parse_userinfo(parser_t *p, size_t auth, size_t at,
                          ratel_redis_url_t *u)
{
    const char *url = p->url, *colon = memchr(url + auth, ':', at - auth);
    int rc;

    if (at == auth)
        return fail(p, "nothing before '@'; write redis://:PASSWORD@HOST "
                       "or redis://USER:PASSWORD@HOST, or leave out "
                       "the '@'");
    if (!colon)
        return fail(p, "a user name without a password before '@' (hidden "
                       "here: it may be a password); AUTH needs a password: "
                       "write redis://USER:PASSWORD@HOST, or "
                       "redis://:PASSWORD@HOST for the default user");
    rc = decode_userinfo(p, url + auth, (size_t)(colon - url) - auth,
                         u->username, sizeof u->username, "user name", 0);
    if (rc != 0)
        return rc;
    rc = decode_userinfo(p, colon + 1, at - (size_t)(colon - url) - 1,
                         u->password, sizeof u->password, "password", 1);
    if (rc == 0)
        u->has_password = 1;
    return rc;
}

static int parse(parser_t *p, ratel_redis_url_t *u)
{
    const struct scheme_s *scheme;
    const char *url = p->url;
    size_t auth, at, pos, end, tok;
    unsigned seen = 0;
    int rc;

    if (p->len == 0)
        return fail(p, "empty URL; %s", url_hint);
    auth = mark_secret(p, &at);

    rc = check_bytes(p, auth, at);
    if (rc != 0)
        return rc;

    /* The scheme. */
    tok = 0;
    while (tok < p->len && is_scheme_byte(url[tok]))
        tok++;
    scheme = find_scheme(url, tok);
    if (auth == 0) {
        if (tok < p->len && url[tok] == ':' && scheme)
            return fail(p, "expected \"//\" after \"%.*s:\"; %s", (int)tok, url,
                        url_hint);
        return fail(p, "missing scheme; %s", url_hint);
    }
    if (!scheme) {
        char q[QUOTED_SIZE(32)];
        quote_bytes(q, url, tok, 32);
        return fail(p, "unknown scheme \"%s\"; the schemes are " SCHEME_NAMES,
                    q);
    }
    u->cluster = scheme->cluster;
    u->tls = scheme->tls;
    u->sentinel = scheme->sentinel;
    p->default_port = u->sentinel ? SENTINEL_PORT : DEFAULT_PORT;

    pos = auth;
    if (at < p->len) {
        rc = parse_userinfo(p, auth, at, u);
        if (rc != 0)
            return rc;
        pos = at + 1;
    }

    /* The addresses, up to the path or the query. */
    end = pos;
    while (end < p->len && url[end] != '/' && url[end] != '?')
        end++;
    rc = parse_addresses(p, pos, end, u);
    if (rc != 0)
        return rc;
    pos = end;

    if (pos < p->len && url[pos] == '/') {
        end = ++pos;
        while (end < p->len && url[end] != '?')
            end++;
        rc = parse_db(p, pos, end, u);
        if (rc != 0)
            return rc;
        pos = end;
    } else if (u->sentinel) {
        return parse_master_name(p, url + pos, 0, u);
    }
    if (pos < p->len) {
        rc = parse_query(p, pos + 1, &seen, u); /* url[pos] is '?' */
        if (rc != 0)
            return rc;
    }
    return check_combination(p, u, seen);
}

int ratel__redis_url_parse(const char *url, ratel_redis_url_t *out,
                           char *errbuf, size_t errlen)
{
    parser_t p;
    ratel_redis_url_t u;
    int rc;

    memset(&p, 0, sizeof p);
    p.url = url ? url : "";
    p.len = strlen(p.url);
    p.errbuf = errbuf;
    p.errlen = errlen;
    if (!url)
        return fail(&p, "no URL given; %s", url_hint);
    if (!out) {
        size_t at;
        mark_secret(&p, &at);
        return fail(&p, "nowhere to write the result (out is NULL)");
    }

    ratel__redis_query_init(&u);
    rc = parse(&p, &u);
    if (rc == 0)
        memcpy(out, &u, sizeof u);
    wipe(u.password, sizeof u.password);
    wipe(u.sentinel_password, sizeof u.sentinel_password);
    return rc;
}

void ratel__redis_query_init(ratel_redis_url_t *u)
{
    memset(u, 0, sizeof *u);
    u->on_failure = RATEL_FAILURE_DEFAULT;
    u->mode = RATEL_REDIS_AUTO;
    u->deny_cache = -1;
}

void ratel__redis_query_to_options(const ratel_redis_url_t *u,
                                   ratel_redis_options_t *o)
{
    if (u->connect_timeout_ms)
        o->connect_timeout_ms = u->connect_timeout_ms;
    if (u->timeout_ms)
        o->command_timeout_ms = u->timeout_ms;
    if (u->pool)
        o->pool_size = u->pool;
    if (u->on_failure != RATEL_FAILURE_DEFAULT)
        o->on_failure = u->on_failure;
    if (u->mode != RATEL_REDIS_AUTO)
        o->mode = u->mode;
    /* In the options 0 means the default and negative means off. */
    if (u->deny_cache >= 0)
        o->deny_cache_entries = u->deny_cache ? u->deny_cache : -1;
    if (u->wait_replicas)
        o->wait_replicas = u->wait_replicas;
    if (u->tls_ca_file[0])
        o->tls_ca_file = u->tls_ca_file;
    if (u->tls_cert_file[0])
        o->tls_cert_file = u->tls_cert_file;
    if (u->tls_key_file[0])
        o->tls_key_file = u->tls_key_file;
    if (u->tls_server_name[0])
        o->tls_server_name = u->tls_server_name;
    if (u->tls_insecure)
        o->tls_insecure = 1;
    if (u->sentinel_username[0])
        o->sentinel_username = u->sentinel_username;
    if (u->sentinel_password[0])
        o->sentinel_password = u->sentinel_password;
}

/* Longest URL ratel__url_mask shows before "...". */
#define MASK_SHOWN_MAX 1024

int ratel__url_mask(const char *url, char *out, size_t outlen)
{
    char quoted[QUOTED_SIZE(MASK_SHOWN_MAX)];
    parser_t p;
    size_t at;
    int masked;

    memset(&p, 0, sizeof p);
    p.url = url ? url : "";
    p.len = strlen(p.url);
    mark_secret(&p, &at);
    masked = quote_url(&p, quoted, MASK_SHOWN_MAX);
    if (out && outlen)
        snprintf(out, outlen, "%s", quoted);
    return masked > 0;
}
