/*
 * slice.c - slices of a policy's permits for hosts that spend them
 * locally (hot keys, docs/leases.md): ratel_policy_slice() charges the
 * most that every rule admits now, up to what the host wants, in one
 * call, and says until when the host may spend it; ratel_policy_slice_
 * return() gives back what was not spent while the slice is alive.
 * Several holders of one key share it fairly: ratel_slice_demand_note()
 * keeps their recent wants in a small record beside the key, and
 * ratel_policy_slice_shared() grants each its part of what is left
 * (ratel_slice_share()). lua/slice.lua is the same, line for line.
 *
 * Built on the policy's own decisions (peeks, an acquire, a refund), so
 * a slice is charged exactly as that many requests at once would be: the
 * state's bytes are the policy's, whatever backend holds them.
 */
#include "internal.h"

/* Whether `cost` permits are admitted by every rule now (a peek). */
static int fits(const ratel_policy_t *policy, uint8_t *state, size_t *state_len,
                size_t state_cap, int64_t now_us, uint64_t cost,
                ratel_decision_t *d, int *err)
{
    ratel_request_t req = {.cost = cost, .flags = RATEL_PEEK};
    size_t len = *state_len;

    *err =
        ratel_policy_acquire(policy, state, &len, state_cap, now_us, &req, d);
    return *err == 0 && d->allowed;
}

/*
 * The most permits up to `want` that every rule admits now: `want` when
 * it fits, else the largest that does (a search over peeks: admission is
 * monotone in the cost), 0 when not even one does (d then says when).
 */
static uint64_t most_that_fits(const ratel_policy_t *policy, uint8_t *state,
                               size_t *state_len, size_t state_cap,
                               int64_t now_us, uint64_t want,
                               ratel_decision_t *d, int *err)
{
    uint64_t lo = 0, hi = want;
    ratel_decision_t probe;

    if (fits(policy, state, state_len, state_cap, now_us, want, d, err))
        return want;
    if (*err || want == 1)
        return 0;
    /* lo fits (0 trivially), hi does not. */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (fits(policy, state, state_len, state_cap, now_us, mid, &probe, err))
            lo = mid;
        else if (*err)
            return 0;
        else
            hi = mid;
    }
    if (lo == 0)
        (void)fits(policy, state, state_len, state_cap, now_us, 1, d, err);
    return lo;
}

/* Until when a slice charged at now_us may be spent: ttl, and never past
   the current window of a windowed rule (fixed, approx: its permits count
   in that window only). */
static int64_t slice_end(const ratel_policy_t *policy, int64_t now_us,
                         int64_t ttl_us)
{
    int64_t end = now_us + ttl_us;

    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *r = &policy->rules[i];
        int64_t ws, we;
        if (r->algo != RATEL_ALGO_FIXED && r->algo != RATEL_ALGO_APPROX)
            continue;
        ratel__window(r, now_us / 1000, &ws, &we);
        if (we * 1000 < end)
            end = we * 1000;
    }
    return end;
}

uint64_t ratel_slice_share(uint64_t want, uint64_t total, uint64_t avail)
{
    uint64_t share;

    if (avail >= total)
        return want;
    /* avail < total <= 16 x 10^9 and want <= 10^9: the product fits. */
    share = avail * want / total;
    share = share > 0 ? share : 1;
    return share < avail ? share : avail;
}

int ratel_policy_slice(const ratel_policy_t *policy, uint8_t *state,
                       size_t *state_len, size_t state_cap, int64_t now_us,
                       uint64_t want, int64_t ttl_us, uint64_t *granted,
                       int64_t *expires_us, ratel_decision_t *d)
{
    return ratel_policy_slice_shared(policy, state, state_len, state_cap,
                                     now_us, want, want, ttl_us, granted,
                                     expires_us, d);
}

int ratel_policy_slice_shared(const ratel_policy_t *policy, uint8_t *state,
                              size_t *state_len, size_t state_cap,
                              int64_t now_us, uint64_t want, uint64_t total,
                              int64_t ttl_us, uint64_t *granted,
                              int64_t *expires_us, ratel_decision_t *d)
{
    ratel_request_t req = RATEL_REQUEST_INIT;
    uint64_t cap = RATEL_LIMIT_MAX, avail;
    int err = 0;

    if (!policy || !state_len || !granted || !expires_us || !d || want == 0 ||
        want > RATEL_LIMIT_MAX || total < want ||
        total > (uint64_t)RATEL_DEMAND_HOLDERS * RATEL_LIMIT_MAX ||
        ttl_us <= 0 || ttl_us > RATEL_SLICE_TTL_MAX_US ||
        ratel_policy_has_leases(policy))
        return RATEL_EINVAL;
    *granted = 0;
    *expires_us = 0;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        uint64_t c = ratel_rule_capacity(&policy->rules[i]);
        cap = c < cap ? c : cap;
    }
    avail = most_that_fits(policy, state, state_len, state_cap, now_us,
                           total < cap ? total : cap, d, &err);
    if (err || avail == 0)
        return err;
    /* Admission is monotone in the cost: the share, at most avail, fits. */
    req.cost = ratel_slice_share(want, total, avail);
    if ((err = ratel_policy_acquire(policy, state, state_len, state_cap, now_us,
                                    &req, d)) != 0)
        return err;
    if (!d->allowed) /* cannot happen: the peek admitted it */
        return 0;
    *granted = req.cost;
    *expires_us = slice_end(policy, now_us, ttl_us);
    return 0;
}

int ratel_policy_slice_return(const ratel_policy_t *policy, uint8_t *state,
                              size_t *state_len, size_t state_cap,
                              int64_t now_us, uint64_t unspent,
                              int64_t expires_us, uint64_t *returned,
                              ratel_decision_t *d)
{
    if (!policy || !state_len || !returned || !d || unspent == 0 ||
        ratel_policy_has_leases(policy))
        return RATEL_EINVAL;
    *returned = 0;
    if (now_us >= expires_us) {
        /* Ended: its permits are spent or stranded, never given twice. A
           peek says how the key stands. */
        ratel_request_t peek = {.cost = 1, .flags = RATEL_PEEK};
        size_t len = *state_len;
        return ratel_policy_acquire(policy, state, &len, state_cap, now_us,
                                    &peek, d);
    }
    *returned = unspent;
    return ratel_policy_refund(policy, state, state_len, state_cap, now_us,
                               unspent, d);
}

/* ------------------------------------------------------ demand records */

/* The record's header: "RD" (ratel demand), version 1, entry count. */
#define DEMAND_MAGIC0 0x52
#define DEMAND_MAGIC1 0x44
#define DEMAND_VERSION 1

/* One holder's entry, as the record stores it (little-endian). */
typedef struct demand_entry_s {
    uint64_t holder;
    int64_t at_ms;
    uint32_t want;
} demand_entry_t;

static void demand_read(const uint8_t *p, demand_entry_t *e)
{
    e->holder = (uint64_t)ratel__ld64(p);
    e->at_ms = ratel__ld64(p + 8);
    e->want = ratel__ld32(p + 16);
}

static void demand_write(uint8_t *p, const demand_entry_t *e)
{
    ratel__st64(p, (int64_t)e->holder);
    ratel__st64(p + 8, e->at_ms);
    ratel__st32(p + 16, e->want);
}

/* The entries of a record's bytes, checked: the count, or a negative
   RATEL_E* code. */
static int demand_parse(const uint8_t *rec, size_t len, demand_entry_t *out)
{
    uint32_t n;

    if (len == 0)
        return 0;
    if (len < 4 || rec[0] != DEMAND_MAGIC0 || rec[1] != DEMAND_MAGIC1)
        return RATEL_ECORRUPT;
    if (rec[2] != DEMAND_VERSION)
        return rec[2] > DEMAND_VERSION ? RATEL_EVERSION : RATEL_ECORRUPT;
    n = rec[3];
    if (n < 1 || n > RATEL_DEMAND_HOLDERS ||
        len != 4 + (size_t)n * RATEL_DEMAND_ENTRY_SIZE)
        return RATEL_ECORRUPT;
    for (uint32_t i = 0; i < n; i++) {
        demand_read(rec + 4 + i * RATEL_DEMAND_ENTRY_SIZE, &out[i]);
        if (out[i].holder < 1 || out[i].holder > RATEL_HOLDER_MAX ||
            out[i].at_ms < 0 || out[i].at_ms > RATEL_AT_MAX_MS ||
            out[i].want < 1 || out[i].want > RATEL_LIMIT_MAX)
            return RATEL_ECORRUPT;
    }
    return (int)n;
}

int ratel_slice_demand_note(uint8_t *record, size_t *len, size_t cap,
                            int64_t now_ms, int64_t ttl_ms, uint64_t holder,
                            uint64_t want, uint64_t *total)
{
    demand_entry_t e[RATEL_DEMAND_HOLDERS + 1];
    int n, kept = 0, first;

    if (!record || !len || !total || now_ms < 0 || now_ms > RATEL_AT_MAX_MS ||
        ttl_ms < 1 || ttl_ms > RATEL_SLICE_TTL_MAX_MS || holder < 1 ||
        holder > RATEL_HOLDER_MAX || want < 1 || want > RATEL_LIMIT_MAX)
        return RATEL_EINVAL;
    if ((n = demand_parse(record, *len, e)) < 0)
        return n;
    /* The live entries of other holders, in their order, then this one. */
    for (int i = 0; i < n; i++)
        if (e[i].holder != holder && now_ms < e[i].at_ms + 2 * ttl_ms)
            e[kept++] = e[i];
    e[kept++] = (demand_entry_t){holder, now_ms, (uint32_t)want};
    first = kept > RATEL_DEMAND_HOLDERS ? kept - RATEL_DEMAND_HOLDERS : 0;
    if (cap < 4 + (size_t)(kept - first) * RATEL_DEMAND_ENTRY_SIZE) {
        *len = 4 + (size_t)(kept - first) * RATEL_DEMAND_ENTRY_SIZE;
        return RATEL_ENOBUFS;
    }
    *total = 0;
    record[0] = DEMAND_MAGIC0;
    record[1] = DEMAND_MAGIC1;
    record[2] = DEMAND_VERSION;
    record[3] = (uint8_t)(kept - first);
    for (int i = first; i < kept; i++) {
        demand_write(record + 4 + (i - first) * RATEL_DEMAND_ENTRY_SIZE, &e[i]);
        *total += e[i].want;
    }
    *len = 4 + (size_t)(kept - first) * RATEL_DEMAND_ENTRY_SIZE;
    return 0;
}
