// Sizes and durations as a user types and reads them.
//
// Sizes: raw bytes or binary units (KiB … PiB, case-insensitive, optional space; the bare letters
// K M G T P are binary too, as the API reads them). Decimal units (KB, GB, …) are refused: the API
// reads GB as 10^9 bytes (docs/volumes.md), and a user who types "10GB" meaning GiB would get a
// volume 7% smaller than intended without noticing. The CLI sends the API the byte count it
// computed, so what the user saw validated is exactly what is asked for.
import { UsageError } from './errors.js';

const BINARY_UNITS: Readonly<Record<string, bigint>> = {
  '': 1n, b: 1n,
  k: 1024n, kib: 1024n,
  m: 1024n ** 2n, mib: 1024n ** 2n,
  g: 1024n ** 3n, gib: 1024n ** 3n,
  t: 1024n ** 4n, tib: 1024n ** 4n,
  p: 1024n ** 5n, pib: 1024n ** 5n,
};
const DECIMAL_UNITS = new Set(['kb', 'mb', 'gb', 'tb', 'pb']);
/** An int64 on the wire. */
const MAX_SIZE_BYTES = 2n ** 63n - 1n;

/**
 * Parses "10GiB", "10 gib", "1.5GiB", "512M", "1073741824" or "1073741824B" to bytes.
 * Throws UsageError (exit 2) for anything else, zero, or a fraction of a byte.
 */
export function parseSize(text: string): bigint {
  const match = /^(\d+)(?:\.(\d+))?\s*([a-z]*)$/i.exec(text.trim());
  if (!match) throw new UsageError(`invalid size "${text}": use bytes or a binary unit, e.g. 10GiB, 512MiB, 1073741824`);
  const unitName = match[3]!.toLowerCase();
  if (DECIMAL_UNITS.has(unitName)) {
    throw new UsageError(`invalid size "${text}": decimal units are ambiguous; use ${match[3]!.slice(0, 1).toUpperCase()}iB (binary) or a number of bytes`);
  }
  const unit = BINARY_UNITS[unitName];
  if (unit === undefined) throw new UsageError(`invalid size "${text}": unknown unit "${match[3]}" (use B, KiB, MiB, GiB, TiB, PiB)`);
  const fraction = match[2] ?? '';
  const scale = 10n ** BigInt(fraction.length);
  const scaled = (BigInt(match[1]!) * scale + BigInt(fraction || '0')) * unit;
  if (scaled % scale !== 0n) throw new UsageError(`invalid size "${text}": not a whole number of bytes`);
  const bytes = scaled / scale;
  if (bytes <= 0n) throw new UsageError(`invalid size "${text}": must be positive`);
  if (bytes > MAX_SIZE_BYTES) throw new UsageError(`invalid size "${text}": too large`);
  return bytes;
}

const DISPLAY_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'] as const;

/** "10 GiB", "1.5 GiB", "512 B": the largest binary unit, at most two decimals. */
export function formatSize(bytes: bigint | string | number): string {
  let value: bigint;
  try {
    value = BigInt(bytes);
  } catch {
    return String(bytes); // not a byte count: show what the API sent
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

const DURATION_UNITS_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Whether text is a duration such as "90s", "5m", "1h" or "1.5h" (a bare number is seconds). */
export function isDuration(text: string): boolean {
  return /^\d+(?:\.\d+)?(?:ms|s|m|h|d|w)?$/.test(text.trim());
}

/** "90" (seconds), "90s", "500ms", "5m", "2h", "7d", "1w" → milliseconds. */
export function parseDurationMs(text: string, what: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?$/.exec(text.trim());
  if (!match) throw new UsageError(`invalid ${what} "${text}": use a duration such as 30s, 5m or 2h`);
  const ms = Math.round(Number(match[1]) * DURATION_UNITS_MS[match[2] ?? 's']!);
  if (!(ms > 0)) throw new UsageError(`invalid ${what} "${text}": must be positive`);
  return ms;
}

/** 2500 → "2.5 s", 90000 → "90 s". */
export function formatDurationMs(ms: number): string {
  return `${Number((ms / 1000).toFixed(1))} s`;
}
