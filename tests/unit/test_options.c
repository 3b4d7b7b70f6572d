/*
 * test_options.c - descriptor tables (store/option.h) and the generic YAML
 * reader that applies one (app/yaml.h ratel__yaml_options): every type,
 * range edges, the unknown-field list, and the Redis store's table giving
 * the same value and the same error from YAML and from a URL's query.
 */
#include "test.h"

#include "app/options.h"
#include "app/yaml.h"
#include "store/option.h"
#include "store/redis_url.h"

#include <stdio.h>
#include <string.h>

/* CHECK with a message made like printf's. */
#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char m_[2200];                                                     \
            snprintf(m_, sizeof m_, __VA_ARGS__);                              \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

/* A struct with a field of every kind the tables fill. */
typedef struct sample_s {
    unsigned count;
    size_t bytes;
    int64_t wait_ms;
    int flag;
    int colour;
    char name[8];
    uint16_t small;
} sample_t;

static const char *const colours[] = {"red", "green", NULL};
static const int colour_values[] = {10, 20};

static int check_no_x(const char *text, char *why, size_t whylen)
{
    if (!strchr(text, 'x'))
        return 0;
    snprintf(why, whylen, "holds an x");
    return -1;
}

#define S(f) RATEL__FIELD(sample_t, f)
static const ratel__option_t sample_options[] = {
    {"count", RATEL__OPTION_UINT, 2, 9, 0, S(count), NULL, NULL, NULL},
    {"bytes", RATEL__OPTION_SIZE, 1024, 1 << 20, 1, S(bytes), NULL, NULL, NULL},
    {"wait_ms", RATEL__OPTION_MSEC, 1, 60000, 0, S(wait_ms), NULL, NULL, NULL},
    {"flag", RATEL__OPTION_BOOL, 0, 0, 0, S(flag), NULL, NULL, NULL},
    {"colour", RATEL__OPTION_ENUM, 0, 0, 0, S(colour), colours, colour_values,
     NULL},
    {"name", RATEL__OPTION_STRING, 0, 0, 0, S(name), NULL, NULL, check_no_x},
    {"small", RATEL__OPTION_UINT, 0, 65535, 0, S(small), NULL, NULL, NULL},
};

/* Reads `text` (a mapping under "sec:") with `table` into base; the
   message, if any, into err. */
static int read_yaml(const char *text, const ratel__option_t *table, size_t n,
                     void *base, char *err, size_t errlen)
{
    ratel__yaml_ctx_t ctx = {"t.yaml", err, errlen};
    ratel__yaml_node_t *root = NULL;
    const char *names[] = {"sec"};
    const ratel__yaml_node_t *sec;
    int rc;

    err[0] = '\0';
    if (ratel__yaml_load(&ctx, text, strlen(text), &root))
        return -1;
    rc = ratel__yaml_fields(&ctx, root, "", names, 1, &sec);
    if (rc == 0)
        rc = ratel__yaml_options(&ctx, sec, "sec", table, n, base, NULL);
    ratel__yaml_free(root);
    return rc;
}

TEST(options_every_type_from_yaml)
{
    sample_t s;
    char err[512];

    memset(&s, 0, sizeof s);
    REQUIRE(read_yaml("sec:\n  count: 9\n  bytes: 1KiB\n  wait_ms: 60000\n"
                      "  flag: True\n  colour: green\n  name: abc\n"
                      "  small: 65535\n",
                      sample_options, RATEL__COUNT(sample_options), &s, err,
                      sizeof err) == 0);
    CHECK_EQ(s.count, 9);
    CHECK_EQ(s.bytes, 1024);
    CHECK_EQ(s.wait_ms, 60000);
    CHECK_EQ(s.flag, 1);
    CHECK_EQ(s.colour, 20);
    CHECK(strcmp(s.name, "abc") == 0);
    CHECK_EQ(s.small, 65535);
    /* 0 is the default where the table says so. */
    REQUIRE(read_yaml("sec:\n  bytes: 0\n  flag: false\n", sample_options,
                      RATEL__COUNT(sample_options), &s, err, sizeof err) == 0);
    CHECK_EQ(s.bytes, 0);
    CHECK_EQ(s.flag, 0);
}

TEST(options_range_edges_and_messages)
{
    static const struct {
        const char *yaml;
        const char *says; /* NULL: accepted */
    } cases[] = {
        {"sec:\n  count: 2\n", NULL},
        {"sec:\n  count: 1\n",
         "t.yaml:2: sec.count: 1 is out of range; accepted: 2..9"},
        {"sec:\n  count: 10\n",
         "t.yaml:2: sec.count: 10 is out of range; accepted: 2..9"},
        {"sec:\n  count: 0\n", "sec.count: 0 is out of range"},
        {"sec:\n  count: \"5\"\n", "without quotes"},
        {"sec:\n  count: 5x\n",
         "sec.count: expected a whole number, got \"5x\""},
        {"sec:\n  bytes: 1023\n",
         "sec.bytes: 1023 is out of range; accepted: 0 (the default) or "
         "1024..1048576"},
        {"sec:\n  bytes: 1MiB\n", NULL},
        {"sec:\n  bytes: 1025KiB\n", "1049600 is out of range"},
        {"sec:\n  bytes: 3 parsecs\n", "is not a size"},
        {"sec:\n  wait_ms: 0\n", "sec.wait_ms: 0 is out of range"},
        {"sec:\n  wait_ms: 1s\n",
         "sec.wait_ms: expected a whole number of milliseconds, got \"1s\""},
        {"sec:\n  flag: yes\n", "sec.flag: expected true or false"},
        {"sec:\n  flag: \"true\"\n", "(in quotes, a string)"},
        {"sec:\n  colour: blue\n",
         "sec.colour: expected red | green, got \"blue\""},
        {"sec:\n  colour: [red]\n",
         "sec.colour: expected red | green, got a list"},
        {"sec:\n  name: abcdefg\n", NULL},
        {"sec:\n  name: abcdefgh\n",
         "sec.name: 8 bytes long; at most 7 are accepted"},
        {"sec:\n  name: xyz\n", "t.yaml:2: sec.name: holds an x"},
        {"sec:\n  name: ~\n", "sec.name: has no value"},
        {"sec:\n  small: 65536\n", "accepted: 0..65535"},
        {"sec:\n  count: 3\n  count: 4\n", "sec.count: given twice"},
        {"sec:\n  count: 3\n  colour: blue\n  bytes: 1\n",
         "t.yaml:3: sec.colour"}, /* the first problem in the file */
        {"sec:\n  size: 1\n",
         "t.yaml:2: sec.size: unknown field; accepted: count, bytes, "
         "wait_ms, flag, colour, name, small"},
        {"sec: 5\n", "sec: expected a mapping of fields (count, bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sample_t s;
        char err[512];
        int rc;
        memset(&s, 0, sizeof s);
        rc = read_yaml(cases[i].yaml, sample_options,
                       RATEL__COUNT(sample_options), &s, err, sizeof err);
        if (!cases[i].says) {
            CHECK_MSG(rc == 0, "case %zu: %s", i, err);
            continue;
        }
        CHECK_MSG(rc == -1 && strstr(err, cases[i].says), "case %zu: %s", i,
                  err);
    }
}

TEST(options_set_from_text)
{
    sample_t s;
    char why[256];

    memset(&s, 0, sizeof s);
    CHECK(ratel__option_set(&sample_options[0], "7", 1, &s, why, sizeof why) ==
          0);
    CHECK_EQ(s.count, 7);
    /* Not NUL-terminated: only len bytes count. */
    CHECK(ratel__option_set(&sample_options[0], "34", 1, &s, why, sizeof why) ==
          0);
    CHECK_EQ(s.count, 3);
    CHECK(ratel__option_set(&sample_options[1], "99999999999999999999T", 21, &s,
                            why, sizeof why) == -1);
    CHECK(strstr(why, "is not a size") || strstr(why, "out of range"));
    CHECK(ratel__option_set(&sample_options[1], "17179869184T", 12, &s, why,
                            sizeof why) == -1);
    CHECK(strstr(why, "is too large") != NULL);
    CHECK(ratel__option_set(&sample_options[5], "a\tb", 3, &s, why,
                            sizeof why) == -1);
    CHECK(strstr(why, "control character 0x09") != NULL);
    /* A failed set leaves the field alone. */
    CHECK_EQ(s.count, 3);
    CHECK(ratel__option_find(sample_options, RATEL__COUNT(sample_options),
                             "flagx", 4) == &sample_options[3]);
    CHECK(ratel__option_find(sample_options, RATEL__COUNT(sample_options),
                             "flagx", 5) == NULL);
}

/* The same store setting from YAML and from a URL's query: the same
   value, or the same reason after each front end's own prefix. */
TEST(options_yaml_and_url_query_agree)
{
    static const char *const settings[] = {
        "pool=8",
        "pool=256",
        "pool=257",
        "pool=0",
        "deny_cache=0",
        "deny_cache=1048576",
        "deny_cache=1048577",
        "timeout_ms=60000",
        "timeout_ms=60001",
        "connect_timeout_ms=0",
        "connect_timeout_ms=5",
        "on_failure=closed",
        "on_failure=shut",
        "mode=lua",
        "mode=Lua",
        "pool=1x",
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        ratel_redis_url_t from_yaml, from_url;
        char yaml[128], url[128], yerr[512], uerr[512];
        const char *eq = strchr(settings[i], '=');
        const char *yreason, *ureason;
        int yrc, urc;

        snprintf(yaml, sizeof yaml, "sec:\n  %.*s: %s\n",
                 (int)(eq - settings[i]), settings[i], eq + 1);
        snprintf(url, sizeof url, "redis://h?%s", settings[i]);
        ratel__redis_query_init(&from_yaml);
        yrc = read_yaml(yaml, ratel__redis_query_options,
                        ratel__redis_query_noptions, &from_yaml, yerr,
                        sizeof yerr);
        urc = ratel__redis_url_parse(url, &from_url, uerr, sizeof uerr);
        CHECK_MSG((yrc == 0) == (urc == 0), "%s: yaml %d (%s), url %d (%s)",
                  settings[i], yrc, yerr, urc, uerr);
        if (yrc == 0 && urc == 0) {
            CHECK_MSG(from_yaml.pool == from_url.pool &&
                          from_yaml.deny_cache == from_url.deny_cache &&
                          from_yaml.timeout_ms == from_url.timeout_ms &&
                          from_yaml.connect_timeout_ms ==
                              from_url.connect_timeout_ms &&
                          from_yaml.on_failure == from_url.on_failure &&
                          from_yaml.mode == from_url.mode,
                      "%s: different values", settings[i]);
            continue;
        }
        /* "t.yaml:2: sec.pool: REASON" and "...query parameter pool:
           REASON". */
        yreason = strstr(yerr, ": ");
        yreason = yreason ? strstr(yreason + 2, ": ") : NULL;
        ureason = strstr(uerr, "query parameter ");
        ureason = ureason ? strstr(ureason, ": ") : NULL;
        REQUIRE(yreason && ureason);
        CHECK_MSG(strcmp(yreason, ureason) == 0, "%s: \"%s\" vs \"%s\"",
                  settings[i], yerr, uerr);
    }
}

/* Store options into ratel_redis_options_t: deny_cache 0 is "off". */
TEST(options_redis_query_to_options)
{
    ratel_redis_url_t q;
    ratel_redis_options_t o;

    memset(&o, 0, sizeof o);
    ratel__redis_query_init(&q);
    ratel__redis_query_to_options(&q, &o);
    CHECK_EQ(o.pool_size, 0);
    CHECK_EQ(o.deny_cache_entries, 0);
    CHECK_EQ(o.on_failure, RATEL_FAILURE_DEFAULT);
    q.pool = 8;
    q.deny_cache = 0;
    q.timeout_ms = 250;
    q.mode = RATEL_REDIS_LUA;
    ratel__redis_query_to_options(&q, &o);
    CHECK_EQ(o.pool_size, 8);
    CHECK(o.deny_cache_entries < 0);
    CHECK_EQ(o.command_timeout_ms, 250);
    CHECK_EQ(o.mode, RATEL_REDIS_LUA);
}

/* The shared limits table fills every field of ratel_http_limits_t:
   each option sets its own bytes, and together they set them all. */
TEST(options_limits_table_covers_the_struct)
{
    unsigned char seen[sizeof(ratel_http_limits_t)];
    ratel_http_limits_t all, one;
    size_t fields = 0, bytes = 0;

    memset(seen, 0, sizeof seen);
    memset(&all, 0, sizeof all);
    for (size_t i = 0; i < ratel__limits_noptions; i++) {
        const ratel__option_t *o = &ratel__limits_options[i];
        char why[200], text[32];
        memset(&one, 0, sizeof one);
        snprintf(text, sizeof text, "%llu", (unsigned long long)o->max);
        CHECK(ratel__option_set(o, text, strlen(text), &one, why, sizeof why) ==
              0);
        CHECK(ratel__option_set(o, text, strlen(text), &all, why, sizeof why) ==
              0);
        for (size_t b = 0; b < o->size; b++)
            CHECK(seen[o->offset + b]++ == 0);
        bytes += o->size;
    }
    /* Every integer field of the struct, padding aside. */
    fields = sizeof(size_t) * 3 + sizeof(unsigned) * 5;
    CHECK_EQ(bytes, fields);
    CHECK_EQ(all.max_output_bytes, 1073741824);
    CHECK_EQ(all.max_pipeline, 1024);
}

/* The C API's checks take their bounds from the tables: each edge of
   deny_cache and max_bytes is accepted, one past it refused, by the
   check and by the constructors that use it. */
TEST(options_c_api_ranges_are_the_tables)
{
    uint64_t min = 0, max = 0;
    ratel_store_t *s = NULL;
    ratel_memory_options_t mo = {0, 0};

    REQUIRE(ratel__option_range(ratel__redis_query_options,
                                ratel__redis_query_noptions, "deny_cache", &min,
                                &max) == 0);
    CHECK_EQ(min, 0);
    CHECK_EQ(max, 1048576);
    CHECK_EQ(ratel__redis_option_check("deny_cache", 0), 0);
    CHECK_EQ(ratel__redis_option_check("deny_cache", 1048576), 0);
    CHECK_EQ(ratel__redis_option_check("deny_cache", 1048577), RATEL_EINVAL);
    CHECK_EQ(ratel__redis_option_check("deny_cache", -1), RATEL_EINVAL);
    CHECK_EQ(ratel__redis_option_check("timeout_ms", 60000), 0);
    CHECK_EQ(ratel__redis_option_check("timeout_ms", 60001), RATEL_EINVAL);
    CHECK_EQ(ratel__redis_option_check("timeout_ms", 0), RATEL_EINVAL);
    /* Not a number option, or no such option: refused, never accepted. */
    CHECK_EQ(ratel__redis_option_check("mode", 1), RATEL_EINVAL);
    CHECK_EQ(ratel__redis_option_check("no_such", 1), RATEL_EINVAL);
    CHECK(ratel__option_range(ratel__redis_query_options,
                              ratel__redis_query_noptions, "mode", &min,
                              &max) == -1);

    REQUIRE(ratel__option_range(ratel__memory_options, ratel__memory_noptions,
                                "max_bytes", &min, &max) == 0);
    CHECK_EQ(min, 65536);
    CHECK_EQ(max, (uint64_t)1 << 40);
    mo.max_bytes = (size_t)max + 1;
    CHECK_EQ(ratel_store_memory_new(&s, &mo), RATEL_EINVAL);
    mo.max_bytes = (size_t)min - 1;
    CHECK_EQ(ratel_store_memory_new(&s, &mo), RATEL_EINVAL);
    CHECK(s == NULL);
    mo.max_bytes = (size_t)min;
    REQUIRE(ratel_store_memory_new(&s, &mo) == 0);
    ratel_store_free(s);
}

RATEL_SUITE(options) = {
    {"options_every_type_from_yaml", test_options_every_type_from_yaml},
    {"options_range_edges_and_messages", test_options_range_edges_and_messages},
    {"options_set_from_text", test_options_set_from_text},
    {"options_yaml_and_url_query_agree", test_options_yaml_and_url_query_agree},
    {"options_redis_query_to_options", test_options_redis_query_to_options},
    {"options_limits_table_covers_the_struct",
     test_options_limits_table_covers_the_struct},
    {"options_c_api_ranges_are_the_tables",
     test_options_c_api_ranges_are_the_tables},
    {0, 0},
};
