// The TLS PSKs of volume hosts in this server's `.nvme` keyring (docs/nvme-tcp-tls.md). With TLS
// required on volume ports, the kernel hands each new connection to tlshd, which looks up the PSK
// identity the host presents (`NVMe0R01 <host> <subsystem>`, `NVMe1R01 … <digest>`) among the
// keys of type `psk` in `.nvme`. A PSK is per host and per subsystem, so the keys follow what the
// kernel target really exports: for every Strata volume subsystem in configfs, one pair of keys
// (identity versions 0 and 1, lib/contract/nvme-tls-psk.ts) for each host it admits that has a
// PSK (every such host when the subsystem allows any host). Keys are added with `keyctl padd`
// (which replaces a key of the same description) and removed with `keyctl unlink`; both need
// only the keyring's permissions, which root holds on `.nvme`. Only keys naming a subsystem of
// this cluster are ever touched. A subsystem the data path just created gets its keys at the
// next pass (at most `intervalMs` later); a host that connects first fails its handshake and
// retries.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { deriveTlsPsks, parseTlsPsk } from '../../../lib/contract/nvme-tls-psk.js';
import type { Logger } from '../../../lib/logger.js';

const KEY_TYPE = 'psk';
const KEYRING = '.nvme';

export interface KeyringKey {
  readonly serial: string;
  readonly type: string;
  readonly description: string;
}

/** The kernel keyring as this agent uses it. */
export interface Keyring {
  /** Every key this process may view (/proc/keys). */
  list(): Promise<KeyringKey[]>;
  add(keyring: string, description: string, payload: Buffer): Promise<void>;
  unlink(keyring: string, serial: string): Promise<void>;
}

/** /proc/keys line: serial flags usage timeout perm uid gid type description[: summary]. */
export function parseProcKeys(text: string): KeyringKey[] {
  const keys: KeyringKey[] = [];
  for (const line of text.split('\n')) {
    const match = /^([0-9a-f]+)\s+\S+\s+\d+\s+\S+\s+[0-9a-f]+\s+\d+\s+\d+\s+(\S+)\s+(.*)$/.exec(line);
    if (!match) continue;
    const [, serial, type, rest] = match as unknown as [string, string, string, string];
    // The summary after the description: a keyring's "empty"/"<n>", a psk's payload length.
    keys.push({ serial: `0x${serial}`, type, description: rest.replace(/: [^:]*$/, '') });
  }
  return keys;
}

/** keyctl(1) from keyutils; the payload goes through stdin (it is binary). */
export class KeyctlKeyring implements Keyring {
  constructor(private readonly procKeys = '/proc/keys') {}

  async list(): Promise<KeyringKey[]> {
    return parseProcKeys(await fs.readFile(this.procKeys, 'utf8'));
  }

  add(keyring: string, description: string, payload: Buffer): Promise<void> {
    return keyctl(['padd', KEY_TYPE, description, keyring], payload);
  }

  unlink(keyring: string, serial: string): Promise<void> {
    return keyctl(['unlink', serial, keyring]);
  }
}

function keyctl(args: string[], input?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile('keyctl', args, { timeout: 10_000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`keyctl ${args[0]}: ${String(stderr).trim() || err.message}`));
      else resolve();
    });
    child.stdin?.on('error', () => {
      /* keyctl may exit before reading: its exit status tells */
    });
    child.stdin?.end(input ?? Buffer.alloc(0));
  });
}

export interface TlsKeyringOptions {
  /** Host NQN → configured PSK, or undefined while TLS is not required (then no key is kept). */
  readonly psks: () => ReadonlyMap<string, string> | undefined;
  /** `<cluster subsystem NQN>:vol:`, or undefined while unknown (nothing is touched). */
  readonly subsystemPrefix: () => string | undefined;
  readonly nvmetRoot: string;
  readonly keyring?: Keyring;
  readonly logger: Logger;
  readonly intervalMs?: number;
}

export class TlsPskKeyring {
  private readonly keyring: Keyring;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** Identity → hash of the payload this process put there (unknown after a restart: re-added once). */
  private readonly inserted = new Map<string, string>();

  constructor(private readonly options: TlsKeyringOptions) {
    this.keyring = options.keyring ?? new KeyctlKeyring();
  }

  /** Passes every `intervalMs` while TLS is required (new subsystems); on every state change otherwise (the caller's schedule()). */
  start(): void {
    this.timer = setInterval(() => {
      if (this.options.psks() !== undefined) void this.schedule();
    }, this.options.intervalMs ?? 1000);
    void this.schedule();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One pass after the running one (passes never overlap). */
  schedule(): Promise<void> {
    this.running = this.running.then(() => this.sync()).catch((err: unknown) => this.options.logger.warn({ err: (err as Error).message }, 'updating the TLS PSKs in the .nvme keyring failed; will retry'));
    return this.running;
  }

  /** Makes the keyring hold exactly the wanted keys of this cluster's subsystems. */
  async sync(): Promise<void> {
    const prefix = this.options.subsystemPrefix();
    if (prefix === undefined) return;
    const psks = this.options.psks();
    const wanted = psks && psks.size > 0 ? await this.wanted(prefix, psks) : new Map<string, Buffer>();
    const keys = await this.keyring.list();
    const ours = keys.filter((k) => k.type === KEY_TYPE && subsystemOfIdentity(k.description)?.startsWith(prefix));
    if (wanted.size === 0 && ours.length === 0) return;
    const keyring = keys.find((k) => k.type === 'keyring' && k.description === KEYRING);
    if (!keyring) throw new Error(`no ${KEYRING} keyring in /proc/keys (is nvme-keyring loaded?)`);
    let added = 0;
    let removed = 0;
    for (const [identity, payload] of wanted) {
      const hash = createHash('sha256').update(payload).digest('hex');
      if (this.inserted.get(identity) === hash && ours.some((k) => k.description === identity)) continue;
      await this.keyring.add(keyring.serial, identity, payload);
      this.inserted.set(identity, hash);
      added += 1;
    }
    for (const key of ours) {
      if (wanted.has(key.description)) continue;
      await this.keyring.unlink(keyring.serial, key.serial);
      this.inserted.delete(key.description);
      removed += 1;
    }
    if (added + removed > 0) this.options.logger.info({ added, removed, keys: wanted.size }, 'TLS PSKs in the .nvme keyring updated');
  }

  /** Identity → TLS PSK for every (admitted host with a PSK, volume subsystem) of the kernel target. */
  private async wanted(prefix: string, psks: ReadonlyMap<string, string>): Promise<Map<string, Buffer>> {
    const subsystemsDir = join(this.options.nvmetRoot, 'subsystems');
    const wanted = new Map<string, Buffer>();
    const subsystems = (await fs.readdir(subsystemsDir).catch(() => [] as string[])).filter((nqn) => nqn.startsWith(prefix) && !nqn.includes(':rep:'));
    for (const nqn of subsystems) {
      const anyHost = (await fs.readFile(join(subsystemsDir, nqn, 'attr_allow_any_host'), 'utf8').catch(() => '0')).trim() === '1';
      const hosts = anyHost ? [...psks.keys()] : await fs.readdir(join(subsystemsDir, nqn, 'allowed_hosts')).catch(() => [] as string[]);
      for (const host of hosts) {
        const psk = psks.get(host);
        if (psk === undefined) continue;
        for (const { identity, psk: payload } of deriveTlsPsks(parseTlsPsk(psk), host, nqn)) wanted.set(identity, payload);
      }
    }
    return wanted;
  }
}

/** The subsystem NQN a PSK identity names (`NVMe<v>R<hh> <host> <subsystem>[ <digest>]`). */
export function subsystemOfIdentity(identity: string): string | undefined {
  const parts = identity.split(' ');
  return /^NVMe[01]R0[12]$/.test(parts[0] ?? '') ? parts[2] : undefined;
}
