#!/usr/bin/env bash
# test_cli_store.sh - the `ratel` store commands (acquire, refund, reset,
# inspect, ping, lua-load) end to end against real redis-servers: one
# with the ratel module, one without it (the Functions library, found by
# mode=auto, and the EVAL script with mode=lua), a user refused FUNCTION
# LOAD, a primary with its replica, a 3-master cluster, servers that are
# gone or stopped (the failure policies), and the embedded `memory` store;
# help, exit statuses and messages.
#
#   BUILD=build bash tests/cli/test_cli_store.sh [NAME...]
#
# Each check prints `ok NAME` or `FAIL NAME: why`; the last line is
# `N passed, N failed` and the status is 1 if anything failed. Give check
# function names to run only those. Servers are started on free loopback
# ports by tests/integration/lib.sh and stopped by its EXIT trap. Decisions
# use the servers' clocks: values that depend on time are checked within
# a range. Nothing sleeps to make a limiter move; `fallback` and
# `failure_policy` wait for 200 ms command timeouts.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
ratel_bin=$build/ratel
read -r -a wrap <<<"${RATEL_CLI_WRAP:-}"
only=("$@")
unset RATEL_STORE
tab=$'\t'
# Milliseconds the steps of a scenario may take in all (sanitizers and
# valgrind are slow): time-dependent values are checked within this.
slack=${RATEL_CLI_SLACK_MS:-15000}

. "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# field N: the Nth tab-separated field of $out's first line.
field() { printf '%s\n' "$out" | head -1 | cut -f"$1"; }

# between NAME VALUE LOW HIGH
between() {
    if [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then
        ok "$1"
    else
        fail "$1" "[$2] not in [$3, $4]"
    fi
}

# json NAME: $out parses as JSON.
json() {
    if printf '%s' "$out" | python3 -c 'import json,sys; json.load(sys.stdin)' \
        2>"$tmp/json.err"; then
        ok "$1"
    else
        fail "$1" "not JSON: ${out:0:200} ($(tail -1 "$tmp/json.err"))"
    fi
}

# jget EXPR: a Python expression over the JSON `d` in $out, printed.
jget() {
    printf '%s' "$out" | python3 -c "import json,sys; d = json.load(sys.stdin); print($1)"
}

# ------------------------------------------------------------------ help

help_commands() {
    local cmd
    for cmd in acquire refund reset inspect ping lua-load; do
        ratel "$cmd" --help
        if [ $rc = 0 ] && [[ $out == *"usage: ratel $cmd"* ]] &&
            [[ $out == *"Options:"* ]] && [[ $out == *"Example:"* ]] &&
            [[ $out == *"ratel $cmd --store"* ]] && [ -z "$err" ]; then
            ok "help_$cmd"
        else
            fail "help_$cmd" "exit $rc or missing usage/options/example"
        fi
        ratel "$cmd" -h
        expect "help_${cmd}_short" 0 "usage: ratel $cmd"
        ratel help "$cmd"
        expect "help_command_$cmd" 0 "usage: ratel $cmd"
        # --help wins even without a store or a key.
        ratel "$cmd" --store redis://127.0.0.1:1 --help
        expect "help_${cmd}_with_store" 0 "usage: ratel $cmd"
    done
    ratel --help
    local missing=""
    for cmd in acquire refund reset inspect ping lua-load; do
        [[ $out == *"  $cmd --store URL"* ]] || missing="$missing $cmd"
    done
    [ $rc = 0 ] && [ -z "$missing" ] && ok help_main_lists ||
        fail help_main_lists "exit $rc, missing:$missing"
    ratel acquire --help
    contains help_acquire_exit3 "$out" "3 denied"
    contains help_acquire_memory "$out" "only useful for trying a rule once"
    ratel help nope
    expect help_unknown 2 "" "acquire, refund, release, reset, inspect, ping"
}

# ------------------------------------------------------ against a server

# scenario NAME PORT [QUERY]: the same requests against one server (QUERY,
# e.g. ?mode=lua, appended to its URL); prints one normalised line per step
# (time-dependent values replaced by checks) in $scenario_out, and checks
# what each step must do.
scenario() {
    local n=$1 port=$2 url=redis://127.0.0.1:$2${3:-} key="sms:+15550100"
    local rules=(--rule 1/60s --rule 10/1h) lines=()

    ratel acquire --store "$url" "${rules[@]}" "$key"
    same "${n}_first_allowed" "$rc:$out" \
        "0:1${tab}0${tab}0${tab}3600000${tab}0${tab}0${tab}store"
    lines+=("$out")

    ratel acquire --store "$url" "${rules[@]}" "$key"
    same "${n}_second_denied" "$rc:$(field 1):$(field 2):$(field 5):$(field 6):$(field 7)" \
        "3:0:0:0:0:store"
    between "${n}_retry_near_60s" "$(field 3)" $((60000 - slack)) 60000
    between "${n}_reset_near_1h" "$(field 4)" $((3600000 - slack)) 3600000
    lines+=("$(cut -f1,2,5- <<<"$out")")

    ratel acquire --json --store "$url" "${rules[@]}" "$key"
    json "${n}_json_valid"
    same "${n}_json_fields" "$rc:$(jget "d['allowed'], d['limit'], d['remaining'], d['rule'], d['wait_ms'], d['source'], $((60000 - slack)) <= d['retry_after_ms'] <= 60000")" \
        "3:False 1 0 0 0 store True"
    lines+=("$(jget 'sorted(d)')")

    ratel inspect --store "$url" "$key"
    same "${n}_inspect_rules" "$rc:$(cut -f1-4,6- <<<"$out")" \
        "0:1/1m${tab}sliding${tab}1${tab}0${tab}runs=1${tab}granularity_ms=1
10/1h${tab}sliding${tab}1${tab}9${tab}runs=1${tab}granularity_ms=1"
    between "${n}_inspect_reset" "$(field 5)" $((60000 - slack)) 60000
    lines+=("$(cut -f1-4,6- <<<"$out")")

    ratel inspect --json --store "$url" "$key"
    json "${n}_inspect_json_valid"
    same "${n}_inspect_json" "$(jget '[(r["rule"], r["algo"], r["limit"], r["period_ms"], r["used"], r["remaining"], r["runs"]) for r in d]')" \
        "[('1/1m', 'sliding', 1, 60000, 1, 0, 1), ('10/1h', 'sliding', 10, 3600000, 1, 9, 1)]"

    # The refund gives the permit back to both rules: the key is full.
    ratel refund --store "$url" "${rules[@]}" "$key"
    same "${n}_refund" "$rc:$out" \
        "0:1${tab}1${tab}0${tab}0${tab}0${tab}0${tab}store"
    lines+=("$out")
    ratel acquire --store "$url" "${rules[@]}" "$key"
    same "${n}_after_refund" "$rc:$(cut -f1,2,3 <<<"$out")" "0:1${tab}0${tab}0"

    # Peek decides without charging, and stores nothing for a new key.
    ratel acquire --peek --store "$url" --rule 2/1m peek:k
    same "${n}_peek" "$rc:$out" "0:1${tab}2${tab}0${tab}0${tab}0${tab}0${tab}store"
    ratel acquire --peek --store "$url" --rule 2/1m peek:k
    same "${n}_peek_again" "$rc:$(field 2)" "0:2"
    same "${n}_peek_stores_nothing" "$(rcli "$port" EXISTS peek:k)" "0"
    ratel acquire --store "$url" --rule 2/1m --cost 2 peek:k
    ratel acquire --peek --store "$url" --rule 2/1m peek:k
    same "${n}_peek_denied" "$rc:$(field 1):$(field 2)" "3:0:0"
    lines+=("$(cut -f1,2,5- <<<"$out")")

    # Reset forgets the key.
    ratel reset --store "$url" "$key"
    same "${n}_reset" "$rc:$out:$err" "0::"
    same "${n}_reset_deleted" "$(rcli "$port" EXISTS "$key")" "0"
    ratel inspect --store "$url" "$key"
    same "${n}_inspect_empty" "$rc:$out" "0:"
    ratel inspect --json --store "$url" "$key"
    same "${n}_inspect_empty_json" "$rc:$out" "0:[]"
    ratel acquire --store "$url" "${rules[@]}" "$key"
    same "${n}_after_reset" "$rc:$(field 1)" "0:1"

    # gcra: a reservation waits; inspect shows the theoretical arrival time.
    # One permit per 10 s, so that the steps' own duration changes nothing.
    ratel acquire --store "$url" --rule 10/100s:gcra --cost 10 g
    same "${n}_gcra_burst" "$rc:$(field 1):$(field 2)" "0:1:0"
    ratel acquire --store "$url" --rule 10/100s:gcra --max-wait 20000 g
    same "${n}_gcra_reserved" "$rc:$(field 1):$(field 7)" "0:1:store"
    between "${n}_gcra_wait" "$(field 6)" $((10000 - slack / 2)) 10000
    ratel acquire --store "$url" --rule 10/100s:gcra --max-wait 10 g
    same "${n}_gcra_wait_too_long" "$rc:$(field 1):$(field 6)" "3:0:0"
    ratel inspect --store "$url" g
    same "${n}_inspect_gcra" "$rc:$(cut -f1-4 <<<"$out"):$(cut -f6 <<<"$out" | cut -c1-7)" \
        "0:10/100s:gcra${tab}gcra${tab}11${tab}0:tat_us="
    ratel acquire --store "$url" --rule 5/30d:fixed --cost 2 f
    ratel inspect --store "$url" f
    same "${n}_inspect_fixed" "$rc:$(cut -f1-4 <<<"$out"):$(cut -f6 <<<"$out" | cut -c1-16)" \
        "0:5/30d:fixed${tab}fixed${tab}2${tab}3:window_start_ms="
    lines+=("$(cut -f1-4 <<<"$out")")

    # Keys are any bytes: blanks, a leading '-' after --, the empty key.
    ratel acquire --store "$url" --rule 1/1m "a b${tab}c"
    same "${n}_key_blanks" "$rc:$(rcli "$port" EXISTS "a b${tab}c")" "0:1"
    ratel acquire --store "$url" --rule 1/1m -- -dash
    same "${n}_key_dash" "$rc:$(rcli "$port" EXISTS -dash)" "0:1"
    ratel acquire --store "$url" --rule 1/1m ""
    same "${n}_key_empty" "$rc:$(rcli "$port" EXISTS "")" "0:1"

    # A key that holds something else is an error, named.
    rcli "$port" RPUSH not:ratel x >/dev/null
    ratel acquire --store "$url" --rule 1/1m not:ratel
    expect "${n}_wrong_type" 1 "" 'key "not:ratel"'

    ratel ping --store "$url"
    same "${n}_ping" "$rc:$out" "0:ok"

    scenario_out=$(printf '%s\n' "${lines[@]}")
}

with_module() {
    port_module=$(redis_start) || { fail with_module "no redis-server"; return; }
    scenario module "$port_module"
    module_out=$scenario_out
    # The decision came from the module, not the script.
    contains module_used "$(rcli "$port_module" INFO commandstats)" "cmdstat_ratel.acquire"
}

# The same against a server without the module: mode=auto loads the
# Functions library, mode=lua uses the EVAL script, and both give the same
# answers as the module.
without_module() {
    local stats
    port_lua=$(RATEL_NO_MODULE=1 redis_start) || { fail without_module "no redis-server"; return; }
    scenario function "$port_lua"
    stats=$(rcli "$port_lua" INFO commandstats)
    contains function_used "$stats" "cmdstat_fcall:"
    [[ $stats != *cmdstat_evalsha* ]] && ok function_not_evalsha ||
        fail function_not_evalsha "EVALSHA ran: $stats"
    if [ -n "${module_out:-}" ]; then
        same function_same_as_module "$scenario_out" "$module_out"
    fi
    rcli "$port_lua" FLUSHALL >/dev/null
    rcli "$port_lua" CONFIG RESETSTAT >/dev/null
    scenario lua "$port_lua" "?mode=lua"
    stats=$(rcli "$port_lua" INFO commandstats)
    contains lua_used "$stats" "cmdstat_evalsha:"
    [[ $stats != *cmdstat_fcall:* ]] && ok lua_not_fcall ||
        fail lua_not_fcall "FCALL ran: $stats"
    if [ -n "${module_out:-}" ]; then
        same lua_same_as_module "$scenario_out" "$module_out"
    fi
    ratel acquire --store "redis://127.0.0.1:$port_lua?mode=module" --rule 1/1m k
    expect lua_mode_module_refused 1 "" "no ratel module"
    ratel acquire --store "redis://127.0.0.1:$port_lua?mode=function" --rule 1/1m fn:k
    same mode_function "$rc:$(field 1):$(field 7)" "0:1:store"
}

url_forms() {
    local port=${port_module:-} url
    [ -n "$port" ] || port=$(redis_start) || { fail url_forms "no redis-server"; return; }
    url=redis://127.0.0.1:$port
    ratel acquire --store "$url/3" --rule 1/1m db:k
    same url_db "$rc:$(rcli "$port" -n 3 EXISTS db:k):$(rcli "$port" EXISTS db:k)" "0:1:0"
    ratel acquire --store "$url?mode=lua" --rule 1/1m lua:k
    same url_mode_lua "$rc:$(field 1):$(field 7)" "0:1:store"

    RATEL_STORE=$url ratel acquire --rule 1/1m env:k
    same env_store "$rc:$(rcli "$port" EXISTS env:k)" "0:1"
    RATEL_STORE=redis://127.0.0.1:1 ratel acquire --store "$url" --rule 1/1m env:k2
    same env_store_overridden "$rc:$(rcli "$port" EXISTS env:k2)" "0:1"
    RATEL_STORE=$url ratel inspect env:k
    same env_store_inspect "$rc:$(field 1)" "0:1/1m"
    RATEL_STORE=$url ratel ping
    same env_store_ping "$rc:$out" "0:ok"
}

# When Redis does not answer in time the URL's failure policy decides, the
# decision says so in `source` and a warning goes to standard error.
# CLIENT PAUSE WRITE holds the module's write command (not PING).
fallback() {
    local port=${port_module:-} url
    [ -n "$port" ] || port=$(redis_start) || { fail fallback "no redis-server"; return; }
    url="redis://127.0.0.1:$port?timeout_ms=200"
    # Long enough for four commands under valgrind (each waits 200 ms and
    # starts slowly there); UNPAUSE ends it when they are done.
    rcli "$port" CLIENT PAUSE 60000 WRITE >/dev/null
    ratel acquire --store "$url" --rule 1/1m fb:k
    same fallback_local "$rc:$(field 1):$(field 7)" "0:1:local"
    contains fallback_local_warns "$err" "the failure policy 'local' did"
    ratel acquire --store "$url&on_failure=closed" --rule 1/1m fb:k
    same fallback_closed "$rc:$(field 1):$(field 7)" "3:0:closed"
    ratel acquire --store "$url&on_failure=open" --rule 1/1m fb:k
    same fallback_open "$rc:$(field 1):$(field 7)" "0:1:open"
    ratel reset --store "$url" fb:k
    expect fallback_reset_fails 1 "" "did not answer in time"
    rcli "$port" CLIENT UNPAUSE >/dev/null
}

# Nothing listens: ping, reset and refund fail (exit 1, naming the
# address); acquire is decided by the failure policy, `local` by default.
unreachable() {
    local port
    port=$(free_port)
    ratel ping --store "redis://127.0.0.1:$port"
    expect ping_closed_port 1 "" "127.0.0.1:$port"
    [ -z "$out" ] && ok ping_closed_port_no_ok || fail ping_closed_port_no_ok "stdout: $out"
    ratel acquire --store "redis://127.0.0.1:$port" --rule 1/1m k
    same acquire_closed_port "$rc:$(field 1):$(field 7)" "0:1:local"
    contains acquire_closed_port_warns "$err" "127.0.0.1:$port"
    ratel reset --store "redis://127.0.0.1:$port" k
    expect reset_closed_port 1 "" "127.0.0.1:$port"
    ratel refund --store "redis://127.0.0.1:$port" --rule 1/1m k
    expect refund_closed_port 1 "" "127.0.0.1:$port"
}

# The URL's failure policy decides `acquire` when Redis is not there
# (nothing listens) or does not answer (a SIGSTOPped redis-server): closed
# denies (exit 3), open allows (exit 0), each with a warning.
failure_policy() {
    local free stopped pid url
    free=$(free_port)
    stopped=$(redis_start) || { fail failure_policy "no redis-server"; return; }
    pid=$(cat "$tmp/redis-$stopped/pid")
    kill -STOP "$pid"
    for port in "$free" "$stopped"; do
        local n=closed_port
        [ "$port" = "$stopped" ] && n=stopped
        url="redis://127.0.0.1:$port?timeout_ms=200"
        ratel acquire --store "$url&on_failure=closed" --rule 1/1m k
        same "policy_closed_$n" "$rc:$(field 1):$(field 7)" "3:0:closed"
        contains "policy_closed_${n}_warns" "$err" "the failure policy 'closed' did"
        ratel acquire --json --store "$url&on_failure=open" --rule 1/1m k
        same "policy_open_$n" "$rc:$(jget 'd["allowed"], d["source"]')" "0:True open"
        contains "policy_open_${n}_warns" "$err" "127.0.0.1:$port"
        ratel ping --store "$url&on_failure=open"
        expect "policy_ping_$n" 1 "" "127.0.0.1:$port"
    done
    kill -CONT "$pid"
    ratel acquire --store "redis://127.0.0.1:$stopped?on_failure=closed" --rule 1/1m k
    same policy_resumed "$rc:$(field 1):$(field 7)" "0:1:store"
}

# ------------------------------------------------------------ lua-load

# lib_version: the library version this build loads (from a server).
lib_version() { rcli "$1" FCALL_RO ratel_version 0; }

foreign_library="#!lua name=ratel
redis.register_function{function_name='ratel_version', callback=function() return '0.0.1-other' end, flags={'no-writes'}}"

lua_load() {
    local port url v
    port=$(RATEL_NO_MODULE=1 redis_start) || { fail lua_load "no redis-server"; return; }
    url=redis://127.0.0.1:$port
    ratel lua-load --store "$url"
    v=$(lib_version "$port")
    same lua_load_loaded "$rc:$out:$err" "0:127.0.0.1:$port${tab}$v${tab}loaded:"
    [[ $v == [0-9]*.[0-9]*.[0-9]* ]] && ok lua_load_version || fail lua_load_version "[$v]"
    ratel lua-load --store "$url"
    same lua_load_again "$rc:$out" "0:127.0.0.1:$port${tab}$v${tab}already loaded"
    rcli "$port" FUNCTION LOAD REPLACE "$foreign_library" >/dev/null
    ratel lua-load --store "$url"
    same lua_load_replaced "$rc:$out" "0:127.0.0.1:$port${tab}$v${tab}replaced 0.0.1-other"
    same lua_load_now_ours "$(lib_version "$port")" "$v"

    # A user who may not run FUNCTION LOAD: refused, exit 1, said why; the
    # store then uses the EVAL script (mode=auto) or refuses (mode=function).
    rcli "$port" FUNCTION FLUSH >/dev/null
    rcli "$port" ACL SETUSER limited on '>pw' '~*' '&*' +@all -function >/dev/null
    url=redis://limited:pw@127.0.0.1:$port
    ratel lua-load --store "$url"
    expect lua_load_refused 1 "" "FUNCTION LOAD of the ratel library refused: NOPERM"
    contains lua_load_refused_hint "$err" "mode=auto uses"
    [ -z "$out" ] && ok lua_load_refused_no_output || fail lua_load_refused_no_output "$out"
    rcli "$port" CONFIG RESETSTAT >/dev/null
    ratel acquire --store "$url" --rule 2/1m refused:k
    same lua_load_refused_auto "$rc:$(field 1):$(field 7)" "0:1:store"
    contains lua_load_refused_evalsha "$(rcli "$port" INFO commandstats)" "cmdstat_evalsha:calls=1,"
    ratel acquire --store "$url?mode=function" --rule 2/1m refused:k
    expect lua_load_refused_function 1 "" "mode=function needs the library"

    ratel lua-load --store memory
    expect lua_load_memory 2 "" "no library to load"
    ratel lua-load --store "redis://127.0.0.1:$(free_port)"
    expect lua_load_closed_port 1 "" "cannot connect"
    ratel lua-load --store "redis://127.0.0.1:$port" k
    expect lua_load_no_key 2 "" "unexpected argument 'k'"
}

# A primary and its replica in one URL: the library goes to the primary,
# whichever address it is, and reaches the replica by replication.
lua_load_replica() {
    local primary replica v
    primary=$(RATEL_NO_MODULE=1 redis_start) || { fail lua_load_replica "no redis-server"; return; }
    replica=$(RATEL_NO_MODULE=1 redis_start --replicaof 127.0.0.1 "$primary") ||
        { fail lua_load_replica "no replica"; return; }
    ratel lua-load --store "redis://127.0.0.1:$replica,127.0.0.1:$primary"
    v=$(lib_version "$primary")
    # The store prepares its connection to the primary as any connection
    # (mode=auto loads the library there); on a slow run that can come
    # before lua-load's own check, which then reads this very command's
    # load as "already loaded". Either word: the library is on the
    # primary, and the replica gets it below.
    same lua_load_primary "$rc:${out/%"${tab}already loaded"/"${tab}loaded"}" \
        "0:127.0.0.1:$primary${tab}$v${tab}loaded"
    for _ in $(seq 50); do
        [ "$(lib_version "$replica")" = "$v" ] && break
        rcli "$primary" WAIT 1 100 >/dev/null
    done
    same lua_load_replicated "$(lib_version "$replica")" "$v"
}

# Every master of a cluster.
lua_load_cluster() {
    local ports=() p v want
    for _ in 1 2 3; do
        p=$(RATEL_NO_MODULE=1 redis_start --cluster-enabled yes --cluster-config-file nodes.conf) ||
            { fail lua_load_cluster "no redis-server"; return; }
        ports+=("$p")
    done
    if ! redis-cli --cluster create "127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" \
        "127.0.0.1:${ports[2]}" --cluster-replicas 0 --cluster-yes >"$tmp/cluster.log" 2>&1; then
        fail lua_load_cluster "$(tail -3 "$tmp/cluster.log")"
        return
    fi
    for p in "${ports[@]}"; do
        for _ in $(seq 100); do
            rcli "$p" CLUSTER INFO | grep -q 'cluster_state:ok' && break
            sleep 0.1
        done
    done
    rcli "${ports[2]}" FUNCTION LOAD "$foreign_library" >/dev/null
    ratel lua-load --store "redis+cluster://127.0.0.1:${ports[1]}"
    v=$(lib_version "${ports[0]}")
    want=$(printf '%s\n' "127.0.0.1:${ports[0]}${tab}$v${tab}loaded" \
        "127.0.0.1:${ports[1]}${tab}$v${tab}loaded" \
        "127.0.0.1:${ports[2]}${tab}$v${tab}replaced 0.0.1-other")
    same lua_load_every_master "$rc:$(printf '%s\n' "$out" | sort)" "0:$(sort <<<"$want")"
    for p in "${ports[@]}"; do
        same "lua_load_master_$p" "$(lib_version "$p")" "$v"
    done
    ratel acquire --store "redis+cluster://127.0.0.1:${ports[0]}?mode=function" --rule 1/1m ck
    same lua_load_cluster_acquire "$rc:$(field 1):$(field 7)" "0:1:store"
}

# ---------------------------------------------------------- bad usage

# A URL the store refuses is bad input: exit 2, the store's message quotes
# the part that is wrong.
bad_urls() {
    ratel acquire --store 'redis://127.0.0.1:6379?mode=bogus' --rule 1/1m k
    expect bad_url_query 2 "" 'query parameter mode: expected auto | module | function | lua, got "bogus"'
    ratel acquire --store 'http://127.0.0.1:6379' --rule 1/1m k
    expect bad_url_scheme 2 "" 'unknown scheme "http"'
    ratel ping --store 'localhost:6379'
    expect bad_url_no_scheme 2 "" '"localhost:6379": missing scheme'
    ratel ping --store 'redis://127.0.0.1:99999'
    expect bad_url_port 2 "" '"127.0.0.1:99999"'
    ratel reset --store '' k
    expect bad_url_empty 2 "" "empty URL"
}

bad_usage() {
    ratel acquire --store memory k
    expect no_rule 2 "" "no rule given"
    ratel refund --store memory k
    expect refund_no_rule 2 "" "no rule given"
    ratel acquire --store memory --rule 10/1x k
    expect bad_rule 2 "" '"10/1x"'
    ratel acquire --store memory --rule 1/1m --rule 1/1m k
    expect duplicate_rule 2 "" '"1/1m"'
    ratel acquire --store memory --rule 1/1m --cost 0 k
    expect cost_zero 2 "" '--cost must be an integer from 1 to 1000000000, not "0"'
    ratel acquire --store memory --rule 1/1m --cost x k
    expect cost_word 2 "" '--cost must be an integer from 1 to 1000000000, not "x"'
    ratel acquire --store memory --rule 1/1m --cost 1000000001 k
    expect cost_too_big 2 "" "1000000000"
    ratel acquire --store memory --rule 5/1m --cost 6 k
    expect cost_never_admitted 2 "" '--cost 6 is more than rule 1 ("5/1m") can ever admit (5)'
    ratel refund --store memory --rule 1/1m --cost 0 k
    expect refund_cost_zero 2 "" '--cost must be an integer from 1 to 1000000000, not "0"'
    ratel acquire --store memory --rule 5/1m --cost 2 --cost 3 k
    expect cost_twice 2 "" '--cost is given twice; give it once'
    ratel acquire --store memory --rule 1/1m --max-wait 2592000001 k
    expect max_wait_too_big 2 "" '--max-wait must be an integer from 0 to 2592000000, not "2592000001"'
    ratel acquire --store memory --rule 1/1m --max-wait 10 k
    expect max_wait_not_gcra 2 "" '--max-wait needs every rule to be gcra; rule 1 ("1/1m") is sliding'
    ratel acquire --store memory --rule 1/1m
    expect no_key 2 "" "no key given"
    ratel acquire --store memory --rule 1/1m a b
    expect extra_key 2 "" "unexpected argument 'b'"
    ratel acquire --rule 1/1m k
    expect no_store 2 "" "no store: give --store URL or set RATEL_STORE"
    RATEL_STORE='' ratel ping
    expect empty_env_store 2 "" "no store"
    ratel acquire --store memory --rule 1/1m --frob k
    expect unknown_option 2 "" "unknown option '--frob'"
    ratel reset --store memory --rule 1/1m k
    expect reset_takes_no_rule 2 "" "unknown option '--rule'"
    ratel ping --store memory --json
    expect ping_takes_no_json 2 "" "unknown option '--json'"
    ratel refund --store memory --rule 1/1m --peek k
    expect refund_takes_no_peek 2 "" "unknown option '--peek'"
    ratel acquire --store
    expect store_needs_argument 2 "" "option '--store' needs an argument"
    ratel ping --store memory extra
    expect ping_no_operand 2 "" "unexpected argument 'extra'"
    ratel acquire --store memory --rule 1/1m "$(head -c 5000 /dev/zero | tr '\0' x)"
    expect key_too_long 2 "" "5000 bytes is longer than the memory store takes"
}

# --------------------------------------------------------------- memory

memory_store() {
    ratel acquire --store memory --rule 10/1s k
    same memory_acquire "$rc:$out" "0:1${tab}9${tab}0${tab}1000${tab}0${tab}0${tab}store"
    ratel acquire -s memory -r 2/1s -c 2 -j k
    json memory_json
    same memory_json_fields "$(jget 'd["allowed"], d["remaining"], d["limit"]')" "True 0 2"
    ratel refund --store memory --rule 10/1s k
    same memory_refund "$rc:$out" "0:1${tab}10${tab}0${tab}0${tab}0${tab}0${tab}store"
    ratel reset --store memory k
    same memory_reset "$rc:$out" "0:"
    ratel inspect --store memory k
    same memory_inspect "$rc:$out" "0:"
    ratel ping --store memory
    same memory_ping "$rc:$out" "0:ok"
    RATEL_STORE=memory ratel acquire --rule 1/1s k
    same memory_env "$rc:$(field 1)" "0:1"
}

if [ ! -x "$ratel_bin" ]; then
    echo "FAIL setup: $ratel_bin not built"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v redis-server >/dev/null; then
    echo "FAIL setup: redis-server not found (Debian: apt-get install redis-server)"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -e "$module" ]; then
    echo "FAIL setup: $module not built"
    echo "0 passed, 1 failed"
    exit 1
fi

# Leases of a concurrent rule: the memory store lives for one command, so
# each run starts afresh; what shows is the lease column and release's
# answers and refusals.
leases() {
    ratel acquire --store memory --rule 2/30s:concurrent --rule 10/1m k
    expect lease_column 0 "$(printf '1\t1\t0\t60000\t0\t0\tstore\t1')"
    ratel acquire --store memory --json --rule 2/30s:concurrent k
    expect lease_json 0 '"source":"store","lease":1}'
    ratel acquire --store memory --peek --rule 2/30s:concurrent k
    expect lease_peek_none 0 "$(printf 'store\t0')"
    ratel acquire --store memory --rule 2/30s k
    if [ "$out" = "$(printf '1\t1\t0\t30000\t0\t0\tstore')" ]; then
        ok no_lease_column
    else
        fail no_lease_column "got '$out'"
    fi
    ratel release --store memory --rule 2/30s:concurrent --lease 1 k
    expect release_unknown 3 "$(printf '0\t2\t0')"
    ratel release --store memory --json --renew --rule 2/30s:concurrent --lease 7 k
    expect release_json 3 '{"held":false,"renewed":false,"remaining":2,"reset_after_ms":0}'
    ratel release --store memory --rule 2/30s:concurrent k
    expect release_no_lease 2 "" "no lease given"
    ratel release --store memory --rule 2/30s:concurrent --lease 0 k
    expect release_lease_zero 2 "" '--lease must be an integer from 1 to 4294967295 (the lease an ACQUIRE returned), not "0"'
    ratel release --store memory --rule 2/30s:concurrent --lease 4294967296 k
    expect release_lease_big 2 "" "4294967295"
    ratel release --store memory --rule 2/30s --lease 1 k
    expect release_not_concurrent 2 "" "no concurrent rule"
    ratel acquire --store memory --rule 2/30s:concurrent --lease 1 k
    expect acquire_no_lease_option 2 "" "unknown option '--lease'"
    ratel acquire --store memory --rule 257/30s:concurrent k
    expect concurrent_too_many 2 "" "at most 256 leases"
    ratel acquire --store memory --rule 2/30s:concurrent --rule 3/1m:concurrent k
    expect two_concurrent 2 "" "at most one"
}

for t in help_commands with_module without_module url_forms fallback \
    unreachable failure_policy lua_load lua_load_replica \
    lua_load_cluster bad_urls bad_usage memory_store leases; do
    check "$t"
done

finish
