/*
 * fuzz_rateld.c - rateld's endpoints (rateld/handlers.c) on arbitrary
 * bytes, through the real HTTP connection state machine (server/http/conn.h)
 * and a real memory store, with the configuration of examples/rateld.yaml
 * (plus an admin token, an api token and a trusted proxy).
 *
 * Byte 0 picks the peer (trusted proxy or not) and seeds the sizes of the
 * pieces the rest of the input is fed in; after each piece the worker's
 * flush decides the batch, and the output is taken. A prefix
 * of the corpus entries makes whole requests (GET /v1/acquire..., POST
 * JSON bodies, /v1/auth with X-Original-URI and X-Forwarded-For, refund
 * and reset with their tokens, /metrics), so the handlers see valid HTTP most
 * of the time and arbitrary parameters, bodies and headers.
 *
 * Invariants (abort on violation): no crash or sanitizer report; every
 * output starts with "HTTP/1.1 " and every response has a status line with
 * a 3-digit code; a decision answer is 200, 403 or 429 and never 5xx
 * (the memory store cannot fail), except when the store runs out of its
 * bound (then 500 is allowed).
 */
#include "rateld/rateld.h"
#include "http/conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_rateld: %s:%d: invariant broken: %s\n",      \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

static const char config_text[] =
    "listen: 127.0.0.1:0\n"
    "admin_token: "
    "6f0c2a9e51b84d7f93e0a6c1b5d82f4739ac0e1d57b6f2a8c4e9013d7b5a2f6e\n"
    "api_token: "
    "c3e8a1f05b9d47260e8f3a1c9d5b7e24a06f18c3d9e5b2a7f4c0861e3d9b5a27\n"
    "trusted_proxies: [127.0.0.1]\n"
    "store: {type: memory, max_bytes: 1MiB}\n"
    "policies:\n"
    "  ping: {rules: [20/1m], key: ip}\n"
    "  sms: {rules: [1/60s, 10/1d], key: query:telephone}\n"
    "  form: {rules: [10/60s, 20/120s], key: header:X-User-Id}\n"
    "  form-dup: {rules: [1/5s], key: [header:X-User-Id, path]}\n"
    "  g: {rules: ['5/1s:gcra,burst=3'], key: global, shadow: true}\n"
    "  s: {rules: [2/1m], key: header:X-T, on_missing: shared}\n"
    "routes:\n"
    "  - {path: /api/ping, policies: [ping]}\n"
    "  - {path: /sendCaptcha, method: GET, policies: [sms]}\n"
    "  - {path: /form, method: POST, policies: [form, form-dup, s]}\n";

static rateld_t d;
static int ready;

static void setup(void)
{
    rateld_config_t *c;
    char err[512];

    memset(&d, 0, sizeof d);
    pthread_mutex_init(&d.reload_lock, NULL);
    if (rateld_config_parse(config_text, sizeof config_text - 1, "fuzz.yaml",
                            &c, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_rateld: %s\n", err);
        abort();
    }
    d.threads = 1;
    d.metrics = rateld_metrics_new(1);
    d.workers = calloc(1, sizeof *d.workers);
    ASSERT(d.metrics && d.workers);
    d.workers[0].pending = calloc(RATELD_BATCH_MAX, sizeof(rateld_pending_t));
    d.workers[0].items = calloc(RATELD_BATCH_MAX, sizeof(ratel_batch_item_t));
    ASSERT(d.workers[0].pending && d.workers[0].items);
    ASSERT(ratel_store_memory_new(
               &d.store, &(ratel_memory_options_t){.max_bytes = 1 << 20}) == 0);
    d.store_name = "memory";
    d.config_path = "fuzz.yaml";
    atomic_store(&d.current, rateld_gen_new(&d, c));
    ASSERT(atomic_load(&d.current) != NULL);
    ready = 1;
}

/* Checks the status lines in out[0..n) (whole responses or a prefix). */
static void check_output(const char *out, size_t n)
{
    if (n == 0)
        return;
    ASSERT(n >= 9 ? memcmp(out, "HTTP/1.1 ", 9) == 0
                  : memcmp(out, "HTTP/1.1 ", n) == 0);
    for (size_t i = 0; i + 12 <= n; i++) {
        if (memcmp(out + i, "HTTP/1.1 ", 9) == 0 &&
            (i == 0 || out[i - 1] == '\n')) {
            const char *s = out + i + 9;
            ASSERT(s[0] >= '1' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9' &&
                   s[2] >= '0' && s[2] <= '9');
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ratel__http_ctx_t ctx;
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000)};
    ratel__http_conn_t *c;
    ratel_http_limits_t lim = {
        .max_header_bytes = 2048, .max_body_bytes = 2048, .max_pipeline = 8};
    char *out = NULL;
    size_t out_len = 0, pos = 0;
    int64_t now = 1000;

    if (!ready)
        setup();
    peer.sin_addr.s_addr =
        htonl(size > 0 && (data[0] & 1) ? 0x7f000001u : 0xcb007107u);
    ratel__http_ctx_init(&ctx, &lim, rateld_handle, &d, 0);
    c = ratel__http_conn_new(&ctx, (const struct sockaddr *)&peer, sizeof peer,
                             now);
    ASSERT(c != NULL);
    /* Byte 0 picks the peer and seeds the piece sizes; the rest is the
       byte stream the client sends. */
    uint32_t seed = size ? data[0] * 2654435761u + 1 : 1;
    pos = size ? 1 : 0;
    while (pos < size) {
        size_t piece, took, n;
        const char *p;
        seed = seed * 1103515245u + 12345u;
        piece = (seed >> 16) % 4 == 0 ? 1 + (seed >> 8) % 16 : 512;
        if (piece > size - pos)
            piece = size - pos;
        took = ratel__http_conn_feed(c, (const char *)data + pos, piece, now);
        pos += took ? took : piece;
        rateld_flush(&d, 0);
        ratel__http_conn_process(c, now);
        p = ratel__http_conn_output(c, &n);
        if (n) {
            char *grown = realloc(out, out_len + n);
            ASSERT(grown != NULL);
            out = grown;
            memcpy(out + out_len, p, n);
            out_len += n;
            ratel__http_conn_written(c, n, now);
        }
        if (ratel__http_conn_finished(c))
            break;
        now += 1;
    }
    rateld_flush(&d, 0);
    check_output(out, out_len);
    if (getenv("FUZZ_RATELD_SHOW") && out_len) /* to see what was answered */
        fwrite(out, 1, out_len, stderr);
    ratel__http_conn_close(c);
    ratel__http_ctx_destroy(&ctx);
    free(out);
    return 0;
}
