// The few bytes of the tar format the diagnostic bundle needs (POSIX ustar, with a GNU long-name
// entry for paths over 100 bytes): a header before each file, zero padding to 512 bytes after
// it, two zero blocks at the end. GNU tar, bsdtar and Python's tarfile read it.
const BLOCK = 512;

export const TAR_END = Buffer.alloc(2 * BLOCK);

export interface TarEntry {
  readonly path: string;
  readonly size: number;
  readonly mode?: number;
  readonly mtimeSeconds?: number;
}

/** The header block(s) of a regular file entry. */
export function tarHeader(entry: TarEntry): Buffer {
  const name = Buffer.from(entry.path, 'utf8');
  if (name.length <= 100) return headerBlock(name, entry.size, entry.mode ?? 0o644, entry.mtimeSeconds ?? 0, '0');
  // GNU: a '././@LongLink' entry of type L whose data is the full name, then the real header.
  const longName = Buffer.concat([name, Buffer.alloc(1)]);
  return Buffer.concat([
    headerBlock(Buffer.from('././@LongLink'), longName.length, 0o644, 0, 'L'),
    longName,
    tarPadding(longName.length),
    headerBlock(name.subarray(0, 100), entry.size, entry.mode ?? 0o644, entry.mtimeSeconds ?? 0, '0'),
  ]);
}

/** The zero bytes that complete a file of `size` bytes to whole blocks. */
export function tarPadding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
}

function headerBlock(name: Buffer, size: number, mode: number, mtime: number, type: string): Buffer {
  const block = Buffer.alloc(BLOCK);
  name.copy(block, 0, 0, Math.min(name.length, 100));
  octal(block, 100, 8, mode);
  octal(block, 108, 8, 0); // uid
  octal(block, 116, 8, 0); // gid
  octal(block, 124, 12, size);
  octal(block, 136, 12, Math.max(0, Math.floor(mtime)));
  block.fill(0x20, 148, 156); // checksum counted as spaces
  block.write(type, 156, 'latin1');
  block.write('ustar\0', 257, 'latin1');
  block.write('00', 263, 'latin1');
  block.write('root', 265, 'latin1');
  block.write('root', 297, 'latin1');
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return block;
}

function octal(block: Buffer, offset: number, length: number, value: number): void {
  if (value >= 8 ** (length - 1)) {
    // GNU base-256 for what octal cannot hold (a file of 8 GiB or more).
    block[offset] = 0x80;
    block.writeBigUInt64BE(BigInt(value), offset + length - 8);
    return;
  }
  block.write(`${value.toString(8).padStart(length - 1, '0')}\0`, offset, 'latin1');
}
