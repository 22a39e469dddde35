// The server's identity: one server UUID and one UUID per node, generated on first start and
// kept in <stateDir>/identity.json forever after. Everything in etcd (server, nodes, presence,
// device ownership) is keyed by these UUIDs, so losing or regenerating them would make the
// cluster see a brand-new server; the file is therefore written atomically and never rewritten
// except to append node UUIDs when nodesPerServer grows.
import { randomUUID } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { StrataError } from '../../lib/errors.js';
import { writeFileAtomic } from '../../lib/files.js';

export interface AgentIdentity {
  readonly serverUUID: string;
  /** Stable order: index i is the server's i-th node. */
  readonly nodeUUIDs: readonly string[];
}

const identityFileSchema = z.object({
  version: z.literal(1),
  serverUUID: z.uuid(),
  nodeUUIDs: z.array(z.uuid()).min(1),
  createdAt: z.string(),
  updatedAt: z.string(),
});
type IdentityFile = z.infer<typeof identityFileSchema>;

export const identityFileName = 'identity.json';

/**
 * Loads the identity from stateDir, creating it (or adding node UUIDs) as needed so that it
 * has at least `nodesPerServer` nodes. Existing UUIDs are never replaced or dropped: a server
 * configured down to fewer nodes keeps its extra node identities for when it is raised again,
 * and reports only the first `nodesPerServer`.
 */
export async function loadOrCreateIdentity(stateDir: string, nodesPerServer: number, serverUUID = ''): Promise<AgentIdentity> {
  await fs.mkdir(stateDir, { recursive: true, mode: 0o700 });
  const path = join(stateDir, identityFileName);
  const now = new Date().toISOString();
  let stored = await readIdentityFile(path);
  if (!stored) {
    stored = {
      version: 1,
      // The UUID an operator gave POST /api/v2/servers before installing the server, else a new one.
      serverUUID: serverUUID || randomUUID(),
      nodeUUIDs: Array.from({ length: nodesPerServer }, () => randomUUID()),
      createdAt: now,
      updatedAt: now,
    };
    // Temp file + fsync + rename + directory fsync; 0600: the identity is this server's alone.
    writeFileAtomic(path, `${JSON.stringify(stored, null, 2)}\n`, 0o600);
  } else if (stored.nodeUUIDs.length < nodesPerServer) {
    const added = Array.from({ length: nodesPerServer - stored.nodeUUIDs.length }, () => randomUUID());
    stored = { ...stored, nodeUUIDs: [...stored.nodeUUIDs, ...added], updatedAt: now };
    writeFileAtomic(path, `${JSON.stringify(stored, null, 2)}\n`, 0o600);
  }
  if (serverUUID && stored.serverUUID !== serverUUID) {
    throw new StrataError('CONFIG_INVALID', `serverUuid ${serverUUID} differs from the server UUID ${stored.serverUUID} in ${path}: a server keeps its identity (remove the setting, or the identity file of a server that never joined)`);
  }
  // writeFileAtomic's mode applies only when it creates its temp file; a stale temp left by a
  // crash would keep its own mode.
  await fs.chmod(path, 0o600);
  return Object.freeze({
    serverUUID: stored.serverUUID,
    nodeUUIDs: Object.freeze(stored.nodeUUIDs.slice(0, nodesPerServer)),
  });
}

async function readIdentityFile(path: string): Promise<IdentityFile | undefined> {
  let text: string;
  try {
    text = await fs.readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  // A corrupt identity must stop the agent: silently minting a new one would orphan the
  // server's records and devices in the cluster. An operator restores the file or removes it.
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new StrataError('CONFIG_INVALID', `identity file ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const result = identityFileSchema.safeParse(parsed);
  if (!result.success) {
    throw new StrataError(
      'CONFIG_INVALID',
      `identity file ${path} is invalid: ${result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  }
  return result.data;
}
