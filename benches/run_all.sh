#!/usr/bin/env bash
# `make bench`: every benchmark, each printing ours vs git's side by side.
set -euo pipefail
cd "$(dirname "$0")/.."

# The std-only benchmark programs ([[bench]] harness = false) of the other layers.
if grep -q '^\[\[bench\]\]' Cargo.toml; then
    cargo bench --benches
else
    echo "(no [[bench]] programs declared in Cargo.toml yet)"
fi

# Mount benchmarks (scripts); the last, "floor", puts the mount beside ext4 and libfuse's
# passthrough_hp (root only; it builds passthrough_hp once, or prints a SKIP line).
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1; then
    bash benches/mount_bench.sh
    # Deletions at scale: fetch --prune and branch -D by git 2.39, beside files clones
    # and (root) the files clone through passthrough_hp.
    PRUNE_PH="${PRUNE_PH:-1}" bash benches/prune_bench.sh
    # Python's open() through the mount, with its requests per file (root).
    bash benches/pyopen_probe.sh
else
    echo "SKIP mount benchmarks: /dev/fuse or fusermount3 missing"
fi
