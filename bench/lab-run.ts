// How a bench on the QEMU lab runs (bench/replication.ts, bench/qos.ts): its figures printed at
// the end (those recorded so far when it fails), the agents' and the control plane's logs kept,
// everything it started stopped in any case, and its drive images removed, also on Ctrl-C.
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StorageGuest } from '../test/e2e/cluster-lab.js';
import type { Guest } from '../test/e2e/lab/index.js';
import type { ControlPlaneProcess } from '../test/helpers/processes.js';
import { removeDir } from '../test/helpers/processes.js';

export interface LabRun {
  /** `bench/<name>`: the logs' prefix and the headings. */
  readonly name: string;
  /** The results heading's parenthesis: the bed. */
  readonly bed: string;
  /** The figures recorded (read at the end). */
  readonly results: readonly string[];
  /** The host directory of drive images and agent state. */
  readonly persistDir: string;
  main(): Promise<void>;
  /** What is running now (read at the end). */
  running(): { storage: readonly StorageGuest[]; initiator?: Guest; plane?: ControlPlaneProcess };
  /** Stops the host side after the guests: etcd, its client, a private segment. */
  stopHost(): Promise<void>;
  say(message: string): void;
}

export async function runLabBench(run: LabRun): Promise<never> {
  const logDir = process.env['STRATA_E2E_LOG_DIR'] ?? join(tmpdir(), 'strata-e2e-logs');
  const prefix = run.name.replace('/', '-');
  // Ctrl-C or SIGTERM: the lab kills the guests by PID; the drive images go too.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      removeDir(run.persistDir);
      process.exit(130);
    });
  }
  try {
    await run.main();
    console.log(`\n# ${run.name} results (${run.bed})`);
    for (const line of run.results) console.log(`- ${line}`);
  } catch (err) {
    console.error(`${run.name} failed: ${(err as Error).stack ?? String(err)}`);
    if (run.results.length > 0) console.log(`\n# results before the failure\n${run.results.map((l) => `- ${l}`).join('\n')}`);
    process.exitCode = 1;
  } finally {
    const { storage, initiator, plane } = run.running();
    mkdirSync(logDir, { recursive: true });
    for (const s of storage) writeFileSync(join(logDir, `${prefix}.${process.pid}.${s.name}.agent.log`), s.agentLogTail(50_000_000));
    if (plane) writeFileSync(join(logDir, `${prefix}.${process.pid}.control-plane.log`), plane.logs.map((l) => JSON.stringify(l)).join('\n'));
    run.say(`logs: ${logDir}/${prefix}.${process.pid}.*`);
    await initiator?.run(['nvme', 'disconnect-all'], { timeoutMs: 30_000 }).catch(() => undefined);
    await Promise.all([...storage.map((s) => s.stop().catch(() => undefined)), initiator?.stop().catch(() => undefined)]);
    await plane?.stop().catch(() => undefined);
    if (plane) removeDir(plane.stateDir);
    await run.stopHost().catch(() => undefined);
    removeDir(run.persistDir);
  }
  process.exit();
}
