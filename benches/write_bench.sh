#!/usr/bin/env bash
# Write-path benchmarks, ours beside a reference build, in one run:
#   * 10k lock+rename updates through the mount by 1 client and by 4 clients (+ final fsync),
#   * lock-create latency (p50/p99/max) while every batch commit is slowed to 1 s
#     (RTFS_TEST_COMMIT_DELAY_MS=1000, a test-only knob).
# usage: benches/write_bench.sh [REFERENCE_BIN]
#   REFERENCE_BIN: another build's reftablefs binary to run beside this one (e.g. main's).
#   WRITE_BENCH_AB=N: instead, N alternating pairs (ours, reference) of the 1-client run,
#   with the mount's CPU time (for a noisy machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build -q --release --features test-hooks --bin reftablefs --example lock_rename --example lock_latency \
    --manifest-path "$root/Cargo.toml"
ours="$root/target/release/reftablefs"
writer="$root/target/release/examples/lock_rename"
latency="$root/target/release/examples/lock_latency"
ref_bin="${1:-}"
work=$(mktemp -d)
trap 'for m in "$work"/m*; do fusermount3 -uz "$m" 2>/dev/null || true; done; rm -rf "$work"' EXIT
n=10000

mount_start() { # BIN GITDIR MNT [env...] -> MOUNT_PID
    local bin=$1 gitdir=$2 mnt=$3; shift 3
    mkdir -p "$mnt"
    env "$@" "$bin" mount "$gitdir" "$mnt" >"$mnt.log" 2>&1 &
    MOUNT_PID=$!
    for _ in $(seq 200); do grep -q " $mnt " /proc/self/mountinfo && return 0; sleep 0.05; done
    echo "mount failed: $(cat "$mnt.log")" >&2; return 1
}
mount_stop() { fusermount3 -u "$1"; wait "$2" || true; }

repo() { # DIR -> OID
    git init -q --ref-format=reftable -b main "$1"
    git -C "$1" commit -q --allow-empty -m base
    git -C "$1" rev-parse HEAD
}

bench() { # BIN LABEL
    local bin=$1 label=$2 oid out upd syn got
    oid=$(repo "$work/r1-$label")
    mount_start "$bin" "$work/r1-$label/.git" "$work/m1-$label"
    out=$("$writer" "$work/m1-$label" refs/heads/upd "$n" "$oid" --fsync-last)
    mount_stop "$work/m1-$label" "$MOUNT_PID"
    upd=$(sed 's/.*updates_s=\([0-9.]*\).*/\1/' <<<"$out"); syn=$(sed 's/.*fsync_s=\([0-9.]*\).*/\1/' <<<"$out")
    got=$(git -C "$work/r1-$label" for-each-ref refs/heads/upd | wc -l)
    awk -v a="$upd" -v b="$syn" -v n="$n" -v l="$label" -v g="$got" \
        'BEGIN { printf "%-10s 1 client : %d updates in %.3f s = %.3f ms/update (%d in the stack)\n", l, n, a + b, (a + b) * 1000 / n, g }'

    oid=$(repo "$work/r4-$label")
    mount_start "$bin" "$work/r4-$label/.git" "$work/m4-$label"
    local t0 t1 pids=()
    t0=$(date +%s.%N)
    for c in 1 2 3 4; do
        "$writer" "$work/m4-$label" "refs/heads/c$c" $((n / 4)) "$oid" --fsync-last >/dev/null &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    t1=$(date +%s.%N)
    mount_stop "$work/m4-$label" "$MOUNT_PID"
    got=$(git -C "$work/r4-$label" for-each-ref refs/heads/ | grep -c '/c[1-4]/' || true)
    awk -v a="$t0" -v b="$t1" -v n="$n" -v l="$label" -v g="$got" \
        'BEGIN { printf "%-10s 4 clients: %d updates in %.3f s = %.3f ms/update (%d in the stack)\n", l, n, b - a, (b - a) * 1000 / n, g }'

    oid=$(repo "$work/rl-$label")
    mount_start "$bin" "$work/rl-$label/.git" "$work/ml-$label" RTFS_TEST_COMMIT_DELAY_MS=1000
    out=$("$latency" "$work/ml-$label" "$oid" 5)
    mount_stop "$work/ml-$label" "$MOUNT_PID"
    echo "$label lock create during 1 s commits: $out"
}

ab_one() { # BIN LABEL
    local bin=$1 label=$2 d oid out cpu
    d=$(mktemp -d "$work/ab.XXXX")
    oid=$(repo "$d/r")
    mount_start "$bin" "$d/r/.git" "$d/m"
    out=$("$writer" "$d/m" refs/heads/upd "$n" "$oid" --fsync-last)
    cpu=$(awk '{ print ($14 + $15) / 100 }' "/proc/$MOUNT_PID/stat")
    mount_stop "$d/m" "$MOUNT_PID"
    echo "$label $out mount_cpu_s=$cpu"
}

echo "commit $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${WRITE_BENCH_AB:-}" ] && [ -n "$ref_bin" ]; then
    for _ in $(seq "$WRITE_BENCH_AB"); do ab_one "$ours" ours; ab_one "$ref_bin" reference; done
    exit 0
fi
bench "$ours" ours
if [ -n "$ref_bin" ]; then bench "$ref_bin" reference; fi
