// Snapshot retention, run by the active cluster manager only: an Available snapshot whose
// creationTime + retentionTime has passed goes Deleting through the same path as DELETE
// (requestDeletion: state rules, clone rule, one conditional transaction). A snapshot that
// still has live clones is kept; an event says why once, and it is looked at again later.
//
// Cost. The loop keeps, in memory, when each retained snapshot is next due (its expiry, or the
// next clone re-check), built from the snapshots the process's watched state holds and kept
// current by its changes (no watch of its own). It sleeps until the earliest due time (at most maxSleepMs,
// so a clock step is noticed), so an idle cluster does no etcd reads; a pass handles at most
// PASS_BATCH snapshots before yielding. A full re-list happens every resyncMs and whenever the
// state was read again, as a safety net.
//
// Two instances running it at once (a leadership hand-over) are harmless: every transition is
// a compare-and-swap on the snapshot's revision, so exactly one of them moves it and the
// other sees Deleting and lets it go. Only the winner records SnapshotExpired.
import type { Logger } from '../../lib/logger.js';
import type { SnapshotRecord } from '../../lib/records.js';
import type { EventInput, EventRecorder } from '../events/event-recorder.js';
import type { VolumeUsage } from '../volumes/volume-dependencies.js';
import { formatRetention } from './snapshot-schema.js';
import { requestDeletion, snapshotEvent } from './snapshot-service.js';
import type { SnapshotStore, SnapshotWatch, WatchedSnapshots } from './snapshot-store.js';

export interface SnapshotRetentionOptions {
  readonly store: SnapshotStore;
  /** The snapshots in the process's watched state: the due times follow them. */
  readonly watched: WatchedSnapshots;
  readonly logger: Logger;
  readonly events: EventRecorder;
  /** Live clones of a snapshot (volumes' VolumeUsage): a snapshot with clones is kept. */
  readonly clones: Pick<VolumeUsage, 'countClonedFrom'>;
  /** Milliseconds since the epoch (tests inject a clock). */
  readonly now?: () => number;
  /** Longest sleep between looks at the clock; default 60 s. */
  readonly maxSleepMs?: number;
  /** How long an expired snapshot kept for its clones waits before the next look; default 60 s. */
  readonly cloneRecheckMs?: number;
  /** Full re-list interval (safety net behind the state's changes); default 10 min. */
  readonly resyncMs?: number;
}

export interface SnapshotRetention {
  stop(): Promise<void>;
}

/** Snapshots expired per pass before the loop yields to the event loop. */
const PASS_BATCH = 100;
/** Wait after an etcd error before trying a snapshot (or the re-list) again. */
const ERROR_BACKOFF_MS = 5000;

export function startSnapshotRetention(options: SnapshotRetentionOptions): SnapshotRetention {
  const loop = new RetentionLoop(options);
  loop.start();
  return { stop: () => loop.stop() };
}

/** When a snapshot's retention ends (ms since the epoch); undefined when it is kept forever. */
export function expiryOf(snapshot: Pick<SnapshotRecord, 'creationTime' | 'retentionSeconds'>): number | undefined {
  if (!(snapshot.retentionSeconds > 0)) return undefined;
  const created = Date.parse(snapshot.creationTime);
  return Number.isNaN(created) ? undefined : created + snapshot.retentionSeconds * 1000;
}

class RetentionLoop {
  private readonly store: SnapshotStore;
  private readonly now: () => number;
  private readonly maxSleepMs: number;
  private readonly cloneRecheckMs: number;
  private readonly resyncMs: number;
  /** Retained Available snapshots: when each is next due (ms). */
  private readonly due = new Map<string, number>();
  /** Expired snapshots kept for their clones: when to look again. */
  private readonly deferredUntil = new Map<string, number>();
  /** Deferrals already announced by an event (one event per snapshot, not one per look). */
  private readonly deferralAnnounced = new Set<string>();
  private watcher: SnapshotWatch | undefined;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private nextResyncAt = Number.NEGATIVE_INFINITY;
  private pass: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly options: SnapshotRetentionOptions) {
    this.store = options.store;
    this.now = options.now ?? Date.now;
    this.maxSleepMs = options.maxSleepMs ?? 60_000;
    this.cloneRecheckMs = options.cloneRecheckMs ?? 60_000;
    this.resyncMs = options.resyncMs ?? 600_000;
  }

  start(): void {
    this.wake(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.pass;
    await this.watcher?.cancel().catch(() => undefined);
    this.watcher = undefined;
  }

  /** Runs a pass after `delayMs` unless one is already due sooner. */
  private wake(delayMs: number): void {
    if (this.stopped) return;
    const at = this.now() + delayMs;
    if (this.timer && at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Number.POSITIVE_INFINITY;
      this.runPass();
    }, Math.max(0, delayMs));
    this.timer.unref();
  }

  private runPass(): void {
    if (this.stopped || this.pass) return;
    this.pass = this.passOnce()
      .catch((err: unknown) => this.options.logger.warn({ err }, 'snapshot retention pass failed'))
      .finally(() => {
        this.pass = undefined;
        this.scheduleNext();
      });
  }

  private scheduleNext(): void {
    let next = this.nextResyncAt;
    for (const at of this.due.values()) if (at < next) next = at;
    this.wake(Math.min(Math.max(next - this.now(), 0), this.maxSleepMs));
  }

  private async passOnce(): Promise<void> {
    if (this.now() >= this.nextResyncAt) {
      try {
        await this.resync();
      } catch (err) {
        this.options.logger.warn({ err }, 'snapshot retention cannot list snapshots; retrying');
        this.nextResyncAt = this.now() + ERROR_BACKOFF_MS;
        return;
      }
    }
    const now = this.now();
    const ready = [...this.due].filter(([, at]) => at <= now).sort((a, b) => a[1] - b[1]).slice(0, PASS_BATCH);
    for (const [uuid] of ready) {
      if (this.stopped) return;
      try {
        await this.expire(uuid);
      } catch (err) {
        this.options.logger.warn({ err, snapshotUUID: uuid }, 'snapshot retention could not expire a snapshot; will retry');
        if (this.due.has(uuid)) this.due.set(uuid, this.now() + ERROR_BACKOFF_MS);
      }
    }
  }

  /** Rebuilds the due map from the state's snapshots and follows its changes from then on. */
  private async resync(): Promise<void> {
    await this.watcher?.cancel().catch(() => undefined);
    this.watcher = undefined;
    const { snapshots, watch } = await this.options.watched.follow({
      put: (record) => this.track(record),
      deleted: (uuid) => this.forget(uuid),
      reloaded: () => {
        this.nextResyncAt = this.now();
        this.wake(0);
      },
    });
    if (this.stopped) {
      await watch.cancel().catch(() => undefined);
      return;
    }
    this.watcher = watch;
    this.due.clear();
    for (const s of snapshots) this.track(s);
    for (const uuid of [...this.deferredUntil.keys()]) if (!this.due.has(uuid)) this.forget(uuid);
    this.nextResyncAt = this.now() + this.resyncMs;
  }

  /** Records when a snapshot is next due, from its latest record; wakes the loop if sooner. */
  private track(snapshot: SnapshotRecord): void {
    const expiry = snapshot.state === 'Available' ? expiryOf(snapshot) : undefined;
    if (expiry === undefined) {
      this.forget(snapshot.UUID);
      return;
    }
    const at = Math.max(expiry, this.deferredUntil.get(snapshot.UUID) ?? 0);
    this.due.set(snapshot.UUID, at);
    if (!this.pass) this.wake(Math.min(Math.max(at - this.now(), 0), this.maxSleepMs));
  }

  private forget(uuid: string): void {
    this.due.delete(uuid);
    this.deferredUntil.delete(uuid);
    this.deferralAnnounced.delete(uuid);
  }

  private async expire(uuid: string): Promise<void> {
    const current = await this.store.get(uuid);
    const expiry = current && current.record.state === 'Available' ? expiryOf(current.record) : undefined;
    if (!current || expiry === undefined) {
      this.forget(uuid);
      return;
    }
    const now = this.now();
    if (expiry > now) {
      this.due.set(uuid, expiry);
      return;
    }
    const snapshot = current.record;
    const outcome = await requestDeletion(this.store, this.options.clones, current);
    switch (outcome.kind) {
      case 'deleting':
        this.forget(uuid);
        await this.record(
          snapshotEvent('SnapshotExpired', 'CM', 'Info', snapshot, `snapshot ${snapshot.name} (${snapshot.UUID}) of volume ${snapshot.sourceVolumeName} reached its retentionTime ${formatRetention(snapshot.retentionSeconds)} (created ${snapshot.creationTime}); deleting it`, 'Deleting'),
        );
        return;
      case 'has-clones': {
        const until = now + this.cloneRecheckMs;
        this.deferredUntil.set(uuid, until);
        this.due.set(uuid, until);
        if (!this.deferralAnnounced.has(uuid)) {
          this.deferralAnnounced.add(uuid);
          await this.record(
            snapshotEvent('SnapshotExpiryDeferred', 'CM', 'Low', snapshot, `snapshot ${snapshot.name} (${snapshot.UUID}) reached its retentionTime ${formatRetention(snapshot.retentionSeconds)} but ${outcome.clones} volume(s) cloned from it still exist; it is kept until they are deleted`, 'Kept'),
          );
        }
        return;
      }
      case 'changed':
        // Someone else wrote it meanwhile: look again at once with the new record.
        this.due.set(uuid, now);
        return;
      default:
        this.forget(uuid);
    }
  }

  private async record(event: EventInput): Promise<void> {
    try {
      await this.options.events.record(event);
    } catch (err) {
      this.options.logger.warn({ err, eventName: event.eventName }, 'could not record event');
    }
  }
}
