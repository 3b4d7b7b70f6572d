/*
 * memory_snapshot.c - the memory store's keys in a snapshot file, so that
 * counts survive a restart (docs/memory-store.md, "Snapshots").
 *
 * Writing stays off the decision path: the writer thread (snapshot.c)
 * copies one shard at a time under that shard's lock into a buffer of its
 * own - a few hundred entries at most, microseconds - and encodes and
 * writes the copy with no lock held. A decision waits at most for one
 * shard's copy, never for the disk.
 *
 * Keys keep their absolute expiry (wall-clock microseconds, the `now_us`
 * rateld and captchad pass), so time runs on across the gap: a key that
 * expired while the program was down is left out at load, and a live one's
 * windows are judged at its next decision as the core judges any blob.
 */
#include "store/memory_private.h"
#include "store/option.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t monotonic_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A record as copied under the lock: native, decoded after unlocking. */
typedef struct copied_s {
    int64_t expire_at_us;
    uint16_t keylen, len;
} copied_t;

/*
 * Copies the live entries of shard `s` into *buf (grown as needed, outside
 * the lock), oldest first so that a load rebuilds the eviction order.
 * Returns the bytes copied, or (size_t)-1 when out of memory; *held_ns gets
 * how long the lock was held.
 */
static size_t shard_copy(shard_t *s, uint8_t **buf, size_t *cap, int64_t now,
                         uint64_t *held_ns)
{
    size_t used = 0;
    uint64_t t0;

    for (;;) {
        size_t need;
        shard_lock(&s->lock);
        /* Every entry's charge exceeds its record: s->bytes bounds them. */
        need = s->bytes;
        if (need <= *cap)
            break;
        shard_unlock(&s->lock);
        uint8_t *more = realloc(*buf, need + need / 2);
        if (!more)
            return (size_t)-1;
        /* Touched now, so that no page fault happens under the lock. */
        memset(more + *cap, 0, need + need / 2 - *cap);
        *buf = more;
        *cap = need + need / 2;
    }
    t0 = monotonic_ns();
    for (entry_t *e = s->tail; e; e = e->newer) {
        copied_t c = {e->expire_at_us, e->keylen, e->state_len};
        if (e->expire_at_us <= now || e->state_len == 0)
            continue;
        memcpy(*buf + used, &c, sizeof c);
        memcpy(*buf + used + sizeof c, e->data, (size_t)e->keylen + c.len);
        used += sizeof c + e->keylen + c.len;
    }
    *held_ns = monotonic_ns() - t0;
    shard_unlock(&s->lock);
    return used;
}

int ratel__memory_collect(void *store, ratel__snapshot_writer_t *w,
                          uint64_t *lock_max_ns)
{
    memory_store_t *m = store;
    int64_t now = ratel_clock_now_us();
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = 0;

    *lock_max_ns = 0;
    for (uint32_t i = 0; i <= m->shard_mask && rc == 0; i++) {
        uint64_t held = 0;
        size_t used = shard_copy(&m->shards[i], &buf, &cap, now, &held);
        if (used == (size_t)-1) {
            rc = RATEL_ENOMEM;
            break;
        }
        if (held > *lock_max_ns)
            *lock_max_ns = held;
        for (size_t at = 0; at < used && rc == 0;) {
            copied_t c;
            memcpy(&c, buf + at, sizeof c);
            at += sizeof c;
            rc = ratel__snapshot_writer_add(w, buf + at, c.keylen,
                                            buf + at + c.keylen, c.len,
                                            c.expire_at_us);
            at += (size_t)c.keylen + c.len;
        }
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ load */

typedef struct load_s {
    memory_store_t *m;
    int64_t now_us;
    uint64_t loaded, expired, dropped;
} load_t;

/* One record of the snapshot: into its shard unless it expired meanwhile. */
static int load_record(void *ud, const uint8_t *key, size_t keylen,
                       const uint8_t *state, size_t len, int64_t expire_at_us)
{
    load_t *l = ud;
    shard_t *s;

    if (expire_at_us <= l->now_us) {
        l->expired++;
        return 0;
    }
    s = ratel__memory_shard(l->m, (const char *)key, keylen);
    shard_lock(&s->lock);
    if (ratel__memory_insert(l->m, s, (const char *)key, keylen, state, len,
                             expire_at_us, l->now_us) == 0)
        l->loaded++;
    else
        l->dropped++; /* larger than a shard's share of max_bytes */
    shard_unlock(&s->lock);
    return 0;
}

/* The settings' own checks: the one range of the option table. */
static int options_check(const ratel_snapshot_options_t *o, char *why,
                         size_t whylen)
{
    if (o->interval_ms &&
        ratel__option_check(ratel__memory_options, ratel__memory_noptions,
                            "snapshot_interval_ms", o->interval_ms) != 0) {
        snprintf(why, whylen,
                 "snapshot_interval_ms: %u is out of range; accepted: 0 (the "
                 "default, %u) or %u..%u",
                 o->interval_ms, RATEL__SNAPSHOT_INTERVAL_DEFAULT,
                 RATEL__SNAPSHOT_INTERVAL_MIN, RATEL__SNAPSHOT_INTERVAL_MAX);
        return RATEL_EINVAL;
    }
    if (o->on_bad != RATEL_BAD_SNAPSHOT_REFUSE &&
        o->on_bad != RATEL_BAD_SNAPSHOT_EMPTY) {
        snprintf(why, whylen,
                 "on_bad_snapshot: %d is not a "
                 "ratel_bad_snapshot_t",
                 o->on_bad);
        return RATEL_EINVAL;
    }
    return ratel__snapshot_check_path(o->path, why, whylen);
}

/*
 * A snapshot that could not be loaded, with on_bad_snapshot: empty: the
 * store starts empty and the file is kept as PATH.bad for a look; why
 * says so (a warning for the program to log).
 */
static void skip_bad(const char *path, char *why, size_t whylen)
{
    size_t n = strlen(path) + sizeof ".bad";
    char *bad = malloc(n);
    size_t q = strlen(why);

    /* The parse checks the whole file before it hands over a record: the
       store is still empty. */
    if (bad) {
        snprintf(bad, n, "%s.bad", path);
        if (rename(path, bad) == 0)
            snprintf(why + q, whylen - q,
                     "; started empty (on_bad_snapshot: empty), the file "
                     "kept as %s",
                     bad);
        else
            snprintf(why + q, whylen - q,
                     "; started empty (on_bad_snapshot: empty); it could not "
                     "be renamed to %s: %s",
                     bad, strerror(errno));
    }
    free(bad);
}

int ratel__memory_snapshot_open(memory_store_t *m,
                                const ratel_snapshot_options_t *options,
                                char *why, size_t whylen)
{
    load_t l = {.m = m, .now_us = ratel_clock_now_us()};
    uint32_t interval = options->interval_ms ? options->interval_ms
                                             : RATEL__SNAPSHOT_INTERVAL_DEFAULT;
    int found, rc = options_check(options, why, whylen);

    if (rc != 0)
        return rc;
    rc = ratel__snapshot_load(options->path, load_record, &l, &found, why,
                              whylen);
    if (rc != 0) {
        if (rc == RATEL_ENOMEM || options->on_bad != RATEL_BAD_SNAPSHOT_EMPTY)
            return rc;
        skip_bad(options->path, why, whylen);
    }
    rc = ratel__snapshotter_start(&m->snap, options->path, interval,
                                  ratel__memory_collect, m);
    if (rc != 0)
        snprintf(why, whylen, "snapshot %s: cannot start its writer thread",
                 options->path);
    return rc;
}
