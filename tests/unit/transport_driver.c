/*
 * transport_driver.c - drivers, test links and servers for the transports'
 * unit tests (transport_driver.h).
 */
#include "transport_driver.h"

#include "tests/integration/servers.h"
#include "tests/integration/tls_servers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCHDOG_US 10000000

/* ------------------------------------------------------------ drivers */

static void hook_timer(void *ud)
{
    driver_t *d = ud;

    d->timer_fires++;
    d->timer_fired_at = d->t->now(d->tud);
    if (d->on_timer)
        d->on_timer(d);
    if (d->wake_on_timer)
        *d->wake_on_timer = 1;
}

static void hook_flush(void *ud)
{
    driver_t *d = ud;

    d->flushes++;
    if (d->on_flush)
        d->on_flush(d);
    if (d->wake_on_flush)
        *d->wake_on_flush = 1;
}

int driver_init(driver_t *d, int event)
{
    ratel__loop_hooks_t hooks = {hook_timer, hook_flush, d};

    memset(d, 0, sizeof *d);
    if (event) {
        d->base = event_base_new();
        if (!d->base || ratel__event_new(&d->event, d->base, &hooks) != 0)
            return -1;
        d->t = &ratel__event_transport;
        d->tud = d->event;
        return 0;
    }
    if (ratel__poll_new(&d->poll, &hooks) != 0)
        return -1;
    ratel__poll_lock(d->poll);
    d->t = &ratel__poll_transport;
    d->tud = d->poll;
    return 0;
}

void driver_free(driver_t *d)
{
    if (d->poll) {
        ratel__poll_unlock(d->poll);
        ratel__poll_free(d->poll);
    }
    ratel__event_free(d->event);
    if (d->base)
        event_base_free(d->base);
}

/* Runs the loop until *done (no watchdog: the caller arms one). */
void driver_run(driver_t *d, int *done)
{
    if (d->poll) {
        ratel__poll_wait(d->poll, done);
        return;
    }
    while (!*done)
        event_base_loop(d->base, EVLOOP_ONCE);
}

/* Runs the loop until *done or 10 s; returns 0, or -1 on the watchdog. */
int driver_wait(driver_t *d, int *done)
{
    int fires = d->timer_fires, rc;

    d->t->timer(d->tud, d->t->now(d->tud) + WATCHDOG_US);
    d->wake_on_timer = done;
    driver_run(d, done);
    d->wake_on_timer = NULL;
    rc = d->timer_fires != fires ? -1 : 0;
    d->t->timer(d->tud, -1);
    d->timer_fires = fires;
    return rc;
}

/* ------------------------------------------------------------ test links */

static void on_up(ratel__link_t *link)
{
    tlink_t *l = (tlink_t *)link;

    l->ups++;
    if (l->close_other && l->close_other->h) {
        l->d->t->close(l->d->tud, l->close_other->h);
        l->close_other->h = NULL;
    }
    if (l->close_when == CLOSE_IN_UP) {
        l->d->t->close(l->d->tud, l->h);
        l->h = NULL;
        l->done = 1;
    }
}

static void on_data(ratel__link_t *link, const char *p, size_t n)
{
    tlink_t *l = (tlink_t *)link;

    l->datas++;
    if (n > sizeof l->in - l->n)
        n = sizeof l->in - l->n;
    memcpy(l->in + l->n, p, n);
    l->n += n;
    for (int i = 0; i < l->defers_in_data; i++)
        l->d->t->defer(l->d->tud);
    if (l->close_when == CLOSE_IN_DATA) {
        l->d->t->close(l->d->tud, l->h);
        l->h = NULL;
        l->done = 1;
    }
    if (l->expect && l->n >= l->expect)
        l->done = 1;
}

static void on_down(ratel__link_t *link, const char *why, int tls_error)
{
    tlink_t *l = (tlink_t *)link;

    l->downs++;
    l->tls_error = tls_error;
    snprintf(l->why, sizeof l->why, "%s", why);
    l->h = NULL;
    l->done = 1;
}

void tlink_init(tlink_t *l, driver_t *d)
{
    memset(l, 0, sizeof *l);
    l->link.up = on_up;
    l->link.data = on_data;
    l->link.down = on_down;
    l->d = d;
}

int tlink_open(tlink_t *l, const char *host, int port,
               const ratel__tls_target_t *tls)
{
    l->h = l->d->t->open(l->d->tud, &l->link, host, port, tls, l->why,
                         sizeof l->why);
    return l->h ? 0 : -1;
}

void tlink_send(tlink_t *l, const char *s)
{
    l->d->t->send(l->d->tud, l->h, s, strlen(s));
}

void tlink_close(tlink_t *l)
{
    if (l->h)
        l->d->t->close(l->d->tud, l->h);
    l->h = NULL;
}

/* Sends PING twice (inline and RESP) and waits for both PONGs. */
int tlink_ping(tlink_t *l)
{
    static const char pongs[] = "+PONG\r\n+PONG\r\n";

    l->n = 0;
    l->done = 0;
    l->expect = strlen(pongs);
    tlink_send(l, "PING\r\n");
    tlink_send(l, "*1\r\n$4\r\nPING\r\n");
    if (driver_wait(l->d, &l->done) != 0 || l->downs)
        return -1;
    return l->n == l->expect && memcmp(l->in, pongs, l->n) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ servers */

int plain_port(void);

/* A fresh connection to port that answers PING, closed after. */
int tlink_ping_new(driver_t *d, int port)
{
    tlink_t l;
    int rc;

    tlink_init(&l, d);
    if (port < 0 || tlink_open(&l, "127.0.0.1", port, NULL) != 0)
        return -1;
    rc = tlink_ping(&l);
    tlink_close(&l);
    return rc;
}

static test_redis_t plain;
static int plain_started;

/* One redis-server for the tests that only talk to it, on 127.0.0.1 and
   ::1 (the '-' makes ::1 optional). */
int plain_port(void)
{
    static const char *const extra[] = {"--bind", "127.0.0.1 -::1", NULL};

    if (!plain_started && test_redis_start(&plain, NULL, extra) == 0)
        plain_started = 1;
    return plain_started ? plain.port : -1;
}

/* Certificates (tls_servers.h) in a directory of their own, removed at
   exit, and TLS-only redis-servers started at their first use: one that
   asks no client certificate, one that requires one, one whose
   certificate has expired. */
static char tls_dir[256];
static test_tls_redis_t tls_servers[TLS_SERVERS];

static void tls_cleanup(void)
{
    char cmd[400];

    for (int i = 0; i < TLS_SERVERS; i++)
        test_tls_redis_stop(&tls_servers[i]);
    if (tls_dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tls_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tls_dir);
        tls_dir[0] = '\0';
    }
}

/* The port of TLS server `which`, or -1. */
int tls_server_port(int which)
{
    static int certs_failed;
    test_tls_redis_t *s = &tls_servers[which];

    if (!tls_dir[0] && !certs_failed) {
        snprintf(tls_dir, sizeof tls_dir, "/tmp/ratel-tls-XXXXXX");
        certs_failed = 1;
        if (!mkdtemp(tls_dir)) {
            tls_dir[0] = '\0';
            return -1;
        }
        atexit(tls_cleanup);
        certs_failed = test_tls_certs(tls_dir) != 0;
    }
    if (certs_failed)
        return -1;
    if (!s->pid && test_tls_redis_start(
                       s, tls_dir, which == TLS_EXPIRED ? "expired" : "server",
                       which == TLS_CLIENT_CERTS, NULL) != 0)
        return -1;
    return s->port;
}

/* A client context trusting tls_dir/ca (a file name), with tls_dir/
   cert.crt and .key as its certificate when cert is not NULL. */
SSL_CTX *client_ctx(const char *ca, const char *cert)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char path[400], key[400];
    int ok;

    snprintf(path, sizeof path, "%s/%s", tls_dir, ca);
    ok = ctx && SSL_CTX_load_verify_locations(ctx, path, NULL) == 1;
    if (ok) /* as tls.c's contexts do; tls_insecure turns it off */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (ok && cert) {
        snprintf(path, sizeof path, "%s/%s.crt", tls_dir, cert);
        snprintf(key, sizeof key, "%s/%s.key", tls_dir, cert);
        ok = SSL_CTX_use_certificate_file(ctx, path, SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1;
    }
    if (!ok) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}
