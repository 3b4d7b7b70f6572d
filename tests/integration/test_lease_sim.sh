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
# fetch_ahead is left out: it issues its requests back to back (their
# time injected), so how many find the next slice's answer already read
# depends on the machine's load, not on ratel (4 to 64 exact calls for
# about 70 slices in our runs, up to one per slice on a loaded machine).
[ $# -gt 0 ] || set -- module library
exec "$build/lease_sim" "${RATEL_MODULE:-$build/ratel.so}" "$@"
