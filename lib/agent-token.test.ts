// The agent secret (created once however many daemons race, rotated by CAS), on a real etcd and
// on the in-memory fake (test/fakes/memory-etcd.ts), and the token format both daemons share.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { MemoryEtcd } from '../test/fakes/memory-etcd.js';
import { startEtcd } from '../test/helpers/etcd.js';
import {
  agentTokenSecretId,
  newAgentSecret,
  signAgentToken,
  verifyAgentToken,
} from './agent-token.js';
import { AgentSecretStore } from './etcd/agent-secret-store.js';
import { createEtcdClient } from './etcd/client.js';
import type { KvClient } from './etcd/kv.js';
import { StrataError } from './errors.js';

/** Where the cases run: several clients of one store (daemons racing), and how to stop them. */
interface Backend {
  readonly clients: readonly KvClient[];
  close(): Promise<void>;
}

function agentSecretCases(name: string, open: () => Promise<Backend>): void {
  describe(`agent secret and tokens on ${name}`, () => {
    let clients: readonly KvClient[];
    let close: Backend['close'] = async () => {};

    before(async () => ({ clients, close } = await open()));
    after(() => close());

    it('is created once: concurrent creators (control planes, agents) all get the same secret', async () => {
      assert.equal(await new AgentSecretStore(clients[0]!).read(), null);
      const results = await Promise.all(clients.flatMap((c) => [new AgentSecretStore(c).ensure(), new AgentSecretStore(c).ensure()]));
      const stored = await new AgentSecretStore(clients[0]!).read();
      assert.ok(stored);
      for (const r of results) assert.deepEqual(r, stored.record);
      assert.equal(Buffer.from(stored.record.current.key, 'base64url').length, 32);
      assert.equal(stored.record.previous, undefined);
    });

    it('rotates by CAS: the old current becomes previous; concurrent rotations each land', async () => {
      const before = (await new AgentSecretStore(clients[0]!).ensure()).current;
      const rotated = await new AgentSecretStore(clients[0]!).rotate();
      assert.deepEqual(rotated.previous, before);
      assert.notEqual(rotated.current.id, before.id);
      await Promise.all([new AgentSecretStore(clients[1]!).rotate(), new AgentSecretStore(clients[2]!).rotate()]);
      const after = (await new AgentSecretStore(clients[0]!).read())!.record;
      // Two more rotations: the one made above is now previous or gone, never current.
      assert.notEqual(after.current.id, rotated.current.id);
      assert.notEqual(after.previous?.id, before.id);
    });

    it('signs tokens that verify with the same secret only, naming server, nodes and cluster', async () => {
      const secret = (await new AgentSecretStore(clients[0]!).ensure()).current;
      const [clusterUUID, serverUUID, node] = [randomUUID(), randomUUID(), randomUUID()];
      const now = new Date();
      const { token, expiresAtMs } = await signAgentToken(secret, { clusterUUID, serverUUID, nodeUUIDs: [node], lifetimeSeconds: 60, now });
      assert.equal(agentTokenSecretId(token), secret.id);
      const claims = await verifyAgentToken(token, secret, { clusterUUID, clockToleranceSeconds: 5 });
      assert.deepEqual([claims.serverUUID, claims.nodeUUIDs, claims.clusterUUID, claims.secretId, claims.expiresAtMs], [serverUUID, [node], clusterUUID, secret.id, expiresAtMs]);
      assert.equal(expiresAtMs, Math.floor(now.getTime() / 1000) * 1000 + 60_000);
      // Four seconds past expiry, within five of tolerance: still valid; six: not.
      await verifyAgentToken(token, secret, { clusterUUID, clockToleranceSeconds: 5, now: new Date(expiresAtMs + 4000) });
      await assert.rejects(
        verifyAgentToken(token, secret, { clusterUUID, clockToleranceSeconds: 5, now: new Date(expiresAtMs + 6000) }),
        (err: unknown) => err instanceof StrataError && err.code === 'UNAUTHENTICATED' && /expired/.test(err.message),
      );
      await assert.rejects(
        verifyAgentToken(token, { ...newAgentSecret(), id: secret.id }, { clusterUUID, clockToleranceSeconds: 5 }),
        (err: unknown) => err instanceof StrataError && err.code === 'UNAUTHENTICATED' && /signature/.test(err.message),
      );
      assert.throws(() => agentTokenSecretId('x.y.z'), (err: unknown) => err instanceof StrataError && err.code === 'UNAUTHENTICATED');
    });
  });
}

agentSecretCases('etcd', async () => {
  const etcd = await startEtcd();
  const clients = [0, 1, 2, 3].map(() => createEtcdClient([etcd.endpoint]));
  return {
    clients,
    close: async () => {
      for (const c of clients) c.close();
      await etcd.stop();
    },
  };
});

// One store, its callers' reads and commits interleaved at each await: the losers of the
// creation race read the winner's secret, and a rotation beaten to the record tries again.
agentSecretCases('the in-memory etcd', async () => {
  const memory = new MemoryEtcd();
  return { clients: [memory, memory, memory, memory], close: async () => {} };
});
