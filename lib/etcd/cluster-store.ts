// The cluster record (/strata/cluster, docs/etcd-keys.md): written once, in the bootstrap
// transaction (control-plane/bootstrap/bootstrap-store.ts), and read by both daemons: the
// control plane at start, the agent for the cluster's UUID and subsystem NQN (token audience,
// data path, pools, host keys).
import type { ClusterRecord } from '../records.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import { kvOf, type Kv, type KvClient } from './kv.js';
import { recordOf, requireMirrored } from './mirror-follower.js';
import type { PrefixMirror } from './prefix-mirror.js';

/** Reads the cluster record; null before the cluster is bootstrapped. */
export interface ClusterReader {
  read(): Promise<ClusterRecord | null>;
}

export class ClusterStore implements ClusterReader {
  private readonly kv: Kv;

  /** `state`: the process's watched state (the agent's), read instead of etcd. */
  constructor(
    client: KvClient,
    private readonly state?: PrefixMirror,
  ) {
    this.kv = kvOf(client);
    if (state) requireMirrored(state, [keys.cluster()], 'the cluster store');
  }

  async read(): Promise<ClusterRecord | null> {
    if (!this.state) return parseRecord<ClusterRecord>(keys.cluster(), (await this.kv.get(keys.cluster()))?.value ?? null);
    await this.state.catchUp();
    return recordOf<ClusterRecord>(this.state.get(keys.cluster(), keys.cluster()));
  }
}
