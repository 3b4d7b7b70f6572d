/*
 * transport_sock.c - socket options, the clock and the client-certificate
 * watch the transports share (transport_sock.h).
 */
#include "store/transport_sock.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#define KEEPALIVE_IDLE_S 15
#define KEEPALIVE_INTERVAL_S 5
#define KEEPALIVE_PROBES 3

int64_t ratel__transport_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void ratel__transport_socket_options(int fd)
{
    int one = 1, idle = KEEPALIVE_IDLE_S, interval = KEEPALIVE_INTERVAL_S,
        probes = KEEPALIVE_PROBES;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

/* The mark of a session whose server asked for a client certificate: an
   ex_data slot of our own, so the SSL's app data stays its owner's. */
static int asked_index = -1;
static pthread_once_t asked_once = PTHREAD_ONCE_INIT;

static void asked_init(void)
{
    asked_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static void watch_cb(const SSL *ssl, int where, int ret)
{
    (void)ret;
    if ((where & SSL_CB_LOOP) && SSL_get_state(ssl) == TLS_ST_CR_CERT_REQ &&
        asked_index >= 0)
        SSL_set_ex_data((SSL *)ssl, asked_index, (void *)1);
}

void ratel__transport_tls_watch(SSL *ssl)
{
    pthread_once(&asked_once, asked_init);
    SSL_set_info_callback(ssl, watch_cb);
}

int ratel__transport_tls_asked(const SSL *ssl)
{
    return asked_index >= 0 && SSL_get_ex_data(ssl, asked_index) != NULL;
}
