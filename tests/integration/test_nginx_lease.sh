#!/usr/bin/env bash
# test_nginx_lease.sh - leased policies in the nginx module's Redis mode
# (docs/nginx.md, "Leased policies"), on a real redis-server:
#
#   - nginx -t refuses each bad lease= (an unknown setting, a value out of
#     range or not a number, min_slice above max_slice, a concurrent rule,
#     max_wait= on a line) with rateld's words and the file:line, and
#     prints nothing more for a good one; worker 0 logs the bound;
#   - docs/nginx.md's snippet nginx-lease as printed (ports moved);
#   - two nginx of two workers each on one Redis, one leased key driven
#     past its limit from both: admitted within the limit plus the bound
#     the log printed, most answers from slices (both workers of an nginx
#     spend its zone's), far fewer Redis calls than requests;
#   - a reload that keeps the policy keeps the slices in the zone (the
#     new workers spend them, Redis is not asked); one that changes the
#     policy gives them back;
#   - `nginx -s quit` gives back what the zone held: RATEL.INFO's used
#     drops by exactly what the metrics said was held.
#
# RATEL_NGINX_VALGRIND=1 (tests/valgrind.sh): only one nginx process
# (master_process off) under valgrind, spending slices and giving them
# back at its quit, whose errors and leaks in the module's frames fail it.
#   - a reload that leases a policy of a zone first made without store=
#     (its memory kept, with no slice table) says so in the log and
#     leaves the policy exact, decided by Redis request by request.
# Under `make asan` nginx runs with the sanitizers' runtime preloaded
# (nginx_lib.sh) and any report fails the suite.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$nginx_so"

rport=$(redis_start) || { fail redis "did not start"; finish; exit 1; }
url="redis://127.0.0.1:$rport"

# site NAME PORT POLICIES [WORKERS [TOP]]: an nginx of WORKERS (2)
# workers on PORT with a Redis zone `z`, POLICIES, /metrics and
# /l/api?k=KEY and /l/cold?k=KEY limited by those policies.
site() {
    local dir=$tmp/$1
    mkdir -p "$dir/html/l"
    echo ok >"$dir/html/free"
    nginx_conf "$dir" "${4:-2}" "${5:-}" <<EOF
    ratel_zone zone=z:1m store=$url;
    $3
    server {
        listen 127.0.0.1:$2 reuseport;
        root $dir/html;
        location = /free { }
        location = /metrics { ratel_metrics; }
        location = /l/api { ratel zone=z policy=api key=\$arg_k; try_files /free =404; }
        location = /l/cold { ratel zone=z policy=cold key=\$arg_k; try_files /free =404; }
    }
EOF
}
start() { nginx_start "$tmp/$1" "http://127.0.0.1:$2/free" "${@:3}"; }
# metric PORT NAME_AND_LABELS: a counter of the nginx on PORT.
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
# permits PORT POLICY WHAT: ratel_lease_permits_total of zone z.
permits() { metric "$1" "ratel_lease_permits_total{zone=\"z\",policy=\"$2\",what=\"$3\"}"; }
# held PORT POLICY: what the zone holds, by its metrics.
held() {
    echo $(($(permits "$1" "$2" leased) - $(permits "$1" "$2" spent) -
        $(permits "$1" "$2" returned) - $(permits "$1" "$2" stranded)))
}
# calls COMMAND: the calls Redis answered of COMMAND so far.
calls() {
    rcli "$rport" INFO commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p" | grep . || echo 0
}
# used KEY: RATEL.INFO's used of KEY.
used() { rcli "$rport" RATEL.INFO "$1" | sed -n '/^used$/{n;p;q}'; }
# drive URL N OUT: N requests of URL on one kept-alive connection, each
# answer's status a line of OUT.
drive() {
    local i
    for i in $(seq "$2"); do printf 'url = "%s"\noutput = /dev/null\n' "$1"; done >"$3.cfg"
    curl -s -K "$3.cfg" -w '%{http_code}\n' >"$3"
}

# ------------------------------------------------------------ valgrind
valgrind_run() {
    local pv vglog=$tmp/vg/valgrind.log held_v before after
    pv=$(free_port)
    site vg "$pv" 'ratel_policy api 600/1m lease=ttl_ms=60000,min_slice=10,max_slice=10;
    ratel_policy cold 600/1m;' 1 "master_process off;"
    start vg "$pv" "${nginx_valgrind[@]}" --log-file="$vglog" || return
    drive "http://127.0.0.1:$pv/l/api?k=vg" 25 "$tmp/vg.codes"
    same vg_admitted "$(grep -c '^200$' "$tmp/vg.codes")" 25
    held_v=$(held "$pv" api)
    before=$(used api:vg)
    nginx_stop "$tmp/vg"
    after=$(used api:vg)
    [ "$held_v" -gt 0 ] && ok vg_held || fail vg_held "nothing held"
    same vg_gives_back "$((before - after))" "$held_v"
    nginx_valgrind_clean "$vglog"
}
nginx_valgrind_only valgrind_run

# --------------------------------------------------- nginx -t refuses
# refused NAME POLICY_LINE WANT [LOCATION_LINE]: nginx -t says WANT and
# names the file and line.
refused() {
    local dir=$tmp/bad_$1 out line
    mkdir -p "$dir"
    nginx_conf "$dir" 1 <<EOF
    ratel_zone zone=z:1m store=$url;
    $2
    server {
        listen 127.0.0.1:$(free_port);
        location / { ${4:-ratel zone=z policy=p key=ip;} }
    }
EOF
    line=$(grep -n "${5:-ratel_policy}" "$dir/nginx.conf" | head -1 | cut -d: -f1)
    out=$(ngx -t -p "$dir" -c "$dir/nginx.conf" 2>&1)
    contains "refused_$1" "$out" "$3"
    contains "refused_${1}_file_line" "$out" "$dir/nginx.conf:$line"
}
refused unknown 'ratel_policy p 10/1s lease=ttl_ms=250,speed=3;' \
    'ratel_policy "p": lease.speed: unknown setting; accepted: ttl_ms, max_slice, min_slice, hosts'
refused not_number 'ratel_policy p 10/1s lease=max_slice=many;' \
    'ratel_policy "p": lease.max_slice: expected a whole number, got "many"'
refused out_of_range 'ratel_policy p 10/1s lease=ttl_ms=3600001;' \
    'ratel_policy "p": lease.ttl_ms: 3600001 is out of range; accepted: 0 (the default) or 1..3600000'
refused no_value 'ratel_policy p 10/1s lease=hosts;' \
    'ratel_policy "p": lease: "hosts" has no value'
refused min_above_max 'ratel_policy p 10/1s lease=min_slice=60,max_slice=50;' \
    'ratel_policy "p": lease.min_slice: 60 is more than max_slice (50)'
refused concurrent 'ratel_policy p 10/1s 3/1m:concurrent lease=hosts=2;' \
    'ratel_policy "p": lease: a policy with a concurrent rule cannot be leased (its permits are leases a request holds and gives back, not a rate to slice)'
refused max_wait 'ratel_policy p 10/1s:gcra lease=hosts=2;' \
    'ratel: policy "p": lease: a policy that reserves (max_wait) is decided by the store, request by request; remove lease or max_wait' \
    'ratel zone=z policy=p key=ip max_wait=100;' 'max_wait=100'

# A good one: nginx -t says what it always says, nothing more.
site good "$(free_port)" 'ratel_policy api 600/1m lease=ttl_ms=250,max_slice=20,hosts=2;
    ratel_policy cold 600/1m;'
out=$(ngx -t -p "$tmp/good" -c "$tmp/good/nginx.conf" 2>&1)
same good_config_quiet "$(grep -v -e 'syntax is ok' -e 'test is successful' <<<"$out")" ""

# ------------------------------------------- the page's snippet, as printed
snippet_run() {
    local port dir=$tmp/page
    port=$(free_port)
    mkdir -p "$dir/html"
    echo ok >"$dir/html/index.html"
    doc_snippet "$root/docs/nginx.md" nginx-lease |
        sed -e "s/127.0.0.1:8000/127.0.0.1:$port/; s/6379/$rport/; s|proxy_pass http://127.0.0.1:8081;|root $dir/html; try_files /index.html =404;|" |
        nginx_conf "$dir" 2
    contains snippet_found "$(cat "$dir/nginx.conf")" 'lease='
    start page "$port" || return
    acquires=$(calls ratel.acquire)
    drive "http://127.0.0.1:$port/api/?k=page" 200 "$tmp/page.codes"
    acquires=$(($(calls ratel.acquire) - acquires))
    same snippet_answers "$(sort -u "$tmp/page.codes" | tr '\n' ' ')" "200 "
    grep -h 'is leased' "$dir/logs/error.log" | sed 's/^.*ratel_zone/# ratel_zone/'
    # The page shows the line the log says, in the text block after it.
    contains snippet_bound "$(cat "$dir/logs/error.log")" \
        "$(doc_snippet_output "$root/docs/nginx.md" nginx-lease)"
    echo "# the snippet: Redis decided $acquires of 200 requests"
    [ "$acquires" -le 100 ] && ok snippet_from_slices ||
        fail snippet_from_slices "Redis decided $acquires of 200"
    nginx_stop "$dir"
}
snippet_run

# ----------------------------------- two nginx, one leased key past its limit
# 600 a minute, slices of up to 20 alive 60 s (the permits held are alive
# at the quit), 2 hosts: the bound is min(2 x 2 x 20, 600) = 80. cold
# takes slices of 20 exactly, whatever its rate.
policies='ratel_policy api 600/1m lease=ttl_ms=60000,max_slice=20,hosts=2;
    ratel_policy cold 600/1m lease=ttl_ms=60000,min_slice=20,max_slice=20,hosts=2;'
pa=$(free_port)
pb=$(free_port)
site a "$pa" "$policies"
site b "$pb" "$policies"
start a "$pa" && start b "$pb" || { finish; exit 1; }
contains bound_logged "$(cat "$tmp/a/logs/error.log")" \
    'ratel_zone "z": policy "api" is leased: overshoot at most 80 over 600/1m in any window, with up to 2 hosts'

before_acquire=$(calls ratel.acquire)
before_slice=$(calls ratel.slice)
pids=()
for n in a1 a2 b1 b2; do
    port=$pa
    [ "${n#b}" != "$n" ] && port=$pb
    drive "http://127.0.0.1:$port/l/api?k=hot" 500 "$tmp/load.$n" &
    pids+=($!)
done
wait "${pids[@]}"
total=$(cat "$tmp"/load.?? | wc -l)
admitted=$(cat "$tmp"/load.?? | grep -c '^200$')
spent=$(($(permits "$pa" api spent) + $(permits "$pb" api spent)))
slices=$(($(calls ratel.slice) - before_slice))
acquires=$(($(calls ratel.acquire) - before_acquire))
echo "# $total requests, $admitted admitted ($spent from slices), limit 600 + bound 80; Redis: $slices RATEL.SLICE, $acquires RATEL.ACQUIRE"
same two_nginx_load "$total" 2000
[ "$admitted" -le 680 ] && ok within_bound || fail within_bound "$admitted admitted > 600 + 80"
[ "$admitted" -ge 500 ] && ok reaches_limit || fail reaches_limit "$admitted admitted"
[ "$spent" -ge 300 ] && ok most_from_slices || fail most_from_slices "$spent of $admitted from slices"
[ $(((slices + acquires) * 4)) -le "$total" ] && ok few_redis_calls ||
    fail few_redis_calls "$slices slices and $acquires acquires for $total requests"
calls_a=$(metric "$pa" 'ratel_lease_calls_total{zone="z",policy="api"}')
[ "$calls_a" -gt 0 ] && [ "$calls_a" -le "$slices" ] && ok calls_metric ||
    fail calls_metric "nginx a says $calls_a slice calls, Redis $slices"

# ------------------------------------------- the workers spend one zone's
# The first request of a key asks for a slice of 20; then requests on new
# connections until both workers of nginx a have answered: all from that
# one slice, whichever worker asked for it (one call, one holder).
code() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$@"; }
slice_a=$(calls ratel.slice)
same share_first "$(code "http://127.0.0.1:$pa/l/cold?k=share")" 200
wait_for 5 [ "$(permits "$pa" cold leased)" -ge 20 ] || fail share_fetched "no slice came"
for i in $(seq 40); do
    got=$(code "http://127.0.0.1:$pa/l/cold?k=share")
    [ "$got" = 200 ] || fail share_admitted "$got"
    [ "$i" -ge 4 ] && [ "$(awk '$2 == "/l/cold?k=share" { print $1 }' "$tmp/a/logs/access.log" |
        sort -u | wc -l)" = 2 ] && break
done
same workers_share_zone "$(awk '$2 == "/l/cold?k=share" && $3 == 200 { print $1 }' \
    "$tmp/a/logs/access.log" | sort -u | wc -l)" 2
same workers_one_slice "$(($(calls ratel.slice) - slice_a))" 1

# ------------------------------------------------------ reload: kept, changed
# cold: a few requests take slices (well under the limit).
drive "http://127.0.0.1:$pb/l/cold?k=kept" 10 "$tmp/kept.codes"
held_b=$(held "$pb" cold)
used_b=$(used cold:kept)
slice_b=$(calls ratel.slice)
ngx -s reload -p "$tmp/b" -c "$tmp/b/nginx.conf" 2>/dev/null
sleep 1
same reload_keeps_slices "$(used cold:kept)" "$used_b"
drive "http://127.0.0.1:$pb/l/cold?k=kept" 5 "$tmp/kept2.codes"
same reload_new_workers_spend "$(calls ratel.slice)" "$slice_b"
same reload_spent "$(grep -c '^200$' "$tmp/kept2.codes")" 5
echo "# reload kept: $held_b permits held, used $used_b"
# The policy's rules change: the old workers give its slices back.
held_b=$(held "$pb" cold)
used_b=$(used cold:kept)
sed -i 's|ratel_policy cold 600/1m|ratel_policy cold 500/1m|' "$tmp/b/nginx.conf"
ngx -s reload -p "$tmp/b" -c "$tmp/b/nginx.conf" 2>/dev/null
sleep 1.5
after=$(used cold:kept)
echo "# reload changed: $held_b permits held, used $used_b -> $after"
[ "$held_b" -gt 0 ] && ok reload_held || fail reload_held "nothing held"
same reload_changed_gives_back "$((used_b - after))" "$held_b"

# ------------------------------------------------ nginx -s quit gives back
# nginx a holds slices of cold's keys share and quit.
drive "http://127.0.0.1:$pa/l/cold?k=quit" 10 "$tmp/quit.codes"
held_a=$(held "$pa" cold)
before=$(($(used cold:quit) + $(used cold:share)))
nginx_stop "$tmp/a"
after=$(($(used cold:quit) + $(used cold:share)))
echo "# quit: nginx a held $held_a unspent permits; used $before -> $after"
[ "$held_a" -gt 0 ] && ok quit_held || fail quit_held "nothing held to give back"
same quit_gives_back "$((before - after))" "$held_a"
nginx_stop "$tmp/b"

# ------------------------------- a zone made without a store, then leased
# A reload keeps the memory of a zone of the same name and size, laid out
# without a slice table: the policy is decided by Redis, exactly, one
# request at a time, and the log says why.
pc=$(free_port)
mkdir -p "$tmp/c/html"
echo ok >"$tmp/c/html/free"
conf_c() { # ZONE_ARGS POLICY_ARGS
    nginx_conf "$tmp/c" 1 <<EOF
    ratel_zone zone=y:1m$1;
    ratel_policy hot 600/1m$2;
    server {
        listen 127.0.0.1:$pc;
        root $tmp/c/html;
        location = /free { }
        location = /h { ratel zone=y policy=hot key=\$arg_k; try_files /free =404; }
    }
EOF
}
conf_c "" ""
if start c "$pc"; then
    old_worker=$(nginx_workers "$tmp/c")
    conf_c " store=$url" " lease=ttl_ms=60000,max_slice=100"
    ngx -s reload -p "$tmp/c" -c "$tmp/c/nginx.conf" 2>/dev/null
    # The old worker serves no more once it is gone.
    wait_for 10 bash -c "! kill -0 $old_worker 2>/dev/null" ||
        fail unleasable_reloaded "the old worker $old_worker still runs"
    wait_for 10 grep -q 'policy "hot" is not leased' "$tmp/c/logs/error.log" &&
        ok unleasable_zone_says_so ||
        fail unleasable_zone_says_so "$(tail -3 "$tmp/c/logs/error.log" | tr '\n' ' ')"
    grep -o 'policy "hot" is not leased.*' "$tmp/c/logs/error.log" | head -1 | sed 's/^/# /'
    acquires=$(calls ratel.acquire)
    drive "http://127.0.0.1:$pc/h?k=c" 5 "$tmp/c.codes"
    same unleasable_admitted "$(grep -c '^200$' "$tmp/c.codes")" 5
    same unleasable_by_redis "$(($(calls ratel.acquire) - acquires)) $(used hot:c)" "5 5"
    nginx_stop "$tmp/c"
fi
nginx_sanitizers_quiet
finish
