/*
 * policy.c - rules applied to one key together: all-or-nothing.
 *
 * A request is first decided by every rule without writing anything
 * (ratel__verdict_t); only if all admit it is each rule charged. A rejected
 * request therefore charges no rule. The decision reports the binding rule:
 * the one that denies longest, or, when admitted, the one with the fewest
 * permits left. Because each rule on its own admits a request from some
 * instant onwards (its "allowed" is monotone in time when nothing else
 * happens), the request fits all rules exactly at the latest of their retry
 * instants: retry_after is exact for the policy too.
 */
#include "internal.h"
#include "owned.h"

#include <stdio.h>

int ratel_policy_init(ratel_policy_t *policy, const ratel_rule_t *rules,
                      size_t n, char *errbuf, size_t errlen)
{
    if (n > RATEL_MAX_RULES) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen,
                     "policy: %zu rules given, at most %d are allowed", n,
                     RATEL_MAX_RULES);
        return RATEL_ETOOMANY;
    }
    if (!policy || n == 0 || !rules) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "policy: needs at least one rule");
        return RATEL_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        /* Checked bare first: formatting the message costs more than the
           check, and valid rules (every call of the module) need none. */
        int err = ratel__rule_check(&rules[i], NULL, 0);
        if (err) {
            ratel__rule_check(&rules[i], errbuf, errlen);
            return err;
        }
        for (size_t j = 0; j < i; j++) {
            if (ratel__facts(rules[i].algo) & ratel__facts(rules[j].algo) &
                RATEL_ALGO_LEASES) {
                if (errbuf && errlen)
                    snprintf(errbuf, errlen,
                             "policy: rules %zu and %zu are both %s; "
                             "a policy holds at most one (a decision carries "
                             "one lease)",
                             j + 1, i + 1, ratel_algo_name(rules[i].algo));
                return RATEL_EINVAL;
            }
            if (ratel__rule_equal(&rules[i], &rules[j])) {
                char text[64];
                ratel_rule_format(&rules[i], text, sizeof text);
                if (errbuf && errlen)
                    snprintf(errbuf, errlen,
                             "policy: rule %zu (\"%s\") repeats rule %zu",
                             i + 1, text, j + 1);
                return RATEL_EINVAL;
            }
        }
    }
    memset(policy, 0, sizeof *policy);
    policy->nrules = (uint32_t)n;
    memcpy(policy->rules, rules, n * sizeof *rules);
    return 0;
}

int ratel_policy_parse(ratel_policy_t *policy, const char *const *texts,
                       size_t n, char *errbuf, size_t errlen)
{
    ratel_rule_t rules[RATEL_MAX_RULES];

    if (n > RATEL_MAX_RULES || !texts)
        return ratel_policy_init(policy, NULL, n, errbuf, errlen);
    for (size_t i = 0; i < n; i++) {
        int err = texts[i] ? ratel_rule_parse(texts[i], strlen(texts[i]),
                                              &rules[i], errbuf, errlen)
                           : ratel_rule_parse("", 0, &rules[i], errbuf, errlen);
        if (err)
            return err;
    }
    return ratel_policy_init(policy, rules, n, errbuf, errlen);
}

size_t ratel_policy_state_max(const ratel_policy_t *policy)
{
    size_t size = RATEL__HEADER_SIZE;
    for (uint32_t i = 0; policy && i < policy->nrules; i++)
        size += ratel__record_max_size(&policy->rules[i]);
    return size;
}

/* ------------------------------------------------------------ conversion */

static int rules_match(const ratel_policy_t *policy, const ratel__record_t *rec,
                       uint32_t n)
{
    if (n != policy->nrules)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (!ratel__rule_equal(&rec[i].rule, &policy->rules[i]))
            return 0;
    return 1;
}

/*
 * Writes into `out` the blob for `policy` built from the old records (none
 * for a fresh key), following the documented rule: an identical rule keeps
 * its state; a rule with the same algorithm and period but another limit or
 * burst keeps its counts (gcra: the permits owed, capped at the new burst);
 * any other rule starts empty. Returns the blob's length.
 */
static size_t convert(const ratel_policy_t *policy, const ratel__record_t *old,
                      uint32_t nold, int64_t now_us, uint8_t *out)
{
    size_t off = RATEL__HEADER_SIZE;
    unsigned used = 0; /* bit j: old record j already taken */

    ratel__header_write(out, policy->nrules);
    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *rule = &policy->rules[i];
        int from = -1;
        for (uint32_t j = 0; j < nold && from < 0; j++)
            if (!(used & (1u << j)) && ratel__rule_equal(&old[j].rule, rule))
                from = (int)j;
        for (uint32_t j = 0; j < nold && from < 0; j++)
            if (!(used & (1u << j)) &&
                ratel__rule_same_period(&old[j].rule, rule))
                from = (int)j;
        if (from < 0) {
            ratel__record_write_empty(out + off, rule);
            off += ratel__record_empty_size(rule);
            continue;
        }
        used |= 1u << from;
        off += ratel__algo(rule)->convert(&old[from], out + off, rule, now_us);
    }
    return off;
}

/* Locates the records of a blob this file wrote itself (already valid). */
static void locate(uint8_t *blob, const ratel_policy_t *policy,
                   ratel__record_t *rec)
{
    uint8_t *p = blob + RATEL__HEADER_SIZE;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        rec[i].p = p;
        rec[i].rule = policy->rules[i];
        ratel__locate(&rec[i]);
        p += rec[i].size;
    }
}

/* ------------------------------------------------------------- deciding */

/* Every rule's verdict on one request, and what the policy makes of them. */
typedef struct plan_s {
    ratel__verdict_t v[RATEL_MAX_RULES];
    int allowed;     /* the policy admits the request */
    int64_t at_us;   /* the instant it is admitted at (now, or later) */
    int64_t wait_us; /* at_us - now */
    size_t grow;     /* bytes the commit may add to the blob */
} plan_t;

static void decide_rule(const ratel__record_t *r, int64_t now_us, uint64_t cost,
                        ratel__verdict_t *v)
{
    v->lease = 0;
    ratel__decide(r, now_us, cost, v);
}

static void status_rule(const ratel__record_t *r, int64_t now_us,
                        ratel__status_t *st)
{
    ratel__status(r, now_us, st);
}

static void decide_all(const ratel__record_t *rec, uint32_t n, int64_t now_us,
                       const ratel_request_t *req, plan_t *plan)
{
    int all = 1;
    int64_t at = now_us;

    plan->grow = 0;
    for (uint32_t i = 0; i < n; i++) {
        decide_rule(&rec[i], now_us, req->cost, &plan->v[i]);
        all &= plan->v[i].allowed;
        plan->grow += plan->v[i].grow;
        if ((ratel__facts(rec[i].rule.algo) & RATEL_ALGO_RESERVES) &&
            plan->v[i].allow_at_us > at)
            at = plan->v[i].allow_at_us;
    }
    plan->allowed = all;
    plan->at_us = now_us;
    plan->wait_us = 0;
    /* Reservations: every rule is gcra here (checked up front). */
    if (!all && req->max_wait_ms > 0 &&
        at - now_us <= req->max_wait_ms * 1000) {
        plan->allowed = 1;
        plan->at_us = at;
        plan->wait_us = at - now_us;
    }
}

/* Fills the public decision from the plan and each rule's status. */
static void report(const ratel_policy_t *policy, const ratel__status_t *st,
                   const plan_t *plan, ratel_decision_t *d)
{
    int rule = 0;
    int64_t retry = 0, remaining = INT64_MAX, reset = 0;
    /* Allowed, the binding rule is the one closest to exhaustion (the
       first of those equally close, as the module and Lua script say). */

    for (uint32_t i = 0; i < policy->nrules; i++) {
        if (!plan->allowed && plan->v[i].retry_us > retry) {
            retry = plan->v[i].retry_us;
            rule = (int)i;
        }
        if (st[i].remaining < remaining) {
            remaining = st[i].remaining;
            if (plan->allowed)
                rule = (int)i;
        }
        if (st[i].reset_us > reset)
            reset = st[i].reset_us;
    }
    d->allowed = plan->allowed;
    d->rule = rule;
    d->limit = policy->rules[rule].limit;
    d->remaining = remaining;
    d->retry_after_ms = plan->allowed ? 0 : ratel__ceil_div(retry, 1000);
    d->reset_after_ms = ratel__ceil_div(reset, 1000);
    d->rule_reset_ms = ratel__ceil_div(st[rule].reset_us, 1000);
    d->wait_ms = ratel__ceil_div(plan->wait_us, 1000);
    d->source = RATEL_SOURCE_STORE;
    d->lease = 0;
}

/* The lease a charged request took: its concurrent rule's, if any. */
static uint32_t lease_of(const plan_t *plan, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (plan->v[i].lease)
            return plan->v[i].lease;
    return 0;
}

/*
 * Charges every rule in place in `buf` (*len bytes, room for *len +
 * plan->grow). Records that change size move the ones after them.
 */
static void commit_all(ratel__record_t *rec, uint32_t n, uint8_t *buf,
                       size_t *len, int64_t now_us, uint64_t cost,
                       const plan_t *plan, ratel__status_t *after)
{
    size_t end = *len;
    ptrdiff_t moved = 0;

    for (uint32_t i = 0; i < n; i++) {
        const ratel__verdict_t *v = &plan->v[i];
        ratel__record_t *r = &rec[i];
        size_t old = r->size, now_size;
        uint8_t *tail;
        size_t tail_len;

        r->p += moved;
        tail = r->p + old;
        tail_len = (size_t)(buf + end - tail);
        if (v->grow)
            memmove(tail + v->grow, tail, tail_len);
        now_size = ratel__commit(r, now_us, plan->at_us, cost, v, &after[i]);
        if (now_size != old + v->grow)
            memmove(r->p + now_size, tail + v->grow, tail_len);
        end = end - old + now_size;
        moved += (ptrdiff_t)now_size - (ptrdiff_t)old;
    }
    *len = end;
}

/* Checks what every entry point checks. */
static int check_call(const ratel_policy_t *policy, const uint8_t *state,
                      const size_t *state_len, int64_t now_us, uint64_t cost)
{
    if (!policy || policy->nrules < 1 || policy->nrules > RATEL_MAX_RULES ||
        !state_len || (!state && *state_len > 0) || cost < 1 || now_us < 0 ||
        now_us >= RATEL_TIME_MAX_US)
        return RATEL_EINVAL;
    return 0;
}

/*
 * The rest of an acquire once the records of `buf` match the policy: decide,
 * and unless denied or peeking, charge. `fresh` holds the blob to start from
 * when it is not `buf` itself (a new or converted key): it is copied into
 * `buf` if something is charged, or if `convert_on_deny` and denied.
 */
static int finish_acquire(const ratel_policy_t *policy, ratel__record_t *rec,
                          const uint8_t *fresh, size_t fresh_len,
                          int convert_on_deny, uint8_t *buf, size_t *len,
                          size_t cap, int64_t now_us,
                          const ratel_request_t *req, ratel_decision_t *d)
{
    plan_t plan;
    ratel__status_t st[RATEL_MAX_RULES] = {
        {0, 0, 0}}; /* gcc cannot see all set */
    uint32_t n = policy->nrules;
    size_t cur_len = fresh ? fresh_len : *len;

    decide_all(rec, n, now_us, req, &plan);
    if (!plan.allowed || (req->flags & RATEL_PEEK)) {
        /* Nothing charged: report the key as it is. */
        for (uint32_t i = 0; i < n; i++)
            status_rule(&rec[i], now_us, &st[i]);
        report(policy, st, &plan, d);
        /*
         * A denied key written under other rules keeps its converted state,
         * so a retry at retry_after_ms decides on the same state (gcra's
         * conversion depends on now). New keys stay unstored.
         */
        if (fresh && convert_on_deny && !(req->flags & RATEL_PEEK)) {
            if (fresh_len > cap) {
                *len = fresh_len;
                return RATEL_ENOBUFS;
            }
            memcpy(buf, fresh, fresh_len);
            *len = fresh_len;
        }
        return 0;
    }
    if (cur_len + plan.grow > cap) {
        *len = cur_len + plan.grow;
        return RATEL_ENOBUFS;
    }
    if (fresh) {
        memcpy(buf, fresh, fresh_len);
        locate(buf, policy, rec);
    }
    commit_all(rec, n, buf, &cur_len, now_us, req->cost, &plan, st);
    *len = cur_len;
    report(policy, st, &plan, d);
    d->lease = lease_of(&plan, n);
    return 0;
}

/*
 * finish_acquire for the most common call: one rule, a blob already in its
 * format, no reservation. The same steps without the plan's arrays and the
 * loops over rules; test_policy checks both paths decide alike.
 */
static int finish_one(const ratel_policy_t *policy, ratel__record_t *rec,
                      size_t *len, size_t cap, int64_t now_us,
                      const ratel_request_t *req, ratel_decision_t *d)
{
    ratel__verdict_t v;
    ratel__status_t st;

    decide_rule(rec, now_us, req->cost, &v);
    d->allowed = v.allowed;
    if (!v.allowed || (req->flags & RATEL_PEEK)) {
        status_rule(rec, now_us, &st);
    } else {
        if (*len + v.grow > cap) {
            *len += v.grow;
            return RATEL_ENOBUFS;
        }
        *len = RATEL__HEADER_SIZE +
               ratel__commit(rec, now_us, now_us, req->cost, &v, &st);
    }
    d->rule = 0;
    d->limit = policy->rules[0].limit;
    d->remaining = st.remaining;
    d->retry_after_ms = v.allowed ? 0 : ratel__ceil_div(v.retry_us, 1000);
    d->reset_after_ms = ratel__ceil_div(st.reset_us, 1000);
    d->rule_reset_ms = d->reset_after_ms;
    d->wait_ms = 0;
    d->source = RATEL_SOURCE_STORE;
    d->lease = v.allowed && !(req->flags & RATEL_PEEK) ? v.lease : 0;
    return 0;
}

/* The slow path: a new key, or one written under other rules. */
static __attribute__((noinline)) int
acquire_converted(const ratel_policy_t *policy, const ratel__record_t *old,
                  uint32_t nold, uint8_t *state, size_t *state_len,
                  size_t state_cap, int64_t now_us, const ratel_request_t *req,
                  ratel_decision_t *d)
{
    uint8_t scratch[RATEL__STATE_MAX];
    ratel__record_t rec[RATEL_MAX_RULES];
    size_t len = convert(policy, old, nold, now_us, scratch);

    locate(scratch, policy, rec);
    return finish_acquire(policy, rec, scratch, len, nold > 0, state, state_len,
                          state_cap, now_us, req, d);
}

int ratel_policy_check_request(const ratel_policy_t *policy,
                               const ratel_request_t *req, size_t *rule)
{
    if (!policy || !req || policy->nrules < 1 ||
        policy->nrules > RATEL_MAX_RULES || req->cost < 1 ||
        req->max_wait_ms < 0 || req->max_wait_ms > RATEL__MAX_WAIT_MS)
        return RATEL_EINVAL;
    /* Every rule admits one permit without a reservation: the common
       request needs no look at the rules. */
    if (req->cost == 1 && req->max_wait_ms == 0)
        return 0;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        if (req->cost > ratel_rule_capacity(&policy->rules[i])) {
            if (rule)
                *rule = i;
            return RATEL_ECOST;
        }
        if (req->max_wait_ms > 0 &&
            !(ratel__facts(policy->rules[i].algo) & RATEL_ALGO_RESERVES)) {
            if (rule)
                *rule = i;
            return RATEL_EINVAL;
        }
    }
    return 0;
}

/* How acquire() trusts and treats the blob it is given. */
enum {
    BLOB_ANY,      /* from anywhere: checked in full */
    BLOB_OWNED,    /* written by this process's core */
    BLOB_IN_PLACE, /* owned, and decided only if under the policy's rules */
};

static int acquire(const ratel_policy_t *policy, uint8_t *state,
                   size_t *state_len, size_t state_cap, int64_t now_us,
                   const ratel_request_t *req, ratel_decision_t *d, int blob)
{
    int owned = blob != BLOB_ANY;
    ratel__record_t rec[RATEL_MAX_RULES];
    uint32_t n = 0;
    int err;

    if (!req || !d ||
        (err = check_call(policy, state, state_len, now_us, req->cost)) != 0)
        return RATEL_EINVAL;
    if ((err = ratel_policy_check_request(policy, req, NULL)) != 0)
        return err;
    if (*state_len > 0 &&
        ratel__state_match(policy, state, *state_len, rec, owned)) {
        if (policy->nrules == 1 && req->max_wait_ms == 0)
            return finish_one(policy, rec, state_len, state_cap, now_us, req,
                              d);
        return finish_acquire(policy, rec, NULL, 0, 0, state, state_len,
                              state_cap, now_us, req, d);
    }
    /* Another policy's blob (or a corrupt one) is left as it is. */
    if (blob == BLOB_IN_PLACE && *state_len > 0)
        return 1;
    /*
     * A new key under one rule is always admitted (cost <= capacity): its
     * empty record is written in place and charged, with no scratch copy.
     */
    if (*state_len == 0 && policy->nrules == 1 && req->max_wait_ms == 0 &&
        !(req->flags & RATEL_PEEK) &&
        state_cap >=
            RATEL__HEADER_SIZE + ratel__record_empty_size(&policy->rules[0])) {
        ratel__header_write(state, 1);
        ratel__record_write_empty(state + RATEL__HEADER_SIZE,
                                  &policy->rules[0]);
        *state_len =
            RATEL__HEADER_SIZE + ratel__record_empty_size(&policy->rules[0]);
        locate(state, policy, rec);
        /* On ENOBUFS *state_len is the size needed, as everywhere. */
        return finish_one(policy, rec, state_len, state_cap, now_us, req, d);
    }
    /* A new key, another policy's blob, or a corrupt one. */
    if (*state_len > 0 &&
        (err = ratel__state_parse(state, *state_len, rec, &n)) != 0)
        return err;
    return acquire_converted(policy, rec, n, state, state_len, state_cap,
                             now_us, req, d);
}

int ratel_policy_acquire(const ratel_policy_t *policy, uint8_t *state,
                         size_t *state_len, size_t state_cap, int64_t now_us,
                         const ratel_request_t *req, ratel_decision_t *d)
{
    return acquire(policy, state, state_len, state_cap, now_us, req, d,
                   BLOB_ANY);
}

int ratel__policy_acquire_owned(const ratel_policy_t *policy, uint8_t *state,
                                size_t *state_len, size_t state_cap,
                                int64_t now_us, const ratel_request_t *req,
                                ratel_decision_t *d)
{
    return acquire(policy, state, state_len, state_cap, now_us, req, d,
                   BLOB_OWNED);
}

int ratel__policy_acquire_in_place(const ratel_policy_t *policy, uint8_t *state,
                                   size_t *state_len, size_t state_cap,
                                   int64_t now_us, const ratel_request_t *req,
                                   ratel_decision_t *d)
{
    return acquire(policy, state, state_len, state_cap, now_us, req, d,
                   BLOB_IN_PLACE);
}

/* ------------------------------------------------- refunding and leases */

/* A change to every record of a blob in place (a refund, a release): it
   updates rec[] and returns the blob's new length, never more than len. */
typedef struct change_s {
    size_t (*apply)(struct change_s *c, ratel__record_t *rec, uint32_t n,
                    uint8_t *buf, size_t len, int64_t now_us);
    uint64_t cost;  /* refund: permits to give back */
    uint32_t lease; /* release: the lease id */
    unsigned flags; /* release: RATEL_RENEW */
    int held;       /* release: whether the lease was held */
} change_t;

/* Moves the records after rec[i] when its size went from `old` to its
   r->size; returns the blob's new end. */
static size_t resized(ratel__record_t *rec, uint32_t n, uint32_t i, size_t old,
                      uint8_t *buf, size_t end)
{
    uint8_t *tail = rec[i].p + old;
    ptrdiff_t moved = (ptrdiff_t)rec[i].size - (ptrdiff_t)old;

    if (moved != 0) {
        memmove(tail + moved, tail, (size_t)(buf + end - tail));
        for (uint32_t j = i + 1; j < n; j++)
            rec[j].p += moved;
    }
    return (size_t)((ptrdiff_t)end + moved);
}

/* Refunds every rule of `buf` in place. */
static size_t refund_all(change_t *c, ratel__record_t *rec, uint32_t n,
                         uint8_t *buf, size_t len, int64_t now_us)
{
    for (uint32_t i = 0; i < n; i++) {
        size_t old = rec[i].size;
        rec[i].size =
            ratel__algo(&rec[i].rule)->refund(&rec[i], now_us, c->cost);
        len = resized(rec, n, i, old, buf, len);
    }
    return len;
}

/* Releases or renews the lease of the (one) concurrent rule. */
static size_t release_lease(change_t *c, ratel__record_t *rec, uint32_t n,
                            uint8_t *buf, size_t len, int64_t now_us)
{
    for (uint32_t i = 0; i < n; i++) {
        size_t old = rec[i].size;
        if (!(ratel__facts(rec[i].rule.algo) & RATEL_ALGO_LEASES))
            continue;
        rec[i].size = ratel__algo(&rec[i].rule)
                          ->lease(&rec[i], now_us, c->lease,
                                  (c->flags & RATEL_RENEW) != 0, &c->held);
        len = resized(rec, n, i, old, buf, len);
    }
    return len;
}

/*
 * Applies `c` to the key's blob under `policy` (converted first when it was
 * written under other rules; a new key starts empty) and reports the key
 * after it as a peek would. A key left empty carries no state.
 */
static int change_key(const ratel_policy_t *policy, uint8_t *state,
                      size_t *state_len, size_t state_cap, int64_t now_us,
                      change_t *c, ratel_decision_t *d)
{
    uint8_t scratch[RATEL__STATE_MAX];
    ratel__record_t rec[RATEL_MAX_RULES];
    ratel__status_t st[RATEL_MAX_RULES] = {{0, 0, 0}};
    ratel_request_t peek = {.cost = 1, .flags = RATEL_PEEK};
    const uint8_t *fresh = NULL;
    plan_t plan;
    uint32_t n = 0, empty = 1;
    size_t len;
    int err;

    if (*state_len > 0 &&
        (err = ratel__state_parse(state, *state_len, rec, &n)) != 0)
        return err;
    if (*state_len > 0 && rules_match(policy, rec, n)) {
        len = c->apply(c, rec, n, state, *state_len, now_us);
    } else {
        /* A new or converted key: change it in scratch, copy if not empty. */
        len = convert(policy, rec, n, now_us, scratch);
        locate(scratch, policy, rec);
        len = c->apply(c, rec, policy->nrules, scratch, len, now_us);
        fresh = scratch;
    }
    decide_all(rec, policy->nrules, now_us, &peek, &plan);
    for (uint32_t i = 0; i < policy->nrules; i++) {
        status_rule(&rec[i], now_us, &st[i]);
        empty &= st[i].reset_us == 0;
    }
    if (fresh && !empty) {
        if (len > state_cap) {
            *state_len = len;
            return RATEL_ENOBUFS;
        }
        memcpy(state, fresh, len);
    }
    report(policy, st, &plan, d);
    *state_len = empty ? 0 : len;
    return 0;
}

int ratel_policy_refund(const ratel_policy_t *policy, uint8_t *state,
                        size_t *state_len, size_t state_cap, int64_t now_us,
                        uint64_t cost, ratel_decision_t *d)
{
    change_t c = {refund_all, cost, 0, 0, 0};
    int err;

    if (!d || (err = check_call(policy, state, state_len, now_us, cost)) != 0)
        return RATEL_EINVAL;
    /* Giving back more than any limit is giving back everything. */
    if (c.cost > RATEL_LIMIT_MAX)
        c.cost = RATEL_LIMIT_MAX;
    return change_key(policy, state, state_len, state_cap, now_us, &c, d);
}

int ratel_policy_release(const ratel_policy_t *policy, uint8_t *state,
                         size_t *state_len, size_t state_cap, int64_t now_us,
                         uint32_t lease, unsigned flags, int *held,
                         ratel_decision_t *d)
{
    change_t c = {release_lease, 0, lease, flags, 0};
    int err;

    if (!d || !held || lease == 0 || (flags & ~RATEL_RENEW) ||
        (err = check_call(policy, state, state_len, now_us, 1)) != 0)
        return RATEL_EINVAL;
    if (!ratel_policy_has_leases(policy))
        return RATEL_EINVAL;
    err = change_key(policy, state, state_len, state_cap, now_us, &c, d);
    *held = c.held;
    return err;
}

int ratel_policy_has_leases(const ratel_policy_t *policy)
{
    for (uint32_t i = 0; policy && i < policy->nrules && i < RATEL_MAX_RULES;
         i++)
        if (ratel_algo_facts(policy->rules[i].algo) & RATEL_ALGO_LEASES)
            return 1;
    return 0;
}
