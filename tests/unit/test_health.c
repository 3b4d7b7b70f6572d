/*
 * test_health.c - a store's health (lib/store/health.c, ratel_store_health)
 * and the daemons' budgeted log of its changes (server/app/watch.c).
 *
 * The health must follow its sources exactly: down while any source is,
 * up only when the last one recovers, counting every change once, with
 * the cause of the failure and how long an outage lasted. The log must
 * write one line per change while its budget lasts, never more than the
 * budget, and never lose the final state: a change that found no budget
 * is reported, folded with the others, once budget is back. Time is
 * injected.
 */
#include "test.h"

#include "app/watch.h"
#include "ratel.h"
#include "store/health.h"

#include <string.h>

#define T0 ((int64_t)1700000000 * 1000000) /* a fixed start instant, us */
#define MS 1000                            /* one millisecond in us */

static int notified;

static void count_notify(void *ud)
{
    notified += *(int *)ud;
}

static ratel_store_health_t get(ratel_health_t *h)
{
    ratel_store_health_t v;
    ratel__health_get(h, &v);
    return v;
}

TEST(health_starts_up)
{
    ratel_health_t h;
    ratel__health_init(&h);
    ratel_store_health_t v = get(&h);
    CHECK_EQ(v.up, 1);
    CHECK_EQ(v.since_us, 0);
    CHECK_EQ(v.transitions, 0);
    CHECK_EQ(v.last_outage_ms, 0);
    CHECK(strcmp(v.cause, "") == 0);
    ratel__health_destroy(&h);
}

TEST(health_one_source_down_and_up)
{
    ratel_health_t h;
    int node = 0;
    ratel__health_init(&h);

    CHECK_EQ(ratel__health_set(&h, &node, 1, "a:1: Connection refused", T0), 1);
    CHECK_EQ(node, 1);
    ratel_store_health_t v = get(&h);
    CHECK_EQ(v.up, 0);
    CHECK_EQ(v.since_us, T0);
    CHECK_EQ(v.transitions, 1);
    CHECK(strcmp(v.cause, "a:1: Connection refused") == 0);

    /* Failing again is no change, but the reason is the newest. */
    CHECK_EQ(ratel__health_set(&h, &node, 1, "a:1: no reply within 250 ms",
                               T0 + 500 * MS),
             0);
    v = get(&h);
    CHECK_EQ(v.transitions, 1);
    CHECK_EQ(v.since_us, T0);
    CHECK(strcmp(v.cause, "a:1: no reply within 250 ms") == 0);

    CHECK_EQ(ratel__health_set(&h, &node, 0, NULL, T0 + 3200 * MS), 1);
    CHECK_EQ(node, 0);
    v = get(&h);
    CHECK_EQ(v.up, 1);
    CHECK_EQ(v.since_us, T0 + 3200 * MS);
    CHECK_EQ(v.transitions, 2);
    CHECK_EQ(v.last_outage_ms, 3200);
    /* Up, the cause says what the last outage was. */
    CHECK(strcmp(v.cause, "a:1: no reply within 250 ms") == 0);

    /* Up again is no change. */
    CHECK_EQ(ratel__health_set(&h, &node, 0, NULL, T0 + 4000 * MS), 0);
    CHECK_EQ(get(&h).transitions, 2);
    ratel__health_destroy(&h);
}

TEST(health_down_while_any_source_is)
{
    ratel_health_t h;
    int a = 0, b = 0, check = 0;
    ratel__health_init(&h);

    CHECK_EQ(ratel__health_set(&h, &a, 1, "a down", T0), 1);
    CHECK_EQ(ratel__health_set(&h, &b, 1, "b down", T0 + 1 * MS), 0);
    CHECK(strcmp(get(&h).cause, "b down") == 0);
    CHECK_EQ(ratel__health_set(&h, &a, 0, NULL, T0 + 2 * MS), 0);
    CHECK_EQ(get(&h).up, 0);
    CHECK_EQ(ratel__health_set(&h, &check, 1, "", T0 + 3 * MS), 0);
    CHECK(strcmp(get(&h).cause, "unknown failure") == 0);
    CHECK_EQ(ratel__health_set(&h, &b, 0, NULL, T0 + 4 * MS), 0);
    CHECK_EQ(get(&h).up, 0);
    CHECK_EQ(ratel__health_set(&h, &check, 0, NULL, T0 + 5 * MS), 1);
    ratel_store_health_t v = get(&h);
    CHECK_EQ(v.up, 1);
    CHECK_EQ(v.transitions, 2);
    CHECK_EQ(v.since_us, T0 + 5 * MS);
    CHECK_EQ(v.last_outage_ms, 5);
    ratel__health_destroy(&h);
}

TEST(health_notify_calls_the_watcher)
{
    ratel_health_t h;
    int one = 1, two = 2;
    ratel__health_init(&h);

    notified = 0;
    ratel__health_notify(&h); /* nobody watches: nothing happens */
    ratel__health_watch(&h, count_notify, &one);
    ratel__health_notify(&h);
    CHECK_EQ(notified, 1);
    ratel__health_watch(&h, count_notify, &two); /* replaces */
    ratel__health_notify(&h);
    CHECK_EQ(notified, 3);
    ratel__health_watch(&h, NULL, NULL);
    ratel__health_notify(&h);
    CHECK_EQ(notified, 3);
    ratel__health_destroy(&h);
}

TEST(health_memory_store_is_always_up)
{
    ratel_store_t *s = NULL;
    ratel_store_health_t v;
    int one = 1;

    REQUIRE(ratel_store_memory_new(&s, NULL) == 0);
    memset(&v, 0x55, sizeof v);
    CHECK_EQ(ratel_store_health(s, &v), 0);
    CHECK_EQ(v.up, 1);
    CHECK_EQ(v.since_us, 0);
    CHECK_EQ(v.transitions, 0);
    CHECK(strcmp(v.cause, "") == 0);
    CHECK_EQ(ratel_store_watch_health(s, count_notify, &one), 0);
    CHECK_EQ(ratel_store_health(s, NULL), RATEL_EINVAL);
    memset(&v, 0x55, sizeof v);
    CHECK_EQ(ratel_store_health(NULL, &v), RATEL_EINVAL);
    CHECK_EQ(v.up, 0); /* zeroed */
    CHECK_EQ(ratel_store_watch_health(NULL, count_notify, &one), RATEL_EINVAL);
    ratel_store_free(s);
}

/* ------------------------------------------------------------ the log */

/* A store's health after `transitions` changes, up when even. */
static ratel_store_health_t after(uint64_t transitions, int64_t outage_ms)
{
    ratel_store_health_t h;
    memset(&h, 0, sizeof h);
    h.transitions = transitions;
    h.up = transitions % 2 == 0;
    h.last_outage_ms = outage_ms;
    snprintf(h.cause, sizeof h.cause, "x:1: Connection refused");
    return h;
}

TEST(health_log_one_line_per_change)
{
    ratel__watch_log_t log;
    ratel__watch_line_t line;
    ratel_store_health_t h = after(0, 0);

    REQUIRE(ratel__watch_log_init(&log, NULL) == 0);
    ratel__watch_log_look(&log, &h, T0, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
    CHECK_EQ(line.retry_us, 0);

    h = after(1, 0);
    ratel__watch_log_look(&log, &h, T0 + 1 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_DOWN);
    CHECK_EQ(line.changes, 1);
    /* Looking again without a change writes nothing. */
    ratel__watch_log_look(&log, &h, T0 + 2 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);

    h = after(2, 3100);
    ratel__watch_log_look(&log, &h, T0 + 3 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_UP);
    CHECK_EQ(line.changes, 1);
    CHECK_EQ(line.down_ms, 3100);
    ratel__watch_log_look(&log, &h, T0 + 4 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
}

TEST(health_log_folds_changes_between_looks)
{
    ratel__watch_log_t log;
    ratel__watch_line_t line;
    ratel_store_health_t h = after(3, 0); /* down, up, down */

    REQUIRE(ratel__watch_log_init(&log, NULL) == 0);
    ratel__watch_log_look(&log, &h, T0, &line);
    CHECK_EQ(line.what, RATEL__WATCH_DOWN);
    CHECK_EQ(line.changes, 3);
    /* Up and down again: the state the log gave, but a change it missed
       is still reported. */
    h = after(5, 20);
    ratel__watch_log_look(&log, &h, T0 + 1 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_DOWN);
    CHECK_EQ(line.changes, 2);
    h = after(6, 30);
    ratel__watch_log_look(&log, &h, T0 + 2 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_UP);
    CHECK_EQ(line.changes, 1);
    CHECK_EQ(line.down_ms, 30);
}

TEST(health_log_budget_holds_a_flapping_store)
{
    ratel__watch_log_t log;
    ratel__watch_line_t line;
    ratel_store_health_t h;
    int lines = 0;
    uint64_t t = 0;
    int64_t now = T0, retry = 0;

    /* "1/1m:gcra,burst=10": a change every 100 ms for 10 s. */
    REQUIRE(ratel__watch_log_init(&log, NULL) == 0);
    for (int i = 0; i < 100; i++, now += 100 * MS) {
        h = after(++t, 50);
        ratel__watch_log_look(&log, &h, now, &line);
        if (line.what != RATEL__WATCH_NONE) {
            lines++;
            CHECK_EQ(line.changes, 1);
            CHECK_EQ(line.retry_us, 0);
        } else {
            CHECK(line.retry_us > now);
            retry = line.retry_us;
        }
    }
    CHECK_EQ(lines, 10);
    /* It settles (up, at t = 100). Before the budget is back: nothing. */
    h = after(t, 50);
    ratel__watch_log_look(&log, &h, retry - 1, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
    CHECK(line.retry_us >= retry);
    /* When it is: one line for the state now and the 90 unwritten. */
    ratel__watch_log_look(&log, &h, line.retry_us, &line);
    CHECK_EQ(line.what, RATEL__WATCH_UP);
    CHECK_EQ(line.changes, 90);
    ratel__watch_log_look(&log, &h, now + 120000 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
    CHECK_EQ(line.retry_us, 0);
}

TEST(health_log_rule_checked)
{
    ratel__watch_log_t log;
    CHECK_EQ(ratel__watch_log_init(&log, "1/1m:gcra,burst=2"), 0);
    CHECK_EQ(ratel__watch_log_init(&log, "often"), RATEL_ERULE);
}

TEST(health_warning_is_no_outage)
{
    ratel_health_t h;
    int s1 = 0, s2 = 0;
    ratel__health_init(&h);

    /* A Sentinel fails: a warning begins, the store stays up. */
    CHECK_EQ(ratel__health_warn(&h, &s1, 1, "Sentinel a:1: no reply"), 1);
    ratel_store_health_t v = get(&h);
    CHECK_EQ(v.up, 1);
    CHECK_EQ(v.transitions, 0);
    CHECK_EQ(v.warnings, 1);
    CHECK(strcmp(v.warning, "Sentinel a:1: no reply") == 0);
    /* Again, and a second one: one warning, the latest text. */
    CHECK_EQ(ratel__health_warn(&h, &s1, 1, "Sentinel a:1: reset"), 0);
    CHECK_EQ(ratel__health_warn(&h, &s2, 1, "Sentinel b:1: no reply"), 0);
    v = get(&h);
    CHECK_EQ(v.warnings, 1);
    CHECK(strcmp(v.warning, "Sentinel b:1: no reply") == 0);
    /* It ends when the last one answers again. */
    CHECK_EQ(ratel__health_warn(&h, &s1, 0, NULL), 0);
    CHECK(get(&h).warning[0] != '\0');
    CHECK_EQ(ratel__health_warn(&h, &s2, 0, NULL), 1);
    v = get(&h);
    CHECK(strcmp(v.warning, "") == 0);
    CHECK_EQ(v.warnings, 1);
    CHECK_EQ(v.up, 1);
    ratel__health_destroy(&h);
}

TEST(health_log_warning_lines)
{
    ratel__watch_log_t log;
    ratel__watch_line_t line;
    ratel_store_health_t h = after(0, 0);

    REQUIRE(ratel__watch_log_init(&log, NULL) == 0);
    ratel__watch_warn_look(&log, &h, T0, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
    h.warnings = 1;
    snprintf(h.warning, sizeof h.warning, "Sentinel a:1: no reply");
    ratel__watch_warn_look(&log, &h, T0 + 1 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_WARN);
    ratel__watch_warn_look(&log, &h, T0 + 2 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
    h.warning[0] = '\0';
    ratel__watch_warn_look(&log, &h, T0 + 3 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_WARN_OVER);
    CHECK_EQ(line.down_ms, 2); /* since the warning's line */
    ratel__watch_warn_look(&log, &h, T0 + 4 * MS, &line);
    CHECK_EQ(line.what, RATEL__WATCH_NONE);
}

RATEL_SUITE(health) = {
    {"health_warning_is_no_outage", test_health_warning_is_no_outage},
    {"health_log_warning_lines", test_health_log_warning_lines},
    {"health_starts_up", test_health_starts_up},
    {"health_one_source_down_and_up", test_health_one_source_down_and_up},
    {"health_down_while_any_source_is", test_health_down_while_any_source_is},
    {"health_notify_calls_the_watcher", test_health_notify_calls_the_watcher},
    {"health_memory_store_is_always_up", test_health_memory_store_is_always_up},
    {"health_log_one_line_per_change", test_health_log_one_line_per_change},
    {"health_log_folds_changes_between_looks",
     test_health_log_folds_changes_between_looks},
    {"health_log_budget_holds_a_flapping_store",
     test_health_log_budget_holds_a_flapping_store},
    {"health_log_rule_checked", test_health_log_rule_checked},
    {0, 0},
};
