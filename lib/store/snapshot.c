/*
 * snapshot.c - the memory store's snapshot file (snapshot.h has its
 * format): CRC32C, the atomic writer, the parser that takes a file whole
 * or not at all, and the thread that writes it every interval.
 *
 * Why CRC32C: a checksum is there to tell a file damaged on disk or cut
 * short from a good one, not to resist an attacker (whoever can write the
 * file can write a matching checksum). CRC32C detects every burst error up
 * to 32 bits and is the one ext4, Btrfs, iSCSI and SCTP use, with a
 * published check value (RFC 3720: "123456789" gives 0xe3069283) that a
 * reader in any language can test against. Written here in ~30 lines
 * (slicing by 8, a few GB/s), it adds no library to libratel's links,
 * which the nginx module and ratel.pc's users would all have to carry.
 */
#include "store/snapshot.h"
#include "store/health.h"

#include "ratel.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- CRC32C */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
                              crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t ratel__crc32c(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;

    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                             (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
              crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* ------------------------------------------------------ little-endian */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
    return get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---------------------------------------------------------------- writer */

#define WRITER_BUFFER 65536u

struct ratel__snapshot_writer_s {
    int fd;
    int failed;     /* an errno of a write, 0 while all went well */
    size_t used;    /* bytes in buf */
    uint64_t body;  /* body bytes so far */
    uint64_t count; /* records so far */
    uint32_t crc;   /* of the body so far */
    char *path, *tmp;
    uint8_t buf[WRITER_BUFFER];
};

/* write() all of it, through interruptions; 0 or an errno. */
static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void flush(ratel__snapshot_writer_t *w)
{
    if (!w->failed && w->used > 0)
        w->failed = write_all(w->fd, w->buf, w->used);
    w->used = 0;
}

/* The directory part of `path` ("." for a bare name), in out. */
static void dir_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

int ratel__snapshot_writer_open(ratel__snapshot_writer_t **out,
                                const char *path, char *why, size_t whylen)
{
    ratel__snapshot_writer_t *w = calloc(1, sizeof *w);
    size_t n = strlen(path) + sizeof ".tmp-XXXXXX";

    *out = NULL;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(n))) {
        if (w)
            free(w->path);
        free(w);
        snprintf(why, whylen, "snapshot %s: out of memory", path);
        return RATEL_ENOMEM;
    }
    snprintf(w->tmp, n, "%s.tmp-XXXXXX", path);
    w->fd = mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) {
        snprintf(why, whylen, "snapshot %s: cannot create %s: %s", path, w->tmp,
                 strerror(errno));
        free(w->tmp);
        free(w->path);
        free(w);
        return RATEL_EIO;
    }
    (void)fchmod(w->fd, 0600);
    /* The header's place; written last, when its counts are known. */
    w->used = RATEL__SNAPSHOT_HEADER;
    *out = w;
    return 0;
}

/* Appends `len` body bytes. */
static void body_put(ratel__snapshot_writer_t *w, const void *data, size_t len)
{
    const uint8_t *p = data;

    w->crc = ratel__crc32c(w->crc, p, len);
    w->body += len;
    while (len > 0) {
        size_t room = WRITER_BUFFER - w->used, k = len < room ? len : room;
        memcpy(w->buf + w->used, p, k);
        w->used += k;
        p += k;
        len -= k;
        if (w->used == WRITER_BUFFER)
            flush(w);
    }
}

int ratel__snapshot_writer_add(ratel__snapshot_writer_t *w, const void *key,
                               size_t keylen, const void *state, size_t len,
                               int64_t expire_at_us)
{
    uint8_t head[RATEL__SNAPSHOT_RECORD];

    if (keylen == 0 || keylen > RATEL_MEMORY_KEY_MAX || len == 0 ||
        len > UINT16_MAX)
        return RATEL_EINVAL;
    put16(head, (uint16_t)keylen);
    put16(head + 2, (uint16_t)len);
    put64(head + 4, (uint64_t)expire_at_us);
    body_put(w, head, sizeof head);
    body_put(w, key, keylen);
    body_put(w, state, len);
    w->count++;
    return w->failed ? RATEL_EIO : 0;
}

void ratel__snapshot_writer_abort(ratel__snapshot_writer_t *w)
{
    if (!w)
        return;
    close(w->fd);
    unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    free(w);
}

/* The header for what `w` wrote. */
static void header_make(const ratel__snapshot_writer_t *w, int64_t at,
                        uint8_t *h)
{
    memcpy(h, RATEL__SNAPSHOT_MAGIC, 8);
    put32(h + 8, RATEL__SNAPSHOT_VERSION);
    put32(h + 12, RATEL__SNAPSHOT_HEADER);
    put64(h + 16, (uint64_t)at);
    put64(h + 24, w->count);
    put64(h + 32, w->body);
    put32(h + 40, w->crc);
    put32(h + 44, ratel__crc32c(0, h, 44));
}

/* fsync of the directory holding `path`: the rename is then on disk. */
static int sync_dir(const char *path)
{
    char dir[4096];
    int fd, rc = 0;

    dir_of(path, dir, sizeof dir);
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = errno;
    close(fd);
    return rc;
}

int ratel__snapshot_writer_commit(ratel__snapshot_writer_t *w,
                                  int64_t written_at_us, size_t *bytes,
                                  char *why, size_t whylen)
{
    uint8_t h[RATEL__SNAPSHOT_HEADER];
    const char *step = "write";
    int err;

    flush(w);
    header_make(w, written_at_us, h);
    err = w->failed;
    if (!err && pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        err = errno ? errno : EIO;
    if (!err && fsync(w->fd) != 0)
        step = "fsync", err = errno;
    if (!err && rename(w->tmp, w->path) != 0)
        step = "rename", err = errno;
    if (!err) {
        *bytes = RATEL__SNAPSHOT_HEADER + w->body;
        err = sync_dir(w->path);
        step = "fsync the directory of";
        /* Renamed: nothing to remove, whatever the directory's fsync. */
        free(w->tmp);
        w->tmp = NULL;
    }
    if (err)
        snprintf(why, whylen, "snapshot %s: cannot %s %s: %s", w->path, step,
                 w->tmp ? w->tmp : w->path, strerror(err));
    close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    free(w);
    return err ? RATEL_EIO : 0;
}

/* ---------------------------------------------------------------- parser */

/* Checks the header of a `len`-byte file; the body's bytes in *body. */
static int header_check(const uint8_t *buf, size_t len, uint64_t *count,
                        char *why, size_t whylen)
{
    uint64_t body;

    if (len < 8 || memcmp(buf, RATEL__SNAPSHOT_MAGIC, 8) != 0) {
        if (len < 8 && memcmp(buf, RATEL__SNAPSHOT_MAGIC, len) == 0)
            snprintf(why, whylen,
                     "truncated: %zu bytes, shorter than the %u-byte header",
                     len, RATEL__SNAPSHOT_HEADER);
        else
            snprintf(why, whylen,
                     "not a ratel snapshot (it does not start with %s)",
                     RATEL__SNAPSHOT_MAGIC);
        return RATEL_ECORRUPT;
    }
    if (len >= 12 && get32(buf + 8) != RATEL__SNAPSHOT_VERSION) {
        snprintf(why, whylen,
                 "snapshot format version %u; this ratel reads version %u",
                 get32(buf + 8), RATEL__SNAPSHOT_VERSION);
        return RATEL_EVERSION;
    }
    if (len < RATEL__SNAPSHOT_HEADER) {
        snprintf(why, whylen,
                 "truncated: %zu bytes, shorter than the %u-byte header", len,
                 RATEL__SNAPSHOT_HEADER);
        return RATEL_ECORRUPT;
    }
    if (get32(buf + 44) != ratel__crc32c(0, buf, 44) ||
        get32(buf + 12) != RATEL__SNAPSHOT_HEADER) {
        snprintf(why, whylen, "the header's checksum does not match: corrupt");
        return RATEL_ECORRUPT;
    }
    body = get64(buf + 32);
    if (body != len - RATEL__SNAPSHOT_HEADER) {
        snprintf(why, whylen,
                 "%s: the header says %llu bytes follow it, the file has %zu",
                 body > len - RATEL__SNAPSHOT_HEADER ? "truncated" : "corrupt",
                 (unsigned long long)body, len - RATEL__SNAPSHOT_HEADER);
        return RATEL_ECORRUPT;
    }
    if (get32(buf + 40) !=
        ratel__crc32c(0, buf + RATEL__SNAPSHOT_HEADER, (size_t)body)) {
        snprintf(why, whylen,
                 "the body's checksum (CRC32C) does not match: corrupt");
        return RATEL_ECORRUPT;
    }
    *count = get64(buf + 24);
    return 0;
}

/*
 * Walks the records of a checked file: each is checked, and handed to fn
 * when fn is not NULL. 0, RATEL_ECORRUPT with why, or fn's nonzero.
 */
static int records_walk(const uint8_t *buf, size_t len, uint64_t count,
                        ratel__snapshot_record_fn fn, void *ud, char *why,
                        size_t whylen)
{
    size_t at = RATEL__SNAPSHOT_HEADER;
    uint64_t i;

    for (i = 0; at < len; i++) {
        size_t keylen, slen;
        const uint8_t *p = buf + at;
        int rc;

        if (len - at < RATEL__SNAPSHOT_RECORD) {
            snprintf(why, whylen, "record %llu at byte %zu is cut short",
                     (unsigned long long)i, at);
            return RATEL_ECORRUPT;
        }
        keylen = get16(p);
        slen = get16(p + 2);
        if (keylen == 0 || keylen > RATEL_MEMORY_KEY_MAX || slen == 0 ||
            len - at - RATEL__SNAPSHOT_RECORD < keylen + slen) {
            snprintf(why, whylen,
                     "record %llu at byte %zu: a key of %zu bytes and a state "
                     "of %zu do not fit (keys 1..%u bytes, states 1..65535)",
                     (unsigned long long)i, at, keylen, slen,
                     RATEL_MEMORY_KEY_MAX);
            return RATEL_ECORRUPT;
        }
        p += RATEL__SNAPSHOT_RECORD;
        if (ratel_state_validate(p + keylen, slen) != 0) {
            snprintf(why, whylen,
                     "record %llu at byte %zu: its state is not a ratel state "
                     "this version reads (docs/state-format.md)",
                     (unsigned long long)i, at);
            return RATEL_ECORRUPT;
        }
        if (fn && (rc = fn(ud, p, keylen, p + keylen, slen,
                           (int64_t)get64(buf + at + 4))) != 0)
            return rc;
        at += RATEL__SNAPSHOT_RECORD + keylen + slen;
    }
    if (i != count) {
        snprintf(why, whylen,
                 "the header counts %llu records, the body has %llu",
                 (unsigned long long)count, (unsigned long long)i);
        return RATEL_ECORRUPT;
    }
    return 0;
}

int ratel__snapshot_parse(const uint8_t *buf, size_t len,
                          ratel__snapshot_record_fn fn, void *ud, char *why,
                          size_t whylen)
{
    uint64_t count;
    int rc = header_check(buf, len, &count, why, whylen);

    if (rc == 0)
        rc = records_walk(buf, len, count, NULL, NULL, why, whylen);
    if (rc == 0 && fn)
        rc = records_walk(buf, len, count, fn, ud, why, whylen);
    return rc;
}

/* The whole file at `fd` in *out (malloc'd, *len bytes); 0 or an errno. */
static int read_whole(int fd, uint8_t **out, size_t *len)
{
    struct stat st;
    size_t cap, n = 0;
    uint8_t *buf;

    if (fstat(fd, &st) != 0)
        return errno;
    if (!S_ISREG(st.st_mode))
        return EINVAL;
    cap = (size_t)st.st_size + 1;
    if (!(buf = malloc(cap)))
        return ENOMEM;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            return err;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == cap) { /* it grew meanwhile: take what is there */
            uint8_t *more = realloc(buf, cap *= 2);
            if (!more) {
                free(buf);
                return ENOMEM;
            }
            buf = more;
        }
    }
    *out = buf;
    *len = n;
    return 0;
}

int ratel__snapshot_load(const char *path, ratel__snapshot_record_fn fn,
                         void *ud, int *found, char *why, size_t whylen)
{
    char problem[400] = "";
    uint8_t *buf = NULL;
    size_t len = 0;
    int fd, err, rc;

    *found = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0; /* a first start */
    if (fd < 0 || (err = read_whole(fd, &buf, &len)) != 0) {
        err = fd < 0 ? errno : err;
        if (fd >= 0)
            close(fd);
        snprintf(why, whylen, "snapshot %s: cannot read it: %s", path,
                 err == EINVAL ? "not a regular file" : strerror(err));
        return err == ENOMEM ? RATEL_ENOMEM : RATEL_EIO;
    }
    close(fd);
    *found = 1;
    rc = ratel__snapshot_parse(buf, len, fn, ud, problem, sizeof problem);
    if (rc != 0)
        snprintf(why, whylen, "snapshot %s: %s", path,
                 problem[0] ? problem : ratel_strerror(rc));
    free(buf);
    return rc;
}

int ratel__snapshot_check_path(const char *path, char *why, size_t whylen)
{
    char dir[4096];
    struct stat st;
    ratel__snapshot_writer_t *w;
    int fd;

    if (!path[0]) {
        snprintf(why, whylen, "snapshot: the path is empty");
        return RATEL_EINVAL;
    }
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0) {
        snprintf(why, whylen, "snapshot %s: its directory %s: %s", path, dir,
                 errno == ENOENT ? "does not exist" : strerror(errno));
        return RATEL_EINVAL;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "snapshot %s: %s is not a directory", path, dir);
        return RATEL_EINVAL;
    }
    /* A file made and removed: the one test of "can write there". */
    if (ratel__snapshot_writer_open(&w, path, why, whylen) != 0)
        return RATEL_EINVAL;
    ratel__snapshot_writer_abort(w);
    if (stat(path, &st) != 0)
        return 0; /* no snapshot yet: a first start */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (!S_ISREG(st.st_mode) || fd < 0) {
        snprintf(why, whylen, "snapshot %s: cannot read it: %s", path,
                 fd >= 0 ? "not a regular file" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return RATEL_EINVAL;
    }
    close(fd);
    return 0;
}

/* ------------------------------------------------------ the writer thread */

struct ratel__snapshotter_s {
    _Atomic int changed;        /* set by every decision, cleared by writes */
    pthread_mutex_t write_lock; /* one write at a time */
    pthread_mutex_t lock;       /* stop and cond */
    pthread_cond_t cond;
    int stop;
    int failed; /* the last write failed: the next one is due regardless */
    pthread_t thread;
    uint32_t interval_ms;
    ratel__snapshot_collect_fn collect;
    void *store;
    char *path;
    ratel__snapshot_stats_t stats; /* under write_lock */
    char errstr[600];              /* under write_lock */
    /* The store's health: a warning while writes fail (the store still
       decides; a crash would lose more than an interval). */
    ratel_health_t health;
    int warning; /* the health's flag for this source */
};

static uint64_t monotonic_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One write, under write_lock: collect, commit, count. */
static int write_once(ratel__snapshotter_t *s, char *why, size_t whylen)
{
    ratel__snapshot_writer_t *w;
    uint64_t start = monotonic_ns(), lock_ns = 0;
    size_t bytes = 0;
    int rc;

    atomic_store(&s->changed, 0);
    rc = ratel__snapshot_writer_open(&w, s->path, why, whylen);
    if (rc == 0) {
        rc = s->collect(s->store, w, &lock_ns);
        if (rc != 0) {
            snprintf(why, whylen, "snapshot %s: cannot write it: %s", s->path,
                     ratel_strerror(rc));
            ratel__snapshot_writer_abort(w);
        } else {
            rc = ratel__snapshot_writer_commit(w, ratel_clock_now_us(), &bytes,
                                               why, whylen);
        }
    }
    if (rc != 0) {
        atomic_store(&s->changed, 1);
        s->failed = 1;
        s->stats.errors++;
        snprintf(s->errstr, sizeof s->errstr, "%s", why);
        return rc;
    }
    s->failed = 0;
    s->errstr[0] = '\0';
    s->stats.writes++;
    s->stats.bytes = bytes;
    s->stats.write_us = (monotonic_ns() - start) / 1000;
    s->stats.lock_max_us = (lock_ns + 999) / 1000;
    return 0;
}

int ratel__snapshotter_write(ratel__snapshotter_t *s, int force, char *why,
                             size_t whylen)
{
    char ignored[600];
    int rc = 0, tell = 0;

    if (!why || whylen == 0)
        why = ignored, whylen = sizeof ignored;
    why[0] = '\0';
    pthread_mutex_lock(&s->write_lock);
    if (force || s->failed || atomic_load(&s->changed)) {
        rc = write_once(s, why, whylen);
        tell = ratel__health_warn(&s->health, &s->warning, rc != 0, why);
    }
    pthread_mutex_unlock(&s->write_lock);
    if (tell)
        ratel__health_notify(&s->health);
    return rc;
}

void ratel__snapshotter_changed(ratel__snapshotter_t *s)
{
    /* Read first: once set, deciding threads only read the line. */
    if (!atomic_load_explicit(&s->changed, memory_order_relaxed))
        atomic_store_explicit(&s->changed, 1, memory_order_relaxed);
}

/* The thread: a write every interval, until told to stop. */
static void *snapshotter_main(void *arg)
{
    ratel__snapshotter_t *s = arg;
    struct timespec at;

    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += s->interval_ms / 1000;
        at.tv_nsec += (long)(s->interval_ms % 1000) * 1000000;
        if (at.tv_nsec >= 1000000000) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000;
        }
        while (!s->stop &&
               pthread_cond_timedwait(&s->cond, &s->lock, &at) != ETIMEDOUT)
            ;
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->lock);
        ratel__snapshotter_write(s, 0, NULL, 0);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int ratel__snapshotter_start(ratel__snapshotter_t **out, const char *path,
                             uint32_t interval_ms,
                             ratel__snapshot_collect_fn collect, void *store)
{
    ratel__snapshotter_t *s = calloc(1, sizeof *s);
    pthread_condattr_t attr;

    *out = NULL;
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return RATEL_ENOMEM;
    }
    atomic_init(&s->changed, 0);
    s->interval_ms = interval_ms;
    s->collect = collect;
    s->store = store;
    ratel__health_init(&s->health);
    pthread_mutex_init(&s->write_lock, NULL);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&s->thread, NULL, snapshotter_main, s) != 0) {
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->write_lock);
        ratel__health_destroy(&s->health);
        free(s->path);
        free(s);
        return RATEL_EIO;
    }
    *out = s;
    return 0;
}

void ratel__snapshotter_errstr(ratel__snapshotter_t *s, char *buf, size_t len)
{
    pthread_mutex_lock(&s->write_lock);
    snprintf(buf, len, "%s", s->errstr);
    pthread_mutex_unlock(&s->write_lock);
}

void ratel__snapshotter_health(ratel__snapshotter_t *s,
                               ratel_store_health_t *out)
{
    ratel__health_get(&s->health, out);
}

void ratel__snapshotter_watch(ratel__snapshotter_t *s, ratel_store_health_fn fn,
                              void *ud)
{
    ratel__health_watch(&s->health, fn, ud);
}

void ratel__snapshotter_stats(ratel__snapshotter_t *s,
                              ratel__snapshot_stats_t *out)
{
    pthread_mutex_lock(&s->write_lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->write_lock);
}

void ratel__snapshotter_stop(ratel__snapshotter_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    ratel__snapshotter_write(s, 0, NULL, 0);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->write_lock);
    ratel__health_destroy(&s->health);
    free(s->path);
    free(s);
}
