/*
 * batch.c - each worker's batch of decisions (rateld.h): the endpoints
 * (handlers.c for HTTP, rls.c for Envoy's gRPC) check a request and queue
 * its items; the flush at the end of the worker's pass sends them all to
 * the store in one ratel_async_acquire_batch() and goes on: the worker
 * never waits for the store. When the store has decided (at once for the
 * memory store; for Redis, when it answered or, hung or gone, at the
 * request's deadline by the failure policy), each request is answered by
 * its kind's answer. A request goes down one way: endpoint, batch, store,
 * answer; no endpoint file calls another.
 *
 * Charged only when someone waits: right before the batch goes to the
 * store, a request whose client has gone (a gateway that gave up on
 * rateld closed its connection; Envoy reset its stream) is answered as
 * not decided and left out, so that the store never charges a permit
 * for an answer nobody reads (a stopped or overloaded rateld would
 * otherwise spend the permits of requests the gateway already refused).
 * It is counted in ratel_abandoned_total. A request already sent to Redis
 * is Redis's to decide: it is charged even if its client leaves while
 * Redis answers.
 */
#include "rateld/answer.h"
#include "rateld/rateld.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* What answers each kind of pending request once the batch is decided;
   NULL for the later items of a request, answered with its first. */
static rateld_answer_fn *const answer_of[RATELD_KINDS] = {
    [RATELD_KIND_ACQUIRE] = rateld_answer_acquire,
    [RATELD_KIND_AUTH] = rateld_answer_auth,
    [RATELD_KIND_PART] = NULL,
    [RATELD_KIND_RLS] = rateld_rls_answer,
    [RATELD_KIND_REPORT] = rateld_answer_report,
};

/* What tells whether a request's client has gone (and answers it then),
   and the endpoint ratel_abandoned_total names; NULL for the later items
   of a request, which go with their first. */
static const struct {
    rateld_abandon_fn *abandon;
    rateld_endpoint_t endpoint;
} abandon_of[RATELD_KINDS] = {
    [RATELD_KIND_ACQUIRE] = {rateld_abandon_http, RATELD_ENDPOINT_ACQUIRE},
    [RATELD_KIND_AUTH] = {rateld_abandon_http, RATELD_ENDPOINT_AUTH},
    [RATELD_KIND_PART] = {NULL, RATELD_ENDPOINTS},
    [RATELD_KIND_RLS] = {rateld_rls_abandon, RATELD_ENDPOINT_RLS},
    [RATELD_KIND_REPORT] = {rateld_abandon_http, RATELD_ENDPOINT_REPORT},
};

rateld_gen_t *rateld_take_gen(rateld_t *d, rateld_worker_t *w)
{
    if (!w->gen) {
        atomic_store(&w->active, 1);
        w->gen = atomic_load(&d->current);
        atomic_store(&w->epoch, w->gen->epoch);
    }
    return w->gen;
}

/* The store decided a flight (or failed it: every item's rc says so):
   each request gets its answer, then the flight lets go of its
   configuration. While rateld stops, the exchanges may be gone: nothing
   is answered. */
static void flight_decided(void *ud, ratel_batch_item_t *items, size_t n)
{
    rateld_flight_t *f = ud;
    int64_t now = ratel_clock_now_us();

    (void)items;
    for (size_t i = 0; i < n && !atomic_load(&f->d->stopping); i++) {
        rateld_answer_fn *answer = answer_of[f->pending[i].kind];
        if (answer)
            answer(f->d, f, f->thread, f->gen, i, now);
    }
    if (f->on_heap) {
        f->w->flights--;
        atomic_fetch_sub(&f->gen->flights, 1);
        free(f);
    }
}

/* The pass's requests, copied into a flight of their own. */
static rateld_flight_t *take_off(rateld_t *d, rateld_worker_t *w,
                                 unsigned thread)
{
    size_t n = w->npending;
    rateld_flight_t *f =
        malloc(sizeof *f + n * sizeof *f->items + n * sizeof *f->pending);

    if (!f)
        return NULL;
    f->d = d;
    f->w = w;
    f->thread = thread;
    f->gen = w->gen;
    f->n = n;
    f->on_heap = 1;
    f->items = (ratel_batch_item_t *)(f + 1);
    f->pending = (rateld_pending_t *)(f->items + n);
    memcpy(f->pending, w->pending, n * sizeof *f->pending);
    for (size_t i = 0; i < n; i++) {
        const rateld_pending_t *p = &f->pending[i];
        /* A route's policies are one all-or-nothing group: the store
           charges none of them unless all admit. */
        f->items[i] = (ratel_batch_item_t){
            .key = p->key,
            .keylen = p->keylen,
            .policy = p->rules,
            .request = p->request,
            .group = p->count > 1 ? (uint32_t)p->first + 1 : 0};
        /* A leased policy's own rules (an override's too) may be spent
           from a slice this rateld holds. */
        if (p->policy && w->gen->lease)
            f->items[i].request.lease = w->gen->lease[p->policy_index];
    }
    atomic_fetch_add(&f->gen->flights, 1);
    w->flights++;
    return f;
}

/*
 * Leaves out of the worker's batch every request whose client has gone,
 * answered and counted (abandon_of): a request is its first item and the
 * RATELD_KIND_PART items after it, moved down whole over the requests
 * left out, with `first` (their group, and where their answer finds
 * them) moved down alike.
 */
static void drop_abandoned(rateld_t *d, rateld_worker_t *w, unsigned thread)
{
    size_t in = 0, out = 0, n = w->npending;

    while (in < n) {
        rateld_pending_t *head = &w->pending[in];
        size_t end = in + 1, k;

        while (end < n && w->pending[end].kind == RATELD_KIND_PART)
            end++;
        k = end - in;
        if (abandon_of[head->kind].abandon &&
            abandon_of[head->kind].abandon(d, w, thread, head)) {
            rateld_metrics_abandoned(d->metrics, thread,
                                     abandon_of[head->kind].endpoint);
            in = end;
            continue;
        }
        if (out != in) {
            memmove(&w->pending[out], head, k * sizeof *head);
            for (size_t i = out; i < out + k; i++)
                w->pending[i].first -= (int)(in - out);
        }
        out += k;
        in = end;
    }
    w->npending = out;
}

/*
 * Sends the worker's batch to the store and returns at once. A batch the
 * store cannot take (out of memory) is answered as a store error, item by
 * item.
 */
static void run_batch(rateld_t *d, rateld_worker_t *w, unsigned thread)
{
    rateld_flight_t *f,
        own = {d, w, thread, w->gen, w->npending, w->pending, w->items, 0};
    int rc = RATEL_ENOMEM;

    drop_abandoned(d, w, thread);
    if (w->npending == 0)
        return;
    own.n = w->npending;
    f = take_off(d, w, thread);
    if (f)
        rc = ratel_async_acquire_batch(w->async, f->items, f->n,
                                       ratel_clock_now_us(), flight_decided, f);
    w->npending = 0;
    if (rc == 0)
        return;
    if (!f)
        f = &own;
    for (size_t i = 0; i < f->n; i++)
        f->items[i].rc = rc;
    flight_decided(f, f->items, f->n);
}

rateld_pending_t *rateld_enqueue(rateld_t *d, rateld_worker_t *w,
                                 unsigned thread, size_t need)
{
    if (w->npending + need > RATELD_BATCH_MAX)
        run_batch(d, w, thread);
    return &w->pending[w->npending];
}

void rateld_queue(rateld_worker_t *w, rateld_pending_t *slot, size_t n,
                  size_t group, int kind, ratel_http_exchange_t *ex)
{
    size_t base = (size_t)(slot - w->pending);

    for (size_t i = 0; i < n; i++) {
        slot[i].ex = i == 0 ? ex : NULL;
        slot[i].kind = i == 0 ? kind : RATELD_KIND_PART;
        slot[i].first = (int)(i < group ? base : base + i);
        slot[i].count = i < group ? (int)group : 1;
    }
    w->npending = base + n;
}

/* The end of the worker's pass: the batch sent, the pass's configuration
   let go of (its flights hold it until answered; a reload frees it once
   neither a worker nor a flight does). */
void rateld_flush(void *ud, unsigned thread)
{
    rateld_t *d = ud;
    rateld_worker_t *w = &d->workers[thread];

    run_batch(d, w, thread);
    if (w->gen) {
        w->gen = NULL;
        atomic_store(&w->active, 0);
    }
}
