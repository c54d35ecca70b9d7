#!/usr/bin/env bash
# A big stack in bounded memory: 10M refs (10,000 directories × 1000) in one table made
# by `reftablefs migrate`, then mounted. Prints, ours beside git where git has an
# equivalent:
#   - migrate time and peak RSS (`reftablefs migrate` vs `git refs migrate`, at 1/10 of
#     the size for git, whose migration is ~50× slower, and ours at that size too);
#   - mount ready time, the mount's RSS (VmRSS, VmHWM) right after mounting, after
#     `find MNT/refs -type f | head` and after a full stat walk (`find MNT/refs -size +0`),
#     the walk's time beside `git for-each-ref` (time and peak RSS);
#   - `ls` of one directory beside `git for-each-ref DIR/`; a cold `cat` of one ref
#     beside `git rev-parse REF` (both timed with process start, as a shell pays it);
#   - the write path: one ref update as git's files backend makes it (lock, write,
#     rename) and an fsync that waits for its commit, median of 21, beside the same on a
#     mount of 100k refs (1/100 of the size), in turns, in the same run.
#
#   bash benches/big_stack.sh                  10M refs (needs ~2 GB of disk, ~3 min)
#   BENCH_SCALE=100 bash benches/big_stack.sh  100k refs (the smoke size)
#   BIG_STACK_BIN=/path/to/reftablefs ...      measure another build (e.g. an older one)
#   BIG_STACK_WALK=0 ...                       skip the full stat walk (~15 min at 10M)
#
# Not part of `make test`. Every mount is removed by the trap; steps are bounded with
# `timeout`. The markdown table is printed at the end and appended to
# target/bench-results.md.
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
scale="${BENCH_SCALE:-1}"
dirs=$((10000 / scale))
per=1000
n=$((dirs * per))
git_dirs=$((dirs / 10 > 0 ? dirs / 10 : 1))
git_n=$((git_dirs * per))

if [ -n "${BIG_STACK_BIN:-}" ]; then
    bin="$BIG_STACK_BIN"
else
    cargo build --release --quiet --bin reftablefs
    bin="$root/target/release/reftablefs"
fi
cargo build --release --quiet --example lock_rename
writer="$root/target/release/examples/lock_rename"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-big.XXXXXX")"
mount_pid=""
mnt="$work/mnt"
small_pid=""
small_mnt="$work/mnt-small"
unmount_one() { # unmount_one MNT PID
    [ -n "$2" ] || return 0
    grep -q " $1 " /proc/self/mountinfo && { timeout 30 "$bin" unmount "$1" 2>/dev/null || fusermount3 -uz "$1" 2>/dev/null || umount -l "$1" || true; }
    kill -TERM "$2" 2>/dev/null || true
    sleep 0.3
    kill -KILL "$2" 2>/dev/null || true
}
cleanup() {
    unmount_one "$mnt" "$mount_pid"
    unmount_one "$small_mnt" "$small_pid"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"

rows=()
row() { rows+=("| $1 | $2 | $3 |"); echo "  $1: ours $2; git $3"; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f ms", (b - a) * 1000 }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
# timed_rss CMD...: runs CMD (stdout discarded) and sets T (seconds) and RSS_KB (peak).
timed_rss() {
    /usr/bin/time -o "$work/time.out" -f '%e %M' timeout 1800 "$@" >/dev/null 2>"$work/cmd.err" ||
        { cat "$work/cmd.err"; echo "bench: $* failed"; exit 1; }
    read -r T RSS_KB <"$work/time.out"
}
status_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$mount_pid/status"; }

# files_repo DIR DIRS: a files-backend repository with one commit and DIRS × 1000 refs
# refs/heads/dNNNNN/rNNN in a sorted, fully-peeled packed-refs (as `git pack-refs` writes).
files_repo() {
    local dir="$1" d="$2"
    git init -q --ref-format=files -b main "$dir"
    git -C "$dir" commit -q --allow-empty -m base
    local oid; oid="$(git -C "$dir" rev-parse HEAD)"
    rm -rf "$dir/.git/logs"
    awk -v d="$d" -v o="$oid" 'BEGIN {
        print "# pack-refs with: peeled fully-peeled sorted "
        for (i = 0; i < d; i++) for (j = 0; j < 1000; j++) printf "%s refs/heads/d%05d/r%03d\n", o, i, j
    }' >"$dir/.git/packed-refs"
}

echo "big_stack: $n refs ($dirs directories × $per), git's migrate at $git_n"

# Migration: ours at both sizes, git at the smaller one.
files_repo "$work/small-ours" "$git_dirs"
cp -a "$work/small-ours" "$work/small-git"
( cd "$work/small-ours" && timed_rss "$bin" migrate --no-progress && echo "$T $RSS_KB" >"$work/m1" )
read -r t_ours_small rss_ours_small <"$work/m1"
( cd "$work/small-git" && timed_rss git refs migrate --ref-format=reftable && echo "$T $RSS_KB" >"$work/m2" )
read -r t_git_small rss_git_small <"$work/m2"
row "migrate $git_n refs: time" "${t_ours_small} s" "${t_git_small} s (git refs migrate)"
row "migrate $git_n refs: peak RSS" "$(mib "$rss_ours_small")" "$(mib "$rss_git_small")"
cmp <(cat "$work"/small-ours/.git/reftable/0x*.ref) <(cat "$work"/small-git/.git/reftable/0x*.ref) >/dev/null &&
    same=identical || same=DIFFERENT
echo "  tables of the $git_n-ref migration: $same"
rm -rf "$work/small-ours" "$work/small-git"

files_repo "$work/big" "$dirs"
( cd "$work/big" && timed_rss "$bin" migrate --no-progress && echo "$T $RSS_KB" >"$work/m3" )
read -r t_ours rss_ours <"$work/m3"
size=$(stat -c %s "$work"/big/.git/reftable/0x*.ref)
row "migrate $n refs: time" "${t_ours} s" "—"
row "migrate $n refs: peak RSS (table $((size / 1000000)) MB)" "$(mib "$rss_ours")" "—"
big="$work/big/.git"

# start_mount GITDIR MNT LOG: the mount in the background, waited for (≤ 6 s) until
# listed in mountinfo; sets STARTED (its pid).
start_mount() {
    mkdir -p "$2"
    "$bin" mount "$1" "$2" 2>"$3" &
    STARTED=$!
    for _ in $(seq 600); do
        grep -q " $2 " /proc/self/mountinfo && return 0
        kill -0 "$STARTED" 2>/dev/null || { tail -5 "$3"; echo "bench: mount failed"; exit 1; }
        sleep 0.01
    done
}

# The mount.
t0=$(now)
start_mount "$big" "$mnt" "$work/mount.log"
mount_pid=$STARTED
stat "$mnt/HEAD" >/dev/null
row "mount ready (until the first stat answers)" "$(ms_since "$t0")" "—"
row "mount RSS right after mounting (VmRSS / VmHWM)" "$(mib "$(status_kb VmRSS)") / $(mib "$(status_kb VmHWM)")" "—"

d1=$(printf 'd%05d' $((dirs / 2)))
d2=$(printf 'd%05d' $((dirs / 2 + 1)))
t0=$(now); ls "$mnt/refs/heads/$d1" >/dev/null; ls_ms=$(ms_since "$t0")
t0=$(now); git -C "$big" for-each-ref "refs/heads/$d1/" >/dev/null; gl_ms=$(ms_since "$t0")
row "\`ls\` of one directory of 1000 refs" "$ls_ms" "$gl_ms (git for-each-ref DIR/)"
t0=$(now); cat "$mnt/refs/heads/$d2/r007" >/dev/null; cat_ms=$(ms_since "$t0")
t0=$(now); git -C "$big" rev-parse "refs/heads/$d2/r007" >/dev/null; gr_ms=$(ms_since "$t0")
row "cold \`cat\` of one ref" "$cat_ms" "$gr_ms (git rev-parse)"
# The same without the processes' start: bash's own clock around a redirected `read` of
# a ref in a directory nobody has looked up (lookups of the directory and the file, open,
# read, release).
d3=$(printf 'd%05d' $((dirs / 2 + 2)))
a=$EPOCHREALTIME; read -r _ <"$mnt/refs/heads/$d3/r007"; b=$EPOCHREALTIME
row "cold read of one ref in the shell (\`read <REF\`, no process start)" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f ms", (b - a) * 1000 }')" "—"

# One ref update as git's files backend makes it (lock, write, rename) and an fsync of
# the ref that returns when the batch holding it is in the stack; in ms.
write_once() { # write_once MNT REF OID
    local out u f
    out=$(timeout 120 "$writer" "$1" "$2" 1 "$3" --fsync-last) ||
        { echo "bench: write through $1 failed" >&2; exit 1; }
    u=${out#updates_s=}; u=${u%% *}; f=${out#*fsync_s=}
    awk -v u="$u" -v f="$f" 'BEGIN { printf "%.3f", (u + f) * 1000 }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
small_dirs=$((dirs / 100 > 0 ? dirs / 100 : 1))
files_repo "$work/small" "$small_dirs"
( cd "$work/small" && "$bin" migrate --no-progress >/dev/null )
start_mount "$work/small/.git" "$small_mnt" "$work/mount-small.log"
small_pid=$STARTED
# The migrations' tables written back first (the device's own catch-up after a 258 MB
# write is not the write path's cost), then the two mounts in turns, so both see the
# same disk.
sync
oid=$(git -C "$big" rev-parse HEAD)
wb=(); ws=()
for i in $(seq 21); do
    wb+=("$(write_once "$mnt" "refs/heads/w$i" "$oid")")
    ws+=("$(write_once "$small_mnt" "refs/heads/w$i" "$oid")")
done
w_big=$(median "${wb[@]}"); w_small=$(median "${ws[@]}")
unmount_one "$small_mnt" "$small_pid"; small_pid=""
row "one ref update (lock, write, rename, fsync), median of 21" "$w_big ms" "— ($w_small ms at $((small_dirs * per)) refs, in turns with ours: $(awk -v a="$w_big" -v b="$w_small" 'BEGIN { printf "%.2f×", a / b }'))"

{ timeout 600 find "$mnt/refs" -type f || true; } | head >/dev/null
row "mount RSS after \`find MNT/refs -type f \\| head\` (VmRSS / VmHWM)" "$(mib "$(status_kb VmRSS)") / $(mib "$(status_kb VmHWM)")" "—"

if [ "${BIG_STACK_WALK:-1}" = 0 ]; then
    echo "  (BIG_STACK_WALK=0: no full stat walk)"
else
    t0=$(now)
    count=$(timeout 1800 find "$mnt/refs" -size +0 | wc -l)
    walk=$(ms_since "$t0")
    # Every ref file and every directory (which have a size too).
    [ "$count" -ge $((n + 1)) ] || { echo "bench: find saw $count entries, expected at least $((n + 1))"; exit 1; }
    timed_rss git -C "$big" for-each-ref --format='%(refname)'
    row "full stat walk \`find MNT/refs -size +0\` ($count entries)" "$walk" "${T} s, peak RSS $(mib "$RSS_KB") (git for-each-ref --format=%(refname))"
    row "mount RSS after the walk (VmRSS / VmHWM)" "$(mib "$(status_kb VmRSS)") / $(mib "$(status_kb VmHWM)")" "—"
fi

{
    echo
    echo "## big_stack ($(date -u +%Y-%m-%d), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo ?), $n refs)"
    echo
    echo "| work | ours | git |"
    echo "|---|---:|---:|"
    printf '%s\n' "${rows[@]}"
} | tee -a "$root/target/bench-results.md"
