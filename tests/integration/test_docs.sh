#!/usr/bin/env bash
# test_docs.sh - every shell example of README.md, README.zh-CN.md, docs/*.md,
# captchad/README.md and examples/*/README.md run as printed, its shown output compared
# (tests/integration/docs_run.py says how; blocks that cannot run here are
# marked on the page with <!-- not run: WHY -->, and the gateway snippets
# marked <!-- snippet: NAME --> are run by test_gateway_*.sh); a block
# marked <!-- from: PATH --> must be that file's text.
#
#   BUILD=build bash tests/integration/test_docs.sh [PAGE...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
exec python3 "$here/docs_run.py" "$root" "$build" "$@"
