// Node stop / start on the real kernel (issue 15 item 1; docs/node-operations.md), through the
// REST API: a real etcd and control plane on this host, three storage guests running the real
// agent on Debian's kernel (nvmet, md raid1, device-mapper, the NVMe/TCP initiator), and an
// initiator guest playing the host with native multipath. One replicated volume (2 copies):
// POST stop of its primary's node under host write load hands it over to the other copy with no
// I/O error and no acknowledged write lost; the node shows its stopped state and serves nothing,
// also after its agent restarts; the last in-sync copy's node cannot be stopped (400 naming the
// volume); POST start brings the node back, its copy resyncs and the volume is FullyProtected.
// Then node replace (issue 15 item 3): the third server was added through POST /servers with
// extendCluster false, so its node is Unattached and held nothing so far; the replica's agent
// stops under host write load (its kernel still serves the copy), and POST replace moves its copy
// to the Unattached node (full resync from the primary), which ends Active with the copy byte for
// byte, the source detached.
// Then POST restart with considerBackend of a node holding a volume of one copy with data: its md
// array and btrfs are really stopped and assembled again (the array's disk sequence number and the
// btrfs' sysfs directory change), the data reads back byte for byte through the host's same controller.
// First, LEDs (issue 15 item 4) through POST /nvmeDevices/{serial}: ops-a's data drive sits behind
// an emulated PCIe root port whose hotplug slot has an attention indicator (the lab's `slot`), so
// locate / rebuild / locate-off show as 1 / 2 / 0 in its `attention` as the guest's kernel reads
// it back; ops-b's drive sits in no slot and is refused with the agent's reason (400, never 200).
// Lean on purpose (two volumes, guests booted once): about 6-9 minutes of CI on a loaded machine.
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
import { volumeSubsystemNQN } from '../../lib/contract/nqn.js';
import { createEtcdClient } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import type { DeviceRecord, NodeCommandRecord, NodeRunStateRecord, ReplicaSetRecord } from '../../lib/records.js';
import { adminApi } from '../helpers/admin-api.js';
import { startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { removeDir, startControlPlaneProcess, type ControlPlaneProcess } from '../helpers/processes.js';
import { startStorageGuest, storageLogs, type StorageGuest } from './cluster-lab.js';
import { freeLoopbackPort, freeLoopbackPortRange, labKernelLabel, prepareLab, startGuest, StepTimer, type Guest } from './lab/index.js';
import { backingDigest, connectPaths, startAckedWrites } from './replication-host.js';
import { waitUntil } from '../helpers/wait.js';
import { volumeFailedError } from './volume-failure.js';

const skip = process.env['STRATA_E2E'] === '0' ? 'STRATA_E2E=0' : false;
const HOST = `nqn.2014-08.org.nvmexpress:uuid:${randomUUID()}`;
const FROM_GUESTS = '10.0.2.2';
const VOLUME_PORTS = 16;
const NAMES = ['ops-a', 'ops-b', 'ops-c'] as const;
/** The server added with extendCluster false (POST /servers) before its agent first ran: its node joins Unattached. */
const SPARE = 'ops-c';
const SPARE_SERVER_UUID = randomUUID();
/** The guest whose data drive sits in a PCIe hotplug slot with an attention indicator (LEDs); the others' drives are in none. */
const SLOTTED = 'ops-a';
const MiB = 1024 * 1024;
const VOLUME_MIB = 64;

describe(`node stop / start / replace end to end (three storage guests, one initiator, QEMU, ${labKernelLabel()})`, { timeout: 1_200_000, skip }, () => {
  let etcd: TestEtcd;
  let client: Etcd3;
  let plane: ControlPlaneProcess;
  const storage: StorageGuest[] = [];
  let initiator: Guest | undefined;
  let subsystemNQN = '';
  let portMin = 0;
  /** The volume of the scenarios and the host's device for it (the first connects it). */
  let volumeUUID = '';
  let device = '';
  const { step, timings } = new StepTimer();
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  const persistDir = mkdtempSync(join(tmpdir(), 'strata-ops-e2e-'));

  const { api, request } = adminApi(() => plane);
  const getVolume = (uuid: string) => api<Volume>('GET', `/volumes/${uuid}`);
  const getNode = (uuid: string) => api<NodeWire>('GET', `/nodes/${uuid}`);
  const record = async <T>(key: string): Promise<T | null> => JSON.parse((await client.get(key).string()) ?? 'null') as T | null;
  const agentLogs = () => storageLogs(storage);
  const until = <T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> =>
    waitUntil(probe, () => `${what}\n${agentLogs()}`, timeoutMs, 500);
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
  /** The volume's subsystems (host path and replication exports) in a node's kernel target. */
  const subsystemsOf = async (nodeUUID: string, volumeUUID: string) =>
    (await storageOf(nodeUUID).guest.runOk(['ls', '/sys/kernel/config/nvmet/subsystems'], { timeoutMs: 30_000 })).stdout
      .split('\n')
      .filter((nqn) => nqn.includes(volumeUUID));

  /** A volume of `replicaCount` copies, once Available and `ready`. */
  const createVolume = async (name: string, replicaCount: number, ready: (v: Volume) => boolean): Promise<Volume> => {
    const created = await api<Volume>('POST', '/projects/default/volumes', { name, size: `${VOLUME_MIB}MiB`, replicaCount, acl: { values: [HOST] } });
    return until(`volume ${name} Available`, async () => {
      const v = await getVolume(created.UUID);
      if (v.state === 'Failed') throw await volumeFailedError(client, v);
      return v.state === 'Available' && ready(v) && v;
    }, 300_000);
  };
  /** The host connects a path to each copy of the volume; its block device. */
  const connectHost = async (volume: Volume): Promise<string> => {
    const port = (JSON.parse((await client.get(keys.volume(volume.UUID)).string())!) as { placement: { port: number } }).placement.port;
    return connectPaths({
      host: host(),
      nodes: volume.nodeList.map((n) => ({ index: indexOf(n), guest: storageOf(n).guest })),
      port,
      subsystemNQN: volumeSubsystemNQN(subsystemNQN, volume.UUID),
      volumeUUID: volume.UUID,
      hostNQN: HOST,
      pathPort: (i, p) => portMin + i * VOLUME_PORTS + (p - portMin),
    });
  };
  /**
   * The node pool's kernel identity: its md array's disk sequence number (a new one per disk the
   * kernel makes) and the inode of its btrfs' sysfs directory (made at mount, removed at unmount;
   * kernfs numbers its nodes cyclically). The mount id of /proc/self/mountinfo is printed only:
   * the kernel hands a freed one out again.
   */
  const poolIdentity = async (nodeUUID: string) => {
    // One round trip: the lab's guests answer slowly on a loaded machine.
    const script = [
      'set -e',
      'line=$(grep " [^ ]*/$1 " /proc/self/mountinfo | head -1)',
      'test -n "$line"',
      'src=$(echo "$line" | sed "s/.* - btrfs \\([^ ]*\\) .*/\\1/")',
      'blk=$(basename "$(readlink -f "$src")")',
      'fs=$(dirname "$(dirname "$(ls -d /sys/fs/btrfs/*/devices/"$blk")")")',
      'echo "$(echo "$line" | cut -d" " -f1) $(echo "$line" | cut -d" " -f5) $blk $(cat /sys/block/"$blk"/diskseq) $(stat -c %i "$fs")"',
    ].join('\n');
    const out = (await storageOf(nodeUUID).guest.runOk(['sh', '-c', script, 'sh', nodeUUID], { timeoutMs: 120_000 })).stdout.trim();
    const [mountId, mountPoint, block, diskseq, btrfsInode] = out.split(' ');
    assert.ok(mountId && mountPoint && block?.startsWith('md') && diskseq && btrfsInode, `the pool of node ${nodeUUID}: ${out}`);
    return { mountId, mountPoint, block, diskseq, btrfsInode };
  };


  before(async () => {
    const lab = await step('lab', () => prepareLab());
    etcd = await startEtcd();
    client = createEtcdClient([etcd.endpoint]);
    portMin = await freeLoopbackPortRange(VOLUME_PORTS * NAMES.length);
    plane = await startControlPlaneProcess({
      etcdEndpoint: etcd.endpoint,
      extraArgs: ['--volume-port-min', String(portMin), '--volume-port-max', String(portMin + VOLUME_PORTS - 1), '--creating-timeout-seconds', '300'],
    });
    subsystemNQN = (await api<{ subsystemNQN: string }>('GET', '/cluster')).subsystemNQN;
    const grpcPort = Number(plane.grpcEndpoint.split(':')[1]);
    const started = await step('boot four guests', async () =>
      Promise.allSettled([
        ...(await Promise.all(
          NAMES.map(async (name, i) => ({
            name,
            // ops-a's drive in a hotplug slot (the LED scenario), the others on the root bus.
            drives: [{ serial: `STRATA-O${i}-DATA0`, sizeMiB: 384, image: join(persistDir, `${name}-data0.img`), ...(name === SLOTTED ? { slot: true } : {}) }],
            dataSerials: [`STRATA-O${i}-DATA0`],
            etcdPort: etcd.clientPort,
            controlPlaneGrpcPort: grpcPort,
            advertiseAddress: FROM_GUESTS,
            replicationHostPort: await freeLoopbackPort(),
            volumePortMin: portMin,
            volumePortMax: portMin + VOLUME_PORTS - 1,
            agentStateDir: join(persistDir, `${name}-state`),
            agentLogFile: join(persistDir, 'logs', `${name}.agent.log`),
            // 20 s lease as in the replication suite: an emulated guest can miss keep-alives for seconds.
            agentArgs: ['--reconcile-interval-seconds', '5', '--log-level', 'debug', '--lease-ttl-seconds', '20'],
            memoryMiB: 768,
            lab,
            bootTimeoutMs: 240_000,
          })),
        )).map((options) => {
          mkdirSync(options.agentStateDir, { recursive: true });
          return startStorageGuest(options);
        }),
        startGuest({ name: 'ops-host', memoryMiB: 512, lab, bootTimeoutMs: 240_000 }),
      ]),
    );
    for (const r of started.slice(0, NAMES.length)) if (r.status === 'fulfilled') storage.push(r.value as StorageGuest);
    storage.sort((x, y) => NAMES.indexOf(x.name as (typeof NAMES)[number]) - NAMES.indexOf(y.name as (typeof NAMES)[number]));
    const last = started[NAMES.length];
    if (last?.status === 'fulfilled') initiator = last.value as Guest;
    for (const r of started) if (r.status === 'rejected') throw r.reason;
    // The spare server is added before its agent first runs: extendCluster false makes its node
    // join Unattached (it takes no new volumes). Its etcd peer URL names an etcd that never starts:
    // the member stays a learner, which the cluster's quorum does not count.
    await api('POST', '/servers', { serverEndpoints: ['http://127.0.0.9:2380'], serverUUID: SPARE_SERVER_UUID, extendCluster: false });
    await step('start three agents', () =>
      Promise.all(storage.map((s) => s.startAgent({ timeoutMs: 240_000, extraArgs: s.name === SPARE ? ['--server-uuid', SPARE_SERVER_UUID] : [] }))),
    );
    await step('two nodes Active, the spare Unattached', () =>
      until('nodes Active (the spare Unattached) with capacity', async () => {
        const list = (await api<{ nodes: NodeWire[] }>('GET', '/nodes')).nodes;
        const spare = storage.find((s) => s.name === SPARE)!.nodeUUID();
        return list.length === 3 && list.every((n) => n.state === (n.UUID === spare ? 'Unattached' : 'Active') && BigInt(n.statistics.managedPhysicalStorage) > 0n);
      }, 180_000),
    );
  }, { timeout: 600_000 });

  after(async () => {
    await initiator?.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    mkdirSync(logDir, { recursive: true });
    for (const s of storage) writeFileSync(join(logDir, `${s.name}.${process.pid}.agent.log`), s.agentLogTail(2_000_000));
    await Promise.all([...storage.map((s) => s.stop().catch(() => undefined)), initiator?.stop()]);
    if (plane) {
      writeFileSync(join(logDir, `node-ops-control-plane.${process.pid}.log`), plane.logs.map((l) => JSON.stringify(l)).join('\n'));
      await plane.stop();
      removeDir(plane.stateDir);
    }
    client?.close();
    await etcd?.stop();
    removeDir(persistDir);
    console.log(`# node-ops e2e timings: ${timings.join(', ')}`);
  }, { timeout: 180_000 });

  it('LEDs through the route: a drive in a hotplug slot shows locate, rebuild and locate-off as 1, 2, 0 in the attention indicator its guest\'s kernel reads back, and its reported LED state follows; a drive in no slot is 400 with the reason, never 200', async () => {
    const withSlot = storage.find((s) => s.name === SLOTTED)!;
    const without = storage.find((s) => s.name !== SLOTTED && s.name !== SPARE)!;
    const slot = withSlot.guest.drives[0]?.slot;
    assert.ok(slot !== undefined, 'ops-a\'s drive has a slot');
    const attention = async () => (await withSlot.guest.runOk(['cat', `/sys/bus/pci/slots/${slot}/attention`], { timeoutMs: 30_000 })).stdout.trim();
    const device = async (serial: string) => api<{ serverUUID: string; nodeUUID: string }>('GET', `/nvmeDevices/${serial}`);
    const [serial, otherSerial] = [withSlot, without].map((s) => s.guest.drives[0]!.serial);
    const reported = async () => (await record<DeviceRecord>(keys.device(serial!)))?.ledState;
    const { serverUUID } = await device(serial!);
    assert.equal(await attention(), '0');
    assert.equal(await reported(), 'off');
    await step('locate, rebuild, locate-off', async () => {
      for (const [ledPattern, value, state] of [['locate', '1', 'locate'], ['rebuild', '2', 'rebuild'], ['locate-off', '0', 'off']] as const) {
        assert.deepEqual(await api('POST', `/nvmeDevices/${serial}`, { serverUUID, ledPattern }), {});
        assert.equal(await attention(), value, `${ledPattern}: the slot's attention indicator`);
        await until(`the device's reported LED state ${state}`, async () => (await reported()) === state, 30_000);
      }
    });
    const refused = await request('POST', `/nvmeDevices/${otherSerial}`, { serverUUID: (await device(otherSerial!)).serverUUID, ledPattern: 'locate' });
    assert.equal(refused.status, 400, refused.text);
    const body = refused.json as { error: string; code: number; message: string };
    assert.equal(body.code, 3);
    assert.equal(body.error, body.message);
    assert.match(body.message, new RegExp(`NVMe device ${otherSerial} .*has no enclosure LEDs \\(NPEM / _DSM\\) and is in no PCIe hotplug slot with an attention indicator`));
  });

  it('stop of a replicated volume\'s primary node under load: another copy takes over, no I/O error, no acknowledged write lost; stopped across an agent restart; the last in-sync copy\'s node refuses to stop; start resyncs it', async () => {
    const volume = await step('create 2 copies → Available', () => createVolume('ops', 2, (v) => v.protectionState === 'FullyProtected'));
    volumeUUID = volume.UUID;
    assert.ok(!volume.nodeList.includes(storage.find((s) => s.name === SPARE)!.nodeUUID()), 'the Unattached node takes no new volume');
    device = await step('connect a path to each copy', () => connectHost(volume));
    const set = (await record<ReplicaSetRecord>(keys.replicaSet(volume.UUID)))!;
    const primary = set.primaryNodeUUID;
    const other = volume.nodeList.find((n) => n !== primary)!;
    const writes = startAckedWrites(host(), device, 'node-stop');
    await until('writes flowing', async () => (await writes.acked()) > 50, 180_000);

    // POST stop (no force: the other copy is in sync and alive).
    const stoppedAt = Date.now() / 1000;
    await step('POST stop of the primary\'s node', () => api('POST', `/nodes/${primary}/stop`, {}));
    const next = await step('the other copy is promoted', () =>
      until('new primary', async () => {
        const s = await record<ReplicaSetRecord>(keys.replicaSet(volume.UUID));
        return s && s.epoch > set.epoch ? s : undefined;
      }, 120_000),
    );
    assert.equal(next.primaryNodeUUID, other);
    const acked = await writes.acked();
    await step('host I/O resumes on the new primary', () =>
      until('writes acknowledged again', async () => (await writes.acked()) > acked + 50 && (await writes.lastAckAt()) > stoppedAt, 240_000),
    );
    const stopped = await step('the node is stopped and serves nothing', () =>
      until('node stopped', async () => {
        const run = await record<NodeRunStateRecord>(keys.nodeRunState(primary));
        const n = await getNode(primary);
        return run?.state === 'Stopped' && n.state === 'Inactive' && n;
      }, 120_000),
    );
    assert.match(stopped.failureInfo, /stopped by an administrator/);
    await until('its exports gone', async () => (await subsystemsOf(primary, volume.UUID)).length === 0, 60_000);

    // The last in-sync copy's node refuses to stop, naming the volume; nothing changes.
    const refused = await request('POST', `/nodes/${other}/stop`, {});
    assert.equal(refused.status, 400, refused.text);
    assert.ok(refused.text.includes(`default/ops (${volume.UUID})`), refused.text);
    assert.equal((await getNode(other)).state, 'Active');

    // The stopped node's agent restarts: the node stays stopped.
    const stoppedNode = storageOf(primary);
    await step('restart the stopped node\'s agent', async () => {
      await stoppedNode.stopAgent('TERM', 120_000);
      await stoppedNode.startAgent({ timeoutMs: 240_000 });
    });
    await step('its agent is back and passed once', () =>
      until('a data path pass after the restart', async () => {
        const log = stoppedNode.agentLogTail(400_000);
        const ready = log.lastIndexOf('strata-agent ready');
        return ready >= 0 && /data path (pass|reconciled)/.test(log.slice(ready)) && log.slice(0, ready).includes('node stopped by an administrator: not serving it');
      }, 240_000),
    );
    assert.deepEqual(await subsystemsOf(primary, volume.UUID), [], 'still serving nothing');
    assert.equal((await getNode(primary)).state, 'Inactive');

    const result = await step('stop the writes and verify', () => writes.stopAndVerify());
    assert.equal(result.errors, '', 'no write failed on the host');
    assert.equal(result.bad, 0, 'every acknowledged write reads back');
    const gaps = result.times.slice(1).map((t, i) => t - result.times[i]!);
    console.log(`# node stop: ${result.checked} acknowledged writes checked, longest gap ${Math.max(...gaps).toFixed(3)} s`);

    // POST start: the node serves again, its copy resyncs by bitmap and rejoins.
    await step('POST start', () => api('POST', `/nodes/${primary}/start`, {}));
    await step('the node is Active again', () => until('Active', async () => (await getNode(primary)).state === 'Active', 120_000));
    await step('its copy resyncs and rejoins', () =>
      until('FullyProtected', async () => {
        const s = await record<ReplicaSetRecord>(keys.replicaSet(volume.UUID));
        return s?.inSync.length === 2 && (await getVolume(volume.UUID)).protectionState === 'FullyProtected';
      }, 300_000),
    );
    // The agent records Running once the start is done, which may come a moment after the resync.
    await until('run state Running', async () => (await record<NodeRunStateRecord>(keys.nodeRunState(primary)))?.state === 'Running', 120_000);
  });

  it('replace of a replica\'s node whose agent stopped (its kernel still serving the copy) by the Unattached node, under host write load: Detaching / Attaching, the copy re-created on the target in full and byte for byte, the source detached, no I/O error', async () => {
    assert.ok(device && volumeUUID, 'the first scenario connected the host');
    const replicaSet = async () => (await record<ReplicaSetRecord>(keys.replicaSet(volumeUUID)))!;
    const target = storage.find((s) => s.name === SPARE)!.nodeUUID();
    const set = await replicaSet();
    assert.equal(set.inSync.length, 2, 'starts FullyProtected');
    const primary = set.primaryNodeUUID;
    const source = set.inSync.find((n) => n !== primary)!;
    assert.equal((await getNode(target)).state, 'Unattached');

    // Known data near the volume's end (the acknowledged-write log writes from block 0 on).
    const DATA_AT_MIB = 56;
    const data = randomBytes(8 * MiB);
    await step('write 8 MiB of known data through the host', () =>
      host().runOk(['dd', `of=${device}`, 'bs=1M', `seek=${DATA_AT_MIB}`, 'count=8', 'iflag=fullblock', 'oflag=direct', 'conv=notrunc', 'status=none'], { input: data, timeoutMs: 120_000 }),
    );
    const writes = startAckedWrites(host(), device, 'replace');
    await until('writes flowing', async () => (await writes.acked()) > 50, 180_000);

    // The replica's agent stops (SIGTERM, as `systemctl stop`): the node is Inactive at once, but
    // its kernel still serves the copy's export, so the primary keeps mirroring to it and the
    // replica set still calls it in sync: the replace must take it out (it hung here before).
    const stoppedAt = Date.now() / 1000;
    await step('stop the replica\'s agent', () => storageOf(source).stopAgent('TERM', 120_000));
    await step('the source node is Inactive', () => until('source Inactive', async () => (await getNode(source)).state === 'Inactive', 120_000));
    await step('host writes go on', () => writes.resumed(stoppedAt));
    assert.ok((await replicaSet()).inSync.includes(source), 'its copy is still in sync (its export still served)');

    await step('POST replace', () => api('POST', `/nodes/${source}/replace`, { TargetNodeUUID: target }));
    const again = await request('POST', `/nodes/${source}/replace`, { TargetNodeUUID: target });
    assert.equal(again.status, 409, `a second replace while the first runs: ${again.text}`);
    const seen = { source: new Set<string>(), target: new Set<string>() };
    const command = await step('the copy is re-created on the target and resynced in full; the replace completes', () =>
      until('replace completed', async () => {
        const [s, t] = await Promise.all([getNode(source), getNode(target)]);
        seen.source.add(`${s.state}: ${s.failureInfo}`);
        seen.target.add(t.state);
        const c = await record<NodeCommandRecord>(keys.nodeCommand(source));
        return c?.completedAt || c?.failure ? c : undefined;
      }, 600_000),
    );
    assert.equal(command.failure, undefined, `the replace failed: ${command.failure}`);
    assert.ok([...seen.source].some((st) => st === `Detaching: being replaced by node ${target}: its copies are re-created there`), `the source showed Detaching: ${[...seen.source].join(' | ')}`);
    assert.ok(seen.target.has('Attaching'), `the target showed Attaching: ${[...seen.target].join(', ')}`);

    const volume = await until('FullyProtected on the primary and the target', async () => {
      const v = await getVolume(volumeUUID);
      return v.protectionState === 'FullyProtected' && v;
    }, 120_000);
    assert.deepEqual([...volume.nodeList].sort(), [primary, target].sort(), 'the target took the source\'s place');
    assert.equal(volume.primaryNodeUUID, primary, 'the primary stayed');
    assert.deepEqual([...(await replicaSet()).inSync].sort(), [primary, target].sort());
    // The primary dropped its leg to the source's copy (still served by that kernel) and mirrors
    // to the target's.
    const primaryGuest = storageOf(primary).guest;
    const connections = (await primaryGuest.runOk(['sh', '-c', 'cat /sys/class/nvme/nvme*/subsysnqn 2>/dev/null; true'], { timeoutMs: 30_000 })).stdout;
    assert.ok(!connections.includes(`:rep:${source}`), `the primary is still connected to the source's copy:\n${connections}`);
    assert.ok(connections.includes(`:rep:${target}`), `the primary mirrors to the target:\n${connections}`);
    const [detached, attached] = await Promise.all([getNode(source), getNode(target)]);
    assert.equal(detached.state, 'Inactive');
    assert.equal(detached.failureInfo, `replaced by node ${target}; detached`);
    assert.equal(attached.state, 'Active');
    const events = (await api<{ events: { EventName: string; Description: string }[] }>('GET', '/events?limit=1000')).events;
    const named = (name: string) => events.filter((e) => e.EventName === name).map((e) => e.Description);
    assert.ok(named('NodeReplaceRequested').some((d) => d.includes(`replace to node ${target}`)), 'NodeReplaceRequested');
    assert.ok(named('VolumeReplicaReplaced').some((d) => d.includes(`${source} (replaced by an administrator) re-created on ${target}`)), `VolumeReplicaReplaced: ${named('VolumeReplicaReplaced').join(' | ')}`);
    assert.ok(named('NodeReplaced').some((d) => d.includes(`replaced by node`) && d.includes(target)), 'NodeReplaced');

    const result = await step('stop the writes and verify', () => writes.stopAndVerify());
    assert.equal(result.errors, '', 'no write failed on the host');
    assert.equal(result.bad, 0, 'every acknowledged write reads back');
    assert.ok(result.checked * 4096 <= DATA_AT_MIB * MiB, `the write log (${result.checked} blocks) stayed below the known data`);
    const gaps = result.times.slice(1).map((t, i) => t - result.times[i]!);
    console.log(`# node replace: ${result.checked} acknowledged writes checked, longest gap ${Math.max(...gaps).toFixed(3)} s`);

    // Byte for byte: the target's backing holds the known data, and the whole volume as the
    // primary's does; the host reads the known data back.
    const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
    assert.equal(await backingDigest(storageOf(target), volumeUUID, 8, DATA_AT_MIB), sha256(data), 'the target\'s copy holds the known data');
    const whole = await step('read both backings whole', () => Promise.all([primary, target].map((n) => backingDigest(storageOf(n), volumeUUID, VOLUME_MIB))));
    assert.equal(whole[1], whole[0], 'the target\'s copy equals the primary\'s');
    const read = (await host().runOk(['dd', `if=${device}`, 'bs=1M', `skip=${DATA_AT_MIB}`, 'count=8', 'iflag=direct', 'status=none'], { timeoutMs: 120_000 })).stdoutBytes;
    assert.equal(sha256(read), sha256(data), 'the host reads the known data back');
  });

  it('restart with considerBackend: the node\'s md array and btrfs are stopped and assembled again, the data reads back byte for byte, the volume is served again', async () => {
    const volume = await step('create a volume of one copy → Available', () => createVolume('backend', 1, () => true));
    const node = volume.nodeList[0]!;
    const device = await step('connect the host', () => connectHost(volume));
    const sh = async (command: string) => (await host().runOk(['sh', '-c', command], { timeoutMs: 120_000 })).stdout;
    await step('write 16 MiB of random data', () =>
      sh(`dd if=/dev/urandom of=/tmp/backend.bin bs=1M count=16 status=none && dd if=/tmp/backend.bin of=${device} bs=1M oflag=direct conv=fsync status=none`),
    );
    const before = await poolIdentity(node);
    const readBack = () =>
      until('read back', async () => {
        await sh(`dd if=${device} of=/tmp/backend.back bs=1M count=16 iflag=direct status=none && cmp /tmp/backend.bin /tmp/backend.back`);
        return true;
      }, 120_000);

    // Without force: the node holds the volume's only copy.
    const refused = await request('POST', `/nodes/${node}/restart`, { considerBackend: true });
    assert.equal(refused.status, 400, refused.text);
    assert.ok(refused.text.includes(`default/backend (${volume.UUID})`), refused.text);

    // The mount point is busy (a process in the pool): the reassembly fails with the kernel's
    // reason, the node stays stopped; a start serves it again, pool and data as they were.
    const guest = storageOf(node).guest;
    const busy = guest.run(['sh', '-c', `echo $$ > /tmp/busy.pid && cd ${before.mountPoint} && exec sleep 600`], { timeoutMs: 700_000 });
    await until('the mount point is busy', async () => (await guest.run(['test', '-s', '/tmp/busy.pid'], { timeoutMs: 60_000 })).code === 0, 120_000);
    await step('POST restart with considerBackend, mount point busy', () => api('POST', `/nodes/${node}/restart`, { considerBackend: true, force: true }));
    const failedCommand = (await record<NodeCommandRecord>(keys.nodeCommand(node)))!;
    const failed = await step('the restart fails: the node stays stopped', () =>
      until('run state failure', async () => {
        const r = await record<NodeRunStateRecord>(keys.nodeRunState(node));
        return r?.commandId === failedCommand.id && r.failure !== undefined && r;
      }, 300_000),
    );
    assert.equal(failed.state, 'Stopped');
    assert.match(failed.failure!, /^reassembling the storage pool failed: unmounting .* failed: umount: .*(busy)/);
    assert.equal(failed.reassembled, undefined);
    const inactive = await getNode(node);
    assert.equal(inactive.state, 'Inactive');
    assert.match(inactive.failureInfo, /restart failed .*target is busy/);
    assert.deepEqual(await subsystemsOf(node, volume.UUID), [], 'serves nothing');
    await guest.runOk(['sh', '-c', 'kill $(cat /tmp/busy.pid)'], { timeoutMs: 120_000 });
    await busy;
    await step('POST start after the failure', () => api('POST', `/nodes/${node}/start`, {}));
    const startCommand = (await record<NodeCommandRecord>(keys.nodeCommand(node)))!;
    await step('node Active, volume Available, data intact', async () => {
      await until('served again', async () => (await getNode(node)).state === 'Active' && (await getVolume(volume.UUID)).state === 'Available', 120_000);
      await readBack();
    });
    // The start is over (the next command is accepted) once the agent records Running for it: after
    // the resync of any replicated copy the node holds (the replace left it one), not at Active.
    await step('the start completes', () =>
      until('run state Running for the start', async () => {
        const r = await record<NodeRunStateRecord>(keys.nodeRunState(node));
        return r?.commandId === startCommand.id && r.state === 'Running';
      }, 300_000),
    );
    const unchanged = await poolIdentity(node);
    assert.deepEqual([unchanged.diskseq, unchanged.btrfsInode], [before.diskseq, before.btrfsInode], 'the failed reassembly left md and the mount as they were');

    await step('POST restart with considerBackend', () => api('POST', `/nodes/${node}/restart`, { considerBackend: true, force: true }));
    const command = (await record<NodeCommandRecord>(keys.nodeCommand(node)))!;
    assert.equal(command.considerBackend, true);
    const details = new Set<string>();
    const run = await step('stopped, pool reassembled, started: Running', () =>
      until('run state Running after the reassembly', async () => {
        const r = await record<NodeRunStateRecord>(keys.nodeRunState(node));
        if (r?.commandId === command.id) details.add(`${r.state}: ${r.detail}`);
        if (r?.failure) throw new Error(`the restart failed: ${r.failure}`);
        return r?.commandId === command.id && r.state === 'Running' && r;
      }, 300_000),
    );
    assert.equal(run.reassembled, true, [...details].join('\n'));
    assert.match(run.detail, /storage pool reassembled/);
    const log = storageOf(node).agentLogTail(400_000);
    const steps = /"steps":\[([^\]]*)\][^\n]*node pool reassembled/.exec(log)?.[1] ?? '';
    assert.match(steps, /unmounted .*stopped \/dev\/md\d+.*assembled \/dev\/md\d+ from \/dev\/nvme.*mounted \/dev\/md\d+/, `the agent's steps: ${steps}`);
    const after = await poolIdentity(node);
    console.log(`# considerBackend: md ${before.block} diskseq ${before.diskseq} → ${after.block} diskseq ${after.diskseq}, btrfs sysfs inode ${before.btrfsInode} → ${after.btrfsInode}, mount id ${before.mountId} → ${after.mountId}`);
    assert.notEqual(after.diskseq, before.diskseq, 'the md array was stopped and assembled again (a new disk)');
    assert.notEqual(after.btrfsInode, before.btrfsInode, 'the btrfs was unmounted and mounted again');

    await step('node Active, volume Available', () =>
      until('served again', async () => (await getNode(node)).state === 'Active' && (await getVolume(volume.UUID)).state === 'Available', 120_000),
    );
    await step('the data reads back byte for byte', readBack);
    await host().runOk(['nvme', 'disconnect-all'], { timeoutMs: 30_000 });
  });
});
