/*
 * transport_driver.h - what the transports' unit tests (test_transport.c)
 * drive them with: a driver (a transport, its loop and a test engine's
 * hooks), test links that record their callbacks, and the servers they
 * talk to (a plain redis-server, TLS-only ones and their certificates).
 *
 * Every wait is bounded: driver_wait() arms the test engine's one timer
 * as a watchdog, so a transport that loses a callback fails the test
 * instead of hanging it. The monotonic clock is read here: the
 * transport's timer is I/O (it wakes the loop), not a limiter's time.
 */
#ifndef RATEL_TEST_TRANSPORT_DRIVER_H
#define RATEL_TEST_TRANSPORT_DRIVER_H

#include "store/transport.h"
#include "store/transport_event.h"
#include "store/transport_poll.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

typedef struct driver_s driver_t;
struct driver_s {
    const char *name;
    const ratel__transport_t *t;
    void *tud;
    ratel__poll_t *poll;
    ratel__event_t *event;
    struct event_base *base;
    /* the test engine's hooks */
    int timer_fires;
    int64_t timer_fired_at;
    int flushes;
    int *wake_on_timer; /* the flag of the wait in progress */
    int *wake_on_flush;
    void (*on_flush)(driver_t *d);
    void (*on_timer)(driver_t *d);
    void *arg; /* for on_flush and on_timer */
};

/* A driver on the poll transport (event 0; the lock is then held by the
   calling thread until driver_free) or on libevent (event 1). */
int driver_init(driver_t *d, int event);
void driver_free(driver_t *d);
/* Runs the loop until *done, without a watchdog (the caller has one). */
void driver_run(driver_t *d, int *done);
/* Runs the loop until *done or 10 s; 0, or -1 when the watchdog fired. */
int driver_wait(driver_t *d, int *done);

typedef enum close_when_e {
    CLOSE_NEVER,
    CLOSE_IN_UP,
    CLOSE_IN_DATA
} close_when_t;

typedef struct tlink_s {
    ratel__link_t link; /* first: the callbacks cast back */
    driver_t *d;
    void *h;
    int ups, downs, datas, tls_error;
    char why[256];
    char in[262144];
    size_t n;
    size_t expect; /* done once this many bytes arrived */
    int done;
    close_when_t close_when;
    int defers_in_data;          /* `defer` calls made in each data callback */
    struct tlink_s *close_other; /* closed by this link's `up` */
} tlink_t;

void tlink_init(tlink_t *l, driver_t *d);
/* `open` on l's driver; 0, or -1 with the reason in l->why. */
int tlink_open(tlink_t *l, const char *host, int port,
               const ratel__tls_target_t *tls);
void tlink_send(tlink_t *l, const char *s);
void tlink_close(tlink_t *l);
/* Sends PING inline and as RESP and waits for both PONGs: 0 or -1. */
int tlink_ping(tlink_t *l);
/* The same on a new connection to 127.0.0.1:port, closed after. */
int tlink_ping_new(driver_t *d, int port);

/* The port of a redis-server on 127.0.0.1 and ::1 shared by the tests
   (started at the first call), or -1. */
int plain_port(void);

/* TLS-only redis-servers (tests/integration/servers.h), started at
   their first use: the port, or -1. */
enum { TLS_PLAIN, TLS_CLIENT_CERTS, TLS_EXPIRED, TLS_SERVERS };
int tls_server_port(int which);

/* A client context trusting the certificate directory's file ca, with
   cert.crt and cert.key as its own certificate when cert is not NULL. */
SSL_CTX *client_ctx(const char *ca, const char *cert);

#endif /* RATEL_TEST_TRANSPORT_DRIVER_H */
