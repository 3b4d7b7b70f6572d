#!/usr/bin/env bash
# demo.sh - `make demo`: replays the bundled ten-minute trace
# (examples/traces/sample.trace: 24 users, a script bursting across minute
# boundaries, SMS pumping over 60 numbers) through two policies and draws
# what each algorithm would have done.
#
#   BUILD=build scripts/demo.sh      (uses $BUILD/ratel; writes $BUILD/demo/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$PWD/$build ;; esac
ratel=$build/ratel
out=$build/demo
cd "$root" # the trace's name, as the charts show it, stays short
trace=examples/traces/sample.trace

if [ ! -x "$ratel" ]; then
    echo "demo: $ratel is not built; run 'make' first" >&2
    exit 1
fi
mkdir -p "$out"

section() { printf '\n== %s\n' "$*"; }

# Prints the --summary table with the keys that were denied most first,
# cut to `rows` keys; the overall line stays last.
top_denied() {
    local rows=$1
    awk -F'\t' -v rows="$rows" '
        function show(l,   f) {
            split(l, f, "\t")
            printf "  %-20s %9s %8s %7s %8s\n", f[1], f[2], f[3], f[4], f[5]
        }
        BEGIN { n = 0 }
        NR == 1 { header = $0; next }
        /^total \(/ { total = $0; next }
        # The keys-denied-most section after the total (a "# most denied"
        # header and "top N" lines) names keys already counted: skip it.
        /^# / || /^top / { next }
        { line[n] = $0; denied[n] = $4; n++ }
        END {
            show(header)
            for (shown = 0; shown < rows && shown < n; shown++) {
                best = -1
                for (i = 0; i < n; i++)
                    if (!(i in used) && (best < 0 || denied[i] > denied[best]))
                        best = i
                used[best] = 1
                show(line[best])
            }
            if (n > rows) printf "  ... %d more keys\n", n - rows
            show(total)
        }'
}

lines=$(grep -cv '^#' "$trace")
echo "ratel demo: $lines requests over ten minutes from $trace"
echo "(t_ms key: 24 users, a script bursting across minute boundaries, SMS pumping)"

section "Policy 1, a verification-code endpoint: ratel explain 1/60s 10/1h"
"$ratel" explain 1/60s 10/1h

section "ratel replay --rule 1/60s --rule 10/1h: the first requests (t_ms key allowed remaining retry_after_ms)"
"$ratel" replay --rule 1/60s --rule 10/1h "$trace" >"$out/sms.decisions"
head -8 "$out/sms.decisions"
echo "... all $(wc -l <"$out/sms.decisions") decisions in $out/sms.decisions"

section "... --summary, the keys denied most"
"$ratel" replay --rule 1/60s --rule 10/1h --summary --svg "$out/sms.svg" \
    "$trace" | top_denied 6

section "Policy 2, an API: ratel explain 20/1m"
"$ratel" explain 20/1m

section "ratel replay --rule 20/1m --summary, the keys denied most"
"$ratel" replay --rule 20/1m --summary --svg "$out/api.svg" "$trace" |
    top_denied 3

section "Charts: what sliding, fixed, approx and gcra would have done"
echo "  $out/sms.svg   (1/60s + 10/1h)"
echo "  $out/api.svg   (20/1m)"
if command -v rsvg-convert >/dev/null; then
    rsvg-convert -o "$out/sms.png" "$out/sms.svg"
    rsvg-convert -o "$out/api.png" "$out/api.svg"
    echo "  and the same as .png beside them"
fi
echo "In api.svg fixed windows admit 40 (2x the limit) across each burst's"
echo "minute boundary, where sliding never goes past 20. Open the charts in a"
echo "browser; docs/cli.md explains how to read them."
