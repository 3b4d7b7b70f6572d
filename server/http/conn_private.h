/*
 * conn_private.h - the structures behind conn.h, shared by conn.c (pools,
 * buffers, the connection's life, timeouts, draining), parse.c (parsing
 * and dispatch) and respond.c (output: formatting answers and keeping
 * them in request order). Nothing else includes it.
 */
#ifndef RATEL_HTTP_CONN_PRIVATE_H
#define RATEL_HTTP_CONN_PRIVATE_H

#include "http/conn.h"

#include <http_parser.h>

/* Requests are not read or parsed while more unsent output than this
   waits: the kernel's socket buffer already holds what keeps the client
   busy, and a client that does not read must not make us hold more. */
#define OUT_HIGH (16 << 10)
/* max_output_bytes is at least this much. */
#define MIN_OUTPUT_LIMIT (64 << 10)
#define POOL_EXCHANGES 1024       /* free exchanges kept per thread */
#define POOL_BUFS 256             /* free read buffers kept per thread */
#define POOL_CONNS 256            /* free connections kept per thread */
#define KEEP_RESP 4096            /* a pooled exchange keeps this much buffer */
#define KEEP_OUT 16384            /* a pooled connection keeps this much */
#define MAX_BODY_LIMIT (1u << 30) /* offsets are 32-bit */

struct ratel__http_rbuf_s {
    ratel__http_rbuf_t *next; /* free list */
    unsigned refs;            /* the connection's + one per exchange */
    size_t cap;
    char data[];
};

struct ratel_http_exchange_s {
    ratel_http_exchange_t *prev, *next; /* the connection's queue */
    ratel__http_conn_t *conn;
    ratel__http_rbuf_t *buf; /* the request's strings live here */
    char *resp;              /* a response waiting for earlier ones */
    size_t resp_len, resp_cap;
    unsigned char answered, close, head;
    ratel_http_request_t req;
};

typedef struct span_s {
    uint32_t off, n;
} span_t;

enum { CB_NONE, CB_URL, CB_FIELD, CB_VALUE };
enum { CONN_HEADER_NONE, CONN_HEADER_CLOSE, CONN_HEADER_KEEP_ALIVE };

struct ratel__http_conn_s {
    ratel__http_ctx_t *ctx;
    ratel__http_conn_t *prev, *next; /* ctx->conns, or the free list */
    void *user;
    unsigned refs; /* the owner's + one per unanswered exchange */
    http_parser parser;
    int64_t now_ms;

    /* Input: bytes [start, len) of buf are the request being read (and,
       when the pipeline is full, requests not yet parsed); the parser
       has consumed up to `parsed`. */
    ratel__http_rbuf_t *buf;
    size_t start, parsed, len;

    /* The request being parsed, offsets from `start`. */
    span_t url, body;
    span_t names[RATEL_HTTP_MAX_HEADERS], values[RATEL_HTTP_MAX_HEADERS];
    unsigned nheaders;
    int fail_status;      /* set by a callback that stops the parser */
    const char *fail_msg; /* and why, for the error's body (static) */
    /* A chunked body's framing: checked up to raw_end (an offset from
       `start`, after the last chunk data as the parser saw it, before
       on_body moved the data down); `frame` says what must come next. */
    uint32_t raw_end;
    unsigned char chunked, frame;
    int64_t request_started_ms, active_ms;
    unsigned char last_cb, in_request, headers_done, body_started;

    /* Exchanges dispatched and not yet written, oldest first. */
    ratel_http_exchange_t *head, *tail;
    unsigned inflight;

    /* Output waiting for the socket. out_answers counts the answers put
       into it since it was last empty: until the socket has taken all of
       it, they count against max_pipeline like requests in flight. */
    char *out;
    size_t out_off, out_len, out_cap;
    unsigned out_answers;
    int64_t out_progress_ms;

    int err_status;          /* an error response owed after the queue */
    const char *err_msg;     /* its {"error": ...} text (static), or NULL */
    unsigned char dead;      /* the socket is gone */
    unsigned char peer_gone; /* the peer closed its side (sticky) */
    unsigned char no_more;   /* parse no further request */
    unsigned char closing;   /* close once the queue is empty and written */
    unsigned char close_out; /* a response saying Connection: close left */
    unsigned char draining;
    unsigned char abort; /* out of memory: close at once */

    struct sockaddr_storage peer;
    socklen_t peer_len;
};

/* An exchange from the thread's pool (or a new one), empty and unlinked;
   NULL without memory (conn.c). */
ratel_http_exchange_t *ratel__http_exchange_get(ratel__http_ctx_t *ctx);

/* Parses what is buffered, dispatching each complete request, while
   ratel__http_may_dispatch() allows unless `all` (parse.c). */
void ratel__http_parse(ratel__http_conn_t *c, int all);

/* Returns an answered (or abandoned) exchange to the pool and drops its
   references on the buffer and the connection (conn.c). */
void ratel__http_exchange_release(ratel_http_exchange_t *ex);

/* Appends n bytes to the connection's output; without memory the
   connection aborts (respond.c). */
void ratel__http_out_append(ratel__http_conn_t *c, const char *p, size_t n);

/* Frees a block the pools do not keep (a big buffer, or one past the
   pool's size) and counts its bytes for the driver's malloc_trim()
   (conn.c). */
void ratel__http_release(ratel__http_ctx_t *ctx, void *p, size_t bytes);

/* Takes an exchange out of its connection's queue. */
static inline void ratel__http_unlink_exchange(ratel__http_conn_t *c,
                                               ratel_http_exchange_t *ex)
{
    if (ex->prev)
        ex->prev->next = ex->next;
    else
        c->head = ex->next;
    if (ex->next)
        ex->next->prev = ex->prev;
    else
        c->tail = ex->prev;
    c->inflight--;
}

/*
 * 1 if another request may be dispatched: the requests in flight and the
 * answers the socket has not taken stay below max_pipeline, and the
 * unsent output below the high-water mark. Answers given at once leave
 * inflight at 0, so without counting the unsent ones a client that never
 * reads would have every request in its buffer answered into memory.
 */
static inline int ratel__http_may_dispatch(const ratel__http_conn_t *c)
{
    return c->inflight + c->out_answers < c->ctx->limits.max_pipeline &&
           c->out_len - c->out_off < OUT_HIGH;
}

/* Tells the driver the connection has something to do. */
static inline void ratel__http_wake(ratel__http_conn_t *c)
{
    if (!c->dead)
        ratel__http_wake_user(c->ctx, c->user);
}

#endif /* RATEL_HTTP_CONN_PRIVATE_H */
