/*
 * test_snapshot.c - the memory store's snapshot (lib/store/snapshot.c,
 * memory_snapshot.c): a round trip keeps every decision, keys expired
 * meanwhile are left out, a corrupt, truncated or foreign file is refused
 * with its path and its problem (or skipped when the options say so), a
 * missing one is a first start, the file is 0600 and replaced atomically,
 * and a configuration's store.snapshot is checked as start checks it.
 *
 * Time is injected: keys are charged at instants far from today's clock
 * (2023, which any clock has passed, and 2200, which none has reached),
 * so that what the store's load judges by the wall clock is known.
 */
#include "test.h"

#include "rateld/config.h"
#include "ratel.h"
#include "store/snapshot.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAST_US ((int64_t)1700000000 * 1000000)   /* 2023 */
#define FUTURE_US ((int64_t)7258118400 * 1000000) /* 2200 */

static char dir[64];
static char path[128];

/* A fresh directory and the snapshot path in it. */
static void fresh(void)
{
    snprintf(dir, sizeof dir, "/tmp/ratel-snapshot-XXXXXX");
    if (!mkdtemp(dir))
        dir[0] = '\0';
    snprintf(path, sizeof path, "%s/store.state", dir);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

static int open_store(ratel_store_t **s, int on_bad, char *why, size_t len)
{
    ratel_memory_options_t o = {0, 16};
    ratel_snapshot_options_t snap = {path, 0, on_bad};
    return ratel_store_memory_open(s, &o, &snap, why, len);
}

static void policy(ratel_policy_t *p)
{
    const char *rules[] = {"1/60s", "10/1d"};
    CHECK_EQ(ratel_policy_parse(p, rules, 2, NULL, 0), 0);
}

static int acquire(ratel_store_t *s, const char *key, int64_t at)
{
    ratel_policy_t p;
    ratel_request_t req = {.cost = 1};
    ratel_decision_t d;

    policy(&p);
    CHECK_EQ(ratel_store_acquire(s, key, strlen(key), &p, at, &req, &d), 0);
    return d.allowed;
}

static uint64_t keys_of(ratel_store_t *s)
{
    ratel_store_stats_t st;
    ratel_store_stats(s, &st);
    return st.keys;
}

/* A store at `path` holding `n` keys charged at FUTURE_US, freed (which
   writes the snapshot). */
static void write_store(int n)
{
    ratel_store_t *s = NULL;
    char key[32], why[600];

    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "sms:1390000%04d", i);
        CHECK(acquire(s, key, FUTURE_US));
    }
    ratel_store_free(s);
}

static size_t file_read(const char *p, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(p, "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (f)
        fclose(f);
    return n;
}

static void file_write(const char *p, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(p, "wb");
    if (f) {
        CHECK_EQ(fwrite(buf, 1, len, f), len);
        fclose(f);
    }
}

/* Opening the store at `path` fails with `rc`, why naming the file and
   `problem`. */
static void refused(int rc, const char *problem)
{
    ratel_store_t *s = NULL;
    char why[600] = "";

    CHECK_EQ(open_store(&s, 0, why, sizeof why), rc);
    CHECK(s == NULL);
    if (!strstr(why, path) || !strstr(why, problem))
        fprintf(stderr, "  why: %s\n", why);
    CHECK(strstr(why, path) != NULL);
    CHECK(strstr(why, problem) != NULL);
}

TEST(snapshot_crc32c_check_value)
{
    /* RFC 3720's check value, and the same in pieces. */
    CHECK_EQ(ratel__crc32c(0, "123456789", 9), 0xe3069283u);
    CHECK_EQ(ratel__crc32c(ratel__crc32c(0, "1234", 4), "56789", 5),
             0xe3069283u);
}

TEST(snapshot_round_trip)
{
    ratel_store_t *s = NULL;
    struct stat st;
    char why[600] = "x";

    fresh();
    write_store(50);
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(why[0], '\0');
    CHECK_EQ(keys_of(s), 50);
    /* Each number's minute is spent: denied a second later, as before. */
    CHECK(!acquire(s, "sms:13900000007", FUTURE_US + 1000000));
    CHECK(acquire(s, "sms:13900000007", FUTURE_US + 61000000));
    CHECK(acquire(s, "sms:other", FUTURE_US + 1000000));
    ratel_store_free(s);
    /* Reopened again: the last decisions were written at free. */
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(keys_of(s), 51);
    CHECK(!acquire(s, "sms:13900000007", FUTURE_US + 62000000));
    ratel_store_free(s);
    cleanup();
}

TEST(snapshot_expired_keys_skipped_on_load)
{
    ratel__snapshot_writer_t *w = NULL;
    ratel_store_t *s = NULL, *live = NULL;
    uint8_t state[512];
    size_t len = 0, bytes = 0;
    ratel_policy_t p;
    ratel_request_t req = {.cost = 1};
    ratel_decision_t d;
    char why[600];

    fresh();
    policy(&p);
    REQUIRE(ratel_policy_acquire(&p, state, &len, sizeof state, PAST_US, &req,
                                 &d) == 0);
    REQUIRE(ratel__snapshot_writer_open(&w, path, why, sizeof why) == 0);
    /* Expired in 2023, and one that lives until 2200. */
    CHECK_EQ(ratel__snapshot_writer_add(w, "old", 3, state, len,
                                        PAST_US + 86400000000),
             0);
    CHECK_EQ(ratel__snapshot_writer_add(w, "new", 3, state, len, FUTURE_US), 0);
    REQUIRE(ratel__snapshot_writer_commit(w, PAST_US, &bytes, why,
                                          sizeof why) == 0);
    CHECK_EQ(bytes,
             RATEL__SNAPSHOT_HEADER + 2 * (RATEL__SNAPSHOT_RECORD + 3 + len));
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(keys_of(s), 1);
    ratel_store_free(s);
    /* A store's own write leaves out what expired before it. */
    REQUIRE(open_store(&live, 0, why, sizeof why) == 0);
    CHECK(acquire(live, "gone", PAST_US));
    CHECK_EQ(ratel_store_memory_snapshot(live, why, sizeof why), 0);
    ratel_store_free(live);
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(keys_of(s), 1);
    ratel_store_free(s);
    cleanup();
}

TEST(snapshot_corrupt_byte_refused)
{
    uint8_t buf[65536];
    size_t n;

    fresh();
    write_store(20);
    n = file_read(path, buf, sizeof buf);
    REQUIRE(n > RATEL__SNAPSHOT_HEADER + 100);
    buf[RATEL__SNAPSHOT_HEADER + 77] ^= 0x10; /* a byte of the body */
    file_write(path, buf, n);
    refused(RATEL_ECORRUPT, "checksum");
    buf[RATEL__SNAPSHOT_HEADER + 77] ^= 0x10;
    buf[20] ^= 0x01; /* a byte of the header */
    file_write(path, buf, n);
    refused(RATEL_ECORRUPT, "header's checksum");
    file_write(path, (const uint8_t *)"user=x\n", 7);
    refused(RATEL_ECORRUPT, "not a ratel snapshot");
    cleanup();
}

TEST(snapshot_truncated_refused)
{
    uint8_t buf[65536];
    size_t n;

    fresh();
    write_store(20);
    n = file_read(path, buf, sizeof buf);
    REQUIRE(n > RATEL__SNAPSHOT_HEADER + 1);
    file_write(path, buf, n - 1);
    refused(RATEL_ECORRUPT, "truncated");
    file_write(path, buf, 30);
    refused(RATEL_ECORRUPT, "truncated");
    file_write(path, buf, 0);
    refused(RATEL_ECORRUPT, "truncated: 0 bytes");
    cleanup();
}

TEST(snapshot_other_version_refused)
{
    uint8_t buf[65536];
    size_t n;

    fresh();
    write_store(3);
    n = file_read(path, buf, sizeof buf);
    REQUIRE(n > 12);
    buf[8] = 2; /* format version 2 */
    file_write(path, buf, n);
    refused(RATEL_EVERSION, "format version 2; this ratel reads version 1");
    cleanup();
}

TEST(snapshot_malformed_record_refused)
{
    uint8_t buf[256] = {0};
    uint8_t *r = buf + RATEL__SNAPSHOT_HEADER;
    size_t body = RATEL__SNAPSHOT_RECORD + 2 + 3, n = 0;
    char why[300] = "";

    /* Checksums right, a record whose state is not ratel state. */
    memcpy(buf, RATEL__SNAPSHOT_MAGIC, 8);
    buf[8] = 1;
    buf[12] = RATEL__SNAPSHOT_HEADER;
    buf[24] = 1;
    buf[32] = (uint8_t)body;
    r[0] = 2;
    r[2] = 3;
    r[11] = 0x01;
    memcpy(r + RATEL__SNAPSHOT_RECORD, "k1xyz", 5);
    n = RATEL__SNAPSHOT_HEADER + body;
    {
        uint32_t c = ratel__crc32c(0, r, body);
        for (int i = 0; i < 4; i++)
            buf[40 + i] = (uint8_t)(c >> (8 * i));
        c = ratel__crc32c(0, buf, 44);
        for (int i = 0; i < 4; i++)
            buf[44 + i] = (uint8_t)(c >> (8 * i));
    }
    CHECK_EQ(ratel__snapshot_parse(buf, n, NULL, NULL, why, sizeof why),
             RATEL_ECORRUPT);
    CHECK(strstr(why, "record 0 at byte 48") != NULL);
}

TEST(snapshot_missing_is_empty)
{
    ratel_store_t *s = NULL;
    char why[600] = "x";

    fresh();
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(why[0], '\0');
    CHECK_EQ(keys_of(s), 0);
    /* Nothing changed: nothing is written, not even at free. */
    CHECK_EQ(ratel_store_memory_snapshot(s, why, sizeof why), 0);
    CHECK(access(path, F_OK) != 0);
    ratel_store_free(s);
    CHECK(access(path, F_OK) != 0);
    cleanup();
}

TEST(snapshot_bad_starts_empty_when_told)
{
    ratel_store_t *s = NULL;
    char why[600] = "", bad[160];

    fresh();
    file_write(path, (const uint8_t *)"RATELSNP", 8);
    REQUIRE(open_store(&s, RATEL_BAD_SNAPSHOT_EMPTY, why, sizeof why) == 0);
    CHECK_EQ(keys_of(s), 0);
    CHECK(strstr(why, "truncated") != NULL);
    CHECK(strstr(why, "started empty") != NULL);
    snprintf(bad, sizeof bad, "%s.bad", path);
    CHECK(access(bad, F_OK) == 0);
    CHECK(access(path, F_OK) != 0);
    ratel_store_free(s);
    cleanup();
}

TEST(snapshot_bad_directory_refused)
{
    ratel_store_t *s = NULL;
    char why[600] = "";

    fresh();
    snprintf(path, sizeof path, "%s/missing/store.state", dir);
    CHECK_EQ(open_store(&s, 0, why, sizeof why), RATEL_EINVAL);
    CHECK(strstr(why, "does not exist") != NULL);
    CHECK(strstr(why, path) != NULL);
    cleanup();
}

/* The tmp files left beside the snapshot. */
static int leftovers(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp-", dir);
    return system(cmd) == 0;
}

static void count_notify(void *ud)
{
    (*(int *)ud)++;
}

TEST(snapshot_failed_write_keeps_the_old_one)
{
    uint8_t before[65536], after[65536];
    size_t n, m;
    ratel_store_t *s = NULL;
    struct rlimit old, small;
    ratel_store_health_t h;
    char why[600] = "";
    int rc, told = 0;

    fresh();
    write_store(5);
    n = file_read(path, before, sizeof before);
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    REQUIRE(ratel_store_watch_health(s, count_notify, &told) == 0);
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        acquire(s, key, FUTURE_US);
    }
    /* Files may not grow past 100 bytes: the new one fails half-written. */
    signal(SIGXFSZ, SIG_IGN);
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 100;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    rc = ratel_store_memory_snapshot(s, why, sizeof why);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK_EQ(rc, RATEL_EIO);
    CHECK(strstr(why, path) != NULL);
    m = file_read(path, after, sizeof after);
    CHECK_EQ(m, n);
    CHECK(memcmp(before, after, n) == 0);
    CHECK(!leftovers());
    /* The failure is the store's error, and its health's warning (the
       store still up), until a write succeeds; the watcher is told when
       the warning begins and when it ends. */
    ratel_store_errstr(s, why, sizeof why);
    CHECK(strstr(why, "File too large") != NULL);
    CHECK_EQ(ratel_store_health(s, &h), 0);
    CHECK_EQ(h.up, 1);
    CHECK_EQ(h.transitions, 0);
    CHECK_EQ(h.warnings, 1);
    CHECK(strstr(h.warning, "File too large") != NULL);
    CHECK(strstr(h.warning, path) != NULL);
    CHECK_EQ(told, 1);
    CHECK_EQ(ratel_store_memory_snapshot(s, why, sizeof why), 0);
    ratel_store_errstr(s, why, sizeof why);
    CHECK_EQ(why[0], '\0');
    CHECK_EQ(ratel_store_health(s, &h), 0);
    CHECK_EQ(h.up, 1);
    CHECK_EQ(h.warnings, 1);
    CHECK_EQ(h.warning[0], '\0');
    CHECK_EQ(told, 2);
    /* A write with nothing new to write tells nothing. */
    CHECK_EQ(ratel_store_memory_snapshot(s, why, sizeof why), 0);
    CHECK_EQ(told, 2);
    ratel_store_watch_health(s, NULL, NULL);
    ratel_store_free(s);
    REQUIRE(open_store(&s, 0, why, sizeof why) == 0);
    CHECK_EQ(keys_of(s), 205);
    ratel_store_free(s);
    cleanup();
}

TEST(snapshot_written_every_interval)
{
    ratel_memory_options_t o = {0, 16};
    ratel_snapshot_options_t snap = {NULL, 10, 0};
    ratel_store_t *s = NULL;
    ratel_store_stats_t st;
    struct timespec pause = {0, 10000000};
    char why[600];
    int i;

    fresh();
    snap.path = path;
    REQUIRE(ratel_store_memory_open(&s, &o, &snap, why, sizeof why) == 0);
    CHECK(acquire(s, "k", FUTURE_US));
    /* The writer's thread, not free: wait (5 s at most) for its file. */
    for (i = 0; i < 500 && access(path, F_OK) != 0; i++)
        nanosleep(&pause, NULL);
    CHECK(access(path, F_OK) == 0);
    ratel_store_stats(s, &st);
    CHECK(st.snapshot_writes >= 1 || access(path, F_OK) == 0);
    CHECK_EQ(st.snapshot_errors, 0);
    ratel_store_free(s);
    cleanup();
}

static void write_config(const char *file, const char *store)
{
    FILE *f = fopen(file, "w");
    if (!f)
        return;
    fprintf(f,
            "listen: 127.0.0.1:8080\nstore:\n%s\npolicies:\n  p:\n"
            "    rules: 1/1s\n    key: ip\n",
            store);
    fclose(f);
}

TEST(snapshot_config_checked_as_start_checks)
{
    char file[160], text[400], err[800];
    rateld_config_t *c = NULL;

    fresh();
    snprintf(file, sizeof file, "%s/rateld.yaml", dir);
    snprintf(text, sizeof text,
             "  type: memory\n  snapshot: %s/no/such/dir/r.state", dir);
    write_config(file, text);
    CHECK(rateld_config_load(file, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "store.snapshot: snapshot ") != NULL);
    CHECK(strstr(err, "does not exist") != NULL);
    snprintf(text, sizeof text,
             "  type: memory\n  snapshot: %s\n  snapshot_interval_ms: 5", path);
    write_config(file, text);
    CHECK(rateld_config_load(file, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "store.snapshot_interval_ms") != NULL);
    snprintf(text, sizeof text,
             "  type: redis\n  url: redis://127.0.0.1:1\n  snapshot: %s", path);
    write_config(file, text);
    CHECK(rateld_config_load(file, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "applies to type: memory only") != NULL);
    snprintf(text, sizeof text,
             "  type: memory\n  snapshot: %s\n  on_bad_snapshot: empty", path);
    write_config(file, text);
    REQUIRE(rateld_config_load(file, &c, err, sizeof err) == 0);
    CHECK(strcmp(c->memory.snapshot, path) == 0);
    CHECK_EQ(c->memory.on_bad_snapshot, RATEL_BAD_SNAPSHOT_EMPTY);
    CHECK_EQ(c->memory.snapshot_interval_ms, 0);
    rateld_config_free(c);
    cleanup();
}

RATEL_SUITE(snapshot) = {
    {"snapshot_crc32c_check_value", test_snapshot_crc32c_check_value},
    {"snapshot_round_trip", test_snapshot_round_trip},
    {"snapshot_expired_keys_skipped_on_load",
     test_snapshot_expired_keys_skipped_on_load},
    {"snapshot_corrupt_byte_refused", test_snapshot_corrupt_byte_refused},
    {"snapshot_truncated_refused", test_snapshot_truncated_refused},
    {"snapshot_other_version_refused", test_snapshot_other_version_refused},
    {"snapshot_malformed_record_refused",
     test_snapshot_malformed_record_refused},
    {"snapshot_missing_is_empty", test_snapshot_missing_is_empty},
    {"snapshot_bad_starts_empty_when_told",
     test_snapshot_bad_starts_empty_when_told},
    {"snapshot_bad_directory_refused", test_snapshot_bad_directory_refused},
    {"snapshot_failed_write_keeps_the_old_one",
     test_snapshot_failed_write_keeps_the_old_one},
    {"snapshot_written_every_interval", test_snapshot_written_every_interval},
    {"snapshot_config_checked_as_start_checks",
     test_snapshot_config_checked_as_start_checks},
    {0},
};
