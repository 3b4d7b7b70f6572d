#!/usr/bin/env bash
# rateld behind a real nginx (Debian's) with auth_request, configured with
# docs/gateways.md's snippets as written (ports and paths changed): the
# ping demo gives 20 x 200 then 429 with Retry-After and the RateLimit
# fields; a missing key is 400; an unmatched or unidentified request is
# refused and counted; a hostile client's X-Original-* / X-Forwarded-* /
# Forwarded / Host headers (alone, twice, in any case) move no request to
# another route, key, method or host, nor past its limit, with
# auth.gateway: nginx and with auth.gateway unset; with rateld stopped or
# killed, the fail-closed snippet answers 503 and the fail-open one serves
# the page, both within the snippet's timeout. The snippet as printed
# also passes `nginx -t` beside ratel's nginx module, whose variables
# ($ratel_*) it must not define again.
. "$(dirname "$0")/gateway_lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$build/rateld"

# start_nginx SNIPPET...: the page's server block(s) inside this test's
# own http { } (nginx_conf's, without the module: the snippet is for an
# nginx without it).
start_nginx() {
    {
        echo "    default_type text/plain;"
        "$@"
    } | nginx_module='' nginx_conf "$tmp/nginx" 1
    nginx_module='' nginx_start "$tmp/nginx" "http://127.0.0.1:$gport/"
}

# The fail-open variant: the page's @ratel_down location replaced by the
# nginx-open snippet.
open_variant() {
    snippet nginx | awk -v repl="$(snippet nginx-open)" '
        /# rateld down or slow: fail closed\./ { skip = 1; next }
        skip && /^    location @ratel_down/ { inblock = 1; next }
        skip && inblock && /^    }/ { print repl; skip = 0; inblock = 0; next }
        skip && inblock { next }
        { print }'
}

# nginx's auth_request passes only 2xx, 401 and 403: deny_status 403.
start_rateld 403 nginx || fail rateld_start "$(tail -3 "$tmp/rateld.log")"
start_nginx snippet nginx
check_demo nginx
check_hostile nginx
# The value of the key: after the number is limited, no spelling of it,
# no second copy and no other place for it gets a 2xx.
check_attacks nginx
# For nginx (deny_status 403) a refusal has no body: nginx never shows it,
# and would close its keep-alive connection to rateld to skip one.
curl -s -D "$tmp/h" -o "$tmp/b" -H 'X-Original-URI: /sendCaptcha?telephone=13800138000' -H 'X-Original-Method: GET' "http://127.0.0.1:$rport/v1/auth"
same nginx_refusal_status "$(head -1 "$tmp/h" | cut -d' ' -f2)" 403
same nginx_refusal_reason "$(header X-Ratel-Reason "$tmp/h")" rate-limited
same nginx_refusal_no_body "$(header Content-Length "$tmp/h")/$(wc -c <"$tmp/b")" 0/0
# Allowed answers carry the fields too.
curl -s -D "$tmp/h" -o /dev/null --interface 127.0.0.5 "http://127.0.0.1:$gport/api/ping"
same nginx_allowed_ratelimit "$(header RateLimit "$tmp/h")" '"ping-0";r=19;t=60'
same nginx_allowed_policy "$(header RateLimit-Policy "$tmp/h")" '"ping-0";q=20;w=60'
same nginx_content "$(curl -s --interface 127.0.0.6 "http://127.0.0.1:$gport/api/ping")" pong
# auth.gateway unset: the snippet replaces or empties every candidate.
stop_rateld
start_rateld 403 "" || fail rateld_default_start "$(tail -3 "$tmp/rateld.log")"
check_hostile_limited nginx-default
# auth.unmatched: allow: no spelling of a path passes unlimited.
check_spellings_allow nginx-allow 403 nginx
check_down nginx_closed 503 503

nginx_stop "$tmp/nginx"
start_rateld 403 nginx || fail rateld_restart "$(tail -3 "$tmp/rateld.log")"
start_nginx open_variant
same nginx_open_running "$(code "http://127.0.0.1:$gport/api/ping")" 200
check_down nginx_open 200 200
same nginx_open_content "$(curl -s --interface 127.0.0.7 "http://127.0.0.1:$gport/api/ping")" pong

nginx_stop "$tmp/nginx"

# The snippet as printed in an nginx that loads ratel's module too (as a
# site moving to the module may run both): nginx -t takes it, with the
# module's variables in the access log beside the snippet's.
if [ -e "$nginx_so" ]; then
    snippet nginx | nginx_conf "$tmp/beside" 1
    contains snippet_beside_module "$(ngx -t -p "$tmp/beside" -c "$tmp/beside/nginx.conf" 2>&1)" "test is successful"
else
    fail snippet_beside_module "$nginx_so missing (make)"
fi

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log" "$tmp/nginx/logs/error.log"
hostile_summary
attack_summary
finish
