/*
 * fuzz_module_args.c - the Redis module's argument parser (module/args.c)
 * on random argument vectors: what reaches RATEL.ACQUIRE, RATEL.REFUND,
 * RATEL.INFO and RATEL.RELEASE after the key.
 *
 * The first byte picks the command; the rest is split on '\n' into
 * arguments of any bytes (NUL included: Redis arguments are binary).
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - a failure returns a negative RATEL_E* code and a message that starts
 *     with "ratel: " and holds no byte below 0x20 (a CR or LF in an error
 *     reply would break the Redis protocol);
 *   - a success gives what docs/commands.md promises: INFO no rules,
 *     ACQUIRE/REFUND 1..8 valid rules; COST 1..10^9 and, for ACQUIRE,
 *     within every rule's capacity; MAXWAIT only on all-gcra policies; AT
 *     within range; RELEASE a lease 1..2^32-1 on a policy with a
 *     concurrent rule; and the core then accepts the request on a new key
 *     (a release there holds nothing).
 */
#include "../../module/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 40

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_module_args: %s:%d: invariant broken: %s\n", \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void check_success(ratel_cmd_t cmd, const ratel_cmd_args_t *a)
{
    static uint8_t state[RATEL_STATE_MAX];
    ratel_decision_t d;
    size_t len = 0;
    int64_t now;

    ASSERT(!a->has_at || (a->at_ms >= 0 && a->at_ms <= RATEL_CMD_AT_MAX));
    if (cmd == RATEL_CMD_INFO) {
        ASSERT(a->policy.nrules == 0);
        return;
    }
    ASSERT(a->policy.nrules >= 1 && a->policy.nrules <= RATEL_MAX_RULES);
    ASSERT(a->request.cost >= 1 && a->request.cost <= RATEL_LIMIT_MAX);
    for (uint32_t i = 0; i < a->policy.nrules; i++) {
        const ratel_rule_t *r = &a->policy.rules[i];
        char text[64];
        ratel_rule_t back;
        ASSERT(ratel_rule_format(r, text, sizeof text) > 0);
        ASSERT(ratel_rule_parse(text, strlen(text), &back, NULL, 0) == 0);
        if (cmd == RATEL_CMD_ACQUIRE)
            ASSERT(a->request.cost <=
                   (r->algo == RATEL_ALGO_GCRA ? r->burst : r->limit));
        if (a->request.max_wait_ms > 0)
            ASSERT(r->algo == RATEL_ALGO_GCRA);
    }
    now = a->has_at ? a->at_ms * 1000 : 1700000000000000LL;
    if (cmd == RATEL_CMD_ACQUIRE) {
        ASSERT(ratel_policy_acquire(&a->policy, state, &len, sizeof state, now,
                                    &a->request, &d) == 0);
    } else if (cmd == RATEL_CMD_RELEASE) {
        int held = -1;
        /* A lease is parsed only for a policy that takes them. */
        ASSERT(a->lease >= 1 && ratel_policy_has_leases(&a->policy));
        ASSERT((a->lease_flags & ~RATEL_RENEW) == 0);
        ASSERT(ratel_policy_release(&a->policy, state, &len, sizeof state, now,
                                    a->lease, a->lease_flags, &held, &d) == 0);
        ASSERT(held == 0); /* a fresh key holds none */
    } else {
        ASSERT(ratel_policy_refund(&a->policy, state, &len, sizeof state, now,
                                   a->request.cost, &d) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char err[600];
    ratel_cmd_args_t a;
    ratel_cmd_t cmd;
    int argc = 0, rc;
    size_t start;

    if (size == 0)
        return 0;
    cmd = (ratel_cmd_t)(data[0] % (RATEL_CMD_RELEASE + 1));
    start = 1;
    for (size_t i = 1; i <= size && argc < MAX_ARGS; i++) {
        if (i == size || data[i] == '\n') {
            if (i > start || i < size) {
                argv[argc] = (const char *)data + start;
                lens[argc] = i - start;
                argc++;
            }
            start = i + 1;
        }
    }
    memset(err, 'x', sizeof err);
    rc = ratel__cmd_parse(cmd, argc, argv, lens, &a, err, sizeof err);
    if (rc != 0) {
        ASSERT(rc < 0);
        ASSERT(memchr(err, '\0', sizeof err) != NULL);
        ASSERT(strncmp(err, "ratel: ", 7) == 0);
        for (const char *p = err; *p; p++)
            ASSERT((unsigned char)*p >= 0x20);
        /* Short error buffers truncate, never overflow. */
        for (size_t n = 0; n <= 8; n++) {
            char small[9];
            memset(small, 'x', sizeof small);
            ASSERT(ratel__cmd_parse(cmd, argc, argv, lens, &a, small, n) == rc);
            ASSERT(n == 0 || memchr(small, '\0', n) != NULL);
            ASSERT(small[8] == 'x');
        }
        return 0;
    }
    check_success(cmd, &a);
    return 0;
}
