// What connected hosts are built from, read in ONE etcd transaction (one revision): the volume
// states agents report (each lists the hosts connected to one volume on one node), the
// volumes (their nodeList), and presence (which nodes' agents are alive, so a dead node's
// last report does not count as a live connection).
import type { Etcd3, IRangeResponse } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import type { PresenceRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';

export interface ConnectionsSnapshot {
  readonly statuses: readonly VolumeStatusRecord[];
  /** By volume UUID. */
  readonly volumes: ReadonlyMap<string, VolumeRecord>;
  /** Nodes whose server's presence lists them (Active). */
  readonly activeNodes: ReadonlySet<string>;
}

export class ConnectedHostsStore {
  constructor(private readonly etcd: Etcd3) {}

  async read(): Promise<ConnectionsSnapshot> {
    const ranges = () => [
      this.etcd.getAll().prefix(keys.volumeStatusPrefix()),
      this.etcd.getAll().prefix(keys.volumesPrefix()),
      this.etcd.getAll().prefix(keys.presencePrefix()),
    ];
    // A transaction needs a compare; both branches run the same reads.
    const result = await this.etcd.if(keys.cluster(), 'Create', '>', 0).then(...ranges()).else(...ranges()).commit();
    const [statusRange, volumeRange, presenceRange] = result.responses.map((r) => r.response_range as IRangeResponse);
    const records = <T>(range: IRangeResponse | undefined): T[] =>
      (range?.kvs ?? []).map((kv) => parseRecord<T>(kv.key.toString('utf8'), kv.value)).filter((r): r is NonNullable<typeof r> => r !== null) as T[];
    const volumes = new Map(records<VolumeRecord>(volumeRange).map((v) => [v.UUID, v]));
    const activeNodes = new Set(records<PresenceRecord>(presenceRange).flatMap((p) => p.nodeUUIDs ?? []));
    return { statuses: records<VolumeStatusRecord>(statusRange), volumes, activeNodes };
  }
}
