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

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (all IPv4 addresses). */
int ratel__parse_listen(const char *text, struct sockaddr_storage *ss,
                        socklen_t *len, char *err, size_t errlen)
{
    char host[256];
    const char *colon, *port;
    char *end;
    unsigned long p;
    size_t hn;
    struct addrinfo hints, *res = NULL;

    memset(ss, 0, sizeof *ss);
    if (!text)
        text = "";
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            goto bad;
        hn = (size_t)(close - text - 1);
        if (hn == 0 || hn >= sizeof host)
            goto bad;
        memcpy(host, text + 1, hn);
        host[hn] = '\0';
        port = close + 2;
    } else {
        colon = strrchr(text, ':');
        if (!colon || memchr(text, ':', (size_t)(colon - text)))
            goto bad;
        hn = (size_t)(colon - text);
        if (hn >= sizeof host)
            goto bad;
        memcpy(host, text, hn);
        host[hn] = '\0';
        port = colon + 1;
    }
    if (*port < '0' || *port > '9')
        goto bad;
    errno = 0;
    p = strtoul(port, &end, 10);
    if (*end || errno || p > 65535)
        goto bad;
    if (host[0] == '\0') {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_ANY);
        in->sin_port = htons((uint16_t)p);
        *len = sizeof *in;
        return 0;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = text[0] == '[' ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
        snprintf(err, errlen, "listen \"%s\": cannot resolve host \"%s\"", text,
                 host);
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)p);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)p);
    return 0;
bad:
    snprintf(err, errlen,
             "listen \"%s\": expected HOST:PORT (\"127.0.0.1:8080\", "
             "\"[::1]:8080\" or \":8080\")",
             text);
    return -1;
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
