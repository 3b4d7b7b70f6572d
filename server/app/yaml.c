/*
 * yaml.c - libyaml events to a tree of nodes with lines, and the typed
 * readers rateld's and captchad's configurations are checked with:
 * numbers, sizes, words, strings, lists (addresses are in address.c).
 *
 * libyaml (Debian's libyaml-dev) is the C YAML library of the YAML
 * project; its event API gives every value's position, which is all a
 * "FILE:LINE: reason" message needs. The tree is built from events rather
 * than with yaml_parser_load() so that an alias is refused where it stands
 * instead of being resolved into a shared (possibly cyclic) node.
 */
#include "app/yaml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

int ratel__yaml_fail(const ratel__yaml_ctx_t *ctx, int line, const char *fmt,
                     ...)
{
    va_list ap;
    int n;

    if (!ctx->err || ctx->errlen == 0)
        return -1;
    n = snprintf(ctx->err, ctx->errlen, "%s:%d: ", ctx->name, line);
    if (n >= 0 && (size_t)n < ctx->errlen) {
        va_start(ap, fmt);
        vsnprintf(ctx->err + n, ctx->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------- the tree */

void ratel__yaml_free(ratel__yaml_node_t *node)
{
    if (!node)
        return;
    for (size_t i = 0; i < node->n; i++)
        ratel__yaml_free(node->items[i]);
    free(node->items);
    free(node->text);
    free(node);
}

typedef struct builder_s {
    const ratel__yaml_ctx_t *ctx;
    const char *text; /* the input, to place reader errors */
    size_t len;
    ratel__yaml_node_t *root;
    ratel__yaml_node_t *stack[RATEL__YAML_DEPTH_LIMIT];
    size_t depth;
    size_t depth_max;
    size_t nodes;
    int documents;
    int done;
} builder_t;

#define REFUSE_REFERENCES                                                      \
    "anchors and aliases are not supported: a rate-limit configuration has "   \
    "no use for them, and they let a small file expand into a huge one "       \
    "(the \"billion laughs\" attack); write the value out"

static int line_of(const yaml_mark_t *mark)
{
    return mark->line >= (size_t)1 << 30 ? 1 << 30 : (int)mark->line + 1;
}

/* Anchors and tags are refused on every node. */
static int check_props(builder_t *b, const yaml_mark_t *mark,
                       const yaml_char_t *anchor, const yaml_char_t *tag)
{
    char q[80];

    if (anchor) {
        ratel__yaml_quote((const char *)anchor, strlen((const char *)anchor), q,
                          sizeof q);
        return ratel__yaml_fail(b->ctx, line_of(mark), "anchor &%s: %s", q,
                                REFUSE_REFERENCES);
    }
    if (tag) {
        /* "tag:yaml.org,2002:int" is spelt "!!int" in a file. */
        static const char core[] = "tag:yaml.org,2002:";
        const char *t = (const char *)tag;
        int core_tag = strncmp(t, core, sizeof core - 1) == 0;
        if (core_tag)
            t += sizeof core - 1;
        ratel__yaml_quote(t, strlen(t), q, sizeof q);
        return ratel__yaml_fail(b->ctx, line_of(mark),
                                "tag %s%s: tags are not used in this "
                                "configuration; write the value without it",
                                core_tag ? "!!" : "", q);
    }
    return 0;
}

/* Adds `node` under the open container (or as the root); takes it. */
static int attach(builder_t *b, ratel__yaml_node_t *node)
{
    ratel__yaml_node_t *parent;

    if (b->depth == 0) {
        b->root = node;
        return 0;
    }
    parent = b->stack[b->depth - 1];
    if (parent->type == RATEL__YAML_MAP && parent->n % 2 == 0 &&
        node->type != RATEL__YAML_SCALAR) {
        ratel__yaml_fail(b->ctx, node->line,
                         "a key must be a plain name, not a %s",
                         node->type == RATEL__YAML_MAP ? "mapping" : "list");
        ratel__yaml_free(node);
        return -1;
    }
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        ratel__yaml_node_t **items =
            realloc(parent->items, cap * sizeof *items);
        if (!items) {
            ratel__yaml_free(node);
            return ratel__yaml_fail(b->ctx, node->line, "out of memory");
        }
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = node;
    return 0;
}

static ratel__yaml_node_t *node_new(builder_t *b, ratel__yaml_type_t type,
                                    const yaml_mark_t *mark)
{
    ratel__yaml_node_t *node;

    if (++b->nodes > RATEL__YAML_NODES_MAX) {
        ratel__yaml_fail(b->ctx, line_of(mark),
                         "more than %d values in one file",
                         RATEL__YAML_NODES_MAX);
        return NULL;
    }
    node = calloc(1, sizeof *node);
    if (!node) {
        ratel__yaml_fail(b->ctx, line_of(mark), "out of memory");
        return NULL;
    }
    node->type = type;
    node->line = line_of(mark);
    return node;
}

static int on_scalar(builder_t *b, const yaml_event_t *ev)
{
    ratel__yaml_node_t *node;

    if (check_props(b, &ev->start_mark, ev->data.scalar.anchor,
                    ev->data.scalar.tag))
        return -1;
    node = node_new(b, RATEL__YAML_SCALAR, &ev->start_mark);
    if (!node)
        return -1;
    node->len = ev->data.scalar.length;
    node->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    node->text = malloc(node->len + 1);
    if (!node->text) {
        ratel__yaml_free(node);
        return ratel__yaml_fail(b->ctx, line_of(&ev->start_mark),
                                "out of memory");
    }
    memcpy(node->text, ev->data.scalar.value, node->len);
    node->text[node->len] = '\0';
    return attach(b, node);
}

static int on_start(builder_t *b, const yaml_event_t *ev, int map)
{
    ratel__yaml_node_t *node;
    const yaml_char_t *anchor =
        map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    const yaml_char_t *tag =
        map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;

    if (check_props(b, &ev->start_mark, anchor, tag))
        return -1;
    if (b->depth == b->depth_max)
        return ratel__yaml_fail(b->ctx, line_of(&ev->start_mark),
                                "mappings and lists nested deeper than %zu "
                                "levels",
                                b->depth_max);
    node =
        node_new(b, map ? RATEL__YAML_MAP : RATEL__YAML_LIST, &ev->start_mark);
    if (!node || attach(b, node))
        return -1;
    b->stack[b->depth++] = node;
    return 0;
}

static int on_event(builder_t *b, const yaml_event_t *ev)
{
    char q[80];

    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++b->documents > 1)
            return ratel__yaml_fail(b->ctx, line_of(&ev->start_mark),
                                    "a second YAML document; the configuration "
                                    "is one document (one mapping)");
        return 0;
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(b, ev, 0);
    case YAML_MAPPING_START_EVENT:
        return on_start(b, ev, 1);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth > 0)
            b->depth--;
        return 0;
    case YAML_ALIAS_EVENT:
        ratel__yaml_quote((const char *)ev->data.alias.anchor,
                          strlen((const char *)ev->data.alias.anchor), q,
                          sizeof q);
        return ratel__yaml_fail(b->ctx, line_of(&ev->start_mark),
                                "alias *%s: %s", q, REFUSE_REFERENCES);
    case YAML_STREAM_END_EVENT:
        b->done = 1;
        return 0;
    default:
        return 0;
    }
}

/* libyaml's own words and place for a text that is not YAML. */
static int syntax_error(builder_t *b, const yaml_parser_t *p)
{
    const char *problem = p->problem ? p->problem : "cannot be parsed";

    if (p->error == YAML_MEMORY_ERROR)
        return ratel__yaml_fail(b->ctx, 1, "out of memory");
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset, not a mark. */
        int line = 1;
        for (size_t i = 0; i < p->problem_offset && i < b->len; i++)
            line += b->text[i] == '\n';
        if (p->problem_value >= 0)
            return ratel__yaml_fail(b->ctx, line, "not YAML: %s (byte 0x%02x)",
                                    problem,
                                    (unsigned)p->problem_value & 0xffu);
        return ratel__yaml_fail(b->ctx, line, "not YAML: %s", problem);
    }
    if (p->context)
        return ratel__yaml_fail(b->ctx, line_of(&p->problem_mark),
                                "not YAML: %s (%s at line %d)", problem,
                                p->context, line_of(&p->context_mark));
    if (strstr(problem, "mapping values are not allowed"))
        return ratel__yaml_fail(
            b->ctx, line_of(&p->problem_mark),
            "not YAML: %s (a second ':' followed by a space "
            "or the end of the line starts a mapping: write "
            "key sources as header:NAME, with no space "
            "after the colon, or quote the value, e.g. "
            "key: \"query:telephone\")",
            problem);
    return ratel__yaml_fail(b->ctx, line_of(&p->problem_mark), "not YAML: %s",
                            problem);
}

int ratel__yaml_load(const ratel__yaml_ctx_t *ctx, const char *text, size_t len,
                     ratel__yaml_node_t **root)
{
    return ratel__yaml_load_nested(ctx, text, len, RATEL__YAML_DEPTH_MAX, root);
}

int ratel__yaml_load_nested(const ratel__yaml_ctx_t *ctx, const char *text,
                            size_t len, size_t depth_max,
                            ratel__yaml_node_t **root)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    builder_t b;
    int rc = 0;

    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.text = text;
    b.len = len;
    b.depth_max = depth_max < RATEL__YAML_DEPTH_LIMIT ? depth_max
                                                      : RATEL__YAML_DEPTH_LIMIT;
    *root = NULL;
    if (!yaml_parser_initialize(&parser))
        return ratel__yaml_fail(ctx, 1, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    while (!b.done) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = syntax_error(&b, &parser);
            break;
        }
        rc = on_event(&b, &ev);
        yaml_event_delete(&ev);
        if (rc)
            break;
    }
    yaml_parser_delete(&parser);
    if (rc) {
        ratel__yaml_free(b.root);
        return -1;
    }
    *root = b.root;
    return 0;
}

/* ------------------------------------------------------------- messages */

int ratel__yaml_is_null(const ratel__yaml_node_t *node)
{
    if (!node || node->type != RATEL__YAML_SCALAR || node->quoted)
        return 0;
    return node->len == 0 || strcmp(node->text, "~") == 0 ||
           strcmp(node->text, "null") == 0 || strcmp(node->text, "Null") == 0 ||
           strcmp(node->text, "NULL") == 0;
}

void ratel__yaml_quote(const char *text, size_t len, char *out, size_t cap)
{
    size_t q = 0;

    if (cap == 0)
        return;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        char piece[8];
        size_t n;
        if (c == '"' || c == '\\')
            n = (size_t)snprintf(piece, sizeof piece, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", c);
        else
            n = (size_t)snprintf(piece, sizeof piece, "%c", c);
        if (q + n + 4 > cap && i + 1 < len) {
            if (q + 3 < cap) {
                memcpy(out + q, "...", 3);
                q += 3;
            }
            break;
        }
        if (q + n >= cap)
            break;
        memcpy(out + q, piece, n);
        q += n;
    }
    out[q] = '\0';
}

const char *ratel__yaml_describe(const ratel__yaml_node_t *node, char *buf,
                                 size_t cap)
{
    char q[72];

    if (!node)
        snprintf(buf, cap, "nothing");
    else if (node->type == RATEL__YAML_MAP)
        snprintf(buf, cap, "a mapping");
    else if (node->type == RATEL__YAML_LIST)
        snprintf(buf, cap, "a list");
    else if (ratel__yaml_is_null(node))
        snprintf(buf, cap, "nothing (null)");
    else {
        ratel__yaml_quote(node->text, node->len, q, sizeof q);
        snprintf(buf, cap, "\"%s\"", q);
    }
    return buf;
}

/* Whether a key can stand in a path unquoted. */
static int plain_name(const ratel__yaml_node_t *key)
{
    if (key->len == 0 || key->len > 63)
        return 0;
    for (size_t i = 0; i < key->len; i++) {
        unsigned char c = (unsigned char)key->text[i];
        if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
            !(c >= '0' && c <= '9') && c != '_' && c != '-' && c != '.')
            return 0;
    }
    return 1;
}

void ratel__yaml_join(char *out, size_t cap, const char *parent,
                      const ratel__yaml_node_t *key)
{
    char q[72];
    const char *dot = parent[0] ? "." : "";

    if (plain_name(key)) {
        snprintf(out, cap, "%s%s%s", parent, dot, key->text);
        return;
    }
    ratel__yaml_quote(key->text, key->len, q, sizeof q);
    snprintf(out, cap, "%s%s\"%s\"", parent, dot, q);
}

/* "a, b, c" from n names. */
static void name_list(const char *const *names, size_t n, char *out, size_t cap)
{
    size_t q = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n && q < cap; i++) {
        int w = snprintf(out + q, cap - q, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        q += (size_t)w;
    }
}

int ratel__yaml_fields(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const char *const *names, size_t n,
                       const ratel__yaml_node_t **values)
{
    char accepted[256], field[320], what[96];
    const ratel__yaml_node_t *keys[RATEL__YAML_FIELDS_MAX];

    if (n > sizeof keys / sizeof keys[0])
        return ratel__yaml_fail(ctx, node->line, "%s: too many fields", path);
    name_list(names, n, accepted, sizeof accepted);
    for (size_t i = 0; i < n; i++) {
        values[i] = NULL;
        keys[i] = NULL;
    }
    if (node->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(
            ctx, node->line, "%s: expected a mapping of fields (%s), got %s",
            path, accepted, ratel__yaml_describe(node, what, sizeof what));
    for (size_t e = 0; e + 1 < node->n; e += 2) {
        const ratel__yaml_node_t *key = node->items[e];
        size_t i = 0;
        while (i < n && !(strlen(names[i]) == key->len &&
                          memcmp(names[i], key->text, key->len) == 0))
            i++;
        ratel__yaml_join(field, sizeof field, path, key);
        if (i == n)
            return ratel__yaml_fail(ctx, key->line,
                                    "%s: unknown field; accepted: %s", field,
                                    accepted);
        if (keys[i])
            return ratel__yaml_fail(ctx, key->line,
                                    "%s: given twice (first at line %d)", field,
                                    keys[i]->line);
        keys[i] = key;
        values[i] = node->items[e + 1];
    }
    return 0;
}

size_t ratel__yaml_by_line(const ratel__yaml_node_t *const *values, size_t n,
                           size_t *order)
{
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        size_t k;
        if (!values[i])
            continue;
        k = m++;
        /* Insertion sort: a mapping has a handful of fields. */
        while (k > 0 && values[order[k - 1]]->line > values[i]->line) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    return m;
}

/* ------------------------------------------------------------- scalars */

/* A scalar that holds something; else a message saying what it is. */
static int want_scalar(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const char *expected)
{
    char what[96];

    if (node->type == RATEL__YAML_SCALAR && !ratel__yaml_is_null(node))
        return 0;
    return ratel__yaml_fail(ctx, node->line, "%s: expected %s, got %s", path,
                            expected,
                            ratel__yaml_describe(node, what, sizeof what));
}

/* Whether text[0..len) is digits only (a number written in quotes). */
static int all_digits(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (text[i] < '0' || text[i] > '9')
            return 0;
    return len > 0;
}

int ratel__yaml_option(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const ratel__option_t *opt, void *base)
{
    static const char *const expected[] = {
        [RATEL__OPTION_UINT] = "a whole number",
        [RATEL__OPTION_SIZE] = "a size in bytes",
        [RATEL__OPTION_MSEC] = "a whole number of milliseconds",
        [RATEL__OPTION_BOOL] = "true or false",
        [RATEL__OPTION_ENUM] = "a word",
        [RATEL__OPTION_STRING] = "a string"};
    char what[96], why[400];
    int number =
        opt->type == RATEL__OPTION_UINT || opt->type == RATEL__OPTION_MSEC;

    if (opt->type == RATEL__OPTION_STRING && node->type == RATEL__YAML_SCALAR &&
        ratel__yaml_is_null(node))
        return ratel__yaml_fail(ctx, node->line,
                                "%s: has no value (write \"\" for an empty "
                                "string)",
                                path);
    if (opt->type != RATEL__OPTION_ENUM &&
        want_scalar(ctx, node, path, expected[opt->type]))
        return -1;
    if (number && node->quoted && all_digits(node->text, node->len))
        return ratel__yaml_fail(ctx, node->line,
                                "%s: expected a number, got the string %s "
                                "(write it without quotes)",
                                path,
                                ratel__yaml_describe(node, what, sizeof what));
    if (opt->type == RATEL__OPTION_BOOL && node->quoted)
        return ratel__yaml_fail(
            ctx, node->line,
            "%s: expected true or false, got %s (in quotes, "
            "a string)",
            path, ratel__yaml_describe(node, what, sizeof what));
    if (opt->type == RATEL__OPTION_ENUM &&
        (node->type != RATEL__YAML_SCALAR || ratel__yaml_is_null(node))) {
        ratel__option_accepted(opt, why, sizeof why);
        return ratel__yaml_fail(ctx, node->line, "%s: expected %s, got %s",
                                path, why,
                                ratel__yaml_describe(node, what, sizeof what));
    }
    if (ratel__option_set(opt, node->text, node->len, base, why, sizeof why))
        return ratel__yaml_fail(ctx, node->line, "%s: %s", path, why);
    return 0;
}

int ratel__yaml_groups(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       const ratel__yaml_group_t *groups, size_t ngroups,
                       const ratel__yaml_node_t **given)
{
    const char *names[RATEL__YAML_FIELDS_MAX];
    const ratel__yaml_node_t *v[RATEL__YAML_FIELDS_MAX];
    size_t order[RATEL__YAML_FIELDS_MAX], group[RATEL__YAML_FIELDS_MAX],
        entry[RATEL__YAML_FIELDS_MAX], n = 0, m;
    char field[320];

    for (size_t g = 0; g < ngroups; g++)
        for (size_t i = 0; i < groups[g].n; i++, n++) {
            if (n == RATEL__YAML_FIELDS_MAX)
                return ratel__yaml_fail(ctx, node->line, "%s: too many fields",
                                        path);
            names[n] = groups[g].table[i].name;
            group[n] = g;
            entry[n] = i;
        }
    if (ratel__yaml_fields(ctx, node, path, names, n, v))
        return -1;
    m = ratel__yaml_by_line(v, n, order);
    for (size_t k = 0; k < m; k++) {
        const ratel__yaml_group_t *g = &groups[group[order[k]]];
        size_t i = entry[order[k]];
        int rc;
        snprintf(field, sizeof field, "%s%s%s", path, path[0] ? "." : "",
                 g->table[i].name);
        rc = g->base ? ratel__yaml_option(ctx, v[order[k]], field, &g->table[i],
                                          g->base)
                     : g->read(g->ud, i, v[order[k]]);
        if (rc)
            return -1;
    }
    for (size_t i = 0; given && i < n; i++)
        given[i] = v[i];
    return 0;
}

int ratel__yaml_options(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        const ratel__option_t *table, size_t n, void *base,
                        const ratel__yaml_node_t **given)
{
    ratel__yaml_group_t group = {table, n, base, NULL, NULL};

    return ratel__yaml_groups(ctx, node, path, &group, 1, given);
}

int ratel__yaml_bool(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path, int *out)
{
    ratel__option_t opt = {
        .name = path, .type = RATEL__OPTION_BOOL, .size = sizeof *out};

    return ratel__yaml_option(ctx, node, path, &opt, out);
}

int ratel__yaml_word(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path,
                     const char *const *words, size_t n, int *out)
{
    const char *list[RATEL__YAML_FIELDS_MAX + 1];
    ratel__option_t opt = {.name = path,
                           .type = RATEL__OPTION_ENUM,
                           .size = sizeof *out,
                           .words = list};

    if (n > RATEL__YAML_FIELDS_MAX)
        return ratel__yaml_fail(ctx, node->line, "%s: too many words", path);
    for (size_t i = 0; i < n; i++)
        list[i] = words[i];
    list[n] = NULL;
    return ratel__yaml_option(ctx, node, path, &opt, out);
}

int ratel__yaml_string(const ratel__yaml_ctx_t *ctx,
                       const ratel__yaml_node_t *node, const char *path,
                       char *out, size_t cap)
{
    ratel__option_t opt = {
        .name = path, .type = RATEL__OPTION_STRING, .size = cap};

    return ratel__yaml_option(ctx, node, path, &opt, out);
}

int ratel__yaml_list(const ratel__yaml_ctx_t *ctx,
                     const ratel__yaml_node_t *node, const char *path,
                     size_t max, const char *what)
{
    char got[96];

    if (node->type != RATEL__YAML_LIST)
        return ratel__yaml_fail(ctx, node->line,
                                "%s: expected a list of %s, got %s", path, what,
                                ratel__yaml_describe(node, got, sizeof got));
    if (node->n > max)
        return ratel__yaml_fail(ctx, node->items[max]->line,
                                "%s: more than %zu %s", path, max, what);
    return 0;
}

int ratel__config_read_file(const char *path, char **text, size_t *len,
                            char *err, size_t errlen)
{
    size_t cap = RATEL__CONFIG_MAX_BYTES + 1, n = 0, got;
    char *buf;
    FILE *f;

    *text = NULL;
    *len = 0;
    f = fopen(path, "rb");
    if (!f) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    buf = malloc(cap);
    if (!buf) {
        fclose(f);
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    /* One byte past the limit tells a file that is too large. */
    while (n < cap && (got = fread(buf + n, 1, cap - n, f)) > 0)
        n += got;
    if (ferror(f) || n > RATEL__CONFIG_MAX_BYTES) {
        if (err && errlen && ferror(f))
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        else if (err && errlen)
            snprintf(err, errlen,
                     "%s:1: the file is larger than 1 MiB; a configuration "
                     "may be at most 1 MiB",
                     path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    *text = buf;
    *len = n;
    return 0;
}
