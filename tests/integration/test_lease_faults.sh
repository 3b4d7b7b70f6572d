#!/usr/bin/env bash
# test_lease_faults.sh - leased policies under faults on real servers
# (docs/leases.md, "The bound"; docs/deployment.md, "Hot keys: leased
# slices"), each fault caused for real:
#
# - Redis kill -9 under a leased load, three rateld (on_failure closed,
#   open, local): each answers from the slices it holds (source "lease")
#   after the kill, none past the slice's lifetime + margin, then its
#   failure policy; Redis restarted on its AOF: leasing resumes; what Redis
#   accounted for (sources lease, store, cache) stays within limit + bound.
# - rateld kill -9 holding slices: RATEL.INFO's used does not drop (its
#   unspent permits are stranded, never given back, never spent twice),
#   the other rateld's admissions plus the dead one's stay within the
#   limit (fixed: exactly) or limit + bound (sliding), and the permits come
#   back when the window ends (fixed) or moves on (sliding).
# - A primary with a replica and wait_replicas=1: one WAIT per write turn
#   (slices, give-backs and the requests decided by the store), not one per
#   decision (cmdstat_wait against cmdstat_ratel.slice and the decisions).
# - SIGSTOP of Redis for longer than timeout_ms while leased: no answer
#   waits past its deadline (the largest gap between answers on a load of
#   one request at a time), slices answer, then the failure policy.
#
# Loads are tests/integration/acquire_load.py (one request at a time on
# one connection, each answer logged as `UNIX_MS KEY SOURCE ALLOWED`).
# Nothing sleeps to move a limiter: the test waits for states (answers of
# a source, a key's used count); it holds a fault for a set time.
. "$(dirname "$0")/lib.sh"

require_built rateld

now_ms() { date +%s%3N; }

# rateld_lease NAME URL ON_FAILURE RULE LEASE: rateld on the Redis store at
# URL, one policy "api" of RULE leased with LEASE; its port in
# $tmp/NAME.port.
rateld_lease() { rateld_redis "$1" "$2" "$3" api "$4" "$5"; }

# load_start NAME KEY RATE: acquire_load.py on rateld NAME, answers to
# $tmp/NAME.load; load_stop NAME ends it.
load_start() {
    : >"$tmp/$1.load"
    python3 "$lib_here/acquire_load.py" "http://127.0.0.1:$(cat "$tmp/$1.port")" \
        api "$3" "$tmp/$1.load" "$2" &
    echo $! >"$tmp/$1.loadpid"
}
load_stop() {
    local pid
    pid=$(cat "$tmp/$1.loadpid")
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# answered NAME SOURCE [AFTER_MS]: whether NAME answered from SOURCE (after
# AFTER_MS).
answered() {
    awk -v s="$2" -v t="${3:-0}" '$3 == s && $1 > t { found = 1 } END { exit !found }' \
        "$tmp/$1.load"
}

# metric NAME WHAT: rateld NAME's ratel_lease_permits_total of WHAT.
metric() {
    curl -s "http://127.0.0.1:$(cat "$tmp/$1.port")/metrics" |
        awk -v m="ratel_lease_permits_total{policy=\"api\",what=\"$2\"}" '$1 == m { print $2 }'
}

# used PORT KEY: RATEL.INFO's used of the key's only rule (0: no key).
used() {
    local u
    u=$(rcli "$1" RATEL.INFO "$2" | sed -n '/^used$/{n;p;q}')
    echo "${u:-0}"
}

# cmdstat PORT COMMAND: how many times the server ran COMMAND.
cmdstat() {
    rcli "$1" INFO commandstats | tr -d '\r' |
        awk -F'[:=,]' -v c="cmdstat_$2" '$1 == c { print $3; found = 1 } END { if (!found) print 0 }'
}

# --- Redis kill -9 under a leased load ----------------------------------
# 200 a minute; slices of exactly 20 alive 1 s, spent at 10 requests a
# second by each of three rateld: a slice outlives its lifetime, so the
# end of the lease answers after the kill is the lifetime's, not the
# slice running out. Bound: min(2 x 3 x 20, 200) = 120. The whole case
# runs within a minute.
rargs=(--appendonly yes --appendfsync always)
rport=$(redis_start "${rargs[@]}") || { fail redis "did not start"; finish; exit 1; }
url="redis://127.0.0.1:$rport?timeout_ms=200"
lease='{ttl_ms: 1000, max_slice: 20, min_slice: 20, hosts: 3}'
rateld_lease kc "$url" closed 200/1m "$lease"
rateld_lease ko "$url" open 200/1m "$lease"
rateld_lease kl "$url" local 200/1m "$lease"
for h in kc ko kl; do load_start "$h" hot 10; done
all_leased() { answered kc lease && answered ko lease && answered kl lease; }
wait_for 10 all_leased || fail kill_redis_leased_before "no answers from slices"
kill_ms=$(now_ms)
kill -9 "$(cat "$tmp/redis-$rport/pid")"
policies() { answered kc closed "$kill_ms" && answered ko open "$kill_ms" &&
    answered kl local "$kill_ms"; }
wait_for 10 policies || fail kill_redis_policy "not every rateld answered by its failure policy"
restart_ms=$(now_ms)
redis_start_on "$rport" "${rargs[@]}" 2>"$tmp/restart.err" ||
    fail kill_redis_restart "$(cat "$tmp/restart.err")"
leased_again() { answered kc lease "$restart_ms" && answered ko lease "$restart_ms" &&
    answered kl lease "$restart_ms"; }
wait_for 20 leased_again
for h in kc ko kl; do load_stop "$h"; done
for h in kc ko kl; do
    case $h in kc) policy=closed ;; ko) policy=open ;; *) policy=local ;; esac
    after=$(awk -v k="$kill_ms" -v r="$restart_ms" '$1 > k && $1 < r && $3 == "lease"' "$tmp/$h.load" | wc -l)
    last=$(awk -v k="$kill_ms" -v r="$restart_ms" '$1 > k && $1 < r && $3 == "lease" { l = $1 } END { print l ? l - k : 0 }' "$tmp/$h.load")
    echo "# $h: $after answers from slices after the kill, the last $last ms after it (a slice lives 1000 ms, spent until 11 ms before its end)"
    [ "$after" -gt 0 ] && ok "${h}_lease_after_kill" || fail "${h}_lease_after_kill" "no answer from a slice after the kill"
    # The slice was taken before the kill: its end is at most 1000 ms
    # after it; 150 ms for the answer to be logged.
    [ "$last" -le 1150 ] && ok "${h}_no_lease_past_lifetime" ||
        fail "${h}_no_lease_past_lifetime" "a slice answered $last ms after the kill"
    answered "$h" "$policy" "$kill_ms" && ok "${h}_then_$policy" ||
        fail "${h}_then_$policy" "no answer by $policy after the kill"
    answered "$h" lease "$restart_ms" && ok "${h}_leases_again" ||
        fail "${h}_leases_again" "no answer from a slice after Redis came back"
done
admitted=$(cat "$tmp"/k?.load | awk '$4 == 1 && ($3 == "lease" || $3 == "store" || $3 == "cache")' | wc -l)
echo "# Redis's permits admitted by the three: $admitted (limit 200 + bound 120); decisions $(cat "$tmp"/k?.load | wc -l)"
[ "$admitted" -le 320 ] && ok kill_redis_within_bound || fail kill_redis_within_bound "$admitted admitted > 200 + 120"
for h in kc ko kl; do server_stop "$h"; done

# --- rateld kill -9 holding slices --------------------------------------
# kill_rateld NAME RULE LEASE KEY: rateld NAME-1 takes slices of KEY (a
# few requests), is killed with -9; its unspent permits stay charged.
# rateld NAME-2 then drives KEY past the limit (load file NAME-2.load).
# Sets $a_admitted (NAME-1's admitted requests), $spent (those from its
# slices) and $held.
kill_rateld() {
    local a=$1-1 b=$1-2 before after leased returned stranded
    rateld_lease "$a" "redis://127.0.0.1:$rport" closed "$2" "$3"
    rateld_lease "$b" "redis://127.0.0.1:$rport" closed "$2" "$3"
    a_admitted=0
    for _ in 1 2 3 4 5; do
        curl -s "http://127.0.0.1:$(cat "$tmp/$a.port")/v1/acquire?policy=api&key=$4" |
            grep -q '"allowed":true' && a_admitted=$((a_admitted + 1))
    done
    leased=$(metric "$a" leased) spent=$(metric "$a" spent)
    returned=$(metric "$a" returned) stranded=$(metric "$a" stranded)
    held=$((leased - spent - returned - stranded))
    before=$(used "$rport" "api:$4")
    server_stop "$a" KILL
    after=$(used "$rport" "api:$4")
    echo "# $1: rateld 1 admitted $a_admitted ($spent from slices) and held $held unspent when killed; used $before -> $after"
    [ "$held" -gt 0 ] && ok "${1}_held" || fail "${1}_held" "nothing held"
    same "${1}_stranded_not_given_back" "$after" "$before"
    load_start "$b" "$4" 40
    denied() { awk '$4 == 0' "$tmp/$b.load" | grep -q .; }
    wait_for 10 denied || fail "${1}_limit_reached" "rateld 2 was never denied"
    load_stop "$b"
    server_stop "$b"
}

# fixed: 40 a 10 s window, slices of 10; bound 0. Started early in a
# window (at most 4 s in), so the whole case runs in one window.
in_window_start() { [ $(($(now_ms) % 10000)) -lt 4000 ]; }
wait_for 11 in_window_start
kill_rateld fx "40/10s:fixed" '{ttl_ms: 5000, max_slice: 10, min_slice: 10, hosts: 2}' fx
b_admitted=$(awk '$4 == 1' "$tmp/fx-2.load" | wc -l)
echo "# fixed: rateld 2 admitted $b_admitted, rateld 1 $a_admitted and stranded $held: $((b_admitted + a_admitted + held)) of the limit 40, bound 0"
[ $((b_admitted + a_admitted + held)) -le 40 ] && ok fx_within_limit ||
    fail fx_within_limit "$b_admitted + $a_admitted admitted, $held stranded: more than 40"
window_over() { [ "$(used "$rport" api:fx)" = 0 ]; }
wait_for 12 window_over && ok fx_back_when_window_ends ||
    fail fx_back_when_window_ends "used is $(used "$rport" api:fx) after the window"

# sliding: 30 in any 3 s, slices of 10 alive 2 s; bound min(2 x 2 x 10, 30).
kill_rateld sl "30/3s" '{ttl_ms: 2000, max_slice: 10, min_slice: 10, hosts: 2}' sl
b_admitted=$(awk '$4 == 1' "$tmp/sl-2.load" | wc -l)
echo "# sliding: rateld 2 admitted $b_admitted, rateld 1 $a_admitted and stranded $held: limit 30, bound 30"
[ $((b_admitted + a_admitted)) -le 60 ] && ok sl_within_bound ||
    fail sl_within_bound "$((b_admitted + a_admitted)) admitted > 30 + 30"
moved_on() { [ "$(used "$rport" api:sl)" = 0 ]; }
wait_for 8 moved_on && ok sl_back_when_window_moves ||
    fail sl_back_when_window_moves "used is $(used "$rport" api:sl)"
redis_stop "$rport"

# --- wait_replicas=1: one WAIT per slice, not per request ---------------
primary=$(redis_start) || fail primary "did not start"
replica=$(redis_start --replicaof 127.0.0.1 "$primary") || fail replica "did not start"
linked() { rcli "$replica" INFO replication | grep -q 'master_link_status:up'; }
wait_for 20 linked || fail replica_link "the replica did not attach"
rateld_lease wr "redis://127.0.0.1:$primary?wait_replicas=1" closed 100000/1m \
    '{ttl_ms: 1000, max_slice: 50, hosts: 1}'
rcli "$primary" CONFIG RESETSTAT >/dev/null
load_start wr hot 200
enough() { [ "$(wc -l <"$tmp/wr.load")" -ge 400 ]; }
wait_for 20 enough
load_stop wr
server_stop wr
decisions=$(wc -l <"$tmp/wr.load")
lease_answers=$(awk '$3 == "lease"' "$tmp/wr.load" | wc -l)
waits=$(cmdstat "$primary" wait)
slices=$(cmdstat "$primary" ratel.slice)
unslices=$(cmdstat "$primary" ratel.unslice)
acquires=$(cmdstat "$primary" ratel.acquire)
pings=$(cmdstat "$primary" ping) # the health check waits for the replica too
echo "# wait_replicas=1: $decisions decisions ($lease_answers from slices); WAIT $waits, RATEL.SLICE $slices, RATEL.UNSLICE $unslices, RATEL.ACQUIRE $acquires, PING $pings"
[ "$slices" -gt 0 ] && [ "$lease_answers" -gt 0 ] && ok wait_leased || fail wait_leased "no slices"
[ "$waits" -ge 1 ] && [ "$waits" -le $((slices + unslices + acquires + pings)) ] && ok wait_per_write ||
    fail wait_per_write "$waits WAITs for $((slices + unslices + acquires + pings)) writes and pings"
[ $((waits * 5)) -le "$decisions" ] && ok wait_not_per_request ||
    fail wait_not_per_request "$waits WAITs for $decisions decisions"
redis_stop "$replica"
redis_stop "$primary"

# --- SIGSTOP of Redis for longer than timeout_ms ------------------------
sport=$(redis_start) || fail redis_stop_start "did not start"
rateld_lease st "redis://127.0.0.1:$sport?timeout_ms=200" closed 100000/1m \
    '{ttl_ms: 1000, max_slice: 20, min_slice: 20, hosts: 1}'
load_start st hot 20
wait_for 10 answered st lease || fail stop_leased_before "no answers from slices"
stop_ms=$(now_ms)
kill -STOP "$(cat "$tmp/redis-$sport/pid")"
wait_for 10 answered st closed "$stop_ms" || fail stop_closed "no answer by the failure policy"
sleep 1.5 # the fault held: three times the ttl past the last slice
cont_ms=$(now_ms)
kill -CONT "$(cat "$tmp/redis-$sport/pid")"
load_stop st
gap=$(awk -v a="$stop_ms" -v b="$cont_ms" '$1 >= a && $1 <= b { if (p && $1 - p > g) g = $1 - p; p = $1 } END { print g + 0 }' "$tmp/st.load")
stopped_lease=$(awk -v a="$stop_ms" -v b="$cont_ms" '$1 > a && $1 <= b && $3 == "lease"' "$tmp/st.load" | wc -l)
stopped_closed=$(awk -v a="$stop_ms" -v b="$cont_ms" '$1 > a && $1 <= b && $3 == "closed"' "$tmp/st.load" | wc -l)
errors=$(awk '$3 == "error"' "$tmp/st.load" | wc -l)
echo "# SIGSTOP $((cont_ms - stop_ms)) ms: $stopped_lease answers from slices, $stopped_closed closed, largest gap between answers $gap ms (a request every 50 ms, timeout_ms 200)"
[ "$gap" -le 500 ] && ok stop_no_wait_past_deadline ||
    fail stop_no_wait_past_deadline "an answer waited $gap ms"
[ "$stopped_lease" -gt 0 ] && ok stop_lease_answers || fail stop_lease_answers "no answer from a slice"
[ "$stopped_closed" -gt 0 ] && ok stop_then_closed || fail stop_then_closed "no closed answer"
same stop_no_errors "$errors" 0
server_stop st

finish
