/*
 * clock.c - the wall clock, for programs that feed the core.
 *
 * The core never reads a clock: a caller reads this once per request and
 * passes the value down as `now_us`, so every rule of a policy, and every
 * replica of a decision, sees the same instant.
 */
#include "ratel.h"

#include <time.h>

/*
 * Microseconds since the Unix epoch from CLOCK_REALTIME. Returns 0 if the
 * clock cannot be read (clock_gettime does not fail for CLOCK_REALTIME on
 * Linux; the check keeps other systems from returning garbage).
 */
int64_t ratel_clock_now_us(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
