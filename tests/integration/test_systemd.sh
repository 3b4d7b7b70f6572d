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
cp "$root/examples/rateld.yaml" "$root/captchad/captchad.yaml" "$tmp/etc/ratel/"
for u in rateld captchad; do
    sed -e "s|@sbindir@|$build|g" -e "s|@sysconfdir@|$tmp/etc|g" \
        "$root/systemd/$u.service.in" >"$tmp/units/$u.service"
done
# verify runs man(1) for each Documentation=man: line: this build's pages.
for page in "$build"/man/*.[158]; do
    mkdir -p "$tmp/man/man${page##*.}"
    ln -s "$page" "$tmp/man/man${page##*.}/"
done
out=$(MANPATH=$tmp/man systemd-analyze verify "$tmp/units/rateld.service" "$tmp/units/captchad.service" 2>&1)
same verify_says_nothing "$out" ""
printf '[Service]\nExecStart=/nonexistent/x\nTpye=notify\n' >"$tmp/units/bad.service"
contains verify_can_fail "$(systemd-analyze verify "$tmp/units/bad.service" 2>&1)" "Tpye"
contains verify_finds_missing_page "$(MANPATH=$tmp/none systemd-analyze verify "$tmp/units/rateld.service" 2>&1)" \
    "Command 'man rateld(8)' failed"

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

# start_notified NAME EXAMPLE: starts NAME (rateld or captchad) in
# $tmp/NAME on its example configuration, only the listen line changed to
# a free port, talking to a notify socket; checks READY=1, then that it
# answers (ready means listening). Sets pid and port.
start_notified() {
    local name=$1 sock
    port=$(free_port)
    mkdir -p "$tmp/$name"
    sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$2" >"$tmp/$name/$name.yaml"
    sock=$(listen_notify "$name")
    (cd "$tmp/$name" && NOTIFY_SOCKET=$sock exec "$build/$name" --config "$name.yaml") \
        >"$tmp/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$tmp/pids/$name"
    wait_msgs "$name" 1
    contains "${name}_ready" "$(msg "$name" 1)" "READY=1|STATUS=serving on port $port"
    same "${name}_answers_when_ready" "$(healthz)" 200
}
healthz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz"; }

start_notified rateld "$root/examples/rateld.yaml"
kill -HUP "$pid"
wait_msgs rateld 3
contains rateld_reloading "$(msg rateld 2)" "RELOADING=1|MONOTONIC_USEC="
same rateld_reloaded "$(msg rateld 3)" "READY=1|STATUS=configuration reloaded"
echo "policies: [" >>"$tmp/rateld/rateld.yaml"
kill -HUP "$pid"
wait_msgs rateld 5
contains rateld_bad_reloading "$(msg rateld 4)" "RELOADING=1"
same rateld_bad_reload_ready "$(msg rateld 5)" \
    "READY=1|STATUS=reload refused, running configuration kept (see the log)"
same rateld_still_serves "$(healthz)" 200
kill -TERM "$pid"
wait_msgs rateld 6
same rateld_stopping "$(msg rateld 6)" "STOPPING=1"
wait "$pid"
same rateld_exit "$?" 0
# Without NOTIFY_SOCKET nothing is sent and nothing fails (every other
# suite runs rateld so).

start_notified captchad "$root/captchad/captchad.yaml"
kill -TERM "$pid"
wait_msgs captchad 2
same captchad_stopping "$(msg captchad 2)" "STOPPING=1"
wait "$pid"
same captchad_exit "$?" 0

finish
