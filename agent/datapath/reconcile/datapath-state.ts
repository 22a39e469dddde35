// What the data path must remember across restarts that the kernel cannot tell it back:
// - host entries (hosts/<nqn>) Strata created: configfs has no place for a marker on them, and
//   only those may ever be removed;
// - intents written before acting, so a crash (kill -9) between two steps still finishes them:
//   a revocation whose port relink had not happened yet, a grown backing whose namespace had not
//   re-read its size yet;
// - rollbacks done (volume → "generation:snapshot"), so a restart does not roll back again over
//   data written since;
// - the volume ports that may serve a replicated volume's host path here (written ahead of any
//   change that can make one ANA-optimized): what the exit fence (systemd/strata-agent-exit-fence,
//   run by systemd once the agent process has ended, however it ended) turns inaccessible, since a
//   dead agent cannot fence them when its lease expires and another copy is promoted.
// <stateDir>/datapath.json, written atomically after every change. The ports are also written,
// one per line and first, to <stateDir>/exit-fence-ports: the fence is a shell script (it must
// act within the lease, where node's start took 9-26 s on the lab's emulated guests), and a
// listed port too many is harmless where one missing is not.
//
// replicatedPorts is optional and the version stays 1: a file written before it existed loads
// (no port listed: the first pass lists them before it changes anything), and an older agent
// (a downgrade) still loads a file that has it (zod drops the unknown key) instead of refusing
// its whole data path state over it; the exit fence of that older release does not exist.
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../../../lib/files.js';

const stateSchema = z.object({
  version: z.literal(1),
  ownedHosts: z.array(z.string()),
  pendingRelink: z.array(z.string()),
  pendingRevalidate: z.array(z.string()),
  rollbacksDone: z.record(z.string(), z.string()),
  replicatedPorts: z.array(z.number().int().nonnegative()).optional(),
});

type StateFile = z.infer<typeof stateSchema>;

/** <stateDir>/datapath.json. */
export function dataPathStateFile(stateDir: string): string {
  return join(stateDir, 'datapath.json');
}

/** <stateDir>/exit-fence-ports: the replicated ports, one per line, for the exit fence. */
export function exitFencePortsFile(stateDir: string): string {
  return join(stateDir, 'exit-fence-ports');
}

/** The file's content, undefined when there is none; throws when it is corrupt. */
async function readStateFile(path: string): Promise<StateFile | undefined> {
  let raw: string;
  try {
    raw = await fs.readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const parsed = stateSchema.safeParse(JSON.parse(raw));
  if (!parsed.success) throw new Error(`corrupt data path state ${path}: ${parsed.error.message}`);
  return parsed.data;
}

export class DataPathState {
  readonly ownedHosts: Set<string>;
  readonly pendingRelink: Set<string>;
  readonly pendingRevalidate: Set<string>;
  readonly rollbacksDone: Map<string, string>;
  /**
   * Volume ports that may serve a replicated volume's host path on this node: every port of a
   * replicated volume's assignment, listed before a plan or a promotion can make it optimized,
   * and kept while the kernel may still serve one there (pass-kernel.ts). Never a single copy's
   * port: fencing it would cut its hosts off their only copy until the agent is back.
   */
  readonly replicatedPorts: Set<number>;

  /** What exit-fence-ports holds (written when it changes). */
  private fencePortsWritten: string | undefined;

  private constructor(
    private readonly path: string | undefined,
    data: StateFile,
    private readonly fencePortsPath?: string,
  ) {
    this.ownedHosts = new Set(data.ownedHosts);
    this.pendingRelink = new Set(data.pendingRelink);
    this.pendingRevalidate = new Set(data.pendingRevalidate);
    this.rollbacksDone = new Map(Object.entries(data.rollbacksDone));
    this.replicatedPorts = new Set(data.replicatedPorts ?? []);
  }

  static empty(): StateFile {
    return { version: 1, ownedHosts: [], pendingRelink: [], pendingRevalidate: [], rollbacksDone: {}, replicatedPorts: [] };
  }

  /** Loads <stateDir>/datapath.json (empty when absent). A corrupt file stops the data path. */
  static async load(stateDir: string): Promise<DataPathState> {
    await fs.mkdir(stateDir, { recursive: true, mode: 0o700 });
    const path = dataPathStateFile(stateDir);
    const state = new DataPathState(path, (await readStateFile(path)) ?? DataPathState.empty(), exitFencePortsFile(stateDir));
    // A datapath.json written before exit-fence-ports existed: the fence's list from its ports now.
    state.writeFencePorts();
    return state;
  }

  /**
   * The ports <stateDir>/exit-fence-ports lists, as the exit fence reads them (lines of digits;
   * anything else skipped), read only: nothing is created. Empty when there is no file.
   */
  static async readReplicatedPorts(stateDir: string): Promise<number[]> {
    let raw: string;
    try {
      raw = await fs.readFile(exitFencePortsFile(stateDir), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    return raw.split('\n').filter((l) => /^[0-9]+$/.test(l)).map(Number);
  }

  /** Adds ports to replicatedPorts and saves at once when one is new: before anything may make it optimized. True when it saved. */
  recordReplicatedPorts(ports: Iterable<number>): boolean {
    let added = false;
    for (const port of ports) {
      if (this.replicatedPorts.has(port)) continue;
      this.replicatedPorts.add(port);
      added = true;
    }
    if (added) this.save();
    return added;
  }

  /** A state that is never written (tests). */
  static inMemory(): DataPathState {
    return new DataPathState(undefined, DataPathState.empty());
  }

  save(): void {
    if (!this.path) return;
    // The fence's list first: a crash between the two writes leaves it listing more, never less.
    this.writeFencePorts();
    const data: StateFile = {
      version: 1,
      ownedHosts: [...this.ownedHosts].sort(),
      pendingRelink: [...this.pendingRelink].sort(),
      pendingRevalidate: [...this.pendingRevalidate].sort(),
      rollbacksDone: Object.fromEntries([...this.rollbacksDone].sort(([a], [b]) => (a < b ? -1 : 1))),
      replicatedPorts: [...this.replicatedPorts].sort((a, b) => a - b),
    };
    writeFileAtomic(this.path, `${JSON.stringify(data, null, 2)}\n`, 0o600);
  }

  private writeFencePorts(): void {
    if (!this.fencePortsPath) return;
    const content = [...this.replicatedPorts].sort((a, b) => a - b).map((p) => `${p}\n`).join('');
    if (content === this.fencePortsWritten) return;
    writeFileAtomic(this.fencePortsPath, content, 0o600);
    this.fencePortsWritten = content;
  }
}
