#!/usr/bin/env bash
# Issue 26.6, measured first: does FUSE over io_uring (kernel 6.14+, module parameter
# `enable_uring`) pay on this machine? fuser 0.18 has no io_uring transport, so the probe
# uses the one daemon that has one: libfuse's own passthrough_hp (libfuse from its git
# repository, 3.19.0-rc0 here; Debian's 3.17.2 has no io_uring), built with liburing,
# mounted twice over the same directory of small files — over /dev/fuse and with
# `-o io_uring` — and timed in one interleaved run: a python loop of open/read/close of
# every file (the ref reader's pattern), client unpinned and pinned to CPU 0.
#
#   LIBFUSE_SRC=/path/to/libfuse bash benches/uring_probe.sh
#
# Variables: LIBFUSE_SRC (a libfuse checkout with lib/fuse_uring.c; built into
# $LIBFUSE_SRC/build-uring), PROBE_FILES (5000), PROBE_ROUNDS (7). Root only (the module
# parameter). The parameter is set to 1 for the run and given back its value at exit; both
# mounts are removed by the trap (fusermount3 -u, then -uz); every step has a timeout.
set -euo pipefail

src="${LIBFUSE_SRC:-}"
nfiles="${PROBE_FILES:-5000}"
rounds="${PROBE_ROUNDS:-7}"
# shellcheck source=benches/support/uring_param.sh
. "$(dirname "$0")/support/uring_param.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP uring probe: needs root (the fuse module parameter)"; exit 0; }
[ -w "$URING_PARAM" ] || { echo "SKIP uring probe: $URING_PARAM missing (kernel without FUSE over io_uring)"; exit 0; }
[ -n "$src" ] && [ -e "$src/lib/fuse_uring.c" ] || {
    echo "SKIP uring probe: set LIBFUSE_SRC to a libfuse checkout with io_uring (lib/fuse_uring.c)"; exit 0; }

build="$src/build-uring"
if [ ! -x "$build/example/passthrough_hp" ]; then
    timeout 600 meson setup "$build" "$src" -Dexamples=true -Dtests=false -Dutils=false \
        -Dbuildtype=release >/dev/null
    timeout 1200 ninja -C "$build" example/passthrough_hp >/dev/null
fi
grep -q "HAVE_URING" "$build/fuse_config.h" 2>/dev/null || {
    echo "SKIP uring probe: libfuse was built without io_uring (install liburing-dev)"; exit 0; }
php="$build/example/passthrough_hp"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-uring.XXXXXX")"
uring_param_save
pids=()
cleanup() {
    set +e
    for m in "$work/plain" "$work/uring"; do
        if grep -q " $m " /proc/self/mountinfo; then
            timeout 30 fusermount3 -u "$m" || fusermount3 -uz "$m"
        fi
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    uring_param_restore
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$work/src/refs" "$work/plain" "$work/uring"
python3 - "$work/src/refs" "$nfiles" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "b%06d" % i), "w") as f:
        f.write("%040x\n" % i)
EOF
uring_param_on

# mount_at DIR [OPTION...]: passthrough_hp in the foreground, ready.
mount_at() {
    local at="$1"; shift
    timeout 3600 "$php" --foreground "$@" "$work/src" "$at" 2>>"$work/daemon.log" &
    pids+=("$!")
    for _ in $(seq 100); do
        grep -q " $at " /proc/self/mountinfo && return 0
        sleep 0.1
    done
    echo "uring probe: $at not mounted:"; tail -5 "$work/daemon.log"; exit 1
}
mount_at "$work/plain"
mount_at "$work/uring" -o io_uring
# The io_uring mount really runs over io_uring: its daemon holds io_uring instances.
ls "$work/uring/refs" >/dev/null
daemon=$(pgrep -P "${pids[1]}" -x passthrough_hp || echo "${pids[1]}")
rings=0
for _ in $(seq 50); do
    rings=$(ls -l "/proc/$daemon/fd" 2>/dev/null | grep -c 'anon_inode:\[io_uring\]' || true)
    [ "$rings" -gt 0 ] && break
    sleep 0.1
done
echo "== uring probe: $nfiles files, $rounds rounds, $(nproc) CPUs, kernel $(uname -r), libfuse $(git -C "$src" describe --always 2>/dev/null || echo '?'); io_uring mount's daemon holds $rings io_uring instances"
[ "$rings" -gt 0 ] || { echo "uring probe: the io_uring mount fell back to /dev/fuse:"; tail -5 "$work/daemon.log"; exit 1; }

# reader DIR: µs per open/read/close over every file (one pass after a warm one).
cat >"$work/reader.py" <<'EOF'
import os, sys, time
d = sys.argv[1]
names = sorted(os.listdir(d))
for n in names:  # warm
    with open(os.path.join(d, n), "rb") as f:
        f.read()
t0 = time.perf_counter()
for n in names:
    with open(os.path.join(d, n), "rb") as f:
        f.read()
print("%.2f" % ((time.perf_counter() - t0) * 1e6 / len(names)))
EOF
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for pin in unpinned pinned; do
    pre=()
    [ "$pin" = pinned ] && pre=(taskset -c 0)
    : >"$work/plain.t"; : >"$work/uring.t"
    for r in $(seq "$rounds"); do
        order="plain uring"
        [ $((r % 2)) = 0 ] && order="uring plain"
        for side in $order; do
            timeout 300 "${pre[@]}" python3 "$work/reader.py" "$work/$side/refs" >>"$work/$side.t"
        done
    done
    p=$(median <"$work/plain.t"); u=$(median <"$work/uring.t")
    echo "| python open/read/close, client $pin | $p µs | $u µs | $(awk -v a="$u" -v b="$p" 'BEGIN { printf "%.2f×", a / b }') |"
done
echo "(columns: /dev/fuse, io_uring, io_uring / /dev/fuse; medians of $rounds rounds; load $(uptime | sed 's/.*load average: //'))"
