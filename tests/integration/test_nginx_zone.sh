#!/usr/bin/env bash
# The shared-memory zone when it is full (issue 33, item 2): keys of every
# size flooded into the smallest zone (64k) never get a 500. wrk, with
# zone_flood.lua, sends keys asked once and twice, 0 to 699 bytes long,
# under one sliding rule, three sliding rules (their logs growing), gcra +
# fixed + approx, and two lines as one group, for ZONE_FLOOD_SECONDS (10)
# on two workers; nginx's access log counts the statuses: no 500, the
# zone within its size, its evictions counted, nobody refused for room.
# Then a group the zone cannot hold at all (16 lines whose logs grow past
# the zone's 64k together): refused with ratel_status and Retry-After
# (the zone's refusal, charged nothing), the budgeted line in the log,
# never a 500; the zone then serves other keys as before.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

nginx_require "$nginx_so"
command -v wrk >/dev/null || { echo "FAIL missing: wrk (scripts/setup.sh --test)"; echo "0 passed, 1 failed"; exit 1; }

secs=${ZONE_FLOOD_SECONDS:-10}
port=$(free_port)
dir=$tmp/zone
# Sixteen lines of the policy `big` (eight sliding rules), each on its
# own key: the group of /sixteen.
# shellcheck disable=SC2016 # nginx's variable, for its config
sixteen=$(for l in a b c d e f g h i j k l m n o p; do
    printf '            ratel zone=z policy=big key=%s$arg_k;\n' "$l"
done)
nginx_conf "$dir" 2 <<CONF
    log_format statuses '\$status';
    ratel_zone zone=z:64k;
    ratel_policy one 1/1h;
    ratel_policy logs 100/1m 1000/1h 10000/1d;
    ratel_policy mixed 10/1s:gcra,burst=20 1000/1d:fixed 50/1m:approx;
    ratel_policy grow 20/1m 1000/1h 1000/1d;
    ratel_policy big 1000/1m 1000/2m 1000/3m 1000/4m 1000/5m 1000/6m 1000/7m 1000/8m;
    server {
        listen 127.0.0.1:$port reuseport;
        access_log $dir/logs/statuses.log statuses buffer=256k;
        ratel_headers off;
        location = /ready { return 204; }
        location = /metrics { ratel_metrics; }
        location /one { ratel zone=z policy=one key=\$arg_k; empty_gif; }
        location /logs { ratel zone=z policy=logs key=\$arg_k; empty_gif; }
        location /mixed { ratel zone=z policy=mixed key=\$arg_k; empty_gif; }
        location /group {
            ratel zone=z policy=one key=g\$arg_k;
            ratel zone=z policy=logs key=\$arg_k;
            empty_gif;
        }
        location /grow { ratel zone=z policy=grow key=\$arg_k; empty_gif; }
        location /sixteen {
            ratel_headers on;
$sixteen
            empty_gif;
        }
    }
CONF
nginx_start "$dir" "http://127.0.0.1:$port/ready" || { finish; exit 1; }

metrics() { curl -s "http://127.0.0.1:$port/metrics" >"$tmp/metrics"; }
metric() { awk -v m="$1" 'index($0, m) == 1 { print $NF }' "$tmp/metrics" | head -1; }
# statuses: the access log's count of each status, "200:N 429:N ...".
statuses() {
    sort "$dir/logs/statuses.log" | uniq -c | awk '{ printf "%s%s:%s", s, $2, $1; s = " " }'
}

# --- the flood: no 500, the zone within its size, evictions counted.
metrics
empty_bytes=$(metric 'ratel_store_bytes{zone="z"}')
wrk -t2 -c32 -d"${secs}s" -s "$root/tests/integration/zone_flood.lua" \
    "http://127.0.0.1:$port" >"$tmp/wrk.log" 2>&1
metrics
kill -USR1 "$(cat "$dir/nginx.pid")" # reopen: the buffered lines written
wait_for 10 test -s "$dir/logs/statuses.log"
sleep 0.5
requests=$(wc -l <"$dir/logs/statuses.log")
errors=$(grep -vcE '^(200|204|429)$' "$dir/logs/statuses.log")
evictions=$(metric 'ratel_store_evictions_total{zone="z"}')
expirations=$(metric 'ratel_store_expirations_total{zone="z"}')
keys=$(metric 'ratel_store_keys{zone="z"}')
bytes=$(metric 'ratel_store_bytes{zone="z"}')
echo "# flood: $requests requests in ${secs} s ($(statuses)), 500s: $(grep -c '^500$' "$dir/logs/statuses.log")," \
    "evictions $evictions, expirations $expirations, keys $keys, bytes $bytes of 65536 (empty: $empty_bytes)"
[ "$requests" -ge 20000 ] && ok flood_requests || fail flood_requests "$requests requests: $(tail -3 "$tmp/wrk.log" | tr '\n' ' ')"
same flood_no_500 "$(grep -c '^500$' "$dir/logs/statuses.log")" 0
same flood_only_200_429 "$errors" 0
same flood_no_error_outcome "$(grep -c 'outcome="error"} [1-9]' "$tmp/metrics")" 0
same flood_no_refusal_for_room "$(grep -c 'too small\|no room' "$dir/logs/error.log")" 0
[ "${bytes:-0}" -gt 0 ] && [ "$bytes" -le 65536 ] && ok flood_within_size || fail flood_within_size "bytes $bytes"
# The zone was filled and emptied many times over (it holds 160 chunks).
[ "${evictions:-0}" -ge 2000 ] && ok flood_cycled_zone || fail flood_cycled_zone "evictions $evictions"
same flood_no_crash "$(grep -c 'exited on signal' "$dir/logs/error.log")" 0

# --- free space in pieces: a key takes chunks wherever they are (a
# chain) and keeps its count. a1 b1 a2 b2 ... a200 b200 (one chunk
# each) fill the zone in that order; a126..a200 asked again (still
# there: 429) leave b126..b200, one chunk each between them, least
# recently used. Then 20 keys of 600 bytes (3 chunks each; no 3
# contiguous chunks once the older pairs are gone) and a key whose three
# sliding logs grow past its chunk (`grow`, 20/1m first) must take them
# in pieces. (When written, a debug line showed both paths taken.)
urls() { # PATH FROM TO [PREFIX]: curl's arguments for PATH?k=PREFIXi
    for i in $(seq "$2" "$3"); do echo "http://127.0.0.1:$port$1?k=$4$i"; done
}
ask() { # URL...: one status a line, one connection
    local u args=()
    for u in "$@"; do args+=(-o /dev/null "$u"); done
    curl -s -w '%{http_code}\n' "${args[@]}"
}
long=$(printf 'y%.0s' $(seq 600))
mapfile -t pairs < <(for i in $(seq 200); do urls /one "$i" "$i" a; urls /one "$i" "$i" b; done)
ask "${pairs[@]}" >"$tmp/pairs"
same pieces_pairs_admitted "$(sort -u "$tmp/pairs" | tr -d '\n')" 200
mapfile -t kept < <(urls /one 126 200 a)
same pieces_pairs_kept "$(ask "${kept[@]}" | sort -u | tr -d '\n')" 429
mapfile -t longs < <(urls /one 1 20 "$long-")
same pieces_long_admitted "$(ask "${longs[@]}" | sort | uniq -c | tr -s ' \n' ' ')" " 20 200 "
same pieces_long_kept "$(ask "${longs[@]}" | sort | uniq -c | tr -s ' \n' ' ')" " 20 429 "
same pieces_recent_kept "$(ask "${kept[@]:64}" | sort -u | tr -d '\n')" 429
codes=
for i in $(seq 21); do
    codes="$codes$(ask "http://127.0.0.1:$port/grow?k=g") "
    sleep 0.002
done
same pieces_grown_log_counts "$codes" "$(printf '200 %.0s' $(seq 20))429 "
same pieces_no_500 "$(grep -c '" 500 ' "$dir/logs/error.log")" 0

# --- a group the zone cannot hold: each request on one key adds a run
# to each of its 16 lines' 8 sliding logs; once they need more than the
# whole zone, the request is refused (429, Retry-After: 1), never 500,
# and says why. At most 300 requests, 5 past the first refusal. Other
# keys are then admitted: the refused group's are dropped for them.
codes='' refused=0
for i in $(seq 300); do
    code=$(curl -s -D "$tmp/h" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/sixteen?k=same")
    codes="$codes $code"
    [ "$code" = 200 ] || refused=$((refused + 1))
    [ "$refused" -ge 5 ] && break
done
echo "# sixteen lines, one key asked $i times: $(echo "$codes" | tr ' ' '\n' | uniq -c | tr -s ' \n' ' ')"
same sixteen_refused_not_500 "$(echo "$codes" | tr ' ' '\n' | grep -cvE '^(200|429|)$')" 0
same sixteen_refused "$refused" 5
same sixteen_retry_after "$(grep -i '^Retry-After:' "$tmp/h" | tr -d '\r' | cut -d' ' -f2)" 1
grep -q 'ratel: zone "z" is too small for a request of 16 keys needing [0-9]* bytes (it holds [0-9]*): refused' "$dir/logs/error.log" &&
    ok sixteen_logged || fail sixteen_logged "$(grep -m3 'zone "z"' "$dir/logs/error.log" | cut -c1-300)"
same after_refusal_other_keys "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/sixteen?k=other")" 200
same after_refusal_no_crash "$(grep -c 'exited on signal' "$dir/logs/error.log")" 0
nginx_stop "$dir"
nginx_sanitizers_quiet
finish
