#!/usr/bin/env bash
# test_shellcheck.sh - every shell file of the tree passes shellcheck with
# no finding of any severity, style notes included: the tests, scripts/,
# bench/, .ci/run, examples/. The files are the tree's own
# (scripts/tree-files.sh: tracked, and new ones not yet committed) named
# *.sh or *.bash or starting with a sh or bash shebang; the settings are
# the repository's .shellcheckrc. One ok per clean file, one FAIL per
# finding, named by file, line and column.
#
# A finding is fixed, or, where the code is right as it is, silenced on
# its command with a reason: `# shellcheck disable=SC2016 # nginx's $arg_k`.
. "$(dirname "$0")/lib.sh"

if ! command -v shellcheck >/dev/null; then
    echo "FAIL shellcheck: not installed (scripts/setup.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi

# shell_files: of the NUL-separated paths on stdin (relative to the
# current directory), the shell files, one a line.
shell_files() {
    local f first
    while IFS= read -r -d '' f; do
        case $f in
        *.sh | *.bash) echo "$f" ;;
        *)
            first=
            IFS= read -r first <"$f" 2>/dev/null
            [[ $first =~ ^#!\ *(/usr)?/bin/(env\ +)?(ba|da)?sh([[:space:]]|$) ]] && echo "$f"
            ;;
        esac
    done
}

# lint FILE...: shellcheck's findings, one a line (file:line:col: level:
# message [SCnnnn]), then "exit N".
lint() {
    shellcheck -f gcc -- "$@" 2>&1
    echo "exit $?"
}

mapfile -t files < <(cd "$root" && scripts/tree-files.sh | shell_files | sort)
# A discovery that broke would pass with nothing to check.
same shell_files_found "$([ ${#files[@]} -ge 60 ] && echo "60 or more" || echo "${#files[@]}")" "60 or more"
same shellcheckrc_at_the_top "$([ -f "$root/.shellcheckrc" ] && echo yes)" yes

out=$(cd "$root" && lint "${files[@]}")
rc=${out##*exit }
findings=$(grep -E '^[^:]+:[0-9]+:[0-9]+: ' <<<"$out")
declare -A flagged
while IFS= read -r line; do
    [ -n "$line" ] || continue
    flagged[${line%%:*}]=1
    fail "shellcheck ${line%%: *}" "${line#*: }"
done <<<"$findings"
for f in "${files[@]}"; do
    [ -n "${flagged[$f]:-}" ] || ok "shellcheck $f"
done
# Anything else shellcheck says (it could not run, or read a file).
other=$(grep -vE '^[^:]+:[0-9]+:[0-9]+: |^exit [0-9]+$' <<<"$out")
same shellcheck_exit "$rc${other:+ $other}" "$([ -n "$findings" ] && echo 1 || echo 0)"

# The check can fail: a finding is named, and a shell file without a
# suffix is found by its shebang.
mkdir -p "$tmp/lint"
# shellcheck disable=SC2016 # the script's own $1, written as it is
printf '#!/bin/sh\ncat "$1" | grep -c x\necho $1\n' >"$tmp/lint/bad.sh"
contains check_names_finding "$(cd "$tmp/lint" && lint bad.sh)" "bad.sh:3:6: note: Double quote to prevent globbing and word splitting. [SC2086]"
printf '#!/usr/bin/env bash\necho\n' >"$tmp/lint/run"
printf '#!/usr/bin/python3\n' >"$tmp/lint/tool"
printf 'text\n' >"$tmp/lint/notes"
same check_finds_by_shebang "$(cd "$tmp/lint" && printf '%s\0' bad.sh run tool notes | shell_files | tr '\n' ' ')" "bad.sh run "
finish
