#!/bin/sh
# Undoes nvmet-export.sh in reverse order: unlink the subsystem from the port, remove the port,
# disable and remove every namespace, remove the subsystem. Missing pieces are skipped, so it
# also resets a half-built export.
#   sh nvmet-teardown.sh NQN PORT_ID
set -eu
nqn=$1 portid=$2
cfg=/sys/kernel/config/nvmet
port=$cfg/ports/$portid
subsys=$cfg/subsystems/$nqn
[ -L "$port/subsystems/$nqn" ] && rm "$port/subsystems/$nqn"
if [ -d "$port" ] && [ -z "$(ls "$port/subsystems")" ]; then rmdir "$port"; fi
if [ -d "$subsys" ]; then
  for ns in "$subsys"/namespaces/*; do
    [ -d "$ns" ] || continue
    echo 0 > "$ns/enable"
    rmdir "$ns"
  done
  rmdir "$subsys"
fi
echo "removed $nqn and port $portid"
