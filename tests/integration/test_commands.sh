#!/usr/bin/env bash
# test_commands.sh - every program the build, the tests and the benchmarks
# run is installed by scripts/setup.sh on a fresh Debian 12 (issue 13's
# minbase finding: xxd was used and not installed). commands.py lists the
# commands of every shell file, make recipe and debian/rules (parsed by
# shfmt) and finds each one's Debian package; one `ok` line per command
# (run this file alone to read the list), one FAIL per command that no
# package of setup.sh provides, directly or by a dependency, and that is
# not on every Debian system (Essential, Priority: required).
. "$(dirname "$0")/lib.sh"

check=$root/tests/integration/commands.py
out=$(python3 "$check" "$root/scripts/setup.sh" "$root" 2>&1)
rc=$?
while read -r word cmd rest; do
    case $word in
    ok) ok "command_${cmd}: $rest" ;;
    MISSING) fail "command_${cmd%:}" "$rest" ;;
    esac
done <<<"$out"
same commands_exit "$rc" 0
n=$(tail -1 <<<"$out" | cut -d' ' -f1)
same commands_found "$([ "${n:-0}" -ge 50 ] && echo "50 or more" || echo "$n")" "50 or more"

# The check can fail: a package taken out of setup.sh's list...
sed 's/^\(    nginx\) wrk /\1 /' "$root/scripts/setup.sh" >"$tmp/setup.sh"
out=$(python3 "$check" "$tmp/setup.sh" "$root" 2>&1)
contains catches_unlisted_package "$out" "MISSING wrk: package wrk is not installed by setup.sh; used at bench/"

# ...and a command nobody provides, found where parsing must look for it
# (behind timeout, in a pipeline, in a function, in a command
# substitution), but not in a here-document, a comment, a case pattern,
# a function's own name or a variable.
cat >"$tmp/script.sh" <<'SH'
helper() { ratel-no-such-a "$@" | sort; }
x=$(timeout -k 1 5 ratel-no-such-b --flag)
case $x in
ratel-no-such-pattern) helper ;;
esac
cat <<TXT
ratel-no-such-heredoc
TXT
# ratel-no-such-comment
"$x" arg
SH
out=$(python3 "$check" "$root/scripts/setup.sh" "$tmp" "$tmp/script.sh" 2>&1)
same finds_exactly_the_missing "$(grep '^MISSING' <<<"$out")" "MISSING ratel-no-such-a: not installed; used at script.sh:1
MISSING ratel-no-such-b: not installed; used at script.sh:2"

finish
