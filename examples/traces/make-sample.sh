#!/bin/sh
# make-sample.sh - writes examples/traces/sample.trace, a deterministic
# ten-minute trace of a "send me a verification code" endpoint, keyed per
# client, for `ratel replay` and `make demo`:
#
#   user:NN            24 well-behaved people: a code now and then, a few
#                      impatient ones asking again after 5-30 seconds.
#   ip:198.51.100.23   a script hammering in bursts of 50 requests, 100 ms
#                      apart, each straddling a minute boundary (minutes
#                      1, 3, 5, 7, 9): a fixed 20/1m window admits 20
#                      before the boundary and 20 after it, twice its limit
#                      within 5 seconds; a sliding one admits 20.
#   phone:+88216001NNN SMS pumping, minutes 3..8: a fraud ring cycles
#                      through 60 premium-rate numbers, one request every
#                      150 ms, so each number is asked every 9 seconds.
#
# Lines are `t_ms key`, sorted by time. The random numbers come from a
# Park-Miller generator in awk's doubles (exact below 2^53), not rand(),
# so every awk writes the same file.
#
# Usage: examples/traces/make-sample.sh [OUTPUT]   (default: beside this)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/sample.trace}

{
cat <<'HEAD'
# sample.trace - ten minutes of a verification-code endpoint, t_ms key.
# Written by examples/traces/make-sample.sh (deterministic); see there for
# the story: 24 users, a script bursting across minute boundaries, SMS
# pumping over 60 premium-rate numbers.
HEAD
awk 'BEGIN {
    seed = 20240601
    span = 600000

    # Well-behaved users.
    for (u = 1; u <= 24; u++) {
        t = int(rnd() * 90000)
        n = 3 + int(rnd() * 6)
        for (i = 0; i < n && t < span; i++) {
            printf "%d user:%02d\n", t, u
            if (rnd() < 0.2) {
                retry = t + 5000 + int(rnd() * 25000)
                if (retry < span)
                    printf "%d user:%02d\n", retry, u
            }
            t += 40000 + int(rnd() * 120000)
        }
    }

    # The script: 50 requests around every other minute boundary.
    for (m = 1; m <= 9; m += 2)
        for (i = 0; i < 50; i++)
            printf "%d ip:198.51.100.23\n", m * 60000 - 2500 + i * 100 + int(rnd() * 40)

    # SMS pumping over 60 numbers, minutes 3 to 8.
    k = 0
    for (t = 180000; t < 480000; t += 150) {
        printf "%d phone:+88216001%03d\n", t + int(rnd() * 60), 100 + k
        k = (k + 1) % 60
    }
}
function rnd() {
    seed = (seed * 16807) % 2147483647
    return seed / 2147483647
}' | LC_ALL=C sort -s -n -k1,1
} > "$out"
