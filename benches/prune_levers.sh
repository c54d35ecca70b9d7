#!/usr/bin/env bash
# Levers for deletions (issue 26.3) that are not in the mount, each measured beside it:
# a patch of benches/support/levers/ applied to a copy of the checked-out commit (`git
# archive HEAD`: uncommitted changes are not in it), built in a target directory of its
# own (target/levers/NAME, kept for the next run), and benches/prune_bench.sh run with
# that build and with the unpatched build of the same commit, alternated, so that every
# ratio of a round comes from one run beside its files clone.
#
#   bash benches/prune_levers.sh                      every patch, 2 rounds
#   bash benches/prune_levers.sh all-names-cached     one patch (levers/NAME.patch)
#   PRUNE_LEVER_ROUNDS=3 ...                          rounds of (unpatched, each patch)
#   PRUNE_URING=1, PRUNE_TRACE=1, BENCH_SCALE=...     passed on to prune_bench.sh
#
# The patches (each says in its own comment what it changes):
#   all-names-cached   the ceiling of caching names: `packed-refs`' name, every absent
#                      name of a ref view and every created scratch file's name kept by
#                      the kernel for the entry TTL (10 s). It breaks the read path's
#                      freshness (another writer's new ref, a new `packed-refs` content,
#                      a released lock would not show at once): a measurement, never a
#                      mount option.
#   spin-dev-fuse      every /dev/fuse event-loop thread polls the device for 50 µs after
#                      each request before it sleeps (no effect over io_uring).
#   fresh-every-50ms   the freshness check of every request (a `statx` of `tables.list`,
#                      a `pread` of it while racy) made at most every 50 ms: the ceiling
#                      of a cheaper check. Another writer's update shows up to 50 ms late:
#                      a measurement, never a mount option.
#
# Prints, per round and build, the `fetch --prune` and `branch -D` ratios to the files
# clone (packed layout over /dev/fuse, and over io_uring with PRUNE_URING=1). Root for
# PRUNE_URING and PRUNE_TRACE, as prune_bench.sh. Every build and run is bounded by
# `timeout`; prune_bench.sh unmounts on every exit path.
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
rounds="${PRUNE_LEVER_ROUNDS:-2}"
limit=3600

if [ $# -gt 0 ]; then
    levers=("$@")
else
    levers=()
    for p in benches/support/levers/*.patch; do
        levers+=("$(basename "$p" .patch)")
    done
fi
for l in "${levers[@]}"; do
    [ -f "benches/support/levers/$l.patch" ] || { echo "prune_levers: no benches/support/levers/$l.patch"; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-levers.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The unpatched build of this checkout, as prune_bench.sh builds it.
base_target="${CARGO_TARGET_DIR:-$root/target}"
timeout "$limit" cargo build --release --quiet --bin reftablefs
bins=("$base_target/release/reftablefs")
names=(unpatched)
for l in "${levers[@]}"; do
    src="$work/src-$l"
    mkdir -p "$src"
    git archive HEAD | tar -x -C "$src"
    (cd "$src" && patch -s -p1 <"$root/benches/support/levers/$l.patch")
    echo "== prune_levers: building $l"
    (cd "$src" && CARGO_TARGET_DIR="$root/target/levers/$l" timeout "$limit" cargo build --release --quiet --bin reftablefs)
    bins+=("$root/target/levers/$l/release/reftablefs")
    names+=("$l")
done

# ratio_of OUT STEP COLUMN: the bold ratio of STEP's row in the table whose header
# names COLUMN ("packed / files" or "io_uring / files").
ratio_of() {
    awk -v step="$2" -v col="$3" -F' \\| ' '
        /^\| step / { want = -1; for (i = 1; i <= NF; i++) { h = $i; gsub(/\*/, "", h); if (h == col) want = i } ; next }
        want > 0 && index($1, step) { v = $want; gsub(/[* |]/, "", v); print v; exit }
    ' "$1"
}

summary="$work/summary"
for r in $(seq "$rounds"); do
    for k in "${!bins[@]}"; do
        out="$work/out.$r.$k"
        echo "== prune_levers: round $r, ${names[$k]}"
        MOUNT_BENCH_BIN="${bins[$k]}" timeout "$limit" bash benches/prune_bench.sh >"$out" 2>&1 ||
            { tail -20 "$out"; echo "prune_levers: prune_bench.sh failed with ${names[$k]}"; exit 1; }
        grep -e '^| git 2.39' -e '^| step' -e 'requests' "$out" || true
        line="| $r | ${names[$k]} | $(ratio_of "$out" "fetch --prune," "packed / files") | $(ratio_of "$out" "branch -D," "packed / files")"
        if [ "${PRUNE_URING:-0}" = 1 ]; then
            line="$line | $(ratio_of "$out" "fetch --prune," "io_uring / files") | $(ratio_of "$out" "branch -D," "io_uring / files")"
        fi
        echo "$line |" >>"$summary"
    done
done

echo
if [ "${PRUNE_URING:-0}" = 1 ]; then
    echo "| round | build | fetch --prune, /dev/fuse / files | branch -D, /dev/fuse / files | fetch --prune, io_uring / files | branch -D, io_uring / files |"
    echo "| --- | --- | ---: | ---: | ---: | ---: |"
else
    echo "| round | build | fetch --prune, packed / files | branch -D, packed / files |"
    echo "| --- | --- | ---: | ---: |"
fi
cat "$summary"
