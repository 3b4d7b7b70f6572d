#!/usr/bin/env bash
# test_lease.sh - leased policies on a real redis-server (docs/leases.md):
#
# - docs/deployment.md's rateld-lease snippet as printed (ports moved):
#   --check-config prints the overshoot line the page shows, rateld starts
#   on it and answers from slices (source "lease").
# - Three rateld on one Redis (the module), one leased key driven past its
#   limit from all three at once: admitted within the limit plus the
#   printed bound, most answers from slices, far fewer Redis calls than
#   decisions; the same through the Functions library (mode=lua is the
#   EVAL script, mode=function the library).
# - SIGTERM of one: the permits it held and had not spent are back on the
#   key (RATEL.INFO's used drops by exactly that many).
. "$(dirname "$0")/lib.sh"

require_built rateld
docs=$root/docs/deployment.md
rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }

# The snippet NAME of docs/deployment.md, its ports replaced.
snippet() {
    doc_snippet "$docs" "$1" | sed -e "s/8080/$2/g; s/6379/$rport/g"
}
# The text block after the snippet: what --check-config prints.
shown_bound() { doc_snippet_output "$docs" rateld-lease; }

# metric PORT NAME_AND_LABELS: a counter's value on rateld's /metrics.
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}

# --- the page's snippet, as printed -------------------------------------
sport=$(free_port)
snippet rateld-lease "$sport" >"$tmp/snippet.yaml"
contains snippet_found "$(cat "$tmp/snippet.yaml")" 'lease: {ttl_ms: 250'
out=$("$build/rateld" --check-config "$tmp/snippet.yaml" 2>&1)
same snippet_check_bound "$(echo "$out" | sed -n 2p)" "$(shown_bound)"
read -r -a wrap <<<"${RATELD_WRAP:-}"
server_start snippet "$sport" "${wrap[@]}" "$build/rateld" --config "$tmp/snippet.yaml" ||
    fail snippet_start "rateld did not start on the page's snippet"
for _ in $(seq 20); do
    curl -s -o /dev/null "http://127.0.0.1:$sport/v1/acquire?policy=api&key=page"
done
contains snippet_lease "$(curl -s "http://127.0.0.1:$sport/v1/acquire?policy=api&key=page")" \
    '"source":"lease"'
server_stop snippet
same snippet_stopped "$stopped" 0

# --- three rateld, one leased key past its limit ------------------------
# 600 a minute, slices of up to 20 alive 60 s (so that the permits one
# holds are still alive when it stops), 3 hosts: bound min(2 x 3 x 20, 600).
start_three() { # MODE
    for i in 1 2 3; do
        local port
        port=$(free_port)
        echo "$port" >"$tmp/h$i.port"
        cat >"$tmp/h$i.yaml" <<EOF
listen: 127.0.0.1:$port
store:
  type: redis
  url: redis://127.0.0.1:$rport?mode=$1
policies:
  api:
    rules: 600/1m
    lease: {ttl_ms: 60000, max_slice: 20, hosts: 3}
EOF
        server_start "h$i" "$port" "${wrap[@]}" "$build/rateld" --config "$tmp/h$i.yaml" ||
            fail "h${i}_start" "rateld did not start"
    done
}

# drive MODE KEY: 250 acquires a second on each of the three for 3 s.
drive() {
    local pids=()
    : >"$tmp/load.$2"
    for i in 1 2 3; do
        python3 "$lib_here/acquire_load.py" "http://127.0.0.1:$(cat "$tmp/h$i.port")" \
            api 250 "$tmp/load.$2" "$2" &
        pids+=($!)
    done
    sleep 3
    kill "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
}

check_three() { # MODE KEY
    local bound admitted total lease calls
    bound=$("$build/rateld" --check-config "$tmp/h1.yaml" | sed -n 2p)
    contains "${1}_bound_line" "$bound" "api: overshoot at most 120 over 600/1m"
    drive "$1" "$2"
    total=$(wc -l <"$tmp/load.$2")
    admitted=$(awk '$4 == 1' "$tmp/load.$2" | wc -l)
    lease=$(awk '$3 == "lease" && $4 == 1' "$tmp/load.$2" | wc -l)
    echo "# $1: $total decisions, $admitted admitted ($lease from slices), limit 600 + bound 120"
    # Past limit + bound (under valgrind too, which slows rateld).
    [ "$total" -ge 900 ] && ok "${1}_load" || fail "${1}_load" "only $total decisions"
    [ "$admitted" -le 720 ] && ok "${1}_within_bound" ||
        fail "${1}_within_bound" "$admitted admitted > 600 + 120"
    [ "$admitted" -ge 500 ] && ok "${1}_reaches_limit" ||
        fail "${1}_reaches_limit" "$admitted admitted: the limit is not reached"
    [ "$lease" -ge 300 ] && ok "${1}_from_slices" ||
        fail "${1}_from_slices" "$lease answers from slices"
    calls=0
    for i in 1 2 3; do
        calls=$((calls + $(metric "$(cat "$tmp/h$i.port")" 'ratel_lease_calls_total{policy="api"}')))
    done
    echo "# $1: $calls slice calls for $lease answers from slices"
    [ "$calls" -gt 0 ] && [ $((calls * 5)) -le "$lease" ] && ok "${1}_few_calls" ||
        fail "${1}_few_calls" "$calls slice calls for $lease answers from slices"
}

# stop_one KEY: rateld 1 takes slices of KEY (a few requests, well under
# the limit), then stops: what it held and had not spent comes back.
stop_one() {
    local p1 leased spent returned stranded held before after
    p1=$(cat "$tmp/h1.port")
    for _ in $(seq 30); do
        curl -s -o /dev/null "http://127.0.0.1:$p1/v1/acquire?policy=api&key=$1"
    done
    leased=$(metric "$p1" 'ratel_lease_permits_total{policy="api",what="leased"}')
    spent=$(metric "$p1" 'ratel_lease_permits_total{policy="api",what="spent"}')
    returned=$(metric "$p1" 'ratel_lease_permits_total{policy="api",what="returned"}')
    stranded=$(metric "$p1" 'ratel_lease_permits_total{policy="api",what="stranded"}')
    held=$((leased - spent - returned - stranded))
    before=$(rcli "$rport" RATEL.INFO "api:$1" | sed -n '/^used$/{n;p;q}')
    server_stop h1
    same "${1}_stopped" "$stopped" 0
    after=$(rcli "$rport" RATEL.INFO "api:$1" | sed -n '/^used$/{n;p;q}')
    echo "# rateld 1 held $held unspent permits; used $before -> $after"
    [ "$held" -gt 0 ] && ok "${1}_held" || fail "${1}_held" "nothing held to give back"
    same "${1}_given_back" "$((before - after))" "$held"
    server_stop h2
    server_stop h3
}

start_three module
check_three module hot
stop_one cold
start_three function
check_three function warm
stop_one cool

finish
