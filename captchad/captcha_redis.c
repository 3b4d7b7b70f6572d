/*
 * captcha_redis.c - the code store's Redis connection: one connection to
 * one primary on libratel's transports (lib/store/transport.h), so that
 * codes reach Redis the way the rate limits do: TLS (rediss://) with the
 * same settings and messages, and on a worker's libevent loop without
 * ever waiting.
 *
 * Commands leave in order on the one connection (pipelined), each with a
 * deadline (timeout_ms): hiredis encodes them and its reader parses the
 * replies, which answer the oldest command first. When the oldest command
 * passes its deadline, or the connection fails, the connection is closed
 * and every command on it is told (a NULL reply): a hung server delays
 * a command by timeout_ms at most, and the next command connects again.
 * A new connection sends AUTH and SELECT before anything else.
 *
 * Two flavours: on an event_base (a worker: callbacks on its loop), or on
 * the poll transport (base NULL: captcha_redis_call waits on the caller's
 * thread, for the sender thread and start-up).
 */
#include "captchad/captcha_redis.h"

#include "app/log.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct redis_op_s {
    struct redis_op_s *next;
    int64_t deadline_us;
    captcha_reply_fn *fn; /* NULL: AUTH or SELECT, checked here */
    void *ud;
} redis_op_t;

struct captcha_redis_s {
    ratel__link_t link; /* first: the transport's callbacks find r */
    const captcha_redis_conf_t *conf;
    const ratel__transport_t *tp;
    void *tud;
    ratel__event_t *event;
    ratel__poll_t *poll;
    void *handle; /* NULL: not connected */
    redisReader *reader;
    redis_op_t *head, *tail;
};

static captcha_redis_t *of_link(ratel__link_t *link)
{
    return (captcha_redis_t *)link;
}

static void arm(captcha_redis_t *r)
{
    r->tp->timer(r->tud, r->head ? r->head->deadline_us : -1);
}

/* Closes the connection and tells every command on it (NULL replies).
   A callback may send again: it finds a fresh, empty connection. */
static void fail_all(captcha_redis_t *r, const char *why)
{
    redis_op_t *op = r->head, *next;

    if (r->handle)
        r->tp->close(r->tud, r->handle);
    r->handle = NULL;
    if (r->reader)
        redisReaderFree(r->reader);
    r->reader = NULL;
    r->head = r->tail = NULL;
    arm(r);
    /* Counted by the code store as errors; not logged: a hung server
       would write a line per deadline. */
    (void)why;
    for (; op; op = next) {
        next = op->next;
        if (op->fn)
            op->fn(op->ud, NULL);
        free(op);
    }
}

static void on_up(ratel__link_t *link)
{
    (void)link;
}

static void on_down(ratel__link_t *link, const char *why, int tls_error)
{
    captcha_redis_t *r = of_link(link);

    (void)tls_error;
    r->handle = NULL; /* the transport has let go of it */
    fail_all(r, why);
}

/* One reply: the oldest command's. AUTH and SELECT must succeed. */
static int take_reply(captcha_redis_t *r, redisReply *reply)
{
    redis_op_t *op = r->head;

    if (!op) {
        freeReplyObject(reply);
        return -1;
    }
    r->head = op->next;
    if (!r->head)
        r->tail = NULL;
    arm(r);
    if (!op->fn) {
        int bad = reply->type == REDIS_REPLY_ERROR;
        if (bad)
            ratel__log("error", "redis code store", "reason=\"%s\"",
                       reply->str);
        freeReplyObject(reply);
        free(op);
        return bad ? -1 : 0;
    }
    op->fn(op->ud, reply);
    free(op);
    return 0;
}

static void on_data(ratel__link_t *link, const char *p, size_t n)
{
    captcha_redis_t *r = of_link(link);
    void *reply;

    if (!r->reader || redisReaderFeed(r->reader, p, n) != REDIS_OK) {
        fail_all(r, "cannot read the reply");
        return;
    }
    while (r->reader) {
        if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
            fail_all(r, "not a Redis reply");
            return;
        }
        if (!reply)
            return;
        if (take_reply(r, reply) != 0) {
            fail_all(r, "AUTH or SELECT refused");
            return;
        }
    }
}

static void on_timer(void *ud)
{
    captcha_redis_t *r = ud;

    if (r->head && r->head->deadline_us <= r->tp->now(r->tud))
        fail_all(r, "no answer within timeout_ms");
    else
        arm(r);
}

static void on_flush(void *ud)
{
    (void)ud;
}

/* Queues argv as one command; fn NULL: AUTH or SELECT. */
static int queue(captcha_redis_t *r, int argc, const char **argv,
                 const size_t *lens, captcha_reply_fn *fn, void *ud)
{
    redis_op_t *op = calloc(1, sizeof *op);
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);

    if (!op || len < 0) {
        free(op);
        free(cmd);
        return -1;
    }
    r->tp->send(r->tud, r->handle, cmd, (size_t)len);
    free(cmd);
    op->fn = fn;
    op->ud = ud;
    op->deadline_us = r->tp->now(r->tud) + (int64_t)r->conf->timeout_ms * 1000;
    if (r->tail)
        r->tail->next = op;
    else
        r->head = op;
    r->tail = op;
    if (r->head == op)
        arm(r);
    return 0;
}

/* Connects (AUTH and SELECT queued first); 0 or -1 (logged). */
static int connect_now(captcha_redis_t *r)
{
    const captcha_redis_conf_t *c = r->conf;
    const char *host = c->url.addrs[0].host;
    ratel__tls_target_t tls = {
        c->tls_ctx, c->server_name ? c->server_name : host, c->insecure};
    char why[300], db[16];

    r->reader = redisReaderCreate();
    if (r->reader)
        r->handle = r->tp->open(r->tud, &r->link, host, c->url.addrs[0].port,
                                c->tls_ctx ? &tls : NULL, why, sizeof why);
    if (!r->reader || !r->handle) {
        fail_all(r, r->reader ? why : "out of memory");
        return -1;
    }
    if (c->url.has_password) {
        const char *argv[] = {"AUTH", c->url.username, c->url.password};
        int user = c->url.username[0] != 0;
        if (user)
            queue(r, 3, argv, NULL, NULL, NULL);
        else {
            argv[1] = c->url.password;
            queue(r, 2, argv, NULL, NULL, NULL);
        }
    }
    if (c->url.db) {
        const char *argv[] = {"SELECT", db};
        snprintf(db, sizeof db, "%d", c->url.db);
        queue(r, 2, argv, NULL, NULL, NULL);
    }
    return 0;
}

void captcha_redis_command(captcha_redis_t *r, int argc, const char **argv,
                           captcha_reply_fn *fn, void *ud)
{
    if (!r->handle && connect_now(r) != 0) {
        fn(ud, NULL);
        return;
    }
    if (queue(r, argc, argv, NULL, fn, ud) != 0)
        fn(ud, NULL);
}

void captcha_redis_lock(captcha_redis_t *r)
{
    ratel__poll_lock(r->poll);
}

void captcha_redis_wait(captcha_redis_t *r, const int *done)
{
    ratel__poll_wait(r->poll, done);
}

void captcha_redis_unlock(captcha_redis_t *r)
{
    ratel__poll_unlock(r->poll);
}

int captcha_redis_new(captcha_redis_t **out, const captcha_redis_conf_t *conf,
                      struct event_base *base)
{
    captcha_redis_t *r = calloc(1, sizeof *r);
    ratel__loop_hooks_t hooks = {on_timer, on_flush, r};
    int rc;

    *out = NULL;
    if (!r)
        return RATEL_ENOMEM;
    r->link = (ratel__link_t){on_up, on_data, on_down};
    r->conf = conf;
    if (base) {
        rc = ratel__event_new(&r->event, base, &hooks);
        r->tp = &ratel__event_transport;
        r->tud = r->event;
    } else {
        rc = ratel__poll_new(&r->poll, &hooks);
        r->tp = &ratel__poll_transport;
        r->tud = r->poll;
    }
    if (rc != 0) {
        free(r);
        return RATEL_ENOMEM;
    }
    *out = r;
    return 0;
}

void captcha_redis_free(captcha_redis_t *r)
{
    if (!r)
        return;
    if (r->poll)
        ratel__poll_lock(r->poll);
    fail_all(r, NULL);
    if (r->poll) {
        ratel__poll_unlock(r->poll);
        ratel__poll_free(r->poll);
    }
    ratel__event_free(r->event);
    free(r);
}
