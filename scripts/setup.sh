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
#   nginx-dev                       the nginx module: nginx's configure,
#                                   conf_flags and headers (/usr/share/nginx/src)
#   faketime                        libfaketime: the nginx module's tests move
#                                   nginx's clock (a day's boundary)
#   caddy, haproxy                  rateld behind Caddy's forward_auth and
#                                   HAProxy's Lua action (tests, bench)
#   nodejs, npm                     the peer rate-limiter-flexible benchmark
#   librsvg2-bin                    rsvg-convert: optional chart to PNG
#   curl, openssl, libssl-dev       TLS to Redis (rediss://): OpenSSL's headers;
#                                   libevent-dev brings libevent_openssl
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
#   libphonenumber-dev              phone numbers as identities: the key
#                                   transform to E.164 (server/app/phone.cc)
#   shellcheck                      `make test` runs it over scripts/ and tests/
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
#   nghttp2-client                  h2load: the gRPC benchmark; a million
#                                   requests into the nginx module (tests)
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
    nginx-dev faketime
    caddy haproxy
    nodejs npm
    librsvg2-bin
    curl openssl libssl-dev
    xxd clang-format
    libsystemd-dev systemd
    go-md2man man-db prometheus
    debhelper dpkg-dev fakeroot lintian systemd-container
    git shfmt debootstrap
    libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
    python3-grpcio python3-grpc-tools python3-h2 nghttp2-client
    libphonenumber-dev shellcheck
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
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' "$apt_etc/sources.list" \
    $(find "$apt_etc/sources.list.d" -maxdepth 1 \( -name '*.list' -o -name '*.sources' \) \
        ! -path "$deb_src" 2>/dev/null); then
    want_src=$(deb_src_stanzas)
fi
have_src=""
[ -e "$deb_src" ] && have_src=$(cat "$deb_src")
need_src=0
if [ "$want_src" != "$have_src" ]; then
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
    echo "setup: missing ${missing[*]}$([ "$need_src" -eq 1 ] && echo " (and deb-src entries)"); run this as root (no sudo here)" >&2
    exit 1
fi

if [ "$need_src" -eq 1 ]; then
    if [ -n "$want_src" ]; then
        printf '%s\n' "$want_src" | "${as_root[@]}" tee "$deb_src" >/dev/null
        echo "setup: wrote the Debian archive's deb-src entries, one per archive and suite ($deb_src)"
    else
        "${as_root[@]}" rm -f "$deb_src"
        echo "setup: removed $deb_src (deb-src entries are configured elsewhere)"
    fi
fi

apt_opts=()
if [ "$apt_etc" != /etc/apt ]; then
    apt_opts=(-o "Dir::Etc=$apt_etc")
fi
echo "setup: apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q "${apt_opts[@]}"
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: apt-get install ${missing[*]}"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${apt_opts[@]}" "${missing[@]}"
    echo "setup: installed ${missing[*]}"
fi
