# Sourced by the benchmarks that measure one mount of their own with the kernel's FUSE
# tracepoints (benches/levers_bench.sh, benches/pyopen_probe.sh): the checks, the build,
# the run's directory, the trap that removes the mount on every exit path, and the mount.
# Root only (the tracepoints).
#
#   one_mount_setup NAME LABEL      # "SKIP LABEL: why" and exit 0 without root or FUSE;
#                                   # sets $root, $bin, $work (reftablefs-NAME.XXXXXX),
#                                   # $mnt and the EXIT trap
#   one_mount GITDIR [OPTION...]    # the mount in the background, ready; sets $pid, $conn
#
# The mount is removed on every exit path (fusermount3 -u, else its connection is aborted
# and the mount detached); the daemon runs under `timeout` too. Tracing uses its own
# tracefs instance (benches/support/fuse_trace.sh), removed by the trap.

# shellcheck source=benches/support/fuse_trace.sh
. "$(dirname "${BASH_SOURCE[0]}")/fuse_trace.sh"

root="" bin="" work="" mnt="" pid="" conn=""

one_mount_cleanup() {
    set +e
    fuse_trace_close
    if [ -n "$mnt" ] && mountpoint -q "$mnt"; then
        timeout 20 fusermount3 -u "$mnt" || {
            [ -n "$conn" ] && echo 1 >"/sys/fs/fuse/connections/$conn/abort"
            timeout 10 fusermount3 -uz "$mnt"
        }
    fi
    [ -n "$pid" ] && { timeout 20 tail --pid="$pid" -f /dev/null || kill -KILL "$pid"; }
    [ -n "$work" ] && rm -rf "$work"
}

# one_mount_setup NAME LABEL: NAME names the run's directory, LABEL the SKIP line.
one_mount_setup() {
    local name="$1" label="$2"
    root="$PWD"
    [ "$(id -u)" -eq 0 ] || { echo "SKIP $label: needs root (the tracepoint)"; exit 0; }
    [ -e /dev/fuse ] && command -v fusermount3 >/dev/null || { echo "SKIP $label: no /dev/fuse or fusermount3"; exit 0; }
    if [ -n "${MOUNT_BENCH_BIN:-}" ]; then bin="$MOUNT_BENCH_BIN"; else
        timeout 3600 cargo build --release --quiet --bin reftablefs
        bin="${CARGO_TARGET_DIR:-$root/target}/release/reftablefs"
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-$name.XXXXXX")
    mnt="$work/mnt"
    trap one_mount_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# one_mount GITDIR [OPTION...]: `reftablefs mount [OPTION...] GITDIR $mnt`, its log in
# $work/mount.log; returns once the kernel lists it, with $conn its connection.
one_mount() {
    local gitdir="$1"; shift
    mkdir -p "$mnt"
    timeout -k 10 3600 "$bin" mount "$@" "$gitdir" "$mnt" 2>"$work/mount.log" &
    pid=$!
    for _ in $(seq 300); do
        conn=$(awk -v m="$mnt" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)
        [ -n "$conn" ] && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/mount.log"; exit 1; }
        sleep 0.1
    done
    echo "$mnt: not mounted after 30 s"; exit 1
}
