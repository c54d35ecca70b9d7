#!/usr/bin/env bash
# The packed layout (issue 26.2): git 2.39 (files backend only) over many refs through
# `reftablefs mount --layout=packed`, beside the same refs in a gc'ed files repository on
# local disk (every ref in packed-refs) and beside them as loose files on local disk. One
# interleaved run: each round runs the three sides one after the other, and the median of
# the rounds is reported with the ratios mount / gc'ed files and mount / loose files.
#
#   bash benches/packed_bench.sh                 20k refs, prompt in a 7k-ref repository
#   PACKED_BENCH_REFS=20000 PROMPT_REFS=7000 ROUNDS=5 bash benches/packed_bench.sh
#   MOUNT_BENCH_BIN=/path/to/reftablefs ...      measure another build of the mount
#
# Workloads: `git for-each-ref --format=%(refname)` and `git branch -a` over N refs; git
# 2.39's prompt (`__git_ps1` of git-sh-prompt) with HEAD detached, in a repository of
# PROMPT_REFS refs (goal: under 100 ms through the mount). The first run through each
# fresh mount is reported apart (cold: nothing cached by the kernel).
#
# Every mount is removed by the trap (unmount, then SIGTERM/SIGKILL and fusermount3 -uz);
# steps are bounded with `timeout`. The markdown rows are printed at the end.
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
nrefs="${PACKED_BENCH_REFS:-20000}"
nprompt="${PROMPT_REFS:-7000}"
rounds="${ROUNDS:-5}"
oldgit="${OLD_GIT:-/usr/bin/git}"
prompt_sh="${GIT_PROMPT_SH:-/usr/lib/git-core/git-sh-prompt}"

cargo build --release --quiet --bin reftablefs
bin="${MOUNT_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/reftablefs}"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-packed-bench.XXXXXX")"
mount_pids=()
mounts=()
cleanup() {
    for m in "${mounts[@]:-}"; do
        [ -n "$m" ] && grep -q " $m " /proc/self/mountinfo && { timeout 30 "$bin" unmount "$m" 2>/dev/null || true; }
    done
    for pid in "${mount_pids[@]:-}"; do [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.5
    for pid in "${mount_pids[@]:-}"; do [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; done
    for m in "${mounts[@]:-}"; do
        [ -n "$m" ] && grep -q " $m " /proc/self/mountinfo && { fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" || true; }
    done
    [ -n "${KEEP_WORK:-}" ] && { echo "kept $work"; return; }; rm -rf "$work"
}
trap cleanup EXIT INT TERM

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"

rows=()
row() { rows+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); echo "  $1: mount $2, gc'ed files $3 ($4), loose files $5 ($6), goal $7"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "n/a" }'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.4f", b - a }'; }
ms() { awk -v s="$1" 'BEGIN { printf "%.1f ms", s * 1000 }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# mount_start GITDIR MNT [options...]: foreground mount in the background; sets MOUNT_PID.
mount_start() {
    local gitdir="$1" mnt="$2"
    shift 2
    mkdir -p "$mnt"
    "$bin" mount "$@" "$gitdir" "$mnt" 2>>"$work/mount.log" &
    MOUNT_PID=$!
    mount_pids+=("$MOUNT_PID")
    mounts+=("$mnt")
    for _ in $(seq 300); do
        grep -q " $mnt " /proc/self/mountinfo && return 0
        kill -0 "$MOUNT_PID" 2>/dev/null || { tail -5 "$work/mount.log"; echo "bench: mount failed"; exit 1; }
        sleep 0.1
    done
    echo "bench: mount not ready after 30 s"; exit 1
}
mount_stop() { # mount_stop MNT PID
    timeout 60 "$bin" unmount "$1" || fusermount3 -uz "$1" || true
    for _ in $(seq 100); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$2" 2>/dev/null || true
}

# make_repo DIR N: a reftable repository with two commits, N refs (three quarters
# branches refs/heads/bulk/NN/bNNNNNNN, a quarter tags refs/tags/bulk/tNNNNNNN, every
# 100th of them annotated) and HEAD detached at the first commit.
make_repo() {
    local dir="$1" n="$2"
    git init -q --ref-format=reftable -b main "$dir"
    git -C "$dir" commit -q --allow-empty -m base
    git -C "$dir" commit -q --allow-empty -m second
    local base head
    base="$(git -C "$dir" rev-parse HEAD~1)"
    head="$(git -C "$dir" rev-parse HEAD)"
    awk -v n="$n" -v b="$base" -v h="$head" 'BEGIN {
        for (i = 0; i < n; i++) {
            if (i % 4 == 3) printf "create refs/tags/bulk/t%07d %s\n", i, h
            else printf "create refs/heads/bulk/%02d/b%07d %s\n", i % 100, i, (i % 2 ? b : h)
        }
    }' | git -C "$dir" -c core.logAllRefUpdates=false update-ref --stdin
    for i in $(seq 0 100 $((n / 4))); do
        git -C "$dir" tag -a -m "annotated $i" "ann/$i" "$head"
    done
    git -C "$dir" checkout -q --detach "$base"
}

# files_twin REFTABLE_WORKTREE DEST_WORKTREE packed|loose: a files repository with the
# same objects, HEAD and refs, as loose files, then `git pack-refs --all --prune` (packed).
files_twin() {
    local src="$1" dest="$2" how="$3"
    git init -q --ref-format=files -b main "$dest"
    rm -rf "$dest/.git/objects" && cp -a "$src/.git/objects" "$dest/.git/"
    git -C "$src" for-each-ref --format='%(objectname) %(refname)' >"$work/refs.txt"
    awk '{ sub(/\/[^\/]*$/, "", $2); print $2 }' "$work/refs.txt" | sort -u | (cd "$dest/.git" && xargs mkdir -p)
    (cd "$dest/.git" && awk '{ print $1 > $2; close($2) }' "$work/refs.txt")
    git -C "$src" rev-parse HEAD >"$dest/.git/HEAD"
    # HEAD's reflog: the detaching checkout (`branch -a` names where HEAD was detached).
    mkdir -p "$dest/.git/logs"
    printf '%s %s Bench <bench@example.com> 1700000000 +0000\tcheckout: moving from main to %s\n' \
        "$(git -C "$src" rev-parse main)" "$(git -C "$src" rev-parse HEAD)" "$(git -C "$src" rev-parse HEAD)" >"$dest/.git/logs/HEAD"
    cp "$src/.git/index" "$dest/.git/index"
    [ "$how" = packed ] && "$oldgit" -C "$dest" pack-refs --all --prune
    return 0
}

# run_git GIT_DIR OUT args...: one git 2.39 run, its time in seconds on stdout.
run_git() {
    local dir="$1" out="$2"
    shift 2
    local t; t=$(now)
    GIT_DIR="$dir" timeout 600 "$oldgit" "$@" >"$out"
    elapsed "$t"
}

# prompt WORKTREE GIT_DIR: git 2.39's prompt there (a fresh bash, as a shell draws it).
prompt() {
    local wt="$1" dir="$2"
    (cd "$wt" && GIT_DIR="$dir" GIT_WORK_TREE="$wt" timeout 60 bash -c '
        . "$1"
        t0=$(date +%s%N); p=$(__git_ps1 "(%s)"); t1=$(date +%s%N)
        echo "$p" >"$2"; echo $(( (t1 - t0) / 1000 ))' _ "$prompt_sh" "$work/prompt.out")
}

echo "== $(uptime)"
echo "== setup: $nrefs refs (reftable), their gc'ed and loose files twins"
make_repo "$work/r" "$nrefs"
files_twin "$work/r" "$work/gc" packed
files_twin "$work/r" "$work/loose" loose
mount_start "$work/r/.git" "$work/m" --layout=packed
pid=$MOUNT_PID

for what in "for-each-ref --format=%(refname)" "branch -a"; do
    echo "== git 2.39 $what, $nrefs refs"
    # shellcheck disable=SC2086
    cold=$(run_git "$work/m" "$work/g.mnt" $what)
    m=(); g=(); l=()
    for _ in $(seq "$rounds"); do
        # shellcheck disable=SC2086
        g+=("$(run_git "$work/gc/.git" "$work/g.gc" $what)")
        # shellcheck disable=SC2086
        m+=("$(run_git "$work/m" "$work/g.mnt" $what)")
        # shellcheck disable=SC2086
        l+=("$(run_git "$work/loose/.git" "$work/g.loose" $what)")
    done
    cmp -s "$work/g.mnt" "$work/g.gc" || { echo "  WARNING: git $what differs between the mount and the gc'ed files repository:"; diff "$work/g.mnt" "$work/g.gc" | head -5; }
    cmp -s "$work/g.mnt" "$work/g.loose" || echo "  WARNING: git $what differs between the mount and the loose files repository"
    mm=$(median "${m[@]}"); gm=$(median "${g[@]}"); lm=$(median "${l[@]}")
    row "git 2.39 \`$what\`, $nrefs refs, --layout=packed, warm (median of $rounds)" "$(ms "$mm")" "$(ms "$gm")" "$(ratio "$mm" "$gm")" "$(ms "$lm")" "$(ratio "$mm" "$lm")" "≤ 1.5× gc'ed"
    row "git 2.39 \`$what\`, $nrefs refs, --layout=packed, first run (cold)" "$(ms "$cold")" "$(ms "$gm")" "$(ratio "$cold" "$gm")" "$(ms "$lm")" "$(ratio "$cold" "$lm")" "—"
done
mount_stop "$work/m" "$pid"
rm -rf "$work/r" "$work/gc" "$work/loose"

echo "== git 2.39's prompt, HEAD detached, $nprompt refs"
make_repo "$work/p" "$nprompt"
files_twin "$work/p" "$work/pgc" packed
files_twin "$work/p" "$work/ploose" loose
mount_start "$work/p/.git" "$work/pm" --layout=packed
pid=$MOUNT_PID
cold=$(prompt "$work/p" "$work/pm")
cold=$(awk -v u="$cold" 'BEGIN { printf "%.6f", u / 1e6 }')
m=(); g=(); l=()
for _ in $(seq "$rounds"); do
    g+=("$(awk -v u="$(prompt "$work/pgc" "$work/pgc/.git")" 'BEGIN { printf "%.6f", u / 1e6 }')")
    cp "$work/prompt.out" "$work/prompt.gc"
    m+=("$(awk -v u="$(prompt "$work/p" "$work/pm")" 'BEGIN { printf "%.6f", u / 1e6 }')")
    cp "$work/prompt.out" "$work/prompt.mnt"
    l+=("$(awk -v u="$(prompt "$work/ploose" "$work/ploose/.git")" 'BEGIN { printf "%.6f", u / 1e6 }')")
done
echo "  prompt through the mount: $(cat "$work/prompt.mnt"); gc'ed files: $(cat "$work/prompt.gc")"
cmp -s "$work/prompt.mnt" "$work/prompt.gc" || echo "  WARNING: the prompts differ"
mm=$(median "${m[@]}"); gm=$(median "${g[@]}"); lm=$(median "${l[@]}")
row "git 2.39 prompt (\`__git_ps1\`), detached, $nprompt refs, --layout=packed, warm (median of $rounds)" "$(ms "$mm")" "$(ms "$gm")" "$(ratio "$mm" "$gm")" "$(ms "$lm")" "$(ratio "$mm" "$lm")" "< 100 ms"
row "git 2.39 prompt (\`__git_ps1\`), detached, $nprompt refs, --layout=packed, first run (cold)" "$(ms "$cold")" "$(ms "$gm")" "$(ratio "$cold" "$gm")" "$(ms "$lm")" "$(ratio "$cold" "$lm")" "< 100 ms"
mount_stop "$work/pm" "$pid"

echo
echo "| workload | mount | gc'ed files (ext4) | ratio | loose files (ext4) | ratio | goal |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo "== $(uptime)"
