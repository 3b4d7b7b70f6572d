/*
 * origin.c - the original request of a gateway's auth request (origin.h):
 * the table of gateways and the headers each one sets, reading them, and
 * auth.gateway's configuration.
 */
#include "rateld/origin.h"

#include "rateld/config_private.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* What each field is, for messages. */
static const char *const field_key[RATELD_ORIGIN_FIELDS] = {"method", "uri",
                                                            "host"};

/*
 * The gateways rateld knows and the header each sets for each field
 * (method, URI, host). Each one REPLACES a client's header of that name:
 * nginx's proxy_set_header, Caddy's forward_auth and Traefik's ForwardAuth
 * for X-Forwarded-*, our HAProxy Lua for everything it sends. The header
 * names a gateway does not set may come from the client and are never
 * read. Envoy's ext_authz sends the original path after path_prefix, so
 * its entry has no headers.
 */
typedef struct gateway_def_s {
    const char *name;
    rateld_gateway_kind_t kind;
    const char *header[RATELD_ORIGIN_FIELDS];
} gateway_def_t;

static const gateway_def_t gateways[] = {
    {"nginx",
     RATELD_GATEWAY_HEADERS,
     {"X-Original-Method", "X-Original-URI", "X-Forwarded-Host"}},
    {"haproxy",
     RATELD_GATEWAY_HEADERS,
     {"X-Original-Method", "X-Original-URI", "X-Forwarded-Host"}},
    {"caddy",
     RATELD_GATEWAY_HEADERS,
     {"X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-Host"}},
    {"traefik",
     RATELD_GATEWAY_HEADERS,
     {"X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-Host"}},
    {"envoy", RATELD_GATEWAY_PATH, {NULL, NULL, NULL}},
};

/*
 * Without auth.gateway: every name a known gateway uses for the field.
 * More than one occurrence among them is ambiguous, because the gateway
 * set one and the client may have sent the other.
 */
static const char *const any_names[RATELD_ORIGIN_FIELDS][3] = {
    {"X-Original-Method", "X-Forwarded-Method", NULL},
    {"X-Original-URI", "X-Forwarded-Uri", NULL},
    {"X-Forwarded-Host", "X-Original-Host", NULL},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

int rateld_gateway_named(const char *name, size_t len, rateld_gateway_t *out)
{
    for (size_t i = 0; i < COUNT_OF(gateways); i++) {
        const gateway_def_t *g = &gateways[i];
        if (strlen(g->name) != len || strncmp(g->name, name, len) != 0)
            continue;
        memset(out, 0, sizeof *out);
        out->kind = g->kind;
        snprintf(out->name, sizeof out->name, "%s", g->name);
        for (int f = 0; f < RATELD_ORIGIN_FIELDS; f++)
            if (g->header[f])
                snprintf(out->header[f], sizeof out->header[f], "%s",
                         g->header[f]);
        return 0;
    }
    return -1;
}

void rateld_gateway_names(char *out, size_t cap)
{
    size_t used = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < COUNT_OF(gateways) && used < cap; i++) {
        int n = snprintf(out + used, cap - used, "%s%s", i ? " | " : "",
                         gateways[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* ------------------------------------------------------------ reading */

static int name_is(ratel_http_str_t name, const char *want)
{
    size_t n = strlen(want);
    return name.n == n && strncasecmp(name.p, want, n) == 0;
}

/*
 * How often the headers `names` (NULL-terminated) occur in `req`, empty
 * values included; *value gets the occurrence when there is exactly one.
 * When there are several, `why` says which names (never the values).
 */
static size_t occurrences(const ratel_http_request_t *req,
                          const char *const *names, ratel_http_str_t *value,
                          char *why, size_t whylen)
{
    const char *seen[2] = {NULL, NULL};
    size_t total = 0;

    for (size_t i = 0; i < req->nheaders; i++) {
        for (size_t k = 0; names[k]; k++) {
            if (!name_is(req->headers[i].name, names[k]))
                continue;
            if (total < 2)
                seen[total] = names[k];
            if (total++ == 0)
                *value = req->headers[i].value;
        }
    }
    if (total > 1 && seen[0] == seen[1])
        snprintf(why, whylen, "%s given more than once", seen[0]);
    else if (total > 1)
        snprintf(why, whylen, "both %s and %s given", seen[0], seen[1]);
    return total;
}

static void split_uri(ratel_http_str_t uri, rateld_origin_t *o)
{
    const char *q = memchr(uri.p, '?', uri.n);
    o->path.p = uri.p;
    o->path.n = q ? (size_t)(q - uri.p) : uri.n;
    o->query.p = q ? q + 1 : "";
    o->query.n = q ? uri.n - o->path.n - 1 : 0;
}

/* Whether the auth request's own path goes on after /v1/auth: Envoy's
   path_prefix form. */
static int path_form(const ratel_http_request_t *req)
{
    return req->path.n >= 9 && memcmp(req->path.p, "/v1/auth/", 9) == 0;
}

/* Envoy's form: /v1/auth + the original path, the request's own method
   and Host (one of it). */
static rateld_origin_result_t read_path(const ratel_http_request_t *req,
                                        rateld_origin_t *o, char *why,
                                        size_t whylen)
{
    static const char *const host[] = {"Host", NULL};
    ratel_http_str_t h = {"", 0};

    if (!path_form(req)) {
        snprintf(why, whylen,
                 "auth.gateway envoy sends the original path after "
                 "/v1/auth (path_prefix), and this request has none");
        return RATELD_ORIGIN_UNIDENTIFIED;
    }
    if (occurrences(req, host, &h, why, whylen) > 1)
        return RATELD_ORIGIN_AMBIGUOUS;
    /* The server cut the target at a '#' (parse.c): a fragment in a
       request line is refused here as in the header form's URI. */
    if (memchr(req->target.p, '#', req->target.n)) {
        snprintf(why, whylen,
                 "the original URI has a '#' (a fragment, which backends "
                 "cut off the URI; write %%23 for the character)");
        return RATELD_ORIGIN_BAD_URI;
    }
    o->method = req->method;
    o->host = h;
    o->path.p = req->path.p + 8;
    o->path.n = req->path.n - 8;
    o->query = req->query.p ? req->query : (ratel_http_str_t){"", 0};
    return RATELD_ORIGIN_OK;
}

/* The names read for field f: the gateway's one, or every known one. */
static void names_of(const rateld_gateway_t *g, int f, const char **names)
{
    if (g->kind == RATELD_GATEWAY_HEADERS) {
        names[0] = g->header[f];
        names[1] = NULL;
    } else {
        for (int k = 0; k < 3; k++)
            names[k] = any_names[f][k];
    }
}

/*
 * The header form. Every field is looked up first, so that a second
 * candidate is refused whatever else is wrong; then the URI must be there
 * and come from a trusted proxy. A gateway's method header is required
 * (each one always sends it); its host header may be absent (no host: a
 * route with `host:` does not match). Without auth.gateway, the method
 * and host fall back to the request's own.
 */
static rateld_origin_result_t read_headers(const rateld_gateway_t *g,
                                           const ratel__trusted_t *trusted,
                                           const ratel_http_request_t *req,
                                           rateld_origin_t *o, char *why,
                                           size_t whylen)
{
    static const char *const own_host[] = {"Host", NULL};
    ratel_http_str_t v[RATELD_ORIGIN_FIELDS];
    size_t n[RATELD_ORIGIN_FIELDS], given = 0;
    const char *names[3];

    for (int f = 0; f < RATELD_ORIGIN_FIELDS; f++) {
        v[f] = (ratel_http_str_t){"", 0};
        names_of(g, f, names);
        if ((n[f] = occurrences(req, names, &v[f], why, whylen)) > 1)
            return RATELD_ORIGIN_AMBIGUOUS;
        given += n[f];
    }
    if (path_form(req)) {
        if (g->kind == RATELD_GATEWAY_HEADERS) {
            snprintf(why, whylen,
                     "auth.gateway %s sends the original URI in %s, not in "
                     "a path after /v1/auth",
                     g->name, g->header[RATELD_ORIGIN_URI]);
            return RATELD_ORIGIN_UNIDENTIFIED;
        }
        if (given > 0) {
            snprintf(why, whylen,
                     "the original request is both in the path after "
                     "/v1/auth and in X-Original-* / X-Forwarded-* headers");
            return RATELD_ORIGIN_AMBIGUOUS;
        }
        return read_path(req, o, why, whylen);
    }
    if (v[RATELD_ORIGIN_URI].n == 0) {
        if (g->kind == RATELD_GATEWAY_HEADERS)
            snprintf(why, whylen, "no %s header (auth.gateway %s)",
                     g->header[RATELD_ORIGIN_URI], g->name);
        else
            snprintf(why, whylen,
                     "no X-Original-URI or X-Forwarded-Uri "
                     "header, and no path after /v1/auth/");
        return RATELD_ORIGIN_UNIDENTIFIED;
    }
    if (!ratel__peer_trusted(trusted, req)) {
        snprintf(why, whylen,
                 "forwarded-request headers from a peer not in "
                 "trusted_proxies are ignored");
        return RATELD_ORIGIN_UNIDENTIFIED;
    }
    if (v[RATELD_ORIGIN_URI].p[0] != '/') {
        snprintf(why, whylen, "the original URI does not start with '/'");
        return RATELD_ORIGIN_UNIDENTIFIED;
    }
    split_uri(v[RATELD_ORIGIN_URI], o);
    o->method = v[RATELD_ORIGIN_METHOD];
    o->host = v[RATELD_ORIGIN_HOST];
    if (o->method.n == 0 && g->kind == RATELD_GATEWAY_HEADERS) {
        snprintf(why, whylen, "no %s header (auth.gateway %s)",
                 g->header[RATELD_ORIGIN_METHOD], g->name);
        return RATELD_ORIGIN_UNIDENTIFIED;
    }
    if (o->method.n == 0)
        o->method = req->method;
    if (n[RATELD_ORIGIN_HOST] == 0 && g->kind != RATELD_GATEWAY_HEADERS &&
        occurrences(req, own_host, &o->host, why, whylen) > 1)
        return RATELD_ORIGIN_AMBIGUOUS;
    return RATELD_ORIGIN_OK;
}

/* The method in upper case, into o->method_buf: 0, or -1 when it is not
   an HTTP token (RFC 9110) of at most RATELD_ORIGIN_METHOD_MAX - 1
   bytes. */
static int method_form(rateld_origin_t *o)
{
    ratel_http_str_t m = o->method;

    if (m.n == 0 || m.n >= sizeof o->method_buf)
        return -1;
    for (size_t i = 0; i < m.n; i++) {
        unsigned char c = (unsigned char)m.p[i];
        if (!rateld__tchar(c))
            return -1;
        o->method_buf[i] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    o->method_buf[m.n] = '\0';
    o->method = (ratel_http_str_t){o->method_buf, m.n};
    return 0;
}

/* Whether p[0..n) is ":" and at most five digits, or nothing. */
static int port_form(const char *p, size_t n)
{
    if (n == 0)
        return 1;
    if (p[0] != ':' || n > 6)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

/* The length of the name or address at the start of h[0..n), 0 when it
   is neither: "[" IPv6 "]", or dot-separated labels of letters, digits,
   '-' and '_' (no empty one but after a final dot). */
static size_t host_part(const char *h, size_t n)
{
    size_t i = 0, label = 0;

    if (n > 0 && h[0] == '[') {
        for (i = 1; i < n && h[i] != ']'; i++)
            if (!strchr("0123456789abcdefABCDEF:.", h[i]))
                return 0;
        return i < n && i > 1 ? i + 1 : 0;
    }
    for (; i < n && h[i] != ':'; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == '.' && label == 0)
            return 0;
        if (c == '.') {
            label = 0;
            continue;
        }
        if (!(c == '-' || c == '_' || (c >= '0' && c <= '9') ||
              ((c | 32) >= 'a' && (c | 32) <= 'z')))
            return 0;
        label++;
    }
    return i;
}

/* The host in lower case without ":PORT" or a final dot, into
   o->host_buf: 0, or -1 when it is not a host (an empty one is no host:
   a route with `host:` does not match it). */
static int host_form(rateld_origin_t *o)
{
    ratel_http_str_t h = o->host;
    size_t n = host_part(h.p, h.n);

    if (h.n == 0)
        return 0;
    if (n == 0 || !port_form(h.p + n, h.n - n))
        return -1;
    if (h.p[n - 1] == '.')
        n--;
    if (n == 0 || n >= sizeof o->host_buf)
        return -1;
    for (size_t i = 0; i < n; i++)
        o->host_buf[i] =
            (char)(h.p[i] >= 'A' && h.p[i] <= 'Z' ? h.p[i] + 32 : h.p[i]);
    o->host_buf[n] = '\0';
    o->host = (ratel_http_str_t){o->host_buf, n};
    return 0;
}

/*
 * Whether the request names another method in a method-override header:
 * Express's method-override, Symfony and many APIs serve a POST carrying
 * "X-HTTP-Method-Override: DELETE" as a DELETE, so a route for DELETE
 * would be left by it; Express and Laravel read "?_method=DELETE" too.
 * The same method is no override.
 */
static int overridden(const ratel_http_request_t *req, const rateld_origin_t *o,
                      char *why, size_t whylen)
{
    static const char *const names[] = {"X-HTTP-Method-Override",
                                        "X-HTTP-Method", "X-Method-Override"};

    char m[RATELD_ORIGIN_METHOD_MAX];
    long n = ratel_http_query_param(o->query, "_method", m, sizeof m);

    if (n >= 0 ? (size_t)n != o->method.n ||
                     strncasecmp(m, o->method.p, (size_t)n) != 0
               : n < -1) {
        snprintf(why, whylen,
                 "the query's _method names another method than the "
                 "request's (a backend may serve either)");
        return 1;
    }
    for (size_t i = 0; i < COUNT_OF(names); i++) {
        const ratel_http_str_t *v = ratel_http_header(req, names[i]);
        if (v && (v->n != o->method.n ||
                  strncasecmp(v->p, o->method.p, v->n) != 0)) {
            snprintf(why, whylen,
                     "%s names another method than the request's (a "
                     "backend may serve either)",
                     names[i]);
            return 1;
        }
    }
    return 0;
}

/*
 * Whether the request carries a URL-override header: IIS's URL Rewrite
 * sets X-Original-URL, and Zend, older Symfony and ASP.NET applications
 * serve the path it (or X-Rewrite-URL) names instead of the request
 * line's, so a client's own copy would move it to another path than the
 * one rateld matched. No client has a reason to send one.
 */
static int rewritten(const ratel_http_request_t *req, char *why, size_t whylen)
{
    static const char *const names[] = {"X-Original-URL", "X-Rewrite-URL"};

    for (size_t i = 0; i < COUNT_OF(names); i++)
        if (ratel_http_header(req, names[i])) {
            snprintf(why, whylen,
                     "%s names a path some backends serve instead of the "
                     "request's",
                     names[i]);
            return 1;
        }
    return 0;
}

/* The method and host a route matches (method_form, host_form). */
static rateld_origin_result_t fields(const ratel_http_request_t *req,
                                     rateld_origin_t *o, char *why,
                                     size_t whylen)
{
    if (method_form(o) < 0) {
        snprintf(why, whylen,
                 "the original method is not an HTTP method (letters, "
                 "digits and !#$%%&'*+-.^_`|~, at most %d)",
                 RATELD_ORIGIN_METHOD_MAX - 1);
        return RATELD_ORIGIN_BAD_FIELD;
    }
    if (host_form(o) < 0) {
        snprintf(why, whylen,
                 "the original host is not one host name, IPv4 address or "
                 "[IPv6] address with an optional :PORT");
        return RATELD_ORIGIN_BAD_FIELD;
    }
    if (overridden(req, o, why, whylen) || rewritten(req, why, whylen))
        return RATELD_ORIGIN_AMBIGUOUS;
    return RATELD_ORIGIN_OK;
}

/*
 * The query with every ';' made a '&', in o->query_buf: some backends
 * (Rack before 3, Python before 3.9.2) separate parameters at either, so
 * "telephone=139;telephone=140" is a number given twice and
 * "telephone=139;x=1" is 139. Read as one value, each spelling would be
 * its own bucket while the backend served the same number. Where a
 * backend reads ';' as data, the bucket is only coarser, never another.
 *
 * A raw '#' is refused, as in the path: it starts the fragment, which a
 * client never sends, but nginx's $request_uri passes it on, and then
 * "telephone=139#1" is "139" to nginx's $arg_, PHP, Python's parse_qs and
 * Node's URL (they cut the URI there) and would be "139#1", a fresh bucket
 * per request, to a reader that did not. An escaped one (%23) is data to
 * every reader and stays.
 */
static rateld_origin_result_t query_form(rateld_origin_t *o, char *why,
                                         size_t whylen)
{
    ratel_http_str_t q = o->query;

    if (memchr(q.p, '#', q.n)) {
        snprintf(why, whylen,
                 "the original query has a '#' (a fragment, which backends "
                 "cut off the URI; write %%23 for the character)");
        return RATELD_ORIGIN_BAD_URI;
    }
    if (!memchr(q.p, ';', q.n))
        return RATELD_ORIGIN_OK;
    if (q.n >= sizeof o->query_buf) {
        snprintf(why, whylen, "the original query is longer than %zu bytes",
                 sizeof o->query_buf - 1);
        return RATELD_ORIGIN_BAD_URI;
    }
    for (size_t i = 0; i < q.n; i++)
        o->query_buf[i] = q.p[i] == ';' ? '&' : q.p[i];
    o->query_buf[q.n] = '\0';
    o->query = (ratel_http_str_t){o->query_buf, q.n};
    return RATELD_ORIGIN_OK;
}

/* The path a backend serves for the original one (path.h): what routes
   and the path key source see. */
static rateld_origin_result_t normalize(rateld_origin_t *o, char *why,
                                        size_t whylen)
{
    const char *reason = "";
    ssize_t n = rateld_path_normalize(o->path.p, o->path.n, o->path_buf,
                                      sizeof o->path_buf, &reason);

    if (n < 0) {
        snprintf(why, whylen, "the original path has %s", reason);
        return RATELD_ORIGIN_BAD_URI;
    }
    o->path = (ratel_http_str_t){o->path_buf, (size_t)n};
    return RATELD_ORIGIN_OK;
}

rateld_origin_result_t rateld_origin_read(const rateld_gateway_t *g,
                                          const ratel__trusted_t *trusted,
                                          const ratel_http_request_t *req,
                                          rateld_origin_t *o, char *why,
                                          size_t whylen)
{
    static const rateld_gateway_t any;
    rateld_origin_result_t r;

    o->path_buf[0] = '\0'; /* not all 8 KiB: set when normalised */
    o->method_buf[0] = o->host_buf[0] = '\0';
    o->method = (ratel_http_str_t){"", 0};
    o->path = o->query = o->host = o->method;
    if (whylen)
        why[0] = '\0';
    if (!g)
        g = &any;
    if (g->kind == RATELD_GATEWAY_PATH)
        r = read_path(req, o, why, whylen);
    else
        r = read_headers(g, trusted, req, o, why, whylen);
    if (r == RATELD_ORIGIN_OK)
        r = query_form(o, why, whylen);
    if (r == RATELD_ORIGIN_OK)
        r = fields(req, o, why, whylen);
    return r == RATELD_ORIGIN_OK ? normalize(o, why, whylen) : r;
}

/* ------------------------------------------------------ configuration */

/* A header name: an HTTP token (RFC 9110), not empty. */
static int header_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!rateld__tchar((unsigned char)*s))
            return 0;
    return 1;
}

/* {method: NAME, uri: NAME, host: NAME}: each an HTTP token, all three
   given, no name twice. */
static int read_names(const ratel__yaml_ctx_t *ctx,
                      const ratel__yaml_node_t *node, const char *path,
                      rateld_gateway_t *out)
{
    const ratel__yaml_node_t *v[RATELD_ORIGIN_FIELDS];
    rateld_gateway_t g;
    char sub[160], q[80];

    if (ratel__yaml_fields(ctx, node, path, field_key, RATELD_ORIGIN_FIELDS, v))
        return -1;
    memset(&g, 0, sizeof g);
    g.kind = RATELD_GATEWAY_HEADERS;
    snprintf(g.name, sizeof g.name, "headers");
    for (int f = 0; f < RATELD_ORIGIN_FIELDS; f++) {
        if (!v[f])
            return ratel__yaml_fail(
                ctx, node->line,
                "%s: needs method, uri and host: the headers your gateway "
                "sets to the original request's method, URI and host "
                "(missing: %s)",
                path, field_key[f]);
        snprintf(sub, sizeof sub, "%s.%s", path, field_key[f]);
        if (ratel__yaml_string(ctx, v[f], sub, g.header[f], sizeof g.header[f]))
            return -1;
        if (!header_name(g.header[f])) {
            ratel__yaml_quote(v[f]->text, v[f]->len, q, sizeof q);
            return ratel__yaml_fail(
                ctx, v[f]->line,
                "%s: \"%s\" is not a header name; accepted: letters, digits "
                "and !#$%%&'*+-.^_`|~",
                sub, q);
        }
        for (int e = 0; e < f; e++)
            if (strcasecmp(g.header[e], g.header[f]) == 0)
                return ratel__yaml_fail(
                    ctx, v[f]->line,
                    "%s: %s already carries the %s; each field needs its "
                    "own header",
                    sub, g.header[f], field_key[e]);
    }
    *out = g;
    return 0;
}

int rateld_gateway_read(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        rateld_gateway_t *out)
{
    char names[96], what[96];

    if (node->type == RATEL__YAML_MAP)
        return read_names(ctx, node, path, out);
    if (node->type == RATEL__YAML_SCALAR && !ratel__yaml_is_null(node) &&
        rateld_gateway_named(node->text, node->len, out) == 0)
        return 0;
    rateld_gateway_names(names, sizeof names);
    return ratel__yaml_fail(ctx, node->line,
                            "%s: %s is not a gateway; accepted: %s, or "
                            "{method: HEADER, uri: HEADER, host: HEADER}",
                            path, ratel__yaml_describe(node, what, sizeof what),
                            names);
}
