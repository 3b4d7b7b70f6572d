#!/usr/bin/env bash
# test_lua_build.sh - scripts/lua-build.sh joins the frame and the files
# that make the entries of the algorithms RATEL_ALGO_MAP names (docs/lua.md),
# nothing else: a stray file of lua/ is left out (and named), an algorithm
# whose entry two files make or none makes stops the build. On a copy of
# lua/, scripts/ and include/ratel.h.
. "$(dirname "$0")/lib.sh"

t=$tmp/tree
mkdir -p "$t/scripts" "$t/include"
cp -r "$root/lua" "$t/"
cp "$root/scripts/lua-build.sh" "$t/scripts/"
cp "$root/include/ratel.h" "$t/include/"
build() { sh "$t/scripts/lua-build.sh" "$1" 2>"$tmp/err"; }

build "$tmp/base"
same builds_quietly "$(cat "$tmp/err")" ""
# Every algorithm's file is joined.
for f in sliding window gcra concurrent; do
    contains "joins_$f" "$(head -c 200000 "$tmp/base/ratel.eval.lua")" \
        "$(grep -m1 -E '(LOADERS|ALGORITHMS)\[ALGO_' "$t/lua/$f.lua")"
done

# A stray file: not shipped, the artefacts byte for byte as without it.
printf 'local STRAY_MARKER = 1\nLOADERS[ALGO_NOSUCH] = function() end\n' >"$t/lua/stray.lua"
build "$tmp/stray"
same stray_named "$(cat "$tmp/err")" \
    "lua-build.sh: lua/stray.lua left out: it is no part of the frame and makes no algorithm of RATEL_ALGO_MAP"
same stray_not_shipped "$(cmp "$tmp/base/ratel.lib.lua" "$tmp/stray/ratel.lib.lua" &&
    cmp "$tmp/base/ratel.eval.lua" "$tmp/stray/ratel.eval.lua" && echo same)" same
rm "$t/lua/stray.lua"

# A second copy of an algorithm's file: refused, not joined twice.
cp "$t/lua/gcra.lua" "$t/lua/gcra_old.lua"
build "$tmp/twice" && fail twice_refused "built" || ok twice_refused
same twice_named "$(cat "$tmp/err")" \
    "lua-build.sh: more than one file of lua/ makes ALGO_GCRA's entry: gcra gcra_old"
rm "$t/lua/gcra_old.lua"

# An algorithm of the map without its file: refused.
mv "$t/lua/window.lua" "$t/lua/window.lua.off"
build "$tmp/none" && fail none_refused "built" || ok none_refused
same none_named "$(cat "$tmp/err")" \
    "lua-build.sh: no file of lua/ makes ALGO_FIXED's entry (LOADERS[ALGO_FIXED] = ...)"
finish
