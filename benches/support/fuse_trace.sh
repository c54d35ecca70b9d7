# Sourced by the shell benchmarks that count FUSE requests: the kernel's fuse tracepoints
# in a tracefs instance of their own (tracefs mounted in the run's directory when it is not
# mounted already), filtered to one connection, and removed again by fuse_trace_close.
# Root only.
#
#   . benches/support/fuse_trace.sh
#   fuse_trace_open NAME "$work" || echo "no tracing"      # in the EXIT trap: fuse_trace_close
#   fuse_trace_filter "$conn"; fuse_trace_on; ...; fuse_trace_off
#   then read "$FT_INST/trace"

FT_INST="" FT_MOUNTED=""

# fuse_trace_open NAME WORKDIR: makes the instance NAME-PID; 1 if tracing is unavailable.
fuse_trace_open() {
    local root
    if grep -q ' /sys/kernel/tracing tracefs ' /proc/self/mountinfo; then
        root=/sys/kernel/tracing
    else
        mkdir -p "$2/tracefs" && mount -t tracefs nodev "$2/tracefs" 2>/dev/null || return 1
        root="$2/tracefs" FT_MOUNTED="$2/tracefs"
    fi
    [ -d "$root/instances" ] && mkdir "$root/instances/$1-$$" 2>/dev/null || return 1
    FT_INST="$root/instances/$1-$$"
    echo 16384 >"$FT_INST/buffer_size_kb"
}

# fuse_trace_filter CONN...: only the requests of these connections (mounts' device
# minors; the trace lines name their connection).
fuse_trace_filter() {
    local e c expr=""
    for c in "$@"; do expr="${expr:+$expr || }connection == $c"; done
    for e in fuse_request_send fuse_request_end; do
        echo "$expr" >"$FT_INST/events/fuse/$e/filter"
    done
}

# fuse_trace_on: the buffer emptied and both tracepoints on.
fuse_trace_on() {
    echo >"$FT_INST/trace"
    echo 1 >"$FT_INST/events/fuse/enable"
}

fuse_trace_off() {
    echo 0 >"$FT_INST/events/fuse/enable"
}

# fuse_trace_close: the instance removed, tracefs unmounted if we mounted it.
fuse_trace_close() {
    if [ -n "$FT_INST" ] && [ -d "$FT_INST" ]; then
        echo 0 >"$FT_INST/events/fuse/enable"
        rmdir "$FT_INST"
    fi
    [ -n "$FT_MOUNTED" ] && umount "$FT_MOUNTED"
    FT_INST="" FT_MOUNTED=""
}
