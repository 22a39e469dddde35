// Which control plane holds each server's agent session: /strata/agent-sessions/<serverUUID>
// (docs/etcd-keys.md), written under this control plane's lease so the records of a control plane
// that dies vanish with it. A control plane without the session of a server forwards the LED and
// bundle requests of that server to the one named here (session-routing.ts).
import type { Etcd3, Lease } from 'etcd3';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentSessionRecord } from '../../lib/records.js';

export class AgentSessionStore {
  /** This control plane's sessions, as written (the exact value a release compares). */
  private readonly own = new Map<string, string>();
  private lease: Lease | undefined;
  /** Writes go one after another, so a release never overtakes the claim it undoes. */
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly etcd: Etcd3, private readonly instanceId: string, private readonly logger: Logger) {}

  /** A session opened here; recorded now, or once the lease is granted. */
  claim(serverUUID: string, agentInstance: string): void {
    const record: AgentSessionRecord = { serverUUID, instanceId: this.instanceId, agentInstance, since: new Date().toISOString() };
    const value = JSON.stringify(record);
    this.own.set(serverUUID, value);
    this.write(serverUUID, async (lease) => {
      if (this.own.get(serverUUID) === value) await lease.put(keys.agentSession(serverUUID)).value(value);
    });
  }

  /** The session ended: its record goes, unless another control plane (or session) wrote it since. */
  release(serverUUID: string, agentInstance: string): void {
    const value = this.own.get(serverUUID);
    if (value === undefined || (JSON.parse(value) as AgentSessionRecord).agentInstance !== agentInstance) return;
    this.own.delete(serverUUID);
    this.write(serverUUID, async () => {
      const key = keys.agentSession(serverUUID);
      await this.etcd.if(key, 'Value', '==', value).then(this.etcd.delete().key(key)).commit();
    });
  }

  /** A (new) lease: every session held here is recorded under it (KeptLease's onGranted). */
  async register(lease: Lease): Promise<void> {
    this.lease = lease;
    const writes = [...this.own.entries()].map(([serverUUID, value]) => lease.put(keys.agentSession(serverUUID)).value(value));
    await Promise.all(writes);
  }

  /** Where the session of a server is, if any control plane holds it. */
  async locate(serverUUID: string): Promise<AgentSessionRecord | null> {
    const key = keys.agentSession(serverUUID);
    const value = await this.etcd.get(key).buffer();
    return value ? parseRecord<AgentSessionRecord>(key, value) : null;
  }

  private write(serverUUID: string, work: (lease: Lease) => Promise<void>): void {
    this.queue = this.queue.then(async () => {
      // Without a lease yet (the control plane is starting), register() writes the sessions.
      if (!this.lease) return;
      try {
        await work(this.lease);
      } catch (err) {
        this.logger.warn({ serverUUID, err: (err as Error).message }, 'agent session record not written; the next lease grant writes it');
      }
    });
  }
}
