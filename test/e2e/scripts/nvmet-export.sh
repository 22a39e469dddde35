#!/bin/sh
# Exports a block device through the kernel NVMe target (configfs), in the order the kernel
# requires: subsystem and its attributes -> namespace (enabled last) -> port -> link.
#   sh nvmet-export.sh NQN NSID DEVICE UUID PORT_ID TRSVCID [TRADDR]
# The subsystem allows any host; the namespace gets the explicit device_uuid (the kernel would
# pick a random one). The port is NVMe/TCP on IPv4 TRADDR (default 0.0.0.0).
set -eu
nqn=$1 nsid=$2 device=$3 uuid=$4 portid=$5 trsvcid=$6 traddr=${7:-0.0.0.0}
cfg=/sys/kernel/config/nvmet
[ -d "$cfg" ] || { echo "nvmet configfs not mounted at $cfg" >&2; exit 1; }

subsys=$cfg/subsystems/$nqn
mkdir "$subsys"
echo 1 > "$subsys/attr_allow_any_host"

ns=$subsys/namespaces/$nsid
mkdir "$ns"
echo -n "$device" > "$ns/device_path"
echo -n "$uuid" > "$ns/device_uuid"
echo 1 > "$ns/enable"

port=$cfg/ports/$portid
mkdir "$port"
echo tcp > "$port/addr_trtype"
echo ipv4 > "$port/addr_adrfam"
echo -n "$traddr" > "$port/addr_traddr"
echo -n "$trsvcid" > "$port/addr_trsvcid"
ln -s "$subsys" "$port/subsystems/$nqn"
echo "exported $device as $nqn namespace $nsid (uuid $uuid) on tcp $traddr:$trsvcid (port $portid)"
