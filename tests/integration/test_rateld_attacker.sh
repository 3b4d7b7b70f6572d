#!/usr/bin/env bash
# A client that tries to steer its bucket through the original request's
# method, host and key values (docs/gateways.md, docs/config.md "Keys"),
# against a real rateld with auth.gateway nginx and auth.unmatched: allow,
# where anything rateld did not match would pass unlimited:
# - a method is an HTTP token, matched in any case: `get` does not leave a
#   `method: GET` route, nor does HEAD (backends run GET's handler for
#   it); `x"level=error` is 400 bad-request (counted); a method-override
#   (X-HTTP-Method-Override, ?_method=) naming another method, and a
#   URL override (X-Original-URL, X-Rewrite-URL), are 400 ambiguous;
# - a path with a format suffix (/sendCaptcha.json) is its route's;
# - a host is one host name: `VICTIM.example.:80` is victim.example, two
#   hosts ("a, b") or a %-escaped one are 400 bad-request, never the
#   unlimited route beside the host's;
# - a header a route matches on (`headers:`) given twice is 400 ambiguous;
# - the ip key of an IPv6 client is its /64: new addresses from one /64
#   are one bucket; with fold_case, "Alice" and "ALICE" are one bucket;
# - a key value is one value: a header key source given twice, a value
#   with a control byte (%0a, %09, \n in JSON) are 400 bad-key; spaces
#   around a value do not make another bucket; a ';' separates query
#   parameters as '&' does (139;x=1 is 139, 139;telephone=140 is twice);
#   a query key on a request with a form body is 400 bad-key (backends
#   read the body's parameter too);
# - a web page cannot spend or give back permits: without api_token, a
#   browser's no-cors fetch (text/plain body, Origin, Sec-Fetch-Site)
#   to /v1/refund, /v1/acquire, /v1/release or /v1/reset is 403, while
#   the application's plain requests and a gateway's /v1/auth work;
# - 20,000 unique phone numbers through /v1/auth leave the store within
#   its max_bytes (64 KiB here), evicting the least recently used, while
#   the number sent last is still limited.
. "$(dirname "$0")/lib.sh"

if [ ! -x "$build/rateld" ]; then
    echo "FAIL $build/rateld missing (make)"
    echo "0 passed, 1 failed"
    exit 1
fi

port=$(free_port)
url=http://127.0.0.1:$port

cat >"$tmp/rateld.yaml" <<YAML
listen: 127.0.0.1:$port
trusted_proxies: [127.0.0.1]
store:
  type: memory
  max_bytes: 64KiB
auth:
  gateway: nginx
  unmatched: allow
policies:
  sms:
    rules: [1/60s]
    key: query:telephone
  victim:
    rules: [1/60s]
    key: ip
  reads:
    rules: [1/60s]
    key: ip
  user:
    rules: [1/60s]
    key: header:X-User
  phone:
    rules: [1/60s]
    key: json:phone
  addr:
    rules: [1/60s]
    key: ip
  login:
    rules: [1/60s]
    key: header:X-Login
    fold_case: true
routes:
  - path: /login
    policies: [login]
  - path: /six
    policies: [addr]
  - path: /sendCaptcha
    policies: [sms]
  - path: /v
    host: victim.example
    policies: [victim]
  - path: /g
    method: GET
    policies: [reads]
  - path: /h
    policies: [user]
  - path: /j
    policies: [phone]
  - path: /plan
    headers: {X-Plan: free}
    policies: [reads]
YAML
# RATELD_WRAP (make valgrind: "valgrind ... --error-exitcode=99")
# prefixes rateld; an error or a leak then fails sigterm_exit.
read -r -a rateld_wrap <<<"${RATELD_WRAP:-}"
"${rateld_wrap[@]}" "$build/rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
rateld_pid=$!
echo "$rateld_pid" >"$tmp/pids/rateld"
wait_for 20 curl -s -o /dev/null "$url/healthz"

metric() { curl -s "$url/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }'; }

# ask URI METHOD [curl args...]: "STATUS REASON" of /v1/auth for that
# original request, sent as nginx's snippet sends it.
ask() {
    local uri=$1 method=$2
    shift 2
    curl -s -D "$tmp/h" -o /dev/null -H "X-Original-URI: $uri" \
        -H "X-Original-Method: $method" "$@" "$url/v1/auth"
    printf '%s %s' "$(head -1 "$tmp/h" | cut -d' ' -f2)" \
        "$(grep -i '^X-Ratel-Reason:' "$tmp/h" | cut -d' ' -f2 | tr -d '\r')"
}

# --- methods
same method_first "$(ask /g GET)" '200 '
for m in GET get Get gEt HEAD head; do
    same "method_same_route $m" "$(ask /g "$m")" '429 rate-limited'
done
before=$(metric 'ratel_auth_undecided_total{reason="bad-request"}')
for m in 'x"level=error' 'GET /evil' "$(printf 'G%.0s' $(seq 40))" 'GE(T'; do
    same "method_refused $m" "$(ask /g "$m")" '400 bad-request'
done
after=$(metric 'ratel_auth_undecided_total{reason="bad-request"}')
# A POST the backend would serve as another method (method-override
# middleware): ambiguous; the same method named again is no override.
for h in X-HTTP-Method-Override x-http-method X-Method-Override; do
    same "method_override $h" "$(ask /g2 POST -H "$h: GET")" '400 ambiguous'
done
same method_override_same "$(ask /g2 POST -H 'X-HTTP-Method-Override: post')" '200 unmatched'
for q in '_method=DELETE' 'a=1;_method=GET' '_method=POST&_method=GET' '_method=%zz'; do
    same "method_override_query $q" "$(ask "/g2?$q" POST)" '400 ambiguous'
done
same method_override_query_same "$(ask '/g2?_method=post' POST)" '200 unmatched'
# A path a backend would serve instead (IIS, Zend, older Symfony).
for h in X-Original-URL x-rewrite-url; do
    same "path_override $h" "$(ask /g2 GET -H "$h: /sendCaptcha?telephone=139")" '400 ambiguous'
done
same method_refusals_counted "$((after - before))" 4
contains method_refusal_logged "$(cat "$tmp/rateld.log")" \
    'reason=bad-request answer=400 detail="cannot tell which request to decide: the original method is not an HTTP method'
if grep -q 'level=error' "$tmp/rateld.log"; then
    fail method_no_forged_field "$(grep 'level=error' "$tmp/rateld.log")"
else
    ok method_no_forged_field
fi

# --- a format suffix: Rails and Spring serve /sendCaptcha.json as
# /sendCaptcha (the limit is the same bucket's)
same suffix_first "$(ask '/sendCaptcha?telephone=150' GET)" '200 '
for p in /sendCaptcha.json /sendCaptcha.xml /sendCaptcha.; do
    same "suffix_same $p" "$(ask "$p?telephone=150" GET)" '429 rate-limited'
done

# --- hosts
same host_first "$(ask /v GET -H 'X-Forwarded-Host: victim.example')" '200 '
for h in VICTIM.example victim.example. victim.example:80 VICTIM.EXAMPLE.:8080; do
    same "host_same_route $h" "$(ask /v GET -H "X-Forwarded-Host: $h")" '429 rate-limited'
done
for h in 'victim.example, other.example' 'victim%2eexample' 'victim.example..' \
    'victim.example:80:90' 'user@victim.example' 'victim example'; do
    same "host_refused $h" "$(ask /v GET -H "X-Forwarded-Host: $h")" '400 bad-request'
done
same host_twice "$(ask /v GET -H 'X-Forwarded-Host: a.example' -H 'X-Forwarded-Host: victim.example')" \
    '400 ambiguous'
# Another host is another route: the unlimited one here, by design.
same host_other "$(ask /v GET -H 'X-Forwarded-Host: other.example')" '200 unmatched'

# --- header keys
same header_first "$(ask /h GET -H 'X-User: bob')" '200 '
same header_same "$(ask /h GET -H 'X-User:   bob  ')" '429 rate-limited'
same header_twice "$(ask /h GET -H 'X-User: alice' -H 'X-User: bob')" '400 bad-key'
same header_twice_case "$(ask /h GET -H 'x-user: alice' -H 'X-USER: alice')" '400 bad-key'

# --- the ip key: an IPv6 client is its /64 (it holds all of it)
six() { ask /six GET -H "X-Forwarded-For: $1"; }
same six_first "$(six 2001:db8:1:2::1)" '200 '
for a in 2001:db8:1:2::2 2001:DB8:1:2:ffff:ffff:ffff:ffff '[2001:db8:1:2:0:0:0:7]' 2001:0db8:0001:0002::9; do
    same "six_same_64 $a" "$(six "$a")" '429 rate-limited'
done
same six_other_64 "$(six 2001:db8:1:3::1)" '200 '
same six_v4 "$(six 192.0.2.1)" '200 '
same six_v4_other "$(six 192.0.2.2)" '200 '
same six_v4_mapped "$(six ::ffff:192.0.2.1)" '429 rate-limited'
same six_key "$(curl -s "$url/v1/acquire?policy=addr&key=2001:db8:1:2::/64&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":0'

# --- fold_case: a backend that reads user names in any case
same fold_first "$(ask /login POST -H 'X-Login: Alice@Example.com')" '200 '
for u in alice@example.com ALICE@EXAMPLE.COM aLiCe@eXaMpLe.CoM; do
    same "fold_same $u" "$(ask /login POST -H "X-Login: $u")" '429 rate-limited'
done
same fold_other "$(ask /login POST -H 'X-Login: alice2@example.com')" '200 '
# ... and without it, the case is the client's (another bucket).
same nofold_first "$(ask /h GET -H 'X-User: Carol')" '200 '
same nofold_other_case "$(ask /h GET -H 'X-User: carol')" '200 '

# --- route headers: one value, or refused
same route_header_first "$(ask /plan GET -H 'X-Plan: free' -H 'X-Forwarded-For: 10.9.9.9')" '200 '
same route_header_same "$(ask /plan GET -H 'X-Plan: free')" '429 rate-limited'
same route_header_twice "$(ask /plan GET -H 'X-Plan: premium' -H 'X-Plan: free')" '400 ambiguous'
same route_header_twice_case "$(ask /plan GET -H 'x-plan: free' -H 'X-PLAN: premium')" '400 ambiguous'
contains route_header_says_which "$(curl -s -H 'X-Original-URI: /plan' -H 'X-Original-Method: GET' \
    -H 'X-Plan: a' -H 'X-Plan: b' "$url/v1/auth")" 'X-Plan, which routes match on, given more than once'

# --- query keys
same query_first "$(ask '/sendCaptcha?telephone=139' GET)" '200 '
for v in 139 %31%33%39 +139 %20139%20 '139+'; do
    same "query_same $v" "$(ask "/sendCaptcha?telephone=$v" GET)" '429 rate-limited'
done
# A form body: a servlet, PHP's $_REQUEST and Rails would read its
# telephone (140) beside or instead of the query's (a fresh one each
# time): refused, whatever the query says. JSON is not refused.
for t in application/x-www-form-urlencoded 'Multipart/Form-Data; boundary=x' \
    'application/x-www-form-urlencoded;charset=UTF-8'; do
    same "query_form_body $t" "$(ask "/sendCaptcha?telephone=1$RANDOM" POST -H "Content-Type: $t")" '400 bad-key'
done
same query_json_body "$(ask '/sendCaptcha?telephone=160' POST -H 'Content-Type: application/json')" '200 '

# Rack (before 3) and older Python split a query at ';' too: 139;x=1 is
# 139 to them, 139;telephone=140 the number twice.
for v in '139;x=1' '139;' '139;;y'; do
    same "query_semicolon_same $v" "$(ask "/sendCaptcha?telephone=$v" GET)" '429 rate-limited'
done
same query_semicolon_first "$(ask '/sendCaptcha?x=1;telephone=139' GET)" '429 rate-limited'
# ASP.NET reads names without case: Telephone= is the number given twice.
for v in '139%0a' '139%0d%0aX' '%09139' '139%7f' '139%00' '139&telephone=140' '139;telephone=140' 'x;telephone=139' '139&Telephone=140' '139&TELEPHONE=139'; do
    same "query_refused $v" "$(ask "/sendCaptcha?telephone=$v" GET)" '400 bad-key'
done

# --- JSON keys
same json_first "$(ask /j POST --data '{"phone":"138"}')" '200 '
for body in '{"phone":138}' '{"phone":" 138"}' '{"phone":"\u0031\u00338"}' '{"phone":1.38e2}'; do
    same "json_same $body" "$(ask /j POST --data "$body")" '429 rate-limited'
done
for body in '{"phone":"138\n"}' '{"phone":"13\u00008"}' '{"phone":"x","phone":"138"}' \
    '{"phone":["138"]}'; do
    same "json_refused $body" "$(ask /j POST --data "$body")" '400 bad-key'
done

# --- a web page in a browser that reaches rateld (no api_token here)
post() { curl -s -o /dev/null -w '%{http_code}' -X POST "$@"; }
page=(-H 'Origin: https://evil.example' -H 'Content-Type: text/plain;charset=UTF-8'
    -H 'Sec-Fetch-Site: cross-site' -H 'Sec-Fetch-Mode: no-cors')
body='{"policy":"sms","key":"13900000000"}'
same app_acquire "$(post --data-binary "$body" "$url/v1/acquire")" 200
same app_limited "$(post --data-binary "$body" "$url/v1/acquire")" 429
for ep in refund release reset acquire; do
    same "page_$ep" "$(post "${page[@]}" --data-binary "$body" "$url/v1/$ep")" 403
done
same page_origin_only "$(post -H 'Origin: null' --data-binary "$body" "$url/v1/refund")" 403
same page_same_site "$(post -H 'Sec-Fetch-Site: same-site' --data-binary "$body" "$url/v1/refund")" 403
same page_img "$(curl -s -o /dev/null -w '%{http_code}' -H 'Sec-Fetch-Site: cross-site' \
    "$url/v1/acquire?policy=sms&key=13900000001")" 403
same page_still_limited "$(post --data-binary "$body" "$url/v1/acquire")" 429
contains page_says_why "$(curl -s -X POST "${page[@]}" --data-binary "$body" "$url/v1/refund")" \
    'is not for browsers'
same typed_address "$(curl -s -o /dev/null -w '%{http_code}' -H 'Sec-Fetch-Site: none' \
    "$url/v1/acquire?policy=sms&key=13900000002")" 200
same app_refunds "$(post --data-binary "$body" "$url/v1/refund")" 200
same page_auth "$(ask /g2 GET -H 'Origin: https://evil.example' -H 'Sec-Fetch-Site: cross-site')" '200 unmatched'
same page_metrics "$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: https://x.example' "$url/metrics")" 200

# --- 20,000 unique keys (one keep-alive connection, as a gateway's)
python3 - "$port" >"$tmp/flood.out" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
codes = {}
for i in range(20000):
    c.request("GET", "/v1/auth", headers={
        "X-Original-URI": "/sendCaptcha?telephone=17%09d" % i,
        "X-Original-Method": "GET"})
    r = c.getresponse()
    r.read()
    codes[r.status] = codes.get(r.status, 0) + 1
print(" ".join("%d:%d" % kv for kv in sorted(codes.items())))
PY
same flood_all_allowed "$(cat "$tmp/flood.out")" '200:20000'
bytes=$(metric 'ratel_store_bytes ')
max=$(metric 'ratel_store_max_bytes ')
if [ -n "$bytes" ] && [ "$bytes" -le 65536 ]; then ok "flood_store_bounded ($bytes of $max bytes)"; else fail flood_store_bounded "[$bytes] of [$max]"; fi
evicted=$(metric 'ratel_store_evictions_total ')
if [ "${evicted:-0}" -gt 0 ]; then ok "flood_evicted ($evicted)"; else fail flood_evicted "[$evicted]"; fi
same flood_last_still_limited "$(ask '/sendCaptcha?telephone=17000019999' GET)" '429 rate-limited'

# --- SIGTERM: exits 0 (under valgrind: no error, no leak)
kill -TERM "$rateld_pid"
status=
for _ in $(seq 600); do
    if ! kill -0 "$rateld_pid" 2>/dev/null; then wait "$rateld_pid"; status=$?; break; fi
    sleep 0.05
done
same sigterm_exit "$status" 0
[ "$status" = 99 ] && grep '^==' "$tmp/rateld.log" | head -40

finish
