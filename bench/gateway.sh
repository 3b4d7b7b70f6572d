#!/usr/bin/env bash
# bench/gateway.sh - the user's real choice, measured in ONE run: a gateway
# asking rateld before serving, against the same gateway asking a trivial
# responder (the auth protocol's own ceiling), and against nginx's own
# limit_req. wrk -t1 -c50 against the gateway; one nginx worker; rateld
# and the responder with one thread each; empty_gif (nginx) or a
# `respond` (Caddy) as the protected content.
#
#   nginx -> auth_request -> rateld (embedded store)
#   nginx -> auth_request -> bench_http (always answers, no decision)
#   nginx limit_req alone (../shared/peers/run-peers.sh nginx PORT)
#   Caddy -> forward_auth -> rateld, and -> bench_http
#
# Allowed traffic (a rule that never denies) and denied traffic (a rule
# exhausted first: every request is refused with 429) are measured
# separately. ROUNDS rounds (3) interleave the targets, so that a noisy
# minute on this shared machine hits them all; medians are reported with
# the ratios.
#
# Prints "ratel|peer<TAB>NAME<TAB>VALUE<TAB>UNIT" lines, then a summary.
#   BUILD=build bench/gateway.sh      SECONDS_EACH=5 ROUNDS=3 by default
. "$(dirname "$0")/http_lib.sh"
secs=${SECONDS_EACH:-5}
rounds=${ROUNDS:-3}
rps() { # URL: requests/s under wrk -t1 -c50
    wrk -t1 -c50 -d"${secs}s" "$1" 2>&1 | awk '/Requests\/sec/ {print $2}'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for cmd in nginx caddy wrk; do
    command -v "$cmd" >/dev/null || { echo "# gateway bench skipped: $cmd missing (scripts/setup.sh)"; exit 0; }
done

machine_header
echo "# wrk -t1 -c50 -d${secs}s, $rounds interleaved rounds; one nginx worker; rateld threads: 1"

# start NAME CMD...: in the background, its pid kept.
start() {
    local name=$1; shift
    "$@" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
}

r403=$(free_port); r429=$(free_port); t403=$(free_port); t429=$(free_port)
rateld_config "$r403" 403 >"$tmp/r403.yaml"
rateld_config "$r429" 429 >"$tmp/r429.yaml"
start rateld403 "$build/rateld" --config "$tmp/r403.yaml"
start rateld429 "$build/rateld" --config "$tmp/r429.yaml"
start trivial403 env DENY_STATUS=403 "$build/bench_http" "$t403"
start trivial429 env DENY_STATUS=429 "$build/bench_http" "$t429"
for p in "$r403" "$r429"; do
    wait_http "http://127.0.0.1:$p/healthz" || { echo "rateld did not start"; cat "$tmp"/rateld*.log; exit 1; }
done

# nginx_conf PORT AUTH_PORT: docs/gateways.md's nginx snippet with
# empty_gif as the content.
nginx_conf() {
    local d=$tmp/nginx-$1
    mkdir -p "$d/logs"
    nginx_head "$d"
    awk '$0 == "<!-- snippet: nginx -->" { f = 1; next }
         f == 1 && /^```/ { f = 2; next } f == 2 && /^```/ { exit } f == 2' "$top/docs/gateways.md" |
        sed -e "s/127.0.0.1:8080/127.0.0.1:$2/; s/listen 8000;/listen 127.0.0.1:$1;/" \
            -e '/root \/srv\/www;/d' \
            -e 's/^\(        error_page 500 = @ratel_down;\)$/\1\n        empty_gif;/'
    echo "}"
}
n_rateld=$(free_port); n_trivial=$(free_port)
nginx_conf "$n_rateld" "$r403" >"$tmp/n_rateld.conf"
nginx_conf "$n_trivial" "$t403" >"$tmp/n_trivial.conf"
start nginx_rateld nginx -p "$tmp/nginx-$n_rateld" -c "$tmp/n_rateld.conf"
start nginx_trivial nginx -p "$tmp/nginx-$n_trivial" -c "$tmp/n_trivial.conf"

# Caddy: forward_auth and a `respond` as the content.
caddy_conf() {
    printf '{\n\tadmin off\n}\n:%s {\n\tforward_auth 127.0.0.1:%s {\n\t\turi /v1/auth\n\t}\n\trespond "GIF" 200\n}\n' "$1" "$2"
}
c_rateld=$(free_port); c_trivial=$(free_port)
mkdir -p "$tmp/caddy"
caddy_conf "$c_rateld" "$r429" >"$tmp/caddy/rateld.Caddyfile"
caddy_conf "$c_trivial" "$t429" >"$tmp/caddy/trivial.Caddyfile"
for c in rateld trivial; do
    start "caddy_$c" env HOME="$tmp/caddy" XDG_DATA_HOME="$tmp/caddy" XDG_CONFIG_HOME="$tmp/caddy" \
        caddy run --config "$tmp/caddy/$c.Caddyfile" --adapter caddyfile
done
for p in "$n_rateld" "$n_trivial" "$c_rateld" "$c_trivial"; do
    wait_http "http://127.0.0.1:$p/api/ping" || { echo "a gateway did not start"; tail -3 "$tmp"/*.log; exit 1; }
done

# Exhaust the deny rule; check that each set-up allows and denies.
curl -s -o /dev/null "http://127.0.0.1:$n_rateld/deny"
curl -s -o /dev/null "http://127.0.0.1:$c_rateld/deny"
for p in "$n_rateld" "$n_trivial" "$c_rateld" "$c_trivial"; do
    a=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/api/ping")
    d=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/deny")
    if [ "$a" != 200 ] || [ "$d" != 429 ]; then
        echo "# set-up on port $p answers $a (allowed) and $d (denied), not 200 and 429"; exit 1
    fi
done

declare -A got
for _ in $(seq "$rounds"); do
    for gw in nginx caddy; do
        for target in rateld trivial; do
            var=${gw:0:1}_$target
            port=${!var}
            got[${gw}_${target}_allowed]+=" $(rps "http://127.0.0.1:$port/api/ping")"
            got[${gw}_${target}_denied]+=" $(rps "http://127.0.0.1:$port/deny")"
        done
    done
    if [ -x "$peers_dir/run-peers.sh" ]; then
        out=$(PEER_SECONDS=$secs "$peers_dir/run-peers.sh" nginx "$(free_port)" 2>&1)
        got[limit_req_allowed]+=" $(awk -F'\t' '$2 == "nginx-limit-req/api/ping" {print $3}' <<<"$out")"
        got[limit_req_denied]+=" $(awk -F'\t' '$2 == "nginx-limit-req/sendCaptcha" {print $3}' <<<"$out")"
    fi
done

declare -A med
for k in "${!got[@]}"; do
    med[$k]=$(median <<<"${got[$k]}")
done
for k in $(printf '%s\n' "${!got[@]}" | sort); do
    who=ratel; [[ $k == limit_req* || $k == *trivial* ]] && who=peer
    printf '%s\tgateway_%s_rps\t%s\treq/s\t(rounds:%s)\n' "$who" "$k" "${med[$k]}" "${got[$k]}"
done

# ratio A B: median of A / median of B. paired A B: the median of the
# per-round ratios (each round's two figures were taken seconds apart, so
# this one follows the machine's drift less).
ratio() { awk -v a="${med[$1]:-0}" -v b="${med[$2]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
paired() {
    paste <(tr ' ' '\n' <<<"${got[$1]:-}" | grep -v '^$') <(tr ' ' '\n' <<<"${got[$2]:-}" | grep -v '^$') |
        awk '$2 > 0 { print $1 / $2 }' | median | awk '{ printf "%.2f", $1 }'
}
echo
echo "| gateway, traffic | via rateld (req/s) | via trivial responder | rateld / trivial (medians; per round) | nginx limit_req alone | rateld / limit_req (medians; per round) |"
echo "|---|---|---|---|---|---|"
for t in allowed denied; do
    printf '| nginx auth_request, %s | %s | %s | %s; %s | %s | %s; %s |\n' "$t" "${med[nginx_rateld_$t]}" \
        "${med[nginx_trivial_$t]}" "$(ratio nginx_rateld_$t nginx_trivial_$t)" \
        "$(paired nginx_rateld_$t nginx_trivial_$t)" \
        "${med[limit_req_$t]:-n/a}" "$(ratio nginx_rateld_$t limit_req_$t)" \
        "$(paired nginx_rateld_$t limit_req_$t)"
done
for t in allowed denied; do
    printf '| Caddy forward_auth, %s | %s | %s | %s; %s | | |\n' "$t" "${med[caddy_rateld_$t]}" \
        "${med[caddy_trivial_$t]}" "$(ratio caddy_rateld_$t caddy_trivial_$t)" \
        "$(paired caddy_rateld_$t caddy_trivial_$t)"
done
