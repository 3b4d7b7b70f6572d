#!/usr/bin/env bash
# test_lua_acl.sh - the Functions library under Redis ACLs, in a real
# redis-server without the module (the library's home: a server that
# cannot load modules), as docs/lua.md ("ACL: keeping resets and the
# library from applications") says:
#
#   - the issue's finding first: a `+@all -@dangerous` user may FCALL
#     ratel_reset and FUNCTION FLUSH / LOAD REPLACE (the library replaced);
#   - the page's two users, their ACL SETUSER lines taken from the page as
#     printed: every application function runs (FCALL or FCALL_RO as
#     granted), and ratel_reset, ratel_refund, FCALL_RO of a writing
#     function, FCALL of a read-only one, FUNCTION LOAD/DELETE/FLUSH/
#     RESTORE, EVAL, EVALSHA, SCRIPT and keys outside rl:* are refused;
#     what the page says the ACL cannot do holds too (DEL of an rl:* key);
#   - every registered function of the library is named by the page's
#     table (a function added later must be placed there);
#   - the EVAL script: `+evalsha|SHA1` confines a user to ratel's script,
#     and RESET through it still runs, as the page says;
#   - docs/deployment.md's user for the Redis store, as printed: the CLI
#     decides through the library with it (it could not before that line
#     granted the library's own GET, SET, DEL and TIME).
#
#   BUILD=build bash tests/integration/test_lua_acl.sh
. "$(dirname "$0")/lib.sh"

lib_file=$build/lua/ratel.lib.lua
eval_file=$build/lua/ratel.eval.lua
page=$root/docs/lua.md
if [ ! -s "$lib_file" ] || [ ! -s "$eval_file" ]; then
    fail built "$lib_file or $eval_file missing (make lua)"
    finish
fi
port=$(RATEL_NO_MODULE=1 redis_start) || { echo "0 passed, 1 failed"; exit 1; }
echo "# $(redis-server --version | cut -d' ' -f1-3)"
same library_loaded "$(rcli "$port" FUNCTION LOAD "$(cat "$lib_file")")" "ratel"

# as USER COMMAND...: the command as USER (password in $pw), its reply or
# error on one line.
pw=$(openssl rand -hex 16)
as() {
    local user=$1; shift
    REDISCLI_AUTH=$pw redis-cli -p "$port" --user "$user" "$@" 2>&1 | tr '\n' ' ' | sed 's/ $//'
}
refused() { # NAME REPLY COMMAND: NOPERM naming the command
    contains "$1" "$2" "NOPERM this user has no permissions to run the '$3' command"
}
runs() { # NAME REPLY: not an error
    if [[ -z $2 || $2 == *NOPERM* || $2 == *ERR* ]]; then fail "$1" "refused: [$2]"; else ok "$1"; fi
}

# ------------------------------------------- the finding: -@dangerous alone
rcli "$port" ACL SETUSER dangerless on ">$pw" +@all -@dangerous '~*' >/dev/null
as dangerless FCALL ratel_acquire 1 rl:f 1/60s >/dev/null
same finding_fcall_reset_runs "$(as dangerless FCALL ratel_reset 1 rl:f)" "1"
same finding_function_flush_runs "$(as dangerless FUNCTION FLUSH)" "OK"
contains finding_library_gone "$(as dangerless FCALL ratel_acquire 1 rl:f 1/60s)" \
    "ERR Function not found"
same library_loaded_again "$(rcli "$port" FUNCTION LOAD "$(cat "$lib_file")")" "ratel"

# ------------------------------------------- the page's users, as printed
# The page's `$ redis-cli ACL SETUSER NAME ...` line of each user, run
# here with its password variable and this server's port.
setuser_line() {
    grep "^\$ redis-cli ACL SETUSER $1 " "$page" | head -1 | sed 's/^\$ //'
}
for user in app-lua app-wide; do
    line=$(setuser_line "$user")
    if [ -z "$line" ]; then
        fail "page_gives_$user" "no \`\$ redis-cli ACL SETUSER $user\` line in docs/lua.md"
        continue
    fi
    same "page_line_$user" "$(APP_PASSWORD=$pw bash -c "${line/redis-cli/redis-cli -p $port}" 2>&1)" "OK"
done

# The library's registered functions: each one in the page's table.
registered=$(rcli "$port" FUNCTION LIST LIBRARYNAME ratel | awk '/^name$/ { getline; print }' | sort)
same registered_functions "$(echo "$registered" | tr '\n' ' ')" \
    "ratel_acquire ratel_acquire_many ratel_info ratel_peek ratel_refund ratel_release ratel_reset ratel_slice ratel_unslice ratel_version "
table=$(sed -n '/^## ACL: keeping resets/,/^## /p' "$page" | grep '^| `ratel_')
for f in $registered; do
    contains "page_table_names_$f" "$table" "\`$f\`"
done

for user in app-lua app-wide; do
    u=${user#app-}
    # What an application does.
    runs "${u}_acquire" "$(as "$user" FCALL ratel_acquire 1 rl:a 5/60s)"
    runs "${u}_acquire_many" "$(as "$user" FCALL ratel_acquire_many 2 rl:a rl:b 1 5/60s 0)"
    lease=$(as "$user" FCALL ratel_acquire 1 "rl:c:$u" 2/30s:concurrent | awk '{ print $8 }')
    same "${u}_release" "$(as "$user" FCALL ratel_release 1 "rl:c:$u" "$lease" 2/30s:concurrent | cut -d' ' -f8)" 1
    runs "${u}_peek_ro" "$(as "$user" FCALL_RO ratel_peek 1 rl:a 5/60s)"
    runs "${u}_info_ro" "$(as "$user" FCALL_RO ratel_info 1 rl:a)"
    runs "${u}_version_ro" "$(as "$user" FCALL_RO ratel_version 0)"
    # What it may not.
    refused "${u}_reset" "$(as "$user" FCALL ratel_reset 1 rl:a)" fcall
    refused "${u}_reset_any_case" "$(as "$user" FCALL RATEL_RESET 1 rl:a)" fcall
    refused "${u}_refund" "$(as "$user" FCALL ratel_refund 1 rl:a COST 1000000000 5/60s)" fcall
    refused "${u}_reset_ro" "$(as "$user" FCALL_RO ratel_reset 1 rl:a)" fcall_ro
    refused "${u}_acquire_ro" "$(as "$user" FCALL_RO ratel_acquire 1 rl:a 5/60s)" fcall_ro
    refused "${u}_peek_not_ro" "$(as "$user" FCALL ratel_peek 1 rl:a 5/60s)" fcall
    refused "${u}_function_load" "$(as "$user" FUNCTION LOAD REPLACE "$(cat "$lib_file")")" "function|load"
    refused "${u}_function_delete" "$(as "$user" FUNCTION DELETE ratel)" "function|delete"
    refused "${u}_function_flush" "$(as "$user" FUNCTION FLUSH)" "function|flush"
    refused "${u}_function_restore" "$(as "$user" FUNCTION RESTORE x)" "function|restore"
    refused "${u}_eval" "$(as "$user" EVAL "return redis.call('DEL', KEYS[1])" 1 rl:a)" eval
    refused "${u}_evalsha" "$(as "$user" EVALSHA "$(sha1sum "$eval_file" | cut -c1-40)" 1 rl:a RESET)" evalsha
    refused "${u}_script_load" "$(as "$user" SCRIPT LOAD "return 1")" "script|load"
    refused "${u}_script_flush" "$(as "$user" SCRIPT FLUSH)" "script|flush"
    # Its keys only: FCALL's own key check refuses another key.
    contains "${u}_other_keys" "$(as "$user" FCALL ratel_acquire 1 other:a 5/60s)" \
        "NOPERM this user has no permissions to access one of the keys"
    same "${u}_library_intact" "$(rcli "$port" FCALL_RO ratel_version 0 | cut -d+ -f1)" \
        "$(sed -n 's/^#define RATEL_VERSION "\(.*\)"/\1/p' "$root/include/ratel.h")"
done
# What the page says the ACL cannot do: the application's own DEL.
rcli "$port" FCALL ratel_acquire 1 rl:d 5/60s >/dev/null
same app_can_still_delete_its_keys "$(as app-lua DEL rl:d)" "1"

# ------------------------------------------- the EVAL script
sha=$(rcli "$port" SCRIPT LOAD "$(cat "$eval_file")")
rcli "$port" ACL SETUSER evaluser on ">$pw" -@all "+evalsha|$sha" +get +set +del +time '%RW~rl:*' >/dev/null
runs eval_acquire "$(as evaluser EVALSHA "$sha" 1 rl:e ACQUIRE 5/60s)"
refused eval_other_script "$(as evaluser EVALSHA 0000000000000000000000000000000000000000 0)" evalsha
refused eval_body "$(as evaluser EVAL "return 1" 0)" eval
same eval_reset_not_restricted "$(as evaluser EVALSHA "$sha" 1 rl:e RESET)" "1"

# ------------------------------------------- the store's user (deployment.md)
store_line=$(grep '^ACL SETUSER ratel on >PASSWORD ' "$root/docs/deployment.md" | head -1)
if [ -z "$store_line" ]; then
    fail store_user_line "no \`ACL SETUSER ratel on >PASSWORD\` line in docs/deployment.md"
else
    read -r -a words <<<"${store_line/>PASSWORD/>$pw}"
    same store_user_setuser "$(rcli "$port" "${words[@]}")" "OK"
    if [ -x "$build/ratel" ]; then
        out=$("$build/ratel" acquire --store "redis://ratel:$pw@127.0.0.1:$port?mode=function" \
            --rule 5/60s store:k 2>&1)
        # allowed, limit, remaining, ... and who decided: the store.
        same store_user_decides "$(cut -f1 <<<"$out") $(cut -f7 <<<"$out")" "1 store"
    else
        fail store_user_decides "$build/ratel missing (make)"
    fi
    runs store_user_fcall "$(as ratel FCALL ratel_acquire 1 store:f 5/60s)"
fi

finish
