#!/usr/bin/env bash
# test_symbols.sh - libratel defines no global symbol outside its names
# (docs/layout.md, "Symbol names"): every global symbol that libratel.a
# defines starts with ratel_, the public ones (ratel_x, named in
# include/ratel.h) and the internal ones (ratel__x) alike, so an installed
# libratel.a cannot clash with its user's conn_open; and libratel.so
# exports the public API only. The one exception is not ours: built with
# AddressSanitizer (`make asan`), each global variable gets an ODR
# indicator, __odr_asan.NAME (gcc) or __odr_asan_gen_NAME (clang), checked
# as NAME.
. "$(dirname "$0")/lib.sh"
for f in libratel.a libratel.so; do
    if [ ! -e "$build/$f" ]; then
        echo "FAIL $f: $build/$f not built (make)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

# The public names: every ratel_x that include/ratel.h mentions.
public=$(grep -oE '\bratel_[A-Za-z0-9][A-Za-z0-9_]*' "$root/include/ratel.h" | sort -u)

# strays NM-ARGS... FILE: one line per global defined symbol of FILE
# that breaks the rule, with the reason.
strays() {
    nm "$@" 2>/dev/null | awk 'NF == 3 && $2 ~ /[A-TV-Z]/ { print $3 }' |
        sed -E 's/^__odr_asan(\.|_gen_)//' | sort -u | while read -r sym; do
            case $sym in
            ratel__*) ;;
            ratel_*)
                grep -qxF "$sym" <<<"$public" ||
                    echo "$sym: ratel_ but not in include/ratel.h (internal: ratel__)"
                ;;
            *) echo "$sym: not prefixed (internal: ratel__)" ;;
            esac
        done
}

same archive_prefixed "$(strays -g --defined-only "$build/libratel.a")" ""
# The shared library exports the public API only: its internal ratel__
# names are hidden (-fvisibility=hidden).
exports=$(nm -D --defined-only "$build/libratel.so" | awk 'NF == 3 { print $3 }')
same shared_exports_public "$(strays -D --defined-only "$build/libratel.so")" ""
same shared_exports_no_internal "$(grep '^ratel__' <<<"$exports")" ""
contains shared_exports_api "$exports" "ratel_policy_acquire"

# The check can fail: an archive defining conn_open, ratel_helper (not in
# ratel.h) and ratel__fine is named for the first two only.
cat >"$tmp/stray.c" <<'EOF'
int conn_open(void);
int ratel_helper(void);
int ratel__fine(void);
int conn_open(void) { return 1; }
int ratel_helper(void) { return 2; }
int ratel__fine(void) { return 3; }
EOF
cc -c "$tmp/stray.c" -o "$tmp/stray.o" && ar rcs "$tmp/libstray.a" "$tmp/stray.o"
same check_names_strays "$(strays -g --defined-only "$tmp/libstray.a")" \
    "conn_open: not prefixed (internal: ratel__)
ratel_helper: ratel_ but not in include/ratel.h (internal: ratel__)"
finish
