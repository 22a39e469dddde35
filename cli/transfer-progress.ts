// Progress of a download whose size is not known in advance (`strata bundle`: the bundle is built
// while it streams, so there is no total to show a percentage of). On a terminal: a bar redrawn in
// place four times a second, an indeterminate one (a block sweeping back and forth, as wget shows
// for a stream of unknown length) with the bytes received, the time since the request and the
// rate; the line is cleared at the end. Anywhere else (a pipe, a log file): a plain line at once
// and then every 5 s, nothing redrawn, no control characters.
import { formatDurationMs, formatSize } from './units.js';

/** Where progress is written (stderr): a terminal, or not. */
export interface ProgressOutput {
  readonly isTTY?: boolean;
  /** The terminal's width; absent: 80. */
  readonly columns?: number;
  write(text: string): unknown;
}

export interface TransferState {
  /** What is received, e.g. the file name. */
  readonly name: string;
  readonly bytes: number;
  readonly elapsedMs: number;
}

export const REDRAW_MS = 250;
export const LINE_EVERY_MS = 5000;
const BAR_WIDTH = 20;
const BLOCK = '<=>';

/** "12.3 MiB in 7 s (1.7 MiB/s)" */
export function transferSummary(state: Pick<TransferState, 'bytes' | 'elapsedMs'>): string {
  const rate = Math.round((state.bytes * 1000) / Math.max(state.elapsedMs, 1));
  return `${formatSize(BigInt(state.bytes))} in ${formatDurationMs(state.elapsedMs)} (${formatSize(BigInt(rate))}/s)`;
}

/** The plain line, for output that is not a terminal. */
export function progressLine(state: TransferState): string {
  return `strata: receiving ${state.name}: ${transferSummary(state)}`;
}

/**
 * One frame of the terminal bar: `strata: receiving NAME [    <=>         ] 12.3 MiB in 7 s (1.7 MiB/s)`.
 * The block moves one cell a frame and turns back at either end. Never wider than `columns - 1`
 * (the cursor's last cell), the name shortened from its start when it must be.
 */
export function progressBar(state: TransferState, frame: number, columns = 80): string {
  const span = BAR_WIDTH - BLOCK.length;
  const step = frame % (2 * span);
  const at = step <= span ? step : 2 * span - step;
  const bar = `[${' '.repeat(at)}${BLOCK}${' '.repeat(span - at)}]`;
  const tail = ` ${bar} ${transferSummary(state)}`;
  const head = 'strata: receiving ';
  const room = Math.max(columns - 1 - head.length - tail.length, 0);
  const name = state.name.length <= room ? state.name : room > 1 ? `…${state.name.slice(state.name.length - room + 1)}` : '';
  return `${head}${name}${tail}`.slice(0, Math.max(columns - 1, 0));
}

/** Reports a transfer's progress on `out` until stopped; `received` is called as bytes arrive. */
export class TransferProgress {
  private bytes = 0;
  private frame = 0;
  private lastLineAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly startedAt: number;
  private readonly now: () => number;

  /** `startedAt`: when the transfer was asked for (default: now); `now`: the clock. */
  constructor(
    private readonly out: ProgressOutput,
    private readonly name: string,
    options: { readonly startedAt?: number; readonly now?: () => number } = {},
  ) {
    this.now = options.now ?? Date.now;
    this.startedAt = options.startedAt ?? this.now();
  }

  /** Ticks every REDRAW_MS until stop(). */
  start(): this {
    this.timer = setInterval(() => this.tick(), REDRAW_MS);
    return this;
  }

  received(bytes: number): void {
    this.bytes += bytes;
  }

  state(): TransferState {
    return { name: this.name, bytes: this.bytes, elapsedMs: this.now() - this.startedAt };
  }

  /** A terminal: the next frame in place. Otherwise: a line when the last is LINE_EVERY_MS old (the first at once). */
  tick(): void {
    if (this.out.isTTY) {
      this.out.write(`\r${progressBar(this.state(), this.frame++, this.out.columns)}\u001b[K`);
      return;
    }
    const now = this.now();
    if (this.lastLineAt !== undefined && now - this.lastLineAt < LINE_EVERY_MS) return;
    this.lastLineAt = now;
    this.out.write(`${progressLine(this.state())}\n`);
  }

  /** Stops ticking; a terminal's bar is cleared (the result is printed after it). */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    if (this.out.isTTY) this.out.write('\r\u001b[K');
  }
}
