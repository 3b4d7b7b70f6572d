#!/usr/bin/env bash
# bench/envoy.sh - rateld as Envoy's rate limit service: h2load (Debian's
# nghttp2-client) driving unary ShouldRateLimit calls with one descriptor,
# and in the same run wrk driving /v1/acquire over HTTP/1.1, against ONE
# rateld (one worker thread, embedded store, a limit that never denies).
# Rounds alternate h2load and wrk (ROUNDS=3 by default) so that a noisy
# neighbour hits both; the summary quotes medians and the ratio.
#
#   h2load -c50 -m1 -t1 -D SECONDS  (50 connections, one call at a time
#                                    each: what wrk -t1 -c50 does)
#   h2load -c4 -m32 -t1             (few connections, many streams each:
#                                    how Envoy multiplexes)
#   wrk -t1 -c50                    (/v1/acquire, HTTP/1.1 keep-alive)
#
# p50/p99 come from h2load's per-request log (--log-file) and wrk's
# --latency. Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines, then a
# summary. BUILD=build bench/envoy.sh; SECONDS_EACH=5 by default.
. "$(dirname "$0")/http_lib.sh"
secs=${SECONDS_EACH:-5}
rounds=${ROUNDS:-3}

machine_header
echo "# rounds: $rounds x (h2load c50 m1, h2load c4 m32, wrk c50), ${secs}s each; rateld threads: 1"

hport=$(free_port)
gport=$(free_port)
mkdir -p "$tmp/erl"
cat >"$tmp/erl/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
EOF
cat >"$tmp/rateld.yaml" <<EOF
listen: 127.0.0.1:$hport
threads: 1
policies:
  allow:
    rules: [1000000000/1m]
    key: ip
envoy:
  listen: 127.0.0.1:$gport
  config_dir: erl
EOF
"$build/rateld" --config "$tmp/rateld.yaml" 2>"$tmp/rateld.log" &
rateld_pid=$!
pids+=("$rateld_pid")
# rateld's CPU time so far, in clock ticks (utime + stime).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$rateld_pid/stat"; }
hz=$(getconf CLK_TCK)
# cpu_per_call NAME TICKS0 CALLS_PER_S: rateld's CPU microseconds per
# call over the run: what one call costs rateld, whatever the client's
# own speed (on 2 cores, h2load or wrk may be what limits the rate).
cpu_per_call() {
    awk -v n="$1" -v t="$(($(cpu_ticks) - $2))" -v hz="$hz" -v r="$3" -v s="$secs" \
        'BEGIN { if (r > 0) printf "ratel\t%s_rateld_cpu_us\t%.2f\tus/call\n", n, t * 1e6 / hz / (r * s) }'
}
wait_http "http://127.0.0.1:$hport/healthz" || { echo "rateld did not start"; cat "$tmp/rateld.log"; exit 1; }

# The request: a gRPC frame (flag 0, 4-byte length) holding a
# RateLimitRequest{domain: "bench", descriptors: [{entries: [{key:
# "remote_address", value: "1.2.3.4"}]}]}, protobuf's wire format.
python3 - "$tmp/call.bin" <<'EOF'
import struct, sys
def field(n, b): return bytes([n << 3 | 2, len(b)]) + b
entry = field(1, b"remote_address") + field(2, b"1.2.3.4")
msg = field(1, b"bench") + field(2, field(1, entry))
open(sys.argv[1], "wb").write(struct.pack(">BI", 0, len(msg)) + msg)
EOF
url="http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

# run_h2load NAME CLIENTS STREAMS: calls/s, p50 and p99 (ms).
run_h2load() {
    local out log="$tmp/h2.log" t0
    rm -f "$log"
    t0=$(cpu_ticks)
    out=$(h2load -t1 -c"$2" -m"$3" -D "$secs" -d "$tmp/call.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        --log-file="$log" "$url" 2>&1)
    local rps
    rps=$(awk '/^finished in/ {print $4}' <<<"$out")
    printf 'ratel\t%s_rps\t%s\tcalls/s\n' "$1" "$rps"
    cpu_per_call "$1" "$t0" "$rps"
    # the log: start (us since the epoch), status, latency (us) per call
    sort -n -k3 "$log" | awk -v name="$1" '
        { v[NR] = $3; if ($2 != 200) bad++ }
        END {
            printf "ratel\t%s_p50\t%.3f\tms\n", name, v[int(NR * 0.50) + 1] / 1000
            printf "ratel\t%s_p99\t%.3f\tms\n", name, v[int(NR * 0.99) + 1] / 1000
            if (bad) printf "# %s: %d answers not HTTP 200\n", name, bad
        }'
    grep -E '^requests:' <<<"$out" | sed "s/^/# $1: /"
}

run_wrk() {
    local out t0 rps
    t0=$(cpu_ticks)
    out=$(wrk -t1 -c50 -d"${secs}s" --latency "$2" 2>&1)
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    printf 'ratel\t%s_rps\t%s\treq/s\n' "$1" "$rps"
    cpu_per_call "$1" "$t0" "$rps"
    for q in 50 99; do
        printf 'ratel\t%s_p%s\t%s\tlatency\n' "$1" "$q" "$(awk -v q="$q%" '$1 == q {print $2}' <<<"$out")"
    done
}

# One call first, with the tests' gRPC client: it must be answered OK, or
# the figures would measure errors.
echo "# first call: $(/usr/bin/python3 "$top/tests/integration/rls_client.py" call "127.0.0.1:$gport" bench remote_address=1.2.3.4 2>&1 | cut -c1-60)"

for r in $(seq "$rounds"); do
    run_h2load rls_h2load_c50_m1 50 1 | tee -a "$tmp/all"
    run_h2load rls_h2load_c4_m32 4 32 | tee -a "$tmp/all"
    run_wrk acquire_wrk_c50 "http://127.0.0.1:$hport/v1/acquire?policy=allow&key=1.2.3.4" | tee -a "$tmp/all"
    echo "# round $r done"
done

echo
echo "## summary: medians of $rounds rounds (one rateld thread, embedded store)"
awk -F'\t' '
    function median(k,   n, i, j, t, a) {
        n = split(vals[k], a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return a[int((n + 1) / 2)]
    }
    $1 == "ratel" { vals[$2] = vals[$2] " " $3; unit[$2] = $4 }
    END {
        printf "| figure | median | unit |\n|---|---|---|\n"
        for (k in vals) printf "| %s | %s | %s |\n", k, median(k), unit[k] | "sort"
        close("sort")
        w = median("acquire_wrk_c50_rps")
        if (w > 0) {
            printf "\nShouldRateLimit over h2c vs /v1/acquire over HTTP/1.1 (wrk c50): "
            printf "c50 m1 %.2fx, c4 m32 %.2fx\n", median("rls_h2load_c50_m1_rps") / w, median("rls_h2load_c4_m32_rps") / w
        }
        c = median("acquire_wrk_c50_rateld_cpu_us")
        if (c > 0)
            printf "rateld CPU per call relative to /v1/acquire (lower is cheaper): c50 m1 %.2fx, c4 m32 %.2fx\n", median("rls_h2load_c50_m1_rateld_cpu_us") / c, median("rls_h2load_c4_m32_rateld_cpu_us") / c
    }' "$tmp/all"
