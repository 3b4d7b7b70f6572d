#!/usr/bin/env bash
# bench/nginx.sh - ngx_http_ratel_module against nginx's own limit_req and
# against nginx -> auth_request -> rateld, in ONE run: one nginx with one
# worker serving every case (each on its own location, so they differ only
# in their directives), empty_gif as the content, wrk -t1 -c50, ROUNDS
# rounds interleaving the cases so that a noisy minute on this shared
# machine hits them all (every other round in the reverse order, so that
# a drift favours no case); medians and ratios within the run.
#
#   (a) allowed: ratel's shared-memory zone, one rule never reached,
#       against limit_req at a rate never reached, both keyed by
#       $binary_remote_addr (limit_req's own idiom); ratel as configured
#       by default (RateLimit and RateLimit-Policy on every answer) and
#       with `ratel_headers off` (limit_req writes no header);
#   (b) denied: the same, with a limit already exhausted (a telephone's
#       1/1m against limit_req's 1r/m on $arg_telephone), both answering
#       429 (limit_req_status 429) and both logging each refusal at their
#       default level (error); ratel with its fields (Retry-After,
#       RateLimit, RateLimit-Policy) and with `ratel_headers off`;
#   (c) two sliding rules (1000000000/1m and 1000000000/1h) on the zone
#       against limit_req allowed; and the denied case keyed by key
#       sources (docs/keys.md: key=query:telephone, and with |phone:CN,
#       the number parsed by libphonenumber) against $arg_telephone:
#       what reading the identity as the backend does costs;
#   (d) Redis mode (store=redis://, ratel.so loaded into redis-server),
#       allowed and denied, against nginx -> auth_request -> rateld
#       (docs/gateways.md's nginx snippet) with rateld on the same Redis,
#       and against limit_req. Runs when the module has Redis mode (an
#       `nginx -t` with store=redis:// passes);
#   (e) in flight: a `256/1m:concurrent` rule on the zone (a lease taken
#       by each request and released at its end; wrk's 50 connections
#       never reach 256) against limit_conn 256, both keyed by
#       $binary_remote_addr;
#   (f) delay: a burst of 1 + DELAY_N requests at once (a key of their
#       own each round) on `10/1s:gcra,burst=1` with max_wait=DELAY_N x
#       100 against limit_req rate=10r/s burst=DELAY_N (no nodelay), both
#       keyed by $arg_k: the first admitted at once, the i-th excess due
#       at i x 100 ms after it. Each request's admission is nginx's $msec
#       in an access log of its own (empty_gif answers as soon as the
#       request goes on); its deviation from its slot is printed, and the
#       medians and maxima of |deviation| over every round. The same
#       taken at the client (timed_requests.py, the answer's arrival) is
#       reported beside it. No wrk runs meanwhile: the worker is idle
#       but for the burst.
#
# Targets (docs/BENCHMARKS.md): zone >= 1.0x limit_req allowed and denied,
# two sliding rules >= 0.9x, Redis mode >= 2x auth_request -> rateld,
# concurrent >= 0.9x limit_conn, a delayed request within 10 ms of its
# slot.
#
#   BUILD=build bench/nginx.sh     NGINX_ROUNDS=5 NGINX_SECONDS=5 DELAY_N=10
#
# Besides requests/s, each case's CPU time per request of the processes
# serving it (utime+stime from /proc around each wrk run): the nginx
# worker, and rateld and redis-server where they take part. On 2 cores
# wrk shares the machine with them, so the rate alone can measure the
# machine.
#
# Prints "ratel|peer<TAB>NAME<TAB>VALUE<TAB>UNIT" lines (medians), each
# round's figures as comments, then a summary. Never fails on a figure;
# exit 1 only when it cannot measure.
. "$(dirname "$0")/http_lib.sh"
rounds=${NGINX_ROUNDS:-5}
secs=${NGINX_SECONDS:-5}
delay_n=${DELAY_N:-10}
module=$build/nginx/ngx_http_ratel_module.so
timed=$top/tests/integration/timed_requests.py

need nginx wrk curl python3
[ -e "$module" ] || die "$module is missing (make builds it)"
[ -e "$timed" ] || die "$timed is missing"
[[ $delay_n =~ ^[1-9][0-9]?$ ]] || die "DELAY_N must be 1 to 99, not $delay_n"

# Redis and rateld for (d), when redis-server, the Redis module and rateld
# are there.
redis=0
if command -v redis-server >/dev/null && [ -e "$build/ratel.so" ] && [ -x "$build/rateld" ]; then
    redis_start || die "redis-server did not start: $(tail -3 "$tmp/redis.log")"
    store_url="redis://127.0.0.1:$rport?mode=module"
    # rateld on that Redis, one worker thread, the auth endpoint answering
    # 403 as docs/gateways.md's snippet expects.
    dport=$(free_port)
    rateld_config "$dport" 403 "$store_url" >"$tmp/rateld.yaml"
    "$build/rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
    pids+=($!)
    rateld_pid=$!
    wait_http "http://127.0.0.1:$dport/healthz" || die "rateld did not start: $(tail -3 "$tmp/rateld.log")"
    redis=1
fi

# The module's Redis mode: does this build have it? (Without it, nginx -t
# refuses store=URL.)
if [ "$redis" = 1 ]; then
    mkdir -p "$tmp/probe/logs"
    printf 'load_module %s;\npid %s/probe/nginx.pid;\nevents {}\nhttp { ratel_zone zone=r:1m store=%s; }\n' \
        "$module" "$tmp" "$store_url" >"$tmp/probe/nginx.conf"
    if ! out=$(nginx -t -p "$tmp/probe" -e "$tmp/probe/logs/error.log" -c "$tmp/probe/nginx.conf" 2>&1); then
        echo "# (d) skipped: this module has no Redis mode ($(grep -m1 emerg <<<"$out"))"
        redis=0
    fi
fi

# docs/gateways.md's nginx snippet in front of rateld, with empty_gif as
# the content (as bench/gateway.sh does).
gateway_server() { # PORT RATELD_PORT
    awk '$0 == "<!-- snippet: nginx -->" { f = 1; next }
         f == 1 && /^```/ { f = 2; next } f == 2 && /^```/ { exit } f == 2' "$top/docs/gateways.md" |
        sed -e "s/127.0.0.1:8080/127.0.0.1:$2/; s/listen 8000;/listen 127.0.0.1:$1;/" \
            -e '/root \/srv\/www;/d' \
            -e 's/^\(        error_page 500 = @ratel_down;\)$/\1\n        empty_gif;/'
}

port=$(free_port)
gport=$(free_port)
d=$tmp/nginx
mkdir -p "$d/logs"
{
    echo "load_module $module;"
    nginx_head "$d"
    cat <<EOF

    limit_req_zone \$binary_remote_addr zone=perip:10m rate=100000000r/s;
    limit_req_zone \$arg_telephone zone=perphone:10m rate=1r/m;
    limit_req_status 429;
    limit_conn_zone \$binary_remote_addr zone=perconn:10m;
    limit_conn_status 429;
    limit_req_zone \$arg_k zone=paced:10m rate=10r/s;
    # (f): each request's admission (nginx's clock, in ms).
    log_format admitted '\$arg_k \$status \$msec';

    ratel_zone zone=shm:10m;
    ratel_policy allow 1000000000/1m;
    ratel_policy two 1000000000/1m 1000000000/1h;
    ratel_policy sms 1/1m;
    ratel_policy inflight 256/1m:concurrent;
    ratel_policy paced 10/1s:gcra,burst=1;
EOF
    [ "$redis" = 1 ] && echo "    ratel_zone zone=red:10m store=$store_url;"
    cat <<EOF
    server {
        listen 127.0.0.1:$port;
        # empty_gif (a content handler), not return: return answers in
        # the rewrite phase, before either limiter sees the request.
        location = /limit_req/allowed { limit_req zone=perip burst=1000000 nodelay; empty_gif; }
        location = /limit_req/denied { limit_req zone=perphone; empty_gif; }
        location = /zone/allowed { ratel zone=shm policy=allow key=\$binary_remote_addr; empty_gif; }
        location = /zone/allowed_no_headers {
            ratel zone=shm policy=allow key=\$binary_remote_addr;
            ratel_headers off;
            empty_gif;
        }
        location = /zone/denied { ratel zone=shm policy=sms key=\$arg_telephone; empty_gif; }
        location = /zone/denied_no_headers {
            ratel zone=shm policy=sms key=\$arg_telephone;
            ratel_headers off;
            empty_gif;
        }
        location = /zone/two { ratel zone=shm policy=two key=\$binary_remote_addr; empty_gif; }
        # Key sources (docs/keys.md): the query read by ratel, and the
        # number parsed by libphonenumber, against \$arg_telephone.
        location = /zone/denied_query { ratel zone=shm policy=sms key=query:telephone; empty_gif; }
        location = /zone/denied_phone { ratel zone=shm policy=sms key=query:telephone|phone:CN; empty_gif; }
        # (e) in flight: the same limit on both sides, never reached.
        location = /limit_conn/allowed { limit_conn perconn 256; empty_gif; }
        location = /zone/concurrent { ratel zone=shm policy=inflight key=\$binary_remote_addr; empty_gif; }
        # (f) delay: 1 at once, $delay_n delayed at the rate on both sides.
        location = /limit_req/delay {
            limit_req zone=paced burst=$delay_n;
            access_log $d/logs/limit_req_delay.log admitted;
            empty_gif;
        }
        location = /zone/delay {
            ratel zone=shm policy=paced key=\$arg_k max_wait=$((delay_n * 100));
            access_log $d/logs/zone_delay.log admitted;
            empty_gif;
        }
EOF
    if [ "$redis" = 1 ]; then
        cat <<EOF
        location = /redis/allowed { ratel zone=red policy=allow key=\$binary_remote_addr; empty_gif; }
        location = /redis/denied { ratel zone=red policy=sms key=\$arg_telephone; empty_gif; }
EOF
    fi
    echo "    }"
    echo "}"
} >"$d/nginx.conf"
nginx -p "$d" -c "$d/nginx.conf" >"$d/logs/stderr" 2>&1 &
pids+=($!)
nginx_pid=$!
wait_http "http://127.0.0.1:$port/limit_req/allowed" || die "nginx did not start: $(cat "$d/logs/stderr")"

# wait_log CASE KEY N: (f)'s access log has N lines of KEY (nginx writes
# a request's line when it is done with it, maybe after the client read
# the answer).
wait_log() {
    local _
    for _ in $(seq 100); do
        [ "$(awk -v k="$2" '$1 == k' "$d/logs/$1.log" 2>/dev/null | wc -l)" -ge "$3" ] && return 0
        sleep 0.02
    done
    return 1
}

# slots: of admission times (one a line, in ms, any order), each one's
# deviation from its slot in ms: the first is the origin, the i-th after
# it is due i x 100 ms later (10/1s).
slots() {
    sort -g | awk 'NR == 1 { t0 = $1; next } {
        v = sprintf("%.0f", $1 - t0 - (NR - 1) * 100)
        print (v == "-0" ? "0" : (v + 0 > 0 ? "+" v : v)) }'
}

# burst CASE KEY: (f)'s 1 + delay_n requests at once on KEY (timed from
# one clock, a connection each), their deviations from their slots at
# nginx and at the client into the results, and a comment.
burst() {
    local c=$1 k=$2 out specs=() admitted at_nginx at_client
    for _ in $(seq $((delay_n + 1))); do specs+=("0:$((delay_n / 10 + 5)):${durl[$c]}?k=$k"); done
    out=$(python3 "$timed" "${specs[@]}")
    admitted=$(awk '$1 == 200' <<<"$out" | wc -l)
    wait_log "$c" "$k" "$admitted"
    at_nginx=$(awk -v k="$k" '$1 == k && $2 == 200 { printf "%.0f\n", $3 * 1000 }' "$d/logs/$c.log" | slots)
    at_client=$(awk '$1 == 200 { print $3 }' <<<"$out" | slots)
    for v in $at_nginx; do echo "dev:$c:nginx $v" >>"$results"; done
    for v in $at_client; do echo "dev:$c:client $v" >>"$results"; done
    echo "# $c: $admitted of $((delay_n + 1)) admitted$([ "$admitted" = $((delay_n + 1)) ] || echo " (not as configured: $(awk '{ print $1 }' <<<"$out" | sort | uniq -c | tr -s ' \n' ' '))");" \
        "deviation from the slot (ms) at nginx: $(paste -sd' ' <<<"$at_nginx"); at the client: $(paste -sd' ' <<<"$at_client")"
}

# nginx -> auth_request -> rateld: an nginx of its own (one worker too)
# without the module, as a site that does not use it runs.
if [ "$redis" = 1 ]; then
    g=$tmp/gateway
    mkdir -p "$g/logs"
    {
        nginx_head "$g"
        gateway_server "$gport" "$dport"
        echo "}"
    } >"$g/nginx.conf"
    nginx -p "$g" -c "$g/nginx.conf" >"$g/logs/stderr" 2>&1 &
    pids+=($!)
    gateway_pid=$!
    wait_http "http://127.0.0.1:$gport/api/ping" || die "nginx (auth_request) did not start: $(cat "$g/logs/stderr")"
fi

# Each case's URL. The denied ones are exhausted first; every case is
# checked to answer as it should before anything is measured.
# Each case's URL, the status it must answer and the processes serving
# it (NAME:PID ...), whose CPU time is taken.
declare -A url want procs
worker=$(worker_of "$nginx_pid")
case_add() { url[$1]=$2; want[$1]=$3; procs[$1]=${4:-nginx:$worker}; }
base=http://127.0.0.1:$port
case_add limit_req_allowed "$base/limit_req/allowed" 200
case_add limit_req_denied "$base/limit_req/denied?telephone=13800138000" 429
case_add zone_allowed "$base/zone/allowed" 200
case_add zone_allowed_no_headers "$base/zone/allowed_no_headers" 200
case_add zone_denied "$base/zone/denied?telephone=13800138000" 429
case_add zone_denied_no_headers "$base/zone/denied_no_headers?telephone=13800138001" 429
case_add zone_two_rules "$base/zone/two" 200
case_add zone_denied_query "$base/zone/denied_query?telephone=13800138002" 429
case_add zone_denied_phone "$base/zone/denied_phone?telephone=%2B86%20138%200013%208003" 429
case_add limit_conn_allowed "$base/limit_conn/allowed" 200
case_add zone_concurrent "$base/zone/concurrent" 200
if [ "$redis" = 1 ]; then
    gworker=$(worker_of "$gateway_pid")
    case_add redis_allowed "$base/redis/allowed" 200 "nginx:$worker redis:$redis_pid"
    case_add redis_denied "$base/redis/denied?telephone=13800138000" 429 "nginx:$worker redis:$redis_pid"
    case_add auth_request_rateld_allowed "http://127.0.0.1:$gport/api/ping" 200 \
        "nginx:$gworker rateld:$rateld_pid redis:$redis_pid"
    case_add auth_request_rateld_denied "http://127.0.0.1:$gport/deny" 429 \
        "nginx:$gworker rateld:$rateld_pid redis:$redis_pid"
fi
cases=$(printf '%s\n' "${!url[@]}" | sort)
for c in $cases; do
    [ "${want[$c]}" = 429 ] && curl -s -o /dev/null "${url[$c]}"
    got=$(curl -s -o /dev/null -w '%{http_code}' "${url[$c]}")
    [ "$got" = "${want[$c]}" ] || die "$c: ${url[$c]} answers $got, not ${want[$c]}"
done
# (f)'s two cases, driven by bursts rather than wrk; each answers 200 and
# logs its admission.
declare -A durl
durl[limit_req_delay]=$base/limit_req/delay
durl[zone_delay]=$base/zone/delay
delays=$(printf '%s\n' "${!durl[@]}" | sort)
for c in $delays; do
    got=$(curl -s -o /dev/null -w '%{http_code}' "${durl[$c]}?k=check")
    [ "$got" = 200 ] || die "$c: ${durl[$c]}?k=check answers $got, not 200"
    wait_log "$c" check 1 || die "$c: no line in $d/logs/$c.log"
done

machine_header
echo "# $(nginx -v 2>&1); one worker; wrk -t1 -c50 -d${secs}s; $rounds interleaved rounds"
echo "# delay: bursts of $((delay_n + 1)) requests at once, 10/1s:gcra,burst=1 max_wait=$((delay_n * 100)) against limit_req rate=10r/s burst=$delay_n"
[ "$redis" = 1 ] && echo "# $(redis-server --version | cut -d' ' -f1-3); rateld threads: 1, store $store_url"

results=$tmp/results
: >"$results"
everything=$(sort <<<"$cases"$'\n'"$delays")
for r in $(seq "$rounds"); do
    echo "# round $r/$rounds: $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
    order=$everything
    [ $((r % 2)) = 0 ] && order=$(tac <<<"$everything")
    for c in $order; do
        if [ -n "${durl[$c]:-}" ]; then
            burst "$c" "round$r"
            continue
        fi
        declare -A before=()
        for np in ${procs[$c]}; do before[$np]=$(cpu_ticks "${np#*:}"); done
        out=$(wrk -t1 -c50 -d"${secs}s" "${url[$c]}" 2>&1)
        # A case answering other than it should (a non-2xx among the
        # allowed, a 2xx among the denied) is not measured as that case.
        total=$(awk '/requests in/ { print $1 }' <<<"$out")
        non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
        if [ "${want[$c]}" = 200 ] && [ -n "$non2xx" ]; then die "$c: $non2xx of $total answers were not 2xx"; fi
        # limit_req's slowest rate is 1r/m: each minute lets one more
        # request through (so would a 1/1m rule); a few are expected.
        if [ "${want[$c]}" = 429 ] && [ $((total - ${non2xx:-0})) -gt 2 ]; then die "$c: $((total - ${non2xx:-0})) of $total answers were 2xx"; fi
        echo "$c $(awk '/Requests\/sec/ { print $2 }' <<<"$out")" >>"$results"
        hz=$(getconf CLK_TCK)
        for np in ${procs[$c]}; do
            echo "cpu:$c:${np%%:*} $(awk -v t="$(($(cpu_ticks "${np#*:}") - before[$np]))" -v n="$total" -v hz="$hz" \
                'BEGIN { printf "%.1f", t * 1000000 / hz / n }')" >>"$results"
        done
    done
done

# CPU microseconds per request, medians over the rounds.
echo
echo "| case | nginx worker (us/request) | rateld | redis-server |"
echo "|---|---|---|---|"
for c in $cases; do
    row=""
    for p in nginx rateld redis; do
        v=$(awk -v k="cpu:$c:$p" '$1 == k { print $2 }' "$results" | sort -g |
            awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
        row+=" ${v:--} |"
    done
    echo "| $c |$row"
done
echo

# |deviation| of (f)'s delayed requests over every round: CASE WHERE
# median|max.
deviation() {
    awk -v k="dev:$1:$2" '$1 == k { print ($2 < 0 ? -$2 : $2) + 0 }' "$results" | sort -g |
        awk -v m="$3" '{ v[NR] = $1 } END {
            if (NR == 0) print "n/a"
            else if (m == "max") print v[NR]
            else if (NR % 2) print v[(NR + 1) / 2]
            else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A med
for c in $cases; do
    all=$(awk -v k="$c" '$1 == k { printf "%s ", $2 }' "$results")
    med[$c]=$(awk -v k="$c" '$1 == k { print $2 }' "$results" | median)
    who=ratel
    [[ $c == limit_req* || $c == limit_conn* || $c == auth_request* ]] && who=peer
    printf '%s\tnginx_%s_rps\t%s\treq/s\t(rounds: %s)\n' "$who" "$c" "${med[$c]}" "$all"
done
for c in $delays; do
    who=ratel
    [[ $c == limit_req* ]] && who=peer
    for w in nginx client; do
        n=nginx_${c}_deviation
        [ "$w" = client ] && n=nginx_${c}_client_deviation
        printf '%s\t%s_median\t%s\tms\n' "$who" "$n" "$(deviation "$c" "$w" median)"
        printf '%s\t%s_max\t%s\tms\n' "$who" "$n" "$(deviation "$c" "$w" max)"
    done
done

# ratio A B: median of A / median of B. paired A B: the median of the
# per-round ratios (each round's two figures were taken seconds apart).
ratio() { awk -v a="${med[$1]:-0}" -v b="${med[$2]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
paired() {
    paste <(awk -v k="$1" '$1 == k { print $2 }' "$results") <(awk -v k="$2" '$1 == k { print $2 }' "$results") |
        awk '$2 > 0 { print $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
row() { # LABEL A B TARGET
    printf '| %s | %s | %s | %s; %s | %s |\n' "$1" "${med[$2]:-n/a}" "${med[$3]:-n/a}" \
        "$(ratio "$2" "$3")" "$(paired "$2" "$3")" "$4"
}
echo
echo "| case | ratel (req/s) | against (req/s) | ratio (medians; per round) | target |"
echo "|---|---|---|---|---|"
row "zone, one rule, allowed / limit_req allowed" zone_allowed limit_req_allowed ">= 1.0"
row "zone, one rule, allowed, ratel_headers off / limit_req allowed" zone_allowed_no_headers limit_req_allowed "(reported)"
row "zone, one rule, denied / limit_req denied" zone_denied limit_req_denied ">= 1.0"
row "zone, one rule, denied, ratel_headers off / limit_req denied" zone_denied_no_headers limit_req_denied "(reported)"
row "zone, two sliding rules / limit_req allowed" zone_two_rules limit_req_allowed ">= 0.9"
row "zone, concurrent (in flight) / limit_conn" zone_concurrent limit_conn_allowed ">= 0.9"
row "zone, denied, key=query:telephone / key=\$arg_telephone" zone_denied_query zone_denied "(reported)"
row "zone, denied, key=query:telephone|phone:CN / key=\$arg_telephone" zone_denied_phone zone_denied "(reported)"
row "zone, denied, key=query:telephone|phone:CN / limit_req denied" zone_denied_phone limit_req_denied "(reported)"
if [ "$redis" = 1 ]; then
    row "Redis mode allowed / auth_request -> rateld (Redis) allowed" redis_allowed auth_request_rateld_allowed ">= 2.0"
    row "Redis mode denied / auth_request -> rateld (Redis) denied" redis_denied auth_request_rateld_denied ">= 2.0"
    row "Redis mode allowed / limit_req allowed" redis_allowed limit_req_allowed "(reported)"
    row "Redis mode denied / limit_req denied" redis_denied limit_req_denied "(reported)"
fi

echo
echo "| delayed requests' distance from their slot (ms), $rounds rounds x $delay_n | ratel max_wait (median; max) | limit_req burst=$delay_n (median; max) | target |"
echo "|---|---|---|---|"
printf '| admitted at nginx (%s) | %s; %s | %s; %s | within 10 |\n' "\$msec" \
    "$(deviation zone_delay nginx median)" "$(deviation zone_delay nginx max)" \
    "$(deviation limit_req_delay nginx median)" "$(deviation limit_req_delay nginx max)"
printf '| answered at the client | %s; %s | %s; %s | (reported) |\n' \
    "$(deviation zone_delay client median)" "$(deviation zone_delay client max)" \
    "$(deviation limit_req_delay client median)" "$(deviation limit_req_delay client max)"
