#!/bin/sh
# Starts tlshd (the TLS handshake daemon of ktls-utils) from the lab's Debian 13 userland, in the
# background (its own session, so the job that started it may end), logging to LOG; returns once
# it runs. The root's /etc/tlshd.conf links the .nvme keyring (test/e2e/lab/userland.ts).
# Usage: sh tlshd.sh ROOT LOG
set -eu
root=$1 log=$2
here=$(dirname "$0")
setsid sh "$here/userland.sh" "$root" tlshd -s > "$log" 2>&1 < /dev/null &
for _ in $(seq 1 50); do
  grep -qx tlshd /proc/[0-9]*/comm 2>/dev/null && exit 0
  sleep 0.1
done
echo "tlshd did not start:" >&2
cat "$log" >&2
exit 1
