// Where the agent secret lives in etcd (docs/etcd-keys.md, /strata/agent-secret; docs/agent-auth.md):
// the HMAC key agents sign their control-plane tokens with (lib/agent-token.ts), shared by both
// daemons. Either creates it the first time it needs one, in a transaction guarded by "the key
// does not exist", so concurrent starters agree on one secret and no install step has to make it;
// a rotation compares the record's revision.
import { randomBytes, randomUUID } from 'node:crypto';
import { errors, StrataError } from '../errors.js';
import type { AgentSecret, AgentSecretRecord } from '../records.js';
import { LOST_RACE, retryLostRaces } from '../retry.js';
import { parseRecord } from './client.js';
import { keys } from './keys.js';
import { kvOf, type Kv, type KvClient } from './kv.js';

export function newAgentSecret(now = new Date()): AgentSecret {
  return { id: randomUUID(), key: randomBytes(32).toString('base64url'), createdAt: now.toISOString() };
}

export class AgentSecretStore {
  private readonly kv: Kv;

  constructor(client: KvClient) {
    this.kv = kvOf(client);
  }

  async read(): Promise<{ record: AgentSecretRecord; revision: string } | null> {
    const stored = await this.kv.get(keys.agentSecret());
    if (!stored) return null;
    const record = parseRecord<AgentSecretRecord>(keys.agentSecret(), stored.value);
    return record ? { record, revision: stored.modRevision } : null;
  }

  /** The agent secret, created if there is none yet; concurrent callers all get the one that won. */
  async ensure(): Promise<AgentSecretRecord> {
    const existing = await this.read();
    if (existing) return existing.record;
    const created: AgentSecretRecord = { current: newAgentSecret() };
    const key = keys.agentSecret();
    const result = await this.kv.commit({ guards: [{ key, revision: '0' }], writes: [{ put: key, value: created }] });
    if (result.succeeded) return created;
    // Another starter's secret won; a transaction's result carries no value, so it is read after.
    const winner = await this.read();
    if (!winner) throw errors.internal('the agent secret vanished while it was being created');
    return winner.record;
  }

  /**
   * Makes a new current secret and keeps the old current one as previous (the one before that is
   * dropped). Agents sign with the new secret from their next token on; tokens signed with the
   * previous one stay valid, so no session breaks.
   */
  async rotate(): Promise<AgentSecretRecord> {
    const key = keys.agentSecret();
    return retryLostRaces(5, async () => {
      const existing = await this.read();
      if (!existing) {
        // None yet: make one, then rotate it on the next attempt.
        await this.ensure();
        return LOST_RACE;
      }
      const rotated: AgentSecretRecord = { current: newAgentSecret(), previous: existing.record.current };
      const result = await this.kv.commit({ guards: [{ key, revision: existing.revision }], writes: [{ put: key, value: rotated }] });
      return result.succeeded ? rotated : LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', 'the agent secret kept changing while it was being rotated; try again'));
  }
}
