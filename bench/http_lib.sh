# bench/http_lib.sh - what the HTTP benchmarks (rateld.sh, gateway.sh,
# redis_engine.sh, nginx.sh, lease.sh) share: paths, a temporary folder
# and the processes to stop on exit, a free port, waiting for a server,
# the machine header, a median, dying with a reason, a private
# redis-server with the module. Sourced; the caller sets `secs` itself.
# shellcheck shell=bash
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
# shellcheck disable=SC2034 # read by the benchmarks that source this file
peers_dir=${PEERS_DIR:-$top/../shared/peers}
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() {
    for _ in $(seq 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done
    return 1
}
# die MESSAGE: the benchmark cannot measure: says why, exits 1.
die() { echo "bench/$(basename "$0"): $*" >&2; exit 1; }
# need TOOL...: each one on PATH, or die.
need() {
    local t
    for t; do command -v "$t" >/dev/null || die "$t is missing (scripts/setup.sh)"; done
}
# redis_start: a private redis-server with the Redis module on a free
# port ($rport, pid $redis_pid), stopped on exit; 1 when it does not
# answer (its log: $tmp/redis.log).
redis_start() {
    local _
    rport=$(free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
        --loadmodule "$build/ratel.so" --daemonize no >"$tmp/redis.log" 2>&1 </dev/null &
    pids+=($!)
    # shellcheck disable=SC2034 # read by the benchmarks that source this file
    redis_pid=$!
    for _ in $(seq 100); do
        redis-cli -p "$rport" PING 2>/dev/null | grep -q PONG && return 0
        sleep 0.1
    done
    return 1
}
# worker_of MASTER: the pid of an nginx master's (one) worker, from /proc
# (the command's name ends with ") ", the parent's pid follows the state).
worker_of() {
    local f
    for f in /proc/[0-9]*/stat; do
        sed 's/.*) //' "$f" 2>/dev/null | awk -v p="$1" -v f="$f" '$2 == p { split(f, a, "/"); print a[3] }'
    done | head -1
}
# cpu_ticks PID: its CPU time so far (user + system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# median: the median of the numbers on stdin, one a line (0 for none).
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print 0
        else if (NR % 2) print v[(NR + 1) / 2]
        else {
            m = sprintf("%.4f", (v[NR / 2] + v[NR / 2 + 1]) / 2)
            sub(/0+$/, "", m); sub(/\.$/, "", m); print m
        } }'
}
machine_header() {
    echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -sr)"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

# rateld_config PORT DENY_STATUS [REDIS_URL]: the configuration the
# gateway benchmarks give rateld (one thread; /api/ping allowed, /deny
# denied), on the embedded store or, with REDIS_URL, on Redis.
rateld_config() {
    cat <<EOF
listen: 127.0.0.1:$1
threads: 1
trusted_proxies: [127.0.0.1]
auth: {deny_status: $2}
EOF
    [ -z "${3:-}" ] || printf 'store:\n  type: redis\n  url: %s\n  on_failure: closed\n' "$3"
    cat <<EOF
policies:
  allow:
    rules: [1000000000/1m]
    key: ip
  deny:
    rules: [1/1h]
    key: global
routes:
  - path: /api/ping
    policies: [allow]
  - path: /deny
    policies: [deny]
EOF
}

# nginx_head DIR: the start of a benchmark nginx.conf (one worker, in the
# foreground, files under DIR, no access log), up to inside `http {`.
nginx_head() {
    cat <<EOF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log error;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
EOF
}
