#!/usr/bin/env bash
# captchad on a Redis that Sentinel names (redis+sentinel://): its limits
# and its verification codes both go through the store's engine, so a
# code sent is in the primary, the right code verifies once, and after
# SENTINEL FAILOVER (the old primary a replica now) a new code lands on
# the new primary and verifies too.
. "$(dirname "$0")/lib.sh"

require_built captchad
p1=$(redis_start) || { fail primary "did not start"; finish; exit 1; }
p2=$(redis_start --replicaof 127.0.0.1 "$p1") || { fail replica "did not start"; finish; exit 1; }
sport=$(sentinel_start "$p1") || { fail sentinel "did not start"; finish; exit 1; }
sentinel_wait "$sport" "$p1" 1 || fail sentinel_ready "the Sentinel never named $p1 with a replica"
port=$(free_port)
h=http://127.0.0.1:$port
cat >"$tmp/captchad.yaml" <<EOF
listen: 127.0.0.1:$port
trusted_proxies: [127.0.0.1]
sqlite_path: $tmp/captchad.db
store:
  type: redis
  url: redis+sentinel://127.0.0.1:$sport/mymaster
  on_failure: closed
policies:
  send_phone: [100/1h]
  send_ip: [100/1h]
sender:
  type: log
  log_file: $tmp/captchad.sms
EOF
read -r -a wrap <<<"${CAPTCHAD_WRAP:-}"
server_start captchad "$port" "${wrap[@]}" "$build/captchad" --config "$tmp/captchad.yaml" ||
    { fail start "captchad did not start"; finish; exit 1; }

send() { curl -s -o /dev/null -w '%{http_code}' -X POST -d "{\"telephone\":\"$1\"}" "$h/captcha/send"; }
verify() { curl -s -o /dev/null -w '%{http_code}' -X POST -d "{\"telephone\":\"$1\",\"code\":\"$2\"}" "$h/captcha/verify"; }
code_of() { # PHONE: the newest code the log sender wrote (waits, bounded)
    local c
    for _ in $(seq 100); do
        c=$(awk -F'\t' -v p="+86$1" '$2 == p { print $3 }' "$tmp/captchad.sms" 2>/dev/null |
            tail -1 | grep -o 'code is [0-9]*' | cut -d' ' -f3)
        [ -n "$c" ] && { echo "$c"; return 0; }
        sleep 0.05
    done
}
# Numbers are sent to and keyed in E.164 (+86 and the mainland number).
stored_on() { redis-cli -p "$1" EXISTS "captcha:code:{+86$2}"; }

same send_202 "$(send 13900000001)" 202
same code_in_primary "$(stored_on "$p1" 13900000001)" 1
code=$(code_of 13900000001)
same verify_right "$(verify 13900000001 "$code")" 200
same verify_once "$(verify 13900000001 "$code")" 400

sentinel_failover "$sport" "$p2" && ok failover || fail failover "the Sentinel never named $p2"
# Until the old primary is told it is a replica, it still takes writes
# (as with every Sentinel client: writes in that window are lost).
demoted() { ! is_primary "$p1"; }
wait_for 20 demoted || fail old_primary_demoted "$p1 is still a primary"
sent_after() { [ "$(send 13900000002)" = 202 ]; }
wait_for 15 sent_after && ok send_after_failover || fail send_after_failover "no 202 after the failover"
same code_in_new_primary "$(stored_on "$p2" 13900000002)" 1
same verify_after_failover "$(verify 13900000002 "$(code_of 13900000002)")" 200
server_stop captchad
same exit_status "$stopped" 0
finish
