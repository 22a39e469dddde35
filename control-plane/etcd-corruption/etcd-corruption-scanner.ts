// The active cluster manager's half of the etcd corruption scan: it watches the scan request
// (control-plane/etcd-corruption/etcd-corruption-service.ts) and, for each request the last
// result does not answer, scans (etcd-hash-scan.ts) and records the result with its events in
// one fenced transaction: EtcdCorruptionScanStarted when it starts, then EtcdCorruptionScanCompleted,
// and EtcdCorruptionDetected when the scan finds disagreeing members that the previous result did
// not (or other ones), EtcdCorruptionResolved when a scan finds none after one that did.
import type { Etcd3, IOperation } from 'etcd3';
import type { Logger } from '../../lib/logger.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ClusterRecord } from '../../lib/records.js';
import type { EventPreparer } from '../events/etcd-event-log.js';
import { catalogued } from '../events/event-catalogue.js';
import type { EventName } from '../events/event-catalogue.js';
import { scanEtcdHashes, type HashScan } from './etcd-hash-scan.js';
import { EtcdCorruptionService, type EtcdCorruptionStatus } from './etcd-corruption-service.js';

export interface EtcdCorruptionScannerDeps {
  readonly etcd: Etcd3;
  readonly events: EventPreparer;
  readonly cluster: Pick<ClusterRecord, 'UUID' | 'clusterName'>;
  readonly fencedWrite: (ops: IOperation[]) => Promise<void>;
  readonly logger: Logger;
  /** How often the request is re-read besides the watch (default 5 s). */
  readonly pollMs?: number;
  readonly scan?: (etcd: Etcd3) => Promise<HashScan>;
}

export async function startEtcdCorruptionScanner(deps: EtcdCorruptionScannerDeps): Promise<{ stop(): Promise<void> }> {
  const service = new EtcdCorruptionService(deps.etcd);
  let stopped = false;
  let wake: (() => void) | undefined;
  const watcher = await deps.etcd.watch().key(keys.etcdCorruptionScanRequest()).create();
  watcher.on('put', () => wake?.());
  watcher.on('error', (err) => deps.logger.warn({ err: err.message }, 'etcd corruption request watch failed; polling'));
  const loop = (async () => {
    while (!stopped) {
      try {
        await runPending(deps, service);
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
async function runPending(deps: EtcdCorruptionScannerDeps, service: EtcdCorruptionService): Promise<void> {
  const [request, previous] = await Promise.all([service.request(), service.status()]);
  if (!request || previous?.requestId === request.requestId) return;
  const startedAt = new Date().toISOString();
  await writeWithEvents(deps, [], [['EtcdCorruptionScanStarted', `etcd corruption scan ${request.requestId} started (requested at ${request.requestedAt})`]]);
  let scan: HashScan | undefined;
  let error = '';
  try {
    scan = await (deps.scan ?? scanEtcdHashes)(deps.etcd);
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
  await writeWithEvents(deps, [deps.etcd.put(keys.etcdCorruptionStatus()).value(JSON.stringify(status))], events);
  deps.logger[status.corrupted ? 'error' : 'info']({ requestId: request.requestId, revision: status.revision, corrupted: status.corrupted, error }, 'etcd corruption scan done');
}

async function writeWithEvents(deps: EtcdCorruptionScannerDeps, ops: IOperation[], events: ReadonlyArray<readonly [EventName, string]>): Promise<void> {
  const all = [...ops];
  for (const [name, description] of events) {
    const prepared = await deps.events.prepare(catalogued(name, { component: { kind: 'cluster', ID: deps.cluster.UUID, Name: deps.cluster.clusterName }, description }));
    if (prepared) all.push(...prepared.ops);
  }
  if (all.length > 0) await deps.fencedWrite(all);
}

function names(status: Pick<EtcdCorruptionStatus, 'members'>): string {
  return status.members.filter((m) => m.result === 'Disagrees').map((m) => `${m.name || m.ID} (${m.clientURL})`).join(', ');
}

function summary(status: EtcdCorruptionStatus): string {
  if (status.error) return `could not compare: ${status.error}`;
  const counts = (result: string) => status.members.filter((m) => m.result === result).length;
  return `revision ${status.revision}: ${counts('Agrees')} agree, ${counts('Disagrees')} disagree, ${counts('Unreachable')} unreachable, ${counts('NotCompared')} not compared (another compact revision)`;
}
