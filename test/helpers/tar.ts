// Test support: reads a tar archive (ustar and GNU long names) into its entries, to check what
// a bundle holds without trusting the code that wrote it.
export interface TarFile {
  readonly path: string;
  readonly size: number;
  readonly data: Buffer;
}

export function readTar(archive: Buffer): TarFile[] {
  const files: TarFile[] = [];
  let longName: string | undefined;
  for (let offset = 0; offset + 512 <= archive.length; ) {
    const header = archive.subarray(offset, offset + 512);
    if (header.every((b) => b === 0)) break;
    const field = (start: number, length: number) => header.subarray(start, start + length).toString('latin1').replace(/\0.*$/s, '');
    const sizeField = header.subarray(124, 136);
    const size = (sizeField[0] as number) & 0x80 ? Number(sizeField.readBigUInt64BE(4)) : parseInt(field(124, 12).trim() || '0', 8);
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 0x20 : (header[i] as number);
    if (sum !== parseInt(field(148, 8).trim(), 8)) throw new Error(`bad tar header checksum at ${offset}`);
    const type = field(156, 1);
    const data = archive.subarray(offset + 512, offset + 512 + size);
    if (data.length !== size) throw new Error(`truncated tar entry at ${offset}`);
    offset += 512 + Math.ceil(size / 512) * 512;
    if (type === 'L') {
      longName = data.toString('utf8').replace(/\0+$/, '');
      continue;
    }
    const prefix = field(345, 155);
    const path = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
    longName = undefined;
    files.push({ path, size, data: Buffer.from(data) });
  }
  return files;
}
