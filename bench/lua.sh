#!/usr/bin/env bash
# bench/lua.sh PORT - the EVAL script (build/lua/ratel.eval.lua) against the seed fixed-window script
# (INCR + EXPIRE) and plain INCR, on the running redis-server at
# 127.0.0.1:PORT, all in ONE run so that the ratios compare figures measured
# side by side. Every case is measured REPS times, round-robin (noise from
# other processes spreads over all cases), and the median is printed.
#
#   bench/lua.sh 6379                      3 rounds of 200,000 calls each
#   REPS=5 LUA_REQUESTS=100000 bench/lua.sh 6379
#   RATEL_LUA=/tmp/old-ratel.lua bench/lua.sh 6379   another version
#
# Output: "ratel<TAB>name<TAB>value<TAB>ops/s" for the script,
# "peer<TAB>name<TAB>ops_per_sec" for INCR and the seed (as
# ../shared/peers/run-peers.sh prints them), and
# "ratel<TAB>lua_NAME_vs_seed<TAB>ratio<TAB>x" for each ratel case.
# The load is the peers' own: redis-benchmark -c 50 -P 16. Rules are large
# enough never to deny, so every call is an admitted decision that writes.
# Hot keys: one key per case. "users" cases spread the calls over 100,000
# keys (redis-benchmark -r), as per-user limits do; the seed gets the same.
# Needs redis-tools (redis-benchmark, redis-cli). Measures, never judges.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
port=${1:?usage: bench/lua.sh PORT}
n=${LUA_REQUESTS:-200000}
reps=${REPS:-3}
seed_file=${SEED_LUA:-$top/../shared/peers/seed-fixed-window.lua}
cli=(redis-cli -p "$port")

ratel=$("${cli[@]}" SCRIPT LOAD "$(cat "${RATEL_LUA:-$top/build/lua/ratel.eval.lua}")") || exit 1
seed=$("${cli[@]}" SCRIPT LOAD "$(cat "$seed_file")") || exit 1
# The Redis calls every Lua decision makes (GET, TIME, SET ... PXAT)
# and its seven-integer reply, with no decision at all: the fastest any
# exact script with this contract could be. The seed needs neither TIME
# nor a seven-element reply.
calls=$("${cli[@]}" SCRIPT LOAD "
local old = redis.pcall('GET', KEYS[1])
local t = redis.call('TIME')
local now_us = t[1] * 1000000 + t[2]
redis.call('SET', KEYS[1], 'RT\\1\\1' .. string.rep('x', 22), 'PXAT',
    math.ceil(now_us / 1000) + 60000)
return { 1, 100000000, 99999999, 0, 60000, 0, 0 }") || exit 1

# The cases: "kind<TAB>name<TAB>redis-benchmark arguments". Keys start with
# bench:lua: and are deleted before and after.
cases=$(cat <<EOF
peer	redis-INCR	INCR bench:lua:incr
peer	seed-fixed-window-lua	EVALSHA $seed 1 bench:lua:seed 100000000 60
peer	seed-fixed-window-lua-users	-r 100000 EVALSHA $seed 1 bench:lua:seed:__rand_int__ 100000000 60
ratel	lua_calls_only	EVALSHA $calls 1 bench:lua:calls
ratel	lua_sliding	EVALSHA $ratel 1 bench:lua:sliding ACQUIRE 100000000/1m
ratel	lua_fixed	EVALSHA $ratel 1 bench:lua:fixed ACQUIRE 100000000/1m:fixed
ratel	lua_approx	EVALSHA $ratel 1 bench:lua:approx ACQUIRE 100000000/1m:approx
ratel	lua_gcra	EVALSHA $ratel 1 bench:lua:gcra ACQUIRE 100000000/1m:gcra
ratel	lua_two_rules	EVALSHA $ratel 1 bench:lua:two ACQUIRE 100000000/1m 1000000000/1h
ratel	lua_sliding_users	-r 100000 EVALSHA $ratel 1 bench:lua:sliding:__rand_int__ ACQUIRE 100000000/1m
ratel	lua_two_rules_users	-r 100000 EVALSHA $ratel 1 bench:lua:two:__rand_int__ ACQUIRE 100000000/1m 1000000000/1h
ratel	lua_reset	EVALSHA $ratel 1 bench:lua:reset RESET
EOF
)

clean() {
    "${cli[@]}" --scan --pattern 'bench:lua:*' | xargs -r -n 500 "${cli[@]}" DEL >/dev/null
}

# rps ARGS...: requests per second of one redis-benchmark run.
rps() {
    local extra=()
    if [ "$1" = -r ]; then extra=(-r "$2"); shift 2; fi
    redis-benchmark -p "$port" -c 50 -n "$n" -P 16 -q "${extra[@]}" "$@" \
        </dev/null 2>/dev/null | tr '\r' '\n' | grep -o '[0-9.]* requests per second' |
        tail -1 | cut -d' ' -f1
}

clean
results=$(mktemp)
trap 'rm -f "$results"; clean' EXIT
for _ in $(seq "$reps"); do
    while IFS=$'\t' read -r kind name args; do
        # shellcheck disable=SC2086 # args are words by design
        printf '%s\t%s\t%s\n' "$kind" "$name" "$(rps $args)" >>"$results"
    done <<<"$cases"
done

# Medians in the order of the cases, then each ratel case over the seed
# measured the same way (hot key or users).
awk -F'\t' -v order="$(cut -f2 <<<"$cases" | tr '\n' ' ')" '
    { v[$2] = v[$2] " " $3; kind[$2] = $1 }
    function median(list,    a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
                t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
            }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        n = split(order, names, " ")
        for (i = 1; i <= n; i++) {
            k = names[i]; m[k] = median(v[k])
            if (kind[k] == "peer") printf "peer\t%s\t%s\n", k, m[k]
            else printf "ratel\t%s\t%s\tops/s\n", k, m[k]
        }
        for (i = 1; i <= n; i++) {
            k = names[i]
            if (kind[k] != "ratel" || k == "lua_reset") continue
            s = k ~ /_users$/ ? m["seed-fixed-window-lua-users"] : m["seed-fixed-window-lua"]
            if (s > 0) printf "ratel\t%s_vs_seed\t%.2f\tx\n", k, m[k] / s
        }
    }' "$results"
