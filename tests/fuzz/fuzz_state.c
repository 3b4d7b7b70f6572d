/*
 * fuzz_state.c - state blobs: validation, inspection, acquire, refund and
 * release on
 * arbitrary and on damaged bytes.
 *
 * Input layout (missing bytes read as 0, so every input means something):
 *
 *   byte   flags: bits 0-2 rules - 1; bit 3 all rules gcra; bit 4 mutate
 *          mode (below); bits 5-7 start time (base_times[])
 *   13 x rules   algo(1) limit(4) period_ms(4) burst(4), little-endian;
 *          values out of range map to small valid ones, repeats are dropped
 *   byte   operations - 1 (mod 16)
 *   8 x ops      kind(1) cost(1) max_wait(2) delta(4):
 *          kind bits 0-1: 0 release (a policy with a concurrent rule:
 *          lease = cost byte, bit 2 renews; else acquire), 1 acquire,
 *          2 peek, 3 refund; bit 2: pass
 *          max_wait_ms = max_wait^2 (0xffff: out of range); bit 3: a
 *          buffer only as large as the blob (RATEL_ENOBUFS paths); bits 4-7
 *          time step: now += (int32)delta << bits
 *   rest   the state blob the operations start from
 *
 * Every input's whole bytes and its blob go through ratel_state_validate
 * and ratel_state_inspect; then the operations run in order on a copy of
 * the blob in a heap buffer of ratel_policy_state_max(policy) bytes (larger
 * if the blob is), each result feeding the next.
 *
 * Mutate mode ignores the input blob: it builds a valid one by running the
 * operations from an empty key, then tries every truncation and every
 * single-bit flip of it. Each must be rejected or be a blob that inspects,
 * survives acquire and refund, and validates afterwards.
 *
 * Invariants (a violation aborts):
 *   - inspect fails exactly when validate does; errors are ECORRUPT or
 *     EVERSION, and a call that fails leaves the buffer and its length
 *     byte-for-byte unchanged;
 *   - bad arguments (cost above a rule's capacity, max_wait on a policy
 *     that is not all gcra or out of range) fail with ECOST / EINVAL;
 *   - RATEL_ENOBUFS only when the buffer is smaller than state_max, and
 *     the reported size then suffices;
 *   - on success the blob validates, is at most state_max bytes and, if
 *     charged, holds exactly the policy's rules; denied and peeked
 *     requests change nothing;
 *   - decisions are sane: allowed 0/1, rule index in range and limit its
 *     limit, remaining >= 0 and never above a rule's capacity,
 *     retry_after_ms > 0 iff denied, wait_ms only for admitted
 *     reservations and within max_wait; without a reservation a request is
 *     admitted iff its cost is at most `remaining` before it; an admitted
 *     charge leaves at most capacity - cost; a peek decides as the acquire
 *     does; a denied request retried at now + retry_after_ms is admitted;
 *   - a sliding rule still counts an admitted request PERIOD - 1 ms later;
 *   - refund never increases what a rule counts.
 */
#include "ratel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond))                                                           \
            broken(__FILE__, __LINE__, #cond);                                 \
    } while (0)

/* The call being checked, printed when an invariant breaks. */
static struct {
    const char *what;
    const ratel_policy_t *policy;
    const uint8_t *blob;
    size_t len;
    int64_t now_us;
    uint64_t cost;
    unsigned flags;
    int64_t max_wait_ms;
} ctx;

static void set_ctx(const char *what, const ratel_policy_t *policy,
                    const uint8_t *blob, size_t len, int64_t now_us,
                    uint64_t cost, unsigned flags, int64_t max_wait_ms)
{
    ctx.what = what;
    ctx.policy = policy;
    ctx.blob = blob;
    ctx.len = len;
    ctx.now_us = now_us;
    ctx.cost = cost;
    ctx.flags = flags;
    ctx.max_wait_ms = max_wait_ms;
}

static __attribute__((noreturn)) void broken(const char *file, int line,
                                             const char *cond)
{
    fprintf(stderr, "fuzz_state: %s:%d: invariant broken: %s\n", file, line,
            cond);
    if (ctx.what) {
        fprintf(stderr,
                "  during %s at now_us %lld, cost %llu, flags %u, "
                "max_wait_ms %lld\n  policy:",
                ctx.what, (long long)ctx.now_us, (unsigned long long)ctx.cost,
                ctx.flags, (long long)ctx.max_wait_ms);
        for (uint32_t i = 0; ctx.policy && i < ctx.policy->nrules; i++) {
            char text[64];
            ratel_rule_format(&ctx.policy->rules[i], text, sizeof text);
            fprintf(stderr, " %s", text);
        }
        fprintf(stderr, "\n  blob (%zu bytes):", ctx.len);
        for (size_t i = 0; ctx.blob && i < ctx.len && i < 512; i++)
            fprintf(stderr, "%s%02x", i % 32 ? "" : "\n    ", ctx.blob[i]);
        fprintf(stderr, "\n");
    }
    abort();
}

#define MAX_OPS 16
#define MUTATE_MAX_RULES 4
#define MUTATE_MAX_OPS 6
#define MAX_WAIT_MS_MAX ((int64_t)RATEL_PERIOD_MAX_MS)
#define DEPTH_MAX_MS ((uint64_t)3650 * 86400000)

/* Start times, microseconds since the epoch. */
static const int64_t base_times[8] = {
    0,
    999,
    1000000,
    1700000000000000, /* 2023-11-14, what the seed generator uses */
    1700000000123456,
    RATEL_TIME_MAX_US - 1,
    RATEL_TIME_MAX_US / 2,
    (int64_t)366 * 86400000000,
};

static const uint32_t periods[] = {1,       7,        1000,       60000,
                                   3600000, 86400000, 2592000000u};

typedef struct reader_s {
    const uint8_t *p;
    size_t n, pos;
} reader_t;

static uint8_t rd8(reader_t *r)
{
    return r->pos < r->n ? r->p[r->pos++] : 0;
}

static uint32_t rd32(reader_t *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)rd8(r) << (8 * i);
    return v;
}

typedef struct op_s {
    int kind;       /* 0 acquire, 1 peek, 2 refund, 3 release */
    uint32_t lease; /* release */
    unsigned flags; /* release: RATEL_RENEW */
    int tight;      /* buffer only as large as the blob */
    uint64_t cost;
    int64_t max_wait_ms;
    int64_t now_us;
} op_t;

typedef struct input_s {
    ratel_policy_t policy;
    int all_gcra;
    int concurrent; /* the policy has a concurrent rule */
    int mutate;
    uint64_t min_capacity; /* smallest capacity over the rules */
    size_t nops;
    op_t ops[MAX_OPS];
    const uint8_t *blob;
    size_t blob_len;
} input_t;

/* A growable byte buffer holding the current blob. */
typedef struct buf_s {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static void buf_set(buf_t *b, const uint8_t *p, size_t len)
{
    if (len > b->cap) {
        free(b->p);
        b->p = malloc(len);
        ASSERT(b->p);
        b->cap = len;
    }
    if (len)
        memcpy(b->p, p, len);
    b->len = len;
}

/* memcmp that accepts NULL pointers for zero lengths. */
/* Whether a stored blob holds exactly the policy's rules, in order. */
static int holds_policy_rules(const ratel_policy_t *policy, const buf_t *cur)
{
    ratel_rule_status_t st[RATEL_MAX_RULES];
    size_t n = 0;
    if (cur->len == 0 ||
        ratel_state_inspect(cur->p, cur->len, 0, st, RATEL_MAX_RULES, &n) !=
            0 ||
        n != policy->nrules)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&st[i].rule, &policy->rules[i], sizeof st[i].rule) != 0)
            return 0;
    return 1;
}

static int same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

static uint64_t rule_capacity(const ratel_rule_t *r)
{
    return ratel_rule_capacity(r);
}

static int rule_equal(const ratel_rule_t *a, const ratel_rule_t *b)
{
    return a->algo == b->algo && a->limit == b->limit &&
           a->period_ms == b->period_ms && a->burst == b->burst;
}

/* ------------------------------------------------------------ decoding */

static void decode_rule(reader_t *r, int force_gcra, ratel_rule_t *rule)
{
    uint8_t a = rd8(r);
    uint32_t limit = rd32(r), period = rd32(r), burst = rd32(r);

    rule->algo = force_gcra ? RATEL_ALGO_GCRA
                            : (ratel_algo_t)(a % (RATEL_ALGO_CONCURRENT + 1));
    rule->limit =
        limit >= 1 && limit <= RATEL_LIMIT_MAX ? limit : 1 + limit % 8;
    if (rule->algo == RATEL_ALGO_CONCURRENT &&
        rule->limit > RATEL_CONCURRENT_MAX)
        rule->limit = 1 + rule->limit % RATEL_CONCURRENT_MAX;
    rule->period_ms =
        period >= RATEL_PERIOD_MIN_MS && period <= RATEL_PERIOD_MAX_MS
            ? period
            : periods[period % (sizeof periods / sizeof periods[0])];
    rule->burst = 0;
    if (rule->algo == RATEL_ALGO_GCRA) {
        rule->burst =
            burst >= 1 && burst <= RATEL_LIMIT_MAX ? burst : rule->limit;
        if ((unsigned __int128)rule->burst * rule->period_ms >
            (unsigned __int128)DEPTH_MAX_MS * rule->limit)
            rule->burst = rule->limit;
    }
}

static uint64_t decode_cost(uint8_t c, uint64_t capacity)
{
    switch (c) {
    case 0:
        return 1;
    case 250:
        return capacity;
    case 251:
        return capacity + 1;
    case 252:
        return RATEL_LIMIT_MAX;
    case 253:
        return (uint64_t)RATEL_LIMIT_MAX + 1;
    case 254:
        return UINT64_MAX;
    case 255:
        return capacity > 1 ? capacity - 1 : 1;
    default:
        return c;
    }
}

static void decode(const uint8_t *data, size_t size, input_t *in)
{
    reader_t r = {data, size, 0};
    uint8_t flags = rd8(&r);
    unsigned nrules = 1 + (flags & 7);
    ratel_rule_t rules[RATEL_MAX_RULES];
    size_t n = 0;
    int64_t now;
    char err[256];

    memset(rules, 0, sizeof rules); /* rules without a calendar */

    in->all_gcra = (flags >> 3) & 1;
    in->mutate = (flags >> 4) & 1;
    now = base_times[flags >> 5];
    if (in->mutate && nrules > MUTATE_MAX_RULES)
        nrules = MUTATE_MAX_RULES;
    for (unsigned i = 0; i < nrules; i++) {
        int dup = 0;
        decode_rule(&r, in->all_gcra, &rules[n]);
        for (size_t j = 0; j < n; j++)
            dup |= rule_equal(&rules[j], &rules[n]) ||
                   (rules[j].algo == RATEL_ALGO_CONCURRENT &&
                    rules[n].algo == RATEL_ALGO_CONCURRENT);
        n += !dup;
    }
    /* In-range rules, no repeats: the policy must be accepted. */
    ASSERT(ratel_policy_init(&in->policy, rules, n, err, sizeof err) == 0);
    in->all_gcra = 1;
    in->concurrent = 0;
    in->min_capacity = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t c = rule_capacity(&rules[i]);
        in->all_gcra &= rules[i].algo == RATEL_ALGO_GCRA;
        in->concurrent |= rules[i].algo == RATEL_ALGO_CONCURRENT;
        if (c < in->min_capacity)
            in->min_capacity = c;
    }

    in->nops = 1 + rd8(&r) % MAX_OPS;
    if (in->mutate && in->nops > MUTATE_MAX_OPS)
        in->nops = MUTATE_MAX_OPS;
    for (size_t i = 0; i < in->nops; i++) {
        op_t *op = &in->ops[i];
        uint8_t kind = rd8(&r), cost = rd8(&r);
        uint16_t wait = (uint16_t)(rd8(&r) | rd8(&r) << 8);
        int32_t delta = (int32_t)rd32(&r);
        int64_t step = (int64_t)delta * ((int64_t)1 << (kind >> 4));

        op->kind = (kind & 3) < 2 ? 0 : (kind & 3) - 1;
        if ((kind & 3) == 0 && in->concurrent) {
            op->kind = 3;
            op->lease = cost ? cost : 1;
            op->flags = kind & 4 ? RATEL_RENEW : 0;
        }
        op->tight = (kind >> 3) & 1;
        op->cost = decode_cost(cost, in->min_capacity);
        op->max_wait_ms = 0;
        if (kind & 4)
            op->max_wait_ms = wait == 0xffff ? MAX_WAIT_MS_MAX + 1
                              : (int64_t)wait * wait > MAX_WAIT_MS_MAX
                                  ? MAX_WAIT_MS_MAX
                                  : (int64_t)wait * wait;
        now += step;
        if (now < 0)
            now = 0;
        if (now >= RATEL_TIME_MAX_US)
            now = RATEL_TIME_MAX_US - 1;
        op->now_us = now;
    }
    in->blob = data + r.pos;
    in->blob_len = size - r.pos;
}

/* ------------------------------------------------------------ checking */

/*
 * A gcra rule's `used` is the time it owes in permits: reset_after (whole
 * ms, rounded up) times limit / period, give or take that rounding.
 */
static void check_gcra_used(const ratel_rule_status_t *s)
{
    double per_ms = (double)s->rule.limit / s->rule.period_ms;
    double hi = (double)s->reset_after_ms * per_ms;
    double lo = ((double)s->reset_after_ms - 1) * per_ms;

    ASSERT((double)s->used <= hi * (1 + 1e-9) + 1);
    /* `used` saturates at INT64_MAX (a clock stepped far back). */
    ASSERT(s->used == INT64_MAX || (double)s->used >= lo * (1 - 1e-9) - 1);
}

/*
 * Inspects `blob` at now: must fail exactly as validate does, and describe
 * in-range rules when it succeeds. Returns the validation result and, if
 * `out` is given, the statuses (n in *n).
 */
static int check_inspect(const uint8_t *blob, size_t len, int64_t now,
                         ratel_rule_status_t *out, size_t *n_out)
{
    ratel_rule_status_t st[RATEL_MAX_RULES + 1];
    size_t n = 99, n0 = 99, n1 = 99;
    int v = ratel_state_validate(blob, len);
    int rc = ratel_state_inspect(blob, len, now, st, RATEL_MAX_RULES + 1, &n);

    ASSERT(v == 0 || v == RATEL_ECORRUPT || v == RATEL_EVERSION);
    ASSERT(rc == v);
    if (rc != 0)
        return rc;
    ASSERT(len == 0 ? n == 0 : n >= 1 && n <= RATEL_MAX_RULES);
    ASSERT(ratel_state_inspect(blob, len, now, NULL, 0, &n0) == 0 && n0 == n);
    ASSERT(ratel_state_inspect(blob, len, now, st, 1, &n1) == 0 && n1 == n);
    if (n > 0)
        ASSERT(ratel_state_inspect(blob, len, now, st, RATEL_MAX_RULES + 1,
                                   &n) == 0);
    for (size_t i = 0; i < n; i++) {
        ratel_policy_t one;
        const ratel_rule_status_t *s = &st[i];
        ASSERT(ratel_policy_init(&one, &s->rule, 1, NULL, 0) == 0);
        for (size_t j = 0; j < i; j++)
            ASSERT(!rule_equal(&st[j].rule, &s->rule));
        ASSERT(s->used >= 0);
        ASSERT(s->remaining >= 0 &&
               (uint64_t)s->remaining <= rule_capacity(&s->rule));
        ASSERT(s->reset_after_ms >= 0);
        ASSERT(s->window_start_ms >= 0 && s->tat_us >= 0);
        if (s->rule.algo == RATEL_ALGO_SLIDING) {
            ASSERT(s->runs <= RATEL_SLIDING_CAP);
            ASSERT(s->granularity_ms >= 1 &&
                   (s->granularity_ms & (s->granularity_ms - 1)) == 0);
        } else {
            ASSERT(s->runs == 0 && s->granularity_ms == 0);
        }
        if (s->rule.algo != RATEL_ALGO_GCRA)
            ASSERT(s->tat_us == 0);
        else
            check_gcra_used(s);
        if (s->rule.algo == RATEL_ALGO_SLIDING ||
            s->rule.algo == RATEL_ALGO_GCRA)
            ASSERT(s->window_start_ms == 0);
    }
    if (out) {
        memcpy(out, st, n * sizeof *st);
        *n_out = n;
    }
    return 0;
}

/* The checks every successful decision passes. */
static void check_decision(const ratel_policy_t *policy,
                           const ratel_decision_t *d, int64_t max_wait_ms)
{
    uint64_t cap = UINT64_MAX;

    for (uint32_t i = 0; i < policy->nrules; i++)
        if (rule_capacity(&policy->rules[i]) < cap)
            cap = rule_capacity(&policy->rules[i]);
    ASSERT(d->allowed == 0 || d->allowed == 1);
    ASSERT(d->rule >= 0 && (uint32_t)d->rule < policy->nrules);
    ASSERT(d->limit == policy->rules[d->rule].limit);
    ASSERT(d->remaining >= 0 && (uint64_t)d->remaining <= cap);
    ASSERT(d->allowed ? d->retry_after_ms == 0 : d->retry_after_ms > 0);
    ASSERT(d->reset_after_ms >= 0);
    ASSERT(d->wait_ms >= 0 && d->wait_ms <= max_wait_ms);
    ASSERT(d->wait_ms == 0 || d->allowed);
}

/*
 * A denied request retried (as a peek) at now + retry_after is admitted,
 * as ratel.h promises. This includes keys written under other rules: a
 * denied acquire stores their conversion, so the retry decides on it
 * (tests/fuzz/corpus/state/retry-after-converted).
 */
static void check_retry(const ratel_policy_t *policy, const buf_t *after,
                        int64_t now, uint64_t cost, const ratel_decision_t *d)
{
    const buf_t *cur = after; /* the blob as the denial left it */
    int64_t later = now + d->retry_after_ms * 1000;
    ratel_request_t req = {cost, 0, RATEL_PEEK, NULL};
    ratel_decision_t again;
    size_t cap = ratel_policy_state_max(policy), len = cur->len;
    uint8_t *b;

    if (later >= RATEL_TIME_MAX_US)
        return;
    if (cap < len)
        cap = len;
    b = malloc(cap);
    ASSERT(b);
    if (len)
        memcpy(b, cur->p, len);
    ASSERT(ratel_policy_acquire(policy, b, &len, cap, later, &req, &again) ==
           0);
    if (!again.allowed) {
        fprintf(stderr,
                "fuzz_state: denied at %lld us with retry_after_ms %lld, "
                "still denied then (retry_after_ms %lld)\n",
                (long long)now, (long long)d->retry_after_ms,
                (long long)again.retry_after_ms);
    }
    ASSERT(again.allowed);
    free(b);
}

/*
 * A sliding rule never forgets an admitted request early: one PERIOD - 1
 * ms after it, the rule still counts its cost (coarsening only moves
 * events later).
 */
static void check_still_counted(const ratel_policy_t *policy,
                                const uint8_t *blob, size_t len, int64_t now,
                                uint64_t cost)
{
    ratel_rule_status_t st[RATEL_MAX_RULES];
    size_t n = 0;

    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *r = &policy->rules[i];
        int64_t later = now + ((int64_t)r->period_ms - 1) * 1000;
        if (r->algo != RATEL_ALGO_SLIDING || later >= RATEL_TIME_MAX_US)
            continue;
        ASSERT(ratel_state_inspect(blob, len, later, st, RATEL_MAX_RULES, &n) ==
               0);
        ASSERT(n == policy->nrules && (uint64_t)st[i].used >= cost);
    }
}

/*
 * Runs ratel_policy_acquire(now, cost, flags, max_wait) on a copy of
 * `cur` and checks everything; when the request is charged, `cur` takes the
 * new blob. `tight`: the buffer is only as large as the blob. `recheck`:
 * also decide the request as a peek first and check a denial's retry_after
 * (costly; mutate mode leaves it out).
 */
static void do_acquire(const ratel_policy_t *policy, buf_t *cur, int64_t now,
                       uint64_t cost, unsigned flags, int64_t max_wait_ms,
                       int tight, int recheck)
{
    ratel_request_t req = {cost, max_wait_ms, flags, NULL};
    ratel_decision_t d, peek;
    size_t smax = ratel_policy_state_max(policy);
    size_t cap = cur->len > smax ? cur->len : smax, len = cur->len;
    uint64_t mincap = UINT64_MAX;
    int all_gcra = 1, bad_cost, bad_wait, v, rc, peeked = 0;
    uint8_t *b;

    for (uint32_t i = 0; i < policy->nrules; i++) {
        uint64_t c = rule_capacity(&policy->rules[i]);
        if (c < mincap)
            mincap = c;
        all_gcra &= policy->rules[i].algo == RATEL_ALGO_GCRA;
    }
    set_ctx("acquire", policy, cur->p, cur->len, now, cost, flags, max_wait_ms);
    bad_cost = cost > mincap;
    bad_wait = max_wait_ms > MAX_WAIT_MS_MAX || (max_wait_ms > 0 && !all_gcra);
    v = ratel_state_validate(cur->p, cur->len);
    if (tight)
        cap = cur->len;

    /* The same request as a peek first: it must decide the same. */
    if (recheck && !(flags & RATEL_PEEK) && !bad_cost && !bad_wait && v == 0) {
        ratel_request_t preq = {cost, max_wait_ms, flags | RATEL_PEEK, NULL};
        size_t plen = cur->len;
        uint8_t *pb = malloc(cap > 0 ? cap : 1);
        ASSERT(pb);
        if (plen)
            memcpy(pb, cur->p, plen);
        ASSERT(ratel_policy_acquire(policy, pb, &plen, cap > 0 ? cap : 1, now,
                                    &preq, &peek) == 0);
        ASSERT(plen == cur->len && same_bytes(pb, cur->p, plen));
        check_decision(policy, &peek, max_wait_ms);
        if (max_wait_ms == 0)
            ASSERT(peek.allowed == ((uint64_t)peek.remaining >= cost));
        free(pb);
        peeked = 1;
    }

    b = malloc(cap > 0 ? cap : 1);
    ASSERT(b);
    if (len)
        memcpy(b, cur->p, len);
    rc = ratel_policy_acquire(policy, b, &len, cap, now, &req, &d);

    if (bad_cost || bad_wait) {
        ASSERT((bad_cost && rc == RATEL_ECOST) ||
               (bad_wait && rc == RATEL_EINVAL));
        ASSERT(len == cur->len && same_bytes(b, cur->p, len));
        free(b);
        return;
    }
    if (v != 0) {
        ASSERT(rc == v);
        ASSERT(len == cur->len && same_bytes(b, cur->p, len));
        free(b);
        return;
    }
    if (rc == RATEL_ENOBUFS) {
        size_t need = len;
        ASSERT(cap < smax);
        ASSERT(need > cap && need <= smax);
        ASSERT(same_bytes(b, cur->p, cur->len));
        free(b);
        /* The size reported is enough. */
        cap = need;
        len = cur->len;
        b = malloc(cap);
        ASSERT(b);
        if (len)
            memcpy(b, cur->p, len);
        rc = ratel_policy_acquire(policy, b, &len, cap, now, &req, &d);
    }
    ASSERT(rc == 0);
    check_decision(policy, &d, max_wait_ms);
    ASSERT(len <= cap);
    ASSERT(ratel_state_validate(b, len) == 0);
    if (peeked) {
        ASSERT(peek.allowed == d.allowed);
        ASSERT(peek.retry_after_ms == d.retry_after_ms);
        ASSERT(peek.wait_ms == d.wait_ms);
    }
    if (!d.allowed || (flags & RATEL_PEEK)) {
        /* Nothing charged: nothing written, except that a denied key stored
           under other rules keeps its conversion to the policy's rules. */
        if ((flags & RATEL_PEEK) || cur->len == 0 ||
            holds_policy_rules(policy, cur))
            ASSERT(len == cur->len && same_bytes(b, cur->p, len));
        if (max_wait_ms == 0)
            ASSERT(d.allowed == ((uint64_t)d.remaining >= cost));
        /* A peek of a key stored under other rules leaves it unconverted,
           where the acquire it describes would store the conversion: the
           promise holds after the acquire (docs/algorithms.md, Peek). */
        if (!d.allowed && recheck &&
            !((flags & RATEL_PEEK) && cur->len > 0 &&
              !holds_policy_rules(policy, cur))) {
            buf_t left = {b, len, cap};
            check_retry(policy, &left, now, cost, &d);
        }
    } else {
        ratel_rule_status_t st[RATEL_MAX_RULES + 1];
        size_t n = 0;
        ASSERT(len > 0 && len <= smax);
        ASSERT((uint64_t)d.remaining <= mincap - cost);
        ASSERT(check_inspect(b, len, now, st, &n) == 0);
        ASSERT(n == policy->nrules);
        for (size_t i = 0; i < n; i++)
            ASSERT(rule_equal(&st[i].rule, &policy->rules[i]));
        check_still_counted(policy, b, len, now, cost);
        buf_set(cur, b, len);
    }
    free(b);
}

/* ratel_policy_refund(), or ratel_policy_release() for op->kind 3. */
static int change(const ratel_policy_t *policy, const op_t *op, uint8_t *b,
                  size_t *len, size_t cap, int64_t now, uint64_t cost,
                  ratel_decision_t *d)
{
    int held = -1, rc;

    if (!op || op->kind != 3)
        return ratel_policy_refund(policy, b, len, cap, now, cost, d);
    rc = ratel_policy_release(policy, b, len, cap, now, op->lease, op->flags,
                              &held, d);
    ASSERT(rc != 0 || held == 0 || held == 1);
    return rc;
}

/* Refund (or with `op` a release) on a copy of `cur`; `cur` takes the
   result on success. */
static void do_refund(const ratel_policy_t *policy, const op_t *op, buf_t *cur,
                      int64_t now, uint64_t cost, int tight)
{
    ratel_rule_status_t before[RATEL_MAX_RULES + 1], after[RATEL_MAX_RULES + 1];
    size_t nbefore = 0, nafter = 0;
    ratel_decision_t d;
    size_t smax = ratel_policy_state_max(policy);
    size_t cap = cur->len > smax ? cur->len : smax, len = cur->len;
    int v, rc;
    uint8_t *b;

    set_ctx(op && op->kind == 3 ? "release" : "refund", policy, cur->p,
            cur->len, now, cost, 0, 0);
    v = check_inspect(cur->p, cur->len, now, before, &nbefore);
    if (tight)
        cap = cur->len;
    b = malloc(cap > 0 ? cap : 1);
    ASSERT(b);
    if (len)
        memcpy(b, cur->p, len);
    rc = change(policy, op, b, &len, cap, now, cost, &d);
    if (v != 0) {
        ASSERT(rc == v);
        ASSERT(len == cur->len && same_bytes(b, cur->p, len));
        free(b);
        return;
    }
    if (rc == RATEL_ENOBUFS) {
        ASSERT(cap < smax && len > cap && len <= smax);
        ASSERT(same_bytes(b, cur->p, cur->len));
        free(b);
        cap = len;
        len = cur->len;
        b = malloc(cap);
        ASSERT(b);
        if (len)
            memcpy(b, cur->p, len);
        rc = change(policy, op, b, &len, cap, now, cost, &d);
    }
    ASSERT(rc == 0);
    check_decision(policy, &d, 0);
    ASSERT(d.allowed == (d.remaining >= 1));
    ASSERT(len <= cap && len <= smax);
    ASSERT(check_inspect(b, len, now, after, &nafter) == 0);
    if (nafter == nbefore) {
        /* The same rules (a refund converts otherwise): none counts more. */
        int same = 1;
        for (size_t i = 0; i < nafter; i++)
            same &= rule_equal(&before[i].rule, &after[i].rule);
        for (size_t i = 0; same && i < nafter; i++)
            ASSERT(after[i].used <= before[i].used);
    }
    buf_set(cur, b, len);
    free(b);
}

static void run_op(const input_t *in, const op_t *op, buf_t *cur, int recheck)
{
    if (op->kind >= 2)
        do_refund(&in->policy, op, cur, op->now_us, op->cost, op->tight);
    else
        do_acquire(&in->policy, cur, op->now_us, op->cost,
                   op->kind == 1 ? RATEL_PEEK : 0, op->max_wait_ms, op->tight,
                   recheck);
}

/*
 * Mutate mode: a valid blob from the operations, then every truncation and
 * every single-bit flip of it.
 */
static void mutate_valid(const input_t *in)
{
    buf_t cur = {NULL, 0, 0}, m = {NULL, 0, 0};
    int64_t now = in->ops[in->nops - 1].now_us;
    uint64_t cost = in->ops[0].cost <= in->min_capacity ? in->ops[0].cost : 1;
    uint8_t *valid;
    size_t len;

    for (size_t i = 0; i < in->nops; i++)
        run_op(in, &in->ops[i], &cur, 1);
    len = cur.len;
    if (len == 0) {
        free(cur.p);
        return;
    }
    valid = malloc(len);
    ASSERT(valid);
    memcpy(valid, cur.p, len);
    for (size_t i = 0; i < len + len * 8; i++) {
        if (i < len) {
            buf_set(&m, valid, i); /* truncation */
        } else {
            size_t bit = i - len;
            buf_set(&m, valid, len);
            m.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        if (check_inspect(m.p, m.len, now, NULL, NULL) != 0) {
            /* Rejected: the acquire must say so and change nothing. */
            do_acquire(&in->policy, &m, now, cost, 0, 0, 0, 0);
            continue;
        }
        /* Light checks: normal mode covers peeks and retries. */
        do_acquire(&in->policy, &m, now, cost, 0, 0, 0, 0);
        do_refund(&in->policy, NULL, &m, now, 1, 0);
    }
    free(valid);
    free(cur.p);
    free(m.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_t in;
    buf_t cur = {NULL, 0, 0};

    /* The raw bytes as a blob, whatever they are. */
    check_inspect(data, size, base_times[3], NULL, NULL);
    check_inspect(data, size, RATEL_TIME_MAX_US - 1, NULL, NULL);

    decode(data, size, &in);
    if (in.mutate) {
        mutate_valid(&in);
        return 0;
    }
    buf_set(&cur, in.blob, in.blob_len);
    check_inspect(cur.p, cur.len, in.ops[0].now_us, NULL, NULL);
    for (size_t i = 0; i < in.nops; i++)
        run_op(&in, &in.ops[i], &cur, 1);
    free(cur.p);
    return 0;
}
