// Host secrets that the control plane keeps encrypted and every server's agent receives sealed to
// its own key, through etcd (docs/security.md). Two features use it: in-band authentication
// (DH-HMAC-CHAP secrets of trusted hosts, docs/in-band-auth.md) and TLS on NVMe/TCP (PSKs of TLS
// hosts, docs/nvme-tcp-tls.md). Each has a switch (a flag-shaped record), its host records, a
// generation key every change is serialized on, and one sealed record per server that published
// its box key (lib/sealed-box.ts). Every change is one transaction: the feature's own operations,
// the switch, and a fresh record sealed to every server, so agents never see half a change and
// etcd never holds a secret in the clear. Both features' secrets are encrypted with the same
// host-secret key, whose id etcd names (the first control plane to write wins).
import { StrataError } from '../errors.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord } from '../records.js';
import { LOST_RACE, retryLostRaces } from '../retry.js';
import { seal } from '../sealed-box.js';
import { keys } from './keys.js';
import type { KvClient } from './kv.js';
import { RecordStore, type Versioned } from './record-store.js';
import { commitTransaction, type Guard, type Write } from './transaction.js';

const ATTEMPTS = 20;

/** The switch of a feature: a feature flag's shape, wherever it is stored. */
export interface SwitchRecord {
  name: string;
  enabled: boolean;
  updatedAt: string;
  updatedBy: string;
}

/** Where a feature keeps its records in etcd. */
export interface SealedFeatureLayout {
  readonly what: string;
  /** The switch record's `name`. */
  readonly switchName: string;
  readonly switchKey: string;
  readonly generationKey: string;
  readonly hostsPrefix: string;
  readonly serverRecordsPrefix: string;
  readonly serverRecord: (serverUUID: string) => string;
}

export const SEALED_FEATURES = {
  inBandAuth: {
    what: 'in-band authentication',
    switchName: 'in-band-authentication',
    switchKey: keys.featureFlag('in-band-authentication'),
    generationKey: keys.inBandAuthGeneration(),
    hostsPrefix: keys.trustedHostsPrefix(),
    serverRecordsPrefix: keys.serverHostKeysPrefix(),
    serverRecord: keys.serverHostKeys,
  },
  nvmeTcpTls: {
    what: 'TLS on NVMe/TCP',
    switchName: 'nvme-tcp-tls',
    switchKey: keys.nvmeTcpTlsSwitch(),
    generationKey: keys.nvmeTcpTlsGeneration(),
    hostsPrefix: keys.tlsHostsPrefix(),
    serverRecordsPrefix: keys.serverTlsKeysPrefix(),
    serverRecord: keys.serverTlsKeys,
  },
} as const satisfies Record<string, SealedFeatureLayout>;

/** Something that holds the host-secret key (control-plane/in-band-auth/host-secret-key.ts). */
export interface KeyHolder {
  readonly kid: string;
  otherKey(kid: string): Error;
}

export interface SealedSnapshot<H> {
  readonly generation: string;
  readonly switch: Versioned<SwitchRecord> | null;
  readonly hosts: Versioned<H>[];
  readonly boxKeys: ServerBoxKeyRecord[];
}

export interface SealedOutcome<H> {
  /** The feature's host records after the change. */
  readonly hosts: H[];
  /** Its own writes (host records, indexes). */
  readonly writes: readonly Write[];
  /** The new switch, when it changes. */
  readonly enabled?: boolean;
  readonly actor?: string;
  /** Only these servers' records (a reseal); default all that published a key. */
  readonly servers?: ServerBoxKeyRecord[];
}

/** What a change does to a feature's hosts, decided from the current ones (the switch: turned on or off). */
export type SealedHostChange<H> =
  | { readonly add: H }
  | { readonly replace: H }
  | { readonly remove: H }
  | { readonly enabled: boolean; readonly actor: string };

/** What a change is decided from. */
export type SealedHostsView<H> = Pick<SealedSnapshot<H>, 'hosts' | 'switch'>;

/** How a feature keeps one host: which records are the same host, the writes that put it (with its index when new) and remove it. */
export interface HostRecordLayout<H> {
  same(a: H, b: H): boolean;
  put(host: H, isNew: boolean): Write[];
  remove(host: H): Write[];
}

export class SealedHostKeysStore<H> {
  readonly records: RecordStore;

  constructor(
    client: KvClient,
    private readonly layout: SealedFeatureLayout,
    private readonly key: KeyHolder,
    /** What each server's box holds for these hosts (decrypted secrets: only ever sealed). */
    private readonly boxOf: (hosts: readonly H[]) => Record<string, unknown>,
  ) {
    this.records = new RecordStore(client);
  }

  async isEnabled(): Promise<boolean> {
    return (await this.records.get<SwitchRecord>(this.layout.switchKey))?.record.enabled ?? false;
  }

  async snapshot(): Promise<SealedSnapshot<H>> {
    const [generation, sw, hosts, boxKeys] = await Promise.all([
      this.records.kv.get(this.layout.generationKey).then((stored) => stored?.modRevision ?? '0'),
      this.records.get<SwitchRecord>(this.layout.switchKey),
      this.records.list<H>(this.layout.hostsPrefix),
      this.records.list<ServerBoxKeyRecord>(keys.serverBoxKeysPrefix()),
    ]);
    return { generation, switch: sw, hosts, boxKeys: boxKeys.map((k) => k.record) };
  }

  /**
   * One serialized change: `decide` returns the outcome, or undefined for nothing to do. The
   * servers' sealed records are rewritten in the same transaction.
   */
  async change(decide: (s: SealedSnapshot<H>) => Promise<SealedOutcome<H> | undefined>): Promise<void> {
    const keyGuard = await this.keyGuard();
    await retryLostRaces<void>(ATTEMPTS, async () => {
      const s = await this.snapshot();
      const outcome = await decide(s);
      if (!outcome) return;
      const enabled = outcome.enabled ?? s.switch?.record.enabled ?? false;
      const switchWrites: Write[] =
        outcome.enabled === undefined
          ? []
          : [{ put: this.layout.switchKey, value: { name: this.layout.switchName, enabled, updatedAt: new Date().toISOString(), updatedBy: outcome.actor ?? '' } satisfies SwitchRecord }];
      const writes: Write[] = [
        ...outcome.writes,
        ...switchWrites,
        ...this.sealedFor(outcome.servers ?? s.boxKeys, enabled, outcome.hosts),
        // The value is only a marker (its JSON is the decimal string it always was): the key's revision is the generation.
        { put: this.layout.generationKey, value: Date.now() },
      ];
      const result = await commitTransaction(this.records.kv, { guards: [{ key: this.layout.generationKey, revision: s.generation }, keyGuard], writes });
      if (!result.succeeded) return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', `${this.layout.what} is being changed by other requests; retry`));
  }

  /** `change` for one host added, replaced or removed, or the switch (undefined from `decide`: nothing to do). */
  async changeHosts(layout: HostRecordLayout<H>, decide: (s: SealedHostsView<H>) => SealedHostChange<H> | undefined): Promise<void> {
    await this.change(async (s) => {
      const change = decide(s);
      if (!change) return undefined;
      if ('enabled' in change) return { enabled: change.enabled, actor: change.actor, hosts: s.hosts.map((h) => h.record), writes: [] };
      const host = 'add' in change ? change.add : 'replace' in change ? change.replace : change.remove;
      const others = s.hosts.filter((h) => !layout.same(h.record, host)).map((h) => h.record);
      if ('add' in change) return { hosts: [...others, host], writes: layout.put(host, true) };
      if ('replace' in change) return { hosts: s.hosts.map((h) => (layout.same(h.record, host) ? host : h.record)), writes: layout.put(host, false) };
      return { hosts: others, writes: layout.remove(host) };
    });
  }

  /** Seals the current state again for servers whose record is missing or sealed to an old key (leader task). */
  async resealStale(): Promise<number> {
    let sealed = 0;
    await this.change(async (s) => {
      const current = new Map((await this.records.list<ServerHostKeysRecord>(this.layout.serverRecordsPrefix)).map((r) => [r.record.serverUUID, r.record]));
      const stale = s.boxKeys.filter((k) => current.get(k.serverUUID)?.publicKey !== k.publicKey);
      sealed = stale.length;
      if (stale.length === 0) return undefined;
      return { hosts: s.hosts.map((h) => h.record), writes: [], servers: stale };
    });
    return sealed;
  }

  /** The feature's state every server is told, sealed to each server's key. */
  private sealedFor(servers: readonly ServerBoxKeyRecord[], enabled: boolean, hosts: readonly H[]): Write[] {
    const plaintext = Buffer.from(JSON.stringify({ hosts: this.boxOf(hosts) }));
    return servers.map((server) => {
      const record: ServerHostKeysRecord = {
        serverUUID: server.serverUUID,
        enabled,
        publicKey: server.publicKey,
        box: seal(server.publicKey, plaintext, server.serverUUID),
        writtenAt: new Date().toISOString(),
      };
      return { put: this.layout.serverRecord(server.serverUUID), value: record };
    });
  }

  /** Makes sure etcd names this control plane's key as the cluster's (the first one to write wins). */
  private async keyGuard(): Promise<Guard> {
    return retryLostRaces(ATTEMPTS, async () => {
      const stored = await this.records.get<{ kid: string }>(keys.hostSecretKeyId());
      if (stored) {
        if (stored.record.kid !== this.key.kid) throw this.key.otherKey(stored.record.kid);
        return { key: keys.hostSecretKeyId(), revision: stored.revision };
      }
      // Written or not (another control plane's key may have won), the guard is what is read next.
      await commitTransaction(this.records.kv, { guards: [{ key: keys.hostSecretKeyId(), revision: '0' }], writes: [{ put: keys.hostSecretKeyId(), value: { kid: this.key.kid } }] });
      return LOST_RACE;
    }, () => new StrataError('OPERATION_IN_PROGRESS', 'the host-secret key is being registered; retry'));
  }
}
