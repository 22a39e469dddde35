// A QoS policy's limits as the I/O path enforces them (issue 18, docs/decisions.md "QoS is
// enforced by a ublk server of ours"): the control plane turns a policy and a volume's size into
// these four numbers and puts them in the volume's assignment; the agent hands them to the
// volume's strata-ublk server unchanged. One conversion, here, so the API, the controller and the
// agent cannot disagree about what "1 MB/s" or "10 IOPS per GB" means.
//
// Units, decided once: MB/s is 10^6 bytes per second and GB is 10^9 bytes, as lib/contract/size.ts
// reads the decimal units. A per-GB limit scales with the volume's size in GB, rounded down, but
// never below 1 I/O per second: a limit that is set must not become "unlimited" (0) because the
// volume is small.

/** A volume's limits in the server's units; 0 = unlimited. */
export interface QosLimits {
  readonly readIops: number;
  readonly writeIops: number;
  readonly readBytesPerSecond: number;
  readonly writeBytesPerSecond: number;
}

export const UNLIMITED: QosLimits = Object.freeze({ readIops: 0, writeIops: 0, readBytesPerSecond: 0, writeBytesPerSecond: 0 });

/** One policy's limit as stored: one kind, a write and a read value (0 = unlimited). */
export interface PolicyLimit {
  readonly kind: 'limitIOPS' | 'limitBw' | 'limitIOPSPerGB';
  readonly write: number;
  readonly read: number;
}

export const BYTES_PER_MB = 1_000_000;
export const BYTES_PER_GB = 1_000_000_000n;

export function isUnlimited(limits: QosLimits): boolean {
  return limits.readIops === 0 && limits.writeIops === 0 && limits.readBytesPerSecond === 0 && limits.writeBytesPerSecond === 0;
}

export function sameLimits(a: QosLimits, b: QosLimits): boolean {
  return a.readIops === b.readIops && a.writeIops === b.writeIops && a.readBytesPerSecond === b.readBytesPerSecond && a.writeBytesPerSecond === b.writeBytesPerSecond;
}

/** IOPS per GB × the volume's size in GB (rounded down, at least 1 when the limit is set). */
function perGb(limitPerGb: number, sizeBytes: bigint): number {
  if (limitPerGb === 0) return 0;
  const scaled = (BigInt(limitPerGb) * sizeBytes) / BYTES_PER_GB;
  const capped = scaled > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(scaled);
  return Math.max(1, capped);
}

/** The limits a volume of `sizeBytes` gets from `limit`. */
export function volumeQosLimits(limit: PolicyLimit, sizeBytes: bigint): QosLimits {
  switch (limit.kind) {
    case 'limitIOPS':
      return { readIops: limit.read, writeIops: limit.write, readBytesPerSecond: 0, writeBytesPerSecond: 0 };
    case 'limitBw':
      return { readIops: 0, writeIops: 0, readBytesPerSecond: limit.read * BYTES_PER_MB, writeBytesPerSecond: limit.write * BYTES_PER_MB };
    case 'limitIOPSPerGB':
      return { readIops: perGb(limit.read, sizeBytes), writeIops: perGb(limit.write, sizeBytes), readBytesPerSecond: 0, writeBytesPerSecond: 0 };
  }
}
