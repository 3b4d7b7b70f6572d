/*
 * redis_node.c - connections to one Redis server, the shared pipeline and
 * the breaker (redis_node.h explains the three).
 */
#include "store/redis_node.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/time.h>

/* Most commands one round trip carries. */

/* snprintf into a message buffer, where truncating is the intent. */
void ratel__msg(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

#define NODE_MAX_PIPELINE 512

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

node_t *ratel__node_new(const char *host, int port, const node_config_t *cfg)
{
    node_t *nd = calloc(1, sizeof *nd);

    if (!nd)
        return NULL;
    nd->idle = calloc(cfg->pool_size, sizeof *nd->idle);
    if (!nd->idle) {
        free(nd);
        return NULL;
    }
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->port = port;
    if (strchr(host, ':'))
        snprintf(nd->name, sizeof nd->name, "[%s]:%d", host, port);
    else
        snprintf(nd->name, sizeof nd->name, "%s:%d", host, port);
    nd->cfg = cfg;
    pthread_mutex_init(&nd->lock, NULL);
    pthread_cond_init(&nd->done_cv, NULL);
    return nd;
}

void ratel__node_free(node_t *nd)
{
    if (!nd)
        return;
    for (unsigned i = 0; i < nd->nidle; i++)
        redisFree(nd->idle[i]);
    free(nd->idle);
    pthread_mutex_destroy(&nd->lock);
    pthread_cond_destroy(&nd->done_cv);
    free(nd);
}

/* The name of host:port for messages, IPv6 in brackets. */
static void addr_name(const char *host, int port, char *buf, size_t len)
{
    snprintf(buf, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* "ERR ..." of an error reply, or a description of an unexpected one. */
static void reply_text(const redisReply *r, char *buf, size_t len)
{
    if (!r)
        snprintf(buf, len, "no reply");
    else if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS)
        snprintf(buf, len, "%.*s", (int)(r->len > 200 ? 200 : r->len), r->str);
    else
        snprintf(buf, len, "unexpected reply of type %d", r->type);
}

/*
 * Sends one command and reads its reply on `c`; returns the reply (the
 * caller frees it) or NULL with the reason in err and *proto set when the
 * peer spoke something else than Redis.
 */
static redisReply *simple_command(redisContext *c, int argc, const char **argv,
                                  const size_t *lens, char *err, size_t errlen,
                                  int *proto)
{
    void *reply = NULL;

    if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK ||
        redisGetReply(c, &reply) != REDIS_OK) {
        *proto = c->err == REDIS_ERR_PROTOCOL;
        ratel__msg(err, errlen, "%s%s",
                   *proto ? "answered something that is not the Redis "
                            "protocol (is it Redis?): "
                          : "",
                   c->errstr[0] ? c->errstr : "connection lost");
        return NULL;
    }
    return reply;
}

redisContext *ratel__node_connect(const node_config_t *cfg, const char *host,
                                  int port, char *err, size_t errlen,
                                  int *proto)
{
    char name[300], why[256];
    redisContext *c;
    redisReply *r;

    *proto = 0;
    addr_name(host, port, name, sizeof name);
    c = redisConnectWithTimeout(host, port, ms_to_tv(cfg->connect_timeout_ms));
    if (!c) {
        ratel__msg(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    if (c->err) {
        ratel__msg(err, errlen, "cannot connect to %s: %s", name, c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ms_to_tv(cfg->command_timeout_ms));
    redisEnableKeepAlive(c);
    if (cfg->password) {
        const char *argv[3] = {"AUTH", cfg->username, cfg->password};
        size_t lens[3] = {4, 0, strlen(cfg->password)};
        int with_user = cfg->username && cfg->username[0];
        if (with_user)
            lens[1] = strlen(cfg->username);
        else
            argv[1] = cfg->password, lens[1] = lens[2];
        r = simple_command(c, with_user ? 3 : 2, argv, lens, why, sizeof why,
                           proto);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r)
                reply_text(r, why, sizeof why);
            ratel__msg(err, errlen, "%s refused the credentials: %s", name,
                       why);
            *proto = 1;
            freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    if (cfg->db != 0) {
        char db[16];
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)snprintf(db, sizeof db, "%d", cfg->db)};
        r = simple_command(c, 2, argv, lens, why, sizeof why, proto);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r)
                reply_text(r, why, sizeof why);
            ratel__msg(err, errlen, "%s: SELECT %d failed: %s", name, cfg->db,
                       why);
            *proto = 1;
            freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
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

/* A failed simple_command() (`answered`: with an unexpected reply) as the
   code a round trip returns. */
static int lost_code(int answered, int proto)
{
    return proto || answered ? RATEL_EPROTO : RATEL_EIO;
}

/* PING answered PONG: the peer is Redis. 0, or RATEL_E* with err. */
static int check_pong(node_t *nd, redisContext *c, char *err, size_t errlen)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    char why[256];
    int proto = 0, rc;
    redisReply *r = simple_command(c, 1, argv, lens, why, sizeof why, &proto);

    if (r && r->type == REDIS_REPLY_STATUS && r->len == 4 &&
        strncasecmp(r->str, "PONG", 4) == 0) {
        freeReplyObject(r);
        return 0;
    }
    rc = lost_code(r != NULL, proto);
    if (r)
        reply_text(r, why, sizeof why);
    ratel__msg(err, errlen, "%s: %s%s", nd->name, r ? "PING answered: " : "",
               why);
    freeReplyObject(r);
    return rc;
}

/*
 * How the node runs the core, as the store's mode asks: given (module,
 * function, lua), or found (auto: COMMAND INFO ratel.acquire says whether
 * the module is loaded; without it, the library is tried first).
 */
static int detect_mode(node_t *nd, redisContext *c, node_mode_t *mode,
                       char *err, size_t errlen)
{
    const char *argv[3] = {"COMMAND", "INFO", "ratel.acquire"};
    size_t lens[3] = {7, 4, 13};
    char why[256];
    int proto = 0, loaded;
    redisReply *r;

    if (nd->cfg->mode == RATEL_REDIS_LUA ||
        nd->cfg->mode == RATEL_REDIS_FUNCTION) {
        *mode = nd->cfg->mode == RATEL_REDIS_LUA ? NODE_MODE_LUA
                                                 : NODE_MODE_FUNCTION;
        return 0;
    }
    r = simple_command(c, 3, argv, lens, why, sizeof why, &proto);
    if (!r) {
        ratel__msg(err, errlen, "%s: %s", nd->name, why);
        return lost_code(0, proto);
    }
    loaded = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
             r->element[0]->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (!loaded && nd->cfg->mode == RATEL_REDIS_MODULE) {
        ratel__msg(err, errlen,
                   "%s has no ratel module loaded (load build/ratel.so, "
                   "or use mode=auto, mode=function or mode=lua)",
                   nd->name);
        return RATEL_EPROTO;
    }
    *mode = loaded ? NODE_MODE_MODULE : NODE_MODE_FUNCTION;
    return 0;
}

int ratel__node_library(redisContext *c, const node_config_t *cfg,
                        const char *name, char *found, size_t foundlen,
                        int *refused, char *err, size_t errlen)
{
    const char *check[3] = {"FCALL_RO", "ratel_version", "0"};
    size_t check_lens[3] = {8, 13, 1};
    const char *load[4] = {"FUNCTION", "LOAD", "REPLACE", cfg->library};
    size_t load_lens[4] = {8, 4, 7, cfg->library_len};
    const char *what = "FCALL_RO ratel_version";
    char why[256];
    int proto = 0, rc;
    redisReply *r;

    *refused = 0;
    ratel__msg(found, foundlen, "%s", "");
    r = simple_command(c, 3, check, check_lens, why, sizeof why, &proto);
    if (r && r->type == REDIS_REPLY_STRING)
        ratel__msg(found, foundlen, "%.*s", (int)(r->len > 64 ? 64 : r->len),
                   r->str);
    if (r && !ratel__reply_unavailable(r)) {
        /* Ours, or absent, another version, not answering it: load. */
        freeReplyObject(r);
        if (strcmp(found, cfg->library_version) == 0)
            return 0;
        what = "FUNCTION LOAD of the ratel library";
        r = simple_command(c, 4, load, load_lens, why, sizeof why, &proto);
        if (r && r->type == REDIS_REPLY_STRING && r->len == 5 &&
            memcmp(r->str, "ratel", 5) == 0) {
            freeReplyObject(r);
            return 0;
        }
        *refused = r && !ratel__reply_unavailable(r);
    }
    rc = !r ? lost_code(0, proto) : *refused ? RATEL_EPROTO : RATEL_EIO;
    if (r)
        reply_text(r, why, sizeof why);
    ratel__msg(err, errlen, "%s: %s %s: %s", name, what,
               *refused ? "refused" : "failed", why);
    freeReplyObject(r);
    return rc;
}

/*
 * The library on a node in FUNCTION mode. Refused: mode=function fails;
 * mode=auto uses the EVAL script instead (*mode becomes LUA) and tells the
 * store's note once.
 */
static int use_library(node_t *nd, redisContext *c, node_mode_t *mode,
                       int *loaded, char *err, size_t errlen)
{
    const node_config_t *cfg = nd->cfg;
    char found[80], why[300];
    int refused, rc;

    rc = ratel__node_library(c, cfg, nd->name, found, sizeof found, &refused,
                             why, sizeof why);
    if (rc == 0) {
        *loaded = 1;
        return 0;
    }
    if (!refused || cfg->mode == RATEL_REDIS_FUNCTION) {
        ratel__msg(err, errlen, "%s%s", why,
                   refused ? " (mode=function needs the library: allow "
                             "FUNCTION LOAD, load it with `ratel lua-load`, "
                             "or use mode=auto or mode=lua)"
                           : "");
        return rc;
    }
    *mode = NODE_MODE_LUA;
    *loaded = 0;
    if (cfg->note) {
        ratel__msg(why + strlen(why), sizeof why - strlen(why), "%s",
                   "; using the EVAL script (EVALSHA) there instead");
        cfg->note(cfg->note_ud, why);
    }
    return 0;
}

/* SCRIPT LOAD of the EVAL script; its SHA1 becomes the store's. */
static int load_script(node_t *nd, redisContext *c, char *err, size_t errlen)
{
    const node_config_t *cfg = nd->cfg;
    const char *argv[3] = {"SCRIPT", "LOAD", cfg->script};
    size_t lens[3] = {6, 4, cfg->script_len};
    char why[256];
    int proto = 0, rc;
    redisReply *r = simple_command(c, 3, argv, lens, why, sizeof why, &proto);

    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        rc = lost_code(r != NULL, proto);
        if (r)
            reply_text(r, why, sizeof why);
        ratel__msg(err, errlen, "%s: SCRIPT LOAD of the EVAL script failed: %s",
                   nd->name, why);
        freeReplyObject(r);
        return rc;
    }
    pthread_mutex_lock(cfg->sha_lock);
    memcpy(cfg->script_sha, r->str, 40);
    cfg->script_sha[40] = '\0';
    pthread_mutex_unlock(cfg->sha_lock);
    freeReplyObject(r);
    return 0;
}

/*
 * What a round trip on a connection learns before its commands: that the
 * peer is Redis (PING, on the node's first connection), how the node runs
 * the core (the mode), and that the library or the script is there.
 * Returns 0, or RATEL_EIO / RATEL_EPROTO with err.
 */
static int prepare(node_t *nd, redisContext *c, node_mode_t *mode, int *loaded,
                   int first, char *err, size_t errlen)
{
    int rc = 0;

    if (first)
        rc = check_pong(nd, c, err, errlen);
    if (rc == 0 && *mode == NODE_MODE_UNKNOWN)
        rc = detect_mode(nd, c, mode, err, errlen);
    if (rc == 0 && *mode == NODE_MODE_FUNCTION && !*loaded)
        rc = use_library(nd, c, mode, loaded, err, errlen);
    if (rc == 0 && *mode == NODE_MODE_LUA && !*loaded) {
        rc = load_script(nd, c, err, errlen);
        *loaded = rc == 0;
    }
    return rc;
}

/* The rule texts of the last policy a round trip formatted: a batch
   usually carries many requests of one policy. */
typedef struct rule_texts_s {
    const ratel_policy_t *policy;
    ratel_policy_t copy; /* what was formatted (the pointer may be reused) */
    char text[RATEL_MAX_RULES][64];
    size_t len[RATEL_MAX_RULES];
} rule_texts_t;

static void format_rules(rule_texts_t *t, const ratel_policy_t *p)
{
    if (t->policy == p && memcmp(&t->copy, p, sizeof *p) == 0)
        return;
    for (uint32_t i = 0; i < p->nrules; i++)
        t->len[i] = (size_t)ratel_rule_format(&p->rules[i], t->text[i],
                                              sizeof t->text[i]);
    t->policy = p;
    t->copy = *p;
}

/*
 * Appends `op` to c's output buffer as `mode` asks it: ACQUIRE, REFUND,
 * RESET and RELEASE as the module's command (RATEL.ACQUIRE KEY ARGS...), the
 * library's function (FCALL ratel_acquire 1 KEY ARGS...) or the EVAL
 * script's operation (EVALSHA SHA 1 KEY ACQUIRE ARGS...), with the same
 * ARGS in all three.
 */
static int append_op(redisContext *c, const node_config_t *cfg,
                     node_mode_t mode, const op_t *op, rule_texts_t *rules)
{
    const char *argv[24 + RATEL_MAX_RULES];
    size_t lens[24 + RATEL_MAX_RULES];
    char cost[24], wait[24], at[24], lease[24];
    int argc = 0, lua = mode == NODE_MODE_LUA;
    static const char *const module_cmd[] = {"RATEL.ACQUIRE", "RATEL.REFUND",
                                             "RATEL.RESET", "RATEL.RELEASE"};
    static const char *const function[] = {"ratel_acquire", "ratel_refund",
                                           "ratel_reset", "ratel_release"};
    static const char *const lua_op[] = {"ACQUIRE", "REFUND", "RESET",
                                         "RELEASE"};

#define ARG(s, n) (argv[argc] = (s), lens[argc] = (n), argc++)
#define ARGZ(s) ARG((s), strlen(s))
    if (op->asking && redisAppendCommand(c, "ASKING") != REDIS_OK)
        return REDIS_ERR;
    switch (op->kind) {
    case OP_GET:
        ARGZ("GET");
        ARG(op->key, op->keylen);
        break;
    case OP_PING:
        ARGZ("PING");
        break;
    default:
        if (mode == NODE_MODE_MODULE) {
            ARGZ(module_cmd[op->kind]);
            ARG(op->key, op->keylen);
        } else {
            ARGZ(lua ? "EVALSHA" : "FCALL");
            if (lua)
                ARG(cfg->script_sha, 40);
            else
                ARGZ(function[op->kind]);
            ARGZ("1");
            ARG(op->key, op->keylen);
            if (lua)
                ARGZ(lua_op[op->kind]);
        }
        if (op->kind == OP_RESET)
            break;
        if (op->kind == OP_RELEASE) {
            ARG(lease, (size_t)snprintf(lease, sizeof lease, "%u", op->lease));
            if (op->lease_flags & RATEL_RENEW)
                ARGZ("RENEW");
        } else if (op->request.cost != 1) {
            ARGZ("COST");
            ARG(cost, (size_t)snprintf(cost, sizeof cost, "%llu",
                                       (unsigned long long)op->request.cost));
        }
        if (op->kind == OP_ACQUIRE && (op->request.flags & RATEL_PEEK))
            ARGZ("PEEK");
        if (op->kind == OP_ACQUIRE && op->request.max_wait_ms > 0) {
            ARGZ("MAXWAIT");
            ARG(wait, (size_t)snprintf(wait, sizeof wait, "%lld",
                                       (long long)op->request.max_wait_ms));
        }
        if (op->at_ms >= 0) {
            ARGZ("AT");
            ARG(at,
                (size_t)snprintf(at, sizeof at, "%lld", (long long)op->at_ms));
        }
        format_rules(rules, op->policy);
        for (uint32_t i = 0; i < op->policy->nrules; i++)
            ARG(rules->text[i], rules->len[i]);
        break;
    }
#undef ARG
#undef ARGZ
    return redisAppendCommandArgv(c, argc, argv, lens);
}

/* Fails ops[0..k) with rc and no reply (node locked by the caller). */
static void fail_ops(op_t **ops, size_t k, int rc)
{
    for (size_t i = 0; i < k; i++) {
        ops[i]->rc = rc;
        ops[i]->reply = NULL;
    }
}

/*
 * Whether c's last read failed because the command timeout passed: hiredis
 * 0.14 reports the socket's EAGAIN as an I/O error with strerror's text,
 * later versions have an error kind of their own. The message then says
 * "no reply within N ms", which a person reads better than EAGAIN.
 */
static int timed_out(const redisContext *c)
{
#ifdef REDIS_ERR_TIMEOUT
    if (c->err == REDIS_ERR_TIMEOUT)
        return 1;
#endif
    return c->err == REDIS_ERR_IO &&
           (strcmp(c->errstr, strerror(EAGAIN)) == 0 ||
            strcmp(c->errstr, strerror(EWOULDBLOCK)) == 0);
}

/*
 * One round trip on `*cp` (connecting first when NULL) for batch[0..k),
 * outside the node's lock. Fills each op's rc/reply/mode (not `done`).
 * Returns 0, or a transport error (the connection is then freed and *cp
 * set to NULL) with the reason in err.
 */
static int round_trip(node_t *nd, redisContext **cp, node_mode_t *mode,
                      int *loaded, int first, op_t **batch, size_t k, char *err,
                      size_t errlen)
{
    const node_config_t *cfg = nd->cfg;
    redisContext *c = *cp;
    rule_texts_t rules;
    int proto = 0, rc;
    size_t i = 0;

    rules.policy = NULL;

    if (!c) {
        c = ratel__node_connect(cfg, nd->host, nd->port, err, errlen, &proto);
        if (!c) {
            rc = proto ? RATEL_EPROTO : RATEL_EIO;
            fail_ops(batch, k, rc);
            return rc;
        }
    }
    rc = prepare(nd, c, mode, loaded, first, err, errlen);
    if (rc != 0)
        goto broken;
    for (i = 0; i < k; i++) {
        if (append_op(c, cfg, *mode, batch[i], &rules) != REDIS_OK) {
            ratel__msg(err, errlen, "%s: %s", nd->name,
                       c->errstr[0] ? c->errstr : "out of memory");
            rc = RATEL_EIO;
            i = 0;
            goto broken;
        }
    }
    atomic_fetch_add_explicit(cfg->round_trips, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(cfg->commands, k, memory_order_relaxed);
    for (i = 0; i < k; i++) {
        void *reply = NULL;
        if (batch[i]->asking) {
            if (redisGetReply(c, &reply) != REDIS_OK)
                goto lost;
            freeReplyObject(reply);
            reply = NULL;
        }
        if (redisGetReply(c, &reply) != REDIS_OK)
            goto lost;
        batch[i]->rc = 0;
        batch[i]->reply = reply;
        batch[i]->mode = *mode;
    }
    *cp = c;
    return 0;
lost:
    proto = c->err == REDIS_ERR_PROTOCOL;
    if (timed_out(c))
        ratel__msg(err, errlen, "%s: no reply within %d ms (timeout_ms)",
                   nd->name, cfg->command_timeout_ms);
    else
        ratel__msg(err, errlen, "%s: %s%s", nd->name,
                   proto ? "answered something that is not the Redis "
                           "protocol: "
                         : "",
                   c->errstr[0] ? c->errstr : "connection lost");
    rc = proto ? RATEL_EPROTO : RATEL_EIO;
broken:
    fail_ops(batch + i, k - i, rc);
    redisFree(c);
    *cp = NULL;
    return rc;
}

/*
 * hiredis writes with write(2): a peer that closed its end would raise
 * SIGPIPE and kill a program that did not ignore it. A library must not
 * change the process's signal handling, so each round trip blocks SIGPIPE
 * in its own thread and takes back a SIGPIPE it caused, leaving one that
 * was already pending alone.
 */
static int sigpipe_block(sigset_t *old)
{
    sigset_t pipe_set, pending;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    pthread_sigmask(SIG_BLOCK, &pipe_set, old);
    return sigismember(&pending, SIGPIPE);
}

static void sigpipe_restore(const sigset_t *old, int was_pending)
{
    sigset_t pipe_set, pending;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    if (!was_pending && sigismember(&pending, SIGPIPE)) {
        static const struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static int all_done(op_t **ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!ops[i]->done)
            return 0;
    return 1;
}

/* Fails every queued op that may not try a down node (node locked). */
static void fail_queue_down(node_t *nd)
{
    op_t **link = &nd->head, *op;

    nd->tail = NULL;
    while ((op = *link)) {
        if (op->force) {
            nd->tail = op;
            link = &op->next;
            continue;
        }
        *link = op->next;
        op->rc = RATEL_EIO;
        op->reply = NULL;
        op->done = 1;
    }
    pthread_cond_broadcast(&nd->done_cv);
}

/* What a leader holds for its round trip, taken under the node's lock. */
typedef struct lead_s {
    op_t *batch[NODE_MAX_PIPELINE];
    size_t k;
    redisContext *c; /* an idle connection, or NULL: connect */
    node_mode_t mode;
    unsigned gen;
    int loaded, first, fresh, probe, only_forced;
    char err[300];
} lead_t;

/* Takes a connection slot and every queued op, up to a pipeline's worth
   (node locked). */
static void lead_take(node_t *nd, lead_t *l, int probe)
{
    l->c = nd->nidle > 0 ? nd->idle[--nd->nidle] : NULL;
    nd->nbusy++;
    l->k = 0;
    while (nd->head && l->k < NODE_MAX_PIPELINE) {
        l->batch[l->k++] = nd->head;
        nd->head = nd->head->next;
    }
    if (!nd->head)
        nd->tail = NULL;
    l->only_forced = 1;
    for (size_t i = 0; i < l->k; i++)
        l->only_forced &= l->batch[i]->force;
    l->gen = nd->generation;
    l->mode = nd->mode;
    l->loaded = nd->code_loaded;
    l->fresh = !l->c;
    l->first = l->fresh && !nd->ever_connected;
    l->probe = probe;
    l->err[0] = '\0';
}

/*
 * Records the outcome of a leader's round trip `rc` on the node (node
 * locked): the connection back to the pool (or into *drop, to close
 * unlocked), the breaker, the node's health. Returns 1 when the store's
 * health changed.
 */
static int lead_settle(node_t *nd, lead_t *l, int rc, int64_t now_us,
                       redisContext **drop)
{
    const node_config_t *cfg = nd->cfg;

    nd->nbusy--;
    if (l->probe)
        nd->probing = 0;
    if (rc == 0) {
        if (l->fresh && nd->ever_connected)
            atomic_fetch_add_explicit(cfg->reconnects, 1, memory_order_relaxed);
        nd->ever_connected = 1;
        nd->down_until_us = 0;
        nd->fail_streak = 0;
        nd->errstr[0] = '\0';
        nd->mode = l->mode;
        nd->code_loaded = l->loaded;
        if (l->gen == nd->generation && nd->nidle < cfg->pool_size)
            nd->idle[nd->nidle++] = l->c;
        else
            *drop = l->c;
        return nd->health_down &&
               ratel__health_set(cfg->health, &nd->health_down, 0, NULL,
                                 ratel_clock_now_us());
    }
    if (!l->only_forced) {
        /* Every connection of this node is suspect now: close the idle
           ones, and the busy ones when they come back. (A failed PING
           of ratel_store_ping, in the wall clock's time, reports the
           failure without moving the callers' breaker.) */
        nd->generation++;
        while (nd->nidle > 0)
            redisFree(nd->idle[--nd->nidle]);
        /* Backoff: the breaker's interval, doubled for every probe
           that failed in a row, up to 8 times it. */
        if (nd->fail_streak < 3)
            nd->fail_streak++;
        nd->down_until_us = now_us + (cfg->breaker_us << (nd->fail_streak - 1));
        if (nd->down_until_us <= 0)
            nd->down_until_us = 1;
    }
    ratel__msg(nd->errstr, sizeof nd->errstr, "%s", l->err);
    return ratel__health_set(cfg->health, &nd->health_down, 1, l->err,
                             ratel_clock_now_us());
}

void ratel__node_run(node_t *nd, op_t **ops, size_t n, int64_t now_us)
{
    const node_config_t *cfg = nd->cfg;
    int notify = 0;
    lead_t lead, *l = &lead;

    pthread_mutex_lock(&nd->lock);
    for (size_t i = 0; i < n; i++) {
        ops[i]->done = 0;
        ops[i]->reply = NULL;
        ops[i]->next = NULL;
        ops[i]->node = nd;
        if (nd->tail)
            nd->tail->next = ops[i];
        else
            nd->head = ops[i];
        nd->tail = ops[i];
    }
    while (!all_done(ops, n)) {
        redisContext *drop = NULL;
        int probe = 0, rc;

        if (!nd->head || (nd->nidle == 0 && nd->nbusy >= cfg->pool_size)) {
            pthread_cond_wait(&nd->done_cv, &nd->lock);
            continue;
        }
        if (nd->down_until_us != 0) {
            if (now_us < nd->down_until_us) {
                /* Down: fail fast; only a forced op (PING) still tries. */
                fail_queue_down(nd);
                if (!nd->head)
                    continue;
            } else if (nd->probing) {
                /* Half-open: one probe finds out, the rest wait for it. */
                pthread_cond_wait(&nd->done_cv, &nd->lock);
                continue;
            }
            probe = nd->probing = 1;
        }
        /* Lead one round trip. */
        lead_take(nd, l, probe);
        pthread_mutex_unlock(&nd->lock);
        {
            sigset_t old_mask;
            int pending = sigpipe_block(&old_mask);
            rc = round_trip(nd, &l->c, &l->mode, &l->loaded, l->first, l->batch,
                            l->k, l->err, sizeof l->err);
            sigpipe_restore(&old_mask, pending);
        }
        pthread_mutex_lock(&nd->lock);
        notify |= lead_settle(nd, l, rc, now_us, &drop);
        for (size_t i = 0; i < l->k; i++)
            l->batch[i]->done = 1;
        pthread_cond_broadcast(&nd->done_cv);
        if (drop) {
            pthread_mutex_unlock(&nd->lock);
            redisFree(drop);
            pthread_mutex_lock(&nd->lock);
        }
    }
    pthread_mutex_unlock(&nd->lock);
    if (notify)
        ratel__health_notify(cfg->health);
}

int ratel__node_health_clear(node_t *nd)
{
    int changed;

    pthread_mutex_lock(&nd->lock);
    changed =
        nd->health_down && ratel__health_set(nd->cfg->health, &nd->health_down,
                                             0, NULL, ratel_clock_now_us());
    pthread_mutex_unlock(&nd->lock);
    return changed;
}

void ratel__node_forget(node_t *nd, int mode, int code)
{
    pthread_mutex_lock(&nd->lock);
    if (mode)
        nd->mode = NODE_MODE_UNKNOWN;
    if (code || mode)
        nd->code_loaded = 0;
    pthread_mutex_unlock(&nd->lock);
}

void ratel__node_error(node_t *nd, char *buf, size_t len)
{
    pthread_mutex_lock(&nd->lock);
    snprintf(buf, len, "%s", nd->errstr);
    pthread_mutex_unlock(&nd->lock);
}

int ratel__node_down(node_t *nd, int64_t now_us, int64_t *until_us)
{
    int down;

    pthread_mutex_lock(&nd->lock);
    down = nd->down_until_us != 0 && now_us < nd->down_until_us;
    if (until_us)
        *until_us = nd->down_until_us;
    pthread_mutex_unlock(&nd->lock);
    return down;
}
