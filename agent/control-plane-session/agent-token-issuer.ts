// The agent's tokens for the control-plane session (docs/agent-auth.md): signed with the
// cluster's agent secret, read from etcd — which the agent is trusted with already — at each
// issue, so a rotated secret is used from the next token on.
import { signAgentToken, AGENT_TOKEN_LIFETIME_SECONDS, type SignedAgentToken } from '../../lib/agent-token.js';
import type { ClusterReader } from '../../lib/etcd/cluster-store.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentSecretRecord } from '../../lib/records.js';
import type { AgentIdentity } from '../identity/identity-store.js';

/** Where the session gets a token for each call and each renewal. */
export interface AgentTokenSource {
  issue(): Promise<SignedAgentToken>;
}

export interface EtcdAgentTokenIssuerOptions {
  /** The cluster record (lib/etcd/cluster-store.ts): its UUID is the tokens' audience. */
  readonly cluster: ClusterReader;
  /** The agent secret, created when none exists yet (lib/etcd/agent-secret-store.ts's AgentSecretStore). */
  readonly secrets: { ensure(): Promise<AgentSecretRecord> };
  readonly identity: AgentIdentity;
  readonly logger: Logger;
  /** Default AGENT_TOKEN_LIFETIME_SECONDS; tests shorten it to watch renewals. */
  readonly lifetimeSeconds?: number;
}

export class EtcdAgentTokenIssuer implements AgentTokenSource {
  /** What was read last: used while etcd cannot be reached, so the session can stay up. */
  private lastRead: { clusterUUID: string; secrets: AgentSecretRecord } | undefined;
  /** Whether the current etcd outage was logged (once per outage, not per dial). */
  private outageLogged = false;

  constructor(private readonly options: EtcdAgentTokenIssuerOptions) {}

  async issue(): Promise<SignedAgentToken> {
    let trust;
    try {
      trust = await this.read();
      this.lastRead = trust;
      this.outageLogged = false;
    } catch (err) {
      if (!this.lastRead) throw err;
      if (!this.outageLogged) this.options.logger.warn({ err: (err as Error).message }, 'cannot read the agent secret from etcd; signing with the one read last');
      this.outageLogged = true;
      trust = this.lastRead;
    }
    return signAgentToken(trust.secrets.current, {
      clusterUUID: trust.clusterUUID,
      serverUUID: this.options.identity.serverUUID,
      nodeUUIDs: this.options.identity.nodeUUIDs,
      lifetimeSeconds: this.options.lifetimeSeconds ?? AGENT_TOKEN_LIFETIME_SECONDS,
    });
  }

  private async read(): Promise<{ clusterUUID: string; secrets: AgentSecretRecord }> {
    const cluster = await this.options.cluster.read();
    // No cluster, no audience: a control plane bootstraps it before it serves agents.
    if (!cluster) throw new Error('the cluster is not bootstrapped yet (no cluster record in etcd)');
    // A control plane creates it at start; the agent creates it (the same guarded create) when
    // none did yet, so nothing depends on which daemon starts first.
    return { clusterUUID: cluster.UUID, secrets: await this.options.secrets.ensure() };
  }
}
