#!/usr/bin/env bash
# rateld never waits for Redis: with the server SIGSTOPped while clients
# keep calling /v1/acquire on rateld's one worker, /healthz and /metrics
# answer at once (a generous ceiling of 100 ms each, not a benchmark),
# every acquire is answered by the failure policy at its own deadline
# (timeout_ms 300, `local`: source "local"), and after SIGCONT decisions
# come from Redis again. The same for a gRPC call of Envoy's rate limit
# service. The slowest /healthz seen is printed.
. "$(dirname "$0")/lib.sh"

require_built rateld
rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
rpid=$(cat "$tmp/redis-$rport/pid")
# A stopped server would not see the cleanup's SIGTERM: wake it first.
trap 'kill -CONT "$rpid" 2>/dev/null; cleanup' EXIT
port=$(free_port)
gport=$(free_port)
h=http://127.0.0.1:$port
cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$port
threads: 1
admin_token: "hang-test-admin-token-0123456789abcdef"
store:
  type: redis
  url: redis://127.0.0.1:$rport
  on_failure: local
  timeout_ms: 300
envoy:
  listen: 127.0.0.1:$gport
  config_dir: $root/examples/envoy/ratelimit
policies:
  ping:
    rules: [1000/1m]
EOF
read -r -a wrap <<<"${RATELD_WRAP:-}"
server_start rateld "$port" "${wrap[@]}" "$build/rateld" --config "$tmp/rateld.yaml" ||
    { fail start "rateld did not start"; finish; exit 1; }

acquire() { # KEY: prints the source and the seconds the answer took
    curl -s -m 10 -w ' %{time_total}' "$h/v1/acquire?policy=ping&key=$1" |
        tr -d '\n' | sed -n 's/.*"source":"\([a-z]*\)".* \([0-9.]*\)$/\1 \2/p'
}
contains before_hang "$(acquire k0)" "store"

# Four clients keep acquiring while Redis hangs.
clients() {
    local i=$1
    while [ ! -e "$tmp/stop" ]; do
        # One line per answer (acquire prints none): an empty line is an
        # answer that never came.
        { acquire "c$i"; echo; } >>"$tmp/client$i.out"
    done
}
for i in 1 2 3 4; do clients "$i" & echo $! >"$tmp/pids/client$i"; done
kill -STOP "$rpid"

# /healthz and /metrics, 20 times each, spread over the outage.
answers_at_once hang "$h" healthz metrics

# An acquire during the hang: the failure policy's answer at its deadline
# (300 ms, or at once while the breaker is open), never a wait past it.
read -r src t <<<"$(acquire k1)"
same hang_source "$src" local
awk -v t="$t" 'BEGIN { exit !(t < 1.0) }' && ok hang_acquire_deadline ||
    fail hang_acquire_deadline "took ${t}s (timeout_ms is 300)"

# An admin reset: Redis cannot take it, so 503 at its deadline, not later.
read -r code t < <(curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' -X POST \
    -H 'Authorization: Bearer hang-test-admin-token-0123456789abcdef' \
    -d '{"policy":"ping","key":"k1"}' "$h/v1/reset")
same hang_reset_503 "$code" 503
awk -v t="$t" 'BEGIN { exit !(t < 1.0) }' && ok hang_reset_deadline ||
    fail hang_reset_deadline "took ${t}s (timeout_ms is 300)"

# A gRPC call of Envoy's rate limit service, likewise.
rls=$(/usr/bin/python3 "$lib_here/rls_client.py" call "127.0.0.1:$gport" ratel remote_address=10.1.1.1)
contains hang_grpc_answered "$rls" "OK [OK 20/MINUTE"
contains hang_grpc_by_policy "$(curl -s "$h/metrics")" \
    'ratel_decisions_total{policy="envoy:ratel:remote_address",outcome="allowed",source="local"} 1'

kill -CONT "$rpid"
# Ready means deciding from Redis: the first decision once /readyz says
# 200 comes from Redis (the health check's PING lets every worker try
# Redis at once, instead of waiting out its breaker).
is_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$h/readyz")" = 200 ]; }
wait_for 15 is_ready && ok ready_again || fail ready_again "not ready after SIGCONT"
same ready_means_redis "$(acquire k2 | cut -d' ' -f1)" store
back() { [ "$(acquire k2 | cut -d' ' -f1)" = store ]; }
wait_for 15 back && ok back_to_redis || fail back_to_redis "no decision from Redis after SIGCONT"
touch "$tmp/stop"
for i in 1 2 3 4; do wait "$(cat "$tmp/pids/client$i")" 2>/dev/null; done
# Every client request got an answer from Redis or from the failure
# policy, none an error.
bad=$(cat "$tmp"/client*.out | awk '$1 != "store" && $1 != "local"' | wc -l)
same clients_answered "$bad" 0
[ "$(cat "$tmp"/client*.out | grep -c '^local')" -gt 0 ] && ok clients_saw_policy ||
    fail clients_saw_policy "no client request was decided by the failure policy"
server_stop rateld
same exit_status "$stopped" 0
finish
