#!/usr/bin/env bash
# Deletions at scale (issue 26 item 3): git 2.39's `fetch --prune` pruning 200 of 5,000
# remote-tracking branches (after the same fetch with --dry-run, which only reads: the
# part of the time that is not deleting), then `branch -D` of 100 of 5,000 local
# branches, on four sides in one interleaved run:
#   files   a files clone on the local disk (its remote-tracking refs packed, as `git
#           clone` leaves them; the local branches loose)
#   loose   a copy of it with every ref loose (as fetches leave them before a gc)
#   mount   the mount in its default layout (`--layout=loose`: every ref a loose file)
#           over a reftable clone in the same state: like with like is `loose`
#   packed  the mount with `--layout=packed` (as after `git gc`: every ref in
#           packed-refs) over another copy of that clone: like with like is `files`
#           (fewer loose files than it: its local branches are packed too)
# Order: mount, packed, loose, files for the dry run; files, loose, packed, mount for the
# fetch; mount, packed, loose, files for branch -D. Prints each time, the ratios
# packed/files, mount/loose and mount/files, the goal (within 2× files, the packed
# layout against the files clone), and checks that the four sides end with the same refs.
#
#   bash benches/prune_bench.sh                 5,000 branches, 200 pruned, 100 deleted
#   BENCH_SCALE=10 bash benches/prune_bench.sh  sizes divided by 10
#   MOUNT_BENCH_BIN=/path/to/reftablefs ...     measure another build of the mount
#   OLD_GIT=/usr/bin/git                        the files-only git (2.39) that is timed
#   PRUNE_URING=1                               a fifth side, `uring`: the packed layout
#                                               over FUSE over io_uring (`--io-uring`,
#                                               the fuse module's enable_uring set to 1
#                                               for the run and given back at exit;
#                                               root, Linux 6.14+), timed right after
#                                               `packed` in every step
#   PRUNE_PH=1                                  a sixth side, `ph`: a copy of the files
#                                               clone through libfuse's passthrough_hp
#                                               (Debian's fuse3, built once by
#                                               benches/support/passthrough_hp.sh; its
#                                               defaults: kernel passthrough, entries,
#                                               absent names and attributes cached a day),
#                                               the fastest FUSE file system measured here,
#                                               timed right after `files` in every step:
#                                               what any FUSE mount costs git 2.39 on these
#                                               steps (root; a note and no such side when
#                                               it cannot be built)
#   PRUNE_PH_BIN=/path/to/passthrough_hp        that build for the ph side instead (e.g.
#                                               libfuse's own, built with io_uring by
#                                               benches/uring_probe.sh)
#   PRUNE_PH_URING=1                            the ph side mounted with `-o io_uring`
#                                               (with PRUNE_URING=1, which sets the
#                                               module parameter; a libfuse built with
#                                               liburing)
#   PRUNE_MOUNT_OPTS="--batch-window 20"        more options for every mount (a lever
#                                               measured beside the defaults' run)
#   PRUNE_TRACE=1                               also count the FUSE requests of each step
#                                               of the packed layout, and of the uring
#                                               and ph sides when they run (the kernel's
#                                               fuse:fuse_request_send/_end tracepoints
#                                               in a tracefs instance of the run's own,
#                                               benches/support/fuse_trace.sh; root), by
#                                               opcode, with each opcode's median time
#                                               from send to end and their sum
#
# The mount runs with its defaults (fsync on, batch window 5 ms) unless PRUNE_MOUNT_OPTS. Every mount is removed
# by the trap (reftablefs unmount, then fusermount3 -uz); every step is bounded by
# `timeout`. The load average is printed before and after: the figures mean little when
# other work shares the machine.
set -euo pipefail

cd "$(dirname "$0")/.."
root="$PWD"
scale="${BENCH_SCALE:-1}"
oldgit="${OLD_GIT:-/usr/bin/git}"
limit="${PRUNE_TIMEOUT:-600}"
target="${CARGO_TARGET_DIR:-$root/target}"

[ -e /dev/fuse ] || { echo "SKIP prune benchmark: /dev/fuse missing"; exit 0; }
command -v fusermount3 >/dev/null 2>&1 || { echo "SKIP prune benchmark: fusermount3 missing"; exit 0; }

if [ -n "${MOUNT_BENCH_BIN:-}" ]; then
    bin="$MOUNT_BENCH_BIN"
else
    timeout 3600 cargo build --release --quiet --bin reftablefs
    bin="$target/release/reftablefs"
fi

# shellcheck source=benches/support/fuse_trace.sh
. benches/support/fuse_trace.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-prune.XXXXXX")"
# The mounts: the default (loose) layout, the packed one, the packed one over io_uring.
mnt="$work/mnt"
pmnt="$work/pmnt"
umnt="$work/umnt"
phmnt="$work/phmnt"
uring="${PRUNE_URING:-0}"
# shellcheck source=benches/support/uring_param.sh
. benches/support/uring_param.sh
if [ "$uring" = 1 ]; then
    uring_param_save || { echo "SKIP prune benchmark: PRUNE_URING=1 needs a writable $URING_PARAM (root, Linux 6.14+)"; exit 0; }
fi
mount_pids=()
unmount_all() {
    local m pid
    for m in "$mnt" "$pmnt" "$umnt"; do
        if grep -q " $m " /proc/self/mountinfo; then
            timeout 60 "$bin" unmount "$m" || fusermount3 -uz "$m" || umount -l "$m"
        fi
    done
    if grep -q " $phmnt " /proc/self/mountinfo; then
        timeout 60 fusermount3 -u "$phmnt" || fusermount3 -uz "$phmnt" || umount -l "$phmnt"
    fi
    for pid in "${mount_pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    mount_pids=()
}
cleanup() {
    set +e
    fuse_trace_close
    unmount_all
    for m in "$mnt" "$pmnt" "$umnt" "$phmnt"; do
        grep -q " $m " /proc/self/mountinfo && echo "prune: WARNING: $m is still mounted" >&2
    done
    uring_param_restore
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# passthrough_hp (PRUNE_PH=1), built before anything is timed.
ph=""
if [ "${PRUNE_PH:-0}" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "prune: PRUNE_PH=1 needs root (passthrough_hp's kernel passthrough): no passthrough_hp side"
    elif [ -n "${PRUNE_PH_BIN:-}" ]; then
        ph="$PRUNE_PH_BIN"
        [ -x "$ph" ] || { echo "prune: PRUNE_PH_BIN=$ph is no executable"; exit 2; }
    elif ! ph=$(timeout 3600 bash benches/support/passthrough_hp.sh); then
        echo "prune: passthrough_hp could not be built (above): no passthrough_hp side"; ph=""
    fi
fi

ph_opts=() ph_label="passthrough_hp"
if [ -n "$ph" ] && [ "${PRUNE_PH_URING:-0}" = 1 ]; then
    if [ "$uring" = 1 ]; then
        ph_opts=(-o io_uring) ph_label="passthrough_hp over io_uring"
    else
        echo "prune: PRUNE_PH_URING=1 needs PRUNE_URING=1 (the module parameter): passthrough_hp over /dev/fuse"
    fi
fi

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"

nb=$((5000 / scale))
nprune=$((200 / scale))
ndel=$((100 / scale))
now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
ms() { awk -v u="$1" 'BEGIN { printf "%.0f ms", u / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "n/a" }'; }
load() { uptime | sed 's/.*load average: //'; }

echo "== prune: setup, $nb branches (load: $(load))"
# The upstream: nb branches refs/heads/bNNNNN, one commit.
timeout "$limit" git init -q -b main "$work/up"
timeout "$limit" git -C "$work/up" commit -q --allow-empty -m base
oid="$(git -C "$work/up" rev-parse HEAD)"
awk -v n="$nb" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/b%05d %s\n", i, o }' |
    timeout "$limit" git -C "$work/up" update-ref --stdin
# Two clones in the same state (git 2.47): remote-tracking refs, and a local branch with a
# reflog for each.
for f in files reftable; do
    timeout "$limit" git clone -q --ref-format="$f" "$work/up" "$work/$f"
    git -C "$work/$f" for-each-ref --format="create refs/heads/%(refname:lstrip=3) %(objectname)" 'refs/remotes/origin/b*' |
        timeout "$limit" git -C "$work/$f" update-ref --create-reflog --stdin
done
# The all-loose copy: every packed ref written as a loose file, packed-refs removed.
cp -a "$work/files" "$work/loose"
(cd "$work/loose/.git" && grep -v '^[#^]' packed-refs | while read -r id name; do
    mkdir -p "$(dirname "$name")" && printf '%s\n' "$id" >"$name"
done && rm packed-refs)
# The packed layout's clone: the reftable clone in the same state.
cp -a "$work/reftable" "$work/reftable-p"
[ -n "$ph" ] && cp -a "$work/files" "$work/ph"
[ "$uring" = 1 ] && cp -a "$work/reftable" "$work/reftable-u"
nloose=$(find "$work/files/.git/refs" -type f | wc -l)
fstype=$(findmnt -no FSTYPE -T "$work/files/.git" 2>/dev/null || stat -f -c %T "$work/files/.git")
echo "  files clone: $nloose loose refs on $fstype, packed-refs $(wc -l <"$work/files/.git/packed-refs" 2>/dev/null || echo 0) lines"
# Upstream deletes nprune branches (every 25th at full size).
step=$((nb / nprune))
awk -v n="$nprune" -v s="$step" 'BEGIN { for (i = 0; i < n; i++) printf "delete refs/heads/b%05d\n", i * s }' |
    timeout "$limit" git -C "$work/up" update-ref --stdin
# The local branches deleted: ndel, offset from the pruned ones.
dels=$(awk -v n="$ndel" -v s="$step" 'BEGIN { for (i = 0; i < n; i++) printf "b%05d ", i * s + 1 }')

# ready MOUNTPOINT LOG WHAT: waits until the daemon started last serves MOUNTPOINT; exits
# with its log's last lines when it died, or after 30 s.
ready() {
    for _ in $(seq 300); do
        grep -q " $1 " /proc/self/mountinfo && return 0
        kill -0 "${mount_pids[-1]}" 2>/dev/null || { tail -5 "$2"; echo "prune: $3 failed"; exit 1; }
        sleep 0.1
    done
    echo "prune: $3 not ready after 30 s"; exit 1
}
# mount_at GITDIR MOUNTPOINT [OPTION...]: the mount in the background, ready.
mount_at() {
    local gitdir="$1" at="$2"; shift 2
    mkdir -p "$at"
    # shellcheck disable=SC2086 # PRUNE_MOUNT_OPTS is words on purpose
    timeout "$limit" "$bin" mount "$@" ${PRUNE_MOUNT_OPTS:-} "$gitdir" "$at" 2>>"$work/mount.log" &
    mount_pids+=("$!")
    ready "$at" "$work/mount.log" mount
}
mount_at "$work/reftable/.git" "$mnt"
mount_at "$work/reftable-p/.git" "$pmnt" --layout=packed
if [ "$uring" = 1 ]; then
    uring_param_on
    mount_at "$work/reftable-u/.git" "$umnt" --layout=packed --io-uring
    "$bin" status "$umnt" | grep -q 'transport: *io_uring' ||
        { "$bin" status "$umnt"; echo "prune: the io_uring mount does not serve io_uring"; exit 1; }
fi
if [ -n "$ph" ]; then
    # passthrough_hp keeps a descriptor per inode the kernel knows: its limit raised when
    # we may (as benches/floor_bench.sh does).
    mkdir -p "$phmnt"
    nofile=$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)
    prlimit --nofile="$nofile:$nofile" true 2>/dev/null || nofile=$(ulimit -Hn)
    timeout "$limit" prlimit --nofile="$nofile:$nofile" "$ph" --foreground "${ph_opts[@]}" "$work/ph/.git" "$phmnt" 2>>"$work/ph.log" &
    mount_pids+=("$!")
    ready "$phmnt" "$work/ph.log" passthrough_hp
fi

# side NAME: runs git 2.39 with the side's git directory; the elapsed µs in $took.
took=0
run() {
    local side="$1"; shift
    local gitdir="$work/$side/.git" wt="$work/$side"
    [ "$side" = mount ] && { gitdir="$mnt"; wt="$work/reftable"; }
    [ "$side" = packed ] && { gitdir="$pmnt"; wt="$work/reftable-p"; }
    [ "$side" = uring ] && { gitdir="$umnt"; wt="$work/reftable-u"; }
    [ "$side" = ph ] && { gitdir="$phmnt"; wt="$work/ph"; }
    local t0 t1
    t0=$(now_us)
    if ! (cd "$wt" && GIT_DIR="$gitdir" timeout "$limit" "$oldgit" "$@" >"$work/out.$side" 2>&1); then
        echo "prune: git $* failed on the $side side:"; tail -5 "$work/out.$side"; exit 1
    fi
    t1=$(now_us)
    took=$((t1 - t0))
}
# Request counts of the packed layout's steps (PRUNE_TRACE=1): the kernel's tracepoints in
# a tracefs instance of this run, kept to the packed mount's connection (its device minor).
tracing=0
if [ "${PRUNE_TRACE:-0}" = 1 ]; then
    if fuse_trace_open reftablefs-prune "$work"; then
        tracing=1
        pconn=$(mountpoint -d "$pmnt" | cut -d: -f2)
        phconn="" uconn=""
        [ -n "$ph" ] && phconn=$(mountpoint -d "$phmnt" | cut -d: -f2)
        [ "$uring" = 1 ] && uconn=$(mountpoint -d "$umnt" | cut -d: -f2)
        # shellcheck disable=SC2086 # phconn and uconn are empty or one word
        fuse_trace_filter "$pconn" $phconn $uconn
    else
        echo "prune: PRUNE_TRACE=1 but no tracefs instance could be made: no request counts"
    fi
fi
trace_on() {
    [ "$tracing" = 1 ] || return 0
    fuse_trace_on
}
# trace_off LABEL [SIDE CONN]: the requests the packed mount (or SIDE on connection CONN)
# answered since trace_on, by opcode, then each opcode's median time from the request's
# send to its end (µs) and the sum of those times.
trace_off() {
    [ "$tracing" = 1 ] || return 0
    fuse_trace_off
    # A full buffer drops events: the counts would be short, so say so.
    if cat "$FT_INST"/per_cpu/cpu*/stats 2>/dev/null | awk '/^overrun:/ { o += $2 } END { exit !(o > 0) }'; then
        echo "  WARNING: the trace buffer overflowed during $1 (${2:-packed layout}): its counts are short" >>"$work/requests"
    fi
    awk -v label="$1" -v side="${2:-packed layout}" -v conn="${3:-$pconn}" '
        / fuse_request_send: / {
            c = ""
            for (i = 1; i <= NF; i++) if ($i == "connection") c = $(i + 1)
            if (c != conn) next
            for (i = 1; i <= NF; i++) if ($i == "req") r = $(i + 1); else if ($i == "opcode") op = $(i + 2)
            for (i = 2; i <= NF; i++) if ($i == "fuse_request_send:") { t = $(i - 1); sub(/:$/, "", t) }
            gsub(/[()]/, "", op); sub(/^FUSE_/, "", op); pending[r] = op; sent[r] = t }
        / fuse_request_end: / {
            c = ""
            for (i = 1; i <= NF; i++) if ($i == "connection") c = $(i + 1)
            if (c != conn) next
            for (i = 1; i <= NF; i++) if ($i == "req") r = $(i + 1); else if ($i == "error") e = $(i + 1)
            for (i = 2; i <= NF; i++) if ($i == "fuse_request_end:") { t = $(i - 1); sub(/:$/, "", t) }
            if (r in pending) {
                n++; count[pending[r]]++; if (pending[r] == "LOOKUP" && e != 0) failed++
                printf "%s %.1f\n", pending[r], (t - sent[r]) * 1e6 >lat
                delete pending[r]; delete sent[r] } }
        END { line = ""; for (o in count) line = line " " o " " count[o]
              printf "  %s, %s: %d requests (%d LOOKUPs answered ENOENT):%s\n", side, label, n, failed, line }
    ' lat="$work/lat" "$FT_INST/trace" >>"$work/requests"
    [ -s "$work/lat" ] || return 0
    sort -k1,1 -k2,2n "$work/lat" | awk '
        { v[$1, ++k[$1]] = $2; sum += $2 }
        END { for (o in k) line = line sprintf(" %s %.0f", o, v[o, int((k[o] + 1) / 2)])
              printf "    µs per request, median:%s; all requests %.1f ms\n", line, sum / 1000 }
    ' >>"$work/requests"
    rm -f "$work/lat"
}

load_before=$(load)
echo "== prune: fetch --prune ($nprune of $nb), then branch -D ($ndel of $nb) (load: $load_before)"
# What fetch --prune reads before it deletes: the same fetch with --dry-run.
run mount fetch -q --dry-run --prune origin; m_dry=$took
trace_on; run packed fetch -q --dry-run --prune origin; p_dry=$took; trace_off "fetch --dry-run --prune"
u_dry=0; u_fetch=0; u_del=0
[ "$uring" = 1 ] && { trace_on; run uring fetch -q --dry-run --prune origin; u_dry=$took; trace_off "fetch --dry-run --prune" "io_uring" "$uconn"; }
run loose fetch -q --dry-run --prune origin; l_dry=$took
run files fetch -q --dry-run --prune origin; f_dry=$took
# ph_run LABEL VAR GIT-ARGS...: the passthrough_hp side (PRUNE_PH=1), traced as the packed
# side is; its time in VAR.
ph_dry=0; ph_fetch=0; ph_del=0
ph_run() {
    local label="$1" var="$2"; shift 2
    [ -n "$ph" ] || return 0
    trace_on; run ph "$@"; printf -v "$var" '%s' "$took"; trace_off "$label" "$ph_label" "$phconn"
}
ph_run "fetch --dry-run --prune" ph_dry fetch -q --dry-run --prune origin
run files fetch -q --prune origin; f_fetch=$took
ph_run "fetch --prune" ph_fetch fetch -q --prune origin
run loose fetch -q --prune origin; l_fetch=$took
trace_on; run packed fetch -q --prune origin; p_fetch=$took; trace_off "fetch --prune"
[ "$uring" = 1 ] && { trace_on; run uring fetch -q --prune origin; u_fetch=$took; trace_off "fetch --prune" "io_uring" "$uconn"; }
run mount fetch -q --prune origin; m_fetch=$took
# shellcheck disable=SC2086
run mount branch -q -D $dels; m_del=$took
# shellcheck disable=SC2086
trace_on; run packed branch -q -D $dels; p_del=$took; trace_off "branch -D"
# shellcheck disable=SC2086
[ "$uring" = 1 ] && { trace_on; run uring branch -q -D $dels; u_del=$took; trace_off "branch -D" "io_uring" "$uconn"; }
# shellcheck disable=SC2086
run loose branch -q -D $dels; l_del=$took
# shellcheck disable=SC2086
run files branch -q -D $dels; f_del=$took
# shellcheck disable=SC2086
ph_run "branch -D" ph_del branch -q -D $dels
load_after=$(load)

# Every side ends with the same refs (the mounts' written first).
unmount_all
sides="loose reftable reftable-p"
[ "$uring" = 1 ] && sides="$sides reftable-u"
[ -n "$ph" ] && sides="$sides ph"
for f in files $sides; do
    git -C "$work/$f" for-each-ref --format='%(refname) %(objectname)' >"$work/refs.$f"
done
for f in $sides; do
    if ! cmp -s "$work/refs.files" "$work/refs.$f"; then
        echo "prune: the $f clone differs from the files clone after the run:"
        diff "$work/refs.files" "$work/refs.$f" | head; exit 1
    fi
done
left=$(grep -c ' ' "$work/refs.files")

echo
echo "| step ($nb branches) | mount, packed layout | files clone ($fstype) | **packed / files** | mount, loose layout | all loose ($fstype) | mount / loose | mount / files | goal |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
row() { # label mount packed loose files goal
    echo "| $1 | $(ms "$3") | $(ms "$5") | **$(ratio "$3" "$5")** | $(ms "$2") | $(ms "$4") | $(ratio "$2" "$4") | $(ratio "$2" "$5") | $6 |"
}
row "git 2.39 fetch --dry-run --prune (reads only)" "$m_dry" "$p_dry" "$l_dry" "$f_dry" "—"
row "git 2.39 fetch --prune, $nprune pruned" "$m_fetch" "$p_fetch" "$l_fetch" "$f_fetch" "packed ≤ 2× files"
row "git 2.39 branch -D, $ndel deleted" "$m_del" "$p_del" "$l_del" "$f_del" "packed ≤ 2× files"
echo
if [ "$uring" = 1 ]; then
    echo "| step ($nb branches) | packed layout, /dev/fuse | packed layout, io_uring | files clone ($fstype) | packed / files | **io_uring / files** | io_uring / /dev/fuse |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    urow() { # label packed uring files
        echo "| $1 | $(ms "$2") | $(ms "$3") | $(ms "$4") | $(ratio "$2" "$4") | **$(ratio "$3" "$4")** | $(ratio "$3" "$2") |"
    }
    urow "git 2.39 fetch --dry-run --prune (reads only)" "$p_dry" "$u_dry" "$f_dry"
    urow "git 2.39 fetch --prune, $nprune pruned" "$p_fetch" "$u_fetch" "$f_fetch"
    urow "git 2.39 branch -D, $ndel deleted" "$p_del" "$u_del" "$f_del"
    echo
fi
if [ -n "$ph" ]; then
    echo "| step ($nb branches) | files clone ($fstype) | files clone through $ph_label | **passthrough_hp / files** | mount, packed layout | packed / passthrough_hp | packed layout, io_uring | io_uring / passthrough_hp |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    prow() { # label files ph packed uring
        local u="—" ur="—"
        [ "$uring" = 1 ] && { u=$(ms "$5"); ur=$(ratio "$5" "$3"); }
        echo "| $1 | $(ms "$2") | $(ms "$3") | **$(ratio "$3" "$2")** | $(ms "$4") | $(ratio "$4" "$3") | $u | $ur |"
    }
    prow "git 2.39 fetch --dry-run --prune (reads only)" "$f_dry" "$ph_dry" "$p_dry" "$u_dry"
    prow "git 2.39 fetch --prune, $nprune pruned" "$f_fetch" "$ph_fetch" "$p_fetch" "$u_fetch"
    prow "git 2.39 branch -D, $ndel deleted" "$f_del" "$ph_del" "$p_del" "$u_del"
    echo
fi
[ -s "$work/requests" ] && { echo; echo "FUSE requests (PRUNE_TRACE=1):"; cat "$work/requests"; }
echo "($left refs left on each side, identical; load average before: $load_before, after: $load_after; $(nproc) CPUs)"
