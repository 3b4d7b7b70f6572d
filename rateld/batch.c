/*
 * batch.c - each worker's batch of decisions (rateld.h): the endpoints
 * (handlers.c for HTTP, rls.c for Envoy's gRPC) check a request and queue
 * its items; the flush at the end of the worker's pass decides them all
 * with one ratel_store_acquire_batch() and hands each request to the
 * answer of its kind. A request goes down one way: endpoint, batch,
 * store, answer; no endpoint file calls another.
 */
#include "rateld/answer.h"
#include "rateld/rateld.h"

#include <stdatomic.h>

/* What answers each kind of pending request once the batch is decided;
   NULL for the later items of a request, answered with its first. */
static rateld_answer_fn *const answer_of[RATELD_KINDS] = {
    [RATELD_KIND_ACQUIRE] = rateld_answer_acquire,
    [RATELD_KIND_AUTH] = rateld_answer_auth,
    [RATELD_KIND_PART] = NULL,
    [RATELD_KIND_RLS] = rateld_rls_answer,
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

/*
 * Decides the worker's batch (one store call; a store that fails answers
 * every item with RATEL_EINVAL, each answered as a store error) and
 * answers each request with its kind's answer.
 */
static void run_batch(rateld_t *d, rateld_worker_t *w, unsigned thread)
{
    const rateld_gen_t *gen = w->gen;
    size_t n = w->npending;
    int64_t now;

    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        rateld_pending_t *p = &w->pending[i];
        /* A route's policies are one all-or-nothing group: the store
           charges none of them unless all admit. */
        w->items[i] = (ratel_batch_item_t){
            .key = p->key,
            .keylen = p->keylen,
            .policy = p->rules,
            .request = p->request,
            .group = p->count > 1 ? (uint32_t)p->first + 1 : 0};
    }
    now = ratel_clock_now_us();
    if (ratel_store_acquire_batch(d->store, w->items, n, now) != 0)
        for (size_t i = 0; i < n; i++)
            w->items[i].rc = RATEL_EINVAL;
    now = ratel_clock_now_us();
    for (size_t i = 0; i < n; i++) {
        rateld_answer_fn *answer = answer_of[w->pending[i].kind];
        if (answer)
            answer(d, w, thread, gen, i, now);
    }
    w->npending = 0;
}

void rateld_enqueue(rateld_t *d, rateld_worker_t *w, unsigned thread,
                    size_t need)
{
    if (w->npending + need > RATELD_BATCH_MAX)
        run_batch(d, w, thread);
}

/* The end of the worker's pass: the batch decided, the configuration let
   go of (a reload may free it once every worker has). */
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
