/*
 * engine_encode.c - a command's bytes: RESP arrays of bulk strings
 * appended to a connection's output, sent at the end of the turn.
 *
 * ACQUIRE, REFUND, RESET and RELEASE go as the node's mode asks: the
 * module's command (RATEL.ACQUIRE KEY ARGS...), the library's function
 * (FCALL ratel_acquire 1 KEY ARGS...) or the EVAL script's operation
 * (EVALSHA SHA 1 KEY ACQUIRE ARGS...), with the same ARGS in all three.
 */
#include "store/engine_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(conn_t *c, size_t more)
{
    size_t cap;
    char *p;

    if (c->outlen + more <= c->outcap)
        return 0;
    cap = c->outcap ? c->outcap : 4096;
    while (cap < c->outlen + more)
        cap *= 2;
    p = realloc(c->out, cap);
    if (!p)
        return -1;
    c->out = p;
    c->outcap = cap;
    return 0;
}

/* Writes `mark`, the decimal digits of v and CR LF at p; returns the
   length (a header of RESP: "*3\r\n", "$5\r\n"). */
static size_t header(char *p, char mark, size_t v)
{
    char digits[24];
    size_t n = 0, len = 0;

    /* Most are a word's length: one or two digits. */
    if (v < 100) {
        p[len++] = mark;
        if (v >= 10)
            p[len++] = (char)('0' + v / 10);
        p[len++] = (char)('0' + v % 10);
        p[len++] = '\r';
        p[len++] = '\n';
        return len;
    }
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    p[len++] = mark;
    while (n)
        p[len++] = digits[--n];
    p[len++] = '\r';
    p[len++] = '\n';
    return len;
}

/* "*N\r\n" then "$LEN\r\nBYTES\r\n" per argument. */
int ratel__encode_argv(conn_t *c, const argv_t *a)
{
    size_t need = 16;

    for (int i = 0; i < a->n; i++)
        need += a->len[i] + 24;
    if (reserve(c, need) != 0)
        return -1;
    c->outlen += header(c->out + c->outlen, '*', (size_t)a->n);
    for (int i = 0; i < a->n; i++) {
        c->outlen += header(c->out + c->outlen, '$', a->len[i]);
        memcpy(c->out + c->outlen, a->v[i], a->len[i]);
        c->outlen += a->len[i];
        memcpy(c->out + c->outlen, "\r\n", 2);
        c->outlen += 2;
    }
    return 0;
}

int ratel__encode_words(conn_t *c, int argc, ...)
{
    argv_t a = {.n = 0};
    va_list ap;

    va_start(ap, argc);
    for (int i = 0; i < argc && i < 32; i++) {
        a.v[a.n] = va_arg(ap, const char *);
        a.len[a.n] = strlen(a.v[a.n]);
        a.n++;
    }
    va_end(ap);
    return ratel__encode_argv(c, &a);
}

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

#define ARG(s_, l_) (a->v[a->n] = (s_), a->len[a->n] = (l_), a->n++)
#define ARGZ(s_) ARG((s_), strlen(s_))
#define NUM(i, fmt, v) ARG(num[i], (size_t)snprintf(num[i], 24, fmt, v))

/* The request options (include/ratel.h): each one's word and kind, and
   the operations that take it. */
static const struct {
    const char *word;
    int kind; /* RATEL_ARG_* */
    unsigned ops;
} request_options[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note)                  \
    {#NAME, kind, ops},
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};

/*
 * The value of each option in `rop`, and whether it is sent: a flag when
 * set, a value when it differs from what the command assumes without it,
 * the first argument always.
 */
static int option_value(const ratel__rop_t *rop, int opt, long long *v)
{
    switch (opt) {
    case RATEL_OPTION_COST:
        return (*v = (long long)rop->request.cost) != 1;
    case RATEL_OPTION_PEEK:
        return (*v = (rop->request.flags & RATEL_PEEK) != 0) != 0;
    case RATEL_OPTION_MAXWAIT:
        return (*v = rop->request.max_wait_ms) > 0;
    case RATEL_OPTION_RENEW:
        return (*v = (rop->lease_flags & RATEL_RENEW) != 0) != 0;
    case RATEL_OPTION_AT:
        return (*v = rop->at_ms) >= 0;
    case RATEL_OPTION_LEASE:
        return (*v = rop->lease), 1;
    case RATEL_OPTION_WANT:
    case RATEL_OPTION_UNSPENT:
        return (*v = (long long)rop->want), 1;
    case RATEL_OPTION_TTL:
        return (*v = rop->ttl_ms), 1;
    case RATEL_OPTION_HOLDER:
        return (*v = (long long)rop->holder) > 0;
    case RATEL_OPTION_UNTIL:
        return (*v = rop->until_ms), 1;
    }
    return 0;
}

/* What follows the key of ACQUIRE, REFUND and RELEASE: the options this
   operation takes, in the table's order, then the rules. */
static void options(argv_t *a, const ratel__rop_t *rop,
                    char num[RATEL_OPTIONS][24], rule_texts_t *rules)
{
    static const unsigned ops[] = {
        [RATEL__ROP_ACQUIRE] = RATEL_OP_ACQUIRE,
        [RATEL__ROP_REFUND] = RATEL_OP_REFUND,
        [RATEL__ROP_RELEASE] = RATEL_OP_RELEASE,
        [RATEL__ROP_SLICE] = RATEL_OP_SLICE,
        [RATEL__ROP_UNSLICE] = RATEL_OP_UNSLICE,
    };
    unsigned op = ops[rop->kind];

    /* The first argument (RELEASE's lease) comes before any word. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < RATEL_OPTIONS; i++) {
            long long v;
            if (!(request_options[i].ops & op) ||
                (request_options[i].kind == RATEL_ARG_FIRST) != (pass == 0) ||
                !option_value(rop, i, &v))
                continue;
            if (request_options[i].kind != RATEL_ARG_FIRST)
                ARGZ(request_options[i].word);
            if (request_options[i].kind != RATEL_ARG_FLAG)
                NUM(i, "%lld", v);
        }
    format_rules(rules, rop->policy);
    for (uint32_t i = 0; i < rop->policy->nrules; i++)
        ARG(rules->text[i], rules->len[i]);
}

int ratel__encode_rop(conn_t *c, const ratel__rop_t *rop)
{
    static const char *const module_cmd[] = {"RATEL.ACQUIRE", "RATEL.REFUND",
                                             "RATEL.RESET",   "RATEL.RELEASE",
                                             "RATEL.SLICE",   "RATEL.UNSLICE"};
    static const char *const function[] = {"ratel_acquire", "ratel_refund",
                                           "ratel_reset",   "ratel_release",
                                           "ratel_slice",   "ratel_unslice"};
    static const char *const lua_op[] = {"ACQUIRE", "REFUND", "RESET",
                                         "RELEASE", "SLICE",  "UNSLICE"};
    int slice = rop->kind == RATEL__ROP_SLICE;
    static const char *const plain[] = {
        [RATEL__ROP_GET] = "GET",         [RATEL__ROP_PING] = "PING",
        [RATEL__ROP_SLOTS] = "CLUSTER",   [RATEL__ROP_ROLE] = "ROLE",
        [RATEL__ROP_MASTER] = "SENTINEL",
    };
    ratel__node_mode_t mode = c->node->mode;
    int lua = mode == RATEL__MODE_LUA;
    argv_t args, *a = &args; /* only args.n is read before set */
    char num[RATEL_OPTIONS][24];

    args.n = 0;
    if (rop->kind == RATEL__ROP_COMMAND) {
        for (int i = 0;
             i < rop->argc && i < (int)(sizeof a->v / sizeof a->v[0]); i++)
            ARG(rop->argv[i], rop->argvlen[i]);
        return ratel__encode_argv(c, a);
    }
    if (rop->kind > RATEL__ROP_UNSLICE) {
        ARGZ(plain[rop->kind]);
        if (rop->kind == RATEL__ROP_GET)
            ARG(rop->key, rop->keylen);
        if (rop->kind == RATEL__ROP_SLOTS)
            ARGZ("SLOTS");
        if (rop->kind == RATEL__ROP_MASTER) {
            ARGZ("GET-MASTER-ADDR-BY-NAME");
            ARGZ(c->e->sh->url.master_name);
        }
        return ratel__encode_argv(c, a);
    }
    /* SLICE has two keys: the key, then its holders' demand. */
    if (mode == RATEL__MODE_MODULE) {
        ARGZ(module_cmd[rop->kind]);
        ARG(rop->key, rop->keylen);
        if (slice)
            ARG(rop->demand, rop->demandlen);
    } else {
        ARGZ(lua ? "EVALSHA" : "FCALL");
        if (lua)
            ARG(c->e->sh->script_sha, 40);
        else
            ARGZ(function[rop->kind]);
        ARGZ(slice ? "2" : "1");
        ARG(rop->key, rop->keylen);
        if (slice)
            ARG(rop->demand, rop->demandlen);
        if (lua)
            ARGZ(lua_op[rop->kind]);
    }
    if (rop->kind != RATEL__ROP_RESET)
        options(a, rop, num, &c->e->rules);
#undef ARG
#undef ARGZ
#undef NUM
    return ratel__encode_argv(c, a);
}

/* ------------------------------------------------ ratel_acquire_many */

/* Whether two ACQUIREs send the same words after their keys (those
   options() writes): the second then sends "0", the library's "the
   words of the item before". */
static int same_words(const ratel__rop_t *a, const ratel__rop_t *b)
{
    return a->request.cost == b->request.cost &&
           (a->request.flags & RATEL_PEEK) == (b->request.flags & RATEL_PEEK) &&
           a->request.max_wait_ms == b->request.max_wait_ms &&
           a->at_ms == b->at_ms &&
           (a->policy == b->policy ||
            memcmp(a->policy, b->policy, sizeof *a->policy) == 0);
}

/* One bulk string: "$LEN\r\nBYTES\r\n". */
static int bulk(conn_t *c, const char *s, size_t len)
{
    if (reserve(c, len + 24) != 0)
        return -1;
    c->outlen += header(c->out + c->outlen, '$', len);
    memcpy(c->out + c->outlen, s, len);
    c->outlen += len;
    memcpy(c->out + c->outlen, "\r\n", 2);
    c->outlen += 2;
    return 0;
}

/*
 * FCALL ratel_acquire_many N KEY... (the EVAL script: EVALSHA SHA N KEY...
 * ACQUIRE_MANY) then, per ACQUIRE, the count of its words and the words
 * (those of ratel_acquire after the key), or "0" when they are the item
 * before's (docs/lua.md).
 */
/* The RESP header and the words before the items' own. */
static int many_head(conn_t *c, ratel__rop_t *const *rops, size_t n, int lua)
{
    size_t words = 3 + n + (size_t)lua, len;
    char num[RATEL_OPTIONS][24], count[24];
    argv_t a;

    for (size_t i = 0; i < n; i++) {
        a.n = 0;
        if (i == 0 || !same_words(rops[i - 1], rops[i]))
            options(&a, rops[i], num, &c->e->rules);
        words += 1 + (size_t)a.n;
    }
    if (reserve(c, 24) != 0)
        return -1;
    c->outlen += header(c->out + c->outlen, '*', words);
    len = (size_t)snprintf(count, sizeof count, "%zu", n);
    if ((lua ? bulk(c, "EVALSHA", 7) != 0 ||
                   bulk(c, c->e->sh->script_sha, 40) != 0
             : bulk(c, "FCALL", 5) != 0 ||
                   bulk(c, "ratel_acquire_many", 18) != 0) ||
        bulk(c, count, len) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (bulk(c, rops[i]->key, rops[i]->keylen) != 0)
            return -1;
    return lua ? bulk(c, "ACQUIRE_MANY", 12) : 0;
}

int ratel__encode_many(conn_t *c, ratel__rop_t *const *rops, size_t n)
{
    int lua = c->node->mode == RATEL__MODE_LUA;
    size_t start = c->outlen, len;
    char num[RATEL_OPTIONS][24], count[24];
    argv_t a;

    if (many_head(c, rops, n, lua) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        a.n = 0;
        if (i == 0 || !same_words(rops[i - 1], rops[i]))
            options(&a, rops[i], num, &c->e->rules);
        len = (size_t)snprintf(count, sizeof count, "%d", a.n);
        if (bulk(c, count, len) != 0)
            goto fail;
        for (int w = 0; w < a.n; w++)
            if (bulk(c, a.v[w], a.len[w]) != 0)
                goto fail;
    }
    return 0;
fail:
    /* Nothing half-written stays: what follows would not parse. */
    c->outlen = start;
    return -1;
}
