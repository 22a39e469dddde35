// In-band authentication on this server's NVMe target (docs/in-band-auth.md). The agent keeps an
// X25519 key pair in its state directory (`host-auth.key`, 0600) and publishes the public half in
// etcd; the control plane seals the trusted hosts' DH-HMAC-CHAP secrets to it
// (/strata/in-band-auth/servers/<server>, lib/sealed-box.ts). This watches that record and the
// `in-band-authentication` flag and tells the data path what to apply:
// - disabled: no host entry has a key (hosts connect without authenticating);
// - enabled: every host entry of a volume gets its trusted host's secret as `dhchap_key` (and the
//   target's secret as `dhchap_ctrl_key` for bidirectional authentication); a host in an ACL that
//   is not trusted gets a random key nobody has, so it cannot connect; a volume open to any host
//   (ALLOW_ANY) admits the trusted hosts only. Enabled without a record sealed to this server's
//   key (it published the key after the last change): every volume host is locked out until the
//   control plane seals one (fail closed). Replication legs (node to node) are not host entries
//   of volumes and keep no key.
// TLS on NVMe/TCP (docs/nvme-tcp-tls.md) reaches the agent the same way, with the same key pair:
// the cluster's switch (/strata/nvme-tcp-tls/switch) and this server's sealed record of the TLS
// hosts' PSKs (/strata/nvme-tcp-tls/servers/<server>). Required: every volume port admits TLS
// 1.3 only (nvmet-plan.ts withHostAuth) and the PSKs go into the `.nvme` keyring (tls-keyring.ts,
// which this starts: agent/agent.ts only knows EtcdHostAuth). Required without a record sealed to
// this server: TLS ports and no PSK, so no host connects (fail closed).
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomDhchapSecret } from '../../../lib/contract/dhchap.js';
import { volumeNqnPrefix } from '../../../lib/contract/nqn.js';
import type { ClusterReader } from '../../../lib/etcd/cluster-store.js';
import type { StoreWatch } from '../../../lib/etcd/record-store.js';
import { SEALED_FEATURES } from '../../../lib/etcd/sealed-host-keys-store.js';
import { writeFileAtomic } from '../../../lib/files.js';
import type { Logger } from '../../../lib/logger.js';
import type { ServerBoxKeyRecord } from '../../../lib/records.js';
import { boxPublicKeyOf, newBoxKeyPair, open } from '../../../lib/sealed-box.js';
import type { HostAuthStore, SealedFeature } from './host-auth-store.js';
import { DEFAULT_NVMET_ROOT } from './nvmet-configfs.js';
import { TlsPskKeyring } from './tls-keyring.js';

export const HOST_AUTH_KEY_FILE = 'host-auth.key';

export interface HostKeys {
  /** nvmet `dhchap_key` ('' = none). */
  readonly key: string;
  /** nvmet `dhchap_ctrl_key` ('' = none). */
  readonly ctrlKey: string;
}

/** One feature as this server was told: on or off, and its hosts' secrets by NQN. */
interface SealedState<T> {
  readonly enabled: boolean;
  /** By host NQN (empty while failing closed). */
  readonly hosts: ReadonlyMap<string, T>;
}

export interface TlsState {
  /** Every volume port admits TLS 1.3 only. */
  readonly required: boolean;
  /** Host NQN → configured PSK (NVMeTLSkey-1:..). */
  readonly psks: ReadonlyMap<string, string>;
}

export interface HostAuthState extends SealedState<HostKeys> {
  /** TLS on NVMe/TCP; absent = not required. */
  readonly tls?: TlsState;
}

export const HOST_AUTH_DISABLED: HostAuthState = { enabled: false, hosts: new Map() };
const off = <T>(): SealedState<T> => ({ enabled: false, hosts: new Map() });

/** What the data path reads: the current state and a signal when it changes. */
export interface HostAuthSource {
  current(): HostAuthState;
  onChange(listener: () => void): void;
}

/** The key a host entry must have under `state` (volume hosts only). */
export function hostKeysFor(state: HostAuthState, hostNQN: string, lockedOut: string): HostKeys {
  if (!state.enabled) return { key: '', ctrlKey: '' };
  return state.hosts.get(hostNQN) ?? { key: lockedOut, ctrlKey: '' };
}

export class EtcdHostAuth implements HostAuthSource {
  private state: HostAuthState = HOST_AUTH_DISABLED;
  private readonly listeners = new Set<() => void>();
  private readonly watches: StoreWatch[] = [];
  private privateKeyPem = '';
  private stopped = false;
  private subsystemPrefix: string | undefined;
  private readonly keyring: TlsPskKeyring;

  constructor(
    private readonly options: {
      /** This server's box key and sealed records (host-auth-store.ts). */
      store: HostAuthStore;
      /** The cluster record (lib/etcd/cluster-store.ts): the volumes' NQN prefix for the TLS keyring. */
      cluster: ClusterReader;
      serverUUID: string;
      stateDir: string;
      logger: Logger;
      nvmetRoot?: string;
    },
  ) {
    this.keyring = new TlsPskKeyring({
      psks: () => (this.state.tls?.required ? this.state.tls.psks : undefined),
      subsystemPrefix: () => this.subsystemPrefix,
      nvmetRoot: options.nvmetRoot ?? DEFAULT_NVMET_ROOT,
      logger: options.logger,
    });
  }

  current(): HostAuthState {
    return this.state;
  }

  onChange(listener: () => void): void {
    this.listeners.add(listener);
  }

  /** Loads (or makes) the key pair, publishes it, reads the state and watches it. */
  async start(): Promise<void> {
    const path = join(this.options.stateDir, HOST_AUTH_KEY_FILE);
    if (!existsSync(path)) writeFileAtomic(path, newBoxKeyPair().privateKeyPem, 0o600);
    this.privateKeyPem = readFileSync(path, 'utf8');
    const publicKey = boxPublicKeyOf(this.privateKeyPem);
    const { store } = this.options;
    const published = await store.publishedBoxKey();
    if (published?.publicKey !== publicKey) {
      const record: ServerBoxKeyRecord = { serverUUID: this.options.serverUUID, publicKey, createdAt: new Date().toISOString() };
      await store.publishBoxKey(record);
    }
    this.watches.push(await store.watch(() => void this.refresh()));
    if (this.stopped) await this.stop();
    await this.refresh();
    if (!this.stopped) this.keyring.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.watches.splice(0).map((w) => w.cancel().catch(() => undefined)));
    await this.keyring.stop();
  }

  /** Re-reads both features' switches and this server's records. */
  async refresh(): Promise<void> {
    try {
      const [auth, tls, cluster] = await Promise.all([
        this.read<HostKeys>('inBandAuth'),
        this.read<string>('nvmeTcpTls'),
        this.options.cluster.read(),
      ]);
      const subsystemNQN = cluster?.subsystemNQN;
      if (subsystemNQN) this.subsystemPrefix = volumeNqnPrefix(subsystemNQN);
      this.set({ ...auth, ...(tls.enabled || tls.hosts.size > 0 ? { tls: { required: tls.enabled, psks: tls.hosts } } : {}) });
    } catch (err) {
      this.options.logger.warn({ err }, 'reading the in-band authentication and TLS state failed; keeping the last one');
    }
    void this.keyring.schedule();
  }

  private async read<T>(name: SealedFeature): Promise<SealedState<T>> {
    const feature = SEALED_FEATURES[name];
    const { switchEnabled: flagEnabled, record } = await this.options.store.sealed(name);
    const publicKey = boxPublicKeyOf(this.privateKeyPem);
    if (record && record.publicKey === publicKey) {
      try {
        const { hosts } = JSON.parse(open(this.privateKeyPem, record.box, this.options.serverUUID).toString('utf8')) as { hosts: Record<string, T> };
        // The record is written with the switch in one transaction; the switch alone may be
        // newer only while a change is in flight.
        return { enabled: record.enabled || flagEnabled, hosts: new Map(Object.entries(hosts)) };
      } catch (err) {
        this.options.logger.error({ err }, `the ${feature.what} record does not open with this server's key`);
      }
    }
    if (!flagEnabled) return off();
    this.options.logger.warn(`${feature.what} is on but no host keys are sealed to this server yet: every volume host is locked out`);
    return { enabled: true, hosts: new Map() };
  }

  private set(next: HostAuthState): void {
    const sameTls =
      (next.tls?.required ?? false) === (this.state.tls?.required ?? false) &&
      sameHosts(next.tls?.psks ?? new Map(), this.state.tls?.psks ?? new Map(), (a, b) => a === b);
    const same = next.enabled === this.state.enabled && sameHosts(next.hosts, this.state.hosts, (a, b) => a.key === b.key && a.ctrlKey === b.ctrlKey) && sameTls;
    if (same) return;
    this.state = next;
    this.options.logger.info({ enabled: next.enabled, trustedHosts: next.hosts.size, tlsRequired: next.tls?.required ?? false, tlsHosts: next.tls?.psks.size ?? 0 }, 'in-band authentication or TLS state changed');
    for (const listener of this.listeners) listener();
  }
}

function sameHosts<T>(a: ReadonlyMap<string, T>, b: ReadonlyMap<string, T>, same: (x: T, y: T) => boolean): boolean {
  return a.size === b.size && [...a].every(([nqn, v]) => b.has(nqn) && same(v, b.get(nqn)!));
}

/** A key no host has: given to untrusted hosts while in-band authentication is enabled (one per agent process). */
export const LOCKED_OUT_KEY = randomDhchapSecret();

/** What a host entry's key attributes need: writes for those that differ from `wanted` (nvmet root-relative paths). */
export async function hostKeyWrites(nvmetRoot: string, host: string, wanted: HostKeys): Promise<{ op: 'write'; path: string; value: string }[]> {
  const ops: { op: 'write'; path: string; value: string }[] = [];
  for (const [attr, value] of [['dhchap_key', wanted.key], ['dhchap_ctrl_key', wanted.ctrlKey]] as const) {
    const path = `hosts/${host}/${attr}`;
    let current = '';
    try {
      current = (await readFile(join(nvmetRoot, path), 'utf8')).replace(/\0/g, '').trim();
    } catch {
      /* a plain directory before the first write */
    }
    // An empty write does not reach configfs: a lone NUL clears a key (nvmet sees strlen 0).
    if (current !== value) ops.push({ op: 'write', path, value: value === '' ? '\0' : value });
  }
  return ops;
}
