// Tests only: the real agent in a process of its own with the emulated data path of
// emulated-storage-server.ts (an nvmet tree in a plain directory, a file pool), so that a test can
// kill it (SIGKILL: a crash, nothing cleaned up) and start it again on the same directories.
// Arguments: <nvmet root> then the agent's own flags. Logs JSON to stdout like strata-agent.
import { agentSettings, resolveAgentConfig } from '../../../agent/config.js';
import { runAgentDaemon } from '../../../agent/agent-daemon.js';
import { loadConfig } from '../../../lib/config.js';
import { createLogger } from '../../../lib/logger.js';
import { emulatedServerDataPath } from './emulated-storage-server.js';

const [nvmetRoot, ...argv] = process.argv.slice(2);
if (!nvmetRoot) throw new Error('usage: emulated-agent-main <nvmet root> <agent flags...>');
const config = resolveAgentConfig(loadConfig(agentSettings, { program: 'strata-agent', summary: 'emulated agent (tests)', env: {}, argv }));
const logger = createLogger('strata-agent', config.logLevel);

await runAgentDaemon(config, logger, { dataPath: emulatedServerDataPath(nvmetRoot, config.poolDir, logger) });
