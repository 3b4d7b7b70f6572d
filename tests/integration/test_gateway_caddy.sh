#!/usr/bin/env bash
# rateld behind a real Caddy (Debian's 2.6) with forward_auth, configured
# with docs/gateways.md's Caddyfiles as written (ports and paths changed,
# nothing added): the ping demo gives 20 x 200 then rateld's own 429 with
# Retry-After and the RateLimit fields; a missing key is 400; an unmatched
# or unidentified request is refused and counted; a hostile client's
# X-Original-* / X-Forwarded-* / Forwarded / Host headers (alone, twice,
# in any case) move no request to another route, key, method or host, nor
# past its limit, with auth.gateway: caddy and with auth.gateway unset;
# with rateld stopped or killed, the fail-closed snippet answers 504 / 502
# and the fail-open one serves the page, within its timeout.
. "$(dirname "$0")/gateway_lib.sh"

if ! command -v caddy >/dev/null || [ ! -x "$build/rateld" ]; then
    echo "FAIL caddy or $build/rateld missing (scripts/setup.sh, make)"
    echo "0 passed, 1 failed"
    exit 1
fi

# start_caddy SNIPPET: the page's Caddyfile (its admin API on this test's
# port), Caddy's state under $tmp.
start_caddy() {
    mkdir -p "$tmp/caddy"
    snippet "$1" >"$tmp/caddy/Caddyfile"
    HOME=$tmp/caddy XDG_DATA_HOME=$tmp/caddy XDG_CONFIG_HOME=$tmp/caddy \
        caddy run --config "$tmp/caddy/Caddyfile" --adapter caddyfile \
        >"$tmp/caddy/out.log" 2>&1 &
    echo $! >"$tmp/pids/caddy"
    wait_http "http://127.0.0.1:$gport/"
}

stop_caddy() {
    local pid
    pid=$(cat "$tmp/pids/caddy")
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null
}

start_rateld 429 caddy || fail rateld_start "$(tail -3 "$tmp/rateld.log")"
start_caddy caddy || fail caddy_start "$(tail -5 "$tmp/caddy/out.log")"
check_demo caddy
check_hostile caddy
# The value of the key: after the number is limited, no spelling of it,
# no second copy and no other place for it gets a 2xx.
check_attacks caddy
same caddy_content "$(curl -s --interface 127.0.0.6 "http://127.0.0.1:$gport/api/ping")" pong
# auth.gateway unset: the snippet's header_up leaves no second candidate.
stop_rateld
start_rateld 429 "" || fail rateld_default_start "$(tail -3 "$tmp/rateld.log")"
check_hostile_limited caddy-default
# auth.unmatched: allow: no spelling of a path passes unlimited.
check_spellings_allow caddy-allow 429 caddy
check_down caddy_closed 504 502

stop_caddy
start_rateld 429 caddy || fail rateld_restart "$(tail -3 "$tmp/rateld.log")"
start_caddy caddy-open || fail caddy_open_start "$(tail -5 "$tmp/caddy/out.log")"
same caddy_open_running "$(code "http://127.0.0.1:$gport/api/ping")" 200
check_down caddy_open 200 200
same caddy_open_content "$(curl -s --interface 127.0.0.7 "http://127.0.0.1:$gport/api/ping")" pong

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log" "$tmp/caddy/out.log"
hostile_summary
attack_summary
finish
