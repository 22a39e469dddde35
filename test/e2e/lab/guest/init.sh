#!/bin/busybox sh
# Strata e2e guest: /init of the initramfs (busybox). Loads the modules in the order the builder
# computed, puts the host's / (9p, read-only) under an overlay with a tmpfs upper, mounts the
# writable job share, configures 10.0.2.15/24 (no default route; and a private link's static
# address when the command line names one) and chroots into the overlay to
# run the job loop. Any failure here panics the kernel, which (panic=-1, -no-reboot) ends QEMU.
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mkdir -p /proc /sys /dev /run /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
say() { echo "strata-init [$(cut -d' ' -f1 /proc/uptime)] $*"; }
die() { say "FATAL: $*"; sleep 1; echo c > /proc/sysrq-trigger; exit 1; }

release=$(uname -r)
name=guest udev=0 l2mac="" l2addr="" l2mtu=1500 drive_timeout_ms=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    strata.name=*) name=${arg#strata.name=} ;;
    strata.udev=*) udev=${arg#strata.udev=} ;;
    strata.l2mac=*) l2mac=${arg#strata.l2mac=} ;;
    strata.l2addr=*) l2addr=${arg#strata.l2addr=} ;;
    strata.l2mtu=*) l2mtu=${arg#strata.l2mtu=} ;;
    strata.drive_timeout_ms=*) drive_timeout_ms=${arg#strata.drive_timeout_ms=} ;;
  esac
done

say "loading modules"
failed=""
while read -r module; do
  [ -n "$module" ] || continue
  insmod "/lib/modules/$release/$module" 2>/tmp/insmod.err || {
    grep -q 'File exists' /tmp/insmod.err || { failed="$failed ${module##*/}"; cat /tmp/insmod.err; }
  }
done < /lib/modules/strata.order
[ -z "$failed" ] || say "modules that failed to load:$failed"
echo "$failed" > /run/modules.failed
mount -t configfs configfs /sys/kernel/config || die "configfs"

say "mounting the shared root"
mkdir -p /lower /upper /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=524288 hostroot /lower || die "9p hostroot"
mount -t tmpfs -o mode=0755 tmpfs /upper || die "tmpfs upper"
mkdir -p /upper/data /upper/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work /newroot || die "overlay"
mount -t proc proc /newroot/proc || die "proc"
mount -t sysfs sysfs /newroot/sys || die "sysfs"
mount -t configfs configfs /newroot/sys/kernel/config || die "configfs in root"
mount -t devtmpfs devtmpfs /newroot/dev || die "devtmpfs"
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
# What udev would add to devtmpfs: /dev/fd and the standard streams (`nft -f -` opens /dev/stdin).
ln -s /proc/self/fd /newroot/dev/fd
ln -s /proc/self/fd/0 /newroot/dev/stdin
ln -s /proc/self/fd/1 /newroot/dev/stdout
ln -s /proc/self/fd/2 /newroot/dev/stderr
mount -t tmpfs -o mode=0755 tmpfs /newroot/run || die "tmpfs /run"
# /tmp is NOT a fresh tmpfs: the overlay already makes it writable, and the checkout the guest
# runs (and the tests' temp dirs) may live under the host's /tmp (CI clones there).
mkdir -p /newroot/run/strata/bin /newroot/run/strata/share /newroot/run/lock
cp /bin/busybox /lab/loop.sh /lab/runjob.sh /newroot/run/strata/bin/
cp /run/modules.failed /newroot/run/strata/modules.failed
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=524288 strata /newroot/run/strata/share || die "9p job share"
# The guest kernel's modules (with depmod's indexes) for modprobe inside the root.
mkdir -p "/newroot/lib/modules/$release" && mount -o bind "/lib/modules/$release" "/newroot/lib/modules/$release"

say "network"
ip link set lo up
# A private L2 link (test/e2e/lab/link.ts): the NIC with that MAC; the user network's is the other.
uplink=eth0
if [ -n "$l2mac" ]; then
  l2if=""
  for dev in /sys/class/net/*; do
    [ "$(cat "$dev/address")" = "$l2mac" ] && l2if=${dev##*/}
  done
  [ -n "$l2if" ] || die "no NIC with MAC $l2mac"
  [ "$l2if" = eth0 ] && uplink=eth1
  ip link set "$l2if" mtu "$l2mtu" || die "MTU $l2mtu on $l2if"
  ip link set "$l2if" up || die "private link $l2if"
  ip addr add "$l2addr" dev "$l2if" || die "address $l2addr"
  say "private link: $l2if $l2addr mtu $l2mtu"
fi
ip link set "$uplink" up || die "no $uplink"
ip addr add 10.0.2.15/24 dev "$uplink" || die "address"
hostname "$name"

# Guest-local configuration (lost at poweroff): no DNS, LVM without udev.
rm -f /newroot/etc/resolv.conf && : > /newroot/etc/resolv.conf
echo "$name" > /newroot/etc/hostname 2>/dev/null
mkdir -p /newroot/etc/lvm
if [ "$udev" = 1 ]; then
  : > /newroot/etc/lvm/lvmlocal.conf
else
  cat > /newroot/etc/lvm/lvmlocal.conf <<'LVM'
activation {
	udev_sync = 0
	udev_rules = 0
	monitoring = 0
}
devices {
	obtain_device_list_from_udev = 0
}
LVM
fi

if [ "$udev" = 1 ]; then
  say "starting udev"
  # PID 1 is still outside the chroot here: without SYSTEMD_IGNORE_CHROOT, udevd and udevadm
  # would see a chroot and do nothing.
  export SYSTEMD_IGNORE_CHROOT=1
  chroot /newroot /lib/systemd/systemd-udevd --daemon >/dev/null 2>&1 || say "udevd failed to start"
  chroot /newroot /bin/udevadm trigger --action=add >/dev/null 2>&1
  chroot /newroot /bin/udevadm settle --timeout=20 >/dev/null 2>&1
  unset SYSTEMD_IGNORE_CHROOT
fi

# The emulated NVMe drives (the only NVMe block devices at boot: fabrics paths come later) time
# their commands out sooner than the kernel's 30 s: QEMU under TCG at times leaves a command
# outstanding until the driver aborts it and resets the drive (docs/e2e.md, "Stalls"), and
# twice 30 s of a standing pool held every volume of the node for a minute (docs/e2e.md).
if [ -n "$drive_timeout_ms" ]; then
  for timeout in /sys/block/nvme*/queue/io_timeout; do
    [ -e "$timeout" ] && echo "$drive_timeout_ms" > "$timeout"
  done
fi

say "starting the job loop"
# PID 1 stays a tiny shell that restarts the loop should it ever exit (PID 1 exiting panics).
exec chroot /newroot /run/strata/bin/busybox sh -c '
  while :; do
    /run/strata/bin/busybox sh /run/strata/bin/loop.sh
    echo "strata: job loop exited ($?), restarting" > /dev/console
    sleep 1
  done'
