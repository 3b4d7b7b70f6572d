/*
 * test_phone.c - the libphonenumber shim (server/app/phone.h): the
 * spellings people and forms give one phone are one E.164 number; numbers
 * that are not valid in their region's plan, letters, NUL bytes and
 * over-long text are refused; types (premium_rate) and regions as
 * libphonenumber gives them; two threads parse at once.
 */
#include "test.h"

#include "app/phone.h"

#include <pthread.h>
#include <string.h>

/* ratel__phone_parse of a NUL-terminated text. */
static int parse(const char *text, const char *region, ratel__phone_t *out)
{
    return ratel__phone_parse(text, strlen(text), region, out);
}

/* The six spellings of issue 31 (an SMS provider delivers each to one
   phone), and three more people write. */
static const char *const spellings[] = {
    "13500003333",       "+8613500003333", "008613500003333",
    "+86 135 0000 3333", "135-0000-3333",  "+86013500003333",
    "8613500003333",     "013500003333",   "+86 (0) 135.0000.3333",
};
#define SPELLINGS (sizeof spellings / sizeof spellings[0])

TEST(phone_spellings_one_e164)
{
    for (size_t i = 0; i < SPELLINGS; i++) {
        ratel__phone_t p;
        int rc = parse(spellings[i], "CN", &p);
        if (rc != 0 || strcmp(p.e164, "+8613500003333") != 0)
            fprintf(stderr, "  spelling %s: rc %d, e164 %s\n", spellings[i], rc,
                    p.e164);
        CHECK_EQ(rc, 0);
        CHECK(strcmp(p.e164, "+8613500003333") == 0);
        CHECK(strcmp(p.region, "CN") == 0);
        CHECK_EQ(p.country_code, 86);
        CHECK_EQ(p.type, RATEL__PHONE_TYPE_MOBILE);
    }
    /* The region in lower case is the same region. */
    ratel__phone_t p;
    CHECK_EQ(parse("13500003333", "cn", &p), 0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
}

TEST(phone_without_region_only_international)
{
    ratel__phone_t p;

    CHECK_EQ(parse("+86 135 0000 3333", NULL, &p), 0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
    CHECK_EQ(parse("+8613500003333", "", &p), 0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
    /* A national number, or an international prefix, needs a region. */
    CHECK_EQ(parse("13500003333", NULL, &p), RATEL__PHONE_UNPARSABLE);
    CHECK_EQ(parse("008613500003333", "", &p), RATEL__PHONE_UNPARSABLE);
}

TEST(phone_us_number)
{
    static const char *const us[] = {"(650) 253-0000", "650.253.0000",
                                     "1-650-253-0000", "+1 650 253 0000"};
    ratel__phone_t p;

    for (size_t i = 0; i < sizeof us / sizeof us[0]; i++) {
        CHECK_EQ(parse(us[i], "US", &p), 0);
        CHECK(strcmp(p.e164, "+16502530000") == 0);
        CHECK(strcmp(p.region, "US") == 0);
        CHECK_EQ(p.country_code, 1);
        CHECK_EQ(p.type, RATEL__PHONE_TYPE_FIXED_LINE_OR_MOBILE);
    }
    /* International, whatever the default region. */
    CHECK_EQ(parse("+1 650 253 0000", "CN", &p), 0);
    CHECK(strcmp(p.e164, "+16502530000") == 0);
    CHECK_EQ(parse("+1 650 253 0000", NULL, &p), 0);
    CHECK(strcmp(p.region, "US") == 0);
    /* US's international prefix, to a Chinese mobile. */
    CHECK_EQ(parse("011 86 135 0000 3333", "US", &p), 0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
    /* A US national number read in CN is not a valid Chinese one. */
    CHECK(parse("(650) 253-0000", "CN", &p) < 0);
}

TEST(phone_invalid_refused)
{
    static const struct {
        const char *text;
        int rc;
    } cases[] = {
        {"1", RATEL__PHONE_UNPARSABLE},                 /* too short to read */
        {"135", RATEL__PHONE_INVALID},                  /* too short */
        {"1350000333", RATEL__PHONE_INVALID},           /* a digit short */
        {"135000033333", RATEL__PHONE_INVALID},         /* a digit long */
        {"12000000000", RATEL__PHONE_INVALID},          /* 120: unassigned */
        {"+8612000000000", RATEL__PHONE_INVALID},       /* the same, intl. */
        {"+1 555 555 0123", RATEL__PHONE_INVALID},      /* 555: fiction */
        {"+999 1234567", RATEL__PHONE_UNPARSABLE},      /* no country 999 */
        {"", RATEL__PHONE_UNPARSABLE},                  /* nothing */
        {"+", RATEL__PHONE_UNPARSABLE},                 /* no digits */
        {"+86", RATEL__PHONE_UNPARSABLE},               /* a country only */
        {"(-. )", RATEL__PHONE_UNPARSABLE},             /* punctuation only */
        {"1350000333O", RATEL__PHONE_UNPARSABLE},       /* a letter O */
        {"tel:13500003333", RATEL__PHONE_UNPARSABLE},   /* text before */
        {"13500003333 ext 5", RATEL__PHONE_UNPARSABLE}, /* an extension */
        {"1-800-FLOWERS", RATEL__PHONE_UNPARSABLE},     /* vanity letters */
        {"++8613500003333", RATEL__PHONE_UNPARSABLE},   /* two + */
        {"135+00003333", RATEL__PHONE_UNPARSABLE},      /* + inside */
        {"13500003333#1", RATEL__PHONE_UNPARSABLE},     /* fragment */
        {"13500003333\n", RATEL__PHONE_UNPARSABLE},     /* control byte */
        /* Full-width digits: libphonenumber reads them, a key does not. */
        {"\xef\xbc\x91\xef\xbc\x93\xef\xbc\x95\xef\xbc\x90\xef\xbc\x90"
         "\xef\xbc\x90\xef\xbc\x90\xef\xbc\x93\xef\xbc\x93\xef\xbc\x93"
         "\xef\xbc\x93",
         RATEL__PHONE_UNPARSABLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ratel__phone_t p;
        memset(&p, 0x55, sizeof p);
        int rc = parse(cases[i].text, "CN", &p);
        if (rc != cases[i].rc)
            fprintf(stderr, "  \"%s\": rc %d, expected %d\n", cases[i].text, rc,
                    cases[i].rc);
        CHECK_EQ(rc, cases[i].rc);
        /* A refusal leaves *out zeroed. */
        CHECK_EQ(p.e164[0], 0);
        CHECK_EQ(p.region[0], 0);
        CHECK_EQ(p.country_code, 0);
    }
}

TEST(phone_nul_and_long_refused)
{
    static const char nul[] = "1350000\0"
                              "3333";
    char digits[201];
    ratel__phone_t p;

    /* A NUL inside the n bytes: refused, not read as "1350000". */
    CHECK_EQ(ratel__phone_parse(nul, sizeof nul - 1, "CN", &p),
             RATEL__PHONE_UNPARSABLE);
    /* 200 digits, and a valid number padded past the bound. */
    memset(digits, '1', 200);
    digits[200] = '\0';
    CHECK_EQ(parse(digits, "CN", &p), RATEL__PHONE_UNPARSABLE);
    memset(digits, ' ', RATEL__PHONE_TEXT_MAX + 1);
    memcpy(digits + RATEL__PHONE_TEXT_MAX + 1 - 11, "13500003333", 11);
    CHECK_EQ(ratel__phone_parse(digits, RATEL__PHONE_TEXT_MAX + 1, "CN", &p),
             RATEL__PHONE_UNPARSABLE);
    /* The same within the bound: read. */
    CHECK_EQ(ratel__phone_parse(digits + 1, RATEL__PHONE_TEXT_MAX, "CN", &p),
             0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
    /* Only the n bytes are read: the rest of the text is not the number. */
    CHECK_EQ(ratel__phone_parse("13500003333999", 11, "CN", &p), 0);
    CHECK(strcmp(p.e164, "+8613500003333") == 0);
    CHECK_EQ(ratel__phone_parse(NULL, 0, "CN", &p), RATEL__PHONE_UNPARSABLE);
    CHECK_EQ(ratel__phone_parse("13500003333", 11, "CN", NULL),
             RATEL__PHONE_UNPARSABLE);
}

TEST(phone_types)
{
    ratel__phone_t p;

    /* UK 09: premium rate; the shim says so and senders refuse it. */
    CHECK_EQ(parse("+44 909 876 5432", "CN", &p), 0);
    CHECK(strcmp(p.e164, "+449098765432") == 0);
    CHECK(strcmp(p.region, "GB") == 0);
    CHECK_EQ(p.type, RATEL__PHONE_TYPE_PREMIUM_RATE);
    CHECK(strcmp(ratel__phone_type_name(p.type), "premium_rate") == 0);
    CHECK(ratel__phone_type_premium(p.type));
    CHECK_EQ(parse("+1 900 555 0123", NULL, &p), 0);
    CHECK_EQ(p.type, RATEL__PHONE_TYPE_PREMIUM_RATE);
    /* China's 400 numbers: the caller shares the cost. */
    CHECK_EQ(parse("400-123-4567", "CN", &p), 0);
    CHECK_EQ(p.type, RATEL__PHONE_TYPE_SHARED_COST);
    CHECK(ratel__phone_type_premium(p.type));
    /* Fixed line in Beijing, with the trunk 0. */
    CHECK_EQ(parse("010 1234 5678", "CN", &p), 0);
    CHECK(strcmp(p.e164, "+861012345678") == 0);
    CHECK_EQ(p.type, RATEL__PHONE_TYPE_FIXED_LINE);
    CHECK(!ratel__phone_type_premium(p.type));
    CHECK(!ratel__phone_type_premium(RATEL__PHONE_TYPE_MOBILE));
    /* A non-geographic number: region 001. */
    CHECK_EQ(parse("+800 1234 5678", NULL, &p), 0);
    CHECK(strcmp(p.region, "001") == 0);
    CHECK_EQ(p.country_code, 800);
    CHECK_EQ(p.type, RATEL__PHONE_TYPE_TOLL_FREE);
    /* Every type has its own name; out of range is "unknown". */
    for (int a = 0; a < RATEL__PHONE_TYPES; a++)
        for (int b = a + 1; b < RATEL__PHONE_TYPES; b++)
            CHECK(strcmp(ratel__phone_type_name(a),
                         ratel__phone_type_name(b)) != 0);
    CHECK(strcmp(ratel__phone_type_name(RATEL__PHONE_TYPE_MOBILE), "mobile") ==
          0);
    CHECK(strcmp(ratel__phone_type_name(-1), "unknown") == 0);
    CHECK(strcmp(ratel__phone_type_name(RATEL__PHONE_TYPES), "unknown") == 0);
}

TEST(phone_regions)
{
    ratel__phone_t p;

    CHECK(ratel__phone_region_known("CN"));
    CHECK(ratel__phone_region_known("cn"));
    CHECK(ratel__phone_region_known("US"));
    CHECK(ratel__phone_region_known("GB"));
    CHECK(!ratel__phone_region_known("XX"));
    CHECK(!ratel__phone_region_known("ZZ"));
    CHECK(!ratel__phone_region_known("001"));
    CHECK(!ratel__phone_region_known("CHN"));
    CHECK(!ratel__phone_region_known("C"));
    CHECK(!ratel__phone_region_known(""));
    CHECK(!ratel__phone_region_known(NULL));
    /* An unknown default region is the caller's mistake, not the
       number's. */
    CHECK_EQ(parse("+8613500003333", "XX", &p), RATEL__PHONE_BAD_REGION);
    CHECK_EQ(parse("+8613500003333", "ZZ", &p), RATEL__PHONE_BAD_REGION);
    CHECK_EQ(parse("+8613500003333", "C1", &p), RATEL__PHONE_BAD_REGION);
    CHECK(strlen(ratel__phone_strerror(RATEL__PHONE_BAD_REGION)) > 0);
    CHECK(strstr(ratel__phone_strerror(RATEL__PHONE_INVALID), "valid") != NULL);
    CHECK(strstr(ratel__phone_strerror(RATEL__PHONE_UNPARSABLE), "digits") !=
          NULL);
    CHECK(strcmp(ratel__phone_strerror(0), "") == 0);
    /* As a configuration's check: "" is "+ only"; a message for XX. */
    char why[200] = "";
    CHECK_EQ(ratel__phone_check_region("CN", why, sizeof why), 0);
    CHECK_EQ(ratel__phone_check_region("", why, sizeof why), 0);
    CHECK_EQ(ratel__phone_check_region("XX", why, sizeof why), -1);
    CHECK(strstr(why, "\"XX\" is not a region libphonenumber knows") != NULL);
}

/* A thread's share of the smoke test: every spelling, n times over. */
static void *parse_many(void *arg)
{
    long *bad = arg;

    for (int i = 0; i < 300; i++) {
        ratel__phone_t p;
        const char *text = spellings[(size_t)i % SPELLINGS];
        if (parse(text, "CN", &p) != 0 || strcmp(p.e164, "+8613500003333") != 0)
            (*bad)++;
        if (parse("+44 909 876 5432", NULL, &p) != 0 ||
            p.type != RATEL__PHONE_TYPE_PREMIUM_RATE)
            (*bad)++;
        if (parse("12000000000", "CN", &p) != RATEL__PHONE_INVALID)
            (*bad)++;
    }
    return NULL;
}

TEST(phone_two_threads)
{
    pthread_t t[2];
    long bad[2] = {0, 0};

    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&t[i], NULL, parse_many, &bad[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(bad[0], 0);
    CHECK_EQ(bad[1], 0);
}

/* The thread's cache of parsed numbers answers as a parse does: by the
   text and the region, refusals too, whatever came before. */
TEST(phone_cache_by_text_and_region)
{
    ratel__phone_t a, b;

    for (int round = 0; round < 3; round++) {
        CHECK_EQ(ratel__phone_parse("2015550123", 10, "US", &a), 0);
        CHECK(strcmp(a.e164, "+12015550123") == 0);
        CHECK_EQ(ratel__phone_parse("2015550123", 10, "CN", &b), 0);
        CHECK(strcmp(b.e164, "+862015550123") == 0); /* Guangzhou */
        CHECK_EQ(ratel__phone_parse("12345", 5, "CN", &b),
                 RATEL__PHONE_INVALID);
        CHECK(b.e164[0] == '\0');
        CHECK_EQ(ratel__phone_parse("2015550123", 10, "", &b),
                 RATEL__PHONE_UNPARSABLE);
        CHECK_EQ(ratel__phone_parse("20155501234", 10, "US", &b), 0);
        CHECK(strcmp(b.e164, a.e164) == 0);
        CHECK_EQ(ratel__phone_parse("13800138000", 11, "cn", &b), 0);
        CHECK(strcmp(b.e164, "+8613800138000") == 0);
        CHECK(strcmp(b.region, "CN") == 0);
    }
}

RATEL_SUITE(phone) = {
    {"phone_spellings_one_e164", test_phone_spellings_one_e164},
    {"phone_without_region_only_international",
     test_phone_without_region_only_international},
    {"phone_us_number", test_phone_us_number},
    {"phone_invalid_refused", test_phone_invalid_refused},
    {"phone_nul_and_long_refused", test_phone_nul_and_long_refused},
    {"phone_types", test_phone_types},
    {"phone_regions", test_phone_regions},
    {"phone_two_threads", test_phone_two_threads},
    {"phone_cache_by_text_and_region", test_phone_cache_by_text_and_region},
    {0, 0},
};
