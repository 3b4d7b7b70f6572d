/*
 * test_log_budget.c - rateld's budget for log lines about clients'
 * requests (rateld/log_budget.c): one line per kind per 10 s on a worker,
 * each saying how many events it did not write since the last, kinds
 * apart, and the counts still held back written when rateld stops. A
 * flood of 1,000 events within the interval writes one line. Time is
 * injected.
 */
#include "test.h"

#include "rateld/rateld.h"

#include <stdio.h>
#include <string.h>

#define T0 ((int64_t)1700000000 * 1000000) /* a fixed start instant, us */
#define SEC 1000000                        /* one second in us */

/* Events of `kind` at `now` .. now + n us; returns the lines allowed and
   the last line's not_logged in *quiet. */
static int flood(rateld_worker_t *w, rateld_log_kind_t kind, int64_t now, int n,
                 unsigned long long *quiet)
{
    int lines = 0;

    for (int i = 0; i < n; i++) {
        unsigned long long q;
        if (rateld_log_budget_take(w, kind, now + i, &q)) {
            lines++;
            *quiet = q;
        }
    }
    return lines;
}

TEST(log_budget_one_line_per_interval)
{
    rateld_worker_t w;
    unsigned long long quiet = 77;

    memset(&w, 0, sizeof w);
    /* 1,000 shadow denials within a second: the first is written. */
    CHECK_EQ(flood(&w, RATELD_LOG_SHADOW_DENY, T0, 1000, &quiet), 1);
    CHECK_EQ(quiet, 0);
    /* Just before 10 s: still held back. */
    CHECK_EQ(flood(&w, RATELD_LOG_SHADOW_DENY, T0 + 10 * SEC - 1, 1, &quiet),
             0);
    /* At 10 s: a line standing for the 1,000 not written. */
    CHECK_EQ(flood(&w, RATELD_LOG_SHADOW_DENY, T0 + 10 * SEC, 1, &quiet), 1);
    CHECK_EQ(quiet, 1000);
    /* A clock that goes back writes nothing more. */
    CHECK_EQ(flood(&w, RATELD_LOG_SHADOW_DENY, T0, 5, &quiet), 0);
}

TEST(log_budget_kinds_apart)
{
    rateld_worker_t w;
    unsigned long long quiet = 0;

    memset(&w, 0, sizeof w);
    CHECK_EQ(flood(&w, RATELD_LOG_SHADOW_DENY, T0, 50, &quiet), 1);
    /* Another kind, and each undecided reason, has its own budget. */
    CHECK_EQ(flood(&w, (rateld_log_kind_t)RATELD_UNDECIDED_UNMATCHED, T0, 50,
                   &quiet),
             1);
    CHECK_EQ(flood(&w, (rateld_log_kind_t)RATELD_UNDECIDED_MISSING_KEY, T0, 50,
                   &quiet),
             1);
    CHECK_EQ(flood(&w, RATELD_LOG_UNKNOWN_DOMAIN, T0, 50, &quiet), 1);
    CHECK_EQ(w.log_budget[RATELD_LOG_SHADOW_DENY].quiet, 49);
    CHECK_EQ(w.log_budget[RATELD_UNDECIDED_UNMATCHED].quiet, 49);
}

/* What rateld_log_budgets_drain(d) writes to the log (stderr), into buf. */
static void drain(void *d)
{
    rateld_log_budgets_drain(d);
}

static void drained(rateld_t *d, char *buf, size_t len)
{
    ratel_test_capture_stderr(drain, d, buf, len);
}

TEST(log_budget_drain_writes_what_is_held_back)
{
    rateld_worker_t workers[2];
    rateld_t d;
    char out[1024];

    memset(workers, 0, sizeof workers);
    memset(&d, 0, sizeof d);
    d.workers = workers;
    d.threads = 2;
    flood(&workers[0], RATELD_LOG_SHADOW_DENY, T0, 300,
          &(unsigned long long){0});
    flood(&workers[1], RATELD_LOG_SHADOW_DENY, T0, 700,
          &(unsigned long long){0});
    /* The counts are written (to the log) and cleared: none is lost, none
       counted twice. */
    drained(&d, out, sizeof out);
    CHECK(strstr(out, "msg=\"shadow deny\" not_logged=299\n") != NULL);
    CHECK(strstr(out, "msg=\"shadow deny\" not_logged=699\n") != NULL);
    CHECK_EQ(workers[0].log_budget[RATELD_LOG_SHADOW_DENY].quiet, 0);
    CHECK_EQ(workers[1].log_budget[RATELD_LOG_SHADOW_DENY].quiet, 0);
    drained(&d, out, sizeof out); /* nothing held back: nothing written */
    CHECK_EQ(strlen(out), 0);
    /* A connection refused at accept: one kind per limit, named. */
    flood(&workers[1], RATELD_LOG_REFUSED + RATEL_HTTP_REFUSED_PER_CLIENT, T0,
          40, &(unsigned long long){0});
    drained(&d, out, sizeof out);
    CHECK(strstr(out,
                 "msg=\"connection refused\" "
                 "limit=max_connections_per_client not_logged=39\n") != NULL);
}

RATEL_SUITE(log_budget) = {
    {"log_budget_one_line_per_interval", test_log_budget_one_line_per_interval},
    {"log_budget_kinds_apart", test_log_budget_kinds_apart},
    {"log_budget_drain_writes_what_is_held_back",
     test_log_budget_drain_writes_what_is_held_back},
    {0, 0},
};
