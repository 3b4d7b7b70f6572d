#!/usr/bin/env bash
# rateld end to end over real HTTP on loopback (embedded store): every
# endpoint, status and header; multi-rule and shadow policies; a missing key
# source; the admin token; reloads good and bad; X-Forwarded-For from
# untrusted and trusted peers; hostile HTTP from raw sockets; shutdown.
# Nothing here waits for a limit to move: every check happens inside the
# rules' windows.
. "$(dirname "$0")/lib.sh"

require_built rateld
rateld=$build/rateld

port=$(free_port)
base=http://127.0.0.1:$port
conf=$tmp/rateld.yaml
log=$tmp/rateld.log
# Tokens as `openssl rand -hex 32` makes them (no example value).
admin_token=3b9f0c51e0a94c3f9d27b1a86e4f02d7c815aa6093e7d2b4f1c86a0e5d3b7f92
api_token=9e41d7c2b06a58f31d9c4e7a02b5f8d63c1e90a7b4d2f65e8a3c017d9b2e4f60

# write_config TRUSTED_PROXIES_LIST [EXTRA_POLICY_YAML]
write_config() {
    cat >"$conf" <<EOF
listen: 127.0.0.1:$port
threads: 2
admin_token: "$admin_token"
api_token: "$api_token"
trusted_proxies: [$1]
limits:
  max_header_bytes: 4096
  max_body_bytes: 1024
  request_timeout_ms: 700
store:
  type: memory
  max_bytes: 8MiB
policies:
  ping:
    rules: [20/1m]
    key: ip
  sms:
    rules: [1/60s, 10/1d]
    key: query:telephone
  multi:
    rules: [2/1m, 3/1h]
    key: header:X-User
  watch:
    rules: [1/1m]
    key: ip
    shadow: true
  shared:
    rules: [2/1m]
    key: header:X-Tenant
    on_missing: shared
  g:
    rules: ["5/1s:gcra,burst=3"]
    key: global
  jobs:
    rules: [3/1m, "2/30s:concurrent"]
    key: header:X-User
${2:-}
routes:
  - path: /api/ping
    policies: [ping]
  - path: /sendCaptcha
    method: GET
    policies: [sms]
  - path: /form
    method: POST
    policies: [multi, shared]
EOF
}

# RATELD_WRAP (e.g. "valgrind -q --error-exitcode=99") prefixes rateld;
# then a valgrind error makes its exit status 99 and sigterm_exit fails.
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"

start_rateld() {
    server_start rateld "$port" "${rateld_wrap[@]}" "$rateld" --config "$conf" || return 1
    rateld_pid=$server_pid
}

# code URL [curl args...]: the status code
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
# header NAME FILE: a response header's value from curl -D output
header() { grep -i "^$1:" "$2" | head -1 | cut -d: -f2- | tr -d '\r' | sed 's/^ //'; }
metric() { curl -s "$base/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }' | head -1; }

write_config ""
if ! start_rateld; then
    fail start "rateld did not come up"
    finish; exit 1
fi
ok start

# --- the seeds' demo: 20 allowed, the 21st is 429 with Retry-After
codes=$(for i in $(seq 22); do code "$base/v1/acquire?policy=ping&key=127.0.0.1"; echo; done | tr '\n' ' ')
same demo_codes "$codes" "$(printf '200 %.0s' $(seq 20))429 429 "
curl -s -D "$tmp/h" -o "$tmp/b" "$base/v1/acquire?policy=ping&key=127.0.0.1"
ra=$(header Retry-After "$tmp/h")
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && [ "$ra" -le 60 ]; then ok retry_after; else fail retry_after "[$ra]"; fi
contains ratelimit_policy "$(header RateLimit-Policy "$tmp/h")" 'q=20'
contains ratelimit_policy_window "$(header RateLimit-Policy "$tmp/h")" 'w=60'
contains ratelimit_remaining "$(header RateLimit "$tmp/h")" 'r=0'
contains content_type "$(header Content-Type "$tmp/h")" 'application/json'
body=$(cat "$tmp/b")
contains body_denied "$body" '"allowed":false'
contains body_remaining "$body" '"remaining":0'
contains body_policy "$body" '"policy":"ping"'
contains body_source "$body" '"source":"store"'
if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/b" 2>/dev/null; then ok body_json; else fail body_json "$body"; fi

# --- POST JSON, peek, cost, errors
same post_allowed "$(code -X POST -d '{"policy":"ping","key":"10.0.0.1"}' "$base/v1/acquire")" 200
same post_cost "$(curl -s -X POST -d '{"policy":"ping","key":"10.0.0.1","cost":5}' "$base/v1/acquire" | grep -o '"remaining":[0-9]*')" '"remaining":14'
same peek_charges_nothing "$(curl -s "$base/v1/acquire?policy=ping&key=10.0.0.1&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":14'
same peek_again "$(curl -s "$base/v1/acquire?policy=ping&key=10.0.0.1&peek=true" | grep -o '"remaining":[0-9]*')" '"remaining":14'
same bad_json "$(code -X POST -d '{"policy":' "$base/v1/acquire")" 400
same unknown_field "$(code -X POST -d '{"policy":"ping","key":"a","color":1}' "$base/v1/acquire")" 400
# Strict JSON: trailing data, a raw NUL, invalid UTF-8, \u0000 and a field
# given twice are each a clear 400 whose body is itself valid JSON.
isjson() { python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null && echo json || echo not-json; }
strict() { # name, body (printf format)
    local out
    # shellcheck disable=SC2059 # the body is a format: its \NNN make the bytes
    out=$(printf "$2" | curl -s -w '\n%{http_code}' -X POST --data-binary @- "$base/v1/acquire")
    same "strict_$1" "${out##*$'\n'}" 400
    same "strict_${1}_body" "$(printf '%s' "${out%$'\n'*}" | isjson)" json
}
strict trailing '{"policy":"ping","key":"ab"}xyz'
strict nul '{"policy":"ping","key":"a\000b"}'
strict utf8 '{"policy":"ping","key":"a\377b"}'
strict escaped_nul '{"policy":"ping","key":"13811110001\\u0000evil"}'
strict twice '{"policy":"ping","key":"a","key":"b"}'
contains strict_names_problem "$(printf '{"policy":"ping","key":"ab"}xyz' | curl -s -X POST --data-binary @- "$base/v1/acquire")" 'trailing'
same query_twice "$(code "$base/v1/acquire?policy=ping&key=a&key=b")" 400
# A parameter in both the query and the body: refused by name (the body
# used to win silently, deciding another policy than the query said).
out=$(curl -s -w '\n%{http_code}' -X POST -d '{"policy":"ping","key":"b"}' "$base/v1/acquire?policy=sms&key=q")
same query_and_body "${out##*$'\n'}" 400
contains query_and_body_names "$out" 'policy is given both in the query and in the body'
same query_and_body_json "$(printf '%s' "${out%$'\n'*}" | isjson)" json
contains query_and_body_key "$(curl -s -X POST -d '{"policy":"ping","key":"b"}' "$base/v1/acquire?key=q")" 'key is given both'
contains query_and_body_cost "$(curl -s -X POST -d '{"policy":"ping","key":"b","cost":1}' "$base/v1/acquire?cost=2")" 'cost is given both'
# The same name spelled with escapes (%69 in the query, \u0069 in JSON) or
# given empty is the same parameter.
contains query_and_body_escaped "$(curl -s -X POST -d '{"pol\u0069cy":"ping","key":"b"}' "$base/v1/acquire?pol%69cy=sms")" 'policy is given both'
contains query_and_body_empty "$(curl -s -X POST -d '{"policy":"ping","key":"b"}' "$base/v1/acquire?key=")" 'key is given both'
same query_and_body_unused "$(curl -s "$base/v1/acquire?policy=sms&key=q&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":1'
# Split between the two, or all in the query of a POST: one request.
same post_query_only "$(code -X POST "$base/v1/acquire?policy=ping&key=10.0.0.2")" 200
same post_split "$(curl -s -X POST -d '{"key":"10.0.0.2"}' "$base/v1/acquire?policy=ping" | grep -o '"remaining":[0-9]*')" '"remaining":18'
same post_nothing "$(code -X POST "$base/v1/acquire")" 400
contains unknown_policy_lists "$(curl -s "$base/v1/acquire?policy=nope&key=a")" 'no policy named \"nope\"; defined: ping, sms, multi'
same not_utf8_404_is_json "$(curl -s "$base/v1/%ff%fe" | isjson)" json
same unknown_policy "$(code "$base/v1/acquire?policy=nope&key=a")" 404
same missing_key "$(code "$base/v1/acquire?policy=ping")" 400
same empty_key "$(code "$base/v1/acquire?policy=ping&key=")" 400
same bad_cost "$(code "$base/v1/acquire?policy=ping&key=a&cost=0")" 400
same huge_cost "$(code "$base/v1/acquire?policy=ping&key=a&cost=21")" 400
contains huge_cost_says "$(curl -s "$base/v1/acquire?policy=ping&key=a&cost=21")" 'can ever admit'
same bad_escape "$(code "$base/v1/acquire?policy=ping&key=%zz")" 400
same not_found "$(code "$base/nothing")" 404
same wrong_method "$(code -X DELETE "$base/v1/acquire?policy=ping&key=a")" 405
same healthz "$(code "$base/healthz")" 200
same readyz "$(code "$base/readyz")" 200

# --- multi-rule: the first rule binds; all-or-nothing
same multi_1 "$(code "$base/v1/acquire?policy=multi&key=u1")" 200
same multi_2 "$(code "$base/v1/acquire?policy=multi&key=u1")" 200
same multi_3 "$(code "$base/v1/acquire?policy=multi&key=u1")" 429
same multi_rule "$(curl -s "$base/v1/acquire?policy=multi&key=u1" | grep -o '"rule":[0-9]')" '"rule":0'

# --- gcra with a burst
gc=$(for i in 1 2 3 4; do code "$base/v1/acquire?policy=g&key=x"; echo; done | tr '\n' ' ')
same gcra_burst "$gc" "200 200 200 429 "

# --- max_wait reserves (gcra: RATEL_ALGO_RESERVES): past the burst, a
# request that fits within max_wait is admitted with the wait to sleep
curl -s -o /dev/null "$base/v1/acquire?policy=g&key=w&cost=3"
out=$(curl -s "$base/v1/acquire?policy=g&key=w&max_wait=1000")
contains max_wait_admits "$out" '"allowed":true'
if [[ $out =~ \"wait_ms\":([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -le 200 ]; then ok max_wait_wait_ms; else fail max_wait_wait_ms "$out"; fi
out=$(curl -s -X POST -d '{"policy":"g","key":"w2","cost":3}' "$base/v1/acquire")
contains max_wait_json_spent "$out" '"allowed":true'
out=$(curl -s -X POST -d '{"policy":"g","key":"w2","max_wait":1000}' "$base/v1/acquire")
contains max_wait_json "$out" '"allowed":true'
same max_wait_zero_denies "$(code "$base/v1/acquire?policy=g&key=w2&max_wait=0")" 429
same max_wait_not_gcra "$(code "$base/v1/acquire?policy=ping&key=w&max_wait=10")" 400
contains max_wait_not_gcra_says "$(curl -s "$base/v1/acquire?policy=ping&key=w&max_wait=10")" 'policy ping: max_wait needs every rule to be gcra; rule 1 (\"20/1m\") is sliding'
contains max_wait_range "$(curl -s "$base/v1/acquire?policy=g&key=w&max_wait=2592000001")" 'max_wait must be an integer from 0 to 2592000000, not \"2592000001\"'
contains max_wait_json_range "$(curl -s -X POST -d '{"policy":"g","key":"w","max_wait":-1}' "$base/v1/acquire")" 'max_wait must be an integer from 0 to 2592000000, not \"-1\"'
contains max_wait_not_refund "$(curl -s -X POST -H "Authorization: Bearer $api_token" -d '{"policy":"g","key":"w","max_wait":10}' "$base/v1/refund")" 'max_wait belongs to /v1/acquire'
# The slice commands' options (want, ttl, ...) are no endpoint's: in the
# query a name like any other, in a JSON body an unknown field (as at).
same slice_option_query_ignored "$(code "$base/v1/acquire?policy=ping&key=s1&ttl=5&want=3")" 200
contains slice_option_json_unknown "$(curl -s -X POST -d '{"policy":"ping","key":"s1","want":3}' "$base/v1/acquire")" 'field \"want\" is unknown'

# --- refund gives a permit back: POST only, with the api_token (or the
# admin token) once either is configured
api=(-H "Authorization: Bearer $api_token")
same refund "$(code -X POST "${api[@]}" -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 200
same after_refund "$(code "$base/v1/acquire?policy=multi&key=u1")" 200
same refund_admin_token "$(code -X POST -H "Authorization: Bearer $admin_token" -d '{"policy":"multi","key":"u9"}' "$base/v1/refund")" 200
same refund_x_admin_token "$(code -X POST -H "X-Admin-Token: $admin_token" -d '{"policy":"multi","key":"u9"}' "$base/v1/refund")" 200
curl -s -D "$tmp/h" -o "$tmp/b" "$base/v1/refund?policy=multi&key=u1"
same refund_get "$(head -1 "$tmp/h" | cut -d' ' -f2)" 405
same refund_get_allow "$(header Allow "$tmp/h")" POST
same refund_get_json "$(isjson <"$tmp/b")" json
contains refund_get_says "$(cat "$tmp/b")" 'method GET not allowed on /v1/refund; allowed: POST'
curl -s -D "$tmp/h" -o "$tmp/b" -X POST -d '{"policy":"multi","key":"u1"}' "$base/v1/refund"
same refund_no_token "$(head -1 "$tmp/h" | cut -d' ' -f2)" 401
contains refund_no_token_challenge "$(header WWW-Authenticate "$tmp/h")" 'Bearer'
contains refund_no_token_says "$(cat "$tmp/b")" 'refund needs a token: Authorization: Bearer TOKEN'
same refund_basic_auth "$(code -X POST -u "a:$api_token" -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 401
same refund_wrong_token "$(code -X POST -H "Authorization: Bearer ${api_token%?}1" -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 403
same refund_token_prefix "$(code -X POST -H "Authorization: Bearer ${api_token:0:32}" -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 403
same refund_token_longer "$(code -X POST -H "Authorization: Bearer ${api_token}x" -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 403
# A state change never comes from a URL alone: not even a POST's query.
same refund_query "$(code -X POST "${api[@]}" "$base/v1/refund?policy=multi&key=u1")" 400
contains refund_query_says "$(curl -s -X POST "${api[@]}" -d '{"key":"u1"}' "$base/v1/refund?policy=multi")" 'refund takes its parameters in a JSON body'
same reset_query "$(code -X POST -H "Authorization: Bearer $admin_token" "$base/v1/reset?policy=multi&key=u1")" 400
same refund_empty_bearer "$(code -X POST -H "Authorization: Bearer " -d '{"policy":"multi","key":"u1"}' "$base/v1/refund")" 401
# The attack: a client that can reach rateld gives its own key's permits
# back. Without the token it cannot, by GET or by POST.
sms_k="$base/v1/acquire?policy=sms&key=13000000001"
same attack_acquire "$(code "$sms_k")" 200
same attack_limited "$(code "$sms_k")" 429
same attack_refund_get "$(code "$base/v1/refund?policy=sms&key=13000000001")" 405
same attack_refund_post "$(code -X POST -d '{"policy":"sms","key":"13000000001"}' "$base/v1/refund")" 401
same attack_refund_wrong "$(code -X POST -H 'Authorization: Bearer 0000000000000000000000000000000000000000000000000000000000000000' -d '{"policy":"sms","key":"13000000001"}' "$base/v1/refund")" 403
same attack_still_limited "$(code "$sms_k")" 429
same attack_app_refunds "$(code -X POST "${api[@]}" -d '{"policy":"sms","key":"13000000001"}' "$base/v1/refund")" 200
same attack_app_refund_counts "$(code "$sms_k")" 200

# --- reset needs the admin token (the api_token is not enough)
same reset_no_token "$(code -X POST -d '{"policy":"multi","key":"u1"}' "$base/v1/reset")" 401
same reset_bad_token "$(code -X POST -H 'Authorization: Bearer nope' -d '{"policy":"multi","key":"u1"}' "$base/v1/reset")" 403
same reset_api_token "$(code -X POST "${api[@]}" -d '{"policy":"multi","key":"u1"}' "$base/v1/reset")" 403
same reset_get "$(code "$base/v1/reset?policy=multi&key=u1")" 405
same reset_get_allow "$(curl -s -D - -o /dev/null "$base/v1/reset" | grep -i '^Allow:' | tr -d '\r')" 'Allow: POST'
same reset_ok "$(code -X POST -H "Authorization: Bearer $admin_token" -d '{"policy":"multi","key":"u1"}' "$base/v1/reset")" 200
same after_reset "$(code "$base/v1/acquire?policy=multi&key=u1")" 200

# --- shadow: decided and counted, never enforced
same shadow_1 "$(code "$base/v1/acquire?policy=watch&key=9.9.9.9")" 200
same shadow_2 "$(code "$base/v1/acquire?policy=watch&key=9.9.9.9")" 200
contains shadow_body "$(curl -s "$base/v1/acquire?policy=watch&key=9.9.9.9")" '"shadow_denied":true'
n=$(metric 'ratel_decisions_total{policy="watch",outcome="shadow_denied"')
if [ "${n:-0}" -ge 2 ] 2>/dev/null; then ok shadow_metric; else fail shadow_metric "[$n]"; fi
# A flood of shadow denials writes a handful of lines, not one each: the
# log budget (one line per 10 s per worker, saying how many it did not
# write); what is held back is written at the stop (checked there).
before=$(grep -c 'msg="shadow deny"' "$log")
t0=$SECONDS
flood=()
for _ in $(seq 1000); do flood+=("$base/v1/acquire?policy=watch&key=9.9.9.8"); done
codes=$(curl -s -w '%{http_code}\n' "${flood[@]}" | grep -c '^200$')
same shadow_flood_answered "$codes" 1000
lines=$(( $(grep -c 'msg="shadow deny"' "$log") - before ))
# One connection, one worker: a line, and one more per 10 s the flood
# lasted (slow under valgrind).
bound=$(( 2 + (SECONDS - t0) / 10 ))
if [ "$lines" -ge 0 ] && [ "$lines" -le "$bound" ]; then ok shadow_flood_lines; else fail shadow_flood_lines "$lines lines for 1000 shadow denials (bound $bound)"; fi

# --- gateway auth, Envoy's form (/v1/auth + the original path: believed
# from any peer, it is the request itself); rate limited is 429 by default
auth() { code -X "${2:-GET}" "${@:3}" "$base/v1/auth$1"; }
same auth_sms_1 "$(auth '/sendCaptcha?telephone=13800138000')" 200
same auth_sms_2 "$(auth '/sendCaptcha?telephone=13800138000')" 429
curl -s -D "$tmp/h" -o "$tmp/b" "$base/v1/auth/sendCaptcha?telephone=13800138000"
ra=$(header Retry-After "$tmp/h")
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 55 ] && [ "$ra" -le 60 ]; then ok auth_retry_after; else fail auth_retry_after "[$ra]"; fi
same auth_denied_reason "$(header X-Ratel-Reason "$tmp/h")" rate-limited
contains auth_denied_body "$(cat "$tmp/b")" '"allowed":false,"policy":"sms"'
same auth_other_phone "$(auth '/sendCaptcha?telephone=13900139000')" 200
# Allowed: RateLimit names the rule closest to exhaustion with ITS r and t
# (1/60s is used up for a minute; the day's reset is not its t).
curl -s -D "$tmp/h" -o /dev/null "$base/v1/auth/sendCaptcha?telephone=13100131000"
same auth_allowed_ratelimit "$(header RateLimit "$tmp/h")" '"sms-0";r=0;t=60'
same auth_allowed_policy "$(header RateLimit-Policy "$tmp/h")" '"sms-0";q=1;w=60, "sms-1";q=10;w=86400'
same auth_allowed_acquire_limit "$(curl -s -D - -o /dev/null "$base/v1/acquire?policy=sms&key=13200132000" | grep -i '^RateLimit:' | tr -d '\r')" 'RateLimit: "sms-0";r=0;t=60'
# A missing key source is the client's error (400), with its reason.
same auth_missing_key "$(auth '/sendCaptcha')" 400
contains auth_missing_reason "$(curl -s -D - -o /dev/null "$base/v1/auth/sendCaptcha")" 'X-Ratel-Reason: missing-key'
# A parameter given twice could be read one way here and another way by
# the application: refused.
same auth_duplicate_key "$(auth '/sendCaptcha?telephone=13700137000&telephone=13700137001')" 400
# No route: refused (auth.unmatched: deny), counted and logged.
same auth_method_mismatch "$(auth '/sendCaptcha?telephone=13800138000' POST)" 403
same auth_unrouted "$(auth '/elsewhere')" 403
contains auth_unrouted_reason "$(curl -s -D - -o /dev/null "$base/v1/auth/elsewhere")" 'X-Ratel-Reason: unmatched'
n=$(metric 'ratel_auth_undecided_total{reason="unmatched"}')
if [ "${n:-0}" -ge 3 ] 2>/dev/null; then ok auth_unrouted_metric; else fail auth_unrouted_metric "[$n]"; fi
contains auth_unrouted_logged "$(cat "$log")" 'msg="auth request undecided" reason=unmatched'
# Without any original request: refused (never a silent allow).
same auth_unidentified "$(code "$base/v1/auth")" 403
# Two policies on one route, all-or-nothing: multi (2/1m per X-User) and
# shared (2/1m per X-Tenant, absent: one shared bucket).
same auth_form_1 "$(auth /form POST -H 'X-User: f1')" 200
same auth_form_2 "$(auth /form POST -H 'X-User: f2')" 200
same auth_form_3 "$(auth /form POST -H 'X-User: f3')" 429
# f3 was refused by the shared bucket: its own policy was given back.
same auth_form_refunded "$(curl -s "$base/v1/acquire?policy=multi&key=f3&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":2'
# RateLimit-Policy lists every rule of both policies.
curl -s -D "$tmp/h" -o /dev/null -X POST -H 'X-User: f4' "$base/v1/auth/form"
same auth_policy_all_rules "$(header RateLimit-Policy "$tmp/h")" '"multi-0";q=2;w=60, "multi-1";q=3;w=3600, "shared-0";q=2;w=60'

# --- forwarded-request headers from an untrusted peer are not believed
hdr_auth() { code -H "X-Original-URI: $1" -H "X-Original-Method: ${2:-GET}" "${@:3}" "$base/v1/auth"; }
same auth_untrusted_headers "$(hdr_auth '/sendCaptcha?telephone=13600136000')" 403
contains auth_untrusted_reason "$(curl -s -D - -H 'X-Original-URI: /api/ping' "$base/v1/auth")" 'not in trusted_proxies'

# --- X-Forwarded-For from an untrusted peer changes nothing
for i in $(seq 20); do auth /api/ping GET -H "X-Forwarded-For: 203.0.113.$i" >/dev/null; done
same xff_untrusted_spoof "$(auth /api/ping GET -H 'X-Forwarded-For: 198.51.100.7')" 429
same xff_untrusted_plain "$(auth /api/ping)" 429

# --- metrics: policy names only, never keys
m=$(curl -s "$base/metrics")
contains metrics_decisions "$m" 'ratel_decisions_total{policy="ping",outcome="denied"'
contains metrics_latency "$m" 'ratel_request_duration_seconds_bucket{policy="ping"'
contains metrics_keys "$m" 'ratel_store_keys'
for secret in 13800138000 127.0.0.1 203.0.113 u1 9.9.9.9; do
    if [[ $m == *"$secret"* ]]; then fail "metrics_no_key_$secret" "a key leaked"; else ok "metrics_no_key_$secret"; fi
done

# --- reload: trusting 127.0.0.1 makes X-Forwarded-For count
write_config "127.0.0.1"
kill -HUP "$rateld_pid"
for _ in $(seq 100); do [ "$(metric ratel_config_reloads_total)" = 1 ] && break; sleep 0.05; done
same reload_counted "$(metric ratel_config_reloads_total)" 1
same xff_trusted_client "$(auth /api/ping GET -H 'X-Forwarded-For: 198.51.100.7')" 200
same xff_trusted_chain "$(auth /api/ping GET -H 'X-Forwarded-For: 198.51.100.8, 127.0.0.1')" 200
# From a trusted proxy, both gateway header forms are believed: nginx's
# X-Original-* and Caddy's / Traefik's X-Forwarded-*.
same auth_hdr_nginx "$(hdr_auth '/sendCaptcha?telephone=13500135000')" 200
same auth_hdr_nginx_2 "$(hdr_auth '/sendCaptcha?telephone=13500135000')" 429
same auth_hdr_forwarded "$(code -H 'X-Forwarded-Uri: /sendCaptcha?telephone=13500135000' -H 'X-Forwarded-Method: GET' "$base/v1/auth")" 429
same auth_hdr_forwarded_other "$(code -H 'X-Forwarded-Uri: /sendCaptcha?telephone=13400134000' -H 'X-Forwarded-Method: GET' "$base/v1/auth")" 200
same auth_hdr_forwarded_post "$(code -H 'X-Forwarded-Uri: /sendCaptcha?telephone=13400134000' -H 'X-Forwarded-Method: POST' "$base/v1/auth")" 403
# Without auth.gateway, two candidates for a field are refused (400
# ambiguous), counted and logged: the client may have sent one of them.
before=$(metric 'ratel_auth_undecided_total{reason="ambiguous"}')
same auth_ambiguous_uri "$(hdr_auth '/sendCaptcha?telephone=13500135000' GET -H 'X-Forwarded-Uri: /sendCaptcha?telephone=1')" 400
same auth_ambiguous_twice "$(code -H 'X-Original-URI: /api/ping' -H 'x-original-uri: /sendCaptcha?telephone=2' "$base/v1/auth")" 400
same auth_ambiguous_method "$(hdr_auth '/sendCaptcha?telephone=13300133000' GET -H 'X-Forwarded-Method: POST')" 400
same auth_ambiguous_host "$(hdr_auth '/sendCaptcha?telephone=13300133000' GET -H 'X-Forwarded-Host: a' -H 'X-Original-Host: b')" 400
same auth_ambiguous_path "$(auth '/sendCaptcha?telephone=13300133000' GET -H 'X-Original-URI: /api/ping')" 400
contains auth_ambiguous_reason "$(curl -s -D - -H 'X-Original-URI: /a' -H 'X-Forwarded-Uri: /b' "$base/v1/auth")" 'X-Ratel-Reason: ambiguous'
same auth_ambiguous_counted "$(($(metric 'ratel_auth_undecided_total{reason="ambiguous"}') - before))" 6
contains auth_ambiguous_logged "$(cat "$log")" 'reason=ambiguous'
same auth_ambiguous_charged_nothing "$(hdr_auth '/sendCaptcha?telephone=13300133000')" 200
# the state survived the reload: 127.0.0.1 itself is still limited
same reload_keeps_state "$(code "$base/v1/acquire?policy=ping&key=127.0.0.1")" 429

# --- a bad reload is refused and the running configuration kept
cp "$conf" "$tmp/good.yaml"
printf 'policies:\n  broken:\n    rules: [10/1x]\n    key: ip\n' >"$conf"
kill -HUP "$rateld_pid"
for _ in $(seq 100); do [ "$(metric ratel_config_reload_failures_total)" = 1 ] && break; sleep 0.05; done
same reload_refused "$(metric ratel_config_reload_failures_total)" 1
contains reload_logged "$(cat "$log")" 'reload refused'
contains reload_reason "$(cat "$log")" '10/1x'
same still_serving "$(code "$base/v1/acquire?policy=sms&key=1")" 200
cp "$tmp/good.yaml" "$conf"

# --- hostile HTTP from raw sockets
raw() { # raw BYTES: what rateld answers (2 s at most)
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf '%b' "$1" >&3
    timeout 2 cat <&3
    exec 3<&-
}
contains garbage "$(raw 'HELLO WORLD\r\n\r\n')" ' 400 '
contains bad_version "$(raw 'GET / HTTP/9.9\r\n\r\n')" 'HTTP/1.1 '
big=$(head -c 6000 /dev/zero | tr '\0' a)
contains header_too_big "$(raw "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: $big\r\n\r\n")" ' 431 '
body=$(head -c 2000 /dev/zero | tr '\0' a)
contains body_too_big "$(raw "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n$body")" ' 413 '
pipelined=$(raw 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/acquire?policy=sms&key=2 HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
same pipelined_count "$(grep -c '^HTTP/1.1 200' <<<"$pipelined")" 3
contains truncated_then_timeout "$(raw 'GET /healthz HTTP/1.1\r\nHost: x')" ' 408 '
contains pipelined_garbage "$(raw 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02\x03 garbage\r\n\r\n')" ' 400 '
same alive_after_hostile "$(code "$base/healthz")" 200

# --- concurrent rules: leases in the decision, /v1/release
lease() { grep -o '"lease":[0-9]*' | cut -d: -f2; }
jobs="$base/v1/acquire?policy=jobs&key=u1"
l1=$(curl -s "$jobs" | lease)
l2=$(curl -s "$jobs" | lease)
same lease_ids "$l1 $l2" "1 2"
out=$(curl -s -w ' %{http_code}' "$jobs")
contains lease_full "$out" ' 429'
contains lease_full_rule "$out" '"rule":1'
same lease_none_when_denied "$(lease <<<"$out")" ""
rel() { curl -s -X POST "${api[@]}" "$@" "$base/v1/release"; }
same release_get "$(code "$base/v1/release?policy=jobs&key=u1&lease=$l1")" 405
same release_no_token "$(code -X POST -d "{\"policy\":\"jobs\",\"key\":\"u1\",\"lease\":$l1}" "$base/v1/release")" 401
same release_wrong_token "$(code -X POST -H 'Authorization: Bearer x' -d "{\"policy\":\"jobs\",\"key\":\"u1\",\"lease\":$l1}" "$base/v1/release")" 403
same release "$(rel -d "{\"policy\":\"jobs\",\"key\":\"u1\",\"lease\":$l1}" | grep -o '"held":[a-z]*,"renewed":[a-z]*')" '"held":true,"renewed":false'
same release_again "$(rel -d "{\"policy\":\"jobs\",\"key\":\"u1\",\"lease\":$l1}" | grep -o '"held":[a-z]*')" '"held":false'
same release_unknown_code "$(code -X POST "${api[@]}" -d '{"policy":"jobs","key":"u1","lease":77}' "$base/v1/release")" 200
same renew "$(rel -d "{\"policy\":\"jobs\",\"key\":\"u1\",\"lease\":$l2,\"renew\":true}" | grep -o '"held":[a-z]*,"renewed":[a-z]*')" '"held":true,"renewed":true'
same lease_after_release "$(curl -s "$jobs" | lease)" 3
# Three in the minute: the rate rule denies, and no lease is taken.
rel -d '{"policy":"jobs","key":"u1","lease":3}' >/dev/null
out=$(curl -s -w ' %{http_code}' "$jobs")
contains rate_denies_first "$out" '"rule":0'
same rate_denied_no_lease "$(lease <<<"$out")" ""
same release_needs_lease "$(code -X POST "${api[@]}" -d '{"policy":"jobs","key":"u1"}' "$base/v1/release")" 400
same release_bad_lease "$(code -X POST "${api[@]}" -d '{"policy":"jobs","key":"u1","lease":4294967296}' "$base/v1/release")" 400
same release_no_concurrent "$(code -X POST "${api[@]}" -d '{"policy":"ping","key":"a","lease":1}' "$base/v1/release")" 400
same acquire_refuses_lease "$(code "$jobs&lease=1")" 400
same release_method "$(code -X DELETE "$base/v1/release")" 405

# --- without api_token or admin_token, refund and release take no token
# (docs/rateld.md: then only the application may reach rateld), and are
# still POST only
port2=$(free_port)
printf 'listen: 127.0.0.1:%s\npolicies:\n  one: {rules: [1/1m], key: ip}\n' "$port2" >"$tmp/open.yaml"
server_start open "$port2" "$rateld" --config "$tmp/open.yaml"
b2=http://127.0.0.1:$port2
same open_acquire "$(code "$b2/v1/acquire?policy=one&key=k")" 200
same open_limited "$(code "$b2/v1/acquire?policy=one&key=k")" 429
same open_refund_get "$(code "$b2/v1/refund?policy=one&key=k")" 405
same open_refund_post "$(code -X POST -d '{"policy":"one","key":"k"}' "$b2/v1/refund")" 200
same open_after_refund "$(code "$b2/v1/acquire?policy=one&key=k")" 200
same open_reset_disabled "$(code -X POST -H 'Authorization: Bearer x' -d '{"policy":"one","key":"k"}' "$b2/v1/reset")" 403
server_stop open

# --- command line
out=$("$rateld" --check-config "$conf" 2>&1); rc=$?
same check_config_ok "$rc" 0
contains check_config_summary "$out" 'policies'
printf 'policies: {p: {rules: [0/1s], key: ip}}\n' >"$tmp/bad.yaml"
out=$("$rateld" --check-config "$tmp/bad.yaml" 2>&1); rc=$?
same check_config_bad "$rc" 1
contains check_config_line "$out" 'bad.yaml:1'
contains version "$("$rateld" --version)" 'rateld '
same help "$("$rateld" --help >/dev/null 2>&1; echo $?)" 0
same no_config "$("$rateld" >/dev/null 2>&1; echo $?)" 2

# --- SIGTERM: drains and exits 0
shadow_total=$(metric 'ratel_decisions_total{policy="watch",outcome="shadow_denied"')
server_stop rateld
status=$stopped
same sigterm_exit "$status" 0
[ "$status" = 99 ] && grep '^==' "$log" | head -40
contains stopped_logged "$(cat "$log")" 'rateld stopped'
# Every shadow denial is in the log: a line of its own (with its policy),
# or counted in a line's not_logged (those held back at the stop are
# written then, in a line of their own).
shadow_lines=$(grep 'msg="shadow deny"' "$log" | grep -c ' policy=')
shadow_quiet=$(grep 'msg="shadow deny"' "$log" | grep -o 'not_logged=[0-9]*' | awk -F= '{ n += $2 } END { print n + 0 }')
same shadow_all_counted "$(( shadow_lines + shadow_quiet ))" "$shadow_total"
if [ "$shadow_lines" -le 8 ]; then ok shadow_few_lines; else fail shadow_few_lines "$shadow_lines lines for $shadow_total shadow denials"; fi
# (The drain writes one line per reason and thread held back, so the
# shadow line is among the last lines before "rateld stopped", not always
# among the last five.)
contains shadow_held_back_named "$(grep -B24 'msg="rateld stopped"' "$log")" 'msg="shadow deny" not_logged='

finish
