#!/usr/bin/env bash
# test_nginx_delay.sh - delay as limit_req does it, in
# ngx_http_ratel_module: a `ratel` line with max_wait=MS admits a request
# that fits within MS after waiting for its reservation on an nginx timer
# (docs/nginx.md, "Delaying requests"). In Debian's nginx, in a zone in
# shared memory and in a Redis zone (store=redis://):
#
#   - 10 requests at once under 10/1s:gcra,burst=1 max_wait=500 (limit_req
#     rate=10r/s burst=5): 1 at once, 5 delayed to the rate's schedule
#     (100, 200, .. 500 ms after the first: each one's deviation printed,
#     within 150 ms), 4 refused; $ratel_status PASSED, DELAYED, REJECTED;
#   - a client that goes away while delayed gives its reservation back:
#     the next request takes its place (its wait is the freed slot's);
#   - a dry run delays nothing (DELAYED_DRY_RUN);
#   - nginx -t refuses a max_wait that is not a number of ms, and one on
#     a policy whose rules are not all gcra, naming the rule;
#   - examples/nginx/pace.conf, as docs/nginx.md prints it (ports
#     changed, the application absent: nginx's 502 is an admitted
#     request): 8 at once on /api/ give 6 admitted and 2 refused, and
#     /export's slots are free again after each request.
#
# The timings come from one client clock (timed_requests.py): the
# schedule is the feature, so each delayed request's time is checked
# against its slot with a generous tolerance, never a performance figure.
# Under `make asan` nginx runs with the sanitizers' runtime preloaded
# (nginx_lib.sh) and any report fails the suite.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$nginx_so"

timed() { python3 "$root/tests/integration/timed_requests.py" "$@"; }
# statuses NAME PATH: the $ratel_status of the log's lines for PATH,
# counted ("1 PASSED 5 DELAYED ...": sorted by name).
statuses() { awk -v p="$2" '$2 == p { print $4 }' "$dir/logs/access.log" | sort | uniq -c | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

# site NAME ZONE_ARGS: nginx on $port serving the locations below.
site() {
    dir=$tmp/$1
    port=$(free_port)
    mkdir -p "$dir/html"
    echo ok >"$dir/html/index.html"
    nginx_conf "$dir" 2 <<EOF
    ratel_zone zone=d:1m $2;
    ratel_policy paced 10/1s:gcra,burst=1;
    ratel_policy slow 1/1s:gcra,burst=1;
    server {
        listen 127.0.0.1:$port reuseport;
        root $dir/html;
        location = /ready { return 204; }
        location /paced { ratel zone=d policy=paced key=query:k max_wait=500; try_files /index.html =404; }
        location /slow { ratel zone=d policy=slow key=query:k max_wait=3000; try_files /index.html =404; }
        location /dry {
            ratel zone=d policy=paced key=query:k max_wait=500;
            ratel_dry_run on;
            try_files /index.html =404;
        }
    }
EOF
    nginx_start "$dir" "http://127.0.0.1:$port/ready"
}

# 10 at once: 1 admitted, 5 delayed to the schedule, 4 refused.
check_schedule() {
    local m=$1 u="http://127.0.0.1:$port/paced?k=burst" out specs=()
    for _ in $(seq 10); do specs+=("0:5:$u"); done
    out=$(timed "${specs[@]}")
    same "${m}_schedule_codes" "$(awk '{ print $1 }' <<<"$out" | sort | uniq -c | tr -s ' \n' ' ')" " 6 200 4 429 "
    # The admitted ones by their end: the k-th after the first at k x 100 ms.
    local devs
    devs=$(awk '$1 == 200 { print $3 }' <<<"$out" | sort -n |
        awk 'NR == 1 { t0 = $1; next } { printf "%+.0f ", $1 - t0 - (NR - 1) * 100 }')
    echo "# $m: delayed requests' deviation from their slot (ms): $devs"
    local worst
    worst=$(tr ' ' '\n' <<<"$devs" | awk 'NF { d = $1 < 0 ? -$1 : $1; if (d > w) w = d } END { print w + 0 }')
    if [ "$(wc -w <<<"$devs")" = 5 ] && [ "$worst" -le 150 ]; then
        ok "${m}_schedule_within_150ms"
    else
        fail "${m}_schedule_within_150ms" "deviations [$devs]: $out"
    fi
    wait_for 5 test "$(awk '$2 == "/paced?k=burst"' "$dir/logs/access.log" | wc -l)" -ge 10
    same "${m}_schedule_status" "$(statuses "$m" /paced?k=burst)" "5 DELAYED 1 PASSED 4 REJECTED"
}

# A client gone while delayed: its reservation is given back. 1/1s: the
# first at once; the second reserved for 1 s hangs up at 300 ms; the
# third, at 500 ms, takes the freed slot (at about 1 s, not 2 s).
check_abandon() {
    local m=$1 u="http://127.0.0.1:$port/slow?k=gone" out end1 end3 dev
    out=$(timed "0:5:$u" "50:0.3:$u" "500:5:$u")
    same "${m}_abandon_codes" "$(awk '{ print $1 }' <<<"$out" | tr '\n' ' ')" "200 0 200 "
    end1=$(awk 'NR == 1 { print $3 }' <<<"$out")
    end3=$(awk 'NR == 3 { print $3 }' <<<"$out")
    dev=$(awk -v a="$end1" -v b="$end3" 'BEGIN { printf "%+.0f", b - a - 1000 }')
    echo "# $m: the request after an abandoned reservation ends ${dev} ms from the freed slot (1000 ms after the first; 2000 ms had the slot stayed taken)"
    if [ "${dev#[+-]}" -le 150 ]; then ok "${m}_abandon_slot_freed"; else fail "${m}_abandon_slot_freed" "$out"; fi
    wait_for 5 test "$(awk '$2 == "/slow?k=gone"' "$dir/logs/access.log" | wc -l)" -ge 3
    same "${m}_abandon_logged" "$(awk '$2 == "/slow?k=gone" { print $3, $4 }' "$dir/logs/access.log" | sort | tr '\n' ',')" \
        "200 DELAYED,200 PASSED,499 DELAYED,"
}

# A dry run counts the reservations and delays nothing.
check_dry_run() {
    local m=$1 out
    out=$(timed "0:5:http://127.0.0.1:$port/dry?k=dry" "0:5:http://127.0.0.1:$port/dry?k=dry" "0:5:http://127.0.0.1:$port/dry?k=dry")
    same "${m}_dry_run_codes" "$(awk '{ print $1 }' <<<"$out" | tr '\n' ' ')" "200 200 200 "
    wait_for 5 test "$(awk '$2 == "/dry?k=dry"' "$dir/logs/access.log" | wc -l)" -ge 3
    same "${m}_dry_run_status" "$(statuses "$m" /dry?k=dry)" "2 DELAYED_DRY_RUN 1 PASSED"
}

# nginx -t: the option's range and its policy.
check_refusals() {
    local bad=$tmp/bad out
    nginx_conf "$bad" 1 <<EOF
    ratel_zone zone=d:1m;
    ratel_policy p 10/1s:gcra;
    server { listen 127.0.0.1:$(free_port); location / { ratel zone=d policy=p key=ip max_wait=soon; } }
EOF
    out=$(ngx -t -p "$bad" -c "$bad/nginx.conf" 2>&1)
    contains refuse_max_wait_number "$out" 'ratel: max_wait must be an integer from 0 to'
    contains refuse_max_wait_value "$out" '"soon"'
    contains refuse_max_wait_where "$out" "$bad/nginx.conf:"
    nginx_conf "$bad" 1 <<EOF
    ratel_zone zone=d:1m;
    ratel_policy mixed 10/1s:gcra 100/1h;
    server { listen 127.0.0.1:$(free_port); location / { ratel zone=d policy=mixed key=ip max_wait=500; } }
EOF
    out=$(ngx -t -p "$bad" -c "$bad/nginx.conf" 2>&1)
    contains refuse_max_wait_policy "$out" \
        'ratel: policy "mixed": max_wait needs every rule to be gcra; rule 2 ("100/1h") is sliding, in'
}

check_example() {
    local dir=$tmp/example eport out specs=() codes=""
    eport=$(free_port)
    sed "s/127.0.0.1:8000/127.0.0.1:$eport/; s/127.0.0.1:8081/127.0.0.1:$(free_port)/" \
        "$root/examples/nginx/pace.conf" >"$tmp/pace.conf"
    echo "    include $tmp/pace.conf;" | nginx_conf "$dir" 1
    contains example_nginx_t "$(ngx -t -p "$dir" -c "$dir/nginx.conf" 2>&1)" "test is successful"
    nginx_start "$dir" "http://127.0.0.1:$eport/export"
    for _ in $(seq 8); do specs+=("0:5:http://127.0.0.1:$eport/api/x"); done
    out=$(timed "${specs[@]}")
    same example_paced "$(awk '{ print $1 }' <<<"$out" | sort | uniq -c | tr -s ' \n' ' ')" " 2 429 6 502 "
    for _ in 1 2 3 4 5; do
        codes="$codes$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$eport/export") "
    done
    same example_export_released "$codes" "502 502 502 502 502 "
    nginx_stop "$dir"
}

check_refusals
check_example
site zone ""
check_schedule zone
check_abandon zone
check_dry_run zone
nginx_stop "$dir"

rport=$(redis_start)
site redis "store=redis://127.0.0.1:$rport"
check_schedule redis
check_abandon redis
check_dry_run redis
nginx_stop "$dir"

nginx_sanitizers_quiet
finish
