#!/usr/bin/env bash
# The Redis store (lib/store/redis*.c) against real redis-servers that the
# test binary starts, kills, pauses and restarts itself (servers.c):
# standalone with the module and with the Lua script, a primary and its
# replica, a 3-master cluster with a slot migrated under load.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
exec "$build/test_redis_store" "${RATEL_MODULE:-$build/ratel.so}" "$@"
