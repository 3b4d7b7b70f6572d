#!/usr/bin/env bash
# Two rateld processes sharing one redis-server (with the module) enforce
# one limit together; killing Redis applies the configured failure policy
# (closed here: 429 from "closed", /readyz 503) and rateld recovers when
# Redis is back. Then a Redis that hangs (SIGSTOP): /readyz answers 503 at
# once without holding up the worker's other requests, and the log tells
# the outage and the recovery once each, with the cause.
. "$(dirname "$0")/lib.sh"

# ready_is PORT CODE: /readyz answers CODE now.
ready_is() {
    [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = "$2" ]
}
# log_has FILE MSG [N]: FILE has at least N (default 1) lines with msg="MSG".
log_has() {
    [ "$(grep -c "msg=\"$2\"" "$1")" -ge "${3:-1}" ]
}

rateld=$build/rateld
# RATELD_WRAP (e.g. "valgrind -q --error-exitcode=99") prefixes rateld.
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"
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
    "${rateld_wrap[@]}" "$rateld" --config "$tmp/r$i.yaml" >"$tmp/r$i.log" 2>&1 &
    echo $! >"$tmp/pids/rateld$i"
done
for p in "$p1" "$p2"; do
    for _ in $(seq 400); do curl -s -o /dev/null "http://127.0.0.1:$p/healthz" && break; sleep 0.05; done
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
# p2 has no traffic: its health thread's PING finds out.
wait_for 10 ready_is "$p2" 503 && ok not_ready || fail not_ready "p2's /readyz never said 503"
wait_for 10 log_has "$tmp/r2.log" "store down" && ok down_logged || fail down_logged "$(cat "$tmp/r2.log")"
contains down_cause "$(grep 'msg="store down"' "$tmp/r2.log")" "cause=\"127.0.0.1:$rport:"
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
wait_for 10 ready_is "$p2" 200 && ok ready_again || fail ready_again "p2's /readyz never said 200 again"
wait_for 10 log_has "$tmp/r1.log" "store up" && ok up_logged || fail up_logged "$(cat "$tmp/r1.log")"


# ---- A Redis that hangs (SIGSTOP), under a rateld with one worker.
hport=$(redis_start) || { fail hang_redis "did not start"; finish; exit 1; }
hpid=$(cat "$tmp/redis-$hport/pid")
# A stopped server would not see the cleanup's SIGTERM: wake it first.
trap 'kill -CONT "$hpid" 2>/dev/null; cleanup' EXIT
p3=$(free_port)
h3=http://127.0.0.1:$p3
cat >"$tmp/r3.yaml" <<EOF
listen: 127.0.0.1:$p3
threads: 1
store:
  type: redis
  url: redis://127.0.0.1:$hport
  on_failure: local
  timeout_ms: 1500
policies:
  ping:
    rules: [20/1m]
    key: ip
EOF
"${rateld_wrap[@]}" "$rateld" --config "$tmp/r3.yaml" >"$tmp/r3.log" 2>&1 &
echo $! >"$tmp/pids/rateld3"
wait_for 10 ready_is "$p3" 200 && ok hang_ready || fail hang_ready "$(cat "$tmp/r3.log")"

kill -STOP "$hpid"
# No traffic: the health thread's PING times out (1.5 s) and says so.
wait_for 15 ready_is "$p3" 503 && ok hang_not_ready || fail hang_not_ready "/readyz never said 503"

# /readyz and /healthz together on the one worker: neither waits for
# Redis (before, /readyz PINGed on the worker: both took 1.5 s or more).
# The short sleep only orders the two requests.
curl -s -o "$tmp/ready.body" -m 10 -w '%{http_code} %{time_total}' "$h3/readyz" >"$tmp/ready.out" &
rpid=$!
sleep 0.1
health=$(curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' "$h3/healthz")
wait "$rpid"
read -r rcode rtime <"$tmp/ready.out"
fast() { awk -v t="$1" 'BEGIN { exit !(t < 0.2) }'; }
same hang_readyz_503 "$rcode" 503
fast "$rtime" && ok hang_readyz_fast || fail hang_readyz_fast "took ${rtime}s (timeout_ms is 1500)"
same hang_healthz_200 "${health% *}" 200
fast "${health#* }" && ok hang_healthz_fast || fail hang_healthz_fast "took ${health#* }s behind /readyz"
contains hang_readyz_cause "$(cat "$tmp/ready.body")" "\"cause\":\"127.0.0.1:$hport: no reply within 1500 ms"

# Requests meanwhile are decided by the failure policy (the first waits
# for the timeout, then the breaker answers at once), and the outage goes
# on for several more failed PINGs: still one line.
for _ in 1 2 3; do curl -s -o /dev/null -m 10 "$h3/v1/acquire?policy=ping&key=10.9.9.9"; done
since_ms() { curl -s -m 5 "$h3/readyz" | sed -n 's/.*"since_ms":\([0-9]*\).*/\1/p'; }
down_for() { [ "$(since_ms)" -ge "$1" ] 2>/dev/null; }
wait_for 20 down_for 5000 || fail hang_long "/readyz since_ms never reached 5000: $(since_ms)"
same hang_down_once "$(grep -c 'msg="store down"' "$tmp/r3.log")" 1
contains hang_down_cause "$(grep 'msg="store down"' "$tmp/r3.log")" \
    "level=warn msg=\"store down\" store=redis cause=\"127.0.0.1:$hport: no reply within 1500 ms"

kill -CONT "$hpid"
wait_for 15 ready_is "$p3" 200 && ok hang_ready_again || fail hang_ready_again "/readyz never said 200 again"
wait_for 10 log_has "$tmp/r3.log" "store up" && ok hang_up_logged || fail hang_up_logged "$(cat "$tmp/r3.log")"
up_line=$(grep 'msg="store up"' "$tmp/r3.log")
same hang_up_once "$(grep -c 'msg="store up"' "$tmp/r3.log")" 1
same hang_down_still_once "$(grep -c 'msg="store down"' "$tmp/r3.log")" 1
down_ms=$(sed -n 's/.* down_ms=\([0-9]*\).*/\1/p' <<<"$up_line")
[ "${down_ms:-0}" -ge 5000 ] && ok hang_up_down_ms || fail hang_up_down_ms "[$up_line]"
contains hang_back_to_redis "$(curl -s "$h3/v1/acquire?policy=ping&key=10.8.8.8")" '"source":"store"'

# SIGTERM stops each rateld with its health thread joined (under valgrind
# or a sanitizer, an error or a leak at exit makes the status non-zero).
for i in 1 2 3; do
    pid=$(cat "$tmp/pids/rateld$i")
    kill -TERM "$pid"
    wait "$pid"
    same "sigterm_exit_$i" "$?" 0
done

finish
