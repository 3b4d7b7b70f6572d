/*
 * tls_servers.h - certificates and TLS-only redis-servers for C tests of
 * the Redis store's TLS, beside servers.h (plain servers):
 *
 *   test_tls_certs(dir);                  (openssl(1) makes them)
 *   test_tls_redis_t s;
 *   test_tls_redis_start(&s, dir, "server", 0, NULL);
 *   ... connect to 127.0.0.1:s.port with TLS, CA dir/ca.crt ...
 *   test_tls_redis_stop(&s);
 *
 * Not thread-safe, as servers.h: call from the thread that outlives the
 * servers (PR_SET_PDEATHSIG watches it).
 */
#ifndef RATEL_TEST_TLS_SERVERS_H
#define RATEL_TEST_TLS_SERVERS_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Makes, in dir (which exists), with EC P-256 keys valid for 2 days:
 *
 *   ca.crt, ca.key           the test CA
 *   other.crt, other.key     another CA, which signed nothing here
 *   server.crt, server.key   CN=localhost, subjectAltName DNS:localhost
 *                            and IP:127.0.0.1, signed by the CA
 *   expired.crt, expired.key the same names, signed by the CA, expired
 *   client.crt, client.key   CN=ratel-test-client, signed by the CA (for
 *                            tls-auth-clients yes)
 *
 * Returns 0, or -1 with openssl's output in dir/openssl.log (and a line
 * on stderr).
 */
int test_tls_certs(const char *dir);

typedef struct test_tls_redis_s {
    int port;  /* its TLS port on 127.0.0.1 (it has no plain port) */
    pid_t pid; /* 0 when not running */
} test_tls_redis_t;

/*
 * Starts redis-server with --port 0 --tls-port P --bind 127.0.0.1
 * --tls-cert-file DIR/CERT.crt --tls-key-file DIR/CERT.key
 * --tls-ca-cert-file DIR/ca.crt --tls-auth-clients yes|no (auth_clients),
 * no persistence, its log in DIR/redis-P.log, then EXTRA (NULL or a
 * NULL-terminated list), P a free port (test_free_port()); waits up to
 * 10 s until the port accepts connections. cert is "server" or "expired"
 * (test_tls_certs()). Returns 0, or -1 with the reason on stderr. The
 * server dies with the thread that started it (PR_SET_PDEATHSIG).
 */
int test_tls_redis_start(test_tls_redis_t *s, const char *dir, const char *cert,
                         int auth_clients, const char *const *extra);

/* SIGKILL and reap; no-op when not running. */
void test_tls_redis_stop(test_tls_redis_t *s);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_TEST_TLS_SERVERS_H */
