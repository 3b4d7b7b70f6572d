#!/usr/bin/env bash
# rateld as Envoy's Rate Limit Quota Service (RLQS): three Envoys of our
# own (rlqs_client.py: python3-grpcio, stubs generated from proto/ at run
# time) on one bucket, each spending only what it is assigned, against a
# real rateld: the assigned rates sum to at most the policy's rate at
# every instant, follow the reported usage (a share moves only once the
# old assignment expired), a reload that drops the bucket abandons it,
# malformed messages get a gRPC error, and SIGTERM expires every
# assignment (TTL 0) before rateld exits 0. The configuration errors of
# rlqs: are checked by --check-config. RATELD_WRAP (e.g. valgrind)
# prefixes rateld.
. "$(dirname "$0")/lib.sh"

py=/usr/bin/python3 # Debian's: python3-grpcio and python3-grpc-tools
rateld=$build/rateld
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"
require_built rateld

h=$(free_port)
g=$(free_port)
mkdir -p "$tmp/erl"
# config NAME BUCKETS: a rateld file with the rlqs buckets BUCKETS.
config() {
    cat >"$tmp/$1.yaml" <<YAML
listen: 127.0.0.1:$h
policies:
  api:
    rules: [60/1s, 500000/1h]
  conns:
    rules: [5/30s:concurrent]
envoy:
  listen: 127.0.0.1:$g
  config_dir: erl
rlqs:
  ttl_ms: 2000
  grace_ms: 200
  unmatched: deny
  buckets: $2
YAML
}
# The rateld file docs/envoy.md prints (<!-- snippet: rlqs-rateld -->), as
# printed but for its ports and the (empty) ERL directory; and the same
# without the bucket, for the reload.
doc_snippet "$root/docs/envoy.md" rlqs-rateld >"$tmp/snippet.yaml"
sed -e "s/^listen: 127.0.0.1:8080/listen: 127.0.0.1:$h/" \
    -e "s/^  listen: 127.0.0.1:8081/  listen: 127.0.0.1:$g/" \
    -e "s/config_dir: ratelimit/config_dir: erl/" "$tmp/snippet.yaml" >"$tmp/rateld.yaml"
sed -e "s/match: {name: api}/match: {name: other}/" "$tmp/rateld.yaml" >"$tmp/nobucket.yaml"
same doc_snippet_moved "$(grep -c "127.0.0.1:$h\|127.0.0.1:$g\|config_dir: erl\|name: api" "$tmp/rateld.yaml")" 4

# --check-config: the section's mistakes, named.
config bad_policy "[{match: {name: api}, policy: nosuch}]"
contains check_unknown_policy "$("$rateld" --check-config "$tmp/bad_policy.yaml" 2>&1)" 'rlqs.buckets[0].policy: no policy "nosuch"'
config bad_concurrent "[{match: {name: api}, policy: conns}]"
contains check_concurrent "$("$rateld" --check-config "$tmp/bad_concurrent.yaml" 2>&1)" 'policy "conns" has only concurrent rules'
config bad_empty "[{policy: api}]"
contains check_no_match "$("$rateld" --check-config "$tmp/bad_empty.yaml" 2>&1)" 'rlqs.buckets[0]: needs match: or key:'
contains check_ok "$("$rateld" --check-config "$tmp/rateld.yaml" 2>&1)" "rateld.yaml: ok"

if server_start rateld "$h" "${rateld_wrap[@]}" "$rateld" --config "$tmp/rateld.yaml"; then
    pid=$server_pid
    # gRPC health: the quota service is served while rlqs: configures it.
    same health_rlqs_serving "$("$py" "$lib_here/rls_client.py" health "127.0.0.1:$g" \
        envoy.service.rate_limit_quota.v3.RateLimitQuotaService)" SERVING
    out=$("$py" "$lib_here/rlqs_client.py" three "127.0.0.1:$g" "$pid" \
        "$tmp/rateld.yaml" "$tmp/nobucket.yaml" 2>&1)
    printf '%s\n' "$out" | grep -E '^(ok|FAIL|#) '
    p=$(grep -c '^ok ' <<<"$out")
    f=$(grep -c '^FAIL ' <<<"$out")
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$p" -gt 0 ] || fail rlqs_client "$(tail -20 <<<"$out")"
    # rateld exits 0 after the client's SIGTERM (under valgrind: 99 on an
    # error or a leak).
    server_stop rateld
    same rlqs_exit "$stopped" 0
    contains rlqs_log_reloaded "$(cat "$tmp/rateld.log")" "configuration reloaded"
else
    fail rlqs_start "rateld did not start"
fi
finish
