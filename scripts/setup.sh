#!/usr/bin/env bash
# Installs the Debian packages ratel needs, in two sets:
#
#   scripts/setup.sh          what building and running ratel needs (`make`,
#                             `make run`, `make install`): compilers and
#                             libraries; no server of anyone else's
#   scripts/setup.sh --test   that and what the tests, `make asan`, `make
#                             valgrind`, `make fuzz`, `make deb` and the
#                             benchmarks need, the test set below: among
#                             them the servers the tests start on loopback
#                             ports of their own (nginx, Caddy, HAProxy,
#                             Prometheus, Redis)
#
# Needs root, or sudo (it runs itself again through sudo when it has
# something to do). It checks with dpkg-query what is missing, runs
# `apt-get update` once only if something is, installs without recommends,
# and says what it did; run again, it does nothing. A package counts as
# present when an installed package provides it (e.g. NodeSource's nodejs
# provides npm).
#
# It also writes, once, deb-src entries for the Debian archive
# (/etc/apt/sources.list.d/ratel-deb-src.sources) unless some are
# configured: the module's build takes redismodule.h from Debian's redis
# source package (scripts/redismodule-h.sh).
#
# The servers of the test set are installed for the tests, not to serve:
# Debian would enable them and start them at once (nginx and Caddy on :80,
# Prometheus on :9090, on every interface). While apt-get installs, a
# policy-rc.d that exits 101 keeps every package's service from starting
# (one already in /usr/sbin is put back afterwards). Then, with --test,
# each of those servers that is enabled or running (installed by this run
# or before it) is disabled and stopped: `systemctl disable --now` when
# systemd is PID 1; in any case deb-systemd-helper's record of it as
# enabled (so an upgrade does not enable it again), the links that start
# it at boot (/etc/systemd/system/*.wants/, /etc/rc?.d/) and its init
# script's running instance. It never touches another service. A machine
# that runs one of them on purpose names it in RATEL_KEEP_SERVICES (e.g.
# RATEL_KEEP_SERVICES="redis-server nginx"): those are left as they are.
#
# The base set:
#   build-essential, pkg-config     the C build
#   libhiredis-dev                  the Redis store
#   libevent-dev, libhttp-parser-dev,
#   libyaml-dev, libcjson-dev       rateld: event loop, HTTP/1.1 parser,
#                                   YAML config, JSON request bodies
#   libsqlite3-dev,
#   libcurl4-openssl-dev            captchad: its notices (SQLite) and its
#                                   webhook sender (libcurl)
#   libssl-dev                      TLS to Redis (rediss://): OpenSSL's
#                                   headers; libevent-dev brings
#                                   libevent_openssl
#   libsystemd-dev                  sd_notify (rateld, captchad under
#                                   Type=notify)
#   libnghttp2-dev, libprotobuf-c-dev,
#   protobuf-c-compiler,
#   libprotobuf-dev                 rateld's gRPC listener (Envoy's rate
#                                   limit service): HTTP/2, the messages,
#                                   protoc-c and the well-known .proto files
#   libphonenumber-dev              phone numbers as identities: the key
#                                   transform to E.164 (server/app/phone.cc)
#   go-md2man                       the man pages, from docs/ (scripts/man.sh)
#   git                             man.sh's dates (the pages' last change)
#   curl, openssl                   the README's first minute: curl against
#                                   `make run`, `openssl rand -hex 32` for
#                                   the tokens
# The module's redismodule.h comes from the source package of the
# redis-server apt would install (the deb-src entries), so the build needs
# no Redis server; the nginx module is built when nginx-dev is installed
# (the test set), since nginx-dev depends on nginx.
#
# The test set:
#   clang, libclang-rt-14-dev       `make fuzz` (libFuzzer), the sanitizers
#                                   and the clang build of `make test`
#   valgrind                        `make valgrind`
#   libxml2-utils                   xmllint, for the CLI tests' SVG checks
#   redis-server, redis-tools       the module's, the Lua library's and the
#                                   Redis store's tests and benchmarks (real
#                                   servers); redis-cli
#   nginx, nginx-dev                rateld behind nginx (tests); the nginx
#                                   module: nginx's configure, conf_flags
#                                   and headers (/usr/share/nginx/src)
#   wrk, python3                    load (bench); JSON checks and fake SMS
#                                   gateways, the docs' runner (tests)
#   faketime                        libfaketime: the nginx module's tests move
#                                   nginx's clock (a day's boundary)
#   caddy, haproxy                  rateld behind Caddy's forward_auth and
#                                   HAProxy's Lua action (tests, bench)
#   nodejs, npm                     the peer rate-limiter-flexible benchmark
#                                   and the Node client's test
#   librsvg2-bin                    rsvg-convert: optional chart to PNG
#   xxd                             the Lua tests' byte dumps (its own
#                                   package on bookworm, absent from minbase)
#   clang-format                    test_format.sh: every C file as
#                                   .clang-format writes it
#   systemd                         systemd-analyze on the units (tests)
#   man-db                          man(1) renders the pages in the tests and
#                                   systemd-analyze verify looks them up
#   prometheus                      promtool and the server: the alerting
#                                   rules checked, unit-tested and evaluated
#                                   on a real rateld's metrics (test_ops.sh)
#   debhelper, dpkg-dev, fakeroot,
#   lintian                         `make deb` and test_deb.sh: the Debian
#                                   packages built and checked
#   systemd-container               systemd-nspawn: test_deb_systemd.sh
#                                   installs the packages in a throwaway
#                                   container booted by systemd
#   shfmt, shellcheck               test_commands.sh parses every shell file
#                                   with shfmt; `make test` runs shellcheck
#                                   over scripts/ and tests/
#   debootstrap                     scripts/rehearse-minbase.sh: a minimal
#                                   Debian to rehearse these commands in
#   python3-grpcio,
#   python3-grpc-tools              test_envoy.sh's independent gRPC client,
#                                   its stubs generated from proto/
#   python3-h2                      test_envoy.sh's hostile HTTP/2 client
#                                   (frames no gRPC library would send)
#   nghttp2-client                  h2load: the gRPC benchmark; a million
#                                   requests into the nginx module (tests)
set -euo pipefail

base_packages=(
    build-essential pkg-config
    libhiredis-dev
    libevent-dev libhttp-parser-dev libyaml-dev libcjson-dev
    libsqlite3-dev libcurl4-openssl-dev
    libssl-dev
    libsystemd-dev
    libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
    libphonenumber-dev
    go-md2man git
    curl openssl
)

test_packages=(
    clang libclang-rt-14-dev
    valgrind
    libxml2-utils
    redis-server redis-tools
    nginx wrk python3
    nginx-dev faketime
    caddy haproxy
    nodejs npm
    librsvg2-bin
    xxd clang-format
    systemd man-db prometheus
    debhelper dpkg-dev fakeroot lintian systemd-container
    shfmt shellcheck debootstrap
    python3-grpcio python3-grpc-tools python3-h2 nghttp2-client
)

# The servers of the test set, by package: the systemd unit and the init
# script each ships. None is left enabled or running (see above).
test_servers=(nginx caddy haproxy prometheus redis-server)

test_set=0
for arg in "$@"; do
    case $arg in
    --test) test_set=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "usage: scripts/setup.sh [--test]" >&2
        exit 2
        ;;
    esac
done
packages=("${base_packages[@]}")
if [ "$test_set" -eq 1 ]; then
    packages+=("${test_packages[@]}")
fi

# Installed packages and what they provide, one name per line.
present=$(dpkg-query -W -f='${db:Status-Status} ${Package} ${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { $1 = ""; print }' |
    tr ', ' '\n' | sed 's/:.*//' | grep -v '^$' | grep -v '^(' | grep -v ')$' |
    sort -u)

missing=()
for p in "${packages[@]}"; do
    if ! grep -qxF "$p" <<<"$present"; then
        missing+=("$p")
    fi
done

# The module's build takes redismodule.h from Debian's redis SOURCE package
# (scripts/redismodule-h.sh), so the Debian archive's deb-src entries must
# be configured: they are added once, beside the binary ones, in their own
# file. Stanzas of other archives (NodeSource, ...) are left alone.
# RATEL_APT_ETC points at another apt configuration directory (a copy made
# to rehearse this script); apt-get then reads that one too.
apt_etc=${RATEL_APT_ETC:-/etc/apt}
deb_src=$apt_etc/sources.list.d/ratel-deb-src.sources

# Prints one deb-src stanza per Debian archive URI and suite listed as `deb`
# anywhere in the apt configuration, one-line entries and deb822 stanzas
# alike. A machine may list the same archive twice (debootstrap's one-line
# sources.list and a debian.sources with Signed-By): apt then requires every
# entry for that URI and suite, deb-src included, to carry the same
# Signed-By, so the stanza takes the Signed-By the deb entries give (first
# one found) and the union of their components.
deb_src_stanzas() {
    local f
    {
        for f in "$apt_etc"/sources.list.d/*.sources; do
            [ -e "$f" ] || continue
            # Fields may continue on lines that start with a space (an
            # inline Signed-By key); those are joined with a \001 marker.
            awk 'BEGIN { RS = ""; FS = "\n" }
                {
                    delete v; key = ""
                    for (i = 1; i <= NF; i++) {
                        if ($i ~ /^#/) continue
                        if ($i ~ /^[ \t]/ && key != "") { v[key] = v[key] "\001" $i; continue }
                        key = tolower($i); sub(/:.*/, "", key)
                        val = $i; sub(/^[^:]*:[ \t]*/, "", val); v[key] = val
                    }
                    if (tolower(v["enabled"]) == "no") next
                    if (v["types"] !~ /(^|[ \t])deb([ \t]|$)/) next
                    nu = split(v["uris"], uris, /[ \t]+/)
                    ns = split(v["suites"], suites, /[ \t]+/)
                    for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++)
                        if (uris[u] != "" && suites[s] != "")
                            print uris[u] "\t" suites[s] "\t" v["signed-by"] "\t" v["components"]
                }' "$f"
        done
        for f in "$apt_etc"/sources.list "$apt_etc"/sources.list.d/*.list; do
            [ -e "$f" ] || continue
            # deb [opt=value ...] URI SUITE COMPONENT...
            awk '$1 != "deb" { next }
                {
                    signed = ""; i = 2
                    if ($2 ~ /^\[/) {
                        for (; i <= NF; i++) {
                            o = $i; gsub(/[][]/, "", o)
                            if (o ~ /^signed-by=/) { sub(/^signed-by=/, "", o); signed = o }
                            if ($i ~ /\]$/) { i++; break }
                        }
                    }
                    comps = ""
                    for (c = i + 2; c <= NF; c++) comps = comps (comps == "" ? "" : " ") $c
                    print $i "\t" $(i + 1) "\t" signed "\t" comps
                }' "$f"
        done
    } | awk -F '\t' '$1 ~ /debian\.(org|net)/ {
            k = $1 "\t" $2
            if (!(k in seen)) { seen[k] = 1; order[++n] = k; comps[k] = "" }
            if (signed[k] == "" && $3 != "") signed[k] = $3
            m = split($4, cs, /[ \t]+/)
            for (c = 1; c <= m; c++)
                if (cs[c] != "" && index(" " comps[k] " ", " " cs[c] " ") == 0)
                    comps[k] = comps[k] (comps[k] == "" ? "" : " ") cs[c]
        }
        END {
            for (j = 1; j <= n; j++) {
                k = order[j]; split(k, us, "\t")
                print "Types: deb-src\nURIs: " us[1] "\nSuites: " us[2] "\nComponents: " comps[k]
                if (signed[k] != "") { s = signed[k]; gsub("\001", "\n", s); print "Signed-By: " s }
                print ""
            }
        }'
}

# deb-src entries configured elsewhere (by hand, by another tool) win: then
# this script's own file is not wanted. Otherwise its file must hold exactly
# the stanzas derived above; an older file (one that repeated an archive with
# conflicting Signed-By values) is rewritten.
want_src=""
other_sources=()
mapfile -t other_sources < <(find "$apt_etc/sources.list.d" -maxdepth 1 \
    \( -name '*.list' -o -name '*.sources' \) ! -path "$deb_src" 2>/dev/null)
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' "$apt_etc/sources.list" "${other_sources[@]}"; then
    want_src=$(deb_src_stanzas)
fi
have_src=""
[ -e "$deb_src" ] && have_src=$(cat "$deb_src")
need_src=0
if [ "$want_src" != "$have_src" ]; then
    need_src=1
fi

# The test set's servers that are enabled or running: what --test must
# quiet. systemd is asked when it is PID 1; otherwise the links a boot
# would follow and the init script's status say it.
systemd_runs() { [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; }
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
server_enabled() { # PACKAGE (its unit is PACKAGE.service)
    local l
    if systemd_runs && [ "$(systemctl is-enabled "$1.service" 2>/dev/null)" = enabled ]; then
        return 0
    fi
    for l in /etc/systemd/system/*.wants/"$1.service" /etc/rc[2-5].d/S[0-9][0-9]"$1"; do
        [ -L "$l" ] && return 0
    done
    # deb-systemd-helper's record of it as enabled: kept in step with the
    # links above, but looked at too (a package upgrade consults it).
    for l in /var/lib/systemd/deb-systemd-helper-enabled/*.wants/"$1.service"; do
        [ -e "$l" ] && return 0
    done
    return 1
}
server_running() {
    if systemd_runs; then
        systemctl is-active --quiet "$1.service"
    else
        [ -x "/etc/init.d/$1" ] && "/etc/init.d/$1" status >/dev/null 2>&1
    fi
}
to_quiet() {
    local s
    [ "$test_set" -eq 1 ] || return 0
    for s in "${test_servers[@]}"; do
        installed "$s" || continue
        case " ${RATEL_KEEP_SERVICES:-} " in *" $s "*) continue ;; esac
        if server_enabled "$s" || server_running "$s"; then
            echo "$s"
        fi
    done
}
loud=$(to_quiet)

if [ ${#missing[@]} -eq 0 ] && [ "$need_src" -eq 0 ] && [ -z "$loud" ]; then
    echo "setup: all ${#packages[@]} packages and deb-src already there, nothing to do"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        echo "setup: running again as root (sudo)"
        exec sudo -- env RATEL_APT_ETC="$apt_etc" RATEL_KEEP_SERVICES="${RATEL_KEEP_SERVICES:-}" \
            bash "$0" "$@"
    fi
    what="missing ${missing[*]}"
    [ "$need_src" -eq 1 ] && what="$what (and deb-src entries)"
    [ -n "$loud" ] && what="$what; servers to disable: $(echo "$loud" | tr '\n' ' ')"
    echo "setup: $what; run this as root (no sudo here)" >&2
    exit 1
fi

if [ "$need_src" -eq 1 ]; then
    if [ -n "$want_src" ]; then
        printf '%s\n' "$want_src" >"$deb_src"
        echo "setup: wrote the Debian archive's deb-src entries, one per archive and suite ($deb_src)"
    else
        rm -f "$deb_src"
        echo "setup: removed $deb_src (deb-src entries are configured elsewhere)"
    fi
fi

# No service starts while apt installs: invoke-rc.d and deb-systemd-invoke
# ask /usr/sbin/policy-rc.d, and 101 means "not allowed". A policy-rc.d
# already there (a container's) is kept aside and put back.
policy=/usr/sbin/policy-rc.d
policy_saved=$policy.ratel-setup
restore_policy() {
    if [ -e "$policy_saved" ]; then
        mv -f "$policy_saved" "$policy"
    else
        rm -f "$policy"
    fi
}
apt_opts=()
if [ "$apt_etc" != /etc/apt ]; then
    apt_opts=(-o "Dir::Etc=$apt_etc")
fi
if [ ${#missing[@]} -gt 0 ] || [ "$need_src" -eq 1 ]; then
    echo "setup: apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q "${apt_opts[@]}"
fi
if [ ${#missing[@]} -gt 0 ]; then
    # A copy left by an interrupted run is the original: keep it.
    if [ -e "$policy" ] && [ ! -e "$policy_saved" ]; then
        cp -p "$policy" "$policy_saved"
    fi
    trap restore_policy EXIT
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    echo "setup: apt-get install ${missing[*]} (services not started: $policy)"
    DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${apt_opts[@]}" "${missing[@]}"
    restore_policy
    trap - EXIT
    echo "setup: installed ${missing[*]}"
    loud=$(to_quiet)
fi

# Each test server: disabled (systemd's links, deb-systemd-helper's record,
# the init script's rc links) and stopped.
for s in $loud; do
    unit=$s.service
    if systemd_runs; then
        systemctl disable --now --quiet "$unit" || true
    fi
    # deb-systemd-helper removes the links it made and its record of them
    # as enabled: a later upgrade then sees the unit as disabled
    # (was-enabled) and leaves it so.
    if DPKG_MAINTSCRIPT_PACKAGE=$s deb-systemd-helper --quiet debian-installed "$unit" 2>/dev/null; then
        DPKG_MAINTSCRIPT_PACKAGE=$s deb-systemd-helper disable "$unit" >/dev/null 2>&1 || true
    fi
    for l in /etc/systemd/system/*.wants/"$unit" /var/lib/systemd/deb-systemd-helper-enabled/*.wants/"$unit"; do
        if [ -L "$l" ] || [ -e "$l" ]; then rm -f "$l"; fi
    done
    if [ -x "/etc/init.d/$s" ]; then
        update-rc.d "$s" disable >/dev/null 2>&1 || true
        if ! systemd_runs && "/etc/init.d/$s" status >/dev/null 2>&1; then
            "/etc/init.d/$s" stop >/dev/null 2>&1 || true
        fi
    fi
    if server_enabled "$s" || server_running "$s"; then
        echo "setup: $s is still enabled or running; disable it by hand" >&2
        exit 1
    fi
    echo "setup: $s disabled and stopped (installed for the tests, which start their own)"
done
