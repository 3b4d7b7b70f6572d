#!/usr/bin/env bash
# test_setup.sh - scripts/setup.sh installs what building and running ratel
# needs, and with --test what the tests need, leaving none of the test
# set's servers enabled or running:
#
#   - its two package sets (setup_sets.py): the base set holds none of
#     nginx, Caddy, HAProxy, Prometheus, Redis (nor brings them), and
#     nothing the build, `make run` and `make install` do not use; the
#     check catches a test tool and nginx-dev moved into the base set;
#   - the commands the docs give: README's test command is .ci/run's,
#     byte for byte, and every page gives it with --test;
#   - as root (or with sudo): the servers put back as a fresh install
#     leaves them (enabled, HAProxy started by its service), then
#     `scripts/setup.sh --test` disables and stops every one: none enabled
#     (`systemctl is-enabled` where systemd is PID 1, else the links a boot
#     follows; deb-systemd-helper's was-enabled, which an upgrade asks, too)
#     and no process of theirs running with the package's configuration
#     (the tests' own servers, on configurations under /tmp, are left
#     alone); RATEL_KEEP_SERVICES leaves the servers it names as they are;
#     a second run has nothing to do.
#
#   BUILD=build bash tests/integration/test_setup.sh
. "$(dirname "$0")/lib.sh"

setup=$root/scripts/setup.sh
sets=$root/tests/integration/setup_sets.py
servers=(nginx caddy haproxy prometheus redis-server)

# ------------------------------------------------------ the package sets
# tally: setup_sets.py's `ok NAME: why` / `FAIL NAME: why` lines.
tally() {
    local word name why
    while read -r word name why; do
        case $word in
        ok) ok "${name%:} ($why)" ;;
        FAIL) fail "${name%:}" "$why" ;;
        esac
    done <<<"$1"
}
out=$(python3 "$sets" "$setup" "$root" 2>&1)
same sets_exit "$?" 0
tally "$out"
same sets_checked_every_base_package \
    "$(grep -c '^ok base_used_' <<<"$out")" \
    "$(sed -n '/^base_packages=(/,/^)/p' "$setup" | sed '1d;$d' | wc -w)"

# The check can fail: a test tool in the base set, and nginx-dev (which
# brings nginx).
sed -e 's/^\(    go-md2man git\)$/\1 valgrind/' -e '/^    valgrind$/d' "$setup" >"$tmp/setup-valgrind.sh"
contains catches_test_tool_in_base "$(python3 "$sets" "$tmp/setup-valgrind.sh" "$root" 2>&1)" \
    "FAIL base_used_valgrind: the build, \`make run\` and \`make install\` use nothing of it"
sed -e 's/^\(    libphonenumber-dev\)$/\1 nginx-dev/' -e 's/^    nginx-dev faketime$/    faketime/' \
    "$setup" >"$tmp/setup-nginx.sh"
contains catches_server_brought_by_base "$(python3 "$sets" "$tmp/setup-nginx.sh" "$root" 2>&1)" \
    "FAIL base_pulls_no_test_server: base set's Depends bring nginx"

# ------------------------------------------------------ the docs' commands
# The README's test command (its block's one line) and .ci/run's body.
readme_test=$(grep -x 'scripts/setup.sh.*make test.*' "$root/README.md")
ci_test=$(sed -n '/^run_tests() {$/,/^}$/p' "$root/.ci/run" | grep -v '^run_tests() {$' |
    grep -v '^}$' | grep -v '^ *#' | sed 's/^ *//')
same readme_test_command "$readme_test" "scripts/setup.sh --test && make test && make asan && make valgrind"
same ci_run_is_the_readme_command "$ci_test" "$readme_test"
# Every page that runs the tests sets them up with --test, and the run
# set-up without.
bare=$(cd "$root" && grep -n 'scripts/setup.sh && make \(test\|asan\|valgrind\|deb\|bench\|fuzz\)' \
    README.md README.zh-CN.md docs/*.md scripts/rehearse-minbase.sh || true)
same no_test_command_without_test_set "$bare" ""
same readme_run_command "$(grep -cx 'scripts/setup.sh && make run' "$root/README.md")" 1

# ------------------------------------------------------ the servers
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "# not root and no sudo without a password: the servers are not checked"
    finish
fi

systemd_runs() { [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; }
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }

# service_procs: "PACKAGE PID COMMAND" of each process of a test server
# that runs as the package's service does: its packaged configuration (or
# none named, which is the packaged one), or as the redis user. nginx's
# workers follow their master and are not listed.
service_procs() {
    local d exe cmd
    for d in /proc/[0-9]*; do
        exe=$("${as_root[@]}" readlink "$d/exe" 2>/dev/null) || continue
        cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
        case $exe in
        /usr/sbin/nginx)
            [[ $cmd == "nginx: worker"* || $cmd == "nginx: cache"* ]] && continue
            [[ $cmd == *" -c "* && $cmd != *" -c /etc/nginx/"* ]] || echo "nginx ${d#/proc/} $cmd"
            ;;
        /usr/bin/caddy)
            [[ $cmd == *--config* && $cmd != */etc/caddy/* ]] || echo "caddy ${d#/proc/} $cmd"
            ;;
        /usr/sbin/haproxy)
            [[ $cmd == *" -f "* && $cmd != *" -f /etc/haproxy/"* ]] || echo "haproxy ${d#/proc/} $cmd"
            ;;
        /usr/bin/prometheus)
            [[ $cmd == *--config.file* && $cmd != */etc/prometheus/* ]] || echo "prometheus ${d#/proc/} $cmd"
            ;;
        /usr/bin/redis-server | /usr/bin/redis-check-rdb)
            [ "$(stat -c %U "$d" 2>/dev/null)" = redis ] && echo "redis-server ${d#/proc/} $cmd"
            ;;
        esac
    done
    return 0
}

# enabled_how PACKAGE: how its service would start at boot, or nothing.
enabled_how() {
    local s=$1 l
    if systemd_runs; then
        l=$(systemctl is-enabled "$s.service" 2>/dev/null)
        [ "$l" = enabled ] && echo "systemctl is-enabled: $l"
    fi
    for l in /etc/systemd/system/*.wants/"$s.service" /etc/rc[2-5].d/S[0-9][0-9]"$s"; do
        [ -L "$l" ] && echo "$l"
    done
    if "${as_root[@]}" env DPKG_MAINTSCRIPT_PACKAGE="$s" deb-systemd-helper --quiet was-enabled "$s.service" 2>/dev/null &&
        "${as_root[@]}" env DPKG_MAINTSCRIPT_PACKAGE="$s" deb-systemd-helper --quiet debian-installed "$s.service" 2>/dev/null; then
        echo "deb-systemd-helper was-enabled"
    fi
    return 0
}

# One run at a time on a machine: the servers' state is the machine's.
lock_dir=/run/lock
[ -d "$lock_dir" ] || lock_dir=/tmp
exec 9>"$lock_dir/ratel-test-setup.lock"
flock -w 600 9 || { fail setup_lock "another test_setup.sh holds $lock_dir/ratel-test-setup.lock"; finish; }

# Whatever happens below, the servers end as the set-up leaves them.
quiet_again() { "${as_root[@]}" "$setup" --test >/dev/null 2>&1; }
trap 'quiet_again; cleanup' EXIT

present=()
for s in "${servers[@]}"; do
    installed "$s" && present+=("$s")
done
same servers_installed "${present[*]}" "${servers[*]}"

# As a fresh install leaves them: enabled (the links and deb-systemd-
# helper's record, or systemctl enable), HAProxy started by its service
# (Debian's haproxy.cfg listens nowhere).
for s in "${present[@]}"; do
    if systemd_runs; then
        "${as_root[@]}" systemctl enable --quiet "$s.service" 2>/dev/null
    fi
    # deb-systemd-helper enables on a first install, when it holds no
    # record of the unit (it keeps a disable an operator made): its record
    # goes, as before the package was installed.
    "${as_root[@]}" rm -f /var/lib/systemd/deb-systemd-helper-enabled/"$s.service.dsh-also" \
        /var/lib/systemd/deb-systemd-helper-enabled/*.wants/"$s.service"
    "${as_root[@]}" env DPKG_MAINTSCRIPT_PACKAGE="$s" deb-systemd-helper enable "$s.service" >/dev/null 2>&1
    if [ -x "/etc/init.d/$s" ]; then
        "${as_root[@]}" update-rc.d "$s" enable >/dev/null 2>&1
    fi
    [ -n "$(enabled_how "$s")" ] && ok "enabled_before_$s" || fail "enabled_before_$s" "could not enable it to start with"
done
if systemd_runs; then
    "${as_root[@]}" systemctl start haproxy.service
else
    "${as_root[@]}" /etc/init.d/haproxy start >/dev/null 2>&1
fi
wait_for 10 bash -c "$(declare -p as_root); $(declare -f service_procs); service_procs | grep -q '^haproxy '"
contains running_before_haproxy "$(service_procs)" "haproxy "

out=$("${as_root[@]}" "$setup" --test 2>&1)
same setup_test_exit "$?" 0
for s in "${present[@]}"; do
    contains "setup_says_$s" "$out" "setup: $s disabled and stopped"
    same "not_enabled_$s" "$(enabled_how "$s")" ""
done
same no_test_server_running "$(service_procs)" ""

# A server named in RATEL_KEEP_SERVICES is left as it is.
"${as_root[@]}" env DPKG_MAINTSCRIPT_PACKAGE=haproxy deb-systemd-helper enable haproxy.service >/dev/null 2>&1
"${as_root[@]}" update-rc.d haproxy enable >/dev/null 2>&1
if systemd_runs; then "${as_root[@]}" systemctl enable --quiet haproxy.service; fi
out=$("${as_root[@]}" env RATEL_KEEP_SERVICES="nginx haproxy" "$setup" --test 2>&1)
contains kept_service_untouched "$out" "nothing to do"
[ -n "$(enabled_how haproxy)" ] && ok kept_service_enabled || fail kept_service_enabled "haproxy was disabled"
out=$("${as_root[@]}" "$setup" --test 2>&1)
contains unkept_service_quieted "$out" "setup: haproxy disabled and stopped"

out=$("${as_root[@]}" "$setup" --test 2>&1)
same setup_again_exit "$?" 0
contains setup_again_nothing_to_do "$out" "already there, nothing to do"
out=$("${as_root[@]}" "$setup" 2>&1)
contains setup_base_nothing_to_do "$out" "already there, nothing to do"

finish
