#!/usr/bin/env bash
# ngx_http_ratel_module in Debian's own nginx (load_module of the built
# module, a prefix under $tmp, free loopback ports, always stopped), with
# nginx's clock set by the test (libfaketime, frozen at the time written to
# a file): two workers sharing one zone exactly (20 x 200, then 429 with
# Retry-After and the RateLimit fields); the SMS policy across its minute
# and a day's boundary at local midnight; several lines all-or-nothing,
# within a zone and across zones; dry run; the variables in a log format;
# an empty key not counted; `nginx -t` refusing bad configurations with
# file:line and the reason; a reload keeping counts, a changed zone size
# starting empty; a million unique keys into a small zone (bounded,
# evictions counted, nginx answering); ratel_metrics; the example of
# docs/nginx.md (examples/nginx/sms.conf). Under `make asan` the same
# checks run with the sanitizers' runtime preloaded into nginx
# (nginx_lib.sh), and any report fails the suite.
#
# RATEL_NGINX_VALGRIND=1: only a short run of one nginx process
# (master_process off) under valgrind, whose errors and leaks in the
# module's frames fail it (tests/valgrind.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

faketime_lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
nginx_require "$nginx_so" "$faketime_lib"

port=$(free_port)
clock=$tmp/clock
# The clock nginx reads: `at "2026-03-01 15:00:00"` (UTC). Only nginx
# preloads libfaketime, so only nginx reads it.
export FAKETIME_TIMESTAMP_FILE=$clock FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1
at() { echo "$1" >"$clock"; }
at "2026-03-01 12:00:00"

# conf DIR WORKERS [TOP]: nginx_conf's (the server blocks on stdin), and
# DIR/html/index.html for the locations that serve it.
conf() {
    mkdir -p "$1/html"
    echo ok >"$1/html/index.html"
    nginx_conf "$@"
}

# start_nginx DIR [PORT [real]]: nginx_start, waiting for /ready on PORT,
# its clock the test's unless "real" (libfaketime reads the clock's file
# at every reading: a flood of requests runs on the real clock).
start_nginx() {
    local fake=$faketime_lib
    [ "${3:-}" = real ] && fake=
    nginx_faketime=$fake nginx_start "$1" "http://127.0.0.1:${2:-$port}/ready"
}

# get PATH: status in $code, response headers in $tmp/h.
get() {
    code=$(curl -s -D "$tmp/h" -o "$tmp/b" -w '%{http_code}' "http://127.0.0.1:$port$1")
}
header() { grep -i "^$1:" "$tmp/h" | head -1 | cut -d: -f2- | tr -d '\r' | sed 's/^ //'; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" 'index($0, m) == 1 { print $NF }' | head -1; }

# The main server: one zone, the policies each check uses.
main_conf() {
    local size=${1:-1m}
    conf "$tmp/main" 2 <<CONF
    ratel_zone zone=api:$size;
    ratel_zone zone=other:64k;
    ratel_zone zone=small:128k;
    ratel_policy ping 20/1m;
    ratel_policy sms 1/60s 10/1d:fixed,tz=+08:00;
    ratel_policy pair_user 1/1m;
    ratel_policy pair_all 10/1m;
    ratel_policy zone_a 5/1m;
    ratel_policy zone_b 1/1m;
    ratel_policy dry 1/1m;
    ratel_policy once 1/1m;
    ratel_policy kept 3/1m;
    ratel_policy flood 1/1h;
    ratel_policy costly 5/1m;
    ratel_policy capped 5/1m;
    ratel_policy a_policy_name_of_forty_bytes_0123456789 1/1m;
    ratel_policy outer 1/1m;
    ratel_policy inner 3/1m;
    ratel_policy src 1/1m;
    ratel_policy range 3/1h;
    server {
        listen 127.0.0.1:$port reuseport;
        root $tmp/main/html;
        location = /ready { }
        location = /metrics { ratel_metrics; }
        location /ping { ratel zone=api policy=ping key=\$remote_addr; try_files /index.html =404; }
        location /sms { ratel zone=api policy=sms key=\$arg_phone; try_files /index.html =404; }
        location /pair {
            ratel zone=api policy=pair_user key=\$arg_u;
            ratel zone=api policy=pair_all key=global;
            try_files /index.html =404;
        }
        location /zones {
            ratel zone=api policy=zone_a key=\$arg_u;
            ratel zone=other policy=zone_b key=\$arg_v;
            try_files /index.html =404;
        }
        location /cost { ratel zone=api policy=costly key=global cost=\$arg_c; ratel_status 503; try_files /index.html =404; }
        location /long { ratel zone=api policy=a_policy_name_of_forty_bytes_0123456789 key=\$arg_k; try_files /index.html =404; }
        location /long-source { ratel zone=api policy=a_policy_name_of_forty_bytes_0123456789 key=query:k; try_files /index.html =404; }
        location /capped { ratel zone=api policy=capped key=global cost=\$arg_n; try_files /index.html =404; }
        location /outer {
            ratel zone=api policy=outer key=global;
            location /outer/inherits { try_files /index.html =404; }
            location /outer/own { ratel zone=api policy=inner key=global; try_files /index.html =404; }
        }
        location /dry { ratel zone=api policy=dry key=\$remote_addr; ratel_dry_run on; try_files /index.html =404; }
        location /empty { ratel zone=api policy=once key=\$arg_k on_missing=allow; try_files /index.html =404; }
        location /kept { ratel zone=api policy=kept key=global; try_files /index.html =404; }
        location /flood { ratel zone=small policy=flood key=\$request_id; ratel_headers off; try_files /index.html =404; }
        location /src/query { ratel zone=api policy=src key=query:phone|phone:CN exempt=13800000000; proxy_pass http://127.0.0.1:$bport; }
        location /src/form { ratel zone=api policy=src key=form:phone|phone:CN; proxy_pass http://127.0.0.1:$bport; }
        location /src/json { ratel zone=api policy=src key=json:phone|phone:CN; proxy_pass http://127.0.0.1:$bport; }
        location /src/pair { ratel zone=api policy=src key=header:X-User,cookie:sid; proxy_pass http://127.0.0.1:$bport; }
        location /src/range {
            ratel zone=api policy=src key=query:phone|phone:CN;
            ratel zone=api policy=range key=query:phone|phone:CN|range:2;
            proxy_pass http://127.0.0.1:$bport;
        }
        location /src/ip { ratel zone=api policy=src key=ip on_missing=reject; proxy_pass http://127.0.0.1:$bport; }
    }
CONF
}

# The application behind /src/ (app_backend.py) answers 200 "got N", N
# the bytes of the body it received (nginx read the body for form: and
# json:, and still sends it).

# --- two workers, one zone: exactly 20 of 25 new connections admitted.
check_two_workers() {
    local codes="" first429=""
    for i in $(seq 25); do
        get /ping
        codes="$codes$code "
        [ "$code" = 429 ] && [ -z "$first429" ] && cp "$tmp/h" "$tmp/h429" && first429=$i
    done
    same two_workers_codes "$codes" "$(printf '200 %.0s' $(seq 20))$(printf '429 %.0s' $(seq 5))"
    same two_workers_both_served \
        "$(awk 'index($2, "/ping") == 1 { print $1 }' "$tmp/main/logs/access.log" | sort -u | wc -l)" 2
    cp "$tmp/h429" "$tmp/h"
    same refusal_retry_after "$(header Retry-After)" 60
    same refusal_ratelimit "$(header RateLimit)" '"ping-0";r=0;t=60'
    same refusal_logged "$(grep -c "ratel: refused by policy \"ping\" rule \"20/1m\" in zone \"api\", retry after [0-9]*s" "$tmp/main/logs/error.log")" 5
}

# --- the SMS policy: 1 a minute and 10 a day, the day at +08:00.
check_sms() {
    at "2026-03-01 15:00:00" # 23:00 at +08:00
    get "/sms?phone=13800138000"
    same sms_first "$code $(header RateLimit)" '200 "sms-0";r=0;t=60'
    get "/sms?phone=13800138000"
    same sms_same_minute "$code $(header Retry-After)" "429 60"
    local codes=""
    for m in 1 2 3 4 5 6 7 8 9; do
        at "2026-03-01 15:0$m:00"
        get "/sms?phone=13800138000"
        codes="$codes$code "
    done
    same sms_ten_a_day "$codes" "200 200 200 200 200 200 200 200 200 "
    at "2026-03-01 15:10:00"
    get "/sms?phone=13800138000"
    same sms_eleventh "$code $(header Retry-After) $(header RateLimit)" '429 3000 "sms-1";r=0;t=3000'
    at "2026-03-01 15:59:59"
    get "/sms?phone=13800138000"
    same sms_before_midnight "$code $(header Retry-After)" "429 1"
    get "/sms?phone=13900139000"
    same sms_other_phone "$code" 200
    at "2026-03-01 16:00:00" # local midnight
    get "/sms?phone=13800138000"
    same sms_local_midnight "$code $(header RateLimit-Policy)" '200 "sms-0";q=1;w=60, "sms-1";q=10;w=86400'
    at "2026-03-01 12:00:00"
}

# --- several lines: one all-or-nothing group; zones one after the other.
check_groups() {
    get "/pair?u=alice"
    same group_first "$code $(header RateLimit)" '200 "pair_user-0";r=0;t=60, "pair_all-0";r=9;t=60'
    get "/pair?u=alice"
    # Refused: pair_all is reported as it stands, not charged.
    same group_refused "$code $(header RateLimit)" '429 "pair_user-0";r=0;t=60, "pair_all-0";r=9;t=60'
    # alice's refusal charged pair_all nothing: bob sees 8 left, not 7.
    get "/pair?u=bob"
    same group_charged_none "$code $(header RateLimit)" '200 "pair_user-0";r=0;t=60, "pair_all-0";r=8;t=60'
    get "/zones?u=x&v=y"
    same zones_first "$code" 200
    get "/zones?u=x&v=y"
    # zone_a's charge was given back: its line says so.
    same zones_refused_by_second "$code $(header RateLimit)" '429 "zone_a-0";r=4;t=60, "zone_b-0";r=0;t=60'
    # The second zone refused: the first one's charge was given back.
    get "/zones?u=x&v=z"
    same zones_given_back "$code $(header RateLimit)" '200 "zone_a-0";r=3;t=60, "zone_b-0";r=0;t=60'
}

# --- cost from a variable, ratel_status, inheritance as limit_req's.
check_cost_status_inherit() {
    get "/cost?c=3"
    same cost_variable "$code $(header RateLimit)" '200 "costly-0";r=2;t=60'
    get "/cost?c=3"
    same ratel_status_code "$code $(header Retry-After)" "503 60"
    get "/cost?c=many"
    same cost_not_a_number "$code $(header X-Ratel-Reason)" "400 bad-cost"
    # shellcheck disable=SC2016 # nginx's variable, as the log line names it
    same cost_not_a_number_logged "$(grep -c 'ratel: bad-cost: cost=$arg_c of the line in .*: cost must be an integer from 1 to 1000000000, not "many"' "$tmp/main/logs/error.log")" 1
    get /outer/inherits
    same inherits_outer "$code $(header RateLimit)" '200 "outer-0";r=0;t=60'
    get /outer/inherits
    same inherits_outer_limit "$code" 429
    # Lines of its own replace the outer ones: outer's refusal is not here.
    get /outer/own
    same own_lines_replace "$code $(header RateLimit)" '200 "inner-0";r=2;t=60'
}

# --- a cost variable no rule can ever admit (above 5/1m's 5), or no
# whole number: refused 400 bad-cost (never admitted: 429 would be
# retried for ever), charged nothing, its log lines through the budget.
check_bad_cost() {
    local log=$tmp/main/logs/error.log before codes="" n
    at "2026-03-01 12:00:11" # a new window of the log budget (10 s)
    before=$(grep -c 'ratel: bad-cost' "$log")
    get "/capped?n=6"
    same bad_cost_above_limit "$code $(header X-Ratel-Reason) $(header Retry-After)" "400 bad-cost "
    # shellcheck disable=SC2016 # nginx's variable, as the log line names it
    contains bad_cost_above_limit_logged "$(grep 'ratel: bad-cost' "$log" | tail -1)" \
        'cost=$arg_n of the line in '"$tmp/main/nginx.conf"':'
    contains bad_cost_above_limit_why "$(grep 'ratel: bad-cost' "$log" | tail -1)" \
        'cost 6 is more than rule 1 ("5/1m") can ever admit (5) (not_logged=0)'
    for n in 0 -1 abc 1.5 99999999999999999999 1000000001 ""; do
        get "/capped?n=$n"
        codes="$codes$code $(header X-Ratel-Reason) $(header RateLimit),"
    done
    same bad_cost_each "$codes" "$(printf '400 bad-cost ,%.0s' $(seq 7))"
    # 200 more, on one connection: at most one line per worker in 10 s.
    # shellcheck disable=SC2046 # one URL per word
    n=$(curl -s -o /dev/null -w '%{http_code}\n' $(printf "http://127.0.0.1:$port/capped?n=6 %.0s" $(seq 200)) | grep -c '^400$')
    same bad_cost_200_refused "$n" 200
    n=$(($(grep -c 'ratel: bad-cost' "$log") - before))
    [ "$n" -ge 1 ] && [ "$n" -le 2 ] && ok bad_cost_log_budget || fail bad_cost_log_budget "$n lines for 208 requests"
    get "/capped?n=5"
    same bad_cost_charged_nothing "$code $(header RateLimit)" '200 "capped-0";r=0;t=60'
    same bad_cost_metric "$(metric 'ratel_decisions_total{zone="api",policy="capped",outcome="invalid"}')" 208
}

# --- a key value of 1,024 bytes is taken whole, one more refused, by
# key=\$var and by a key source alike: the limit counts the value, not
# "POLICY:" (40 + 1 bytes here).
check_key_length() {
    local k1024 k1025 loc
    k1024=$(printf 'k%.0s' $(seq 1024))
    k1025=${k1024}k
    for loc in long long-source; do
        get "/$loc?k=$k1025"
        same "${loc}_key_1025_refused" "$code $(header X-Ratel-Reason)" "400 bad-key"
    done
    get "/long?k=$k1024"
    same key_1024_admitted "$code" 200
    get "/long?k=$k1024"
    same key_1024_counted "$code" 429
    # The source builds the very key the variable did: counted already.
    get "/long-source?k=$k1024"
    same key_source_1024_same_key "$code" 429
}

# --- dry run: refusals pass, said so, charge nothing.
check_dry_run() {
    get /dry
    same dry_first "$code" 200
    get /dry
    same dry_refusal_passes "$code $(header Retry-After)" "200 "
    same dry_refusal_fields "$(header RateLimit)" '"dry-0";r=0;t=60'
    get /dry
    same dry_logged "$(grep -c 'ratel: dry run, would refuse by policy "dry"' "$tmp/main/logs/error.log")" 2
}

# --- an empty key is not counted.
check_empty_key() {
    local codes=""
    for _ in 1 2 3; do get /empty; codes="$codes$code "; done
    same empty_key_not_counted "$codes$(header RateLimit)" "200 200 200 "
    get "/empty?k=a"
    codes=$code
    get "/empty?k=a"
    same key_counted "$codes $code" "200 429"
}

# --- the variables, as the log format wrote them.
check_variables() {
    local log=$tmp/main/logs/access.log
    same log_sms_refused "$(awk 'index($2, "/sms") == 1 { print $3, $4, $5, $6 }' "$log" | sed -n 2p)" "429 REJECTED 0 60"
    same log_sms_passed "$(awk 'index($2, "/sms") == 1 { print $3, $4, $5, $6 }' "$log" | sed -n 1p)" "200 PASSED 0 0"
    same log_dry "$(awk 'index($2, "/dry") == 1 { print $3, $4, $5, $6 }' "$log" | sed -n 2p)" "200 REJECTED_DRY_RUN 0 60"
    same log_empty_key "$(awk 'index($2, "/empty") == 1 { print $3, $4, $5, $6 }' "$log" | sed -n 1p)" "200 - - -"
    same log_bad_cost "$(awk 'index($2, "/cost?c=many") == 1 { print $3, $4 }' "$log")" "400 INVALID"
    same log_group "$(awk 'index($2, "/pair") == 1 { print $3, $4, $5 }' "$log" | sed -n 1p)" "200 PASSED 0"
}

# --- ratel_metrics: counts of every worker, from shared memory.
check_metrics() {
    same metrics_allowed "$(metric 'ratel_decisions_total{zone="api",policy="ping",outcome="allowed"}')" 20
    same metrics_denied "$(metric 'ratel_decisions_total{zone="api",policy="ping",outcome="denied"}')" 5
    same metrics_shadow "$(metric 'ratel_decisions_total{zone="api",policy="dry",outcome="shadow_denied"}')" 2
    same metrics_group_denied "$(metric 'ratel_decisions_total{zone="api",policy="pair_user",outcome="denied"}')/$(metric 'ratel_decisions_total{zone="api",policy="pair_all",outcome="denied"}')" 1/0
    same metrics_invalid "$(metric 'ratel_decisions_total{zone="api",policy="costly",outcome="invalid"}')" 1
    same metrics_other_zone "$(metric 'ratel_decisions_total{zone="other",policy="zone_b",outcome="denied"}')" 1
    same metrics_max_bytes "$(metric 'ratel_store_max_bytes{zone="api"}')" 1048576
    local keys
    keys=$(metric 'ratel_store_keys{zone="api"}')
    [ "${keys:-0}" -ge 8 ] && ok metrics_keys || fail metrics_keys "ratel_store_keys $keys"
    curl -s -D "$tmp/h" -o /dev/null "http://127.0.0.1:$port/metrics"
    same metrics_type "$(header Content-Type)" "text/plain; version=0.0.4"
}

# --- idle keys leave the zone at their reset time.
check_expiry() {
    local before after expired
    before=$(metric 'ratel_store_keys{zone="api"}')
    at "2026-03-03 12:00:00" # every key of the checks above is back to full
    for k in 1 2 3 4 5 6; do get "/empty?k=expiry$k"; done
    after=$(metric 'ratel_store_keys{zone="api"}')
    expired=$(metric 'ratel_store_expirations_total{zone="api"}')
    [ "${expired:-0}" -ge 6 ] && [ "$after" -lt "$before" ] && ok idle_keys_expire ||
        fail idle_keys_expire "keys $before -> $after, expirations $expired"
    same expiry_not_eviction "$(metric 'ratel_store_evictions_total{zone="api"}')" 0
}

# refused NAME WANT LINE: `nginx -t` of $tmp/bad/nginx.conf fails, saying
# WANT and naming the file at LINE (the line's number in the file).
refused() {
    local out
    if out=$(ngx -t -p "$tmp/bad" -c "$tmp/bad/nginx.conf" 2>&1); then
        fail "$1" "nginx -t accepted it"
        return
    fi
    contains "$1" "$out" "$2"
    contains "$1_file_line" "$out" "in $tmp/bad/nginx.conf:$3"
}

# line_of TEXT: the number of the first line of $tmp/bad/nginx.conf
# holding TEXT.
line_of() { grep -nF -- "$1" "$tmp/bad/nginx.conf" | head -1 | cut -d: -f1; }

bad_conf() {
    conf "$tmp/bad" 1 <<CONF
    ratel_zone zone=api:1m;
    ratel_policy ping 20/1m;
    $1
    server {
        listen 127.0.0.1:$port;
        location / { $2 }
    }
CONF
}

# --- nginx -t refuses what cannot work, with file:line and the reason.
check_refusals() {
    bad_conf "ratel_policy sms 20/minute;" ""
    refused bad_rule 'ratel_policy "sms": rule "20/minute": unknown unit "minute"' "$(line_of 20/minute)"
    bad_conf "" "ratel zone=nope policy=ping key=\$remote_addr;"
    refused unknown_zone 'ratel: unknown zone "nope": declare it with ratel_zone zone=NAME:SIZE' "$(line_of zone=nope)"
    bad_conf "" "ratel zone=api policy=nope key=\$remote_addr;"
    refused unknown_policy 'ratel: unknown policy "nope": declare it with ratel_policy NAME RULE...' "$(line_of policy=nope)"
    bad_conf "ratel_zone zone=tiny:16k;" ""
    refused zone_too_small 'ratel_zone "tiny" of 16k is too small: give it at least 64k' "$(line_of zone=tiny)"
    bad_conf "" "ratel zone=api policy=ping key=\$remote_addr cost=21;"
    refused cost_too_high 'ratel: cost 21 is more than rule "20/1m" of policy "ping" ever admits' "$(line_of cost=21)"
    bad_conf "" "ratel_status 200;"
    refused bad_status 'value must be between 400 and 599' "$(line_of 'ratel_status 200')"
    # The same line twice would charge each request twice.
    bad_conf "" "ratel zone=api policy=ping key=ip;
        ratel zone=api policy=ping key=ip;"
    refused duplicate_line "ratel: this line repeats the one in $tmp/bad/nginx.conf:$(line_of 'key=ip;') (zone \"api\", policy \"ping\", key \"ip\"): each request would be charged twice" \
        "$(($(line_of 'key=ip;') + 1))"
}

worker_pids() { nginx_workers "$tmp/main"; }
gone() {
    local p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
}

# reload [SIZE]: main's config again (the api zone of SIZE), and waits
# until the workers that ran the old one are gone.
reload() {
    local old
    old=$(worker_pids)
    main_conf "${1:-1m}"
    kill -HUP "$(cat "$tmp/main/nginx.pid")"
    # shellcheck disable=SC2086 # $old: the workers' PIDs, a word each
    [ -n "$old" ] && wait_for 20 gone $old
}

# --- a reload keeps counts; a zone given a new size starts empty.
check_reload() {
    get /kept
    get /kept
    same before_reload "$code $(header RateLimit)" '200 "kept-0";r=1;t=60'
    same workers_before_reload "$(worker_pids | wc -l)" 2
    reload || fail reload "old workers still running"
    get /kept
    same reload_keeps_counts "$code $(header RateLimit)" '200 "kept-0";r=0;t=60'
    get /kept
    same reload_still_limits "$code" 429
    same reload_keeps_metrics "$(metric 'ratel_decisions_total{zone="api",policy="ping",outcome="allowed"}')" 20
    same workers_before_resize "$(worker_pids | wc -l)" 2
    reload 2m || fail reload_resized "old workers still running: $(grep -E "emerg|alert|crit" "$tmp/main/logs/error.log" | tail -3)"
    get /kept
    same resized_zone_starts_empty "$code $(header RateLimit)" '200 "kept-0";r=2;t=60'
    same resized_max_bytes "$(metric 'ratel_store_max_bytes{zone="api"}')" 2097152
}

# --- a million unique keys into a 128k zone: bounded, evictions counted,
# nginx answering. Its own nginx, on the real clock.
check_flood() {
    local n=1000000 fport start=$SECONDS
    local allowed keys bytes evictions
    fport=$(free_port)
    while [ "$fport" = "$port" ]; do fport=$(free_port); done
    conf "$tmp/flood" 2 <<CONF
    ratel_zone zone=small:128k;
    ratel_policy flood 1/1h;
    server {
        listen 127.0.0.1:$fport reuseport;
        access_log off;
        location = /ready { return 204; }
        location = /metrics { ratel_metrics; }
        location /flood { ratel zone=small policy=flood key=\$request_id; ratel_headers off; empty_gif; }
    }
CONF
    start_nginx "$tmp/flood" "$fport" real
    h2load --h1 -n "$n" -c 32 -t 2 "http://127.0.0.1:$fport/flood" >"$tmp/load.log" 2>&1
    echo "# flood: $n unique keys in $((SECONDS - start)) s"
    curl -s "http://127.0.0.1:$fport/metrics" >"$tmp/flood.metrics"
    fm() { awk -v m="$1" 'index($0, m) == 1 { print $NF }' "$tmp/flood.metrics"; }
    allowed=$(fm 'ratel_decisions_total{zone="small",policy="flood",outcome="allowed"}')
    keys=$(fm 'ratel_store_keys{zone="small"}')
    bytes=$(fm 'ratel_store_bytes{zone="small"}')
    evictions=$(fm 'ratel_store_evictions_total{zone="small"}')
    [ "${allowed:-0}" -ge "$n" ] && ok flood_keys_decided ||
        fail flood_keys_decided "$allowed decided: $(grep -E 'requests:|status codes' "$tmp/load.log" | tr '\n' ' ')"
    [ "${bytes:-0}" -gt 0 ] && [ "$bytes" -le 131072 ] && ok flood_within_size || fail flood_within_size "bytes $bytes"
    [ "${keys:-0}" -gt 100 ] && [ $((keys + evictions)) -eq "$allowed" ] && ok flood_evictions_counted ||
        fail flood_evictions_counted "keys $keys evictions $evictions allowed $allowed"
    same flood_still_answers "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$fport/flood")" 200
    same flood_no_crash "$(grep -c 'exited on signal' "$tmp/flood/logs/error.log")" 0
    nginx_stop "$tmp/flood"
}

# --- examples/nginx/sms.conf, as docs/nginx.md prints it (ports
# changed): nginx -t takes it; the limit and the exemption hold (the
# application behind is absent: an admitted request is nginx's 502).
check_example() {
    local dir=$tmp/example eport codes=""
    eport=$(free_port)
    while [ "$eport" = "$port" ]; do eport=$(free_port); done
    sed "s/127.0.0.1:8000/127.0.0.1:$eport/; s/127.0.0.1:8081/127.0.0.1:$(free_port)/" \
        "$root/examples/nginx/sms.conf" >"$tmp/sms.conf"
    echo "    include $tmp/sms.conf;" | conf "$dir" 1
    out=$(ngx -t -p "$dir" -c "$dir/nginx.conf" 2>&1)
    contains example_nginx_t "$out" "test is successful"
    start_nginx "$dir" "$eport"
    for phone in 13900000001 13900000001 13800000000 13800000000; do
        codes="$codes$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$eport/sendCaptcha?phone=$phone") "
    done
    same example_limits "$codes" "502 429 502 502 "
    same example_log_level "$(grep -c '\[warn\].*ratel: refused by policy "sms"' "$dir/logs/error.log")" 1
    # The attacks of docs/nginx.md's table: none admitted (502).
    local u=http://127.0.0.1:$eport/sendCaptcha
    # A raw '#' (curl would cut it off the URL): sent as it is.
    local raw_codes="" admitted=0
    for i in 1 2 3 4 5; do
        raw_codes+="$(python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
s.sendall(b"GET /sendCaptcha?phone=13900000001#%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % sys.argv[2].encode())
print(s.recv(64).split(b" ")[1].decode())' "$eport" "$i") "
    done
    for c in $raw_codes; do case $c in 2*|5*) admitted=$((admitted + 1)) ;; esac; done
    echo "attack module example_fragment_raw admitted=$admitted ($raw_codes)" >&2
    same attack_example_fragment_raw "$admitted" 0
    attack example_fragment_encoded "$u?phone=13900000001%231"
    attack example_empty_first "$u?phone=&phone=13900000001"
    attack example_percent_encoded "$u?phone=1390000000%31"
    attack example_form_body -d phone=13900000001 "$u"
    attack example_spaced "$u?phone=%2B86%20139%200000%200001"
    attack example_missing "$u"
    nginx_stop "$dir"
}

# --- key sources (docs/keys.md): after a number is limited, no spelling
# of it is admitted; each is refused (400 bad-key or missing-key) or
# counted as the number (429). Prints each attack's count of admitted
# answers (the closing note's table).
attack() { # name, then curl arguments
    local name=$1 admitted=0; shift
    for _ in 1 2 3 4 5; do
        c=$(curl -s -o /dev/null -w '%{http_code}' --path-as-is "$@")
        case $c in 2*|5*) admitted=$((admitted + 1)) ;; esac
    done
    echo "attack module $name admitted=$admitted" >&2
    same "attack_$name" "$admitted" 0
}

check_key_sources() {
    local u=http://127.0.0.1:$port/src/query before
    before=$(grep -c 'ratel: bad-key' "$tmp/main/logs/error.log")
    get "/src/query?phone=13900000001"
    same src_first "$code $(cat "$tmp/b")" "200 got 0"
    get "/src/query?phone=13900000001"
    same src_limited "$code" 429
    attack fragment_encoded "$u?phone=13900000001%231"
    attack empty_first "$u?phone=&phone=13900000001"
    attack empty_last "$u?phone=13900000001&phone="
    attack random_first "$u?phone=RANDOM&phone=13900000001"
    attack percent_encoded "$u?phone=1390000000%31"
    attack case_varied "$u?Phone=13900000001"
    attack array_name "$u?phone[]=13900000001"
    attack e164_spaced "$u?phone=%2B86%20139%200000%200001"
    attack plus_as_space "$u?phone=+86+139+0000+0001"
    attack international_00 "$u?phone=008613900000001"
    attack dashes "$u?phone=139-0000-0001"
    attack trunk_zero "$u?phone=%2B86013900000001"
    attack double_encoded "$u?phone=1390000000%2531"
    attack form_body -d phone=13900000001 "$u"
    attack missing "$u"
    attack invalid_number "$u?phone=12345"
    get "/src/query?phone=13900000001%231"
    same src_bad_key_reason "$code $(header X-Ratel-Reason)" "400 bad-key"
    get "/src/query"
    same src_missing_reason "$code $(header X-Ratel-Reason)" "400 missing-key"
    get "/src/query?phone=13800000000"
    get "/src/query?phone=%2B86%20138%200000%200000"
    same src_exempt_any_spelling "$code" 200
    # The form body: read for the key and still sent to the application.
    curl -s -o "$tmp/b" -w '%{http_code}' -d phone=13900000002 "http://127.0.0.1:$port/src/form" >"$tmp/c"
    same src_form_first "$(cat "$tmp/c") $(cat "$tmp/b")" "200 got 17"
    same src_form_limited "$(curl -s -o /dev/null -w '%{http_code}' -d 'phone=%2B86139%2000000002' "http://127.0.0.1:$port/src/form")" 429
    same src_form_and_query "$(curl -s -o /dev/null -w '%{http_code}' -d phone=13900000003 "http://127.0.0.1:$port/src/form?phone=1")" 400
    curl -s -o "$tmp/b" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"phone":"13900000004"}' "http://127.0.0.1:$port/src/json" >"$tmp/c"
    same src_json_first "$(cat "$tmp/c") $(cat "$tmp/b")" "200 got 23"
    same src_json_limited "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"phone":"+86 139 0000 0004"}' "http://127.0.0.1:$port/src/json")" 429
    same src_json_not_object "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '[1]' "http://127.0.0.1:$port/src/json")" 400
    same src_pair "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-User: a' -b 'sid=1' "http://127.0.0.1:$port/src/pair")" 200
    same src_pair_limited "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-User: a' -b 'sid=1' "http://127.0.0.1:$port/src/pair")" 429
    same src_header_twice "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-User: a' -H 'X-User: b' -b 'sid=1' "http://127.0.0.1:$port/src/pair")" 400
    same src_ip "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/src/ip")" 200
    # A walk across a range: 3 numbers of +86135000000xx, then refused.
    local codes=""
    for n in 10 11 12 13 14; do
        codes="$codes$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/src/range?phone=135000000$n") "
    done
    same src_range_walk "$codes" "200 200 200 429 429 "
    same src_other_range "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/src/range?phone=13500000110")" 200
    # Dozens of bad keys, one line per worker (2) in 10 s.
    same src_log_budget "$(grep -c 'ratel: bad-key' "$tmp/main/logs/error.log" | awk -v b="$before" '{ print ($1 - b >= 1 && $1 - b <= 2) }')" 1
    contains src_log_names_line "$(grep 'ratel: bad-key' "$tmp/main/logs/error.log")" "key=query:phone|phone:CN"
}

# --- valgrind: one process (master_process off), a short run.
valgrind_run() {
    local dir=$tmp/vg vglog=$tmp/vg/valgrind.log
    conf "$dir" 1 "master_process off;" <<CONF
    ratel_zone zone=api:1m;
    ratel_policy sms 1/60s 10/1d:fixed,tz=+08:00;
    ratel_policy pair_user 1/1m;
    ratel_policy pair_all 10/1m;
    server {
        listen 127.0.0.1:$port;
        root $dir/html;
        location = /ready { }
        location = /metrics { ratel_metrics; }
        location /sms { ratel zone=api policy=sms key=\$arg_phone; try_files /index.html =404; }
        location /src { ratel zone=api policy=sms key=query:phone|phone:CN,ip exempt=13800000000; try_files /index.html =404; }
        location /form { ratel zone=api policy=sms key=form:phone|phone:CN; proxy_pass http://127.0.0.1:$bport; }
        location /json { ratel zone=api policy=sms key=json:phone; proxy_pass http://127.0.0.1:$bport; }
        location /pair {
            ratel zone=api policy=pair_user key=\$arg_u;
            ratel zone=api policy=pair_all key=global cost=\$arg_cost;
            ratel_dry_run off;
            try_files /index.html =404;
        }
    }
CONF
    nginx_start "$dir" "http://127.0.0.1:$port/ready" "${nginx_valgrind[@]}" --log-file="$vglog"
    get "/sms?phone=1"
    get "/sms?phone=1"
    same valgrind_sms "$code" 429
    get "/src?phone=%2B86%20139%200000%200001"
    get "/src?phone=13900000001"
    same valgrind_src "$code" 429
    get "/src?phone=&phone=1"
    same valgrind_src_refused "$code" 400
    same valgrind_form "$(curl -s -o /dev/null -w '%{http_code}' -d phone=13900000002 "http://127.0.0.1:$port/form")" 200
    same valgrind_json "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"phone":"x"}' "http://127.0.0.1:$port/json")" 200
    get "/pair?u=a&cost=1"
    get "/pair?u=a&cost=1"
    get "/pair?u=b&cost=x"
    same valgrind_bad_cost "$code" 400
    get "/metrics"
    same valgrind_metrics "$code" 200
    nginx_stop "$dir"
    nginx_valgrind_clean "$vglog"
}

app_start
nginx_valgrind_only valgrind_run
main_conf
start_nginx "$tmp/main" || { finish; exit; }
check_two_workers
check_sms
check_groups
check_cost_status_inherit
check_bad_cost
check_key_length
check_dry_run
check_empty_key
check_variables
check_metrics
check_expiry
check_refusals
check_example
check_key_sources
check_reload
check_flood
nginx_stop "$tmp/main"
nginx_sanitizers_quiet
finish
