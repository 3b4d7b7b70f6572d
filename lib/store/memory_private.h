/*
 * memory_private.h - the memory store's entries, shards and store object,
 * shared by its two files: memory.c (decisions, eviction, expiry) and
 * memory_snapshot.c (copying the shards into a snapshot and loading one
 * back). Nothing outside lib/store/memory*.c includes it.
 */
#ifndef RATEL_STORE_MEMORY_PRIVATE_H
#define RATEL_STORE_MEMORY_PRIVATE_H

#include "store/snapshot.h"
#include "store/spin.h"
#include "store/store.h"

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One key. `newer`/`older` link the shard's eviction list (head = most
 * recently inserted or given a second chance). The state blob starts right
 * after the key bytes and may be unaligned: the core reads it byte by byte. 39
 * bytes of bookkeeping: with a short key and a one-rule blob an entry fits an
 * 80-byte chunk.
 */
typedef struct entry_s {
    struct entry_s *next;  /* hash chain */
    struct entry_s *newer; /* list neighbour toward the head; NULL at head */
    struct entry_s *older; /* list neighbour toward the tail; NULL at tail */
    int64_t expire_at_us;  /* state is empty from this instant on */
    uint16_t state_len;    /* bytes of blob */
    uint16_t state_cap;    /* bytes available for the blob */
    uint16_t keylen;
    uint8_t used;   /* used since it was inserted or last passed over */
    uint8_t data[]; /* keylen key bytes, then state_cap state bytes */
} entry_t;

#define ENTRY_HEADER offsetof(entry_t, data)

/*
 * One lock shard, aligned to two cache lines so that two threads working on
 * neighbouring shards never share a line (the adjacent-line prefetcher pulls
 * lines in pairs). What every decision writes - the lock and `hits` -
 * shares the first line with what every lookup reads (table and mask), so
 * a shard that changes hands between threads costs one line transfer; the
 * second line changes on inserts and evictions alone.
 */
/*
 * A shard's lock: test-and-test-and-set, spinning briefly and then yielding
 * the CPU. The locked sections are a few dozen nanoseconds (one decision on
 * one blob), where a pthread mutex's two atomic operations per use were a
 * third of a decision's cost; yielding keeps a preempted holder from making
 * the others burn their time slices.
 */
typedef struct shard_lock_s {
    _Atomic int held;
} shard_lock_t;

static inline void shard_lock(shard_lock_t *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!atomic_load_explicit(&l->held, memory_order_relaxed) &&
            !atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        ratel__spin_backoff(spins);
    }
}

static inline void shard_unlock(shard_lock_t *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

typedef struct __attribute__((aligned(128))) shard_s {
    shard_lock_t lock;
    uint64_t hits;
    entry_t **buckets;
    uint32_t mask; /* buckets - 1 */
    /* second line */
    entry_t *head __attribute__((aligned(64))); /* newest */
    entry_t *tail;                              /* oldest: evicted first */
    size_t count;                               /* entries */
    size_t bytes;  /* entries + bucket array, as charged */
    size_t budget; /* this shard's share of max_bytes */
    uint64_t misses, expirations, evictions;
} shard_t;

typedef struct memory_store_s {
    ratel_store_t base; /* first: the generic store points here */
    shard_t *shards;
    uint32_t shard_mask;
    uint64_t seed[3];   /* hash secrets, random per store */
    size_t max_bytes;   /* the configured bound */
    size_t fixed_bytes; /* this struct and the shard array, as charged */
    ratel__snapshotter_t *snap; /* NULL: no snapshot */
} memory_store_t;

/*
 * Adds `key` with its state (`len` bytes, expiring at `expire_at_us`) as
 * the most recently used entry of its shard, which the caller has locked
 * (memory.c's entry_insert: room is made by eviction first). 0 or
 * RATEL_ENOMEM.
 */
int ratel__memory_insert(memory_store_t *m, shard_t *s, const char *key,
                         size_t keylen, const uint8_t *state, size_t len,
                         int64_t expire_at_us, int64_t now_us);

/* The shard that holds `key`. */
shard_t *ratel__memory_shard(memory_store_t *m, const char *key, size_t keylen);

/* ratel__snapshot_collect_fn for a memory store (memory_snapshot.c). */
int ratel__memory_collect(void *store, ratel__snapshot_writer_t *w,
                          uint64_t *lock_max_ns);

/*
 * Loads options->path into the new store `m` and starts its writer
 * thread (memory_snapshot.c). 0, or a RATEL_E* code with why (which may
 * also hold a warning on success: a bad snapshot skipped as
 * on_bad_snapshot says).
 */
int ratel__memory_snapshot_open(memory_store_t *m,
                                const ratel_snapshot_options_t *options,
                                char *why, size_t whylen);

#endif /* RATEL_STORE_MEMORY_PRIVATE_H */
