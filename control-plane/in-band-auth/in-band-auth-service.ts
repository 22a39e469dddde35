// In-band authentication (DH-HMAC-CHAP, docs/in-band-auth.md): trusted hosts and their secrets
// per project, the cluster's enable/disable (also the `in-band-authentication` feature flag), and
// what each server's agent is told to apply. Every change is one etcd transaction
// (trusted-host-store.ts, over lib/etcd/sealed-host-keys-store.ts): the trusted host records (secrets encrypted with the
// control planes' host-secret key), the flag, and for every server that published its box key a
// fresh record of the host keys sealed to it — so agents never see a half-applied change and etcd
// never holds a secret in the clear.
import { randomUUID } from 'node:crypto';
import { dhchapSecretProblem } from '../../lib/contract/dhchap.js';
import { hostNqnProblem } from '../../lib/contract/nqn.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import { errors, quote, StrataError } from '../../lib/errors.js';
import type { TrustedHostRecord } from '../../lib/records.js';
import type { KernelCapabilitiesService } from '../kernel-capabilities/kernel-capabilities-service.js';
import type { HostSecretKey } from './host-secret-key.js';
import type { TrustedHostStore } from './trusted-host-store.js';


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

export class InBandAuthService {
  /** `store` is made with this service's `open` (TrustedHostStore's constructor). */
  constructor(
    private readonly store: TrustedHostStore,
    private readonly key: HostSecretKey,
    private readonly capabilities: KernelCapabilitiesService,
    private readonly projectExists: (project: string) => Promise<boolean>,
  ) {}

  isEnabled(): Promise<boolean> {
    return this.store.isEnabled();
  }

  async list(project?: string): Promise<TrustedHostWire[]> {
    if (project !== undefined) await this.requireProject(project);
    return (await this.store.list(project)).map(toWire);
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
    await this.store.change((s) => {
      if (s.hosts.some((h) => h.record.projectName === project && h.record.name === input.name)) throw errors.exists('trusted host', `${project}/${input.name}`);
      const other = s.hosts.find((h) => h.record.hostNQN === input.hostNQN);
      if (other) throw errors.exists('trusted host NQN', `${input.hostNQN} (trusted host ${other.record.projectName}/${other.record.name})`);
      return { add: record };
    });
    return this.get(project, input.name);
  }

  /** Rotation: new connects need the new secret; connected hosts stay connected (docs/in-band-auth.md). */
  async rotate(project: string, name: string, input: SecretsInput, expectedRevision?: string): Promise<void> {
    await this.store.change((s) => {
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
      return { replace: record };
    });
  }

  async delete(project: string, name: string, expectedRevision?: string): Promise<void> {
    await this.store.change((s) => {
      const current = s.hosts.find((h) => h.record.projectName === project && h.record.name === name);
      if (!current) throw errors.notFound('trusted host', `${project}/${name}`);
      if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('trusted host', `${project}/${name}`);
      return { remove: current.record };
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
    await this.store.change((s) => {
      const was = s.switch?.record.enabled ?? false;
      if (was === enabled) return undefined;
      if (enabled && s.hosts.length === 0) {
        throw new StrataError('INVALID_STATE', 'cannot enable in-band authentication: no trusted hosts (POST /api/v2/projects/{project}/trustedHosts first): no host could connect');
      }
      changed = true;
      return { enabled, actor };
    });
    return changed;
  }

  /** Seals the current state again for servers whose record is missing or sealed to an old key (leader task). */
  resealStale(): Promise<number> {
    return this.store.resealStale();
  }

  // ---- internals ------------------------------------------------------------------------------

  private async stored(project: string, name: string): Promise<Versioned<TrustedHostRecord>> {
    await this.requireProject(project);
    const stored = await this.store.get(project, name);
    if (!stored) throw errors.notFound('trusted host', `${project}/${name}`);
    return stored;
  }

  private async requireProject(project: string): Promise<void> {
    if (!(await this.projectExists(project))) throw errors.notFound('project', project);
  }

  /** The host's secrets, decrypted (for the API's single GET and the records sealed to servers). */
  open(record: TrustedHostRecord): { secret: string; ctrlSecret: string } {
    return {
      secret: this.key.decrypt(record.secret, aad(record.projectName, record.name, 'secret')),
      ctrlSecret: record.ctrlSecret ? this.key.decrypt(record.ctrlSecret, aad(record.projectName, record.name, 'ctrlSecret')) : '',
    };
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
