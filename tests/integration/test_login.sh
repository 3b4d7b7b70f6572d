#!/usr/bin/env bash
# docs/login.md's recipe through a real HAProxy (Debian's 2.6) with the
# shipped Lua actions and rateld on examples/login.yaml (ports changed,
# nothing added): only failed logins (401, 403) are counted, checked by
# /v1/auth and charged by /v1/report from `http-response lua.ratel_report`.
#
#   - good bad good bad bad bad good -> 200 401 200 401 401 429 429, the
#     429 with Retry-After and the RateLimit fields; Alice is alice;
#   - ten successes charge nothing; a client's own X-Ratel-Response-Status
#     changes nothing;
#   - the per-address policy counts failures across users;
#   - five failures in flight at once: all get through (the documented
#     bound is LIMIT + K - 1 = 7), then the key is refused;
#   - with api_token set, a report without it charges nothing (and the
#     answer still goes out), with it the failures count;
#   - a stopped rateld delays a failed answer by at most the report's
#     timeout, and its answer is not lost;
#   - /v1/report by hand: a missing, malformed or repeated status, GET, a
#     browser, a peer not trusted, a bad token.
. "$(dirname "$0")/gateway_lib.sh"
docs=$root/docs/login.md

require_haproxy
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')

# The login application (app_backend.py): 200 for pw=good, else 401; a
# user named slow* is answered after 0.5 s.
app_start "$aport"

# start_login_rateld [TOKEN]: examples/login.yaml on $rport (RATELD_WRAP
# prefixing rateld: valgrind, tests/valgrind.sh).
read -r -a wrap <<<"${RATELD_WRAP:-}"
start_login_rateld() {
    sed -e "s/8080/$rport/" -e "s/^api_token: .*/api_token: \"${1:-}\"/" \
        "$root/examples/login.yaml" >"$tmp/login.yaml"
    server_start rateld "$rport" "${wrap[@]}" "$build/rateld" --config "$tmp/login.yaml"
}
# stop_login_rateld: TERM, and rateld exits 0 (under valgrind: no error,
# no leak).
stop_login_rateld() {
    server_stop rateld
    same "rateld_exit_${1}" "$stopped" 0
}

# start_haproxy [TOKEN]: the page's haproxy.cfg, with RATEL_API_TOKEN set
# to the token when given.
start_haproxy() {
    mkdir -p "$tmp/haproxy"
    snippet haproxy-login >"$tmp/haproxy/haproxy.cfg"
    haproxy -c -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/check.log" 2>&1 ||
        fail haproxy_check "$(cat "$tmp/haproxy/check.log")"
    RATEL_API_TOKEN=${1:-} haproxy -db -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/out.log" 2>&1 &
    echo $! >"$tmp/pids/haproxy"
    wait_http "http://127.0.0.1:$gport/"
}

# login USER PASSWORD [FROM [CURL ARGS]]: the status of one login from
# client address FROM (127.0.0.2).
login() {
    local from=${3:-$client} slow=""
    [[ $1 == slow* ]] && slow="&ms=500"
    curl -s -o /dev/null -w '%{http_code}' --interface "$from" "${@:4}" \
        -d "user=$1&pw=$2$slow" "http://127.0.0.1:$gport/login"
}
logins() { # USER PASSWORD... : the statuses, space-separated
    local user=$1 pw out=""
    shift
    for pw in "$@"; do out+="$(login "$user" "$pw") "; done
    echo "${out% }"
}

start_login_rateld || fail rateld_start "$(tail -3 "$tmp/rateld.log")"
start_haproxy || fail haproxy_start "$(cat "$tmp/haproxy/out.log")"

same page_sequence "$(logins alice good bad good bad bad bad good)" \
    "200 401 200 401 401 429 429"
same fold_case "$(login ALICE good)" 429
curl -s -D "$tmp/h" -o /dev/null --interface "$client" -d 'user=alice&pw=good' \
    "http://127.0.0.1:$gport/login"
ra=$(header Retry-After "$tmp/h")
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && [ "$ra" -le 60 ]; then ok retry_after; else fail retry_after "[$ra]"; fi
same ratelimit "$(header RateLimit "$tmp/h")" "\"login-user-0\";r=0;t=$ra"
same reason "$(header X-Ratel-Reason "$tmp/h")" rate-limited

# Successes are never charged, whatever the client says about them.
same successes "$(logins bob good good good good good good good good good good)" \
    "200 200 200 200 200 200 200 200 200 200"
same client_status_header "$(for _ in 1 2 3 4; do login bob good "$client" -H 'X-Ratel-Response-Status: 401'; echo -n ' '; done)" \
    "200 200 200 200 "
same after_successes "$(logins bob bad bad bad bad)" "401 401 401 429"

# Five failures in flight at once (0.5 s each): each is checked before any
# is charged, so all five get through (bound 3 + 5 - 1 = 7); then refused.
racers=()
for i in 1 2 3 4 5; do
    login slowcarol bad >"$tmp/race.$i" &
    racers+=($!)
done
wait "${racers[@]}"
race=$(cat "$tmp"/race.* | tr -d '\n')
same race_all_through "$race" "401401401401401"
same race_then_refused "$(login slowcarol good)" 429

# The address's own policy (20 failures an hour) across users, from
# 127.0.0.4: 20 users failing once each, then the address is refused.
for i in $(seq 20); do login "user$i" bad 127.0.0.4 >/dev/null; done
same per_address "$(login user21 good 127.0.0.4)" 429
same other_address "$(login user21 good 127.0.0.5)" 200

# A stopped rateld: the failed answer waits at most the report's 500 ms
# (the check passed before rateld stopped) and is not lost.
rpid=$(cat "$tmp/pids/rateld")
( sleep 0.2; kill -STOP "$rpid" ) &
stopper=$!
t0=$(date +%s%N)
st=$(login slowdan bad)
t1=$(date +%s%N)
wait "$stopper"
kill -CONT "$rpid"
same stopped_rateld_answer "$st" 401
ms=$(((t1 - t0) / 1000000))
if [ "$ms" -lt 2500 ]; then ok "stopped_rateld_bounded_${ms}ms"; else fail stopped_rateld_bounded "${ms} ms"; fi

# With api_token set: HAProxy without the token charges nothing (rateld
# refuses the report; the answer goes out), with it the failures count.
stop_process haproxy
stop_login_rateld first
start_login_rateld "$token" || fail rateld_token_start "$(tail -3 "$tmp/rateld.log")"
start_haproxy || fail haproxy_notoken_start "$(cat "$tmp/haproxy/out.log")"
same report_without_token "$(logins erin bad bad bad bad bad)" "401 401 401 401 401"
stop_process haproxy
start_haproxy "$token" || fail haproxy_token_start "$(cat "$tmp/haproxy/out.log")"
same report_with_token "$(logins erin bad bad bad bad)" "401 401 401 429"

# /v1/report by hand, from HAProxy's address (trusted) unless said.
report() { # STATUS-HEADER-ARGS...: the answer's status and body
    curl -s -w ' %{http_code}' -H 'X-Original-Method: POST' -H 'X-Original-URI: /login' \
        -d 'user=frank&pw=x' "$@" "http://127.0.0.1:$rport/v1/report" | tr -d '\n'
}
auth_h=(-H "Authorization: Bearer $token")
contains report_no_status "$(report "${auth_h[@]}")" "needs one X-Ratel-Response-Status header"
contains report_no_status_400 "$(report "${auth_h[@]}")" " 400"
contains report_bad_status "$(report "${auth_h[@]}" -H 'X-Ratel-Response-Status: 4O1')" '\"4O1\" is not a status'
contains report_big_status "$(report "${auth_h[@]}" -H 'X-Ratel-Response-Status: 600')" " 400"
contains report_twice "$(report "${auth_h[@]}" -H 'X-Ratel-Response-Status: 401' -H 'X-Ratel-Response-Status: 200')" " 400"
contains report_no_token "$(report -H 'X-Ratel-Response-Status: 401')" " 401"
contains report_wrong_token "$(report -H "Authorization: Bearer x$token" -H 'X-Ratel-Response-Status: 401')" " 403"
contains report_get "$(report -G "${auth_h[@]}" -H 'X-Ratel-Response-Status: 401')" " 405"
contains report_browser "$(report "${auth_h[@]}" -H 'Origin: https://evil.example' -H 'X-Ratel-Response-Status: 401')" " 403"
contains report_untrusted "$(report --interface 127.0.0.2 "${auth_h[@]}" -H 'X-Ratel-Response-Status: 401')" "unidentified"
contains report_unlisted "$(report "${auth_h[@]}" -H 'X-Ratel-Response-Status: 500')" '{"charged":0,"limited":0} 200'
contains report_listed "$(report "${auth_h[@]}" -H 'X-Ratel-Response-Status: 403')" '{"charged":2,"limited":0} 200'
# A policy with charge_on and a concurrent rule is refused at load.
config_refused check_concurrent $'policies:\n  p:\n    rules: ["1/1m:concurrent"]\n    charge_on: [401]\n' \
    "takes no concurrent rule"
config_refused check_status $'policies:\n  p:\n    rules: 1/1m\n    charge_on: [401, 4x1]\n' \
    'charge_on: "4x1" is not a status'
config_refused check_empty $'policies:\n  p:\n    rules: 1/1m\n    charge_on: []\n' "an empty list"

stop_process haproxy
stop_login_rateld second
finish
