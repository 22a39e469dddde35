// Who may speak on the agents' gRPC channel (docs/agent-auth.md). A Session call must carry an
// agent token (lib/agent-token.ts) signed with the cluster's agent secret, for this cluster, not
// expired; Hello must name the token's server and only nodes the token names, none of them
// registered to another server. Refusals are UNAUTHENTICATED (no valid token) or
// PERMISSION_DENIED (a valid token that does not cover what is claimed), each logged once per
// peer, never with the token.
import { setTimeout as sleep } from 'node:timers/promises';
import type * as grpc from '@grpc/grpc-js';
import {
  AGENT_TOKEN_METADATA_KEY,
  agentTokenSecretId,
  verifyAgentToken,
  type AgentTokenClaims,
} from '../../lib/agent-token.js';
import type { NodeReader } from '../../lib/etcd/node-store.js';
import { errors, toStrataError, type StrataError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentSecret, AgentSecretRecord, NodeRecord } from '../../lib/records.js';

export interface AgentAuthenticatorOptions {
  /** The agent secret, created when the cluster has none yet (lib/etcd/agent-secret-store.ts's AgentSecretStore). */
  readonly secrets: { ensure(): Promise<AgentSecretRecord> };
  /** Which server a node is registered to (lib/etcd/node-store.ts). */
  readonly nodes: NodeReader;
  readonly clusterUUID: string;
  readonly logger: Logger;
  /** Skew allowed between an agent's clock and ours, on every time claim. Default 5 s. */
  readonly clockToleranceSeconds?: number;
  /**
   * How long the secrets read from etcd are used before they are read again. A rotation's new
   * secret is read at once (its id is unknown); this bounds how long a retired one still passes.
   */
  readonly secretsMaxAgeMs?: number;
}

/** At most one etcd read per this interval for tokens naming an unknown secret (garbage kids included). */
const UNKNOWN_SECRET_READ_INTERVAL_MS = 1000;
/** Peers whose last refusal is remembered, so a refusal is logged once per peer, not per dial. */
const REFUSED_PEERS_MAX = 1024;

export class AgentAuthenticator {
  private readonly clockToleranceSeconds: number;
  private readonly secretsMaxAgeMs: number;
  private secrets: { record: AgentSecretRecord; readAtMs: number } | undefined;
  private reading: Promise<AgentSecretRecord> | undefined;
  /** The next read for tokens naming an unknown secret, shared by all of them. */
  private unknownSecretRead: Promise<AgentSecretRecord> | undefined;
  private lastUnknownSecretReadMs = 0;
  /** Peer host → reason last logged. */
  private readonly refusedPeers = new Map<string, string>();

  constructor(private readonly options: AgentAuthenticatorOptions) {
    this.clockToleranceSeconds = options.clockToleranceSeconds ?? 5;
    this.secretsMaxAgeMs = options.secretsMaxAgeMs ?? 30_000;
  }

  /** Reads the agent secret, creating it when the cluster has none yet (an older cluster). */
  async start(): Promise<void> {
    await this.readSecrets();
  }

  /** Verifies the token in a Session call's metadata. */
  async authenticateCall(metadata: grpc.Metadata): Promise<AgentTokenClaims> {
    const values = metadata.get(AGENT_TOKEN_METADATA_KEY);
    if (values.length === 0) throw errors.unauthenticated(`agent token required (metadata "${AGENT_TOKEN_METADATA_KEY}: Bearer <token>")`);
    const match = /^bearer\s+(\S+)$/i.exec(String(values[0]).trim());
    if (values.length > 1 || !match) throw errors.unauthenticated(`metadata "${AGENT_TOKEN_METADATA_KEY}" must be one "Bearer <agent token>"`);
    return this.verify(match[1] as string);
  }

  async verify(token: string): Promise<AgentTokenClaims> {
    const secret = await this.secretNamed(agentTokenSecretId(token));
    if (!secret) throw errors.unauthenticated('agent token signed with an unknown or retired agent secret');
    return verifyAgentToken(token, secret, { clusterUUID: this.options.clusterUUID, clockToleranceSeconds: this.clockToleranceSeconds });
  }

  /**
   * Hello against the token: the same server, only nodes the token names, and none of them
   * registered (in etcd) to another server. The token's claims are the agent's own word, signed;
   * the node records are the cluster's, so an agent cannot report for another server's node even
   * with a token that names it.
   */
  async authorizeHello(claims: AgentTokenClaims, hello: { serverUUID: string; nodeUUIDs: readonly string[] }): Promise<void> {
    if (hello.serverUUID !== claims.serverUUID) {
      throw errors.denied(`the agent token is for server ${claims.serverUUID}, not ${hello.serverUUID}`);
    }
    this.authorizeNodes(claims, hello.nodeUUIDs);
    let records: (NodeRecord | null)[];
    try {
      records = await Promise.all(hello.nodeUUIDs.map((node) => this.options.nodes.read(node)));
    } catch (err) {
      throw toStrataError(err);
    }
    for (const record of records) {
      if (record && record.serverUUID !== claims.serverUUID) {
        throw errors.denied(`node ${record.UUID} belongs to server ${record.serverUUID}, not ${claims.serverUUID}`);
      }
    }
  }

  /** A renewal must be for the session's server and still cover the session's nodes. */
  authorizeRenewal(session: { serverUUID: string; nodeUUIDs: readonly string[] }, renewed: AgentTokenClaims): void {
    if (renewed.serverUUID !== session.serverUUID) {
      throw errors.denied(`the renewed agent token is for server ${renewed.serverUUID}, not ${session.serverUUID}`);
    }
    this.authorizeNodes(renewed, session.nodeUUIDs);
  }

  /** When a session must have presented a fresher token (ms since the epoch). */
  deadlineOf(claims: AgentTokenClaims): number {
    return claims.expiresAtMs + this.clockToleranceSeconds * 1000;
  }

  /** Logs a refusal, once per peer and reason: an agent with a bad token redials every few seconds. */
  refused(peer: string, err: StrataError): void {
    const host = peerHost(peer);
    const reason = `${err.code}: ${err.message}`;
    if (this.refusedPeers.get(host) === reason) {
      this.options.logger.debug({ peer: host, code: err.code, reason: err.message }, 'agent session refused again');
      return;
    }
    if (!this.refusedPeers.has(host) && this.refusedPeers.size >= REFUSED_PEERS_MAX) {
      this.refusedPeers.delete(this.refusedPeers.keys().next().value as string);
    }
    this.refusedPeers.set(host, reason);
    this.options.logger.warn({ peer: host, code: err.code, reason: err.message }, 'agent session refused');
  }

  /** A peer that got in is forgotten: its next refusal is news again. */
  accepted(peer: string): void {
    this.refusedPeers.delete(peerHost(peer));
  }

  private authorizeNodes(claims: AgentTokenClaims, nodeUUIDs: readonly string[]): void {
    const named = new Set(claims.nodeUUIDs);
    const others = nodeUUIDs.filter((node) => !named.has(node));
    if (others.length > 0) {
      throw errors.denied(`the agent token of server ${claims.serverUUID} does not name node ${others.join(', ')}`);
    }
  }

  private async secretNamed(id: string): Promise<AgentSecret | undefined> {
    const cached = this.secrets;
    if (!cached || Date.now() - cached.readAtMs >= this.secretsMaxAgeMs) return secretOf(await this.readSecrets(), id);
    // Unknown: perhaps rotated since we read it. Every caller waits for one shared, rate-limited
    // read, so garbage ids cannot turn into an etcd read each, nor crowd out a real rotation.
    return secretOf(cached.record, id) ?? secretOf(await this.readForUnknownSecret(), id);
  }

  private readForUnknownSecret(): Promise<AgentSecretRecord> {
    this.unknownSecretRead ??= (async () => {
      try {
        const wait = this.lastUnknownSecretReadMs + UNKNOWN_SECRET_READ_INTERVAL_MS - Date.now();
        if (wait > 0) await sleep(wait);
        this.lastUnknownSecretReadMs = Date.now();
        return await this.readSecrets();
      } finally {
        this.unknownSecretRead = undefined;
      }
    })();
    return this.unknownSecretRead;
  }

  /** One read at a time. While etcd cannot be reached, the secrets read last stay in use. */
  private readSecrets(): Promise<AgentSecretRecord> {
    this.reading ??= (async () => {
      try {
        const record = await this.options.secrets.ensure();
        this.secrets = { record, readAtMs: Date.now() };
        return record;
      } catch (err) {
        const coded = toStrataError(err);
        if (!this.secrets) throw coded;
        this.options.logger.warn({ err: coded.message }, 'cannot read the agent secret; using the one read last');
        this.secrets = { record: this.secrets.record, readAtMs: Date.now() };
        return this.secrets.record;
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }
}

function secretOf(record: AgentSecretRecord, id: string): AgentSecret | undefined {
  return [record.current, record.previous].find((secret) => secret?.id === id);
}

/** "ipv4:10.0.0.7:51234", "10.0.0.7:51234" or "[::1]:51234" → the address without the port. */
function peerHost(peer: string): string {
  const address = peer.replace(/^ipv[46]:/, '');
  const bracketed = /^\[([^\]]+)\]/.exec(address);
  if (bracketed) return bracketed[1] as string;
  const colon = address.lastIndexOf(':');
  return colon > 0 && address.indexOf(':') === colon ? address.slice(0, colon) : address;
}
