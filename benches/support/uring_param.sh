# Sourced by the benchmarks that measure FUSE over io_uring: the fuse module's
# `enable_uring` parameter (Linux 6.14+) saved, set for the run, and given back its value.
#
#   . benches/support/uring_param.sh
#   uring_param_save || { echo "SKIP ..."; exit 0; }   # before anything mounts
#   uring_param_on                                      # before the io_uring mount
#   uring_param_restore                                 # in the EXIT trap

URING_PARAM=/sys/module/fuse/parameters/enable_uring
uring_param_old=""

# uring_param_save: remembers the parameter's value; fails when it cannot be written.
uring_param_save() {
    [ -w "$URING_PARAM" ] || return 1
    uring_param_old="$(cat "$URING_PARAM")"
}

# uring_param_on: the kernel offers io_uring to the mounts made from now on.
uring_param_on() {
    echo 1 >"$URING_PARAM"
}

# uring_param_restore: gives the parameter back its saved value (nothing if none saved).
uring_param_restore() {
    [ -n "$uring_param_old" ] || return 0
    case "$uring_param_old" in Y | 1) echo 1 >"$URING_PARAM" ;; *) echo 0 >"$URING_PARAM" ;; esac
}
