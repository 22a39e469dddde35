// TLS on NVMe/TCP (docs/nvme-tcp-tls.md, a Strata extension): TLS hosts (a host NQN and its
// configured PSK, cluster-wide), and the cluster's switch that makes every volume port admit TLS
// 1.3 connections only. PSKs are encrypted with the control planes' host-secret key and reach each
// server's agent sealed to its key, in the same transaction as the change
// (lib/etcd/sealed-host-keys-store.ts, as in-band authentication's secrets).
import { randomUUID } from 'node:crypto';
import { tlsPskProblem } from '../../lib/contract/nvme-tls-psk.js';
import type { Versioned } from '../../lib/etcd/record-store.js';
import { errors, StrataError } from '../../lib/errors.js';
import type { TlsHostRecord } from '../../lib/records.js';
import type { HostSecretKey } from '../in-band-auth/host-secret-key.js';
import type { KernelCapabilitiesService } from '../kernel-capabilities/kernel-capabilities-service.js';
import type { TlsHostStore } from './tls-host-store.js';

/** A TLS host on the wire: never its PSK. */
export interface TlsHostWire {
  UUID: string;
  name: string;
  hostNQN: string;
  hasPSK: boolean;
  pskUpdatedAt: string;
  creationTime: string;
  ETag: string;
}

export interface TlsHostInput {
  readonly name: string;
  readonly hostNQN: string;
  readonly psk: string;
}

export type TlsMode = 'Required' | 'Disabled';

/** Validates a configured PSK field (400 naming the field, never echoing the key). */
export function checkPsk(value: unknown): string {
  if (typeof value !== 'string' || value === '') throw errors.invalid('psk is required: a configured TLS PSK (NVMeTLSkey-1:..., nvme gen-tls-key)');
  const problem = tlsPskProblem(value);
  if (problem) throw errors.invalid(`psk is not a valid TLS PSK: ${problem}`);
  return value;
}

export class NvmeTcpTlsService {
  /** `store` is made with this service's `open` (TlsHostStore's constructor). */
  constructor(
    private readonly store: TlsHostStore,
    private readonly key: HostSecretKey,
    private readonly capabilities: KernelCapabilitiesService,
  ) {}

  /** A host's PSK in the clear, for the records sealed to each server. */
  open(record: TlsHostRecord): string {
    return this.key.decrypt(record.psk, aad(record.name));
  }

  async mode(): Promise<TlsMode> {
    return (await this.store.isRequired()) ? 'Required' : 'Disabled';
  }

  async list(): Promise<TlsHostWire[]> {
    return (await this.store.list()).map(toWire);
  }

  async get(name: string): Promise<TlsHostWire> {
    return toWire(await this.stored(name));
  }

  /** The host's PSK, decrypted (one host at a time, cluster admin; never in a list). */
  async psk(name: string): Promise<{ name: string; hostNQN: string; psk: string }> {
    const stored = await this.stored(name);
    return { name, hostNQN: stored.record.hostNQN, psk: this.open(stored.record) };
  }

  async create(input: TlsHostInput): Promise<TlsHostWire> {
    const now = new Date().toISOString();
    const record: TlsHostRecord = { UUID: randomUUID(), name: input.name, hostNQN: input.hostNQN, psk: this.key.encrypt(input.psk, aad(input.name)), createdAt: now, pskUpdatedAt: now };
    await this.store.change((s) => {
      if (s.hosts.some((h) => h.record.name === input.name)) throw errors.exists('TLS host', input.name);
      const other = s.hosts.find((h) => h.record.hostNQN === input.hostNQN);
      if (other) throw errors.exists('TLS host NQN', `${input.hostNQN} (TLS host ${other.record.name})`);
      return { add: record };
    });
    return this.get(input.name);
  }

  /** Rotation: new connections need the new PSK; established TLS sessions are not renegotiated. */
  async rotate(name: string, psk: string, expectedRevision?: string): Promise<void> {
    await this.store.change((s) => {
      const current = this.current(s.hosts, name, expectedRevision);
      return { replace: { ...current.record, psk: this.key.encrypt(psk, aad(name)), pskUpdatedAt: new Date().toISOString() } };
    });
  }

  async delete(name: string, expectedRevision?: string): Promise<void> {
    await this.store.change((s) => ({ remove: this.current(s.hosts, name, expectedRevision).record }));
  }

  /**
   * Requires TLS on every volume port, or stops requiring it. Requiring needs a TLS host and every
   * node able to do it: the kernel's NVMe/TCP TLS and a running tlshd (KERNEL_CAPABILITY_MISSING
   * naming the others). Idempotent; returns whether it changed.
   */
  async setRequired(required: boolean, actor: string): Promise<boolean> {
    if (required) {
      await this.capabilities.require('nvmeTcpTls', 'require TLS on NVMe/TCP');
      await this.capabilities.require('tlshd', 'require TLS on NVMe/TCP');
    }
    let changed = false;
    await this.store.change((s) => {
      if ((s.switch?.record.enabled ?? false) === required) return undefined;
      if (required && s.hosts.length === 0) {
        throw new StrataError('INVALID_STATE', 'cannot require TLS on NVMe/TCP: no TLS hosts (POST /api/v2/tlsHosts first): no host could connect');
      }
      changed = true;
      return { enabled: required, actor };
    });
    return changed;
  }

  resealStale(): Promise<number> {
    return this.store.resealStale();
  }

  private current(hosts: readonly Versioned<TlsHostRecord>[], name: string, expectedRevision: string | undefined): Versioned<TlsHostRecord> {
    const current = hosts.find((h) => h.record.name === name);
    if (!current) throw errors.notFound('TLS host', name);
    if (expectedRevision !== undefined && expectedRevision !== current.revision) throw errors.etagMismatch('TLS host', name);
    return current;
  }

  private async stored(name: string): Promise<Versioned<TlsHostRecord>> {
    const stored = await this.store.get(name);
    if (!stored) throw errors.notFound('TLS host', name);
    return stored;
  }
}

function aad(name: string): string {
  return `tls-host/${name}/psk`;
}

function toWire(stored: Versioned<TlsHostRecord>): TlsHostWire {
  const r = stored.record;
  return { UUID: r.UUID, name: r.name, hostNQN: r.hostNQN, hasPSK: true, pskUpdatedAt: r.pskUpdatedAt, creationTime: r.createdAt, ETag: stored.revision };
}
