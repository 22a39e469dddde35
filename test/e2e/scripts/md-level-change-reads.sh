#!/bin/sh
# The md bug under pool growth, without btrfs, nvmet or a reshape: O_DIRECT reads of /dev/mdX in
# flight while md changes a parity-less raid4 into raid0 (and back: raid0 → raid4 takeover).
#   sh md-level-change-reads.sh DEV_A DEV_B CYCLES
# Builds raid1 (one device, --force) → raid0 → raid4 parity-less over 2 data devices (a reshape,
# with nothing reading), writes random data, then CYCLES times: readers loop over 1 MiB O_DIRECT
# reads at three offsets comparing each with its expected sha256 while `mdadm --grow --level=0`
# and then `mdadm --grow --level=4 --force` (raid0 → raid4 takeover) run. Prints one line per
# wrong read ("WRONG <phase> <offset MiB> <sha256>") and a total. DESTROYS both devices.
set -eu
a=$1 b=$2 cycles=${3:-10}
md=/dev/md/strata-levelrepro
work=$(mktemp -d)
mdadm --stop "$md" >/dev/null 2>&1 || true
for d in "$a" "$b"; do mdadm --zero-superblock --force "$d" >/dev/null 2>&1 || true; wipefs -a -q "$d" || true; done
mdadm --create "$md" --run --metadata=1.2 --level=1 --raid-devices=1 --name=strata-levelrepro --force "$a" >/dev/null 2>&1
mdadm --grow "$md" --level=0 >/dev/null
mdadm --grow "$md" --level=4 --raid-devices=3 --force --add "$b" >/dev/null 2>&1
while [ "$(cat /sys/block/"$(basename "$(readlink -f "$md")")"/md/sync_action)" != idle ] || pgrep -x mdadm >/dev/null; do sleep 1; done
sys=/sys/block/$(basename "$(readlink -f "$md")")/md
echo "built: $(cat $sys/level) raid_disks=$(cat $sys/raid_disks) degraded=$(cat $sys/degraded)"
offsets="40 101 233"
for o in $offsets; do
  head -c 1048576 /dev/urandom > "$work/p$o"
  dd if="$work/p$o" of="$md" bs=1M seek="$o" oflag=direct conv=notrunc status=none
  sha256sum < "$work/p$o" | cut -d' ' -f1 > "$work/want$o"
done

reader() { # offset
  n=0
  while [ ! -e "$work/stop" ]; do
    got=$(dd if="$md" bs=1M count=1 skip="$1" iflag=direct status=none | sha256sum | cut -d' ' -f1)
    n=$((n + 1))
    [ "$got" = "$(cat "$work/want$1")" ] || echo "WRONG $(cat "$work/phase") $1 $got" >> "$work/wrong"
  done
  echo "$n" >> "$work/reads"
}
i=0
while [ "$i" -lt "$cycles" ]; do
  rm -f "$work/stop"
  echo start > "$work/phase"
  for o in $offsets; do reader "$o" & done
  sleep 2
  echo raid4-to-raid0 > "$work/phase"
  mdadm --grow "$md" --level=0 >/dev/null 2>&1
  echo raid0 > "$work/phase"
  sleep 2
  echo raid0-to-raid4 > "$work/phase"
  mdadm --grow "$md" --level=4 --force >/dev/null 2>&1 || mdadm --grow "$md" --level=4 >/dev/null
  echo raid4 > "$work/phase"
  sleep 2
  touch "$work/stop"
  wait
  i=$((i + 1))
  echo "cycle $i: $(cat $sys/level) raid_disks=$(cat $sys/raid_disks), wrong so far: $(cat "$work/wrong" 2>/dev/null | wc -l)"
done
[ -e "$work/wrong" ] && cat "$work/wrong"
for o in $offsets; do
  got=$(dd if="$md" bs=1M count=1 skip="$o" iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$(cat "$work/want$o")" ] || echo "AT REST WRONG $o"
done
echo "total: $(cat "$work/wrong" 2>/dev/null | wc -l) wrong reads of $(awk '{s+=$1} END {print s}' "$work/reads") in $cycles cycles"
mdadm --stop "$md" >/dev/null
rm -rf "$work"
