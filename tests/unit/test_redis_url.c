/*
 * test_redis_url.c - the Redis store's URL: every valid form, a long table
 * of malformed URLs, and the password kept out of every message.
 */
#include "test.h"

#include "ratel.h"
#include "store/redis_url.h"

#include <stdio.h>
#include <string.h>

/* Fails the test with the URL and its message when `cond` is false. */
#define CHECK_URL(cond, url, err)                                              \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char m_[2048];                                                     \
            snprintf(m_, sizeof m_, "%s: for \"%.200s\": \"%.1100s\"", #cond,  \
                     (url), (err));                                            \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

/* Parses a URL that must be valid; fails the test with the message if not. */
static int parse_ok(const char *url, ratel_redis_url_t *u)
{
    char err[1024] = "";
    int rc = ratel__redis_url_parse(url, u, err, sizeof err);
    CHECK_URL(rc == 0, url, err);
    return rc;
}

TEST(redis_url_defaults)
{
    ratel_redis_url_t u;

    REQUIRE(parse_ok("redis://localhost", &u) == 0);
    CHECK_EQ(u.cluster, 0);
    CHECK_EQ(u.naddrs, 1);
    CHECK(strcmp(u.addrs[0].host, "localhost") == 0);
    CHECK_EQ(u.addrs[0].port, 6379);
    CHECK(strcmp(u.username, "") == 0);
    CHECK(strcmp(u.password, "") == 0);
    CHECK_EQ(u.has_password, 0);
    CHECK_EQ(u.db, 0);
    CHECK_EQ(u.connect_timeout_ms, 0);
    CHECK_EQ(u.timeout_ms, 0);
    CHECK_EQ(u.pool, 0);
    CHECK_EQ(u.on_failure, RATEL_FAILURE_DEFAULT);
    CHECK_EQ(u.mode, RATEL_REDIS_AUTO);
    CHECK_EQ(u.deny_cache, -1);
}

TEST(redis_url_valid_forms)
{
    static const struct {
        const char *url;
        int cluster;
        size_t naddrs;
        const char *host0;
        int port0;
        const char *host_last;
        int port_last;
        int db;
    } cases[] = {
        {"redis://127.0.0.1", 0, 1, "127.0.0.1", 6379, "127.0.0.1", 6379, 0},
        {"redis://10.0.0.1:6380", 0, 1, "10.0.0.1", 6380, "10.0.0.1", 6380, 0},
        {"redis://h:1", 0, 1, "h", 1, "h", 1, 0},
        {"redis://h:65535", 0, 1, "h", 65535, "h", 65535, 0},
        {"redis://h:06379", 0, 1, "h", 6379, "h", 6379, 0},
        {"redis://redis-1.example.com:7000", 0, 1, "redis-1.example.com", 7000,
         "redis-1.example.com", 7000, 0},
        {"REDIS://Host", 0, 1, "Host", 6379, "Host", 6379, 0},
        {"redis://redis_cache_1:6379", 0, 1, "redis_cache_1", 6379,
         "redis_cache_1", 6379, 0},
        {"Redis+Cluster://n1", 1, 1, "n1", 6379, "n1", 6379, 0},
        {"redis://[::1]", 0, 1, "::1", 6379, "::1", 6379, 0},
        {"redis://[::1]:7001", 0, 1, "::1", 7001, "::1", 7001, 0},
        {"redis://[fe80::1:2]:7001,[::ffff:10.0.0.1]", 0, 2, "fe80::1:2", 7001,
         "::ffff:10.0.0.1", 6379, 0},
        {"redis://a,b:6380,[::1]:6381", 0, 3, "a", 6379, "::1", 6381, 0},
        {"redis://h:6379,h:6380", 0, 2, "h", 6379, "h", 6380, 0},
        {"redis://h/", 0, 1, "h", 6379, "h", 6379, 0},
        {"redis://h/0", 0, 1, "h", 6379, "h", 6379, 0},
        {"redis://h/7", 0, 1, "h", 6379, "h", 6379, 7},
        {"redis://h:1234/15", 0, 1, "h", 1234, "h", 1234, 15},
        {"redis://a,b/3?pool=2", 0, 2, "a", 6379, "b", 6379, 3},
        {"redis://h/?pool=2", 0, 1, "h", 6379, "h", 6379, 0},
        {"redis+cluster://n1:7000,n2:7001,n3:7002", 1, 3, "n1", 7000, "n3",
         7002, 0},
        {"redis+cluster://n1/", 1, 1, "n1", 6379, "n1", 6379, 0},
        {"redis+cluster://n1/0", 1, 1, "n1", 6379, "n1", 6379, 0},
        {"redis+cluster://:pw@n1:7000/0?pool=8", 1, 1, "n1", 7000, "n1", 7000,
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_redis_url_t u;
        if (parse_ok(cases[i].url, &u) != 0)
            continue;
        CHECK_EQ(u.cluster, cases[i].cluster);
        CHECK_EQ(u.naddrs, cases[i].naddrs);
        CHECK_URL(strcmp(u.addrs[0].host, cases[i].host0) == 0, cases[i].url,
                  u.addrs[0].host);
        CHECK_EQ(u.addrs[0].port, cases[i].port0);
        CHECK_URL(strcmp(u.addrs[u.naddrs - 1].host, cases[i].host_last) == 0,
                  cases[i].url, u.addrs[u.naddrs - 1].host);
        CHECK_EQ(u.addrs[u.naddrs - 1].port, cases[i].port_last);
        CHECK_EQ(u.db, cases[i].db);
    }
}

TEST(redis_url_credentials)
{
    static const struct {
        const char *url, *user, *password;
    } cases[] = {
        {"redis://:secret@h", "", "secret"},
        {"redis://alice:secret@h", "alice", "secret"},
        {"redis://alice:@h", "alice", ""},
        {"redis://:@h", "", ""},
        /* Percent escapes, either case of hex digits. */
        {"redis://al%69ce:p%40ss%2fw%2Fd%25@h", "alice", "p@ss/w/d%"},
        {"redis://a%3Ab:%20%7e@h", "a:b", " ~"},
        {"redis://:%C3%A9t%C3%A9@h", "", "\xc3\xa9t\xc3\xa9"},
        /* The last '@' ends the userinfo; ':' may repeat in the password. */
        {"redis://:p@ss@h", "", "p@ss"},
        {"redis://u:a:b:c@h", "u", "a:b:c"},
        {"redis://u:!$&'()*+,;=-._~@h", "u", "!$&'()*+,;=-._~"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_redis_url_t u;
        if (parse_ok(cases[i].url, &u) != 0)
            continue;
        CHECK_URL(strcmp(u.username, cases[i].user) == 0, cases[i].url,
                  u.username);
        CHECK_URL(strcmp(u.password, cases[i].password) == 0, cases[i].url,
                  u.password);
        CHECK_EQ(u.has_password, 1);
        CHECK_EQ(u.naddrs, 1);
        CHECK(strcmp(u.addrs[0].host, "h") == 0);
    }
}

TEST(redis_url_longest_credentials_and_host)
{
    char url[2200], host[300], user[300], pass[600];
    ratel_redis_url_t u;

    memset(host, 'h', 255);
    host[255] = '\0';
    memset(user, 'u', 255);
    user[255] = '\0';
    memset(pass, 'p', 511);
    pass[511] = '\0';
    snprintf(url, sizeof url, "redis://%s:%s@%s:1", user, pass, host);
    REQUIRE(parse_ok(url, &u) == 0);
    CHECK_EQ(strlen(u.username), 255);
    CHECK_EQ(strlen(u.password), 511);
    CHECK_EQ(strlen(u.addrs[0].host), 255);
    /* Escapes count once: 511 decoded bytes written as %70. */
    {
        char enc[1600];
        for (size_t i = 0; i < 511; i++)
            memcpy(enc + 3 * i, "%70", 3);
        enc[3 * 511] = '\0';
        snprintf(url, sizeof url, "redis://:%s@h", enc);
        REQUIRE(parse_ok(url, &u) == 0);
        CHECK(strcmp(u.password, pass) == 0);
    }
}

TEST(redis_url_query_options)
{
    ratel_redis_url_t u;

    REQUIRE(parse_ok("redis://h?connect_timeout_ms=1&timeout_ms=60000&pool=256"
                     "&on_failure=open&mode=module&deny_cache=1048576",
                     &u) == 0);
    CHECK_EQ(u.connect_timeout_ms, 1);
    CHECK_EQ(u.timeout_ms, 60000);
    CHECK_EQ(u.pool, 256);
    CHECK_EQ(u.on_failure, RATEL_FAILURE_OPEN);
    CHECK_EQ(u.mode, RATEL_REDIS_MODULE);
    CHECK_EQ(u.deny_cache, 1048576);

    REQUIRE(parse_ok("redis://h/2?deny_cache=0&mode=lua&on_failure=closed"
                     "&pool=1&timeout_ms=1&connect_timeout_ms=60000",
                     &u) == 0);
    CHECK_EQ(u.db, 2);
    CHECK_EQ(u.connect_timeout_ms, 60000);
    CHECK_EQ(u.timeout_ms, 1);
    CHECK_EQ(u.pool, 1);
    CHECK_EQ(u.on_failure, RATEL_FAILURE_CLOSED);
    CHECK_EQ(u.mode, RATEL_REDIS_LUA);
    CHECK_EQ(u.deny_cache, 0);

    REQUIRE(parse_ok("redis://h?on_failure=local&mode=auto&pool=0004", &u) ==
            0);
    CHECK_EQ(u.on_failure, RATEL_FAILURE_LOCAL);
    CHECK_EQ(u.mode, RATEL_REDIS_AUTO);
    CHECK_EQ(u.pool, 4);
    CHECK_EQ(u.deny_cache, -1);

    REQUIRE(parse_ok("redis://h?mode=function", &u) == 0);
    CHECK_EQ(u.mode, RATEL_REDIS_FUNCTION);

    REQUIRE(parse_ok("redis+cluster://a,b?timeout_ms=250", &u) == 0);
    CHECK_EQ(u.cluster, 1);
    CHECK_EQ(u.timeout_ms, 250);
}

TEST(redis_url_sixteen_addresses)
{
    char url[512];
    size_t n = (size_t)snprintf(url, sizeof url, "redis://");
    ratel_redis_url_t u;
    char err[1024] = "";

    for (int i = 0; i < RATEL_REDIS_MAX_ADDRS; i++)
        n += (size_t)snprintf(url + n, sizeof url - n, "%sn%d:%d", i ? "," : "",
                              i, 7000 + i);
    REQUIRE(parse_ok(url, &u) == 0);
    CHECK_EQ(u.naddrs, RATEL_REDIS_MAX_ADDRS);
    CHECK(strcmp(u.addrs[15].host, "n15") == 0);
    CHECK_EQ(u.addrs[15].port, 7015);
    snprintf(url + n, sizeof url - n, ",n16");
    CHECK_EQ(ratel__redis_url_parse(url, &u, err, sizeof err), RATEL_EINVAL);
    CHECK_URL(strstr(err, "at most 16") != NULL, url, err);
}

TEST(redis_url_malformed_names_the_problem)
{
    static const struct {
        const char *url, *says;
    } bad[] = {
        {"", "empty URL"},
        {"localhost:6379", "missing scheme"},
        {"//localhost", "missing scheme"},
        {"redis:localhost", "expected \"//\" after \"redis:\""},
        {"redis:/localhost", "expected \"//\""},
        {"://localhost", "missing scheme"},
        {"http://localhost", "unknown scheme \"http\""},
        {"unix:///tmp/redis.sock", "unknown scheme \"unix\""},
        {"redis-cluster://h", "unknown scheme \"redis-cluster\""},
        {"rediss:h", "expected \"//\" after \"rediss:\""},
        {"redis+sentinel:h/m", "expected \"//\" after \"redis+sentinel:\""},
        {"rediss+tls://h", "unknown scheme \"rediss+tls\"; the schemes are "
                           "redis://, redis+cluster://, redis+sentinel://, "
                           "rediss://, rediss+cluster:// and "
                           "rediss+sentinel://"},
        {"redis+sentinels://h/m", "unknown scheme \"redis+sentinels\""},
        {"sentinel://h/m", "unknown scheme \"sentinel\""},
        /* Sentinel: the path is the master name, required. */
        {"redis+sentinel://h", "no master name after '/'"},
        {"redis+sentinel://h/", "no master name after '/'"},
        {"redis+sentinel://h?db=1", "no master name after '/'"},
        {"rediss+sentinel://h/?db=1", "no master name after '/'"},
        {"redis+sentinel://h/m/0", "the master name \"m/0\" holds '/'"},
        {"redis+sentinel://h/m y", "a space"},
        {"redis+sentinel://h/m\x01", "byte \\x01"},
        {"redis+sentinel://h:0/m", "out of range"},
        {"redis+sentinel://h:,h2/m", "empty port; expected a port from 1 to "
                                     "65535 after ':' (or no ':' for 26379)"},
        {"redis+sentinel://h,h:26379/m", "given twice"},
        {"redis+sentinel://h/m?db=16",
         "query parameter db: 16 is out of range; accepted: 0..15"},
        {"redis+sentinel://h/m?db=x", "db: expected a whole number"},
        {"redis+sentinel://h/m?db=1&db=1", "db is given twice"},
        {"redis://h?db=1", "query parameter db is for redis+sentinel:// and "
                           "rediss+sentinel:// (whose path is the master "
                           "name); here write the db as the path: "
                           "redis://HOST/1"},
        {"rediss://h/2?db=3", "write the db as the path: rediss://HOST/3"},
        {"redis+cluster://h?db=0", "query parameter db is for "
                                   "redis+sentinel://"},
        {"redis://h?sentinel_password=x",
         "query parameter sentinel_password is for redis+sentinel:// and "
         "rediss+sentinel:// only"},
        {"rediss://h?sentinel_username=u&sentinel_password=p",
         "sentinel_username is for redis+sentinel://"},
        {"redis+sentinel://h/m?sentinel_username=u",
         "sentinel_username is given without sentinel_password"},
        {"redis+sentinel://h/m?sentinel_password=",
         "sentinel_password has no value"},
        {"redis+sentinel://h/m?sentinel_password=%zz",
         "query parameter sentinel_password: bad percent escape"},
        {"redis+sentinel://h/m?sentinel_password=a%00",
         "sentinel_password holds %00"},
        {"redis+sentinel://h/m?sentinel_password=a%0d",
         "sentinel_password: contains the control character 0x0d"},
        /* TLS settings need a TLS scheme. */
        {"redis://h?tls_ca_file=ca.crt",
         "query parameter tls_ca_file is a TLS setting and this URL is "
         "plain TCP: use rediss://"},
        {"redis+cluster://h?tls_insecure=yes", "tls_insecure is a TLS "
                                               "setting"},
        {"redis+sentinel://h/m?tls_server_name=x", "use rediss://"},
        {"redis://h?tls_cert_file=c&tls_key_file=k", "tls_cert_file is a TLS "
                                                     "setting"},
        {"redis://h?tls_insecure=no", "use rediss://"},
        {"rediss://h?tls_cert_file=c.crt",
         "query parameter tls_cert_file is given without tls_key_file: a "
         "client certificate needs its key; give tls_cert_file and "
         "tls_key_file together, or neither"},
        {"rediss+cluster://h?tls_key_file=c.key",
         "tls_key_file is given without tls_cert_file"},
        {"rediss://h?tls_insecure=true",
         "query parameter tls_insecure: expected yes | no, got \"true\""},
        {"rediss://h?tls_insecure=", "tls_insecure has no value"},
        {"rediss://h?tls_ca_file=", "tls_ca_file has no value"},
        {"rediss://h?tls_ca_file=a&tls_ca_file=b", "tls_ca_file is given "
                                                   "twice"},
        {"rediss://h?tls_ca_file=a%2", "tls_ca_file: bad percent escape"},
        {"rediss://h?tls_ca_file=a%0a", "tls_ca_file: contains the control "
                                        "character 0x0a"},
        {"rediss://h?tls_server_name=a/b",
         "query parameter tls_server_name: holds '/'; expected a host name "
         "or an IP address"},
        {"rediss://h?TLS_CA_FILE=x", "unknown query parameter "
                                     "\"TLS_CA_FILE\""},
        {"rediss://h?tls_ca=x", "unknown query parameter \"tls_ca\"; the "
                                "parameters are connect_timeout_ms, "
                                "timeout_ms, pool, on_failure, mode, "
                                "deny_cache, wait_replicas, db, tls_ca_file, "
                                "tls_cert_file, "
                                "tls_key_file, tls_server_name, tls_insecure, "
                                "sentinel_username, sentinel_password"},
        {"redis://", "no host"},
        {"redis://:pw@", "no host"},
        {"redis:///0", "no host"},
        {"redis://?pool=1", "no host"},
        {"redis://:6379", "has no host"},
        {"redis://h,", "address 2 is empty"},
        {"redis://,h", "address 1 is empty"},
        {"redis://a,,b", "address 2 is empty"},
        {"redis://h:", "empty port"},
        {"redis://h:0", "out of range"},
        {"redis://h:65536", "out of range"},
        {"redis://h:99999999999999999999999", "out of range"},
        {"redis://h:-1", "not a number"},
        {"redis://h:+1", "not a number"},
        {"redis://h:6379x", "not a number"},
        {"redis://h:1:2", "not a number"},
        {"redis://h!", "holds '!'"},
        {"redis://::1", "write it in brackets"},
        {"redis://fe80::1:6379", "write it in brackets"},
        {"redis://[::1", "no closing ']'"},
        {"redis://[]", "not an IPv6 address"},
        {"redis://[1.2.3.4]", "not an IPv6 address"},
        {"redis://[::g]", "holds 'g'"},
        {"redis://[::1%eth0]", "holds '%'"},
        {"redis://[::1]6379", "after ']'"},
        {"redis://[::1]:", "empty port"},
        {"redis://[::1]:x", "not a number"},
        {"redis://h,h", "given twice"},
        {"redis://h:6379,H", "given twice"},
        {"redis://a:1,b:2,a:01", "given twice (addresses 1 and 3"},
        {"redis://[::1],[::1]:6379", "given twice"},
        {"redis://h/16", "out of range"},
        {"redis://h/99999999999999999999", "out of range"},
        {"redis://h/-1", "not a number"},
        {"redis://h/db1", "not a number"},
        {"redis://h/1/2", "not a number"},
        {"redis://h/0/", "not a number"},
        {"redis+cluster://h/1", "Redis Cluster has only db 0"},
        {"redis+cluster://h/00", "Redis Cluster has only db 0"},
        {"redis+cluster://h/x", "Redis Cluster has only db 0"},
        {"redis://h?", "empty query"},
        {"redis://h/?", "empty query"},
        {"redis://h?&pool=1", "empty query parameter"},
        {"redis://h?pool=1&", "empty query parameter"},
        {"redis://h?pool=1&&mode=lua", "empty query parameter"},
        {"redis://h?foo=1",
         "unknown query parameter \"foo\"; the parameters are "
         "connect_timeout_ms, timeout_ms, pool, on_failure, mode, "
         "deny_cache"},
        {"redis://h?POOL=1", "unknown query parameter \"POOL\""},
        {"redis://h?=1", "unknown query parameter \"\""},
        {"redis://h?pool", "pool has no value"},
        {"redis://h?pool=", "pool has no value"},
        {"redis://h?pool=1&pool=1", "pool is given twice"},
        {"redis://h?pool=0",
         "query parameter pool: 0 is out of range; accepted: 1..256"},
        {"redis://h?pool=257",
         "query parameter pool: 257 is out of range; accepted: 1..256"},
        {"redis://h?pool=-1", "pool: expected a whole number, got \"-1\""},
        {"redis://h?pool=+1", "pool: expected a whole number, got \"+1\""},
        {"redis://h?pool=1x", "pool: expected a whole number, got \"1x\""},
        {"redis://h?pool=99999999999999999999999",
         "pool: \"99999999999999999999999\" is out of range; accepted: "
         "1..256"},
        {"redis://h?pool=1=2", "pool: expected a whole number, got \"1=2\""},
        {"redis://h?connect_timeout_ms=0", "accepted: 1..60000"},
        {"redis://h?connect_timeout_ms=60001", "accepted: 1..60000"},
        {"redis://h?timeout_ms=0", "accepted: 1..60000"},
        {"redis://h?timeout_ms=1.5",
         "timeout_ms: expected a whole number of milliseconds, got \"1.5\""},
        {"redis://h?deny_cache=1048577",
         "deny_cache: 1048577 is out of range; accepted: 0..1048576"},
        {"redis://h?deny_cache=-1", "deny_cache: expected a whole number"},
        {"redis://h?on_failure=", "on_failure has no value"},
        {"redis://h?on_failure=Open",
         "query parameter on_failure: expected open | closed | local, got "
         "\"Open\""},
        {"redis://h?mode=redis",
         "mode: expected auto | module | function | lua"},
        {"redis://h?mode=lua&mode=lua", "mode is given twice"},
        {"redis://h#frag", "fragment"},
        {"redis://h/0#", "fragment"},
        {"redis://h?pool=1#x", "fragment"},
        {"redis://h ", "a space"},
        {" redis://h", "a space"},
        {"redis://h:63 79", "a space"},
        {"redis://h\r\n", "byte \\x0d"},
        {"redis://h\tx", "byte \\x09"},
        {"redis://h\x7f", "byte \\x7f"},
        {"redis://h\xc3\xa9", "byte \\xc3"},
        {"redis://user@h", "a user name without a password"},
        {"redis://@h", "nothing before '@'"},
        {"redis://u%zz:pw@h", "bad percent escape in the user name"},
        {"redis://u%4:pw@h", "bad percent escape in the user name"},
        {"redis://u:pw%@h", "bad percent escape in the password"},
        {"redis://u:pw%2@h", "bad percent escape in the password"},
        {"redis://u:%00@h", "the password holds %00"},
        {"redis://u%00:pw@h", "the user name holds %00"},
        {"redis://u:p w@h", "the password holds a byte that must be"},
        {"redis://u:p/w@h", "the password holds a byte that must be"},
        {"redis://u:p?w@h", "the password holds a byte that must be"},
        {"redis://u:p#w@h", "the password holds a byte that must be"},
        {"redis://u:p\x01w@h", "the password holds a byte that must be"},
        {"redis://u/x:pw@h", "the user name holds '/': percent-encode it as "
                             "%2F"},
        {"redis://u\x01:pw@h", "the user name holds '\\x01'"},
        {"redis://h?pool=1@x", "a user name without a password"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel_redis_url_t u;
        char err[1024] = "";
        int rc;

        memset(&u, 0x5a, sizeof u);
        rc = ratel__redis_url_parse(bad[i].url, &u, err, sizeof err);
        CHECK_URL(rc == RATEL_EINVAL, bad[i].url, err);
        CHECK_URL(strncmp(err, "redis URL \"", 11) == 0, bad[i].url, err);
        CHECK_URL(strstr(err, bad[i].says) != NULL, bad[i].url, err);
        /* *out is written only on success. */
        for (size_t k = 0; k < sizeof u; k++)
            if (((const unsigned char *)&u)[k] != 0x5a) {
                CHECK_URL(!"out was written", bad[i].url, err);
                break;
            }
        /* Messages are one line of printable ASCII. */
        for (const char *p = err; *p; p++)
            CHECK_URL((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                      bad[i].url, err);
    }
}

TEST(redis_url_password_never_in_a_message)
{
    /* Each holds the password "Tr0ub4dor" (raw or escaped) and fails. */
    static const char *const bad[] = {
        "redis://:Tr0ub4dor@",
        "redis://:Tr0ub4dor@h:0",
        "redis://:Tr0ub4dor@h#x",
        "redis://alice:Tr0ub4dor@h/16",
        "redis://:Tr0ub4dor@h?pool=0",
        "redis://:Tr0ub4dor@h?nope=1",
        "redis://:Tr0ub4dor@h,h",
        "redis://:Tr0ub4dor@[::1",
        "redis://:Tr0ub4dor@h x",
        "redis://:Tr0ub4dor@h\n",
        "redis+cluster://:Tr0ub4dor@h/3",
        "rediss://:Tr0ub4dor@h:0",
        "redis+sentinel://:Tr0ub4dor@h",
        "rediss+sentinel://:Tr0ub4dor@h/m?db=99",
        "http://:Tr0ub4dor@h",
        "redis:/:Tr0ub4dor@h",
        "redis//:Tr0ub4dor@h",
        ":Tr0ub4dor@h",
        "redis://:Tr0ub4dor%zz@h",
        "redis://:Tr0ub4dor%00@h",
        "redis://:Tr0ub4dor/x@h",
        "redis://:Tr0ub4dor?x@h",
        "redis://:Tr0ub4dor#x@h",
        "redis://:Tr0 ub4dor@h",
        "redis://:%54r0ub4dor@h/x",
        "redis://:Tr0ub4dor@h@i:0",
        /* A password written where the user name goes. */
        "redis://Tr0ub4dor@h",
        "Tr0ub4dor@h",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel_redis_url_t u;
        char err[1024] = "";
        int rc = ratel__redis_url_parse(bad[i], &u, err, sizeof err);
        CHECK_URL(rc == RATEL_EINVAL, bad[i], err);
        CHECK_URL(strstr(err, "ub4d") == NULL, bad[i], err);
        CHECK_URL(strstr(err, "***@") != NULL, bad[i], err);
    }
    /* A password longer than the field: still hidden. */
    {
        char url[1200];
        ratel_redis_url_t u;
        char err[1024] = "";
        size_t n = (size_t)snprintf(url, sizeof url, "redis://:");
        while (n < 700)
            n += (size_t)snprintf(url + n, sizeof url - n, "Tr0ub4dor");
        snprintf(url + n, sizeof url - n, "@h");
        CHECK_EQ(ratel__redis_url_parse(url, &u, err, sizeof err),
                 RATEL_EINVAL);
        CHECK(strstr(err, "longer than 511 bytes") != NULL);
        CHECK(strstr(err, "ub4d") == NULL);
    }
}

/* The TLS and Sentinel schemes: what each turns on, and the Sentinels'
   own default port. */
TEST(redis_url_tls_and_sentinel_schemes)
{
    static const struct {
        const char *url;
        int cluster, tls, sentinel, port0;
        const char *master;
        int db;
    } cases[] = {
        {"rediss://h", 0, 1, 0, 6379, "", 0},
        {"REDISS://h:6380/2", 0, 1, 0, 6380, "", 2},
        {"rediss+cluster://a:7000,b:7001", 1, 1, 0, 7000, "", 0},
        {"Rediss+Cluster://a/0", 1, 1, 0, 6379, "", 0},
        {"redis+sentinel://s1/mymaster", 0, 0, 1, 26379, "mymaster", 0},
        {"redis+sentinel://s1:5000,s2,[::1]:5002/my-master.1?db=15", 0, 0, 1,
         5000, "my-master.1", 15},
        {"rediss+sentinel://:pw@s1/m?db=0", 0, 1, 1, 26379, "m", 0},
        {"REDIS+SENTINEL://s1/Master_Name", 0, 0, 1, 26379, "Master_Name", 0},
        {"redis+sentinel://s1/!$'()*+,;:=", 0, 0, 1, 26379, "!$'()*+,;:=", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel_redis_url_t u;
        if (parse_ok(cases[i].url, &u) != 0)
            continue;
        CHECK_EQ(u.cluster, cases[i].cluster);
        CHECK_EQ(u.tls, cases[i].tls);
        CHECK_EQ(u.sentinel, cases[i].sentinel);
        CHECK_EQ(u.addrs[0].port, cases[i].port0);
        CHECK_URL(strcmp(u.master_name, cases[i].master) == 0, cases[i].url,
                  u.master_name);
        CHECK_EQ(u.db, cases[i].db);
    }
    /* The longest master name, and one byte more. */
    {
        char url[400], name[300], err[1024] = "";
        ratel_redis_url_t u;
        memset(name, 'm', 255);
        name[255] = '\0';
        snprintf(url, sizeof url, "redis+sentinel://h/%s", name);
        REQUIRE(parse_ok(url, &u) == 0);
        CHECK(strcmp(u.master_name, name) == 0);
        snprintf(url, sizeof url, "redis+sentinel://h/%sm", name);
        CHECK_EQ(ratel__redis_url_parse(url, &u, err, sizeof err),
                 RATEL_EINVAL);
        CHECK_URL(strstr(err, "is longer than 255 bytes") != NULL, url, err);
    }
    /* With Sentinel the userinfo is the data nodes'. */
    {
        ratel_redis_url_t u;
        REQUIRE(parse_ok("redis+sentinel://app:s%40cret@s1:26379,s2:26380/"
                         "mymaster?sentinel_username=sen&sentinel_password="
                         "p%26w%3D",
                         &u) == 0);
        CHECK(strcmp(u.username, "app") == 0);
        CHECK(strcmp(u.password, "s@cret") == 0);
        CHECK(strcmp(u.sentinel_username, "sen") == 0);
        CHECK(strcmp(u.sentinel_password, "p&w=") == 0);
        CHECK_EQ(u.naddrs, 2);
        CHECK_EQ(u.addrs[1].port, 26380);
        REQUIRE(parse_ok("redis+sentinel://s1/m?sentinel_password=x", &u) == 0);
        CHECK(strcmp(u.sentinel_username, "") == 0);
        CHECK(strcmp(u.sentinel_password, "x") == 0);
    }
}

/* The TLS settings: read, percent-decoded, and copied into the options. */
TEST(redis_url_tls_settings)
{
    ratel_redis_url_t u;
    ratel_redis_options_t o;

    REQUIRE(parse_ok("rediss://h:6380?tls_ca_file=/etc/ssl/my%20ca.crt&"
                     "tls_cert_file=client.crt&tls_key_file=client.key&"
                     "tls_server_name=redis.example.com&timeout_ms=500",
                     &u) == 0);
    CHECK(strcmp(u.tls_ca_file, "/etc/ssl/my ca.crt") == 0);
    CHECK(strcmp(u.tls_cert_file, "client.crt") == 0);
    CHECK(strcmp(u.tls_key_file, "client.key") == 0);
    CHECK(strcmp(u.tls_server_name, "redis.example.com") == 0);
    CHECK_EQ(u.tls_insecure, 0);
    CHECK_EQ(u.timeout_ms, 500);
    memset(&o, 0, sizeof o);
    ratel__redis_query_to_options(&u, &o);
    CHECK(o.tls_ca_file == u.tls_ca_file);
    CHECK(o.tls_cert_file == u.tls_cert_file);
    CHECK(o.tls_key_file == u.tls_key_file);
    CHECK(o.tls_server_name == u.tls_server_name);
    CHECK_EQ(o.tls_insecure, 0);
    CHECK(o.sentinel_username == NULL && o.sentinel_password == NULL);
    CHECK_EQ(o.command_timeout_ms, 500);

    REQUIRE(parse_ok("rediss+cluster://a,b?tls_insecure=yes&"
                     "tls_server_name=10.0.0.1",
                     &u) == 0);
    CHECK_EQ(u.tls_insecure, 1);
    CHECK(strcmp(u.tls_server_name, "10.0.0.1") == 0);
    CHECK(strcmp(u.tls_ca_file, "") == 0);
    memset(&o, 0, sizeof o);
    ratel__redis_query_to_options(&u, &o);
    CHECK_EQ(o.tls_insecure, 1);
    CHECK(o.tls_ca_file == NULL);
    REQUIRE(parse_ok("rediss://h?tls_insecure=no", &u) == 0);
    CHECK_EQ(u.tls_insecure, 0);

    REQUIRE(parse_ok("rediss+sentinel://s/m?sentinel_username=a&"
                     "sentinel_password=b&tls_ca_file=ca.pem&db=3",
                     &u) == 0);
    memset(&o, 0, sizeof o);
    ratel__redis_query_to_options(&u, &o);
    CHECK(o.sentinel_username && strcmp(o.sentinel_username, "a") == 0);
    CHECK(o.sentinel_password && strcmp(o.sentinel_password, "b") == 0);
    CHECK(o.tls_ca_file && strcmp(o.tls_ca_file, "ca.pem") == 0);
    CHECK_EQ(u.db, 3);

    /* A file name as long as the field holds, and one byte more. */
    {
        char url[2400], name[1100], err[1024] = "";
        memset(name, 'f', RATEL_REDIS_PATH_MAX - 1);
        name[RATEL_REDIS_PATH_MAX - 1] = '\0';
        snprintf(url, sizeof url, "rediss://h?tls_ca_file=%s", name);
        REQUIRE(parse_ok(url, &u) == 0);
        CHECK_EQ(strlen(u.tls_ca_file), RATEL_REDIS_PATH_MAX - 1);
        snprintf(url, sizeof url, "rediss://h?tls_ca_file=%sf", name);
        CHECK_EQ(ratel__redis_url_parse(url, &u, err, sizeof err),
                 RATEL_EINVAL);
        CHECK_URL(strstr(err, "tls_ca_file: 1024 bytes long; at most 1023") !=
                      NULL,
                  url, err);
    }
}

/* The Sentinels' password is never in a message, and masked in logs. */
TEST(redis_url_sentinel_password_hidden)
{
    static const char *const bad[] = {
        "redis+sentinel://h/m?sentinel_password=Tr0ub4dor&db=99",
        "redis+sentinel://h/m?sentinel_password=Tr0ub4dor&nope=1",
        "redis+sentinel://h/m?sentinel_password=Tr0ub4dor%zz",
        "redis+sentinel://h/m?sentinel_password=Tr0ub4dor%01",
        "redis://h?sentinel_password=Tr0ub4dor",
        "redis+sentinel://h/m?sentinel_password=Tr0ub4dor&"
        "sentinel_password=Tr0ub4dor",
    };
    char out[256];

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratel_redis_url_t u;
        char err[1024] = "";
        int rc = ratel__redis_url_parse(bad[i], &u, err, sizeof err);
        CHECK_URL(rc == RATEL_EINVAL, bad[i], err);
        CHECK_URL(strstr(err, "ub4d") == NULL, bad[i], err);
        CHECK_URL(strstr(err, "sentinel_password=***") != NULL, bad[i], err);
    }
    CHECK_EQ(ratel__url_mask("rediss+sentinel://u:pw@s1:26379,s2/mymaster?"
                             "sentinel_username=sen&sentinel_password=Tr0ub&"
                             "db=2",
                             out, sizeof out),
             1);
    CHECK_URL(strcmp(out, "rediss+sentinel://***@s1:26379,s2/mymaster?"
                          "sentinel_username=sen&sentinel_password=***&"
                          "db=2") == 0,
              "mask", out);
    CHECK_EQ(ratel__url_mask("redis+sentinel://s/m?sentinel_password=x", out,
                             sizeof out),
             1);
    CHECK_URL(strcmp(out, "redis+sentinel://s/m?sentinel_password=***") == 0,
              "mask", out);
}

TEST(redis_url_hostile_bytes_are_escaped)
{
    char url[600], err[1024];
    ratel_redis_url_t u;

    /* Cut at 120 bytes with "...", quotes and backslashes escaped. */
    memset(url, 'a', sizeof url);
    memcpy(url, "redis://\"\\", 10);
    url[sizeof url - 1] = '\0';
    CHECK_EQ(ratel__redis_url_parse(url, &u, err, sizeof err), RATEL_EINVAL);
    CHECK(strncmp(err, "redis URL \"redis://\\\"\\\\aaa", 26) == 0);
    CHECK(strstr(err, "aaa...\": ") != NULL);
    CHECK(strlen(err) < 600);

    /* Every non-printable byte is \xNN, so a message is one safe line. */
    for (int c = 1; c < 256; c++) {
        snprintf(url, sizeof url, "redis://h%c/%c?%c", c, c, c);
        if (ratel__redis_url_parse(url, &u, err, sizeof err) == 0)
            continue; /* "redis://h//?/" is not valid, but be explicit */
        for (const char *p = err; *p; p++)
            CHECK_URL((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                      url, err);
        CHECK(strncmp(err, "redis URL \"", 11) == 0);
    }
}

TEST(redis_url_errbuf_any_size)
{
    const char *url = "redis://:pw@h:0";
    char full[1024], small[16];
    ratel_redis_url_t u;
    size_t len;

    CHECK_EQ(ratel__redis_url_parse(url, &u, full, sizeof full), RATEL_EINVAL);
    len = strlen(full);
    CHECK(len > 30);
    CHECK_EQ(ratel__redis_url_parse(url, &u, NULL, 0), RATEL_EINVAL);
    CHECK_EQ(ratel__redis_url_parse(url, &u, NULL, 100), RATEL_EINVAL);
    memset(small, 'X', sizeof small);
    CHECK_EQ(ratel__redis_url_parse(url, &u, small, 0), RATEL_EINVAL);
    CHECK_EQ(small[0], 'X');
    for (size_t cap = 1; cap <= 8; cap++) {
        memset(small, 'X', sizeof small);
        CHECK_EQ(ratel__redis_url_parse(url, &u, small, cap), RATEL_EINVAL);
        CHECK_EQ(strlen(small), cap - 1);
        CHECK(memcmp(small, full, cap - 1) == 0);
        CHECK_EQ(small[cap], 'X');
    }
    /* Missing arguments are errors with a message, not crashes. */
    CHECK_EQ(ratel__redis_url_parse(NULL, &u, full, sizeof full), RATEL_EINVAL);
    CHECK(strncmp(full, "redis URL \"\": no URL given", 26) == 0);
    CHECK_EQ(ratel__redis_url_parse("redis://:pw@h", NULL, full, sizeof full),
             RATEL_EINVAL);
    CHECK(strncmp(full, "redis URL \"redis://***@h\"", 25) == 0);
}

/*
 * ratel__url_mask, the one masking of what programs print: every
 * credential of a URL (the userinfo, secret-named query values) is "***",
 * whatever the scheme, and what is not a secret is shown as it is.
 */
TEST(redis_url_mask_hides_every_credential)
{
    static const struct {
        const char *url, *want;
        int masked;
    } cases[] = {
        {"redis://127.0.0.1:6379", "redis://127.0.0.1:6379", 0},
        {"redis://alice:S3cretPW@h:1/2?timeout_ms=100",
         "redis://***@h:1/2?timeout_ms=100", 1},
        {"redis://:S3cretPW@h", "redis://***@h", 1},
        {"redis://S3cretPW@h", "redis://***@h", 1},
        {"redis://a:S3cret@PW@h:1", "redis://***@h:1", 1},
        {"a:S3cretPW@h", "***@h", 1},
        {"redis+cluster://u:p%40ss@a:1,b:2", "redis+cluster://***@a:1,b:2", 1},
        {"https://smsuser:SmsPW7@sms.example/send?api_key=K3y&to=x&"
         "Access_Token=T0k#frag",
         "https://***@sms.example/send?api_key=***&to=x&Access_Token=***#frag",
         1},
        {"http://h/p?password=a=b&sig=&x=1",
         "http://h/p?password=***&sig=***&x=1", 1},
        {"http://h/p?q=\"1\"", "http://h/p?q=\\\"1\\\"", 0},
        {"", "", 0},
    };
    char out[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int m = ratel__url_mask(cases[i].url, out, sizeof out);
        CHECK_URL(strcmp(out, cases[i].want) == 0, cases[i].url, out);
        CHECK_URL(m == cases[i].masked, cases[i].url, out);
    }
    /* NULL output: only whether there is a secret. */
    CHECK_EQ(ratel__url_mask("redis://:pw@h", NULL, 0), 1);
    CHECK_EQ(ratel__url_mask(NULL, out, sizeof out), 0);
    /* A small buffer is cut, never overrun, and never holds the secret. */
    CHECK_EQ(ratel__url_mask("redis://:S3cretPW@host", out, 12), 1);
    CHECK(strcmp(out, "redis://***") == 0);
}

RATEL_SUITE(redis_url) = {
    {"redis_url_defaults", test_redis_url_defaults},
    {"redis_url_valid_forms", test_redis_url_valid_forms},
    {"redis_url_credentials", test_redis_url_credentials},
    {"redis_url_longest_credentials_and_host",
     test_redis_url_longest_credentials_and_host},
    {"redis_url_query_options", test_redis_url_query_options},
    {"redis_url_sixteen_addresses", test_redis_url_sixteen_addresses},
    {"redis_url_malformed_names_the_problem",
     test_redis_url_malformed_names_the_problem},
    {"redis_url_password_never_in_a_message",
     test_redis_url_password_never_in_a_message},
    {"redis_url_tls_and_sentinel_schemes",
     test_redis_url_tls_and_sentinel_schemes},
    {"redis_url_tls_settings", test_redis_url_tls_settings},
    {"redis_url_sentinel_password_hidden",
     test_redis_url_sentinel_password_hidden},
    {"redis_url_hostile_bytes_are_escaped",
     test_redis_url_hostile_bytes_are_escaped},
    {"redis_url_errbuf_any_size", test_redis_url_errbuf_any_size},
    {"redis_url_mask_hides_every_credential",
     test_redis_url_mask_hides_every_credential},
    {0, 0},
};
