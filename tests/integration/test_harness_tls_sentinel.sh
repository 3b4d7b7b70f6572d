#!/usr/bin/env bash
# lib.sh's TLS and Sentinel helpers tested on their own (the C harness has
# its own selftest, test_servers.sh): a TLS-only server, with and without
# client certificates, and a Sentinel that follows SENTINEL FAILOVER.
. "$(dirname "$0")/lib.sh"
export RATEL_NO_MODULE=1

certs=$(tls_certs)
missing=
for f in ca other-ca server expired wrong-name client other-client; do
    [ -s "$certs/$f.crt" ] && [ -s "$certs/$f.key" ] || missing="$missing $f"
done
same certs "$missing" ""

port=$(redis_start_tls) || fail tls.start "did not start"
same tls.ping "$(rcli_tls "$port" PING)" PONG
same tls.plain_port_off "$(rcli_tls "$port" CONFIG GET port | sed -n 2p)" 0
got=$(redis-cli -p "$port" PING 2>&1)
if [ "$got" != PONG ]; then ok tls.plain_refused; else
    fail tls.plain_refused "a plain PING was answered"
fi
redis_stop "$port"
if rcli_tls "$port" PING >/dev/null 2>&1; then
    fail tls.stop "still answering"
else
    ok tls.stop
fi

port=$(redis_start_tls --auth-clients) || fail tls.auth_start "did not start"
same tls.client_cert "$(rcli_tls "$port" PING)" PONG
got=$(redis-cli --tls --cacert "$certs/ca.crt" -p "$port" PING 2>&1)
if [ "$got" != PONG ]; then ok tls.no_client_cert; else
    fail tls.no_client_cert "answered without a client certificate"
fi
port=$(redis_start_tls --cert expired) || fail tls.expired_start "did not start"
got=$(redis-cli --tls --cacert "$certs/ca.crt" -p "$port" PING 2>&1)
contains tls.expired_refused "$got" "certificate verify failed"

linked() { redis-cli -p "$1" ROLE 2>/dev/null | grep -qx connected; }
primary=$(redis_start)
replica=$(redis_start --replicaof 127.0.0.1 "$primary")
if wait_for 20 linked "$replica"; then ok sentinel.replica; else
    fail sentinel.replica "not linked to $primary"
fi
sport=$(sentinel_start "$primary") || fail sentinel.start "did not start"
if sentinel_wait "$sport" "$primary" 1; then ok sentinel.wait; else
    fail sentinel.wait "names $(sentinel_primary "$sport"), want $primary"
fi
if sentinel_failover "$sport" "$replica"; then ok sentinel.failover; else
    fail sentinel.failover "names $(sentinel_primary "$sport"), want $replica"
fi
same sentinel.new_primary "$(sentinel_primary "$sport")" "$replica"
finish
