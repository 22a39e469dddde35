// Cluster bootstrap: three control plane processes racing on an empty etcd (etcd alone), and what
// bootstrap does with its store (joining, finishing a crashed bootstrap, the CA) on a real etcd
// and on the in-memory fake (test/fakes/memory-etcd.ts), where a bootstrap losing its race to
// another one let in before its commit (MemoryEtcd.interleave) runs too.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { existsSync, mkdtempSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { createEtcdClient, parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { kvOf, type KvClient } from '../../lib/etcd/kv.js';
import { ClusterCaStore } from '../../lib/etcd/cluster-ca-store.js';
import { newClusterCa } from '../../lib/tls/cluster-ca.js';
import type { ClusterRecord, CredentialRecord, ProjectRecord } from '../../lib/records.js';
import { MemoryEtcd } from '../../test/fakes/memory-etcd.js';
import { startEtcd, startEtcdWithClient, type TestEtcd } from '../../test/helpers/etcd.js';
import { removeDir, startControlPlaneProcess } from '../../test/helpers/processes.js';
import { ADMIN_TOKEN_FILE, ROOT_KEY_FILE, bootstrapCluster, type BootstrapOptions } from './bootstrap.js';
import { BootstrapStore } from './bootstrap-store.js';

const logger = pino({ level: 'silent' });

describe('cluster bootstrap', () => {
  let etcd: TestEtcd;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd.stop();
  });

  it('three control planes started together on an empty etcd create exactly one cluster', async () => {
    const planes = await Promise.all([0, 1, 2].map(() => startControlPlaneProcess({ etcdEndpoint: etcd.endpoint })));
    try {
      const client = createEtcdClient([etcd.endpoint]);
      try {
        const cluster = parseRecord<ClusterRecord>(keys.cluster(), await client.get(keys.cluster()).string());
        assert.ok(cluster, 'cluster record exists');
        assert.match(cluster.UUID, /^[0-9a-f-]{36}$/);
        assert.equal(cluster.clusterName, 'strata');
        assert.equal(cluster.supportedMaxReplicas, 3);
        assert.equal(cluster.subsystemNQN, `nqn.2024-01.io.strata:cluster:${cluster.UUID}`);
        const projects = await client.getAll().prefix(keys.projectsPrefix()).strings();
        assert.deepEqual(Object.keys(projects).sort(), [keys.project('default'), keys.project('system')]);
        for (const value of Object.values(projects)) assert.equal((JSON.parse(value) as ProjectRecord).builtIn, true);
        const credential = parseRecord<CredentialRecord>('', await client.get(keys.credential('system', 'root')).string());
        assert.equal(credential?.type, 'RS256PubKey');
        assert.match(credential?.payload ?? '', /BEGIN PUBLIC KEY/);

        // Exactly one instance won: it alone holds the root key (0600) and the admin token.
        const winners = planes.filter((p) => existsSync(join(p.stateDir, ADMIN_TOKEN_FILE)));
        assert.equal(winners.length, 1, 'one admin token');
        const winner = winners[0]!;
        assert.equal(cluster.bootstrappedBy, winner.instanceId);
        assert.equal(statSync(join(winner.stateDir, ROOT_KEY_FILE)).mode & 0o777, 0o600);
        assert.equal(statSync(join(winner.stateDir, ADMIN_TOKEN_FILE)).mode & 0o777, 0o600);
        for (const p of planes) {
          assert.equal(existsSync(join(p.stateDir, `${ROOT_KEY_FILE}.pending`)), false, 'no pending key left behind');
          if (p !== winner) assert.equal(existsSync(join(p.stateDir, ROOT_KEY_FILE)), false, 'losers keep no key');
        }

        // The admin token works against every instance, and all see the same cluster.
        for (const p of planes) {
          const res = await fetch(`${p.apiUrl}/api/v2/controlPlanes`, { headers: { Authorization: `Bearer ${winner.adminToken()}` } });
          assert.equal(res.status, 200);
          const body = (await res.json()) as { controlPlanes: { instanceId: string }[] };
          assert.deepEqual(body.controlPlanes.map((c) => c.instanceId).sort(), planes.map((q) => q.instanceId).sort());
        }
      } finally {
        client.close();
      }
    } finally {
      for (const p of planes) {
        assert.equal(await p.stop(), 0, 'graceful stop exits 0');
        removeDir(p.stateDir);
      }
    }
  });

  bootstrapStoreCases('etcd', {
    shared: async () => {
      const client = createEtcdClient([etcd.endpoint]);
      return { client, close: async () => client.close() };
    },
    fresh: startEtcdWithClient,
  });
});

const inMemory = async (): Promise<Store> => ({ client: new MemoryEtcd(), close: async () => {} });
bootstrapStoreCases('the in-memory etcd', { shared: inMemory, fresh: inMemory });

describe('bootstrap on the in-memory etcd, a lost race', () => {
  it('a bootstrap whose transaction another one beat joins the winner\'s cluster and keeps no key', async () => {
    const memory = new MemoryEtcd();
    const [stateDir, winnerDir] = [mkdtempSync(join(tmpdir(), 'strata-bootstrap-')), mkdtempSync(join(tmpdir(), 'strata-bootstrap-'))];
    const options = { logger, clusterName: 'x', subsystemNqnPrefix: 'nqn.2024-01.io.strata', adminTokenTtlDays: 1 };
    try {
      let winner: Awaited<ReturnType<typeof bootstrapCluster>> | undefined;
      memory.interleave = async () => {
        memory.interleave = undefined;
        winner = await bootstrapCluster({ ...options, store: new BootstrapStore(memory), instanceId: 'b', stateDir: winnerDir });
      };
      const loser = await bootstrapCluster({ ...options, store: new BootstrapStore(memory), instanceId: 'a', stateDir });
      assert.equal(winner?.created, true);
      assert.equal(loser.created, false);
      assert.equal(loser.cluster.UUID, winner.cluster.UUID);
      assert.equal(loser.adminTokenPath, undefined, 'no admin token for the loser');
      assert.equal(existsSync(join(stateDir, ROOT_KEY_FILE)), false, 'losers keep no key');
      assert.equal(existsSync(join(stateDir, `${ROOT_KEY_FILE}.pending`)), false, 'no pending key left behind');
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
      rmSync(winnerDir, { recursive: true, force: true });
    }
  });
});

/** A store the cases bootstrap on, and how to let it go. */
interface Store {
  readonly client: KvClient;
  close(): Promise<void>;
}

/** Where the cases run: `shared`, the suite's store (on etcd, the one three control planes bootstrapped); `fresh`, an empty one. */
interface Backend {
  shared(): Promise<Store>;
  fresh(): Promise<Store>;
}

/** What bootstrap does with its store alone (no control plane process): on etcd and on the fake. */
function bootstrapStoreCases(name: string, backend: Backend): void {
  describe(`bootstrap on ${name}`, () => {
    it('a restart joins the existing cluster and keeps its identity', async () => {
      await onStore(backend.shared, async (options) => {
        const before = await bootstrapCluster(options);
        const again = await bootstrapCluster({ ...options, clusterName: 'other' });
        assert.equal(again.created, false);
        assert.equal(again.cluster.UUID, before.cluster.UUID);
        assert.equal(again.cluster.clusterName, before.cluster.clusterName, 'clusterName is fixed at bootstrap');
      });
    });

    it('finishes a bootstrap that crashed between the etcd transaction and the key files', async () => {
      await onStore(backend.fresh, async (options) => {
        const { stateDir } = options;
        const first = await bootstrapCluster(options);
        assert.equal(first.created, true);
        // The state right after the transaction committed: key still pending, no token.
        renameSync(join(stateDir, ROOT_KEY_FILE), join(stateDir, `${ROOT_KEY_FILE}.pending`));
        rmSync(join(stateDir, ADMIN_TOKEN_FILE));
        const second = await bootstrapCluster(options);
        assert.equal(second.created, false);
        assert.equal(second.adminTokenPath, join(stateDir, ADMIN_TOKEN_FILE));
        assert.ok(existsSync(join(stateDir, ROOT_KEY_FILE)));
        assert.ok(!existsSync(join(stateDir, `${ROOT_KEY_FILE}.pending`)));

        // A pending key that does not match the stored credential (a lost race) is discarded.
        await onStore(backend.fresh, async (other) => {
          await bootstrapCluster(other);
          renameSync(join(other.stateDir, ROOT_KEY_FILE), join(stateDir, `${ROOT_KEY_FILE}.pending`));
          await bootstrapCluster(options);
          assert.ok(!existsSync(join(stateDir, `${ROOT_KEY_FILE}.pending`)));
        });
      });
    });

    it('creates the cluster CA in the bootstrap transaction; an older cluster without one gets exactly one from racing control planes', async () => {
      await onStore(backend.fresh, async (options, client) => {
        const created = await bootstrapCluster(options);
        const clusterKv = (await kvOf(client).get(keys.cluster()))!;
        const caKv = (await kvOf(client).get(keys.clusterCa()))!;
        assert.equal(caKv.createRevision, clusterKv.createRevision, 'the CA was written in the same transaction as the cluster record');
        const ca = (await new ClusterCaStore(client).read())!;
        assert.match(new X509Certificate(ca.certificate).subject, new RegExp(created.cluster.UUID));
        assert.ok(new X509Certificate(ca.certificate).ca);
        assert.ok(new X509Certificate(ca.certificate).checkPrivateKey(createPrivateKey(ca.privateKey)));

        // A cluster bootstrapped before the CA existed: racing creators agree on one.
        await kvOf(client).commit({ guards: [], writes: [{ delete: keys.clusterCa() }] });
        const raced = await Promise.all([0, 1, 2].map(() => new ClusterCaStore(client).ensure(() => newClusterCa(created.cluster.UUID))));
        assert.equal(new Set(raced.map((r) => r.certificate)).size, 1);
        assert.equal((await new ClusterCaStore(client).read())!.certificate, raced[0]!.certificate);
      });
    });
  });
}

/**
 * Runs `body` with the bootstrap options of instance 'a' on a store `open` gives and on a fresh
 * state directory; lets both go after, whatever `body` did.
 */
async function onStore(open: () => Promise<Store>, body: (options: BootstrapOptions, client: KvClient) => Promise<void>): Promise<void> {
  const { client, close } = await open();
  const stateDir = mkdtempSync(join(tmpdir(), 'strata-bootstrap-'));
  try {
    await body({ store: new BootstrapStore(client), logger, instanceId: 'a', clusterName: 'x', subsystemNqnPrefix: 'nqn.2024-01.io.strata', stateDir, adminTokenTtlDays: 1 }, client);
  } finally {
    await close();
    rmSync(stateDir, { recursive: true, force: true });
  }
}
