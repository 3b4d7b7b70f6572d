#!/usr/bin/env bash
# test_lua.sh - the Lua artefacts (build/lua/ratel.eval.lua for EVAL and
# build/lua/ratel.lib.lua for FUNCTION LOAD) on a real redis-server:
# replies, errors, stored bytes and expiry, each case through both, then
# build/conform comparing them with the core on random traces. Time is
# injected with AT; nothing sleeps.
#
#   bash tests/integration/test_lua.sh        (needs make lua, build/conform)
#
# The module is loaded when it is built (lib.sh), but nothing here needs it.
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -e "${RATEL_MODULE:-${BUILD:-build}/ratel.so}" ] &&
   [ ! -e "$here/../../${BUILD:-build}/ratel.so" ]; then
    export RATEL_NO_MODULE=1
fi
. "$here/lib.sh"

lua=$build/lua
port=$(redis_start) || { echo "0 passed, 1 failed"; exit 1; }

# The artefacts come from lua/*.lua with a POSIX shell alone.
sh "$root/scripts/lua-build.sh" "$tmp/lua"
same "artefacts rebuilt by sh alike" \
    "$(cmp "$tmp/lua/ratel.lib.lua" "$lua/ratel.lib.lua" && cmp "$tmp/lua/ratel.eval.lua" "$lua/ratel.eval.lua" && echo same)" same
same "library starts with its shebang" "$(head -1 "$lua/ratel.lib.lua")" '#!lua name=ratel'

sha=$(rcli "$port" SCRIPT LOAD "$(cat "$lua/ratel.eval.lua")")
same "script loads" "${#sha}" 40
same "library loads" "$(rcli "$port" FUNCTION LOAD REPLACE "$(cat "$lua/ratel.lib.lua")")" ratel

# joined: the words of its input on one line (what `echo $(...)` would
# print, without globbing them).
joined() { local w; read -r -d '' -a w; echo "${w[*]}"; }

# ev KEY OP ARGS...: the reply through the artefact under test ($via: eval
# or lib), its elements on one line.
ev() {
    local key=$1 op=$2; shift 2
    if [ "$via" = eval ]; then
        rcli "$port" EVALSHA "$sha" 1 "$key" "$op" "$@" 2>&1 | joined
    else
        rcli "$port" FCALL "ratel_${op,,}" 1 "$key" "$@" 2>&1 | joined
    fi
}
hex() { rcli "$port" --raw GET "$1" | head -c -1 | od -An -tx1 | tr -d ' \n'; }

# sl KEY DEMAND ARGS... and us KEY ARGS...: SLICE's and UNSLICE's replies
# through $via, for the cases of slice_cases.sh.
sl() {
    local key=$1 demand=$2; shift 2
    if [ "$via" = eval ]; then
        rcli "$port" EVALSHA "$sha" 2 "$key" "$demand" SLICE "$@" 2>&1 | joined
    else
        rcli "$port" FCALL ratel_slice 2 "$key" "$demand" "$@" 2>&1 | joined
    fi
}
us() { ev "$1" UNSLICE "${@:2}"; }
. "$here/slice_cases.sh"

# The cases, run once through each artefact on an empty database.
cases() {
# Traces start far in the future so no key expires while the test runs.
t=4102444800000 # 2100-01-01

# ------------------------------------------------------------- decisions

# The sms example of docs/commands.md: 1 per minute and 10 per day.
same "$via: sms first" "$(ev sms ACQUIRE AT $t 1/60s 10/1d)" \
    "1 1 0 0 86400000 0 0"
same "$via: sms again 2 ms later" "$(ev sms ACQUIRE AT $((t + 2)) 1/60s 10/1d)" \
    "0 1 0 59998 86399998 0 0"
same "$via: sms after a minute" "$(ev sms ACQUIRE AT $((t + 60000)) 1/60s 10/1d)" \
    "1 1 0 0 86400000 0 0"
same "$via: sms ttl" "$(rcli "$port" PEXPIRETIME sms)" "$((t + 60000 + 86400000))"

# The layout of docs/state-format.md: "RT", version 1, one rule; sliding,
# shift 0, limit 2, period 1000; base_ms = t; one run, total 1; (0, 1).
ev fmt2 ACQUIRE AT $t 2/1s >/dev/null
same "$via: blob bytes" "$(hex fmt2)" \
    "52540101000002000000e803000000d8c32cbb0300000100010000000000000001000000"
same "$via: blob ttl" "$(rcli "$port" PEXPIRETIME fmt2)" "$((t + 1000))"

same "$via: peek writes nothing" "$({ ev pk ACQUIRE PEEK AT $t 1/1s; rcli "$port" EXISTS pk; } | joined)" \
    "1 1 1 0 0 0 0 0"
ev den ACQUIRE AT $t 1/1m >/dev/null
before=$(hex den)
same "$via: denied" "$(ev den ACQUIRE AT $((t + 1)) 1/1m)" "0 1 0 59999 59999 0 0"
same "$via: denied writes nothing" "$(hex den)" "$before"
same "$via: case-insensitive op and options" \
    "$(ev ci acquire cost 2 peek at $t 5/1s)" "1 5 5 0 0 0 0"
same "$via: fixed" "$(ev fx ACQUIRE COST 3 AT $((t + 500)) 5/1s:fixed)" \
    "1 5 2 0 500 0 0"
same "$via: approx" "$(ev ap ACQUIRE AT $t 5/1s:approx)" "1 5 4 0 2000 0 0"
same "$via: gcra" "$(ev gc ACQUIRE AT $t 10/1s:gcra,burst=2)" "1 10 1 0 100 0 0"
same "$via: gcra reservation" \
    "$({ ev gr ACQUIRE COST 2 AT $t 1/1s:gcra,burst=2; ev gr ACQUIRE MAXWAIT 1500 AT $t 1/1s:gcra,burst=2; } | joined)" \
    "1 1 0 0 2000 0 0 1 1 0 0 3000 0 1000"
same "$via: gcra 1e9/30d" "$(ev big ACQUIRE COST 999999999 AT $t 1000000000/30d:gcra)" \
    "1 1000000000 1 0 2591999998 0 0"
# One permit every 2.592 us: two need one more, 3 ms rounded up.
same "$via: gcra 1e9/30d again" \
    "$(ev big ACQUIRE COST 2 AT $t 1000000000/30d:gcra)" \
    "0 1000000000 1 3 2591999998 0 0"
# 1e8/1m: tau = 6e15 units of 1/LIMIT us, past 2^52; the fast path
# computes it in doubles as long as each value stays below 2^53.
same "$via: gcra 1e8/1m" "$({ ev g8 ACQUIRE COST 99999999 AT $t 100000000/1m:gcra; \
    ev g8 ACQUIRE COST 2 AT $t 100000000/1m:gcra; \
    ev g8 ACQUIRE COST 2 MAXWAIT 1 AT $t 100000000/1m:gcra; } | joined)" \
    "1 100000000 1 0 60000 0 0 0 100000000 1 1 60000 0 0 1 100000000 0 0 60001 0 1"
same "$via: gcra 1e8/1m bytes" "$(hex g8) $(rcli "$port" PEXPIRETIME g8)" \
    "52540101030000e1f50560ea000000e1f505004797e026930e0000879303 $((t + 60001))"
# The newest permit goes back: 10/1d keeps the one at t.
same "$via: refund" "$(ev sms REFUND AT $((t + 60001)) 1/60s 10/1d)" \
    "1 1 1 0 86339999 0 0"
same "$via: refund of everything deletes" \
    "$({ ev gc REFUND COST 5 AT $t 10/1s:gcra,burst=2; rcli "$port" EXISTS gc; } | joined)" \
    "1 10 2 0 0 0 0 0"
same "$via: info" "$(ev sms INFO AT $((t + 60001)))" \
    "rule 1/1m algo sliding used 0 remaining 1 reset_after_ms 0 runs 0 granularity_ms 1 rule 10/1d algo sliding used 1 remaining 9 reset_after_ms 86339999 runs 1 granularity_ms 1"
same "$via: info of a missing key" "$(ev nokey INFO)" ""
same "$via: reset" "$({ ev sms RESET; ev sms RESET; rcli "$port" EXISTS sms; } | joined)" "1 0 0"
# Rules changed: the old key's counts carry over to the same algorithm
# and period, and a denial still writes the converted state.
ev cv ACQUIRE COST 3 AT $t 3/1m >/dev/null
same "$via: converted on denial" "$(ev cv ACQUIRE AT $((t + 1)) 2/1m 5/1h)" \
    "0 2 0 59999 59999 0 0"
same "$via: converted bytes stored" "$(ev cv INFO AT $((t + 1)) | cut -d' ' -f1-4)" \
    "rule 2/1m algo sliding"
same "$via: ttl from the server clock" \
    "$(ev now ACQUIRE 1/1h >/dev/null; r=$(rcli "$port" PTTL now); [ "$r" -gt 3599000 ] && [ "$r" -le 3600000 ] && echo ok)" "ok"

# ------------------------------------------------------------ calendars

# 2100-01-01 00:00 UTC is a Friday: 08:00 at +08:00, and 20:30 on the
# 31st at -03:30.
same "$via: a day at +08:00" "$(ev cd ACQUIRE AT $t 10/1d:fixed,tz=+08:00)" \
    "1 10 9 0 57600000 0 0"
# fixed, flag 0x80, limit 10, 1d, window start t - 8h, count 1; the
# calendar: tz (bit 0), no months, 28800 s east.
same "$via: a day at +08:00, bytes" "$(hex cd) $(rcli "$port" PEXPIRETIME cd)" \
    "5254010101800a000000005c260500640c2bbb03000001000000010080700000 $((t + 57600000))"
same "$via: a day at +08:00, info" "$(ev cd INFO AT $t)" \
    "rule 10/1d:fixed,tz=+08:00 algo fixed used 1 remaining 9 reset_after_ms 57600000 window_start_ms $((t - 28800000))"
# 23:59 and then 00:01 at +08:00 are two days, two windows.
same "$via: 23:59 at +08:00" "$(ev sh ACQUIRE AT $((t + 57540000)) 1/1d:fixed,tz=+08:00)" \
    "1 1 0 0 60000 0 0"
same "$via: 00:01 at +08:00" "$(ev sh ACQUIRE AT $((t + 57660000)) 1/1d:fixed,tz=+08:00)" \
    "1 1 0 0 86340000 0 0"
# Weeks start on Monday 00:00, three days after that Friday.
same "$via: a week from Monday" "$(ev wk1 ACQUIRE AT $t 1/w:fixed)" "1 1 0 0 259200000 0 0"
same "$via: a week, denied until Monday" "$(ev wk1 ACQUIRE AT $((t + 1000)) 1/1w:fixed)" \
    "0 1 0 259199000 259199000 0 0"
same "$via: two weeks of approx" "$({ ev wk2 ACQUIRE AT $t 3/2w:approx; ev wk2 INFO AT $t; } | joined)" \
    "1 3 2 0 2073600000 0 0 rule 3/2w:approx algo approx used 1 remaining 2 reset_after_ms 2073600000 window_start_ms 4102099200000"
# A month at -03:30 (December 2099 there): approx counts it until the end
# of January's window, 2100-02-01 03:30 UTC.
same "$via: a month at -03:30" "$({ ev mo ACQUIRE AT $t 2/1mo:approx,tz=-03:30; hex mo; } | joined)" \
    "1 2 1 0 2691000000 0 0 5254010102800200000000000000c0f6de8dba03000001000000000000000501c8ceffff"
# The leap day of 2028: February has 29 days, March 31.
l=1835438400000 # 2028-02-29 12:00 UTC
same "$via: leap day" "$(ev lp ACQUIRE AT $l 1/1mo:fixed)" "1 1 0 0 43200000 0 0"
same "$via: leap day, last ms" "$(ev lp ACQUIRE AT $((l + 43199999)) 1/1mo:fixed)" "0 1 0 1 1 0 0"
same "$via: leap day, March" "$(ev lp ACQUIRE AT $((l + 43200000)) 1/1mo:fixed)" \
    "1 1 0 0 2678400000 0 0"
same "$via: tz=UTC reads +00:00" "$({ ev ut ACQUIRE AT $t 5/12mo:fixed,tz=UTC; ev ut INFO AT $t; } | joined)" \
    "1 5 4 0 31536000000 0 0 rule 5/12mo:fixed,tz=+00:00 algo fixed used 1 remaining 4 reset_after_ms 31536000000 window_start_ms $t"
# Another calendar is another rule: its counts start afresh; a new limit
# on the same calendar keeps them.
same "$via: calendar conversion" "$({ ev cnv ACQUIRE AT $t 10/1d:fixed
    ev cnv ACQUIRE AT $t 10/1d:fixed,tz=+08:00
    ev cnv ACQUIRE AT $t 5/1d:fixed,tz=+08:00; } | joined)" \
    "1 10 9 0 86400000 0 0 1 10 9 0 57600000 0 0 1 5 3 0 57600000 0 0"

# --------------------------------------------------------------- errors

E='ERR ratel:'
G='expected LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE], e.g. 10/1m, 1000/1d:fixed,tz=+08:00 or 100/1s:gcra,burst=200'
same "$via: release lease 0" "$(ev e RELEASE 0 1/1s:concurrent)" \
    "$E LEASE must be an integer from 1 to 4294967295 (the lease an ACQUIRE returned), not \"0\""
same "$via: release no concurrent rule" "$(ev e RELEASE 1 1/1s)" \
    "$E RELEASE needs a policy with a concurrent rule (e.g. 10/30s:concurrent)"
same "$via: release COST" "$(ev e RELEASE 1 COST 2 1/1s:concurrent)" \
    "$E unknown or repeated option \"COST\"; options are RENEW, AT unix_ms, then the rules"
same "$via: two concurrent rules" "$(ev e ACQUIRE 1/1s:concurrent 2/1s:concurrent)" \
    "$E policy: rules 1 and 2 are both concurrent; a policy holds at most one (a decision carries one lease)"
same "$via: 257 leases" "$(ev e ACQUIRE 257/1s:concurrent)" \
    "$E rule \"257/1s:concurrent\": a concurrent rule holds at most 256 leases at once (its state keeps each one); $G"
same "$via: bad rule" "$(ev e ACQUIRE 10/1x)" \
    "$E rule \"10/1x\": PERIOD needs a unit: ms, s, m, h, d, w or mo; $G"
same "$via: bad limit" "$(ev e ACQUIRE 0/1s)" \
    "$E rule \"0/1s\": LIMIT must be from 1 to 1000000000; $G"
same "$via: long period" "$(ev e ACQUIRE 1/31d)" \
    "$E rule \"1/31d\": PERIOD must be at most 30d; $G"
same "$via: burst on sliding" "$(ev e ACQUIRE 1/1s,burst=2)" \
    "$E rule \"1/1s,burst=2\": burst applies to gcra rules only (add :gcra); $G"
same "$via: unknown algorithm" "$(ev e ACQUIRE 1/1s:leaky)" \
    "$E rule \"1/1s:leaky\": unknown algorithm \"leaky\" (use sliding, fixed, approx, gcra or concurrent); $G"
same "$via: too deep" "$(ev e ACQUIRE 1/30d:gcra,burst=1000)" \
    "$E rule \"1/30d:gcra,burst=1000\": burst x period / limit must be at most 10 years (the bucket would never drain); $G"
same "$via: trailing bytes" "$(ev e ACQUIRE '10/1s"x')" \
    "$E rule \"10/1s\\\"x\": unexpected \"\\\"x\" at byte 6; $G"
same "$via: unit spelt out" "$(ev e ACQUIRE 20/minute)" \
    "$E rule \"20/minute\": unknown unit \"minute\"; the units are ms, s, m, h, d, w and mo (e.g. 20/1m, 20/60s); $G"
# Calendar windows: offsets, weeks and months are computed (above); zone
# names are refused as the module refuses them (no tz database in Redis).
same "$via: week of sliding" "$(ev wk ACQUIRE 10/1w >/dev/null; ev wk INFO | cut -d' ' -f1-2)" "rule 10/7d"
same "$via: zone name" "$(ev e ACQUIRE 10/1d:fixed,tz=Asia/Shanghai)" \
    "$E rule \"10/1d:fixed,tz=Asia/Shanghai\": zone names need the system's time-zone database, which the Redis module and the Lua script do not read: give the offset (e.g. tz=+08:00); $G"
same "$via: tz offset range" "$(ev e ACQUIRE 10/1d:fixed,tz=+14:30)" \
    "$E rule \"10/1d:fixed,tz=+14:30\": tz offsets are +HH:MM or -HH:MM, from -14:00 to +14:00 (e.g. tz=+08:00); $G"
same "$via: tz garbage" "$(ev e ACQUIRE '10/1d:fixed,tz=../etc/passwd')" \
    "$E rule \"10/1d:fixed,tz=../etc/passwd\": tz must be UTC, an offset (tz=+08:00) or a zone name (tz=Asia/Shanghai); $G"
same "$via: tz on sliding" "$(ev e ACQUIRE 10/1d,tz=+08:00)" \
    "$E rule \"10/1d,tz=+08:00\": tz applies to the window algorithms, :fixed and :approx; $G"
same "$via: months on gcra" "$(ev e ACQUIRE 10/1mo:gcra)" \
    "$E rule \"10/1mo:gcra\": months are calendar periods: use :fixed or :approx (e.g. 1000/1mo:fixed); $G"
same "$via: tz twice" "$(ev e ACQUIRE 10/1d:fixed,tz=UTC,tz=UTC)" \
    "$E rule \"10/1d:fixed,tz=UTC,tz=UTC\": tz is given twice; $G"
same "$via: unknown rule option" "$(ev e ACQUIRE 10/1d:fixed,rate=5)" \
    "$E rule \"10/1d:fixed,rate=5\": unknown option at byte 13 (the options are burst=N, for gcra, and tz=ZONE, for fixed and approx); $G"
same "$via: empty rule" "$(ev e ACQUIRE '')" "$E rule \"\": empty rule; $G"
same "$via: no rule" "$(ev e ACQUIRE COST 2)" "$E at least one rule is needed"
same "$via: nine rules" "$(ev e ACQUIRE 1/1s 2/1s 3/1s 4/1s 5/1s 6/1s 7/1s 8/1s 9/1s)" \
    "$E at most 8 rules"
same "$via: repeated rule" "$(ev e ACQUIRE 10/1s 10/1000ms)" \
    "$E policy: rule 2 (\"10/1s\") repeats rule 1"
for c in 0 -1 x 1000000001; do
    same "$via: COST $c" "$(ev e ACQUIRE COST "$c" 1/1s)" \
        "$E COST must be an integer from 1 to 1000000000, not \"$c\""
done
same "$via: cost above capacity" "$(ev e ACQUIRE COST 11 10/1s)" \
    "$E COST 11 is more than rule 1 (\"10/1s\") can ever admit (10)"
same "$via: cost above burst" "$(ev e ACQUIRE COST 3 5/1s 5/1s:gcra,burst=2)" \
    "$E COST 3 is more than rule 2 (\"5/1s:gcra,burst=2\") can ever admit (2)"
same "$via: MAXWAIT range" "$(ev e ACQUIRE MAXWAIT 2592000001 1/1s:gcra)" \
    "$E MAXWAIT must be an integer from 0 to 2592000000, not \"2592000001\""
same "$via: MAXWAIT on sliding" "$(ev e ACQUIRE MAXWAIT 10 1/1s:gcra 1/1s)" \
    "$E MAXWAIT needs every rule to be gcra; rule 2 (\"1/1s\") is sliding"
same "$via: AT range" "$(ev e ACQUIRE AT 9007199254741 1/1s)" \
    "$E AT must be an integer from 0 to 9007199254740, not \"9007199254741\""
same "$via: AT missing" "$(ev e INFO AT)" \
    "$E AT must be an integer from 0 to 9007199254740"
same "$via: unknown option" "$(ev e ACQUIRE FOO 1/1s)" \
    "$E unknown or repeated option \"FOO\"; options are COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules"
same "$via: repeated option" "$(ev e ACQUIRE PEEK PEEK 1/1s)" \
    "$E unknown or repeated option \"PEEK\"; options are COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules"
same "$via: PEEK on refund" "$(ev e REFUND PEEK 1/1s)" \
    "$E unknown or repeated option \"PEEK\"; options are COST n, AT unix_ms, then the rules"
same "$via: rule on info" "$(ev e INFO 1/1s)" \
    "$E unknown or repeated option \"1/1s\"; options are AT unix_ms"
same "$via: no arguments" "$(ev e ACQUIRE)" \
    "ERR wrong number of arguments for 'ratel.acquire' command"
same "$via: reset with arguments" "$(ev e RESET 1/1s)" \
    "ERR wrong number of arguments for 'ratel.reset' command"

rcli "$port" RPUSH alist x >/dev/null
W='WRONGTYPE Operation against a key holding the wrong kind of value'
same "$via: WRONGTYPE acquire" "$(ev alist ACQUIRE 1/1s)" "$W"
same "$via: WRONGTYPE refund" "$(ev alist REFUND 1/1s)" "$W"
same "$via: WRONGTYPE info" "$(ev alist INFO)" "$W"
same "$via: WRONGTYPE reset" "$(ev alist RESET)" "$W"
same "$via: list untouched" "$(rcli "$port" LRANGE alist 0 -1)" "x"

rcli "$port" SET junk hello >/dev/null
same "$via: not ratel state" "$(ev junk ACQUIRE 1/1s)" \
    "$E key holds a value that is not ratel state"
same "$via: not ratel state, info" "$(ev junk INFO)" \
    "$E key holds a value that is not ratel state"
same "$via: not ratel state, reset" "$(ev junk RESET)" \
    "$E key holds a value that is not ratel state"
same "$via: junk untouched" "$(rcli "$port" GET junk)" "hello"
rcli "$port" SET empty "" >/dev/null
same "$via: empty string is not ratel state" "$(ev empty ACQUIRE 1/1s)" \
    "$E key holds a value that is not ratel state"
same "$via: empty string, reset" "$(ev empty RESET)" \
    "$E key holds a value that is not ratel state"
same "$via: empty string untouched" "$(rcli "$port" STRLEN empty)" 0
# A rule with a NUL byte (bash cannot pass one: redis-cli -x reads it).
if [ "$via" = eval ]; then
    nul=$(printf '10/1s\0x' | rcli "$port" -x EVALSHA "$sha" 1 e ACQUIRE 2>&1)
else
    nul=$(printf '10/1s\0x' | rcli "$port" -x FCALL ratel_acquire 1 e 2>&1)
fi
same "$via: a NUL byte in a rule" "$nul" \
    "$E rule \"10/1s\\x00x\": unexpected \"\\x00x\" at byte 6; $G"
printf 'RT\x02\x01' | rcli "$port" -x SET newer >/dev/null
same "$via: unknown version" "$(ev newer ACQUIRE 1/1s)" \
    "$E key holds ratel state of an unknown version"
# Corrupt blobs: a count of zero, a truncation, a trailing byte, a total
# that does not match the runs, a shift past 30, a gcra remainder >= limit.
good=52540101000002000000e803000000d8c32cbb0300000100010000000000000001000000
corrupt() { # NAME HEX [RULE]
    printf '%s' "$2" | xxd -r -p | rcli "$port" -x SET "bad-$1" >/dev/null
    same "$via: corrupt $1" "$(ev "bad-$1" ACQUIRE AT $t "${3:-2/1s}")" \
        "$E key holds a value that is not ratel state"
    same "$via: corrupt $1 untouched" "$(hex "bad-$1")" "$2"
}
corrupt truncated "${good:0:70}"
corrupt trailing "${good}00"
corrupt zero-count "${good:0:64}00000000"
corrupt total "${good:0:48}02000000${good:56}"
corrupt shift "${good:0:10}1f${good:12}"
corrupt gcra-rem 5254010103000a000000e80300000a00000000000000000000000a000000
corrupt no-rules 52540100
# Calendars: a zone's id (bit 7: only the embedded store loads zones), no
# calendar after the flag, a calendar without the flag, an offset not in
# whole minutes, an unknown bit, the flag with no calendar bits, months on
# a rule of days, a calendar on sliding.
cal=5254010101800a000000005c260500640c2bbb03000001000000010080700000
corrupt zone-id "${cal:0:52}8100${cal:56}"
corrupt no-calendar "${cal:0:52}"
corrupt no-flag "${cal:0:10}00${cal:12}"
corrupt tz-seconds "${cal:0:52}010081700000"
corrupt calendar-bit "${cal:0:52}090080700000"
corrupt calendar-zero "${cal:0:52}000000000000"
corrupt months-on-days "${cal:0:52}050180700000"
corrupt calendar-on-sliding "${good:0:10}80${good:12}010080700000"
printf '%s' "$cal" | xxd -r -p | rcli "$port" -x SET ok-cal >/dev/null
same "$via: valid foreign calendar blob" "$(ev ok-cal ACQUIRE AT $t 10/1d:fixed,tz=+08:00)" \
    "1 10 8 0 57600000 0 0"
printf '%s' "$good" | xxd -r -p | rcli "$port" -x SET ok-blob >/dev/null
same "$via: valid foreign blob" "$(ev ok-blob ACQUIRE AT $t 2/1s)" "1 2 0 0 1000 0 0"

# --------------------------------------------------------------- leases
# 2/10s:concurrent: ids in turn, the eighth integer, RELEASE's held, the
# record of docs/state-format.md (base, n, last, entries), expiry at
# exactly PERIOD after the last renewal.
c=2/10s:concurrent
same "$via: lease first" "$(ev cc ACQUIRE AT $t $c)" "1 2 1 0 10000 0 0 1"
same "$via: lease record" "$(hex cc)" \
    525401010400020000001027000000d8c32cbb0300000100010000001027000001000000
same "$via: lease second" "$(ev cc ACQUIRE AT $((t + 1)) $c)" "1 2 0 0 10000 0 0 2"
same "$via: lease full" "$(ev cc ACQUIRE AT $((t + 2)) $c)" "0 2 0 9998 9999 0 0 0"
same "$via: release held" "$(ev cc RELEASE 1 AT $((t + 3)) $c)" "1 2 1 0 9998 0 0 1"
same "$via: release again" "$(ev cc RELEASE 1 AT $((t + 4)) $c)" "1 2 1 0 9997 0 0 0"
same "$via: renew" "$(ev cc RELEASE 2 RENEW AT $((t + 5)) $c)" "1 2 1 0 10000 0 0 1"
same "$via: renew expiry" "$(rcli "$port" PEXPIRETIME cc)" "$((t + 10005))"
same "$via: lease next" "$(ev cc ACQUIRE AT $((t + 6)) $c)" "1 2 0 0 10000 0 0 3"
same "$via: lease info" "$(ev cc INFO AT $((t + 6)))" \
    "rule 2/10s:concurrent algo concurrent used 2 remaining 0 reset_after_ms 10000 last_lease 3"
same "$via: held at PERIOD - 1" "$(ev cc ACQUIRE AT $((t + 10004)) $c)" "0 2 0 1 2 0 0 0"
same "$via: free at PERIOD" "$(ev cc ACQUIRE AT $((t + 10005)) $c)" "1 2 0 0 10000 0 0 4"
same "$via: lease with a rate rule" "$(ev ar ACQUIRE AT $t 1/1m 3/10s:concurrent)" "1 1 0 0 60000 0 0 1"
same "$via: rate rule denies, no lease" "$(ev ar ACQUIRE AT $((t + 1)) 1/1m 3/10s:concurrent)" \
    "0 1 0 59999 59999 0 0 0"
same "$via: other policies keep seven" "$(ev seven ACQUIRE AT $t 2/10s)" "1 2 1 0 10000 0 0"
# Corrupt records: entries out of order, past PERIOD, a lease id of 0,
# 257 entries; and a valid foreign one.
cg=525401010400020000001027000000d8c32cbb0300000200020000001027000001000000
corrupt conc-order "${cg}0f27000002000000" 2/10s:concurrent
corrupt conc-past-period "${cg}1127000002000000" 2/10s:concurrent
corrupt conc-id-zero "${cg}1027000000000000" 2/10s:concurrent
corrupt conc-flags "${cg:0:10}80${cg:12}1027000002000000" 2/10s:concurrent
printf '%s' "${cg}1027000002000000" | xxd -r -p | rcli "$port" -x SET ok-conc >/dev/null
same "$via: valid foreign lease record" "$(ev ok-conc ACQUIRE AT $t $c)" "0 2 0 10000 10000 0 0 0"


}

for via in eval lib; do
    rcli "$port" FLUSHALL >/dev/null
    cases
    slice_cases
done
same "slice with one key" "$(rcli "$port" FCALL ratel_slice 1 k 5 TTL 9 1/1s 2>&1)" \
    "ERR wrong number of arguments for 'ratel.slice' command"

# ------------------------------------------------- one artefact only

via='eval'
same "unknown operation" "$(ev e FLUSH)" \
    "$E unknown operation \"FLUSH\"; use ACQUIRE, PEEK, REFUND, RELEASE, RESET, INFO, SLICE or UNSLICE"
same "no key" "$(rcli "$port" EVALSHA "$sha" 0 ACQUIRE 1/1s 2>&1)" \
    "ERR wrong number of arguments for 'ratel.acquire' command"
same "PEEK as an operation, read-only" \
    "$({ rcli "$port" EVALSHA_RO "$sha" 1 pk2 PEEK AT "$t" 2/1s; rcli "$port" EXISTS pk2; } | joined)" \
    "1 2 2 0 0 0 0 0"

same "library: no key" "$(rcli "$port" FCALL ratel_acquire 0 1/1s 2>&1)" \
    "ERR wrong number of arguments for 'ratel.acquire' command"
same "library: two keys" "$(rcli "$port" FCALL ratel_info 2 a b 2>&1)" \
    "ERR wrong number of arguments for 'ratel.info' command"
version=$(sed -n "s/^local RATEL_LIBRARY_VERSION = '\(.*\)'$/\1/p" "$lua/ratel.lib.lua")
same "library: ratel_version" "$(rcli "$port" FCALL_RO ratel_version 0)" "$version"
rcli "$port" FCALL ratel_acquire 1 ro AT "$t" 2/1s >/dev/null
same "library: FCALL_RO ratel_peek" \
    "$(rcli "$port" FCALL_RO ratel_peek 1 ro AT "$t" 2/1s | joined)" "1 2 1 0 1000 0 0"
same "library: FCALL_RO ratel_info" \
    "$(rcli "$port" FCALL_RO ratel_info 1 ro AT "$t" | joined | cut -d' ' -f1-6)" "rule 2/1s algo sliding used 1"
same "library: FCALL_RO refuses a write" \
    "$(rcli "$port" FCALL_RO ratel_acquire 1 ro AT "$t" 2/1s 2>&1 | cut -c1-40)" \
    "ERR Can not execute a script with write "
same "library: PEEK on ratel_peek" "$(rcli "$port" FCALL ratel_peek 1 ro PEEK 2/1s 2>&1)" \
    "$E unknown or repeated option \"PEEK\"; options are COST n, MAXWAIT ms, AT unix_ms, then the rules"
# docs/lua.md's first example, on the server's clock.
rcli "$port" FCALL ratel_acquire 1 sms:13800138000 1/60s 10/1d >/dev/null
second=$(rcli "$port" FCALL ratel_acquire 1 sms:13800138000 1/60s 10/1d | joined)
same "library: sms denied" "${second%% *}" 0
retry=$(echo "$second" | cut -d' ' -f4)
same "library: sms retry near 60000" "$([ "$retry" -gt 59000 ] && [ "$retry" -le 60000 ] && echo yes)" yes
# After FUNCTION FLUSH the library is gone, and comes back with a load.
rcli "$port" FUNCTION FLUSH >/dev/null
same "library: flushed" "$(rcli "$port" FCALL ratel_version 0 2>&1 | cut -c1-22)" "ERR Function not found"
rcli "$port" FUNCTION LOAD "$(cat "$lua/ratel.lib.lua")" >/dev/null

# ratel_acquire_many (the EVAL script's ACQUIRE_MANY): each item answers
# as its own ratel_acquire would, in order (m:a twice), with the same
# bytes stored; "0" repeats the words of the item before; an item that
# fails fails alone; a malformed list fails the call, writing nothing.
many() {
    local n=$1; shift
    if [ "$via" = eval ]; then
        rcli "$port" EVALSHA "$sha" "$n" "${@:1:$n}" ACQUIRE_MANY "${@:$((n + 1))}" 2>&1 | joined
    else
        rcli "$port" FCALL ratel_acquire_many "$n" "$@" 2>&1 | joined
    fi
}
for via in lib eval; do
    rcli "$port" FLUSHALL >/dev/null
    same "$via: acquire_many answers as single calls" \
        "$(many 4 m:a m:b m:a m:c 3 AT "$t" 2/1s 0 6 COST 2 AT "$t" 2/1s 3/1h 0)" \
        "$({ ev s:a ACQUIRE AT "$t" 2/1s; ev s:b ACQUIRE AT "$t" 2/1s
            ev s:a ACQUIRE COST 2 AT "$t" 2/1s 3/1h; ev s:c ACQUIRE COST 2 AT "$t" 2/1s 3/1h; } | joined)"
    same "$via: acquire_many stores the same bytes" \
        "$(hex m:a) $(hex m:b) $(rcli "$port" PEXPIRETIME m:a)" \
        "$(hex s:a) $(hex s:b) $(rcli "$port" PEXPIRETIME s:a)"
    rcli "$port" SET m:str text >/dev/null
    same "$via: acquire_many, an item's error is its own" \
        "$(many 3 m:d m:str m:e 3 AT "$t" 5/1s 0 2 AT "$t")" \
        "1 5 4 0 1000 0 0 $E key holds a value that is not ratel state $E at least one rule is needed"
    same "$via: acquire_many, a count that is not one" "$(many 1 m:f x 2/1s)" \
        "$E ratel_acquire_many: item 1 needs a word count (0 repeats the previous item's words) and as many words"
    same "$via: acquire_many, 0 first" "$(many 1 m:f 0)" \
        "$E ratel_acquire_many: item 1 needs a word count (0 repeats the previous item's words) and as many words"
    same "$via: acquire_many, words left over" "$(many 1 m:f 1 2/1s 2/1m)" \
        "$E ratel_acquire_many: more words than its 1 keys take"
    same "$via: acquire_many, nothing written on a malformed call" "$(rcli "$port" EXISTS m:f)" 0
done

# ------------------------------------ the module and the scripts agree

# Calendar rules mixed with others, at instants around the leap day of
# 2028 and the end of 2099: the same replies, bytes and expiry through
# RATEL.ACQUIRE, EVALSHA and FCALL; and zone names refused in one text.
if rcli "$port" MODULE LIST | grep -qx ratel; then
    zone="10/1d:fixed,tz=Asia/Shanghai"
    same "module and scripts: zone names refused alike" \
        "$(rcli "$port" RATEL.ACQUIRE e "$zone" 2>&1) $(rcli "$port" FCALL ratel_acquire 1 e "$zone" 2>&1)" \
        "$(rcli "$port" EVALSHA "$sha" 1 e ACQUIRE "$zone" 2>&1) $(rcli "$port" EVALSHA "$sha" 1 e ACQUIRE "$zone" 2>&1)"
    # state KEY: its bytes and expiry.
    state() { echo "$(hex "$1") $(rcli "$port" PEXPIRETIME "$1")"; }
    for r in 10/1d:fixed,tz=+08:00 3/1d:approx,tz=-03:30 2/w:fixed \
        4/2w:approx,tz=+05:45 5/mo:fixed,tz=-10:00 3/3mo:approx \
        2/12mo:fixed,tz=+14:00 4/12h:approx,tz=-09:30; do
        diff=
        for at in 1835352000000 1835395199999 1835395200000 1835438400000 \
            1835481599999 1835481600000 1835481600001 4102444799999 \
            4102444800000 4102448400000; do
            m=$({ rcli "$port" RATEL.ACQUIRE "m:$r" AT "$at" "$r" 100/1h; state "m:$r"; } | joined)
            e=$({ rcli "$port" EVALSHA "$sha" 1 "e:$r" ACQUIRE AT "$at" "$r" 100/1h; state "e:$r"; } | joined)
            l=$({ rcli "$port" FCALL ratel_acquire 1 "l:$r" AT "$at" "$r" 100/1h; state "l:$r"; } | joined)
            [ "$m" = "$e" ] && [ "$m" = "$l" ] || diff="$diff at $at: module [$m] eval [$e] lib [$l]"
        done
        same "module and scripts: $r" "$diff" ""
    done
    # Leases: the same replies, bytes and expiry through RATEL.*, EVALSHA
    # and FCALL, errors in one text.
    diff=
    for step in "ACQUIRE AT 4102444800000" "ACQUIRE AT 4102444800001" \
        "ACQUIRE AT 4102444800002" "RELEASE 1 AT 4102444800003" \
        "RELEASE 1 AT 4102444800004" "RELEASE 2 RENEW AT 4102444800005" \
        "ACQUIRE COST 2 AT 4102444800006" "ACQUIRE PEEK AT 4102444800007" \
        "RELEASE 3 AT 4102444810005" "ACQUIRE AT 4102444810005" \
        "RELEASE 0 AT 4102444810006" "RELEASE x" "RELEASE 9 COST 1" \
        "RELEASE 4 AT 4102444810007" "RELEASE 5 AT 4102444810007"; do
        op=${step%% *} args=${step#* }
        [ "$op" = "$step" ] && args=
        for rules in "3/10s:concurrent" "2/1m 3/10s:concurrent 5/1h:gcra"; do
            read -r -a words <<<"$args $rules"
            m=$({ rcli "$port" "RATEL.$op" "m:$rules" "${words[@]}" 2>&1; state "m:$rules"; } | joined)
            e=$({ rcli "$port" EVALSHA "$sha" 1 "e:$rules" "$op" "${words[@]}" 2>&1; state "e:$rules"; } | joined)
            l=$({ rcli "$port" FCALL "ratel_${op,,}" 1 "l:$rules" "${words[@]}" 2>&1; state "l:$rules"; } | joined)
            [ "$m" = "$e" ] && [ "$m" = "$l" ] || diff="$diff [$step $rules: module [$m] eval [$e] lib [$l]]"
        done
    done
    same "module and scripts: leases" "$diff" ""
    # One key in turns: the library twice (the second call finds the bytes
    # it wrote), then the module, then EVAL (the library then reads what
    # they wrote), on a key of one rule; the module alone on another: the
    # same replies, bytes and expiry, through refunds, peeks and resets.
    for r in 5/1s:gcra,burst=3 4/1s:fixed 4/1s:approx 3/1s 2/1s:concurrent; do
        diff='' i=0
        for step in "ACQUIRE AT 4102444800000" "ACQUIRE AT 4102444800001" \
            "ACQUIRE AT 4102444800001" "ACQUIRE COST 2 AT 4102444800100" \
            "REFUND AT 4102444800200" "ACQUIRE AT 4102444800300" \
            "ACQUIRE PEEK AT 4102444800300" "ACQUIRE AT 4102444800400" \
            "ACQUIRE AT 4102444800400" "RESET" "ACQUIRE AT 4102444800500" \
            "ACQUIRE AT 4102444800501" "REFUND COST 9 AT 4102444800600" \
            "ACQUIRE AT 4102444801700" "ACQUIRE AT 4102444801701"; do
            op=${step%% *} args=${step#* } rules=$r
            [ "$op" = "$step" ] && args='' rules=''
            read -r -a words <<<"$args $rules"
            m=$({ rcli "$port" "RATEL.$op" "m1:$r" "${words[@]}" 2>&1; state "m1:$r"; } | joined)
            case $((i % 4)) in
            0 | 1)
                t=$(rcli "$port" FCALL "ratel_${op,,}" 1 "t:$r" "${words[@]}" 2>&1) ;;
            2)
                t=$(rcli "$port" "RATEL.$op" "t:$r" "${words[@]}" 2>&1) ;;
            *)
                t=$(rcli "$port" EVALSHA "$sha" 1 "t:$r" "$op" "${words[@]}" 2>&1) ;;
            esac
            t=$({ printf '%s\n' "$t"; state "t:$r"; } | joined)
            [ "$m" = "$t" ] || diff="$diff [$i $step: module [$m] in turns [$t]]"
            i=$((i + 1))
        done
        same "module and scripts in turns: $r" "$diff" ""
    done
    same "module and scripts: 257 leases refused alike" \
        "$(rcli "$port" RATEL.ACQUIRE e 257/1s:concurrent 2>&1)" \
        "$(rcli "$port" EVALSHA "$sha" 1 e ACQUIRE 257/1s:concurrent 2>&1)"
else
    echo "skip module and scripts (no module loaded)"
fi

# --------------------------------------------------- the conformance run

conform=$build/conform
if [ -x "$conform" ]; then
    out=$("$conform" -p "$port" -n "${CONFORM_TRACES:-300}" \
        -s "${CONFORM_SEED:-1}" --lua "$lua" 2>&1)
    last=$(printf '%s\n' "$out" | tail -1)
    printf '%s\n' "$out" | grep '^# ' # how many operations, SLICE and UNSLICE
    case $last in
    *" passed, 0 failed") ok "conform core, eval, lib ($last)" ;;
    *) printf '%s\n' "$out" | tail -40; fail "conform core, eval, lib" "$last" ;;
    esac
else
    fail "conform" "$conform is not built (make build/conform)"
fi

finish
