/*
 * engine_sentinel.c - the primary as Redis Sentinel names it
 * (redis+sentinel://SENTINELS/MASTER_NAME).
 *
 * The URL's addresses are Sentinels. The engine asks them all at once
 * SENTINEL GET-MASTER-ADDR-BY-NAME; the first to answer with an address
 * names the primary (a hung Sentinel among answering ones costs nothing).
 * When none does, the round fails: with RATEL_EPROTO when a Sentinel
 * answered but knew no such primary or refused the credentials (the
 * configuration is wrong: no outage), else RATEL_EIO. Commands submitted before
 * there is an answer wait for it (parked, within their deadlines). The Sentinel
 * that answered also carries a subscription to +switch-master, so a failover
 * moves the primary as soon as the Sentinels decide it; and a command
 * that finds the primary gone (READONLY: it is a replica now; a refused
 * or reset connection) makes the engine ask again (at most every 100 ms)
 * and is sent to the primary named then, within its deadline. In
 * between, the failure policy decides; every decision says its source.
 *
 * Sentinels are not health sources of the store: one that fails is one
 * voice fewer, the data nodes say whether the store can decide.
 */
#include "store/engine_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK_INTERVAL_US 100000

/* Makes sure the Sentinel `node` carries the +switch-master subscription. */
static void subscribe(ratel__engine_t *e, ratel__node_t *node)
{
    char why[300];
    conn_t *c;

    if (e->subscription || e->freeing)
        return;
    c = ratel__conn_open(node, why, sizeof why);
    if (!c)
        return;
    /* SUBSCRIBE goes once the connection is up and authenticated. */
    c->subscriber = 1;
    e->subscription = c;
}

/* [host, port]: the primary's node (NULL: not an address). */
static ratel__node_t *named_primary(ratel__engine_t *e, const redisReply *r,
                                    size_t *index)
{
    char host[256];
    long port;

    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= sizeof host)
        return NULL;
    memcpy(host, r->element[0]->str, r->element[0]->len);
    host[r->element[0]->len] = '\0';
    port = strtol(r->element[1]->str, NULL, 10);
    if (port < 1 || port > 65535)
        return NULL;
    return ratel__engine_node_at(e, host, (int)port, index);
}

/* Why a Sentinel named no primary, for the round's end: an answer
   (unknown name, credentials refused: the configuration's fault) says
   more than a silence (an outage). */
static void ask_failed(ratel__engine_t *e, const ratel__rop_t *rop)
{
    char why[400];

    if (rop->rc == 0) {
        ratel__msg(why, sizeof why,
                   "Sentinel %s knows no primary named %s (answered %s)",
                   rop->node->name, e->sh->url.master_name,
                   rop->reply->type == REDIS_REPLY_NIL ? "nil"
                   : rop->reply->str                   ? rop->reply->str
                                                       : "an array");
    } else {
        if (rop->node->errstr[0])
            ratel__msg(why, sizeof why, "Sentinel %s", rop->node->errstr);
        else
            ratel__msg(why, sizeof why, "Sentinel %s: %s", rop->node->name,
                       ratel_strerror(rop->rc));
    }
    /* The round's reason: a refusal over a silence. */
    if (rop->rc == 0 || rop->rc == RATEL_EPROTO) {
        e->ask_refused = RATEL_EPROTO;
        ratel__msg(e->ask_why, sizeof e->ask_why, "%s", why);
    } else if (!e->ask_refused) {
        ratel__msg(e->ask_why, sizeof e->ask_why, "%s", why);
    }
}

static void ask_done(ratel__rop_t *rop)
{
    ratel__engine_t *e = rop->ud;
    size_t index = 0;
    ratel__node_t *primary =
        rop->rc == 0 ? named_primary(e, rop->reply, &index) : NULL;

    if (!primary)
        ask_failed(e, rop);
    freeReplyObject(rop->reply);
    rop->reply = NULL;
    e->asks_pending--;
    if (e->ask_decided)
        return; /* a straggler of a round another Sentinel decided */
    if (primary) {
        e->ask_decided = 1;
        subscribe(e, rop->node);
        ratel__route_primary_found(e, index, 0);
    } else if (e->asks_pending == 0 || e->freeing) {
        e->ask_decided = 1;
        ratel__engine_error(e, e->ask_why);
        ratel__route_primary_found(e, (size_t)-1, e->ask_refused);
    }
}

/*
 * Asks every Sentinel at once: the first to name an address decides (a
 * hung Sentinel costs nothing while another answers). Commands waiting
 * meanwhile wait for that answer, within their deadlines.
 */
static void ask_all(ratel__engine_t *e)
{
    size_t n = e->sh->url.naddrs;

    e->ask_decided = 0;
    e->ask_refused = 0;
    e->ask_why[0] = '\0';
    e->asks_pending = n;
    for (size_t i = 0; i < n; i++) {
        ratel__rop_t *rop = &e->role[i];
        memset(rop, 0, sizeof *rop);
        rop->kind = RATEL__ROP_MASTER;
        rop->target = e->nodes[i]; /* the Sentinels come first */
        rop->force = 1;
        rop->now_us = e->last_now_us;
        rop->done = ask_done;
        rop->ud = e;
        ratel__engine_submit(e, rop);
    }
}

int ratel__sentinel_ask(ratel__engine_t *e, int force)
{
    int64_t now = e->last_now_us;

    if (e->failing_over)
        return 1;
    /* A decided round's stragglers (a hung Sentinel) still hold their
       commands: the primary named stands until they are done. */
    if (e->asks_pending > 0 && e->have_primary)
        return 0;
    if (!force && e->last_failover_us != 0 && now >= e->last_failover_us &&
        now - e->last_failover_us < ASK_INTERVAL_US && e->have_primary)
        return 0;
    e->last_failover_us = now ? now : 1;
    e->failing_over = 1;
    ask_all(e);
    return 1;
}

/* "+switch-master": "NAME OLD_HOST OLD_PORT NEW_HOST NEW_PORT". */
void ratel__sentinel_message(conn_t *c, const redisReply *r)
{
    ratel__engine_t *e = c->e;
    char name[256], host[256];
    const redisReply *text;
    int port;
    size_t index;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    text = r->element[2];
    if (text->len > 600 ||
        sscanf(text->str, "%255s %*s %*s %255s %d", name, host, &port) != 3 ||
        strcmp(name, e->sh->url.master_name) != 0 || port < 1 || port > 65535)
        return;
    if (ratel__engine_node_at(e, host, port, &index) && !e->failing_over)
        ratel__route_primary_found(e, index, 0);
}
