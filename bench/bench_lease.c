/*
 * bench_lease.c - leasing at scale (docs/leases.md, issue 34): one key at
 * 1,000,000 decisions a second spread over 100 hosts, each host running
 * the Redis store's own lease table (lib/store/lease.c) on a clock of its
 * own (within +-500 ppm of the store's), over the core the slice commands
 * run: RATEL.SLICE is ratel_slice_demand_note() then
 * ratel_policy_slice_shared() (the holders' fair share), RATEL.UNSLICE is
 * ratel_policy_slice_return(), and a request the store decides alone is
 * ratel_policy_acquire(). A message takes 1 ms each way.
 *
 * For max_slice 50 and 500 (ttl_ms 250, hosts 100: the worked example of
 * the leases design), two loads of about 1,000,000 requests a second (each
 * host 0..20 a ms):
 *
 *   at_limit   the rule is 1000000/1s: the key runs at its limit
 *   under      the rule is 2000000/1s: the load stays under it
 *
 * It prints the Redis calls (every SLICE, UNSLICE and one-by-one ACQUIRE
 * the store got) as a share of the decisions from the second second on
 * (the first is warm-up: each host learns its rate, its first slices are
 * small and its first requests go to the store one by one), the bound
 * ratel_lease_bound() prints as a share of one second's budget (the
 * limit), and the worst window of the admitted requests: EVERY window of
 * 1 s (sliding by 1 ms) is checked against the limit plus that bound; a
 * window past it is a failure (exit 1), as in tests/unit/test_lease.c.
 *
 *   build/bench_lease [SECONDS]      4 simulated seconds by default
 *
 * Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines on stdout like
 * bench_core; each case's details as "#" lines.
 */
#include "ratel.h"
#include "store/deny_cache.h"
#include "store/lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOSTS 100
#define STATE_CAP 65536
#define WARM_MS 1000 /* the first second: rates learnt, slices grow */

typedef enum msg_kind_e {
    MSG_SLICE,
    MSG_GRANT,
    MSG_UNSLICE,
    MSG_ACQUIRE
} msg_kind_t;

typedef struct msg_s {
    msg_kind_t kind;
    int host;
    uint64_t n;       /* SLICE: want; GRANT: granted; UNSLICE: unspent */
    int64_t ttl_ms;   /* SLICE */
    int64_t sent_us;  /* SLICE, GRANT: the host's clock when it asked */
    int64_t until_ms; /* GRANT, UNSLICE: the slice's end, store's clock */
    int64_t life_ms;  /* GRANT */
    ratel_decision_t d;
} msg_t;

/* The messages arriving at the next millisecond (every one takes 1 ms). */
typedef struct inbox_s {
    msg_t *v;
    size_t n, cap;
} inbox_t;

typedef struct sim_s {
    /* the store: the key's state and its holders' demand record */
    ratel_policy_t policy;
    uint8_t state[STATE_CAP];
    size_t state_len;
    uint8_t demand[RATEL_DEMAND_MAX];
    size_t demand_len;
    /* the hosts */
    ratel__lease_table_t *table[HOSTS];
    int64_t ppm[HOSTS];
    ratel_lease_t lease;
    uint64_t fp;
    inbox_t box[2];
    int32_t *admitted; /* per ms of the true clock */
    int64_t ms, decisions, calls;
    int64_t steady_decisions, steady_calls; /* from 1 s on */
    uint64_t rng;
} sim_t;

static const char key[] = "api:global";

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_lease: %s: %s\n", what, ratel_strerror(rc));
    exit(1);
}

static uint64_t next_rand(sim_t *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

/* Host h's clock at true time t_ms, in microseconds. */
static int64_t host_us(const sim_t *s, int h, int64_t t_ms)
{
    return t_ms * 1000 + t_ms * s->ppm[h] / 1000;
}

/* Sends msg to arrive at t + 1. */
static void send_msg(sim_t *s, int64_t t, const msg_t *msg)
{
    inbox_t *b = &s->box[(t + 1) & 1];

    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->v = realloc(b->v, b->cap * sizeof *b->v);
        if (!b->v)
            fail("realloc", RATEL_ENOMEM);
    }
    b->v[b->n++] = *msg;
}

/* Host h gives back `unspent` permits of the slice ending at until_ms. */
static void send_unslice(sim_t *s, int64_t t, int h, uint64_t unspent,
                         int64_t until_ms)
{
    msg_t m = {.kind = MSG_UNSLICE, .host = h, .n = unspent};

    m.until_ms = until_ms;
    send_msg(s, t, &m);
}

/* The store at true time t: one command. */
static void store_msg(sim_t *s, int64_t t, const msg_t *m)
{
    msg_t reply = {.kind = MSG_GRANT, .host = m->host, .sent_us = m->sent_us};
    ratel_request_t req = RATEL_REQUEST_INIT;
    uint64_t total, granted, back;
    int64_t end_us;
    int rc;

    s->calls++;
    s->steady_calls += t >= WARM_MS;
    switch (m->kind) {
    case MSG_ACQUIRE:
        rc = ratel_policy_acquire(&s->policy, s->state, &s->state_len,
                                  STATE_CAP, t * 1000, &req, &reply.d);
        if (rc)
            fail("acquire", rc);
        if (reply.d.allowed)
            s->admitted[t + 1]++; /* admitted when the answer arrives */
        return;
    case MSG_UNSLICE:
        rc = ratel_policy_slice_return(&s->policy, s->state, &s->state_len,
                                       STATE_CAP, t * 1000, m->n,
                                       m->until_ms * 1000, &back, &reply.d);
        if (rc)
            fail("slice_return", rc);
        return;
    default:
        break;
    }
    rc =
        ratel_slice_demand_note(s->demand, &s->demand_len, sizeof s->demand, t,
                                m->ttl_ms, (uint64_t)m->host + 1, m->n, &total);
    if (rc)
        fail("demand_note", rc);
    rc = ratel_policy_slice_shared(
        &s->policy, s->state, &s->state_len, STATE_CAP, t * 1000, m->n, total,
        m->ttl_ms * 1000, &granted, &end_us, &reply.d);
    if (rc)
        fail("slice", rc);
    reply.n = granted;
    reply.until_ms = end_us / 1000;
    reply.life_ms = granted ? end_us / 1000 - t : 0;
    send_msg(s, t, &reply);
}

/* A slice reaching its host at true time t. */
static void host_grant(sim_t *s, int64_t t, const msg_t *m)
{
    uint64_t unkept = ratel__lease_fill(
        s->table[m->host], key, sizeof key - 1, s->fp, &s->lease, m->sent_us,
        host_us(s, m->host, t), m->n, m->life_ms, m->until_ms, &m->d);

    if (unkept)
        send_unslice(s, t, m->host, unkept, m->until_ms);
}

/* One request at host h at true time t. */
static void host_request(sim_t *s, int h, int64_t t)
{
    int64_t now_us = host_us(s, h, t);
    ratel__lease_todo_t todo;
    ratel_decision_t d;
    int local = ratel__lease_take(s->table[h], key, sizeof key - 1, &s->policy,
                                  s->fp, &s->lease, now_us, 1, &d, &todo);

    s->decisions++;
    s->steady_decisions += t >= WARM_MS;
    if (todo.unspent)
        send_unslice(s, t, h, todo.unspent, todo.until_ms);
    if (todo.fetch)
        send_msg(s, t,
                 &(msg_t){.kind = MSG_SLICE,
                          .host = h,
                          .n = todo.fetch,
                          .ttl_ms = todo.ttl_ms,
                          .sent_us = now_us});
    if (!local)
        send_msg(s, t, &(msg_t){.kind = MSG_ACQUIRE, .host = h});
    else if (d.allowed)
        s->admitted[t]++;
}

/* The most admitted in any 1 s window, sliding by 1 ms. */
static int64_t worst_second(const sim_t *s)
{
    int64_t sum = 0, most = 0;

    for (int64_t t = 0; t < s->ms; t++) {
        sum += s->admitted[t];
        if (t >= 1000)
            sum -= s->admitted[t - 1000];
        most = sum > most ? sum : most;
    }
    return most;
}

/* One case; returns 0 when every window kept limit + bound. */
static int run_case(const char *name, const char *rule, int64_t limit,
                    uint64_t max_slice, int64_t seconds)
{
    sim_t *s = calloc(1, sizeof *s);
    const char *rules[] = {rule};
    uint64_t bound[RATEL_MAX_RULES];
    char err[200];
    int64_t worst;
    double calls_pct, bound_pct;
    int rc;

    if (!s)
        fail("calloc", RATEL_ENOMEM);
    s->ms = seconds * 1000;
    s->admitted = calloc((size_t)s->ms + 2, sizeof *s->admitted);
    if (!s->admitted)
        fail("calloc", RATEL_ENOMEM);
    if (ratel_policy_parse(&s->policy, rules, 1, err, sizeof err) != 0) {
        fprintf(stderr, "bench_lease: %s\n", err);
        exit(1);
    }
    s->fp = ratel__policy_fingerprint(&s->policy);
    s->lease =
        (ratel_lease_t){.ttl_ms = 250, .max_slice = max_slice, .hosts = HOSTS};
    rc = ratel_lease_bound(&s->policy, &s->lease, bound, err, sizeof err);
    if (rc)
        fail("lease_bound", rc);
    s->rng = 0x9e3779b97f4a7c15ull;
    for (int h = 0; h < HOSTS; h++) {
        s->ppm[h] = (h % 2 ? 1 : -1) * 500 * (h + 1) / HOSTS;
        rc = ratel__lease_table_new(&s->table[h], 16);
        if (rc)
            fail("lease_table_new", rc);
    }
    for (int64_t t = 1; t < s->ms - 1; t++) {
        inbox_t *b = &s->box[t & 1];
        for (size_t i = 0; i < b->n; i++) {
            if (b->v[i].kind == MSG_GRANT)
                host_grant(s, t, &b->v[i]);
            else
                store_msg(s, t, &b->v[i]);
        }
        b->n = 0;
        for (int h = 0; h < HOSTS; h++)
            for (uint64_t n = next_rand(s) % 21; n > 0; n--)
                host_request(s, h, t);
    }
    worst = worst_second(s);
    calls_pct = 100.0 * (double)s->steady_calls / (double)s->steady_decisions;
    bound_pct = 100.0 * (double)bound[0] / (double)limit;
    printf("# %s, max_slice %llu: %s, %lld simulated s: %lld decisions "
           "(%.0f/s), %lld Redis calls; from 1 s on %.0f decisions/s, %.0f "
           "calls/s (%.1f decisions a call); worst 1 s window %lld of limit "
           "%lld + bound %llu (%s)\n",
           name, (unsigned long long)max_slice, rule, (long long)seconds,
           (long long)s->decisions, (double)s->decisions / (double)seconds,
           (long long)s->calls,
           (double)s->steady_decisions * 1000 / (double)(s->ms - WARM_MS),
           (double)s->steady_calls * 1000 / (double)(s->ms - WARM_MS),
           (double)s->steady_decisions / (double)s->steady_calls,
           (long long)worst, (long long)limit, (unsigned long long)bound[0],
           err);
    printf("ratel\tlease_sim_1m_100h_s%llu_%s_calls_pct\t%.2f\t%%\n",
           (unsigned long long)max_slice, name, calls_pct);
    printf("ratel\tlease_sim_1m_100h_s%llu_%s_bound_pct\t%.2f\t%%\n",
           (unsigned long long)max_slice, name, bound_pct);
    printf("ratel\tlease_sim_1m_100h_s%llu_%s_worst_window\t%lld\tpermits\n",
           (unsigned long long)max_slice, name, (long long)worst);
    printf("ratel\tlease_sim_1m_100h_s%llu_%s_bound\t%llu\tpermits\n",
           (unsigned long long)max_slice, name, (unsigned long long)bound[0]);
    rc = worst <= limit + (int64_t)bound[0] ? 0 : 1;
    if (rc)
        printf("# FAILED: a window admitted %lld, past %lld + %llu\n",
               (long long)worst, (long long)limit,
               (unsigned long long)bound[0]);
    for (int h = 0; h < HOSTS; h++)
        ratel__lease_table_free(s->table[h]);
    free(s->box[0].v);
    free(s->box[1].v);
    free(s->admitted);
    free(s);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t seconds = argc > 1 ? atoll(argv[1]) : 4;
    static const uint64_t slices[] = {50, 500};
    int failed = 0;

    if (seconds < 2 || seconds > 600) {
        fprintf(stderr, "usage: bench_lease [SECONDS: 2..600]\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof slices / sizeof slices[0]; i++) {
        failed |=
            run_case("at_limit", "1000000/1s", 1000000, slices[i], seconds);
        failed |= run_case("under", "2000000/1s", 2000000, slices[i], seconds);
    }
    return failed;
}
