#!/usr/bin/env node
// strata-agent: process entry. Loads the frozen config, logs JSON to stdout, starts the agent,
// tells systemd when it is ready, and on SIGTERM/SIGINT stops gracefully (revoking the lease so
// the server turns Inactive at once) and exits 0.
import { loadConfigOrExit } from '../lib/config.js';
import { StrataError } from '../lib/errors.js';
import { createLogger } from '../lib/logger.js';
import { runAgentDaemon } from './agent-daemon.js';
import { agentProgram, agentSettings, resolveAgentConfig, type AgentConfig } from './config.js';

let config: AgentConfig;
try {
  config = resolveAgentConfig(loadConfigOrExit(agentSettings, agentProgram));
} catch (err) {
  if (!(err instanceof StrataError)) throw err;
  process.stderr.write(`${agentProgram.program}: ${err.message}\n`);
  process.exit(2);
}
const logger = createLogger('strata-agent', config.logLevel);

await runAgentDaemon(config, logger);
