// A process's etcd lease, kept alive, and granted again after it is lost (a network cut longer
// than the TTL, an etcd restart). Owners of lease-bound keys re-register in onGranted.
import type { Etcd3, Lease } from 'etcd3';
import type { Logger } from '../logger.js';

export interface KeptLeaseOptions {
  readonly ttlSeconds: number;
  readonly logger: Logger;
  /** Called with each newly granted lease (first grant and every re-grant). */
  readonly onGranted: (lease: Lease, leaseId: string) => Promise<void>;
  /** Called when the current lease is lost, before a new one is sought. */
  readonly onLost?: () => void;
}

export class KeptLease {
  private lease: Lease | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private backoffMs = 200;

  constructor(private readonly etcd: Etcd3, private readonly options: KeptLeaseOptions) {}

  /** Grants the first lease and runs onGranted; retries in the background if etcd is down. */
  async start(): Promise<void> {
    await this.grant();
  }

  get current(): Lease | undefined {
    return this.lease;
  }

  private async grant(): Promise<void> {
    if (this.stopped) return;
    const lease = this.etcd.lease(this.options.ttlSeconds, { autoKeepAlive: true });
    lease.on('lost', (err) => {
      if (this.lease !== lease || this.stopped) return;
      this.options.logger.warn({ err: err.message }, 'etcd lease lost; registering again');
      this.lease = undefined;
      this.options.onLost?.();
      this.scheduleGrant();
    });
    try {
      const id = await lease.grant();
      this.lease = lease;
      await this.options.onGranted(lease, id);
      this.backoffMs = 200;
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'cannot obtain etcd lease; retrying');
      if (this.lease === lease) this.lease = undefined;
      lease.release();
      this.scheduleGrant();
    }
  }

  private scheduleGrant(): void {
    if (this.stopped || this.retryTimer) return;
    const delay = this.backoffMs * (0.75 + Math.random() / 2);
    this.backoffMs = Math.min(this.backoffMs * 2, 5000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.grant();
    }, delay);
  }

  /** Revokes the lease so its keys go at once (graceful shutdown). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const lease = this.lease;
    this.lease = undefined;
    if (lease) {
      try {
        await lease.revoke();
      } catch {
        lease.release(); // etcd unreachable: the TTL will expire the keys
      }
    }
  }
}
