/*
 * h2.c - one HTTP/2 (h2c) connection carrying unary gRPC calls, as a
 * state machine without sockets: the second protocol worker.c drives
 * (conn.h's ratel__http_proto_t). grpc.h says what it serves and why
 * nghttp2.
 *
 * Bytes read go to nghttp2_session_mem_recv(), which calls back here for
 * each stream's headers and data; a stream that ends with one whole
 * gRPC message becomes a call for the handler. Answers are submitted to
 * the session (headers, the framed message, trailers carrying
 * grpc-status) and leave through nghttp2_session_mem_send() into the
 * connection's output buffer, which the driver sends. nghttp2 enforces
 * HTTP/2 itself: frame and stream state errors, HPACK, flow control,
 * the limits on CONTINUATION frames, queued acknowledgements and stream
 * resets; this file enforces gRPC's framing and our own limits.
 *
 * Streams (a method of ctx->grpc_streams) open when their headers
 * arrive; the bytes of their DATA frames are cut into messages as they
 * come, and the answer is one response whose DATA are the messages the
 * handler queues (a data provider that defers while nothing is queued)
 * and whose trailers carry the status it finishes with.
 *
 * Lifetime. A connection is reference-counted like conn.c's: one
 * reference for its owner (the socket), one per call the handler holds.
 * When the socket goes, the session is deleted at once and the calls
 * still held are marked gone; answering them then only frees them. An
 * open stream is held until its stream closes: then its method hears
 * `closed` and the call is freed.
 */
#include "http/conn_private.h"
#include "http/grpc.h"

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H2_OUT_HIGH (64 << 10) /* stop reading while this much is unsent */
#define H2_OUT_PULL (64 << 10) /* take at most this much from nghttp2 */
#define H2_PATH_MAX 256
#define H2_TEXT_MAX 256
#define GRPC_FRAME_HEADER 5
#define CALL_INLINE 256 /* a call's request and answer fit in it usually */
#define POOL_CALLS 1024 /* free calls kept per thread */
/* SETTINGS and PING frames a client may send: a burst of CONTROL_BURST,
   then CONTROL_RATE a second (a real client sends a handful per
   connection). Past it: GOAWAY(ENHANCE_YOUR_CALM). */
#define CONTROL_BURST 100
#define CONTROL_RATE 10
/* A stream's messages not yet taken by nghttp2, at most (then reset). */
#define STREAM_OUT_MAX (1 << 20)

typedef struct ratel__h2_conn_s h2_conn_t;

struct ratel_grpc_call_s {
    ratel_grpc_call_t *prev, *next; /* the connection's calls */
    h2_conn_t *conn;
    int32_t stream_id;
    unsigned char dispatched, answered, gone, failed;
    unsigned char grpc_type, post;
    size_t header_bytes;
    /* A stream: its method and state once open; the response's headers
       submitted, trailers owed, data deferred, the client's side ended. */
    const ratel_grpc_stream_method_t *method;
    void *state;
    unsigned char headers_sent, finishing, deferred, client_done;
    size_t resp_cap; /* a stream's queue (resp) */
    uint8_t *body;   /* framed request bytes: body_inline, or malloc'd */
    size_t body_len, body_cap;
    uint8_t *resp; /* framed answer: resp_inline, or malloc'd */
    size_t resp_len, resp_off;
    uint8_t body_inline[CALL_INLINE], resp_inline[CALL_INLINE];
    int status;
    char status_text[8];
    char text[H2_TEXT_MAX * 3 + 1]; /* grpc-message, percent-encoded */
    ratel_grpc_request_t req;
    char path[H2_PATH_MAX];
};

struct ratel__h2_conn_s {
    ratel__http_ctx_t *ctx;
    nghttp2_session *session;
    void *user;
    unsigned refs;
    ratel_grpc_call_t *calls;
    unsigned nstreams;
    char *out;
    size_t out_off, out_len, out_cap;
    int64_t now_ms, active_ms, out_progress_ms;
    int64_t control_ms;      /* when control_tokens was last refilled */
    unsigned control_tokens; /* SETTINGS and PING frames still allowed */
    unsigned char dead, fatal, abort, draining;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

/* ------------------------------------------------------------- calls */

static void conn_unref(h2_conn_t *c);

static void call_link(h2_conn_t *c, ratel_grpc_call_t *call)
{
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
}

static void call_unlink(h2_conn_t *c, ratel_grpc_call_t *call)
{
    if (call->prev)
        call->prev->next = call->next;
    else if (c->calls == call)
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

static ratel_grpc_call_t *call_new(ratel__http_ctx_t *ctx)
{
    ratel_grpc_call_t *call = ctx->free_calls;

    if (call) {
        ctx->free_calls = call->next;
        ctx->nfree_calls--;
    } else if (!(call = malloc(sizeof *call))) {
        return NULL;
    }
    memset(call, 0, offsetof(ratel_grpc_call_t, body_inline));
    call->body = call->body_inline;
    call->body_cap = CALL_INLINE;
    return call;
}

static void call_free(ratel_grpc_call_t *call)
{
    ratel__http_ctx_t *ctx = call->conn->ctx;

    if (call->body != call->body_inline)
        free(call->body);
    if (call->resp != call->resp_inline)
        free(call->resp);
    if (ctx->nfree_calls < POOL_CALLS) {
        call->next = ctx->free_calls;
        ctx->free_calls = call;
        ctx->nfree_calls++;
        return;
    }
    free(call);
}

void ratel__h2_ctx_destroy(ratel__http_ctx_t *ctx)
{
    ratel_grpc_call_t *call, *next;

    for (call = ctx->free_calls; call; call = next) {
        next = call->next;
        free(call);
    }
    ctx->free_calls = NULL;
    ctx->nfree_calls = 0;
}

/* The stream is closed: the call goes unless the handler holds it (an
   open stream's method hears it is over, and lets go of it). */
static void call_stream_closed(h2_conn_t *c, ratel_grpc_call_t *call)
{
    call_unlink(c, call);
    call->stream_id = -1;
    if (call->state) {
        call->method->closed(c->ctx->ud, call->state);
        call_free(call);
        conn_unref(c);
        return;
    }
    if (call->dispatched && !call->answered) {
        call->gone = 1; /* freed when answered */
        return;
    }
    call_free(call);
}

int ratel_grpc_call_abandoned(ratel_grpc_call_t *call)
{
    h2_conn_t *c = call->conn;
    ratel__http_ctx_t *ctx = c->ctx;

    return call->gone || c->dead ||
           (ctx->peer_closed && c->user && ctx->peer_closed(ctx, c->user));
}

/* ----------------------------------------------------------- answers */

/* grpc-message: printable ASCII but '%' as is, the rest as %XX. */
static void percent_encode(const char *in, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (; *in && n + 4 < len && n < H2_TEXT_MAX * 3; in++) {
        unsigned char ch = (unsigned char)*in;
        if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    out[n] = '\0';
}

#define NV(name, value, vlen)                                                  \
    {                                                                          \
        (uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, (vlen),       \
            NGHTTP2_NV_FLAG_NO_COPY_NAME                                       \
    }

/* grpc-status and, when there is one, grpc-message: 1 or 2 fields. */
static size_t status_fields(ratel_grpc_call_t *call, nghttp2_nv *nv)
{
    snprintf(call->status_text, sizeof call->status_text, "%d", call->status);
    nv[0] = (nghttp2_nv)NV("grpc-status", call->status_text,
                           strlen(call->status_text));
    if (!call->text[0])
        return 1;
    nv[1] = (nghttp2_nv)NV("grpc-message", call->text, strlen(call->text));
    return 2;
}

static ssize_t read_stream(nghttp2_session *session, int32_t stream_id,
                           uint8_t *buf, size_t length, uint32_t *flags,
                           nghttp2_data_source *source, void *user_data);

/* Submits the answer of a call whose stream is open. */
static void submit_answer(h2_conn_t *c, ratel_grpc_call_t *call,
                          int http_status)
{
    static const char ct[] = "application/grpc";
    char hs[4];
    nghttp2_nv nv[4];
    size_t n = 0;
    int rc;

    snprintf(hs, sizeof hs, "%d", http_status);
    nv[n++] = (nghttp2_nv)NV(":status", hs, strlen(hs));
    nv[n++] = (nghttp2_nv)NV("content-type", ct, sizeof ct - 1);
    if (call->status == RATEL_GRPC_OK && http_status == 200) {
        /* The answer is a stream finished at once (read_stream). */
        nghttp2_data_provider dp = {.source.ptr = call,
                                    .read_callback = read_stream};
        call->finishing = 1;
        rc = nghttp2_submit_response(c->session, call->stream_id, nv, n, &dp);
    } else {
        /* Trailers-only: the status in the one HEADERS frame. */
        n += status_fields(call, nv + n);
        rc = nghttp2_submit_response(c->session, call->stream_id, nv, n, NULL);
    }
    /* A client still sending (an oversized message) may go on: what it
       sends is dropped (on_data_chunk) until its stream ends. */
    if (rc != 0)
        c->abort = 1;
}

static void set_status(ratel_grpc_call_t *call, int status, const char *text)
{
    call->status = status;
    percent_encode(text ? text : "", call->text, sizeof call->text);
}

/* Answers a call the handler never saw (a malformed or refused one). */
static void refuse_call(h2_conn_t *c, ratel_grpc_call_t *call, int http_status,
                        int status, const char *text)
{
    call->failed = 1;
    call->answered = 1;
    set_status(call, status, text);
    submit_answer(c, call, http_status);
}

void ratel_grpc_respond(ratel_grpc_call_t *call, int status,
                        const uint8_t *message, size_t len, const char *text)
{
    h2_conn_t *c = call->conn;

    if (call->answered)
        return;
    call->answered = 1;
    if (call->gone || c->dead) {
        call_free(call);
        conn_unref(c);
        return;
    }
    set_status(call, status, text);
    if (status == RATEL_GRPC_OK) {
        call->resp = len + GRPC_FRAME_HEADER <= CALL_INLINE
                         ? call->resp_inline
                         : malloc(len + GRPC_FRAME_HEADER);
        if (!call->resp) {
            set_status(call, RATEL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        } else {
            call->resp[0] = 0; /* not compressed */
            call->resp[1] = (uint8_t)(len >> 24);
            call->resp[2] = (uint8_t)(len >> 16);
            call->resp[3] = (uint8_t)(len >> 8);
            call->resp[4] = (uint8_t)len;
            if (len)
                memcpy(call->resp + GRPC_FRAME_HEADER, message, len);
            call->resp_len = len + GRPC_FRAME_HEADER;
        }
    }
    submit_answer(c, call, 200);
    ratel__http_wake_user(c->ctx, c->user);
    conn_unref(c);
}

/* ----------------------------------------------------------- streams */

/* Appends a request's bytes to call->body, growing it (doubling, at most
   to `limit` bytes when that holds them); -1 out of memory. */
static int body_append(ratel_grpc_call_t *call, const uint8_t *data, size_t len,
                       size_t limit)
{
    if (call->body_len + len > call->body_cap) {
        size_t cap = call->body_cap * 2;
        uint8_t *b;
        while (cap < call->body_len + len)
            cap *= 2;
        if (cap > limit && limit >= call->body_len + len)
            cap = limit;
        b = call->body == call->body_inline ? malloc(cap)
                                            : realloc(call->body, cap);
        if (!b)
            return -1;
        if (call->body == call->body_inline)
            memcpy(b, call->body_inline, call->body_len);
        call->body = b;
        call->body_cap = cap;
    }
    memcpy(call->body + call->body_len, data, len);
    call->body_len += len;
    return 0;
}

/* A stream's response data: the queued messages, then (once finishing)
   the trailers; nothing queued yet: deferred until a send resumes it. */
static ssize_t read_stream(nghttp2_session *session, int32_t stream_id,
                           uint8_t *buf, size_t length, uint32_t *flags,
                           nghttp2_data_source *source, void *user_data)
{
    ratel_grpc_call_t *call = source->ptr;
    size_t n = call->resp_len - call->resp_off;

    (void)user_data;
    if (n == 0 && !call->finishing) {
        call->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > length)
        n = length;
    if (n)
        memcpy(buf, call->resp + call->resp_off, n);
    call->resp_off += n;
    if (call->resp_off == call->resp_len) {
        call->resp_off = call->resp_len = 0;
        if (call->finishing) {
            nghttp2_nv trailers[2];
            size_t nt = status_fields(call, trailers);
            *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
            if (nghttp2_submit_trailer(session, stream_id, trailers, nt) != 0)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
    }
    return (ssize_t)n;
}

/* The response's headers (with its data to come) on the first message;
   a stream finished before any gets a trailers-only response. */
static void stream_kick(h2_conn_t *c, ratel_grpc_call_t *call)
{
    static const char ct[] = "application/grpc";
    nghttp2_nv nv[4] = {NV(":status", "200", 3),
                        NV("content-type", ct, sizeof ct - 1)};
    int rc = 0;

    if (!call->headers_sent && call->finishing && call->resp_len == 0) {
        rc = nghttp2_submit_response(c->session, call->stream_id, nv,
                                     2 + status_fields(call, nv + 2), NULL);
    } else if (!call->headers_sent) {
        nghttp2_data_provider dp = {.source.ptr = call,
                                    .read_callback = read_stream};
        rc = nghttp2_submit_response(c->session, call->stream_id, nv, 2, &dp);
    } else if (call->deferred) {
        rc = nghttp2_session_resume_data(c->session, call->stream_id);
    }
    call->headers_sent = 1;
    call->deferred = 0;
    if (rc != 0)
        c->abort = 1;
    ratel__http_wake_user(c->ctx, c->user);
}

int ratel_grpc_send(ratel_grpc_call_t *call, const uint8_t *message, size_t len)
{
    h2_conn_t *c = call->conn;
    size_t need = call->resp_len + GRPC_FRAME_HEADER + len;

    if (call->finishing || call->stream_id < 0 || c->dead)
        return -1;
    if (need > STREAM_OUT_MAX) {
        /* The client does not read: end it (closed follows). */
        call->finishing = 1;
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE,
                                  call->stream_id, NGHTTP2_CANCEL);
        ratel__http_wake_user(c->ctx, c->user);
        return -1;
    }
    if (need > call->resp_cap) {
        size_t cap = call->resp_cap ? call->resp_cap : 256;
        uint8_t *p;
        while (cap < need)
            cap *= 2;
        p = call->resp == call->resp_inline ? NULL : call->resp;
        p = realloc(p, cap);
        if (!p)
            return -1;
        if (call->resp == call->resp_inline)
            memcpy(p, call->resp_inline, call->resp_len);
        call->resp = p;
        call->resp_cap = cap;
    }
    call->resp[call->resp_len] = 0; /* not compressed */
    call->resp[call->resp_len + 1] = (uint8_t)(len >> 24);
    call->resp[call->resp_len + 2] = (uint8_t)(len >> 16);
    call->resp[call->resp_len + 3] = (uint8_t)(len >> 8);
    call->resp[call->resp_len + 4] = (uint8_t)len;
    if (len)
        memcpy(call->resp + call->resp_len + GRPC_FRAME_HEADER, message, len);
    call->resp_len = need;
    stream_kick(c, call);
    return 0;
}

void ratel_grpc_finish(ratel_grpc_call_t *call, int status, const char *text)
{
    h2_conn_t *c = call->conn;

    if (call->finishing || call->stream_id < 0 || c->dead)
        return;
    call->finishing = 1;
    set_status(call, status, text);
    stream_kick(c, call);
}

/* The stream's headers are in: open it with its method, or refuse it. */
static void stream_open(h2_conn_t *c, ratel_grpc_call_t *call,
                        const ratel_grpc_stream_method_t *m)
{
    if (!call->post || !call->grpc_type) {
        refuse_call(c, call, call->post ? 415 : 405,
                    call->post ? RATEL_GRPC_UNKNOWN : RATEL_GRPC_UNIMPLEMENTED,
                    call->post ? "content-type must be application/grpc"
                               : "gRPC calls are POST requests");
        return;
    }
    call->method = m;
    call->req.path = call->path;
    call->req.peer = c->peer;
    call->req.peer_len = c->peer_len;
    call->req.thread = c->ctx->thread;
    call->state = m->open(c->ctx->ud, call, &call->req);
    if (!call->state) {
        ratel_grpc_finish(call, RATEL_GRPC_UNAVAILABLE, "refused");
        call->answered = 1; /* freed when its stream closes */
        return;
    }
    call->dispatched = 1;
    c->refs++;
}

/* A stream's bytes: each whole message to its method as it completes. */
static void stream_data(h2_conn_t *c, ratel_grpc_call_t *call,
                        const uint8_t *data, size_t len)
{
    size_t max = c->ctx->grpc_limits.max_message_bytes, off = 0;

    if (call->finishing)
        return; /* dropped: the call is ending */
    if (body_append(call, data, len, SIZE_MAX) != 0) {
        ratel_grpc_finish(call, RATEL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    while (!call->finishing && call->body_len - off >= GRPC_FRAME_HEADER) {
        const uint8_t *b = call->body + off;
        size_t n =
            (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
        if (b[0] != 0) {
            ratel_grpc_finish(call,
                              b[0] == 1 ? RATEL_GRPC_UNIMPLEMENTED
                                        : RATEL_GRPC_INTERNAL,
                              b[0] == 1 ? "compressed messages are not "
                                          "supported"
                                        : "bad gRPC message flag");
        } else if (n > max) {
            char text[96];
            snprintf(text, sizeof text, "a message is larger than %zu bytes",
                     max);
            ratel_grpc_finish(call, RATEL_GRPC_RESOURCE_EXHAUSTED, text);
        } else if (call->body_len - off - GRPC_FRAME_HEADER >= n) {
            off += GRPC_FRAME_HEADER + n;
            call->method->message(c->ctx->ud, call->state,
                                  b + GRPC_FRAME_HEADER, n);
            continue;
        }
        break;
    }
    if (call->finishing)
        off = call->body_len;
    memmove(call->body, call->body + off, call->body_len - off);
    call->body_len -= off;
}

/* The client ended its side: the call ends with OK, or INTERNAL when a
   message was cut short. */
static void stream_client_done(ratel_grpc_call_t *call)
{
    call->client_done = 1;
    if (call->body_len)
        ratel_grpc_finish(call, RATEL_GRPC_INTERNAL,
                          "the stream ended inside a message");
    else
        ratel_grpc_finish(call, RATEL_GRPC_OK, NULL);
}

/* The method serving `path` as a stream, or NULL (a unary call). */
static const ratel_grpc_stream_method_t *
stream_method(const ratel__http_ctx_t *ctx, const char *path)
{
    for (size_t i = 0; i < ctx->ngrpc_streams; i++)
        if (strcmp(ctx->grpc_streams[i].path, path) == 0)
            return &ctx->grpc_streams[i];
    return NULL;
}

/* ------------------------------------------------- nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *session,
                            const nghttp2_frame *frame, void *user_data)
{
    h2_conn_t *c = user_data;
    ratel_grpc_call_t *call;

    if (frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    call = call_new(c->ctx);
    if (!call) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE,
                                  frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    call->conn = c;
    call->stream_id = frame->hd.stream_id;
    call_link(c, call);
    c->nstreams++;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    return 0;
}

static int value_is(const uint8_t *v, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(v, lit, n) == 0;
}

/* Keeps what a call needs of its headers: :path, whether it is a POST of
   gRPC content, uncompressed. */
static int on_header(nghttp2_session *session, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user_data)
{
    h2_conn_t *c = user_data;
    ratel_grpc_call_t *call =
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);

    (void)flags;
    if (!call || frame->hd.type != NGHTTP2_HEADERS || call->failed)
        return 0;
    call->header_bytes += namelen + valuelen + 32; /* RFC 9113 6.5.2 */
    if (call->header_bytes > c->ctx->grpc_limits.max_header_list_bytes)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM */
    if (value_is(name, namelen, ":path")) {
        if (valuelen >= sizeof call->path)
            valuelen = sizeof call->path - 1; /* no method is that long */
        memcpy(call->path, value, valuelen);
        call->path[valuelen] = '\0';
        call->req.path_len = valuelen;
    } else if (value_is(name, namelen, ":method")) {
        call->post = value_is(value, valuelen, "POST");
    } else if (value_is(name, namelen, "content-type")) {
        /* application/grpc, +proto or ;params; not application/grpc-web */
        call->grpc_type =
            valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
            (valuelen == 16 || value[16] == '+' || value[16] == ';');
    } else if (value_is(name, namelen, "grpc-encoding") &&
               !value_is(value, valuelen, "identity")) {
        refuse_call(c, call, 200, RATEL_GRPC_UNIMPLEMENTED,
                    "compressed messages are not supported "
                    "(grpc-accept-encoding: identity)");
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags,
                         int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data)
{
    h2_conn_t *c = user_data;
    ratel_grpc_call_t *call =
        nghttp2_session_get_stream_user_data(session, stream_id);
    size_t max = c->ctx->grpc_limits.max_message_bytes + GRPC_FRAME_HEADER;

    (void)flags;
    if (!call || call->failed)
        return 0;
    if (call->method) {
        stream_data(c, call, data, len);
        return 0;
    }
    if (len > max - call->body_len) {
        char text[96];
        snprintf(text, sizeof text,
                 "the request message is larger than %zu bytes",
                 c->ctx->grpc_limits.max_message_bytes);
        refuse_call(c, call, 200, RATEL_GRPC_RESOURCE_EXHAUSTED, text);
        return 0;
    }
    if (body_append(call, data, len, max) != 0)
        refuse_call(c, call, 200, RATEL_GRPC_RESOURCE_EXHAUSTED,
                    "out of memory");
    return 0;
}

/*
 * The client has sent the whole call: check it is one gRPC frame of a
 * gRPC POST and give it to the handler.
 */
static void complete_call(h2_conn_t *c, ratel_grpc_call_t *call)
{
    const uint8_t *b = call->body;
    size_t len;

    if (call->failed)
        return;
    if (!call->post) {
        refuse_call(c, call, 405, RATEL_GRPC_UNIMPLEMENTED,
                    "gRPC calls are POST requests");
        return;
    }
    if (!call->grpc_type) {
        refuse_call(c, call, 415, RATEL_GRPC_UNKNOWN,
                    "content-type must be application/grpc");
        return;
    }
    if (call->body_len < GRPC_FRAME_HEADER) {
        refuse_call(c, call, 200, RATEL_GRPC_INTERNAL,
                    "the request holds no gRPC message (5-byte prefix)");
        return;
    }
    len = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
    if (b[0] != 0) {
        refuse_call(c, call, 200,
                    b[0] == 1 ? RATEL_GRPC_UNIMPLEMENTED : RATEL_GRPC_INTERNAL,
                    b[0] == 1 ? "compressed messages are not supported"
                              : "bad gRPC message flag");
        return;
    }
    if (len != call->body_len - GRPC_FRAME_HEADER) {
        refuse_call(c, call, 200, RATEL_GRPC_INTERNAL,
                    "a unary call takes exactly one gRPC message");
        return;
    }
    call->dispatched = 1;
    c->refs++;
    call->req.path = call->path;
    call->req.message = b + GRPC_FRAME_HEADER;
    call->req.message_len = len;
    call->req.peer = c->peer;
    call->req.peer_len = c->peer_len;
    call->req.thread = c->ctx->thread;
    if (c->ctx->dispatched)
        c->ctx->dispatched(c->ctx);
    c->ctx->grpc_handler(c->ctx->ud, call, &call->req);
}

/* Whether one more SETTINGS or PING frame is over the client's budget. */
static int control_flood(h2_conn_t *c)
{
    int64_t earned = (c->now_ms - c->control_ms) * CONTROL_RATE / 1000;

    if (earned > 0) {
        c->control_tokens = earned >= CONTROL_BURST ||
                                    c->control_tokens + earned > CONTROL_BURST
                                ? CONTROL_BURST
                                : c->control_tokens + (unsigned)earned;
        c->control_ms = c->now_ms;
    }
    if (c->control_tokens == 0)
        return 1;
    c->control_tokens--;
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame,
                         void *user_data)
{
    h2_conn_t *c = user_data;
    ratel_grpc_call_t *call;

    if ((frame->hd.type == NGHTTP2_SETTINGS ||
         frame->hd.type == NGHTTP2_PING) &&
        !(frame->hd.flags & NGHTTP2_FLAG_ACK) && control_flood(c)) {
        c->fatal = 1;
        nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* read nothing more */
    }

    if (frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!call)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS &&
        frame->headers.cat == NGHTTP2_HCAT_REQUEST && !call->failed) {
        const ratel_grpc_stream_method_t *m = stream_method(c->ctx, call->path);
        if (m)
            stream_open(c, call, m);
    }
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (call->method) {
        if (call->state && !call->client_done)
            stream_client_done(call);
    } else if (!call->dispatched && !call->answered) {
        complete_call(c, call);
    }
    return 0;
}

/* A stream's trailers left while its client still sends: RST_STREAM
   NO_ERROR asks it to stop (RFC 9113 8.1), and closes the stream. */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame,
                         void *user_data)
{
    ratel_grpc_call_t *call;

    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call && call->method && !call->client_done)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE,
                                  frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id,
                           uint32_t error_code, void *user_data)
{
    h2_conn_t *c = user_data;
    ratel_grpc_call_t *call =
        nghttp2_session_get_stream_user_data(session, stream_id);

    (void)error_code;
    if (call) {
        c->nstreams--;
        call_stream_closed(c, call);
    }
    return 0;
}

/* ------------------------------------------------------- connection */

static nghttp2_session_callbacks *make_callbacks(void)
{
    nghttp2_session_callbacks *cb;

    if (nghttp2_session_callbacks_new(&cb) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
                                                              on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    return cb;
}

/* The session with our limits, and our SETTINGS queued. */
static int session_new(h2_conn_t *c)
{
    const ratel_grpc_limits_t *l = &c->ctx->grpc_limits;
    nghttp2_session_callbacks *cb = make_callbacks();
    nghttp2_option *opt = NULL;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, l->max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         (uint32_t)l->max_header_list_bytes},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    int rc = -1;

    if (cb && nghttp2_option_new(&opt) == 0) {
        /* Peers that send more SETTINGS entries or CONTINUATION frames
           than any real client, or make us queue acknowledgements they do
           not read, or reset streams faster than the limit: GOAWAY. */
        nghttp2_option_set_max_settings(opt, 32);
        nghttp2_option_set_max_outbound_ack(opt, 1000);
        nghttp2_option_set_max_continuations(opt, 8);
        nghttp2_option_set_stream_reset_rate_limit(
            opt, l->max_resets_per_second, l->max_resets_per_second);
        nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
        rc = nghttp2_session_server_new2(&c->session, cb, c, opt);
    }
    if (rc == 0 && nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE,
                                           settings, 3) != 0)
        rc = -1;
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    return rc;
}

static void *h2_new(ratel__http_ctx_t *ctx, const struct sockaddr *peer,
                    socklen_t peer_len, int64_t now_ms)
{
    h2_conn_t *c = calloc(1, sizeof *c);

    if (!c)
        return NULL;
    c->ctx = ctx;
    c->refs = 1;
    c->now_ms = c->active_ms = c->out_progress_ms = c->control_ms = now_ms;
    c->control_tokens = CONTROL_BURST;
    if (peer && peer_len && peer_len <= sizeof c->peer) {
        memcpy(&c->peer, peer, peer_len);
        c->peer_len = peer_len;
    }
    if (session_new(c) != 0) {
        if (c->session)
            nghttp2_session_del(c->session);
        free(c);
        return NULL;
    }
    return c;
}

static void conn_unref(h2_conn_t *c)
{
    if (--c->refs)
        return;
    free(c->out);
    free(c);
}

static void h2_set_user(void *conn, void *user)
{
    ((h2_conn_t *)conn)->user = user;
}

/* Every connection reads into the worker's one scratch buffer: nghttp2
   copies what it keeps, so the bytes are not needed after received(). */
static char *h2_read_space(void *conn, size_t *room)
{
    h2_conn_t *c = conn;

    if (c->dead || c->fatal || c->abort ||
        c->out_len - c->out_off > H2_OUT_HIGH ||
        !nghttp2_session_want_read(c->session))
        return NULL;
    *room = sizeof c->ctx->scratch;
    return c->ctx->scratch;
}

static void h2_received(void *conn, size_t n, int64_t now_ms)
{
    h2_conn_t *c = conn;
    ssize_t rc;

    c->now_ms = c->active_ms = now_ms;
    rc = nghttp2_session_mem_recv(c->session, (const uint8_t *)c->ctx->scratch,
                                  n);
    if (rc < 0) {
        /* Not HTTP/2 (bad preface), a flood, or a connection error: its
           GOAWAY, when nghttp2 queued one, still leaves. */
        c->fatal = 1;
        if (rc == NGHTTP2_ERR_NOMEM)
            c->abort = 1;
    }
}

/* Moves what nghttp2 has to send into the output buffer. */
static void h2_process(void *conn, int64_t now_ms)
{
    h2_conn_t *c = conn;

    c->now_ms = now_ms;
    if (c->dead || c->abort)
        return;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    while (c->out_len < H2_OUT_PULL) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n <= 0) {
            if (n < 0)
                c->abort = 1;
            break;
        }
        if (c->out_len + (size_t)n > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            char *p;
            while (cap < c->out_len + (size_t)n)
                cap *= 2;
            p = realloc(c->out, cap);
            if (!p) {
                c->abort = 1;
                return;
            }
            c->out = p;
            c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, data, (size_t)n);
        c->out_len += (size_t)n;
    }
}

static int h2_pending(void *conn)
{
    h2_conn_t *c = conn;

    return !c->dead && !c->abort && c->out_off == c->out_len &&
           nghttp2_session_want_write(c->session);
}

static const char *h2_output(void *conn, size_t *n)
{
    h2_conn_t *c = conn;

    *n = c->out_len - c->out_off;
    return c->out + c->out_off;
}

static void h2_written(void *conn, size_t n, int64_t now_ms)
{
    h2_conn_t *c = conn;

    c->out_off += n;
    c->out_progress_ms = now_ms;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
}

static int h2_wants_read(void *conn)
{
    size_t room;

    return h2_read_space(conn, &room) != NULL;
}

static int h2_finished(void *conn)
{
    h2_conn_t *c = conn;

    return c->out_off == c->out_len &&
           (c->fatal || (!nghttp2_session_want_read(c->session) &&
                         !nghttp2_session_want_write(c->session)));
}

static int h2_aborted(void *conn)
{
    return ((h2_conn_t *)conn)->abort;
}

/*
 * Idle (no stream open, nothing read for idle_timeout_ms): GOAWAY, then
 * the connection closes once it has left. Output that made no progress
 * for as long: close at once.
 */
static int h2_tick(void *conn, int64_t now_ms)
{
    h2_conn_t *c = conn;
    int64_t idle = c->ctx->grpc_limits.idle_timeout_ms;

    c->now_ms = now_ms;
    if (c->out_len > c->out_off && now_ms - c->out_progress_ms > idle)
        return 1;
    if (!c->draining && c->nstreams == 0 && now_ms - c->active_ms > idle) {
        c->draining = 1;
        nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
        ratel__http_wake_user(c->ctx, c->user);
    }
    return 0;
}

/* The server stops: GOAWAY naming the last stream we took; the streams
   before it are answered (an open stream's method says its last and
   finishes it), then the connection closes. */
static int h2_drain(void *conn, int64_t now_ms)
{
    h2_conn_t *c = conn;
    ratel_grpc_call_t *call, *next;

    c->now_ms = now_ms;
    if (!c->draining) {
        c->draining = 1;
        nghttp2_submit_goaway(
            c->session, NGHTTP2_FLAG_NONE,
            nghttp2_session_get_last_proc_stream_id(c->session),
            NGHTTP2_NO_ERROR, NULL, 0);
        for (call = c->calls; call; call = next) {
            next = call->next;
            if (call->state && !call->finishing)
                call->method->drain(c->ctx->ud, call->state);
        }
    }
    return 0;
}

/* The socket is gone: the session with it; calls the handler holds are
   marked gone and keep the connection's memory until answered. */
static void h2_close(void *conn)
{
    h2_conn_t *c = conn;
    ratel_grpc_call_t *call, *next;

    if (c->dead)
        return;
    c->dead = 1;
    c->user = NULL;
    nghttp2_session_del(c->session); /* calls no callback */
    c->session = NULL;
    for (call = c->calls; call; call = next) {
        next = call->next;
        call_stream_closed(c, call);
    }
    free(c->out);
    c->out = NULL;
    c->out_off = c->out_len = c->out_cap = 0;
    conn_unref(c);
}

static void h2_trim(void *conn)
{
    h2_conn_t *c = conn;

    if (c->out_len == 0 && c->out_cap > KEEP_OUT) {
        ratel__http_release(c->ctx, c->out, c->out_cap);
        c->out = NULL;
        c->out_cap = 0;
    }
}

const ratel__http_proto_t ratel__h2_proto = {
    .name = "h2c",
    .conn_new = h2_new,
    .set_user = h2_set_user,
    .read_space = h2_read_space,
    .received = h2_received,
    .process = h2_process,
    .pending = h2_pending,
    .output = h2_output,
    .written = h2_written,
    .wants_read = h2_wants_read,
    .finished = h2_finished,
    .aborted = h2_aborted,
    .tick = h2_tick,
    .drain = h2_drain,
    .close = h2_close,
    .trim = h2_trim,
};

void ratel__grpc_limits_fill(ratel_grpc_limits_t *out,
                             const ratel_grpc_limits_t *in)
{
    static const ratel_grpc_limits_t zero;

    *out = in ? *in : zero;
    if (!out->max_message_bytes)
        out->max_message_bytes = 64 << 10;
    if (out->max_message_bytes > (16u << 20))
        out->max_message_bytes = 16u << 20;
    if (!out->max_streams)
        out->max_streams = 100;
    if (!out->max_header_list_bytes)
        out->max_header_list_bytes = 8 << 10;
    if (!out->idle_timeout_ms)
        out->idle_timeout_ms = 300000;
    if (!out->max_resets_per_second)
        out->max_resets_per_second = 100;
}
