#!/bin/sh
# Prints the block device of the NVMe namespace whose UUID is $1, waiting up to $2 seconds
# (default 20) for it to appear: /dev/disk/by-id/nvme-uuid.<uuid> when udev made it, else the
# namespace found by the sysfs `uuid` attribute (multipath head devices; hidden per-path
# nvmeXcYnZ devices are skipped).
# Usage: sh nvme-ns-by-uuid.sh UUID [TIMEOUT_SECONDS]
set -eu
uuid=$1
timeout=${2:-20}
deadline=$(( $(date +%s) + timeout ))
while :; do
  link=/dev/disk/by-id/nvme-uuid.$uuid
  if [ -e "$link" ]; then readlink -f "$link"; exit 0; fi
  for b in /sys/block/nvme*n*; do
    [ -e "$b/uuid" ] || continue
    case "${b##*/}" in nvme*c*n*) continue ;; esac
    if [ "$(cat "$b/uuid")" = "$uuid" ] && [ -e "/dev/${b##*/}" ]; then echo "/dev/${b##*/}"; exit 0; fi
  done
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "no namespace with uuid $uuid after ${timeout}s" >&2
    exit 1
  fi
  sleep 0.2
done
