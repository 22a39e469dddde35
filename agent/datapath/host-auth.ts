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
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Etcd3, Watcher } from 'etcd3';
import { randomDhchapSecret } from '../../lib/contract/dhchap.js';
import { parseRecord } from '../../lib/etcd/client.js';
import { keys } from '../../lib/etcd/keys.js';
import { writeFileAtomic } from '../../lib/files.js';
import type { Logger } from '../../lib/logger.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord } from '../../lib/records.js';
import { boxPublicKeyOf, newBoxKeyPair, open } from '../../lib/sealed-box.js';

export const HOST_AUTH_KEY_FILE = 'host-auth.key';
const FLAG = 'in-band-authentication';

export interface HostKeys {
  /** nvmet `dhchap_key` ('' = none). */
  readonly key: string;
  /** nvmet `dhchap_ctrl_key` ('' = none). */
  readonly ctrlKey: string;
}

export interface HostAuthState {
  readonly enabled: boolean;
  /** Trusted hosts by NQN (empty while failing closed). */
  readonly hosts: ReadonlyMap<string, HostKeys>;
}

export const HOST_AUTH_DISABLED: HostAuthState = { enabled: false, hosts: new Map() };

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
  private readonly watchers: Watcher[] = [];
  private privateKeyPem = '';
  private stopped = false;

  constructor(
    private readonly options: { etcd: Etcd3; serverUUID: string; stateDir: string; logger: Logger },
  ) {}

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
    const etcd = this.options.etcd;
    const published = parseRecord<ServerBoxKeyRecord>('', await etcd.get(keys.serverBoxKey(this.options.serverUUID)).string());
    if (published?.publicKey !== publicKey) {
      const record: ServerBoxKeyRecord = { serverUUID: this.options.serverUUID, publicKey, createdAt: new Date().toISOString() };
      await etcd.put(keys.serverBoxKey(this.options.serverUUID)).value(JSON.stringify(record));
    }
    for (const key of [keys.serverHostKeys(this.options.serverUUID), keys.featureFlag(FLAG)]) {
      const watcher = await etcd.watch().key(key).create();
      this.watchers.push(watcher);
      watcher.on('data', () => void this.refresh());
      watcher.on('connected', () => void this.refresh());
    }
    if (this.stopped) await this.stop();
    await this.refresh();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.watchers.splice(0).map((w) => w.cancel().catch(() => undefined)));
  }

  /** Re-reads the flag and this server's record. */
  async refresh(): Promise<void> {
    const etcd = this.options.etcd;
    try {
      const [flagText, recordText] = await Promise.all([
        etcd.get(keys.featureFlag(FLAG)).string(),
        etcd.get(keys.serverHostKeys(this.options.serverUUID)).string(),
      ]);
      const flag = parseRecord<{ enabled: boolean }>('', flagText);
      const record = parseRecord<ServerHostKeysRecord>('', recordText);
      this.set(this.decide(flag?.enabled ?? false, record));
    } catch (err) {
      this.options.logger.warn({ err }, 'reading the in-band authentication state failed; keeping the last one');
    }
  }

  private decide(flagEnabled: boolean, record: ServerHostKeysRecord | null): HostAuthState {
    const publicKey = boxPublicKeyOf(this.privateKeyPem);
    if (record && record.publicKey === publicKey) {
      try {
        const { hosts } = JSON.parse(open(this.privateKeyPem, record.box, this.options.serverUUID).toString('utf8')) as { hosts: Record<string, HostKeys> };
        // The record is written with the flag in one transaction; the flag alone may be newer
        // only while a change is in flight.
        return { enabled: record.enabled || flagEnabled, hosts: new Map(Object.entries(hosts)) };
      } catch (err) {
        this.options.logger.error({ err }, 'the in-band authentication record does not open with this server\'s key');
      }
    }
    if (!flagEnabled) return HOST_AUTH_DISABLED;
    this.options.logger.warn('in-band authentication is enabled but no host keys are sealed to this server yet: every volume host is locked out');
    return { enabled: true, hosts: new Map() };
  }

  private set(next: HostAuthState): void {
    const same =
      next.enabled === this.state.enabled &&
      next.hosts.size === this.state.hosts.size &&
      [...next.hosts].every(([nqn, k]) => this.state.hosts.get(nqn)?.key === k.key && this.state.hosts.get(nqn)?.ctrlKey === k.ctrlKey);
    if (same) return;
    this.state = next;
    this.options.logger.info({ enabled: next.enabled, trustedHosts: next.hosts.size }, 'in-band authentication state changed');
    for (const listener of this.listeners) listener();
  }
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
