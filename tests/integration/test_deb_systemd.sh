#!/usr/bin/env bash
# test_deb_systemd.sh - the .deb route under a real systemd (docs/install.md,
# "Debian packages"; docs/deployment.md, "Running under systemd").
#
# The packages scripts/deb.sh built (test_deb.sh checks their contents) are
# installed with dpkg in a container: this machine's own OS, seen through
# an overlay whose writes go to a tmpfs (the host is never changed),
# booted by systemd-nspawn with a network of its own (loopback only) into
# a small target that runs one probe. The probe installs all seven
# packages, then sees what an operator sees: rateld.service and
# captchad.service started by the packages' maintainer scripts, each as a
# dynamic user without capabilities under a system-call filter;
# /healthz and a decision on the shipped configuration's port;
# `systemctl reload` taken, and refused on a broken file while the same
# process keeps serving; captchad's database in /var/lib/captchad; the
# man pages found by man(1); the nginx module enabled by its package in
# /etc/nginx/modules-enabled, so that the system's nginx, started on its
# own configuration plus a ratel server, limits with it; and a purge that
# stops the services and removes their units, configurations and the
# module's link. About 10 seconds.
#
# It needs root (mount, systemd-nspawn from systemd-container) and a
# machine, not a chroot: the kernel refuses the user namespace of the
# units' PrivateUsers=yes to a chrooted process (scripts/rehearse-minbase.sh
# runs the suite in one). Anywhere else it says why and checks nothing.
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" != 0 ]; then
    echo "skip: needs root (an overlay mount and systemd-nspawn)"
    finish
    exit 0
fi
if ischroot; then
    echo "skip: in a chroot, where the kernel refuses user namespaces (the units' PrivateUsers=yes)"
    finish
    exit 0
fi

out=$root/build/deb
if ! deb_out=$("$root/scripts/deb.sh" 2>&1); then
    fail deb_build "$(printf '%s\n' "$deb_out" | tail -20)"
    finish
    exit 1
fi

# The container's root: / below, a tmpfs above. Unmounted whatever happens,
# before lib.sh's cleanup removes $tmp.
boot=$tmp/boot
mkdir -p "$boot/layers" "$boot/root" "$boot/units" "$boot/out"
unmount() {
    umount "$boot/root" 2>/dev/null
    umount "$boot/layers" 2>/dev/null
}
trap 'unmount; cleanup' EXIT
mount -t tmpfs -o size=512m ratel-test "$boot/layers"
mkdir -p "$boot/layers/upper" "$boot/layers/work"
mount -t overlay ratel-test \
    -o "lowerdir=/,upperdir=$boot/layers/upper,workdir=$boot/layers/work" "$boot/root"

# A target of its own: nothing the host enables (its redis-server, nginx,
# ...) starts; only what the probe and the packages start.
cat >"$boot/units/ratel-test.target" <<'UNIT'
[Unit]
Description=ratel's package test
Requires=basic.target
After=basic.target
Wants=ratel-probe.service
UNIT
cat >"$boot/units/ratel-probe.service" <<'UNIT'
[Unit]
Description=ratel's package test probe
After=basic.target
[Service]
Type=oneshot
ExecStart=/bin/sh /out/probe.sh
UNIT

cat >"$boot/out/probe.sh" <<'PROBE'
out=/out/result
say() { printf '%s=%s\n' "$1" "$2" >>"$out"; }
prop() { systemctl show -p "$2" --value "$1"; }
proc() { sed -n "s/^$2:[[:space:]]*\([^[:space:]]*\).*/\1/p" "/proc/$1/status"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
wait_for() { # CMD...: polls CMD for up to 10 s
    i=0
    while [ $i -lt 200 ]; do "$@" && return 0; sleep 0.05; i=$((i + 1)); done
    return 1
}
say booted 1
# A container image's policy-rc.d (exit 101: start no service) is not what
# a Debian system has: without it the packages start their services.
rm -f /usr/sbin/policy-rc.d
dpkg -i /debs/libratel0_*.deb /debs/libratel-dev_*.deb /debs/ratel_*.deb \
    /debs/ratel-captchad_*.deb /debs/redis-ratel_*.deb /debs/ratel-lua_*.deb \
    /debs/libnginx-mod-http-ratel_*.deb >/out/dpkg.log 2>&1
say dpkg_rc $?
say installed "$(dpkg-query -W -f '${Package}=${db:Status-Status}\n' libratel0 libratel-dev ratel ratel-captchad redis-ratel ratel-lua libnginx-mod-http-ratel | LC_ALL=C sort | tr '\n' ' ')"
wait_for curl -sf -o /dev/null http://127.0.0.1:8080/healthz
wait_for curl -sf -o /dev/null http://127.0.0.1:8090/healthz
for u in rateld captchad; do
    pid=$(prop $u MainPID)
    say ${u}_active "$(systemctl is-active $u)"
    say ${u}_enabled "$(systemctl is-enabled $u)"
    say ${u}_uid "$(proc "$pid" Uid)"
    say ${u}_capeff "$(proc "$pid" CapEff)"
    say ${u}_seccomp "$(proc "$pid" Seccomp)"
    say ${u}_nonewprivs "$(proc "$pid" NoNewPrivs)"
    say ${u}_nofile "$(sed -n 's/^Max open files *\([0-9]*\) *\([0-9]*\).*/\1\/\2/p' "/proc/$pid/limits")"
done
say rateld_status "$(prop rateld StatusText)"
say rateld_healthz "$(code http://127.0.0.1:8080/healthz)"
say rateld_acquire "$(code 'http://127.0.0.1:8080/v1/acquire?policy=ping&key=k')"
say rateld_reset_refused "$(code -X POST -d '{"policy":"ping","key":"k"}' http://127.0.0.1:8080/v1/reset)"

pid=$(prop rateld MainPID)
systemctl reload rateld
say reload_rc $?
wait_for sh -c 'systemctl show -p StatusText --value rateld | grep -q "configuration reloaded"'
say reload_reached_rateld $?
cp /etc/ratel/rateld.yaml /tmp/rateld.yaml.good
printf 'policies: [\n' >>/etc/ratel/rateld.yaml
systemctl reload rateld 2>/dev/null
say reload_bad_rc $?
say reload_bad_active "$(systemctl is-active rateld)"
say reload_bad_same_pid "$([ "$(prop rateld MainPID)" = "$pid" ] && echo yes || echo no)"
say reload_bad_healthz "$(code http://127.0.0.1:8080/healthz)"
journalctl -u rateld --no-pager -o cat >/out/rateld.journal 2>&1
cp /tmp/rateld.yaml.good /etc/ratel/rateld.yaml

say captchad_send "$(curl -s -X POST -d '{"telephone":"13800138000"}' http://127.0.0.1:8090/captcha/send)"
wait_for test -s /var/lib/captchad/captcha-sms.log
say captchad_sms_log $?
say captchad_db "$(stat -L -c '%a' /var/lib/captchad/captchad.db)"
say man_rateld "$(man -w rateld 2>&1)"
say man_config "$(man -w 5 rateld.yaml 2>&1)"
say lua "$(ls /usr/share/ratel/lua | tr '\n' ' ')"

# The nginx module: its package linked the snippet into modules-enabled;
# the system's nginx, on its own nginx.conf (which includes
# modules-enabled and conf.d) plus a server using the module, limits.
say nginx_link "$(readlink /etc/nginx/modules-enabled/50-mod-http-ratel.conf)"
cat >/etc/nginx/conf.d/ratel-probe.conf <<'NGINX'
ratel_zone zone=probe:1m;
ratel_policy sms 1/60s;
server {
    listen 127.0.0.1:8095;
    location / { ratel zone=probe policy=sms key=$arg_phone; empty_gif; }
}
NGINX
nginx -t >/out/nginx-t.log 2>&1
say nginx_t $?
systemctl start nginx
say nginx_active "$(systemctl is-active nginx)"
wait_for curl -s -o /dev/null http://127.0.0.1:8095/
say nginx_limits "$(code 'http://127.0.0.1:8095/s?phone=1') $(code 'http://127.0.0.1:8095/s?phone=1') $(code 'http://127.0.0.1:8095/s?phone=2')"
systemctl stop nginx
rm /etc/nginx/conf.d/ratel-probe.conf
dpkg --purge libnginx-mod-http-ratel >/out/purge-nginx.log 2>&1
say nginx_purge_rc $?
say nginx_purged "$(ls /etc/nginx/modules-enabled/50-mod-http-ratel.conf /usr/lib/nginx/modules/ngx_http_ratel_module.so 2>&1 | grep -c 'No such file')"

dpkg --purge ratel ratel-captchad >/out/purge.log 2>&1
say purge_rc $?
say purged_rateld "$(systemctl is-active rateld) $(ls /lib/systemd/system/rateld.service /etc/ratel/rateld.yaml 2>&1 | grep -c 'No such file')"
say purged_port "$(code http://127.0.0.1:8080/healthz)"
say done 1
systemctl poweroff --no-block
PROBE

timeout -k 10 180 systemd-nspawn --quiet --keep-unit --register=no \
    --machine="ratel-deb-$$" --directory="$boot/root" --private-network \
    --bind-ro="$boot/units:/usr/local/lib/systemd/system" \
    --bind-ro="$out:/debs" --bind="$boot/out:/out" \
    --boot systemd.unit=ratel-test.target </dev/null >"$boot/console" 2>&1
result=$(cat "$boot/out/result" 2>/dev/null)
r() { sed -n "s/^$1=//p" <<<"$result" | head -1; }

same booted "$(r booted)" 1
if [ "$(r booted)" != 1 ]; then
    echo "console: $(tail -c 800 "$boot/console")"
    finish
    exit 1
fi
same dpkg_installs_all_seven "$(r dpkg_rc)" 0
same all_installed "$(r installed)" \
    "libnginx-mod-http-ratel=installed libratel-dev=installed libratel0=installed ratel-captchad=installed ratel-lua=installed ratel=installed redis-ratel=installed "
[ "$(r dpkg_rc)" = 0 ] || echo "dpkg: $(tail -15 "$boot/out/dpkg.log")"
for u in rateld captchad; do
    same "${u}_started_by_the_package" "$(r ${u}_active)" active
    same "${u}_enabled_by_the_package" "$(r ${u}_enabled)" enabled
    uid=$(r ${u}_uid)
    # systemd's dynamic users are 61184..65519.
    if [[ $uid =~ ^[0-9]+$ ]] && [ "$uid" -ge 61184 ] && [ "$uid" -le 65519 ]; then
        ok "${u}_dynamic_user"
    else
        fail "${u}_dynamic_user" "uid [$uid]"
    fi
    same "${u}_no_capabilities" "$(r ${u}_capeff)" 0000000000000000
    same "${u}_seccomp_filter" "$(r ${u}_seccomp)" 2
    same "${u}_no_new_privileges" "$(r ${u}_nonewprivs)" 1
    same "${u}_nofile" "$(r ${u}_nofile)" 16384/16384
done
contains rateld_status "$(r rateld_status)" "serving on port 8080"
same rateld_healthz "$(r rateld_healthz)" 200
same rateld_decides "$(r rateld_acquire)" 200
# The shipped configuration's admin_token is empty: reset is refused.
same rateld_reset_refused "$(r rateld_reset_refused)" 403
same reload_taken "$(r reload_rc)" 0
# The signal reached rateld: its sd_notify STATUS= says it reloaded.
same reload_reached_rateld "$(r reload_reached_rateld)" 0
if [ "$(r reload_bad_rc)" != 0 ]; then ok reload_broken_file_fails; else
    fail reload_broken_file_fails "systemctl reload succeeded on a broken file"; fi
same reload_broken_still_active "$(r reload_bad_active)" active
same reload_broken_same_process "$(r reload_bad_same_pid)" yes
same reload_broken_still_serves "$(r reload_bad_healthz)" 200
contains reload_broken_journal_names_line "$(cat "$boot/out/rateld.journal")" "rateld.yaml:"
contains captchad_sends "$(r captchad_send)" '"sent":true'
same captchad_sms_log_in_state_dir "$(r captchad_sms_log)" 0
same captchad_db_private "$(r captchad_db)" 600
same man_rateld_found "$(r man_rateld)" /usr/share/man/man8/rateld.8.gz
same man_rateld_yaml_found "$(r man_config)" /usr/share/man/man5/rateld.yaml.5.gz
same lua_installed "$(r lua)" "ratel.eval.lua ratel.lib.lua "
same nginx_module_enabled_by_the_package "$(r nginx_link)" \
    /usr/share/nginx/modules-available/mod-http-ratel.conf
same nginx_t_with_the_module "$(r nginx_t)" 0
[ "$(r nginx_t)" = 0 ] || echo "nginx -t: $(tail -5 "$boot/out/nginx-t.log")"
same nginx_started "$(r nginx_active)" active
same nginx_limits_with_the_module "$(r nginx_limits)" "200 429 200"
same nginx_module_purged "$(r nginx_purge_rc) $(r nginx_purged)" "0 2"
same purge_rc "$(r purge_rc)" 0
same purge_stops_and_removes "$(r purged_rateld)" "inactive 2"
same purge_frees_the_port "$(r purged_port)" 000
same probe_done "$(r 'done')" 1
same host_untouched "$(find /etc/ratel/rateld.yaml /lib/systemd/system/rateld.service 2>/dev/null)" ""

finish
