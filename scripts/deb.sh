#!/usr/bin/env bash
# Builds ratel's Debian packages out of the tree and checks them with
# lintian (docs/install.md, "Debian packages"). `make deb` runs it.
#
#   scripts/deb.sh [--force]
#
# 1. Copies the source - every file git tracks, plus untracked files that
#    .gitignore does not exclude, so uncommitted work is packaged too, and
#    nothing from build/ - into build/deb/src.
# 2. Gives the build Redis's module API header through REDISMODULE_H (the
#    tree's build/redismodule/redismodule.h, or one fetched once by
#    scripts/redismodule-h.sh into build/deb/redismodule/), so that the
#    package build itself needs no network.
# 3. Runs `dpkg-buildpackage -b -us -uc` there, one job per core
#    (DEB_BUILD_OPTIONS=parallel), its output in build/deb/build.log.
#    debian/control says Rules-Requires-Root: no, so neither root nor
#    fakeroot is needed.
# 4. Runs lintian on the .changes (every tag shown, pedantic ones too, in
#    build/deb/lintian.txt) and fails on any error or warning.
#
# The packages land in build/deb/ and their names are printed. When
# build/deb/ already holds packages built from identical source files (a
# checksum of every file copied, in build/deb/source.sha256), they are
# checked again but not rebuilt: `make test` and `make asan` both run
# tests/integration/test_deb.sh. --force (or RATEL_DEB_FORCE=1) rebuilds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/deb
force=${RATEL_DEB_FORCE:-0}
case ${1:-} in
    --force) force=1 ;;
    "") ;;
    *) echo "usage: scripts/deb.sh [--force]" >&2; exit 2 ;;
esac

# Every tool, with the Debian package that provides it.
missing=()
for pair in dpkg-buildpackage:dpkg-dev dpkg-checkbuilddeps:dpkg-dev \
            dh:debhelper lintian:lintian git:git sha256sum:coreutils; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:} (${pair%%:*})")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deb: missing tools; install the packages ${missing[*]}" \
         "(apt-get install, or scripts/setup.sh)" >&2
    exit 1
fi
cd "$root"

# The source files, NUL-separated (uncommitted work included).
sources() { "$root/scripts/tree-files.sh"; }

# The header: the one the tree's own build compiles against, else fetched.
header=$root/build/redismodule/redismodule.h
if [ -n "${REDISMODULE_H:-}" ]; then
    header=$REDISMODULE_H
elif [ ! -s "$header" ]; then
    header=$out/redismodule/redismodule.h
    [ -s "$header" ] || scripts/redismodule-h.sh "$header"
fi

sum=$( { sources | sort -z | xargs -0 sha256sum; sha256sum <"$header"; } | sha256sum | cut -c1-64)
if [ "$force" != 1 ] && [ -f "$out/source.sha256" ] &&
   [ "$(cat "$out/source.sha256")" = "$sum" ] && ls "$out"/*.changes >/dev/null 2>&1; then
    echo "deb: build/deb/ holds packages of this very source (--force rebuilds)"
else
    rm -rf "$out/src" "$out/source.sha256" "$out"/*.deb "$out"/*.ddeb \
        "$out"/*.changes "$out"/*.buildinfo "$out"/build.log "$out"/lintian.txt
    mkdir -p "$out/src"
    sources | tar --null -T - -cf - | tar -xf - -C "$out/src"
    echo "deb: dpkg-buildpackage -b -us -uc in build/deb/src (log: build/deb/build.log)"
    start=$(date +%s)
    if ! (cd "$out/src" && dpkg-checkbuilddeps) >"$out/build.log" 2>&1; then
        cat "$out/build.log" >&2
        echo "deb: install the packages above (scripts/setup.sh installs them all)" >&2
        exit 1
    fi
    if ! (cd "$out/src" &&
          REDISMODULE_H=$header \
          DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
          dpkg-buildpackage -b -us -uc) >>"$out/build.log" 2>&1; then
        tail -60 "$out/build.log" >&2
        echo "deb: dpkg-buildpackage failed; the whole log: build/deb/build.log" >&2
        exit 1
    fi
    echo "deb: built in $(($(date +%s) - start)) s"
    echo "$sum" >"$out/source.sha256"
fi

changes=$(ls "$out"/ratel_*.changes)
echo "deb: lintian --fail-on error,warning (all tags shown; build/deb/lintian.txt)"
set +e
lintian --fail-on error,warning --display-info --pedantic --display-experimental \
    "$changes" >"$out/lintian.txt" 2>&1
rc=$?
set -e
cat "$out/lintian.txt"
if [ "$rc" -ne 0 ]; then
    echo "deb: lintian found errors or warnings (exit $rc)" >&2
    exit 1
fi
echo "deb: lintian: no errors, no warnings"
echo "deb: packages:"
for f in "$out"/*.deb; do
    echo "  build/deb/$(basename "$f")"
done
