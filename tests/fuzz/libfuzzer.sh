#!/usr/bin/env bash
# `make fuzz`: coverage-guided runs of every tests/fuzz/fuzz_NAME.c with
# clang's libFuzzer, AddressSanitizer and UBSan, FUZZ_SECONDS each
# (default 60), one target after the other.
#
# Each target is compiled with lib/core/*.c and lib/store/*.c into
# build-fuzz/ (FUZZ_BUILD). The seeds in tests/fuzz/corpus/NAME/ are read
# (each is first run alone: a failing one is named and left out);
# inputs libFuzzer finds are written to build-fuzz/corpus/NAME/ (kept between
# runs, never into the repository); crashes go to build-fuzz/crashes/NAME-*.
# Prints each target's figures (runs, runs/s, coverage, corpus) and
# "ok"/"FAIL", then "N passed, N failed".
#
#   FUZZ_SECONDS=300 make fuzz
#   FUZZ_TARGETS="state" tests/fuzz/libfuzzer.sh    # only fuzz_state
#   build-fuzz/fuzz_state build-fuzz/crashes/state-crash-...   # replay
set -u
cd "$(dirname "$0")/../.." || exit 1
seconds=${FUZZ_SECONDS:-60}
out=${FUZZ_BUILD:-build-fuzz}
clang=${CLANG:-clang}
passed=0 failed=0

# shellcheck disable=SC2054 # -fsanitize's list: one argument, commas and all
cflags=(-std=gnu11 -g -O1 -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
        -Iinclude -Ilib -Ilib/internal -Iserver -D_GNU_SOURCE -pthread
        -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
        -Wpointer-arith -Wvla)
lib=(lib/core/*.c)
for f in lib/tz/*.c lib/store/*.c module/args.c; do [ -e "$f" ] && lib+=("$f"); done
# The Redis store embeds the Lua artefacts and links hiredis.
sh scripts/lua-build.sh "$out/lua"
scripts/embed-lua.sh "$out/lua/ratel.lib.lua" "$out/lua/ratel.eval.lua" "$out/gen/lua_script.c"
lib+=("$out/gen/lua_script.c")
# rateld's and captchad's parsers (config, HTTP) and what they need:
# the code they share (server/app/) and rateld's (rateld/, without main).
for f in server/http/*.c server/app/*.c rateld/*.c; do
    [ -e "$f" ] && [ "$f" != rateld/main.c ] && lib+=("$f")
done
# Envoy's and gRPC health's messages, generated as the Makefile does.
mkdir -p "$out/gen/proto"
mapfile -t protos < <(find proto -name '*.proto')
protoc-c --c_out="$out/gen/proto" -Iproto -I/usr/include "${protos[@]}" \
    /usr/include/google/protobuf/{duration,wrappers,struct}.proto
while IFS= read -r f; do lib+=("$f"); done < <(find "$out/gen/proto" -name '*.pb-c.c')
cflags+=(-I. -I"$out/gen/proto")
libs=(-lhiredis -lssl -lcrypto -levent_openssl -lyaml -levent -lhttp_parser -lcjson -lsystemd -lnghttp2 -lprotobuf-c)
# server/app's C++ (the libphonenumber shim), compiled once with clang++
# and the same sanitizers (not UBSan's vptr check, whose C++ runtime a
# link by clang does not bring), and libphonenumber with the C++ runtime.
clangxx=${CLANGXX:-clang++}
for f in server/app/*.cc; do
    [ -e "$f" ] || continue
    obj="$out/obj/${f%.cc}.o"
    mkdir -p "${obj%/*}"
    if ! "$clangxx" -std=gnu++17 -g -O1 -fno-omit-frame-pointer \
        -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr \
        -fno-sanitize-recover=all -Iserver -D_GNU_SOURCE -pthread \
        -Wall -Wextra -Wshadow -c "$f" -o "$obj"; then
        echo "FAIL $f: does not build with $clangxx"
        echo "0 passed, 1 failed"
        exit 1
    fi
    lib+=("$obj")
done
libs+=(-lphonenumber -lstdc++)

mkdir -p "$out/crashes"
read -r -a targets <<<"${FUZZ_TARGETS:-}"
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do f=${f##*/fuzz_}; targets+=("${f%.c}"); done
fi
for name in "${targets[@]}"; do
    bin="$out/fuzz_$name" log="$out/fuzz_$name.log"
    echo "== fuzz_$name: building"
    # The engine's target drives it through the tests' in-memory transport.
    extra=()
    [ "$name" = engine ] && extra=(tests/unit/mem_transport.c)
    if ! "$clang" "${cflags[@]}" -o "$bin" "tests/fuzz/fuzz_$name.c" "${extra[@]}" "${lib[@]}" "${libs[@]}"; then
        echo "FAIL fuzz_$name: does not build with $clang -fsanitize=fuzzer"
        failed=$((failed + 1))
        continue
    fi
    mkdir -p "$out/corpus/$name"
    args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=25
          -use_value_profile=1 -artifact_prefix="$out/crashes/$name-")
    [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
    # Seeds that fail on their own (reproducers of open bugs) are named
    # and left out, so they do not stop the search for new ones.
    seeds="$out/seeds/$name" bad=0
    rm -rf "$seeds" && mkdir -p "$seeds"
    for f in tests/fuzz/corpus/"$name"/*; do
        [ -f "$f" ] || continue
        if "./$bin" "$f" >"$out/seed.log" 2>&1; then
            cp "$f" "$seeds/"
        else
            echo "FAIL fuzz_$name seed $f:" \
                "$(grep -m1 -E 'invariant broken|ERROR: |runtime error' "$out/seed.log")"
            bad=$((bad + 1))
        fi
    done
    echo "== fuzz_$name: fuzzing for ${seconds}s (log: $log)"
    "./$bin" "${args[@]}" "$out/corpus/$name" "$seeds" >"$log" 2>&1
    rc=$?
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
    echo "fuzz_$name: $(stat number_of_executed_units) runs," \
         "$(stat average_exec_per_sec)/s, cov ${cov:-?}, ft ${ft:-?}," \
         "corpus ${corp:-?}, $(stat new_units_added) new, peak" \
         "$(stat peak_rss_mb) MB"
    if [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ]; then
        echo "ok fuzz_$name"
        passed=$((passed + 1))
    elif [ "$rc" -eq 0 ]; then
        echo "FAIL fuzz_$name: $bad seed(s) failed, nothing new found"
        failed=$((failed + 1))
    else
        echo "FAIL fuzz_$name (exit $rc):"
        grep -E 'invariant broken|ERROR: |SUMMARY: |runtime error|Test unit written' "$log" |
            head -10 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
