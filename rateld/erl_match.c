/*
 * erl_match.c - envoyproxy/ratelimit's descriptor matching over the loaded
 * set (erl.h; erl_load.c builds it). Descriptors are matched by key and
 * value as two strings; matching allocates nothing: each level's
 * descriptors are sorted by (key, value) for a binary search, and its
 * wildcard values are listed in file order for the scan ERL makes between
 * the exact and key-only tries.
 */
#include "app/yaml.h"
#include "rateld/erl_private.h"

#include <stdlib.h>
#include <string.h>

/* The unit a rule's period equals, for rateld_erl_rule_unit. */
static const struct erl_period_unit_s {
    uint32_t period_ms;
    int number;
} erl_period_units[] = {
    {1000u, 1},     {60000u, 2},     {3600000u, 3},
    {86400000u, 4}, {604800000u, 7}, {2592000000u, 5},
};

/* -------------------------------------------------------- the order */

/* Byte order of two strings, the shorter first on a common prefix. */
int rateld_erl__bytes_cmp(const char *a, size_t alen, const char *b,
                          size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;

    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/*
 * Order of a descriptor against (key, value): by key, then the one
 * without value first, then by value. value NULL: without value.
 */
int rateld_erl__node_cmp(const erl_node_t *node, const char *key, size_t keylen,
                         const char *value, size_t valuelen)
{
    int c = rateld_erl__bytes_cmp(node->key, node->keylen, key, keylen);

    if (c)
        return c;
    if (!node->value || !value)
        return (node->value != NULL) - (value != NULL);
    return rateld_erl__bytes_cmp(node->value, node->valuelen, value, valuelen);
}
/* ------------------------------------------------------- the index */

static int nodes_cmp(const void *a, const void *b)
{
    const erl_node_t *y = b;

    return rateld_erl__node_cmp(a, y->key, y->keylen, y->value, y->valuelen);
}

static int is_wild(const erl_node_t *node)
{
    return node->value && memchr(node->value, '*', node->valuelen) != NULL;
}

int rateld_erl__index_level(ratel__yaml_ctx_t *ctx, erl_node_t *parent,
                            const char *path)
{
    erl_node_t *c = parent->children;
    size_t n = parent->nchildren, *pos, k = 0, dup = n;

    qsort(c, n, sizeof *c, nodes_cmp);
    pos = malloc(n * sizeof *pos);
    if (!pos)
        return ratel__yaml_fail(ctx, parent->line, "out of memory");
    for (size_t i = 0; i < n; i++) {
        pos[c[i].order] = i;
        k += is_wild(&c[i]);
        if (i > 0 && nodes_cmp(&c[i - 1], &c[i]) == 0) {
            size_t later = c[i].order > c[i - 1].order ? i : i - 1;
            if (dup == n || c[later].order < c[dup].order)
                dup = later;
        }
    }
    if (dup < n) {
        const erl_node_t *d = &c[dup];
        size_t first =
            dup > 0 && nodes_cmp(&c[dup - 1], d) == 0 ? dup - 1 : dup + 1;
        char kq[96], vq[96];
        ratel__yaml_quote(d->key, d->keylen, kq, sizeof kq);
        ratel__yaml_quote(d->value ? d->value : "", d->valuelen, vq, sizeof vq);
        free(pos);
        return ratel__yaml_fail(
            ctx, d->line,
            "%s[%zu]: key \"%s\"%s%s%s is already in this list at line %d "
            "(envoyproxy/ratelimit: duplicate descriptor composite key)",
            path, d->order, kq, d->value ? " value \"" : " without value",
            d->value ? vq : "", d->value ? "\"" : "", c[first].line);
    }
    parent->wild = k ? malloc(k * sizeof *parent->wild) : NULL;
    if (k && !parent->wild) {
        free(pos);
        return ratel__yaml_fail(ctx, parent->line, "out of memory");
    }
    for (size_t o = 0; o < n; o++)
        if (is_wild(&c[pos[o]]))
            parent->wild[parent->nwild++] = pos[o];
    free(pos);
    return 0;
}

/* The domain named name[0..len), or NULL. */
erl_domain_t *rateld_erl__find_domain(const rateld_erl_t *erl, const char *name,
                                      size_t len, size_t *at)
{
    size_t lo = 0, hi = erl->ndomains;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = rateld_erl__bytes_cmp(erl->domains[mid].name,
                                      erl->domains[mid].len, name, len);
        if (c == 0)
            return &erl->domains[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (at)
        *at = lo;
    return NULL;
}

/* ----------------------------------------------------------- matching */

/*
 * Whether value[0..len) matches pattern[0..plen), each '*' of which
 * stands for any run of bytes (none included): the text before the first
 * '*' must begin the value, the text after the last end it, and the
 * pieces between follow in order, each taken at its leftmost place (which
 * leaves the most room for the rest, so never misses a match). memmem is
 * glibc's two-way search: linear in the value.
 */
static int wildcard_match(const char *pattern, size_t plen, const char *value,
                          size_t len)
{
    const char *first = memchr(pattern, '*', plen), *last = first, *p;
    size_t head, tail, at, end;

    if (!first)
        return plen == len && memcmp(pattern, value, len) == 0;
    for (p = first; p < pattern + plen; p++)
        if (*p == '*')
            last = p;
    head = (size_t)(first - pattern);
    tail = plen - (size_t)(last - pattern) - 1;
    if (len < head + tail || memcmp(pattern, value, head) != 0 ||
        memcmp(last + 1, value + len - tail, tail) != 0)
        return 0;
    at = head;
    end = len - tail;
    for (p = first + 1; p < last;) {
        const char *star = memchr(p, '*', (size_t)(last - p));
        size_t n = (size_t)((star ? star : last) - p);
        const char *found = n ? memmem(value + at, end - at, p, n) : value + at;
        if (!found)
            return 0;
        at = (size_t)(found - value) + n;
        p += n + 1;
    }
    return 1;
}

/* The child of `node` with exactly (key, value) (value NULL: none). */
static const erl_node_t *find_child(const erl_node_t *node, const char *key,
                                    size_t keylen, const char *value,
                                    size_t valuelen)
{
    size_t lo = 0, hi = node->nchildren;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = rateld_erl__node_cmp(&node->children[mid], key, keylen, value,
                                     valuelen);
        if (c == 0)
            return &node->children[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ERL's three tries for one entry at one level. */
static const erl_node_t *step(const erl_node_t *node,
                              const rateld_erl_entry_t *e)
{
    const erl_node_t *next = find_child(node, e->key, e->keylen,
                                        e->value ? e->value : "", e->valuelen);

    for (size_t i = 0; !next && i < node->nwild; i++) {
        const erl_node_t *w = &node->children[node->wild[i]];
        if (w->keylen == e->keylen && memcmp(w->key, e->key, e->keylen) == 0 &&
            wildcard_match(w->value, w->valuelen, e->value ? e->value : "",
                           e->valuelen))
            next = w;
    }
    return next ? next : find_child(node, e->key, e->keylen, NULL, 0);
}

const rateld_erl_limit_t *rateld_erl_match(const rateld_erl_t *erl,
                                           const char *domain, size_t dlen,
                                           const rateld_erl_entry_t *entries,
                                           size_t n)
{
    const erl_domain_t *dom = rateld_erl__find_domain(erl, domain, dlen, NULL);
    const erl_node_t *node = dom ? &dom->root : NULL;

    for (size_t i = 0; node && i < n; i++) {
        const erl_node_t *next = step(node, &entries[i]);
        if (!next)
            return NULL;
        if (i + 1 == n)
            return next->limit >= 0 ? &erl->limits[next->limit] : NULL;
        if (next->nchildren == 0)
            return NULL;
        node = next;
    }
    return NULL;
}

/* Whether some matched limit's replaces names `name`. */
static int replaced(const rateld_erl_limit_t **limits, size_t n,
                    const char *name)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; limits[i] && k < limits[i]->nreplaces; k++)
            if (strcmp(limits[i]->replaces[k], name) == 0)
                return 1;
    return 0;
}

void rateld_erl_apply_replaces(const rateld_erl_limit_t **limits, size_t n)
{
    const rateld_erl_limit_t *stack[256], **matched = stack;
    int any = 0;

    for (size_t i = 0; i < n; i++)
        any |= limits[i] && limits[i]->nreplaces > 0;
    if (!any)
        return;
    /* ERL gathers every name first, so a replaced limit's replaces count
       too: judge against the limits as matched, not as they are cut. A
       request too large for the copy keeps all its limits when memory
       runs out: stricter, never looser. */
    if (n > COUNT(stack) && !(matched = malloc(n * sizeof *matched)))
        return;
    memcpy(matched, limits, n * sizeof *matched);
    for (size_t i = 0; i < n; i++) {
        const rateld_erl_limit_t *l = matched[i];
        if (l && !l->unlimited && l->name[0] && replaced(matched, n, l->name))
            limits[i] = NULL;
    }
    if (matched != stack)
        free(matched);
}

size_t rateld_erl_count(const rateld_erl_t *erl)
{
    return erl->nlimits;
}

size_t rateld_erl_domain_count(const rateld_erl_t *erl)
{
    return erl->ndomains;
}

const rateld_erl_limit_t *rateld_erl_limit(const rateld_erl_t *erl,
                                           size_t index)
{
    return index < erl->nlimits ? &erl->limits[index] : NULL;
}

int rateld_erl_has_domain(const rateld_erl_t *erl, const char *domain,
                          size_t len)
{
    return rateld_erl__find_domain(erl, domain, len, NULL) != NULL;
}

int rateld_erl_rule_unit(const ratel_rule_t *rule)
{
    if (rule->calendar & RATEL_CALENDAR_MONTHS)
        return rule->months == 1 ? 5 : rule->months == 12 ? 6 : 0;
    for (size_t i = 0; i < COUNT(erl_period_units); i++)
        if (rule->period_ms == erl_period_units[i].period_ms)
            return erl_period_units[i].number;
    return 0;
}
