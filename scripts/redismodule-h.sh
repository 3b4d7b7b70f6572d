#!/usr/bin/env bash
# Writes Redis's module API header, redismodule.h, to OUT (the module's build
# runs this; the header is never committed).
#
#   scripts/redismodule-h.sh OUT
#
# The header comes from Debian's `redis` SOURCE package of the same version
# as the installed redis-server (so the module is compiled against the API of
# the server it is loaded into), or, where no redis-server is installed (the
# base set-up, scripts/setup.sh without --test), of the version apt would
# install; falling back to the newest source package of that upstream
# version. Needs the Debian archive's deb-src entries, which
# scripts/setup.sh configures. Elsewhere, point the build at your own copy:
# `make module REDISMODULE_H=/path/to/redismodule.h`.
set -euo pipefail
out=${1:?usage: redismodule-h.sh OUT}
case $out in /*) ;; *) out=$PWD/$out ;; esac

version=$(dpkg-query -W -f='${db:Status-Status} ${Version}' redis-server 2>/dev/null |
    sed -n 's/^installed //p' || true)
if [ -z "$version" ]; then
    version=$(apt-cache policy redis-server 2>/dev/null |
        sed -n 's/^ *Candidate: *//p' | grep -v '(none)' || true)
fi
if [ -z "$version" ]; then
    echo "redismodule-h: no redis-server installed or known to apt (run scripts/setup.sh)," \
         "or pass REDISMODULE_H=/path/to/redismodule.h" >&2
    exit 1
fi
upstream=${version#*:}
upstream=${upstream%%-*}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get source --download-only -q "redis=$version" >log 2>&1 &&
   ! apt-get source --download-only -q redis >>log 2>&1; then
    cat log >&2
    echo "redismodule-h: cannot download Debian's redis source package;" \
         "are deb-src entries configured (scripts/setup.sh)? Or pass" \
         "REDISMODULE_H=/path/to/redismodule.h" >&2
    exit 1
fi
# Globs, not ls: under pipefail a failing `ls | head` would end the script
# before the message below.
tarballs=(redis_*.orig.tar.*)
orig=${tarballs[0]}
if [ ! -e "$orig" ]; then
    echo "redismodule-h: no upstream tarball in the source package" >&2
    exit 1
fi
tar -xf "$orig" --wildcards '*/src/redismodule.h'
headers=(./*/src/redismodule.h)
header=${headers[0]}
got=${orig#redis_}; got=${got%.orig.tar.*}
if [ "$got" != "$upstream" ]; then
    echo "redismodule-h: warning: server is $upstream, header is from $got" >&2
fi
mkdir -p "$(dirname "$out")"
cp "$header" "$out.tmp" && mv "$out.tmp" "$out"
echo "redismodule-h: $out from Debian's redis $got source package"
