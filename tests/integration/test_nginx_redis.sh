#!/usr/bin/env bash
# test_nginx_redis.sh - ngx_http_ratel_module's Redis mode (`ratel_zone
# zone=NAME:SIZE store=redis://...`) in Debian's nginx, loaded with
# load_module, against real redis-servers on loopback ports:
#
#   - nginx -t names a bad store URL (masking its password) with file:line;
#   - two nginx and a rateld on one Redis share one limit exactly, in both
#     directions, and so does RATEL.ACQUIRE on the same key (the store key
#     "POLICY:value"); the example of docs/nginx.md as printed;
#   - the deny cache lives in the zone: a denial Redis gave answers the
#     key in every worker without a round trip (Redis counts the calls);
#   - a refusal by a later zone gives a Redis zone's charge back, and the
#     RateLimit fields say so;
#   - Redis SIGSTOPped: each request answered by its zone's failure policy
#     (open, closed, local) at its deadline while /free of the same worker
#     answers at once; `local` decides in the zone, exactly across two
#     workers; a cached denial is still answered at once; after SIGCONT
#     the decisions come from Redis again;
#   - Redis Cluster, the key's slot migrated to another master meanwhile;
#   - rediss:// with tls_ca_file to a TLS-only redis-server, and a
#     certificate for another name refused (logged once, in ratel's words).
# Under `make asan` nginx runs with the sanitizers' runtime preloaded
# (nginx_lib.sh) and any report fails the suite.
#
# RATEL_NGINX_VALGRIND=1 (tests/valgrind.sh): only a short run of one
# nginx process (master_process off) under valgrind through the same
# paths, whose errors and leaks in the module's frames fail it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$nginx_so"
require_built rateld

code() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$@"; }
# timed URL: "CODE SECONDS"
timed() { curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' "$@"; }
# fields URL: "CODE RateLimit"
fields() {
    curl -s -D "$tmp/h" -o /dev/null -m 10 -w '%{http_code}' "$1"
    printf ' %s' "$(sed -n 's/^RateLimit: //p' "$tmp/h" | tr -d '\r')"
}
within() { awk -v t="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(t >= lo && t < hi) }'; }

# site NAME PORT WORKERS ZONES LOCATIONS [TOP]: an nginx prefix $tmp/NAME
# (nginx_conf) whose server on PORT serves /free (no ratel), /metrics and
# LOCATIONS, with ZONES in its http block.
site() {
    local dir=$tmp/$1
    mkdir -p "$dir/html/z"
    echo free >"$dir/html/free"
    nginx_conf "$dir" "$3" "${6:-}" <<EOF
    $4
    ratel_policy api 20/1m;
    ratel_policy small 3/1m;
    ratel_policy one 1/1m;
    server {
        listen 127.0.0.1:$2 reuseport;
        root $dir/html;
        location = /free { }
        location = /metrics { ratel_metrics; }
        $5
    }
EOF
}

# start NAME PORT [WRAPPER...]: nginx_start of $tmp/NAME, ready when /free
# answers.
start() { nginx_start "$tmp/$1" "http://127.0.0.1:$2/free" "${@:3}"; }
# acquires PORT: RATEL.ACQUIRE calls Redis has answered so far.
acquires() {
    rcli "$1" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_ratel.acquire:calls=\([0-9]*\),.*/\1/p'
}
# remaining PORT KEY RULE: what Redis says is left of KEY (a peek).
remaining() { rcli "$1" RATEL.ACQUIRE "$2" PEEK "$3" | sed -n 3p; }
# pids NAME URI: the workers that served URI (the access log's second
# field).
pids() { awk -v u="$2" '$2 == u { print $1 }' "$tmp/$1/logs/access.log" | sort -u | wc -l; }
# spread KEY: asks B's /z/l for KEY on new connections, at least 8 times
# and until both workers have answered (40 at most); prints the codes.
spread() {
    local got="" i
    for i in $(seq 40); do
        got="$got$(code "http://127.0.0.1:$pb/z/l?k=$1")"
        [ "$i" -ge 8 ] && [ "$(pids b "/z/l?k=$1")" = 2 ] && break
    done
    echo "$got"
}
# want3 CODES: 3 x 200, then only 429.
want3() { [[ $1 =~ ^200200200(429)+$ ]]; }

rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
url="redis://127.0.0.1:$rport"

# ------------------------------------------------------- nginx -t refuses
check_refusals() {
    local n=0 out
    # bad_url NAME ZONE_ARGS WANT: nginx -t refuses it, naming WANT and
    # the file and line of the ratel_zone.
    bad_url() {
        local line
        n=$((n + 1))
        site "bad$n" "$(free_port)" 1 "ratel_zone zone=b:1m $2;" ""
        line=$(grep -n 'ratel_zone zone=b' "$tmp/bad$n/nginx.conf" | cut -d: -f1)
        out=$(ngx -t -p "$tmp/bad$n" -c "$tmp/bad$n/nginx.conf" 2>&1)
        contains "$1" "$out" "$3"
        contains "${1}_file_line" "$out" "in $tmp/bad$n/nginx.conf:$line"
    }
    bad_url bad_port "store=redis://127.0.0.1:notaport" 'ratel_zone "b": store="redis://127.0.0.1:notaport": '
    bad_url bad_scheme "store=http://127.0.0.1:6379" 'store="http://127.0.0.1:6379"'
    bad_url bad_on_failure "store=$url?on_failure=maybe" "on_failure"
    bad_url tls_option_plain "store=redis://:s3cret@127.0.0.1:$rport?tls_ca_file=/x" 'store="redis://***@127.0.0.1'
    same password_not_shown "$(grep -c s3cret <<<"$out")" 0
    bad_url tls_missing_ca "store=rediss://127.0.0.1:$rport?tls_ca_file=$tmp/none.pem" "$tmp/none.pem"
    # Redis away at start is no configuration error: it is asked later.
    site away "$(free_port)" 1 "ratel_zone zone=b:1m store=redis://127.0.0.1:$(free_port);" ""
    out=$(ngx -t -p "$tmp/away" -c "$tmp/away/nginx.conf" 2>&1)
    contains unreachable_redis_accepted "$out" "test is successful"
}

# ----------------------------------------- one limit: nginx A, B, rateld
# A: one worker, the failure policies with a 1.5 s deadline (the hang
# checks). B: two workers, 300 ms. Both: a zone of their own memory.
zones() {
    echo "ratel_zone zone=o:1m store=$url?timeout_ms=$1&on_failure=open;
    ratel_zone zone=c:1m store=$url?timeout_ms=$1&on_failure=closed;
    ratel_zone zone=l:1m store=$url?timeout_ms=$1;
    ratel_zone zone=m:1m;"
}
# shellcheck disable=SC2016 # nginx configuration: $arg_k is nginx's
locs='location = /z/o { ratel zone=o policy=api key=$arg_k; try_files /free =404; }
        location = /z/c { ratel zone=c policy=api key=$arg_k; try_files /free =404; }
        location = /z/l { ratel zone=l policy=small key=$arg_k; try_files /free =404; }
        location = /z/x {
            ratel zone=c policy=api key=$arg_k;
            ratel zone=m policy=one key=$arg_j;
            try_files /free =404;
        }'
pa=$(free_port) pb=$(free_port) pr=$(free_port)
start_all() {
    site a "$pa" 1 "$(zones 1500)" "$locs"
    site b "$pb" 2 "$(zones 300)" "$locs"
    start a "$pa" && start b "$pb" || return 1
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
    server_start rateld "$pr" "$build/rateld" --config "$tmp/rateld.yaml"
}

check_shared() {
    local got=""
    for _ in $(seq 10); do got="$got$(code "http://127.0.0.1:$pa/z/c?k=u1")"; done
    for _ in $(seq 10); do got="$got$(code "http://127.0.0.1:$pb/z/o?k=u1")"; done
    same shared_twenty_allowed "$got" "$(printf '200%.0s' $(seq 20))"
    same shared_rateld_denies_21st "$(code "http://127.0.0.1:$pr/v1/acquire?policy=api&key=u1")" 429
    same shared_nginx_denies_22nd "$(code "http://127.0.0.1:$pa/z/o?k=u1")$(code "http://127.0.0.1:$pb/z/c?k=u1")" 429429
    same shared_store_key "$(rcli "$rport" EXISTS api:u1)" 1
    # The other way: rateld spends 19, nginx B the 20th, nginx A is refused.
    for _ in $(seq 19); do code "http://127.0.0.1:$pr/v1/acquire?policy=api&key=u2" >/dev/null; done
    same reverse_b_20th "$(code "http://127.0.0.1:$pb/z/c?k=u2")" 200
    same reverse_a_denied "$(code "http://127.0.0.1:$pa/z/o?k=u2")" 429
    # The Redis module on the same key (an application's RATEL.ACQUIRE).
    rcli "$rport" RATEL.ACQUIRE api:u3 COST 19 20/1m >/dev/null
    same module_shares "$(code "http://127.0.0.1:$pa/z/c?k=u3")$(code "http://127.0.0.1:$pb/z/c?k=u3")" 200429
}

# A denial Redis gave is answered in every worker from the zone: requests
# over B's two workers cost Redis 4 calls (3 allowed, 1 denied).
check_deny_cache() {
    local before got
    before=$(acquires "$rport")
    got=$(spread d1)
    want3 "$got" && ok deny_cache_decisions || fail deny_cache_decisions "$got"
    same deny_cache_redis_calls "$(($(acquires "$rport") - before))" 4
    same deny_cache_both_workers "$(pids b '/z/l?k=d1')" 2
    contains deny_cache_fields "$(fields "http://127.0.0.1:$pb/z/l?k=d1")" '429 "small-0";r=0;t='
}

# zone m refuses after zone c (Redis) admitted: c's charge is given back.
check_give_back() {
    same give_back_first "$(fields "http://127.0.0.1:$pa/z/x?k=x1&j=j1")" '200 "api-0";r=19;t=60, "one-0";r=0;t=60'
    same give_back_fields "$(fields "http://127.0.0.1:$pa/z/x?k=x1&j=j1")" '429 "api-0";r=19;t=60, "one-0";r=0;t=60'
    back19() { [ "$(remaining "$rport" api:x1 20/1m)" = 19 ]; }
    if wait_for 5 back19; then ok give_back_in_redis; else
        fail give_back_in_redis "api:x1 has $(remaining "$rport" api:x1 20/1m) left, want 19"
    fi
}

# ------------------------------------------------ Redis hangs: SIGSTOP
check_hang() {
    local rpid co to cc tc cl tl slowest=0 c t got="" n
    # Every zone has its connections ready, and d2 is a cached denial.
    for z in o c l; do code "http://127.0.0.1:$pa/z/$z?k=warm" >/dev/null; done
    for _ in 1 2 3 4; do code "http://127.0.0.1:$pb/z/l?k=d2" >/dev/null; done
    rpid=$(cat "$tmp/redis-$rport/pid")
    kill -STOP "$rpid"
    for z in o c l; do
        timed "http://127.0.0.1:$pa/z/$z?k=h$z" >"$tmp/hang-$z" &
    done
    # The worker that waits for Redis answers /free at once meanwhile.
    for _ in $(seq 10); do
        read -r c t < <(timed "http://127.0.0.1:$pa/free")
        [ "$c" = 200 ] || fail free_during_hang "answered $c"
        slowest=$(awk -v a="$slowest" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
    done
    within "$slowest" 0 0.1 && ok free_answers_at_once || fail free_answers_at_once "slowest ${slowest}s"
    echo "# slowest /free while Redis hung: ${slowest}s"
    same requests_still_waiting "$(cat "$tmp"/hang-[ocl])" ""
    for z in o c l; do wait_for 10 test -s "$tmp/hang-$z"; done
    read -r co to <"$tmp/hang-o"
    read -r cc tc <"$tmp/hang-c"
    read -r cl tl <"$tmp/hang-l"
    same hang_policies "$co $cc $cl" "200 429 200"
    for t in "$to" "$tc" "$tl"; do
        within "$t" 1.4 3 && ok hang_answer_at_deadline || fail hang_answer_at_deadline "${t}s, deadline 1.5 s"
    done
    # A cached denial needs no Redis: at once, even now.
    read -r c t < <(timed "http://127.0.0.1:$pb/z/l?k=d2")
    same hang_cached_denial "$c" 429
    within "$t" 0 0.1 && ok hang_cached_at_once || fail hang_cached_at_once "${t}s"
    # `local` decides in the zone: 3/1m exactly, over B's two workers.
    got=$(spread hl)
    want3 "$got" && ok hang_local_exact || fail hang_local_exact "$got"
    same hang_local_both_workers "$(pids b '/z/l?k=hl')" 2
    contains hang_logged "$(cat "$tmp/a/logs/error.log")" 'ratel_zone "c": Redis is down ('
    kill -CONT "$rpid"
    back() { [ "$(code "http://127.0.0.1:$pa/z/c?k=back")" = 200 ]; }
    if wait_for 10 back; then ok redis_back_decides; else fail redis_back_decides "still refused"; fi
    same back_key_in_redis "$(rcli "$rport" EXISTS api:back)" 1
    contains back_logged "$(cat "$tmp/a/logs/error.log")" 'ratel_zone "c": Redis decides again'
    # B's workers too (each finds Redis back on its own: a fresh key per
    # try, until Redis holds it).
    n=0
    back_local() {
        n=$((n + 1))
        code "http://127.0.0.1:$pb/z/l?k=hb$n" >/dev/null
        [ "$(rcli "$rport" EXISTS "small:hb$n")" = 1 ]
    }
    if wait_for 10 back_local; then ok back_local_in_redis; else fail back_local_in_redis "B still decides alone"; fi
}

# metric PORT NAME{LABELS}: its value.
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }
# The Redis zones' decisions and what Redis did not decide, counted.
check_metrics() {
    local v
    for v in "$(metric "$pa" 'ratel_decisions_total{zone="c",policy="api",outcome="allowed"}')" \
        "$(metric "$pa" 'ratel_store_fallbacks_total{zone="c",policy="closed"}')" \
        "$(metric "$pa" 'ratel_store_fallbacks_total{zone="o",policy="open"}')" \
        "$(metric "$pb" 'ratel_store_fallbacks_total{zone="l",policy="local"}')" \
        "$(metric "$pb" 'ratel_store_cache_hits_total{zone="l"}')"; do
        [ "${v:-0}" -ge 1 ] && ok metrics_counted || fail metrics_counted "[$v]"
    done
    same metrics_errors "$(metric "$pa" 'ratel_store_errors_total{zone="c"}')" \
        "$(metric "$pa" 'ratel_store_fallbacks_total{zone="c",policy="closed"}')"
    same metrics_no_fallback_in_memory "$(metric "$pa" 'ratel_store_errors_total{zone="m"}')" 0
}

# ----------------------------------- the example of docs/nginx.md, as printed
check_example() {
    local ep bp got=""
    ep=$(free_port) bp=$(free_port)
    sed "s/127.0.0.1:6379/127.0.0.1:$rport/; s/127.0.0.1:8000/127.0.0.1:$ep/; s/127.0.0.1:8081/127.0.0.1:$bp/" \
        "$root/examples/nginx/redis.conf" >"$tmp/redis.conf"
    site ex "$(free_port)" 1 "include $tmp/redis.conf;" ""
    contains example_nginx_t "$(ngx -t -p "$tmp/ex" -c "$tmp/ex/nginx.conf" 2>&1)" "test is successful"
    start ex "$ep" || return
    for phone in 13900000009 13900000009; do
        got="$got$(code "http://127.0.0.1:$ep/sendCaptcha?phone=$phone")"
    done
    # 502: allowed, and the (absent) backend failed; 429: refused.
    same example_limits "$got" 502429
    same example_key_in_redis "$(rcli "$rport" EXISTS sms:+8613900000009)" 1
    nginx_stop "$tmp/ex"
}

# ------------------------------------------------------------ Cluster
check_cluster() {
    local cports=() p pc slot from to fromid toid got=""
    read -r -a cports <<<"$(cluster_start 3 0 2>"$tmp/cluster.err")"
    if [ "${#cports[@]}" != 3 ]; then
        fail cluster "did not form: $(tail -3 "$tmp/cluster.err")"
        return
    fi
    pc=$(free_port)
    # shellcheck disable=SC2016 # nginx configuration: $arg_k is nginx's
    site cl "$pc" 1 "ratel_zone zone=k:1m store=redis+cluster://127.0.0.1:${cports[0]}?on_failure=closed&timeout_ms=2000;" \
        'location = /z/k { ratel zone=k policy=small key=$arg_k; try_files /free =404; }'
    start cl "$pc" || return
    same cluster_first "$(code "http://127.0.0.1:$pc/z/k?k=m")" 200
    # The key's slot moves to another master; nginx follows MOVED.
    slot=$(rcli "${cports[0]}" CLUSTER KEYSLOT small:m)
    for p in "${cports[@]}"; do
        if [ "$(rcli "$p" CLUSTER COUNTKEYSINSLOT "$slot")" = 1 ]; then
            from=$p fromid=$(rcli "$p" CLUSTER MYID)
        else
            to=$p toid=$(rcli "$p" CLUSTER MYID)
        fi
    done
    rcli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$fromid" >/dev/null
    rcli "$from" CLUSTER SETSLOT "$slot" MIGRATING "$toid" >/dev/null
    rcli "$from" MIGRATE 127.0.0.1 "$to" small:m 0 5000 >/dev/null
    for p in "${cports[@]}"; do rcli "$p" CLUSTER SETSLOT "$slot" NODE "$toid" >/dev/null; done
    same cluster_key_moved "$(rcli "$to" EXISTS small:m)$(rcli "$from" CLUSTER COUNTKEYSINSLOT "$slot")" 10
    for _ in 1 2 3; do got="$got$(code "http://127.0.0.1:$pc/z/k?k=m")"; done
    same cluster_counts_after_move "$got" 200200429
    nginx_stop "$tmp/cl"
}

# ---------------------------------------------------------------- TLS
check_tls() {
    local certs tport pt got=""
    certs=$(tls_certs)
    tport=$(redis_start_tls) || { fail tls "did not start"; return; }
    pt=$(free_port)
    # shellcheck disable=SC2016 # nginx configuration: $arg_k is nginx's
    site tls "$pt" 1 "ratel_zone zone=t:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&on_failure=closed&timeout_ms=2000;
    ratel_zone zone=w:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&tls_server_name=redis.example.com&on_failure=closed&timeout_ms=2000;" \
        'location = /z/t { ratel zone=t policy=small key=$arg_k; try_files /free =404; }
        location = /z/w { ratel zone=w policy=small key=$arg_k; try_files /free =404; }'
    start tls "$pt" || return
    for _ in 1 2 3 4; do got="$got$(code "http://127.0.0.1:$pt/z/t?k=s")"; done
    same tls_decides "$got" 200200200429
    same tls_key_in_redis "$(rcli_tls "$tport" EXISTS small:s)" 1
    same tls_wrong_name_closed "$(code "http://127.0.0.1:$pt/z/w?k=s2")$(code "http://127.0.0.1:$pt/z/w?k=s2")" 429429
    same tls_wrong_name_logged_once "$(grep -c 'ratel_zone "w": Redis is down (.*certificate is for .*not redis.example.com' "$tmp/tls/logs/error.log")" 1
    same tls_no_crit "$(grep -c '\[crit\]' "$tmp/tls/logs/error.log")" 0
    nginx_stop "$tmp/tls"
}

# ------------------------------------------------------------ valgrind
# One process under valgrind through the same paths: each policy, a
# refund, a cached denial, a hang, TLS, a graceful stop.
valgrind_run() {
    local certs tport pv vglog=$tmp/vg/valgrind.log rpid
    certs=$(tls_certs)
    tport=$(redis_start_tls) || { fail tls "did not start"; return; }
    pv=$(free_port)
    site vg "$pv" 1 "$(zones 1000)
    ratel_zone zone=t:1m store=rediss://127.0.0.1:$tport?tls_ca_file=$certs/ca.crt&timeout_ms=2000;" \
        "$locs
        location = /z/t { ratel zone=t policy=small key=\$arg_k; try_files /free =404; }" "master_process off;"
    start vg "$pv" "${nginx_valgrind[@]}" --log-file="$vglog" || return
    for z in o c l t; do code "http://127.0.0.1:$pv/z/$z?k=v" >/dev/null; done
    same vg_give_back "$(code "http://127.0.0.1:$pv/z/x?k=v&j=v")$(code "http://127.0.0.1:$pv/z/x?k=v&j=v")" 200429
    for _ in 1 2 3 4; do code "http://127.0.0.1:$pv/z/l?k=vd" >/dev/null; done
    same vg_cached "$(code "http://127.0.0.1:$pv/z/l?k=vd")" 429
    rpid=$(cat "$tmp/redis-$rport/pid")
    kill -STOP "$rpid"
    same vg_hang "$(code "http://127.0.0.1:$pv/z/c?k=v2")$(code "http://127.0.0.1:$pv/z/l?k=v2")" 429200
    kill -CONT "$rpid"
    code "http://127.0.0.1:$pv/z/c?k=v3" >/dev/null
    nginx_stop "$tmp/vg"
    nginx_valgrind_clean "$vglog"
}

nginx_valgrind_only valgrind_run

check_refusals
if start_all; then
    check_shared
    check_deny_cache
    check_give_back
    check_hang
    check_metrics
    nginx_stop "$tmp/b"
    nginx_stop "$tmp/a"
fi
check_example
check_cluster
check_tls
nginx_sanitizers_quiet
finish
