#!/usr/bin/env bash
# Regenerates the state seeds in tests/fuzz/corpus/state/ with
# tests/fuzz/gen_corpus.c, linked against $BUILD/libratel.a (make it first).
# The rule seeds are plain text files written by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
out=tests/fuzz/corpus/state
mkdir -p "$out" "$build"
${CC:-cc} -std=gnu11 -Wall -Wextra -Werror -Iinclude -O1 \
    -o "$build/gen_corpus" tests/fuzz/gen_corpus.c "$build/libratel.a" -pthread
"$build/gen_corpus" "$out"
ls -l "$out"
