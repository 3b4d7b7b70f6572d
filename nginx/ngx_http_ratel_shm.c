/*
 * ngx_http_ratel_shm.c - the shared-memory zone: every key's state blob in
 * an nginx shared zone, so that all workers decide on the same counts.
 *
 * The zone is nginx's slab allocator under its own mutex (limit_req's
 * model). Each key is a node in a red-black tree keyed by a hash of the
 * store key ("POLICY:value", compared in full on a tie) and in an LRU
 * queue, the most recently used at the head. A node holds its key and
 * the blob ratel_policy_acquire() reads and writes, and the time its state
 * is back to full (the decision's reset_after_ms): from then on the key
 * is idle and carries nothing worth keeping, so it is removed as the
 * queue's tail is swept. When the slab has no room for a node, the least
 * recently used keys are dropped (evictions), which can only make a
 * limit looser for keys nobody asked about for the longest time: the
 * zone stays within its SIZE whatever keys clients send.
 *
 * A group (one request's lines in this zone) is decided under one lock:
 * each member on a copy of its blob, written back only when every member
 * is admitted, so a refused request charges nothing and no worker sees
 * half a group. A group of one needs no copy when its blob is under its
 * policy's rules: the core writes it only when charging.
 *
 * A Redis zone (store=URL) keeps here what every worker shares of it: its
 * deny cache, and the keys its `local` failure policy decides while Redis
 * cannot (the same group decision as a zone's own).
 */
#include "ngx_http_ratel.h"

#include "ratel_internal.h"

/* Tail nodes looked at per decision for expired keys (limit_req: 2). */
#define SWEEP 3
/* Keys dropped, at most, to make room for one node. */
#define EVICT_MAX 64
/* Slots of the deny cache's hint (a power of two): see deny_hash(). */
#define DENY_HINT_SLOTS 1024

typedef struct {
    u_char name[NGX_HTTP_RATEL_NAME_MAX + 1];
    ngx_atomic_t outcomes[NGX_HTTP_RATEL_NOUTCOMES];
} counter_t;

struct ngx_http_ratel_shm_s {
    ngx_rbtree_t rbtree;
    ngx_rbtree_node_t sentinel;
    ngx_queue_t lru;
    uint64_t keys, evictions, expirations;
    ngx_atomic_t sources[RATEL_SOURCE_LOCAL + 1]; /* by decision source */
    /* Cached denials by their hash's slot (changed under the lock): a
       slot at 0 tells a key has none without taking the lock. */
    uint32_t deny_hint[DENY_HINT_SLOTS];
    ngx_uint_t ncounters;
    counter_t counters[NGX_HTTP_RATEL_COUNTERS_MAX];
};

typedef struct {
    ngx_rbtree_node_t node; /* first: the tree hands back this pointer */
    ngx_queue_t queue;
    int64_t idle_ms; /* from then on the state is back to full */
    uint32_t cap;    /* blob bytes the node has room for */
    uint32_t len;    /* blob bytes in use */
    uint16_t keylen; /* RATEL_MEMORY_KEY_MAX fits */
    uint16_t pinned; /* a member of the group being decided */
    u_char data[1];  /* the key, then the blob */
} node_t;

/* One member of a group while it is decided. */
typedef struct {
    node_t *node;   /* its node, or NULL for a key never seen */
    node_t *fresh;  /* a larger node made for the new blob */
    int superseded; /* a later member has the same key: it writes */
    size_t len;
    u_char state[RATEL_STATE_MAX];
} member_t;

/* A worker decides one group at a time: its members' copies live here. */
static member_t members[RATEL_GROUP_MAX];

static node_t *node_of(ngx_queue_t *q)
{
    return ngx_queue_data(q, node_t, queue);
}

static int key_cmp(const u_char *a, size_t alen, const u_char *b, size_t blen)
{
    return ngx_memn2cmp((u_char *)a, (u_char *)b, alen, blen);
}

/* The tree's insert: by hash, then by the key's bytes. */
static void insert_value(ngx_rbtree_node_t *temp, ngx_rbtree_node_t *node,
                         ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t **p;

    for (;;) {
        if (node->key != temp->key) {
            p = node->key < temp->key ? &temp->left : &temp->right;
        } else {
            node_t *a = (node_t *)node, *b = (node_t *)temp;
            p = key_cmp(a->data, a->keylen, b->data, b->keylen) < 0
                    ? &temp->left
                    : &temp->right;
        }
        if (*p == sentinel)
            break;
        temp = *p;
    }
    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}

static node_t *lookup(ngx_http_ratel_shm_t *sh, const u_char *key, size_t len,
                      uint32_t hash)
{
    ngx_rbtree_node_t *n = sh->rbtree.root, *sentinel = sh->rbtree.sentinel;

    while (n != sentinel) {
        node_t *e = (node_t *)n;
        int d;
        if (hash != n->key) {
            n = hash < n->key ? n->left : n->right;
            continue;
        }
        d = key_cmp(key, len, e->data, e->keylen);
        if (d == 0)
            return e;
        n = d < 0 ? n->left : n->right;
    }
    return NULL;
}

static void deny_unhint(ngx_http_ratel_zone_t *zone, node_t *e);

static void drop(ngx_http_ratel_zone_t *zone, node_t *e)
{
    deny_unhint(zone, e);
    ngx_queue_remove(&e->queue);
    ngx_rbtree_delete(&zone->sh->rbtree, &e->node);
    ngx_slab_free_locked(zone->shpool, e);
    zone->sh->keys--;
}

/* Removes idle keys from the queue's tail (least recently used first). */
static void sweep(ngx_http_ratel_zone_t *zone, int64_t now_ms)
{
    ngx_http_ratel_shm_t *sh = zone->sh;

    for (int i = 0; i < SWEEP && !ngx_queue_empty(&sh->lru); i++) {
        node_t *e = node_of(ngx_queue_last(&sh->lru));
        if (e->pinned || e->idle_ms > now_ms)
            return;
        drop(zone, e);
        sh->expirations++;
    }
}

/*
 * A node of `size` bytes from the slab; when it is full, the least
 * recently used keys not in the group at hand make room (an idle one
 * counts as expired, a live one as evicted).
 */
static node_t *alloc_node(ngx_http_ratel_zone_t *zone, size_t size,
                          int64_t now_ms)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    node_t *e = ngx_slab_alloc_locked(zone->shpool, size);
    ngx_queue_t *q = ngx_queue_last(&sh->lru);

    for (int i = 0; e == NULL && i < EVICT_MAX; i++) {
        node_t *victim;
        while (q != ngx_queue_sentinel(&sh->lru) && node_of(q)->pinned)
            q = ngx_queue_prev(q);
        if (q == ngx_queue_sentinel(&sh->lru))
            return NULL;
        victim = node_of(q);
        q = ngx_queue_prev(q);
        if (victim->idle_ms <= now_ms)
            sh->expirations++;
        else
            sh->evictions++;
        drop(zone, victim);
        e = ngx_slab_alloc_locked(zone->shpool, size);
    }
    return e;
}

/*
 * Bytes to ask of the slab for a key of `keylen` and a blob of `len`:
 * the slab rounds small sizes up to a power of two and large ones to
 * whole pages, so the node takes that room for its blob to grow into.
 */
static size_t node_size(size_t keylen, size_t len)
{
    size_t need = offsetof(node_t, data) + keylen + len, size = 8;

    if (need > ngx_pagesize / 2)
        return ngx_align(need, ngx_pagesize);
    while (size < need)
        size <<= 1;
    return size;
}

/* Makes a node for member `m`'s new blob when its own lacks room. */
static ngx_int_t make_room(ngx_http_ratel_zone_t *zone, member_t *m,
                           const ratel_batch_item_t *item, int64_t now_ms)
{
    size_t size;

    m->fresh = NULL;
    if (m->superseded || m->len == 0 || (m->node && m->node->cap >= m->len))
        return NGX_OK;
    size = node_size(item->keylen, m->len);
    m->fresh = alloc_node(zone, size, now_ms);
    if (m->fresh == NULL)
        return NGX_ERROR;
    ngx_memzero(m->fresh, offsetof(node_t, data));
    m->fresh->pinned = 1;
    m->fresh->keylen = (uint16_t)item->keylen;
    m->fresh->cap = (uint32_t)(size - offsetof(node_t, data) - item->keylen);
    ngx_memcpy(m->fresh->data, item->key, item->keylen);
    return NGX_OK;
}

/* Writes member `m`'s blob back: in its node, or a fresh one in its place. */
static void write_back(ngx_http_ratel_zone_t *zone, member_t *m,
                       const ratel_batch_item_t *item, int64_t now_ms)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    node_t *e = m->node;

    if (m->len == 0) {
        if (e)
            drop(zone, e);
        m->node = NULL;
        return;
    }
    if (m->fresh) {
        if (e)
            drop(zone, e);
        e = m->fresh;
        e->node.key = ngx_crc32_short((u_char *)item->key, item->keylen);
        ngx_rbtree_insert(&sh->rbtree, &e->node);
        ngx_queue_insert_head(&sh->lru, &e->queue);
        sh->keys++;
        m->node = e;
        m->fresh = NULL;
    }
    ngx_memcpy(e->data + e->keylen, m->state, m->len);
    e->len = (uint32_t)m->len;
    e->idle_ms = now_ms + item->decision.reset_after_ms;
}

/*
 * An earlier member with the same key (two lines of one policy whose keys
 * came out equal): the later one decides on the earlier one's result, and
 * only the later one writes.
 */
static member_t *same_key(ratel_batch_item_t *items, size_t i)
{
    for (size_t j = i; j-- > 0;)
        if (items[j].policy == items[i].policy &&
            items[j].keylen == items[i].keylen &&
            ngx_memcmp(items[j].key, items[i].key, items[i].keylen) == 0)
            return &members[j];
    return NULL;
}

/* Looks member i up, pins it and decides it on a copy of its blob. */
static int decide_member(ngx_http_ratel_zone_t *zone, ratel_batch_item_t *items,
                         size_t i, int64_t now_us)
{
    member_t *m = &members[i], *twin = same_key(items, i);
    ratel_batch_item_t *item = &items[i];
    uint32_t hash = ngx_crc32_short((u_char *)item->key, item->keylen);

    m->fresh = NULL;
    m->superseded = 0;
    if (twin) {
        twin->superseded = 1;
        m->node = twin->node;
        m->len = twin->len;
        ngx_memcpy(m->state, twin->state, m->len);
    } else {
        m->node = lookup(zone->sh, (u_char *)item->key, item->keylen, hash);
        m->len = 0;
    }
    if (m->node && !twin) {
        m->node->pinned = 1;
        m->len = m->node->len;
        ngx_memcpy(m->state, m->node->data + m->node->keylen, m->len);
        ngx_queue_remove(&m->node->queue);
        ngx_queue_insert_head(&zone->sh->lru, &m->node->queue);
    }
    /* The zone's blobs are written by nothing but the workers' core
       (decide, refund): the owned entry compares each record's rule and
       finds its end without checking every field again (a blob of
       another version of the state format is still parsed in full). */
    item->rc = ratel__policy_acquire_owned(item->policy, m->state, &m->len,
                                           sizeof m->state, now_us,
                                           &item->request, &item->decision);
    return item->rc == 0 && item->decision.allowed;
}

/*
 * A group of one on a key the zone holds under the policy's rules is
 * decided on its blob where it is (nothing is written unless charged, so
 * no copy is needed): NGX_OK. NGX_DECLINED, with nothing changed, when the
 * group needs the copies: a new key, a blob of other rules (the core
 * converts it) or one that must grow beyond its node.
 */
static ngx_int_t decide_alone(ngx_http_ratel_zone_t *zone,
                              ratel_batch_item_t *item, int64_t now_us)
{
    uint32_t hash = ngx_crc32_short((u_char *)item->key, item->keylen);
    node_t *e = lookup(zone->sh, (u_char *)item->key, item->keylen, hash);
    size_t len;
    int rc;

    if (e == NULL)
        return NGX_DECLINED;
    len = e->len;
    rc = ratel__policy_acquire_in_place(item->policy, e->data + e->keylen, &len,
                                        e->cap, now_us, &item->request,
                                        &item->decision);
    if (rc == 1 || rc == RATEL_ENOBUFS)
        return NGX_DECLINED;
    ngx_queue_remove(&e->queue);
    ngx_queue_insert_head(&zone->sh->lru, &e->queue);
    item->rc = rc;
    if (rc != 0 || !item->decision.allowed)
        return NGX_OK;
    if (len == 0) {
        drop(zone, e);
        return NGX_OK;
    }
    e->len = (uint32_t)len;
    e->idle_ms = now_us / 1000 + item->decision.reset_after_ms;
    return NGX_OK;
}

/* Every member has room for its new blob, or none is written. */
static ngx_int_t make_rooms(ngx_http_ratel_zone_t *zone,
                            ratel_batch_item_t *items, size_t n, int64_t now_ms)
{
    for (size_t i = 0; i < n; i++) {
        if (make_room(zone, &members[i], &items[i], now_ms) == NGX_OK)
            continue;
        for (size_t j = 0; j <= i; j++) {
            if (members[j].fresh)
                ngx_slab_free_locked(zone->shpool, members[j].fresh);
            members[j].fresh = NULL;
        }
        for (size_t j = 0; j < n; j++)
            items[j].rc = RATEL_ENOMEM;
        return NGX_ERROR;
    }
    return NGX_OK;
}

ngx_int_t ngx_http_ratel_shm_decide(ngx_http_ratel_zone_t *zone,
                                    ratel_batch_item_t *items, size_t n,
                                    int64_t now_us, ngx_log_t *log)
{
    int64_t now_ms = now_us / 1000;
    int admitted = 1;

    if (n > RATEL_GROUP_MAX)
        return NGX_ERROR;
    ngx_shmtx_lock(&zone->shpool->mutex);
    sweep(zone, now_ms);
    if (n == 1 && decide_alone(zone, items, now_us) == NGX_OK) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_OK;
    }
    for (size_t i = 0; i < n; i++)
        admitted &= decide_member(zone, items, i, now_us);
    if (admitted && make_rooms(zone, items, n, now_ms) == NGX_OK) {
        for (size_t i = 0; i < n; i++)
            if (!members[i].superseded)
                write_back(zone, &members[i], &items[i], now_ms);
    } else if (admitted) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratel: zone \"%V\" has no room for a key of %uz bytes "
                      "even after dropping its least recently used keys",
                      &zone->name, items[0].keylen);
    }
    for (size_t i = 0; i < n; i++)
        if (members[i].node)
            members[i].node->pinned = 0;
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return NGX_OK;
}

void ngx_http_ratel_shm_refund(ngx_http_ratel_zone_t *zone,
                               ratel_batch_item_t *items, size_t n,
                               int64_t now_us)
{
    int64_t now_ms = now_us / 1000;

    ngx_shmtx_lock(&zone->shpool->mutex);
    for (size_t i = 0; i < n; i++) {
        uint32_t hash =
            ngx_crc32_short((u_char *)items[i].key, items[i].keylen);
        node_t *e =
            lookup(zone->sh, (u_char *)items[i].key, items[i].keylen, hash);
        ratel_decision_t d;
        size_t len;
        if (e == NULL || items[i].rc != 0)
            continue;
        len = e->len;
        /* A refund never lengthens a blob: it is done in place. */
        if (ratel_policy_refund(items[i].policy, e->data + e->keylen, &len,
                                e->cap, now_us, items[i].request.cost, &d) != 0)
            continue;
        if (len == 0) {
            drop(zone, e);
            continue;
        }
        e->len = (uint32_t)len;
        e->idle_ms = now_ms + d.reset_after_ms;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

/* ------------------------------------------------------ the deny cache */

/*
 * A cached denial is a node of its own whose key is DENY_MARK and the
 * store key: no store key starts with that byte (policy names are
 * [A-Za-z0-9_.-]), so the tree, the LRU queue, eviction and expiry serve
 * both kinds of node. Its blob is a deny_t and its idle time the entry's
 * end, from which the sweep removes it.
 */
#define DENY_MARK '\x01'

/* A cached denial's tree key (a worker does one thing at a time). */
static u_char deny_key[1 + RATEL_MEMORY_KEY_MAX];

typedef struct {
    uint64_t fingerprint; /* the policy's rules (ratel__policy_fingerprint) */
    uint64_t cost;        /* it answers requests of at least this cost */
    int64_t until_ms;     /* it answers until then */
    int64_t retry_at_ms, reset_at_ms, rule_reset_at_ms;
    int64_t limit, remaining;
    int32_t rule;
} deny_t;

/*
 * The tree hash of `item`'s entry: the crc32 of DENY_MARK and its key. Its
 * low bits choose the entry's slot in the zone's hint, which counts the
 * entries of each slot: a request whose slot counts none skips the lock
 * and the tree (most requests of a zone whose denials are few). The hint
 * is read without the lock: a count seen stale at 0 while another worker
 * records a denial only sends the request to Redis, as without a cache.
 */
static uint32_t deny_hash(const ratel_batch_item_t *item)
{
    u_char mark = DENY_MARK;
    uint32_t crc;

    ngx_crc32_init(crc);
    ngx_crc32_update(&crc, &mark, 1);
    ngx_crc32_update(&crc, (u_char *)item->key, item->keylen);
    ngx_crc32_final(crc);
    return crc;
}

static ngx_uint_t deny_hinted(ngx_http_ratel_zone_t *zone, uint32_t hash)
{
    volatile uint32_t *hint = zone->sh->deny_hint;

    return hint[hash & (DENY_HINT_SLOTS - 1)] != 0;
}

/* A cached denial's node leaves the tree. */
static void deny_unhint(ngx_http_ratel_zone_t *zone, node_t *e)
{
    if (e->keylen > 0 && e->data[0] == DENY_MARK)
        zone->sh->deny_hint[e->node.key & (DENY_HINT_SLOTS - 1)]--;
}

/* The entry of `item`'s key (`hash`: deny_hash()); `key`
   (1 + RATEL_MEMORY_KEY_MAX bytes) gets its tree key. */
static node_t *deny_lookup(ngx_http_ratel_zone_t *zone,
                           const ratel_batch_item_t *item, u_char *key,
                           size_t *len, uint32_t hash)
{
    key[0] = DENY_MARK;
    ngx_memcpy(key + 1, item->key, item->keylen);
    *len = item->keylen + 1;
    return lookup(zone->sh, key, *len, hash);
}

/* The entry's denial, counted down to now (deny_cache.h's way). */
static void deny_decision(const deny_t *d, int64_t now_ms,
                          ratel_decision_t *out)
{
    ngx_memzero(out, sizeof *out);
    out->rule = d->rule;
    out->limit = d->limit;
    out->remaining = d->remaining;
    out->retry_after_ms = ngx_max(d->retry_at_ms - now_ms, 1);
    out->reset_after_ms = ngx_max(d->reset_at_ms - now_ms, out->retry_after_ms);
    out->rule_reset_ms = ngx_max(d->rule_reset_at_ms - now_ms, 0);
    out->source = RATEL_SOURCE_CACHE;
}

ngx_int_t ngx_http_ratel_shm_cached(ngx_http_ratel_zone_t *zone,
                                    ratel_batch_item_t *items, size_t n,
                                    int64_t now_us)
{
    u_char *key = deny_key;
    uint32_t hashes[RATEL_GROUP_MAX];
    u_char hit[RATEL_GROUP_MAX];
    int64_t now_ms = now_us / 1000;
    ngx_uint_t hits = 0, hinted = 0;

    if (n > RATEL_GROUP_MAX)
        return NGX_DECLINED;
    for (size_t i = 0; i < n; i++) {
        hashes[i] = deny_hash(&items[i]);
        hinted |= deny_hinted(zone, hashes[i]);
    }
    if (!hinted)
        return NGX_DECLINED;
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        node_t *e = deny_lookup(zone, &items[i], key, &len, hashes[i]);
        uint64_t fp = ngx_http_ratel_policy_of(items[i].policy)->fingerprint;
        deny_t d;
        hit[i] = 0;
        if (e == NULL || e->len != sizeof d)
            continue;
        ngx_memcpy(&d, e->data + e->keylen, sizeof d);
        if (d.until_ms <= now_ms || d.fingerprint != fp ||
            items[i].request.cost < d.cost)
            continue;
        deny_decision(&d, now_ms, &items[i].decision);
        items[i].rc = 0;
        hit[i] = 1;
        hits++;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
    if (hits == 0)
        return NGX_DECLINED;
    for (size_t i = 0; i < n; i++)
        if (!hit[i])
            items[i].rc = NGX_HTTP_RATEL_UNDECIDED;
    return NGX_OK;
}

/* Records one denial (the zone's lock held). */
static void remember(ngx_http_ratel_zone_t *zone, ratel_batch_item_t *it,
                     int64_t now_ms, int64_t max_ms)
{
    u_char *key = deny_key;
    ratel_decision_t *dec = &it->decision;
    size_t len, size;
    uint32_t hash = deny_hash(it);
    node_t *e = deny_lookup(zone, it, key, &len, hash);
    deny_t d = {0};

    if (e == NULL) {
        size = node_size(len, sizeof d);
        e = alloc_node(zone, size, now_ms);
        if (e == NULL)
            return; /* no room: Redis is asked next time */
        ngx_memzero(e, offsetof(node_t, data));
        e->keylen = (uint16_t)len;
        e->cap = (uint32_t)(size - offsetof(node_t, data) - len);
        ngx_memcpy(e->data, key, len);
        e->node.key = hash;
        ngx_rbtree_insert(&zone->sh->rbtree, &e->node);
        zone->sh->keys++;
        zone->sh->deny_hint[hash & (DENY_HINT_SLOTS - 1)]++;
    } else {
        ngx_queue_remove(&e->queue);
    }
    ngx_queue_insert_head(&zone->sh->lru, &e->queue);
    d.fingerprint = ngx_http_ratel_policy_of(it->policy)->fingerprint;
    d.cost = it->request.cost;
    d.retry_at_ms = now_ms + dec->retry_after_ms;
    d.reset_at_ms = now_ms + dec->reset_after_ms;
    d.rule_reset_at_ms = now_ms + dec->rule_reset_ms;
    d.until_ms = now_ms + ngx_min(dec->retry_after_ms, max_ms);
    d.limit = dec->limit;
    d.remaining = dec->remaining;
    d.rule = dec->rule;
    ngx_memcpy(e->data + e->keylen, &d, sizeof d);
    e->len = sizeof d;
    e->idle_ms = d.until_ms;
}

/* Whether Redis denied `it` until a time a clock can tell. */
static int cacheable(const ratel_batch_item_t *it)
{
    return it->rc == 0 && !it->decision.allowed &&
           it->decision.source == RATEL_SOURCE_STORE &&
           it->decision.retry_after_ms > 0 &&
           !ratel_policy_has_leases(it->policy);
}

void ngx_http_ratel_shm_remember(ngx_http_ratel_zone_t *zone,
                                 ratel_batch_item_t *items, size_t n,
                                 int64_t now_us, int64_t max_ms)
{
    int64_t now_ms = now_us / 1000;
    size_t i = 0;

    while (i < n && !cacheable(&items[i]))
        i++;
    if (i == n)
        return; /* nothing to record: the lock is not taken */
    ngx_shmtx_lock(&zone->shpool->mutex);
    /* A Redis zone decides nothing here while Redis answers: its ended
       entries are swept as it records. */
    sweep(zone, now_ms);
    for (; i < n; i++)
        if (cacheable(&items[i]))
            remember(zone, &items[i], now_ms, max_ms);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

void ngx_http_ratel_shm_forget(ngx_http_ratel_zone_t *zone,
                               ratel_batch_item_t *item)
{
    u_char *key = deny_key;
    size_t len;
    uint32_t hash = deny_hash(item);
    node_t *e;

    if (!deny_hinted(zone, hash))
        return; /* no entry: the lock is not taken */
    ngx_shmtx_lock(&zone->shpool->mutex);
    e = deny_lookup(zone, item, key, &len, hash);
    if (e)
        drop(zone, e);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

void ngx_http_ratel_shm_count(ngx_http_ratel_zone_t *zone, ngx_uint_t count,
                              ngx_uint_t outcome)
{
    ngx_uint_t slot = zone->slots[count];

    if (slot < NGX_HTTP_RATEL_COUNTERS_MAX)
        (void)ngx_atomic_fetch_add(&zone->sh->counters[slot].outcomes[outcome],
                                   1);
}

void ngx_http_ratel_shm_count_sources(ngx_http_ratel_zone_t *zone,
                                      const ratel_batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int source = items[i].decision.source;
        if (items[i].rc == 0 && source > RATEL_SOURCE_STORE &&
            source <= RATEL_SOURCE_LOCAL)
            (void)ngx_atomic_fetch_add(&zone->sh->sources[source], 1);
    }
}

void ngx_http_ratel_shm_read(ngx_http_ratel_zone_t *zone,
                             ngx_http_ratel_shm_stats_t *stats,
                             ngx_http_ratel_count_fn fn, void *data)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    ngx_slab_pool_t *pool = zone->shpool;
    uint64_t counts[NGX_HTTP_RATEL_NOUTCOMES];

    ngx_shmtx_lock(&pool->mutex);
    stats->keys = sh->keys;
    stats->evictions = sh->evictions;
    stats->expirations = sh->expirations;
    stats->cache_hits = sh->sources[RATEL_SOURCE_CACHE];
    stats->fallback_open = sh->sources[RATEL_SOURCE_OPEN];
    stats->fallback_closed = sh->sources[RATEL_SOURCE_CLOSED];
    stats->fallback_local = sh->sources[RATEL_SOURCE_LOCAL];
    stats->errors =
        stats->fallback_open + stats->fallback_closed + stats->fallback_local;
    stats->max_bytes = zone->shm_zone->shm.size;
    stats->bytes = stats->max_bytes - (uint64_t)pool->pfree * ngx_pagesize;
    for (ngx_uint_t i = 0; i < sh->ncounters; i++) {
        for (int o = 0; o < NGX_HTTP_RATEL_NOUTCOMES; o++)
            counts[o] = sh->counters[i].outcomes[o];
        fn(data, sh->counters[i].name, counts);
    }
    ngx_shmtx_unlock(&pool->mutex);
}

/*
 * Gives each policy the zone's lines use its slot in the shared table of
 * counters, keeping the slot (and its counts) of a name already there.
 */
static void assign_slots(ngx_http_ratel_zone_t *zone)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    ngx_str_t *names = zone->counts.elts;

    ngx_shmtx_lock(&zone->shpool->mutex);
    for (ngx_uint_t i = 0; i < zone->counts.nelts; i++) {
        ngx_uint_t s;
        for (s = 0; s < sh->ncounters; s++)
            if (ngx_strcmp(sh->counters[s].name, names[i].data) == 0)
                break;
        if (s == sh->ncounters && s < NGX_HTTP_RATEL_COUNTERS_MAX) {
            ngx_cpystrn(sh->counters[s].name, names[i].data,
                        sizeof sh->counters[s].name);
            sh->ncounters++;
        }
        zone->slots[i] = s;
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

ngx_int_t ngx_http_ratel_shm_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_ratel_zone_t *zone = shm_zone->data, *old = data;
    ngx_slab_pool_t *pool = (ngx_slab_pool_t *)shm_zone->shm.addr;
    ngx_http_ratel_shm_t *sh;
    size_t len;

    zone->shpool = pool;
    if (old) {
        /* A reload with the zone's name and size unchanged: nginx kept
           its memory, and with it every key's count. */
        zone->sh = old->sh;
    } else if (shm_zone->shm.exists) {
        zone->sh = pool->data;
    } else {
        sh = ngx_slab_alloc(pool, sizeof *sh);
        if (sh == NULL)
            return NGX_ERROR;
        ngx_memzero(sh, sizeof *sh);
        ngx_rbtree_init(&sh->rbtree, &sh->sentinel, insert_value);
        ngx_queue_init(&sh->lru);
        pool->data = sh;
        zone->sh = sh;
        /* Eviction answers a full slab: its "no memory" is not news. */
        pool->log_nomem = 0;
        len = sizeof(" in ratel_zone \"\"") + shm_zone->shm.name.len;
        pool->log_ctx = ngx_slab_alloc(pool, len);
        if (pool->log_ctx == NULL)
            return NGX_ERROR;
        ngx_sprintf(pool->log_ctx, " in ratel_zone \"%V\"%Z",
                    &shm_zone->shm.name);
    }
    assign_slots(zone);
    return NGX_OK;
}
