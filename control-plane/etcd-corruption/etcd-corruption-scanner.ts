// The active cluster manager's half of the etcd corruption scan: it watches the scan request
// (etcd-corruption-store.ts) and, for each request the last
// result does not answer, scans (etcd-hash-scan.ts) and records the result with its events in
// one fenced transaction: EtcdCorruptionScanStarted when it starts, then EtcdCorruptionScanCompleted,
// and EtcdCorruptionDetected when the scan finds disagreeing members that the previous result did
// not (or other ones), EtcdCorruptionResolved when a scan finds none after one that did.
import type { Logger } from '../../lib/logger.js';
import type { ClusterRecord } from '../../lib/records.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import { catalogued } from '../events/event-catalogue.js';
import type { EventName } from '../events/event-catalogue.js';
import type { HashScan } from './etcd-hash-scan.js';
import type { EtcdCorruptionStatus, EtcdCorruptionStore } from './etcd-corruption-store.js';

export interface EtcdCorruptionScannerDeps {
  /** Writes fenced by the leader's term (the composition root gives it the fenced write). */
  readonly store: EtcdCorruptionStore;
  readonly events: EventPreparer;
  readonly cluster: Pick<ClusterRecord, 'UUID' | 'clusterName'>;
  readonly logger: Logger;
  /** How often the request is re-read besides the watch (default 5 s). */
  readonly pollMs?: number;
  /** Hashes every etcd member (etcd-hash-scan.ts). */
  readonly scan: () => Promise<HashScan>;
}

export async function startEtcdCorruptionScanner(deps: EtcdCorruptionScannerDeps): Promise<{ stop(): Promise<void> }> {
  let stopped = false;
  let wake: (() => void) | undefined;
  const watcher = deps.store.watchRequests(() => wake?.());
  const loop = (async () => {
    while (!stopped) {
      try {
        await runPending(deps);
      } catch (err) {
        deps.logger.warn({ err: (err as Error).message }, 'etcd corruption scan failed; will retry');
      }
      if (stopped) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deps.pollMs ?? 5000);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  })();
  return {
    async stop() {
      stopped = true;
      wake?.();
      await watcher.cancel().catch(() => undefined);
      await loop;
    },
  };
}

/** Runs the scan the recorded request asks for, when the recorded result does not answer it. */
async function runPending(deps: EtcdCorruptionScannerDeps): Promise<void> {
  const [request, previous] = await Promise.all([deps.store.request(), deps.store.status()]);
  if (!request || previous?.requestId === request.requestId) return;
  const startedAt = new Date().toISOString();
  await writeWithEvents(deps, null, [['EtcdCorruptionScanStarted', `etcd corruption scan ${request.requestId} started (requested at ${request.requestedAt})`]]);
  let scan: HashScan | undefined;
  let error = '';
  try {
    scan = await deps.scan();
  } catch (err) {
    error = (err as Error).message;
  }
  const status: EtcdCorruptionStatus = {
    requestId: request.requestId,
    startedAt,
    finishedAt: new Date().toISOString(),
    revision: scan?.revision ?? '',
    corrupted: scan?.corrupted ?? false,
    error,
    members: scan?.members ?? [],
  };
  const events: Array<[EventName, string]> = [['EtcdCorruptionScanCompleted', `etcd corruption scan ${request.requestId}: ${summary(status)}`]];
  const disagreeing = names(status);
  const before = previous && previous.error === '' ? names(previous) : '';
  if (status.error === '' && status.corrupted && disagreeing !== before) {
    events.push(['EtcdCorruptionDetected', `etcd members whose key-value data disagree with the cluster's at revision ${status.revision}: ${disagreeing}`]);
  } else if (status.error === '' && !status.corrupted && previous?.corrupted) {
    events.push(['EtcdCorruptionResolved', `every etcd member that answered holds the same key-value data at revision ${status.revision} (before: ${before} disagreed)`]);
  }
  await writeWithEvents(deps, status, events);
  deps.logger[status.corrupted ? 'error' : 'info']({ requestId: request.requestId, revision: status.revision, corrupted: status.corrupted, error }, 'etcd corruption scan done');
}

async function writeWithEvents(deps: EtcdCorruptionScannerDeps, status: EtcdCorruptionStatus | null, events: ReadonlyArray<readonly [EventName, string]>): Promise<void> {
  const prepared: PreparedEvent[] = [];
  for (const [name, description] of events) {
    const event = await deps.events.prepare(catalogued(name, { component: { kind: 'cluster', ID: deps.cluster.UUID, Name: deps.cluster.clusterName }, description }));
    if (event) prepared.push(event);
  }
  await deps.store.commit(status, prepared);
}

function names(status: Pick<EtcdCorruptionStatus, 'members'>): string {
  return status.members.filter((m) => m.result === 'Disagrees').map((m) => `${m.name || m.ID} (${m.clientURL})`).join(', ');
}

function summary(status: EtcdCorruptionStatus): string {
  if (status.error) return `could not compare: ${status.error}`;
  const counts = (result: string) => status.members.filter((m) => m.result === result).length;
  return `revision ${status.revision}: ${counts('Agrees')} agree, ${counts('Disagrees')} disagree, ${counts('Unreachable')} unreachable, ${counts('NotCompared')} not compared (another compact revision)`;
}
