/*
 * log.h - the log rateld and captchad write: one line per event on stderr,
 * key=value (logfmt), written whole under a lock so that threads never
 * interleave.
 */
#ifndef RATEL_APP_LOG_H
#define RATEL_APP_LOG_H

/*
 * Writes `ts=... level=LEVEL msg="MSG"` then fmt's key=value pairs (fmt
 * NULL or "" for none) as one line: a newline inside a value becomes a
 * space. Lines longer than about 1,200 bytes are cut.
 */
void ratel__log(const char *level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* RATEL_APP_LOG_H */
