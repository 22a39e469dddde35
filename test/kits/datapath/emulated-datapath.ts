// Tests only: the parts that run the agent's data path on a plain directory instead of the
// kernel's configfs (startAgent's `dataPath` option). The production wiring
// (agent/datapath/datapath.ts) has no test switch: it takes these parts like any others.
import { promises as fs } from 'node:fs';
import type { DataPathParts } from '../../../agent/datapath/datapath.js';
import { findBackend } from '../../../agent/datapath/datapath.js';
import { isOnConfigfs } from '../../../agent/datapath/kernel/nvmet-configfs.js';
import { NftablesDriver } from '../../../agent/datapath/kernel/nftables.js';
import { emulatedConfigfs } from './emulated-nvmet-configfs.js';

/** Why volumes with an IP ACL are Failed in a test that gives no nft command. */
export const NFT_NOT_IN_TESTS = 'this test runs without nftables (no nft command given)';

export interface EmulatedDataPathOptions {
  /** Root of the nvmet tree: a plain directory (on configfs it is driven as the real thing). */
  readonly nvmetRoot: string;
  readonly openPool?: DataPathParts['openPool'];
  readonly connectedHosts?: DataPathParts['connectedHosts'];
  readonly run?: DataPathParts['run'];
  /**
   * The nft command (and leading arguments, e.g. nsenter into a test's network namespace).
   * Without one, IP ACLs are not enforced and volumes that have one are reported Failed: a test
   * must never change the host's own firewall by accident.
   */
  readonly nft?: readonly string[];
}

export function emulatedDataPath(options: EmulatedDataPathOptions): DataPathParts {
  const root = options.nvmetRoot;
  return {
    backend: async (config, run, logger) => {
      const mounts = await fs.readFile(config.mountsPath, 'utf8').catch(() => '');
      if (isOnConfigfs(root, mounts)) return findBackend(config, run, logger, root);
      const configfs = await emulatedConfigfs(root);
      logger.warn({ root }, 'the data path drives a plain directory instead of configfs (tests only)');
      return { kind: 'nvmet', configfs };
    },
    ipAcls: options.nft ? new NftablesDriver({ command: options.nft }) : NFT_NOT_IN_TESTS,
    ...(options.openPool ? { openPool: options.openPool } : {}),
    ...(options.connectedHosts ? { connectedHosts: options.connectedHosts } : {}),
    ...(options.run ? { run: options.run } : {}),
  };
}
