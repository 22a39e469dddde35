#!/bin/sh
# Runs a command of the lab's Debian 13 userland (test/e2e/lab/userland.ts: tlshd, nvme-cli 2.13,
# keyctl) in a chroot of that root, inside a guest. The guest's /proc, /sys (with configfs) and
# /dev are bound in first (nvme-cli reads sysfs and opens /dev/nvme-fabrics; keyutils reads
# /proc/keys); the root sits on the guest's overlay, so the mounts and any writes stay in the guest.
# Usage: sh userland.sh ROOT COMMAND [ARG...]
set -eu
root=$1
shift
for dir in proc sys dev; do
  mountpoint -q "$root/$dir" || mount --rbind "/$dir" "$root/$dir"
done
exec chroot "$root" "$@"
