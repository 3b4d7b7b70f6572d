#!/usr/bin/env bash
# --check-config runs the validation a start runs (the systemd units run it
# as ExecStartPre and before a reload): for rateld and captchad, every
# configuration in the table below is refused by a start, and refused by
# --check-config (exit 1) with the same message; a good one is "ok" and
# starts. The table: store URLs libratel refuses (a port out of range, an
# unclosed '[', an unknown query parameter, a db out of range, a cluster
# db, a Sentinel URL without its master, a TLS option on plain TCP, a TLS
# file that is not there, a client certificate without its key, an
# unknown scheme, no host, a pool of 0, a password that must not be
# printed), a listen host that does not resolve and, for rateld, an Envoy
# listener on the HTTP listener's own address. Nothing here needs a
# Redis: the store is made lazily, as a start makes it.
. "$(dirname "$0")/lib.sh"

require_built rateld captchad

# Each case: NAME|store.url (empty: a memory store)|listen|envoy.listen.
# A case the start refuses must be refused by --check-config alike.
cases=(
    "port_99999|redis://127.0.0.1:99999||"
    "unclosed_bracket|redis://[::1:6379||"
    "bogus_query|redis://127.0.0.1:6379?bogus=1||"
    "db_out_of_range|redis://127.0.0.1:6379/99||"
    "cluster_db|redis+cluster://127.0.0.1:7000/1||"
    "sentinel_no_master|redis+sentinel://127.0.0.1:26379||"
    "tls_option_plain|redis://127.0.0.1:6379?tls_insecure=yes||"
    "tls_ca_missing|rediss://127.0.0.1:6380?tls_ca_file=$tmp/none.crt||"
    "tls_cert_no_key|rediss://127.0.0.1:6380?tls_cert_file=/etc/ssl/certs/ca-certificates.crt||"
    "unknown_scheme|http://127.0.0.1:6379||"
    "no_host|redis://:6379||"
    "pool_0|redis://127.0.0.1:6379?pool=0||"
    "password_masked|redis://app:s3cretpw@127.0.0.1:99999||"
    "listen_unresolved||nosuchhost.invalid:18080|"
)
rateld_only=(
    "envoy_same_address||127.0.0.1:PORT|127.0.0.1:PORT"
    "envoy_same_by_name||127.0.0.1:PORT|localhost:PORT"
    "envoy_under_wildcard||:PORT|127.0.0.1:PORT"
)

mkdir -p "$tmp/erl"
printf 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n' >"$tmp/erl/d.yaml"

# config PROG URL LISTEN ENVOY: the configuration file of a case.
config() {
    local prog=$1 url=$2 listen=${3:-127.0.0.1:$port} envoy=$4 f=$tmp/$1.yaml
    {
        echo "listen: $listen"
        if [ -n "$url" ]; then
            printf 'store:\n  type: redis\n  url: "%s"\n' "$url"
        fi
        if [ "$prog" = rateld ]; then
            printf 'policies:\n  p:\n    rules: 1/1s\n'
            [ -n "$envoy" ] && printf 'envoy:\n  listen: %s\n  config_dir: %s\n' "$envoy" "$tmp/erl"
        else
            printf 'sqlite_path: %s\nsender:\n  type: log\n  log_file: %s\n' \
                "$tmp/captchad.db" "$tmp/captchad-sms.log"
        fi
    } >"$f"
    echo "$f"
}

# started_message PROG FILE: what a start says when it refuses FILE (its
# error line: the loader's "PROG: ..." or the log's reason="..."), or
# "started" when it started anyway (then stopped).
started_message() {
    local out line
    out=$(timeout 10 "$build/$1" --config "$2" 2>&1)
    if [ $? = 124 ]; then
        echo started
        return
    fi
    line=$(printf '%s\n' "$out" | grep -v 'level=warn' | grep -v 'level=info' | head -1)
    if [[ $line == *'level=error'* ]]; then
        # reason="..." with the log's escapes undone
        printf '%s\n' "$line" | sed -n 's/.* reason="\(.*\)"$/\1/p' | sed 's/\\"/"/g; s/\\\\/\\/g'
    else
        echo "${line#"$1: "}"
    fi
}

# check_case PROG NAME URL LISTEN ENVOY: the start refuses the case, and
# --check-config too, exit 1, with the start's message.
check_case() {
    local prog=$1 name=$2 f started checked rc
    f=$(config "$prog" "$3" "$4" "$5")
    started=$(started_message "$prog" "$f")
    checked=$("$build/$prog" --check-config "$f" 2>&1)
    rc=$?
    echo "# $prog $name: start: $started"
    if [ "$started" = started ] || [ -z "$started" ]; then
        fail "${prog}_${name}_start_refuses" "the start did not refuse it: [$started]"
        return
    fi
    same "${prog}_${name}_check_exit" "$rc" 1
    # The check says it as the start does ("PROG: FILE: " in front when
    # the start logged it instead).
    case $checked in
    "$prog: $started" | "$prog: $f: $started") ok "${prog}_${name}_same_message" ;;
    *) fail "${prog}_${name}_same_message" "check [$checked], start [$started]" ;;
    esac
    if [[ $checked == *s3cretpw* || $started == *s3cretpw* ]]; then
        fail "${prog}_${name}_no_password" "[$checked] [$started]"
    fi
}

port=$(free_port)
for prog in rateld captchad; do
    for c in "${cases[@]}"; do
        IFS='|' read -r name url listen envoy <<<"$c"
        check_case "$prog" "$name" "$url" "$listen" "$envoy"
    done
done
for c in "${rateld_only[@]}"; do
    IFS='|' read -r name url listen envoy <<<"${c//PORT/$port}"
    check_case rateld "$name" "$url" "$listen" "$envoy"
done

# A good configuration (a Redis store that is not running: a start does
# not need it, nor does the check): "ok", and it starts.
for prog in rateld captchad; do
    f=$(config "$prog" "redis://127.0.0.1:$(free_port)/2?timeout_ms=300" "" "")
    contains "${prog}_good_ok" "$("$build/$prog" --check-config "$f" 2>&1)" "$f: ok:"
    if server_start "$prog" "$port" "$build/$prog" --config "$f"; then
        ok "${prog}_good_starts"
        server_stop "$prog"
        same "${prog}_good_stops" "$stopped" 0
    else
        fail "${prog}_good_starts" "$(tail -3 "$tmp/$prog.log")"
    fi
done

finish
