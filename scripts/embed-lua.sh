#!/usr/bin/env bash
# embed-lua.sh SCRIPT OUT.c - compiles lua/ratel.lua into libratel as a C
# string, so the Redis store can SCRIPT LOAD it on servers without the
# module (the file in lua/ stays the one source; nothing is committed).
set -euo pipefail
in=${1:?usage: embed-lua.sh SCRIPT OUT.c}
out=${2:?usage: embed-lua.sh SCRIPT OUT.c}
mkdir -p "$(dirname "$out")"
{
    echo "/* Generated from $in by scripts/embed-lua.sh: do not edit. */"
    echo "#include <stddef.h>"
    echo "const char ratel__lua_script[] ="
    # Every line as a string literal ending in \n; backslashes, quotes and
    # tabs escaped; '?' escaped so that no trigraph can form.
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/?/\\?/g' \
        -e 's/^/    "/' -e 's/$/\\n"/' "$in"
    echo "    ;"
    echo "const size_t ratel__lua_script_len = sizeof ratel__lua_script - 1;"
} >"$out.tmp"
mv "$out.tmp" "$out"
