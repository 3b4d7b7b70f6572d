#!/usr/bin/env bash
# The `ratel` CLI reaching Redis as managed and self-hosted deployments
# need it, with the commands a user types:
#
#   ratel acquire --store "rediss://127.0.0.1:PORT?tls_ca_file=ca.crt" --rule 1/60s k
#       decides against a TLS-only redis-server; without the CA (the
#       system's CAs do not know the test CA) it is refused with a message
#       naming the certificate problem;
#   ratel acquire --store "redis+sentinel://127.0.0.1:PORT/mymaster" ...
#       decides, and after SENTINEL FAILOVER the next decision lands on the
#       new primary.
. "$(dirname "$0")/lib.sh"

require_built ratel
ratel=$build/ratel
certs=$(tls_certs) || { fail certs "tls_certs.sh failed"; finish; exit 1; }

# ---- TLS
tport=$(redis_start_tls) || { fail tls_redis "did not start"; finish; exit 1; }
out=$(cd "$certs" && "$ratel" acquire --store "rediss://127.0.0.1:$tport?tls_ca_file=ca.crt" --rule 1/60s k 2>&1)
same tls_decides "$out" "$(printf '1\t0\t0\t60000\t0\t0\tstore')"
out=$(cd "$certs" && "$ratel" acquire --store "rediss://127.0.0.1:$tport?tls_ca_file=ca.crt" --rule 1/60s k 2>&1)
contains tls_denied_second "$out" "$(printf '0\t0\t')"
out=$("$ratel" acquire --store "rediss://127.0.0.1:$tport" --rule 1/60s k 2>&1)
rc=$?
[ "$rc" -ne 0 ] && ok tls_no_ca_refused || fail tls_no_ca_refused "exit 0: $out"
contains tls_no_ca_says_why "$out" "certificate verify failed"
contains tls_no_ca_hint "$out" "tls_ca_file"
out=$(cd "$certs" && "$ratel" acquire --store "rediss://127.0.0.1:$tport?tls_ca_file=ca.crt&tls_server_name=redis.example.com" --rule 1/60s k 2>&1)
contains tls_wrong_name "$out" "not redis.example.com"

# ---- Sentinel
p1=$(redis_start) || { fail primary "did not start"; finish; exit 1; }
p2=$(redis_start --replicaof 127.0.0.1 "$p1") || { fail replica "did not start"; finish; exit 1; }
sport=$(sentinel_start "$p1") || { fail sentinel "did not start"; finish; exit 1; }
sentinel_wait "$sport" "$p1" 1 || fail sentinel_ready "the Sentinel never named $p1 with a replica"
url="redis+sentinel://127.0.0.1:$sport/mymaster"
acquires() { redis-cli -p "$1" INFO commandstats | sed -n 's/^cmdstat_ratel.acquire:calls=\([0-9]*\).*/\1/p'; }
out=$("$ratel" acquire --store "$url" --rule 5/60s s 2>&1)
same sentinel_decides "$out" "$(printf '1\t4\t0\t60000\t0\t0\tstore')"
same sentinel_on_primary "$(acquires "$p1")" 1
sentinel_failover "$sport" "$p2" && ok sentinel_failover || fail sentinel_failover "the Sentinel never named $p2"
before=$(acquires "$p2")
out=$("$ratel" acquire --store "$url" --rule 5/60s s 2>&1)
contains sentinel_after "$out" "store"
same sentinel_on_new_primary "$(acquires "$p2")" "$((${before:-0} + 1))"
finish
