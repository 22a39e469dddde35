// The cluster record (/strata/cluster, docs/etcd-keys.md): written once, in the bootstrap
// transaction (control-plane/bootstrap/bootstrap-store.ts), and read by both daemons: the
// control plane at start, the agent for the cluster's UUID and subsystem NQN (token audience,
// data path, pools, host keys).
import type { Etcd3 } from 'etcd3';
import type { ClusterRecord } from '../records.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import { recordOf, requireMirrored } from './mirror-follower.js';
import type { PrefixMirror } from './prefix-mirror.js';

/** Reads the cluster record; null before the cluster is bootstrapped. */
export interface ClusterReader {
  read(): Promise<ClusterRecord | null>;
}

export class ClusterStore implements ClusterReader {
  /** `state`: the process's watched state (the agent's), read instead of etcd. */
  constructor(
    private readonly etcd: Etcd3,
    private readonly state?: PrefixMirror,
  ) {
    if (state) requireMirrored(state, [keys.cluster()], 'the cluster store');
  }

  async read(): Promise<ClusterRecord | null> {
    if (!this.state) return parseRecord<ClusterRecord>(keys.cluster(), await this.etcd.get(keys.cluster()).string());
    await this.state.catchUp();
    return recordOf<ClusterRecord>(this.state.get(keys.cluster(), keys.cluster()));
  }
}
