// The etcd corruption scan (spec 4.4, 6.4; issue 15 item 6): what the API and the metrics read
// and write. POST /cluster/etcdCorruption/scan records a request in etcd and answers at once; the
// active cluster manager (etcd-corruption-scanner.ts) runs the scan and records its result, which
// every control plane serves as metrics. A request is a record, not a message: a leader that
// changes or restarts meanwhile finds it unanswered and runs it.
import { randomUUID } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
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

export class EtcdCorruptionService {
  constructor(private readonly etcd: Etcd3) {}

  /** Records a scan request; the active cluster manager picks it up. */
  async requestScan(now = new Date()): Promise<EtcdCorruptionScanRequest> {
    const request: EtcdCorruptionScanRequest = { requestId: randomUUID(), requestedAt: now.toISOString() };
    await this.etcd.put(keys.etcdCorruptionScanRequest()).value(JSON.stringify(request));
    return request;
  }

  async request(): Promise<EtcdCorruptionScanRequest | null> {
    const key = keys.etcdCorruptionScanRequest();
    return parseRecord<EtcdCorruptionScanRequest>(key, await this.etcd.get(key).string());
  }

  async status(): Promise<EtcdCorruptionStatus | null> {
    const key = keys.etcdCorruptionStatus();
    return parseRecord<EtcdCorruptionStatus>(key, await this.etcd.get(key).string());
  }
}
