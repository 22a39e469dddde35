// Admin endpoints on this server (docs/admin-endpoints.md): every `/strata/admin-endpoints/<port>`
// record becomes entries of the agent's nftables table (the same table as the volumes' IP ACLs,
// agent/datapath/kernel/ip-acl-enforcer.ts), so that only the listed addresses reach that TCP port; a
// deleted record's entries go. A watch on the prefix applies a change within the debounce (and
// one nft transaction); a resync every interval puts back what someone else removed, and retries
// what nftables refused.
import type { StoreWatch } from '../../lib/etcd/record-store.js';
import type { Logger } from '../../lib/logger.js';
import type { AdminEndpointAcls } from '../datapath/kernel/ip-acl-enforcer.js';
import { ipAclOf, type IpAcl } from '../datapath/kernel/ip-acl.js';
import type { AdminEndpointRecordsStore } from './admin-endpoints-store.js';

export interface AdminEndpointsTarget {
  enforceAdminEndpoints(endpoints: AdminEndpointAcls): Promise<ReadonlyMap<number, string>>;
}

export interface AdminEndpointsEnforcerOptions {
  readonly store: AdminEndpointRecordsStore;
  readonly target: AdminEndpointsTarget;
  readonly resyncIntervalMs: number;
  readonly debounceMs?: number;
  readonly logger: Logger;
}

export class AdminEndpointsEnforcer {
  private watcher: StoreWatch | undefined;
  private timer: NodeJS.Timeout | undefined;
  private resync: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private stopped = false;
  private dirty = false;

  constructor(private readonly options: AdminEndpointsEnforcerOptions) {}

  async start(): Promise<void> {
    if (this.stopped || this.watcher) return;
    const schedule = () => this.schedule();
    this.watcher = this.options.store.watch(schedule, (err) => this.options.logger.warn({ err: err.message }, 'admin endpoints watch failed; it reconnects, and the resync re-reads'));
    // Neither timer keeps a stopping process alive (stop() clears them; unref covers a stop that
    // never comes, as in tests that drop an agent).
    this.resync = setInterval(schedule, this.options.resyncIntervalMs).unref();
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.resync);
    await this.watcher?.cancel().catch(() => undefined);
    await this.running;
  }

  private schedule(delayMs = this.options.debounceMs ?? 100): void {
    if (this.stopped) return;
    this.dirty = true;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.running.then(() => this.pass());
    }, delayMs).unref();
  }

  private async pass(): Promise<void> {
    if (this.stopped || !this.dirty) return;
    this.dirty = false;
    let endpoints: Map<number, IpAcl>;
    try {
      endpoints = await this.read();
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'reading the admin endpoints failed; retrying');
      this.schedule(1000);
      return;
    }
    const failed = await this.options.target.enforceAdminEndpoints(endpoints).catch((err: Error) => new Map([[0, err.message]]));
    if (failed.size > 0) this.schedule(Math.min(this.options.resyncIntervalMs, 5000));
  }

  private async read(): Promise<Map<number, IpAcl>> {
    const endpoints = new Map<number, IpAcl>();
    for (const { key, record } of await this.options.store.list()) {
      const acl = record ? ipAclOf(record.ips) : 'empty record';
      if (!record || typeof acl === 'string' || !Number.isInteger(record.port) || record.port < 1 || record.port > 65535 || acl.v4.length + acl.v6.length === 0) {
        this.options.logger.warn({ key, problem: typeof acl === 'string' ? acl : 'invalid record' }, 'an admin endpoint record is not usable; skipped');
        continue;
      }
      endpoints.set(record.port, acl);
    }
    return endpoints;
  }
}
