#!/usr/bin/env bash
# What a ref's mtime costs: a cold `ls -lR refs` (a lookup and the attributes, with the
# mtime, of every ref) right after mounting, by two builds side by side in one run:
# REF_TIMES_BASE (e.g. a build of an older commit) and this tree's release build. The
# repository is made by git 2.47: N refs written in T transactions with reflogs (so the
# refs have T different change times), then compacted into one table by `git pack-refs`.
#
#   REF_TIMES_BASE=/path/to/old/reftablefs bash benches/ref_times_bench.sh
#   N=100000 T=1000 RUNS=5 ...   (defaults)
#
# Not part of `make test`; every mount is removed by the trap.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
n="${N:-100000}"
t="${T:-1000}"
runs="${RUNS:-5}"
cargo build --release --quiet --bin reftablefs
new="$root/target/release/reftablefs"
base="${REF_TIMES_BASE:?set REF_TIMES_BASE to the reftablefs binary to compare with}"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-times.XXXXXX")"
mnt="$work/mnt"
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    fusermount3 -uz "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$mnt"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=C GIT_COMMITTER_EMAIL=c@x
repo="$work/repo"
git init -q --ref-format=reftable -b main "$repo"
GIT_COMMITTER_DATE="1700000000 +0000" git -C "$repo" commit -q --allow-empty -m one
head=$(git -C "$repo" rev-parse HEAD)
per=$((n / t))
echo "making $n refs in $t transactions..." >&2
for ((i = 0; i < t; i++)); do
    for ((j = 0; j < per; j++)); do
        echo "create refs/heads/d$((i % 100))/r${i}_$j $head"
    done | GIT_COMMITTER_DATE="$((1700000000 + i)) +0000" git -C "$repo" update-ref --stdin
done
git -C "$repo" pack-refs --all
echo "tables: $(wc -l < "$repo/.git/reftable/tables.list")" >&2

one() { # binary -> ms of a cold ls -lR refs
    "$1" mount "$repo/.git" "$mnt" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
    local s e
    s=$(date +%s%N)
    ls -lR "$mnt/refs" >/dev/null
    e=$(date +%s%N)
    fusermount3 -u "$mnt"
    wait "$pid" || true
    pid=""
    echo $(((e - s) / 1000000))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
b=(); w=()
for ((r = 0; r < runs; r++)); do
    b+=("$(one "$base")")
    w+=("$(one "$new")")
done
mb=$(printf '%s\n' "${b[@]}" | median)
mw=$(printf '%s\n' "${w[@]}" | median)
echo "| cold \`ls -lR refs\`, $n refs, $t change times | base ${mb} ms | this ${mw} ms | $(awk -v a="$mw" -v b="$mb" 'BEGIN{printf "%.2f", a/b}')× |"
echo "runs base: ${b[*]}; this: ${w[*]}" >&2
