// The exit fence: once the agent process has ended, however it ended (SIGKILL, a crash, the
// systemd watchdog's abort), every volume port that may serve a replicated volume's host path on
// this node turns ANA-inaccessible. The kernel target outlives the agent: without this, a dead
// primary's paths stay optimized; its lease expires (leaseTtlSeconds), the leader promotes
// another copy, and hosts see two optimized paths, reading stale data on the dead agent's (its
// writes hang: the copies refuse it). The agent's own lease fencing (membership's
// renewalOverdue) cannot run in a process that is gone. systemd runs this as the unit's
// ExecStopPost (systemd/strata-agent.service); docs/replication.md, "Fencing".
//
// Which ports: those DataPathState lists (<stateDir>/datapath.json, replicatedPorts), written
// ahead of every step that can make one optimized. No etcd: it may be what is unreachable. Always
// every listed port, also after a clean stop (a planned hand-over fenced them already): the
// restarted agent's first pass reads the whole kernel tree and writes `optimized` back on the
// ports of the volumes it is still the primary of (nvmet-plan.ts compares each port's ANA state
// with the desired one), and only those (docs/replication.md, "Serving again").
import type { Logger } from '../../lib/logger.js';
import { NvmetConfigfs } from './kernel/nvmet-configfs.js';
import { paths, type NvmetPort } from './kernel/nvmet-model.js';
import { DataPathState } from './reconcile/datapath-state.js';

export interface ExitFenceOptions {
  /** The agent's state dir (config stateDir). */
  readonly stateDir: string;
  /** The nvmet configfs root (DEFAULT_NVMET_ROOT on a server). */
  readonly nvmetRoot: string;
  readonly logger: Logger;
}

export interface ExitFenceResult {
  /** Ports listed in datapath.json. */
  readonly listed: readonly number[];
  /** Ports whose every ANA group is inaccessible now. */
  readonly fenced: readonly number[];
  /** Listed ports the kernel target does not have (or no nvmet at all). */
  readonly absent: readonly number[];
  /** Ports some group of which could not be written, with the error. */
  readonly failed: readonly { readonly port: number; readonly error: string }[];
}

/**
 * Fences the listed ports and logs what it did, one line. Never throws for what it finds (no
 * state file, a corrupt one, no configfs, a port gone, a write refused): a stop must not fail
 * over it, and every port it can fence, it does.
 */
export async function runExitFence(options: ExitFenceOptions): Promise<ExitFenceResult> {
  const { logger } = options;
  let listed: number[];
  try {
    listed = await DataPathState.readReplicatedPorts(options.stateDir);
  } catch (err) {
    logger.error({ err, stateDir: options.stateDir }, 'exit fence: the data path state cannot be read; no port fenced');
    return { listed: [], fenced: [], absent: [], failed: [] };
  }
  const fenced: number[] = [];
  const absent: number[] = [];
  const failed: { port: number; error: string }[] = [];
  let ports: ReadonlyMap<number, NvmetPort | undefined> = new Map();
  const configfs = new NvmetConfigfs(options.nvmetRoot);
  try {
    if (listed.length > 0) ports = (await configfs.readObjects({ subsystems: [], ports: listed })).ports;
  } catch (err) {
    // No configfs, or no nvmet in it: nothing of the kernel target can be serving.
    logger.warn({ err, root: options.nvmetRoot }, 'exit fence: the nvmet tree cannot be read');
  }
  for (const id of listed) {
    const port = ports.get(id);
    if (!port) {
      absent.push(id);
      continue;
    }
    // Every group of the port: the volumes' namespaces are in group 1 (desired-state.ts), and a
    // group this fence does not know of must not stay optimized either.
    const groups = [...port.anaGroups.keys()];
    let error: string | undefined;
    for (const group of groups.length > 0 ? groups : [1]) {
      try {
        await configfs.apply({ op: 'write', path: paths.anaState(id, group), value: 'inaccessible' });
      } catch (err) {
        error ??= `ana_groups/${group}: ${(err as Error).message}`;
      }
    }
    if (error) failed.push({ port: id, error });
    else fenced.push(id);
  }
  const result = { listed, fenced, absent, failed };
  const line = { event: 'agent.exitFence', stateDir: options.stateDir, ...result };
  if (failed.length > 0) logger.error(line, 'exit fence: some host paths of replicated volumes could not be made ANA-inaccessible');
  else logger.info(line, fenced.length > 0 ? 'exit fence: host paths of replicated volumes ANA-inaccessible' : 'exit fence: no host path to fence');
  return result;
}
