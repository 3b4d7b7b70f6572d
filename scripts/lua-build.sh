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
sum=$(cat $files "$top/lua/many.lua" "$top/lua/library.lua" | cksum | sed 's/ .*//')

# The core as one function that makes it and returns commands.lua's run().
core() {
    echo 'local function load_core()'
    # shellcheck disable=SC2086 # $files is a list of paths without spaces
    cat $files
    echo 'return run'
    echo 'end'
}

mkdir -p "$out"
{
    echo '#!lua name=ratel'
    echo "-- ratel $version: built by scripts/lua-build.sh from lua/*.lua; do not edit."
    echo "local RATEL_LIBRARY_VERSION = '$version+$sum'"
    core
    cat "$top/lua/many.lua"
    cat "$top/lua/library.lua"
} >"$out/ratel.lib.lua.tmp"
{
    echo "-- ratel $version: built by scripts/lua-build.sh from lua/*.lua; do not edit."
    core
    cat "$top/lua/many.lua"
    cat "$top/lua/eval.lua"
} >"$out/ratel.eval.lua.tmp"
mv "$out/ratel.lib.lua.tmp" "$out/ratel.lib.lua"
mv "$out/ratel.eval.lua.tmp" "$out/ratel.eval.lua"
