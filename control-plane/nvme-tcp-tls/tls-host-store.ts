// Where TLS hosts live in etcd (docs/etcd-keys.md): a record per host name and an index by host
// NQN, changed with the feature's sealed records in one transaction
// (lib/etcd/sealed-host-keys-store.ts). The service sees TLS host records and revisions only.
import type { Etcd3 } from 'etcd3';
import { keys } from '../../lib/etcd/keys.js';
import type { RecordStore, Versioned } from '../../lib/etcd/record-store.js';
import { type KeyHolder, SEALED_FEATURES, type SealedSnapshot, SealedHostKeysStore } from '../../lib/etcd/sealed-host-keys-store.js';
import type { TlsHostRecord } from '../../lib/records.js';

/** What a change does to the TLS hosts, decided from the current ones. */
export type TlsHostChange =
  | { readonly add: TlsHostRecord }
  | { readonly replace: TlsHostRecord }
  | { readonly remove: TlsHostRecord }
  | { readonly required: boolean; readonly actor: string };

export type TlsHostsSnapshot = Pick<SealedSnapshot<TlsHostRecord>, 'hosts' | 'switch'>;

export class TlsHostStore {
  private readonly sealed: SealedHostKeysStore<TlsHostRecord>;
  private readonly records: RecordStore;

  /** `open` decrypts a host's PSK for the records sealed to each server. */
  constructor(etcd: Etcd3, key: KeyHolder, open: (record: TlsHostRecord) => string) {
    this.sealed = new SealedHostKeysStore(etcd, SEALED_FEATURES.nvmeTcpTls, key, (hosts) => Object.fromEntries(hosts.map((h) => [h.hostNQN, open(h)])));
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
  async change(decide: (s: TlsHostsSnapshot) => TlsHostChange | undefined): Promise<void> {
    await this.sealed.change(async (s) => {
      const change = decide(s);
      if (!change) return undefined;
      const others = (name: string) => s.hosts.filter((h) => h.record.name !== name).map((h) => h.record);
      if ('add' in change) {
        const r = change.add;
        return { hosts: [...others(r.name), r], ops: [this.records.put(keys.tlsHost(r.name), r), this.records.put(keys.tlsHostNqn(r.hostNQN), { name: r.name })] };
      }
      if ('replace' in change) {
        const r = change.replace;
        return { hosts: s.hosts.map((h) => (h.record.name === r.name ? r : h.record)), ops: [this.records.put(keys.tlsHost(r.name), r)] };
      }
      if ('remove' in change) {
        const r = change.remove;
        return { hosts: others(r.name), ops: [this.records.delete(keys.tlsHost(r.name)), this.records.delete(keys.tlsHostNqn(r.hostNQN))] };
      }
      return { enabled: change.required, actor: change.actor, hosts: s.hosts.map((h) => h.record), ops: [] };
    });
  }

  resealStale(): Promise<number> {
    return this.sealed.resealStale();
  }
}
