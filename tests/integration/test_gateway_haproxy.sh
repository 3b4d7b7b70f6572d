#!/usr/bin/env bash
# rateld behind a real HAProxy (Debian's 2.6) with the shipped Lua action
# (examples/gateways/ratel-haproxy.lua, loaded from where the page says,
# the path changed to this tree's), configured with docs/gateways.md's
# haproxy.cfg as written (ports and paths changed, nothing added): the ping
# demo gives 20 x 200 then rateld's own 429 with Retry-After and the
# RateLimit fields; a missing key is 400; an unmatched or unidentified
# request is refused and counted; a hostile client's X-Original-* /
# X-Forwarded-* / Forwarded / Host headers (alone, twice, in any case) move
# no request to another route, key, method or host, nor past its limit,
# with auth.gateway: haproxy and with auth.gateway unset; with rateld
# stopped or killed, `closed` answers 503 and `open` serves the page,
# within the snippet's 500 ms.
. "$(dirname "$0")/gateway_lib.sh"

require_haproxy

# start_haproxy MODE: the page's haproxy.cfg, with `closed` or `open`.
start_haproxy() {
    mkdir -p "$tmp/haproxy"
    snippet haproxy | sed "s/ 500 closed/ 500 $1/" >"$tmp/haproxy/haproxy.cfg"
    # As printed, the file is valid and draws no warning (without `mode
    # http` HAProxy would warn that it ignores the http-request rules).
    haproxy -c -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/check.log" 2>&1 ||
        fail "haproxy_check_$1" "$(cat "$tmp/haproxy/check.log")"
    if grep -qi warning "$tmp/haproxy/check.log"; then
        fail "haproxy_no_warning_$1" "$(grep -i warning "$tmp/haproxy/check.log")"
    else
        ok "haproxy_no_warning_$1"
    fi
    haproxy -db -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/out.log" 2>&1 &
    echo $! >"$tmp/pids/haproxy"
    wait_http "http://127.0.0.1:$gport/"
}

# The application behind HAProxy: the site's files over HTTP.
start_site
start_rateld 429 haproxy || fail rateld_start "$(tail -3 "$tmp/rateld.log")"
start_haproxy closed || fail haproxy_start "$(cat "$tmp/haproxy/out.log")"
check_demo haproxy
check_hostile haproxy
# The value of the key: after the number is limited, no spelling of it,
# no second copy and no other place for it gets a 2xx.
check_attacks haproxy
# The body reaches rateld (option http-buffer-request): json:telephone.
form() { code -X POST -H 'Content-Type: application/json' --data-binary "$1" "http://127.0.0.1:$gport/sendCode"; }
c1=$(form '{"telephone":"13800138000"}')
if [ "$c1" != 429 ] && [ "$c1" != 400 ] && [ "$c1" != 403 ]; then ok haproxy_json_first; else fail haproxy_json_first "[$c1]"; fi
same haproxy_json_second "$(form '{"telephone":"13800138000"}')" 429
same haproxy_json_missing "$(form '{"captcha":"x"}')" 400
same haproxy_content "$(curl -s --interface 127.0.0.6 "http://127.0.0.1:$gport/api/ping")" pong
# auth.gateway unset: the Lua sends no client copy of its headers.
stop_rateld
start_rateld 429 "" || fail rateld_default_start "$(tail -3 "$tmp/rateld.log")"
check_hostile_limited haproxy-default
# auth.unmatched: allow: no spelling of a path passes unlimited.
check_spellings_allow haproxy-allow 429 haproxy
check_down haproxy_closed 503 503

stop_process haproxy
start_rateld 429 haproxy || fail rateld_restart "$(tail -3 "$tmp/rateld.log")"
start_haproxy open || fail haproxy_open_start "$(cat "$tmp/haproxy/out.log")"
same haproxy_open_running "$(code "http://127.0.0.1:$gport/api/ping")" 200
check_down haproxy_open 200 200
same haproxy_open_content "$(curl -s --interface 127.0.0.7 "http://127.0.0.1:$gport/api/ping")" pong

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log" "$tmp/haproxy/out.log"
hostile_summary
attack_summary
finish
