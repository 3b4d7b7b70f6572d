#!/usr/bin/env bash
# Fuzz smoke test, part of `make test` (tests/run.sh). For every
# $BUILD/fuzz_NAME built with the standalone driver:
#   1. replays each seed in tests/fuzz/corpus/NAME/ on its own, so every
#      failing seed (a reproducer of a known bug, say) is named;
#   2. fuzzes for FUZZ_SMOKE_SECONDS (default 3) from a fixed PRNG seed,
#      mutating the seeds that passed.
# Prints "ok fuzz_NAME (...)" or "FAIL fuzz_NAME ..." per target and closes
# with "N passed, N failed". A failing generated input is saved under
# $BUILD/fuzz-crashes/; replay it with `$BUILD/fuzz_NAME FILE`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-build}
seconds=${FUZZ_SMOKE_SECONDS:-3}
crashes="$build/fuzz-crashes"
passed=0 failed=0 found=0

# First line that says why a run failed.
why() {
    printf '%s\n' "$1" |
        grep -m1 -E 'invariant broken|ERROR: |runtime error|Aborted' ||
        printf '%s\n' "$1" | grep -v 'passed, .* failed$' | tail -1
}

mkdir -p "$crashes"
for bin in "$build"/fuzz_*; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    found=1
    name=${bin##*/fuzz_}
    bad=0 seeds=()
    for seed in "$here/corpus/$name"/*; do
        [ -f "$seed" ] || continue
        if out=$("$bin" -runs 0 "$seed" 2>&1); then
            seeds+=("$seed")
        else
            echo "FAIL fuzz_$name seed ${seed#"$here"/}: $(why "$out")"
            bad=$((bad + 1))
        fi
    done
    args=(-seconds "$seconds" -seed 1 -artifact_prefix "$crashes/$name-")
    [ -f "$here/$name.dict" ] && args+=(-dict "$here/$name.dict")
    out=$("$bin" "${args[@]}" "${seeds[@]}" 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL fuzz_$name (exit $rc)"
        printf '%s\n' "$out" | grep -v 'passed, .* failed$' | tail -20 |
            sed 's/^/    /'
        failed=$((failed + 1))
    elif [ "$bad" -gt 0 ]; then
        echo "FAIL fuzz_$name: $bad seed(s) failed"
        failed=$((failed + 1))
    else
        summary=$(printf '%s\n' "$out" | grep "^fuzz_$name: " | tail -1)
        echo "ok fuzz_$name (${summary#fuzz_"$name": })"
        passed=$((passed + 1))
    fi
done
if [ "$found" -eq 0 ]; then
    echo "FAIL no fuzz targets in $build (make $build/fuzz_NAME first)"
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
