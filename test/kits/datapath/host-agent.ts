// Tests only: what a host test of the whole agent's data path needs around it — a real etcd
// holding the cluster record, a fake control plane receiving VolumeReports, a fake sysfs and a
// work directory (state, pool, plain-directory nvmet root) — and the agent's config for them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '../../../lib/etcd/client.js';
import { keys } from '../../../lib/etcd/keys.js';
import type { ClusterRecord } from '../../../lib/records.js';
import { startEtcd, type TestEtcd } from '../../helpers/etcd.js';
import { createFakeSysfs, type FakeSysfs } from '../../helpers/sysfs-fixture.js';
import { loadAgentConfig, type AgentConfig } from '../../../agent/config.js';
import { startFakeControlPlane, type FakeControlPlane } from './fake-control-plane.js';

export interface HostAgentHarness {
  readonly etcd: TestEtcd;
  readonly client: Etcd3;
  readonly plane: FakeControlPlane;
  readonly sysfs: FakeSysfs;
  readonly work: string;
  /** The nvmet root tests pass to emulatedDataPath (a plain directory). */
  readonly nvmetRoot: string;
  /** The agent's config for this harness, plus `extraArgs`. */
  config(extraArgs?: readonly string[]): AgentConfig;
  close(): Promise<void>;
}

export async function startHostAgentHarness(cluster: ClusterRecord, name: string): Promise<HostAgentHarness> {
  const etcd = await startEtcd();
  const client = createEtcdClient([etcd.endpoint]);
  await client.put(keys.cluster()).value(JSON.stringify(cluster));
  const plane = await startFakeControlPlane(client, cluster.UUID);
  const sysfs = createFakeSysfs();
  const work = mkdtempSync(join(tmpdir(), `strata-${name}-`));
  return {
    etcd,
    client,
    plane,
    sysfs,
    work,
    nvmetRoot: join(work, 'nvmet'),
    config: (extraArgs = []) =>
      loadAgentConfig({
        argv: [
          '--etcd-endpoints', etcd.endpoint,
          '--control-plane-endpoints', plane.endpoint,
          '--state-dir', join(work, 'state'),
          '--sysfs-root', sysfs.root,
          '--mounts-path', sysfs.mountsPath,
          '--swaps-path', sysfs.swapsPath,
          '--pool-dir', join(work, 'pool'),
          '--discovery-port', '0', '--discovery-listen-address', '127.0.0.1',
          ...extraArgs,
        ],
        env: {},
      }),
    close: async () => {
      plane.kill();
      client.close();
      await etcd.stop(); // also after a test stopped it
      sysfs.cleanup();
      rmSync(work, { recursive: true, force: true });
    },
  };
}
