/*
 * ngx_http_ratel_shm.c - the shared-memory zone: every key's state blob in
 * an nginx shared zone, so that all workers decide on the same counts.
 *
 * The zone is nginx's shared memory under its own mutex (limit_req's
 * model). Each key is a node in a red-black tree keyed by a hash of the
 * store key ("POLICY:value", compared in full on a tie) and in an LRU
 * queue, the most recently used at the head. A node holds its key, the
 * blob ratel_policy_acquire() reads and writes, and the time its state is
 * back to full (the decision's reset_after_ms): from then on the key is
 * idle and carries nothing worth keeping, so it is removed as the queue's
 * tail is swept.
 *
 * Memory: when the zone is made, its free pages become one array of
 * chunks of CHUNK bytes, all alike (chunks_init()). A node takes a block
 * of contiguous chunks when one of its size is free (its key and blob
 * contiguous: a group of one is decided on its blob in place); else one
 * chunk and a chain of single chunks, its bytes copied to be decided. A
 * blob that grows (a sliding rule's log) moves to a larger block when one
 * is free, else takes more chunks at its chain's end. Freed chunks merge
 * with free neighbours (boundary tags), so the chunks of keys dropped
 * together become one block again. Every chunk fits every node: dropping
 * any key frees room that any other key can use. (nginx's slab
 * allocator, which the zone used before, keeps pages per size class:
 * dropping keys of one size freed nothing for a key of another, and a
 * full zone answered 500.)
 *
 * Eviction, bounded: a node that needs k chunks more than are free drops
 * the least recently used keys, not those of the request at hand, until
 * they are. Each key dropped frees at least one chunk, so at most k keys
 * go: 1 for a node whose key and blob take up to FIRST_ROOM (168) bytes,
 * at most 72 for the largest (a key of 1,089 bytes and a blob of eight
 * sliding rules at their cap, 16,580 bytes), and for a request at most
 * the sum over its lines; finding a block or a chunk is O(1). A key
 * dropped can only make a limit looser, for a key nobody asked about for
 * the longest time: the zone stays within its SIZE whatever keys clients
 * send, and a request never fails for want of room. Only a request whose
 * own keys need more chunks than the whole zone holds (the smallest
 * zone, 64k, holds 157; one key takes at most 72: it takes a group of
 * several lines of long keys under many sliding rules) cannot be placed:
 * it is refused (the zone's refusal, charged nothing, Retry-After 1 s)
 * and logged (refuse_group()).
 *
 * A group (one request's lines in this zone) is decided under one lock:
 * each member on a copy of its blob, written back only when every member
 * is admitted and has its room, so a refused request charges nothing and
 * no worker sees half a group. A group of one whose blob is under its
 * policy's rules is decided where it is when its node is one block (the
 * core writes it only when charging), else on one copy.
 *
 * A Redis zone (store=URL) keeps here what every worker shares of it: its
 * deny cache, the keys its `local` failure policy decides while Redis
 * cannot (the same group decision as a zone's own), and the slices of its
 * leased keys: a table of an eighth of the zone (lease.h), taken before
 * the chunks, that every worker's store spends from.
 */
#include "ngx_http_ratel.h"

#include "ratel_internal.h"

/* Tail nodes looked at per decision for expired keys (limit_req: 2). */
#define SWEEP 3
/* Bytes of a chunk: a node of a short key under one or two rules takes
   one (as it took a 256-byte slot of nginx's slab before). */
#define CHUNK 256
/* Slots of the deny cache's hint (a power of two): see deny_hash(). */
#define DENY_HINT_SLOTS 1024
/* What a group the zone cannot hold is told: retry after 1 s. */
#define REFUSE_RETRY_MS 1000
/* Bins of free blocks: sizes [2^b, 2^(b+1)) chunks in bin b. */
#define BINS 32
/* No chunk: the end of a bin's list. */
#define NONE UINT32_MAX
/* Blocks of a bin looked at for one that fits before a larger bin's. */
#define FIT_TRIES 4

typedef struct chunk_s chunk_t;

/* A chunk of a node's chain (after its first block). */
struct chunk_s {
    chunk_t *next;
    u_char data[CHUNK - sizeof(chunk_t *)];
};

typedef struct {
    u_char name[NGX_HTTP_RATEL_NAME_MAX + 1];
    ngx_atomic_t outcomes[NGX_HTTP_RATEL_NOUTCOMES];
} counter_t;

/* A counted policy of a Redis zone as the latest configuration leases it
   (fp its rules' fingerprint, 0: not leased): the settings it wrote, the
   counters every worker's store adds to, kept across reloads. */
typedef struct {
    uint64_t fp;
    ratel_lease_t lease;
} leased_t;

struct ngx_http_ratel_shm_s {
    ngx_rbtree_t rbtree;
    ngx_rbtree_node_t sentinel;
    ngx_queue_t lru;
    u_char *base;            /* chunk 0: the chunks are one array */
    uint32_t *tags;          /* per chunk: see block_tag() */
    uint32_t bins[BINS];     /* free blocks by bin_of(size), linked */
    uint64_t binmap;         /* the bins that hold a block */
    uint64_t nfree, nchunks; /* chunks free; in the zone */
    uint64_t keys, evictions, expirations;
    ngx_atomic_t sources[RATEL_SOURCE_LOCAL + 1]; /* by decision source */
    /* Cached denials by their hash's slot (changed under the lock): a
       slot at 0 tells a key has none without taking the lock. */
    uint32_t deny_hint[DENY_HINT_SLOTS];
    ngx_uint_t ncounters;
    counter_t counters[NGX_HTTP_RATEL_COUNTERS_MAX];
    /* A Redis zone's leased keys (lease.h), every worker's, and its
       counted policies' leases (by their counters' slots); NULL in a zone
       without store=. The latest configuration that made or took it. */
    ratel__lease_table_t *leases;
    leased_t *leased;
    ngx_uint_t generation;
};

/* A node: its first chunk. */
typedef struct {
    ngx_rbtree_node_t node; /* first: the tree hands back this pointer */
    ngx_queue_t queue;
    chunk_t *more;   /* its other chunks, in order; NULL: none */
    int64_t idle_ms; /* from then on the state is back to full */
    uint32_t cap;    /* blob bytes its chunks have room for */
    uint32_t len;    /* blob bytes in use */
    uint32_t first;  /* chunks of its first block, contiguous */
    uint32_t chunks; /* chunks it holds: its first block and its chain */
    uint16_t keylen; /* RATEL_MEMORY_KEY_MAX fits */
    uint16_t pinned; /* a member of the group being decided */
    u_char data[1];  /* the key, then the blob, on through `more` */
} node_t;

/* A node's bytes in a first block of one chunk, and in each chunk of its
   chain. */
#define FIRST_ROOM (CHUNK - offsetof(node_t, data))
#define MORE_ROOM (CHUNK - offsetof(chunk_t, data))

_Static_assert(offsetof(node_t, data) <= CHUNK / 2,
               "a node's header leaves room in its first chunk");

/* One member of a group while it is decided. */
typedef struct {
    node_t *node;    /* its node, or NULL for a key never seen */
    node_t *fresh;   /* the node made for a key never seen */
    chunk_t *extra;  /* chunks its node's blob grows into */
    uint32_t nextra; /* how many */
    int superseded;  /* a later member has the same key: it writes */
    size_t len;
    u_char state[RATEL_STATE_MAX];
} member_t;

/* A worker decides one group at a time: its members' copies live here. */
static member_t members[RATEL_GROUP_MAX];

/* A copy of a chained node's blob, decided alone or refunded. */
static u_char scratch[RATEL_STATE_MAX];

static node_t *node_of(ngx_queue_t *q)
{
    return ngx_queue_data(q, node_t, queue);
}

/* ----------------------------------------------------------- chunks */

/*
 * The chunks are one array, handed out in blocks of contiguous chunks by
 * a segregated fit with boundary tags: a free block is in the bin of its
 * size and merges with free neighbours when set free, so that the chunks
 * of keys dropped together become one block again. A node takes one
 * block when one of its size is free (its bytes contiguous: decided in
 * place), else one chunk and a chain of single chunks, which any free
 * chunk can be: so any `k` free chunks always make a node of k chunks.
 */

/* A free block's links, in its first chunk. */
typedef struct {
    uint32_t next, prev;
} free_t;

static u_char *chunk_at(ngx_http_ratel_shm_t *sh, uint32_t i)
{
    return sh->base + (size_t)i * CHUNK;
}

static uint32_t chunk_index(ngx_http_ratel_shm_t *sh, const void *p)
{
    return (uint32_t)(((const u_char *)p - sh->base) / CHUNK);
}

static free_t *free_at(ngx_http_ratel_shm_t *sh, uint32_t i)
{
    return (free_t *)chunk_at(sh, i);
}

static ngx_uint_t bin_of(uint32_t size)
{
    return 31 - (ngx_uint_t)__builtin_clz(size);
}

/* A block's first and last chunks tell its size and whether it is free:
   a block set free reads its neighbours' tags to merge with them. */
static void block_tag(ngx_http_ratel_shm_t *sh, uint32_t i, uint32_t size,
                      uint32_t free)
{
    sh->tags[i] = sh->tags[i + size - 1] = size << 1 | free;
}

static void block_link(ngx_http_ratel_shm_t *sh, uint32_t i, uint32_t size)
{
    ngx_uint_t b = bin_of(size);
    free_t *f = free_at(sh, i);

    block_tag(sh, i, size, 1);
    f->prev = NONE;
    f->next = sh->bins[b];
    if (f->next != NONE)
        free_at(sh, f->next)->prev = i;
    sh->bins[b] = i;
    sh->binmap |= (uint64_t)1 << b;
}

static void block_unlink(ngx_http_ratel_shm_t *sh, uint32_t i, uint32_t size)
{
    ngx_uint_t b = bin_of(size);
    free_t *f = free_at(sh, i);

    if (f->prev != NONE)
        free_at(sh, f->prev)->next = f->next;
    else
        sh->bins[b] = f->next;
    if (f->next != NONE)
        free_at(sh, f->next)->prev = f->prev;
    if (sh->bins[b] == NONE)
        sh->binmap &= ~((uint64_t)1 << b);
}

/* Sets the block of `size` chunks at i free, merged with free neighbours. */
static void chunks_release(ngx_http_ratel_shm_t *sh, uint32_t i, uint32_t size)
{
    uint32_t s;

    sh->nfree += size;
    if (i > 0 && (sh->tags[i - 1] & 1)) {
        s = sh->tags[i - 1] >> 1;
        i -= s;
        block_unlink(sh, i, s);
        size += s;
    }
    if (i + size < sh->nchunks && (sh->tags[i + size] & 1)) {
        s = sh->tags[i + size] >> 1;
        block_unlink(sh, i + size, s);
        size += s;
    }
    block_link(sh, i, size);
}

/*
 * A block of `k` contiguous chunks, or NONE: the first of the few blocks
 * of k's bin that fits, else one of the smallest larger bin (any fits),
 * its rest set free. O(1).
 */
static uint32_t chunks_alloc(ngx_http_ratel_shm_t *sh, uint32_t k)
{
    ngx_uint_t b = bin_of(k);
    uint64_t above = sh->binmap & ~(((uint64_t)2 << b) - 1);
    uint32_t i = sh->bins[b], size;

    for (int tries = 0; i != NONE && tries < FIT_TRIES; tries++) {
        if (sh->tags[i] >> 1 >= k)
            break;
        i = free_at(sh, i)->next;
    }
    if (i == NONE || sh->tags[i] >> 1 < k) {
        if (above == 0)
            return NONE;
        i = sh->bins[__builtin_ctzll(above)];
    }
    size = sh->tags[i] >> 1;
    block_unlink(sh, i, size);
    if (size > k)
        block_link(sh, i + k, size - k);
    block_tag(sh, i, k, 0);
    sh->nfree -= k;
    return i;
}

/* Chunks a node needs for `bytes` of key and blob in a chain (a first
   block of one chunk): the most it can need. */
static uint32_t chunks_for(size_t bytes)
{
    if (bytes <= FIRST_ROOM)
        return 1;
    return 1 + (uint32_t)((bytes - FIRST_ROOM + MORE_ROOM - 1) / MORE_ROOM);
}

/* Chunks of a first block that holds `bytes` of key and blob alone. */
static uint32_t block_for(size_t bytes)
{
    return (uint32_t)((offsetof(node_t, data) + bytes + CHUNK - 1) / CHUNK);
}

/* Bytes of key and blob node e's chunks hold. */
static size_t room_of(const node_t *e)
{
    return (size_t)e->first * CHUNK - offsetof(node_t, data) +
           (size_t)(e->chunks - e->first) * MORE_ROOM;
}

/* Sets a chain of single chunks (NULL-ended) free. */
static void chunks_free(ngx_http_ratel_shm_t *sh, chunk_t *c)
{
    while (c) {
        chunk_t *next = c->next;
        chunks_release(sh, chunk_index(sh, c), 1);
        c = next;
    }
}

/* A chain of `n` single chunks; the free blocks hold n chunks or more. */
static chunk_t *chunks_take(ngx_http_ratel_shm_t *sh, uint32_t n)
{
    chunk_t *first = NULL, **tail = &first;

    for (uint32_t k = 0; k < n; k++) {
        chunk_t *c = (chunk_t *)chunk_at(sh, chunks_alloc(sh, 1));
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    return first;
}

/*
 * A place in a node's bytes (its key, then its blob), which run from its
 * first chunk on through its chain; or in a plain buffer (next NULL).
 */
typedef struct {
    u_char *p;
    size_t room; /* bytes from p to the end of its chunk */
    chunk_t *next;
} span_t;

static void span_fix(span_t *s)
{
    if (s->room == 0 && s->next) {
        s->p = s->next->data;
        s->room = MORE_ROOM;
        s->next = s->next->next;
    }
}

static void span_skip(span_t *s, size_t n)
{
    while (n > 0) {
        size_t k;
        span_fix(s);
        k = ngx_min(n, s->room);
        s->p += k;
        s->room -= k;
        n -= k;
    }
}

static span_t span_at(const node_t *e, size_t off)
{
    span_t s = {(u_char *)e->data,
                (size_t)e->first * CHUNK - offsetof(node_t, data), e->more};

    span_skip(&s, off);
    return s;
}

/* Copies `n` bytes from the span to buf, or from buf into it (`in`). */
static void span_copy(span_t s, u_char *buf, size_t n, int in)
{
    while (n > 0) {
        size_t k;
        span_fix(&s);
        k = ngx_min(n, s.room);
        if (in)
            ngx_memcpy(s.p, buf, k);
        else
            ngx_memcpy(buf, s.p, k);
        buf += k;
        s.p += k;
        s.room -= k;
        n -= k;
    }
}

/* Orders two keys of alen and blen bytes as ngx_memn2cmp() does. */
static int span_cmp(span_t a, size_t alen, span_t b, size_t blen)
{
    size_t n = ngx_min(alen, blen);

    while (n > 0) {
        size_t k;
        int d;
        span_fix(&a);
        span_fix(&b);
        k = ngx_min(n, ngx_min(a.room, b.room));
        d = ngx_memcmp(a.p, b.p, k);
        if (d != 0)
            return d;
        span_skip(&a, k);
        span_skip(&b, k);
        n -= k;
    }
    return alen == blen ? 0 : alen < blen ? -1 : 1;
}

/* Orders `key` against node e's key. */
static int key_cmp(const u_char *key, size_t len, const node_t *e)
{
    span_t k = {(u_char *)key, len, NULL};

    if (e->keylen <= FIRST_ROOM) /* the key is all in its first block */
        return ngx_memn2cmp((u_char *)key, (u_char *)e->data, len, e->keylen);
    return span_cmp(k, len, span_at(e, 0), e->keylen);
}

/*
 * A node for `key` with room for `bytes` of key and blob, in neither the
 * tree nor the queue yet: in block i of block_for(bytes) chunks, or when
 * i is NONE (no such block was free) in a chunk and a chain, which the
 * free blocks then hold: chunks_for(bytes) chunks or more.
 */
static node_t *node_new(ngx_http_ratel_shm_t *sh, const u_char *key,
                        size_t keylen, size_t bytes, uint32_t i)
{
    uint32_t n = block_for(bytes);
    chunk_t *more = NULL;
    node_t *e;

    if (i == NONE) {
        i = chunks_alloc(sh, 1);
        n = chunks_for(bytes);
        more = chunks_take(sh, n - 1);
    }
    e = (node_t *)chunk_at(sh, i);
    ngx_memzero(e, offsetof(node_t, data));
    e->more = more;
    e->first = more ? 1 : n;
    e->chunks = n;
    e->keylen = (uint16_t)keylen;
    e->cap = (uint32_t)(room_of(e) - keylen);
    span_copy(span_at(e, 0), (u_char *)key, keylen, 1);
    return e;
}

/* Sets node e's chunks free. */
static void node_release(ngx_http_ratel_shm_t *sh, node_t *e)
{
    chunk_t *more = e->more;

    chunks_release(sh, chunk_index(sh, e), e->first);
    chunks_free(sh, more);
}

/* Node e's chain grows by `extra`, `n` chunks. */
static void node_grow(node_t *e, chunk_t *extra, uint32_t n)
{
    chunk_t **tail = &e->more;

    while (*tail)
        tail = &(*tail)->next;
    *tail = extra;
    e->chunks += n;
    e->cap += (uint32_t)(n * MORE_ROOM);
}

/* Chunks of node e's chain its first block leaves to hold `bytes`. */
static uint32_t chain_for(const node_t *e, size_t bytes)
{
    size_t first = (size_t)e->first * CHUNK - offsetof(node_t, data);

    if (bytes <= first)
        return 0;
    return (uint32_t)((bytes - first + MORE_ROOM - 1) / MORE_ROOM);
}

/* Writes node e's blob (`len` bytes), its chain's surplus set free. */
static void node_store(ngx_http_ratel_shm_t *sh, node_t *e, const u_char *state,
                       size_t len)
{
    uint32_t need = chain_for(e, e->keylen + len);

    if (need < e->chunks - e->first) {
        chunk_t **keep = &e->more;
        for (uint32_t i = 0; i < need; i++)
            keep = &(*keep)->next;
        chunks_free(sh, *keep);
        *keep = NULL;
        e->chunks = e->first + need;
        e->cap = (uint32_t)(room_of(e) - e->keylen);
    }
    span_copy(span_at(e, e->keylen), (u_char *)state, len, 1);
    e->len = (uint32_t)len;
}

/* ------------------------------------------------------ tree and queue */

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
            p = span_cmp(span_at(a, 0), a->keylen, span_at(b, 0), b->keylen) < 0
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
        d = key_cmp(key, len, e);
        if (d == 0)
            return e;
        n = d < 0 ? n->left : n->right;
    }
    return NULL;
}

/* Node e enters the tree (its hash `hash`) and the queue's head. */
static void insert(ngx_http_ratel_shm_t *sh, node_t *e, uint32_t hash)
{
    e->node.key = hash;
    ngx_rbtree_insert(&sh->rbtree, &e->node);
    ngx_queue_insert_head(&sh->lru, &e->queue);
    sh->keys++;
}

static void deny_unhint(ngx_http_ratel_zone_t *zone, node_t *e);

/* Node e leaves the tree and the queue; its chunks are free. */
static void drop(ngx_http_ratel_zone_t *zone, node_t *e)
{
    deny_unhint(zone, e);
    ngx_queue_remove(&e->queue);
    ngx_rbtree_delete(&zone->sh->rbtree, &e->node);
    zone->sh->keys--;
    node_release(zone->sh, e);
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
 * Until the free list holds `n` chunks, the least recently used keys not
 * in the group at hand are dropped (an idle one counts as expired, a live
 * one as evicted). Each frees at least one chunk: at most n go. NGX_ERROR
 * when none but the group's are left.
 */
static ngx_int_t chunks_reserve(ngx_http_ratel_zone_t *zone, uint32_t n,
                                int64_t now_ms)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    ngx_queue_t *q = ngx_queue_last(&sh->lru);

    while (sh->nfree < n) {
        node_t *victim;
        while (q != ngx_queue_sentinel(&sh->lru) && node_of(q)->pinned)
            q = ngx_queue_prev(q);
        if (q == ngx_queue_sentinel(&sh->lru))
            return NGX_ERROR;
        victim = node_of(q);
        q = ngx_queue_prev(q);
        if (victim->idle_ms <= now_ms)
            sh->expirations++;
        else
            sh->evictions++;
        drop(zone, victim);
    }
    return NGX_OK;
}

/* ------------------------------------------------------------ decisions */

/*
 * Room for member `m`'s new blob: its node's chunks; a fresh node, for a
 * key never seen or one that outgrows its node while a block of its new
 * size is free (its bytes stay contiguous); else more chunks at its
 * chain's end (m->extra), evicting for them as for a fresh node.
 */
static ngx_int_t make_room(ngx_http_ratel_zone_t *zone, member_t *m,
                           const ratel_batch_item_t *item, int64_t now_ms)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    size_t bytes = item->keylen + m->len;
    node_t *e = m->node;
    uint32_t i, need;

    m->fresh = NULL;
    m->extra = NULL;
    m->nextra = 0;
    if (m->superseded || m->len == 0 || (e && bytes <= room_of(e)))
        return NGX_OK;
    if (e == NULL && chunks_reserve(zone, chunks_for(bytes), now_ms) != NGX_OK)
        return NGX_ERROR;
    i = chunks_alloc(sh, block_for(bytes));
    if (e && i == NONE) {
        need = chain_for(e, bytes) - (e->chunks - e->first);
        if (chunks_reserve(zone, need, now_ms) != NGX_OK)
            return NGX_ERROR;
        m->nextra = need;
        m->extra = chunks_take(sh, need);
        return NGX_OK;
    }
    m->fresh = node_new(sh, (u_char *)item->key, item->keylen, bytes, i);
    m->fresh->pinned = 1;
    return NGX_OK;
}

/* Writes member `m`'s blob back: in its node, grown, or a fresh one in
   its place. */
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
        insert(sh, e, ngx_crc32_short((u_char *)item->key, item->keylen));
        m->node = e;
        m->fresh = NULL;
    } else if (m->extra) {
        node_grow(e, m->extra, m->nextra);
        m->extra = NULL;
    }
    node_store(sh, e, m->state, m->len);
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
    m->extra = NULL;
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
        node_t *e = m->node;
        e->pinned = 1;
        m->len = e->len;
        span_copy(span_at(e, e->keylen), m->state, m->len, 0);
        ngx_queue_remove(&e->queue);
        ngx_queue_insert_head(&zone->sh->lru, &e->queue);
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
 * decided on its blob without the group's copies (nothing is written
 * unless charged): where it is when the node is one block, else on one
 * copy in `scratch`, written back when charged. NGX_OK. NGX_DECLINED,
 * with nothing changed, when the group's way is needed: a new key, a
 * blob of other rules (the core converts it) or one that must grow
 * beyond its node's chunks.
 */
static ngx_int_t decide_alone(ngx_http_ratel_zone_t *zone,
                              ratel_batch_item_t *item, int64_t now_us)
{
    uint32_t hash = ngx_crc32_short((u_char *)item->key, item->keylen);
    node_t *e = lookup(zone->sh, (u_char *)item->key, item->keylen, hash);
    u_char *blob;
    size_t len;
    int rc;

    if (e == NULL)
        return NGX_DECLINED;
    len = e->len;
    blob = e->data + e->keylen;
    if (e->more != NULL) {
        blob = scratch;
        span_copy(span_at(e, e->keylen), blob, len, 0);
    }
    rc =
        ratel__policy_acquire_in_place(item->policy, blob, &len, e->cap, now_us,
                                       &item->request, &item->decision);
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
    if (blob == scratch)
        node_store(zone->sh, e, blob, len);
    e->len = (uint32_t)len;
    e->idle_ms = now_us / 1000 + item->decision.reset_after_ms;
    return NGX_OK;
}

/* Every member has room for its new blob, or none takes any. */
static ngx_int_t make_rooms(ngx_http_ratel_zone_t *zone,
                            ratel_batch_item_t *items, size_t n, int64_t now_ms)
{
    for (size_t i = 0; i < n; i++) {
        if (make_room(zone, &members[i], &items[i], now_ms) == NGX_OK)
            continue;
        for (size_t j = 0; j <= i; j++) {
            member_t *m = &members[j];
            if (m->fresh)
                node_release(zone->sh, m->fresh);
            chunks_free(zone->sh, m->extra);
            m->fresh = NULL;
            m->extra = NULL;
        }
        return NGX_ERROR;
    }
    return NGX_OK;
}

/*
 * The group's keys need more chunks than the zone has besides their own
 * (every other key is gone already): it is refused, charged nothing,
 * retry after REFUSE_RETRY_MS, and a line says so (budgeted: a client
 * can send such requests at will). Only a zone too small for its
 * configuration gets here: one key always fits the smallest zone.
 */
static void refuse_group(ngx_http_ratel_zone_t *zone, ratel_batch_item_t *items,
                         size_t n, ngx_log_t *log)
{
    size_t bytes = 0;
    uint64_t not_logged = 0;

    for (size_t i = 0; i < n; i++) {
        ratel_decision_t *d = &items[i].decision;
        if (!members[i].superseded)
            bytes += chunks_for(items[i].keylen + members[i].len) * CHUNK;
        ngx_memzero(d, sizeof *d);
        d->limit = items[i].policy->rules[0].limit;
        d->retry_after_ms = REFUSE_RETRY_MS;
        d->reset_after_ms = d->rule_reset_ms = REFUSE_RETRY_MS;
        d->source = RATEL_SOURCE_STORE;
        items[i].rc = 0;
    }
    if (ngx_http_ratel_log_take(NGX_HTTP_RATEL_LOG_STORE, &not_logged))
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ratel: zone \"%V\" is too small for a request of "
                      "%uz keys needing %uz bytes (it holds %uL): refused; "
                      "give the zone a larger size (not_logged=%uL)",
                      &zone->name, n, bytes,
                      (uint64_t)(zone->sh->nchunks * CHUNK), not_logged);
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
        refuse_group(zone, items, n, log);
    }
    /* A superseded member's node is a later one's (and may be gone). */
    for (size_t i = 0; i < n; i++)
        if (members[i].node && !members[i].superseded)
            members[i].node->pinned = 0;
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return NGX_OK;
}

/* What give_back() does to an item's key. */
#define GIVE_REFUND 0  /* gives its cost back to every rule */
#define GIVE_RELEASE 1 /* releases the lease its decision carried */
#define GIVE_RENEW 2   /* moves that lease to now + PERIOD: the newest */

/*
 * Gives back one admitted item's charge, releases or renews its lease, as
 * `op` says (the zone's lock held). None lengthens a blob: one in one
 * block is changed where it is, a chained one on a copy. Whether the
 * lease was held (a release, a renewal); 0 for a refund.
 */
static int give_back(ngx_http_ratel_zone_t *zone,
                     const ratel_batch_item_t *item, int64_t now_us,
                     ngx_uint_t op)
{
    uint32_t hash = ngx_crc32_short((u_char *)item->key, item->keylen);
    node_t *e = lookup(zone->sh, (u_char *)item->key, item->keylen, hash);
    u_char *blob = scratch;
    size_t len, cap = sizeof scratch;
    ratel_decision_t d;
    int rc, held = 0;

    if (e == NULL || item->rc != 0)
        return 0;
    len = e->len;
    if (e->more == NULL) {
        blob = e->data + e->keylen;
        cap = e->cap;
    } else {
        span_copy(span_at(e, e->keylen), blob, len, 0);
    }
    if (op == GIVE_REFUND)
        rc = ratel_policy_refund(item->policy, blob, &len, cap, now_us,
                                 item->request.cost, &d);
    else
        rc = ratel_policy_release(
            item->policy, blob, &len, cap, now_us, item->decision.lease,
            op == GIVE_RENEW ? RATEL_RENEW : 0, &held, &d);
    if (rc != 0)
        return 0;
    if (len == 0) {
        drop(zone, e);
        return held;
    }
    if (blob == scratch)
        node_store(zone->sh, e, blob, len);
    e->len = (uint32_t)len;
    e->idle_ms = now_us / 1000 + d.reset_after_ms;
    return held;
}

/*
 * A refund gives back a concurrent rule's newest permits, which need not
 * be this item's lease (another request may have taken one since): an
 * item holding a lease has it renewed first, which makes it the newest,
 * so that the refund that follows under the same lock frees this lease
 * and no other. A lease no longer held (it expired) is given nothing
 * back: its slot went with it, and a refund would free another's.
 */
void ngx_http_ratel_shm_refund(ngx_http_ratel_zone_t *zone,
                               ratel_batch_item_t *items, size_t n,
                               int64_t now_us)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (size_t i = 0; i < n; i++)
        if (items[i].decision.lease == 0 ||
            give_back(zone, &items[i], now_us, GIVE_RENEW))
            (void)give_back(zone, &items[i], now_us, GIVE_REFUND);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

void ngx_http_ratel_shm_release(ngx_http_ratel_zone_t *zone,
                                const ratel_batch_item_t *item, int64_t now_us)
{
    if (item->decision.lease == 0)
        return;
    ngx_shmtx_lock(&zone->shpool->mutex);
    (void)give_back(zone, item, now_us, GIVE_RELEASE);
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
        span_copy(span_at(e, e->keylen), (u_char *)&d, sizeof d, 0);
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
    size_t len;
    uint32_t hash = deny_hash(it), n;
    node_t *e = deny_lookup(zone, it, key, &len, hash);
    deny_t d = {0};

    if (e == NULL) {
        n = chunks_for(len + sizeof d);
        if (chunks_reserve(zone, n, now_ms) != NGX_OK)
            return; /* no room: Redis is asked next time */
        e = node_new(zone->sh, key, len, len + sizeof d,
                     chunks_alloc(zone->sh, block_for(len + sizeof d)));
        insert(zone->sh, e, hash);
        zone->sh->deny_hint[hash & (DENY_HINT_SLOTS - 1)]++;
    } else {
        ngx_queue_remove(&e->queue);
        ngx_queue_insert_head(&zone->sh->lru, &e->queue);
    }
    d.fingerprint = ngx_http_ratel_policy_of(it->policy)->fingerprint;
    d.cost = it->request.cost;
    d.retry_at_ms = now_ms + dec->retry_after_ms;
    d.reset_at_ms = now_ms + dec->reset_after_ms;
    d.rule_reset_at_ms = now_ms + dec->rule_reset_ms;
    d.until_ms = now_ms + ngx_min(dec->retry_after_ms, max_ms);
    d.limit = dec->limit;
    d.remaining = dec->remaining;
    d.rule = dec->rule;
    span_copy(span_at(e, e->keylen), (u_char *)&d, sizeof d, 1);
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
    /* In use: all but the free pages (none once the chunks are cut) and
       the free chunks. */
    stats->bytes = stats->max_bytes - (uint64_t)pool->pfree * ngx_pagesize -
                   sh->nfree * CHUNK;
    for (ngx_uint_t i = 0; i < sh->ncounters; i++) {
        for (int o = 0; o < NGX_HTTP_RATEL_NOUTCOMES; o++)
            counts[o] = sh->counters[i].outcomes[o];
        fn(data, sh->counters[i].name, counts);
    }
    ngx_shmtx_unlock(&pool->mutex);
}

/* ------------------------------------------------------- leased keys */

void *ngx_http_ratel_shm_leases(ngx_http_ratel_zone_t *zone)
{
    return zone->sh ? zone->sh->leases : NULL;
}

ratel_lease_t *ngx_http_ratel_shm_lease(ngx_http_ratel_zone_t *zone,
                                        ngx_uint_t count)
{
    ngx_http_ratel_policy_t **p = zone->count_policies.elts;
    ngx_uint_t slot = zone->slots[count];

    if (zone->sh->leases == NULL || slot >= NGX_HTTP_RATEL_COUNTERS_MAX ||
        !p[count]->leased)
        return NULL;
    return &zone->sh->leased[slot].lease;
}

void ngx_http_ratel_shm_kept(ngx_http_ratel_zone_t *zone,
                             ngx_http_ratel_kept_t *kept)
{
    ngx_http_ratel_shm_t *sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);
    kept->gone = zone->generation == sh->generation;
    kept->n = 0;
    for (ngx_uint_t i = 0; i < sh->ncounters && sh->leased; i++)
        if (sh->leased[i].fp) {
            kept->fps[kept->n] = sh->leased[i].fp;
            ngx_sprintf(kept->names[kept->n], "%s:%Z", sh->counters[i].name);
            kept->n++;
        }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

int ngx_http_ratel_shm_keeps(void *data, const char *key, size_t keylen,
                             uint64_t fp)
{
    ngx_http_ratel_kept_t *kept = data;

    for (ngx_uint_t i = 0; i < kept->n && !kept->gone; i++) {
        size_t n = ngx_strlen(kept->names[i]);
        if (kept->fps[i] == fp && keylen > n &&
            ngx_memcmp(key, kept->names[i], n) == 0)
            return 1;
    }
    return 0;
}

void ngx_http_ratel_shm_read_leases(ngx_http_ratel_zone_t *zone,
                                    ngx_http_ratel_lease_fn fn, void *data)
{
    ngx_http_ratel_shm_t *sh = zone->sh;

    if (sh->leases == NULL)
        return;
    ngx_shmtx_lock(&zone->shpool->mutex);
    for (ngx_uint_t i = 0; i < sh->ncounters; i++)
        if (sh->leased[i].fp)
            fn(data, sh->counters[i].name, &sh->leased[i].lease);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

/* Slot `l` as the configuration leases `p` (the counters kept). */
static void lease_settings(leased_t *l, const ngx_http_ratel_policy_t *p)
{
    l->fp = p->leased ? p->fingerprint : 0;
    l->lease.ttl_ms = p->lease.ttl_ms;
    l->lease.max_slice = p->lease.max_slice;
    l->lease.min_slice = p->lease.min_slice;
    l->lease.margin_ms = p->lease.margin_ms;
    l->lease.hosts = p->lease.hosts;
}

/*
 * The table of a Redis zone's leased keys: an eighth of the zone (at
 * least one set of 8 keys: a 64k zone's), taken before the chunks so
 * that it is there whichever policies a later configuration leases.
 * NGX_ERROR when the zone has no room for it.
 */
static ngx_int_t leases_init(ngx_slab_pool_t *pool, ngx_http_ratel_shm_t *sh,
                             size_t size)
{
    size_t bytes = ngx_max(size / 8, ratel__lease_table_size(8));
    void *mem = ngx_slab_alloc(pool, bytes);

    sh->leased =
        ngx_slab_calloc(pool, NGX_HTTP_RATEL_COUNTERS_MAX * sizeof *sh->leased);
    if (mem == NULL || sh->leased == NULL ||
        ratel__lease_table_init(&sh->leases, mem, bytes, RATEL__LEASE_SHARED) !=
            0)
        return NGX_ERROR;
    return NGX_OK;
}

/* ----------------------------------------------------------- slots */

/*
 * Gives each policy the zone's lines use its slot in the shared table of
 * counters, keeping the slot (and its counts) of a name already there,
 * with the policy's lease settings; the configuration is the zone's
 * latest.
 */
static void assign_slots(ngx_http_ratel_zone_t *zone)
{
    ngx_http_ratel_shm_t *sh = zone->sh;
    ngx_str_t *names = zone->counts.elts;
    ngx_http_ratel_policy_t **policies = zone->count_policies.elts;

    ngx_shmtx_lock(&zone->shpool->mutex);
    zone->generation = ++sh->generation;
    for (ngx_uint_t s = 0; s < sh->ncounters && sh->leased; s++)
        sh->leased[s].fp = 0;
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
        if (s < NGX_HTTP_RATEL_COUNTERS_MAX && sh->leased)
            lease_settings(&sh->leased[s], policies[i]);
    }
    ngx_shmtx_unlock(&zone->shpool->mutex);
}

/*
 * Makes the zone's chunks: every free page of the zone, one array whose
 * first chunks hold the tags of the others, one free block. NGX_ERROR
 * when nothing is left.
 */
static ngx_int_t chunks_init(ngx_slab_pool_t *pool, ngx_http_ratel_shm_t *sh)
{
    size_t pages, total, tags;
    u_char *area = NULL;

    for (pages = pool->pfree; pages > 0; pages--) {
        area = ngx_slab_alloc(pool, pages * ngx_pagesize);
        if (area)
            break;
    }
    if (area == NULL)
        return NGX_ERROR;
    total = pages * (ngx_pagesize / CHUNK);
    tags = (total * sizeof *sh->tags + CHUNK - 1) / CHUNK;
    if (total <= tags)
        return NGX_ERROR;
    sh->tags = (uint32_t *)area;
    sh->base = area + tags * CHUNK;
    sh->nchunks = total - tags;
    for (ngx_uint_t b = 0; b < BINS; b++)
        sh->bins[b] = NONE;
    chunks_release(sh, 0, (uint32_t)sh->nchunks);
    return NGX_OK;
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
        /* The chunks take every page: the slab's "no memory" is not
           news. */
        pool->log_nomem = 0;
        len = sizeof(" in ratel_zone \"\"") + shm_zone->shm.name.len;
        pool->log_ctx = ngx_slab_alloc(pool, len);
        if (pool->log_ctx == NULL)
            return NGX_ERROR;
        ngx_sprintf(pool->log_ctx, " in ratel_zone \"%V\"%Z",
                    &shm_zone->shm.name);
        if (zone->store.len > 0 &&
            leases_init(pool, sh, shm_zone->shm.size) != NGX_OK)
            return NGX_ERROR;
        if (chunks_init(pool, sh) != NGX_OK)
            return NGX_ERROR;
    }
    assign_slots(zone);
    return NGX_OK;
}
