// The agent's etcd lease and the presence key bound to it (/strata/presence/<server>): the write
// of the agent's join that stays on the etcd client, because a lease (granted, kept alive,
// revoked, and a put bound to it) is nothing the Kv seam (lib/etcd/kv.ts) has. The server and
// node records the join also writes are registration-store.ts's, on the seam.
import type { Etcd3, Lease } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { PresenceRecord } from '../../lib/records.js';

/**
 * One etcd lease of the agent and the presence key bound to it (etcd3's Lease: it keeps itself
 * alive; `lost` when etcd ends it or it could not be renewed within the TTL).
 */
export interface PresenceLease {
  /** Grants the lease; its ID (a decimal string). */
  grant(): Promise<string>;
  /** Writes the server's presence key under this lease. */
  putPresence(record: PresenceRecord): Promise<void>;
  /** Whether the lease was revoked or lost. */
  revoked(): boolean;
  /** Revokes the lease (its presence key goes at once); rejects past `deadline` (epoch ms). */
  revoke(deadline: number): Promise<void>;
  /** Stops keeping it alive without revoking it (it expires with the TTL). */
  release(): void;
  onLost(listener: (err: Error) => void): void;
  /** Every acknowledged keep-alive. */
  onRenewed(listener: () => void): void;
}

export class PresenceStore {
  constructor(private readonly etcd: Etcd3) {}

  lease(ttlSeconds: number): PresenceLease {
    return presenceLease(this.etcd.lease(ttlSeconds));
  }
}

function presenceLease(lease: Lease): PresenceLease {
  return {
    grant: () => lease.grant(),
    putPresence: async (record) => void (await lease.put(keys.presence(record.serverUUID)).value(JSON.stringify(record))),
    revoked: () => lease.revoked(),
    revoke: (deadline) => lease.revoke({ deadline }),
    release: () => lease.release(),
    onLost: (listener) => void lease.on('lost', listener),
    onRenewed: (listener) => void lease.on('keepaliveSucceeded', () => listener()),
  };
}
