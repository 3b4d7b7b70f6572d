# gateway_lib.sh - what the test_gateway_*.sh suites share: the snippets of
# docs/gateways.md (read out of the page, so the page is what is tested,
# with only ports and paths changed), rateld on the ping demo, and the
# checks every gateway must pass: the demo's limits, and a hostile client
# whose own forwarded-request headers must never move a request to
# another route, key, method or host, or past its limit.
#
# Clients connect from 127.0.0.2 (curl --interface), the gateway reaches
# rateld from 127.0.0.1, and only 127.0.0.1 is a trusted proxy: a client's
# own X-Forwarded-For must change nothing.
# shellcheck shell=bash
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

docs=$root/docs/gateways.md
rport=$(free_port)
gport=$(free_port)
fport=$(free_port)
aport=$(free_port)
cport=$(free_port) # Caddy's admin API
while [ "$gport" = "$rport" ]; do gport=$(free_port); done
while [ "$fport" = "$rport" ] || [ "$fport" = "$gport" ]; do fport=$(free_port); done
client=127.0.0.2

# snippet NAME: the fenced block after "<!-- snippet: NAME -->", with the
# page's ports and paths replaced by this test's.
snippet() {
    doc_snippet "$docs" "$1" |
        sed -e "s/8080/$rport/g; s/8000/$gport/g; s/8081/$fport/g" \
            -e "s/8082/$aport/g; s/2019/$cport/g; s#/srv/www#$tmp/www#g" \
            -e "s#/usr/local/share/ratel/examples/gateways/#$root/examples/gateways/#g"
}

# The site's files (the workers of a gateway started as root may run as
# another user: everything readable).
mkdir -p "$tmp/www/api"
echo pong >"$tmp/www/api/ping"
echo sent >"$tmp/www/sendCaptcha"
echo hosted >"$tmp/www/hosted"
chmod 755 "$tmp" "$tmp/www" "$tmp/www/api"
chmod 644 "$tmp/www/api/ping" "$tmp/www/sendCaptcha" "$tmp/www/hosted"

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

# start_rateld DENY_STATUS GATEWAY [UNMATCHED]: rateld on the page's demo
# configuration with that auth.deny_status and auth.gateway (GATEWAY ""
# leaves auth.gateway out: the default, which refuses ambiguity) and
# auth.unmatched (default deny, as on the page), and one route more for
# the hostile client's host checks: /hosted, only for the host
# victim.example.
start_rateld() {
    {
        snippet rateld | sed -e "s/deny_status: 429.*/deny_status: $1/" \
            -e "s/gateway: caddy .*/gateway: $2/" -e "/gateway: \$/d" \
            -e "s/unmatched: deny/unmatched: ${3:-deny}/"
        printf '  - path: /hosted\n    host: victim.example\n    policies: [ping]\n'
    } >"$tmp/rateld.yaml"
    "$build/rateld" --config "$tmp/rateld.yaml" >>"$tmp/rateld.log" 2>&1 &
    echo $! >"$tmp/pids/rateld"
    wait_http "http://127.0.0.1:$rport/healthz"
}

# stop_process NAME: the process recorded in $tmp/pids/NAME continued (a
# test may have stopped it), terminated, and killed after 5 s.
stop_process() {
    local pid
    pid=$(cat "$tmp/pids/$1")
    kill -CONT "$pid" 2>/dev/null
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null
}
stop_rateld() { stop_process rateld; }

# require_haproxy: HAProxy and rateld are there, or one FAIL and exit.
require_haproxy() {
    if ! command -v haproxy >/dev/null || [ ! -x "$build/rateld" ]; then
        echo "FAIL haproxy or $build/rateld missing (scripts/setup.sh, make)"
        echo "0 passed, 1 failed"
        exit 1
    fi
}

# start_site: the site's files ($tmp/www) over HTTP on $aport, the
# application behind the gateway.
start_site() {
    (cd "$tmp/www" && exec python3 -m http.server "$aport" --bind 127.0.0.1) \
        >"$tmp/app.log" 2>&1 &
    echo $! >"$tmp/pids/app"
    wait_http "http://127.0.0.1:$aport/" || fail app_start "$(cat "$tmp/app.log")"
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

# --- a hostile client --------------------------------------------------

# The headers a client adds to steer rateld, each with a value that would
# move the request if rateld believed it (a fresh phone number, another
# method, another host, another address), and a second value for the
# repeated form.
hostile_names=(X-Original-URI X-Forwarded-Uri X-Original-Method
    X-Forwarded-Method X-Forwarded-Host X-Original-Host Host Forwarded
    X-Forwarded-For)
declare -A hostile_one=(
    [X-Original-URI]='/sendCaptcha?telephone=13700137000'
    [X-Forwarded-Uri]='/sendCaptcha?telephone=13700137000'
    [X-Original-Method]=POST [X-Forwarded-Method]=POST
    [X-Forwarded-Host]=victim.example [X-Original-Host]=victim.example
    [Host]=victim.example
    [Forwarded]='for=198.51.100.7;host=victim.example'
    [X-Forwarded-For]=198.51.100.7)
declare -A hostile_two=(
    [X-Original-URI]='/sendCaptcha?telephone=13700137001'
    [X-Forwarded-Uri]='/sendCaptcha?telephone=13700137001'
    [X-Original-Method]=PUT [X-Forwarded-Method]=PUT
    [X-Forwarded-Host]=victim2.example [X-Original-Host]=victim2.example
    [Host]=victim2.example
    [Forwarded]='for=198.51.100.8;host=victim2.example'
    [X-Forwarded-For]=198.51.100.8)
# The forms of each: the name as written, in lower case or in upper case,
# once or twice (two values: a gateway or rateld reading the first or
# the last could be steered either way).
hostile_forms=("as-is 1" "lower 1" "upper 1" "as-is 2" "lower 2" "upper 2")

# raw_status REQUEST: the status line's code of the gateway's answer to
# REQUEST (printf escapes), sent from the client's address as is: curl
# sends one Host however many -H Host it is given.
raw_status() {
    python3 - "$client" "$gport" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), 5, (sys.argv[1], 0))
s.sendall(sys.argv[3].encode().decode("unicode_escape").encode("latin-1"))
head = s.recv(4096).split(b"\r\n", 1)[0].split()
print(head[1].decode() if len(head) > 1 else "none")
PY
}

# hostile_args NAME SPELLING TIMES: the curl -H arguments, in `args`
# (for Host, curl sends only the first: raw_status sends two).
hostile_args() {
    local name=$1 n=$1
    [ "$2" = lower ] && n=${name,,}
    [ "$2" = upper ] && n=${name^^}
    args=(-H "$n: ${hostile_one[$name]}")
    [ "$3" = 2 ] && args+=(-H "$n: ${hostile_two[$name]}")
}

# What the closing note quotes: per gateway, each header tried and the
# statuses the client got.
hostile_note() { printf '%-28s %-20s %s\n' "$1" "$2" "$3" >>"$tmp/hostile.txt"; }
hostile_summary() {
    echo "# hostile client headers (gateway/scenario, header, statuses for: as-is, lower, UPPER once; the same twice)"
    cat "$tmp/hostile.txt"
}

# peek POLICY KEY: the key's remaining permits, not charging it.
peek() { curl -s "http://127.0.0.1:$rport/v1/acquire?policy=$1&key=$2&peek=1" | grep -o '"remaining":[0-9]*' | cut -d: -f2; }

# check_hostile_limited NAME: the client 127.0.0.2 is over its SMS limit
# on 13800138000; every hostile header in every form still gets 429, the
# limit's own answer (not even a 400 ambiguous: the snippet dropped or
# replaced the client's copy before rateld saw it), and the numbers the
# headers name are never charged. Two Host fields (sent raw) get no 2xx.
check_hostile_limited() {
    local name=$1 url="http://127.0.0.1:$gport/sendCaptcha?telephone=13800138000" h f codes c bad
    code "$url" >/dev/null # over the limit, whatever came before
    for h in "${hostile_names[@]}"; do
        codes="" bad=""
        for f in "${hostile_forms[@]}"; do
            hostile_args "$h" "${f% *}" "${f#* }"
            c=$(code "${args[@]}" "$url")
            codes+="$c "
            [ "$c" != 429 ] && bad+="[$f: $c] "
        done
        hostile_note "$name/limited-sms" "$h" "$codes"
        if [ -z "$bad" ]; then ok "${name}_hostile_limited_$h ($codes)"; else fail "${name}_hostile_limited_$h" "not the limit's 429: $bad"; fi
    done
    c=$(raw_status "GET /sendCaptcha?telephone=13800138000 HTTP/1.1\r\nHost: 127.0.0.1:$gport\r\nhost: victim.example\r\nConnection: close\r\n\r\n")
    hostile_note "$name/limited-sms" "Host twice (raw)" "$c"
    if [[ $c == [0-9][0-9][0-9] && $c != 2* ]]; then ok "${name}_hostile_limited_two_hosts ($c)"; else fail "${name}_hostile_limited_two_hosts" "[$c]"; fi
    check_spellings "$name"
    same "${name}_hostile_other_phone" "$(peek sms 13700137000)" 1
    same "${name}_hostile_other_phone_2" "$(peek sms 13700137001)" 1
}

# /sendCaptcha written otherwise. A backend serves each of spelled_same
# as /sendCaptcha (nginx and Caddy merge slashes, decode and resolve dot
# segments; a servlet container drops ";jsessionid=1" and so reads
# "/api/..;/" as "/api/../"); rateld matches their normal form, so each
# gets the limit. spelled_refused have no safe normal form (an encoded
# '/', '\' or NUL, a bad escape, a climb above the root): rateld refuses
# them (bad-uri), or the gateway does first. /SendCaptcha is another
# path: nginx, Caddy and Spring match case-sensitively, so does rateld.
spelled_same=(//sendCaptcha /%73endCaptcha /send%43aptcha /api/../sendCaptcha
    /./sendCaptcha /%2e/sendCaptcha /api/%2e%2e/sendCaptcha /api/.%2E/sendCaptcha
    /sendCaptcha/ "/sendCaptcha;jsessionid=1" "/api/..;/sendCaptcha"
    "//api/./..//sendCaptcha")
spelled_refused=(/sendCaptcha%2F /api/..%2FsendCaptcha /api/..%5CsendCaptcha
    /sendCaptcha%00 /send%zzCaptcha /../sendCaptcha /api/../../sendCaptcha
    /%2e%2e/sendCaptcha)

# check_spellings NAME: the client is over its SMS limit on 13800138000;
# every spelling of /sendCaptcha gets the limit's 429, and the others a
# 4xx (never a 2xx), with auth.unmatched deny or allow alike.
check_spellings() {
    local name=$1 url="?telephone=13800138000" codes="" bad="" c path
    code "http://127.0.0.1:$gport/sendCaptcha$url" >/dev/null # over the limit
    for path in "${spelled_same[@]}"; do
        c=$(code --path-as-is "http://127.0.0.1:$gport$path$url")
        codes+="$c "
        [ "$c" != 429 ] && bad+="[$path: $c] "
    done
    hostile_note "$name/limited-sms" "same path spelled" "$codes"
    if [ -z "$bad" ]; then ok "${name}_spelled_same ($codes)"; else fail "${name}_spelled_same" "not the limit's 429: $bad"; fi
    codes="" bad=""
    for path in "${spelled_refused[@]}" /SendCaptcha; do
        c=$(code --path-as-is "http://127.0.0.1:$gport$path$url")
        codes+="$c "
        [[ $c != 4[0-9][0-9] ]] && bad+="[$path: $c] "
    done
    hostile_note "$name/limited-sms" "refused / other paths" "$codes"
    if [ -z "$bad" ]; then ok "${name}_spelled_refused ($codes)"; else fail "${name}_spelled_refused" "$bad"; fi
}

# check_spellings_allow NAME DENY_STATUS GATEWAY: the spellings again with
# auth.unmatched: allow (rateld restarted), where a spelling rateld did
# not match would pass unlimited; a path rateld refuses is counted and
# logged as bad-uri.
check_spellings_allow() {
    local before after
    stop_rateld
    start_rateld "$2" "$3" allow || fail "$1_rateld_allow_start" "$(tail -3 "$tmp/rateld.log")"
    before=$(metric 'ratel_auth_undecided_total{reason="bad-uri"}')
    check_spellings "$1"
    after=$(metric 'ratel_auth_undecided_total{reason="bad-uri"}')
    if [ "$((after - before))" -ge 1 ]; then ok "$1_bad_uri_counted ($((after - before)))"; else fail "$1_bad_uri_counted" "$before -> $after"; fi
    contains "$1_bad_uri_logged" "$(cat "$tmp/rateld.log")" 'reason=bad-uri'
    # rateld's own answer, as the gateway gets it (400; 403 for nginx).
    curl -s -D "$tmp/h" -o /dev/null -H 'X-Original-URI: /a%2Fb' -H 'X-Forwarded-Uri: /a%2Fb' \
        -H 'X-Original-Method: GET' -H 'X-Forwarded-Method: GET' "http://127.0.0.1:$rport/v1/auth"
    same "$1_bad_uri_answer" "$(head -1 "$tmp/h" | cut -d' ' -f2) $(header X-Ratel-Reason "$tmp/h")" \
        "$([ "$2" = 403 ] && echo 403 || echo 400) bad-uri"
}

# check_hostile_route NAME: a fresh client (127.0.0.3) on /api/ping with
# every hostile header: decided as ping (200), never as /sendCaptcha; its
# own ping bucket pays for exactly its requests, the named phones and the
# spoofed addresses pay nothing.
check_hostile_route() {
    local name=$1 url=http://127.0.0.1:$gport/api/ping h f codes c allowed=0 bad
    for h in "${hostile_names[@]}"; do
        codes="" bad=""
        for f in "as-is 1" "lower 2"; do
            hostile_args "$h" "${f% *}" "${f#* }"
            c=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.3 "${args[@]}" "$url")
            codes+="$c "
            [ "$c" = 200 ] && allowed=$((allowed + 1))
            [ "$c" != 200 ] && bad+="[$f: $c] "
        done
        hostile_note "$name/ping-route" "$h" "$codes"
        if [ -z "$bad" ]; then ok "${name}_hostile_route_$h ($codes)"; else fail "${name}_hostile_route_$h" "$bad"; fi
    done
    same "${name}_hostile_route_own_bucket" "$(peek ping 127.0.0.3)" "$((20 - allowed))"
    same "${name}_hostile_route_no_sms" "$(peek sms 13700137000)/$(peek sms 13700137001)" 1/1
    same "${name}_hostile_route_spoofed_ip" "$(peek ping 198.51.100.7)/$(peek ping 198.51.100.8)" 20/20
}

# check_hostile_method_host NAME: GET /sendCode (a POST-only route:
# unmatched, 403) and /hosted from the gateway's own host (only for
# victim.example: unmatched, 403) stay unmatched whatever method or host
# header the client adds; the control, a real `Host: victim.example`,
# is decided (200).
check_hostile_method_host() {
    local name=$1 h f codes c bad path
    for path in sendCode hosted; do
        for h in "${hostile_names[@]}"; do
            [ "$h" = Host ] && continue # the client's real host: its choice
            codes="" bad=""
            for f in "as-is 1" "lower 2"; do
                hostile_args "$h" "${f% *}" "${f#* }"
                c=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.4 "${args[@]}" "http://127.0.0.1:$gport/$path")
                codes+="$c "
                [ "$c" != 403 ] && bad+="[$f: $c] "
            done
            hostile_note "$name/$path" "$h" "$codes"
            if [ -z "$bad" ]; then ok "${name}_hostile_${path}_$h ($codes)"; else fail "${name}_hostile_${path}_$h" "moved off unmatched: $bad"; fi
        done
    done
    same "${name}_hosted_control" "$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.4 -H 'Host: victim.example' "http://127.0.0.1:$gport/hosted")" 200
}

# check_method_host_spellings NAME: a method or host the client writes
# otherwise is the same one. /hosted (victim.example only, keyed on the
# address) with the host in another case, a final dot or a port is
# decided on its route (200, the client's ping bucket charged), never
# unmatched; two hosts in one Host field get no 2xx. POST /sendCode
# written `post` is never unmatched: decided on its route when the
# gateway passes the method on (its phone charged on a 2xx), or refused
# by the gateway (nginx: 400).
check_method_host_spellings() {
    local name=$1 h c codes="" bad="" n=0 url=http://127.0.0.1:$gport
    for h in VICTIM.example victim.example. Victim.Example:$gport; do
        c=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.8 -H "Host: $h" "$url/hosted")
        codes+="$c " n=$((n + 1))
        [ "$c" != 200 ] && bad+="[$h: $c] "
    done
    hostile_note "$name/hosted-spelled" "Host" "$codes"
    if [ -z "$bad" ]; then ok "${name}_host_spelled ($codes)"; else fail "${name}_host_spelled" "$bad"; fi
    same "${name}_host_spelled_charged" "$(peek ping 127.0.0.8)" "$((20 - n))"
    c=$(raw_status "GET /hosted HTTP/1.1\r\nHost: victim.example, other.example\r\nConnection: close\r\n\r\n")
    hostile_note "$name/hosted-spelled" "Host a, b (raw)" "$c"
    if [[ $c == [0-9][0-9][0-9] && $c != 2* ]]; then ok "${name}_host_two_in_one ($c)"; else fail "${name}_host_two_in_one" "[$c]"; fi
    curl -s -D "$tmp/h" -o /dev/null --interface 127.0.0.8 -X post \
        -H 'Content-Type: application/json' -d '{"telephone":"13600136000"}' "$url/sendCode"
    c=$(head -1 "$tmp/h" | cut -d' ' -f2)
    hostile_note "$name/sendCode" "method post" "$c $(header X-Ratel-Reason "$tmp/h")"
    if [ "$(header X-Ratel-Reason "$tmp/h")" = unmatched ]; then
        fail "${name}_method_spelled" "post left the POST route: $c unmatched"
    elif [[ $c == 2* && "$(peek code 13600136000)" != 0 ]]; then
        fail "${name}_method_spelled" "$c but the phone was not charged"
    else
        ok "${name}_method_spelled ($c $(header X-Ratel-Reason "$tmp/h"))"
    fi
}

# check_hostile NAME: all of the above.
check_hostile() {
    check_hostile_limited "$1"
    check_hostile_route "$1"
    check_hostile_method_host "$1"
    check_method_host_spellings "$1"
}

# --- attacks on the key's value ------------------------------------------

# The number the attacks try to get past its limit, and the one the
# page's snippet names as exempt (no "8000" in it: snippet() moves the
# page's ports).
attack_phone=13900000001
exempt_phone=13700000000

# attack_code ARGS...: the status, then rateld's X-Ratel-Reason ("-"
# when none: the gateway's or the backend's own answer), of one request
# from the client.
attack_code() {
    local c
    c=$(curl -s -o /dev/null -D "$tmp/attack.h" -w '%{http_code}' --interface "$client" "$@")
    echo "$c:$(header X-Ratel-Reason "$tmp/attack.h" | sed 's/^$/-/')"
}

# The attacks, each a function of the try's number (1..5) printing
# attack_code's "STATUS:REASON": a raw '#' in the query (sent as is:
# curl would cut it), the parameter repeated with the empty one first or
# last, a random number first, one digit percent-encoded, the name in
# another case, the number in a form body without a query (a POST:
# Spring, PHP's $_REQUEST read it), and no parameter at all.
attack_fragment() {
    python3 - "$client" "$gport" "$attack_phone#$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), 5, (sys.argv[1], 0))
s.sendall(("GET /sendCaptcha?telephone=%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n"
           "Connection: close\r\n\r\n" % (sys.argv[3], sys.argv[2])).encode())
head = b""
while b"\r\n\r\n" not in head:
    chunk = s.recv(4096)
    if not chunk:
        break
    head += chunk
lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
status = lines[0].split()[1] if len(lines[0].split()) > 1 else "none"
reason = [l.split(":", 1)[1].strip() for l in lines[1:]
          if l.lower().startswith("x-ratel-reason:")]
print("%s:%s" % (status, reason[0] if reason else "-"))
PY
}
attack_repeat_empty_first() { attack_code "$aurl?telephone=&telephone=$attack_phone"; }
attack_repeat_empty_last() { attack_code "$aurl?telephone=$attack_phone&telephone="; }
attack_repeat_random_first() { attack_code "$aurl?telephone=1370000$((1000 + RANDOM % 9000))&telephone=$attack_phone"; }
attack_percent_encoded() {
    # the try's digit of the number as %3N ("1390000000%31", ...)
    local i=$((11 - $1)) d
    d=${attack_phone:$i:1}
    attack_code "$aurl?telephone=${attack_phone:0:$i}%3$d${attack_phone:$((i + 1))}"
}
attack_name_title_case() { attack_code "$aurl?Telephone=$attack_phone"; }
attack_name_upper_case() { attack_code "$aurl?TELEPHONE=$attack_phone"; }
attack_form_body() { attack_code -X POST -H 'Content-Type: application/x-www-form-urlencoded' --data "telephone=$attack_phone" "$aurl"; }
attack_missing() { attack_code "$aurl"; }
# Other spellings of the number (docs/keys.md, "Phone numbers"), one per
# try: the same phone to the SMS provider, so the same bucket.
spellings=('%2B86%20139%200000%200001' '%2B8613900000001' '008613900000001'
    '139-0000-0001' '%2B86%20(0)%20139%200000%200001')
attack_spelled_otherwise() { attack_code "$aurl?telephone=${spellings[$(($1 - 1))]}"; }
# Numbers no provider delivers (12 digits: no CN range): refused.
attack_invalid_number() { attack_code "$aurl?telephone=$attack_phone$1"; }
attacks=(fragment repeat_empty_first repeat_empty_last repeat_random_first
    percent_encoded name_title_case name_upper_case form_body missing
    spelled_otherwise invalid_number)

# check_attacks NAME: /sendCaptcha's number is sent until it is limited
# (429); then every attack, five tries each, gets no 2xx, and every answer
# is rateld's refusal (an X-Ratel-Reason), but a raw '#' that the gateway
# refuses itself (HAProxy: 400 without one); the page's exempt number
# passes every time. Prints
# "attack NAME ATTACK 2xx=N" per attack, for the closing note.
check_attacks() {
    local name=$1 aurl="http://127.0.0.1:$gport/sendCaptcha" a i c codes n bad
    for _ in 1 2 3; do
        c=$(code "$aurl?telephone=$attack_phone")
        [ "$c" = 429 ] && break
    done
    same "${name}_attack_number_limited" "$c" 429
    for a in "${attacks[@]}"; do
        codes="" n=0 bad=""
        for i in 1 2 3 4 5; do
            c=$("attack_$a" "$i")
            codes+="$c "
            [[ $c == 2* ]] && n=$((n + 1))
            [[ $c == *:- && ($a != fragment || $c != 400:-) ]] && bad+="[$c: not rateld's] "
        done
        echo "attack $name $a 2xx=$n ($codes)"
        printf 'attack %-8s %-20s 2xx=%s  %s\n' "$name" "$a" "$n" "$codes" >>"$tmp/attacks.txt"
        if [ "$n" = 0 ] && [ -z "$bad" ]; then ok "${name}_attack_$a"; else fail "${name}_attack_$a" "2xx=$n $bad($codes)"; fi
    done
    codes="" n=0
    for i in 1 2 3; do
        c=$(attack_code "$aurl?telephone=$exempt_phone")
        codes+="$c "
        [[ $c == 2* ]] && n=$((n + 1))
    done
    echo "attack $name exempt 2xx=$n of 3 ($codes)"
    printf 'attack %-8s %-20s 2xx=%s of 3  %s\n' "$name" exempt "$n" "$codes" >>"$tmp/attacks.txt"
    same "${name}_exempt_passes" "$n" 3
    same "${name}_attack_number_still_limited" "$(code "$aurl?telephone=$attack_phone")" 429
}

# attack_summary: every attack tried through this gateway and its count of
# 2xx after the limit.
attack_summary() {
    echo "# attacks after $attack_phone was limited (per gateway: attack, 2xx of 5 tries, STATUS:X-Ratel-Reason of each)"
    cat "$tmp/attacks.txt" 2>/dev/null
}
