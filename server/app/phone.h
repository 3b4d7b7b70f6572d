/*
 * phone.h - telephone numbers as identities: the text a person or a form
 * wrote ("135-0000-3333", "+86 135 0000 3333", "008613500003333") parsed
 * by libphonenumber and written in its one E.164 spelling
 * ("+8613500003333"), so every spelling an SMS provider delivers to one
 * phone is one key, one code and one bucket. rateld's and the nginx
 * module's key sources (`|phone`) and captchad use it.
 *
 * Why libphonenumber (docs/keys.md, "Phone numbers"): it is Google's
 * library, the one SMS providers validate with, so a number it calls
 * valid is one they deliver to; it carries numbering-plan metadata for
 * every region (lengths, assigned ranges, number types); Debian packages
 * it (libphonenumber-dev). This file is C; server/app/phone.cc is the C++
 * behind it, and nothing of C++ (exceptions, types) crosses it.
 */
#ifndef RATEL_APP_PHONE_H
#define RATEL_APP_PHONE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest text ratel__phone_parse reads: longer input is refused before
   libphonenumber sees it (a person writes +86 (0) 135-0000-3333 in 21). */
#define RATEL__PHONE_TEXT_MAX 64

/* The number types of libphonenumber: our name, libphonenumber's
   (PhoneNumberUtil::PhoneNumberType, in its order) and the name in
   messages and docs. */
#define RATEL__PHONE_TYPE_MAP(XX)                                              \
    XX(FIXED_LINE, FIXED_LINE, "fixed_line")                                   \
    XX(MOBILE, MOBILE, "mobile")                                               \
    XX(FIXED_LINE_OR_MOBILE, FIXED_LINE_OR_MOBILE, "fixed_line_or_mobile")     \
    XX(TOLL_FREE, TOLL_FREE, "toll_free")                                      \
    XX(PREMIUM_RATE, PREMIUM_RATE, "premium_rate")                             \
    XX(SHARED_COST, SHARED_COST, "shared_cost")                                \
    XX(VOIP, VOIP, "voip")                                                     \
    XX(PERSONAL, PERSONAL_NUMBER, "personal")                                  \
    XX(PAGER, PAGER, "pager")                                                  \
    XX(UAN, UAN, "uan")                                                        \
    XX(VOICEMAIL, VOICEMAIL, "voicemail")                                      \
    XX(UNKNOWN, UNKNOWN, "unknown")

typedef enum ratel__phone_type_e {
#define RATEL__PHONE_TYPE_ENUM(name, lib, text) RATEL__PHONE_TYPE_##name,
    RATEL__PHONE_TYPE_MAP(RATEL__PHONE_TYPE_ENUM)
#undef RATEL__PHONE_TYPE_ENUM
        RATEL__PHONE_TYPES
} ratel__phone_type_t;

/* Why ratel__phone_parse refused a text (negative). Not a number as people
   write one: empty, longer than RATEL__PHONE_TEXT_MAX, a byte other than ASCII
   digits, spaces, dashes, dots, parentheses and one leading +, or
   libphonenumber cannot read it (too few or too many digits, a country code
   that does not exist, a national number without a default region). */
#define RATEL__PHONE_UNPARSABLE (-1)
/* Read, but not a valid number of its region's numbering plan (wrong
   length, a range not assigned). */
#define RATEL__PHONE_INVALID (-2)
/* The default region given is not one libphonenumber knows. */
#define RATEL__PHONE_BAD_REGION (-3)

typedef struct ratel__phone_s {
    char e164[24];    /* "+8613900000001": "+", a country code and a
                         national number of at most 17 digits (E.164 says
                         15 in all; libphonenumber's metadata holds valid
                         German numbers of 16) */
    char region[4];   /* the ISO 3166 region libphonenumber gives the
                         number ("CN"; "001" non-geographic, e.g. +800) */
    int country_code; /* 86 */
    int type;         /* a ratel__phone_type_t */
} ratel__phone_t;

/*
 * Parses the n bytes at `text` (not NUL-terminated) as a person or a form
 * writes a number: spaces, dashes, dots, parentheses, a leading +, the
 * region's international prefix (00 in CN, 011 in US), a national trunk
 * 0, and "+86 0135..." (a trunk 0 after the country code, which SMS
 * providers deliver to the same phone: libphonenumber drops it), with
 * `region` ("CN", either case) the region of numbers written without a
 * country code; NULL or "" accepts only numbers written with a leading +.
 *
 * Returns 0 with *out filled when libphonenumber reads the number and
 * calls it valid (IsValidNumber); RATEL__PHONE_UNPARSABLE,
 * RATEL__PHONE_INVALID or RATEL__PHONE_BAD_REGION otherwise, with *out
 * zeroed. Letters (vanity numbers, "ext."), NUL and other bytes, and
 * input longer than RATEL__PHONE_TEXT_MAX are refused before parsing, so
 * the work and memory per call are bounded. Never throws (a failed
 * allocation is RATEL__PHONE_UNPARSABLE); thread-safe. Each thread keeps
 * its last 256 answers (by text and region, ~25 KB): a parse takes tens
 * of microseconds, and a limited client repeats its number.
 */
int ratel__phone_parse(const char *text, size_t n, const char *region,
                       ratel__phone_t *out);

/* Whether libphonenumber knows `region` as a default region ("CN" or
   "cn" yes; "XX", "001", NULL and "" no): for config checks. */
int ratel__phone_region_known(const char *region);

/*
 * A configuration's default region as a string option's check
 * (server/app/options.h, ratel__option_t.check): 0 for a region
 * libphonenumber knows or "" (numbers written with + only), else -1 with
 * why naming the text and what is accepted.
 */
int ratel__phone_check_region(const char *text, char *why, size_t whylen);

/* A type's name ("mobile", "premium_rate", ...); "unknown" out of
   range. */
const char *ratel__phone_type_name(int type);

/*
 * Whether numbers of `type` make the one who calls or texts them pay more
 * than a normal number (premium_rate, shared_cost): no one asks for a
 * verification code on one, and SMS-pumping rings earn from traffic to
 * them, so senders of codes refuse them.
 */
int ratel__phone_type_premium(int type);

/* What a ratel__phone_parse error means, for messages ("not a valid
   number ..."); "" for 0. */
const char *ratel__phone_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_APP_PHONE_H */
