#!/usr/bin/env bash
# `make valgrind`: the unit suite, the CLI suite and the Redis store's
# integration test, under valgrind with
# every error and every leak fatal. Property tests run at
# RATEL_TEST_SCALE=0.05 (valgrind is ~50x slower). Prints the suites' own
# "ok"/"FAIL" lines, a FAIL line for a run valgrind objected to, and the
# total "N passed, N failed".
#
# The CLI suite (tests/cli/test_cli.sh) prefixes every `ratel` command with
# $RATEL_CLI_WRAP; a valgrind error makes that command exit 99, so the
# check that ran it fails by name.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-build}
vg=(valgrind -q --error-exitcode=99 --leak-check=full
    --errors-for-leak-kinds=all --track-origins=no)
passed=0 failed=0

# Adds the "N passed, N failed" line of $1 (a suite's output) to the total.
add_counts() {
    local line p f
    line=$(printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then
        return 1
    fi
    p=${line%% passed*}
    f=${line#*, }
    f=${f%% failed}
    passed=$((passed + p))
    failed=$((failed + f))
}

if ! command -v valgrind >/dev/null; then
    echo "FAIL valgrind is not installed (run scripts/setup.sh)"
    echo "0 passed, 1 failed"
    exit 1
fi

# --- unit tests
echo "== unit tests under valgrind (RATEL_TEST_SCALE=${RATEL_TEST_SCALE:-0.05})"
out=$(RATEL_TEST_SCALE=${RATEL_TEST_SCALE:-0.05} "${vg[@]}" "$build/test_unit" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E '^(ok|FAIL) '
if ! add_counts "$out"; then
    echo "FAIL unit: no result line (exit $rc)"
    printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
    failed=$((failed + 1))
elif [ "$rc" -eq 99 ]; then
    echo "FAIL unit: valgrind reported errors"
    printf '%s\n' "$out" | grep '^==' | head -60 | sed 's/^/    /'
    failed=$((failed + 1))
elif [ "$rc" -ne 0 ] && ! printf '%s\n' "$out" | grep -qE '^FAIL '; then
    echo "FAIL unit: exit $rc"
    failed=$((failed + 1))
fi

# --- CLI suite, every ratel command under valgrind
cli=$here/cli/test_cli.sh
if [ -f "$cli" ] && grep -q 'RATEL_CLI_WRAP' "$cli"; then
    echo "== CLI suite under valgrind"
    out=$(RATEL_CLI_WRAP="${vg[*]}" BUILD="$build" bash "$cli" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) '
    if ! add_counts "$out"; then
        echo "FAIL cli: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
else
    echo "== CLI suite skipped: tests/cli/test_cli.sh has no RATEL_CLI_WRAP"
fi

# --- the CLI's store commands against real redis-servers, every ratel
# command under valgrind
cli_store=$here/cli/test_cli_store.sh
if [ -f "$cli_store" ]; then
    echo "== CLI store commands under valgrind"
    out=$(RATEL_CLI_WRAP="${vg[*]}" BUILD="$build" bash "$cli_store" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) '
    if ! add_counts "$out"; then
        echo "FAIL cli store: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

# --- rateld end to end, the daemon under valgrind (an error or a leak at
# exit makes its status 99: the suite's sigterm_exit check fails)
if [ -x "$build/rateld" ]; then
    echo "== rateld under valgrind"
    out=$(RATELD_WRAP="${vg[*]}" BUILD="$build" bash "$here/integration/test_rateld.sh" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) ' | grep -v '^ok '
    if ! add_counts "$out"; then
        echo "FAIL rateld: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

# --- captchad end to end, the service under valgrind (its sigterm_exit
# checks fail on a valgrind error or leak: exit status 99)
if [ -x "$build/captchad" ]; then
    echo "== captchad under valgrind"
    out=$(CAPTCHAD_WRAP="${vg[*]}" BUILD="$build" bash "$here/integration/test_captcha.sh" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) ' | grep -v '^ok '
    if ! add_counts "$out"; then
        echo "FAIL captchad: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

# --- the Redis store against real redis-servers (the servers themselves
# run without valgrind; the store, its threads and forks run under it)
if [ -x "$build/test_redis_store" ]; then
    echo "== Redis store under valgrind"
    out=$("${vg[@]}" --child-silent-after-fork=yes "$build/test_redis_store" \
        "${RATEL_MODULE:-$build/ratel.so}" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) '
    if ! add_counts "$out"; then
        echo "FAIL redis store: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    elif [ "$rc" -eq 99 ]; then
        echo "FAIL redis store: valgrind reported errors"
        printf '%s\n' "$out" | grep '^==' | head -60 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
else
    echo "FAIL redis store: $build/test_redis_store not built (make test builds it)"
    failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
