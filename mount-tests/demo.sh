#!/usr/bin/env bash
# `make demo`: git 2.47 makes a small reftable repository (branches, nested names, tags,
# a symref, reflogs); reftablefs mounts it and we look at it with ls and cat. The mount is
# always removed (trap), and every wait is bounded.
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --quiet --bin reftablefs
bin="$PWD/target/debug/reftablefs"

work="$(mktemp -d "${TMPDIR:-/tmp}/reftablefs-demo.XXXXXX")"
mnt="$work/mnt"
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then
        kill -TERM "$mount_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$mount_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$mount_pid" 2>/dev/null || true
    fi
    if grep -q " $mnt " /proc/self/mountinfo 2>/dev/null; then
        fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

export GIT_AUTHOR_NAME="Demo Author" GIT_AUTHOR_EMAIL="author@example.com"
export GIT_COMMITTER_NAME="Demo Committer" GIT_COMMITTER_EMAIL="committer@example.com"
export GIT_CONFIG_NOSYSTEM=1 HOME="$work"
tick=1700000000
commit() { # commit MESSAGE (the clock also dates the reflog entries that follow)
    tick=$((tick + 60))
    export GIT_AUTHOR_DATE="$tick +0100" GIT_COMMITTER_DATE="$tick +0100"
    git -C "$work/repo" commit -q --allow-empty -m "$1"
}

echo "== git $(git --version | cut -d' ' -f3) makes a reftable repository in $work/repo"
git init -q --ref-format=reftable -b main "$work/repo"
commit "first"
commit "second"
git -C "$work/repo" branch feature/login
git -C "$work/repo" branch topic/deep/nested
git -C "$work/repo" checkout -q feature/login
commit "login form"
git -C "$work/repo" checkout -q main
git -C "$work/repo" tag v1.0
git -C "$work/repo" tag -a -m "release 1.1" v1.1
git -C "$work/repo" update-ref -m "fetch: demo" refs/remotes/origin/main HEAD
git -C "$work/repo" symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/main
git -C "$work/repo" for-each-ref --format='%(refname) %(objectname:short) %(symref)'
echo "-- reftable/tables.list:"
cat "$work/repo/.git/reftable/tables.list"

dump_fallback() {
    echo "NOTE: showing 'reftablefs dump' of the tables instead of a mount ($1)."
    while read -r table; do
        echo "\$ reftablefs dump reftable/$table"
        "$bin" dump "$work/repo/.git/reftable/$table" || echo "(dump failed)"
    done <"$work/repo/.git/reftable/tables.list"
}

# try_mount: starts the mount in the background and waits (10 s) until it is ready.
try_mount() {
    mkdir -p "$mnt"
    echo "== reftablefs mount $work/repo/.git $mnt"
    "$bin" mount "$work/repo/.git" "$mnt" 2>"$work/mount.log" &
    mount_pid=$!
    for _ in $(seq 100); do
        grep -q " $mnt " /proc/self/mountinfo && return 0
        if ! kill -0 "$mount_pid" 2>/dev/null; then
            mount_pid=""
            sed 's/^/   mount: /' "$work/mount.log"
            return 1
        fi
        sleep 0.1
    done
    sed 's/^/   mount: /' "$work/mount.log"
    return 1
}

if ! "$bin" help 2>/dev/null | grep -qE '^\s+mount\b'; then
    dump_fallback "this build has no 'reftablefs mount' yet"
elif ! try_mount; then
    dump_fallback "the mount did not come up; its log is above"
else
    cd "$mnt"
    for cmd in "ls -R" "cat HEAD" "cat refs/heads/main" "cat refs/remotes/origin/HEAD" "cat logs/HEAD" "cat packed-refs"; do
        echo "\$ $cmd"
        timeout 10 $cmd || echo "(exit $?)"
    done
    cd /
    echo "== reftablefs unmount $mnt"
    timeout 10 "$bin" unmount "$mnt" || echo "(unmount command failed; the trap detaches)"
    for _ in $(seq 100); do kill -0 "$mount_pid" 2>/dev/null || break; sleep 0.1; done
    mount_pid=""
fi
