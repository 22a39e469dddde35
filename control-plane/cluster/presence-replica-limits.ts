// ReplicaLimits (volume-dependencies.ts) from the presence keys alone: a create needs only
// "how many servers have an Active node", not the whole inventory view. Read from the watch
// cache (the request's sync() made it current).
import type { ReplicaLimits } from '../volumes/volume-dependencies.js';
import type { WatchCache } from '../watch-cache/watch-cache.js';
import { currentMaxReplicas } from './cluster-service.js';

export class PresenceReplicaLimits implements ReplicaLimits {
  constructor(private readonly cache: WatchCache, private readonly supportedMaxReplicas: number) {}

  async currentMaxReplicas(): Promise<number> {
    const serversWithActiveNodes = this.cache.presence().filter((p) => p.nodeUUIDs.length > 0).length;
    return currentMaxReplicas(this.supportedMaxReplicas, serversWithActiveNodes);
  }
}
