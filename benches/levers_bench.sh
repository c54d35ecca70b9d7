#!/usr/bin/env bash
# Issue 26.5: the round trips the kernel adds beyond the floor's OPEN + RELEASE, each
# lever measured beside ext4 in one interleaved run, with requests per operation counted
# by the kernel's fuse:fuse_request_send tracepoint.
#
#   bash benches/levers_bench.sh                 4,000 loose refs, 5 rounds (needs root)
#   LEVERS_REFS=10000 LEVERS_ROUNDS=7 MOUNT_BENCH_BIN=/path/to/reftablefs bash benches/levers_bench.sh
#
# The same refs as loose files of a files repository on ext4 and through a read-write
# mount of a reftable repository (the default mount). Workloads, µs per file:
#   cat-fresh  `xargs cat` of every ref file right after each was rewritten (one
#              `update-ref --stdin` through git 2.47 on the stack: every page cache the
#              kernel held for them is dropped): the first read of new content
#   cat-second `xargs cat` of the same files right after: the content is cached, but the
#              READ of cat-fresh invalidated atime, so cat's fstat asks for attributes again
#   cat-warm   `xargs cat` of the same files a third time: the floor, OPEN + RELEASE
#   stat-hot   `stat` of every ref file (one process), right after the previous walk
#   stat-idle  the same walk after ENTRY_TTL (10 s) of idleness: every name looked up again
# Levers these measure: the GETATTR the kernel sends after a READ invalidated atime (a
# read-only mount never invalidates it), seen in cat-second and absent from cat-warm; and
# the entry TTL, the difference between stat-idle and stat-hot (a TTL as long as
# passthrough_hp's 86,400 s would make every walk stat-hot).
#
# The mount is removed on every exit path (fusermount3 -u, else its connection is aborted);
# the daemon runs under `timeout` too. Tracing uses its own tracefs instance, removed.
set -euo pipefail
cd "$(dirname "$0")/.."
refs="${LEVERS_REFS:-4000}" rounds="${LEVERS_ROUNDS:-5}" idle="${LEVERS_IDLE:-11}"
# shellcheck source=benches/support/one_mount.sh
. benches/support/one_mount.sh
one_mount_setup levers "levers benchmark"

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"
load_start=$(uptime)
git init -q --ref-format=reftable -b main "$work/rt"
git -C "$work/rt" commit -q --allow-empty -m one
git -C "$work/rt" commit -q --allow-empty -m two
one=$(git -C "$work/rt" rev-parse HEAD~1) two=$(git -C "$work/rt" rev-parse HEAD)
awk -v n="$refs" -v o="$one" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/d%02d/b%07d %s\n", i % 50, i, o }' |
    git -C "$work/rt" -c core.logAllRefUpdates=false update-ref --stdin
git init -q --ref-format=files -b main "$work/files"
git -C "$work/rt" for-each-ref --format='%(objectname) %(refname)' refs/heads/ | grep ' refs/heads/d' >"$work/refs.txt"
(cd "$work/files/.git" && awk '{ d = $2; sub(/\/[^\/]*$/, "", d); system("mkdir -p " d); print $1 > $2; close($2) }' "$work/refs.txt")
cut -d' ' -f2 "$work/refs.txt" >"$work/names"
n=$(wc -l <"$work/names")

one_mount "$work/rt/.git"

fuse_trace_open reftablefs-levers "$work" || { echo "levers: no tracefs instance"; exit 1; }
fuse_trace_filter "$conn"

# flip: rewrite every bulk ref on the stack (git 2.47, not through the mount), so the
# mount's next reads are of new content; waits until the mount shows it.
flip_to=$two
flip() {
    awk -v o="$flip_to" '{ printf "update %s %s\n", $2, o }' "$work/refs.txt" |
        git -C "$work/rt" -c core.logAllRefUpdates=false update-ref --stdin
    local last want
    last=$(tail -1 "$work/names") want=$flip_to
    for _ in $(seq 200); do
        [ "$(head -c 40 "$mnt/$last" 2>/dev/null)" = "$want" ] && break
        sleep 0.05
    done
    if [ "$flip_to" = "$two" ]; then flip_to=$one; else flip_to=$two; fi
}
# run SIDE WORKLOAD: prints µs per file.
run() {
    local d t0 t1
    if [ "$1" = ext4 ]; then d="$work/files/.git"; else d="$mnt"; fi
    t0=$EPOCHREALTIME
    case "$2" in
        cat-*) (cd "$d" && xargs -a "$work/names" cat >/dev/null) ;;
        stat-hot | stat-idle) (cd "$d" && xargs -a "$work/names" stat -c %s >/dev/null) ;;
    esac
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { printf "%.2f\n", (b - a) * 1e6 / n }'
}
# traced WORKLOAD: one run on the mount with the tracepoint on; requests per file by opcode.
traced() {
    fuse_trace_on
    run mount "$1" >/dev/null
    sleep 0.2
    fuse_trace_off
    { grep -o 'opcode [0-9]* ([A-Z_]*)' "$FT_INST/trace" || true; } | sed 's/.*(FUSE_\(.*\))/\1/' | sort | uniq -c | sort -rn |
        awk -v n="$n" '{ all += $1; if ($1 / n >= 0.005) s = s (s == "" ? "" : " + ") sprintf("%s %.2f", $2, $1 / n) }
            END { printf "%.2f (%s)\n", all / n, (s == "" ? "-" : s) }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== levers: $n loose refs, $rounds rounds, load ${load_start##*load average: }"
declare -A t
run ext4 cat-warm >/dev/null; run mount cat-warm >/dev/null
for r in $(seq "$rounds"); do
    # A fresh read: ext4's cache stays (nothing to drop without dropping every cache).
    flip
    t[mount.cat-fresh]+=" $(run mount cat-fresh)"
    t[ext4.cat-fresh]+=" $(run ext4 cat-fresh)"
    for w in cat-second cat-warm; do
        for s in mount ext4; do t[$s.$w]+=" $(run $s $w)"; done
    done
    sleep "$idle"
    t[mount.stat-idle]+=" $(run mount stat-idle)"
    t[ext4.stat-idle]+=" $(run ext4 stat-idle)"
    for s in ext4 mount; do t[$s.stat-hot]+=" $(run $s stat-hot)"; done
done
flip
req_fresh=$(traced cat-fresh)
req_second=$(traced cat-second)
req_warm=$(traced cat-warm)
req_hot=$(traced stat-hot)
sleep "$idle"
req_idle=$(traced stat-idle)
load_end=$(uptime)

rows=()
for w in cat-fresh cat-second cat-warm stat-hot stat-idle; do
    # shellcheck disable=SC2086
    e=$(median ${t[ext4.$w]}) m=$(median ${t[mount.$w]})
    case $w in cat-fresh) q=$req_fresh ;; cat-second) q=$req_second ;; cat-warm) q=$req_warm ;; stat-hot) q=$req_hot ;; stat-idle) q=$req_idle ;; esac
    rows+=("| $w | $e | $m | $(awk -v a="$m" -v b="$e" 'BEGIN { printf "%.2f×", a / b }') | $q |")
done
mkdir -p "$root/target"
{
    echo
    echo "### Levers beyond the floor — $(date -u '+%Y-%m-%d %H:%M UTC'), $n refs, $rounds rounds, kernel $(uname -r)"
    echo
    echo "Load average at start: ${load_start##*load average: }; at end: ${load_end##*load average: }."
    echo
    echo "| workload | ext4 µs/file | mount µs/file | mount/ext4 | mount requests/file |"
    echo "| --- | ---: | ---: | ---: | --- |"
    printf '%s\n' "${rows[@]}"
} | tee -a "$root/target/bench-results.md"
