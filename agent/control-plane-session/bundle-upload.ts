// One diagnostic bundle going up the control-plane session (CollectBundle → BundleChunk): each
// entry is a header and its bytes in pieces of BUNDLE_PIECE_BYTES, and each piece waits for a
// credit the control plane grants (BundleCredit) as its client takes the bytes. The agent thus
// never has more than one piece in memory and the session never more than the granted window,
// however large the bundle and however slow the client. Cancel (BundleCancel, or the session's
// end) aborts the signal the collector's commands run under.
import { promises as fs } from 'node:fs';
import type { BundleChunk } from '../../proto/gen/strata/v1/BundleChunk.js';
import type { BundleSink } from '../diagnostics/bundle-collector.js';

export const BUNDLE_PIECE_BYTES = 64 * 1024;

export class BundleCancelled extends Error {}

export class BundleUpload implements BundleSink {
  private credit = 0;
  private wake: (() => void) | undefined;
  private readonly controller = new AbortController();

  constructor(
    readonly id: string,
    private readonly write: (chunk: BundleChunk) => void,
  ) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  grant(chunks: number): void {
    this.credit += chunks;
    this.wake?.();
  }

  cancel(reason: string): void {
    if (!this.controller.signal.aborted) this.controller.abort(new BundleCancelled(reason));
    this.wake?.();
  }

  async file(path: string, filePath: string, size: number, mtimeSeconds: number): Promise<void> {
    this.check();
    const handle = await fs.open(filePath, 'r');
    try {
      this.write({ bundle_id: this.id, entry: { path, size: String(size), mode: 0o644, mtime_seconds: String(mtimeSeconds) } });
      for (let sent = 0; sent < size; ) {
        await this.spendCredit();
        const piece = Buffer.alloc(Math.min(BUNDLE_PIECE_BYTES, size - sent));
        // A file that shrank since its size was taken (a log rotated) keeps its declared size with zeros.
        await handle.read(piece, 0, piece.length, sent);
        this.write({ bundle_id: this.id, data: piece });
        sent += piece.length;
      }
    } finally {
      await handle.close();
    }
  }

  end(error: string): void {
    this.write({ bundle_id: this.id, end: { error } });
  }

  private check(): void {
    if (this.controller.signal.aborted) throw this.controller.signal.reason as Error;
  }

  private async spendCredit(): Promise<void> {
    for (;;) {
      this.check();
      if (this.credit > 0) {
        this.credit -= 1;
        return;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}
