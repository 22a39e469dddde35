// Node records (/strata/nodes/<UUID>, docs/etcd-keys.md) as both daemons read them: the agent's
// pools (and a watch of its own nodes' records: devices added, ec), the control plane's agent
// authenticator (which server a node belongs to). The agent writes them at registration
// (agent/membership/registration-store.ts); the control plane's writes are its stores'.
import type { Etcd3 } from 'etcd3';
import type { NodeRecord } from '../records.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import type { StoreWatch } from './record-store.js';

/** Reads a node record; null when the node is not registered. */
export interface NodeReader {
  read(nodeUUID: string): Promise<NodeRecord | null>;
}

export class NodeStore implements NodeReader {
  constructor(private readonly etcd: Etcd3) {}

  async read(nodeUUID: string): Promise<NodeRecord | null> {
    return parseRecord<NodeRecord>(keys.node(nodeUUID), await this.etcd.get(keys.node(nodeUUID)).string());
  }

  /** `onPut` whenever the node's record is written (from now on; it connects in the background and keeps retrying), `onError` when the watch fails. */
  watchPuts(nodeUUID: string, onPut: () => void, onError: (err: Error) => void): StoreWatch {
    const watcher = this.etcd.watch().key(keys.node(nodeUUID)).watcher();
    watcher.on('put', () => onPut());
    watcher.on('error', onError);
    return watcher;
  }
}
