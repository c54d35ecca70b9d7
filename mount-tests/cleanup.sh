#!/usr/bin/env bash
# Detaches mounts a killed run left behind: FUSE mountpoints under the temp dir whose
# path starts with the given prefix (one run's own prefix, e.g. rtfs-mt-<run id>-, so a
# concurrent run on the same machine is never touched).
#
#   bash mount-tests/cleanup.sh PREFIX
set -u
prefix="${1:?usage: cleanup.sh PREFIX (e.g. rtfs-mt-1234-)}"
tmp="${TMPDIR:-/tmp}"
awk '{print $5}' /proc/self/mountinfo | while read -r mnt; do
    case "$mnt" in
        "$tmp/$prefix"*)
            echo "cleanup: detaching leftover mount $mnt"
            fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
            ;;
    esac
done
exit 0
