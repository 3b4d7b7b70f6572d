#!/usr/bin/env bash
# test_nginx_concurrent.sh - in-flight limits in ngx_http_ratel_module, as
# limit_conn does them: a `:concurrent` rule's lease is released when the
# request ends (docs/nginx.md, "Requests in flight"). In Debian's nginx
# with the module loaded, in front of a slow application (a Python server
# that sleeps ?ms= before answering), under `3/30s:concurrent`, in a zone
# in shared memory and in a Redis zone (store=redis://):
#
#   - 3 requests in flight, the 4th refused (429) at once;
#   - when one of them ends, a new one is admitted at once, and requests
#     one after the other are all admitted (each released its slot);
#   - clients that hang up mid-request (499) free their slots: 3 new
#     requests in flight are admitted after 3 aborts;
#   - an internal redirect (try_files) and a subrequest (auth_request),
#     to locations with the same line, charge and release the request
#     once;
#   - a request given back (it never ran) under a policy with a concurrent
#     rule and a rate rule (`3/30s:concurrent 1000/1m`) frees its own
#     lease, not the newest: it holds a lease while another line delays
#     it (max_wait=), two later requests take theirs, its client leaves;
#     once those two end, 3 requests in flight are admitted again (the
#     refund freed the newest lease and left this one held for 30 s);
#   - a worker killed with `kill -9` holding both slots of `2/2s:concurrent`
#     frees them by the rule's PERIOD: refused at once, admitted within it.
#
# RATEL_NGINX_VALGRIND=1 (tests/valgrind.sh): only a short run of one
# nginx process (master_process off) under valgrind, a zone and a Redis
# zone: a lease released at the end, at a client's abort, and a delayed
# request's given back when its client leaves (renewal, refund and
# release in Redis), whose errors and leaks in the module's frames fail
# it.
#
# Under `make asan` nginx runs with the sanitizers' runtime preloaded
# (nginx_lib.sh) and any report fails the suite.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$nginx_so"

# The application (app_backend.py): GET /?ms=N answers 200 after N ms;
# /started says how many requests it has begun.
started() { curl -s "http://127.0.0.1:$bport/started"; }
# started_at_least N: the application has begun N requests.
started_at_least() { [ "$(started)" -ge "$1" ]; }
code() { curl -s -o /dev/null -m 20 -w '%{http_code}' "$@"; }
# in_flight NAME URL: a request in the background, its status in
# $tmp/NAME.code; its curl's pid in $tmp/NAME.pid.
in_flight() {
    rm -f "$tmp/$1.code"
    (curl -s -o /dev/null -m 20 -w '%{http_code}' "$2" >"$tmp/$1.part"; mv "$tmp/$1.part" "$tmp/$1.code") &
    echo $! >"$tmp/$1.pid"
}
# done_code NAME: its status once it ended (a command substitution cannot
# `wait` for the shell's own children).
done_code() {
    wait_for 30 test -s "$tmp/$1.code"
    cat "$tmp/$1.code"
    rm -f "$tmp/$1.code"
}
# admitted URL: 200 (the codes seen before are in $tmp/seen).
admitted() {
    local c
    c=$(code "$1")
    echo "$c" >>"$tmp/seen"
    [ "$c" = 200 ]
}
count_499() { awk '$3 == 499' "$dir/logs/access.log" | wc -l; }

# site NAME ZONE_ARGS: nginx on $port with the locations the checks use.
site() {
    dir=$tmp/$1
    port=$(free_port)
    nginx_conf "$dir" 2 <<EOF
    ratel_zone zone=c:1m $2;
    ratel_policy inflight 3/30s:concurrent;
    ratel_policy short 2/2s:concurrent;
    ratel_zone zone=p:1m;
    ratel_policy mixed 3/30s:concurrent 1000/1m;
    ratel_policy pace 1/10s:gcra;
    upstream app { server 127.0.0.1:$bport; }
    server {
        listen 127.0.0.1:$port reuseport;
        location = /ready { return 204; }
        location = /metrics { ratel_metrics; }
        location /slow { ratel zone=c policy=inflight key=global; proxy_pass http://app/; }
        # An internal redirect after the decision (try_files) to a
        # location with the same line, and a subrequest to one: neither
        # charges the request again.
        location /redirect { ratel zone=c policy=inflight key=global; try_files /absent @app; }
        location @app { ratel zone=c policy=inflight key=global; proxy_pass http://app; }
        location /auth {
            ratel zone=c policy=inflight key=global;
            auth_request /check;
            proxy_pass http://app/;
        }
        location = /check { internal; ratel zone=c policy=inflight key=global; proxy_pass http://app/; }
        location /killed { ratel zone=c policy=short key=global; proxy_pass http://app/; }
        # A lease in zone c, then a wait for ?p='s reservation in zone p.
        location /mixed {
            ratel zone=c policy=mixed key=global;
            ratel zone=p policy=pace key=\$arg_p max_wait=10000;
            proxy_pass http://app/;
        }
    }
EOF
    nginx_start "$dir" "http://127.0.0.1:$port/ready"
}

# The checks, on the site $1 just started ($2: zone or redis).
check_in_flight() {
    local m=$2 u=http://127.0.0.1:$port n
    n=$(started)
    in_flight a "$u/slow?ms=1000"
    in_flight b "$u/slow?ms=2500"
    in_flight c "$u/slow?ms=2500"
    wait_for 10 started_at_least $((n + 3))
    same "${m}_fourth_refused" "$(code "$u/slow?ms=0")" 429
    same "${m}_first_ends" "$(done_code a)" 200
    local codes=""
    for _ in 1 2 3 4 5; do codes="$codes$(code "$u/slow?ms=0") "; done
    same "${m}_admitted_as_one_ends" "$codes" "200 200 200 200 200 "
    same "${m}_long_ones" "$(done_code b) $(done_code c)" "200 200"

    # Three clients hang up mid-request: their slots are free again.
    n=$(started)
    local pids=()
    for _ in 1 2 3; do
        curl -s -o /dev/null -m 0.5 "$u/slow?ms=4000" &
        pids+=($!)
    done
    wait "${pids[@]}"
    wait_for 10 test "$(count_499)" -ge 3
    same "${m}_aborts_logged" "$(count_499)" 3
    in_flight a "$u/slow?ms=800"
    in_flight b "$u/slow?ms=800"
    in_flight c "$u/slow?ms=800"
    same "${m}_after_aborts" "$(done_code a) $(done_code b) $(done_code c)" "200 200 200"

    # An internal redirect and a subrequest: charged once, released once.
    codes=""
    for _ in 1 2 3 4; do codes="$codes$(code "$u/redirect?ms=0") $(code "$u/auth?ms=0") "; done
    same "${m}_redirect_subrequest_once" "$codes" "$(printf '200 %.0s' $(seq 8))"
    n=$(started)
    in_flight a "$u/auth?ms=1000"
    in_flight b "$u/redirect?ms=1000"
    in_flight c "$u/slow?ms=1000"
    wait_for 10 started_at_least $((n + 4)) # /auth: its /check, then itself
    same "${m}_redirect_subrequest_held" "$(code "$u/slow?ms=0")" 429
    same "${m}_redirect_subrequest_end" "$(done_code a) $(done_code b) $(done_code c) $(code "$u/slow?ms=0")" \
        "200 200 200 200"
}

delayed_count() {
    curl -s "http://127.0.0.1:$port/metrics" |
        awk 'index($0, "ratel_decisions_total{zone=\"p\",policy=\"pace\",outcome=\"delayed\"}") == 1 { print $NF }'
}
delayed_at_least() { [ "$(delayed_count)" -ge "$1" ] 2>/dev/null; }
aborted_mixed() { awk '$2 ~ /^\/mixed\?p=x/ && $3 == 499' "$dir/logs/access.log" | wc -l; }

# A request that holds a lease of `mixed` and waits for its reservation
# gives back all it took when its client leaves: its own lease, though
# two requests took theirs after it.
check_own_lease() {
    local m=$2 u=http://127.0.0.1:$port n d r3
    same "${m}_mixed_first" "$(code "$u/mixed?p=x&ms=0")" 200
    d=$(delayed_count)
    curl -s -o /dev/null -m 20 "$u/mixed?p=x&ms=0" &
    r3=$!
    wait_for 10 delayed_at_least $((${d:-0} + 1))
    n=$(started)
    in_flight a "$u/mixed?p=y&ms=3000"
    in_flight b "$u/mixed?p=z&ms=3000"
    wait_for 10 started_at_least $((n + 2))
    same "${m}_mixed_full" "$(code "$u/mixed?p=w&ms=0")" 429
    kill "$r3"
    wait "$r3" 2>/dev/null
    wait_for 10 test "$(aborted_mixed)" -ge 1
    same "${m}_mixed_abort_logged" "$(aborted_mixed)" 1
    same "${m}_mixed_others_end" "$(done_code a) $(done_code b)" "200 200"
    in_flight a "$u/mixed?p=a1&ms=1500"
    in_flight b "$u/mixed?p=a2&ms=1500"
    in_flight c "$u/mixed?p=a3&ms=1500"
    same "${m}_mixed_own_lease_freed" "$(done_code a) $(done_code b) $(done_code c)" "200 200 200"
}

# A worker killed with both slots of 2/2s:concurrent taken: they are
# freed by the period (the core's lease expiry), not by the request's end.
check_killed() {
    local m=$2 u=http://127.0.0.1:$port n t0 t1
    n=$(started)
    in_flight a "$u/killed?ms=5000"
    in_flight b "$u/killed?ms=5000"
    wait_for 10 started_at_least $((n + 2))
    t0=$(date +%s%N)
    # The workers that hold them, by their ids (kill -9: no cleanup runs).
    # shellcheck disable=SC2046 # one id per word
    kill -9 $(nginx_workers "$dir")
    same "${m}_killed_still_held" "$(code "$u/killed?ms=0")" 429
    wait_for 5 admitted "$u/killed?ms=0"
    t1=$(date +%s%N)
    local ms=$(((t1 - t0) / 1000000))
    echo "# $m: slots of a killed worker free again after ${ms} ms (PERIOD 2000 ms; seen $(sort "$tmp/seen" | uniq -c | tr -s ' \n' ' '))"
    rm -f "$tmp/seen"
    if [ "$ms" -le 2600 ]; then ok "${m}_killed_freed_by_period"; else fail "${m}_killed_freed_by_period" "$ms ms"; fi
}

# One process under valgrind through the paths that hold and give back.
valgrind_run() {
    local u
    dir=$tmp/vg
    rport=$(redis_start)
    port=$(free_port)
    u=http://127.0.0.1:$port
    nginx_conf "$dir" 1 "master_process off;" <<EOF
    ratel_zone zone=c:1m;
    ratel_zone zone=r:1m store=redis://127.0.0.1:$rport;
    ratel_zone zone=p:1m;
    ratel_policy inflight 3/30s:concurrent;
    ratel_policy mixed 3/30s:concurrent 1000/1m;
    ratel_policy pace 1/10s:gcra;
    upstream app { server 127.0.0.1:$bport; }
    server {
        listen 127.0.0.1:$port;
        location = /ready { return 204; }
        location /slow { ratel zone=c policy=inflight key=global; proxy_pass http://app/; }
        location /rslow { ratel zone=r policy=inflight key=global; proxy_pass http://app/; }
        location /mixed {
            ratel zone=c policy=mixed key=global;
            ratel zone=p policy=pace key=\$arg_p max_wait=10000;
            proxy_pass http://app/;
        }
        location /rmixed {
            ratel zone=r policy=mixed key=global;
            ratel zone=p policy=pace key=\$arg_p max_wait=10000;
            proxy_pass http://app/;
        }
    }
EOF
    nginx_start "$dir" "$u/ready" "${nginx_valgrind[@]}" --log-file="$dir/valgrind.log" || return
    same valgrind_released "$(code "$u/slow?ms=0") $(code "$u/rslow?ms=0")" "200 200"
    curl -s -o /dev/null -m 1 "$u/slow?ms=3000"
    curl -s -o /dev/null -m 1 "$u/rslow?ms=3000"
    same valgrind_first "$(code "$u/mixed?p=x&ms=0") $(code "$u/rmixed?p=y&ms=0")" "200 200"
    # Delayed 10 s by p: their clients leave after 1 s.
    curl -s -o /dev/null -m 1 "$u/mixed?p=x&ms=0"
    curl -s -o /dev/null -m 1 "$u/rmixed?p=y&ms=0"
    wait_for 20 test "$(awk '$3 == 499' "$dir/logs/access.log" | wc -l)" -ge 4
    same valgrind_given_back "$(code "$u/mixed?p=z&ms=0") $(code "$u/rmixed?p=w&ms=0")" "200 200"
    nginx_stop "$dir"
    nginx_valgrind_clean "$dir/valgrind.log"
}

app_start
nginx_valgrind_only valgrind_run
site zone ""
check_in_flight zone zone
check_own_lease zone zone
check_killed zone zone
nginx_stop "$dir"

rport=$(redis_start)
site redis "store=redis://127.0.0.1:$rport"
check_in_flight redis redis
check_own_lease redis redis
check_killed redis redis
nginx_stop "$dir"

nginx_sanitizers_quiet
finish
