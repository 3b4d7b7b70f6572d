#!/usr/bin/env bash
# Two rateld processes sharing one redis-server (with the module) enforce
# one limit together; killing Redis applies the configured failure policy
# (closed here: 429 from "closed", /readyz 503) and rateld recovers when
# Redis is back.
. "$(dirname "$0")/lib.sh"

rateld=$build/rateld
[ -x "$rateld" ] || { echo "FAIL $rateld not built"; echo "0 passed, 1 failed"; exit 1; }

rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
p1=$(free_port)
p2=$(free_port)

config() { # PORT
    cat <<EOF
listen: 127.0.0.1:$1
store:
  type: redis
  url: redis://127.0.0.1:$rport
  on_failure: closed
  timeout_ms: 200
policies:
  ping:
    rules: [20/1m]
    key: ip
EOF
}
config "$p1" >"$tmp/r1.yaml"
config "$p2" >"$tmp/r2.yaml"
for i in 1 2; do
    "$rateld" --config "$tmp/r$i.yaml" >"$tmp/r$i.log" 2>&1 &
    echo $! >"$tmp/pids/rateld$i"
done
for p in "$p1" "$p2"; do
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$p/healthz" && break; sleep 0.05; done
done
same ready_1 "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p1/readyz")" 200

# 30 requests alternating between the two daemons: 20 pass in all.
allowed=0
for i in $(seq 15); do
    for p in "$p1" "$p2"; do
        c=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/v1/acquire?policy=ping&key=10.1.1.1")
        [ "$c" = 200 ] && allowed=$((allowed + 1))
    done
done
same shared_limit "$allowed" 20
same redis_key "$(rcli "$rport" EXISTS ping:10.1.1.1)" 1
contains source_store "$(curl -s "http://127.0.0.1:$p1/v1/acquire?policy=ping&key=10.2.2.2")" '"source":"store"'

# Redis dies: the failure policy (closed) decides, quickly.
kill -9 "$(cat "$tmp/redis-$rport/pid")"
out=$(curl -s -m 5 -w ' %{http_code}' "http://127.0.0.1:$p1/v1/acquire?policy=ping&key=10.3.3.3")
contains closed_status "$out" ' 429'
contains closed_source "$out" '"source":"closed"'
same not_ready "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p2/readyz")" 503
m=$(curl -s "http://127.0.0.1:$p1/metrics")
contains fallback_metric "$m" 'ratel_store_fallbacks_total{policy="closed"}'

# Redis is back (state gone, no persistence): decisions come from it again
# once the breaker lets a request through.
redis_start_on "$rport" >/dev/null 2>&1 || fail redis_restart "did not restart"
back=
for _ in $(seq 100); do
    out=$(curl -s "http://127.0.0.1:$p1/v1/acquire?policy=ping&key=10.4.4.4")
    if [[ $out == *'"source":"store"'* ]]; then back=1; break; fi
    sleep 0.1
done
same recovered "${back:-0}" 1
same ready_again "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p2/readyz")" 200

finish
