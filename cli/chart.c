/*
 * chart.c - what each algorithm would have done with the same trace.
 *
 * `ratel replay --svg` runs every request through one more policy per
 * algorithm that limits a rate (RATEL_ALGO_RATE: sliding, fixed, approx
 * and gcra): the given rules with their algorithm swapped to it (same
 * limits and periods; an algorithm that takes a burst keeps a given one,
 * else burst = limit). Each variant has its own memory store, so their states
 * never mix.
 *
 * Per variant and time bucket the chart counts admitted and rejected
 * requests, and per rule the peak: the most permits any single key had
 * admitted in the trailing window of that rule, (t - PERIOD, t], sampled
 * at that key's admissions. The peak is exact: every key keeps, per
 * variant and rule, a queue of its admissions still inside the window (one
 * entry per distinct millisecond). Those queues stay short because the
 * window of an admitting algorithm holds at most about twice the limit
 * (fixed at a boundary, gcra with its burst); past WINDOW_MAX_ENTRIES
 * distinct instants the two oldest entries merge at the later time, which
 * can only overstate the peak.
 *
 * The trace's span is unknown until its end (it may come from a pipe), so
 * buckets start 1 ms wide and, when CHART_CAP of them no longer cover the
 * span, widen along a chain where each width divides the next. Buckets are
 * aligned to multiples of their width since t_ms = 0 (so a minute bucket
 * starts on a minute, where fixed windows reset) and counters merge
 * exactly. svg.c picks the displayed width from them.
 *
 * Distinct keys do not merge (a key seen in two buckets is one key in
 * their union), so they are counted directly at every width svg.c may
 * display, CHART_DISPLAY_MAX buckets each, dropping a width once the trace
 * outgrows it: whichever width is displayed, its counts are exact. A key's
 * time never goes back (as in the core, an earlier time counts as its
 * latest), so comparing a request's bucket with the key's latest one tells
 * whether the key is new in the bucket.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Internal buckets; the SVG shows 100 to 200 made from these. */
#define CHART_CAP 4000
/* Most distinct instants one key's window queue holds per variant. */
#define WINDOW_MAX_ENTRIES 65536

typedef struct window_entry_s {
    int64_t t_ms;
    uint64_t permits;
} window_entry_t;

/* A key's admissions inside the trailing window, oldest first (a ring). */
struct window_s {
    window_entry_t *entries;
    size_t head, len, cap;
    uint64_t sum;    /* permits over all entries */
    int64_t last_ms; /* latest instant seen: the clock never goes back */
};

const int64_t chart_display_widths[CHART_NWIDTHS] = {
    1,         2,         5,         10,         20,        50,       100,
    200,       500,       1000,      2000,       5000,      10000,    15000,
    20000,     30000,     60000,     120000,     300000,    600000,   900000,
    1800000,   3600000,   7200000,   10800000,   21600000,  43200000, 86400000,
    172800000, 604800000, 864000000, 1728000000, 8640000000};

static const int64_t width_chain[] = {
    1,        2,         10,        20,         100,       200,
    1000,     2000,      10000,     20000,      60000,     120000,
    600000,   1200000,   3600000,   7200000,    21600000,  43200000,
    86400000, 172800000, 864000000, 1728000000, 8640000000};

static int64_t next_width(int64_t width)
{
    for (size_t i = 0; i < sizeof width_chain / sizeof width_chain[0]; i++)
        if (width_chain[i] > width)
            return width_chain[i];
    return width * 2;
}

/* Doubles a window's ring, or creates it, keeping the entries in order. */
static void window_grow(struct window_s *w)
{
    size_t cap = w->cap ? w->cap * 2 : 4;
    window_entry_t *e = cli_check_alloc(malloc(cap * sizeof *e));

    for (size_t i = 0; i < w->len; i++)
        e[i] = w->entries[(w->head + i) % w->cap];
    free(w->entries);
    w->entries = e;
    w->head = 0;
    w->cap = cap;
}

/*
 * Records `permits` admitted at `t_ms` for one key and returns what the key
 * holds in the trailing window (t_ms - window_ms, t_ms], this admission
 * included. Out-of-order times are taken as the latest seen, as the core
 * clamps a clock that goes backwards.
 */
static uint64_t window_admit(struct window_s *w, int64_t t_ms, uint64_t permits,
                             uint32_t window_ms)
{
    window_entry_t *tail;

    if (t_ms < w->last_ms)
        t_ms = w->last_ms;
    w->last_ms = t_ms;
    while (w->len > 0 && w->entries[w->head].t_ms <= t_ms - window_ms) {
        w->sum -= w->entries[w->head].permits;
        w->head = (w->head + 1) % w->cap;
        w->len--;
    }
    tail = w->len ? &w->entries[(w->head + w->len - 1) % w->cap] : NULL;
    if (tail && tail->t_ms == t_ms) {
        tail->permits += permits;
    } else {
        if (w->len == WINDOW_MAX_ENTRIES) {
            /* Merge the two oldest at the later time: never understates. */
            window_entry_t *first = &w->entries[w->head];
            w->head = (w->head + 1) % w->cap;
            w->len--;
            w->entries[w->head].permits += first->permits;
        }
        if (w->len == w->cap)
            window_grow(w);
        w->entries[(w->head + w->len) % w->cap] =
            (window_entry_t){t_ms, permits};
        w->len++;
    }
    w->sum += permits;
    return w->sum;
}

void chart_free_windows(key_record_t *rec)
{
    if (!rec->windows)
        return;
    for (uint32_t i = 0; i < rec->nwindows; i++)
        free(rec->windows[i].entries);
    free(rec->windows);
    rec->windows = NULL;
    rec->nwindows = 0;
}

/*
 * Builds the policy `policy` would be under algorithm `algo`. Rules that
 * become equal (10/1s and 10/1s:fixed both turn into 10/1s) are one rule.
 */
static int make_variant(ratel_policy_t *out, const ratel_policy_t *policy,
                        ratel_algo_t algo, char *err, size_t errlen)
{
    ratel_rule_t rules[RATEL_MAX_RULES];
    size_t n = 0;

    for (uint32_t i = 0; i < policy->nrules; i++) {
        ratel_rule_t r = policy->rules[i];
        int dup = 0;

        if (ratel_algo_facts(algo) & RATEL_ALGO_BURST)
            r.burst =
                ratel_algo_facts(r.algo) & RATEL_ALGO_BURST ? r.burst : r.limit;
        else
            r.burst = 0;
        r.algo = algo;
        for (size_t j = 0; j < n; j++)
            dup |= rules[j].limit == r.limit &&
                   rules[j].period_ms == r.period_ms &&
                   rules[j].burst == r.burst;
        if (!dup)
            rules[n++] = r;
    }
    return ratel_policy_init(out, rules, n, err, errlen);
}

int chart_init(chart_t *chart, const ratel_policy_t *policy,
               size_t memory_bytes)
{
    ratel_memory_options_t opts = {memory_bytes, 0};

    memset(chart, 0, sizeof *chart);
    chart->policy = *policy;
    chart->width_ms = 1;
    for (int i = 0; i < CHART_NWIDTHS; i++)
        chart->distinct[i] = cli_check_alloc(
            calloc(CHART_DISPLAY_MAX, sizeof *chart->distinct[i]));
    for (int algo = 0, a = 0; algo < RATEL_ALGOS; algo++)
        if (ratel_algo_facts((ratel_algo_t)algo) & RATEL_ALGO_RATE)
            chart->algos[a++] = (ratel_algo_t)algo;
    for (int a = 0; a < CHART_NALGOS; a++) {
        char err[512];
        int rc = make_variant(&chart->variants[a], policy, chart->algos[a], err,
                              sizeof err);
        if (rc < 0) {
            cli_error("replay", "--svg: the rules as %s: %s",
                      ratel_algo_name(chart->algos[a]), err);
            return CLI_EXIT_USAGE;
        }
        rc = ratel_store_memory_new(&chart->stores[a], &opts);
        if (rc < 0) {
            cli_error("replay", "--svg: creating a memory store: %s",
                      ratel_strerror(rc));
            return CLI_EXIT_FAIL;
        }
        chart->buckets[a] =
            cli_check_alloc(calloc(CHART_CAP, sizeof(chart_bucket_t)));
    }
    return 0;
}

void chart_free(chart_t *chart)
{
    for (int a = 0; a < CHART_NALGOS; a++) {
        ratel_store_free(chart->stores[a]);
        free(chart->buckets[a]);
        chart->stores[a] = NULL;
        chart->buckets[a] = NULL;
    }
    for (int i = 0; i < CHART_NWIDTHS; i++) {
        free(chart->distinct[i]);
        chart->distinct[i] = NULL;
    }
}

/*
 * Widens the buckets to the next width of the chain, merging counters.
 * Buckets are aligned to multiples of their width in absolute time, and
 * each width divides the next, so every old bucket falls inside exactly
 * one new one.
 */
static void coarsen(chart_t *chart)
{
    int64_t width = next_width(chart->width_ms);
    int64_t base = chart->base * chart->width_ms / width;
    size_t n = 0;

    for (int a = 0; a < CHART_NALGOS; a++) {
        chart_bucket_t *b = chart->buckets[a];
        for (size_t i = 0; i < chart->nbuckets; i++) {
            chart_bucket_t from = b[i];
            size_t j = (size_t)(((chart->base + (int64_t)i) * chart->width_ms /
                                 width) -
                                base);
            /* j <= i: the target was visited (and cleared) already. */
            if (j != i) {
                memset(&b[i], 0, sizeof b[i]);
                b[j].admitted += from.admitted;
                b[j].rejected += from.rejected;
                for (int r = 0; r < RATEL_MAX_RULES; r++)
                    if (from.peak[r] > b[j].peak[r])
                        b[j].peak[r] = from.peak[r];
            }
            if (j + 1 > n)
                n = j + 1;
        }
    }
    chart->nbuckets = n;
    chart->width_ms = width;
    chart->base = base;
}

/* The bucket of `t_ms`, widening the buckets first if it lies past them. */
static size_t bucket_of(chart_t *chart, int64_t t_ms)
{
    int64_t index;

    for (;;) {
        index = t_ms / chart->width_ms - chart->base;
        if (index < 0)
            index = 0; /* before the first request: counted with it */
        if (index < CHART_CAP)
            break;
        coarsen(chart);
    }
    if ((size_t)index >= chart->nbuckets)
        chart->nbuckets = (size_t)index + 1;
    return (size_t)index;
}

/* Index of `t_ms`'s bucket at `width_ms`, aligned as the display is. */
static int64_t display_index(const chart_t *chart, int64_t t_ms,
                             int64_t width_ms)
{
    int64_t index = t_ms / width_ms - chart->origin_ms / width_ms;
    return index < 0 ? 0 : index; /* before the first request: with it */
}

/*
 * Counts the key of `rec` in its bucket at every displayable width where
 * it was not counted yet; `first` when the chart sees the key for the
 * first time. A width whose buckets no longer cover the trace is dropped.
 */
static void count_distinct(chart_t *chart, key_record_t *rec, int64_t t_ms,
                           int first)
{
    if (!first && t_ms < rec->last_ms)
        t_ms = rec->last_ms;
    for (int i = 0; i < CHART_NWIDTHS; i++) {
        int64_t w = chart_display_widths[i], index;
        if (!chart->distinct[i])
            continue;
        index = display_index(chart, t_ms, w);
        if (index >= CHART_DISPLAY_MAX) {
            free(chart->distinct[i]);
            chart->distinct[i] = NULL;
        } else if (first || index != display_index(chart, rec->last_ms, w)) {
            chart->distinct[i][index]++;
        }
    }
    rec->last_ms = t_ms;
}

/*
 * Counts an admission of variant `a` in bucket `b`: per rule, what the key
 * now holds in that rule's trailing window.
 */
static void count_admitted(chart_t *chart, key_record_t *rec, int a,
                           chart_bucket_t *b, const trace_item_t *item)
{
    const ratel_policy_t *p = &chart->policy;

    chart->admitted[a]++;
    b->admitted++;
    for (uint32_t r = 0; r < p->nrules; r++) {
        uint64_t held =
            window_admit(&rec->windows[(size_t)a * p->nrules + r], item->t_ms,
                         item->cost, p->rules[r].period_ms);
        if (held > b->peak[r])
            b->peak[r] = held;
        if (held > chart->peak[a][r])
            chart->peak[a][r] = held;
    }
}

int chart_add(chart_t *chart, key_record_t *rec, const trace_item_t *item)
{
    ratel_request_t request = RATEL_REQUEST_INIT;
    size_t bucket;

    if (!chart->started) {
        chart->started = 1;
        chart->origin_ms = item->t_ms;
        chart->end_ms = item->t_ms;
        chart->base = item->t_ms / chart->width_ms;
    }
    if (item->t_ms > chart->end_ms)
        chart->end_ms = item->t_ms;
    bucket = bucket_of(chart, item->t_ms);
    count_distinct(chart, rec, item->t_ms, rec->windows == NULL);
    if (!rec->windows) {
        rec->nwindows = CHART_NALGOS * chart->policy.nrules;
        rec->windows =
            cli_check_alloc(calloc(rec->nwindows, sizeof(struct window_s)));
    }
    chart->requests++;
    request.cost = item->cost;
    for (int a = 0; a < CHART_NALGOS; a++) {
        ratel_decision_t d;
        int rc = ratel_store_acquire(chart->stores[a], item->key, item->keylen,
                                     &chart->variants[a], item->t_ms * 1000,
                                     &request, &d);
        if (rc == RATEL_ECOST) {
            /* More than this variant can ever admit (a gcra burst above
               the limit): a rejection, not a reason to stop the chart. */
            d.allowed = 0;
        } else if (rc < 0) {
            cli_error("replay", "--svg: %s variant: %s",
                      ratel_algo_name(chart->algos[a]), ratel_strerror(rc));
            return CLI_EXIT_FAIL;
        }
        if (d.allowed) {
            count_admitted(chart, rec, a, &chart->buckets[a][bucket], item);
        } else {
            chart->rejected[a]++;
            chart->buckets[a][bucket].rejected++;
        }
    }
    return 0;
}
