// TLS on NVMe/TCP end to end (docs/nvme-tcp-tls.md), Debian 13's kernel only (6.1 has no
// NVME_TARGET_TCP_TLS): a real etcd and control plane on the host, one storage guest running the
// agent and tlshd, one initiator guest playing the host with Debian 13's nvme-cli 2.13 and tlshd
// (both from the lab's trixie userland, test/e2e/lab/userland.ts). Through the REST API: a TLS host
// and its PSK, a volume for it, TLS required on the cluster. Then the host connects with
// `nvme connect --tls --tls-key=<its PSK>` and does I/O; without TLS, or with another PSK, it is
// refused. Disabled again, it connects without TLS. Each step waits for what the agent did in
// the storage guest's kernel (the port's addr_tsas, the keys in .nvme), not for time.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import type { VolumeWire as Volume } from '../../control-plane/volumes/volume-wire.js';
import { randomTlsPsk } from '../../lib/contract/nvme-tls-psk.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { adminApi } from '../helpers/admin-api.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { waitUntil } from '../helpers/wait.js';
import { readVolumePorts, startStorageGuest, stopHostSide, VolumePortForwards, type StorageGuest } from './cluster-lab.js';
import { freeLoopbackPortRange, labKernelLabel, labKernelSuite, nvmeHostArgs, prepareLab, prepareUserland, script, sha256, startGuest, StepTimer, type Guest, type RunResult } from './lab/index.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : labKernelSuite() === 'bookworm' ? "Debian 12's 6.1 has no NVMe/TCP TLS" : false;
const MiB = 1024 * 1024;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
/** Where host connections come from inside the storage guest (QEMU's gateway). */
const FORWARDED_SOURCE = '10.0.2.2';
const VOLUME_PORTS = 8;
const NVMET = '/sys/kernel/config/nvmet';

describe(`TLS on NVMe/TCP end to end (a storage guest with tlshd, an initiator with nvme-cli 2.13, QEMU, ${labKernelLabel()})`, { timeout: 600_000, skip }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: ControlPlaneProcess;
  let storage: StorageGuest | undefined;
  let initiator: Guest | undefined;
  let forwards: VolumePortForwards;
  let userland = '';
  let subsystemNQN = '';
  const { step, timings } = new StepTimer();
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  const { request, api } = adminApi(() => plane);
  const psk = randomTlsPsk();

  const target = (): Guest => {
    assert.ok(storage, 'the storage guest did not start');
    return storage.guest;
  };
  const host = (): Guest => {
    assert.ok(initiator, 'the initiator guest did not start');
    return initiator;
  };
  const sh = async (guest: Guest, command: string, ...args: string[]) => (await guest.runOk(['sh', '-c', command, 'sh', ...args], { timeoutMs: 30_000 })).stdout.trim();
  /** nvme-cli 2.13 (Debian 13) in the initiator: 2.3 has no --tls. */
  const nvme = (args: string[], timeoutMs = 60_000) => host().run(['sh', script('userland.sh'), userland, 'nvme', ...args], { timeoutMs });
  const agentLog = () => `--- agent log (${storage?.agentLogFile}):\n${storage?.agentLogTail(3000) ?? ''}`;

  async function connect(volume: Volume, ...extra: string[]): Promise<RunResult> {
    const port = (await readVolumePorts(client)).get(volume.UUID)?.port;
    assert.ok(port, `volume ${volume.UUID} has no port`);
    await forwards.sync();
    return nvme(['connect', '-t', 'tcp', '-a', FORWARDED_SOURCE, '-s', String(port), '-n', `${subsystemNQN}:vol:${volume.UUID}`, ...nvmeHostArgs(HOST), '--ctrl-loss-tmo', '2', ...extra]);
  }
  /** The host's controllers of the volume: `name|state|tls_key` (tls_key empty without TLS). */
  const controllers = (volume: Volume) =>
    sh(host(), 'for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "$1" ] && echo "${c##*/}|$(cat $c/state)|$(cat $c/tls_key 2>/dev/null)"; done; true', `${subsystemNQN}:vol:${volume.UUID}`);
  async function ioRoundTrip(volume: Volume): Promise<void> {
    const device = (await host().runOk(['sh', script('nvme-ns-by-uuid.sh'), volume.UUID, '30'], { timeoutMs: 45_000 })).stdout.trim();
    const data = randomBytes(MiB);
    await host().runOk(['dd', `of=${device}`, 'bs=1M', 'count=1', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: data, timeoutMs: 60_000 });
    const back = (await host().runOk(['dd', `if=${device}`, 'bs=1M', 'count=1', 'iflag=direct', 'status=none'], { timeoutMs: 60_000 })).stdoutBytes;
    assert.equal(sha256(back), sha256(data), 'the 1 MiB read back is what was written');
  }
  /** What the agent made of the volume's port in the storage guest's configfs. */
  const portSecurity = async (volume: Volume) => {
    const port = (await readVolumePorts(client)).get(volume.UUID)?.port;
    return sh(target(), 'echo "$(cat $1/addr_tsas) $(cat $1/addr_treq)"', `${NVMET}/ports/${port}`);
  };
  /** The PSK identities the storage guest's keyring holds for this host. */
  const targetKeys = async () => (await sh(target(), 'grep " psk " /proc/keys | grep -F -- "$1" | sed "s/.* psk *//"; true', HOST)).split('\n').filter(Boolean);

  before(async () => {
    const lab = await step('lab', () => prepareLab());
    userland = (await step('userland', () => prepareUserland())).root;
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    const portMin = await freeLoopbackPortRange(VOLUME_PORTS);
    plane = await startControlPlaneProcess({
      etcdEndpoint: etcd.endpoint,
      extraArgs: ['--volume-port-min', String(portMin), '--volume-port-max', String(portMin + VOLUME_PORTS - 1), '--creating-timeout-seconds', '300'],
    });
    subsystemNQN = (await api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
    const [s, i] = await step('boot two guests', () =>
      Promise.allSettled([
        startStorageGuest({
          name: 'tls-storage',
          drives: [{ serial: 'STRATA-TLS-DATA0', sizeMiB: 256 }],
          dataSerials: ['STRATA-TLS-DATA0'],
          etcdPort: etcd.clientPort,
          controlPlaneGrpcPort: Number(plane.grpcEndpoint.split(':')[1]),
          advertiseAddress: FORWARDED_SOURCE,
          volumePortMin: portMin,
          volumePortMax: portMin + VOLUME_PORTS - 1,
          agentArgs: ['--reconcile-interval-seconds', '5'],
          memoryMiB: 1024,
          lab,
          bootTimeoutMs: 180_000,
        }),
        startGuest({ name: 'tls-initiator', memoryMiB: 512, lab, bootTimeoutMs: 180_000 }),
      ]),
    );
    if (s?.status === 'fulfilled') storage = s.value;
    if (i?.status === 'fulfilled') initiator = i.value;
    for (const r of [s, i]) if (r?.status === 'rejected') throw r.reason;
    // tlshd on both ends: the kernel hands it every handshake (the target's before its agent
    // starts, so the agent's first inventory reports it).
    await step('tlshd', () => Promise.all([target(), host()].map((g) => g.runOk(['sh', script('tlshd.sh'), userland, '/tmp/tlshd.log'], { timeoutMs: 30_000 }))));
    await step('agent', () => storage!.startAgent({ timeoutMs: 180_000 }));
    forwards = new VolumePortForwards(client, () => storage?.guest);
    await step('node Active, tlshd reported', () =>
      waitUntil(async () => {
        const { servers } = await api<{ servers: { capabilities: Record<string, boolean> }[] }>('GET', '/kernelCapabilities');
        const { nodes } = await api<{ nodes: { state: string; statistics: { managedPhysicalStorage: string } }[] }>('GET', '/nodes');
        return servers[0]?.capabilities['tlshd'] && servers[0].capabilities['nvmeTcpTls'] && nodes[0]?.state === 'Active' && BigInt(nodes[0].statistics.managedPhysicalStorage) > 0n;
      }, 'the node Active, reporting NVMe/TCP TLS and tlshd', 180_000, 500),
    );
  }, { timeout: 420_000 });

  after(async () => {
    await initiator?.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    await storage?.stopAgent('TERM', 30_000).catch(() => undefined);
    mkdirSync(logDir, { recursive: true });
    if (storage) writeFileSync(join(logDir, `${storage.name}.${process.pid}.agent.log`), storage.agentLogTail(2_000_000));
    for (const g of [storage?.guest, initiator]) {
      const log = await g?.run(['cat', '/tmp/tlshd.log'], { timeoutMs: 10_000 }).catch(() => undefined);
      if (g && log) writeFileSync(join(logDir, `${g === initiator ? 'tls-initiator' : 'tls-storage'}.${process.pid}.tlshd.log`), log.stdout);
    }
    await Promise.all([storage?.guest.stop(), initiator?.stop()]);
    await stopHostSide({ plane, client, etcd, logDir, suite: 'nvme-tcp-tls', timings });
  }, { timeout: 120_000 });

  it('TLS required: the host connects with --tls and its PSK and does I/O; without TLS or with another PSK it is refused; disabled, it connects in clear', { timeout: 420_000 }, async () => {
    assert.equal((await request('POST', '/tlsHosts', { name: 'host1', hostNQN: HOST, psk })).status, 200);
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'tls-vol', size: '32MiB', acl: { values: [HOST] } });
    const volume = await step('volume Available', () =>
      waitUntil(async () => {
        const v = await api<Volume>('GET', `/volumes/${created.UUID}`);
        assert.notEqual(v.state, 'Failed', agentLog());
        return v.state === 'Available' ? v : undefined;
      }, 'the volume Available', 180_000, 500),
    );
    assert.equal(await portSecurity(volume), 'none not specified', 'a plain port before TLS is required');

    assert.deepEqual(await request('POST', '/cluster/nvmeTcpTls/enable', {}).then((r) => [r.status, r.json]), [200, {}]);
    assert.deepEqual(await api('GET', '/cluster/nvmeTcpTls'), { mode: 'Required' });
    await step('port requires TLS, PSKs in .nvme', () =>
      waitUntil(async () => ((await portSecurity(volume)) === 'tls1.3 required' && (await targetKeys()).length === 2 ? true : undefined), `the agent to require TLS on the port and insert the PSKs\n${agentLog()}`, 60_000, 500),
    );
    const identities = await targetKeys();
    assert.deepEqual(identities.map((k) => k.slice(0, 8)).sort(), ['NVMe0R01', 'NVMe1R01'], 'identity versions 0 and 1');

    const plain = await step('refused without TLS', () => connect(volume));
    assert.notEqual(plain.code, 0, 'a connection without TLS is refused');
    const wrong = await step('refused with another PSK', () => connect(volume, '--tls', `--tls-key=${randomTlsPsk()}`));
    assert.notEqual(wrong.code, 0, 'a handshake with another PSK fails');
    assert.equal(await controllers(volume), '', 'no controller from the refused attempts');

    const tls = await step('connect with TLS', () => connect(volume, '--tls', `--tls-key=${psk}`));
    assert.equal(tls.code, 0, `nvme connect --tls: ${tls.stderr}\n${agentLog()}`);
    const [name, state, tlsKey] = (await controllers(volume)).split('|');
    assert.ok(name && state === 'live' && tlsKey, `a live controller over TLS (tls_key ${tlsKey})`);
    await step('I/O over TLS', () => ioRoundTrip(volume));
    await nvme(['disconnect', '-n', `${subsystemNQN}:vol:${volume.UUID}`], 30_000);

    assert.deepEqual(await request('POST', '/cluster/nvmeTcpTls/disable', {}).then((r) => [r.status, r.json]), [200, {}]);
    await step('port plain again, PSKs gone', () =>
      waitUntil(async () => ((await portSecurity(volume)) === 'none not specified' && (await targetKeys()).length === 0 ? true : undefined), `the agent to stop requiring TLS\n${agentLog()}`, 60_000, 500),
    );
    const clear = await step('connect in clear', () => connect(volume));
    assert.equal(clear.code, 0, `nvme connect without TLS once disabled: ${clear.stderr}`);
    await ioRoundTrip(volume);
  });
});
