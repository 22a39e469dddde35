// Server membership: the agent's etcd lease and the presence key bound to it. The presence key
// existing is what makes the control plane count the server's nodes Active; it vanishes by
// itself when the agent dies or is cut off from etcd for longer than the lease TTL. When that
// happens to a live agent (network cut), the lease is lost for good, so the agent grants a new
// one and registers again as soon as etcd answers: that is how a node returns to Active.
import { EventEmitter } from 'node:events';
import type { Logger } from '../../lib/logger.js';
import type { PresenceRecord } from '../../lib/records.js';
import { retry, RetryAborted, sleep, type BackoffOptions } from '../../lib/retry.js';
import type { PresenceLease, PresenceStore } from './presence-store.js';
import type { RegistrationFacts, RegistrationStore } from './registration-store.js';

export interface MembershipOptions {
  /** The server and node records (registration-store.ts). */
  readonly store: RegistrationStore;
  /** The lease and the presence key under it (presence-store.ts). */
  readonly presence: PresenceStore;
  readonly facts: RegistrationFacts;
  readonly leaseTtlSeconds: number;
  readonly agentVersion: string;
  /** Random per agent process: tells the control plane a restart from a continuous session. */
  readonly agentInstance: string;
  readonly logger: Logger;
  readonly retryBackoff?: BackoffOptions;
  /** Deadline of the lease revoke on stop; shutdown must not hang on an unreachable etcd. */
  readonly revokeTimeoutMs?: number;
  /**
   * After this long without a renewal, `renewalOverdue` fires. Default: 65% of the TTL, or one
   * keep-alive interval (a third of the TTL) plus 1.5 s when that is longer, but never past 80% of
   * the TTL: well before etcd expires the lease.
   */
  readonly renewalOverdueMs?: number;
}

export interface MembershipState {
  readonly registered: boolean;
  /** etcd lease ID (decimal string) of the current registration. */
  readonly leaseId: string | undefined;
  /** How many times the agent registered (1 + re-registrations after lost leases). */
  readonly registrations: number;
  readonly lastError: string | undefined;
}

export interface MembershipEvents {
  registered: [MembershipState];
  lost: [Error];
  /**
   * The lease was not renewed for `renewalOverdueMs`: it may expire soon, and the cluster then
   * promotes other copies of this server's volumes. Whoever serves as a primary stops now
   * (docs/replication.md, "Fencing").
   */
  renewalOverdue: [];
  /** The same lease was renewed again after renewalOverdue: it never expired. */
  renewed: [];
}

export class Membership extends EventEmitter<MembershipEvents> {
  private lease: PresenceLease | undefined;
  private leaseId: string | undefined;
  private registrations = 0;
  private lastError: string | undefined;
  private registering: Promise<void> | undefined;
  private stopped = false;
  private readonly abort = new AbortController();
  /** When the current lease was last granted or renewed (monotonic: a wall-clock step must not fence). */
  private renewedAt = 0;
  private overdue = false;
  private watchdog: NodeJS.Timeout | undefined;
  /** The nodes the presence key lists: a stopped node is left out (Inactive; docs/node-operations.md). */
  private listed: string[];
  private since = new Date().toISOString();

  constructor(private readonly options: MembershipOptions) {
    super();
    this.listed = [...options.facts.nodeUUIDs];
  }

  /**
   * Lists only `nodes` (of this server's) in the presence key from now on: a node left out is
   * Inactive for the cluster while the agent keeps the others Active. Written at once when
   * registered (rejects when etcd does not take it; the caller retries), else at registration.
   */
  async setListedNodes(nodes: readonly string[]): Promise<void> {
    this.listed = this.options.facts.nodeUUIDs.filter((n) => nodes.includes(n));
    const lease = this.lease;
    if (!lease) return;
    await lease.putPresence(this.presence());
  }

  /** The nodes the presence key lists now. */
  listedNodes(): string[] {
    return [...this.listed];
  }

  private presence(): PresenceRecord {
    const facts = this.options.facts;
    return {
      serverUUID: facts.serverUUID,
      nodeUUIDs: [...this.listed],
      hostname: facts.hostname,
      agentVersion: this.options.agentVersion,
      agentInstance: this.options.agentInstance,
      since: this.since,
    };
  }

  /** Milliseconds without a renewal after which the lease counts as overdue. */
  get renewalOverdueMs(): number {
    const ttlMs = this.options.leaseTtlSeconds * 1000;
    return this.options.renewalOverdueMs ?? Math.max(ttlMs * 0.65, Math.min(ttlMs / 3 + 1500, ttlMs * 0.8));
  }

  /** True from renewalOverdue (or a lost lease) until renewed or registered again. */
  isRenewalOverdue(): boolean {
    return this.overdue;
  }

  state(): MembershipState {
    return {
      registered: this.lease !== undefined,
      leaseId: this.leaseId,
      registrations: this.registrations,
      lastError: this.lastError,
    };
  }

  /** Starts registering; resolves once registered (retrying while etcd is unreachable) or stopped. */
  async start(): Promise<void> {
    this.ensureRegistering();
    await this.registering;
  }

  /** Revokes the lease so the server turns Inactive now rather than after the TTL. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.abort.abort();
    clearInterval(this.watchdog);
    // An attempt blocked on an unreachable etcd must not hold up shutdown; if it completes
    // later it sees `stopped` and revokes its own lease.
    if (this.registering) await Promise.race([this.registering, sleep(1500)]);
    const lease = this.lease;
    this.lease = undefined;
    if (!lease) return;
    try {
      await lease.revoke(Date.now() + (this.options.revokeTimeoutMs ?? 2000));
      this.options.logger.info({ leaseId: this.leaseId }, 'membership lease revoked');
    } catch (err) {
      // The presence key then disappears when the TTL runs out.
      this.options.logger.warn({ err }, 'revoking the membership lease failed; presence expires with the TTL');
    }
  }

  private ensureRegistering(): void {
    if (this.registering || this.stopped) return;
    this.registering = this.registerUntilDone().finally(() => {
      this.registering = undefined;
    });
  }

  private async registerUntilDone(): Promise<void> {
    if (this.stopped) return;
    await retry(() => this.register(), {
      backoff: this.options.retryBackoff ?? { initialMs: 200, maxMs: 5000, jitter: 0.5 },
      signal: this.abort.signal,
      onRetry: (err, delay) => this.options.logger.warn({ err, retryInMs: delay }, 'registering in etcd failed; retrying'),
    }).catch((err: unknown) => {
      if (!this.stopped && !(err instanceof RetryAborted)) throw err;
    });
  }

  /** One attempt: a new lease, the server and node records, the presence key. */
  private async register(): Promise<void> {
    const { store, facts, logger } = this.options;
    const lease = this.options.presence.lease(this.options.leaseTtlSeconds);
    lease.onLost((err) => this.onLeaseLost(lease, err));
    try {
      const leaseId = await lease.grant();
      const server = await store.registerServer(facts);
      const nodes = await store.registerNodes(facts);
      this.since = new Date().toISOString();
      await lease.putPresence(this.presence());
      if (lease.revoked()) throw new Error('the lease was lost while registering');
      if (this.stopped) {
        await lease.revoke(Date.now() + 1000).catch(() => undefined);
        return;
      }
      this.lease = lease;
      this.leaseId = leaseId;
      this.registrations += 1;
      this.lastError = undefined;
      this.watchRenewals(lease);
      logger.info(
        { leaseId, ttlSeconds: this.options.leaseTtlSeconds, serverRecord: server, nodeRecords: nodes, registrations: this.registrations },
        'registered in etcd: presence key written',
      );
      this.emit('registered', this.state());
    } catch (err) {
      this.lastError = (err as Error).message;
      // Let a half-granted lease expire on its own; revoking needs the etcd we cannot reach.
      lease.release();
      throw err;
    }
  }

  /**
   * Counts the lease's renewals; a timer says when one is overdue. The clock starts at the grant
   * (etcd started the TTL no later than that) and restarts at every acknowledged keep-alive.
   */
  private watchRenewals(lease: PresenceLease): void {
    this.renewedAt = performance.now();
    this.overdue = false;
    lease.onRenewed(() => {
      if (lease !== this.lease) return;
      this.renewedAt = performance.now();
      if (this.overdue) {
        this.overdue = false;
        this.options.logger.info({ leaseId: this.leaseId }, 'membership lease renewed again');
        this.emit('renewed');
      }
    });
    this.watchdog ??= setInterval(() => {
      if (!this.lease || this.overdue || this.stopped) return;
      const silentMs = performance.now() - this.renewedAt;
      if (silentMs < this.renewalOverdueMs) return;
      this.overdue = true;
      this.options.logger.warn({ leaseId: this.leaseId, silentMs, ttlSeconds: this.options.leaseTtlSeconds }, 'membership lease not renewed in time: fencing');
      this.emit('renewalOverdue');
    }, 200);
    this.watchdog.unref();
  }

  private onLeaseLost(lease: PresenceLease, err: Error): void {
    if (lease !== this.lease || this.stopped) return;
    this.lease = undefined;
    this.lastError = err.message;
    if (!this.overdue) {
      this.overdue = true;
      this.emit('renewalOverdue');
    }
    this.options.logger.warn(
      { err, leaseId: this.leaseId },
      'membership lease lost (etcd unreachable longer than the TTL, or the lease was revoked): re-registering',
    );
    this.emit('lost', err);
    this.ensureRegistering();
  }
}
