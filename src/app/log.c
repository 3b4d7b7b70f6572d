/*
 * log.c - the log of rateld and captchad (log.h): one line per event on
 * stderr, key=value (logfmt), written whole under a lock.
 */
#include "app/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void ratel__log(const char *level, const char *msg, const char *fmt, ...)
{
    struct timespec ts;
    struct tm tm;
    char when[32], line[1200];
    va_list ap;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line, sizeof line, "ts=%s.%03ldZ level=%s msg=\"%s\"", when,
                 ts.tv_nsec / 1000000, level, msg);
    if (fmt && fmt[0] && n > 0 && n < (int)sizeof line - 2) {
        line[n++] = ' ';
        va_start(ap, fmt);
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* One line, even if a value held a newline. */
    for (char *c = line; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}
