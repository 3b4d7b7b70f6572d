/*
 * test_async.c - the asynchronous API (ratel_async_* in ratel.h) on a
 * transport of the host's (store/async.h), here the in-memory one
 * (mem_transport.h) playing the loop and, for a Redis store, the server.
 * Every call's callback runs exactly once, at the end of a loop turn,
 * never inside the call; a group is all-or-nothing on either store; a
 * Redis store that does not answer is decided by its failure policy at
 * the command's deadline.
 */
#include "test.h"
#include "mem_transport.h"

#include <stdlib.h>
#include <string.h>

#define NOW_US 5000000 /* the callers' time */

typedef struct fixture_s {
    mem_t m;
    ratel_store_t *store;
    ratel_async_t *a;
    ratel_policy_t policy;
    ratel_batch_item_t items[2];
} fixture_t;

/* What the callbacks saw. */
typedef struct seen_s {
    int calls, rc;
    ratel_decision_t decision;
    fixture_t *chain; /* acquire again from inside the callback */
    int chained_rc;
} seen_t;

static int fx_open(fixture_t *f, ratel_store_t *store, const char *rule)
{
    ratel__async_loop_t loop;
    const char *rules[] = {rule};
    char err[256];

    memset(f, 0, sizeof *f);
    mem_init_loop(&f->m, &loop);
    f->store = store;
    if (!store || ratel_policy_parse(&f->policy, rules, 1, NULL, 0) != 0 ||
        ratel__async_new_on(&f->a, store, &loop, err, sizeof err) != 0) {
        fprintf(stderr, "  fixture: %s\n", store ? err : "no store");
        ratel_store_free(store);
        return -1;
    }
    return 0;
}

static int fx_memory(fixture_t *f, const char *rule)
{
    ratel_store_t *store = NULL;

    if (ratel_store_memory_new(&store, NULL) != 0)
        store = NULL;
    return fx_open(f, store, rule);
}

/* A Redis store at 127.0.0.1:7000 that nothing reaches but the test. */
static int fx_redis(fixture_t *f, const char *rule, ratel_failure_t failure)
{
    ratel_redis_options_t o = {.url = "redis://127.0.0.1:7000",
                               .command_timeout_ms = 200,
                               .connect_timeout_ms = 200,
                               .pool_size = 1,
                               .mode = RATEL_REDIS_MODULE,
                               .on_failure = failure,
                               .deny_cache_entries = -1,
                               .lazy_connect = 1};
    ratel_store_t *store = NULL;
    char err[256];

    if (ratel_store_redis_new(&store, &o, err, sizeof err) != 0) {
        fprintf(stderr, "  redis store: %s\n", err);
        store = NULL;
    }
    return fx_open(f, store, rule);
}

static void fx_free(fixture_t *f)
{
    ratel_async_free(f->a);
    mem_free(&f->m);
    CHECK_EQ(f->m.bad_close, 0);
    ratel_store_free(f->store);
}

/* Items 0 and 1: keys "p:a" and "p:b", one all-or-nothing group. */
static void fx_group(fixture_t *f)
{
    static const char *const keys[] = {"p:a", "p:b"};

    for (int i = 0; i < 2; i++)
        f->items[i] = (ratel_batch_item_t){.key = keys[i],
                                           .keylen = 3,
                                           .policy = &f->policy,
                                           .request = RATEL_REQUEST_INIT,
                                           .group = 1};
}

static void on_decision(void *ud, int rc, const ratel_decision_t *d)
{
    seen_t *s = ud;

    s->calls++;
    s->rc = rc;
    if (d)
        s->decision = *d;
}

static void on_batch(void *ud, ratel_batch_item_t *items, size_t n)
{
    seen_t *s = ud;

    (void)items;
    (void)n;
    s->calls++;
    if (s->chain) {
        fixture_t *f = s->chain;
        s->chain = NULL;
        s->chained_rc =
            ratel_async_acquire_batch(f->a, f->items, 2, NOW_US, on_batch, s);
        /* Told at the next turn's end, not inside this callback. */
        CHECK_EQ(s->calls, 1);
    }
}

#define ALLOWED "*7\r\n:1\r\n:2\r\n:1\r\n:0\r\n:500\r\n:0\r\n:0\r\n"
#define DENIED "*7\r\n:0\r\n:2\r\n:0\r\n:400\r\n:900\r\n:0\r\n:0\r\n"

/* ------------------------------------------------------ memory store */

TEST(memory_batch_told_next_turn)
{
    fixture_t f;
    seen_t s = {0};

    REQUIRE(fx_memory(&f, "2/s") == 0);
    fx_group(&f);
    CHECK_EQ(ratel_async_acquire_batch(f.a, f.items, 2, NOW_US, on_batch, &s),
             0);
    CHECK_EQ(s.calls, 0);
    CHECK_EQ(f.m.deferred, 1); /* the turn's end was asked for */
    mem_flush(&f.m);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(f.items[0].rc, 0);
    CHECK(f.items[0].decision.allowed && f.items[1].decision.allowed);
    CHECK_EQ(f.items[0].decision.remaining, 1);
    CHECK_EQ(f.m.opens, 0); /* a memory store connects to nothing */
    fx_free(&f);
}

TEST(memory_chained_call_waits_for_next_turn)
{
    fixture_t f;
    seen_t s = {0};

    REQUIRE(fx_memory(&f, "2/s") == 0);
    fx_group(&f);
    s.chain = &f;
    REQUIRE(ratel_async_acquire_batch(f.a, f.items, 2, NOW_US, on_batch, &s) ==
            0);
    f.m.deferred = 0;
    f.m.hooks.flush(f.m.hooks.ud); /* one turn's end */
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(s.chained_rc, 0);
    CHECK_EQ(f.m.deferred, 1);
    mem_flush(&f.m);
    CHECK_EQ(s.calls, 2);
    CHECK_EQ(f.items[1].decision.remaining, 0);
    fx_free(&f);
}

TEST(memory_group_all_or_nothing_and_refund)
{
    fixture_t f;
    seen_t s = {0}, r = {0};
    ratel_request_t req = RATEL_REQUEST_INIT;

    REQUIRE(fx_memory(&f, "2/s") == 0);
    fx_group(&f);
    /* "p:b" spent: the group is denied and "p:a" is not charged. */
    req.cost = 2;
    REQUIRE(ratel_store_acquire(f.store, "p:b", 3, &f.policy, NOW_US, &req,
                                &s.decision) == 0);
    REQUIRE(ratel_async_acquire_batch(f.a, f.items, 2, NOW_US, on_batch, &s) ==
            0);
    mem_flush(&f.m);
    CHECK_EQ(s.calls, 1);
    CHECK(!f.items[1].decision.allowed);
    CHECK(f.items[0].decision.allowed); /* alone it would have been */
    CHECK_EQ(ratel_async_refund(f.a, "p:b", 3, &f.policy, NOW_US, 1,
                                on_decision, &r),
             0);
    CHECK_EQ(r.calls, 0);
    mem_flush(&f.m);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.decision.remaining, 1);
    /* "p:a" still holds its two permits. */
    req.cost = 2;
    REQUIRE(ratel_store_acquire(f.store, "p:a", 3, &f.policy, NOW_US, &req,
                                &s.decision) == 0);
    CHECK(s.decision.allowed);
    fx_free(&f);
}

TEST(memory_free_tells_waiting_answers)
{
    fixture_t f;
    seen_t s = {0};
    ratel_request_t req = RATEL_REQUEST_INIT;

    REQUIRE(fx_memory(&f, "2/s") == 0);
    REQUIRE(ratel_async_acquire(f.a, "k", 1, &f.policy, NOW_US, &req,
                                on_decision, &s) == 0);
    CHECK_EQ(s.calls, 0);
    fx_free(&f); /* told once, by the free */
    CHECK_EQ(s.calls, 1);
}

/* ------------------------------------------------------- Redis store */

/* A Redis store with `failure` asked for the group "p:a", "p:b" (told to
   `s`), at the turn's end connected to the server the test plays: that
   connection, or NULL when any step failed. */
static mem_conn_t *redis_group_asked(fixture_t *f, seen_t *s,
                                     ratel_failure_t failure)
{
    if (fx_redis(f, "2/s", failure) != 0)
        return NULL;
    fx_group(f);
    if (ratel_async_acquire_batch(f->a, f->items, 2, NOW_US, on_batch, s) != 0)
        return NULL;
    CHECK_EQ(s->calls, 0); /* never told inside the call */
    mem_flush(&f->m);
    return mem_ready(&f->m, 7000);
}

TEST(redis_group_one_write_then_told)
{
    fixture_t f;
    seen_t s = {0};
    mem_conn_t *c;

    REQUIRE((c = redis_group_asked(&f, &s, RATEL_FAILURE_CLOSED)) != NULL);
    /* Both members left in one write, after the prepare. */
    CHECK_EQ(mem_pending_commands(c), 2);
    CHECK(mem_expect(c, "RATEL.ACQUIRE p:a"));
    CHECK(mem_expect(c, "RATEL.ACQUIRE p:b"));
    CHECK_EQ(s.calls, 0);
    mem_send_str(&f.m, c, ALLOWED ALLOWED);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(f.items[0].rc, 0);
    CHECK(f.items[0].decision.allowed && f.items[1].decision.allowed);
    CHECK_EQ(f.items[1].decision.source, RATEL_SOURCE_STORE);
    fx_free(&f);
}

TEST(redis_group_denied_gives_back)
{
    fixture_t f;
    seen_t s = {0};
    mem_conn_t *c;

    REQUIRE((c = redis_group_asked(&f, &s, RATEL_FAILURE_CLOSED)) != NULL);
    CHECK(mem_expect(c, "RATEL.ACQUIRE p:a"));
    CHECK(mem_expect(c, "RATEL.ACQUIRE p:b"));
    mem_send_str(&f.m, c, ALLOWED DENIED);
    /* The member that was charged is given back before anyone is told. */
    CHECK_EQ(s.calls, 0);
    CHECK(mem_expect(c, "RATEL.REFUND p:a"));
    mem_send_str(&f.m, c, "*7\r\n:1\r\n:2\r\n:2\r\n:0\r\n:0\r\n:0\r\n:0\r\n");
    CHECK_EQ(s.calls, 1);
    CHECK(!f.items[1].decision.allowed);
    CHECK_EQ(f.items[1].decision.retry_after_ms, 400);
    fx_free(&f);
}

TEST(redis_refund_told_from_loop)
{
    fixture_t f;
    seen_t r = {0};
    mem_conn_t *c;

    REQUIRE(fx_redis(&f, "2/s", RATEL_FAILURE_CLOSED) == 0);
    REQUIRE(ratel_async_refund(f.a, "p:a", 3, &f.policy, NOW_US, 1, on_decision,
                               &r) == 0);
    mem_flush(&f.m);
    REQUIRE((c = mem_ready(&f.m, 7000)) != NULL);
    CHECK(mem_expect(c, "RATEL.REFUND p:a"));
    CHECK_EQ(r.calls, 0);
    mem_send_str(&f.m, c, "*7\r\n:1\r\n:2\r\n:2\r\n:0\r\n:0\r\n:0\r\n:0\r\n");
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.decision.remaining, 2);
    fx_free(&f);
}

/* Redis hangs: each failure policy answers at the command's deadline. */
static void hang(ratel_failure_t failure, int allowed, ratel_source_t source)
{
    fixture_t f;
    seen_t s = {0};

    REQUIRE(redis_group_asked(&f, &s, failure) != NULL);
    mem_advance(&f.m, 150000);
    CHECK_EQ(s.calls, 0); /* before the 200 ms deadline */
    mem_advance(&f.m, 100000);
    CHECK_EQ(s.calls, 1);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(f.items[i].rc, 0);
        CHECK_EQ(f.items[i].decision.allowed, allowed);
        CHECK_EQ(f.items[i].decision.source, source);
    }
    fx_free(&f);
}

TEST(redis_hang_open)
{
    hang(RATEL_FAILURE_OPEN, 1, RATEL_SOURCE_OPEN);
}

TEST(redis_hang_closed)
{
    hang(RATEL_FAILURE_CLOSED, 0, RATEL_SOURCE_CLOSED);
}

TEST(redis_hang_local)
{
    hang(RATEL_FAILURE_LOCAL, 1, RATEL_SOURCE_LOCAL);
}

/* While the breaker is open the answer is decided at once: still told at
   the turn's end, never inside the call. */
TEST(redis_breaker_answer_waits_for_turn)
{
    fixture_t f;
    seen_t s = {0}, t = {0};
    ratel_request_t req = RATEL_REQUEST_INIT;

    REQUIRE(fx_redis(&f, "2/s", RATEL_FAILURE_CLOSED) == 0);
    REQUIRE(ratel_async_acquire(f.a, "k", 1, &f.policy, NOW_US, &req,
                                on_decision, &s) == 0);
    mem_flush(&f.m);
    REQUIRE(mem_ready(&f.m, 7000) != NULL);
    mem_advance(&f.m, 250000);
    REQUIRE(s.calls == 1);
    REQUIRE(ratel_async_acquire(f.a, "k", 1, &f.policy, NOW_US + 1000, &req,
                                on_decision, &t) == 0);
    CHECK_EQ(t.calls, 0);
    mem_flush(&f.m);
    CHECK_EQ(t.calls, 1);
    CHECK_EQ(t.decision.source, RATEL_SOURCE_CLOSED);
    fx_free(&f);
}

TEST(redis_free_tells_pending)
{
    fixture_t f;
    seen_t s = {0};

    REQUIRE(redis_group_asked(&f, &s, RATEL_FAILURE_OPEN) != NULL);
    fx_free(&f);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(f.items[0].decision.source, RATEL_SOURCE_OPEN);
}

RATEL_SUITE(async) = {
    {"async_memory_batch_told_next_turn", test_memory_batch_told_next_turn},
    {"async_memory_chained_call_waits_for_next_turn",
     test_memory_chained_call_waits_for_next_turn},
    {"async_memory_group_all_or_nothing_and_refund",
     test_memory_group_all_or_nothing_and_refund},
    {"async_memory_free_tells_waiting_answers",
     test_memory_free_tells_waiting_answers},
    {"async_redis_group_one_write_then_told",
     test_redis_group_one_write_then_told},
    {"async_redis_group_denied_gives_back", test_redis_group_denied_gives_back},
    {"async_redis_refund_told_from_loop", test_redis_refund_told_from_loop},
    {"async_redis_hang_open", test_redis_hang_open},
    {"async_redis_hang_closed", test_redis_hang_closed},
    {"async_redis_hang_local", test_redis_hang_local},
    {"async_redis_breaker_answer_waits_for_turn",
     test_redis_breaker_answer_waits_for_turn},
    {"async_redis_free_tells_pending", test_redis_free_tells_pending},
    {0}};
