/*
 * conn.h - one HTTP/1.1 connection as a state machine without sockets.
 *
 * worker.c drives it from libevent callbacks; the fuzz target and unit
 * tests drive it directly. Bytes go in (read_space + received, or feed),
 * requests come out through the handler, responses come back through
 * ratel_http_respond() and leave as bytes (output + written) in request
 * order. The machine never reads a clock: every entry point that can
 * start or expire a timeout takes `now_ms`.
 *
 * Memory. A connection reads into one buffer (buf_size, from a
 * per-thread pool); a dispatched request's strings point into it and the
 * exchange holds a reference on it. The buffer is only compacted or reused when
 * no exchange points into it; when it fills up while earlier requests
 * are still unanswered, the request being read moves to a fresh buffer
 * and the old one lives until its last exchange is answered. Exchanges
 * and buffers come from per-thread free lists: the hot path (a small
 * request answered at once or at the flush) allocates nothing.
 *
 * Lifetime. A connection is reference-counted: one reference for its
 * owner (the socket) and one per unanswered exchange. When the peer goes
 * away, ratel__http_conn_close() drops the owner's reference; exchanges
 * still held by the handler stay valid, and answering them then only
 * frees them.
 *
 * Everything here runs on one worker thread; nothing is locked.
 */
#ifndef RATEL_HTTP_CONN_H
#define RATEL_HTTP_CONN_H

#include "http/grpc.h"
#include "http/http.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ratel__http_conn_s ratel__http_conn_t;
typedef struct ratel__http_ctx_s ratel__http_ctx_t;
typedef struct ratel__http_rbuf_s ratel__http_rbuf_t;

/*
 * Per-thread state shared by the connections of one worker: the limits,
 * the handler, the hooks to the driver and the free lists. Zero it, fill
 * the public part with ratel__http_ctx_init(), set the hooks if wanted.
 */
struct ratel__http_ctx_s {
    ratel_http_limits_t limits; /* with the defaults filled in */
    /* A connection's read buffer (8 KiB; it never reads into less than an
       eighth of it). The fuzz target makes it small to reach the paths
       where a full buffer is compacted or a request moves out of it. */
    size_t buf_size;
    ratel_http_handler_fn handler;
    void *ud;
    unsigned thread;
    /* A request was dispatched (the driver schedules its flush). May be
       NULL. */
    void (*dispatched)(ratel__http_ctx_t *ctx);
    /* A connection has new output or has finished, outside of the
       driver's own calls into it (a handler answering later); `user` is
       the driver's pointer for it (set_user). May be NULL; the driver
       then polls. */
    void (*wake)(ratel__http_ctx_t *ctx, void *user);
    /* Whether the peer of the connection whose pointer is `user` has
       closed its side or reset it (the driver asks the socket, without
       waiting). May be NULL: then only a closed connection is gone. */
    int (*peer_closed)(ratel__http_ctx_t *ctx, void *user);
    void *driver;

    /* gRPC over h2c (h2.c): the handler and limits (defaults filled in),
       and the buffer every h2c connection of the thread reads into. */
    ratel_grpc_handler_fn grpc_handler;
    ratel_grpc_limits_t grpc_limits;
    const ratel_grpc_stream_method_t *grpc_streams; /* n of them */
    size_t ngrpc_streams;
    char scratch[16384];
    ratel_grpc_call_t *free_calls; /* h2.c's pool */
    unsigned nfree_calls;

    /* Private: free lists and every connection still allocated. */
    ratel_http_exchange_t *free_exchanges;
    unsigned nfree_exchanges;
    ratel__http_rbuf_t *free_bufs;
    unsigned nfree_bufs;
    ratel__http_conn_t *free_conns;
    unsigned nfree_conns;
    ratel__http_conn_t *conns; /* live and closed-but-referenced */
    /* Bytes freed that the pools did not keep (big buffers, or past a
       pool's size) since the driver last reset it: memory that
       malloc_trim() could give back to the system. */
    size_t released_bytes;
};

/* Fills `ctx` (zeroed first) with limits (0 fields take the defaults of
   http.h), the handler and its user data, and buf_size 8 KiB. */
void ratel__http_ctx_init(ratel__http_ctx_t *ctx,
                          const ratel_http_limits_t *limits,
                          ratel_http_handler_fn handler, void *ud,
                          unsigned thread);

/* Frees the free lists and every connection and exchange still allocated
   (exchanges a handler kept are gone afterwards). */
void ratel__http_ctx_destroy(ratel__http_ctx_t *ctx);

/* The limits with every 0 replaced by its default (and clamped to what
   the machine supports). */
void ratel__http_limits_fill(ratel_http_limits_t *out,
                             const ratel_http_limits_t *in);

/*
 * A protocol the driver speaks on a listener: HTTP/1.1 (conn.c) or h2c
 * gRPC (h2.c). Each function is the like-named ratel__http_conn_*
 * function below, on the protocol's own connection type; worker.c only
 * ever calls a connection through its protocol's table.
 */
typedef struct ratel__http_proto_s {
    const char *name;
    void *(*conn_new)(ratel__http_ctx_t *ctx, const struct sockaddr *peer,
                      socklen_t peer_len, int64_t now_ms);
    void (*set_user)(void *c, void *user);
    char *(*read_space)(void *c, size_t *room);
    void (*received)(void *c, size_t n, int64_t now_ms);
    void (*process)(void *c, int64_t now_ms);
    int (*pending)(void *c);
    const char *(*output)(void *c, size_t *n);
    void (*written)(void *c, size_t n, int64_t now_ms);
    int (*wants_read)(void *c);
    int (*finished)(void *c);
    int (*aborted)(void *c);
    int (*tick)(void *c, int64_t now_ms);
    int (*drain)(void *c, int64_t now_ms);
    void (*close)(void *c);
    void (*trim)(void *c);
} ratel__http_proto_t;

extern const ratel__http_proto_t ratel__http1_proto; /* conn.c */
extern const ratel__http_proto_t ratel__h2_proto;    /* h2.c */

/* Frees h2.c's pool of calls in `ctx`. */
void ratel__h2_ctx_destroy(ratel__http_ctx_t *ctx);

/* The gRPC limits with every 0 replaced by its default (grpc.h). */
void ratel__grpc_limits_fill(ratel_grpc_limits_t *out,
                             const ratel_grpc_limits_t *in);

/* Tells the driver that the connection whose pointer is `user` has
   something to do (see wake). */
static inline void ratel__http_wake_user(ratel__http_ctx_t *ctx, void *user)
{
    if (ctx->wake && user)
        ctx->wake(ctx, user);
}

/* A new connection from `peer` (may be NULL), or NULL without memory. */
ratel__http_conn_t *ratel__http_conn_new(ratel__http_ctx_t *ctx,
                                         const struct sockaddr *peer,
                                         socklen_t peer_len, int64_t now_ms);

/* The driver's pointer for this connection (NULL once closed). */
void *ratel__http_conn_user(const ratel__http_conn_t *c);
void ratel__http_conn_set_user(ratel__http_conn_t *c, void *user);

/*
 * Where to read the next bytes: sets *room (> 0) and returns the space,
 * or returns NULL when the connection does not take bytes now (requests
 * in flight and unsent answers at max_pipeline, unsent output above the
 * high-water mark, requests buffered but held back, closing, or out of
 * memory, in which case an error response is queued).
 */
char *ratel__http_conn_read_space(ratel__http_conn_t *c, size_t *room);

/* `n` bytes were written at the space read_space returned: parse them,
   dispatch complete requests, queue error responses. */
void ratel__http_conn_received(ratel__http_conn_t *c, size_t n, int64_t now_ms);

/* Copies and parses up to n bytes; returns how many were taken (fewer
   when read_space refuses). For tests and the fuzz target. */
size_t ratel__http_conn_feed(ratel__http_conn_t *c, const char *data, size_t n,
                             int64_t now_ms);

/* Parses requests already buffered but held back (pipeline limit,
   unsent output) if they may go now. The driver calls it after answers
   went out. */
void ratel__http_conn_process(ratel__http_conn_t *c, int64_t now_ms);

/* 1 if requests are buffered that ratel__http_conn_process() would parse
   now (the socket took the output that held them back). */
int ratel__http_conn_pending(const ratel__http_conn_t *c);

/* Bytes waiting to be sent (*n 0 when none) and how many were sent. */
const char *ratel__http_conn_output(const ratel__http_conn_t *c, size_t *n);
void ratel__http_conn_written(ratel__http_conn_t *c, size_t n, int64_t now_ms);

/* 1 if the driver should read from the socket now. */
int ratel__http_conn_wants_read(const ratel__http_conn_t *c);

/* 1 when the connection is done: its last response is written and it
   must be closed. */
int ratel__http_conn_finished(const ratel__http_conn_t *c);

/* 1 when it is done without its output (out of memory, or its unsent
   output passed max_output_bytes): close it at once, nothing to send. */
int ratel__http_conn_aborted(const ratel__http_conn_t *c);

/*
 * Applies the timeouts at `now_ms`: a request started more than
 * request_timeout_ms ago gets 408 (and the connection closes after it).
 * Returns 1 if the connection should be closed at once (idle past
 * idle_timeout_ms, or output stuck that long).
 */
int ratel__http_conn_tick(ratel__http_conn_t *c, int64_t now_ms);

/*
 * The server is stopping: requests already complete in the buffer are
 * dispatched, the partial one is dropped, nothing more is read and the
 * connection closes after its last answer (which says Connection: close).
 * Returns 1 if there is nothing left to answer or write (close it now).
 */
int ratel__http_conn_drain(ratel__http_conn_t *c, int64_t now_ms);

/* The socket is gone: drop the owner's reference. Unanswered exchanges
   stay valid; their answers are discarded. */
void ratel__http_conn_close(ratel__http_conn_t *c);

/* Queues an error response (`status`, closing) after the responses
   already owed; nothing more is parsed. `text` (static, or NULL for the
   status's usual text) is the body's {"error": ...}. */
void ratel__http_conn_error(ratel__http_conn_t *c, int status,
                            const char *text);

/* Returns the read buffer to the pool if nothing needs it (an idle
   keep-alive connection holds no buffer), and frees an empty output
   buffer bigger than a pooled connection keeps. */
void ratel__http_conn_trim(ratel__http_conn_t *c);

/* Requests dispatched and not yet answered. */
unsigned ratel__http_conn_inflight(const ratel__http_conn_t *c);

/*
 * The one builder of the errors the HTTP layer answers by itself (400,
 * 408, 413, 414, 431, 503, 505): a complete response with Connection:
 * close, Content-Type application/json and the body {"error":"TEXT"}
 * (TEXT JSON-escaped; NULL: the status's usual text, naming the limit
 * passed). Returns its length (at most len, which should be >= 512).
 */
size_t ratel__http_error_response(int status, const char *text, char *buf,
                                  size_t len);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_HTTP_CONN_H */
