/*
 * tzdb.c - zones of the system's time-zone database, for tz=Area/City.
 *
 * Reads $TZDIR/NAME (default /usr/share/zoneinfo, Debian's tzdata) in the
 * TZif format of RFC 8536: the 64-bit data block of version 2 and later,
 * and its footer, a POSIX TZ string that gives the offsets after the last
 * listed change. The footer's rule is unrolled here through the core's time
 * range, so the core only searches an array (calendar.c).
 *
 * Why our own reader: glibc reads the same files but answers only for the
 * process-wide TZ variable (localtime_r cannot take a zone, and changing TZ
 * under running threads is unsafe); ICU carries its own copy of the rules,
 * which lags the system's tzdata; cctz is C++. The format is a short,
 * stable RFC, and tests check every answer against glibc's localtime_r.
 *
 * Each zone is loaded once per process, under a lock, and kept: the memory
 * is bounded by the number of distinct zones (RATEL__ZONES_MAX, each about
 * 20 KB at most).
 */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define TZIF_MAX_BYTES (1 << 20)
#define TZIF_MAX_TIMES 20000
/* Unrolled through this year: past the core's stored times (2^44 ms). */
#define LAST_YEAR 2560
#define OFFSET_MAX_S (26 * 3600)

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
/* Every zone loaded, freed when the process exits (so leak checkers see
   none); the core's registry points at them until then. */
static ratel_zone_t *loaded[RATEL__ZONES_MAX];
static unsigned nloaded;

static void __attribute__((destructor)) free_zones(void)
{
    for (unsigned i = 0; i < nloaded; i++) {
        free((void *)(uintptr_t)loaded[i]->at);
        free((void *)(uintptr_t)loaded[i]->off);
        free(loaded[i]);
    }
    nloaded = 0;
}

/* A zone being built: changes and offsets as internal.h describes. */
typedef struct build_s {
    int64_t *at;
    int32_t *off; /* cap + 1 */
    uint32_t n, cap;
} build_t;

static int build_add(build_t *b, int64_t at_ms, int32_t off)
{
    if (b->n > 0 && at_ms < b->at[b->n - 1])
        return -1; /* changes must ascend */
    if (b->n > 0 && at_ms == b->at[b->n - 1]) {
        /* Two changes at one instant (a rule of all-year DST): the later
           holds, and may undo the change. */
        b->off[b->n] = off;
        if (b->off[b->n - 1] == off)
            b->n--;
        return 0;
    }
    if (b->off[b->n] == off)
        return 0; /* not a change of offset (only of name or dst flag) */
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 64;
        int64_t *at = realloc(b->at, cap * sizeof *at);
        int32_t *o = at ? realloc(b->off, (cap + 1) * sizeof *o) : NULL;
        if (at)
            b->at = at;
        if (!o)
            return -1;
        b->off = o;
        b->cap = cap;
    }
    b->at[b->n++] = at_ms;
    b->off[b->n] = off;
    return 0;
}

/* ------------------------------------------------------ POSIX TZ strings */

/* A date of a POSIX rule: Jn, n or Mm.w.d, and the time of day (s). */
typedef struct tz_date_s {
    char kind; /* 'J', 'n' or 'M' */
    int n, m, w, d;
    int32_t time_s;
} tz_date_t;

typedef struct tz_rule_s {
    int32_t std_s, dst_s; /* offsets east of UTC */
    int has_dst;
    tz_date_t start, end;
} tz_rule_t;

static int read_int(const char **p, int max, int *out)
{
    int v = 0, digits = 0;
    while (**p >= '0' && **p <= '9' && digits < 4) {
        v = v * 10 + (*(*p)++ - '0');
        digits++;
    }
    if (digits == 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* [+-]hh[:mm[:ss]] in seconds, hours up to max_h. */
static int read_hms(const char **p, int max_h, int32_t *out)
{
    int sign = 1, h, m = 0, s = 0;

    if (**p == '+' || **p == '-')
        sign = *(*p)++ == '-' ? -1 : 1;
    if (read_int(p, max_h, &h) != 0)
        return -1;
    if (**p == ':' && ((*p)++, read_int(p, 59, &m) != 0))
        return -1;
    if (**p == ':' && ((*p)++, read_int(p, 59, &s) != 0))
        return -1;
    *out = sign * (h * 3600 + m * 60 + s);
    return 0;
}

/* A zone abbreviation: three or more letters, or <...>. */
static int read_abbr(const char **p)
{
    const char *s = *p;
    if (*s == '<') {
        while (*++s && *s != '>')
            if (!(*s == '+' || *s == '-' || (*s >= '0' && *s <= '9') ||
                  (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
                return -1;
        if (*s != '>')
            return -1;
        *p = s + 1;
        return 0;
    }
    while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))
        s++;
    if (s - *p < 3)
        return -1;
    *p = s;
    return 0;
}

static int read_date(const char **p, tz_date_t *d)
{
    d->time_s = 7200; /* 02:00 unless given */
    if (**p == 'J') {
        (*p)++;
        d->kind = 'J';
        if (read_int(p, 365, &d->n) != 0 || d->n < 1)
            return -1;
    } else if (**p == 'M') {
        (*p)++;
        d->kind = 'M';
        if (read_int(p, 12, &d->m) != 0 || d->m < 1 || *(*p)++ != '.' ||
            read_int(p, 5, &d->w) != 0 || d->w < 1 || *(*p)++ != '.' ||
            read_int(p, 6, &d->d) != 0)
            return -1;
    } else {
        d->kind = 'n';
        if (read_int(p, 365, &d->n) != 0)
            return -1;
    }
    if (**p == '/') {
        (*p)++;
        return read_hms(p, 167, &d->time_s); /* RFC 8536 allows -167..167 h */
    }
    return 0;
}

/* Parses a footer. 0, or -1 for one this reader does not take. */
static int parse_posix(const char *s, tz_rule_t *r)
{
    int32_t west;

    memset(r, 0, sizeof *r);
    if (read_abbr(&s) != 0 || read_hms(&s, 24, &west) != 0)
        return -1;
    r->std_s = -west;
    if (*s == '\0')
        return 0;
    if (read_abbr(&s) != 0)
        return -1;
    r->has_dst = 1;
    r->dst_s = r->std_s + 3600;
    if (*s != ',' && *s != '\0') {
        if (read_hms(&s, 24, &west) != 0)
            return -1;
        r->dst_s = -west;
    }
    /* Without dates the rule is the implementation's: refuse it. */
    if (*s++ != ',' || read_date(&s, &r->start) != 0 || *s++ != ',' ||
        read_date(&s, &r->end) != 0 || *s != '\0')
        return -1;
    return 0;
}

/* The day (since 1970-01-01) a rule's date falls on in year y. */
static int64_t date_day(const tz_date_t *d, int64_t y)
{
    int64_t jan1 = ratel__days_before_month(y * 12);
    int leap = ratel__days_before_month(y * 12 + 2) -
                   ratel__days_before_month(y * 12 + 1) ==
               29;

    if (d->kind == 'J')
        return jan1 + d->n - 1 + (leap && d->n >= 60);
    if (d->kind == 'n')
        return jan1 + d->n;
    int64_t first = ratel__days_before_month(y * 12 + d->m - 1);
    int64_t next = ratel__days_before_month(y * 12 + d->m);
    int64_t dow = ((first + 4) % 7 + 7) % 7; /* 1970-01-01 was a Thursday */
    int64_t day = first + (d->d - dow + 7) % 7 + 7 * (d->w - 1);
    while (day >= next)
        day -= 7;
    return day;
}

/* Unrolls the footer's changes after the last listed one, through
   LAST_YEAR. */
static int unroll(build_t *b, const tz_rule_t *r, int64_t from_ms)
{
    int64_t y = from_ms < 0 ? 1969 : 1970 + from_ms / 31556952000LL - 1;

    if (!r->has_dst)
        return b->n > 0 && from_ms >= b->at[b->n - 1]
                   ? build_add(b, from_ms + 1, r->std_s)
                   : 0;
    for (; y <= LAST_YEAR; y++) {
        /* DST starts at a standard-time clock reading, ends at a DST one. */
        int64_t on =
            (date_day(&r->start, y) * 86400 + r->start.time_s - r->std_s) *
            1000;
        int64_t off =
            (date_day(&r->end, y) * 86400 + r->end.time_s - r->dst_s) * 1000;
        int64_t first = on < off ? on : off, second = on < off ? off : on;
        if (first > from_ms &&
            build_add(b, first, on < off ? r->dst_s : r->std_s) != 0)
            return -1;
        if (second > from_ms &&
            build_add(b, second, on < off ? r->std_s : r->dst_s) != 0)
            return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- TZif */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* The counts of a TZif header. */
typedef struct tzif_counts_s {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts_t;

static size_t block_size(const tzif_counts_t *c, size_t time_size)
{
    return c->time * (time_size + 1) + c->type * 6 + c->chars +
           c->leap * (time_size + 4) + c->isstd + c->isut;
}

static const char *read_header(const uint8_t *p, size_t n, tzif_counts_t *c)
{
    if (n < 44 || memcmp(p, "TZif", 4) != 0)
        return "not a TZif file";
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    if (c->type < 1 || c->type > 256 || c->time > TZIF_MAX_TIMES ||
        c->chars > 4096 || (c->isut && c->isut != c->type) ||
        (c->isstd && c->isstd != c->type) || c->leap > 1000)
        return "a TZif header out of range";
    if (c->leap)
        return "a zone with leap seconds (right/...), which ratel does not "
               "take";
    return NULL;
}

/* The data block at p (n bytes): the listed changes into b. */
static const char *read_block(const uint8_t *p, size_t n,
                              const tzif_counts_t *c, size_t ts, build_t *b)
{
    const uint8_t *types = p + c->time * ts, *info = types + c->time;

    if (n < block_size(c, ts))
        return "a truncated TZif file";
    for (uint32_t i = 0; i < c->type; i++) {
        int32_t o = (int32_t)be32(info + 6 * i);
        if (o < -OFFSET_MAX_S || o > OFFSET_MAX_S)
            return "an offset beyond 26 hours";
    }
    b->off[0] = (int32_t)be32(info); /* type 0 holds before the first */
    for (uint32_t i = 0; i < c->time; i++) {
        int64_t t = ts == 8 ? be64(p + 8 * i) : (int32_t)be32(p + 4 * i);
        if (types[i] >= c->type)
            return "a TZif type index out of range";
        if (t < -(INT64_C(1) << 40) || t > (INT64_C(1) << 40) ||
            build_add(b, t * 1000, (int32_t)be32(info + 6 * types[i])) != 0)
            return "TZif times out of order or out of range";
    }
    return NULL;
}

/* Parses a whole TZif file into b. NULL, or what is wrong. */
static const char *parse_tzif(const uint8_t *p, size_t n, build_t *b)
{
    tzif_counts_t c;
    const char *err = read_header(p, n, &c);
    size_t skip, v2;
    tz_rule_t rule;
    char footer[256];
    const uint8_t *f, *nl;

    if (err)
        return err;
    if (p[4] < '2')
        return read_block(p + 44, n - 44, &c, 4, b);
    skip = 44 + block_size(&c, 4);
    if (n < skip || (err = read_header(p + skip, n - skip, &c)) != NULL)
        return err ? err : "a truncated TZif file";
    v2 = skip + 44;
    if ((err = read_block(p + v2, n - v2, &c, 8, b)) != NULL)
        return err;
    f = p + v2 + block_size(&c, 8);
    if (f >= p + n || *f != '\n' ||
        !(nl = memchr(f + 1, '\n', (size_t)(p + n - f - 1))) ||
        (size_t)(nl - f - 1) >= sizeof footer)
        return "a TZif footer missing or too long";
    memcpy(footer, f + 1, (size_t)(nl - f - 1));
    footer[nl - f - 1] = '\0';
    if (footer[0] == '\0')
        return NULL; /* the last listed offset holds for ever */
    if (parse_posix(footer, &rule) != 0)
        return "a TZ rule this reader does not take";
    if (unroll(b, &rule, b->n ? b->at[b->n - 1] : INT64_MIN / 2) != 0)
        return "a TZ rule whose changes do not ascend, or out of memory";
    return NULL;
}

/* ------------------------------------------------------------- loading */

/* Reads the whole file into *out (malloc'd). NULL, or what is wrong. */
static const char *read_file(const char *path, uint8_t **out, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf;

    if (!fp)
        return errno == ENOENT ? "unknown time zone" : strerror(errno);
    buf = malloc(TZIF_MAX_BYTES);
    if (!buf) {
        fclose(fp);
        return "out of memory";
    }
    *n = fread(buf, 1, TZIF_MAX_BYTES, fp);
    if (ferror(fp) || !feof(fp)) {
        free(buf);
        fclose(fp);
        return "not a readable zone file";
    }
    fclose(fp);
    *out = buf;
    return NULL;
}

/* Builds and registers the zone `name` from its file. */
static const ratel_zone_t *load(const char *name, char *why, size_t whylen)
{
    const char *dir = getenv("TZDIR"), *err;
    char path[4096];
    uint8_t *data = NULL;
    size_t n = 0;
    build_t b = {NULL, calloc(1, sizeof(int32_t)), 0, 0};
    ratel_zone_t *z = calloc(1, sizeof *z);

    snprintf(path, sizeof path, "%s/%s",
             dir && *dir ? dir : "/usr/share/zoneinfo", name);
    err = !z || !b.off ? "out of memory" : read_file(path, &data, &n);
    if (!err)
        err = parse_tzif(data, n, &b);
    free(data);
    if (!err) {
        snprintf(z->name, sizeof z->name, "%s", name);
        z->id = ratel__zone_id(name, strlen(name));
        z->n = b.n;
        z->at = b.at;
        z->off = b.off;
        if (ratel__zone_register(z) == 0) {
            loaded[nloaded++] = z;
            return z;
        }
        err = "too many zones, or two names with one id";
    }
    snprintf(why, whylen, "tz=%s: %s (%s)", name, err, path);
    free(b.at);
    free(b.off);
    free(z);
    return NULL;
}

const ratel_zone_t *ratel__tzdb_load(const char *name, size_t len, char *why,
                                     size_t whylen)
{
    char nm[RATEL__ZONE_NAME_MAX + 1];
    const ratel_zone_t *z;

    if (len > RATEL__ZONE_NAME_MAX) {
        snprintf(why, whylen, "zone names are at most %d bytes",
                 RATEL__ZONE_NAME_MAX);
        return NULL;
    }
    memcpy(nm, name, len);
    nm[len] = '\0';
    pthread_mutex_lock(&load_lock);
    z = ratel__zone_by_id(ratel__zone_id(nm, len));
    if (z && strcmp(z->name, nm) != 0) {
        snprintf(why, whylen, "tz=%s: its id is another loaded zone's (%s)", nm,
                 z->name);
        z = NULL;
    } else if (!z) {
        z = load(nm, why, whylen);
    }
    pthread_mutex_unlock(&load_lock);
    return z;
}
