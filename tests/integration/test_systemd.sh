#!/usr/bin/env bash
# test_systemd.sh - the systemd units and readiness (docs/deployment.md,
# "Running under systemd"): `systemd-analyze verify` finds nothing to say
# about systemd/*.service.in as `make install` writes them, their exposure
# (`systemd-analyze security --offline`) stays within the documented bound,
# and rateld and captchad really tell a notify socket READY=1 once they
# answer, RELOADING=1 then READY=1 around a reload (taken or refused), and
# STOPPING=1 on SIGTERM.
. "$(dirname "$0")/lib.sh"

# The units with this build's binaries and example configurations.
mkdir -p "$tmp/units" "$tmp/etc/ratel"
cp "$root/examples/rateld.yaml" "$root/examples/captcha/captchad.yaml" "$tmp/etc/ratel/"
for u in rateld captchad; do
    sed -e "s|@sbindir@|$build|g" -e "s|@sysconfdir@|$tmp/etc|g" \
        "$root/systemd/$u.service.in" >"$tmp/units/$u.service"
done
out=$(systemd-analyze verify "$tmp/units/rateld.service" "$tmp/units/captchad.service" 2>&1)
same verify_says_nothing "$out" ""
printf '[Service]\nExecStart=/nonexistent/x\nTpye=notify\n' >"$tmp/units/bad.service"
contains verify_can_fail "$(systemd-analyze verify "$tmp/units/bad.service" 2>&1)" "Tpye"

# Exposure: 1.2 ("OK") when written; the bound leaves room for a line
# that a later systemd scores differently, not for dropping a protection.
for u in rateld captchad; do
    score=$(systemd-analyze security --offline=true "$tmp/units/$u.service" 2>&1 |
        sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p')
    echo "# $u.service exposure: $score"
    same "${u}_exposure_at_most_2" "$(awk -v s="$score" 'BEGIN { print (s != "" && s <= 2.0) ? "yes" : "no " s }')" yes
done

# sd_notify for real: a datagram socket playing systemd's part.
listen_notify() { # NAME: starts the listener, prints the socket's path
    local sock=$tmp/$1.notify
    /usr/bin/python3 "$root/tests/integration/notify_listen.py" "$sock" "$tmp/$1.msgs" \
        >"$tmp/$1.listener.log" 2>&1 </dev/null &
    echo $! >"$tmp/pids/notify-$1"
    for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
    echo "$sock"
}
# wait_msgs NAME COUNT: until COUNT messages arrived (5 s at most).
wait_msgs() {
    for _ in $(seq 100); do
        [ "$(grep -c . "$tmp/$1.msgs" 2>/dev/null)" -ge "$2" ] && return 0
        sleep 0.05
    done
}
msg() { sed -n "${2}p" "$tmp/$1.msgs"; }

port=$(free_port)
sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$root/examples/rateld.yaml" >"$tmp/rateld.yaml"
sock=$(listen_notify rateld)
NOTIFY_SOCKET=$sock "$build/rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
pid=$!
echo "$pid" >"$tmp/pids/rateld"
wait_msgs rateld 1
contains rateld_ready "$(msg rateld 1)" "READY=1|STATUS=serving on port $port"
# Ready means listening: the first request after READY=1 is answered.
same rateld_answers_when_ready "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" 200
kill -HUP "$pid"
wait_msgs rateld 3
contains rateld_reloading "$(msg rateld 2)" "RELOADING=1|MONOTONIC_USEC="
same rateld_reloaded "$(msg rateld 3)" "READY=1|STATUS=configuration reloaded"
echo "policies: [" >>"$tmp/rateld.yaml"
kill -HUP "$pid"
wait_msgs rateld 5
contains rateld_bad_reloading "$(msg rateld 4)" "RELOADING=1"
same rateld_bad_reload_ready "$(msg rateld 5)" \
    "READY=1|STATUS=reload refused, running configuration kept (see the log)"
same rateld_still_serves "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" 200
kill -TERM "$pid"
wait_msgs rateld 6
same rateld_stopping "$(msg rateld 6)" "STOPPING=1"
wait "$pid"
same rateld_exit "$?" 0
# Without NOTIFY_SOCKET nothing is sent and nothing fails (every other
# suite runs rateld so).

cport=$(free_port)
mkdir -p "$tmp/captchad"
sed "s/^listen: .*/listen: 127.0.0.1:$cport/" "$root/examples/captcha/captchad.yaml" >"$tmp/captchad/captchad.yaml"
sock=$(listen_notify captchad)
(cd "$tmp/captchad" && NOTIFY_SOCKET=$sock exec "$build/captchad" --config captchad.yaml) >"$tmp/captchad.log" 2>&1 &
cpid=$!
echo "$cpid" >"$tmp/pids/captchad"
wait_msgs captchad 1
contains captchad_ready "$(msg captchad 1)" "READY=1|STATUS=serving on port $cport"
same captchad_answers_when_ready "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$cport/healthz")" 200
kill -TERM "$cpid"
wait_msgs captchad 2
same captchad_stopping "$(msg captchad 2)" "STOPPING=1"

finish
