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

  /** The scan's result in Prometheus' text format (docs/api.md, "etcd corruption scan"). */
  async metrics(): Promise<string> {
    return metricsText(await this.status());
  }
}

export function metricsText(status: EtcdCorruptionStatus | null): string {
  const lines = [
    '# HELP strata_etcd_corruption_detected 1 when the last etcd corruption scan found members whose data disagree, else 0 (absent before the first scan).',
    '# TYPE strata_etcd_corruption_detected gauge',
  ];
  if (status && status.error === '') lines.push(`strata_etcd_corruption_detected ${status.corrupted ? 1 : 0}`);
  lines.push(
    '# HELP strata_etcd_corruption_last_scan_timestamp_seconds When the last etcd corruption scan finished (0: never).',
    '# TYPE strata_etcd_corruption_last_scan_timestamp_seconds gauge',
    `strata_etcd_corruption_last_scan_timestamp_seconds ${status ? Date.parse(status.finishedAt) / 1000 : 0}`,
    '# HELP strata_etcd_corruption_member_disagrees Per member of the last scan: 1 when its hash disagrees with the cluster\'s, 0 when it agrees (unreachable or not compared members are absent).',
    '# TYPE strata_etcd_corruption_member_disagrees gauge',
  );
  for (const m of status?.members ?? []) {
    if (m.result === 'Agrees' || m.result === 'Disagrees') {
      lines.push(`strata_etcd_corruption_member_disagrees{member_id="${m.ID}",member_name="${escapeLabel(m.name)}"} ${m.result === 'Disagrees' ? 1 : 0}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}
