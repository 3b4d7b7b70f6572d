/*
 * concurrent.c - at most LIMIT permits held at once, each lease expiring
 * after PERIOD unless released or renewed (nginx limit_conn, Traefik
 * InFlightReq, Redisson's PermitExpirableSemaphore).
 *
 * An acquire admitted under a concurrent rule takes a lease: `cost`
 * permits under one lease id, held until the caller releases the id or
 * PERIOD passes, whichever comes first (a caller that crashed frees its
 * slots by itself). A renewal moves the lease's expiry to now + PERIOD.
 *
 * The record keeps one 8-byte entry per permit held: the lease id and its
 * expiry, in ms as an offset from the record's base, entries in order of
 * expiry (new and renewed leases expire last, so they are appended). A
 * lease of cost c is c adjacent entries with its id. Memory therefore grows
 * with the permits held, never with requests, and is bounded by the limit:
 * a concurrent limit is at most RATEL_CONCURRENT_MAX (the same 2 KB bound
 * as a sliding record). Expired entries are dropped on the next write.
 *
 * Lease ids are per key, 1 .. 2^32 - 1, handed out in turn after the
 * record's last one (skipping 0 and ids still held), so every backend (the
 * core, the module, the Lua scripts) gives the same id for the same call.
 * A clock that goes back is clamped to the record's base (nginx): a lease
 * never lives longer than PERIOD past the latest write.
 */
#include "internal.h"

#define ENTRIES(p) ((p) + RATEL__CONC_ENTRIES)

static inline uint32_t entry_off(const uint8_t *p, uint32_t i)
{
    return ratel__pair_first(ENTRIES(p), i);
}

static inline uint32_t entry_id(const uint8_t *p, uint32_t i)
{
    return ratel__pair_second(ENTRIES(p), i);
}

static inline void entry_set(uint8_t *p, uint32_t i, uint32_t off, uint32_t id)
{
    ratel__pair_set(ENTRIES(p), i, off, id);
}

static inline uint32_t entries(const uint8_t *p)
{
    return ratel__ld16(p + RATEL__CONC_N);
}

/* now in ms, clamped to the record's base (a clock gone back). */
static int64_t clamp_ms(const uint8_t *p, int64_t now_us)
{
    int64_t base = ratel__ld64(p + RATEL__CONC_BASE), now_ms = now_us / 1000;
    return now_ms < base ? base : now_ms;
}

/* Entries at the head that have expired at now_ms (expiry <= now). */
static uint32_t expired(const uint8_t *p, int64_t now_ms)
{
    int64_t base = ratel__ld64(p + RATEL__CONC_BASE);
    uint32_t n = entries(p), i = 0;

    while (i < n && base + entry_off(p, i) <= now_ms)
        i++;
    return i;
}

static int64_t until_us(int64_t at_ms, int64_t now_us)
{
    int64_t d = at_ms * 1000 - now_us;
    return d > 0 ? d : 0;
}

static void status_at(const uint8_t *p, uint32_t limit, int64_t now_us,
                      ratel__status_t *st)
{
    uint32_t n = entries(p), held = n - expired(p, clamp_ms(p, now_us));

    st->used = held;
    st->remaining = held < limit ? limit - held : 0;
    st->reset_us =
        held > 0
            ? until_us(ratel__ld64(p + RATEL__CONC_BASE) + entry_off(p, n - 1),
                       now_us)
            : 0;
}

static void concurrent_status(const ratel__record_t *r, int64_t now_us,
                              ratel__status_t *st)
{
    status_at(r->p, r->rule.limit, now_us, st);
}

/* Whether `id` is held by a live entry (from `from` on). */
static int held_id(const uint8_t *p, uint32_t from, uint32_t id)
{
    uint32_t n = entries(p);
    for (uint32_t i = from; i < n; i++)
        if (entry_id(p, i) == id)
            return 1;
    return 0;
}

/* The id the next lease gets: after the last one, skipping 0 and live ids
   (at most RATEL_CONCURRENT_MAX of them, so the loop ends). */
static uint32_t next_id(const uint8_t *p, uint32_t from)
{
    uint32_t id = ratel__ld32(p + RATEL__CONC_LAST);
    do
        id = id == UINT32_MAX ? 1 : id + 1;
    while (held_id(p, from, id));
    return id;
}

static void concurrent_decide(const ratel__record_t *r, int64_t now_us,
                              uint64_t cost, ratel__verdict_t *v)
{
    const uint8_t *p = r->p;
    int64_t now_ms = clamp_ms(p, now_us);
    uint32_t n = entries(p), drop = expired(p, now_ms);
    int64_t held = n - drop, need = held + (int64_t)cost - r->rule.limit;

    v->drop = drop;
    v->total = held;
    v->allowed = need <= 0;
    v->grow = v->allowed ? (size_t)cost * RATEL__CONC_ENTRY_SIZE : 0;
    v->lease = v->allowed ? next_id(p, drop) : 0;
    /* Denied: the request fits once the `need` leases that expire first
       have gone (cost <= limit, so there are that many). */
    v->retry_us = v->allowed
                      ? 0
                      : until_us(ratel__ld64(p + RATEL__CONC_BASE) +
                                     entry_off(p, drop + (uint32_t)need - 1),
                                 now_us);
}

/*
 * Drops the first `drop` entries and rebases the others on now_ms (every
 * live expiry lies in (now, now + PERIOD]). Returns the entries left.
 */
static uint32_t rebase(uint8_t *p, uint32_t drop, int64_t now_ms)
{
    int64_t base = ratel__ld64(p + RATEL__CONC_BASE);
    uint32_t n = entries(p) - drop;

    for (uint32_t i = 0; i < n; i++)
        entry_set(p, i, (uint32_t)(base + entry_off(p, drop + i) - now_ms),
                  entry_id(p, drop + i));
    ratel__st64(p + RATEL__CONC_BASE, now_ms);
    return n;
}

/* Stores the entry count and returns the record's size. */
static size_t set_entries(ratel__record_t *r, uint32_t n)
{
    ratel__st16(r->p + RATEL__CONC_N, (uint16_t)n);
    r->size = RATEL__CONC_ENTRIES + (size_t)n * RATEL__CONC_ENTRY_SIZE;
    return r->size;
}

static size_t concurrent_commit(ratel__record_t *r, int64_t now_us,
                                int64_t at_us, uint64_t cost,
                                const ratel__verdict_t *v,
                                ratel__status_t *after)
{
    uint8_t *p = r->p;
    int64_t now_ms = clamp_ms(p, now_us);
    uint32_t n = rebase(p, v->drop, now_ms);

    (void)at_us;
    for (uint64_t c = 0; c < cost; c++)
        entry_set(p, n++, r->rule.period_ms, v->lease);
    ratel__st32(p + RATEL__CONC_LAST, v->lease);
    set_entries(r, n);
    status_at(p, r->rule.limit, now_us, after);
    return r->size;
}

/* Gives back the newest permits first (the latest lease's). */
static size_t concurrent_refund(ratel__record_t *r, int64_t now_us,
                                uint64_t cost)
{
    uint8_t *p = r->p;
    int64_t now_ms = clamp_ms(p, now_us);
    uint32_t n = rebase(p, expired(p, now_ms), now_ms);

    n = cost < n ? n - (uint32_t)cost : 0;
    return set_entries(r, n);
}

/*
 * Releases (or, with `renew`, extends to now + PERIOD) the lease `id`:
 * removes its entries, and appends them again when renewing. *held says
 * whether the lease was held (0: unknown or expired, nothing changed but
 * the expired entries dropped). Returns the record's new size.
 */
static size_t concurrent_lease(ratel__record_t *r, int64_t now_us, uint32_t id,
                               int renew, int *held)
{
    uint8_t *p = r->p;
    int64_t now_ms = clamp_ms(p, now_us);
    uint32_t n = rebase(p, expired(p, now_ms), now_ms), kept = 0, count = 0;

    for (uint32_t i = 0; i < n; i++) {
        if (id != 0 && entry_id(p, i) == id)
            count++;
        else
            entry_set(p, kept++, entry_off(p, i), entry_id(p, i));
    }
    for (uint32_t c = 0; renew && c < count; c++)
        entry_set(p, kept++, r->rule.period_ms, id);
    *held = count > 0;
    return set_entries(r, kept);
}

/*
 * Entries are in order of expiry, no id is 0, no expiry lies more than
 * PERIOD past the base, and there are at most RATEL_CONCURRENT_MAX.
 */
static int concurrent_check(const uint8_t *p, size_t avail,
                            const ratel_rule_t *rule, ratel__record_t *rec)
{
    uint32_t n, prev = 0, bad = 0;
    size_t size;

    if (avail < RATEL__CONC_ENTRIES)
        return RATEL_ECORRUPT;
    n = entries(p);
    size = RATEL__CONC_ENTRIES + (size_t)n * RATEL__CONC_ENTRY_SIZE;
    if (n > RATEL_CONCURRENT_MAX || avail < size ||
        !ratel__time_ms_ok(ratel__ld64(p + RATEL__CONC_BASE)))
        return RATEL_ECORRUPT;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t off = entry_off(p, i);
        bad |= (off < prev) | (off > rule->period_ms) | (entry_id(p, i) == 0);
        prev = off;
    }
    if (bad)
        return RATEL_ECORRUPT;
    rec->size = size;
    return 0;
}

static void concurrent_locate(ratel__record_t *r)
{
    r->size =
        RATEL__CONC_ENTRIES + (size_t)entries(r->p) * RATEL__CONC_ENTRY_SIZE;
    r->sum = 0;
}

static void concurrent_inspect(const ratel__record_t *r,
                               ratel_rule_status_t *out)
{
    out->last_lease = ratel__ld32(r->p + RATEL__CONC_LAST);
}

/* ratel_rule_explain()'s sentence. */
static int concurrent_explain(const ratel_rule_t *rule,
                              const ratel__rule_words_t *w, char *buf,
                              size_t buflen)
{
    return snprintf(buf, buflen,
                    "at most %u %s in flight at once, each lease "
                    "released by the caller or expiring after %s",
                    rule->limit, w->requests, w->lifetime);
}

const ratel__algo_t ratel__algo_concurrent = {
    .rule_size = RATEL__RULE_SIZE,
    .empty_size = RATEL__CONC_ENTRIES,
    .max_size = RATEL__CONC_MAX_SIZE,
    .max_flags = 0,
    .limit_max = RATEL_CONCURRENT_MAX,
    .limit_words = "leases at once (its state keeps each one)",
    .check = concurrent_check,
    .locate = concurrent_locate,
    .status = concurrent_status,
    .decide = concurrent_decide,
    .commit = concurrent_commit,
    .refund = concurrent_refund,
    .convert = ratel__convert_keep,
    .inspect = concurrent_inspect,
    .lease = concurrent_lease,
    .explain = concurrent_explain,
};
