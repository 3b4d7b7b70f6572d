#!/usr/bin/env bash
# test_install.sh - `make install` and `make uninstall` into a DESTDIR, as an
# operator or a packager runs them: the installed rateld serves its
# installed configuration, redis-server loads the module from where it was
# installed, Debian's nginx loads the nginx module through the installed
# modules-available snippet, a C program outside the tree builds with nothing but
# `pkg-config --cflags --libs ratel` (and --static) and decides, the Lua
# library loads, and uninstall leaves no file behind. docs/install.md.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nginx_lib.sh"

# Under `make asan` the library is instrumented: the user's program is built
# with the same sanitizers (SANITIZE comes from make's command line).
read -r -a san <<<"${SANITIZE:-}"

mk() { make -s --no-print-directory -C "$root" BUILD="$build" "$@" >"$tmp/make.out" 2>&1 || cat "$tmp/make.out"; }

# ------------------------------------------------- PREFIX=/usr, sysconfdir=/etc
d=$tmp/root
mk install DESTDIR="$d" PREFIX=/usr sysconfdir=/etc
(cd "$d" && find . \( -type f -o -type l \) | sed 's|^\./|/|' | sort) >"$tmp/files"
same usr_layout "$(cat "$tmp/files")" "$(printf '%s\n' \
    /etc/ratel/captchad.yaml /etc/ratel/rateld.yaml \
    /usr/bin/ratel /usr/include/ratel.h \
    /usr/lib/libratel.a /usr/lib/libratel.so /usr/lib/libratel.so.0 \
    "/usr/lib/libratel.so.$(sed -n 's/^#define RATEL_VERSION "\(.*\)"/\1/p' "$root/include/ratel.h")" \
    /usr/lib/nginx/modules/ngx_http_ratel_module.so \
    /usr/lib/pkgconfig/ratel.pc /usr/lib/redis/modules/ratel.so \
    /usr/lib/systemd/system/captchad.service /usr/lib/systemd/system/rateld.service \
    /usr/sbin/captchad /usr/sbin/rateld \
    /usr/share/ratel/examples/captchad.yaml \
    /usr/share/ratel/examples/gateways/ratel-haproxy.lua \
    /usr/share/ratel/examples/rateld.yaml \
    /usr/share/ratel/grafana/rateld.json /usr/share/ratel/prometheus/rateld.rules.yml \
    /usr/share/ratel/lua/ratel.eval.lua /usr/share/ratel/lua/ratel.lib.lua \
    /usr/share/man/man1/ratel.1 /usr/share/man/man5/rateld.yaml.5 \
    /usr/share/man/man8/captchad.8 /usr/share/man/man8/rateld.8 \
    /usr/share/nginx/modules-available/mod-http-ratel.conf | sort)"
same soname "$(readelf -d "$d/usr/lib/libratel.so.0" | sed -n 's/.*soname: \[\(.*\)\]/\1/p')" libratel.so.0
same module_mode "$(stat -c %a "$d/usr/lib/redis/modules/ratel.so") $(stat -c %a "$d/usr/sbin/rateld")" "755 755"
contains unit_paths "$(grep '^ExecStart=' "$d/usr/lib/systemd/system/rateld.service")" \
    "ExecStart=/usr/sbin/rateld --config /etc/ratel/rateld.yaml"
contains pc_prefix "$(cat "$d/usr/lib/pkgconfig/ratel.pc")" "libdir=/usr/lib"
# The installed man pages: man(1) finds each by name under the installed
# tree and renders it without a warning from groff.
for page in rateld.8 ratel.1 rateld.yaml.5 captchad.8; do
    name=${page%.*} section=${page##*.}
    out=$(MANPATH=$d/usr/share/man MANWIDTH=80 man --warnings "$section" "$name" 2>&1 >/dev/null)
    same "man_${name}_renders_cleanly" "$out" ""
    contains "man_${name}_found" "$(MANPATH=$d/usr/share/man man -w "$section" "$name" 2>&1)" \
        "$d/usr/share/man/man$section/$page"
done

# The installed rateld on the installed configuration (only its port moved).
port=$(free_port)
sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$d/etc/ratel/rateld.yaml" >"$tmp/rateld.yaml"
same config_only_port_changed "$(diff "$d/etc/ratel/rateld.yaml" "$tmp/rateld.yaml" | grep -c '^[<>]')" 2
"$d/usr/sbin/rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
echo $! >"$tmp/pids/rateld"
code=000
for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz") && [ "$code" = 200 ] && break
    sleep 0.1
done
same installed_rateld_healthz "$code" 200
same installed_rateld_decides "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/acquire?policy=ping&key=i")" 200
same installed_rateld_version "$("$d/usr/sbin/rateld" --version | head -1 | grep -c ratel)" 1

# No default secret: the installed configurations carry an empty token, so
# what it guards is off (reset 403 whatever the token sent) ...
same installed_tokens_empty "$(grep -h '^admin_token:' "$d/etc/ratel/rateld.yaml" "$d/etc/ratel/captchad.yaml")" \
    'admin_token: ""
admin_token: ""'
same installed_reset_off "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer change-me-to-a-long-random-string' \
    -d '{"policy":"ping","key":"i"}' "http://127.0.0.1:$port/v1/reset")" 403
# ... and the token the docs print, written into them, stops the start
# with the reason.
sed 's/^admin_token: .*/admin_token: "change-me-to-a-long-random-string"/' "$tmp/rateld.yaml" >"$tmp/printed.yaml"
out=$("$d/usr/sbin/rateld" --config "$tmp/printed.yaml" 2>&1)
same installed_printed_token_exit "$?" 1
contains installed_printed_token_reason "$out" \
    'admin_token: "change-me-to-a-long-random-string" is the example token printed in ratel'"'"'s documentation'
sed 's/^admin_token: .*/admin_token: "change-me"/' "$d/etc/ratel/captchad.yaml" >"$tmp/captchad-printed.yaml"
out=$("$d/usr/sbin/captchad" --check-config "$tmp/captchad-printed.yaml" 2>&1)
contains installed_captchad_printed_token "$out" 'admin_token: "change-me" is the example token printed'

# redis-server loads the module from its installed path; the installed
# Lua library loads with FUNCTION LOAD.
rport=$(RATEL_MODULE="$d/usr/lib/redis/modules/ratel.so" redis_start)
same installed_module_acquire "$(rcli "$rport" RATEL.ACQUIRE k 1/1m | head -1)" 1
same installed_module_denies "$(rcli "$rport" RATEL.ACQUIRE k 1/1m | head -1)" 0
same installed_lua_loads "$(rcli "$rport" FUNCTION LOAD REPLACE "$(cat "$d/usr/share/ratel/lua/ratel.lib.lua")")" ratel
same installed_lua_fcall "$(rcli "$rport" FCALL ratel_acquire 1 f 1/1m | head -1)" 1

# Debian's nginx loads the installed module through the installed snippet,
# as /etc/nginx/modules-enabled's link to it would: the snippet names the
# module relative to nginx's prefix, whose modules/ is a link to
# /usr/lib/nginx/modules (nginx-common's), here to the DESTDIR's. `nginx
# -t` then accepts the module's directives (without the module they are
# "unknown directive").
snippet=$d/usr/share/nginx/modules-available/mod-http-ratel.conf
same nginx_snippet "$(cat "$snippet")" "load_module modules/ngx_http_ratel_module.so;"
mkdir -p "$tmp/nginx/logs"
ln -s "$d/usr/lib/nginx/modules" "$tmp/nginx/modules"
cat >"$tmp/nginx/nginx.conf" <<EOF
include $snippet;
pid $tmp/nginx/nginx.pid;
events {}
http {
    ratel_zone zone=installed:1m;
    ratel_policy sms 1/60s 10/1d:fixed,tz=+08:00;
    server {
        listen 127.0.0.1:$(free_port);
        location / { ratel zone=installed policy=sms key=\$arg_phone; empty_gif; }
    }
}
EOF
# Under `make asan` the module carries the sanitizers: nginx (not built
# with them) runs with their runtime preloaded.
preload=$(nginx_preload_for "$d/usr/lib/nginx/modules/ngx_http_ratel_module.so")
out=$(env ${preload:+LD_PRELOAD="$preload"} ASAN_OPTIONS="$nginx_asan_options" \
    nginx -t -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx/nginx.conf" 2>&1)
same nginx_loads_installed_module "$?" 0
contains nginx_t_successful "$out" "test is successful"

# A C program outside the tree, built with pkg-config alone.
mkdir -p "$tmp/user"
cp "$root/tests/integration/pkgconfig_user.c" "$tmp/user/prog.c"
export PKG_CONFIG_PATH="$d/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$d"
version=$(pkg-config --modversion ratel)
same pkgconfig_version "$version" "$(sed -n 's/^#define RATEL_VERSION "\(.*\)"/\1/p' "$root/include/ratel.h")"
# shellcheck disable=SC2046 # pkg-config's flags, a word each
(cd "$tmp/user" && cc "${san[@]}" -o prog prog.c $(pkg-config --cflags --libs ratel)) >"$tmp/cc.out" 2>&1
same pkgconfig_build "$(cat "$tmp/cc.out")" ""
same needs_soname "$(readelf -d "$tmp/user/prog" 2>/dev/null | sed -n 's/.*Shared library: \[\(libratel[^]]*\)\]/\1/p')" libratel.so.0
same dynamic_decides "$(LD_LIBRARY_PATH="$d/usr/lib" "$tmp/user/prog" 2>&1)" "1 0 59000 $version"
# shellcheck disable=SC2046 # pkg-config's flags, a word each
(cd "$tmp/user" && cc "${san[@]}" -o prog-static prog.c -Wl,-Bstatic $(pkg-config --cflags --libs-only-L ratel) -lratel -Wl,-Bdynamic $(pkg-config --static --libs-only-l ratel | sed 's/-lratel//')) >"$tmp/cc.out" 2>&1
same static_build "$(cat "$tmp/cc.out")" ""
same static_no_libratel_needed "$(readelf -d "$tmp/user/prog-static" | grep -c 'libratel')" 0
same static_decides "$("$tmp/user/prog-static" 2>&1)" "1 0 59000 $version"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# A changed configuration survives uninstall (and a second install keeps it).
echo "# mine" >>"$d/etc/ratel/captchad.yaml"
contains reinstall_keeps_config "$(make -s --no-print-directory -C "$root" BUILD="$build" install DESTDIR="$d" PREFIX=/usr sysconfdir=/etc 2>&1)" \
    "/etc/ratel/captchad.yaml exists: kept"
same reinstall_kept "$(tail -1 "$d/etc/ratel/captchad.yaml")" "# mine"
contains uninstall_says_kept "$(make -s --no-print-directory -C "$root" BUILD="$build" uninstall DESTDIR="$d" PREFIX=/usr sysconfdir=/etc 2>&1)" \
    "/etc/ratel/captchad.yaml was changed: kept"
same uninstall_leaves_only_changed_config "$(cd "$d" && find . \( -type f -o -type l \) | sort)" "./etc/ratel/captchad.yaml"
rm "$d/etc/ratel/captchad.yaml"
mk uninstall DESTDIR="$d" PREFIX=/usr sysconfdir=/etc
same uninstall_removes_ratel_dirs "$(cd "$d" && find . -path '*ratel*' | sort)" ""

# ------------------------------------------------- the default, /usr/local
d=$tmp/local
mk install DESTDIR="$d"
same local_layout "$(cd "$d" && find . \( -type f -o -type l \) | grep -c '^\./usr/local/')" "$(wc -l <"$tmp/files")"
same local_config "$(test -f "$d/usr/local/etc/ratel/rateld.yaml" && echo yes)" yes
# Outside nginx's modules directory the snippet names the module's full path.
same local_nginx_snippet "$(cat "$d/usr/local/share/nginx/modules-available/mod-http-ratel.conf")" \
    "load_module /usr/local/lib/nginx/modules/ngx_http_ratel_module.so;"
contains local_pc "$(cat "$d/usr/local/lib/pkgconfig/ratel.pc")" "includedir=/usr/local/include"
mk uninstall DESTDIR="$d"
same local_uninstall_leaves_nothing "$(cd "$d" && find . \( -type f -o -type l \) | wc -l)" 0

finish
