#!/bin/sh
# scripts/install.sh install|uninstall - what `make install` and `make
# uninstall` run. One manifest below names every installed file, so the
# two can never disagree about what ratel puts on a system.
#
# The Makefile passes the directories in the environment: BUILD, DESTDIR,
# VERSION, SONAME, prefix, bindir, sbindir, libdir, includedir, datadir,
# sysconfdir, pkgconfigdir, redismoduledir, nginxmoduledir, nginxconfdir,
# systemdunitdir, mandir (docs/install.md). Paths with
# spaces are not supported.
set -eu
action=${1:-}
case $action in
install | uninstall) ;;
*) echo "usage: $0 install|uninstall" >&2; exit 2 ;;
esac
# Each of them set (empty is allowed, as for DESTDIR), checked before the
# first file is touched: set -u alone would stop halfway through an install.
: "${BUILD?}" "${DESTDIR?}" "${VERSION?}" "${SONAME?}" "${prefix?}" \
    "${bindir?}" "${sbindir?}" "${libdir?}" "${includedir?}" "${datadir?}" \
    "${sysconfdir?}" "${pkgconfigdir?}" "${redismoduledir?}" \
    "${nginxmoduledir?}" "${nginxconfdir?}" "${systemdunitdir?}" "${mandir?}"

# MODE SOURCE DIRECTORY [optional]: one installed file a line, under
# DESTDIR; an optional one is installed when it was built (the nginx
# module: only where nginx-dev is installed). The Redis module is 755:
# Redis 7.2 and later refuse to load a module file without execute
# permission.
manifest() {
    cat <<LIST
755 $BUILD/ratel $bindir
755 $BUILD/rateld $sbindir
755 $BUILD/captchad $sbindir
644 $BUILD/libratel.so.$VERSION $libdir
644 $BUILD/libratel.a $libdir
644 include/ratel.h $includedir
755 $BUILD/ratel.so $redismoduledir
644 $BUILD/nginx/ngx_http_ratel_module.so $nginxmoduledir optional
644 $BUILD/lua/ratel.lib.lua $datadir/ratel/lua
644 $BUILD/lua/ratel.eval.lua $datadir/ratel/lua
644 examples/rateld.yaml $datadir/ratel/examples
644 captchad/captchad.yaml $datadir/ratel/examples
644 examples/gateways/ratel-haproxy.lua $datadir/ratel/examples/gateways
644 ops/grafana/rateld.json $datadir/ratel/grafana
644 ops/prometheus/rateld.rules.yml $datadir/ratel/prometheus
644 $BUILD/man/ratel.1 $mandir/man1
644 $BUILD/man/rateld.yaml.5 $mandir/man5
644 $BUILD/man/rateld.8 $mandir/man8
644 $BUILD/man/captchad.8 $mandir/man8
LIST
}

# nginx's load snippet for the module, in modules-available as Debian
# keeps them (an operator enables it with a link in modules-enabled). In
# nginx's modules directory the module is loaded by the name Debian's own
# snippets use, relative to nginx's prefix (Debian's nginx links
# /usr/share/nginx/modules to /usr/lib/nginx/modules); anywhere else by
# its full path.
nginx_snippet=mod-http-ratel.conf
nginx_module_path() {
    case $nginxmoduledir in
    /usr/lib/nginx/modules) echo modules/ngx_http_ratel_module.so ;;
    *) echo "$nginxmoduledir/ngx_http_ratel_module.so" ;;
    esac
}

# The systemd units, written with the directories they name.
units="rateld.service captchad.service"

# The configurations rateld and captchad read: the examples, installed
# only where no file is, and removed only while unchanged. They carry an
# empty admin token (the endpoints it guards turned off): a service
# started on them never has a token someone else knows. The .deb gets
# them from here too.
configs="rateld.yaml captchad.yaml"
empty_token() {
    grep -qx 'admin_token: ""' "$1" || {
        echo "install: $1 must have admin_token: \"\" (a shipped token would be known to everyone)" >&2
        exit 1
    }
}
example_of() { echo "$DESTDIR$datadir/ratel/examples/$1"; }

d() { echo "$DESTDIR$1"; }

do_install() {
    manifest | while read -r mode src dir optional; do
        if [ ! -e "$src" ] && [ -n "$optional" ]; then
            echo "install: $src was not built: not installed"
            continue
        fi
        [ -e "$src" ] || { echo "install: $src is missing: run make first" >&2; exit 1; }
        install -d "$(d "$dir")"
        install -m "$mode" "$src" "$(d "$dir")/"
    done
    ln -sf "libratel.so.$VERSION" "$(d "$libdir")/$SONAME"
    ln -sf "libratel.so.$VERSION" "$(d "$libdir")/libratel.so"
    install -d "$(d "$pkgconfigdir")"
    sed -e "s|@prefix@|$prefix|" -e "s|@libdir@|$libdir|" \
        -e "s|@includedir@|$includedir|" -e "s|@version@|$VERSION|" \
        ratel.pc.in >"$(d "$pkgconfigdir")/ratel.pc"
    chmod 644 "$(d "$pkgconfigdir")/ratel.pc"
    if [ -e "$BUILD/nginx/ngx_http_ratel_module.so" ]; then
        install -d "$(d "$nginxconfdir")"
        echo "load_module $(nginx_module_path);" >"$(d "$nginxconfdir")/$nginx_snippet"
        chmod 644 "$(d "$nginxconfdir")/$nginx_snippet"
    fi
    install -d "$(d "$systemdunitdir")"
    for u in $units; do
        sed -e "s|@sbindir@|$sbindir|g" -e "s|@sysconfdir@|$sysconfdir|g" \
            "systemd/$u.in" >"$(d "$systemdunitdir")/$u"
        chmod 644 "$(d "$systemdunitdir")/$u"
    done
    install -d "$(d "$sysconfdir")/ratel"
    for c in $configs; do
        if [ -e "$(d "$sysconfdir")/ratel/$c" ]; then
            echo "install: $sysconfdir/ratel/$c exists: kept (the example is $datadir/ratel/examples/$c)"
        else
            empty_token "$(example_of "$c")"
            install -m 644 "$(example_of "$c")" "$(d "$sysconfdir")/ratel/$c"
        fi
    done
}

do_uninstall() {
    for c in $configs; do
        f="$(d "$sysconfdir")/ratel/$c"
        [ -e "$f" ] || continue
        if [ -e "$(example_of "$c")" ] && cmp -s "$f" "$(example_of "$c")"; then
            rm -f "$f"
        else
            echo "uninstall: $sysconfdir/ratel/$c was changed: kept"
        fi
    done
    manifest | while read -r _ src dir _; do
        rm -f "$(d "$dir")/$(basename "$src")"
    done
    rm -f "$(d "$libdir")/$SONAME" "$(d "$libdir")/libratel.so" "$(d "$pkgconfigdir")/ratel.pc"
    rm -f "$(d "$nginxconfdir")/$nginx_snippet"
    for u in $units; do rm -f "$(d "$systemdunitdir")/$u"; done
    # ratel's own directories, when empty; shared ones (bin, lib, ...) stay.
    for dir in "$datadir/ratel/examples/gateways" "$datadir/ratel/examples" \
        "$datadir/ratel/lua" "$datadir/ratel/grafana" \
        "$datadir/ratel/prometheus" "$datadir/ratel" "$sysconfdir/ratel"; do
        rmdir "$(d "$dir")" 2>/dev/null || true
    done
}

if [ "$action" = install ]; then do_install; else do_uninstall; fi
