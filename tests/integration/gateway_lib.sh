# gateway_lib.sh - what the test_gateway_*.sh suites share: the snippets of
# docs/gateways.md (read out of the page, so the page is what is tested,
# with only ports and paths changed), rateld on the ping demo, and the
# checks every gateway must pass.
#
# Clients connect from 127.0.0.2 (curl --interface), the gateway reaches
# rateld from 127.0.0.1, and only 127.0.0.1 is a trusted proxy: a client's
# own X-Forwarded-For must change nothing.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

docs=$root/docs/gateways.md
rport=$(free_port)
gport=$(free_port)
fport=$(free_port)
aport=$(free_port)
while [ "$gport" = "$rport" ]; do gport=$(free_port); done
while [ "$fport" = "$rport" ] || [ "$fport" = "$gport" ]; do fport=$(free_port); done
client=127.0.0.2

# snippet NAME: the fenced block after "<!-- snippet: NAME -->", with the
# page's ports and paths replaced by this test's.
snippet() {
    awk -v want="<!-- snippet: $1 -->" '
        $0 == want { found = 1; next }
        found == 1 && /^```/ { found = 2; next }
        found == 2 && /^```/ { exit }
        found == 2 { print }' "$docs" |
        sed -e "s/8080/$rport/g; s/8000/$gport/g; s/8081/$fport/g" \
            -e "s/8082/$aport/g; s#/srv/www#$tmp/www#g; s#/etc/haproxy/#$tmp/#g"
}

# The site's files (the workers of a gateway started as root may run as
# another user: everything readable).
mkdir -p "$tmp/www/api"
echo pong >"$tmp/www/api/ping"
echo sent >"$tmp/www/sendCaptcha"
chmod 755 "$tmp" "$tmp/www" "$tmp/www/api"
chmod 644 "$tmp/www/api/ping" "$tmp/www/sendCaptcha"

code() { curl -s -o /dev/null -w '%{http_code}' --interface "$client" "$@"; }
header() { grep -i "^$1:" "$2" | head -1 | cut -d: -f2- | tr -d '\r' | sed 's/^ //'; }
metric() { curl -s "http://127.0.0.1:$rport/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }' | head -1; }

# wait_http URL: until it answers anything (5 s at most).
wait_http() {
    for _ in $(seq 100); do
        curl -s -o /dev/null "$1" && return 0
        sleep 0.05
    done
    return 1
}

# start_rateld [DENY_STATUS]: rateld on the page's demo configuration.
start_rateld() {
    snippet rateld | sed "s/deny_status: 429.*/deny_status: ${1:-429}/" >"$tmp/rateld.yaml"
    "$build/rateld" --config "$tmp/rateld.yaml" >>"$tmp/rateld.log" 2>&1 &
    echo $! >"$tmp/pids/rateld"
    wait_http "http://127.0.0.1:$rport/healthz"
}

stop_rateld() {
    local pid
    pid=$(cat "$tmp/pids/rateld")
    kill -CONT "$pid" 2>/dev/null
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null
}

# check_demo NAME: the ping demo through the gateway on $gport.
check_demo() {
    local name=$1 url=http://127.0.0.1:$gport codes ra rl rp t
    codes=$(for _ in $(seq 22); do code "$url/api/ping"; echo; done | tr '\n' ' ')
    same "${name}_20_then_429" "$codes" "$(printf '200 %.0s' $(seq 20))429 429 "
    curl -s -D "$tmp/h" -o "$tmp/b" --interface "$client" "$url/api/ping"
    same "${name}_status" "$(head -1 "$tmp/h" | cut -d' ' -f2)" 429
    ra=$(header Retry-After "$tmp/h")
    rl=$(header RateLimit "$tmp/h")
    rp=$(header RateLimit-Policy "$tmp/h")
    if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && [ "$ra" -le 60 ]; then
        ok "${name}_retry_after"
    else
        fail "${name}_retry_after" "[$ra] $(tr -d '\r' <"$tmp/h" | tr '\n' ' ')"
    fi
    # RateLimit names the binding rule, r=0, and t is the retry time.
    same "${name}_ratelimit" "$rl" "\"ping-0\";r=0;t=$ra"
    same "${name}_ratelimit_policy" "$rp" '"ping-0";q=20;w=60'

    # A client's own X-Forwarded-For changes nothing: same bucket, still
    # limited, and the spoofed address's bucket is untouched.
    same "${name}_spoofed_xff" "$(code -H 'X-Forwarded-For: 198.51.100.9' "$url/api/ping")" 429
    same "${name}_spoofed_bucket" "$(curl -s "http://127.0.0.1:$rport/v1/acquire?policy=ping&key=198.51.100.9&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":20'
    same "${name}_client_bucket" "$(curl -s "http://127.0.0.1:$rport/v1/acquire?policy=ping&key=$client&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":0'

    # The SMS route: one a minute per number; a request without the number
    # is the client's error.
    same "${name}_sms_first" "$(code "$url/sendCaptcha?telephone=13800138000")" 200
    same "${name}_sms_second" "$(code "$url/sendCaptcha?telephone=13800138000")" 429
    same "${name}_missing_key" "$(code "$url/sendCaptcha")" 400
    same "${name}_duplicate_key" "$(code "$url/sendCaptcha?telephone=13900139000&telephone=13900139001")" 400

    # No route: refused, counted, logged.
    local before after
    before=$(metric 'ratel_auth_undecided_total{reason="unmatched"}')
    same "${name}_unmatched" "$(code "$url/elsewhere")" 403
    after=$(metric 'ratel_auth_undecided_total{reason="unmatched"}')
    same "${name}_unmatched_counted" "$((after - before))" 1
    contains "${name}_unmatched_logged" "$(cat "$tmp/rateld.log")" 'reason=unmatched'
    # No original request at all (as from a gateway configured without
    # its headers): refused and counted, never allowed.
    before=$(metric 'ratel_auth_undecided_total{reason="unidentified"}')
    same "${name}_unidentified" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$rport/v1/auth")" 403
    after=$(metric 'ratel_auth_undecided_total{reason="unidentified"}')
    same "${name}_unidentified_counted" "$((after - before))" 1
}

# check_down NAME WANT_STOPPED WANT_KILLED: with rateld stopped (SIGSTOP:
# it accepts and never answers), then killed (refused), the gateway
# answers WANT_STOPPED, then WANT_KILLED, each within 2 s (the snippets
# wait about 0.5 s). rateld is not running afterwards.
check_down() {
    local name=$1 want=$2 want_killed=$3 url=http://127.0.0.1:$gport/api/ping out
    kill -STOP "$(cat "$tmp/pids/rateld")"
    out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 --interface "$client" "$url")
    kill -CONT "$(cat "$tmp/pids/rateld")"
    same "${name}_stopped_status" "${out% *}" "$want"
    if awk -v t="${out#* }" 'BEGIN { exit !(t < 2.0) }'; then ok "${name}_stopped_fast"; else fail "${name}_stopped_fast" "[$out]"; fi
    stop_rateld
    out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 --interface "$client" "$url")
    same "${name}_killed_status" "${out% *}" "$want_killed"
    if awk -v t="${out#* }" 'BEGIN { exit !(t < 2.0) }'; then ok "${name}_killed_fast"; else fail "${name}_killed_fast" "[$out]"; fi
}
