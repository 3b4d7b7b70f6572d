#!/usr/bin/env bash
# make bench: every ratel benchmark and its peer, in ONE run on this machine,
# so ratios are taken between figures measured side by side. Prints the raw
# "ratel|peer<TAB>name<TAB>value..." lines, then a markdown summary ready for
# docs/BENCHMARKS.md. Never fails on a figure: benchmarks measure, tests judge.
#
#   BUILD=build bench/run.sh            everything
#   PEERS=0 bench/run.sh                skip the peers (no node/npm/redis)
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=${BUILD:-build}
peers_dir=${PEERS_DIR:-$top/../shared/peers}
out=$(mktemp)
trap 'rm -f "$out"; [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null; rm -rf "${redis_dir:-/nonexistent}"' EXIT

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -sr)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)"

"$build/bench_core" | tee -a "$out"

# The machine's own ceiling for two threads: the same single-threaded core
# loop run alone, then as two processes at once (nothing shared). On a VM
# whose two vCPUs share a physical core, no program scales past this.
alone=$("$build/bench_core" 1000000 2>/dev/null | awk -F'\t' '$2 == "core-ns-per-decision-fixed" {print $3}')
"$build/bench_core" 1000000 2>/dev/null >"$out.a" & pa=$!
"$build/bench_core" 1000000 2>/dev/null >"$out.b"
wait "$pa"
pair=$(cat "$out.a" "$out.b" | awk -F'\t' '$2 == "core-ns-per-decision-fixed" {s += $3; n++} END {print s / n}')
rm -f "$out.a" "$out.b"
awk -v a="$alone" -v p="$pair" 'BEGIN { printf "ratel\tmachine_two_process_ceiling\t%.2f\tx\n", 2 * a / p }' | tee -a "$out"

"$build/bench_store" | tee -a "$out"
"$build/bench_snapshot" | tee -a "$out"
"$build/bench_deny_cache" | tee -a "$out"

if [ "${PEERS:-1}" != 0 ] && [ -x "$peers_dir/run-peers.sh" ]; then
    # rate-limiter-flexible's bench also drives a Redis limiter: give it a
    # private redis-server on a free loopback port, stopped on exit.
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis_dir=$(mktemp -d)
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$redis_dir" --daemonize no --loadmodule "$top/$build/ratel.so" \
        >"$redis_dir/log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # libratel's Redis store (issue 4) and rate-limiter-flexible's Redis
    # limiter on this one server, one after the other: every mode and case
    # once. bench/redis.sh measures the library's batches against the same
    # peer again in its interleaved rounds; its summary has that ratio.
    "$build/bench_redis_store" "$port" | tee -a "$out"
    "$peers_dir/run-peers.sh" rlf "$port" | tee -a "$out"
else
    echo "# peers skipped (PEERS=0 or $peers_dir/run-peers.sh missing)"
fi

echo
echo "## summary (medians; ratios within this run)"
awk -F'\t' '
    $1 == "ratel" { v[$2] = $3 }
    $1 == "peer"  { p[$2] = $3 }
    END {
        rlf = p["rate-limiter-flexible memory consume"] + 0
        printf "| figure | value |\n|---|---|\n"
        for (k in v) printf "| %s | %s |\n", k, v[k] | "sort"
        close("sort")
        if ("machine_two_process_ceiling" in v)
            printf "\ntwo threads can reach at most %sx one thread on this machine (two independent processes)\n", v["machine_two_process_ceiling"]
        if (rlf > 0) {
            printf "\n| embedded store, 1 thread, 1,000 hot keys | decisions/s | vs rate-limiter-flexible memory (%d/s) |\n|---|---|---|\n", rlf
            n = split("sliding fixed approx gcra fixed_tz concurrent", algos, " ")
            for (i = 1; i <= n; i++) {
                k = "store_hot1k_" algos[i] "_1t"
                if (k in v) printf "| %s | %d | %.1fx |\n", algos[i], v[k], v[k] / rlf
            }
        }
        rr = p["rate-limiter-flexible redis consume (conc 50)"] + 0
        if (rr > 0) {
            printf "\n| Redis store, 1,000 keys, same redis-server | decisions/s | vs rate-limiter-flexible Redis, 50 concurrent (%d/s) |\n|---|---|---|\n", rr
            n = split("one batch100 batch100_2t threads8", cases, " ")
            split("module function lua", modes, " ")
            for (m = 1; m <= 3; m++) for (a = 0; a < 2; a++) for (i = 1; i <= n; i++) {
                k = "redis_store_" modes[m] "_" (a ? "sliding" : "fixed") "_" cases[i]
                if (k in v) printf "| %s | %d | %.1fx |\n", k, v[k], v[k] / rr
            }
        }
        if ("redis_store_deny_cache_hits_1t" in v)
            printf "\ndeny cache hits: %d/s on 1 thread, %d/s on 2\n", v["redis_store_deny_cache_hits_1t"], v["redis_store_deny_cache_hits_2t"]
    }' "$out"

# Redis (issue 3): the module and the Lua script against INCR and the seeds'
# scripts on one private redis-server of their own (bench/redis.sh starts
# and stops it). REDIS=0 skips it.
if [ "${REDIS:-1}" != 0 ]; then
    echo
    BUILD="$build" PEERS="${PEERS:-1}" PEERS_DIR="$peers_dir" "$here/redis.sh"
fi

# The Redis store's engine: one thread's asynchronous and synchronous
# decisions against rate-limiter-flexible's Redis limiter, rateld on the
# Redis store against the embedded store, rediss:// against redis://, in
# interleaved rounds (bench/redis_engine.sh). ENGINE=0 skips it.
if [ "${ENGINE:-1}" != 0 ] && [ -x "$build/rateld" ]; then
    echo
    BUILD="$build" PEERS="${PEERS:-1}" PEERS_DIR="$peers_dir" "$here/redis_engine.sh"
fi

# rateld (issue 5) under wrk, with nginx limit_req in the same run.
# RATELD=0 skips it.
if [ "${RATELD:-1}" != 0 ] && [ -x "$build/rateld" ]; then
    echo
    BUILD="$build" PEERS_DIR="$peers_dir" "$here/rateld.sh"
fi

# Gateways (issue 14): nginx auth_request and Caddy forward_auth in front
# of rateld, of a trivial responder, and nginx limit_req alone, in one run.
# GATEWAY=0 skips it.
if [ "${GATEWAY:-1}" != 0 ] && [ -x "$build/rateld" ]; then
    echo
    BUILD="$build" PEERS_DIR="$peers_dir" "$here/gateway.sh"
fi

# Envoy's rate limit service (issue 15): h2load driving ShouldRateLimit
# over h2c and wrk driving /v1/acquire, against one rateld. ENVOY=0 skips it.
if [ "${ENVOY:-1}" != 0 ] && [ -x "$build/rateld" ] && command -v h2load >/dev/null; then
    echo
    BUILD="$build" "$here/envoy.sh"
fi

# The nginx module (ngx_http_ratel_module): its shared-memory zone against
# limit_req, allowed and denied, two sliding rules, and its Redis mode
# against nginx -> auth_request -> rateld on the same Redis, one nginx
# worker, in one run (bench/nginx.sh). NGINX=0 skips it.
if [ "${NGINX:-1}" != 0 ] && [ -e "$build/nginx/ngx_http_ratel_module.so" ]; then
    echo
    BUILD="$build" "$here/nginx.sh"
fi

# Leasing (issue 34): rateld on one hot key, embedded against Redis with
# and without leased slices (module and Functions library), decisions per
# Redis call, and the lease table of 100 hosts at 1,000,000 decisions a
# second (build/bench_lease), in one run (bench/lease.sh). LEASE=0 skips it.
if [ "${LEASE:-1}" != 0 ] && [ -x "$build/rateld" ]; then
    echo
    BUILD="$build" "$here/lease.sh"
fi
