#!/usr/bin/env bash
# The floor beside passthrough_hp (issue 26): the same loose-ref workloads on ext4 (the
# loose refs of a files repository), through libfuse's passthrough_hp over that same
# files repository, and through the reftablefs mount over a reftable repository with the
# same refs, in one interleaved run, pinned (client and daemon on CPU 0) and unpinned.
# Prints the median µs per operation of each side, the ratios mount/ext4 and
# mount/passthrough_hp, and the FUSE requests per operation of each FUSE side, counted
# by opcode with the kernel's fuse:fuse_request_send tracepoint.
#
#   bash benches/floor_bench.sh                   20,000 refs, 7 rounds (needs root)
#   BENCH_SCALE=10 bash benches/floor_bench.sh    2,000 refs
#   FLOOR_ROUNDS=3 FLOOR_MODES=pinned FLOOR_ONLY="cat python" ...
#   MOUNT_BENCH_BIN=/path/to/reftablefs  MOUNT_BENCH_OPTS="--no-follow-cpu"  OLD_GIT=/usr/bin/git
#   FLOOR_URING=1                                 a fourth side, `uring`: the mount again
#                                                 over FUSE over io_uring (`--io-uring`;
#                                                 the fuse module's enable_uring set to 1
#                                                 for the run, given back at exit; Linux
#                                                 6.14+), in the same rounds
#
# Workloads (FLOOR_ONLY: any of cat feref branch python ls), each run in the side's git
# directory (GIT_DIR for git) and timed whole, process start included, except python,
# which times its own loop:
#   cat     xargs cat of N/2 ref files (a fixed random pick)          µs per file
#   feref   git 2.39 for-each-ref --format=%(refname)                 µs per listed ref
#   branch  git 2.39 branch -a                                        µs per listed branch
#   python  os.open/os.read/os.close of the same N/2 files            µs per file
#   ls      ls -lR refs                                               µs per ref file
# Each workload: one untimed warm-up run per side (outputs compared), then FLOOR_ROUNDS
# rounds with the three sides in turn, the first side rotating each round, then one
# traced run per FUSE side. A side whose client fails or writes to stderr in any run
# gets "failed" instead of a figure, with a WARNING line. Modes (FLOOR_MODES): pinned = every client under
# `taskset -c 0` and both daemons started under it; unpinned = the scheduler's choice.
# Each mode mounts its own passthrough_hp and reftablefs (read-only) and removes them.
#
# passthrough_hp: Debian's fuse3 3.17.2-3 built by benches/support/passthrough_hp.sh,
# run as `passthrough_hp --foreground SRC MNT`: its defaults, i.e. kernel passthrough
# of reads and writes on, entries and attributes cached 86400 s (keep_cache on open),
# splice on, the multi-threaded loop; its open-file limit raised to fs.nr_open if we may
# (it keeps a descriptor per inode the kernel knows; else the refs are capped below the
# limit we have). It needs root (FUSE_DEV_IOC_BACKING_OPEN). If it
# cannot be built (no network, no build tools) or we are not root, a SKIP line is printed
# and the script exits 0.
#
# Every mount is removed on every exit path by the trap (fusermount3 -u; if that fails,
# the connection is aborted through /sys/fs/fuse/connections/N/abort and the mount
# detached); daemons run under `timeout` too, so even a killed script leaves none past
# FLOOR_MOUNT_LIMIT seconds. Tracing uses its own tracefs instance, removed afterwards
# (tracefs is mounted privately when /sys/kernel/tracing is not mounted).
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
scale="${BENCH_SCALE:-1}"
rounds="${FLOOR_ROUNDS:-7}"
only="${FLOOR_ONLY:-cat feref branch python ls}"
modes="${FLOOR_MODES:-pinned unpinned}"
step_limit="${FLOOR_TIMEOUT:-300}"
mount_limit="${FLOOR_MOUNT_LIMIT:-7200}"
oldgit="${OLD_GIT:-/usr/bin/git}"
python="${PYTHON:-/usr/bin/python3}"
[ -x "$python" ] || python=python3
target="${CARGO_TARGET_DIR:-$root/target}"

skip() { echo "SKIP floor benchmark (ext4 / passthrough_hp / mount): $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (passthrough_hp's kernel passthrough needs CAP_SYS_ADMIN)"
[ -e /dev/fuse ] || skip "/dev/fuse missing"
command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 missing"
command -v taskset >/dev/null 2>&1 || skip "taskset missing"

echo "== floor: passthrough_hp (benches/support/passthrough_hp.sh)"
ph=$(timeout 3600 bash benches/support/passthrough_hp.sh) || skip "could not build passthrough_hp (see the lines above)"

if [ -n "${MOUNT_BENCH_BIN:-}" ]; then
    bin="$MOUNT_BENCH_BIN"
else
    timeout 3600 cargo build --release --quiet --bin reftablefs
    bin="$target/release/reftablefs"
fi

uring="${FLOOR_URING:-0}"
# shellcheck source=benches/support/uring_param.sh
. benches/support/uring_param.sh
if [ "$uring" = 1 ]; then
    uring_param_save || skip "FLOOR_URING=1 needs a writable $URING_PARAM (Linux 6.14+)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-floor.XXXXXX")"
mounts=() conns=() pids=()
tr_root="" tr_inst="" tr_mounted=""
cleaned=""

# mnt_conn MNT: the FUSE connection number of the FUSE filesystem mounted at MNT (the
# minor of its device; the N of /sys/fs/fuse/connections/N), or nothing.
mnt_conn() {
    awk -v m="$1" '$5 == m { for (i = 7; i < NF; i++) if ($i == "-") break
        if ($(i + 1) ~ /^fuse/) { split($3, d, ":"); print d[2] } }' /proc/self/mountinfo
}

# fuse_down MNT CONN PID: unmounts MNT, aborting connection CONN if that fails, and waits
# for the daemon PID (TERM, then KILL).
fuse_down() {
    local mnt="$1" conn="$2" pid="$3"
    if [ -n "$(mnt_conn "$mnt")" ]; then
        if ! timeout 20 fusermount3 -u "$mnt" 2>>"$work/unmount.log"; then
            echo "floor: unmounting $mnt failed; aborting FUSE connection $conn" >&2
            [ -n "$conn" ] && [ -e "/sys/fs/fuse/connections/$conn/abort" ] &&
                { echo 1 >"/sys/fs/fuse/connections/$conn/abort" || true; }
            timeout 20 umount -l "$mnt" || timeout 20 fusermount3 -uz "$mnt" || true
        fi
    fi
    [ -n "$pid" ] || return 0
    # PID is the `timeout` the daemon runs under: TERM reaches the daemon through it
    # (with a SIGCONT); KILL does not, so the daemon gets its own.
    local i kids
    for i in $(seq 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            [ "$i" -le 20 ] || echo "floor: note: the daemon of $mnt exited $((i / 10)) s after its unmount" >&2
            return 0
        fi
        [ "$i" -eq 200 ] && { echo "floor: the daemon of $mnt still runs 20 s after its unmount: SIGTERM" >&2; kill -TERM "$pid" 2>/dev/null; }
        sleep 0.1
    done
    echo "floor: the daemon of $mnt still runs 30 s after its unmount: SIGKILL" >&2
    kids=$(pgrep -P "$pid" || true)
    # shellcheck disable=SC2086
    kill -KILL $kids "$pid" 2>/dev/null || true
}

tr_off() {
    [ -n "$tr_inst" ] && [ -d "$tr_inst" ] || return 0
    echo 0 >"$tr_inst/events/fuse/fuse_request_send/enable" 2>/dev/null || true
    echo 0 >"$tr_inst/events/fuse/fuse_request_send/filter" 2>/dev/null || true
    rmdir "$tr_inst" 2>/dev/null || echo "floor: could not remove tracing instance $tr_inst" >&2
    tr_inst=""
}

cleanup() {
    [ -z "$cleaned" ] || return 0
    cleaned=1
    set +e
    tr_off
    [ -n "$tr_mounted" ] && { umount "$tr_root" 2>/dev/null || umount -l "$tr_root"; }
    local i
    for i in "${!mounts[@]}"; do fuse_down "${mounts[$i]}" "${conns[$i]}" "${pids[$i]}"; done
    for i in "${!mounts[@]}"; do
        [ -n "$(mnt_conn "${mounts[$i]}")" ] && echo "floor: WARNING: ${mounts[$i]} is still mounted" >&2
    done
    uring_param_restore
    rm -rf "$work"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f–%.1f", lo, hi }'; }
num() { [[ "$1" =~ ^[0-9]+(\.[0-9]*)?$ ]]; }
fmt1() { if num "$1"; then awk -v a="$1" 'BEGIN { printf "%.1f", a }'; else echo "$1"; fi; }
ratio() {
    if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "n/a" }'; else echo n/a; fi
}

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"

nrefs=$((20000 / scale))
npick=$((10000 / scale))
# passthrough_hp keeps an O_PATH descriptor open for every inode the kernel knows (each
# ref, each directory, what git looks up) and fails lookups with EMFILE past its
# open-file limit. It gets fs.nr_open when we may raise the hard limit (CAP_SYS_RESOURCE),
# else the hard limit we have, and the refs are capped 500 below it.
nofile=${FLOOR_PH_NOFILE:-$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)}
if ! prlimit --nofile="$nofile:$nofile" true 2>/dev/null; then
    hard=$(ulimit -Hn)
    [ "$hard" = unlimited ] || [ "$hard" -ge "$nofile" ] || nofile=$hard
fi
[ "$nofile" -ge 1000 ] || skip "passthrough_hp's open-file limit would be $nofile (it needs one per ref)"
if [ "$nrefs" -gt $((nofile - 500)) ]; then
    echo "  (refs capped at $((nofile - 500)) instead of $nrefs: passthrough_hp's open-file limit is $nofile here)"
    nrefs=$((nofile - 500))
fi
load_start=$(uptime)
echo "== floor: setup, $nrefs refs (load: ${load_start##*load average: })"

# The reftable repository: one commit and nrefs refs refs/heads/bulk/NN/rNNNNNNN.
timeout "$step_limit" git init -q --ref-format=reftable -b main "$work/rt"
timeout "$step_limit" git -C "$work/rt" commit -q --allow-empty -m base
oid="$(git -C "$work/rt" rev-parse HEAD)"
awk -v n="$nrefs" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/bulk/%02d/r%07d %s\n", i % 100, i, o }' |
    timeout "$step_limit" git -C "$work/rt" -c core.logAllRefUpdates=false update-ref --stdin
# The files repository: the same objects, every ref as a loose file on ext4.
timeout "$step_limit" git init -q --ref-format=files -b main "$work/files"
rm -rf "$work/files/.git/objects" && cp -a "$work/rt/.git/objects" "$work/files/.git/"
git -C "$work/rt" for-each-ref --format='%(objectname) %(refname)' >"$work/refs.txt"
awk '{ sub(/\/[^\/]*$/, "", $2); print $2 }' "$work/refs.txt" | sort -u | (cd "$work/files/.git" && xargs mkdir -p)
(cd "$work/files/.git" && awk '{ print $1 > $2; close($2) }' "$work/refs.txt")
grep ' refs/heads/bulk/' "$work/refs.txt" | cut -d' ' -f2 | shuf -n "$npick" --random-source=<(yes) >"$work/pick.txt"
nfiles=$(cd "$work/files/.git" && find refs -type f | wc -l)
fstype=$(findmnt -no FSTYPE -T "$work/files/.git" 2>/dev/null || stat -f -c %T "$work/files/.git")
echo "  ($nfiles loose refs on $fstype, $(wc -l <"$work/pick.txt") picked for cat and python)"

cat >"$work/loop.py" <<'PY'
import os, sys, time
names = open(sys.argv[1]).read().split()
t = time.perf_counter_ns()
for n in names:
    fd = os.open(n, os.O_RDONLY)
    os.read(fd, 4096)
    os.close(fd)
print((time.perf_counter_ns() - t) // 1000)
PY

# The sides' git directories, set per mode.
declare -A dir conn
dir[ext4]="$work/files/.git"

# fuse_up NAME MNT: waits for MNT to be mounted by the daemon just started ($!); records
# it for the trap and sets conn[NAME].
fuse_up() {
    local name="$1" mnt="$2" pid=$! i c=""
    mounts+=("$mnt") conns+=("") pids+=("$pid")
    for i in $(seq 300); do
        c=$(mnt_conn "$mnt")
        [ -n "$c" ] && break
        kill -0 "$pid" 2>/dev/null || { tail -5 "$work/$name.log"; echo "floor: $name did not mount"; exit 1; }
        sleep 0.1
    done
    [ -n "$c" ] || { echo "floor: $name not mounted after 30 s"; exit 1; }
    conns[${#conns[@]} - 1]="$c"
    conn[$name]="$c"
    dir[$name]="$mnt"
}

# run_side SIDE WORKLOAD PIN OUT: runs one workload on one side, its output to OUT
# (/dev/null when timed), its errors appended to $work/err.SIDE; prints the µs it took
# (the loop's own time for python), or fails with the client's status.
run_side() {
    local side="$1" w="$2" pin="$3" out="$4" d t0 t1 rc=0
    d="${dir[$side]}"
    local -a pre=(timeout -k 5 "$step_limit")
    [ "$pin" = pinned ] && pre+=(taskset -c 0)
    t0=$(now_us)
    case "$w" in
        cat) (cd "$d" && "${pre[@]}" xargs -a "$work/pick.txt" cat >"$out") ;;
        feref) GIT_DIR="$d" "${pre[@]}" "$oldgit" for-each-ref --format='%(refname)' >"$out" ;;
        branch) GIT_DIR="$d" "${pre[@]}" "$oldgit" branch -a >"$out" ;;
        python) (cd "$d" && "${pre[@]}" "$python" "$work/loop.py" "$work/pick.txt" >"$work/py.out") ;;
        ls) (cd "$d" && "${pre[@]}" ls -lR refs >"$out") ;;
    esac 2>>"$work/err.$side" || rc=$?
    t1=$(now_us)
    [ "$rc" -eq 0 ] || return "$rc"
    if [ "$w" = python ]; then cat "$work/py.out"; else echo $((t1 - t0)); fi
}

# Tracing: a tracefs instance of our own with fuse:fuse_request_send, filtered by
# connection.
tr_setup() {
    if grep -q ' /sys/kernel/tracing tracefs ' /proc/self/mountinfo; then
        tr_root=/sys/kernel/tracing
    else
        mkdir -p "$work/tracefs"
        mount -t tracefs nodev "$work/tracefs" || return 1
        tr_root="$work/tracefs" tr_mounted=1
    fi
    [ -d "$tr_root/events/fuse/fuse_request_send" ] || { echo "  (no fuse:fuse_request_send tracepoint)"; return 1; }
    tr_inst="$tr_root/instances/reftablefs-floor-$$"
    mkdir "$tr_inst" || { tr_inst=""; return 1; }
    echo 16384 >"$tr_inst/buffer_size_kb"
}
# traced SIDE WORKLOAD PIN OPS: one run of WORKLOAD on SIDE with the tracepoint on; prints
# "TOTAL (BREAKDOWN)": requests per operation, by opcode for those at ≥ 0.005 per op.
traced() {
    local side="$1" w="$2" pin="$3" ops="$4" ev="$tr_inst/events/fuse/fuse_request_send"
    echo "connection == ${conn[$side]}" >"$ev/filter"
    echo >"$tr_inst/trace"
    echo 1 >"$ev/enable"
    run_side "$side" "$w" "$pin" /dev/null >/dev/null || echo "  WARNING: the traced $w failed on $side" >&2
    sleep 0.2
    echo 0 >"$ev/enable"
    local lost
    lost=$(cat "$tr_inst"/per_cpu/cpu*/stats | awk '/^overrun:/ { s += $2 } END { print s + 0 }')
    [ "$lost" -eq 0 ] || echo "  WARNING: the trace lost $lost events ($side $w)" >&2
    { grep -o 'opcode [0-9]* ([A-Z_]*)' "$tr_inst/trace" || true; } | sed 's/.*(\(FUSE_\)\{0,1\}\(.*\))/\2/' |
        sort | uniq -c | sort -rn |
        awk -v ops="$ops" '{ all += $1; if ($1 / ops >= 0.005) s = s (s == "" ? "" : " + ") sprintf("%s %.2f", $2, $1 / ops) }
            END { printf "%.2f (%s)\n", all / ops, (s == "" ? "-" : s) }'
}


tracing=""
if tr_setup; then tracing=1; else echo "  (requests per operation not counted: no tracefs or tracepoint)"; fi

declare -A res
rows=() urows=()
for mode in $modes; do
    echo "== floor: $mode"
    pre=()
    [ "$mode" = pinned ] && pre=(taskset -c 0)
    mkdir -p "$work/ph-$mode" "$work/mnt-$mode"
    # Its open-file limit: $nofile (above).
    "${pre[@]}" timeout -k 10 "$mount_limit" prlimit --nofile="$nofile:$nofile" -- "$ph" --foreground "$work/files/.git" "$work/ph-$mode" \
        2>"$work/ph-$mode.log" &
    fuse_up ph-$mode "$work/ph-$mode"
    # shellcheck disable=SC2086
    "${pre[@]}" timeout -k 10 "$mount_limit" "$bin" mount --read-only ${MOUNT_BENCH_OPTS:-} "$work/rt/.git" "$work/mnt-$mode" \
        2>"$work/mnt-$mode.log" &
    fuse_up mnt-$mode "$work/mnt-$mode"
    dir[ph]="${dir[ph-$mode]}" dir[mount]="${dir[mnt-$mode]}"
    conn[ph]="${conn[ph-$mode]}" conn[mount]="${conn[mnt-$mode]}"
    echo "  (passthrough_hp on connection ${conn[ph]}, reftablefs on ${conn[mount]})"
    all_sides=(ext4 ph mount)
    if [ "$uring" = 1 ]; then
        uring_param_on
        mkdir -p "$work/mnu-$mode"
        # shellcheck disable=SC2086
        "${pre[@]}" timeout -k 10 "$mount_limit" "$bin" mount --read-only --io-uring ${MOUNT_BENCH_OPTS:-} "$work/rt/.git" "$work/mnu-$mode" \
            2>"$work/mnu-$mode.log" &
        fuse_up mnu-$mode "$work/mnu-$mode"
        dir[uring]="${dir[mnu-$mode]}" conn[uring]="${conn[mnu-$mode]}"
        "$bin" status "$work/mnu-$mode" | grep -q 'transport: *io_uring' ||
            { "$bin" status "$work/mnu-$mode"; echo "floor: the --io-uring mount does not serve io_uring"; exit 1; }
        echo "  (reftablefs over io_uring on ${conn[uring]})"
        all_sides+=(uring)
    fi

    for w in $only; do
        sides=("${all_sides[@]}")
        nsides=${#sides[@]}
        declare -A fail=([ext4]="" [ph]="" [mount]="" [uring]="")
        rm -f "$work"/err.*
        # Warm-up, untimed; outputs compared (not for ls -l and python, which differ).
        for s in "${sides[@]}"; do run_side "$s" "$w" "$mode" "$work/out.$s" >/dev/null || fail[$s]+=x; done
        case "$w" in
            cat | feref | branch)
                for s in "${sides[@]:1}"; do cmp -s "$work/out.ext4" "$work/out.$s" || echo "  WARNING: $w differs between ext4 and $s"; done ;;
        esac
        case "$w" in
            cat | python) ops=$(wc -l <"$work/pick.txt") ;;
            feref | branch) ops=$(wc -l <"$work/out.ext4") ;;
            ls) ops=$nfiles ;;
        esac
        declare -A t=([ext4]="" [ph]="" [mount]="" [uring]="")
        for r in $(seq 0 $((rounds - 1))); do
            for k in $(seq 0 $((nsides - 1))); do
                s=${sides[$(((r + k) % nsides))]}
                if us=$(run_side "$s" "$w" "$mode" /dev/null); then
                    t[$s]+=" $(awk -v u="$us" -v n="$ops" 'BEGIN { printf "%.3f", u / n }')"
                else
                    fail[$s]+=x
                fi
            done
        done
        for s in "${sides[@]}"; do
            # shellcheck disable=SC2086
            res[$mode.$w.$s]=$(median ${t[$s]})
            # shellcheck disable=SC2086
            res[$mode.$w.$s.spread]=$(spread ${t[$s]})
            # A side that failed a run or complained has no figure.
            if [ -n "${fail[$s]}" ] || [ -s "$work/err.$s" ]; then
                echo "  WARNING: $w on $s: ${#fail[$s]} of $((rounds + 1)) runs failed, $(cat "$work/err.$s" 2>/dev/null | wc -l) lines on stderr; the first: $(head -1 "$work/err.$s" 2>/dev/null)"
                res[$mode.$w.$s]=failed res[$mode.$w.$s.spread]=-
            fi
        done
        req_ph="-" req_mnt="-" req_u="-"
        if [ -n "$tracing" ]; then
            req_ph=$(traced ph "$w" "$mode" "$ops")
            req_mnt=$(traced mount "$w" "$mode" "$ops")
            [ "$uring" = 1 ] && req_u=$(traced uring "$w" "$mode" "$ops")
        fi
        e=${res[$mode.$w.ext4]} p=${res[$mode.$w.ph]} m=${res[$mode.$w.mount]}
        printf '  %-7s %7s ops  ext4 %6s (%s)  passthrough_hp %6s (%s)  mount %6s (%s) µs/op  mount/ext4 %s  mount/ph %s\n' \
            "$w" "$ops" "$(fmt1 "$e")" "${res[$mode.$w.ext4.spread]}" "$(fmt1 "$p")" "${res[$mode.$w.ph.spread]}" \
            "$(fmt1 "$m")" "${res[$mode.$w.mount.spread]}" "$(ratio "$m" "$e")" "$(ratio "$m" "$p")"
        [ -n "$tracing" ] && printf '          requests/op: passthrough_hp %s; mount %s\n' "$req_ph" "$req_mnt"
        if [ "$uring" = 1 ]; then
            u=${res[$mode.$w.uring]}
            printf '          mount over io_uring %s (%s) µs/op  io_uring/ext4 %s  io_uring/ph %s  io_uring//dev/fuse %s; requests/op %s\n' \
                "$(fmt1 "$u")" "${res[$mode.$w.uring.spread]}" "$(ratio "$u" "$e")" "$(ratio "$u" "$p")" "$(ratio "$u" "$m")" "$req_u"
        fi
        case "$w" in
            cat) label="\`xargs cat\` of $ops ref files" ;;
            feref) label="git 2.39 \`for-each-ref\`, $ops refs" ;;
            branch) label="git 2.39 \`branch -a\`, $ops branches" ;;
            python) label="python open/read/close, $ops files" ;;
            ls) label="\`ls -lR refs\`, $ops ref files" ;;
        esac
        rows+=("| $label | $mode | $(fmt1 "$e") | $(fmt1 "$p") | $(fmt1 "$m") | $(ratio "$m" "$e") | $(ratio "$m" "$p") | $req_ph | $req_mnt |")
        [ "$uring" = 1 ] && urows+=("| $label | $mode | $(fmt1 "$e") | $(fmt1 "$p") | $(fmt1 "$m") | $(fmt1 "${res[$mode.$w.uring]}") | $(ratio "${res[$mode.$w.uring]}" "$e") | $(ratio "${res[$mode.$w.uring]}" "$p") | $(ratio "${res[$mode.$w.uring]}" "$m") | $req_u |")
    done

    grep -q 'disabling rw passthrough' "$work/ph-$mode.log" &&
        echo "  WARNING: passthrough_hp ran without kernel passthrough ($(grep -m1 passthrough "$work/ph-$mode.log"))"
    grep -q 'ERROR' "$work/ph-$mode.log" &&
        echo "  WARNING: passthrough_hp logged errors: $(grep -c ERROR "$work/ph-$mode.log") lines, the first: $(grep -m1 ERROR "$work/ph-$mode.log")"
    i=${#mounts[@]}
    for k in $(seq 1 "${#all_sides[@]}" | tail -n +2); do
        fuse_down "${mounts[$((i - k + 1))]}" "${conns[$((i - k + 1))]}" "${pids[$((i - k + 1))]}"
    done
done
tr_off

load_end=$(uptime)
mkdir -p "$root/target"
{
    echo
    echo "### Floor beside passthrough_hp — $(date -u '+%Y-%m-%d %H:%M UTC'), BENCH_SCALE=$scale ($nfiles refs), rounds: $rounds, $(nproc) CPUs, kernel $(uname -r), $("$oldgit" --version), passthrough_hp of fuse3 $(basename "$(dirname "$(dirname "$(dirname "$ph")")")" | sed 's/^fuse3_//; s/-[0-9a-f]*$//')"
    echo
    echo "Load average at start: ${load_start##*load average: }; at end: ${load_end##*load average: }."
    echo
    echo "| workload | mode | ext4 µs/op | passthrough_hp µs/op | mount µs/op | mount/ext4 | mount/passthrough_hp | passthrough_hp requests/op | mount requests/op |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"
    printf '%s\n' "${rows[@]}"
    if [ "$uring" = 1 ]; then
        echo
        echo "The mount over FUSE over io_uring (\`--io-uring\`) in the same rounds:"
        echo
        echo "| workload | mode | ext4 µs/op | passthrough_hp µs/op | mount µs/op | mount over io_uring µs/op | io_uring/ext4 | io_uring/passthrough_hp | io_uring / \`/dev/fuse\` | io_uring requests/op |"
        echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
        printf '%s\n' "${urows[@]}"
    fi
} | tee -a "$root/target/bench-results.md"
