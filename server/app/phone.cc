/*
 * phone.cc - the C++ behind phone.h: libphonenumber's PhoneNumberUtil
 * (a process-wide singleton whose methods are const and thread-safe: its
 * regular-expression cache takes a POSIX mutex) called from C. Every
 * entry point catches every exception: a failed allocation inside
 * libphonenumber or std::string is a refusal, never an unwinding through
 * C frames.
 */
#include "app/phone.h"

#include <phonenumbers/phonenumberutil.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

using i18n::phonenumbers::PhoneNumber;
using i18n::phonenumbers::PhoneNumberUtil;

/* Our types are libphonenumber's, in its order: the type is the enum's
   value, and the compiler checks each one. */
#define RATEL__PHONE_TYPE_SAME(name, lib, text)                                \
    static_assert(static_cast<int>(PhoneNumberUtil::lib) ==                    \
                      RATEL__PHONE_TYPE_##name,                                \
                  "phone.h's type " #name " is not libphonenumber's " #lib);
RATEL__PHONE_TYPE_MAP(RATEL__PHONE_TYPE_SAME)
#undef RATEL__PHONE_TYPE_SAME
static_assert(RATEL__PHONE_TYPES ==
                  static_cast<int>(PhoneNumberUtil::kMaxNumberType) + 1,
              "phone.h lists every libphonenumber type");

static const char *const type_names[RATEL__PHONE_TYPES] = {
#define RATEL__PHONE_TYPE_NAME(name, lib, text) text,
    RATEL__PHONE_TYPE_MAP(RATEL__PHONE_TYPE_NAME)
#undef RATEL__PHONE_TYPE_NAME
};

/*
 * Whether the n bytes at text are only what people write in a number:
 * ASCII digits (at least one), spaces, dashes, dots, parentheses, and a
 * + before every digit. libphonenumber itself is lenient - it skips text
 * before the number ("Tel: "), reads letters as keypad digits
 * ("1-800-FLOWERS") and drops an extension ("ext. 5"), full-width digits
 * and more - and a key source must not make one phone many spellings a
 * backend may read differently.
 */
static bool plain_number(const char *text, size_t n)
{
    bool digits = false, plus = false;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (c >= '0' && c <= '9')
            digits = true;
        else if (c == '+' && !digits && !plus)
            plus = true;
        else if (c != ' ' && c != '-' && c != '.' && c != '(' && c != ')')
            return false;
    }
    return digits;
}

/* The default region as libphonenumber spells it ("CN") into out[3]:
   NULL and "" give "ZZ" (unknown: only +-prefixed numbers parse). false
   when region is not two ASCII letters. */
static bool region_code(const char *region, char out[3])
{
    if (region == nullptr || region[0] == '\0') {
        out[0] = 'Z', out[1] = 'Z', out[2] = '\0';
        return true;
    }
    for (int i = 0; i < 2; i++) {
        char c = region[i];
        if (c >= 'a' && c <= 'z')
            c = static_cast<char>(c - 'a' + 'A');
        if (c < 'A' || c > 'Z')
            return false;
        out[i] = c;
    }
    out[2] = '\0';
    return region[2] == '\0';
}

/* Whether libphonenumber has metadata for the two-letter region. Reads
   the set once (C++ initialises a function's static once, thread-safely);
   a failure to build it throws to the caller's catch. */
static bool known(const char code[3])
{
    static const std::set<std::string> regions = [] {
        std::set<std::string> s;
        PhoneNumberUtil::GetInstance()->GetSupportedRegions(&s);
        return s;
    }();
    return regions.count(code) > 0;
}

extern "C" int ratel__phone_region_known(const char *region)
{
    char code[3];
    if (region == nullptr || region[0] == '\0' || !region_code(region, code))
        return 0;
    try {
        return known(code) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

extern "C" int ratel__phone_check_region(const char *text, char *why,
                                         size_t whylen)
{
    if (text[0] == '\0' || ratel__phone_region_known(text))
        return 0;
    snprintf(why, whylen,
             "\"%.16s\" is not a region libphonenumber knows; expected an "
             "ISO 3166 two-letter region (CN, US, GB, ...) or \"\" (numbers "
             "written with + only)",
             text);
    return -1;
}

/* Parses within the bounds the caller checked; may throw
   (std::bad_alloc). */
static int parse(const char *text, size_t n, const char code[3],
                 ratel__phone_t *out)
{
    const PhoneNumberUtil &util = *PhoneNumberUtil::GetInstance();
    PhoneNumber number;
    if (util.Parse(std::string(text, n), code, &number) !=
        PhoneNumberUtil::NO_PARSING_ERROR)
        return RATEL__PHONE_UNPARSABLE;
    /* Valid is "of a type" (IsValidNumber is GetNumberType's matching
       of the number against its region's ranges, != UNKNOWN): one
       matching, not two (each is a third of a parse's time). */
    int type = static_cast<int>(util.GetNumberType(number));
    if (type == static_cast<int>(PhoneNumberUtil::UNKNOWN))
        return RATEL__PHONE_INVALID;
    std::string e164, region;
    util.Format(number, PhoneNumberUtil::E164, &e164);
    util.GetRegionCodeForNumber(number, &region);
    if (e164.size() >= sizeof out->e164 || region.size() >= sizeof out->region)
        return RATEL__PHONE_INVALID;
    e164.copy(out->e164, e164.size());
    out->e164[e164.size()] = '\0';
    region.copy(out->region, region.size());
    out->region[region.size()] = '\0';
    out->country_code = number.country_code();
    out->type = type >= 0 && type < RATEL__PHONE_TYPES
                    ? type
                    : static_cast<int>(RATEL__PHONE_TYPE_UNKNOWN);
    return 0;
}

/*
 * The last numbers each thread parsed, by the text and the region: a
 * parse takes tens of microseconds (libphonenumber's regular
 * expressions), and a limited client sends its one number again and
 * again. Direct-mapped, 256 entries of about 100 bytes per thread; a
 * refusal is remembered as well as a number.
 */
namespace
{
struct cached_t {
    char text[RATEL__PHONE_TEXT_MAX];
    unsigned char n; /* 0: empty */
    char code[3];
    int rc;
    ratel__phone_t phone;
};
const size_t CACHE_SLOTS = 256;
thread_local cached_t cache[CACHE_SLOTS];

size_t slot_of(const char *text, size_t n, const char code[3])
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ static_cast<unsigned char>(text[i])) * 16777619u;
    h = (h ^ static_cast<unsigned char>(code[0])) * 16777619u;
    h = (h ^ static_cast<unsigned char>(code[1])) * 16777619u;
    return h % CACHE_SLOTS;
}
} // namespace

/* parse() through this thread's cache (n <= RATEL__PHONE_TEXT_MAX). */
static int parse_cached(const char *text, size_t n, const char code[3],
                        ratel__phone_t *out)
{
    cached_t &c = cache[slot_of(text, n, code)];
    if (c.n == n && memcmp(c.code, code, 2) == 0 &&
        memcmp(c.text, text, n) == 0) {
        *out = c.phone;
        return c.rc;
    }
    int rc = parse(text, n, code, out);
    memcpy(c.text, text, n);
    c.n = static_cast<unsigned char>(n);
    memcpy(c.code, code, 3);
    c.rc = rc;
    c.phone = rc == 0 ? *out : ratel__phone_t();
    return rc;
}

extern "C" int ratel__phone_parse(const char *text, size_t n,
                                  const char *region, ratel__phone_t *out)
{
    bool default_region = region != nullptr && region[0] != '\0';
    char code[3];
    int rc;
    if (out == nullptr)
        return RATEL__PHONE_UNPARSABLE;
    *out = ratel__phone_t();
    try {
        /* The caller's region first: a mistake in the configuration is
           named as such, whatever the number. */
        if (!region_code(region, code) || (default_region && !known(code)))
            return RATEL__PHONE_BAD_REGION;
        if (text == nullptr || n == 0 || n > RATEL__PHONE_TEXT_MAX ||
            !plain_number(text, n))
            return RATEL__PHONE_UNPARSABLE;
        rc = parse_cached(text, n, code, out);
    } catch (...) {
        rc = RATEL__PHONE_UNPARSABLE;
    }
    if (rc != 0)
        *out = ratel__phone_t();
    return rc;
}

extern "C" const char *ratel__phone_type_name(int type)
{
    if (type < 0 || type >= RATEL__PHONE_TYPES)
        type = RATEL__PHONE_TYPE_UNKNOWN;
    return type_names[type];
}

extern "C" int ratel__phone_type_premium(int type)
{
    return type == RATEL__PHONE_TYPE_PREMIUM_RATE ||
           type == RATEL__PHONE_TYPE_SHARED_COST;
}

extern "C" const char *ratel__phone_strerror(int rc)
{
    switch (rc) {
    case 0:
        return "";
    case RATEL__PHONE_INVALID:
        return "not a valid number of its region's numbering plan";
    case RATEL__PHONE_BAD_REGION:
        return "the default region is not one libphonenumber knows";
    default:
        return "not a phone number (ASCII digits, spaces, dashes, dots, "
               "parentheses and a leading +, at most 64 bytes)";
    }
}
