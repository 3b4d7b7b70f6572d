#!/usr/bin/env bash
# captchad never waits for Redis: with the server SIGSTOPped while clients
# keep asking /captcha/send on captchad's one worker, /healthz and
# /metrics answer at once (a generous ceiling of 100 ms each, not a
# benchmark), the hang is one outage in captchad's log (one store down
# line, one store up) and /readyz is 503 with the cause until it ends,
# every send is answered at its own deadline (timeout_ms 300) and after
# SIGCONT sends are decided by Redis again (202, the code in Redis).
# Twice: failure policy `closed` (429 from the per-IP policy) and `local`
# (the embedded store admits; the code store, in the same hung Redis,
# cannot take the code: 503, the permits given back). The slowest
# /healthz or /metrics seen is printed.
. "$(dirname "$0")/lib.sh"

require_built captchad
rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
rpid=$(cat "$tmp/redis-$rport/pid")
# A stopped server would not see the cleanup's SIGTERM: wake it first.
trap 'kill -CONT "$rpid" 2>/dev/null; cleanup' EXIT
# hang POLICY WANT PHONE: one captchad on `on_failure: POLICY`; WANT is
# the status of a send while Redis hangs, PHONE the one sent after.
hang() {
    local policy=$1 want=$2 back_phone=$3 port h code t slowest slow bad late i
    rm -f "$tmp"/client*.out "$tmp/stop"
    port=$(free_port)
    h=http://127.0.0.1:$port
    cat >"$tmp/captchad.yaml" <<EOF
listen: 127.0.0.1:$port
threads: 1
trusted_proxies: [127.0.0.1]
sqlite_path: $tmp/captchad.db
store:
  type: redis
  url: redis://127.0.0.1:$rport
  on_failure: $policy
  timeout_ms: 300
policies:
  send_phone: [1000/1h]
  send_ip: [1000/1h]
sender:
  type: log
  log_file: $tmp/captchad.sms
EOF
    read -r -a wrap <<<"${CAPTCHAD_WRAP:-}"
    server_start "captchad-$policy" "$port" "${wrap[@]}" "$build/captchad" --config "$tmp/captchad.yaml" ||
        { fail "${policy}_start" "captchad did not start"; finish; exit 1; }

    send() { # PHONE IP: prints the status and the seconds the answer took
        curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' \
            -H "X-Forwarded-For: $2" -X POST -d "{\"telephone\":\"$1\"}" "$h/captcha/send"
    }
    same "${policy}_before_hang" "$(send 13800000000 10.9.0.1 | cut -d' ' -f1)" 202

    # Four clients keep sending (each its own phones and address) while
    # Redis hangs.
    clients() {
        local i=$1 n=0
        while [ ! -e "$tmp/stop" ]; do
            n=$((n + 1))
            send "1380000$i$(printf %03d $((n % 1000)))" "10.9.1.$i" >>"$tmp/client$i.out"
            echo >>"$tmp/client$i.out"
        done
    }
    for i in 1 2 3 4; do clients "$i" & echo $! >"$tmp/pids/client$i"; done
    kill -STOP "$rpid"

    # /healthz and /metrics, 20 times each, spread over the outage.
    answers_at_once "$policy" "$h" healthz metrics

    # A send during the hang: its answer at its deadline (300 ms, or at once
    # while the breaker is open; a code store call: 300 ms more), never a wait
    # past it.
    read -r code t <<<"$(send 13900000000 10.9.0.2)"
    same "${policy}_hang_send" "$code" "$want"
    awk -v t="$t" 'BEGIN { exit !(t < 1.0) }' && ok "${policy}_hang_send_deadline" ||
        fail "${policy}_hang_send_deadline" "took ${t}s (timeout_ms is 300)"

    # /readyz says the store is down, and why, while Redis hangs.
    not_ready() { [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$h/readyz")" = 503 ]; }
    wait_for 5 not_ready && ok "${policy}_not_ready" || fail "${policy}_not_ready" "$(curl -s "$h/readyz")"
    contains "${policy}_not_ready_cause" "$(curl -s -m 2 "$h/readyz")" '"error":"store redis not ready: '
    kill -CONT "$rpid"
    back() { [ "$(send "$back_phone" 10.9.0.3 | cut -d' ' -f1)" = 202 ]; }
    wait_for 15 back && ok "${policy}_back_to_redis" || fail "${policy}_back_to_redis" "no send admitted by Redis after SIGCONT"
    ready() { [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$h/readyz")" = 200 ]; }
    wait_for 5 ready && ok "${policy}_ready_again" || fail "${policy}_ready_again" "$(curl -s "$h/readyz")"
    # Codes are keyed by the number's E.164 form.
    same "${policy}_code_in_redis" "$(redis-cli -p "$rport" EXISTS "captcha:code:{+86$back_phone}")" 1
    touch "$tmp/stop"
    for i in 1 2 3 4; do wait "$(cat "$tmp/pids/client$i")" 2>/dev/null; done
    # Every client send got an answer from Redis (202) or from the failure
    # policy (429), none an error, and none waited past its deadline.
    bad=$(cat "$tmp"/client*.out | awk -v w="$want" 'NF && $1 != 202 && $1 != w' | wc -l)
    same "${policy}_clients_answered" "$bad" 0
    late=$(cat "$tmp"/client*.out | awk 'NF && $2 >= 1.0' | wc -l)
    same "${policy}_clients_on_time" "$late" 0
    [ "$(cat "$tmp"/client*.out | grep -c "^$want")" -gt 0 ] && ok "${policy}_clients_saw_policy" ||
        fail "${policy}_clients_saw_policy" "no client send was decided by the failure policy"
    server_stop "captchad-$policy"
    same "${policy}_exit_status" "$stopped" 0
    # The hang is one outage in captchad's log: a line when it began, one
    # when it ended.
    log=$(cat "$tmp/captchad-$policy.log")
    same "${policy}_one_store_down_line" "$(grep -c 'msg="store down" store=redis' <<<"$log")" 1
    same "${policy}_one_store_up_line" "$(grep -c 'msg="store up" store=redis' <<<"$log")" 1
    echo "# $policy: $(grep -o 'msg="store up".*' <<<"$log")"
}

hang closed 429 13700000001
hang local 503 13700000002
finish
