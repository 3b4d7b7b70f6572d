#!/usr/bin/env bash
# Sentinel failovers under load, on one key at its limit (1,500 an hour,
# 100 acquires a second through rateld, on_failure closed): the permits
# granted past the limit, counted.
#
# - SENTINEL FAILOVER without wait_replicas: the old primary takes writes
#   between the promotion and +switch-master, which the new primary never
#   sees; what it granted then is granted again. The figure is printed
#   (docs/deployment.md, "Failover", states it).
# - SENTINEL FAILOVER with wait_replicas=2, every replica: an answer
#   counts only once every replica has the write, so the one promoted has
#   it: 0 past the limit. (With wait_replicas=1 the replica not promoted
#   may be the one that acknowledged: the old primary keeps it until
#   Sentinel moves it.)
# - kill -9 of the primary with wait_replicas=1: the dead primary takes
#   no more writes, and Sentinel promotes the replica furthest along,
#   which has every write one replica acknowledged: 0 past the limit.
#
# One primary, two replicas, three Sentinels.
. "$(dirname "$0")/lib.sh"

require_built rateld
limit=1500
rate=100

fast=(--repl-diskless-sync-delay 0)
p1=$(redis_start "${fast[@]}") || { fail redis "did not start"; finish; exit 1; }
for _ in 1 2; do
    redis_start "${fast[@]}" --replicaof 127.0.0.1 "$p1" >/dev/null ||
        { fail replica "did not start"; finish; exit 1; }
done
sentinel_addrs=
for _ in 1 2 3; do
    s=$(sentinel_start "$p1") || { fail sentinel "did not start"; finish; exit 1; }
    sentinel_addrs=$sentinel_addrs${sentinel_addrs:+,}127.0.0.1:$s
done
s1=${sentinel_addrs%%,*}
s1=${s1##*:}

# online PRIMARY N: the primary counts N replicas online (it takes a
# replica's acknowledgement only then).
online() { [ "$(rcli "$1" INFO replication | grep -c 'slave[0-9]*:.*state=online')" -ge "$2" ]; }
sentinel_wait "$s1" "$p1" 2 || fail sentinels_ready "the Sentinels never named $p1 with 2 replicas"
wait_for 20 online "$p1" 2 || fail replicas_online "$p1 has not 2 replicas online"

# rateld_on NAME WAIT_REPLICAS: rateld on the Sentinels' primary.
rateld_on() {
    rateld_redis "$1" "redis+sentinel://$sentinel_addrs/mymaster?wait_replicas=$2" \
        closed one "$limit/1h"
}

# fill NAME KEY N: N acquires of KEY, one after the other; prints how many
# were allowed.
fill() {
    local url
    url="http://127.0.0.1:$(cat "$tmp/$1.port")/v1/acquire?policy=one&key=$2"
    for _ in $(seq "$3"); do echo "url = \"$url\""; done >"$tmp/fill.cfg"
    curl -s -K "$tmp/fill.cfg" | grep -o '"allowed":true' | wc -l
}

# under_load NAME KEY FAULT...: KEY filled to 1,000, then 100 acquires a
# second while FAULT runs, and 4 s after; prints the permits granted in
# all and the decisions by the failure policy.
under_load() {
    local name=$1 key=$2 before out
    shift 2
    before=$(fill "$name" "$key" 1000)
    out=$tmp/$name-$key.load
    : >"$out"
    python3 "$lib_here/acquire_load.py" "http://127.0.0.1:$(cat "$tmp/$name.port")" \
        one "$rate" "$out" "$key" &
    echo $! >"$tmp/pids/load"
    sleep 0.5
    "$@"
    sleep 4
    kill "$(cat "$tmp/pids/load")"
    wait "$(cat "$tmp/pids/load")" 2>/dev/null
    echo "$((before + $(awk '$4 == 1' "$out" | wc -l))) $(awk '$3 == "closed"' "$out" | wc -l)"
}

# The primary now, as the Sentinels name it.
primary() { sentinel_primary "$s1"; }
moved() { [ "$(primary)" != "$1" ] && is_primary "$(primary)"; }
failover() { # SENTINEL FAILOVER to whichever replica Sentinel picks
    local old
    old=$(primary)
    wait_for 20 sentinel_failover_asked "$s1" && wait_for 20 moved "$old"
}
kill9() { # the primary, kill -9
    local old
    old=$(primary)
    kill -9 "$(cat "$tmp/redis-$old/pid")"
    wait_for 30 moved "$old"
}

rateld_on plain 0
rateld_on all 2
rateld_on one 1

read -r granted closed <<<"$(under_load plain a failover)"
echo "# SENTINEL FAILOVER, no wait_replicas: $granted granted for a limit of $limit ($((granted - limit)) past it), $closed by the failure policy"
[ "$granted" -ge "$limit" ] && ok plain_failover_counted || fail plain_failover_counted "granted $granted"

wait_for 30 online "$(primary)" 2 || fail replicas_back "$(primary) has not 2 replicas online"
read -r granted closed <<<"$(under_load all b failover)"
echo "# SENTINEL FAILOVER, wait_replicas=2 (every replica): $granted granted for a limit of $limit, $closed by the failure policy"
[ "$granted" -le "$limit" ] && ok durable_failover_none_past ||
    fail durable_failover_none_past "$((granted - limit)) past the limit"

wait_for 30 online "$(primary)" 2 || fail replicas_back "$(primary) has not 2 replicas online"
read -r granted closed <<<"$(under_load one c kill9)"
echo "# kill -9 of the primary, wait_replicas=1: $granted granted for a limit of $limit, $closed by the failure policy"
[ "$granted" -le "$limit" ] && ok durable_kill9_none_past ||
    fail durable_kill9_none_past "$((granted - limit)) past the limit"
back() { [ "$(curl -s "http://127.0.0.1:$(cat "$tmp/one.port")/v1/acquire?policy=one&key=d" | sed -n 's/.*"source":"\([a-z]*\)".*/\1/p')" = store ]; }
wait_for 20 back && ok durable_back_on_redis || fail durable_back_on_redis "no decision from Redis after the kill -9"
for name in plain all one; do server_stop "$name"; done
finish
