// What the data path must remember across restarts that the kernel cannot tell it back:
// - host entries (hosts/<nqn>) Strata created: configfs has no place for a marker on them, and
//   only those may ever be removed;
// - intents written before acting, so a crash (kill -9) between two steps still finishes them:
//   a revocation whose port relink had not happened yet, a grown backing whose namespace had not
//   re-read its size yet;
// - rollbacks done (volume → "generation:snapshot"), so a restart does not roll back again over
//   data written since.
// <stateDir>/datapath.json, written atomically after every change.
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
});

export class DataPathState {
  readonly ownedHosts: Set<string>;
  readonly pendingRelink: Set<string>;
  readonly pendingRevalidate: Set<string>;
  readonly rollbacksDone: Map<string, string>;

  private constructor(
    private readonly path: string | undefined,
    data: z.infer<typeof stateSchema>,
  ) {
    this.ownedHosts = new Set(data.ownedHosts);
    this.pendingRelink = new Set(data.pendingRelink);
    this.pendingRevalidate = new Set(data.pendingRevalidate);
    this.rollbacksDone = new Map(Object.entries(data.rollbacksDone));
  }

  static empty(): z.infer<typeof stateSchema> {
    return { version: 1, ownedHosts: [], pendingRelink: [], pendingRevalidate: [], rollbacksDone: {} };
  }

  /** Loads <stateDir>/datapath.json (empty when absent). A corrupt file stops the data path. */
  static async load(stateDir: string): Promise<DataPathState> {
    await fs.mkdir(stateDir, { recursive: true, mode: 0o700 });
    const path = join(stateDir, 'datapath.json');
    let raw: string;
    try {
      raw = await fs.readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new DataPathState(path, DataPathState.empty());
      throw err;
    }
    const parsed = stateSchema.safeParse(JSON.parse(raw));
    if (!parsed.success) throw new Error(`corrupt data path state ${path}: ${parsed.error.message}`);
    return new DataPathState(path, parsed.data);
  }

  /** A state that is never written (tests). */
  static inMemory(): DataPathState {
    return new DataPathState(undefined, DataPathState.empty());
  }

  save(): void {
    if (!this.path) return;
    const data: z.infer<typeof stateSchema> = {
      version: 1,
      ownedHosts: [...this.ownedHosts].sort(),
      pendingRelink: [...this.pendingRelink].sort(),
      pendingRevalidate: [...this.pendingRevalidate].sort(),
      rollbacksDone: Object.fromEntries([...this.rollbacksDone].sort(([a], [b]) => (a < b ? -1 : 1))),
    };
    writeFileAtomic(this.path, `${JSON.stringify(data, null, 2)}\n`, 0o600);
  }
}
