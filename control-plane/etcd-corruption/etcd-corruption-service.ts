// The etcd corruption scan (spec 4.4, 6.4; issue 15 item 6): what the API and the metrics read
// and write. POST /cluster/etcdCorruption/scan records a request in etcd and answers at once; the
// active cluster manager (etcd-corruption-scanner.ts) runs the scan and records its result, which
// every control plane serves as metrics. A request is a record, not a message: a leader that
// changes or restarts meanwhile finds it unanswered and runs it. The records live in
// etcd-corruption-store.ts.
import { randomUUID } from 'node:crypto';
import type { EtcdCorruptionScanRequest, EtcdCorruptionStatus, EtcdCorruptionStore } from './etcd-corruption-store.js';

export class EtcdCorruptionService {
  constructor(private readonly store: EtcdCorruptionStore) {}

  /** Records a scan request; the active cluster manager picks it up. */
  async requestScan(now = new Date()): Promise<EtcdCorruptionScanRequest> {
    const request: EtcdCorruptionScanRequest = { requestId: randomUUID(), requestedAt: now.toISOString() };
    await this.store.putRequest(request);
    return request;
  }

  request(): Promise<EtcdCorruptionScanRequest | null> {
    return this.store.request();
  }

  status(): Promise<EtcdCorruptionStatus | null> {
    return this.store.status();
  }
}
