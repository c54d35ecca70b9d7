#!/usr/bin/env bash
# Two builds of the mount side by side on warm reads (issue 23: the fixes for the holes
# must not slow the warm `cat`): the same reftable repository (N loose refs made by git
# 2.47) mounted read-write by build A and by build B, each over its own copy; then
# ROUNDS rounds of `xargs cat` of the same N/2 ref files (every other one) through each
# mount in turn, the first side alternating, after one untimed warm-up each. Prints the
# median µs per file of each side and A/B.
#
#   bash benches/ab_cat.sh OLD_BIN NEW_BIN        10,000 refs, 15 rounds, unpinned
#   AB_REFS=20000 AB_ROUNDS=21 AB_PIN=0 bash benches/ab_cat.sh OLD NEW   (AB_PIN: taskset -c)
#
# Both mounts are removed on every exit path (fusermount3 -u, else the connection is
# aborted); each daemon runs under `timeout` too.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_A BIN_B" >&2; exit 2; }
a_bin=$(realpath "$1") b_bin=$(realpath "$2")
refs="${AB_REFS:-10000}" rounds="${AB_ROUNDS:-15}" pin="${AB_PIN:-}"
[ -e /dev/fuse ] && command -v fusermount3 >/dev/null || { echo "SKIP ab_cat: no /dev/fuse or fusermount3"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-abcat.XXXXXX")
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do
        if mountpoint -q "$m"; then
            timeout 30 fusermount3 -u "$m" 2>/dev/null || {
                c=$(stat -c %d "$m" 2>/dev/null || true)
                [ -n "$c" ] && echo 1 > "/sys/fs/fuse/connections/$((c & 255 | (c >> 12) & ~255))/abort" 2>/dev/null
                timeout 10 fusermount3 -uz "$m" 2>/dev/null || true
            }
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
run() { if [ -n "$pin" ]; then taskset -c "$pin" "$@"; else "$@"; fi; }

export GIT_CONFIG_NOSYSTEM=1 HOME="$work"
git init -q --ref-format=reftable "$work/repo"
git -C "$work/repo" -c user.name=b -c user.email=b@b commit -q --allow-empty -m base
oid=$(git -C "$work/repo" rev-parse HEAD)
awk -v n="$refs" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/d%03d/branch-%07d %s\n", i % 1000, i, o }' |
    git -C "$work/repo" update-ref --stdin
git -C "$work/repo" pack-refs 2>/dev/null || true
awk -v n="$refs" 'BEGIN { for (i = 0; i < n; i += 2) printf "refs/heads/d%03d/branch-%07d\n", i % 1000, i }' >"$work/pick"
for side in a b; do
    cp -a "$work/repo" "$work/repo-$side"
    mkdir "$work/mnt-$side"
    bin=$([ $side = a ] && echo "$a_bin" || echo "$b_bin")
    run timeout 3600 "$bin" mount "$work/repo-$side/.git" "$work/mnt-$side" >"$work/log-$side" 2>&1 &
    mounts+=("$work/mnt-$side")
    for _ in $(seq 100); do mountpoint -q "$work/mnt-$side" && break; sleep 0.1; done
    mountpoint -q "$work/mnt-$side" || { echo "mount $side failed:"; cat "$work/log-$side"; exit 1; }
done
time_side() { # side -> µs per file on stdout
    local t0 t1
    cd "$work/mnt-$1"
    t0=$(date +%s%N)
    run xargs cat <"$work/pick" >/dev/null
    t1=$(date +%s%N)
    cd "$work"
    echo $(( (t1 - t0) / 1000 * 2 / refs ))
}
time_side a >/dev/null; time_side b >/dev/null
: >"$work/ta"; : >"$work/tb"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then time_side a >>"$work/ta"; time_side b >>"$work/tb"
    else time_side b >>"$work/tb"; time_side a >>"$work/ta"; fi
done
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ma=$(med "$work/ta") mb=$(med "$work/tb")
echo "ab_cat: $refs refs, xargs cat of $((refs / 2)), $rounds rounds${pin:+, pinned to CPU $pin}, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| side | median µs/file | A/B |"
echo "|---|---:|---:|"
echo "| A $a_bin | $ma | $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", a / b }') |"
echo "| B $b_bin | $mb | 1 |"
