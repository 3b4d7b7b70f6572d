#!/usr/bin/env bash
# The C harness that starts real redis-servers for the C integration tests
# (servers.c), tested on its own first: start, kill, pause, restart, AOF,
# a 3-master cluster, TLS-only servers and a TLS cluster, Sentinel setups
# (plain and TLS) and their failover, the fake servers, and that nothing
# outlives a test.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
export RATEL_TLS_CERTS_SH=${RATEL_TLS_CERTS_SH:-$here/tls_certs.sh}
exec "$build/servers_selftest" "${RATEL_MODULE:-$build/ratel.so}" "$@"
