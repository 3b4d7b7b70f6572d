/*
 * replay.c - `ratel replay`: a traffic trace through one policy with
 * simulated time.
 *
 * Every `--rule` joins ONE policy, applied to each key all-or-nothing, on
 * the embedded memory store; the clock is the trace's: now_us = t_ms *
 * 1000. The trace streams: a plain replay holds nothing per request or per
 * key beyond the store (bounded by --memory); --summary adds one record
 * per key; --svg adds the chart's buckets and per-key window queues.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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
          "  t_ms key [cost]\n"
          "t_ms is a non-negative integer in milliseconds (any origin: 0 or "
          "Unix time),\n"
          "key any word, cost a whole number >= 1 (default 1). Blank lines "
          "and lines\n"
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
          "\n"
          "Options:\n"
          "  -r, --rule RULE      add RULE to the policy (required; up to 8)\n"
          "  -s, --summary        print per-key totals instead of one line "
          "per request\n"
          "      --svg FILE       also draw FILE, an SVG chart of what each "
          "algorithm\n"
          "                       (sliding, fixed, approx, gcra) would have "
          "done with\n"
          "                       these limits and periods\n"
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

/* Prints the --summary table: header, one line per key, overall line. */
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
}

/*
 * Explains an ECOST: which rule the cost can never fit. The core says
 * only that it is too large; the message names the line and the rule.
 */
static void cost_error(const trace_t *tr, const ratel_policy_t *policy,
                       uint64_t cost)
{
    for (uint32_t i = 0; i < policy->nrules; i++) {
        const ratel_rule_t *r = &policy->rules[i];
        uint64_t cap = ratel_rule_capacity(r);
        if (cost > cap) {
            char text[64];
            ratel_rule_format(r, text, sizeof text);
            cli_error("replay",
                      "%s:%llu: cost %" PRIu64 " is more than rule "
                      "%s can ever admit (%" PRIu64 ")",
                      tr->name, tr->line, cost, text, cap);
            return;
        }
    }
    cli_error("replay", "%s:%llu: cost %" PRIu64 ": %s", tr->name, tr->line,
              cost, ratel_strerror(RATEL_ECOST));
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

/* Runs the replay loop; returns an exit status. */
static int run(const replay_options_t *o, const ratel_policy_t *policy,
               ratel_store_t *store, trace_t *tr, chart_t *chart,
               key_table_t *keys)
{
    ratel_request_t request = RATEL_REQUEST_INIT;
    trace_item_t item = {0};
    char err[512];
    int rc;

    while ((rc = trace_next(tr, &item, err, sizeof err)) > 0) {
        ratel_decision_t d;
        key_record_t *rec = NULL;

        request.cost = item.cost;
        rc = ratel_store_acquire(store, item.key, item.keylen, policy,
                                 item.t_ms * 1000, &request, &d);
        if (rc == RATEL_ECOST) {
            cost_error(tr, policy, item.cost);
            return CLI_EXIT_USAGE;
        }
        if (rc < 0) {
            cli_error("replay", "%s:%llu: %s", tr->name, tr->line,
                      ratel_strerror(rc));
            return CLI_EXIT_FAIL;
        }
        if (keys) {
            rec = keys_get(keys, item.key, item.keylen);
            rec->requests++;
            if (d.allowed) {
                rec->allowed++;
                rec->permits += item.cost;
            } else {
                rec->denied++;
            }
        }
        if (!o->summary)
            printf("%" PRId64 "\t%s\t%d\t%" PRId64 "\t%" PRId64 "\n", item.t_ms,
                   item.key, d.allowed ? 1 : 0, d.remaining, d.retry_after_ms);
        if (chart && (rc = chart_add(chart, rec, &item)) != 0)
            return rc;
    }
    if (rc < 0) {
        cli_error("replay", "%s", err);
        return rc == -1 ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
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

int cli_replay(int argc, char **argv)
{
    replay_options_t o;
    ratel_policy_t policy;
    ratel_memory_options_t mopts;
    ratel_store_t *store = NULL;
    key_table_t keys = {0};
    chart_t chart;
    int have_chart = 0, help, status, rc;
    FILE *svg = NULL;
    trace_t *tr = NULL;
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

    tr = cli_check_alloc(calloc(1, sizeof *tr));
    if (!o.input || strcmp(o.input, "-") == 0) {
        tr->fp = stdin;
        tr->name = "<stdin>";
    } else {
        tr->fp = fopen(o.input, "r");
        tr->name = o.input;
        if (!tr->fp) {
            cli_error("replay", "cannot open '%s': %s", o.input,
                      strerror(errno));
            free(tr);
            return CLI_EXIT_FAIL;
        }
    }

    status = CLI_EXIT_FAIL;
    /* Open the chart's file first: fail before the work, not after it. */
    if (o.svg_path && !(svg = fopen(o.svg_path, "w"))) {
        cli_error("replay", "--svg: cannot create '%s': %s", o.svg_path,
                  strerror(errno));
        goto done;
    }
    mopts.max_bytes = o.memory;
    mopts.shards = 0;
    if ((rc = ratel_store_memory_new(&store, &mopts)) < 0) {
        cli_error("replay", "creating the memory store: %s",
                  ratel_strerror(rc));
        goto done;
    }
    if (o.svg_path) {
        have_chart = 1;
        if ((status = chart_init(&chart, &policy, o.memory)) != 0)
            goto done;
    }

    status = run(&o, &policy, store, tr, have_chart ? &chart : NULL,
                 (o.summary || have_chart) ? &keys : NULL);
    if (status == CLI_EXIT_OK) {
        if (o.summary)
            print_summary(&keys);
        warn_evictions(store, "policy's");
        if (have_chart) {
            chart.keys = keys.nrecords;
            for (int a = 0; a < CHART_NALGOS; a++)
                warn_evictions(chart.stores[a],
                               ratel_algo_name((ratel_algo_t)a));
            status = write_svg(&chart, svg, o.svg_path,
                               o.input ? o.input : "standard input");
            svg = NULL;
        }
    }

done:
    if (svg) {
        fclose(svg);
        remove(o.svg_path);
    }
    if (have_chart)
        chart_free(&chart);
    keys_free(&keys);
    ratel_store_free(store);
    if (tr->fp != stdin)
        fclose(tr->fp);
    free(tr);
    return status;
}
