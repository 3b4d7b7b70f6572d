#!/usr/bin/env bash
# test_clang.sh - the tree builds with clang as with gcc, without a warning:
# `make CC=clang CXX=clang++ all` into $BUILD-clang (build-clang beside
# build/), with -Werror, and nothing in its output says "warning". Only
# built, not run: the suite runs on the gcc build. The directory is kept,
# so the next run rebuilds only what changed. `make asan` does not build
# it again (SANITIZE set): `make test` has.
. "$(dirname "$0")/lib.sh"

if [ -n "${SANITIZE:-}" ]; then
    echo "0 passed, 0 failed"
    exit 0
fi
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
    fail clang_build "clang or clang++ is not installed (scripts/setup.sh --test)"
    finish
    exit
fi

# A silent make of its own (its output is the compilers' and the
# linkers'): none of the suite's make's variables (BUILD, CFLAGS, LTO, its
# jobserver) reach it.
out=$build-clang/make.log
mkdir -p "$build-clang"
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u CFLAGS -u CXXFLAGS -u CPPFLAGS \
    -u LDFLAGS -u OPT -u LTO -u SANITIZE \
    make -s --no-print-directory -C "$root" -j"$(nproc)" CC=clang CXX=clang++ \
    BUILD="$build-clang" WERROR=-Werror all >"$out" 2>&1; then
    ok clang_build
else
    fail clang_build "$(grep -m3 -E 'error' "$out" | tr '\n' ' ' | cut -c1-600) (all of it: $out)"
fi
same clang_no_warning "$(grep -E 'warning' "$out" | head -5)" ""
finish
