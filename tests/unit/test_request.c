/*
 * test_request.c - rateld's view of a request: CIDR matching, the client
 * address behind trusted proxies, policy keys, and the RateLimit /
 * Retry-After header fields.
 */
#include "test.h"

#include "app/ratelimit.h"
#include "rateld/request.h"
#include "ratel.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "10.0.0.0/8", "2001:db8::/32", "1.2.3.4" (a /32) as a block. */
static ratel__cidr_t cidr(const char *text)
{
    ratel__cidr_t c;
    char addr[64];
    const char *slash = strchr(text, '/');
    size_t n = slash ? (size_t)(slash - text) : strlen(text);

    memset(&c, 0, sizeof c);
    memcpy(addr, text, n);
    addr[n] = '\0';
    if (inet_pton(AF_INET, addr, c.addr) == 1) {
        c.family = AF_INET;
        c.bits = 32;
    } else if (inet_pton(AF_INET6, addr, c.addr) == 1) {
        c.family = AF_INET6;
        c.bits = 128;
    } else {
        ratel_test_fail(__FILE__, __LINE__, text);
    }
    if (slash)
        c.bits = (unsigned)atoi(slash + 1);
    return c;
}

/* Sets the trusted blocks from a comma-separated list. */
static void set_trusted(ratel__trusted_t *trusted, const char *list)
{
    char copy[512], *save = NULL;

    trusted->n = 0;
    snprintf(copy, sizeof copy, "%s", list);
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
        trusted->blocks[trusted->n++] = cidr(tok);
}

static void set_peer(ratel_http_request_t *req, const char *addr)
{
    memset(&req->peer, 0, sizeof req->peer);
    struct sockaddr_in *in = (struct sockaddr_in *)&req->peer;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&req->peer;
    if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons(40000);
        req->peer_len = sizeof *in;
    } else if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(40000);
        req->peer_len = sizeof *in6;
    } else {
        ratel_test_fail(__FILE__, __LINE__, addr);
    }
}

static void add_header(ratel_http_request_t *req, const char *name,
                       const char *value)
{
    ratel_http_header_t *h = &req->headers[req->nheaders++];
    h->name.p = name;
    h->name.n = strlen(name);
    h->value.p = value;
    h->value.n = strlen(value);
}

static ratel__key_str_t kstr(const char *s)
{
    ratel__key_str_t r = {s, strlen(s)};
    return r;
}

/* ------------------------------------------------------------ CIDR */

TEST(request_cidr_match_table)
{
    static const struct {
        const char *block, *addr;
        int match;
    } cases[] = {
        {"10.0.0.0/8", "10.1.2.3", 1},
        {"10.0.0.0/8", "11.0.0.0", 0},
        {"10.0.0.0/8", "9.255.255.255", 0},
        {"192.168.1.0/24", "192.168.1.255", 1},
        {"192.168.1.0/24", "192.168.2.0", 0},
        {"172.16.0.0/12", "172.31.255.255", 1},
        {"172.16.0.0/12", "172.32.0.0", 0},
        {"10.0.0.0/9", "10.127.255.255", 1},
        {"10.0.0.0/9", "10.128.0.0", 0},
        {"1.2.3.4/32", "1.2.3.4", 1},
        {"1.2.3.4/32", "1.2.3.5", 0},
        {"1.2.3.4/31", "1.2.3.5", 1},
        {"0.0.0.0/0", "8.8.8.8", 1},
        {"2001:db8::/32", "2001:db8:ffff::1", 1},
        {"2001:db8::/32", "2001:db9::1", 0},
        {"fd00::/7", "fcff::1", 1},
        {"fd00::/8", "fc00::1", 0},
        {"2001:db8::/33", "2001:db8:7fff::1", 1},
        {"2001:db8::/33", "2001:db8:8000::1", 0},
        {"::1/128", "::1", 1},
        {"::1/128", "::2", 0},
        {"::/0", "2001:db8::1", 1},
        /* IPv4-mapped addresses are IPv4 addresses. */
        {"10.0.0.0/8", "::ffff:10.9.9.9", 1},
        {"10.0.0.0/8", "::ffff:11.9.9.9", 0},
        {"::ffff:10.0.0.0/104", "10.2.3.4", 1},
        {"::ffff:10.0.0.0/104", "11.2.3.4", 0},
        {"::ffff:10.0.0.0/104", "::ffff:10.2.3.4", 1},
        /* Families never mix otherwise. */
        {"::/0", "1.2.3.4", 0},
        {"0.0.0.0/0", "2001:db8::1", 0},
        {"::/96", "1.2.3.4", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel__cidr_t block = cidr(cases[i].block);
        uint8_t addr[16];
        int family = AF_INET;
        if (inet_pton(AF_INET, cases[i].addr, addr) != 1) {
            family = AF_INET6;
            REQUIRE(inet_pton(AF_INET6, cases[i].addr, addr) == 1);
        }
        int got = ratel__cidr_match(&block, 1, family, addr);
        if (got != cases[i].match) {
            char m[160];
            snprintf(m, sizeof m, "%s in %s: got %d", cases[i].addr,
                     cases[i].block, got);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

TEST(request_cidr_match_lists)
{
    ratel__cidr_t blocks[3] = {cidr("10.0.0.0/8"), cidr("2001:db8::/32"),
                               cidr("192.168.0.0/16")};
    uint8_t a4[4], a6[16];

    inet_pton(AF_INET, "192.168.4.4", a4);
    CHECK_EQ(ratel__cidr_match(blocks, 3, AF_INET, a4), 1);
    CHECK_EQ(ratel__cidr_match(blocks, 2, AF_INET, a4), 0);
    CHECK_EQ(ratel__cidr_match(blocks, 0, AF_INET, a4), 0);
    inet_pton(AF_INET6, "2001:db8::5", a6);
    CHECK_EQ(ratel__cidr_match(blocks, 3, AF_INET6, a6), 1);
    CHECK_EQ(ratel__cidr_match(blocks, 3, AF_UNIX, a6), 0);
}

/* ------------------------------------------------------ client address */

TEST(request_client_address_table)
{
    static const struct {
        const char *trusted; /* "" : none */
        const char *peer;
        const char *xff[3]; /* X-Forwarded-For fields, in order */
        const char *client;
    } cases[] = {
        /* An untrusted peer is the client, whatever it claims. */
        {"", "203.0.113.9", {"1.1.1.1"}, "203.0.113.9"},
        {"10.0.0.0/8", "198.51.100.7", {"1.2.3.4"}, "198.51.100.7"},
        /* A trusted peer: the rightmost untrusted entry. */
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.5"}, "203.0.113.5"},
        {"10.0.0.0/8",
         "10.0.0.1",
         {"6.6.6.6, 203.0.113.5, 10.0.0.2"},
         "203.0.113.5"},
        {"10.0.0.0/8,192.168.0.0/16",
         "10.0.0.1",
         {"203.0.113.5,192.168.1.1, 10.2.2.2"},
         "203.0.113.5"},
        /* All trusted: the leftmost; no entries: the peer. */
        {"10.0.0.0/8", "10.0.0.1", {"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
        {"10.0.0.0/8", "10.0.0.1", {NULL}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {""}, "10.0.0.1"},
        /* Not an address: the last trusted hop before it. */
        {"10.0.0.0/8",
         "10.0.0.1",
         {"203.0.113.5, garbage, 10.0.0.7"},
         "10.0.0.7"},
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.5, unknown"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.5:1234"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.5 x"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"[2001:db8::5]:443"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"fe80::1%eth0"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"[]"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"[1.2.3.4]"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"1.2.3.4.5"}, "10.0.0.1"},
        {"10.0.0.0/8", "10.0.0.1", {"_hidden, 10.0.0.3"}, "10.0.0.3"},
        /* Bracketed IPv6 without a port is an address. */
        {"10.0.0.0/8", "10.0.0.1", {"[2001:db8::5]"}, "2001:db8::5"},
        /* Spaces, tabs and empty list elements. */
        {"10.0.0.0/8",
         "10.0.0.1",
         {" \t203.0.113.5 \t,  10.0.0.2 "},
         "203.0.113.5"},
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.5,,10.0.0.2,"}, "203.0.113.5"},
        /* Several fields are one list, in order. */
        {"10.0.0.0/8", "10.0.0.1", {"203.0.113.1", "10.0.0.3"}, "203.0.113.1"},
        {"10.0.0.0/8",
         "10.0.0.1",
         {"1.1.1.1, 203.0.113.1", "10.0.0.3", "10.0.0.4, 10.0.0.5"},
         "203.0.113.1"},
        {"10.0.0.0/8",
         "10.0.0.1",
         {"10.0.0.9", "10.0.0.3", "10.0.0.4"},
         "10.0.0.9"},
        {"10.0.0.0/8", "10.0.0.1", {"7.7.7.7", "bad", "10.0.0.4"}, "10.0.0.4"},
        /* IPv6 peers and entries, written canonically. */
        {"2001:db8::/32", "2001:db8::1", {"2001:db9::7"}, "2001:db9::7"},
        {"2001:db8::/32", "2001:db9::1", {"1.2.3.4"}, "2001:db9::1"},
        {"2001:db8::/32",
         "2001:db8::1",
         {"2001:DB9:0:0::A, 2001:db8::2"},
         "2001:db9::a"},
        {"10.0.0.0/8", "10.0.0.1", {"::ffff:203.0.113.5"}, "203.0.113.5"},
        {"10.0.0.0/8", "10.0.0.1", {"::ffff:10.0.0.8"}, "10.0.0.8"},
        /* IPv4-mapped peers are IPv4. */
        {"10.0.0.0/8", "::ffff:10.0.0.1", {"203.0.113.5"}, "203.0.113.5"},
        {"10.0.0.0/8", "::ffff:198.51.100.7", {"1.2.3.4"}, "198.51.100.7"},
        {"", "::ffff:198.51.100.7", {NULL}, "198.51.100.7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static ratel__trusted_t config;
        static ratel_http_request_t req;
        char buf[RATEL__ADDR_MAX];
        memset(&config, 0, sizeof config);
        memset(&req, 0, sizeof req);
        set_trusted(&config, cases[i].trusted);
        set_peer(&req, cases[i].peer);
        add_header(&req, "Host", "example.com");
        for (int k = 0; k < 3 && cases[i].xff[k]; k++) {
            add_header(&req, "X-Forwarded-For", cases[i].xff[k]);
            add_header(&req, "Accept", "*/*"); /* fields in between */
        }
        size_t n = ratel__client_address(&config, &req, buf, sizeof buf);
        CHECK_EQ(n, strlen(buf));
        if (strcmp(buf, cases[i].client) != 0) {
            char m[200];
            snprintf(m, sizeof m, "case %zu: got \"%s\", want \"%s\"", i, buf,
                     cases[i].client);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
}

TEST(request_client_address_header_name_case_and_null_config)
{
    static ratel__trusted_t config;
    static ratel_http_request_t req;
    char buf[RATEL__ADDR_MAX];

    memset(&config, 0, sizeof config);
    memset(&req, 0, sizeof req);
    set_trusted(&config, "127.0.0.1/32,::1");
    set_peer(&req, "::1");
    add_header(&req, "x-forwarded-for", "198.51.100.20");
    CHECK_EQ(ratel__client_address(&config, &req, buf, sizeof buf), 13);
    CHECK(strcmp(buf, "198.51.100.20") == 0);
    /* Without trusted proxies nothing is trusted. */
    ratel__client_address(NULL, &req, buf, sizeof buf);
    CHECK(strcmp(buf, "::1") == 0);
    /* A peer that is not an IP address gives "". */
    memset(&req.peer, 0, sizeof req.peer);
    req.peer.ss_family = AF_UNIX;
    CHECK_EQ(ratel__client_address(&config, &req, buf, sizeof buf), 0);
    CHECK(buf[0] == '\0');
}

/* ----------------------------------------------------------------- keys */

static rateld_policy_t make_policy(const char *name,
                                   ratel__key_missing_t missing)
{
    rateld_policy_t p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.key.on_missing = missing;
    return p;
}

static void add_part(rateld_policy_t *p, ratel__key_kind_t kind,
                     const char *name)
{
    p->key.parts[p->key.n].kind = kind;
    snprintf(p->key.parts[p->key.n].name, sizeof p->key.parts[p->key.n].name,
             "%s", name ? name : "");
    p->key.n++;
}

/* rateld_policy_key into a large buffer; checks length and NUL. */
static long key_of(const rateld_policy_t *p, const rateld_view_t *v, char *buf,
                   size_t len)
{
    long n = rateld_policy_key(p, v, buf, len, NULL);
    if (n > 0 && (size_t)n != strlen(buf))
        ratel_test_fail(__FILE__, __LINE__, "length is not strlen(buf)");
    return n;
}

/* The address a client limit charges: IPv4 as it is, IPv6 by its /64. */
TEST(request_address_bucket_table)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"192.0.2.1", "192.0.2.1"},
        {"2001:db8:1:2::1", "2001:db8:1:2::/64"},
        {"2001:DB8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
        {"2001:0db8:0001:0002:0:0:0:9", "2001:db8:1:2::/64"},
        {"2001:db8:1:3::1", "2001:db8:1:3::/64"},
        {"::1", "::/64"},
        {"::ffff:192.0.2.7", "192.0.2.7"},
        {"", ""},
        {"not:an:address", "not:an:address"},
    };
    char buf[RATEL__ADDR_MAX], m[160];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = ratel__address_bucket(cases[i].in, buf, sizeof buf);
        if (strcmp(buf, cases[i].want) != 0 || n != strlen(buf)) {
            snprintf(m, sizeof m, "%s: [%s] %zu, want [%s]", cases[i].in, buf,
                     n, cases[i].want);
            ratel_test_fail(__FILE__, __LINE__, m);
        }
    }
    /* A short buffer is cut, NUL-terminated. */
    CHECK_EQ(ratel__address_bucket("2001:db8:1:2::1", buf, 5), 4);
    CHECK(strcmp(buf, "2001") == 0);
}

TEST(request_key_every_kind)
{
    static ratel_http_request_t req;
    rateld_view_t v = {0};
    char buf[RATELD_KEY_MAX + 1];
    rateld_policy_t p;

    memset(&req, 0, sizeof req);
    add_header(&req, "X-Api-Key", " \t abc123 \t");
    rateld_view_init(&v, &req);
    v.path = kstr("/v1/items/7");
    v.query = kstr("a=1&user=al%7Cice&name=J+Doe");
    v.client = "203.0.113.5";

    p = make_policy("login", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_IP, NULL);
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 17);
    CHECK(strcmp(buf, "login:203.0.113.5") == 0);

    p = make_policy("api", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_HEADER, "x-api-key");
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "api:abc123") == 0);

    p = make_policy("q", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_QUERY, "user");
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "q:al\\|ice") == 0);

    p = make_policy("q2", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_QUERY, "name");
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "q2:J Doe") == 0);

    p = make_policy("paths", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_PATH, NULL);
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "paths:/v1/items/7") == 0);

    p = make_policy("all", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_GLOBAL, NULL);
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 5);
    CHECK(strcmp(buf, "all:*") == 0);

    p = make_policy("combo", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_IP, NULL);
    add_part(&p, RATEL__KEY_HEADER, "X-Api-Key");
    add_part(&p, RATEL__KEY_PATH, NULL);
    add_part(&p, RATEL__KEY_GLOBAL, NULL);
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "combo:203.0.113.5|abc123|/v1/items/7|*") == 0);
}

TEST(request_key_host_cookie_json)
{
    static ratel_http_request_t req;
    rateld_view_t v = {0};
    char buf[RATELD_KEY_MAX + 1];
    const char *value;
    size_t n;
    rateld_policy_t p;
    cJSON *json = cJSON_Parse("{\"tel\":\"13800138000\",\"n\":42,\"f\":1.5,"
                              "\"b\":true,\"o\":{},\"z\":null}");

    REQUIRE(json != NULL);
    memset(&req, 0, sizeof req);
    add_header(&req, "Cookie", "theme=dark; session = \"s|1\" ;lang=en");
    add_header(&req, "cookie", "other=1");
    rateld_view_init(&v, &req);
    v.host = kstr("shop.example");
    v.json = json;

    p = make_policy("c", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_COOKIE, "session");
    add_part(&p, RATEL__KEY_HOST, NULL);
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "c:s\\|1|shop.example") == 0);

    p = make_policy("c2", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_COOKIE, "other");
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "c2:1") == 0);
    p = make_policy("c3", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_COOKIE, "sess"); /* a prefix is not the name */
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 0);

    /* json: strings, numbers as integers or shortest doubles, booleans;
       null and absent are missing; an object is malformed. */
    static const struct {
        const char *field, *want;
        long rc;
    } cases[] = {{"tel", "j:13800138000", 1},
                 {"n", "j:42", 1},
                 {"f", "j:1.5", 1},
                 {"b", "j:true", 1},
                 {"z", NULL, 0},
                 {"absent", NULL, 0},
                 {"o", NULL, -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long rc;
        p = make_policy("j", RATEL__KEY_MISSING_REJECT);
        add_part(&p, RATEL__KEY_JSON, cases[i].field);
        rc = key_of(&p, &v, buf, sizeof buf);
        CHECK_EQ(rc > 0 ? 1 : rc, cases[i].rc);
        if (cases[i].want)
            CHECK(strcmp(buf, cases[i].want) == 0);
    }
    /* A body that is not an object: every json: part is malformed. */
    v.json = NULL;
    v.json_error = 1;
    CHECK_EQ(ratel__key_part_value(&p.key.parts[0], &v, buf, sizeof buf, &value,
                                   &n, NULL),
             -1);
    /* A cookie given twice is malformed. */
    add_header(&req, "Cookie", "session=s2");
    p = make_policy("c", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_COOKIE, "session");
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), -1);
    cJSON_Delete(json);
}

TEST(request_override_first_match_wins)
{
    static ratel_http_request_t req;
    static char *gold[] = {"gold", "platinum"}, *keys[] = {"a", "b", "c"};
    rateld_override_t ov[2];
    rateld_view_t v = {0};
    rateld_policy_t p = make_policy("api", RATEL__KEY_MISSING_REJECT);

    memset(&req, 0, sizeof req);
    memset(ov, 0, sizeof ov);
    add_header(&req, "X-Tenant", "gold");
    rateld_view_init(&v, &req);
    ov[0].when.kind = RATEL__KEY_SELF;
    ov[0].values = keys;
    ov[0].nvalues = 3;
    ov[0].exempt = 1;
    ov[1].when.kind = RATEL__KEY_HEADER;
    strcpy(ov[1].when.name, "X-Tenant");
    ov[1].values = gold;
    ov[1].nvalues = 2;
    p.overrides = ov;
    p.noverrides = 2;
    CHECK(rateld_policy_override(&p, &v, "b", 1) == &ov[0]);
    CHECK(rateld_policy_override(&p, &v, "c", 1) == &ov[0]);
    CHECK(rateld_policy_override(&p, &v, "bb", 2) == &ov[1]);
    CHECK(rateld_policy_override(&p, &v, "", 0) == &ov[1]);
    req.nheaders = 0; /* no tenant: only the key list applies */
    CHECK(rateld_policy_override(&p, &v, "a", 1) == &ov[0]);
    CHECK(rateld_policy_override(&p, &v, "d", 1) == NULL);
}

TEST(request_key_escaping_keeps_parts_apart)
{
    static ratel_http_request_t r1, r2;
    rateld_view_t v1, v2;
    char k1[RATELD_KEY_MAX + 1], k2[RATELD_KEY_MAX + 1];
    rateld_policy_t p = make_policy("x", RATEL__KEY_MISSING_REJECT);

    add_part(&p, RATEL__KEY_HEADER, "A");
    add_part(&p, RATEL__KEY_HEADER, "B");
    memset(&v1, 0, sizeof v1);
    memset(&v2, 0, sizeof v2);
    rateld_view_init(&v1, &r1);
    rateld_view_init(&v2, &r2);

    /* ("a|b", "c") against ("a", "b|c"). */
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    add_header(&r1, "A", "a|b");
    add_header(&r1, "B", "c");
    add_header(&r2, "A", "a");
    add_header(&r2, "B", "b|c");
    CHECK(key_of(&p, &v1, k1, sizeof k1) > 0);
    CHECK(key_of(&p, &v2, k2, sizeof k2) > 0);
    CHECK(strcmp(k1, "x:a\\|b|c") == 0);
    CHECK(strcmp(k2, "x:a|b\\|c") == 0);
    CHECK(strcmp(k1, k2) != 0);

    /* ("a\\", "b") against ("a", "\\b"), and a backslash before a bar. */
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    add_header(&r1, "A", "a\\");
    add_header(&r1, "B", "b");
    add_header(&r2, "A", "a");
    add_header(&r2, "B", "\\b");
    CHECK(key_of(&p, &v1, k1, sizeof k1) > 0);
    CHECK(key_of(&p, &v2, k2, sizeof k2) > 0);
    CHECK(strcmp(k1, "x:a\\\\|b") == 0);
    CHECK(strcmp(k2, "x:a|\\\\b") == 0);
    memset(&r1, 0, sizeof r1);
    add_header(&r1, "A", "\\|");
    add_header(&r1, "B", "||");
    CHECK(key_of(&p, &v1, k1, sizeof k1) > 0);
    CHECK(strcmp(k1, "x:\\\\\\||\\|\\|") == 0);
}

TEST(request_key_missing_reject_or_shared)
{
    static ratel_http_request_t req;
    rateld_view_t v = {0};
    char buf[RATELD_KEY_MAX + 1];
    rateld_policy_t p;

    memset(&req, 0, sizeof req);
    add_header(&req, "X-Empty", " \t ");
    add_header(&req, "X-User", "bob");
    rateld_view_init(&v, &req);
    v.path = kstr("/");
    v.query = kstr("empty=&other=1");
    v.client = "198.51.100.1";

    static const struct {
        ratel__key_kind_t kind;
        const char *name;
    } missing[] = {
        {RATEL__KEY_HEADER, "X-Absent"},
        {RATEL__KEY_HEADER, "X-Empty"},
        {RATEL__KEY_QUERY, "absent"},
        {RATEL__KEY_QUERY, "empty"},
    };
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        p = make_policy("m", RATEL__KEY_MISSING_REJECT);
        add_part(&p, RATEL__KEY_IP, NULL);
        add_part(&p, missing[i].kind, missing[i].name);
        CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 0);
        p.key.on_missing = RATEL__KEY_MISSING_SHARED;
        CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
        CHECK(strcmp(buf, "m:198.51.100.1|-") == 0);
    }

    /* A missing client address and an empty path are missing too. */
    v.client = NULL;
    p = make_policy("ip", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_IP, NULL);
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 0);
    v.client = "";
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 0);
    p.key.on_missing = RATEL__KEY_MISSING_SHARED;
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "ip:-") == 0);
    v.path = kstr("");
    p = make_policy("path", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_PATH, NULL);
    CHECK_EQ(key_of(&p, &v, buf, sizeof buf), 0);

    /* Without headers at all, a header part is missing. */
    v.ctx = NULL;
    p = make_policy("h", RATEL__KEY_MISSING_SHARED);
    add_part(&p, RATEL__KEY_HEADER, "X-User");
    CHECK(key_of(&p, &v, buf, sizeof buf) > 0);
    CHECK(strcmp(buf, "h:-") == 0);
}

TEST(request_key_too_long_never_overflows)
{
    static ratel_http_request_t req;
    static char value[RATELD_KEY_MAX + 100];
    static char big[RATELD_KEY_MAX + 200];
    rateld_view_t v = {0};
    char small[32];
    rateld_policy_t p = make_policy("login", RATEL__KEY_MISSING_REJECT);

    add_part(&p, RATEL__KEY_IP, NULL);
    memset(&req, 0, sizeof req);
    memset(&v, 0, sizeof v);
    rateld_view_init(&v, &req);
    v.client = "203.0.113.5"; /* "login:203.0.113.5": 17 bytes */

    /* The buffer: exactly enough, then one byte short. */
    memset(small, 'Z', sizeof small);
    CHECK_EQ(key_of(&p, &v, small, 18), 17);
    memset(small, 'Z', sizeof small);
    CHECK_EQ(rateld_policy_key(&p, &v, small, 17, NULL), -1);
    CHECK(small[17] == 'Z');
    memset(small, 'Z', sizeof small);
    CHECK_EQ(rateld_policy_key(&p, &v, small, 1, NULL), -1);
    CHECK(small[1] == 'Z');
    CHECK_EQ(rateld_policy_key(&p, &v, small, 0, NULL), -1);

    /* RATELD_KEY_MAX bounds the value whatever the buffer: "h:" + up to
       RATELD_KEY_MAX bytes. */
    p = make_policy("h", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_HEADER, "X-Long");
    memset(value, 'v', RATELD_KEY_MAX);
    value[RATELD_KEY_MAX] = '\0';
    add_header(&req, "X-Long", value);
    CHECK_EQ(key_of(&p, &v, big, sizeof big), RATELD_KEY_MAX + 2);
    value[RATELD_KEY_MAX] = 'v';
    value[RATELD_KEY_MAX + 1] = '\0';
    req.headers[0].value.n = strlen(value);
    CHECK_EQ(rateld_policy_key(&p, &v, big, sizeof big, NULL), -1);
    /* Escapes count: a value that fits only unescaped is too long. */
    memset(value, '|', 600);
    value[600] = '\0';
    req.headers[0].value.n = 600;
    CHECK_EQ(rateld_policy_key(&p, &v, big, sizeof big, NULL), -1);

    /* A decoded query value longer than a key, or malformed. */
    p = make_policy("q", RATEL__KEY_MISSING_REJECT);
    add_part(&p, RATEL__KEY_QUERY, "u");
    memcpy(value, "u=", 2);
    memset(value + 2, 'q', RATELD_KEY_MAX + 10);
    value[RATELD_KEY_MAX + 12] = '\0';
    v.query = kstr(value);
    CHECK_EQ(rateld_policy_key(&p, &v, big, sizeof big, NULL), -1);
    v.query = kstr("u=%zz");
    CHECK_EQ(rateld_policy_key(&p, &v, big, sizeof big, NULL), -1);
}

/* ------------------------------------------------------ header fields */

static rateld_policy_t rules_policy(const char *name, const char *const *rules,
                                    size_t n)
{
    rateld_policy_t p = make_policy(name, RATEL__KEY_MISSING_REJECT);
    char err[256];
    if (ratel_policy_parse(&p.policy, rules, n, err, sizeof err) != 0)
        ratel_test_fail(__FILE__, __LINE__, err);
    return p;
}

static void check_text(const char *got, const char *want, int line)
{
    if (strcmp(got, want) != 0) {
        char m[512];
        snprintf(m, sizeof m, "got <%s>, want <%s>", got, want);
        ratel_test_fail(__FILE__, line, m);
    }
}

TEST(request_header_policy_field)
{
    static const char *const sms[] = {"1/1m", "10/1d"};
    static const char *const api[] = {"100/1s:gcra,burst=200"};
    static const char *const gcra[] = {"3/s:gcra", "7/1500ms", "5/1ms"};
    char buf[256];
    rateld_policy_t p;
    size_t n;

    p = rules_policy("sms", sms, 2);
    n = ratel__header_policy(p.name, &p.policy, buf, sizeof buf);
    check_text(buf, "\"sms-0\";q=1;w=60, \"sms-1\";q=10;w=86400", __LINE__);
    CHECK_EQ(n, strlen(buf));

    p = rules_policy("api", api, 1);
    ratel__header_policy(p.name, &p.policy, buf, sizeof buf);
    check_text(buf, "\"api-0\";q=100;w=1;ratel-burst=200", __LINE__);

    /* Burst equal to the limit is not repeated; windows round up. */
    p = rules_policy("mix.v2_x", gcra, 3);
    ratel__header_policy(p.name, &p.policy, buf, sizeof buf);
    check_text(buf,
               "\"mix.v2_x-0\";q=3;w=1, \"mix.v2_x-1\";q=7;w=2, "
               "\"mix.v2_x-2\";q=5;w=1",
               __LINE__);

    /* A name an sf-string must escape (never from a loaded config). */
    p = rules_policy("a\"b\\c\n", sms, 1);
    ratel__header_policy(p.name, &p.policy, buf, sizeof buf);
    check_text(buf, "\"a\\\"b\\\\c-0\";q=1;w=60", __LINE__);
}

TEST(request_header_policy_truncates_like_snprintf)
{
    static const char *const sms[] = {"1/1m", "10/1d"};
    rateld_policy_t p = rules_policy("sms", sms, 2);
    const char *full = "\"sms-0\";q=1;w=60, \"sms-1\";q=10;w=86400";
    char buf[64];

    for (size_t len = 0; len <= strlen(full) + 1; len++) {
        memset(buf, 'Z', sizeof buf);
        size_t n =
            ratel__header_policy(p.name, &p.policy, len ? buf : NULL, len);
        CHECK_EQ(n, strlen(full));
        if (len > 0) {
            CHECK_EQ(strlen(buf), len - 1 < n ? len - 1 : n);
            CHECK(strncmp(buf, full, strlen(buf)) == 0);
            CHECK(buf[len] == 'Z');
        }
    }
}

TEST(request_header_ratelimit_field)
{
    static const char *const sms[] = {"1/1m", "10/1d"};
    rateld_policy_t p = rules_policy("sms", sms, 2);
    ratel_decision_t d;
    char buf[128];
    size_t n;

    /* Allowed: t is when the binding rule is back to full, rounded up,
       not the key's reset (a later rule's). */
    memset(&d, 0, sizeof d);
    d.allowed = 1;
    d.rule = 1;
    d.limit = 10;
    d.remaining = 9;
    d.rule_reset_ms = 8639999;
    d.reset_after_ms = 9999999;
    n = ratel__header_ratelimit(p.name, &p.policy, &d, buf, sizeof buf);
    check_text(buf, "\"sms-1\";r=9;t=8640", __LINE__);
    CHECK_EQ(n, strlen(buf));

    /* Denied: t is the retry time, as Retry-After. */
    memset(&d, 0, sizeof d);
    d.allowed = 0;
    d.rule = 0;
    d.limit = 1;
    d.remaining = 0;
    d.retry_after_ms = 58001;
    d.reset_after_ms = 86400000;
    ratel__header_ratelimit(p.name, &p.policy, &d, buf, sizeof buf);
    check_text(buf, "\"sms-0\";r=0;t=59", __LINE__);
    CHECK_EQ(ratel__retry_after_seconds(&d), 59);

    /* An untouched key: t=0; negative values read 0; a rule index out of
       range names the first rule. */
    memset(&d, 0, sizeof d);
    d.allowed = 1;
    d.remaining = 1;
    ratel__header_ratelimit(p.name, &p.policy, &d, buf, sizeof buf);
    check_text(buf, "\"sms-0\";r=1;t=0", __LINE__);
    d.remaining = -3;
    d.rule = 7;
    d.rule_reset_ms = -10;
    ratel__header_ratelimit(p.name, &p.policy, &d, buf, sizeof buf);
    check_text(buf, "\"sms-0\";r=0;t=0", __LINE__);

    /* Cut to fit, full length returned. */
    memset(&d, 0, sizeof d);
    d.allowed = 1;
    d.remaining = 123;
    d.rule_reset_ms = 1000;
    CHECK_EQ(ratel__header_ratelimit(p.name, &p.policy, &d, buf, 8),
             17); /* r=123;t=1 */
    check_text(buf, "\"sms-0\"", __LINE__);
}

TEST(request_header_ratelimit_halves)
{
    static const char *const sms[] = {"1/1m", "10/1d"};
    rateld_policy_t p = rules_policy("sms", sms, 2);
    const char *full = "\"sms-1\";r=123456789012;t=86400";
    ratel_decision_t d;
    char buf[96], name[32], params[RATEL__HEADER_PARAMS_MAX + 1];
    size_t n;

    memset(&d, 0, sizeof d);
    d.allowed = 1;
    d.rule = 1;
    d.remaining = 123456789012;
    d.rule_reset_ms = 86399001;
    /* The name, then the parameters, make the whole item. */
    n = ratel__header_ratelimit_name("sms", &p.policy, d.rule, name,
                                     sizeof name);
    check_text(name, "\"sms-1\"", __LINE__);
    CHECK_EQ(n, strlen(name));
    n = ratel__header_ratelimit_params(&d, params, sizeof params);
    check_text(params, ";r=123456789012;t=86400", __LINE__);
    CHECK_EQ(n, strlen(params));
    /* A rule out of range names the first. */
    ratel__header_ratelimit_name("sms", &p.policy, 9, name, sizeof name);
    check_text(name, "\"sms-0\"", __LINE__);
    /* The largest values fit RATEL__HEADER_PARAMS_MAX. */
    d.allowed = 0;
    d.remaining = INT64_MAX;
    d.retry_after_ms = INT64_MAX;
    CHECK_EQ(ratel__header_ratelimit_params(&d, NULL, 0),
             (size_t)RATEL__HEADER_PARAMS_MAX);
    /* The whole item is cut like snprintf at every length. */
    d.allowed = 1;
    d.remaining = 123456789012;
    for (size_t len = 0; len <= strlen(full) + 1; len++) {
        memset(buf, 'Z', sizeof buf);
        n = ratel__header_ratelimit(p.name, &p.policy, &d, len ? buf : NULL,
                                    len);
        CHECK_EQ(n, strlen(full));
        if (len > 0) {
            CHECK_EQ(strlen(buf), len - 1 < n ? len - 1 : n);
            CHECK(strncmp(buf, full, strlen(buf)) == 0);
            CHECK(buf[len] == 'Z');
        }
    }
}

TEST(request_retry_after_rounds_up)
{
    static const struct {
        int64_t ms;
        long long s;
    } cases[] = {{-5, 1},
                 {0, 1},
                 {1, 1},
                 {999, 1},
                 {1000, 1},
                 {1001, 2},
                 {59999, 60},
                 {60000, 60},
                 {60001, 61},
                 {86400000, 86400},
                 {2592000000LL, 2592000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_decision_t d;
        memset(&d, 0, sizeof d);
        d.retry_after_ms = cases[i].ms;
        CHECK_EQ(ratel__retry_after_seconds(&d), cases[i].s);
    }
}

RATEL_SUITE(request) = {
    {"request_cidr_match_table", test_request_cidr_match_table},
    {"request_cidr_match_lists", test_request_cidr_match_lists},
    {"request_client_address_table", test_request_client_address_table},
    {"request_client_address_header_name_case_and_null_config",
     test_request_client_address_header_name_case_and_null_config},
    {"request_address_bucket_table", test_request_address_bucket_table},
    {"request_key_every_kind", test_request_key_every_kind},
    {"request_key_host_cookie_json", test_request_key_host_cookie_json},
    {"request_override_first_match_wins",
     test_request_override_first_match_wins},
    {"request_key_escaping_keeps_parts_apart",
     test_request_key_escaping_keeps_parts_apart},
    {"request_key_missing_reject_or_shared",
     test_request_key_missing_reject_or_shared},
    {"request_key_too_long_never_overflows",
     test_request_key_too_long_never_overflows},
    {"request_header_policy_field", test_request_header_policy_field},
    {"request_header_policy_truncates_like_snprintf",
     test_request_header_policy_truncates_like_snprintf},
    {"request_header_ratelimit_field", test_request_header_ratelimit_field},
    {"request_header_ratelimit_halves", test_request_header_ratelimit_halves},
    {"request_retry_after_rounds_up", test_request_retry_after_rounds_up},
    {0, 0},
};
