#!/usr/bin/env bash
# test_secrets.sh - no default secret works, no secret is printed, and
# the files and logs a client touches cannot be abused:
#  - every token the pages print (README*.md, docs/, examples/, captchad/), the
#    example tokens and a short token are refused by rateld and captchad
#    at start and by --check-config, naming the reason; a long random one
#    is accepted;
#  - both warn at start about a config holding a secret that any user can
#    read, and about running as root outside systemd;
#  - --check-config, the logs of a run (a right and a wrong password, a
#    webhook's credentials) and the CLI's messages never hold a credential;
#  - a forged X-Original-URI leaves one well-formed log line; 1,000
#    refused sends write a handful of lines;
#  - captchad creates its database and SMS log 0600 (umask 000) and
#    refuses a symbolic link for either.
. "$(dirname "$0")/lib.sh"

rateld=$build/rateld
captchad=$build/captchad
ratel=$build/ratel
good_token=$(openssl rand -hex 32)

# A rateld configuration with one policy and one route; $1 the token line.
rateld_config() {
    cat <<EOF
listen: 127.0.0.1:${port:-0}
$1
trusted_proxies: [127.0.0.1]
policies:
  ping: {rules: [20/1m], key: ip}
routes:
  - {path: /api/ping, policies: [ping]}
EOF
}

# ---------------------------------------------------------- tokens refused

# Every token literal the pages show a reader: admin_token/api_token
# values and Authorization / X-Admin-Token header values (not variables).
printed=$(cd "$root" && grep -rhoE \
    "(admin_token|api_token): *\"?[^\" ]+\"?|Bearer [^ '\"\`\\\\]+|X-Admin-Token: [^ '\"\`\\\\]+" \
    README*.md docs examples captchad 2>/dev/null |
    sed -E 's/^(admin_token|api_token): *//; s/^Bearer //; s/^X-Admin-Token: //; s/^"//; s/"$//' |
    sed -E 's/[).,;:]+$//' | grep -v '^\$' | grep -v '^$' | sort -u)
tokens=$(printf '%s\n' "$printed" change-me-to-a-long-random-string change-me \
    x1-Y2_z3 "$(printf 'a%.0s' $(seq 31))" | grep -v '^$' | sort -u)
echo "# tokens tried: $(echo "$tokens" | tr '\n' ' ')"
n=0
while read -r t; do
    n=$((n + 1))
    rateld_config "admin_token: \"$t\"" >"$tmp/tok.yaml"
    out=$("$rateld" --check-config "$tmp/tok.yaml" 2>&1)
    rc=$?
    if [ $rc = 1 ] && [[ $out == *"admin_token: "*"openssl rand -hex 32"* ]]; then
        ok "rateld_check_refuses_token_$n"
    else
        fail "rateld_check_refuses_token_$n" "[$t] rc=$rc: $out"
    fi
    out=$("$rateld" --config "$tmp/tok.yaml" 2>&1)
    rc=$?
    if [ $rc = 1 ] && [[ $out == *"admin_token: "* ]]; then ok "rateld_start_refuses_token_$n"; else fail "rateld_start_refuses_token_$n" "[$t] rc=$rc: $out"; fi
    printf 'admin_token: "%s"\n' "$t" >"$tmp/ctok.yaml"
    out=$("$captchad" --check-config "$tmp/ctok.yaml" 2>&1)
    rc=$?
    if [ $rc = 1 ] && [[ $out == *"admin_token: "*"openssl rand -hex 32"* ]]; then ok "captchad_refuses_token_$n"; else fail "captchad_refuses_token_$n" "[$t] rc=$rc: $out"; fi
done <<<"$tokens"
[ "$n" -ge 5 ] && ok tokens_tried || fail tokens_tried "only $n tokens"
# The reasons: a printed token is named as one; a short one by its length
# only (the token itself is a secret).
rateld_config 'admin_token: "change-me-to-a-long-random-string"' >"$tmp/tok.yaml"
contains reason_printed "$("$rateld" --config "$tmp/tok.yaml" 2>&1)" \
    'is the example token printed in ratel'"'"'s documentation'
rateld_config 'admin_token: "Sh0rt-but-secret"' >"$tmp/tok.yaml"
out=$("$rateld" --config "$tmp/tok.yaml" 2>&1)
contains reason_short "$out" "16 bytes long; a token needs at least 32"
same short_token_not_shown "$(grep -c 'Sh0rt-but-secret' <<<"$out")" 0
# Empty (the endpoints off) and a long random token are accepted.
rateld_config 'admin_token: ""' >"$tmp/tok.yaml"
same empty_token_ok "$("$rateld" --check-config "$tmp/tok.yaml" >/dev/null 2>&1; echo $?)" 0
rateld_config "admin_token: \"$good_token\"" >"$tmp/tok.yaml"
same random_token_ok "$("$rateld" --check-config "$tmp/tok.yaml" >/dev/null 2>&1; echo $?)" 0
printf 'admin_token: "%s"\n' "$good_token" >"$tmp/ctok.yaml"
same captchad_random_token_ok "$("$captchad" --check-config "$tmp/ctok.yaml" >/dev/null 2>&1; echo $?)" 0
# The shipped examples: empty tokens, and valid.
same examples_empty_tokens "$(grep -h '^admin_token:' "$root/examples/rateld.yaml" "$root/captchad/captchad.yaml")" \
    'admin_token: ""
admin_token: ""'

# ---------------------------------------------------- deployment warnings

# start_rateld NAME CONFIG [ENV...]: runs rateld until it says it started.
start_rateld() {
    local name=$1 config=$2
    shift 2
    env "$@" "$rateld" --config "$config" >"$tmp/$name.log" 2>&1 &
    echo $! >"$tmp/pids/$name"
    wait_for 10 grep -q 'msg="rateld started"' "$tmp/$name.log" || fail "${name}_started" "$(tail -3 "$tmp/$name.log")"
}
stop() { kill "$(cat "$tmp/pids/$1")" 2>/dev/null; wait "$(cat "$tmp/pids/$1")" 2>/dev/null; rm -f "$tmp/pids/$1"; }

port=$(free_port)
rateld_config "admin_token: \"$good_token\"" >"$tmp/warn.yaml"
chmod 644 "$tmp/warn.yaml"
start_rateld warn644 "$tmp/warn.yaml" -u INVOCATION_ID -u NOTIFY_SOCKET
stop warn644
contains warns_readable_secret "$(grep 'any user can read' "$tmp/warn644.log")" \
    "level=warn msg=\"the configuration holds a secret any user can read\" program=rateld path=$tmp/warn.yaml mode=0644"
if [ "$(id -u)" = 0 ]; then
    contains warns_root "$(cat "$tmp/warn644.log")" 'level=warn msg="running as root" program=rateld'
else
    same no_root_warning_as_user "$(grep -c 'running as root' "$tmp/warn644.log")" 0
fi
chmod 600 "$tmp/warn.yaml"
start_rateld warn600 "$tmp/warn.yaml" INVOCATION_ID=test
stop warn600
same no_warning_0600_under_systemd "$(grep -c 'level=warn' "$tmp/warn600.log")" 0
# A world-readable file without a secret is no one's business.
rateld_config 'admin_token: ""' >"$tmp/nosecret.yaml"
chmod 644 "$tmp/nosecret.yaml"
start_rateld nosecret "$tmp/nosecret.yaml" INVOCATION_ID=test
stop nosecret
same no_warning_without_secret "$(grep -c 'level=warn' "$tmp/nosecret.log")" 0
# captchad warns the same way (a password in its store URL).
cport=$(free_port)
cat >"$tmp/cwarn.yaml" <<EOF
listen: 127.0.0.1:$cport
sqlite_path: $tmp/cwarn.db
sender: {type: log, log_file: $tmp/cwarn.sms}
store: {type: redis, url: "redis://:Pw-in-url@127.0.0.1:1"}
EOF
chmod 644 "$tmp/cwarn.yaml"
"$captchad" --config "$tmp/cwarn.yaml" >"$tmp/cwarn.log" 2>&1 &
echo $! >"$tmp/pids/cwarn"
wait_for 10 grep -q 'msg="captchad started"' "$tmp/cwarn.log"
stop cwarn
contains captchad_warns_readable_secret "$(cat "$tmp/cwarn.log")" \
    'msg="the configuration holds a secret any user can read" program=captchad'
same captchad_password_not_logged "$(grep -c 'Pw-in-url' "$tmp/cwarn.log")" 0

# ------------------------------------------------------ secrets not printed

# Redis with a user of its own (the default user stays open for PING).
rport=$(redis_start --user alice on '>S3cret-Redis-PW' '~*' '&*' '+@all')
cat >"$tmp/redis.yaml" <<EOF
listen: 127.0.0.1:$port
store:
  type: redis
  url: "redis://alice:S3cret-Redis-PW@127.0.0.1:$rport/0?timeout_ms=500"
policies:
  ping: {rules: [2/1m], key: ip}
EOF
out=$("$rateld" --check-config "$tmp/redis.yaml" 2>&1)
contains check_masks_url "$out" "store redis://***@127.0.0.1:$rport/0?timeout_ms=500"
same check_no_password "$(grep -c -e S3cret-Redis-PW -e alice <<<"$out")" 0
start_rateld redis "$tmp/redis.yaml"
same redis_auth_works "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/acquire?policy=ping&key=k")" 200
stop redis
# A wrong password: the store is down, every line about it says so
# without the password.
sed 's/S3cret-Redis-PW/Wr0ng-Redis-PW/' "$tmp/redis.yaml" >"$tmp/wrong.yaml"
start_rateld wrong "$tmp/wrong.yaml"
curl -s -o /dev/null "http://127.0.0.1:$port/v1/acquire?policy=ping&key=k"
wait_for 10 grep -q 'store down' "$tmp/wrong.log"
stop wrong
contains wrong_password_logged "$(cat "$tmp/wrong.log")" 'msg="store down"'
same logs_hold_no_password "$(cat "$tmp/redis.log" "$tmp/wrong.log" | grep -c -e S3cret-Redis-PW -e Wr0ng-Redis-PW)" 0
# A URL rateld refuses: its message masks the credentials too.
sed 's|url: .*|url: "redis://alice:S3cret-Redis-PW@127.0.0.1:99999"|' "$tmp/redis.yaml" >"$tmp/bad.yaml"
out=$("$rateld" --check-config "$tmp/bad.yaml" 2>&1)
contains bad_url_refused "$out" 'redis://***@127.0.0.1:99999'
same bad_url_no_password "$(grep -c S3cret-Redis-PW <<<"$out")" 0
# A Sentinel URL: --check-config masks the Sentinels' password as the
# data nodes' (a TLS setting is no secret: it is shown). The URL is one a
# start takes (--check-config makes the store as a start does).
sed 's|url: .*|url: "rediss+sentinel://alice:S3cret-Redis-PW@127.0.0.1:26379/mymaster?sentinel_password=S3nt1nel-PW\&tls_server_name=redis.example"|' \
    "$tmp/redis.yaml" >"$tmp/sentinel.yaml"
out=$("$rateld" --check-config "$tmp/sentinel.yaml" 2>&1)
contains check_masks_sentinel "$out" "store rediss+sentinel://***@127.0.0.1:26379/mymaster?sentinel_password=***&tls_server_name=redis.example"
same check_no_sentinel_password "$(grep -c -e S3nt1nel-PW -e S3cret-Redis-PW <<<"$out")" 0

# tls_insecure=yes: rateld warns once at start, in the store's words
# (lazy: Redis need not answer); without it, no such line.
sed 's|url: .*|url: "rediss://127.0.0.1:'"$rport"'?tls_insecure=yes"|' "$tmp/redis.yaml" >"$tmp/insecure.yaml"
start_rateld insecure "$tmp/insecure.yaml"
stop insecure
same insecure_warned "$(grep -c 'level=warn msg="redis store TLS is not verified" reason="TLS certificate verification is off (tls_insecure=yes)' "$tmp/insecure.log")" 1
sed 's|?tls_insecure=yes||' "$tmp/insecure.yaml" >"$tmp/verified.yaml"
start_rateld verified "$tmp/verified.yaml"
stop verified
same verified_not_warned "$(grep -c 'tls_insecure' "$tmp/verified.log")" 0

# captchad: the Redis password and the webhook's user, password and key.
hook=$(free_port)
cat >"$tmp/cred.yaml" <<EOF
listen: 127.0.0.1:$cport
threads: 1
sqlite_path: $tmp/cred.db
store:
  type: redis
  url: "redis://alice:S3cret-Redis-PW@127.0.0.1:$rport"
sender:
  type: webhook
  url: "http://Hook-User:Hook-PW-7@127.0.0.1:$hook/sms?api_key=Hook-Key-9&to=x"
  timeout_ms: 500
EOF
out=$("$captchad" --check-config "$tmp/cred.yaml" 2>&1)
contains captchad_check_masks "$out" \
    "store redis://***@127.0.0.1:$rport, sender http://***@127.0.0.1:$hook/sms?api_key=***&to=x"
same captchad_check_no_secret "$(grep -c -e S3cret -e Hook-User -e Hook-PW -e Hook-Key <<<"$out")" 0
"$captchad" --config "$tmp/cred.yaml" >"$tmp/cred.log" 2>&1 &
echo $! >"$tmp/pids/cred"
wait_for 10 grep -q 'msg="captchad started"' "$tmp/cred.log"
same captchad_send "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{"telephone":"13800138000"}' "http://127.0.0.1:$cport/captcha/send")" 202
wait_for 10 grep -q 'send failed' "$tmp/cred.log"
stop cred
contains captchad_webhook_failed "$(cat "$tmp/cred.log")" 'msg="send failed, permits refunded"'
same captchad_logs_no_secret "$(grep -c -e S3cret -e Hook-User -e Hook-PW -e Hook-Key "$tmp/cred.log")" 0

# The CLI: a store URL given on the command line or in RATEL_STORE.
out=$("$ratel" ping --store "redis://alice:Cli-PW-1@127.0.0.1:$(free_port)" 2>&1)
same cli_ping_fails_without_password "$(grep -c Cli-PW-1 <<<"$out")" 0
out=$(RATEL_STORE="redis://alice:Cli-PW-2@127.0.0.1:$rport" "$ratel" ping 2>&1)
same cli_env_store_no_password "$(grep -c Cli-PW-2 <<<"$out")" 0
out=$(RATEL_STORE="redis://alice:S3cret-Redis-PW@127.0.0.1:$rport" "$ratel" ping 2>&1)
rc=$?
same cli_env_store_works "$rc" 0
same cli_ping_no_password "$(grep -c -e S3cret-Redis-PW -e alice <<<"$out")" 0
out=$("$ratel" ping --store "redis://alice:Cli-PW-3@127.0.0.1:99999" 2>&1)
contains cli_bad_url_masked "$out" 'redis://***@127.0.0.1:99999'
same cli_bad_url_no_password "$(grep -c Cli-PW-3 <<<"$out")" 0

# ---------------------------------------------------------- log lines

# check_logfmt NAME FILE KEYS...: every line of FILE is well-formed logfmt
# and the lines whose msg is KEYS' first word have exactly KEYS.
check_logfmt() {
    local name=$1 file=$2
    shift 2
    local got
    got=$(python3 - "$file" "$@" <<'PY'
import re, sys
path, msg, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
pair = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\\x00-\x1f]|\\["\\nrt]|\\x[0-9a-f]{2})*"|[^" =\x00-\x20]+)(?: |$)')
found = 0
for n, line in enumerate(open(path, encoding="latin-1").read().split("\n")[:-1], 1):
    pos, got = 0, []
    while pos < len(line):
        m = pair.match(line, pos)
        if not m:
            print(f"line {n} not logfmt at {pos}: {line[:200]}")
            sys.exit(0)
        got.append((m.group(1), m.group(2)))
        pos = m.end()
    d = dict(got)
    if d.get("msg") == '"' + msg + '"':
        found += 1
        if [k for k, _ in got] != keys:
            print(f"line {n} keys {[k for k, _ in got]}")
            sys.exit(0)
print(f"ok {found}")
PY
)
    same "$name" "$got" "ok ${want_lines:-1}"
}

# rateld: a client's X-Original-URI and X-Original-Method that try to
# close the quote and add fields of their own. Both are refused (bad-uri,
# bad-request: their reasons name no client byte), so no client byte
# reaches the log.
rateld_config 'admin_token: ""' >"$tmp/forged.yaml"
start_rateld forged "$tmp/forged.yaml"
forged_uri='/x" level=error msg="admin reset" policy=sms x="'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Original-URI: $forged_uri" -H 'X-Original-Method: GET' "http://127.0.0.1:$port/v1/auth")
same forged_uri_refused "$code" 400
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Original-URI: /x' -H 'X-Original-Method: x"level=error' "http://127.0.0.1:$port/v1/auth")
same forged_method_refused "$code" 400
stop forged
want_lines=2 check_logfmt forged_wellformed_lines "$tmp/forged.log" "auth request undecided" \
    ts level msg reason answer detail not_logged
same forged_no_error_level "$(awk '{print $2}' "$tmp/forged.log" | grep -c 'level=error')" 0
contains forged_method_says_why "$(grep 'reason=bad-request' "$tmp/forged.log")" \
    'detail="cannot tell which request to decide: the original method is not an HTTP method'
same forged_method_not_logged "$(grep -c 'x\\"level' "$tmp/forged.log")" 0

# captchad: 1,000 refused sends on 2 threads write one line per policy
# per thread at most (the budget), each well-formed with not_logged.
cat >"$tmp/flood.yaml" <<EOF
listen: 127.0.0.1:$cport
threads: 2
sqlite_path: $tmp/flood.db
sender: {type: log, log_file: $tmp/flood.sms}
policies:
  send_phone: [1/1h]
  send_ip: [2000/1h]
EOF
"$captchad" --config "$tmp/flood.yaml" >"$tmp/flood.log" 2>&1 &
echo $! >"$tmp/pids/flood"
wait_for 10 grep -q 'msg="captchad started"' "$tmp/flood.log"
python3 - "$cport" >"$tmp/flood.out" <<'PY'
import http.client, sys
codes = {}
for i in range(1001):
    if i % 100 == 0:
        c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
    c.request("POST", "/captcha/send", body='{"telephone":"13900000000"}')
    r = c.getresponse(); r.read()
    codes[r.status] = codes.get(r.status, 0) + 1
print(" ".join(f"{k}:{v}" for k, v in sorted(codes.items())))
PY
stop flood
same flood_answers "$(cat "$tmp/flood.out")" "202:1 429:1000"
limited=$(grep -c 'msg="send limited"' "$tmp/flood.log")
if [ "$limited" -ge 1 ] && [ "$limited" -le 2 ]; then ok flood_few_lines; else fail flood_few_lines "$limited lines for 1000 refused sends"; fi
want_lines=$limited check_logfmt flood_lines_wellformed "$tmp/flood.log" "send limited" \
    ts level msg ip policy retry_after_ms not_logged

# ----------------------------------------------------------- private files

# Created 0600 even under umask 000; a symbolic link is refused.
rm -f "$tmp/flood.db" "$tmp/flood.sms"
(umask 000 && exec "$captchad" --config "$tmp/flood.yaml" >"$tmp/modes.log" 2>&1) &
echo $! >"$tmp/pids/modes"
wait_for 10 grep -q 'msg="captchad started"' "$tmp/modes.log"
stop modes
same db_mode "$(stat -c %a "$tmp/flood.db")" 600
same sms_log_mode "$(stat -c %a "$tmp/flood.sms")" 600
echo secret >"$tmp/other-file"
chmod 644 "$tmp/other-file"
ln -sf "$tmp/other-file" "$tmp/link.sms"
sed "s|log_file: $tmp/flood.sms|log_file: $tmp/link.sms|; s|sqlite_path: .*|sqlite_path: $tmp/fresh.db|" "$tmp/flood.yaml" >"$tmp/link1.yaml"
out=$("$captchad" --config "$tmp/link1.yaml" 2>&1)
rc=$?
same sms_link_refused_status "$rc" 1
contains sms_link_refused "$out" "the SMS log $tmp/link.sms: is a symbolic link"
ln -sf "$tmp/other-file" "$tmp/link.db"
sed "s|sqlite_path: .*|sqlite_path: $tmp/link.db|" "$tmp/flood.yaml" >"$tmp/link2.yaml"
out=$("$captchad" --config "$tmp/link2.yaml" 2>&1)
rc=$?
same db_link_refused_status "$rc" 1
contains db_link_refused "$out" "the notice database $tmp/link.db: is a symbolic link"
# A file made before with a wider mode keeps it, and start says so.
chmod 644 "$tmp/flood.db"
(umask 000 && exec "$captchad" --config "$tmp/flood.yaml" >"$tmp/wide.log" 2>&1) &
echo $! >"$tmp/pids/wide"
wait_for 10 grep -q 'msg="captchad started"' "$tmp/wide.log"
stop wide
contains wide_db_warned "$(cat "$tmp/wide.log")" \
    "level=warn msg=\"a file holding private data is readable by others\" file=\"the notice database\" path=$tmp/flood.db mode=0644"
same wide_sms_not_warned "$(grep -c 'file="the SMS log"' "$tmp/wide.log")" 0
same link_target_untouched "$(cat "$tmp/other-file") $(stat -c %a "$tmp/other-file")" "secret 644"

finish
