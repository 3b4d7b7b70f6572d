#!/usr/bin/env bash
# scripts/tree-files.sh - the tree's files, NUL-separated, relative to its
# root: tracked ones and untracked ones .gitignore does not exclude (so
# uncommitted work counts), minus tracked files deleted in the work tree;
# never build/. What scripts/deb.sh packages and scripts/rehearse-minbase.sh
# copies into its chroot.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do
        [ -e "$f" ] && printf '%s\0' "$f"
    done
