// Node records (/strata/nodes/<UUID>, docs/etcd-keys.md) as both daemons read them: the agent's
// pools (and a watch of its own nodes' records: devices added, ec), the control plane's agent
// authenticator (which server a node belongs to). The agent writes them at registration
// (agent/membership/registration-store.ts); the control plane's writes are its stores'.
import type { NodeRecord } from '../records.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import { kvOf, type Kv, type KvClient } from './kv.js';
import { followPuts, requireMirrored } from './mirror-follower.js';
import type { PrefixMirror } from './prefix-mirror.js';
import type { StoreWatch } from './record-store.js';

/** Reads a node record; null when the node is not registered. */
export interface NodeReader {
  read(nodeUUID: string): Promise<NodeRecord | null>;
}

export class NodeStore implements NodeReader {
  private readonly kv: Kv;

  /** `state`: the process's watched state (the agent's), which watchPuts follows. */
  constructor(
    client: KvClient,
    private readonly state?: PrefixMirror,
  ) {
    this.kv = kvOf(client);
    if (state) requireMirrored(state, [keys.nodesPrefix()], 'the node store');
  }

  async read(nodeUUID: string): Promise<NodeRecord | null> {
    return parseRecord<NodeRecord>(keys.node(nodeUUID), (await this.kv.get(keys.node(nodeUUID)))?.value ?? null);
  }

  /**
   * `onPut` whenever the node's record is written from now on (and after the watched state
   * reloaded: it may have been). Reads stay reads of etcd: the agent reads the record it has
   * just written at registration. `onError` is not called (the state reloads by itself).
   */
  watchPuts(nodeUUID: string, onPut: () => void, _onError: (err: Error) => void): StoreWatch {
    if (!this.state) throw new Error('watching node records needs the watched state');
    const key = keys.node(nodeUUID);
    const stop = followPuts(this.state, keys.nodesPrefix(), (written) => written === key && onPut(), 'all');
    return { cancel: async () => void stop() };
  }
}
