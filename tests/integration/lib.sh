# lib.sh - what every integration test shares: real redis-server processes
# on free loopback ports, always stopped, and the ok/FAIL tally.
#
# Source it from a test script:
#
#   . "$(dirname "$0")/lib.sh"
#   port=$(redis_start)                      # standalone, module loaded
#   port=$(redis_start --appendonly yes)     # extra redis-server arguments
#   rcli "$port" RATEL.ACQUIRE k 1/1s        # redis-cli -p PORT --no-raw ...
#   certs=$(tls_certs)                       # tls_certs.sh's files, once
#   port=$(redis_start_tls [--cert expired] [--auth-clients] [ARGS...])
#   rcli_tls "$port" PING                    # redis-cli over TLS
#   sport=$(sentinel_start "$primary")       # a Sentinel on mymaster
#   sentinel_wait "$sport" "$primary" 1      # it names the primary and
#                                            # knows 1 replica (20 s)
#   sentinel_failover "$sport" "$replica"    # SENTINEL FAILOVER, waits
#   read -r -a ports <<<"$(cluster_start 3 1 --cluster-node-timeout 1000)"
#                                            # 3 masters, a replica each
#   same NAME "$got" "$want"; ok NAME; fail NAME WHY
#   wait_for 10 COMMAND...                   # until it succeeds, or 1
#   wait_up "$pid" "$url" 20                 # until URL answers; 1 when the
#                                            # process exits or 20 s pass
#   require_built rateld captchad            # else one FAIL and exit
#   server_start NAME PORT COMMAND...        # rateld/captchad up on PORT
#   server_stop NAME [SIGNAL]                # its exit status in $stopped
#   rateld_redis NAME URL ON_FAILURE POLICY RULE  # rateld on Redis, one
#                                            # policy; port in $tmp/NAME.port
#   finish                                   # prints "N passed, N failed"
#
# Every server started here runs in its own directory under $tmp and is
# killed by the EXIT trap, whatever happens to the test. RATEL_MODULE (default
# $BUILD/ratel.so) is loaded unless RATEL_NO_MODULE=1; RATEL_REDIS_WRAP, if
# set, prefixes redis-server (e.g. valgrind).
# shellcheck shell=bash
set -u
lib_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$lib_here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
module=${RATEL_MODULE:-$build/ratel.so}
read -r -a redis_wrap <<<"${RATEL_REDIS_WRAP:-}"
tmp=$(mktemp -d)
mkdir -p "$tmp/pids"
passed=0 failed=0

# Servers are recorded as files in $tmp/pids (redis_start runs in a command
# substitution, a subshell: a variable would not reach the trap).
cleanup() {
    local pid pids
    pids=$(cat "$tmp"/pids/* 2>/dev/null)
    for pid in $pids; do
        kill "$pid" 2>/dev/null
    done
    for pid in $pids; do
        # Wait briefly, then insist: nothing outlives the test.
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# wait_for SECONDS COMMAND...: runs COMMAND until it succeeds; 1 when the
# deadline passes first. Tests wait for a state, never a fixed time.
wait_for() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.05
    done
}

# require_built PROGRAM...: ends the test (one failure) unless every
# $build/PROGRAM is built.
require_built() {
    local p
    for p in "$@"; do
        if [ ! -x "$build/$p" ]; then
            echo "FAIL $p: $build/$p not built (make)"
            echo "0 passed, 1 failed"
            exit 1
        fi
    done
}

# wait_up PID URL SECONDS: until URL answers anything (0), or 1 when the
# process PID exits or SECONDS pass first.
wait_up() {
    local end=$((SECONDS + $3))
    until curl -s -o /dev/null "$2"; do
        kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}

# server_start NAME PORT COMMAND...: runs COMMAND (rateld, captchad) in
# the background, its output appended to $tmp/NAME.log, its pid in
# $tmp/pids/NAME (the EXIT trap stops it) and in $server_pid, and waits
# until http://127.0.0.1:PORT/healthz answers. 1, with the end of its log
# on stdout, when it exits or does not answer within 20 s. Call it
# outside $(...), so that server_stop can wait for the child.
server_start() {
    local name=$1 port=$2
    shift 2
    "$@" >>"$tmp/$name.log" 2>&1 &
    server_pid=$!
    echo "$server_pid" >"$tmp/pids/$name"
    wait_up "$server_pid" "http://127.0.0.1:$port/healthz" 20 && return 0
    echo "$name did not start; its log:"
    tail -20 "$tmp/$name.log"
    return 1
}

# rateld_redis NAME URL ON_FAILURE POLICY RULE [LEASE]: rateld (RATELD_WRAP
# prefixing it) on the Redis store at URL with one policy POLICY of RULE,
# keyed by the decision API's key, leased with LEASE (a YAML flow mapping,
# e.g. "{ttl_ms: 1000, max_slice: 20}") when given, started with
# server_start; its port in $tmp/NAME.port, its log in $tmp/NAME.log. One
# failure when it does not start.
rateld_redis() {
    local port wrap
    port=$(free_port)
    cat >"$tmp/$1.yaml" <<EOF
listen: 127.0.0.1:$port
store:
  type: redis
  url: $2
  on_failure: $3
policies:
  $4:
    rules: [$5]
EOF
    [ -n "${6:-}" ] && echo "    lease: $6" >>"$tmp/$1.yaml"
    echo "$port" >"$tmp/$1.port"
    read -r -a wrap <<<"${RATELD_WRAP:-}"
    server_start "$1" "$port" "${wrap[@]}" "$build/rateld" --config "$tmp/$1.yaml" ||
        fail "${1}_start" "rateld did not start"
}

# server_stop NAME [SIGNAL]: sends SIGNAL (TERM) to the server NAME that
# server_start started and waits up to 20 s for it to exit; its exit
# status is then in $stopped (124: it did not exit).
# shellcheck disable=SC2034 # $stopped is for the caller
server_stop() {
    local pid
    stopped=124
    pid=$(cat "$tmp/pids/$1")
    kill -"${2:-TERM}" "$pid" 2>/dev/null
    for _ in $(seq 400); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            stopped=$?
            break
        fi
        sleep 0.05
    done
}

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# same NAME GOT WANT (multi-line texts fail with the lines that differ)
same() {
    if [ "$2" == "$3" ]; then
        ok "$1"
    elif [[ $2 == *$'\n'* || $3 == *$'\n'* ]]; then
        fail "$1" "$(diff <(printf '%s\n' "$3") <(printf '%s\n' "$2") | head -20 |
            sed 's/^</want:/; s/^>/got: /' | tr '\n' ' ' | cut -c1-1200)"
    else
        fail "$1" "got [${2:0:300}], want [${3:0:300}]"
    fi
}

# app_start [PORT]: tests/integration/app_backend.py, the application
# behind the gateways, on PORT (a free one) in $bport; waits until it
# answers.
app_start() {
    bport=${1:-$(free_port)}
    python3 "$lib_here/app_backend.py" "$bport" >>"$tmp/app_backend.log" 2>&1 &
    echo $! >"$tmp/pids/app_backend"
    wait_for 10 curl -sf -o /dev/null "http://127.0.0.1:$bport/started"
}

# config_refused NAME YAML WANT: rateld --check-config refuses the
# configuration YAML with a message holding WANT.
config_refused() {
    printf '%s' "$2" >"$tmp/refused.yaml"
    contains "$1" "$("$build/rateld" --check-config "$tmp/refused.yaml" 2>&1)" "$3"
}

# doc_snippet FILE NAME: the fenced block after "<!-- snippet: NAME -->"
# in FILE (a page's block another test runs as printed).
doc_snippet() {
    awk -v want="<!-- snippet: $2 -->" '
        $0 == want { found = 1; next }
        found == 1 && /^```/ { found = 2; next }
        found == 2 && /^```/ { exit }
        found == 2 { print }' "$1"
}

# doc_snippet_output FILE NAME: the ```text block after that snippet (what
# the page shows it printing).
doc_snippet_output() {
    awk -v want="<!-- snippet: $2 -->" '
        $0 == want { s = 1 }
        s && /^```text/ { t = 1; next }
        t && /^```/ { exit }
        t { print }' "$1"
}

# contains NAME TEXT SUBSTRING
contains() {
    if [[ $2 == *"$3"* ]]; then ok "$1"; else fail "$1" "[${2:0:300}] lacks [$3]"; fi
}

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

# A loopback TCP port nobody listens on (and, for cluster nodes, whose bus
# port +10000 is free too).
free_port() {
    local p
    for _ in $(seq 200); do
        # 10000..21999, and the cluster bus port +10000 below 32768: both
        # outside the kernel's ephemeral range (32768..60999), so no
        # client connection's local port can take them meanwhile.
        p=$((10000 + RANDOM % 12000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
           ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    echo "free_port: no free port" >&2
    return 1
}

rcli() {
    local port=$1; shift
    redis-cli -p "$port" "$@"
}

# redis_start [redis-server ARGS...]: starts a server on a free port in its
# own directory ($tmp/redis-PORT), waits until it answers, prints the port.
# Another process may take the port between the check and the bind: then
# it tries another, up to five times.
redis_start() {
    local port
    for _ in 1 2 3 4 5; do
        port=$(free_port) || return 1
        if redis_start_on "$port" "$@" 2>"$tmp/start.err"; then
            echo "$port"
            return 0
        fi
    done
    cat "$tmp/start.err" >&2
    return 1
}

# redis_start_on PORT [ARGS...]: the same on a given port (a restart).
redis_start_on() {
    local port=$1; shift
    local dir=$tmp/redis-$port
    local load=()
    mkdir -p "$dir"
    if [ "${RATEL_NO_MODULE:-0}" != 1 ]; then
        load=(--loadmodule "$module")
    fi
    (cd "$dir" && exec "${redis_wrap[@]}" redis-server --port "$port" \
        --bind 127.0.0.1 --daemonize no --save '' --appendonly no \
        --dir "$dir" --logfile "$dir/log" "${load[@]}" "$@") \
        >"$dir/stdout" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$tmp/pids/$port"
    echo "$pid" >"$dir/pid"
    local ping=(redis-cli -p "$port" PING)
    if [[ " $* " == *" --tls-port "* ]]; then
        ping=(rcli_tls "$port" --insecure PING) # any certificate
        touch "$dir/tls"
    fi
    for _ in $(seq 100); do
        if [ "$("${ping[@]}" 2>/dev/null)" = PONG ]; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "redis_start: redis-server on $port exited; its log:" >&2
            tail -20 "$dir/log" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "redis_start: redis-server on $port did not answer" >&2
    return 1
}

# redis_stop PORT: a clean SHUTDOWN (so RDB/AOF persistence runs), then waits.
redis_stop() {
    local port=$1 dir=$tmp/redis-$1 pid
    pid=$(cat "$dir/pid")
    if [ -e "$dir/tls" ]; then
        rcli_tls "$port" SHUTDOWN >/dev/null 2>&1
    else
        redis-cli -p "$port" SHUTDOWN >/dev/null 2>&1
    fi
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
}

# ------------------------------------------------------------- Cluster

# cluster_start MASTERS REPLICAS [redis-server ARGS...]: MASTERS masters
# with REPLICAS replicas each (redis_start --cluster-enabled yes, so the
# module is loaded, and ARGS, e.g. --cluster-node-timeout 1000) joined by
# `redis-cli --cluster create ... --cluster-replicas REPLICAS`; waits
# (20 s) until every node says cluster_state:ok with every slot assigned
# and every node known, and every replica's link to its master is up.
# Prints the ports on one line (redis-cli pairs replicas with masters
# itself: ROLE or CLUSTER NODES says which is which). 1, with the reason
# on stderr, when the cluster did not form. The EXIT trap stops them.
cluster_start() {
    local masters=$1 replicas=$2 n p ports=() addrs=()
    shift 2
    n=$((masters * (replicas + 1)))
    for _ in $(seq "$n"); do
        p=$(redis_start --cluster-enabled yes --cluster-config-file nodes.conf "$@") || return 1
        ports+=("$p")
        addrs+=("127.0.0.1:$p")
    done
    if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" \
        --cluster-yes >"$tmp/cluster-${ports[0]}.log" 2>&1; then
        echo "cluster_start: redis-cli --cluster create failed:" >&2
        tail -5 "$tmp/cluster-${ports[0]}.log" >&2
        return 1
    fi
    if ! wait_for 20 cluster_formed "$n" "${ports[@]}"; then
        echo "cluster_start: the cluster of ${ports[*]} is not ok after 20 s" >&2
        return 1
    fi
    echo "${ports[*]}"
}

# cluster_formed N PORT...: every node says ok, knows N nodes and has
# every slot assigned; every replica's link to its master is up.
cluster_formed() {
    local n=$1 p info
    shift
    for p in "$@"; do
        info=$(rcli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r')
        [[ $info == *cluster_state:ok* && $info == *cluster_slots_assigned:16384* &&
            $info == *"cluster_known_nodes:$n"$'\n'* ]] || return 1
        info=$(rcli "$p" INFO replication 2>/dev/null | tr -d '\r')
        [[ $info == *role:master* || $info == *master_link_status:up* ]] || return 1
    done
}

# ------------------------------------------------------------------ TLS

# tls_certs: makes the test certificates once (tls_certs.sh documents each
# file: ca.crt, other-ca.crt, server.crt, expired.crt, wrong-name.crt,
# client.crt, other-client.crt and their keys) and prints their directory.
tls_certs() {
    if [ ! -f "$tmp/certs/client.key" ]; then
        sh "$lib_here/tls_certs.sh" "$tmp/certs" >&2 || return 1
    fi
    echo "$tmp/certs"
}

# rcli_tls PORT ARGS...: redis-cli over TLS, trusting the test CA and
# presenting the test client certificate.
rcli_tls() {
    local port=$1; shift
    redis-cli --tls --cacert "$tmp/certs/ca.crt" --cert "$tmp/certs/client.crt" \
        --key "$tmp/certs/client.key" -p "$port" "$@"
}

# redis_start_tls [--cert NAME] [--auth-clients] [ARGS...]: a redis-server
# that speaks only TLS on the port it prints (--port 0 --tls-port PORT),
# with certificate NAME (server, expired, wrong-name: default server),
# the test CA for clients and --tls-auth-clients no (yes with
# --auth-clients). rcli_tls and redis_stop speak TLS to it.
redis_start_tls() {
    local cert=server auth=no port certs
    while [ $# -gt 0 ]; do
        case $1 in
        --cert) cert=$2; shift 2 ;;
        --auth-clients) auth=yes; shift ;;
        *) break ;;
        esac
    done
    certs=$(tls_certs) || return 1
    for _ in 1 2 3 4 5; do
        port=$(free_port) || return 1
        if redis_start_on "$port" --port 0 --tls-port "$port" \
            --tls-cert-file "$certs/$cert.crt" --tls-key-file "$certs/$cert.key" \
            --tls-ca-cert-file "$certs/ca.crt" --tls-auth-clients "$auth" \
            --tls-replication yes "$@" 2>"$tmp/start.err"; then
            echo "$port"
            return 0
        fi
    done
    cat "$tmp/start.err" >&2
    return 1
}

# ------------------------------------------------------------- Sentinel

# sentinel_start PRIMARY_PORT [ARGS...]: a `redis-server CONF --sentinel`
# on a free port (printed) monitoring 127.0.0.1:PRIMARY_PORT as mymaster,
# quorum 1, down-after-milliseconds 1000, failover-timeout 5000, ARGS
# appended (e.g. --requirepass PASSWORD). Several Sentinels on one primary
# find each other. The EXIT trap stops it.
sentinel_start() {
    local primary=$1 port dir pid
    shift
    port=$(free_port) || return 1
    dir=$tmp/sentinel-$port
    mkdir -p "$dir"
    printf '%s\n' "sentinel monitor mymaster 127.0.0.1 $primary 1" \
        "sentinel down-after-milliseconds mymaster 1000" \
        "sentinel failover-timeout mymaster 5000" \
        "sentinel parallel-syncs mymaster 1" >"$dir/sentinel.conf"
    (cd "$dir" && exec redis-server "$dir/sentinel.conf" --sentinel \
        --port "$port" --bind 127.0.0.1 --daemonize no --dir "$dir" \
        --logfile "$dir/log" "$@") >"$dir/stdout" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$tmp/pids/sentinel-$port"
    for _ in $(seq 100); do
        if redis-cli -p "$port" PING 2>/dev/null | grep -q '^PONG$\|^NOAUTH'; then
            echo "$port"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "sentinel_start: Sentinel on $port did not answer; its log:" >&2
    tail -20 "$dir/log" >&2
    return 1
}

# sentinel_primary SENTINEL_PORT: the port the Sentinel names for mymaster.
sentinel_primary() {
    redis-cli -p "$1" SENTINEL GET-MASTER-ADDR-BY-NAME mymaster 2>/dev/null |
        sed -n 2p
}

# Whether the Sentinel names PRIMARY and counts at least REPLICAS replicas.
sentinel_agrees() {
    local replicas
    [ "$(sentinel_primary "$1")" = "$2" ] || return 1
    replicas=$(redis-cli -p "$1" SENTINEL MASTER mymaster 2>/dev/null |
        sed -n '/^num-slaves$/{n;p}')
    [ "${replicas:-0}" -ge "$3" ]
}

# sentinel_wait SENTINEL_PORT PRIMARY_PORT [REPLICAS]: waits (20 s) until
# the Sentinel names PRIMARY_PORT and knows REPLICAS (default 1) replicas.
sentinel_wait() {
    wait_for 20 sentinel_agrees "$1" "$2" "${3:-1}"
}

# Whether SENTINEL FAILOVER was accepted; whether PORT is a primary.
sentinel_failover_asked() {
    [ "$(redis-cli -p "$1" SENTINEL FAILOVER mymaster 2>/dev/null)" = OK ]
}
is_primary() {
    [ "$(redis-cli -p "$1" ROLE 2>/dev/null | head -1)" = master ]
}
sentinel_switched() {
    [ "$(sentinel_primary "$1")" = "$2" ] && is_primary "$2"
}

# sentinel_failover SENTINEL_PORT NEW_PRIMARY_PORT: SENTINEL FAILOVER
# (asked again while no replica is promotable yet), then waits (20 s)
# until the Sentinel names NEW_PRIMARY_PORT and that server is a primary.
sentinel_failover() {
    wait_for 20 sentinel_failover_asked "$1" && wait_for 20 sentinel_switched "$1" "$2"
}

# answers_at_once NAME BASE_URL PATH...: asks each PATH 20 times over a
# second and a half; one failure NAME_during_hang per answer that is not
# 200, NAME_slow_answers counts those slower than 100 ms (a generous
# ceiling for a loopback answer that waits for nothing: not a benchmark),
# and the slowest seen is printed.
answers_at_once() {
    local name=$1 base=$2 slowest=0 slow=0 code t path
    shift 2
    for _ in $(seq 20); do
        for path in "$@"; do
            read -r code t < <(curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' "$base/$path")
            [ "$code" = 200 ] || fail "${name}_${path}_during_hang" "answered $code"
            awk -v t="$t" 'BEGIN { exit !(t < 0.1) }' || slow=$((slow + 1))
            slowest=$(awk -v a="$slowest" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
        done
        sleep 0.05
    done
    same "${name}_slow_answers" "$slow" 0
    echo "# slowest of $* while Redis hung: ${slowest}s"
}
