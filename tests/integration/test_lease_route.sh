#!/usr/bin/env bash
# test_lease_route.sh - a leased policy in a gateway route with another
# policy (one all-or-nothing group) on a real redis-server: the leased
# member is answered from its slice, the other by Redis, and when the
# other refuses, the leased member's permit goes back into its slice (a
# refused request charges no rule): `spent` counts admitted requests
# only, nothing is stranded.
. "$(dirname "$0")/lib.sh"

require_built rateld
rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
port=$(free_port)
cat >"$tmp/route.yaml" <<EOF
listen: 127.0.0.1:$port
trusted_proxies: [127.0.0.1]
store:
  type: redis
  url: redis://127.0.0.1:$rport
policies:
  per_user:
    rules: [2/1m]
    key: header:X-User
  all:
    rules: [100/1m]
    key: global
    lease: {ttl_ms: 60000, max_slice: 10}
routes:
  - path: /api
    policies: [per_user, all]
EOF
read -r -a wrap <<<"${RATELD_WRAP:-}"
server_start route "$port" "${wrap[@]}" "$build/rateld" --config "$tmp/route.yaml" ||
    { finish; exit 1; }

# metric NAME_AND_LABELS: its value on /metrics.
metric() {
    curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
# auth USER: /v1/auth for /api as USER; prints the status.
auth() {
    curl -s -o /dev/null -w '%{http_code}' -H "X-User: $1" "http://127.0.0.1:$port/v1/auth/api"
}

# 30 users, 2 requests each: 60 admitted, most of "all" from slices.
admitted=0
for u in $(seq 30); do
    for _ in 1 2; do [ "$(auth "u$u")" = 200 ] && admitted=$((admitted + 1)); done
done
same admitted_60 "$admitted" 60
lease=$(metric 'ratel_decisions_total{policy="all",outcome="allowed",source="lease"}')
[ "${lease:-0}" -ge 40 ] && ok from_slices || fail from_slices "${lease:-0} of 60 from slices"
same spent_is_admitted "$(metric 'ratel_lease_permits_total{policy="all",what="spent"}')" "$lease"

# One user past per_user's 2: each refusal puts its "all" permit back.
spent=$(metric 'ratel_lease_permits_total{policy="all",what="spent"}')
codes=""
for _ in 1 2 3 4 5 6; do codes="$codes $(auth heavy)"; done
same heavy_codes "$codes" " 200 200 429 429 429 429"
after=$(metric 'ratel_lease_permits_total{policy="all",what="spent"}')
lease_after=$(metric 'ratel_decisions_total{policy="all",outcome="allowed",source="lease"}')
# Spent grows by the admitted only (at most 2; less when a slice ran out
# and Redis decided one).
[ $((after - spent)) -le 2 ] && ok refused_put_back ||
    fail refused_put_back "spent went from $spent to $after for 2 admitted"
same nothing_stranded "$(metric 'ratel_lease_permits_total{policy="all",what="stranded"}')" 0
[ "$lease_after" -gt "$lease" ] && ok refused_members_from_slices ||
    fail refused_members_from_slices "no member answered from a slice ($lease -> $lease_after)"

# The key ("all:*": global) on Redis: what was admitted plus what rateld holds.
leased=$(metric 'ratel_lease_permits_total{policy="all",what="leased"}')
used=$(rcli "$rport" RATEL.INFO "all:*" | sed -n '/^used$/{n;p;q}')
exact=$(metric 'ratel_decisions_total{policy="all",outcome="allowed",source="store"}')
same redis_counts_leased_and_exact "$used" "$((leased + exact))"
server_stop route
same stopped "$stopped" 0
# Stopped: what it held went back; Redis counts the admitted only.
used=$(rcli "$rport" RATEL.INFO "all:*" | sed -n '/^used$/{n;p;q}')
same given_back_on_stop "$used" "$((admitted + 2))"

finish
