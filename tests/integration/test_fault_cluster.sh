#!/usr/bin/env bash
# Redis Cluster failovers under load (issue 32): 3 masters with a replica
# each (cluster-node-timeout 1000 ms), rateld on redis+cluster:// with two
# seeds and on_failure: local, ~60 acquires a second over 50 keys whose
# slots cover every master (acquire_load.py).
#
# - CLUSTER FAILOVER on a replica: decisions stay on Redis (the failure
#   policy's are counted and printed) and the store's health never moves.
# - kill -9 of a master (a seed), never restarted: once the cluster has
#   promoted its replica, the first decision from Redis for a key of its
#   slots comes within 2 s (printed); later ones all come from Redis;
#   /readyz is ready and stays so; the health changed twice (one outage,
#   down then up). A fresh CLI, the synchronous API (cluster_sync.c,
#   running through the kill) and the nginx module's Redis mode (its
#   engine on nginx's loop, asked for the dead master's keys) decide from
#   Redis too, within 2 s of the promotion. A second rateld
#   without traffic goes down and up once, from its health check alone.
#
# FAULT_KEEP=DIR keeps the answers' logs (load.log, sync.log: UNIX_MS KEY
# SOURCE), rateld's log and the kill's and promotion's instants (times).
. "$(dirname "$0")/lib.sh"
. "$lib_here/nginx_lib.sh"
require_built rateld ratel cluster_sync
# RATELD_WRAP (e.g. "valgrind -q --error-exitcode=99") prefixes rateld.
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"

now_ms() { date +%s%3N; }
role_of() { rcli "$1" ROLE 2>/dev/null | head -1; }
is_master() { [ "$(role_of "$1")" = master ]; }
# The port of the master replica PORT follows.
master_of() { rcli "$1" INFO replication | tr -d '\r' | sed -n 's/^master_port://p'; }
# Whether KEY's slot is served by PORT (a master answers other slots MOVED).
serves() { [[ $(rcli "$1" EXISTS "$2" 2>&1) != *MOVED* ]]; }
# metric NAME [BASE_URL]: its value on rateld's /metrics.
metric() { curl -s "${2:-$base}/metrics" | sed -n "s/^$1 //p"; }
# ready_code [BASE_URL]: what /readyz answers.
ready_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "${1:-$base}/readyz"; }
ready() { [ "$(ready_code "$@")" = 200 ]; }
not_ready() { [ "$(ready_code "$@")" = 503 ]; }
# count FROM_MS TO_MS KEYS_REGEX SOURCE_REGEX [FILE]: answers in the load's
# log (or FILE) between the two instants for those keys and sources.
count() {
    awk -v a="$1" -v b="$2" -v k="^($3)\$" -v s="^($4)\$" \
        '$1 >= a && $1 <= b && $2 ~ k && $3 ~ s { n++ } END { print n + 0 }' "${5:-$load_log}"
}
# first_store AFTER_MS KEYS_REGEX [FILE]: the instant of the first answer
# from Redis for those keys at or after AFTER_MS (nothing yet: empty).
first_store() {
    awk -v a="$1" -v k="^($2)\$" '$1 >= a && $2 ~ k && $3 == "store" { print $1; exit }' "${3:-$load_log}"
}
has_first_store() { [ -n "$(first_store "$@")" ]; }
# first_failure AFTER_MS KEYS_REGEX [FILE]: the first answer by the failure
# policy for those keys at or after AFTER_MS: when the outage began for
# that client (a command in flight at the kill may still have been
# answered by Redis).
first_failure() {
    awk -v a="$1" -v k="^($2)\$" '$1 >= a && $2 ~ k && $3 != "store" { print $1; exit }' "${3:-$load_log}"
}

read -r -a ports <<<"$(cluster_start 3 1 --cluster-node-timeout 1000)"
if [ "${#ports[@]}" != 6 ]; then
    fail cluster "did not form"
    finish
    exit 1
fi
masters=() replicas=()
for p in "${ports[@]}"; do
    if is_master "$p"; then masters+=("$p"); else replicas+=("$p"); fi
done
same roles "${#masters[@]} ${#replicas[@]}" "3 3"
# replica_of MASTER: its replica's port.
replica_of() {
    local r
    for r in "${replicas[@]}"; do
        [ "$(master_of "$r")" = "$1" ] && echo "$r"
    done
}
victim=${masters[0]} graceful_master=${masters[1]}
heir=$(replica_of "$victim") graceful=$(replica_of "$graceful_master")
seeds="127.0.0.1:${masters[0]},127.0.0.1:${masters[1]}"

# 50 keys; those on the master that will be killed, as a regex.
keys=() victim_keys=()
for i in $(seq 50); do
    keys+=("k$i")
    serves "$victim" "fault:k$i" && victim_keys+=("k$i")
done
on_every_master=1
for m in "${masters[@]}"; do
    n=0
    for k in "${keys[@]}"; do serves "$m" "fault:$k" && n=$((n + 1)); done
    [ "$n" -gt 0 ] || on_every_master=0
done
same keys_on_every_master "$on_every_master" 1
dead=$(
    IFS='|'
    echo "${victim_keys[*]}"
)

port=$(free_port)
base=http://127.0.0.1:$port
cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$port
store:
  type: redis
  url: redis+cluster://$seeds
  on_failure: local
policies:
  fault:
    rules: [1000000/1m]
    key: ip
EOF
# A second rateld on the same store gets no traffic: only its health
# check (a PING a second, reading the map first) sees the failover.
idle_port=$(free_port)
sed "s/^listen: .*/listen: 127.0.0.1:$idle_port/" "$tmp/rateld.yaml" >"$tmp/idle.yaml"
server_start rateld "$port" "${rateld_wrap[@]}" "$build/rateld" --config "$tmp/rateld.yaml" &&
    server_start idle "$idle_port" "${rateld_wrap[@]}" "$build/rateld" --config "$tmp/idle.yaml" || {
    finish
    exit 1
}
idle=http://127.0.0.1:$idle_port
load_log=$tmp/load.log
: >"$load_log"
python3 "$lib_here/acquire_load.py" "$base" fault 60 "$load_log" "${keys[@]}" &
echo $! >"$tmp/pids/load"
t0=$(now_ms)
wait_for 10 has_first_store "$t0" "$(
    IFS='|'
    echo "${keys[*]}"
)" || fail load "no decision from Redis within 10 s"
sleep 2
t1=$(now_ms)
same warm_all_store "$(count "$t0" "$t1" '.*' 'local|error')" 0
changes_before=$(metric ratel_store_health_changes_total)

# ----------------------------------------------- CLUSTER FAILOVER
t_asked=$(now_ms)
rcli "$graceful" CLUSTER FAILOVER >/dev/null
wait_for 20 is_master "$graceful" && ok graceful_promoted ||
    fail graceful_promoted "$graceful is not master after CLUSTER FAILOVER"
t_done=$(now_ms)
sleep 2
t_after=$(now_ms)
by_policy=$(count "$t_asked" "$t_after" '.*' 'local|error')
echo "# CLUSTER FAILOVER: promoted in $((t_done - t_asked)) ms; decisions by the failure policy: $by_policy of $(count "$t_asked" "$t_after" '.*' '.*')"
same graceful_by_policy "$by_policy" 0
same graceful_health_changes "$(metric ratel_store_health_changes_total)" "$changes_before"

# ------------------------------------------------------- kill -9
# The nginx module's Redis mode on the same cluster (its engine on the
# worker's loop, on_failure closed: a 200 is Redis's decision), asked
# for the dead master's keys one after another.
ngx_log=$tmp/ngx.log
: >"$ngx_log"
nport=$(free_port)
nginx_conf "$tmp/ngx" 1 <<EOF
    ratel_zone zone=c:1m store=redis+cluster://$seeds?on_failure=closed&timeout_ms=250;
    ratel_policy fault 1000000/1m;
    server {
        listen 127.0.0.1:$nport;
        location = /a { ratel zone=c policy=fault key=\$arg_k; empty_gif; }
    }
EOF
ngx_load() {
    local i=0 k c
    while :; do
        k=${victim_keys[i % ${#victim_keys[@]}]}
        i=$((i + 1))
        c=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$nport/a?k=$k")
        if [ "$c" = 200 ]; then c=store; else c="closed$c"; fi
        echo "$(now_ms) fault:$k $c" >>"$ngx_log"
        sleep 0.02
    done
}
ngx_on=0
if nginx_start "$tmp/ngx" "http://127.0.0.1:$nport/a?k=warm"; then
    ngx_on=1
    ngx_load &
    echo $! >"$tmp/pids/ngx_load"
    wait_for 10 has_first_store "$(now_ms)" "fault:($dead)" "$ngx_log" ||
        fail ngx_start_store "no decision from Redis through nginx"
fi
sync_log=$tmp/sync.log
"$build/cluster_sync" "redis+cluster://$seeds?on_failure=local" 60 30 "${victim_keys[@]/#/fault:}" \
    >"$sync_log" 2>"$tmp/sync.err" &
echo $! >"$tmp/pids/sync"
wait_for 10 has_first_store "$(now_ms)" "fault:($dead)" "$sync_log" ||
    fail sync_start "no decision from Redis: $(cat "$tmp/sync.err")"
t_kill=$(now_ms)
kill -9 "$(cat "$tmp/redis-$victim/pid")"
wait_for 20 is_master "$heir" || fail promoted "$heir is not master 20 s after the kill"
t_promo=$(now_ms)
echo "# kill -9 of $victim: its replica $heir promoted $((t_promo - t_kill)) ms later"
# back_within_2s NAME WHO KEYS [FILE]: the first decision from Redis for
# KEYS after that client's outage began came within 2 s of the promotion.
back_within_2s() {
    local outage first
    outage=$(first_failure "$t_kill" "$3" "${4:-$load_log}")
    wait_for 10 has_first_store "${outage:-$t_kill}" "$3" "${4:-$load_log}"
    first=$(first_store "${outage:-$t_kill}" "$3" "${4:-$load_log}")
    if [ -z "$first" ]; then
        fail "$1" "none within 10 s of the promotion"
        return
    fi
    echo "# first decision from Redis for the dead master's keys: $((first - t_promo)) ms after the promotion ($2)"
    [ $((first - t_promo)) -le 2000 ] && ok "$1" || fail "$1" "$((first - t_promo)) ms after the promotion"
}
back_within_2s store_within_2s rateld "$dead"
back_within_2s sync_store_within_2s "synchronous API" "fault:($dead)" "$sync_log"
[ "$ngx_on" = 1 ] && back_within_2s ngx_store_within_2s "nginx module" "fault:($dead)" "$ngx_log"
echo "# decisions by the failure policy from the kill to the promotion: $(count "$t_kill" "$t_promo" '.*' 'local|error') (rateld), $(count "$t_kill" "$t_promo" '.*' 'local|error' "$sync_log") (synchronous API), $(count "$t_kill" "$t_promo" '.*' 'closed.*' "$ngx_log") (nginx module)"

# Every engine has the new map 2 s after the promotion: Redis decides all.
sleep 3
t_late=$(now_ms)
same after_all_store "$(count "$((t_promo + 2000))" "$t_late" '.*' 'local|error')" 0
same sync_after_all_store "$(count "$((t_promo + 2000))" "$t_late" '.*' 'local|error' "$sync_log")" 0
if [ "$ngx_on" = 1 ]; then
    same ngx_after_all_store "$(count "$((t_promo + 2000))" "$t_late" '.*' 'closed.*' "$ngx_log")" 0
    same ngx_after_some_store "$(($(count "$((t_promo + 2000))" "$t_late" '.*' 'store' "$ngx_log") > 0))" 1
fi
wait_for 5 ready || fail ready "/readyz: $(curl -s "$base/readyz")"
codes=""
for _ in $(seq 8); do
    codes="$codes$(ready_code) "
    sleep 0.4
done
same stays_ready "$codes" "200 200 200 200 200 200 200 200 "
changes=$(metric ratel_store_health_changes_total)
echo "# ratel_store_health_changes_total: $changes (before the kill: $changes_before)"
same health_changes "$((changes - changes_before))" 2
# The idle rateld: down while its PING met the dead master, then ready
# for good once its map had the promoted replica.
wait_for 5 ready "$idle" || fail idle_ready "/readyz: $(curl -s "$idle/readyz")"
codes=""
for _ in $(seq 5); do
    codes="$codes$(ready_code "$idle") "
    sleep 0.4
done
same idle_stays_ready "$codes" "200 200 200 200 200 "
echo "# ratel_store_health_changes_total of the idle rateld: $(metric ratel_store_health_changes_total "$idle")"
same idle_health_changes "$(metric ratel_store_health_changes_total "$idle")" 2

# A fresh CLI, its first seed dead: it reads the map from the other.
cli=$("$build/ratel" acquire --store "redis+cluster://$seeds" --rule 1000000/1m "fault:${victim_keys[0]}" 2>"$tmp/cli.err")
same cli_store "$(echo "$cli" | cut -f7)" store

kill "$(cat "$tmp/pids/load")" "$(cat "$tmp/pids/sync")" 2>/dev/null
if [ "$ngx_on" = 1 ]; then
    kill "$(cat "$tmp/pids/ngx_load")" 2>/dev/null
    nginx_stop "$tmp/ngx"
fi
if [ -n "${FAULT_KEEP:-}" ]; then
    cp "$load_log" "$sync_log" "$ngx_log" "$tmp/rateld.log" "$FAULT_KEEP/"
    echo "t_kill=$t_kill t_promo=$t_promo" >"$FAULT_KEEP/times"
fi
server_stop rateld
same rateld_exit "$stopped" 0
server_stop idle
same idle_exit "$stopped" 0
finish
