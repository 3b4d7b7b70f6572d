#!/usr/bin/env bash
# Runs every suite of `make test` and ends with the total
# "N passed, N failed". Each suite prints its own closing line of that form;
# this script adds them up.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-build}
passed=0 failed=0

tally() { # name, then the command
    local name=$1; shift
    local out line
    echo "== $name"
    out=$("$@" 2>&1); local rc=$?
    printf '%s\n' "$out" | grep -v '^ok ' | grep -v '^$' | head -200
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then
        echo "FAIL $name: no result line (exit $rc)"; failed=$((failed + 1)); return
    fi
    local p f
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exit $rc"; failed=$((failed + 1))
    fi
    echo "$line"
}

tally unit "$build/test_unit"
for t in "$here"/cli/*.sh; do
    [ -e "$t" ] && tally "cli $(basename "$t")" env BUILD="$build" bash "$t"
done
tally fuzz-smoke env BUILD="$build" bash "$here/fuzz/smoke.sh"
# Real redis-servers on loopback ports (started and stopped by each script).
for t in "$here"/integration/test_*.sh; do
    [ -e "$t" ] && tally "integration $(basename "$t")" env BUILD="$build" bash "$t"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
