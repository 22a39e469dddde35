import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { identityFileName, loadOrCreateIdentity } from './identity-store.js';

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

function tempStateDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'strata-identity-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'state'); // not created yet: the store creates it
}

describe('loadOrCreateIdentity', () => {
  it('creates a server UUID and one UUID per node, persisted with mode 0600', async (t) => {
    const stateDir = tempStateDir(t);
    const identity = await loadOrCreateIdentity(stateDir, 2);
    assert.match(identity.serverUUID, uuid);
    assert.equal(identity.nodeUUIDs.length, 2);
    for (const n of identity.nodeUUIDs) assert.match(n, uuid);
    assert.notEqual(identity.nodeUUIDs[0], identity.nodeUUIDs[1]);
    const path = join(stateDir, identityFileName);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const stored = JSON.parse(readFileSync(path, 'utf8')) as { serverUUID: string; nodeUUIDs: string[] };
    assert.equal(stored.serverUUID, identity.serverUUID);
    assert.deepEqual(stored.nodeUUIDs, identity.nodeUUIDs);
    assert.deepEqual(readdirSync(stateDir), [identityFileName], 'no temp file left behind');
  });

  it('takes the configured server UUID (POST /api/v2/servers) on first start; refuses a state dir holding another', async (t) => {
    const stateDir = tempStateDir(t);
    const given = '6d8a4c57-1a2b-4c3d-8e9f-0a1b2c3d4e5f';
    const identity = await loadOrCreateIdentity(stateDir, 1, given);
    assert.equal(identity.serverUUID, given);
    assert.deepEqual(await loadOrCreateIdentity(stateDir, 1, given), identity, 'the same setting again: the same identity');
    assert.deepEqual(await loadOrCreateIdentity(stateDir, 1), identity, 'the setting removed: the identity stays');
    await assert.rejects(loadOrCreateIdentity(stateDir, 1, '00000000-0000-4000-8000-000000000000'), /serverUuid 00000000-0000-4000-8000-000000000000 differs from the server UUID/);
  });

  it('returns the same identity after a restart', async (t) => {
    const stateDir = tempStateDir(t);
    const first = await loadOrCreateIdentity(stateDir, 1);
    const before = readFileSync(join(stateDir, identityFileName), 'utf8');
    const second = await loadOrCreateIdentity(stateDir, 1);
    assert.deepEqual(second, first);
    assert.equal(readFileSync(join(stateDir, identityFileName), 'utf8'), before, 'file not rewritten');
  });

  it('adds node UUIDs when nodesPerServer grows and never replaces existing ones', async (t) => {
    const stateDir = tempStateDir(t);
    const one = await loadOrCreateIdentity(stateDir, 1);
    const three = await loadOrCreateIdentity(stateDir, 3);
    assert.equal(three.serverUUID, one.serverUUID);
    assert.equal(three.nodeUUIDs.length, 3);
    assert.equal(three.nodeUUIDs[0], one.nodeUUIDs[0]);
    // Lowering the count reports fewer nodes but keeps the others for later.
    const back = await loadOrCreateIdentity(stateDir, 2);
    assert.deepEqual(back.nodeUUIDs, three.nodeUUIDs.slice(0, 2));
    const again = await loadOrCreateIdentity(stateDir, 3);
    assert.deepEqual(again.nodeUUIDs, three.nodeUUIDs);
  });

  it('refuses a corrupt identity file instead of minting a new identity', async (t) => {
    const stateDir = tempStateDir(t);
    await loadOrCreateIdentity(stateDir, 1);
    writeFileSync(join(stateDir, identityFileName), '{"version":1,"serverUUID":"nope"');
    await assert.rejects(loadOrCreateIdentity(stateDir, 1), /identity file .* is not valid JSON/);
    writeFileSync(join(stateDir, identityFileName), '{"version":1,"serverUUID":"nope","nodeUUIDs":[]}');
    await assert.rejects(loadOrCreateIdentity(stateDir, 1), /identity file .* is invalid/);
  });
});
