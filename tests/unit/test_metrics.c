/*
 * test_metrics.c - rateld's counters and their Prometheus text exposition.
 */
#include "test.h"

#include "rateld/metrics.h"
#include "http/http.h"
#include "ratel.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Whether `text` is valid text format 0.0.4 as far as rateld writes it:
 * every line "# HELP name text", "# TYPE name type" or
 * `name{label="value",...} number`, label values with only \\, \" and \n
 * escapes, and a final newline.
 */
static int valid_exposition(const char *text, size_t len, char *why,
                            size_t whylen)
{
    size_t lineno = 0;
    const char *p = text, *end = text + len;

    if (len == 0 || text[len - 1] != '\n') {
        snprintf(why, whylen, "does not end with a newline");
        return 0;
    }
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *q = p;
        lineno++;
        if (strncmp(p, "# HELP ", 7) == 0 || strncmp(p, "# TYPE ", 7) == 0) {
            p = eol + 1;
            continue;
        }
        if (!(isalpha((unsigned char)*q) || *q == '_' || *q == ':'))
            goto bad;
        while (isalnum((unsigned char)*q) || *q == '_' || *q == ':')
            q++;
        if (*q == '{') {
            q++;
            while (*q != '}') {
                if (!(isalpha((unsigned char)*q) || *q == '_'))
                    goto bad;
                while (isalnum((unsigned char)*q) || *q == '_')
                    q++;
                if (q[0] != '=' || q[1] != '"')
                    goto bad;
                q += 2;
                while (*q != '"') {
                    if (q >= eol)
                        goto bad;
                    if (*q == '\\') {
                        if (q[1] != '\\' && q[1] != '"' && q[1] != 'n')
                            goto bad;
                        q++;
                    }
                    q++;
                }
                q++;
                if (*q == ',')
                    q++;
                else if (*q != '}')
                    goto bad;
            }
            q++;
        }
        if (*q != ' ')
            goto bad;
        q++;
        if (strncmp(q, "+Inf\n", 5) != 0) {
            char *num_end;
            strtod(q, &num_end);
            if (num_end == q || num_end != eol)
                goto bad;
        }
        p = eol + 1;
    }
    return 1;
bad:
    snprintf(why, whylen, "line %zu is not a sample", lineno);
    return 0;
}

/* Renders, checks the syntax, and returns the text (free it). */
static char *render(rateld_metrics_t *m, const ratel_store_stats_t *st)
{
    size_t len = 0;
    char why[64];
    char *text = rateld_metrics_render(m, st, NULL, 0, 0, &len);
    if (!text) {
        ratel_test_fail(__FILE__, __LINE__, "render returned NULL");
        return NULL;
    }
    if (len != strlen(text))
        ratel_test_fail(__FILE__, __LINE__, "len is not strlen(text)");
    if (!valid_exposition(text, len, why, sizeof why))
        ratel_test_fail(__FILE__, __LINE__, why);
    return text;
}

/* Whether `text` holds `line` as a whole line. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    return 0;
}

#define CHECK_LINE(text, line)                                                 \
    do {                                                                       \
        if (!has_line((text), (line)))                                         \
            ratel_test_fail(__FILE__, __LINE__, "missing: " line);             \
    } while (0)

typedef struct worker_arg_s {
    rateld_metrics_t *m;
    unsigned thread;
    int policy;
} worker_arg_t;

static void *count_many(void *arg)
{
    worker_arg_t *a = arg;
    for (int i = 0; i < 10000; i++) {
        rateld_metrics_count(a->m, a->thread, a->policy, RATELD_OUTCOME_ALLOWED,
                             RATEL_SOURCE_STORE, 80);
        if (i % 10 == 0)
            rateld_metrics_count(a->m, a->thread, a->policy,
                                 RATELD_OUTCOME_DENIED, RATEL_SOURCE_CACHE,
                                 2000);
        rateld_metrics_http(a->m, a->thread, i % 10 == 0 ? 429 : 200);
    }
    return NULL;
}

TEST(metrics_two_threads_are_summed)
{
    rateld_metrics_t *m = rateld_metrics_new(2);
    pthread_t th[2];
    worker_arg_t args[2];
    char *text;

    REQUIRE(m != NULL);
    int ping = rateld_metrics_policy(m, "ping");
    CHECK_EQ(ping, 0);
    for (unsigned t = 0; t < 2; t++) {
        args[t].m = m;
        args[t].thread = t;
        args[t].policy = ping;
        REQUIRE(pthread_create(&th[t], NULL, count_many, &args[t]) == 0);
    }
    /* Rendering while the workers count is allowed. */
    free(render(m, NULL));
    for (unsigned t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    text = render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_LINE(text, "ratel_decisions_total{policy=\"ping\",outcome="
                     "\"allowed\",source=\"store\"} 20000");
    CHECK_LINE(text, "ratel_decisions_total{policy=\"ping\",outcome="
                     "\"denied\",source=\"cache\"} 2000");
    CHECK_LINE(text, "ratel_request_duration_seconds_bucket{policy=\"ping\","
                     "le=\"0.0001\"} 20000");
    CHECK_LINE(text, "ratel_request_duration_seconds_bucket{policy=\"ping\","
                     "le=\"0.0025\"} 22000");
    CHECK_LINE(text, "ratel_request_duration_seconds_count{policy=\"ping\"} "
                     "22000");
    CHECK_LINE(text, "ratel_request_duration_seconds_sum{policy=\"ping\"} "
                     "5.600000");
    CHECK_LINE(text, "ratel_http_responses_total{code=\"2xx\"} 18000");
    CHECK_LINE(text, "ratel_http_responses_total{code=\"4xx\"} 2000");
    free(text);
    rateld_metrics_free(m);
}

TEST(metrics_exact_text_small_case)
{
    rateld_metrics_t *m = rateld_metrics_new(1);
    ratel_store_stats_t st;
    ratel_store_health_t health;
    size_t len = 0;

    REQUIRE(m != NULL);
    CHECK_EQ(rateld_metrics_policy(m, "ping"), 0);
    rateld_metrics_count(m, 0, 0, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         40);
    rateld_metrics_count(m, 0, 0, RATELD_OUTCOME_DENIED, RATEL_SOURCE_LOCAL,
                         1000);
    rateld_metrics_http(m, 0, 200);
    rateld_metrics_http(m, 0, 429);
    rateld_metrics_http(m, 0, 99);  /* not a status: not counted */
    rateld_metrics_http(m, 0, 600); /* idem */
    rateld_metrics_refused(m, 0, RATEL_HTTP_REFUSED_PER_CLIENT);
    rateld_metrics_refused(m, 0, RATEL_HTTP_REFUSED_PER_CLIENT);
    rateld_metrics_refused(m, 0, RATEL_HTTP_REFUSALS); /* not a limit */
    rateld_metrics_grpc(m, 0, 0);
    rateld_metrics_grpc(m, 0, 9);
    rateld_metrics_grpc(m, 0, 9);
    rateld_metrics_grpc(m, 0, 17); /* not a gRPC status: not counted */
    rateld_metrics_grpc(m, 0, -1); /* idem */
    rateld_metrics_undecided(m, 0, RATELD_UNDECIDED_MISSING_KEY);
    rateld_metrics_undecided(m, 0, RATELD_UNDECIDED_REASONS); /* ignored */
    rateld_metrics_abandoned(m, 0, RATELD_ENDPOINT_AUTH);
    rateld_metrics_abandoned(m, 0, RATELD_ENDPOINT_RLS);
    rateld_metrics_abandoned(m, 0, RATELD_ENDPOINT_AUTH);
    rateld_metrics_abandoned(m, 0, RATELD_ENDPOINTS); /* ignored */
    memset(&st, 0, sizeof st);
    st.keys = 3;
    st.bytes = 1000;
    st.max_bytes = 2000;
    st.evictions = 1;
    st.expirations = 2;
    st.errors = 4;
    st.fallback_open = 5;
    st.fallback_closed = 6;
    st.fallback_local = 7;
    st.cache_hits = 8;
    st.round_trips = 9;
    st.breaker_open = 1;
    st.snapshot_writes = 10;
    st.snapshot_errors = 11;
    st.snapshot_bytes = 12;
    st.snapshot_write_us = 1500;
    memset(&health, 0, sizeof health);
    health.transitions = 3; /* down, up, down */
    snprintf(health.warning, sizeof health.warning, "snapshot x: full");
    char *text = rateld_metrics_render(m, &st, &health, 2, 1, &len);
    REQUIRE(text != NULL);
    static const char want[] =
        "# HELP ratel_decisions_total Decisions by policy, outcome and the "
        "path that decided.\n"
        "# TYPE ratel_decisions_total counter\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"allowed\","
        "source=\"store\"} 1\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"denied\","
        "source=\"store\"} 0\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"denied\","
        "source=\"local\"} 1\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"shadow_denied\","
        "source=\"store\"} 0\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"rejected\","
        "source=\"store\"} 0\n"
        "ratel_decisions_total{policy=\"ping\",outcome=\"error\","
        "source=\"store\"} 0\n"
        "# HELP ratel_request_duration_seconds Time from a request's arrival "
        "to its answer, by policy.\n"
        "# TYPE ratel_request_duration_seconds histogram\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.00005\"}"
        " 1\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.0001\"}"
        " 1\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.00025\"}"
        " 1\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.0005\"}"
        " 1\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.001\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.0025\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.005\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.01\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.025\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.05\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.1\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.25\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"0.5\"}"
        " 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"1\"} 2\n"
        "ratel_request_duration_seconds_bucket{policy=\"ping\",le=\"+Inf\"}"
        " 2\n"
        "ratel_request_duration_seconds_sum{policy=\"ping\"} 0.001040\n"
        "ratel_request_duration_seconds_count{policy=\"ping\"} 2\n"
        "# HELP ratel_http_responses_total HTTP responses by status class.\n"
        "# TYPE ratel_http_responses_total counter\n"
        "ratel_http_responses_total{code=\"1xx\"} 0\n"
        "ratel_http_responses_total{code=\"2xx\"} 1\n"
        "ratel_http_responses_total{code=\"3xx\"} 0\n"
        "ratel_http_responses_total{code=\"4xx\"} 1\n"
        "ratel_http_responses_total{code=\"5xx\"} 0\n"
        "# HELP ratel_http_connections_refused_total Connections refused with "
        "503 as they were accepted, by the limit that refused them.\n"
        "# TYPE ratel_http_connections_refused_total counter\n"
        "ratel_http_connections_refused_total{limit=\"max_connections\"} 0\n"
        "ratel_http_connections_refused_total{limit=\"max_connections_per_"
        "client\"} 2\n"
        "# HELP ratel_grpc_responses_total gRPC calls answered by rateld "
        "(Envoy's rate limit service, health checks), by status.\n"
        "# TYPE ratel_grpc_responses_total counter\n"
        "ratel_grpc_responses_total{code=\"OK\"} 1\n"
        "ratel_grpc_responses_total{code=\"CANCELLED\"} 0\n"
        "ratel_grpc_responses_total{code=\"UNKNOWN\"} 0\n"
        "ratel_grpc_responses_total{code=\"INVALID_ARGUMENT\"} 0\n"
        "ratel_grpc_responses_total{code=\"DEADLINE_EXCEEDED\"} 0\n"
        "ratel_grpc_responses_total{code=\"NOT_FOUND\"} 0\n"
        "ratel_grpc_responses_total{code=\"ALREADY_EXISTS\"} 0\n"
        "ratel_grpc_responses_total{code=\"PERMISSION_DENIED\"} 0\n"
        "ratel_grpc_responses_total{code=\"RESOURCE_EXHAUSTED\"} 0\n"
        "ratel_grpc_responses_total{code=\"FAILED_PRECONDITION\"} 2\n"
        "ratel_grpc_responses_total{code=\"ABORTED\"} 0\n"
        "ratel_grpc_responses_total{code=\"OUT_OF_RANGE\"} 0\n"
        "ratel_grpc_responses_total{code=\"UNIMPLEMENTED\"} 0\n"
        "ratel_grpc_responses_total{code=\"INTERNAL\"} 0\n"
        "ratel_grpc_responses_total{code=\"UNAVAILABLE\"} 0\n"
        "ratel_grpc_responses_total{code=\"DATA_LOSS\"} 0\n"
        "ratel_grpc_responses_total{code=\"UNAUTHENTICATED\"} 0\n"
        "# HELP ratel_rlqs_streams Envoy rate limit quota (RLQS) streams "
        "open.\n"
        "# TYPE ratel_rlqs_streams gauge\n"
        "ratel_rlqs_streams 0\n"
        "# HELP ratel_rlqs_unmatched_total RLQS bucket_ids no rlqs bucket "
        "matched.\n"
        "# TYPE ratel_rlqs_unmatched_total counter\n"
        "ratel_rlqs_unmatched_total 0\n"
        "# HELP ratel_rlqs_reports_total RLQS usage reports received, by "
        "policy.\n"
        "# TYPE ratel_rlqs_reports_total counter\n"
        "# HELP ratel_rlqs_actions_total RLQS bucket actions sent, by policy "
        "and action.\n"
        "# TYPE ratel_rlqs_actions_total counter\n"
        "# HELP ratel_auth_undecided_total Gateway auth requests not decided "
        "by a route's policies, by reason (answered as auth.unmatched or "
        "4xx).\n"
        "# TYPE ratel_auth_undecided_total counter\n"
        "ratel_auth_undecided_total{reason=\"unidentified\"} 0\n"
        "ratel_auth_undecided_total{reason=\"unmatched\"} 0\n"
        "ratel_auth_undecided_total{reason=\"missing-key\"} 1\n"
        "ratel_auth_undecided_total{reason=\"bad-key\"} 0\n"
        "ratel_auth_undecided_total{reason=\"ambiguous\"} 0\n"
        "ratel_auth_undecided_total{reason=\"bad-uri\"} 0\n"
        "ratel_auth_undecided_total{reason=\"bad-request\"} 0\n"
        "# HELP ratel_abandoned_total Requests not decided because their "
        "client had gone before the decision (a gateway that gave up closed "
        "its connection, Envoy reset its stream); nothing was charged. By "
        "endpoint.\n"
        "# TYPE ratel_abandoned_total counter\n"
        "ratel_abandoned_total{endpoint=\"acquire\"} 0\n"
        "ratel_abandoned_total{endpoint=\"auth\"} 2\n"
        "ratel_abandoned_total{endpoint=\"rls\"} 1\n"
        "ratel_abandoned_total{endpoint=\"report\"} 0\n"
        "# HELP ratel_store_keys Keys the store holds.\n"
        "# TYPE ratel_store_keys gauge\n"
        "ratel_store_keys 3\n"
        "# HELP ratel_store_bytes Memory the store holds, bookkeeping "
        "included.\n"
        "# TYPE ratel_store_bytes gauge\n"
        "ratel_store_bytes 1000\n"
        "# HELP ratel_store_max_bytes The store's configured memory bound.\n"
        "# TYPE ratel_store_max_bytes gauge\n"
        "ratel_store_max_bytes 2000\n"
        "# HELP ratel_store_evictions_total Live keys dropped to stay within "
        "the memory bound.\n"
        "# TYPE ratel_store_evictions_total counter\n"
        "ratel_store_evictions_total 1\n"
        "# HELP ratel_store_expirations_total Idle keys removed at their reset "
        "time.\n"
        "# TYPE ratel_store_expirations_total counter\n"
        "ratel_store_expirations_total 2\n"
        "# HELP ratel_store_errors_total Requests Redis did not decide; the "
        "failure policy did.\n"
        "# TYPE ratel_store_errors_total counter\n"
        "ratel_store_errors_total 4\n"
        "# HELP ratel_store_fallbacks_total Requests Redis did not decide, by "
        "the failure policy that did (open, closed, local).\n"
        "# TYPE ratel_store_fallbacks_total counter\n"
        "ratel_store_fallbacks_total{policy=\"open\"} 5\n"
        "ratel_store_fallbacks_total{policy=\"closed\"} 6\n"
        "ratel_store_fallbacks_total{policy=\"local\"} 7\n"
        "# HELP ratel_store_cache_hits_total Denials answered by the local "
        "deny cache.\n"
        "# TYPE ratel_store_cache_hits_total counter\n"
        "ratel_store_cache_hits_total 8\n"
        "# HELP ratel_store_round_trips_total Pipelines written to Redis and "
        "read back.\n"
        "# TYPE ratel_store_round_trips_total counter\n"
        "ratel_store_round_trips_total 9\n"
        "# HELP ratel_store_breaker_open 1 while Redis is considered down.\n"
        "# TYPE ratel_store_breaker_open gauge\n"
        "ratel_store_breaker_open 1\n"
        "# HELP ratel_store_snapshot_writes_total Snapshots of the memory "
        "store written (store.snapshot).\n"
        "# TYPE ratel_store_snapshot_writes_total counter\n"
        "ratel_store_snapshot_writes_total 10\n"
        "# HELP ratel_store_snapshot_errors_total Snapshot writes that failed "
        "(the previous file kept).\n"
        "# TYPE ratel_store_snapshot_errors_total counter\n"
        "ratel_store_snapshot_errors_total 11\n"
        "# HELP ratel_store_snapshot_bytes Size of the last snapshot written.\n"
        "# TYPE ratel_store_snapshot_bytes gauge\n"
        "ratel_store_snapshot_bytes 12\n"
        "# HELP ratel_store_snapshot_write_seconds How long writing the last "
        "snapshot took.\n"
        "# TYPE ratel_store_snapshot_write_seconds gauge\n"
        "ratel_store_snapshot_write_seconds 0.001500\n"
        "# HELP ratel_store_up 1 while the store answers (from its health, as "
        "/readyz).\n"
        "# TYPE ratel_store_up gauge\n"
        "ratel_store_up 0\n"
        "# HELP ratel_store_health_changes_total Times the store went down or "
        "came back up.\n"
        "# TYPE ratel_store_health_changes_total counter\n"
        "ratel_store_health_changes_total 3\n"
        "# HELP ratel_store_warning 1 while something fails without stopping "
        "decisions (a Sentinel, a snapshot write).\n"
        "# TYPE ratel_store_warning gauge\n"
        "ratel_store_warning 1\n"
        "# HELP ratel_config_reloads_total Configuration reloads that took "
        "effect.\n"
        "# TYPE ratel_config_reloads_total counter\n"
        "ratel_config_reloads_total 2\n"
        "# HELP ratel_config_reload_failures_total Configuration reloads "
        "refused (the old one stayed).\n"
        "# TYPE ratel_config_reload_failures_total counter\n"
        "ratel_config_reload_failures_total 1\n";
    CHECK_EQ(len, strlen(want));
    if (strcmp(text, want) != 0) {
        size_t i = 0;
        while (text[i] && text[i] == want[i])
            i++;
        char msg[200];
        snprintf(msg, sizeof msg, "differs at %zu: \"%.60s\"", i, text + i);
        ratel_test_fail(__FILE__, __LINE__, msg);
    }
    char why[64];
    CHECK(valid_exposition(text, len, why, sizeof why));
    free(text);
    rateld_metrics_free(m);
}

TEST(metrics_label_values_are_escaped)
{
    rateld_metrics_t *m = rateld_metrics_new(1);
    REQUIRE(m != NULL);
    int i = rateld_metrics_policy(m, "we\"ird\\name\nx");
    CHECK_EQ(i, 0);
    rateld_metrics_count(m, 0, i, RATELD_OUTCOME_REJECTED, RATEL_SOURCE_STORE,
                         10);
    char *text = render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_LINE(text, "ratel_decisions_total{policy=\"we\\\"ird\\\\name\\nx\","
                     "outcome=\"rejected\",source=\"store\"} 1");
    CHECK_LINE(text, "ratel_request_duration_seconds_count{policy="
                     "\"we\\\"ird\\\\name\\nx\"} 1");
    free(text);
    rateld_metrics_free(m);
}

TEST(metrics_registration_is_stable)
{
    rateld_metrics_t *m = rateld_metrics_new(1);
    REQUIRE(m != NULL);
    int a = rateld_metrics_policy(m, "alpha");
    int b = rateld_metrics_policy(m, "beta");
    CHECK_EQ(a, 0);
    CHECK_EQ(b, 1);
    rateld_metrics_count(m, 0, a, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         1);
    /* A reload registers the same names again: same counters. */
    CHECK_EQ(rateld_metrics_policy(m, "beta"), b);
    CHECK_EQ(rateld_metrics_policy(m, "alpha"), a);
    CHECK_EQ(rateld_metrics_policy(m, "gamma"), 2);
    rateld_metrics_count(m, 0, a, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         1);
    char *text = render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_LINE(text, "ratel_decisions_total{policy=\"alpha\",outcome="
                     "\"allowed\",source=\"store\"} 2");
    CHECK_LINE(text, "ratel_decisions_total{policy=\"beta\",outcome="
                     "\"allowed\",source=\"store\"} 0");
    CHECK_LINE(text, "ratel_decisions_total{policy=\"gamma\",outcome="
                     "\"allowed\",source=\"store\"} 0");
    /* "alpha" is written once per series, not once per registration. */
    CHECK(strstr(strstr(text, "policy=\"alpha\",outcome=\"allowed\"") + 1,
                 "policy=\"alpha\",outcome=\"allowed\"") == NULL);
    free(text);
    rateld_metrics_free(m);
}

TEST(metrics_table_full_returns_minus_one)
{
    rateld_metrics_t *m = rateld_metrics_new(1);
    char name[32];
    REQUIRE(m != NULL);
    for (int i = 0; i < RATELD_METRICS_POLICIES; i++) {
        snprintf(name, sizeof name, "p%d", i);
        CHECK_EQ(rateld_metrics_policy(m, name), i);
    }
    CHECK_EQ(rateld_metrics_policy(m, "one-too-many"), -1);
    CHECK_EQ(rateld_metrics_policy(m, "p17"), 17);
    /* Counting with -1 (the full table's answer) does nothing. */
    rateld_metrics_count(m, 0, -1, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         1);
    rateld_metrics_count(m, 5, 0, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         1); /* no thread 5 */
    rateld_metrics_count(m, 0, 1023, RATELD_OUTCOME_ALLOWED, 99, 1);
    char *text = render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_LINE(text, "ratel_decisions_total{policy=\"p0\",outcome="
                     "\"allowed\",source=\"store\"} 0");
    /* An unknown source counts as the store. */
    CHECK_LINE(text, "ratel_decisions_total{policy=\"p1023\",outcome="
                     "\"allowed\",source=\"store\"} 1");
    free(text);
    rateld_metrics_free(m);
}

TEST(metrics_histogram_buckets_and_boundaries)
{
    static const struct {
        int64_t us;
        const char *le; /* the smallest bucket that holds it */
    } cases[] = {
        {-3, "0.00005"},    {0, "0.00005"},   {50, "0.00005"},
        {51, "0.0001"},     {100, "0.0001"},  {101, "0.00025"},
        {250, "0.00025"},   {499, "0.0005"},  {1000, "0.001"},
        {1001, "0.0025"},   {2500, "0.0025"}, {5000, "0.005"},
        {9999, "0.01"},     {25000, "0.025"}, {50000, "0.05"},
        {100000, "0.1"},    {250000, "0.25"}, {500000, "0.5"},
        {500001, "1"},      {1000000, "1"},   {1000001, "+Inf"},
        {60000000, "+Inf"},
    };
    static const char *const les[] = {"0.00005", "0.0001", "0.00025", "0.0005",
                                      "0.001",   "0.0025", "0.005",   "0.01",
                                      "0.025",   "0.05",   "0.1",     "0.25",
                                      "0.5",     "1",      "+Inf"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rateld_metrics_t *m = rateld_metrics_new(1);
        REQUIRE(m != NULL);
        rateld_metrics_policy(m, "h");
        rateld_metrics_count(m, 0, 0, RATELD_OUTCOME_ALLOWED,
                             RATEL_SOURCE_STORE, cases[i].us);
        char *text = render(m, NULL);
        REQUIRE(text != NULL);
        /* Cumulative: 0 below the case's bucket, 1 from it on. */
        int reached = 0;
        for (size_t b = 0; b < sizeof les / sizeof les[0]; b++) {
            char line[128];
            reached |= strcmp(les[b], cases[i].le) == 0;
            snprintf(line, sizeof line,
                     "ratel_request_duration_seconds_bucket{policy=\"h\","
                     "le=\"%s\"} %d",
                     les[b], reached);
            if (!has_line(text, line)) {
                char m2[200];
                snprintf(m2, sizeof m2, "%lld us: missing %s",
                         (long long)cases[i].us, line);
                ratel_test_fail(__FILE__, __LINE__, m2);
            }
        }
        free(text);
        rateld_metrics_free(m);
    }
}

TEST(metrics_sum_in_seconds)
{
    rateld_metrics_t *m = rateld_metrics_new(3);
    REQUIRE(m != NULL);
    rateld_metrics_policy(m, "s");
    rateld_metrics_count(m, 0, 0, RATELD_OUTCOME_ALLOWED, RATEL_SOURCE_STORE,
                         1500000);
    rateld_metrics_count(m, 2, 0, RATELD_OUTCOME_ERROR, RATEL_SOURCE_STORE, 7);
    char *text = render(m, NULL);
    REQUIRE(text != NULL);
    CHECK_LINE(text, "ratel_request_duration_seconds_sum{policy=\"s\"} "
                     "1.500007");
    CHECK_LINE(text, "ratel_request_duration_seconds_count{policy=\"s\"} 2");
    CHECK_LINE(text, "ratel_decisions_total{policy=\"s\",outcome=\"error\","
                     "source=\"store\"} 1");
    free(text);
    /* No policies, no store: still a valid exposition. */
    rateld_metrics_t *empty = rateld_metrics_new(1);
    REQUIRE(empty != NULL);
    text = render(empty, NULL);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "ratel_decisions_total{") == NULL);
    CHECK(strstr(text, "ratel_store_keys") == NULL);
    CHECK_LINE(text, "ratel_config_reloads_total 0");
    free(text);
    rateld_metrics_free(empty);
    rateld_metrics_free(m);
    rateld_metrics_free(NULL);
}

RATEL_SUITE(metrics) = {
    {"metrics_two_threads_are_summed", test_metrics_two_threads_are_summed},
    {"metrics_exact_text_small_case", test_metrics_exact_text_small_case},
    {"metrics_label_values_are_escaped", test_metrics_label_values_are_escaped},
    {"metrics_registration_is_stable", test_metrics_registration_is_stable},
    {"metrics_table_full_returns_minus_one",
     test_metrics_table_full_returns_minus_one},
    {"metrics_histogram_buckets_and_boundaries",
     test_metrics_histogram_buckets_and_boundaries},
    {"metrics_sum_in_seconds", test_metrics_sum_in_seconds},
    {0, 0},
};
