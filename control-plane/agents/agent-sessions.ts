// Live agent sessions on this control-plane instance, and commands sent down them.
import { randomUUID } from 'node:crypto';
import { StrataError, errors } from '../../lib/errors.js';
import type { BundleChunk__Output } from '../../proto/gen/strata/v1/BundleChunk.js';
import type { CollectBundle } from '../../proto/gen/strata/v1/CollectBundle.js';
import type { Command } from '../../proto/gen/strata/v1/Command.js';
import type { CommandResult__Output } from '../../proto/gen/strata/v1/CommandResult.js';
import type { ControlMessage } from '../../proto/gen/strata/v1/ControlMessage.js';

export interface AgentSessionHandle {
  readonly serverUUID: string;
  readonly agentInstance: string;
  /** Writes a command to the agent's stream. */
  send(command: Command): void;
  /** Writes any other control message (bundle credits and cancels). */
  control(message: ControlMessage): void;
  /** Ends the stream (a newer session of the same server replaced it). */
  close(reason: string): void;
}

const COMMAND_TIMEOUT_MS = 15_000;

/** What a bundle's reader is told, in order: entries with their data, then one end. */
export interface BundleListener {
  chunk(chunk: BundleChunk__Output): void;
  /** The transfer is over without an end from the agent (its session closed). */
  lost(reason: string): void;
}

/** A diagnostic bundle being collected by an agent (CollectBundle, docs/diagnostics.md). */
export interface BundleTransfer {
  /** Lets the agent send this many more data pieces. */
  grant(chunks: number): void;
  /** Stops the collection (the client went away); nothing more is delivered. */
  cancel(reason: string): void;
  /** The transfer no longer needs its session (its end arrived). */
  finished(): void;
}

/** Where the cluster learns which control plane holds a session (agent-session-store.ts). */
export interface SessionDirectory {
  claim(serverUUID: string, agentInstance: string): void;
  release(serverUUID: string, agentInstance: string): void;
}

export class AgentSessions {
  constructor(private readonly directory?: SessionDirectory) {}

  private readonly sessions = new Map<string, AgentSessionHandle>();
  private readonly pending = new Map<string, { resolve: (r: CommandResult__Output) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private readonly bundles = new Map<string, { session: AgentSessionHandle; listener: BundleListener }>();

  /** Registers a session; a previous session of the same server is closed (it is stale). */
  open(session: AgentSessionHandle): void {
    const previous = this.sessions.get(session.serverUUID);
    if (previous && previous !== session) previous.close('replaced by a newer session of the same server');
    this.sessions.set(session.serverUUID, session);
    this.directory?.claim(session.serverUUID, session.agentInstance);
  }

  closed(session: AgentSessionHandle): void {
    if (this.sessions.get(session.serverUUID) === session) {
      this.sessions.delete(session.serverUUID);
      this.directory?.release(session.serverUUID, session.agentInstance);
    }
    for (const [id, bundle] of this.bundles) {
      if (bundle.session !== session) continue;
      this.bundles.delete(id);
      bundle.listener.lost(`the agent session of server ${session.serverUUID} ended`);
    }
  }

  /**
   * Asks the server's agent to collect a diagnostic bundle; its chunks go to the listener as they
   * come. The agent sends data only against credit (grant). UNAVAILABLE when it is not connected here.
   */
  openBundle(serverUUID: string, options: CollectBundle, listener: BundleListener): BundleTransfer {
    const session = this.sessions.get(serverUUID);
    if (!session) throw errors.unavailable(`the agent of server ${serverUUID} is not connected to this control plane`);
    const bundleId = randomUUID();
    this.bundles.set(bundleId, { session, listener });
    session.send({ command_id: bundleId, collect_bundle: options });
    const open = () => this.bundles.get(bundleId)?.session === session;
    return {
      grant: (chunks) => {
        if (open()) session.control({ bundle_credit: { bundle_id: bundleId, chunks } });
      },
      cancel: (reason) => {
        if (!open()) return;
        this.bundles.delete(bundleId);
        session.control({ bundle_cancel: { bundle_id: bundleId, reason } });
      },
      finished: () => {
        this.bundles.delete(bundleId);
      },
    };
  }

  /** A chunk from the agent of `serverUUID`; one for a bundle it was not asked for is dropped. */
  bundleChunk(serverUUID: string, chunk: BundleChunk__Output): void {
    const bundle = this.bundles.get(chunk.bundle_id);
    if (bundle?.session.serverUUID === serverUUID) bundle.listener.chunk(chunk);
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
    for (const session of [...this.sessions.values()]) {
      this.closed(session);
      session.close(reason);
    }
    this.sessions.clear();
    for (const [id, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(errors.unavailable(reason));
      this.pending.delete(id);
    }
  }
}
