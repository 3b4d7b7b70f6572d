/*
 * engine_conn.c - one connection of the Redis engine: what the transport
 * tells it (up, data, down), the replies read in order by hiredis's
 * reader, the setup every connection makes (AUTH, SELECT) and the
 * preparation a node needs once (how the core runs there).
 *
 * Preparation, one connection of the node at a time, each step sent when
 * the one before was answered:
 *
 *   PING            the node's first connection: the peer is Redis
 *   COMMAND INFO    mode=auto or module: is the ratel module loaded?
 *   FCALL_RO ratel_version 0, then FUNCTION LOAD REPLACE unless it
 *                   answered this build's version (another version is
 *                   replaced, never kept); refused with mode=auto: the
 *                   EVAL script instead, which the store's note says
 *   SCRIPT LOAD     the EVAL script's mode
 *
 * Commands that run the core wait in their node's queue meanwhile; GET
 * and the library's own command do not need it.
 */
#include "store/engine_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const ratel__redis_shared_t *shared(const conn_t *c)
{
    return c->e->sh;
}

int ratel__node_prepared(const ratel__node_t *node)
{
    return node->sentinel || node->mode == RATEL__MODE_MODULE ||
           (node->mode != RATEL__MODE_UNKNOWN && node->code_loaded);
}

/* A reply's text for a message ("(nil)", the error, the status). */
static void reply_text(const redisReply *r, char *buf, size_t len)
{
    if (!r)
        ratel__msg(buf, len, "no reply");
    else if (r->str)
        ratel__msg(buf, len, "%.*s", (int)(r->len > 200 ? 200 : r->len),
                   r->str);
    else if (r->type == REDIS_REPLY_INTEGER)
        ratel__msg(buf, len, "%lld", r->integer);
    else
        ratel__msg(buf, len, "%s",
                   r->type == REDIS_REPLY_NIL ? "(nil)" : "an array");
}

/* --------------------------------------------------------- the ring */

/* Room in the ring for `more` entries. */
static int pend_reserve(conn_t *c, size_t more)
{
    size_t cap = c->pcap ? c->pcap : 16;
    pend_t *p;

    if (c->pcount + more <= c->pcap)
        return 0;
    while (cap < c->pcount + more)
        cap *= 2;
    p = malloc(cap * sizeof *p);
    if (!p)
        return RATEL_ENOMEM;
    for (size_t i = 0; i < c->pcount; i++)
        p[i] = c->pend[(c->phead + i) % c->pcap];
    free(c->pend);
    c->pend = p;
    c->pcap = cap;
    c->phead = 0;
    return 0;
}

/* Whether `rop`'s answer waits for a WAIT (wait_replicas): a command
   that may write (a peek does not). */
static int writes(const conn_t *c, const ratel__rop_t *rop)
{
    if (!shared(c)->wait_replicas || c->node->sentinel)
        return 0;
    return (rop->kind == RATEL__ROP_ACQUIRE &&
            !(rop->request.flags & RATEL_PEEK)) ||
           rop->kind == RATEL__ROP_REFUND || rop->kind == RATEL__ROP_RESET ||
           rop->kind == RATEL__ROP_RELEASE || rop->kind == RATEL__ROP_SLICE ||
           rop->kind == RATEL__ROP_UNSLICE || rop->kind == RATEL__ROP_COMMAND ||
           /* The health check: a primary without the replicas is down. */
           rop->kind == RATEL__ROP_PING;
}

/* `n` ACQUIREs as one ratel_acquire_many: the first's entry in the ring
   says how many entries its one reply answers. */
int ratel__conn_push_many(conn_t *c, ratel__rop_t *const *rops, size_t n)
{
    if (pend_reserve(c, n) != 0 || ratel__encode_many(c, rops, n) != 0)
        return RATEL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        c->unwaited += writes(c, rops[i]);
    for (size_t i = 0; i < n; i++)
        c->pend[(c->phead + c->pcount++) % c->pcap] =
            (pend_t){rops[i], i ? STEP_MANY_ITEM : STEP_MANY, (unsigned)n};
    c->outcmds++;
    ratel__engine_conn_dirty(c);
    return 0;
}

int ratel__conn_push(conn_t *c, ratel__rop_t *rop, step_t step)
{
    int rc;

    if (pend_reserve(c, 2) != 0)
        return RATEL_ENOMEM;
    if (step == STEP_ROP && rop->asking) {
        if (ratel__encode_words(c, 1, "ASKING") != 0)
            return RATEL_ENOMEM;
        c->pend[(c->phead + c->pcount++) % c->pcap] =
            (pend_t){NULL, STEP_ASKING, 1};
    }
    if (step == STEP_ROP && rop->kind == RATEL__ROP_LIBRARY)
        step = STEP_LIB_VERSION;
    switch (step) {
    case STEP_ROP:
        rc = ratel__encode_rop(c, rop);
        c->unwaited += writes(c, rop);
        break;
    case STEP_LIB_VERSION:
    case STEP_VERSION:
        rc = ratel__encode_words(c, 3, "FCALL_RO", "ratel_version", "0");
        break;
    default: {
        /* The setup's and the preparation's commands. */
        const ratel__redis_shared_t *sh = shared(c);
        argv_t a = {.n = 0};
        char db[16], wait_ms[16];
#define ARG(s, l) (a.v[a.n] = (s), a.len[a.n] = (l), a.n++)
#define ARGZ(s) ARG((s), strlen(s))
        if (step == STEP_AUTH) {
            const char *user =
                c->node->sentinel ? sh->sentinel_username : sh->username;
            ARGZ("AUTH");
            if (user && user[0])
                ARGZ(user);
            ARGZ(c->node->sentinel ? sh->sentinel_password : sh->password);
        } else if (step == STEP_WAIT) {
            /* Half the command's time: the WAIT answers (with too few
               replicas) before the commands it holds time out. */
            ARGZ("WAIT");
            ARG(db, (size_t)snprintf(db, sizeof db, "%u", sh->wait_replicas));
            ARG(wait_ms, (size_t)snprintf(wait_ms, sizeof wait_ms, "%d",
                                          sh->command_timeout_ms > 1
                                              ? sh->command_timeout_ms / 2
                                              : 1));
        } else if (step == STEP_SUBSCRIBE) {
            ARGZ("SUBSCRIBE");
            ARGZ("+switch-master");
        } else if (step == STEP_SELECT) {
            ARGZ("SELECT");
            ARG(db, (size_t)snprintf(db, sizeof db, "%d", sh->db));
        } else if (step == STEP_PING) {
            ARGZ("PING");
        } else if (step == STEP_MODE) {
            ARGZ("COMMAND");
            ARGZ("INFO");
            ARGZ("ratel.acquire");
        } else if (step == STEP_LOAD || step == STEP_LIB_LOAD) {
            ARGZ("FUNCTION");
            ARGZ("LOAD");
            ARGZ("REPLACE");
            ARG(sh->library, sh->library_len);
        } else {
            ARGZ("SCRIPT");
            ARGZ("LOAD");
            ARG(sh->script, sh->script_len);
        }
#undef ARG
#undef ARGZ
        rc = ratel__encode_argv(c, &a);
    }
    }
    if (rc != 0)
        return RATEL_ENOMEM;
    c->pend[(c->phead + c->pcount++) % c->pcap] = (pend_t){rop, step, 1};
    c->outcmds++;
    ratel__engine_conn_dirty(c);
    return 0;
}

int ratel__conn_push_wait(conn_t *c)
{
    if (!c->unwaited)
        return 0;
    c->unwaited = 0;
    return ratel__conn_push(c, NULL, STEP_WAIT);
}

static int pop(conn_t *c, pend_t *out)
{
    if (c->pcount == 0)
        return 0;
    *out = c->pend[c->phead];
    c->phead = (c->phead + 1) % c->pcap;
    c->pcount--;
    return 1;
}

/* ------------------------------------------------------------ close */

static void unlink_dirty(conn_t *c)
{
    conn_t **link = &c->e->dirty_conns;

    if (!c->dirty)
        return;
    while (*link && *link != c)
        link = &(*link)->dnext;
    if (*link)
        *link = c->dnext;
    c->dirty = 0;
}

static void conn_free(conn_t *c)
{
    ratel__node_t *node = c->node;
    conn_t **link = &node->conns;

    while (*link && *link != c)
        link = &(*link)->next;
    if (*link) {
        *link = c->next;
        node->nconns--;
    }
    if (node->preparing == c)
        node->preparing = NULL;
    if (c->e->subscription == c)
        c->e->subscription = NULL;
    unlink_dirty(c);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->out);
    free(c->pend);
    free(c);
}

void ratel__conn_fail(conn_t *c, int rc, int closed_by_transport)
{
    ratel__engine_t *e = c->e;
    pend_t p;

    if (c->handle && !closed_by_transport)
        e->t->close(e->tud, c->handle);
    c->handle = NULL;
    while (pop(c, &p)) {
        ratel__rop_t *rop = p.rop;
        if (!rop || rop->where != WHERE_FLIGHT || rop->conn != c)
            continue;
        rop->conn = NULL;
        rop->where = WHERE_NONE;
        if (e->freeing || !ratel__route_park(e, rop, rc))
            ratel__engine_finish(e, rop, rc, NULL);
    }
    /* Answered, but without the WAIT that makes the answers count. */
    while (c->await_head) {
        ratel__rop_t *rop = c->await_head;
        ratel__queue_unlink(&c->await_head, &c->await_tail, rop);
        freeReplyObject(rop->reply);
        rop->reply = NULL;
        rop->conn = NULL;
        rop->where = WHERE_NONE;
        if (e->freeing || !ratel__route_park(e, rop, rc))
            ratel__engine_finish(e, rop, rc, NULL);
    }
    conn_free(c);
    ratel__engine_rearm(e);
}

/* -------------------------------------------------------- preparation */

/* The preparation failed: the node fails with it. */
static void prepare_failed(conn_t *c, int rc, const char *fmt,
                           const redisReply *r)
{
    char text[256], why[400];

    reply_text(r, text, sizeof text);
    ratel__msg(why, sizeof why, fmt, c->node->name, text);
    ratel__engine_node_failed(c->node, rc, why, 0);
}

/* Sends the preparation's next step, or ends it. */
static void prepare_next(conn_t *c)
{
    ratel__node_t *node = c->node;
    const ratel__redis_shared_t *sh = shared(c);
    step_t step;

    if (node->mode == RATEL__MODE_UNKNOWN && sh->mode == RATEL_REDIS_LUA)
        node->mode = RATEL__MODE_LUA;
    if (node->mode == RATEL__MODE_UNKNOWN && sh->mode == RATEL_REDIS_FUNCTION)
        node->mode = RATEL__MODE_FUNCTION;
    if (ratel__node_prepared(node)) {
        node->preparing = NULL;
        if (node->down_until_us || node->source->down || node->fail_streak)
            ratel__engine_node_ok(node);
        ratel__engine_node_dirty(node);
        return;
    }
    step = node->mode == RATEL__MODE_UNKNOWN    ? STEP_MODE
           : node->mode == RATEL__MODE_FUNCTION ? STEP_VERSION
                                                : STEP_SCRIPT;
    if (ratel__conn_push(c, NULL, step) != 0)
        ratel__engine_node_failed(node, RATEL_ENOMEM, "out of memory", 0);
}

void ratel__conn_prepare(conn_t *c)
{
    ratel__node_t *node = c->node;

    if (node->preparing || ratel__node_prepared(node) || c->state != CONN_READY)
        return;
    node->preparing = c;
    if (!node->ever_connected) {
        if (ratel__conn_push(c, NULL, STEP_PING) != 0)
            ratel__engine_node_failed(node, RATEL_ENOMEM, "out of memory", 0);
        return;
    }
    prepare_next(c);
}

static int conn_alive(const ratel__node_t *node, const conn_t *c)
{
    for (const conn_t *x = node->conns; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

static void on_ping(conn_t *c, const redisReply *r)
{
    if (r->type != REDIS_REPLY_STATUS || r->len != 4 ||
        strncasecmp(r->str, "PONG", 4) != 0) {
        prepare_failed(c, RATEL_EPROTO, "%s: PING answered: %s", r);
        return;
    }
    prepare_next(c);
}

static void on_mode(conn_t *c, const redisReply *r)
{
    int loaded = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                 r->element[0]->type == REDIS_REPLY_ARRAY;

    if (r->type == REDIS_REPLY_ERROR) {
        prepare_failed(c, RATEL_EIO, "%s: COMMAND INFO failed: %s", r);
        return;
    }
    if (!loaded && shared(c)->mode == RATEL_REDIS_MODULE) {
        prepare_failed(c, RATEL_EPROTO,
                       "%s has no ratel module loaded (load build/ratel.so, "
                       "or use mode=auto, mode=function or mode=lua)%.0s",
                       r);
        return;
    }
    c->node->mode = loaded ? RATEL__MODE_MODULE : RATEL__MODE_FUNCTION;
    prepare_next(c);
}

/* FUNCTION LOAD refused: mode=auto uses the script; mode=function fails. */
static void library_refused(conn_t *c, const redisReply *r)
{
    const ratel__redis_shared_t *sh = shared(c);
    char text[256], why[600];

    reply_text(r, text, sizeof text);
    if (sh->mode == RATEL_REDIS_FUNCTION) {
        ratel__msg(why, sizeof why,
                   "%s: FUNCTION LOAD of the ratel library refused: %s "
                   "(mode=function needs the library: allow FUNCTION LOAD, "
                   "load it with `ratel lua-load`, or use mode=auto or "
                   "mode=lua)",
                   c->node->name, text);
        ratel__engine_node_failed(c->node, RATEL_EPROTO, why, 0);
        return;
    }
    c->node->mode = RATEL__MODE_LUA;
    c->node->code_loaded = 0;
    if (sh->note) {
        ratel__msg(why, sizeof why,
                   "%s: FUNCTION LOAD of the ratel library refused: %s; "
                   "using the EVAL script (EVALSHA) there instead",
                   c->node->name, text);
        sh->note(sh->note_ud, why);
    }
    prepare_next(c);
}

static void on_version(conn_t *c, const redisReply *r)
{
    if (ratel__reply_unavailable(r)) {
        prepare_failed(c, RATEL_EIO, "%s: FCALL_RO ratel_version failed: %s",
                       r);
        return;
    }
    if (r->type == REDIS_REPLY_STRING &&
        strlen(shared(c)->library_version) == r->len &&
        memcmp(r->str, shared(c)->library_version, r->len) == 0) {
        c->node->code_loaded = 1;
        prepare_next(c);
        return;
    }
    if (ratel__conn_push(c, NULL, STEP_LOAD) != 0)
        ratel__engine_node_failed(c->node, RATEL_ENOMEM, "out of memory", 0);
}

static void on_load(conn_t *c, const redisReply *r)
{
    if (r->type == REDIS_REPLY_STRING && r->len == 5 &&
        memcmp(r->str, "ratel", 5) == 0) {
        c->node->code_loaded = 1;
        prepare_next(c);
    } else if (ratel__reply_unavailable(r) || r->type != REDIS_REPLY_ERROR) {
        prepare_failed(c, RATEL_EIO,
                       "%s: FUNCTION LOAD of the ratel library failed: %s", r);
    } else {
        library_refused(c, r);
    }
}

static void on_script(conn_t *c, const redisReply *r)
{
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        prepare_failed(c,
                       r->type == REDIS_REPLY_ERROR &&
                               !ratel__reply_unavailable(r)
                           ? RATEL_EPROTO
                           : RATEL_EIO,
                       "%s: SCRIPT LOAD of the EVAL script failed: %s", r);
        return;
    }
    c->node->code_loaded = 1;
    prepare_next(c);
}

/* ------------------------------------------------------- the library */

/* A LIBRARY command's answers: the version there, then maybe the load. */
static void on_library(conn_t *c, ratel__rop_t *rop, step_t step, redisReply *r)
{
    const ratel__redis_shared_t *sh = shared(c);
    ratel__engine_t *e = c->e;

    if (step == STEP_LIB_VERSION && !ratel__reply_unavailable(r)) {
        if (r->type == REDIS_REPLY_STRING)
            ratel__msg(rop->found, sizeof rop->found, "%.*s",
                       (int)(r->len > 64 ? 64 : r->len), r->str);
        freeReplyObject(r);
        if (strcmp(rop->found, sh->library_version) != 0) {
            if (ratel__conn_push(c, rop, STEP_LIB_LOAD) != 0)
                ratel__engine_finish(e, rop, RATEL_ENOMEM, NULL);
            return;
        }
        r = NULL;
    } else if (step == STEP_LIB_LOAD && r->type == REDIS_REPLY_STRING &&
               r->len == 5 && memcmp(r->str, "ratel", 5) == 0) {
        freeReplyObject(r);
        r = NULL;
    }
    rop->conn = NULL;
    rop->where = WHERE_NONE;
    if (!r) {
        /* A node that fell back to the script uses the library now. */
        c->node->mode = RATEL__MODE_UNKNOWN;
        c->node->code_loaded = 0;
        ratel__engine_finish(e, rop, 0, NULL);
        return;
    }
    rop->refused = step == STEP_LIB_LOAD && !ratel__reply_unavailable(r);
    ratel__engine_finish(e, rop, rop->refused ? RATEL_EPROTO : RATEL_EIO, r);
}

/* ------------------------------------------------------------ replies */

static void became_ready(conn_t *c)
{
    c->state = CONN_READY;
    if (c->subscriber && ratel__conn_push(c, NULL, STEP_SUBSCRIBE) != 0)
        ratel__engine_node_failed(c->node, RATEL_ENOMEM, "out of memory", 0);
    else
        ratel__engine_node_dirty(c->node);
}

/* A reply object of `type` made here (an error's text copied), freed
   by freeReplyObject() as the reader's are. */
static redisReply *reply_made(int type, const char *str, size_t len)
{
    redisReply *r = calloc(1, sizeof *r);

    if (!r)
        return NULL;
    r->type = type;
    if (str) {
        r->str = malloc(len + 1);
        if (!r->str) {
            free(r);
            return NULL;
        }
        memcpy(r->str, str, len);
        r->str[len] = '\0';
        r->len = len;
    }
    return r;
}

/* A command's final reply: told now, or with wait_replicas held until
   the WAIT after it says enough replicas have it. */
static void answered(conn_t *c, ratel__rop_t *rop, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR || !writes(c, rop)) {
        ratel__engine_finish(c->e, rop, 0, r);
        return;
    }
    rop->reply = r;
    rop->conn = c;
    rop->where = WHERE_HELD;
    ratel__queue_append(&c->await_head, &c->await_tail, rop);
}

/*
 * The reply of one ratel_acquire_many (the library's or the EVAL
 * script's): element i answers its i-th ACQUIRE, as its own call's reply
 * would. An error for the whole call
 * (MOVED, the library or the script gone, a busy server) answers each, which
 * ratel__route_retry() then sends again one by one where it would one; any
 * other answer is none of theirs (nil: the store's failure policy).
 */
static void on_many(conn_t *c, const pend_t *p, redisReply *r)
{
    ratel__engine_t *e = c->e;
    ratel__rop_t *rops[ENGINE_MANY_MAX];
    size_t n = 0;
    int whole = r->type != REDIS_REPLY_ARRAY || r->elements != p->count;

    rops[n++] = p->rop;
    for (pend_t q; n < p->count && n < ENGINE_MANY_MAX && pop(c, &q);)
        rops[n++] = q.rop;
    for (size_t i = 0; i < n; i++) {
        ratel__rop_t *rop = rops[i];
        redisReply *one;
        if (!whole) {
            one = r->element[i];
            r->element[i] = NULL;
        } else {
            int error = r->type == REDIS_REPLY_ERROR;
            one = reply_made(error ? REDIS_REPLY_ERROR : REDIS_REPLY_NIL,
                             error ? r->str : NULL, error ? r->len : 0);
        }
        if (!rop || rop->where != WHERE_FLIGHT || rop->conn != c) {
            freeReplyObject(one);
            continue;
        }
        rop->conn = NULL;
        rop->where = WHERE_NONE;
        if (!one)
            ratel__engine_finish(e, rop, RATEL_ENOMEM, NULL);
        else if (one->type != REDIS_REPLY_ERROR ||
                 !ratel__route_retry(e, rop, one))
            answered(c, rop, one);
    }
    freeReplyObject(r);
}

/*
 * WAIT's answer: the replicas that have every write before it. Enough:
 * the held commands are told their replies. Too few: the node fails (a
 * primary whose writes no replica takes, e.g. the old one during a
 * failover), and the held commands with it, sent again after a failover
 * or decided by the failure policy. Returns -1 then (`c` is gone).
 */
static int on_wait(conn_t *c, redisReply *r)
{
    const ratel__redis_shared_t *sh = shared(c);
    ratel__node_t *node = c->node;
    char why[400];

    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 &&
        (unsigned long long)r->integer >= sh->wait_replicas) {
        freeReplyObject(r);
        if (node->down_until_us || node->source->down || node->fail_streak)
            ratel__engine_node_ok(node);
        while (c->await_head) {
            ratel__rop_t *rop = c->await_head;
            redisReply *held = rop->reply;
            rop->reply = NULL;
            ratel__engine_finish(c->e, rop, 0, held);
        }
        return 0;
    }
    if (r->type == REDIS_REPLY_INTEGER)
        ratel__msg(why, sizeof why,
                   "%s: %lld of the %u replicas wait_replicas asks for "
                   "acknowledged the writes within %d ms (WAIT); their "
                   "answers do not count",
                   node->name, r->integer, sh->wait_replicas,
                   sh->command_timeout_ms / 2);
    else
        ratel__msg(why, sizeof why, "%s: WAIT answered %s", node->name,
                   r->type == REDIS_REPLY_ERROR ? r->str : "no number");
    freeReplyObject(r);
    ratel__engine_node_failed(node, RATEL_EIO, why, 0);
    return -1;
}

/* One reply, matched with what it answers. Returns 0, or -1 when the
   connection failed (and is gone). */
static int on_reply(conn_t *c, const pend_t *p, redisReply *r)
{
    ratel__node_t *node = c->node;
    ratel__engine_t *e = c->e;
    char text[256], why[400];

    switch (p->step) {
    case STEP_ROP:
        if (!p->rop || p->rop->where != WHERE_FLIGHT || p->rop->conn != c) {
            freeReplyObject(r);
            return 0;
        }
        p->rop->conn = NULL;
        p->rop->where = WHERE_NONE;
        if (r->type == REDIS_REPLY_ERROR && ratel__route_retry(e, p->rop, r))
            return 0;
        answered(c, p->rop, r);
        return 0;
    case STEP_WAIT:
        return on_wait(c, r);
    case STEP_MANY:
        on_many(c, p, r);
        return 0;
    case STEP_LIB_VERSION:
    case STEP_LIB_LOAD:
        if (p->rop && p->rop->where == WHERE_FLIGHT && p->rop->conn == c)
            on_library(c, p->rop, p->step, r);
        else
            freeReplyObject(r);
        return 0;
    case STEP_ASKING:
    case STEP_MANY_ITEM: /* never alone: on_many() took it */
        break;
    case STEP_SUBSCRIBE:
        /* The subscription's confirmation; messages follow unasked. */
        break;
    case STEP_AUTH:
    case STEP_SELECT:
        if (r->type == REDIS_REPLY_ERROR) {
            reply_text(r, text, sizeof text);
            if (p->step == STEP_AUTH)
                ratel__msg(why, sizeof why, "%s refused the credentials: %s",
                           node->name, text);
            else
                ratel__msg(why, sizeof why, "%s: SELECT %d failed: %s",
                           node->name, shared(c)->db, text);
            freeReplyObject(r);
            ratel__engine_node_failed(node, RATEL_EPROTO, why, 0);
            return -1;
        }
        if (c->pcount == 0 && c->state == CONN_SETUP)
            became_ready(c);
        break;
    default: {
        static void (*const step_fn[])(conn_t *, const redisReply *) = {
            [STEP_PING] = on_ping,       [STEP_MODE] = on_mode,
            [STEP_VERSION] = on_version, [STEP_LOAD] = on_load,
            [STEP_SCRIPT] = on_script,
        };
        step_fn[p->step](c, r);
        freeReplyObject(r);
        /* A failed preparation failed the node and closed `c`. */
        return conn_alive(node, c) ? 0 : -1;
    }
    }
    freeReplyObject(r);
    return 0;
}

/* ------------------------------------------------- transport callbacks */

static void link_up(ratel__link_t *link)
{
    conn_t *c = (conn_t *)link;
    const ratel__redis_shared_t *sh = shared(c);
    ratel__node_t *node = c->node;
    const char *password =
        node->sentinel ? sh->sentinel_password : sh->password;
    int db = node->sentinel ? 0 : sh->db;

    if (node->ever_connected)
        atomic_fetch_add_explicit(&((ratel__redis_shared_t *)sh)->reconnects, 1,
                                  memory_order_relaxed);
    if (password || db != 0) {
        c->state = CONN_SETUP;
        if ((password && ratel__conn_push(c, NULL, STEP_AUTH) != 0) ||
            (db != 0 && ratel__conn_push(c, NULL, STEP_SELECT) != 0))
            ratel__engine_node_failed(node, RATEL_ENOMEM, "out of memory", 0);
        return;
    }
    became_ready(c);
}

/*
 * Whether reply `r` to `p` shows the node serving: a command's answer
 * (a write's with wait_replicas: the WAIT's after it, on_wait), unless a
 * "cannot now" error (LOADING, BUSY, ...); a command's own error (a
 * wrong argument) is an answer. The connection's setup and the node's
 * preparation show it once they are done (prepare_next): a failure that
 * lasts (credentials refused, the module missing) is one outage, not a
 * success each time the node answers PING before the step that fails.
 */
static int proves_up(const conn_t *c, const pend_t *p, const redisReply *r)
{
    if ((p->step == STEP_ROP || p->step == STEP_MANY) && p->rop &&
        writes(c, p->rop))
        return 0; /* held: the WAIT after it says (on_wait) */
    if (p->step != STEP_ROP && p->step != STEP_MANY &&
        p->step != STEP_LIB_VERSION && p->step != STEP_LIB_LOAD)
        return 0; /* setup and preparation: their end says (prepare_next) */
    return r->type != REDIS_REPLY_ERROR || !ratel__reply_unavailable(r);
}

/*
 * An answer that refuses the connection itself, whatever it answers:
 * "maxclients" (the server closes it next), credentials asked or refused
 * on a command (a password changed under a live connection). The node
 * fails with the cause, and what the reply answered with it (its entry,
 * just taken from the ring, goes back); returns 1 then (`c` and `r` are
 * gone).
 */
static int refused_connection(conn_t *c, redisReply *r)
{
    ratel__node_t *node = c->node;
    char text[256], why[400];
    int auth;

    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    auth =
        ratel__reply_starts(r, "NOAUTH") || ratel__reply_starts(r, "WRONGPASS");
    if (!auth && !ratel__reply_starts(r, "ERR max number of clients"))
        return 0;
    reply_text(r, text, sizeof text);
    if (auth)
        ratel__msg(why, sizeof why, "%s refused the credentials: %s%s",
                   node->name, text,
                   !ratel__reply_starts(r, "NOAUTH") ? ""
                   : node->sentinel ? " (give the Sentinels' password: "
                                      "sentinel_password=)"
                                    : " (give the password in the URL: "
                                      "redis://:PASSWORD@host:port)");
    else
        ratel__msg(why, sizeof why,
                   "%s refused the connection: %s (its maxclients)", node->name,
                   text);
    freeReplyObject(r);
    c->phead = (c->phead + c->pcap - 1) % c->pcap;
    c->pcount++;
    ratel__engine_node_failed(node, auth ? RATEL_EPROTO : RATEL_EIO, why, 0);
    return 1;
}

static void link_data(ratel__link_t *link, const char *p, size_t n)
{
    conn_t *c = (conn_t *)link;
    ratel__node_t *node = c->node;

    if (redisReaderFeed(c->reader, p, n) != REDIS_OK)
        goto broken;
    for (;;) {
        void *reply = NULL;
        pend_t pend;
        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK)
            goto broken;
        if (!reply)
            break;
        if (!pop(c, &pend)) {
            if (c->subscriber) {
                ratel__sentinel_message(c, reply);
                freeReplyObject(reply);
                continue;
            }
            freeReplyObject(reply);
            goto unexpected;
        }
        if (!c->answered) {
            c->answered = 1;
            node->ever_connected = 1;
        }
        if (refused_connection(c, reply))
            return;
        if (proves_up(c, &pend, reply) &&
            (node->down_until_us || node->source->down || node->fail_streak))
            ratel__engine_node_ok(node);
        if (on_reply(c, &pend, reply) != 0)
            return;
    }
    ratel__engine_rearm(c->e);
    return;
broken : {
    char why[400];
    ratel__msg(why, sizeof why,
               "%s answered something that is not the Redis protocol (is "
               "it Redis?): %s",
               node->name, c->reader->errstr);
    ratel__engine_node_failed(node, RATEL_EPROTO, why, 0);
    return;
}
unexpected : {
    char why[400];
    ratel__msg(why, sizeof why, "%s sent a reply nothing asked for",
               node->name);
    ratel__engine_node_failed(node, RATEL_EPROTO, why, 0);
}
}

/* Whether every command waiting on `c` was forced (a ping's). */
static int forced_only(const conn_t *c)
{
    int any = 0;

    for (size_t i = 0; i < c->pcount; i++) {
        const pend_t *p = &c->pend[(c->phead + i) % c->pcap];
        if (p->rop && !p->rop->force)
            return 0;
        any |= p->rop != NULL;
    }
    for (const ratel__rop_t *q = c->node->qhead; q; q = q->qnext)
        if (!q->force)
            return 0;
    return any;
}

static void link_down(ratel__link_t *link, const char *why, int tls_error)
{
    conn_t *c = (conn_t *)link;
    ratel__node_t *node = c->node;
    int forced = forced_only(c), rc = tls_error ? RATEL_EPROTO : RATEL_EIO;
    char msg[600];

    c->handle = NULL;
    if (c->state == CONN_READY && c->pcount == 0 && c->answered) {
        /* An idle connection the server closed (its `timeout`, a
           restart): the next command opens another and finds out. */
        ratel__conn_fail(c, RATEL_EIO, 1);
        return;
    }
    if (c->state == CONN_OPENING)
        ratel__msg(msg, sizeof msg, "cannot connect to %s: %s", node->name,
                   why);
    else if (!c->answered && !shared(c)->tls && !node->sentinel) {
        /* Closed before a word: a TLS port says nothing to plain text.
           On a node never reached, the configuration's mistake. */
        ratel__msg(msg, sizeof msg,
                   "%s: %s before answering (a TLS port? use rediss://)",
                   node->name, why);
        if (!node->ever_connected)
            rc = RATEL_EPROTO;
    } else
        ratel__msg(msg, sizeof msg, "%s: %s", node->name, why);
    ratel__conn_fail(c, rc, 1);
    ratel__engine_node_failed(node, rc, msg, forced);
}

/* ------------------------------------------------ the plain-text probe */

/*
 * A plain Redis port sent a TLS ClientHello answers nothing (its inline
 * reader waits for a newline), so rediss:// on it would only say "no
 * answer within connect_timeout_ms". Half way there, one plain connection
 * asks PING: a RESP answer (+PONG, -NOAUTH ...) means plain Redis.
 */
typedef struct probe_s {
    ratel__link_t link; /* first: the transport's callbacks find us */
    ratel__node_t *node;
    void *handle;
} probe_t;

void ratel__probe_free(ratel__node_t *node)
{
    probe_t *p = node->probe;

    if (!p)
        return;
    node->probe = NULL;
    if (p->handle)
        node->e->t->close(node->e->tud, p->handle);
    free(p);
}

static void probe_up(ratel__link_t *link)
{
    probe_t *p = (probe_t *)link;

    p->node->e->t->send(p->node->e->tud, p->handle, "PING\r\n", 6);
}

static void probe_data(ratel__link_t *link, const char *data, size_t n)
{
    probe_t *p = (probe_t *)link;
    ratel__node_t *node = p->node;
    char why[400];

    if (n == 0 || (data[0] != '+' && data[0] != '-')) {
        ratel__probe_free(node);
        return;
    }
    ratel__probe_free(node);
    ratel__msg(why, sizeof why,
               "%s: not TLS (is this a plain redis:// port? it answered "
               "PING in plain text)",
               node->name);
    node->plain = 1;
    ratel__msg(node->plain_why, sizeof node->plain_why, "%s", why);
    ratel__engine_node_failed(node, RATEL_EPROTO, why, 0);
    ratel__engine_rearm(node->e);
}

static void probe_down(ratel__link_t *link, const char *why, int tls_error)
{
    probe_t *p = (probe_t *)link;

    (void)why;
    (void)tls_error;
    p->handle = NULL;
    ratel__probe_free(p->node);
}

void ratel__probe_start(ratel__node_t *node)
{
    ratel__engine_t *e = node->e;
    probe_t *p;
    char why[300];

    if (node->probe || node->probed)
        return;
    node->probed = 1;
    p = calloc(1, sizeof *p);
    if (!p)
        return;
    p->link.up = probe_up;
    p->link.data = probe_data;
    p->link.down = probe_down;
    p->node = node;
    node->probe = p;
    p->handle = e->t->open(e->tud, &p->link, node->host, node->port, NULL, why,
                           sizeof why);
    if (!p->handle)
        ratel__probe_free(node);
}

conn_t *ratel__conn_open(ratel__node_t *node, char *why, size_t whylen)
{
    ratel__engine_t *e = node->e;
    const ratel__redis_shared_t *sh = e->sh;
    ratel__tls_target_t tls = {
        sh->tls, sh->tls_server_name ? sh->tls_server_name : node->host,
        sh->tls_insecure};
    conn_t *c = calloc(1, sizeof *c);

    if (!c || !(c->reader = redisReaderCreate())) {
        free(c);
        ratel__msg(why, whylen, "%s: out of memory", node->name);
        return NULL;
    }
    /* Keep the reader's buffer between reads instead of freeing and
       allocating it again for every read past 16 KiB (a TLS record is up
       to 16 KiB): it is bounded by the largest read. */
    c->reader->maxbuf = 0;
    ratel__engine_reply_functions(c->reader);
    c->link.up = link_up;
    c->link.data = link_data;
    c->link.down = link_down;
    c->e = e;
    c->node = node;
    c->state = CONN_OPENING;
    c->open_deadline_us =
        e->t->now(e->tud) + (int64_t)sh->connect_timeout_ms * 1000;
    if (sh->tls && !node->ever_connected && !node->probed && !node->sentinel)
        c->probe_at_us =
            c->open_deadline_us - (int64_t)sh->connect_timeout_ms * 500;
    c->next = node->conns;
    node->conns = c;
    node->nconns++;
    c->handle = e->t->open(e->tud, &c->link, node->host, node->port,
                           sh->tls ? &tls : NULL, why, whylen);
    if (!c->handle) {
        char reason[300];
        ratel__msg(reason, sizeof reason, "%s", why);
        ratel__msg(why, whylen, "cannot connect to %s: %s", node->name, reason);
        conn_free(c);
        return NULL;
    }
    ratel__engine_rearm(e);
    return c;
}
