/*
 * test_origin.c - the original request of an auth request (rateld/origin.h):
 * each auth.gateway reads exactly its own headers, the unset default
 * refuses two candidates for a field, and no header a client adds (alone,
 * twice, in any case) makes a gateway's request read as another one.
 */
#include "test.h"

#include "rateld/origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define TRUSTED_PEER "127.0.0.1"
#define CLIENT_PEER "127.0.0.2"

/* An auth request as a test writes it. Header lines are "Name: value";
   NULL ends the list. */
typedef struct request_spec_s {
    const char *peer;
    const char *method;
    const char *target; /* "/v1/auth" or "/v1/auth/PATH?QUERY" */
    const char *headers[12];
} request_spec_t;

/* The request and the storage its strings point into. */
typedef struct built_s {
    ratel_http_request_t req;
    char lines[RATEL_HTTP_MAX_HEADERS][160];
} built_t;

static void set_peer(ratel_http_request_t *req, const char *addr)
{
    struct sockaddr_in *in = (struct sockaddr_in *)&req->peer;
    memset(&req->peer, 0, sizeof req->peer);
    in->sin_family = AF_INET;
    in->sin_port = htons(40000);
    if (inet_pton(AF_INET, addr, &in->sin_addr) != 1)
        ratel_test_fail(__FILE__, __LINE__, addr);
    req->peer_len = sizeof *in;
}

static ratel_http_str_t str(const char *s)
{
    return (ratel_http_str_t){s, strlen(s)};
}

/* Appends "Name: value" (value may be empty) to b's request. */
static void add_line(built_t *b, const char *line)
{
    size_t i = b->req.nheaders;
    char *copy = b->lines[i], *colon;

    snprintf(copy, sizeof b->lines[i], "%s", line);
    colon = strchr(copy, ':');
    if (!colon || i + 1 >= RATEL_HTTP_MAX_HEADERS) {
        ratel_test_fail(__FILE__, __LINE__, line);
        return;
    }
    *colon = '\0';
    colon++;
    while (*colon == ' ')
        colon++;
    b->req.headers[i].name = str(copy);
    b->req.headers[i].value = str(colon);
    b->req.nheaders++;
}

static void build(built_t *b, const request_spec_t *s)
{
    const char *q;

    memset(b, 0, sizeof *b);
    set_peer(&b->req, s->peer ? s->peer : TRUSTED_PEER);
    b->req.method = str(s->method ? s->method : "GET");
    b->req.target = str(s->target ? s->target : "/v1/auth");
    q = strchr(b->req.target.p, '?');
    b->req.path.p = b->req.target.p;
    b->req.path.n = q ? (size_t)(q - b->req.target.p) : b->req.target.n;
    b->req.query = q ? str(q + 1) : (ratel_http_str_t){NULL, 0};
    b->req.http_minor = 1;
    for (size_t i = 0; i < 12 && s->headers[i]; i++)
        add_line(b, s->headers[i]);
}

static ratel__trusted_t trusted_loopback(void)
{
    ratel__trusted_t t;
    char err[128];

    memset(&t, 0, sizeof t);
    if (ratel__cidr_parse(TRUSTED_PEER, &t.blocks[0], err, sizeof err) != 0)
        ratel_test_fail(__FILE__, __LINE__, err);
    t.n = 1;
    return t;
}

/* auth.gateway from a word: a gateway's name, "" for not set, or
   "M,U,H" for explicit header names. */
static rateld_gateway_t gateway(const char *word)
{
    rateld_gateway_t g;
    const char *c1 = strchr(word, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;

    memset(&g, 0, sizeof g);
    if (!word[0])
        return g;
    if (c2) {
        g.kind = RATELD_GATEWAY_HEADERS;
        snprintf(g.name, sizeof g.name, "headers");
        snprintf(g.header[0], sizeof g.header[0], "%.*s", (int)(c1 - word),
                 word);
        snprintf(g.header[1], sizeof g.header[1], "%.*s", (int)(c2 - c1 - 1),
                 c1 + 1);
        snprintf(g.header[2], sizeof g.header[2], "%s", c2 + 1);
        return g;
    }
    if (rateld_gateway_named(word, strlen(word), &g) != 0)
        ratel_test_fail(__FILE__, __LINE__, word);
    return g;
}

static int str_eq(ratel_http_str_t s, const char *want)
{
    return s.n == strlen(want) && (s.n == 0 || memcmp(s.p, want, s.n) == 0);
}

/* One case: the gateway, the request, and what rateld must read. */
typedef struct origin_case_s {
    const char *gateway;
    request_spec_t req;
    rateld_origin_result_t want;
    const char *method, *path, *query, *host; /* when RATELD_ORIGIN_OK */
} origin_case_t;

#define OK RATELD_ORIGIN_OK
#define AMBIGUOUS RATELD_ORIGIN_AMBIGUOUS
#define UNIDENTIFIED RATELD_ORIGIN_UNIDENTIFIED
#define BAD_URI RATELD_ORIGIN_BAD_URI
#define BAD_FIELD RATELD_ORIGIN_BAD_FIELD
/* A refusal: nothing read. */
#define NO(result) result, NULL, NULL, NULL, NULL
#define NGINX_SETS                                                             \
    "X-Original-URI: /api/ping?a=1", "X-Original-Method: GET",                 \
        "X-Forwarded-Host: site.example"
#define CADDY_SETS                                                             \
    "X-Forwarded-Uri: /api/ping?a=1", "X-Forwarded-Method: GET",               \
        "X-Forwarded-Host: site.example"

static const origin_case_t cases[] = {
    /* Not set: whichever name is given, once. */
    {"",
     {.headers = {NGINX_SETS}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"",
     {.headers = {CADDY_SETS}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"",
     {.method = "POST", .headers = {"X-Original-URI: /f", "Host: h"}},
     OK,
     "POST",
     "/f",
     "",
     "h"},
    {"",
     {.headers = {"X-Forwarded-Uri: /f", "X-Original-Host: o"}},
     OK,
     "GET",
     "/f",
     "",
     "o"},
    /* ... and never two candidates for a field. */
    {"",
     {.headers = {NGINX_SETS, "X-Forwarded-Uri: /sendCaptcha"}},
     NO(AMBIGUOUS)},
    {"",
     {.headers = {CADDY_SETS, "X-Original-URI: /sendCaptcha"}},
     NO(AMBIGUOUS)},
    {"",
     {.headers = {"X-Original-URI: /a", "X-Original-URI: /b"}},
     NO(AMBIGUOUS)},
    {"",
     {.headers = {"x-original-uri: /a", "X-ORIGINAL-URI: /a"}},
     NO(AMBIGUOUS)},
    {"",
     {.headers = {"X-Original-URI: ", "X-Forwarded-Uri: /b"}},
     NO(AMBIGUOUS)},
    {"", {.headers = {NGINX_SETS, "X-Forwarded-Method: POST"}}, NO(AMBIGUOUS)},
    {"", {.headers = {CADDY_SETS, "x-original-method: POST"}}, NO(AMBIGUOUS)},
    {"", {.headers = {NGINX_SETS, "X-Original-Host: evil"}}, NO(AMBIGUOUS)},
    /* One spelling of a method and of a host: upper-case method, lower-case
       host without port or final dot, whichever way the client wrote them
       (a route for GET or for site.example is not left by `get` or
       `SITE.example.:80`). */
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: get",
                  "X-Forwarded-Host: SITE.Example.:8080"}},
     OK,
     "GET",
     "/a",
     "",
     "site.example"},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: M-SEARCH",
                  "X-Forwarded-Host: [::1]:80"}},
     OK,
     "M-SEARCH",
     "/a",
     "",
     "[::1]"},
    {"caddy",
     {.headers = {"X-Forwarded-Uri: /a", "X-Forwarded-Method: GET",
                  "X-Forwarded-Host: 10.0.0.1"}},
     OK,
     "GET",
     "/a",
     "",
     "10.0.0.1"},
    /* A ';' separates query parameters as '&' does. */
    {"nginx",
     {.headers = {"X-Original-URI: /a?telephone=139;x=1;;y",
                  "X-Original-Method: GET"}},
     OK,
     "GET",
     "/a",
     "telephone=139&x=1&&y",
     ""},
    /* A backend with method-override middleware serves another method. */
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: POST",
                  "X-HTTP-Method-Override: DELETE"}},
     NO(AMBIGUOUS)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: POST",
                  "X-HTTP-Method-Override: post"}},
     OK,
     "POST",
     "/a",
     "",
     ""},
    /* ... and no value that is not one: refused, never another route. */
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: x\"level=error"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET /evil"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a",
                  "X-Original-Method: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {NGINX_SETS, "X-Forwarded-Host: a.example, evil"}},
     NO(AMBIGUOUS)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET",
                  "X-Forwarded-Host: site.example, evil"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET",
                  "X-Forwarded-Host: site%2eexample"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET",
                  "X-Forwarded-Host: site.example.."}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET",
                  "X-Forwarded-Host: site.example:80:90"}},
     NO(BAD_FIELD)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET",
                  "X-Forwarded-Host: [evil]"}},
     NO(BAD_FIELD)},
    {"",
     {.headers = {"X-Original-URI: /a", "Host: user@site.example"}},
     NO(BAD_FIELD)},
    {"", {.headers = {NGINX_SETS, "X-Forwarded-Host: evil"}}, NO(AMBIGUOUS)},
    {"",
     {.headers = {"X-Original-URI: /a", "Host: a", "Host: b"}},
     NO(AMBIGUOUS)},
    {"",
     {.target = "/v1/auth/a", .headers = {"X-Original-URI: /b"}},
     NO(AMBIGUOUS)},
    {"",
     {.target = "/v1/auth/a", .headers = {"X-Forwarded-Method: PUT"}},
     NO(AMBIGUOUS)},
    {"",
     {.target = "/v1/auth/a", .headers = {"X-Forwarded-Host: x"}},
     NO(AMBIGUOUS)},
    {"", {.headers = {"Host: h"}}, NO(UNIDENTIFIED)},
    {"", {.headers = {"X-Original-URI: "}}, NO(UNIDENTIFIED)},
    {"", {.headers = {"X-Original-URI: api/ping"}}, NO(UNIDENTIFIED)},
    {"", {.peer = CLIENT_PEER, .headers = {NGINX_SETS}}, NO(UNIDENTIFIED)},
    /* Not set, Envoy's form: the request itself, from any peer. */
    {"",
     {.peer = CLIENT_PEER,
      .method = "PUT",
      .target = "/v1/auth/api/ping?x=1",
      .headers = {"Host: e.example"}},
     OK,
     "PUT",
     "/api/ping",
     "x=1",
     "e.example"},

    /* nginx and HAProxy: X-Original-Method, X-Original-URI,
       X-Forwarded-Host; a client's other names are not read. */
    {"nginx",
     {.headers = {NGINX_SETS, "X-Forwarded-Uri: /sendCaptcha?telephone=1",
                  "X-Forwarded-Method: POST", "X-Original-Host: evil",
                  "Forwarded: host=evil;for=1.2.3.4", "Host: rateld"}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"haproxy",
     {.headers = {NGINX_SETS, "x-forwarded-uri: /sendCaptcha",
                  "X-Forwarded-Method: POST", "X-ORIGINAL-HOST: evil"}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"nginx",
     {.headers = {NGINX_SETS, "X-Original-URI: /sendCaptcha"}},
     NO(AMBIGUOUS)},
    {"nginx",
     {.headers = {NGINX_SETS, "x-original-method: POST"}},
     NO(AMBIGUOUS)},
    {"nginx",
     {.headers = {NGINX_SETS, "X-FORWARDED-HOST: evil"}},
     NO(AMBIGUOUS)},
    {"nginx", {.headers = {CADDY_SETS}}, NO(UNIDENTIFIED)},
    {"nginx",
     {.target = "/v1/auth/api/ping", .headers = {NGINX_SETS}},
     NO(UNIDENTIFIED)},
    {"nginx", {.target = "/v1/auth/api/ping"}, NO(UNIDENTIFIED)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Forwarded-Host: h"}},
     NO(UNIDENTIFIED)},
    {"nginx",
     {.headers = {"X-Original-URI: /a", "X-Original-Method: GET", "Host: h"}},
     OK,
     "GET",
     "/a",
     "",
     ""},
    {"nginx", {.peer = CLIENT_PEER, .headers = {NGINX_SETS}}, NO(UNIDENTIFIED)},

    /* Caddy and Traefik: X-Forwarded-*; X-Original-* are the client's. */
    {"caddy",
     {.headers = {CADDY_SETS, "X-Original-URI: /sendCaptcha?telephone=1",
                  "X-Original-Method: POST", "X-Original-Host: evil"}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"traefik",
     {.headers = {CADDY_SETS, "x-original-uri: /sendCaptcha",
                  "X-ORIGINAL-METHOD: POST", "Host: evil"}},
     OK,
     "GET",
     "/api/ping",
     "a=1",
     "site.example"},
    {"caddy",
     {.headers = {CADDY_SETS, "x-forwarded-uri: /sendCaptcha"}},
     NO(AMBIGUOUS)},
    {"caddy",
     {.headers = {CADDY_SETS, "X-Forwarded-Method: POST"}},
     NO(AMBIGUOUS)},
    {"traefik",
     {.headers = {CADDY_SETS, "X-Forwarded-Host: evil"}},
     NO(AMBIGUOUS)},
    {"caddy", {.headers = {NGINX_SETS}}, NO(UNIDENTIFIED)},

    /* Envoy: the path after /v1/auth, the own method, Host; no header. */
    {"envoy",
     {.method = "POST",
      .target = "/v1/auth/sendCode?x=1",
      .headers = {"Host: e.example", "X-Original-URI: /api/ping",
                  "X-Forwarded-Uri: /api/ping", "X-Original-Method: GET",
                  "X-Forwarded-Method: GET", "X-Forwarded-Host: evil",
                  "X-Original-Host: evil"}},
     OK,
     "POST",
     "/sendCode",
     "x=1",
     "e.example"},
    {"envoy", {.headers = {NGINX_SETS}}, NO(UNIDENTIFIED)},
    {"envoy",
     {.target = "/v1/auth/a", .headers = {"Host: a", "host: b"}},
     NO(AMBIGUOUS)},
    {"envoy", {.target = "/v1/auth/a"}, OK, "GET", "/a", "", ""},

    /* Explicit names: exactly those. */
    {"X-M,X-U,X-H",
     {.headers = {"x-u: /a?b", "X-M: PUT", "X-H: h", NGINX_SETS, CADDY_SETS}},
     OK,
     "PUT",
     "/a",
     "b",
     "h"},
    {"X-M,X-U,X-H",
     {.headers = {"X-U: /a", "X-M: GET", "X-U: /b"}},
     NO(AMBIGUOUS)},
    {"X-M,X-U,X-H", {.headers = {NGINX_SETS}}, NO(UNIDENTIFIED)},

    /* Every form reads the path's normal form (path.h); the query is left
       as sent. */
    {"nginx",
     {.headers = {"X-Original-URI: //%73endCaptcha;jsessionid=1?t=%31",
                  "X-Original-Method: GET"}},
     OK,
     "GET",
     "/sendCaptcha",
     "t=%31",
     ""},
    {"caddy",
     {.headers = {"X-Forwarded-Uri: /api/..;/sendCaptcha?t=1",
                  "X-Forwarded-Method: GET"}},
     OK,
     "GET",
     "/sendCaptcha",
     "t=1",
     ""},
    {"",
     {.headers = {"X-Original-URI: /api/%2e%2e/./sendCaptcha"}},
     OK,
     "GET",
     "/sendCaptcha",
     "",
     ""},
    {"envoy",
     {.target = "/v1/auth//api/../sendCaptcha/?t=1", .headers = {"Host: e"}},
     OK,
     "GET",
     "/sendCaptcha/",
     "t=1",
     "e"},
    {"envoy", {.target = "/v1/auth/"}, OK, "GET", "/", "", ""},
    /* ... and refuses what has none, naming no byte of it. */
    {"nginx",
     {.headers = {"X-Original-URI: /sendCaptcha%2F?t=1",
                  "X-Original-Method: GET"}},
     NO(BAD_URI)},
    {"", {.headers = {"X-Forwarded-Uri: /../sendCaptcha"}}, NO(BAD_URI)},
    {"caddy",
     {.headers = {"X-Forwarded-Uri: /sendCaptcha%", "X-Forwarded-Method: GET"}},
     NO(BAD_URI)},
    {"envoy", {.target = "/v1/auth/%2e%2e/sendCaptcha"}, NO(BAD_URI)},
    {"envoy", {.target = "/v1/auth/sendCaptcha\\x"}, NO(BAD_URI)},
    /* A raw '#' in the query, however the URI comes: backends cut it off
       there ("13900000001#1" is 13900000001 to them). An escaped one is
       data. */
    {"nginx",
     {.headers = {"X-Original-URI: /sendCaptcha?telephone=13900000001#1",
                  "X-Original-Method: GET"}},
     NO(BAD_URI)},
    {"haproxy",
     {.headers = {"X-Original-URI: /sendCaptcha?#telephone=1",
                  "X-Original-Method: GET"}},
     NO(BAD_URI)},
    {"caddy",
     {.headers = {"X-Forwarded-Uri: /sendCaptcha?telephone=1&x=#",
                  "X-Forwarded-Method: GET"}},
     NO(BAD_URI)},
    {"", {.headers = {"X-Forwarded-Uri: /sendCaptcha?t=1#2"}}, NO(BAD_URI)},
    {"", {.headers = {"X-Original-URI: /sendCaptcha?t=1;u=#"}}, NO(BAD_URI)},
    {"X-M,X-U,X-H",
     {.headers = {"X-U: /sendCaptcha?t=1#2", "X-M: GET"}},
     NO(BAD_URI)},
    {"envoy",
     {.target = "/v1/auth/sendCaptcha?telephone=13900000001#1"},
     NO(BAD_URI)},
    {"envoy", {.target = "/v1/auth/sendCaptcha#1"}, NO(BAD_URI)},
    {"nginx",
     {.headers = {"X-Original-URI: /sendCaptcha?t=1%232",
                  "X-Original-Method: GET"}},
     OK,
     "GET",
     "/sendCaptcha",
     "t=1%232",
     ""},
    /* Ambiguity and an untrusted peer come first. */
    {"",
     {.headers = {"X-Original-URI: /%2F", "X-Forwarded-Uri: /a"}},
     NO(AMBIGUOUS)},
    {"nginx",
     {.peer = CLIENT_PEER,
      .headers = {"X-Original-URI: /%2F", "X-Original-Method: GET"}},
     NO(UNIDENTIFIED)},
};

static const char *result_name(rateld_origin_result_t r)
{
    return r == OK          ? "ok"
           : r == AMBIGUOUS ? "ambiguous"
           : r == BAD_URI   ? "bad-uri"
           : r == BAD_FIELD ? "bad-field"
                            : "unidentified";
}

TEST(origin_every_gateway_table)
{
    ratel__trusted_t t = trusted_loopback();

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const origin_case_t *c = &cases[i];
        rateld_gateway_t g = gateway(c->gateway);
        rateld_origin_t o;
        char why[200], m[400];
        static built_t b;
        rateld_origin_result_t r;

        build(&b, &c->req);
        r = rateld_origin_read(&g, &t, &b.req, &o, why, sizeof why);
        if (r != c->want) {
            snprintf(m, sizeof m, "case %zu (%s): %s, want %s (%s)", i,
                     c->gateway, result_name(r), result_name(c->want), why);
            ratel_test_fail(__FILE__, __LINE__, m);
            continue;
        }
        if (r != OK) {
            /* The reason names headers, never what the client sent. */
            CHECK(why[0] != '\0');
            CHECK(strstr(why, "sendCaptcha") == NULL);
            CHECK(strstr(why, "evil") == NULL);
            continue;
        }
        if (!str_eq(o.method, c->method) || !str_eq(o.path, c->path) ||
            !str_eq(o.query, c->query) || !str_eq(o.host, c->host)) {
            snprintf(m, sizeof m, "case %zu (%s): read %.*s %.*s ? %.*s @ %.*s",
                     i, c->gateway, (int)o.method.n, o.method.p, (int)o.path.n,
                     o.path.p, (int)o.query.n, o.query.p, (int)o.host.n,
                     o.host.p);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

/* A NULL gateway is the unset default. */
TEST(origin_null_gateway_is_the_default)
{
    ratel__trusted_t t = trusted_loopback();
    request_spec_t s = {.headers = {NGINX_SETS, "X-Forwarded-Uri: /x"}};
    static built_t b;
    rateld_origin_t o;
    char why[200];

    build(&b, &s);
    CHECK_EQ(rateld_origin_read(NULL, &t, &b.req, &o, why, sizeof why),
             AMBIGUOUS);
    CHECK(strstr(why, "X-Original-URI") && strstr(why, "X-Forwarded-Uri"));
    s = (request_spec_t){
        .headers = {"X-Original-URI: /a", "x-original-uri: /b"}};
    build(&b, &s);
    CHECK_EQ(rateld_origin_read(NULL, &t, &b.req, &o, why, sizeof why),
             AMBIGUOUS);
    CHECK(strstr(why, "given more than once") != NULL);
}

/* Every header a client could add, in every case. */
static const char *const hostile_names[] = {"X-Original-URI",
                                            "X-Forwarded-Uri",
                                            "X-Original-Method",
                                            "X-Forwarded-Method",
                                            "X-Forwarded-Host",
                                            "X-Original-Host",
                                            "Host",
                                            "Forwarded",
                                            "X-Forwarded-For"};

static void spell(char *out, size_t cap, const char *name, int how)
{
    snprintf(out, cap, "%s", name);
    for (char *p = out; *p; p++)
        *p = (char)(how == 1   ? tolower((unsigned char)*p)
                    : how == 2 ? toupper((unsigned char)*p)
                               : *p);
}

/*
 * For each gateway (and the unset default, behind either form), the
 * request the gateway sends plus any client header, alone or twice, in
 * three spellings: rateld reads the gateway's request unchanged or refuses
 * it; it never reads another method, path, query or host.
 */
TEST(origin_no_client_header_steers_any_gateway)
{
    static const struct {
        const char *gateway;
        request_spec_t base;
    } forms[] = {
        {"nginx", {.headers = {NGINX_SETS, "Host: rateld"}}},
        {"haproxy", {.headers = {NGINX_SETS, "Host: rateld"}}},
        {"caddy", {.headers = {CADDY_SETS, "Host: site.example"}}},
        {"traefik", {.headers = {CADDY_SETS, "Host: site.example"}}},
        {"envoy",
         {.target = "/v1/auth/api/ping?a=1",
          .headers = {"Host: site.example"}}},
        {"", {.headers = {NGINX_SETS, "Host: rateld"}}},
        {"", {.headers = {CADDY_SETS, "Host: site.example"}}},
        {"",
         {.target = "/v1/auth/api/ping?a=1",
          .headers = {"Host: site.example"}}},
    };
    static const char *const values[] = {"/sendCaptcha?telephone=139", "POST",
                                         "evil.example"};
    ratel__trusted_t t = trusted_loopback();
    size_t tried = 0, refused = 0;

    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        rateld_gateway_t g = gateway(forms[f].gateway);
        for (size_t h = 0; h < sizeof hostile_names / sizeof *hostile_names;
             h++) {
            for (int how = 0; how < 3; how++) {
                for (size_t v = 0; v < 3; v++) {
                    for (int times = 1; times <= 4; times++) {
                        static built_t b;
                        char name[64], line[128], why[200], m[300];
                        rateld_origin_t o;
                        rateld_origin_result_t r;

                        request_spec_t s = forms[f].base;
                        spell(name, sizeof name, hostile_names[h], how);
                        snprintf(line, sizeof line, "%s: %s", name, values[v]);
                        /* times 1, 2: the client's copies after the
                           gateway's; 3, 4: one or two before them. */
                        for (int k = 2; k < times; k++) {
                            memmove(s.headers + 1, s.headers,
                                    sizeof s.headers - sizeof *s.headers);
                            s.headers[0] = line;
                        }
                        build(&b, &s);
                        for (int k = 0; k < times && times <= 2; k++)
                            add_line(&b, line);
                        r = rateld_origin_read(&g, &t, &b.req, &o, why,
                                               sizeof why);
                        tried++;
                        if (r != OK) {
                            refused++;
                            continue;
                        }
                        if (str_eq(o.method, "GET") &&
                            str_eq(o.path, "/api/ping") &&
                            str_eq(o.query, "a=1") &&
                            str_eq(o.host, "site.example"))
                            continue;
                        snprintf(m, sizeof m,
                                 "gateway \"%s\" form %zu: %s (variant %d) "
                                 "moved the "
                                 "request to %.*s %.*s @ %.*s",
                                 forms[f].gateway, f, line, times,
                                 (int)o.method.n, o.method.p, (int)o.path.n,
                                 o.path.p, (int)o.host.n, o.host.p);
                        ratel_test_fail(__FILE__, __LINE__, m);
                    }
                }
            }
        }
    }
    CHECK(tried > 1000);
    CHECK(refused > 0);
}

TEST(origin_gateway_names)
{
    static const char *const names[] = {"nginx", "haproxy", "caddy", "traefik",
                                        "envoy"};
    rateld_gateway_t g;
    char list[128];

    for (size_t i = 0; i < 5; i++) {
        memset(&g, 0xff, sizeof g);
        REQUIRE(rateld_gateway_named(names[i], strlen(names[i]), &g) == 0);
        CHECK(strcmp(g.name, names[i]) == 0);
    }
    CHECK_EQ(g.kind, RATELD_GATEWAY_PATH);
    CHECK(rateld_gateway_named("caddy", 5, &g) == 0);
    CHECK(strcmp(g.header[RATELD_ORIGIN_URI], "X-Forwarded-Uri") == 0);
    CHECK(rateld_gateway_named("nginx", 5, &g) == 0);
    CHECK(strcmp(g.header[RATELD_ORIGIN_URI], "X-Original-URI") == 0);
    CHECK(strcmp(g.header[RATELD_ORIGIN_HOST], "X-Forwarded-Host") == 0);
    CHECK(rateld_gateway_named("Nginx", 5, &g) == -1);
    CHECK(rateld_gateway_named("nginxx", 6, &g) == -1);
    CHECK(rateld_gateway_named("ngin", 4, &g) == -1);
    CHECK(strcmp(g.name, "nginx") == 0); /* untouched on failure */
    rateld_gateway_names(list, sizeof list);
    CHECK(strcmp(list, "nginx | haproxy | caddy | traefik | envoy") == 0);
    rateld_gateway_names(list, 8); /* cut, still a string */
    CHECK(strlen(list) < 8);
}

RATEL_SUITE(origin) = {
    {"origin_every_gateway_table", test_origin_every_gateway_table},
    {"origin_null_gateway_is_the_default",
     test_origin_null_gateway_is_the_default},
    {"origin_no_client_header_steers_any_gateway",
     test_origin_no_client_header_steers_any_gateway},
    {"origin_gateway_names", test_origin_gateway_names},
    {0, 0},
};
