// The agent secret in a real etcd (created once however many daemons race, rotated by CAS), and
// the token format both daemons share.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { startEtcd, type TestEtcd } from '../test/helpers/etcd.js';
import {
  agentTokenSecretId,
  newAgentSecret,
  signAgentToken,
  verifyAgentToken,
} from './agent-token.js';
import { AgentSecretStore } from './etcd/agent-secret-store.js';
import { createEtcdClient } from './etcd/client.js';
import { StrataError } from './errors.js';

describe('agent secret and tokens', () => {
  let etcd: TestEtcd;
  let clients: Etcd3[];

  before(async () => {
    etcd = await startEtcd();
    clients = [0, 1, 2, 3].map(() => createEtcdClient([etcd.endpoint]));
  });
  after(async () => {
    for (const c of clients) c.close();
    await etcd.stop();
  });

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
