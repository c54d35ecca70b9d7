#!/usr/bin/env bash
# Runs git 2.39's own test scripts against reftablefs and compares every subtest's outcome
# with tests/git-suite/expected.txt. See docs/git-suite.md.
#
#   bash tests/git-suite/run.sh [--mode b|a] [--update] [--compare-only] [--jobs N] [--trace] [--keep] [SCRIPT...]
#
# Mode b (the default): test-lib's main trash repository is converted to reftable by git
# 2.47 right after its `git init` and mounted with `reftablefs mount --daemon --over`
# (hook.sh, test-lib.patch); mode a runs the scripts as they are, for reference (its
# outcomes are printed, not compared). SCRIPT is a name or a prefix (t1400); the default
# list is scripts.txt. Exits non-zero on any difference from expected.txt in mode b: an
# unexpected failure, an unexpected pass, a subtest missing, added or renamed, a script that
# did not finish, an unmount that failed, or an expected failure without a cause.
# --update rewrites expected.txt from this run (keeping the causes of failures that stay;
# new failures get the cause "?", which must then be named by hand). --compare-only
# compares (or updates from) the last run's results without running anything; --trace
# runs the scripts with -x; --keep keeps the trash directories.
#
# Every script runs niced in its own process group, bounded by GIT_SUITE_TIMEOUT seconds;
# a script past its time has the FUSE connections under its trash directory aborted
# first (so nothing stays blocked on a mount), then is killed. After each script, and on
# any exit of this runner, every mount left under the output directory is unmounted,
# aborted and detached if that fails, and its daemon waited for (killed by its id if it
# does not exit).
#
# Variables: REFTABLEFS (the binary; default $CARGO_TARGET_DIR/debug/reftablefs),
# GIT_SUITE_NEW_GIT (git >= 2.46 for the migration; default: git on PATH),
# GIT_SUITE_OUT (output directory; default $CARGO_TARGET_DIR/git-suite),
# GIT_SUITE_TIMEOUT (per script, default 900), GIT_SUITE_JOBS (scripts at a time, 1 or 2;
# default 1), and fetch-build.sh's variables.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
expected="$here/expected.txt"

mode=b update= trace= keep= compare_only=
jobs=${GIT_SUITE_JOBS:-1}
scripts=()
while [ $# -gt 0 ]; do
    case "$1" in
        --mode) mode=$2; shift ;;
        --mode=*) mode=${1#--mode=} ;;
        --update) update=t ;;
        --jobs) jobs=$2; shift ;;
        --jobs=*) jobs=${1#--jobs=} ;;
        --trace) trace=t ;;
        --keep) keep=t ;;
        --compare-only) compare_only=t ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "run.sh: unknown option $1" >&2; exit 129 ;;
        *) scripts+=("$1") ;;
    esac
    shift
done
case "$mode" in a|b) ;; *) echo "run.sh: --mode is a or b" >&2; exit 129 ;; esac
case "$jobs" in 1|2) ;; *) echo "run.sh: --jobs is 1 or 2 (the machine is shared)" >&2; exit 129 ;; esac
[ -z "$update" ] || [ "$mode" = b ] || { echo "run.sh: --update needs mode b" >&2; exit 129; }
timeout_s=${GIT_SUITE_TIMEOUT:-900}
out=${GIT_SUITE_OUT:-$target/git-suite}
mkdir -p "$out"
out=$(cd "$out" && pwd)
run="$out/$mode"

log() { echo "git-suite: $*" >&2; }

src=$(bash "$here/fetch-build.sh")
if [ "${#scripts[@]}" -eq 0 ]; then
    mapfile -t scripts < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/scripts.txt")
fi
resolved=()
for s in "${scripts[@]}"; do
    s=${s%.sh}
    m=("$src"/t/"$s"*.sh)
    [ "${#m[@]}" -eq 1 ] && [ -f "${m[0]}" ] || { log "$s: no single t/$s*.sh in $src"; exit 129; }
    resolved+=("$(basename "${m[0]}")")
done
scripts=("${resolved[@]}")

if [ "$mode" = b ]; then
    rtfs=${REFTABLEFS:-$target/debug/reftablefs}
    [ -x "$rtfs" ] || { log "no reftablefs binary at $rtfs (cargo build --bin reftablefs, or set REFTABLEFS)"; exit 1; }
    rtfs=$(cd "$(dirname "$rtfs")" && pwd)/$(basename "$rtfs")
    new_git=${GIT_SUITE_NEW_GIT:-$(command -v git || true)}
    [ -n "$new_git" ] && [ -x "$new_git" ] || { log "no git >= 2.46 for the migration (GIT_SUITE_NEW_GIT)"; exit 1; }
    new_git=$(cd "$(dirname "$new_git")" && pwd)/$(basename "$new_git")
    v=$("$new_git" --version | awk '{ split($3, v, "."); print v[1] * 100 + v[2] }')
    [ "$v" -ge 246 ] || { log "$new_git is older than 2.46 (git refs migrate)"; exit 1; }
    [ -e /dev/fuse ] && command -v fusermount3 >/dev/null ||
        { log "mode b needs /dev/fuse and fusermount3 (package fuse3)"; exit 1; }
    [ "$(id -u)" -eq 0 ] || grep -qs '^[[:space:]]*user_allow_other' /etc/fuse.conf ||
        { log "mount --over mounts with allow_other: run as root, or add user_allow_other to /etc/fuse.conf"; exit 1; }
fi

# ---- mounts: found in /proc/self/mountinfo (never by a stat, which a hung mount blocks)

# mountinfo escapes space, tab, newline and backslash as \ooo.
mi_escape() { local p=${1//\\/\\134}; p=${p// /\\040}; p=${p//$'\t'/\\011}; printf '%s' "${p//$'\n'/\\012}"; }
mi_unescape() { printf '%b' "$(sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g' <<<"$1")"; }

# Prints "DEV<TAB>MOUNTPOINT" for each FUSE mount at or under $1, deepest first.
fuse_mounts_under() {
    # Through the environment: awk -v would undo the escapes.
    MI_PREFIX=$(mi_escape "$1") awk '{
        pre = ENVIRON["MI_PREFIX"]
        sep = 0; for (i = 7; i <= NF; i++) if ($i == "-") { sep = i; break }
        if (sep && $(sep + 1) ~ /^fuse/ && ($5 == pre || index($5, pre "/") == 1)) print $3 "\t" $5
    }' /proc/self/mountinfo | sort -t$'\t' -k2,2r
}

fusectl() {
    [ -d /sys/fs/fuse/connections ] || return 1
    awk '$5 == "/sys/fs/fuse/connections"' /proc/self/mountinfo | grep -q . ||
        mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
}

# Aborts the FUSE connection of every mount under $1: whatever waits on it gets ENOTCONN.
abort_under() {
    local dev mnt
    fusectl || true
    while IFS=$'\t' read -r dev mnt; do
        [ -n "$dev" ] || continue
        log "aborting FUSE connection ${dev#0:} ($(mi_unescape "$mnt"))"
        echo 1 >"/sys/fs/fuse/connections/${dev#0:}/abort" 2>/dev/null || true
    done < <(fuse_mounts_under "$1")
}

# The pids of reftablefs processes whose command line names a path under $1.
daemons_under() {
    local f p
    grep -lzF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null | while read -r f; do
        p=${f#/proc/}; p=${p%/cmdline}
        [ "$p" != "$$" ] || continue
        case "$(head -zn1 "$f" 2>/dev/null | tr -d '\0')" in
            */reftablefs|reftablefs) echo "$p" ;;
        esac
    done
}

# Unmounts everything under $1; a mount that does not go within the timeout has its
# connection aborted and is detached; daemons serving it are waited for, then killed.
# Returns 1 when anything was left behind by the script (the caller reports it).
cleanup_under() {
    local dir=$1 left=0 dev mnt m pids p i
    while IFS=$'\t' read -r dev mnt; do
        [ -n "$mnt" ] || continue
        left=1
        m=$(mi_unescape "$mnt")
        log "left mounted: $m; unmounting"
        if ! timeout -k 5 60 "$rtfs" unmount --timeout=45 "$m" >&2; then
            echo 1 >"/sys/fs/fuse/connections/${dev#0:}/abort" 2>/dev/null || true
            fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        fi
    done < <(fuse_mounts_under "$dir")
    if [ -n "$(fuse_mounts_under "$dir")" ]; then
        abort_under "$dir"
        while IFS=$'\t' read -r dev mnt; do
            umount -l "$(mi_unescape "$mnt")" 2>/dev/null || true
        done < <(fuse_mounts_under "$dir")
    fi
    for i in $(seq 1 100); do
        pids=$(daemons_under "$dir")
        [ -n "$pids" ] || break
        [ "$i" -lt 100 ] || { for p in $pids; do log "killing mount daemon $p"; kill -KILL "$p" 2>/dev/null || true; done; left=1; }
        sleep 0.1
    done
    return $left
}

# A running script's process group is in results/NAME.pgid until it has been waited for.
on_exit() {
    local f g
    trap - EXIT INT TERM
    for f in "$run"/results/*.pgid; do
        [ -f "$f" ] || continue
        g=$(cat "$f")
        [ "$mode" = b ] && abort_under "$run"
        kill -KILL -- "-$g" 2>/dev/null || true
        rm -f "$f"
    done
    if [ "$mode" = b ]; then cleanup_under "$run" >/dev/null 2>&1 || true; fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- one script

# Writes $run/results/NAME.tsv: script, number, outcome, "-", title (expected.txt's form),
# plus an "end" row when the script did not reach its plan line.
run_one() {
    local script=$1 name=${1%.sh}
    local trash="$run/trash directory.$name" res="$run/results/$name"
    local pid start i status=done args=(--verbose-log)
    set +e
    [ -z "$trace" ] || args+=(-x)
    rm -f "$res".*
    if [ "$mode" = b ] && [ -n "$(fuse_mounts_under "$trash")" ]; then
        cleanup_under "$trash" || true
    fi
    rm -rf --one-file-system "$trash"
    start=$(date +%s)
    (
        cd "$src/t"
        export TEST_OUTPUT_DIRECTORY="$run"
        if [ "$mode" = b ]; then
            export REFTABLEFS_GIT_SUITE_HOOK="$here/hook.sh" REFTABLEFS_GIT_SUITE_BIN="$rtfs" \
                REFTABLEFS_GIT_SUITE_GIT="$new_git" REFTABLEFS_GIT_SUITE_LOGDIR="$run/logs"
        fi
        exec setsid nice -n 10 sh "./$script" "${args[@]}" </dev/null >"$res.tap" 2>"$res.err"
    ) &
    pid=$!
    echo "$pid" >"$res.pgid"
    while kill -0 "$pid" 2>/dev/null; do
        if [ $(( $(date +%s) - start )) -ge "$timeout_s" ]; then
            log "$name: timed out after ${timeout_s}s; aborting its mounts and killing it"
            status=timeout
            [ "$mode" = b ] && abort_under "$trash"
            kill -TERM -- "-$pid" 2>/dev/null || true
            for i in 1 2 3 4 5; do kill -0 -- "-$pid" 2>/dev/null && sleep 1; done
            kill -KILL -- "-$pid" 2>/dev/null || true
            break
        fi
        sleep 1
    done
    wait "$pid"
    rm -f "$res.pgid"
    echo "$(( $(date +%s) - start ))" >"$res.time"
    if [ "$mode" = b ]; then
        if ! cleanup_under "$trash"; then
            echo "a mount or its daemon was left behind" >>"$res.harness"
        fi
        [ ! -e "$run/logs/$name.unmount-failed" ] ||
            echo "reftablefs unmount failed: $(tail -n 3 "$run/logs/$name.unmount" | tr '\n' ' ')" >>"$res.harness"
    fi
    awk -v s="$script" -v st="$status" '
        BEGIN { OFS = "\t" }
        /^ok [0-9]+ # skip / { n = $2; sub(/^ok [0-9]+ # skip /, ""); print s, n, "skip", "-", $0; next }
        /^ok [0-9]+ - / {
            n = $2; sub(/^ok [0-9]+ - /, "")
            o = "pass"; if (sub(/ # TODO known breakage vanished$/, "")) o = "fixed"
            print s, n, o, "-", $0; next }
        /^not ok [0-9]+ - / {
            n = $3; sub(/^not ok [0-9]+ - /, "")
            o = "fail"; if (sub(/ # TODO known breakage$/, "")) o = "todo"
            print s, n, o, "-", $0; next }
        /^1\.\.[0-9]+/ { plan = 1 }
        /^Bail out!/ { bail = $0 }
        END {
            if (st == "timeout") print s, "end", "incomplete", "-", "timed out"
            else if (bail != "") print s, "end", "incomplete", "-", bail
            else if (!plan) print s, "end", "incomplete", "-", "no plan line (the script died)"
        }' "$res.tap" >"$res.tsv"
    if [ -z "$keep" ] && { [ "$mode" = a ] || [ -z "$(fuse_mounts_under "$trash")" ]; }; then
        rm -rf --one-file-system "$trash"
    fi
    log "$name: $(grep -c $'\tpass\t' "$res.tsv" || true) passed, $(grep -c $'\tfail\t' "$res.tsv" || true) failed, $(cat "$res.time")s"
}

mkdir -p "$run/results" "$run/logs"
if [ -z "$compare_only" ]; then
    total_start=$(date +%s)
    for s in "${scripts[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        run_one "$s" &
    done
    wait || true
    log "mode $mode: ${#scripts[@]} scripts in $(( $(date +%s) - total_start ))s (output: $run)"
fi

results="$run/results.tsv"
for s in "${scripts[@]}"; do cat "$run/results/${s%.sh}.tsv"; done >"$results"

# ---- compare (mode b) or summarize (mode a)

if [ "$mode" = a ]; then
    awk -F'\t' '{ c[$1, $3]++; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
        END { for (i = 1; i <= k; i++) { s = order[i]
            printf "%-32s %4d passed, %3d failed, %3d skipped, %3d known breakages%s\n", s, c[s, "pass"], c[s, "fail"], c[s, "skip"], c[s, "todo"], (c[s, "incomplete"] ? ", INCOMPLETE" : "") } }' "$results"
    exit 0
fi

harness_errors=$(for s in "${scripts[@]}"; do f="$run/results/${s%.sh}.harness"; [ ! -s "$f" ] || sed "s/^/$s: /" "$f"; done)

if [ -n "$update" ]; then
    tmp=$(mktemp)
    {
        grep -E '^(#|cause\b)' "$expected" 2>/dev/null || true
        awk -F'\t' -v OFS='\t' -v list="$(printf '%s\n' "${scripts[@]}")" '
            FNR == NR { if ($0 !~ /^(#|cause)/ && NF >= 5) { old[$1, $2] = $3; cause[$1, $2] = $4 }; next }
            { bad = ($3 == "fail" || $3 == "incomplete")
              c = "-"; if (bad) c = (old[$1, $2] == $3 && cause[$1, $2] != "-") ? cause[$1, $2] : "?"
              print $1, $2, $3, c, $5 }' "$expected" "$results"
        # Rows of scripts not run this time stay as they were.
        awk -F'\t' -v list="$(printf '%s\n' "${scripts[@]}")" '
            BEGIN { n = split(list, l, "\n"); for (i = 1; i <= n; i++) ran[l[i]] = 1 }
            $0 !~ /^(#|cause)/ && NF >= 5 && !($1 in ran)' "$expected" 2>/dev/null || true
    } >"$tmp"
    # Order: comments and causes first, then rows by script and number.
    { grep -E '^(#|cause\b)' "$tmp"; grep -vE '^(#|cause\b)' "$tmp" | sort -t$'\t' -k1,1 -k2,2n; } >"$expected"
    rm -f "$tmp"
    log "updated $expected"
fi

status=0
awk -F'\t' -v out="$run" -v list="$(printf '%s\n' "${scripts[@]}")" '
    BEGIN { n = split(list, l, "\n"); for (i = 1; i <= n; i++) { ran[l[i]] = 1; order[i] = l[i] }; ns = n }
    FNR == NR {
        if ($1 == "cause") { known[$2] = 1; next }
        if ($0 ~ /^#/ || NF < 5 || !($1 in ran)) next
        ex[$1, $2] = $3; cause[$1, $2] = $4; title[$1, $2] = $5; rows[$1] = rows[$1] " " $2
        next
    }
    {
        s = $1; k = s SUBSEP $2; got[k] = 1; if ($2 != "end") nrun[s]++
        if (!(k in ex)) { unexp[s]++; msg[s] = msg[s] sprintf("  new       %s %s: %s (%s)\n", s, $2, $3, $5); next }
        if ($2 != "end" && title[k] != $5) { unexp[s]++; msg[s] = msg[s] sprintf("  renamed   %s %s: \"%s\", expected \"%s\"\n", s, $2, $5, title[k]) }
        if (ex[k] == $3) {
            if ($3 == "pass") pass[s]++
            else if ($3 == "skip") skip[s]++
            else if ($3 == "todo" || $3 == "fixed") todo[s]++
            else {
                c = cause[k]
                undeclared = ""; nparts = split(c, parts, ",")
                for (j = 1; j <= nparts; j++) if (!(parts[j] in known)) undeclared = undeclared " " parts[j]
                if (c == "-" || c == "?" || c == "") { unexp[s]++; msg[s] = msg[s] sprintf("  no cause  %s %s: %s (%s)\n", s, $2, $3, $5) }
                else if (undeclared != "") { unexp[s]++; msg[s] = msg[s] sprintf("  undeclared cause%s of %s %s\n", undeclared, s, $2) }
                else { xf[s]++; bycause[s, c]++; if (!((s, c) in seenc)) { seenc[s, c] = 1; causes[s] = causes[s] " " c } }
            }
        } else if (ex[k] == "skip" || $3 == "skip") {
            # A prerequisite differs from the machine that wrote expected.txt (root, tools):
            # reported, not failed.
            note[s] = note[s] sprintf("  note      %s %s: %s, expected %s (a prerequisite differs) (%s)\n", s, $2, $3, ex[k], $5)
            if ($3 == "pass") pass[s]++; else if ($3 == "skip") skip[s]++
        } else {
            unexp[s]++
            what = ($3 == "pass") ? "PASSES" : toupper($3)
            msg[s] = msg[s] sprintf("  %-9s %s %s, expected %s%s (%s)\n", what, s, $2, ex[k], (cause[k] != "-" ? " [" cause[k] "]" : ""), $5)
        }
    }
    END {
        bad = 0
        for (i = 1; i <= ns; i++) {
            s = order[i]
            m = split(rows[s], r, " ")
            if (m == 0) { unexp[s]++; msg[s] = msg[s] sprintf("  %s has no rows in expected.txt\n", s) }
            else if (!nrun[s]) {
                # Nothing ran (a bail-out, a hook that could not mount): one line, not m.
                unexp[s] += m
                msg[s] = msg[s] sprintf("  NOT RUN   %s: %d subtests expected (see %s/test-results/%s.out)\n", s, m, out, substr(s, 1, length(s) - 3))
                m = 0
            }
            for (j = 1; j <= m; j++) {
                if ((s, r[j]) in got) continue
                unexp[s]++
                if (r[j] == "end") msg[s] = msg[s] sprintf("  COMPLETES %s, expected incomplete [%s]\n", s, cause[s, r[j]])
                else msg[s] = msg[s] sprintf("  MISSING   %s %s, expected %s (%s)\n", s, r[j], ex[s, r[j]], title[s, r[j]])
            }
            line = ""
            nc = split(causes[s], cs, " ")
            for (j = 1; j <= nc; j++) line = line sprintf("%s%s %d", (j > 1 ? ", " : ""), cs[j], bycause[s, cs[j]])
            printf "%-32s %4d passed, %3d expected failures%s, %d unexpected%s\n", s, pass[s], xf[s], (nc ? " (" line ")" : ""), unexp[s], (skip[s] ? sprintf(" (%d skipped)", skip[s]) : "")
            printf "%s%s", msg[s], note[s]
            bad += unexp[s]; tp += pass[s]; tx += xf[s]
        }
        printf "git-suite: %d passed, %d expected failures, %d unexpected\n", tp, tx, bad
        exit bad > 0
    }' "$expected" "$results" || status=1
if [ -n "$harness_errors" ]; then
    echo "$harness_errors" | sed 's/^/git-suite: HARNESS /'
    status=1
fi
exit $status
