/*
 * engine_route.c - where the Redis engine sends a command, and what it
 * does with an answer that says "not here" or "not now".
 *
 * - Standalone: the current primary. With several addresses, a transport
 *   failure of the primary's command or a READONLY answer starts a
 *   failover (at most one per breaker interval of the callers' time):
 *   every address is asked for its ROLE, the one saying "master" becomes
 *   the primary, and the commands parked meanwhile are sent there (each
 *   within its own deadline). When no other primary is found they fail.
 * - Cluster: the slot map from CLUSTER SLOTS; a key's slot is CRC16 of
 *   the key (or of its {hash tag}) mod 16384. Every node the map names,
 *   replicas included, becomes a known node, and any known node may be
 *   asked for the map (seeds and masters being dead, a promoted replica
 *   is still found): owners of slots first, a node whose last contact
 *   failed last. The map is read again after a MOVED (which updates it
 *   and is followed; ASK is followed once with ASKING), and when a
 *   command's slot is not known or its owner's last contact failed:
 *   a dead master sends no MOVED, but once the cluster promotes its
 *   replica the map says so. Such a command waits for the read, then goes
 *   where the map says. Reads are bounded in the callers' time: 100 ms
 *   apart after a MOVED, and while an owner's breaker is open 100 ms,
 *   doubled per read up to 1 s, back to 100 ms when the map changes. A
 *   read that changes the map stops counting the nodes left without slots
 *   in the store's health (the dead master after the promotion).
 *   CLUSTER SLOTS rather than CLUSTER SHARDS (7.0): every Redis Cluster
 *   and Valkey answers it, and it is what the documented ACL grants.
 * - Answers that mean "learn again": NOSCRIPT and "Function not found"
 *   (the script or the library is gone: a restart, a failover, a flush),
 *   an unknown command where the module or the library was used (the
 *   node finds its mode again).
 */
#include "store/engine_private.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAP_INTERVAL_US 100000     /* a MOVED's reads, the back-off's start */
#define MAP_BACKOFF_MAX_US 1000000 /* a failure's reads: at most 1 s apart */

static uint16_t crc16_table[256];
static pthread_once_t crc16_once = PTHREAD_ONCE_INIT;

/* CRC16-CCITT (XModem), the polynomial Redis Cluster hashes keys with. */
static void crc16_init(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t crc = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
        crc16_table[i] = crc;
    }
}

/* The cluster slot of a key: of its first non-empty {hash tag}, if any. */
unsigned ratel__key_slot(const char *key, size_t len)
{
    uint16_t crc = 0;
    size_t start = 0, end = len;
    const char *open = memchr(key, '{', len);

    if (open) {
        size_t i = (size_t)(open - key);
        const char *close = memchr(open + 1, '}', len - i - 1);
        if (close && close > open + 1) {
            start = i + 1;
            end = (size_t)(close - key);
        }
    }
    pthread_once(&crc16_once, crc16_init);
    for (size_t i = start; i < end; i++)
        crc = (uint16_t)((crc << 8) ^
                         crc16_table[((crc >> 8) ^ (uint8_t)key[i]) & 0xff]);
    return crc & (ENGINE_SLOTS - 1);
}

/* --------------------------------------------------------- slot map */

/* Why the map is read again, which says how soon after the last read. */
typedef enum map_why_e {
    MAP_NOW,   /* discover (a health check): now */
    MAP_MOVED, /* a MOVED, a slot not in the map, a probe: 100 ms apart */
    MAP_FAILED /* a serving node's breaker is open: the back-off apart */
} map_why_t;

#define MAP_ASKED 255 /* map_rank: asked during this read */

static void map_try(ratel__engine_t *e);

/* Tells every discovery waiting that it ended with `rc`. */
static void wake_waiters(ratel__engine_t *e, int rc)
{
    while (e->wait_head)
        ratel__engine_finish(e, e->wait_head, rc, NULL);
}

/* owns[i] = 1 for each node i that owns a slot in the map. */
static void map_owners(const ratel__engine_t *e, unsigned char *owns)
{
    memset(owns, 0, ENGINE_MAX_NODES);
    for (size_t slot = 0; slot < ENGINE_SLOTS; slot++)
        if (e->slots[slot])
            owns[e->slots[slot] - 1] = 1;
}

/* Whether the node's last contact failed (no success since): its breaker
   may be open, or closed again with the next command as its probe. */
static int node_failing(const ratel__node_t *node)
{
    return node->down_until_us != 0 || node->errstr[0] != '\0';
}

/* The first node whose last contact did not fail, else the first node. */
static ratel__node_t *any_node(const ratel__engine_t *e)
{
    for (size_t i = 0; i < e->nnodes; i++)
        if (!node_failing(e->nodes[i]))
            return e->nodes[i];
    return e->nnodes ? e->nodes[0] : NULL;
}

/*
 * The node one entry of a CLUSTER SLOTS range names ([host, port, id,
 * ...]), known from now on; NULL when the entry is malformed, names no
 * address ("?": unknown hostname) or there is no room. An empty host is
 * the asked node's. A port out of bounds (a broken or hostile server) is
 * refused.
 */
static ratel__node_t *slots_node(ratel__engine_t *e, const redisReply *m,
                                 const ratel__node_t *asked, size_t *idx)
{
    const char *host;

    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING ||
        m->element[1]->type != REDIS_REPLY_INTEGER ||
        m->element[1]->integer < 1 || m->element[1]->integer > 65535)
        return NULL;
    host = m->element[0]->len ? m->element[0]->str : asked->host;
    if (strcmp(host, "?") == 0)
        return NULL;
    return ratel__engine_node_at(e, host, (int)m->element[1]->integer, idx);
}

/*
 * Reads CLUSTER SLOTS' answer (asked of `asked`) into the map: each range
 * [start, end, master, replica...] gives its slots to the master, and its
 * replicas become known nodes (asked for the map when others fail: a
 * promoted replica is found without a MOVED, even with the seeds dead).
 * *changed = 1 when a slot changed hands. Returns 1 when a range was read.
 */
static int apply_slots(ratel__engine_t *e, const redisReply *r,
                       const ratel__node_t *asked, int *changed)
{
    int ok = 0;

    if (!r || r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *s = r->element[i];
        size_t idx;
        /* A range out of bounds is skipped: looping from a slot of -2^63
           would never end. */
        if (s->type != REDIS_REPLY_ARRAY || s->elements < 3 ||
            s->element[0]->type != REDIS_REPLY_INTEGER ||
            s->element[1]->type != REDIS_REPLY_INTEGER ||
            s->element[0]->integer < 0 ||
            s->element[0]->integer >= ENGINE_SLOTS ||
            !slots_node(e, s->element[2], asked, &idx))
            continue;
        for (size_t j = 3; j < s->elements; j++)
            slots_node(e, s->element[j], asked, NULL);
        for (long long slot = s->element[0]->integer;
             slot <= s->element[1]->integer && slot < ENGINE_SLOTS; slot++) {
            if (e->slots[slot] != (uint16_t)(idx + 1))
                *changed = 1;
            e->slots[slot] = (uint16_t)(idx + 1);
        }
        ok = 1;
    }
    return ok;
}

/* The commands that waited for the map go where it says now (a slot it
   does not know: to any node, which answers MOVED). */
static void release_parked(ratel__engine_t *e)
{
    while (e->parked_head) {
        ratel__rop_t *rop = e->parked_head;
        unsigned idx;

        e->parked_head = rop->qnext;
        if (e->parked_head)
            e->parked_head->qprev = NULL;
        else
            e->parked_tail = NULL;
        rop->qprev = rop->qnext = NULL;
        rop->where = WHERE_NONE;
        idx = e->slots[ratel__key_slot(rop->key, rop->keylen)];
        if (e->freeing || (!idx && !any_node(e)))
            ratel__engine_finish(e, rop, RATEL_EIO, NULL);
        else
            ratel__engine_enqueue(e, idx ? e->nodes[idx - 1] : any_node(e),
                                  rop);
    }
}

/*
 * The read ended (`ok`: a map was read, `changed`: slots changed hands).
 * A change ends the back-off, and nodes left without slots (a dead master
 * whose replica was promoted) stop counting for the store's health.
 */
static void map_end(ratel__engine_t *e, int ok, int changed)
{
    e->mapping = 0;
    if (changed)
        e->map_backoff_us = MAP_INTERVAL_US;
    if (ok && !e->freeing && ratel__engine_health_prune(e))
        ratel__health_notify(e->sh->health);
    release_parked(e);
    wake_waiters(e, ok ? 0 : RATEL_EIO);
}

static void map_done(ratel__rop_t *rop)
{
    ratel__engine_t *e = rop->ud;
    int changed = 0,
        ok = rop->rc == 0 && apply_slots(e, rop->reply, rop->node, &changed);

    if (rop->rc == 0 && !ok) {
        char why[400];
        ratel__msg(why, sizeof why,
                   "%s does not answer CLUSTER SLOTS (is it a cluster node? "
                   "use redis:// for a standalone server)",
                   rop->node->name);
        ratel__engine_error(e, why);
    }
    freeReplyObject(rop->reply);
    rop->reply = NULL;
    if (ok || e->freeing) {
        map_end(e, ok, changed);
        return;
    }
    map_try(e);
}

/* Asks the next node for the map, in the order ranked when the read
   started; none left: the read failed. */
static void map_try(ratel__engine_t *e)
{
    ratel__rop_t *rop = &e->map_rop;
    size_t next = e->map_round;

    for (size_t i = 0; i < e->map_round; i++)
        if (e->map_rank[i] != MAP_ASKED &&
            (next == e->map_round || e->map_rank[i] < e->map_rank[next]))
            next = i;
    if (next == e->map_round) {
        ratel__engine_error(e, "no cluster node answered");
        map_end(e, 0, 0);
        return;
    }
    e->map_rank[next] = MAP_ASKED;
    memset(rop, 0, sizeof *rop);
    rop->kind = RATEL__ROP_SLOTS;
    rop->target = e->nodes[next];
    rop->force = 1;
    rop->now_us = e->last_now_us;
    rop->done = map_done;
    rop->ud = e;
    ratel__engine_submit(e, rop);
}

/*
 * Reads the map again, unless a read is under way (then 1: it will end)
 * or `why` allows none yet: a MOVED's read waits 100 ms of the callers'
 * time after the last read, a failure's the back-off (100 ms, doubled for
 * each failure's read up to 1 s, back to 100 ms when the map changes).
 * Nodes are asked in this order: those owning slots, then the others
 * (seeds, replicas), each group those whose last contact succeeded first;
 * a node that failed is asked last (each ask of it may wait for its
 * connect to time out, and fails it again). Returns 1 when a read is
 * under way.
 */
static int map_start(ratel__engine_t *e, map_why_t why)
{
    int64_t now = e->last_now_us, wait;
    unsigned char owns[ENGINE_MAX_NODES];

    if (e->mapping)
        return 1;
    if (e->freeing || e->nnodes == 0)
        return 0;
    if (e->map_backoff_us < MAP_INTERVAL_US)
        e->map_backoff_us = MAP_INTERVAL_US;
    wait = why == MAP_FAILED ? e->map_backoff_us : MAP_INTERVAL_US;
    if (why != MAP_NOW && e->last_map_us != 0 && now >= e->last_map_us &&
        now - e->last_map_us < wait)
        return 0;
    if (why == MAP_FAILED && e->map_backoff_us < MAP_BACKOFF_MAX_US)
        e->map_backoff_us = e->map_backoff_us * 2 < MAP_BACKOFF_MAX_US
                                ? e->map_backoff_us * 2
                                : MAP_BACKOFF_MAX_US;
    e->last_map_us = now ? now : 1;
    e->mapping = 1;
    e->map_round = e->nnodes;
    map_owners(e, owns);
    for (size_t i = 0; i < e->nnodes; i++)
        e->map_rank[i] =
            (unsigned char)(node_failing(e->nodes[i]) * 2 + !owns[i]);
    map_try(e);
    return e->mapping;
}

/* A command waits for the map being read: sent where it says then. */
static void park(ratel__engine_t *e, ratel__rop_t *rop)
{
    rop->where = WHERE_PARKED;
    ratel__queue_append(&e->parked_head, &e->parked_tail, rop);
}

/*
 * A cluster's command goes to the node owning its key's slot. When the
 * map does not know the slot, or the owner's last contact failed (a dead
 * master: its replica may have been promoted meanwhile, which no MOVED
 * will ever say), the map is read again first and the command waits for
 * the read (parked; NULL returned), unless the back-off allows no read
 * yet: then it goes to the owner (whose open breaker fails it at once,
 * or which it probes) or, unknown, to any node (which answers MOVED).
 */
ratel__node_t *ratel__route_rop(ratel__engine_t *e, ratel__rop_t *rop)
{
    ratel__node_t *node;
    unsigned idx;

    if (!e->sh->url.cluster)
        return e->have_primary ? e->nodes[e->primary] : NULL;
    idx = e->slots[ratel__key_slot(rop->key, rop->keylen)];
    node = idx ? e->nodes[idx - 1] : NULL;
    if (node && !node_failing(node))
        return node;
    if (!rop->force &&
        map_start(e, node && ratel__engine_node_down(node, rop->now_us, NULL)
                         ? MAP_FAILED
                         : MAP_MOVED)) {
        park(e, rop);
        return NULL;
    }
    return node ? node : any_node(e);
}

int ratel__route_same_slot(const ratel__engine_t *e, const ratel__rop_t *a,
                           const ratel__rop_t *b)
{
    return !e->sh->url.cluster || ratel__key_slot(a->key, a->keylen) ==
                                      ratel__key_slot(b->key, b->keylen);
}

/* --------------------------------------------------------- failover */

static int can_fail_over(const ratel__engine_t *e)
{
    return !e->sh->url.cluster &&
           (e->sh->url.naddrs > 1 || e->sh->url.sentinel);
}

void ratel__route_primary_found(ratel__engine_t *e, size_t found, int fail_rc)
{
    size_t old = e->primary;
    int had = e->have_primary,
        moved = found != (size_t)-1 && (found != old || !had);

    e->failing_over = 0;
    if (moved) {
        e->primary = found;
        e->have_primary = 1;
        /* The old primary no longer serves: its failure is not ours. */
        if (had && old != found &&
            ratel__engine_node_health_clear(e->nodes[old]))
            ratel__health_notify(e->sh->health);
    }
    while (e->parked_head) {
        ratel__rop_t *rop = e->parked_head;
        int rc = rop->rc;
        rop->rc = 0;
        if (!e->have_primary || e->freeing || (!moved && rop->attempts > 0)) {
            ratel__engine_finish(e, rop,
                                 fail_rc ? fail_rc
                                 : rc    ? rc
                                         : RATEL_EIO,
                                 NULL);
            continue;
        }
        rop->where = WHERE_NONE;
        e->parked_head = rop->qnext;
        if (!e->parked_head)
            e->parked_tail = NULL;
        else
            e->parked_head->qprev = NULL;
        rop->qprev = rop->qnext = NULL;
        ratel__engine_enqueue(e, e->nodes[e->primary], rop);
    }
    wake_waiters(e, e->have_primary ? 0 : fail_rc ? fail_rc : RATEL_EIO);
}

static void role_done(ratel__rop_t *rop)
{
    ratel__engine_t *e = rop->ud;
    const redisReply *r = rop->reply;
    size_t i = (size_t)(rop - e->role);

    if (rop->rc == 0 && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(r->element[0]->str, "master") == 0 &&
        e->role_found == (size_t)-1)
        e->role_found = i;
    freeReplyObject(rop->reply);
    rop->reply = NULL;
    if (--e->roles_pending == 0)
        ratel__route_primary_found(e, e->role_found, 0);
}

/* Asks every address for its ROLE, unless one was asked within the
   breaker's interval (`force`: now). Returns 1 when one is under way. */
static int failover_start(ratel__engine_t *e, int force)
{
    int64_t now = e->last_now_us;

    if (!can_fail_over(e))
        return 0;
    if (e->sh->url.sentinel)
        return ratel__sentinel_ask(e, force);
    if (e->failing_over)
        return 1;
    if (!force && e->last_failover_us != 0 && now >= e->last_failover_us &&
        now - e->last_failover_us < e->sh->breaker_us)
        return 0;
    e->last_failover_us = now ? now : 1;
    e->failing_over = 1;
    e->role_found = (size_t)-1;
    e->roles_pending = e->sh->url.naddrs;
    for (size_t i = 0; i < e->sh->url.naddrs; i++) {
        ratel__rop_t *rop = &e->role[i];
        memset(rop, 0, sizeof *rop);
        rop->kind = RATEL__ROP_ROLE;
        rop->target = e->nodes[i]; /* the URL's addresses come first */
        rop->force = 1;
        rop->now_us = now;
        rop->done = role_done;
        rop->ud = e;
        ratel__engine_submit(e, rop);
    }
    return 1;
}

int ratel__route_park(ratel__engine_t *e, ratel__rop_t *rop, int rc)
{
    if (rop->force ||
        (rop->kind > RATEL__ROP_PING && rop->kind != RATEL__ROP_COMMAND) ||
        !can_fail_over(e) ||
        (e->have_primary && rop->node != e->nodes[e->primary]) ||
        rop->attempts >= RATEL__ENGINE_ATTEMPTS || !failover_start(e, 0))
        return 0;
    rop->rc = rc;
    rop->where = WHERE_PARKED;
    ratel__queue_append(&e->parked_head, &e->parked_tail, rop);
    return 1;
}

/* --------------------------------------------------------- retries */

/* Parses "MOVED 3999 host:port" / "ASK ..." into slot, host and port. */
static int parse_redirect(const char *msg, size_t len, unsigned *slot,
                          char *host, size_t hostlen, int *port)
{
    char buf[400];
    const char *sp, *colon;
    char *end;
    long v;

    if (len >= sizeof buf)
        return 0;
    memcpy(buf, msg, len);
    buf[len] = '\0';
    sp = strchr(buf, ' ');
    if (!sp)
        return 0;
    v = strtol(sp + 1, &end, 10);
    if (end == sp + 1 || *end != ' ' || v < 0 || v >= ENGINE_SLOTS)
        return 0;
    *slot = (unsigned)v;
    colon = strrchr(end + 1, ':');
    if (!colon || colon == end + 1 || (size_t)(colon - end - 1) >= hostlen)
        return 0;
    memcpy(host, end + 1, (size_t)(colon - end - 1));
    host[colon - end - 1] = '\0';
    v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || v < 1 || v > 65535)
        return 0;
    *port = (int)v;
    return 1;
}

/* MOVED or ASK: the node named (NULL: not a redirection we can follow). */
static ratel__node_t *redirect(ratel__engine_t *e, ratel__rop_t *rop,
                               const redisReply *r)
{
    char host[256];
    unsigned slot;
    size_t idx;
    int port, moved = r->str[0] == 'M';
    ratel__node_t *node;

    if (!parse_redirect(r->str, r->len, &slot, host, sizeof host, &port))
        return NULL;
    node = ratel__engine_node_at(e, host, port, &idx);
    if (!node)
        return NULL;
    atomic_fetch_add_explicit(&((ratel__redis_shared_t *)e->sh)->redirects, 1,
                              memory_order_relaxed);
    rop->asking = !moved;
    if (moved) {
        e->slots[slot] = (uint16_t)(idx + 1);
        map_start(e, MAP_MOVED);
    }
    return node;
}

int ratel__route_retry(ratel__engine_t *e, ratel__rop_t *rop, redisReply *r)
{
    ratel__node_t *node = rop->node, *again = NULL;

    if (rop->attempts >= RATEL__ENGINE_ATTEMPTS || rop->force)
        return 0;
    if (ratel__reply_starts(r, "MOVED ") || ratel__reply_starts(r, "ASK ")) {
        again = redirect(e, rop, r);
    } else if (ratel__reply_starts(r, "NOSCRIPT") ||
               ratel__reply_starts(r, "ERR Function not found")) {
        node->code_loaded = 0;
        again = node;
    } else if (ratel__reply_starts(r, "ERR unknown command") &&
               node->mode != RATEL__MODE_LUA &&
               rop->kind <= RATEL__ROP_UNSLICE) {
        node->mode = RATEL__MODE_UNKNOWN;
        node->code_loaded = 0;
        again = node;
    } else if (ratel__reply_starts(r, "READONLY")) {
        if (!ratel__route_park(e, rop, RATEL_EIO))
            return 0;
        freeReplyObject(r);
        return 1;
    }
    if (!again)
        return 0;
    freeReplyObject(r);
    if (again != rop->node || !rop->asking)
        rop->asking = again != rop->node && rop->asking;
    ratel__engine_enqueue(e, again, rop);
    return 1;
}

/* -------------------------------------------------------- discovery */

void ratel__engine_discover(ratel__engine_t *e, ratel__rop_t *rop)
{
    rop->rc = 0;
    rop->reply = NULL;
    rop->node = NULL;
    rop->where = WHERE_NONE;
    ratel__engine_live_add(e, rop);
    if (e->sh->url.cluster) {
        rop->where = WHERE_WAIT;
        ratel__queue_append(&e->wait_head, &e->wait_tail, rop);
        if (!map_start(e, MAP_NOW))
            wake_waiters(e, RATEL_EIO);
    } else if (failover_start(e, 1)) {
        rop->where = WHERE_WAIT;
        ratel__queue_append(&e->wait_head, &e->wait_tail, rop);
    } else {
        ratel__engine_finish(e, rop, 0, NULL);
    }
    ratel__engine_rearm(e);
}

size_t ratel__engine_serving(ratel__engine_t *e, ratel__node_t **serving,
                             size_t max)
{
    unsigned char owns[ENGINE_MAX_NODES];
    size_t n = 0;

    if (!e->sh->url.cluster) {
        if (max > 0 && e->nnodes > 0 && e->have_primary)
            serving[n++] = e->nodes[e->primary];
        return n;
    }
    map_owners(e, owns);
    for (size_t i = 0; i < e->nnodes && n < max; i++)
        if (owns[i])
            serving[n++] = e->nodes[i];
    return n;
}

int ratel__engine_health_prune(ratel__engine_t *e)
{
    ratel__node_t *serving[ENGINE_MAX_NODES];
    size_t n = ratel__engine_serving(e, serving, ENGINE_MAX_NODES);
    int changed = 0;

    for (size_t i = 0; i < e->nnodes; i++) {
        int serves = 0;
        for (size_t j = 0; j < n && !serves; j++)
            serves = serving[j] == e->nodes[i];
        if (!serves)
            changed |= ratel__engine_node_health_clear(e->nodes[i]);
    }
    return changed;
}
