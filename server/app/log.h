/*
 * log.h - the log rateld and captchad write: one line per event on stderr,
 * key=value (logfmt), written whole under a lock so that threads never
 * interleave.
 */
#ifndef RATEL_APP_LOG_H
#define RATEL_APP_LOG_H

#include <stdint.h>

/*
 * Writes `ts=... level=LEVEL msg="MSG"` then fmt's key=value pairs (fmt
 * NULL or "" for none) as one line.
 *
 * Every string value is escaped here, so that no value (a URI, a header a
 * client sent) can forge a field or a line, whoever calls: a %s (or %c)
 * inside quotes in fmt (`reason=\"%s\"`) has its quotes, backslashes and
 * bytes that are not printable ASCII written as \" \\ \n \r \t \xNN; a %s
 * right after '=' outside quotes (`ip=%s`) is written as it is when it is
 * a plain word, else quoted and escaped the same way. A %s anywhere else
 * splices text the program itself formatted (more fields) and is written
 * as it is, newlines turned into spaces. Numbers are printf's; a '*'
 * width or precision is taken from the arguments as printf does. A string
 * value longer than 256 bytes is cut and ends with "..."; a line longer
 * than about 4,000 bytes loses its last whole fields and ends with
 * truncated=true, so that it still parses.
 */
void ratel__log(const char *level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A log budget: one line of a kind per RATEL__LOG_BUDGET_US, for lines a
 * client can cause at will (refusals, denials), so that a flood of
 * requests cannot flood the log. Each thread keeps its own budgets, one
 * per kind of line (no lock); zero-initialise one before use.
 */
typedef struct ratel__log_budget_s {
    int64_t logged_us; /* when a line was last written; 0: never */
    uint64_t quiet;    /* lines not written since */
} ratel__log_budget_t;

#define RATEL__LOG_BUDGET_US 10000000 /* one line per 10 s */

/*
 * Whether the caller may write a line now (`now_us`, any clock that does
 * not go back, e.g. ratel_clock_now_us()): yes for the first line and
 * then at most once per RATEL__LOG_BUDGET_US; a line not written is
 * counted. On yes, *not_logged gets how many lines were not written since
 * the last one (log it with the line, e.g. not_logged=%llu) and the count
 * starts again.
 */
int ratel__log_budget_take(ratel__log_budget_t *b, int64_t now_us,
                           uint64_t *not_logged);

#endif /* RATEL_APP_LOG_H */
