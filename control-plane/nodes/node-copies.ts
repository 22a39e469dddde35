// The copies a node holds, read from the watch cache (volumes, replica sets, presence), current as
// of the request's sync(): which volumes would be left without a live in-sync copy if the node
// stopped serving (node stop / restart refuse then, unless forced; replace refuses a source whose
// copies exist nowhere else). docs/node-operations.md.
import type { WatchCache } from '../watch-cache/watch-cache.js';

export interface NodeCopiesSource {
  /**
   * The volumes (as `project/name (UUID)`) that have a copy on `nodeUUID` and no live in-sync
   * copy on another node: without this node they are unavailable. `onlyIfServing`: only those
   * this node makes available now (its agent lists it); a node that serves nothing already
   * takes nothing away.
   */
  onlyCopyOn(nodeUUID: string, onlyIfServing: boolean): Promise<string[]>;
}

export class WatchedNodeCopies implements NodeCopiesSource {
  constructor(private readonly cache: WatchCache) {}

  async onlyCopyOn(nodeUUID: string, onlyIfServing: boolean): Promise<string[]> {
    const live = new Set(this.cache.presence().flatMap((p) => p.nodeUUIDs ?? []));
    if (onlyIfServing && !live.has(nodeUUID)) return [];
    const found: string[] = [];
    for (const { record: volume } of this.cache.volumesInOrder()) {
      if (!volume.placement || volume.state === 'Deleting' || !volume.placement.nodeList.includes(nodeUUID)) continue;
      const set = this.cache.replicaSet(volume.UUID);
      // One copy (or copies from before replication, which are independent): only the primary's serves.
      const inSync = set ? set.inSync : [volume.placement.primaryNodeUUID];
      if (onlyIfServing && !inSync.includes(nodeUUID)) continue;
      if (inSync.some((n) => n !== nodeUUID && live.has(n))) continue;
      found.push(`${volume.projectName}/${volume.name} (${volume.UUID})`);
    }
    return found;
  }
}

/** At most `max` names, then how many more: a refusal names the volumes without growing unbounded. */
export function nameSome(names: readonly string[], max = 10): string {
  return names.length <= max ? names.join(', ') : `${names.slice(0, max).join(', ')} and ${names.length - max} more`;
}
