// Replication end to end (issue 11, docs/replication.md), all through the REST API: a real etcd
// and control plane on this host, three storage guests running the real agent on Debian's kernel
// (nvmet, md raid1, device-mapper, the NVMe/TCP initiator), and an initiator guest playing the
// host with nvme-cli and native multipath.
//
// Networking: guests have QEMU user networking only, so every node is 10.0.2.2 to the others.
// A volume's port is the same number on every node, so this host forwards a distinct port per
// node to it (node i: portMin + i * VOLUME_PORTS + offset → the guest's volume port); the host
// connects one path per node by hand (nvme connect-all through discovery would be handed the
// same address and port for every node here). Each node's replication port (4421 in its guest)
// is forwarded likewise and advertised as 10.0.2.2:<forward>, which is how primaries reach it.
//
// Scenarios build on each other, guests stay up; every step has a timeout.
import assert from 'node:assert/strict';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import type { NodeWire } from '../../control-plane/nodes/nodes-service.js';
import type { VolumeWire as Volume } from '../../control-plane/volumes/volume-wire.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import { keys } from '../../lib/etcd/keys.js';
import type { ReplicaSetRecord } from '../../lib/records.js';
import { REPLICA_DATA_OFFSET_BYTES } from '../../lib/replication.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { adminApi } from '../helpers/admin-api.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { waitUntil } from '../helpers/wait.js';
import { startStorageGuest, storageLogs, type StorageGuest, type StorageGuestOptions } from './cluster-lab.js';
import { backingDigest as backingDigestOf, connectPaths, killStorageGuest, startAckedWrites } from './replication-host.js';
import { freeLoopbackPort, freeLoopbackPortRange, labKernelLabel, labKernelSuite, nvmeHostArgs, prepareLab, script, startGuest, StepTimer, type Guest } from './lab/index.js';
import { volumeFailedError } from './volume-failure.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const MiB = 1024 * 1024;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const FROM_GUESTS = '10.0.2.2';
const VOLUME_PORTS = 16;
const DRIVE_MIB = 384;
const VOLUME_MIB = 64;
const NAMES = ['rep-a', 'rep-b', 'rep-c'] as const;
const PERMANENT_FAILURE_S = 20;
/**
 * The agent-kill scenarios at the end run on Debian 13's 6.12 only: what they exercise is the
 * agent's sequence (hand-over, exit fence, restart) over sysfs and configfs interfaces both
 * kernels share, and at about a minute each they would push CI's run past its hour on both.
 */
const AGENT_KILLS_SKIP = labKernelSuite() === 'bookworm' ? "the agent-kill scenarios run on 6.12 only (CI's time; the kernel interfaces are the same on 6.1)" : false;

describe(`replication end to end (three storage guests, one initiator, QEMU, ${labKernelLabel()})`, { timeout: 1_500_000, skip }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: ControlPlaneProcess;
  const storage: StorageGuest[] = [];
  let initiator: Guest | undefined;
  let subsystemNQN = '';
  let portMin = 0;
  const { step, timings } = new StepTimer();
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  /** Drive images and agent state that outlive a guest: a killed server boots again with its data. */
  const persistDir = mkdtempSync(join(tmpdir(), 'strata-rep-e2e-'));
  const guestOptions: StorageGuestOptions[] = [];
  const proxies: { etcd: TcpProxy; controlPlane: TcpProxy }[] = [];
  let planeArgs: string[] = [];
  /** Logs of control planes killed by a scenario (written out with the last one's). */
  const killedPlaneLogs: string[] = [];

  // ---- the API -------------------------------------------------------------------------------
  const { api } = adminApi(() => plane);
  const getVolume = (uuid: string) => api<Volume>('GET', `/volumes/${uuid}`);
  const replicaSet = async (uuid: string): Promise<ReplicaSetRecord> => JSON.parse((await client.get(keys.replicaSet(uuid)).string()) ?? 'null') as ReplicaSetRecord;
  /** The replica set once its epoch moved past `epoch` (a copy was promoted). */
  const promotedAfter = (uuid: string, epoch: number, timeoutMs: number): Promise<ReplicaSetRecord> =>
    until('new primary in etcd', async () => {
      const s = await replicaSet(uuid);
      return s.epoch > epoch && s;
    }, timeoutMs);
  /** The promotion started the mirror through md's sysfs (an `md_<volume>` array), not mdadm (docs/replication.md). */
  const assertPromotedThroughSysfs = (nodeUUID: string) => {
    const log = storageOf(nodeUUID).agentLogTail(2_000_000);
    assert.match(log, /"array":"md_[0-9a-f]{24}"[^\n]*"msg":"replicated volume assembled"/, 'the new primary assembled the mirror through md sysfs');
    assert.doesNotMatch(log, /could not assemble the mirror through sysfs/);
  };
  const agentLogs = () => storageLogs(storage);
  /** Polls every 0.5 s; a timeout names what it waited for, with the agents' recent logs. */
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> =>
    waitUntil(probe, () => `${what}\n${agentLogs()}`, timeoutMs, 500);

  // ---- guests --------------------------------------------------------------------------------
  const host = (): Guest => {
    assert.ok(initiator, 'the initiator guest did not start');
    return initiator;
  };
  const indexOf = (nodeUUID: string) => storage.findIndex((s) => s.nodeUUID() === nodeUUID);
  const storageOf = (nodeUUID: string): StorageGuest => {
    const found = storage[indexOf(nodeUUID)];
    assert.ok(found, `no storage guest serves node ${nodeUUID}`);
    return found;
  };
  const sh = async (guest: Guest, command: string, timeoutMs = 60_000) => (await guest.runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
  /** This host's port that reaches `port` on node i's guest. */
  const pathPort = (i: number, port: number) => portMin + i * VOLUME_PORTS + (port - portMin);
  const nqnOf = (uuid: string) => volumeSubsystemNQN(subsystemNQN, uuid);

  /** Forwards the volume's port of every node that serves it (every node in nodeList) and connects the host to each path. */
  async function connectAllPaths(volume: Volume): Promise<string> {
    const port = (JSON.parse((await client.get(keys.volume(volume.UUID)).string())!) as { placement: { port: number } }).placement.port;
    volumePort = port;
    const nodes = storage.map((s, index) => ({ index, guest: s.guest })).filter(({ index }) => volume.nodeList.includes(storage[index]!.nodeUUID()));
    return connectPaths({ host: host(), nodes, port, subsystemNQN: nqnOf(volume.UUID), volumeUUID: volume.UUID, hostNQN: HOST, pathPort });
  }
  /** ANA state of the host's path to each node, by the node's index (from the path's port). */
  async function pathStates(uuid: string): Promise<Map<number, string>> {
    const listing = 'for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "$1" ] || continue; for p in $c/nvme*c*n*; do [ -e "$p/ana_state" ] && echo "$(cat $c/address)|$(cat $c/state)|$(cat $p/ana_state)"; done; done';
    const out = await sh(host(), `set -- ${nqnOf(uuid)}; ${listing}`);
    const states = new Map<number, string>();
    for (const line of out.split('\n').filter(Boolean)) {
      const [address, ctrlState, ana] = line.split('|');
      const port = Number(/trsvcid=(\d+)/.exec(address ?? '')?.[1]);
      states.set(Math.floor((port - portMin) / VOLUME_PORTS), `${ctrlState}/${ana}`);
    }
    return states;
  }
  /**
   * Samples the host's paths to the volume every 0.2 s from `since` until the path of node index
   * `i` left the optimized state and the replica set's epoch moved past `epoch` (or `limitMs`):
   * when each happened, and how many samples showed two optimized paths.
   */
  async function watchPaths(uuid: string, i: number, epoch: number, since: number, limitMs: number): Promise<{ fencedAt: number; promotedAt: number; twoOptimized: number; samples: string[] }> {
    let fencedAt = 0;
    let promotedAt = 0;
    let twoOptimized = 0;
    const samples: string[] = [];
    while (Date.now() - since < limitMs && !(fencedAt && promotedAt)) {
      const states = await pathStates(uuid);
      const optimized = [...states].filter(([, st]) => st.endsWith('/optimized')).map(([n]) => n);
      samples.push(`${Date.now() - since}ms:${[...states].map(([n, st]) => `${n}=${st}`).join(',')}`);
      if (optimized.length > 1) twoOptimized += 1;
      if (!fencedAt && !optimized.includes(i)) fencedAt = Date.now();
      if (!promotedAt && (await replicaSet(uuid)).epoch > epoch) promotedAt = Date.now();
      await sleep(200);
    }
    return { fencedAt, promotedAt, twoOptimized, samples };
  }
  /** The volume's data as stored in one node's backing file (after md's data offset). */
  const backingDigest = (nodeUUID: string, uuid: string, mib: number): Promise<string> => backingDigestOf(storageOf(nodeUUID), uuid, mib);
  /** Read I/Os the primary sent to its remote legs (the replicas' copies over NVMe/TCP). */
  /** Sectors read so far from the primary's local leg (the loop device over its backing) and from its remote legs. */
  async function legReadSectors(nodeUUID: string, volumeUUID: string): Promise<{ local: number; remote: number }> {
    const out = await sh(
      storageOf(nodeUUID).guest,
      `for s in /sys/class/nvme-subsystem/nvme-subsys*; do case "$(cat $s/subsysnqn)" in *:rep:*) for b in $s/nvme*n1; do [ -e "$b" ] && echo "remote $(awk '{print $3}' /sys/block/\${b##*/}/stat)"; done;; esac; done; ` +
        `for l in /sys/block/loop*; do case "$(cat $l/loop/backing_file 2>/dev/null)" in */${volumeUUID}.*) echo "local $(awk '{print $3}' $l/stat)";; esac; done; true`,
    );
    const sum = (kind: string) => out.split('\n').filter((l) => l.startsWith(`${kind} `)).reduce((n, l) => n + Number(l.split(' ')[1]), 0);
    return { local: sum('local'), remote: sum('remote') };
  }

  /**
   * Starts the acknowledged-write log on the host and waits until writes flow. `noneLost()` stops
   * it and asserts that no write failed on the host and every acknowledged write reads back.
   */
  async function ackedWrites(device: string, tag: string) {
    const writes = startAckedWrites(host(), device, tag);
    await until('writes flowing', async () => (await writes.acked()) > 50, 60_000);
    return {
      ...writes,
      async noneLost(): Promise<number> {
        return step(`verify every acknowledged write (${tag})`, async () => {
          const { checked, bad, errors } = await writes.stopAndVerify();
          assert.equal(errors, '', 'no write failed on the host');
          assert.equal(bad, 0, 'every acknowledged write reads back');
          return checked;
        });
      },
    };
  }
  /** Boots a killed storage guest again with its drives and identity, restores its forwards, starts its agent. */
  async function rebootGuest(nodeUUID: string): Promise<void> {
    const i = indexOf(nodeUUID);
    const rebooted = await startStorageGuest(guestOptions[i]!);
    storage[i] = rebooted;
    await rebooted.startAgent({ timeoutMs: 240_000 });
    assert.equal(rebooted.nodeUUID(), nodeUUID, 'the same node after the reboot');
    await rebooted.guest.addHostForward(pathPort(i, volumePort), volumePort);
  }
  /** Kills a storage guest's QEMU at once (the server loses power). */
  const killGuest = (nodeUUID: string): Promise<void> => killStorageGuest(storageOf(nodeUUID));

  // ---- setup ---------------------------------------------------------------------------------
  before(async () => {
    const lab = await step('lab', () => prepareLab());
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    portMin = await freeLoopbackPortRange(VOLUME_PORTS * NAMES.length);
    planeArgs = [
      '--volume-port-min', String(portMin), '--volume-port-max', String(portMin + VOLUME_PORTS - 1), '--creating-timeout-seconds', '300',
      // Short, for the last scenario; the 3-copy volume of the others has no spare node to move to.
      '--permanent-failure-timeout-seconds', String(PERMANENT_FAILURE_S),
    ];
    plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, extraArgs: planeArgs });
    subsystemNQN = (await api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
    const grpcPort = Number(plane.grpcEndpoint.split(':')[1]);
    // Each server reaches etcd and the control plane through its own proxy: cutting both
    // partitions it from the cluster while its data path (volume and replication ports) stays up.
    for (const _ of NAMES) proxies.push({ etcd: await startTcpProxy('127.0.0.1', etcd.clientPort), controlPlane: await startTcpProxy('127.0.0.1', grpcPort) });
    const started = await step('boot four guests', () =>
      Promise.allSettled([
        ...NAMES.map(async (name, i) => {
          const stateDir = join(persistDir, `${name}-state`);
          mkdirSync(stateDir, { recursive: true });
          const options: StorageGuestOptions = {
            name,
            drives: [{ serial: `STRATA-R${i}-DATA0`, sizeMiB: DRIVE_MIB, image: join(persistDir, `${name}-data0.img`) }],
            dataSerials: [`STRATA-R${i}-DATA0`],
            etcdPort: proxies[i]!.etcd.port,
            controlPlaneGrpcPort: proxies[i]!.controlPlane.port,
            advertiseAddress: FROM_GUESTS,
            replicationHostPort: await freeLoopbackPort(),
            volumePortMin: portMin,
            volumePortMax: portMin + VOLUME_PORTS - 1,
            agentStateDir: stateDir,
            agentLogFile: join(persistDir, 'logs', `${name}.agent.log`),
            // A 20 s lease: an emulated guest busy resynchronizing can miss keep-alives for
            // seconds, and a lost lease moves the primary mid-scenario (seen in CI with 10 s).
            agentArgs: ['--reconcile-interval-seconds', '5', '--log-level', 'debug', '--lease-ttl-seconds', '20'],
            memoryMiB: 768,
            lab,
            bootTimeoutMs: 240_000,
          };
          guestOptions[i] = options;
          return startStorageGuest(options);
        }),
        startGuest({ name: 'rep-host', memoryMiB: 512, lab, bootTimeoutMs: 240_000 }),
      ]),
    );
    for (const r of started.slice(0, NAMES.length)) if (r.status === 'fulfilled') storage.push(r.value as StorageGuest);
    storage.sort((x, y) => NAMES.indexOf(x.name as (typeof NAMES)[number]) - NAMES.indexOf(y.name as (typeof NAMES)[number]));
    const last = started[NAMES.length];
    if (last?.status === 'fulfilled') initiator = last.value as Guest;
    for (const r of started) if (r.status === 'rejected') throw r.reason;
    await step('start three agents', () => Promise.all(storage.map((s) => s.startAgent({ timeoutMs: 240_000 }))));
    await step('three nodes Active', () =>
      waitUntil(async () => {
        const list = (await api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes;
        return list.length === 3 && list.every((n) => n.state === 'Active' && BigInt(n.statistics.managedPhysicalStorage) > 0n);
      }, 'three nodes Active with capacity in the API', 180_000, 500),
    );
  }, { timeout: 600_000 });

  after(async () => {
    await initiator?.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    mkdirSync(logDir, { recursive: true });
    for (const s of storage) writeFileSync(join(logDir, `${s.name}.${process.pid}.agent.log`), s.agentLogTail(2_000_000));
    await Promise.all([...storage.map((s) => s.stop().catch(() => undefined)), initiator?.stop()]);
    if (plane) {
      writeFileSync(join(logDir, `replication-control-plane.${process.pid}.log`), [...killedPlaneLogs, ...plane.logs.map((l) => JSON.stringify(l))].join('\n'));
      await plane.stop();
      removeDir(plane.stateDir);
    }
    for (const p of proxies) await Promise.all([p.etcd.close(), p.controlPlane.close()]);
    client?.close();
    await etcd?.stop();
    removeDir(persistDir);
    console.log(`# replication e2e timings: ${timings.join(', ')}`);
  }, { timeout: 180_000 });

  // ---- scenarios -----------------------------------------------------------------------------
  let volume: Volume;
  let device = '';
  let staleNode = '';
  let volumePort = 0;
  let oldPrimary = '';
  let survivor = '';
  /** Acknowledged-write logs whose blocks must read back after every later step. */
  const verifiedLogs: { checked: number }[] = [];

  it('3 copies: every acknowledged write is on all three backings; reads stay on the primary', async () => {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'mirror', size: `${VOLUME_MIB}MiB`, replicaCount: 3, acl: { values: [HOST] } });
    volume = await step('create 3 copies → Available', () =>
      until('volume Available', async () => {
        const v = await getVolume(created.UUID);
        if (v.state === 'Failed') throw await volumeFailedError(client, v);
        return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
      }, 300_000),
    );
    assert.equal(new Set(volume.nodeList).size, 3, 'three distinct nodes');
    const set = await replicaSet(volume.UUID);
    assert.equal(set.epoch, 1);
    assert.equal(set.primaryNodeUUID, volume.primaryNodeUUID);
    assert.deepEqual([...set.inSync].sort(), [...volume.nodeList].sort());
    assert.equal(volume.rebuildProgress, '100');

    device = await step('connect a path to every node', () => connectAllPaths(volume));
    await until('the primary path optimized, the others inaccessible', async () => {
      const states = await pathStates(volume.UUID);
      const primary = indexOf(volume.primaryNodeUUID);
      return states.size === 3 && [...states].every(([i, s]) => s === (i === primary ? 'live/optimized' : 'live/inaccessible'));
    }, 60_000);
    // One LBA size on every path (a host keeps one per namespace across its paths: a replica's
    // path that said 512 once made 6.12 hosts address the primary's 4 KiB namespace wrongly).
    const controllers = (await sh(host(), `for c in /sys/class/nvme/nvme*; do grep -qx '${nqnOf(volume.UUID)}' "$c/subsysnqn" && echo "\${c##*/}"; done; true`)).split('\n').filter(Boolean);
    assert.equal(controllers.length, 3, 'a controller per path');
    for (const controller of controllers) {
      const ns = JSON.parse((await host().runOk(['nvme', 'id-ns', `/dev/${controller}`, '-n', '1', '-o', 'json'], { timeoutMs: 30_000 })).stdout) as { flbas: number; lbafs: { ds: number }[] };
      assert.equal(ns.lbafs[ns.flbas & 0xf]?.ds, 12, `${controller}: 4 KiB blocks`);
    }

    const data = randomBytes(8 * MiB);
    await step('write 8 MiB through the host', () =>
      host().runOk(['dd', `of=${device}`, 'bs=1M', 'count=8', 'iflag=fullblock', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: data, timeoutMs: 120_000 }),
    );
    const digests = await step('read each backing', () => Promise.all(volume.nodeList.map((n) => backingDigest(n, volume.UUID, 8))));
    assert.deepEqual(digests, volume.nodeList.map(() => sha256(data)), 'byte for byte on all three backings');

    // Bytes written, from the block layer's counter of the primary's device-mapper device: the
    // agent reads it at its interval's pass (5 s here), the control plane keeps it.
    await step('userWritten counts the 8 MiB', () =>
      until('userWritten ≥ 8 MiB', async () => {
        const v = await getVolume(volume.UUID);
        return BigInt(v.statistics.userWritten) >= BigInt(8 * MiB) && v;
      }, 60_000),
    );

    // The mirror's write-intent bitmap chunk (the unit a returning copy resyncs): 1 MiB by default.
    const chunk = await sh(storageOf(volume.primaryNodeUUID).guest, `cat /sys/dev/block/$(dmsetup table strata-${volume.UUID} | awk '{print $4}')/md/bitmap/chunksize`);
    assert.equal(chunk.trim(), String(MiB), 'md bitmap chunk of 1 MiB');

    const before = await legReadSectors(volume.primaryNodeUUID, volume.UUID);
    const read = (await host().runOk(['dd', `if=${device}`, 'bs=1M', 'count=8', 'iflag=direct', 'status=none'], { timeoutMs: 120_000 })).stdoutBytes;
    assert.equal(sha256(read), sha256(data), 'the host reads back what it wrote');
    const after = await legReadSectors(volume.primaryNodeUUID, volume.UUID);
    // The local leg served the 8 MiB; the remote legs (write-mostly) none of it. A few sectors of
    // metadata may be read from a remote leg meanwhile (seen once on 6.12: 2 reads), not the data.
    assert.ok(after.local - before.local >= (8 * MiB) / 512, `the local leg served the host's read (${after.local - before.local} sectors)`);
    assert.ok(after.remote - before.remote < (8 * MiB) / 512 / 64, `no host read went to a remote copy (write-mostly legs): ${after.remote - before.remote} sectors read from them`);
  });

  it('a replica lost under load: recorded out of sync before writes go on without it; no acknowledged write lost; Degraded', async () => {
    assert.ok(device, 'the first scenario connected the host');
    staleNode = volume.nodeList.find((n) => n !== volume.primaryNodeUUID)!;
    const writes = await ackedWrites(device, 'replica-loss');
    await step('kill a replica guest', () => killGuest(staleNode));
    const killedAt = Date.now() / 1000;
    const set = await step('the lost copy leaves the in-sync set', () =>
      until('out of sync in etcd', async () => {
        const s = await replicaSet(volume.UUID);
        return !s.inSync.includes(staleNode) && s;
      }, 120_000),
    );
    assert.equal(set.epoch, 1, 'the primary did not change');
    await step('writes go on without the lost copy', () => writes.resumed(killedAt));
    const v = await until('Degraded in the API', async () => {
      const got = await getVolume(volume.UUID);
      return got.protectionState === 'Degraded' && got;
    }, 60_000);
    assert.equal(v.rebuildProgress, '0', 'the lost copy waits for its resync');
    const checked = await writes.noneLost();
    assert.ok(checked > 100, `${checked} acknowledged writes`);
  });

  it('the primary lost under load: an in-sync copy (never the stale one) takes over; no acknowledged write lost', async () => {
    assert.ok(staleNode, 'the previous scenario took a copy out of sync');
    oldPrimary = volume.primaryNodeUUID;
    survivor = volume.nodeList.find((n) => n !== oldPrimary && n !== staleNode)!;
    const writes = await ackedWrites(device, 'primary-loss');
    await step('kill the primary guest', () => killGuest(oldPrimary));
    const killedAt = Date.now() / 1000;
    const set = await step('an in-sync copy is promoted', () =>
      promotedAfter(volume.UUID, 1, 180_000),
    );
    assert.equal(set.primaryNodeUUID, survivor, 'the only in-sync copy alive, never the stale one');
    assert.ok(!set.inSync.includes(staleNode));
    await step('host I/O resumes on the new primary', () => writes.resumed(killedAt));
    assertPromotedThroughSysfs(survivor);
    const v = await until('the API shows the new primary', async () => {
      const got = await getVolume(volume.UUID);
      return got.primaryNodeUUID === survivor && got.protectionState === 'Degraded' && got;
    }, 60_000);
    assert.equal(v.state, 'Available');
    const after = await replicaSet(volume.UUID);
    assert.deepEqual(after.inSync, [survivor], 'the lost primary was recorded out of sync before the new one served');
    await writes.noneLost();
  });

  it('the stale trap: with no in-sync copy alive the volume is NotAvailable, and the stale copy is never promoted', async () => {
    assert.ok(survivor && staleNode && oldPrimary, 'the earlier scenarios ran');
    await step('kill the last in-sync copy', () => killGuest(survivor));
    await step('the stale copy\'s server comes back', () => rebootGuest(staleNode));
    await until('the stale node Active', async () => (await api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes.find((n) => n.UUID === staleNode)?.state === 'Active', 120_000);
    await until('NotAvailable in the API', async () => (await getVolume(volume.UUID)).protectionState === 'NotAvailable', 120_000);
    // Give the leader time to (wrongly) promote it: several passes and watch events.
    await sleep(15_000);
    const set = await replicaSet(volume.UUID);
    assert.equal(set.primaryNodeUUID, survivor, 'the stale copy was not promoted');
    assert.deepEqual(set.inSync, [survivor]);
    assert.equal((await getVolume(volume.UUID)).protectionState, 'NotAvailable');
  });

  it('rebuild: the in-sync copy returns and serves; the others resync what they missed and rejoin; FullyProtected', async () => {
    assert.ok(survivor, 'the earlier scenarios ran');
    await step('the in-sync copy\'s server comes back', () => rebootGuest(survivor));
    await step('the old primary\'s server comes back', () => rebootGuest(oldPrimary));
    const set = await step('both copies resync and rejoin', () =>
      until('every copy in sync', async () => {
        const s = await replicaSet(volume.UUID);
        return s.inSync.length === 3 && s;
      }, 300_000),
    );
    assert.equal(set.primaryNodeUUID, survivor, 'the primary stayed');
    const v = await until('FullyProtected in the API', async () => {
      const got = await getVolume(volume.UUID);
      return got.protectionState === 'FullyProtected' && got;
    }, 120_000);
    assert.equal(v.rebuildProgress, '100');
    // The host reconnects to the returning paths by itself; the data it wrote reads back.
    const result = await step('verify every acknowledged write', async () => {
      const out = await sh(host(), `python3 ${script('acked-writes.py')} verify ${device} /tmp/acked-primary-loss.log`, 300_000);
      return /checked=(\d+) bad=(\d+)/.exec(out);
    });
    assert.ok(result);
    assert.equal(Number(result[2]), 0, 'every acknowledged write reads back after the rebuild');
    const mib = Math.ceil((Number(result[1]) * 4096) / MiB) + 1;
    const digests = await step('read each backing', () => Promise.all(volume.nodeList.map((n) => backingDigest(n, volume.UUID, Math.min(mib, VOLUME_MIB)))));
    assert.equal(new Set(digests).size, 1, 'the three copies are equal again');
  });

  it('planned stop of the primary under load: another copy takes over with no I/O error on the host; the stopped copy rejoins', async () => {
    const set = await replicaSet(volume.UUID);
    assert.equal(set.inSync.length, 3, 'starts FullyProtected');
    const primary = set.primaryNodeUUID;
    const writes = await ackedWrites(device, 'planned');
    const stoppedAt = Date.now() / 1000;
    await step('SIGTERM the primary\'s agent', () => storageOf(primary).stopAgent('TERM', 120_000));
    // A failed check below still starts the agent again: the later scenarios need three copies.
    let restarted = false;
    const restart = async () => {
      restarted = true;
      await step('the stopped agent starts again', () => storageOf(primary).startAgent({ timeoutMs: 240_000 }));
    };
    try {
      const next = await step('another copy is promoted', () =>
        promotedAfter(volume.UUID, set.epoch, 120_000),
      );
      assert.notEqual(next.primaryNodeUUID, primary);
      // The stopping primary moved the set itself (not the leader after its lease): one epoch on,
      // its own copy out of the in-sync set in the same change.
      // How the epoch began (`reason` is rewritten when a copy is recorded out of sync since).
      assert.match(next.epochReason ?? '', /^handed over/, `moved by the primary's hand-over: ${JSON.stringify(next)}`);
      assert.equal(next.epoch, set.epoch + 1);
      assert.ok(!next.inSync.includes(primary), 'the handing-over copy left the in-sync set with the move');
      await step('host I/O resumes', () => writes.resumed(stoppedAt));
      assertPromotedThroughSysfs(next.primaryNodeUUID);
      // The third copy should stay in the mirror: the new primary waits for its export to admit
      // it rather than record it out of sync (which leaves one copy until a resync). It is not
      // always so, for a reason outside that wait: the old primary's md can write a superblock
      // to one copy while it deletes the connection of the other, and the new primary's md then
      // finds the other copy's superblock older (CI on 6.1, twice: docs/replication.md,
      // "Planned failover"). What must hold either way: the copy was recorded out of sync by the
      // new primary before the host path reached the array (that reason, in the same epoch), and
      // it rejoins (checked below with the stopped copy).
      const third = set.inSync.find((n) => n !== primary && n !== next.primaryNodeUUID)!;
      const after = await replicaSet(volume.UUID);
      if (!after.inSync.includes(third)) {
        assert.equal(after.epoch, next.epoch, `no other promotion meanwhile: ${JSON.stringify(after)}`);
        assert.match(after.reason ?? '', /^not in the mirror when volume .* started on its primary$/, `the third copy ${third} left the in-sync set only through the new primary's check: ${JSON.stringify(after)}`);
        console.log(`# planned failover: the third copy was recorded out of sync by the new primary (${after.reason}); it resyncs below`);
      }
      const pause = await sh(host(), `awk 'NR>1 && $1 != "error" { d = $2 - prev; if (d > max) max = d } { prev = $2 } END { printf "%.3f", max }' /tmp/acked-planned.log`);
      console.log(`# planned failover: longest gap between acknowledged writes ${pause} s`);
      await writes.noneLost();
      await restart();
    } finally {
      if (!restarted) await restart().catch(() => undefined);
    }
    await step('its copy resyncs and rejoins', () => until('3 in sync', async () => (await replicaSet(volume.UUID)).inSync.length === 3, 300_000));
    await until('FullyProtected', async () => (await getVolume(volume.UUID)).protectionState === 'FullyProtected', 120_000);
  });

  it('a partitioned primary fences itself before its lease expires; another copy takes over; never two primaries', async () => {
    const set = await replicaSet(volume.UUID);
    const primary = set.primaryNodeUUID;
    const i = indexOf(primary);
    const writes = await ackedWrites(device, 'partition');
    // Cut etcd and the control plane from the primary; its volume and replication ports stay up.
    proxies[i]!.etcd.cut();
    proxies[i]!.controlPlane.cut();
    const cutAt = Date.now();
    const { fencedAt, promotedAt, twoOptimized, samples } = await watchPaths(volume.UUID, i, set.epoch, cutAt, 90_000);
    assert.ok(fencedAt > 0, `the partitioned primary left the optimized state: ${samples.join(' ')}`);
    assert.ok(promotedAt > 0, 'another copy was promoted');
    assert.ok(fencedAt <= promotedAt, `fenced ${fencedAt - cutAt} ms after the cut, promotion at ${promotedAt - cutAt} ms`);
    assert.equal(twoOptimized, 0, `never two optimized paths: ${samples.join(' ')}`);
    const next = await replicaSet(volume.UUID);
    assert.notEqual(next.primaryNodeUUID, primary);
    await step('host I/O resumes on the new primary', () => writes.resumed(promotedAt / 1000));
    // The partition heals: the old primary learns the new epoch and becomes a replica again.
    proxies[i]!.etcd.restore();
    proxies[i]!.controlPlane.restore();
    await writes.noneLost();
    await step('the old primary resyncs and rejoins', () => until('3 in sync', async () => (await replicaSet(volume.UUID)).inSync.length === 3, 300_000));
  });

  /**
   * The primary's guest killed under load, and `fault` right after it (mid-failover): an in-sync
   * copy is promoted once, host I/O resumes, no acknowledged write is lost; then the old primary's
   * server comes back and its copy rejoins (FullyProtected again for the next scenario).
   */
  async function failoverThrough(tag: string, label: string, fault: () => Promise<void>): Promise<ReplicaSetRecord> {
    const set = await replicaSet(volume.UUID);
    assert.equal(set.inSync.length, 3, 'starts FullyProtected');
    const primary = set.primaryNodeUUID;
    const writes = await ackedWrites(device, tag);
    const killedAt = Date.now() / 1000;
    await step(`kill the primary's guest, then ${label}`, async () => {
      await killGuest(primary);
      await fault();
    });
    const next = await step('an in-sync copy is promoted', () =>
      promotedAfter(volume.UUID, set.epoch, 240_000),
    );
    assert.notEqual(next.primaryNodeUUID, primary);
    assert.equal(next.epoch, set.epoch + 1, 'promoted once');
    await step('host I/O resumes on the new primary', () => writes.resumed(killedAt));
    assertPromotedThroughSysfs(survivor);
    assert.ok(!(await replicaSet(volume.UUID)).inSync.includes(primary), 'the lost primary was recorded out of sync before the new one served');
    const states = await pathStates(volume.UUID);
    assert.deepEqual([...states].filter(([, st]) => st === 'live/optimized').map(([n]) => n), [indexOf(next.primaryNodeUUID)], `one optimized path, the new primary's: ${[...states].join(' ')}`);
    await writes.noneLost();
    await step('the old primary\'s server comes back', () => rebootGuest(primary));
    await step('its copy resyncs and rejoins', () => until('3 in sync', async () => (await replicaSet(volume.UUID)).inSync.length === 3, 300_000));
    return next;
  }

  it('the control plane killed (kill -9) right after the primary\'s guest, started again: the failover completes once; no acknowledged write lost', async () => {
    await failoverThrough('leader-kill', 'the control plane (the leader); start it again', async () => {
      killedPlaneLogs.push(...plane.logs.map((l) => JSON.stringify(l)));
      await plane.kill();
      plane = await startControlPlaneProcess({ etcdEndpoint: etcd.endpoint, stateDir: plane.stateDir, grpcPort: Number(plane.grpcEndpoint.split(':')[1]), extraArgs: planeArgs });
    });
  });

  it('etcd killed (kill -9) mid-failover and started again on its data: the failover completes once; no acknowledged write lost', async () => {
    await failoverThrough('etcd-kill', 'etcd; start it again', async () => {
      await etcd.kill();
      await sleep(3000);
      await etcd.restart();
    });
  });

  it('a node down for good: its copy is re-created on the spare node, resynced in full, and the volume is FullyProtected again', async () => {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'pair', size: '32MiB', replicaCount: 2, acl: { values: [HOST] } });
    const pair = await until('pair Available', async () => {
      const v = await getVolume(created.UUID);
      return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
    }, 300_000);
    const [primary, replica] = [pair.primaryNodeUUID, pair.nodeList.find((n) => n !== pair.primaryNodeUUID)!];
    const spare = storage.map((s) => s.nodeUUID()).find((n) => !pair.nodeList.includes(n))!;
    // One path, to the primary, and data on it.
    const port = (JSON.parse((await client.get(keys.volume(pair.UUID)).string())!) as { placement: { port: number } }).placement.port;
    const p = indexOf(primary);
    await storage[p]!.guest.addHostForward(pathPort(p, port), port);
    await host().runOk(['nvme', 'connect', '-t', 'tcp', '-a', FROM_GUESTS, '-s', String(pathPort(p, port)), '-n', nqnOf(pair.UUID), ...nvmeHostArgs(HOST)], { timeoutMs: 60_000 });
    const pairDevice = (await host().runOk(['sh', script('nvme-ns-by-uuid.sh'), pair.UUID, '30'], { timeoutMs: 45_000 })).stdout.trim();
    const data = randomBytes(8 * MiB);
    await host().runOk(['dd', `of=${pairDevice}`, 'bs=1M', 'count=8', 'iflag=fullblock', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: data, timeoutMs: 120_000 });

    await step('kill the replica\'s server', () => killGuest(replica));
    await until('out of sync', async () => !(await replicaSet(pair.UUID)).inSync.includes(replica), 120_000);
    const moved = await step('re-created on the spare node after the timeout', () =>
      until('nodeList names the spare', async () => {
        const v = await getVolume(pair.UUID);
        return v.nodeList.includes(spare) && v;
      }, (PERMANENT_FAILURE_S + 120) * 1000),
    );
    assert.deepEqual(moved.nodeList.includes(replica), false);
    await step('the new copy resyncs in full and joins', () => until('2 in sync', async () => (await replicaSet(pair.UUID)).inSync.length === 2, 300_000));
    await until('FullyProtected', async () => (await getVolume(pair.UUID)).protectionState === 'FullyProtected', 120_000);
    assert.deepEqual(await Promise.all([primary, spare].map((n) => backingDigest(n, pair.UUID, 8))), [sha256(data), sha256(data)], 'the new copy holds the data');
    // The dead server comes back: its copy is not wanted any more and goes.
    await step('the old replica\'s server comes back', () => rebootGuest(replica));
    await until('its backing removed', async () => (await sh(storageOf(replica).guest, `find /var/lib/strata/pool -name '${pair.UUID}.*' | wc -l`)).trim() === '0', 180_000);
  });

  it('a 3-copy volume grown under a host connection: the host sees the new size without reconnecting, data beyond the old end reads back, every backing grew', async () => {
    // The scenario before this one rebooted a node's guest: three copies need it Active again.
    await step('three nodes Active again', () =>
      until('three nodes Active', async () => {
        const list = (await api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes;
        return list.length === 3 && list.every((n) => n.state === 'Active');
      }, 300_000),
    );
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'grown', size: '32MiB', replicaCount: 3, acl: { values: [HOST] } });
    const grown = await until('grown Available', async () => {
      const v = await getVolume(created.UUID);
      if (v.state === 'Failed') throw await volumeFailedError(client, v);
      return v.state === 'Available' && v.protectionState === 'FullyProtected' && v;
    }, 300_000);
    const growDevice = await step('connect a path to every node', () => connectAllPaths(grown));
    const head = randomBytes(8 * MiB);
    await host().runOk(['dd', `of=${growDevice}`, 'bs=1M', 'count=8', 'iflag=fullblock', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: head, timeoutMs: 120_000 });

    await step('PUT size 64 MiB → Updating → Available', async () => {
      await api('PUT', `/volumes/${grown.UUID}`, { size: '64MiB' });
      return until('Available at 64 MiB', async () => {
        const v = await getVolume(grown.UUID);
        if (v.state === 'Failed') throw await volumeFailedError(client, v);
        return v.state === 'Available' && v.size === String(64 * MiB) && v;
      }, 300_000);
    });
    // The same connections: the namespace's size changed under them (revalidate_size, an AEN,
    // the host's rescan), not a reconnect.
    await step('the host sees 64 MiB', () =>
      until('blockdev size 64 MiB', async () => (await sh(host(), `blockdev --getsize64 ${growDevice}`)).trim() === String(64 * MiB), 60_000),
    );
    // Each path's own disk (nvme<subsystem>c<controller>n<namespace>, hidden under the multipath
    // head): the replicas' paths show the new size too, once the primary's served it.
    await step('every path shows 64 MiB', () =>
      until('three paths at 64 MiB', async () => {
        const sectors = (await sh(host(), `d=$(basename ${growDevice}); cat /sys/block/\${d%n*}c*n\${d##*n}/size`)).trim().split(/\s+/);
        return sectors.length === 3 && sectors.every((s) => s === String((64 * MiB) / 512));
      }, 60_000),
    );
    const tail = randomBytes(8 * MiB);
    await step('write 8 MiB beyond the old end', () =>
      host().runOk(['dd', `of=${growDevice}`, 'bs=1M', 'seek=40', 'count=8', 'iflag=fullblock', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: tail, timeoutMs: 120_000 }),
    );
    const read = (await host().runOk(['dd', `if=${growDevice}`, 'bs=1M', 'skip=40', 'count=8', 'iflag=direct', 'status=none'], { timeoutMs: 120_000 })).stdoutBytes;
    assert.equal(sha256(read), sha256(tail), 'the host reads back what it wrote beyond the old end');
    const v = await getVolume(grown.UUID);
    for (const n of v.nodeList) {
      const size = (await sh(storageOf(n).guest, `stat -c %s $(find /var/lib/strata/pool -name '${grown.UUID}.*' -path '*/volumes/*' | head -1)`)).trim();
      assert.equal(size, String(64 * MiB + Number(REPLICA_DATA_OFFSET_BYTES)), `node ${n}: the backing grew to the volume's size and md's metadata`);
    }
    assert.deepEqual(await Promise.all(v.nodeList.map((n) => backingDigestOf(storageOf(n), grown.UUID, 8, 40))), v.nodeList.map(() => sha256(tail)), 'the new tail on all three backings');
    assert.deepEqual(await Promise.all(v.nodeList.map((n) => backingDigest(n, grown.UUID, 8))), v.nodeList.map(() => sha256(head)), 'the old data kept');
    await until('FullyProtected', async () => (await getVolume(grown.UUID)).protectionState === 'FullyProtected', 120_000);
  });

  /**
   * A planned stop of a 2-copy volume's primary fences the host path, marks the copy's leg faulty
   * in md, then moves the primary in etcd (replica-manager.ts handOver). The primary's etcd is
   * held (a partition: the move's request neither arrives nor fails), so its agent is stuck at the
   * move, and it is killed there (kill -9): the state a crash between the two steps leaves. Host
   * writes run throughout. Returns with etcd reachable again and the agent dead.
   */
  async function killMidHandOver(uuid: string, writes: { acked(): Promise<number> }): Promise<{ set: ReplicaSetRecord; primary: string; copy: string; i: number; stoppedAt: number }> {
    const set = await replicaSet(uuid);
    assert.equal(set.inSync.length, 2, `starts FullyProtected: ${JSON.stringify(set)}`);
    const primary = set.primaryNodeUUID;
    const copy = set.inSync.find((n) => n !== primary)!;
    const i = indexOf(primary);
    /** The members of the volume's mirror on the primary, and md's flags for each (`loop3 in_sync`, `nvme2n1 faulty`). */
    const mirrorMembers = async () =>
      (await sh(storage[i]!.guest, `for l in /sys/block/loop*; do case "$(cat $l/loop/backing_file 2>/dev/null)" in */${uuid}.*) for d in $l/holders/md*/md/dev-*; do [ -e "$d/state" ] && echo "\${d##*/dev-} $(cat $d/state)"; done;; esac; done; true`))
        .split('\n')
        .filter(Boolean);
    const remote = (members: string[]) => members.filter((m) => !m.startsWith('loop'));
    const before = await mirrorMembers();
    assert.ok(remote(before).some((m) => m.includes('in_sync')), `the copy's leg is in the mirror: ${before.join(', ')}`);
    assert.ok((await writes.acked()) > 0);
    proxies[i]!.etcd.hold();
    try {
      await storage[i]!.signalAgent('TERM');
      const stoppedAt = Date.now() / 1000;
      const members = await step("the copy's leg faulty in the primary's mirror", () =>
        until('no remote member in sync', async () => {
          const now = await mirrorMembers();
          return now.some((m) => m.startsWith('loop')) && remote(now).length > 0 && remote(now).every((m) => m.includes('faulty')) && now;
        }, 60_000),
      );
      await step("kill -9 the primary's agent", () => storage[i]!.stopAgent('KILL', 30_000));
      console.log(`# mid hand-over: killed with the mirror at ${members.join(', ')}`);
      return { set, primary, copy, i, stoppedAt };
    } finally {
      proxies[i]!.etcd.restore();
    }
  }

  let halfway: Volume | undefined;
  let halfwayDevice = '';
  /** The nodes the host has a path to the volume `halfway` on. */
  const halfwayPaths = new Set<string>();

  /**
   * After the old primary's agent starts again: its copy resyncs and rejoins or, when its node was
   * down longer than the permanent-failure timeout (20 s in this suite), was re-created on the
   * spare node, the old one removed (the scenario "a node down for good"). Either way the volume
   * ends FullyProtected, on `primary`, with equal copies.
   */
  async function protectedAgain(uuid: string, oldPrimary: string, primary: string, tag: string): Promise<void> {
    await step('two copies in sync again', () => until('2 in sync', async () => (await replicaSet(uuid)).inSync.length === 2, 300_000));
    const fully = await until('FullyProtected', async () => {
      const got = await getVolume(uuid);
      return got.protectionState === 'FullyProtected' && got;
    }, 120_000);
    assert.equal(fully.primaryNodeUUID, primary, 'the primary stayed');
    // The host's paths follow the copies (the next scenario's promotion may land on a new one).
    const fresh = fully.nodeList.filter((n) => !halfwayPaths.has(n));
    if (fresh.length > 0) {
      await step('connect the host to the new copy', () =>
        connectPaths({ host: host(), nodes: fresh.map((n) => ({ index: indexOf(n), guest: storageOf(n).guest })), port: volumePort, subsystemNQN: nqnOf(uuid), volumeUUID: uuid, hostNQN: HOST, pathPort }),
      );
      for (const n of fresh) halfwayPaths.add(n);
    }
    console.log(`# ${tag}: the old primary's copy ${fully.nodeList.includes(oldPrimary) ? 'resynced and rejoined' : 're-created on the spare node'}`);
    assert.equal(new Set(await Promise.all(fully.nodeList.map((n) => backingDigest(n, uuid, 32)))).size, 1, 'the two copies are equal');
  }

  it('the primary\'s agent killed (kill -9) while serving and kept down: the exit fence turns its path inaccessible before the leader promotes the copy; never two optimized paths; no acknowledged write lost', { skip: AGENT_KILLS_SKIP }, async () => {
    await step('three nodes Active', () =>
      until('three nodes Active', async () => (await api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes.every((n) => n.state === 'Active'), 300_000),
    );
    const created = await api<Volume>('POST', '/projects/default/volumes', { name: 'halfway', size: '32MiB', replicaCount: 2, acl: { values: [HOST] } });
    const v = await until('halfway Available', async () => {
      const got = await getVolume(created.UUID);
      if (got.state === 'Failed') throw await volumeFailedError(client, got);
      return got.state === 'Available' && got.protectionState === 'FullyProtected' && got;
    }, 300_000);
    halfway = v;
    halfwayDevice = await step('connect a path to every node', () => connectAllPaths(v));
    for (const n of v.nodeList) halfwayPaths.add(n);
    const set = await replicaSet(v.UUID);
    const primary = set.primaryNodeUUID;
    const copy = set.inSync.find((n) => n !== primary)!;
    const i = indexOf(primary);
    const writes = await ackedWrites(halfwayDevice, 'halfway-crash');
    const logBefore = storage[i]!.agentLogTail(10_000_000).length;
    // The agent dies; its kernel target would go on serving (systemd's ExecStopPost, which the
    // lab's runner mirrors, runs the exit fence). The host's paths are watched from the kill on.
    const killedAt = Date.now();
    await storage[i]!.signalAgent('KILL');
    const { fencedAt, promotedAt, twoOptimized, samples } = await watchPaths(v.UUID, i, set.epoch, killedAt, 120_000);
    await storage[i]!.stopAgent('KILL', 30_000);
    const fenceLine = storage[i]!.agentLogTail(10_000_000).slice(logBefore).split('\n').find((l) => l.includes('"event":"agent.exitFence"'));
    assert.ok(fenceLine, 'the exit fence ran after the agent died');
    assert.ok(fencedAt > 0, `the dead agent's path left the optimized state: ${samples.join(' ')}`);
    assert.ok(promotedAt > 0, 'the copy was promoted');
    assert.ok(fencedAt <= promotedAt, `fenced ${fencedAt - killedAt} ms after the kill, promoted at ${promotedAt - killedAt} ms`);
    assert.equal(twoOptimized, 0, `never two optimized paths: ${samples.join(' ')}`);
    console.log(`# agent killed while serving: fenced ${fencedAt - killedAt} ms after the kill (${fenceLine}), promoted at ${promotedAt - killedAt} ms`);
    const next = await replicaSet(v.UUID);
    assert.equal(next.primaryNodeUUID, copy, 'the in-sync copy');
    assert.equal(next.epoch, set.epoch + 1, 'promoted once');
    await step('host I/O resumes on the new primary', () => writes.resumed(killedAt / 1000));
    await writes.noneLost();
    await step('the killed agent starts again', () => storage[i]!.startAgent({ timeoutMs: 240_000 }));
    await protectedAgain(v.UUID, primary, copy, 'agent killed while serving');
  });

  it('the primary\'s agent killed (kill -9) mid hand-over (its copy\'s leg faulty, the primary not moved yet) and kept down: the leader promotes the copy once; no acknowledged write lost; the volume is FullyProtected again', { skip: AGENT_KILLS_SKIP }, async () => {
    assert.ok(halfway, 'the scenario before created the volume');
    const v = halfway;
    const writes = await ackedWrites(halfwayDevice, 'halfway-down');
    const { set, primary, copy, i, stoppedAt } = await killMidHandOver(v.UUID, writes);
    const unmoved = await replicaSet(v.UUID);
    assert.equal(unmoved.epoch, set.epoch, `the primary had not moved when its agent was killed: ${JSON.stringify(unmoved)}`);
    assert.equal(unmoved.primaryNodeUUID, primary);
    const next = await step('the leader promotes the copy once the lease is gone', () => promotedAfter(v.UUID, set.epoch, 180_000));
    assert.equal(next.primaryNodeUUID, copy, 'the in-sync copy');
    assert.equal(next.epoch, set.epoch + 1, 'promoted once');
    assert.ok(!next.inSync.includes(primary), 'the killed primary recorded out of sync before the new one served');
    await step('host I/O resumes on the new primary', () => writes.resumed(stoppedAt));
    const states = await pathStates(v.UUID);
    assert.deepEqual([...states].filter(([, st]) => st.endsWith('/optimized')).map(([n]) => n), [indexOf(copy)], `one optimized path, the new primary's: ${[...states].join(' ')}`);
    await writes.noneLost();
    await step('the killed agent starts again', () => storage[i]!.startAgent({ timeoutMs: 240_000 }));
    await protectedAgain(v.UUID, primary, copy, 'mid hand-over, kept down');
  });

  it('the primary\'s agent killed (kill -9) mid hand-over and started again before any promotion: it records the faulty copy out of sync before serving, no acknowledged write lost, the copy resyncs', { skip: AGENT_KILLS_SKIP }, async () => {
    assert.ok(halfway, 'the scenario before created the volume');
    const uuid = halfway.UUID;
    const writes = await ackedWrites(halfwayDevice, 'halfway-back');
    // systemd restarts a killed agent within seconds; with a lease longer than that, it registers
    // again before the old lease expires and nothing fails over. Under emulation the agent takes
    // 10-25 s to start, longer than this suite's lease: the cluster manager is paused (SIGSTOP)
    // from before the kill until the restarted agent has acted, so no promotion can come first,
    // and what is checked is what the restarted primary does with its mirror.
    plane.child.kill('SIGSTOP');
    let paused = true;
    try {
      const { set, primary, copy, i, stoppedAt } = await killMidHandOver(uuid, writes);
      await step('the killed agent starts again', () => storage[i]!.startAgent({ timeoutMs: 240_000 }));
      // Its mirror still has the copy's leg faulty: the copy leaves the in-sync set (same epoch),
      // and only then does the host path reach the mirror again.
      const out = await step('the faulty copy recorded out of sync', () =>
        until('the copy out of the in-sync set', async () => {
          const s = await replicaSet(uuid);
          return !s.inSync.includes(copy) && s;
        }, 120_000),
      );
      assert.equal(out.epoch, set.epoch, `no promotion: ${JSON.stringify(out)}`);
      assert.equal(out.primaryNodeUUID, primary, 'the primary stayed');
      assert.match(out.reason ?? '', /^not in the mirror when volume .* started on its primary$/, `recorded by the restarted primary's check: ${JSON.stringify(out)}`);
      await step('host I/O resumes on the same primary', () => writes.resumed(stoppedAt));
      plane.child.kill('SIGCONT');
      paused = false;
      await step('the copy resyncs and rejoins', () => until('2 in sync', async () => (await replicaSet(uuid)).inSync.length === 2, 300_000));
      const final = await replicaSet(uuid);
      assert.equal(final.epoch, set.epoch, 'never promoted');
      assert.equal(final.primaryNodeUUID, primary);
      await writes.noneLost();
      await until('FullyProtected', async () => (await getVolume(uuid)).protectionState === 'FullyProtected', 120_000);
      assert.equal(new Set(await Promise.all([primary, copy].map((n) => backingDigest(n, uuid, 32)))).size, 1, 'the two copies are equal again');
    } finally {
      if (paused) plane.child.kill('SIGCONT');
    }
  });
});
