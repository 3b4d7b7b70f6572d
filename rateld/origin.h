/*
 * origin.h - which request a gateway asks /v1/auth about: the original
 * method, URI and host.
 *
 * A gateway copies the client's own headers into its auth request and
 * adds the original request's method, URI and host under names of its
 * own. A client can send those names too, so rateld reads the original
 * request ONLY from the headers its gateway sets (auth.gateway), never
 * from a second name a client might add, and refuses a request that gives
 * one of them twice. Without auth.gateway it accepts every name a known
 * gateway uses, but refuses a request that carries more than one of them
 * for a field: then no client can steer the default either.
 */
#ifndef RATELD_ORIGIN_H
#define RATELD_ORIGIN_H

#include "app/address.h"
#include "app/yaml.h"
#include "rateld/path.h"
#include "http/http.h"

#include <stddef.h>

/* The fields of the original request a gateway names, in table order. */
enum {
    RATELD_ORIGIN_METHOD = 0,
    RATELD_ORIGIN_URI,
    RATELD_ORIGIN_HOST,
    RATELD_ORIGIN_FIELDS
};

/* Longest header name auth.gateway may give (with its NUL). */
#define RATELD_ORIGIN_HEADER_MAX 64

typedef enum rateld_gateway_kind_e {
    RATELD_GATEWAY_ANY = 0, /* not set: any known name, ambiguity refused */
    RATELD_GATEWAY_HEADERS, /* exactly the three headers in `header` */
    RATELD_GATEWAY_PATH     /* Envoy: /v1/auth + the original path, the
                               request's own method and Host */
} rateld_gateway_kind_t;

/* auth.gateway as configured. Zeroed: not set. */
typedef struct rateld_gateway_s {
    rateld_gateway_kind_t kind;
    char name[16]; /* "nginx", "caddy", ...; "headers" for explicit names;
                      "" when not set */
    char header[RATELD_ORIGIN_FIELDS][RATELD_ORIGIN_HEADER_MAX];
} rateld_gateway_t;

/* Longest original method (with its NUL): the registered ones have at
   most 17 bytes. */
#define RATELD_ORIGIN_METHOD_MAX 32

/* Longest original host (with its NUL): a DNS name has at most 253. */
#define RATELD_ORIGIN_HOST_MAX 256

/* The original request: the query points into the auth request's bytes
   (or, with each ';' made a '&', into query_buf);
   the path is its normal form (path.h), in path_buf; the method is in
   upper case, in method_buf; the host is in lower case without ":PORT"
   or a final dot, in host_buf. */
typedef struct rateld_origin_s {
    ratel_http_str_t method, path, query, host;
    char path_buf[RATELD_PATH_MAX];
    char method_buf[RATELD_ORIGIN_METHOD_MAX];
    char host_buf[RATELD_ORIGIN_HOST_MAX];
    char query_buf[RATELD_PATH_MAX]; /* the query when it has a ';' */
} rateld_origin_t;

typedef enum rateld_origin_result_e {
    RATELD_ORIGIN_OK = 0,
    RATELD_ORIGIN_UNIDENTIFIED, /* no original request, or from a peer not
                                   in trusted_proxies */
    RATELD_ORIGIN_AMBIGUOUS,    /* more than one candidate for a field */
    RATELD_ORIGIN_BAD_URI,      /* a path with no safe normal form, or a
                                   raw '#' in the URI */
    RATELD_ORIGIN_BAD_FIELD     /* a method that is not an HTTP token, or
                                   a host that is not a host name */
} rateld_origin_result_t;

/*
 * Reads the original request of auth request `req` as gateway `g` sends
 * it (NULL: not set), believing headers only from a peer in `trusted`.
 * Header names match case-insensitively. The path is normalised
 * (rateld_path_normalize) in every form, so that no spelling of a path
 * leaves its route; so are the method (upper case: `get` is GET, so
 * that no spelling of a method leaves a `method:` route on a backend
 * that reads methods without regard to case) and the host (lower case,
 * no port, no final dot), and so is the query: a ';' separates
 * parameters as a '&' does (Rack and older Python read "a=1;a=2" as two
 * parameters, so a query key reads "1" and sees "a" given twice). A raw '#'
 * anywhere in the URI is refused as a bad URI: backends cut the URI there,
 * so "t=139#1" would be another bucket than the 139 they serve. A method that
 * is not an HTTP token and a host that is not a name, an IPv4 address or a
 * bracketed IPv6 address (with an optional port) are refused: "a, b" names two
 * hosts, and a value no gateway would send must not fall through to another
 * route. A method-override header (X-HTTP-Method-Override, ...) naming
 * another method is ambiguous: a backend that honours it serves another
 * method than the request line's. Returns RATELD_ORIGIN_OK with *o filled, or
 * the reason it cannot with a sentence in `why` (header names and fixed words
 * only: never a value the client sent).
 */
rateld_origin_result_t rateld_origin_read(const rateld_gateway_t *g,
                                          const ratel__trusted_t *trusted,
                                          const ratel_http_request_t *req,
                                          rateld_origin_t *o, char *why,
                                          size_t whylen);

/*
 * Sets *out to the named gateway name[0..len) ("nginx", "caddy",
 * "traefik", "haproxy", "envoy"). Returns 0, or -1 for a name it does not
 * know (*out untouched).
 */
int rateld_gateway_named(const char *name, size_t len, rateld_gateway_t *out);

/* "nginx | caddy | ...": the names rateld_gateway_named knows. */
void rateld_gateway_names(char *out, size_t cap);

/*
 * Reads auth.gateway from `node` (at `path`): a gateway's name, or a
 * mapping {method: NAME, uri: NAME, host: NAME} of header names (all
 * three required, each an HTTP token). Returns 0, or -1 with
 * "FILE:LINE: PATH: reason" in ctx's err.
 */
int rateld_gateway_read(const ratel__yaml_ctx_t *ctx,
                        const ratel__yaml_node_t *node, const char *path,
                        rateld_gateway_t *out);

#endif /* RATELD_ORIGIN_H */
