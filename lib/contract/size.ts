// Sizes as clients write them (wire-conventions §2) and as people read them: one parser for the
// API, the CLI and every other reader, one formatter. docs/decisions.md records why decimal
// units are powers of 1000.

/** Units, lower-case: binary (`kib` … `pib`, and the bare letters `k m g t p`) are powers of
 * 1024; decimal (`kb` … `pb`) are powers of 1000, as their SI names say; `b` or none is bytes. */
const UNITS: Readonly<Record<string, bigint>> = {
  '': 1n, b: 1n,
  k: 1024n, kb: 1000n, kib: 1024n,
  m: 1024n ** 2n, mb: 1000n ** 2n, mib: 1024n ** 2n,
  g: 1024n ** 3n, gb: 1000n ** 3n, gib: 1024n ** 3n,
  t: 1024n ** 4n, tb: 1000n ** 4n, tib: 1024n ** 4n,
  p: 1024n ** 5n, pb: 1000n ** 5n, pib: 1024n ** 5n,
};
const UNIT_NAMES = 'b, kib, mib, gib, tib, pib, kb, mb, gb, tb, pb';

/** The largest size we accept: 2^63-1 bytes (an int64 on the wire). */
export const MAX_SIZE_BYTES = 2n ** 63n - 1n;

export interface ParseSizeOptions {
  /**
   * Accept a fractional amount ("1.5GiB") when it comes to whole bytes. Off for the wire
   * (the spec: "a positive integer amount"); the CLI, which sends the byte count it computed,
   * turns it on.
   */
  readonly fractions?: boolean;
}

/**
 * Parses a size to bytes: "1073741824", "1073741824b", "1 gib", "1GiB", "1G", "1GB" (10^9);
 * case-insensitive, optional space; a JSON number is bytes. Throws an Error whose message
 * completes "size …" (e.g. "must be positive") for zero, negatives, fractions of a byte, unknown
 * units, anything above MAX_SIZE_BYTES and non-sizes.
 */
export function parseSize(input: unknown, options: ParseSizeOptions = {}): bigint {
  let text: string;
  if (typeof input === 'number') {
    if (!Number.isSafeInteger(input)) throw new Error('must be a whole number of bytes');
    text = String(input);
  } else if (typeof input === 'string') {
    text = input.trim().toLowerCase();
  } else {
    throw new Error('must be a size such as "10GiB" or a number of bytes');
  }
  const match = (options.fractions ? /^(\d+)(?:\.(\d+))?\s*([a-z]*)$/ : /^(\d+)()\s*([a-z]*)$/).exec(text);
  if (!match) throw new Error(`must be a positive ${options.fractions ? '' : 'whole '}number with an optional unit (${UNIT_NAMES})`);
  const unit = UNITS[match[3]!];
  if (unit === undefined) throw new Error(`unknown size unit "${match[3]}"`);
  const fraction = match[2] ?? '';
  const scale = 10n ** BigInt(fraction.length);
  const scaled = (BigInt(match[1]!) * scale + BigInt(fraction || '0')) * unit;
  if (scaled % scale !== 0n) throw new Error('is not a whole number of bytes');
  const bytes = scaled / scale;
  if (bytes <= 0n) throw new Error('must be positive');
  if (bytes > MAX_SIZE_BYTES) throw new Error('is too large');
  return bytes;
}

const DISPLAY_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'] as const;

/** "10 GiB", "1.5 GiB", "512 B": the largest binary unit, at most two decimals. */
export function formatSize(bytes: bigint | string | number): string {
  let value: bigint;
  try {
    value = BigInt(bytes);
  } catch {
    return String(bytes); // not a byte count: show it as it came
  }
  if (value < 1024n) return `${value} B`;
  let unitIndex = 0;
  let divisor = 1n;
  while (unitIndex < DISPLAY_UNITS.length - 1 && value >= divisor * 1024n) {
    divisor *= 1024n;
    unitIndex++;
  }
  const hundredths = (value * 100n + divisor / 2n) / divisor;
  const whole = hundredths / 100n;
  const rest = hundredths % 100n;
  const decimals = rest === 0n ? '' : `.${rest.toString().padStart(2, '0').replace(/0$/, '')}`;
  return `${whole}${decimals} ${DISPLAY_UNITS[unitIndex]}`;
}
