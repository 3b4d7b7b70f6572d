/*
 * rlqs_share.h - how rateld's RLQS server splits one bucket's rate among
 * the Envoys subscribed to it (docs/envoy.md, "Rate Limit Quota
 * Service"). Pure arithmetic: no I/O, no clock (every function that
 * needs the time takes now_us), no allocation.
 *
 * A bucket has the rate of its policy's tightest rule, `limit` permits
 * per `period`. Each subscribed stream i is assigned `rate_i` permits per
 * period (a token bucket refilled with rate_i tokens every period, at
 * most burst_i tokens). The rule:
 *
 *   target_i = floor_i + (limit - n x floor) x demand_i / sum(demand)
 *              (floor = limit x floor_percent / 100 / n, the part split
 *              evenly; with no demand reported by anyone, limit / n)
 *   grant_i  = min(target_i, limit - sum over j != i of held_j(now))
 *
 * where held_j(now) is the highest rate stream j was assigned whose TTL
 * (plus a grace for the message's transit: Envoy counts the TTL from when
 * it reads it) has not run out, for streams still open and for streams
 * that closed alike. So the rates the Envoys may be using at any instant
 * sum to at most `limit`: a share taken from one Envoy is given to
 * another only once the first's larger assignment has expired.
 *
 * demand_i is what stream i reported (allowed + denied requests over the
 * report's time_elapsed, in thousandths of a permit per period), halved
 * into the previous value at each report (an exponential average).
 *
 * A grant is sent when it differs from the live assignment by more than a
 * tenth of it (an Envoy's token bucket starts full when its strategy
 * changes, so needless changes would hand out bursts), or when the live
 * assignment has less than half its TTL left (the same strategy again
 * only extends it).
 */
#ifndef RATELD_RLQS_SHARE_H
#define RATELD_RLQS_SHARE_H

#include <stddef.h>
#include <stdint.h>

/* A bucket's rule: its rate and the assignments' lifetime. */
typedef struct rateld_share_rule_s {
    uint32_t limit;         /* permits per period, >= 1 */
    int64_t period_us;      /* > 0 */
    uint32_t burst;         /* the policy's capacity at once, >= 1 */
    int64_t ttl_us;         /* assignment_time_to_live, > 0 */
    int64_t grace_us;       /* held past the TTL, >= 0 */
    unsigned floor_percent; /* 0..100: the part split evenly */
} rateld_share_rule_t;

/* One stream's standing in one bucket (zero it for a new subscriber). */
typedef struct rateld_share_s {
    uint64_t demand;       /* thousandths of a permit per period */
    int reported;          /* a report was received */
    int closed;            /* the stream is gone: only its hold counts */
    uint32_t rate, burst;  /* the last assignment sent */
    int64_t rate_until_us; /* it is held until then; 0: none sent */
    uint32_t peak;         /* the highest earlier assignment still held */
    int64_t peak_until_us;
} rateld_share_t;

/* An assignment to send: `rate` permits per period (0: deny all), a
   token bucket of `burst` tokens. */
typedef struct rateld_share_grant_s {
    uint32_t rate, burst;
} rateld_share_grant_t;

/* Checks a rule's numbers; NULL, or what is wrong (a static string). */
const char *rateld_share_rule_invalid(const rateld_share_rule_t *rule);

/* Folds a report of `requests` (allowed + denied) over elapsed_us (> 0;
   otherwise ignored) into s->demand. */
void rateld_share_report(rateld_share_t *s, const rateld_share_rule_t *rule,
                         uint64_t requests, int64_t elapsed_us);

/* The rate s may be using at now_us: the highest assignment whose hold
   has not ended. */
uint32_t rateld_share_held(const rateld_share_t *s, int64_t now_us);

/* Stream i's target among the n shares (closed ones take no part). */
uint32_t rateld_share_target(rateld_share_t *const *all, size_t n, size_t i,
                             const rateld_share_rule_t *rule);

/* The token bucket depth of an assignment of `rate`: the policy's burst
   split in proportion, at least 1 (0 for a rate of 0). */
uint32_t rateld_share_burst(const rateld_share_rule_t *rule, uint32_t rate);

/*
 * Whether stream i (of n) is due an assignment at now_us: 1 with *out
 * filled and the assignment recorded as sent (the caller sends it), or 0.
 * `force` sends even an unchanged one (a stream's first answer, or an
 * answer to its report).
 */
int rateld_share_decide(rateld_share_t *const *all, size_t n, size_t i,
                        const rateld_share_rule_t *rule, int64_t now_us,
                        int force, rateld_share_grant_t *out);

/* Whether a closed share holds nothing any more at now_us (it may go). */
int rateld_share_done(const rateld_share_t *s, int64_t now_us);

#endif /* RATELD_RLQS_SHARE_H */
