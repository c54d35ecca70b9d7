#!/usr/bin/env bash
# Everyday git commands through the complete git directory at the mountpoint against the
# same commands on the real directory: `git status`, `git log -1000 --stat`, `git commit`,
# `git gc`. One work tree; its `.git` file points at the real git directory or at the mount
# (git 2.47 then sees a files repository). Mount modes: kernel FUSE passthrough (default)
# and plain forwarding (--no-kernel-passthrough), both mounted at once; the three sides
# alternate run by run. Prints median wall times and ratios.
#
#   benches/passthrough_bench.sh [DIR]   (release binary: cargo build --release)
#   FILES=5000 COMMITS=2000 RUNS=7 env vars size the repository and the repetitions.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/reftablefs}
DIR=${1:-$(mktemp -d /tmp/rtfs-ptbench.XXXXXX)}
FILES=${FILES:-5000}
COMMITS=${COMMITS:-2000}
RUNS=${RUNS:-7}
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=$DIR LC_ALL=C
export GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@example.com GIT_COMMITTER_NAME=C GIT_COMMITTER_EMAIL=c@example.com
work=$DIR/work gitdir=$DIR/repo.git mnt=$DIR/mnt
mkdir -p "$mnt"
cleanup() { :; }
trap 'cleanup' EXIT

git init -q -b main --ref-format=reftable --separate-git-dir="$gitdir" "$work"
# FILES files, then COMMITS commits changing 3 files each (fast-import, fixed dates).
python3 - "$FILES" "$COMMITS" <<'PY' | git -C "$work" fast-import --quiet
import sys
files, commits = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout
def data(s):
    b = s.encode()
    out.write(f"data {len(b)}\n"); out.write(s); out.write("\n")
t = 1700000000
out.write("commit refs/heads/main\n"); out.write(f"committer C <c@example.com> {t} +0000\n"); data("initial\n")
for i in range(files):
    out.write(f"M 644 inline d{i % 50}/f{i}.txt\n"); data("".join(f"line {j} of file {i}\n" for j in range(40)))
for c in range(1, commits + 1):
    out.write("commit refs/heads/main\n"); out.write(f"committer C <c@example.com> {t + c * 60} +0000\n"); data(f"commit {c}\n")
    for k in range(3):
        i = (c * 7 + k * 1013) % files
        out.write(f"M 644 inline d{i % 50}/f{i}.txt\n"); data("".join(f"line {j} of file {i} v{c}\n" for j in range(40)))
PY
git -C "$work" reset -q --hard main
git -C "$work" gc -q

ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
n=0
commit_once() { n=$((n + 1)); echo "edit $n" >>"$work/d0/f0.txt"; git -C "$work" commit -qam "bench $n"; }
point() { echo "gitdir: $1" >"$work/.git"; }
# Both mounts at once, so that the three sides alternate run by run (a loaded machine
# then slows all three alike).
"$BIN" mount "$gitdir" "$mnt" 2>"$DIR/mount-pt.log" &
pt_pid=$!
mkdir -p "$mnt-fw"
"$BIN" mount --no-kernel-passthrough "$gitdir" "$mnt-fw" 2>"$DIR/mount-fw.log" &
fw_pid=$!
cleanup() { point "$gitdir"; fusermount3 -u "$mnt" 2>/dev/null || true; fusermount3 -u "$mnt-fw" 2>/dev/null || true; }
for _ in $(seq 200); do mountpoint -q "$mnt" && mountpoint -q "$mnt-fw" && break; sleep 0.05; done
sides=("$gitdir" "$mnt" "$mnt-fw")
declare -A t
measure() { # name runs command...
    local name=$1 runs=$2; shift 2
    local i s
    for s in 0 1 2; do point "${sides[$s]}"; "$@" >/dev/null 2>&1; done
    for i in $(seq "$runs"); do
        for s in 0 1 2; do point "${sides[$s]}"; t[$name.$s]+="$(ms "$@") "; done
    done
}
measure status "$RUNS" git -C "$work" status
measure log "$RUNS" git -C "$work" log -1000 --stat
measure commit "$RUNS" commit_once
measure gc 3 git -C "$work" gc -q
point "$gitdir"
"$BIN" unmount "$mnt"; "$BIN" unmount "$mnt-fw"; wait $pt_pid $fw_pid || true
git -C "$work" fsck --no-progress >/dev/null
echo "repository: $FILES files, $((COMMITS + 1)) commits; median of $RUNS runs (gc: of 3); git $(git --version | awk '{print $3}')"
echo "passthrough log: $(grep 'passed-through files' "$DIR/mount-pt.log")"
echo "forwarding log:  $(grep 'passed-through files' "$DIR/mount-fw.log")"
printf '%-22s %10s %16s %8s %16s %8s\n' command "real ms" "passthrough ms" ratio "forwarding ms" ratio
med() { tr ' ' '\n' <<<"${t[$1]}" | grep . | median; }
row() {
    local r p f
    r=$(med "$2.0"); p=$(med "$2.1"); f=$(med "$2.2")
    printf '%-22s %10s %16s %8s %16s %8s\n' "$1" "$r" "$p" "$(awk -v a="$p" -v b="$r" 'BEGIN { printf "%.2f", a / (b ? b : 1) }')" "$f" "$(awk -v a="$f" -v b="$r" 'BEGIN { printf "%.2f", a / (b ? b : 1) }')"
}
row "git status" status
row "git log -1000 --stat" log
row "git commit -am" commit
row "git gc" gc
