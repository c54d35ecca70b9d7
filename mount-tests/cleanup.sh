#!/usr/bin/env bash
# Detaches any mount a killed mount-test run (or demo/bench) could have left behind:
# FUSE mountpoints under the temp dir whose name carries one of our prefixes.
set -u
tmp="${TMPDIR:-/tmp}"
awk '{print $5}' /proc/self/mountinfo | while read -r mnt; do
    case "$mnt" in
        "$tmp"/rtfs-mt-*|"$tmp"/reftablefs-demo.*|"$tmp"/reftablefs-bench.*)
            echo "cleanup: detaching leftover mount $mnt"
            fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
            ;;
    esac
done
exit 0
