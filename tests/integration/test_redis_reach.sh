#!/usr/bin/env bash
# The Redis store over TLS (rediss://, client certificates, a TLS cluster,
# each certificate problem named) and through Sentinel (a failover under
# load), against real servers the test binary starts (servers.h).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
exec "$build/test_redis_reach" "${RATEL_MODULE:-$build/ratel.so}" "$@"
