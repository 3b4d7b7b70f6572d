#!/usr/bin/env bash
# Charged only when someone waits for the answer: a request whose client
# has gone before rateld decided it is not charged, and is counted in
# ratel_abandoned_total{endpoint=...}.
#
#   - behind Debian's nginx with docs/gateways.md's snippets as printed
#     (auth_request, proxy_read_timeout 300ms, fail closed): rateld
#     stopped (SIGSTOP), the client's /sendCaptcha gets nginx's 503 when
#     the timeout fires, rateld continued (SIGCONT): the number's permit
#     is not spent (the same client is then allowed once, then limited)
#     and the metric counted 1;
#   - directly on /v1/auth, while rateld is stopped: a request on a
#     kept-alive connection whose client then closes it, two pipelined
#     requests followed by a close, and one followed by a half close
#     (shutdown of the sending side): none charged, each counted; a
#     request whose client stays connected is answered and charged;
#   - /v1/acquire whose client (curl --max-time) gave up: not charged;
#   - an Envoy RLS call whose client's deadline passed (it resets the
#     stream): not charged, counted under endpoint="rls".
#
# Time is not moved by sleeping: rateld stands still while stopped, and
# the test waits for states (the metric, a port answering).
. "$(dirname "$0")/gateway_lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$build/rateld"

# start_nginx: the page's nginx snippet inside this test's own http { }
# (nginx_conf's, without the module: the snippet is for an nginx without
# it).
start_nginx() {
    {
        echo "    default_type text/plain;"
        snippet nginx
    } | nginx_module='' nginx_conf "$tmp/nginx" 1
    nginx_module='' nginx_start "$tmp/nginx" "http://127.0.0.1:$gport/"
}

# abandoned ENDPOINT: ratel_abandoned_total{endpoint=ENDPOINT}.
abandoned() { metric "ratel_abandoned_total{endpoint=\"$1\"}"; }
# abandoned_is ENDPOINT N: whether the counter says N (for wait_for).
abandoned_is() { [ "$(abandoned "$1")" = "$2" ]; }

# raw PORT SCRIPT...: sends /v1/auth requests to rateld as a gateway
# would (from 127.0.0.1, nginx's headers), each script step one of
#   send:PHONE     a request for /sendCaptcha?telephone=PHONE
#   read           read one answer; prints its status
#   stopped        print "ready" and wait for a line on stdin (the test
#                  stops rateld meanwhile); the next step that puts
#                  something on the wire prints "sent" once it has
#   close | half   close the connection, or shut its sending side and
#                  wait for rateld to close it (then close)
# The last line printed is the statuses read, in order.
# (The script is an argument: its stdin is the test's, for `stopped`.)
raw_py=$(cat <<'PY'
import socket, sys
port, steps = int(sys.argv[1]), sys.argv[2:]
s = socket.create_connection(("127.0.0.1", port), 5)
out = []
def request(phone):
    return ("GET /v1/auth HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "X-Original-URI: /sendCaptcha?telephone=%s\r\n"
            "X-Original-Method: GET\r\nX-Forwarded-Host: site.example\r\n"
            "X-Forwarded-For: 127.0.0.2\r\n\r\n" % phone).encode()
buf = b""
def read_answer():
    global buf
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            return "closed"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = head.split(b" ")[1].decode()
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        rest += s.recv(4096)
    buf = rest[length:]
    return status
pending = b""
waiting = False
def sent():
    global waiting
    if waiting:
        print("sent", flush=True)
        waiting = False
for step in steps:
    if step.startswith("send:"):
        pending += request(step[5:])
        continue
    if pending:
        s.sendall(pending)
        pending = b""
    if step == "read":
        sent()
        out.append(read_answer())
    elif step == "stopped":
        print("ready", flush=True)
        sys.stdin.readline()
        waiting = True
    elif step == "close":
        s.close()
        sent()
    elif step == "half":
        s.shutdown(socket.SHUT_WR)
        sent()
        s.settimeout(10)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
if pending:
    s.sendall(pending)
print(" ".join(out), flush=True)
PY
)
raw() { python3 -c "$raw_py" "$@"; }

# --- behind nginx, the docs' snippets as printed ------------------------

start_rateld 403 nginx || fail rateld_start "$(tail -3 "$tmp/rateld.log")"
start_nginx || fail nginx_start "$(tail -3 "$tmp/nginx/logs/error.log")"
rpid=$(cat "$tmp/pids/rateld")
# A stopped rateld would not see the cleanup's SIGTERM: continue it first.
trap 'kill -CONT "$rpid" 2>/dev/null; cleanup' EXIT
url="http://127.0.0.1:$gport/sendCaptcha?telephone=13900000077"

same nginx_abandoned_before "$(abandoned auth)" 0
kill -STOP "$rpid"
out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 --interface "$client" "$url")
kill -CONT "$rpid"
same nginx_timed_out_503 "${out% *}" 503
echo "# nginx answered ${out% *} after ${out#* } s (proxy_read_timeout 300ms)"
wait_for 10 abandoned_is auth 1 && ok nginx_abandoned_counted ||
    fail nginx_abandoned_counted "ratel_abandoned_total{endpoint=\"auth\"} is $(abandoned auth), want 1"
same nginx_permit_not_spent "$(peek sms 13900000077)" 1
same nginx_same_client_allowed "$(code "$url")" 200
same nginx_then_limited "$(code "$url")" 429
same nginx_abandoned_once "$(abandoned auth)" 1
nginx_stop "$tmp/nginx"

# --- /v1/auth directly: kept-alive, pipelined, half-closed --------------

# stopped_raw NAME SCRIPT...: raw's script, with rateld stopped at its
# `stopped` step and continued once the script has sent (and closed)
# what follows; prints the statuses it read.
stopped_raw() {
    local name=$1 fifo=$tmp/fifo.$1 rawpid
    shift
    mkfifo "$fifo"
    raw "$rport" "$@" <"$fifo" >"$tmp/raw.$name" &
    rawpid=$!
    exec 4>"$fifo"
    wait_for 10 grep -q '^ready$' "$tmp/raw.$name"
    kill -STOP "$rpid"
    echo go >&4
    exec 4>&-
    wait_for 10 grep -q '^sent$' "$tmp/raw.$name"
    kill -CONT "$rpid"
    wait "$rawpid"
    tail -1 "$tmp/raw.$name"
}

# A kept-alive connection: one answered request, then one sent while
# rateld is stopped and the connection closed.
out=$(stopped_raw keepalive send:13900000080 read stopped send:13900000081 close)
same keepalive_first_answered "$out" 200
wait_for 10 abandoned_is auth 2 && ok keepalive_abandoned_counted ||
    fail keepalive_abandoned_counted "$(abandoned auth), want 2"
same keepalive_first_charged "$(peek sms 13900000080)" 0
same keepalive_second_not_charged "$(peek sms 13900000081)" 1

# Two pipelined requests, then a close.
stopped_raw pipelined stopped send:13900000082 send:13900000083 close >/dev/null
wait_for 10 abandoned_is auth 4 && ok pipelined_abandoned_counted ||
    fail pipelined_abandoned_counted "$(abandoned auth), want 4"
same pipelined_not_charged "$(peek sms 13900000082)/$(peek sms 13900000083)" 1/1

# A request, then a half close (the sending side shut): read as an abort.
stopped_raw half stopped send:13900000084 half >/dev/null
wait_for 10 abandoned_is auth 5 && ok half_close_abandoned_counted ||
    fail half_close_abandoned_counted "$(abandoned auth), want 5"
same half_close_not_charged "$(peek sms 13900000084)" 1

# The control: a client that stays connected gets its answer, charged.
out=$(stopped_raw waiting stopped send:13900000085 read close)
same waiting_answered "$out" 200
same waiting_charged "$(peek sms 13900000085)" 0
same waiting_not_abandoned "$(abandoned auth)" 5

# --- /v1/acquire whose client gave up -----------------------------------

kill -STOP "$rpid"
curl -s -o /dev/null --max-time 0.3 "http://127.0.0.1:$rport/v1/acquire?policy=sms&key=13900000086"
kill -CONT "$rpid"
wait_for 10 abandoned_is acquire 1 && ok acquire_abandoned_counted ||
    fail acquire_abandoned_counted "$(abandoned acquire), want 1"
same acquire_not_charged "$(peek sms 13900000086)" 1
stop_rateld

# --- Envoy's rate limit service: a call past its client's deadline ------

eport=$(free_port)
while [ "$eport" = "$rport" ] || [ "$eport" = "$gport" ]; do eport=$(free_port); done
cat >"$tmp/rls.yaml" <<EOF
listen: 127.0.0.1:$rport
envoy:
  listen: 127.0.0.1:$eport
  config_dir: $root/examples/envoy/ratelimit
EOF
"$build/rateld" --config "$tmp/rls.yaml" >>"$tmp/rateld.log" 2>&1 &
echo $! >"$tmp/pids/rateld"
rpid=$!
wait_http "http://127.0.0.1:$rport/healthz" || fail rls_rateld_start "$(tail -3 "$tmp/rateld.log")"
rls() { /usr/bin/python3 "$lib_here/rls_client.py" call "127.0.0.1:$eport" ratel "$@"; }
# Two calls on one connection: the first answered, the second sent while
# rateld is stopped and cancelled by the client past its deadline; the
# client leaves, then rateld continues.
mkfifo "$tmp/fifo.rls"
rls remote_address=10.9.9.9 --times 2 --timeout 0.5 --pause <"$tmp/fifo.rls" >"$tmp/rls.out" &
rlspid=$!
exec 4>"$tmp/fifo.rls"
wait_for 20 grep -q '^paused$' "$tmp/rls.out"
kill -STOP "$rpid"
echo go >&4
exec 4>&-
wait "$rlspid"
kill -CONT "$rpid"
contains rls_first "$(head -1 "$tmp/rls.out")" "OK [OK 20/MINUTE remaining=19"
contains rls_deadline_passed "$(tail -1 "$tmp/rls.out")" "ERROR DEADLINE_EXCEEDED"
wait_for 10 abandoned_is rls 1 && ok rls_abandoned_counted ||
    fail rls_abandoned_counted "$(abandoned rls), want 1"
contains rls_not_charged "$(rls remote_address=10.9.9.9)" "OK [OK 20/MINUTE remaining=18"
contains rls_cancelled_counted "$(curl -s "http://127.0.0.1:$rport/metrics")" \
    'ratel_grpc_responses_total{code="CANCELLED"} 1'
stop_rateld

[ "$failed" -gt 0 ] && tail -5 "$tmp/rateld.log"
finish
