/*
 * fuzz_engine.c - the Redis engine (lib/store/engine*.c) on the in-memory
 * transport (tests/unit/mem_transport.h), its replies and its network
 * chosen by the input.
 *
 * The input is read as a program:
 *
 *   byte 0      the setup: the URL (one node, a primary and a successor,
 *               a cluster, Sentinels, a password and a database), the
 *               mode (auto, lua, function, module), the pool, and whether
 *               commands go to the engine directly (acquire, refund, get,
 *               ping, reset of a few keys and policies) or through the
 *               store's layer (batches of acquires, groups, refunds,
 *               gets, resets: ratel__redis_batch_start,
 * ratel__redis_call_start) byte 1      how many commands are submitted first,
 * each described by a byte that follows (after, for the store's layer, a byte
 *               choosing its failure policy, deny cache and client time)
 *   then        operations, one byte each and their arguments: bytes of
 *               the input delivered to a connection in chunks whose sizes
 *               come from the input; a well-formed reply (PONG, COMMAND
 *               INFO, a script's SHA, MOVED, ASK, NOSCRIPT, READONLY,
 *               ROLE, CLUSTER SLOTS, a Sentinel's answer, +switch-master,
 *               errors...) cut the same way; a connection up or down; the
 *               clock moved (deadlines, connect timeouts, the breaker);
 *               more commands; the engine freed early
 *
 * Invariants: nothing crashes (ASan/UBSan in `make asan` and `make fuzz`,
 * valgrind by hand); `done` is never called inside submit, never twice,
 * and every command's is called by the time the engine is freed; every
 * reply handed out is freed by the test (so LeakSanitizer sees a leak of
 * the engine's); `close` is never called on a connection already closed;
 * a batch's or a call's callback comes exactly once when it did not end
 * at once, and its decisions name a known source.
 */
#include "store/redis_private.h"
#include "tests/unit/mem_transport.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_engine: %s:%d: invariant broken: %s\n",      \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define MAX_ROPS 48
#define MAX_OPS 400

typedef struct input_s {
    const uint8_t *p;
    size_t n;
} input_t;

static unsigned byte(input_t *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

typedef struct slot_s {
    ratel__rop_t rop;
    int calls;
    int submitting;
} slot_t;

static slot_t slots[MAX_ROPS];
static size_t nslots;
static ratel_policy_t policies[2];

static void on_done(ratel__rop_t *rop)
{
    slot_t *s = rop->ud;

    ASSERT(!s->submitting);
    ASSERT(s->calls == 0);
    s->calls++;
    ASSERT(rop->rc == 0 || rop->rc == RATEL_EIO || rop->rc == RATEL_EPROTO ||
           rop->rc == RATEL_ENOMEM);
    freeReplyObject(rop->reply);
    rop->reply = NULL;
}

/* The store of the store-layer setups (NULL: commands go to the engine
   directly), and how its commands are made. */
static redis_store_t *store;
static void store_submit(mem_t *m, unsigned d);

static void submit(mem_t *m, unsigned d)
{
    static const char *const keys[] = {"a", "b", "{a}x", "k:1"};
    static const ratel__rop_kind_t kinds[] = {
        RATEL__ROP_ACQUIRE, RATEL__ROP_ACQUIRE, RATEL__ROP_REFUND,
        RATEL__ROP_GET,     RATEL__ROP_PING,    RATEL__ROP_RESET};
    slot_t *s;
    ratel__rop_t *rop;

    if (store) {
        store_submit(m, d);
        return;
    }
    if (nslots == MAX_ROPS || !m->e)
        return;
    s = &slots[nslots++];
    memset(s, 0, sizeof *s);
    rop = &s->rop;
    rop->kind = kinds[d % 6];
    rop->key = keys[(d >> 3) & 3];
    rop->keylen = strlen(rop->key);
    rop->policy = &policies[(d >> 5) & 1];
    rop->request.cost = (d & 0x40) ? 3 : 1;
    rop->request.flags = (d & 0x80) ? RATEL_PEEK : 0;
    rop->at_ms = (d & 0x40) ? 12345 : -1;
    /* The callers' time follows the clock (a breaker's interval passes). */
    rop->now_us = m->now_us;
    rop->done = on_done;
    rop->ud = s;
    s->submitting = 1;
    ratel__engine_submit(m->e, rop);
    s->submitting = 0;
    ASSERT(s->calls == 0);
}

/*
 * The store's layer on the engine (redis_decide.c): batches of acquires
 * (groups included) and refunds, gets and resets, as ratel_store_* and
 * the asynchronous API make them, on a store made with lazy_connect whose
 * settings the engine under test shares.
 */
#define MAX_FLIGHTS 16

typedef struct flight_s {
    int batch, waiting, told;
    redis_batch_t b;
    ratel_batch_item_t items[3];
    redis_call_t call;
    ratel_decision_t decision;
    ratel_rule_status_t status[RATEL_MAX_RULES];
    size_t nstatus;
} flight_t;

static flight_t flights[MAX_FLIGHTS];
static size_t nflights;
static void check_decision(const ratel_decision_t *d)
{
    ASSERT(d->source >= RATEL_SOURCE_STORE && d->source <= RATEL_SOURCE_LOCAL);
}

static void flight_done(void *ud)
{
    flight_t *f = ud;

    ASSERT(f->waiting);
    ASSERT(!f->told);
    f->told = 1;
    if (f->batch) {
        for (size_t i = 0; i < f->b.n; i++)
            if (f->items[i].rc == 0)
                check_decision(&f->items[i].decision);
    } else if (f->call.rc == 0 && f->call.decision) {
        check_decision(f->call.decision);
    }
    if (!f->batch && f->call.rc == 0 && f->call.n)
        ASSERT(*f->call.n <= f->call.max);
}

static void store_submit(mem_t *m, unsigned d)
{
    static const char *const keys[] = {"a", "b", "{a}x"};
    static const ratel__rop_kind_t kinds[] = {RATEL__ROP_REFUND, RATEL__ROP_GET,
                                              RATEL__ROP_RESET};
    flight_t *f;

    if (nflights == MAX_FLIGHTS || !m->e)
        return;
    f = &flights[nflights++];
    memset(f, 0, sizeof *f);
    f->batch = (d & 3) != 3;
    if (f->batch) {
        size_t n = 1 + (d >> 2) % 3;
        for (size_t i = 0; i < n; i++) {
            ratel_batch_item_t *it = &f->items[i];
            it->key = keys[(i + (d >> 4)) % 3];
            it->keylen = strlen(it->key);
            it->policy = &policies[(d >> 6) & 1];
            it->request.cost = 1;
            it->group = n > 1 && (d & 0x80) ? 7 : 0;
        }
        f->b = (redis_batch_t){.s = store,
                               .e = m->e,
                               .items = f->items,
                               .n = n,
                               .now_us = m->now_us,
                               .fn = flight_done,
                               .ud = f};
        f->waiting = 1;
        if (ratel__redis_batch_start(&f->b) != 0) {
            f->waiting = 0;
            for (size_t i = 0; i < n; i++)
                if (f->items[i].rc == 0)
                    check_decision(&f->items[i].decision);
        }
        return;
    }
    f->call.s = store;
    f->call.rop.kind = kinds[(d >> 2) % 3];
    f->call.rop.key = keys[(d >> 4) % 3];
    f->call.rop.keylen = strlen(f->call.rop.key);
    f->call.rop.policy = &policies[(d >> 6) & 1];
    f->call.rop.request.cost = 1;
    f->call.rop.now_us = m->now_us;
    if (f->call.rop.kind == RATEL__ROP_REFUND)
        f->call.decision = &f->decision;
    f->call.out = f->status;
    f->call.max = RATEL_MAX_RULES;
    f->call.n = &f->nstatus;
    f->call.fn = flight_done;
    f->call.ud = f;
    f->waiting = 1;
    if (ratel__redis_call_start(m->e, &f->call) != 0)
        f->waiting = 0;
    ASSERT(!f->told);
}

/* Replies a server or a Sentinel might give, for reaching deep states. */
static const char *const canned[] = {
    "+PONG\r\n",
    "*1\r\n*0\r\n", /* COMMAND INFO: the module is there */
    "*1\r\n*-1\r\n",
    "$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", /* SCRIPT LOAD */
    "$1\r\n1\r\n",                                         /* ratel_version */
    "$5\r\nratel\r\n",                                     /* FUNCTION LOAD */
    "+OK\r\n",
    ":1\r\n",
    "*2\r\n:1\r\n:0\r\n",
    "-MOVED 15495 127.0.0.1:7001\r\n",
    "-ASK 15495 127.0.0.1:7001\r\n",
    "-MOVED 3300 127.0.0.1:7000\r\n",
    "-NOSCRIPT No matching script.\r\n",
    "-ERR Function not found\r\n",
    "-ERR unknown command 'RATEL.ACQUIRE'\r\n",
    "-READONLY You can't write against a read only replica.\r\n",
    "-LOADING Redis is loading the dataset in memory\r\n",
    "-WRONGPASS invalid username-password pair\r\n",
    "-ERR Functions are disabled\r\n",
    "*1\r\n$6\r\nmaster\r\n", /* ROLE */
    "*1\r\n$5\r\nslave\r\n",
    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n",
    "*2\r\n*3\r\n:0\r\n:8191\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
    "*3\r\n:8192\r\n:16383\r\n*2\r\n$0\r\n\r\n:7001\r\n",
    "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000\r\n", /* the Sentinel's primary */
    "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7001\r\n",
    "*-1\r\n",
    "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n",
    "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$47\r\n"
    "mymaster 127.0.0.1 7000 127.0.0.1 7001 failover\r\n",
    "$-1\r\n",
    "%1\r\n+a\r\n:1\r\n", /* RESP3: not what RESP2 servers send */
    "-ERR\r\n",
    /* The core's seven integers: allowed, then denied. */
    "*7\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n:0\r\n:0\r\n",
    "*7\r\n:0\r\n:10\r\n:0\r\n:100\r\n:1000\r\n:0\r\n:0\r\n",
    "-ERR ratel: at most 8 rules\r\n",
    /* ratel_acquire_many's: two decisions; a decision and an item's
       error; a decision and a nil (no item's answer). */
    "*2\r\n*7\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n:0\r\n:0\r\n"
    "*7\r\n:0\r\n:10\r\n:0\r\n:100\r\n:1000\r\n:0\r\n:0\r\n",
    "*2\r\n*7\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n:0\r\n:0\r\n"
    "-MOVED 15495 127.0.0.1:7001\r\n",
    "*3\r\n*7\r\n:1\r\n:10\r\n:9\r\n:0\r\n:100\r\n:0\r\n:0\r\n"
    "$-1\r\n-ERR ratel: at most 8 rules\r\n",
    /* CLUSTER SLOTS out of range: once a loop over 2^63 slots. */
    "*1\r\n*3\r\n:-9223372036854775807\r\n:16383\r\n*2\r\n$9\r\n"
    "127.0.0.1\r\n:7000\r\n",
};

/* Delivers text[0..len) to c in chunks whose sizes the input chooses. */
static void deliver(mem_t *m, mem_conn_t *c, input_t *in, const char *text,
                    size_t len)
{
    size_t at = 0;

    while (at < len && c->link) {
        size_t chunk = 1 + byte(in) % 16;
        if (chunk > len - at)
            chunk = len - at;
        mem_data(m, c, text + at, chunk);
        at += chunk;
    }
}

static void step(mem_t *m, input_t *in)
{
    unsigned op = byte(in), arg = byte(in);
    mem_conn_t *c = m->nconns ? mem_conn(m, arg % m->nconns) : NULL;

    switch (op % 10) {
    case 0: { /* the input's own bytes as a reply */
        size_t len = byte(in) % 48;
        if (len > in->n)
            len = in->n;
        if (c && c->up) {
            const char *p = (const char *)in->p;
            in->p += len;
            in->n -= len;
            deliver(m, c, in, p, len);
        }
        break;
    }
    case 1:
    case 2:
    case 3: /* a well-formed reply */
        if (c && c->up) {
            const char *t = canned[byte(in) % (sizeof canned / sizeof *canned)];
            deliver(m, c, in, t, strlen(t));
        }
        break;
    case 4:
        if (c)
            mem_up(m, c);
        break;
    case 5:
        if (c)
            mem_down(m, c,
                     (arg & 1) ? "Connection reset by peer"
                               : "certificate verify failed",
                     (arg & 6) == 6);
        break;
    case 6: /* time passes: deadlines, connect timeouts, the breaker */
        mem_advance(m, (int64_t)(1 + arg) * 5000);
        break;
    case 7:
        submit(m, arg);
        mem_flush(m);
        break;
    case 8:
        m->refuse_open = arg & 1;
        mem_flush(m);
        break;
    default: /* up every connection made and answer PONG: setup fast */
        for (size_t i = 0; i < m->nconns; i++)
            if (m->conns[i]->link && !m->conns[i]->up)
                mem_up(m, m->conns[i]);
        break;
    }
}

/* FUZZ_ENGINE_TRACE=1 fuzz_engine SEED: what a seed reaches, to write
   seeds that go deep (the commands each connection was sent). */
static void trace_state(mem_t *m, const char *errors)
{
    fprintf(stderr, "--- done:");
    for (size_t k = 0; k < nslots; k++)
        fprintf(stderr, " %d/%d", slots[k].calls, slots[k].rop.rc);
    for (size_t k = 0; k < nflights; k++) {
        const flight_t *f = &flights[k];
        fprintf(stderr, " %s%d:", f->batch ? "batch" : "call", f->told);
        for (size_t i = 0; f->batch && i < f->b.n; i++)
            fprintf(stderr, "%d/%d/%d,", f->items[i].rc,
                    f->items[i].decision.allowed, f->items[i].decision.source);
        if (!f->batch)
            fprintf(stderr, "%d", f->call.rc);
    }
    fprintf(stderr, " last error: %s\n", store ? store->errstr : errors);
    for (size_t i = 0; i < m->nconns; i++) {
        mem_conn_t *c = m->conns[i];
        char cmd[200];
        fprintf(stderr, "  conn %zu :%d %s:", i, c->port,
                c->link ? (c->up ? "up" : "opening") : "closed");
        while (mem_next_command(c, cmd, sizeof cmd))
            fprintf(stderr, " [%s]", cmd);
        fprintf(stderr, "\n");
    }
}

static ratel__redis_shared_t sh;
static ratel_health_t health;
static char errors[512];

/*
 * The engine the setup byte asks for: on settings of its own, or (0x40)
 * on those of a store made with lazy_connect, whose failure policy, deny
 * cache and client time the next byte chooses.
 */
static void start(mem_t *m, unsigned setup, input_t *in)
{
    static const char *const urls[] = {
        "redis://127.0.0.1:7000",
        "redis://127.0.0.1:7000,127.0.0.1:7001",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
        "redis://:pw@127.0.0.1:7000/3",
        "redis+sentinel://u:pw@127.0.0.1:26379/mymaster?sentinel_password=sp",
    };
    static const ratel_redis_mode_t modes[] = {
        RATEL_REDIS_AUTO, RATEL_REDIS_LUA, RATEL_REDIS_FUNCTION,
        RATEL_REDIS_MODULE};
    static const ratel_failure_t on_failure[] = {
        RATEL_FAILURE_DEFAULT, RATEL_FAILURE_OPEN, RATEL_FAILURE_CLOSED,
        RATEL_FAILURE_LOCAL};
    const char *url = urls[(setup & 7) % 6];
    ratel_redis_mode_t mode = modes[(setup >> 3) & 3];
    unsigned pool = 1 + ((setup >> 5) & 1);

    if (setup & 0x40) {
        unsigned opts = byte(in);
        ratel_redis_options_t o = {.url = url,
                                   .connect_timeout_ms = 1000,
                                   .command_timeout_ms = 200,
                                   .pool_size = pool,
                                   .on_failure = on_failure[opts & 3],
                                   .mode = mode,
                                   .deny_cache_entries = (opts & 4) ? 64 : -1,
                                   .breaker_ms = 500,
                                   .client_time = (opts >> 3) & 1,
                                   .lazy_connect = 1};
        ratel_store_t *st = NULL;
        ASSERT(ratel_store_redis_new(&st, &o, errors, sizeof errors) == 0);
        store = (redis_store_t *)st;
        ASSERT(mem_init(m, &store->sh) == 0);
        return;
    }
    ASSERT(mem_shared_init(&sh, &health, url, mode, errors, sizeof errors) ==
           0);
    sh.pool_size = pool;
    ASSERT(mem_init(m, &sh) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const rules0[] = {"10/s"};
    static const char *const rules1[] = {"5/m", "100/h"};
    static mem_t m;
    input_t in = {data, size};
    unsigned setup = byte(&in), first = byte(&in) % 12;
    int trace = getenv("FUZZ_ENGINE_TRACE") != NULL;

    ASSERT(ratel_policy_parse(&policies[0], rules0, 1, NULL, 0) == 0);
    ASSERT(ratel_policy_parse(&policies[1], rules1, 2, NULL, 0) == 0);
    nslots = 0;
    nflights = 0;
    store = NULL;
    start(&m, setup, &in);
    for (unsigned i = 0; i < first; i++)
        submit(&m, byte(&in));
    mem_flush(&m);
    for (int i = 0; i < MAX_OPS && in.n > 0; i++) {
        if (byte(&in) == 0xff)
            break; /* freed with whatever is pending */
        step(&m, &in);
        if (trace)
            trace_state(&m, errors);
        for (size_t k = 0; k < nslots; k++)
            ASSERT(slots[k].calls <= 1);
    }
    mem_free(&m);
    ASSERT(m.bad_close == 0);
    for (size_t k = 0; k < nslots; k++)
        ASSERT(slots[k].calls == 1);
    for (size_t k = 0; k < nflights; k++) {
        ASSERT(flights[k].told == flights[k].waiting);
        if (flights[k].batch)
            ratel__redis_batch_end(&flights[k].b);
    }
    if (store)
        ratel_store_free(&store->base);
    else
        mem_shared_free(&sh, &health);
    store = NULL;
    return 0;
}
