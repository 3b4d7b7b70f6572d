/*
 * rlqs_share.c - the split of one bucket's rate among the Envoys
 * subscribed to it (rlqs_share.h states the rule and why it holds).
 * Integer arithmetic only; products that could pass 64 bits are taken in
 * 128.
 */
#include "rateld/rlqs_share.h"

typedef unsigned __int128 u128;

/* Demand is kept in thousandths of a permit per period. */
#define DEMAND_SCALE 1000u
/* Demand never counts above this many permits per period (so sums of
   thousands of streams stay in 64 bits). */
#define DEMAND_MAX ((uint64_t)1 << 40)

const char *rateld_share_rule_invalid(const rateld_share_rule_t *rule)
{
    if (rule->limit == 0)
        return "the rate's limit is 0";
    if (rule->period_us <= 0)
        return "the rate's period is not positive";
    if (rule->burst == 0)
        return "the burst is 0";
    if (rule->ttl_us <= 0)
        return "the assignments' ttl is not positive";
    if (rule->grace_us < 0)
        return "the grace is negative";
    if (rule->floor_percent > 100)
        return "floor_percent is above 100";
    return NULL;
}

void rateld_share_report(rateld_share_t *s, const rateld_share_rule_t *rule,
                         uint64_t requests, int64_t elapsed_us)
{
    u128 x;

    if (elapsed_us <= 0)
        return;
    x = (u128)requests * (uint64_t)rule->period_us * DEMAND_SCALE /
        (uint64_t)elapsed_us;
    if (x > (u128)DEMAND_MAX * DEMAND_SCALE)
        x = (u128)DEMAND_MAX * DEMAND_SCALE;
    s->demand = s->reported ? (s->demand + (uint64_t)x) / 2 : (uint64_t)x;
    s->reported = 1;
}

uint32_t rateld_share_held(const rateld_share_t *s, int64_t now_us)
{
    uint32_t held = 0;

    if (s->rate_until_us > now_us)
        held = s->rate;
    if (s->peak_until_us > now_us && s->peak > held)
        held = s->peak;
    return held;
}

int rateld_share_done(const rateld_share_t *s, int64_t now_us)
{
    return s->closed && rateld_share_held(s, now_us) == 0;
}

uint32_t rateld_share_target(rateld_share_t *const *all, size_t n, size_t i,
                             const rateld_share_rule_t *rule)
{
    uint64_t open = 0, sum = 0, floor, rest;

    for (size_t j = 0; j < n; j++) {
        if (all[j]->closed)
            continue;
        open++;
        sum += all[j]->demand;
    }
    if (all[i]->closed || open == 0)
        return 0;
    if (sum == 0)
        return (uint32_t)(rule->limit / open);
    floor = (uint64_t)rule->limit * rule->floor_percent / 100 / open;
    rest = rule->limit - floor * open;
    return (uint32_t)(floor + (uint64_t)((u128)rest * all[i]->demand / sum));
}

uint32_t rateld_share_burst(const rateld_share_rule_t *rule, uint32_t rate)
{
    uint64_t b;

    if (rate == 0)
        return 0;
    b = (uint64_t)rule->burst * rate / rule->limit;
    return b ? (uint32_t)b : 1;
}

/* Whether `grant` is worth sending instead of the live assignment. */
static int worth_sending(const rateld_share_t *s,
                         const rateld_share_rule_t *rule, uint32_t grant,
                         int64_t now_us)
{
    uint32_t diff;

    if (s->rate_until_us == 0)
        return 1; /* none sent yet */
    if (s->rate_until_us - rule->grace_us - now_us < rule->ttl_us / 2)
        return 1; /* to be extended (or replaced) before it ends */
    diff = grant > s->rate ? grant - s->rate : s->rate - grant;
    return diff > 0 && (s->rate == 0 || grant == 0 || diff > s->rate / 10);
}

int rateld_share_decide(rateld_share_t *const *all, size_t n, size_t i,
                        const rateld_share_rule_t *rule, int64_t now_us,
                        int force, rateld_share_grant_t *out)
{
    rateld_share_t *s = all[i];
    uint64_t others = 0;
    uint32_t grant, old;

    if (s->closed)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (j != i)
            others += rateld_share_held(all[j], now_us);
    grant = rateld_share_target(all, n, i, rule);
    if (others >= rule->limit)
        grant = 0;
    else if (grant > rule->limit - others)
        grant = (uint32_t)(rule->limit - others);
    if (!force && !worth_sending(s, rule, grant, now_us))
        return 0;
    /* The assignment it replaces stays held until its own end: the data
       plane may not have read the new one yet. */
    old = rateld_share_held(s, now_us);
    if (grant != s->rate && old > 0) {
        int64_t until = s->rate_until_us > s->peak_until_us ? s->rate_until_us
                                                            : s->peak_until_us;
        s->peak = old;
        s->peak_until_us = until;
    }
    s->rate = grant;
    s->burst = rateld_share_burst(rule, grant);
    s->rate_until_us = now_us + rule->ttl_us + rule->grace_us;
    out->rate = s->rate;
    out->burst = s->burst;
    return 1;
}
