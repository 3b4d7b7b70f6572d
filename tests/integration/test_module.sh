#!/usr/bin/env bash
# test_module.sh - ratel.so in real redis-servers: every command and error
# path, foreign values, the policy cache, TTLs, a replica (and its
# promotion, and one attaching late or through the backlog), what reaches
# the AOF, RDB and AOF restarts, a 3-master cluster, and client processes
# racing on one key.
#
#   BUILD=build bash tests/integration/test_module.sh
#
# Time is injected with AT (instants near the present, so that keys are not
# already expired by the server's clock); nothing sleeps to move a limiter.
# Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"

now_ms() { date +%s%3N; }

# acq PORT ARGS...: RATEL.ACQUIRE's reply on one line.
acq() {
    local port=$1; shift
    rcli "$port" RATEL.ACQUIRE "$@" | tr '\n' ' ' | sed 's/ $//'
}

# info_field PORT FIELD: a field of INFO (ratel's section included).
info_field() {
    rcli "$1" INFO everything | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'
}

# wait_quiet PORT: until the module sees no replica, backlog or AOF (its
# view is refreshed by the server cron, 10 times a second).
wait_quiet() {
    for _ in $(seq 50); do
        [ "$(info_field "$1" ratel_nobody_listens)" = 1 ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_link PORT: until the replica on PORT is linked to its primary.
wait_link() {
    for _ in $(seq 100); do
        [ "$(info_field "$1" master_link_status)" = up ] && return 0
        sleep 0.1
    done
    return 1
}

# in_sync PRIMARY REPLICA: until the replica holds everything the primary
# has sent. (WAIT would not do: it waits for the writes of its own
# connection, and redis-cli opens one per command. After a diskless sync
# the stream starts at the replica's first ACK, a second or so later.)
in_sync() {
    local want
    want=$(info_field "$1" master_repl_offset)
    for _ in $(seq 100); do
        [ "$(info_field "$2" slave_repl_offset)" -ge "$want" ] 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# ------------------------------------------------------------- commands
port=$(redis_start) || { echo "0 passed, 1 failed"; exit 1; }
# A minute ahead of Redis's clock: every key written AT T expires after
# the checks that read it back, however slow the machine (with T one
# second ahead, a loaded machine saw 1/1s keys expire between calls).
T=$(($(now_ms) + 60000))

same acquire_first "$(acq "$port" sms:1 AT "$T" 1/60s 10/1d)" "1 1 0 0 86400000 0 0"
same acquire_denied "$(acq "$port" sms:1 AT $((T + 1)) 1/60s 10/1d)" "0 1 0 59999 86399999 0 0"
same acquire_retry_exact "$(acq "$port" sms:1 AT $((T + 60000)) 1/60s 10/1d)" "1 1 0 0 86400000 0 0"
same key_ttl_is_reset_time "$(rcli "$port" PEXPIRETIME sms:1)" "$((T + 60000 + 86400000))"
same peek_writes_nothing_bytes "$(rcli "$port" GET sms:1 | md5sum)" \
    "$(acq "$port" sms:1 PEEK AT $((T + 60001)) 1/60s 10/1d >/dev/null; rcli "$port" GET sms:1 | md5sum)"
info=$(rcli "$port" RATEL.INFO sms:1 AT $((T + 60000)) | tr '\n' ' ')
same info_readable "$info" "rule 1/1m algo sliding used 1 remaining 0 reset_after_ms 60000 runs 1 granularity_ms 1 rule 10/1d algo sliding used 2 remaining 8 reset_after_ms 86400000 runs 2 granularity_ms 1 "
same info_missing_key "$(rcli "$port" RATEL.INFO nothing)" ""
same cost_charges_n "$(acq "$port" c COST 3 AT "$T" 5/1s)" "1 5 2 0 1000 0 0"
same cost_denied_charges_nothing "$(acq "$port" c COST 3 AT "$T" 5/1s)" "0 5 2 1000 1000 0 0"
same refund_gives_back "$(rcli "$port" RATEL.REFUND c COST 2 AT "$T" 5/1s | tr '\n' ' ')" "1 5 4 0 1000 0 0 "
same refund_to_empty_deletes "$(rcli "$port" RATEL.REFUND c COST 9 AT "$T" 5/1s >/dev/null; rcli "$port" EXISTS c)" "0"
# --------------------------------------------------------------- leases
# rel PORT ARGS...: RATEL.RELEASE's reply on one line.
rel() {
    local port=$1; shift
    rcli "$port" RATEL.RELEASE "$@" | tr '\n' ' ' | sed 's/ $//'
}
c=2/10s:concurrent
same lease_first "$(acq "$port" cc AT "$T" $c)" "1 2 1 0 10000 0 0 1"
same lease_second "$(acq "$port" cc AT $((T + 1)) $c)" "1 2 0 0 10000 0 0 2"
same lease_full_none_taken "$(acq "$port" cc AT $((T + 2)) $c)" "0 2 0 9998 9999 0 0 0"
same lease_peek_none_taken "$(acq "$port" cc PEEK AT $((T + 2)) $c)" "0 2 0 9998 9999 0 0 0"
same release_held "$(rel "$port" cc 1 AT $((T + 3)) $c)" "1 2 1 0 9998 0 0 1"
same release_twice_not_held "$(rel "$port" cc 1 AT $((T + 4)) $c)" "1 2 1 0 9997 0 0 0"
same release_unknown "$(rel "$port" cc 77 AT $((T + 4)) $c)" "1 2 1 0 9997 0 0 0"
same renew_held "$(rel "$port" cc 2 renew AT $((T + 5)) $c)" "1 2 1 0 10000 0 0 1"
same renew_moves_expiry "$(rcli "$port" PEXPIRETIME cc)" "$((T + 5 + 10000))"
same lease_next_id "$(acq "$port" cc AT $((T + 6)) $c)" "1 2 0 0 10000 0 0 3"
info=$(rcli "$port" RATEL.INFO cc AT $((T + 6)) | tr '\n' ' ')
same lease_info "$info" "rule 2/10s:concurrent algo concurrent used 2 remaining 0 reset_after_ms 10000 last_lease 3 "
same lease_held_before_period "$(acq "$port" cc AT $((T + 10004)) $c)" "0 2 0 1 2 0 0 0"
same lease_free_at_period "$(acq "$port" cc AT $((T + 10005)) $c)" "1 2 0 0 10000 0 0 4"
same release_expired "$(rel "$port" cc 2 AT $((T + 10005)) $c)" "0 2 0 1 10000 0 0 0"
rel "$port" cc 3 AT $((T + 10005)) $c >/dev/null
same release_all_deletes "$(rel "$port" cc 4 AT $((T + 10005)) $c; echo; rcli "$port" EXISTS cc)" $'1 2 2 0 0 0 0 1\n0'
same lease_other_policies_seven "$(acq "$port" seven AT "$T" 2/10s)" "1 2 1 0 10000 0 0"
# All-or-nothing: the rate rule denies, no lease is taken; every slot
# taken, the rate rule is not charged.
same lease_with_rate "$(acq "$port" ar AT "$T" 1/1m 3/10s:concurrent)" "1 1 0 0 60000 0 0 1"
same lease_rate_denies "$(acq "$port" ar AT $((T + 1)) 1/1m 3/10s:concurrent)" "0 1 0 59999 59999 0 0 0"
contains lease_rate_denied_took_none "$(rcli "$port" RATEL.INFO ar AT $((T + 1)) | tr '\n' ' ')" \
    "algo concurrent used 1 remaining 2 reset_after_ms 9999 last_lease 1"
same lease_slots_deny "$(acq "$port" ra AT "$T" 2/1m 1/10s:concurrent; echo; acq "$port" ra AT $((T + 1)) 2/1m 1/10s:concurrent)" \
    $'1 1 0 0 60000 1 0 1\n0 1 0 9999 59999 1 0 0'
contains lease_slots_denied_charged_none "$(rcli "$port" RATEL.INFO ra AT $((T + 1)) | tr '\n' ' ')" \
    "rule 2/1m algo sliding used 1 remaining 1"
same reset_existing "$(rcli "$port" RATEL.RESET sms:1)" "1"
same reset_missing "$(rcli "$port" RATEL.RESET sms:1)" "0"
same gcra_reservation "$(acq "$port" g MAXWAIT 5000 AT "$T" 1/1s:gcra) | $(acq "$port" g MAXWAIT 5000 AT "$T" 1/1s:gcra)" \
    "1 1 0 0 1000 0 0 | 1 1 0 0 2000 0 1000"
same gcra_reservation_too_long "$(acq "$port" g MAXWAIT 1000 AT "$T" 1/1s:gcra)" "0 1 0 2000 2000 0 0"
# A peek reports the key as it is: nothing charged, 5 left.
same options_any_order_any_case "$(acq "$port" o at "$T" cost 2 peek 5/1s)" "1 5 5 0 0 0 0"
same peek_on_new_key_stores_nothing "$(rcli "$port" EXISTS o)" "0"

# Rules changed on a live key: unchanged rules keep their state.
acq "$port" conv AT "$T" 3/1m 100/1h >/dev/null
same rules_changed_keep_state "$(acq "$port" conv AT "$T" 3/1m 50/1h)" "1 3 1 0 3600000 0 0"

# Calendar windows: 23:59 and then 00:01 at +08:00 (Asia/Shanghai's
# clock, given as its offset: the module reads no tz database) are two
# days, so both are allowed; 23:59:30 is the same day as 23:59. The same
# through the Functions library, which stores the same bytes.
# 23:59 at +08:00 on the day after tomorrow there: the stored keys expire
# at local midnight by Redis's own clock, so the instant must be ahead of it.
day=86400000 east=28800000
sh=$((($(now_ms) + east) / day * day + 3 * day - east - 60000))
rcli "$port" FUNCTION LOAD REPLACE "$(cat "$build/lua/ratel.lib.lua")" >/dev/null
fcall() { rcli "$port" FCALL ratel_acquire 1 "$@" | tr '\n' ' ' | sed 's/ $//'; }
same calendar_2359 "$(acq "$port" cal:sh AT $sh 1/1d:fixed,tz=+08:00)" "1 1 0 0 60000 0 0"
same calendar_2359_30_same_day "$(acq "$port" cal:sh AT $((sh + 30000)) 1/1d:fixed,tz=+08:00)" \
    "0 1 0 30000 30000 0 0"
same calendar_0001_next_day "$(acq "$port" cal:sh AT $((sh + 120000)) 1/1d:fixed,tz=+08:00)" \
    "1 1 0 0 86340000 0 0"
same calendar_2359_fcall "$(fcall cal:lib AT $sh 1/1d:fixed,tz=+08:00)" "1 1 0 0 60000 0 0"
same calendar_2359_30_fcall "$(fcall cal:lib AT $((sh + 30000)) 1/1d:fixed,tz=+08:00)" \
    "0 1 0 30000 30000 0 0"
same calendar_0001_fcall "$(fcall cal:lib AT $((sh + 120000)) 1/1d:fixed,tz=+08:00)" \
    "1 1 0 0 86340000 0 0"
acq "$port" cal:wm AT $sh 3/1w:approx 5/1mo:fixed,tz=-03:30 10/1h >/dev/null
fcall cal:wl AT $sh 3/1w:approx 5/1mo:fixed,tz=-03:30 10/1h >/dev/null
same calendar_same_bytes_as_fcall "$(rcli "$port" GET cal:wm | md5sum)" "$(rcli "$port" GET cal:wl | md5sum)"
same calendar_info "$(rcli "$port" RATEL.INFO cal:wm AT $sh | sed -n '2p;14p')" \
    "$(printf '3/1w:approx\n5/1mo:fixed,tz=-03:30')"
contains calendar_zone_name_refused "$(rcli "$port" RATEL.ACQUIRE e 1/1d:fixed,tz=Asia/Shanghai 2>&1)" \
    "zone names need the system's time-zone database, which the Redis module and the Lua script do not read: give the offset (e.g. tz=+08:00)"

# ---------------------------------------------------------------- errors
err() { rcli "$port" "$@" 2>&1 | head -1; }
contains err_cost_zero "$(err RATEL.ACQUIRE e COST 0 1/1s)" "ERR ratel: COST must be an integer from 1 to 1000000000"
contains err_cost_text "$(err RATEL.ACQUIRE e COST x 1/1s)" "COST must be an integer"
contains err_cost_huge "$(err RATEL.ACQUIRE e COST 99999999999999999999 1/1s)" "COST must be an integer"
contains err_cost_over_rule "$(err RATEL.ACQUIRE e COST 11 10/1s)" 'COST 11 is more than rule 1 ("10/1s") can ever admit (10)'
contains err_cost_missing "$(err RATEL.ACQUIRE e COST)" "COST must be an integer"
contains err_unknown_option "$(err RATEL.ACQUIRE e FOO 1/1s)" 'unknown or repeated option "FOO"'
contains err_repeated_option "$(err RATEL.ACQUIRE e PEEK PEEK 1/1s)" 'unknown or repeated option "PEEK"'
contains err_bad_rule "$(err RATEL.ACQUIRE e 10/1x)" 'ERR ratel: rule "10/1x"'
contains err_zero_limit "$(err RATEL.ACQUIRE e 0/1s)" 'ERR ratel: rule "0/1s"'
contains err_no_rule "$(err RATEL.ACQUIRE e PEEK)" "at least one rule is needed"
contains err_nine_rules "$(err RATEL.ACQUIRE e 1/1s 2/1s 3/1s 4/1s 5/1s 6/1s 7/1s 8/1s 9/1s)" "at most 8 rules"
contains err_rule_twice "$(err RATEL.ACQUIRE e 1/1s 1/1s)" "repeats rule 1"
contains err_maxwait_sliding "$(err RATEL.ACQUIRE e MAXWAIT 10 1/1s)" "MAXWAIT needs every rule to be gcra"
contains err_maxwait_range "$(err RATEL.ACQUIRE e MAXWAIT 2592000001 1/1s:gcra)" "MAXWAIT must be an integer"
contains err_at_range "$(err RATEL.ACQUIRE e AT 9007199254741 1/1s)" "AT must be an integer"
contains err_refund_peek "$(err RATEL.REFUND e PEEK 1/1s)" 'unknown or repeated option "PEEK"'
contains err_info_extra "$(err RATEL.INFO e 1/1s)" 'options are AT unix_ms'
contains err_release_lease_zero "$(err RATEL.RELEASE e 0 1/1s:concurrent)" \
    "ERR ratel: LEASE must be an integer from 1 to 4294967295 (the lease an ACQUIRE returned)"
contains err_release_lease_text "$(err RATEL.RELEASE e abc 1/1s:concurrent)" "LEASE must be an integer"
contains err_release_lease_huge "$(err RATEL.RELEASE e 4294967296 1/1s:concurrent)" "LEASE must be an integer"
contains err_release_no_concurrent "$(err RATEL.RELEASE e 1 1/1s)" \
    "ERR ratel: RELEASE needs a policy with a concurrent rule (e.g. 10/30s:concurrent)"
contains err_release_cost "$(err RATEL.RELEASE e 1 COST 2 1/1s:concurrent)" \
    'unknown or repeated option "COST"; options are RENEW, AT unix_ms, then the rules'
contains err_release_no_rule "$(err RATEL.RELEASE e 5)" "at least one rule is needed"
contains err_release_arity "$(err RATEL.RELEASE e)" "wrong number of arguments"
contains err_two_concurrent "$(err RATEL.ACQUIRE e 1/1s:concurrent 2/1s:concurrent)" \
    "policy: rules 1 and 2 are both concurrent"
contains err_concurrent_limit "$(err RATEL.ACQUIRE e 257/1s:concurrent)" "at most 256 leases at once"
contains err_arity "$(err RATEL.ACQUIRE e)" "wrong number of arguments"
contains err_arity_reset "$(err RATEL.RESET a b)" "wrong number of arguments"
rcli "$port" LPUSH list x >/dev/null
contains err_wrongtype "$(err RATEL.ACQUIRE list 1/1s)" "WRONGTYPE"
contains err_wrongtype_info "$(err RATEL.INFO list)" "WRONGTYPE"
rcli "$port" SET str hello >/dev/null
contains err_not_state "$(err RATEL.ACQUIRE str 1/1s)" "ERR ratel: key holds a value that is not ratel state"
same err_not_state_untouched "$(rcli "$port" GET str)" "hello"
rcli "$port" SET ver "$(printf 'RT\x09\x01')" >/dev/null
contains err_version "$(err RATEL.ACQUIRE ver 1/1s)" "unknown version"
same errors_wrote_nothing "$(rcli "$port" EXISTS e)" "0"
# A rule holding a NUL byte is named by the core's text (redis-cli
# unescapes \x00 in a quoted argument read from stdin).
contains err_rule_nul "$(printf 'RATEL.ACQUIRE e "1/1s\\x00"\n' | rcli "$port" 2>&1 | head -1)" \
    'ERR ratel: rule "1/1s\x00": unexpected "\x00"'

# --------------------------------------------------------------- slices
via=module
sl() { rcli "$port" RATEL.SLICE "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'; }
us() { rcli "$port" RATEL.UNSLICE "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//'; }
. "$(dirname "$0")/slice_cases.sh"
slice_cases
same slice_arity "$(rcli "$port" RATEL.SLICE k k 5 2>&1)" \
    "ERR wrong number of arguments for 'ratel.slice' command"
same slice_getkeys "$(rcli "$port" COMMAND GETKEYS RATEL.SLICE '{u}k' '{u}d' 5 TTL 9 1/1s | tr '\n' ' ')" "{u}k {u}d "

# ------------------------------------------------------- foreign values
# Every command refuses a key that is not ratel state - RESET included -
# and leaves it as it was; an empty string is foreign too (a ratel key
# with no state does not exist).
contains reset_wrongtype "$(err RATEL.RESET list)" "WRONGTYPE"
same reset_wrongtype_untouched "$(rcli "$port" LRANGE list 0 -1)" "x"
contains reset_not_state "$(err RATEL.RESET str)" "ERR ratel: key holds a value that is not ratel state"
same reset_not_state_untouched "$(rcli "$port" GET str)" "hello"
contains reset_version "$(err RATEL.RESET ver)" "ERR ratel: key holds ratel state of an unknown version"
same reset_version_untouched "$(rcli "$port" STRLEN ver)" "4"
rcli "$port" SET empty "" >/dev/null
for c in "RATEL.ACQUIRE empty 1/1s" "RATEL.ACQUIRE empty PEEK 1/1s" \
    "RATEL.REFUND empty 1/1s" "RATEL.INFO empty" "RATEL.RESET empty"; do
    # shellcheck disable=SC2086 # $c is a command line, a word each
    contains "empty_string_refused_${c// /_}" "$(err $c)" "ERR ratel: key holds a value that is not ratel state"
done
same empty_string_untouched "$(rcli "$port" EXISTS empty) $(rcli "$port" STRLEN empty)" "1 0"
acq "$port" st AT "$T" 5/1m >/dev/null
same reset_state_then_missing "$(rcli "$port" RATEL.RESET st) $(rcli "$port" RATEL.RESET st) $(rcli "$port" EXISTS st)" "1 0 0"

# ---------------------------------------------------------- policy cache
# Rule lists are parsed once and kept (256 of them): a repeated list is a
# hit, answers exactly as parsing would, and errors are never kept.
hits=$(info_field "$port" ratel_policy_cache_hits)
acq "$port" pc AT "$T" 3/1m 9/1h >/dev/null
same cache_hit_same_reply "$(acq "$port" pc AT "$T" 3/1m 9/1h)" "1 3 1 0 3600000 0 0"
same cache_hit_counted "$(($(info_field "$port" ratel_policy_cache_hits) - hits))" "1"
contains cache_hit_cost_still_checked "$(err RATEL.ACQUIRE pc COST 4 3/1m 9/1h)" 'COST 4 is more than rule 1 ("3/1m") can ever admit (3)'
contains cache_hit_maxwait_still_checked "$(err RATEL.ACQUIRE pc MAXWAIT 5 3/1m 9/1h)" "MAXWAIT needs every rule to be gcra"
# The same bytes split differently are another list.
contains cache_key_split "$(err RATEL.ACQUIRE pc "3/1m 9/1h")" 'ERR ratel: rule "3/1m 9/1h"'
entries=$(info_field "$port" ratel_policy_cache_entries)
err RATEL.ACQUIRE pc 10/1x >/dev/null
contains cache_error_again "$(err RATEL.ACQUIRE pc 10/1x)" 'ERR ratel: rule "10/1x"'
same cache_errors_not_kept "$(info_field "$port" ratel_policy_cache_entries)" "$entries"
# 300 lists, twice over: the cache stays bounded and every reply is what
# the rule says, hit or evicted.
for round in 1 2; do
    for n in $(seq 1 300); do
        echo "RATEL.ACQUIRE pcl:$n AT $T $((n + 1))/1m"
    done | rcli "$port" | awk 'NR % 7 == 3' >"$tmp/cache.$round"
done
same cache_evicts_and_still_answers "$(paste -sd' ' "$tmp/cache.1") / $(paste -sd' ' "$tmp/cache.2")" \
    "$(seq 1 300 | paste -sd' ') / $(seq 0 299 | paste -sd' ')"
# (4-way sets: some may hold fewer than 4 when others overflow.)
entries=$(info_field "$port" ratel_policy_cache_entries)
same cache_bounded "$((entries >= 128 && entries <= 256))" "1"
same server_alive "$(rcli "$port" PING)" "PONG"

# ------------------------------------------ replica, promotion, persistence
# Writes reach replicas and the AOF as SET key blob PXAT t / DEL key, never
# as RATEL.* (a replica must not decide with its own clock). With no AOF,
# no replica and no backlog the module builds no effect at all; every case
# must end with the same bytes and expiries.

# traffic PORT T PREFIX: every algorithm, admitted, denied and refunded,
# on keys PREFIX:0..4; prints the replies.
traffic() {
    local i=0 rule t
    # (fixed: a day, so that no window ends while the test runs and takes
    # the key with it.)
    for rule in "5/1m" "5/1d:fixed" "5/1m:approx" "5/1m:gcra" "3/1m 7/1h"; do
        for t in 0 10 20 30 40 50 60; do
            # shellcheck disable=SC2086 # $rule may be two rules, a word each
            acq "$1" "$3:$i" AT $(($2 + t)) $rule
        done
        # shellcheck disable=SC2086 # $rule may be two rules, a word each
        rcli "$1" RATEL.REFUND "$3:$i" AT $(($2 + 70)) $rule | tr '\n' ' '
        echo
        i=$((i + 1))
    done
    rcli "$1" RATEL.RESET "$3:4" >/dev/null
    acq "$1" "$3:4" AT $(($2 + 80)) 3/1m 7/1h
    # Leases: taken, released, renewed, released to nothing (DEL).
    for t in 0 10 20; do
        acq "$1" "$3:5" AT $(($2 + t)) 2/1m:concurrent 5/1h
    done
    rcli "$1" RATEL.RELEASE "$3:5" 1 AT $(($2 + 30)) 2/1m:concurrent 5/1h | tr '\n' ' '
    rcli "$1" RATEL.RELEASE "$3:5" 2 RENEW AT $(($2 + 40)) 2/1m:concurrent 5/1h | tr '\n' ' '
    acq "$1" "$3:6" AT "$2" 1/1m:concurrent
    rcli "$1" RATEL.RELEASE "$3:6" 1 AT $(($2 + 50)) 1/1m:concurrent | tr '\n' ' '
    # Slices: both keys written (the holder's demand beside the key, for
    # two hours), then some given back.
    rcli "$1" RATEL.SLICE "$3:7" "$3:8" 3 TTL 3600000 HOLDER 9 AT "$2" 5/1m | tr '\n' ' '
    rcli "$1" RATEL.UNSLICE "$3:7" 1 UNTIL $(($2 + 500)) AT $(($2 + 60)) 5/1m | tr '\n' ' '
}
state_of() { # PORT [PREFIX]: every PREFIX:* key's bytes and expiry, sorted
    local k
    for k in $(rcli "$1" --scan --pattern "${2:-rep}:*" | sort); do
        echo "$k $(rcli "$1" GET "$k" | od -An -tx1 | tr -d ' \n') $(rcli "$1" PEXPIRETIME "$k")"
    done
}
ratel_commands() { # PORT: how many RATEL.* commands the server ran
    rcli "$1" INFO commandstats | grep -c '^cmdstat_ratel'
}

primary=$(redis_start --appendonly yes --appendfsync always --repl-diskless-sync-delay 0) || exit 1
replica=$(redis_start --replicaof 127.0.0.1 "$primary") || exit 1
wait_link "$replica" || fail replica_link "no link to $primary"
T=$(($(now_ms) + 1000))
traffic "$primary" "$T" rep >"$tmp/replies.primary"
in_sync "$primary" "$replica" || fail replica_in_sync "not after 10 s"
want=$(state_of "$primary")
same replica_same_bytes_and_ttl "$(state_of "$replica")" "$want"
same replica_ran_no_ratel_command "$(ratel_commands "$replica")" "0"
same replica_info_equal "$(rcli "$replica" RATEL.INFO rep:4 AT $((T + 80)) | md5sum)" \
    "$(rcli "$primary" RATEL.INFO rep:4 AT $((T + 80)) | md5sum)"
aof=$(cat "$tmp/redis-$primary"/appendonlydir/*.incr.aof | tr -d '\r\0')
contains aof_holds_set_pxat "$aof" $'SET\n$5\nrep:0\n'
contains aof_holds_expiry "$aof" $'PXAT\n$13\n'"$(rcli "$primary" PEXPIRETIME rep:0)"
contains aof_holds_del "$aof" $'DEL\n$5\nrep:4'
contains aof_holds_lease_del "$aof" $'DEL\n$5\nrep:6'
contains aof_holds_demand_set "$aof" $'SET\n$5\nrep:8\n'
same aof_holds_no_ratel_command "$(grep -ci 'ratel\.' <<<"$aof")" "0"

# The same traffic where nobody listens: the same replies, bytes and
# expiries; no effect built, but every write counted for the save points.
quiet=$(redis_start --repl-diskless-sync-delay 0) || exit 1
wait_quiet "$quiet" || fail quiet_detected "ratel_nobody_listens stays 0"
changes=$(info_field "$quiet" rdb_changes_since_last_save)
traffic "$quiet" "$T" rep >"$tmp/replies.quiet"
same quiet_same_replies "$(cat "$tmp/replies.quiet")" "$(cat "$tmp/replies.primary")"
same quiet_same_bytes_and_ttl "$(state_of "$quiet")" "$want"
same quiet_builds_no_effect "$(info_field "$quiet" ratel_writes_propagated)" "0"
same quiet_counts_changes "$(($(info_field "$quiet" rdb_changes_since_last_save) - changes))" \
    "$(info_field "$quiet" ratel_writes_unobserved)"
# A replica attaching later gets those keys and every write after it.
late=$(redis_start --replicaof 127.0.0.1 "$quiet") || exit 1
wait_link "$late" || fail late_link "no link to $quiet"
same late_replica_ends_quiet "$(info_field "$quiet" ratel_nobody_listens)" "0"
traffic "$quiet" $((T + 100)) late >/dev/null
in_sync "$quiet" "$late" || fail late_in_sync "not after 10 s"
same late_replica_same_bytes_and_ttl "$(state_of "$late"; state_of "$late" late)" \
    "$(state_of "$quiet"; state_of "$quiet" late)"
# A replica gone leaves the backlog behind: writes still go there, and
# the replica restarted from its RDB catches up from it (a partial resync).
late_pid=$(cat "$tmp/redis-$late/pid")
rcli "$late" SHUTDOWN SAVE >/dev/null 2>&1
for _ in $(seq 100); do kill -0 "$late_pid" 2>/dev/null || break; sleep 0.1; done
sleep 0.3 # server crons run meanwhile: the backlog keeps the module writing
same backlog_keeps_effects "$(info_field "$quiet" ratel_nobody_listens) $(info_field "$quiet" connected_slaves)" "0 0"
traffic "$quiet" $((T + 200)) gap >/dev/null
redis_start_on "$late" --replicaof 127.0.0.1 "$quiet" || exit 1
wait_link "$late" || fail gap_link "no link to $quiet"
in_sync "$quiet" "$late" || fail gap_in_sync "not after 10 s"
contains gap_partial_resync "$(cat "$tmp/redis-$quiet/log")" "Partial resynchronization request from"
same gap_writes_reached_replica "$(state_of "$late" gap)" "$(state_of "$quiet" gap)"
same gap_replica_ran_no_ratel_command "$(ratel_commands "$late")" "0"
# AOF switched on at run time: the next write is in it.
aofq=$(redis_start) || exit 1
wait_quiet "$aofq" || fail aofq_quiet "ratel_nobody_listens stays 0"
rcli "$aofq" CONFIG SET appendonly yes >/dev/null
acq "$aofq" aofon AT "$T" 5/1m >/dev/null
for _ in $(seq 100); do
    [ "$(info_field "$aofq" aof_rewrite_in_progress)$(info_field "$aofq" aof_rewrite_scheduled)" = 00 ] &&
        [ -n "$(ls "$tmp/redis-$aofq"/appendonlydir/*.incr.aof 2>/dev/null)" ] && break
    sleep 0.1
done
contains aof_config_set_gets_write "$(cat "$tmp/redis-$aofq"/appendonlydir/*.incr.aof | tr -d '\r\0')" \
    $'SET\n$5\naofon\n'
# Promote the replica: the limit continues, no fresh burst (rep:0 holds 4 of
# 5 after the refund: one more fits, then nothing).
rcli "$replica" REPLICAOF NO ONE >/dev/null
same promoted_replica_continues "$(acq "$replica" rep:0 AT $((T + 80)) 5/1m | cut -d' ' -f1) $(acq "$replica" rep:0 AT $((T + 80)) 5/1m | cut -d' ' -f1)" "1 0"
# Restart from the AOF.
redis_stop "$primary"
redis_start_on "$primary" --appendonly yes || exit 1
same aof_restart_same_state "$(state_of "$primary")" "$want"
same aof_restart_continues "$(acq "$primary" rep:0 AT $((T + 80)) 5/1m | cut -d' ' -f1) $(acq "$primary" rep:0 AT $((T + 80)) 5/1m | cut -d' ' -f1)" "1 0"
# Restart from an RDB snapshot.
rdb=$(redis_start) || exit 1
for t in 0 1 2; do acq "$rdb" snap AT $((T + t)) 3/1m >/dev/null; done
before=$(rcli "$rdb" GET snap | od -An -tx1)
rcli "$rdb" SAVE >/dev/null
redis_stop "$rdb"
redis_start_on "$rdb" || exit 1
same rdb_restart_same_bytes "$(rcli "$rdb" GET snap | od -An -tx1)" "$before"
same rdb_restart_still_denies "$(acq "$rdb" snap AT $((T + 3)) 3/1m | cut -d' ' -f1)" "0"

# ------------------------------------------------------------ conformance
# Four backends on the same random traces - the core in-process, the
# module, the Lua Functions library and the Lua EVAL script (build/lua):
# identical replies, stored bytes and expiry after every operation,
# and keys written by one continued by the others (tests/integration/
# conform.c). CONFORM_TRACES / CONFORM_SEED change the run.
out=$("$build/conform" -p "$port" -n "${CONFORM_TRACES:-200}" -s "${CONFORM_SEED:-1}" \
    --backends core,eval,lib,module --lua "$build/lua" 2>&1)
line=$(printf '%s\n' "$out" | tail -1)
printf '%s\n' "$out" | grep '^# ' # how many operations, SLICE and UNSLICE
if [[ $line == *" passed, 0 failed" ]]; then
    ok "conform_core_module_lib_eval ($line)"
else
    fail conform_core_module_lib_eval "$(printf '%s\n' "$out" | tail -15 | tr '\n' ' ')"
fi

# ------------------------------------------- random argument vectors
# 3,000 commands assembled from options, numbers, rules and hostile bytes
# (quoted for redis-cli, which unescapes \xNN): the server must survive and
# answer each with a decision or a one-line error. tests/fuzz/
# fuzz_module_args.c fuzzes the same parser in-process.
# shellcheck disable=SC2054 # a rule's options: one token, commas and all
tokens=(COST PEEK MAXWAIT AT cost peek 0 1 2 10 -1 99999999999999999999 "$T"
    1/1s 10/1m 3/1h:fixed 5/1s:approx 2/1s:gcra 2/1s:gcra,burst=9 0/1s 1/0s
    10/1x "10/1s:\x07cra" "\r\n" "\x00" '""' "1/1s 1/1s" FOO 1e3 " ")
cmds=(RATEL.ACQUIRE RATEL.REFUND RATEL.INFO RATEL.RESET)
for i in $(seq 3000); do
    line="${cmds[RANDOM % 4]} fz:$((RANDOM % 50))"
    for _ in $(seq $((RANDOM % 7))); do
        line="$line \"${tokens[RANDOM % ${#tokens[@]}]}\""
    done
    echo "$line"
done >"$tmp/fuzz.cmds"
rcli "$port" <"$tmp/fuzz.cmds" >"$tmp/fuzz.out" 2>&1
same random_vectors_server_alive "$(rcli "$port" PING)" "PONG"
same random_vectors_no_protocol_break "$(grep -c 'Error: Protocol error\|Connection reset' "$tmp/fuzz.out")" "0"
contains random_vectors_got_errors "$(cat "$tmp/fuzz.out")" "ERR ratel:"

# ----------------------------------------------------------- concurrency
# Four client processes race 100 requests each on one key at one instant:
# exactly LIMIT are admitted, whatever the interleaving.
T=$(($(now_ms) + 1000))
racers=()
for c in 1 2 3 4; do
    (for _ in $(seq 100); do echo "RATEL.ACQUIRE race AT $T 37/1m"; done |
        rcli "$port" >"$tmp/race.$c") &
    racers+=($!)
done
wait "${racers[@]}" # not a bare wait: restarted servers are children too
admitted=$(cat "$tmp"/race.* | awk 'NR % 7 == 1' | grep -c '^1$')
same racing_clients_admit_exactly_limit "$admitted" "37"

# --------------------------------------------------------------- cluster
# Every node sees the whole slot map before keys are routed.
read -r -a ports <<<"$(cluster_start 3 0 2>"$tmp/cluster.err")"
if [ "${#ports[@]}" = 3 ]; then
    T=$(($(now_ms) + 1000))
    bad="" nodes=""
    for k in $(seq 0 299); do
        r=$(redis-cli -c -p "${ports[0]}" RATEL.ACQUIRE "user:$k" AT "$T" 1/1m | head -1)
        r2=$(redis-cli -c -p "${ports[1]}" RATEL.ACQUIRE "user:$k" AT "$T" 1/1m | head -1)
        [ "$r" = 1 ] && [ "$r2" = 0 ] || bad="$bad user:$k($r,$r2)"
    done
    same cluster_every_slot_range "$bad" ""
    for p in "${ports[@]}"; do
        nodes="$nodes $(rcli "$p" DBSIZE)"
    done
    # 300 keys spread over the three masters: each holds some.
    same cluster_keys_on_every_master "$(echo "$nodes" | awk '{print ($1 > 0 && $2 > 0 && $3 > 0)}')" "1"
    contains cluster_crossslot_single_key "$(redis-cli -p "${ports[0]}" COMMAND GETKEYS RATEL.ACQUIRE k1 1/1s)" "k1"
    # A slice's demand key in another slot: Redis refuses both keys.
    contains cluster_slice_crossslot "$(redis-cli -c -p "${ports[0]}" RATEL.SLICE user:1 user:2 5 TTL 250 1/1s 2>&1)" "CROSSSLOT"
    same cluster_slice_one_slot "$(redis-cli -c -p "${ports[0]}" RATEL.SLICE '{user:1}' '{user:1}:demand' 5 TTL 250 HOLDER 1 AT "$T" 10/1m | head -1)" "5"
else
    fail cluster_create "$(tail -5 "$tmp/cluster.err")"
fi

finish
