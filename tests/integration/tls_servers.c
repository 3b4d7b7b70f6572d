/*
 * tls_servers.c - certificates by openssl(1) and TLS-only redis-servers
 * (tls_servers.h says what each function promises).
 */
#include "tls_servers.h"

#include "servers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define START_TIMEOUT_MS 10000
#define POLL_INTERVAL_MS 20

int test_tls_certs(const char *dir)
{
    /* One shell line per file; `K` is the key type of all of them. */
    static const char script[] =
        "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes' && "
        "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 "
        "-subj /CN=ratel-test-ca && "
        "openssl req -x509 $K -keyout other.key -out other.crt -days 2 "
        "-subj /CN=ratel-other-ca && "
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' >server.ext && "
        "openssl req $K -keyout server.key -out server.csr "
        "-subj /CN=localhost && "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key "
        "-CAcreateserial -out server.crt -days 2 -extfile server.ext && "
        "openssl req $K -keyout expired.key -out expired.csr "
        "-subj /CN=localhost && "
        "openssl x509 -req -in expired.csr -CA ca.crt -CAkey ca.key "
        "-CAcreateserial -out expired.crt -days -1 -extfile server.ext && "
        "openssl req $K -keyout client.key -out client.csr "
        "-subj /CN=ratel-test-client && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key "
        "-CAcreateserial -out client.crt -days 2";
    char cmd[sizeof script + 1200];

    snprintf(cmd, sizeof cmd, "(cd '%s' && %s) >'%s/openssl.log' 2>&1", dir,
             script, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "openssl could not make the certificates: %s\n", dir);
        return -1;
    }
    return 0;
}

static int port_accepts(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* In the child: redis-server with the TLS arguments, then extra. */
static void exec_server(const char *dir, const char *cert, int port,
                        int auth_clients, const char *const *extra)
{
    char p[16], f[4][600];
    const char *argv[64];
    int n = 0;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(p, sizeof p, "%d", port);
    snprintf(f[0], sizeof f[0], "%s/%s.crt", dir, cert);
    snprintf(f[1], sizeof f[1], "%s/%s.key", dir, cert);
    snprintf(f[2], sizeof f[2], "%s/ca.crt", dir);
    snprintf(f[3], sizeof f[3], "%s/redis-%d.log", dir, port);
    const char *fixed[] = {"redis-server",
                           "--port",
                           "0",
                           "--tls-port",
                           p,
                           "--bind",
                           "127.0.0.1",
                           "--tls-cert-file",
                           f[0],
                           "--tls-key-file",
                           f[1],
                           "--tls-ca-cert-file",
                           f[2],
                           "--tls-auth-clients",
                           auth_clients ? "yes" : "no",
                           "--save",
                           "",
                           "--appendonly",
                           "no",
                           "--dir",
                           dir,
                           "--logfile",
                           f[3],
                           NULL};
    for (int i = 0; fixed[i]; i++)
        argv[n++] = fixed[i];
    for (int i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    execvp("redis-server", (char *const *)argv);
    _exit(127);
}

int test_tls_redis_start(test_tls_redis_t *s, const char *dir, const char *cert,
                         int auth_clients, const char *const *extra)
{
    int status;

    memset(s, 0, sizeof *s);
    s->port = test_free_port();
    if (s->port < 0)
        return -1;
    s->pid = fork();
    if (s->pid == 0)
        exec_server(dir, cert, s->port, auth_clients, extra);
    if (s->pid < 0) {
        s->pid = 0;
        perror("fork");
        return -1;
    }
    for (int waited = 0; waited < START_TIMEOUT_MS;
         waited += POLL_INTERVAL_MS) {
        if (port_accepts(s->port))
            return 0;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            break;
        }
        usleep(POLL_INTERVAL_MS * 1000);
    }
    fprintf(stderr,
            "the TLS redis-server on port %d did not start: see "
            "%s/redis-%d.log\n",
            s->port, dir, s->port);
    test_tls_redis_stop(s);
    return -1;
}

void test_tls_redis_stop(test_tls_redis_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}
