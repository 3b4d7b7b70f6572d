/*
 * replay.c - `ratel replay`: a traffic trace through one policy with
 * simulated time.
 *
 * Every `--rule` joins ONE policy, applied to each key all-or-nothing, on
 * the embedded memory store; the clock is the trace's: now_us = t_ms *
 * 1000. The trace streams: a plain replay holds nothing per request or per
 * key beyond the store (bounded by --memory); --summary adds one record
 * per key; --svg adds the chart's buckets and per-key window queues; a
 * trace with hold_ms adds one queued release per lease still held.
 *
 * Leases of a concurrent rule are given back on the trace's clock too: a
 * line's hold_ms queues a release at t_ms + hold_ms, and the releases due
 * at or before a line's time are made, in time order, before it.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MEMORY ((size_t)256 << 20)

void cli_replay_usage(FILE *out)
{
    fputs("usage: ratel replay --rule RULE [--rule RULE ...] [--summary]\n"
          "                    [--svg FILE] [--memory BYTES] [FILE]\n"
          "\n"
          "Runs a traffic trace through ONE policy made of all --rule options "
          "(a request\n"
          "is admitted only if every rule admits it, and then charges them "
          "all) on the\n"
          "embedded memory store, with simulated time: the clock is the "
          "trace's.\n"
          "Keys are independent.\n"
          "\n"
          "Input: FILE, or standard input when FILE is absent or '-'. One "
          "request per\n"
          "line, fields separated by blanks:\n"
          "  t_ms key [cost [hold_ms]]\n"
          "t_ms is a non-negative integer in milliseconds (any origin: 0 or "
          "Unix time),\n"
          "key any word, cost a whole number >= 1 (default 1). hold_ms: under "
          "a policy\n"
          "with a concurrent rule, an admitted request gives its lease back at "
          "t_ms +\n"
          "hold_ms (without it the lease is held until it expires); under "
          "another policy\n"
          "it is ignored with a warning. Blank lines and lines\n"
          "starting with '#' are skipped. A malformed line stops the replay "
          "with a\n"
          "message naming the file and line (exit 2), as does a cost the "
          "policy can\n"
          "never admit.\n"
          "\n"
          "Output: one tab-separated line per request:\n"
          "  t_ms  key  allowed (1 or 0)  remaining  retry_after_ms\n"
          "remaining is what the key may still spend now (the least over the "
          "rules),\n"
          "retry_after_ms 0 when allowed, else how long until the same "
          "request would be\n"
          "admitted.\n"
          "\n"
          "With --summary, per-key totals replace the per-request lines: a "
          "header line,\n"
          "then one line per key in the order keys first appear, then an "
          "overall line:\n"
          "  # key  requests  allowed  denied  permits\n"
          "  a      5         3        2       3\n"
          "  total (1 key)  5  3  2  3\n"
          "permits is what the allowed requests charged (the sum of their "
          "costs).\n"
          "Then the keys denied most (at most 10, each denied at least "
          "once):\n"
          "  # most denied  key  denied  allowed\n"
          "  top 1          a    2       3\n"
          "\n"
          "Options:\n"
          "  -r, --rule RULE      add RULE to the policy (required; up to 8)\n"
          "  -s, --summary        print per-key totals instead of one line "
          "per request\n"
          "      --svg FILE       also draw FILE, an SVG chart of what each "
          "algorithm\n"
          "                       (sliding, fixed, approx, gcra) would have "
          "done with\n"
          "                       these limits and periods (a line per "
          "rule), the\n"
          "                       distinct keys over time and the keys "
          "denied most;\n"
          "                       written in full even when standard output "
          "closes early\n"
          "  -m, --memory BYTES   bound on each memory store, with an "
          "optional suffix\n"
          "                       k, M or G (powers of 1024); default 256M. "
          "--svg uses\n"
          "                       four more stores.\n"
          "  -h, --help           print this help and exit\n"
          "\n"
          "Examples:\n"
          "  $ printf '0 a\\n0 a\\n1 a\\n999 a\\n1000 a\\n' | ratel replay "
          "--rule 2/1s\n"
          "  0       a       1       1       0\n"
          "  0       a       1       0       0\n"
          "  1       a       0       0       999\n"
          "  999     a       0       0       1\n"
          "  1000    a       1       1       0\n"
          "  $ ratel replay --rule 1/60s --rule 10/1h --summary --svg "
          "sms.svg \\\n"
          "        examples/traces/sample.trace\n",
          out);
}

/*
 * Parses BYTES for --memory: digits with an optional k/K, m/M or g/G
 * suffix (powers of 1024). Returns 0 or -1.
 */
static int parse_bytes(const char *text, size_t *out)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    if (*text < '0' || *text > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno)
        return -1;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (*end != '\0' || v == 0 || v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

typedef struct replay_options_s {
    const char *rules[RATEL_MAX_RULES];
    size_t nrules;
    int summary;
    const char *svg_path;
    size_t memory;
    const char *input;
} replay_options_t;

/* Parses the options; returns 0, or an exit status after saying why. */
static int parse_options(int argc, char **argv, replay_options_t *o, int *help)
{
    static const struct option longopts[] = {
        {"rule", required_argument, NULL, 'r'},
        {"summary", no_argument, NULL, 's'},
        {"svg", required_argument, NULL, 'S'},
        {"memory", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int opt;

    memset(o, 0, sizeof *o);
    o->memory = DEFAULT_MEMORY;
    *help = 0;
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":r:sm:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (o->nrules == RATEL_MAX_RULES) {
                cli_error("replay",
                          "too many rules: at most %d --rule "
                          "options make one policy",
                          RATEL_MAX_RULES);
                return CLI_EXIT_USAGE;
            }
            o->rules[o->nrules++] = optarg;
            break;
        case 's':
            o->summary = 1;
            break;
        case 'S':
            o->svg_path = optarg;
            break;
        case 'm':
            if (parse_bytes(optarg, &o->memory) < 0) {
                cli_error("replay",
                          "--memory \"%s\": expected a number of "
                          "bytes >= 1 with an optional k, M or G "
                          "suffix, e.g. 64M",
                          optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        case 'h':
            *help = 1;
            return 0;
        default:
            return cli_bad_option("replay", opt, argv, longopts);
        }
    }
    if (optind < argc)
        o->input = argv[optind++];
    if (optind < argc) {
        cli_error("replay",
                  "unexpected argument '%s': give at most one "
                  "trace FILE",
                  argv[optind]);
        return CLI_EXIT_USAGE;
    }
    if (o->nrules == 0) {
        cli_error("replay", "no rule given; add --rule RULE, e.g. "
                            "--rule 10/1m");
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/*
 * Prints the keys denied most: a header, then "top N", the key, its denied
 * and allowed requests, for each key denied at least once, at most
 * CHART_TOP_DENIED of them.
 */
static void print_most_denied(const key_table_t *keys)
{
    const key_record_t *top[CHART_TOP_DENIED];
    size_t n = keys_most_denied(keys, top, CHART_TOP_DENIED);

    printf("# most denied\tkey\tdenied\tallowed\n");
    for (size_t i = 0; i < n; i++)
        printf("top %zu\t%s\t%" PRIu64 "\t%" PRIu64 "\n", i + 1, top[i]->key,
               top[i]->denied, top[i]->allowed);
}

/*
 * Prints the --summary table: header, one line per key, overall line,
 * then the keys denied most.
 */
static void print_summary(const key_table_t *keys)
{
    uint64_t requests = 0, allowed = 0, denied = 0, permits = 0;

    printf("# key\trequests\tallowed\tdenied\tpermits\n");
    for (size_t r = 0; r < keys->nrecords; r++) {
        const key_record_t *k = keys->records[r];
        printf("%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n",
               k->key, k->requests, k->allowed, k->denied, k->permits);
        requests += k->requests;
        allowed += k->allowed;
        denied += k->denied;
        permits += k->permits;
    }
    printf("total (%zu key%s)\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
           "\n",
           keys->nrecords, keys->nrecords == 1 ? "" : "s", requests, allowed,
           denied, permits);
    print_most_denied(keys);
}

/*
 * Explains an ECOST: which rule the cost can never fit. The core says
 * only that it is too large; the message names the line and the rule.
 */
static void cost_error(const trace_t *tr, const ratel_policy_t *policy,
                       uint64_t cost)
{
    ratel_request_t req = RATEL_REQUEST_INIT;
    size_t i = 0;
    char text[64];

    req.cost = cost;
    if (ratel_policy_check_request(policy, &req, &i) != RATEL_ECOST) {
        cli_error("replay", "%s:%llu: cost %" PRIu64 ": %s", tr->name, tr->line,
                  cost, ratel_strerror(RATEL_ECOST));
        return;
    }
    ratel_rule_format(&policy->rules[i], text, sizeof text);
    cli_error("replay",
              "%s:%llu: cost %" PRIu64 " is more than rule %s can ever "
              "admit (%" PRIu64 ")",
              tr->name, tr->line, cost, text,
              ratel_rule_capacity(&policy->rules[i]));
}

/* Writes the chart to `path`; returns an exit status. */
static int write_svg(const chart_t *chart, FILE *fp, const char *path,
                     const char *source)
{
    int failed = svg_write(chart, source, fp) < 0;

    failed |= fclose(fp) != 0;
    if (failed) {
        cli_error("replay", "--svg: writing '%s': %s", path, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* A lease to give back at a simulated time (the trace's hold_ms). */
typedef struct release_s {
    int64_t at_ms;
    uint64_t seq; /* order of the acquires: equal times release in it */
    uint32_t lease;
    size_t keylen;
    char *key;
} release_t;

/* Leases still held, as a binary min-heap on (at_ms, seq). */
typedef struct release_queue_s {
    release_t *heap;
    size_t len, cap;
    uint64_t seq;
} release_queue_t;

/* Everything one replay works with. */
typedef struct replay_s {
    const replay_options_t *o;
    const ratel_policy_t *policy;
    ratel_store_t *store;
    trace_t *tr;
    chart_t *chart;    /* NULL without --svg */
    key_table_t *keys; /* NULL without --summary or --svg */
    release_queue_t releases;
    int concurrent;  /* the policy has a concurrent rule */
    int warned_hold; /* said once that hold_ms has nothing to hold */
    int output_gone; /* standard output's reader went away */
} replay_t;

static int release_before(const release_t *a, const release_t *b)
{
    return a->at_ms < b->at_ms || (a->at_ms == b->at_ms && a->seq < b->seq);
}

static void release_swap(release_t *a, release_t *b)
{
    release_t t = *a;
    *a = *b;
    *b = t;
}

/* Queues the release of `lease` of `key` at `at_ms`. */
static void release_push(release_queue_t *q, const char *key, size_t keylen,
                         uint32_t lease, int64_t at_ms)
{
    release_t *e;

    if (q->len == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->heap = cli_check_alloc(realloc(q->heap, q->cap * sizeof *q->heap));
    }
    e = &q->heap[q->len];
    e->at_ms = at_ms;
    e->seq = q->seq++;
    e->lease = lease;
    e->keylen = keylen;
    e->key = cli_check_alloc(malloc(keylen + 1));
    memcpy(e->key, key, keylen);
    e->key[keylen] = '\0';
    for (size_t i = q->len++;
         i > 0 && release_before(&q->heap[i], &q->heap[(i - 1) / 2]);
         i = (i - 1) / 2)
        release_swap(&q->heap[i], &q->heap[(i - 1) / 2]);
}

/* Removes the earliest release into `*out` (its key is the caller's). */
static void release_pop(release_queue_t *q, release_t *out)
{
    size_t i = 0;

    *out = q->heap[0];
    q->heap[0] = q->heap[--q->len];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < q->len && release_before(&q->heap[l], &q->heap[m]))
            m = l;
        if (l + 1 < q->len && release_before(&q->heap[l + 1], &q->heap[m]))
            m = l + 1;
        if (m == i)
            break;
        release_swap(&q->heap[i], &q->heap[m]);
        i = m;
    }
}

static void release_queue_free(release_queue_t *q)
{
    for (size_t i = 0; i < q->len; i++)
        free(q->heap[i].key);
    free(q->heap);
    memset(q, 0, sizeof *q);
}

/*
 * Gives back, in time order, every lease due at or before `until_ms` (a
 * lease held for hold_ms from t is free again at t + hold_ms, as one that
 * expires at t + PERIOD is). A lease that expired first is simply no
 * longer held. Returns 0 or CLI_EXIT_FAIL after saying why.
 */
static int release_due(replay_t *r, int64_t until_ms)
{
    release_queue_t *q = &r->releases;

    while (q->len > 0 && q->heap[0].at_ms <= until_ms) {
        release_t e;
        ratel_decision_t d;
        int held, rc;

        release_pop(q, &e);
        rc = ratel_store_release(r->store, e.key, e.keylen, r->policy,
                                 e.at_ms * 1000, e.lease, 0, &held, &d);
        if (rc < 0)
            cli_error("replay",
                      "releasing lease %" PRIu32 " of '%s' at %" PRId64
                      " ms: %s",
                      e.lease, e.key, e.at_ms, ratel_strerror(rc));
        free(e.key);
        if (rc < 0)
            return CLI_EXIT_FAIL;
    }
    return 0;
}

/*
 * After an admitted request: queues its lease's release when the line
 * gave hold_ms (a lease without it is held until it expires), or says once
 * that hold_ms holds nothing under a policy without a concurrent rule.
 */
static void hold_lease(replay_t *r, const trace_item_t *item,
                       const ratel_decision_t *d)
{
    if (item->hold_ms < 0)
        return;
    if (!r->concurrent) {
        if (!r->warned_hold)
            cli_error("replay",
                      "warning: %s:%llu: hold_ms given, but the policy has "
                      "no concurrent rule: nothing is held, hold_ms is "
                      "ignored",
                      r->tr->name, r->tr->line);
        r->warned_hold = 1;
        return;
    }
    if (d->allowed && d->lease)
        release_push(&r->releases, item->key, item->keylen, d->lease,
                     item->t_ms + item->hold_ms);
}

/*
 * Called with what a write to standard output returned. When its reader
 * has gone (EPIPE: `| head`, SIGPIPE being ignored) the rest of the output
 * goes to /dev/null, so the replay can still finish the --svg file and
 * main's final flush finds nothing wrong: the reader chose to stop. Any
 * other write error stays on stdout for main to report. Returns whether
 * the output is gone.
 */
static int output_gone(replay_t *r, int written)
{
    int fd;

    if (r->output_gone || written >= 0 || errno != EPIPE)
        return r->output_gone;
    r->output_gone = 1;
    fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        close(fd);
        clearerr(stdout);
    }
    return 1;
}

/* Counts a decision in the key's record. */
static void count_decision(key_record_t *rec, const trace_item_t *item,
                           const ratel_decision_t *d)
{
    rec->requests++;
    if (d->allowed) {
        rec->allowed++;
        rec->permits += item->cost;
    } else {
        rec->denied++;
    }
}

/*
 * Decides one trace line: the releases due first, then the request, its
 * output line, its lease, the key's record and the chart. Returns 0, or an
 * exit status after saying why.
 */
static int replay_item(replay_t *r, const trace_item_t *item)
{
    ratel_request_t request = RATEL_REQUEST_INIT;
    ratel_decision_t d;
    key_record_t *rec = NULL;
    int rc;

    if ((rc = release_due(r, item->t_ms)) != 0)
        return rc;
    request.cost = item->cost;
    rc = ratel_store_acquire(r->store, item->key, item->keylen, r->policy,
                             item->t_ms * 1000, &request, &d);
    if (rc == RATEL_ECOST) {
        cost_error(r->tr, r->policy, item->cost);
        return CLI_EXIT_USAGE;
    }
    if (rc < 0) {
        cli_error("replay", "%s:%llu: %s", r->tr->name, r->tr->line,
                  ratel_strerror(rc));
        return CLI_EXIT_FAIL;
    }
    hold_lease(r, item, &d);
    if (r->keys) {
        rec = keys_get(r->keys, item->key, item->keylen);
        count_decision(rec, item, &d);
    }
    if (!r->o->summary && !r->output_gone)
        output_gone(r, printf("%" PRId64 "\t%s\t%d\t%" PRId64 "\t%" PRId64 "\n",
                              item->t_ms, item->key, d.allowed ? 1 : 0,
                              d.remaining, d.retry_after_ms));
    if (r->chart)
        return chart_add(r->chart, rec, item);
    return 0;
}

/*
 * Runs the replay loop, then the releases still due; returns an exit
 * status. Once standard output is gone nothing is left to do without a
 * chart, so the trace is not read further.
 */
static int run(replay_t *r)
{
    trace_item_t item = {0};
    char err[512];
    int rc;

    while ((rc = trace_next(r->tr, &item, err, sizeof err)) > 0) {
        int status = replay_item(r, &item);
        if (status != 0)
            return status;
        if (r->output_gone && !r->chart)
            return CLI_EXIT_OK;
    }
    if (rc < 0) {
        cli_error("replay", "%s", err);
        return rc == -1 ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return release_due(r, INT64_MAX);
}

/*
 * Warns when a store had to evict live keys to stay within --memory: the
 * decisions were then not what an unbounded limiter would have made.
 */
static void warn_evictions(ratel_store_t *store, const char *what)
{
    ratel_store_stats_t st;

    ratel_store_stats(store, &st);
    if (st.evictions)
        cli_error("replay",
                  "warning: the %s store evicted %" PRIu64 " live keys "
                  "to stay within --memory %" PRIu64 " bytes; "
                  "raise it for exact results",
                  what, st.evictions, st.max_bytes);
}

/* Opens the trace: FILE, or stdin for none or "-". NULL after saying why. */
static trace_t *open_trace(const char *input)
{
    trace_t *tr = cli_check_alloc(calloc(1, sizeof *tr));

    if (!input || strcmp(input, "-") == 0) {
        tr->fp = stdin;
        tr->name = "<stdin>";
        return tr;
    }
    tr->fp = fopen(input, "r");
    tr->name = input;
    if (!tr->fp) {
        cli_error("replay", "cannot open '%s': %s", input, strerror(errno));
        free(tr);
        return NULL;
    }
    return tr;
}

/*
 * After a replay that succeeded: the summary, the eviction warnings and
 * the chart, written to `svg` (closed here). Returns an exit status.
 */
static int finish(replay_t *r, FILE *svg)
{
    chart_t *chart = r->chart;

    if (r->o->summary && !r->output_gone) {
        print_summary(r->keys);
        output_gone(r, fflush(stdout));
    }
    warn_evictions(r->store, "policy's");
    if (!chart)
        return CLI_EXIT_OK;
    chart->keys = r->keys->nrecords;
    chart->nmost_denied =
        keys_most_denied(r->keys, chart->most_denied, CHART_TOP_DENIED);
    for (int a = 0; a < CHART_NALGOS; a++)
        warn_evictions(chart->stores[a], ratel_algo_name(chart->algos[a]));
    return write_svg(chart, svg, r->o->svg_path,
                     r->o->input ? r->o->input : "standard input");
}

int cli_replay(int argc, char **argv)
{
    replay_options_t o;
    ratel_policy_t policy;
    ratel_memory_options_t mopts;
    replay_t r = {0};
    key_table_t keys = {0};
    chart_t chart;
    int help, status, rc;
    FILE *svg = NULL;
    char err[512];

    if ((status = parse_options(argc, argv, &o, &help)) != 0)
        return status;
    if (help) {
        cli_replay_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (ratel_policy_parse(&policy, o.rules, o.nrules, err, sizeof err) < 0) {
        cli_error("replay", "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (!(r.tr = open_trace(o.input)))
        return CLI_EXIT_FAIL;
    /* A reader that stops early (`| head`) must not kill the replay before
       the chart is written: EPIPE is handled where stdout is written. */
    signal(SIGPIPE, SIG_IGN);
    r.o = &o;
    r.policy = &policy;
    r.concurrent = ratel_policy_has_leases(&policy);
    r.keys = (o.summary || o.svg_path) ? &keys : NULL;

    status = CLI_EXIT_FAIL;
    /* Open the chart's file first: fail before the work, not after it. */
    if (o.svg_path && !(svg = fopen(o.svg_path, "w"))) {
        cli_error("replay", "--svg: cannot create '%s': %s", o.svg_path,
                  strerror(errno));
        goto done;
    }
    mopts.max_bytes = o.memory;
    mopts.shards = 0;
    if ((rc = ratel_store_memory_new(&r.store, &mopts)) < 0) {
        cli_error("replay", "creating the memory store: %s",
                  ratel_strerror(rc));
        goto done;
    }
    if (o.svg_path) {
        r.chart = &chart;
        if ((status = chart_init(&chart, &policy, o.memory)) != 0)
            goto done;
    }

    status = run(&r);
    if (status == CLI_EXIT_OK) {
        status = finish(&r, svg);
        svg = NULL;
    }

done:
    if (svg) {
        fclose(svg);
        remove(o.svg_path);
    }
    if (r.chart)
        chart_free(&chart);
    release_queue_free(&r.releases);
    keys_free(&keys);
    ratel_store_free(r.store);
    if (r.tr->fp != stdin)
        fclose(r.tr->fp);
    free(r.tr);
    return status;
}
