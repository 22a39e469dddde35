// Sizes and durations as a user types and reads them.
//
// Sizes: the one parser of lib/contract/size.ts, the forms the API reads with the same meaning
// (bytes, binary units KiB … PiB and the bare letters K M G T P, decimal units KB … PB as powers
// of 1000; case-insensitive, optional space), and also a fractional amount such as "1.5GiB"
// when it comes to whole bytes. The CLI sends the API the byte count it computed, so what the
// user saw validated is exactly what is asked for.
import { parseSize as parseSizeText } from '../lib/contract/size.js';
import { UsageError } from './errors.js';

export { formatSize } from '../lib/contract/size.js';

/** Parses "10GiB", "10 gib", "1.5GiB", "512M", "10GB" or "1073741824" to bytes; UsageError (exit 2) otherwise. */
export function parseSize(text: string): bigint {
  try {
    return parseSizeText(text, { fractions: true });
  } catch (err) {
    throw new UsageError(`invalid size "${text}": ${(err as Error).message}`);
  }
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
