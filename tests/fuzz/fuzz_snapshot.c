/*
 * fuzz_snapshot.c - the memory store's snapshot parser
 * (lib/store/snapshot.c, ratel__snapshot_parse) on arbitrary files.
 *
 * Input layout: the first byte picks the mode, the rest is the data.
 *
 *   even   the data is a whole file, as read from disk
 *   odd    the data is a body: a header with the right magic, version,
 *          lengths and checksums is put in front (its record count is
 *          byte 1 of the input mod 8, or the body's true count when that
 *          byte is 0xff), so that inputs reach the records' own checks
 *
 * Invariants (a violation aborts):
 *   - the parse returns 0, RATEL_ECORRUPT or RATEL_EVERSION; a failure
 *     comes with a one-line printable reason; the result is the same with
 *     and without a record callback;
 *   - a file taken hands over exactly the header's count of records, in
 *     file order, each with a key of 1..RATEL_MEMORY_KEY_MAX bytes inside
 *     the input and a state blob that ratel_state_validate accepts, and
 *     nothing is handed over from a file refused;
 *   - a file the writer's format rebuilds from the records handed over is
 *     byte for byte the body that was taken.
 */
#include "ratel.h"
#include "store/snapshot.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_snapshot: %s:%d: invariant broken: %s\n",    \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

typedef struct seen_s {
    const uint8_t *lo, *hi; /* the input's bytes */
    uint64_t records;
    uint8_t *rebuilt; /* the records again, in the file's encoding */
    size_t used;
} seen_t;

static void put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int on_record(void *ud, const uint8_t *key, size_t keylen,
                     const uint8_t *state, size_t len, int64_t expire_at_us)
{
    seen_t *s = ud;

    ASSERT(keylen >= 1 && keylen <= RATEL_MEMORY_KEY_MAX);
    ASSERT(len >= 1 && len <= UINT16_MAX);
    ASSERT(key >= s->lo && key + keylen <= s->hi);
    ASSERT(state >= s->lo && state + len <= s->hi);
    ASSERT(ratel_state_validate(state, len) == 0);
    put(s->rebuilt + s->used, keylen, 2);
    put(s->rebuilt + s->used + 2, len, 2);
    put(s->rebuilt + s->used + 4, (uint64_t)expire_at_us, 8);
    memcpy(s->rebuilt + s->used + RATEL__SNAPSHOT_RECORD, key, keylen);
    memcpy(s->rebuilt + s->used + RATEL__SNAPSHOT_RECORD + keylen, state, len);
    s->used += RATEL__SNAPSHOT_RECORD + keylen + len;
    s->records++;
    return 0;
}

/* The records in a body, counted as the writer lays them out. */
static uint64_t count_records(const uint8_t *body, size_t len)
{
    uint64_t n = 0;
    size_t at = 0;

    while (len - at >= RATEL__SNAPSHOT_RECORD) {
        at += RATEL__SNAPSHOT_RECORD + (size_t)(body[at] | body[at + 1] << 8) +
              (size_t)(body[at + 2] | body[at + 3] << 8);
        n++;
        if (at > len)
            break;
    }
    return n;
}

/* A header for `body` in front of it, in a new buffer. */
static uint8_t *with_header(const uint8_t *body, size_t len, int count)
{
    uint8_t *f = malloc(RATEL__SNAPSHOT_HEADER + len + 1);

    ASSERT(f);
    memset(f, 0, RATEL__SNAPSHOT_HEADER);
    memcpy(f, RATEL__SNAPSHOT_MAGIC, 8);
    put(f + 8, RATEL__SNAPSHOT_VERSION, 4);
    put(f + 12, RATEL__SNAPSHOT_HEADER, 4);
    put(f + 24, count == 0xff ? count_records(body, len) : (uint64_t)count % 8,
        8);
    put(f + 32, len, 8);
    if (len)
        memcpy(f + RATEL__SNAPSHOT_HEADER, body, len);
    put(f + 40, ratel__crc32c(0, body, len), 4);
    put(f + 44, ratel__crc32c(0, f, 44), 4);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *file = data + 1;
    uint8_t *made = NULL;
    size_t len = size ? size - 1 : 0;
    char why[600] = "", why2[600] = "";
    seen_t seen = {0};
    int rc, rc2;

    if (size >= 2 && (data[0] & 1)) {
        made = with_header(data + 2, size - 2, data[1]);
        file = made;
        len = RATEL__SNAPSHOT_HEADER + size - 2;
    }
    seen.lo = file;
    seen.hi = file + len;
    seen.rebuilt = malloc(len + 1);
    ASSERT(seen.rebuilt);
    rc = ratel__snapshot_parse(file, len, on_record, &seen, why, sizeof why);
    rc2 = ratel__snapshot_parse(file, len, NULL, NULL, why2, sizeof why2);
    ASSERT(rc == rc2);
    ASSERT(rc == 0 || rc == RATEL_ECORRUPT || rc == RATEL_EVERSION);
    if (rc != 0) {
        ASSERT(seen.records == 0);
        ASSERT(why[0] && strcmp(why, why2) == 0);
        for (const char *c = why; *c; c++)
            ASSERT((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
    } else {
        uint64_t count = 0;
        for (int i = 0; i < 8; i++)
            count |= (uint64_t)file[24 + i] << (8 * i);
        ASSERT(seen.records == count);
        ASSERT(seen.used == len - RATEL__SNAPSHOT_HEADER);
        ASSERT(memcmp(seen.rebuilt, file + RATEL__SNAPSHOT_HEADER, seen.used) ==
               0);
    }
    free(seen.rebuilt);
    free(made);
    return 0;
}
