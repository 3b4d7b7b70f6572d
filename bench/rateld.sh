#!/usr/bin/env bash
# bench/rateld.sh - rateld under wrk (-t1 -c50), in ONE run with nginx's
# limit_req from ../shared/peers/run-peers.sh nginx, so the ratio is taken
# between figures measured minutes apart on the same machine:
#
#   1. rateld, one worker thread, embedded store: an allowed path
#      (1000000000/1m, never denies) and a denied path (1/1h, exhausted
#      first), with wrk --latency percentiles;
#   2. nginx limit_req, one worker: its allowed and its rejecting path;
#   3. rateld with the Redis store (module loaded) on the allowed path;
#   4. p99 latency at about half of rateld's peak: wrk connections that
#      wait 1 ms between requests, as many as offer half the peak.
#
# Prints "ratel|peer<TAB>NAME<TAB>VALUE<TAB>UNIT" lines, then a summary.
#   BUILD=build bench/rateld.sh         SECONDS_EACH=8 by default
. "$(dirname "$0")/http_lib.sh"
secs=${SECONDS_EACH:-8}

# run_wrk NAME URL [wrk args]: requests/s and latency percentiles
run_wrk() {
    local name=$1 url=$2; shift 2
    local out
    out=$(wrk -t1 -c50 -d"${secs}s" --latency "$@" "$url" 2>&1)
    printf 'ratel\t%s_rps\t%s\treq/s\n' "$name" "$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
    for q in 50 90 99; do
        printf 'ratel\t%s_p%s\t%s\tlatency\n' "$name" "$q" "$(awk -v q="$q%" '$1 == q {print $2}' <<<"$out")"
    done
    if grep -q 'Non-2xx' <<<"$out"; then
        printf '# %s: %s\n' "$name" "$(grep 'Non-2xx' <<<"$out" | sed 's/^ *//')"
    fi
}

machine_header
echo "# wrk -t1 -c50 -d${secs}s; rateld with threads: 1"

port=$(free_port)
cat >"$tmp/mem.yaml" <<EOF
listen: 127.0.0.1:$port
threads: 1
policies:
  allow:
    rules: [1000000000/1m]
    key: ip
  deny:
    rules: [1/1h]
    key: ip
EOF
"$build/rateld" --config "$tmp/mem.yaml" 2>"$tmp/mem.log" &
pids+=($!)
wait_http "http://127.0.0.1:$port/healthz" || { echo "rateld did not start"; cat "$tmp/mem.log"; exit 1; }
curl -s -o /dev/null "http://127.0.0.1:$port/v1/acquire?policy=deny&key=1.2.3.4"
run_wrk rateld_memory_allowed "http://127.0.0.1:$port/v1/acquire?policy=allow&key=1.2.3.4" | tee "$tmp/out"
run_wrk rateld_memory_denied "http://127.0.0.1:$port/v1/acquire?policy=deny&key=1.2.3.4"

# p99 at half the peak: connections that each wait 1 ms after every
# answer (a wrk Lua delay()), as many as offer about half the allowed
# path's peak together; the rate wrk measured is printed next to it.
echo 'function delay() return 1 end' >"$tmp/half.lua"
peak=$(awk -F'\t' '$2 == "rateld_memory_allowed_rps" {printf "%d", $3}' "$tmp/out" 2>/dev/null)
if [ "${peak:-0}" -gt 0 ]; then
    # one connection: 1 ms of delay + ~0.3 ms of round trip per request
    conns=$(( (peak * 13 + 19999) / 20000 ))
    out=$(wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$tmp/half.lua" "http://127.0.0.1:$port/v1/acquire?policy=allow&key=1.2.3.4" 2>&1)
    printf 'ratel\trateld_memory_half_load_rps\t%s\treq/s\n' "$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
    for q in 50 90 99; do
        printf 'ratel\trateld_memory_half_load_p%s\t%s\tlatency\n' "$q" "$(awk -v q="$q%" '$1 == q {print $2}' <<<"$out")"
    done
    echo "# half load: peak $peak req/s; $conns connections, 1 ms between requests each"
fi

if [ -x "$peers_dir/run-peers.sh" ]; then
    PEER_SECONDS=$secs "$peers_dir/run-peers.sh" nginx "$(free_port)"
else
    echo "# nginx peer skipped: $peers_dir/run-peers.sh missing"
fi

# The Redis store: a private redis-server with the module.
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --loadmodule "$build/ratel.so" --daemonize no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
port2=$(free_port)
cat >"$tmp/redis.yaml" <<EOF
listen: 127.0.0.1:$port2
threads: 1
store:
  type: redis
  url: redis://127.0.0.1:$rport
  on_failure: closed
policies:
  allow:
    rules: [1000000000/1m]
    key: ip
EOF
"$build/rateld" --config "$tmp/redis.yaml" 2>"$tmp/redis-rateld.log" &
pids+=($!)
wait_http "http://127.0.0.1:$port2/healthz" || { echo "rateld (redis) did not start"; cat "$tmp/redis-rateld.log"; exit 1; }
run_wrk rateld_redis_allowed "http://127.0.0.1:$port2/v1/acquire?policy=allow&key=1.2.3.4"
src=$(curl -s "http://127.0.0.1:$port2/v1/acquire?policy=allow&key=1.2.3.4" | grep -o '"source":"[a-z]*"')
echo "# redis store answers with $src"
