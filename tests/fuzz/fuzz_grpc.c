/*
 * fuzz_grpc.c - the gRPC path on arbitrary bytes, without sockets: an h2c
 * connection (server/http/h2.c, driven through its protocol table as
 * worker.c drives it), and every call's message through rateld's one
 * RateLimitRequest decoder (rateld_rls_decode, rateld/rls.c).
 *
 * Input: byte 0 chooses the set-up, the rest is what a client sends
 * after the connection preface and an empty SETTINGS frame (added unless
 * bit 0 says the input brings its own).
 *
 *   byte 0  bit 0     raw: no preface added
 *           bit 1     calls are answered at the flush, not at once
 *           bit 2     the peer goes away midway (held calls answered
 *                     after it)
 *           bit 3     the server drains midway
 *           bit 4     tiny limits (message 64 B, 2 streams, headers 1 KiB)
 *           bit 5     the socket takes part of the output at a time
 *           bits 6-7  piece sizes: 1..16 / 1..256 / all at once / 9
 *
 * Streams: "/fuzz.Stream/Echo" is a streaming method whose every message
 * is echoed (ratel_grpc_send) and whose fourth ends it
 * (ratel_grpc_finish); a drain finishes it too.
 *
 * Invariants (a violation aborts): a call's path is NUL-terminated and its
 * message lies within what the client sent in size; every call the handler
 * got is answered exactly once; a decoded request has a domain and 1..64
 * descriptors of 1..32 entries with keys; the output is a sequence of
 * well-formed HTTP/2 frame headers; every stream opened is closed exactly
 * once, its messages within the size limit; memory is freed (AddressSanitizer
 * and valgrind watch).
 */
#include "rateld/rateld.h"
#include "http/conn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_grpc: %s:%d: invariant broken: %s\n",        \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HELD_MAX 1024

static struct {
    unsigned mode;
    ratel_grpc_call_t *held[HELD_MAX];
    const ratel_grpc_request_t *held_req[HELD_MAX];
    size_t nheld;
    unsigned dispatched, answered;
    size_t input;
    rateld_rls_pool_t pool;
    /* Output frames: bytes still to skip of the current frame's payload,
       and a partial frame header. */
    size_t skip;
    uint8_t hdr[9];
    size_t nhdr;
    unsigned opened, closed;
    size_t max_message;
} fz;

/* The streaming method: a count of messages per stream as its state. */
static void *stream_open(void *ud, ratel_grpc_call_t *call,
                         const ratel_grpc_request_t *req)
{
    unsigned *n = malloc(sizeof *n + sizeof call);

    (void)ud;
    ASSERT(req->path && req->path[req->path_len] == '\0');
    if (!n)
        return NULL;
    *n = 0;
    memcpy(n + 1, &call, sizeof call);
    fz.opened++;
    return n;
}

static ratel_grpc_call_t *stream_call(unsigned *n)
{
    ratel_grpc_call_t *call;

    memcpy(&call, n + 1, sizeof call);
    return call;
}

static void stream_message(void *ud, void *state, const uint8_t *msg,
                           size_t len)
{
    unsigned *n = state;

    (void)ud;
    ASSERT(len <= fz.max_message);
    ratel_grpc_send(stream_call(n), msg, len < 32 ? len : 32);
    if (++*n == 4)
        ratel_grpc_finish(stream_call(n), RATEL_GRPC_OK, NULL);
}

static void stream_drain(void *ud, void *state)
{
    (void)ud;
    ratel_grpc_finish(stream_call(state), RATEL_GRPC_UNAVAILABLE, "draining");
}

static void stream_closed(void *ud, void *state)
{
    (void)ud;
    fz.closed++;
    free(state);
}

static const ratel_grpc_stream_method_t streams[] = {
    {"/fuzz.Stream/Echo", stream_open, stream_message, stream_drain,
     stream_closed},
};

static void answer(ratel_grpc_call_t *call, const ratel_grpc_request_t *req)
{
    int status = RATEL_GRPC_OK;
    const char *why = NULL;
    rateld_rls_t *r = NULL;

    if (strcmp(req->path, "/envoy.service.ratelimit.v3.RateLimitService/"
                          "ShouldRateLimit") == 0) {
        r = rateld_rls_decode(&fz.pool, req->message, req->message_len, &status,
                              &why);
        ASSERT(r || (status != RATEL_GRPC_OK && why));
    } else {
        status = RATEL_GRPC_UNIMPLEMENTED;
        why = "unknown method";
    }
    fz.answered++;
    ratel_grpc_respond(call, status, (const uint8_t *)"\x08\x01",
                       status == RATEL_GRPC_OK ? 2 : 0, why);
    rateld_rls_free(&fz.pool, r);
}

static void handler(void *ud, ratel_grpc_call_t *call,
                    const ratel_grpc_request_t *req)
{
    (void)ud;
    ASSERT(req->path && req->path[req->path_len] == '\0');
    ASSERT(req->message_len <= fz.input);
    fz.dispatched++;
    if ((fz.mode & 2) && fz.nheld < HELD_MAX) {
        fz.held_req[fz.nheld] = req;
        fz.held[fz.nheld++] = call;
        return;
    }
    answer(call, req);
}

/* The flush: answers the held calls, whose requests must still be valid
   (even after the peer went away: AddressSanitizer watches the reads). */
static void flush(void)
{
    for (size_t i = 0; i < fz.nheld; i++)
        answer(fz.held[i], fz.held_req[i]);
    fz.nheld = 0;
}

/* Walks the frame headers of the output: length, type, flags, stream. */
static void check_output(const uint8_t *p, size_t n)
{
    while (n) {
        if (fz.skip) {
            size_t k = n < fz.skip ? n : fz.skip;
            fz.skip -= k;
            p += k;
            n -= k;
            continue;
        }
        fz.hdr[fz.nhdr++] = *p++;
        n--;
        if (fz.nhdr == 9) {
            size_t len =
                (size_t)fz.hdr[0] << 16 | (size_t)fz.hdr[1] << 8 | fz.hdr[2];
            ASSERT(len <= 16384); /* our SETTINGS_MAX_FRAME_SIZE default */
            ASSERT(fz.hdr[3] <= 9);
            fz.skip = len;
            fz.nhdr = 0;
        }
    }
}

static void take_output(const ratel__http_proto_t *proto, void *c,
                        uint64_t *rng)
{
    size_t n;
    const char *out;

    proto->process(c, 0);
    out = proto->output(c, &n);
    if (n && (fz.mode & 32)) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        n = (size_t)(*rng >> 33) % (n + 1);
    }
    if (n) {
        check_output((const uint8_t *)out, n);
        proto->written(c, n, 0);
    }
}

static void feed(const ratel__http_proto_t *proto, void *c, const uint8_t *p,
                 size_t n)
{
    while (n) {
        size_t room;
        char *space = proto->read_space(c, &room);
        if (!space)
            return;
        if (room > n)
            room = n;
        memcpy(space, p, room);
        proto->received(c, room, 0);
        p += room;
        n -= room;
    }
}

static size_t piece(uint64_t *rng, size_t left)
{
    static const size_t max[] = {16, 256, 0, 9};
    size_t m = max[fz.mode >> 6];

    if (!m)
        return left;
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    m = 1 + (size_t)(*rng >> 33) % m;
    return m < left ? m : left;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                     "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    const ratel__http_proto_t *proto = &ratel__h2_proto;
    ratel_grpc_limits_t tiny = {64, 2, 1024, 0, 0};
    ratel__http_ctx_t *ctx;
    uint64_t rng = size;
    size_t off = 1, half = size / 2;
    void *c;
    int gone = 0;

    if (size < 1)
        return 0;
    memset(&fz, 0, sizeof fz);
    fz.mode = data[0];
    fz.input = size;
    ctx = malloc(sizeof *ctx);
    ASSERT(ctx);
    ratel__http_ctx_init(ctx, NULL, NULL, NULL, 0);
    ctx->grpc_handler = handler;
    ctx->grpc_streams = streams;
    ctx->ngrpc_streams = 1;
    ratel__grpc_limits_fill(&ctx->grpc_limits, fz.mode & 16 ? &tiny : NULL);
    fz.max_message = ctx->grpc_limits.max_message_bytes;
    c = proto->conn_new(ctx, NULL, 0, 0);
    ASSERT(c);
    if (!(fz.mode & 1))
        feed(proto, c, preface, sizeof preface - 1);
    while (off < size && !gone) {
        size_t n = piece(&rng, size - off);
        feed(proto, c, data + off, n);
        off += n;
        if ((fz.mode & 4) && off >= half) {
            proto->close(c);
            gone = 1;
            break;
        }
        if ((fz.mode & 8) && off >= half)
            proto->drain(c, 0);
        take_output(proto, c, &rng);
        flush();
        take_output(proto, c, &rng);
        if (proto->finished(c) || proto->aborted(c))
            break;
    }
    flush();
    if (!gone) {
        take_output(proto, c, &rng);
        proto->close(c);
    }
    ASSERT(fz.answered == fz.dispatched);
    ASSERT(fz.opened == fz.closed);
    ratel__h2_ctx_destroy(ctx);
    ratel__http_ctx_destroy(ctx);
    rateld_rls_pool_drain(&fz.pool);
    free(ctx);
    return 0;
}
