/*
 * peers.c - connections counted per client address (peers.h): an
 * open-addressing table (linear probing, deletion by backward shift, so
 * no tombstones pile up) behind one mutex. The hash is keyed with a
 * random seed: a client choosing its addresses (an IPv6 /64 holds many)
 * cannot aim them at one chain.
 */
#include "http/peers.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct slot_s {
    uint8_t addr[16];
    uint32_t count; /* 0: the slot is free */
} slot_t;

struct ratel__http_peers_s {
    pthread_mutex_t lock;
    unsigned per_client;
    size_t mask;
    uint64_t seed;
    slot_t slots[];
};

ratel__http_peers_t *ratel__http_peers_new(unsigned max_connections,
                                           unsigned per_client)
{
    size_t cap = 16;
    ratel__http_peers_t *p;

    /* At most max_connections addresses are in the table at once: with
       twice the slots, probes stay short and a free slot always exists. */
    while (cap < (size_t)max_connections * 2)
        cap *= 2;
    p = calloc(1, sizeof *p + cap * sizeof(slot_t));
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->per_client = per_client;
    p->mask = cap - 1;
    if (getrandom(&p->seed, sizeof p->seed, 0) != sizeof p->seed)
        p->seed = (uint64_t)(uintptr_t)p ^ 0x9e3779b97f4a7c15ull;
    return p;
}

void ratel__http_peers_free(ratel__http_peers_t *peers)
{
    if (!peers)
        return;
    pthread_mutex_destroy(&peers->lock);
    free(peers);
}

static size_t home(const ratel__http_peers_t *p, const uint8_t addr[16])
{
    uint64_t a, b, h;

    memcpy(&a, addr, 8);
    memcpy(&b, addr + 8, 8);
    h = (p->seed ^ a) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 31) ^ b) * 0x94d049bb133111ebull;
    return (size_t)(h ^ (h >> 29)) & p->mask;
}

/* The slot holding addr, or the free slot where it would go; NULL if
   neither exists (a full table, which the sizing rules out). */
static slot_t *find(ratel__http_peers_t *p, const uint8_t addr[16])
{
    size_t i = home(p, addr);

    for (size_t n = 0; n <= p->mask; n++, i = (i + 1) & p->mask) {
        slot_t *s = &p->slots[i];
        if (!s->count || memcmp(s->addr, addr, 16) == 0)
            return s;
    }
    return NULL;
}

/* Empties slot i and moves later entries of its chain back into the
   hole, so that every entry stays reachable from its home slot. */
static void remove_at(ratel__http_peers_t *p, size_t i)
{
    size_t j = i;

    for (;;) {
        size_t k;
        j = (j + 1) & p->mask;
        if (!p->slots[j].count)
            break;
        k = home(p, p->slots[j].addr);
        /* Leave the entry where it is if its home lies cyclically in
           (i, j]: the hole at i is not on its probe path. */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        p->slots[i] = p->slots[j];
        i = j;
    }
    p->slots[i].count = 0;
}

/* The table's form of a peer address; 0, or -1 if not IPv4 or IPv6. */
static int key_of(const struct sockaddr *peer, socklen_t len, uint8_t out[16])
{
    if (peer && peer->sa_family == AF_INET6 &&
        len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        memcpy(out, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
        return 0;
    }
    if (peer && peer->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(struct sockaddr_in)) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)peer)->sin_addr, 4);
        return 0;
    }
    return -1;
}

int ratel__http_peers_acquire(ratel__http_peers_t *peers,
                              const struct sockaddr *peer, socklen_t len,
                              ratel__http_peer_key_t *key)
{
    slot_t *s;
    int ok = 0;

    key->counted = 0;
    if (key_of(peer, len, key->addr) != 0)
        return 1;
    pthread_mutex_lock(&peers->lock);
    s = find(peers, key->addr);
    if (s && s->count < peers->per_client) {
        if (!s->count)
            memcpy(s->addr, key->addr, 16);
        s->count++;
        key->counted = 1;
        ok = 1;
    }
    pthread_mutex_unlock(&peers->lock);
    return ok;
}

void ratel__http_peers_release(ratel__http_peers_t *peers,
                               ratel__http_peer_key_t *key)
{
    slot_t *s;

    if (!peers || !key->counted)
        return;
    key->counted = 0;
    pthread_mutex_lock(&peers->lock);
    s = find(peers, key->addr);
    if (s && s->count && --s->count == 0)
        remove_at(peers, (size_t)(s - peers->slots));
    pthread_mutex_unlock(&peers->lock);
}

unsigned ratel__http_peers_count(ratel__http_peers_t *peers,
                                 const ratel__http_peer_key_t *key)
{
    slot_t *s;
    unsigned n;

    pthread_mutex_lock(&peers->lock);
    s = find(peers, key->addr);
    n = s ? s->count : 0;
    pthread_mutex_unlock(&peers->lock);
    return n;
}
