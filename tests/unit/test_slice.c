/*
 * test_slice.c - slices of a policy's permits (ratel_policy_slice,
 * ratel_policy_slice_return): by hand, then a deterministic simulator of
 * hosts that spend slices locally, on clocks of their own, over the same
 * core a store runs, which checks EVERY window of the admitted requests
 * against the policy's limit plus the stated bound (docs/leases.md):
 *
 *   overshoot <= min(2 x hosts x max_slice, what the rule can charge in
 *                    one slice's lifetime)      sliding, gcra
 *   overshoot  = 0                              fixed, approx (a slice
 *                                               never outlives its window)
 *
 * Schedules (fixed seeds): steady load, bursty load skewed onto one host,
 * a host crashing with its slices, the store unreachable for a while (the
 * hosts spend what they hold, then refuse: the failure mode `closed`).
 * Each prints its worst window against the bound.
 */
#include "core_helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int slice_at(test_key_t *k, int64_t t_ms, uint64_t want, int64_t ttl_ms,
                    uint64_t *granted, int64_t *expires_us, ratel_decision_t *d)
{
    return ratel_policy_slice(&k->policy, k->buf, &k->len, sizeof k->buf,
                              t_ms * 1000, want, ttl_ms * 1000, granted,
                              expires_us, d);
}

TEST(slice_by_hand)
{
    static const char *const rules[] = {"100/1s", "1000/1m", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g, back;
    int64_t end;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(slice_at(&k, 1000, 30, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 30);
    CHECK_EQ(end, 1250000);
    CHECK_EQ(d.remaining, 70);
    /* More than is left: what is left. */
    CHECK_EQ(slice_at(&k, 1010, 90, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 70);
    CHECK_EQ(test_peek(&k, 1010, 1, NULL), 0);
    /* Nothing left: 0 granted, nothing charged, when to retry. */
    CHECK_EQ(slice_at(&k, 1020, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 0);
    CHECK_EQ(d.allowed, 0);
    CHECK_EQ(d.retry_after_ms, 980);
    /* Unspent permits come back while the slice lives, not after. */
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1200 * 1000, 20, end, &back, &d),
             0);
    CHECK_EQ(back, 0); /* the 0-permit slice: its end is 0 */
    CHECK_EQ(slice_at(&k, 1100, 1, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 0);
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1200 * 1000, 20, 1260 * 1000, &back, &d),
             0);
    CHECK_EQ(back, 20);
    CHECK_EQ(test_peek(&k, 1200, 20, NULL), 1);
    CHECK_EQ(test_peek(&k, 1200, 21, NULL), 0);
    CHECK_EQ(ratel_policy_slice_return(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       1260 * 1000, 5, 1260 * 1000, &back, &d),
             0);
    CHECK_EQ(back, 0);
    CHECK_EQ(test_peek(&k, 1260, 21, NULL), 0);
}

TEST(slice_windows_and_refusals)
{
    static const char *const fixed[] = {"100/1s:fixed", NULL};
    static const char *const gcra[] = {"10/1s:gcra,burst=5", NULL};
    static const char *const conc[] = {"100/1s", "5/10s:concurrent", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g;
    int64_t end;

    /* A fixed window's slice ends with the window. */
    REQUIRE(test_key_init(&k, fixed) == 0);
    CHECK_EQ(slice_at(&k, 5900, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 10);
    CHECK_EQ(end, 6000000);
    CHECK_EQ(slice_at(&k, 6000, 10, 250, &g, &end, &d), 0);
    CHECK_EQ(end, 6250000);
    /* gcra: never more than its burst at once. */
    REQUIRE(test_key_init(&k, gcra) == 0);
    CHECK_EQ(slice_at(&k, 1000, 50, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 5);
    CHECK_EQ(slice_at(&k, 1100, 50, 250, &g, &end, &d), 0);
    CHECK_EQ(g, 1);
    /* Refused: a concurrent rule, want 0, a lifetime out of range. */
    REQUIRE(test_key_init(&k, conc) == 0);
    CHECK_EQ(slice_at(&k, 1000, 5, 250, &g, &end, &d), RATEL_EINVAL);
    REQUIRE(test_key_init(&k, fixed) == 0);
    CHECK_EQ(slice_at(&k, 1000, 0, 250, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(slice_at(&k, 1000, 5, 0, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(slice_at(&k, 1000, 5, 3600001, &g, &end, &d), RATEL_EINVAL);
    CHECK_EQ(k.len, 0);
}

/* The fair share: what is left split by the holders' wants. */
TEST(slice_share_arithmetic)
{
    CHECK_EQ(ratel_slice_share(100, 400, 400), 100); /* all fit */
    CHECK_EQ(ratel_slice_share(100, 400, 1000), 100);
    CHECK_EQ(ratel_slice_share(100, 400, 40), 10); /* 1 : 3 */
    CHECK_EQ(ratel_slice_share(300, 400, 40), 30);
    CHECK_EQ(ratel_slice_share(1, 400, 40), 1); /* never 0 while one fits */
    CHECK_EQ(ratel_slice_share(100, 400, 0), 0);
    /* The largest product (10^18) stays exact. */
    CHECK_EQ(ratel_slice_share(1000000000, 16000000000ull, 999999999),
             62499999);
}

TEST(slice_shared_by_hand)
{
    static const char *const rules[] = {"1000/1h:fixed", NULL};
    test_key_t k;
    ratel_decision_t d;
    uint64_t g;
    int64_t end, t = 3600000;

    REQUIRE(test_key_init(&k, rules) == 0);
    CHECK_EQ(slice_at(&k, t, 960, 1000, &g, &end, &d), 0);
    CHECK_EQ(g, 960);
    /* 40 left; holders want 100 and 300: 10 and (given back) 30. */
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 1) * 1000, 100, 400, 1000000, &g,
                                       &end, &d),
             0);
    CHECK_EQ(g, 10);
    CHECK_EQ(d.remaining, 30);
    CHECK_EQ(end, (t + 1001) * 1000);
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 2) * 1000, 300, 400, 1000000, &g,
                                       &end, &d),
             0);
    CHECK_EQ(g, 22); /* floor(30 x 300 / 400) */
    /* total below want: refused. */
    CHECK_EQ(ratel_policy_slice_shared(&k.policy, k.buf, &k.len, sizeof k.buf,
                                       (t + 2) * 1000, 300, 299, 1000000, &g,
                                       &end, &d),
             RATEL_EINVAL);
}

/* Reads entry i of a demand record: holder, time of ask, want. */
static void demand_entry(const uint8_t *rec, int i, uint64_t *holder,
                         int64_t *at_ms, uint32_t *want)
{
    const uint8_t *p = rec + 4 + 20 * i;
    *holder = *at_ms = *want = 0;
    for (int b = 7; b >= 0; b--) {
        *holder = *holder << 8 | p[b];
        *at_ms = (int64_t)((uint64_t)*at_ms << 8 | p[8 + b]);
    }
    for (int b = 3; b >= 0; b--)
        *want = *want << 8 | p[16 + b];
}

TEST(slice_demand_record)
{
    uint8_t rec[RATEL_DEMAND_MAX];
    size_t len = 0;
    uint64_t total, holder;
    int64_t at;
    uint32_t want;

    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1000, 250, 7, 100,
                                     &total),
             0);
    CHECK_EQ(len, 24);
    CHECK_EQ(memcmp(rec, "RD\x01\x01", 4), 0);
    CHECK_EQ(total, 100);
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1100, 250, 9, 300,
                                     &total),
             0);
    CHECK_EQ(total, 400);
    /* Holder 7 again: its entry moves last with its new want. */
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1200, 250, 7, 50,
                                     &total),
             0);
    CHECK_EQ(total, 350);
    CHECK_EQ(len, 44);
    demand_entry(rec, 0, &holder, &at, &want);
    CHECK_EQ(holder, 9);
    CHECK_EQ(at, 1100);
    CHECK_EQ(want, 300);
    demand_entry(rec, 1, &holder, &at, &want);
    CHECK_EQ(holder, 7);
    CHECK_EQ(at, 1200);
    /* 2 x TTL after its ask, holder 9 is gone. */
    CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1600, 250, 7, 50,
                                     &total),
             0);
    CHECK_EQ(total, 50);
    CHECK_EQ(len, 24);
    /* At most 16 holders: the longest asked goes first. */
    for (uint64_t h = 100; h < 120; h++)
        CHECK_EQ(ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, h, 1,
                                         &total),
                 0);
    CHECK_EQ(len, RATEL_DEMAND_MAX);
    CHECK_EQ(total, 16);
    demand_entry(rec, 0, &holder, &at, &want);
    CHECK_EQ(holder, 104);
    /* Refused: no record's bytes, a newer version, arguments out of range. */
    rec[2] = 2;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 1, 1, &total),
        RATEL_EVERSION);
    rec[2] = 1;
    rec[3] = 15;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 1, 1, &total),
        RATEL_ECORRUPT);
    len = 0;
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 250, 0, 1, &total),
        RATEL_EINVAL);
    CHECK_EQ(
        ratel_slice_demand_note(rec, &len, sizeof rec, 1700, 0, 1, 1, &total),
        RATEL_EINVAL);
    CHECK_EQ(ratel_slice_demand_note(rec, &len, 10, 1700, 250, 1, 1, &total),
             RATEL_ENOBUFS);
}

/* ------------------------------------------------------------ simulator */

#define SIM_HOSTS 4
#define SIM_MS 12000
#define SIM_TTL_MS 250
#define SIM_MARGIN_MS 10 /* a host stops this much before its slice ends */
#define SIM_RTT_MS 2     /* a slice call's round trip */

typedef struct slice_s {
    uint64_t left;
    int64_t local_end; /* on the host's clock */
} slice_t;

typedef struct host_s {
    slice_t held[2]; /* the one it spends, the one it fetched ahead */
    int64_t skew_ppm;
    int64_t pending_at; /* server time its next slice arrives; 0: none */
    uint64_t pending_left;
    int64_t pending_life; /* ms */
    int64_t retry_at;     /* refused: no call before then (server ms) */
    int crashed;
} host_t;

typedef struct sim_s {
    test_key_t k;
    host_t host[SIM_HOSTS];
    uint64_t max_slice;
    int32_t *admitted; /* per server ms */
    int64_t calls, decisions;
    unsigned seed;
    int down_from, down_to; /* the store unreachable (server ms) */
    int crash_host, crash_at;
} sim_t;

static unsigned sim_rand(sim_t *s)
{
    s->seed = s->seed * 1103515245u + 12345u;
    return (s->seed >> 16) & 0x7fff;
}

/* The host's clock at server time t: it runs fast or slow by skew_ppm. */
static int64_t local_ms(const host_t *h, int64_t t)
{
    return t + t * h->skew_ppm / 1000000;
}

/* A slice call from host h at server time t: charged now (the server's
   clock), usable once the answer arrives; its life on the host's clock
   counts from the sending, less the margin. */
static void fetch(sim_t *s, host_t *h, int64_t t)
{
    ratel_decision_t d;
    uint64_t g = 0;
    int64_t end = 0;

    if (h->pending_at || t < h->retry_at ||
        (t >= s->down_from && t < s->down_to))
        return;
    s->calls++;
    REQUIRE(slice_at(&s->k, t, s->max_slice, SIM_TTL_MS, &g, &end, &d) == 0);
    if (g == 0) { /* refused until then, locally (a deny cache) */
        h->retry_at = t + (d.retry_after_ms > 0 ? d.retry_after_ms : 1);
        return;
    }
    h->pending_at = t + SIM_RTT_MS;
    h->pending_left = g;
    h->pending_life = end / 1000 - t;
}

static void arrive(host_t *h, int64_t sent)
{
    slice_t *slot = h->held[0].left ? &h->held[1] : &h->held[0];

    slot->left = h->pending_left;
    slot->local_end = local_ms(h, sent) + h->pending_life - SIM_MARGIN_MS;
    h->pending_at = 0;
}

/* One request at host h at server time t: admitted from a live slice. */
static int spend(sim_t *s, host_t *h, int64_t t)
{
    int64_t now = local_ms(h, t);

    for (int i = 0; i < 2; i++) {
        if (h->held[i].left && now >= h->held[i].local_end)
            h->held[i].left = 0; /* ended: stranded, never spent */
    }
    if (!h->held[0].left && h->held[1].left) {
        h->held[0] = h->held[1];
        h->held[1].left = 0;
    }
    /* Ahead of need: the next slice once this one runs low. */
    if (h->held[0].left <= s->max_slice / 2 && !h->held[1].left)
        fetch(s, h, t);
    if (!h->held[0].left)
        return 0;
    h->held[0].left--;
    s->admitted[t]++;
    return 1;
}

/* Requests host h gets at ms t under `schedule`: about 1 a ms each (4
   hosts: twice a 2000/1s limit), or a quarter of that (light: half). */
static int load(sim_t *s, int hi, int64_t t, int schedule)
{
    int base = (int)(sim_rand(s) % 3); /* 0..2 a ms each */

    if (schedule == 4)
        return sim_rand(s) % 4 == 0;
    if (schedule == 1) { /* bursty, skewed onto host 0 */
        int on = ((t / 700) + hi) % 3 == 0;
        base = hi == 0 ? base * 3 : base;
        base = on ? base * 2 : base / 2;
    }
    return base;
}

static void run(sim_t *s, int schedule)
{
    for (int64_t t = 1; t < SIM_MS; t++) {
        for (int hi = 0; hi < SIM_HOSTS; hi++) {
            host_t *h = &s->host[hi];
            int n = load(s, hi, t, schedule);
            if (hi == s->crash_host && t == s->crash_at)
                h->crashed = 1; /* its slices are stranded */
            if (h->crashed)
                continue;
            if (h->pending_at && t >= h->pending_at)
                arrive(h, h->pending_at - SIM_RTT_MS);
            while (n-- > 0) {
                s->decisions++;
                spend(s, h, t);
            }
        }
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
    uint64_t max_slice;
    int64_t window_ms; /* the window checked */
    int aligned;       /* fixed windows */
    int64_t limit;     /* admitted at most in a window, exactly */
    int64_t bound;     /* the stated overshoot */
} sim_case_t;

static void sim_case(const sim_case_t *c, int schedule, int64_t *worst_seen)
{
    static const char *const names[] = {"steady", "bursty", "crash", "down",
                                        "light"};
    const char *rules[] = {c->rule, NULL};
    sim_t *s = calloc(1, sizeof *s);
    int64_t w;

    REQUIRE(s != NULL);
    s->admitted = calloc(SIM_MS, sizeof *s->admitted);
    REQUIRE(s->admitted != NULL);
    REQUIRE(test_key_init(&s->k, rules) == 0);
    s->max_slice = c->max_slice;
    s->seed = 7u + (unsigned)schedule;
    s->crash_host = schedule == 2 ? 1 : -1;
    s->crash_at = 3001;
    s->down_from = schedule == 3 ? 4000 : 0;
    s->down_to = schedule == 3 ? 6000 : 0;
    for (int i = 0; i < SIM_HOSTS; i++) /* clocks within +-500 ppm */
        s->host[i].skew_ppm = (i % 2 ? 1 : -1) * 500 * (i + 1) / SIM_HOSTS;
    run(s, schedule);
    w = worst(s, c->window_ms, c->aligned);
    printf("# slice %s, %s: worst window %lld, limit %lld, overshoot bound "
           "%lld; %lld decisions, %lld slice calls (%.1f per call)\n",
           c->rule, names[schedule], (long long)w, (long long)c->limit,
           (long long)c->bound, (long long)s->decisions, (long long)s->calls,
           s->calls ? (double)s->decisions / (double)s->calls : 0.0);
    CHECK(w <= c->limit + c->bound);
    if (w > *worst_seen)
        *worst_seen = w;
    free(s->admitted);
    free(s);
}

TEST(slice_simulator_every_window)
{
    /* 4 hosts asking for up to 20 permits, alive 250 ms: 2 x 4 x 20 = 160
       at most held at once. gcra 2000/1s,burst=200 charges at most
       200 + 2000 x 0.25 s = 700 in a lifetime, so 160 binds. */
    static const sim_case_t cases[] = {
        {"2000/1s", 20, 1000, 0, 2000, 160},
        {"2000/1s:fixed", 20, 1000, 1, 2000, 0},
        {"2000/1s:approx", 20, 1000, 1, 2000, 0},
        {"2000/1s:gcra,burst=200", 20, 100, 0, 200 + 2000 / 10, 160},
        {"2000/1s:gcra,burst=200", 20, 1000, 0, 200 + 2000, 160},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t most = 0;
        for (int schedule = 0; schedule < 5; schedule++)
            sim_case(&cases[i], schedule, &most);
        /* The load (about 4 a ms) is well above every limit: the limit
           must be (nearly) reached, or the check proves little. */
        CHECK(most >= cases[i].limit * 9 / 10);
    }
}

RATEL_SUITE(slice) = {
    {"slice_by_hand", test_slice_by_hand},
    {"slice_windows_and_refusals", test_slice_windows_and_refusals},
    {"slice_share_arithmetic", test_slice_share_arithmetic},
    {"slice_shared_by_hand", test_slice_shared_by_hand},
    {"slice_demand_record", test_slice_demand_record},
    {"slice_simulator_every_window", test_slice_simulator_every_window},
    {0},
};
