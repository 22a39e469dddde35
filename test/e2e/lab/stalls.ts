// What the guests' kernels said about stalled I/O while a measurement ran (docs/e2e.md, "Stalls").
//
// This emulated bed (QEMU TCG on 2 cores) at times leaves a storage guest's own NVMe drive with
// commands outstanding until the guest's driver times them out and resets the drive; an
// initiator waiting through the target then times out its own commands or misses keep-alives and
// reconnects. A rate measured across such a minute measures the bed, not the product. A run's
// wall time catches a stall that straddles its end only (fio's time-based runs end on time), so
// a measurement reads the kernels' logs too: every guest's uptime before, the lines of its log
// after that instant which say a command timed out, a controller was reset, a keep-alive expired
// or a path reconnected.
import type { Guest } from './guest.js';

/**
 * Kernel log lines that mean the I/O path stood still (nvme host, nvmet, the guest's drive). A
 * path that keeps failing to reconnect is not one: it carries no I/O (its failing attempts are
 * logged every second, for as long as its node is gone); the path that carried I/O and failed
 * logged a timeout or a keep-alive expiry first.
 */
export const STALL_LINE = /nvme.*(timeout|reset(ting)? controller|keep-alive timer|reconnected)|I\/O error/i;

export interface KernelClock {
  readonly guest: Guest;
  /** Seconds since the guest booted (its kernel log's clock), when the mark was taken. */
  readonly uptime: number;
}

/** Each guest's kernel clock now (guests that do not answer within 10 s are left out). */
export async function markKernelLogs(guests: readonly Guest[]): Promise<KernelClock[]> {
  const marks = await Promise.all(
    guests.map(async (guest) => {
      const r = await guest.run(['cat', '/proc/uptime'], { timeoutMs: 10_000 }).catch(() => undefined);
      const uptime = r && r.code === 0 ? Number(r.stdout.split(/\s+/)[0]) : NaN;
      return Number.isFinite(uptime) ? { guest, uptime } : undefined;
    }),
  );
  return marks.filter((m): m is KernelClock => m !== undefined);
}

/** The stall lines each marked guest's kernel logged since its mark, prefixed with the guest's name. */
export async function stallLinesSince(marks: readonly KernelClock[]): Promise<string[]> {
  const found = await Promise.all(
    marks.map(async ({ guest, uptime }) => {
      const r = await guest.run(['dmesg'], { timeoutMs: 15_000 }).catch(() => undefined);
      if (!r || r.code !== 0) return [];
      return parseKernelLog(r.stdout)
        .filter((l) => l.seconds >= uptime - 1 && STALL_LINE.test(l.text))
        .map((l) => `${guest.name} [${l.seconds.toFixed(1)}] ${l.text}`);
    }),
  );
  return found.flat();
}

/** `dmesg` lines with their timestamps (lines without one are left out). */
export function parseKernelLog(text: string): { seconds: number; text: string }[] {
  const lines: { seconds: number; text: string }[] = [];
  for (const line of text.split('\n')) {
    const m = /^\[\s*(\d+\.\d+)\]\s?(.*)$/.exec(line);
    if (m) lines.push({ seconds: Number(m[1]), text: m[2]! });
  }
  return lines;
}
