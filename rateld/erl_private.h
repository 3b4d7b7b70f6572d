/*
 * erl_private.h - what the files of rateld's envoyproxy/ratelimit support
 * share (erl.h is the interface): the loaded set, read by erl_load.c (one
 * file) and erl_dir.c (a directory of them), a domain's later files merged
 * into it by erl_merge.c, searched by erl_match.c.
 */
#ifndef RATELD_ERL_PRIVATE_H
#define RATELD_ERL_PRIVATE_H

#include "app/yaml.h"
#include "rateld/erl.h"

#include <stddef.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct erl_node_s {
    char *key; /* NUL-terminated */
    size_t keylen;
    char *value; /* NULL for a descriptor without value */
    size_t valuelen;
    struct erl_node_s *children; /* sorted by (key, has value, value) */
    size_t nchildren;
    size_t *wild; /* indices of children whose value has a '*', in file
                     order */
    size_t nwild;
    long limit;   /* index in rateld_erl_t.limits, or -1 */
    size_t order; /* index in its list, in the file */
    int line;
} erl_node_t;

/*
 * One file of a domain merged from several (envoy: {merge_domain_config:
 * true}): the domain's top-level descriptors number on from file to file
 * (erl_node_t.order), and this file's start at `first`.
 */
typedef struct erl_part_s {
    const char *file; /* owned by rateld_erl_t.files */
    size_t first;
} erl_part_t;

typedef struct erl_domain_s {
    char *name;
    size_t len;
    erl_node_t root;  /* its children are the file's descriptors */
    const char *file; /* the first file naming the domain */
    int line;
    erl_part_t *parts; /* in load order; NULL while one file names it */
    size_t nparts;
} erl_domain_t;

struct rateld_erl_s {
    ratel_algo_t algo;     /* for limits that do not say */
    erl_domain_t *domains; /* sorted by name */
    size_t ndomains, capdomains;
    rateld_erl_limit_t *limits;
    size_t nlimits, caplimits;
    char **files; /* the names of the files added, owned */
    size_t nfiles, capfiles;
    size_t nnodes; /* descriptors, all files */
    int merge;     /* a domain's later files merge into it (ERL's
                      MERGE_DOMAIN_CONFIG), else they are refused */
    int finished;
};

/* Byte order of two strings, the shorter first on a common prefix. */
int rateld_erl__bytes_cmp(const char *a, size_t alen, const char *b,
                          size_t blen);

/*
 * The order of a level's descriptors (erl_load.c sorts by it, erl_match.c
 * searches by it): `node` against (key, value), by key, then the one
 * without value first, then by value. value NULL: without value.
 */
int rateld_erl__node_cmp(const erl_node_t *node, const char *key, size_t keylen,
                         const char *value, size_t valuelen);

/*
 * Indexes a level once its descriptors are read (erl_load.c): sorts them
 * for the binary search, refuses two with the same key and value (naming
 * the later one in the file, `path` the list's), and lists the wildcard
 * ones in file order. 0, or -1 with the message in ctx.
 */
int rateld_erl__index_level(ratel__yaml_ctx_t *ctx, erl_node_t *parent,
                            const char *path);

/* The domain named name[0..len), or NULL (with *at, unless NULL, where it
   would be inserted). */
erl_domain_t *rateld_erl__find_domain(const rateld_erl_t *erl, const char *name,
                                      size_t len, size_t *at);

/*
 * Merges a file just read (`file`, its domain's descriptors in `add`,
 * indexed on their own) into `into`, the same domain from earlier files,
 * as ERL's MERGE_DOMAIN_CONFIG does (erl_merge.c): the top-level lists
 * joined, the file's after the earlier ones (wildcards are tried in that
 * order), nested descriptors left under their own top-level one, and a
 * top-level key and value already in `into` refused, naming both files.
 * 0 with `add` emptied (its descriptors now `into`'s), or -1 with the
 * message in ctx and `into` as before.
 */
int rateld_erl__merge_domain(ratel__yaml_ctx_t *ctx, const char *file,
                             erl_domain_t *into, erl_domain_t *add);

#endif /* RATELD_ERL_PRIVATE_H */
