#!/usr/bin/env bash
# The C harness that starts real redis-servers for the C integration tests
# (servers.c), tested on its own first: start, kill, pause, restart, AOF,
# a 3-master cluster, the fake servers, and that nothing outlives a test.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
exec "$build/servers_selftest" "${RATEL_MODULE:-$build/ratel.so}" "$@"
