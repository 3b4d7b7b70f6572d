/*
 * state.c - the state blob: validation, empty records, inspection.
 *
 * The byte layout is documented in docs/state-format.md; the offsets live in
 * internal.h. Validation is strict: a blob that parses is one the core could
 * have written, so the algorithms never see out-of-range values (times past
 * 2^53 us, counts past the largest limit, unsorted runs). That keeps every
 * later computation free of overflow and keeps the Lua scripts, which work
 * in doubles, exact.
 */
#include "internal.h"

void ratel__header_write(uint8_t *p, uint32_t nrules)
{
    p[0] = RATEL__MAGIC0;
    p[1] = RATEL__MAGIC1;
    p[2] = RATEL__VERSION;
    p[3] = (uint8_t)nrules;
}

size_t ratel__record_empty_size(const ratel_rule_t *rule)
{
    switch (rule->algo) {
    case RATEL_ALGO_SLIDING:
        return RATEL__SLIDING_RUNS;
    case RATEL_ALGO_FIXED:
        return RATEL__FIXED_SIZE;
    case RATEL_ALGO_APPROX:
        return RATEL__APPROX_SIZE;
    case RATEL_ALGO_GCRA:
        return RATEL__GCRA_SIZE;
    }
    return 0;
}

void ratel__record_write_empty(uint8_t *p, const ratel_rule_t *rule)
{
    memset(p, 0, ratel__record_empty_size(rule));
    p[0] = (uint8_t)rule->algo;
    ratel__st32(p + 2, rule->limit);
    ratel__st32(p + 6, rule->period_ms);
    if (rule->algo == RATEL_ALGO_GCRA)
        ratel__st32(p + 10, rule->burst);
}

static int time_ms_ok(int64_t t)
{
    return t >= 0 && t < RATEL__STORED_MS_MAX;
}

/*
 * Validates the fields after the rule of a record for `rule` at p, with
 * `avail` bytes left in the blob, and fills rec's p, size and sum. With
 * `owned` the runs of a sliding record are trusted. Returns 0 or
 * RATEL_ECORRUPT.
 */
static int check_fields(uint8_t *p, size_t avail, const ratel_rule_t *rule,
                        ratel__record_t *rec, int owned)
{
    size_t size;

    /* Fixed-size fields are read only once they are known to be there. */
    if (avail < ratel__record_empty_size(rule))
        return RATEL_ECORRUPT;
    switch (rule->algo) {
    case RATEL_ALGO_SLIDING: {
        uint32_t nruns;
        int64_t base;
        uint64_t total;
        if (avail < RATEL__SLIDING_RUNS)
            return RATEL_ECORRUPT;
        base = ratel__ld64(p + RATEL__SLIDING_BASE);
        nruns = ratel__ld16(p + RATEL__SLIDING_NRUNS);
        total = ratel__ld32(p + RATEL__SLIDING_TOTAL);
        size = RATEL__SLIDING_RUNS + (size_t)nruns * RATEL__RUN_SIZE;
        if (nruns > RATEL_SLIDING_CAP || avail < size || !time_ms_ok(base) ||
            total > RATEL_LIMIT_MAX || (nruns == 0) != (total == 0))
            return RATEL_ECORRUPT;
        if (nruns > 0 && !owned) {
            /* Branch-free: offsets strictly increase, no count is zero,
               the counts sum to the total. */
            const uint8_t *run = p + RATEL__SLIDING_RUNS;
            uint32_t prev = ratel__ld32(run), bad = ratel__ld32(run + 4) == 0;
            uint64_t sum = ratel__ld32(run + 4);
            for (uint32_t i = 1; i < nruns; i++) {
                uint32_t off, count;
                run += RATEL__RUN_SIZE;
                off = ratel__ld32(run);
                count = ratel__ld32(run + 4);
                bad |= (off <= prev) | (count == 0);
                sum += count;
                prev = off;
            }
            if (bad || sum != total)
                return RATEL_ECORRUPT;
        }
        if (nruns > 0 &&
            !time_ms_ok(base + ratel__ld32(p + size - RATEL__RUN_SIZE)))
            return RATEL_ECORRUPT;
        rec->sum = (int64_t)total;
        break;
    }
    case RATEL_ALGO_FIXED: {
        int64_t start = ratel__ld64(p + RATEL__FIXED_START);
        size = RATEL__FIXED_SIZE;
        if (avail < size || !time_ms_ok(start) ||
            ratel__ld32(p + RATEL__FIXED_COUNT) > RATEL_LIMIT_MAX)
            return RATEL_ECORRUPT;
        break;
    }
    case RATEL_ALGO_APPROX: {
        int64_t start = ratel__ld64(p + RATEL__APPROX_START);
        size = RATEL__APPROX_SIZE;
        if (avail < size || !time_ms_ok(start) ||
            ratel__ld32(p + RATEL__APPROX_CUR) > RATEL_LIMIT_MAX ||
            ratel__ld32(p + RATEL__APPROX_PREV) > RATEL_LIMIT_MAX)
            return RATEL_ECORRUPT;
        break;
    }
    case RATEL_ALGO_GCRA: {
        int64_t tat = ratel__ld64(p + RATEL__GCRA_TAT);
        size = RATEL__GCRA_SIZE;
        if (avail < size || tat < 0 || tat >= RATEL__STORED_US_MAX ||
            ratel__ld32(p + RATEL__GCRA_REM) >= rule->limit)
            return RATEL_ECORRUPT;
        break;
    }
    default:
        return RATEL_ECORRUPT;
    }
    rec->p = p;
    rec->size = size;
    return 0;
}

/* Only sliding records use the flags byte (granularity exponent, at most 30
   so a window of runs spans less than 2^32 ms). */
static int flags_ok(const uint8_t *p)
{
    return p[0] == RATEL_ALGO_SLIDING ? p[1] <= 30 : p[1] == 0;
}

/*
 * Validates one record starting at p with `avail` bytes left in the blob;
 * fills `rec`. Returns 0 or RATEL_ECORRUPT.
 */
static int parse_record(uint8_t *p, size_t avail, ratel__record_t *rec)
{
    ratel_rule_t *rule = &rec->rule;

    if (avail < RATEL__RULE_SIZE || p[0] > RATEL_ALGO_GCRA)
        return RATEL_ECORRUPT;
    rule->algo = (ratel_algo_t)p[0];
    rule->limit = ratel__ld32(p + 2);
    rule->period_ms = ratel__ld32(p + 6);
    rule->burst = 0;
    if (rule->algo == RATEL_ALGO_GCRA) {
        if (avail < RATEL__GCRA_RULE_SIZE)
            return RATEL_ECORRUPT;
        rule->burst = ratel__ld32(p + 10);
    }
    if (ratel__rule_check(rule, NULL, 0) != 0 || !flags_ok(p))
        return RATEL_ECORRUPT;
    return check_fields(p, avail, rule, rec, 0);
}

int ratel__state_match(const ratel_policy_t *policy, const uint8_t *state,
                       size_t len, ratel__record_t *rec, int owned)
{
    size_t off = RATEL__HEADER_SIZE;

    if (len < RATEL__HEADER_SIZE || state[0] != RATEL__MAGIC0 ||
        state[1] != RATEL__MAGIC1 || state[2] != RATEL__VERSION ||
        state[3] != policy->nrules)
        return 0;
    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *rule = &policy->rules[i];
        uint8_t *p = (uint8_t *)(uintptr_t)(state + off);
        size_t head = rule->algo == RATEL_ALGO_GCRA ? RATEL__GCRA_RULE_SIZE
                                                    : RATEL__RULE_SIZE;
        if (len - off < head || p[0] != rule->algo || !flags_ok(p) ||
            ratel__ld32(p + 2) != rule->limit ||
            ratel__ld32(p + 6) != rule->period_ms ||
            (rule->algo == RATEL_ALGO_GCRA &&
             ratel__ld32(p + 10) != rule->burst) ||
            check_fields(p, len - off, rule, &rec[i], owned) != 0)
            return 0;
        rec[i].rule = *rule;
        off += rec[i].size;
    }
    return off == len;
}

int ratel__state_parse(const uint8_t *state, size_t len, ratel__record_t *rec,
                       uint32_t *n)
{
    size_t off = RATEL__HEADER_SIZE;
    uint32_t nrules;

    if (!state || len < RATEL__HEADER_SIZE || state[0] != RATEL__MAGIC0 ||
        state[1] != RATEL__MAGIC1)
        return RATEL_ECORRUPT;
    if (state[2] != RATEL__VERSION)
        return RATEL_EVERSION;
    nrules = state[3];
    if (nrules < 1 || nrules > RATEL_MAX_RULES)
        return RATEL_ECORRUPT;
    for (uint32_t i = 0; i < nrules; i++) {
        /* The core updates blobs in place; parsing never writes. */
        int err = parse_record((uint8_t *)(uintptr_t)(state + off), len - off,
                               &rec[i]);
        if (err)
            return err;
        for (uint32_t j = 0; j < i; j++)
            if (ratel__rule_equal(&rec[i].rule, &rec[j].rule))
                return RATEL_ECORRUPT;
        off += rec[i].size;
    }
    if (off != len)
        return RATEL_ECORRUPT;
    *n = nrules;
    return 0;
}

int ratel_state_validate(const uint8_t *state, size_t len)
{
    ratel__record_t rec[RATEL_MAX_RULES];
    uint32_t n;

    if (len == 0)
        return 0;
    return ratel__state_parse(state, len, rec, &n);
}

int ratel_state_inspect(const uint8_t *state, size_t len, int64_t now_us,
                        ratel_rule_status_t *out, size_t max, size_t *n)
{
    ratel__record_t rec[RATEL_MAX_RULES];
    uint32_t nrec = 0;
    int err;

    if (!n || (max > 0 && !out) || now_us < 0 || now_us >= RATEL_TIME_MAX_US)
        return RATEL_EINVAL;
    *n = 0;
    if (len == 0)
        return 0;
    if ((err = ratel__state_parse(state, len, rec, &nrec)) != 0)
        return err;
    for (uint32_t i = 0; i < nrec && i < max; i++) {
        ratel_rule_status_t *o = &out[i];
        ratel__status_t st;
        const uint8_t *p = rec[i].p;

        memset(o, 0, sizeof *o);
        o->rule = rec[i].rule;
        switch (rec[i].rule.algo) {
        case RATEL_ALGO_SLIDING:
            ratel__sliding_status(&rec[i], now_us, &st);
            o->runs = ratel__ld16(p + RATEL__SLIDING_NRUNS);
            o->granularity_ms = 1u << p[1];
            break;
        case RATEL_ALGO_FIXED:
            ratel__fixed_status(&rec[i], now_us, &st);
            o->window_start_ms = ratel__ld64(p + RATEL__FIXED_START);
            break;
        case RATEL_ALGO_APPROX:
            ratel__approx_status(&rec[i], now_us, &st);
            o->window_start_ms = ratel__ld64(p + RATEL__APPROX_START);
            break;
        case RATEL_ALGO_GCRA:
            ratel__gcra_status(&rec[i], now_us, &st);
            o->tat_us = ratel__ld64(p + RATEL__GCRA_TAT);
            break;
        }
        o->used = st.used;
        o->remaining = st.remaining;
        o->reset_after_ms = ratel__ceil_div(st.reset_us, 1000);
    }
    *n = nrec;
    return 0;
}
