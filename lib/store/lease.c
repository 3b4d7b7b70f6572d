/*
 * lease.c - the slices of hot keys a host holds (lease.h, docs/leases.md).
 *
 * Each key keeps at most two slices (the one being spent and the one
 * fetched ahead of need), so a host never holds more than two slices'
 * permits of a key: the term of the printed bound. A slice is spent until
 * its local end: the time its fetch was sent, plus the lifetime the store
 * answered, less the margin, which is before the store's end whatever the
 * two clocks read.
 *
 * The next slice is asked for when what is left would not last two round
 * trips at the key's recent rate, or the slice ends within them; its size
 * is the rate times a quarter of the lifetime, between the settings'
 * minimum and maximum, so a busy key makes about four calls a lifetime and
 * a quiet one asks for little. When the store grants nothing, the key's
 * requests go to the store one by one (exact: the limit is reached) until
 * a permit is due; the store's deny cache answers its denials.
 */
#include "store/lease.h"
#include "store/engine.h"
#include "store/keyhash.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_WAYS 8
#define LEASE_LOCKS 64
#define RATE_STEP_US 100000 /* the rate is measured over 100 ms steps */

typedef struct slot_s {
    uint64_t n;       /* permits left; 0: empty */
    int64_t end_us;   /* local spending stops here */
    int64_t until_ms; /* the store's end, for RATEL.UNSLICE */
} slot_t;

typedef struct entry_s {
    uint64_t fp; /* the policy's fingerprint; 0: a free entry */
    uint32_t keylen;
    char key[RATEL__LEASE_KEY_MAX];
    ratel_policy_t policy; /* to give back what is left */
    ratel_lease_t *lease;
    slot_t slot[2]; /* slot[0] ends first; both empty, or slot[0] held */
    int fetching;
    int64_t fetch_until_us; /* a fetch not answered by then is lost (its
                               process ended): the key fetches again */
    int64_t retry_us;       /* no fetch before this: the store was down,
                               or had nothing left until then */
    ratel_decision_t last;  /* the store's last answer to a fetch */
    int64_t rate_start_us;  /* the current step's start */
    uint64_t rate_count;    /* permits asked for in it */
    uint64_t rate;          /* permits a second, from the last steps */
    int64_t rtt_us;         /* the fetches' round trip, smoothed */
} entry_t;

/* One block of memory, the caller's or the heap's: no pointer inside, so
   processes that map it at the same address share it. */
struct ratel__lease_table_s {
    pthread_mutex_t locks[LEASE_LOCKS];
    uint64_t set_mask;
    uint64_t seed[3];
    uint64_t holder;
    int heap; /* ratel__lease_table_new()'s: freed with the table */
    entry_t entries[];
};

static size_t table_bytes(size_t sets)
{
    return offsetof(ratel__lease_table_t, entries) +
           sets * LEASE_WAYS * sizeof(entry_t);
}

size_t ratel__lease_table_size(size_t entries)
{
    size_t sets = 1;

    while (sets * LEASE_WAYS < entries)
        sets *= 2;
    return table_bytes(sets);
}

int ratel__lease_table_init(ratel__lease_table_t **out, void *mem, size_t size,
                            unsigned flags)
{
    ratel__lease_table_t *t = mem;
    pthread_mutexattr_t attr;
    size_t sets = 1;

    *out = NULL;
    if (!mem || size < table_bytes(1))
        return RATEL_EINVAL;
    while (table_bytes(sets * 2) <= size)
        sets *= 2;
    if (!(flags & RATEL__LEASE_ZEROED))
        memset(mem, 0, table_bytes(sets));
    t->set_mask = sets - 1;
    pthread_mutexattr_init(&attr);
    if (flags & RATEL__LEASE_SHARED) {
        pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    }
    for (int i = 0; i < LEASE_LOCKS; i++)
        pthread_mutex_init(&t->locks[i], &attr);
    pthread_mutexattr_destroy(&attr);
    ratel__keyhash_seed(t->seed, t);
    t->holder = (t->seed[0] & RATEL_HOLDER_MAX) | 1;
    *out = t;
    return 0;
}

int ratel__lease_table_new(ratel__lease_table_t **out, size_t entries)
{
    size_t size = ratel__lease_table_size(entries);
    /* calloc's pages are touched as keys arrive. */
    void *mem = calloc(1, size);

    *out = NULL;
    if (!mem)
        return RATEL_ENOMEM;
    (void)ratel__lease_table_init(out, mem, size, RATEL__LEASE_ZEROED);
    (*out)->heap = 1;
    return 0;
}

void ratel__lease_table_free(ratel__lease_table_t *t)
{
    if (!t)
        return;
    if (!t->heap)
        return;
    for (int i = 0; i < LEASE_LOCKS; i++)
        pthread_mutex_destroy(&t->locks[i]);
    free(t);
}

uint64_t ratel__lease_holder(const ratel__lease_table_t *t)
{
    return t->holder;
}

/* Takes `lock`; one a dead process held (a shared table's) is taken as it
   was left: an entry it was changing may be off by that change. */
static void lock_take(pthread_mutex_t *lock)
{
    if (pthread_mutex_lock(lock) == EOWNERDEAD)
        pthread_mutex_consistent(lock);
}

/* The settings of `lease`, defaults for zeros, in microseconds. */
typedef struct settings_s {
    int64_t ttl_us, margin_us;
    uint64_t max_slice, min_slice;
} settings_t;

static settings_t settings(const ratel_lease_t *lease)
{
    settings_t s;
    int64_t ttl_ms = lease->ttl_ms > 0 && lease->ttl_ms <= 3600000
                         ? lease->ttl_ms
                         : RATEL_LEASE_TTL_MS;

    s.ttl_us = ttl_ms * 1000;
    s.margin_us = lease->margin_ms > 0 && lease->margin_ms < ttl_ms
                      ? lease->margin_ms * 1000
                      : (1 + ttl_ms / 100) * 1000;
    s.max_slice = lease->max_slice > 0 && lease->max_slice <= RATEL_LIMIT_MAX
                      ? lease->max_slice
                      : RATEL_LEASE_MAX_SLICE;
    s.min_slice = lease->min_slice > 0 && lease->min_slice <= s.max_slice
                      ? lease->min_slice
                      : 1;
    return s;
}

/* ------------------------------------------------------------ entries */

/* The first entry of key's set, with its lock taken. */
static entry_t *set_lock(ratel__lease_table_t *t, const char *key,
                         size_t keylen, pthread_mutex_t **lock)
{
    uint64_t set = key_hash(t->seed, key, keylen) & t->set_mask;

    *lock = &t->locks[set % LEASE_LOCKS];
    lock_take(*lock);
    return &t->entries[set * LEASE_WAYS];
}

static entry_t *find(entry_t *set, const char *key, size_t keylen, uint64_t fp)
{
    for (int w = 0; w < LEASE_WAYS; w++)
        if (set[w].fp == fp && set[w].keylen == keylen &&
            memcmp(set[w].key, key, keylen) == 0)
            return &set[w];
    return NULL;
}

/* Whether an entry holds nothing the store must hear of. */
static int idle(const entry_t *e, int64_t now_us)
{
    return e->fp == 0 || (e->slot[0].n == 0 && e->slot[1].n == 0 &&
                          (!e->fetching || e->fetch_until_us <= now_us) &&
                          e->retry_us <= now_us);
}

/* A free or idle entry of the set for key, made new; NULL: none. */
static entry_t *claim(entry_t *set, const char *key, size_t keylen, uint64_t fp,
                      const ratel_policy_t *policy, int64_t now_us)
{
    for (int w = 0; w < LEASE_WAYS; w++) {
        entry_t *e = &set[w];
        if (!idle(e, now_us))
            continue;
        memset(e, 0, offsetof(entry_t, key));
        memset(&e->slot, 0, sizeof *e - offsetof(entry_t, slot));
        e->fp = fp;
        e->keylen = (uint32_t)keylen;
        memcpy(e->key, key, keylen);
        e->policy = *policy;
        e->rate_start_us = now_us;
        return e;
    }
    return NULL;
}

/* Moves slots that ended out: the first holding permits goes to *todo to
   be given back, any other is stranded. */
static void expire(entry_t *e, int64_t now_us, ratel__lease_todo_t *todo)
{
    while (e->slot[0].n > 0 && e->slot[0].end_us <= now_us) {
        if (todo->unspent == 0) {
            todo->unspent = e->slot[0].n;
            todo->until_ms = e->slot[0].until_ms;
        } else {
            ratel__lease_count(&e->lease->stranded, e->slot[0].n);
        }
        e->slot[0] = e->slot[1];
        memset(&e->slot[1], 0, sizeof e->slot[1]);
    }
}

/* Notes `cost` permits asked for now; returns the key's rate (permits a
   second), counting the current step once it is 10 ms old. */
static uint64_t rate_note(entry_t *e, int64_t now_us, uint64_t cost)
{
    int64_t elapsed = now_us - e->rate_start_us;
    uint64_t now_rate;

    e->rate_count += cost;
    if (elapsed < 10000)
        return e->rate;
    now_rate = e->rate_count * 1000000 / (uint64_t)elapsed;
    if (elapsed >= RATE_STEP_US) {
        e->rate = (e->rate + now_rate) / 2;
        e->rate_start_us = now_us;
        e->rate_count = 0;
    }
    return now_rate > e->rate ? now_rate : e->rate;
}

/* ---------------------------------------------------------- answers */

static void allow(const entry_t *e, uint64_t left, ratel_decision_t *d)
{
    *d = e->last;
    d->allowed = 1;
    d->remaining = e->last.remaining + (int64_t)left;
    d->retry_after_ms = 0;
    d->wait_ms = 0;
    d->lease = 0;
    d->source = RATEL_SOURCE_LEASE;
}

/* Asks for the next slice when none is in flight, two are not held, the
   store is not known down, and `need` says so. */
static void fetch(entry_t *e, const settings_t *s, uint64_t rate, uint64_t cost,
                  int64_t now_us, int need, ratel__lease_todo_t *todo)
{
    uint64_t want;

    if (!need || (e->fetching && now_us < e->fetch_until_us) ||
        e->slot[1].n > 0 || now_us < e->retry_us)
        return;
    want = rate * (uint64_t)(s->ttl_us / 4) / 1000000;
    want = want < s->min_slice ? s->min_slice : want;
    want = want > s->max_slice ? s->max_slice : want;
    want = want < cost ? cost : want;
    e->fetching = 1;
    e->fetch_until_us = now_us + s->ttl_us;
    todo->fetch = want;
    todo->ttl_ms = s->ttl_us / 1000;
}

int ratel__lease_take(ratel__lease_table_t *t, const char *key, size_t keylen,
                      const ratel_policy_t *policy, uint64_t fp,
                      ratel_lease_t *lease, int64_t now_us, uint64_t cost,
                      ratel_decision_t *d, ratel__lease_todo_t *todo)
{
    settings_t s = settings(lease);
    pthread_mutex_t *lock;
    entry_t *set, *e;
    uint64_t rate, held, ahead;

    memset(todo, 0, sizeof *todo);
    if (keylen > RATEL__LEASE_KEY_MAX || fp == 0)
        return 0;
    set = set_lock(t, key, keylen, &lock);
    e = find(set, key, keylen, fp);
    if (!e)
        e = claim(set, key, keylen, fp, policy, now_us);
    if (!e) {
        pthread_mutex_unlock(lock);
        ratel__lease_count(&lease->remote, 1);
        return 0;
    }
    e->lease = lease;
    expire(e, now_us, todo);
    rate = rate_note(e, now_us, cost);
    held = e->slot[0].n + e->slot[1].n;
    if (held < cost) {
        fetch(e, &s, rate, cost, now_us, 1, todo);
        pthread_mutex_unlock(lock);
        ratel__lease_count(&lease->remote, 1);
        return 0;
    }
    if (e->slot[0].n >= cost) {
        todo->taken_end_us = e->slot[0].end_us;
        todo->taken_until_ms = e->slot[0].until_ms;
    }
    for (uint64_t left = cost; left > 0;) {
        uint64_t k = e->slot[0].n < left ? e->slot[0].n : left;
        e->slot[0].n -= k;
        left -= k;
        if (e->slot[0].n == 0) {
            e->slot[0] = e->slot[1];
            memset(&e->slot[1], 0, sizeof e->slot[1]);
        }
    }
    held -= cost;
    allow(e, held, d);
    /* Enough for two round trips at this rate, and time to spend it? */
    ahead = rate * (uint64_t)(2 * e->rtt_us + 1000) / 1000000 + 1;
    fetch(e, &s, rate, cost, now_us,
          held < ahead || (held > 0 && e->slot[0].end_us - now_us <
                                           2 * e->rtt_us + s.margin_us),
          todo);
    pthread_mutex_unlock(lock);
    ratel__lease_count(&lease->local, 1);
    ratel__lease_count(&lease->spent, cost);
    return 1;
}

/* Places `slot` among e's slots, kept in the order they end; 0 when both
   are taken. */
static int place(entry_t *e, const slot_t *slot)
{
    if (e->slot[1].n > 0)
        return 0;
    if (e->slot[0].n == 0) {
        e->slot[0] = *slot;
    } else if (slot->end_us < e->slot[0].end_us) {
        e->slot[1] = e->slot[0];
        e->slot[0] = *slot;
    } else {
        e->slot[1] = *slot;
    }
    return 1;
}

uint64_t ratel__lease_fill(ratel__lease_table_t *t, const char *key,
                           size_t keylen, uint64_t fp, ratel_lease_t *lease,
                           int64_t sent_us, int64_t now_us, uint64_t granted,
                           int64_t lifetime_ms, int64_t until_ms,
                           const ratel_decision_t *reply)
{
    settings_t s = settings(lease);
    slot_t slot = {granted, sent_us + lifetime_ms * 1000 - s.margin_us,
                   until_ms};
    pthread_mutex_t *lock;
    entry_t *e;

    ratel__lease_count(&lease->calls, 1);
    ratel__lease_count(&lease->leased, granted);
    e = find(set_lock(t, key, keylen, &lock), key, keylen, fp);
    if (!e) {
        pthread_mutex_unlock(lock);
        return granted;
    }
    e->fetching = 0;
    e->rtt_us =
        e->rtt_us ? (e->rtt_us * 7 + (now_us - sent_us)) / 8 : now_us - sent_us;
    e->last = *reply;
    if (granted == 0) {
        /* Nothing left now: the key's requests go to the store, exactly,
           until a permit is due (its deny cache answers the denials). */
        e->retry_us = now_us + reply->retry_after_ms * 1000;
        pthread_mutex_unlock(lock);
        return 0;
    }
    if (slot.end_us <= now_us || !place(e, &slot)) {
        pthread_mutex_unlock(lock);
        return granted;
    }
    pthread_mutex_unlock(lock);
    return 0;
}

void ratel__lease_put_back(ratel__lease_table_t *t, const char *key,
                           size_t keylen, uint64_t fp, ratel_lease_t *lease,
                           uint64_t cost, int64_t end_us, int64_t until_ms,
                           int64_t now_us)
{
    slot_t back = {cost, end_us, until_ms};
    pthread_mutex_t *lock;
    entry_t *e = find(set_lock(t, key, keylen, &lock), key, keylen, fp);
    int kept = 0;

    if (e && end_us > now_us) {
        for (int k = 0; k < 2 && !kept; k++)
            if (e->slot[k].n > 0 && e->slot[k].end_us == end_us) {
                e->slot[k].n += cost;
                kept = 1;
            }
        kept = kept || place(e, &back);
    }
    pthread_mutex_unlock(lock);
    /* Not spent after all: back in the slice, or stranded. */
    __atomic_fetch_sub(&lease->spent, cost, __ATOMIC_RELAXED);
    if (!kept)
        ratel__lease_count(&lease->stranded, cost);
}

void ratel__lease_unfetched(ratel__lease_table_t *t, const char *key,
                            size_t keylen, uint64_t fp, int64_t retry_us)
{
    pthread_mutex_t *lock;
    entry_t *e = find(set_lock(t, key, keylen, &lock), key, keylen, fp);

    if (e) {
        e->fetching = 0;
        e->retry_us = retry_us;
    }
    pthread_mutex_unlock(lock);
}

void ratel__lease_drain(ratel__lease_table_t *t, ratel__lease_keep_fn keep,
                        ratel__lease_visit_fn fn, void *ud)
{
    for (uint64_t i = 0; i < (t->set_mask + 1) * LEASE_WAYS; i++) {
        entry_t *e = &t->entries[i];
        pthread_mutex_t *lock = &t->locks[(i / LEASE_WAYS) % LEASE_LOCKS];
        entry_t copy;
        lock_take(lock);
        copy = *e;
        if (copy.fp && keep && keep(ud, copy.key, copy.keylen, copy.fp)) {
            pthread_mutex_unlock(lock);
            continue;
        }
        memset(e, 0, sizeof *e);
        pthread_mutex_unlock(lock);
        for (int k = 0; k < 2 && copy.fp; k++)
            if (copy.slot[k].n > 0)
                fn(ud, copy.key, copy.keylen, &copy.policy, copy.lease,
                   copy.slot[k].n, copy.slot[k].until_ms);
    }
}

/* ----------------------------------------------------------- demand */

size_t ratel__lease_demand_key(const char *key, size_t keylen, char *buf,
                               size_t len)
{
    static const char suffix[] = "\\lease";
    size_t n = sizeof suffix - 1;
    unsigned slot = ratel__key_slot(key, keylen);

    if (keylen + n + 2 > len)
        return 0;
    memcpy(buf, key, keylen);
    memcpy(buf + keylen, suffix, n);
    if (ratel__key_slot(buf, keylen + n) == slot)
        return keylen + n;
    buf[0] = '{';
    memcpy(buf + 1, key, keylen);
    buf[keylen + 1] = '}';
    memcpy(buf + keylen + 2, suffix, n);
    if (ratel__key_slot(buf, keylen + n + 2) == slot)
        return keylen + n + 2;
    memcpy(buf, key, keylen);
    return keylen;
}

/* ------------------------------------------------------------ bound */

/* Rule r's term: what the hosts can hold at once, and never more than
   the rule can charge within one lifetime (docs/leases.md). */
static uint64_t rule_bound(const ratel_rule_t *r, const settings_t *s,
                           uint64_t hosts)
{
    uint64_t held = 2 * hosts * s->max_slice, most;

    if (r->algo == RATEL_ALGO_FIXED || r->algo == RATEL_ALGO_APPROX)
        return 0;
    most = ratel_rule_capacity(r);
    if (r->algo == RATEL_ALGO_GCRA)
        most += (uint64_t)((__int128)r->limit * (s->ttl_us / 1000) /
                           (r->period_ms > 0 ? r->period_ms : 1));
    return held < most ? held : most;
}

int ratel_lease_bound(const ratel_policy_t *policy, const ratel_lease_t *lease,
                      uint64_t out[RATEL_MAX_RULES], char *text, size_t len)
{
    settings_t s;
    uint64_t hosts;
    size_t n = 0;

    if (!policy || !lease || policy->nrules == 0 ||
        policy->nrules > RATEL_MAX_RULES || lease->ttl_ms < 0 ||
        lease->ttl_ms > 3600000 || lease->max_slice > RATEL_LIMIT_MAX ||
        (lease->min_slice && lease->max_slice &&
         lease->min_slice > lease->max_slice) ||
        ratel_policy_has_leases(policy)) {
        if (text && len)
            snprintf(text, len, "%s",
                     policy && ratel_policy_has_leases(policy)
                         ? "a policy with a concurrent rule cannot be leased"
                         : "lease settings out of range");
        return RATEL_EINVAL;
    }
    s = settings(lease);
    hosts = lease->hosts ? lease->hosts : 1;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        char rule[64];
        uint64_t b = rule_bound(&policy->rules[i], &s, hosts);
        if (out)
            out[i] = b;
        ratel_rule_format(&policy->rules[i], rule, sizeof rule);
        if (text && n < len)
            n += (size_t)snprintf(text + n, len - n, "%s%llu over %s",
                                  i ? ", " : "overshoot at most ",
                                  (unsigned long long)b, rule);
    }
    if (text && n < len)
        snprintf(text + n, len - n, " in any window, with up to %llu host%s",
                 (unsigned long long)hosts, hosts == 1 ? "" : "s");
    return 0;
}
