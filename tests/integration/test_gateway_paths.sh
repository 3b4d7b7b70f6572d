#!/usr/bin/env bash
# rateld's /v1/auth decides the path a backend serves, not the client's
# spelling of it (rateld/path.h, docs/gateways.md "Which path rateld
# matches"), without a gateway in front: the header form (auth.gateway
# nginx) and Envoy's form (/v1/auth + the original path), both with
# auth.unmatched: allow, where a spelling rateld did not match would pass
# unlimited. Every spelling of /sendCaptcha gets the limit; the `path` key
# source reads the same normal form (one bucket for /files/a, //files/./a,
# /files/%61;v=2); a path with no safe normal form is 400 bad-uri, counted
# and logged; a route prefix not written normalised stops rateld at start
# with the form to write.
. "$(dirname "$0")/lib.sh"

require_built rateld

port=$(free_port)
url=http://127.0.0.1:$port

# start GATEWAY: rateld with that auth.gateway and unmatched: allow.
start() {
    cat >"$tmp/rateld.yaml" <<YAML
listen: 127.0.0.1:$port
trusted_proxies: [127.0.0.1]
auth:
  gateway: $1
  unmatched: allow
policies:
  sms:
    rules: [1/60s]
    key: query:telephone
  files:
    rules: [1/60s]
    key: path
routes:
  - path: /sendCaptcha
    policies: [sms]
  - path: /files/
    policies: [files]
YAML
    server_start rateld "$port" "$build/rateld" --config "$tmp/rateld.yaml" >/dev/null
}

stop() { server_stop rateld; }

metric() { curl -s "$url/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }'; }

# ask FORM PATH: the status and X-Ratel-Reason of /v1/auth for original
# request PATH, sent in the header form or Envoy's.
ask() {
    local args=(-s -D "$tmp/h" -o /dev/null --path-as-is)
    if [ "$1" = header ]; then
        curl "${args[@]}" -H "X-Original-URI: $2" -H 'X-Original-Method: GET' "$url/v1/auth"
    else
        curl "${args[@]}" "$url/v1/auth$2"
    fi
    printf '%s %s' "$(head -1 "$tmp/h" | cut -d' ' -f2)" \
        "$(grep -i '^X-Ratel-Reason:' "$tmp/h" | cut -d' ' -f2 | tr -d '\r')"
}

# check FORM: the spellings in that form.
check() {
    local form=$1 p before after
    same "${form}_first" "$(ask "$form" '/sendCaptcha?telephone=1')" '200 '
    for p in //sendCaptcha /%73endCaptcha /send%43aptcha /./sendCaptcha \
        /api/../sendCaptcha /api/%2e%2E/sendCaptcha '/sendCaptcha;jsessionid=1' \
        '/api/..;/sendCaptcha' /sendCaptcha/ '//api/./..//sendCaptcha'; do
        same "${form}_same $p" "$(ask "$form" "$p?telephone=1")" '429 rate-limited'
    done
    # Another path to nginx, Caddy and Spring: unmatched, allowed here.
    same "${form}_case" "$(ask "$form" '/SendCaptcha?telephone=1')" '200 unmatched'
    # An escaped '?' or ';' is part of the name: another path.
    same "${form}_escaped_semicolon" "$(ask "$form" '/sendCaptcha%3Bx?telephone=1')" '200 unmatched'
    before=$(metric 'ratel_auth_undecided_total{reason="bad-uri"}')
    for p in /sendCaptcha%2F /api/..%2fsendCaptcha /api/..%5CsendCaptcha \
        /sendCaptcha%00 /send%zzCaptcha /send%4 /../sendCaptcha \
        /api/../../sendCaptcha /%2e%2e/sendCaptcha '/..;/sendCaptcha'; do
        same "${form}_refused $p" "$(ask "$form" "$p?telephone=1")" '400 bad-uri'
    done
    after=$(metric 'ratel_auth_undecided_total{reason="bad-uri"}')
    same "${form}_refused_counted" "$((after - before))" 10
    # The path key: one bucket for every spelling of /files/a.
    same "${form}_key_first" "$(ask "$form" /files/a)" '200 '
    for p in //files/./a /files/%61 '/files/a;v=2' /files/b/../a; do
        same "${form}_key_same $p" "$(ask "$form" "$p")" '429 rate-limited'
    done
    same "${form}_key_other" "$(ask "$form" /files/b)" '200 '
}

start nginx || fail start_nginx "$(tail -3 "$tmp/rateld.log")"
check header
contains refused_logged "$(cat "$tmp/rateld.log")" 'reason=bad-uri answer=400'
contains refused_log_says_why "$(grep 'reason=bad-uri' "$tmp/rateld.log" | head -1)" "has an encoded '/' (%2F)"
stop
start envoy || fail start_envoy "$(tail -3 "$tmp/rateld.log")"
check envoy
# /v1/auth/ is Envoy's request for / (an auth request, not a 404).
same envoy_root "$(ask envoy /)" '200 unmatched'
stop

# A route prefix must be written as requests are matched.
sed -i 's#  - path: /files/#  - path: //files/./#' "$tmp/rateld.yaml"
out=$("$build/rateld" --check-config "$tmp/rateld.yaml" 2>&1)
same prefix_refused_status "$?" 1
contains prefix_refused_says "$out" "routes[1].path: \"//files/./\" is not a normalised path: requests are matched as \"/files/\" (write that)"

finish
