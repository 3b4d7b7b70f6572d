#!/usr/bin/env bash
# rateld behind a real nginx (Debian's) with auth_request, configured as
# docs/deployment.md shows: the 21st request through nginx gets 429 with
# Retry-After and the RateLimit fields; the client address reaches rateld
# through X-Forwarded-For from a trusted proxy (nginx on 127.0.0.1).
. "$(dirname "$0")/lib.sh"

rateld=$build/rateld
if ! command -v nginx >/dev/null || [ ! -x "$rateld" ]; then
    echo "FAIL nginx or $rateld missing (scripts/setup.sh, make)"
    echo "0 passed, 1 failed"
    exit 1
fi

rport=$(free_port)
nport=$(free_port)
mkdir -p "$tmp/nginx/logs" "$tmp/www/api"
echo pong >"$tmp/www/api/ping"
echo sent >"$tmp/www/sendCaptcha"
# nginx's workers run as an unprivileged user when started as root.
chmod 755 "$tmp" "$tmp/www" "$tmp/www/api"
chmod 644 "$tmp/www/api/ping" "$tmp/www/sendCaptcha"

cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$rport
trusted_proxies: [127.0.0.1]
policies:
  ping:
    rules: [20/1m]
    key: ip
  sms:
    rules: [1/60s, 10/1d]
    key: query:telephone
routes:
  - path: /api/ping
    policies: [ping]
  - path: /sendCaptcha
    policies: [sms]
EOF

# The snippet of docs/deployment.md, with this test's ports and paths.
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    upstream rateld { server 127.0.0.1:$rport; keepalive 16; }
    server {
        listen 127.0.0.1:$nport;
        root $tmp/www;
        default_type text/plain;

        location = /_ratel {
            internal;
            proxy_pass http://rateld/v1/auth;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI \$request_uri;
            proxy_set_header X-Original-Method \$request_method;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
        location @ratel_429 {
            add_header Retry-After \$ratel_retry_after always;
            add_header RateLimit \$ratel_limit always;
            add_header RateLimit-Policy \$ratel_policy always;
            return 429 "rate limited\n";
        }
        location / {
            auth_request /_ratel;
            auth_request_set \$ratel_retry_after \$upstream_http_retry_after;
            auth_request_set \$ratel_limit \$upstream_http_ratelimit;
            auth_request_set \$ratel_policy \$upstream_http_ratelimit_policy;
            error_page 403 = @ratel_429;
        }
    }
}
EOF

"$rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
echo $! >"$tmp/pids/rateld"
nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx/out.log" 2>&1 &
echo $! >"$tmp/pids/nginx"
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$rport/healthz" &&
        curl -s -o /dev/null "http://127.0.0.1:$nport/" && break
    sleep 0.05
done

codes=$(for i in $(seq 22); do
    curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$nport/api/ping"
done | tr '\n' ' ')
same through_nginx "$codes" "$(printf '200 %.0s' $(seq 20))429 429 "
curl -s -D "$tmp/h" -o "$tmp/b" "http://127.0.0.1:$nport/api/ping"
ra=$(grep -i '^Retry-After:' "$tmp/h" | tr -d '\r' | awk '{print $2}')
if [[ $ra =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && [ "$ra" -le 60 ]; then ok nginx_retry_after; else fail nginx_retry_after "[$ra] $(cat "$tmp/h")"; fi
contains nginx_ratelimit "$(cat "$tmp/h")" 'RateLimit: '
contains nginx_ratelimit_policy "$(cat "$tmp/h")" 'RateLimit-Policy: '
same nginx_body "$(cat "$tmp/b")" "rate limited"
same nginx_content "$(curl -s "http://127.0.0.1:$nport/sendCaptcha?telephone=13800138000")" sent
same nginx_sms_second "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/sendCaptcha?telephone=13800138000")" 429
same nginx_sms_other "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/sendCaptcha?telephone=13900139000")" 200
# The address rateld limited is the client's, as nginx forwarded it.
same nginx_client_key "$(curl -s "http://127.0.0.1:$rport/v1/acquire?policy=ping&key=127.0.0.1&peek=1" | grep -o '"remaining":[0-9]*')" '"remaining":0'

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log" "$tmp/nginx/logs/error.log"
finish
