// A replicated volume's bytes written, kept across restarts of the block layer's counter
// (docs/api.md "Measured and not measured"). The primary's agent reports what its device-mapper
// device has counted since it was made, and which device instance that is; the counter starts
// again at 0 on a new instance (a reboot, the device made again), so what the old one counted is
// added to `base` when a new one appears. Pure: the volume status store applies it to the record
// it read, in the transaction that writes the report.
import type { UserWrittenCount, VolumeStatusRecord } from '../../lib/records.js';

/** What one report says: the current instance's count (decimal string) and the instance. */
export interface WrittenReport {
  readonly bytes: string;
  readonly device: string;
}

/** Earlier instances remembered per node and volume: enough for reports that arrive late. */
const RETIRED_KEPT = 8;

/**
 * The count after a report. Never lower than before: a report of the same instance with a lower
 * count (an older report arriving late) keeps the higher one, and a late report of an earlier
 * instance changes nothing. Writes an instance counted after its last report are not counted.
 */
export function withWrittenReport(stored: UserWrittenCount | undefined, reported: WrittenReport | undefined): UserWrittenCount | undefined {
  if (!reported || !/^\d+$/.test(reported.bytes) || reported.device === '') return stored;
  if (!stored) return { device: reported.device, base: '0', last: BigInt(reported.bytes).toString(), retired: [] };
  if (reported.device === stored.device) {
    const last = BigInt(stored.last) > BigInt(reported.bytes) ? BigInt(stored.last) : BigInt(reported.bytes);
    return { ...stored, last: last.toString() };
  }
  if (stored.retired.includes(reported.device)) return stored;
  return {
    device: reported.device,
    base: (BigInt(stored.base) + BigInt(stored.last)).toString(),
    last: BigInt(reported.bytes).toString(),
    retired: [...stored.retired, stored.device].slice(-RETIRED_KEPT),
  };
}

/** A node's total: what earlier instances counted plus the current one's last count. */
export function writtenOf(count: UserWrittenCount | undefined): bigint {
  if (!count || !/^\d+$/.test(count.base) || !/^\d+$/.test(count.last)) return 0n;
  return BigInt(count.base) + BigInt(count.last);
}

/** A volume's bytes written: the sum over every node that was ever its primary. */
export function volumeWritten(statuses: readonly Pick<VolumeStatusRecord, 'userWritten'>[]): bigint {
  return statuses.reduce((sum, s) => sum + writtenOf(s.userWritten), 0n);
}
