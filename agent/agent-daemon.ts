// The agent as a process: the daemon lifecycle (lib/daemon.ts) around startAgent. strata-agent's
// entry (main.ts) runs it with the production parts; the tests' emulated agent process
// (test/kits/datapath/emulated-agent-main.ts) with its emulated data path.
import { runDaemon } from '../lib/daemon.js';
import type { Logger } from '../lib/logger.js';
import { startAgent, type StartAgentOptions } from './agent.js';
import type { AgentConfig } from './config.js';

export function runAgentDaemon(config: AgentConfig, logger: Logger, options: StartAgentOptions = {}): Promise<void> {
  return runDaemon({
    name: 'strata-agent',
    logger,
    // The planned hand-over of replicated volumes runs in the stop (systemd allows 60 s).
    stopTimeoutMs: 30_000,
    start: async (attach) => {
      const agent = await startAgent(config, logger, options);
      attach(agent);
      await agent.ready;
      return agent;
    },
  });
}
