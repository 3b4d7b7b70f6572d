/*
 * test_engine.c - the Redis engine's protocol behaviour (store/engine.h)
 * without a server: an in-memory transport (mem_transport.h) carries its
 * commands to the test, which answers with scripted bytes, moves a fake
 * clock and takes connections down. Every scenario checks that each
 * command's `done` is called exactly once, and never inside submit.
 */
#include "test.h"
#include "mem_transport.h"

#include <stdlib.h>
#include <string.h>

#define NOW_US 5000000 /* the callers' time */

typedef struct fixture_s {
    ratel__redis_shared_t sh;
    ratel_health_t health;
    mem_t m;
    ratel_policy_t policy;
    char errors[512];
} fixture_t;

/* One command and what its `done` saw. */
typedef struct res_s {
    ratel__rop_t rop;
    int calls, rc, type;
    long long integer;
    char str[128];
    char node[300];
} res_t;

static void on_done(ratel__rop_t *rop)
{
    res_t *r = rop->ud;

    r->calls++;
    r->rc = rop->rc;
    r->type = rop->reply ? rop->reply->type : -1;
    r->integer = rop->reply ? rop->reply->integer : 0;
    snprintf(r->str, sizeof r->str, "%.*s",
             rop->reply && rop->reply->str ? (int)rop->reply->len : 0,
             rop->reply && rop->reply->str ? rop->reply->str : "");
    snprintf(r->node, sizeof r->node, "%s",
             rop->node ? ratel__engine_node_name(rop->node) : "");
    freeReplyObject(rop->reply);
    rop->reply = NULL;
}

static int fx_init(fixture_t *f, const char *url, ratel_redis_mode_t mode)
{
    static const char *const rules[] = {"10/s"};

    memset(f, 0, sizeof *f);
    if (mem_shared_init(&f->sh, &f->health, url, mode, f->errors,
                        sizeof f->errors) != 0)
        return -1;
    if (ratel_policy_parse(&f->policy, rules, 1, NULL, 0) != 0 ||
        mem_init(&f->m, &f->sh) != 0) {
        mem_shared_free(&f->sh, &f->health);
        return -1;
    }
    return 0;
}

static void fx_free(fixture_t *f)
{
    mem_free(&f->m);
    CHECK_EQ(f->m.bad_close, 0);
    mem_shared_free(&f->sh, &f->health);
}

/* Submits an acquire of `key` at the callers' time now_us (no flush). */
static void acquire(fixture_t *f, res_t *r, const char *key, int64_t now_us)
{
    memset(r, 0, sizeof *r);
    r->rop.kind = RATEL__ROP_ACQUIRE;
    r->rop.key = key;
    r->rop.keylen = strlen(key);
    r->rop.policy = &f->policy;
    r->rop.request.cost = 1;
    r->rop.at_ms = -1;
    r->rop.now_us = now_us;
    r->rop.done = on_done;
    r->rop.ud = r;
    ratel__engine_submit(f->m.e, &r->rop);
    CHECK_EQ(r->calls, 0); /* never from inside submit */
}

/* ------------------------------------------------------------ pipeline */

#define PIPE_N 8

/* The replies of the pipeline test, one buffer, of every RESP type. */
static size_t pipe_replies(char *buf, size_t cap)
{
    size_t n = 0;

    for (int i = 0; i < PIPE_N; i++) {
        if (i % 3 == 0)
            n += (size_t)snprintf(buf + n, cap - n, ":%d\r\n", 100 + i);
        else if (i % 3 == 1)
            n += (size_t)snprintf(buf + n, cap - n,
                                  "*2\r\n:%d\r\n$3\r\nabc\r\n", i);
        else
            n += (size_t)snprintf(buf + n, cap - n, "$5\r\nbulk%d\r\n", i);
    }
    return n;
}

/* N acquires in one turn leave in one write; the replies, delivered in
   chunks cut at `cuts` (ascending, ending at the length), answer each. */
static void pipeline_run(const size_t *cuts, size_t ncuts)
{
    static const char *const keys[PIPE_N] = {"k0", "k1", "k2", "k3",
                                             "k4", "k5", "k6", "k7"};
    fixture_t f;
    res_t r[PIPE_N];
    char buf[512];
    mem_conn_t *c;
    int sends;
    size_t at = 0;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    for (int i = 0; i < PIPE_N; i++)
        acquire(&f, &r[i], keys[i], NOW_US);
    mem_flush(&f.m);
    CHECK_EQ(f.m.opens, 1);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c);
    REQUIRE(mem_up(&f.m, c) == 0 && mem_expect(c, "PING"));
    REQUIRE(mem_send_str(&f.m, c, "+PONG\r\n") == 0);
    REQUIRE(mem_expect(c, "COMMAND INFO"));
    sends = f.m.sends;
    REQUIRE(mem_send_str(&f.m, c, "*1\r\n*0\r\n") == 0);
    CHECK_EQ(f.m.sends - sends, 1); /* one write for the whole turn */
    CHECK_EQ(mem_pending_commands(c), PIPE_N);
    for (int i = 0; i < PIPE_N; i++) {
        char want[64];
        snprintf(want, sizeof want, "RATEL.ACQUIRE %s 10/1s", keys[i]);
        CHECK(mem_expect(c, want));
    }
    pipe_replies(buf, sizeof buf);
    for (size_t i = 0; i < ncuts; i++) {
        CHECK(mem_data(&f.m, c, buf + at, cuts[i] - at) == 0);
        at = cuts[i];
    }
    for (int i = 0; i < PIPE_N; i++) {
        CHECK_EQ(r[i].calls, 1);
        CHECK_EQ(r[i].rc, 0);
        CHECK_EQ(r[i].type, i % 3 == 0   ? REDIS_REPLY_INTEGER
                            : i % 3 == 1 ? REDIS_REPLY_ARRAY
                                         : REDIS_REPLY_STRING);
        if (i % 3 == 0)
            CHECK_EQ(r[i].integer, 100 + i);
    }
    CHECK_EQ(f.m.closes, 0);
    fx_free(&f);
    for (int i = 0; i < PIPE_N; i++)
        CHECK_EQ(r[i].calls, 1);
}

TEST(pipeline_one_buffer)
{
    char buf[512];
    size_t len = pipe_replies(buf, sizeof buf);

    pipeline_run(&len, 1);
}

/* The same replies cut in two at every byte, then one byte at a time. */
TEST(pipeline_split_everywhere)
{
    char buf[512];
    size_t len = pipe_replies(buf, sizeof buf), cuts[512];

    for (size_t s = 1; s < len; s++) {
        size_t two[2] = {s, len};
        pipeline_run(two, 2);
    }
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    pipeline_run(cuts, len);
}

/* --------------------------------------------------------- redirects */

static const char slots_7000[] =
    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";

/* A cluster whose map names 7000 for every slot; the acquire of "a"
   sent there. */
static mem_conn_t *cluster_start(fixture_t *f, res_t *r)
{
    mem_conn_t *c;

    acquire(f, r, "a", NOW_US);
    mem_flush(&f->m);
    c = mem_open_conn(&f->m, 7000);
    if (!c || mem_up(&f->m, c) != 0 || !mem_expect(c, "PING") ||
        !mem_expect(c, "CLUSTER SLOTS") ||
        mem_send_str(&f->m, c, "+PONG\r\n") != 0 ||
        mem_send_str(&f->m, c, slots_7000) != 0 ||
        !mem_expect(c, "COMMAND INFO") ||
        mem_send_str(&f->m, c, "*1\r\n*0\r\n") != 0 ||
        !mem_expect(c, "RATEL.ACQUIRE a"))
        return NULL;
    return c;
}

TEST(moved_followed)
{
    fixture_t f;
    res_t r, again;
    mem_conn_t *c, *c2;

    REQUIRE(fx_init(&f, "redis+cluster://127.0.0.1:7000", RATEL_REDIS_AUTO) ==
            0);
    c = cluster_start(&f, &r);
    REQUIRE(c);
    REQUIRE(mem_send_str(&f.m, c, "-MOVED 15495 127.0.0.1:7001\r\n") == 0);
    CHECK_EQ(r.calls, 0);
    c2 = mem_ready(&f.m, 7001);
    REQUIRE(c2);
    CHECK(mem_expect(c2, "RATEL.ACQUIRE a"));
    REQUIRE(mem_send_str(&f.m, c2, ":7\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.integer, 7);
    CHECK(strcmp(r.node, "127.0.0.1:7001") == 0);
    /* The map moved: the next command for the slot goes there at once. */
    acquire(&f, &again, "a", NOW_US);
    mem_flush(&f.m);
    CHECK(mem_expect(c2, "RATEL.ACQUIRE a"));
    CHECK_EQ(mem_pending_commands(c), 0);
    REQUIRE(mem_send_str(&f.m, c2, ":8\r\n") == 0);
    CHECK_EQ(again.calls, 1);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(again.calls, 1);
}

TEST(ask_followed_with_asking)
{
    fixture_t f;
    res_t r, again;
    mem_conn_t *c, *c2;

    REQUIRE(fx_init(&f, "redis+cluster://127.0.0.1:7000", RATEL_REDIS_AUTO) ==
            0);
    c = cluster_start(&f, &r);
    REQUIRE(c);
    REQUIRE(mem_send_str(&f.m, c, "-ASK 15495 127.0.0.1:7001\r\n") == 0);
    c2 = mem_ready(&f.m, 7001);
    REQUIRE(c2);
    CHECK(mem_expect(c2, "ASKING"));
    CHECK(mem_expect(c2, "RATEL.ACQUIRE a"));
    REQUIRE(mem_send_str(&f.m, c2, "+OK\r\n:3\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.integer, 3);
    /* ASK moves nothing: the next command goes to the map's node. */
    acquire(&f, &again, "a", NOW_US);
    mem_flush(&f.m);
    CHECK(mem_expect(c, "RATEL.ACQUIRE a"));
    CHECK_EQ(mem_pending_commands(c2), 0);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(again.calls, 1);
    CHECK_EQ(again.rc, RATEL_EIO); /* the store is closing */
}

/* ------------------------------------------------------- NOSCRIPT */

TEST(noscript_reloads_and_resends)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;
    char sha[64];

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_LUA) == 0);
    snprintf(sha, sizeof sha, "$40\r\n%.40s\r\n", f.sh.script_sha);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_up(&f.m, c) == 0);
    REQUIRE(mem_expect(c, "PING"));
    REQUIRE(mem_send_str(&f.m, c, "+PONG\r\n") == 0);
    REQUIRE(mem_expect(c, "SCRIPT LOAD return 1"));
    REQUIRE(mem_send_str(&f.m, c, sha) == 0);
    REQUIRE(mem_expect(c, "EVALSHA aaaa"));
    REQUIRE(mem_send_str(&f.m, c, "-NOSCRIPT No matching script.\r\n") == 0);
    CHECK_EQ(r.calls, 0);
    CHECK(mem_expect(c, "SCRIPT LOAD return 1"));
    REQUIRE(mem_send_str(&f.m, c, sha) == 0);
    CHECK(mem_expect(c, "EVALSHA aaaa"));
    REQUIRE(mem_send_str(&f.m, c, ":1\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.integer, 1);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

/* ------------------------------------------------ ratel_acquire_many */

/* A node on the library, prepared: PING, ratel_version answered "1"
   (this build's, in the fixture). */
static mem_conn_t *library_ready(fixture_t *f)
{
    mem_conn_t *c;

    mem_flush(&f->m);
    c = mem_open_conn(&f->m, 7000);
    if (!c || mem_up(&f->m, c) != 0 || !mem_expect(c, "PING") ||
        mem_send_str(&f->m, c, "+PONG\r\n") != 0 ||
        !mem_expect(c, "FCALL_RO ratel_version 0") ||
        mem_send_str(&f->m, c, "$1\r\n1\r\n") != 0)
        return NULL;
    return c;
}

/* Acquires queued together on the library leave as one FCALL
   ratel_acquire_many (the same words once, then "0"); element i of its
   reply answers acquire i, an error element its own. */
TEST(library_batches_acquire_many)
{
    fixture_t f;
    res_t r[3];
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_FUNCTION) == 0);
    acquire(&f, &r[0], "k0", NOW_US);
    acquire(&f, &r[1], "k1", NOW_US);
    acquire(&f, &r[2], "k0", NOW_US);
    c = library_ready(&f);
    REQUIRE(c);
    CHECK_EQ(mem_pending_commands(c), 1);
    CHECK(mem_expect(c, "FCALL ratel_acquire_many 3 k0 k1 k0 1 10/1s 0 0"));
    REQUIRE(mem_send_str(&f.m, c, "*3\r\n:1\r\n-ERR ratel: no\r\n:3\r\n") == 0);
    CHECK(r[0].calls == 1 && r[0].rc == 0 && r[0].integer == 1);
    CHECK(r[1].calls == 1 && r[1].rc == 0 && r[1].type == REDIS_REPLY_ERROR);
    CHECK_EQ(strcmp(r[1].str, "ERR ratel: no"), 0);
    CHECK(r[2].calls == 1 && r[2].rc == 0 && r[2].integer == 3);
    fx_free(&f);
}

/* An error for the whole call answers each acquire: "Function not found"
   loads the library again and sends them again, together; an answer
   with the wrong count of elements is nil to each. */
TEST(library_acquire_many_whole_errors)
{
    fixture_t f;
    res_t r[2];
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_FUNCTION) == 0);
    acquire(&f, &r[0], "a", NOW_US);
    acquire(&f, &r[1], "b", NOW_US);
    c = library_ready(&f);
    REQUIRE(c);
    CHECK(mem_expect(c, "FCALL ratel_acquire_many 2 a b"));
    REQUIRE(mem_send_str(&f.m, c, "-ERR Function not found\r\n") == 0);
    CHECK(r[0].calls == 0 && r[1].calls == 0);
    CHECK(mem_expect(c, "FCALL_RO ratel_version 0"));
    REQUIRE(mem_send_str(&f.m, c, "$1\r\n1\r\n") == 0);
    CHECK(mem_expect(c, "FCALL ratel_acquire_many 2 a b"));
    REQUIRE(mem_send_str(&f.m, c, "*1\r\n:1\r\n") == 0);
    CHECK(r[0].calls == 1 && r[0].rc == 0 && r[0].type == REDIS_REPLY_NIL);
    CHECK(r[1].calls == 1 && r[1].rc == 0 && r[1].type == REDIS_REPLY_NIL);
    fx_free(&f);
}

/* ------------------------------------------------------- failover */

TEST(readonly_fails_over_by_role)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c, *c2;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000,127.0.0.1:7001",
                    RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_ready(&f.m, 7000);
    REQUIRE(c);
    REQUIRE(mem_expect(c, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c,
                         "-READONLY You can't write against a read only "
                         "replica.\r\n") == 0);
    CHECK_EQ(r.calls, 0); /* parked */
    CHECK(mem_expect(c, "ROLE"));
    c2 = mem_open_conn(&f.m, 7001);
    REQUIRE(c2 && mem_up(&f.m, c2) == 0);
    CHECK(mem_expect(c2, "PING"));
    CHECK(mem_expect(c2, "ROLE"));
    REQUIRE(mem_send_str(&f.m, c, "*1\r\n$5\r\nslave\r\n") == 0);
    REQUIRE(mem_send_str(&f.m, c2, "+PONG\r\n*1\r\n$6\r\nmaster\r\n") == 0);
    CHECK_EQ(r.calls, 0);
    CHECK(mem_expect(c2, "COMMAND INFO"));
    REQUIRE(mem_send_str(&f.m, c2, "*1\r\n*0\r\n") == 0);
    CHECK(mem_expect(c2, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c2, ":1\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK(strcmp(r.node, "127.0.0.1:7001") == 0);
    CHECK_EQ(mem_pending_commands(c), 0);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

/* ------------------------------------------------ deadline, breaker */

/* An acquire sent to 7000 and never answered, past its deadline. */
static mem_conn_t *timed_out(fixture_t *f, res_t *r)
{
    mem_conn_t *c;

    acquire(f, r, "k", NOW_US);
    mem_flush(&f->m);
    c = mem_ready(&f->m, 7000);
    if (!c || !mem_expect(c, "RATEL.ACQUIRE k"))
        return NULL;
    mem_advance(&f->m, 199999);
    CHECK_EQ(r->calls, 0);
    mem_advance(&f->m, 1);
    return c;
}

TEST(deadline_fails_command_and_connection)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    c = timed_out(&f, &r);
    REQUIRE(c);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, RATEL_EIO);
    CHECK_EQ(c->closed, 1); /* the engine closed the connection */
    CHECK(strstr(f.errors, "no reply within 200 ms") != NULL);
    CHECK_EQ(f.m.timer_at, -1); /* nothing left to time */
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

TEST(breaker_then_one_probe)
{
    fixture_t f;
    res_t r, early, late, probe, behind;
    mem_conn_t *c;
    int opens;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    REQUIRE(timed_out(&f, &r));
    opens = f.m.opens;
    /* Within breaker_ms of the callers' time: failed at once, no I/O. */
    acquire(&f, &early, "k", NOW_US);
    acquire(&f, &late, "k", NOW_US + 499999);
    mem_flush(&f.m);
    CHECK_EQ(early.calls, 1);
    CHECK_EQ(early.rc, RATEL_EIO);
    CHECK_EQ(late.calls, 1);
    CHECK_EQ(late.rc, RATEL_EIO);
    CHECK_EQ(f.m.opens, opens);
    /* Past it: one probe connection; the next command waits behind. */
    acquire(&f, &probe, "k", NOW_US + 500000);
    acquire(&f, &behind, "k", NOW_US + 500000);
    mem_flush(&f.m);
    CHECK_EQ(f.m.opens, opens + 1);
    CHECK_EQ(probe.calls + behind.calls, 0);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_up(&f.m, c) == 0);
    /* The node keeps its mode: both leave at once, in one write. */
    CHECK_EQ(mem_pending_commands(c), 2);
    CHECK(mem_expect(c, "RATEL.ACQUIRE k"));
    CHECK(mem_expect(c, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c, ":1\r\n:2\r\n") == 0);
    CHECK_EQ(probe.calls, 1);
    CHECK_EQ(probe.rc, 0);
    CHECK_EQ(behind.calls, 1);
    CHECK_EQ(behind.rc, 0);
    CHECK_EQ(f.m.opens, opens + 1);
    fx_free(&f);
    CHECK_EQ(r.calls + early.calls + late.calls + probe.calls + behind.calls,
             5);
}

/* ------------------------------------------------- refusals, protocol */

TEST(auth_refused)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://user:secret@127.0.0.1:7000",
                    RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_up(&f.m, c) == 0);
    CHECK(mem_expect(c, "AUTH user secret"));
    REQUIRE(mem_send_str(&f.m, c,
                         "-WRONGPASS invalid username-password pair or user "
                         "is disabled.\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, RATEL_EPROTO);
    CHECK(strstr(f.errors, "127.0.0.1:7000 refused the credentials: "
                           "WRONGPASS") != NULL);
    CHECK_EQ(c->closed, 1);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

TEST(unasked_reply_fails_connection)
{
    fixture_t f;
    res_t r, queued;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_ready(&f.m, 7000);
    REQUIRE(c && mem_expect(c, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c, ":1\r\n:2\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.integer, 1);
    CHECK_EQ(c->closed, 1);
    CHECK(strstr(f.errors, "sent a reply nothing asked for") != NULL);
    /* The breaker is open now: the next command fails at once. */
    acquire(&f, &queued, "k", NOW_US);
    mem_flush(&f.m);
    CHECK_EQ(queued.calls, 1);
    CHECK_EQ(queued.rc, RATEL_EIO);
    fx_free(&f);
    CHECK_EQ(r.calls + queued.calls, 2);
}

TEST(not_redis_protocol)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_up(&f.m, c) == 0 && mem_expect(c, "PING"));
    REQUIRE(mem_send_str(&f.m, c, "HTTP/1.1 400 Bad Request\r\n\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, RATEL_EPROTO);
    CHECK(strstr(f.errors, "127.0.0.1:7000 answered something that is not "
                           "the Redis protocol") != NULL);
    CHECK_EQ(c->closed, 1);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

TEST(down_before_answer)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_down(&f.m, c, "Connection refused", 0) == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, RATEL_EIO);
    CHECK(strstr(f.errors, "cannot connect to 127.0.0.1:7000: Connection "
                           "refused") != NULL);
    CHECK_EQ(f.m.closes, 0); /* the transport let go: no close */
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

/* Sentinel names the primary; +switch-master moves it. */
TEST(sentinel_names_and_switches)
{
    fixture_t f;
    res_t r, after;
    mem_conn_t *s, *sub, *c, *c2;
    static const char sw[] =
        "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$47\r\n"
        "mymaster 127.0.0.1 7000 127.0.0.1 7001 failover\r\n";

    REQUIRE(fx_init(&f, "redis+sentinel://127.0.0.1:26379/mymaster",
                    RATEL_REDIS_AUTO) == 0);
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    s = mem_open_conn(&f.m, 26379);
    REQUIRE(s && mem_up(&f.m, s) == 0);
    REQUIRE(mem_expect(s, "SENTINEL GET-MASTER-ADDR-BY-NAME mymaster"));
    REQUIRE(mem_send_str(&f.m, s, "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000\r\n") ==
            0);
    CHECK_EQ(r.calls, 0);
    /* The Sentinel that answered carries the subscription. */
    sub = mem_open_conn(&f.m, 26379);
    REQUIRE(sub && sub != s && mem_up(&f.m, sub) == 0);
    CHECK(mem_expect(sub, "SUBSCRIBE +switch-master"));
    REQUIRE(mem_send_str(&f.m, sub,
                         "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-"
                         "master\r\n:1\r\n") == 0);
    c = mem_ready(&f.m, 7000);
    REQUIRE(c && mem_expect(c, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c, ":1\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK(strcmp(r.node, "127.0.0.1:7000") == 0);
    /* A message on the subscription is no unasked reply. */
    REQUIRE(mem_send_str(&f.m, sub, sw) == 0);
    CHECK(sub->link != NULL);
    acquire(&f, &after, "k", NOW_US);
    mem_flush(&f.m);
    CHECK_EQ(mem_pending_commands(c), 0);
    c2 = mem_ready(&f.m, 7001);
    REQUIRE(c2 && mem_expect(c2, "RATEL.ACQUIRE k"));
    REQUIRE(mem_send_str(&f.m, c2, ":2\r\n") == 0);
    CHECK_EQ(after.calls, 1);
    CHECK(strcmp(after.node, "127.0.0.1:7001") == 0);
    fx_free(&f);
    CHECK_EQ(r.calls + after.calls, 2);
}

/* A connection not made within connect_timeout_ms fails its commands. */
TEST(connect_timeout)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    f.sh.command_timeout_ms = 5000;
    acquire(&f, &r, "k", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c);
    CHECK_EQ(f.m.timer_at, f.m.now_us + 1000000);
    mem_advance(&f.m, 1000000);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, RATEL_EIO);
    CHECK_EQ(c->closed, 1);
    CHECK(strstr(f.errors, "no answer within 1000 ms (connect_timeout_ms)") !=
          NULL);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

/* A CLUSTER SLOTS answer out of range (a broken or hostile server) is
   read without looping over 2^63 slots or naming port 0. */
TEST(slots_out_of_range)
{
    fixture_t f;
    res_t r;
    mem_conn_t *c;
    static const char bad[] =
        "*2\r\n*3\r\n:-9223372036854775807\r\n:16383\r\n*2\r\n"
        "$9\r\n127.0.0.1\r\n:7000\r\n"
        "*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n";

    REQUIRE(fx_init(&f, "redis+cluster://127.0.0.1:7000", RATEL_REDIS_AUTO) ==
            0);
    acquire(&f, &r, "a", NOW_US);
    mem_flush(&f.m);
    c = mem_open_conn(&f.m, 7000);
    REQUIRE(c && mem_up(&f.m, c) == 0);
    REQUIRE(mem_expect(c, "PING") && mem_expect(c, "CLUSTER SLOTS"));
    REQUIRE(mem_send_str(&f.m, c, "+PONG\r\n") == 0);
    REQUIRE(mem_send_str(&f.m, c, bad) == 0);
    REQUIRE(mem_expect(c, "COMMAND INFO"));
    REQUIRE(mem_send_str(&f.m, c, "*1\r\n*0\r\n") == 0);
    CHECK(mem_expect(c, "RATEL.ACQUIRE a"));
    for (size_t i = 0; i < f.m.nconns; i++)
        CHECK(f.m.conns[i]->port >= 1 && f.m.conns[i]->port <= 65535);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
}

/* ------------------------------------------------- cluster failover */

/* 7000 owns every slot, 7001 is its replica; then 7001 owns them. */
static const char slots_7000_replica[] =
    "*1\r\n*4\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
    "*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n";
static const char slots_7001[] =
    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n";

/* The cluster of slots_7000_replica read at NOW_US, the acquire of "a"
   answered by 7000, then 7000 dies (kill -9): the next acquire's connect
   is refused, the store is down. */
static mem_conn_t *master_dies(fixture_t *f)
{
    res_t r;
    mem_conn_t *c;

    acquire(f, &r, "a", NOW_US);
    mem_flush(&f->m);
    c = mem_open_conn(&f->m, 7000);
    if (!c || mem_up(&f->m, c) != 0 || !mem_expect(c, "PING") ||
        !mem_expect(c, "CLUSTER SLOTS") ||
        mem_send_str(&f->m, c, "+PONG\r\n") != 0 ||
        mem_send_str(&f->m, c, slots_7000_replica) != 0 ||
        !mem_expect(c, "COMMAND INFO") ||
        mem_send_str(&f->m, c, "*1\r\n*0\r\n") != 0 ||
        !mem_expect(c, "RATEL.ACQUIRE a") ||
        mem_send_str(&f->m, c, ":1\r\n") != 0 || r.calls != 1 || r.rc != 0)
        return NULL;
    /* Its idle connection closes; the next command's connect is refused. */
    if (mem_down(&f->m, c, "Connection reset by peer", 0) != 0)
        return NULL;
    acquire(f, &r, "a", NOW_US);
    mem_flush(&f->m);
    c = mem_open_conn(&f->m, 7000);
    if (!c || mem_down(&f->m, c, "Connection refused", 0) != 0 ||
        r.calls != 1 || r.rc != RATEL_EIO)
        return NULL;
    return c;
}

/* A dead master sends no MOVED: a command for its slots reads the map
   again (asking the replica the map listed, the seed being the dead
   master), waits for it, and goes to the promoted replica; the dead
   master stops counting for the health: one outage, down then up. */
TEST(cluster_dead_master_replica_promoted)
{
    fixture_t f;
    res_t r, again;
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis+cluster://127.0.0.1:7000", RATEL_REDIS_AUTO) ==
            0);
    REQUIRE(master_dies(&f));
    CHECK_EQ(f.health.view.up, 0);
    acquire(&f, &r, "a", NOW_US + 100000);
    mem_flush(&f.m);
    CHECK_EQ(r.calls, 0); /* it waits for the map */
    CHECK(mem_open_conn(&f.m, 7000) == NULL);
    c = mem_open_conn(&f.m, 7001);
    REQUIRE(c && mem_up(&f.m, c) == 0);
    REQUIRE(mem_expect(c, "PING") && mem_expect(c, "CLUSTER SLOTS"));
    REQUIRE(mem_send_str(&f.m, c, "+PONG\r\n") == 0);
    REQUIRE(mem_send_str(&f.m, c, slots_7001) == 0);
    CHECK_EQ(f.health.view.up, 1); /* 7000 no longer serves */
    CHECK_EQ(f.health.view.transitions, 2);
    REQUIRE(mem_expect(c, "COMMAND INFO"));
    REQUIRE(mem_send_str(&f.m, c, "*1\r\n*0\r\n") == 0);
    CHECK(mem_expect(c, "RATEL.ACQUIRE a"));
    REQUIRE(mem_send_str(&f.m, c, ":2\r\n") == 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK(strcmp(r.node, "127.0.0.1:7001") == 0);
    /* Known now: the next one goes there at once, no read. */
    acquire(&f, &again, "a", NOW_US + 100001);
    mem_flush(&f.m);
    CHECK(mem_expect(c, "RATEL.ACQUIRE a"));
    CHECK_EQ(mem_pending_commands(c), 0);
    fx_free(&f);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(again.calls, 1);
}

/* An acquire of "a" at `at`: 1 when it read the map (asking 7001, the
   replica, answered with the unchanged map), 0 when it did not, -1 on
   anything else. The acquire fails either way (7000's breaker). */
static int read_at(fixture_t *f, mem_conn_t **c, int64_t at)
{
    res_t r;
    int asked = 0;

    acquire(f, &r, "a", at);
    mem_flush(&f->m);
    if (!*c && (*c = mem_open_conn(&f->m, 7001)) != NULL) {
        /* The first read opens the connection (and prepares 7001). */
        if (mem_up(&f->m, *c) != 0 || !mem_expect(*c, "PING") ||
            !mem_expect(*c, "CLUSTER SLOTS") ||
            mem_send_str(&f->m, *c, "+PONG\r\n") != 0 ||
            mem_send_str(&f->m, *c, slots_7000_replica) != 0 ||
            !mem_expect(*c, "COMMAND INFO") ||
            mem_send_str(&f->m, *c, "*1\r\n*0\r\n") != 0)
            return -1;
        asked = 1;
    } else if (*c && mem_pending_commands(*c) > 0) {
        if (!mem_expect(*c, "CLUSTER SLOTS") ||
            mem_send_str(&f->m, *c, slots_7000_replica) != 0)
            return -1;
        asked = 1;
    }
    return r.calls == 1 && r.rc == RATEL_EIO ? asked : -1;
}

/* While the dead master's breaker is open and the map does not change,
   reads are 100 ms apart, then 200, then 400 (of the callers' time);
   commands meanwhile fail at once, without waiting. */
TEST(cluster_map_backoff)
{
    fixture_t f;
    mem_conn_t *c = NULL;

    REQUIRE(fx_init(&f, "redis+cluster://127.0.0.1:7000", RATEL_REDIS_AUTO) ==
            0);
    REQUIRE(master_dies(&f));
    CHECK_EQ(read_at(&f, &c, NOW_US + 50000), 0);
    CHECK_EQ(read_at(&f, &c, NOW_US + 100000), 1);
    CHECK_EQ(read_at(&f, &c, NOW_US + 250000), 0);
    CHECK_EQ(read_at(&f, &c, NOW_US + 300000), 1);
    CHECK_EQ(read_at(&f, &c, NOW_US + 450000), 0);
    CHECK_EQ(f.m.opens, 3); /* 7000 twice, 7001 once: no more connects */
    fx_free(&f);
}

/* Commands in every place (on a connection, queued behind the node's
   preparation, parked for a failover) are each told once at free. */
TEST(free_tells_each_once)
{
    fixture_t f;
    res_t flight, queued, parked[3];
    mem_conn_t *c;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000,127.0.0.1:7001",
                    RATEL_REDIS_AUTO) == 0);
    acquire(&f, &flight, "a", NOW_US);
    mem_flush(&f.m);
    c = mem_ready(&f.m, 7000);
    REQUIRE(c && mem_expect(c, "RATEL.ACQUIRE a"));
    for (int i = 0; i < 3; i++)
        acquire(&f, &parked[i], "p", NOW_US);
    mem_flush(&f.m);
    REQUIRE(mem_send_str(&f.m, c, "-READONLY replica\r\n") == 0);
    acquire(&f, &queued, "q", NOW_US);
    CHECK_EQ(flight.calls + queued.calls, 0);
    mem_free(&f.m);
    f.m.e = NULL;
    CHECK_EQ(flight.calls, 1);
    CHECK_EQ(flight.rc, RATEL_EIO);
    CHECK_EQ(queued.calls, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(parked[i].calls, 1);
    mem_shared_free(&f.sh, &f.health);
}

/* A command submitted by another's `done` while the engine is freed (a
   batch giving back a denied group's charges) is told too. */
static res_t chained;
static fixture_t *chain_fx;

static void submit_on_done(ratel__rop_t *rop)
{
    on_done(rop);
    acquire(chain_fx, &chained, "next", NOW_US);
}

TEST(free_tells_commands_submitted_meanwhile)
{
    fixture_t f;
    res_t first, second;

    REQUIRE(fx_init(&f, "redis://127.0.0.1:7000", RATEL_REDIS_AUTO) == 0);
    chain_fx = &f;
    acquire(&f, &first, "a", NOW_US);
    acquire(&f, &second, "b", NOW_US);
    second.rop.done = submit_on_done;
    mem_flush(&f.m);
    memset(&chained, 0, sizeof chained);
    mem_free(&f.m);
    CHECK_EQ(first.calls, 1);
    CHECK_EQ(second.calls, 1);
    CHECK_EQ(chained.calls, 1);
    CHECK_EQ(chained.rc, RATEL_EIO);
    mem_shared_free(&f.sh, &f.health);
}

RATEL_SUITE(engine) = {
    {"engine_pipeline_one_buffer", test_pipeline_one_buffer},
    {"engine_pipeline_split_everywhere", test_pipeline_split_everywhere},
    {"engine_moved_followed", test_moved_followed},
    {"engine_ask_followed_with_asking", test_ask_followed_with_asking},
    {"engine_noscript_reloads_and_resends", test_noscript_reloads_and_resends},
    {"engine_library_batches_acquire_many", test_library_batches_acquire_many},
    {"engine_library_acquire_many_whole_errors",
     test_library_acquire_many_whole_errors},
    {"engine_readonly_fails_over_by_role", test_readonly_fails_over_by_role},
    {"engine_deadline_fails_command_and_connection",
     test_deadline_fails_command_and_connection},
    {"engine_breaker_then_one_probe", test_breaker_then_one_probe},
    {"engine_auth_refused", test_auth_refused},
    {"engine_unasked_reply_fails_connection",
     test_unasked_reply_fails_connection},
    {"engine_not_redis_protocol", test_not_redis_protocol},
    {"engine_down_before_answer", test_down_before_answer},
    {"engine_sentinel_names_and_switches", test_sentinel_names_and_switches},
    {"engine_connect_timeout", test_connect_timeout},
    {"engine_slots_out_of_range", test_slots_out_of_range},
    {"engine_cluster_dead_master_replica_promoted",
     test_cluster_dead_master_replica_promoted},
    {"engine_cluster_map_backoff", test_cluster_map_backoff},
    {"engine_free_tells_each_once", test_free_tells_each_once},
    {"engine_free_tells_commands_submitted_meanwhile",
     test_free_tells_commands_submitted_meanwhile},
    {0},
};
