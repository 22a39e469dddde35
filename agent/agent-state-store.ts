// The agent's one watched state (issue 14 item 1): every etcd key an agent process follows,
// mirrored in memory by one PrefixMirror (lib/etcd/prefix-mirror.ts: read in one transaction,
// then kept current by ONE watch from the next revision, reloaded after a watch failure). The
// stores that read these keys (assignment-store.ts, cluster-paths-store.ts, host-auth-store.ts,
// admin-endpoints-store.ts, lib/etcd/cluster-store.ts, node-store.ts, node-command-store.ts) are
// lent it and keep their domain-typed APIs; agent/agent.ts makes it once and stops it last.
// Lease keep-alives are not watches; writes, and reads that must see this agent's own last write
// or etcd's word at one moment (fencing), still go to etcd.
import { keys } from '../lib/etcd/keys.js';
import type { KvClient, PrefixOrKey } from '../lib/etcd/kv.js';
import { PrefixMirror } from '../lib/etcd/prefix-mirror.js';
import { SEALED_FEATURES } from '../lib/etcd/sealed-host-keys-store.js';
import type { Logger } from '../lib/logger.js';

/**
 * What `serverUUID`'s agent follows: prefixes, and single records as exact keys (`{ key }`, never
 * as prefixes: /strata/cluster as a prefix would also bring /strata/cluster-ca, the cluster CA's
 * private key, into every agent; a record key is read alone whether or not another key starts
 * with it today).
 */
export function agentWatchedRanges(serverUUID: string): PrefixOrKey[] {
  return [
    // The cluster record: the reconciler, pools, host keys, tokens, discovery.
    { key: keys.cluster() },
    // Discovery: who serves which volume where.
    keys.serversPrefix(),
    keys.nodesPrefix(),
    keys.presencePrefix(),
    keys.assignmentsPrefix(),
    keys.volumeStatusPrefix(),
    // Replication: a replica set moving ahead of its assignments (failover).
    keys.replicaSetsPrefix(),
    keys.nodeCommandsPrefix(),
    keys.adminEndpointsPrefix(),
    // The sealed features' switches (TLS's also read by discovery) and this server's records.
    ...Object.values(SEALED_FEATURES).flatMap((f) => [{ key: f.switchKey }, { key: f.serverRecord(serverUUID) }]),
  ];
}

/**
 * The mirror of everything `serverUUID`'s agent follows. Corrupt records are kept (as null
 * records with `corrupt` set): a reader tells "cannot be read" from "absent". Readers that
 * read etcd before read it after catchUp(): as fresh as etcd, one cheap read instead of a range.
 */
export function agentWatchedState(client: KvClient, serverUUID: string, logger: Logger): PrefixMirror {
  // Every revision, so catchUp() can wait for any (Strata's etcd holds only Strata's keys). The
  // watch then brings every key's changes, the CA's too, into the process: the mirror drops those
  // of keys it does not mirror as they arrive, and stores none of them.
  return new PrefixMirror(client, agentWatchedRanges(serverUUID), logger, { everyRevision: true, keepCorrupt: true });
}
