#!/usr/bin/env bash
# test_module_acl.sh - ratel.so under Redis ACLs, in a real redis-server:
# the RATEL.* commands' flags, key specs and COMMAND DOCS; users set up
# with categories (-@write, -@dangerous, +@read, selectors, a later
# +ratel.acquire) and with %R~ / %W~ key permissions, each calling the
# commands over its own connection; ACL SAVE and a restart; the ACL
# examples of docs/commands.md as printed.
#
#   BUILD=build bash tests/integration/test_module_acl.sh
#
# On a server without RedisModule_SetCommandACLCategories (Redis 7.0) the
# categories come from the module's rewriting of ACL SETUSER; the checks
# are the same either way, except the two that docs/commands.md describes
# per version. Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"

port=$(redis_start) || { echo "0 passed, 1 failed"; exit 1; }

# as USER COMMAND...: the command on a connection authenticated as USER
# (password "pw"), its reply or error on one line.
as() {
    local user=$1; shift
    redis-cli -p "$port" --user "$user" --pass pw --no-auth-warning "$@" 2>&1 |
        tr '\n' ' ' | sed 's/ $//'
}
setuser() {
    local r
    r=$(rcli "$port" ACL SETUSER "$@" 2>&1)
    [ "$r" = OK ] || fail "setuser_$1" "$r"
}
denied_cmd() { contains "$1" "$2" "NOPERM this user has no permissions to run the '$3' command"; }
denied_key() { contains "$1" "$2" "NOPERM this user has no permissions to access one of the keys"; }
allowed() {
    if [[ $2 == *NOPERM* || $2 == *ERR* ]]; then fail "$1" "refused: [$2]"; else ok "$1"; fi
}

# Servers that attach categories themselves show them in COMMAND INFO.
native=0
rcli "$port" COMMAND INFO ratel.acquire | grep -qx '@write' && native=1
echo "# categories attached by the server: $native"

# ------------------------------------------------------ what Redis is told
# flags one line: a command's COMMAND INFO flags, then its key spec's.
flags() {
    rcli "$port" COMMAND INFO "$1" | awk 'NR >= 3 && NR <= 6 && !/^[-0-9]/' | tr '\n' ' '
    echo -n '| '
    rcli "$port" COMMAND INFO "$1" | awk '/^flags$/ { f = 1; next } /^begin_search$/ { f = 0 } f' | tr '\n' ' '
}
same info_acquire "$(flags ratel.acquire)" "write denyoom module fast | RW access update "
same info_refund "$(flags ratel.refund)" "write denyoom module fast | RW access update "
same info_release "$(flags ratel.release)" "write denyoom module fast | RW access update "
same info_reset "$(flags ratel.reset)" "write module fast | RM delete "
same info_info "$(flags ratel.info)" "readonly module fast | RO access "
# A slice's two keys: each its own key spec, read and written.
same info_slice "$(flags ratel.slice)" "write denyoom module fast | RW access update RW access update "
same info_unslice "$(flags ratel.unslice)" "write denyoom module fast | RW access update "
same info_slice_keys "$(rcli "$port" COMMAND GETKEYS ratel.slice rl:k rl:k:d 5 TTL 9 1/1s | tr '\n' ' ')" "rl:k rl:k:d "
same info_key_at_argv1 "$(rcli "$port" COMMAND GETKEYS ratel.acquire rl:k COST 2 AT 5 1/1s 2/1m)" "rl:k"
same info_arity_unchanged "$(rcli "$port" COMMAND INFO ratel.reset | sed -n 2p)" "-1"
if [ "$native" = 1 ]; then
    cats() { rcli "$port" COMMAND INFO "$1" | grep '^@' | tr '\n' ' '; }
    same categories_acquire "$(cats ratel.acquire)" "@write @fast "
    same categories_reset "$(cats ratel.reset)" "@write @fast @dangerous "
    same categories_info "$(cats ratel.info)" "@read @fast "
else
    contains categories_by_the_module "$(cat "$tmp/redis-$port/log")" \
        "ACL SETUSER's category rules are extended to the RATEL.* commands"
fi
# The module exports OnLoad and nothing else.
same only_onload_exported "$(nm -D --defined-only "$module" | awk '$2 ~ /^[TDBRV]$/ { print $3 }')" \
    "RedisModule_OnLoad"

# docs NAME: COMMAND DOCS of one command, one line.
docs() { rcli "$port" COMMAND DOCS "$1" | tr '\n' ' '; }
d=$(docs ratel.acquire)
contains docs_summary "$d" "summary Decides one request under a policy's rules and charges it when admitted since 0.1.0 group module complexity O(N) where N is the number of rules module ratel"
contains docs_key "$d" "arguments name key type key key_spec_index 0 "
contains docs_cost "$d" "name cost type integer token COST summary permits this request costs, 1 to 1000000000 (default 1) flags optional "
contains docs_peek "$d" "name peek type pure-token token PEEK"
contains docs_maxwait "$d" "name maxwait type integer token MAXWAIT"
contains docs_at "$d" "name unix-time-milliseconds type unix-time token AT summary decide at this instant instead of the server's clock flags optional"
contains docs_rules "$d" "name rule type string summary LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE]: 1 to 8 rules, applied all-or-nothing flags multiple"
contains docs_refund "$(docs ratel.refund)" "arguments name key type key key_spec_index 0 name cost type integer token COST summary permits to give back (default 1) flags optional name unix-time-milliseconds"
contains docs_release "$(docs ratel.release)" "name lease type integer summary the lease an ACQUIRE answered (1 to 4294967295) name renew type pure-token token RENEW"
same docs_reset "$(docs ratel.reset)" "ratel.reset summary Forgets a key's ratel state since 0.1.0 group module complexity O(1) module ratel arguments name key type key key_spec_index 0 "
contains docs_info "$(docs ratel.info)" "summary Shows a key's rules and state, read-only since 0.1.0 group module complexity O(N) where N is the number of rules module ratel arguments name key type key key_spec_index 0 name unix-time-milliseconds type unix-time token AT"

# ------------------------------------------------------------ categories
T=$(($(date +%s%3N) + 60000))
rcli "$port" RATEL.ACQUIRE rl:held AT "$T" 5/1m 1/1m:concurrent >/dev/null
# -@write: refused SET and every RATEL.* command that writes; reads stay.
setuser nowrite on '>pw' '+@all' '-@write' '~*'
denied_cmd nowrite_set "$(as nowrite SET k v)" set
denied_cmd nowrite_acquire "$(as nowrite RATEL.ACQUIRE rl:a 1/1s)" ratel.acquire
denied_cmd nowrite_acquire_peek "$(as nowrite RATEL.ACQUIRE rl:a PEEK 1/1s)" ratel.acquire
denied_cmd nowrite_refund "$(as nowrite RATEL.REFUND rl:a 1/1s)" ratel.refund
denied_cmd nowrite_release "$(as nowrite RATEL.RELEASE rl:held 1 5/1m 1/1m:concurrent)" ratel.release
denied_cmd nowrite_reset "$(as nowrite RATEL.RESET rl:held)" ratel.reset
denied_cmd nowrite_slice "$(as nowrite RATEL.SLICE rl:a rl:a 5 TTL 9 1/1s)" ratel.slice
denied_cmd nowrite_unslice "$(as nowrite RATEL.UNSLICE rl:a 5 UNTIL 9 1/1s)" ratel.unslice
same nowrite_info "$(as nowrite RATEL.INFO rl:missing)" ""
same nowrite_wrote_nothing "$(rcli "$port" EXISTS rl:a) $(rcli "$port" EXISTS rl:held)" "0 1"
# -@dangerous: RESET refused, the rest allowed.
setuser nodanger on '>pw' '+@all' '-@dangerous' '~*'
denied_cmd nodanger_reset "$(as nodanger RATEL.RESET rl:held)" ratel.reset
denied_cmd nodanger_flushall "$(as nodanger FLUSHALL)" flushall
same nodanger_acquire "$(as nodanger RATEL.ACQUIRE rl:d AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
# The rules of the report: -@dangerous -@write -@admin stops RESET.
setuser locked on '>pw' '+@all' '-@dangerous' '-@write' '-@admin' '~*'
denied_cmd locked_reset "$(as locked RATEL.RESET rl:held)" ratel.reset
same locked_reset_kept_key "$(rcli "$port" EXISTS rl:held)" "1"
# +@read only: INFO, nothing that writes.
setuser reader on '>pw' '-@all' '+@read' '~*'
allowed reader_info "$(as reader RATEL.INFO rl:held AT "$T")"
contains reader_info_reads "$(as reader RATEL.INFO rl:held AT "$T")" "rule 5/1m algo sliding used 1"
denied_cmd reader_acquire "$(as reader RATEL.ACQUIRE rl:r 1/1s)" ratel.acquire
denied_cmd reader_reset "$(as reader RATEL.RESET rl:held)" ratel.reset
# @fast holds all five, @slow none.
setuser fastonly on '>pw' '-@all' '+@fast' '~*'
same fastonly_acquire "$(as fastonly RATEL.ACQUIRE rl:f AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
same fastonly_reset "$(as fastonly RATEL.RESET rl:f)" "1"
setuser noslow on '>pw' '+@all' '-@slow' '~*'
same noslow_acquire "$(as noslow RATEL.ACQUIRE rl:s AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
setuser nofast on '>pw' '+@all' '-@fast' '~*'
denied_cmd nofast_info "$(as nofast RATEL.INFO rl:held)" ratel.info
# Rules apply in order: a command named after its category is granted.
setuser limiter on '>pw' '+@all' '-@write' '+ratel.acquire' '~*'
same order_acquire_granted "$(as limiter RATEL.ACQUIRE rl:o AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
denied_cmd order_refund_still_refused "$(as limiter RATEL.REFUND rl:o AT "$T" 1/1s)" ratel.refund
setuser limiter '-@fast' '+@write'
denied_cmd order_later_rule_wins_info "$(as limiter RATEL.INFO rl:o)" ratel.info
allowed order_later_rule_wins_refund "$(as limiter RATEL.REFUND rl:o AT "$T" 1/1s)"
# Case, MULTI, and other ACL SETUSER rules as Redis has them.
rcli "$port" acl setuser lower on '>pw' '+@all' '-@WRITE' '~*' >/dev/null
denied_cmd lowercase_rules "$(as lower RATEL.ACQUIRE rl:l 1/1s)" ratel.acquire
printf 'MULTI\nACL SETUSER inmulti on >pw +@all -@write ~*\nEXEC\n' | rcli "$port" >/dev/null
denied_cmd in_multi "$(as inmulti RATEL.ACQUIRE rl:m 1/1s)" ratel.acquire
setuser plain on nopass '+get' '~*'
same other_rules_untouched "$(rcli "$port" ACL GETUSER plain | sed -n '/^commands$/{n;p}')" "-@all +get"
contains unknown_category_refused "$(rcli "$port" ACL SETUSER x '-@nosuch' 2>&1)" \
    "ERR Error in ACL SETUSER modifier '-@nosuch': Unknown command or category name in ACL"
same default_user_runs_all "$(rcli "$port" RATEL.ACQUIRE rl:def AT "$T" 1/1s | tr '\n' ' ')" "1 1 0 0 1000 0 0 "

# Selectors: the rules inside the parentheses, one argument or several,
# a rule quoted whole.
setuser sel on '>pw' '-@all' '(+@read' '~a:*)' '(~b:* +@write)' '(%R~c:* "+@write" +@read)'
allowed sel_read_a "$(as sel RATEL.INFO a:1)"
denied_key sel_write_a "$(as sel RATEL.ACQUIRE a:1 1/1s)"
same sel_write_b "$(as sel RATEL.ACQUIRE b:1 AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
denied_key sel_info_b "$(as sel RATEL.INFO b:1)"
# A slice needs permission on both keys: its demand key too.
denied_key sel_slice_demand_elsewhere "$(as sel RATEL.SLICE b:2 a:2 5 TTL 9 HOLDER 1 1/1s)"
contains sel_slice_both_keys "$(as sel RATEL.SLICE b:2 b:2d 5 TTL 9 HOLDER 1 AT "$T" 10/1m)" "5 "
allowed sel_quoted_read_c "$(as sel RATEL.INFO c:1)"
denied_key sel_quoted_write_c_read_only "$(as sel RATEL.ACQUIRE c:1 1/1s)"
contains sel_rewritten_inside "$(rcli "$port" ACL GETUSER sel | tr '\n' ' ')" \
    "commands -@all +@read +ratel.info keys ~a:*"

# What an administrator could type by mistake, or an attacker with ACL
# rights on purpose: rules cut by a NUL byte (Redis reads a category name
# as a C string, so must the module), selectors spread over arguments,
# stray parentheses, thousands of rules. The server keeps answering and
# no category rule misses RATEL.*.
printf 'ACL SETUSER nul on >pw +@all "-@write\\x00junk" ~*\n' | rcli "$port" >/dev/null
denied_cmd nul_rule_cut_like_redis "$(as nul RATEL.ACQUIRE rl:n 1/1s)" ratel.acquire
printf 'ACL SETUSER nulsel on >pw "(+@all -@write\\x00 junk ~*)"\n' | rcli "$port" >/dev/null
denied_cmd nul_selector_cut_like_redis "$(as nulsel RATEL.ACQUIRE rl:n 1/1s)" ratel.acquire
setuser spread on '>pw' '-@all' '(' '+@write' '~*' ')'
same spread_selector_write "$(as spread RATEL.ACQUIRE rl:sp AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
contains stray_open_refused "$(rcli "$port" ACL SETUSER stray '(' 2>&1)" "Unmatched parenthesis"
contains stray_close_refused "$(rcli "$port" ACL SETUSER stray ')' 2>&1)" "Syntax error"
contains unbalanced_selector_refused "$(rcli "$port" ACL SETUSER stray '(+@write' 2>&1)" "Unmatched parenthesis"
same unbalanced_created_nothing "$(rcli "$port" ACL GETUSER stray)" ""
many=()
for _ in $(seq 2000); do many+=('-@write' '+@write'); done
setuser many on '>pw' '+@all' "${many[@]}" '-@write' '~*'
denied_cmd many_rules_last_wins "$(as many RATEL.ACQUIRE rl:m 1/1s)" ratel.acquire
same server_still_answers "$(rcli "$port" PING)" "PONG"

# -------------------------------------------------------- key permissions
setuser rokeys on '>pw' '+@all' '%R~*'
allowed rokeys_info "$(as rokeys RATEL.INFO rl:held AT "$T")"
denied_key rokeys_acquire "$(as rokeys RATEL.ACQUIRE rl:held 5/1m 1/1m:concurrent)"
denied_key rokeys_acquire_peek "$(as rokeys RATEL.ACQUIRE rl:held PEEK 5/1m 1/1m:concurrent)"
denied_key rokeys_reset "$(as rokeys RATEL.RESET rl:held)"
# Write-only keys: RESET deletes (as DEL); ACQUIRE also reads, INFO only reads.
setuser wokeys on '>pw' '+@all' '%W~*'
denied_key wokeys_acquire "$(as wokeys RATEL.ACQUIRE rl:w 1/1s)"
denied_key wokeys_info "$(as wokeys RATEL.INFO rl:w)"
same wokeys_reset "$(as wokeys RATEL.RESET rl:missing)" "0"
setuser rwkeys on '>pw' '+@all' '%RW~rl:*'
same rwkeys_acquire_own "$(as rwkeys RATEL.ACQUIRE rl:x AT "$T" 1/1s)" "1 1 0 0 1000 0 0"
denied_key rwkeys_acquire_other "$(as rwkeys RATEL.ACQUIRE other:x 1/1s)"

# ------------------------------------------------- ACL SAVE and a restart
# What Redis stored is the rewritten rule list: an aclfile written by ACL
# SAVE keeps RATEL.* out of a -@write user after a restart.
aport=$(free_port)
adir=$tmp/redis-$aport
mkdir -p "$adir"
: >"$adir/users.acl"
redis_start_on "$aport" --aclfile "$adir/users.acl" || fail acl_server "did not start"
rcli "$aport" ACL SETUSER saved on '>pw' '+@all' '-@write' '~*' >/dev/null
rcli "$aport" ACL SAVE >/dev/null
contains aclfile_names_ratel "$(cat "$adir/users.acl")" "-ratel.acquire"
# A user written by hand: its category rules reach RATEL.* only where the
# server attaches the categories (docs/commands.md, ACL).
echo 'user byhand on >pw +@all -@write ~*' >>"$adir/users.acl"
redis_stop "$aport"
redis_start_on "$aport" --aclfile "$adir/users.acl" || fail acl_restart "did not start"
got=$(redis-cli -p "$aport" --user saved --pass pw --no-auth-warning RATEL.ACQUIRE rl:k 1/1s 2>&1)
denied_cmd aclfile_saved_user_after_restart "$got" ratel.acquire
got=$(redis-cli -p "$aport" --user byhand --pass pw --no-auth-warning RATEL.ACQUIRE rl:k AT "$T" 1/1s 2>&1 | tr '\n' ' ')
if [ "$native" = 1 ]; then
    denied_cmd aclfile_by_hand "$got" ratel.acquire
else
    same aclfile_by_hand_not_covered_on_7_0 "$got" "1 1 0 0 1000 0 0 "
    # ... and the log names the user and the commands, once the server runs.
    alog=$tmp/redis-$aport/log
    warned() { grep -q "user '$1' $2, which its rules' categories" "$alog"; }
    if wait_for 10 warned byhand "may run ratel.acquire ratel.refund ratel.release ratel.reset ratel.slice ratel.unslice"; then
        ok aclfile_by_hand_warned
    else
        fail aclfile_by_hand_warned "$(grep ratel "$alog" | tail -3)"
    fi
    same aclfile_saved_not_warned "$(grep -c "user 'saved'" "$alog")" "0"
    # ACL LOAD: the users it reads are checked once it has run.
    echo 'user loaded on >pw -@all +@read ~*' >>"$adir/users.acl"
    rcli "$aport" ACL LOAD >/dev/null
    if wait_for 10 warned loaded "may not run ratel.info"; then
        ok acl_load_checked
    else
        fail acl_load_checked "$(grep ratel "$alog" | tail -3)"
    fi
    # A redis.conf user line is read after the modules too.
    if cport=$(redis_start --user byconf on '>pw' +@all -@dangerous '~*'); then
        clog=$tmp/redis-$cport/log
        if wait_for 10 grep -q "user 'byconf' may run ratel.reset, which" "$clog"; then
            ok conf_user_warned
        else
            fail conf_user_warned "$(grep ratel "$clog" | tail -3)"
        fi
        same default_user_not_warned "$(grep -c "user 'default'" "$clog")" "0"
    else
        fail conf_user "redis-server with a user line did not start"
    fi
fi

# --------------------------------------------- docs/commands.md, as printed
# The console block of the page's ACL section, run in one shell on a fresh
# server: each `$ ` line a command, the lines below it its output as
# redis-cli prints it on a terminal (--no-raw here). Only the port is
# substituted; integers of 4 digits or more (times) match any integer.
block=$(awk '/^## ACL/ { s = 1 } s && /^```console$/ { f = 1; next } f && /^```$/ { exit } f' "$root/docs/commands.md")
dport=$(redis_start) || fail docs_server "did not start"
script='' n=0
while IFS= read -r line; do
    if [[ $line == '$ '* ]]; then
        n=$((n + 1))
        script+="echo '@@ $n'"$'\n'"${line#\$ }"$'\n'
    fi
done <<<"$block"
script=${script//redis-cli /redis-cli --no-raw -p $dport }
vary() { sed -E 's/\(integer\) [0-9]{4,}/(integer) N/'; }
got=$(bash -c "$script" 2>&1 | vary)
want=$(awk '/^\$ / { print "@@ " ++n; next } { print }' <<<"$block" | vary)
# The first command sets variables and prints nothing.
same docs_acl_example_as_printed "$got" "$want"
[ "$n" -ge 8 ] || fail docs_acl_block_size "only $n commands in the block"

finish
