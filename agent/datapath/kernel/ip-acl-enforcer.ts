// The IP ACL part of a data path pass (domain layer), in two steps around the kernel target:
//
//   enforce()  before any export changes: every wanted volume port gets its ACL (a new port is
//              filtered before nvmet listens on it); ports of other volumes keep what they
//              have, since their exports may still be up.
//   release()  after the exports changed: entries of ports that are neither wanted nor still
//              exist in the kernel target are dropped (the table goes with the last of them).
//
// Each step reads the table back, plans the smallest change, applies it as one transaction and
// reads again to verify. A transaction the kernel refuses is retried port by port, so one bad
// port fails only its volume. When nftables cannot be used at all, only volumes that have an
// IP ACL fail: a volume is never reported served while its ACL is not enforced.
//
// Admin endpoints (docs/admin-endpoints.md) live in the same table, on ports outside the volume
// port range (the API refuses an admin endpoint inside it): enforceAdminEndpoints() makes the
// entries of every such port exactly the endpoints', whenever they change, and the two data path
// steps keep them. Every step runs alone (one at a time), since each reads, plans and applies the
// whole table.
import type { Logger } from '../../../lib/logger.js';
import {
  describeIpAclChange,
  planIpAcls,
  portsThatDiffer,
  wantedTable,
  type IpAcl,
  type IpAclChange,
  type IpAclTable,
  type ObservedIpAcls,
} from './ip-acl.js';
import { NftablesUnavailable, type IpAclDriver } from './nftables.js';

export interface WantedIpAcl {
  readonly volumeUUID: string;
  readonly acl: IpAcl;
}

export interface IpAclPassResult {
  /** Volume → why its IP ACL is not (or not surely) enforced. */
  readonly failed: ReadonlyMap<string, string>;
  /** Changes applied (0 when the table already was as wanted). */
  readonly changes: number;
}

/** Admin endpoints: port → the addresses allowed to reach it. */
export type AdminEndpointAcls = ReadonlyMap<number, IpAcl>;

export class IpAclEnforcer {
  private lastUnavailable: string | undefined;
  /** Ports the last enforce() left as they were (not wanted): release() looks at them. */
  private kept = new Set<number>();
  private admin: AdminEndpointAcls = new Map();
  private queue: Promise<unknown> = Promise.resolve();
  /**
   * What the last enforce() found in place without a failure (port → its ACL), dropped by any
   * other step. An enforce() that may trust it and wants exactly that reads nothing: reading the
   * table is a process (`nft`), 0.3-0.8 s under emulation, on the path of every pass, a
   * promotion's included. Steps told to check read the table, whatever they want.
   */
  private lastEnforced: ReadonlyMap<number, string> | undefined;

  /**
   * `driver` is a reason string when this process has no way to enforce IP ACLs. Ports outside
   * `volumePorts` belong to admin endpoints (default: every port is a volume port).
   */
  constructor(
    private readonly driver: IpAclDriver | string,
    private readonly logger: Logger,
    private readonly volumePorts: { readonly min: number; readonly max: number } = { min: 1, max: 65535 },
  ) {}

  private isAdminPort(port: number): boolean {
    return port < this.volumePorts.min || port > this.volumePorts.max;
  }

  /** Runs `step` after every step before it: each reads, plans and applies the whole table. */
  private alone<T>(step: () => Promise<T>): Promise<T> {
    const run = this.queue.then(step, step);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Makes the entries of the admin endpoints' ports (those outside the volume port range) exactly
   * `endpoints`: new and changed endpoints are applied, deleted ones removed. Resolves with the
   * ports left not as wanted (port → why), an empty map when all are enforced.
   */
  enforceAdminEndpoints(endpoints: AdminEndpointAcls): Promise<ReadonlyMap<number, string>> {
    return this.alone(async () => {
      const outside = [...endpoints.keys()].filter((p) => !this.isAdminPort(p));
      if (outside.length > 0) this.logger.warn({ ports: outside }, 'admin endpoints inside the volume port range are not enforced');
      this.admin = new Map([...endpoints].filter(([port]) => this.isAdminPort(port)));
      const observed = await this.read();
      if (typeof observed === 'string') {
        this.lastEnforced = undefined;
        return new Map([...this.admin.keys()].map((port) => [port, observed]));
      }
      const desired = wantedTable(this.admin, observed.ports, (port) => !this.isAdminPort(port));
      const atRisk = new Set([...this.admin.keys()].filter(() => !(observed.present && observed.intact)));
      const result = await this.converge(desired, observed, atRisk);
      // The volume ports' entries are kept as read, so a step that changed nothing leaves what the
      // last enforce() put in place as it was (this step runs every resync interval: dropping the
      // volumes' trust each time made most passes read the table again).
      if (result.changes > 0 || result.byPort.size > 0) this.lastEnforced = undefined;
      const failed = new Map([...result.byPort].filter(([port]) => this.isAdminPort(port)));
      if (failed.size > 0) this.logger.warn({ failed: Object.fromEntries(failed) }, 'admin endpoints not enforced; retrying');
      else if (result.changes > 0) this.logger.info({ ports: [...this.admin.keys()] }, 'admin endpoints enforced');
      return failed;
    });
  }

  /**
   * Puts the ACL of every wanted port (port → volume + ACL) in place. `check` false: when the
   * last enforce() left exactly these ports with exactly these ACLs, and nothing changed the table
   * through this enforcer since, the table is taken as it was (a full pass checks it again).
   */
  enforce(wanted: ReadonlyMap<number, WantedIpAcl>, options: { readonly check: boolean } = { check: true }): Promise<IpAclPassResult> {
    return this.alone(async () => {
      const key = new Map([...wanted].map(([port, w]) => [port, JSON.stringify(w.acl)] as const));
      if (!options.check && this.lastEnforced && sameEntries(this.lastEnforced, key)) return { failed: new Map(), changes: 0 };
      this.lastEnforced = undefined;
      const result = await this.enforceAlone(wanted);
      if (result.failed.size === 0) this.lastEnforced = key;
      return result;
    });
  }

  private async enforceAlone(wanted: ReadonlyMap<number, WantedIpAcl>): Promise<IpAclPassResult> {
    const acls = new Map([...this.admin, ...[...wanted].map(([port, w]) => [port, w.acl] as const)]);
    const volumeOf = (port: number) => wanted.get(port)?.volumeUUID;
    const restricted = [...wanted.values()].filter((w) => w.acl.restricted);
    const observed = await this.read();
    if (typeof observed === 'string') {
      // Volumes without an IP ACL are not affected by nftables being unusable here.
      return { failed: new Map(restricted.map((w) => [w.volumeUUID, `the IP ACL cannot be enforced: ${observed}`])), changes: 0 };
    }
    // Ports of admin endpoints that no longer exist go too.
    const desired = wantedTable(acls, observed.ports, (port) => !this.isAdminPort(port));
    this.kept = new Set([...desired.keys()].filter((p) => !wanted.has(p) && !this.admin.has(p)));
    // A damaged or missing table leaves every restricted port unprotected, not just those whose
    // entries differ.
    const atRisk = new Set([...wanted].filter(([, w]) => w.acl.restricted && !(observed.present && observed.intact)).map(([port]) => port));
    const failedPorts = await this.converge(desired, observed, atRisk);
    const failed = new Map<string, string>();
    for (const [port, reason] of failedPorts.byPort) {
      const volumeUUID = volumeOf(port);
      if (volumeUUID) failed.set(volumeUUID, reason);
    }
    return { failed, changes: failedPorts.changes };
  }

  /** Drops the entries of ports that are not wanted and no longer exist in the kernel target. */
  release(wantedPorts: ReadonlySet<number>, livePorts: ReadonlySet<number>): Promise<void> {
    return this.alone(() => this.releaseAlone(wantedPorts, livePorts));
  }

  private async releaseAlone(wantedPorts: ReadonlySet<number>, livePorts: ReadonlySet<number>): Promise<void> {
    // Only when the last enforce() kept ports that may go now: a pass that changes nothing reads
    // the table once.
    if (![...this.kept].some((p) => !wantedPorts.has(p) && !livePorts.has(p))) return;
    this.lastEnforced = undefined;
    const observed = await this.read();
    if (typeof observed === 'string') return;
    const desired = wantedTable(new Map(), observed.ports, (port) => wantedPorts.has(port) || livePorts.has(port) || this.admin.has(port));
    const result = await this.converge(desired, observed, new Set());
    this.kept = new Set([...desired.keys()].filter((p) => !wantedPorts.has(p) && !this.admin.has(p)));
    for (const [port, reason] of result.byPort) this.logger.warn({ port, reason }, 'removing the IP ACL of a port no longer served failed; retrying at the next pass');
  }

  private async read(): Promise<ObservedIpAcls | string> {
    if (typeof this.driver === 'string') return this.unavailable(this.driver);
    try {
      const observed = await this.driver.read();
      if (this.lastUnavailable !== undefined) this.logger.info('nftables is usable again');
      this.lastUnavailable = undefined;
      return observed;
    } catch (err) {
      if (err instanceof NftablesUnavailable) return this.unavailable(err.message);
      return `reading the nftables table failed: ${(err as Error).message}`;
    }
  }

  private unavailable(reason: string): string {
    if (this.lastUnavailable !== reason) this.logger.warn({ reason }, 'IP ACLs cannot be enforced on this server; volumes with an IP ACL fail');
    this.lastUnavailable = reason;
    return reason;
  }

  /** Plan, apply (whole, then port by port), verify. Returns the ports left not as desired. */
  private async converge(desired: IpAclTable, observed: ObservedIpAcls, atRisk: ReadonlySet<number>): Promise<{ byPort: Map<number, string>; changes: number }> {
    const byPort = new Map<number, string>();
    const changes = planIpAcls(desired, observed);
    if (changes.length === 0) return { byPort, changes: 0 };
    const driver = this.driver as IpAclDriver;
    const affected = new Set([...portsThatDiffer(desired, observed.ports), ...atRisk]);
    const log = this.logger;
    try {
      await driver.apply(changes);
      log.info({ changes: changes.map(describeIpAclChange) }, 'nftables IP ACLs applied');
    } catch (err) {
      if (changes.every((c) => c.kind === 'port')) {
        for (const change of changes as Extract<IpAclChange, { kind: 'port' }>[]) {
          try {
            await driver.apply([change]);
            log.info({ changes: [describeIpAclChange(change)] }, 'nftables IP ACLs applied');
          } catch (portErr) {
            byPort.set(change.port, `the IP ACL cannot be enforced: ${(portErr as Error).message}`);
          }
        }
      } else {
        for (const port of affected) byPort.set(port, `the IP ACL cannot be enforced: ${(err as Error).message}`);
        log.warn({ err: (err as Error).message }, 'applying nftables IP ACLs failed');
        return { byPort, changes: 0 };
      }
    }
    // Verify: what the kernel holds now, planned again.
    const after = await this.read();
    if (typeof after === 'string') {
      for (const port of affected) if (!byPort.has(port)) byPort.set(port, `the IP ACL cannot be verified: ${after}`);
      return { byPort, changes: changes.length };
    }
    const left = planIpAcls(desired, after);
    if (left.length > 0) {
      const still = after.present && after.intact ? portsThatDiffer(desired, after.ports) : affected;
      const what = left.map(describeIpAclChange).join('; ');
      for (const port of still) if (!byPort.has(port)) byPort.set(port, `nftables does not match after applying: ${what}`);
    }
    return { byPort, changes: changes.length };
  }
}

function sameEntries(a: ReadonlyMap<number, string>, b: ReadonlyMap<number, string>): boolean {
  return a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);
}
