#!/usr/bin/env bash
# The Debian packages (docs/install.md, "Debian packages"):
#
#  1. scripts/deb.sh builds them out of the tree (dpkg-buildpackage -b)
#     and lintian finds no error and no warning (its whole output shown).
#  2. Every package of debian/control was built, at debian/changelog's
#     version; libratel0's symbols file matches what the library exports.
#  3. Each package holds what it must (programs, units, man pages, the
#     library and its soname link, header, pkg-config file, modules, the
#     nginx module's modules-available snippet, Lua) and nothing it must
#     not (a static library or header in the runtime package, the build
#     directory's path in any file).
#  4. Control fields: Depends from the shared-library dependencies and,
#     for the nginx module, the nginx ABI it was built for (dh_nginx's,
#     from nginx-dev); Multi-Arch, conffiles, the systemd and nginx
#     maintainer scripts.
#  5. The packages' files, unpacked with dpkg-deb -x into a directory: the
#     shipped rateld and captchad accept the shipped /etc/ratel files and
#     rateld serves /healthz; redis-server loads the shipped module;
#     Debian's nginx loads the shipped nginx module through the shipped
#     snippet and limits with it; a C program builds with pkg-config
#     against the shipped library and header alone
#     (PKG_CONFIG_SYSROOT_DIR) and makes a decision.
#
# A full build is an LTO build of everything (about a minute on two
# cores); deb.sh skips it when build/deb/ holds packages of identical
# sources, so `make asan` after `make test` only checks again.
. "$(dirname "$0")/lib.sh"

out=$root/build/deb
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)
upstream=${version%-*}

# ------------------------------------------------------- 1. build, lintian
start=$(date +%s)
if deb_out=$("$root/scripts/deb.sh" 2>&1); then
    ok "deb.sh builds the packages and lintian passes"
else
    fail "deb.sh" "exit non-zero; its output follows"
    printf '%s\n' "$deb_out" | tail -80
    finish
    exit 1
fi
echo "deb.sh took $(($(date +%s) - start)) s"
echo "lintian's output (errors, warnings, info, pedantic, experimental):"
sed 's/^/  | /' "$out/lintian.txt"
tags=$(grep -cE '^[EW]: ' "$out/lintian.txt")
same "lintian errors and warnings" "$tags" 0

# ---------------------------------------------------- 2. packages, symbols
deb() { # PACKAGE: the path of its .deb
    local a=$arch
    [ "$1" = ratel-lua ] && a=all
    echo "$out/${1}_${version}_$a.deb"
}
packages=(ratel ratel-captchad libratel0 libratel-dev redis-ratel ratel-lua libnginx-mod-http-ratel)
same "debian/control's packages" \
    "$(sed -n 's/^Package: //p' "$root/debian/control" | sort | tr '\n' ' ')" \
    "$(printf '%s\n' "${packages[@]}" | sort | tr '\n' ' ')"
for p in "${packages[@]}"; do
    if [ -s "$(deb "$p")" ]; then ok "built $p"; else fail "built $p" "no $(deb "$p")"; fi
done
# A symbol the library gained or lost shows as a dpkg-gensymbols warning
# (a lost one fails the build itself): debian/libratel0.symbols is
# updated with the version that brought it, or the symbol was not meant
# to be public.
same "libratel0.symbols matches the library" \
    "$(grep -A20 'dpkg-gensymbols: warning' "$out/build.log")" ""

# --------------------------------------------------------- 3. file lists
files() { dpkg-deb -c "$(deb "$1")" | awk '{ print $6 }' | sed 's|^\./|/|'; }
has() { # PACKAGE PATH...: each path is in the package
    local p=$1 list f; shift
    list=$(files "$p")
    for f in "$@"; do
        if grep -qxF "$f" <<<"$list"; then ok "$p has $f"; else fail "$p has $f" "missing"; fi
    done
}
lacks() { # PACKAGE REGEX WHAT: no path of the package matches
    local bad
    bad=$(files "$1" | grep -E "$2")
    same "$1 has no $3" "$bad" ""
}
has ratel /usr/sbin/rateld /usr/bin/ratel /lib/systemd/system/rateld.service \
    /etc/ratel/rateld.yaml /usr/share/man/man8/rateld.8.gz \
    /usr/share/man/man1/ratel.1.gz /usr/share/man/man5/rateld.yaml.5.gz \
    /usr/share/ratel/examples/rateld.yaml \
    /usr/share/ratel/examples/gateways/ratel-haproxy.lua \
    /usr/share/ratel/grafana/rateld.json \
    /usr/share/ratel/prometheus/rateld.rules.yml
has ratel-captchad /usr/sbin/captchad /lib/systemd/system/captchad.service \
    /etc/ratel/captchad.yaml /usr/share/man/man8/captchad.8.gz
has libratel0 "/usr/lib/$ma/libratel.so.0" "/usr/lib/$ma/libratel.so.$upstream"
has libratel-dev /usr/include/ratel.h "/usr/lib/$ma/libratel.so" \
    "/usr/lib/$ma/libratel.a" "/usr/lib/$ma/pkgconfig/ratel.pc"
has redis-ratel /usr/lib/redis/modules/ratel.so
has ratel-lua /usr/share/ratel/lua/ratel.lib.lua /usr/share/ratel/lua/ratel.eval.lua
has libnginx-mod-http-ratel /usr/lib/nginx/modules/ngx_http_ratel_module.so \
    /usr/share/nginx/modules-available/mod-http-ratel.conf \
    /usr/share/doc/libnginx-mod-http-ratel/nginx.md.gz \
    /usr/share/doc/libnginx-mod-http-ratel/examples/sms.conf \
    /usr/share/doc/libnginx-mod-http-ratel/examples/redis.conf
lacks libratel0 '\.a$|\.h$|/libratel\.so$|\.pc$' "development file"
lacks ratel '/lib.*\.(so|a)(\.|$)|/include/' "library or header"
lacks redis-ratel "/usr/lib/$ma/" "file in the multiarch library directory"
lacks libnginx-mod-http-ratel "/usr/lib/$ma/|/etc/" "file in the multiarch library directory or /etc"
for p in "${packages[@]}"; do
    lacks "$p" '/build/|/usr/local/|/tmp/' "build or local path"
    has "$p" "/usr/share/doc/$p/copyright"
done

# ------------------------------------------------------ 4. control fields
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
contains "ratel Depends (shlibs)" "$(field ratel Depends)" "libhiredis"
contains "ratel Depends libsystemd0" "$(field ratel Depends)" "libsystemd0"
contains "ratel Depends libevent" "$(field ratel Depends)" "libevent"
contains "ratel-captchad Depends libsqlite3" "$(field ratel-captchad Depends)" "libsqlite3"
contains "ratel-captchad Depends libcurl" "$(field ratel-captchad Depends)" "libcurl"
contains "libratel0 Depends libhiredis" "$(field libratel0 Depends)" "libhiredis"
contains "libratel-dev Depends on this libratel0" "$(field libratel-dev Depends)" \
    "libratel0 (= $version)"
contains "redis-ratel Depends redis-server" "$(field redis-ratel Depends)" "redis-server (>= 5:7.0)"
# The nginx module depends on the ABI of the nginx it was built against,
# which nginx-dev names and Debian's nginx provides.
abi=$(sed -n 's/^nginx:abi=//p' /usr/share/nginx/src/debian/libnginx-mod.abisubstvars)
contains "libnginx-mod-http-ratel Depends the nginx ABI ($abi)" \
    "$(field libnginx-mod-http-ratel Depends)" "$abi"
# Its Redis mode links hiredis and OpenSSL (shlibs).
contains "libnginx-mod-http-ratel Depends libhiredis" "$(field libnginx-mod-http-ratel Depends)" "libhiredis"
contains "libnginx-mod-http-ratel Depends libssl" "$(field libnginx-mod-http-ratel Depends)" "libssl"
contains "the installed nginx provides $abi" "$(dpkg-query -W -f '${Provides}' nginx-common nginx-core nginx 2>/dev/null)" "$abi"
same "libnginx-mod-http-ratel Section" "$(field libnginx-mod-http-ratel Section)" httpd
same "libratel0 Multi-Arch" "$(field libratel0 Multi-Arch)" same
same "libratel-dev Multi-Arch" "$(field libratel-dev Multi-Arch)" same
same "ratel-lua Architecture" "$(field ratel-lua Architecture)" all
same "libratel0 Section" "$(field libratel0 Section)" libs
ctl=$tmp/control
control() { rm -rf "$ctl" && dpkg-deb -e "$(deb "$1")" "$ctl"; }
control ratel
same "ratel conffiles" "$(cat "$ctl/conffiles")" /etc/ratel/rateld.yaml
contains "ratel postinst enables rateld.service" "$(cat "$ctl/postinst")" \
    "deb-systemd-helper enable 'rateld.service'"
control ratel-captchad
same "ratel-captchad conffiles" "$(cat "$ctl/conffiles")" /etc/ratel/captchad.yaml
contains "ratel-captchad postinst enables captchad.service" "$(cat "$ctl/postinst")" \
    "deb-systemd-helper enable 'captchad.service'"
control libratel0
contains "libratel0 symbols file" "$(cat "$ctl/symbols")" \
    "libratel.so.0 libratel0 #MINVER#"
contains "libratel0 runs ldconfig" "$(cat "$ctl/triggers")" "activate-noawait ldconfig"
# dh_nginx's scripts: the snippet linked into modules-enabled on install
# (priority 50, as Debian's http modules), nginx reloaded by its trigger.
control libnginx-mod-http-ratel
contains "libnginx-mod-http-ratel postinst enables the snippet" "$(cat "$ctl/postinst")" \
    "mod-http-ratel.conf:50-mod-http-ratel.conf"
contains "libnginx-mod-http-ratel postinst reloads nginx" "$(cat "$ctl/postinst")" \
    "dpkg-trigger --no-await nginx-reload"
contains "libnginx-mod-http-ratel prerm removes the link" "$(cat "$ctl/prerm")" \
    "mod-http-ratel.conf:50-mod-http-ratel.conf"

# --------------------------------------------------- 5. the shipped files
sysroot=$tmp/root
mkdir -p "$sysroot"
for p in "${packages[@]}"; do
    dpkg-deb -x "$(deb "$p")" "$sysroot"
done
# No shipped file names the directory it was built in.
same "no file holds the build directory's path" \
    "$(grep -rlF "$out/src" "$sysroot" | sed "s|^$sysroot||")" ""

export LD_LIBRARY_PATH=$sysroot/usr/lib/$ma
same "rateld --version" "$("$sysroot/usr/sbin/rateld" --version)" "rateld $upstream"
same "ratel --version" "$("$sysroot/usr/bin/ratel" --version)" "ratel $upstream"
same "captchad --version" "$("$sysroot/usr/sbin/captchad" --version)" "captchad $upstream"
unit=$(cat "$sysroot/lib/systemd/system/rateld.service")
contains "rateld.service runs /usr/sbin/rateld on /etc/ratel" "$unit" \
    "ExecStart=/usr/sbin/rateld --config /etc/ratel/rateld.yaml"
for conf in rateld captchad; do
    prog=$sysroot/usr/sbin/$conf
    if msg=$("$prog" --check-config "$sysroot/etc/ratel/$conf.yaml" 2>&1); then
        ok "$conf --check-config on the shipped /etc/ratel/$conf.yaml"
    else
        fail "$conf --check-config" "$msg"
    fi
    # The services start at installation: no well-known example token.
    same "/etc/ratel/$conf.yaml has an empty admin_token" \
        "$(grep '^admin_token:' "$sysroot/etc/ratel/$conf.yaml")" 'admin_token: ""'
done

# The shipped rateld on the shipped configuration, on a free port.
port=$(free_port)
sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$sysroot/etc/ratel/rateld.yaml" >"$tmp/rateld.yaml"
"$sysroot/usr/sbin/rateld" --config "$tmp/rateld.yaml" >"$tmp/rateld.log" 2>&1 &
echo $! >"$tmp/pids/rateld"
health=""
for _ in $(seq 100); do
    health=$(curl -s "http://127.0.0.1:$port/healthz" 2>/dev/null) && [ -n "$health" ] && break
    sleep 0.1
done
if [ -n "$health" ]; then ok "the shipped rateld answers /healthz"; else
    fail "shipped rateld /healthz" "no answer; log: $(tail -5 "$tmp/rateld.log")"; fi

# redis-server loads the module from the package's path.
module=$sysroot/usr/lib/redis/modules/ratel.so
if rport=$(redis_start); then
    same "redis-server runs the shipped module" \
        "$(rcli "$rport" RATEL.ACQUIRE deb:k 2/1m | head -1)" 1
else
    fail "redis-server with the shipped module" "did not start"
fi
same "the module exports RedisModule_OnLoad only" \
    "$(nm -D --defined-only "$module" | awk '{ print $3 }')" RedisModule_OnLoad

# Debian's nginx loads the shipped module through the shipped snippet, as
# the link the postinst makes in /etc/nginx/modules-enabled would: the
# snippet names modules/ under nginx's prefix, a link to
# /usr/lib/nginx/modules (nginx-common's), here to the unpacked one.
snippet=$sysroot/usr/share/nginx/modules-available/mod-http-ratel.conf
same "the shipped snippet" "$(cat "$snippet")" "load_module modules/ngx_http_ratel_module.so;"
ngx=$tmp/nginx
mkdir -p "$ngx/logs"
ln -s "$sysroot/usr/lib/nginx/modules" "$ngx/modules"
nport=$(free_port)
cat >"$ngx/nginx.conf" <<EOF
include $snippet;
worker_processes 1;
daemon off;
pid $ngx/nginx.pid;
events {}
http {
    access_log off;
    ratel_zone zone=deb:1m;
    # The Redis mode is built in: nginx -t accepts a store (checked, not
    # connected to; no location uses it).
    ratel_zone zone=shared:1m store=redis://127.0.0.1:6379;
    ratel_policy sms 1/60s 10/1d:fixed,tz=+08:00;
    server {
        listen 127.0.0.1:$nport;
        location / { ratel zone=deb policy=sms key=\$arg_phone; empty_gif; }
    }
}
EOF
ngx_t=$(nginx -t -p "$ngx" -e "$ngx/logs/error.log" -c "$ngx/nginx.conf" 2>&1)
same "nginx -t loads the shipped nginx module" "$?" 0
contains "nginx -t is successful" "$ngx_t" "test is successful"
nginx -p "$ngx" -e "$ngx/logs/error.log" -c "$ngx/nginx.conf" >"$ngx/logs/stderr" 2>&1 &
echo $! >"$tmp/pids/nginx"
ngx_code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/send?phone=$1"; }
if wait_for 5 curl -s -o /dev/null "http://127.0.0.1:$nport/"; then
    same "the shipped nginx module allows a first SMS, refuses a second" \
        "$(ngx_code 13800138000) $(ngx_code 13800138000) $(ngx_code 13900139000)" "200 429 200"
else
    fail "nginx with the shipped module" "did not start: $(tail -3 "$ngx/logs/error.log")"
fi
# nginx looks up these four; libratel's symbols stay inside the module.
same "the nginx module exports what nginx looks up only" \
    "$(nm -D --defined-only "$sysroot/usr/lib/nginx/modules/ngx_http_ratel_module.so" | awk '{ print $3 }' | sort | tr '\n' ' ')" \
    "ngx_http_ratel_module ngx_module_names ngx_module_order ngx_modules "

# A C program with pkg-config and the shipped header and library only.
# ratel.pc from the unpacked files (the system's own .pc files after it,
# for what it may require); the sysroot prefixes its -I and -L.
flags=$(PKG_CONFIG_SYSROOT_DIR=$sysroot \
    PKG_CONFIG_LIBDIR=$sysroot/usr/lib/$ma/pkgconfig:/usr/lib/$ma/pkgconfig:/usr/share/pkgconfig \
    pkg-config --cflags --libs ratel 2>&1)
read -r -a flag_words <<<"$flags"
if cc -o "$tmp/decide" "$root/tests/integration/pkgconfig_user.c" "${flag_words[@]}" 2>"$tmp/cc.err"; then
    ok "a program builds with pkg-config against libratel-dev"
    same "it runs on libratel0 and decides" "$("$tmp/decide" 2>&1)" "1 0 59000 $upstream"
    contains "it links the shipped soname" "$(readelf -d "$tmp/decide")" "[libratel.so.0]"
else
    fail "build with pkg-config ($flags)" "$(head -5 "$tmp/cc.err")"
fi

finish
