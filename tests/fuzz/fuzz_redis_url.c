/*
 * fuzz_redis_url.c - the Redis store's URL parser on arbitrary bytes.
 *
 * The input, cut at its first NUL, is one URL. Invariants (a violation
 * aborts, which the fuzzer reports):
 *
 *   - the result is 0 or RATEL_EINVAL, the same with or without an errbuf;
 *   - an error message is NUL-terminated, non-empty, one line of printable
 *     ASCII of bounded length, starting with `redis URL "`, and truncated
 *     like snprintf into heap buffers of exactly 1, 7 and some other number
 *     of bytes (ASan sees any byte written past them);
 *   - a parsed URL is in range: 1..RATEL_REDIS_MAX_ADDRS distinct
 *     addresses, non-empty NUL-terminated hosts of the accepted bytes, ports
 *     1..65535, db 0..15 (0 for cluster), every query value in its range,
 *     the scheme the input starts with (its cluster, tls and sentinel
 *     flags), a master name exactly with Sentinel (printable, no space, no
 *     '/'), tls_ settings only with TLS, a client certificate only with its
 *     key, sentinel_ credentials only with Sentinel; parsing again gives
 *     the same;
 *   - the password never shapes a message. When the input's password (the
 *     bytes between the first ':' after the scheme's "://" and the last
 *     '@') is well formed, the same URL with the password
 *     replaced by as many 'Q' as it has decoded bytes gives the identical
 *     result and message: nothing of the password, not even a byte of it,
 *     reaches the text. A parsed password of 4 bytes or more is then also
 *     checked literally against the message of the URL made invalid with a
 *     '#' (sound: it may appear there only if the 'Q' twin's message holds
 *     it too, e.g. because the host has the same name);
 *   - a marker password put in front of the input ("redis://:MARKER@"
 *     followed by the input, raw and percent-encoded), or given as the
 *     Sentinels' password before it ("redis+sentinel://h/m?
 *     sentinel_password=MARKER&" followed by the input), never appears in
 *     a message unless the input itself holds the marker.
 */
#include "ratel.h"
#include "store/redis_url.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_redis_url: %s:%d: invariant broken: %s\n",   \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define ERR_CAP 4096
/* A message quotes at most ~120 bytes of URL (4 each when escaped) and a few
   short pieces: far below this. */
#define MESSAGE_MAX 1600

static const char marker[] = "Zq7Xw3Kp";
static const char marker_tail[] = "q7Xw3Kp"; /* visible in "%5Aq7Xw3Kp" */

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* url starts with `prefix` (lowercase), ignoring case. */
static int starts_nocase(const char *url, const char *prefix)
{
    for (; *prefix; url++, prefix++)
        if (lower(*url) != *prefix)
            return 0;
    return 1;
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

static void check_message(const char *msg)
{
    size_t n = strnlen(msg, ERR_CAP);

    ASSERT(n < ERR_CAP);
    ASSERT(n > 0 && n < MESSAGE_MAX);
    ASSERT(strncmp(msg, "redis URL \"", 11) == 0);
    for (size_t i = 0; i < n; i++)
        ASSERT((unsigned char)msg[i] >= 0x20 && (unsigned char)msg[i] < 0x7f);
}

static int host_byte(char c, int ipv6)
{
    if (ipv6)
        return hex_value(c) >= 0 || c == ':' || c == '.';
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

static int same_host(const char *a, const char *b)
{
    while (*a && lower(*a) == lower(*b)) {
        a++;
        b++;
    }
    return *a == *b;
}

/* The scheme a URL parsed with these flags starts with. */
static const char *scheme_of(const ratel_redis_url_t *u)
{
    static const char *const names[2][3] = {
        {"redis://", "redis+cluster://", "redis+sentinel://"},
        {"rediss://", "rediss+cluster://", "rediss+sentinel://"}};
    return names[u->tls][u->sentinel ? 2 : u->cluster];
}

/* Where the authority of url starts (after a known scheme's "://"), or 0. */
static size_t authority(const char *url)
{
    static const char *const schemes[] = {
        "redis://",  "redis+cluster://",  "redis+sentinel://",
        "rediss://", "rediss+cluster://", "rediss+sentinel://"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (starts_nocase(url, schemes[i]))
            return strlen(schemes[i]);
    return 0;
}

/* A string field: NUL-terminated inside its array. */
#define TERMINATED(f) ASSERT(strnlen((f), sizeof(f)) < sizeof(f))

static void check_tls_sentinel(const ratel_redis_url_t *u)
{
    size_t n = strnlen(u->master_name, sizeof u->master_name);

    ASSERT(n < sizeof u->master_name);
    ASSERT(u->sentinel ? n > 0 : n == 0);
    for (size_t i = 0; i < n; i++)
        ASSERT(u->master_name[i] > 0x20 && u->master_name[i] < 0x7f &&
               u->master_name[i] != '/');
    TERMINATED(u->tls_ca_file);
    TERMINATED(u->tls_cert_file);
    TERMINATED(u->tls_key_file);
    TERMINATED(u->tls_server_name);
    TERMINATED(u->sentinel_username);
    TERMINATED(u->sentinel_password);
    ASSERT(u->tls_insecure == 0 || u->tls_insecure == 1);
    if (!u->tls)
        ASSERT(!u->tls_ca_file[0] && !u->tls_cert_file[0] &&
               !u->tls_key_file[0] && !u->tls_server_name[0] &&
               !u->tls_insecure);
    ASSERT(!u->tls_cert_file[0] == !u->tls_key_file[0]);
    if (!u->sentinel)
        ASSERT(!u->sentinel_username[0] && !u->sentinel_password[0]);
    if (u->sentinel_username[0])
        ASSERT(u->sentinel_password[0]);
}

static void check_parsed(const char *url, const ratel_redis_url_t *u)
{
    ASSERT(u->cluster == 0 || u->cluster == 1);
    ASSERT(u->tls == 0 || u->tls == 1);
    ASSERT(u->sentinel == 0 || u->sentinel == 1);
    ASSERT(!(u->cluster && u->sentinel));
    ASSERT(starts_nocase(url, scheme_of(u)));
    check_tls_sentinel(u);
    ASSERT(u->naddrs >= 1 && u->naddrs <= RATEL_REDIS_MAX_ADDRS);
    for (size_t i = 0; i < u->naddrs; i++) {
        const ratel_redis_addr_t *a = &u->addrs[i];
        size_t n = strnlen(a->host, sizeof a->host);
        int ipv6 = memchr(a->host, ':', n) != NULL;
        ASSERT(n > 0 && n < sizeof a->host);
        for (size_t k = 0; k < n; k++)
            ASSERT(host_byte(a->host[k], ipv6));
        ASSERT(a->port >= 1 && a->port <= 65535);
        for (size_t j = 0; j < i; j++)
            ASSERT(!(u->addrs[j].port == a->port &&
                     same_host(u->addrs[j].host, a->host)));
    }
    ASSERT(strnlen(u->username, sizeof u->username) < sizeof u->username);
    ASSERT(strnlen(u->password, sizeof u->password) < sizeof u->password);
    ASSERT(u->has_password == 0 || u->has_password == 1);
    if (!u->has_password)
        ASSERT(u->username[0] == '\0' && u->password[0] == '\0');
    ASSERT(u->db >= 0 && u->db <= 15);
    if (u->cluster)
        ASSERT(u->db == 0);
    ASSERT(u->connect_timeout_ms >= 0 && u->connect_timeout_ms <= 60000);
    ASSERT(u->timeout_ms >= 0 && u->timeout_ms <= 60000);
    ASSERT(u->pool <= 256);
    ASSERT(u->on_failure >= RATEL_FAILURE_DEFAULT &&
           u->on_failure <= RATEL_FAILURE_LOCAL);
    ASSERT(u->mode >= RATEL_REDIS_AUTO && u->mode <= RATEL_REDIS_FUNCTION);
    ASSERT(u->deny_cache >= -1 && u->deny_cache <= 1048576);
    /* Nothing of a valid URL is a space, a control byte or a '#'. */
    for (const char *p = url; *p; p++)
        ASSERT((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
}

/* Every field but the password. */
static int same_but_password(const ratel_redis_url_t *a,
                             const ratel_redis_url_t *b)
{
    if (a->tls != b->tls || a->sentinel != b->sentinel ||
        strcmp(a->master_name, b->master_name) != 0 ||
        strcmp(a->tls_ca_file, b->tls_ca_file) != 0 ||
        strcmp(a->tls_cert_file, b->tls_cert_file) != 0 ||
        strcmp(a->tls_key_file, b->tls_key_file) != 0 ||
        strcmp(a->tls_server_name, b->tls_server_name) != 0 ||
        a->tls_insecure != b->tls_insecure ||
        strcmp(a->sentinel_username, b->sentinel_username) != 0 ||
        strcmp(a->sentinel_password, b->sentinel_password) != 0)
        return 0;
    if (a->cluster != b->cluster || a->naddrs != b->naddrs ||
        strcmp(a->username, b->username) != 0 ||
        a->has_password != b->has_password || a->db != b->db ||
        a->connect_timeout_ms != b->connect_timeout_ms ||
        a->timeout_ms != b->timeout_ms || a->pool != b->pool ||
        a->on_failure != b->on_failure || a->mode != b->mode ||
        a->deny_cache != b->deny_cache)
        return 0;
    for (size_t i = 0; i < a->naddrs; i++)
        if (strcmp(a->addrs[i].host, b->addrs[i].host) != 0 ||
            a->addrs[i].port != b->addrs[i].port)
            return 0;
    return 1;
}

/*
 * Parses url and checks the outcome; returns the result code, the parsed
 * URL in *u (on success) and the message in err (ERR_CAP bytes, on error).
 */
static int check_url(const char *url, ratel_redis_url_t *u, char *err)
{
    static ratel_redis_url_t again;
    int rc;

    memset(err, 'X', ERR_CAP);
    rc = ratel__redis_url_parse(url, u, err, ERR_CAP);
    ASSERT(rc == 0 || rc == RATEL_EINVAL);
    ASSERT(ratel__redis_url_parse(url, &again, NULL, 0) == rc);
    if (rc == 0) {
        check_parsed(url, u);
        ASSERT(same_but_password(u, &again));
        ASSERT(strcmp(u->password, again.password) == 0);
        return 0;
    }
    check_message(err);
    /* Exact heap buffers of 1, 7 and some other size: snprintf truncation. */
    {
        size_t full = strlen(err);
        size_t caps[3] = {1, 7, 1 + strlen(url) % (full + 1)};
        for (size_t i = 0; i < 3; i++) {
            char *b = malloc(caps[i]);
            ASSERT(b);
            memset(b, 'X', caps[i]);
            ASSERT(ratel__redis_url_parse(url, &again, b, caps[i]) == rc);
            ASSERT(strlen(b) == (caps[i] - 1 < full ? caps[i] - 1 : full));
            ASSERT(memcmp(b, err, strlen(b)) == 0);
            free(b);
        }
    }
    return rc;
}

/*
 * The password shapes no message: replaces the input's well-formed
 * password by as many 'Q' as it has decoded bytes and compares. Returns
 * the twin's message ("" when it parsed), or NULL when the input has no
 * well-formed password.
 */
static const char *check_password_twin(const char *url, int rc,
                                       const ratel_redis_url_t *u,
                                       const char *err)
{
    static ratel_redis_url_t twin_url;
    static char twin_err[ERR_CAP];
    size_t len = strlen(url), start, at, colon, decoded = 0;
    char *twin;
    int twin_rc;

    start = authority(url);
    if (start == 0)
        return NULL;
    for (at = len; at > start && url[at - 1] != '@'; at--)
        ;
    if (at == start)
        return NULL; /* no '@' */
    at--;
    for (colon = start; colon < at && url[colon] != ':'; colon++)
        ;
    if (colon == at)
        return NULL; /* no password */
    for (size_t i = colon + 1; i < at; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c == '%') {
            if (i + 2 >= at || hex_value(url[i + 1]) < 0 ||
                hex_value(url[i + 2]) < 0 ||
                (url[i + 1] == '0' && url[i + 2] == '0'))
                return NULL; /* malformed: its own error */
            i += 2;
        } else if (c <= 0x20 || c >= 0x7f || c == '/' || c == '?' || c == '#') {
            return NULL;
        }
        decoded++;
    }

    twin = malloc(len + decoded + 1);
    ASSERT(twin);
    memcpy(twin, url, colon + 1);
    memset(twin + colon + 1, 'Q', decoded);
    memcpy(twin + colon + 1 + decoded, url + at, len - at + 1);
    twin_rc = check_url(twin, &twin_url, twin_err);
    ASSERT(twin_rc == rc);
    if (rc == 0) {
        ASSERT(same_but_password(u, &twin_url));
        ASSERT(strlen(u->password) == decoded);
        ASSERT(strspn(twin_url.password, "Q") == decoded &&
               twin_url.password[decoded] == '\0');
    } else {
        ASSERT(strcmp(err, twin_err) == 0);
    }
    free(twin);
    if (rc == 0)
        twin_err[0] = '\0';
    return twin_err;
}

/*
 * A valid URL with a password of 4 bytes or more, made invalid with a '#':
 * the message must not hold the password (unless its 'Q' twin's does too).
 */
static void check_password_literally(const char *url,
                                     const ratel_redis_url_t *u)
{
    static ratel_redis_url_t bad_url;
    static char bad_err[ERR_CAP];
    size_t len = strlen(url);
    const char *twin_err;
    char *bad;

    if (!u->has_password || strlen(u->password) < 4)
        return;
    bad = malloc(len + 3);
    ASSERT(bad);
    memcpy(bad, url, len);
    memcpy(bad + len, "#x", 3);
    ASSERT(check_url(bad, &bad_url, bad_err) == RATEL_EINVAL);
    /* The password parsed, so it is well formed: the twin exists. */
    twin_err = check_password_twin(bad, RATEL_EINVAL, &bad_url, bad_err);
    ASSERT(twin_err != NULL);
    ASSERT(strstr(bad_err, u->password) == NULL ||
           strstr(twin_err, u->password) != NULL);
    free(bad);
}

/* "redis://:MARKER@" + input, raw and percent-encoded. */
static void check_marker(const char *input)
{
    static ratel_redis_url_t mu;
    static char merr[ERR_CAP];
    static const char *const prefixes[] = {"redis://:", "redis://u:%5A",
                                           "redis+cluster://:"};
    size_t len = strlen(input);

    if (strstr(input, marker_tail) != NULL)
        return;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const char *secret = i == 1 ? marker_tail : marker;
        size_t plen = strlen(prefixes[i]), slen = strlen(secret);
        char *url = malloc(plen + slen + 1 + len + 1);
        ASSERT(url);
        memcpy(url, prefixes[i], plen);
        memcpy(url + plen, secret, slen);
        url[plen + slen] = '@';
        memcpy(url + plen + slen + 1, input, len + 1);
        if (check_url(url, &mu, merr) == 0)
            ASSERT(mu.has_password && strncmp(mu.password, marker, 8) == 0);
        else
            ASSERT(strstr(merr, marker_tail) == NULL);
        free(url);
    }
    /* The Sentinels' password, given before the input's own query. */
    {
        static const char pre[] = "redis+sentinel://h/m?sentinel_password=";
        size_t plen = sizeof pre - 1, slen = strlen(marker);
        char *url = malloc(plen + slen + 1 + len + 1);
        ASSERT(url);
        memcpy(url, pre, plen);
        memcpy(url + plen, marker, slen);
        url[plen + slen] = '&';
        memcpy(url + plen + slen + 1, input, len + 1);
        if (check_url(url, &mu, merr) == 0)
            ASSERT(strcmp(mu.sentinel_password, marker) == 0);
        else
            ASSERT(strstr(merr, marker_tail) == NULL);
        free(url);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ratel_redis_url_t u;
    static char err[ERR_CAP];
    char *url = malloc(size + 1);
    int rc;

    ASSERT(url);
    memcpy(url, data, size);
    url[size] = '\0';

    rc = check_url(url, &u, err);
    check_password_twin(url, rc, &u, err);
    if (rc == 0)
        check_password_literally(url, &u);
    check_marker(url);
    free(url);
    return 0;
}
