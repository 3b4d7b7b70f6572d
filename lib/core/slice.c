/*
 * slice.c - slices of a policy's permits for hosts that spend them
 * locally (hot keys, docs/leases.md): ratel_policy_slice() charges the
 * most that every rule admits now, up to what the host wants, in one
 * call, and says until when the host may spend it; ratel_policy_slice_
 * return() gives back what was not spent while the slice is alive.
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
    ratel_request_t req = {cost, 0, RATEL_PEEK};
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

int ratel_policy_slice(const ratel_policy_t *policy, uint8_t *state,
                       size_t *state_len, size_t state_cap, int64_t now_us,
                       uint64_t want, int64_t ttl_us, uint64_t *granted,
                       int64_t *expires_us, ratel_decision_t *d)
{
    ratel_request_t req = RATEL_REQUEST_INIT;
    uint64_t cap = RATEL_LIMIT_MAX;
    int err = 0;

    if (!policy || !state_len || !granted || !expires_us || !d || want == 0 ||
        ttl_us <= 0 || ttl_us > RATEL_SLICE_TTL_MAX_US ||
        ratel_policy_has_leases(policy))
        return RATEL_EINVAL;
    *granted = 0;
    *expires_us = 0;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        uint64_t c = ratel_rule_capacity(&policy->rules[i]);
        cap = c < cap ? c : cap;
    }
    req.cost = most_that_fits(policy, state, state_len, state_cap, now_us,
                              want < cap ? want : cap, d, &err);
    if (err || req.cost == 0)
        return err;
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
        ratel_request_t peek = {1, 0, RATEL_PEEK};
        size_t len = *state_len;
        return ratel_policy_acquire(policy, state, &len, state_cap, now_us,
                                    &peek, d);
    }
    *returned = unspent;
    return ratel_policy_refund(policy, state, state_len, state_cap, now_us,
                               unspent, d);
}
