/*
 * http.h - the HTTP/1.1 server shared by rateld and the captcha service.
 *
 * Small and fast on purpose: a rate limiter answers tiny requests, many of
 * them, often from a proxy keeping connections alive. Each worker thread
 * runs its own libevent loop on its own SO_REUSEPORT listening socket (the
 * kernel spreads connections); requests are parsed by http-parser (Node's
 * incremental parser, Debian's libhttp-parser-dev) into one buffer per
 * connection, so a request's strings point into that buffer and nothing is
 * copied or allocated per header.
 *
 * Deferred answers and batching. A handler may answer at once
 * (ratel_http_respond) or keep the exchange and answer later on the same
 * thread. After every pass of the loop over ready connections, the
 * server calls the `flush` hook on that thread: rateld decides all the
 * requests of the pass in one ratel_store_acquire_batch (one Redis round
 * trip for fifty clients) and answers them there. Responses on one
 * connection always leave in request order (HTTP pipelining).
 *
 * Limits (ratel_http_limits_t) bound what a client can make the server
 * hold: header bytes, body bytes, connections (in all and, optionally,
 * per client address), requests in flight per connection, the time to
 * send a whole request (slowloris) and idle time. A request past a limit
 * gets its status (408, 413, 414, 431, 503) and the connection is
 * closed; nothing is ever answered twice or lost. A connection refused
 * at accept reaches no handler: the `refused` hook hears of it, to count
 * it and log it within a budget.
 *
 * Strict parsing. What a front proxy could read differently is refused
 * with 400 and the connection closed (nothing after it is parsed): an
 * HTTP/1.1 request without exactly one Host (two in any version), a
 * header name that is not a token, a control byte (but HTAB) in a header
 * value or any in the target, a line ending in a bare LF in the head or
 * the chunk framing, a chunk's data not followed by CR LF (strict.c).
 * Every error the server answers by itself has the body
 * {"error":"..."} (application/json) saying what was wrong.
 *
 * Clients that do not read their answers. A connection's answers that the
 * socket has not taken count against max_pipeline like requests in
 * flight, and while more than 16 KiB of them wait, the connection's
 * requests are neither read nor parsed (no read event is armed: a blocked
 * connection costs no CPU). So a client pipelining requests without
 * reading gets at most max_pipeline answers generated ahead of what it
 * reads. Answers to requests already in flight are still added; if that
 * makes the unsent output pass max_output_bytes the connection is closed
 * at once (an answer alone is never refused for its size). The kernel
 * is asked to keep at most 16 KiB unsent per socket (TCP_NOTSENT_LOWAT),
 * so its buffers do not make the server generate answers nobody reads.
 *
 * One server per address. ratel_http_server_new() refuses an address that
 * another socket already listens on ("listen 127.0.0.1:8080: already
 * served by another process"), although the workers' own sockets share
 * it with SO_REUSEPORT: two rateld on one port would each count half of
 * the requests and double every limit.
 */
#ifndef RATEL_HTTP_H
#define RATEL_HTTP_H

#include "http/grpc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct event_base;

#ifdef __cplusplus
extern "C" {
#endif

#define RATEL_HTTP_MAX_HEADERS 64

typedef struct ratel_http_server_s ratel_http_server_t;
typedef struct ratel_http_exchange_s ratel_http_exchange_t;

/* Bytes of a request, not NUL-terminated (they live in the connection's
   buffer until the exchange is answered). */
typedef struct ratel_http_str_s {
    const char *p;
    size_t n;
} ratel_http_str_t;

typedef struct ratel_http_header_s {
    ratel_http_str_t name; /* as sent; compare case-insensitively */
    ratel_http_str_t value;
} ratel_http_header_t;

/* The Content-Type header of a JSON answer, as an initializer. */
#define RATEL_HTTP_JSON_HEADER                                                 \
    {                                                                          \
        {"Content-Type", 12},                                                  \
        {                                                                      \
            "application/json", 16                                             \
        }                                                                      \
    }

typedef struct ratel_http_request_s {
    ratel_http_str_t method; /* "GET", "POST", ... */
    ratel_http_str_t target; /* as sent: path and query */
    ratel_http_str_t path;   /* before '?', not decoded */
    ratel_http_str_t query;  /* after '?', not decoded; n 0 when none */
    ratel_http_header_t headers[RATEL_HTTP_MAX_HEADERS];
    size_t nheaders;
    ratel_http_str_t body; /* whole body (chunked bodies joined) */
    int http_minor;        /* 0 or 1 (HTTP/1.x) */
    int keep_alive;        /* the connection stays open after the answer */
    struct sockaddr_storage peer; /* the TCP peer */
    socklen_t peer_len;
    unsigned thread; /* worker index, 0..threads-1 */
} ratel_http_request_t;

/*
 * Called on the worker thread for every complete request. Answer with
 * ratel_http_respond() now or later on the same thread (before the next
 * flush hook returns is best: the connection waits); `req` and its strings
 * stay valid until then.
 */
typedef void (*ratel_http_handler_fn)(void *ud, ratel_http_exchange_t *ex,
                                      const ratel_http_request_t *req);

/* Called on worker `thread` after each pass over ready connections. */
typedef void (*ratel_http_flush_fn)(void *ud, unsigned thread);

typedef struct ratel_http_limits_s {
    size_t max_header_bytes;  /* request line + headers; 0: 8 KiB (431) */
    size_t max_body_bytes;    /* 0: 64 KiB (413) */
    unsigned max_connections; /* per server; 0: 10,000 (then 503 + close) */
    unsigned max_connections_per_client; /* per TCP peer address (IPv4
                                    or IPv6); 0: no cap (then 503 + close
                                    for that client only) */
    unsigned max_pipeline;       /* requests in flight per connection; 0: 64 */
    unsigned request_timeout_ms; /* a started request must be complete
                                    within; 0: 10,000 (408) */
    unsigned idle_timeout_ms;    /* keep-alive idle; 0: 60,000 (close) */
    size_t max_output_bytes;     /* answers the socket has not taken, per
                                    connection; 0: 1 MiB, at least 64 KiB
                                    (past it: close, see above) */
} ratel_http_limits_t;

/* Why the server refused a connection as it accepted it: a 503 and
   close, the handler never sees it. */
typedef enum ratel_http_refusal_e {
    RATEL_HTTP_REFUSED_MAX_CONNECTIONS, /* limits.max_connections */
    RATEL_HTTP_REFUSED_PER_CLIENT,      /* max_connections_per_client */
    RATEL_HTTP_REFUSALS
} ratel_http_refusal_t;

/* Longest client address text a refused hook gets, NUL included. */
#define RATEL_HTTP_ADDR_MAX 64

/*
 * Called on worker `thread` for each connection refused at accept, after
 * its 503 was sent: `client` is its address ("1.2.3.4", "::1"; an
 * IPv4-mapped IPv6 address as IPv4). A client can cause this at will:
 * count it, and log it only within a budget.
 */
typedef void (*ratel_http_refused_fn)(void *ud, unsigned thread,
                                      ratel_http_refusal_t why,
                                      const char *client);

/* The limit's configuration name ("max_connections",
   "max_connections_per_client"), for metric labels and log fields. */
const char *ratel_http_refusal_name(ratel_http_refusal_t why);

typedef struct ratel_http_options_s {
    const char *listen; /* "127.0.0.1:8080", "[::1]:8080", ":8080" */
    unsigned threads;   /* worker threads; 0: 1 */
    ratel_http_limits_t limits;
    ratel_http_handler_fn handler;
    ratel_http_flush_fn flush;     /* may be NULL; runs after gRPC calls too */
    ratel_http_refused_fn refused; /* may be NULL */
    void *ud;
    /* gRPC over h2c on a second address, served by the same workers
       (grpc.h); NULL: none. The handler gets `ud` as well. */
    const char *grpc_listen;
    ratel_grpc_handler_fn grpc_handler;
    ratel_grpc_limits_t grpc_limits;
    /* Streaming methods (grpc.h), n of them; the others are unary calls
       for grpc_handler. */
    const ratel_grpc_stream_method_t *grpc_streams;
    size_t ngrpc_streams;
} ratel_http_options_t;

/*
 * Binds the listening sockets (one per thread) and prepares the workers;
 * nothing runs yet. Returns 0, or -1 with a message in err ("listen
 * 127.0.0.1:80: Permission denied", "listen \"x\": expected HOST:PORT",
 * "listen 127.0.0.1:8080: already served by another process" when another
 * socket listens there: see "One server per address" above).
 */
int ratel_http_server_new(ratel_http_server_t **out,
                          const ratel_http_options_t *options, char *err,
                          size_t errlen);

/*
 * What ratel_http_server_new() checks of its addresses before it binds
 * anything, with the same messages: `listen` and `grpc_listen` (NULL:
 * none) parsed and their hosts resolved, and not one address (the same
 * port on the same or a wildcard host). Returns 0, or -1 with the
 * message in err. Binds nothing: a program's --check-config runs it.
 */
int ratel_http_server_check(const char *listen, const char *grpc_listen,
                            char *err, size_t errlen);

/*
 * Worker `thread`'s event loop (0..threads-1), from ratel_http_server_new()
 * to ratel_http_server_free(): what a handler keeps waiting on that
 * worker (an asynchronous store call) runs there, on the worker's thread
 * while the server runs.
 */
struct event_base *ratel_http_server_base(ratel_http_server_t *server,
                                          unsigned thread);

/* The port actually bound (useful with port 0). */
int ratel_http_server_port(const ratel_http_server_t *server);

/* The gRPC address's port, 0 when there is none. */
int ratel_http_server_grpc_port(const ratel_http_server_t *server);

/*
 * Runs the workers and returns when ratel_http_server_stop() has been
 * called and they have finished: every request already received answered
 * (or `drain_ms` passed), every connection closed. Call from one thread.
 */
int ratel_http_server_run(ratel_http_server_t *server);

/*
 * Asks the server to stop: no new connections; requests in progress are
 * answered for up to drain_ms; then run() returns. Safe from any thread
 * and from a signal handler (it writes to an eventfd).
 */
void ratel_http_server_stop(ratel_http_server_t *server, unsigned drain_ms);

/* Frees a server that is not running, with the exchanges its handler
   still held unanswered (they must not be used afterwards). NULL is a
   no-op. */
void ratel_http_server_free(ratel_http_server_t *server);

/*
 * Answers `ex` with `status`, the headers in `headers` (n of them; the
 * server adds Content-Length, Date-free, and Connection: close when it
 * closes) and `body` (len bytes, copied). Call exactly once per exchange,
 * on the exchange's worker thread. Afterwards `ex` and its request are
 * gone. A HEAD request gets the headers without the body; 1xx, 204 and
 * 304 carry neither body nor Content-Length; CR and LF inside header names
 * and values become spaces (a value copied from a request cannot split
 * the response). If the client has gone, the answer is dropped.
 */
void ratel_http_respond(ratel_http_exchange_t *ex, int status,
                        const ratel_http_header_t *headers, size_t n,
                        const char *body, size_t len);

/*
 * Whether the client of `ex` has gone: its connection closed or reset, or
 * it closed its sending side (read as an abort, as nginx reads it: a
 * gateway that gave up on an answer closes its connection; an HTTP/1.1
 * client that still waits never half-closes). An answer would reach no
 * one, so a handler that has not acted yet need not. One poll() of the
 * socket, without waiting; once gone, always gone. Call it on the
 * exchange's worker thread before answering.
 */
int ratel_http_exchange_abandoned(ratel_http_exchange_t *ex);

/* Helpers for handlers. */

/* The first header named `name` (case-insensitive), or NULL. */
const ratel_http_str_t *ratel_http_header(const ratel_http_request_t *req,
                                          const char *name);

/* How many headers are named `name` (case-insensitive); *first (unless
   NULL) gets the first one's value, or NULL. A count above 1 is for the
   caller to refuse where a client's second copy could steer it. */
size_t ratel_http_header_count(const ratel_http_request_t *req,
                               const char *name,
                               const ratel_http_str_t **first);

/*
 * The one reader of urlencoded text (server/http/form.c): parameter
 * `name` of `text` (a query, or an application/x-www-form-urlencoded
 * body), its value decoded once ('+' a space, %XX a byte) into buf (at
 * most len bytes, NUL-terminated). Returns the decoded length; -1 when
 * absent; -2 when malformed (a '%' without two hex digits, or "%00": a
 * NUL would cut the value short for C strings), longer than len - 1, or
 * present and buf NULL; -3 when given more than once ("k=1&k=2":
 * frameworks disagree on which one counts, so a limiter keyed on the
 * first could be dodged by an application reading the last), also in
 * another case of its name beside it ("k=1&K=2": ASP.NET reads names
 * without case) or as "k[...]" beside it (PHP and Rails read "k[]=2" as
 * k). Alone, another case or k[] names another parameter (absent). A
 * parameter without '=' has the empty value. With
 * RATEL_HTTP_FORM_SEMICOLON a ';' separates parameters as '&' does (Rack
 * and older Python read it so), for readers that must see what any
 * backend could.
 */
#define RATEL_HTTP_FORM_SEMICOLON 1
long ratel_http_form_field(ratel_http_str_t text, const char *name, int flags,
                           char *buf, size_t len);

/* ratel_http_form_field without flags: rateld's own API parameters. */
long ratel_http_query_param(ratel_http_str_t query, const char *name, char *buf,
                            size_t len);

/* A hex digit's value, -1 for another byte. */
int ratel_http_hex_value(char c);

/* The reason phrase of a status code ("Too Many Requests"). */
const char *ratel_http_reason(int status);

/* Longest host of a listen address (a DNS name's 253 bytes fit). */
#define RATEL_HTTP_LISTEN_HOST_MAX 255

/* A listen address split into its parts (ratel_http_listen_parse). */
typedef struct ratel_http_listen_s {
    char host[RATEL_HTTP_LISTEN_HOST_MAX + 1]; /* "": every address */
    int ipv6;                                  /* host was in brackets */
    unsigned port;                             /* 0..65535; 0: any free */
} ratel_http_listen_t;

/*
 * The one reading of a listen address, for the servers (listen.c) and
 * for the configurations that name one (rateld's listen and envoy.listen,
 * captchad's listen), so that an address a configuration accepts is one a
 * server can open:
 *
 *   HOST:PORT      HOST a name or an IPv4 address: letters, digits, '.'
 *                  and '-' (127.0.0.1:8080, localhost:8080)
 *   [IPV6]:PORT    an IPv6 address in brackets, checked ([::1]:8080)
 *   :PORT          every IPv4 address (0.0.0.0)
 *
 * PORT is 1 to 5 decimal digits, 0..65535. Returns 0 with *out filled, or
 * -1 with the reason in why, naming the part that is wrong and saying
 * what is accepted (the caller puts the address and its place in front).
 */
int ratel_http_listen_parse(const char *text, ratel_http_listen_t *out,
                            char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_HTTP_H */
