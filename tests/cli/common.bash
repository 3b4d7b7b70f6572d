# common.bash - what the CLI suites share (sourced by tests/cli/test_*.sh;
# not a test itself): running `ratel` with $RATEL_CLI_WRAP in front, picking
# checks by name, and comparing exit status and output.
#
# The sourcing script sets ratel_bin, wrap (array), tmp and only (array)
# first, and defines ok/fail with its counters.
# shellcheck disable=SC2154 # those variables: assigned there, not here

# ratel ARGS... (stdin passed through): sets $out, $err and $rc.
ratel() {
    out=$("${wrap[@]}" "$ratel_bin" "$@" 2>"$tmp/stderr")
    rc=$?
    err=$(cat "$tmp/stderr")
}

# Runs check function NAME unless names were given and it is not one.
check() {
    local name=$1
    if [ ${#only[@]} -gt 0 ]; then
        local n found=0
        for n in "${only[@]}"; do [ "$n" = "$name" ] && found=1; done
        [ $found = 1 ] || return 0
    fi
    "$name"
}

# expect NAME STATUS [SUBSTRING_OF_STDOUT [SUBSTRING_OF_STDERR]]
expect() {
    local name=$1 want=$2 o=${3:-} e=${4:-}
    if [ "$rc" != "$want" ]; then
        fail "$name" "exit $rc, want $want (stdout: ${out:0:200}; stderr: ${err:0:300})"
    elif [ -n "$o" ] && [[ $out != *"$o"* ]]; then
        fail "$name" "stdout lacks '$o': ${out:0:300}"
    elif [ -n "$e" ] && [[ $err != *"$e"* ]]; then
        fail "$name" "stderr lacks '$e': ${err:0:300}"
    else
        ok "$name"
    fi
}
