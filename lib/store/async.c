/*
 * async.c - the store's calls on an event loop (ratel_async_* in ratel.h),
 * on any transport (transport.h): libevent's for ratel_async_new()
 * (transport_event.c), nginx's for the nginx module
 * (ratel__async_new_on() in ratel_internal.h).
 *
 * A Redis store gets an engine of its own on the loop (engine.h): its
 * calls are the synchronous calls' asynchronous halves (redis_decide.c),
 * told by the engine when Redis answered or their deadline passed. Any
 * other store decides at once, in the call; its answer waits in the
 * `told` list until the end of the loop's turn (the transport's `defer`),
 * so that no callback ever runs inside the call that started it, whatever
 * the store.
 *
 * The transport calls the async's hooks, not the engine's: the async's
 * flush tells the `told` list first and then lets the engine flush, so
 * the calls those callbacks start leave in the same write.
 *
 * Each call is a job: what to tell whom, and the Redis half's state. The
 * job is given back after its callback returns, to a short list of spare
 * jobs the next calls take (a busy loop makes and ends calls at the same
 * pace: no allocation per call).
 */
#include "store/async.h"
#include "store/command.h"
#include "store/redis_private.h"

#include <stdlib.h>
#include <string.h>

typedef enum job_kind_e {
    JOB_ACQUIRE,
    JOB_BATCH,
    JOB_REFUND,
    JOB_RELEASE,
    JOB_RESET
} job_kind_t;

typedef struct job_s job_t;
struct job_s {
    ratel_async_t *a;
    job_t *next; /* the told list */
    job_kind_t kind;
    union {
        ratel_decision_fn decision;
        ratel_release_fn release;
        ratel_batch_fn batch;
        ratel_done_fn done;
    } fn;
    void *ud;
    ratel_batch_item_t one; /* ACQUIRE */
    ratel_batch_item_t *items;
    size_t n;
    ratel_decision_t decision; /* REFUND, RELEASE */
    int held, rc;
    union {
        redis_batch_t rb;     /* ACQUIRE, BATCH */
        redis_call_t rc_call; /* REFUND, RELEASE, RESET */
    };
};

/* Spare jobs kept for the next calls, at most. */
#define SPARE_MAX 64

struct ratel_async_s {
    ratel_store_t *store;
    redis_store_t *redis; /* NULL: a store that decides at once */
    ratel__engine_t *engine;
    ratel__loop_hooks_t engine_hooks; /* the engine's timer and flush */
    const ratel__transport_t *transport;
    void *tud;                /* the transport's instance */
    void (*close)(void *tud); /* frees it (ratel__async_loop_t) */
    job_t *told_head, *told_tail;
    job_t *spare; /* jobs given back (linked by `next`) */
    unsigned nspare;
};

/* A job for a call: a spare one, or a new one. Its fields before the
   union are zeroed; each kind sets its half of the union. */
static job_t *job_take(ratel_async_t *a)
{
    job_t *job = a->spare;

    if (!job)
        return calloc(1, sizeof *job);
    a->spare = job->next;
    a->nspare--;
    memset(job, 0, offsetof(job_t, rb));
    return job;
}

/* A call ended: its job is kept for the next one, or freed. */
static void job_give(job_t *job)
{
    ratel_async_t *a = job->a;

    if (a->nspare >= SPARE_MAX) {
        free(job);
        return;
    }
    job->next = a->spare;
    a->spare = job;
    a->nspare++;
}

/* Runs the job's callback, then frees it. */
static void tell(job_t *job)
{
    switch (job->kind) {
    case JOB_ACQUIRE:
        job->fn.decision(job->ud, job->one.rc,
                         job->one.rc == 0 ? &job->one.decision : NULL);
        break;
    case JOB_BATCH:
        job->fn.batch(job->ud, job->items, job->n);
        break;
    case JOB_REFUND:
        job->fn.decision(job->ud, job->rc,
                         job->rc == 0 ? &job->decision : NULL);
        break;
    case JOB_RELEASE:
        job->fn.release(job->ud, job->rc, job->held,
                        job->rc == 0 ? &job->decision : NULL);
        break;
    case JOB_RESET:
        job->fn.done(job->ud, job->rc);
        break;
    }
    job_give(job);
}

/* Tells the answers decided at once until now; those their callbacks
   decide at once wait for the next flush. */
static void tell_told(ratel_async_t *a)
{
    job_t *job = a->told_head;

    a->told_head = a->told_tail = NULL;
    while (job) {
        job_t *next = job->next;
        tell(job);
        job = next;
    }
}

/* The transport's hooks: the turn ends, the engine's timer is due. */
static void hook_flush(void *ud)
{
    ratel_async_t *a = ud;

    tell_told(a);
    if (a->engine)
        a->engine_hooks.flush(a->engine_hooks.ud);
}

static void hook_timer(void *ud)
{
    ratel_async_t *a = ud;

    if (a->engine)
        a->engine_hooks.timer(a->engine_hooks.ud);
}

/* An answer decided at once: told at the loop's next turn. */
static void tell_later(job_t *job)
{
    ratel_async_t *a = job->a;

    job->next = NULL;
    if (a->told_tail)
        a->told_tail->next = job;
    else
        a->told_head = job;
    a->told_tail = job;
    a->transport->defer(a->tud);
}

/* ------------------------------------------------------ Redis halves */

static void redis_batch_told(void *ud)
{
    job_t *job = ud;

    ratel__redis_batch_end(&job->rb);
    tell(job);
}

/* Starts a batch (JOB_ACQUIRE: the job's one item) on the loop's engine. */
static int start_batch(job_t *job, int64_t now_us)
{
    ratel_async_t *a = job->a;
    int rc;

    /* What the caller sets (ratel__redis_batch_start() sets the rest). */
    job->rb.s = a->redis;
    job->rb.e = a->engine;
    job->rb.items = job->items;
    job->rb.n = job->n;
    job->rb.now_us = now_us;
    job->rb.fn = redis_batch_told;
    job->rb.ud = job;
    rc = ratel__redis_batch_start(&job->rb);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        ratel__redis_batch_end(&job->rb);
        tell_later(job);
    }
    return 0;
}

static void redis_call_told(void *ud)
{
    job_t *job = ud;

    job->rc = job->rc_call.rc;
    tell(job);
}

static void start_call(job_t *job)
{
    job->rc_call.s = job->a->redis;
    job->rc_call.fn = redis_call_told;
    job->rc_call.ud = job;
    if (job->kind != JOB_RESET)
        job->rc_call.decision = &job->decision;
    if (job->kind == JOB_RELEASE)
        job->rc_call.held = &job->held;
    if (ratel__redis_call_start(job->a->engine, &job->rc_call) == 1) {
        job->rc = job->rc_call.rc;
        tell_later(job);
    }
}

/* -------------------------------------------------------------- calls */

static job_t *job_new(ratel_async_t *a, job_kind_t kind, void *ud)
{
    job_t *job = job_take(a);

    if (job) {
        job->a = a;
        job->kind = kind;
        job->ud = ud;
        /* A batch's half is set whole by start_batch(). */
        if (kind != JOB_ACQUIRE && kind != JOB_BATCH)
            memset(&job->rc_call, 0, sizeof job->rc_call);
    }
    return job;
}

int ratel_async_acquire_batch(ratel_async_t *a, ratel_batch_item_t *items,
                              size_t n, int64_t now_us, ratel_batch_fn fn,
                              void *ud)
{
    job_t *job;
    int grouped, rc;

    if (!a || !fn || (!items && n > 0))
        return RATEL_EINVAL;
    ratel__store_check_batch(items, n, &grouped);
    job = job_new(a, JOB_BATCH, ud);
    if (!job)
        return RATEL_ENOMEM;
    job->fn.batch = fn;
    job->items = items;
    job->n = n;
    if (a->redis) {
        rc = start_batch(job, now_us);
        if (rc != 0)
            job_give(job);
        return rc;
    }
    rc = ratel_store_acquire_batch(a->store, items, n, now_us);
    if (rc != 0) {
        job_give(job);
        return rc;
    }
    tell_later(job);
    return 0;
}

int ratel_async_acquire(ratel_async_t *a, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        const ratel_request_t *request, ratel_decision_fn fn,
                        void *ud)
{
    job_t *job;
    int rc;

    if (!a || !fn || !request ||
        ratel__store_check(a->store, key, policy, now_us) != 0)
        return RATEL_EINVAL;
    job = job_new(a, JOB_ACQUIRE, ud);
    if (!job)
        return RATEL_ENOMEM;
    job->fn.decision = fn;
    job->one = (ratel_batch_item_t){
        .key = key, .keylen = keylen, .policy = policy, .request = *request};
    job->items = &job->one;
    job->n = 1;
    if (a->redis) {
        rc = start_batch(job, now_us);
        if (rc != 0)
            job_give(job);
        return rc;
    }
    job->one.rc = ratel_store_acquire(a->store, key, keylen, policy, now_us,
                                      request, &job->one.decision);
    tell_later(job);
    return 0;
}

int ratel_async_peek(ratel_async_t *a, const char *key, size_t keylen,
                     const ratel_policy_t *policy, int64_t now_us,
                     const ratel_request_t *request, ratel_decision_fn fn,
                     void *ud)
{
    ratel_request_t peek;

    if (!request)
        return RATEL_EINVAL;
    peek = *request;
    peek.flags |= RATEL_PEEK;
    return ratel_async_acquire(a, key, keylen, policy, now_us, &peek, fn, ud);
}

int ratel_async_refund(ratel_async_t *a, const char *key, size_t keylen,
                       const ratel_policy_t *policy, int64_t now_us,
                       uint64_t cost, ratel_decision_fn fn, void *ud)
{
    job_t *job;

    if (!a || !fn || ratel__store_check(a->store, key, policy, now_us) != 0)
        return RATEL_EINVAL;
    job = job_new(a, JOB_REFUND, ud);
    if (!job)
        return RATEL_ENOMEM;
    job->fn.decision = fn;
    if (a->redis) {
        job->rc_call.rop = (ratel__rop_t){.kind = RATEL__ROP_REFUND,
                                          .key = key,
                                          .keylen = keylen,
                                          .policy = policy,
                                          .request.cost = cost,
                                          .now_us = now_us};
        start_call(job);
        return 0;
    }
    job->rc = ratel_store_refund(a->store, key, keylen, policy, now_us, cost,
                                 &job->decision);
    tell_later(job);
    return 0;
}

int ratel_async_release(ratel_async_t *a, const char *key, size_t keylen,
                        const ratel_policy_t *policy, int64_t now_us,
                        uint32_t lease, unsigned flags, ratel_release_fn fn,
                        void *ud)
{
    job_t *job;

    if (!a || !fn ||
        ratel__store_check_release(a->store, key, policy, now_us, lease,
                                   flags) != 0)
        return RATEL_EINVAL;
    job = job_new(a, JOB_RELEASE, ud);
    if (!job)
        return RATEL_ENOMEM;
    job->fn.release = fn;
    if (a->redis) {
        job->rc_call.rop = (ratel__rop_t){.kind = RATEL__ROP_RELEASE,
                                          .key = key,
                                          .keylen = keylen,
                                          .policy = policy,
                                          .lease = lease,
                                          .lease_flags = flags,
                                          .now_us = now_us};
        start_call(job);
        return 0;
    }
    job->rc = ratel_store_release(a->store, key, keylen, policy, now_us, lease,
                                  flags, &job->held, &job->decision);
    tell_later(job);
    return 0;
}

int ratel_async_reset(ratel_async_t *a, const char *key, size_t keylen,
                      ratel_done_fn fn, void *ud)
{
    job_t *job;

    if (!a || !fn || !key)
        return RATEL_EINVAL;
    job = job_new(a, JOB_RESET, ud);
    if (!job)
        return RATEL_ENOMEM;
    job->fn.done = fn;
    if (a->redis) {
        int64_t t =
            atomic_load_explicit(&a->redis->last_now_us, memory_order_relaxed);
        job->rc_call.rop =
            (ratel__rop_t){.kind = RATEL__ROP_RESET,
                           .key = key,
                           .keylen = keylen,
                           .now_us = t > 0 ? t : ratel_clock_now_us()};
        start_call(job);
        return 0;
    }
    job->rc = ratel_store_reset(a->store, key, keylen);
    tell_later(job);
    return 0;
}

/* A program's command on the loop: the job holds a copy of its words. */
typedef struct command_job_s {
    ratel__rop_t rop;
    ratel__reply_fn fn;
    void *ud;
    const char *argv[RATEL__COMMAND_MAX];
    size_t argvlen[RATEL__COMMAND_MAX];
    char bytes[]; /* the key, then each word */
} command_job_t;

static void command_told(ratel__rop_t *rop)
{
    command_job_t *job = rop->ud;

    job->fn(job->ud, rop->rc, rop->rc == 0 ? rop->reply : NULL);
    free(job);
}

int ratel__async_command(ratel_async_t *a, const char *key, size_t keylen,
                         int argc, const char *const *argv,
                         const size_t *argvlen, ratel__reply_fn fn, void *ud)
{
    size_t total = keylen;
    command_job_t *job;
    char *p;

    if (!a || !a->redis || !fn || argc < 1 || argc > RATEL__COMMAND_MAX ||
        !argv || !argvlen || (!key && keylen))
        return RATEL_EINVAL;
    for (int i = 0; i < argc; i++)
        total += argvlen[i];
    job = malloc(sizeof *job + total + 1);
    if (!job)
        return RATEL_ENOMEM;
    p = job->bytes;
    if (keylen)
        memcpy(p, key, keylen);
    p += keylen;
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], argvlen[i]);
        job->argv[i] = p;
        job->argvlen[i] = argvlen[i];
        p += argvlen[i];
    }
    job->fn = fn;
    job->ud = ud;
    job->rop = (ratel__rop_t){.kind = RATEL__ROP_COMMAND,
                              .key = job->bytes,
                              .keylen = keylen,
                              .argc = argc,
                              .argv = job->argv,
                              .argvlen = job->argvlen,
                              .now_us = ratel_clock_now_us(),
                              .done = command_told,
                              .ud = job};
    ratel__engine_submit(a->engine, &job->rop);
    return 0;
}

/* ------------------------------------------------------------- create */

int ratel__async_new_on(ratel_async_t **out, ratel_store_t *store,
                        const ratel__async_loop_t *loop, char *errbuf,
                        size_t errlen)
{
    ratel_async_t *a;
    ratel__loop_hooks_t hooks;

    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!out || !store || !loop || !loop->transport || !loop->open) {
        ratel__msg(errbuf, errlen, "a store and a loop are needed");
        return RATEL_EINVAL;
    }
    *out = NULL;
    a = calloc(1, sizeof *a);
    if (!a)
        goto nomem;
    a->store = store;
    if (store->ops == &ratel__redis_ops) {
        a->redis = (redis_store_t *)store;
        a->engine = ratel__engine_new(&a->redis->sh, &a->engine_hooks);
        if (!a->engine)
            goto nomem;
    }
    hooks = (ratel__loop_hooks_t){
        .timer = hook_timer, .flush = hook_flush, .ud = a};
    if (loop->open(loop->ctx, &hooks, &a->tud) != 0)
        goto nomem;
    a->transport = loop->transport;
    a->close = loop->close;
    if (a->engine)
        ratel__engine_set_transport(a->engine, a->transport, a->tud);
    *out = a;
    return 0;
nomem:
    ratel_async_free(a);
    ratel__msg(errbuf, errlen, "out of memory");
    return RATEL_ENOMEM;
}

void ratel_async_free(ratel_async_t *a)
{
    if (!a)
        return;
    /* Pending Redis calls are told (RATEL_EIO: the failure policy), then
       the answers waiting for the turn's end; the transport goes last,
       the engine having closed its connections through it. */
    ratel__engine_free(a->engine);
    while (a->told_head)
        tell_told(a);
    if (a->close && a->tud)
        a->close(a->tud);
    while (a->spare) {
        job_t *job = a->spare;
        a->spare = job->next;
        free(job);
    }
    free(a);
}
