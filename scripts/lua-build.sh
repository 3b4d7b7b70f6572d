#!/bin/sh
# lua-build.sh OUTDIR - joins the files of lua/ into the two artefacts:
#
#   OUTDIR/ratel.lib.lua    the Redis Functions library (FUNCTION LOAD)
#   OUTDIR/ratel.eval.lua   the script for EVAL / EVALSHA / SCRIPT LOAD
#
# Both hold the same core, in the order below; only the entry point
# differs. Nothing but a POSIX shell and its utilities (sed, cksum) is
# needed, so the artefacts can be made where there is no C compiler:
#
#   sh scripts/lua-build.sh build/lua
#
# The library's version (FCALL ratel_version 0) is ratel's version and the
# checksum of the core's sources, so clients replace a library that is not
# exactly theirs.
set -eu
out=${1:?usage: lua-build.sh OUTDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
core="internal error calendar rule state sliding window gcra concurrent policy commands"

files=
for f in $core; do
    files="$files $top/lua/$f.lua"
done
version=$(sed -n 's/^#define RATEL_VERSION "\(.*\)"$/\1/p' "$top/include/ratel.h")
[ -n "$version" ] || { echo "lua-build.sh: no RATEL_VERSION in include/ratel.h" >&2; exit 1; }
# shellcheck disable=SC2086 # $files is a list of paths without spaces
sum=$(cat $files "$top/lua/library.lua" | cksum | sed 's/ .*//')

# The top-level locals a file of lua/ declares: "local function f" and
# "local a, b = ..." (or "local a") at the start of a line.
declared() {
    sed -n -e 's/^local function \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' \
        -e 's/^local \([A-Za-z_][A-Za-z0-9_, ]*\)\( =.*\)\{0,1\}$/\1/p' "$1" |
        tr ',' '\n' | tr -d ' '
}

# exports FILE LATER...: the top-level locals of FILE that the later files
# name (or run, the core's result), as "a, b, c".
exports() {
    f=$1
    shift
    for name in $(declared "$f"); do
        if [ "$name" = run ] || cat "$@" /dev/null | grep -qw -- "$name"; then
            echo "$name"
        fi
    done | awk '!seen[$0]++' | paste -sd, - | sed 's/,/, /g'
}

# The core as one function that makes it and returns commands.lua's run().
# Each file's body is a function of its own that answers the locals the
# later files use ("local a, b = (function() ... return a, b end)()"):
# Lua 5.1 finds a new closure's upvalues among the open ones of the
# function that makes it, one by one from the newest, so closures made in
# one function of some 200 locals cost far more to make than in a
# function per file. The EVAL script makes the core on every call
# (docs/lua.md, Cost).
core() {
    echo 'local function load_core()'
    rest=$files
    for f in $files; do
        rest=${rest#" $f"}
        # shellcheck disable=SC2086 # $rest is a list of paths without spaces
        names=$(exports "$f" $rest)
        if [ -z "$names" ]; then
            echo 'do'
            cat "$f"
            echo 'end'
        else
            echo "local $names = (function()"
            cat "$f"
            echo "return $names"
            echo 'end)()'
        fi
    done
    echo 'return run'
    echo 'end'
}

mkdir -p "$out"
{
    echo '#!lua name=ratel'
    echo "-- ratel $version: built by scripts/lua-build.sh from lua/*.lua; do not edit."
    echo "local RATEL_LIBRARY_VERSION = '$version+$sum'"
    core
    cat "$top/lua/library.lua"
} >"$out/ratel.lib.lua.tmp"
{
    echo "-- ratel $version: built by scripts/lua-build.sh from lua/*.lua; do not edit."
    core
    cat "$top/lua/eval.lua"
} >"$out/ratel.eval.lua.tmp"
mv "$out/ratel.lib.lua.tmp" "$out/ratel.lib.lua"
mv "$out/ratel.eval.lua.tmp" "$out/ratel.eval.lua"
