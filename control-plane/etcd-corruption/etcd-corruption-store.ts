// Where the etcd corruption scan lives in etcd (docs/etcd-keys.md): the last scan asked for
// (/strata/etcd-corruption/scan-request) and the last result (/strata/etcd-corruption/status),
// the result written with its events in one transaction, fenced by the leader's term when the
// composition root gives the fenced commit. The service and the scanner see requests and results;
// the scanner learns of new requests from the process's watched state (WatchCache.state).
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type Kv, type KvClient } from '../../lib/etcd/kv.js';
import { commitUnguarded, type Committer, type Write } from '../../lib/etcd/transaction.js';
import type { PreparedEvent } from '../events/event-log-store.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import type { MemberScan } from './etcd-hash-scan.js';

export interface EtcdCorruptionScanRequest {
  readonly requestId: string;
  readonly requestedAt: string;
}

export interface EtcdCorruptionStatus {
  /** The request this scan answered. */
  readonly requestId: string;
  readonly startedAt: string;
  readonly finishedAt: string;
  /** The revision every member hashed ('' when the scan could not run). */
  readonly revision: string;
  readonly corrupted: boolean;
  /** Why the scan could not compare anything ('' when it ran). */
  readonly error: string;
  readonly members: readonly MemberScan[];
}

export interface ScanRequestWatch {
  cancel(): Promise<void>;
}

export interface EtcdCorruptionStoreOptions {
  /** LeaderElection.fencedCommit; without it, results are written in plain transactions (the API side never writes one). */
  readonly fencedCommit?: Committer;
  /** The process's watched state (its mirror holds the scan request key): watchRequests() needs it. */
  readonly cache?: WatchCache;
}

export class EtcdCorruptionStore {
  private readonly kv: Kv;

  constructor(
    client: KvClient,
    private readonly options: EtcdCorruptionStoreOptions = {},
  ) {
    this.kv = kvOf(client);
  }

  async putRequest(request: EtcdCorruptionScanRequest): Promise<void> {
    await commitUnguarded(this.kv, [{ put: keys.etcdCorruptionScanRequest(), value: request }]);
  }

  async request(): Promise<EtcdCorruptionScanRequest | null> {
    const key = keys.etcdCorruptionScanRequest();
    return parseRecord<EtcdCorruptionScanRequest>(key, (await this.kv.get(key))?.value ?? null);
  }

  async status(): Promise<EtcdCorruptionStatus | null> {
    const key = keys.etcdCorruptionStatus();
    return parseRecord<EtcdCorruptionStatus>(key, (await this.kv.get(key))?.value ?? null);
  }

  /** `requested` whenever a scan request is recorded (or the state was read again: it may have been). */
  watchRequests(requested: () => void): ScanRequestWatch {
    const cache = this.options.cache;
    if (!cache) throw new Error('EtcdCorruptionStore: watchRequests needs the watched state');
    const key = keys.etcdCorruptionScanRequest();
    const unsubscribe = cache.state.onChange((changes, reloaded) => {
      if (reloaded || changes.some((c) => c.key === key && !c.deleted)) requested();
    });
    return { cancel: async () => void unsubscribe() };
  }

  /** Writes the result (none: events alone) with its events in one (fenced) transaction; nothing to write, no transaction. */
  async commit(status: EtcdCorruptionStatus | null, events: readonly PreparedEvent[]): Promise<void> {
    const writes: Write[] = [...(status ? [{ put: keys.etcdCorruptionStatus(), value: status }] : []), ...events.flatMap((e) => e.writes)];
    if (writes.length === 0) return;
    await commitUnguarded(this.kv, writes, this.options.fencedCommit);
  }
}
