// A minimal writer of the "newc" cpio format the kernel unpacks as initramfs
// (Documentation/driver-api/early-userspace/buffer-format.rst). Deterministic: fixed inode
// numbers, uid/gid 0, mtime 0.

export type CpioEntry =
  | { readonly type: 'dir'; readonly path: string; readonly mode?: number }
  | { readonly type: 'file'; readonly path: string; readonly data: Buffer; readonly mode?: number }
  | { readonly type: 'symlink'; readonly path: string; readonly target: string }
  | { readonly type: 'chardev'; readonly path: string; readonly major: number; readonly minor: number; readonly mode?: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

function hex8(n: number): string {
  return (n >>> 0).toString(16).padStart(8, '0');
}

function pad4(length: number): Buffer {
  return Buffer.alloc((4 - (length % 4)) % 4);
}

function record(ino: number, mode: number, data: Buffer, name: string, rdev: [number, number] = [0, 0], nlink = 1): Buffer[] {
  const nameBytes = Buffer.from(`${name}\0`);
  const header = Buffer.from(
    '070701' +
      [ino, mode, 0, 0, nlink, 0, data.length, 0, 0, rdev[0], rdev[1], nameBytes.length, 0].map(hex8).join(''),
    'latin1',
  );
  return [header, nameBytes, pad4(header.length + nameBytes.length), data, pad4(data.length)];
}

/** Serializes entries (parents before children: directories are created in the given order). */
export function writeCpio(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let ino = 1;
  for (const entry of entries) {
    const name = entry.path.replace(/^\/+/, '');
    if (name === '') continue;
    switch (entry.type) {
      case 'dir':
        parts.push(...record(ino++, S_IFDIR | (entry.mode ?? 0o755), Buffer.alloc(0), name, [0, 0], 2));
        break;
      case 'file':
        parts.push(...record(ino++, S_IFREG | (entry.mode ?? 0o644), entry.data, name));
        break;
      case 'symlink':
        parts.push(...record(ino++, S_IFLNK | 0o777, Buffer.from(entry.target), name));
        break;
      case 'chardev':
        parts.push(...record(ino++, S_IFCHR | (entry.mode ?? 0o600), Buffer.alloc(0), name, [entry.major, entry.minor]));
        break;
    }
  }
  parts.push(...record(0, 0, Buffer.alloc(0), 'TRAILER!!!', [0, 0], 1));
  return Buffer.concat(parts);
}
