// The storage pools of this agent's nodes (domain): brings each node's pool up (md + btrfs over
// its data devices, btrfs-md-pool.ts), grows it when the control plane adds a device to the
// node record (pool-growth.ts: one step per tick, resumable), and measures it for the pool
// report (capacity after parity and filesystem overhead, usage, device states).
//
// Ticks run per node, serialized with the data path's pool opens: at start, whenever the node
// record changes (etcd watch), every `intervalMs`, and every `busyIntervalMs` while md reshapes,
// resyncs or recovers (so a device turns Healthy in the report soon after md is done). A node
// without data devices keeps its volumes in its pool directory on the host filesystem and has
// no pool to report. Nothing is brought up on a server without a kernel target (`enabled`).
//
// The devices of a grow in progress are written ahead to <stateDir>/pools.json: after an agent
// restart they are still reported Adding until md and the filesystem are done.
import { mkdirSync, promises as fs, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterReader } from '../../../lib/etcd/cluster-store.js';
import type { NodeStore } from '../../../lib/etcd/node-store.js';
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import { writeFileAtomic } from '../../../lib/files.js';
import type { Logger } from '../../../lib/logger.js';
import type { NodeRecord } from '../../../lib/records.js';
import { arrayNameOf, examine, prepareBtrfsMdPool, reassembleBtrfsMdPool, runningArray, runOrFail, signatureOf, type Reassembled } from './btrfs-md-pool.js';
import { parseBtrfsUsage, type BtrfsUsage } from './btrfs-usage.js';
import { integrityErrorsOf, readBtrfsErrorStats } from './integrity-errors.js';
import { isActiveData, isArrayBusy, isFaulty, isJournal, pcieNamespaces, readMdArray, type MdArray, type NvmeNamespace } from './md-array.js';
import { commandsOf, deviceStatuses, isParitylessRaid4, parityFactor, planGrowth, type DesiredDevice, type GrowthPlan } from './pool-growth.js';
import type { NodePoolStatus, PoolReportSnapshot, PoolReportSource, PoolStateName } from './pool-report.js';
import { FilePool, PoolError, type CommandRunner, type StoragePool } from './storage-pool.js';

/**
 * The cluster as the data path knows it, from the cluster record: pools are opened for its UUID
 * (a pool of another cluster is refused) and volume subsystems are named after its NQN.
 */
export interface ClusterFacts {
  readonly clusterUUID: string;
  readonly subsystemNQN: string;
}

export interface NodePoolsOptions {
  /** The cluster record (lib/etcd/cluster-store.ts): pools are opened for its UUID. */
  readonly cluster: ClusterReader;
  /** This server's node records, read and watched (lib/etcd/node-store.ts). */
  readonly nodes: Pick<NodeStore, 'read' | 'watchPuts'>;
  readonly nodeUUIDs: readonly string[];
  /** <poolDir>/<nodeUUID>: the pool directory (the btrfs mount point when the node has devices). */
  readonly poolDir: string;
  readonly sysfsRoot: string;
  readonly mountsPath: string;
  readonly stateDir: string;
  readonly run: CommandRunner;
  /** Whether pools may be brought up on this server (it has a kernel target); asked once. */
  readonly enabled: () => Promise<boolean>;
  readonly intervalMs: number;
  readonly busyIntervalMs?: number;
  readonly logger: Logger;
}

interface NodeEntry {
  readonly nodeUUID: string;
  record: NodeRecord | undefined;
  /** The opened pool; undefined until brought up (or after the array disappeared). */
  pool: FilePool | undefined;
  /** Whether `pool` is the md + btrfs pool (else the plain directory of a node without devices). */
  md: boolean;
  queue: Promise<unknown>;
  status: NodePoolStatus | undefined;
  busy: boolean;
  /** The last growth step that failed, reported in the pool's error until a step succeeds. */
  growthError: string;
  /**
   * Why the pool is down (taken down to be reassembled, or its reassembly failed); undefined when
   * it is not. While down nothing brings it up, opens, reads, measures or grows it: every caller
   * gets PoolUnavailable, never the bare mount point's empty directory.
   */
  down: string | undefined;
}

/** The node's pool is down (docs/node-operations.md, considerBackend): no caller may use it now. */
export class PoolUnavailable extends PoolError {}

interface PoolsState {
  version: 1;
  /** node → serials of a grow in progress (written ahead). */
  adding: Record<string, string[]>;
}

export class NodePools implements PoolReportSource {
  private readonly entries = new Map<string, NodeEntry>();
  /** The StoragePool handles given to the data path, one per node. */
  private readonly handles = new Map<string, StoragePool>();
  private readonly statePath: string;
  private state: PoolsState;
  private enabled: Promise<boolean> | undefined;
  private report: PoolReportSnapshot | undefined;
  private reportKey = '';
  private sequence = 0;
  private readonly listeners = new Set<(r: PoolReportSnapshot) => void>();
  private readonly watchers: StoreWatch[] = [];
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  private started = false;

  constructor(private readonly options: NodePoolsOptions) {
    for (const nodeUUID of options.nodeUUIDs) {
      this.entries.set(nodeUUID, { nodeUUID, record: undefined, pool: undefined, md: false, queue: Promise.resolve(), status: undefined, busy: false, growthError: '', down: undefined });
    }
    this.statePath = join(options.stateDir, 'pools.json');
    this.state = this.loadState();
  }

  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    for (const nodeUUID of this.options.nodeUUIDs) {
      // watcher() connects in the background and keeps retrying; the periodic tick covers gaps.
      const watcher = this.options.nodes.watchPuts(
        nodeUUID,
        () => this.schedule(50),
        (err) => this.options.logger.debug({ err, nodeUUID }, 'node record watch failed; the periodic pool check goes on'),
      );
      this.watchers.push(watcher);
    }
    this.schedule(0);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    await Promise.all(this.watchers.splice(0).map((w) => w.cancel().catch(() => undefined)));
    await this.refreshing;
    await Promise.all([...this.entries.values()].map((e) => e.queue.catch(() => undefined)));
  }

  /** Checks, grows and measures every node's pool now (after any running check). For tests. */
  async refreshNow(): Promise<PoolReportSnapshot | undefined> {
    await this.refreshAll();
    return this.report;
  }

  /**
   * The pool the data path stores a node's volumes in. The handle stays the same object while
   * the pool behind it is brought up again (after the array was gone, or the node got devices).
   */
  async open(nodeUUID: string, cluster: ClusterFacts): Promise<StoragePool> {
    const entry = this.entry(nodeUUID);
    return this.serialized(entry, async () => {
      if (!entry.record) entry.record = await this.readNode(nodeUUID);
      if (entry.down === undefined) return this.ensureOpen(entry, cluster);
      // The handle: each of its calls answers that the pool is unavailable until it is up again.
      return this.handle(entry);
    });
  }

  /**
   * Before the pools start: the node's pool stays down (an agent restarted in the middle of a
   * reassembly, or after one failed) until reassemble() or bringUp().
   */
  holdDownAtStart(nodeUUID: string, reason: string): void {
    this.entry(nodeUUID).down = reason;
  }

  /**
   * Node restart with considerBackend: the pool goes down at once for every caller (the running
   * check or open finishes first), then unmount, md stop, md assembly from the node's managed
   * devices, mount; the pool is opened again and is up. Throws with the kernel's reason when a
   * step fails, and the pool stays down (nothing brings it up but bringUp()).
   */
  async reassemble(nodeUUID: string, reason: string): Promise<Reassembled> {
    const entry = this.entry(nodeUUID);
    entry.down = reason;
    const reassembled = await this.serialized(entry, async () => {
      entry.down = reason;
      entry.pool = undefined;
      entry.status = this.downStatus(entry);
      this.publish();
      try {
        if (!(await this.isEnabled())) throw new PoolError('this server has no kernel NVMe target: its pools are not brought up here');
        const cluster = await this.clusterFacts();
        const record = (entry.record = await this.readNode(nodeUUID));
        if (record.managedDeviceSerials.length === 0) throw new PoolError(`node ${nodeUUID} has no managed devices: it has no md array and btrfs to reassemble`);
        const logger = this.options.logger.child({ nodeUUID });
        const result = await reassembleBtrfsMdPool({
          nodeUUID,
          devices: { dataSerials: record.managedDeviceSerials, journalSerial: record.journalDeviceSerial, ec: record.ec },
          mountPoint: this.mountPoint(nodeUUID),
          sysfsRoot: this.options.sysfsRoot,
          mountsPath: this.options.mountsPath,
          run: this.options.run,
          logger,
        });
        entry.pool = await FilePool.open({ dir: this.mountPoint(nodeUUID), clusterUUID: cluster.clusterUUID, logger, run: this.options.run });
        entry.md = true;
        entry.down = undefined;
        return result;
      } catch (err) {
        entry.down = `the reassembly failed: ${(err as Error).message}`;
        entry.status = this.downStatus(entry);
        throw err;
      }
    }).finally(() => this.publish());
    this.schedule(0); // measured again
    return reassembled;
  }

  /**
   * The pool is up again for its callers (node start): after a failed reassembly, it is brought
   * up the way it is after a boot (assembled and mounted when it is not), by the next check or open.
   */
  async bringUp(nodeUUID: string): Promise<void> {
    const entry = this.entry(nodeUUID);
    if (entry.down === undefined) return; // up: nothing to wait for
    await this.serialized(entry, async () => {
      if (entry.down === undefined) return;
      this.options.logger.info({ nodeUUID, was: entry.down }, 'node pool up again');
      entry.down = undefined;
      try {
        entry.record = await this.readNode(nodeUUID);
        await this.ensureOpen(entry, await this.clusterFacts());
      } catch (err) {
        // Reported by the next check, which tries again; the data path reports its volumes Failed meanwhile.
        this.options.logger.warn({ err, nodeUUID }, 'bringing the node pool up failed');
      }
    });
    this.schedule(0);
  }

  private async clusterFacts(): Promise<ClusterFacts> {
    const record = await this.options.cluster.read();
    if (!record) throw new PoolError('the cluster record is not in etcd');
    return { clusterUUID: record.UUID, subsystemNQN: record.subsystemNQN };
  }

  // --- PoolReportSource -------------------------------------------------------------------------

  current(): PoolReportSnapshot | undefined {
    return this.report;
  }

  onChange(listener: (report: PoolReportSnapshot) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  acknowledged(): void {
    // Nothing to release: every report is complete for this agent's nodes.
  }

  // --- Scheduling -------------------------------------------------------------------------------

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.tick();
    }, delayMs);
  }

  private async tick(): Promise<void> {
    await this.refreshAll();
    // A watch event during the check already scheduled the next one.
    if (this.timer || this.stopped) return;
    const busy = [...this.entries.values()].some((e) => e.busy);
    this.schedule(busy ? (this.options.busyIntervalMs ?? 2000) : this.options.intervalMs);
  }

  private async refreshAll(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.again = false;
        if (!(await this.isEnabled())) return;
        let cluster: ClusterFacts | undefined;
        try {
          const record = await this.options.cluster.read();
          cluster = record ? { clusterUUID: record.UUID, subsystemNQN: record.subsystemNQN } : undefined;
        } catch (err) {
          this.options.logger.debug({ err }, 'reading the cluster record failed; pools are checked at the next tick');
        }
        if (!cluster) return;
        for (const entry of this.entries.values()) {
          await this.serialized(entry, () => this.refresh(entry, cluster)).catch((err: Error) =>
            this.options.logger.warn({ err, nodeUUID: entry.nodeUUID }, 'checking the node pool failed'),
          );
        }
        this.publish();
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private isEnabled(): Promise<boolean> {
    this.enabled ??= this.options.enabled().catch(() => false);
    return this.enabled;
  }

  private serialized<T>(entry: NodeEntry, fn: () => Promise<T>): Promise<T> {
    const next = entry.queue.then(fn, fn);
    entry.queue = next.catch(() => undefined);
    return next;
  }

  private entry(nodeUUID: string): NodeEntry {
    const entry = this.entries.get(nodeUUID);
    if (!entry) throw new Error(`node ${nodeUUID} is not a node of this agent`);
    return entry;
  }

  // --- One node ---------------------------------------------------------------------------------

  private async readNode(nodeUUID: string): Promise<NodeRecord> {
    const record = await this.options.nodes.read(nodeUUID);
    if (!record) throw new Error(`node ${nodeUUID} is not registered in etcd yet`);
    return record;
  }

  private mountPoint(nodeUUID: string): string {
    return join(this.options.poolDir, nodeUUID);
  }

  /** Brings the node's pool up when it is not (or the node got its first devices). */
  private async ensureOpen(entry: NodeEntry, cluster: ClusterFacts): Promise<StoragePool> {
    const record = entry.record!;
    const wantsMd = record.managedDeviceSerials.length > 0;
    if (!entry.pool || (wantsMd && !entry.md)) {
      const dir = this.mountPoint(entry.nodeUUID);
      const logger = this.options.logger.child({ nodeUUID: entry.nodeUUID });
      if (wantsMd) {
        if (entry.pool && !entry.md) await refuseHidingVolumes(dir);
        const array = await prepareBtrfsMdPool({
          nodeUUID: entry.nodeUUID,
          devices: { dataSerials: record.managedDeviceSerials, journalSerial: record.journalDeviceSerial, ec: record.ec },
          mountPoint: dir,
          sysfsRoot: this.options.sysfsRoot,
          mountsPath: this.options.mountsPath,
          run: this.options.run,
          logger,
        });
        logger.info(array, 'node pool array ready');
      }
      entry.pool = await FilePool.open({ dir, clusterUUID: cluster.clusterUUID, logger, run: this.options.run });
      entry.md = wantsMd;
    }
    return this.handle(entry);
  }

  /** A StoragePool that forwards to whatever pool the node has now. */
  private handle(entry: NodeEntry): StoragePool {
    let handle = this.handles.get(entry.nodeUUID);
    if (!handle) {
      // Async: a pool that is down or not open rejects like any failed call.
      const pool = () => {
        if (entry.down !== undefined) throw new PoolUnavailable(`the storage pool of node ${entry.nodeUUID} is unavailable: ${entry.down}`);
        if (!entry.pool) throw new Error(`the storage pool of node ${entry.nodeUUID} is not open`);
        return entry.pool;
      };
      handle = {
        ensureVolume: async (...a) => pool().ensureVolume(...a),
        volumeSize: async (...a) => pool().volumeSize(...a),
        resize: async (...a) => pool().resize(...a),
        removeVolume: async (...a) => pool().removeVolume(...a),
        ensureSnapshot: async (...a) => pool().ensureSnapshot(...a),
        removeSnapshot: async (...a) => pool().removeSnapshot(...a),
        listSnapshots: async (...a) => pool().listSnapshots(...a),
        rollback: async (...a) => pool().rollback(...a),
        usage: async (...a) => pool().usage(...a),
        capacity: async () => pool().capacity(),
        listVolumes: async () => pool().listVolumes(),
      };
      this.handles.set(entry.nodeUUID, handle);
    }
    return handle;
  }

  private async refresh(entry: NodeEntry, cluster: ClusterFacts): Promise<void> {
    try {
      entry.record = await this.readNode(entry.nodeUUID);
    } catch (err) {
      if (!entry.record) throw err;
      this.options.logger.debug({ err, nodeUUID: entry.nodeUUID }, 'reading the node record failed; using the last one');
    }
    const record = entry.record;
    entry.busy = false;
    if (entry.down !== undefined) {
      entry.status = this.downStatus(entry);
      return;
    }
    if (record.managedDeviceSerials.length === 0 && !entry.md) {
      entry.status = undefined; // no pool: its volumes (if any) live on the host filesystem
      return;
    }
    try {
      await this.ensureOpen(entry, cluster);
    } catch (err) {
      entry.status = this.failed(entry, `the storage pool cannot be brought up: ${(err as Error).message}`);
      entry.busy = false;
      return;
    }
    const name = arrayNameOf(entry.nodeUUID);
    const namespaces = await pcieNamespaces(this.options.sysfsRoot);
    const device = await runningArray(this.options.sysfsRoot, name, this.options.run);
    if (!device) {
      entry.pool = undefined; // brought up again at the next tick
      entry.status = this.failed(entry, `the pool's md array ${name} is not running`);
      return;
    }
    const block = device.slice('/dev/'.length);
    let array = await readMdArray(this.options.sysfsRoot, block, namespaces);
    let usage = await this.filesystemUsage(entry);
    const desired = await this.desiredDevices(record, array, namespaces, name);
    let plan = planGrowth({ array, ec: record.ec, desired, filesystem: usage });

    const step = plan.step;
    if (step.kind !== 'wait' && step.kind !== 'done') {
      const logger = this.options.logger.child({ nodeUUID: entry.nodeUUID, step: step.kind });
      if (step.kind === 'grow-raid0' || step.kind === 'add-spares') this.markAdding(entry.nodeUUID, step.serials);
      try {
        for (const [command, args] of commandsOf(step, device, this.mountPoint(entry.nodeUUID))) {
          await runOrFail(this.options.run, command, args, `${command} ${args.join(' ')}`);
        }
        entry.growthError = '';
        logger.info({ step }, 'node pool growth step done');
      } catch (err) {
        entry.growthError = (err as Error).message;
        logger.warn({ err: entry.growthError }, 'node pool growth step failed; retrying at the next check');
      }
      array = await readMdArray(this.options.sysfsRoot, block, namespaces);
      usage = await this.filesystemUsage(entry);
      plan = planGrowth({ array, ec: record.ec, desired: await this.desiredDevices(record, array, namespaces, name), filesystem: usage });
    }
    if (plan.step.kind === 'done') this.clearAdding(entry.nodeUUID);
    entry.status = await this.measure(entry, array, usage, desired, plan, namespaces);
    entry.busy = entry.status.state === 'Growing' || entry.status.state === 'Rebuilding';
  }

  /** The node record's data devices as found here; the non-members' signatures are checked. */
  private async desiredDevices(record: NodeRecord, array: MdArray, namespaces: ReadonlyMap<string, NvmeNamespace>, name: string): Promise<DesiredDevice[]> {
    const members = new Set(array.members.map((m) => m.serial));
    const desired: DesiredDevice[] = [];
    for (const serial of record.managedDeviceSerials) {
      const ns = namespaces.get(serial);
      if (!ns || members.has(serial)) {
        desired.push(ns ? { serial, block: ns.block } : { serial });
        continue;
      }
      const path = `/dev/${ns.block}`;
      let signature = await signatureOf(path, this.options.run).catch((err: Error) => `unreadable: ${err.message}`);
      if (signature === 'linux_raid_member') {
        const superblock = await examine(path, this.options.run);
        signature = superblock?.name === name ? 'ours' : `linux_raid_member of md array ${superblock?.name ?? 'unknown'}`;
      }
      desired.push({ serial, block: ns.block, signature });
    }
    return desired;
  }

  private async filesystemUsage(entry: NodeEntry): Promise<BtrfsUsage> {
    const { stdout } = await this.options.run('btrfs', ['filesystem', 'usage', '-b', this.mountPoint(entry.nodeUUID)]);
    return parseBtrfsUsage(stdout);
  }

  private async measure(
    entry: NodeEntry,
    array: MdArray,
    usage: BtrfsUsage,
    desired: readonly DesiredDevice[],
    plan: GrowthPlan,
    namespaces: ReadonlyMap<string, NvmeNamespace>,
  ): Promise<NodePoolStatus> {
    const adding = new Set(this.state.adding[entry.nodeUUID] ?? []);
    const integrity = integrityErrorsOf(array, await readBtrfsErrorStats(this.options.sysfsRoot, array.block));
    const devices = deviceStatuses(array, desired, plan, adding, (serial) => namespaces.get(serial)?.sizeBytes ?? 0n).map((d) => {
      const recoverable = integrity.recoverableBySerial.get(d.serial);
      return recoverable === undefined ? d : { ...d, recoverableIntegrityErrors: recoverable };
    });
    const contents = await entry.pool!.contents();
    const rawBytes = array.members.filter((m) => isActiveData(m) && !isFaulty(m)).reduce((sum, m) => sum + m.sizeBytes, 0n);
    // A parity-less raid4 (a raid0 pool grown online) stores no parity: one raw byte per byte.
    const factor = isParitylessRaid4(array) ? { num: 1n, den: 1n } : parityFactor(array.level, array.raidDisks);
    const busy = isArrayBusy(array);
    const growing =
      adding.size > 0 || !['wait', 'done'].includes(plan.step.kind) || array.syncAction === 'reshape' || array.reshapePending || devices.some((d) => d.state === 'Adding');
    const state: PoolStateName = growing
      ? 'Growing'
      : ['recover', 'resync'].includes(array.syncAction)
        ? 'Rebuilding'
        : array.degraded > (isParitylessRaid4(array) ? 1 : 0) || array.members.some(isFaulty)
          ? 'Degraded'
          : 'Ready';
    const problems = [entry.growthError, ...plan.refused.values()].filter((p) => p !== '');
    return {
      nodeUUID: entry.nodeUUID,
      state,
      error: problems.join('; '),
      level: array.level,
      journal: array.members.some(isJournal),
      rawBytes,
      arrayBytes: array.arrayBytes,
      capacityBytes: usage.dataUsed + usage.freeEstimated,
      freeBytes: usage.freeEstimated,
      provisionedBytes: contents.provisionedBytes,
      logicalUsedBytes: contents.logicalUsedBytes,
      physicalUsedBytes: usage.dataUsed,
      physicalUsedIncludingParityBytes: (usage.dataUsed * factor.num) / factor.den,
      rebuildProgressPercent: busy && array.syncProgress !== undefined ? Math.floor(array.syncProgress * 100) : 0,
      devices,
      measuredAt: new Date().toISOString(),
      ...(integrity.recoverable !== undefined ? { recoverableIntegrityErrors: integrity.recoverable } : {}),
      ...(integrity.unrecoverable !== undefined ? { unrecoverableIntegrityErrors: integrity.unrecoverable } : {}),
    };
  }

  /**
   * A pool that is down: not usable (Failed, no capacity, the reason), its devices as last
   * measured (a planned reassembly does not fail them).
   */
  private downStatus(entry: NodeEntry): NodePoolStatus {
    const error = `${DOWN}${entry.down ?? ''}`;
    const last = entry.status?.state !== 'Failed' || entry.status.error.startsWith(DOWN) ? entry.status : undefined;
    const status = this.failed(entry, error);
    return last ? { ...status, devices: last.devices } : status;
  }

  /** A pool that is not usable: no capacity, and its devices Failed with the reason. */
  private failed(entry: NodeEntry, error: string): NodePoolStatus {
    const record = entry.record;
    const devices = [
      ...(record?.managedDeviceSerials ?? []).map((serial) => ({ serial, role: 'data' as const })),
      ...(record?.journalDeviceSerial ? [{ serial: record.journalDeviceSerial, role: 'journal' as const }] : []),
    ];
    return {
      nodeUUID: entry.nodeUUID,
      state: 'Failed',
      error,
      level: '',
      journal: false,
      rawBytes: 0n,
      arrayBytes: 0n,
      capacityBytes: 0n,
      freeBytes: 0n,
      provisionedBytes: 0n,
      logicalUsedBytes: 0n,
      physicalUsedBytes: 0n,
      physicalUsedIncludingParityBytes: 0n,
      rebuildProgressPercent: 0,
      devices: devices.map((d) => ({ ...d, state: 'Failed', sizeBytes: 0n, error })),
      measuredAt: new Date().toISOString(),
    };
  }

  private publish(): void {
    const pools = [...this.entries.values()].map((e) => e.status).filter((s): s is NodePoolStatus => s !== undefined);
    const key = JSON.stringify(pools.map((p) => ({ ...p, measuredAt: '' })), (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
    if (this.report && key === this.reportKey) return;
    this.reportKey = key;
    this.sequence += 1;
    this.report = { sequence: this.sequence, pools };
    for (const listener of this.listeners) listener(this.report);
  }

  // --- Write-ahead state ------------------------------------------------------------------------

  private loadState(): PoolsState {
    try {
      const parsed = JSON.parse(readFileSync(this.statePath, 'utf8')) as Partial<PoolsState>;
      return { version: 1, adding: parsed.adding ?? {} };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.options.logger.warn({ err, path: this.statePath }, 'the pool state file is unreadable; starting without it');
      return { version: 1, adding: {} };
    }
  }

  private markAdding(nodeUUID: string, serials: readonly string[]): void {
    const now = this.state.adding[nodeUUID] ?? [];
    const next = [...new Set([...now, ...serials])];
    if (next.length === now.length) return;
    this.state = { version: 1, adding: { ...this.state.adding, [nodeUUID]: next } };
    this.saveState();
  }

  private clearAdding(nodeUUID: string): void {
    if (!this.state.adding[nodeUUID]) return;
    const adding = { ...this.state.adding };
    delete adding[nodeUUID];
    this.state = { version: 1, adding };
    this.saveState();
  }

  private saveState(): void {
    mkdirSync(this.options.stateDir, { recursive: true, mode: 0o700 });
    writeFileAtomic(this.statePath, `${JSON.stringify(this.state, null, 2)}\n`, 0o600);
  }
}

const DOWN = 'the storage pool is down: ';

/** A node that had no devices keeps volumes in its directory; a mount must not hide them. */
async function refuseHidingVolumes(dir: string): Promise<void> {
  const volumes = await fs.readdir(join(dir, 'volumes')).catch(() => [] as string[]);
  if (volumes.length > 0) {
    throw new Error(`${dir} holds ${volumes.length} volume backing(s) on the host filesystem; mounting the node's new pool there would hide them`);
  }
}
