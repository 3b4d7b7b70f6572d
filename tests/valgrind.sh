#!/usr/bin/env bash
# `make valgrind`: the unit suite (the Redis engine's and its transports'
# suites included), the CLI suites, rateld's and captchad's end-to-end
# suites, the nginx module in one nginx process (its zones in shared
# memory and in Redis), the Redis store's
# integration tests (plain, cluster, TLS, Sentinel) and the engine's fuzz
# seeds, under valgrind with every error
# and every leak fatal. Property tests run at
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
# tests/valgrind.supp: what libphonenumber, protobuf and ICU keep for the
# life of the process on purpose (its comments say what and why).
vg=(valgrind -q --error-exitcode=99 --leak-check=full
    --errors-for-leak-kinds=all --track-origins=no
    --suppressions="$here/valgrind.supp")
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

# shell_suite TITLE SHOWN SCRIPT [VAR=VALUE...]: runs the suite SCRIPT
# with BUILD and the VARs set, prints its lines matching SHOWN (grep -E)
# and adds its counts; without a result line, one failure with the end
# of its output.
shell_suite() {
    local title=$1 shown=$2 script=$3 out rc
    shift 3
    echo "== $title under valgrind"
    out=$(env "$@" BUILD="$build" bash "$script" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E "$shown"
    if ! add_counts "$out"; then
        echo "FAIL $title: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

# --- CLI suite, every ratel command under valgrind
cli=$here/cli/test_cli.sh
if [ -f "$cli" ] && grep -q 'RATEL_CLI_WRAP' "$cli"; then
    shell_suite "CLI suite" '^(ok|FAIL) ' "$cli" RATEL_CLI_WRAP="${vg[*]}"
else
    echo "== CLI suite skipped: tests/cli/test_cli.sh has no RATEL_CLI_WRAP"
fi

# wrapped_suite TITLE WRAP_VAR SCRIPT: runs a suite whose programs the
# script prefixes with $WRAP_VAR (valgrind here). A valgrind error makes
# the wrapped program exit 99, which fails the suite's own checks.
wrapped_suite() { shell_suite "$1" '^FAIL ' "$3" "$2=${vg[*]}"; }

# The CLI's store commands against real redis-servers; rateld and captchad
# end to end (an error or a leak at exit makes the daemon's status 99: the
# suite's sigterm_exit check fails).
[ -f "$here/cli/test_cli_store.sh" ] &&
    wrapped_suite "CLI store commands" RATEL_CLI_WRAP "$here/cli/test_cli_store.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite rateld RATELD_WRAP "$here/integration/test_rateld.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite "rateld keys and overrides" RATELD_WRAP "$here/integration/test_rateld_keys.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite "rateld against a steering client" RATELD_WRAP "$here/integration/test_rateld_attacker.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite "rateld on Redis" RATELD_WRAP "$here/integration/test_rateld_redis.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite "rateld as Envoy's rate limit service" RATELD_WRAP "$here/integration/test_envoy.sh"
[ -x "$build/rateld" ] &&
    wrapped_suite "rateld's leased policies in a gateway route" RATELD_WRAP "$here/integration/test_lease_route.sh"
[ -x "$build/rateld" ] && command -v haproxy >/dev/null &&
    wrapped_suite "rateld counting failed logins (charge_on, /v1/report)" RATELD_WRAP "$here/integration/test_login.sh"
[ -x "$build/captchad" ] &&
    wrapped_suite captchad CAPTCHAD_WRAP "$here/integration/test_captcha.sh"
[ -x "$build/rateld" ] && [ -x "$build/captchad" ] &&
    wrapped_suite "rateld and captchad restarts (snapshots)" RATELD_WRAP "$here/integration/test_rateld_restart.sh"

# The nginx module: one nginx process (master_process off) under
# valgrind on a short run, with zones in shared memory and in Redis (each
# failure policy at its deadline, TLS, a refund, the deny cache); an error
# or a definite leak in the module's frames fails it (nginx's own leaks
# at exit are not the module's).
if [ -f "$build/nginx/ngx_http_ratel_module.so" ]; then
    for suite in test_nginx_module test_nginx_redis test_nginx_concurrent test_nginx_charge_on test_nginx_lease; do
        shell_suite "nginx module ($suite)" '^(ok|FAIL) ' "$here/integration/$suite.sh" RATEL_NGINX_VALGRIND=1
    done
else
    echo "FAIL nginx module: $build/nginx/ngx_http_ratel_module.so not built (make)"
    failed=$((failed + 1))
fi

# vg_program TITLE PROGRAM ARGS...: a test program under valgrind that
# prints its own "ok"/"FAIL" lines and "N passed, N failed" (the servers
# it starts run without valgrind; the program, its threads and forks run
# under it).
vg_program() {
    local title=$1 out rc
    shift
    echo "== $title under valgrind"
    out=$("${vg[@]}" --child-silent-after-fork=yes "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) '
    if ! add_counts "$out"; then
        echo "FAIL $title: no result line (exit $rc)"
        printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        failed=$((failed + 1))
    elif [ "$rc" -eq 99 ]; then
        echo "FAIL $title: valgrind reported errors"
        printf '%s\n' "$out" | grep '^==' | head -60 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

# --- the Redis store against real redis-servers: plain and cluster
# (test_redis_store), over TLS and through Sentinel (test_redis_reach).
# The transports' own suites (transport_poll_*, transport_event_*) and
# the engine's on the in-memory transport (engine_*) are in the unit
# tests above.
for prog in test_redis_store test_redis_reach; do
    if [ -x "$build/$prog" ]; then
        vg_program "$prog" "$build/$prog" "${RATEL_MODULE:-$build/ratel.so}"
    else
        echo "FAIL $prog: $build/$prog not built (make test builds it)"
        failed=$((failed + 1))
    fi
done

# --- the Redis engine's fuzz target: its seeds and a few hundred
# mutations of them (a leak or a bad read in a rarely taken path).
if [ -x "$build/fuzz_engine" ]; then
    vg_program fuzz_engine "$build/fuzz_engine" -runs 300 -seed 1 \
        "$here/fuzz/corpus/engine"
else
    echo "FAIL fuzz_engine: $build/fuzz_engine not built (make test builds it)"
    failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
