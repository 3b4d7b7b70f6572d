/*
 * transport_poll.c - the synchronous transport (transport_poll.h): poll(2)
 * over nonblocking sockets, OpenSSL on memory BIOs, driven by whichever
 * caller waits.
 *
 * A turn of the loop:
 *
 *   report   connections that failed since the last turn get `down`
 *   timer    the engine's timer, when due
 *   flush    the engine's flush, when `defer` asked for it
 *   write    every connection's queued bytes, without waiting
 *   poll     the sockets and the eventfd, the lock released, until a
 *            socket is ready, the timer is due or another thread wakes us
 *   I/O      connects that finished, reads (and `up`/`data` callbacks),
 *            writes that can go on
 *
 * Failures found while reading are recorded on the connection (its
 * socket closed at once) and reported by the next turn's first step, so
 * `down` never runs inside `send` or `open`, and a failure found in a
 * loop over the connections cannot change the list under it. A failed
 * write only stops the writing: the reads go on until they too end, so
 * what the server said before it went (replies, or the TLS alert naming
 * why it refused us) arrives first, and the write's error is reported
 * when nothing more comes.
 *
 * A closed connection stays allocated until the turn ends: a callback may
 * close any connection (its own included) while the turn still holds
 * pointers to it from the poll set; closed ones are skipped and freed
 * ("buried") after the turn.
 *
 * TLS. The SSL reads from and writes to memory BIOs; this file moves the
 * ciphertext between them and the socket with recv() and
 * send(MSG_NOSIGNAL), so no write raises SIGPIPE and TLS needs no second
 * path for readiness: SSL_read is called until it wants more input, which
 * leaves nothing buffered inside OpenSSL that poll() could not see.
 */
#include "store/transport_poll.h"

#include "ratel.h"
#include "store/tls.h"
#include "store/transport_sock.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_CHUNK 16384
/* recv() calls one connection gets per turn, so one busy connection
   cannot keep the others (and the timer) waiting. */
#define READ_ROUNDS 4

typedef enum conn_state_e {
    CONN_CONNECTING, /* connect() in progress */
    CONN_HANDSHAKE,  /* TLS handshake in progress */
    CONN_UP,         /* `up` reported */
    CONN_FAILED      /* socket closed; `down` due at the next turn */
} conn_state_t;

/* Bytes waiting to leave: p[off, len). */
typedef struct buf_s {
    char *p;
    size_t off, len, cap;
} buf_t;

typedef struct conn_s conn_t;
typedef struct waiter_s waiter_t;
struct conn_s {
    ratel__poll_t *poll;
    ratel__link_t *link;
    int fd;
    conn_state_t state;
    int closed; /* closed or reported down: buried after the turn */
    struct addrinfo *addrs, *next_addr;
    int last_errno;
    int write_errno; /* a write failed: reads go on until they end */
    int got_data;    /* TLS: application data arrived */
    SSL *ssl;        /* TLS only; owns its memory BIOs */
    BIO *rbio;       /* ciphertext received, for SSL_read */
    BIO *wbio;       /* ciphertext OpenSSL wants sent */
    buf_t out;       /* bytes for the socket (ciphertext with TLS) */
    buf_t plain;     /* TLS: plaintext sent before the handshake ended */
    char why[256];   /* CONN_FAILED: what `down` will say */
    int tls_error;   /* CONN_FAILED: `down`'s tls_error */
    conn_t *prev, *next;
};

struct ratel__poll_s {
    pthread_mutex_t lock;
    ratel__loop_hooks_t hooks;
    int efd;             /* eventfd: wakes the driver out of poll() */
    int driving;         /* a thread runs the loop */
    int in_poll;         /* ... and sits in poll(), the lock released */
    int woken;           /* the eventfd was written since the last drain */
    waiter_t *waiting;   /* threads waiting while another drives */
    int deferred;        /* flush asked for */
    int failed;          /* connections in CONN_FAILED */
    int64_t timer_at;    /* monotonic us, -1 when disarmed */
    conn_t *conns;       /* open (CONN_FAILED included) */
    conn_t *dead;        /* closed during the turn (linked by next) */
    struct pollfd *pfds; /* the poll set: [0] the eventfd, then conns */
    conn_t **pconns;     /* the connection of each pfds entry */
    size_t pcap;
};

/* ------------------------------------------------------------ buffers */

static int buf_reserve(buf_t *b, size_t n)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (b->cap - b->len >= n)
        return 0;
    if (b->off) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= n)
            return 0;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_append(buf_t *b, const char *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static size_t buf_size(const buf_t *b)
{
    return b->len - b->off;
}

static void buf_free(buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------ waking */

/*
 * Called with the lock held by a thread that is not the driver while the
 * driver sits in poll() (by definition: the driver released the lock for
 * it): the eventfd makes poll() return so the driver sees the change.
 */
static void wake(ratel__poll_t *p)
{
    uint64_t one = 1;

    if (!p->in_poll || p->woken)
        return;
    p->woken = 1;
    if (write(p->efd, &one, sizeof one) < 0) {
        /* The counter cannot overflow with one write per poll; a failed
           write leaves poll() to its timeout, which the timer bounds. */
    }
}

static void drain_wake(ratel__poll_t *p)
{
    uint64_t n;

    if (!p->woken)
        return;
    if (read(p->efd, &n, sizeof n) < 0) {
        /* EAGAIN: already drained. */
    }
    p->woken = 0;
}

/* ------------------------------------------------------------ connections */

static void release_io(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    SSL_free(c->ssl); /* frees its BIOs */
    c->ssl = NULL;
    c->rbio = c->wbio = NULL;
    buf_free(&c->out);
    buf_free(&c->plain);
    if (c->addrs)
        freeaddrinfo(c->addrs);
    c->addrs = c->next_addr = NULL;
}

static void unlink_conn(conn_t *c)
{
    ratel__poll_t *p = c->poll;

    if (c->prev)
        c->prev->next = c->next;
    else
        p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* Takes c out of the loop. While a turn runs it may still be in the poll
   set, so it waits in the dead list until the turn ends. */
static void retire(conn_t *c)
{
    ratel__poll_t *p = c->poll;

    if (c->state == CONN_FAILED)
        p->failed--;
    release_io(c);
    unlink_conn(c);
    c->closed = 1;
    if (p->driving) {
        c->next = p->dead;
        p->dead = c;
    } else {
        free(c);
    }
}

static void bury(ratel__poll_t *p)
{
    while (p->dead) {
        conn_t *c = p->dead;

        p->dead = c->next;
        free(c);
    }
}

/*
 * Records a failure: the socket and TLS state go at once, `down` is
 * reported by the next turn. The first reason wins.
 */
static void mark_failed(conn_t *c, const char *why, int tls_error)
{
    if (c->state == CONN_FAILED)
        return;
    release_io(c);
    c->state = CONN_FAILED;
    c->tls_error = tls_error;
    snprintf(c->why, sizeof c->why, "%s", why);
    c->poll->failed++;
    wake(c->poll);
}

static void mark_failed_errno(conn_t *c, int err)
{
    char why[128];

    snprintf(why, sizeof why, "%s", strerror(err));
    mark_failed(c, why, 0);
}

/*
 * Gives each connection that had failed when the turn began its `down`.
 * A callback may close others or open new ones, so the list is searched
 * again after each report; one that fails meanwhile (an engine opening
 * again from `down`) waits for the next turn, so a reconnection that
 * fails at once cannot keep the loop from its timer.
 */
static void report_failed(ratel__poll_t *p)
{
    for (int due = p->failed; due > 0 && p->failed > 0; due--) {
        conn_t *c = p->conns;
        char why[sizeof c->why];
        int tls_error;

        while (c && c->state != CONN_FAILED)
            c = c->next;
        if (!c)
            break;
        snprintf(why, sizeof why, "%s", c->why);
        tls_error = c->tls_error;
        ratel__link_t *link = c->link;
        retire(c);
        link->down(link, why, tls_error);
    }
}

/* Starts connecting to the next address; 0, or -1 with last_errno when
   no address is left. */
static int connect_next(conn_t *c)
{
    while (c->next_addr) {
        struct addrinfo *ai = c->next_addr;
        int fd;

        c->next_addr = ai->ai_next;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    IPPROTO_TCP);
        if (fd < 0) {
            c->last_errno = errno;
            continue;
        }
        ratel__transport_socket_options(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
            errno == EINPROGRESS) {
            c->fd = fd;
            c->state = CONN_CONNECTING;
            return 0;
        }
        c->last_errno = errno;
        close(fd);
    }
    return -1;
}

/* ------------------------------------------------------------ TLS */

/* Moves what OpenSSL wrote into its memory BIO to the socket's queue. */
static int drain_wbio(conn_t *c)
{
    size_t n;

    while ((n = BIO_ctrl_pending(c->wbio)) > 0) {
        if (buf_reserve(&c->out, n) != 0)
            return -1;
        int r = BIO_read(c->wbio, c->out.p + c->out.len, (int)n);
        if (r <= 0)
            break;
        c->out.len += (size_t)r;
    }
    return 0;
}

static void tls_fail(conn_t *c, int ssl_error)
{
    char why[256];

    ratel__tls_describe(c->ssl, ssl_error, why, sizeof why);
    ERR_clear_error();
    mark_failed(c, why, 1);
}

/* Encrypts n bytes into the socket's queue (a memory BIO takes all). */
static void tls_write(conn_t *c, const char *p, size_t n)
{
    while (n > 0 && c->state == CONN_UP) {
        int chunk = n > INT_MAX ? INT_MAX : (int)n;
        int r;

        ERR_clear_error();
        r = SSL_write(c->ssl, p, chunk);
        if (r <= 0) {
            tls_fail(c, SSL_get_error(c->ssl, r));
            return;
        }
        if (drain_wbio(c) != 0) {
            mark_failed(c, "out of memory", 0);
            return;
        }
        p += r;
        n -= (size_t)r;
    }
}

/* Decrypts everything received so far, handing it to `data`. */
static void tls_read(conn_t *c)
{
    char buf[READ_CHUNK];

    while (!c->closed && c->state == CONN_UP) {
        int r, err;

        ERR_clear_error();
        r = SSL_read(c->ssl, buf, sizeof buf);
        if (r > 0) {
            c->got_data = 1;
            c->link->data(c->link, buf, (size_t)r);
            continue;
        }
        err = SSL_get_error(c->ssl, r);
        if (drain_wbio(c) != 0)
            mark_failed(c, "out of memory", 0);
        else if (err == SSL_ERROR_ZERO_RETURN)
            mark_failed(c, "connection closed by the server", 0);
        else if (err != SSL_ERROR_WANT_READ)
            tls_fail(c, err);
        return;
    }
}

/*
 * One step of the handshake. When it ends, the plaintext queued meanwhile
 * is encrypted, `up` is called and what arrived with the last handshake
 * message is decrypted.
 */
static void tls_handshake(conn_t *c)
{
    int r, err;

    ERR_clear_error();
    r = SSL_do_handshake(c->ssl);
    if (drain_wbio(c) != 0) {
        mark_failed(c, "out of memory", 0);
        return;
    }
    if (r != 1) {
        err = SSL_get_error(c->ssl, r);
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
            tls_fail(c, err);
        return;
    }
    c->state = CONN_UP;
    tls_write(c, c->plain.p + c->plain.off, buf_size(&c->plain));
    buf_free(&c->plain);
    if (c->state != CONN_UP)
        return;
    c->link->up(c->link);
    if (!c->closed)
        tls_read(c);
}

/*
 * The socket failed (err, or 0 for the server's close). A TLS session the
 * server cut after asking for a client certificate, before anything else
 * arrived, was refused by TLS (transport_sock.h): its reason is TLS's.
 */
static void fail_socket(conn_t *c, int err, const char *closed)
{
    if (c->ssl && c->state == CONN_UP && !c->got_data &&
        ratel__transport_tls_asked(c->ssl)) {
        errno = err;
        tls_fail(c, SSL_ERROR_SYSCALL);
    } else if (err) {
        mark_failed_errno(c, err);
    } else {
        mark_failed(c, closed, 0);
    }
}

/* ------------------------------------------------------------ I/O */

/*
 * Writes what is queued until the socket would block. No callbacks. A
 * failed write does not end the connection yet: what the server sent
 * before it went (a TLS alert saying why it refused us, replies) is read
 * first, and read_in reports the write's error once nothing more comes.
 */
static void write_out(conn_t *c)
{
    while (c->state != CONN_FAILED && !c->write_errno &&
           buf_size(&c->out) > 0) {
        ssize_t n =
            send(c->fd, c->out.p + c->out.off, buf_size(&c->out), MSG_NOSIGNAL);

        if (n > 0) {
            c->out.off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            c->write_errno = n < 0 ? errno : EPIPE;
            buf_free(&c->out);
            wake(c->poll);
            return;
        }
    }
}

static void write_all(ratel__poll_t *p)
{
    for (conn_t *c = p->conns; c; c = c->next)
        if (c->state == CONN_UP || c->state == CONN_HANDSHAKE)
            write_out(c);
}

/* The connect finished: next address on failure, else TLS or `up`. */
static void connected(conn_t *c)
{
    int err = 0;
    socklen_t len = sizeof err;

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        close(c->fd);
        c->fd = -1;
        c->last_errno = err;
        if (connect_next(c) != 0)
            mark_failed_errno(c, err);
        return;
    }
    freeaddrinfo(c->addrs);
    c->addrs = c->next_addr = NULL;
    if (c->ssl) {
        c->state = CONN_HANDSHAKE;
        tls_handshake(c);
        return;
    }
    c->state = CONN_UP;
    c->link->up(c->link);
}

static void read_in(conn_t *c)
{
    char buf[READ_CHUNK];

    for (int round = 0; round < READ_ROUNDS; round++) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);

        if (n == 0) {
            fail_socket(c, c->write_errno,
                        c->state == CONN_HANDSHAKE
                            ? "connection closed by the server during the "
                              "TLS handshake"
                            : "connection closed by the server");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                fail_socket(c, errno, NULL);
            else if (c->write_errno)
                fail_socket(c, c->write_errno, NULL);
            return;
        }
        if (!c->ssl) {
            c->link->data(c->link, buf, (size_t)n);
        } else if (BIO_write(c->rbio, buf, (int)n) != (int)n) {
            mark_failed(c, "out of memory", 0);
        } else if (c->state == CONN_HANDSHAKE) {
            tls_handshake(c);
        } else {
            tls_read(c);
        }
        if (c->closed || c->state == CONN_FAILED || (size_t)n < sizeof buf)
            return;
    }
}

static void conn_ready(conn_t *c, short revents)
{
    if (c->state == CONN_CONNECTING) {
        connected(c);
        return;
    }
    if (revents & (POLLOUT | POLLERR))
        write_out(c);
    if (!c->closed && c->state != CONN_FAILED &&
        (revents & (POLLIN | POLLHUP | POLLERR)))
        read_in(c);
}

/* ------------------------------------------------------------ the loop */

/* poll()'s timeout in ms: rounded up, so the timer is never early. */
static int poll_timeout(const ratel__poll_t *p)
{
    int64_t wait_us;

    if (p->deferred || p->failed)
        return 0;
    if (p->timer_at < 0)
        return -1;
    wait_us = p->timer_at - ratel__transport_now_us();
    if (wait_us <= 0)
        return 0;
    if (wait_us / 1000 >= INT_MAX)
        return INT_MAX;
    return (int)((wait_us + 999) / 1000);
}

static short conn_events(const conn_t *c)
{
    if (c->state == CONN_CONNECTING)
        return POLLOUT;
    return (short)(POLLIN | (buf_size(&c->out) ? POLLOUT : 0));
}

/* Fills the poll set; returns its size (the eventfd and what fits).
   *now is set when a connection must be read without waiting (its write
   failed). */
static size_t build_poll_set(ratel__poll_t *p, int *now)
{
    size_t want = 1, n = 1;

    for (conn_t *c = p->conns; c; c = c->next)
        want++;
    if (want > p->pcap) {
        struct pollfd *pfds = realloc(p->pfds, want * sizeof *pfds);
        if (pfds)
            p->pfds = pfds;
        conn_t **pconns =
            pfds ? realloc(p->pconns, want * sizeof *pconns) : NULL;
        if (pconns) {
            p->pconns = pconns;
            p->pcap = want;
        }
    }
    p->pfds[0] = (struct pollfd){.fd = p->efd, .events = POLLIN};
    p->pconns[0] = NULL;
    for (conn_t *c = p->conns; c && n < p->pcap; c = c->next) {
        if (c->state == CONN_FAILED)
            continue;
        *now |= c->write_errno != 0;
        p->pfds[n] = (struct pollfd){.fd = c->fd, .events = conn_events(c)};
        p->pconns[n++] = c;
    }
    return n;
}

/* Waits for the sockets (at most until the timer; not at all with
   `nowait`) and serves what is ready. */
static void wait_io(ratel__poll_t *p, int nowait)
{
    int now = nowait;
    size_t n = build_poll_set(p, &now);
    int timeout = now ? 0 : poll_timeout(p), r;

    p->in_poll = 1;
    pthread_mutex_unlock(&p->lock);
    r = poll(p->pfds, n, timeout);
    pthread_mutex_lock(&p->lock);
    p->in_poll = 0;
    drain_wake(p);
    if (r < 0)
        return;
    for (size_t i = 1; i < n; i++) {
        conn_t *c = p->pconns[i];
        short revents = p->pfds[i].revents;

        if (c->closed || c->state == CONN_FAILED)
            continue;
        if (c->write_errno)
            revents |= POLLIN;
        if (revents)
            conn_ready(c, revents);
    }
}

static void fire_timer(ratel__poll_t *p)
{
    if (p->timer_at < 0 || ratel__transport_now_us() < p->timer_at)
        return;
    p->timer_at = -1;
    p->hooks.timer(p->hooks.ud);
}

static void flush(ratel__poll_t *p)
{
    if (!p->deferred)
        return;
    p->deferred = 0;
    p->hooks.flush(p->hooks.ud);
}

/* ------------------------------------------------------------ waiters */

/*
 * A thread waiting while another drives. Each has its own condition
 * variable, so a turn wakes exactly the waiters whose flags it set, and
 * a driver that leaves wakes one waiter to take over: with many threads,
 * a turn costs the wakeups it earned, not one per waiting thread.
 */
struct waiter_s {
    const int *done;
    pthread_cond_t cv;
    waiter_t *prev, *next;
};

/* After a turn: wakes the waiters whose flags are set. */
static void wake_done(ratel__poll_t *p)
{
    for (waiter_t *w = p->waiting; w; w = w->next)
        if (*w->done)
            pthread_cond_signal(&w->cv);
}

/* The driver left: wakes one waiter still waiting to drive. */
static void wake_driver(ratel__poll_t *p)
{
    for (waiter_t *w = p->waiting; w; w = w->next)
        if (!*w->done) {
            pthread_cond_signal(&w->cv);
            return;
        }
}

/* Waits while another thread drives and *done is not set. */
static void wait_for_driver(ratel__poll_t *p, const int *done)
{
    waiter_t w = {.done = done};

    pthread_cond_init(&w.cv, NULL);
    w.next = p->waiting;
    if (p->waiting)
        p->waiting->prev = &w;
    p->waiting = &w;
    while (!*done && p->driving)
        pthread_cond_wait(&w.cv, &p->lock);
    if (w.prev)
        w.prev->next = w.next;
    else
        p->waiting = w.next;
    if (w.next)
        w.next->prev = w.prev;
    pthread_cond_destroy(&w.cv);
}

static void turn(ratel__poll_t *p, const int *done)
{
    report_failed(p);
    fire_timer(p);
    flush(p);
    write_all(p);
    if (!*done)
        wait_io(p, 0);
    bury(p);
    wake_done(p);
}

/* The driver leaves: what the last callbacks queued leaves now, not when
   the next caller drives; waiters are woken. */
static void stop_driving(ratel__poll_t *p)
{
    flush(p);
    write_all(p);
    bury(p);
    p->driving = 0;
    wake_done(p);
    wake_driver(p);
}

void ratel__poll_wait(ratel__poll_t *p, const int *done)
{
    while (!*done) {
        if (p->driving) {
            wait_for_driver(p, done);
            continue;
        }
        p->driving = 1;
        while (!*done)
            turn(p, done);
        stop_driving(p);
    }
}

void ratel__poll_pump(ratel__poll_t *p)
{
    if (p->driving)
        return; /* the driver serves it */
    p->driving = 1;
    report_failed(p);
    fire_timer(p);
    flush(p);
    write_all(p);
    wait_io(p, 1);
    stop_driving(p);
}

/* ------------------------------------------------------------ transport */

static int resolve(conn_t *c, const char *host, int port, char *why,
                   size_t whylen)
{
    struct addrinfo hints = {0};
    char service[16];
    int rc;

    if (port < 1 || port > 65535) {
        snprintf(why, whylen, "port %d of %s is not in 1..65535", port, host);
        return -1;
    }
    snprintf(service, sizeof service, "%d", port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(host, service, &hints, &c->addrs);
    if (rc != 0) {
        snprintf(why, whylen, "cannot resolve %s: %s", host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        c->addrs = NULL;
        return -1;
    }
    c->next_addr = c->addrs;
    return 0;
}

static int tls_setup(conn_t *c, const ratel__tls_target_t *tls, char *why,
                     size_t whylen)
{
    if (ratel__tls_new(tls->ctx, tls->server_name, tls->insecure, &c->ssl, why,
                       whylen) != 0)
        return -1;
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    if (!c->rbio || !c->wbio) {
        BIO_free(c->rbio);
        BIO_free(c->wbio);
        c->rbio = c->wbio = NULL;
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_connect_state(c->ssl);
    ratel__transport_tls_watch(c->ssl);
    return 0;
}

static void *poll_open(void *tud, ratel__link_t *link, const char *host,
                       int port, const ratel__tls_target_t *tls, char *why,
                       size_t whylen)
{
    ratel__poll_t *p = tud;
    conn_t *c = calloc(1, sizeof *c);

    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    c->poll = p;
    c->link = link;
    c->fd = -1;
    if (resolve(c, host, port, why, whylen) != 0 ||
        (tls && tls_setup(c, tls, why, whylen) != 0)) {
        release_io(c);
        free(c);
        return NULL;
    }
    c->next = p->conns;
    if (p->conns)
        p->conns->prev = c;
    p->conns = c;
    if (connect_next(c) != 0)
        mark_failed_errno(c, c->last_errno);
    wake(p);
    return c;
}

static void poll_send(void *tud, void *handle, const char *bytes, size_t n)
{
    conn_t *c = handle;
    int rc = 0;

    (void)tud;
    if (c->state == CONN_FAILED || c->write_errno || n == 0)
        return;
    if (c->ssl && c->state == CONN_UP)
        tls_write(c, bytes, n);
    else
        rc = buf_append(c->ssl ? &c->plain : &c->out, bytes, n);
    if (rc != 0)
        mark_failed(c, "out of memory", 0);
    wake(c->poll);
}

static void poll_close(void *tud, void *handle)
{
    ratel__poll_t *p = tud;

    retire(handle);
    wake(p);
}

static void poll_timer(void *tud, int64_t at_us)
{
    ratel__poll_t *p = tud;

    p->timer_at = at_us < 0 ? -1 : at_us;
    wake(p);
}

static void poll_defer(void *tud)
{
    ratel__poll_t *p = tud;

    if (p->deferred)
        return;
    p->deferred = 1;
    wake(p);
}

static int64_t poll_now(void *tud)
{
    (void)tud;
    return ratel__transport_now_us();
}

const ratel__transport_t ratel__poll_transport = {
    .open = poll_open,
    .send = poll_send,
    .close = poll_close,
    .timer = poll_timer,
    .defer = poll_defer,
    .now = poll_now,
};

int ratel__poll_new(ratel__poll_t **out, const ratel__loop_hooks_t *hooks)
{
    ratel__poll_t *p = calloc(1, sizeof *p);

    *out = NULL;
    if (!p)
        return RATEL_ENOMEM;
    p->hooks = *hooks;
    p->timer_at = -1;
    p->pcap = 8;
    p->pfds = calloc(p->pcap, sizeof *p->pfds);
    p->pconns = calloc(p->pcap, sizeof *p->pconns);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!p->pfds || !p->pconns || p->efd < 0) {
        if (p->efd >= 0)
            close(p->efd);
        free(p->pfds);
        free(p->pconns);
        free(p);
        return RATEL_ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return 0;
}

void ratel__poll_free(ratel__poll_t *p)
{
    if (!p)
        return;
    while (p->conns)
        retire(p->conns);
    bury(p);
    close(p->efd);
    free(p->pfds);
    free(p->pconns);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void ratel__poll_lock(ratel__poll_t *p)
{
    pthread_mutex_lock(&p->lock);
}

void ratel__poll_unlock(ratel__poll_t *p)
{
    pthread_mutex_unlock(&p->lock);
}
