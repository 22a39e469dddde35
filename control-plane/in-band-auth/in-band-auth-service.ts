// In-band authentication (DH-HMAC-CHAP, docs/in-band-auth.md): trusted hosts and their secrets
// per project, the cluster's enable/disable (also the `in-band-authentication` feature flag), and
// what each server's agent is told to apply. Every change is one etcd transaction, serialized on
// the in-band-auth generation key: the trusted host records (secrets encrypted with the control
// planes' host-secret key), the flag, and for every server that published its box key a fresh
// record of the host keys sealed to it (lib/sealed-box.ts) — so agents never see a half-applied
// change and etcd never holds a secret in the clear.
import { randomUUID } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import type { IOperation } from 'etcd3/lib/builder.js';
import { dhchapSecretProblem } from '../../lib/contract/dhchap.js';
import { hostNqnProblem } from '../../lib/contract/nqn.js';
import { keys } from '../../lib/etcd/keys.js';
import { RecordStore, type Versioned } from '../../lib/etcd/record-store.js';
import { errors, quote, StrataError } from '../../lib/errors.js';
import type { ServerBoxKeyRecord, ServerHostKeysRecord, TrustedHostRecord } from '../../lib/records.js';
import { seal } from '../../lib/sealed-box.js';
import type { FeatureFlagRecord } from '../feature-flags/feature-flags-store.js';
import type { KernelCapabilitiesService } from '../kernel-capabilities/kernel-capabilities-service.js';
import type { HostSecretKey } from './host-secret-key.js';

const FLAG = 'in-band-authentication';
const ATTEMPTS = 20;

/** A trusted host on the wire: never its secrets, only whether they are set. */
export interface TrustedHostWire {
  UUID: string;
  name: string;
  projectName: string;
  hostNQN: string;
  hasSecret: boolean;
  hasCtrlSecret: boolean;
  secretUpdatedAt: string;
  creationTime: string;
  ETag: string;
}

export interface TrustedHostInput {
  readonly name: string;
  readonly hostNQN: string;
  readonly secret: string;
  readonly ctrlSecret?: string;
}

export interface SecretsInput {
  readonly secret: string;
  /** undefined: unchanged; '': removed (no bidirectional authentication). */
  readonly ctrlSecret?: string;
}

/** Validates a DH-HMAC-CHAP secret field (400 naming the field, never echoing the secret). */
export function checkSecret(field: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') throw errors.invalid(`${field} is required: a DH-HMAC-CHAP secret (DHHC-1:..., nvme gen-dhchap-key)`);
  const problem = dhchapSecretProblem(value);
  if (problem) throw errors.invalid(`${field} is not a valid DH-HMAC-CHAP secret: ${problem}`);
  return value;
}

export function checkHostNqn(value: unknown): string {
  if (typeof value !== 'string') throw errors.invalid('hostNQN is required');
  const problem = hostNqnProblem(value);
  if (problem) throw errors.invalid(`hostNQN ${quote(value)}: ${problem}`);
  return value;
}

interface Snapshot {
  generation: string;
  flag: Versioned<FeatureFlagRecord> | null;
  hosts: Versioned<TrustedHostRecord>[];
  boxKeys: ServerBoxKeyRecord[];
}

export class InBandAuthService {
  private readonly records: RecordStore;

  constructor(
    private readonly etcd: Etcd3,
    private readonly key: HostSecretKey,
    private readonly capabilities: KernelCapabilitiesService,
    private readonly projectExists: (project: string) => Promise<boolean>,
  ) {
    this.records = new RecordStore(etcd);
  }

  async isEnabled(): Promise<boolean> {
    return (await this.records.get<FeatureFlagRecord>(keys.featureFlag(FLAG)))?.record.enabled ?? false;
  }

  async list(project?: string): Promise<TrustedHostWire[]> {
    if (project !== undefined) await this.requireProject(project);
    return (await this.records.list<TrustedHostRecord>(keys.trustedHostsPrefix(project))).map(toWire);
  }

  async get(project: string, name: string): Promise<TrustedHostWire> {
    return toWire(await this.stored(project, name));
  }

  /** The host's secrets, decrypted (a single GET by the project's admin; never in a list). */
  async secrets(project: string, name: string): Promise<{ name: string; hostNQN: string; secret: string; ctrlSecret: string }> {
    const stored = await this.stored(project, name);
    return { name, hostNQN: stored.record.hostNQN, ...this.open(stored.record) };
  }

  async create(project: string, input: TrustedHostInput): Promise<TrustedHostWire> {
    await this.requireProject(project);
    const now = new Date().toISOString();
    const record: TrustedHostRecord = {
      UUID: randomUUID(),
      name: input.name,
      projectName: project,
      hostNQN: input.hostNQN,
      secret: this.key.encrypt(input.secret, aad(project, input.name, 'secret')),
      ...(input.ctrlSecret ? { ctrlSecret: this.key.encrypt(input.ctrlSecret, aad(project, input.name, 'ctrlSecret')) } : {}),
      createdAt: now,
      secretUpdatedAt: now,
    };
    await this.change(async (s) => {
      if (s.hosts.some((h) => h.record.projectName === project && h.record.name === input.name)) throw errors.exists('trusted host', `${project}/${input.name}`);
      const other = s.hosts.find((h) => h.record.hostNQN === input.hostNQN);
      if (other) throw errors.exists('trusted host NQN', `${input.hostNQN} (trusted host ${other.record.projectName}/${other.record.name})`);
      return { hosts: [...s.hosts.map((h) => h.record), record], ops: [this.records.put(keys.trustedHost(project, record.name), record), this.records.put(keys.trustedHostNqn(record.hostNQN), { project, name: record.name })] };
    });
    return this.get(project, input.name);
  }

  /** Rotation: new connects need the new secret; connected hosts stay connected (docs/in-band-auth.md). */
  async rotate(project: string, name: string, input: SecretsInput, expectedRevision?: string): Promise<void> {
    await this.change(async (s) => {
      const current = s.hosts.find((h) => h.record.projectName === project && h.record.name === name);
      if (!current) throw errors.notFound('trusted host', `${project}/${name}`);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('trusted host', `${project}/${name}`);
      const { ctrlSecret: _old, ...rest } = current.record;
      const keepCtrl = input.ctrlSecret === undefined ? (current.record.ctrlSecret ? { ctrlSecret: current.record.ctrlSecret } : {}) : {};
      const record: TrustedHostRecord = {
        ...rest,
        ...keepCtrl,
        ...(input.ctrlSecret ? { ctrlSecret: this.key.encrypt(input.ctrlSecret, aad(project, name, 'ctrlSecret')) } : {}),
        secret: this.key.encrypt(input.secret, aad(project, name, 'secret')),
        secretUpdatedAt: new Date().toISOString(),
      };
      return { hosts: s.hosts.map((h) => (h === current ? record : h.record)), ops: [this.records.put(keys.trustedHost(project, name), record)] };
    });
  }

  async delete(project: string, name: string, expectedRevision?: string): Promise<void> {
    await this.change(async (s) => {
      const current = s.hosts.find((h) => h.record.projectName === project && h.record.name === name);
      if (!current) throw errors.notFound('trusted host', `${project}/${name}`);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('trusted host', `${project}/${name}`);
      const hosts = s.hosts.filter((h) => h !== current).map((h) => h.record);
      return { hosts, ops: [this.records.delete(keys.trustedHost(project, name)), this.records.delete(keys.trustedHostNqn(current.record.hostNQN))] };
    });
  }

  /**
   * Enables or disables in-band authentication cluster-wide (POST /cluster/inBandAuth/enable|
   * disable and the feature flag). Enabling needs a trusted host and every node's kernel able to
   * authenticate (KERNEL_CAPABILITY_MISSING naming the others). Idempotent. Returns whether it changed.
   */
  async setEnabled(enabled: boolean, actor: string): Promise<boolean> {
    if (enabled) await this.capabilities.require('nvmetInBandAuth', 'enable in-band authentication');
    let changed = false;
    await this.change(async (s) => {
      const was = s.flag?.record.enabled ?? false;
      if (was === enabled) return undefined;
      if (enabled && s.hosts.length === 0) {
        throw new StrataError('INVALID_STATE', 'cannot enable in-band authentication: no trusted hosts (POST /api/v2/projects/{project}/trustedHosts first): no host could connect');
      }
      changed = true;
      const flag: FeatureFlagRecord = { name: FLAG, enabled, updatedAt: new Date().toISOString(), updatedBy: actor };
      return { enabled, hosts: s.hosts.map((h) => h.record), ops: [this.records.put(keys.featureFlag(FLAG), flag)] };
    });
    return changed;
  }

  /** Seals the current state again for servers whose record is missing or sealed to an old key (leader task). */
  async resealStale(): Promise<number> {
    let sealed = 0;
    await this.change(async (s) => {
      const current = new Map((await this.records.list<ServerHostKeysRecord>(keys.serverHostKeysPrefix())).map((r) => [r.record.serverUUID, r.record]));
      const stale = s.boxKeys.filter((k) => current.get(k.serverUUID)?.publicKey !== k.publicKey);
      sealed = stale.length;
      if (stale.length === 0) return undefined;
      return { hosts: s.hosts.map((h) => h.record), ops: [], servers: stale };
    });
    return sealed;
  }

  // ---- internals ------------------------------------------------------------------------------

  private async stored(project: string, name: string): Promise<Versioned<TrustedHostRecord>> {
    await this.requireProject(project);
    const stored = await this.records.get<TrustedHostRecord>(keys.trustedHost(project, name));
    if (!stored) throw errors.notFound('trusted host', `${project}/${name}`);
    return stored;
  }

  private async requireProject(project: string): Promise<void> {
    if (!(await this.projectExists(project))) throw errors.notFound('project', project);
  }

  private open(record: TrustedHostRecord): { secret: string; ctrlSecret: string } {
    return {
      secret: this.key.decrypt(record.secret, aad(record.projectName, record.name, 'secret')),
      ctrlSecret: record.ctrlSecret ? this.key.decrypt(record.ctrlSecret, aad(record.projectName, record.name, 'ctrlSecret')) : '',
    };
  }

  private async snapshot(): Promise<Snapshot> {
    const [generation, flag, hosts, boxKeys] = await Promise.all([
      this.etcd.get(keys.inBandAuthGeneration()).exec().then((r) => r.kvs[0]?.mod_revision ?? '0'),
      this.records.get<FeatureFlagRecord>(keys.featureFlag(FLAG)),
      this.records.list<TrustedHostRecord>(keys.trustedHostsPrefix()),
      this.records.list<ServerBoxKeyRecord>(keys.serverBoxKeysPrefix()),
    ]);
    return { generation, flag, hosts, boxKeys: boxKeys.map((k) => k.record) };
  }

  /** The host keys every server is told, sealed to each server's key. */
  private sealedFor(servers: readonly ServerBoxKeyRecord[], enabled: boolean, hosts: readonly TrustedHostRecord[]): IOperation[] {
    const map: Record<string, { key: string; ctrlKey: string }> = {};
    for (const host of hosts) {
      const { secret, ctrlSecret } = this.open(host);
      map[host.hostNQN] = { key: secret, ctrlKey: ctrlSecret };
    }
    const plaintext = Buffer.from(JSON.stringify({ hosts: map }));
    return servers.map((server) => {
      const record: ServerHostKeysRecord = {
        serverUUID: server.serverUUID,
        enabled,
        publicKey: server.publicKey,
        box: seal(server.publicKey, plaintext, server.serverUUID),
        writtenAt: new Date().toISOString(),
      };
      return this.records.put(keys.serverHostKeys(server.serverUUID), record);
    });
  }

  /** Makes sure etcd names this control plane's key as the cluster's (the first one to write wins). */
  private async keyCompare(): Promise<[string, string]> {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const stored = await this.records.get<{ kid: string }>(keys.hostSecretKeyId());
      if (stored) {
        if (stored.record.kid !== this.key.kid) throw this.key.otherKey(stored.record.kid);
        return [keys.hostSecretKeyId(), stored.revision];
      }
      await this.records.commitIf([[keys.hostSecretKeyId(), '0']], [this.records.put(keys.hostSecretKeyId(), { kid: this.key.kid })]);
    }
    throw new StrataError('OPERATION_IN_PROGRESS', 'the host-secret key is being registered; retry');
  }

  /**
   * One serialized change: `decide` returns the trusted hosts after it, its own ops and (for a
   * flag change) the new enabled state, or undefined for nothing to do. The servers' sealed
   * records are rewritten in the same transaction.
   */
  private async change(
    decide: (s: Snapshot) => Promise<{ hosts: TrustedHostRecord[]; ops: IOperation[]; enabled?: boolean; servers?: ServerBoxKeyRecord[] } | undefined>,
  ): Promise<void> {
    const keyCompare = await this.keyCompare();
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const s = await this.snapshot();
      const outcome = await decide(s);
      if (!outcome) return;
      const enabled = outcome.enabled ?? s.flag?.record.enabled ?? false;
      const ops = [
        ...outcome.ops,
        ...this.sealedFor(outcome.servers ?? s.boxKeys, enabled, outcome.hosts),
        this.etcd.put(keys.inBandAuthGeneration()).value(String(Date.now())),
      ];
      if (await this.records.commitIf([[keys.inBandAuthGeneration(), s.generation], keyCompare], ops)) return;
    }
    throw new StrataError('OPERATION_IN_PROGRESS', 'in-band authentication is being changed by other requests; retry');
  }
}

function aad(project: string, name: string, field: string): string {
  return `trusted-host/${project}/${name}/${field}`;
}

function toWire(stored: Versioned<TrustedHostRecord>): TrustedHostWire {
  const r = stored.record;
  return {
    UUID: r.UUID,
    name: r.name,
    projectName: r.projectName,
    hostNQN: r.hostNQN,
    hasSecret: true,
    hasCtrlSecret: r.ctrlSecret !== undefined,
    secretUpdatedAt: r.secretUpdatedAt,
    creationTime: r.createdAt,
    ETag: stored.revision,
  };
}
