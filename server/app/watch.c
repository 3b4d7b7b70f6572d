/*
 * watch.c - the thread that watches the store's health and the budgeted
 * log of its changes (watch.h says why it is built this way).
 */
#include "app/watch.h"
#include "app/log.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ the log */

int ratel__watch_log_init(ratel__watch_log_t *log, const char *rule)
{
    const char *texts[1] = {rule ? rule : RATEL__WATCH_LOG_RULE};
    int rc;

    memset(log, 0, sizeof *log);
    log->logged_up = 1;
    rc = ratel_policy_parse(&log->budget, texts, 1, NULL, 0);
    if (rc != 0)
        return rc;
    return ratel_policy_state_max(&log->budget) <= sizeof log->state
               ? 0
               : RATEL_ENOBUFS;
}

/* Pays for one line from the budget: 1, or 0 with line->retry_us set
   (out of budget, or a clock out of range: try again later). */
static int budget_take(ratel__watch_log_t *log, int64_t now_us,
                       ratel__watch_line_t *line)
{
    ratel_request_t one = RATEL_REQUEST_INIT;
    ratel_decision_t d;

    if (ratel_policy_acquire(&log->budget, log->state, &log->state_len,
                             sizeof log->state, now_us, &one, &d) == 0 &&
        d.allowed)
        return 1;
    line->retry_us =
        now_us + (d.retry_after_ms > 0 ? d.retry_after_ms : 1000) * 1000;
    return 0;
}

void ratel__watch_log_look(ratel__watch_log_t *log,
                           const ratel_store_health_t *h, int64_t now_us,
                           ratel__watch_line_t *line)
{
    memset(line, 0, sizeof *line);
    if (h->transitions > log->seen)
        log->unlogged += h->transitions - log->seen;
    log->seen = h->transitions;
    if (log->unlogged == 0 || !budget_take(log, now_us, line))
        return;
    line->what = h->up ? RATEL__WATCH_UP : RATEL__WATCH_DOWN;
    line->changes = log->unlogged;
    line->down_ms = h->up ? h->last_outage_ms : 0;
    log->logged_up = h->up;
    log->unlogged = 0;
}

void ratel__watch_warn_look(ratel__watch_log_t *log,
                            const ratel_store_health_t *h, int64_t now_us,
                            ratel__watch_line_t *line)
{
    int began = h->warning[0] && h->warnings != log->warnings_seen,
        over = !h->warning[0] && log->warning_logged;

    memset(line, 0, sizeof *line);
    if ((!began && !over) || !budget_take(log, now_us, line))
        return;
    line->what = began ? RATEL__WATCH_WARN : RATEL__WATCH_WARN_OVER;
    line->changes = 1;
    if (began)
        log->warning_us = now_us;
    else
        line->down_ms = (now_us - log->warning_us) / 1000;
    log->warnings_seen = h->warnings;
    log->warning_logged = began;
}

/* --------------------------------------------------------- the thread */

struct ratel__watch_s {
    ratel_store_t *store;
    const char *name;
    pthread_t tid;
    pthread_mutex_t lock;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int stop, poked;
    ratel__watch_log_t log;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The store's callback: wake the thread (it does the reading and the
   writing; a worker that noticed the change only takes a lock). */
static void poke(void *ud)
{
    ratel__watch_t *w = ud;

    pthread_mutex_lock(&w->lock);
    w->poked = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->lock);
}

/* The cause as a logfmt value's inside: no quote, backslash or newline. */
static void clean(const char *in, char *out, size_t len)
{
    size_t i = 0;

    for (; in[i] && i + 1 < len; i++)
        out[i] = in[i] == '"' || in[i] == '\\' ? '\''
                 : (unsigned char)in[i] < 0x20 ? ' '
                                               : in[i];
    out[i] = '\0';
}

static void write_line(ratel__watch_t *w, const ratel__watch_line_t *line,
                       const ratel_store_health_t *h)
{
    char cause[sizeof h->cause], changes[48] = "";

    if (line->changes > 1)
        snprintf(changes, sizeof changes, " changes=%llu",
                 (unsigned long long)line->changes);
    if (line->what == RATEL__WATCH_DOWN) {
        clean(h->cause, cause, sizeof cause);
        ratel__log("warn", "store down", "store=%s cause=\"%s\"%s", w->name,
                   cause, changes);
    } else if (line->what == RATEL__WATCH_UP) {
        ratel__log("info", "store up", "store=%s down_ms=%lld%s", w->name,
                   (long long)line->down_ms, changes);
    } else if (line->what == RATEL__WATCH_WARN) {
        clean(h->warning, cause, sizeof cause);
        ratel__log("warn", "store warning", "store=%s cause=\"%s\"", w->name,
                   cause);
    } else if (line->what == RATEL__WATCH_WARN_OVER) {
        ratel__log("info", "store warning over", "store=%s warned_ms=%lld",
                   w->name, (long long)line->down_ms);
    }
}

/* Sleeps until poked, stopped or `deadline` (monotonic ms); 0 on stop. */
static int wait_until(ratel__watch_t *w, int64_t deadline)
{
    int go;

    pthread_mutex_lock(&w->lock);
    while (!w->stop && !w->poked && mono_ms() < deadline) {
        struct timespec ts = {(time_t)(deadline / 1000),
                              (long)(deadline % 1000) * 1000000};
        pthread_cond_timedwait(&w->cv, &w->lock, &ts);
    }
    w->poked = 0;
    go = !w->stop;
    pthread_mutex_unlock(&w->lock);
    return go;
}

/*
 * PINGs when due (the store's timeouts bound it; its outcome reaches the
 * health, and pokes, by itself), then looks and logs. Wakes for the next
 * PING, a change, or budget for a line that waits.
 */
static void *watch_main(void *arg)
{
    ratel__watch_t *w = arg;
    int64_t next_ping = mono_ms() + RATEL__WATCH_INTERVAL_MS;
    int64_t deadline = 0; /* look at once: the state may be down already */

    while (wait_until(w, deadline)) {
        ratel_store_health_t h;
        ratel__watch_line_t line;
        int64_t now_us;

        if (mono_ms() >= next_ping) {
            ratel_store_ping(w->store, NULL, 0);
            next_ping = mono_ms() + RATEL__WATCH_INTERVAL_MS;
        }
        ratel_store_health(w->store, &h);
        now_us = ratel_clock_now_us();
        deadline = next_ping;
        for (int warn = 0; warn < 2; warn++) {
            if (warn)
                ratel__watch_warn_look(&w->log, &h, now_us, &line);
            else
                ratel__watch_log_look(&w->log, &h, now_us, &line);
            write_line(w, &line, &h);
            if (line.retry_us > now_us &&
                mono_ms() + (line.retry_us - now_us) / 1000 < deadline)
                deadline = mono_ms() + (line.retry_us - now_us) / 1000;
        }
    }
    return NULL;
}

ratel__watch_t *ratel__watch_start(ratel_store_t *store, const char *name)
{
    ratel__watch_t *w = calloc(1, sizeof *w);
    pthread_condattr_t attr;

    if (!w || ratel__watch_log_init(&w->log, NULL) != 0) {
        ratel__log("error", "cannot watch the store's health",
                   "reason=\"out of memory\"");
        free(w);
        return NULL;
    }
    w->store = store;
    w->name = name;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    ratel_store_watch_health(store, poke, w);
    if (pthread_create(&w->tid, NULL, watch_main, w) != 0) {
        ratel__log("error", "cannot watch the store's health",
                   "reason=\"cannot start a thread\"");
        ratel_store_watch_health(store, NULL, NULL);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

void ratel__watch_stop(ratel__watch_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->tid, NULL);
    ratel_store_watch_health(w->store, NULL, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

char *ratel__ready_body(ratel_store_t *store, const char *name, int *ready)
{
    ratel_store_health_t h;
    cJSON *o = cJSON_CreateObject();
    char *json = NULL, *body = NULL, error[400];
    int64_t age = 0, now = ratel_clock_now_us();

    if (ratel_store_health(store, &h) != 0)
        snprintf(h.cause, sizeof h.cause, "no store");
    if (h.since_us > 0 && now > h.since_us)
        age = (now - h.since_us) / 1000;
    snprintf(error, sizeof error, "store %s not ready: %s", name, h.cause);
    if (o && cJSON_AddBoolToObject(o, "ready", h.up) &&
        cJSON_AddStringToObject(o, "store", name) &&
        cJSON_AddNumberToObject(o, "since_ms", (double)age) &&
        (h.up || (cJSON_AddStringToObject(o, "cause", h.cause) &&
                  cJSON_AddStringToObject(o, "error", error))) &&
        (!h.warning[0] || cJSON_AddStringToObject(o, "warning", h.warning)))
        json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    /* cJSON's allocator may not be malloc: the caller frees with free(). */
    if (json) {
        body = strdup(json);
        cJSON_free(json);
    }
    *ready = h.up;
    return body;
}
