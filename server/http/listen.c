/*
 * listen.c - the addresses an HTTP server listens on (listen.h).
 */
#include "http/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* Whether c may be in a listen address's host outside brackets: a DNS
   name's characters, which cover an IPv4 address's too. */
static int host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* The port after the host: 1 to 5 digits, 0..65535, and nothing else. */
static int listen_port(const char *port, unsigned *out, char *why,
                       size_t whylen)
{
    size_t n = strlen(port);
    unsigned v = 0;

    if (n == 0) {
        snprintf(why, whylen, "the port is missing (e.g. :8080)");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (port[i] < '0' || port[i] > '9' || i == 5) {
            snprintf(why, whylen,
                     "the port \"%.16s%s\" is not a number 0..65535", port,
                     n > 16 ? "..." : "");
            return -1;
        }
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned)(port[i] - '0');
    if (v > 65535) {
        snprintf(why, whylen, "the port %u is out of range; accepted: 0..65535",
                 v);
        return -1;
    }
    *out = v;
    return 0;
}

/* [IPV6] at text: the address into out->host; *rest after ']'. */
static int listen_ipv6(const char *text, ratel_http_listen_t *out,
                       const char **rest, char *why, size_t whylen)
{
    const char *close = strchr(text, ']');
    unsigned char bin[16];
    size_t hn;

    if (!close) {
        snprintf(why, whylen, "'[' without its ']' (e.g. [::1]:8080)");
        return -1;
    }
    hn = (size_t)(close - text - 1);
    if (hn >= sizeof out->host) {
        snprintf(why, whylen, "the address in brackets is too long");
        return -1;
    }
    memcpy(out->host, text + 1, hn);
    out->host[hn] = '\0';
    if (inet_pton(AF_INET6, out->host, bin) != 1) {
        snprintf(why, whylen,
                 "\"%.64s\" in brackets is not an IPv6 address (e.g. "
                 "[::1]:8080, [::]:8080)",
                 out->host);
        return -1;
    }
    if (close[1] != ':') {
        snprintf(why, whylen, "expected ':' and the port after ']'");
        return -1;
    }
    out->ipv6 = 1;
    *rest = close + 2;
    return 0;
}

int ratel_http_listen_parse(const char *text, ratel_http_listen_t *out,
                            char *why, size_t whylen)
{
    const char *colon, *port;
    size_t hn;

    memset(out, 0, sizeof *out);
    if (!text)
        text = "";
    if (text[0] == '[') {
        if (listen_ipv6(text, out, &port, why, whylen) != 0)
            return -1;
        return listen_port(port, &out->port, why, whylen);
    }
    colon = strchr(text, ':');
    if (!colon) {
        snprintf(why, whylen, "no ':' before the port");
        return -1;
    }
    if (strchr(colon + 1, ':')) {
        snprintf(why, whylen,
                 "an IPv6 address goes in brackets (e.g. [::1]:8080)");
        return -1;
    }
    hn = (size_t)(colon - text);
    if (hn >= sizeof out->host) {
        snprintf(why, whylen, "the host is longer than %d bytes",
                 RATEL_HTTP_LISTEN_HOST_MAX);
        return -1;
    }
    for (size_t i = 0; i < hn; i++)
        if (!host_char(text[i])) {
            unsigned char c = (unsigned char)text[i];
            snprintf(why, whylen,
                     c >= 0x20 && c < 0x7f
                         ? "the host holds '%c'; a host is a name or an IPv4 "
                           "address (letters, digits, '.' and '-')"
                         : "the host holds the byte 0x%02x; a host is a name "
                           "or an IPv4 address (letters, digits, '.' and '-')",
                     c);
            return -1;
        }
    memcpy(out->host, text, hn);
    out->host[hn] = '\0';
    return listen_port(colon + 1, &out->port, why, whylen);
}

/* A listen address into *ss / *len: parsed by ratel_http_listen_parse,
   then the host resolved (an empty one is every IPv4 address). */
int ratel__parse_listen(const char *text, struct sockaddr_storage *ss,
                        socklen_t *len, char *err, size_t errlen)
{
    ratel_http_listen_t a;
    char why[200];
    struct addrinfo hints, *res = NULL;

    memset(ss, 0, sizeof *ss);
    if (!text)
        text = "";
    if (ratel_http_listen_parse(text, &a, why, sizeof why) != 0) {
        snprintf(err, errlen,
                 "listen \"%.80s\": expected HOST:PORT (\"127.0.0.1:8080\", "
                 "\"[::1]:8080\" or \":8080\"): %s",
                 text, why);
        return -1;
    }
    if (a.host[0] == '\0') {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_ANY);
        in->sin_port = htons((uint16_t)a.port);
        *len = sizeof *in;
        return 0;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = a.ipv6 ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(a.host, NULL, &hints, &res) != 0 || !res) {
        snprintf(err, errlen, "listen \"%.80s\": cannot resolve host \"%s\"",
                 text, a.host);
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)a.port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)a.port);
    return 0;
}

/* The address as text ("127.0.0.1:8080", "[::1]:8080"), whatever its
   spelling in the configuration. */
void ratel__address_text(const struct sockaddr_storage *ss, char *buf,
                         size_t len)
{
    char host[INET6_ADDRSTRLEN];

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    }
}

void ratel__address_host(const struct sockaddr_storage *ss, char *buf,
                         size_t len)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
                                       0, 0, 0, 0, 0xff, 0xff};
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

    if (len)
        buf[0] = '\0';
    if (ss->ss_family == AF_INET6 &&
        memcmp(in6->sin6_addr.s6_addr, mapped, sizeof mapped) != 0)
        inet_ntop(AF_INET6, &in6->sin6_addr, buf, (socklen_t)len);
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET, in6->sin6_addr.s6_addr + 12, buf, (socklen_t)len);
    else if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len);
    else
        snprintf(buf, len, "-");
}

static int claim_failed(const char *text, char *err, size_t errlen)
{
    if (errno == EADDRINUSE)
        snprintf(err, errlen, "listen %s: already served by another process",
                 text);
    else
        snprintf(err, errlen, "listen %s: %s", text, strerror(errno));
    return -1;
}

/*
 * One server per address. The workers' sockets use SO_REUSEPORT to share
 * the port, which would also let a second server (another rateld) join
 * it silently and take half of the connections: every limit doubled. So
 * first a probe socket is bound without SO_REUSEPORT: it fails with
 * EADDRINUSE if anything listens there (SO_REUSEADDR only forgives old
 * TIME_WAIT connections of a previous run). Two servers starting at the
 * same moment could both pass the probe before either listens; the
 * abstract AF_UNIX socket "ratel-http-listen ADDRESS" closes that race:
 * binding it is atomic, the kernel frees it when the process dies, and
 * it is held until this server stops listening. Port 0 is never shared.
 */
int ratel__claim_address(address_t *a, char *err, size_t errlen)
{
    const char *text = a->text;
    const struct sockaddr_storage *ss = &a->ss;
    socklen_t len = a->len;
    struct sockaddr_un un;
    char addr[INET6_ADDRSTRLEN + 8];
    int n, one = 1, fd, probe;

    ratel__address_text(ss, addr, sizeof addr);
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    /* sun_path[0] stays NUL: the abstract namespace, no file. */
    n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1,
                 "ratel-http-listen %s", addr);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return claim_failed(text, err, errlen);
    if (bind(fd, (struct sockaddr *)&un,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                         (size_t)n)) != 0) {
        claim_failed(text, err, errlen);
        close(fd);
        return -1;
    }
    atomic_store(&a->claim_fd, fd);
    probe = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0 ||
        setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(probe, (const struct sockaddr *)ss, len) != 0) {
        claim_failed(text, err, errlen);
        if (probe >= 0)
            close(probe);
        return -1;
    }
    close(probe);
    return 0;
}

unsigned ratel__port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

int ratel__open_listener(const char *text, struct sockaddr_storage *ss,
                         socklen_t len, char *err, size_t errlen)
{
    int one = 1;
    int fd =
        socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)ss, len) != 0 || listen(fd, 4096) != 0) {
        snprintf(err, errlen, "listen %s: %s", text, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}
