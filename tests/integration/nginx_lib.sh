# nginx_lib.sh - what the suites that run Debian's nginx share
# (test_nginx_module.sh, test_nginx_redis.sh, test_gateway_nginx.sh,
# test_install.sh): the module's path, the sanitizers' runtime preloaded
# into nginx when the module carries it (`make asan`: nginx is not built
# with the sanitizers), one nginx.conf head, start and stop, and the
# valgrind run. Source it after lib.sh (or gateway_lib.sh):
#
#   nginx_require FILE...                  # else one FAIL and exit
#   nginx_conf DIR WORKERS [TOP] <<EOF     # DIR/nginx.conf: the head, then
#       ...lines inside http { }...        # these lines, then the closing
#   EOF                                    # brace
#   nginx_start DIR URL [WRAPPER...]       # nginx on it, until URL answers
#   nginx_stop DIR                         # a graceful stop, then insists
#   ngx -t -p DIR -c DIR/nginx.conf        # nginx, with the preload
#   nginx_valgrind_only FUNCTION           # RATEL_NGINX_VALGRIND=1: FUNCTION
#                                          # alone, then the suite ends
#   nginx_start DIR URL "${nginx_valgrind[@]}" --log-file=LOG
#   nginx_valgrind_clean LOG               # no report in ratel's frames
#   nginx_sanitizers_quiet                 # no sanitizer report in any log
#
# nginx_module is the module nginx_conf loads and the preload is for
# ($nginx_so unless the suite empties it: no module, no preload);
# nginx_faketime, when set, is a library preloaded before the
# sanitizers' runtime (libfaketime: the other way round they hang at
# start, which ASan accepts when told not to check the order).

# shellcheck shell=bash
# shellcheck disable=SC2154 # $build and $tmp: lib.sh's, sourced first
nginx_so=$build/nginx/ngx_http_ratel_module.so
nginx_module=$nginx_so
nginx_faketime=
# nginx's own allocations are not freed at exit, and libfaketime comes
# first: for nginx only, no leak report and no check of the order.
nginx_asan_options=${ASAN_OPTIONS:-detect_leaks=0:verify_asan_link_order=0}

# nginx_preload_for SO: the sanitizers' runtime libraries SO needs,
# space-separated; nothing for a module built without them.
nginx_preload_for() {
    local lib out=
    for lib in libasan libubsan; do
        if ldd "$1" 2>/dev/null | grep -q "$lib"; then
            out="$out $(${CC:-cc} -print-file-name="$lib.so")"
        fi
    done
    echo "${out# }"
}
nginx_sanitizers=$(nginx_preload_for "$nginx_so")

# nginx_preload: nginx's LD_PRELOAD: $nginx_faketime, then the
# sanitizers' runtime when nginx loads the module.
nginx_preload() {
    local p=$nginx_faketime
    [ -n "$nginx_module" ] && [ -n "$nginx_sanitizers" ] && p="${p:+$p }$nginx_sanitizers"
    echo "$p"
}

# ngx ARGS...: nginx, with its preload.
ngx() {
    local preload
    preload=$(nginx_preload)
    env ASAN_OPTIONS="$nginx_asan_options" ${preload:+LD_PRELOAD="$preload"} nginx "$@"
}

# nginx_require FILE...: ends the suite (one failure) unless nginx and
# every FILE are there.
nginx_require() {
    local f missing=
    command -v nginx >/dev/null || missing=nginx
    for f in "$@"; do
        [ -e "$f" ] || missing="${missing:+$missing, }$f"
    done
    if [ -n "$missing" ]; then
        echo "FAIL missing: $missing (scripts/setup.sh, make)"
        echo "0 passed, 1 failed"
        exit 1
    fi
}

# nginx_conf DIR WORKERS [TOP]: DIR/nginx.conf with the module loaded,
# TOP (e.g. "master_process off;"), WORKERS worker processes, pid and
# logs under DIR, and an http block with the access log in the `ratel`
# format (the module's variables in it) and nginx's temporary files
# under DIR; the http block's own lines come from stdin.
nginx_conf() {
    local dir=$1 vars=
    mkdir -p "$dir/logs"
    # shellcheck disable=SC2016 # nginx's variables, for its log format
    [ -n "$nginx_module" ] && vars=' $ratel_status $ratel_remaining $ratel_retry_after'
    {
        [ -n "$nginx_module" ] && echo "load_module $nginx_module;"
        [ -n "${3:-}" ] && echo "$3"
        [ "$(id -u)" = 0 ] && echo "user root;"
        cat <<CONF
# nginx clears its workers' environment but for these: the clock's
# settings and the sanitizers'.
env FAKETIME_TIMESTAMP_FILE;
env FAKETIME_NO_CACHE;
env FAKETIME_DONT_FAKE_MONOTONIC;
env ASAN_OPTIONS;
worker_processes $2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log info;
events { worker_connections 512; }
http {
    log_format ratel '\$pid \$request_uri \$status$vars';
    access_log $dir/logs/access.log ratel;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
CONF
        cat
        echo "}"
    } >"$dir/nginx.conf"
}

# nginx_start DIR URL [WRAPPER...]: nginx on DIR/nginx.conf in the
# foreground of a background job (the EXIT trap stops it), WRAPPER (e.g.
# valgrind) before it, its output in DIR/out.log; waits until URL
# answers (60 s at most: under valgrind nginx starts slowly). 1, after a
# failure with the end of its logs, when nginx exits or does not answer.
nginx_start() {
    local dir=$1 url=$2 preload pid
    shift 2
    preload=$(nginx_preload)
    env ASAN_OPTIONS="$nginx_asan_options" ${preload:+LD_PRELOAD="$preload"} "$@" \
        nginx -g 'daemon off;' -p "$dir" -c "$dir/nginx.conf" >"$dir/out.log" 2>&1 &
    pid=$!
    echo "$pid" >"$tmp/pids/nginx-${dir##*/}"
    wait_up "$pid" "$url" 60 && return 0
    fail "nginx_${dir##*/}_start" "$(tail -5 "$dir/out.log" "$dir/logs/error.log" 2>&1 | tr '\n' ' ')"
    return 1
}

# nginx_workers DIR: the pids of the workers of the nginx whose pid is in
# DIR/nginx.pid, one a line (the 4th field of a process's stat is its
# parent; cat, not awk, reads them: a process may end meanwhile).
nginx_workers() {
    cat /proc/[0-9]*/stat 2>/dev/null | awk -v p="$(cat "$1/nginx.pid")" '$4 == p { print $1 }'
}

# nginx_stop DIR: a graceful stop (QUIT: under valgrind the process ends
# as it would in service), insisting after 30 s.
nginx_stop() {
    local pid
    pid=$(cat "$tmp/pids/nginx-${1##*/}")
    kill -QUIT "$pid" 2>/dev/null
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# valgrind's command line for nginx (add --log-file=LOG): errors and
# definite leaks, with the module's symbols kept after it is unloaded;
# what libraries keep for the life of the process on purpose
# (libphonenumber's singleton: tests/valgrind.supp) is not reported.
# shellcheck disable=SC2034 # for the suites: nginx_start DIR URL "${nginx_valgrind[@]}"
nginx_valgrind=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite --keep-debuginfo=yes
    --suppressions="$root/tests/valgrind.supp")

# nginx_valgrind_only FUNCTION: with RATEL_NGINX_VALGRIND=1
# (tests/valgrind.sh), runs FUNCTION alone, or says why it cannot, and
# ends the suite; without it, nothing.
nginx_valgrind_only() {
    [ "${RATEL_NGINX_VALGRIND:-0}" = 1 ] || return 0
    if [ -n "$nginx_sanitizers" ]; then
        echo "# skipped: this module is built with the sanitizers (valgrind and ASan do not mix)"
    else
        "$1"
    fi
    finish
    exit
}

# nginx_valgrind_clean LOG: valgrind's LOG names none of ratel's frames
# (the module's, libratel's, hiredis's); nginx's own leaks at exit are
# not ours.
nginx_valgrind_clean() {
    local frames='ngx_http_ratel|ratel_|hiredis'
    if [ ! -f "$1" ]; then
        fail valgrind_ran "no $1"
    elif grep -qE "$frames" "$1"; then
        fail valgrind_clean "$(grep -B3 -A12 -E "$frames" "$1" | head -40)"
    else
        ok valgrind_clean
    fi
}

# nginx_sanitizers_quiet: under `make asan`, no nginx of the suite wrote
# a sanitizer's report.
nginx_sanitizers_quiet() {
    [ -n "$nginx_sanitizers" ] || return 0
    same sanitizers_quiet "$(cat "$tmp"/*/out.log "$tmp"/*/logs/error.log 2>/dev/null |
        grep -cE 'Sanitizer|runtime error')" 0
}
