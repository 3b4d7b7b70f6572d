/*
 * test_lease.c - the slices a host holds (lib/store/lease.c) and the bound
 * they keep: by hand, then a deterministic simulator of hosts that run the
 * store's lease table on clocks of their own, over the core the slice
 * commands run (ratel_policy_slice, ratel_policy_slice_return, and
 * ratel_policy_acquire for the requests the store decides one by one).
 * It checks EVERY window of the admitted requests against the policy's
 * limit plus the bound ratel_lease_bound() prints:
 *
 *   overshoot <= min(2 x hosts x max_slice, what the rule can charge in
 *                    one slice's lifetime)      sliding, gcra
 *   overshoot  = 0                              fixed, approx
 *
 * Schedules (fixed seeds): steady load at twice the limit, bursty load
 * skewed onto one host, a host crashing with its slices, the store
 * unreachable for 2 s (failure policy `closed`), a light load. Messages
 * take 1 ms each way. Each case prints its worst window, the bound, and
 * the decisions per store call.
 */
#include "core_helpers.h"
#include "store/deny_cache.h"
#include "store/lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_HOSTS 4
#define SIM_MS 12000
#define SIM_SLOTS 4 /* events are at most 2 ms ahead */

typedef enum ev_kind_e { EV_SLICE, EV_REPLY, EV_UNSLICE, EV_ACQUIRE } ev_kind_t;

typedef struct ev_s {
    ev_kind_t kind;
    int host;
    uint64_t n;       /* SLICE: want; REPLY: granted; UNSLICE: unspent */
    int64_t ttl_ms;   /* SLICE */
    int64_t sent_us;  /* SLICE, REPLY: the host's clock at sending */
    int64_t until_ms; /* REPLY, UNSLICE: the slice's end on the store */
    int64_t life_ms;  /* REPLY */
    ratel_decision_t d;
} ev_t;

typedef struct evq_s {
    ev_t *v;
    size_t n, cap;
} evq_t;

typedef struct sim_s {
    test_key_t k;
    uint64_t fp;
    ratel__lease_table_t *table[SIM_HOSTS];
    ratel_lease_t lease;
    int64_t skew_ppm[SIM_HOSTS];
    evq_t q[SIM_SLOTS];
    int32_t *admitted; /* per ms */
    int64_t calls, decisions;
    unsigned seed;
    int down_from, down_to, crash_host, crash_at;
} sim_t;

static const char sim_key[] = "api:hot";

static unsigned sim_rand(sim_t *s)
{
    s->seed = s->seed * 1103515245u + 12345u;
    return (s->seed >> 16) & 0x7fff;
}

/* Host h's clock at true time t (ms), in microseconds: fast or slow. */
static int64_t local_us(const sim_t *s, int h, int64_t t)
{
    return t * 1000 + t * 1000 * s->skew_ppm[h] / 1000000;
}

static void post(sim_t *s, int64_t at, const ev_t *ev)
{
    evq_t *q = &s->q[at % SIM_SLOTS];

    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->v = realloc(q->v, q->cap * sizeof *q->v);
        REQUIRE(q->v != NULL);
    }
    q->v[q->n++] = *ev;
}

static int down(const sim_t *s, int64_t t)
{
    return t >= s->down_from && t < s->down_to;
}

/* What host h's take asked to send at t. */
static void send_todo(sim_t *s, int h, int64_t t, int64_t now_us,
                      const ratel__lease_todo_t *todo)
{
    if (todo->unspent)
        post(s, t + 1,
             &(ev_t){.kind = EV_UNSLICE,
                     .host = h,
                     .n = todo->unspent,
                     .until_ms = todo->until_ms});
    if (todo->fetch)
        post(s, t + 1,
             &(ev_t){.kind = EV_SLICE,
                     .host = h,
                     .n = todo->fetch,
                     .ttl_ms = todo->ttl_ms,
                     .sent_us = now_us});
}

/* The store's side of an event at true time t (its clock). */
static void at_store(sim_t *s, int64_t t, const ev_t *ev)
{
    ev_t reply = *ev;
    uint64_t g = 0, back;
    int64_t end = 0;

    if (ev->kind == EV_UNSLICE) {
        if (!down(s, t))
            REQUIRE(ratel_policy_slice_return(&s->k.policy, s->k.buf, &s->k.len,
                                              sizeof s->k.buf, t * 1000, ev->n,
                                              ev->until_ms * 1000, &back,
                                              &reply.d) == 0);
        return;
    }
    s->calls++;
    if (ev->kind == EV_ACQUIRE) {
        if (!down(s, t) && test_take(&s->k, t, 1, &reply.d) == 1)
            s->admitted[t + 1]++; /* its answer arrives, it is admitted */
        return;
    }
    reply.kind = EV_REPLY;
    if (down(s, t)) {
        reply.n = UINT64_MAX; /* no answer */
    } else {
        REQUIRE(ratel_policy_slice(&s->k.policy, s->k.buf, &s->k.len,
                                   sizeof s->k.buf, t * 1000, ev->n,
                                   ev->ttl_ms * 1000, &g, &end, &reply.d) == 0);
        reply.n = g;
        reply.until_ms = end / 1000;
        reply.life_ms = g ? end / 1000 - t : 0;
    }
    post(s, t + 1, &reply);
}

/* A slice's answer reaching host h at t. */
static void at_host(sim_t *s, int64_t t, const ev_t *ev)
{
    int64_t now = local_us(s, ev->host, t);
    ratel__lease_table_t *table = s->table[ev->host];
    uint64_t left;

    if (!table) /* crashed: what it was sent is stranded */
        return;
    if (ev->n == UINT64_MAX) {
        ratel__lease_unfetched(table, sim_key, sizeof sim_key - 1, s->fp,
                               now + 1000000);
        return;
    }
    left = ratel__lease_fill(table, sim_key, sizeof sim_key - 1, s->fp,
                             &s->lease, ev->sent_us, now, ev->n, ev->life_ms,
                             ev->until_ms, &ev->d);
    if (left)
        post(s, t + 1,
             &(ev_t){.kind = EV_UNSLICE,
                     .host = ev->host,
                     .n = left,
                     .until_ms = ev->until_ms});
}

/* One request at host h at true time t. */
static void request(sim_t *s, int h, int64_t t)
{
    int64_t now = local_us(s, h, t);
    ratel__lease_todo_t todo;
    ratel_decision_t d;
    int local;

    s->decisions++;
    local =
        ratel__lease_take(s->table[h], sim_key, sizeof sim_key - 1,
                          &s->k.policy, s->fp, &s->lease, now, 1, &d, &todo);
    send_todo(s, h, t, now, &todo);
    if (local && d.allowed)
        s->admitted[t]++;
    else if (!local)
        post(s, t + 1, &(ev_t){.kind = EV_ACQUIRE, .host = h});
}

/* Requests host h gets at ms t: about 1 a ms each (4 hosts: twice a
   2000/1s limit); bursty: skewed onto host 0; light: a quarter a ms. */
static int load(sim_t *s, int h, int64_t t, int schedule)
{
    int base = (int)(sim_rand(s) % 3);

    if (schedule == 4)
        return sim_rand(s) % 4 == 0;
    if (schedule == 1) {
        int on = ((t / 700) + h) % 3 == 0;
        base = h == 0 ? base * 3 : base;
        base = on ? base * 2 : base / 2;
    }
    return base;
}

static void run(sim_t *s, int schedule)
{
    for (int64_t t = 1; t < SIM_MS - 2; t++) {
        evq_t *q = &s->q[t % SIM_SLOTS];
        /* Events may post to this slot's future turns only (t + 1). */
        for (size_t i = 0; i < q->n; i++) {
            ev_t ev = q->v[i];
            if (ev.kind == EV_REPLY)
                at_host(s, t, &ev);
            else
                at_store(s, t, &ev);
        }
        q->n = 0;
        if (t == s->crash_at) {
            ratel__lease_table_free(s->table[s->crash_host]);
            s->table[s->crash_host] = NULL;
        }
        for (int h = 0; h < SIM_HOSTS; h++)
            for (int n = load(s, h, t, schedule); n > 0 && s->table[h]; n--)
                request(s, h, t);
    }
}

/* The most admitted in any window of `len` ms (sliding by 1 ms), or, for
   `aligned`, in the windows [i*len, (i+1)*len). */
static int64_t worst(const sim_t *s, int64_t len, int aligned)
{
    int64_t sum = 0, most = 0;

    for (int64_t t = 0; t < SIM_MS; t++) {
        if (aligned && t % len == 0)
            sum = 0;
        sum += s->admitted[t];
        if (!aligned && t >= len)
            sum -= s->admitted[t - len];
        most = sum > most ? sum : most;
    }
    return most;
}

typedef struct sim_case_s {
    const char *rule;
    int64_t window_ms; /* the window checked */
    int aligned;       /* fixed windows */
    int64_t limit;     /* admitted at most in such a window, exactly */
} sim_case_t;

static void sim_case(const sim_case_t *c, int schedule, int64_t *worst_seen)
{
    static const char *const names[] = {"steady", "bursty", "crash", "down",
                                        "light"};
    const char *rules[] = {c->rule, NULL};
    sim_t *s = calloc(1, sizeof *s);
    uint64_t bound[RATEL_MAX_RULES];
    char text[200];
    int64_t w;

    REQUIRE(s != NULL);
    s->admitted = calloc(SIM_MS + 2, sizeof *s->admitted);
    REQUIRE(s->admitted != NULL);
    REQUIRE(test_key_init(&s->k, rules) == 0);
    s->fp = ratel__policy_fingerprint(&s->k.policy);
    s->lease = (ratel_lease_t){.ttl_ms = 250, .max_slice = 20, .hosts = 4};
    REQUIRE(ratel_lease_bound(&s->k.policy, &s->lease, bound, text,
                              sizeof text) == 0);
    s->seed = 7u + (unsigned)schedule;
    s->crash_host = 1;
    s->crash_at = schedule == 2 ? 3001 : -1;
    s->down_from = schedule == 3 ? 4000 : 0;
    s->down_to = schedule == 3 ? 6000 : 0;
    for (int i = 0; i < SIM_HOSTS; i++) {
        /* Clocks within +-500 ppm of the store's. */
        s->skew_ppm[i] = (i % 2 ? 1 : -1) * 500 * (i + 1) / SIM_HOSTS;
        REQUIRE(ratel__lease_table_new(&s->table[i], 64) == 0);
    }
    run(s, schedule);
    w = worst(s, c->window_ms, c->aligned);
    printf("# lease %s, %s: worst window %lld, limit %lld, bound %llu (%s); "
           "%lld decisions, %lld store calls (%.1f per call)\n",
           c->rule, names[schedule], (long long)w, (long long)c->limit,
           (unsigned long long)bound[0], text, (long long)s->decisions,
           (long long)s->calls,
           s->calls ? (double)s->decisions / (double)s->calls : 0.0);
    if (getenv("SIM_DEBUG"))
        printf("#   admitted %lld, leased %llu spent %llu returned %llu "
               "stranded %llu "
               "local %llu remote %llu\n",
               (long long)worst(s, SIM_MS, 0),
               (unsigned long long)s->lease.leased,
               (unsigned long long)s->lease.spent,
               (unsigned long long)s->lease.returned,
               (unsigned long long)s->lease.stranded,
               (unsigned long long)s->lease.local,
               (unsigned long long)s->lease.remote);
    CHECK(w <= c->limit + (int64_t)bound[0]);
    if (c->aligned)
        CHECK_EQ(bound[0], 0);
    if (w > *worst_seen)
        *worst_seen = w;
    for (int i = 0; i < SIM_HOSTS; i++)
        ratel__lease_table_free(s->table[i]);
    for (int i = 0; i < SIM_SLOTS; i++)
        free(s->q[i].v);
    free(s->admitted);
    free(s);
}

TEST(lease_simulator_every_window)
{
    /* 4 hosts asking for up to 20 permits, alive 250 ms: 2 x 4 x 20 = 160
       held at most at once. gcra 2000/1s,burst=200 charges at most
       200 + 2000 x 0.25 s = 700 in a lifetime: 160 binds. */
    static const sim_case_t cases[] = {
        {"2000/1s", 1000, 0, 2000},
        {"2000/1s:fixed", 1000, 1, 2000},
        {"2000/1s:approx", 1000, 1, 2000},
        {"2000/1s:gcra,burst=200", 100, 0, 200 + 2000 / 10},
        {"2000/1s:gcra,burst=200", 1000, 0, 200 + 2000},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t most = 0;
        for (int schedule = 0; schedule < 5; schedule++)
            sim_case(&cases[i], schedule, &most);
        /* The load is well above every limit: the limit must be (nearly)
           reached, or the check proves little. */
        CHECK(most >= cases[i].limit * 9 / 10);
    }
}

/* A table, a 100/1s policy and its key "k" holding one slice of
   `granted` permits fetched at 1.0 s (answered at 1.001 s, lifetime
   100 ms, ending at 7100 on the store's clock). */
typedef struct by_hand_s {
    ratel__lease_table_t *t;
    test_key_t k;
    uint64_t fp;
    ratel_lease_t lease;
    ratel_decision_t d, reply;
    ratel__lease_todo_t todo;
} by_hand_t;

static void by_hand(by_hand_t *h, uint64_t granted)
{
    static const char *const rules[] = {"100/1s", NULL};

    h->lease = (ratel_lease_t){.ttl_ms = 100, .max_slice = 10};
    h->reply = (ratel_decision_t){.allowed = 1, .limit = 100, .remaining = 80};
    REQUIRE(test_key_init(&h->k, rules) == 0);
    h->fp = ratel__policy_fingerprint(&h->k.policy);
    REQUIRE(ratel__lease_table_new(&h->t, 16) == 0);
    CHECK_EQ(ratel__lease_take(h->t, "k", 1, &h->k.policy, h->fp, &h->lease,
                               1000000, 1, &h->d, &h->todo),
             0);
    CHECK_EQ(h->todo.fetch, 1); /* no rate known yet: the minimum */
    CHECK_EQ(h->todo.ttl_ms, 100);
    /* A second take while the fetch is out asks for nothing more. */
    CHECK_EQ(ratel__lease_take(h->t, "k", 1, &h->k.policy, h->fp, &h->lease,
                               1000100, 1, &h->d, &h->todo),
             0);
    CHECK_EQ(h->todo.fetch, 0);
    CHECK_EQ(ratel__lease_fill(h->t, "k", 1, h->fp, &h->lease, 1000000, 1001000,
                               granted, 100, 7100, &h->reply),
             0);
}

/* By hand: a take with nothing held asks for a slice; the slice answers
   the next requests locally until it ends, less the margin. */
TEST(lease_take_fill_spend)
{
    by_hand_t h;

    /* 10 granted for 100 ms, sent at 1.0 s: spent until 1.0 + 0.1 - 0.002
       (margin 1 + 100/100 ms). */
    by_hand(&h, 10);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                                   1003000 + i, 1, &h.d, &h.todo),
                 1);
        CHECK_EQ(h.d.allowed, 1);
        CHECK_EQ(h.d.source, RATEL_SOURCE_LEASE);
    }
    CHECK_EQ(__atomic_load_n(&h.lease.spent, __ATOMIC_RELAXED), 10);
    CHECK_EQ(__atomic_load_n(&h.lease.calls, __ATOMIC_RELAXED), 1);
    /* Another slice, then its end: the unspent permits go back. */
    ratel__lease_unfetched(h.t, "k", 1, h.fp, 0);
    CHECK_EQ(ratel__lease_fill(h.t, "k", 1, h.fp, &h.lease, 1010000, 1011000, 5,
                               100, 5200, &h.reply),
             0);
    CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                               1200000, 1, &h.d, &h.todo),
             0);
    CHECK_EQ(h.todo.unspent, 5);
    CHECK_EQ(h.todo.until_ms, 5200);
    /* Nothing granted: the key goes to the store, no fetch before the
       store's retry time. */
    h.reply.allowed = 0;
    h.reply.retry_after_ms = 50;
    ratel__lease_unfetched(h.t, "k", 1, h.fp, 0);
    CHECK_EQ(ratel__lease_fill(h.t, "k", 1, h.fp, &h.lease, 1200000, 1201000, 0,
                               0, 0, &h.reply),
             0);
    CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                               1202000, 1, &h.d, &h.todo),
             0);
    CHECK_EQ(h.todo.fetch, 0);
    CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                               1251000, 1, &h.d, &h.todo),
             0);
    CHECK(h.todo.fetch > 0);
    ratel__lease_table_free(h.t);
}

/* A group refused by another member: the permit a take answered goes back
   into its slice while the slice lives, else it is stranded. */
TEST(lease_put_back)
{
    by_hand_t h;

    by_hand(&h, 3);
    CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                               1002000, 2, &h.d, &h.todo),
             1);
    CHECK_EQ(h.todo.taken_end_us, 1000000 + 100000 - 2000);
    CHECK_EQ(h.todo.taken_until_ms, 7100);
    ratel__lease_put_back(h.t, "k", 1, h.fp, &h.lease, 2, h.todo.taken_end_us,
                          h.todo.taken_until_ms, 1003000);
    CHECK_EQ(__atomic_load_n(&h.lease.spent, __ATOMIC_RELAXED), 0);
    /* All three are there again: the slot was emptied and is made anew. */
    CHECK_EQ(ratel__lease_take(h.t, "k", 1, &h.k.policy, h.fp, &h.lease,
                               1004000, 3, &h.d, &h.todo),
             1);
    /* After the slice's end, a put-back strands. */
    ratel__lease_put_back(h.t, "k", 1, h.fp, &h.lease, 3, h.todo.taken_end_us,
                          h.todo.taken_until_ms, 1099000);
    CHECK_EQ(__atomic_load_n(&h.lease.stranded, __ATOMIC_RELAXED), 3);
    CHECK_EQ(__atomic_load_n(&h.lease.spent, __ATOMIC_RELAXED), 0);
    ratel__lease_table_free(h.t);
}

TEST(lease_bound_text)
{
    static const char *const rules[] = {"10000/1s", "100000/1d:fixed", NULL};
    static const char *const conc[] = {"10/1s:concurrent", NULL};
    ratel_lease_t lease = {.max_slice = 25, .hosts = 4};
    uint64_t b[RATEL_MAX_RULES];
    char text[200];
    test_key_t k;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(ratel_lease_bound(&k.policy, &lease, b, text, sizeof text), 0);
    CHECK_EQ(b[0], 200);
    CHECK_EQ(b[1], 0);
    CHECK(strcmp(text,
                 "overshoot at most 200 over 10000/1s, 0 over "
                 "100000/1d:fixed in any window, with up to 4 hosts") == 0);
    REQUIRE(test_key_init(&k, conc) == 0);
    CHECK_EQ(ratel_lease_bound(&k.policy, &lease, b, text, sizeof text),
             RATEL_EINVAL);
}

RATEL_SUITE(lease) = {
    {"lease_take_fill_spend", test_lease_take_fill_spend},
    {"lease_put_back", test_lease_put_back},
    {"lease_bound_text", test_lease_bound_text},
    {"lease_simulator_every_window", test_lease_simulator_every_window},
    {0},
};
