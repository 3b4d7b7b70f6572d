/*
 * engine.c - the Redis engine's commands from submission to completion
 * (engine.h): the live list ordered by deadline, each node's queue, the
 * dispatch of a turn's commands in one write per connection, the breaker,
 * and the loop's two hooks (the timer and the end-of-turn flush).
 *
 * A command's places. Submitted, it joins the live list (by deadline) and
 * its node's queue; the flush moves a node's queue onto one of its ready
 * connections (encoded into the connection's output, sent in one write)
 * where it waits for its reply in the connection's ring; a failover may
 * park it (engine_route.c). Wherever it is, it is finished exactly once:
 * removed from every list and put on the done list, told at the next
 * flush, so that `done` never runs inside ratel__engine_submit().
 */
#include "store/engine_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ratel__msg(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int ratel__reply_starts(const redisReply *r, const char *prefix)
{
    size_t n = strlen(prefix);

    return r->str && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

int ratel__reply_unavailable(const redisReply *r)
{
    static const char *const now[] = {"LOADING",     "BUSY",     "MASTERDOWN",
                                      "CLUSTERDOWN", "TRYAGAIN", "OOM",
                                      "READONLY"};

    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    for (size_t i = 0; i < sizeof now / sizeof now[0]; i++)
        if (ratel__reply_starts(r, now[i]))
            return 1;
    return 0;
}

void ratel__engine_error(ratel__engine_t *e, const char *message)
{
    if (e->sh->error)
        e->sh->error(e->sh->note_ud, message);
}

/* ------------------------------------------------------------ lists */

static void live_unlink(ratel__engine_t *e, ratel__rop_t *rop)
{
    if (rop->aprev)
        rop->aprev->anext = rop->anext;
    else if (e->ahead == rop)
        e->ahead = rop->anext;
    if (rop->anext)
        rop->anext->aprev = rop->aprev;
    else if (e->atail == rop)
        e->atail = rop->aprev;
    rop->aprev = rop->anext = NULL;
}

void ratel__queue_unlink(ratel__rop_t **head, ratel__rop_t **tail,
                         ratel__rop_t *rop)
{
    if (rop->qprev)
        rop->qprev->qnext = rop->qnext;
    else
        *head = rop->qnext;
    if (rop->qnext)
        rop->qnext->qprev = rop->qprev;
    else
        *tail = rop->qprev;
    rop->qprev = rop->qnext = NULL;
}

void ratel__queue_append(ratel__rop_t **head, ratel__rop_t **tail,
                         ratel__rop_t *rop)
{
    rop->qnext = NULL;
    rop->qprev = *tail;
    if (*tail)
        (*tail)->qnext = rop;
    else
        *head = rop;
    *tail = rop;
}

/* Takes `rop` out of the queue it waits in (not off a connection). */
static void unplace(ratel__engine_t *e, ratel__rop_t *rop)
{
    if (rop->where == WHERE_QUEUE)
        ratel__queue_unlink(&rop->node->qhead, &rop->node->qtail, rop);
    else if (rop->where == WHERE_PARKED)
        ratel__queue_unlink(&e->parked_head, &e->parked_tail, rop);
    else if (rop->where == WHERE_WAIT)
        ratel__queue_unlink(&e->wait_head, &e->wait_tail, rop);
    else if (rop->where == WHERE_HELD && rop->conn) {
        conn_t *c = rop->conn;
        ratel__queue_unlink(&c->await_head, &c->await_tail, rop);
    }
    rop->where = WHERE_NONE;
}

void ratel__engine_defer(ratel__engine_t *e)
{
    if (!e->deferred && e->t) {
        e->deferred = 1;
        e->t->defer(e->tud);
    }
}

void ratel__engine_finish(ratel__engine_t *e, ratel__rop_t *rop, int rc,
                          redisReply *reply)
{
    unplace(e, rop);
    live_unlink(e, rop);
    rop->conn = NULL;
    rop->rc = rc;
    rop->reply = reply;
    rop->down_until_us = 0;
    if (rc != 0 && rop->node)
        ratel__engine_node_down(rop->node, rop->now_us, &rop->down_until_us);
    if (reply && rop->reply_fn)
        rop->reply_fn(rop);
    rop->where = WHERE_DONE;
    rop->qprev = e->ftail;
    rop->qnext = NULL;
    if (e->ftail)
        e->ftail->qnext = rop;
    else
        e->fhead = rop;
    e->ftail = rop;
    ratel__engine_defer(e);
}

void ratel__engine_node_dirty(ratel__node_t *node)
{
    ratel__engine_t *e = node->e;

    if (!node->dirty) {
        node->dirty = 1;
        node->dnext = e->dirty_nodes;
        e->dirty_nodes = node;
    }
    ratel__engine_defer(e);
}

void ratel__engine_conn_dirty(conn_t *c)
{
    ratel__engine_t *e = c->e;

    if (!c->dirty) {
        c->dirty = 1;
        c->dnext = e->dirty_conns;
        e->dirty_conns = c;
    }
    ratel__engine_defer(e);
}

/* ------------------------------------------------- health sources */

ratel__health_source_t *ratel__redis_health_source(ratel__redis_shared_t *sh,
                                                   const char *name)
{
    ratel__health_source_t *src;

    pthread_mutex_lock(&sh->sources_lock);
    for (src = sh->sources; src; src = src->next)
        if (strcmp(src->name, name) == 0)
            break;
    if (!src && (src = calloc(1, sizeof *src))) {
        snprintf(src->name, sizeof src->name, "%s", name);
        src->next = sh->sources;
        sh->sources = src;
    }
    pthread_mutex_unlock(&sh->sources_lock);
    return src;
}

void ratel__redis_health_sources_free(ratel__redis_shared_t *sh)
{
    while (sh->sources) {
        ratel__health_source_t *next = sh->sources->next;
        free(sh->sources);
        sh->sources = next;
    }
}

/* ------------------------------------------------------------ nodes */

ratel__node_t *ratel__engine_node_at(ratel__engine_t *e, const char *host,
                                     int port, size_t *index)
{
    ratel__node_t *nd;

    for (size_t i = 0; i < e->nnodes; i++) {
        if (e->nodes[i]->port == port && strcmp(e->nodes[i]->host, host) == 0) {
            if (index)
                *index = i;
            return e->nodes[i];
        }
    }
    if (e->nnodes == ENGINE_MAX_NODES || strlen(host) >= sizeof nd->host)
        return NULL;
    nd = calloc(1, sizeof *nd);
    if (!nd)
        return NULL;
    nd->e = e;
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->port = port;
    ratel__msg(nd->name, sizeof nd->name,
               strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    nd->source =
        ratel__redis_health_source((ratel__redis_shared_t *)e->sh, nd->name);
    if (!nd->source) {
        free(nd);
        return NULL;
    }
    if (index)
        *index = e->nnodes;
    e->nodes[e->nnodes++] = nd;
    return nd;
}

int ratel__engine_node_down(ratel__node_t *node, int64_t now_us,
                            int64_t *until_us)
{
    if (until_us)
        *until_us = node->down_until_us;
    return node->down_until_us != 0 && now_us < node->down_until_us;
}

const char *ratel__engine_node_name(const ratel__node_t *node)
{
    return node->name;
}

const char *ratel__engine_node_error(const ratel__node_t *node)
{
    return node->errstr;
}

static void breaker_count(ratel__node_t *node, int open)
{
    ratel__redis_shared_t *sh = (ratel__redis_shared_t *)node->e->sh;

    if (node->breaker_counted == open)
        return;
    node->breaker_counted = open;
    atomic_fetch_add_explicit(&sh->breaker_open, open ? 1 : -1,
                              memory_order_relaxed);
}

int ratel__engine_node_health_clear(ratel__node_t *node)
{
    return node->source->down &&
           ratel__health_set(node->e->sh->health, &node->source->down, 0, NULL,
                             ratel_clock_now_us());
}

/* A round trip on the node succeeded: the breaker closes, health is up. */
void ratel__engine_node_ok(ratel__node_t *node)
{
    ratel__redis_shared_t *sh = (ratel__redis_shared_t *)node->e->sh;
    int changed;

    node->down_until_us = 0;
    node->fail_streak = 0;
    node->probing = 0;
    node->errstr[0] = '\0';
    breaker_count(node, 0);
    atomic_fetch_add_explicit(&node->source->ups, 1, memory_order_relaxed);
    changed =
        node->source->down && ratel__health_set(sh->health, &node->source->down,
                                                0, NULL, ratel_clock_now_us());
    if (node->source->warn)
        changed |= ratel__health_warn(sh->health, &node->source->warn, 0, NULL);
    if (changed)
        ratel__health_notify(sh->health);
}

/* Fails every queued command of the node that may not try it now. */
static void fail_queue(ratel__node_t *node, int rc, int all)
{
    ratel__rop_t *rop = node->qhead, *next;

    for (; rop; rop = next) {
        next = rop->qnext;
        if (all || !rop->force)
            ratel__engine_finish(node->e, rop, rc, NULL);
    }
}

/*
 * The node failed (`c`'s failure, or its connect or a command timed out):
 * its breaker opens (unless only forced commands saw it: a ping reports
 * without moving the callers' breaker), every connection closes, and what
 * waited for it fails. Health goes down with the reason.
 */
void ratel__engine_node_failed(ratel__node_t *node, int rc, const char *why,
                               int forced_only)
{
    ratel__engine_t *e = node->e;
    const ratel__redis_shared_t *sh = e->sh;
    int64_t now = e->last_now_us;
    char sentinel[300];

    ratel__msg(node->errstr, sizeof node->errstr, "%s", why);
    ratel__msg(sentinel, sizeof sentinel, "Sentinel %s", why);
    ratel__engine_error(e, why);
    if (!forced_only) {
        if (node->fail_streak < 3)
            node->fail_streak++;
        node->down_until_us = now + (sh->breaker_us << (node->fail_streak - 1));
        if (node->down_until_us <= 0)
            node->down_until_us = 1;
        node->ups_seen =
            atomic_load_explicit(&node->source->ups, memory_order_relaxed);
        breaker_count(node, 1);
    }
    node->probing = 0;
    while (node->conns)
        ratel__conn_fail(node->conns, rc, 0);
    fail_queue(node, rc, 1);
    /* A Sentinel that fails is one voice fewer, not an outage: a warning
       (the data nodes say whether the store can decide). */
    if (node->sentinel
            ? ratel__health_warn(sh->health, &node->source->warn, 1, sentinel)
            : ratel__health_set(sh->health, &node->source->down, 1, why,
                                ratel_clock_now_us()))
        ratel__health_notify(sh->health);
}

/* ---------------------------------------------------------- commands */

void ratel__engine_enqueue(ratel__engine_t *e, ratel__node_t *node,
                           ratel__rop_t *rop)
{
    rop->node = node;
    if (node->down_until_us != 0 && !rop->force) {
        /* Open, unless the address answered another of the store's
           engines since (the health check's PING): then probe now. */
        if (rop->now_us < node->down_until_us &&
            atomic_load_explicit(&node->source->ups, memory_order_relaxed) ==
                node->ups_seen) {
            ratel__engine_finish(e, rop, RATEL_EIO, NULL);
            return;
        }
        /* Half-open: this command probes; the rest wait behind it. */
        node->probing = 1;
    }
    rop->where = WHERE_QUEUE;
    ratel__queue_append(&node->qhead, &node->qtail, rop);
    ratel__engine_node_dirty(node);
}

/* Starts a command's life: its deadline, its place in the live list. */
void ratel__engine_live_add(ratel__engine_t *e, ratel__rop_t *rop)
{
    if (rop->now_us > e->last_now_us)
        e->last_now_us = rop->now_us;
    /* One clock reading per turn: commands issued together share it. */
    if (e->clock_us == 0)
        e->clock_us = e->t->now(e->tud);
    rop->deadline_us = e->clock_us + (int64_t)e->sh->command_timeout_ms * 1000;
    rop->anext = NULL;
    rop->aprev = e->atail;
    if (e->atail)
        e->atail->anext = rop;
    else
        e->ahead = rop;
    e->atail = rop;
}

void ratel__engine_submit(ratel__engine_t *e, ratel__rop_t *rop)
{
    ratel__node_t *node;

    rop->rc = 0;
    rop->reply = NULL;
    rop->node = NULL;
    rop->conn = NULL;
    rop->attempts = 0;
    rop->asking = 0;
    rop->where = WHERE_NONE;
    rop->found[0] = '\0';
    rop->refused = 0;
    ratel__engine_live_add(e, rop);
    if (e->freeing) {
        ratel__engine_finish(e, rop, RATEL_EIO, NULL);
        return;
    }
    node = rop->target ? rop->target : ratel__route_rop(e, rop);
    if (rop->where == WHERE_PARKED) {
        /* It waits for a cluster's map being read (engine_route.c). */
        ratel__engine_rearm(e);
        return;
    }
    if (!node && !e->have_primary) {
        /* Sentinel: no primary named yet; it waits for the answer. */
        if (!ratel__route_park(e, rop, RATEL_EIO))
            ratel__engine_finish(e, rop, RATEL_EIO, NULL);
        ratel__engine_rearm(e);
        return;
    }
    if (!node) {
        ratel__engine_error(e, "no cluster node answered");
        ratel__engine_finish(e, rop, RATEL_EIO, NULL);
        return;
    }
    ratel__engine_enqueue(e, node, rop);
    ratel__engine_rearm(e);
}

/* Whether a command waits for its node's preparation: those that run the
   core, and PING (ratel_store_ping() checks that the core can run). */
static int needs_code(const ratel__rop_t *rop)
{
    return rop->kind <= RATEL__ROP_UNSLICE || rop->kind == RATEL__ROP_PING;
}

/* The ready connection with the fewest replies outstanding. */
static conn_t *pick_conn(ratel__node_t *node, int *busy)
{
    conn_t *best = NULL;

    *busy = 1;
    for (conn_t *c = node->conns; c; c = c->next) {
        if (c->state != CONN_READY || c->subscriber)
            continue;
        if (!best || c->pcount < best->pcount)
            best = c;
    }
    if (best && best->pcount == 0)
        *busy = 0;
    return best;
}

/* Whether one of the node's connections is still being made. */
static int opening(const ratel__node_t *node)
{
    for (const conn_t *c = node->conns; c; c = c->next)
        if (c->state != CONN_READY && !c->subscriber)
            return 1;
    return 0;
}

static void to_flight(conn_t *c, ratel__rop_t *rop)
{
    ratel__queue_unlink(&c->node->qhead, &c->node->qtail, rop);
    rop->where = WHERE_FLIGHT;
    rop->conn = c;
    rop->attempts++;
}

/* Whether an ACQUIRE may go in a ratel_acquire_many with others: on the
   library or the EVAL script, unless it must follow an ASKING of its own. */
static int joins_many(const ratel__node_t *node, const ratel__rop_t *rop)
{
    return (node->mode == RATEL__MODE_FUNCTION ||
            node->mode == RATEL__MODE_LUA) &&
           rop->kind == RATEL__ROP_ACQUIRE && !rop->asking && !rop->force;
}

/*
 * Sends `first` and the queued ACQUIREs after it that may join it (up to
 * ENGINE_MANY_MAX, in a cluster those of its slot) as one
 * ratel_acquire_many (FCALL, or the EVAL script's ACQUIRE_MANY): one call
 * and one reply for many decisions, each as its own call would decide it.
 * Returns the queue's next command.
 */
static ratel__rop_t *dispatch_many(conn_t *c, ratel__rop_t *first)
{
    ratel__rop_t *rops[ENGINE_MANY_MAX], *next = first;
    size_t n = 0;

    while (next && n < ENGINE_MANY_MAX && joins_many(c->node, next) &&
           ratel__route_same_slot(c->e, first, next)) {
        rops[n++] = next;
        next = next->qnext;
    }
    for (size_t i = 0; i < n; i++)
        to_flight(c, rops[i]);
    if (ratel__conn_push_many(c, rops, n) != 0)
        for (size_t i = 0; i < n; i++)
            ratel__engine_finish(c->e, rops[i], RATEL_ENOMEM, NULL);
    return next;
}

/*
 * Moves the node's queue onto a ready connection; opens one when none is
 * (or, all busy, another while the pool has room).
 */
static void dispatch(ratel__node_t *node)
{
    ratel__engine_t *e = node->e;
    int busy;
    conn_t *c = pick_conn(node, &busy);

    if ((!c || busy) && node->qhead && !opening(node) &&
        node->nconns < e->sh->pool_size +
                           (e->subscription && e->subscription->node == node)) {
        char why[300];
        if (!ratel__conn_open(node, why, sizeof why)) {
            ratel__engine_node_failed(node, RATEL_EIO, why, 0);
            return;
        }
    }
    if (!c)
        return;
    if (!ratel__node_prepared(node))
        ratel__conn_prepare(c);
    for (ratel__rop_t *rop = node->qhead, *next; rop; rop = next) {
        next = rop->qnext;
        if (needs_code(rop) && !ratel__node_prepared(node))
            continue;
        if (joins_many(node, rop) && next && joins_many(node, next) &&
            ratel__route_same_slot(e, rop, next)) {
            next = dispatch_many(c, rop);
            continue;
        }
        to_flight(c, rop);
        if (ratel__conn_push(c, rop, STEP_ROP) != 0)
            ratel__engine_finish(e, rop, RATEL_ENOMEM, NULL);
    }
    if (ratel__conn_push_wait(c) != 0)
        ratel__engine_node_failed(node, RATEL_ENOMEM, "out of memory", 0);
}

/* Sends each dirty connection's output in one write. */
static void send_dirty(ratel__engine_t *e)
{
    ratel__redis_shared_t *sh = (ratel__redis_shared_t *)e->sh;

    while (e->dirty_conns) {
        conn_t *c = e->dirty_conns;
        e->dirty_conns = c->dnext;
        c->dirty = 0;
        if (c->outlen == 0 || !c->handle)
            continue;
        e->t->send(e->tud, c->handle, c->out, c->outlen);
        atomic_fetch_add_explicit(&sh->round_trips, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->commands, c->outcmds,
                                  memory_order_relaxed);
        c->outlen = 0;
        c->outcmds = 0;
    }
}

/* The end of a turn: dispatch, write, then tell what is done. */
static void hook_flush(void *ud)
{
    ratel__engine_t *e = ud;

    if (e->flushing)
        return;
    e->flushing = 1;
    e->deferred = 0;
    while (e->dirty_nodes || e->dirty_conns || e->fhead) {
        while (e->dirty_nodes) {
            ratel__node_t *node = e->dirty_nodes;
            e->dirty_nodes = node->dnext;
            node->dirty = 0;
            dispatch(node);
        }
        send_dirty(e);
        /* Every finished command is told before the next dispatch: a
           caller that issues its next call from a callback then has its
           commands leave together in one write, not one write each. */
        while (e->fhead) {
            ratel__rop_t *rop = e->fhead;
            e->fhead = rop->qnext;
            if (!e->fhead)
                e->ftail = NULL;
            rop->qnext = rop->qprev = NULL;
            rop->where = WHERE_NONE;
            rop->done(rop);
        }
    }
    e->deferred = 0;
    e->flushing = 0;
    e->clock_us = 0;
    ratel__engine_rearm(e);
}

/* ------------------------------------------------------------ timer */

void ratel__engine_rearm(ratel__engine_t *e)
{
    int64_t at = e->ahead ? e->ahead->deadline_us : -1;

    for (size_t i = 0; i < e->nnodes; i++)
        for (conn_t *c = e->nodes[i]->conns; c; c = c->next)
            if (c->state != CONN_READY) {
                int64_t when = c->probe_at_us && !c->node->probed
                                   ? c->probe_at_us
                                   : c->open_deadline_us;
                if (at < 0 || when < at)
                    at = when;
            }
    if (at != e->timer_at && e->t) {
        e->timer_at = at;
        e->t->timer(e->tud, at);
    }
}

/* A connection not made within connect_timeout_ms fails its node. */
static void connect_timeouts(ratel__engine_t *e, int64_t now)
{
    for (size_t i = 0; i < e->nnodes; i++) {
        ratel__node_t *node = e->nodes[i];
        for (conn_t *c = node->conns; c; c = c->next) {
            char why[400];
            if (c->state == CONN_OPENING && c->probe_at_us &&
                c->probe_at_us <= now && !node->probed)
                ratel__probe_start(node);
            if (c->state == CONN_READY || c->open_deadline_us > now)
                continue;
            if (node->plain) /* the probe found plain Redis there */
                ratel__msg(why, sizeof why, "%s", node->plain_why);
            else
                ratel__msg(why, sizeof why,
                           "cannot connect to %s: no answer within %d ms "
                           "(connect_timeout_ms)",
                           node->name, e->sh->connect_timeout_ms);
            ratel__engine_node_failed(
                node, node->plain ? RATEL_EPROTO : RATEL_EIO, why, 0);
            break;
        }
    }
}

/* Whether one of the node's connections waits for an answer. */
static int stuck(const ratel__node_t *node)
{
    for (const conn_t *c = node->conns; c; c = c->next)
        if (!c->subscriber && (c->pcount > 0 || c->state != CONN_READY))
            return 1;
    return 0;
}

/* Commands past their deadline fail; a connection that kept one fails
   with it (a server that does not answer is hung or gone). */
static void command_timeouts(ratel__engine_t *e, int64_t now)
{
    while (e->ahead && e->ahead->deadline_us <= now) {
        ratel__rop_t *rop = e->ahead;
        ratel__node_t *node = rop->node;
        char why[400];

        if ((rop->where == WHERE_FLIGHT || rop->where == WHERE_HELD) &&
            rop->conn) {
            ratel__msg(why, sizeof why,
                       "%s: no reply within %d ms (timeout_ms)", node->name,
                       e->sh->command_timeout_ms);
            ratel__engine_node_failed(node, RATEL_EIO, why, rop->force);
            if (rop->where != WHERE_DONE)
                ratel__engine_finish(e, rop, RATEL_EIO, NULL);
            continue;
        }
        if (node && rop->where == WHERE_QUEUE && stuck(node)) {
            /* It waited behind a connection that does not answer (its
               setup or the node's preparation): the node is hung. */
            ratel__msg(why, sizeof why,
                       "%s: no reply within %d ms (timeout_ms)", node->name,
                       e->sh->command_timeout_ms);
            ratel__engine_node_failed(node, RATEL_EIO, why, rop->force);
            if (rop->where == WHERE_DONE)
                continue;
        }
        ratel__engine_finish(e, rop, RATEL_EIO, NULL);
    }
}

static void hook_timer(void *ud)
{
    ratel__engine_t *e = ud;
    int64_t now = e->t->now(e->tud);

    e->timer_at = -1;
    connect_timeouts(e, now);
    command_timeouts(e, now);
    ratel__engine_rearm(e);
}

/* ------------------------------------------------------------ create */

ratel__engine_t *ratel__engine_new(const ratel__redis_shared_t *shared,
                                   ratel__loop_hooks_t *hooks)
{
    ratel__engine_t *e = calloc(1, sizeof *e);

    if (!e)
        return NULL;
    e->sh = shared;
    e->timer_at = -1;
    e->have_primary = !shared->url.sentinel;
    for (size_t i = 0; i < shared->url.naddrs; i++) {
        ratel__node_t *node = ratel__engine_node_at(
            e, shared->url.addrs[i].host, shared->url.addrs[i].port, NULL);
        if (!node) {
            ratel__engine_free(e);
            return NULL;
        }
        node->sentinel = shared->url.sentinel;
    }
    hooks->timer = hook_timer;
    hooks->flush = hook_flush;
    hooks->ud = e;
    return e;
}

void ratel__engine_set_transport(ratel__engine_t *e,
                                 const ratel__transport_t *transport, void *tud)
{
    e->t = transport;
    e->tud = tud;
}

void ratel__engine_free(ratel__engine_t *e)
{
    if (!e)
        return;
    e->freeing = 1;
    for (size_t i = 0; i < e->nnodes; i++) {
        ratel__node_t *node = e->nodes[i];
        while (node->conns)
            ratel__conn_fail(node->conns, RATEL_EIO, 0);
        fail_queue(node, RATEL_EIO, 1);
    }
    while (e->ahead)
        ratel__engine_finish(e, e->ahead, RATEL_EIO, NULL);
    while (e->fhead) {
        ratel__rop_t *rop = e->fhead;
        e->fhead = rop->qnext;
        /* A `done` may submit again (a batch giving back a group): what
           it finishes must start a new list, not follow a stale tail. */
        if (!e->fhead)
            e->ftail = NULL;
        rop->qnext = rop->qprev = NULL;
        rop->where = WHERE_NONE;
        rop->done(rop);
    }
    for (size_t i = 0; i < e->nnodes; i++) {
        breaker_count(e->nodes[i], 0);
        ratel__probe_free(e->nodes[i]);
        free(e->nodes[i]);
    }
    free(e);
}
