#!/usr/bin/env bash
# test_format.sh - every C file and header of the tree is as clang-format
# (the repository's .clang-format) writes it: `make format-check` names
# each one that `make format` would change. And the source layout's
# boundaries (docs/layout.md): no program or server-kit file names a file
# of another area by its path, and programs include libratel's internals
# only through ratel_internal.h.
. "$(dirname "$0")/lib.sh"

out=$(make -s --no-print-directory -C "$root" BUILD="$build" format-check 2>&1)
same all_c_formatted "$out" ""
# The check can fail: a file made unformatted is named.
mkdir -p "$tmp/tree/include"
printf 'int   x ;\n' >"$tmp/tree/include/bad.h"
cp "$root/.clang-format" "$tmp/tree/"
contains check_names_file "$(make -s --no-print-directory -C "$tmp/tree" -f "$root/Makefile" BUILD="$tmp" format-check 2>&1)" "include/bad.h"

# The include paths keep "store/x.h" out of a program's reach; a path
# ("../", "lib/", "server/") would walk around them.
reaches() { grep -HnE '^#include "(\.\./|lib/|server/|src/)' "$@" 2>/dev/null; }
same no_include_by_path "$(cd "$root" && reaches cli/*.[ch] rateld/*.[ch] \
    captchad/*.[ch] module/*.[ch] server/*/*.[ch] tests/integration/*.[ch])" ""
# Neither program includes the other's headers, nor the kit a program's.
cross=$(cd "$root" && {
    grep -HnE '^#include "captchad/' rateld/*.[ch] server/*/*.[ch]
    grep -HnE '^#include "rateld/' captchad/*.[ch] server/*/*.[ch]
} 2>/dev/null)
same no_program_includes_another "$cross" ""
# The check can fail: a program reaching into lib/ by path is named.
mkdir -p "$tmp/reach/cli"
printf '#include "../lib/store/health.h"\n' >"$tmp/reach/cli/x.c"
contains check_names_reach "$(cd "$tmp/reach" && reaches cli/*.[ch])" "cli/x.c:1:"
finish
