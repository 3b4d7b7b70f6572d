/*
 * test_request_options.c - the one reader of the request options
 * (lib/core/options.c): each front end's spelling, the values and their
 * ranges, the options of each operation, and the one message per error,
 * ratel_options_check()'s included.
 */
#include "ratel.h"
#include "test.h"

#include <string.h>

/* Reads name (NULL: the first option) with value; returns the code and
   leaves the message in err. */
static int rd(ratel_options_t *o, const char *name, const char *value,
              char *err, size_t errlen)
{
    err[0] = '\0';
    return ratel_options_read(o, name, name ? strlen(name) : 0, value,
                              value ? strlen(value) : 0, err, errlen);
}

#define CHECK_MSG(o, name, value, want)                                        \
    do {                                                                       \
        char e_[300];                                                          \
        CHECK_EQ(rd(o, name, value, e_, sizeof e_), RATEL_EINVAL);             \
        if (strcmp(e_, want) != 0) {                                           \
            char m_[700];                                                      \
            snprintf(m_, sizeof m_, "\"%s\" != \"%s\"", e_, want);             \
            ratel_test_fail(__FILE__, __LINE__, m_);                           \
        }                                                                      \
    } while (0)

TEST(options_words_any_case_defaults_and_request)
{
    ratel_options_t o;
    ratel_request_t req;
    char err[300];

    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_WORD, 0);
    CHECK_EQ(o.first, -1);
    ratel_options_request(&o, &req);
    CHECK_EQ(req.cost, 1); /* not given: COST 1, MAXWAIT 0, no PEEK */
    CHECK_EQ(req.max_wait_ms, 0);
    CHECK_EQ(req.flags, 0);
    CHECK_EQ(rd(&o, "cost", "7", err, sizeof err), 0);
    CHECK_EQ(rd(&o, "Peek", NULL, err, sizeof err), 0);
    CHECK_EQ(rd(&o, "MAXWAIT", "250", err, sizeof err), 0);
    CHECK_EQ(rd(&o, "at", "9007199254740", err, sizeof err), 0);
    ratel_options_request(&o, &req);
    CHECK_EQ(req.cost, 7);
    CHECK_EQ(req.max_wait_ms, 250);
    CHECK_EQ(req.flags, RATEL_PEEK);
    CHECK_EQ(o.value[RATEL_OPTION_AT], 9007199254740LL);
    CHECK_EQ(o.given, (1u << RATEL_OPTION_COST) | (1u << RATEL_OPTION_PEEK) |
                          (1u << RATEL_OPTION_MAXWAIT) |
                          (1u << RATEL_OPTION_AT));
}

TEST(options_words_messages)
{
    ratel_options_t o;
    char err[300];

    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_WORD, 0);
    CHECK_MSG(&o, "COST", "0",
              "COST must be an integer from 1 to 1000000000, not \"0\"");
    CHECK_MSG(&o, "COST", NULL, "COST must be an integer from 1 to 1000000000");
    CHECK_MSG(&o, "COST", "1000000000000000000000",
              "COST must be an integer from 1 to 1000000000, not "
              "\"1000000000000000000000\"");
    CHECK_MSG(&o, "MAXWAIT", "-1",
              "MAXWAIT must be an integer from 0 to 2592000000, not \"-1\"");
    CHECK_MSG(&o, "FOO", NULL,
              "unknown or repeated option \"FOO\"; options are COST n, PEEK, "
              "MAXWAIT ms, AT unix_ms, then the rules");
    CHECK_EQ(rd(&o, "PEEK", NULL, err, sizeof err), 0);
    CHECK_MSG(&o, "peek", NULL,
              "unknown or repeated option \"peek\"; options are COST n, PEEK, "
              "MAXWAIT ms, AT unix_ms, then the rules");
    /* LEASE comes first, by place: never as a word. */
    CHECK_MSG(&o, "LEASE", "1",
              "unknown or repeated option \"LEASE\"; options are COST n, "
              "PEEK, MAXWAIT ms, AT unix_ms, then the rules");
    /* Bytes a message cannot show are escaped. */
    CHECK_MSG(&o, "\x01\"", NULL,
              "unknown or repeated option \"\\x01\\x22\"; options are COST n, "
              "PEEK, MAXWAIT ms, AT unix_ms, then the rules");
}

TEST(options_each_operation_its_own)
{
    ratel_options_t o;
    char list[200], err[300];

    ratel_options_init(&o, RATEL_OP_REFUND, RATEL_SPELL_WORD, 0);
    ratel_options_list(&o, list, sizeof list);
    CHECK(strcmp(list, "COST n, AT unix_ms, then the rules") == 0);
    CHECK_MSG(&o, "PEEK", NULL,
              "unknown or repeated option \"PEEK\"; options are COST n, AT "
              "unix_ms, then the rules");
    ratel_options_init(&o, RATEL_OP_INFO, RATEL_SPELL_WORD, 0);
    ratel_options_list(&o, list, sizeof list);
    CHECK(strcmp(list, "AT unix_ms") == 0);
    ratel_options_init(&o, RATEL_OP_RELEASE, RATEL_SPELL_WORD, 0);
    ratel_options_list(&o, list, sizeof list);
    CHECK(strcmp(list, "RENEW, AT unix_ms, then the rules") == 0);
    CHECK_EQ(o.first, RATEL_OPTION_LEASE);
    CHECK_MSG(&o, NULL, "0",
              "LEASE must be an integer from 1 to 4294967295 (the lease an "
              "ACQUIRE returned), not \"0\"");
    CHECK_EQ(rd(&o, NULL, "4294967295", err, sizeof err), 0);
    CHECK_EQ(rd(&o, "renew", NULL, err, sizeof err), 0);
    CHECK_EQ(o.value[RATEL_OPTION_LEASE], 4294967295LL);
    CHECK_EQ(o.value[RATEL_OPTION_RENEW], 1);
    /* A truncated list still says how long it is. */
    CHECK_EQ(ratel_options_list(&o, list, 4), 33);
    CHECK(strcmp(list, "REN") == 0);
}

TEST(options_fields_and_flags)
{
    ratel_options_t o;
    char list[200], err[300];

    /* rateld: names as fields, flags as words, AT refused. */
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD,
                       1u << RATEL_OPTION_AT);
    ratel_options_list(&o, list, sizeof list);
    CHECK(strcmp(list, "cost n, peek, max_wait ms") == 0);
    CHECK_EQ(ratel_option_find(RATEL_SPELL_FIELD, "MAX_WAIT", 8, NULL), -1);
    CHECK_EQ(rd(&o, "peek", "false", err, sizeof err), 0);
    CHECK_EQ(o.value[RATEL_OPTION_PEEK], 0);
    CHECK(o.given & (1u << RATEL_OPTION_PEEK));
    CHECK_MSG(&o, "peek", "1", "peek is given twice; give it once");
    CHECK_MSG(&o, "at", "5",
              "at is not an option here; options are cost n, peek, max_wait "
              "ms");
    CHECK_MSG(&o, "max_wait", "1.5",
              "max_wait must be an integer from 0 to 2592000000, not \"1.5\"");
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FIELD, 0);
    CHECK_MSG(&o, "peek", "yes",
              "peek must be true, false, 1 or 0, not \"yes\"");
    CHECK_EQ(rd(&o, "peek", "", err, sizeof err), 0);
    /* The CLI: --max-wait, given without its dashes. */
    ratel_options_init(&o, RATEL_OP_ACQUIRE, RATEL_SPELL_FLAG, 0);
    CHECK_EQ(ratel_option_find(RATEL_SPELL_FLAG, "max_wait", 8, NULL), -1);
    CHECK_EQ(rd(&o, "max-wait", "10", err, sizeof err), 0);
    CHECK_MSG(&o, "cost", "x",
              "--cost must be an integer from 1 to 1000000000, not \"x\"");
    CHECK_MSG(&o, "max-wait", "10", "--max-wait is given twice; give it once");
}

TEST(options_check_one_message_each)
{
    static const struct {
        int spell;
        const char *cost, *max_wait;
    } want[] = {
        {RATEL_SPELL_WORD,
         "COST 4 is more than rule 2 (\"5/1s:gcra,burst=3\") can ever admit "
         "(3)",
         "MAXWAIT needs every rule to be gcra; rule 1 (\"10/1m\") is sliding"},
        {RATEL_SPELL_FIELD,
         "cost 4 is more than rule 2 (\"5/1s:gcra,burst=3\") can ever admit "
         "(3)",
         "max_wait needs every rule to be gcra; rule 1 (\"10/1m\") is "
         "sliding"},
        {RATEL_SPELL_FLAG,
         "--cost 4 is more than rule 2 (\"5/1s:gcra,burst=3\") can ever admit "
         "(3)",
         "--max-wait needs every rule to be gcra; rule 1 (\"10/1m\") is "
         "sliding"},
    };
    const char *texts[] = {"10/1m", "5/1s:gcra,burst=3", "100/1h:fixed"};
    ratel_policy_t p;
    ratel_options_t o;
    char err[300];

    REQUIRE(ratel_policy_parse(&p, texts, 3, NULL, 0) == 0);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ratel_options_init(&o, RATEL_OP_ACQUIRE, want[i].spell, 0);
        CHECK_EQ(ratel_options_check(&o, &p, err, sizeof err), 0);
        o.value[RATEL_OPTION_COST] = 4;
        CHECK_EQ(ratel_options_check(&o, &p, err, sizeof err), RATEL_ECOST);
        CHECK(strcmp(err, want[i].cost) == 0);
        o.value[RATEL_OPTION_COST] = 3;
        o.value[RATEL_OPTION_MAXWAIT] = 10;
        CHECK_EQ(ratel_options_check(&o, &p, err, sizeof err), RATEL_EINVAL);
        CHECK(strcmp(err, want[i].max_wait) == 0);
    }
    /* A refund of more than a rule admits is no error: it is capped. */
    ratel_options_init(&o, RATEL_OP_REFUND, RATEL_SPELL_WORD, 0);
    o.value[RATEL_OPTION_COST] = 1000;
    CHECK_EQ(ratel_options_check(&o, &p, err, sizeof err), 0);
}

RATEL_SUITE(request_options) = {
    {"options_words_any_case_defaults_and_request",
     test_options_words_any_case_defaults_and_request},
    {"options_words_messages", test_options_words_messages},
    {"options_each_operation_its_own", test_options_each_operation_its_own},
    {"options_fields_and_flags", test_options_fields_and_flags},
    {"options_check_one_message_each", test_options_check_one_message_each},
    {0},
};
