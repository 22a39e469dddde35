// The host side of a replicated volume in the lab, shared by test/e2e/replication.e2e.test.ts and
// bench/replication.ts: one path per node (every node is 10.0.2.2 to the initiator guest, so node
// i's path to a volume port is forwarded from its own host port), and the acknowledged-write log
// (test/e2e/scripts/acked-writes.py) that failover checks and measures.
import { REPLICA_DATA_OFFSET_BYTES } from '../../lib/replication.js';
import { waitUntil } from '../helpers/wait.js';
import type { StorageGuest } from './cluster-lab.js';
import type { Guest } from './lab/index.js';
import { nvmeHostArgs, script } from './lab/index.js';

const FROM_GUESTS = '10.0.2.2';

export interface PathsOptions {
  /** The initiator guest (the host). */
  readonly host: Guest;
  /** The nodes to connect, by their index in the bed (which picks the host port) and guest. */
  readonly nodes: readonly { readonly index: number; readonly guest: Guest }[];
  /** The volume's port (the same on every node). */
  readonly port: number;
  readonly subsystemNQN: string;
  readonly volumeUUID: string;
  readonly hostNQN: string;
  /** This host's port that reaches `port` on node i's guest. */
  readonly pathPort: (i: number, port: number) => number;
  /**
   * The controllers' keep-alive timeout (nvme-cli's default otherwise, 5 s): a suite that never
   * fails over gives a host busy under emulation longer (a TCG host running fio at QD16 missed
   * its keep-alives once and the target dropped its controller).
   */
  readonly keepAliveSeconds?: number;
}

/** Forwards the volume's port of each given node and connects the host to each path; returns the host's block device. */
export async function connectPaths(o: PathsOptions): Promise<string> {
  for (const { index, guest } of o.nodes) await guest.addHostForward(o.pathPort(index, o.port), o.port);
  for (const { index } of o.nodes) {
    await o.host.runOk(['nvme', 'connect', '-t', 'tcp', '-a', FROM_GUESTS, '-s', String(o.pathPort(index, o.port)), '-n', o.subsystemNQN, ...nvmeHostArgs(o.hostNQN), '--reconnect-delay', '1', ...(o.keepAliveSeconds ? ['--keep-alive-tmo', String(o.keepAliveSeconds)] : [])], { timeoutMs: 60_000 });
  }
  return (await o.host.runOk(['sh', script('nvme-ns-by-uuid.sh'), o.volumeUUID, '30'], { timeoutMs: 45_000 })).stdout.trim();
}

export interface AckedWrites {
  /** Writes acknowledged so far. */
  acked(): Promise<number>;
  /** The initiator's clock at the last acknowledgement (unix seconds; 0 before the first). */
  lastAckAt(): Promise<number>;
  /** Until more than `more` writes are acknowledged from now on, the last after `since` (initiator clock, unix seconds). */
  resumed(since: number, more?: number, timeoutMs?: number): Promise<void>;
  /** Stops the writer and reads back every acknowledged block; `times` are the acknowledgements' (initiator clock). */
  stopAndVerify(): Promise<{ checked: number; bad: number; errors: string; times: number[] }>;
}

/** Starts the acknowledged-write log on the host, writing to `device` from block 0. */
export function startAckedWrites(host: Guest, device: string, tag: string): AckedWrites {
  const sh = async (command: string, timeoutMs = 60_000) => (await host.runOk(['sh', '-c', command], { timeoutMs })).stdout;
  const log = `/tmp/acked-${tag}.log`;
  const stop = `/tmp/acked-${tag}.stop`;
  const writer = host.run(['python3', script('acked-writes.py'), 'write', device, log, stop], { timeoutMs: 900_000 });
  const acked = async () => Number((await sh(`grep -c -v '^error' ${log} 2>/dev/null || true`)).trim() || '0');
  const lastAckAt = async () => Number((await sh(`grep -v '^error' ${log} | tail -1 | cut -d' ' -f2`)).trim() || '0');
  return {
    acked,
    lastAckAt,
    async resumed(since, more = 50, timeoutMs = 240_000) {
      const from = await acked();
      await waitUntil(async () => (await acked()) > from + more && (await lastAckAt()) > since, `host writes acknowledged again (${tag})`, timeoutMs, 500);
    },
    async stopAndVerify() {
      await sh(`touch ${stop}`);
      await writer;
      const out = await sh(`python3 ${script('acked-writes.py')} verify ${device} ${log}`, 600_000);
      const m = /checked=(\d+) bad=(\d+)/.exec(out);
      if (!m) throw new Error(`acked-writes verify: ${out}`);
      const lines = (await sh(`cat ${log}`)).split('\n').filter(Boolean);
      const times = lines.filter((l) => !l.startsWith('error')).map((l) => Number(l.split(' ')[1]));
      return { checked: Number(m[1]), bad: Number(m[2]), errors: lines.filter((l) => l.startsWith('error')).join('\n'), times };
    },
  };
}

const MiB = 1024 * 1024;

/**
 * SHA-256 of `mib` MiB of a volume's data as one storage guest's backing file holds it, from
 * `fromMiB` MiB into the volume (after md's data offset: REPLICA_DATA_OFFSET_BYTES).
 */
export async function backingDigest(storage: StorageGuest, volumeUUID: string, mib: number, fromMiB = 0): Promise<string> {
  const sh = async (command: string) => (await storage.guest.runOk(['sh', '-c', command], { timeoutMs: 120_000 })).stdout;
  const file = (await sh(`find /var/lib/strata/pool -name '${volumeUUID}.*' -path '*/volumes/*' | head -1`)).trim();
  if (!file) throw new Error(`${storage.name} holds no backing of volume ${volumeUUID}`);
  const skip = Number(REPLICA_DATA_OFFSET_BYTES) / MiB + fromMiB;
  return (await sh(`dd if=${file} bs=1M skip=${skip} count=${mib} iflag=direct status=none | sha256sum`)).split(' ')[0]!;
}

/** Kills a storage guest's QEMU at once (the server loses power) and releases what the lab holds for it. */
export async function killStorageGuest(storage: StorageGuest): Promise<void> {
  process.kill(storage.guest.pid, 'SIGKILL');
  await storage.guest.exited;
  // Its job socket: a killed guest is not stopped by a suite's after(), and its open socket would
  // keep the test process from exiting.
  await storage.guest.stop();
}
