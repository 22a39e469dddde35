// Live agent sessions on this control-plane instance, and commands sent down them.
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { Command } from '../../proto/gen/strata/v1/Command.js';
import type { CommandResult__Output } from '../../proto/gen/strata/v1/CommandResult.js';

export interface AgentSessionHandle {
  readonly serverUUID: string;
  readonly agentInstance: string;
  /** Writes a command to the agent's stream. */
  send(command: Command): void;
  /** Ends the stream (a newer session of the same server replaced it). */
  close(reason: string): void;
}

const COMMAND_TIMEOUT_MS = 15_000;

export class AgentSessions {
  private readonly sessions = new Map<string, AgentSessionHandle>();
  private readonly pending = new Map<string, { resolve: (r: CommandResult__Output) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();

  /** Registers a session; a previous session of the same server is closed (it is stale). */
  open(session: AgentSessionHandle): void {
    const previous = this.sessions.get(session.serverUUID);
    if (previous && previous !== session) previous.close('replaced by a newer session of the same server');
    this.sessions.set(session.serverUUID, session);
  }

  closed(session: AgentSessionHandle): void {
    if (this.sessions.get(session.serverUUID) === session) this.sessions.delete(session.serverUUID);
  }

  isConnected(serverUUID: string): boolean {
    return this.sessions.has(serverUUID);
  }

  connectedServers(): string[] {
    return [...this.sessions.keys()];
  }

  /**
   * Sends a command and waits for its result. UNAVAILABLE when the server's agent is not
   * connected to this instance; the agent's own error text when it fails the command.
   */
  async send(serverUUID: string, action: Omit<Command, 'command_id'>): Promise<void> {
    const session = this.sessions.get(serverUUID);
    if (!session) throw errors.unavailable(`the agent of server ${serverUUID} is not connected`);
    const commandId = randomUUID();
    const result = await new Promise<CommandResult__Output>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(commandId);
        reject(errors.unavailable(`the agent of server ${serverUUID} did not answer in ${COMMAND_TIMEOUT_MS / 1000} s`));
      }, COMMAND_TIMEOUT_MS);
      this.pending.set(commandId, { resolve, reject, timer });
      session.send({ ...action, command_id: commandId });
    });
    if (!result.ok) throw new StrataError('INVALID_STATE', `agent of server ${serverUUID}: ${result.error}`);
  }

  commandResult(result: CommandResult__Output): void {
    const waiter = this.pending.get(result.command_id);
    if (!waiter) return;
    this.pending.delete(result.command_id);
    clearTimeout(waiter.timer);
    waiter.resolve(result);
  }

  closeAll(reason: string): void {
    for (const session of this.sessions.values()) session.close(reason);
    this.sessions.clear();
    for (const [id, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(errors.unavailable(reason));
      this.pending.delete(id);
    }
  }
}
