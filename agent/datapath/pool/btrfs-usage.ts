// The figures of `btrfs filesystem usage -b <mount>` the pool report needs. btrfs sits on one md
// device, so "Device size" is the md array as the filesystem knows it (smaller than the array
// until `btrfs filesystem resize max`), and the data profile lines say how much data it holds.
export interface BtrfsUsage {
  /** Size of the filesystem's device(s). */
  readonly deviceSize: bigint;
  /** Bytes of the device(s) the filesystem does not use yet (grown array before the resize). */
  readonly deviceSlack: bigint;
  /** Bytes of data extents (after compression; shared extents once). */
  readonly dataUsed: bigint;
  /** Bytes of metadata (before the metadata profile's copies). */
  readonly metadataUsed: bigint;
  /** What more data fits: free space in data chunks plus unallocated space over the data ratio. */
  readonly freeEstimated: bigint;
}

export function parseBtrfsUsage(stdout: string): BtrfsUsage {
  const overall = (label: string): bigint => {
    const line = stdout.split('\n').find((l) => l.trim().startsWith(`${label}:`));
    const value = line?.slice(line.indexOf(':') + 1).trim().split(/\s+/)[0];
    if (value === undefined || !/^\d+$/.test(value)) throw new Error(`btrfs filesystem usage: no "${label}" figure`);
    return BigInt(value);
  };
  // "Data,single: Size:37748736, Used:20971520 (55.56%)"; several lines while a profile converts.
  const profileUsed = (kind: string): bigint =>
    stdout
      .split('\n')
      .filter((l) => l.startsWith(`${kind},`))
      .reduce((sum, l) => sum + BigInt(/Used:(\d+)/.exec(l)?.[1] ?? '0'), 0n);
  return {
    deviceSize: overall('Device size'),
    deviceSlack: overall('Device slack'),
    dataUsed: profileUsed('Data'),
    metadataUsed: profileUsed('Metadata'),
    freeEstimated: overall('Free (estimated)'),
  };
}
