#!/bin/bash
# test_nginx_redis.sh - ngx_http_ratel_module's Redis mode (`ratel_zone
# zone=NAME:SIZE store=redis://...`) in Debian's nginx, loaded with
# load_module, against real redis-servers:
#
#   - two nginx instances and a rateld on one Redis share one limit
#     exactly (the same store key "POLICY:value"), whichever asks last;
#   - Redis SIGSTOPped: each request is answered by its zone's failure
#     policy (open, closed, local) at the store's deadline while another
#     location of the same worker answers at once; after SIGCONT the
#     decisions come from Redis again;
#   - Redis Cluster, with the key's slot migrated to another master
#     meanwhile (MOVED followed);
#   - rediss:// with tls_ca_file to a TLS-only redis-server, and a
#     certificate for another name refused;
#   - nginx -t names a bad store URL;
#   - under valgrind (master_process off): no error, no leak of ours.
#
# NGINX_MODULE overrides $BUILD/nginx/ngx_http_ratel_module.so.
. "$(dirname "$0")/lib.sh"

nginx_bin=${NGINX:-/usr/sbin/nginx}
so=${NGINX_MODULE:-$build/nginx/ngx_http_ratel_module.so}
if [ ! -x "$nginx_bin" ] || [ ! -f "$so" ]; then
    echo "FAIL nginx_module: $so or $nginx_bin missing (make)"
    echo "0 passed, 1 failed"
    exit 1
fi
require_built rateld

code() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$@"; }

# nginx_conf NAME PORT ZONES LOCATIONS: an nginx prefix $tmp/NAME whose
# server on PORT serves /free (no ratel) and LOCATIONS, with ZONES.
nginx_conf() {
    local dir=$tmp/$1
    mkdir -p "$dir/html/z" "$dir/logs"
    echo free >"$dir/html/free"
    for f in o c l a t k; do echo ok >"$dir/html/z/$f"; done
    cat >"$dir/nginx.conf" <<EOF
load_module $so;
${NGINX_TOP:-}
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log info;
events { worker_connections 256; }
http {
    access_log off;
    $3
    ratel_policy api 20/1m;
    ratel_policy small 3/1m;
    server {
        listen 127.0.0.1:$2;
        root $dir/html;
        location = /free { }
        $4
    }
}
EOF
}

# nginx_start NAME: starts it (the EXIT trap stops it); 1 with its log.
nginx_start() {
    local dir=$tmp/$1
    "${nginx_wrap[@]}" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" \
        -g 'daemon off;' >"$dir/stdout" 2>&1 &
    echo $! >"$tmp/pids/nginx-$1"
    echo $! >"$dir/pid"
    wait_for 30 grep -q "start worker process\|nginx/1" "$dir/logs/error.log"
    local port
    port=$(sed -n 's/.*listen 127.0.0.1:\([0-9]*\);.*/\1/p' "$dir/nginx.conf")
    wait_for 30 curl -s -o /dev/null "http://127.0.0.1:$port/free" && return 0
    echo "nginx $1 did not start:"
    tail -5 "$dir/logs/error.log" "$dir/stdout"
    return 1
}
nginx_stop() {
    local pid
    pid=$(cat "$tmp/$1/pid")
    kill -QUIT "$pid" 2>/dev/null
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    wait "$pid" 2>/dev/null
}
nginx_wrap=()
# nginx's workers (user nobody) read the html and write the logs in $tmp.
chmod 755 "$tmp"

rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
url="redis://127.0.0.1:$rport"

# ------------------------------------------------------- nginx -t refuses
nginx_conf bad "$(free_port)" "ratel_zone zone=b:1m store=redis://127.0.0.1:notaport;" ""
out=$("$nginx_bin" -t -p "$tmp/bad" -c "$tmp/bad/nginx.conf" 2>&1)
contains bad_url_refused "$out" 'ratel_zone "b": store="redis://127.0.0.1:notaport"'
contains bad_url_names_line "$out" "nginx.conf:"
nginx_conf bad2 "$(free_port)" "ratel_zone zone=b:1m store=$url?on_failure=maybe;" ""
out=$("$nginx_bin" -t -p "$tmp/bad2" -c "$tmp/bad2/nginx.conf" 2>&1)
contains bad_query_refused "$out" "on_failure"

# ------------------------------------------- one limit: nginx A, B, rateld
zones="ratel_zone zone=o:1m store=$url?timeout_ms=300&on_failure=open;
    ratel_zone zone=c:1m store=$url?timeout_ms=300&on_failure=closed;
    ratel_zone zone=l:1m store=$url?timeout_ms=300&on_failure=local;"
locs='location = /z/o { ratel zone=o policy=api key=$arg_k; }
        location = /z/c { ratel zone=c policy=api key=$arg_k; }
        location = /z/l { ratel zone=l policy=small key=$arg_k; }'
pa=$(free_port) pb=$(free_port) pr=$(free_port)
nginx_conf a "$pa" "$zones" "$locs"
nginx_conf b "$pb" "$zones" "$locs"
nginx_start a || { finish; exit 1; }
nginx_start b || { finish; exit 1; }
cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$pr
store:
  type: redis
  url: $url
  on_failure: closed
policies:
  api:
    rules: [20/1m]
    key: query:k
EOF
server_start rateld "$pr" "$build/rateld" --config "$tmp/rateld.yaml" || { finish; exit 1; }

share() { # KEY FIRST SECOND: 10 via each nginx, then rateld says 429
    local got=""
    for _ in $(seq 10); do got="$got$(code "http://127.0.0.1:$2/z/c?k=$1")"; done
    for _ in $(seq 10); do got="$got$(code "http://127.0.0.1:$3/z/o?k=$1")"; done
    same "shared_${1}_twenty_allowed" "$got" "$(printf '200%.0s' $(seq 20))"
    same "shared_${1}_rateld_denies_21st" "$(code "http://127.0.0.1:$pr/v1/acquire?policy=api&key=$1")" 429
}
share u1 "$pa" "$pb"
same shared_store_key "$(rcli "$rport" EXISTS api:u1)" 1
# The reverse: rateld spends 19, nginx B the 20th, nginx A is refused.
for _ in $(seq 19); do code "http://127.0.0.1:$pr/v1/acquire?policy=api&key=u2" >/dev/null; done
same reverse_b_20th "$(code "http://127.0.0.1:$pb/z/c?k=u2")" 200
same reverse_a_denied "$(code "http://127.0.0.1:$pa/z/o?k=u2")" 429

# ------------------------------------------------ Redis hangs: SIGSTOP
timed() { curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' "$@"; }
rpid=$(cat "$tmp/redis-$rport/pid")
kill -STOP "$rpid"
for z in o c l; do
    timed "http://127.0.0.1:$pa/z/$z?k=h$z" >"$tmp/hang-$z" &
done
sleep 0.05
slowest=0
for _ in $(seq 10); do
    read -r c t < <(timed "http://127.0.0.1:$pa/free")
    [ "$c" = 200 ] || fail free_during_hang "answered $c"
    slowest=$(awk -v a="$slowest" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
done
same free_answers_at_once "$(awk -v t="$slowest" 'BEGIN { print (t < 0.1) }')" 1
echo "# slowest /free while Redis hung: ${slowest}s"
wait_for 10 test -s "$tmp/hang-l"
for z in o c l; do wait_for 5 test -s "$tmp/hang-$z"; done
read -r co to <"$tmp/hang-o"; read -r cc tc <"$tmp/hang-c"; read -r cl tl <"$tmp/hang-l"
same hang_open_allows "$co" 200
same hang_closed_denies "$cc" 429
same hang_local_allows "$cl" 200
# At the deadline (300 ms), not before, not much after.
for t in "$to" "$tc" "$tl"; do
    same hang_answer_at_deadline "$(awk -v t="$t" 'BEGIN { print (t >= 0.2 && t < 2) }')" 1
done
# `local` decides from the worker's fallback store: 3/1m holds there too.
got=""
for _ in $(seq 4); do got="$got$(code "http://127.0.0.1:$pa/z/l?k=hl2")"; done
same hang_local_limits "$got" 200200200429
kill -CONT "$rpid"
back() { [ "$(code "http://127.0.0.1:$pa/z/c?k=back")" = 200 ]; }
if wait_for 10 back; then ok redis_back_decides; else fail redis_back_decides "still refused"; fi
same back_key_in_redis "$(rcli "$rport" EXISTS api:back)" 1
nginx_stop b

# ------------------------------------------------------------ Cluster
cports=()
for _ in 1 2 3; do
    p=$(redis_start --cluster-enabled yes --cluster-config-file nodes.conf) || break
    cports+=("$p")
done
if [ "${#cports[@]}" = 3 ] && yes yes | redis-cli --cluster create "127.0.0.1:${cports[0]}" \
    "127.0.0.1:${cports[1]}" "127.0.0.1:${cports[2]}" --cluster-replicas 0 >"$tmp/cluster.log" 2>&1; then
    cluster_ok() { [ "$(rcli "${cports[0]}" CLUSTER INFO | tr -d '\r' | grep -c cluster_state:ok)" = 1 ]; }
    wait_for 20 cluster_ok
    pc=$(free_port)
    nginx_conf cl "$pc" "ratel_zone zone=k:1m store=redis+cluster://127.0.0.1:${cports[0]}?on_failure=closed&timeout_ms=1000;" \
        'location = /z/k { ratel zone=k policy=small key=$arg_k; }'
    nginx_start cl || { finish; exit 1; }
    same cluster_first "$(code "http://127.0.0.1:$pc/z/k?k=m")" 200
    # Move the key's slot to another master, then go on counting.
    slot=$(rcli "${cports[0]}" CLUSTER KEYSLOT small:m)
    from="" to=""
    for p in "${cports[@]}"; do
        id=$(rcli "$p" CLUSTER MYID)
        if [ "$(rcli "$p" CLUSTER COUNTKEYSINSLOT "$slot")" = 1 ]; then from=$p fromid=$id; else to=$p toid=$id; fi
    done
    rcli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$fromid" >/dev/null
    rcli "$from" CLUSTER SETSLOT "$slot" MIGRATING "$toid" >/dev/null
    rcli "$from" MIGRATE 127.0.0.1 "$to" small:m 0 5000 >/dev/null
    for p in "${cports[@]}"; do rcli "$p" CLUSTER SETSLOT "$slot" NODE "$toid" >/dev/null; done
    same cluster_key_moved "$(rcli "$to" EXISTS small:m)" 1
    got=""
    for _ in 1 2 3; do got="$got$(code "http://127.0.0.1:$pc/z/k?k=m")"; done
    same cluster_counts_after_move "$got" 200200429
    nginx_stop cl
else
    fail cluster "did not form: $(tail -3 "$tmp/cluster.log")"
fi

# ---------------------------------------------------------------- TLS
certs=$(tls_certs)
tport=$(redis_start_tls) || { fail tls "did not start"; finish; exit 1; }
pt=$(free_port)
nginx_conf tls "$pt" "ratel_zone zone=t:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&on_failure=closed&timeout_ms=2000;
    ratel_zone zone=w:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&tls_server_name=redis.example.com&on_failure=closed&timeout_ms=2000;" \
    'location = /z/t { ratel zone=t policy=small key=$arg_k; }
        location = /z/w { ratel zone=w policy=small key=$arg_k; }'
nginx_start tls || { finish; exit 1; }
got=""
for _ in 1 2 3 4; do got="$got$(code "http://127.0.0.1:$pt/z/t?k=s")"; done
same tls_decides "$got" 200200200429
same tls_key_in_redis "$(rcli_tls "$tport" EXISTS small:s)" 1
same tls_wrong_name_closed "$(code "http://127.0.0.1:$pt/z/w?k=s2")" 429
if wait_for 5 grep -q "certificate\|SSL_do_handshake" "$tmp/tls/logs/error.log"; then
    ok tls_wrong_name_logged
else
    fail tls_wrong_name_logged "nothing in the error log"
fi
nginx_stop tls

# ------------------------------------------------------------ valgrind
if command -v valgrind >/dev/null && [ "${RATEL_NGINX_VALGRIND:-1}" = 1 ]; then
    pv=$(free_port)
    NGINX_TOP="master_process off;" nginx_conf vg "$pv" "$zones
    ratel_zone zone=t:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&timeout_ms=2000;" \
        "$locs
        location = /z/t { ratel zone=t policy=small key=\$arg_k; }"
    nginx_wrap=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite
        --log-file="$tmp/vg/valgrind.log")
    nginx_start vg || { finish; exit 1; }
    for z in o c l t; do code "http://127.0.0.1:$pv/z/$z?k=v" >/dev/null; done
    kill -STOP "$rpid"
    same vg_hang_closed "$(code "http://127.0.0.1:$pv/z/c?k=v2")" 429
    kill -CONT "$rpid"
    code "http://127.0.0.1:$pv/z/c?k=v3" >/dev/null
    nginx_stop vg
    nginx_wrap=()
    # nginx's own allocations at exit are not ours; ours name ratel.
    errs=$(grep -c "Invalid\|uninitialised\|Mismatched" "$tmp/vg/valgrind.log")
    ours=$(awk '/definitely lost/ { rec = 1; buf = "" } rec { buf = buf $0 "\n" }
        /^==[0-9]+== $/ { if (rec && buf ~ /ratel|libratel|hiredis/) n++; rec = 0 }
        END { print n + 0 }' "$tmp/vg/valgrind.log")
    same valgrind_errors "$errs" 0
    same valgrind_leaks_of_ours "$ours" 0
fi

finish
