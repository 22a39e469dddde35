// The log page of each connected host, recomputed when the cluster's view changes. A host's
// generation counter changes exactly when its own entries change, and then each of its
// connections is told (to complete an Asynchronous Event Request). Hosts without a connection
// are forgotten; a host seen again gets a counter value never handed out before.
import { encodeDiscoveryLog, entriesForHost, entriesKey, type DiscoveryView } from './log-page.js';

interface HostLog {
  key: string;
  genctr: bigint;
  page: Buffer;
  readonly listeners: Set<() => void>;
}

export interface HostLogHandle {
  /** The host's current log page (header and entries). */
  page(): Buffer;
  genctr(): bigint;
  detach(): void;
}

export class HostLogs {
  /** Starts at the clock so a restarted agent does not hand out the counters it handed before. */
  private counter = BigInt(Date.now());
  private readonly hosts = new Map<string, HostLog>();
  private current: DiscoveryView | undefined;

  view(): DiscoveryView | undefined {
    return this.current;
  }

  /** Number of hosts with at least one connection. */
  get hostCount(): number {
    return this.hosts.size;
  }

  setView(view: DiscoveryView): void {
    this.current = view;
    const changed: HostLog[] = [];
    let genctr: bigint | undefined;
    for (const [hostNQN, log] of this.hosts) {
      const entries = entriesForHost(view, hostNQN);
      const key = entriesKey(entries);
      if (key === log.key) continue;
      genctr ??= ++this.counter;
      log.key = key;
      log.genctr = genctr;
      log.page = encodeDiscoveryLog(genctr, entries);
      changed.push(log);
    }
    for (const log of changed) for (const listener of [...log.listeners]) listener();
  }

  /** Follows a host's page; `onChange` runs after each change of its entries. Needs a view. */
  attach(hostNQN: string, onChange: () => void): HostLogHandle {
    const view = this.current;
    if (!view) throw new Error('no view of the cluster yet');
    let log = this.hosts.get(hostNQN);
    if (!log) {
      const entries = entriesForHost(view, hostNQN);
      const genctr = ++this.counter;
      log = { key: entriesKey(entries), genctr, page: encodeDiscoveryLog(genctr, entries), listeners: new Set() };
      this.hosts.set(hostNQN, log);
    }
    const attached = log;
    attached.listeners.add(onChange);
    return {
      page: () => attached.page,
      genctr: () => attached.genctr,
      detach: () => {
        attached.listeners.delete(onChange);
        if (attached.listeners.size === 0 && this.hosts.get(hostNQN) === attached) this.hosts.delete(hostNQN);
      },
    };
  }
}
