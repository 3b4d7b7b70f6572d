#!/usr/bin/env bash
# embed-lua.sh LIB EVAL OUT.c - compiles the two Lua artefacts of
# scripts/lua-build.sh into libratel as C strings, so that the Redis store
# can FUNCTION LOAD the library or SCRIPT LOAD the script on servers
# without the module (lua/*.lua stay the one source; nothing is committed):
#
#   ratel__lua_library, ratel__lua_library_len   build/lua/ratel.lib.lua
#   ratel__lua_library_version                   what FCALL ratel_version 0 answers
#   ratel__lua_script, ratel__lua_script_len     build/lua/ratel.eval.lua
set -euo pipefail
lib=${1:?usage: embed-lua.sh LIB EVAL OUT.c}
eval_script=${2:?usage: embed-lua.sh LIB EVAL OUT.c}
out=${3:?usage: embed-lua.sh LIB EVAL OUT.c}

# string NAME FILE: the file as a C string and its length.
string() {
    echo "const char $1[] ="
    # Every line as a string literal ending in \n; backslashes, quotes and
    # tabs escaped; '?' escaped so that no trigraph can form.
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/?/\\?/g' \
        -e 's/^/    "/' -e 's/$/\\n"/' "$2"
    echo "    ;"
    echo "const size_t $1_len = sizeof $1 - 1;"
}

version=$(sed -n "s/^local RATEL_LIBRARY_VERSION = '\(.*\)'$/\1/p" "$lib")
[ -n "$version" ] || { echo "embed-lua.sh: $lib has no RATEL_LIBRARY_VERSION" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
{
    echo "/* Generated from $lib and $eval_script by scripts/embed-lua.sh: do not edit. */"
    echo "#include <stddef.h>"
    string ratel__lua_library "$lib"
    echo "const char ratel__lua_library_version[] = \"$version\";"
    string ratel__lua_script "$eval_script"
} >"$out.tmp"
mv "$out.tmp" "$out"
