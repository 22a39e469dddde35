// Where trusted hosts live in etcd (docs/etcd-keys.md): a record per project and host name and an
// index by host NQN (each NQN in one project), changed with in-band authentication's sealed
// records in one transaction (lib/etcd/sealed-host-keys-store.ts). The service sees trusted host
// records, revisions and the changes it decides.
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import type { RecordStore, Versioned } from '../../lib/etcd/record-store.js';
import { type KeyHolder, SEALED_FEATURES, type SealedHostChange, type SealedHostsView, SealedHostKeysStore } from '../../lib/etcd/sealed-host-keys-store.js';
import type { TrustedHostRecord } from '../../lib/records.js';

/** What a change does to the trusted hosts, decided from the current ones (`enabled`: in-band authentication on or off). */
export type TrustedHostChange = SealedHostChange<TrustedHostRecord>;

export class TrustedHostStore {
  private readonly sealed: SealedHostKeysStore<TrustedHostRecord>;
  private readonly records: RecordStore;

  /** `open` decrypts a host's secrets for the records sealed to each server. */
  constructor(client: KvClient, key: KeyHolder, open: (record: TrustedHostRecord) => { secret: string; ctrlSecret: string }) {
    this.sealed = new SealedHostKeysStore(client, SEALED_FEATURES.inBandAuth, key, (hosts) => {
      // What each server's box holds: every trusted host's keys by NQN.
      const map: Record<string, { key: string; ctrlKey: string }> = {};
      for (const host of hosts) {
        const { secret, ctrlSecret } = open(host);
        map[host.hostNQN] = { key: secret, ctrlKey: ctrlSecret };
      }
      return map;
    });
    this.records = this.sealed.records;
  }

  isEnabled(): Promise<boolean> {
    return this.sealed.isEnabled();
  }

  /** Every trusted host, or a project's. */
  list(project?: string): Promise<Versioned<TrustedHostRecord>[]> {
    return this.records.list<TrustedHostRecord>(keys.trustedHostsPrefix(project));
  }

  get(project: string, name: string): Promise<Versioned<TrustedHostRecord> | null> {
    return this.records.get<TrustedHostRecord>(keys.trustedHost(project, name));
  }

  /** One serialized change (undefined from `decide`: nothing to do), sealed to every server in its transaction. */
  change(decide: (s: SealedHostsView<TrustedHostRecord>) => TrustedHostChange | undefined): Promise<void> {
    return this.sealed.changeHosts(
      {
        same: (a, b) => a.projectName === b.projectName && a.name === b.name,
        put: (r, isNew) => [{ put: keys.trustedHost(r.projectName, r.name), value: r }, ...(isNew ? [{ put: keys.trustedHostNqn(r.hostNQN), value: { project: r.projectName, name: r.name } }] : [])],
        remove: (r) => [{ delete: keys.trustedHost(r.projectName, r.name) }, { delete: keys.trustedHostNqn(r.hostNQN) }],
      },
      decide,
    );
  }

  resealStale(): Promise<number> {
    return this.sealed.resealStale();
  }
}
