/*
 * servers_tls.c - the TLS side of the test servers (servers.h): the test
 * certificates, and one command at a time to a TLS-only redis-server over
 * a blocking socket (Debian's hiredis 0.14 has no TLS; its reply reader
 * parses what OpenSSL decrypts).
 *
 * The harness's own client checks nothing about the server (it starts
 * servers with expired or misnamed certificates on purpose and must still
 * see them come up); it presents certs/client.crt, so servers with
 * tls-auth-clients yes answer it too.
 */
#include "servers.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define TLS_CMD_TIMEOUT_MS 5000

/* tls_certs.sh from the source tree: tests/integration/ under the working
   directory, else beside this program's build directory (BUILD/..). */
static const char *default_script(char *buf, size_t cap)
{
    static const char rel[] = "tests/integration/tls_certs.sh";
    char exe[PATH_MAX];
    ssize_t n;
    char *slash;

    if (access(rel, R_OK) == 0)
        return rel;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return rel;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(buf, cap, "%.3900s/../%s", exe, rel);
    return buf;
}

int test_tls_certs(char *dir, size_t cap)
{
    const char *script = getenv("RATEL_TLS_CERTS_SH");
    char path[PATH_MAX], found[PATH_MAX], cmd[PATH_MAX * 2 + 64];
    char marker[PATH_MAX + 16];
    struct stat st;
    int status;

    const char *root = test_servers_root_make();

    if (root == NULL)
        return -1;
    if (script == NULL)
        script = default_script(path, sizeof(path));
    snprintf(dir, cap, "%s/certs", root);
    snprintf(marker, sizeof(marker), "%s/client.key", dir);
    if (stat(marker, &st) == 0)
        return 0;
    if (realpath(script, found) == NULL) {
        fprintf(stderr,
                "test_tls_certs: %s: %s (run from the source tree, "
                "or set RATEL_TLS_CERTS_SH)\n",
                script, strerror(errno));
        return -1;
    }
    snprintf(cmd, sizeof(cmd), "sh '%s' '%s' >'%s.log' 2>&1", found, dir, dir);
    status = system(cmd);
    if (status != 0 || stat(marker, &st) != 0) {
        fprintf(stderr, "test_tls_certs: %s failed (status %d); see %s.log\n",
                found, status, dir);
        return -1;
    }
    return 0;
}

/* A blocking TCP connection to 127.0.0.1:port with send and receive
   timeouts, or -1. */
static int tcp_connect(int port, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The harness's client context: no verification, the test client
   certificate presented. NULL with the reason in err. */
static SSL_CTX *client_ctx(const char *certs, char *err, size_t errlen)
{
    char cert[PATH_MAX], key[PATH_MAX];
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL) {
        snprintf(err, errlen, "SSL_CTX_new failed");
        return NULL;
    }
    snprintf(cert, sizeof(cert), "%s/client.crt", certs);
    snprintf(key, sizeof(key), "%s/client.key", certs);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        snprintf(err, errlen, "cannot load %s and %s", cert, key);
        SSL_CTX_free(ctx);
        ERR_clear_error();
        return NULL;
    }
    return ctx;
}

/* Sends the formatted command on ssl and reads one whole reply; NULL with
   the reason in err. */
static redisReply *exchange(SSL *ssl, const char *fmt, va_list ap, char *err,
                            size_t errlen)
{
    redisReader *reader;
    redisReply *reply = NULL;
    char *cmd = NULL, buf[16384];
    int len = redisvFormatCommand(&cmd, fmt, ap);

    if (len < 0) {
        snprintf(err, errlen, "cannot format the command");
        return NULL;
    }
    if (SSL_write(ssl, cmd, len) != len) {
        snprintf(err, errlen, "TLS write failed");
        free(cmd);
        return NULL;
    }
    free(cmd);
    reader = redisReaderCreate();
    if (reader == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    while (reply == NULL) {
        void *r = NULL;
        int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) {
            snprintf(err, errlen, "no reply (TLS read failed: %d)",
                     SSL_get_error(ssl, n));
            break;
        }
        if (redisReaderFeed(reader, buf, (size_t)n) != REDIS_OK ||
            redisReaderGetReply(reader, &r) != REDIS_OK) {
            snprintf(err, errlen, "protocol error: %s", reader->errstr);
            break;
        }
        reply = r;
    }
    redisReaderFree(reader);
    return reply;
}

redisReply *test_redis_tls_vcommand(int port, const char *certs, char *err,
                                    size_t errlen, const char *fmt, va_list ap)
{
    SSL_CTX *ctx;
    SSL *ssl = NULL;
    redisReply *reply = NULL;
    int fd;

    err[0] = '\0';
    ctx = client_ctx(certs, err, errlen);
    if (ctx == NULL)
        return NULL;
    fd = tcp_connect(port, TLS_CMD_TIMEOUT_MS);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to port %d", port);
        SSL_CTX_free(ctx);
        return NULL;
    }
    ssl = SSL_new(ctx);
    if (ssl != NULL && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1) {
        reply = exchange(ssl, fmt, ap, err, errlen);
    } else {
        snprintf(err, errlen, "TLS handshake with port %d failed", port);
    }
    ERR_clear_error();
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return reply;
}
