#!/bin/sh
# Lists the NVMe controllers the guest's kernel sees, one per line:
#   name|transport|serial (raw, as sysfs gives it)|model (raw)|namespace block devices (comma-separated)
# Usage: sh nvme-controllers.sh
set -eu
for c in /sys/class/nvme/nvme*; do
  [ -e "$c" ] || continue
  namespaces=""
  for ns in "$c"/nvme*n*; do
    [ -e "$ns/dev" ] || continue
    namespaces="$namespaces${namespaces:+,}${ns##*/}"
  done
  printf '%s|%s|%s|%s|%s\n' "${c##*/}" "$(cat "$c/transport")" "$(cat "$c/serial")" "$(cat "$c/model")" "$namespaces"
done
