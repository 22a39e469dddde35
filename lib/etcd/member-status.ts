// etcd's own view of itself, from the member this client talks to: its Status (leader, raft
// term, database size) and the cluster's active alarms. The control plane's metrics read it at
// scrape time (control-plane/metrics/control-plane-metrics.ts); this driver only asks etcd.
import { AlarmAction, AlarmType, type Etcd3 } from 'etcd3';

export interface MemberStatus {
  /** The leader's member ID as etcd writes it ('0': no leader). */
  readonly leader: string;
  readonly raftTerm: string;
  readonly dbSize: string;
  /** Active alarms by their proto names (NOSPACE, CORRUPT). */
  readonly alarms: readonly string[];
}

/** One Status and one alarm listing, together. */
export async function readMemberStatus(etcd: Etcd3): Promise<MemberStatus> {
  const [status, alarms] = await Promise.all([etcd.maintenance.status(), etcd.maintenance.alarm({ action: AlarmAction.Get, memberID: '0', alarm: AlarmType.None })]);
  // The enum arrives as its proto name (NOSPACE), etcd3's TypeScript name (Nospace) or number.
  const names: Record<string, string> = { '1': 'NOSPACE', '2': 'CORRUPT' };
  return { leader: status.leader, raftTerm: status.raftTerm, dbSize: status.dbSize, alarms: alarms.alarms.map((a: { alarm: unknown }) => names[String(a.alarm)] ?? String(a.alarm).toUpperCase()) };
}
