/*
 * config_yaml.h - the YAML half of rateld's configuration, internal to
 * daemon/config.c and daemon/config_yaml.c.
 *
 * libyaml's event parser turns the text into a small tree of mappings,
 * lists and scalars, each node with its 1-based line. Aliases, anchors,
 * tags, a second document and deep nesting are refused while the tree is
 * built; duplicate keys and unknown fields when a mapping is read with
 * rateld__fields(). The typed readers below turn one node into a number,
 * a size, a boolean, a word of a set or a string, and on failure write
 * "FILE:LINE: PATH: reason" and return -1.
 */
#ifndef RATELD_CONFIG_YAML_H
#define RATELD_CONFIG_YAML_H

#include <stddef.h>
#include <stdint.h>

/* Largest configuration file rateld reads (a real one is a few KiB). */
#define RATELD__CONFIG_MAX_BYTES (1024 * 1024)
/* Deepest nesting of mappings and lists (the schema needs 4). */
#define RATELD__DEPTH_MAX 16
/* Most values in one file (4,096 policies of a dozen values each fit):
   bounds the memory a hostile 1 MiB file of "[1,1,1,...]" makes. */
#define RATELD__NODES_MAX 200000

typedef enum rateld__node_type_e {
    RATELD__SCALAR,
    RATELD__LIST,
    RATELD__MAP
} rateld__node_type_t;

typedef struct rateld__node_s {
    rateld__node_type_t type;
    int line;   /* 1-based, where the node starts */
    int quoted; /* scalar: written quoted or as a block (not plain) */
    char *text; /* scalar: its bytes, NUL-terminated */
    size_t len; /* scalar: bytes in text (a quoted "\0" makes NULs) */
    struct rateld__node_s **items; /* list: items; map: key, value, ... */
    size_t n;                      /* entries in items */
    size_t cap;
} rateld__node_t;

/* Where messages go. */
typedef struct rateld__ctx_s {
    const char *name; /* the file, as messages name it */
    char *err;
    size_t errlen;
} rateld__ctx_t;

/*
 * Reads the configuration file at `path` (at most RATELD__CONFIG_MAX_BYTES)
 * into a malloc'd *text of *len bytes. Returns 0, or -1 with "PATH: reason"
 * in err (cannot open or read it, too large, out of memory).
 */
int rateld__read_file(const char *path, char **text, size_t *len, char *err,
                      size_t errlen);

/* Writes "NAME:LINE: " and the formatted text to ctx->err; returns -1. */
int rateld__fail(const rateld__ctx_t *ctx, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Parses `len` bytes of YAML into *root (NULL for a stream without a
 * document). Returns 0, or -1 with a message. Free with rateld__node_free.
 */
int rateld__yaml_load(const rateld__ctx_t *ctx, const char *text, size_t len,
                      rateld__node_t **root);

void rateld__node_free(rateld__node_t *node);

/* A plain "", "~" or "null": YAML's way of saying nothing. */
int rateld__is_null(const rateld__node_t *node);

/*
 * `len` bytes of `text` for a message: printable ASCII as is, '"' and '\'
 * escaped, other bytes as \xNN, cut with "..." to fit `cap`.
 */
void rateld__quote(const char *text, size_t len, char *out, size_t cap);

/* What a node is, for "expected X, got Y": "a list", "\"abc\"", ... */
const char *rateld__describe(const rateld__node_t *node, char *buf, size_t cap);

/* "parent.key" (or "key" at the top), with the key quoted if odd. */
void rateld__join(char *out, size_t cap, const char *parent,
                  const rateld__node_t *key);

/*
 * Reads mapping `node` (at `path`) whose keys must be among the `n`
 * `names`: values[i] becomes the value of names[i], or NULL when absent.
 * Refuses a node that is not a mapping, unknown keys (listing the accepted
 * ones) and keys given twice.
 */
int rateld__fields(const rateld__ctx_t *ctx, const rateld__node_t *node,
                   const char *path, const char *const *names, size_t n,
                   const rateld__node_t **values);

/*
 * The indices of the non-NULL values[0..n) in the order the file gives
 * them (by line; table order within a line) into order; returns how many.
 * Fields are checked in this order so that the first problem reported is
 * the one nearest the top.
 */
size_t rateld__by_line(const rateld__node_t *const *values, size_t n,
                       size_t *order);

/* A whole number written plainly (no quotes), in min..max; 0 is also
   accepted when zero_ok (it means "the default"). */
int rateld__uint(const rateld__ctx_t *ctx, const rateld__node_t *node,
                 const char *path, uint64_t min, uint64_t max, int zero_ok,
                 uint64_t *out);

/* Bytes: a number, or a number with B, KiB, MiB, GiB, TiB (k, K, M, G, T
   are the same powers of 1024), in min..max; 0 as for rateld__uint. */
int rateld__size(const rateld__ctx_t *ctx, const rateld__node_t *node,
                 const char *path, uint64_t min, uint64_t max, int zero_ok,
                 uint64_t *out);

/* true / false (also True, TRUE, False, FALSE). */
int rateld__bool(const rateld__ctx_t *ctx, const rateld__node_t *node,
                 const char *path, int *out);

/* One of `n` words; *out is its index. */
int rateld__word(const rateld__ctx_t *ctx, const rateld__node_t *node,
                 const char *path, const char *const *words, size_t n,
                 int *out);

/*
 * A string of at most cap-1 bytes without control characters, copied
 * NUL-terminated to out. Plain numbers are strings here; nothing (null)
 * is refused.
 */
int rateld__string(const rateld__ctx_t *ctx, const rateld__node_t *node,
                   const char *path, char *out, size_t cap);

/* A list node (refusing anything else), at most `max` items long. */
int rateld__list(const rateld__ctx_t *ctx, const rateld__node_t *node,
                 const char *path, size_t max, const char *what);

/* Whether `s` is "HOST:PORT", "[IPV6]:PORT" or ":PORT" (HOST a name or an
   IPv4 address, PORT 0..65535). */
int rateld__listen_valid(const char *s);

#endif /* RATELD_CONFIG_YAML_H */
