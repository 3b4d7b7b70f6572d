#!/usr/bin/env bash
# rateld as Envoy's rate limit service: a real gRPC client (python3-grpcio,
# stubs generated from proto/ by python3-grpc-tools at run time) against
# real rateld processes, on the memory store and on a real redis-server.
#
#   examples/envoy: the shipped rateld.yaml and envoyproxy/ratelimit file
#     (20 a minute per remote_address): 20 OK, then OVER_LIMIT with
#     duration_until_reset; gRPC health; an unknown domain
#   all-or-nothing across descriptors, hits_addend (request and descriptor)
#   reload: a good file is taken, a bad one refused with FILE:LINE
#   merge_domain_config: a domain in two files refused by --check-config
#     without it, accepted with it; decisions from both files' descriptors;
#     a top-level descriptor in two files refused (check and reload)
#   Redis: two rateld share one limit; a killed redis-server answers per
#     the store's failure policy (closed, open)
#   hostile HTTP/2 (h2_hostile.py); every rateld exits 0 on SIGTERM
#   (RATELD_WRAP, e.g. valgrind, prefixes rateld)
. "$(dirname "$0")/lib.sh"

py=/usr/bin/python3 # Debian's: python3-grpcio and python3-grpc-tools
client=$lib_here/rls_client.py
rateld=$build/rateld
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"
[ -x "$rateld" ] || { echo "FAIL $rateld not built"; echo "0 passed, 1 failed"; exit 1; }

rls() { "$py" "$client" call "127.0.0.1:$1" "${@:2}"; }
health() { "$py" "$client" health "127.0.0.1:$1" "${@:2}"; }
up() { curl -s -o /dev/null "http://127.0.0.1:$1/healthz"; }

# start NAME CONFIG HTTP_PORT: runs rateld, waits for its HTTP side.
start() {
    "${rateld_wrap[@]}" "$rateld" --config "$2" >"$tmp/$1.log" 2>&1 &
    echo $! >"$tmp/pids/rateld-$1"
    wait_for 20 up "$3" || fail "start_$1" "$(cat "$tmp/$1.log")"
}
# stop NAME: SIGTERM; rateld must exit 0 (under valgrind, an error or a
# leak makes it 99).
stop() {
    local pid rc
    pid=$(cat "$tmp/pids/rateld-$1")
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    rm -f "$tmp/pids/rateld-$1"
    same "exit_$1" "$rc" 0
}

# ---- the shipped example, its envoyproxy/ratelimit file unchanged
contains example_checks "$("$rateld" --check-config "$root/examples/envoy/rateld.yaml" 2>&1)" "rateld.yaml: ok: 0 policies"

h1=$(free_port)
g1=$(free_port)
sed -e "s/^listen: .*/listen: 127.0.0.1:$h1/" \
    -e "s/^  listen: .*/  listen: 127.0.0.1:$g1/" \
    -e "s|config_dir: ratelimit|config_dir: $root/examples/envoy/ratelimit|" \
    "$root/examples/envoy/rateld.yaml" >"$tmp/example.yaml"
start example "$tmp/example.yaml" "$h1"
out=$(rls "$g1" ratel remote_address=127.0.0.1 --times 22)
same example_ok_20 "$(grep -c '^OK \[OK 20/MINUTE' <<<"$out")" 20
same example_first "$(head -1 <<<"$out" | grep -o 'remaining=[0-9]*')" remaining=19
same example_over_2 "$(grep -c '^OVER_LIMIT \[OVER_LIMIT 20/MINUTE remaining=0 reset_ms=[1-9]' <<<"$out")" 2
contains example_headers "$(tail -1 <<<"$out")" 'Retry-After: '
same example_other_ip "$(rls "$g1" ratel remote_address=10.0.0.9 | cut -c1-3)" "OK "
same health_serving "$(health "$g1")" SERVING
same health_rls "$(health "$g1" envoy.service.ratelimit.v3.RateLimitService)" SERVING
contains health_unknown "$(health "$g1" no.such.Service)" "ERROR NOT_FOUND"
contains health_rlqs_not_configured "$(health "$g1" envoy.service.rate_limit_quota.v3.RateLimitQuotaService)" \
    "ERROR NOT_FOUND the rate limit quota service is not configured"
contains unknown_domain "$(rls "$g1" nosuch remote_address=1.2.3.4)" "ERROR FAILED_PRECONDITION unknown domain"
contains unmatched_key "$(rls "$g1" ratel other_key=1)" "OK [OK]"
contains no_descriptors "$(rls "$g1" ratel)" "ERROR INVALID_ARGUMENT"
m=$(curl -s "http://127.0.0.1:$h1/metrics")
contains metric_denied "$m" 'ratel_decisions_total{policy="envoy:ratel:remote_address",outcome="denied",source="store"} 2'
contains metric_grpc "$m" 'ratel_grpc_responses_total{code="FAILED_PRECONDITION"} 1'
stop example

# The client printed in docs/envoy.md, as printed, on a fresh example.
start example "$tmp/example.yaml" "$h1"
snippet=$(awk '/^## A client of your own/ { f = 1 } f && /^```python/ { p = 1; next } p && /^```/ { exit } p' "$root/docs/envoy.md")
out=$(cd "$root" && RATEL_GRPC=127.0.0.1:$g1 "$py" -c "$snippet" 2>&1)
contains doc_client_20 "$out" "20 OK remaining 0 reset in"
contains doc_client_21 "$out" "21 OVER_LIMIT remaining 0 reset in"
stop example

# ---- envoyproxy/ratelimit's README examples, as its README answers them
h5=$(free_port)
g5=$(free_port)
mkdir -p "$tmp/readme"
cat >"$tmp/readme/mongo.yaml" <<'EOF'
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
EOF
cat >"$tmp/readme/edge.yaml" <<'EOF'
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
EOF
cat >"$tmp/readme/messaging.yaml" <<'EOF'
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
EOF
cat >"$tmp/readme/example.yaml" <<'EOF'
domain: example
descriptors:
  - key: path
    value: "/foo*"
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: foo
    value: bar
    rate_limit:
      unlimited: true
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
        shadow_mode: true
  - key: key2
    rate_limit:
      name: key2_limit
      unit: minute
      requests_per_unit: 5
  - key: key3
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces:
        - name: key2_limit
EOF
cat >"$tmp/readme.yaml" <<EOF
listen: 127.0.0.1:$h5
envoy:
  listen: 127.0.0.1:$g5
  config_dir: readme
EOF
start readme "$tmp/readme.yaml" "$h5"
contains readme_mongo_users "$(rls "$g5" mongo_cps database=users)" "OK [OK 500/SECOND remaining=499 "
contains readme_mongo_other "$(rls "$g5" mongo_cps database=other)" "OK [OK]"
same readme_blacklist "$(rls "$g5" edge_proxy_per_ip remote_address=50.0.0.5 | cut -d' ' -f1-3)" "OVER_LIMIT [OVER_LIMIT 0/SECOND"
out=$(rls "$g5" edge_proxy_per_ip remote_address=10.0.0.1 --times 11)
same readme_per_ip_10 "$(grep -c '^OK \[OK 10/SECOND' <<<"$out")" 10
same readme_per_ip_11th "$(tail -1 <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
same readme_per_ip_other "$(rls "$g5" edge_proxy_per_ip remote_address=10.0.0.2 | cut -d' ' -f1-3)" "OK [OK 10/SECOND"
out=$(rls "$g5" messaging message_type=marketing,to_number=2061111111 --times 6)
same readme_nested_5 "$(grep -c '^OK \[OK 5/DAY' <<<"$out")" 5
same readme_nested_6th "$(tail -1 <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
contains readme_nested_apart "$(rls "$g5" messaging to_number=2061111111)" "OK [OK 100/DAY remaining=99 "
contains readme_wildcard "$(rls "$g5" example path=/foo/bar)" "OK [OK 20/MINUTE remaining=19 "
contains readme_wildcard_prefix_only "$(rls "$g5" example path=/bar/foo)" "OK [OK]"
contains readme_unlimited "$(rls "$g5" example foo=bar)" "OK [OK]"
out=$(rls "$g5" example key1=value1,subkey1=s --times 7)
same readme_shadow_ok "$(grep -c '^OK ' <<<"$out")" 7
out=$(rls "$g5" example key2=k key3=k)
same readme_replaces "$out" "OK [OK] [OK 10/MINUTE remaining=9 reset_ms=60000] | RateLimit-Policy: \"key3-0\";q=10;w=60; RateLimit: \"key3-0\";r=9;t=60"
contains readme_replaced_alone "$(rls "$g5" example key2=k)" "OK [OK 5/MINUTE remaining=4 "
stop readme

# ---- all-or-nothing, hits_addend, shadow, reload
h2=$(free_port)
g2=$(free_port)
mkdir -p "$tmp/erl"
cat >"$tmp/erl/app.yaml" <<'EOF'
domain: app
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: route
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: audit
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: bulk
    rate_limit: {unit: hour, requests_per_unit: 100}
EOF
cat >"$tmp/erl/hostile.yaml" <<'EOF'
domain: hostile
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000000}
EOF
cat >"$tmp/app.yaml" <<EOF
listen: 127.0.0.1:$h2
envoy:
  listen: 127.0.0.1:$g2
  config_dir: erl
  max_message_bytes: 4KiB
EOF
start app "$tmp/app.yaml" "$h2"
out=$(rls "$g2" app user=ann route=/login --times 3)
same aon_third_over "$(sed -n 3p <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
# The third call was denied by route: user was charged twice, not three
# times (envoyproxy/ratelimit would have charged it).
contains aon_user_uncharged "$(rls "$g2" app user=ann)" "remaining=2 "
contains hits_request "$(rls "$g2" app bulk=b1 --hits 30)" "remaining=70 "
contains hits_descriptor "$(rls "$g2" app 'bulk=b1;hits=5' --hits 30)" "remaining=65 "
contains hits_zero_peeks "$(rls "$g2" app 'bulk=b1;hits=0')" "remaining=65 "
out=$(rls "$g2" app audit=x --times 3)
same shadow_always_ok "$(grep -c '^OK ' <<<"$out")" 3
contains shadow_counted "$(curl -s "http://127.0.0.1:$h2/metrics")" 'ratel_decisions_total{policy="envoy:app:audit",outcome="shadow_denied",source="store"} 2'

# What no gRPC library sends (tests/integration/h2_hostile.py): each case
# gets its status or GOAWAY, and a valid call is answered after it.
hostile_done=0
while read -r word name why; do
    case $word in
    ok) ok "hostile_$name" ;;
    FAIL) fail "hostile_${name%:}" "$why" ;;
    done) hostile_done=1 ;;
    esac
done < <("$py" "$lib_here/h2_hostile.py" "127.0.0.1:$g2" 2>&1 | tee "$tmp/hostile.out")
same hostile_ran_to_the_end "$hostile_done" 1
[ "$hostile_done" = 1 ] || tail -20 "$tmp/hostile.out"
kill -0 "$(cat "$tmp/pids/rateld-app")" && ok hostile_survived || fail hostile_survived "$(tail -5 "$tmp/app.log")"

# Reload: a good change is taken, a broken file refused (old one kept).
sed -i 's/requests_per_unit: 100}/requests_per_unit: 1000}/' "$tmp/erl/app.yaml"
kill -HUP "$(cat "$tmp/pids/rateld-app")"
wait_for 10 grep -q 'msg="configuration reloaded"' "$tmp/app.log" || fail reload_logged "$(cat "$tmp/app.log")"
contains reload_taken "$(rls "$g2" app bulk=b2)" "OK [OK 1000/HOUR remaining=999 "
printf 'domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n' >"$tmp/erl/app.yaml"
kill -HUP "$(cat "$tmp/pids/rateld-app")"
wait_for 10 grep -q 'reload refused' "$tmp/app.log" || fail reload_refused "$(cat "$tmp/app.log")"
contains reload_names_file "$(grep -a 'reload' "$tmp/app.log" | tail -1)" "app.yaml:4"
contains reload_kept "$(rls "$g2" app bulk=b3)" "OK [OK 1000/HOUR remaining=999 "
stop app

# ---- merge_domain_config: one domain in two files (ERL's
# MERGE_DOMAIN_CONFIG), refused unless it is on; decisions use both files.
# The configuration and files are docs/envoy.md's snippets, as printed but
# for the ports and the directory; docs/config.md's is checked too.
h6=$(free_port)
g6=$(free_port)
# doc_block PAGE NAME: the fenced block after "<!-- snippet: NAME -->".
doc_block() { doc_snippet "$root/docs/$1" "$2"; }
mkdir -p "$tmp/merge"
doc_block envoy.md envoy-merge-a >"$tmp/merge/a.yaml"
doc_block envoy.md envoy-merge-b >"$tmp/merge/b.yaml"
doc_block envoy.md envoy-merge | sed -e "s/:8080\$/:$h6/; s/:8081\$/:$g6/; s/config_dir: ratelimit/config_dir: merge/" >"$tmp/merge_on.yaml"
grep -v merge_domain_config "$tmp/merge_on.yaml" >"$tmp/merge_off.yaml"
contains merge_doc_setting "$(cat "$tmp/merge_on.yaml")" "merge_domain_config: true"
out=$("$rateld" --check-config "$tmp/merge_off.yaml" 2>&1)
same merge_off_refused "$?" 1
contains merge_off_names_both "$out" "merge/b.yaml:1: domain: \"shop\" is also the domain of $tmp/merge/a.yaml (line 1)"
contains merge_off_says_how "$out" "envoy: {merge_domain_config: true}"
contains merge_on_accepted "$("$rateld" --check-config "$tmp/merge_on.yaml" 2>&1)" "merge_on.yaml: ok: "
doc_block config.md config-envoy-merge | sed -e "s/:8081\$/:$g6/; s/config_dir: ratelimit/config_dir: merge/" >"$tmp/merge_config_md.yaml"
contains merge_config_md_on "$("$rateld" --check-config "$tmp/merge_config_md.yaml" 2>&1)" "merge_config_md.yaml: ok: "
sed -i '$d' "$tmp/merge_config_md.yaml"
contains merge_config_md_off "$("$rateld" --check-config "$tmp/merge_config_md.yaml" 2>&1)" "is also the domain of"
start merge "$tmp/merge_on.yaml" "$h6"
out=$(rls "$g6" shop user=ann --times 4)
same merge_first_file_3 "$(grep -c '^OK \[OK 3/MINUTE' <<<"$out")" 3
same merge_first_file_4th "$(tail -1 <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
out=$(rls "$g6" shop tenant=acme,user=bob --times 3)
same merge_second_nested_2 "$(grep -c '^OK \[OK 2/MINUTE' <<<"$out")" 2
same merge_second_nested_3rd "$(tail -1 <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
contains merge_wildcard_file_order "$(rls "$g6" shop path=/api/x)" "OK [OK 50/MINUTE remaining=49 "
# b.yaml's shadow_mode: over its limit, still OK (and counted as such).
out=$(rls "$g6" shop path=/web --times 2)
same merge_second_shadow "$(grep -c '^OK \[OK 1/MINUTE' <<<"$out")" 2
contains merge_second_shadow_over "$(tail -1 <<<"$out")" "remaining=0 "
contains merge_second_shadow_counted "$(curl -s "http://127.0.0.1:$h6/metrics")" 'ratel_decisions_total{policy="envoy:shop:path_/*",outcome="shadow_denied",source="store"} 1'
# The same top-level descriptor in a third file: refused, naming both.
printf 'domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 9}\n' >"$tmp/merge/c.yaml"
out=$("$rateld" --check-config "$tmp/merge_on.yaml" 2>&1)
contains merge_conflict_refused "$out" "merge/c.yaml:3: descriptors[0]: key \"user\" without value is also a top-level descriptor of domain \"shop\" in $tmp/merge/a.yaml (line 3)"
kill -HUP "$(cat "$tmp/pids/rateld-merge")"
wait_for 10 grep -q 'reload refused' "$tmp/merge.log" || fail merge_reload_refused "$(cat "$tmp/merge.log")"
contains merge_reload_names_file "$(grep -a 'reload' "$tmp/merge.log" | tail -1)" "c.yaml:3"
contains merge_reload_kept "$(rls "$g6" shop tenant=acme,user=eve)" "OK [OK 2/MINUTE remaining=1 "
stop merge

# ---- the Redis store: two rateld, one limit; failure policies
if command -v redis-server >/dev/null; then
    rport=$(redis_start) || fail redis "did not start"
    policies=(closed open local)
    for i in 0 1 2; do
        hs[i]=$(free_port)
        gs[i]=$(free_port)
        cat >"$tmp/r$i.yaml" <<EOF
listen: 127.0.0.1:${hs[i]}
store:
  type: redis
  url: redis://127.0.0.1:$rport
  on_failure: ${policies[i]}
  timeout_ms: 200
envoy:
  listen: 127.0.0.1:${gs[i]}
  config_dir: $root/examples/envoy/ratelimit
EOF
        start "r$i" "$tmp/r$i.yaml" "${hs[i]}"
    done
    # 30 calls alternating between two rateld: 20 pass in all.
    ok_calls=0
    for _ in $(seq 15); do
        for g in "${gs[0]}" "${gs[1]}"; do
            [[ $(rls "$g" ratel remote_address=10.7.7.7) == "OK "* ]] && ok_calls=$((ok_calls + 1))
        done
    done
    same redis_shared_limit "$ok_calls" 20
    contains redis_key "$(rcli "$rport" --scan --pattern 'envoy/*')" "envoy/5:ratel/14:remote_address=8:10.7.7.7"
    kill -9 "$(cat "$tmp/redis-$rport/pid")"
    same redis_down_closed "$(rls "${gs[0]}" ratel remote_address=10.8.8.8 | cut -d' ' -f1)" OVER_LIMIT
    same redis_down_open "$(rls "${gs[1]}" ratel remote_address=10.8.8.8 | cut -d' ' -f1)" OK
    # local: rateld's own memory decides meanwhile, the same limit.
    out=$(rls "${gs[2]}" ratel remote_address=10.8.8.8 --times 21)
    same redis_down_local_20 "$(grep -c '^OK ' <<<"$out")" 20
    same redis_down_local_21st "$(tail -1 <<<"$out" | cut -d' ' -f1)" OVER_LIMIT
    contains redis_down_metrics "$(curl -s "http://127.0.0.1:${hs[2]}/metrics")" 'source="local"'
    for i in 0 1 2; do stop "r$i"; done
fi
finish
