/*
 * fuzz_phone.c - the libphonenumber shim (server/app/phone.h) on
 * arbitrary bytes. The first byte picks the default region (none, "",
 * CN, US, GB, lower-case cn, or XX that libphonenumber does not know);
 * the rest is the number's text.
 *
 * Invariants (a violation aborts, which the fuzzer reports):
 *
 *   - the result is 0 or one of the three refusals, and BAD_REGION
 *     exactly for the unknown region;
 *   - text longer than RATEL__PHONE_TEXT_MAX, or holding a byte other
 *     than ASCII digits, space, - . ( ) and a + before every digit, is
 *     refused (UNPARSABLE) whatever libphonenumber would make of it;
 *   - a refusal leaves *out zeroed;
 *   - an accepted number's e164 is "+" and 2 to 20 digits starting with
 *     its country code, its region two upper-case letters or "001", its
 *     type in range; and its E.164 text read again, without a region, is
 *     accepted as the same number (the form is its own normal form).
 */
#include "app/phone.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_phone: %s:%d: invariant broken: %s\n",       \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

static const char *const regions[] = {NULL, "", "CN", "US", "GB", "cn", "XX"};
#define REGIONS (sizeof regions / sizeof regions[0])
#define UNKNOWN_REGION 6

/* The shim's own rule for what people write, restated plainly. */
static int plain(const uint8_t *s, size_t n)
{
    int digits = 0, plus = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digits = 1;
        else if (s[i] == '+' && !digits && !plus)
            plus = 1;
        else if (!memchr(" -.()", s[i], 5) || s[i] == '\0')
            return 0;
    }
    return digits;
}

static int zeroed(const ratel__phone_t *p)
{
    static const ratel__phone_t zero;
    return memcmp(p, &zero, sizeof zero) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ratel__phone_t p, again;
    size_t r, n, digits;
    const char *text;
    char cc[8];
    int rc;

    if (size == 0)
        return 0;
    r = data[0] % REGIONS;
    text = (const char *)data + 1;
    n = size - 1;
    memset(&p, 0x5a, sizeof p);
    rc = ratel__phone_parse(text, n, regions[r], &p);
    ASSERT(rc == 0 || rc == RATEL__PHONE_UNPARSABLE ||
           rc == RATEL__PHONE_INVALID || rc == RATEL__PHONE_BAD_REGION);
    ASSERT((rc == RATEL__PHONE_BAD_REGION) == (r == UNKNOWN_REGION));
    if (r != UNKNOWN_REGION &&
        (n > RATEL__PHONE_TEXT_MAX || !plain((const uint8_t *)text, n)))
        ASSERT(rc == RATEL__PHONE_UNPARSABLE);
    if (rc != 0) {
        ASSERT(zeroed(&p));
        ASSERT(ratel__phone_strerror(rc)[0] != '\0');
        return 0;
    }

    /* "+" and digits, beginning with the country code: a country code of
       at most 3 and a national number of at most 17 (libphonenumber's
       bound; E.164 says 15 in all, but German numbers of 16 are valid). */
    ASSERT(p.e164[0] == '+');
    digits = strspn(p.e164 + 1, "0123456789");
    ASSERT(digits >= 2 && digits <= 20 && p.e164[1 + digits] == '\0');
    ASSERT(p.country_code > 0 && p.country_code < 1000);
    snprintf(cc, sizeof cc, "+%d", p.country_code);
    ASSERT(strncmp(p.e164, cc, strlen(cc)) == 0);
    ASSERT(strcmp(p.region, "001") == 0 ||
           (strlen(p.region) == 2 && p.region[0] >= 'A' && p.region[0] <= 'Z' &&
            p.region[1] >= 'A' && p.region[1] <= 'Z'));
    ASSERT(p.type >= 0 && p.type < RATEL__PHONE_TYPES);
    ASSERT(ratel__phone_type_name(p.type)[0] != '\0');

    /* The E.164 form is its own normal form, with or without a region. */
    ASSERT(ratel__phone_parse(p.e164, strlen(p.e164), NULL, &again) == 0);
    ASSERT(memcmp(&p, &again, sizeof p) == 0);
    ASSERT(ratel__phone_parse(p.e164, strlen(p.e164), "US", &again) == 0);
    ASSERT(memcmp(&p, &again, sizeof p) == 0);
    return 0;
}
