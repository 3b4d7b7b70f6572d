/*
 * fuzz_config.c - rateld's configuration parser on arbitrary bytes.
 *
 * Three views of one input:
 *
 *   1. the whole input as a configuration file (rateld_config_parse with
 *      its length, so NULs and invalid UTF-8 reach libyaml);
 *   2. the input's bytes as choices among fragments (fields, rules, key
 *      sources, routes; mostly valid, some near misses) assembled into a
 *      file, so that loaded configurations, which byte mutations of YAML
 *      rarely produce, are checked often;
 *   3. its first line as a CIDR block (ratel__cidr_parse).
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - the parse returns 0 or -1, and the same again on the same bytes;
 *   - on -1, *out is NULL and the message is non-empty, NUL-terminated,
 *     "fuzz.yaml:LINE: ..." with LINE >= 1, identical on a second parse
 *     and cut cleanly (a prefix, NUL-terminated) into a small buffer;
 *   - on 0, every promise of rateld/config.h holds: listen, threads and
 *     limits in their ranges; the store's fields consistent with its kind
 *     (the Redis URL pointing into redis_url); trusted blocks in range with
 *     no host bits and no repeats; 1.. policies with valid, unique names,
 *     1..8 rules that ratel_policy_init accepts again, 1..8 key parts with
 *     names exactly for header/query; routes with a '/' prefix, a method
 *     token or none, 1..8 distinct policy indices < npolicies, no two
 *     alike; rateld_config_policy finds each policy by name and
 *     rateld_config_route gives each route back for its own prefix;
 *   - ratel__cidr_parse gives 0 and a block in range without host bits,
 *     or -1 and a non-empty message.
 */
#include "rateld/config.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The route for a method and a path (no host, no headers). */
static const rateld_route_t *route_of(const rateld_config_t *c,
                                      const char *method, size_t mlen,
                                      const char *path, size_t plen)
{
    rateld_route_query_t q = {{method, mlen}, {path, plen}, {"", 0}, NULL};
    return rateld_config_route(c, &q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.yaml"

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_config: %s:%d: invariant broken: %s\n",      \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The whole of a fixed-size char field is NUL-terminated. */
#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

static void check_cidr(const ratel__cidr_t *c)
{
    unsigned max;

    ASSERT(c->family == AF_INET || c->family == AF_INET6);
    max = c->family == AF_INET ? 32 : 128;
    ASSERT(c->bits <= max);
    for (unsigned bit = c->bits; bit < 128; bit++)
        ASSERT(!(c->addr[bit / 8] & (0x80u >> (bit % 8))));
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= RATELD_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.-",
                    s[i]))
            return 0;
    return 1;
}

static void check_policy(const rateld_config_t *c, size_t i)
{
    const rateld_policy_t *p = &c->policies[i];
    ratel_policy_t again;
    char err[512];

    ASSERT(TERMINATED(p->name) && name_ok(p->name));
    ASSERT(p->line >= 1);
    ASSERT(p->policy.nrules >= 1 && p->policy.nrules <= RATEL_MAX_RULES);
    ASSERT(ratel_policy_init(&again, p->policy.rules, p->policy.nrules, err,
                             sizeof err) == 0);
    ASSERT(p->key.n >= 1 && p->key.n <= RATEL__KEY_PARTS_MAX);
    for (size_t k = 0; k < p->key.n; k++) {
        const ratel__key_part_t *part = &p->key.parts[k];
        int named = part->kind >= RATEL__KEY_HEADER;
        ASSERT((unsigned)part->kind < RATEL__KEY_SELF);
        ASSERT(TERMINATED(part->name));
        ASSERT(named == (part->name[0] != '\0'));
        ASSERT(part->kind != RATEL__KEY_GLOBAL || p->key.n == 1);
        for (size_t j = 0; j < k; j++)
            ASSERT(memcmp(&p->key.parts[j], part, sizeof *part) != 0);
    }
    ASSERT(p->key.on_missing <= RATEL__KEY_MISSING_ALLOW);
    ASSERT(p->shadow == 0 || p->shadow == 1);
    for (size_t j = 0; j < i; j++)
        ASSERT(strcmp(c->policies[j].name, p->name) != 0);
    ASSERT(rateld_config_policy(c, p->name, strlen(p->name)) == p);
}

static void check_route(const rateld_config_t *c, size_t i)
{
    const rateld_route_t *r = &c->routes[i], *back;
    size_t n;

    ASSERT(TERMINATED(r->prefix) && TERMINATED(r->method));
    ASSERT(r->prefix[0] == '/');
    for (const char *m = r->method; *m; m++)
        ASSERT((*m >= 'A' && *m <= 'Z') || (*m >= '0' && *m <= '9') ||
               *m == '-' || *m == '_');
    ASSERT(r->npolicies >= 1 && r->npolicies <= RATELD_ROUTE_POLICIES_MAX);
    for (size_t k = 0; k < r->npolicies; k++) {
        ASSERT(r->policies[k] < c->npolicies);
        for (size_t j = 0; j < k; j++)
            ASSERT(r->policies[j] != r->policies[k]);
    }
    for (size_t j = 0; j < i; j++)
        ASSERT(strcmp(c->routes[j].prefix, r->prefix) != 0 ||
               strcmp(c->routes[j].method, r->method) != 0);
    /* Its own prefix, asked with its method (or one no route has), finds
       exactly it: nothing longer can match, and a twin would be refused. */
    n = strlen(r->prefix);
    back = r->method[0]
               ? route_of(c, r->method, strlen(r->method), r->prefix, n)
               : route_of(c, "\x01", 1, r->prefix, n);
    ASSERT(back == r);
}

static void check_config(const rateld_config_t *c)
{
    ASSERT(strcmp(c->path, NAME) == 0);
    ASSERT(TERMINATED(c->listen) && strchr(c->listen, ':'));
    ASSERT(c->threads >= 1 && c->threads <= 64);
    ASSERT(c->limits.max_header_bytes == 0 ||
           (c->limits.max_header_bytes >= 1024 &&
            c->limits.max_header_bytes <= 1048576));
    ASSERT(c->limits.max_body_bytes <= 16777216);
    ASSERT(c->limits.max_connections <= 1000000);
    ASSERT(c->limits.max_pipeline <= 1024);
    ASSERT(c->limits.request_timeout_ms <= 3600000);
    ASSERT(c->limits.idle_timeout_ms <= 86400000);
    ASSERT(TERMINATED(c->admin_token));
    for (const char *t = c->admin_token; *t; t++)
        ASSERT((unsigned char)*t > 0x20 && *t != 0x7f);
    ASSERT(c->memory.max_bytes >= 65536 &&
           (uint64_t)c->memory.max_bytes <= (uint64_t)1 << 40);
    if (c->store == RATELD_STORE_MEMORY) {
        ASSERT(c->redis.url == NULL && c->redis_url[0] == '\0');
    } else {
        ASSERT(c->store == RATELD_STORE_REDIS);
        ASSERT(c->redis.url == c->redis_url && c->redis_url[0]);
        ASSERT(TERMINATED(c->redis_url));
        ASSERT((unsigned)c->redis.on_failure <= RATEL_FAILURE_LOCAL);
        ASSERT((unsigned)c->redis.mode <= RATEL_REDIS_FUNCTION);
        ASSERT(c->redis.command_timeout_ms >= 0 &&
               c->redis.command_timeout_ms <= 60000);
        ASSERT(c->redis.connect_timeout_ms >= 0 &&
               c->redis.connect_timeout_ms <= 60000);
        ASSERT(c->redis.pool_size <= 256);
        ASSERT(c->redis.deny_cache_entries >= -1 &&
               c->redis.deny_cache_entries <= 1048576);
        ASSERT(c->redis.local.max_bytes == c->memory.max_bytes);
    }
    ASSERT(c->trusted.n <= RATEL__TRUSTED_MAX);
    for (size_t i = 0; i < c->trusted.n; i++) {
        check_cidr(&c->trusted.blocks[i]);
        for (size_t j = 0; j < i; j++)
            ASSERT(memcmp(&c->trusted.blocks[i], &c->trusted.blocks[j],
                          sizeof c->trusted.blocks[i]) != 0);
    }
    ASSERT(c->npolicies >= 1 && c->policies != NULL);
    for (size_t i = 0; i < c->npolicies; i++)
        check_policy(c, i);
    ASSERT((c->nroutes == 0) == (c->routes == NULL));
    for (size_t i = 0; i < c->nroutes; i++)
        check_route(c, i);
    ASSERT(rateld_config_policy(c, "", 0) == NULL);
}

/* "fuzz.yaml:LINE: reason" with LINE >= 1. */
static void check_message(const char *err, size_t cap)
{
    const char *p = err + strlen(NAME ":");
    long line = 0;

    ASSERT(memchr(err, '\0', cap) != NULL);
    ASSERT(err[0] != '\0' && strchr(err, ':'));
    ASSERT(strncmp(err, NAME ":", strlen(NAME ":")) == 0);
    while (*p >= '0' && *p <= '9')
        line = line * 10 + (*p++ - '0');
    ASSERT(line >= 1 && p[0] == ':' && p[1] == ' ' && p[2] != '\0');
}

static void check_file(const uint8_t *data, size_t size)
{
    rateld_config_t *c = (rateld_config_t *)1, *c2 = NULL;
    char err[1024], err2[1024], small[24];
    int rc, rc2;

    memset(err, 'X', sizeof err);
    rc = rateld_config_parse((const char *)data, size, NAME, &c, err,
                             sizeof err);
    ASSERT(rc == 0 || rc == -1);
    rc2 = rateld_config_parse((const char *)data, size, NAME, &c2, err2,
                              sizeof err2);
    ASSERT(rc2 == rc);
    if (rc == 0) {
        ASSERT(c != NULL && c2 != NULL);
        check_config(c);
        rateld_config_free(c);
        rateld_config_free(c2);
        return;
    }
    ASSERT(c == NULL && c2 == NULL);
    check_message(err, sizeof err);
    ASSERT(strcmp(err, err2) == 0);
    memset(small, 'X', sizeof small);
    ASSERT(rateld_config_parse((const char *)data, size, NAME, &c, small,
                               1 + size % sizeof small) == -1);
    ASSERT(strlen(small) == (size % sizeof small < strlen(err)
                                 ? size % sizeof small
                                 : strlen(err)));
    ASSERT(memcmp(small, err, strlen(small)) == 0);
}

/* ------------------------------------------------ view 3: built files */

/* The input's bytes read one at a time as choices (0 when used up). */
typedef struct choices_s {
    const uint8_t *p;
    size_t n;
} choices_t;

static unsigned pick(choices_t *c, unsigned n)
{
    unsigned v = 0;
    if (c->n) {
        v = *c->p++;
        c->n--;
    }
    return v % n;
}

#define PICK(c, table) (table)[pick((c), sizeof(table) / sizeof((table)[0]))]

static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (*len + n < cap) {
        memcpy(buf + *len, s, n + 1);
        *len += n;
    }
}

/*
 * Assembles a configuration from fragments the input chooses: mostly
 * valid values with some near misses, so that the checks of a loaded
 * configuration (rarely reached by byte mutations) run often.
 */
static size_t build_file(const uint8_t *data, size_t size, char *buf,
                         size_t cap)
{
    static const char *const listens[] = {
        "listen: 127.0.0.1:8080\n",  "listen: ':0'\n",    "listen: '[::1]:1'\n",
        "listen: localhost:65535\n", "listen: 1.2.3.4\n", ""};
    static const char *const tops[] = {
        "threads: 4\n",
        "threads: 0\n",
        "admin_token: s3cret\n",
        "admin_token: s3cret-s3cret-s3cret-s3cret-s3cret\n",
        "admin_token: ''\n",
        "trusted_proxies: [127.0.0.1, '::1', 10.0.0.0/8]\n",
        "trusted_proxies: ['::ffff:10.0.0.0/104', 0.0.0.0/0, '::/0']\n",
        "trusted_proxies: [10.0.0.1/8]\n",
        "limits: {max_header_bytes: 16KiB, max_pipeline: 3}\n",
        "limits: {max_body_bytes: 0, idle_timeout_ms: 86400000}\n",
        "store: {max_bytes: 1GiB}\n",
        "store: {type: redis, url: 'redis://h:1', deny_cache: 0}\n",
        ("store: {type: redis, url: 'redis://h', pool: 64, mode: lua, "
         "on_failure: closed, timeout_ms: 1, connect_timeout_ms: 60000}\n"),
        "store: {type: redis}\n",
        ""};
    static const char *const names[] = {"a", "b", "c.d", "e-f_1", "a"};
    static const char *const rules[] = {
        "1/1s",         "10/1m", "1/60s", "5/1h:fixed", "100/1s:gcra,burst=200",
        "3/90s:approx", "1/1x",  "1/1m"};
    static const char *const keys[] = {"ip",
                                       "global",
                                       "path",
                                       "'header:X-User-Id'",
                                       "'query:telephone'",
                                       "'header:'",
                                       "cookie"};
    static const char *const extras[] = {
        "", "on_missing: shared, ", "shadow: true, ", "on_missing: reject, ",
        "shadow: no, "};
    static const char *const paths[] = {"/",        "/api",  "/api/v1",
                                        "/static/", "/form", "api"};
    static const char *const methods[] = {"", "method: GET, ", "method: POST, ",
                                          "method: get, "};
    choices_t c = {data, size};
    size_t len = 0;
    unsigned npol, nroutes;
    char line[512];

    buf[0] = '\0';
    put(buf, cap, &len, PICK(&c, listens));
    for (unsigned i = pick(&c, 4); i > 0; i--)
        put(buf, cap, &len, PICK(&c, tops));
    put(buf, cap, &len, "policies:\n");
    npol = 1 + pick(&c, 4);
    for (unsigned i = 0; i < npol; i++) {
        unsigned nr = 1 + pick(&c, 3), nk = 1 + pick(&c, 3);
        size_t q;
        q = (size_t)snprintf(line, sizeof line, "  %s: {%srules: [",
                             PICK(&c, names), PICK(&c, extras));
        for (unsigned r = 0; r < nr && q < sizeof line; r++)
            q += (size_t)snprintf(line + q, sizeof line - q, "%s'%s'",
                                  r ? ", " : "", PICK(&c, rules));
        if (q < sizeof line)
            q += (size_t)snprintf(line + q, sizeof line - q, "], key: [");
        for (unsigned k = 0; k < nk && q < sizeof line; k++)
            q += (size_t)snprintf(line + q, sizeof line - q, "%s%s",
                                  k ? ", " : "", PICK(&c, keys));
        if (q < sizeof line)
            snprintf(line + q, sizeof line - q, "]}\n");
        put(buf, cap, &len, line);
    }
    nroutes = pick(&c, 5);
    if (nroutes)
        put(buf, cap, &len, "routes:\n");
    for (unsigned i = 0; i < nroutes; i++) {
        snprintf(line, sizeof line, "  - {path: '%s', %spolicies: [%s]}\n",
                 PICK(&c, paths), PICK(&c, methods), PICK(&c, names));
        put(buf, cap, &len, line);
    }
    return len;
}

static void check_cidr_text(const uint8_t *data, size_t size)
{
    char text[80], err[256];
    ratel__cidr_t c;
    size_t n = 0;

    while (n < size && n < sizeof text - 1 && data[n] != '\n')
        n++;
    memcpy(text, data, n);
    text[n] = '\0';
    memset(err, 'X', sizeof err);
    if (ratel__cidr_parse(text, &c, err, sizeof err) == 0) {
        check_cidr(&c);
    } else {
        ASSERT(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
        ASSERT(ratel__cidr_parse(text, &c, NULL, 0) == -1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char built[8192];

    check_file(data, size);
    check_file((const uint8_t *)built,
               build_file(data, size, built, sizeof built));
    check_cidr_text(data, size);
    return 0;
}
