#!/usr/bin/env bash
# rateld's richer matching and keys end to end (embedded store, real HTTP
# on loopback): routes by host and by header; key sources host, cookie:NAME
# and json:FIELD, alone and combined; per-value overrides (a header's value
# selects other rules, a list of keys exempt or stricter); a reload that
# changes an override keeps the counts of its unchanged rules. Requests go
# to /v1/auth/PATH (Envoy's form: the request itself, from any peer).
. "$(dirname "$0")/lib.sh"

require_built rateld

port=$(free_port)
base=http://127.0.0.1:$port
conf=$tmp/rateld.yaml
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
metric() { curl -s "$base/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }' | head -1; }

# write_config GOLD_RULES
write_config() {
    cat >"$conf" <<EOF
listen: 127.0.0.1:$port
policies:
  by-host:
    rules: [2/1m]
    key: host
  by-cookie:
    rules: [2/1m]
    key: cookie:session
  by-phone:
    rules: [1/1m]
    key: json:telephone
  phone-and-host:
    rules: [3/1m]
    key: [json:telephone, host]
  api:
    rules: [2/1m]
    key: header:X-Api-Key
    overrides:
      - when: header:X-Tenant
        is: [gold, platinum]
        rules: $1
      - when: key
        is: [k-internal, k-monitor]
        exempt: true
      - when: key
        is: [k-abuser]
        rules: [1/1h]
  partner:
    rules: [1/1m]
    key: ip
  sms:
    rules: [1/1m]
    key: query:telephone|phone:CN
    overrides:
      - when: key
        is: ["138 0000 0000"]
        exempt: true
  sms-range:
    rules: [3/1h]
    key: query:telephone|phone:CN|range:2
routes:
  - path: /h
    policies: [by-host]
  - path: /c
    policies: [by-cookie]
  - path: /send
    method: POST
    policies: [by-phone, phone-and-host]
  - path: /api
    policies: [api]
  - path: /p
    host: "*.partner.example"
    policies: [partner]
  - path: /p
    headers: {X-Tier: free}
    policies: [by-host]
  - path: /sendCaptcha
    policies: [sms]
  - path: /walk
    policies: [sms, sms-range]
EOF
}

# RATELD_WRAP (make valgrind: "valgrind ... --error-exitcode=99")
# prefixes rateld; an error or a leak then fails sigterm_exit.
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"
write_config "[5/1m]"
server_start rateld "$port" "${rateld_wrap[@]}" "$build/rateld" --config "$conf"
rateld_pid=$server_pid

auth() { code "${@:2}" "$base/v1/auth$1"; }

# --- host: one bucket per host, the port and the case ignored
same host_a1 "$(auth /h -H 'Host: a.example')" 200
same host_a2 "$(auth /h -H 'Host: A.Example:8443')" 200
same host_a3 "$(auth /h -H 'Host: a.example')" 429
same host_b1 "$(auth /h -H 'Host: b.example')" 200

# --- cookie: the session cookie among others; given twice is refused
same cookie_1 "$(auth /c -H 'Cookie: theme=dark; session=s1; lang=en')" 200
same cookie_2 "$(auth /c -H 'Cookie: session="s1"')" 200
same cookie_3 "$(auth /c -H 'Cookie: lang=en' -H 'Cookie: session=s1')" 429
same cookie_other "$(auth /c -H 'Cookie: session=s2')" 200
same cookie_missing "$(auth /c -H 'Cookie: theme=dark')" 400
same cookie_twice "$(auth /c -H 'Cookie: session=s3; session=s4')" 400

# --- json: the form's phone number, alone and with the host
post() { auth "$1" -X POST -H 'Content-Type: application/json' -H "Host: ${3:-shop.example}" --data-binary "$2"; }
same json_first "$(post /send '{"telephone":"13800138000","captcha":"x"}')" 200
same json_second "$(post /send '{"captcha":"y","telephone":"13800138000"}')" 429
same json_other "$(post /send '{"telephone":"13900139000"}')" 200
same json_number "$(post /send '{"telephone":13700137000}')" 200
same json_number_again "$(post /send '{"telephone":"13700137000"}')" 429
same json_missing "$(post /send '{"captcha":"z"}')" 400
same json_not_object "$(post /send '["13800138000"]')" 400
same json_trailing "$(post /send '{"telephone":"13600136000"}x')" 400
same json_twice "$(post /send '{"telephone":"1","telephone":"2"}')" 400
# all-or-nothing: by-phone denied the second send, so phone-and-host
# (3/1m) was not charged by it: two more numbers on one host pass.
same json_refunded "$(curl -s "$base/v1/acquire?policy=phone-and-host&key=13800138000|shop.example&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":2'

# --- routes by host and by header
same route_host "$(auth /p -H 'Host: eu.partner.example')" 200
same route_host_2 "$(auth /p -H 'Host: eu.partner.example')" 429
same route_header "$(auth /p -H 'Host: other.example' -H 'X-Tier: free')" 200
same route_none "$(auth /p -H 'Host: other.example')" 403
contains route_none_reason "$(curl -s -D - -o /dev/null -H 'Host: other.example' "$base/v1/auth/p")" 'X-Ratel-Reason: unmatched'

# --- overrides: gold tenants get 5/1m instead of 2/1m; listed keys are
# exempt or held to 1/1h
for i in 1 2; do same "api_plain_$i" "$(auth /api -H 'X-Api-Key: k1')" 200; done
same api_plain_3 "$(auth /api -H 'X-Api-Key: k1')" 429
for i in 1 2 3 4; do same "api_gold_$i" "$(auth /api -H 'X-Api-Key: k2' -H 'X-Tenant: gold')" 200; done
curl -s -D "$tmp/h" -o /dev/null -H 'X-Api-Key: k2' -H 'X-Tenant: gold' "$base/v1/auth/api"
contains api_gold_policy_field "$(cat "$tmp/h")" 'RateLimit-Policy: "api-0";q=5;w=60'
for i in 1 2 3 4 5; do same "api_exempt_$i" "$(auth /api -H 'X-Api-Key: k-internal')" 200; done
same api_exempt_decision "$(curl -s "$base/v1/acquire?policy=api&key=k-monitor")" '{"allowed":true,"policy":"api","exempt":true}'
same api_stricter_1 "$(auth /api -H 'X-Api-Key: k-abuser')" 200
same api_stricter_2 "$(auth /api -H 'X-Api-Key: k-abuser')" 429
curl -s -D "$tmp/h" -o /dev/null -H 'X-Api-Key: k-abuser' "$base/v1/auth/api"
contains api_stricter_retry "$(cat "$tmp/h")" 'RateLimit: "api-0";r=0;t=3'

# --- phone numbers: the six spellings of one number (and their
# URL-encoded forms) are one bucket, E.164; invalid numbers are refused;
# an override's value matches every spelling; a walk across one range
# stops at the range's rule.
same phone_first "$(auth '/sendCaptcha?telephone=13500003333')" 200
for t in %2B8613500003333 008613500003333 '%2B86%20135%200000%203333' '+86+135+0000+3333' \
    135-0000-3333 '%2B86013500003333' '1350000333%33' '%31%33%35%30%30%30%30%33%33%33%33'; do
    same "phone_same_bucket_$t" "$(auth "/sendCaptcha?telephone=$t")" 429
done
# The decision API's key reads as the policy's source does: one bucket.
same phone_api_same_bucket "$(code "$base/v1/acquire?policy=sms&key=%2B86%20135%200000%203333")" 429
same phone_api_invalid "$(code "$base/v1/acquire?policy=sms&key=12345")" 400
curl -s -D "$tmp/h" -o /dev/null "$base/v1/auth/sendCaptcha?telephone=12345"
contains phone_invalid "$(tr -d '\r' <"$tmp/h")" "X-Ratel-Reason: bad-key"
same phone_exempt "$(auth '/sendCaptcha?telephone=%2B8613800000000')$(auth '/sendCaptcha?telephone=13800000000')" 200200
codes=""
for n in 10 11 12 13 14; do codes="$codes$(auth "/walk?telephone=135000000$n") "; done
same phone_range_walk "$codes" "200 200 200 429 429 "

# --- reload: gold gets [5/1m, 100/1h]; k2 used 5 of 5/1m, which is kept
write_config "[5/1m, 100/1h]"
kill -HUP "$rateld_pid"
for _ in $(seq 400); do [ "$(metric ratel_config_reloads_total)" = 1 ] && break; sleep 0.05; done
same reload_done "$(metric ratel_config_reloads_total)" 1
same reload_kept_count "$(auth /api -H 'X-Api-Key: k2' -H 'X-Tenant: gold')" 429
same reload_new_key "$(auth /api -H 'X-Api-Key: k3' -H 'X-Tenant: platinum')" 200
curl -s -D "$tmp/h" -o /dev/null -H 'X-Api-Key: k3' -H 'X-Tenant: platinum' "$base/v1/auth/api"
contains reload_new_rules "$(cat "$tmp/h")" 'RateLimit-Policy: "api-0";q=5;w=60, "api-1";q=100;w=3600'

# --- configuration errors name the field
printf 'policies:\n  a:\n    rules: [1/1m]\n    overrides:\n      - when: header:X\n        is: [v]\n' >"$tmp/bad.yaml"
contains override_needs_rules "$("$build/rateld" --check-config "$tmp/bad.yaml" 2>&1)" 'policies.a.overrides[0]: needs when:'
printf 'policies:\n  a:\n    rules: [1/1m]\n    key: "cookie:"\n' >"$tmp/bad.yaml"
contains cookie_needs_name "$("$build/rateld" --check-config "$tmp/bad.yaml" 2>&1)" 'cookie: needs a name'
printf 'policies:\n  a:\n    rules: [1/1m]\n    key: query: x\n' >"$tmp/bad.yaml"
contains yaml_colon_hint "$("$build/rateld" --check-config "$tmp/bad.yaml" 2>&1)" 'with no space after the colon'

# --- SIGTERM: exits 0 (under valgrind: no error, no leak)
server_stop rateld
status=$stopped
same sigterm_exit "$status" 0
[ "$status" = 99 ] && grep '^==' "$tmp/rateld.log" | head -40

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log"
finish
