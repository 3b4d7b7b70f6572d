#!/usr/bin/env bash
# Installs every Debian package ratel's build, tests and benchmarks need,
# and nothing when they are all there (safe to run again and again).
#
#   build-essential, pkg-config     the C build
#   clang, libclang-rt-14-dev       `make fuzz` (libFuzzer) and sanitizers
#   valgrind                        `make valgrind`
#   libxml2-utils                   xmllint, for the CLI tests' SVG checks
#   redis-server, redis-tools       benchmarks start a redis-server for the peer
#   nodejs, npm                     the peer rate-limiter-flexible benchmark
#   librsvg2-bin                    rsvg-convert: optional chart to PNG
#   curl
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
    redis-server redis-tools
    nodejs npm
    librsvg2-bin
    curl
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

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages already installed, nothing to do"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null; then
    as_root=(sudo)
else
    echo "setup: missing ${missing[*]}; run this as root (no sudo here)" >&2
    exit 1
fi

echo "setup: missing ${missing[*]}"
echo "setup: apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
echo "setup: apt-get install ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"
