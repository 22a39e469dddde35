// What connected hosts are built from, read at ONE revision (one etcd transaction): the volume
// states agents report (each lists the hosts connected to one volume on one node), the
// volumes (their nodeList), and presence (which nodes' agents are alive, so a dead node's
// last report does not count as a live connection).
import { keys } from '../../lib/etcd/keys.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { kvOf, type Kv, type KvClient, type StoredKey } from '../../lib/etcd/kv.js';
import type { PresenceRecord, VolumeRecord, VolumeStatusRecord } from '../../lib/records.js';

export interface ConnectionsSnapshot {
  readonly statuses: readonly VolumeStatusRecord[];
  /** By volume UUID. */
  readonly volumes: ReadonlyMap<string, VolumeRecord>;
  /** Nodes whose server's presence lists them (Active). */
  readonly activeNodes: ReadonlySet<string>;
}

export class ConnectedHostsStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async read(): Promise<ConnectionsSnapshot> {
    const { ranges } = await this.kv.snapshot([keys.volumeStatusPrefix(), keys.volumesPrefix(), keys.presencePrefix()]);
    const [statusRange, volumeRange, presenceRange] = ranges;
    const records = <T>(range: readonly StoredKey[] | undefined): T[] =>
      (range ?? []).map((kv) => parseRecord<T>(kv.key, kv.value)).filter((r): r is NonNullable<typeof r> => r !== null) as T[];
    const volumes = new Map(records<VolumeRecord>(volumeRange).map((v) => [v.UUID, v]));
    const activeNodes = new Set(records<PresenceRecord>(presenceRange).flatMap((p) => p.nodeUUIDs ?? []));
    return { statuses: records<VolumeStatusRecord>(statusRange), volumes, activeNodes };
  }
}
