// An optional private L2 segment between guests (a second NIC), for traffic that should not go
// through QEMU's user-mode network: with `-netdev user`, a guest reaches another only through
// slirp's TCP stack in each QEMU's main thread, the host's loopback and a host forward
// (10.0.2.2:<port>). Two kinds:
//   - 'tap': a Linux bridge with no address (nothing routes to or from it: the host's own network
//     is untouched) and one persistent tap per guest, opened by QEMU with a virtio-net header
//     (the guests' checksum and segmentation offloads reach across the bridge). Needs root.
//   - 'mcast': QEMU's socket backend on a UDP multicast group on 127.0.0.1 (every guest of the
//     group sees every frame; QEMU drops the ones not for its MAC). No root needed.
// The guest's init (guest/init.sh) finds the NIC by its MAC and gives it a static address
// (strata.l2mac, strata.l2addr, strata.l2mtu on the kernel command line). Bridges and taps
// are named sl2-<pid>[-<n>] and removed by close(), at exit, or by the next process to create
// a segment once <pid> is gone.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { alive, labLog } from './util.js';

export type SegmentKind = 'tap' | 'mcast';

export interface PrivateSegment {
  readonly kind: SegmentKind;
  /** The bridge ('tap') or the multicast group host:port ('mcast'). */
  readonly name: string;
  /** The tap of a guest on this segment ('tap': created and attached to the bridge on first use). */
  tapFor(guestName: string): string;
  /** Removes the taps and the bridge ('tap'); idempotent. */
  close(): void;
}

/** A guest's NIC on a private segment. */
export interface PrivateLinkSpec {
  readonly segment: PrivateSegment;
  /** IPv4 address with prefix, e.g. 192.168.77.11/24. */
  readonly address: string;
  /** Default 9000 (the segment carries only guest-to-guest traffic). */
  readonly mtu?: number;
}

const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/;

/** The address without its prefix, e.g. 192.168.77.11. */
export function linkAddress(address: string): string {
  const m = IPV4_CIDR.exec(address);
  if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || Number(m[5]) > 30 || Number(m[5]) < 8)
    throw new Error(`private link address: an IPv4 address with a prefix of 8-30 bits, e.g. 192.168.77.11/24: ${address}`);
  return address.slice(0, address.indexOf('/'));
}

/** A locally administered MAC derived from the address (distinct per address on a /16 or longer). */
export function linkMac(address: string): string {
  const octets = linkAddress(address).split('.').map(Number);
  const hex = (n: number) => n.toString(16).padStart(2, '0');
  return `52:54:00:4c:${hex(octets[2]!)}:${hex(octets[3]!)}`;
}

/**
 * QEMU arguments for a guest's NIC on the segment (netdev id n1) and the kernel command-line
 * words its init reads. `tap` is the guest's tap for a 'tap' segment.
 */
export function privateLinkArgs(spec: { kind: SegmentKind; name: string; address: string; mtu?: number }, tap?: string): { qemu: string[]; append: string[] } {
  const mac = linkMac(spec.address);
  const mtu = spec.mtu ?? 9000;
  if (!Number.isInteger(mtu) || mtu < 576 || mtu > 65520) throw new Error(`private link MTU: 576-65520: ${mtu}`);
  let netdev: string;
  if (spec.kind === 'tap') {
    if (!tap || !/^[A-Za-z0-9-]{1,15}$/.test(tap)) throw new Error(`private link: bad tap name ${String(tap)}`);
    netdev = `tap,id=n1,ifname=${tap},script=no,downscript=no,vnet_hdr=on`;
  } else {
    if (!/^2(2[4-9]|3\d)\.\d{1,3}\.\d{1,3}\.\d{1,3}:\d{1,5}$/.test(spec.name)) throw new Error(`private link: not a multicast group host:port: ${spec.name}`);
    netdev = `socket,id=n1,mcast=${spec.name},localaddr=127.0.0.1`;
  }
  return {
    qemu: ['-netdev', netdev, '-device', `virtio-net-pci,netdev=n1,mac=${mac},host_mtu=${mtu}`],
    append: [`strata.l2mac=${mac}`, `strata.l2addr=${spec.address}`, `strata.l2mtu=${mtu}`],
  };
}

/** Interface names of this process's segment ('sl2-<pid>' and its taps 'sl2-<pid>-<n>'). */
export function segmentNames(pid: number): { bridge: string; tap(n: number): string } {
  return { bridge: `sl2-${pid}`, tap: (n) => `sl2-${pid}-${n}` };
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });

function deleteLink(name: string): void {
  try {
    ip('link', 'del', name);
  } catch {
    /* gone */
  }
}

/** Removes bridges and taps of processes that are gone (taps first: a bridge goes with its ports' membership only). */
function sweepSegments(): void {
  if (!existsSync('/sys/class/net')) return;
  const names = readdirSync('/sys/class/net').filter((n) => /^sl2-\d+(-\d+)?$/.test(n));
  const dead = (n: string) => !alive(Number(n.split('-')[1]));
  for (const n of names.filter((n) => n.split('-').length === 3 && dead(n))) deleteLink(n);
  for (const n of names.filter((n) => n.split('-').length === 2 && dead(n))) deleteLink(n);
}

function noIpv6(name: string): void {
  const path = `/proc/sys/net/ipv6/conf/${name}/disable_ipv6`;
  if (existsSync(path)) writeFileSync(path, '1');
}

let mcastSegments = 0;
let tapSegments = 0;

/**
 * Creates a private segment. 'tap' needs root (a bridge and taps); 'mcast' uses group
 * 239.77.<pid>:<port> on 127.0.0.1.
 */
export function createPrivateSegment(kind: SegmentKind): PrivateSegment {
  if (kind === 'mcast') {
    const group = `239.77.${(process.pid >> 8) & 255}.${process.pid & 255}:${20000 + ((process.pid * 7 + mcastSegments++) % 10000)}`;
    return { kind, name: group, tapFor: () => { throw new Error('an mcast segment has no taps'); }, close: () => undefined };
  }
  if (process.getuid?.() !== 0) throw new Error("a 'tap' private segment needs root (a bridge and taps); use 'mcast'");
  sweepSegments();
  if (tapSegments++ > 0) throw new Error('one tap segment per process');
  const names = segmentNames(process.pid);
  const bridge = names.bridge;
  deleteLink(bridge);
  ip('link', 'add', bridge, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0');
  noIpv6(bridge);
  ip('link', 'set', bridge, 'up');
  const taps = new Map<string, string>();
  let closed = false;
  const close = (): void => {
    if (closed) return;
    closed = true;
    process.removeListener('exit', close);
    for (const tap of taps.values()) deleteLink(tap);
    deleteLink(bridge);
  };
  process.on('exit', close);
  labLog(`private segment: bridge ${bridge} (no address)`);
  return {
    kind,
    name: bridge,
    tapFor(guestName) {
      const known = taps.get(guestName);
      if (known) return known;
      if (closed) throw new Error(`segment ${bridge} is closed`);
      const tap = names.tap(taps.size);
      deleteLink(tap);
      ip('tuntap', 'add', 'dev', tap, 'mode', 'tap', 'vnet_hdr');
      noIpv6(tap);
      ip('link', 'set', tap, 'mtu', '65520');
      ip('link', 'set', tap, 'master', bridge);
      ip('link', 'set', tap, 'up');
      taps.set(guestName, tap);
      return tap;
    },
    close,
  };
}
