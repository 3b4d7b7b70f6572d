/*
 * erl_merge.c - a domain in several envoyproxy/ratelimit files, merged as
 * ERL's MERGE_DOMAIN_CONFIG merges them (erl.h says what that means;
 * erl_load.c reads each file and hands a later file of a known domain
 * here when merging is on).
 */
#include "app/yaml.h"
#include "rateld/erl_private.h"

#include <stdlib.h>
#include <string.h>

/* The file that gave the domain's top-level descriptor `node`. */
static const char *part_file(const erl_domain_t *dom, const erl_node_t *node)
{
    for (size_t k = dom->nparts; k > 0; k--)
        if (dom->parts[k - 1].first <= node->order)
            return dom->parts[k - 1].file;
    return dom->file;
}

/* The top-level descriptor of `dom` with node's key and value, or NULL. */
static const erl_node_t *top_level(const erl_domain_t *dom,
                                   const erl_node_t *node)
{
    size_t lo = 0, hi = dom->root.nchildren;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const erl_node_t *c = &dom->root.children[mid];
        int cmp = rateld_erl__node_cmp(c, node->key, node->keylen, node->value,
                                       node->valuelen);
        if (cmp == 0)
            return c;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/*
 * Refuses a top-level descriptor of the file being read (`add`) that an
 * earlier file of the domain has too: ERL merges the top-level lists only,
 * and refuses the same key and value in two of them (its "duplicate
 * descriptor composite key"), whatever their limits, flags or nested
 * descriptors.
 */
static int merge_conflict(ratel__yaml_ctx_t *ctx, const erl_domain_t *into,
                          const erl_node_t *add)
{
    const erl_node_t *had = top_level(into, add);
    char kq[96], vq[96], dq[96];

    if (!had)
        return 0;
    ratel__yaml_quote(add->key, add->keylen, kq, sizeof kq);
    ratel__yaml_quote(add->value ? add->value : "", add->valuelen, vq,
                      sizeof vq);
    ratel__yaml_quote(into->name, into->len, dq, sizeof dq);
    return ratel__yaml_fail(
        ctx, add->line,
        "descriptors[%zu]: key \"%s\"%s%s%s is also a top-level descriptor "
        "of domain \"%s\" in %s (line %d); merge_domain_config joins the "
        "files' top-level descriptors and never two with the same key and "
        "value (envoyproxy/ratelimit: duplicate descriptor composite key): "
        "keep it, with its nested descriptors, in one of the files",
        add->order, kq, add->value ? " value \"" : " without value",
        add->value ? vq : "", add->value ? "\"" : "", dq, part_file(into, had),
        had->line);
}

int rateld_erl__merge_domain(ratel__yaml_ctx_t *ctx, const char *file,
                             erl_domain_t *into, erl_domain_t *add)
{
    erl_node_t *old = &into->root, joined;
    size_t n = old->nchildren, m = add->root.nchildren;
    erl_part_t *parts;

    for (size_t i = 0; i < m; i++)
        if (merge_conflict(ctx, into, &add->root.children[i]))
            return -1;
    parts = realloc(into->parts, (into->nparts + 2) * sizeof *parts);
    if (!parts)
        return ratel__yaml_fail(ctx, add->line, "out of memory");
    into->parts = parts;
    if (into->nparts == 0)
        parts[into->nparts++] = (erl_part_t){into->file, 0};
    memset(&joined, 0, sizeof joined);
    joined.limit = -1;
    joined.line = old->line;
    joined.nchildren = n + m;
    if (m > 0) {
        joined.children = malloc((n + m) * sizeof *joined.children);
        if (!joined.children)
            return ratel__yaml_fail(ctx, add->line, "out of memory");
        if (n > 0) /* a first file with no descriptors has none */
            memcpy(joined.children, old->children, n * sizeof *old->children);
        for (size_t i = 0; i < m; i++) {
            joined.children[n + i] = add->root.children[i];
            joined.children[n + i].order += n;
        }
        if (rateld_erl__index_level(ctx, &joined, "descriptors")) {
            free(joined.children);
            return -1;
        }
        free(old->children);
        free(old->wild);
        *old = joined;
    }
    parts[into->nparts++] = (erl_part_t){file, n};
    free(add->root.children);
    free(add->root.wild);
    free(add->name);
    memset(add, 0, sizeof *add);
    return 0;
}
