#!/usr/bin/env bash
# test_rateld_restart.sh - counts of the embedded memory store survive a
# restart (docs/memory-store.md, "Snapshots"): rateld on
# examples/rateld.yaml (only its port changed) limits a number by the
# `sms` policy (200, then 429); stopped with SIGTERM and started again,
# the number is still limited; after another number's decision, once the
# snapshot's file has been rewritten (its interval passed), SIGKILL and a
# new start keep that one limited too. captchad on captchad/captchad.yaml
# keeps its send limit across a restart the same way. A corrupt snapshot
# stops rateld from starting, naming the file and the problem. A snapshot
# that cannot be written (its directory moved away) is one warning line
# in rateld and captchad (and /readyz's warning, rateld's metrics), one
# more when writes succeed again.
. "$(dirname "$0")/lib.sh"
require_built rateld captchad
# RATELD_WRAP (e.g. "valgrind -q --error-exitcode=99") prefixes rateld and
# captchad (tests/valgrind.sh): an error or a leak at a SIGTERM makes the
# exit status checks fail.
read -r -a wrap <<<"${RATELD_WRAP:-}"

port=$(free_port)
dir=$tmp/rateld
mkdir -p "$dir"
sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$root/examples/rateld.yaml" >"$dir/rateld.yaml"
state=$dir/rateld.state

# sms NUMBER: the status of one decision for NUMBER.
sms() {
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/acquire?policy=sms&key=$1"
}
# Each server runs in its own directory (a relative snapshot path lands
# there), started from this shell so that server_stop can wait for it.
start_in() { # DIR NAME PORT COMMAND...
    local d=$1 rc
    shift
    cd "$d" || return 1
    server_start "$@"
    rc=$?
    cd "$tmp" || return 1
    return "$rc"
}
start_rateld() { start_in "$dir" rateld "$port" "${wrap[@]}" "$build/rateld" --config rateld.yaml; }
mtime() { stat -c %.9Y "$state" 2>/dev/null || echo 0; }

start_rateld || { finish; exit 1; }
same first_sms "$(sms 13800138000)" 200
same second_sms_limited "$(sms 13800138000)" 429
server_stop rateld TERM
same term_exit "$stopped" 0
same snapshot_mode "$(stat -c %a "$state" 2>/dev/null)" 600
echo "# after SIGTERM: $(stat -c %s "$state") bytes in $state"

start_rateld || { finish; exit 1; }
got=$(sms 13800138000)
echo "# 13800138000 after SIGTERM and a new start: $got"
same limited_after_term_restart "$got" 429
contains load_logged "$(cat "$tmp/rateld.log")" "msg=\"memory store snapshot\" path=rateld.state keys=1"

# Another number, then wait until the interval's write has the file
# rewritten (10 s at most), and kill rateld without a chance to write.
before=$(mtime)
same other_first "$(sms 13800138001)" 200
wait_for 10 bash -c "[ \"\$(stat -c %.9Y '$state')\" != '$before' ]"
same snapshot_rewritten_by_interval "$(mtime | awk -v b="$before" '{ print ($1 != b) ? "yes" : "no" }')" yes
server_stop rateld KILL
start_rateld || { finish; exit 1; }
got=$(sms 13800138001)
echo "# 13800138001 after SIGKILL (past the interval) and a new start: $got"
same limited_after_kill_restart "$got" 429
same first_still_limited "$(sms 13800138000)" 429
server_stop rateld TERM

# A damaged snapshot: rateld refuses to start and says which file and why;
# --check-config checks the same directory start does.
printf 'RATELSNP\001\000\000\000' >"$state"
(cd "$dir" && "$build/rateld" --config rateld.yaml) >"$tmp/bad.log" 2>&1
same corrupt_refused_exit "$?" 1
contains corrupt_names_file "$(cat "$tmp/bad.log")" "snapshot rateld.state: truncated"
echo "# a damaged snapshot: $(grep -o 'reason=.*' "$tmp/bad.log" | head -1)"
sed "s|^  snapshot: .*|  snapshot: $tmp/nowhere/rateld.state|" "$dir/rateld.yaml" >"$dir/elsewhere.yaml"
out=$(cd "$dir" && "$build/rateld" --check-config elsewhere.yaml 2>&1)
contains check_config_checks_directory "$out" "store.snapshot: snapshot $tmp/nowhere/rateld.state: its directory $tmp/nowhere: does not exist"

# A snapshot that cannot be written (its directory moved away, as a disk
# gone or full would do): rateld goes on deciding, logs one warning with
# the file and the reason, /readyz stays ready and says so, /metrics
# counts the failed writes; the directory back, the next write succeeds
# and one line ends the warning.
mkdir -p "$dir/state"
sed "s|^  snapshot: .*|  snapshot: state/rateld.state|" "$dir/rateld.yaml" >"$dir/moving.yaml"
from=$(($(wc -l <"$tmp/rateld.log") + 1))
start_in "$dir" rateld "$port" "${wrap[@]}" "$build/rateld" --config moving.yaml || { finish; exit 1; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
lines() { tail -n "+$from" "$tmp/rateld.log" | grep -c "msg=\"$1\""; }
same snapshot_no_warning_at_start "$(metric ratel_store_warning)" 0
mv "$dir/state" "$dir/state.gone"
same decides_while_unwritable "$(sms 13800138002)" 200
wait_for 10 bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"ratel_store_snapshot_errors_total\" { print \$2 }')\" -ge 2 ]"
same still_decides_while_unwritable "$(sms 13800138002)" 429
same warning_metric "$(metric ratel_store_warning)" 1
ready=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$port/readyz")
contains ready_while_unwritable "$ready" ' 200'
contains ready_says_why "$ready" '"warning":"snapshot state/rateld.state: cannot create'
wait_for 5 bash -c "tail -n +$from '$tmp/rateld.log' | grep -q 'msg=\"store warning\"'"
warn=$(tail -n "+$from" "$tmp/rateld.log" | grep 'msg="store warning"')
echo "# snapshot directory gone: $warn"
contains warning_names_file_and_reason "$warn" 'cause="snapshot state/rateld.state: cannot create state/rateld.state.tmp-'
contains warning_says_errno "$warn" 'No such file or directory'
mv "$dir/state.gone" "$dir/state"
wait_for 10 bash -c "tail -n +$from '$tmp/rateld.log' | grep -q 'msg=\"store warning over\"'"
echo "# directory back: $(tail -n "+$from" "$tmp/rateld.log" | grep 'msg="store warning over"')"
same warning_metric_cleared "$(metric ratel_store_warning)" 0
same one_warning_line "$(lines 'store warning')" 1
same one_warning_over_line "$(lines 'store warning over')" 1
errors=$(metric ratel_store_snapshot_errors_total)
echo "# failed snapshot writes while the directory was gone: $errors"
server_stop rateld TERM
same unwritable_term_exit "$stopped" 0
start_in "$dir" rateld "$port" "${wrap[@]}" "$build/rateld" --config moving.yaml || { finish; exit 1; }
same limited_after_recovered_writes "$(sms 13800138002)" 429
server_stop rateld TERM

# captchad: its send limit (send_phone 1/60s) across a restart.
cport=$(free_port)
cdir=$tmp/captchad
mkdir -p "$cdir"
sed "s/^listen: .*/listen: 127.0.0.1:$cport/" "$root/captchad/captchad.yaml" >"$cdir/captchad.yaml"
send() {
    curl -s -o /dev/null -w '%{http_code}' -H 'X-Forwarded-For: 10.0.0.1' \
        -X POST -d '{"telephone":"13900000001"}' "http://127.0.0.1:$cport/captcha/send"
}
start_captchad() { start_in "$cdir" captchad "$cport" "${wrap[@]}" "$build/captchad" --config captchad.yaml; }
start_captchad || { finish; exit 1; }
same captchad_first_send "$(send)" 202
same captchad_second_send_limited "$(send)" 429
server_stop captchad TERM
same captchad_term_exit "$stopped" 0
start_captchad || { finish; exit 1; }
got=$(send)
echo "# captchad send to 13900000001 after SIGTERM and a new start: $got"
same captchad_limited_after_restart "$got" 429
server_stop captchad TERM

# captchad watches its store too: the snapshot's directory gone, one
# warning line naming the file; back, one line ending it.
mkdir -p "$cdir/state"
sed "s|^  snapshot: .*|  snapshot: state/captchad.state|" "$cdir/captchad.yaml" >"$cdir/moving.yaml"
from=$(($(wc -l <"$tmp/captchad.log") + 1))
start_in "$cdir" captchad "$cport" "${wrap[@]}" "$build/captchad" --config moving.yaml || { finish; exit 1; }
mv "$cdir/state" "$cdir/state.gone"
same captchad_sends_while_unwritable "$(send)" 202
wait_for 10 bash -c "tail -n +$from '$tmp/captchad.log' | grep -q 'msg=\"store warning\"'"
warn=$(tail -n "+$from" "$tmp/captchad.log" | grep 'msg="store warning"')
echo "# captchad, snapshot directory gone: $warn"
contains captchad_warning_names_file "$warn" 'store=memory cause="snapshot state/captchad.state: cannot create'
ready=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$cport/readyz")
contains captchad_ready_while_unwritable "$ready" ' 200'
contains captchad_ready_says_why "$ready" '"warning":"snapshot state/captchad.state: cannot create'
mv "$cdir/state.gone" "$cdir/state"
wait_for 10 bash -c "tail -n +$from '$tmp/captchad.log' | grep -q 'msg=\"store warning over\"'"
same captchad_one_warning_line "$(tail -n "+$from" "$tmp/captchad.log" | grep -c 'msg="store warning"')" 1
same captchad_one_warning_over_line "$(tail -n "+$from" "$tmp/captchad.log" | grep -c 'msg="store warning over"')" 1
server_stop captchad TERM
same captchad_unwritable_term_exit "$stopped" 0
finish
