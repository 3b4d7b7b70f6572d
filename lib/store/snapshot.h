/*
 * snapshot.h - the memory store's snapshot file: its format (written and
 * read here, docs/memory-store.md "Snapshots"), its atomic writing and the
 * background thread that writes it every interval.
 *
 * The file: a 48-byte header, then one record per key, all integers
 * little-endian.
 *
 *   header   "RATELSNP" (8 bytes), u32 format version (1), u32 header
 *            bytes (48), i64 written at (us since the Unix epoch), u64
 *            records, u64 body bytes, u32 CRC32C of the body, u32
 *            CRC32C of the header's first 44 bytes
 *   record   u16 key bytes (1..RATEL_MEMORY_KEY_MAX), u16 state bytes
 *            (1..65535), i64 expiry (us since the Unix epoch), the key,
 *            the state blob (docs/state-format.md)
 *
 * Nothing here knows the store's shards: the store hands records to a
 * writer and takes them back from the parser (memory.c).
 */
#ifndef RATEL_STORE_SNAPSHOT_H
#define RATEL_STORE_SNAPSHOT_H

#include "ratel.h"

#include <stddef.h>
#include <stdint.h>

#define RATEL__SNAPSHOT_MAGIC "RATELSNP"
#define RATEL__SNAPSHOT_VERSION 1u
#define RATEL__SNAPSHOT_HEADER 48u
#define RATEL__SNAPSHOT_RECORD 12u /* a record's bytes before its key */
/* The interval's default and range, in ms (the option table's too). */
#define RATEL__SNAPSHOT_INTERVAL_DEFAULT 1000u
#define RATEL__SNAPSHOT_INTERVAL_MIN 10u
#define RATEL__SNAPSHOT_INTERVAL_MAX 3600000u

/* CRC32C (Castagnoli, as iSCSI and ext4 use it) of `len` bytes, continuing
   from `crc` (0 to start). crc32c("123456789") is 0xe3069283. */
uint32_t ratel__crc32c(uint32_t crc, const void *data, size_t len);

/* ------------------------------------------------------------- writing */

typedef struct ratel__snapshot_writer_s ratel__snapshot_writer_t;

/*
 * Opens a temporary file beside `path` (PATH.tmp-XXXXXX, mode 0600) for a
 * new snapshot. Returns 0, or RATEL_EIO / RATEL_ENOMEM with
 * "snapshot PATH: reason" in why.
 */
int ratel__snapshot_writer_open(ratel__snapshot_writer_t **out,
                                const char *path, char *why, size_t whylen);

/* Appends one record (see the top of this file). 0 or RATEL_EIO. */
int ratel__snapshot_writer_add(ratel__snapshot_writer_t *w, const void *key,
                               size_t keylen, const void *state, size_t len,
                               int64_t expire_at_us);

/*
 * Finishes the file: the header with its counts and checksums, fsync,
 * rename over `path`, fsync of the directory, so that `path` is either the
 * old snapshot or the whole new one, whenever the machine stops. Frees `w`
 * whatever happens (a failed file is removed). Returns 0, or RATEL_EIO with
 * "snapshot PATH: reason" in why; *bytes gets the file's size.
 */
int ratel__snapshot_writer_commit(ratel__snapshot_writer_t *w,
                                  int64_t written_at_us, size_t *bytes,
                                  char *why, size_t whylen);

/* Removes the temporary file and frees `w`. NULL is a no-op. */
void ratel__snapshot_writer_abort(ratel__snapshot_writer_t *w);

/* ------------------------------------------------------------- reading */

/* Told each record of a snapshot; nonzero stops the parse (returned). */
typedef int (*ratel__snapshot_record_fn)(void *ud, const uint8_t *key,
                                         size_t keylen, const uint8_t *state,
                                         size_t len, int64_t expire_at_us);

/*
 * Parses a whole snapshot held in memory. Every check runs before the
 * first record is handed to `fn`: a file is taken whole or not at all.
 * Returns 0, RATEL_ECORRUPT (truncated, checksum, a malformed record or
 * state blob) or RATEL_EVERSION (another format or version) with the
 * problem in why (not naming a file), or what `fn` returned.
 */
int ratel__snapshot_parse(const uint8_t *buf, size_t len,
                          ratel__snapshot_record_fn fn, void *ud, char *why,
                          size_t whylen);

/*
 * Reads and parses the snapshot `path`. A missing file is no snapshot:
 * 0 with *found 0. Otherwise as ratel__snapshot_parse, or RATEL_EIO when
 * the file cannot be read; why is "snapshot PATH: problem".
 */
int ratel__snapshot_load(const char *path, ratel__snapshot_record_fn fn,
                         void *ud, int *found, char *why, size_t whylen);

/*
 * Whether a snapshot can be kept at `path`: its directory exists and a
 * file can be made there (one is created and removed), and an existing
 * `path` is a regular file this process can read. The one check of a
 * configuration's store.snapshot, whether --check-config, a start or a
 * reload reads it, and of ratel_store_memory_open(). 0, or RATEL_EINVAL
 * with "snapshot PATH: reason" in why.
 */
int ratel__snapshot_check_path(const char *path, char *why, size_t whylen);

/* ------------------------------------------------------ the writer thread */

typedef struct ratel__snapshotter_s ratel__snapshotter_t;

/*
 * Writes the store's records to `w` (the store's part: it copies shard by
 * shard under each shard's lock). Sets *lock_max_ns to the longest time it
 * held a lock. 0 or a RATEL_E* code.
 */
typedef int (*ratel__snapshot_collect_fn)(void *store,
                                          ratel__snapshot_writer_t *w,
                                          uint64_t *lock_max_ns);

/* What the snapshotter did so far (ratel_store_stats_t's snapshot_*). */
typedef struct ratel__snapshot_stats_s {
    uint64_t writes, errors;
    uint64_t bytes;       /* the last file written */
    uint64_t write_us;    /* how long the last write took */
    uint64_t lock_max_us; /* the longest shard lock of the last write */
} ratel__snapshot_stats_t;

/*
 * Starts a thread that writes `path` every `interval_ms` while the store
 * changed (ratel__snapshotter_changed), calling collect(store, ...).
 * Returns 0, or RATEL_ENOMEM / RATEL_EIO (no thread).
 */
int ratel__snapshotter_start(ratel__snapshotter_t **out, const char *path,
                             uint32_t interval_ms,
                             ratel__snapshot_collect_fn collect, void *store);

/* Tells the snapshotter the store changed: cheap, for every decision. */
void ratel__snapshotter_changed(ratel__snapshotter_t *s);

/*
 * Writes a snapshot now (skipped when nothing changed since the last
 * one written, unless `force`). 0, or the failure with its reason in why.
 * Serialised with the thread's writes.
 */
int ratel__snapshotter_write(ratel__snapshotter_t *s, int force, char *why,
                             size_t whylen);

/* The last failure's reason ("" when the last write succeeded). */
void ratel__snapshotter_errstr(ratel__snapshotter_t *s, char *buf, size_t len);

void ratel__snapshotter_stats(ratel__snapshotter_t *s,
                              ratel__snapshot_stats_t *out);

/*
 * The store's health as the snapshotter sees it: always up, with a
 * warning (the last failure's reason) from a write that fails until one
 * succeeds; watchers are told when the warning begins and ends.
 */
void ratel__snapshotter_health(ratel__snapshotter_t *s,
                               ratel_store_health_t *out);
void ratel__snapshotter_watch(ratel__snapshotter_t *s, ratel_store_health_fn fn,
                              void *ud);

/*
 * Stops the thread and writes a last snapshot when the store changed
 * since the last one (a graceful stop loses nothing), then frees `s`.
 * The store must no longer be used by other threads. NULL is a no-op.
 */
void ratel__snapshotter_stop(ratel__snapshotter_t *s);

#endif /* RATEL_STORE_SNAPSHOT_H */
