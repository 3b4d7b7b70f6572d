/*
 * test_tls.c - lib/store/tls.c against real TLS-only redis-servers
 * (tests/integration/servers.h starts them; tls_certs.sh makes the
 * certificates): a handshake over a plain blocking socket, a PING, and
 * for each way it can fail, the message a user reads.
 */
#include "test.h"

#include "ratel.h"
#include "store/redis_url.h"
#include "store/tls.h"
#include "tests/integration/servers.h"

#include <openssl/err.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Fails the test with the message when `cond` is false. */
#define CHECK_MSG_TEXT(cond, msg)                                              \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char m_[1200];                                                     \
            snprintf(m_, sizeof m_, "%s: \"%.1000s\"", #cond, (msg));          \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

static char certs[512];

/* A path under the certificates' directory. */
static const char *cert_path(const char *name)
{
    static char paths[8][600];
    static int next;
    char *p = paths[next++ % 8];

    snprintf(p, 600, "%s/%s", certs, name);
    return p;
}

/* A blocking connection to 127.0.0.1:port with 3 s timeouts, or -1. */
static int connect_loopback(int port)
{
    struct timeval tv = {3, 0};
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
        connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * Connects to port with options o and server_name, handshakes, sends PING
 * and reads the answer. Returns 0 when "+PONG" came back; otherwise -1
 * with ratel__tls_describe's message (or the setup's error) in msg.
 */
static int ping(int port, const ratel__tls_options_t *o,
                const char *server_name, char *msg, size_t len)
{
    SSL_CTX *ctx = NULL;
    SSL *ssl = NULL;
    char buf[64];
    int fd = -1, rc = -1, n;

    msg[0] = '\0';
    if (ratel__tls_ctx_new(o, &ctx, msg, len) != 0)
        return -1;
    if (ratel__tls_new(ctx, server_name, o->insecure, &ssl, msg, len) != 0)
        goto done;
    fd = connect_loopback(port);
    if (fd < 0) {
        snprintf(msg, len, "cannot connect");
        goto done;
    }
    SSL_set_fd(ssl, fd);
    n = SSL_connect(ssl);
    if (n != 1) {
        ratel__tls_describe(ssl, SSL_get_error(ssl, n), msg, len);
        goto done;
    }
    /* A TLS 1.3 server judges the client's certificate after the client
       has finished: its refusal comes with the first read. */
    n = SSL_write(ssl, "PING\r\n", 6);
    if (n == 6)
        n = SSL_read(ssl, buf, sizeof buf - 1);
    if (n <= 0) {
        ratel__tls_describe(ssl, SSL_get_error(ssl, n), msg, len);
        goto done;
    }
    buf[n] = '\0';
    rc = strncmp(buf, "+PONG", 5) == 0 ? 0 : -1;
    if (rc != 0)
        snprintf(msg, len, "unexpected answer \"%.20s\"", buf);
done:
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0)
        close(fd);
    ERR_clear_error();
    return rc;
}

/* Starts a TLS-only server on certificate `name`. */
static int start(test_redis_t *r, const char *name, int auth_clients)
{
    static int made;

    if (!made && test_tls_certs(certs, sizeof certs) != 0)
        return -1;
    made = 1;
    return test_redis_start_tls(r, certs, name, auth_clients, NULL, NULL);
}

TEST(tls_verified_handshakes)
{
    test_redis_t r;
    char msg[512];
    ratel__tls_options_t o = {0};

    REQUIRE(start(&r, "server", 0) == 0);
    o.ca_file = cert_path("ca.crt");
    CHECK_MSG_TEXT(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) == 0, msg);
    CHECK_MSG_TEXT(ping(r.port, &o, "localhost", msg, sizeof msg) == 0, msg);
    CHECK_MSG_TEXT(ping(r.port, &o, "::1", msg, sizeof msg) == 0, msg);

    /* Another CA: the verify result says so, with a hint. */
    o.ca_file = cert_path("other-ca.crt");
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    /* redis-server sends its chain up to the root CA (OpenSSL completes
       it from tls-ca-cert-file): the root is then the one not trusted. */
    CHECK_MSG_TEXT(
        strcmp(msg, "certificate verify failed: self-signed certificate in "
                    "certificate chain (is tls_ca_file the CA that signed "
                    "the server's certificate?)") == 0 ||
            strcmp(msg, "certificate verify failed: unable to get local "
                        "issuer certificate (is tls_ca_file the CA that "
                        "signed the server's certificate?)") == 0,
        msg);
    /* The system's CAs do not know the test CA either. */
    o.ca_file = NULL;
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strncmp(msg, "certificate verify failed: ", 27) == 0 &&
                       strstr(msg, "(is tls_ca_file the CA") != NULL,
                   msg);
    /* Unless verification is off. */
    o.ca_file = cert_path("other-ca.crt");
    o.insecure = 1;
    CHECK_MSG_TEXT(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) == 0, msg);
    CHECK_MSG_TEXT(ping(r.port, &o, NULL, msg, sizeof msg) == 0, msg);

    /* A name the certificate does not carry. */
    o.ca_file = cert_path("ca.crt");
    o.insecure = 0;
    CHECK(ping(r.port, &o, "redis.example.com", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strcmp(msg, "the server's certificate is for localhost, "
                               "127.0.0.1, ::1, not redis.example.com (set "
                               "tls_server_name?)") == 0,
                   msg);
    CHECK(ping(r.port, &o, "10.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strstr(msg, ", not 10.0.0.1 (set tls_server_name?)") != NULL,
                   msg);
    test_redis_free(&r);
}

TEST(tls_certificate_problems_named)
{
    test_redis_t r;
    char msg[512];
    ratel__tls_options_t o = {0};

    o.ca_file = cert_path("ca.crt");
    REQUIRE(start(&r, "expired", 0) == 0);
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strncmp(msg,
                           "the server's certificate has expired "
                           "(notAfter ",
                           46) == 0 &&
                       strstr(msg, " GMT)") != NULL,
                   msg);
    test_redis_free(&r);

    REQUIRE(start(&r, "wrong-name", 0) == 0);
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strcmp(msg, "the server's certificate is for "
                               "redis.example.com, not 127.0.0.1 (set "
                               "tls_server_name?)") == 0,
                   msg);
    /* tls_server_name names what the certificate carries. */
    CHECK_MSG_TEXT(ping(r.port, &o, "redis.example.com", msg, sizeof msg) == 0,
                   msg);
    CHECK_MSG_TEXT(ping(r.port, &o, "REDIS.example.com", msg, sizeof msg) == 0,
                   msg);
    test_redis_free(&r);
}

TEST(tls_client_certificates)
{
    test_redis_t r;
    char msg[512];
    ratel__tls_options_t o = {0};

    REQUIRE(start(&r, "server", 1) == 0);
    o.ca_file = cert_path("ca.crt");
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strcmp(msg, "the server asked for a client certificate "
                               "(set tls_cert_file and tls_key_file)") == 0,
                   msg);
    o.cert_file = cert_path("client.crt");
    o.key_file = cert_path("client.key");
    CHECK_MSG_TEXT(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) == 0, msg);
    /* A certificate the server's CA did not sign. */
    o.cert_file = cert_path("other-client.crt");
    o.key_file = cert_path("other-client.key");
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    CHECK_MSG_TEXT(strstr(msg, "our client certificate") != NULL &&
                       strstr(msg, "tls-ca-cert-file") != NULL,
                   msg);
    test_redis_free(&r);
}

TEST(tls_plain_port)
{
    test_redis_t r;
    char msg[512];
    ratel__tls_options_t o = {0};

    REQUIRE(start(&r, "server", 0) == 0); /* makes the certificates */
    test_redis_free(&r);
    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    o.ca_file = cert_path("ca.crt");
    CHECK(ping(r.port, &o, "127.0.0.1", msg, sizeof msg) != 0);
    /* The plain server answers the hello with an error line (not a TLS
       record), or waits for the end of a line that never comes. */
    CHECK_MSG_TEXT(strcmp(msg, "not TLS (is this a plain redis:// port?)") ==
                           0 ||
                       strcmp(msg, "no TLS answer from the server in time "
                                   "(is this a plain redis:// port?)") == 0,
                   msg);
    test_redis_free(&r);
}

TEST(tls_context_errors_name_the_file)
{
    static const struct {
        const char *ca, *cert, *key, *says;
    } bad[] = {
        {"missing.crt", NULL, NULL,
         "tls_ca_file \"CERTS/missing.crt\": No such file or directory"},
        {"client.key", NULL, NULL,
         "tls_ca_file \"CERTS/client.key\": holds no PEM CA certificate"},
        {"ca.crt", "client.crt", NULL,
         "tls_cert_file is given without tls_key_file"},
        {"ca.crt", NULL, "client.key",
         "tls_key_file is given without tls_cert_file"},
        {"ca.crt", "missing.crt", "client.key",
         "tls_cert_file \"CERTS/missing.crt\": No such file or directory"},
        {"ca.crt", "client.key", "client.key",
         "tls_cert_file \"CERTS/client.key\": not a PEM certificate"},
        {"ca.crt", "client.crt", "client.crt",
         "tls_key_file \"CERTS/client.crt\": not an unencrypted PEM private "
         "key"},
        {"ca.crt", "client.crt", "server.key",
         "tls_key_file \"CERTS/server.key\" is not the key of tls_cert_file "
         "\"CERTS/client.crt\""},
    };
    test_redis_t r;

    REQUIRE(start(&r, "server", 0) == 0); /* makes the certificates */
    test_redis_free(&r);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel__tls_options_t o = {0};
        char err[1024] = "", want[1024];
        const char *at;
        SSL_CTX *ctx = (SSL_CTX *)1;
        o.ca_file = bad[i].ca ? cert_path(bad[i].ca) : NULL;
        o.cert_file = bad[i].cert ? cert_path(bad[i].cert) : NULL;
        o.key_file = bad[i].key ? cert_path(bad[i].key) : NULL;
        CHECK_EQ(ratel__tls_ctx_new(&o, &ctx, err, sizeof err), RATEL_EINVAL);
        CHECK(ctx == NULL);
        /* "CERTS" stands for the directory. */
        want[0] = '\0';
        for (const char *p = bad[i].says; *p;) {
            at = strstr(p, "CERTS");
            if (!at) {
                strncat(want, p, sizeof want - strlen(want) - 1);
                break;
            }
            strncat(want, p, (size_t)(at - p));
            strncat(want, certs, sizeof want - strlen(want) - 1);
            p = at + 5;
        }
        CHECK_MSG_TEXT(strstr(err, want) != NULL, err);
        CHECK(ERR_peek_error() == 0);
    }
    /* No name to check is refused unless verification is off. */
    {
        ratel__tls_options_t o = {0};
        SSL_CTX *ctx;
        SSL *ssl;
        char err[256];
        o.ca_file = cert_path("ca.crt");
        REQUIRE(ratel__tls_ctx_new(&o, &ctx, err, sizeof err) == 0);
        CHECK_EQ(ratel__tls_new(ctx, "", 0, &ssl, err, sizeof err),
                 RATEL_EINVAL);
        CHECK(strstr(err, "no server name") != NULL);
        CHECK_EQ(ratel__tls_new(ctx, NULL, 1, &ssl, err, sizeof err), 0);
        SSL_free(ssl);
        SSL_CTX_free(ctx);
    }
}

/* The store's TLS settings: options over the URL's, and no TLS setting
   for a plain URL. */
TEST(tls_options_pick)
{
    ratel_redis_url_t u;
    ratel_redis_options_t o;
    ratel__tls_options_t t;
    char err[512] = "";

    memset(&o, 0, sizeof o);
    REQUIRE(ratel__redis_url_parse("rediss://h?tls_ca_file=url-ca.crt&"
                                   "tls_server_name=url.example.com",
                                   &u, err, sizeof err) == 0);
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err), 0);
    CHECK(t.ca_file && strcmp(t.ca_file, "url-ca.crt") == 0);
    CHECK(t.server_name && strcmp(t.server_name, "url.example.com") == 0);
    CHECK(t.cert_file == NULL && t.key_file == NULL && t.insecure == 0);
    o.tls_ca_file = "option-ca.crt";
    o.tls_cert_file = "c.crt";
    o.tls_key_file = "c.key";
    o.tls_insecure = 1;
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err), 0);
    CHECK(strcmp(t.ca_file, "option-ca.crt") == 0);
    CHECK(strcmp(t.cert_file, "c.crt") == 0 &&
          strcmp(t.key_file, "c.key") == 0);
    CHECK_EQ(t.insecure, 1);
    /* The key from the options, the certificate from nowhere. */
    o.tls_cert_file = NULL;
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err),
             RATEL_EINVAL);
    CHECK_MSG_TEXT(strstr(err, "tls_key_file is given without tls_cert_file") !=
                       NULL,
                   err);

    /* A plain URL: no TLS, and a TLS option says which scheme to use. */
    memset(&o, 0, sizeof o);
    REQUIRE(ratel__redis_url_parse("redis://h", &u, err, sizeof err) == 0);
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err), 0);
    CHECK(t.ca_file == NULL && t.server_name == NULL && t.insecure == 0);
    o.tls_server_name = "x";
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err),
             RATEL_EINVAL);
    CHECK_MSG_TEXT(strstr(err, "tls_server_name is a TLS setting and the URL "
                               "is plain TCP: use rediss://") != NULL,
                   err);
    o.tls_server_name = NULL;
    o.sentinel_password = "pw";
    CHECK_EQ(ratel__tls_options_pick(&u, &o, &t, err, sizeof err),
             RATEL_EINVAL);
    CHECK_MSG_TEXT(strstr(err, "for redis+sentinel://") != NULL &&
                       strstr(err, "pw") == NULL,
                   err);
}

RATEL_SUITE(tls) = {
    {"tls_options_pick", test_tls_options_pick},
    {"tls_verified_handshakes", test_tls_verified_handshakes},
    {"tls_certificate_problems_named", test_tls_certificate_problems_named},
    {"tls_client_certificates", test_tls_client_certificates},
    {"tls_plain_port", test_tls_plain_port},
    {"tls_context_errors_name_the_file", test_tls_context_errors_name_the_file},
    {0, 0},
};
