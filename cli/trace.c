/*
 * trace.c - reading a traffic trace, one request per line:
 *
 *   t_ms key [cost [hold_ms]]
 *
 * Fields are separated by spaces or tabs; t_ms is a non-negative integer
 * (milliseconds, any origin), key any run of non-blank bytes, cost a whole
 * number >= 1 (default 1), hold_ms a non-negative integer: how long an
 * admitted request holds its lease of a concurrent rule. Blank lines and lines
 * whose first non-blank character is '#' are skipped; a CR before the newline
 * is ignored.
 *
 * Lines are read into a fixed buffer, so a trace of any length is read in
 * constant memory; a line longer than TRACE_LINE_MAX bytes is an error
 * rather than a reason to grow.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* Largest t_ms: now_us = t_ms * 1000 must stay below RATEL_TIME_MAX_US.
   hold_ms has the same bound, so t_ms + hold_ms cannot overflow. */
#define TRACE_T_MAX_MS ((RATEL_TIME_MAX_US - 1) / 1000)
/* What every message about a malformed line says is expected. */
#define TRACE_EXPECTED "expected 't_ms key [cost [hold_ms]]'"

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/*
 * Splits the NUL-terminated `line` into at most `max` blank-separated
 * fields (NUL-terminating each in place). Returns how many there were,
 * which may exceed `max`; only the first `max` are stored.
 */
static size_t split_fields(char *line, char **field, size_t *flen, size_t max)
{
    size_t n = 0;
    char *p = line;

    for (;;) {
        while (is_blank(*p))
            p++;
        if (*p == '\0')
            return n;
        if (n < max)
            field[n] = p;
        while (*p != '\0' && !is_blank(*p))
            p++;
        if (n < max)
            flen[n] = (size_t)(p - field[n]);
        n++;
        if (*p != '\0')
            *p++ = '\0';
    }
}

/*
 * Parses all of `text` as a decimal number no larger than `max`. Returns
 * 0 on success, -1 when it is not all digits, -2 when it is too large.
 */
static int parse_decimal(const char *text, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (*text == '\0')
        return -1;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (v > (max - (uint64_t)(*p - '0')) / 10)
            return -2;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return 0;
}

/*
 * Writes "NAME:LINE: " and a message into err; the message quotes the
 * offending field, cut to 40 bytes so a binary file cannot flood stderr.
 */
static int trace_fail(const trace_t *tr, char *err, size_t errlen,
                      const char *what, const char *field)
{
    char quoted[48];
    size_t q = 0;

    for (const char *p = field ? field : ""; *p && q < 40; p++)
        quoted[q++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    quoted[q] = '\0';
    if (field)
        snprintf(err, errlen, "%s:%llu: %s \"%s%s\"; " TRACE_EXPECTED, tr->name,
                 tr->line, what, quoted, field[q] ? "..." : "");
    else
        snprintf(err, errlen, "%s:%llu: %s; " TRACE_EXPECTED, tr->name,
                 tr->line, what);
    return -1;
}

/*
 * Parses `field`, the column `name` (t_ms or hold_ms), as milliseconds in
 * [0, TRACE_T_MAX_MS]. Returns 0, or -1 with the message in `err`.
 */
static int parse_ms(const trace_t *tr, const char *name, const char *field,
                    uint64_t *out, char *err, size_t errlen)
{
    char what[64];
    int rc = parse_decimal(field, TRACE_T_MAX_MS, out);

    if (rc == 0)
        return 0;
    if (rc == -1)
        snprintf(what, sizeof what,
                 "%s must be a non-negative integer (milliseconds), not", name);
    else
        snprintf(what, sizeof what,
                 "%s is out of range (at most %" PRId64 "), got", name,
                 (int64_t)TRACE_T_MAX_MS);
    return trace_fail(tr, err, errlen, what, field);
}

/*
 * Parses the `n` fields of one request line into `item` (its key points
 * into the line). Returns 1, or -1 with the message in `err`.
 */
static int parse_fields(const trace_t *tr, char **field, const size_t *flen,
                        size_t n, trace_item_t *item, char *err, size_t errlen)
{
    uint64_t t, cost = 1, hold = 0;
    int rc;

    if (parse_ms(tr, "t_ms", field[0], &t, err, errlen) < 0)
        return -1;
    if (n < 2)
        return trace_fail(tr, err, errlen, "no key after t_ms", NULL);
    if (n > 4)
        return trace_fail(tr, err, errlen, "unexpected fifth field", field[4]);
    if (n >= 3) {
        rc = parse_decimal(field[2], UINT64_MAX, &cost);
        if (rc < 0 || cost == 0)
            return trace_fail(tr, err, errlen,
                              "cost must be a whole number >= 1, not",
                              field[2]);
    }
    if (n == 4 && parse_ms(tr, "hold_ms", field[3], &hold, err, errlen) < 0)
        return -1;
    item->t_ms = (int64_t)t;
    item->key = field[1];
    item->keylen = flen[1];
    item->cost = cost;
    item->hold_ms = n == 4 ? (int64_t)hold : -1;
    return 1;
}

int trace_next(trace_t *tr, trace_item_t *item, char *err, size_t errlen)
{
    for (;;) {
        char *field[5];
        size_t flen[5], n, len;

        if (!fgets(tr->buf, sizeof tr->buf, tr->fp)) {
            if (ferror(tr->fp)) {
                snprintf(err, errlen, "%s: read error: %s", tr->name,
                         strerror(errno));
                return -2;
            }
            return 0;
        }
        tr->line++;
        len = strlen(tr->buf);
        if (len > 0 && tr->buf[len - 1] == '\n')
            tr->buf[--len] = '\0';
        else if (!feof(tr->fp)) {
            snprintf(err, errlen,
                     "%s:%llu: line is longer than %d bytes; " TRACE_EXPECTED,
                     tr->name, tr->line, TRACE_LINE_MAX);
            return -1;
        }
        if (len > 0 && tr->buf[len - 1] == '\r')
            tr->buf[--len] = '\0';

        n = split_fields(tr->buf, field, flen, 5);
        if (n == 0 || field[0][0] == '#')
            continue;
        return parse_fields(tr, field, flen, n, item, err, errlen);
    }
}
