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

/* Every algorithm by its number, from RATEL_ALGO_MAP. */
const ratel__algo_t *const ratel__algos[RATEL__ALGOS] = {
#define ALGO_ENTRY_(NAME, name, number, facts, fields)                         \
    [number] = &ratel__algo_##name,
    RATEL_ALGO_MAP(ALGO_ENTRY_)
#undef ALGO_ENTRY_
};

/* The calendar that ends the record of `rule` (RATEL__CAL_SIZE bytes). */
static void calendar_write(uint8_t *c, const ratel_rule_t *rule)
{
    c[0] = (uint8_t)(rule->calendar | (rule->zone ? RATEL__CAL_ZONE : 0));
    c[1] = (uint8_t)rule->months;
    ratel__st32(c + 2,
                rule->zone ? rule->zone->id : (uint32_t)rule->tz_offset_s);
}

/* Reads the calendar of the record at p into `rule` (none without the
   flag). RATEL_ECORRUPT for a zone this process has not loaded. */
static int calendar_read(const uint8_t *p, size_t avail, ratel_rule_t *rule)
{
    const ratel__algo_t *a = ratel__algo(rule);
    const uint8_t *c = p + a->empty_size;

    rule->calendar = rule->months = 0;
    rule->tz_offset_s = 0;
    rule->zone = NULL;
    if (!(p[1] & RATEL__FLAG_CALENDAR))
        return 0;
    if (!(ratel__facts(rule->algo) & RATEL_ALGO_CALENDAR) ||
        avail < a->empty_size + RATEL__CAL_SIZE)
        return RATEL_ECORRUPT;
    rule->calendar = c[0] & (uint8_t)~RATEL__CAL_ZONE;
    rule->months = c[1];
    if (c[0] & RATEL__CAL_ZONE)
        return (rule->zone = ratel__zone_by_id(ratel__ld32(c + 2))) != NULL
                   ? 0
                   : RATEL_ECORRUPT;
    rule->tz_offset_s = (int32_t)ratel__ld32(c + 2);
    return 0;
}

void ratel__record_write_empty(uint8_t *p, const ratel_rule_t *rule)
{
    const ratel__algo_t *a = ratel__algo(rule);

    memset(p, 0, a->empty_size);
    p[0] = (uint8_t)rule->algo;
    ratel__st32(p + 2, rule->limit);
    ratel__st32(p + 6, rule->period_ms);
    if (a->rule_size > RATEL__RULE_SIZE)
        ratel__st32(p + 10, rule->burst);
    if (rule->calendar) {
        p[1] = RATEL__FLAG_CALENDAR;
        calendar_write(p + a->empty_size, rule);
    }
}

size_t ratel__convert_keep(const ratel__record_t *from, uint8_t *to,
                           const ratel_rule_t *rule, int64_t now_us)
{
    (void)now_us;
    memcpy(to, from->p, from->size);
    ratel__st32(to + 2, rule->limit);
    return from->size;
}

/*
 * The fields after the rule of a record for `rule` at p, with `avail`
 * bytes left in the blob: checked by its algorithm, which fills rec's size
 * (and sum); rec->p is set here. Returns 0 or RATEL_ECORRUPT.
 */
static int check_fields(uint8_t *p, size_t avail, const ratel_rule_t *rule,
                        ratel__record_t *rec, int owned)
{
    rec->sum = 0;
    if (!(p[1] & RATEL__FLAG_CALENDAR) != !rule->calendar)
        return RATEL_ECORRUPT;
    if (owned) {
        /* Written by this process's core: only where it ends is needed,
           and the calendar, which is part of the rule. */
        uint8_t c[RATEL__CAL_SIZE];
        rec->p = p;
        rec->rule = *rule;
        ratel__locate(rec);
        if (rec->size > avail)
            return RATEL_ECORRUPT;
        if (!rule->calendar)
            return 0;
        calendar_write(c, rule);
        return memcmp(p + rec->size - RATEL__CAL_SIZE, c, RATEL__CAL_SIZE)
                   ? RATEL_ECORRUPT
                   : 0;
    }
    if (ratel__check(p, avail, rule, rec) != 0)
        return RATEL_ECORRUPT;
    if (rule->calendar) {
        uint8_t c[RATEL__CAL_SIZE];
        calendar_write(c, rule);
        if (avail - rec->size < RATEL__CAL_SIZE ||
            memcmp(p + rec->size, c, RATEL__CAL_SIZE) != 0)
            return RATEL_ECORRUPT;
        rec->size += RATEL__CAL_SIZE;
    }
    rec->p = p;
    return 0;
}

/*
 * Validates one record starting at p with `avail` bytes left in the blob;
 * fills `rec`. Returns 0 or RATEL_ECORRUPT.
 */
static int parse_record(uint8_t *p, size_t avail, ratel__record_t *rec)
{
    ratel_rule_t *rule = &rec->rule;

    if (avail < RATEL__RULE_SIZE || p[0] >= RATEL__ALGOS)
        return RATEL_ECORRUPT;
    rule->algo = (ratel_algo_t)p[0];
    if (avail < ratel__algo(rule)->rule_size)
        return RATEL_ECORRUPT;
    rule->limit = ratel__ld32(p + 2);
    rule->period_ms = ratel__ld32(p + 6);
    rule->burst = ratel__algo(rule)->rule_size > RATEL__RULE_SIZE
                      ? ratel__ld32(p + 10)
                      : 0;
    if (calendar_read(p, avail, rule) != 0 ||
        ratel__rule_check(rule, NULL, 0) != 0)
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
        size_t head = ratel__algo(rule)->rule_size;
        if (len - off < head || p[0] != rule->algo ||
            ratel__ld32(p + 2) != rule->limit ||
            ratel__ld32(p + 6) != rule->period_ms ||
            (head > RATEL__RULE_SIZE && ratel__ld32(p + 10) != rule->burst) ||
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
        const ratel__algo_t *a = ratel__algo(&rec[i].rule);
        ratel_rule_status_t *o = &out[i];
        ratel__status_t st;

        memset(o, 0, sizeof *o);
        o->rule = rec[i].rule;
        a->status(&rec[i], now_us, &st);
        a->inspect(&rec[i], o);
        o->used = st.used;
        o->remaining = st.remaining;
        o->reset_after_ms = ratel__ceil_div(st.reset_us, 1000);
    }
    *n = nrec;
    return 0;
}
