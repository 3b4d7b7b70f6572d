/*
 * mem_transport.h - an in-memory transport for the Redis engine's tests
 * (test_engine.c, test_async.c) and its fuzz target (tests/fuzz/fuzz_engine.c):
 * no sockets, no clock, no loop. The test plays the network and the loop:
 *
 *   open   records the connection (host, port, the engine's link) and
 *          returns its handle; nothing is connected until the test calls
 *          mem_up()
 *   send   appends to the connection's `out`, which the test reads
 *          (mem_next_command() parses it back into words)
 *   close  marks the connection closed by the engine (no callback
 *          follows: the test must not call the link any more)
 *   timer  records when the engine's one timer is due; mem_advance()
 *          moves the fake clock and fires it when due
 *   defer  sets a flag; mem_flush() calls the engine's flush hook, as a
 *          loop does at the end of its turn
 *   now    the fake clock
 *
 * Every mem_up/mem_data/mem_down/mem_advance ends the turn (mem_flush),
 * as a real loop would after a callback.
 */
#ifndef RATEL_TEST_MEM_TRANSPORT_H
#define RATEL_TEST_MEM_TRANSPORT_H

#include "store/async.h"
#include "store/engine.h"
#include "store/health.h"
#include "store/transport.h"

#include <stddef.h>
#include <stdint.h>

#define MEM_MAX_CONNS 64

typedef struct mem_conn_s {
    ratel__link_t *link; /* NULL once closed (by the engine or by a down) */
    char host[256];
    int port;
    char *out; /* every byte sent, in order */
    size_t outlen, outcap;
    size_t read; /* how far mem_next_command() has read `out` */
    int closed;  /* 1: the engine closed it; 2: the test took it down */
    int up;      /* mem_up() was called */
} mem_conn_t;

typedef struct mem_s {
    ratel__transport_t t;
    ratel__loop_hooks_t hooks;
    ratel__engine_t *e;
    mem_conn_t *conns[MEM_MAX_CONNS];
    size_t nconns;
    int64_t now_us;   /* the fake monotonic clock */
    int64_t timer_at; /* -1: disarmed */
    int deferred;
    int refuse_open; /* `open` fails at once with "refused by the test" */
    int sends, opens, closes;
    int bad_close; /* close of a handle already closed or unknown */
} mem_t;

/*
 * Settings for an engine under test from a redis:// URL: connect 1000 ms,
 * commands 200 ms, a pool of 1, `mode`, a breaker of 500 ms, a stand-in
 * library ("1" its version) and script; failures are written into
 * `errors` (the last one, cut to its size). 0, or -1 when the URL does
 * not parse.
 */
int mem_shared_init(ratel__redis_shared_t *sh, ratel_health_t *health,
                    const char *url, ratel_redis_mode_t mode, char *errors,
                    size_t errlen);
void mem_shared_free(ratel__redis_shared_t *sh, ratel_health_t *health);

/* An engine on a new in-memory transport for `sh`; 0 or -1 (no memory). */
int mem_init(mem_t *m, const ratel__redis_shared_t *sh);
/*
 * The transport alone, for an asynchronous API on it (store/async.h): no
 * engine of the test's; *loop makes the async's instance, which is `m`
 * with the async's hooks. Free the async before mem_free().
 */
void mem_init_loop(mem_t *m, ratel__async_loop_t *loop);

/* Frees the engine (its commands are told) and the transport. */
void mem_free(mem_t *m);

/* Ends the turn: calls the engine's flush while it asked for one. */
void mem_flush(mem_t *m);
/* Moves the clock by `us` and fires the timer when due; then flushes. */
void mem_advance(mem_t *m, int64_t us);

/* Connection i (in order of `open`), NULL when there is none. */
mem_conn_t *mem_conn(mem_t *m, size_t i);
/* The newest connection to `port` still open, NULL when none. */
mem_conn_t *mem_open_conn(mem_t *m, int port);

/* The link callbacks, each followed by the end of the turn. A call on a
   closed connection is ignored (and returns -1). */
int mem_up(mem_t *m, mem_conn_t *c);
int mem_data(mem_t *m, mem_conn_t *c, const char *p, size_t n);
int mem_send_str(mem_t *m, mem_conn_t *c, const char *s);
int mem_down(mem_t *m, mem_conn_t *c, const char *why, int tls_error);

/*
 * The next command the engine sent on `c`, its words joined by spaces
 * into buf (a word longer than 60 bytes is cut to "<N bytes>"): 1, or 0
 * when no whole command is left.
 */
int mem_next_command(mem_conn_t *c, char *buf, size_t len);
/* How many whole commands are left unread on `c`. */
int mem_pending_commands(mem_conn_t *c);
/* The next command on `c` starts with `want`: 1, or 0 after saying on
   stderr what was sent instead (or that nothing was). */
int mem_expect(mem_conn_t *c, const char *want);
/*
 * Connects the newest connection to `port` and prepares its node as a
 * server with the Redis module loaded answers (PONG, then COMMAND INFO
 * ratel.acquire found): the connection, or NULL when it did not go so.
 */
mem_conn_t *mem_ready(mem_t *m, int port);

#endif /* RATEL_TEST_MEM_TRANSPORT_H */
