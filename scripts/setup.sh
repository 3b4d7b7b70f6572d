#!/usr/bin/env bash
# Installs every Debian package ratel's build, tests and benchmarks need,
# and nothing when they are all there (safe to run again and again).
#
#   build-essential, pkg-config     the C build
#   clang, libclang-rt-14-dev       `make fuzz` (libFuzzer) and sanitizers
#   valgrind                        `make valgrind`
#   libxml2-utils                   xmllint, for the CLI tests' SVG checks
#   redis-server, redis-tools       the module's tests and benchmarks (real servers)
#   libhiredis-dev                  the Redis store and the conformance driver
#   libevent-dev, libhttp-parser-dev,
#   libyaml-dev, libcjson-dev       rateld: event loop, HTTP/1.1 parser,
#                                   YAML config, JSON request bodies
#   nginx, wrk, python3             rateld behind nginx (tests), load (bench),
#                                   JSON checks and fake SMS gateways (tests)
#   caddy, haproxy                  rateld behind Caddy's forward_auth and
#                                   HAProxy's Lua action (tests, bench)
#   nodejs, npm                     the peer rate-limiter-flexible benchmark
#   librsvg2-bin                    rsvg-convert: optional chart to PNG
#   curl
#   xxd                             the Lua tests' byte dumps (its own
#                                   package on bookworm, absent from minbase)
#   clang-format                    test_format.sh: every C file as
#                                   .clang-format writes it
#   libsystemd-dev, systemd         sd_notify (rateld, captchad under
#                                   Type=notify); systemd-analyze on the units
#   go-md2man, man-db               the man pages, from docs/ (scripts/man.sh);
#                                   man(1) renders them in the tests and
#                                   systemd-analyze verify looks them up
#   prometheus                      promtool and the server: the alerting
#                                   rules checked, unit-tested and evaluated
#                                   on a real rateld's metrics (test_ops.sh)
#   debhelper, dpkg-dev, fakeroot,
#   lintian                         `make deb` and test_deb.sh: the Debian
#                                   packages built and checked
#   git, shfmt                      deb.sh's file list, man.sh's dates, the
#                                   benchmarks' commit; test_commands.sh
#                                   parses every shell file with shfmt
#   debootstrap                     scripts/rehearse-minbase.sh: a minimal
#                                   Debian to rehearse these commands in
#   libnghttp2-dev, libprotobuf-c-dev,
#   protobuf-c-compiler,
#   libprotobuf-dev                 rateld's gRPC listener (Envoy's rate
#                                   limit service): HTTP/2, the messages,
#                                   protoc-c and the well-known .proto files
#   python3-grpcio,
#   python3-grpc-tools              test_envoy.sh's independent gRPC client,
#                                   its stubs generated from proto/
#   python3-h2                      test_envoy.sh's hostile HTTP/2 client
#                                   (frames no gRPC library would send)
#   nghttp2-client                  h2load: the gRPC benchmark
#   systemd-container               systemd-nspawn: test_deb_systemd.sh
#                                   installs the packages in a throwaway
#                                   container booted by systemd
#
# Checks with dpkg-query what is missing, runs `apt-get update` once only
# if something is, installs without recommends, and says what it did. A
# package counts as present when an installed package provides it (e.g.
# NodeSource's nodejs provides npm). Runs as root, or through sudo. It
# installs only: it never starts, stops or configures a service.
set -euo pipefail

packages=(
    build-essential pkg-config
    clang libclang-rt-14-dev
    valgrind
    libxml2-utils
    redis-server redis-tools libhiredis-dev
    libevent-dev libhttp-parser-dev libyaml-dev libcjson-dev
    libsqlite3-dev libcurl4-openssl-dev
    nginx wrk python3
    caddy haproxy
    nodejs npm
    librsvg2-bin
    curl openssl
    xxd clang-format
    libsystemd-dev systemd
    go-md2man man-db prometheus
    debhelper dpkg-dev fakeroot lintian systemd-container
    git shfmt debootstrap
    libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
    python3-grpcio python3-grpc-tools python3-h2 nghttp2-client
)

# Installed packages and what they provide, one name per line.
present=$(dpkg-query -W -f='${db:Status-Status} ${Package} ${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { $1 = ""; print }' |
    tr ', ' '\n\n' | sed 's/:.*//' | grep -v '^$' | grep -v '^(' | grep -v ')$' |
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
deb_src=/etc/apt/sources.list.d/ratel-deb-src.sources
need_src=0
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    need_src=1
fi

if [ ${#missing[@]} -eq 0 ] && [ "$need_src" -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages and deb-src already there, nothing to do"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null; then
    as_root=(sudo)
else
    echo "setup: missing ${missing[*]} ${need_src:+(and deb-src entries)}; run this as root (no sudo here)" >&2
    exit 1
fi

if [ "$need_src" -eq 1 ]; then
    # deb822 stanzas (Debian 12's debian.sources) and one-line entries alike.
    {
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -e "$f" ] && awk 'BEGIN { RS = ""; ORS = "\n\n" }
                /URIs:[^\n]*debian\.(org|net)/ { sub(/Types: deb/, "Types: deb-src"); print }' "$f"
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -e "$f" ] && awk '$1 == "deb" && /debian\.(org|net)/ {
                sub(/^deb /, ""); print "Types: deb-src\nURIs: " $1 "\nSuites: " $2
                printf "Components:"; for (i = 3; i <= NF; i++) printf " %s", $i
                print "\n" }' "$f" | grep -v '^URIs: \[' || true
        done
    } | "${as_root[@]}" tee "$deb_src" >/dev/null
    echo "setup: added the Debian archive's deb-src entries ($deb_src)"
fi

echo "setup: apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: apt-get install ${missing[*]}"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    echo "setup: installed ${missing[*]}"
fi
