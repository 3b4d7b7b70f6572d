#!/usr/bin/env bash
# The lease simulator over a real redis-server (tests/integration/
# lease_sim.c): four hosts with slices of one hot key, every window of
# what they admit checked against the limit plus the printed bound, the
# Redis calls counted; through the module, then the Functions library.
# The binary starts and stops its servers itself (servers.c).
#
#   bash tests/integration/test_lease_sim.sh [module|library]...
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
# fetch_ahead: synchronous calls answered from slices still move the next
# slice's call (ratel__poll_pump), so a slice costs no exact call.
[ $# -gt 0 ] || set -- module library fetch_ahead
exec "$build/lease_sim" "${RATEL_MODULE:-$build/ratel.so}" "$@"
