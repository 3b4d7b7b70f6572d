/*
 * status.c - sets of HTTP response statuses (status.h).
 */
#include "app/status.h"

#include <stdio.h>
#include <string.h>

long ratel__status_read(const char *text, size_t n, char *why, size_t whylen)
{
    long v = 0;

    for (size_t i = 0; i < n && n == 3; i++) {
        if (text[i] < '0' || text[i] > '9') {
            v = 0;
            break;
        }
        v = v * 10 + (text[i] - '0');
    }
    if (n != 3 || v < RATEL__STATUS_MIN || v > RATEL__STATUS_MAX) {
        snprintf(why, whylen,
                 "\"%.*s\" is not a status: expected a number from %d to "
                 "%d, e.g. 401",
                 (int)(n > 32 ? 32 : n), text, RATEL__STATUS_MIN,
                 RATEL__STATUS_MAX);
        return -1;
    }
    return v;
}

int ratel__status_add(ratel__status_set_t *set, const char *text, size_t n,
                      char *why, size_t whylen)
{
    long v = ratel__status_read(text, n, why, whylen);

    if (v < 0)
        return -1;
    v -= RATEL__STATUS_MIN;
    set->bits[v / 64] |= (uint64_t)1 << (v % 64);
    return 0;
}

int ratel__status_add_list(ratel__status_set_t *set, const char *text, size_t n,
                           char *why, size_t whylen)
{
    const char *p = text, *end = text + n;

    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (ratel__status_add(set, p, (size_t)(stop - p), why, whylen))
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

int ratel__status_has(const ratel__status_set_t *set, long status)
{
    long v = status - RATEL__STATUS_MIN;

    if (status < RATEL__STATUS_MIN || status > RATEL__STATUS_MAX)
        return 0;
    return (int)((set->bits[v / 64] >> (v % 64)) & 1);
}

void ratel__status_join(ratel__status_set_t *set,
                        const ratel__status_set_t *from)
{
    for (size_t i = 0; i < sizeof set->bits / sizeof set->bits[0]; i++)
        set->bits[i] |= from->bits[i];
}

size_t ratel__status_format(const ratel__status_set_t *set, char *buf,
                            size_t len)
{
    size_t n = 0;

    if (len)
        buf[0] = '\0';
    for (long s = RATEL__STATUS_MIN; s <= RATEL__STATUS_MAX; s++) {
        char one[8];
        int m;
        if (!ratel__status_has(set, s))
            continue;
        m = snprintf(one, sizeof one, "%s%ld", n ? "," : "", s);
        if (n + (size_t)m < len)
            memcpy(buf + n, one, (size_t)m + 1);
        else if (len)
            buf[len - 1 > n ? n : len - 1] = '\0';
        n += (size_t)m;
    }
    return n;
}
