#!/usr/bin/env bash
# test_format.sh - every C file and header of the tree is as clang-format
# (the repository's .clang-format) writes it: `make format-check` names
# each one that `make format` would change.
. "$(dirname "$0")/lib.sh"

out=$(make -s --no-print-directory -C "$root" BUILD="$build" format-check 2>&1)
same all_c_formatted "$out" ""
# The check can fail: a file made unformatted is named.
mkdir -p "$tmp/tree/include"
printf 'int   x ;\n' >"$tmp/tree/include/bad.h"
cp "$root/.clang-format" "$tmp/tree/"
contains check_names_file "$(make -s --no-print-directory -C "$tmp/tree" -f "$root/Makefile" BUILD="$tmp" format-check 2>&1)" "include/bad.h"
finish
