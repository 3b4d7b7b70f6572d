/*
 * gen_corpus.c - writes the seed inputs of tests/fuzz/corpus/state/.
 *
 *   gen_corpus DIR
 *
 * Each seed is an input in fuzz_state.c's layout: a flags byte, the
 * policy's rules, operations, then a state blob that the real core wrote
 * by running acquires at 2023-11-14 (fuzz_state's start time 3). A few
 * seeds are bare blobs, and the last ones reproduce core bugs the fuzzers
 * found. Run once by tests/fuzz/make_corpus.sh; the output is committed, so
 * rerun it only when the layout or the blob format changes.
 */
#include "ratel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1700000000000000 /* base_times[3] of fuzz_state.c */
#define BASE_TIME_INDEX 3

typedef struct seed_s {
    uint8_t b[65536];
    size_t n;
} seed_t;

static void put8(seed_t *s, uint8_t v)
{
    s->b[s->n++] = v;
}

static void put32(seed_t *s, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        put8(s, (uint8_t)(v >> (8 * i)));
}

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus: %s\n", what);
    exit(1);
}

/* flags byte (start time base_times[time_index]), then the rules. */
static void put_policy_at(seed_t *s, const ratel_policy_t *policy, int mutate,
                          int time_index)
{
    int all_gcra = 1;
    for (uint32_t i = 0; i < policy->nrules; i++)
        all_gcra &= policy->rules[i].algo == RATEL_ALGO_GCRA;
    put8(s, (uint8_t)((policy->nrules - 1) | (all_gcra << 3) | (mutate << 4) |
                      (time_index << 5)));
    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *r = &policy->rules[i];
        put8(s, (uint8_t)r->algo);
        put32(s, r->limit);
        put32(s, r->period_ms);
        put32(s, r->burst);
    }
}

static void put_policy(seed_t *s, const ratel_policy_t *policy, int mutate)
{
    put_policy_at(s, policy, mutate, BASE_TIME_INDEX);
}

/*
 * One operation. kind: 0 acquire, 2 peek, 3 refund (fuzz_state's bits
 * 0-1), plus 4 for max_wait; the time step is delta_us exactly (shift 0).
 */
static void put_op(seed_t *s, uint8_t kind, uint8_t cost, uint16_t wait,
                   int32_t delta_us)
{
    put8(s, kind);
    put8(s, cost);
    put8(s, (uint8_t)wait);
    put8(s, (uint8_t)(wait >> 8));
    put32(s, (uint32_t)delta_us);
}

static void parse_policy(ratel_policy_t *policy, const char *const *rules,
                         size_t n)
{
    char err[256];
    if (ratel_policy_parse(policy, rules, n, err, sizeof err) != 0)
        die(err);
}

/*
 * Appends the blob left by `count` acquires of `cost`, one every step_us
 * from T0, under `policy`.
 */
static void put_blob_wait(seed_t *s, const ratel_policy_t *policy, int count,
                          uint64_t cost, int64_t step_us, int64_t max_wait_ms)
{
    size_t cap = ratel_policy_state_max(policy), len = 0;
    uint8_t *blob = malloc(cap);
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d;

    if (!blob)
        die("out of memory");
    req.cost = cost;
    req.max_wait_ms = max_wait_ms;
    for (int i = 0; i < count; i++)
        if (ratel_policy_acquire(policy, blob, &len, cap, T0 + i * step_us,
                                 &req, &d) != 0)
            die("acquire failed");
    if (ratel_state_validate(blob, len) != 0)
        die("generated an invalid blob");
    memcpy(s->b + s->n, blob, len);
    s->n += len;
    free(blob);
}

static void put_blob(seed_t *s, const ratel_policy_t *policy, int count,
                     uint64_t cost, int64_t step_us)
{
    put_blob_wait(s, policy, count, cost, step_us, 0);
}

static void save(const char *dir, const char *name, const seed_t *s)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0)
        die(path);
}

int main(int argc, char **argv)
{
    static seed_t s;
    ratel_policy_t p, other;
    const char *dir;

    if (argc != 2)
        die("usage: gen_corpus DIR");
    dir = argv[1];

    /* Sliding: a few runs, then acquires 100 ms apart and a refund. */
    {
        static const char *const r[] = {"10/1m"};
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 3); /* 4 operations */
        put_op(&s, 0, 1, 0, 100000);
        put_op(&s, 0, 3, 0, 100000);
        put_op(&s, 3, 2, 0, 1000);
        put_op(&s, 2, 5, 0, 60000000);
        put_blob(&s, &p, 6, 1, 250000);
        save(dir, "sliding-runs", &s);
    }
    /* Sliding past the run cap: coarsened granularity. */
    {
        static const char *const r[] = {"1000/1m"};
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 1);
        put_op(&s, 0, 1, 0, 1000);
        put_op(&s, 0, 250, 0, 59000000);
        put_blob(&s, &p, 400, 1, 1000);
        save(dir, "sliding-coarse", &s);
    }
    /* Fixed and sliding together; a request denied by the sliding rule. */
    {
        static const char *const r[] = {"5/1s", "1000/1d:fixed"};
        parse_policy(&p, r, 2);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 2);
        put_op(&s, 0, 1, 0, 0);
        put_op(&s, 0, 1, 0, 1);
        put_op(&s, 2, 1, 0, 1000000);
        put_blob(&s, &p, 5, 1, 1000);
        save(dir, "fixed-and-sliding", &s);
    }
    /* Approx across a window boundary. */
    {
        static const char *const r[] = {"20/m:approx"};
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 2);
        put_op(&s, 0, 4, 0, 30000000);
        put_op(&s, 0, 20, 0, 30000000);
        put_op(&s, 3, 1, 0, 1);
        put_blob(&s, &p, 15, 1, 2000000);
        save(dir, "approx", &s);
    }
    /* Gcra with reservations (all rules gcra). */
    {
        static const char *const r[] = {"100/1s:gcra,burst=200",
                                        "1/2500ms:gcra"};
        parse_policy(&p, r, 2);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 3);
        put_op(&s, 0 | 4, 1, 60, 0);  /* max_wait 3600 ms */
        put_op(&s, 0 | 4, 1, 40, 10); /* max_wait 1600 ms */
        put_op(&s, 0, 1, 0, 500);
        put_op(&s, 3, 1, 0, 2000000);
        put_blob(&s, &p, 3, 1, 1000);
        save(dir, "gcra-reservations", &s);
    }
    /* All four algorithms in one policy. */
    {
        static const char *const r[] = {"10/1s", "100/1m:fixed",
                                        "1000/1h:approx", "5/1s:gcra,burst=7"};
        parse_policy(&p, r, 4);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 4);
        put_op(&s, 0, 2, 0, 100);
        put_op(&s, 2, 3, 0, 100);
        put_op(&s, 0, 1, 0, 1000000);
        put_op(&s, 3, 250, 0, 1); /* refund the capacity */
        put_op(&s, 0, 251, 0, 1); /* capacity + 1: ECOST */
        put_blob(&s, &p, 4, 1, 1000);
        save(dir, "four-algorithms", &s);
    }
    /* A blob written under other rules: converted on the first acquire. */
    {
        static const char *const old[] = {"10/1s", "100/1m:gcra",
                                          "50/1h:fixed"};
        static const char *const r[] = {"20/1s", "100/1m:gcra,burst=10",
                                        "50/1h:approx"};
        parse_policy(&other, old, 3);
        parse_policy(&p, r, 3);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 1);
        put_op(&s, 0, 1, 0, 1000);
        put_op(&s, 3, 1, 0, 1000);
        put_blob(&s, &other, 8, 1, 10000);
        save(dir, "converted", &s);
    }
    /*
     * Reservations queued under 42/1m:gcra,burst=4, then the rule becomes
     * 10/1m: a denied request's retry_after must hold although the old
     * record is converted afresh on every call.
     */
    {
        static const char *const old[] = {"42/1m:gcra,burst=4"};
        static const char *const r[] = {"10/1m:gcra,burst=4"};
        parse_policy(&other, old, 1);
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 0);
        put_op(&s, 0, 1, 0, 0);
        put_blob_wait(&s, &other, 12, 1, 0, 60000);
        save(dir, "retry-after-converted", &s);
    }
    /* Mutate mode: blobs built from the operations, then damaged. */
    {
        static const char *const r[] = {"3/1s", "10/1m:gcra,burst=4"};
        parse_policy(&p, r, 2);
        s.n = 0;
        put_policy(&s, &p, 1);
        put8(&s, 4);
        put_op(&s, 0, 1, 0, 0);
        put_op(&s, 0, 1, 0, 1500);
        put_op(&s, 0, 1, 0, 250000);
        put_op(&s, 3, 1, 0, 1);
        put_op(&s, 0, 2, 0, 700000);
        save(dir, "mutate-sliding-gcra", &s);
    }
    {
        static const char *const r[] = {"4/1m:fixed", "6/10s:approx"};
        parse_policy(&p, r, 2);
        s.n = 0;
        put_policy(&s, &p, 1);
        put8(&s, 2);
        put_op(&s, 0, 1, 0, 0);
        put_op(&s, 0, 2, 0, 9000000);
        put_op(&s, 0, 1, 0, 2000000);
        save(dir, "mutate-fixed-approx", &s);
    }
    /* Bare blobs: the whole input is a valid state. */
    {
        static const char *const r[] = {"10/1s", "5/1s:gcra", "7/1m:approx",
                                        "9/1h:fixed"};
        parse_policy(&p, r, 4);
        s.n = 0;
        put_blob(&s, &p, 3, 1, 300000);
        save(dir, "bare-blob", &s);
    }
    /*
     * Reproducers of core bugs the fuzzers found, kept as regression seeds.
     *
     * A blob cut inside a fixed record: validation must not read past the
     * end (AddressSanitizer reports the overread).
     */
    {
        static const uint8_t b[] = {'R', 'T', 1,    1, 1, 0, 1, 0,
                                    0,   0,   0xe8, 3, 0, 0, 0, 0};
        s.n = 0;
        memcpy(s.b, b, sizeof b);
        s.n = sizeof b;
        save(dir, "truncated-fixed-record", &s);
    }
    /*
     * A full gcra bucket of 1000000000/1ms at the last representable
     * instant, inspected 2^31 x 2^15 us (~2.2 years) earlier, as after a
     * clock step back: `used` (~7e19 permits) must not wrap around.
     */
    {
        static const char *const r[] = {"1000000000/1ms:gcra"};
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy_at(&s, &p, 0, 5); /* RATEL_TIME_MAX_US - 1 */
        put8(&s, 1);
        put_op(&s, 0, 250, 0, 0);                          /* cost: capacity */
        put_op(&s, 3 | 15 << 4, 1, 0, (int32_t)INT32_MIN); /* refund */
        save(dir, "gcra-used-overflow", &s);
    }
    /*
     * A valid sliding record (1000/30d) with granularity exponent 31 and
     * 33 runs from now - 30d + 1 ms: the new run lies 2^32 ms or more past
     * the first, its 32-bit offset wraps, and the event is stored ~50 days
     * early, so the rule forgets it long before 30 days.
     */
    {
        static const char *const r[] = {"1000/30d"};
        const int64_t g = (int64_t)1 << 31, period = 2592000000;
        int64_t t0_ms = T0 / 1000, k, now_ms, first;
        parse_policy(&p, r, 1);
        /* A time step of k x 2^15 us that lands just past a 2^31 ms mark. */
        k = -((t0_ms % g) * 1000 / 32768);
        now_ms = (T0 + k * 32768) / 1000;
        first = now_ms - period + 1;
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 0);
        put_op(&s, 0 | 15 << 4, 1, 0, (int32_t)k);
        /* docs/state-format.md: header, then one sliding record. */
        put32(&s, 'R' | 'T' << 8 | 1 << 16 | 1 << 24);
        put8(&s, 0);  /* sliding */
        put8(&s, 31); /* granularity 2^31 ms */
        put32(&s, 1000);
        put32(&s, (uint32_t)period);
        put32(&s, (uint32_t)first); /* base, 64 bits */
        put32(&s, (uint32_t)(first >> 32));
        put8(&s, 33); /* runs, 16 bits */
        put8(&s, 0);
        for (uint32_t i = 0; i < 33; i++) {
            put32(&s, i); /* offset */
            put32(&s, 1); /* count */
        }
        save(dir, "sliding-shift31-offset-wraps", &s);
    }
    /* An empty key. */
    {
        static const char *const r[] = {"1/1ms"};
        parse_policy(&p, r, 1);
        s.n = 0;
        put_policy(&s, &p, 0);
        put8(&s, 1);
        put_op(&s, 0, 1, 0, 0);
        put_op(&s, 0, 1, 0, 999);
        save(dir, "empty-key", &s);
    }
    return 0;
}
