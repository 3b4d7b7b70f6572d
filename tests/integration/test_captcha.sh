#!/usr/bin/env bash
# captchad (captchad) end to end over real HTTP on loopback: send,
# the log sender's file, verify once and only once (also concurrently),
# expiry, wrong attempts, the per-phone and per-IP limits, the verify
# limits, the login rule, a webhook gateway that fails or never answers
# (notice FAILED, permits refunded), a full send queue, notices across a
# restart, two captchad sharing one redis-server, hostile input, and that
# 10,000 unique phones from one address leave the stores bounded.
#
# Client addresses are set with X-Forwarded-For (127.0.0.1 is a trusted
# proxy here) so that each check has its own per-IP budget. Nothing waits
# for a limit to move; the expiry check waits for a 1 s TTL, bounded.
. "$(dirname "$0")/lib.sh"

require_built captchad
captchad=$build/captchad
# CAPTCHAD_WRAP (e.g. "valgrind -q --error-exitcode=99") prefixes captchad.
read -r -a captchad_wrap <<<"${CAPTCHAD_WRAP:-}"
token=tok-secret-1-captchad-test-0123456789

# write_config NAME PORT [EXTRA_YAML]: $tmp/NAME.yaml, a memory store and
# the log sender unless EXTRA_YAML says otherwise (its fields come last);
# the notices in $tmp/NAME.db unless CAPTCHA_DB names another file.
write_config() {
    local name=$1 port=$2
    {
        cat <<EOF
listen: 127.0.0.1:$port
threads: 2
admin_token: "$token"
trusted_proxies: [127.0.0.1]
limits:
  max_body_bytes: 64KiB
sqlite_path: ${CAPTCHA_DB:-$tmp/$name.db}
code_max_entries: 1000
EOF
        printf '%s\n' "${3:-}"
        if [[ ${3:-} != *"sender:"* ]]; then
            printf 'sender:\n  type: log\n  log_file: %s\n' "$tmp/$name.sms"
        fi
    } >"$tmp/$name.yaml"
}

# start NAME PORT: runs captchad on $tmp/NAME.yaml (its log $tmp/NAME.log),
# waits for /healthz. stop NAME: SIGTERM, its exit status in $stopped.
start() { server_start "$1" "$2" "${captchad_wrap[@]}" "$captchad" --config "$tmp/$1.yaml"; }
stop() { server_stop "$1"; }

# send BASE PHONE [IP] / verify BASE PHONE CODE [IP]: "STATUS BODY"
send() {
    curl -s -w ' %{http_code}' -H "X-Forwarded-For: ${3:-10.0.0.1}" \
        -X POST -d "{\"telephone\":\"$2\"}" "$1/captcha/send"
}
send_status() { local out; out=$(send "$@"); echo "${out##* }"; }
verify() {
    curl -s -o /dev/null -w '%{http_code}' -H "X-Forwarded-For: ${4:-10.0.0.2}" \
        -X POST -d "{\"telephone\":\"$2\",\"code\":\"$3\"}" "$1/captcha/verify"
}
verify_body() {
    curl -s -H "X-Forwarded-For: ${4:-10.0.0.2}" \
        -X POST -d "{\"telephone\":\"$2\",\"code\":\"$3\"}" "$1/captcha/verify"
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
header() { grep -i "^$1:" "$2" | head -1 | cut -d: -f2- | tr -d '\r ' ; }
metric() { curl -s "$1/metrics" | awk -v m="$2" 'index($0, m) == 1 { print $NF }' | head -1; }

# e164 PHONE: the number as captchad keys, stores and sends it: a
# mainland number's 11 digits with +86, an international one as it is.
e164() { case $1 in +*) echo "$1" ;; *) echo "+86$1" ;; esac; }

# code_of SMSFILE PHONE: the newest code the log sender wrote for PHONE
# (in E.164), waiting for the sender thread (bounded).
code_of() {
    local c p
    p=$(e164 "$2")
    for _ in $(seq 100); do
        c=$(awk -F'\t' -v p="$p" '$2 == p { print $3 }' "$1" 2>/dev/null |
            tail -1 | grep -o 'code is [0-9]*' | cut -d' ' -f3)
        [ -n "$c" ] && { echo "$c"; return 0; }
        sleep 0.05
    done
    return 1
}

# notice_state BASE PHONE WANT: waits until the newest notice has state
# WANT; prints the /notices body.
notice_state() {
    local body
    for _ in $(seq 100); do
        body=$(curl -s -H "Authorization: Bearer $token" "$1/notices?telephone=$2")
        [[ $body == *"\"notices\":[{"*"\"state\":\"$3\""* ]] && break
        sleep 0.05
    done
    echo "$body"
}

invalid='{"error":"invalid or expired code"}'

# json_error NAME FILE SUBSTRING: FILE is one JSON object whose "error" is
# a string containing SUBSTRING (json.load refuses anything else).
json_error() {
    if python3 -c 'import json,sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert isinstance(d, dict) and isinstance(d["error"], str), d
assert sys.argv[2] in d["error"], d["error"]' "$2" "$3" 2>"$tmp/json.err"; then
        ok "$1"
    else
        fail "$1" "$(head -c 300 "$2") $(tail -1 "$tmp/json.err")"
    fi
}

# limited_json NAME FILE POLICY RULE RETRY_S: a 429 body naming the policy
# and binding rule, with retry_after_s equal to Retry-After.
limited_json() {
    if python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
assert d == {"error": "too many requests", "policy": sys.argv[2],
             "rule": int(sys.argv[3]), "retry_after_s": int(sys.argv[4])}, d' \
        "$2" "$3" "$4" "$5" 2>"$tmp/json.err"; then
        ok "$1"
    else
        fail "$1" "$(head -c 300 "$2") $(tail -1 "$tmp/json.err")"
    fi
}

# =================================================== one instance, memory
p1=$(free_port)
b1=http://127.0.0.1:$p1
write_config main "$p1"
if ! start main "$p1"; then
    fail start "captchad did not come up"
    finish
    exit 1
fi
ok start

# --- command line
same version "$("$captchad" --version)" "captchad $(sed -n 's/^#define RATEL_VERSION "\(.*\)"/\1/p' "$root/include/ratel.h")"
contains help "$("$captchad" --help)" '--check-config'
contains check_config "$("$captchad" --check-config "$tmp/main.yaml")" ': ok:'
contains check_example "$("$captchad" --check-config "$root/captchad/captchad.yaml")" ': ok:'
printf 'listen: 127.0.0.1:1\npolicies:\n  send_phone: [1/60s]\n  colour: red\n' >"$tmp/bad1.yaml"
same bad_unknown_field "$("$captchad" --check-config "$tmp/bad1.yaml" 2>&1)" \
    "captchad: $tmp/bad1.yaml:4: policies.colour: unknown field; accepted: send_phone, send_ip, verify_phone, verify_ip, login_user"
printf 'code_length: 3\n' >"$tmp/bad2.yaml"
contains bad_code_length "$("$captchad" --check-config "$tmp/bad2.yaml" 2>&1)" "bad2.yaml:1: code_length: 3 is out of range"
printf 'sender:\n  type: webhook\n' >"$tmp/bad3.yaml"
contains bad_webhook_url "$("$captchad" --check-config "$tmp/bad3.yaml" 2>&1)" "bad3.yaml:2: sender.url: required"
printf 'policies:\n  send_ip: [20/1x]\n' >"$tmp/bad4.yaml"
contains bad_rule "$("$captchad" --check-config "$tmp/bad4.yaml" 2>&1)" "bad4.yaml:2: policies.send_ip[0]:"
# `limits:` means what it means in rateld (HTTP sizes and times); the old
# meanings of `limits:` (rate limits) and `http:` are refused, naming the
# new section.
printf 'listen: 127.0.0.1:1\nlimits:\n  max_body_bytes: 8KiB\n  send_phone: [1/60s]\n' >"$tmp/old1.yaml"
same old_limits_section "$("$captchad" --check-config "$tmp/old1.yaml" 2>&1)" \
    "captchad: $tmp/old1.yaml:4: limits.send_phone: rate-limit rules are now under policies: (write policies: send_phone: [...]); limits: means HTTP sizes and times, as in rateld"
printf 'http:\n  max_body_bytes: 8KiB\n' >"$tmp/old2.yaml"
same old_http_section "$("$captchad" --check-config "$tmp/old2.yaml" 2>&1)" \
    "captchad: $tmp/old2.yaml:1: http: is now called limits: (HTTP sizes and times, as in rateld); the rate-limit rules are under policies:"
"$captchad" --check-config "$tmp/old2.yaml" >/dev/null 2>&1
same old_http_exit "$?" 1
# rateld's whole limits section is accepted, with rateld's ranges.
printf 'limits:\n  max_header_bytes: 8KiB\n  max_body_bytes: 16KiB\n  max_connections: 100\n  max_pipeline: 8\n  request_timeout_ms: 5000\n  idle_timeout_ms: 60000\npolicies:\n  send_phone: [1/60s, 5/1h]\n' >"$tmp/new1.yaml"
contains new_sections "$("$captchad" --check-config "$tmp/new1.yaml" 2>&1)" ': ok:'
printf 'limits:\n  max_pipeline: 1025\n' >"$tmp/bad6.yaml"
contains limits_range "$("$captchad" --check-config "$tmp/bad6.yaml" 2>&1)" "bad6.yaml:2: limits.max_pipeline: 1025 is out of range"
printf 'store:\n  type: memory\n  url: redis://x\n' >"$tmp/bad5.yaml"
contains bad_store_field "$("$captchad" --check-config "$tmp/bad5.yaml" 2>&1)" "bad5.yaml:3: store.url: applies to type: redis only"
# store.url is read by libratel's parser (its words for a URL it refuses);
# the code store then refuses what it cannot reach, saying why.
printf 'store:\n  type: redis\n  url: redis://127.0.0.1:99999\n' >"$tmp/bad7.yaml"
contains url_parser_words "$("$captchad" --check-config "$tmp/bad7.yaml" 2>&1)" \
    'bad7.yaml:3: store.url: redis URL "redis://127.0.0.1:99999": the port of "127.0.0.1:99999" is out of range'
printf 'store:\n  type: redis\n  url: http://127.0.0.1\n' >"$tmp/bad8.yaml"
contains url_parser_scheme "$("$captchad" --check-config "$tmp/bad8.yaml" 2>&1)" 'unknown scheme "http"; the schemes are redis://'
printf 'store:\n  type: redis\n  url: redis+sentinel://127.0.0.1:26379/mymaster\n' >"$tmp/ok11.yaml"
contains url_codes_sentinel "$("$captchad" --check-config "$tmp/ok11.yaml" 2>&1)" \
    'store redis+sentinel://127.0.0.1:26379/mymaster'
# The store is made as start makes it: its TLS files are read, and one
# that start could not read is refused by --check-config too.
printf 'store:\n  type: redis\n  url: "rediss://127.0.0.1:6380?tls_ca_file=/etc/ssl/certs/ca-certificates.crt"\n' >"$tmp/ok10.yaml"
contains url_tls_ok "$("$captchad" --check-config "$tmp/ok10.yaml" 2>&1)" 'store rediss://127.0.0.1:6380?tls_ca_file=/etc/ssl/certs/ca-certificates.crt'
printf 'store:\n  type: redis\n  url: "rediss://127.0.0.1:6380?tls_ca_file=%s/none.crt"\n' "$tmp" >"$tmp/bad10.yaml"
same url_tls_missing "$("$captchad" --check-config "$tmp/bad10.yaml" 2>&1)" \
    "captchad: $tmp/bad10.yaml:3: store.url: redis store: tls_ca_file \"$tmp/none.crt\": No such file or directory"
printf 'store:\n  type: redis\n  url: "redis://u:pw@127.0.0.1:6379,127.0.0.1:6380/2?timeout_ms=300"\n' >"$tmp/ok9.yaml"
contains url_plain_ok "$("$captchad" --check-config "$tmp/ok9.yaml" 2>&1)" 'store redis://***@127.0.0.1:6379,127.0.0.1:6380/2?timeout_ms=300'
# phone_region: a region libphonenumber knows, or "" (+ numbers only).
printf 'phone_region: XX\n' >"$tmp/bad11.yaml"
same phone_region_unknown "$("$captchad" --check-config "$tmp/bad11.yaml" 2>&1)" \
    "captchad: $tmp/bad11.yaml:1: phone_region: \"XX\" is not a region libphonenumber knows; expected an ISO 3166 two-letter region (CN, US, GB, ...) or \"\" (numbers written with + only)"
printf 'phone_region: ""\n' >"$tmp/ok12.yaml"
contains phone_region_empty "$("$captchad" --check-config "$tmp/ok12.yaml" 2>&1)" ': ok:'
"$captchad" --check-config "$tmp/bad1.yaml" >/dev/null 2>&1
same bad_exit "$?" 1

# --- send, the log sender's file, verify once
phone=13800138000
out=$(send "$b1" "$phone")
same send_status "${out##* }" 202
contains send_body "$out" '"sent":true,"notice_id":'
contains send_expires "$out" '"expires_in_s":300'
code=$(code_of "$tmp/main.sms" "$phone")
if [[ $code =~ ^[0-9]{6}$ ]]; then ok code_six_digits; else fail code_six_digits "[$code]"; fi
line=$(grep -P "^\d{4}-\d\d-\d\dT[0-9:.]+Z\t\+86$phone\tYour code is $code, valid 5 minutes$" "$tmp/main.sms")
[ -n "$line" ] && ok sms_line_format || fail sms_line_format "$(cat "$tmp/main.sms")"
same verify_non_digit "$(verify_body "$b1" "$phone" "12a456")" "$invalid"
same verify_wrong_length "$(verify_body "$b1" "$phone" "12345")" "$invalid"
same verify_ok "$(verify "$b1" "$phone" "$code")" 200
same verify_twice "$(verify "$b1" "$phone" "$code")" 400
same verify_twice_body "$(verify_body "$b1" "$phone" "$code")" "$invalid"
same verify_never_sent "$(verify_body "$b1" 13900000000 123456)" "$invalid"

# --- the per-phone limit: the second send within 60 s
curl -s -D "$tmp/h" -o "$tmp/b" -H 'X-Forwarded-For: 10.0.0.3' -X POST \
    -d "{\"telephone\":\"$phone\"}" "$b1/captcha/send"
same phone_limit "$(head -1 "$tmp/h" | cut -d' ' -f2)" 429
ra=$(header Retry-After "$tmp/h")
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 55 ] && [ "$ra" -le 60 ]; then ok retry_after; else fail retry_after "[$ra]"; fi
contains limit_body "$(cat "$tmp/b")" "\"retry_after_s\":$ra"
same phone_limit_plus86 "$(send_status "$b1" "+86$phone" 10.0.0.4)" 429
# The RateLimit fields name send_phone's binding rule (rule 0, 1/60s) and
# agree with Retry-After and with the JSON body.
same phone_limit_policy_field "$(header RateLimit-Policy "$tmp/h")" \
    '"send_phone-0";q=1;w=60,"send_phone-1";q=5;w=3600,"send_phone-2";q=10;w=86400'
same phone_limit_ratelimit_field "$(header RateLimit "$tmp/h")" "\"send_phone-0\";r=0;t=$ra"
limited_json "phone_limit_json" "$tmp/b" send_phone 0 "$ra"

# --- one phone, one number: the spellings an SMS provider delivers to one
# phone (issue 31's six, and JSON's escapes of them) are one E.164 number
# (libphonenumber, phone_region CN): one budget, one code. Each from an
# address of its own, so that only the phone's limit can refuse it.
same spelling_first "$(send_status "$b1" 13500003333 10.11.0.1)" 202
i=1
for spelled in +8613500003333 008613500003333 '+86 135 0000 3333' 135-0000-3333 \
    +86013500003333 8613500003333 '(+86) 135.0000.3333' \
    '\u002B8613500003333' '135\u002D0000\u002D3333' '\u0031\u0033500003333'; do
    i=$((i + 1))
    same "spelling_limited_[$spelled]" "$(send_status "$b1" "$spelled" "10.11.0.$i")" 429
done
# Percent-escapes mean nothing in JSON: refused as no number, never a
# bucket of its own.
for spelled in %2B8613500003333 135%2D0000%2D3333 1350000333%33; do
    i=$((i + 1))
    same "spelling_escaped_[$spelled]" "$(send_status "$b1" "$spelled" "10.11.0.$i")" 400
done
code=$(code_of "$tmp/main.sms" 13500003333)
same spelling_one_sms "$(grep -c "+8613500003333" "$tmp/main.sms")" 1
same sms_only_e164 "$(awk -F'\t' '$2 !~ /^\+[1-9][0-9]+$/' "$tmp/main.sms")" ""
# A code sent to one spelling verifies with another, once.
same spelling_verify_other "$(verify "$b1" '+86 (0) 135-0000-3333' "$code" 10.11.1.1)" 200
same spelling_verify_once "$(verify "$b1" 13500003333 "$code" 10.11.1.1)" 400
# The notices of the number, however the query spells it.
body=$(curl -s -H "Authorization: Bearer $token" "$b1/notices?telephone=%2B86%20135%200000%203333")
contains spelling_notices "$body" '{"telephone":"+8613500003333","notices":[{'
same spelling_notices_national "$(curl -s -H "Authorization: Bearer $token" "$b1/notices?telephone=135-0000-3333" | head -c 40)" \
    "$(head -c 40 <<<"$body")"

# --- numbers that are not valid, and premium-rate ones: 400, named and
# counted, nothing sent
curl -s -o "$tmp/rb" -w '%{http_code}' -H 'X-Forwarded-For: 10.11.2.1' -X POST \
    -d '{"telephone":"12000000000"}' "$b1/captcha/send" >"$tmp/code"
same invalid_number "$(cat "$tmp/code")" 400
json_error invalid_number_body "$tmp/rb" "telephone: not a valid number of its region's numbering plan; expected a number such as 13800138000 (read in phone_region CN) or +8613800138000"
curl -s -o "$tmp/rb" -w '%{http_code}' -H 'X-Forwarded-For: 10.11.2.2' -X POST \
    -d '{"telephone":"+44 909 876 5432"}' "$b1/captcha/send" >"$tmp/code"
same premium_number "$(cat "$tmp/code")" 400
json_error premium_number_body "$tmp/rb" 'telephone: a premium_rate number; codes are not sent to premium-rate or shared-cost numbers'
same shared_cost_number "$(send_status "$b1" 4001234567 10.11.2.3)" 400
curl -s -o "$tmp/rb" -w '%{http_code}' -H 'X-Forwarded-For: 10.11.2.4' -X POST \
    -d '{"telephone":"tel:13500003334"}' "$b1/captcha/send" >"$tmp/code"
same letters_number "$(cat "$tmp/code")" 400
json_error letters_number_body "$tmp/rb" 'telephone: not a phone number (ASCII digits, spaces, dashes, dots, parentheses and a leading +, at most 64 bytes)'
same verify_invalid_number "$(verify "$b1" 12000000000 123456 10.11.2.5)" 400
m=$(curl -s "$b1/metrics")
contains phone_refused_premium "$m" 'captcha_phone_refused_total{reason="premium"} 2'
contains phone_refused_invalid "$m" 'captcha_phone_refused_total{reason="invalid"} 2'
if grep -qE '12000000000|909876|4001234567|13500003334' "$tmp/main.sms"; then
    fail refused_nothing_sent "$(grep -E '12000000000|909876|4001234567' "$tmp/main.sms")"
else
    ok refused_nothing_sent
fi

# --- two concurrent correct verifies: exactly one succeeds
phone=13800138001
send "$b1" "$phone" >/dev/null
code=$(code_of "$tmp/main.sms" "$phone")
waitfor=()
for i in $(seq 8); do
    { verify "$b1" "$phone" "$code" "10.1.0.$i"; echo; } >"$tmp/conc.$i" &
    waitfor+=($!)
done
wait "${waitfor[@]}"
same concurrent_once "$(cat "$tmp"/conc.* | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ' ')" "1 200 7 400 "

# --- five wrong attempts invalidate the code
phone=13800138002
send "$b1" "$phone" >/dev/null
code=$(code_of "$tmp/main.sms" "$phone")
wrong=$(printf '%06d' $(((10#$code + 1) % 1000000)))
for i in 1 2 3 4 5; do
    same "wrong_$i" "$(verify_body "$b1" "$phone" "$wrong")" "$invalid"
done
same wrong_then_right "$(verify_body "$b1" "$phone" "$code")" "$invalid"
# Four wrong ones do not: the fifth guess may be right.
phone=13800138003
send "$b1" "$phone" >/dev/null
code=$(code_of "$tmp/main.sms" "$phone")
wrong=$(printf '%06d' $(((10#$code + 1) % 1000000)))
for i in 1 2 3 4; do verify "$b1" "$phone" "$wrong" >/dev/null; done
same four_wrong_then_right "$(verify "$b1" "$phone" "$code")" 200

# --- the verify limits: 10/1h per phone, then 429 (the code is intact)
phone=13800138004
for i in $(seq 10); do verify "$b1" "$phone" 000000 "10.2.0.$i" >/dev/null; done
curl -s -D "$tmp/h" -o /dev/null -H 'X-Forwarded-For: 10.2.1.1' -X POST \
    -d "{\"telephone\":\"$phone\",\"code\":\"000000\"}" "$b1/captcha/verify"
same verify_phone_limit "$(head -1 "$tmp/h" | cut -d' ' -f2)" 429
[ -n "$(header Retry-After "$tmp/h")" ] && ok verify_retry_after || fail verify_retry_after "none"
# 50/1h per IP: 50 verifies of different phones from one address
for i in $(seq 50); do verify "$b1" "1390000$(printf '%04d' "$i")" 000000 10.2.2.2 >/dev/null; done
same verify_ip_limit "$(verify "$b1" 13900009999 000000 10.2.2.2)" 429

# --- the per-IP limit: 20 sends an hour from one address
codes=$(for i in $(seq 21); do send_status "$b1" "1370000$(printf '%04d' "$i")" 10.3.0.1; done | tr '\n' ' ')
same ip_limit "$codes" "$(printf '202 %.0s' $(seq 20))429 "
# The 21st phone was not charged (all-or-nothing): from elsewhere it sends.
same ip_denied_charged_nothing "$(send_status "$b1" 13700000021 10.3.0.2)" 202
# The address's 429 names send_ip (20/1h), not send_phone.
curl -s -D "$tmp/h" -o "$tmp/b" -H 'X-Forwarded-For: 10.3.0.1' -X POST \
    -d '{"telephone":"13700000022"}' "$b1/captcha/send"
same ip_limit_status "$(head -1 "$tmp/h" | cut -d' ' -f2)" 429
ra=$(header Retry-After "$tmp/h")
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 3500 ] && [ "$ra" -le 3600 ]; then ok ip_retry_after; else fail ip_retry_after "[$ra]"; fi
same ip_limit_policy_field "$(header RateLimit-Policy "$tmp/h")" '"send_ip-0";q=20;w=3600'
same ip_limit_ratelimit_field "$(header RateLimit "$tmp/h")" "\"send_ip-0\";r=0;t=$ra"
limited_json "ip_limit_json" "$tmp/b" send_ip 0 "$ra"

# --- the login rule: 3 failures a minute, then a captcha
needs() { curl -s "$b1/login/needs-captcha?user=$1" | grep -o '"needs_captcha":[a-z]*' | cut -d: -f2; }
fail_login() { curl -s -X POST -d "{\"user\":\"$1\"}" "$b1/login/fail" | grep -o '"needs_captcha":[a-z]*' | cut -d: -f2; }
same login_fresh "$(needs alice)" false
same login_fail_1 "$(fail_login alice)" false
same login_fail_2 "$(fail_login alice)" false
same login_after_2 "$(needs alice)" false
same login_fail_3 "$(fail_login alice)" true
same login_after_3 "$(needs alice)" true
same login_fail_4 "$(fail_login alice)" true
same login_other_user "$(needs bob)" false
same login_no_user "$(status -X POST -d '{}' "$b1/login/fail")" 400
same login_peek_no_user "$(status "$b1/login/needs-captcha")" 400

# --- strict JSON bodies: each refusal is a 400 whose JSON body says what
# is wrong and where; nothing is sent for them.
body_case() { # NAME PATH WANT_SUBSTRING, the body in $tmp/body
    local code
    code=$(curl -s -o "$tmp/rb" -w '%{http_code}' -H 'X-Forwarded-For: 10.8.0.1' \
        -X POST --data-binary @"$tmp/body" "$b1$2")
    same "$1" "$code" 400
    json_error "$1_body" "$tmp/rb" "$3"
}
printf '{"telephone":"13811110001"}xyz' >"$tmp/body"
body_case json_trailing /captcha/send 'invalid JSON body: trailing data after the JSON value at offset 27'
printf '{"telephone":"13811110001\0evil"}' >"$tmp/body"
body_case json_raw_nul /captcha/send 'a raw NUL byte at offset 25'
printf '{"telephone":"13811110001\\u0000evil"}' >"$tmp/body"
body_case json_escaped_nul /captcha/send 'a \u0000 escape (a NUL would cut the string short) at offset 25'
printf '{"telephone":"1381111000\xc0\xb1"}' >"$tmp/body"
body_case json_overlong_utf8 /captcha/send 'invalid UTF-8 (an overlong encoding, byte 0xc0) at offset 24'
printf '{"telephone":"13811110001\xed\xa0\x80"}' >"$tmp/body"
body_case json_surrogate_utf8 /captcha/send 'invalid UTF-8 (an encoded UTF-16 surrogate'
printf '{"telephone":"13811110001\xe4\xb8"}' >"$tmp/body"
body_case json_truncated_utf8 /captcha/send 'invalid UTF-8 (a truncated sequence'
printf '{"telephone":"\\ud800"}' >"$tmp/body"
body_case json_unpaired_surrogate /captcha/send 'unpaired surrogate escape'
printf '{"telephone":"13811110001","telephone":"13811110002"}' >"$tmp/body"
body_case json_duplicate_send /captcha/send 'the key "telephone" given twice (first at offset 1) at offset 27'
printf '{"telephone":"13811110001","code":"123456","code":"654321"}' >"$tmp/body"
body_case json_duplicate_verify /captcha/verify 'the key "code" given twice'
printf '{"user":"alice","user":"bob"}' >"$tmp/body"
body_case json_duplicate_login /login/fail 'the key "user" given twice'
printf '{"telephone":"13811110001","x":%s1%s}' "$(printf '[%.0s' $(seq 20))" "$(printf ']%.0s' $(seq 20))" >"$tmp/body"
body_case json_too_deep /captcha/send 'nested deeper than 16'
# The NUL and \u0000 numbers were never sent (no SMS, no notice).
if grep -q 13811110001 "$tmp/main.sms"; then fail json_nothing_sent "$(grep 13811110001 "$tmp/main.sms")"; else ok json_nothing_sent; fi
same json_no_notice "$(curl -s -H "Authorization: Bearer $token" "$b1/notices?telephone=13811110001")" '{"telephone":"+8613811110001","notices":[]}'
# A query parameter given twice is refused too.
curl -s -o "$tmp/rb" -w '%{http_code}' "$b1/login/needs-captcha?user=alice&user=bob" >"$tmp/code"
same query_duplicate "$(cat "$tmp/code")" 400
json_error query_duplicate_body "$tmp/rb" 'the query parameter user is given 2 times'
curl -s -o "$tmp/rb" -w '%{http_code}' -H "Authorization: Bearer $token" \
    "$b1/notices?telephone=13800138000&telephone=13900000000" >"$tmp/code"
same query_duplicate_notices "$(cat "$tmp/code")" 400
json_error query_duplicate_notices_body "$tmp/rb" 'the query parameter telephone is given 2 times'

# --- hostile input
same malformed_json "$(status -X POST -d '{"telephone":' "$b1/captcha/send")" 400
same not_object "$(status -X POST -d '["13800138000"]' "$b1/captcha/send")" 400
same missing_field "$(status -X POST -d '{}' "$b1/captcha/send")" 400
same empty_body "$(status -X POST "$b1/captcha/send")" 400
same number_phone "$(status -X POST -d '{"telephone":13800138000}' "$b1/captcha/send")" 400
for bad in 1380013800 138001380001 12800138000 +0123456789 +1234567 +1234567890123456 abc 1380013800a ''; do
    same "bad_phone_[$bad]" "$(status -X POST -d "{\"telephone\":\"$bad\"}" "$b1/captcha/send")" 400
done
same e164_ok "$(send_status "$b1" +447911123456 10.4.0.1)" 202
same verify_malformed "$(status -X POST -d 'nope' "$b1/captcha/verify")" 400
same verify_missing_code "$(status -X POST -d '{"telephone":"13800138000"}' "$b1/captcha/verify")" 400
same verify_code_number "$(status -X POST -d '{"telephone":"13800138000","code":123456}' "$b1/captcha/verify")" 400
head -c 1048576 /dev/zero | tr '\0' 'a' >"$tmp/big"
same body_1mb "$(status -X POST --data-binary @"$tmp/big" "$b1/captcha/send")" 413
# (The 413 comes from the HTTP layer, server/http, before captchad runs: JSON
# as well, naming the limit.)
contains body_1mb_reason "$(curl -s -X POST --data-binary @"$tmp/big" "$b1/captcha/send")" '{"error":"request body larger than limits.max_body_bytes"}'
# Every 4xx body captchad writes is JSON with an "error" string.
for req in "400 -X POST -d {\"telephone\":} $b1/captcha/send" \
           "400 -X POST -d [1] $b1/captcha/send" \
           "400 -X POST -d {} $b1/captcha/send" \
           "400 -X POST $b1/captcha/send" \
           "400 -X POST -d {\"telephone\":\"123\"} $b1/captcha/send" \
           "400 -X POST -d nope $b1/captcha/verify" \
           "400 -X POST -d {\"telephone\":\"13800138000\",\"code\":\"1\"} $b1/captcha/verify" \
           "400 -X POST -d {} $b1/login/fail" \
           "400 $b1/login/needs-captcha" \
           "400 $b1/login/needs-captcha?user=%zz" \
           "403 $b1/notices?telephone=13800138000" \
           "404 $b1/nothing" \
           "405 $b1/captcha/send"; do
    read -r -a args <<<"$req"
    code=$(curl -s -o "$tmp/rb" -w '%{http_code}' -H 'X-Forwarded-For: 10.8.0.2' "${args[@]:1}")
    same "json_4xx_status_[${req}]" "$code" "${args[0]}"
    json_error "json_4xx_body_[${req}]" "$tmp/rb" ""
done
same get_send "$(status "$b1/captcha/send")" 405
same not_found "$(status "$b1/nothing")" 404
same healthz "$(status "$b1/healthz")" 200

# --- notices for operators
same notices_no_token "$(status "$b1/notices?telephone=13800138000")" 403
same notices_bad_token "$(status -H 'Authorization: Bearer nope' "$b1/notices?telephone=13800138000")" 403
body=$(notice_state "$b1" 13800138000 SUCCESS)
contains notices_masked "$body" '"content":"Your code is ******, valid 5 minutes"'
contains notices_state "$body" '"state":"SUCCESS"'
contains notices_result "$body" '"provider_result":"log: written"'
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["notices"][0]["attempts"] == 1 and d["notices"][0]["sent_ms"] >= d["notices"][0]["created_ms"]' "$body" 2>/dev/null; then
    ok notices_json
else
    fail notices_json "$body"
fi
first_code=$(awk -F'\t' '$2 == "+8613800138000" { print $3 }' "$tmp/main.sms" | head -1 | grep -o '[0-9]\{6\}')
[[ $body != *"$first_code"* ]] && ok notices_no_code || fail notices_no_code "$body"

# --- 10,000 unique phones from one address: 20 pass, the stores stay small
entries0=$(metric "$b1" captcha_code_store_entries)
keys0=$(metric "$b1" captcha_store_keys)
for i in $(seq 10000); do
    printf 'url = "%s/captcha/send"\nheader = "X-Forwarded-For: 10.5.0.1"\ndata = "{\\"telephone\\":\\"136%08d\\"}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\nnext\n' "$b1" "$i"
done | sed '$d' >"$tmp/flood.curl"  # no "next" after the last
counts=$(curl -s -K "$tmp/flood.curl" | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ' ')
same flood_codes "$counts" "20 202 9980 429 "
entries=$(metric "$b1" captcha_code_store_entries)
keys=$(metric "$b1" captcha_store_keys)
# 20 codes and 20 phone keys + 1 address key at most.
if [ $((${entries:-99999} - entries0)) -le 20 ]; then ok flood_code_store_bounded; else fail flood_code_store_bounded "entries $entries0 -> $entries"; fi
if [ $((${keys:-99999} - keys0)) -le 21 ]; then ok flood_ratel_store_bounded; else fail flood_ratel_store_bounded "keys $keys0 -> $keys"; fi

# --- the same from 60 addresses of one IPv6 /64 (a subscriber's own,
# each address fresh): one address's 20 pass, as the /64 is one client
for i in $(seq 60); do
    printf 'url = "%s/captcha/send"\nheader = "X-Forwarded-For: 2001:db8:5:0:%x::1"\ndata = "{\\"telephone\\":\\"135%08d\\"}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\nnext\n' "$b1" "$i" "$i"
done | sed '$d' >"$tmp/flood6.curl"
counts=$(curl -s -K "$tmp/flood6.curl" | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ' ')
same flood_ipv6_one_client "$counts" "20 202 40 429 "
same flood_ipv6_other_64 "$(send_status "$b1" 13500000999 2001:db8:5:1::1)" 202

# --- metrics: outcomes, no phone numbers
m=$(curl -s "$b1/metrics")
contains metrics_sends "$m" 'captcha_sends_total{outcome="accepted"}'
contains metrics_limited "$m" 'captcha_sends_total{outcome="limited"}'
contains metrics_verifies "$m" 'captcha_verifies_total{outcome="success"} 4'
contains metrics_sender "$m" 'captcha_sender_results_total{result="success"}'
contains metrics_queue "$m" 'captcha_queue_depth 0'
if grep -qE '1[3-9][0-9]{9}' <<<"$m"; then fail metrics_no_phones "a phone number in /metrics"; else ok metrics_no_phones; fi

# --- notices persist across a restart; SIGTERM exits 0
stop main
    same sigterm_exit "$stopped" 0
contains stopped_log "$(tail -1 "$tmp/main.log")" 'msg="captchad stopped" status=0'
start main "$p1" || fail restart "did not come up"
body=$(curl -s -H "Authorization: Bearer $token" "$b1/notices?telephone=13800138000")
contains notices_after_restart "$body" '"state":"SUCCESS"'
stop main
    same sigterm_exit_2 "$stopped" 0
if grep -q 'level=info msg="send accepted" notice=' "$tmp/main.log"; then ok logfmt; else fail logfmt "no send line"; fi

# ============================================================ expiry
p2=$(free_port)
b2=http://127.0.0.1:$p2
write_config short "$p2" 'code_ttl_ms: 1000'
start short "$p2" || fail start_short "did not come up"
out=$(send "$b2" 13800138000)
# The code was stored before the 202: its TTL runs out at most 1 s after
# this (under valgrind a send takes a while, the first one of a process
# the longest).
t0=$(date +%s%N)
contains short_expires "$out" '"expires_in_s":1'
code=$(code_of "$tmp/short.sms" 13800138000)
contains short_message "$(cat "$tmp/short.sms")" "Your code is $code, valid 1 second"
# Wait until the TTL has passed (bounded: at most 3 s), then verify.
while [ $((($(date +%s%N) - t0) / 1000000)) -lt 1150 ]; do sleep 0.05; done
same expired "$(verify_body "$b2" 13800138000 "$code")" "$invalid"
stop short
    same short_sigterm "$stopped" 0

# ===================================================== webhook gateways
# gateway MODE PORT: answers POSTs with 200 (ok), 500 (fail) or never
# (hang), recording each body as a line in $tmp/gw-PORT.
cat >"$tmp/gateway.py" <<'EOF'
import http.server, socket, sys, threading, time
mode, port, record = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "hang":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(64); held = []
    open(record + ".ready", "w").close()
    while True:
        c, _ = s.accept(); held.append(c)
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(record, "ab") as f: f.write(body + b"\n")
        self.send_response(200 if mode == "ok" else 500)
        self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
open(record + ".ready", "w").close()
srv.serve_forever()
EOF
gateway() {
    python3 "$tmp/gateway.py" "$1" "$2" "$tmp/gw-$2" 2>>"$tmp/gw.err" &
    echo $! >"$tmp/pids/gw-$2"
    for _ in $(seq 100); do [ -e "$tmp/gw-$2.ready" ] && return 0; sleep 0.05; done
    return 1
}

# --- a gateway that answers 200: SUCCESS, and the JSON it got
g=$(free_port); gateway ok "$g"
p3=$(free_port); b3=http://127.0.0.1:$p3
write_config hook_ok "$p3" "$(printf 'sender:\n  type: webhook\n  url: http://127.0.0.1:%s/sms\n  timeout_ms: 2000' "$g")"
start hook_ok "$p3" || fail start_hook_ok "did not come up"
same hook_ok_send "$(send_status "$b3" 13800138000)" 202
body=$(notice_state "$b3" 13800138000 SUCCESS)
contains hook_ok_state "$body" '"provider_result":"webhook: HTTP 200"'
if python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); assert d["telephone"] == "+8613800138000" and len(d["code"]) == 6 and d["code"] in d["message"]' "$tmp/gw-$g" 2>/dev/null; then
    ok hook_payload
    code=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["code"])' "$tmp/gw-$g")
    same hook_code_verifies "$(verify "$b3" 13800138000 "$code")" 200
else
    fail hook_payload "$(head -c 300 "$tmp/gw-$g" 2>/dev/null)"
fi
stop hook_ok
    same hook_ok_sigterm "$stopped" 0

# --- a gateway that answers 500: FAILED, the permit refunded, code dropped
g=$(free_port); gateway fail "$g"
p4=$(free_port); b4=http://127.0.0.1:$p4
write_config hook_500 "$p4" "$(printf 'sender:\n  type: webhook\n  url: http://127.0.0.1:%s/sms\n  timeout_ms: 2000' "$g")"
start hook_500 "$p4" || fail start_hook_500 "did not come up"
same hook_500_send "$(send_status "$b4" 13800138000)" 202
body=$(notice_state "$b4" 13800138000 FAILED)
contains hook_500_failed "$body" '"state":"FAILED"'
contains hook_500_result "$body" '"provider_result":"webhook: HTTP 500"'
for _ in $(seq 100); do [ "$(metric "$b4" captcha_refunds_total)" = 1 ] && break; sleep 0.05; done
same hook_500_refunded "$(send_status "$b4" 13800138000)" 202
code=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["code"])' "$tmp/gw-$g" 2>/dev/null)
same hook_500_code_dropped "$(verify_body "$b4" 13800138000 "${code:-000000}")" "$invalid"
contains hook_500_metric "$(curl -s "$b4/metrics")" 'captcha_sender_results_total{result="failure"}'
stop hook_500
    same hook_500_sigterm "$stopped" 0

# --- a gateway that never answers: the timeout fails it; a full queue
g=$(free_port); gateway hang "$g"
p5=$(free_port); b5=http://127.0.0.1:$p5
write_config hook_hang "$p5" "$(printf 'sender:\n  type: webhook\n  url: http://127.0.0.1:%s/sms\n  timeout_ms: 700\n  queue_size: 1' "$g")"
start hook_hang "$p5" || fail start_hook_hang "did not come up"
same hang_send "$(send_status "$b5" 13800138000)" 202
# The worker has taken it: the queue (of 1) is empty, then holds one.
for _ in $(seq 100); do [ "$(metric "$b5" captcha_queue_depth)" = 0 ] && break; sleep 0.02; done
same hang_queued "$(send_status "$b5" 13800138001)" 202
out=$(send "$b5" 13800138002)
same queue_full "${out##* }" 503
body=$(notice_state "$b5" 13800138000 FAILED)
contains hang_failed "$body" '"state":"FAILED"'
contains hang_timeout "$body" 'Timeout'
notice_state "$b5" 13800138001 FAILED >/dev/null
same hang_refunded "$(send_status "$b5" 13800138000)" 202
same queue_full_refunded "$(send_status "$b5" 13800138002)" 202
contains queue_full_notice "$(curl -s -H "Authorization: Bearer $token" "$b5/notices?telephone=13800138002")" 'not sent: queue full'
stop hook_hang
    same hang_sigterm "$stopped" 0

# ========================================== kill -9 mid-flood, restart
# Sends are answered 202 once their notice is INIT and the job queued;
# the gateway never answers, so the jobs are still waiting when captchad
# is killed with SIGKILL. The next start must leave no notice INIT.

# db_count DB STATE: notices in STATE (python3's sqlite3, read-only).
db_count() {
    python3 -c 'import sqlite3,sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(c.execute("SELECT count(*) FROM notices WHERE state = ?", (sys.argv[2],)).fetchone()[0])' "$1" "$2"
}

# flood BASE IP FIRST N: N concurrent sends (curl --parallel) of phones
# FIRST, FIRST+1, ... from IP; prints the status codes' tally.
flood() {
    local i
    for i in $(seq 0 $(($4 - 1))); do
        printf 'url = "%s/captcha/send"\nheader = "X-Forwarded-For: %s"\ndata = "{\\"telephone\\":\\"%s\\"}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\nnext\n' "$1" "$2" "$(($3 + i))"
    done | sed '$d' >"$tmp/crash.curl"
    curl -s -Z --parallel-max 16 -K "$tmp/crash.curl" 2>/dev/null | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ' '
}

# kill9 NAME: SIGKILL, then waits until the process is gone.
kill9() { server_stop "$1" KILL 2>/dev/null; }

# wait_no_init DB: polls (bounded, 10 s) until no notice is INIT.
wait_no_init() {
    for _ in $(seq 200); do [ "$(db_count "$1" INIT)" = 0 ] && return 0; sleep 0.05; done
    return 1
}

hook() { printf 'sender:\n  type: webhook\n  url: http://127.0.0.1:%s/sms\n  timeout_ms: 30000\n  queue_size: 1000%s' "$1" "${2:-}"; }

# --- young notices (the default bound: code_ttl_ms) are sent again
crash_n=40
g=$(free_port); gateway hang "$g"
p6=$(free_port); b6=http://127.0.0.1:$p6
export CAPTCHA_DB=$tmp/crash.db
write_config crash1 "$p6" "$(printf 'policies:\n  send_ip: [1000/1h]\n'; hook "$g")"
start crash1 "$p6" || fail start_crash1 "did not come up"
same crash_flood "$(flood "$b6" 10.9.0.1 13500000000 "$crash_n")" "$crash_n 202 "
same crash_init_before "$(db_count "$CAPTCHA_DB" INIT)" "$crash_n"
kill9 crash1
same crash_init_after_kill "$(db_count "$CAPTCHA_DB" INIT)" "$crash_n"
g2=$(free_port); gateway ok "$g2"
write_config crash2 "$p6" "$(printf 'policies:\n  send_ip: [1000/1h]\n'; hook "$g2")"
start crash2 "$p6" || fail start_crash2 "did not come up"
contains crash_recovery_log "$(grep 'recovered stranded notices' "$tmp/crash2.log")" \
    "stranded=$crash_n resent=$crash_n failed=0 refunded=0 resend_max_age_ms=300000"
wait_no_init "$CAPTCHA_DB" && ok crash_no_init || fail crash_no_init "$(db_count "$CAPTCHA_DB" INIT) still INIT"
same crash_all_sent "$(db_count "$CAPTCHA_DB" SUCCESS)" "$crash_n"
same crash_gateway_got "$(wc -l <"$tmp/gw-$g2")" "$crash_n"
contains crash_metric "$(curl -s "$b6/metrics")" "captcha_recovered_notices_total{action=\"resent\"} $crash_n"
# The code sent again is the one that verifies.
code=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["telephone"] == "+8613500000007": print(d["code"])' "$tmp/gw-$g2")
same crash_resent_code_verifies "$(verify "$b6" 13500000007 "${code:-000000}" 10.9.0.2)" 200
stop crash2
same crash_sigterm "$stopped" 0
# A clean restart finds nothing to do.
start crash2 "$p6" || fail restart_crash2 "did not come up"
contains crash_clean_restart "$(grep 'recovered stranded notices' "$tmp/crash2.log" | tail -1)" 'stranded=0 resent=0 failed=0'
stop crash2

# --- a notice database from before the ip column: migrated, and its
# stranded notice (older than the bound) failed with the phone refunded
export CAPTCHA_DB=$tmp/old.db
python3 - "$CAPTCHA_DB" <<'EOF'
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1])
c.execute("""CREATE TABLE notices (id INTEGER PRIMARY KEY AUTOINCREMENT,
  target TEXT NOT NULL, content TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'INIT' CHECK (state IN ('INIT', 'SUCCESS', 'FAILED')),
  created_ms INTEGER NOT NULL, sent_ms INTEGER,
  attempts INTEGER NOT NULL DEFAULT 0, provider_result TEXT)""")
c.execute("INSERT INTO notices (target, content, created_ms) VALUES (?, ?, ?)",
          ("13600000001", "Your code is ******, valid 5 minutes",
           int(time.time() * 1000) - 3600000))
c.commit()
EOF
p7=$(free_port); b7=http://127.0.0.1:$p7
write_config oldschema "$p7"
start oldschema "$p7" || fail start_oldschema "did not come up"
contains oldschema_log "$(grep 'recovered stranded notices' "$tmp/oldschema.log")" 'stranded=1 resent=0 failed=1 refunded=1'
same oldschema_no_init "$(db_count "$CAPTCHA_DB" INIT)" 0
same oldschema_send "$(send_status "$b7" 13600000002 10.9.1.1)" 202
body=$(notice_state "$b7" 13600000002 SUCCESS)
contains oldschema_new_rows_work "$body" '"state":"SUCCESS"'
stop oldschema
unset CAPTCHA_DB

# ================================================ two instances, one Redis
if rport=$(redis_start); then
    pa=$(free_port); pb=$(free_port)
    ba=http://127.0.0.1:$pa; bb=http://127.0.0.1:$pb
    redis_store=$(printf 'store:\n  type: redis\n  url: redis://127.0.0.1:%s\n  on_failure: closed' "$rport")
    write_config ra "$pa" "$redis_store"
    write_config rb "$pb" "$redis_store"
    start ra "$pa" && start rb "$pb" || fail start_redis "did not come up"
    same redis_send_a "$(send_status "$ba" 13800138000)" 202
    same redis_send_b_limited "$(send_status "$bb" 13800138000 10.6.0.1)" 429
    code=$(code_of "$tmp/ra.sms" 13800138000)
    same redis_code_key "$(rcli "$rport" HGET 'captcha:code:{+8613800138000}' code)" "$code"
    ttl=$(rcli "$rport" PTTL 'captcha:code:{+8613800138000}')
    if [ "$ttl" -gt 290000 ] && [ "$ttl" -le 300000 ]; then ok redis_code_ttl; else fail redis_code_ttl "$ttl"; fi
    same redis_verify_b "$(verify "$bb" 13800138000 "$code")" 200
    same redis_verify_a_again "$(verify "$ba" 13800138000 "$code")" 400
    same redis_code_gone "$(rcli "$rport" EXISTS 'captcha:code:{+8613800138000}')" 0
    # Wrong guesses count across instances.
    send "$ba" 13800138001 >/dev/null
    code=$(code_of "$tmp/ra.sms" 13800138001)
    wrong=$(printf '%06d' $(((10#$code + 1) % 1000000)))
    for i in 1 2 3; do verify "$ba" 13800138001 "$wrong" >/dev/null; done
    for i in 1 2; do verify "$bb" 13800138001 "$wrong" >/dev/null; done
    same redis_wrong_invalidates "$(verify "$ba" 13800138001 "$code")" 400
    # Concurrent correct verifies on both instances: exactly one wins.
    send "$bb" 13800138002 10.6.0.2 >/dev/null
    code=$(code_of "$tmp/rb.sms" 13800138002)
    waitfor=()
    for i in $(seq 8); do
        if [ $((i % 2)) = 0 ]; then b=$ba; else b=$bb; fi
        { verify "$b" 13800138002 "$code" "10.7.0.$i"; echo; } >"$tmp/rconc.$i" &
        waitfor+=($!)
    done
    wait "${waitfor[@]}"
    same redis_concurrent_once "$(cat "$tmp"/rconc.* | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ' ')" "1 200 7 400 "
    stop ra
    same redis_sigterm_a "$stopped" 0
    stop rb
    same redis_sigterm_b "$stopped" 0
else
    fail redis "did not start"
fi

# --- old notices (a small bound) are failed and refunded: on Redis, where
# the permits outlive the process, so that the refund shows
if rport2=$(redis_start); then
    g=$(free_port); gateway hang "$g"
    p8=$(free_port); b8=http://127.0.0.1:$p8
    export CAPTCHA_DB=$tmp/crash-redis.db
    redis_yaml=$(printf 'store:\n  type: redis\n  url: redis://127.0.0.1:%s\n  on_failure: closed\npolicies:\n  send_ip: [%s/1h]\n' "$rport2" "$crash_n")
    write_config crash3 "$p8" "$redis_yaml"$'\n'"$(hook "$g")"
    start crash3 "$p8" || fail start_crash3 "did not come up"
    same old_flood "$(flood "$b8" 10.10.0.1 13400000000 "$crash_n")" "$crash_n 202 "
    # Both keys are charged: the address is spent, and so is each phone.
    same old_flood_ip_spent "$(send_status "$b8" 13400009999 10.10.0.1)" 429
    same old_flood_phone_spent "$(send_status "$b8" 13400000003 10.10.0.9)" 429
    same old_init_before "$(db_count "$CAPTCHA_DB" INIT)" "$crash_n"
    kill9 crash3
    g2=$(free_port); gateway ok "$g2"
    # resend_max_age_ms: 1 makes every notice of the flood old (the
    # restart alone takes longer), without waiting for code_ttl_ms.
    write_config crash4 "$p8" "$redis_yaml"$'\n'"$(hook "$g2" $'\n  resend_max_age_ms: 1')"
    start crash4 "$p8" || fail start_crash4 "did not come up"
    contains old_recovery_log "$(grep 'recovered stranded notices' "$tmp/crash4.log")" \
        "stranded=$crash_n resent=0 failed=$crash_n refunded=$crash_n resend_max_age_ms=1"
    same old_no_init "$(db_count "$CAPTCHA_DB" INIT)" 0
    same old_all_failed "$(db_count "$CAPTCHA_DB" FAILED)" "$crash_n"
    contains old_result "$(curl -s -H "Authorization: Bearer $token" "$b8/notices?telephone=13400000003")" \
        '"provider_result":"not sent: captchad stopped before sending; failed at the next start, permits refunded"'
    [ ! -s "$tmp/gw-$g2" ] && ok old_nothing_sent || fail old_nothing_sent "$(head -3 "$tmp/gw-$g2")"
    contains old_metric "$(curl -s "$b8/metrics")" "captcha_recovered_notices_total{action=\"failed\"} $crash_n"
    # The refunds: the phone and the address can send again at once.
    same old_phone_refunded "$(send_status "$b8" 13400000003 10.10.0.9)" 202
    same old_ip_refunded "$(send_status "$b8" 13400009999 10.10.0.1)" 202
    stop crash4
    same old_sigterm "$stopped" 0
    unset CAPTCHA_DB
else
    fail redis_crash "did not start"
fi

# TLS: a TLS-only redis-server holds both the rate limits and the codes
# (rediss:// with tls_ca_file): a code sent is in Redis and verifies once.
# tls_insecure=yes is warned about once at start; a verified URL is not.
unset CAPTCHA_DB
if tport=$(redis_start_tls); then
    certs=$(tls_certs)
    # Generous times: a TLS handshake under valgrind takes a while.
    pt=$(free_port); bt=http://127.0.0.1:$pt
    tls_times=$'\n  timeout_ms: 5000\n  connect_timeout_ms: 5000'
    tls_store=$(printf 'store:\n  type: redis\n  url: "rediss://127.0.0.1:%s?tls_ca_file=%s/ca.crt&tls_server_name=localhost"\n  on_failure: closed%s' "$tport" "$certs" "$tls_times")
    write_config tls "$pt" "$tls_store"
    start tls "$pt" || fail start_tls "did not come up"
    same tls_send "$(send_status "$bt" 13500000001 10.8.0.1)" 202
    code=$(code_of "$tmp/tls.sms" 13500000001)
    same tls_code_in_redis "$(rcli_tls "$tport" HGET 'captcha:code:{+8613500000001}' code)" "$code"
    same tls_verify "$(verify "$bt" 13500000001 "$code" 10.8.0.2)" 200
    same tls_verify_again "$(verify "$bt" 13500000001 "$code" 10.8.0.2)" 400
    same tls_not_warned "$(grep -c 'tls_insecure' "$tmp/tls.log")" 0
    stop tls
    same tls_sigterm "$stopped" 0
    write_config tlsi "$pt" "$(printf 'store:\n  type: redis\n  url: "rediss://127.0.0.1:%s?tls_insecure=yes"\n  on_failure: closed%s' "$tport" "$tls_times")"
    start tlsi "$pt" || fail start_tlsi "did not come up"
    same tls_insecure_send "$(send_status "$bt" 13500000002 10.8.0.3)" 202
    stop tlsi
    same tls_insecure_warned "$(grep -c 'level=warn msg="redis store TLS is not verified" reason="TLS certificate verification is off (tls_insecure=yes)' "$tmp/tlsi.log")" 1
else
    fail redis_tls "did not start"
fi

finish
