// ReplicaLimits (volume-dependencies.ts) from the presence keys alone: a create needs only
// "how many servers have an Active node", not the whole inventory view (one small range read).
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { PresenceRecord } from '../../lib/records.js';
import type { ReplicaLimits } from '../volumes/volume-dependencies.js';
import { currentMaxReplicas } from './cluster-service.js';

export class PresenceReplicaLimits implements ReplicaLimits {
  constructor(private readonly etcd: Etcd3, private readonly supportedMaxReplicas: number) {}

  async currentMaxReplicas(): Promise<number> {
    const present = Object.values(await this.etcd.getAll().prefix(keys.presencePrefix()).json()) as PresenceRecord[];
    const serversWithActiveNodes = present.filter((p) => p.nodeUUIDs.length > 0).length;
    return currentMaxReplicas(this.supportedMaxReplicas, serversWithActiveNodes);
  }
}
