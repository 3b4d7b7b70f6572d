/*
 * yaml.h - the YAML half of a program's configuration, shared by rateld
 * (rateld/config.c) and captchad (captchad/captcha_config.c) so
 * that both read files alike and report problems alike.
 *
 * libyaml's event parser turns the text into a small tree of mappings,
 * lists and scalars, each node with its 1-based line. Aliases, anchors,
 * tags, a second document and deep nesting are refused while the tree is
 * built; duplicate keys and unknown fields when a mapping is read with
 * ratel__yaml_fields(). The typed readers below turn one node into a number,
 * a size, a boolean, a word of a set or a string, and on failure write
 * "FILE:LINE: PATH: reason" and return -1.
 */
#ifndef RATEL_APP_YAML_H
#define RATEL_APP_YAML_H

#include "ratel_internal.h"

#include <stddef.h>
#include <stdint.h>

/* Largest configuration file a program reads (a real one is a few KiB). */
#define RATEL__CONFIG_MAX_BYTES (1024 * 1024)
/* Deepest nesting of mappings and lists (the schema needs 4). */
#define RATEL__YAML_DEPTH_MAX 16
/* The most ratel__yaml_load_nested may allow instead: an
   envoyproxy/ratelimit file nests two per descriptor level (rateld/erl.h). */
#define RATEL__YAML_DEPTH_LIMIT 32
/* Most values in one file (4,096 policies of a dozen values each fit):
   bounds the memory a hostile 1 MiB file of "[1,1,1,...]" makes. */
#define RATEL__YAML_NODES_MAX 200000

/* Most fields one mapping read with ratel__yaml_fields may have. */
#define RATEL__YAML_FIELDS_MAX 32

typedef enum ratel__yaml_type_e {
    RATEL__YAML_SCALAR,
    RATEL__YAML_LIST,
    RATEL__YAML_MAP
} ratel__yaml_type_t;

typedef struct ratel__yaml_node_s {
    ratel__yaml_type_t type;
    int line;   /* 1-based, where the node starts */
    int quoted; /* scalar: written quoted or as a block (not plain) */
    char *text; /* scalar: its bytes, NUL-terminated */
    size_t len; /* scalar: bytes in text (a quoted "\0" makes NULs) */
    struct ratel__yaml_node_s **items; /* list: items; map: key, value, ... */
    size_t n;                          /* entries in items */
    size_t cap;
} ratel__yaml_node_t;

/* Where messages go. */
typedef struct ratel__yaml_ctx_s {
    const char *name; /* the file, as messages name it */
    char *err;
    size_t errlen;
} ratel__yaml_ctx_t;

/*
 * Reads the configuration file at `path` (at most RATEL__CONFIG_MAX_BYTES)
 * into a malloc'd *text of *len bytes. Returns 0, or -1 with "PATH: reason"
 * in err (cannot open or read it, too large, out of memory).
 */
int ratel__config_read_file(const char *path, char **text, size_t *len,
                            char *err, size_t errlen);

/* Writes "NAME:LINE: " and the formatted text to ctx->err; returns -1. */
int ratel__yaml_fail(const ratel__yaml_ctx_t *ctx, int line, const char *fmt,
                     ...) __attribute__((format(printf, 3, 4)));

/*
 * Parses `len` bytes of YAML into *root (NULL for a stream without a
 * document). Returns 0, or -1 with a message. Free with ratel__yaml_free.
 */
int ratel__yaml_load(const ratel__yaml_ctx_t *ctx, const char *text, size_t len,
                     ratel__yaml_node_t **root);

/* The same, with mappings and lists nested up to `depth_max` deep
   (at most RATEL__YAML_DEPTH_LIMIT) instead of RATEL__YAML_DEPTH_MAX. */
int ratel__yaml_load_nested(const ratel__yaml_ctx_t *ctx, const char *text,
                            size_t len, size_t depth_max,
                            ratel__yaml_node_t **root);

void ratel__yaml_free(ratel__yaml_node_t *node);

/* A plain "", "~" or "null": YAML's way of saying nothing. */
int ratel__yaml_is_null(const ratel__yaml_node_t *node);

/*
 * `len` bytes of `text` for a message: printable ASCII as is, '"' and '\'
 * escaped, other bytes as \xNN, cut with "..." to fit `cap`.
 */
void ratel__yaml_quote(const char *text, size_t len, char *out, size_t cap);

/* What a node is, for "expected X, got Y": "a list", "\"abc\"", ... */
const char *ratel__yaml_describe(const ratel__yaml_node_t *node, char *buf,
                                 size_t cap);

/* "parent.key" (or "key" at the top), with the key quoted if odd. */
void ratel__yaml_join(char *out, size_t cap, const char *parent,
                      const ratel__yaml_node_t *key);

/*
 * Reads mapping `node` (at `path`) whose keys must be among the `n`
 * `names`: values[i] becomes the value of names[i], or NULL when absent.
 * Refuses a node that is not a mapping, unknown keys (listing the accepted
 * ones) and keys given twice.
 */
int ratel__yaml_fields(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const char *const *names, size_t n,
                       const ratel__yaml_node_t **values);

/*
 * The indices of the non-NULL values[0..n) in the order the file gives
 * them (by line; table order within a line) into order; returns how many.
 * Fields are checked in this order so that the first problem reported is
 * the one nearest the top.
 */
size_t ratel__yaml_by_line(const ratel__yaml_node_t *const *values, size_t n,
                           size_t *order);

/*
 * Reads `node` (at `path`) as option `opt` of a descriptor table
 * (store/option.h) into the struct at `base`: the option's type, grammar
 * and range, a number not in quotes, a string not null. Returns 0, or -1
 * with "FILE:LINE: PATH: reason".
 */
int ratel__yaml_option(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const ratel__option_t *opt, void *base);

/*
 * Reads mapping `node` (at `path`; "" for the top level) by the n options
 * of `table` into the struct at `base`: a field not in the table is
 * refused with the table's names listed, a field given twice is refused,
 * and fields are read in the file's order (the first problem reported is
 * the one nearest the top). given (NULL, or n entries) receives each
 * option's value node, NULL when absent. Returns 0 or -1 with a message.
 */
int ratel__yaml_options(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        const ratel__option_t *table, size_t n, void *base,
                        const ratel__yaml_node_t **given);

/*
 * Options of one mapping from several tables: each group's options go to
 * its own struct (`base`), or, with base NULL, are values its `read`
 * callback reads (a section inside the mapping: read(ud, i, value) for
 * entry i, returning 0 or -1 with a message). The accepted names are all
 * the groups' entries, in order; given (NULL, or one entry per option of
 * every group, in order) receives the value nodes, NULL when absent.
 * Fields are read in the file's order.
 */
typedef struct ratel__yaml_group_s {
    const ratel__option_t *table;
    size_t n;
    void *base;
    int (*read)(void *ud, size_t i, const ratel__yaml_node_t *value);
    void *ud;
} ratel__yaml_group_t;

int ratel__yaml_groups(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const ratel__yaml_group_t *groups, size_t ngroups,
                       const ratel__yaml_node_t **given);

/* true / false (also True, TRUE, False, FALSE). */
int ratel__yaml_bool(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path,
                     int *out);

/* One of `n` words; *out is its index. */
int ratel__yaml_word(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path,
                     const char *const *words, size_t n, int *out);

/*
 * A string of at most cap-1 bytes without control characters, copied
 * NUL-terminated to out. Plain numbers are strings here; nothing (null)
 * is refused.
 */
int ratel__yaml_string(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       char *out, size_t cap);

/* A list node (refusing anything else), at most `max` items long. */
int ratel__yaml_list(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path,
                     size_t max, const char *what);

#endif /* RATEL_APP_YAML_H */
