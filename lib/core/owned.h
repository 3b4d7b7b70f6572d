/*
 * owned.h - the core's entry for libratel's own stores.
 *
 * A store that keeps blobs in its own memory, written by nothing but the
 * core, does not need every decision to re-validate what the core wrote the
 * decision before. This entry compares the blob's header and each record's
 * rule with the policy (a config edit must still convert the key) and
 * finds where each record ends, but does not check the records' fields
 * (times, counts, runs, leases): about 5 to 9 % of a decision through the
 * memory store (docs/BENCHMARKS.md). Anything that reads blobs from outside
 * the process - the Redis module, the Redis store, a file - must call
 * ratel_policy_acquire, which validates everything.
 */
#ifndef RATEL_CORE_OWNED_H
#define RATEL_CORE_OWNED_H

#include "ratel.h"

/* ratel_policy_acquire on a blob this process's core wrote (or none). */
int ratel__policy_acquire_owned(const ratel_policy_t *policy, uint8_t *state,
                                size_t *state_len, size_t state_cap,
                                int64_t now_us, const ratel_request_t *req,
                                ratel_decision_t *d);

/*
 * The same, on a blob the caller keeps where it is (a store's own memory)
 * and writes back only when the request is charged: a blob of other
 * rules, which the core would convert (and write converted even when
 * denying), is not decided: the call returns 1 with nothing touched. A
 * blob of the policy's rules is written only when charged, and
 * RATEL_ENOBUFS (no room to charge) leaves it as it was too. On either,
 * the caller decides on a copy with room instead.
 */
int ratel__policy_acquire_in_place(const ratel_policy_t *policy, uint8_t *state,
                                   size_t *state_len, size_t state_cap,
                                   int64_t now_us, const ratel_request_t *req,
                                   ratel_decision_t *d);

#endif /* RATEL_CORE_OWNED_H */
