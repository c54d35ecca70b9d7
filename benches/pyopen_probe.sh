#!/usr/bin/env bash
# Python's open() through the mount (issue 26): CPython's buffered open(), binary or text,
# asks whether the file is a terminal (isatty, an ioctl TCGETS). The kernel sends every
# ioctl on a FUSE file to the daemon (FUSE_IOCTL) and keeps no negative answer, so each
# such open costs one round trip more than os.open; the mount answers ENOTTY at once.
# This probe shows it: the same ref files of a read-only mount read by /usr/bin/python3
# with open(f, 'rb'), open(f, 'r') and open(f, 'rb', buffering=0), each loop timed (µs per
# file, the median of PYOPEN_ROUNDS, the modes interleaved) after one warm-up, and the
# FUSE requests of one more run of each counted by the kernel's tracepoints.
#
#   bash benches/pyopen_probe.sh                       1,000 ref files, 5 rounds (root)
#   PYOPEN_REFS=5000 PYOPEN_ROUNDS=7 MOUNT_BENCH_BIN=/path/to/reftablefs bash benches/pyopen_probe.sh
#
# The mount is removed on every exit path (fusermount3 -u, else its connection is aborted);
# the daemon runs under `timeout` too. Tracing uses its own tracefs instance, removed.
set -euo pipefail
cd "$(dirname "$0")/.."
refs="${PYOPEN_REFS:-1000}" rounds="${PYOPEN_ROUNDS:-5}"
python="${PYTHON:-/usr/bin/python3}"
[ -x "$python" ] || python=python3
# shellcheck source=benches/support/one_mount.sh
. benches/support/one_mount.sh
one_mount_setup pyopen "pyopen probe"

# shellcheck source=benches/support/git_env.sh
. benches/support/git_env.sh
bench_git_env "$work"
git init -q --ref-format=reftable -b main "$work/rt"
git -C "$work/rt" commit -q --allow-empty -m one
oid=$(git -C "$work/rt" rev-parse HEAD)
awk -v n="$refs" -v o="$oid" 'BEGIN { for (i = 0; i < n; i++) printf "create refs/heads/p%07d %s\n", i, o }' |
    git -C "$work/rt" -c core.logAllRefUpdates=false update-ref --stdin

one_mount "$work/rt/.git" --read-only
fuse_trace_open reftablefs-pyopen "$work" || { echo "pyopen: no tracefs instance"; exit 1; }
fuse_trace_filter "$conn"

# The loop: argv[1] the open call's arguments after the path; prints µs per file.
cat >"$work/loop.py" <<'PY'
import os, sys, time
d = sys.argv[2]
files = [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.startswith('p')]
how = sys.argv[1]
t = time.perf_counter()
if how == 'rb':
    for f in files: open(f, 'rb').read()
elif how == 'r':
    for f in files: open(f, 'r').read()
else:
    for f in files: open(f, 'rb', buffering=0).read()
print('%.1f' % ((time.perf_counter() - t) * 1e6 / len(files)))
PY
modes="rb r rb0"
loop() { timeout 300 "$python" "$work/loop.py" "$1" "$mnt/refs/heads"; }
for m in $modes; do loop "$m" >/dev/null; done
declare -A times
for _ in $(seq "$rounds"); do
    for m in $modes; do times[$m]="${times[$m]:-} $(loop "$m")"; done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

echo "### Python's open() through the mount — $(date -u '+%Y-%m-%d %H:%M UTC'), $refs ref files, $rounds rounds, $(nproc) CPUs, kernel $(uname -r), $("$python" --version)"
echo
echo "| open call | µs per file (median) | FUSE requests per file |"
echo "| --- | ---: | --- |"
for m in $modes; do
    fuse_trace_on
    loop "$m" >/dev/null
    sleep 0.2
    fuse_trace_off
    reqs=$({ grep -o 'fuse_request_send: .* opcode [0-9]* ([A-Z_]*)' "$FT_INST/trace" || true; } |
        sed 's/.*(FUSE_\(.*\))/\1/' | sort | uniq -c | sort -rn |
        awk -v n="$refs" '$1 >= n / 10 { printf "%s%s %.2f", sep, $2, $1 / n; sep = " + " }')
    case "$m" in
        rb) call="open(f, 'rb')" ;;
        r) call="open(f, 'r')" ;;
        rb0) call="open(f, 'rb', buffering=0)" ;;
    esac
    echo "| \`$call\` | $(echo "${times[$m]}" | median) | $reqs |"
done
