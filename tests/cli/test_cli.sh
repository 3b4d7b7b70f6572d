#!/usr/bin/env bash
# test_cli.sh - the `ratel` command, end to end: help and exit statuses,
# explain, replay (per-request output, costs, malformed traces, stdin and
# FILE, --summary, --svg: a window per rule, the keys denied most, distinct
# keys, a reader that stops early; hold_ms for concurrent rules) and the
# fixed-window boundary burst.
#
#   BUILD=build bash tests/cli/test_cli.sh [NAME...]
#
# Each check prints `ok NAME` or `FAIL NAME: why`; the last line is
# `N passed, N failed` and the status is 1 if anything failed. Give check
# names to run only those. RATEL_CLI_WRAP, if set, prefixes every ratel
# run (e.g. "valgrind -q --error-exitcode=99 --leak-check=full
# --errors-for-leak-kinds=all"). Needs xmllint (Debian: libxml2-utils).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
ratel_bin=$build/ratel
read -r -a wrap <<<"${RATEL_CLI_WRAP:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
only=("$@")

ok() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

. "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# same NAME GOT WANT: exact comparison of two texts.
same() {
    if [ "$2" = "$3" ]; then
        ok "$1"
    else
        fail "$1" "got [$(printf '%s' "$2" | head -c 300 | tr '\t\n' '|;')] want [$(printf '%s' "$3" | tr '\t\n' '|;')]"
    fi
}

tab=$'\t'

# ------------------------------------------------------------------ help

help_main() {
    ratel --help
    expect help_main 0 "usage: ratel" ""
    ratel -h
    expect help_main_short 0 "Commands:"
    ratel --version
    same version "$out" "ratel 0.1.0"
    ratel
    expect no_command 2 "" "usage: ratel"
    ratel help
    expect help_command 0 "usage: ratel"
    ratel help replay
    expect help_command_replay 0 "usage: ratel replay"
    ratel help nope
    expect help_command_unknown 2 "" "'nope'"
    help_grammar
}

# The help's rule grammar names every unit, algorithm and option the core
# accepts, lists every command, and its examples parse.
help_grammar() {
    local text word rules examples
    text=$("${wrap[@]}" "$ratel_bin" --help)
    for word in "ms, s, m, h, d, w;" "1mo to 12mo" concurrent "[,tz=ZONE]" \
        "release --store URL"; do
        if [[ $text == *"$word"* ]]; then ok "help_grammar $word"; else fail "help_grammar" "--help lacks [$word]"; fi
    done
    rules=$(printf '%s\n' "$text" | sed -n '/^Rules are/,/^$/p' | tr '\n' ' ' |
        sed 's/.*Examples: //; s/\. *$//; s/, / /g')
    read -r -a examples <<<"$rules"
    ratel explain "${examples[@]}"
    expect help_grammar_examples 0 "50/30s:concurrent" ""
}

help_commands() {
    local cmd
    for cmd in explain replay; do
        ratel "$cmd" --help
        if [ $rc = 0 ] && [[ $out == *"usage: ratel $cmd"* ]] &&
            [[ $out == *"Options:"* ]] && [[ $out == *"xample"* ]]; then
            ok "help_$cmd"
        else
            fail "help_$cmd" "exit $rc or missing usage/options/example"
        fi
        ratel "$cmd" -h
        expect "help_${cmd}_short" 0 "usage: ratel $cmd"
    done
}

unknown_things() {
    ratel frobnicate
    expect unknown_command 2 "" "unknown command 'frobnicate'"
    ratel --frob
    expect unknown_global_option 2 "" "unknown option '--frob'"
    ratel replay --rule 1/1s --frob
    expect unknown_replay_option 2 "" "unknown option '--frob'"
    ratel replay -x
    expect unknown_short_option 2 "" "unknown option '-x'"
    ratel explain --nope 1/1s
    expect unknown_explain_option 2 "" "unknown option '--nope'"
    ratel replay --rule
    expect missing_argument 2 "" "option '--rule' needs an argument"
    ratel replay --summary=yes --rule 1/1s
    expect unwanted_argument 2 "" "'--summary' takes no argument"
    ratel replay --rule 1/1s a.trace b.trace
    expect extra_operand 2 "" "'b.trace'"
    ratel replay </dev/null
    expect no_rule 2 "" "no rule given"
    ratel explain
    expect explain_no_rule 2 "" "no rule given"
    ratel replay --rule 1/1s --memory lots </dev/null
    expect bad_memory 2 "" '"lots"'
    "${wrap[@]}" "$ratel_bin" --help >/dev/full 2>/dev/null
    rc=$?
    [ $rc = 1 ] && ok write_error || fail write_error "exit $rc, want 1"
}

# --------------------------------------------------------------- explain

explain_good() {
    ratel explain 10/60m
    same explain_canonical "$out" "10/1h: at most 10 requests in any 1-hour window"
    ratel explain 1/60s 100/1s:gcra,burst=200 1000/1d:fixed
    local n
    n=$(printf '%s\n' "$out" | wc -l)
    if [ $rc = 0 ] && [ "$n" = 3 ] && [[ $out == "1/1m: "* ]] &&
        [[ $out == *"100/1s:gcra,burst=200: "* ]] &&
        [[ $out == *"1000/1d:fixed: "*"2000"* ]]; then
        ok explain_several
    else
        fail explain_several "exit $rc: $out"
    fi
}

explain_malformed() {
    local r i=0
    for r in 0/1s 10/0s 10/1x -1/1s 99999999999999999999/1s 10/1s:nope \
        10/1s,burst=0 '' 10/1sx 10 /1s 10/ 10/1s:gcra,burst=x; do
        i=$((i + 1))
        ratel explain "$r"
        if [ $rc = 2 ] && [[ $err == *"\"$r\""* ]] && [ -z "$out" ]; then
            ok "explain_bad_$i"
        else
            fail "explain_bad_$i" "rule '$r': exit $rc, stderr: $err"
        fi
    done
    ratel explain -- -1/1s
    expect explain_bad_after_dashdash 2 "" '"-1/1s"'
    ratel explain 10/1s 0/1s 20/1m
    if [ $rc = 2 ] && [[ $out == "10/1s: "*"20/1m: "* ]] &&
        [[ $err == *'"0/1s"'* ]]; then
        ok explain_mixed
    else
        fail explain_mixed "exit $rc, out: $out, err: $err"
    fi
}

# ---------------------------------------------------------------- replay

acceptance() {
    ratel replay --rule 2/1s < <(printf '0 a\n0 a\n1 a\n999 a\n1000 a\n')
    same acceptance "$rc:$out" "0:0${tab}a${tab}1${tab}1${tab}0
0${tab}a${tab}1${tab}0${tab}0
1${tab}a${tab}0${tab}0${tab}999
999${tab}a${tab}0${tab}0${tab}1
1000${tab}a${tab}1${tab}1${tab}0"
}

independent_keys() {
    ratel replay --rule 1/1s < <(printf '0 a\n0 b\n0 a\n0 c\n')
    same independent_keys "$(printf '%s\n' "$out" | cut -f2,3 | tr '\t\n' ':,')" \
        "a:1,b:1,a:0,c:1,"
}

costs() {
    ratel replay --rule 5/1s < <(printf '0 a 3\n0 a 3\n0 a 2\n500 b 5\n1000 a 4\n')
    same cost_column "$rc:$out" "0:0${tab}a${tab}1${tab}2${tab}0
0${tab}a${tab}0${tab}2${tab}1000
0${tab}a${tab}1${tab}0${tab}0
500${tab}b${tab}1${tab}0${tab}0
1000${tab}a${tab}1${tab}1${tab}0"
    ratel replay --rule 5/1s --rule 50/1h < <(printf '0 a 1\n1 a 6\n')
    expect cost_too_large 2 "" "<stdin>:2: cost 6 is more than rule 5/1s"
}

multi_rule_policy() {
    # 2/1s and 3/1h: the hour rule binds from the fourth request on, and a
    # request denied by one rule charges neither.
    ratel replay --rule 2/1s --rule 3/1h \
        < <(printf '0 a\n0 a\n0 a\n1000 a\n2000 a\n')
    same multi_rule "$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "11010"
}

malformed_trace() {
    local i=0 line want
    while IFS='|' read -r line want; do
        i=$((i + 1))
        ratel replay --rule 2/1s < <(printf '0 a\n%b\n5 a\n' "$line")
        if [ $rc = 2 ] && [[ $err == *"<stdin>:2: "*"$want"* ]] &&
            [[ $err == *"t_ms key [cost [hold_ms]]"* ]]; then
            ok "malformed_$i"
        else
            fail "malformed_$i" "line '$line': exit $rc, stderr: $err"
        fi
    done <<'EOF'
x a|t_ms must be a non-negative integer
-5 a|"-5"
1.5 a|"1.5"
7|no key
7 a 0|cost must be a whole number >= 1, not "0"
7 a x|"x"
7 a -1|"-1"
7 a 1 extra|hold_ms must be a non-negative integer (milliseconds), not "extra"
7 a 1 -2|hold_ms must be a non-negative integer (milliseconds), not "-2"
7 a 1 1.5|"1.5"
7 a 1 99999999999999999|hold_ms is out of range (at most 9007199254740), got
7 a 1 5 extra|unexpected fifth field "extra"
99999999999999999 a|out of range
EOF
    awk 'BEGIN { print "0 a"; s = ""; for (i = 0; i < 5000; i++) s = s "9"
                 print s, "a" }' >"$tmp/long.trace"
    ratel replay --rule 2/1s "$tmp/long.trace"
    expect malformed_long_line 2 "" "long.trace:2: line is longer than"
    printf '# comment\n0 a\nbogus line here\n' >"$tmp/bad.trace"
    ratel replay --rule 2/1s "$tmp/bad.trace"
    expect malformed_names_file 2 "" "bad.trace:3: "
    ratel replay --rule 2/1s "$tmp/does-not-exist.trace"
    expect missing_file 1 "" "does-not-exist.trace"
}

input_forms() {
    printf '# a comment\n\n0 a\n   \n  # indented comment\n0\ta\r\n1 a 1\n1000 a' \
        >"$tmp/forms.trace"
    local want="0${tab}a${tab}1${tab}1${tab}0
0${tab}a${tab}1${tab}0${tab}0
1${tab}a${tab}0${tab}0${tab}999
1000${tab}a${tab}1${tab}1${tab}0"
    ratel replay --rule 2/1s "$tmp/forms.trace"
    same input_file "$rc:$out" "0:$want"
    ratel replay --rule 2/1s <"$tmp/forms.trace"
    same input_stdin "$rc:$out" "0:$want"
    ratel replay --rule 2/1s - <"$tmp/forms.trace"
    same input_dash "$rc:$out" "0:$want"
    ratel replay --rule 2/1s </dev/null
    same input_empty "$rc:$out" "0:"
}

summary() {
    # Worked by hand, 3/1s: a asks 1+2 at 0 (3 charged), 1 at 20 (denied),
    # 2 at 1000 (the instant-0 permits have left the window): 4 requests,
    # 3 allowed, 1 denied, 5 permits. b: 3 at 10, 1 at 30 (denied). c: 1.
    printf '0 a\n0 a 2\n10 b 3\n20 a\n30 b\n1000 a 2\n1000 c\n' >"$tmp/sum.trace"
    ratel replay --rule 3/1s --summary "$tmp/sum.trace"
    same summary "$rc:$out" "0:# key${tab}requests${tab}allowed${tab}denied${tab}permits
a${tab}4${tab}3${tab}1${tab}5
b${tab}2${tab}1${tab}1${tab}3
c${tab}1${tab}1${tab}0${tab}1
total (3 keys)${tab}7${tab}5${tab}2${tab}9
# most denied${tab}key${tab}denied${tab}allowed
top 1${tab}a${tab}1${tab}3
top 2${tab}b${tab}1${tab}1"
}

# The same trace under fixed and sliding: four requests straddling the
# boundary at t=1000. Fixed admits 2 before it and 2 after it, 2 x LIMIT
# within one trailing second; sliding admits LIMIT.
boundary_burst() {
    local trace='900 k\n950 k\n1000 k\n1050 k\n' fixed sliding
    ratel replay --rule 2/1s:fixed < <(printf '%b' "$trace")
    fixed=$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')
    ratel replay --rule 2/1s < <(printf '%b' "$trace")
    sliding=$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')
    same boundary_fixed_2x "$fixed" "1111"
    same boundary_sliding_1x "$sliding" "1100"

    # A longer burst, 5/1m, every 100 ms from 58 s to 62 s: the most
    # admitted within any trailing 60 s, counted from the output.
    awk 'BEGIN { for (t = 58000; t <= 62000; t += 100) print t, "k" }' \
        >"$tmp/burst.trace"
    local most algo
    for algo in fixed sliding; do
        ratel replay --rule "5/1m:$algo" "$tmp/burst.trace"
        most=$(printf '%s\n' "$out" | awk -F'\t' '$3 == 1 {
                t[n++] = $1
                c = 0
                for (i = 0; i < n; i++) if (t[i] > $1 - 60000) c++
                if (c > m) m = c
            } END { print m + 0 }')
        if [ $algo = fixed ]; then
            same boundary_window_fixed "$most" 10
        else
            same boundary_window_sliding "$most" 5
        fi
    done
}

svg_chart() {
    awk 'BEGIN { for (t = 58000; t <= 62000; t += 100) print t, "k"
                 for (t = 0; t < 120000; t += 7000) print t, "u" t % 3 }' |
        sort -n -k1,1 >"$tmp/chart.trace"
    ratel replay --rule 5/1m --rule 100/1h --summary --svg "$tmp/chart.svg" \
        "$tmp/chart.trace"
    if [ $rc = 0 ] && [ -s "$tmp/chart.svg" ] && [[ $out == *"total ("* ]]; then
        ok svg_written
    else
        fail svg_written "exit $rc: $err"
    fi
    if xmllint --noout "$tmp/chart.svg" 2>"$tmp/xmllint.err"; then
        ok svg_well_formed
    else
        fail svg_well_formed "$(head -3 "$tmp/xmllint.err")"
    fi
    local algo missing=""
    for algo in sliding fixed approx gcra; do
        grep -q "font-size=\"15\">$algo</tspan>" "$tmp/chart.svg" ||
            missing="$missing $algo"
    done
    [ -z "$missing" ] && ok svg_four_panels || fail svg_four_panels "no panel for$missing"
    if grep -Eq '<script|@import|@font-face|xlink:href|href=|url\(http' "$tmp/chart.svg"; then
        fail svg_self_contained "external reference or script"
    else
        ok svg_self_contained
    fi
    grep -q '5/1m + 100/1h' "$tmp/chart.svg" && ok svg_title_rules ||
        fail svg_title_rules "rules not in the title"
    # Fixed's panel reports the boundary burst: peak 10 per key, limit 5.
    grep -q 'peak 10 per key, limit 5' "$tmp/chart.svg" && ok svg_fixed_peak ||
        fail svg_fixed_peak "fixed panel does not show peak 10"

    # Per-request output still goes to stdout with --svg; stdin works.
    ratel replay --rule 2/1s --svg "$tmp/acc.svg" < <(printf '0 a\n0 a\n1 a\n')
    same svg_with_stdout "$rc:$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "0:110"
    xmllint --noout "$tmp/acc.svg" 2>/dev/null && ok svg_stdin ||
        fail svg_stdin "not well-formed"

    # Unix-time traces get clock labels; empty traces still make a chart.
    printf '1700000000000 a\n1700000030000 a\n1700000090000 b\n' |
        { ratel replay --rule 1/1m --svg "$tmp/unix.svg"; }
    grep -q '22:14' "$tmp/unix.svg" && xmllint --noout "$tmp/unix.svg" 2>/dev/null &&
        ok svg_unix_time || fail svg_unix_time "no UTC clock labels"
    ratel replay --rule 1/1m --svg "$tmp/empty.svg" </dev/null
    [ $rc = 0 ] && xmllint --noout "$tmp/empty.svg" 2>/dev/null &&
        ok svg_empty_trace || fail svg_empty_trace "exit $rc"

    # A gcra burst larger than the limit: the sliding variant can never
    # admit cost 15 and counts it as rejected instead of failing.
    ratel replay --rule 10/1s:gcra,burst=20 --svg "$tmp/gcra.svg" \
        < <(printf '0 a 15\n')
    same svg_variant_cost "$rc:$(cut -f3 <<<"$out")" "0:1"

    ratel replay --rule 1/1s --svg "$tmp/no/such/dir/x.svg" </dev/null
    expect svg_unwritable 1 "" "x.svg"
}

# The SVG parses as XML (xmllint aside, Python's own parser).
svg_parses() {
    python3 -c 'import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])' "$1" 2>/dev/null
}

# Every rule gets a line strip in every algorithm's panel, with its own
# peak: 2/1s, 5/1m and 100/1h over a burst that the minute rule binds.
svg_every_rule() {
    awk 'BEGIN { for (t = 58000; t <= 62000; t += 100) print t, "k" }' \
        >"$tmp/rules.trace"
    ratel replay --rule 2/1s --rule 5/1m --rule 100/1h --svg "$tmp/rules.svg" \
        "$tmp/rules.trace"
    if [ $rc = 0 ] && svg_parses "$tmp/rules.svg"; then
        ok svg_rules_parse
    else
        fail svg_rules_parse "exit $rc: $err"
    fi
    local n period
    n=$(grep -c '<g class="window">' "$tmp/rules.svg")
    same svg_window_per_rule "$n" 12
    for period in '1 s' '1 min' '1 h'; do
        n=$(grep -c "trailing $period: peak" "$tmp/rules.svg")
        same "svg_window_${period/ /_}" "$n" 4
    done
    # fixed, 2 per second: 4 admitted in the minute before the boundary
    # (58 s and 59 s), 5 after it (60 s, 61 s, 62 s): 9 within the trailing
    # minute and the hour at 62 s, over the minute's limit; sliding 5.
    grep -q 'trailing 1 h: peak 9 per key, limit 100' "$tmp/rules.svg" &&
        grep -q 'trailing 1 min: peak 9 per key, limit 5' "$tmp/rules.svg" &&
        grep -q 'trailing 1 h: peak 5 per key, limit 100' "$tmp/rules.svg" &&
        ok svg_rule_peaks || fail svg_rule_peaks "not the peaks 9 and 5"
}

# The keys denied most: b (4 denied), then a (2), in --summary and in the
# SVG; c, never denied, is not listed.
most_denied() {
    printf '0 a\n0 a\n0 a\n0 b\n0 b\n0 b\n0 b\n0 b\n0 c\n' >"$tmp/denied.trace"
    ratel replay --rule 1/1s --summary --svg "$tmp/denied.svg" "$tmp/denied.trace"
    same most_denied_summary "$rc:$(printf '%s\n' "$out" | sed -n '/^# most denied/,$p')" \
        "0:# most denied${tab}key${tab}denied${tab}allowed
top 1${tab}b${tab}4${tab}1
top 2${tab}a${tab}2${tab}1"
    same most_denied_svg_keys \
        "$(grep -o 'class="denied-key"[^>]*>[^<]*' "$tmp/denied.svg" | sed 's/.*>//' | tr '\n' ,)" "b,a,"
    grep -q 'denied 4, allowed 1' "$tmp/denied.svg" && svg_parses "$tmp/denied.svg" &&
        ok most_denied_svg_counts || fail most_denied_svg_counts "no 'denied 4, allowed 1'"
    ratel replay --rule 5/1s --summary --svg "$tmp/none.svg" < <(printf '0 a\n')
    [[ $out == *"# most denied${tab}key${tab}denied${tab}allowed" ]] &&
        grep -q 'No request was denied' "$tmp/none.svg" &&
        ok most_denied_none || fail most_denied_none "exit $rc: $out"
}

# Distinct keys per bar: 10 s shown as 200 bars of 50 ms. a, b, c at 0
# and a again at 10 are 3 keys in the first bar; a twice at 60 is 1 in the
# second; d and e at 9999 are 2 in the last, and d's line at 120 after it
# counts at d's latest time (a key's clock never goes back), not again.
distinct_keys() {
    printf '0 a\n0 b\n0 c\n10 a\n60 a\n60 a\n9999 d\n9999 e\n120 d\n' |
        { ratel replay --rule 100/1s --svg "$tmp/distinct.svg"; }
    same distinct_keys "$rc:$(grep -o '<title>[0-9]* distinct keys*, t_ms [0-9]* to' \
        "$tmp/distinct.svg" | sed 's/<title>//; s/ distinct keys*, t_ms /@/; s/ to//' |
        tr '\n' ,)" "0:3@0,1@50,2@9950,"
    grep -q 'per 50 ms: how many keys' "$tmp/distinct.svg" && svg_parses "$tmp/distinct.svg" &&
        ok distinct_keys_panel || fail distinct_keys_panel "no 50 ms panel"
}

# `| head -1` closes stdout early: the replay still reads the whole trace
# and writes a complete chart, quietly, exit 0. Other write errors still
# fail.
svg_pipe_closed() {
    awk 'BEGIN { for (i = 0; i < 100000; i++) print i, "k" i % 700 }' >"$tmp/pipe.trace"
    rm -f "$tmp/pipe.svg"
    "${wrap[@]}" "$ratel_bin" replay --rule 10/1s --svg "$tmp/pipe.svg" \
        "$tmp/pipe.trace" 2>"$tmp/pipe.err" | head -1 >"$tmp/pipe.out"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ] && [ ! -s "$tmp/pipe.err" ] && svg_parses "$tmp/pipe.svg" &&
        grep -q '100000 requests' "$tmp/pipe.svg" &&
        [ "$(cat "$tmp/pipe.out")" = "0${tab}k0${tab}1${tab}9${tab}0" ]; then
        ok svg_pipe_closed
    else
        fail svg_pipe_closed "exit $rc, stderr: $(head -c 300 "$tmp/pipe.err"), svg: $(tail -c 100 "$tmp/pipe.svg" 2>&1)"
    fi
    "${wrap[@]}" "$ratel_bin" replay --rule 10/1s --summary "$tmp/pipe.trace" \
        2>"$tmp/pipe.err" | head -1 >/dev/null
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] && [ ! -s "$tmp/pipe.err" ] && ok pipe_closed_plain ||
        fail pipe_closed_plain "exit $rc, stderr: $(head -c 300 "$tmp/pipe.err")"
    "${wrap[@]}" "$ratel_bin" replay --rule 10/1s --svg "$tmp/full.svg" \
        "$tmp/pipe.trace" >/dev/full 2>"$tmp/pipe.err"
    rc=$?
    [ "$rc" = 1 ] && grep -q 'writing standard output' "$tmp/pipe.err" &&
        svg_parses "$tmp/full.svg" && ok stdout_full ||
        fail stdout_full "exit $rc, stderr: $(head -c 300 "$tmp/pipe.err")"
}

# hold_ms, the 4th column: a lease of a concurrent rule is given back at
# t + hold_ms, before the lines at or after that time; without it a lease
# is held until it expires (PERIOD).
hold_times() {
    ratel replay --rule 2/10s:concurrent < <(printf '0 a 1 500\n100 a 1 500\n200 a\n600 a\n')
    same hold_ms "$rc:$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "0:1101"
    ratel replay --rule 2/10s:concurrent < <(printf '0 a\n100 a\n200 a\n600 a\n10000 a\n')
    same hold_until_expiry "$rc:$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "0:11001"
    # Released exactly at t + hold_ms (hold_ms 0: before the next line at
    # the same time); keys hold apart; a cost of 2 is one lease of 2.
    ratel replay --rule 2/10s:concurrent \
        < <(printf '0 a 2 300\n0 b 1 0\n0 b\n0 b\n0 b\n299 a\n300 a 2\n')
    same hold_exact_time "$rc:$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "0:1111001"
    # With a rate rule as well: the lease is released, the rate still binds.
    ratel replay --rule 1/10s:concurrent --rule 2/1m \
        < <(printf '0 a 1 10\n20 a 1 10\n40 a 1 10\n')
    same hold_with_rate "$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "110"
    ratel replay --rule 2/1s < <(printf '0 a 1 500\n1 a 1 5\n2 a\n')
    if [ $rc = 0 ] && [ "$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" = 110 ] &&
        [ "$(grep -c 'hold_ms' <<<"$err")" = 1 ] &&
        [[ $err == *"warning: <stdin>:1: hold_ms given, but the policy has no concurrent rule"* ]]; then
        ok hold_without_concurrent
    else
        fail hold_without_concurrent "exit $rc, out: $out, err: $err"
    fi
    ratel replay --rule 2/10s:concurrent --summary --svg "$tmp/hold.svg" \
        < <(printf '0 a 1 500\n100 a 1 500\n200 a\n600 a\n')
    [ $rc = 0 ] && [[ $out == *"a${tab}4${tab}3${tab}1${tab}3"* ]] &&
        svg_parses "$tmp/hold.svg" && ok hold_summary_svg ||
        fail hold_summary_svg "exit $rc, out: $out, err: $err"
}

policy_errors() {
    ratel replay --rule 0/1s </dev/null
    expect replay_bad_rule 2 "" '"0/1s"'
    ratel replay --rule 2/1s --rule 2/1s </dev/null
    expect replay_duplicate_rule 2 "" '"2/1s"'
    local args=() i
    for i in 1 2 3 4 5 6 7 8 9; do args+=(--rule "$i/1s"); done
    ratel replay "${args[@]}" </dev/null
    expect replay_too_many_rules 2 "" "too many rules"
}

memory_option() {
    ratel replay --rule 2/1s --memory 1M < <(printf '0 a\n0 a\n0 a\n')
    same memory_1m "$rc:$(printf '%s\n' "$out" | cut -f3 | tr -d '\n')" "0:110"
}

# Many keys and lines stream through in one pass: the output has one line
# per input line, in order.
many_lines() {
    awk 'BEGIN { for (i = 0; i < 20000; i++) print i, "k" i % 500 }' >"$tmp/many.trace"
    ratel replay --rule 10/1s "$tmp/many.trace"
    local n last
    n=$(printf '%s\n' "$out" | wc -l)
    last=$(printf '%s\n' "$out" | tail -1 | cut -f1,2)
    same many_lines "$rc:$n:$last" "0:20000:19999${tab}k499"
}

sample_trace() {
    local gen="$root/examples/traces/make-sample.sh"
    "$gen" "$tmp/sample.trace"
    if cmp -s "$tmp/sample.trace" "$root/examples/traces/sample.trace"; then
        ok sample_reproducible
    else
        fail sample_reproducible "make-sample.sh output differs from sample.trace"
    fi
}

if [ ! -x "$ratel_bin" ]; then
    echo "FAIL setup: $ratel_bin not built"
    echo "0 passed, 1 failed"
    exit 1
fi
command -v xmllint >/dev/null || echo "note: xmllint missing (apt-get install libxml2-utils)"

# tls_insecure=yes: the CLI warns once on standard error, in the store's
# words, before it opens the store (nothing listens on port 1: the failure
# policy decides); a verified rediss:// URL is not warned about.
tls_insecure_warning() {
    ratel acquire --store "rediss://127.0.0.1:1?tls_insecure=yes&timeout_ms=200" --rule 1/60s k
    expect tls_insecure_warned 0 "" \
        "ratel acquire: warning: TLS certificate verification is off (tls_insecure=yes)"
    same tls_insecure_warned_once "$(grep -c 'verification is off' <<<"$err")" 1
    ratel acquire --store "rediss://127.0.0.1:1?timeout_ms=200" --rule 1/60s k
    same tls_verified_not_warned "$(grep -c 'verification is off' <<<"$err")" 0
}

for t in help_main help_commands unknown_things explain_good explain_malformed \
    acceptance independent_keys costs multi_rule_policy malformed_trace \
    input_forms summary boundary_burst svg_chart svg_every_rule most_denied \
    distinct_keys svg_pipe_closed hold_times policy_errors memory_option \
    many_lines sample_trace tls_insecure_warning; do
    check "$t"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
