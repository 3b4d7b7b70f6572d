/*
 * ngx_http_ratel_hold.c - what an admitted request holds until it ends.
 *
 * Leases (limit_conn's model). A line under a policy with a concurrent
 * rule takes a lease when the request is admitted; the module releases it
 * when the main request's pool is destroyed (a cleanup registered with
 * the request's context), which happens exactly once whether the request
 * was answered, its client went away (499) or nginx failed it, and after
 * internal redirects and subrequests, which share the main request's
 * pool. A worker killed before that frees nothing: the lease expires by
 * itself at the rule's PERIOD.
 *
 * Reservations (limit_req's delay). A line with max_wait= may be admitted
 * with a wait: the request then waits on a timer of its connection's
 * write event, its phases stopped (the worker serves others meanwhile),
 * and resumes at its instant. Its client leaving meanwhile ends the
 * request (ngx_http_test_reading), and the cleanup gives back what it was
 * charged, so the next request may take the place.
 */
#include "ngx_http_ratel.h"

int64_t ngx_http_ratel_now_us(void)
{
    ngx_time_t *tp = ngx_timeofday();

    return (int64_t)tp->sec * 1000000 + (int64_t)tp->msec * 1000;
}

/* Whether releasing `it`'s lease gives back all it took: its policy is
   its concurrent rule alone (a policy holds at most one). */
static ngx_uint_t lease_only(const ratel_batch_item_t *it)
{
    return it->decision.lease != 0 && it->policy->nrules == 1;
}

static void release(ngx_http_ratel_zone_t *zone, ratel_batch_item_t *it,
                    int64_t now_us)
{
    if (zone->store.len == 0)
        ngx_http_ratel_shm_release(zone, it, now_us);
    else
        ngx_http_ratel_redis_release(zone, it, now_us);
}

static void refund(ngx_http_ratel_zone_t *zone, ratel_batch_item_t *it,
                   int64_t now_us)
{
    if (zone->store.len == 0)
        ngx_http_ratel_shm_refund(zone, it, 1, now_us);
    else
        ngx_http_ratel_redis_refund(zone, it, 1, now_us);
}

void ngx_http_ratel_give_back(ngx_http_ratel_zone_t *zone,
                              ratel_batch_item_t *items, size_t n,
                              int64_t now_us, ngx_uint_t all)
{
    for (size_t i = 0; i < n; i++) {
        ratel_batch_item_t *it = &items[i];
        /* A charge_on= line only checked the limit: nothing to give. */
        if (it->rc != 0 || !it->decision.allowed ||
            (it->request.flags & RATEL_PEEK))
            continue;
        if (all && !lease_only(it))
            refund(zone, it, now_us);
        else if (it->decision.lease != 0)
            release(zone, it, now_us);
    }
}

/* The write event's handler while the request waits: its phases go on
   once the timer fired (nginx clears `delayed` then). */
static void delay_done(ngx_http_request_t *r)
{
    ngx_event_t *wev = r->connection->write;

    if (wev->delayed) {
        /* Woken before the timer (the socket became writable). */
        if (ngx_handle_write_event(wev, 0) != NGX_OK)
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

ngx_int_t ngx_http_ratel_delay(ngx_http_request_t *r, ngx_msec_t ms)
{
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    /* A client that closes its connection ends the request (499). */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = delay_done;
    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, ms);
    return NGX_AGAIN;
}
