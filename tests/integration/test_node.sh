#!/usr/bin/env bash
# test_node.sh - ratel.so and the Lua artefacts (build/lua) from Node through ioredis (npm),
# a real client library of another ecosystem, against a real redis-server.
#
#   BUILD=build bash tests/integration/test_node.sh
#
# ioredis is installed with `npm ci` from tests/integration/node's
# package-lock.json into a cache directory outside the repository,
# ${RATEL_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratel/node}, once per
# lock file. The checks are in node/test.js; this script starts the server,
# tallies node's "ok NAME" / "FAIL NAME: why" lines and ends with
# "N passed, N failed".
. "$(dirname "$0")/lib.sh"

node_dir=$lib_here/node
cache=${RATEL_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratel/node}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    fail node_installed "node and npm are needed (scripts/setup.sh installs them)"
    finish
    exit
fi

# The cache holds a copy of package.json and package-lock.json and what
# `npm ci` made of them; it is rebuilt only when the lock file changes.
# A lock keeps two test runs from installing into it at once.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if ! cmp -s "$node_dir/package-lock.json" "$cache/package-lock.json" ||
   [ ! -d "$cache/node_modules/ioredis" ]; then
    rm -rf "$cache"
    mkdir -p "$cache"
    cp "$node_dir/package.json" "$node_dir/package-lock.json" "$cache/"
    if ! (cd "$cache" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) \
        >"$tmp/npm.log" 2>&1; then
        fail npm_ci "npm ci could not install ioredis into $cache (is the npm registry reachable?): $(grep -m2 -E 'npm (error|ERR!) (code|[A-Za-z]*Error)' "$tmp/npm.log" | tr '\n' ' ')"
        rm -rf "$cache"
        finish
        exit
    fi
fi
flock -u 9
exec 9>&-

port=$(redis_start) || { fail redis_start "redis-server with $module did not start"; finish; exit; }

# Node's lines are tallied here; "# N checks" is its last line, so a crash
# half-way cannot pass for a short, clean run.
expected=
while IFS= read -r line; do
    case $line in
    "ok "*) ok "${line#ok }" ;;
    "FAIL "*) line=${line#FAIL }; fail "${line%%:*}" "${line#*: }" ;;
    "# "*" checks") expected=${line#\# }; expected=${expected% checks} ;;
    *) echo "$line" ;;
    esac
done < <(NODE_PATH=$cache/node_modules timeout 120 node "$node_dir/test.js" "$port" "$build/lua" 2>&1)

if [ -z "$expected" ]; then
    fail node_finished "node test.js ended without its closing line"
elif [ "$expected" -ne $((passed + failed)) ]; then
    fail node_finished "node ran $expected checks, $((passed + failed)) reported"
fi
finish
