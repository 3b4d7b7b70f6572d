#!/usr/bin/env bash
# Store failures end where the docs say (docs/deployment.md, "When Redis
# fails"), caused on real servers:
#
# - Configuration errors are errors: the CLI exits 1 naming the address
#   and the cause (wrong or missing password, the module missing under
#   mode=module, an unknown master name, a wrong or missing Sentinel
#   password, TLS Redis behind redis:// and plain Redis behind rediss://);
#   rateld starts not ready with it.
# - Outages are the failure policy's (exit 0, a warning): a hung server
#   (within one timeout_ms of the first contact's, not two), maxclients.
# - One failure that lasts is one outage: a wrong password held for 30 s
#   is 1 health change and 1 log line, 2 and 2 once it is fixed;
#   maxclients and a missing module likewise.
# - One Sentinel of three hung: ready throughout, decisions from Redis, a
#   warning; the CLI asks the others within its timeout.
. "$(dirname "$0")/lib.sh"

require_built ratel rateld
ratel=$build/ratel

# cli NAME URL: runs `ratel acquire` on URL; $rc, $out (stdout and
# stderr) and $ms (how long it took) are set.
cli() {
    local t0 t1
    t0=$(date +%s%N)
    out=$("$ratel" acquire --store "$2" --rule 5/1m "k-$1" 2>&1)
    rc=$?
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    echo "# $1: exit $rc in ${ms} ms: $(head -1 <<<"$out")"
}
# refused NAME URL TEXT: a configuration error, exit 1 with TEXT.
refused() {
    cli "$1" "$2"
    same "${1}_exit" "$rc" 1
    contains "${1}_says" "$out" "$3"
}

plain=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
certs=$(tls_certs)
tlsp=$(redis_start_tls) || { fail redis_tls "did not start"; finish; exit 1; }
nomod=$(RATEL_NO_MODULE=1 redis_start) || { fail redis_nomod "did not start"; finish; exit 1; }
rcli "$plain" CONFIG SET requirepass right >/dev/null

# --------------------------------------------------- the CLI's verdicts

refused wrong_password "redis://:wrong@127.0.0.1:$plain" \
    "127.0.0.1:$plain refused the credentials: WRONGPASS"
refused missing_password "redis://127.0.0.1:$plain" \
    "127.0.0.1:$plain refused the credentials: NOAUTH Authentication required. (give the password in the URL"
refused module_missing "redis://127.0.0.1:$nomod?mode=module" \
    "127.0.0.1:$nomod has no ratel module loaded"
refused tls_behind_plain_scheme "redis://127.0.0.1:$tlsp" \
    "127.0.0.1:$tlsp: Connection reset by peer before answering (a TLS port? use rediss://)"
# Plain Redis behind rediss://: it answers a ClientHello with nothing; a
# plain-text PING half way through connect_timeout_ms finds it out.
refused plain_behind_tls_scheme "rediss://:right@127.0.0.1:$plain?tls_ca_file=$certs/ca.crt" \
    "127.0.0.1:$plain: not TLS (is this a plain redis:// port? it answered PING in plain text)"
cli right_password "redis://:right@127.0.0.1:$plain"
same right_password_store "$rc $(cut -f7 <<<"$out")" "0 store"

# A hung server is an outage: the failure policy decides, once the first
# contact's timeout_ms (400 ms) has passed, not after a second one.
redis-cli -p "$plain" -a right CONFIG SET requirepass "" >/dev/null 2>&1
kill -STOP "$(cat "$tmp/redis-$plain/pid")"
cli hung_server "redis://127.0.0.1:$plain?timeout_ms=400&connect_timeout_ms=400"
kill -CONT "$(cat "$tmp/redis-$plain/pid")"
same hung_server_policy "$rc $(tail -1 <<<"$out" | cut -f7)" "0 local"
contains hung_server_says "$out" "127.0.0.1:$plain: no reply within 400 ms (timeout_ms)); the failure policy 'local' did"
[ "$ms" -lt 780 ] && ok hung_server_one_timeout ||
    fail hung_server_one_timeout "took $ms ms (timeout_ms=400: one wait, not two)"

# maxclients reached: an outage (the server is full), said as such.
rcli "$plain" CONFIG SET maxclients 1 >/dev/null
exec 7<>"/dev/tcp/127.0.0.1/$plain"
cli maxclients "redis://127.0.0.1:$plain"
same maxclients_policy "$rc $(tail -1 <<<"$out" | cut -f7)" "0 local"
contains maxclients_says "$out" "127.0.0.1:$plain refused the connection: ERR max number of clients reached (its maxclients)"
exec 7>&-
wait_for 10 rcli "$plain" PING >/dev/null
rcli "$plain" CONFIG SET maxclients 10000 >/dev/null

# Sentinels: three on the plain server, the first with a password.
s1=$(sentinel_start "$plain" --requirepass sp) || { fail sentinel "did not start"; finish; exit 1; }
s2=$(sentinel_start "$plain") || { fail sentinel "did not start"; finish; exit 1; }
s3=$(sentinel_start "$plain") || { fail sentinel "did not start"; finish; exit 1; }
sentinel_wait "$s2" "$plain" 0 || fail sentinels_ready "the Sentinels never named $plain"
refused unknown_master "redis+sentinel://127.0.0.1:$s2/nosuch" \
    "Sentinel 127.0.0.1:$s2 knows no primary named nosuch (answered nil)"
refused missing_sentinel_password "redis+sentinel://127.0.0.1:$s1/mymaster" \
    "Sentinel 127.0.0.1:$s1 refused the credentials: NOAUTH Authentication required. (give the Sentinels' password: sentinel_password=)"
refused wrong_sentinel_password "redis+sentinel://127.0.0.1:$s1/mymaster?sentinel_password=bad" \
    "Sentinel 127.0.0.1:$s1 refused the credentials: WRONGPASS"
cli right_sentinel_password "redis+sentinel://127.0.0.1:$s1/mymaster?sentinel_password=sp"
same right_sentinel_password_store "$rc $(cut -f7 <<<"$out")" "0 store"

# The first Sentinel hung: the others answer within the one timeout.
kill -STOP "$(cat "$tmp/pids/sentinel-$s2")"
cli first_sentinel_hung "redis+sentinel://127.0.0.1:$s2,127.0.0.1:$s3/mymaster?timeout_ms=400"
same first_sentinel_hung_store "$rc $(cut -f7 <<<"$out")" "0 store"

# ------------------------------------------------ rateld: one outage each

# rateld_on NAME URL: rateld on URL (on_failure local), started.
rateld_on() { rateld_redis "$1" "$2" local ping 100/1m; }
port_of() { cat "$tmp/$1.port"; }
changes() { curl -s "http://127.0.0.1:$(port_of "$1")/metrics" | sed -n 's/^ratel_store_health_changes_total //p'; }
lines() { grep -c "msg=\"$2\"" "$tmp/$1.log"; }
ready() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(port_of "$1")/readyz"; }
decide() { curl -s "http://127.0.0.1:$(port_of "$1")/v1/acquire?policy=ping&key=k" | sed -n 's/.*"source":"\([a-z]*\)".*/\1/p'; }
# hold NAME SECONDS: a decision a second for SECONDS (traffic meets the
# failure too, not only the health check).
hold() {
    for _ in $(seq "$2"); do decide "$1" >/dev/null; sleep 1; done
}

# A sentinel hung among three: ready throughout, a warning, no outage.
rateld_on one_sentinel_hung "redis+sentinel://127.0.0.1:$s2,127.0.0.1:$s3/mymaster"
notready=0
for _ in $(seq 24); do
    [ "$(ready one_sentinel_hung)" = 200 ] || notready=$((notready + 1))
    sleep 0.25
done
echo "# one Sentinel of three hung: not ready in $notready of 24 samples"
same one_sentinel_hung_ready "$notready" 0
same one_sentinel_hung_decides "$(decide one_sentinel_hung)" store
same one_sentinel_hung_changes "$(changes one_sentinel_hung)" 0
same one_sentinel_hung_warned "$(lines one_sentinel_hung 'store warning')" 1
contains one_sentinel_hung_readyz "$(curl -s "http://127.0.0.1:$(port_of one_sentinel_hung)/readyz")" \
    "\"warning\":\"Sentinel 127.0.0.1:$s2: no reply within"
kill -CONT "$(cat "$tmp/pids/sentinel-$s2")"
server_stop one_sentinel_hung

# A wrong password held for 30 s: one outage, then fixed.
rcli "$plain" CONFIG SET requirepass right >/dev/null
rateld_on wrong_password "redis://:wrong@127.0.0.1:$plain"
hold wrong_password 30
echo "# wrong password for 30 s: health changes $(changes wrong_password), 'store down' lines $(lines wrong_password 'store down')"
same wrong_password_changes "$(changes wrong_password)" 1
same wrong_password_down_lines "$(lines wrong_password 'store down')" 1
same wrong_password_not_ready "$(ready wrong_password)" 503
same wrong_password_policy "$(decide wrong_password)" local
redis-cli -p "$plain" -a right CONFIG SET requirepass wrong >/dev/null 2>&1
back() { [ "$(decide wrong_password)" = store ]; }
wait_for 10 back && ok wrong_password_fixed || fail wrong_password_fixed "no decision from Redis once the password matched"
is_ready() { [ "$(ready "$1")" = 200 ]; }
wait_for 5 is_ready wrong_password
same wrong_password_fixed_changes "$(changes wrong_password)" 2
same wrong_password_lines "$(lines wrong_password 'store down') $(lines wrong_password 'store up')" "1 1"
server_stop wrong_password
redis-cli -p "$plain" -a wrong CONFIG SET requirepass "" >/dev/null 2>&1

# maxclients reached for 5 s (every connection refused): one outage.
rateld_on maxclients "redis://127.0.0.1:$plain"
same maxclients_before "$(decide maxclients)" store
# The server full (maxclients 1, this test's connection the one) and
# rateld's connections closed: every new one is refused.
printf 'CONFIG SET maxclients 1\nCLIENT KILL TYPE normal SKIPME yes\n' |
    redis-cli -p "$plain" >/dev/null
exec 7<>"/dev/tcp/127.0.0.1/$plain"
hold maxclients 5
echo "# maxclients for 5 s: health changes $(changes maxclients), 'store down' lines $(lines maxclients 'store down')"
same maxclients_changes "$(changes maxclients)" 1
same maxclients_down_lines "$(lines maxclients 'store down')" 1
exec 7>&-
wait_for 10 rcli "$plain" PING >/dev/null
rcli "$plain" CONFIG SET maxclients 10000 >/dev/null
server_stop maxclients

# The module missing under mode=module, for 5 s: one outage with the cause.
rateld_on module_missing "redis://127.0.0.1:$nomod?mode=module"
hold module_missing 5
echo "# module missing for 5 s: health changes $(changes module_missing), 'store down' lines $(lines module_missing 'store down')"
same module_missing_changes "$(changes module_missing)" 1
same module_missing_down_lines "$(lines module_missing 'store down')" 1
contains module_missing_readyz "$(curl -s "http://127.0.0.1:$(port_of module_missing)/readyz")" \
    "127.0.0.1:$nomod has no ratel module loaded"
server_stop module_missing

# TLS behind redis://: rateld starts, not ready, with the cause.
rateld_on tls_mismatch "redis://127.0.0.1:$tlsp"
hold tls_mismatch 2
same tls_mismatch_not_ready "$(ready tls_mismatch)" 503
contains tls_mismatch_readyz "$(curl -s "http://127.0.0.1:$(port_of tls_mismatch)/readyz")" \
    "(a TLS port? use rediss://)"
same tls_mismatch_changes "$(changes tls_mismatch)" 1
server_stop tls_mismatch

# Plain Redis behind rediss://: likewise.
rateld_on plain_mismatch "rediss://127.0.0.1:$plain?tls_ca_file=$certs/ca.crt"
hold plain_mismatch 2
same plain_mismatch_not_ready "$(ready plain_mismatch)" 503
contains plain_mismatch_readyz "$(curl -s "http://127.0.0.1:$(port_of plain_mismatch)/readyz")" \
    "127.0.0.1:$plain: not TLS (is this a plain redis:// port?"
same plain_mismatch_changes "$(changes plain_mismatch)" 1
server_stop plain_mismatch
finish
