// Where TLS hosts live in etcd (docs/etcd-keys.md): a record per host name and an index by host
// NQN, changed with the feature's sealed records in one transaction
// (lib/etcd/sealed-host-keys-store.ts). The service sees TLS host records and revisions only.
import { keys } from '../../lib/etcd/keys.js';
import type { KvClient } from '../../lib/etcd/kv.js';
import type { RecordStore, Versioned } from '../../lib/etcd/record-store.js';
import { type KeyHolder, SEALED_FEATURES, type SealedHostChange, type SealedHostsView, SealedHostKeysStore } from '../../lib/etcd/sealed-host-keys-store.js';
import type { TlsHostRecord } from '../../lib/records.js';

/** What a change does to the TLS hosts, decided from the current ones (`enabled`: TLS required or not). */
export type TlsHostChange = SealedHostChange<TlsHostRecord>;

export class TlsHostStore {
  private readonly sealed: SealedHostKeysStore<TlsHostRecord>;
  private readonly records: RecordStore;

  /** `open` decrypts a host's PSK for the records sealed to each server. */
  constructor(client: KvClient, key: KeyHolder, open: (record: TlsHostRecord) => string) {
    this.sealed = new SealedHostKeysStore(client, SEALED_FEATURES.nvmeTcpTls, key, (hosts) => Object.fromEntries(hosts.map((h) => [h.hostNQN, open(h)])));
    this.records = this.sealed.records;
  }

  isRequired(): Promise<boolean> {
    return this.sealed.isEnabled();
  }

  list(): Promise<Versioned<TlsHostRecord>[]> {
    return this.records.list<TlsHostRecord>(keys.tlsHostsPrefix());
  }

  get(name: string): Promise<Versioned<TlsHostRecord> | null> {
    return this.records.get<TlsHostRecord>(keys.tlsHost(name));
  }

  /** One serialized change (undefined from `decide`: nothing to do), sealed to every server in its transaction. */
  change(decide: (s: SealedHostsView<TlsHostRecord>) => TlsHostChange | undefined): Promise<void> {
    return this.sealed.changeHosts(
      {
        same: (a, b) => a.name === b.name,
        put: (r, isNew) => [{ put: keys.tlsHost(r.name), value: r }, ...(isNew ? [{ put: keys.tlsHostNqn(r.hostNQN), value: { name: r.name } }] : [])],
        remove: (r) => [{ delete: keys.tlsHost(r.name) }, { delete: keys.tlsHostNqn(r.hostNQN) }],
      },
      decide,
    );
  }

  resealStale(): Promise<number> {
    return this.sealed.resealStale();
  }
}
