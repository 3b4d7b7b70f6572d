/*
 * log_budget.c - what keeps rateld's log readable under a flood: a line
 * about a client's request (an auth request it did not decide, a shadow
 * denial, an Envoy domain it does not know) is paid from a budget of one
 * line per kind per 10 s on each worker (so is a connection the HTTP
 * server refused at accept, per limit). The line written says how many
 * were not (`not_logged=N`); the counts still held back when rateld stops
 * are written then, so no event goes uncounted. The metrics count every
 * event; the log shows that it happens and what it looks like.
 *
 * A budget belongs to one worker and only its thread touches it: no lock.
 * The budget itself is the one captchad uses too (app/log.h); this file
 * says which kinds rateld has and writes what is left at the stop.
 */
#include "rateld/rateld.h"

int rateld_log_budget_take(rateld_worker_t *w, rateld_log_kind_t kind,
                           int64_t now_us, unsigned long long *not_logged)
{
    uint64_t quiet = 0;
    int take = ratel__log_budget_take(&w->log_budget[kind], now_us, &quiet);

    *not_logged = quiet;
    return take;
}

void rateld_refused(void *ud, unsigned thread, ratel_http_refusal_t why,
                    const char *client)
{
    rateld_t *d = ud;
    unsigned long long not_logged = 0;

    rateld_metrics_refused(d->metrics, thread, (int)why);
    if (thread < d->threads &&
        rateld_log_budget_take(&d->workers[thread], RATELD_LOG_REFUSED + why,
                               ratel_clock_now_us(), &not_logged))
        ratel__log("warn", "connection refused",
                   "limit=%s client=%s not_logged=%llu",
                   ratel_http_refusal_name(why), client, not_logged);
}

/* What each kind's lines say (msg=), for the lines written at the stop. */
static const char *kind_msg(rateld_log_kind_t kind)
{
    if (kind == RATELD_LOG_SHADOW_DENY)
        return "shadow deny";
    if (kind == RATELD_LOG_UNKNOWN_DOMAIN)
        return "envoy: unknown domain";
    if (kind >= RATELD_LOG_REFUSED)
        return "connection refused";
    return "auth request undecided";
}

void rateld_log_budgets_drain(rateld_t *d)
{
    for (unsigned t = 0; d->workers && t < d->threads; t++) {
        for (int k = 0; k < RATELD_LOG_KINDS; k++) {
            ratel__log_budget_t *b = &d->workers[t].log_budget[k];
            if (b->quiet == 0)
                continue;
            if (k < RATELD_UNDECIDED_REASONS)
                ratel__log("info", kind_msg(k), "reason=%s not_logged=%llu",
                           rateld_undecided_name((rateld_undecided_t)k),
                           (unsigned long long)b->quiet);
            else if (k >= RATELD_LOG_REFUSED)
                ratel__log("info", kind_msg(k), "limit=%s not_logged=%llu",
                           ratel_http_refusal_name(
                               (ratel_http_refusal_t)(k - RATELD_LOG_REFUSED)),
                           (unsigned long long)b->quiet);
            else
                ratel__log("info", kind_msg(k), "not_logged=%llu",
                           (unsigned long long)b->quiet);
            b->quiet = 0;
        }
    }
}
