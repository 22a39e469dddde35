#!/usr/bin/env node
// strata-agent's exit fence: run once the agent process has ended (systemd's ExecStopPost, the
// lab's agent runner likewise). Takes the agent's own settings (--config, STRATA_*, flags: only
// stateDir and logLevel matter) and turns the host paths of replicated volumes on this node
// ANA-inaccessible (datapath/exit-fence.ts). Exits 0 whatever it finds, so a stop never fails
// over it; only a programming error ends it otherwise.
import { loadConfig } from '../lib/config.js';
import { StrataError } from '../lib/errors.js';
import { createLogger } from '../lib/logger.js';
import { agentProgram, agentSettings } from './config.js';
import { runExitFence } from './datapath/exit-fence.js';
import { DEFAULT_NVMET_ROOT } from './datapath/kernel/nvmet-configfs.js';

const name = 'strata-agent-exit-fence';
let stateDir = agentSettings.stateDir.default;
let logLevel: string = agentSettings.logLevel.default;
let configError: string | undefined;
try {
  // The settings alone, not the agent's cross-setting checks (resolveAgentConfig): none of them
  // is about the state dir.
  const config = loadConfig(agentSettings, agentProgram);
  stateDir = config.stateDir;
  logLevel = config.logLevel;
} catch (err) {
  const code = (err as { code?: unknown }).code;
  if (code === 'commander.helpDisplayed' || code === 'commander.help' || code === 'commander.version') process.exit(0);
  // A setting the agent would refuse too (the file edited since it started, say): the fence
  // still runs, on the default state dir, rather than leave the paths optimized.
  if (!(err instanceof StrataError) && !(typeof code === 'string' && code.startsWith('commander.'))) throw err;
  configError = (err as Error).message;
}
const logger = createLogger(name, logLevel);
if (configError) logger.error({ err: configError, stateDir }, 'exit fence: the agent configuration is invalid; fencing the default state dir\'s ports');
await runExitFence({ stateDir, nvmetRoot: DEFAULT_NVMET_ROOT, logger });
