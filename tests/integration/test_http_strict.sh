#!/usr/bin/env bash
# Strict HTTP in rateld and captchad over real sockets (raw bytes from
# http_raw.py): what a front proxy could read differently from us (no
# Host, two, a header name with a space, a control byte, a bare LF in the
# head or the chunk framing) is a 400 that closes the connection, and the
# request behind it is never answered; every error the HTTP layer answers
# by itself (400, 408, 413, 414, 431, 503, 505) is JSON; one client holding
# its share of connections (limits.max_connections_per_client) is refused
# while other addresses are served, and every refusal is counted in the
# metrics and logged within the budget. Clients come from 127.0.0.1, .2, .3, .4
# (all of 127/8 is loopback).
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
require_built rateld captchad
raw() { python3 "$here/http_raw.py" send "$target" "$@"; } # to $target
hold() { python3 "$here/http_raw.py" hold "$@"; }

port=$(free_port)
cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$port
threads: 2
limits:
  max_header_bytes: 1024
  max_body_bytes: 1024
  request_timeout_ms: 700
  max_connections: 8
  max_connections_per_client: 3
store:
  type: memory
  max_bytes: 8MiB
policies:
  ping:
    rules: [20/1m]
    key: ip
EOF
server_start rateld "$port" "$build/rateld" --config "$tmp/rateld.yaml" || exit 1
target=$port

H='Host: x\r\n'
next="GET /v1/acquire?policy=ping&key=next HTTP/1.1\r\n$H\r\n"
refused=$'400 json close\nCLOSED'

# --- accepted: the baseline each refusal below differs from by one thing
same good_pipelined "$(raw "GET /healthz HTTP/1.1\r\n$H\r\n$next")" \
    $'200 - keep\n200 - keep\nOPEN'
same http10_without_host \
    "$(raw "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n$next")" \
    $'200 - keep\n200 - keep\nOPEN'
same chunked_ok "$(raw "POST /v1/acquire HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n8\r\n{\"policy\r\n13;e=1\r\n\":\"ping\",\"key\":\"c\"}\r\n0\r\n\r\n$next")" \
    $'200 - keep\n200 - keep\nOPEN'

# --- refused with 400 and close; the pipelined request is never answered
same no_host "$(raw "GET /healthz HTTP/1.1\r\n\r\n$next")" "$refused"
same two_hosts "$(raw "GET /healthz HTTP/1.1\r\n${H}host: y\r\n\r\n$next")" "$refused"
same header_name_space "$(raw "GET /healthz HTTP/1.1\r\n${H}X A: b\r\n\r\n$next")" "$refused"
same header_name_trailing_space "$(raw "GET /healthz HTTP/1.1\r\n${H}X-A : b\r\n\r\n$next")" "$refused"
same header_value_control "$(raw "GET /healthz HTTP/1.1\r\n${H}X-A: a\x01b\r\n\r\n$next")" "$refused"
same bare_lf_request_line "$(raw "GET /healthz HTTP/1.1\n$H\r\n$next")" "$refused"
same bare_lf_end_of_head "$(raw "GET /healthz HTTP/1.1\r\n$H\n$next")" "$refused"
# The desync: read with the bare LF as a line end, the body swallows the
# next request (34 bytes); rateld must answer neither as anything but 400.
smuggle="GET /v1/acquire?policy=ping&key=s HTTP/1.1\r\n"
same bare_lf_desync "$(raw "POST /v1/acquire HTTP/1.1\r\n${H}X-A: a\nContent-Length: 34\r\n\r\n$smuggle$H\r\n")" "$refused"
same chunk_bare_lf "$(raw "POST /v1/acquire HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n3;x=y\nabc\r\n0\r\n\r\n$next")" "$refused"
same chunk_data_without_crlf "$(raw "POST /v1/acquire HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n$next")" "$refused"
same target_tab "$(raw "GET /heal\tthz HTTP/1.1\r\n$H\r\n$next")" "$refused"
# Nothing refused ran: of the 20 permits of key "next", only the three
# accepted pipelines above took one; "s" (smuggled) and "c" untouched.
remaining() { curl -s "http://127.0.0.1:$port/v1/acquire?policy=ping&key=$1&peek=1" | grep -o '"remaining":[0-9]*'; }
same refused_never_ran "$(remaining next) $(remaining s)" '"remaining":17 "remaining":20'

# --- every error of the HTTP layer is JSON and closes
big=$(head -c 1100 /dev/zero | tr '\0' a)
same json_408 "$(raw "GET /healthz HTTP/1.1\r\n${H}X-Slow: 1")" $'408 json close\nCLOSED'
same json_413 "$(raw "POST /v1/acquire HTTP/1.1\r\n${H}Content-Length: 2000\r\n\r\n")" $'413 json close\nCLOSED'
same json_414 "$(raw "GET /$big HTTP/1.1\r\n$H\r\n")" $'414 json close\nCLOSED'
same json_431 "$(raw "GET /healthz HTTP/1.1\r\n${H}X-Big: $big\r\n\r\n")" $'431 json close\nCLOSED'
same json_505 "$(raw "GET /healthz HTTP/2.0\r\n$H\r\n")" $'505 json close\nCLOSED'
same json_400_garbage "$(raw 'HELLO WORLD\r\n\r\n')" "$refused"
same json_405 "$(raw "DELETE /v1/acquire HTTP/1.1\r\n$H\r\n")" $'405 json keep\nOPEN'

# --- connections per client: 127.0.0.1 holds its 3, a 4th is refused,
# another address is served; past max_connections (8) everyone is refused
same per_client_cap "$(hold "$port" 127.0.0.1:3 -- 127.0.0.1 127.0.0.2)" \
    "127.0.0.1 503 json too many connections from this client address (limits.max_connections_per_client)
127.0.0.2 200 - -"
same total_cap "$(hold "$port" 127.0.0.1:3 127.0.0.2:3 127.0.0.3:2 -- 127.0.0.4)" \
    "127.0.0.4 503 json server busy: too many connections (limits.max_connections)"
same served_after_caps "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" 200

# --- refused connections are counted and logged within the budget (one
# line per limit per 10 s on each of the 2 worker threads): a burst of 40
# refusals moves the metric by exactly 40 and adds at most 4 lines (2
# threads, a 10 s boundary crossed); after the stop, the lines and their
# not_logged account for every refusal, none twice
refused_total() { curl -s "http://127.0.0.1:$port/metrics" | awk -v l="$1" '$1 == "ratel_http_connections_refused_total{limit=\"" l "\"}" { print $2 }'; }
refused_lines() { grep 'msg="connection refused"' "$tmp/rateld.log" | grep -c "limit=$1"; }
same refused_metric_total_cap "$(refused_total max_connections)" 1
before=$(refused_total max_connections_per_client) lines_before=$(refused_lines max_connections_per_client)
probes=$(printf '127.0.0.1 %.0s' $(seq 40))
# shellcheck disable=SC2086 # one probe per word
same refused_burst "$(hold "$port" 127.0.0.1:3 -- $probes | grep -c '^127.0.0.1 503 json too many connections from this client')" 40
same refused_metric_moves "$(($(refused_total max_connections_per_client) - before))" 40
lines=$(($(refused_lines max_connections_per_client) - lines_before))
if [ "$lines" -ge 1 ] && [ "$lines" -le 4 ]; then ok refused_log_bounded; else fail refused_log_bounded "$lines lines for 40 refusals"; fi
contains refused_log_line "$(grep 'msg="connection refused"' "$tmp/rateld.log" | head -1)" \
    'level=warn msg="connection refused" limit=max_connections_per_client client=127.0.0.1 not_logged='
total=$(refused_total max_connections_per_client)
server_stop rateld
same refused_stop_exit "$stopped" 0
logged=$(grep 'msg="connection refused"' "$tmp/rateld.log" | grep 'limit=max_connections_per_client' |
    awk '/level=warn/ { n++ } { for (i = 1; i <= NF; i++) if ($i ~ /^not_logged=/) { sub(/^not_logged=/, "", $i); n += $i } } END { print n + 0 }')
same refused_log_accounts_all "$logged" "$total"

# --- captchad: the same HTTP layer, its errors JSON too
cport=$(free_port)
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
cat >"$tmp/captchad.yaml" <<EOF
listen: 127.0.0.1:$cport
admin_token: "$token"
limits:
  max_body_bytes: 1024
  max_connections_per_client: 2
sqlite_path: $tmp/captchad.db
sender:
  type: log
  log_file: $tmp/captchad.sms
EOF
server_start captchad "$cport" "$build/captchad" --config "$tmp/captchad.yaml" || exit 1
target=$cport
cnext="GET /healthz HTTP/1.1\r\n$H\r\n"
same captchad_no_host "$(raw "GET /healthz HTTP/1.1\r\n\r\n$cnext")" "$refused"
same captchad_bare_lf "$(raw "GET /healthz HTTP/1.1\r\n${H}X-A: a\n\r\n$cnext")" "$refused"
same captchad_json_413 "$(raw "POST /sendCaptcha HTTP/1.1\r\n${H}Content-Length: 5000\r\n\r\n")" $'413 json close\nCLOSED'
same captchad_per_client "$(hold "$cport" 127.0.0.1:2 -- 127.0.0.1 127.0.0.2)" \
    "127.0.0.1 503 json too many connections from this client address (limits.max_connections_per_client)
127.0.0.2 200 - -"
same captchad_refused_metric "$(curl -s "http://127.0.0.1:$cport/metrics" | grep '^captcha_connections_refused_total')" \
    'captcha_connections_refused_total{limit="max_connections"} 0
captcha_connections_refused_total{limit="max_connections_per_client"} 1'
contains captchad_refused_log "$(cat "$tmp/captchad.log")" \
    'level=warn msg="connection refused" limit=max_connections_per_client client=127.0.0.1 not_logged=0'
finish
