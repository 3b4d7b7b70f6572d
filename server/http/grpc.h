/*
 * grpc.h - unary gRPC calls over HTTP/2 without TLS (h2c), served by the
 * same workers, event loops and flush hook as HTTP/1.1 (http.h): rateld
 * answers Envoy's rate limit service and gRPC health checks with it.
 *
 * Why nghttp2. HTTP/2 is framing, HPACK, flow control, stream states and
 * a list of known attacks (rapid reset, SETTINGS and PING floods,
 * CONTINUATION floods); nghttp2 (Debian's libnghttp2) is the C library
 * made for exactly that, used by curl, Apache httpd and h2load, with
 * Debian's security fixes for each of those attacks. It is driven here
 * without sockets (nghttp2_session_mem_recv / mem_send), so the server
 * keeps one loop, one set of timeouts and one output discipline for both
 * protocols. gRPC itself, over HTTP/2, is small: a POST to
 * /SERVICE/METHOD with content-type application/grpc, one message framed
 * as a flag byte and a 4-byte length, and the answer's status in
 * trailers; h2.c does that part.
 *
 * Calls. When a stream ends with one complete message, the handler gets
 * the call on the worker thread; it answers with ratel_grpc_respond() at
 * once or later on the same thread (the flush hook decides a whole pass's
 * calls in one batch, as for HTTP/1.1). A call the handler holds stays
 * valid when the client resets the stream or goes away; answering it
 * then only frees it.
 *
 * Streams. A method listed in a ratel_grpc_stream_method_t table (the
 * server's grpc_streams) is served as a stream both ways: its call opens
 * when its headers arrive, each whole message the client sends is handed
 * over as it arrives, and the server sends messages whenever it likes
 * (ratel_grpc_send) until it ends the call (ratel_grpc_finish). When the
 * client ends its side, the call is finished with OK. Messages are
 * checked as unary ones are (size, compression flag); a bad one finishes
 * the call with its status.
 *
 * Limits (ratel_grpc_limits_t) bound what one client can make the server
 * hold: the size of a message, streams open at once, the header list, the
 * idle time; and what it can make the server do: streams reset per
 * second (rapid reset), SETTINGS and PING frames waiting for their
 * acknowledgement (a client that never reads). Past them a stream gets
 * its gRPC status (RESOURCE_EXHAUSTED for an oversized message) or the
 * connection gets GOAWAY and is closed. Malformed frames or messages get
 * GOAWAY(PROTOCOL_ERROR) or the status that says what was wrong (a
 * message that is not one length-prefixed frame: INTERNAL; compressed:
 * UNIMPLEMENTED; a content-type that is not gRPC: HTTP 415).
 */
#ifndef RATEL_GRPC_H
#define RATEL_GRPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* gRPC status codes (grpc/status.h's numbers). */
#define RATEL_GRPC_OK 0
#define RATEL_GRPC_CANCELLED 1
#define RATEL_GRPC_UNKNOWN 2
#define RATEL_GRPC_INVALID_ARGUMENT 3
#define RATEL_GRPC_NOT_FOUND 5
#define RATEL_GRPC_RESOURCE_EXHAUSTED 8
#define RATEL_GRPC_FAILED_PRECONDITION 9
#define RATEL_GRPC_UNIMPLEMENTED 12
#define RATEL_GRPC_INTERNAL 13
#define RATEL_GRPC_UNAVAILABLE 14

typedef struct ratel_grpc_call_s ratel_grpc_call_t;

typedef struct ratel_grpc_request_s {
    const char *path; /* "/package.Service/Method", NUL-terminated */
    size_t path_len;
    const uint8_t *message; /* the request message's bytes (not framed) */
    size_t message_len;
    struct sockaddr_storage peer; /* the TCP peer */
    socklen_t peer_len;
    unsigned thread; /* worker index */
} ratel_grpc_request_t;

/*
 * Called on the worker thread for every complete call. `req` and its
 * bytes stay valid until the call is answered.
 */
typedef void (*ratel_grpc_handler_fn)(void *ud, ratel_grpc_call_t *call,
                                      const ratel_grpc_request_t *req);

/*
 * A streaming method: its path and what happens to its calls, each
 * called on the call's worker thread with the server's `ud`. `state` is
 * what open returned for the call.
 */
typedef struct ratel_grpc_stream_method_s {
    const char *path; /* "/package.Service/Method" */
    /* The call's headers arrived: its state, or NULL to refuse it (after
       ratel_grpc_finish with the reason; UNAVAILABLE if not). */
    void *(*open)(void *ud, ratel_grpc_call_t *call,
                  const ratel_grpc_request_t *req);
    /* One whole message (req's message fields are not used). */
    void (*message)(void *ud, void *state, const uint8_t *msg, size_t len);
    /* The server is stopping: say what must be said, then finish. */
    void (*drain)(void *ud, void *state);
    /* The call is over (finished and closed, reset by the client, or its
       connection gone): neither it nor `state` is used again. Exactly
       once per call open returned a state for. */
    void (*closed)(void *ud, void *state);
} ratel_grpc_stream_method_t;

typedef struct ratel_grpc_limits_s {
    size_t max_message_bytes;       /* a request message; 0: 64 KiB (then
                                       RESOURCE_EXHAUSTED) */
    unsigned max_streams;           /* open at once per connection
                                       (SETTINGS_MAX_CONCURRENT_STREAMS);
                                       0: 100 */
    size_t max_header_list_bytes;   /* SETTINGS_MAX_HEADER_LIST_SIZE;
                                       0: 8 KiB */
    unsigned idle_timeout_ms;       /* no stream open and nothing read;
                                       0: 300,000 (then GOAWAY and close) */
    unsigned max_resets_per_second; /* streams the client may reset per
                                       second, burst the same; 0: 100
                                       (then GOAWAY) */
} ratel_grpc_limits_t;

/*
 * Whether the client of `call` has gone: it reset the call's stream (a
 * client's deadline passed: Envoy resets it), or its connection closed
 * or was closed on its side. An answer would reach no one. Call it on the
 * call's worker thread before answering.
 */
int ratel_grpc_call_abandoned(ratel_grpc_call_t *call);

/*
 * Answers `call`: status RATEL_GRPC_OK with `message` (len bytes, copied;
 * may be empty), or another status with `text` (grpc-message; may be
 * NULL) and no message. Call exactly once per call, on its worker thread;
 * afterwards `call` and its request are gone. If the client has gone, the
 * answer is dropped.
 */
void ratel_grpc_respond(ratel_grpc_call_t *call, int status,
                        const uint8_t *message, size_t len, const char *text);

/*
 * Queues one message on the streaming call `call` (len bytes, copied),
 * sent after the ones before it. Returns 0, or -1 when the call is
 * finished or more than 1 MiB waits unsent (a client that does not read:
 * the call is then reset). Call on its worker thread, not from `closed`.
 */
int ratel_grpc_send(ratel_grpc_call_t *call, const uint8_t *message,
                    size_t len);

/*
 * Ends the streaming call `call` from the server's side once what was
 * queued has left: trailers with `status` and `text` (may be NULL). The
 * call stays valid until `closed`; later sends are refused. Call on its
 * worker thread, not from `closed`; a second finish does nothing.
 */
void ratel_grpc_finish(ratel_grpc_call_t *call, int status, const char *text);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_GRPC_H */
