/*
 * config_routes.c - rateld's routes: the routes: section of the
 * configuration (method, path prefix, host, headers and the policies a
 * route applies) and the look-up of a request's route.
 */
#include "rateld/config_private.h"
#include "rateld/path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* --------------------------------------------------------------- routes */

static int read_route_policies(reader_t *r, const ratel__yaml_node_t *node,
                               const char *path, rateld_route_t *route)
{
    const rateld_config_t *c = r->config;
    char item[160], what[96];

    if (ratel__yaml_list(&r->ctx, node, path, RATELD_ROUTE_POLICIES_MAX,
                         "policy names"))
        return -1;
    if (node->n == 0)
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s: an empty list; name at least one policy",
                                path);
    for (size_t i = 0; i < node->n; i++) {
        const ratel__yaml_node_t *it = node->items[i];
        const rateld_policy_t *p = NULL;
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        if (it->type == RATEL__YAML_SCALAR) {
            name_ref_t want = {it->text, it->len, 0};
            const name_ref_t *found = bsearch(
                &want, r->names, r->nnames, sizeof want, rateld__compare_name);
            p = found ? &c->policies[found->index] : NULL;
        }
        if (!p) {
            char names[200];
            rateld_config_policy_names(c, names, sizeof names);
            return ratel__yaml_fail(
                &r->ctx, it->line, "%s: no policy named %s; defined: %s", item,
                ratel__yaml_describe(it, what, sizeof what), names);
        }
        if (p->max_wait_ms && strcmp(c->auth.gateway.name, "haproxy") != 0)
            return ratel__yaml_fail(
                &r->ctx, it->line,
                "%s: policy %s has max_wait, and only a gateway that waits "
                "when told to can honour it: set auth.gateway: haproxy (nginx: "
                "the module's max_wait=; docs/gateways.md)",
                item, p->name);
        route->policies[i] = (size_t)(p - c->policies);
        for (size_t j = 0; j < i; j++)
            if (route->policies[j] == route->policies[i])
                return ratel__yaml_fail(&r->ctx, it->line,
                                        "%s: repeats %s[%zu]", item, path, j);
    }
    route->npolicies = node->n;
    return 0;
}

/* Requests are matched in their normal form (path.h), so a prefix must
   be written in it, or it could never match what it seems to. */
static int check_route_normal(reader_t *r, const ratel__yaml_node_t *v,
                              const char *field, const char *prefix,
                              const char *q)
{
    char normal[RATELD_PATH_MAX], nq[96];
    const char *why = "";
    ssize_t n = rateld_path_normalize(prefix, strlen(prefix), normal,
                                      sizeof normal, &why);

    if (n < 0)
        return ratel__yaml_fail(&r->ctx, v->line, "%s: \"%s\" has %s", field, q,
                                why);
    if (strcmp(normal, prefix) != 0) {
        ratel__yaml_quote(normal, (size_t)n, nq, sizeof nq);
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: \"%s\" is not a normalised path: "
                                "requests are matched as \"%s\" (write that)",
                                field, q, nq);
    }
    return 0;
}

static int read_route_path(reader_t *r, const ratel__yaml_node_t *v,
                           const char *field, rateld_route_t *route)
{
    char q[96];

    if (ratel__yaml_string(&r->ctx, v, field, route->prefix,
                           sizeof route->prefix))
        return -1;
    ratel__yaml_quote(route->prefix, strlen(route->prefix), q, sizeof q);
    if (route->prefix[0] != '/')
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: \"%s\" must start with '/'", field, q);
    if (strpbrk(route->prefix, " ?#"))
        return ratel__yaml_fail(
            &r->ctx, v->line,
            "%s: \"%s\": a path prefix has no spaces, query "
            "or fragment",
            field, q);
    return check_route_normal(r, v, field, route->prefix, q);
}

static int read_route_method(reader_t *r, const ratel__yaml_node_t *v,
                             const char *field, rateld_route_t *route)
{
    char q[96];

    if (ratel__yaml_string(&r->ctx, v, field, route->method,
                           sizeof route->method))
        return -1;
    ratel__yaml_quote(route->method, strlen(route->method), q, sizeof q);
    if (!route->method[0])
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: is empty (leave it out to match any "
                                "method)",
                                field);
    for (const char *m = route->method; *m; m++)
        if (!(*m >= 'A' && *m <= 'Z') && !(*m >= '0' && *m <= '9') &&
            *m != '-' && *m != '_')
            return ratel__yaml_fail(&r->ctx, v->line,
                                    "%s: \"%s\" is not an upper-case method "
                                    "such as GET or POST",
                                    field, q);
    return 0;
}

/* A host name to match: "api.example.com" or "*.example.com", stored in
   lower case; no port, no spaces. */
static int read_route_host(reader_t *r, const ratel__yaml_node_t *v,
                           const char *field, rateld_route_t *route)
{
    char q[96];
    char *h = route->host;

    if (ratel__yaml_string(&r->ctx, v, field, route->host, sizeof route->host))
        return -1;
    ratel__yaml_quote(h, strlen(h), q, sizeof q);
    if (!h[0] || !strcmp(h, "*") || !strcmp(h, "*."))
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: \"%s\": give a host name such as "
                                "api.example.com or *.example.com (leave host "
                                "out to match any)",
                                field, q);
    for (char *c = h; *c; c++) {
        unsigned char ch = (unsigned char)*c;
        if (ch >= 'A' && ch <= 'Z')
            *c = (char)(ch + 32);
        else if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                   ch == '.' || ch == '-' || ch == '_' ||
                   (ch == '*' && c == h && c[1] == '.')))
            return ratel__yaml_fail(&r->ctx, v->line,
                                    "%s: \"%s\" is not a host name: letters, "
                                    "digits, '.', '-', and '*.' only at the "
                                    "start; no port",
                                    field, q);
    }
    return 0;
}

/* headers: {NAME: VALUE, ...}: each must be sent with exactly VALUE. */
static int read_route_headers(reader_t *r, const ratel__yaml_node_t *v,
                              const char *field, rateld_route_t *route)
{
    char item[320], what[96];

    if (v->type != RATEL__YAML_MAP)
        return ratel__yaml_fail(&r->ctx, v->line,
                                "%s: expected a mapping of header names to "
                                "values (e.g. {X-Tenant: gold}), got %s",
                                field,
                                ratel__yaml_describe(v, what, sizeof what));
    if (v->n / 2 > RATELD_ROUTE_HEADERS_MAX)
        return ratel__yaml_fail(&r->ctx, v->line, "%s: more than %d headers",
                                field, RATELD_ROUTE_HEADERS_MAX);
    for (size_t i = 0; i < v->n / 2; i++) {
        const ratel__yaml_node_t *k = v->items[2 * i],
                                 *val = v->items[2 * i + 1];
        rateld_match_header_t *h = &route->headers[i];
        ratel__yaml_join(item, sizeof item, field, k);
        if (k->len == 0 || k->len >= sizeof h->name)
            return ratel__yaml_fail(&r->ctx, k->line,
                                    "%s: a header name is 1..%zu characters",
                                    item, sizeof h->name - 1);
        for (size_t j = 0; j < k->len; j++)
            if (!rateld__tchar((unsigned char)k->text[j]))
                return ratel__yaml_fail(&r->ctx, k->line,
                                        "%s: not a valid header name", item);
        memcpy(h->name, k->text, k->len + 1);
        if (ratel__yaml_string(&r->ctx, val, item, h->value, sizeof h->value))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcasecmp(route->headers[j].name, h->name) == 0)
                return ratel__yaml_fail(&r->ctx, k->line,
                                        "%s: header named twice (any case)",
                                        item);
    }
    route->nheaders = v->n / 2;
    return 0;
}

static int read_route(reader_t *r, const ratel__yaml_node_t *node, size_t index,
                      rateld_route_t *route)
{
    static const char *const names[] = {"path", "method", "policies", "host",
                                        "headers"};
    const ratel__yaml_node_t *v[COUNT(names)];
    size_t order[COUNT(names)], n;
    char path[64], field[96];

    snprintf(path, sizeof path, "routes[%zu]", index);
    if (ratel__yaml_fields(&r->ctx, node, path, names, COUNT(names), v))
        return -1;
    n = ratel__yaml_by_line(v, COUNT(names), order);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        int rc;
        snprintf(field, sizeof field, "%s.%s", path, names[i]);
        rc = i == 0   ? read_route_path(r, v[i], field, route)
             : i == 1 ? read_route_method(r, v[i], field, route)
             : i == 2 ? read_route_policies(r, v[i], field, route)
             : i == 3 ? read_route_host(r, v[i], field, route)
                      : read_route_headers(r, v[i], field, route);
        if (rc)
            return -1;
    }
    if (!v[0])
        return ratel__yaml_fail(&r->ctx, node->line,
                                "%s.path: required (a path prefix such as "
                                "/api/ping)",
                                path);
    if (!v[2])
        return ratel__yaml_fail(
            &r->ctx, node->line,
            "%s.policies: required (a list of policy names)", path);
    return 0;
}

/* Whether two routes match exactly the same requests (headers compared
   in order: a reordered list is a different route, which is harmless). */
static int same_match(const rateld_route_t *a, const rateld_route_t *b)
{
    if (strcmp(a->prefix, b->prefix) || strcmp(a->method, b->method) ||
        strcmp(a->host, b->host) || a->nheaders != b->nheaders)
        return 0;
    for (size_t i = 0; i < a->nheaders; i++)
        if (strcasecmp(a->headers[i].name, b->headers[i].name) ||
            strcmp(a->headers[i].value, b->headers[i].value))
            return 0;
    return 1;
}

int rateld__read_routes(reader_t *r, const ratel__yaml_node_t *node)
{
    rateld_config_t *c = r->config;

    if (ratel__yaml_list(&r->ctx, node, "routes", ROUTES_MAX, "routes"))
        return -1;
    if (node->n == 0)
        return 0;
    c->routes = calloc(node->n, sizeof *c->routes);
    if (!c->routes)
        return ratel__yaml_fail(&r->ctx, node->line, "out of memory");
    for (size_t i = 0; i < node->n; i++) {
        rateld_route_t *route = &c->routes[i];
        if (read_route(r, node->items[i], i, route))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (same_match(&c->routes[j], route))
                return ratel__yaml_fail(&r->ctx, node->items[i]->line,
                                        "routes[%zu]: same path, method, host "
                                        "and headers as routes[%zu]",
                                        i, j);
        c->nroutes++;
    }
    return 0;
}

/* ------------------------------------------------------------- look-ups */

void rateld_config_policy_names(const rateld_config_t *config, char *buf,
                                size_t len)
{
    size_t n = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; config && i < config->npolicies; i++) {
        int m = snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
                         config->policies[i].name);
        if (m < 0 || (size_t)m >= len - n) {
            /* Cut: end with "..." where it fits. */
            if (len >= 4)
                memcpy(buf + len - 4, "...", 4);
            return;
        }
        n += (size_t)m;
    }
}

const rateld_policy_t *rateld_config_policy(const rateld_config_t *config,
                                            const char *name, size_t len)
{
    if (!config || !name)
        return NULL;
    for (size_t i = 0; i < config->npolicies; i++) {
        const rateld_policy_t *p = &config->policies[i];
        if (strlen(p->name) == len && memcmp(p->name, name, len) == 0)
            return p;
    }
    return NULL;
}

/* Whether the original Host (`host`, maybe with ":PORT") is `want` (lower
   case; "*.example.com" is any name under example.com). */
static int host_matches(const char *want, ratel_http_str_t host)
{
    size_t n = host.n, w;

    if (n > 0 && host.p[0] != '[') /* drop ":PORT" (not in IPv6 "[...]") */
        for (size_t i = n; i-- > 0;)
            if (host.p[i] == ':') {
                n = i;
                break;
            }
    if (n > 0 && host.p[n - 1] == '.') /* a fully qualified "name." */
        n--;
    if (want[0] == '*') {
        w = strlen(want + 1); /* ".example.com" */
        return n > w && strncasecmp(host.p + n - w, want + 1, w) == 0;
    }
    w = strlen(want);
    return n == w && strncasecmp(host.p, want, w) == 0;
}

static int headers_match(const rateld_route_t *r,
                         const ratel_http_request_t *req)
{
    for (size_t i = 0; i < r->nheaders; i++) {
        const ratel_http_str_t *h =
            req ? ratel_http_header(req, r->headers[i].name) : NULL;
        size_t n = strlen(r->headers[i].value), a = 0, b;
        if (!h)
            return 0;
        b = h->n;
        while (a < b && (h->p[a] == ' ' || h->p[a] == '\t'))
            a++;
        if (b - a != n || memcmp(h->p + a, r->headers[i].value, n) != 0)
            return 0;
    }
    return 1;
}

int rateld_config_route_header_twice(const rateld_config_t *config,
                                     const ratel_http_request_t *req,
                                     const char **name)
{
    for (size_t i = 0; config && req && i < config->nroutes; i++) {
        const rateld_route_t *r = &config->routes[i];
        for (size_t k = 0; k < r->nheaders; k++)
            if (ratel_http_header_count(req, r->headers[k].name, NULL) > 1) {
                *name = r->headers[k].name;
                return 1;
            }
    }
    return 0;
}

/* Whether `path` starts with the route's prefix at a segment boundary:
   "/api" is a prefix of "/api", "/api/x" and "/api?x", not of "/apix";
   and at a format suffix: "/api.json", as Rails and Spring (suffix
   patterns) serve "/sendCaptcha.json" as "/sendCaptcha". */
static int prefix_matches(const char *prefix, size_t n, ratel_http_str_t path)
{
    if (n == 0 || n > path.n || memcmp(path.p, prefix, n) != 0)
        return 0;
    return n == path.n || prefix[n - 1] == '/' || path.p[n] == '/' ||
           path.p[n] == '?' || path.p[n] == '.';
}

/*
 * How a route's method fits the request's: 2 the same method, 1 a GET
 * route for a HEAD request, 0 a route for any method, -1 no fit. HEAD is
 * GET without the body (RFC 9110), and Express, Rails, Spring and Go's
 * ServeMux run a GET handler for it: a GET route that HEAD left would
 * let `HEAD /sendCaptcha` send the SMS unlimited.
 */
static int method_fit(const char *want, ratel_http_str_t got)
{
    size_t n = strlen(want);

    if (!want[0])
        return 0;
    if (got.p && got.n == n && memcmp(want, got.p, n) == 0)
        return 2;
    if (got.p && got.n == 4 && memcmp(got.p, "HEAD", 4) == 0 &&
        strcmp(want, "GET") == 0)
        return 1;
    return -1;
}

/* How specific a route is beyond its prefix: host, method (its own
   before GET's for HEAD), headers. */
static size_t specificity(const rateld_route_t *r, int fit)
{
    return (r->host[0] ? 1000 : 0) + (size_t)fit * 100 + r->nheaders;
}

const rateld_route_t *rateld_config_route(const rateld_config_t *config,
                                          const rateld_route_query_t *q)
{
    const rateld_route_t *best = NULL;
    size_t best_len = 0, best_spec = 0;

    if (!config || !q || !q->path.p)
        return NULL;
    for (size_t i = 0; i < config->nroutes; i++) {
        const rateld_route_t *r = &config->routes[i];
        size_t n = strlen(r->prefix);
        if (!prefix_matches(r->prefix, n, q->path))
            continue;
        int fit = method_fit(r->method, q->method);
        if (fit < 0)
            continue;
        if (r->host[0] && !host_matches(r->host, q->host))
            continue;
        if (!headers_match(r, q->req))
            continue;
        if (!best || n > best_len ||
            (n == best_len && specificity(r, fit) > best_spec)) {
            best = r;
            best_len = n;
            best_spec = specificity(r, fit);
        }
    }
    return best;
}
