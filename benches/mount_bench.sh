#!/usr/bin/env bash
# Mount benchmarks: each line puts our figure beside the comparison
# (loose files on local disk, or git 2.47 on the reftable repo) with the ratio ours/theirs.
#
#   bash benches/mount_bench.sh            full sizes (100k and 1M refs)
#   BENCH_SCALE=10 bash benches/mount_bench.sh   sizes divided by 10
#   BENCH_ONLY="cat find" ...              only some of: cat find git ls rss stat write fsync floor
#   MOUNT_BENCH_BIN=/path/to/reftablefs ...  measure another build of the mount
#   MOUNT_BENCH_OPTS="--no-follow-cpu" ...   extra options for every mount
#
# floor: benches/floor_bench.sh, the loose-ref workloads on ext4, through libfuse's
# passthrough_hp and through the mount, interleaved, with requests per operation (20k refs
# at BENCH_SCALE=1; root; builds passthrough_hp once, or prints a SKIP line).
#
# Every mount is removed by the trap (SIGTERM, then fusermount3 -uz); steps are bounded
# with `timeout`. The markdown table is printed at the end and appended to
# target/bench-results.md.
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
scale="${BENCH_SCALE:-1}"
only="${BENCH_ONLY:-cat find git ls rss stat write fsync floor}"
# The files-only git (2.39) that reads loose refs through the mount.
oldgit="${OLD_GIT:-/usr/bin/git}"
want() { [[ " $only " == *" $1 "* ]]; }

cargo build --release --quiet --bin reftablefs --example lock_rename
# MOUNT_BENCH_BIN=path measures another build of the mount (e.g. main's, for a before/after).
bin="${MOUNT_BENCH_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/reftablefs}"
writer="${CARGO_TARGET_DIR:-$root/target}/release/examples/lock_rename"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-bench.XXXXXX")"
mount_pids=()
mounts=()
cleanup() {
    for pid in "${mount_pids[@]:-}"; do [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.5
    for pid in "${mount_pids[@]:-}"; do [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true; done
    for m in "${mounts[@]:-}"; do
        [ -n "$m" ] && grep -q " $m " /proc/self/mountinfo && { fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" || true; }
    done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

home="$HOME" # the floor benchmark's passthrough_hp is cached below the real home
# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"

rows=()
row() { rows+=("| $1 | $2 | $3 | $4 | $5 |"); echo "  $1: ours $2, theirs $3 ($4), goal $5"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "n/a" }'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
ms() { awk -v s="$1" 'BEGIN { printf "%.0f ms", s * 1000 }'; }
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

# mount_start GITDIR MNT [options...]: foreground mount in the background; sets MOUNT_PID.
mount_start() {
    local gitdir="$1" mnt="$2"; shift 2
    mkdir -p "$mnt"
    # shellcheck disable=SC2086
    "$bin" mount "$@" ${MOUNT_BENCH_OPTS:-} "$gitdir" "$mnt" 2>>"$work/mount.log" &
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

# make_repo DIR N PREFIX: reftable repo with one commit and N refs PREFIX/NN/rNNNNNNN.
make_repo() {
    local dir="$1" n="$2" prefix="$3"
    git init -q --ref-format=reftable -b main "$dir"
    git -C "$dir" commit -q --allow-empty -m base
    local oid; oid="$(git -C "$dir" rev-parse HEAD)"
    local t; t=$(now)
    awk -v n="$n" -v p="$prefix" -v o="$oid" \
        'BEGIN { for (i = 0; i < n; i++) printf "create %s/%02d/r%07d %s\n", p, i % 100, i, o }' |
        git -C "$dir" -c core.logAllRefUpdates=false update-ref --stdin
    echo "  (git update-ref --stdin created $n refs in $(elapsed "$t") s)"
}

# loose_copy GITDIR DEST: every ref of GITDIR as a loose file below DEST (local disk).
loose_copy() {
    git -C "$1" for-each-ref --format='%(objectname) %(refname)' >"$work/refs.txt"
    awk '{ sub(/\/[^\/]*$/, "", $2); print $2 }' "$work/refs.txt" | sort -u | (cd "$2" && xargs mkdir -p)
    (cd "$2" && awk '{ print $1 > $2; close($2) }' "$work/refs.txt")
}

n100k=$((100000 / scale))
n1m=$((1000000 / scale))
n10k=$((10000 / scale))

if want cat || want find || want git || want ls; then
    echo "== setup: $n100k refs"
    make_repo "$work/r100k" "$n100k" refs/heads/bulk
    mkdir -p "$work/disk100k"
    loose_copy "$work/r100k/.git" "$work/disk100k"
    mount_start "$work/r100k/.git" "$work/m100k" --read-only
    pid100k=$MOUNT_PID
    git -C "$work/r100k" for-each-ref --format='%(refname)' refs/heads/bulk |
        shuf -n "$n10k" --random-source=<(yes) >"$work/pick.txt"

    if want find; then
        echo "== find refs -type f over $n100k refs"
        t=$(now); cold=$(cd "$work/m100k" && timeout 600 find refs -type f | wc -l); cold_s=$(elapsed "$t")
        m=(); d=()
        for _ in 1 2 3; do
            t=$(now); (cd "$work/m100k" && timeout 600 find refs -type f >/dev/null); m+=("$(elapsed "$t")")
            t=$(now); (cd "$work/disk100k" && timeout 600 find refs -type f >/dev/null); d+=("$(elapsed "$t")")
        done
        [ "$cold" -ge "$n100k" ] || echo "  WARNING: find through the mount listed only $cold files"
        row "find refs -type f, $n100k refs, first run on a fresh mount" "$(ms "$cold_s")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$cold_s" "$(median3 "${d[@]}")")" "≤ 2×"
        row "find refs -type f, $n100k refs, warm (median of 3)" "$(ms "$(median3 "${m[@]}")")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$(median3 "${m[@]}")" "$(median3 "${d[@]}")")" "≤ 2×"
    fi
    if want cat; then
        echo "== cat of $n10k random refs"
        # The first run through the mount is cold (no name, attribute or page of these
        # files cached by the kernel: lookup + open + read + release each); the next
        # three are warm (open + release each: the kernel always sends those).
        t=$(now); (cd "$work/m100k" && timeout 600 xargs -a "$work/pick.txt" cat >/dev/null); cold_s=$(elapsed "$t")
        m=(); d=()
        for _ in 1 2 3; do
            t=$(now); (cd "$work/disk100k" && timeout 600 xargs -a "$work/pick.txt" cat >/dev/null); d+=("$(elapsed "$t")")
            t=$(now); (cd "$work/m100k" && timeout 600 xargs -a "$work/pick.txt" cat >/dev/null); m+=("$(elapsed "$t")")
        done
        cmp <(cd "$work/m100k" && xargs -a "$work/pick.txt" cat) <(cd "$work/disk100k" && xargs -a "$work/pick.txt" cat) ||
            echo "  WARNING: mount and disk contents differ"
        row "cat of $n10k random refs, first run (cold)" "$(ms "$cold_s")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$cold_s" "$(median3 "${d[@]}")")" "≤ 1.5×"
        row "cat of $n10k random refs, warm (median of 3)" "$(ms "$(median3 "${m[@]}")")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$(median3 "${m[@]}")" "$(median3 "${d[@]}")")" "≤ 1.5×"
    fi
    if want git; then
        echo "== $("$oldgit" --version) over $n100k loose refs: through the mount vs loose files on disk"
        # The disk side: a files repository with the same refs as loose files and the
        # same objects (git skips refs to missing objects).
        git init -q --ref-format=files -b main "$work/f100k"
        rm -rf "$work/f100k/.git/objects" && cp -a "$work/r100k/.git/objects" "$work/f100k/.git/"
        loose_copy "$work/r100k/.git" "$work/f100k/.git"
        for what in "for-each-ref --format=%(refname)" "branch -a"; do
            # shellcheck disable=SC2086
            t=$(now); GIT_DIR="$work/m100k" timeout 600 "$oldgit" $what >"$work/g.mnt"; cold_s=$(elapsed "$t")
            m=(); d=()
            for _ in 1 2 3; do
                # shellcheck disable=SC2086
                t=$(now); GIT_DIR="$work/f100k/.git" timeout 600 "$oldgit" $what >"$work/g.disk"; d+=("$(elapsed "$t")")
                # shellcheck disable=SC2086
                t=$(now); GIT_DIR="$work/m100k" timeout 600 "$oldgit" $what >"$work/g.mnt"; m+=("$(elapsed "$t")")
            done
            cmp -s "$work/g.mnt" "$work/g.disk" || echo "  WARNING: git $what differs between mount and disk"
            row "git 2.39 \`$what\`, $n100k loose refs, first run (cold)" "$(ms "$cold_s")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$cold_s" "$(median3 "${d[@]}")")" "≤ 1.5×"
            row "git 2.39 \`$what\`, $n100k loose refs, warm (median of 3)" "$(ms "$(median3 "${m[@]}")")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$(median3 "${m[@]}")" "$(median3 "${d[@]}")")" "≤ 1.5×"
        done
        rm -rf "$work/f100k"
    fi
    if want ls; then
        echo "== ls -lR refs and find refs -size +0 over $n100k refs"
        for what in "ls -lR refs" "find refs -size +0"; do
            # shellcheck disable=SC2086
            t=$(now); (cd "$work/m100k" && timeout 600 $what >/dev/null); cold_s=$(elapsed "$t")
            m=(); d=()
            for _ in 1 2 3; do
                # shellcheck disable=SC2086
                t=$(now); (cd "$work/disk100k" && timeout 600 $what >/dev/null); d+=("$(elapsed "$t")")
                # shellcheck disable=SC2086
                t=$(now); (cd "$work/m100k" && timeout 600 $what >/dev/null); m+=("$(elapsed "$t")")
            done
            row "\`$what\`, $n100k refs, first run (cold)" "$(ms "$cold_s")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$cold_s" "$(median3 "${d[@]}")")" "≤ 1.2×"
            row "\`$what\`, $n100k refs, warm (median of 3)" "$(ms "$(median3 "${m[@]}")")" "$(ms "$(median3 "${d[@]}")") (disk)" "$(ratio "$(median3 "${m[@]}")" "$(median3 "${d[@]}")")" "≤ 1.2×"
        done
    fi
    mount_stop "$work/m100k" "$pid100k"
    rm -rf "$work/r100k" "$work/disk100k"
fi

if want rss || want stat; then
    echo "== peak RSS, $n1m refs, after find of everything"
    make_repo "$work/r1m" "$n1m" refs/tags/bulk
    mount_start "$work/r1m/.git" "$work/m1m" --read-only
    pid1m=$MOUNT_PID
    t=$(now); count=$(cd "$work/m1m" && timeout 1200 find . -type f | wc -l); find_s=$(elapsed "$t")
    hwm_kb=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid1m/status")
    git_kb=$( { /usr/bin/time -f '%M' git -C "$work/r1m" for-each-ref >/dev/null; } 2>&1 | tail -1)
    echo "  (find listed $count files in $find_s s)"
    row "peak RSS (VmHWM) of the mount, $n1m refs, after find" "$((hwm_kb / 1024)) MiB" "$((git_kb / 1024)) MiB (git for-each-ref)" "$(ratio "$hwm_kb" "$git_kb")" "≤ 64 MiB"
    if want stat; then
        echo "== find refs -size +0 (a stat of every file), $n1m refs"
        mkdir -p "$work/disk1m"
        loose_copy "$work/r1m/.git" "$work/disk1m"
        t=$(now); (cd "$work/m1m" && timeout 1800 find refs -size +0 >/dev/null); stat_s=$(elapsed "$t")
        hwm_kb=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid1m/status")
        rss_kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid1m/status")
        t=$(now); (cd "$work/disk1m" && timeout 1800 find refs -size +0 >/dev/null); disk_s=$(elapsed "$t")
        row "find refs -size +0, $n1m refs (after find -type f above)" "$(ms "$stat_s")" "$(ms "$disk_s") (disk, just written)" "$(ratio "$stat_s" "$disk_s")" "≤ 2×"
        row "peak RSS (VmHWM) of the mount, $n1m refs, after find -size +0 (VmRSS $((rss_kb / 1024)) MiB)" "$((hwm_kb / 1024)) MiB" "$((git_kb / 1024)) MiB (git for-each-ref)" "$(ratio "$hwm_kb" "$git_kb")" "≤ 64 MiB"
        rm -rf "$work/disk1m"
    fi
    mount_stop "$work/m1m" "$pid1m"
    rm -rf "$work/r1m"
fi

if want write; then
    echo "== $n10k ref updates"
    git init -q --ref-format=reftable -b main "$work/rw"
    git -C "$work/rw" commit -q --allow-empty -m base
    oid=$(git -C "$work/rw" rev-parse HEAD)
    mount_start "$work/rw/.git" "$work/mw"
    pidw=$MOUNT_PID
    out=$(timeout 600 "$writer" "$work/mw" refs/heads/upd "$n10k" "$oid" --fsync-last)
    upd=$(sed 's/.*updates_s=\([0-9.]*\).*/\1/' <<<"$out"); syn=$(sed 's/.*fsync_s=\([0-9.]*\).*/\1/' <<<"$out")
    ours=$(awk -v a="$upd" -v b="$syn" 'BEGIN { print a + b }')
    mount_stop "$work/mw" "$pidw"
    got=$(git -C "$work/rw" for-each-ref refs/heads/upd | wc -l)
    [ "$got" -eq "$n10k" ] || echo "  WARNING: only $got of $n10k updates reached the stack"

    git init -q -b main "$work/fw"
    git -C "$work/fw" commit -q --allow-empty -m base
    dout=$(timeout 600 "$writer" "$work/fw/.git" refs/heads/upd "$n10k" "$(git -C "$work/fw" rev-parse HEAD)")
    disk=$(sed 's/.*updates_s=\([0-9.]*\).*/\1/' <<<"$dout")

    git init -q --ref-format=reftable -b main "$work/rg"
    git -C "$work/rg" commit -q --allow-empty -m base
    oid=$(git -C "$work/rg" rev-parse HEAD)
    awk -v n="$n10k" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/upd/r%06d %s\n", i, o }' >"$work/one.txt"
    awk -v n="$n10k" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "start\ncreate refs/heads/upd2/r%06d %s\ncommit\n", i, o }' >"$work/many.txt"
    t=$(now); git -C "$work/rg" update-ref --stdin <"$work/one.txt"; g1=$(elapsed "$t")
    t=$(now); git -C "$work/rg" update-ref --stdin <"$work/many.txt" >/dev/null; gn=$(elapsed "$t")

    row "$n10k lock+rename updates through the mount (+ final fsync) vs loose files on disk" "$(ms "$ours")" "$(ms "$disk") (disk)" "$(ratio "$ours" "$disk")" "—"
    row "$n10k lock+rename updates through the mount vs git update-ref --stdin, one transaction" "$(ms "$ours")" "$(ms "$g1") (git)" "$(ratio "$ours" "$g1")" "—"
    row "$n10k lock+rename updates through the mount vs git update-ref --stdin, $n10k transactions" "$(ms "$ours")" "$(ms "$gn") (git)" "$(ratio "$ours" "$gn")" "—"
fi

if want fsync; then
    if command -v strace >/dev/null 2>&1; then
        echo "== fsync calls per batch"
        git init -q --ref-format=reftable -b main "$work/rf"
        git -C "$work/rf" commit -q --allow-empty -m base
        oid=$(git -C "$work/rf" rev-parse HEAD)
        # A long window and a high size limit: the fsync on the last ref closes the batch.
        mount_start "$work/rf/.git" "$work/mf" --batch-window 60000 --batch-max 1000000
        pidf=$MOUNT_PID
        for n in 1 100 "$n10k"; do
            before=$(wc -l <"$work/rf/.git/reftable/tables.list")
            # The mount's own rename(2) calls are its stack commits (tables.list.lock ->
            # tables.list): the batch itself, plus any auto-compaction it triggers.
            strace -f -qq -e trace=fsync,fdatasync,rename,renameat,renameat2 -o "$work/strace.$n" -p "$pidf" &
            spid=$!
            sleep 1
            timeout 600 "$writer" "$work/mf" "refs/heads/b$n" "$n" "$oid" --fsync-last >/dev/null
            sleep 0.5
            kill -INT "$spid" 2>/dev/null || true
            wait "$spid" 2>/dev/null || true
            calls=$(grep -cE '(fsync|fdatasync)\(' "$work/strace.$n" || true)
            commits=$(grep -cE 'rename[a-z0-9]*\(.*tables\.list"' "$work/strace.$n" || true)
            after=$(wc -l <"$work/rf/.git/reftable/tables.list")
            row "fsync calls for one batch of $n refs ($commits stack commits incl. auto-compaction; tables.list lines $before→$after)" "$calls" "—" "—" "≤ 3 per commit, constant"
        done
        mount_stop "$work/mf" "$pidf"
    else
        echo "SKIP fsync count: strace missing"
    fi
fi

[ "${#rows[@]}" -gt 0 ] && mkdir -p "$root/target" && {
    echo
    echo "### Mount benchmarks — $(date -u '+%Y-%m-%d %H:%M UTC'), BENCH_SCALE=$scale, $(nproc) cores, git $(git --version | cut -d' ' -f3)"
    echo
    echo "| workload | ours | theirs | ratio | goal |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
} | tee -a "$root/target/bench-results.md"

if want floor; then
    echo "== floor beside passthrough_hp (benches/floor_bench.sh)"
    HOME="$home" MOUNT_BENCH_BIN="$bin" OLD_GIT="$oldgit" bash benches/floor_bench.sh
fi
