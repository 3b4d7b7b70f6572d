#!/usr/bin/env bash
# bench/lease.sh - leasing (issue 34, docs/leases.md) in ONE run, rounds
# interleaved, medians, ratios taken within the run:
#
#   1. rateld (one worker thread) on ONE hot key, wrk -t1 -c50 on
#      /v1/acquire, the same policy (100000000/1s: the load stays under
#      it) and URL for every configuration:
#        memory      the embedded store
#        redis       the Redis store, the module, no lease
#        lease       the same, leased: {ttl_ms: 250, max_slice: 1000}
#        lease50     the same with max_slice 50 (the default)
#        redis_fn    the Functions library (mode=function), no lease
#        lease_fn    the Functions library, leased as `lease`
#      all on one private redis-server with the module loaded; and,
#      when the nginx module is built, one nginx (one worker) with:
#        ngx_zone    the module's shared-memory zone
#        ngx_redis   its Redis mode (the module), no lease
#        ngx_lease   its Redis mode, leased as `lease`
#      on /ngx_*?key=..., `ratel ... key=$arg_key; empty_gif`;
#   2. decisions per Redis call in each run: wrk's requests over the
#      server's calls (INFO commandstats, reset before each run: every
#      RATEL.* command, FCALL and FCALL_RO), with rateld's
#      ratel_lease_calls_total and ratel_decisions_total{source} beside;
#   3. build/bench_lease: the lease table of 100 hosts over the core at
#      1,000,000 decisions a second on one key (max_slice 50 and 500).
#
#   BUILD=build bench/lease.sh
#   LEASE_ROUNDS=5 WRK_SECONDS=5 LEASE_MAX_SLICE=1000
#   LEASE_CASES="memory redis lease lease50 redis_fn lease_fn
#                ngx_zone ngx_redis ngx_lease"   (the ngx_* when built)
#
# Prints "ratel<TAB>NAME<TAB>VALUE<TAB>UNIT" lines (medians), each round's
# figures as comments, then a summary with the ratios and the targets.
# Never fails on a figure; exit 1 only when it cannot measure.
. "$(dirname "$0")/http_lib.sh"
rounds=${LEASE_ROUNDS:-5}
secs=${WRK_SECONDS:-5}
max_slice=${LEASE_MAX_SLICE:-1000}
module=$build/nginx/ngx_http_ratel_module.so
ngx_cases=
[ -e "$module" ] && command -v nginx >/dev/null && ngx_cases=" ngx_zone ngx_redis ngx_lease"
cases=${LEASE_CASES:-memory redis lease lease50 redis_fn lease_fn$ngx_cases}
read -r -a case_list <<<"$cases"
results=$tmp/results
: >"$results"

need redis-server redis-cli wrk curl python3
for f in rateld ratel.so bench_lease; do
    [ -e "$build/$f" ] || die "$build/$f is missing (make bench builds it)"
done

redis_start || die "redis-server did not start: $(tail -3 "$tmp/redis.log")"

# store_of CASE: the store section of a case; lease_of CASE: its lease.
store_of() {
    case $1 in
    memory) ;;
    *_fn) printf 'store:\n  type: redis\n  url: redis://127.0.0.1:%s?mode=function\n  on_failure: closed\n' "$rport" ;;
    *) printf 'store:\n  type: redis\n  url: redis://127.0.0.1:%s?mode=module\n  on_failure: closed\n' "$rport" ;;
    esac
}
lease_of() {
    case $1 in
    lease50) echo '    lease: {ttl_ms: 250, max_slice: 50}' ;;
    lease*) echo "    lease: {ttl_ms: 250, max_slice: $max_slice}" ;;
    esac
}

# One rateld a case, one worker thread, started in this shell (not in a
# command substitution, which would wait for its output to close).
declare -A port pid
for c in "${case_list[@]}"; do
    [[ $c == ngx_* ]] && continue
    port[$c]=$(free_port)
    {
        printf 'listen: 127.0.0.1:%s\nthreads: 1\n' "${port[$c]}"
        store_of "$c"
        printf 'policies:\n  hot:\n    rules: [100000000/1s]\n    key: query:key\n'
        lease_of "$c"
    } >"$tmp/$c.yaml"
    "$build/rateld" --config "$tmp/$c.yaml" 2>"$tmp/$c.log" &
    pids+=($!)
    pid[$c]=$!
    wait_http "http://127.0.0.1:${port[$c]}/healthz" ||
        { cat "$tmp/$c.log" >&2; die "rateld ($c) did not start"; }
done

# One nginx, one worker, a location a case.
ngx=
for c in "${case_list[@]}"; do [[ $c == ngx_* ]] && ngx=1; done
if [ -n "$ngx" ]; then
    [ -e "$module" ] || die "$module is missing (make builds it)"
    d=$tmp/nginx
    mkdir -p "$d/logs"
    nport=$(free_port)
    {
        echo "load_module $module;"
        nginx_head "$d"
        cat <<EOF
    ratel_zone zone=shm:10m;
    ratel_zone zone=red:10m store=redis://127.0.0.1:$rport?mode=module;
    ratel_policy hot 100000000/1s;
    ratel_policy hotl 100000000/1s lease=ttl_ms=250,max_slice=$max_slice;
    server {
        listen 127.0.0.1:$nport;
        location = /ngx_zone { ratel zone=shm policy=hot key=\$arg_key; empty_gif; }
        location = /ngx_redis { ratel zone=red policy=hot key=\$arg_key; empty_gif; }
        location = /ngx_lease { ratel zone=red policy=hotl key=\$arg_key; empty_gif; }
    }
}
EOF
    } >"$d/nginx.conf"
    nginx -p "$d" -c "$d/nginx.conf" >"$d/logs/stderr" 2>&1 &
    pids+=($!)
    wait_http "http://127.0.0.1:$nport/ngx_zone?key=probe" ||
        die "nginx did not start: $(cat "$d/logs/stderr" "$d/logs/error.log" 2>/dev/null)"
    # its one worker, for its CPU time
    nworker=$(worker_of "${pids[-1]}")
    for c in ngx_zone ngx_redis ngx_lease; do
        port[$c]=$nport
        pid[$c]=$nworker
    done
fi

url() {
    case $1 in
    ngx_*) echo "http://127.0.0.1:${port[$1]}/$1?key=hot-$1" ;;
    *) echo "http://127.0.0.1:${port[$1]}/v1/acquire?policy=hot&key=hot-$1" ;;
    esac
}
# counters CASE: rateld's lease calls and decisions from slices and from
# the store, as "calls lease store".
counters() {
    [[ $1 == ngx_* ]] && { echo 0 0 0; return; }
    curl -s "http://127.0.0.1:${port[$1]}/metrics" | awk '
        /^ratel_lease_calls_total\{policy="hot"\}/ { calls = $2 }
        /^ratel_decisions_total\{policy="hot",outcome="allowed",source="lease"\}/ { lease = $2 }
        /^ratel_decisions_total\{policy="hot",outcome="allowed",source="store"\}/ { store = $2 }
        END { printf "%d %d %d\n", calls, lease, store }'
}
tick=$(getconf CLK_TCK)
# redis_calls: every call of the ratel commands and FCALL since the
# last CONFIG RESETSTAT.
redis_calls() {
    redis-cli -p "$rport" INFO commandstats | tr -d '\r' | awk -F'[:,=]' '
        $1 ~ /^cmdstat_(ratel\.|fcall)/ { n += $3 }
        END { print n + 0 }'
}

for c in "${case_list[@]}"; do
    out=$(curl -s -o /dev/null -w '%{http_code}' "$(url "$c")")
    echo "# $c: $(url "$c") answers $out"
done
machine_header
echo "# $(redis-server --version | cut -d' ' -f1-3); $rounds rounds; wrk -t1 -c50 -d${secs}s; rateld threads: 1; cases: $cases"

# run CASE: one wrk run; its figures into $results.
run() {
    local c=$1 out reqs bad before after calls cpu0 rcpu0 cpu1 rcpu1
    read -r -a before <<<"$(counters "$c")"
    redis-cli -p "$rport" CONFIG RESETSTAT >/dev/null
    cpu0=$(cpu_ticks "${pid[$c]}")
    rcpu0=$(cpu_ticks "$redis_pid")
    out=$(wrk -t1 -c50 -d"${secs}s" "$(url "$c")" 2>&1)
    cpu1=$(cpu_ticks "${pid[$c]}")
    rcpu1=$(cpu_ticks "$redis_pid")
    calls=$(redis_calls)
    read -r -a after <<<"$(counters "$c")"
    reqs=$(awk '/requests in/ { print $1 }' <<<"$out")
    [ -n "$reqs" ] || die "$c: wrk: $out"
    # Errors (a Redis call past its deadline on a loaded machine: 503)
    # are not decisions: only the 2xx count.
    bad=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
    [ -z "$bad" ] || echo "# $c: $bad of $reqs answers not 2xx, not counted" >&2
    reqs=$((reqs - ${bad:-0}))
    {
        echo "$c $(awk -v ok="$reqs" -v bad="${bad:-0}" '/Requests\/sec/ {
            printf "%.2f\n", $2 * ok / (ok + bad) }' <<<"$out")"
        echo "$c:redis_calls $calls"
        # CPU microseconds a decision: rateld's, and redis-server's
        us() { awk -v t="$1" -v hz="$tick" -v n="$reqs" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }'; }
        echo "$c:rateld_cpu_us $(us $((cpu1 - cpu0)))"
        [ "$c" = memory ] || [ "$c" = ngx_zone ] || echo "$c:redis_cpu_us $(us $((rcpu1 - rcpu0)))"
        # a run without a Redis call (the embedded store) has no ratio
        [ "$calls" -gt 0 ] && echo "$c:per_call $(awk -v d="$reqs" -v n="$calls" 'BEGIN { printf "%.1f", d / n }')"
        if [ "${after[0]}" -gt "${before[0]}" ]; then
            echo "$c:lease_calls $((after[0] - before[0]))"
            echo "$c:from_lease_pct $(awk -v l=$((after[1] - before[1])) -v s=$((after[2] - before[2])) 'BEGIN { printf "%.2f", 100 * l / (l + s) }')"
        fi
    } >>"$results"
}

for r in $(seq "$rounds"); do
    echo "# round $r/$rounds: $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
    # each round starts with the next case: none always runs first
    for i in "${!case_list[@]}"; do
        run "${case_list[$(((i + r - 1) % ${#case_list[@]}))]}"
    done
done

# fig CASE: a case's figures are named rateld_CASE, or nginx_ZONE.
fig() { case $1 in ngx_*) echo "nginx_${1#ngx_}" ;; *) echo "rateld_$1" ;; esac; }
while read -r name; do
    echo "# $name per round: $(awk -v k="$name" '$1 == k { printf "%s ", $2 }' "$results")"
    v=$(awk -v k="$name" '$1 == k { print $2 }' "$results" | median)
    f=$(fig "${name%:*}")
    case $name in
    *:per_call) printf 'ratel\t%s_decisions_per_redis_call\t%s\tdecisions\n' "$f" "$v" ;;
    *:redis_calls) printf 'ratel\t%s_redis_calls\t%s\tcalls\n' "$f" "$v" ;;
    *:lease_calls) printf 'ratel\t%s_lease_calls\t%s\tcalls\n' "$f" "$v" ;;
    *:from_lease_pct) printf 'ratel\t%s_from_lease\t%s\t%%\n' "$f" "$v" ;;
    *:rateld_cpu_us) printf 'ratel\t%s_cpu_per_decision\t%s\tus\n' "$f" "$v" ;;
    *:redis_cpu_us) printf 'ratel\t%s_redis_cpu_per_decision\t%s\tus\n' "$f" "$v" ;;
    *) printf 'ratel\t%s\t%s\treq/s\n' "$f" "$v" ;;
    esac
done < <(awk '!seen[$1]++ { print $1 }' "$results") | tee "$tmp/figures"

# The median of the per-round ratios to the embedded store (each round's
# two figures taken seconds apart): steadier than the ratio of medians on
# a machine whose load drifts.
# The nginx cases against the module's zone.
for c in "${case_list[@]}"; do
    base=memory
    [[ $c == ngx_* ]] && base=ngx_zone
    [ "$c" = "$base" ] && continue
    paste <(awk -v k="$c" '$1 == k { print $2 }' "$results") \
        <(awk -v k="$base" '$1 == k { print $2 }' "$results") |
        awk '$2 > 0 { printf "%.4f\n", $1 / $2 }' | median |
        awk -v f="$(fig "$c")" '{ printf "ratel\t%s_per_base_paired\t%.2f\tx\n", f, $1 }'
done | tee -a "$tmp/figures"

echo
echo "# $build/bench_lease"
"$build/bench_lease" | tee -a "$tmp/figures"

echo
echo "## summary: leasing (medians of $rounds interleaved rounds; ratios within this run)"
awk -F'\t' '
    { v[$2] = $3 }
    function ratio(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.2f", v[a] / v[b]) : "n/a" }
    function met(x, op, target) {
        if (x == "n/a" || x == "") return "n/a"
        return (op == ">=" ? x + 0 >= target : x + 0 <= target) ? "yes" : "**no**"
    }
    # the ratio of the medians; the median of the per-round ratios
    function row(what, a, b, target) {
        r = ratio(a, b)
        p = (a "_per_base_paired") in v ? v[a "_per_base_paired"] : "n/a"
        printf "| %s | %s / %s | %s; %s | %s | %s |\n", what, v[a], v[b], r, p,
            target == "-" ? "-" : ">= " target, target == "-" ? "-" : met(r, ">=", target)
    }
    function fig(what, k, op, target) {
        printf "| %s | %s | | %s | %s |\n", what, (k in v) ? v[k] : "n/a",
            target == "-" ? "-" : op " " target,
            target == "-" ? "-" : met((k in v) ? v[k] : "n/a", op, target)
    }
    END {
        printf "| figure | this run | ratio (medians; per round) | wanted | met? |\n|---|---|---|---|---|\n"
        row("rateld req/s, Redis (module) with lease / embedded", "rateld_lease", "rateld_memory", 0.95)
        row("rateld req/s, Redis (module) with lease, max_slice 50 / embedded", "rateld_lease50", "rateld_memory", "-")
        row("rateld req/s, Redis (module) without lease / embedded", "rateld_redis", "rateld_memory", "-")
        row("rateld req/s, Functions library with lease / embedded", "rateld_lease_fn", "rateld_memory", 0.95)
        row("rateld req/s, Functions library without lease / embedded", "rateld_redis_fn", "rateld_memory", "-")
        row("nginx module req/s, Redis mode with lease / zone mode", "nginx_lease", "nginx_zone", 0.9)
        row("nginx module req/s, Redis mode without lease / zone mode", "nginx_redis", "nginx_zone", "-")
        fig("decisions per Redis call, nginx module, leased", "nginx_lease_decisions_per_redis_call", ">=", 50)
        fig("decisions per Redis call, module, leased, one hot key", "rateld_lease_decisions_per_redis_call", ">=", 50)
        fig("decisions per Redis call, Functions library, leased", "rateld_lease_fn_decisions_per_redis_call", ">=", 50)
        fig("decisions per Redis call, module, leased, max_slice 50", "rateld_lease50_decisions_per_redis_call", ">=", 50)
        fig("simulator, 1M decisions/s, 100 hosts, under the limit, max_slice 50: Redis calls in % of decisions", "lease_sim_1m_100h_s50_under_calls_pct", "<=", 2)
        fig("simulator, max_slice 50: the bound in % of one second (1000000/1s)", "lease_sim_1m_100h_s50_at_limit_bound_pct", "<=", 1)
        fig("simulator, under the limit, max_slice 500: Redis calls in % of decisions", "lease_sim_1m_100h_s500_under_calls_pct", "<=", 2)
        fig("simulator, max_slice 500: the bound in % of one second", "lease_sim_1m_100h_s500_at_limit_bound_pct", "<=", 1)
        fig("simulator, the key at its limit, max_slice 50: Redis calls in %", "lease_sim_1m_100h_s50_at_limit_calls_pct", "<=", "-")
        fig("simulator, the key at its limit, max_slice 500: Redis calls in %", "lease_sim_1m_100h_s500_at_limit_calls_pct", "<=", "-")
        printf "\nCPU a decision (us, medians), rateld or the nginx worker + redis-server:"
        n = split("rateld_memory rateld_redis rateld_lease rateld_lease50 rateld_redis_fn rateld_lease_fn nginx_zone nginx_redis nginx_lease", cs, " ")
        for (i = 1; i <= n; i++)
            if ((cs[i] "_cpu_per_decision") in v)
                printf " %s %s + %s;", cs[i], v[cs[i] "_cpu_per_decision"],
                    (cs[i] "_redis_cpu_per_decision") in v ? v[cs[i] "_redis_cpu_per_decision"] : 0
        printf "\n"
        printf "\nsimulator, worst 1 s window at the limit (1000000/1s): %s with max_slice 50 (bound %s), %s with 500 (bound %s)\n",
            v["lease_sim_1m_100h_s50_at_limit_worst_window"], v["lease_sim_1m_100h_s50_at_limit_bound"],
            v["lease_sim_1m_100h_s500_at_limit_worst_window"], v["lease_sim_1m_100h_s500_at_limit_bound"]
    }' "$tmp/figures"
