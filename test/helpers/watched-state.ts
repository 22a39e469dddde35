// The agent's watched state (agent/agent-state-store.ts) for tests that lend it to a store
// themselves, as agent/agent.ts does: made on demand, stopped together at the end.
import { agentWatchedState } from '../../agent/agent-state-store.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import type { PrefixMirror } from '../../lib/etcd/prefix-mirror.js';
import { silentLogger } from './silent-logger.js';

/** A server UUID for tests whose stores do not care which server they run on. */
export const TEST_SERVER = 'c0ffee00-0000-4000-8000-0000000000ff';

export class WatchedStates {
  private readonly made: PrefixMirror[] = [];

  /** A new watched state over `client` (it loads when a store first reads it). */
  of(client: KvClient, serverUUID = TEST_SERVER): PrefixMirror {
    const state = agentWatchedState(client, serverUUID, silentLogger('watched-state'));
    this.made.push(state);
    return state;
  }

  /** Stops every state made (before the clients close). */
  async stop(): Promise<void> {
    await Promise.all(this.made.splice(0).map((s) => s.stop()));
  }
}
