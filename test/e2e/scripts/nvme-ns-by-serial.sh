#!/bin/sh
# Prints the block device (/dev/nvmeXnY) of namespace 1 of the NVMe controller whose serial
# (trailing spaces trimmed) is $1. Controller numbers do not follow serial order: map by serial.
# Usage: sh nvme-ns-by-serial.sh SERIAL
set -eu
want=$1
for c in /sys/class/nvme/nvme*; do
  [ -e "$c/serial" ] || continue
  serial=$(sed 's/[[:space:]]*$//' "$c/serial")
  [ "$serial" = "$want" ] || continue
  for ns in "$c"/nvme*n1; do
    if [ -e "$ns/dev" ]; then echo "/dev/${ns##*/}"; exit 0; fi
  done
  echo "controller ${c##*/} (serial $want) has no namespace 1" >&2
  exit 1
done
echo "no NVMe controller with serial $want" >&2
exit 1
