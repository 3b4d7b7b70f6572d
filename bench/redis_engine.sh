#!/usr/bin/env bash
# bench/redis_engine.sh - the Redis store's engine, in ONE run, rounds
# interleaved, medians, ratios taken within the run:
#
#   1. one calling thread, one call per decision, no caller batching
#      (build/bench_redis_async): ratel_async_acquire() on one event_base
#      with WINDOW decisions in flight, and ratel_store_acquire() in a loop,
#      with the module (mode=module) and the Functions library
#      (mode=function), against rate-limiter-flexible's Redis limiter
#      (../shared/peers/run-peers.sh rlf) on the SAME redis-server, the
#      same 1,000 keys round robin, the same never-denying rule;
#   2. rateld (one worker thread) on the Redis store against rateld on the
#      embedded store: wrk -t1 -c50, the same policy and URL;
#   3. rediss:// against redis://: the asynchronous bench against a
#      TLS-only redis-server and a plain one, alike but for TLS;
#   4. wait_replicas=1 against none: the same bench against a primary
#      with one replica, each write's answer waiting for its WAIT or not.
#
#   BUILD=build bench/redis_engine.sh
#   ENGINE_ROUNDS=5 ENGINE_SECONDS=3 ENGINE_WINDOW=256 WRK_SECONDS=5 PEERS=1
#
# Prints "ratel|peer<TAB>NAME<TAB>VALUE<TAB>UNIT" lines (medians), each
# round's figures as comments, then a summary with the ratios and targets.
# Never fails on a figure; exit 1 only when it cannot measure.
. "$(dirname "$0")/http_lib.sh"
rounds=${ENGINE_ROUNDS:-5}
secs=${ENGINE_SECONDS:-3}
window=${ENGINE_WINDOW:-256}
wrk_secs=${WRK_SECONDS:-5}
results=$tmp/results
: >"$results"

need redis-server redis-cli wrk curl python3
for f in bench_redis_async rateld ratel.so; do
    [ -e "$build/$f" ] || die "$build/$f is missing (make bench builds it)"
done

# redis_up PORT ARGS...: a private redis-server with the module, stopped
# on exit; waits until it answers (TLS: ARGS carry --tls-port).
redis_up() {
    local port=$1
    shift
    redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
        --loadmodule "$build/ratel.so" --daemonize no "$@" \
        >"$tmp/redis-$port.log" 2>&1 </dev/null &
    pids+=($!)
    for _ in $(seq 100); do
        redis-cli "${cli_tls[@]}" -p "$port" PING 2>/dev/null | grep -q PONG && return 0
        sleep 0.1
    done
    tail -5 "$tmp/redis-$port.log" >&2
    die "redis-server on $port did not start"
}

certs=$tmp/certs
sh "$top/tests/integration/tls_certs.sh" "$certs" || die "tls_certs.sh failed"
plain=$(free_port)
cli_tls=()
redis_up "$plain" --port "$plain"
tls=$(free_port)
cli_tls=(--tls --cacert "$certs/ca.crt")
redis_up "$tls" --port 0 --tls-port "$tls" --tls-cert-file "$certs/server.crt" \
    --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.crt" \
    --tls-auth-clients no
cli_tls=()
# A primary with one replica, for wait_replicas (4.).
primary=$(free_port)
redis_up "$primary" --port "$primary" --repl-diskless-sync-delay 0
replica=$(free_port)
redis_up "$replica" --port "$replica" --replicaof 127.0.0.1 "$primary"
for _ in $(seq 100); do
    redis-cli -p "$primary" INFO replication | grep -q 'slave0:.*state=online' && break
    sleep 0.1
done

url_plain="redis://127.0.0.1:$plain"
url_repl="redis://127.0.0.1:$primary"
url_wait="redis://127.0.0.1:$primary?wait_replicas=1"
url_tls="rediss://127.0.0.1:$tls?tls_ca_file=$certs/ca.crt"
q() { case $1 in *\?*) echo "$1&mode=$2" ;; *) echo "$1?mode=$2" ;; esac; }

# rateld, one worker thread, on each store; the same policy. Started in
# this shell (not in a command substitution, which would wait for its
# output to close); the port is left in $rd_port.
rateld_up() { # NAME STORE_YAML
    rd_port=$(free_port)
    printf 'listen: 127.0.0.1:%s\nthreads: 1\n%spolicies:\n  allow:\n    rules: [1000000000/1m]\n    key: ip\n' \
        "$rd_port" "$2" >"$tmp/$1.yaml"
    "$build/rateld" --config "$tmp/$1.yaml" 2>"$tmp/$1.log" &
    pids+=($!)
    wait_http "http://127.0.0.1:$rd_port/healthz" || { cat "$tmp/$1.log" >&2; die "rateld ($1) did not start"; }
}
rateld_up memory ""
rd_memory=$rd_port
rateld_up redis "store:
  type: redis
  url: $url_plain?mode=module
  on_failure: closed
"
rd_redis=$rd_port
for p in "$rd_memory" "$rd_redis"; do
    src=$(curl -s "http://127.0.0.1:$p/v1/acquire?policy=allow&key=1.2.3.4" | grep -o '"source":"[a-z]*"')
    echo "# rateld on 127.0.0.1:$p answers with $src"
done

machine_header
echo "# $(redis-server --version | cut -d' ' -f1-3); $rounds rounds; bench_redis_async ${secs}s a case, window $window; wrk -t1 -c50 -d${wrk_secs}s"

# one NAME COMMAND...: runs a case, records its figure.
one() {
    local name=$1 v
    shift
    v=$("$@") || die "$name: $* failed"
    echo "$name $v" >>"$results"
}
async() { one "$1" "$build/bench_redis_async" "$2" async "$secs" "$window"; }
sync() { one "$1" "$build/bench_redis_async" "$2" sync "$secs"; }
wrk_rps() { # NAME PORT
    local out
    out=$(wrk -t1 -c50 -d"${wrk_secs}s" "http://127.0.0.1:$2/v1/acquire?policy=allow&key=1.2.3.4" 2>&1)
    grep -q 'Non-2xx' <<<"$out" && die "$1: $(grep 'Non-2xx' <<<"$out")"
    echo "$1 $(awk '/Requests\/sec/ { print $2 }' <<<"$out")" >>"$results"
}

for r in $(seq "$rounds"); do
    echo "# round $r/$rounds: $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
    async async_module "$(q "$url_plain" module)"
    async async_function "$(q "$url_plain" function)"
    sync sync_module "$(q "$url_plain" module)"
    sync sync_function "$(q "$url_plain" function)"
    if [ "${PEERS:-1}" != 0 ] && [ -x "$peers_dir/run-peers.sh" ]; then
        "$peers_dir/run-peers.sh" rlf "$plain" | awk -F'\t' '
            $2 ~ /redis consume/ { if ($3 > best) best = $3; print "peer:" ($2 ~ /conc 50\)/ ? "rlf_redis_c50" : "rlf_redis_c200"), $3 }
            END { if (best) print "peer:rlf_redis_best", best }' >>"$results"
    fi
    async tls_async_module "$(q "$url_tls" module)"
    async tls_async_function "$(q "$url_tls" function)"
    async plain_async_module "$(q "$url_plain" module)"
    async plain_async_function "$(q "$url_plain" function)"
    async repl_async_module "$(q "$url_repl" module)"
    async wait_async_module "$(q "$url_wait" module)"
    sync repl_sync_module "$(q "$url_repl" module)"
    sync wait_sync_module "$(q "$url_wait" module)"
    wrk_rps rateld_memory "$rd_memory"
    wrk_rps rateld_redis "$rd_redis"
    redis-cli -p "$plain" FLUSHALL >/dev/null
    redis-cli -p "$primary" FLUSHALL >/dev/null
done

# The server's own time per call on the plain server over the whole run
# (INFO commandstats): what one Redis thread can do at most, whoever asks.
redis-cli -p "$plain" INFO commandstats | tr -d '\r' | awk -F'[:,=]' '
    $1 ~ /^cmdstat_(ratel.acquire|fcall|evalsha)$/ {
        for (i = 2; i < NF; i++) if ($i == "usec_per_call") print "server_us:" substr($1, 9), $(i + 1) }' >>"$results"

while read -r name; do
    echo "# $name per round: $(awk -v k="$name" '$1 == k { printf "%s ", $2 }' "$results")"
    v=$(awk -v k="$name" '$1 == k { print $2 }' "$results" | median)
    case $name in
    peer:*) printf 'peer\t%s\t%s\tops/s\n' "${name#peer:}" "$v" ;;
    server_us:*) printf 'ratel\tredis_server_us_per_call_%s\t%s\tus\n' "${name#server_us:}" "$v" ;;
    rateld_*) printf 'ratel\t%s\t%s\treq/s\n' "$name" "$v" ;;
    *) printf 'ratel\tredis_%s\t%s\tdecisions/s\n' "$name" "$v" ;;
    esac
done < <(awk '!seen[$1]++ { print $1 }' "$results") | tee "$tmp/figures"

echo
echo "## summary: the Redis engine (medians of $rounds interleaved rounds; ratios within this run)"
awk -F'\t' '
    { v[$2] = $3 }
    function ratio(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.2f", v[a] / v[b]) : "n/a" }
    function row(what, a, b, target) {
        r = ratio(a, b)
        met = target == "-" ? "-" : (r == "n/a" ? "n/a" : (r + 0 >= target + 0 ? "yes" : "**no**"))
        printf "| %s | %s / %s | %s | %s | %s |\n", what, v[a], v[b], r, target == "-" ? "-" : ">= " target, met
    }
    END {
        printf "| figure | this run | ratio | wanted | met? |\n|---|---|---|---|---|\n"
        row("async, 1 thread, module / rate-limiter-flexible Redis (best of 50 and 200 concurrent)", "redis_async_module", "rlf_redis_best", 3)
        row("async, 1 thread, Functions library / rate-limiter-flexible Redis", "redis_async_function", "rlf_redis_best", 3)
        row("sync one call, 1 thread, module / rate-limiter-flexible Redis", "redis_sync_module", "rlf_redis_best", "-")
        row("sync one call, 1 thread, Functions library / rate-limiter-flexible Redis", "redis_sync_function", "rlf_redis_best", "-")
        row("rateld req/s: Redis store (module) / embedded store", "rateld_redis", "rateld_memory", 0.8)
        row("async, module: rediss:// / redis://", "redis_tls_async_module", "redis_plain_async_module", 0.8)
        row("async, Functions library: rediss:// / redis://", "redis_tls_async_function", "redis_plain_async_function", 0.8)
        row("async, module, primary with a replica: wait_replicas=1 / none", "redis_wait_async_module", "redis_repl_async_module", "-")
        row("sync one call, module, primary with a replica: wait_replicas=1 / none", "redis_wait_sync_module", "redis_repl_sync_module", "-")
        printf "\nrate-limiter-flexible Redis: %s/s at 50 concurrent, %s/s at 200 (medians)\n", v["rlf_redis_c50"], v["rlf_redis_c200"]
        printf "server time per call (INFO commandstats, whole run): RATEL.ACQUIRE %s us, FCALL ratel_acquire %s us, EVALSHA (rate-limiter-flexible) %s us\n", v["redis_server_us_per_call_ratel.acquire"], v["redis_server_us_per_call_fcall"], v["redis_server_us_per_call_evalsha"]
    }' "$tmp/figures"
