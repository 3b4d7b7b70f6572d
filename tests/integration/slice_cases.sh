# shellcheck shell=bash disable=SC2154 # $port and $via: the caller's
# slice_cases.sh - the slice commands' cases by hand (docs/commands.md,
# RATEL.SLICE and RATEL.UNSLICE), sourced by test_module.sh and
# test_lua.sh, which run them through each backend. The caller defines:
#
#   sl KEY DEMAND ARGS...   SLICE's reply, its elements on one line
#   us KEY ARGS...          UNSLICE's reply, the same way
#   $port, $via             the server, and the backend's name for labels
#
# Instants lie in 2100 (hour-aligned), so no key expires while they run.

# slice_hex KEY: the key's bytes in hex ("" for no key).
slice_hex() { rcli "$port" --raw GET "$1" | head -c -1 | od -An -tx1 | tr -d ' \n'; }

# le VALUE BYTES: VALUE little-endian, in hex.
le() {
    local i out=''
    for ((i = 0; i < $2; i++)); do out+=$(printf '%02x' $((($1 >> (8 * i)) & 255))); done
    echo "$out"
}

slice_cases() {
    local t=4102444800000 key

    # A grant ends with its fixed window: 100 ms before it, 100 ms to live;
    # the key expires as after an ACQUIRE (its reset time).
    same "$via: slice grant" "$(sl sl:1 sl:1 30 TTL 250 AT $((t + 999900)) 100/1s:fixed)" \
        "30 $((t + 1000000)) 100 100 70 0 100 0"
    same "$via: slice key expiry" "$(rcli "$port" PEXPIRETIME sl:1)" "$((t + 1000000))"
    same "$via: slice inside a window" "$(sl sl:1 sl:1 10 ttl 250 AT $((t + 1000000)) 100/1s:fixed)" \
        "10 $((t + 1000250)) 250 100 90 0 1000 0"
    # Granted 0: nothing charged, the key untouched, when one permit fits.
    sl sl:2 sl:2 100 TTL 250 AT "$t" 100/1s:fixed >/dev/null
    key=$(slice_hex sl:2)
    same "$via: slice of nothing" "$(sl sl:2 sl:2 5 TTL 250 AT $((t + 10)) 100/1s:fixed)" \
        "0 0 0 100 0 990 990 0"
    same "$via: slice of nothing writes nothing" "$(slice_hex sl:2)" "$key"
    # Unspent permits come back while the slice lives, not from its end.
    same "$via: unslice alive" "$(us sl:2 40 UNTIL $((t + 250)) AT $((t + 20)) 100/1s:fixed)" \
        "40 100 40 0 980 0"
    same "$via: unslice ended" "$(us sl:2 40 UNTIL $((t + 250)) AT $((t + 250)) 100/1s:fixed)" \
        "0 100 40 0 750 0"

    # Fair share: holders 1 and 2 asked 100 and 300; with 40 left, each
    # gets its part of what is left, 1:3 (holder 1's 10 given back first).
    local k='{fs}:k' d='{fs}:d' r='1000/1h:fixed'
    same "$via: share holder 1 alone" "$(sl "$k" "$d" 100 TTL 1000 HOLDER 1 AT "$t" $r)" \
        "100 $((t + 1000)) 1000 1000 900 0 3600000 0"
    same "$via: share holder 2" "$(sl "$k" "$d" 300 TTL 1000 HOLDER 2 AT $((t + 1)) $r)" \
        "300 $((t + 1001)) 1000 1000 600 0 3599999 0"
    same "$via: share no holder" "$(sl "$k" "$d" 560 TTL 1000 AT $((t + 2)) $r)" \
        "560 $((t + 1002)) 1000 1000 40 0 3599998 0"
    same "$via: share holder 1 of 40" "$(sl "$k" "$d" 100 TTL 1000 HOLDER 1 AT $((t + 3)) $r)" \
        "10 $((t + 1003)) 1000 1000 30 0 3599997 0"
    us "$k" 10 UNTIL $((t + 1003)) AT $((t + 3)) $r >/dev/null
    same "$via: share holder 2 of 40" "$(sl "$k" "$d" 300 TTL 1000 HOLDER 2 AT $((t + 4)) $r)" \
        "30 $((t + 1004)) 1000 1000 10 0 3599996 0"
    # The record: "RD", version 1, 2 entries of (holder, asked at, want).
    same "$via: demand record bytes" "$(slice_hex "$d")" \
        "52440102$(le 1 8)$(le $((t + 3)) 8)$(le 100 4)$(le 2 8)$(le $((t + 4)) 8)$(le 300 4)"
    same "$via: demand record expiry" "$(rcli "$port" PEXPIRETIME "$d")" "$((t + 4 + 2000))"

    # Refused, each with its message; nothing written.
    local E="ERR ratel:"
    same "$via: slice of a concurrent rule" "$(sl sl:3 sl:3 5 TTL 250 AT "$t" 100/1s 5/1m:concurrent)" \
        "$E a slice cannot be taken of rule 2 (\"5/1m:concurrent\"): a concurrent rule's permits are leases a request holds and gives back, not a rate to slice"
    same "$via: slice without TTL" "$(sl sl:3 sl:3 5 AT "$t" 100/1s)" \
        "$E TTL is needed: an integer from 1 to 3600000 (the lifetime of the slice in ms)"
    same "$via: slice of WANT 0" "$(sl sl:3 sl:3 0 TTL 250 100/1s)" \
        "$E WANT must be an integer from 1 to 1000000000 (the permits the slice asks for), not \"0\""
    same "$via: slice of TTL too long" "$(sl sl:3 sl:3 5 TTL 3600001 100/1s)" \
        "$E TTL must be an integer from 1 to 3600000 (the lifetime of the slice in ms), not \"3600001\""
    same "$via: slice of HOLDER 2^53" "$(sl sl:3 sl:3 5 TTL 9 HOLDER 9007199254740992 100/1s)" \
        "$E HOLDER must be an integer from 1 to 9007199254740991 (the host asking for its fair share), not \"9007199254740992\""
    same "$via: slice's options" "$(sl sl:3 sl:3 5 COST 2 100/1s)" \
        "$E unknown or repeated option \"COST\"; options are TTL ms, HOLDER id, AT unix_ms, then the rules"
    same "$via: unslice without UNTIL" "$(us sl:3 5 AT "$t" 100/1s)" \
        "$E UNTIL is needed: an integer from 1 to 9007199254740 (the expires_at_ms SLICE answered)"
    rcli "$port" SET sl:4 junk >/dev/null
    same "$via: demand key of junk" "$(sl sl:3 sl:4 5 TTL 250 HOLDER 1 AT "$t" 100/1s)" \
        "$E demand key holds a value that is not a ratel demand record"
    same "$via: refusals wrote nothing" "$(rcli "$port" EXISTS sl:3)" "0"
}
