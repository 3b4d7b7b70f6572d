/*
 * test_transport.c - the two transports of the Redis engine (poll and
 * libevent, store/transport.h) driven by a small test engine against real
 * redis-servers on loopback: plain, killed, refused, TLS-only.
 *
 * Every test runs on both transports (transport_poll_NAME and
 * transport_event_NAME) through a driver (transport_driver.h): `wait`
 * runs the transport's loop until a flag is set (ratel__poll_wait, or
 * event_base_loop), bounded by a watchdog.
 */
#include "test.h"
#include "transport_driver.h"

#include "store/tls.h"

#include "tests/integration/servers.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ tests */

static void t_ping(driver_t *d)
{
    tlink_t l;
    int port = plain_port();

    REQUIRE(port > 0);
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, NULL) == 0);
    CHECK_EQ(l.ups, 0); /* never from inside `open` */
    CHECK(tlink_ping(&l) == 0);
    CHECK_EQ(l.ups, 1);
    CHECK_EQ(l.downs, 0);
    CHECK(tlink_ping(&l) == 0); /* the connection stays usable */
    tlink_close(&l);
}

/* A name (from /etc/hosts) and an IPv6 address. */
static void t_names(driver_t *d)
{
    static const char *const hosts[] = {"localhost", "::1"};
    int port = plain_port();

    REQUIRE(port > 0);
    for (size_t i = 0; i < 2; i++) {
        tlink_t l;

        tlink_init(&l, d);
        REQUIRE(tlink_open(&l, hosts[i], port, NULL) == 0);
        CHECK(tlink_ping(&l) == 0);
        if (l.downs)
            fprintf(stderr, "  %s: %s\n", hosts[i], l.why);
        tlink_close(&l);
    }
}

/*
 * A name that does not resolve is refused by `open` or reported by
 * `down`, saying so. Its 64-byte label is longer than DNS allows, so both
 * resolvers refuse it without asking a server: the test does not depend
 * on the network (a package build has none).
 */
static void t_bad_name(driver_t *d)
{
    static const char bad[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                              "aaaaaaaaaaaaaaaaaaaa.invalid";
    char want[128];
    tlink_t l;

    tlink_init(&l, d);
    if (tlink_open(&l, bad, 6379, NULL) == 0) {
        CHECK(driver_wait(d, &l.done) == 0);
        CHECK_EQ(l.downs, 1);
    }
    snprintf(want, sizeof want, "cannot resolve %s: ", bad);
    CHECK(strncmp(l.why, want, strlen(want)) == 0);
    CHECK_EQ(l.ups, 0);
    tlink_init(&l, d);
    CHECK(tlink_open(&l, "127.0.0.1", 0, NULL) != 0);
    CHECK(strstr(l.why, "port 0") != NULL);

    /* Closed while the name is being looked up (by a DNS server, or
       waiting for one to answer at all): nothing follows, nothing leaks
       (valgrind). */
    tlink_init(&l, d);
    if (tlink_open(&l, "no-such-host.invalid", 6379, NULL) == 0)
        tlink_close(&l);
    CHECK(tlink_ping_new(d, plain_port()) == 0);
    CHECK_EQ(l.downs, 0);
}

/* ECHO commands; fills expect with their replies. */
static void send_echoes(tlink_t *l, int count, size_t size, char *expect,
                        size_t cap)
{
    char *msg = malloc(size + 1), head[64];
    size_t n = 0;

    for (int i = 0; i < count && msg; i++) {
        memset(msg, 'a' + i % 26, size);
        snprintf(msg, size + 1, "m-%d", i);
        msg[strlen(msg)] = size > strlen(msg) ? '.' : '\0';
        msg[size] = '\0';
        snprintf(head, sizeof head, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", size);
        tlink_send(l, head);
        l->d->t->send(l->d->tud, l->h, msg, size);
        tlink_send(l, "\r\n");
        n += (size_t)snprintf(expect + n, cap - n, "$%zu\r\n%s\r\n", size, msg);
    }
    free(msg);
    l->expect = n;
}

static void check_echoes(driver_t *d, const ratel__tls_target_t *tls, int port,
                         int count, size_t size)
{
    static char expect[262144];
    tlink_t *l = malloc(sizeof *l);

    REQUIRE(l != NULL);
    tlink_init(l, d);
    if (tlink_open(l, "127.0.0.1", port, tls) != 0) {
        CHECK(!"open");
        free(l);
        return;
    }
    send_echoes(l, count, size, expect, sizeof expect);
    CHECK_EQ(l->ups, 0);
    CHECK(driver_wait(d, &l->done) == 0);
    CHECK_EQ(l->ups, 1);
    CHECK_EQ(l->downs, 0);
    CHECK_EQ(l->n, l->expect);
    CHECK(l->n == l->expect && memcmp(l->in, expect, l->n) == 0);
    tlink_close(l);
    free(l);
}

/* Many commands sent before `up` leave once connected, in order; one
   bigger than a socket buffer (and than a TLS record) arrives whole. */
static void t_queued_before_up(driver_t *d)
{
    int port = plain_port();

    REQUIRE(port > 0);
    check_echoes(d, NULL, port, 300, 20);
    check_echoes(d, NULL, port, 1, 200000);
}

static void t_refused(driver_t *d)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    ratel__tls_target_t tls = {ctx, "localhost", 0};
    int port = test_free_port();

    REQUIRE(port > 0 && ctx);
    for (int i = 0; i < 2; i++) {
        tlink_t l;

        tlink_init(&l, d);
        REQUIRE(tlink_open(&l, "127.0.0.1", port, i ? &tls : NULL) == 0);
        tlink_send(&l, "PING\r\n");
        CHECK(driver_wait(d, &l.done) == 0);
        CHECK_EQ(l.downs, 1);
        CHECK_EQ(l.ups, 0);
        CHECK_EQ(l.tls_error, 0); /* an outage, not TLS's refusal */
        CHECK(strstr(l.why, "Connection refused") != NULL);
    }
    SSL_CTX_free(ctx);
}

static void t_server_killed(driver_t *d)
{
    test_redis_t r;
    tlink_t l;

    REQUIRE(test_redis_start(&r, NULL, NULL) == 0);
    tlink_init(&l, d);
    if (tlink_open(&l, "127.0.0.1", r.port, NULL) == 0) {
        CHECK(tlink_ping(&l) == 0);
        test_redis_kill(&r);
        l.done = 0;
        CHECK(driver_wait(d, &l.done) == 0);
        CHECK_EQ(l.downs, 1);
        CHECK_EQ(l.tls_error, 0);
        CHECK(strstr(l.why, "closed by the server") ||
              strstr(l.why, "reset by peer"));
    } else {
        CHECK(!"open");
    }
    test_redis_free(&r);
}

/* The timer fires once, at its time (never early); arming replaces the
   previous time; -1 disarms. */
static void t_timer(driver_t *d)
{
    int64_t t0 = d->t->now(d->tud);
    int done = 0;
    int port = plain_port();
    tlink_t l;

    REQUIRE(port > 0);
    d->wake_on_timer = &done;
    d->t->timer(d->tud, t0 + 10000000);
    d->t->timer(d->tud, t0 + 30000);
    driver_run(d, &done);
    d->wake_on_timer = NULL;
    CHECK_EQ(d->timer_fires, 1);
    CHECK(d->timer_fired_at >= t0 + 30000);
    CHECK(d->timer_fired_at < t0 + 5000000);

    /* Disarmed: a 10 ms timer stays silent while the loop waits 100 ms
       for BLPOP's answer. */
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, NULL) == 0);
    d->t->timer(d->tud, d->t->now(d->tud) + 10000);
    d->t->timer(d->tud, -1);
    tlink_send(&l, "BLPOP ratel-transport-nothing 0.1\r\n");
    l.expect = 5; /* "*-1\r\n" */
    driver_run(d, &l.done);
    CHECK_EQ(d->timer_fires, 1);
    CHECK(l.n == 5 && memcmp(l.in, "*-1\r\n", 5) == 0);
    tlink_close(&l);
}

static void flush_sends_ping(driver_t *d)
{
    tlink_send(d->arg, "PING\r\n");
}

/* `defer` called many times in a turn gives one flush, after the turn's
   callbacks and before the loop waits. */
static void t_defer(driver_t *d)
{
    int port = plain_port(), flushed = 0;
    tlink_t l;

    REQUIRE(port > 0);
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, NULL) == 0);

    /* From outside the loop: the flush sends the PING. */
    d->on_flush = flush_sends_ping;
    d->arg = &l;
    for (int i = 0; i < 3; i++)
        d->t->defer(d->tud);
    CHECK_EQ(d->flushes, 0);
    l.expect = 7;
    CHECK(driver_wait(d, &l.done) == 0);
    CHECK_EQ(d->flushes, 1);
    CHECK(l.n == 7 && memcmp(l.in, "+PONG\r\n", 7) == 0);

    /* From inside a data callback: once after it. */
    d->on_flush = NULL;
    l.defers_in_data = 3;
    l.n = 0;
    l.done = 0;
    tlink_send(&l, "PING\r\n");
    d->wake_on_flush = &flushed;
    CHECK(driver_wait(d, &flushed) == 0);
    d->wake_on_flush = NULL;
    CHECK_EQ(l.datas, 2);
    CHECK_EQ(d->flushes, 2);

    /* No defer, no flush. */
    l.defers_in_data = 0;
    CHECK(tlink_ping(&l) == 0);
    CHECK_EQ(d->flushes, 2);
    tlink_close(&l);
}

/* The flush of a pass in which two connections received data runs once,
   after both data callbacks: what the engine queues in one pass of the
   loop leaves together. */
typedef struct pass_s {
    tlink_t a, b;
    int seen; /* data callbacks before the flush */
} pass_t;

static void flush_counts_data(driver_t *d)
{
    pass_t *p = d->arg;

    p->seen = p->a.datas + p->b.datas;
}

static void t_flush_after_pass(driver_t *d)
{
    int port = plain_port(), flushed = 0, flushes;
    pass_t *p = calloc(1, sizeof *p);

    REQUIRE(port > 0 && p);
    tlink_init(&p->a, d);
    tlink_init(&p->b, d);
    if (tlink_open(&p->a, "127.0.0.1", port, NULL) != 0 ||
        tlink_open(&p->b, "127.0.0.1", port, NULL) != 0 ||
        tlink_ping(&p->a) != 0 || tlink_ping(&p->b) != 0) {
        CHECK(!"connected");
        tlink_close(&p->a);
        tlink_close(&p->b);
        free(p);
        return;
    }
    /* Both PINGs leave (a turn that only flushes), then both answers
       wait in the sockets before the loop looks again. */
    tlink_send(&p->a, "PING\r\n");
    tlink_send(&p->b, "PING\r\n");
    d->t->defer(d->tud);
    d->wake_on_flush = &flushed;
    CHECK(driver_wait(d, &flushed) == 0);
    if (p->a.datas + p->b.datas > 0) {
        /* The libevent transport wrote at once (a plain socket with
           nothing queued), so the answers came within that turn: again,
           with the loop not running while they arrive. */
        p->a.datas = p->b.datas = 0;
        tlink_send(&p->a, "PING\r\n");
        tlink_send(&p->b, "PING\r\n");
    }
    usleep(200000);
    p->a.datas = p->b.datas = 0;
    p->a.defers_in_data = p->b.defers_in_data = 1;
    d->arg = p;
    d->on_flush = flush_counts_data;
    flushes = d->flushes;
    flushed = 0;
    CHECK(driver_wait(d, &flushed) == 0);
    CHECK_EQ(p->seen, 2);
    CHECK_EQ(d->flushes, flushes + 1);
    d->on_flush = NULL;
    d->wake_on_flush = NULL;
    tlink_close(&p->a);
    tlink_close(&p->b);
    free(p);
}

/* A link closes itself from `up` and from `data`: nothing more reaches
   it, and the loop goes on serving the others. */
static void t_close_in_callback(driver_t *d)
{
    int port = plain_port();
    tlink_t a, b, c, e;

    REQUIRE(port > 0);
    tlink_init(&a, d);
    a.close_when = CLOSE_IN_UP;
    REQUIRE(tlink_open(&a, "127.0.0.1", port, NULL) == 0);
    tlink_send(&a, "PING\r\n");
    CHECK(driver_wait(d, &a.done) == 0);

    tlink_init(&b, d);
    b.close_when = CLOSE_IN_DATA;
    REQUIRE(tlink_open(&b, "127.0.0.1", port, NULL) == 0);
    tlink_send(&b, "PING\r\nPING\r\nPING\r\n");
    CHECK(driver_wait(d, &b.done) == 0);

    /* c's `up` closes e, whose answer may be arriving in the same turn. */
    tlink_init(&e, d);
    REQUIRE(tlink_open(&e, "127.0.0.1", port, NULL) == 0);
    tlink_send(&e, "PING\r\n");
    tlink_init(&c, d);
    c.close_other = &e;
    REQUIRE(tlink_open(&c, "127.0.0.1", port, NULL) == 0);
    CHECK(tlink_ping(&c) == 0);
    CHECK(tlink_ping(&c) == 0);
    CHECK(e.h == NULL);
    CHECK_EQ(e.downs, 0);
    tlink_close(&c);
    CHECK_EQ(a.ups, 1);
    CHECK_EQ(a.datas, 0);
    CHECK_EQ(a.downs, 0);
    CHECK_EQ(b.datas, 1);
    CHECK_EQ(b.downs, 0);
    CHECK(e.datas <= 1 && e.n <= 7);
}

static void t_tls(driver_t *d)
{
    int port = tls_server_port(TLS_PLAIN);
    SSL_CTX *ctx;
    ratel__tls_target_t tls = {NULL, "localhost", 0};
    tlink_t l;

    REQUIRE(port > 0);
    ctx = client_ctx("ca.crt", NULL);
    REQUIRE(ctx != NULL);
    tls.ctx = ctx;
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
    CHECK(tlink_ping(&l) == 0);
    if (l.downs)
        fprintf(stderr, "  TLS: %s\n", l.why);
    CHECK_EQ(l.ups, 1);
    tlink_close(&l);

    /* Many commands before the handshake ends, one of many records. */
    check_echoes(d, &tls, port, 300, 20);
    check_echoes(d, &tls, port, 1, 200000);

    /* Closed from its own `up`, which follows the handshake. */
    tlink_init(&l, d);
    l.close_when = CLOSE_IN_UP;
    REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
    tlink_send(&l, "PING\r\n");
    CHECK(driver_wait(d, &l.done) == 0);
    CHECK_EQ(l.ups, 1);
    CHECK(tlink_ping_new(d, plain_port()) == 0); /* the loop goes on */
    CHECK_EQ(l.datas, 0);
    CHECK_EQ(l.downs, 0);

    /* Closed from its own data callback. */
    tlink_init(&l, d);
    l.close_when = CLOSE_IN_DATA;
    REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
    tlink_send(&l, "PING\r\nPING\r\n");
    CHECK(driver_wait(d, &l.done) == 0);
    CHECK_EQ(l.datas, 1);
    CHECK_EQ(l.downs, 0);
    SSL_CTX_free(ctx);
}

/*
 * What TLS refuses gives `down` with tls_error = 1 and a reason naming
 * the problem: a certificate the trusted CA did not sign, a name the
 * certificate does not carry, an expired certificate, a server that
 * requires a client certificate and got none (TLS 1.3 says so after the
 * handshake: `up` comes first). A client certificate makes the last one
 * work.
 */
static void t_tls_refused(driver_t *d)
{
    static const struct {
        int server;
        const char *ca, *cert, *name, *why;
    } cases[] = {
        {TLS_PLAIN, "other-ca.crt", NULL, "localhost",
         "certificate verify failed"},
        {TLS_PLAIN, "ca.crt", NULL, "wrong.example", "not wrong.example"},
        {TLS_EXPIRED, "ca.crt", NULL, "localhost", "has expired"},
        {TLS_CLIENT_CERTS, "ca.crt", NULL, "localhost", "client certificate"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int port = tls_server_port(cases[i].server);
        SSL_CTX *ctx = port > 0 ? client_ctx(cases[i].ca, cases[i].cert) : NULL;
        ratel__tls_target_t tls = {ctx, cases[i].name, 0};
        tlink_t l;

        REQUIRE(ctx != NULL);
        tlink_init(&l, d);
        REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
        tlink_send(&l, "PING\r\n");
        CHECK(driver_wait(d, &l.done) == 0);
        if (cases[i].server != TLS_CLIENT_CERTS)
            CHECK_EQ(l.ups, 0);
        CHECK_EQ(l.downs, 1);
        CHECK_EQ(l.tls_error, 1);
        CHECK_EQ(l.n, 0);
        CHECK(strstr(l.why, cases[i].why) != NULL);
        if (!strstr(l.why, cases[i].why) || getenv("RATEL_TEST_VERBOSE"))
            fprintf(stderr, "  want \"%s\", got \"%s\"\n", cases[i].why, l.why);
        SSL_CTX_free(ctx);
    }
}

/* A client certificate where the server requires one. */
static void t_tls_client_cert(driver_t *d)
{
    int port = tls_server_port(TLS_CLIENT_CERTS);
    SSL_CTX *ctx = port > 0 ? client_ctx("ca.crt", "client") : NULL;
    ratel__tls_target_t tls = {ctx, "localhost", 0};
    tlink_t l;

    REQUIRE(ctx != NULL);
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
    CHECK(tlink_ping(&l) == 0);
    CHECK_EQ(l.downs, 0);
    tlink_close(&l);
    SSL_CTX_free(ctx);
}

/* tls_insecure: no verification, so even another CA's trust store (and a
   wrong name) connects. */
static void t_tls_insecure(driver_t *d)
{
    int port = tls_server_port(TLS_PLAIN);
    ratel__tls_options_t o = {.insecure = 1};
    SSL_CTX *ctx = NULL;
    char err[300];
    ratel__tls_target_t tls;
    tlink_t l;

    /* tls_insecure: a context that verifies nothing, whatever the name. */
    REQUIRE(port > 0 && ratel__tls_ctx_new(&o, &ctx, err, sizeof err) == 0);
    tls = (ratel__tls_target_t){ctx, "wrong.example", 1};
    tlink_init(&l, d);
    REQUIRE(tlink_open(&l, "127.0.0.1", port, &tls) == 0);
    CHECK(tlink_ping(&l) == 0);
    tlink_close(&l);
    SSL_CTX_free(ctx);
}

/*
 * Writing to a connection the server has dropped fails with EPIPE, not
 * SIGPIPE (which would end this process: the runner does not ignore it).
 * The poll transport sends with MSG_NOSIGNAL; the libevent one relies on
 * its host ignoring SIGPIPE (transport_event.h), so it is not run here.
 */
TEST(transport_poll_no_sigpipe)
{
    driver_t d;
    test_redis_t r;
    tlink_t *l = malloc(sizeof *l);
    char *big = calloc(1, 1 << 20);

    REQUIRE(l && big);
    REQUIRE(signal(SIGPIPE, SIG_DFL) != SIG_ERR);
    REQUIRE(driver_init(&d, 0) == 0);
    if (test_redis_start(&r, NULL, NULL) != 0) {
        CHECK(!"redis-server");
        goto out;
    }
    tlink_init(l, &d);
    if (tlink_open(l, "127.0.0.1", r.port, NULL) != 0 || tlink_ping(l) != 0) {
        CHECK(!"connected");
        test_redis_free(&r);
        goto out;
    }
    test_redis_kill(&r);
    l->done = 0;
    for (int i = 0; i < 8; i++)
        d.t->send(d.tud, l->h, big, 1 << 20);
    CHECK(driver_wait(&d, &l->done) == 0);
    CHECK_EQ(l->downs, 1);
    test_redis_free(&r);
out:
    driver_free(&d);
    free(big);
    free(l);
}

/* ------------------------------------------------------------ threads */

/* Callers of the poll transport on one connection: each queues a PING,
   the flush sends every queued one in one write, each PONG completes the
   oldest caller. */
typedef struct caller_s caller_t;
struct caller_s {
    int done;
    caller_t *next;
};

typedef struct shared_s {
    ratel__link_t link;
    driver_t *d;
    void *h;
    int up, expired;
    caller_t *head, *tail; /* waiting for a PONG, oldest first */
    int unsent;
    size_t carry; /* bytes of a PONG not complete yet */
    int sends, most;
    int completed[4];
} shared_t;

static void shared_up(ratel__link_t *link)
{
    ((shared_t *)link)->up = 1;
}

static void shared_data(ratel__link_t *link, const char *p, size_t n)
{
    shared_t *s = (shared_t *)link;

    (void)p;
    s->carry += n;
    while (s->carry >= 7 && s->head) {
        caller_t *c = s->head;

        s->carry -= 7;
        s->head = c->next;
        if (!s->head)
            s->tail = NULL;
        c->done = 1;
    }
}

static void shared_down(ratel__link_t *link, const char *why, int tls_error)
{
    shared_t *s = (shared_t *)link;

    (void)tls_error;
    fprintf(stderr, "  shared connection down: %s\n", why);
    s->h = NULL;
    s->expired = 1;
    for (caller_t *c = s->head; c; c = c->next)
        c->done = 1;
}

static void shared_flush(driver_t *d)
{
    shared_t *s = d->arg;
    static const char ping[] = "PING\r\n";

    if (!s->h || !s->unsent)
        return;
    for (int i = 0; i < s->unsent; i++)
        d->t->send(d->tud, s->h, ping, 6);
    s->sends++;
    if (s->unsent > s->most)
        s->most = s->unsent;
    s->unsent = 0;
}

static void shared_expire(driver_t *d)
{
    shared_t *s = d->arg;

    s->expired = 1;
    for (caller_t *c = s->head; c; c = c->next)
        c->done = 1;
}

typedef struct worker_s {
    shared_t *s;
    int index;
} worker_t;

static void *caller_thread(void *arg)
{
    worker_t *w = arg;
    shared_t *s = w->s;
    driver_t *d = s->d;

    for (int i = 0; i < 100; i++) {
        caller_t c = {0, NULL};

        ratel__poll_lock(d->poll);
        if (s->expired) {
            ratel__poll_unlock(d->poll);
            break;
        }
        if (s->tail)
            s->tail->next = &c;
        else
            s->head = &c;
        s->tail = &c;
        s->unsent++;
        d->t->defer(d->tud);
        ratel__poll_wait(d->poll, &c.done);
        if (!s->expired)
            s->completed[w->index]++;
        ratel__poll_unlock(d->poll);
    }
    return NULL;
}

TEST(transport_poll_threads)
{
    driver_t d;
    shared_t s;
    pthread_t threads[4];
    worker_t workers[4];
    int port = plain_port();

    REQUIRE(port > 0);
    REQUIRE(driver_init(&d, 0) == 0);
    memset(&s, 0, sizeof s);
    s.link = (ratel__link_t){shared_up, shared_data, shared_down};
    s.d = &d;
    s.h = d.t->open(d.tud, &s.link, "127.0.0.1", port, NULL, NULL, 0);
    if (!s.h || driver_wait(&d, &s.up) != 0) {
        CHECK(!"connected");
        driver_free(&d);
        return;
    }
    d.arg = &s;
    d.on_flush = shared_flush;
    d.on_timer = shared_expire;
    d.t->timer(d.tud, d.t->now(d.tud) + 30 * 1000000LL);
    ratel__poll_unlock(d.poll);
    for (int i = 0; i < 4; i++) {
        workers[i] = (worker_t){&s, i};
        pthread_create(&threads[i], NULL, caller_thread, &workers[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    ratel__poll_lock(d.poll);
    CHECK_EQ(s.expired, 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(s.completed[i], 100);
    CHECK(s.head == NULL);
    CHECK(s.sends >= 1 && s.sends <= 400);
    if (s.h)
        d.t->close(d.tud, s.h);
    driver_free(&d);
}

/*
 * Two threads on one poll transport. The main thread drives, waiting in
 * poll() for a BLPOP that answers after 1.5 s; meanwhile a second thread
 * sends a PING on another connection and waits for it: its `send` wakes
 * the driver (the eventfd), so the PING leaves at once instead of after
 * the BLPOP. Then the second thread waits for its own BLPOP (1.5 s) while
 * the main thread's ends first: the driver leaves and the waiter takes
 * over the loop.
 */
typedef struct wake_s {
    driver_t *d;
    tlink_t *y;
    int64_t ping_us; /* the PING's round trip */
    int ok;
} wake_t;

static void *wake_thread(void *arg)
{
    wake_t *w = arg;
    driver_t *d = w->d;
    int64_t t0;

    usleep(200000); /* the main thread is in poll() by now */
    ratel__poll_lock(d->poll);
    t0 = d->t->now(d->tud);
    w->y->n = 0;
    w->y->expect = 7;
    tlink_send(w->y, "PING\r\n");
    ratel__poll_wait(d->poll, &w->y->done);
    w->ping_us = d->t->now(d->tud) - t0;
    w->ok = w->y->n == 7 && memcmp(w->y->in, "+PONG\r\n", 7) == 0;
    /* Outlives the main thread's wait: it drives after that ends. */
    w->y->n = 0;
    w->y->done = 0;
    w->y->expect = 5;
    tlink_send(w->y, "BLPOP ratel-transport-nothing 1.5\r\n");
    ratel__poll_wait(d->poll, &w->y->done);
    w->ok = w->ok && w->y->n == 5;
    ratel__poll_unlock(d->poll);
    return NULL;
}

TEST(transport_poll_wake_and_takeover)
{
    driver_t d;
    tlink_t *x = malloc(sizeof *x), *y = malloc(sizeof *y);
    wake_t w = {&d, y, 0, 0};
    pthread_t thread;
    int port = plain_port();

    REQUIRE(port > 0 && x && y);
    REQUIRE(driver_init(&d, 0) == 0);
    tlink_init(x, &d);
    tlink_init(y, &d);
    if (tlink_open(x, "127.0.0.1", port, NULL) != 0 ||
        tlink_open(y, "127.0.0.1", port, NULL) != 0 || tlink_ping(x) != 0 ||
        tlink_ping(y) != 0) {
        CHECK(!"connected");
        goto out;
    }
    x->n = 0;
    x->done = 0;
    x->expect = 5;
    tlink_send(x, "BLPOP ratel-transport-nothing 1.5\r\n");
    y->done = 0;
    pthread_create(&thread, NULL, wake_thread, &w);
    CHECK(driver_wait(&d, &x->done) == 0);
    CHECK_EQ(x->n, 5);
    ratel__poll_unlock(d.poll); /* the second thread takes over */
    pthread_join(thread, NULL);
    ratel__poll_lock(d.poll);
    CHECK(w.ok);
    CHECK(w.ping_us < 1000000); /* not held until the BLPOP's answer */
    if (w.ping_us >= 1000000)
        fprintf(stderr, "  the PING took %lld us\n", (long long)w.ping_us);
out:
    tlink_close(x);
    tlink_close(y);
    driver_free(&d);
    free(x);
    free(y);
}

/* ------------------------------------------------------------ table */

static void run_on(int event, void (*body)(driver_t *))
{
    driver_t d;

    if (driver_init(&d, event) != 0) {
        CHECK(!"driver_init");
        driver_free(&d);
        return;
    }
    body(&d);
    driver_free(&d);
}

#define BOTH(name)                                                             \
    TEST(transport_poll_##name)                                                \
    {                                                                          \
        run_on(0, t_##name);                                                   \
    }                                                                          \
    TEST(transport_event_##name)                                               \
    {                                                                          \
        run_on(1, t_##name);                                                   \
    }

BOTH(ping)
BOTH(names)
BOTH(bad_name)
BOTH(queued_before_up)
BOTH(refused)
BOTH(server_killed)
BOTH(timer)
BOTH(defer)
BOTH(flush_after_pass)
BOTH(close_in_callback)
BOTH(tls)
BOTH(tls_refused)
BOTH(tls_client_cert)
BOTH(tls_insecure)

#define BOTH_ROWS(name)                                                        \
    {"transport_poll_" #name, test_transport_poll_##name},                     \
    {                                                                          \
        "transport_event_" #name, test_transport_event_##name                  \
    }

RATEL_SUITE(transport) = {
    BOTH_ROWS(ping),
    BOTH_ROWS(names),
    BOTH_ROWS(bad_name),
    BOTH_ROWS(queued_before_up),
    BOTH_ROWS(refused),
    BOTH_ROWS(server_killed),
    BOTH_ROWS(timer),
    BOTH_ROWS(defer),
    BOTH_ROWS(flush_after_pass),
    BOTH_ROWS(close_in_callback),
    BOTH_ROWS(tls),
    BOTH_ROWS(tls_refused),
    BOTH_ROWS(tls_client_cert),
    BOTH_ROWS(tls_insecure),
    {"transport_poll_no_sigpipe", test_transport_poll_no_sigpipe},
    {"transport_poll_threads", test_transport_poll_threads},
    {"transport_poll_wake_and_takeover", test_transport_poll_wake_and_takeover},
    {0},
};
