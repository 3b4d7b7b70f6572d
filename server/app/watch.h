/*
 * watch.h - a daemon's watch over its store's health (rateld and
 * captchad): a thread that keeps the health right while no request comes
 * (a PING every second), and the log lines that report outages,
 * recoveries and warnings, one per change, within a budget.
 *
 * Why a thread of the daemon's and not of the store's: libratel starts no
 * thread behind its user's back (the caller owns every thread, as with
 * hiredis and libuv), and only a program knows whether it needs an answer
 * while idle. The store learns from its requests at no cost (each failed
 * round trip opens its breaker, each success closes it); the thread adds
 * what traffic cannot give: a Redis that fails, or comes back, while
 * nobody asks. Its PING waits for the store's own timeouts, in this thread
 * only: the workers read the state (ratel_store_health()) and never wait.
 *
 * Log budget. A flapping Redis must not flood the log, so lines are paid
 * for from a GCRA bucket of RATEL__WATCH_LOG_RULE (ratel's own core):
 * bursts of 10 lines, then one a minute. A change that finds the bucket
 * empty is not lost: the next line that may be written (the thread wakes
 * for it) reports the state at that time and `changes=N`, the number of
 * changes it stands for.
 */
#ifndef RATEL_APP_WATCH_H
#define RATEL_APP_WATCH_H

#include "ratel.h"

#include <stdint.h>

/* What lines may be written about the store's health. */
#define RATEL__WATCH_LOG_RULE "1/1m:gcra,burst=10"
/* How often the thread PINGs the store, in milliseconds. */
#define RATEL__WATCH_INTERVAL_MS 1000

/* What the log has said so far. Plain data, no I/O, time injected. */
typedef struct ratel__watch_log_s {
    int logged_up;          /* the state the last line gave (1 before any) */
    uint64_t seen;          /* the store's `transitions` at the last look */
    uint64_t unlogged;      /* changes no line has reported yet */
    uint64_t warnings_seen; /* the store's `warnings` at the last line */
    int warning_logged;     /* a warning line is the last said of them */
    int64_t warning_us;     /* when the logged warning began (now_us) */
    ratel_policy_t budget;
    uint8_t state[256]; /* the budget's state blob */
    size_t state_len;
} ratel__watch_log_t;

enum {
    RATEL__WATCH_NONE,
    RATEL__WATCH_DOWN,
    RATEL__WATCH_UP,
    RATEL__WATCH_WARN,     /* a warning began (h->warning says what) */
    RATEL__WATCH_WARN_OVER /* the warnings ended */
};

/* The line a look asks for. */
typedef struct ratel__watch_line_s {
    int what;         /* RATEL__WATCH_NONE, _DOWN or _UP */
    uint64_t changes; /* changes this line stands for (1 normally) */
    int64_t down_ms;  /* _UP: how long the outage lasted; _WARN_OVER: how
                         long since the warning's line */
    int64_t retry_us; /* _NONE with a change unreported: look again at
                         this time (the caller's clock); else 0 */
} ratel__watch_line_t;

/*
 * Starts a log that has said nothing, with `rule` as its budget (NULL:
 * RATEL__WATCH_LOG_RULE). Returns 0, or a RATEL_E* code for a rule that
 * does not parse or whose state would not fit.
 */
int ratel__watch_log_init(ratel__watch_log_t *log, const char *rule);

/*
 * Looks at the store's health `h` at `now_us` (microseconds, the caller's
 * clock, never going backwards) and fills *line with what to write: a
 * line for the current state when it changed since the last line and the
 * budget allows one, else nothing (with when to look again if a change
 * waits for budget).
 */
void ratel__watch_log_look(ratel__watch_log_t *log,
                           const ratel_store_health_t *h, int64_t now_us,
                           ratel__watch_line_t *line);

/*
 * The same for the store's warnings (what fails without stopping
 * decisions, e.g. one Sentinel of three): a RATEL__WATCH_WARN line when
 * one began since the last, RATEL__WATCH_WARN_OVER when they ended, paid
 * from the same budget.
 */
void ratel__watch_warn_look(ratel__watch_log_t *log,
                            const ratel_store_health_t *h, int64_t now_us,
                            ratel__watch_line_t *line);

typedef struct ratel__watch_s ratel__watch_t;

/*
 * Starts the thread that watches `store` (named `name` in the log, e.g.
 * "redis"; both must outlive it): it registers itself with
 * ratel_store_watch_health(), PINGs every RATEL__WATCH_INTERVAL_MS and
 * logs changes with ratel__log(). Returns it, or NULL (logged) when the
 * thread could not start: the daemon then runs without it.
 */
ratel__watch_t *ratel__watch_start(ratel_store_t *store, const char *name);

/*
 * Stops the thread, waiting for a PING in flight (the store's timeouts at
 * most), unregisters it from the store and frees it. Call it only when no
 * other thread uses the store any more. NULL is a no-op.
 */
void ratel__watch_stop(ratel__watch_t *watch);

/*
 * The body of a daemon's /readyz (docs/rateld.md, Readiness), from the
 * store's health as last seen (no I/O: a hung Redis never holds it up):
 * {"ready":..., "store":NAME, "since_ms": ms in this state (0: never
 * changed)} and, when down, "cause" and "error"; "warning" while
 * something fails without stopping decisions. A malloc'd string (free
 * it with free()), *ready set; NULL when out of memory.
 */
char *ratel__ready_body(ratel_store_t *store, const char *name, int *ready);

#endif /* RATEL_APP_WATCH_H */
