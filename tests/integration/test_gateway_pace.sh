#!/usr/bin/env bash
# Delay instead of refusal through rateld: docs/gateways.md's rateld-pace
# policy (10/1s:gcra,burst=1, max_wait: 300) behind a real HAProxy with
# the page's haproxy.cfg as written (ports and paths changed): six
# requests sent at once are let through on their turns, 0, 100, 200 and
# 300 ms after the first (checked against the schedule with a generous
# tolerance, never a performance figure), the other two refused (429) at
# once; rateld refuses the policy on a route for any other gateway.
. "$(dirname "$0")/gateway_lib.sh"

require_haproxy
start_site

snippet rateld-pace >"$tmp/pace.yaml"
read -r -a wrap <<<"${RATELD_WRAP:-}"
server_start rateld "$rport" "${wrap[@]}" "$build/rateld" --config "$tmp/pace.yaml" ||
    fail rateld_start "did not start"
mkdir -p "$tmp/haproxy"
snippet haproxy >"$tmp/haproxy/haproxy.cfg"
haproxy -db -f "$tmp/haproxy/haproxy.cfg" >"$tmp/haproxy/out.log" 2>&1 &
echo $! >"$tmp/pids/haproxy"
wait_http "http://127.0.0.1:$gport/" || fail haproxy_start "$(cat "$tmp/haproxy/out.log")"

# Six at once (a new connection each, from one client address).
specs=()
for _ in 1 2 3 4 5 6; do specs+=("0:5:http://127.0.0.1:$gport/api/ping"); done
out=$(python3 "$lib_here/timed_requests.py" "${specs[@]}")
statuses=$(awk '{ print $1 }' <<<"$out" | sort | tr '\n' ' ')
same six_at_once "$statuses" "200 200 200 200 429 429 "
# The admitted ones, in the order they ended, against 0/100/200/300 ms
# after the first; the refused ones answered at once.
ends=$(awk '$1 == 200 { print $3 }' <<<"$out" | sort -g)
devs=$(awk 'NR == 1 { t0 = $1 } { d = $1 - t0 - (NR - 1) * 100; printf "%d ", d < 0 ? -d : d }' <<<"$ends")
worst=$(tr ' ' '\n' <<<"$devs" | sort -g | tail -1)
if [ "$(wc -w <<<"$devs")" = 4 ] && [ "$worst" -le 60 ]; then
    ok schedule_within_60ms
else
    fail schedule_within_60ms "deviations [$devs]: $(tr '\n' ';' <<<"$out")"
fi
refused_slowest=$(awk '$1 == 429 { print int($3 - $2) }' <<<"$out" | sort -g | tail -1)
if [ "${refused_slowest:-999}" -le 150 ]; then ok refused_at_once; else fail refused_at_once "$out"; fi
contains wait_field "$(curl -s -D - -o /dev/null -H 'X-Original-Method: GET' \
    -H 'X-Original-URI: /api/ping' "http://127.0.0.1:$rport/v1/auth" |
    tr -d '\r')" "X-Ratel-Wait-Ms: "

# Only HAProxy waits: any other gateway, and a rule that cannot reserve,
# is refused when the configuration is read.
config_refused other_gateway "$(sed 's/gateway: haproxy/gateway: nginx/' "$tmp/pace.yaml")" \
    "policy pace has max_wait, and only a gateway that waits when told to can honour it"
config_refused not_gcra "$(sed 's/10\/1s:gcra,burst=1/10\/1s/' "$tmp/pace.yaml")" \
    'max_wait needs every rule to be gcra; rule 1 ("10/1s") is sliding'

server_stop rateld
same rateld_exit "$stopped" 0
finish
