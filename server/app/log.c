/*
 * log.c - the log of rateld and captchad (log.h): one line per event on
 * stderr, key=value (logfmt), written whole under a lock.
 *
 * The line is formatted here rather than by vsnprintf so that every string
 * value is escaped on its way in, whoever the caller: a value a client
 * sent (a URI, a header) can never close a quote and add fields of its
 * own, nor start a line. log.h says which %s is escaped how.
 */
#include "app/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define LINE_BYTES 4096
/* A string value's bytes shown before "...". */
#define VALUE_MAX 256
#define CUT_MARK " truncated=true"
/* What a line may hold before CUT_MARK and the newline. */
#define LINE_ROOM (LINE_BYTES - sizeof CUT_MARK - 2)

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* A line being built. */
typedef struct line_s {
    char text[LINE_BYTES];
    size_t len;
    size_t whole; /* len at the end of the last whole field */
    int full;     /* a piece did not fit: nothing more is added */
} line_t;

static void put(line_t *l, const char *s, size_t n)
{
    if (l->full)
        return;
    if (n > LINE_ROOM - l->len) {
        l->full = 1;
        return;
    }
    memcpy(l->text + l->len, s, n);
    l->len += n;
}

/*
 * Writes s[0..n) as the inside of a quoted value: a quote, a backslash and
 * every byte that is not printable ASCII escaped, so that the value ends
 * exactly where its closing quote is.
 */
static void put_escaped(line_t *l, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* The bytes with a short escape, and their letters. */
    static const char named[] = "\"\\\n\r\t", letters[] = "\"\\nrt";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *k = c ? strchr(named, c) : NULL;
        char e[4] = {'\\', 0, 0, 0};
        if (k) {
            e[1] = letters[k - named];
            put(l, e, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            e[1] = 'x';
            e[2] = hex[c >> 4];
            e[3] = hex[c & 15];
            put(l, e, 4);
        } else {
            put(l, s + i, 1);
        }
    }
}

/* Whether an unquoted value must be quoted: empty, or holding a byte
   that would end it or start another field. */
static int needs_quotes(const char *s, size_t n)
{
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '=' || c == '\\')
            return 1;
    }
    return 0;
}

/*
 * A string argument: escaped inside quotes; right after '=' written as a
 * word or quoted; elsewhere (a splice of fields the program formatted)
 * as it is. One long value (a URI of kilobytes) must not push the other
 * fields out of the line: past VALUE_MAX bytes it is cut, "..." saying so.
 */
static void put_string(line_t *l, const char *s, size_t n, int quoted,
                       char prev)
{
    int cut = n > VALUE_MAX;
    int quote = !quoted && prev == '=' && (cut || needs_quotes(s, n));

    if (cut)
        n = VALUE_MAX;
    if (quote)
        put(l, "\"", 1);
    if (quoted || quote)
        put_escaped(l, s, n);
    else
        put(l, s, n);
    if (cut)
        put(l, "...", 3);
    if (quote)
        put(l, "\"", 1);
}

/* One printf conversion, as read from fmt. */
typedef struct spec_s {
    char text[48];  /* "%...X" for snprintf, '*' replaced by numbers */
    size_t n;       /* its length */
    char length[3]; /* "", "h", "hh", "l", "ll", "z", "j", "t", "L" */
    char conv;      /* the conversion letter */
    int precision;  /* -1: none */
} spec_t;

static void spec_add(spec_t *s, const char *text, size_t n)
{
    if (s->n + n < sizeof s->text) {
        memcpy(s->text + s->n, text, n);
        s->n += n;
        s->text[s->n] = '\0';
    }
}

/* A width or precision at *p: digits, or '*' taken from the arguments. */
static const char *spec_number(spec_t *s, const char *p, va_list *ap, int *out)
{
    char num[16];
    int v = 0;

    if (*p == '*') {
        v = va_arg(*ap, int);
        p++;
    } else {
        while (*p >= '0' && *p <= '9' && v < 100000)
            v = v * 10 + (*p++ - '0');
    }
    spec_add(s, num, (size_t)snprintf(num, sizeof num, "%d", v));
    if (out)
        *out = v;
    return p;
}

/* Reads the conversion at p (after its '%') into *s; returns what follows. */
static const char *spec_read(spec_t *s, const char *p, va_list *ap)
{
    memset(s, 0, sizeof *s);
    s->precision = -1;
    spec_add(s, "%", 1);
    while (*p && strchr("-+ #0", *p))
        spec_add(s, p++, 1);
    if (*p == '*' || (*p >= '1' && *p <= '9'))
        p = spec_number(s, p, ap, NULL);
    if (*p == '.') {
        spec_add(s, p++, 1);
        p = spec_number(s, p, ap, &s->precision);
    }
    while (*p && strchr("hlzjtLq", *p) && strlen(s->length) < 2) {
        s->length[strlen(s->length)] = *p;
        spec_add(s, p++, 1);
    }
    s->conv = *p;
    if (*p)
        spec_add(s, p++, 1);
    return p;
}

/* Formats one argument of C type `type` with the conversion's text. */
#define FORMAT(type)                                                           \
    do {                                                                       \
        type v_ = va_arg(*ap, type);                                           \
        n = snprintf(buf, cap, s->text, v_);                                   \
    } while (0)

/* Whether the conversion's length modifier is `m`. */
#define LENGTH(m) (strcmp(s->length, (m)) == 0)

/*
 * A number (or a pointer) as printf writes it into buf (cap bytes);
 * returns its length. The argument is read with the type its length
 * modifier names, as printf would.
 */
static size_t put_number(const spec_t *s, va_list *ap, char *buf, size_t cap)
{
    int n = 0;

    if (strchr("di", s->conv)) {
        if (LENGTH("l"))
            FORMAT(long);
        else if (LENGTH("ll") || LENGTH("q"))
            FORMAT(long long);
        else if (LENGTH("z"))
            FORMAT(ssize_t);
        else if (LENGTH("j"))
            FORMAT(intmax_t);
        else if (LENGTH("t"))
            FORMAT(ptrdiff_t);
        else
            FORMAT(int);
    } else if (strchr("ouxX", s->conv)) {
        if (LENGTH("l"))
            FORMAT(unsigned long);
        else if (LENGTH("ll") || LENGTH("q"))
            FORMAT(unsigned long long);
        else if (LENGTH("z"))
            FORMAT(size_t);
        else if (LENGTH("j"))
            FORMAT(uintmax_t);
        else if (LENGTH("t"))
            FORMAT(ptrdiff_t);
        else
            FORMAT(unsigned);
    } else if (strchr("eEfFgGaA", s->conv)) {
        if (LENGTH("L"))
            FORMAT(long double);
        else
            FORMAT(double);
    } else if (s->conv == 'p') {
        FORMAT(void *);
    }
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* fmt's fields with their arguments, escaped as log.h says. */
static void put_fields(line_t *l, const char *fmt, va_list *ap)
{
    int quoted = 0;
    char prev = ' ', num[128];
    spec_t s;

    for (const char *p = fmt; *p && !l->full;) {
        if (*p != '%' || p[1] == '%') {
            if (*p == '"')
                quoted = !quoted;
            else if (*p == ' ' && !quoted)
                l->whole = l->len;
            put(l, p, 1);
            prev = *p;
            p += *p == '%' ? 2 : 1;
            continue;
        }
        p = spec_read(&s, p + 1, ap);
        if (s.conv == 's') {
            const char *v = va_arg(*ap, const char *);
            if (!v)
                v = "(null)";
            put_string(l, v,
                       s.precision >= 0 ? strnlen(v, (size_t)s.precision)
                                        : strlen(v),
                       quoted, prev);
        } else if (s.conv == 'c') {
            char c = (char)va_arg(*ap, int);
            put_string(l, &c, 1, quoted, prev);
        } else if (s.conv && strchr("diouxXeEfFgGaAp", s.conv)) {
            put(l, num, put_number(&s, ap, num, sizeof num));
        } else {
            put(l, s.text, s.n); /* not a conversion log.h supports */
        }
        prev = 'v';
    }
    if (!l->full && !quoted)
        l->whole = l->len;
}

void ratel__log(const char *level, const char *msg, const char *fmt, ...)
{
    static line_t empty;
    line_t line = empty;
    struct timespec ts;
    struct tm tm;
    char when[64];
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    put(&line, when, strlen(when));
    snprintf(when, sizeof when, ".%03ldZ level=", ts.tv_nsec / 1000000);
    put(&line, when, strlen(when));
    put(&line, level, strlen(level));
    put(&line, " msg=\"", 6);
    put_escaped(&line, msg, strlen(msg));
    put(&line, "\"", 1);
    line.whole = line.len;
    if (fmt && fmt[0]) {
        put(&line, " ", 1);
        va_start(ap, fmt);
        put_fields(&line, fmt, &ap);
        va_end(ap);
    }
    if (line.full) {
        line.len = line.whole;
        memcpy(line.text + line.len, CUT_MARK, sizeof CUT_MARK - 1);
        line.len += sizeof CUT_MARK - 1;
    }
    /* One line, even if a spliced piece held a newline. */
    for (size_t i = 0; i < line.len; i++)
        if (line.text[i] == '\n' || line.text[i] == '\r')
            line.text[i] = ' ';
    line.text[line.len++] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line.text, 1, line.len, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}

int ratel__log_budget_take(ratel__log_budget_t *b, int64_t now_us,
                           uint64_t *not_logged)
{
    if (b->logged_us && now_us - b->logged_us < RATEL__LOG_BUDGET_US) {
        b->quiet++;
        return 0;
    }
    *not_logged = b->quiet;
    b->quiet = 0;
    b->logged_us = now_us ? now_us : 1;
    return 1;
}
